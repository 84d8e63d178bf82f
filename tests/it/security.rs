//! Issue 5: secrets never reach the tape, tapes are tamper-evident, files stay private. Sessions
//! are recorded through `mcptape record` with a small inline Python server; the tape file's bytes
//! (and anything base64 inside it) are searched for every secret.

use crate::harness::*;
use crate::record::{b64, hex, py};
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

// --- the corpus ------------------------------------------------------------------------------

// Secrets the server produces.
const OPENAI: &str = "sk-proj-T3stK3y0penAI4bcdEFGH1jklMNOPqrstUVwx";
const ANTHROPIC: &str = "sk-ant-api03-Zq8RtY5uIoP2lKjHgFdSaMnBvCx7zQw3eR4tY6uI8oP0-AbCdEfAA";
const GITHUB: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const GITHUB_PAT: &str =
    "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefghijABCDEFGHIJKLMNOPQRSTU";
const SLACK: &str = "xoxb-2048163264-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx";
const AWS: &str = "AKIAZ7Q2W3E4R5T6Y7U8";
const AWS_LOG: &str = "AKIAQ3EGRTYUIOPLKJHG";
const GOOGLE: &str = "AIzaSyB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uVwX";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
const PEM_BODY: [&str; 2] = [
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK",
];
const URL_TOKEN: &str = "Ur1T0k3nValue42";
const PW_IN_JSON: &str = "correct-horse-battery-staple-99";
const SC_API: &str = "structured-api-key-0042";
const SC_SECRET: &str = "structured-secret-0043";

// Secrets the client sends.
const C_API: &str = "client-api-key-123";
const C_PW: &str = "hunter2-pw-xyz";
const C_BEARER: &str = "abcDEF123ghiJKL456";
const C_NESTED: &str = "nested-access-token-789";
const C_ARR: [&str; 2] = ["array-secret-one-1", "array-secret-two-2"];
const C_COOKIE: [&str; 2] = ["sid=cookie-value-one", "pref=cookie-value-two"];
const C_CURL_BEARER: &str = "curlBearerCred77.xyz";

// Ordinary content that must survive.
const SMALL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const UUID: &str = "123e4567-e89b-12d3-a456-426614174000";
const PROSE: &str =
    "The quick brown fox jumps over the lazy dog; the build finished in 42 seconds.";
const PROGRESS_TOKEN: &str = "Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA";

fn pem() -> String {
    format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}\n{}\n-----END RSA PRIVATE KEY-----",
        PEM_BODY[0], PEM_BODY[1]
    )
}

fn url() -> String {
    format!("https://files.example.test/v1/export?token={URL_TOKEN}&page=2")
}

fn banner() -> String {
    format!("log: connecting to s3 with {AWS_LOG}")
}

fn sha_hex() -> String {
    hex(&Sha256::digest(b"mcptape"))
}

/// A long base64 image (deterministic bytes, so `+` and `/` occur).
fn image_b64() -> String {
    let mut x: u32 = 0x1234_5678;
    let bytes: Vec<u8> = (0..3000)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    b64(&bytes)
}

fn server_secrets() -> Vec<String> {
    let mut v: Vec<String> = [
        OPENAI, ANTHROPIC, GITHUB, GITHUB_PAT, SLACK, AWS, AWS_LOG, GOOGLE, JWT, URL_TOKEN,
        PW_IN_JSON, SC_API, SC_SECRET,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(PEM_BODY.iter().map(|s| s.to_string()));
    v
}

fn client_secrets() -> Vec<String> {
    let mut v: Vec<String> = [C_API, C_PW, C_BEARER, C_NESTED, C_CURL_BEARER]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(C_ARR.iter().map(|s| s.to_string()));
    v.extend(C_COOKIE.iter().map(|s| s.to_string()));
    v
}

/// Every secret of the corpus, the server's and the client's.
fn all_secrets() -> Vec<String> {
    let mut v = server_secrets();
    v.extend(client_secrets());
    v
}

/// The result of `tools/call leak`: every server-side secret, and ordinary content.
fn leak_result() -> Value {
    let texts = [
        format!("Your OpenAI key is {OPENAI}. Anthropic: {ANTHROPIC}. GitHub: {GITHUB} and {GITHUB_PAT}. Slack: {SLACK}. AWS: {AWS}. Google: {GOOGLE}."),
        format!("session {JWT}"),
        pem(),
        format!("download from {}", url()),
        json!({"user": "alice", "password": PW_IN_JSON, "note": "fine"}).to_string(),
        format!("again: {OPENAI}"),
        PROSE.to_string(),
    ];
    let mut content: Vec<Value> = texts
        .iter()
        .map(|t| json!({"type": "text", "text": t}))
        .collect();
    content.push(json!({"type": "image", "data": image_b64(), "mimeType": "image/png"}));
    content.push(json!({"type": "image", "data": SMALL_PNG, "mimeType": "image/png"}));
    content.push(json!({"type": "resource", "resource": {"uri": "file:///logo.png", "mimeType": "image/png", "blob": SMALL_PNG}}));
    json!({
        "content": content,
        "structuredContent": {
            "apiKey": SC_API,
            "credentials": {"secret": SC_SECRET},
            "sha256": sha_hex(),
            "uuid": UUID,
            "summary": PROSE,
        }
    })
}

/// The arguments of `tools/call echo`, holding the client's secrets (and some ordinary values
/// that only user rules touch).
fn client_args(api: &str, bearer: &str, curl_bearer: &str) -> Value {
    json!({
        "apiKey": api,
        "password": C_PW,
        "headers": {"Authorization": format!("Bearer {bearer}"), "Accept": "application/json"},
        "nested": {"level2": {"access_token": C_NESTED}},
        "items": [{"name": "a", "secret": C_ARR[0]}, {"name": "b", "secret": C_ARR[1]}],
        "cookie": C_COOKIE,
        "note": format!("curl -H 'Authorization: Bearer {curl_bearer}' https://example.test"),
        "query": "plain words",
        "X_Internal_Id": "internal-id-555",
        "ticket": "ticket corp-123456 opened",
        "pin": 987_654_321,
    })
}

fn echo_params(api: &str, bearer: &str, curl_bearer: &str) -> Value {
    json!({"name": "echo", "arguments": client_args(api, bearer, curl_bearer), "_meta": {"progressToken": PROGRESS_TOKEN}})
}

/// A line server: first writes `lines` (base64, so they can be any bytes) to stdout, then
/// answers `initialize`, `tools/call NAME` with `tools[NAME]` (else echoes the arguments in
/// structuredContent), anything else with `{}`.
const SERVER: &str = r##"
import sys, json, base64
S = json.load(open(sys.argv[1]))
out = sys.stdout.buffer
for b in S.get("lines", []):
    out.write(base64.b64decode(b) + b"\n")
    out.flush()
for line in sys.stdin.buffer:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if not isinstance(m, dict) or "id" not in m or "method" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "corpus", "version": "1"}}
    elif m["method"] == "tools/call":
        p = m["params"]
        r = S.get("tools", {}).get(p["name"])
        if r is None:
            r = {"content": [{"type": "text", "text": "ok"}],
                 "structuredContent": {"echo": p.get("arguments", {})}}
    else:
        r = {}
    out.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}).encode() + b"\n")
    out.flush()
"##;

/// The server command for a config `{"lines": [b64…], "tools": {name: result}}`. The config
/// goes in a file in `home`: the command line is recorded on the tape.
fn server(home: &Path, cfg: &Value) -> Vec<String> {
    let text = cfg.to_string();
    let file = home.join(format!(
        "server-{}.json",
        &hex(&Sha256::digest(&text))[..12]
    ));
    std::fs::write(&file, text).expect("write server config");
    py(SERVER, &[&s(&file)])
}

/// The corpus server: the banner with an AWS key, and the `leak` tool.
fn corpus_server(home: &Path) -> Vec<String> {
    server(
        home,
        &json!({"lines": [b64(banner().as_bytes())], "tools": {"leak": leak_result()}}),
    )
}

/// The corpus session's calls: echo twice (equal secrets), then leak.
fn corpus_calls() -> Vec<(&'static str, Value)> {
    vec![
        ("tools/call", echo_params(C_API, C_BEARER, C_CURL_BEARER)),
        ("tools/call", echo_params(C_API, C_BEARER, C_CURL_BEARER)),
        ("tools/call", json!({"name": "leak", "arguments": {}})),
    ]
}

/// The rules that redact the client's secrets in the echo request.
const REQUEST_RULES: &[&str] = &[
    "key:apikey",
    "key:password",
    "key:authorization",
    "key:access_token",
    "key:secret",
    "key:cookie",
    "bearer",
];

