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
    assert!(e.to_string().contains("not a file of any format mcptape imports (agent-vcr, localab-vcr, mcp-rec, mcp-recorder, mcp-cassette, mcp-vcr)"), "{e}");
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
