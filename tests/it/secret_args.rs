//! An ordinary tool whose arguments are named `api_key` and `token` (py_server.py's `deploy`),
//! with the official Python SDK on both sides: its schema survives redaction, play serves the
//! recorded bytes, two recordings diff as the same, and `check --fill` sends the real values.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const API_KEY: &str = "sk-proj-Fx3kQ9mZ2pLw7Rt5Yv1Nb8Hc4Jd6Gs0Ae";
const TOKEN: &str = "ghp_Q7wE3rT9yU1iO5pA2sD8fG4hJ6kL0zXcV1bN";

fn mt(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env("NO_COLOR", "1")
        .env_remove("FIXTURE_DRIFT");
    for (k, v) in env {
        c.env(k, v);
    }
    run_with_timeout(c, Duration::from_secs(120))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The raw lines a client sees for a fixed session, sent by hand over stdio: the handshake,
/// `tools/list`, `deploy` with the secrets, `add`.
fn raw_session(server: &[String]) -> Vec<Vec<u8>> {
    let mut c = LineClient::spawn(server);
    let msgs = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{"service":"billing","api_key":API_KEY,"token":TOKEN,"replicas":2.5}}}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}),
    ];
    let mut got = Vec::new();
    for m in &msgs {
        c.send(m);
        if m.get("id").is_some() {
            let line = c
                .recv_raw(Duration::from_secs(30))
                .expect("an answer within 30 s");
            got.push(line);
        }
    }
    let _ = c.finish();
    got
}

fn assert_no_secret(tape: &Path) {
    let raw = std::fs::read_to_string(tape).unwrap();
    for secret in [API_KEY, TOKEN] {
        assert!(!raw.contains(secret), "{secret} on the tape:\n{raw}");
    }
}

/// The `deploy` tool's input schema as the tape holds it.
fn deploy_schema(tape: &Path) -> Value {
    for line in tape_msgs(tape) {
        if let Some(tools) = line["msg"]["result"]["tools"].as_array() {
            for t in tools {
                if t["name"] == "deploy" {
                    return t["inputSchema"].clone();
                }
            }
        }
    }
    panic!("no tools/list answer with `deploy` on {}", tape.display());
}

#[test]
fn the_schema_of_secret_arguments_survives_and_play_serves_the_recorded_bytes() {
    let dir = tmp();
    let tape = dir.path().join("raw.jsonl");
    let direct = raw_session(&py_server());
    let recorded = raw_session(&record_cmd(&tape, &py_server()));
    assert_eq!(
        recorded, direct,
        "through record the client gets the server's bytes"
    );
    assert_no_secret(&tape);
    let schema = deploy_schema(&tape);
    assert_eq!(
        schema["properties"]["api_key"]["type"], "string",
        "{schema}"
    );
    assert_eq!(schema["properties"]["token"]["type"], "string", "{schema}");
    assert!(
        !schema.to_string().contains("[REDACTED"),
        "the schema is never redacted: {schema}"
    );
    // The tool's description is the server's prose, read by the model: its `OAuth2`, `90days`
    // and `argon2id` beside `token` and `password` are words, not credentials.
    let description = tape_msgs(&tape)
        .into_iter()
        .find_map(|l| {
            l["msg"]["result"]["tools"]
                .as_array()?
                .iter()
                .find(|t| t["name"] == "deploy")
                .map(|t| t["description"].as_str().unwrap_or_default().to_string())
        })
        .expect("deploy's description on the tape");
    assert!(
        description.contains("OAuth2 bearer token, rotated every 90days")
            && description.contains("hashed with argon2id."),
        "the description is taped as the server wrote it: {description}"
    );
    // The client sends the real secrets; the tape holds markers: they match as wildcards,
    // and every answer is the recorded bytes, `tools/list` included.
    let played = raw_session(&play_cmd(&tape));
    for (i, (p, d)) in played.iter().zip(&direct).enumerate() {
        assert_eq!(
            text(p),
            text(d),
            "answer {i}: play serves the server's exact bytes"
        );
    }
    assert_eq!(played.len(), direct.len());
}

