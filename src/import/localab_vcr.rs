//! localab-vcr (PyPI `localab-vcr`, whose Python package is also named `agent_vcr`): an agent
//! run's JSON Lines tape, as its `tape.py` and `mcp_proxy.py` write it. Of MCP it keeps only tool
//! calls: `{"kind": "tool_call", "server", "tool", "args", "args_hash", "seq"}` and, when the
//! answer was a result, `{"kind": "tool_result", "seq" (the call's), "server", "tool",
//! "args_hash", "result"}`. The run's model traffic is on the same tape (`model_request`,
//! `model_response`), and `run_aborted` says a run stopped.

use super::json::{self, Members};
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::wire::Dir;
use std::path::Path;

const KINDS: &[&str] = &[
    "tool_call",
    "tool_result",
    "model_request",
    "model_response",
    "run_aborted",
];

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.first
        .as_ref()
        .and_then(|v| v.get("kind"))
        .and_then(|k| k.as_str())
        .is_some_and(|k| KINDS.contains(&k))
}

/// A field's raw JSON text, or an error naming the line.
fn field<'a>(
    path: &Path,
    n: usize,
    m: &Members<'a>,
    key: &str,
) -> Result<&'a serde_json::value::RawValue, ImportError> {
    m.0.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            malformed(
                path,
                format!("line {n}"),
                format!("a {} event without \"{key}\"", kind(m).unwrap_or_default()),
            )
        })
}

fn kind(m: &Members<'_>) -> Option<String> {
    m.get("kind")
        .and_then(|k| serde_json::from_str(k.get()).ok())
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let mut out = Imported::default();
    let (mut model, mut answered, mut calls, mut extended) = (0, 0, 0, 0);
    // Each call's JSON-RPC id is not kept: the call's `seq` stands in for it (play answers
    // with the client's own id anyway). Results pair with their call by (server, seq).
    let mut open: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let m: Members<'_> = serde_json::from_str(line).map_err(|e| {
            malformed(
                path,
                format!("line {n}"),
                format!(
                    "{}; a localab-vcr tape has one JSON event a line",
                    json::what(&e)
                ),
            )
        })?;
        extended += usize::from(m.get("replay_extended").is_some_and(|v| v.get() == "true"));
        let str_field = |key: &str| -> Result<String, ImportError> {
            serde_json::from_str(field(path, n, &m, key)?.get()).map_err(|_| {
                malformed(
                    path,
                    format!("line {n}"),
                    format!("\"{key}\" is not a string"),
                )
            })
        };
        match kind(&m).as_deref() {
            Some("tool_call") => {
                let server = str_field("server")?;
                let tool = str_field("tool")?;
                let seq = field(path, n, &m, "seq")?.get().to_string();
                let args = json::compact(field(path, n, &m, "args")?.get());
                let name = serde_json::to_string(&tool).expect("a string serializes");
                if !out.servers.iter().any(|d| d.server == server) {
                    out.servers.push(super::stdio_decl(&server, None));
                }
                out.msgs.push(Msg {
                    server: server.clone(),
                    dir: Dir::C2S,
                    t_us: None,
                    line: format!(r#"{{"jsonrpc":"2.0","id":{seq},"method":"tools/call","params":{{"name":{name},"arguments":{args}}}}}"#),
                });
                open.push((server, seq));
                calls += 1;
            }
            Some("tool_result") => {
                let server = str_field("server")?;
                let seq = field(path, n, &m, "seq")?.get().to_string();
                let Some(k) = open.iter().position(|(s, q)| *s == server && *q == seq) else {
                    return Err(malformed(path, format!("line {n}"), format!("a tool_result for call seq {seq} of server {server:?}, which no tool_call before it made")));
                };
                open.remove(k);
                let result = json::compact(field(path, n, &m, "result")?.get());
                out.msgs.push(Msg {
                    server,
                    dir: Dir::S2C,
                    t_us: None,
                    line: format!(r#"{{"jsonrpc":"2.0","id":{seq},"result":{result}}}"#),
                });
                answered += 1;
            }
            Some("model_request" | "model_response") => model += 1,
            Some("run_aborted") => {
                let reason = m
                    .get("reason")
                    .map_or("no reason given".to_string(), |r| r.get().to_string());
                out.lacks.push(format!(
                    "the end of the run: it was aborted at line {n} ({reason})"
                ));
            }
            other => {
                return Err(malformed(
                    path,
                    format!("line {n}"),
                    format!("event kind {other:?}; expected one of {}", KINDS.join(", ")),
                ));
            }
        }
    }
    out.lacks.extend([
        "everything of MCP but tool calls: no handshake (initialize), no tools/list, resources or prompts, no notifications, no server-to-client requests; play serves the tool calls to a client that sends them, but a client that starts with initialize gets a miss".to_string(),
        "the JSON-RPC ids and the request envelope: each tools/call request is rebuilt from the tool's name and arguments, numbered by localab-vcr's seq (its _meta, a progress token, is not kept)".to_string(),
        "timing: localab-vcr records none, so every message is at 0 µs".to_string(),
        "the servers' command lines, stderr and exit codes".to_string(),
    ]);
    if calls > answered {
        out.lacks.push(format!(
            "the answers to {} tool calls: localab-vcr records only results, never JSON-RPC errors",
            calls - answered
        ));
    }
    if model > 0 {
        out.lacks.push(format!("the run's {model} model API events (model_request, model_response): not imported (mcptape import reads MCP traffic only)"));
    }
    if extended > 0 {
        out.lacks.push(format!("the line between recording and replay: {extended} events were added by a passthrough replay (replay_extended) and are imported like the recorded ones"));
    }
    if out.msgs.is_empty() {
        out.lacks.push("any tool call: the tape holds none".into());
    }
    Ok(out)
}
