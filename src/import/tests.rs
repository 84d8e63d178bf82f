//! Detection and error messages on small inputs; the formats themselves are tested end to end
//! on files their recorders wrote (tests/it/import.rs).

use super::*;
use crate::exit::Coded as _;

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn each_format_is_detected_by_its_shape() {
    let cases = [
        (
            Format::McpRec,
            r#"{"ts": 1.5, "dir": "client->server", "msg": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}"#,
        ),
        (
            Format::LocalabVcr,
            r#"{"kind": "tool_call", "server": "s", "tool": "t", "args": {}, "seq": 1}"#,
        ),
        (Format::McpVcr, r#"{"_type": "meta", "version": 1}"#),
        (Format::McpVcr, "meta:\n  version: 1\nmessages: []\n"),
        (
            Format::McpCassette,
            r#"{"format_version": 3, "recorded_at": "x", "messages": []}"#,
        ),
        (
            Format::McpRecorder,
            r#"{"version": "1.0", "metadata": {}, "interactions": []}"#,
        ),
        (
            Format::AgentVcr,
            r#"{"format_version": "1.0.0", "metadata": {}, "session": {"initialize_request": {}}}"#,
        ),
        (Format::McpReplay, MCP_REPLAY_FIXTURE),
    ];
    for (want, text) in cases {
        let (_d, p) = file(text);
        assert_eq!(detect(&p).unwrap(), want, "{text}");
    }
}

#[test]
fn a_file_of_two_shapes_is_refused_with_both() {
    let (_d, p) = file(
        r#"{"format_version": 3, "recorded_at": "x", "messages": [], "version": "1.0", "metadata": {}, "interactions": []}"#,
    );
    let e = detect(&p).unwrap_err();
    assert!(
        matches!(&e, ImportError::Ambiguous { candidates, .. } if candidates == &[Format::McpRecorder, Format::McpCassette]),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("could be mcp-recorder or mcp-cassette; name the format"),
        "{e}"
    );
    assert_eq!(e.exit_code(), crate::exit::USAGE);
}

#[test]
fn an_unknown_file_names_the_formats_and_a_missing_one_is_66() {
    let (_d, p) = file("hello\n");
    let e = detect(&p).unwrap_err();
    assert!(e.to_string().contains("not a file of any format mcptape imports (agent-vcr, localab-vcr, mcp-rec, mcp-recorder, mcp-cassette, mcp-vcr, mcp-replay)"), "{e}");
    assert_eq!(e.exit_code(), crate::exit::DATA_ERR);
    let e = detect(Path::new("/nonexistent/x.json")).unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::NO_INPUT);
}

#[test]
fn a_bad_line_is_named_with_what_was_expected() {
    let (_d, p) = file("{\"ts\": 1, \"dir\": \"client->server\", \"msg\": {}}\n{\"ts\": 2, \"dir\": \"sideways\", \"msg\": {}}\n");
    let e = read(&p, Some(Format::McpRec)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: line 2: \"dir\" is \"sideways\"; expected \"client->server\" or \"server->client\"", p.display())
    );
    let (_d, p) = file(r#"{"format_version": 3, "recorded_at": "x", "messages": [{"seq": 0}]}"#);
    let e = read(&p, Some(Format::McpCassette)).unwrap_err();
    assert!(
        e.to_string().contains(
            ": line 1 column 65: missing field `t_offset_ms`; expected an mcp-cassette cassette"
        ),
        "{e}"
    );
    assert_eq!(e.exit_code(), crate::exit::DATA_ERR);
}

#[test]
fn a_localab_result_without_its_call_is_refused() {
    let (_d, p) =
        file(r#"{"kind": "tool_result", "seq": 4, "server": "s", "tool": "t", "result": {}}"#);
    let e = read(&p, Some(Format::LocalabVcr)).unwrap_err();
    assert!(e.to_string().contains("line 1: a tool_result for call seq 4 of server \"s\", which no tool_call before it made"), "{e}");
}

/// One fixture as mcp-replay's `FixtureStore.save` lays it out.
const MCP_REPLAY_FIXTURE: &str = r#"{
  "method": "tools/call",
  "paramsHash": "031444c1cc1e3cebe384037400eaa81b6aa2afe4d49dfec884bbed3676f6be2f",
  "params": {
    "name": "add",
    "arguments": { "a": 2, "b": 3 }
  },
  "response": { "jsonrpc": "2.0", "id": 3, "result": { "content": [] } },
  "recordedAt": "2026-12-01T20:30:24.496Z"
}"#;

#[test]
fn an_mcp_replay_directory_is_detected_and_a_bad_fixture_named_by_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("tools_call");
    std::fs::create_dir(&calls).unwrap();
    std::fs::write(calls.join("a.json"), MCP_REPLAY_FIXTURE).unwrap();
    std::fs::write(
        calls.join("notes.txt"),
        "not a fixture: skipped, as mcp-replay's load does",
    )
    .unwrap();
    assert_eq!(detect(dir.path()).unwrap(), Format::McpReplay);
    let (format, imported) = read(dir.path(), None).unwrap();
    assert_eq!(format, Format::McpReplay);
    let lines: Vec<&str> = imported.msgs.iter().map(|m| m.line.as_str()).collect();
    assert_eq!(
        lines,
        [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#,
        ]
    );
    let e = read(dir.path(), Some(Format::McpRec)).unwrap_err();
    assert!(
        e.to_string().contains("a directory; mcp-rec writes a file"),
        "{e}"
    );

    let bad = calls.join("b.json");
    std::fs::write(
        &bad,
        MCP_REPLAY_FIXTURE.replace("2026-12-01T20:30:24.496Z", "yesterday"),
    )
    .unwrap();
    let e = read(dir.path(), None).unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::DATA_ERR);
    assert!(
        e.to_string()
            .starts_with(&format!("{}: recordedAt: \"yesterday\":", bad.display())),
        "{e}"
    );
    std::fs::write(
        &bad,
        r#"{"method": "ping", "paramsHash": "x", "recordedAt": "2026-12-01T20:30:24.496Z"}"#,
    )
    .unwrap();
    let e = read(dir.path(), None).unwrap_err();
    assert!(
        e.to_string().contains(
            "b.json: line 1 column 79: missing field `response`; expected an mcp-replay fixture"
        ),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let e = detect(empty.path()).unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::DATA_ERR);
    let e = read(empty.path(), Some(Format::McpReplay)).unwrap_err();
    assert!(e.to_string().contains("no mcp-replay fixture in it"), "{e}");
}