#[test]
fn the_python_sdk_client_sees_the_same_through_record_and_play_and_two_recordings_diff_clean() {
    for mode in ["legacy", "2026-07-28"] {
        let dir = tmp();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        let (direct, out) = py_client("secrets", mode, &py_server(), &[]);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(
            direct["steps"][1]["result"]["structuredContent"]["authorized"], true,
            "{mode}: {direct}"
        );
        let (via_a, _) = py_client("secrets", mode, &record_cmd(&a, &py_server()), &[]);
        let (via_b, _) = py_client("secrets", mode, &record_cmd(&b, &py_server()), &[]);
        assert_eq!(via_a, direct, "{mode}: through record");
        assert_eq!(via_b, direct, "{mode}: through record, again");
        assert_no_secret(&a);
        let (played, out) = py_client("secrets", mode, &play_cmd(&a), &[]);
        assert_eq!(
            played,
            direct,
            "{mode}: against play; stderr:\n{}",
            text(&out.stderr)
        );
        // Each tape's markers are keyed by its own random key: they still compare equal.
        let diff = mt(&["diff", &s(&a), &s(&b)], &[]);
        assert_eq!(
            diff.status.code(),
            Some(0),
            "{mode}: two recordings of one session are the same:\n{}{}",
            text(&diff.stdout),
            text(&diff.stderr)
        );
    }
}

#[test]
fn check_fills_redacted_arguments_for_the_live_call_only() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let (_, out) = py_client("secrets", "legacy", &record_cmd(&tape, &py_server()), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let server = py_server();
    let check = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["check", tape.to_str().unwrap(), "--json", "-"];
        args.extend(extra);
        args.push("--");
        args.extend(server.iter().map(String::as_str));
        mt(&args, env)
    };
    // Without fills the live server gets the markers: `deploy` is not authorized, and the
    // report says why, once.
    let out = check(&[], &[]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("--fill api_key=env:VAR") && err.contains("--fill token=env:VAR"),
        "{err}"
    );
    assert_eq!(err.matches("--fill api_key").count(), 1, "said once: {err}");
    assert_ne!(report["grade"], "A", "{report}");
    // With fills: the real values reach the server, the grade is A, and no value reaches the
    // report or the updated baseline.
    let env = [("MY_KEY", API_KEY), ("MY_TOKEN", TOKEN)];
    let out = check(
        &[
            "--fill",
            "api_key=env:MY_KEY",
            "--fill",
            "token=env:MY_TOKEN",
            "--update",
        ],
        &env,
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["grade"], "A", "{report}");
    for secret in [API_KEY, TOKEN] {
        assert!(!stdout.contains(secret) && !text(&out.stderr).contains(secret));
    }
    assert_no_secret(&tape);
    // The same from the project's `[fill]` table (the command line's `--fill` wins by name).
    let project = tmp();
    std::fs::write(
        project.path().join("config.toml"),
        "[fill]\napi_key = \"env:MY_KEY\"\ntoken = \"env:MY_TOKEN\"\n",
    )
    .unwrap();
    let dir_env = s(project.path());
    let out = check(
        &[],
        &[
            ("MY_KEY", API_KEY),
            ("MY_TOKEN", TOKEN),
            ("MCPTAPE_DIR", dir_env.as_str()),
        ],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["grade"], "A", "[fill] table: {report}");
    // A literal value is refused: arguments are visible to every user of the machine.
    let out = check(&["--fill", "api_key=sk-literal"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("env:VAR or file:PATH"));
}

