//! `mcptape play --listen`: serve any tape (recorded over stdio or HTTP) as a Streamable HTTP
//! server. Each `initialize` opens a session with its own id and its own pass over the tape;
//! requests without a session (the stateless 2026-07-28 era) share one. A request whose
//! recorded exchange carried notifications or server requests is answered as an SSE stream
//! (those messages first, the response last); a plain one as `application/json`. Messages tied
//! to no request go out on the session's GET stream.

use super::faults::FaultKind;
use super::framing::{Framing, OutLine, OwnStream};
use super::matcher::{Matcher, Outcome};
use super::plan::Verdict;
use super::serve::{self, PlayReport, ServeOptions, Shared, Sink};
use crate::tape::TapeIndex;
use crate::transport::http::{accept_until, collect, full, plain, ChannelBody, RespBody};
use crate::transport::sse;
use crate::wire::rewrite::with_id;
use crate::wire::{classify, Kind};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// Lines of one response stream waiting for the client. Bounded: a client that stops reading
/// holds the exchange back, not memory.
const STREAM_QUEUE: usize = 64;

/// Sessions open at once, unless told otherwise ([`ServeOptions::max_sessions`]). A session
/// lives until its client deletes it, so a client that initializes in a loop would otherwise
/// grow memory without end (some 12 KiB a session); past the cap an `initialize` (or a legacy
/// GET) gets `503`. A real client opens one; the load tests a thousand at once.
pub const MAX_SESSIONS: usize = 10_000;

/// How long a session may go without a request, and with no GET stream open, unless told
/// otherwise ([`ServeOptions::session_idle`]): then it is closed as a `DELETE` would close it
/// (its report kept for the summary) and its id gets `404`, which tells a client to initialize
/// again. A client that vanishes without `DELETE` (most do) would otherwise hold its session
/// until play ends. An hour: longer than a person leaves an IDE's agent idle between calls.
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The session id header (case-insensitive on the wire).
const SESSION: &str = "mcp-session-id";

/// The session used by requests that carry no session id.
const STATELESS: &str = "";

struct Session {
    /// Its `Mcp-Session-Id` (empty: the stateless session; a legacy session's `sessionId`).
    id: Box<str>,
    shared: Arc<Shared>,
    matcher: tokio::sync::Mutex<Matcher>,
    /// Client messages so far, for placing standalone messages.
    c2s: AtomicU64,
    /// The recorded session this one replays (chosen by its `initialize`): its exchanges are
    /// taken first, and its standalone messages are this session's.
    recorded: Mutex<Option<u32>>,
    /// Where this session is in the standalone messages of its recorded session.
    next_standalone: Mutex<usize>,
    /// The open GET stream, or messages waiting for one.
    get: Mutex<GetStream>,
    /// Streams closed as the recording closed them, by the event ids a GET may resume from.
    resumes: Mutex<HashMap<String, Arc<Mutex<Option<Resume>>>>>,
    /// When its client last sent a request.
    last_seen: Mutex<tokio::time::Instant>,
}

impl Session {
    /// Whether it has gone `idle` without a request and has no GET stream open.
    fn idle_for(&self, idle: std::time::Duration, now: tokio::time::Instant) -> bool {
        let streaming = self
            .get
            .lock()
            .expect("get lock")
            .tx
            .as_ref()
            .is_some_and(|tx| !tx.is_closed());
        !streaming && now.duration_since(*self.last_seen.lock().expect("seen lock")) >= idle
    }
}

/// What a request's stream carries from `serve_exchange`: a line, and before a recorded one,
/// how the recording framed it.
enum StreamItem {
    Line(Vec<u8>),
    Recorded(Framing),
}

/// The sink of one request's stream.
struct StreamSink(mpsc::Sender<StreamItem>);

impl serve::Sink for StreamSink {
    fn emit(&self, mut line: Vec<u8>) -> impl std::future::Future<Output = ()> + Send {
        line.push(b'\n');
        let tx = self.0.clone();
        async move {
            let _ = tx.send(StreamItem::Line(line)).await;
        }
    }

    fn before(
        &self,
        recorded: &crate::tape::index::MsgMeta,
    ) -> impl std::future::Future<Output = ()> + Send {
        let item = StreamItem::Recorded(Framing::of(recorded));
        let tx = self.0.clone();
        async move {
            let _ = tx.send(item).await;
        }
    }

    /// The client left: the stream's reader is gone.
    fn gone(&self) -> impl std::future::Future<Output = ()> + Send {
        let tx = self.0.clone();
        async move { tx.closed().await }
    }
}

/// The rest of an exchange whose stream the recording closed, for the GET that resumes it.
struct Resume {
    priming: Option<crate::tape::index::SsePriming>,
    rx: mpsc::Receiver<Bytes>,
}

impl Session {
    /// Keeps the rest of an exchange for a GET resuming from any of the event ids sent so far.
    fn offer_resume(
        &self,
        ids: &[String],
        priming: Option<crate::tape::index::SsePriming>,
        rx: mpsc::Receiver<Bytes>,
    ) {
        let slot = Arc::new(Mutex::new(Some(Resume { priming, rx })));
        let mut resumes = self.resumes.lock().expect("resumes lock");
        for id in ids {
            resumes.insert(id.clone(), slot.clone());
        }
    }

    fn take_resume(&self, last_event_id: &str) -> Option<Resume> {
        let slot = self
            .resumes
            .lock()
            .expect("resumes lock")
            .remove(last_event_id)?;
        let r = slot.lock().expect("resume lock").take();
        r
    }
}

/// An SSE priming event: an id, a `retry:` hint, empty data.
fn priming_event(p: &crate::tape::index::SsePriming) -> Vec<u8> {
    let mut out = format!("id: {}\n", p.id);
    if let Some(r) = p.retry {
        out.push_str(&format!("retry: {r}\n"));
    }
    out.push_str("data: \n\n");
    out.into_bytes()
}

#[derive(Default)]
struct GetStream {
    tx: Option<mpsc::Sender<Bytes>>,
    /// The stream a GET opened, from the moment it was answered (`tx` is set only once the
    /// backlog is out): weak, so that it keeps no stream open; a second GET while it lives
    /// is refused, as the reference servers refuse it.
    opened: Option<mpsc::WeakSender<Bytes>>,
    /// Events waiting for a GET stream, framed.
    waiting: crate::transport::http::Backlog<Bytes>,
}

enum Answer {
    Exchange(usize, Option<String>),
    Now(String),
    /// From the live server; appended to the tape when true (a miss).
    Live(bool),
}

