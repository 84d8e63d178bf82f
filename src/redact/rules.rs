//! The default redaction rules: sensitive keys, credential shapes, and what counts as a long
//! high-entropy opaque string. The table in docs/security.md lists every rule here; change both
//! together.

/// Keys whose values are secrets, compared lower-case with `-` and `_` removed (`API_KEY`,
/// `api-key` and `apiKey` are all `apikey`).
pub(crate) const SENSITIVE_KEYS: &[&str] = &[
    "authorization",
    "proxyauthorization",
    "apikey",
    "xapikey",
    "token",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "authtoken",
    "sessiontoken",
    "bearertoken",
    "secret",
    "clientsecret",
    "secretkey",
    "accesskey",
    "awssecretaccesskey",
    "accountkey",
    "sharedaccesskey",
    "password",
    "passwd",
    "pass",
    "pwd",
    "passphrase",
    "privatekey",
    "credential",
    "credentials",
    "cookie",
    "setcookie",
];

/// A key that *ends* in one of these (after squashing) is sensitive too: `db_password`,
/// `api_token`, `github_token`, `x-auth-token`, `stripe_secret_key`, `ssh_passphrase`.
pub(crate) const SENSITIVE_SUFFIXES: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "secretkey",
    "token",
    "apikey",
    "apikeys",
    "accesskey",
    "privatekey",
    "authkey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "credential",
    "credentials",
    "licensekey",
    "appkey",
    "applicationkey",
    "keybase",
];

/// Sensitive keys (squashed) under which a number of four digits or more is a secret too (a
/// numeric password or PIN): those ending in one of these. Under the others (`token`,
/// `apikey`, `cookie`, …) numbers are counts and ids, and stay numbers.
pub(crate) const NUMERIC_SECRET_SUFFIXES: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "secretkey",
];

/// Sensitive keys (squashed) under which a number is a secret, compared whole: `pass` (a
/// password's short name; a test run's count of passes is a false positive, as before).
pub(crate) const NUMERIC_SECRET_KEYS: &[&str] = &["pass"];

/// Keys that end like a sensitive key but name something that is not a secret: pagination
/// cursors (`pageToken`, AWS's `NextToken`, `continuationToken`), compared squashed.
pub(crate) const NOT_SENSITIVE_KEYS: &[&str] = &[
    "pagetoken",
    "nextpagetoken",
    "prevpagetoken",
    "previouspagetoken",
    "continuationtoken",
    "nexttoken",
    "paginationtoken",
    "synctoken",
    "nextsynctoken",
    "resumetoken",
    "cursortoken",
    "progresstoken",
];

/// Keys never touched by the default rules: protocol fields that look like secrets but are not,
/// and whose change would break replay.
pub(crate) const PROTOCOL_KEYS: &[&str] = &[
    "progressToken",
    "maxTokens",
    "cursor",
    "nextCursor",
    "requestState",
];

/// Keys (squashed) that mark an object as one entry of a model's token log-probabilities
/// (OpenAI's `{"token", "logprob", "bytes", "top_logprobs"}`, Gemini's `{"token", "tokenId",
/// "logProbability"}`, Ollama's and vLLM's copies of OpenAI's): its `token` is a piece of the
/// model's text ("Hello"), not a credential, and is left to the shape rules like any text.
pub(crate) const LOGPROB_KEYS: &[&str] = &["logprob", "logprobability", "toplogprobs", "tokenid"];

/// Keys whose object value is a JSON Schema: inside one, keys are keywords and property names,
/// never the names of secrets (`"api_key": {"type": "string"}` describes an argument).
pub(crate) const SCHEMA_KEYS: &[&str] = &[
    "inputSchema",
    "outputSchema",
    "requestedSchema",
    "$defs",
    "definitions",
];

/// The JSON Schema of a tool's arguments as model APIs name it in a request's tool definitions
/// (Anthropic `input_schema`, OpenAI and Gemini `parameters`, Gemini `parametersJsonSchema`):
/// a schema only there, as `parameters` may be anything elsewhere.
pub(crate) const TOOL_SCHEMA_KEYS: &[&str] =
    &["input_schema", "parameters", "parametersJsonSchema"];

