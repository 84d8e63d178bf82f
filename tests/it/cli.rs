//! The command line itself: help, exit codes, the demo.

use crate::harness::*;

#[test]
fn demo_runs_the_whole_loop() {
    let dir = tmp();
    let out = mcptape(&["demo", "--dir", &s(dir.path())]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("8 of 8 steps identical"), "{stdout}");
    assert!(
        stdout.contains("$.arguments.celsius  recorded 21.5  asked 30"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tools/call convert_temperature drifted"),
        "{stdout}"
    );
    assert!(dir.path().join("demo.jsonl").exists());
}

#[test]
fn help_states_the_exit_codes() {
    for args in [&["--help"][..], &["record", "--help"], &["play", "--help"]] {
        let out = mcptape(args);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("65  malformed tape"), "{args:?}: {text}");
    }
}

#[test]
fn usage_errors_exit_64() {
    let out = mcptape(&["record"]);
    assert_eq!(out.status.code(), Some(64));
    let out = mcptape(&["play"]);
    assert_eq!(out.status.code(), Some(64));
    let out = mcptape(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn missing_tape_exits_66_and_bad_tape_65() {
    let dir = tmp();
    let out = mcptape(&["play", &s(dir.path().join("nope.jsonl"))]);
    assert_eq!(
        out.status.code(),
        Some(66),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("tape not found"));

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    let out = mcptape(&["show", &s(&bad)]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an mcptape tape"));

    let future = dir.path().join("future.jsonl");
    std::fs::write(&future, "{\"type\":\"header\",\"format\":\"mcptape\",\"version\":2,\"created\":\"x\",\"tool\":\"mcptape 9\"}\n").unwrap();
    let out = mcptape(&["play", &s(&future)]);
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tape format version 2 is newer"), "{err}");
}

#[test]
fn hostile_tape_names_are_refused() {
    let dir = tmp();
    for name in [".hidden", "a b", "x:y", "é"] {
        let mut c = std::process::Command::new(bin());
        c.env("MCPTAPE_DIR", dir.path()).args(["play", name]);
        let out = run_with_timeout(c, std::time::Duration::from_secs(10));
        assert_eq!(
            out.status.code(),
            Some(64),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("invalid tape name"),
            "{name}"
        );
    }
}

#[test]
fn a_server_that_cannot_start_exits_69_and_leaves_no_tape() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let out = mcptape(&["record", "--tape", &s(&tape), "--", "/nonexistent/server"]);
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not start server `/nonexistent/server`"),
        "{err}"
    );
    assert!(!tape.exists());
}

#[test]
fn show_and_ls_into_a_closed_pipe_end_quietly() {
    let dir = tmp();
    let out = mcptape(&["demo", "--dir", &s(dir.path())]);
    assert!(out.status.success());
    let tape = s(dir.path().join("demo.jsonl"));
    for args in [
        vec!["show", tape.as_str()],
        vec!["show", "--json", tape.as_str()],
    ] {
        let mut child = std::process::Command::new(bin())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before mcptape writes
        let out = wait_output(child, std::time::Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn a_server_that_cannot_start_does_not_cost_an_existing_tape() {
    // Regression: the tape was truncated before the spawn, then removed when it failed.
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    std::fs::write(&tape, "precious\n").unwrap();
    let out = mcptape(&["record", "--tape", &s(&tape), "--", "/nonexistent/server"]);
    assert_eq!(out.status.code(), Some(69));
    assert_eq!(std::fs::read_to_string(&tape).unwrap(), "precious\n");
}

#[test]
fn show_json_keeps_ids_exactly() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let raw = r#"{"type":"msg","seq":1,"t_us":0,"server":"default","dir":"c2s","kind":"request","id":123456789012345678901234567890,"method":"ping","msg":{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}}"#;
    std::fs::write(
        &tape,
        format!("{{\"type\":\"header\",\"format\":\"mcptape\",\"version\":1,\"created\":\"x\",\"tool\":\"t\"}}\n{raw}\n"),
    )
    .unwrap();
    let out = mcptape(&["show", "--json", &s(&tape)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"id\": 123456789012345678901234567890"),
        "{text}"
    );
    let out = mcptape(&["show", &s(&tape)]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("12345…"),
        "ids are shown as written, cut to the column"
    );
}
