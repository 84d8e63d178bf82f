//! Drives a live Streamable HTTP server with a recording's client side, as the stdio driver does
//! over pipes: each client message is a POST (the session id and protocol version the server
//! gave are sent back), answers are read as JSON or as an SSE stream, server requests arriving
//! on a stream are answered with the client's recorded answers, and everything is taped.

use super::driver::{plan, with_request_state, DriveOutcome, RecordedAnswers, Step};
use crate::tape::index::params_of;
use crate::tape::{ServerDecl, TapeIndex, TapeWriter, WriteOptions, DEFAULT_SERVER};
use crate::transport::sse::SseParser;
use crate::wire::canonical::canonical;
use crate::wire::rewrite::with_id;
use crate::wire::{classify, Dir, Frame, Kind, Line};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
pub enum HttpDriveError {
    #[error("invalid server URL {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("could not write the observed tape {}: {cause}", path.display())]
    Tape { path: PathBuf, cause: io::Error },
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

struct Ctx {
    url: Uri,
    client: HttpClient,
    tape: Mutex<Option<TapeWriter>>,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    answers: Mutex<RecordedAnswers>,
    /// Per baseline exchange: answered (or given up on).
    done: Mutex<Vec<bool>>,
    missing: Mutex<HashMap<usize, String>>,
    states: Mutex<HashMap<(String, Option<String>), String>>,
    changed: Notify,
    unreachable: Mutex<Option<String>>,
    timeout: Duration,
}

pub fn drive_http(
    base: &TapeIndex,
    url: &str,
    timeout: Duration,
    observed: &std::path::Path,
    redact: &crate::redact::RedactConfig,
    filler: &super::fill::Filler,
) -> Result<DriveOutcome, HttpDriveError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| HttpDriveError::Url {
            url: url.into(),
            why: e.to_string(),
        })?;
    if uri.scheme_str() != Some("http") {
        return Err(HttpDriveError::Url {
            url: url.into(),
            why: "only http:// URLs are supported".into(),
        });
    }
    let tape_err = |cause| HttpDriveError::Tape {
        path: observed.to_path_buf(),
        cause,
    };
    let mut writer = TapeWriter::create(
        observed,
        WriteOptions {
            redactor: crate::redact::Redactor::for_config(redact),
            signing_key: None,
        },
    )
    .map_err(tape_err)?;
    writer
        .declare_server(ServerDecl {
            server: DEFAULT_SERVER.into(),
            transport: "streamable_http".into(),
            command: None,
            cwd: None,
            url: Some(url.into()),
            t_us: 0,
        })
        .map_err(tape_err)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(tape_err)?;
    let ctx = Arc::new(Ctx {
        url: uri,
        client: Client::builder(TokioExecutor::new()).build_http(),
        tape: Mutex::new(Some(writer)),
        session: Mutex::new(None),
        protocol: Mutex::new(None),
        answers: Mutex::new(RecordedAnswers::new(base)),
        done: Mutex::new(vec![false; base.exchanges.len()]),
        missing: Mutex::new(HashMap::new()),
        states: Mutex::new(HashMap::new()),
        changed: Notify::new(),
        unreachable: Mutex::new(None),
        timeout,
    });
    let steps = plan(base);
    let mut by_answer: Vec<(usize, usize)> = base
        .exchanges
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.response.map(|r| (r, i)))
        .collect();
    by_answer.sort_unstable();
    rt.block_on(async {
        let mut answered_before = 0;
        let mut next_id = 1u64;
        let mut tasks = tokio::task::JoinSet::new();
        for step in steps {
            let at = match step {
                Step::Request { msg, .. } | Step::Notification { msg } => msg,
            };
            while answered_before < by_answer.len() && by_answer[answered_before].0 < at {
                let ex = by_answer[answered_before].1;
                ctx.wait_done(ex).await;
                answered_before += 1;
            }
            let meta = &base.msgs[at];
            let Ok(bytes) = base.read_bytes(meta) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match step {
                Step::Request { exchange, .. } => {
                    let text = filler.fill(&text);
                    let id = next_id.to_string();
                    next_id += 1;
                    let mut out = with_id(&text, &id).unwrap_or(text);
                    let key = (
                        meta.method.clone().unwrap_or_default(),
                        base.call_target(meta),
                    );
                    if let Some(state) = ctx.states.lock().expect("states").get(&key) {
                        out = with_request_state(&out, state).unwrap_or(out);
                    }
                    let ctx = ctx.clone();
                    tasks.spawn(async move {
                        let result =
                            tokio::time::timeout(ctx.timeout, ctx.clone().request(out, key)).await;
                        let why = match result {
                            Ok(Ok(())) => None,
                            Ok(Err(why)) => Some(why),
                            Err(_) => Some(format!("no answer within {:?}", ctx.timeout)),
                        };
                        if let Some(why) = why {
                            ctx.missing.lock().expect("missing").insert(exchange, why);
                        }
                        ctx.done.lock().expect("done")[exchange] = true;
                        ctx.changed.notify_waiters();
                    });
                }
                Step::Notification { .. } => {
                    let _ = ctx.post(text.into_bytes()).await;
                }
            }
        }
        while tasks.join_next().await.is_some() {}
        // End the session, as a client would.
        let session = ctx.session.lock().expect("session").clone();
        if let Some(sid) = session {
            let req = Request::builder()
                .method(Method::DELETE)
                .uri(ctx.url.clone())
                .header("mcp-session-id", sid)
                .body(Full::new(Bytes::new()));
            if let Ok(req) = req {
                let _ = tokio::time::timeout(Duration::from_secs(5), ctx.client.request(req)).await;
            }
        }
    });
    drop(rt);
    let writer = ctx.tape.lock().expect("tape").take().expect("taken once");
    writer
        .finish(None, Some("mcptape check finished".into()))
        .map_err(tape_err)?;
    let run_error = ctx.unreachable.lock().expect("unreachable").clone();
    let missing = std::mem::take(&mut *ctx.missing.lock().expect("missing"));
    Ok(DriveOutcome {
        missing,
        run_error,
        exit: None,
    })
}