/// What an answer declares about the server itself: a listing's arrays (`tools/list`,
/// `prompts/list`, `resources/list`, `resources/templates/list`) and `initialize`'s
/// `serverInfo`.
pub(crate) const LISTING_KEYS: &[&str] = &[
    "tools",
    "prompts",
    "resources",
    "resourceTemplates",
    "serverInfo",
];

/// Keys of the server's own prose, in a listing or a JSON Schema (see `Mode::Prose`).
pub(crate) const PROSE_KEYS: &[&str] = &["description", "title"];

/// Keys whose values are media (base64 images, audio, blobs): never taken for opaque secrets.
pub(crate) const MEDIA_KEYS: &[&str] = &["data", "blob", "image", "audio", "icon", "src"];

/// Keys whose values name or fingerprint something (ids, cursors, digests): never taken for
/// opaque secrets by the high-entropy rule alone (shapes and sensitive keys still apply).
/// Compared squashed; a key ending in `id` or `ids` counts too.
pub(crate) const IDENTIFIER_KEYS: &[&str] = &[
    "id",
    "ids",
    "uid",
    "uuid",
    "guid",
    "cursor",
    "nextcursor",
    "etag",
    "hash",
    "digest",
    "checksum",
    "sha",
    "sha1",
    "sha256",
    "sha512",
    "md5",
    "integrity",
    "fingerprint",
    "revision",
    "rev",
    "commit",
    "version",
    "cid",
    "ref",
    "slug",
    "handle",
    "name",
    "path",
    "uri",
    "url",
    "href",
    "cwd",
    "dir",
    "file",
    "filename",
    "x",
    "y",
    "kid",
    "x5t",
];

/// Words that make a key an identifier's or a digest's wherever they are in it
/// (`x-amz-checksum-sha256`, `fileHash`, `nextCursor`).
pub(crate) const IDENTIFIER_PARTS: &[&str] = &[
    "cursor",
    "hash",
    "digest",
    "etag",
    "checksum",
    "sha1",
    "sha256",
    "sha384",
    "sha512",
    "md5",
    "crc32",
    "integrity",
    "fingerprint",
];

/// Credential shapes found anywhere inside strings: (rule name, regex). Each match is replaced
/// whole. Keep every pattern ASCII and at least `prefilter::MIN_SHAPE_RUN` token characters long.
pub(crate) const SHAPES: &[(&str, &str)] = &[
    (
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:\-]*)",
    ),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    (
        "openai-key",
        r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}",
    ),
    (
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    (
        "gitlab-token",
        r"\bgl(?:pat|dt|ptt|rt|cbt|oas|soat|ft|imt|agent)-[A-Za-z0-9_\-]{20,}",
    ),
    ("slack-token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    ("slack-app-token", r"\bxapp-[0-9]-[A-Za-z0-9\-]{10,}"),
    (
        "slack-webhook",
        r"\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{20,}",
    ),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("google-oauth-secret", r"\bGOCSPX-[A-Za-z0-9_\-]{24,}"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    ),
    (
        "stripe-key",
        r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    ("stripe-webhook-secret", r"\bwhsec_[A-Za-z0-9+/=]{24,}"),
    (
        "sendgrid-key",
        r"\bSG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}",
    ),
    (
        "mailgun-key",
        r"\b(?:key-[0-9a-zA-Z]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})\b",
    ),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi-token", r"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}"),
    (
        "discord-bot-token",
        r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}",
    ),
    (
        "telegram-bot-token",
        r"(?:\b|bot)[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}",
    ),
    ("shopify-token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    ("digitalocean-token", r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    (
        "doppler-token",
        r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b",
    ),
    ("databricks-token", r"\bdapi[a-f0-9]{32}(?:-[0-9])?\b"),
    ("linear-key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
    (
        "notion-token",
        r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,50})\b",
    ),
    ("atlassian-token", r"\bATATT3[A-Za-z0-9_\-=]{100,}"),
    ("sentry-token", r"\bsntr[ysu]_[A-Za-z0-9_=+/\-]{30,}"),
    ("postman-key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
    (
        "grafana-token",
        r"\b(?:glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
    ),
    ("newrelic-key", r"\bNR(?:AK|JS|II)-[A-Za-z0-9]{19,32}\b"),
    ("netlify-token", r"\bnfp_[A-Za-z0-9]{36}\b"),
    ("heroku-key", r"\bHRKU-[A-Za-z0-9_\-]{40,}"),
    (
        "age-secret-key",
        r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{50,70}\b",
    ),
    (
        "azure-client-secret",
        r"\b[A-Za-z0-9_~.\-]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}",
    ),
    ("twilio-api-key", r"\bSK[0-9a-fA-F]{32}\b"),
    ("newrelic-license-key", r"\b[a-f0-9]{36}NRAL\b"),
    ("laravel-app-key", r"\bbase64:[A-Za-z0-9+/]{40,}={0,2}"),
    ("dockerhub-token", r"\bdckr_pat_[A-Za-z0-9_\-]{20,}"),
    (
        "discord-webhook",
        r"\bdiscord(?:app)?\.com/api/webhooks/[0-9]{17,20}/[A-Za-z0-9_\-]{40,}",
    ),
    (
        "cloudflare-origin-ca-key",
        r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{140,}",
    ),
    (
        "google-oauth-token",
        r"\b(?:ya29\.[A-Za-z0-9_\-]{30,}|1//0[A-Za-z0-9_\-]{30,})",
    ),
    (
        "putty-private-key",
        r"Private-Lines: *[0-9]+\r?\n[A-Za-z0-9+/=\r\n]*[A-Za-z0-9+/=]",
    ),
];

