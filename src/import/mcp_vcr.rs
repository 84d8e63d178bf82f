//! mcp-vcr (PyPI `mcp-vcr`): a transcript as its `recorder.py` writes it, YAML (its default) or
//! NDJSON (`--format ndjson`). YAML: `meta: {version, recorded_at, session_id, server_command,
//! protocol_version, client_hint, …}` and `messages: [{t, dir: c2s | s2c, payload}]` (keys
//! sorted: `yaml.safe_dump(sort_keys=True)`). NDJSON: a first line `{"_type": "meta", …}`, then
//! one `{"t", "dir", "payload"}` a line. `t` is milliseconds since the session started.

use super::json::{self, Members};
use super::yaml::Node;
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::DEFAULT_SERVER;
use crate::wire::Dir;
use serde_json::Value;
use std::path::Path;

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    if let Some(first) = &p.first {
        return first.get("_type").and_then(Value::as_str) == Some("meta");
    }
    if p.doc.is_some() {
        return false; // a JSON document is YAML too, but mcp-vcr never writes one
    }
    if flow_too_deep(p.text).is_some() {
        return false; // deeper than serde_yaml reads, and slow to find so with it
    }
    yaml_doc(p.text).is_ok_and(|d| {
        d.get("meta").is_some_and(Node::is_object)
            && d.get("messages").and_then(Node::as_array).is_some()
    })
}

/// The YAML document, its integers kept exactly (see [`super::yaml`]).
fn yaml_doc(text: &str) -> Result<Node, serde_yaml::Error> {
    serde_yaml::from_str(text)
}

/// The deepest flow nesting (`[…]`, `{…}`) read as YAML. serde_yaml refuses anything nested
/// past 128 levels, but only after its scanner (libyaml's) has gone through the text in time
/// quadratic in the depth of flow collections (it looks at every open level at each token):
/// 40,000 levels took seconds, a few hundred thousand minutes. So the depth is found first,
/// in one pass ([`flow_too_deep`]).
const MAX_FLOW_DEPTH: usize = 128;

/// The 1-based line where `text`'s flow collections first nest deeper than
/// [`MAX_FLOW_DEPTH`], if they do. One pass, in linear time. It counts a `[` or `{` where YAML
/// starts a collection: anywhere inside a flow collection (no plain scalar holds one there),
/// and in block context where a node starts (a line's start, after `- `, `? `, `: `, an
/// anchor or a tag); quoted scalars, comments and block scalars (`|`, `>`) are skipped. A
/// bound from above: what it passes, serde_yaml may still refuse.
fn flow_too_deep(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (mut i, mut line, mut depth) = (0usize, 1usize, 0usize);
    let mut node_start = true;
    // Where the current line's content starts: its indentation.
    let mut indent = 0usize;
    let mut line_start = true;
    let space = |c: Option<&u8>| matches!(c, None | Some(b' ' | b'\t' | b'\n' | b'\r'));
    while i < b.len() {
        let c = b[i];
        if line_start {
            if c == b' ' {
                indent += 1;
                i += 1;
                continue;
            }
            line_start = false;
        }
        match c {
            b'\n' => {
                line += 1;
                line_start = true;
                indent = 0;
                node_start = true;
            }
            b' ' | b'\t' | b'\r' => {}
            b'#' if i == 0 || space(b.get(i - 1)) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'[' | b'{' if depth > 0 || node_start => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Some(line);
                }
                node_start = true;
            }
            b']' | b'}' if depth > 0 => {
                depth -= 1;
                node_start = false;
            }
            b',' if depth > 0 => node_start = true,
            b'"' | b'\'' if node_start => {
                // A quoted scalar, to its closing quote (`\"` and `''` escape one).
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' if c == b'"' => i += 1,
                        b'\'' if c == b'\'' && b.get(i + 1) == Some(&b'\'') => i += 1,
                        q if q == c => break,
                        b'\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
                node_start = false;
            }
            b'|' | b'>' if node_start && depth == 0 => {
                // A block scalar: its lines are those indented more than this one's.
                let own = indent;
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                loop {
                    // At a newline: look at the next line's indentation.
                    let from = i + 1;
                    let mut j = from;
                    while j < b.len() && b[j] == b' ' {
                        j += 1;
                    }
                    let blank = j >= b.len() || matches!(b[j], b'\n' | b'\r');
                    if from >= b.len() || (!blank && j - from <= own) {
                        break;
                    }
                    line += 1;
                    i = j;
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                continue;
            }
            b'-' | b'?' | b':' if space(b.get(i + 1)) => node_start = true,
            b':' if depth > 0 => node_start = true,
            b'&' | b'!' if node_start => {
                // An anchor or a tag: the node follows it.
                while i < b.len() && !space(b.get(i)) {
                    i += 1;
                }
                continue;
            }
            _ => node_start = false,
        }
        i += 1;
    }
    None
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let ndjson = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.trim_start().starts_with('{'));
    let (meta, msgs) = if ndjson {
        ndjson_msgs(path, text)?
    } else {
        yaml_msgs(path, text)?
    };
    let mut out = Imported {
        msgs,
        ..Imported::default()
    };
    let command: Option<Vec<String>> = meta
        .get("server_command")
        .and_then(|c| serde_json::from_value(c.clone()).ok());
    out.servers.push(super::stdio_decl(DEFAULT_SERVER, command));
    out.lacks.extend([
        "the wire bytes: mcp-vcr stores each message decoded (YAML) or re-encoded (NDJSON), so key order, spacing and number spelling are its own".to_string(),
        "lines that were not JSON-RPC objects, and the server's stderr and exit code: mcp-vcr does not record them".to_string(),
        "the server's full command: mcp-vcr keeps only the last part of each absolute path in it".to_string(),
        "whatever mcp-vcr's redactor replaced when it recorded (on unless --no-redact, and the transcript does not say which): those values are its placeholders".to_string(),
    ]);
    if meta.get("incomplete").and_then(Value::as_bool) == Some(true) {
        out.lacks.push(format!(
            "the end of the session: mcp-vcr marked it incomplete ({})",
            meta.get("incomplete_reason")
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
        ));
    }
    Ok(out)
}