/// `deploy` called with two tokens that are refused, then with the real one: the tape holds
/// three requests that differ only in redacted values. A client that sends only the real token
/// gets the answers recorded first (the tape cannot tell the secrets apart), and play says so on
/// stderr rather than serving them as plain hits: once per recorded request, however many calls
/// it applied to, and the summary counts them.
#[test]
fn requests_that_differ_only_in_secrets_are_served_with_a_warning() {
    let dir = tmp();
    let tape = dir.path().join("two.jsonl");
    let deploy = |token: &str| json!({"name": "deploy", "arguments": {"service": "billing", "api_key": API_KEY, "token": token}});
    let mut cmd = command(&record_cmd(&tape, &py_server()));
    cmd.env_remove("MCPTAPE_REDACT_KEY");
    let mut c = LineClient::spawn_cmd(cmd);
    c.initialize();
    let refused = c.call(1, "tools/call", deploy("not-a-github-token-1"));
    c.call(2, "tools/call", deploy("not-a-github-token-2"));
    let allowed = c.call(3, "tools/call", deploy(TOKEN));
    assert_eq!(refused["result"]["structuredContent"]["authorized"], false);
    assert_eq!(allowed["result"]["structuredContent"]["authorized"], true);
    c.finish_with(0);
    assert_no_secret(&tape);
    const WARNING: &str = "WARNING: tools/call deploy fits 3 recorded requests that differ only in redacted values; served the one at line ";
    const SAID: &str = "differ only in redacted values; served";

    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.initialize();
    let first = p.call(7, "tools/call", deploy(TOKEN));
    let second = p.call(8, "tools/call", deploy(TOKEN));
    let stderr = p.finish_with(0);
    // The earliest two: the refusals, recorded for the other tokens.
    for served in [&first, &second] {
        assert_eq!(
            served["result"]["structuredContent"]["authorized"], false,
            "{served}"
        );
    }
    assert_contains(&stderr, WARNING);
    assert_eq!(stderr.matches(SAID).count(), 1, "said once:\n{stderr}");
    assert_contains(
        &stderr,
        ", 2 requests served among recorded requests that differ only in redacted values (tools/call deploy: 2)",
    );
    assert!(!stderr.contains(TOKEN), "no secret on stderr:\n{stderr}");

    // Each recorded token sent as recorded: the first call fits all three, the second the two
    // left, the third is a plain hit. One warning; the summary counts the two calls it was for.
    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.initialize();
    p.call(1, "tools/call", deploy("not-a-github-token-1"));
    p.call(2, "tools/call", deploy("not-a-github-token-2"));
    p.call(3, "tools/call", deploy(TOKEN));
    let stderr = p.finish_with(0);
    assert_eq!(stderr.matches(SAID).count(), 1, "said once:\n{stderr}");
    assert_contains(&stderr, "(tools/call deploy: 2)");

    // One request of those bytes recorded once: a plain hit, no warning.
    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.initialize();
    p.call(3, "tools/call", deploy("not-a-github-token-1"));
    let stderr = p.finish_with(0);
    assert_eq!(stderr.matches(SAID).count(), 1, "{stderr}");

    // Recorded with no marker key: a key set for play cannot tell the requests apart, and the
    // warning says why (not "record with MCPTAPE_REDACT_KEY set" alone, as if it were unset).
    let warning = |why: &str| {
        format!(
            "mcptape play: WARNING: tools/call deploy fits 3 recorded requests that differ only in redacted values; served the one at line {}, the first unused in play's order. {why} (said once for this request; play's summary counts every call it applied to)",
            first_call_line(&tape)
        )
    };
    for (key, why) in [
        (None, "The tape holds markers, not the secrets, so play cannot tell which one the client meant: its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and play with the same key, to tell them apart)"),
        (Some("k3y-0f-the-ci-s3cret-store-2026"), "The tape holds markers, not the secrets, made with no marker key (it was recorded without MCPTAPE_REDACT_KEY), so play cannot tell which one the client meant, whatever MCPTAPE_REDACT_KEY is now: its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and play with the same key, to tell them apart)"),
    ] {
        let mut cmd = command(&play_cmd(&tape));
        cmd.env_remove("MCPTAPE_REDACT_KEY");
        if let Some(k) = key {
            cmd.env("MCPTAPE_REDACT_KEY", k);
        }
        let mut p = LineClient::spawn_cmd(cmd);
        p.initialize();
        p.call(7, "tools/call", deploy(TOKEN));
        let stderr = p.finish_with(0);
        assert_eq!(warning_line(&stderr), warning(why), "{key:?}");
    }
}