/// Credentials inside URLs: `scheme://user:password@host` (the password goes, also with an
/// empty user as in `redis://:pw@host`), and `scheme://TOKEN@host` where the user part is a
/// long token (a Sentry DSN key, a token in a git remote).
pub(crate) const URL_CREDENTIALS: &str =
    r"(?i)\b([a-z][a-z0-9+.\-]*://(?:[^/\s:@]*:|))([^@\s/]+)(@[^\s@]*)";

/// `name = value` / `name: value` in prose or config text. The name decides (the same test as
/// for JSON keys); `ASSIGNMENT_MIN` is the shortest value taken.
pub(crate) const ASSIGNMENT: &str =
    r#"(?i)\b([a-z][a-z0-9_.\-]{0,63})(["']?[ \t]*[:=][ \t]*)(["']?)"#;
/// The shortest value an assignment is taken for, in bytes.
pub(crate) const ASSIGNMENT_MIN: usize = 4;

/// A command-line flag and its value in text (a shell command in a log line or a tool result):
/// the value goes when the flag is named like a sensitive key or is one of `SECRET_FLAGS`.
pub(crate) const CLI_FLAG: &str =
    r#"(?:^|[\s'"(=])(--?)([A-Za-z][A-Za-z0-9_\-]*)(?:[ \t]+|=)([^\s'"]+)"#;

/// `-pSECRET` (mysql and friends): a password glued to its flag.
pub(crate) const GLUED_P: &str = r#"(?:^|\s)-p([^\s'"=\-][^\s'"]*)"#;

/// A sensitive word followed, within a few words on the same line, by something that looks
/// like a credential: `password afffac04-…` (netrc), `aws_secret_access_key Ds2V…` (a CLI),
/// `the Wi-Fi password for the office is oeHVnOIPc7~…` (prose).
pub(crate) const KEYWORD: &str = r"(?i)\b((?:[a-z0-9]+[_\-])*(?:password|passphrase|passcode|passwd|pwd|secret|token|api[ _\-]?key|access[ _\-]?key|secret[ _\-]?key|private[ _\-]?key|client[ _\-]?secret|auth[ _\-]?token|credentials?)|[a-z0-9]+(?:password|passwd|passphrase))\b";
/// How far after the word the credential may be.
pub(crate) const KEYWORD_REACH: usize = 64;

