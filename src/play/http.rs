//! `mcptape play --listen`: serve any tape (recorded over stdio or HTTP) as a Streamable HTTP
//! server. Each `initialize` opens a session with its own id and its own pass over the tape;
//! requests without a session (the stateless 2026-07-28 era) share one. A request whose
//! recorded exchange carried notifications or server requests is answered as an SSE stream
//! (those messages first, the response last); a plain one as `application/json`. Messages tied
//! to no request go out on the session's GET stream.

use super::matcher::{Matcher, Outcome};
use super::serve::{self, PlayReport, ServeOptions, Shared};
use crate::tape::TapeIndex;
use crate::transport::http::{
    accept_until, collect, full, plain, refuse_foreign, ChannelBody, RespBody, StopSignals,
};
use crate::transport::sse;
use crate::wire::rewrite::with_id;
use crate::wire::{classify, Kind};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// Lines of one response stream waiting for the client. Bounded: a client that stops reading
/// holds the exchange back, not memory.
const STREAM_QUEUE: usize = 64;

/// The session id header (case-insensitive on the wire).
const SESSION: &str = "mcp-session-id";

/// The session used by requests that carry no session id.
const STATELESS: &str = "";

struct Session {
    shared: Arc<Shared>,
    matcher: tokio::sync::Mutex<Matcher>,
    /// Client messages so far, for placing standalone messages.
    c2s: AtomicU64,
    next_standalone: Mutex<usize>,
    /// The open GET stream, or messages waiting for one.
    get: Mutex<GetStream>,
}

#[derive(Default)]
struct GetStream {
    tx: Option<mpsc::Sender<Bytes>>,
    waiting: VecDeque<Vec<u8>>,
}

enum Answer {
    Exchange(usize, Option<String>),
    Now(String),
}

struct Player {
    /// Serve the older HTTP+SSE transport (2024-11-05) instead of Streamable HTTP.
    legacy: bool,
    index: Arc<TapeIndex>,
    opts: ServeOptions,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Every open session, for the final report (a deleted one is folded into `done`).
    all: Mutex<Vec<Arc<Session>>>,
    /// The reports of deleted sessions, and which exchanges they used.
    done: Mutex<(PlayReport, Vec<bool>)>,
    /// One redactor for every session's miss explanations (it is costly to build).
    display: Option<Arc<crate::redact::Redactor>>,
    local_port: u16,
}

/// Serves until SIGINT/SIGTERM, then returns the combined report of every session.
pub fn serve_http(
    index: TapeIndex,
    opts: ServeOptions,
    listen: SocketAddr,
    legacy: bool,
    on_ready: impl FnOnce(&str),
) -> std::io::Result<PlayReport> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let local = listener.local_addr()?;
        let path = index
            .servers
            .first()
            .and_then(|s| s.url.as_deref())
            .and_then(|u| u.parse::<hyper::Uri>().ok())
            .map(|u| u.path().to_string())
            .filter(|p| p != "/")
            .unwrap_or_else(|| "/mcp".into());
        let path = if legacy { "/sse".to_string() } else { path };
        let display = crate::redact::Redactor::for_config(&opts.display_rules).map(Arc::new);
        let used = vec![false; index.exchanges.len()];
        let player = Arc::new(Player {
            index: Arc::new(index),
            opts,
            done: Mutex::new((PlayReport::default(), used)),
            display,
            sessions: Mutex::new(HashMap::new()),
            all: Mutex::new(Vec::new()),
            local_port: local.port(),
            legacy,
        });
        let mut signals = StopSignals::new()?;
        on_ready(&format!("http://{local}{path}"));
        let handler = {
            let player = player.clone();
            move |req| {
                let player = player.clone();
                async move { player.handle(req).await }
            }
        };
        let (_, mut connections) = accept_until(&listener, handler, signals.recv()).await;
        connections.abort_all();
        Ok(player.report())
    })
}

