//! agent-vcr (PyPI `agent-vcr`, format 1.0.0): one JSON document, as its `core/format.py`
//! (`VCRRecording`) and `recorder.py` write it: `format_version`, `metadata: {recorded_at,
//! transport, server_command, server_args, …}` and `session: {initialize_request,
//! initialize_response, capabilities, interactions}`, each interaction `{sequence, timestamp
//! (when the answer came), direction, request, response, notifications, latency_ms}`.
//! Messages are pydantic models dumped with every field, so an absent `params` or the `error`
//! beside a `result` is written as `null`; those nulls were not on the wire and are left out.

use super::json::{self, Members};
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::DEFAULT_SERVER;
use crate::wire::Dir;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::path::Path;

#[derive(Deserialize)]
struct Recording<'a> {
    format_version: String,
    metadata: Metadata,
    #[serde(borrow)]
    session: Session<'a>,
}

#[derive(Deserialize)]
struct Metadata {
    recorded_at: String,
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    server_command: Option<String>,
    #[serde(default)]
    server_args: Vec<String>,
}

#[derive(Deserialize)]
struct Session<'a> {
    #[serde(borrow)]
    initialize_request: &'a RawValue,
    #[serde(borrow)]
    initialize_response: &'a RawValue,
    #[serde(borrow, default)]
    interactions: Vec<Interaction<'a>>,
}

#[derive(Deserialize)]
struct Interaction<'a> {
    timestamp: String,
    #[serde(borrow)]
    request: &'a RawValue,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(borrow, default)]
    notifications: Vec<&'a RawValue>,
    #[serde(default)]
    latency_ms: f64,
}

/// Fields a pydantic dump writes as `null` when the message did not have them.
const REQUEST_NULLS: &[&str] = &["params"];
const RESPONSE_NULLS: &[&str] = &["result", "error"];

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.doc.as_ref().is_some_and(|d| {
        d.get("metadata").is_some_and(|m| m.is_object())
            && d.get("session")
                .and_then(|s| s.get("initialize_request"))
                .is_some()
    })
}

/// A timestamp as agent-vcr writes it (ISO 8601, local time, no zone), in microseconds.
fn micros(path: &Path, at: &str, ts: &str) -> Result<i128, ImportError> {
    let t = humantime::parse_rfc3339_weak(ts)
        .map_err(|e| malformed(path, at, format!("timestamp {ts:?}: {e}")))?;
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Ok(d.as_micros() as i128)
}

fn line(path: &Path, at: &str, raw: &RawValue, nulls: &[&str]) -> Result<String, ImportError> {
    let m: Members<'_> = serde_json::from_str(raw.get()).map_err(|e| {
        malformed(
            path,
            at,
            format!("{}; expected a JSON-RPC message object", json::what(&e)),
        )
    })?;
    Ok(m.to_line(nulls))
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let r: Recording<'_> = super::parse_doc(
        path,
        text,
        "an agent-vcr recording (format_version, metadata, session)",
    )?;
    if !r.format_version.starts_with("1.") {
        return Err(malformed(
            path,
            "format_version",
            format!(
                "{:?}; mcptape reads agent-vcr's format 1.x",
                r.format_version
            ),
        ));
    }
    let start = micros(path, "metadata.recorded_at", &r.metadata.recorded_at)?;
    let mut out = Imported::default();
    let s = &r.session;
    let msg = |dir, t_us, line| Msg {
        server: DEFAULT_SERVER.into(),
        dir,
        t_us,
        line,
    };
    // With no client ever connected agent-vcr writes a placeholder handshake (id 0, empty
    // params, `{"capabilities": {}}`): nothing crossed the wire, nothing is imported.
    let placeholder = s.interactions.is_empty()
        && serde_json::from_str::<serde_json::Value>(s.initialize_response.get())
            .is_ok_and(|v| v.get("result") == Some(&serde_json::json!({"capabilities": {}})));
    if placeholder {
        out.lacks.push("any session: this is agent-vcr's placeholder recording (no client connected), so the tape holds no messages".into());
    } else {
        out.msgs.push(msg(
            Dir::C2S,
            None,
            line(
                path,
                "session.initialize_request",
                s.initialize_request,
                REQUEST_NULLS,
            )?,
        ));
        out.msgs.push(msg(
            Dir::S2C,
            None,
            line(
                path,
                "session.initialize_response",
                s.initialize_response,
                RESPONSE_NULLS,
            )?,
        ));
    }
    let mut unanswered = 0;
    for (i, x) in s.interactions.iter().enumerate() {
        let at = format!("session.interactions[{i}]");
        let answered = micros(path, &at, &x.timestamp)? - start;
        let max = i128::from(super::MAX_T_US);
        if answered.abs() > max {
            return Err(super::out_of_range(
                path,
                &at,
                format!("timestamp {:?}", x.timestamp),
            ));
        }
        let latency_us = x.latency_ms * 1000.0;
        if !(0.0..=super::MAX_T_US as f64).contains(&latency_us) {
            return Err(malformed(
                path,
                &at,
                format!(
                    "latency_ms {} is not a latency (0 to a year of milliseconds)",
                    x.latency_ms
                ),
            ));
        }
        let t_answer = u64::try_from(answered).ok();
        let t_request = u64::try_from(answered - latency_us.round() as i128).ok();
        out.msgs.push(msg(
            Dir::C2S,
            t_request,
            line(path, &at, x.request, REQUEST_NULLS)?,
        ));
        // Notifications are attached to the next answer: they came before it, when exactly is
        // not kept.
        for (j, n) in x.notifications.iter().enumerate() {
            out.msgs.push(msg(
                Dir::S2C,
                t_answer,
                line(path, &format!("{at}.notifications[{j}]"), n, REQUEST_NULLS)?,
            ));
        }
        match x.response {
            Some(resp) if resp.get().trim() != "null" => out.msgs.push(msg(
                Dir::S2C,
                t_answer,
                line(path, &at, resp, RESPONSE_NULLS)?,
            )),
            _ => unanswered += 1,
        }
    }
    let command: Option<Vec<String>> = r.metadata.server_command.as_ref().map(|c| {
        std::iter::once(c.clone())
            .chain(r.metadata.server_args.iter().cloned())
            .collect()
    });
    let mut decl = super::stdio_decl(DEFAULT_SERVER, command);
    if r.metadata.transport.as_deref() == Some("sse") {
        decl.transport = "streamable_http".into();
        decl.command = None;
    }
    out.servers.push(decl);
    out.lacks.extend([
        "the client's notifications (notifications/initialized, cancellations): agent-vcr does not record them".to_string(),
        "server-to-client requests (sampling, elicitation, roots) and the client's answers: agent-vcr drops them, so play cannot re-issue them".to_string(),
        "when server notifications came: agent-vcr attaches them to the next answer, so they are placed just before it".to_string(),
        "the handshake's timing, and the wire bytes: messages are pydantic models re-dumped (nulls for absent fields left out here)".to_string(),
        "lines that were not JSON-RPC, and the server's stderr and exit code".to_string(),
    ]);
    if unanswered > 0 {
        out.lacks.push(format!(
            "the answers to {unanswered} requests: none was recorded"
        ));
    }
    Ok(out)
}