/// Terms of the trade with a digit in them (lower case, hyphens dropped): after a sensitive
/// word in prose they name an algorithm or an encoding, never the credential. Only words of
/// six characters or more matter (shorter ones never look like a credential).
pub(crate) const PROSE_TERMS: &[&str] = &[
    "oauth1",
    "oauth2",
    "base16",
    "base32",
    "base58",
    "base62",
    "base64",
    "base64url",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "sha3256",
    "sha3512",
    "pbkdf2",
    "argon2",
    "argon2i",
    "argon2d",
    "argon2id",
    "aes128",
    "aes192",
    "aes256",
    "aes128gcm",
    "aes256gcm",
    "ed25519",
    "x25519",
    "ed448",
    "secp256k1",
    "secp256r1",
    "p256",
    "pkcs1",
    "pkcs7",
    "pkcs8",
    "pkcs11",
    "pkcs12",
    "rs256",
    "rs384",
    "rs512",
    "hs256",
    "hs384",
    "hs512",
    "es256",
    "es384",
    "es512",
    "ps256",
    "hmacsha1",
    "hmacsha256",
    "hmacsha512",
    "x509",
    "utf8",
    "utf16",
    "http2",
    "http3",
    "ipv4",
    "ipv6",
    "tls12",
    "tls13",
    "2fa",
    "web3",
    "k8s",
    "s3",
    "ec2",
    "i18n",
    "l10n",
    "a11y",
];

/// Units after a number in prose (lower case): `90days`, `60calls`, `512mb`.
pub(crate) const PROSE_UNITS: &[&str] = &[
    "ms",
    "s",
    "sec",
    "secs",
    "second",
    "seconds",
    "m",
    "min",
    "mins",
    "minute",
    "minutes",
    "h",
    "hr",
    "hrs",
    "hour",
    "hours",
    "d",
    "day",
    "days",
    "w",
    "week",
    "weeks",
    "month",
    "months",
    "y",
    "yr",
    "yrs",
    "year",
    "years",
    "b",
    "kb",
    "mb",
    "gb",
    "tb",
    "kib",
    "mib",
    "gib",
    "tib",
    "k",
    "x",
    "px",
    "bit",
    "bits",
    "byte",
    "bytes",
    "char",
    "chars",
    "character",
    "characters",
    "digit",
    "digits",
    "letter",
    "letters",
    "word",
    "words",
    "call",
    "calls",
    "request",
    "requests",
    "req",
    "reqs",
    "rps",
    "rpm",
    "token",
    "tokens",
    "item",
    "items",
    "time",
    "times",
    "attempt",
    "attempts",
    "retry",
    "retries",
    "st",
    "nd",
    "rd",
    "th",
];

/// `<password>…</password>` (XML config, Maven settings). The content's bound,
/// [`XML_CONTENT_MAX`] characters, is checked on each match, not spelled `{1,4096}` here: that
/// counted repetition of a Unicode class compiled to 4,096 copies of it, 26 ms and 11 MiB, on
/// the first text the rules read that held `</` (an HTML answer with a password field). The
/// content holds no `<`, so no match the bound refuses could hide another one.
pub(crate) const XML_ELEMENT: &str =
    r"<([A-Za-z][A-Za-z0-9_.:\-]*)>([^<]+)</([A-Za-z][A-Za-z0-9_.:\-]*)>";
/// The longest element content (in characters) the XML rule takes.
pub(crate) const XML_CONTENT_MAX: usize = 4096;

/// `Bearer x` / `Basic x` credentials: the scheme stays, the credential goes.
pub(crate) const AUTH_SCHEME: &str =
    r"(?i)\b(bearer|basic|token|negotiate|ntlm|apikey)\s+([A-Za-z0-9._~+/=\-]{8,})";

/// The schemes of `AUTH_SCHEME`: an assignment whose value is one of them (`Authorization:
/// Bearer …`) leaves the credential to that rule.
pub(crate) const AUTH_SCHEMES: &[&str] =
    &["bearer", "basic", "token", "negotiate", "ntlm", "apikey"];