/// The rules that redact the server's secrets in the `leak` result.
const RESPONSE_RULES: &[&str] = &[
    "openai-key",
    "anthropic-key",
    "github-token",
    "slack-token",
    "aws-access-key",
    "google-api-key",
    "jwt",
    "private-key",
    "url-param",
    "key:password",
    "key:apikey",
    "key:secret",
];

// --- helpers ---------------------------------------------------------------------------------

/// Play replays the corpus server's log line, as it is on the tape: redacted.
fn replayed_banner(c: &mut LineClient) {
    let line = c
        .recv_raw(std::time::Duration::from_secs(30))
        .expect("the replayed log line");
    let line = text(&line);
    assert!(
        line.starts_with("log: connecting to s3 with [REDACTED:aws-access-key:"),
        "{line}"
    );
}

/// A hermetic `mcptape ARGS…`: run in `home`, its store `home/.mcptape` (and no inherited key,
/// as every [`Mt`]).
fn mt(home: &Path, args: &[&str]) -> Mt {
    Mt::new(args)
        .dir(home)
        .env("MCPTAPE_DIR", home.join(".mcptape"))
}

/// `mcptape play TAPE` in `home`, as a line client.
fn play_in(home: &Path, tape: &Path) -> LineClient {
    mt(home, &["play", &s(tape)]).spawn()
}

fn spawn_record(
    home: &Path,
    tape: &str,
    flags: &[&str],
    server: &[String],
    env: &[(&str, &str)],
) -> LineClient {
    mt(home, &["record", "--tape", tape])
        .args(flags)
        .arg("--")
        .args(server)
        .envs(env)
        .spawn()
}

/// What the client saw in a recorded session.
struct Session {
    /// The server's startup lines (raw, with their newline).
    startup: Vec<Vec<u8>>,
    /// The response to each call, in order.
    responses: Vec<Value>,
    stderr: String,
}

/// Reads `startup` lines, initializes, makes the calls (ids 1, 2, …), closes; exit 0 expected.
fn drive(mut c: LineClient, startup: usize, calls: &[(&str, Value)]) -> Session {
    let startup = (0..startup)
        .map(|_| {
            c.recv_raw(std::time::Duration::from_secs(30))
                .expect("a startup line")
        })
        .collect();
    let init = c.initialize();
    assert!(init.get("result").is_some(), "{init}");
    let responses = calls
        .iter()
        .enumerate()
        .map(|(i, (method, params))| c.call(i as i64 + 1, method, params.clone()))
        .collect();
    let stderr = c.finish_with(0);
    Session {
        startup,
        responses,
        stderr,
    }
}

/// Records the corpus session into `tape` (a path or name) with `flags`.
fn record_corpus(home: &Path, tape: &str, flags: &[&str], env: &[(&str, &str)]) -> Session {
    let c = spawn_record(home, tape, flags, &corpus_server(home), env);
    drive(c, 1, &corpus_calls())
}

/// The tape's bytes as text, plus every base64 payload on it decoded: what a reader of the file
/// could recover.
fn haystack(tape: &Path) -> String {
    let raw = std::fs::read(tape).expect("read tape");
    let mut out = text(&raw);
    for l in tape_lines(tape) {
        if let Some(b) = l["b64"].as_str() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("b64 field");
            out.push('\n');
            out.push_str(&text(&bytes));
        }
    }
    out
}

fn assert_absent(tape: &Path, secrets: &[String]) {
    let hay = haystack(tape);
    let leaked: Vec<&String> = secrets
        .iter()
        .filter(|s| hay.contains(s.as_str()))
        .collect();
    assert!(
        leaked.is_empty(),
        "secrets on the tape {}: {leaked:?}\n{hay}",
        tape.display()
    );
}

fn marker_re() -> regex::Regex {
    regex::Regex::new(r"\[REDACTED:([a-z0-9:_\-]+):([0-9a-f]{8})\]").expect("regex")
}

/// The markers inside a string, in order.
fn markers(s: &str) -> Vec<String> {
    marker_re()
        .find_iter(s)
        .map(|m| m.as_str().to_string())
        .collect()
}

fn is_marker_of(v: &Value, rule: &str) -> bool {
    v.as_str().is_some_and(|s| {
        s.starts_with(&format!("[REDACTED:{rule}:")) && markers(s).len() == 1 && s.ends_with(']')
    })
}

/// The msg line of a request (`c2s`) or response (`s2c`) with this id.
fn msg_line(tape: &Path, dir: &str, id: i64) -> Value {
    tape_msgs(tape)
        .into_iter()
        .find(|l| l["dir"] == dir && l["id"] == json!(id))
        .unwrap_or_else(|| panic!("no {dir} line with id {id} on the tape"))
}

fn redacted_rules(line: &Value) -> Vec<String> {
    line["redacted"]
        .as_array()
        .unwrap_or_else(|| panic!("no `redacted` field: {line}"))
        .iter()
        .map(|r| r.as_str().expect("rule names").to_string())
        .collect()
}

/// Asserts `text` (a tape's) holds a marker of each rule.
fn assert_markers(text: &str, rules: &[&str]) {
    for rule in rules {
        assert!(
            text.contains(&format!("[REDACTED:{rule}:")),
            "no {rule} marker:\n{text}"
        );
    }
}

fn assert_rules(line: &Value, want: &[&str]) {
    let got = redacted_rules(line);
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| !got.iter().any(|g| g == *w))
        .collect();
    assert!(missing.is_empty(), "rules {missing:?} missing from {got:?}");
}

// --- 1, 2: the corpus -------------------------------------------------------------------------

#[test]
fn no_secret_of_the_corpus_reaches_the_tape_and_ordinary_content_survives() {
    assert_eq!(GOOGLE.len(), 39, "a Google API key is 39 characters");
    let (dir, tape) = tmp_tape("corpus.jsonl");
    record_corpus(dir.path(), &s(&tape), &[], &[]);

    let all = all_secrets();
    assert_absent(&tape, &all);
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert_markers(&raw, &[REQUEST_RULES, RESPONSE_RULES].concat());

    // The client's request: every secret under its key, the `redacted` field naming the rules.
    let req = msg_line(&tape, "c2s", 1);
    assert_rules(&req, REQUEST_RULES);
    let a = &req["msg"]["params"]["arguments"];
    assert!(is_marker_of(&a["apiKey"], "key:apikey"), "{a}");
    assert!(is_marker_of(&a["password"], "key:password"), "{a}");
    assert!(
        is_marker_of(&a["headers"]["Authorization"], "key:authorization"),
        "{a}"
    );
    assert_eq!(a["headers"]["Accept"], "application/json");
    assert!(
        is_marker_of(&a["nested"]["level2"]["access_token"], "key:access_token"),
        "{a}"
    );
    assert!(is_marker_of(&a["items"][0]["secret"], "key:secret"), "{a}");
    assert_eq!(a["items"][1]["name"], "b");
    assert!(is_marker_of(&a["cookie"][0], "key:cookie"), "{a}");
    assert!(is_marker_of(&a["cookie"][1], "key:cookie"), "{a}");
    let note = a["note"].as_str().unwrap();
    assert!(
        note.starts_with("curl -H 'Authorization: Bearer [REDACTED:bearer:")
            && note.ends_with("]' https://example.test"),
        "{note}"
    );
    // Ordinary request content, untouched.
    assert_eq!(a["query"], "plain words");
    assert_eq!(a["X_Internal_Id"], "internal-id-555");
    assert_eq!(a["ticket"], "ticket corp-123456 opened");
    assert_eq!(a["pin"], 987_654_321);
    assert_eq!(
        req["msg"]["params"]["_meta"]["progressToken"], PROGRESS_TOKEN,
        "a progress token is protocol, not a secret"
    );
    assert_eq!(req["msg"]["params"]["name"], "echo");
    assert_eq!(req["method"], "tools/call");

    // Equal secrets, equal markers: across the two requests and in the echoed answer.
    let req2 = msg_line(&tape, "c2s", 2);
    assert_eq!(req2["msg"]["params"]["arguments"], *a);
    let echo = &msg_line(&tape, "s2c", 1)["msg"]["result"]["structuredContent"]["echo"];
    assert_eq!(
        echo["apiKey"], a["apiKey"],
        "the echoed key: the same marker"
    );
    assert_eq!(echo["password"], a["password"]);
    assert_ne!(
        a["items"][0]["secret"], a["items"][1]["secret"],
        "different secrets, different markers"
    );

    // The server's answer.
    let resp = msg_line(&tape, "s2c", 3);
    assert_rules(&resp, RESPONSE_RULES);
    let result = &resp["msg"]["result"];
    let texts: Vec<&str> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect();
    let first = markers(texts[0]);
    let rules: Vec<String> = first
        .iter()
        .map(|m| marker_re().captures(m).unwrap()[1].to_string())
        .collect();
    assert_eq!(
        rules,
        [
            "openai-key",
            "anthropic-key",
            "github-token",
            "github-token",
            "slack-token",
            "aws-access-key",
            "google-api-key"
        ],
        "{}",
        texts[0]
    );
    assert!(texts[0].starts_with("Your OpenAI key is [REDACTED:openai-key:"));
    assert_eq!(
        markers(texts[5]),
        [first[0].clone()],
        "the same key twice: the same marker"
    );
    assert!(
        texts[1].starts_with("session [REDACTED:jwt:"),
        "{}",
        texts[1]
    );
    assert!(
        is_marker_of(&json!(texts[2]), "private-key"),
        "{}",
        texts[2]
    );
    assert!(
        texts[3].starts_with(
            "download from https://files.example.test/v1/export?token=[REDACTED:url-param:"
        ) && texts[3].ends_with("]&page=2"),
        "{}",
        texts[3]
    );
    let inner: Value = serde_json::from_str(texts[4]).expect("JSON inside a string stays JSON");
    assert!(is_marker_of(&inner["password"], "key:password"), "{inner}");
    assert_eq!(inner["user"], "alice");
    assert_eq!(texts[6], PROSE);
    // Media, hashes, ids, prose: untouched.
    assert_eq!(result["content"][7]["data"], image_b64());
    assert_eq!(result["content"][8]["data"], SMALL_PNG);
    assert_eq!(result["content"][9]["resource"]["blob"], SMALL_PNG);
    let sc = &result["structuredContent"];
    assert!(is_marker_of(&sc["apiKey"], "key:apikey"), "{sc}");
    assert!(
        is_marker_of(&sc["credentials"]["secret"], "key:secret"),
        "{sc}"
    );
    assert_eq!(sc["sha256"], sha_hex());
    assert_eq!(sc["uuid"], UUID);
    assert_eq!(sc["summary"], PROSE);
    assert!(raw.contains(&image_b64()), "the image is on the tape whole");

    // The server's log line on stdout.
    let log = tape_msgs(&tape)
        .into_iter()
        .find(|l| l["kind"] == "not_json")
        .expect("the log line on the tape");
    assert_eq!(log["dir"], "s2c");
    let t = log["text"].as_str().unwrap();
    assert!(
        t.starts_with("log: connecting to s3 with [REDACTED:aws-access-key:") && t.ends_with(']'),
        "{t}"
    );
    assert_eq!(redacted_rules(&log), ["aws-access-key"]);
    // Lines with nothing to redact carry no `redacted` field.
    let init = msg_line(&tape, "c2s", 0);
    assert!(init.get("redacted").is_none(), "{init}");
}