/// The same two `deploy` calls recorded with `MCPTAPE_REDACT_KEY` set: the header names the
/// key (by id, not the key), the markers' hashes are made with it, and play given the same key
/// serves each client the answer recorded with the token it sends — the second recorded one
/// for the real token, no warning. With no key or another key, play falls back to markers as
/// wildcards, and its warning says how to tell the requests apart. A key too short to be safe
/// is refused before anything runs.
#[test]
fn a_marker_key_kept_by_the_user_tells_requests_made_with_different_secrets_apart() {
    let dir = tmp();
    let tape = dir.path().join("keyed.jsonl");
    let key = "k3y-0f-the-ci-s3cret-store-2026";
    let deploy = |token: &str| json!({"name": "deploy", "arguments": {"service": "billing", "api_key": API_KEY, "token": token}});
    let with_key = |argv: Vec<String>, key: Option<&str>| {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_remove("MCPTAPE_REDACT_KEY");
        if let Some(k) = key {
            cmd.env("MCPTAPE_REDACT_KEY", k);
        }
        LineClient::spawn_cmd(cmd)
    };
    let mut c = with_key(record_cmd(&tape, &py_server()), Some(key));
    c.initialize();
    let refused = c.call(1, "tools/call", deploy("not-a-github-token-1"));
    let allowed = c.call(2, "tools/call", deploy(TOKEN));
    assert_eq!(refused["result"]["structuredContent"]["authorized"], false);
    assert_eq!(allowed["result"]["structuredContent"]["authorized"], true);
    c.finish_with(0);
    assert_no_secret(&tape);
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(!raw.contains(key), "the key is not on the tape");
    let header: Value = serde_json::from_str(raw.lines().next().unwrap()).unwrap();
    let id = header["marker_key"]
        .as_str()
        .expect("the header names the key")
        .to_string();
    assert_eq!(id.len(), 8, "{header}");
    assert_eq!(header["minor"], 4);

    // The same key: each token gets the answer recorded with it, in any order.
    let mut p = with_key(play_cmd(&tape), Some(key));
    p.initialize();
    let first = p.call(7, "tools/call", deploy(TOKEN));
    let second = p.call(8, "tools/call", deploy("not-a-github-token-1"));
    let stderr = p.finish_with(0);
    assert_eq!(
        first["result"]["structuredContent"]["authorized"], true,
        "{first}"
    );
    assert_eq!(
        second["result"]["structuredContent"]["authorized"], false,
        "{second}"
    );
    assert!(!stderr.contains("WARNING"), "{stderr}");

    // A token never recorded: the first fit, and play says that none was made with it.
    let mut p = with_key(play_cmd(&tape), Some(key));
    p.initialize();
    p.call(
        7,
        "tools/call",
        deploy("ghp_Zz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8"),
    );
    let stderr = p.finish_with(0);
    assert_contains(
        &stderr,
        "None of them was recorded with the values the client sent",
    );

    // The warning's words but for why, said of the first recorded call (served).
    let warning = |why: &str| {
        format!(
            "mcptape play: WARNING: tools/call deploy fits 2 recorded requests that differ only in redacted values; served the one at line {}, the first unused in play's order. {why} (said once for this request; play's summary counts every call it applied to)",
            first_call_line(&tape)
        )
    };

    // No key: wildcards, and the warning names the tape's key id and says none is set.
    let mut p = with_key(play_cmd(&tape), None);
    p.initialize();
    let served = p.call(7, "tools/call", deploy(TOKEN));
    let stderr = p.finish_with(0);
    assert_eq!(served["result"]["structuredContent"]["authorized"], false);
    assert_eq!(
        warning_line(&stderr),
        warning(&format!(
            "The tape holds markers, not the secrets; its markers were made with a marker key (id {id}) and MCPTAPE_REDACT_KEY is not set: with it set to that key, play serves the one recorded with the client's values"
        ))
    );

    // Another key: said once, then wildcards; the warning names both keys (it said "with
    // MCPTAPE_REDACT_KEY set to that key", as if none were set).
    let mut p = with_key(play_cmd(&tape), Some("another-key-of-32-characters-xx"));
    p.initialize();
    let served = p.call(7, "tools/call", deploy(TOKEN));
    let stderr = p.finish_with(0);
    assert_eq!(served["result"]["structuredContent"]["authorized"], false);
    let other = another_key_id(&stderr, &id);
    assert_eq!(
        warning_line(&stderr),
        warning(&format!(
            "The tape holds markers, not the secrets; its markers were made with a marker key (id {id}) and MCPTAPE_REDACT_KEY is another key (id {other}): with it set to the tape's key, play serves the one recorded with the client's values"
        ))
    );
    assert!(!stderr.contains("another-key"), "{stderr}");

    // Too short a key: a usage error before the server is started.
    let short = dir.path().join("short.jsonl");
    let mut argv = record_cmd(&short, &py_server());
    let mut cmd = Command::new(argv.remove(0));
    cmd.args(&argv).env("MCPTAPE_REDACT_KEY", "hunter2");
    let out = run_with_timeout(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_contains(
        &text(&out.stderr),
        "MCPTAPE_REDACT_KEY is 7 bytes; a marker key needs at least 16",
    );
    assert!(!short.exists(), "no tape begun");
}

/// The tape line (from 1) of the first `tools/call` request on `tape`.
fn first_call_line(tape: &Path) -> usize {
    tape_lines(tape)
        .iter()
        .position(|l| l["type"] == "msg" && l["dir"] == "c2s" && l["method"] == "tools/call")
        .expect("a tools/call on the tape")
        + 1
}

/// The one ambiguity warning on `stderr`.
#[track_caller]
fn warning_line(stderr: &str) -> &str {
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("differ only in redacted values; served"))
        .collect();
    assert_eq!(said.len(), 1, "one warning:\n{stderr}");
    said[0]
}

