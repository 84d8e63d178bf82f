//! Params and answers a `serde_json::Value` cannot hold as they are: integers beyond 64 bits
//! (read as the nearest double, so 2^64 and 2^64+1 were one value) and lone UTF-16 surrogates
//! (`"\ud800"`, which JavaScript clients can send; serde_json refuses them). Recorded through a
//! real server that echoes what it is asked, then played, checked, diffed and shown.

use crate::harness::*;
use crate::record::record;
use std::path::Path;
use std::time::Duration;

/// A [`line_server`] answer: every request's params echoed back (Python keeps big integers and lone
/// surrogates as they were) and `extra`, the server's argument read as JSON.
const ECHO: &str = r##"
def answer(m, extra):
    return {"echo": m.get("params"), "extra": json.loads(extra)}
"##;

fn echo_server(extra: &str) -> Vec<String> {
    line_server("echo", ECHO, extra)
}

/// A `tools/call e` request line with this id and these arguments (JSON text, as sent).
fn call(id: &str, arguments: &str, name_first: bool) -> Vec<u8> {
    let params = if name_first {
        format!(r#"{{"name":"e","arguments":{arguments}}}"#)
    } else {
        format!(r#"{{ "arguments" : {arguments} , "name" : "e" }}"#)
    };
    format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{params}}}"#)
        .into_bytes()
}

/// Sends `line` and returns the next line the peer writes (these sessions send nothing else
/// between a request and its answer), as text.
fn ask_raw(c: &mut LineClient, line: &[u8]) -> String {
    c.send_raw(&[line, b"\n"].concat());
    let got = c
        .recv_raw(Duration::from_secs(30))
        .expect("an answer within 30 s");
    text(&got)
}

/// Records `arguments` (each sent name first, as recorded) on `tape` through [`ECHO`].
fn record_calls(tape: &Path, extra: &str, arguments: &[&str]) {
    let mut c = record(tape, &[], &echo_server(extra));
    c.initialize();
    for (i, a) in arguments.iter().enumerate() {
        let answer = ask_raw(&mut c, &call(&format!("r{i}"), a, true));
        assert!(answer.contains("\"result\""), "{answer}");
    }
    c.finish_with(0);
}

fn play(tape: &Path) -> LineClient {
    let mut c = Mt::new(["play"]).arg(tape).spawn();
    c.initialize();
    c
}