impl Player {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        if let Some(why) = refuse_foreign(req.headers(), self.local_port) {
            return plain(StatusCode::FORBIDDEN, &why);
        }
        if self.legacy {
            return self.handle_legacy(req).await;
        }
        let session_id = req
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match *req.method() {
            Method::POST => {
                let max = self.opts.max_message;
                let body = match collect(req.into_body(), max).await {
                    Ok(b) => b,
                    Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
                };
                self.post(session_id, body).await
            }
            Method::GET => match self.session(session_id.as_deref()) {
                Some(s) => {
                    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                    let waiting: Vec<Vec<u8>> = {
                        let mut get = s.get.lock().expect("get lock");
                        get.tx = Some(tx.clone());
                        get.waiting.drain(..).collect()
                    };
                    for line in waiting {
                        let _ = tx
                            .send(Bytes::from(sse::encode(
                                Some("message"),
                                None,
                                trim_nl(&line),
                            )))
                            .await;
                    }
                    sse_response(rx)
                }
                None => plain(StatusCode::NOT_FOUND, "mcptape: unknown session"),
            },
            Method::DELETE => {
                let removed = session_id
                    .as_deref()
                    .and_then(|id| self.sessions.lock().expect("sessions lock").remove(id));
                match removed {
                    Some(s) => {
                        s.shared.closed.send_replace(true);
                        self.retire(&s);
                        plain(StatusCode::OK, "")
                    }
                    None => plain(StatusCode::NOT_FOUND, "mcptape: unknown session"),
                }
            }
            _ => plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "mcptape play: POST, GET or DELETE",
            ),
        }
    }

    async fn post(&self, session_id: Option<String>, body: Bytes) -> Response<RespBody> {
        let c = classify(&body);
        let is_init = c.kind == Kind::Request && c.method.as_deref() == Some("initialize");
        let (session, new_id) = if is_init {
            let id = crate::transport::http::session_id();
            (self.open_session(&id), Some(id))
        } else {
            match self.session(session_id.as_deref()) {
                Some(s) => (s, None),
                None => return plain(
                    StatusCode::NOT_FOUND,
                    "mcptape play: unknown session id (the session was deleted, or play restarted)",
                ),
            }
        };
        let count = session.c2s.fetch_add(1, Ordering::Relaxed) + 1;
        let response = match c.kind {
            Kind::Request => {
                self.request(
                    &session,
                    &body,
                    c.id.unwrap_or_default(),
                    c.method.unwrap_or_default(),
                )
                .await
            }
            Kind::Response | Kind::Error => {
                let id = c.id.unwrap_or_else(|| "null".into());
                match session.shared.pending.lock().expect("pending lock").remove(&id) {
                    Some(tx) => {
                        let _ = tx.send(body.to_vec());
                    }
                    None => crate::diag!("mcptape play: the client answered a request mcptape did not send (id {id})"),
                }
                plain(StatusCode::ACCEPTED, "")
            }
            Kind::Notification => plain(StatusCode::ACCEPTED, ""),
            _ => {
                let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32700, "message": "Parse error"}});
                full(StatusCode::BAD_REQUEST, "application/json", msg.to_string())
            }
        };
        self.emit_standalone(&session, count).await;
        let mut response = response;
        if let Some(id) = new_id {
            if let Ok(v) = HeaderValue::from_str(&id) {
                response.headers_mut().insert(SESSION, v);
            }
        }
        response
    }

    /// What answers a request: a recorded exchange to replay, or one line right away (a miss
    /// explained, an unrecorded ping).
    async fn answer(&self, session: &Arc<Session>, body: &[u8], id: &str, method: &str) -> Answer {
        let params = crate::tape::index::params_of(body);
        let token = crate::tape::index::progress_token(params.as_ref(), true);
        let outcome = session.matcher.lock().await.take(
            &self.index,
            method,
            params.as_ref(),
            self.opts.lenient,
        );
        match outcome {
            Outcome::Hit(ex) => Answer::Exchange(ex, token),
            Outcome::Lenient(ex, miss) => {
                let line = self.index.msgs[self.index.exchanges[ex].request].line;
                crate::diag!(
                    "mcptape play: --lenient: served tape line {line} instead.\n{}",
                    miss.render(id).trim_end()
                );
                session.shared.report.lock().expect("report lock").lenient += 1;
                Answer::Exchange(ex, token)
            }
            Outcome::Miss(_) if method == "ping" => {
                Answer::Now(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
            }
            Outcome::Miss(miss) => {
                crate::diag!("mcptape play: {}", miss.render(id).trim_end());
                let msg =
                    json!({"jsonrpc": "2.0", "id": Value::Null, "error": miss.error_object()});
                let text = with_id(&msg.to_string(), id).unwrap_or_default();
                let mut r = session.shared.report.lock().expect("report lock");
                r.missed += 1;
                r.misses.push(miss);
                Answer::Now(text)
            }
        }
    }

    async fn request(
        &self,
        session: &Arc<Session>,
        body: &[u8],
        id: String,
        method: String,
    ) -> Response<RespBody> {
        let (ex, token) = match self.answer(session, body, &id, &method).await {
            Answer::Exchange(ex, token) => (ex, token),
            Answer::Now(line) => return full(StatusCode::OK, "application/json", line),
        };
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(STREAM_QUEUE);
        let shared = session.shared.clone();
        // SSE when the recording answered over SSE, or the exchange carries more than its answer.
        let exchange = &self.index.exchanges[ex];
        let streamed = !exchange.during.is_empty()
            || exchange.response.is_some_and(|r| self.index.msgs[r].sse);
        tokio::spawn(async move {
            serve::serve_exchange(&shared, &tx, ex, &id, token.as_deref()).await
        });
        if !streamed {
            // One answer: as JSON. (A recorded request without an answer gets play's error.)
            return match rx.recv().await {
                Some(line) => full(
                    StatusCode::OK,
                    "application/json",
                    Bytes::from(trim_nl(&line).to_string()),
                ),
                None => plain(StatusCode::ACCEPTED, ""),
            };
        }
        // The exchange's notifications and server requests, then its response, as SSE events.
        let (btx, brx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if btx
                    .send(Bytes::from(sse::encode(
                        Some("message"),
                        None,
                        trim_nl(&line),
                    )))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        sse_response(brx)
    }

    /// HTTP+SSE (2024-11-05): GET opens a session's event stream, whose first event names the
    /// URL to POST to; every POST is answered 202 and its answers go out on that stream.
    async fn handle_legacy(&self, req: Request<Incoming>) -> Response<RespBody> {
        match *req.method() {
            Method::GET => {
                let id = crate::transport::http::session_id();
                let session = self.open_session(&id);
                let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                let endpoint = format!("/message?sessionId={id}");
                let _ = tx
                    .send(Bytes::from(sse::encode(Some("endpoint"), None, &endpoint)))
                    .await;
                session.get.lock().expect("get lock").tx = Some(tx);
                sse_response(rx)
            }
            Method::POST => {
                let id = req
                    .uri()
                    .query()
                    .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("sessionId=")))
                    .map(str::to_string);
                let Some(session) = id.as_deref().and_then(|id| {
                    self.sessions
                        .lock()
                        .expect("sessions lock")
                        .get(id)
                        .cloned()
                }) else {
                    return plain(StatusCode::NOT_FOUND, "mcptape play: unknown sessionId");
                };
                let body = match collect(req.into_body(), self.opts.max_message).await {
                    Ok(b) => b,
                    Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
                };
                let count = session.c2s.fetch_add(1, Ordering::Relaxed) + 1;
                let c = classify(&body);
                match c.kind {
                    Kind::Request => {
                        let (id, method) = (c.id.unwrap_or_default(), c.method.unwrap_or_default());
                        match self.answer(&session, &body, &id, &method).await {
                            Answer::Now(line) => {
                                serve::send(&session.shared.out, line.into_bytes()).await
                            }
                            Answer::Exchange(ex, token) => {
                                let shared = session.shared.clone();
                                tokio::spawn(async move {
                                    serve::serve_exchange(
                                        &shared,
                                        &shared.out,
                                        ex,
                                        &id,
                                        token.as_deref(),
                                    )
                                    .await
                                });
                            }
                        }
                    }
                    Kind::Response | Kind::Error => {
                        let id = c.id.unwrap_or_else(|| "null".into());
                        if let Some(tx) = session
                            .shared
                            .pending
                            .lock()
                            .expect("pending lock")
                            .remove(&id)
                        {
                            let _ = tx.send(body.to_vec());
                        }
                    }
                    _ => {}
                }
                self.emit_standalone(&session, count).await;
                plain(StatusCode::ACCEPTED, "Accepted")
            }
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "mcptape play: GET or POST"),
        }
    }

    /// Messages the recording had tied to no request, at the same point of the conversation.
    async fn emit_standalone(&self, session: &Arc<Session>, point: u64) {
        loop {
            let due = {
                let mut next = session.next_standalone.lock().expect("standalone lock");
                match self
                    .index
                    .standalone
                    .get(*next)
                    .filter(|s| s.point <= point)
                {
                    Some(s) => {
                        *next += 1;
                        s.clone()
                    }
                    None => break,
                }
            };
            let meta = self.index.msgs[due.msg].clone();
            match meta.kind {
                Kind::Request => {
                    let shared = session.shared.clone();
                    tokio::spawn(async move {
                        serve::server_request(&shared, &shared.out, &meta, due.client_answer).await
                    });
                }
                Kind::Response | Kind::Error => {}
                _ => {
                    if let Ok(bytes) = self.index.read_bytes(&meta) {
                        serve::send(&session.shared.out, bytes).await;
                    }
                }
            }
        }
    }

    fn session(&self, id: Option<&str>) -> Option<Arc<Session>> {
        let sessions = self.sessions.lock().expect("sessions lock");
        match id {
            Some(id) => sessions.get(id).cloned(),
            None => {
                if let Some(s) = sessions.get(STATELESS) {
                    return Some(s.clone());
                }
                drop(sessions);
                Some(self.open_session(STATELESS))
            }
        }
    }

    fn open_session(&self, id: &str) -> Arc<Session> {
        // The session's own messages (standalone ones, server requests tied to no request)
        // go to its GET stream, or wait for one.
        let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(STREAM_QUEUE);
        let session = Arc::new(Session {
            shared: Arc::new(Shared {
                index: self.index.clone(),
                out,
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                closed: watch::channel(false).0,
                report: Mutex::new(PlayReport::default()),
                opts: self.opts.clone(),
                bodies: Default::default(),
            }),
            matcher: tokio::sync::Mutex::new(Matcher::with_display(
                &self.index,
                self.display.clone(),
            )),
            c2s: AtomicU64::new(0),
            next_standalone: Mutex::new(0),
            get: Mutex::new(GetStream::default()),
        });
        let weak = Arc::downgrade(&session);
        tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                let Some(s) = weak.upgrade() else { break };
                let tx = {
                    let mut get = s.get.lock().expect("get lock");
                    match &get.tx {
                        Some(tx) if !tx.is_closed() => Some(tx.clone()),
                        _ => {
                            get.tx = None;
                            get.waiting.push_back(line.clone());
                            None
                        }
                    }
                };
                if let Some(tx) = tx {
                    let _ = tx
                        .send(Bytes::from(sse::encode(
                            Some("message"),
                            None,
                            trim_nl(&line),
                        )))
                        .await;
                }
            }
        });
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(id.to_string(), session.clone());
        self.all.lock().expect("all lock").push(session.clone());
        session
    }

    /// Every session's report added up, with the exchanges no session used.
    fn report(&self) -> PlayReport {
        let (mut total, mut used) = {
            let done = self.done.lock().expect("done lock");
            (clone_report(&done.0), done.1.clone())
        };
        for s in self.all.lock().expect("all lock").iter() {
            fold(&mut total, &mut used, s);
        }
        total.unused = (0..used.len())
            .filter(|&i| !used[i])
            .map(|i| {
                let req = &self.index.msgs[self.index.exchanges[i].request];
                super::serve::Unused {
                    line: req.line,
                    what: self.index.describe_request(req),
                }
            })
            .collect();
        total
    }

    /// A deleted session's report joins the total, and the session itself goes.
    fn retire(&self, session: &Arc<Session>) {
        self.all
            .lock()
            .expect("all lock")
            .retain(|s| !Arc::ptr_eq(s, session));
        let mut done = self.done.lock().expect("done lock");
        let (total, used) = &mut *done;
        fold(total, used, session);
    }
}

