//! The client side of a Streamable HTTP POST, for those that speak to an MCP server as its
//! client (`check --url`, play's live server): the request with its MCP headers, and what the
//! answer's head says.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Uri};
use serde_json::Value;

/// A client message as an MCP POST to `url`: with the session id and the protocol version
/// `initialize` agreed on, or, in the 2026-07-28 era, the headers derived from the body.
pub(crate) fn mcp_post(
    url: &Uri,
    session: Option<&str>,
    protocol: Option<&str>,
    body: Vec<u8>,
) -> Result<Request<Full<Bytes>>, String> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url.clone())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        // Read as JSON and SSE as they come: never compressed (with no Accept-Encoding at
        // all, any coding would be acceptable).
        .header("accept-encoding", "identity");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    // The 2026-07-28 era: the headers must agree with the body (else 400), so they are
    // derived from it; earlier eras send back the version `initialize` agreed on.
    let modern = modern_headers(&body);
    if modern.is_empty() {
        if let Some(p) = protocol {
            req = req.header("mcp-protocol-version", p);
        }
    }
    for (name, value) in modern {
        req = req.header(name, value);
    }
    req.body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())
}

/// What the head of an answer to [`mcp_post`] says: the session id it sets, and whether the
/// body is an SSE stream.
pub(crate) fn answer_head<B>(resp: &hyper::Response<B>) -> (Option<String>, bool) {
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
    let session = header("mcp-session-id").map(str::to_string);
    let sse = header("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
    (session, sse)
}

/// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` for a 2026-07-28 request (one that
/// carries its protocol version in `_meta`); empty for earlier eras.
fn modern_headers(body: &[u8]) -> Vec<(&'static str, String)> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let Some(version) = v
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
    else {
        return Vec::new();
    };
    let mut out = vec![("mcp-protocol-version", version.to_string())];
    if let Some(m) = v.get("method").and_then(Value::as_str) {
        out.push(("mcp-method", m.to_string()));
        let name = match m {
            "tools/call" | "prompts/get" => v.pointer("/params/name"),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                v.pointer("/params/uri")
            }
            _ => None,
        };
        if let Some(n) = name.and_then(Value::as_str) {
            let plain = n.bytes().all(|b| (0x21..0x7f).contains(&b));
            let value = if plain {
                n.to_string()
            } else {
                use base64::Engine as _;
                format!(
                    "=?base64?{}?=",
                    base64::engine::general_purpose::STANDARD.encode(n)
                )
            };
            out.push(("mcp-name", value));
        }
    }
    out
}