/// Values under a sensitive key that are settings, not secrets (`credentials: "include"` is a
/// `fetch` option).
pub(crate) const NOT_SECRET_VALUES: &[&str] = &["include", "omit", "same-origin"];

/// URL query parameters: the name stays, the value goes when the name is sensitive (the key
/// rule) or one of `URL_PARAM_NAMES`.
pub(crate) const URL_PARAM: &str = r"(?i)[?&;]([a-z0-9_.\-]{1,64})=([^&;\s#]{6,})";

/// Query parameter names that hold secrets although they are not sensitive keys (compared
/// lower-case).
pub(crate) const URL_PARAM_NAMES: &[&str] = &[
    "key",
    "sig",
    "signature",
    "auth",
    "code",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
    "x-goog-signature",
    "x-goog-credential",
];

/// An AWS secret access key near its key id in prose (`AKIA… / wJalr…`): the 40-character token
/// within this many bytes after the id goes too.
pub(crate) const AWS_SECRET_NEAR: usize = 80;

/// Command-line flags whose next argument is a secret, besides flags named like sensitive keys
/// (`--password`, `--api-key`). `-p` and `-k` skip a plain number (a port, a count).
pub(crate) const SECRET_FLAGS: &[&str] = &[
    "p",
    "k",
    "P",
    "a",
    "auth",
    "pat",
    "key",
    "credentials",
    "credential",
    "basic-auth",
    "user-pass",
];

/// Single-letter flags in `SECRET_FLAGS` are common for other things (`-p 8080`, `-a` for
/// "all"): their value goes only when it looks like a credential.
/// `-u user:pass` and `--user user:pass` (curl, httpie): the part after the colon goes.
pub(crate) const USER_PASS_FLAGS: &[&str] = &["u", "user"];

/// A whole string value is an opaque secret when it is this long…
pub(crate) const ENTROPY_MIN_LEN: usize = 24;
/// …and no longer (in bytes)…
pub(crate) const ENTROPY_MAX_LEN: usize = 128;
/// …made of token characters, mixes upper case, lower case and digits, and has at least this
/// many bits of Shannon entropy per character. Hex (hashes, ids) tops out at 4.0 and UUIDs at
/// about 3.9, so they stay; random base64 of that length is around 4.5–5.5.
pub(crate) const ENTROPY_MIN_BITS: f64 = 4.2;
/// …with digits making up at least this share of it (random base62 is about 16 %; words and
/// identifiers such as `TheQuickBrownFox2Jumps` or `msg_01XFDUDYJgAACz…` have far fewer).
pub(crate) const ENTROPY_MIN_DIGITS: f64 = 0.08;
/// Prefixes of strings that look random but are not secrets: base64 of PNG, JPEG, GIF and WebP
/// data, and subresource-integrity hashes.
pub(crate) const NOT_SECRET_PREFIXES: &[&str] = &[
    "iVBORw0KGgo",
    "/9j/",
    "R0lGOD",
    "UklGR",
    "sha1-",
    "sha256-",
    "sha384-",
    "sha512-",
];

/// Base64 strings at least this long are decoded and, when they hold text, scanned (a `.env`
/// file sent as a resource `blob`).
pub(crate) const BASE64_MIN_LEN: usize = 24;

/// The pattern with every `\b` an ASCII word boundary (`(?-u:\b)`). A Unicode `\b` makes
/// the regex engine give up its fast automaton on any text that is not ASCII and scan with
/// its slowest one: a model request of 85 KB holding one `—` took 77 ms to redact. Words of
/// credentials are ASCII; next to a non-ASCII letter an ASCII boundary matches where a
/// Unicode one would not, so a rule takes at most a little more, never less.
pub(crate) fn ascii_words(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push_str("(?-u:\\b)"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod ascii_words_tests {
    #[test]
    fn only_word_boundaries_change() {
        assert_eq!(
            super::ascii_words(r"\bab\\b\d\b"),
            r"(?-u:\b)ab\\b\d(?-u:\b)"
        );
    }
}