fn sse_response(rx: mpsc::Receiver<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(ChannelBody { rx }.boxed());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    r
}

fn trim_nl(line: &[u8]) -> &str {
    let s = std::str::from_utf8(line).unwrap_or("");
    s.trim_end_matches(['\n', '\r'])
}

/// Adds a session's report and the exchanges it used to a running total.
fn fold(total: &mut PlayReport, used: &mut [bool], s: &Session) {
    let r = s.shared.report.lock().expect("report lock");
    total.served += r.served;
    total.missed += r.missed;
    total.lenient += r.lenient;
    total.drifted += r.drifted;
    total.rejected += r.rejected;
    total.unanswered += r.unanswered;
    total.misses.extend(r.misses.iter().cloned());
    total.drifts.extend(r.drifts.iter().cloned());
    if let Ok(m) = s.matcher.try_lock() {
        let unused: std::collections::HashSet<usize> = m.unused().into_iter().collect();
        for (i, u) in used.iter_mut().enumerate() {
            if !unused.contains(&i) {
                *u = true;
            }
        }
    }
}

fn clone_report(r: &PlayReport) -> PlayReport {
    PlayReport {
        served: r.served,
        missed: r.missed,
        lenient: r.lenient,
        drifted: r.drifted,
        misses: r.misses.clone(),
        drifts: r.drifts.clone(),
        unused: Vec::new(),
        rejected: r.rejected,
        unanswered: r.unanswered,
    }
}
