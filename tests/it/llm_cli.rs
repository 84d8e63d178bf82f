//! The `llm` CLI (PyPI, with `llm-tools-mcp`, its own venv: it needs `mcp<2`) as an agent:
//! Chat Completions streamed and not, an MCP session per tool call, its MCP config in
//! `~/.llm-tools-mcp/mcp.json` rewritten for the run and put back. Recorded against the
//! scripted fake provider, then played offline with the provider gone, in a loopback-only
//! network namespace.

use crate::harness::*;
use std::process::Command;
use std::time::Duration;

/// Runs tests/agents/llm_run.sh in its own network namespace (plain loopback, said, when
/// unshare is not allowed) and returns its folder.
fn llm_run(no_stream: bool) -> tempfile::TempDir {
    let dir = tmp();
    let script = repo().join("tests/agents/llm_run.sh");
    let mut args = vec![s(&script), s(dir.path()), s(bin())];
    if no_stream {
        args.push("--no-stream".into());
    }
    let netns = Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|st| st.success());
    let mut cmd = if netns {
        let mut c = Command::new("unshare");
        c.arg("-n").arg("bash").args(&args);
        c
    } else {
        eprintln!("note: unshare -n is not allowed here: the llm test runs on plain loopback");
        let mut c = Command::new("bash");
        c.args(&args);
        c
    };
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    let out = run_with_timeout(cmd, Duration::from_secs(300));
    assert!(out.status.success(), "llm_run.sh: {}", text(&out.stderr));
    dir
}

fn read(dir: &tempfile::TempDir, f: &str) -> String {
    std::fs::read_to_string(dir.path().join(f)).unwrap_or_default()
}

fn check(no_stream: bool) {
    let dir = llm_run(no_stream);
    let (rec, play) = (read(&dir, "rec.out"), read(&dir, "play.out"));
    assert_eq!(
        read(&dir, "rec.rc").trim(),
        "0",
        "record: {}",
        read(&dir, "rec.err")
    );
    assert!(
        rec.contains("FINAL:") && rec.contains("echo: hello from the fake model"),
        "the agent called the MCP tool and finished: {rec}"
    );
    assert_eq!(
        read(&dir, "play.rc").trim(),
        "0",
        "playback: {}",
        read(&dir, "play.err")
    );
    assert_eq!(play, rec, "the same final answer offline");
    assert_contains(&read(&dir, "play.err"), "2 model calls served, 0 missed");
    // The config was rewritten for the runs and is back as it was.
    assert_eq!(
        read(&dir, "home/.llm-tools-mcp/mcp.json"),
        read(&dir, "mcp.json.orig")
    );
    // The tape: both model calls (Chat Completions, streamed or not) and the MCP tool call.
    let tape = dir.path().join("t.jsonl");
    let lines = tape_lines(&tape);
    let requests: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == "model" && l["part"] == "request")
        .collect();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r["provider"], "openai-chat");
        assert_eq!(r["stream"], !no_stream);
    }
    assert!(
        lines
            .iter()
            .any(|l| l["server"] == "S" && l["method"] == "tools/call"),
        "the tool call is on the tape under the config's name"
    );
    Mt::new(["verify", &s(&tape)]).run().status(0);
    // Only the recording reached the provider.
    let connections = read(&dir, "prov.log")
        .lines()
        .filter(|l| l.contains("\"connection\""))
        .count();
    assert!(connections >= 1);
}

#[test]
fn llm_streaming_recorded_and_played_offline() {
    check(false);
}

#[test]
fn llm_no_stream_recorded_and_played_offline() {
    check(true);
}