#[test]
fn integers_beyond_64_bits_are_matched_by_their_exact_value() {
    let (_dir, tape) = tmp_tape("big.jsonl");
    let big = "18446744073709551617"; // 2^64 + 1
    let long = "123456789012345678901234567890";
    record_calls(
        &tape,
        "0",
        &[&format!(r#"{{"n":{big}}}"#), &format!(r#"{{"n":{long}}}"#)],
    );
    let mut c = play(&tape);
    // Another spelling of the params (key order, spaces): matched by value, not by bytes.
    let near = ask_raw(&mut c, &call("a", r#"{"n":18446744073709551616}"#, false));
    assert!(near.contains("\"error\""), "2^64 is not 2^64+1: {near}");
    let near = ask_raw(
        &mut c,
        &call("b", r#"{"n":123456789012345678901234567891}"#, false),
    );
    assert!(near.contains("\"error\""), "the last digit differs: {near}");
    let hit = ask_raw(&mut c, &call("c", &format!(r#"{{"n":{big}}}"#), false));
    assert!(hit.contains(&format!(r#""n": {big}"#)), "{hit}");
    let hit = ask_raw(&mut c, &call("d", &format!(r#"{{"n":{long}}}"#), false));
    assert!(hit.contains(&format!(r#""n": {long}"#)), "{hit}");
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "served 3, missed 2");
}

#[test]
fn a_lone_surrogate_matches_itself_and_no_other() {
    let (_dir, tape) = tmp_tape("surrogate.jsonl");
    record_calls(&tape, "0", &[r#"{"q":"\ud800"}"#, r#"{"q":"x\udc00"}"#]);
    let mut c = play(&tape);
    // Out of recorded order, in another spelling: each finds its own answer.
    let hit = ask_raw(&mut c, &call("a", r#"{"q":"x\uDC00"}"#, false));
    assert!(hit.contains(r#""q": "x\udc00""#), "{hit}");
    let miss = ask_raw(&mut c, &call("b", r#"{"q":"\udbff"}"#, false));
    assert!(miss.contains("\"error\""), "another lone surrogate: {miss}");
    let miss = ask_raw(&mut c, &call("c", r#"{"q":"\ufffd"}"#, false));
    assert!(
        miss.contains("\"error\""),
        "the replacement character: {miss}"
    );
    let hit = ask_raw(&mut c, &call("d", r#"{"q":"\ud800"}"#, false));
    assert!(hit.contains(r#""q": "\ud800""#), "{hit}");
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "served 3, missed 2");
    // Shown and listed without a panic.
    Mt::new(["show"]).arg(&tape).run().success();
    Mt::new(["show", "--json"]).arg(&tape).run().success();
}

#[test]
fn check_and_diff_see_a_change_in_an_integer_beyond_64_bits() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let args = [r#"{"n":18446744073709551617,"q":"\ud800"}"#];
    record_calls(&a, "18446744073709551617", &args);
    record_calls(&b, "18446744073709551616", &args);
    Mt::new(["diff"]).arg(&a).arg(&a).run().success();
    let run = Mt::new(["diff"]).arg(&a).arg(&b).run().status(1);
    assert_contains(&run.console(), "extra");
    let check = |server: Vec<String>| {
        Mt::new(["check"])
            .arg(&a)
            .arg("--")
            .args(server)
            .timeout(Duration::from_secs(120))
            .run()
    };
    check(echo_server("18446744073709551617")).success();
    let run = check(echo_server("18446744073709551616")).status(1);
    assert_contains(&run.console(), "extra");
}

/// A [`line_server`] answer: text content holding JSON: `{"n": N}`, N the server's argument
/// written as it is (Python keeps a big integer exact).
const TEXT_JSON: &str = r##"
def answer(m, n):
    return {"content": [{"type": "text", "text": json.dumps({"n": json.loads(n)})}]}
"##;

fn text_json_server(n: &str) -> Vec<String> {
    line_server("text-json", TEXT_JSON, n)
}

/// Records one `tools/call` through [`TEXT_JSON`] answering with `n`.
fn record_text_json(tape: &Path, n: &str) {
    let mut c = record(tape, &[], &text_json_server(n));
    c.initialize();
    let answer = ask_raw(&mut c, &call("r0", "{}", true));
    assert!(answer.contains(n), "{answer}");
    c.finish_with(0);
}

/// JSON inside a text content item is compared as JSON (a changed field reported at its own
/// path), and read as exactly as the message around it: 2^64 and 2^64+1 there are two values
/// (they were read as one double, so the change went unseen).
#[test]
fn check_and_diff_see_a_change_in_an_integer_beyond_64_bits_inside_text_content() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    record_text_json(&a, "18446744073709551617");
    record_text_json(&b, "18446744073709551616");
    let path = "$.result.content[0].text.n";
    Mt::new(["diff"]).arg(&a).arg(&a).run().success();
    let run = Mt::new(["diff", "--format", "json"])
        .arg(&a)
        .arg(&b)
        .run()
        .status(1);
    let report: serde_json::Value = run.json();
    assert_eq!(report["drifts"][0]["changes"][0]["path"], path, "{report}");
    assert_eq!(
        report["drifts"][0]["changes"].as_array().map(Vec::len),
        Some(1)
    );
    let check = |n: &str| {
        Mt::new(["check"])
            .arg(&a)
            .args(["--json", "-", "--"])
            .args(text_json_server(n))
            .timeout(Duration::from_secs(120))
            .run()
    };
    check("18446744073709551617").success();
    let run = check("18446744073709551616").status(1);
    let report: serde_json::Value = run.json();
    let changed: Vec<&serde_json::Value> = report["exchanges"]
        .as_array()
        .expect("exchanges")
        .iter()
        .flat_map(|e| e["changes"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(changed.len(), 1, "{report}");
    assert_eq!(changed[0]["path"], path, "{report}");
}

/// A stdio server that sends one progress notification for the request's `_meta.progressToken`
/// (as Python read it: a big integer kept exact) before each answer.
const PROGRESS: &str = r##"
import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "progress", "version": "1"}}
    else:
        tok = m.get("params", {}).get("_meta", {}).get("progressToken")
        if tok is not None:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": tok, "progress": 1, "total": 2}}) + "\n")
        r = {"content": [{"type": "text", "text": "done"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"##;

/// A `tools/call e` with this id and progress token (JSON text, as sent).
fn call_with_token(id: &str, token: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"e","arguments":{{}},"_meta":{{"progressToken":{token}}}}}}}"#
    )
    .into_bytes()
}

/// The next line the peer writes, as text.
fn next_line(c: &mut LineClient) -> String {
    text(
        &c.recv_raw(Duration::from_secs(30))
            .expect("a line within 30 s"),
    )
}

/// Play puts the client's progress token on the recorded progress notifications as the client
/// wrote it: an integer beyond 64 bits went out as play's internal stand-in for it
/// (`"\u0000int:123…"`), and an escaped string re-spelled.
#[test]
fn play_gives_progress_the_client_token_as_written() {
    let (_dir, tape) = tmp_tape("progress.jsonl");
    let server = vec![python(), "-u".into(), "-c".into(), PROGRESS.into()];
    let mut c = record(&tape, &[], &server);
    c.initialize();
    let progress = ask_raw(&mut c, &call_with_token("r0", "7"));
    assert_contains(&progress, r#""progressToken": 7"#);
    next_line(&mut c);
    let progress = ask_raw(&mut c, &call_with_token("r1", "8"));
    assert_contains(&progress, r#""progressToken": 8"#);
    next_line(&mut c);
    c.finish_with(0);

    let mut c = play(&tape);
    let long = "123456789012345678901234567890";
    let progress = ask_raw(&mut c, &call_with_token("a", long));
    assert_contains(&progress, &format!(r#""progressToken": {long},"#));
    let answer = next_line(&mut c);
    assert_contains(&answer, r#""id": "a""#);
    let progress = ask_raw(&mut c, &call_with_token("b", r#""p\u00e9""#));
    assert_contains(&progress, r#""progressToken": "p\u00e9","#);
    c.finish_with(0);
}

/// What people read — diff's changes, play's miss explained — shows an integer beyond 64 bits
/// and a lone surrogate as the tape has them: they are compared by stand-ins, which were shown
/// (`"\u0000int:18446744073709551617"`, a string with a NUL where the tape has a number).
#[test]
fn messages_show_integers_beyond_64_bits_and_lone_surrogates_as_written() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let long = "123456789012345678901234567890";
    let args = [format!(r#"{{"n":{long}}}"#)];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    record_calls(&a, r#"{"n":18446744073709551617,"q":"\ud800"}"#, &args);
    record_calls(&b, r#"{"n":18446744073709551616,"q":"\udbff"}"#, &args);
    let diff = Mt::new(["diff", "--all"]).arg(&a).arg(&b).run().status(1);
    for want in [
        "$.result.extra.n  18446744073709551617  →  18446744073709551616",
        r#"$.result.extra.q  "\ud800"  "#,
        r#"→  "\udbff""#,
        &format!(r#"tools/call e {{"n":{long}}}"#),
    ] {
        assert_contains(&diff.stdout, want);
    }
    let mut c = play(&a);
    let miss = ask_raw(
        &mut c,
        &call("x", r#"{"n":123456789012345678901234567891}"#, false),
    );
    assert!(miss.contains("\"error\""), "{miss}");
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        &format!("$.arguments.n recorded {long} asked 123456789012345678901234567891"),
    );
    for out in [&diff.stdout, &stderr] {
        assert!(!out.contains("int:") && !out.contains(r"\u0000"), "{out}");
    }
}