#[test]
fn the_client_gets_the_real_unredacted_bytes() {
    let (dir, tape) = tmp_tape("corpus.jsonl");
    let seen = record_corpus(dir.path(), &s(&tape), &[], &[]);
    assert_eq!(seen.startup, [format!("{}\n", banner()).into_bytes()]);
    for r in &seen.responses[..2] {
        assert_eq!(
            r["result"]["structuredContent"]["echo"],
            client_args(C_API, C_BEARER, C_CURL_BEARER),
            "the server got the client's real arguments"
        );
    }
    assert_eq!(seen.responses[2]["result"], leak_result());
    assert_contains(&seen.stderr, "mcptape: recorded");
    let all = all_secrets();
    assert!(
        !all.iter().any(|s| seen.stderr.contains(s.as_str())),
        "no secret in mcptape's own output: {}",
        seen.stderr
    );
    assert_absent(&tape, &all);
}

// --- 3: rules ----------------------------------------------------------------------------------

#[test]
fn no_default_redaction_records_secrets_as_they_are() {
    let (dir, tape) = tmp_tape("plain.jsonl");
    record_corpus(dir.path(), &s(&tape), &["--no-default-redaction"], &[]);
    let hay = haystack(&tape);
    let all = all_secrets();
    for secret in &all {
        assert!(hay.contains(secret.as_str()), "{secret} not recorded as is");
    }
    assert!(!hay.contains("[REDACTED:"), "{hay}");
    assert!(tape_msgs(&tape).iter().all(|l| l.get("redacted").is_none()));
}

/// The user rules of [`assert_user_rules`] as `record` flags.
const USER_RULE_FLAGS: [&str; 6] = [
    "--redact",
    "x-internal-id",
    "--redact",
    "re:corp-[0-9]{6}",
    "--redact",
    "path:$.params.arguments.pin",
];

/// The user rules of [`assert_user_rules`] as lines of the project config's `[redact]` table.
const USER_RULES_TOML: &str = "keys = [\"x-internal-id\"]\npatterns = [\"corp-[0-9]{6}\"]\npaths = [\"$.params.arguments.pin\"]\n";

/// The user rules (`x-internal-id`, `corp-NNNNNN`, `$.params.arguments.pin`) applied to the
/// echo request; the built-in rules still on unless `defaults` is false.
fn assert_user_rules(tape: &Path, defaults: bool) {
    let req = msg_line(tape, "c2s", 1);
    let a = &req["msg"]["params"]["arguments"];
    assert!(
        is_marker_of(&a["X_Internal_Id"], "key:x_internal_id"),
        "{a}"
    );
    let ticket = a["ticket"].as_str().unwrap();
    assert!(
        ticket.starts_with("ticket [REDACTED:user-regex:") && ticket.ends_with("] opened"),
        "{ticket}"
    );
    assert!(is_marker_of(&a["pin"], "user-path"), "{a}");
    assert_rules(&req, &["key:x_internal_id", "user-regex", "user-path"]);
    let hay = haystack(tape);
    assert!(!hay.contains("internal-id-555"), "{hay}");
    assert!(!hay.contains("corp-123456"), "{hay}");
    if defaults {
        assert!(is_marker_of(&a["apiKey"], "key:apikey"), "{a}");
        let all = all_secrets();
        assert_absent(tape, &all);
    } else {
        assert_eq!(a["apiKey"], C_API, "built-in rules off");
        assert!(hay.contains(OPENAI));
    }
}

#[test]
fn redact_flags_add_rules() {
    let dir = tmp();
    // With the built-in rules, then without them.
    for (defaults, name) in [(true, "flags.jsonl"), (false, "flags-only.jsonl")] {
        let mut flags = if defaults {
            vec![]
        } else {
            vec!["--no-default-redaction"]
        };
        flags.extend(USER_RULE_FLAGS);
        let tape = dir.path().join(name);
        record_corpus(dir.path(), &s(&tape), &flags, &[]);
        assert_user_rules(&tape, defaults);
    }
}