/// What a live request's routing headers hash to (as `record --url` taped them).
pub(crate) fn routing_of(headers: &hyper::HeaderMap) -> u64 {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let params: std::collections::BTreeMap<String, String> = headers
        .iter()
        .filter_map(|(k, v)| {
            let name = k.as_str().strip_prefix("mcp-param-")?;
            Some((name.to_string(), v.to_str().ok()?.to_string()))
        })
        .collect();
    crate::tape::format::routing_hash(
        get("mcp-method"),
        get("mcp-name"),
        &params,
        get("mcp-protocol-version"),
    )
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
    /// Recorded sessions a live session replays already: a new one takes another.
    taken: Mutex<std::collections::HashSet<u32>>,
    /// The standalone messages (indexes into `index.standalone`) of each recorded session.
    standalone: HashMap<Option<u32>, Vec<usize>>,
    /// The recorded requests the sessions' matchers warned about as ambiguous: once a run.
    warned: super::matcher::Warned,
    /// Play's own error to a POST it cannot read carries the session's id (see
    /// [`own_error_session`]).
    own_error_session: bool,
    /// Play's own answers to requests come as an SSE stream of one event (see [`own_sse`]).
    own_sse: bool,
    /// How the recorded server refused POSTs for their session.
    refusals: crate::tape::refusals::SessionRefusals,
}

