//! The HTTP side of play's live server (`--on-miss live --url URL`): each message to it is a
//! POST (with the session id and protocol version it gave, or the 2026-07-28 headers derived
//! from the body), each answer read as JSON or as an SSE stream, every message in it handed
//! on as it arrives.

use crate::transport::sse::SseParser;
use crate::transport::upstream::Upstream;
use crate::wire::codec::one_line;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use serde_json::Value;
use std::borrow::Cow;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the DELETE that ends the live session may take when play ends.
const DELETE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub(crate) struct HttpWire(Arc<Inner>);

struct Inner {
    url: Uri,
    client: Upstream,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    max_message: usize,
}

impl HttpWire {
    pub(crate) fn new(url: &str) -> Result<HttpWire, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(format!("invalid URL {url:?}: not http:// or https://"));
        }
        crate::transport::check_port(&uri).map_err(|why| format!("invalid URL {url:?}: {why}"))?;
        let client = crate::transport::upstream::client(None).map_err(|e| e.to_string())?;
        Ok(HttpWire(Arc::new(Inner {
            url: uri,
            client,
            session: Mutex::new(None),
            protocol: Mutex::new(None),
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
        })))
    }

    /// Learns the protocol version `initialize` agreed on, for the later requests' header.
    pub(crate) fn note_initialized(&self, answer: &[u8]) {
        let v: Value = serde_json::from_slice(answer).unwrap_or(Value::Null);
        if let Some(p) = v["result"].get("protocolVersion").and_then(Value::as_str) {
            *self.0.protocol.lock().expect("protocol lock") = Some(p.to_string());
        }
    }

    /// POSTs one message and hands every message of the answer to `on_msg`, in order.
    pub(crate) async fn post<F, Fut>(&self, body: Vec<u8>, on_msg: F) -> Result<(), String>
    where
        F: Fn(Vec<u8>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let me = &self.0;
        let req = crate::transport::post::mcp_post(
            &me.url,
            me.session.lock().expect("session lock").as_deref(),
            me.protocol.lock().expect("protocol lock").as_deref(),
            body,
        )?;
        let resp = me
            .client
            .request(req)
            .await
            .map_err(|e| format!("{} did not answer: {e}", me.url))?;
        let (sid, sse) = crate::transport::post::answer_head(&resp);
        if let Some(sid) = sid {
            *me.session.lock().expect("session lock") = Some(sid);
        }
        let status = resp.status();
        let mut body = resp.into_body();
        if !sse {
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            if !bytes.trim_ascii().is_empty() && crate::wire::classify(&bytes).kind.is_json() {
                // A pretty-printed answer goes on as one line: a stdio client of play reads
                // one message a line.
                on_msg(one_line(bytes.trim_ascii()).into_owned()).await;
                return Ok(());
            }
            // An empty success is an acknowledgement (a notification's 202). A body that is
            // no message answers nothing: said, rather than leaving the request to wait.
            if status.is_success() && bytes.trim_ascii().is_empty() {
                return Ok(());
            }
            return Err(format!(
                "HTTP {status} with no JSON-RPC message in its body: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ));
        }
        let mut parser = SseParser::new(me.max_message);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("the SSE stream broke: {e}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for block in parser.push_bytes(data) {
                if let Some(payload) = block
                    .event
                    .and_then(|e| e.data)
                    .filter(|d| !d.trim().is_empty())
                {
                    // Several `data:` lines come joined by line breaks: one line, as above.
                    let payload = payload.into_bytes();
                    match one_line(&payload) {
                        Cow::Borrowed(_) => on_msg(Vec::from(payload)).await,
                        Cow::Owned(flat) => on_msg(flat).await,
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the live session (DELETE with its id), as a client would.
    pub(crate) async fn delete(&self) {
        let me = &self.0;
        let Some(sid) = me.session.lock().expect("session lock").clone() else {
            return;
        };
        let req = Request::builder()
            .method(Method::DELETE)
            .uri(me.url.clone())
            .header("mcp-session-id", sid)
            .body(Full::new(Bytes::new()));
        if let Ok(req) = req {
            let _ = tokio::time::timeout(DELETE_TIMEOUT, me.client.request(req)).await;
        }
    }
}
