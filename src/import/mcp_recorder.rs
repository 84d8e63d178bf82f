//! mcp-recorder (PyPI `mcp-recorder`, cassette version 1.x): one JSON document, as its
//! `_utils.save_cassette` writes: `version`, `metadata: {recorded_at, server_url,
//! transport_type, protocol_version, server_info}` and `interactions`, each `{type:
//! jsonrpc_request | notification | lifecycle, request, response, response_is_sse,
//! response_status, latency_ms, http_method, http_path}`.

use super::json::{self, Members};
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::{ServerDecl, DEFAULT_SERVER};
use crate::wire::Dir;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::path::Path;

#[derive(Deserialize)]
struct Cassette<'a> {
    version: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(borrow)]
    interactions: Vec<Interaction<'a>>,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    server_url: String,
    #[serde(default)]
    transport_type: Option<String>,
}

#[derive(Deserialize)]
struct Interaction<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(default)]
    response_is_sse: bool,
    #[serde(default)]
    latency_ms: u64,
}

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.doc.as_ref().is_some_and(|d| {
        d.get("version").is_some_and(|v| v.is_string())
            && d.get("metadata").is_some_and(|m| m.is_object())
            && d.get("interactions").is_some_and(|i| i.is_array())
    })
}

/// A message body from the cassette, or `None` for `null` (or an object that is not JSON-RPC:
/// the proxy's own `{"error": "Transport error…"}`).
fn message(raw: Option<&RawValue>) -> Option<String> {
    let raw = raw?;
    let m: Members<'_> = serde_json::from_str(raw.get()).ok()?;
    m.get("jsonrpc")?;
    Some(json::compact(raw.get()))
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let c: Cassette<'_> = super::parse_doc(
        path,
        text,
        "an mcp-recorder cassette (version, metadata, interactions[…])",
    )?;
    if !c.version.starts_with("1.") {
        return Err(malformed(
            path,
            "version",
            format!(
                "cassette version {:?}; mcptape reads mcp-recorder's version 1.x",
                c.version
            ),
        ));
    }
    let mut out = Imported::default();
    let (mut t, mut lifecycle, mut unanswered, mut sse) = (0u64, 0, 0, 0);
    for (i, x) in c.interactions.iter().enumerate() {
        let at = format!("interactions[{i}]");
        match x.kind.as_str() {
            "lifecycle" => {
                lifecycle += 1;
                continue;
            }
            "jsonrpc_request" | "notification" => {}
            other => {
                return Err(malformed(
                    path,
                    at,
                    format!("type {other:?}; expected jsonrpc_request, notification or lifecycle"),
                ))
            }
        }
        let Some(request) = message(x.request) else {
            return Err(malformed(path, at, "no JSON-RPC request object"));
        };
        out.msgs.push(Msg {
            server: DEFAULT_SERVER.into(),
            dir: Dir::C2S,
            t_us: Some(super::ms_to_us(path, &at, "the sum of latency_ms", t)?),
            line: request,
        });
        t = t.saturating_add(x.latency_ms);
        if x.kind == "jsonrpc_request" {
            match message(x.response) {
                Some(answer) => out.msgs.push(Msg {
                    server: DEFAULT_SERVER.into(),
                    dir: Dir::S2C,
                    t_us: Some(super::ms_to_us(path, &at, "the sum of latency_ms", t)?),
                    line: answer,
                }),
                None => unanswered += 1,
            }
            sse += usize::from(x.response_is_sse);
        }
    }
    let http = c.metadata.transport_type.as_deref() != Some("stdio")
        && c.metadata.server_url.starts_with("http");
    out.servers.push(if http {
        ServerDecl::http(DEFAULT_SERVER, c.metadata.server_url.clone())
    } else {
        super::stdio_decl(DEFAULT_SERVER, None)
    });
    out.lacks.extend([
        "the time between calls: mcp-recorder keeps only each call's latency (whole milliseconds), so the calls are placed back to back".to_string(),
        "server notifications and server-to-client requests (sampling, elicitation, roots) with the client's answers: mcp-recorder keeps one answer per request".to_string(),
        "the wire bytes (messages are decoded and re-encoded), the HTTP facts (session ids, headers), and the server's command line, stderr and exit code".to_string(),
    ]);
    if sse > 0 {
        out.lacks.push(format!("all but the first event of {sse} SSE answers: mcp-recorder keeps the first event as the answer"));
    }
    if lifecycle > 0 {
        out.lacks.push(format!("{lifecycle} HTTP lifecycle interactions (GET streams, DELETE): skipped, they hold no message"));
    }
    if unanswered > 0 {
        out.lacks.push(format!("the answers to {unanswered} requests: none was recorded (play will not answer those requests)"));
    }
    Ok(out)
}
