//! The MCP Inspector's CLI (`mcp-inspector --cli`) as the client: it records server-everything
//! through `mcptape record` — without `--`, which the Inspector's command line swallows — from
//! its command line and from a `--config` file, gets the same answers from `mcptape play`, and
//! shows play's miss explanation.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;

/// The Inspector's method flags for one echo call.
fn echo(message: &str) -> Vec<String> {
    [
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([format!("message={message}")])
    .collect()
}

/// `server` then `method`, run by the Inspector; what it printed on stdout, as JSON, and its
/// output.
fn inspect(home: &Path, server: &[String], method: &[String]) -> (Value, std::process::Output) {
    let args: Vec<String> = server.iter().chain(method).cloned().collect();
    let out = inspector_cli(home, &args);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the Inspector printed no JSON ({e}): {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (v, out)
}

/// `mcptape ARGS…` followed by server-everything, with no `--` between.
fn mcptape_then_everything(args: &[&str]) -> Vec<String> {
    let mut v = vec![s(bin())];
    v.extend(args.iter().map(|a| a.to_string()));
    v.extend(everything());
    v
}

/// `mcptape play TAPE` behind `/bin/sh`, which writes play's exit status to `rc`: the
/// Inspector does not show its server's status.
fn play_status_to(tape: &Path, rc: &Path) -> Vec<String> {
    play_reporting(tape, rc, None)
}

#[test]
fn the_inspector_records_through_mcptape_without_a_double_dash_and_play_answers_the_same() {
    let dir = tmp();
    let home = dir.path();
    for (name, method) in [
        ("list", vec!["--method".to_string(), "tools/list".into()]),
        ("echo", echo("hi 2.50 api_key")),
    ] {
        let direct = inspect(home, &everything(), &method).0;
        let tape = dir.path().join(format!("{name}.jsonl"));
        let rec = mcptape_then_everything(&["record", "--tape", &s(&tape)]);
        let (recorded, out) = inspect(home, &rec, &method);
        assert_eq!(recorded, direct, "through record: {}", text(&out.stderr));
        assert!(tape.exists(), "record wrote no tape: {}", text(&out.stderr));
        let rc = dir.path().join(format!("{name}.rc"));
        let (played, out) = inspect(home, &play_status_to(&tape, &rc), &method);
        assert_eq!(played, direct, "from play: {}", text(&out.stderr));
        assert_eq!(reported_status(&rc), 0, "play's status ({name})");
    }
    let echoed = tape_msgs(&dir.path().join("echo.jsonl"));
    assert!(
        echoed
            .iter()
            .any(|m| m["msg"]["params"]["arguments"]["message"] == "hi 2.50 api_key"),
        "the call is on the tape"
    );
}

#[test]
fn the_inspector_starts_mcptape_record_from_its_config_file_without_a_double_dash() {
    let dir = tmp();
    let tape = dir.path().join("cfg.jsonl");
    let rec = mcptape_then_everything(&["record", "--tape", &s(&tape)]);
    let config = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {
        "taped": {"command": rec[0], "args": rec[1..]},
        "direct": {"command": everything()[0], "args": everything()[1..]},
    }});
    std::fs::write(&config, servers.to_string()).unwrap();
    let from = |name: &str| {
        vec![
            "--config".to_string(),
            s(&config),
            "--server".into(),
            name.into(),
        ]
    };
    let method = echo("from the config");
    let direct = inspect(dir.path(), &from("direct"), &method).0;
    let (recorded, out) = inspect(dir.path(), &from("taped"), &method);
    assert_eq!(recorded, direct, "{}", text(&out.stderr));
    let calls: Vec<Value> = tape_msgs(&tape)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0]["msg"]["params"]["arguments"]["message"],
        "from the config"
    );
}

#[test]
fn a_miss_through_the_inspector_shows_mcptapes_explanation_and_play_exits_1() {
    let dir = tmp();
    let home = dir.path();
    let tape = dir.path().join("echo.jsonl");
    let rec = mcptape_then_everything(&["record", "--tape", &s(&tape)]);
    inspect(home, &rec, &echo("hi"));
    let rc = dir.path().join("miss.rc");
    let out = inspector_cli(
        home,
        &play_status_to(&tape, &rc)
            .into_iter()
            .chain(echo("bye"))
            .collect::<Vec<_>>(),
    );
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let line = tape_lines(&tape)
        .iter()
        .position(|l| l["method"] == "tools/call")
        .expect("the recorded call")
        + 1;
    assert_contains(
        &shown,
        &format!(
            r#"no recorded answer for tools/call {{\"arguments\":{{\"message\":\"bye\"}},\"name\":\"echo\"}}; nearest (tape line {line}): $.arguments.message recorded \"hi\" asked \"bye\""#
        ),
    );
    assert!(!out.status.success(), "the Inspector reports the error");
    assert_eq!(reported_status(&rc), 1, "play's status says a miss");
}