/// The id of the user's key as the line saying it is not the tape's (`tape_id`) gives it.
#[track_caller]
pub(crate) fn another_key_id(stderr: &str, tape_id: &str) -> String {
    let (_, after) = stderr
        .split_once(
            "MCPTAPE_REDACT_KEY is not the key this tape's markers were made with (its id is ",
        )
        .unwrap_or_else(|| panic!("another key is said:\n{stderr}"));
    let (other, rest) = after.split_once(", ").expect("the id, then the tape's");
    assert!(
        rest.starts_with(&format!("the tape's {tape_id})")),
        "{stderr}"
    );
    assert_eq!(other.len(), 8, "{stderr}");
    assert_ne!(other, tape_id);
    other.to_string()
}

/// A [`line_server`] answer: the token it was given (the call's `token` argument, else the
/// server's argument), in text content and as `structuredContent.token`, both redacted on the
/// tape.
const ISSUER: &str = r##"
def answer(m, token):
    t = (m["params"].get("arguments") or {}).get("token", token)
    return {"content": [{"type": "text", "text": "issued " + t}],
            "structuredContent": {"token": t}}
"##;

/// A line server issuing `token` ([`ISSUER`]).
fn issuer(token: &str) -> Vec<String> {
    line_server("issuer", ISSUER, token)
}

const OTHER_TOKEN: &str = "ghp_Zz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8";

/// `mcptape SUBCOMMAND…` with `MCPTAPE_REDACT_KEY` set to `key`, or unset.
fn keyed(args: &[&str], key: Option<&str>) -> Mt {
    let mt = Mt::new(args.iter().copied()).env_remove("MCPTAPE_REDACT_KEY");
    match key {
        Some(k) => mt.env("MCPTAPE_REDACT_KEY", k),
        None => mt,
    }
}

/// One `tools/call issue` with `arguments` recorded through [`ISSUER`] giving `token`, with
/// marker key `key`.
fn record_issued_with(tape: &Path, token: &str, key: Option<&str>, arguments: Value) {
    let mut c = keyed(&["record", "--tape"], key)
        .arg(tape)
        .arg("--")
        .args(issuer(token))
        .spawn();
    c.initialize();
    let given = arguments["token"].as_str().unwrap_or(token).to_string();
    let answer = c.call(
        1,
        "tools/call",
        json!({"name": "issue", "arguments": arguments}),
    );
    assert_eq!(answer["result"]["structuredContent"]["token"], given);
    c.finish_with(0);
    let raw = std::fs::read_to_string(tape).unwrap();
    assert!(!raw.contains(&given), "{given} on the tape:\n{raw}");
}

/// One `tools/call issue` recorded through [`ISSUER`] giving `token`, with marker key `key`.
fn record_issued(tape: &Path, token: &str, key: Option<&str>) {
    record_issued_with(tape, token, key, json!({}));
}

