//! What play says about what it did, over Streamable HTTP (`play --listen`) as over stdio: an
//! `initialize` asking another protocol version gets the recorded answer and one warning naming
//! both; the Python SDK's `server/discover` probe on a pre-2026 tape is method-not-found and no
//! miss; the summary counts the redaction markers served; a call that fits recorded calls
//! differing only in redacted values is warned about once a run, not once a session.

use crate::harness::*;
use serde_json::{json, Value};

/// A session of server-everything recorded over stdio at protocol 2025-06-18 whose `get-env`
/// answer held a secret (in the server's environment), redacted on the tape.
fn recorded_with_a_secret(tape: &std::path::Path) {
    let mut cmd = command(&record_cmd(tape, &everything()));
    cmd.env(
        "OPENAI_API_KEY",
        "sk-proj-PlayHttpWarn1ngsAbcdefghijklmnopqrstu42",
    );
    let mut c = LineClient::spawn_cmd(cmd);
    c.initialize();
    let env = c.call(1, "tools/call", json!({"name": "get-env", "arguments": {}}));
    assert_contains(&env.to_string(), "OPENAI_API_KEY");
    c.finish();
    let text = std::fs::read_to_string(tape).unwrap();
    assert!(
        !text.contains("sk-proj-PlayHttp"),
        "the secret is redacted on the tape"
    );
    assert_contains(&text, "[REDACTED:");
}

/// POSTs `msg` in `session` (when given); the answer's status, session id and body text.
fn post_in(url: &str, session: Option<&str>, msg: &Value) -> (u16, Option<String>, String) {
    let mut extra = Vec::new();
    if let Some(id) = session {
        extra.push(("Mcp-Session-Id", id));
    }
    let mut s = http_open(
        url,
        "POST",
        &post_headers(&extra),
        msg.to_string().as_bytes(),
    );
    let id = s.header("mcp-session-id").map(str::to_string);
    let body = text(&s.body());
    (s.status, id, body)
}

#[test]
fn over_http_another_protocol_version_is_warned_once_and_the_summary_counts_markers() {
    let (_dir, tape) = tmp_tape("env.jsonl");
    recorded_with_a_secret(&tape);
    let play = Served::play(&tape);
    let mut params = init_params();
    params["protocolVersion"] = json!("2025-03-26");
    let (status, session, body) = post_in(&play.url, None, &req(1, "initialize", params));
    assert_eq!(status, 200, "{body}");
    assert_contains(&body, r#""protocolVersion":"2025-06-18""#);
    let session = session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post_in(&play.url, Some(&session), &initialized).0, 202);
    let call = req(2, "tools/call", json!({"name": "get-env", "arguments": {}}));
    let (status, _, body) = post_in(&play.url, Some(&session), &call);
    assert_eq!(status, 200, "{body}");
    let markers = body.matches("[REDACTED:").count();
    assert!(markers > 0, "the recorded marker is served: {body}");
    let stderr = play.stop();
    assert_one_version_warning(&stderr, "2025-03-26", "2025-06-18");
    let s = if markers == 1 { "" } else { "s" };
    assert_contains(
        &stderr,
        &format!("served 2, missed 0, drifted 0, {markers} redaction marker{s} served in place of values"),
    );
}

/// The Python SDK's streamable-HTTP client in `auto` mode probes `server/discover` first: on a
/// tape recorded in `legacy` mode (no probe on it) play answers -32601 as the recorded pre-2026
/// server would, the client falls back to `initialize`, gets the recorded session, and play
/// exits 0 (`Served::stop`).
#[test]
fn over_http_the_python_sdks_discover_probe_on_a_pre_2026_tape_is_no_miss() {
    let (_dir, tape) = tmp_tape("everything.jsonl");
    let recorded = py_ok(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        "through record",
    );
    assert!(
        !std::fs::read_to_string(&tape)
            .unwrap()
            .contains("server/discover"),
        "the legacy recording has no probe"
    );
    let play = Served::play(&tape);
    let replayed = py_ok(
        "everything",
        "auto",
        std::slice::from_ref(&play.url),
        "against play --listen",
    );
    let stderr = play.stop();
    assert_eq!(replayed["steps"], recorded["steps"], "{stderr}");
    assert_contains(&stderr, "missed 0, drifted 0");
    assert_contains(
        &stderr,
        "answered 1 server/discover probe as the recorded pre-2026 server would (method not found)",
    );
}

