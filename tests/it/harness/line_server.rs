//! A line server: a stdio MCP server in a few lines of stdlib Python, for tests that need a peer
//! answering exactly what they choose (and Python's JSON, which keeps integers beyond 64 bits and
//! lone UTF-16 surrogates as they were sent).

use super::python;

/// What every [`line_server`] runs after its `answer`: one JSON message a line; `initialize`
/// answered as the server named by argv[1]; notifications and answers skipped; every other
/// request answered with `answer(m, argv[2])`.
const LOOP: &str = r##"
name, arg = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": name, "version": "1"}}
    else:
        r = answer(m, arg)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"##;

/// The command of a line server named `name` (its `initialize` answer's `serverInfo.name`).
/// `answer` is Python source (at column 0, `json` and `sys` imported) defining
/// `answer(m, arg)`: the result of request `m` (as `json.loads` read it), given `arg` as passed
/// here.
pub fn line_server(name: &str, answer: &str, arg: &str) -> Vec<String> {
    vec![
        python(),
        "-u".into(),
        "-c".into(),
        format!("import sys, json\n{answer}\n{LOOP}"),
        name.into(),
        arg.into(),
    ]
}