impl Ctx {
    async fn wait_done(&self, ex: usize) {
        loop {
            let notified = self.changed.notified();
            if self.done.lock().expect("done")[ex] {
                return;
            }
            notified.await;
        }
    }

    fn tape(&self, dir: Dir, bytes: &[u8]) {
        let line = Line {
            bytes,
            crlf: false,
            unterminated: false,
            bom: false,
        };
        if let Some(w) = self.tape.lock().expect("tape").as_mut() {
            w.message(DEFAULT_SERVER, dir, &Frame::Line(line), Instant::now());
            let _ = w.commit();
        }
    }

    /// POSTs one client message; returns the HTTP response.
    async fn post(&self, body: Vec<u8>) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        self.tape(Dir::C2S, &body);
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = self.session.lock().expect("session").as_deref() {
            req = req.header("mcp-session-id", s);
        }
        // The 2026-07-28 era: the headers must agree with the body (else 400), so they are
        // derived from it; earlier eras send back the version `initialize` agreed on.
        let modern = modern_headers(&body);
        if modern.is_empty() {
            if let Some(p) = self.protocol.lock().expect("protocol").as_deref() {
                req = req.header("mcp-protocol-version", p);
            }
        }
        for (name, value) in modern {
            req = req.header(name, value);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        match self.client.request(req).await {
            Ok(r) => Ok(r),
            Err(e) => {
                let why = format!("the server at {} did not answer: {e}", self.url);
                self.unreachable
                    .lock()
                    .expect("unreachable")
                    .get_or_insert(why.clone());
                Err(why)
            }
        }
    }

    /// Sends a request and reads its answer, answering server requests on the way.
    async fn request(
        self: Arc<Self>,
        message: String,
        key: (String, Option<String>),
    ) -> Result<(), String> {
        let resp = self.post(message.into_bytes()).await?;
        if let Some(sid) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            *self.session.lock().expect("session") = Some(sid.to_string());
        }
        let status = resp.status();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        if !sse {
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            if bytes.is_empty() {
                return Err(format!("HTTP {status} with no answer"));
            }
            self.tape(Dir::S2C, &bytes);
            if !status.is_success() && classify(&bytes).id.is_none() {
                // An HTTP-level refusal not tied to the request (id null): say what it was.
                return Err(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                ));
            }
            self.note(&bytes, &key);
            return Ok(());
        }
        let mut parser = SseParser::new(64 * 1024 * 1024);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("the SSE stream broke: {e}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for block in parser.push(&data) {
                let Some(payload) = block
                    .event
                    .and_then(|e| e.data)
                    .filter(|d| !d.trim().is_empty())
                else {
                    continue;
                };
                self.tape(Dir::S2C, payload.as_bytes());
                let c = classify(payload.as_bytes());
                match c.kind {
                    Kind::Response | Kind::Error => {
                        self.note(payload.as_bytes(), &key);
                        return Ok(());
                    }
                    Kind::Request => {
                        let method = c.method.unwrap_or_default();
                        let params = params_of(payload.as_bytes())
                            .map(|p| canonical(&p))
                            .unwrap_or_default();
                        let id = c.id.unwrap_or_else(|| "null".into());
                        let recorded = self.answers.lock().expect("answers").take(&method, &params);
                        let reply = recorded.and_then(|t| with_id(&t, &id).ok()).unwrap_or_else(|| {
                            let msg = serde_json::json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32601, "message": format!("mcptape check: the recording has no client answer to {method}")}});
                            with_id(&msg.to_string(), &id).unwrap_or_default()
                        });
                        let _ = self.post(reply.into_bytes()).await;
                    }
                    _ => {}
                }
            }
        }
        Err("the SSE stream ended without an answer".into())
    }

    /// Learns from an answer: the protocol version (from initialize) and a multi-round-trip state.
    fn note(&self, bytes: &[u8], key: &(String, Option<String>)) {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        let result = &v["result"];
        if let Some(p) = result.get("protocolVersion").and_then(Value::as_str) {
            *self.protocol.lock().expect("protocol") = Some(p.to_string());
        }
        if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
            if let Some(state) = result.get("requestState") {
                self.states
                    .lock()
                    .expect("states")
                    .insert(key.clone(), canonical(state));
            }
        }
    }
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