fn message(
    path: &Path,
    at: &str,
    t: Option<u64>,
    dir: Option<&str>,
    payload: String,
) -> Result<Msg, ImportError> {
    let dir = match dir {
        Some("c2s") => Dir::C2S,
        Some("s2c") => Dir::S2C,
        other => {
            return Err(malformed(
                path,
                at,
                format!("\"dir\" is {other:?}; expected \"c2s\" or \"s2c\""),
            ))
        }
    };
    let Some(t) = t else {
        return Err(malformed(
            path,
            at,
            "no \"t\" (milliseconds since the session started)",
        ));
    };
    Ok(Msg {
        server: DEFAULT_SERVER.into(),
        dir,
        t_us: Some(super::ms_to_us(path, at, "t", t)?),
        line: payload,
    })
}

fn yaml_msgs(path: &Path, text: &str) -> Result<(Value, Vec<Msg>), ImportError> {
    if let Some(line) = flow_too_deep(text) {
        return Err(malformed(
            path,
            format!("line {line}"),
            format!("YAML nested deeper than {MAX_FLOW_DEPTH} levels of [ ] and {{ }}; an mcp-vcr transcript is a list of messages, not this deep"),
        ));
    }
    let doc = yaml_doc(text).map_err(|e| {
        let at = e.location().map_or("the whole file".to_string(), |l| {
            format!("line {} column {}", l.line(), l.column())
        });
        malformed(
            path,
            at,
            format!("{e}; expected an mcp-vcr YAML transcript (meta, messages)"),
        )
    })?;
    if doc.has_huge_float() {
        if let Some(line) = super::yaml::huge_int_line(text) {
            return Err(malformed(
                path,
                format!("line {line}"),
                "an integer beyond 128 bits, which mcptape's YAML reader cannot keep exactly (it would be another number); the transcript in NDJSON (mcp-vcr --format ndjson) keeps every number as written",
            ));
        }
    }
    let meta = doc.get("meta").map_or(Value::Null, Node::to_value);
    let Some(items) = doc.get("messages").and_then(Node::as_array) else {
        return Err(malformed(
            path,
            "the whole file",
            "no \"messages\" list; an mcp-vcr transcript has meta and messages",
        ));
    };
    let mut msgs = Vec::new();
    for (i, m) in items.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(payload) = m.get("payload").filter(|p| p.is_object()) else {
            return Err(malformed(
                path,
                &at,
                "no \"payload\" object (the JSON-RPC message)",
            ));
        };
        msgs.push(message(
            path,
            &at,
            m.get("t").and_then(Node::as_u64),
            m.get("dir").and_then(Node::as_str),
            payload.to_json(),
        )?);
    }
    Ok((meta, msgs))
}

fn ndjson_msgs(path: &Path, text: &str) -> Result<(Value, Vec<Msg>), ImportError> {
    let mut meta = Value::Null;
    let mut msgs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("line {}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let m: Members<'_> = serde_json::from_str(line).map_err(|e| {
            malformed(
                path,
                &at,
                format!(
                    "{}; mcp-vcr's NDJSON has one JSON object a line",
                    json::what(&e)
                ),
            )
        })?;
        if m.get("_type").is_some_and(|t| t.get() == "\"meta\"") {
            meta = serde_json::from_str(line).unwrap_or(Value::Null);
            continue;
        }
        let Some(payload) = m.get("payload") else {
            return Err(malformed(
                path,
                &at,
                "no \"payload\" (the JSON-RPC message)",
            ));
        };
        let t = m
            .get("t")
            .and_then(|t| serde_json::from_str::<u64>(t.get()).ok());
        let dir = m
            .get("dir")
            .and_then(|d| serde_json::from_str::<String>(d.get()).ok());
        msgs.push(message(
            path,
            &at,
            t,
            dir.as_deref(),
            json::compact(payload.get()),
        )?);
    }
    Ok((meta, msgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_depth_counts_collections_not_brackets_in_scalars() {
        let deep = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(flow_too_deep(&deep(MAX_FLOW_DEPTH)), None);
        assert_eq!(flow_too_deep(&deep(MAX_FLOW_DEPTH + 1)), Some(1));
        let mixed = format!("x: 1\n- {}{}\n", "{k: [".repeat(65), "]}".repeat(65));
        assert_eq!(flow_too_deep(&mixed), Some(2));
        // Brackets that start no collection: in quotes, comments, block scalars, mid-scalar.
        let many = "[".repeat(200);
        for text in [
            format!("a: \"{many}\"\n"),
            format!("a: '{many}'\n"),
            format!("a: 1 # {many}\n"),
            format!("a: x{many}\n"),
            format!("a: |\n  {many}\n\n  {many}\nb: 1\n"),
            format!("- >-\n    {many}\n"),
            format!("a: \"it\\\"s {many}\"\n"),
            format!("a: 'it''s {many}'\n"),
        ] {
            assert_eq!(flow_too_deep(&text), None, "{text}");
        }
        // After a block scalar, counting goes on.
        assert_eq!(
            flow_too_deep(&format!("a: |\n  x\nb: {}\n", "[".repeat(129))),
            Some(3)
        );
        // Anchors and tags come before the node.
        assert_eq!(
            flow_too_deep(&format!("a: &x !!seq {}\n", "[".repeat(129))),
            Some(1)
        );
    }
}
