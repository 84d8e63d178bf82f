#!/usr/bin/env python3
"""Generate the redaction corpora: secrets.jsonl and ordinary.jsonl.

Deterministic: one seeded RNG, no clock, no environment. Re-running rewrites byte-identical
files. Every secret is synthetic (random characters in the provider's real shape).

    python3 tests/corpus/generate.py          # write both files, validate, print counts
    python3 tests/corpus/generate.py --check  # only validate the files on disk
"""

import base64
import datetime
import json
import re
import string
import struct
import sys
import zlib
from collections import Counter
from pathlib import Path

import random

SEED = 0x6D637470  # "mcpt"
R = random.Random(SEED)
HERE = Path(__file__).resolve().parent

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIG = string.digits
ALNUM = UPPER + LOWER + DIG
ALPHA = UPPER + LOWER
HEX = "0123456789abcdef"
HEXU = "0123456789ABCDEF"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
B32AWS = UPPER + "234567"
UPPERDIG = UPPER + DIG
LOWERDIG = LOWER + DIG
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
BECH32U = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"


# --------------------------------------------------------------------------------------------
# random helpers (all through R)


def rs(alphabet, n):
    return "".join(R.choice(alphabet) for _ in range(n))


def rbytes(n):
    if n == 0:
        return b""
    return R.getrandbits(8 * n).to_bytes(n, "little")


def digits(n):
    return R.choice("123456789") + rs(DIG, n - 1)


def b64(b):
    return base64.b64encode(b).decode()


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def hexs(n):
    return rs(HEX, n)


def uuid4():
    h = hexs(32)
    h = h[:12] + "4" + h[13:16] + R.choice("89ab") + h[17:]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7(ms=None):
    ms = ms if ms is not None else rdt_ms()
    h = f"{ms:012x}" + "7" + hexs(3) + R.choice("89ab") + hexs(15)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


T0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)


def rdt():
    return T0 + datetime.timedelta(seconds=R.randint(0, 86400 * 900), milliseconds=R.randint(0, 999))


def rdt_ms():
    d = rdt()
    return int(d.timestamp() * 1000)


def ts():
    d = rdt()
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def ts_s():
    return rdt().strftime("%Y-%m-%dT%H:%M:%SZ")


def pw(n=None):
    """A random password safe in shell, YAML (quoted), URLs are handled by pw_url."""
    n = n or R.randint(14, 28)
    chars = ALNUM + "-_.+=^~%@"
    while True:
        p = R.choice(ALPHA) + rs(chars, n - 1)
        if any(c in DIG for c in p) and any(c in UPPER for c in p) and any(c in LOWER for c in p):
            return p


def pw_url(n=None):
    n = n or R.randint(14, 28)
    while True:
        p = R.choice(ALPHA) + rs(ALNUM + "-._~", n - 1)
        if any(c in DIG for c in p) and any(c in UPPER for c in p):
            return p


def pw_simple(n=None):
    n = n or R.randint(12, 20)
    while True:
        p = rs(ALNUM, n)
        if any(c in DIG for c in p) and any(c in UPPER for c in p) and any(c in LOWER for c in p):
            return p


def fill(tpl, s):
    out = tpl.replace("@S@", s)
    while "@TS@" in out:
        out = out.replace("@TS@", ts(), 1)
    while "@RID@" in out:
        out = out.replace("@RID@", hexs(16), 1)
    return out


# --------------------------------------------------------------------------------------------
# DER / PEM builders (structurally faithful headers, random contents)


def der_len(n):
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def der(tag, content):
    return bytes([tag]) + der_len(len(content)) + content


def der_int_bytes(nbytes, top_bit=True):
    b = bytearray(rbytes(nbytes))
    if top_bit:
        b[0] |= 0x80
    else:
        b[0] = (b[0] & 0x7F) | 0x40
    b = bytes(b)
    if b[0] & 0x80:
        b = b"\x00" + b
    return der(0x02, b)


def der_small_int(v):
    b = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return der(0x02, b)


def rsa_pkcs1_der(bits=2048):
    nb = bits // 8
    hb = nb // 2
    parts = [
        der_small_int(0),
        der_int_bytes(nb),  # n
        der_small_int(65537),  # e
        der_int_bytes(nb, top_bit=False),  # d
        der_int_bytes(hb),  # p
        der_int_bytes(hb),  # q
        der_int_bytes(hb, top_bit=False),  # dp
        der_int_bytes(hb, top_bit=False),  # dq
        der_int_bytes(hb, top_bit=False),  # qinv
    ]
    return der(0x30, b"".join(parts))


OID_RSA = bytes.fromhex("06092a864886f70d0101010500")  # rsaEncryption + NULL


def pkcs8_rsa_der(bits=2048):
    inner = rsa_pkcs1_der(bits)
    return der(0x30, der_small_int(0) + der(0x30, OID_RSA) + der(0x04, inner))


def pkcs8_ed25519_der():
    return bytes.fromhex("302e020100300506032b657004220420") + rbytes(32)


def ec_p256_der():
    return (
        bytes.fromhex("30770201010420")
        + rbytes(32)
        + bytes.fromhex("a00a06082a8648ce3d030107a144034200")
        + b"\x04"
        + rbytes(64)
    )


def ec_p384_pkcs8_der():
    # PKCS#8 wrapping a SEC1 P-384 key
    sec1 = der(
        0x30,
        der_small_int(1)
        + der(0x04, rbytes(48))
        + der(0xA1, der(0x03, b"\x00\x04" + rbytes(96))),
    )
    alg = der(0x30, bytes.fromhex("06072a8648ce3d0201") + bytes.fromhex("06052b81040022"))
    return der(0x30, der_small_int(0) + alg + der(0x04, sec1))


def encrypted_pkcs8_der():
    pbkdf2 = der(
        0x30,
        bytes.fromhex("06092a864886f70d01050c")
        + der(
            0x30,
            der(0x04, rbytes(16))
            + der_small_int(2048)
            + der(0x30, bytes.fromhex("06082a864886f70d02090500")),
        ),
    )
    aes = der(0x30, bytes.fromhex("060960864801650304012a") + der(0x04, rbytes(16)))
    alg = der(0x30, bytes.fromhex("06092a864886f70d01050d") + der(0x30, pbkdf2 + aes))
    return der(0x30, alg + der(0x04, rbytes(1216)))


def wrap(s, width):
    return [s[i : i + width] for i in range(0, len(s), width)]


def pem(label, body, width=64, headers=None):
    lines = [f"-----BEGIN {label}-----"]
    if headers:
        lines += headers + [""]
    lines += wrap(b64(body), width)
    lines.append(f"-----END {label}-----")
    return "\n".join(lines)


def sshstr(b):
    return struct.pack(">I", len(b)) + b


def openssh_unencrypted(pubblob, sec):
    """An unencrypted `openssh-key-v1` private key file: one key, its private section padded."""
    i = 1
    while len(sec) % 8:
        sec += bytes([i])
        i += 1
    body = (
        b"openssh-key-v1\x00"
        + sshstr(b"none")
        + sshstr(b"none")
        + sshstr(b"")
        + struct.pack(">I", 1)
        + sshstr(pubblob)
        + sshstr(sec)
    )
    return pem("OPENSSH PRIVATE KEY", body, width=70)


def openssh_ed25519(comment):
    pub = rbytes(32)
    priv = rbytes(32)
    pubblob = sshstr(b"ssh-ed25519") + sshstr(pub)
    check = rbytes(4)
    sec = check + check + sshstr(b"ssh-ed25519") + sshstr(pub) + sshstr(priv + pub) + sshstr(comment.encode())
    return openssh_unencrypted(pubblob, sec), pub


def mpint(nbytes):
    b = bytearray(rbytes(nbytes))
    b[0] |= 0x80
    return sshstr(b"\x00" + bytes(b))