/// With one marker key on both sides, a marker's hash tells the secrets apart: two tapes
/// recorded with it and different tokens diff as changed (exit 1), and `check` with the key
/// against a server giving another token than recorded reports the change — both at the two
/// places the token is. They compared markers by rule only, and said the same. With no key,
/// or different keys, markers still compare by rule (each tape's hashes are its own). A value
/// given back with `--fill` is the same secret though the live side's marker names the fill.
#[test]
fn with_one_marker_key_check_and_diff_tell_different_secrets_apart() {
    let dir = tmp();
    let key = "k3y-0f-the-ci-s3cret-store-2026";
    let other_key = "another-key-of-32-characters-xx";
    let tape = |name: &str, token: &str, key: Option<&str>| {
        let p = dir.path().join(name);
        record_issued(&p, token, key);
        p
    };
    let keyed_a = tape("keyed-a.jsonl", TOKEN, Some(key));
    let keyed_a2 = tape("keyed-a2.jsonl", TOKEN, Some(key));
    let keyed_b = tape("keyed-b.jsonl", OTHER_TOKEN, Some(key));
    let other_b = tape("other-key-b.jsonl", OTHER_TOKEN, Some(other_key));
    let plain_a = tape("plain-a.jsonl", TOKEN, None);
    let plain_b = tape("plain-b.jsonl", OTHER_TOKEN, None);
    let changed = [
        "$.result.content[0].text",
        "$.result.structuredContent.token",
    ];
    let paths = |changes: &Value| -> Vec<String> {
        let mut p: Vec<String> = changes
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["path"].as_str().unwrap_or_default().to_string())
            .collect();
        p.sort();
        p
    };

    // diff needs no key: the headers say which the markers were made with.
    let diff = |a: &Path, b: &Path| {
        keyed(&["diff", "--format", "json"], None)
            .arg(a)
            .arg(b)
            .run()
    };
    let run = diff(&keyed_a, &keyed_b).status(1);
    let report: Value = run.json();
    assert_eq!(paths(&report["drifts"][0]["changes"]), changed, "{report}");
    diff(&keyed_a, &keyed_a2).success();
    diff(&plain_a, &plain_b).success();
    diff(&keyed_a, &other_b).success();
    diff(&keyed_a, &plain_b).success();

    let check = |tape: &Path, token: &str, key: Option<&str>| {
        keyed(&["check"], key)
            .arg(tape)
            .args(["--json", "-", "--"])
            .args(issuer(token))
            .timeout(Duration::from_secs(120))
            .run()
    };
    let run = check(&keyed_a, OTHER_TOKEN, Some(key)).status(1);
    let report: Value = run.json();
    let calls: Vec<&Value> = report["exchanges"]
        .as_array()
        .expect("exchanges")
        .iter()
        .filter(|e| e["exchange"]["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "{report}");
    assert_eq!(paths(&calls[0]["changes"]), changed, "{report}");
    check(&keyed_a, TOKEN, Some(key)).success();
    // The run's key is not the tape's, or there is none: markers compare by rule.
    check(&keyed_a, OTHER_TOKEN, Some(other_key)).success();
    check(&keyed_a, OTHER_TOKEN, None).success();
    check(&plain_a, OTHER_TOKEN, None).success();
    check(&plain_a, OTHER_TOKEN, Some(key)).success();

    // The token sent as an argument and echoed: check gives the real one back with --fill,
    // and the live echo, redacted by the fill's rule, has the recorded marker's hash.
    let sent = dir.path().join("sent.jsonl");
    record_issued_with(&sent, OTHER_TOKEN, Some(key), json!({"token": TOKEN}));
    let fill = |value: &str| {
        keyed(&["check"], Some(key))
            .arg(&sent)
            .args(["--fill", "token=env:THE_TOKEN", "--json", "-", "--"])
            .args(issuer(OTHER_TOKEN))
            .env("THE_TOKEN", value)
            .timeout(Duration::from_secs(120))
            .run()
    };
    fill(TOKEN).success();
    let run = fill("ghp_Aa1bB2cC3dD4eE5fF6gG7hH8iI9jJ0kK1lL2").status(1);
    let report: Value = run.json();
    let call = report["exchanges"]
        .as_array()
        .expect("exchanges")
        .iter()
        .find(|e| e["exchange"]["method"] == "tools/call")
        .expect("the call");
    assert_eq!(paths(&call["changes"]), changed, "{report}");
}
