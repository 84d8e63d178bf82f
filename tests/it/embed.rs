//! mcptape as a library in a Rust test (examples/embed.rs, run here): an rmcp client's session
//! with server-everything recorded in-process through `record::tap::Tap`, then played
//! in-process by `play::Player` with no server process; the same answers both times, and a tape
//! the command line verifies and plays too; and (examples/embed_rmcp_server.rs) an rmcp server
//! and client in one process over `tokio::io::duplex`, taped, then the tape played to a fresh
//! client.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What the library taped is a tape like any other: the command line verifies it, and play
/// answers the tool call `call` with `want`, what the library's client got.
fn plays_on_the_command_line(tape: &Path, call: Value, want: &Value) {
    Mt::new(["verify"]).arg(tape).run().success();
    let mut c = LineClient::spawn(&play_cmd(tape));
    c.initialize();
    let answer = c.call(2, "tools/call", call);
    assert_eq!(&answer["result"], want);
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "missed 0");
}

#[test]
fn an_rmcp_session_recorded_and_played_in_process_gets_the_same_answers() {
    let dir = tmp();
    let tape = dir.path().join("embedded.jsonl");
    let mut cmd = Command::new(example("embed"));
    cmd.arg(&tape).args(everything());
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "embed: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["live"], v["played"], "{}", pretty(&v));
    assert_eq!(
        v["live"]["echo"]["content"][0]["text"],
        "Echo: hello from rmcp"
    );
    assert!(
        v["live"]["tools"].as_array().is_some_and(|t| t.len() > 5),
        "{v}"
    );
    assert_eq!(
        (v["served"].clone(), v["missed"].clone()),
        (json!(3), json!(0))
    );

    plays_on_the_command_line(
        &tape,
        json!({"name": "echo", "arguments": {"message": "hello from rmcp"}}),
        &v["live"]["echo"],
    );
    Mt::new(["show"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("no exit status recorded");
}

#[test]
fn an_in_process_rmcp_server_is_taped_through_a_duplex_and_its_tape_plays_to_a_fresh_client() {
    // examples/embed_rmcp_server.rs: an rmcp server (its tool macros) and an rmcp client in one
    // process over tokio::io::duplex, taped by `Tap`; then `Player` serves the tape to a new
    // client. No process but the example's own.
    let dir = tmp();
    let tape = dir.path().join("in-process.jsonl");
    let mut cmd = Command::new(example("embed_rmcp_server"));
    cmd.arg(&tape);
    let out = run_with_timeout(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "embed_rmcp_server: {}",
        text(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["live"], v["played"], "{}", pretty(&v));
    let names: Vec<&str> = v["live"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add", "shout"]);
    assert_eq!(
        v["live"]["tools"][0]["inputSchema"]["properties"]["a"]["description"],
        "The left operand."
    );
    assert_eq!(v["live"]["add"]["content"][0]["text"], "42");
    assert_eq!(v["live"]["shout"]["content"][0]["text"], "HELLO TAPE");
    // initialize, tools/list and the two calls, all from the tape.
    assert_eq!(
        (v["served"].clone(), v["missed"].clone()),
        (json!(4), json!(0))
    );

    plays_on_the_command_line(
        &tape,
        json!({"name": "add", "arguments": {"a": 2, "b": 40}}),
        &v["live"]["add"],
    );
}