def openssh_rsa(comment, bits=3072):
    nb = bits // 8
    e = sshstr(b"\x01\x00\x01")
    n = mpint(nb)
    pubblob = sshstr(b"ssh-rsa") + e + n
    check = rbytes(4)
    sec = (
        check
        + check
        + sshstr(b"ssh-rsa")
        + n
        + e
        + mpint(nb)
        + mpint(nb // 2)
        + mpint(nb // 2)
        + mpint(nb // 2)
        + sshstr(comment.encode())
    )
    return openssh_unencrypted(pubblob, sec)


def openssh_encrypted_ed25519():
    pub = rbytes(32)
    pubblob = sshstr(b"ssh-ed25519") + sshstr(pub)
    kdf = sshstr(rbytes(16)) + struct.pack(">I", 16)
    body = (
        b"openssh-key-v1\x00"
        + sshstr(b"aes256-ctr")
        + sshstr(b"bcrypt")
        + sshstr(kdf)
        + struct.pack(">I", 1)
        + sshstr(pubblob)
        + sshstr(rbytes(144))
    )
    return pem("OPENSSH PRIVATE KEY", body, width=70)


def crc24(data):
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def pgp_private_block():
    body = b"\x95\x03\xc6\x04" + struct.pack(">I", rdt_ms() // 1000) + b"\x16\x09\x2b\x06\x01\x04\x01\xda\x47\x0f\x01" + rbytes(940)
    lines = ["-----BEGIN PGP PRIVATE KEY BLOCK-----", ""]
    lines += wrap(b64(body), 64)
    lines.append("=" + b64(crc24(body).to_bytes(3, "big")))
    lines.append("-----END PGP PRIVATE KEY BLOCK-----")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# secrets

SECRETS = []
FORMAT_RE = {}  # format -> regex the bare secret must fullmatch (prefixed formats only)


def add(fmt, secret, text, note=None):
    assert secret, fmt
    assert secret in text, (fmt, secret, text)
    e = {"format": fmt, "secret": secret, "text": text}
    if note:
        e["note"] = note
    SECRETS.append(e)


def each(fmt, gen, templates, regex=None, note=None):
    """One entry per template, each with a fresh secret from `gen`: a template is a text with
    @S@ (see `fill`) or a function from the secret to the text."""
    if regex:
        FORMAT_RE[fmt] = regex
    for tpl in templates:
        s = gen()
        add(fmt, s, tpl(s) if callable(tpl) else fill(tpl, s), note)


def openai(kind):
    if kind == "legacy":
        return "sk-" + rs(ALNUM, 20) + "T3BlbkFJ" + rs(ALNUM, 20)
    return f"sk-{kind}-" + rs(B64URL, 74) + "T3BlbkFJ" + rs(B64URL, 74)


def openai_org():
    return "org-" + rs(ALNUM, 24)


def gen_secrets():
    # ---------------- OpenAI
    each("openai/sk-legacy", lambda: openai("legacy"), [
        "OPENAI_API_KEY=@S@",
        'openai.api_key = "@S@"',
        "@TS@ WARN llm.client: retrying (attempt 2/5) after 429 Too Many Requests, api_key=@S@",
    ], r"sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}")
    each("openai/sk-proj", lambda: openai("proj"), [
        "@S@",
        'curl https://api.openai.com/v1/chat/completions -H "Content-Type: application/json" '
        '-H "Authorization: Bearer @S@" -d \'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"ping"}]}\'',
        '{"mcpServers": {"openai-tools": {"command": "uvx", "args": ["openai-mcp"], "env": {"OPENAI_API_KEY": "@S@"}}}}',
        'client = OpenAI(api_key="@S@", organization="' + openai_org() + '")',
    ], r"sk-proj-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}")
    each("openai/sk-svcacct", lambda: openai("svcacct"), [
        'Created service account "ci-evals". API key: @S@ (this is the only time it will be shown)',
        "export OPENAI_API_KEY='@S@'",
    ], r"sk-svcacct-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}")
    each("openai/sk-admin", lambda: openai("admin"), [
        "Authorization: Bearer @S@",
        "OPENAI_ADMIN_KEY=@S@  # usage exporter, read-only scope",
    ], r"sk-admin-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}")

    # ---------------- Anthropic
    ant = lambda kind: f"sk-ant-{kind}-" + rs(B64URL, 93) + "AA"
    each("anthropic/sk-ant-api03", lambda: ant("api03"), [
        "@S@",
        "ANTHROPIC_API_KEY=@S@",
        "x-api-key: @S@",
        "claude mcp add-json reviewer '{\"command\":\"npx\",\"args\":[\"-y\",\"@acme/review-mcp\"],"
        "\"env\":{\"ANTHROPIC_API_KEY\":\"@S@\"}}'",
        'client = anthropic.Anthropic(api_key="@S@")',
    ], r"sk-ant-api03-[A-Za-z0-9_-]{93}AA")
    each("anthropic/sk-ant-admin01", lambda: ant("admin01"), [
        'curl https://api.anthropic.com/v1/organizations/api_keys -H "x-api-key: @S@" -H "anthropic-version: 2023-06-01"',
        "Admin key created for workspace Default: @S@",
    ], r"sk-ant-admin01-[A-Za-z0-9_-]{93}AA")
    each("anthropic/sk-ant-oat01", lambda: ant("oat01"), [
        "CLAUDE_CODE_OAUTH_TOKEN=@S@",
    ], r"sk-ant-oat01-[A-Za-z0-9_-]{93}AA", note="Claude Code OAuth token (setup-token output)")

    # ---------------- GitHub
    gh = lambda p: lambda: p + rs(ALNUM, 36)
    each("github/ghp", gh("ghp_"), [
        "@S@",
        "git clone https://@S@@github.com/acme/infra.git",
        "GITHUB_PERSONAL_ACCESS_TOKEN=@S@",
    ], r"ghp_[A-Za-z0-9]{36}")
    each("github/gho", gh("gho_"), [
        "Authorization: token @S@",
        '{"access_token":"@S@","token_type":"bearer","scope":"repo,gist"}',
    ], r"gho_[A-Za-z0-9]{36}")
    each("github/ghu", gh("ghu_"), [
        "echo @S@ | gh auth login --with-token",
        "@TS@ DEBUG github-app: user-to-server token @S@ expires in 28800s",
    ], r"ghu_[A-Za-z0-9]{36}")
    each("github/ghs", gh("ghs_"), [
        "https://x-access-token:@S@@github.com/acme/api.git",
        "@TS@ INFO installation 4810233: minted token @S@ for acme/api (expires in 1h)",
    ], r"ghs_[A-Za-z0-9]{36}")
    each("github/ghr", gh("ghr_"), [
        "refresh_token=@S@&grant_type=refresh_token&client_id=Iv1." + hexs(16),
        "@S@",
    ], r"ghr_[A-Za-z0-9]{76}|ghr_[A-Za-z0-9]{36}")
    each("github/github_pat", lambda: "github_pat_" + rs(ALNUM, 22) + "_" + rs(ALNUM, 59), [
        "@S@",
        "//npm.pkg.github.com/:_authToken=@S@",
        "GH_TOKEN=@S@ gh pr list --repo acme/web --state open",
    ], r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}")

    # ---------------- GitLab
    each("gitlab/glpat", lambda: "glpat-" + rs(B64URL, 20), [
        "PRIVATE-TOKEN: @S@",
        "git remote set-url origin https://oauth2:@S@@gitlab.com/acme/platform.git",
        "@S@",
        "GITLAB_PERSONAL_ACCESS_TOKEN=@S@",
    ], r"glpat-[A-Za-z0-9_-]{20}")
    each("gitlab/glrt", lambda: "glrt-" + rs(B64URL, 20), [
        "gitlab-runner register --non-interactive --url https://gitlab.com --token @S@ --executor docker",
    ], r"glrt-[A-Za-z0-9_-]{20}")
    each("gitlab/glptt", lambda: "glptt-" + hexs(40), [
        "curl -X POST --fail -F token=@S@ -F ref=main https://gitlab.com/api/v4/projects/4821/trigger/pipeline",
    ], r"glptt-[0-9a-f]{40}")

    # ---------------- Slack
    each("slack/xoxb", lambda: f"xoxb-{digits(11)}-{digits(13)}-{rs(ALNUM, 24)}", [
        "SLACK_BOT_TOKEN=@S@",
        "Authorization: Bearer @S@",
        '{"ok":true,"app_id":"A0' + rs(UPPERDIG, 9) + '","access_token":"@S@","token_type":"bot",'
        '"scope":"chat:write,channels:read","bot_user_id":"U0' + rs(UPPERDIG, 9) + '"}',
    ], r"xoxb-\d{11}-\d{13}-[A-Za-z0-9]{24}")
    each("slack/xoxp", lambda: f"xoxp-{digits(11)}-{digits(11)}-{digits(13)}-{hexs(32)}", [
        "@S@",
        'curl -s -H "Authorization: Bearer @S@" "https://slack.com/api/conversations.list?limit=200"',
    ], r"xoxp-\d{11}-\d{11}-\d{13}-[0-9a-f]{32}")
    each("slack/xoxa", lambda: f"xoxa-2-{digits(11)}-{digits(12)}-{digits(12)}-{hexs(64)}", [
        '{"token": "@S@", "channel": "C0' + rs(UPPERDIG, 9) + '", "text": "deploy finished"}',
    ], r"xoxa-2-\d{11}-\d{12}-\d{12}-[0-9a-f]{64}")
    each("slack/xoxe", lambda: f"xoxe-1-{rs(ALNUM, 146)}", [
        '{"ok":true,"token":"xoxe.xoxp-1-' + rs(ALNUM, 120) + '","refresh_token":"@S@","expires_in":43200}',
    ], r"xoxe-1-[A-Za-z0-9]{146}", note="Slack token-rotation refresh token")
    each("slack/xapp", lambda: f"xapp-1-A{rs(UPPERDIG, 10)}-{digits(13)}-{hexs(64)}", [
        "SLACK_APP_TOKEN=@S@",
        "App-level token generated (connections:write): @S@",
    ], r"xapp-1-A[A-Z0-9]{10}-\d{13}-[0-9a-f]{64}")
    for tpl in [
        "SLACK_WEBHOOK_URL=@U@",
        "curl -X POST -H 'Content-type: application/json' --data '{\"text\":\"Build #412 passed\"}' @U@",
        "@TS@ ERROR notifier: POST @U@ failed: 404 no_service",
    ]:
        tok = rs(ALNUM, 24)
        url = f"https://hooks.slack.com/services/T{rs(UPPERDIG, 8)}/B{rs(UPPERDIG, 10)}/{tok}"
        add("slack/webhook-url", tok, fill(tpl.replace("@U@", url), tok),
            note="secret is the last path segment; T…/B… are workspace/hook ids")

    # ---------------- AWS
    akia = lambda: "AKIA" + rs(B32AWS, 16)
    asia = lambda: "ASIA" + rs(B32AWS, 16)
    aws_secret = lambda: b64(rbytes(30))
    each("aws/access-key-id", akia, [
        "@S@",
        "[default]\naws_access_key_id = @S@\nregion = us-east-1\n",
        "botocore.exceptions.ClientError: An error occurred (InvalidClientTokenId) when calling the "
        "GetCallerIdentity operation: The security token included in the request is invalid. (key @S@)",
    ], r"AKIA[A-Z2-7]{16}")
    each("aws/access-key-id-temporary", asia, [
        "AWS_ACCESS_KEY_ID=@S@",
    ], r"ASIA[A-Z2-7]{16}")
    # secret access keys: no prefix, context carries them
    sts_exp = ts_s()
    each("aws/secret-access-key", aws_secret, [
        lambda s: f"[default]\naws_access_key_id = {akia()}\naws_secret_access_key = {s}\n",
        lambda s: f"export AWS_SECRET_ACCESS_KEY={s}",
        lambda s: f"For the staging bucket use key {akia()} secret {s} (rotate after the demo).",
        lambda s: f"aws configure set aws_secret_access_key {s} --profile ci",
        lambda s: f's3 = boto3.client("s3", aws_access_key_id="{akia()}", aws_secret_access_key="{s}")',
        lambda s: f'provider "aws" {{\n  region     = "eu-west-1"\n  access_key = "{akia()}"\n  secret_key = "{s}"\n}}',
        lambda s: f"AWS_ACCESS_KEY_ID={akia()} AWS_SECRET_ACCESS_KEY={s} aws s3 ls s3://acme-backups/",
    ])
    for i in range(2):
        s = aws_secret()
        tok = "IQoJb3JpZ2luX2Vj" + b64(rbytes(372))[:-4] if i == 0 else "FwoGZXIvYXdz" + b64(rbytes(270))
        akid = asia()
        sts = (
            '{\n    "Credentials": {\n        "AccessKeyId": "' + akid + '",\n        "SecretAccessKey": "'
            + s + '",\n        "SessionToken": "' + tok + '",\n        "Expiration": "' + sts_exp
            + '"\n    },\n    "AssumedRoleUser": {\n        "AssumedRoleId": "AROA' + rs(B32AWS, 17)
            + ':ci-session",\n        "Arn": "arn:aws:sts::' + digits(12) + ':assumed-role/deploy/ci-session"\n    }\n}'
        )
        add("aws/secret-access-key", s, sts, note="aws sts assume-role output")
        add("aws/session-token", tok, sts if i == 0 else f"AWS_SESSION_TOKEN={tok}",
            note="aws sts assume-role output" if i == 0 else None)
        if i == 0:
            add("aws/access-key-id-temporary", akid, sts, note="aws sts assume-role output")

    # ---------------- Google
    each("google/api-key", lambda: "AIza" + rs(B64URL, 35), [
        "@S@",
        "https://maps.googleapis.com/maps/api/geocode/json?address=1600+Amphitheatre+Pkwy&key=@S@",
        "GOOGLE_API_KEY=@S@",
        "x-goog-api-key: @S@",
    ], r"AIza[A-Za-z0-9_-]{35}")
    gcp_project = "acme-prod-" + digits(6)
    client_id = f"{digits(12)}-{rs(LOWERDIG, 32)}.apps.googleusercontent.com"
    each("google/oauth-client-secret", lambda: "GOCSPX-" + rs(B64URL, 28), [
        '{"installed":{"client_id":"' + client_id + '","project_id":"' + gcp_project + '",'
        '"auth_uri":"https://accounts.google.com/o/oauth2/auth","token_uri":"https://oauth2.googleapis.com/token",'
        '"client_secret":"@S@","redirect_uris":["http://localhost"]}}',
        "GOOGLE_CLIENT_SECRET=@S@",
    ], r"GOCSPX-[A-Za-z0-9_-]{28}")
    each("google/oauth-access-token", lambda: "ya29.a0" + rs(B64URL, 212), [
        "Authorization: Bearer @S@",
        '{"access_token": "@S@", "expires_in": 3599, "scope": "https://www.googleapis.com/auth/drive.readonly", "token_type": "Bearer"}',
    ], r"ya29\.a0[A-Za-z0-9_-]{212}")
    each("google/oauth-refresh-token", lambda: "1//0" + R.choice("3456g") + rs(B64URL, 98), [
        '{"refresh_token": "@S@", "client_id": "' + client_id + '", "type": "authorized_user"}',
    ], r"1//0[3-6g][A-Za-z0-9_-]{98}")
    for i, shape in enumerate(["full", "fragment", "env"]):
        key = pem("PRIVATE KEY", pkcs8_rsa_der(2048)) + "\n"
        esc = key.replace("\n", "\\n")
        sa = f"mcp-runner@{gcp_project}.iam.gserviceaccount.com"
        if shape == "full":
            text = (
                '{\n  "type": "service_account",\n  "project_id": "' + gcp_project + '",\n  "private_key_id": "'
                + hexs(40) + '",\n  "private_key": "' + esc + '",\n  "client_email": "' + sa
                + '",\n  "client_id": "' + digits(21) + '",\n  "auth_uri": "https://accounts.google.com/o/oauth2/auth",\n'
                '  "token_uri": "https://oauth2.googleapis.com/token"\n}'
            )
        elif shape == "fragment":
            text = '  "private_key_id": "' + hexs(40) + '",\n  "private_key": "' + esc + '",\n  "client_email": "' + sa + '",'
        else:
            text = ("GOOGLE_APPLICATION_CREDENTIALS_JSON='{\"type\":\"service_account\",\"project_id\":\"" + gcp_project
                    + "\",\"private_key\":\"" + esc + "\",\"client_email\":\"" + sa + "\"}'")
        add("gcp/service-account-private-key", esc, text,
            note="PEM inside a JSON string: line breaks are the two characters \\n, as in the key file")

    # ---------------- Stripe
    stripe = lambda p: lambda: p + "51" + rs(ALNUM, 97)
    each("stripe/sk_live", stripe("sk_live_"), [
        "STRIPE_SECRET_KEY=@S@",
        "curl https://api.stripe.com/v1/customers -u @S@: -d email=ana@example.com",
        'Stripe.api_key = "@S@"',
    ], r"sk_live_51[A-Za-z0-9]{97}")
    each("stripe/sk_live", lambda: "sk_live_" + rs(ALNUM, 24), [
        "@S@",
    ], note="older 24-character Stripe key")
    each("stripe/sk_test", stripe("sk_test_"), [
        "@S@",
        '{"stripe": {"publishable_key": "pk_test_51' + rs(ALNUM, 97) + '", "secret_key": "@S@"}}',
    ], r"sk_test_51[A-Za-z0-9]{97}")
    each("stripe/rk_live", stripe("rk_live_"), [
        "@S@",
        "Authorization: Bearer @S@",
    ], r"rk_live_51[A-Za-z0-9]{97}")
    each("stripe/rk_test", stripe("rk_test_"), ["STRIPE_RESTRICTED_KEY=@S@"], r"rk_test_51[A-Za-z0-9]{97}")
    each("stripe/whsec", lambda: "whsec_" + rs(ALNUM, 32), [
        "> Ready! You are using Stripe API Version [2024-06-20]. Your webhook signing secret is @S@ (^C to quit)",
        "STRIPE_WEBHOOK_SECRET=@S@",
    ], r"whsec_[A-Za-z0-9]{32}")

    # ---------------- SendGrid
    each("sendgrid/api-key", lambda: "SG." + rs(B64URL, 22) + "." + rs(B64URL, 43), [
        "SENDGRID_API_KEY=@S@",
        "Authorization: Bearer @S@",
        "@S@",
    ], r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}")

    # ---------------- Twilio
    ac = lambda: "AC" + hexs(32)
    each("twilio/api-key-sid", lambda: "SK" + hexs(32), [
        "@S@",
        "TWILIO_API_KEY=@S@",
    ], r"SK[0-9a-f]{32}")
    each("twilio/api-key-secret", lambda: rs(ALNUM, 32), [
        lambda s: f"TWILIO_ACCOUNT_SID={ac()}\nTWILIO_API_KEY=SK{hexs(32)}\nTWILIO_API_SECRET={s}\n",
        lambda s: f'client = Client("SK{hexs(32)}", "{s}", "{ac()}")',
    ])
    each("twilio/auth-token", lambda: hexs(32), [
        lambda s: f"export TWILIO_AUTH_TOKEN={s}",
        lambda s: f"curl -X POST https://api.twilio.com/2010-04-01/Accounts/{(a := ac())}/Messages.json "
                  f"--data-urlencode 'To=+15558675310' -u {a}:{s}",
        lambda s: f'twilio:\n  account_sid: {ac()}\n  auth_token: "{s}"\n',
    ])

    # ---------------- Mailgun
    each("mailgun/api-key", lambda: "key-" + hexs(32), [
        "curl -s --user 'api:@S@' https://api.mailgun.net/v3/mg.acme.io/messages -F from=ops@mg.acme.io",
        "MAILGUN_API_KEY=@S@",
    ], r"key-[0-9a-f]{32}")
    s = f"{hexs(32)}-{hexs(8)}-{hexs(8)}"
    add("mailgun/api-key", s, f'const mg = mailgun.client({{ username: "api", key: "{s}" }});',
        note="newer Mailgun key format, no prefix")

    # ---------------- npm / PyPI / Hugging Face
    each("npm/token", lambda: "npm_" + rs(ALNUM, 36), [
        "//registry.npmjs.org/:_authToken=@S@",
        "NPM_TOKEN=@S@",
        "@S@",
    ], r"npm_[A-Za-z0-9]{36}")

    def pypi(host=b"pypi.org"):
        mac = (b"\x02\x01" + bytes([len(host)]) + host + b"\x02\x24" + uuid4().encode()
               + b"\x00\x02\x2a" + b'[1,["version",1]]' + b"\x00\x00\x06\x20" + rbytes(32))
        return "pypi-" + b64u(mac)
    each("pypi/token", pypi, [
        "[pypi]\n  username = __token__\n  password = @S@\n",
        "twine upload -u __token__ -p @S@ dist/*",
        "UV_PUBLISH_TOKEN=@S@",
    ], r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{100,}")
    each("pypi/token", lambda: pypi(b"test.pypi.org"), ["@S@"],
         note="TestPyPI token (AgENdGVzdC5weXBpLm9yZw…)")
    each("huggingface/token", lambda: "hf_" + rs(ALPHA, 34), [
        "huggingface-cli login --token @S@",
        "HF_TOKEN=@S@",
        "Authorization: Bearer @S@",
    ], r"hf_[A-Za-z]{34}")

    # ---------------- Azure
    acct = lambda: "st" + rs(LOWERDIG, 12)
    each("azure/storage-account-key", lambda: b64(rbytes(64)), [
        lambda k: f"DefaultEndpointsProtocol=https;AccountName={acct()};AccountKey={k};EndpointSuffix=core.windows.net",
        lambda k: '{\n  "IsEncrypted": false,\n  "Values": {\n    "AzureWebJobsStorage": "DefaultEndpointsProtocol=https;AccountName='
                  + acct() + ";AccountKey=" + k + ';EndpointSuffix=core.windows.net",\n    "FUNCTIONS_WORKER_RUNTIME": "node"\n  }\n}',
        lambda k: f"az storage blob upload --account-name {acct()} --account-key {k} -c backups -f db.dump -n db.dump",
    ])
    k = b64(rbytes(64))
    add("azure/cosmos-account-key", k,
        f"AccountEndpoint=https://acme-orders.documents.azure.com:443/;AccountKey={k};")
    k = b64(rbytes(32))
    add("azure/service-bus-sas-key", k,
        f"Endpoint=sb://acme-events.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={k}")
    for host in ["stacmeexports.blob.core.windows.net/exports/report-2025-03.csv", "stacmelogs.blob.core.windows.net/logs"]:
        sig = b64(rbytes(32)).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
        url = (f"https://{host}?sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2025-06-30T23:59:59Z&st=2025-03-01T00:00:00Z"
               f"&spr=https&sig={sig}")
        add("azure/sas-signature", sig, url if "csv" in host else f"AZURE_LOGS_SAS_URL={url}",
            note="secret is the percent-encoded sig value as it appears in the URL")
    azsecret = lambda: rs(ALNUM, 3) + "8Q~" + rs(ALNUM + "_.~-", 34)
    app = uuid4()
    each("azure/ad-client-secret", azsecret, [
        "AZURE_CLIENT_SECRET=@S@",
        f"az login --service-principal -u {app} -p @S@ --tenant {uuid4()}",
        '{\n  "AzureAd": {\n    "Instance": "https://login.microsoftonline.com/",\n    "TenantId": "' + uuid4()
        + '",\n    "ClientId": "' + app + '",\n    "ClientSecret": "@S@"\n  }\n}',
    ], r"[A-Za-z0-9]{3}8Q~[A-Za-z0-9_.~-]{34}")
    each("azure/openai-api-key", lambda: hexs(32), [
        'curl "https://acme-oai.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01" '
        '-H "api-key: @S@" -H "Content-Type: application/json"',
    ])

    # ---------------- Discord / Telegram
    def discord_token():
        uid = "1" + rs(DIG, R.choice([17, 18]))
        return b64u(uid.encode()) + "." + rs(B64URL, 6) + "." + rs(B64URL, 38)
    each("discord/bot-token", discord_token, [
        "Authorization: Bot @S@",
        "DISCORD_TOKEN=@S@",
        'client.run("@S@")',
    ], r"M[TDzj][A-Za-z0-9_-]{22,24}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{38}")
    tok = rs(B64URL, 68)
    add("discord/webhook-url", tok, f"DISCORD_WEBHOOK=https://discord.com/api/webhooks/{digits(19)}/{tok}",
        note="secret is the last path segment")
    tg = lambda: digits(10) + ":AA" + rs(B64URL, 33)
    each("telegram/bot-token", tg, [
        "https://api.telegram.org/bot@S@/sendMessage?chat_id=-100" + digits(10) + "&text=deployed",
        "TELEGRAM_BOT_TOKEN=@S@",
        "Done! Congratulations on your new bot. You will find it at t.me/acme_alerts_bot.\n"
        "Use this token to access the HTTP API:\n@S@\nKeep your token secure and store it safely.",
    ], r"\d{10}:AA[A-Za-z0-9_-]{33}")

    # ---------------- Shopify / DigitalOcean / Doppler / Databricks / Linear / Notion
    shop = lambda p: lambda: p + hexs(32)
    each("shopify/shpat", shop("shpat_"), [
        "X-Shopify-Access-Token: @S@",
        "SHOPIFY_ACCESS_TOKEN=@S@",
    ], r"shpat_[0-9a-f]{32}")
    each("shopify/shpss", shop("shpss_"), ["SHOPIFY_API_SECRET=@S@"], r"shpss_[0-9a-f]{32}")
    each("shopify/shpca", shop("shpca_"), ["@S@"], r"shpca_[0-9a-f]{32}")
    each("digitalocean/dop_v1", lambda: "dop_v1_" + hexs(64), [
        "doctl auth init --access-token @S@",
        "DIGITALOCEAN_TOKEN=@S@",
    ], r"dop_v1_[0-9a-f]{64}")
    each("digitalocean/doo_v1", lambda: "doo_v1_" + hexs(64), [
        '{"access_token":"@S@","token_type":"bearer","expires_in":2592000,"refresh_token":"dor_v1_' + hexs(64) + '"}',
    ], r"doo_v1_[0-9a-f]{64}")
    each("doppler/dp.pt", lambda: "dp.pt." + rs(ALNUM, 43), [
        "DOPPLER_TOKEN=@S@",
        "doppler configure set token @S@ --scope /",
    ], r"dp\.pt\.[A-Za-z0-9]{43}")
    each("doppler/dp.st", lambda: "dp.st.prd." + rs(ALNUM, 40), [
        "docker run -e DOPPLER_TOKEN=@S@ acme/api:1.14.2",
    ], r"dp\.st\.prd\.[A-Za-z0-9]{40}", note="service token: dp.st.<config>.<40>")
    each("databricks/pat", lambda: "dapi" + hexs(32), [
        "[DEFAULT]\nhost  = https://adb-" + digits(16) + ".7.azuredatabricks.net\ntoken = @S@\n",
        "DATABRICKS_TOKEN=@S@",
    ], r"dapi[0-9a-f]{32}")
    each("linear/api-key", lambda: "lin_api_" + rs(ALNUM, 40), [
        "Authorization: @S@",
        "LINEAR_API_KEY=@S@",
    ], r"lin_api_[A-Za-z0-9]{40}")
    each("notion/secret", lambda: "secret_" + rs(ALNUM, 43), [
        "NOTION_API_KEY=@S@",
        "@S@",
    ], r"secret_[A-Za-z0-9]{43}")
    each("notion/ntn", lambda: "ntn_" + rs(DIG, 11) + rs(ALNUM, 35), [
        "Authorization: Bearer @S@",
        '{"mcpServers": {"notionApi": {"command": "npx", "args": ["-y", "@notionhq/notion-mcp-server"], '
        '"env": {"OPENAPI_MCP_HEADERS": "{\\"Authorization\\": \\"Bearer @S@\\", \\"Notion-Version\\": \\"2022-06-28\\" }"}}}}',
    ], r"ntn_\d{11}[A-Za-z0-9]{35}")

    # ---------------- Atlassian / Sentry
    atl = lambda: "ATATT3xFfGF0" + rs(B64URL, 171) + "=" + rs(HEXU, 8)
    each("atlassian/api-token", atl, [
        "JIRA_API_TOKEN=@S@",
        "curl -u ana@acme.io:@S@ -H 'Accept: application/json' https://acme.atlassian.net/rest/api/3/myself",
        "@S@",
    ], r"ATATT3xFfGF0[A-Za-z0-9_-]{171}=[0-9A-F]{8}")
    org = "o" + digits(7)
    each("sentry/dsn-key", lambda: hexs(32), [
        lambda k: f"SENTRY_DSN=https://{k}@{org}.ingest.us.sentry.io/{digits(16)}",
        lambda k: f'Sentry.init({{ dsn: "https://{k}@{org}.ingest.sentry.io/{digits(7)}", tracesSampleRate: 0.2 }});',
    ], note="DSN public key: semi-public, shipped in browser bundles")
    k = hexs(32)
    add("sentry/dsn-secret", k, f"raven.Client('https://{hexs(32)}:{k}@sentry.io/{digits(6)}')",
        note="legacy DSN with public:secret; the secret part is the credential")

    def sntrys():
        claims = {"iat": int(rdt().timestamp()), "url": "https://sentry.io", "region_url": "https://us.sentry.io", "org": "acme"}
        return "sntrys_" + b64(json.dumps(claims, separators=(",", ":")).encode()) + "_" + rs(B64URL, 43)
    each("sentry/sntrys", sntrys, [
        "SENTRY_AUTH_TOKEN=@S@",
        "[auth]\ntoken=@S@\n",
    ], r"sntrys_eyJ[A-Za-z0-9+/=]+_[A-Za-z0-9_-]{43}")
    each("sentry/sntryu", lambda: "sntryu_" + hexs(64), [
        "sentry-cli --auth-token @S@ releases new 1.14.2",
    ], r"sntryu_[0-9a-f]{64}")

    # ---------------- Vercel / Netlify / Heroku / Cloudflare
    each("vercel/token", lambda: rs(ALNUM, 24), [
        lambda s: f"VERCEL_TOKEN={s}",
        lambda s: f"vercel deploy --prod --token {s}",
        lambda s: f'curl -H "Authorization: Bearer {s}" https://api.vercel.com/v9/projects',
    ])
    each("netlify/nfp", lambda: "nfp_" + rs(ALNUM, 36), [
        "NETLIFY_AUTH_TOKEN=@S@",
        "netlify deploy --prod --auth @S@",
    ], r"nfp_[A-Za-z0-9]{36}")
    s = rs(B64URL, 43)
    add("netlify/token", s, f"NETLIFY_AUTH_TOKEN={s}", note="older Netlify token, no prefix")
    each("heroku/api-key", uuid4, [
        lambda s: f"HEROKU_API_KEY={s}",
        lambda s: f"machine api.heroku.com\n  login ana@acme.io\n  password {s}\nmachine git.heroku.com\n  login ana@acme.io\n  password {s}\n",
        lambda s: f'curl -n https://api.heroku.com/apps -H "Accept: application/vnd.heroku+json; version=3" -H "Authorization: Bearer {s}"',
    ], note="a UUID; only the context makes it a secret")
    each("heroku/hrku", lambda: "HRKU-AA" + rs(B64URL, 58), ["HEROKU_API_KEY=@S@"], r"HRKU-AA[A-Za-z0-9_-]{58}")
    each("cloudflare/api-token", lambda: rs(B64URL, 40), [
        lambda s: f"CLOUDFLARE_API_TOKEN={s}",
        lambda s: f'curl "https://api.cloudflare.com/client/v4/user/tokens/verify" -H "Authorization: Bearer {s}"',
        lambda s: f'[env.production]\naccount_id = "{hexs(32)}"\n# wrangler secret\nCF_API_TOKEN = "{s}"\n',
    ])
    s = hexs(37)
    add("cloudflare/global-api-key", s,
        f'curl https://api.cloudflare.com/client/v4/zones -H "X-Auth-Email: ana@acme.io" -H "X-Auth-Key: {s}"')
    s = "v1.0-" + hexs(24) + "-" + hexs(146)
    add("cloudflare/origin-ca-key", s, f"CF_ORIGIN_CA_KEY={s}")

    # ---------------- Postman / Grafana / New Relic / Datadog
    each("postman/api-key", lambda: "PMAK-" + hexs(24) + "-" + hexs(34), [
        "X-Api-Key: @S@",
        "POSTMAN_API_KEY=@S@",
    ], r"PMAK-[0-9a-f]{24}-[0-9a-f]{34}")
    each("grafana/glsa", lambda: "glsa_" + rs(ALNUM, 32) + "_" + hexs(8), [
        "GRAFANA_SERVICE_ACCOUNT_TOKEN=@S@",
        "Authorization: Bearer @S@",
    ], r"glsa_[A-Za-z0-9]{32}_[0-9a-f]{8}")

    def glc():
        claims = {"o": digits(6), "n": "stack-" + digits(6) + "-hm-write-mcp", "k": rs(ALNUM, 24), "m": {"r": "prod-us-east-0"}}
        return "glc_" + b64(json.dumps(claims, separators=(",", ":")).encode())
    each("grafana/glc", glc, [
        "GRAFANA_CLOUD_TOKEN=@S@",
        "@S@",
    ], r"glc_eyJ[A-Za-z0-9+/]+={0,2}")
    each("newrelic/user-key", lambda: "NRAK-" + rs(UPPERDIG, 27), [
        "NEW_RELIC_API_KEY=@S@",
        "API-Key: @S@",
    ], r"NRAK-[A-Z0-9]{27}")
    each("newrelic/insert-key", lambda: "NRII-" + rs(B64URL, 32), ["@S@"], r"NRII-[A-Za-z0-9_-]{32}")
    s = hexs(36) + "NRAL"
    add("newrelic/license-key", s, f"license_key: {s}")
    each("datadog/api-key", lambda: hexs(32), [
        lambda s: f"DD_API_KEY={s}",
        lambda s: f'curl -X POST "https://api.datadoghq.com/api/v2/series" -H "DD-API-KEY: {s}" -H "Content-Type: application/json"',
        lambda s: f"# datadog.yaml\napi_key: {s}\nsite: datadoghq.eu\n",
    ])
    s = hexs(40)
    add("datadog/app-key", s, f"DD_API_KEY={hexs(32)}\nDD_APP_KEY={s}\n")

    # ---------------- JWTs
    def jwt(alg="HS256", claims=None, kid=None):
        header = {"alg": alg, "typ": "JWT"}
        if kid:
            header["kid"] = kid
        iat = int(rdt().timestamp())
        c = {"sub": claims.pop("sub") if claims and "sub" in claims else uuid4(), "iat": iat, "exp": iat + 3600}
        c.update(claims or {})
        sig = {"HS256": 32, "RS256": 256, "ES256": 64, "HS512": 64}[alg]
        return (b64u(json.dumps(header, separators=(",", ":")).encode()) + "."
                + b64u(json.dumps(c, separators=(",", ":")).encode()) + "." + b64u(rbytes(sig)))
    FORMAT_RE["jwt"] = r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"
    jwts = [
        (jwt(), "Authorization: Bearer @S@"),
        (jwt("RS256", {"iss": "https://auth.acme.io/", "aud": "mcp-gateway", "scope": "tools:call"}, kid=rs(B64URL, 22)),
         '{"access_token": "@S@", "token_type": "Bearer", "expires_in": 3600}'),
        (jwt("ES256", {"iss": "https://accounts.acme.io"}), "Set-Cookie: session=@S@; Path=/; HttpOnly; Secure; SameSite=Lax"),
        (jwt("HS256", {"role": "service_role", "iss": "supabase", "ref": rs(LOWER, 20)}), "SUPABASE_SERVICE_ROLE_KEY=@S@"),
        (jwt("RS256", {"email": "ana@acme.io", "aud": client_id, "iss": "https://accounts.google.com"}, kid=hexs(40)),
         '{"id_token": "@S@"}'),
        (jwt("HS512", {"uid": 4821}), "https://app.acme.io/embed/dashboard?token=@S@#theme=dark"),
        (jwt(), "@S@"),
        (jwt("ES256", {"scope": "mcp:tools"}), "@TS@ DEBUG http: > GET /mcp HTTP/1.1\n> Host: mcp.acme.io\n> Authorization: Bearer @S@\n> Accept: text/event-stream"),
    ]
    for s, tpl in jwts:
        add("jwt", s, fill(tpl, s))

    # ---------------- PEM private keys
    k = pem("RSA PRIVATE KEY", rsa_pkcs1_der(2048))
    add("pem/rsa-pkcs1", k, k)
    k = pem("RSA PRIVATE KEY", rsa_pkcs1_der(4096))
    add("pem/rsa-pkcs1", k, "$ cat deploy/keys/jenkins.pem\n" + k + "\n$ ")
    k = pem("RSA PRIVATE KEY", rbytes(1200), headers=["Proc-Type: 4,ENCRYPTED", "DEK-Info: AES-128-CBC," + rs(HEXU, 32)])
    add("pem/rsa-pkcs1", k, k, note="legacy OpenSSL-encrypted PEM (Proc-Type/DEK-Info headers)")
    k = pem("EC PRIVATE KEY", ec_p256_der())
    add("pem/ec", k, k)
    k = pem("EC PRIVATE KEY", ec_p256_der())
    add("pem/ec", k, "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n" + k + "\n")
    k, _ = openssh_ed25519("ana@laptop")
    add("pem/openssh", k, k + "\n")
    k, _ = openssh_ed25519("deploy@ci")
    esc = k.replace("\n", "\\n")
    add("pem/openssh", esc, f'SSH_PRIVATE_KEY="{esc}\\n"', note="line breaks are the two characters \\n (env var / JSON string)")
    k = openssh_rsa("backup@nas")
    add("pem/openssh", k, "Here is the key you asked for (~/.ssh/id_rsa):\n\n" + k + "\n")
    k = openssh_encrypted_ed25519()
    add("pem/openssh", k, k + "\n", note="passphrase-protected (aes256-ctr/bcrypt) but still a private key")
    k = pem("PRIVATE KEY", pkcs8_rsa_der(2048))
    add("pem/pkcs8", k, k + "\n")
    k = pem("PRIVATE KEY", pkcs8_ed25519_der())
    indented = k.replace("\n", "\n    ")
    add("pem/pkcs8", indented, "tls:\n  cert: /etc/acme/tls.crt\n  key: |\n    " + indented + "\n",
        note="YAML block scalar: the secret includes the 4-space indentation of each line")
    k = pem("PRIVATE KEY", ec_p384_pkcs8_der())
    add("pem/pkcs8", k, k)
    k = pem("PRIVATE KEY", pkcs8_rsa_der(2048))
    esc = k.replace("\n", "\\n")
    add("pem/pkcs8", esc, '{"tls": {"cert_file": "/etc/acme/tls.crt", "key_pem": "' + esc + '"}}',
        note="line breaks are the two characters \\n (JSON pasted as text)")
    k = pem("ENCRYPTED PRIVATE KEY", encrypted_pkcs8_der())
    add("pem/pkcs8-encrypted", k, k)
    k = pgp_private_block()
    add("pgp/private-key-block", k, k)
    pub = b64(sshstr(b"ssh-ed25519") + sshstr(rbytes(32)))
    priv = b64(sshstr(rbytes(32)))
    ppk = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ana@workstation\nPublic-Lines: 2\n"
           + "\n".join(wrap(pub, 64)) + "\nPrivate-Lines: 1\n" + priv + "\nPrivate-MAC: " + hexs(64) + "\n")
    add("putty/ppk-private-lines", priv, ppk, note="secret is the Private-Lines body")

    # ---------------- database URLs (secret = the password)
    dbs = [
        ("db-url/postgres", lambda p: f"postgres://app:{p}@db.internal:5432/app"),
        ("db-url/postgres", lambda p: f"DATABASE_URL=postgresql://svc_orders:{p}@orders-db.cluster-{rs(LOWERDIG, 12)}.eu-west-1.rds.amazonaws.com:5432/orders?sslmode=require"),
        ("db-url/postgres", lambda p: f'psql "postgresql://postgres:{p}@localhost:5432/postgres" -c "select 1"'),
        ("db-url/postgres", lambda p: f"@TS@ ERROR pool: connection to postgres://reporting:{p}@10.0.4.12/analytics failed: timeout after 5s"),
        ("db-url/mysql", lambda p: f"mysql://root:{p}@127.0.0.1:3306/shop"),
        ("db-url/mysql", lambda p: f'SQLALCHEMY_DATABASE_URI = "mysql+pymysql://wp:{p}@mysql.default.svc.cluster.local/wordpress?charset=utf8mb4"'),
        ("db-url/mongodb+srv", lambda p: f"mongodb+srv://admin:{p}@cluster0.{rs(LOWERDIG, 5)}.mongodb.net/?retryWrites=true&w=majority&appName=Cluster0"),
        ("db-url/mongodb", lambda p: f"MONGO_URL=mongodb://root:{p}@mongo-0.mongo:27017,mongo-1.mongo:27017/admin?replicaSet=rs0"),
        ("db-url/redis", lambda p: f"redis://:{p}@cache:6379/0"),
        ("db-url/redis", lambda p: f"REDIS_URL=rediss://default:{p}@apt-mole-{digits(5)}.upstash.io:6379"),
        ("db-url/amqp", lambda p: f"amqp://orders:{p}@rabbitmq:5672/%2f"),
        ("db-url/amqp", lambda p: f"CELERY_BROKER_URL=amqps://worker:{p}@b-{uuid4()}.mq.us-east-1.amazonaws.com:5671"),
        ("db-url/jdbc", lambda p: f"spring.datasource.url=jdbc:postgresql://db:5432/app?user=app&password={p}&ssl=true"),
        ("db-url/sqlserver", lambda p: f"Server=tcp:acme-sql.database.windows.net,1433;Initial Catalog=crm;User ID=crmadmin;Password={p};Encrypt=True;"),
    ]
    for i, (fmt, build) in enumerate(dbs):
        p = pw_url()
        if i == 4:
            p = p[:6] + "%40" + p[6:]  # an '@' in the password, percent-encoded
        add(fmt, p, fill(build(p), p), note="password contains a percent-encoded '@'" if i == 4 else None)

    # ---------------- HTTP auth headers, cookies
    for user, tpl in [
        ("admin", "Authorization: Basic @S@"),
        ("ci-bot", "curl -v https://registry.acme.io/v2/_catalog\n> GET /v2/_catalog HTTP/1.1\n> Host: registry.acme.io\n> Authorization: Basic @S@\n> User-Agent: curl/8.5.0"),
        ("grafana", '{"headers": {"Authorization": "Basic @S@", "Accept": "application/json"}}'),
        ("ana@acme.io", "@TS@ DEBUG proxy: forwarding with header authorization=Basic @S@"),
    ]:
        s = b64(f"{user}:{pw_simple()}".encode())
        add("http/basic-auth", s, fill(tpl, s), note="base64 of user:password")
    for tpl in [
        "Authorization: Bearer @S@",
        '{"mcpServers": {"acme": {"type": "http", "url": "https://mcp.acme.io/mcp", "headers": {"Authorization": "Bearer @S@"}}}}',
        "@TS@ WARN upstream 401 for GET https://api.acme.io/v1/me (Authorization: Bearer @S@)",
        "fetch(url, { headers: { Authorization: 'Bearer @S@' } })",
        "authorization: bearer @S@",
        "Proxy-Authorization: Bearer @S@",
    ]:
        s = rs(B64URL, R.choice([32, 40, 43, 64]))
        add("http/bearer-token", s, fill(tpl, s))
    for tpl in [
        "X-API-Key: @S@",
        "Authorization: Token @S@",
        "Authorization: SSWS 00@S@",
    ]:
        s = rs(ALNUM, 40)
        fmt = "okta/api-token" if "SSWS" in tpl else "http/api-key-header"
        if fmt == "okta/api-token":
            s = "00" + rs(B64URL, 40)
            add(fmt, s, "Authorization: SSWS " + s)
        else:
            add(fmt, s, fill(tpl, s))
    s = rs(LOWERDIG, 32)
    add("http/session-cookie", s, f"Cookie: csrftoken={rs(ALNUM, 32)}; sessionid={s}")
    s = b64u(rbytes(48))
    add("http/session-cookie", s, f"Set-Cookie: __Secure-next-auth.session-token={s}; Path=/; HttpOnly; Secure; SameSite=Lax")

    # ---------------- secrets in URL query strings
    for tpl in [
        "https://graph.facebook.com/v19.0/me?fields=id,name&access_token=@S@",
        "GET /api/v2/export?format=csv&api_key=@S@ HTTP/1.1",
        "https://api.acme.io/v1/reports?token=@S@&page=2",
        "wss://stream.acme.io/socket?apikey=@S@",
        "https://hooks.acme.io/incoming?client_id=web&client_secret=@S@",
    ]:
        s = rs(ALNUM, R.choice([32, 40, 48]))
        add("url/query-secret", s, fill(tpl, s))
    s = "EAAG" + rs(ALNUM, 180)
    add("facebook/access-token", s, f"https://graph.facebook.com/v19.0/{digits(15)}/feed?access_token={s}")
    sig = hexs(64)
    cred = akia()
    add("url/aws-presigned-signature", sig,
        f"https://acme-uploads.s3.amazonaws.com/exports/2025/03/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={cred}%2F20250314%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20250314T092653Z"
        f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}")
    sig = b64u(rbytes(32))
    add("url/signed-url-sig", sig, f"https://cdn.acme.io/private/video.mp4?exp=1741948013&sig={sig}")
    s = "AIza" + rs(B64URL, 35)
    add("google/api-key", s, f"https://generativelanguage.googleapis.com/v1beta/models/gemini-1.5-flash:generateContent?key={s}")

    # ---------------- .env lines
    dj_alpha = "abcdefghijklmnopqrstuvwxyz0123456789!@#$%^&*(-_=+)"
    env = [
        ("dotenv/password", "DATABASE_PASSWORD=@S@", pw()),
        ("dotenv/api-key", "API_KEY=@S@", rs(ALNUM, 32)),
        ("dotenv/secret-key", "SECRET_KEY=@S@", rs(B64URL, 50)),
        ("dotenv/jwt-secret", "JWT_SECRET=@S@", hexs(64)),
        ("dotenv/session-secret", 'SESSION_SECRET="@S@"', b64(rbytes(32))),
        ("dotenv/laravel-app-key", "APP_KEY=base64:@S@", b64(rbytes(32))),
        ("dotenv/nextauth-secret", "NEXTAUTH_SECRET=@S@", b64(rbytes(32))),
        ("dotenv/password", "SMTP_PASSWORD=@S@", pw()),
        ("dotenv/encryption-key", "ENCRYPTION_KEY=@S@", hexs(64)),
        ("dotenv/password", "REDIS_PASSWORD=@S@", pw_simple()),
    ]
    for fmt, tpl, s in env:
        add(fmt, s, tpl.replace("@S@", s))
    s1, s2, s3 = pw(), rs(ALNUM, 40), b64(rbytes(24))
    envfile = (f"# .env.production\nNODE_ENV=production\nPORT=8080\nDB_HOST=db.internal\nDB_USER=app\n"
               f"DB_PASSWORD={s1}\nSTRIPE_PUBLISHABLE_KEY=pk_live_51{rs(ALNUM, 97)}\nMAPS_API_TOKEN={s2}\nCOOKIE_SECRET={s3}\n")
    add("dotenv/password", s1, envfile, note="a whole .env file; this entry's secret is DB_PASSWORD")
    add("dotenv/api-token", s2, envfile, note="a whole .env file; this entry's secret is MAPS_API_TOKEN")
    add("dotenv/cookie-secret", s3, envfile, note="a whole .env file; this entry's secret is COOKIE_SECRET")
    s = "django-insecure-" + rs(dj_alpha, 50).replace("'", "")
    add("django/secret-key", s, f"SECRET_KEY = '{s}'")
    s = hexs(128)
    add("rails/secret-key-base", s, f"production:\n  secret_key_base: {s}\n")

    # ---------------- YAML / TOML / INI / properties config
    cfg = [
        ("config/yaml", lambda s: f"database:\n  host: db.internal\n  port: 5432\n  username: app\n  password: {s}\n", pw_simple),
        ("config/yaml", lambda s: f'auth:\n  jwt:\n    secret_key: "{s}"\n    ttl: 15m\n', lambda: b64(rbytes(48))),
        ("config/yaml", lambda s: f"services:\n  db:\n    image: postgres:16\n    environment:\n      POSTGRES_USER: app\n      POSTGRES_PASSWORD: {s}\n", pw_simple),
        ("config/yaml", lambda s: f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-creds\ntype: Opaque\nstringData:\n  username: app\n  password: \"{s}\"\n", pw),
        ("config/toml", lambda s: f'[database]\nurl = "postgres://db.internal/app"\nuser = "app"\npassword = "{s}"\n', pw),
        ("config/toml", lambda s: f'[tool.poetry.http-basic.internal]\nusername = "ci"\npassword = "{s}"\n', pw_simple),
        ("config/ini", lambda s: f"[client]\nuser=backup\npassword={s}\nhost=127.0.0.1\n", pw),
        ("config/ini", lambda s: f"[smtp]\nserver = smtp.acme.io\nport = 587\nusername = alerts@acme.io\napi_secret = {s}\n", lambda: rs(ALNUM, 40)),
        ("config/properties", lambda s: f"spring.datasource.username=app\nspring.datasource.password={s}\n", pw),
        ("config/hcl", lambda s: f'resource "aws_db_instance" "main" {{\n  engine   = "postgres"\n  username = "app"\n  password = "{s}"\n}}', pw),
        ("config/xml", lambda s: f'<settings><servers><server><id>internal</id><username>deployer</username><password>{s}</password></server></servers></settings>', pw_simple),
        ("config/json", lambda s: '{"oauth": {"client_id": "mcp-web", "client_secret": "' + s + '", "redirect_uri": "http://localhost:3000/callback"}}', lambda: rs(B64URL, 48)),
    ]
    for fmt, build, gen in cfg:
        s = gen()
        add(fmt, s, build(s))
    s = pw_simple()
    enc = b64(s.encode())
    add("config/yaml", enc, f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: api\ndata:\n  api-token: {enc}\n",
        note="Kubernetes Secret data: the secret is the base64 value as it appears")

    # ---------------- command-line flags
    cli = [
        lambda s: f"mysql -h db.internal -u root -p{s} shop",
        lambda s: f"docker login registry.acme.io -u deployer -p {s}",
        lambda s: f"psql --host=db --username=app --password={s}",  # not a real psql flag form, but seen
        lambda s: f"mcp-server-acme --token {s} --port 8931",
        lambda s: f"./bin/migrate --db-password={s} --dry-run",
        lambda s: f"curl -u deployer:{s} https://nexus.acme.io/repository/releases/",
        lambda s: f"PGPASSWORD={s} pg_dump -h db -U app app > app.sql",
        lambda s: f"sshpass -p {s} ssh admin@10.0.0.7",
        lambda s: f"openssl pkcs12 -export -in cert.pem -inkey key.pem -out bundle.p12 -passout pass:{s}",
        lambda s: f"npx @acme/mcp-server --api-key={s}",
        lambda s: f"redis-cli -h cache -a {s} ping",
        lambda s: f"kubectl create secret generic db --from-literal=password={s}",
        lambda s: f"htpasswd -b -c /etc/nginx/.htpasswd admin {s}",
        lambda s: f"uvx acme-mcp --client-secret {s}",
    ]
    for i, build in enumerate(cli):
        s = rs(ALNUM, 40) if i in (3, 9, 13) else pw_simple()
        add("cli/flag", s, build(s), note="htpasswd takes the password positionally after -b user" if i == 12 else None)

    # ---------------- pwd / pass / passwd / passphrase keys
    pk = [
        ("password/pwd", lambda s: f"Driver={{ODBC Driver 18 for SQL Server}};Server=tcp:sql01,1433;Database=erp;Uid=sa;Pwd={s};"),
        ("password/pwd", lambda s: '{"host": "ftp.acme.io", "user": "upload", "pwd": "' + s + '"}'),
        ("password/pass", lambda s: f"smtp:\n  host: smtp.acme.io\n  user: alerts\n  pass: {s}\n"),
        ("password/pass", lambda s: f"nodemailer.createTransport({{ host: 'smtp.acme.io', auth: {{ user: 'alerts', pass: '{s}' }} }})"),
        ("password/passwd", lambda s: f"[vpn]\ngateway = vpn.acme.io\nuser = ana\npasswd = {s}\n"),
        ("password/passwd", lambda s: f"db_passwd={s}"),
        ("password/passphrase", lambda s: '{"key_file": "/etc/acme/signing.key", "passphrase": "' + s + '"}'),
        ("password/passphrase", lambda s: f"GPG_PASSPHRASE={s}"),
        ("password/passphrase", lambda s: f"ssh_key_passphrase: '{s}'"),
        ("password/password-json", lambda s: '{"username": "ana", "password": "' + s + '", "remember": true}'),
        ("password/prose", lambda s: f"The Wi-Fi password for the office is {s} and it changes monthly."),
    ]
    for fmt, build in pk:
        s = pw()
        add(fmt, s, build(s))
    words = ["orbit", "maple", "velvet", "cactus", "lantern", "quartz", "harbor", "ember", "tundra", "pixel", "sable", "juniper"]
    s = "-".join(R.choice(words) for _ in range(5)) + "-" + digits(2)
    add("password/passphrase", s, f'passphrase: "{s}"', note="diceware-style passphrase (random words)")

    # ---------------- other providers MCP servers commonly take keys for
    extra = [
        ("openrouter/api-key", lambda: "sk-or-v1-" + hexs(64), "OPENROUTER_API_KEY=@S@", r"sk-or-v1-[0-9a-f]{64}"),
        ("groq/api-key", lambda: "gsk_" + rs(ALNUM, 52), "GROQ_API_KEY=@S@", r"gsk_[A-Za-z0-9]{52}"),
        ("xai/api-key", lambda: "xai-" + rs(ALNUM, 80), "Authorization: Bearer @S@", r"xai-[A-Za-z0-9]{80}"),
        ("perplexity/api-key", lambda: "pplx-" + rs(ALNUM, 48), "PERPLEXITY_API_KEY=@S@", r"pplx-[A-Za-z0-9]{48}"),
        ("replicate/api-token", lambda: "r8_" + rs(ALNUM, 37), "REPLICATE_API_TOKEN=@S@", r"r8_[A-Za-z0-9]{37}"),
        ("mistral/api-key", lambda: rs(ALNUM, 32), "MISTRAL_API_KEY=@S@", None),
        ("cohere/api-key", lambda: rs(ALNUM, 40), 'co = cohere.ClientV2(api_key="@S@")', None),
        ("brave/search-api-key", lambda: "BSA" + rs(B64URL, 28), "X-Subscription-Token: @S@", None),
        ("tavily/api-key", lambda: "tvly-" + rs(ALNUM, 32), '{"env": {"TAVILY_API_KEY": "@S@"}}', r"tvly-[A-Za-z0-9]{32}"),
        ("firecrawl/api-key", lambda: "fc-" + hexs(32), "FIRECRAWL_API_KEY=@S@", r"fc-[0-9a-f]{32}"),
        ("langsmith/api-key", lambda: "lsv2_pt_" + hexs(32) + "_" + hexs(10), "LANGSMITH_API_KEY=@S@", r"lsv2_pt_[0-9a-f]{32}_[0-9a-f]{10}"),
        ("dockerhub/pat", lambda: "dckr_pat_" + rs(B64URL, 27), "echo @S@ | docker login -u acmeci --password-stdin", r"dckr_pat_[A-Za-z0-9_-]{27}"),
        ("supabase/access-token", lambda: "sbp_" + hexs(40), "SUPABASE_ACCESS_TOKEN=@S@", r"sbp_[0-9a-f]{40}"),
        ("vault/service-token", lambda: "hvs.CAESI" + rs(B64URL, 86), "export VAULT_TOKEN=@S@", r"hvs\.CAESI[A-Za-z0-9_-]{86}"),
        ("terraform-cloud/token", lambda: rs(ALNUM, 14) + ".atlasv1." + rs(ALNUM, 67),
         'credentials "app.terraform.io" {\n  token = "@S@"\n}', r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9]{67}"),
        ("pulumi/access-token", lambda: "pul-" + hexs(40), "PULUMI_ACCESS_TOKEN=@S@", r"pul-[0-9a-f]{40}"),
        ("age/secret-key", lambda: "AGE-SECRET-KEY-1" + rs(BECH32U, 58),
         "# created: 2025-03-14T09:26:53Z\n# public key: age1" + rs(BECH32U.lower(), 58) + "\n@S@\n", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
        ("figma/pat", lambda: "figd_" + rs(B64URL, 40), "X-Figma-Token: @S@", r"figd_[A-Za-z0-9_-]{40}"),
        ("airtable/pat", lambda: "pat" + rs(ALNUM, 14) + "." + hexs(64), "AIRTABLE_API_KEY=@S@", r"pat[A-Za-z0-9]{14}\.[0-9a-f]{64}"),
        ("square/access-token", lambda: "EAAA" + rs(B64URL, 60), "SQUARE_ACCESS_TOKEN=@S@", r"EAAA[A-Za-z0-9_-]{60}"),
        ("mailchimp/api-key", lambda: hexs(32) + "-us" + str(R.randint(1, 21)), "MAILCHIMP_API_KEY=@S@", r"[0-9a-f]{32}-us\d{1,2}"),
        ("algolia/admin-api-key", lambda: hexs(32), "ALGOLIA_ADMIN_API_KEY=@S@", None),
        ("firebase/fcm-server-key", lambda: "AAAA" + rs(B64URL, 7) + ":APA91b" + rs(B64URL, 134),
         "Authorization: key=@S@", r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{134}"),
        ("mapbox/secret-token", lambda: "sk." + b64u(json.dumps({"u": "acme-maps", "a": "cl" + rs(LOWERDIG, 23)}, separators=(",", ":")).encode()) + "." + rs(B64URL, 22),
         "MAPBOX_SECRET_TOKEN=@S@", r"sk\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}"),
        ("render/api-key", lambda: "rnd_" + rs(ALNUM, 32), "RENDER_API_KEY=@S@", r"rnd_[A-Za-z0-9]{32}"),
    ]
    for fmt, gen, tpl, rx in extra:
        each(fmt, gen, [tpl], rx)
    s = rs(B64URL, 27)
    add("cloudinary/url", s, f"CLOUDINARY_URL=cloudinary://{digits(15)}:{s}@acme-media", note="secret is the api_secret between ':' and '@'")


# --------------------------------------------------------------------------------------------
# ordinary values


class Raw(str):
    """A JSON number written exactly as given (2.50, -0, 1e-7 must not be normalised)."""


ORDINARY = []


def o(category, key, value):
    ORDINARY.append((category, key, value))


def o_cycle(category, keys, values):
    """Adds each value of a category under the keys in turn (the first under keys[0], …)."""
    for i, value in enumerate(values):
        o(category, keys[i % len(keys)], value)


def png(w, h):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + rbytes(w * 3) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


GIF_1x1 = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")


def jpeg():
    app0 = bytes.fromhex("ffd8ffe000104a46494600010101004800480000")
    dqt = b"\xff\xdb\x00\x43\x00" + bytes(R.randint(1, 40) for _ in range(64))
    sof = bytes.fromhex("ffc0000b080010001001011100")
    return app0 + dqt + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + rbytes(90) + b"\xff\xd9"


def webp():
    payload = b"VP8L" + struct.pack("<I", 26) + b"\x2f\x03\xc0\x00" + rbytes(22)
    return b"RIFF" + struct.pack("<I", 4 + len(payload)) + b"WEBP" + payload


def wav(samples=64):
    data = b"".join(struct.pack("<h", R.randint(-2000, 2000)) for _ in range(samples))
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def mp3(id3=True):
    head = b"ID3\x04\x00\x00\x00\x00\x00\x23" + b"TSSE\x00\x00\x00\x0f\x00\x00\x03Lavf60.16.100\x00" + b"\x00" * 10 if id3 else b""
    return head + b"\xff\xfb\x90\x64" + b"\x00" * 32 + b"Info" + rbytes(120)


def ulid():
    ms = rdt_ms()
    t = ""
    for _ in range(10):
        t = CROCKFORD[ms % 32] + t
        ms //= 32
    return t + rs(CROCKFORD, 16)


def ksuid():
    n = int.from_bytes(struct.pack(">I", int(rdt().timestamp()) - 1400000000) + rbytes(16), "big")
    out = ""
    alpha = DIG + UPPER + LOWER
    while n:
        n, r = divmod(n, 62)
        out = alpha[r] + out
    return out.rjust(27, "0")


def snowflake(epoch_ms=1420070400000):
    return ((rdt_ms() - epoch_ms) << 22) | R.getrandbits(22)


def gen_ordinary():
    # ---------------- pagination cursors
    o("cursor", "nextCursor", b64(json.dumps({"offset": 100, "limit": 100}).encode()))
    o("cursor", "nextCursor", b64u(rbytes(24)))
    o("cursor", "nextCursor", b64u(rbytes(96)))
    o("cursor", "cursor", b64(("user:U0" + rs(UPPERDIG, 9)).encode()))
    o("cursor", "cursor", b64(b"cursor:v2:\x92\xb92025-03-14T09:26:53+01:00\xce" + rbytes(4)))
    o("cursor", "cursor", uuid4())
    o("cursor", "cursor", b64(json.dumps({"after": ulid(), "dir": "next"}, separators=(",", ":")).encode()))
    o("cursor", "pageToken", b64u(b"\x0a\x20" + rbytes(R.randint(40, 80))))
    o("cursor", "pageToken", "~!!~AI9FV7" + rs(B64URL, 118))
    o("cursor", "nextPageToken", digits(20))
    o("cursor", "nextPageToken", "CAUQAA" + rs(B64URL, 22))
    o("cursor", "nextPageToken", b64u(rbytes(150)))
    o("cursor", "next_page_token", rs(ALNUM, 35))
    o("cursor", "next_page_token", b64(rbytes(48)))
    o("cursor", "continuationToken", b64(rbytes(33)))
    o("cursor", "continuationToken", "1" + b64(rbytes(33))[1:])
    o("cursor", "continuationToken", json.dumps([{"token": "+RID:~" + b64(rbytes(9)) + "#RT:1#TRC:100#ISV:2#IEO:65567",
                                                   "range": {"min": "", "max": "FF"}}], separators=(",", ":")))
    o("cursor", "NextToken", b64(rbytes(R.randint(60, 120))))

    # ---------------- ids
    for n in (33, 33, 44, 44):
        o("drive_file_id", "id", "1" + rs(B64URL, n - 1))
    o("drive_file_id", "fileId", "1" + rs(B64URL, 43))
    stripe_pref = ["pi_3", "cus_", "ch_3", "in_1", "sub_1", "price_1", "prod_", "evt_1", "txn_1", "acct_1", "seti_1", "re_3"]
    for p in stripe_pref:
        n = 14 if p in ("cus_", "prod_") else 24
        o("stripe_id", "id", p + rs(ALNUM, n))
    o("stripe_id", "customer", "cus_" + rs(ALNUM, 14))
    o("openai_id", "id", "call_" + rs(ALNUM, 24))
    o("openai_id", "tool_call_id", "call_" + rs(ALNUM, 24))
    o("openai_id", "id", "chatcmpl-" + rs(ALNUM, 29))
    o("openai_id", "id", "msg_" + rs(ALNUM, 24))
    o("openai_id", "run_id", "run_" + rs(ALNUM, 24))
    o("openai_id", "thread_id", "thread_" + rs(ALNUM, 24))
    o("openai_id", "assistant_id", "asst_" + rs(ALNUM, 24))
    o("openai_id", "file_id", "file-" + rs(ALNUM, 22))
    o("openai_id", "id", "resp_" + hexs(48))
    o("openai_id", "vector_store_id", "vs_" + rs(ALNUM, 24))
    o("openai_id", "system_fingerprint", "fp_" + hexs(10))
    o("anthropic_id", "id", "msg_01" + rs(ALNUM, 22))
    o("anthropic_id", "id", "toolu_01" + rs(ALNUM, 22))
    o("anthropic_id", "tool_use_id", "toolu_01" + rs(ALNUM, 22))
    o("anthropic_id", "request-id", "req_011C" + rs(ALNUM, 20))
    o("anthropic_id", "id", "srvtoolu_01" + rs(ALNUM, 22))
    o("anthropic_id", "file_id", "file_011C" + rs(ALNUM, 20))
    for k in ("id", "ulid", "eventId"):
        o("ulid", k, ulid())
    o("ulid", "id", ulid().lower())
    for k in ("id", "ksuid", "requestId"):
        o("ksuid", k, ksuid())
    o("snowflake_id", "id", str(snowflake()))
    o("snowflake_id", "channel_id", str(snowflake()))
    o("snowflake_id", "id_str", str(snowflake(1288834974657)))
    o("snowflake_id", "id", Raw(str(snowflake(1288834974657))))
    o("snowflake_id", "guild_id", Raw(str(snowflake())))
    for k in ("_id", "id", "userId"):
        o("mongodb_objectid", k, f"{int(rdt().timestamp()):08x}" + hexs(16))
    o("mongodb_objectid", "_id", {"$oid": f"{int(rdt().timestamp()):08x}" + hexs(16)})
    o("slack_id", "channel", "C0" + rs(UPPERDIG, 9))
    o("slack_id", "user", "U0" + rs(UPPERDIG, 9))
    o("slack_id", "team", "T0" + rs(UPPERDIG, 9))
    o("slack_id", "bot_id", "B0" + rs(UPPERDIG, 9))
    o("slack_id", "ts", f"{int(rdt().timestamp())}.{digits(6)}")
    o("slack_id", "file", "F0" + rs(UPPERDIG, 9))
    o("notion_id", "id", uuid4())
    o("notion_id", "page_id", hexs(32))
    o("notion_id", "url", "https://www.notion.so/acme/Quarterly-Planning-" + hexs(32))
    o("notion_id", "database_id", hexs(32))
    o("github_node_id", "node_id", "MDQ6VXNlcjE=")
    o("github_node_id", "node_id", b64(f"010:Repository{R.randint(10**6, 10**9)}".encode()))
    o("github_node_id", "id", "PR_kwDO" + rs(B64URL, 6) + "s" + rs(B64URL, 8))
    o("github_node_id", "id", "I_kwDO" + rs(B64URL, 6) + "s" + rs(B64URL, 9))
    o("github_node_id", "id", "R_kgDO" + rs(B64URL, 6))
    o("github_node_id", "id", "U_kgDO" + rs(B64URL, 6))
    for _ in range(3):
        o("youtube_id", "videoId", rs(B64URL, 10) + R.choice("AEIMQUYcgkosw048"))
    o("youtube_id", "playlistId", "PL" + rs(B64URL, 32))
    for _ in range(3):
        o("firebase_push_id", "key", "-" + R.choice("NO") + rs(B64URL, 18))
    for k in ("id", "shareId", "slug"):
        o("nanoid", k, rs(B64URL, 21))
    o("nanoid", "id", rs(LOWERDIG, 10))
    o("short_hash_id", "id", rs(ALNUM, 8))
    o("short_hash_id", "short_code", rs(ALNUM, 7))
    o("short_hash_id", "hashid", rs(ALNUM, 6))
    o("short_hash_id", "job_id", "j_" + rs(LOWERDIG, 12))

    # ---------------- hashes and digests
    o("hex_digest", "md5", hexs(32))
    o("hex_digest", "checksum", hexs(32))
    o("hex_digest", "sha1", hexs(40))
    o("hex_digest", "sha256", hexs(64))
    o("hex_digest", "sha512", hexs(128))
    o("hex_digest", "content_hash", hexs(64).upper())
    o("hex_digest", "fingerprint", ":".join(rs(HEXU, 2) for _ in range(32)))
    o("base64_digest", "sha256", b64(rbytes(32)))
    o("base64_digest", "Content-MD5", b64(rbytes(16)))
    o("base64_digest", "x-amz-checksum-sha256", b64(rbytes(32)))
    o("base64_digest", "digest", b64u(rbytes(32)))
    o("base64_digest", "hash", b64u(rbytes(48)))
    o("base64_digest", "fingerprint", "SHA256:" + b64(rbytes(32)).rstrip("="))
    o("sri_integrity", "integrity", "sha384-" + b64(rbytes(48)))
    o("sri_integrity", "integrity", "sha256-" + b64(rbytes(32)))
    o("sri_integrity", "integrity", "sha512-" + b64(rbytes(64)))
    o("sri_integrity", "integrity", "sha1-" + b64(rbytes(20)))
    o("git_sha", "sha", hexs(40))
    o("git_sha", "commit", hexs(40))
    o("git_sha", "head_sha", hexs(40))
    for n in (7, 8, 10, 12):
        o("git_sha", "short_sha", hexs(n))
    o("git_sha", "oid", hexs(64))
    o("docker_digest", "digest", "sha256:" + hexs(64))
    o("docker_digest", "image", "ghcr.io/acme/api@sha256:" + hexs(64))
    o("docker_digest", "config", {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + hexs(64), "size": 7023})
    o("etag", "etag", '"' + hexs(40) + '"')
    o("etag", "ETag", 'W/"' + hexs(8) + "-" + rs(B64URL, 27) + '"')
    o("etag", "ETag", '"' + hexs(32) + '-12"')
    o("etag", "etag", '"' + b64(rbytes(16)) + '"')
    o("npm_integrity", "integrity", "sha512-" + b64(rbytes(64)))
    o("npm_integrity", "resolved", "https://registry.npmjs.org/zod/-/zod-3.23.8.tgz")
    o("npm_integrity", "shasum", hexs(40))
    o("ipfs_cid", "cid", "Qm" + rs(BASE58, 44))
    o("ipfs_cid", "cid", "bafybei" + rs("abcdefghijklmnopqrstuvwxyz234567", 52))
    o("ipfs_cid", "uri", "ipfs://bafkrei" + rs("abcdefghijklmnopqrstuvwxyz234567", 52))

    # ---------------- uuids, times, versions, contact, network
    o("uuid", "id", uuid4())
    o("uuid", "requestId", uuid4())
    o("uuid", "id", uuid7())
    o("uuid", "traceId", uuid7())
    o("uuid", "Id", uuid4().upper())
    o("uuid", "guid", "{" + uuid4().upper() + "}")
    o("uuid", "urn", "urn:uuid:" + uuid4())
    o("uuid", "trace_id", hexs(32))
    o("uuid", "traceparent", f"00-{hexs(32)}-{hexs(16)}-01")
    o("timestamp", "createdAt", ts())
    o("timestamp", "updated_at", rdt().strftime("%Y-%m-%dT%H:%M:%S+01:00"))
    o("timestamp", "Date", rdt().strftime("%a, %d %b %Y %H:%M:%S GMT"))
    o("timestamp", "created", int(rdt().timestamp()))
    o("timestamp", "timestamp_ms", rdt_ms())
    o("timestamp", "ts", str(int(rdt().timestamp())))
    o("timestamp", "time", rdt().strftime("%Y-%m-%dT%H:%M:%S.") + digits(6) + "Z")
    o("timestamp", "expires_at", rdt().strftime("%Y-%m-%d %H:%M:%S"))
    o("date", "date", rdt().strftime("%Y-%m-%d"))
    o("date", "due", rdt().strftime("%d/%m/%Y"))
    o("date", "published", rdt().strftime("%B %d, %Y"))
    o("date", "week", rdt().strftime("%G-W%V"))
    o("duration", "timeout", "PT1H30M")
    o("duration", "elapsed", "1h30m0s")
    o("duration", "duration", "00:03:25.120")
    o("duration", "retention", "P3Y6M4DT12H30M5S")
    o("duration", "durationMs", 1532)
    o("duration", "ttl", "15m")
    o("semver", "version", "1.2.3")
    o("semver", "version", "2.0.0-rc.1+build.5")
    o("semver", "tag_name", "v0.14.2")
    o("semver", "zod", "^3.23.8")
    o("semver", "requires-python", ">=3.10,<4")
    o("semver", "version", "2026.8.31")
    o("semver", "protocolVersion", "2025-06-18")
    o("semver", "version", "1.0.0-alpha.beta.11")
    for k, v in [("email", "ana.souza@example.com"), ("from", "no-reply+password-reset@acme.io"), ("to", "security@acme.io"),
                 ("reply_to", "Ana Souza <ana@example.org>"), ("email", "token.holder@example.net"), ("email", "dev+secret-santa@example.com")]:
        o("email", k, v)
    for k, v in [("phone", "+14155550132"), ("phone", "+44 20 7946 0958"), ("phone_number", "(415) 555-0199"), ("tel", "tel:+4930901820")]:
        o("phone", k, v)
    for k, v in [("ip", "192.168.1.20"), ("remote_addr", "203.0.113.7:8443"), ("ip", "2001:db8::ff00:42:8329"),
                 ("link_local", "fe80::1%en0"), ("cidr", "10.0.0.0/16"), ("X-Forwarded-For", "198.51.100.23, 10.0.3.7")]:
        o("ip_address", k, v)
    for k, v in [("host", "db-primary.prod.us-east-1.rds.amazonaws.com"), ("hostname", "ip-10-0-1-23.ec2.internal"),
                 ("host", "localhost"), ("domain", "xn--bcher-kva.example"), ("server", "mcp.acme.io"),
                 ("host", "acme-" + rs(LOWERDIG, 6) + ".fly.dev")]:
        o("hostname", k, v)

    # ---------------- paths, urls, storage
    paths = [
        "/home/ana/projects/mcptape/src/main.rs",
        "C:\\Users\\Ana\\AppData\\Local\\Temp\\tmp" + rs(LOWERDIG, 6) + ".json",
        "/tmp/tmp" + rs(ALNUM, 8) + "/output.json",
        "/var/folders/3k/" + rs(LOWERDIG + "_", 28) + "0000gn/T/pytest-of-ana/pytest-12/test_roundtrip0/data.csv",
        "node_modules/.pnpm/@typescript-eslint+eslint-plugin@8.0.0_@typescript-eslint+parser@8.0.0_eslint@9.8.0_typ_"
        + rs("abcdefghijklmnopqrstuvwxyz234567", 26) + "/node_modules/@typescript-eslint/eslint-plugin/dist/index.js",
        "node_modules/.pnpm/react-dom@18.3.1_react@18.3.1/node_modules/react-dom/index.js",
        "/home/ana/.npm/_cacache/content-v2/sha512/" + hexs(2) + "/" + hexs(2) + "/" + hexs(124),
        "/nix/store/" + rs(NIX32, 32) + "-openssl-3.0.13/lib/libssl.so.3",
        "file:///Users/ana/Documents/Q3%20report.pdf",
        "config/secrets.example.yml",
        "/run/secrets/db_password",
        "~/.ssh/id_ed25519",
        "src/auth/token_refresh.ts",
        ".cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/" + hexs(40) + "/config.json",
        "D:\\builds\\agent\\_work\\3\\s\\out\\Release\\app.exe",
        "/private/var/mobile/Containers/Data/Application/" + uuid4().upper() + "/Documents/db.sqlite",
    ]
    o_cycle("file_path", ["path", "uri", "filename", "cwd"], paths)
    urls = [
        "https://www.google.com/search?q=how+to+rotate+api+keys&oq=how+to+rotate&sourceid=chrome&ie=UTF-8",
        "https://example.com/pricing?utm_source=newsletter&utm_medium=email&utm_campaign=spring_2025&utm_content=cta_button",
        "https://cdn.acme.io/assets/app.js?v=1a2b3c",
        "https://api.github.com/repos/acme/infra/pulls?page=2&per_page=100&state=open",
        "https://www.youtube.com/watch?v=" + rs(B64URL, 10) + "E&t=42s",
        "https://docs.google.com/document/d/1" + rs(B64URL, 43) + "/edit?usp=sharing",
        "https://accounts.google.com/o/oauth2/v2/auth?client_id=" + f"{digits(12)}-{rs(LOWERDIG, 32)}.apps.googleusercontent.com" + "&redirect_uri=http%3A%2F%2Flocalhost%3A8080%2Fcallback"
        "&response_type=code&scope=openid%20email&state=" + rs(B64URL, 32) + "&code_challenge=" + b64u(rbytes(32)) + "&code_challenge_method=S256",
        "https://login.acme.io/reset-password?step=2",
        "https://developers.acme.io/docs/api-keys#rotating-keys",
        "https://shop.example.com/search?q=token+ring+adapter&page=3&sort=price_asc",
        "https://static.acme.io/img/hero.3f9a1c7e.webp",
        "https://github.com/acme/infra/commit/" + hexs(40),
        "https://www.amazon.com/dp/B0" + rs(UPPERDIG, 8) + "?th=1&psc=1",
        "https://example.com/callback?state=" + rs(LOWERDIG, 16) + "&lang=en",
        "https://maps.example.com/@48.8584,2.2945,17z",
        "http://localhost:6274/?transport=stdio&serverCommand=node&serverArgs=dist%2Findex.js",
    ]
    o_cycle("url", ["url", "href", "uri", "link"], urls)
    for k, v in [
        ("Key", "uploads/2025/03/14/" + uuid4() + "/original.png"),
        ("key", f"AWSLogs/{(a := digits(12))}/CloudTrail/us-east-1/2025/03/14/{a}_CloudTrail_us-east-1_20250314T0925Z_{rs(ALNUM, 16)}.json.gz"),
        ("uri", "s3://acme-data-lake/raw/events/dt=2025-03-14/part-00000-" + uuid4() + "-c000.snappy.parquet"),
        ("Key", "backups/db/" + hexs(8) + "/2025-03-14T02-00-00Z.dump.zst"),
    ]:
        o("s3_key", k, v)
    acct = digits(12)
    for k, v in [
        ("Arn", f"arn:aws:iam::{acct}:role/deploy"),
        ("FunctionArn", f"arn:aws:lambda:us-east-1:{acct}:function:mcp-gateway:7"),
        ("ARN", f"arn:aws:secretsmanager:us-east-1:{acct}:secret:prod/db-{rs(ALNUM, 6)}"),
        ("KeyArn", f"arn:aws:kms:eu-west-1:{acct}:key/{uuid4()}"),
        ("TopicArn", f"arn:aws:sns:us-east-1:{acct}:alerts"),
        ("resource", f"arn:aws:s3:::acme-data-lake/raw/*"),
    ]:
        o("arn", k, v)

    # ---------------- media and base64 payloads
    o("base64_media", "data", b64(png(1, 1)))
    o("base64_media", "data", b64(png(4, 4)))
    o("base64_media", "data", b64(GIF_1x1))
    o("base64_media", "data", b64(jpeg()))
    o("base64_media", "data", b64(webp()))
    o("base64_media", "data", b64(wav()))
    o("base64_media", "data", b64(mp3(True)))
    o("base64_media", "blob", b64(mp3(False)))
    o("base64_media", "blob", b64(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" + rbytes(60)))
    o("base64_media", "blob", b64(png(8, 2)))
    o("base64_media", "content", {"type": "image", "data": b64(png(2, 2)), "mimeType": "image/png"})
    o("base64_media", "content", {"type": "audio", "data": b64(wav(32)), "mimeType": "audio/wav"})
    o("data_uri", "src", "data:image/png;base64," + b64(png(1, 1)))
    o("data_uri", "icon", "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'><circle cx='8' cy='8' r='7' fill='%23f90'/></svg>")
    o("data_uri", "href", "data:text/plain;charset=utf-8,Hello%2C%20World")
    o("data_uri", "audio", "data:audio/wav;base64," + b64(wav(16)))
    o("data_uri", "src", "data:image/gif;base64," + b64(GIF_1x1))
    readme = ("# acme-weather-mcp\n\nAn MCP server that returns forecasts.\n\n## Usage\n\n```sh\nnpx acme-weather-mcp --units metric\n```\n\n"
              "Set `WEATHER_API_KEY` in your environment; the server reads it at start-up and never logs it.\n"
              "Tokens are refreshed automatically. See CONTRIBUTING.md for the release process.\n")
    o("base64_text", "blob", b64(readme.encode()))
    o("base64_text", "blob", b64(b"id,name,plan\n1,Ana,pro\n2,Bruno,free\n3,Chen,team\n"))
    o("base64_text", "blob", b64(b'{\n  "name": "acme-weather-mcp",\n  "version": "0.4.1",\n  "bin": {"acme-weather-mcp": "dist/index.js"}\n}\n'))
    o("base64_text", "blob", b64("def tokenize(text):\n    \"\"\"Split text into tokens.\"\"\"\n    return text.split()\n".encode()))

    # ---------------- JSON Schema fragments under sensitive-sounding names
    o("json_schema", "api_key", {"type": "string", "title": "Api Key", "description": "Your API key"})
    o("json_schema", "token", {"type": "string", "minLength": 20})
    o("json_schema", "password", {"type": "string", "format": "password", "writeOnly": True})
    o("json_schema", "properties", {"password": {"type": "string"}, "token": {"type": "string", "default": ""}})
    o("json_schema", "client_secret", {"type": "string", "description": "OAuth client secret", "x-sensitive": True})
    o("json_schema", "secret", {"$ref": "#/$defs/SecretRef"})
    o("json_schema", "privateKey", {"type": "string", "contentEncoding": "base64", "description": "PEM-encoded private key"})
    o("json_schema", "authorization", {"type": "string", "pattern": "^Bearer [A-Za-z0-9._~+/-]+=*$"})
    o("json_schema", "inputSchema", {"type": "object", "properties": {"apiKey": {"type": "string", "description": "API key for the service"},
                                                                     "query": {"type": "string"}}, "required": ["apiKey", "query"]})
    o("json_schema", "requestedSchema", {"type": "object", "properties": {"passphrase": {"type": "string", "title": "Passphrase", "minLength": 8}}})
    o("json_schema", "access_token", {"type": ["string", "null"], "examples": ["<token>"]})
    o("json_schema", "credentials", {"type": "object", "additionalProperties": {"type": "string"}})

    # ---------------- protocol-ish fields
    proto = [
        ("progressToken", "tok-" + rs(LOWERDIG, 8)), ("progressToken", 42), ("progressToken", uuid4()),
        ("progressToken", b64u(rbytes(18))),
        ("maxTokens", 4096), ("max_tokens", 1024), ("tokenCount", 1873), ("tokens_used", 9120),
        ("input_tokens", 1523), ("output_tokens", 412),
        ("usage", {"input_tokens": 2095, "output_tokens": 503, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1536}),
        ("token_type", "Bearer"), ("expires_in", 3600), ("refresh_expires_in", 1800), ("auth", "oauth2"),
        ("password_policy", {"min_length": 12, "require_symbol": True}), ("has_password", True), ("password_set", False),
        ("secret_name", "prod/db"), ("secretRef", {"name": "db-creds", "key": "password"}), ("secretName", "db-password-secret"),
        ("key", "Enter"), ("key", "ArrowDown"), ("key", "user:1234"), ("key", "cache:v2:session:8f3c"), ("token", ""),
        ("grant_type", "refresh_token"), ("grant_type", "client_credentials"),
        ("token_endpoint_auth_method", "client_secret_basic"), ("code_challenge_method", "S256"),
        ("scope", "read:user repo offline_access"), ("response_type", "code"),
        ("apiKeyHeader", "X-API-Key"), ("auth_type", "api_key"), ("credentials", "include"), ("tokenizer", "o200k_base"),
        ("stop_reason", "max_tokens"), ("finish_reason", "length"), ("mimeType", "application/json"),
        ("kid", "2025-03-rotating"), ("alg", "RS256"), ("token_endpoint", "https://auth.acme.io/oauth/token"),
        ("authorization_servers", ["https://auth.acme.io"]), ("WWW-Authenticate", 'Bearer realm="mcp", resource_metadata="https://mcp.acme.io/.well-known/oauth-protected-resource"'),
        ("secretKeyRef", {"name": "api", "key": "token"}), ("passwordless", True), ("keyboard", {"key": "a", "ctrlKey": True}),
    ]
    for k, v in proto:
        o("protocol_field", k, v)
    o("public_key", "public_key", "ssh-ed25519 " + b64(sshstr(b"ssh-ed25519") + sshstr(rbytes(32))) + " ana@laptop")
    o("public_key", "key", "ssh-rsa " + b64(sshstr(b"ssh-rsa") + sshstr(b"\x01\x00\x01") + mpint(256)) + " deploy@ci")
    o("public_key", "publicKey", pem("PUBLIC KEY", bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200") + b"\x04" + rbytes(64)))
    o("public_key", "x5c", [b64(b"\x30\x82\x03\x0a" + rbytes(200))])
    o("public_key", "jwk", {"kty": "EC", "crv": "P-256", "x": b64u(rbytes(32)), "y": b64u(rbytes(32)), "kid": "k1", "use": "sig"})
    o("public_key", "recipient", "age1" + rs(BECH32U.lower(), 58))

    # ---------------- prose, code, markdown
    prose = [
        "Reset your password from the settings page.",
        "The tokenizer splits text into tokens.",
        "Basic usage: run the command with --help",
        "Your API key is shown only once, so copy it to a password manager before closing this dialog.",
        "Bearer tokens expire after one hour; the client refreshes them automatically.",
        "Never paste a secret into a support ticket. If you did, rotate the key right away.",
        "Press the Enter key to continue, or Escape to cancel.",
        "The bearer of this letter is authorised to collect the parcel.",
        "Tokens per minute: 30,000. Requests per minute: 500.",
        "Key takeaways: the migration finished, no data was lost, and the password reset flow is faster.",
        "Sorry, that password is too short. Use at least 12 characters.",
        "OpenAI keys start with sk- and GitHub tokens with ghp_; neither belongs in a config file you commit.",
        "A passphrase is a longer password made of several words.",
        "Set ANTHROPIC_API_KEY in your shell before starting the server.",
        "Das Passwort muss mindestens zwölf Zeichen lang sein. 🔑",
        "トークンの有効期限が切れました。もう一度ログインしてください。",
        "The secret to a good sourdough is patience and a warm kitchen.",
        "Error: invalid_grant (the refresh token was revoked or has expired)",
        "401 Unauthorized: missing Authorization header",
    ]
    o_cycle("prose", ["text", "message", "description", "content"], prose)
    lorem = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. Integer nec odio. Praesent libero. Sed cursus ante "
             "dapibus diam. Sed nisi. Nulla quis sem at nibh elementum imperdiet. Duis sagittis ipsum. Praesent mauris. "
             "Fusce nec tellus sed augue semper porta. Mauris massa. Vestibulum lacinia arcu eget nulla. Class aptent taciti "
             "sociosqu ad litora torquent per conubia nostra, per inceptos himenaeos.")
    o("prose", "text", lorem)
    o("prose", "text", (lorem + " ") * 6 + "Curabitur sodales ligula in libero.")
    o("prose", "text", "Line one\nLine two\r\n\tindented line\u00a0with nbsp and a trailing space ")
    code = [
        "const apiKey = process.env.API_KEY;",
        "password = getpass()",
        'token = os.environ["GITHUB_TOKEN"]',
        "      - uses: actions/checkout@v4\n        with:\n          token: ${{ secrets.GITHUB_TOKEN }}",
        "if (!secret) throw new Error('missing secret');",
        "let key = map.get(&id).ok_or(Error::NotFound)?;",
        'headers = {"Authorization": f"Bearer {access_token}"}',
        "SELECT id, email, password_hash IS NOT NULL AS has_password FROM users WHERE id = $1;",
        "def verify_password(plain: str, hashed: str) -> bool:\n    return bcrypt.checkpw(plain.encode(), hashed.encode())",
        "export PATH=\"$HOME/.cargo/bin:$PATH\"",
    ]
    o_cycle("code_snippet", ["code", "text", "snippet", "content"], code)
    md = [
        "# Authentication\n\nCreate an API key under **Settings → API keys**, then send it in the `Authorization` header.",
        "| Field | Type | Description |\n| --- | --- | --- |\n| `token` | string | Opaque pagination token |\n| `limit` | integer | Page size |",
        "```bash\ncurl -H \"Authorization: Bearer $GITHUB_TOKEN\" https://api.github.com/user\n```",
        "- [x] rotate the staging password\n- [ ] remove the old key from the vault\n- [ ] update the README",
        "> **Note**\n> Secrets are read from the environment; nothing is written to disk.",
    ]
    for m in md:
        o("markdown", "text", m)
    o("json_string", "text", json.dumps({"page": 2, "cursor": b64u(rbytes(24)), "items": [{"id": ulid(), "name": "report.pdf"}]}))
    o("json_string", "text", json.dumps({"status": "ok", "sha": hexs(40), "token_count": 812}, indent=2))
    o("json_string", "text", json.dumps([{"key": "Enter", "code": 13}, {"key": "Tab", "code": 9}]))
    o("log_line", "data", ts() + " INFO auth: token refreshed for user 1234 (expires_in=3600)")
    o("log_line", "message", ts() + " WARN users: password must be at least 12 characters (user_id=981)")
    o("log_line", "data", ts() + " DEBUG cache: key=user:1234:profile hit in 0.4ms")
    o("log_line", "message", "[INFO] request_id=" + uuid4() + " method=tools/call tool=search duration_ms=182")

    # ---------------- scalars
    for k, v in [("price", "2.50"), ("amount", Raw("2.50")), ("epsilon", Raw("1e-7")), ("offset", Raw("-0")), ("zero", 0),
                 ("pi", Raw("3.141592653589793")), ("ratio", Raw("1.0")), ("big", Raw("1E+21")),
                 ("beyond_f64", Raw("9007199254740993")), ("u64", Raw("12345678901234567890")), ("temperature", Raw("-273.15")),
                 ("max", Raw("1.7976931348623157e308")), ("count", 100), ("negative", -42), ("tiny", Raw("5e-324"))]:
        o("number", k, v)
    for k, v in [("isError", False), ("has_password", True), ("readOnlyHint", True), ("stream", False), ("secret", False)]:
        o("boolean", k, v)
    for k in ("nextCursor", "password", "api_key", "error", "token"):
        o("null", k, None)


# --------------------------------------------------------------------------------------------
# lint: ordinary values must not carry anything shaped like a credential

LINT = [
    r"\bsk-(?:ant-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}", r"github_pat_", r"\bglpat-", r"\bxox[abposre]-", r"\bxapp-\d-",
    r"hooks\.slack\.com/services/", r"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b", r"\bAIza[A-Za-z0-9_-]{35}", r"GOCSPX-",
    r"\b[sr]k_(?:live|test)_", r"\bwhsec_", r"\bSG\.[\w-]{22}\.[\w-]{43}", r"\bnpm_[A-Za-z0-9]{36}", r"pypi-AgE",
    r"\bhf_[A-Za-z]{34}", r"AccountKey=", r"\bshp(?:at|ss|ca|pa)_", r"\bdo[opr]_v1_", r"\bdp\.(?:pt|st)\.",
    r"\bdapi[0-9a-f]{32}", r"\blin_api_", r"\bsecret_[A-Za-z0-9]{43}", r"\bntn_\d", r"ATATT3", r"\bsntr[ysu]_",
    r"PMAK-", r"\bglsa_", r"\bglc_", r"NRAK-", r"eyJ[\w-]+\.eyJ[\w-]+\.", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY",
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^@\s/]+@", r"\bBasic [A-Za-z0-9+/=]{12,}", r"\bya29\.", r"\bAGE-SECRET-KEY-",
    r"\bhvs\.", r"\bdckr_pat_", r"\bsbp_[0-9a-f]{40}", r"\bgsk_[A-Za-z0-9]{52}", r"\bxai-[A-Za-z0-9]{80}",
    r"\bpplx-[A-Za-z0-9]{48}", r"\br8_[A-Za-z0-9]{37}", r"\bHRKU-", r"\bnfp_", r"X-Amz-Signature", r"[?&](?:sig|access_token|api_key|apikey)=",
]


def ordinary_line(cat, key, value):
    if isinstance(value, Raw):
        vj = str(value)
    else:
        vj = json.dumps(value, ensure_ascii=False)
    return '{"category": ' + json.dumps(cat) + ', "key": ' + json.dumps(key) + ', "value": ' + vj + "}"


RAW_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")


def jsonl_entries(path, errors):
    """(line number, line, entry) for each line of a JSONL file; a line that is not JSON goes
    to `errors` instead."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                e = json.loads(line)
            except json.JSONDecodeError as err:
                errors.append(f"{Path(path).name}:{n}: not JSON: {err}")
                continue
            yield n, line, e


def validate(secrets_path, ordinary_path):
    errors = []
    secrets_seen = set()
    formats = Counter()
    for n, _, e in jsonl_entries(secrets_path, errors):
        extra = set(e) - {"format", "secret", "text", "note"}
        if extra or not {"format", "secret", "text"} <= set(e):
            errors.append(f"secrets.jsonl:{n}: fields {sorted(e)}")
            continue
        if not all(isinstance(e[k], str) and e[k] for k in ("format", "secret", "text")):
            errors.append(f"secrets.jsonl:{n}: empty or non-string field")
        if e["secret"] not in e["text"]:
            errors.append(f"secrets.jsonl:{n}: secret not in text")
        if e["secret"] in secrets_seen:
            errors.append(f"secrets.jsonl:{n}: duplicate secret")
        secrets_seen.add(e["secret"])
        rx = FORMAT_RE.get(e["format"])
        if rx and not re.fullmatch(rx, e["secret"]) and "note" not in e:
            errors.append(f"secrets.jsonl:{n}: {e['format']} secret does not match {rx}")
        formats[e["format"]] += 1
    cats = Counter()
    for n, line, e in jsonl_entries(ordinary_path, errors):
        if set(e) != {"category", "key", "value"}:
            errors.append(f"ordinary.jsonl:{n}: fields {sorted(e)}")
            continue
        blob = json.dumps(e["value"], ensure_ascii=False)
        for rx in LINT:
            if re.search(rx, blob):
                errors.append(f"ordinary.jsonl:{n}: value matches credential shape {rx}")
        for s in secrets_seen:
            if len(s) >= 8 and s in line:
                errors.append(f"ordinary.jsonl:{n}: contains a corpus secret")
        cats[e["category"]] += 1
    return errors, formats, cats


def main():
    out_s = HERE / "secrets.jsonl"
    out_o = HERE / "ordinary.jsonl"
    if "--check" not in sys.argv:
        gen_secrets()
        gen_ordinary()
        with open(out_s, "w", encoding="utf-8", newline="\n") as f:
            for e in SECRETS:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
        with open(out_o, "w", encoding="utf-8", newline="\n") as f:
            for cat, key, value in ORDINARY:
                line = ordinary_line(cat, key, value)
                if isinstance(value, Raw):
                    assert RAW_NUMBER.match(value), value
                f.write(line + "\n")
    else:
        # rebuild the format regex table without writing anything
        global R
        R = random.Random(SEED)
        gen_secrets()
    errors, formats, cats = validate(out_s, out_o)
    for err in errors:
        print("ERROR", err, file=sys.stderr)
    print(f"secrets.jsonl: {sum(formats.values())} entries, {len(formats)} formats")
    for k in sorted(formats):
        print(f"  {formats[k]:3d}  {k}")
    print(f"ordinary.jsonl: {sum(cats.values())} entries, {len(cats)} categories")
    for k in sorted(cats):
        print(f"  {cats[k]:3d}  {k}")
    if sum(formats.values()) < 170 or sum(cats.values()) < 230:
        errors.append("too few entries")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