/// Writes the project config, `home/.mcptape/config.toml`; returns its path.
fn project_config(home: &Path, toml: &str) -> PathBuf {
    let store = home.join(".mcptape");
    std::fs::create_dir_all(&store).unwrap();
    let path = store.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

#[test]
fn project_config_adds_rules() {
    let dir = tmp();
    // With the built-in rules, then with `default = false`.
    for (defaults, name) in [(true, "cfg.jsonl"), (false, "cfg-only.jsonl")] {
        let default = if defaults { "" } else { "default = false\n" };
        project_config(dir.path(), &format!("[redact]\n{default}{USER_RULES_TOML}"));
        let tape = dir.path().join(name);
        record_corpus(dir.path(), &s(&tape), &[], &[]);
        assert_user_rules(&tape, defaults);
    }
}

#[test]
fn invalid_rules_are_usage_errors() {
    let dir = tmp();
    let home = dir.path();
    let srv = corpus_server(home);
    let tape = dir.path().join("never.jsonl");
    let tape_s = s(&tape);
    let record_with = |flags: &[&str]| {
        mt(dir.path(), &["record", "--tape", &tape_s])
            .args(flags)
            .arg("--")
            .args(&srv)
            .run()
    };
    let err = record_with(&["--redact", "re:(unclosed"]).status(64).stderr;
    assert!(
        err.contains("invalid redaction regex") && err.contains("(unclosed"),
        "{err}"
    );
    assert!(!tape.exists(), "nothing recorded with a bad rule");

    record_with(&["--redact", "path:$[unclosed"])
        .status(64)
        .stderr_contains("invalid redaction path");

    // In the project config too, and for lint and redact.
    let config = project_config(dir.path(), "[redact]\npatterns = [\"[z-a]\"]\n");
    record_with(&[])
        .status(64)
        .stderr_contains("invalid redaction regex");
    assert!(!tape.exists());
    std::fs::remove_file(config).unwrap();
    let some = dir.path().join("some.jsonl");
    write_tape(&some, &[], true);
    for cmd in ["lint", "redact"] {
        mt(dir.path(), &[cmd, &s(&some), "--redact", "re:("])
            .run()
            .status(64)
            .stderr_contains("invalid redaction regex");
    }
}

// --- 4: play with real secrets ------------------------------------------------------------------

#[test]
fn a_redacted_tape_plays_for_a_client_sending_real_secrets() {
    let (dir, tape) = tmp_tape("corpus.jsonl");
    record_corpus(dir.path(), &s(&tape), &[], &[]);
    let recorded: Vec<Value> = (1..=3)
        .map(|id| msg_line(&tape, "s2c", id)["msg"].clone())
        .collect();

    let mut c = play_in(dir.path(), &tape);
    replayed_banner(&mut c);
    c.initialize();
    // The very secrets recorded, then other real values.
    let r1 = c.call(
        11,
        "tools/call",
        echo_params(C_API, C_BEARER, C_CURL_BEARER),
    );
    let r2 = c.call(
        12,
        "tools/call",
        echo_params(
            "another-real-key-999",
            "zzzOtherBearer000",
            "otherCurlCred12345",
        ),
    );
    let r3 = c.call(13, "tools/call", json!({"name": "leak", "arguments": {}}));
    for (r, (rec, id)) in [r1, r2, r3].iter().zip(recorded.iter().zip([11, 12, 13])) {
        let mut want = rec.clone();
        want["id"] = json!(id);
        assert_eq!(r, &want, "answered as recorded");
    }
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "missed 0, drifted 0");

    // A miss (a non-secret argument differs): the explanation shows no secret of the client.
    let mut c = play_in(dir.path(), &tape);
    replayed_banner(&mut c);
    c.initialize();
    let mut p = echo_params("yet-another-real-key", "missBearer4242", "missCurlCred4242");
    p["arguments"]["query"] = json!("different words");
    let r = c.call(21, "tools/call", p);
    assert!(r.get("error").is_some(), "{r}");
    let stderr = c.finish_with(1);
    for secret in ["yet-another-real-key", "missBearer4242", "missCurlCred4242"] {
        assert!(!stderr.contains(secret), "{secret} on stderr:\n{stderr}");
        assert!(
            !r.to_string().contains(secret),
            "{secret} in the error: {r}"
        );
    }
    assert_contains(&stderr, "different words");
    assert_contains(&stderr, "matched as wildcards");
}

/// On a tape recorded with `--no-default-redaction`, a miss explanation compares what was asked
/// as it was asked: the same secrets as recorded are no difference, different ones are one,
/// and neither side's secret is shown (stderr, or the error the client gets).
#[test]
fn a_miss_on_an_unredacted_tape_compares_secrets_as_asked_and_shows_none() {
    let dir = tmp();
    let tape = dir.path().join("plain.jsonl");
    let secrets = |key: &str, city: &str| json!({"name": "echo", "arguments": {"city": city, "api_key": key, "token": "tok-plain-4242"}});
    let c = spawn_record(
        dir.path(),
        &s(&tape),
        &["--no-default-redaction"],
        &server(dir.path(), &json!({})),
        &[],
    );
    drive(
        c,
        0,
        &[("tools/call", secrets("sk-recorded-key-1234", "Lisbon"))],
    );
    assert!(haystack(&tape).contains("sk-recorded-key-1234"));

    // The paths where the nearest recorded call differs, from the error the client got.
    let differing = |r: &Value| -> Vec<String> {
        let near = &r["error"]["data"]["mcptape"]["nearest"][0];
        near["differences"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|d| d["path"].as_str().unwrap().to_string())
            .collect()
    };
    // The same secrets, another city: one difference, the city.
    let mut c = play_in(dir.path(), &tape);
    c.initialize();
    let r = c.call(21, "tools/call", secrets("sk-recorded-key-1234", "Porto"));
    assert_eq!(differing(&r), ["$.arguments.city"], "{r}");
    // Another key, the same city: the key differs, shown without either secret.
    let r2 = c.call(22, "tools/call", secrets("sk-asked-other-5678", "Lisbon"));
    assert_eq!(differing(&r2), ["$.arguments.api_key"], "{r2}");
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "$.arguments.city");
    assert_contains(&stderr, "$.arguments.api_key");
    for secret in [
        "sk-recorded-key-1234",
        "sk-asked-other-5678",
        "tok-plain-4242",
    ] {
        assert!(!stderr.contains(secret), "{secret} on stderr:\n{stderr}");
        for r in [&r, &r2] {
            assert!(
                !r.to_string().contains(secret),
                "{secret} in the error: {r}"
            );
        }
    }
}

// --- 5: tampering ------------------------------------------------------------------------------

/// A small clean session (no startup line): initialize, echo {"city": "Lisbon"}.
fn record_small(home: &Path, tape: &Path, flags: &[&str], env: &[(&str, &str)]) {
    let c = spawn_record(home, &s(tape), flags, &server(home, &json!({})), env);
    drive(
        c,
        0,
        &[(
            "tools/call",
            json!({"name": "echo", "arguments": {"city": "Lisbon"}}),
        )],
    );
}

/// The small session recorded (no flags) into `home/t.jsonl`.
fn small_tape(home: &Path) -> PathBuf {
    let tape = home.join("t.jsonl");
    record_small(home, &tape, &[], &[]);
    tape
}

/// The small session recorded (no flags) as the tape named `name`; returns its path in the store.
fn small_named_tape(home: &Path, name: &str) -> PathBuf {
    record_small(home, Path::new(name), &[], &[]);
    home.join(".mcptape/tapes").join(format!("{name}.jsonl"))
}

fn lines_of(tape: &Path) -> Vec<String> {
    std::fs::read_to_string(tape)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut t = lines.join("\n");
    t.push('\n');
    std::fs::write(path, t).unwrap();
}

/// 1-based number of the first line containing `needle`.
fn line_with(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle}"))
        + 1
}

/// `mcptape verify` → (exit code, stdout).
fn verify(home: &Path, tape: &Path, flags: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let tape_s = s(tape);
    let mut args = vec!["verify", &tape_s];
    args.extend_from_slice(flags);
    let out = mt(home, &args).envs(env).run();
    (out.code(), out.stdout)
}

fn verify_json(home: &Path, tape: &Path) -> Value {
    mt(home, &["verify", &s(tape), "--json"]).run().json()
}

