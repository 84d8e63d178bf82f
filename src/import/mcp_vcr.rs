//! mcp-vcr (PyPI `mcp-vcr`): a transcript as its `recorder.py` writes it, YAML (its default) or
//! NDJSON (`--format ndjson`). YAML: `meta: {version, recorded_at, session_id, server_command,
//! protocol_version, client_hint, …}` and `messages: [{t, dir: c2s | s2c, payload}]` (keys
//! sorted: `yaml.safe_dump(sort_keys=True)`). NDJSON: a first line `{"_type": "meta", …}`, then
//! one `{"t", "dir", "payload"}` a line. `t` is milliseconds since the session started.

use super::json::{self, Members};
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
    yaml_doc(p.text).is_ok_and(|d| {
        d.get("meta").is_some_and(Value::is_object)
            && d.get("messages").is_some_and(Value::is_array)
    })
}

fn yaml_doc(text: &str) -> Result<Value, serde_yaml::Error> {
    serde_yaml::from_str(text)
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
    let meta = doc.get("meta").cloned().unwrap_or(Value::Null);
    let Some(items) = doc.get("messages").and_then(Value::as_array) else {
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
        let line = serde_json::to_string(payload).expect("a Value serializes");
        msgs.push(message(
            path,
            &at,
            m.get("t").and_then(Value::as_u64),
            m.get("dir").and_then(Value::as_str),
            line,
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