/// `deploy` recorded over stdio with two tokens that differ only in redacted values (the tape
/// cannot tell them apart), then played over HTTP to two sessions that each call it with the
/// real token: play warns once for the play run, not once per session, and its summary counts
/// both calls. Played with no marker key and with one, the warning's words fit each case.
#[test]
fn over_http_requests_that_differ_only_in_secrets_are_warned_once_per_run() {
    const API_KEY: &str = "sk-proj-Wq8sD2fG5hJ1kL9zX3cV7bN4mQ6wE0rT";
    const TOKEN: &str = "ghp_H5jK8lZ2xC6vB9nM1qW4eR7tY3uI0oPaS2dF";
    const SAID: &str = "differ only in redacted values; served";
    let (_dir, tape) = tmp_tape("secrets.jsonl");
    let deploy = |token: &str| json!({"name": "deploy", "arguments": {"service": "billing", "api_key": API_KEY, "token": token}});
    let mut cmd = command(&record_cmd(&tape, &py_server()));
    cmd.env_remove("MCPTAPE_REDACT_KEY");
    let mut c = LineClient::spawn_cmd(cmd);
    c.initialize();
    c.call(1, "tools/call", deploy("not-a-github-token-1"));
    c.call(2, "tools/call", deploy(TOKEN));
    c.finish_with(0);
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(!raw.contains(TOKEN), "the token is redacted on the tape");

    // The tape line (from 1) of the first deploy request, the one served first.
    let line = tape_lines(&tape)
        .iter()
        .position(|l| l["type"] == "msg" && l["dir"] == "c2s" && l["method"] == "tools/call")
        .expect("a tools/call on the tape")
        + 1;
    // Played with no key, then with one (the tape was recorded with none: no key set now
    // tells the requests apart, and the warning says so rather than "record with
    // MCPTAPE_REDACT_KEY set" alone, as if it were unset).
    for (key, why) in [
        (None, "The tape holds markers, not the secrets, so play cannot tell which one the client meant: its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and play with the same key, to tell them apart)"),
        (Some("k3y-0f-the-ci-s3cret-store-2026"), "The tape holds markers, not the secrets, made with no marker key (it was recorded without MCPTAPE_REDACT_KEY), so play cannot tell which one the client meant, whatever MCPTAPE_REDACT_KEY is now: its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and play with the same key, to tell them apart)"),
    ] {
        let env: Vec<(String, String)> = key
            .map(|k| vec![("MCPTAPE_REDACT_KEY".to_string(), k.to_string())])
            .unwrap_or_default();
        let play = Served::spawn_env(&["play", &s(&tape), "--listen", "127.0.0.1:0"], &env);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        for n in 0..2 {
            let (status, session, body) =
                post_in(&play.url, None, &req(1, "initialize", init_params()));
            assert_eq!(status, 200, "session {n}: {body}");
            let session = session.expect("a session id");
            assert_eq!(post_in(&play.url, Some(&session), &initialized).0, 202);
            let (status, _, body) = post_in(
                &play.url,
                Some(&session),
                &req(2, "tools/call", deploy(TOKEN)),
            );
            assert_eq!(status, 200, "session {n}: {body}");
            assert_contains(&body, "authorized");
        }
        let stderr = play.stop();
        assert_eq!(stderr.matches(SAID).count(), 1, "said once:\n{stderr}");
        assert_contains(
            &stderr,
            &format!("mcptape play: WARNING: tools/call deploy fits 2 recorded requests that differ only in redacted values; served the one at line {line}, the first unused in play's order. {why} (said once for this request; play's summary counts every call it applied to)\n"),
        );
        assert_contains(
            &stderr,
            ", 2 requests served among recorded requests that differ only in redacted values (tools/call deploy: 2)",
        );
        assert!(!stderr.contains(TOKEN), "no secret on stderr:\n{stderr}");
    }
}