#[test]
fn verify_detects_each_kind_of_tampering() {
    let dir = tmp();
    let home = dir.path();
    let tape = small_tape(home);
    let lines = lines_of(&tape);
    let n = lines.len();
    assert!(
        lines[n - 1].starts_with(r#"{"type":"end""#),
        "{}",
        lines[n - 1]
    );
    let (c, out) = verify(home, &tape, &[], &[]);
    assert_eq!(c, 0, "{out}");
    assert_contains(&out, "intact");
    assert_contains(&out, "not signed");
    assert_eq!(verify_json(home, &tape)["verdict"], "intact");

    let req = line_with(&lines, "\"Lisbon\"");
    let case = |name: &str, edited: Vec<String>| -> PathBuf {
        let p = home.join(format!("{name}.jsonl"));
        write_lines(&p, &edited);
        p
    };

    // One byte edited in a msg line (still valid JSON).
    let mut l = lines.clone();
    l[req - 1] = l[req - 1].replacen("Lisbon", "Lisbom", 1);
    let p = case("byte", l);
    let (c, out) = verify(home, &p, &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {req}"));
    let j = verify_json(home, &p);
    assert_eq!(
        (j["verdict"].as_str(), j["line"].as_u64()),
        (Some("tampered"), Some(req as u64))
    );

    // A byte edited in the chain hash itself.
    let mut l = lines.clone();
    let last = l[req - 1].pop().unwrap();
    let q = l[req - 1].pop().unwrap();
    let h = l[req - 1].pop().unwrap();
    l[req - 1].push(if h == '0' { '1' } else { '0' });
    l[req - 1].push(q);
    l[req - 1].push(last);
    let (c, out) = verify(home, &case("hash", l), &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {req}"));

    // A line deleted.
    let mut l = lines.clone();
    l.remove(req - 1);
    let (c, out) = verify(home, &case("deleted", l), &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {req}"));

    // Two lines swapped.
    let mut l = lines.clone();
    l.swap(req - 1, req);
    let (c, out) = verify(home, &case("swapped", l), &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {req}"));

    // The end line edited.
    let mut l = lines.clone();
    l[n - 1] = l[n - 1].replacen("\"messages\":", "\"messages\":1", 1);
    let (c, out) = verify(home, &case("end-edited", l), &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {n}"));

    // A line appended after the end line.
    let mut l = lines.clone();
    l.push(lines[req - 1].clone());
    let (c, out) = verify(home, &case("appended", l), &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, &format!("TAMPERED at line {}", n + 1));

    // The end line cut off.
    let l = lines[..n - 1].to_vec();
    let p = case("cut", l);
    let (c, out) = verify(home, &p, &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert!(
        out.contains(&format!("cut off at line {n} (disk full or crash)"))
            && out.contains("no closing line"),
        "{out}"
    );
    assert_eq!(verify_json(home, &p)["verdict"], "cut");
    // Each key once (the verdict's own count of lines was printed beside the report's).
    let raw = mt(home, &["verify", &s(&p), "--json"]).run().stdout;
    assert_eq!(raw.matches("\"lines\"").count(), 1, "{raw}");
    assert_eq!(verify_json(home, &p)["lines"], n - 1, "{raw}");

    // A torn last line: the end line half written, no newline.
    let mut t = lines[..n - 1].join("\n");
    t.push('\n');
    t.push_str(&lines[n - 1][..lines[n - 1].len() / 2]);
    let p = home.join("torn.jsonl");
    std::fs::write(&p, t).unwrap();
    let (c, out) = verify(home, &p, &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert!(
        out.contains(&format!("line {n} is torn")) && out.contains("cut off"),
        "{out}"
    );

    // A tape that never had a chain (format 1.0, written by hand): cannot be verified.
    let old = home.join("old.jsonl");
    write_tape(&old, &[], true);
    let (c, out) = verify(home, &old, &[], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, "no hash chain");
}

#[test]
fn verify_fails_on_bytes_appended_past_the_closing_line_without_a_newline() {
    let dir = tmp();
    let home = dir.path();
    let plain = small_tape(home);
    let (key, signed) = signed_tape(home);
    let key_flags = ["--key-file".to_string(), s(&key)];
    for (tape, flags) in [(&plain, &[][..]), (&signed, &key_flags[..])] {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let original = std::fs::read(tape).unwrap();
        let n = lines_of(tape).len();
        // Not JSON; and the start of a tape line, as a torn one looks.
        for junk in [&b"garbage"[..], br#"{"type":"msg","seq":99"#] {
            let p = home.join("appended.jsonl");
            std::fs::write(&p, [&original[..], junk].concat()).unwrap();
            let (c, out) = verify(home, &p, &flags, &[]);
            assert_eq!(c, 1, "{out}");
            assert_contains(&out, &format!("TAMPERED at line {}", n + 1));
            assert_contains(&out, "after the closing line");
            assert_contains(&out, &format!("byte {}", original.len()));
            let j = verify_json(home, &p);
            assert_eq!(
                (j["verdict"].as_str(), j["line"].as_u64()),
                (Some("tampered"), Some(n as u64 + 1)),
                "{j}"
            );
        }
    }
}

/// Recomputes every `h` (and the end line's `head`) as someone who edited the tape would; the
/// end line's `sig` is kept unless `strip_sig`.
pub(crate) fn rechain(lines: &[String], strip_sig: bool) -> Vec<String> {
    let head_re = regex::Regex::new(r#""head":"[0-9a-f]{64}""#).unwrap();
    let sig_re = regex::Regex::new(r#","sig":"hmac-sha256:[0-9a-f]{64}""#).unwrap();
    let mut head = hex(&Sha256::digest(lines[0].as_bytes()));
    let mut out = vec![lines[0].clone()];
    for line in &lines[1..] {
        let cut = line.len() - r#","h":""}"#.len() - 64;
        assert!(line[cut..].starts_with(r#","h":""#), "{line}");
        let mut without = format!("{}}}", &line[..cut]);
        if without.starts_with(r#"{"type":"end""#) {
            without = head_re
                .replace(&without, format!(r#""head":"{head}""#).as_str())
                .into_owned();
            if strip_sig {
                without = sig_re.replace(&without, "").into_owned();
            }
        }
        let mut h = Sha256::new();
        h.update(head.as_bytes());
        h.update(without.as_bytes());
        head = hex(&h.finalize());
        out.push(format!(
            "{},\"h\":\"{head}\"}}",
            &without[..without.len() - 1]
        ));
    }
    out
}

const SIGNING_KEY: &str = "s3cret-signing-key";

/// A small session recorded with `--sign --key-file KEY` in `home`: (the key file, the tape).
fn signed_tape(home: &Path) -> (PathBuf, PathBuf) {
    let key = home.join("key");
    std::fs::write(&key, format!("{SIGNING_KEY}\n")).unwrap();
    let tape = home.join("signed.jsonl");
    record_small(home, &tape, &["--sign", "--key-file", &s(&key)], &[]);
    (key, tape)
}

/// `lines` re-chained (see [`rechain`]) into `home/NAME`: a forgery by someone without the key.
fn forge(home: &Path, name: &str, lines: &[String], strip_sig: bool) -> PathBuf {
    let forged = home.join(name);
    write_lines(&forged, &rechain(lines, strip_sig));
    forged
}

#[test]
fn signed_tapes_verify_with_the_key_only() {
    let dir = tmp();
    let home = dir.path();
    let (key, tape) = signed_tape(home);
    let wrong = home.join("wrong");
    std::fs::write(&wrong, "not-the-key\n").unwrap();
    let lines = lines_of(&tape);
    assert!(
        lines.last().unwrap().contains("\"sig\":\"hmac-sha256:"),
        "{}",
        lines.last().unwrap()
    );

    let (c, out) = verify(home, &tape, &["--key-file", &s(&key)], &[]);
    assert_eq!(c, 0, "{out}");
    assert!(
        out.contains("intact") && out.contains("signature valid"),
        "{out}"
    );
    let (c, out) = verify(home, &tape, &[], &[("MCPTAPE_SIGNING_KEY", SIGNING_KEY)]);
    assert_eq!(c, 0, "{out}");
    assert!(
        out.contains("signature valid"),
        "the key from the environment: {out}"
    );
    let (c, out) = verify(home, &tape, &["--key-file", &s(&wrong)], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, "SIGNATURE DOES NOT MATCH");
    let (c, out) = verify(home, &tape, &[], &[]);
    assert_eq!(c, 0, "without a key the chain is checked: {out}");
    assert!(out.contains("signed (give the key"), "{out}");

    // Signed with the key from the environment.
    let tape_env = home.join("signed-env.jsonl");
    record_small(
        home,
        &tape_env,
        &["--sign"],
        &[("MCPTAPE_SIGNING_KEY", SIGNING_KEY)],
    );
    let (c, out) = verify(home, &tape_env, &["--key-file", &s(&key)], &[]);
    assert_eq!(c, 0, "{out}");
    assert_contains(&out, "signature valid");

    // --sign without a key: a usage error, nothing recorded.
    let nokey = home.join("nokey.jsonl");
    mt(home, &["record", "--sign", "--tape", &s(&nokey), "--"])
        .args(server(home, &json!({})))
        .run()
        .status(64)
        .stderr_contains("signing needs a key");

    // Re-chained by someone without the key: the chain holds, the signature does not.
    let req = line_with(&lines, "\"Lisbon\"");
    let mut edited = lines.clone();
    edited[req - 1] = edited[req - 1].replacen("Lisbon", "Paris!", 1);
    let forged = forge(home, "forged.jsonl", &edited, false);
    let (c, out) = verify(home, &forged, &[], &[]);
    assert_eq!(
        c, 0,
        "the re-chained tape's chain holds (that is what signing is for): {out}"
    );
    let (c, out) = verify(home, &forged, &["--key-file", &s(&key)], &[]);
    assert_eq!(c, 1, "{out}");
    assert_contains(&out, "SIGNATURE DOES NOT MATCH");
    // The re-chaining itself is right: unchanged lines re-chain to the same tape.
    assert_eq!(rechain(&lines, false), lines);
}

/// Records a signed tape, lets `edit` change its lines, forges them (see [`forge`]; without the
/// signature if `strip_sig`) and asserts `verify --key-file` rejects the forgery (`what` it is).
fn assert_forged_edit_rejected(what: &str, strip_sig: bool, edit: impl FnOnce(&mut Vec<String>)) {
    let dir = tmp();
    let home = dir.path();
    let (key, tape) = signed_tape(home);
    let mut lines = lines_of(&tape);
    edit(&mut lines);
    let forged = forge(home, "forged.jsonl", &lines, strip_sig);
    if strip_sig {
        let text = std::fs::read_to_string(&forged).unwrap();
        assert!(
            !text.contains("\"sig\""),
            "the signature is still on: {text}"
        );
    }
    let (c, out) = verify(home, &forged, &["--key-file", &s(&key)], &[]);
    assert_eq!(c, 1, "{what}, yet `verify --key-file` passes: {out}");
}

#[test]
fn a_signed_tape_with_its_signature_stripped_fails_verification_with_the_key() {
    // Whoever checks with the key expects a signature: an unsigned tape is not authentic.
    assert_forged_edit_rejected(
        "an edited tape was re-chained and stripped of its signature",
        true,
        |lines| {
            let req = line_with(lines, "\"Lisbon\"");
            lines[req - 1] = lines[req - 1].replacen("Lisbon", "Paris!", 1);
        },
    );
}

#[test]
fn the_signature_covers_the_closing_line() {
    // The recording's exit code (or message counts, or `incomplete`) forged on the end line,
    // and only that line's `h` recomputed.
    assert_forged_edit_rejected(
        "the closing line was edited and re-hashed",
        false,
        |lines| {
            let end = lines.last_mut().expect("the end line");
            assert!(end.contains("\"exit\":{\"code\":0}"), "{end}");
            *end = end.replacen("\"exit\":{\"code\":0}", "\"exit\":{\"code\":3}", 1);
        },
    );
}

// --- 6: redact and lint ------------------------------------------------------------------------

#[test]
fn redact_takes_secrets_out_of_an_existing_tape_and_lint_finds_them() {
    let dir = tmp();
    let home = dir.path();
    let tape = home.join("plain.jsonl");
    record_corpus(home, &s(&tape), &["--no-default-redaction"], &[]);
    let original = std::fs::read(&tape).unwrap();
    let lines = lines_of(&tape);
    let all = all_secrets();

    // lint on the original: exit 1, naming lines and rules.
    let report = mt(home, &["lint", &s(&tape)]).run().status(1).stdout;
    let req = line_with(&lines, "\"id\":1,\"method\":\"tools/call\"");
    let resp = line_with(&lines, "\"Your OpenAI key is");
    let log = line_with(&lines, "\"kind\":\"not_json\"");
    for (line, rule) in [
        (req, "key:apikey"),
        (req, "key:authorization"),
        (req, "bearer"),
        (resp, "openai-key"),
        (resp, "private-key"),
        (resp, "jwt"),
        (resp, "key:password"),
        (log, "aws-access-key"),
    ] {
        assert!(
            report.contains(&format!("line {line}: suspected secret ({rule})")),
            "line {line} {rule}:\n{report}"
        );
    }
    assert_contains(&report, "mcptape redact");
    assert!(
        !all.iter().any(|s| report.contains(s.as_str())),
        "lint quotes no secret:\n{report}"
    );

    // redact -o: a new file, the original untouched.
    let out_path = home.join("out.jsonl");
    mt(home, &["redact", &s(&tape), "-o", &s(&out_path)])
        .run()
        .success();
    assert_eq!(std::fs::read(&tape).unwrap(), original);
    assert_absent(&out_path, &all);

    // redact in place: the original kept as .bak.
    mt(home, &["redact", &s(&tape)])
        .run()
        .success()
        .stderr_contains(".bak");
    let bak = home.join("plain.jsonl.bak");
    assert_eq!(
        std::fs::read(&bak).unwrap(),
        original,
        "the backup is the original"
    );
    assert_absent(&tape, &all);
    assert_markers(
        &std::fs::read_to_string(&tape).unwrap(),
        &[
            "openai-key",
            "private-key",
            "key:apikey",
            "aws-access-key",
            "bearer",
        ],
    );
    assert_rules(&msg_line(&tape, "c2s", 1), &["key:apikey", "bearer"]);
    assert_eq!(
        tape_lines(&tape).len(),
        lines.len(),
        "the same lines, redacted"
    );
    assert_eq!(
        msg_line(&tape, "s2c", 3)["msg"]["result"]["content"][7]["data"],
        image_b64()
    );

    for t in [&tape, &out_path] {
        let (c, out) = verify(home, t, &[], &[]);
        assert_eq!(c, 0, "a fresh chain: {out}");
        assert_contains(&out, "intact");
        mt(home, &["lint", &s(t)])
            .run()
            .success()
            .stdout_contains("clean");
    }

    // A redacted tape plays.
    let mut c = play_in(home, &tape);
    replayed_banner(&mut c);
    c.initialize();
    let r = c.call(1, "tools/call", echo_params(C_API, C_BEARER, C_CURL_BEARER));
    assert!(r.get("result").is_some(), "{r}");
    c.finish_with(0);
}

/// A tape whose lines end in CRLF (a checkout by git with `core.autocrlf` on Windows) reads,
/// verifies and plays as written; `redact` and `prune` rewrite it, and must find each line's
/// `h` before its CR: else the old `h` stayed in the line with the new one glued after it, a
/// tape no command reads (`TAMPERED at line 2`, and play refused it: exit 65).
#[test]
fn redact_and_prune_rewrite_a_tape_with_crlf_line_ends() {
    let dir = tmp();
    let home = dir.path();
    let tape = home.join("t.jsonl");
    record_small(home, &tape, &["--no-default-redaction"], &[]);
    let lines = lines_of(&tape);
    std::fs::write(
        &tape,
        lines.iter().map(|l| format!("{l}\r\n")).collect::<String>(),
    )
    .unwrap();
    let (code, said) = verify(home, &tape, &[], &[]);
    assert_eq!(code, 0, "read as written: {said}");

    // redact: the city is the secret; every other byte of every line stays (the chain aside).
    let out = home.join("redacted.jsonl");
    mt(
        home,
        &["redact", &s(&tape), "--redact", "city", "-o", &s(&out)],
    )
    .run()
    .success();
    let (code, said) = verify(home, &out, &[], &[]);
    assert_eq!(code, 0, "{said}");
    let marker = regex::Regex::new(r#"\[REDACTED:key:city:[0-9a-f]{8}\]"#).unwrap();
    let unredacted: Vec<String> = strip_chain(&lines_of(&out))
        .iter()
        .map(|l| {
            let l = l.replace(r#","redacted":["key:city"]"#, "");
            marker.replace_all(&l, "Lisbon").into_owned()
        })
        .collect();
    assert_eq!(unredacted, strip_chain(&lines), "only the city changed");
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("[REDACTED:key:city:"));
    // Served: the marker is a wildcard for the city the client sends.
    let mut c = play_in(home, &out);
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"city": "Lisbon"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    c.finish_with(0);

    // prune: a run that used only the handshake; its report names the request's link in the
    // chain (it was left out: the tape could not be told from another), and the pruned tape
    // verifies.
    let report = home.join("unused.json");
    let mut c = mt(home, &["play", &s(&tape), "--unused-report", &s(&report)]).spawn();
    c.initialize();
    c.finish_with(0);
    let unused = unused_report(&report).unused;
    assert_eq!(unused.len(), 1, "{unused:?}");
    assert_eq!(
        unused[0].h.as_ref().map(String::len),
        Some(64),
        "{unused:?}"
    );
    mt(home, &["prune", &s(&tape), "--unused", &s(&report)])
        .run()
        .success();
    let (code, said) = verify(home, &tape, &[], &[]);
    assert_eq!(code, 0, "{said}");
    assert!(
        !std::fs::read_to_string(&tape).unwrap().contains("Lisbon"),
        "the call is pruned"
    );
}

/// `redact` of a signed tape signs the new one again with the key `verify` takes
/// (`$MCPTAPE_SIGNING_KEY`, `--key-file`), as `prune` and `play --on-miss live` do: the command
/// `lint` suggests has no `--sign`, and a redacted tape that a CI verifies with its key failed
/// (`NOT SIGNED, though a key was given`). Without a key it says the signature is gone.
#[test]
fn redact_keeps_a_signed_tape_signed_or_says_it_cannot() {
    let dir = tmp();
    let home = dir.path();
    let (key, tape) = signed_tape(home);
    let key_file = ["--key-file", &s(&key)];
    let warning = "was signed; the redacted tape is not";

    let by_file = home.join("by-file.jsonl");
    mt(
        home,
        &["redact", &s(&tape), "--redact", "city", "-o", &s(&by_file)],
    )
    .args(key_file)
    .run()
    .success();
    let by_env = home.join("by-env.jsonl");
    let run = mt(
        home,
        &["redact", &s(&tape), "--redact", "city", "-o", &s(&by_env)],
    )
    .env("MCPTAPE_SIGNING_KEY", SIGNING_KEY)
    .run()
    .success();
    assert!(!run.stderr.contains(warning), "{}", run.console());
    for t in [&by_file, &by_env] {
        let (code, said) = verify(home, t, &key_file, &[]);
        assert_eq!(code, 0, "{said}");
        assert_contains(&said, "signature valid");
        assert!(std::fs::read_to_string(t)
            .unwrap()
            .contains("[REDACTED:key:city:"));
    }

    // No key: redacted all the same, and said.
    let unsigned = home.join("unsigned.jsonl");
    mt(home, &["redact", &s(&tape), "-o", &s(&unsigned)])
        .run()
        .success()
        .stderr_contains(&format!("{} {warning}", tape.display()));
    let (code, said) = verify(home, &unsigned, &key_file, &[]);
    assert_eq!(code, 1, "{said}");
    assert_contains(&said, "NOT SIGNED");

    // A key at hand signs only a tape that was signed (--sign signs any).
    let plain = small_tape(home);
    let out = home.join("plain-redacted.jsonl");
    let run = mt(home, &["redact", &s(&plain), "-o", &s(&out)])
        .env("MCPTAPE_SIGNING_KEY", SIGNING_KEY)
        .run()
        .success();
    assert!(!run.stderr.contains(warning), "{}", run.console());
    assert_contains(&verify(home, &out, &[], &[]).1, "; not signed");
    mt(home, &["redact", &s(&plain), "--sign", "-o", &s(&out)])
        .args(key_file)
        .run()
        .success();
    assert_contains(&verify(home, &out, &key_file, &[]).1, "signature valid");
}

/// A tape whose last line is torn (its recorder killed mid-write) is redacted up to the line
/// before, and redact says the torn line is not copied: it was left out without a word, where
/// `lint` of the same tape names it.
#[test]
fn redact_says_it_leaves_out_a_torn_last_line() {
    let dir = tmp();
    let home = dir.path();
    let plain = small_tape(home);
    let bytes = std::fs::read(&plain).unwrap();
    let torn = home.join("torn.jsonl");
    std::fs::write(&torn, &bytes[..bytes.len() - 20]).unwrap();
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    let out = home.join("redacted.jsonl");
    mt(home, &["redact", &s(&torn), "-o", &s(&out)])
        .run()
        .success()
        .stderr_contains(&format!("line {lines} is torn"))
        .stderr_contains(&format!("its torn last line {lines} is not copied"));
    assert_eq!(
        std::fs::read(&out)
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        lines - 1,
        "every whole line copied"
    );
}

// --- 7: warnings on a broken chain -------------------------------------------------------------

#[test]
fn play_and_check_warn_on_a_broken_chain_but_still_work() {
    let dir = tmp();
    let home = dir.path();
    let tape = small_tape(home);
    // Edit the timing of the answer: a change that touches no content.
    let mut lines = lines_of(&tape);
    let resp = line_with(&lines, "\"structuredContent\"");
    let re = regex::Regex::new(r#""t_us":(\d+)"#).unwrap();
    let t: u64 = re.captures(&lines[resp - 1]).unwrap()[1].parse().unwrap();
    lines[resp - 1] = re
        .replace(&lines[resp - 1], format!("\"t_us\":{}", t + 1).as_str())
        .into_owned();
    write_lines(&tape, &lines);
    let (c, out) = verify(home, &tape, &[], &[]);
    assert_eq!(c, 1, "{out}");

    let mut c = play_in(home, &tape);
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"city": "Lisbon"}}),
    );
    assert_eq!(
        r["result"]["structuredContent"]["echo"],
        json!({"city": "Lisbon"})
    );
    let stderr = c.finish_with(0);
    assert_contains(&stderr, &format!("the hash chain breaks at line {resp}"));

    mt(home, &["check", &s(&tape), "--"])
        .args(server(home, &json!({})))
        .run()
        .success()
        .stderr_contains("hash chain");
}

/// `lines` with the hash chain taken out: `h` from every line, `head` and `sig` from the end.
fn strip_chain(lines: &[String]) -> Vec<String> {
    let re = regex::Regex::new(r#","(h|head)":"[0-9a-f]{64}"|,"sig":"hmac-sha256:[0-9a-f]{64}""#)
        .unwrap();
    lines
        .iter()
        .map(|l| re.replace_all(l, "").into_owned())
        .collect()
}

/// `play FLAGS… TAPE` in `home`: the handshake and the recorded call; play's stderr.
fn play_small(home: &Path, flags: &[&str], tape: &Path) -> String {
    let mut c = mt(home, &["play"]).args(flags).arg(tape).spawn();
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"city": "Lisbon"}}),
    );
    assert_eq!(
        r["result"]["structuredContent"]["echo"],
        json!({"city": "Lisbon"})
    );
    c.finish_with(0)
}

#[test]
fn play_warns_on_a_tape_without_a_hash_chain_and_require_chain_refuses_it() {
    let dir = tmp();
    let home = dir.path();
    let tape = small_tape(home);
    let (_key, signed) = signed_tape(home);
    let lines = lines_of(&tape);
    // Stripped, the header saying format 1.0 (which has no chain): nothing left to check.
    let mut stripped = strip_chain(&lines);
    assert!(stripped[0].contains(r#""minor":4"#), "{}", stripped[0]);
    stripped[0] = stripped[0].replacen(r#""minor":4"#, r#""minor":0"#, 1);
    let unchained = home.join("unchained.jsonl");
    write_lines(&unchained, &stripped);
    // Stripped, the header left as it was: the chain breaks at the first line.
    let headless = home.join("headless.jsonl");
    write_lines(&headless, &strip_chain(&lines));
    // One line edited.
    let mut edited = lines.clone();
    let resp = line_with(&edited, "\"structuredContent\"");
    edited[resp - 1] = edited[resp - 1].replacen("\"t_us\":", "\"t_us\":1", 1);
    let broken = home.join("broken.jsonl");
    write_lines(&broken, &edited);

    // Without the flag, played with one line of warning.
    let stderr = play_small(home, &[], &unchained);
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot be checked for edits"))
        .collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert_contains(warned[0], &format!("{}:", unchained.display()));
    // With it, refused before anything is served (exit 65).
    let init = format!("{}\n", req(0, "initialize", init_params()));
    for (p, why) in [
        (&unchained, "no hash chain".to_string()),
        (&headless, "the hash chain breaks at line 2".to_string()),
        (&broken, format!("the hash chain breaks at line {resp}")),
    ] {
        mt(home, &["play", "--require-chain", &s(p)])
            .stdin(init.clone())
            .run()
            .status(65)
            .stdout_is("")
            .stderr_contains(&why)
            .stderr_contains("--require-chain");
    }
    // Chained tapes, signed or not, play with it, without a word about the chain.
    for p in [&tape, &signed] {
        let stderr = play_small(home, &["--require-chain"], p);
        assert!(!stderr.contains("chain"), "{stderr}");
    }
}

// --- 8: files ----------------------------------------------------------------------------------

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[test]
fn tapes_are_private_and_a_symlinked_name_is_refused() {
    let dir = tmp();
    let home = dir.path();
    let named = small_named_tape(home, "named");
    let store = home.join(".mcptape");
    assert!(named.is_file());
    assert_eq!(mode(&store), 0o700, ".mcptape/");
    assert_eq!(mode(&store.join("tapes")), 0o700, ".mcptape/tapes/");
    assert_eq!(mode(&named), 0o600, "a named tape");
    // A path tape in a new folder.
    let deep = home.join("new/dir/t.jsonl");
    record_small(home, &deep, &[], &[]);
    assert_eq!(mode(&deep), 0o600);
    assert_eq!(mode(&home.join("new/dir")), 0o700);
    // What redact writes.
    mt(home, &["redact", "named", "-o", &s(home.join("r.jsonl"))])
        .run()
        .success();
    assert_eq!(mode(&home.join("r.jsonl")), 0o600);
    mt(home, &["redact", "named"]).run().success();
    assert_eq!(mode(&named), 0o600);
    assert_eq!(mode(&store.join("tapes/named.jsonl.bak")), 0o600);

    // A named tape that is a symbolic link: refused, the target untouched.
    let victim = home.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = store.join("tapes/evil.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dangling = store.join("tapes/dangling.jsonl");
    let nowhere = home.join("nowhere.txt");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    let srv = server(home, &json!({}));
    for name in ["evil", "dangling"] {
        mt(home, &["record", "--tape", name, "--"])
            .args(&srv)
            .run()
            .status(64)
            .stderr_contains("symbolic link");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!nowhere.exists(), "nothing created through a dangling link");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[cfg(unix)]
#[test]
fn redact_does_not_write_through_links_beside_a_named_tape() {
    // A cloned repository can hold symbolic links in .mcptape/tapes: the backup and the
    // staging file of an in-place redact must not write through them.
    let dir = tmp();
    let home = dir.path();
    small_named_tape(home, "a");
    small_named_tape(home, "b");
    let tapes = home.join(".mcptape/tapes");
    let victim_bak = home.join("victim-bak.txt");
    let victim_tmp = home.join("victim-tmp.txt");
    std::fs::write(&victim_bak, "precious\n").unwrap();
    std::fs::write(&victim_tmp, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim_bak, tapes.join("a.jsonl.bak")).unwrap();
    std::os::unix::fs::symlink(&victim_tmp, tapes.join("b.jsonl.redact-tmp")).unwrap();
    let out_a = mt(home, &["redact", "a"]).run();
    let out_b = mt(home, &["redact", "b"]).run();
    for out in [&out_a, &out_b] {
        assert!(
            matches!(out.code(), 0 | 64 | 74),
            "redact either works or refuses: exit {}: {}",
            out.code(),
            out.stderr
        );
    }
    let bak = std::fs::read_to_string(&victim_bak).unwrap();
    let tmp = std::fs::read_to_string(&victim_tmp).unwrap();
    assert!(
        bak == "precious\n" && tmp == "precious\n",
        "files outside the store overwritten through links: via a.jsonl.bak (exit {}) → {:?}…; \
         via b.jsonl.redact-tmp (exit {}) → {:?}…",
        out_a.code(),
        &bak[..bak.len().min(60)],
        out_b.code(),
        &tmp[..tmp.len().min(60)],
    );
}

/// The names in `dir` that end with `suffix`.
fn named_like(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

#[cfg(unix)]
#[test]
fn a_redact_or_check_update_that_fails_leaves_no_staging_file_behind() {
    let dir = tmp();
    let home = dir.path();
    let tapes = home.join(".mcptape/tapes");
    let victim = home.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();

    // redact in place, `TAPE.bak` a symbolic link: refused after the staging file was written.
    let a = small_named_tape(home, "a");
    let before = std::fs::read(&a).unwrap();
    std::os::unix::fs::symlink(&victim, tapes.join("a.jsonl.bak")).unwrap();
    mt(home, &["redact", "a"])
        .run()
        .status(74)
        .stderr_contains("symbolic link");
    // redact of a tape malformed in the middle, in place and to -o: refused while reading.
    let bad = tapes.join("bad.jsonl");
    let mut lines = lines_of(&a);
    lines.insert(3, "#".into());
    write_lines(&bad, &lines);
    mt(home, &["redact", "bad"])
        .run()
        .status(65)
        .stderr_contains("line 4");
    let out = home.join("out.jsonl");
    mt(home, &["redact", "bad", "-o", &s(&out)])
        .run()
        .status(65);
    assert!(!out.exists());
    assert_eq!(named_like(home, ".redact-tmp"), Vec::<String>::new());
    assert_eq!(named_like(&tapes, ".redact-tmp"), Vec::<String>::new());
    assert!(std::fs::read(&a).unwrap() == before, "the tape untouched");

    // A staging name that is a link someone left is not mcptape's to remove.
    let b = small_named_tape(home, "b");
    let link = tapes.join("b.jsonl.redact-tmp");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    mt(home, &["redact", "b"]).run().status(74);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(b.is_file());

    // check --update, `TAPE.bak` a symbolic link: the observed session staged as `TAPE.new`.
    let c = small_tape(home);
    let before = std::fs::read(&c).unwrap();
    std::os::unix::fs::symlink(&victim, home.join("t.jsonl.bak")).unwrap();
    mt(home, &["check", &s(&c), "--update", "--"])
        .args(server(home, &json!({})))
        .run()
        .status(74);
    assert_eq!(named_like(home, ".new"), Vec::<String>::new());
    assert!(
        std::fs::read(&c).unwrap() == before,
        "the baseline untouched"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

// --- secrets in unusual frames -----------------------------------------------------------------

/// Records a session whose server first writes `lines`, then answers `tools`; returns the tape.
fn record_lines(
    home: &Path,
    name: &str,
    lines: &[Vec<u8>],
    tools: Value,
    calls: &[(&str, Value)],
    flags: &[&str],
) -> PathBuf {
    let tape = home.join(format!("{name}.jsonl"));
    let cfg = json!({"lines": lines.iter().map(|l| b64(l)).collect::<Vec<_>>(), "tools": tools});
    let c = spawn_record(home, &s(&tape), flags, &server(home, &cfg), &[]);
    drive(c, lines.len(), calls);
    tape
}

/// Records a server whose first stdout line is `line` (with `flags`); asserts the tape holds it
/// as a line of `kind` and holds none of `secrets`.
fn assert_startup_line_redacted(
    name: &str,
    line: Vec<u8>,
    flags: &[&str],
    kind: &str,
    secrets: &[&str],
) {
    let dir = tmp();
    let tape = record_lines(dir.path(), name, &[line], json!({}), &[], flags);
    let taped = tape_msgs(&tape)
        .into_iter()
        .find(|l| l["seq"] == 1)
        .expect("the startup line on the tape");
    assert_eq!(taped["kind"], kind, "{taped}");
    let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
    assert_absent(&tape, &secrets);
}

#[test]
fn a_json_log_line_that_is_not_json_rpc_is_redacted() {
    // A server logging structured JSON to stdout by mistake: valid JSON, not JSON-RPC.
    let log = json!({"level": "info", "msg": format!("using key {AWS}"), "apiKey": C_API, "auth": format!("Bearer {C_BEARER}")});
    assert_startup_line_redacted(
        "jsonlog",
        log.to_string().into_bytes(),
        &[],
        "invalid",
        &[AWS, C_API, C_BEARER],
    );
}

#[test]
fn a_log_line_that_is_not_utf8_is_redacted() {
    let mut log = format!("warn: key {AWS} for ").into_bytes();
    log.extend_from_slice(b"caf\xe9");
    assert_startup_line_redacted("latin1", log, &[], "not_json", &[AWS]);
}

#[test]
fn the_head_of_an_oversize_line_is_redacted() {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": {"apiKey": C_API, "text": format!("key {OPENAI}"), "pad": "x".repeat(600)}}});
    assert_startup_line_redacted(
        "oversize",
        note.to_string().into_bytes(),
        &["--max-message", "400"],
        "oversize",
        &[C_API, OPENAI],
    );
}

#[test]
fn an_opaque_token_inside_json_inside_a_string_is_redacted_like_one_outside() {
    // The same opaque token is redacted as a value of structuredContent; inside a text that
    // holds JSON (and nothing else that looks secret), it must be too.
    let dir = tmp();
    let token = "Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA";
    let tools = json!({
        "direct": {"content": [], "structuredContent": {"session": token}},
        "embedded": {"content": [{"type": "text", "text": json!({"session": token}).to_string()}]},
    });
    let tape = record_lines(
        dir.path(),
        "embedded",
        &[],
        tools,
        &[
            ("tools/call", json!({"name": "direct", "arguments": {}})),
            ("tools/call", json!({"name": "embedded", "arguments": {}})),
        ],
        &[],
    );
    let direct = msg_line(&tape, "s2c", 1);
    assert!(
        is_marker_of(
            &direct["msg"]["result"]["structuredContent"]["session"],
            "high-entropy"
        ),
        "{direct}"
    );
    let embedded = msg_line(&tape, "s2c", 2);
    assert!(
        !embedded.to_string().contains(token),
        "the token inside JSON inside a string reached the tape: {embedded}"
    );
}

#[test]
fn play_explanations_apply_the_projects_own_rules() {
    // A project rule redacts `tenant-key` on the tape; a miss explanation must not print the
    // client's real value of it either.
    let dir = tmp();
    let home = dir.path();
    project_config(home, "[redact]\nkeys = [\"tenant-key\"]\n");
    let tape = record_lines(
        home,
        "tenant",
        &[],
        json!({}),
        &[(
            "tools/call",
            json!({"name": "echo", "arguments": {"tenant-key": "tenant-value-1111", "q": "a"}}),
        )],
        &[],
    );
    assert_absent(&tape, &["tenant-value-1111".to_string()]);
    let mut c = play_in(home, &tape);
    c.initialize();
    let r = c.call(
        5,
        "tools/call",
        json!({"name": "echo", "arguments": {"tenant-key": "tenant-value-2222", "q": "b"}}),
    );
    assert!(r.get("error").is_some(), "{r}");
    let stderr = c.finish_with(1);
    assert!(
        !stderr.contains("tenant-value-2222"),
        "the client's secret on stderr:\n{stderr}"
    );
}

#[test]
fn secrets_on_the_server_command_line_are_redacted() {
    // `record -- env GITHUB_TOKEN=… server --api-key …`: the command line is on the tape too.
    let dir = tmp();
    let home = dir.path();
    let mut srv = vec!["env".to_string(), format!("GITHUB_TOKEN={GITHUB}")];
    srv.extend(server(home, &json!({})));
    srv.extend(["--api-key".to_string(), OPENAI.to_string()]);
    let tape = home.join("argv.jsonl");
    let c = spawn_record(home, &s(&tape), &[], &srv, &[]);
    drive(c, 0, &[]);
    assert_absent(&tape, &[GITHUB.to_string(), OPENAI.to_string()]);
}
