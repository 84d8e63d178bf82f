//! mcptape as a library in a Rust test (examples/embed.rs, run here): an rmcp client's session
//! with server-everything recorded in-process through `record::tap::Tap`, then played
//! in-process by `play::Player` with no server process; the same answers both times, and a tape
//! the command line verifies and plays too.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

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

    // What the library taped is a tape like any other.
    Mt::new(["verify"]).arg(&tape).run().success();
    let mut c = LineClient::spawn(&play_cmd(&tape));
    c.initialize();
    let echo = c.call(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hello from rmcp"}}),
    );
    assert_eq!(echo["result"], v["live"]["echo"]);
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "missed 0");
    Mt::new(["show"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("no exit status recorded");
}