/// Serves until `shutdown` completes, then returns the combined report of every session;
/// `on_ready` gets the URL to give the client.
pub async fn serve_http(
    index: TapeIndex,
    opts: ServeOptions,
    listen: SocketAddr,
    legacy: bool,
    shutdown: impl std::future::Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> Result<PlayReport, super::PlayError> {
    let (listener, local) = crate::transport::http::bind(listen)
        .await
        .map_err(|cause| super::PlayError::Listen {
            addr: listen,
            cause,
        })?;
    Ok(serve_http_on(listener, local, index, opts, legacy, shutdown, on_ready).await)
}

/// [`serve_http`] on a listener already bound (an agent run binds it before the agent's config
/// names its URL).
pub async fn serve_http_on(
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    index: TapeIndex,
    opts: ServeOptions,
    legacy: bool,
    shutdown: impl std::future::Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> PlayReport {
    // The path the recorded server was at (the served label's, on a tape of several).
    let path = index
        .servers
        .iter()
        .find(|s| s.server == index.server)
        .or(index.servers.first())
        .and_then(|s| s.url.as_deref())
        .and_then(|u| u.parse::<hyper::Uri>().ok())
        .map(|u| u.path().to_string())
        .filter(|p| p != "/")
        .unwrap_or_else(|| "/mcp".into());
    let path = if legacy { "/sse".to_string() } else { path };
    let used = vec![false; index.exchanges.len()];
    let mut standalone: HashMap<Option<u32>, Vec<usize>> = HashMap::new();
    for (i, st) in index.standalone.iter().enumerate() {
        standalone.entry(st.session).or_default().push(i);
    }
    let player = Arc::new(Player {
        own_error_session: own_error_session(&index),
        own_sse: own_sse(&index),
        refusals: crate::tape::refusals::SessionRefusals::of(&index),
        warned: Default::default(),
        taken: Mutex::default(),
        standalone,
        index: Arc::new(index),
        opts,
        done: Mutex::new((PlayReport::default(), used)),
        sessions: Mutex::new(HashMap::new()),
        all: Mutex::new(Vec::new()),
        legacy,
    });
    on_ready(&format!("http://{local}{path}"));
    let handler = player.clone();
    let limits = player.opts.limits;
    let sweeper = tokio::spawn(expire_idle_sessions(Arc::downgrade(&player)));
    let (_, mut connections) = accept_until(&listener, limits, handler, shutdown).await;
    sweeper.abort();
    connections.abort_all();
    let open: Vec<Arc<Session>> = player.all.lock().expect("all lock").clone();
    for s in open {
        if let Some(live) = &s.shared.live {
            live.shutdown().await;
        }
    }
    player.report()
}

/// Whether play's own answers to requests (a miss explained, an unrecorded ping, an injected
/// error) come as an SSE stream of one event rather than as `application/json`: as the
/// recorded server answered its first request taped with an answer. Both reference SDKs'
/// servers answer every request over SSE by default; a server that answers in JSON (a
/// stateless one, the Python SDK with `json_response`) gets JSON.
fn own_sse(index: &TapeIndex) -> bool {
    index
        .exchanges
        .iter()
        .find_map(|e| e.response)
        .and_then(|r| index.msgs[r].http.as_ref()?.content_type.as_deref())
        .is_some_and(|c| c.starts_with("text/event-stream"))
}

/// Whether play's own error to a POST it cannot read (one the tape has no answer for) carries
/// the session's id: as the recorded server's answers to such POSTs in a session did (the
/// Python SDK's server sends it on its `400`, server-everything does not), and on a tape
/// without one, as its answers in a session did.
fn own_error_session(index: &TapeIndex) -> bool {
    let in_session =
        |m: &crate::tape::index::MsgMeta| m.http.as_ref().is_some_and(|h| h.session.is_some());
    index
        .bad_lines
        .iter()
        .filter(|b| in_session(&index.msgs[b.msg]))
        .find_map(|b| match (&b.refusal, b.answer) {
            (Some(r), _) => Some(r.session),
            (None, Some(a)) => index.msgs[a].http.as_ref().map(|h| h.with_session),
            (None, None) => None,
        })
        .unwrap_or(index.http.session_on_answers)
}

/// Closes the sessions idle past `session_idle`, looking a few times per period.
async fn expire_idle_sessions(player: std::sync::Weak<Player>) {
    let idle = match player.upgrade() {
        Some(p) => p.opts.session_idle,
        None => return,
    };
    let mut tick = tokio::time::interval((idle / 4).max(std::time::Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(p) = player.upgrade() else { return };
        let now = tokio::time::Instant::now();
        let expired: Vec<(String, Arc<Session>)> = {
            let mut sessions = p.sessions.lock().expect("sessions lock");
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| s.idle_for(idle, now))
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| sessions.remove(&id).map(|s| (id, s)))
                .collect()
        };
        for (id, s) in expired {
            s.shared.closed.send_replace(true);
            end_live(&s);
            p.retire(&s);
            crate::diag!(
                "mcptape play: session {} closed after {} s without a request (--session-idle)",
                if id.is_empty() {
                    "(no session id)"
                } else {
                    &id
                },
                idle.as_secs_f64()
            );
        }
    }
}

impl Player {
    async fn post(
        &self,
        session_id: Option<String>,
        routing: u64,
        body: Bytes,
    ) -> Response<RespBody> {
        let c = classify(&body);
        let is_init = c.kind == Kind::Request && c.method.as_deref() == Some("initialize");
        if is_init && self.at_session_cap() {
            return too_many_sessions(self.opts.max_sessions);
        }
        let (session, new_id) = if is_init {
            let id = crate::transport::http::session_id();
            (self.open_session(&id, false), Some(id))
        } else {
            if session_id.is_none() && self.needs_session(&c, &body) {
                return self.sessionless();
            }
            match (self.session(session_id.as_deref()), &session_id) {
                (Some(s), _) => (s, None),
                (None, named) => return self.no_such_post_session(named.as_deref().unwrap_or("")),
            }
        };
        let count = session.c2s.fetch_add(1, Ordering::Relaxed) + 1;
        let due = serve::Due {
            point: count,
            arrived: tokio::time::Instant::now(),
        };
        let bad = crate::wire::classify::unservable(c.kind, c.id.as_deref(), &body);
        let response = match c.kind {
            _ if bad => {
                // What the recorded server answered the same bytes, if the tape says; else, as
                // over stdio, a batch or JSON that is no request is not a parse error.
                let recorded = session.shared.recorded_bad_post(&body, false);
                session.shared.report.lock().expect("report lock").rejected += 1;
                let recorded = match recorded {
                    Some(serve::BadAnswer::Refused(r)) => {
                        return with_session(refusal_response(r), r.session, Some(&session.id));
                    }
                    Some(serve::BadAnswer::Message(m)) => Some(m),
                    Some(serve::BadAnswer::Accepted) | None => None,
                };
                match recorded.and_then(|m| Some((m, self.index.read_bytes(m).ok()?))) {
                    Some((meta, line)) => {
                        let h = meta.http.as_deref();
                        let status = h
                            .and_then(|h| h.status)
                            .and_then(|s| StatusCode::from_u16(s).ok())
                            .unwrap_or(StatusCode::BAD_REQUEST);
                        let mut r = full(status, "application/json", line);
                        if let Some(v) = h
                            .and_then(|h| h.content_type.as_deref())
                            .and_then(|c| HeaderValue::from_str(c).ok())
                        {
                            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                        }
                        // The Python SDK's server sends the session's id on these too.
                        let carried = h.is_some_and(|h| h.with_session);
                        with_session(r, carried, Some(&session.id))
                    }
                    None => {
                        let (code, text) = serve::rejection(c.kind);
                        crate::diag!(
                            "mcptape play: {text}: a POST of {} bytes{}",
                            body.len(),
                            c.problem.map(|p| format!(" ({p})")).unwrap_or_default()
                        );
                        let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": text}});
                        let r = full(StatusCode::BAD_REQUEST, "application/json", msg.to_string());
                        with_session(r, self.own_error_session, Some(&session.id))
                    }
                }
            }
            Kind::Request => {
                self.request(
                    &session,
                    &body,
                    c.id.unwrap_or_default(),
                    c.method.unwrap_or_default(),
                    (routing, count),
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
                accepted(&self.index, "", Some(&session.id))
            }
            Kind::Notification => accepted(&self.index, "", Some(&session.id)),
            _ => {
                // As over stdio: a batch, or JSON that is no message, is not a parse error.
                let (code, text) = serve::rejection(c.kind);
                crate::diag!(
                    "mcptape play: {text}: a POST of {} bytes{}",
                    body.len(),
                    c.problem.map(|p| format!(" ({p})")).unwrap_or_default()
                );
                session.shared.report.lock().expect("report lock").rejected += 1;
                let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": text}});
                let r = full(StatusCode::BAD_REQUEST, "application/json", msg.to_string());
                with_session(r, self.own_error_session, Some(&session.id))
            }
        };
        self.emit_standalone(&session, due).await;
        // The answer to `initialize` gives the client play's new session, whatever it was.
        with_session(response, true, new_id.as_deref())
    }

    /// What answers a request: a recorded exchange to replay, or one line right away (a miss
    /// explained, an unrecorded ping).
    async fn answer(
        &self,
        session: &Arc<Session>,
        body: &[u8],
        id: &str,
        method: &str,
        routing: u64,
    ) -> Answer {
        let params = crate::wire::params::params_of(body);
        let token = crate::wire::params::request_progress_token(body, params.as_ref());
        if let Some(live) = &session.shared.live {
            if method == "initialize" {
                live.note_initialize(body);
            }
            if live.chosen(method, params.as_ref()) {
                return Answer::Live(false);
            }
        }
        let bound = *session.recorded.lock().expect("recorded lock");
        let opening = method == "initialize";
        let taken = if opening {
            self.taken.lock().expect("taken lock").clone()
        } else {
            Default::default()
        };
        // Of the matching exchanges: the recorded session's own first (for `initialize`, one of
        // a recorded session no live session replays yet), then the one recorded with the same
        // routing headers (a request refused for a header mismatch has the body of one that was
        // not).
        let score = |ex: &crate::tape::index::Exchange| {
            let mine = if opening {
                ex.session.is_some_and(|s| !taken.contains(&s))
            } else {
                bound.is_some() && ex.session == bound
            };
            4 * mine as u32 + 2 * (ex.headers == routing) as u32
        };
        let prefer = super::matcher::Prefer {
            score: &score,
            max: 6,
        };
        let outcome = session.matcher.lock().await.take_preferring(
            &self.index,
            method,
            params.as_ref(),
            self.opts.lenient || self.opts.on_miss == super::live::OnMiss::Lenient,
            &prefer,
        );
        let taken_ex = match &outcome {
            Outcome::Hit(ex) | Outcome::Lenient(ex, _) => Some(*ex),
            Outcome::Miss(_) => None,
        };
        if let (true, Some(ex)) = (opening, taken_ex) {
            if let Some(recorded) = self.index.exchanges[ex].session {
                *session.recorded.lock().expect("recorded lock") = Some(recorded);
                self.taken.lock().expect("taken lock").insert(recorded);
            }
        }
        if let (true, Some(ex)) = (opening, taken_ex) {
            let w =
                serve::version_warning(&self.index, &session.shared.bodies, ex, params.as_ref());
            if let Some(w) = w {
                crate::diag!("{w}");
            }
        }
        // A `server/discover` probe the tape has no answer for: answered as its server's era was.
        if matches!(outcome, Outcome::Miss(_)) {
            if let Some(answer) = serve::probe_answer(&self.index, method, id) {
                let report = &session.shared.report;
                return Answer::Now(report.lock().expect("report lock").answer_probe(answer));
            }
        }
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
            Outcome::Miss(_)
                if self.opts.on_miss == super::live::OnMiss::Live
                    && session.shared.live.is_some() =>
            {
                Answer::Live(true)
            }
            Outcome::Miss(mut miss) => {
                miss.note_too_large(&self.index, body.len());
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

    /// Answers a request, the client's message number `msg_no` in its session.
    async fn request(
        &self,
        session: &Arc<Session>,
        body: &[u8],
        id: String,
        method: String,
        (routing, msg_no): (u64, u64),
    ) -> Response<RespBody> {
        let (ex, token) = match self.answer(session, body, &id, &method, routing).await {
            Answer::Exchange(ex, token) => (ex, token),
            Answer::Now(line) => return self.own_answer(line, session),
            Answer::Live(taped) => {
                return self.own(live_response(session, body, id, taped), session)
            }
        };
        let verdict = match self.verdict(session, ex, &id, &method, body, msg_no) {
            Planned::Serve(v) => v,
            Planned::Error(line) => return self.own_answer(line, session),
            Planned::Cut => return cut_response(),
        };
        let exchange = &self.index.exchanges[ex];
        if let Some(r) = &exchange.refusal {
            // Refused without a JSON-RPC answer: the same status, headers and body again.
            session.shared.report.lock().expect("report lock").served += 1;
            return with_session(refusal_response(r), r.session, Some(&session.id));
        }
        // The recorded answer's status and content type (a `400` with a JSON-RPC error is a
        // `400` again).
        let answer_http = exchange
            .response
            .and_then(|r| self.index.msgs[r].http.as_deref());
        let status = answer_http
            .and_then(|h| h.status)
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        // Both reference SDKs' servers send the session's id on every answer in a session; on
        // an exchange without its answer, play's error is its own.
        let carried = match exchange.response {
            Some(_) => answer_http.is_some_and(|h| h.with_session),
            None => self.index.http.session_on_answers,
        };
        let (tx, mut rx) = mpsc::channel::<StreamItem>(STREAM_QUEUE);
        let shared = session.shared.clone();
        // SSE when the recording answered over SSE, or the exchange carries more than its answer.
        let streamed = !exchange.during.is_empty()
            || exchange.response.is_some_and(|r| self.index.msgs[r].sse);
        tokio::spawn(async move {
            let sink = StreamSink(tx);
            serve::serve_exchange_with(&shared, &sink, ex, &id, token.as_deref(), &verdict).await
        });
        if !streamed {
            // One answer: as JSON. (A recorded request without an answer gets play's error.)
            let content_type = answer_http
                .and_then(|h| h.content_type.as_deref())
                .filter(|c| c.starts_with("application/json"))
                .and_then(|c| HeaderValue::from_str(c).ok())
                .unwrap_or(HeaderValue::from_static("application/json"));
            let line = loop {
                match rx.recv().await {
                    Some(StreamItem::Line(line)) => break Some(line),
                    Some(StreamItem::Recorded(_)) => continue,
                    None => break None,
                }
            };
            return match line {
                Some(line) => {
                    let mut r = full(status, "application/json", trim_nl(&line).to_string());
                    r.headers_mut()
                        .insert(hyper::header::CONTENT_TYPE, content_type);
                    with_session(r, carried, Some(&session.id))
                }
                None => accepted(&self.index, "", Some(&session.id)),
            };
        }
        // The exchange's notifications and server requests, then its response, as SSE events,
        // with their recorded event ids, after the recorded priming event. Where the recording's
        // stream was closed and resumed with a GET, the stream ends at the same point and the
        // rest waits for that GET.
        let (btx, brx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
        let priming = exchange.priming.clone();
        let resumed = exchange.resumed.clone();
        let stream_session = session.clone();
        tokio::spawn(async move {
            let mut post = Some(btx);
            if let (Some(p), Some(tx)) = (&priming, &post) {
                let _ = tx.send(Bytes::from(priming_event(p))).await;
            }
            let mut get: Option<mpsc::Sender<Bytes>> = None;
            let mut next: Option<Framing> = None;
            let mut sent_ids: Vec<String> = priming.iter().map(|p| p.id.clone()).collect();
            while let Some(item) = rx.recv().await {
                let line = match item {
                    StreamItem::Recorded(framing) => {
                        next = Some(framing);
                        continue;
                    }
                    StreamItem::Line(line) => line,
                };
                let framing = next.take().unwrap_or_else(Framing::ours);
                let (bytes, event_id, on_get) = (
                    framing.event(trim_nl(&line)),
                    framing.event_id,
                    framing.on_get,
                );
                if on_get && resumed.is_some() && get.is_none() {
                    // The recorded server closed the POST stream here.
                    post = None;
                    let (gtx, grx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
                    stream_session.offer_resume(&sent_ids, resumed.as_deref().cloned(), grx);
                    get = Some(gtx);
                }
                if let Some(id) = &event_id {
                    sent_ids.push(id.clone());
                }
                let to = get.as_ref().or(post.as_ref());
                if let Some(tx) = to {
                    if tx.send(bytes).await.is_err() {
                        break;
                    }
                }
            }
        });
        with_session(sse_response(brx), carried, Some(&session.id))
    }

    /// HTTP+SSE (2024-11-05): GET opens a session's event stream, whose first event names the
    /// URL to POST to; every POST is answered 202 and its answers go out on that stream.
    async fn handle_legacy(&self, req: Request<Incoming>) -> Response<RespBody> {
        match *req.method() {
            Method::GET => {
                if self.at_session_cap() {
                    return too_many_sessions(self.opts.max_sessions);
                }
                let id = crate::transport::http::session_id();
                let session = self.open_session(&id, true);
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
                    .filter(|id| !id.is_empty())
                    .map(str::to_string);
                // As the Python SDK's SSE server answers (server-everything's never answers a
                // POST naming a session it does not have); counted in the summary.
                let Some(id) = id else {
                    return plain(StatusCode::BAD_REQUEST, "sessionId is required");
                };
                let Some(session) = self.session(Some(&id)) else {
                    self.done.lock().expect("done lock").0.unknown_session += 1;
                    return plain(StatusCode::NOT_FOUND, "Could not find session");
                };
                let body = match collect(req.into_body(), self.opts.max_message).await {
                    Ok(b) => b,
                    Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
                };
                let count = session.c2s.fetch_add(1, Ordering::Relaxed) + 1;
                let due = serve::Due {
                    point: count,
                    arrived: tokio::time::Instant::now(),
                };
                let c = classify(&body);
                if crate::wire::classify::unservable(c.kind, c.id.as_deref(), &body) {
                    return self.legacy_bad_post(&session, &body, &c, due).await;
                }
                match c.kind {
                    Kind::Request => {
                        let (id, method) = (c.id.unwrap_or_default(), c.method.unwrap_or_default());
                        let answer = match self.answer(&session, &body, &id, &method, 0).await {
                            Answer::Live(taped) => {
                                let (shared, body) = (session.shared.clone(), body.to_vec());
                                let id = id.clone();
                                tokio::spawn(async move {
                                    let out = &shared.out;
                                    super::live::forward(&shared, out, &body, &id, taped).await
                                });
                                None
                            }
                            Answer::Exchange(ex, token) => {
                                Some(
                                    match self.verdict(&session, ex, &id, &method, &body, count) {
                                        Planned::Serve(v) => Ok((ex, token, v)),
                                        Planned::Error(line) => Err(line),
                                        // The session's event stream was closed with it.
                                        Planned::Cut => return cut_response(),
                                    },
                                )
                            }
                            Answer::Now(line) => Some(Err(line)),
                        };
                        match answer {
                            None => {}
                            Some(Err(line)) => {
                                serve::send(&session.shared.out, line.into_bytes()).await
                            }
                            Some(Ok((ex, token, verdict))) => {
                                let shared = session.shared.clone();
                                tokio::spawn(async move {
                                    serve::serve_exchange_with(
                                        &shared,
                                        &OwnStream::new(&shared.out),
                                        ex,
                                        &id,
                                        token.as_deref(),
                                        &verdict,
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
                self.emit_standalone(&session, due).await;
                accepted(&self.index, "Accepted", None)
            }
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "mcptape play: GET or POST"),
        }
    }

    /// A POST on the HTTP+SSE transport whose body no server could serve (not JSON, no
    /// message, a batch, a request with an unusual id): answered as the recorded server answered
    /// the same bytes — its refusal, `202` (and its error on the event stream) — or, not
    /// recorded, `400` with a plain text and no `Content-Type`, as server-everything's `sse`
    /// mode and the Python SDK's SSE server answer what they cannot read (not the `202` of a
    /// message taken).
    async fn legacy_bad_post(
        &self,
        session: &Arc<Session>,
        body: &[u8],
        c: &crate::wire::classify::Classified,
        due: serve::Due,
    ) -> Response<RespBody> {
        session.shared.report.lock().expect("report lock").rejected += 1;
        let response = match session.shared.recorded_bad_post(body, true) {
            Some(serve::BadAnswer::Refused(r)) => refusal_response(r),
            Some(serve::BadAnswer::Message(m)) => {
                // Answered on the event stream, as every answer on this transport.
                if let Ok(line) = self.index.read_bytes(m) {
                    serve::send(&session.shared.out, line).await;
                }
                accepted(&self.index, "Accepted", None)
            }
            Some(serve::BadAnswer::Accepted) => accepted(&self.index, "Accepted", None),
            None => {
                let (_, text) = serve::rejection(c.kind);
                crate::diag!(
                    "mcptape play: {text}: a POST of {} bytes{}",
                    body.len(),
                    c.problem
                        .as_ref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                );
                let mut r = full(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    format!("mcptape play: {text}"),
                );
                r.headers_mut().remove(hyper::header::CONTENT_TYPE);
                r
            }
        };
        self.emit_standalone(session, due).await;
        response
    }

    /// Messages the recording had tied to no request, at the same point of the conversation:
    /// those of the recorded session this session replays (of the whole tape, over stdio).
    async fn emit_standalone(&self, session: &Arc<Session>, due: serve::Due) {
        let recorded = *session.recorded.lock().expect("recorded lock");
        let Some(mine) = self.standalone.get(&recorded) else {
            return;
        };
        loop {
            let st = {
                let mut next = session.next_standalone.lock().expect("standalone lock");
                match mine
                    .get(*next)
                    .map(|&i| &self.index.standalone[i])
                    .filter(|s| s.point <= due.point)
                {
                    Some(s) => {
                        *next += 1;
                        s.clone()
                    }
                    None => break,
                }
            };
            let meta = &self.index.msgs[st.msg];
            let when = serve::Standalone::of(&session.shared, st.msg, &due);
            match (meta.kind, when) {
                (_, serve::Standalone::Skipped) | (Kind::Response | Kind::Error, _) => {}
                (Kind::Request, _) | (_, serve::Standalone::At(_)) => {
                    let shared = session.shared.clone();
                    tokio::spawn(when.send_later(shared, st.msg, st.client_answer));
                }
                (_, serve::Standalone::Now) => {
                    if let Ok(bytes) = self.index.read_bytes(meta) {
                        let own = OwnStream::new(&session.shared.out);
                        own.before(meta).await;
                        own.emit(bytes).await;
                    }
                }
            }
        }
    }

    /// What the plan does to a call matched to exchange `ex`: an `error` or `drop` fault is
    /// decided (and reported) here; anything else is for `serve_exchange_with`.
    fn verdict(
        &self,
        session: &Arc<Session>,
        ex: usize,
        id: &str,
        method: &str,
        body: &[u8],
        msg_no: u64,
    ) -> Planned {
        let plan = &self.opts.plan;
        if !plan.is_set() {
            return Planned::Serve(Verdict::default());
        }
        let params = crate::wire::params::params_of(body);
        let v = plan.verdict(&self.index, ex, method, params.as_ref(), msg_no);
        let Some(i) = v.fault else {
            return Planned::Serve(v);
        };
        if !matches!(plan.kind(i), FaultKind::Error(_) | FaultKind::Drop) {
            return Planned::Serve(v);
        }
        session
            .shared
            .inject(i, self.index.exchanges[ex].request, Some(id));
        match plan.error_answer(i, id) {
            Some(line) => Planned::Error(line),
            None => {
                self.cut(session);
                Planned::Cut
            }
        }
    }

    /// A `drop` fault: the session ends as if its server had died (its GET stream closes, its
    /// id gets `404` from now on, so a client initializes again).
    fn cut(&self, session: &Arc<Session>) {
        session.shared.report.lock().expect("report lock").cut = true;
        self.sessions
            .lock()
            .expect("sessions lock")
            .retain(|_, s| !Arc::ptr_eq(s, session));
        session.shared.closed.send_replace(true);
        session.get.lock().expect("get lock").tx = None;
        self.retire(session);
    }

    /// Play's own answer `line` to a request, as the recorded server sent its answers: JSON,
    /// or an SSE stream of one `message` event (see [`own_sse`]).
    fn own_answer(&self, line: String, session: &Session) -> Response<RespBody> {
        let resp = if self.own_sse {
            let mut r = full(
                StatusCode::OK,
                "text/event-stream",
                sse::encode(Some("message"), None, trim_nl(line.as_bytes())),
            );
            r.headers_mut().insert(
                hyper::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            r
        } else {
            full(StatusCode::OK, "application/json", line)
        };
        self.own(resp, session)
    }

    /// One of play's own answers in `session` (a miss explained, an unrecorded ping, its own
    /// parse error, an injected error, a live server's answer): with the session's id where
    /// the recorded server sent it on its answers in a session.
    fn own(&self, resp: Response<RespBody>, session: &Session) -> Response<RespBody> {
        with_session(resp, self.index.http.session_on_answers, Some(&session.id))
    }

    fn at_session_cap(&self) -> bool {
        self.sessions.lock().expect("sessions lock").len() >= self.opts.max_sessions
    }

    /// The session a request is for (the one without an id made when first needed), marked
    /// as seen now.
    fn session(&self, id: Option<&str>) -> Option<Arc<Session>> {
        let s = self.lookup(id);
        if let Some(s) = &s {
            *s.last_seen.lock().expect("seen lock") = tokio::time::Instant::now();
        }
        s
    }

    fn lookup(&self, id: Option<&str>) -> Option<Arc<Session>> {
        let sessions = self.sessions.lock().expect("sessions lock");
        match id {
            Some(id) => sessions.get(id).cloned(),
            None => {
                if let Some(s) = sessions.get(STATELESS) {
                    return Some(s.clone());
                }
                drop(sessions);
                Some(self.open_session(STATELESS, false))
            }
        }
    }

    /// A session; `legacy`: of the HTTP+SSE transport (2024-11-05), whose event stream carries
    /// every server message as a `message` event.
    fn open_session(&self, id: &str, legacy: bool) -> Arc<Session> {
        // The session's own messages (standalone ones, server requests tied to no request)
        // go to its GET stream, or wait for one.
        let (out, mut out_rx) = mpsc::channel::<OutLine>(STREAM_QUEUE);
        let session = Arc::new(Session {
            id: id.into(),
            shared: Arc::new(Shared {
                index: self.index.clone(),
                out,
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                closed: watch::channel(false).0,
                report: Mutex::new(PlayReport::default()),
                opts: self.opts.clone(),
                bodies: Default::default(),
                live: self.opts.live.clone().map(super::live::Live::new),
                keep_line_ends: false,
                bad_lines_used: Mutex::default(),
            }),
            matcher: tokio::sync::Mutex::new(self.matcher()),
            c2s: AtomicU64::new(0),
            recorded: Mutex::new(None),
            next_standalone: Mutex::new(0),
            get: Mutex::new(GetStream::default()),
            resumes: Mutex::default(),
            last_seen: Mutex::new(tokio::time::Instant::now()),
        });
        let weak = Arc::downgrade(&session);
        tokio::spawn(async move {
            while let Some(OutLine { line, framing }) = out_rx.recv().await {
                let Some(s) = weak.upgrade() else { break };
                // As the recording framed the message it replays (its event id and name), or
                // as play frames its own; on the legacy transport's stream, as it requires
                // (a tape recorded over Streamable HTTP may have other names, or none).
                let framing = framing.filter(|_| !legacy).unwrap_or_else(Framing::ours);
                let event = framing.event(trim_nl(&line));
                let tx = {
                    let mut get = s.get.lock().expect("get lock");
                    match &get.tx {
                        Some(tx) if !tx.is_closed() => Some(tx.clone()),
                        _ => {
                            get.tx = None;
                            get.waiting.push(event.clone());
                            None
                        }
                    }
                };
                if let Some(tx) = tx {
                    let _ = tx.send(event).await;
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
            (done.0.clone(), done.1.clone())
        };
        for s in self.all.lock().expect("all lock").iter() {
            fold(&mut total, &mut used, s);
        }
        total.unused = (0..used.len())
            .filter(|&i| !used[i])
            .enumerate()
            .map(|(nth, i)| {
                let req = &self.index.msgs[self.index.exchanges[i].request];
                super::serve::Unused::of(nth, &self.index, req, self.opts.display.as_deref())
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

/// What the plan makes of a matched call over HTTP.
enum Planned {
    /// Served from the tape, as the verdict says.
    Serve(Verdict),
    /// Answered with this injected error.
    Error(String),
    /// Cut (`drop`).
    Cut,
}

/// A response whose body fails at once: hyper closes the connection without sending anything,
/// which the client sees as a server that went away mid-request.
fn cut_response() -> Response<RespBody> {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Err("cut on purpose (--faults drop)".to_string()));
    Response::new(http_body_util::BodyExt::boxed(
        crate::transport::http::CuttableBody { rx },
    ))
}

/// The answer to a POST that calls for no JSON-RPC answer (a notification, a response; any POST
/// on the HTTP+SSE transport): as the recorded server answered such a POST (its status,
/// `Content-Type` and body, `http-accepted` on the tape); on a tape that does not say, `202
/// Accepted` with `body` and no `Content-Type`, as the reference SDKs' servers answer. With the
/// session's id `session` when the recorded answer carried one.
fn accepted(
    index: &crate::tape::TapeIndex,
    body: &'static str,
    session: Option<&str>,
) -> Response<RespBody> {
    let Some(r) = &index.http.accepted else {
        let mut resp = full(StatusCode::ACCEPTED, "text/plain", body);
        resp.headers_mut().remove(hyper::header::CONTENT_TYPE);
        return resp;
    };
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::ACCEPTED);
    let mut resp = full(status, "text/plain", r.body.clone());
    match r
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        Some(v) => resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v),
        None => resp.headers_mut().remove(hyper::header::CONTENT_TYPE),
    };
    with_session(resp, r.session, session)
}

/// `resp` with the session's id `session` (not the stateless one), when the recorded answer
/// carried the recorded session's (`carried`). Every answer play gives in a session goes
/// through here, so that no path decides it another way.
fn with_session(
    mut resp: Response<RespBody>,
    carried: bool,
    session: Option<&str>,
) -> Response<RespBody> {
    let id = session
        .filter(|s| carried && !s.is_empty())
        .and_then(|s| HeaderValue::from_str(s).ok());
    if let Some(v) = id {
        resp.headers_mut().insert(SESSION, v);
    }
    resp
}

/// Play's own refusal of an HTTP request: `status`, and a JSON-RPC error (Invalid Request, no
/// id) with `message`, as both reference servers refuse one.
fn json_error(status: StatusCode, message: &str) -> Response<RespBody> {
    let error =
        json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32600, "message": message}});
    full(status, "application/json", error.to_string())
}

/// A recorded refusal given again: its status, `Content-Type` (none when it had none, also
/// with a body), `Allow` and body.
fn refusal_response(r: &crate::tape::index::HttpRefusal) -> Response<RespBody> {
    recorded_response(
        r.status,
        r.content_type.as_deref(),
        r.allow.as_deref(),
        &r.body,
    )
}

/// A recorded answer to a GET or a DELETE given again, as a refusal is.
fn answer_response(a: &crate::tape::index::HttpAnswer) -> Response<RespBody> {
    recorded_response(
        a.status,
        a.content_type.as_deref(),
        a.allow.as_deref(),
        &a.body,
    )
}

/// An answer with this status, `Content-Type` (none when `None`), `Allow` and body.
fn recorded_response(
    status: u16,
    content_type: Option<&str>,
    allow: Option<&str>,
    body: &str,
) -> Response<RespBody> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = full(status, "text/plain", body.to_string());
    match content_type.and_then(|c| HeaderValue::from_str(c).ok()) {
        Some(v) => resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v),
        None => resp.headers_mut().remove(hyper::header::CONTENT_TYPE),
    };
    if let Some(v) = allow.and_then(|a| HeaderValue::from_str(a).ok()) {
        resp.headers_mut().insert(hyper::header::ALLOW, v);
    }
    resp
}

/// A request answered by the live server: as an SSE stream, what the live server sends for it
/// first, its answer last.
fn live_response(
    session: &Arc<Session>,
    body: &[u8],
    id: String,
    taped: bool,
) -> Response<RespBody> {
    let (tx, mut rx) = mpsc::channel::<StreamItem>(STREAM_QUEUE);
    let (shared, body) = (session.shared.clone(), body.to_vec());
    tokio::spawn(
        async move { super::live::forward(&shared, &StreamSink(tx), &body, &id, taped).await },
    );
    let (btx, brx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            if let StreamItem::Line(line) = item {
                let event = sse::encode(Some("message"), None, trim_nl(&line));
                if btx.send(Bytes::from(event)).await.is_err() {
                    break;
                }
            }
        }
    });
    sse_response(brx)
}

/// Ends a closed session's live server, if it has one.
fn end_live(s: &Arc<Session>) {
    if s.shared.live.is_some() {
        let s = s.clone();
        tokio::spawn(async move {
            if let Some(live) = &s.shared.live {
                live.shutdown().await
            }
        });
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
fn too_many_sessions(max: usize) -> Response<RespBody> {
    let mut r = plain(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("mcptape play: {max} sessions are open; delete one (DELETE with its Mcp-Session-Id) or retry later"),
    );
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    r
}

fn fold(total: &mut PlayReport, used: &mut [bool], s: &Session) {
    let r = s.shared.report.lock().expect("report lock");
    total.served += r.served;
    total.missed += r.missed;
    total.lenient += r.lenient;
    total.drifted += r.drifted;
    total.rejected += r.rejected;
    total.unanswered += r.unanswered;
    total.markers += r.markers;
    total.probes += r.probes;
    total.discovered += r.discovered;
    total.too_large += r.too_large;
    total.injected.extend(r.injected.iter().cloned());
    total.cut |= r.cut;
    total.live += r.live;
    total.dropped += s.get.lock().expect("get lock").waiting.dropped;
    total.misses.extend(r.misses.iter().cloned());
    total.drifts.extend(r.drifts.iter().cloned());
    if let Ok(m) = s.matcher.try_lock() {
        total.repeats += m.repeats();
        super::matcher::add_ambiguous(&mut total.ambiguous, m.ambiguous());
        super::usage::add_uses(&mut total.uses, m.uses());
        let unused: std::collections::HashSet<usize> = m.unused().into_iter().collect();
        for (i, u) in used.iter_mut().enumerate() {
            if !unused.contains(&i) {
                *u = true;
            }
        }
    }
}

impl crate::transport::http::Handler for Player {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        let http = &self.index.http;
        if http.preflight.is_none() && http.cors.is_none() {
            return self.respond(req).await;
        }
        // CORS as the recorded server gave it (`transport::cors`): a preflight answered as
        // recorded, the other answers with the recorded headers, echoing what this request
        // asks where the server echoed what its own asked.
        let mut asked = hyper::HeaderMap::new();
        for name in [
            hyper::header::ORIGIN,
            hyper::header::ACCESS_CONTROL_REQUEST_HEADERS,
            hyper::header::ACCESS_CONTROL_REQUEST_METHOD,
        ] {
            if let Some(v) = req.headers().get(&name) {
                asked.insert(name, v.clone());
            }
        }
        if *req.method() == Method::OPTIONS {
            if let Some(p) = &http.preflight {
                let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::NO_CONTENT);
                let mut r = Response::new(crate::transport::http::whole_body(Bytes::new()));
                *r.status_mut() = status;
                recorded(p).apply(&asked, r.headers_mut());
                return r;
            }
        }
        let mut r = self.respond(req).await;
        if let Some(c) = &http.cors {
            recorded(c).apply(&asked, r.headers_mut());
        }
        r
    }
}

/// The tape's CORS headers as `transport::cors` gives them again.
fn recorded(c: &crate::tape::index::HttpCors) -> crate::transport::cors::Recorded<'_> {
    crate::transport::cors::Recorded {
        headers: &c.headers,
        reflected: &c.reflected,
    }
}

impl Player {
    /// A request answered as the recorded server answered it (CORS aside).
    async fn respond(&self, req: Request<Incoming>) -> Response<RespBody> {
        if self.legacy {
            return self.handle_legacy(req).await;
        }
        let session_id = req
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let last_event = || {
            req.headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        // A GET resuming a stream (`Last-Event-ID`) replays its events: both reference servers
        // serve it before they look for an open stream.
        if *req.method() == Method::GET && last_event().is_none() {
            if let Some(r) = self.second_stream(session_id.as_deref()) {
                return r;
            }
        }
        if matches!(*req.method(), Method::GET | Method::DELETE) {
            let recorded = self.as_recorded(req.method(), session_id.as_deref(), last_event());
            if let Some(r) = recorded {
                return r;
            }
        }
        // A tape that does not say how the server answered a GET or DELETE of this case (one
        // recorded before mcptape taped those answers, or where no client sent one): a GET or
        // DELETE the recorded server refused (`405` in the stateless era) is refused the same
        // way, unless the recording also had a GET stream that worked.
        let refused = match *req.method() {
            Method::GET if self.index.http.get_stream_msgs == 0 => {
                self.index.http.refusals.get("GET")
            }
            Method::DELETE => self.index.http.refusals.get("DELETE"),
            _ => None,
        };
        if let Some(r) = refused {
            // With the session's id when the recorded refusal carried it and the request
            // named a session play has.
            let session = self.session(session_id.as_deref()).map(|s| s.id.clone());
            return with_session(refusal_response(r), r.session, session.as_deref());
        }
        // Play's own answers in a session carry its id where the recorded server's did.
        let carried = self.index.http.session_on_answers;
        match *req.method() {
            Method::POST => {
                let max = self.opts.max_message;
                let (parts, body) = req.into_parts();
                let body = match collect(body, max).await {
                    Ok(b) => b,
                    Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
                };
                self.post(session_id, routing_of(&parts.headers), body)
                    .await
            }
            Method::GET => match (self.session(session_id.as_deref()), &session_id) {
                (Some(s), _) => {
                    let id = s.id.clone();
                    with_session(self.get_stream(s, last_event()), carried, Some(&id))
                }
                (None, named) => self.no_such_session(named.as_deref().unwrap_or("")),
            },
            Method::DELETE => match session_id.as_deref() {
                Some(id) => match self.end_session(id) {
                    Some(s) => with_session(plain(StatusCode::OK, ""), carried, Some(&s.id)),
                    None => self.no_such_session(id),
                },
                // The tape does not say how its server answered one (`as_recorded`, above).
                None => json_error(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: a DELETE names the session to end (Mcp-Session-Id), and this one names none",
                ),
            },
            _ => plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "mcptape play: POST, GET or DELETE",
            ),
        }
    }

    /// A GET naming a session whose GET stream is still open: refused `409 Conflict`, as the
    /// recorded server refused one (`conflict`), else as the TypeScript and Python SDKs'
    /// servers do. Play used to hand the new GET the session's stream, leaving the first one
    /// open and silent, where the real server refuses the second. A GET that names no session
    /// (a stateless server's), or resumes one, is never refused this way.
    fn second_stream(&self, named: Option<&str>) -> Option<Response<RespBody>> {
        let s = self.session(Some(named?))?;
        let open = s
            .get
            .lock()
            .expect("get lock")
            .opened
            .as_ref()
            .and_then(mpsc::WeakSender::upgrade)
            .is_some_and(|tx| !tx.is_closed());
        if !open {
            return None;
        }
        Some(match &self.index.http.get.conflict {
            Some(r) => session_as_recorded(answer_response(r), r.session, named),
            None => json_error(
                StatusCode::CONFLICT,
                "Conflict: Only one SSE stream is allowed per session",
            ),
        })
    }

    /// A GET or a DELETE answered as the recorded server answered one of the same case
    /// (`http-get`, `http-delete` with their answers): naming no session, one play has, or
    /// one it has not. A success opens the session's GET stream or ends the session; a refusal
    /// is given again (JSON-RPC error bodies too). The session id as the recorded answer
    /// carried one: the request's, a new one, or none. `None` when the tape does not say.
    fn as_recorded(
        &self,
        method: &Method,
        named: Option<&str>,
        last_event: Option<String>,
    ) -> Option<Response<RespBody>> {
        let answers = if *method == Method::GET {
            &self.index.http.get
        } else {
            &self.index.http.delete
        };
        let session = named.and_then(|id| self.session(Some(id)));
        let recorded = answers.of(named.map(|_| session.is_some()))?;
        if named.is_some() && session.is_none() {
            self.done.lock().expect("done lock").0.unknown_session += 1;
        }
        let resp = match (recorded.is_success(), method) {
            (true, &Method::GET) => {
                // A GET stream without a session id is the stateless session's.
                let s = session.or_else(|| self.session(None))?;
                let mut r = self.get_stream(s, last_event);
                *r.status_mut() = StatusCode::from_u16(recorded.status).unwrap_or(StatusCode::OK);
                if let Some(v) = recorded
                    .content_type
                    .as_deref()
                    .and_then(|c| HeaderValue::from_str(c).ok())
                {
                    r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                }
                r
            }
            (true, _) => {
                if let (Some(id), Some(_)) = (named, &session) {
                    self.end_session(id);
                }
                answer_response(recorded)
            }
            (false, _) => answer_response(recorded),
        };
        Some(session_as_recorded(resp, recorded.session, named))
    }

    /// A new session's matcher: the exchanges the recorded server refused for their session
    /// set aside (play answers such a POST before matching it).
    fn matcher(&self) -> Matcher {
        let mut m =
            Matcher::for_play(&self.index, &self.opts).sharing_warnings(self.warned.clone());
        if !self.legacy {
            for ex in self.refusals.all() {
                m.set_aside(ex);
            }
        }
        m
    }

    /// Whether a POST naming no session is refused: the recorded server gave its clients
    /// sessions and served no request outside one ([`SessionRefusals`]), and this is no
    /// request of the stateless era (`server/discover`, a request whose `_meta` names its
    /// protocol version), which a server of both eras serves without a session.
    ///
    /// [`SessionRefusals`]: crate::tape::refusals::SessionRefusals
    fn needs_session(&self, c: &classify::Classified, body: &[u8]) -> bool {
        self.refusals.needs_session
            && !self.legacy
            && c.method.as_deref() != Some("server/discover")
            && memchr::memmem::find(body, br#""io.modelcontextprotocol/protocolVersion""#).is_none()
    }

    /// The answer to a POST naming no session, to a server whose sessions need one: as the
    /// recorded server answered one, else `400` as both reference servers do. Counted in the
    /// summary.
    fn sessionless(&self) -> Response<RespBody> {
        self.done.lock().expect("done lock").0.no_session += 1;
        if let Some(r) = self.refused_as_recorded(&self.refusals.missing, None) {
            return r;
        }
        let message = "Bad Request: Mcp-Session-Id header is required: the recorded server gave \
                       its clients sessions at initialize; initialize first (mcptape play)";
        json_error(StatusCode::BAD_REQUEST, message)
    }

    /// The answer to a POST naming a session play does not have: as the recorded server
    /// answered a POST naming a session it never gave, when the tape says; else as
    /// [`no_such_session`](Self::no_such_session) answers any request.
    fn no_such_post_session(&self, named: &str) -> Response<RespBody> {
        match self.refused_as_recorded(&self.refusals.unknown, Some(named)) {
            Some(r) => {
                self.done.lock().expect("done lock").0.unknown_session += 1;
                r
            }
            None => self.no_such_session(named),
        }
    }

    /// The recorded refusal of the first of `refused` (exchanges the server refused for their
    /// session, one case), given again; the exchanges of the case count as used.
    fn refused_as_recorded(
        &self,
        refused: &[usize],
        named: Option<&str>,
    ) -> Option<Response<RespBody>> {
        let ex = &self.index.exchanges[*refused.first()?];
        let (resp, carried) = match (&ex.refusal, ex.response) {
            (Some(r), _) => (refusal_response(r), r.session),
            (None, Some(a)) => {
                let answer = &self.index.msgs[a];
                let http = answer.http.as_deref()?;
                let body = self.index.read_bytes(answer).ok()?;
                let resp = recorded_response(
                    http.status?,
                    http.content_type.as_deref(),
                    None,
                    &String::from_utf8_lossy(&body),
                );
                (resp, http.with_session)
            }
            (None, None) => return None,
        };
        // A session id on the answer to a POST that named none is a new one (the Python SDK's
        // server gives one it never keeps); on the answer to one that named a session, that.
        use crate::tape::index::SessionSent;
        let sent = match (carried, named) {
            (false, _) => SessionSent::None,
            (true, None) => SessionSent::Other,
            (true, Some(_)) => SessionSent::Same,
        };
        let resp = session_as_recorded(resp, sent, named);
        let mut done = self.done.lock().expect("done lock");
        for &n in refused {
            done.1[n] = true;
        }
        Some(resp)
    }

    /// The answer to a request naming a session play does not have (deleted, expired, cut by
    /// a fault, or never given: play restarted). Both reference servers answer such a POST,
    /// GET and DELETE alike, with a JSON-RPC error: as the recorded server answered a GET or a
    /// DELETE naming a session it did not have, when the tape says (a refusal; a `405` is
    /// none); else `404` "Session not found", as the spec asks. Counted in the summary. (A
    /// request naming no session is refused only where the tape shows its server needs one:
    /// [`needs_session`](Self::needs_session).)
    fn no_such_session(&self, named: &str) -> Response<RespBody> {
        self.done.lock().expect("done lock").0.unknown_session += 1;
        let http = &self.index.http;
        let recorded = [&http.get, &http.delete]
            .into_iter()
            .filter_map(|answers| answers.of(Some(false)))
            .find(|a| !a.is_success() && a.status != 405);
        if let Some(a) = recorded {
            return session_as_recorded(answer_response(a), a.session, Some(named));
        }
        let message = "Session not found: mcptape play has no session with this id (it was \
                       deleted or closed, or play restarted); initialize again";
        json_error(StatusCode::NOT_FOUND, message)
    }

    /// Opens session `s`'s GET stream: what waits for it first, then its messages as they come.
    fn get_stream(&self, s: Arc<Session>, last_event: Option<String>) -> Response<RespBody> {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        s.get.lock().expect("get lock").opened = Some(tx.downgrade());
        // A stream the recording resumed (`Last-Event-ID`): the rest of that exchange first,
        // then the session's own messages.
        let resume = last_event.and_then(|id| s.take_resume(&id));
        tokio::spawn(async move {
            if let Some(mut r) = resume {
                if let Some(p) = &r.priming {
                    let _ = tx.send(Bytes::from(priming_event(p))).await;
                }
                while let Some(b) = r.rx.recv().await {
                    if tx.send(b).await.is_err() {
                        return;
                    }
                }
            }
            loop {
                // The stream becomes the session's only once the backlog is out, so what
                // arrives meanwhile waits behind it, in order.
                let waiting = {
                    let mut get = s.get.lock().expect("get lock");
                    if get.waiting.is_empty() {
                        get.tx = Some(tx);
                        return;
                    }
                    get.waiting.take()
                };
                for event in waiting {
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            }
        });
        sse_response(rx)
    }

    /// Ends the session `id` as a DELETE does (its report kept for the summary): the session,
    /// if play had it.
    fn end_session(&self, id: &str) -> Option<Arc<Session>> {
        let s = self.sessions.lock().expect("sessions lock").remove(id)?;
        s.shared.closed.send_replace(true);
        end_live(&s);
        self.retire(&s);
        Some(s)
    }
}

/// `resp` with the `Mcp-Session-Id` the recorded answer to a GET or DELETE carried: the one
/// the request named (`named`) where it carried the one its request named, a new one where it
/// carried another (a session the server never kept), none where none.
fn session_as_recorded(
    resp: Response<RespBody>,
    sent: crate::tape::index::SessionSent,
    named: Option<&str>,
) -> Response<RespBody> {
    use crate::tape::index::SessionSent;
    match sent {
        SessionSent::None => resp,
        SessionSent::Same => with_session(resp, true, named),
        SessionSent::Other => with_session(resp, true, Some(&crate::transport::http::session_id())),
    }
}
