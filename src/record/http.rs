//! `mcptape record --url`: a reverse proxy for Streamable HTTP (and the older HTTP+SSE
//! transport) that tapes every JSON-RPC message it forwards, with its HTTP facts beside it.
//!
//! Each POST body is one client message; each answer is either one JSON message or an SSE
//! stream whose events are forwarded the moment each is complete (never held until the stream
//! ends), after being taped. GET streams and DELETE pass through, each taped with how the server
//! answered it (`http-get`, `http-delete`). Credentials (`Authorization`,
//! cookies, API-key headers) are forwarded, never recorded: only the MCP headers are.

use super::http_facts::HttpFacts;
use super::Recorder;
use super::{RecordError, RecordOutcome};
use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
use crate::transport::h1_client;
use crate::transport::http::{
    accept_until, collect, cut_after_flush, plain, CuttableBody, RespBody,
};
use crate::transport::sse::{self, SseParser};
use crate::wire::{Dir, Kind};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use serde_json::{json, Map, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// SSE blocks waiting for a slow client. Bounded: a client that stops reading slows the
/// upstream read down rather than growing memory.
const STREAM_QUEUE: usize = 64;

/// How much of an error answer's body (not JSON-RPC) is taped.
const ERROR_BODY_MAX: usize = 64 * 1024;

/// Redirects to the upstream's own paths followed for one request, at most: a server that
/// redirects in a loop gets its last redirect passed on.
const MAX_REDIRECTS: usize = 5;

/// How long in-flight requests get to finish after Ctrl-C before the tape is closed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What `record --url` needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpRecordConfig {
    /// Where the tape goes.
    pub tape: PathBuf,
    /// The upstream MCP endpoint, e.g. `http://127.0.0.1:3001/mcp` (credentials in it become
    /// an `Authorization: Basic` header to the upstream).
    pub upstream: String,
    /// Where the proxy listens (loopback unless told otherwise).
    pub listen: SocketAddr,
    /// The server's label on the tape.
    pub server_label: String,
    /// How the tape is written: the redactor, the signing key.
    pub write: WriteOptions,
    /// Largest message kept whole, in bytes.
    pub max_message: usize,
    /// What the listener allows client connections (see
    /// [`Limits`](crate::transport::http::Limits)).
    pub limits: crate::transport::http::Limits,
    /// The CA certificates (PEM) an `https://` upstream is checked against instead of the
    /// system's roots.
    pub upstream_ca: Option<PathBuf>,
}

impl HttpRecordConfig {
    /// A configuration with the defaults (any free loopback port, 64 MiB messages), the tape
    /// written with `write` ([`WriteOptions::redacted`] for the built-in rules).
    pub fn new(tape: PathBuf, upstream: String, write: WriteOptions) -> HttpRecordConfig {
        HttpRecordConfig {
            tape,
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            server_label: crate::tape::DEFAULT_SERVER.into(),
            write,
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            limits: Default::default(),
            upstream_ca: None,
        }
    }
}

struct Proxy {
    tape: Recorder,
    upstream: Uri,
    /// `http://127.0.0.1:PORT`: what clients see, for rewriting the legacy `endpoint` event.
    public_origin: String,
    upstream_origin: String,
    /// The upstream's `Host` header value, parsed once.
    upstream_host: Option<HeaderValue>,
    /// `Authorization: Basic …` from the URL's credentials, for requests that bring none.
    basic_auth: Option<HeaderValue>,
    local_port: u16,
    pool: Arc<h1_client::Pool>,
    max_message: usize,
    /// POSTs so far (shared by every handle of the proxy).
    posts: Arc<std::sync::atomic::AtomicU64>,
    /// The CORS headers last taped (`http-cors`): taped again only when they change.
    cors: Arc<std::sync::Mutex<Option<Value>>>,
}

/// Runs the proxy until `shutdown` completes (with the reason, e.g. `SIGINT`); `on_ready` gets
/// the URL to give the client. Best run on a one-thread runtime: every request takes the tape
/// lock anyway, and a request's hops between its tasks (client connection, upstream
/// connection, pool) then stay on one thread without wake-ups between workers.
pub async fn record_http(
    cfg: &HttpRecordConfig,
    shutdown: impl Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> Result<RecordOutcome, RecordError> {
    let upstream = checked_upstream(&cfg.upstream)?;
    // Before the tape: a CA file that cannot be used costs no existing tape.
    let connector =
        crate::transport::upstream::connector_to(&upstream.uri, cfg.upstream_ca.as_deref())?;
    let (listener, local) = crate::transport::http::bind(cfg.listen)
        .await
        .map_err(|cause| RecordError::Listen {
            addr: cfg.listen,
            cause,
        })?;
    let tape_err = |cause| RecordError::Tape {
        path: cfg.tape.clone(),
        cause,
    };
    let mut writer = TapeWriter::create(&cfg.tape, cfg.write.clone()).map_err(tape_err)?;
    writer
        // The user stays visible; a password is never recorded.
        .declare_server(ServerDecl::http(
            &cfg.server_label,
            without_password(&cfg.upstream),
        ))
        .map_err(tape_err)?;
    let tape = Recorder::new(writer, &cfg.server_label);
    let proxy = HttpProxy::new(tape.clone(), &upstream, connector, cfg.max_message, local);
    on_ready(&proxy.public_url);
    let reason = proxy.serve(&listener, cfg.limits, shutdown).await;
    let closed = tape
        .close(None, format!("{reason}: recording stopped"))
        .map_err(tape_err)?;
    Ok(RecordOutcome::new(closed, 0))
}

/// The upstream URL, checked (http or https, a host), with the credentials it carries split
/// off for an `Authorization: Basic` header.
pub struct CheckedUpstream {
    uri: Uri,
    basic_auth: Option<HeaderValue>,
}

impl CheckedUpstream {
    /// The upstream's URL, without its credentials.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

/// Checks an upstream URL. Credentials in it (`http://user:pass@host/mcp`) go to the upstream
/// as an `Authorization: Basic` header, never as part of `Host`, and never onto the tape.
pub fn checked_upstream(url: &str) -> Result<CheckedUpstream, RecordError> {
    let (uri, basic_auth) = split_userinfo(url).map_err(|why| RecordError::Upstream {
        url: without_password(url),
        why,
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(RecordError::Upstream {
                url: uri.to_string(),
                why: "the URL must start with http:// or https://".into(),
            })
        }
    }
    if uri.authority().is_none() {
        return Err(RecordError::Upstream {
            url: uri.to_string(),
            why: "no host".into(),
        });
    }
    crate::transport::check_port(&uri).map_err(|why| RecordError::Upstream {
        url: uri.to_string(),
        why,
    })?;
    Ok(CheckedUpstream { uri, basic_auth })
}

/// The `record --url` proxy on a listener, taping through a recorder it is given (its own
/// tape, or an agent run's, under the server's label).
pub struct HttpProxy {
    proxy: Arc<Proxy>,
    /// The URL to give the client: this listener, the upstream's path.
    pub public_url: String,
}

impl HttpProxy {
    /// A proxy to `upstream` for clients of the listener at `local`.
    pub fn new(
        tape: Recorder,
        upstream: &CheckedUpstream,
        connector: crate::transport::upstream::Connector,
        max_message: usize,
        local: std::net::SocketAddr,
    ) -> HttpProxy {
        let uri = &upstream.uri;
        let authority = uri.authority().expect("checked: a host").clone();
        let public_origin = format!("http://{local}");
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let public_url = format!("{public_origin}{path}");
        let proxy = Arc::new(Proxy {
            tape,
            upstream: uri.clone(),
            upstream_origin: format!("{}://{authority}", uri.scheme_str().unwrap_or("http")),
            upstream_host: HeaderValue::from_str(authority.as_str()).ok(),
            basic_auth: upstream.basic_auth.clone(),
            public_origin,
            local_port: local.port(),
            pool: Arc::new(h1_client::Pool::new(connector, uri)),
            max_message,
            posts: Arc::default(),
            cors: Arc::default(),
        });
        HttpProxy { proxy, public_url }
    }

    /// Serves until `shutdown` completes (its output returned); requests in flight get a
    /// moment to finish, long-lived streams are cut.
    pub async fn serve<S: Future>(
        &self,
        listener: &tokio::net::TcpListener,
        limits: crate::transport::http::Limits,
        shutdown: S,
    ) -> S::Output {
        let (out, mut connections) =
            accept_until(listener, limits, self.proxy.clone(), shutdown).await;
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        connections.abort_all();
        out
    }
}

impl Proxy {
    /// Forwards an SSE answer event by event: each complete block is taped, then sent on.
    async fn pump_sse(
        self: Arc<Self>,
        mut body: h1_client::Body,
        facts: Map<String, Value>,
        tx: mpsc::Sender<Result<Bytes, String>>,
    ) {
        let mut parser = SseParser::new(self.max_message);
        let mut broke = None;
        // A client that hangs up on a quiet stream is seen at once, not at the next event:
        // the upstream connection is dropped with it, so the server sees the stream end as it
        // would without mcptape (a reference server refuses a second GET stream of a session
        // with `409` while it thinks the first is open).
        let gone = tx.closed();
        tokio::pin!(gone);
        loop {
            let next = tokio::select! {
                biased;
                next = body.next() => next,
                // Cancel-safe enough: a read cut short loses bytes of a stream that is being
                // dropped anyway.
                () = &mut gone => {
                    self.tape_event("client-gone", json!({ "stream": facts.get("stream") }));
                    return;
                }
            };
            let data = match next {
                Some(Ok(d)) => d,
                Some(Err(e)) => {
                    let why = format!("the SSE stream broke: {e}");
                    self.tape_event("upstream-error", json!({ "error": why }));
                    broke = Some(why);
                    break;
                }
                None => {
                    // Read to its end: the connection can carry the next request.
                    body.finish(&self.pool);
                    break;
                }
            };
            for block in parser.push_bytes(data) {
                let bytes = self.take_block(block, &facts);
                if tx.send(Ok(bytes)).await.is_err() {
                    // The client went away: what passed is on the tape; stop reading upstream.
                    self.tape_event("client-gone", json!({ "stream": facts.get("stream") }));
                    return;
                }
            }
        }
        if let Some(rest) = parser.finish() {
            let _ = tx.send(Ok(rest.raw)).await;
        }
        if let Some(why) = broke {
            // The client sees the stream break as the upstream broke it (no terminating chunk),
            // not end as if the server had finished: an MCP client then fails the call at once
            // instead of waiting for an answer that cannot come.
            cut_after_flush(&tx, why).await;
        }
    }

    /// Tapes the message in an SSE block (if any) and returns the bytes to forward.
    fn take_block(&self, block: sse::Block, facts: &Map<String, Value>) -> Bytes {
        let Some(ev) = &block.event else {
            return block.raw;
        };
        let mut f = facts.clone();
        if let Some(id) = &ev.id {
            f.insert("event_id".into(), json!(id));
        }
        if let Some(name) = &ev.event {
            f.insert("event".into(), json!(name));
        }
        // HTTP+SSE (2024-11-05): the `endpoint` event tells the client where to POST. An
        // absolute URL pointing at the upstream is rewritten to point at the proxy.
        if ev.event.as_deref() == Some("endpoint") {
            let data = ev.data.clone().unwrap_or_default();
            self.tape_event("sse-endpoint", json!({ "endpoint": data }));
            if let Some(rest) = data
                .strip_prefix(&self.upstream_origin)
                .filter(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#']))
            {
                let rewritten = format!("{}{rest}", self.public_origin);
                return Bytes::from(sse::encode(Some("endpoint"), ev.id.as_deref(), &rewritten));
            }
            return block.raw;
        }
        match &ev.data {
            Some(data) if !data.trim().is_empty() => {
                self.tape_message(Dir::S2C, data.as_bytes(), &mut f)
            }
            _ => {
                if ev.id.is_some() || ev.retry.is_some() {
                    // A priming event (an id with no data) or a retry hint: a fact for resumption.
                    f.insert("retry".into(), json!(ev.retry));
                    self.tape_event("sse-priming", Value::Object(f));
                }
            }
        }
        block.raw
    }

    /// `facts` is lent to the recorder as a `Value` and given back unchanged (no copy of it).
    fn tape_message(&self, dir: Dir, bytes: &[u8], facts: &mut Map<String, Value>) {
        let lent = Value::Object(std::mem::take(facts));
        self.tape.message(dir, bytes, Some(&lent));
        if let Value::Object(m) = lent {
            *facts = m;
        }
    }

    /// An answer the upstream compressed although asked not to: forwarded as it came, read to
    /// its end first (a compressed stream cannot be cut into events), and on the tape as an
    /// `upstream-error` event that says so, never as bytes.
    async fn pass_encoded(
        &self,
        mut rbody: h1_client::Body,
        coding: &str,
        facts: HttpFacts,
        respond: impl FnOnce(RespBody) -> Response<RespBody>,
    ) -> Response<RespBody> {
        let why = format!(
            "mcptape: the upstream {} answered with Content-Encoding: {coding} although asked for \
             identity; forwarded, not taped (mcptape cannot read or redact compressed messages)",
            self.upstream
        );
        crate::diag!("{why}");
        let mut details = facts.to_map();
        details.insert("error".into(), json!(why));
        self.tape_event("upstream-error", Value::Object(details));
        match rbody.collect(self.max_message).await {
            Ok(b) => {
                rbody.finish(&self.pool);
                respond(crate::transport::http::whole_body(b))
            }
            Err(why) => {
                self.tape_event("upstream-error", json!({ "error": why }));
                plain(StatusCode::BAD_GATEWAY, &format!("mcptape: {why}"))
            }
        }
    }

    /// The path (and query) on the upstream that `location` names, if it names one: a path
    /// from the root, or an absolute URL of the upstream's own origin.
    fn upstream_path<'a>(&self, location: &'a str) -> Option<&'a str> {
        if location.starts_with('/') && !location.starts_with("//") {
            return Some(location);
        }
        let rest = location.strip_prefix(self.upstream_origin.as_str())?;
        match rest.chars().next() {
            None => Some("/"),
            Some('/') => Some(rest),
            _ => None,
        }
    }

    fn tape_event(&self, what: &str, details: impl Into<Value>) {
        self.tape.event(what, details.into());
    }

    /// Tapes what a browser needs to be answered again (`transport::cors`): a preflight's
    /// answer (`http-options`) always, other answers' CORS headers when they first come or
    /// change (`http-cors`). An answer without them costs one header lookup.
    fn tape_cors(&self, method: &Method, request: &HeaderMap, answer: &HeaderMap, status: u16) {
        if *method == Method::OPTIONS {
            let details = crate::transport::cors::taped(request, answer, status)
                .unwrap_or_else(|| json!({ "status": status }));
            self.tape_event("http-options", details);
            return;
        }
        if !crate::transport::cors::carried(answer) {
            return;
        }
        let Some(details) = crate::transport::cors::taped(request, answer, status) else {
            return;
        };
        let mut last = self.cors.lock().unwrap_or_else(|e| e.into_inner());
        // The status is the answer's, not part of the CORS headers: compared without it.
        let same = last.as_ref().is_some_and(|l| {
            l["headers"] == details["headers"] && l["reflected"] == details["reflected"]
        });
        if !same {
            self.tape_event("http-cors", details.clone());
            *last = Some(details);
        }
    }

    /// A GET or a DELETE (`http-get`, `http-delete`): the request's facts, and the answer's
    /// (`status`, its own `content_type`, `allow`, `session`, and up to 64 KiB of `body` when
    /// it had one) when there was an answer.
    fn tape_get_or_delete(
        &self,
        method: &Method,
        mut facts: Map<String, Value>,
        body: Option<&[u8]>,
    ) {
        if let Some(body) = body.filter(|b| !b.is_empty()) {
            facts.insert(
                "body".into(),
                json!(String::from_utf8_lossy(
                    &body[..body.len().min(ERROR_BODY_MAX)]
                )),
            );
        }
        let what = if *method == Method::GET {
            "http-get"
        } else {
            "http-delete"
        };
        self.tape_event(what, Value::Object(facts));
    }

    fn clone_handle(&self) -> Arc<Proxy> {
        Arc::new(Proxy {
            tape: self.tape.clone(),
            upstream: self.upstream.clone(),
            public_origin: self.public_origin.clone(),
            upstream_origin: self.upstream_origin.clone(),
            upstream_host: self.upstream_host.clone(),
            basic_auth: self.basic_auth.clone(),
            local_port: self.local_port,
            pool: self.pool.clone(),
            max_message: self.max_message,
            posts: self.posts.clone(),
            cors: self.cors.clone(),
        })
    }
}

/// The upstream URL without its credentials, and those as an `Authorization: Basic` value.
fn split_userinfo(url: &str) -> Result<(Uri, Option<HeaderValue>), String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let bare = if scheme.is_empty() {
        format!("{host}{tail}")
    } else {
        format!("{scheme}://{host}{tail}")
    };
    let uri: Uri = bare
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
    let auth = match userinfo {
        None => None,
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let decode = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
            let mut plain = decode(user);
            plain.push(b':');
            plain.extend(decode(pass));
            let value = format!(
                "Basic {}",
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, plain)
            );
            let mut v = HeaderValue::from_str(&value).map_err(|e| e.to_string())?;
            v.set_sensitive(true);
            Some(v)
        }
    };
    Ok((uri, auth))
}

/// A URL as it may be shown and taped: a password in it dropped (the user stays).
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}@{host}{}", &rest[end..])
        }
        None => url.to_string(),
    }
}

/// The upstream's scheme and authority with the client's path and query (`None`: not a URI).
pub(crate) fn upstream_uri(upstream: &Uri, pq: &str) -> Option<Uri> {
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = upstream.scheme().cloned();
    parts.authority = upstream.authority().cloned();
    parts.path_and_query = Some(pq.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// What the tape keeps of a request's head: method, path and the headers readers use.
pub(crate) fn request_facts(
    method: &Method,
    headers: &HeaderMap,
    path: &str,
) -> Map<String, Value> {
    HttpFacts::request(method, headers, path).to_map()
}

/// Tapes the message a client's POST carried (the `n`th POST of the recording), its facts
/// given the POST's number and the id of the request it carried: what the answer stream, and
/// everything on it, belongs to. The number pairs them exactly, also where ids repeat (every
/// session starts its ids again; the stateless era sends many POSTs with one id at once).
pub fn tape_post(tape: &Recorder, n: u64, body: &[u8], facts: &mut HttpFacts) {
    facts.post = Some(n);
    let c = crate::wire::classify::classify_ref(body);
    if let (Kind::Request, Some(id)) = (c.kind, c.id) {
        facts.request_id = serde_json::from_str::<Value>(id).ok();
    }
    if !body.is_empty() {
        // The writer needs the same classification: it is handed on, not made again.
        tape.message_known(Dir::C2S, body, Some(&*facts), Some(c));
    }
}

/// The facts of an answer that carried no message, as its event tapes them: the request's,
/// with the answer's own content type in place of the request's (none when it sent none).
fn answer_facts(facts: &HttpFacts, content_type: &str) -> Map<String, Value> {
    let mut map = facts.to_map();
    map.remove("content_type");
    if !content_type.is_empty() {
        map.insert("content_type".into(), json!(content_type));
    }
    map
}

/// A JSON-RPC error for the request in `body` (its id if it had one), so the client sees why.
fn jsonrpc_error(status: StatusCode, body: &[u8], message: &str) -> Response<RespBody> {
    let id = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null);
    let msg = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}});
    let mut r = Response::new(crate::transport::http::whole_body(Bytes::from(
        msg.to_string(),
    )));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

impl crate::transport::http::Handler for Proxy {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        let (parts, body) = req.into_parts();
        let facts_in = HttpFacts::request(&parts.method, &parts.headers, parts.uri.path());
        let body = match collect(body, self.max_message).await {
            Ok(b) => b,
            Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
        };
        let mut facts_in = facts_in;
        if parts.method == Method::POST {
            let n = self
                .posts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            tape_post(&self.tape, n, &body, &mut facts_in);
        }
        // A GET or a DELETE is taped with its answer (`http-get`, `http-delete`), once the
        // upstream has answered.
        let get_or_delete = matches!(parts.method, Method::GET | Method::DELETE);
        // The upstream request: same method, path and query (in origin form, as sent on a
        // connection to the upstream), headers minus hop-by-hop ones.
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        // The client's header map is moved, not rebuilt: only the hop-by-hop ones come out.
        let mut headers = parts.headers;
        crate::transport::upstream::strip_hop_by_hop(&mut headers);
        // An HTTP client (the Python SDK's among them) asks for gzip, and a CDN or a server's
        // middleware gives it; the client gets the answers plain, which every client takes.
        crate::transport::upstream::ask_uncompressed(&mut headers);
        if let Some(a) = &self.upstream_host {
            headers.insert(hyper::header::HOST, a.clone());
        }
        if let Some(auth) = &self.basic_auth {
            if !headers.contains_key(hyper::header::AUTHORIZATION) {
                headers.insert(hyper::header::AUTHORIZATION, auth.clone());
            }
        }
        let mut target = std::borrow::Cow::Borrowed(target);
        let mut hops = 0;
        let answer = loop {
            let answer = match self
                .pool
                .send(&parts.method, &target, &headers, &body)
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    let why = format!(
                        "mcptape: the upstream {} did not answer: {}",
                        self.upstream,
                        crate::transport::upstream::error_chain(&*e)
                    );
                    if get_or_delete {
                        self.tape_get_or_delete(&parts.method, facts_in.to_map(), None);
                    }
                    self.tape_event("upstream-error", json!({ "error": why }));
                    crate::diag!("{why}");
                    return jsonrpc_error(StatusCode::BAD_GATEWAY, &body, &why);
                }
            };
            // A redirect to another path of the upstream's own (`/mcp/` → `/mcp`, as the Python
            // SDK's server answers) is followed here, the request sent again as it was: the
            // client gets the answer and the tape one exchange. Passed on, it would send the
            // client to the upstream's origin, past the recorder (or the client refuses it).
            let status = answer.status.as_u16();
            let next = (hops < MAX_REDIRECTS && matches!(status, 307 | 308))
                .then(|| answer.headers.get(hyper::header::LOCATION))
                .flatten()
                .and_then(|l| l.to_str().ok())
                .and_then(|l| self.upstream_path(l))
                .map(str::to_string);
            let Some(next) = next else {
                break answer;
            };
            let mut skipped = answer.body;
            if skipped.collect(ERROR_BODY_MAX).await.is_ok() {
                skipped.finish(&self.pool);
            }
            self.tape_event(
                "http-redirect",
                json!({ "status": status, "from": &*target, "to": &next }),
            );
            target = std::borrow::Cow::Owned(next);
            hops += 1;
        };
        let content_type = answer.content_type().to_ascii_lowercase();
        let h1_client::Answer {
            status,
            headers: mut out_headers,
            body: mut rbody,
        } = answer;
        let mut facts = facts_in;
        facts.status = Some(status.as_u16());
        if let Some(sid) = out_headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            facts.session = Some(sid.to_string());
        }
        if !content_type.is_empty() {
            facts.content_type = Some(content_type.clone());
        }
        // What a refusal says it would take (`405` with `Allow: POST`): play answers the same.
        if let Some(allow) = out_headers
            .get(hyper::header::ALLOW)
            .and_then(|v| v.to_str().ok())
        {
            facts.allow = Some(allow.to_string());
        }
        self.tape_cors(&parts.method, &headers, &out_headers, status.as_u16());
        crate::transport::upstream::strip_hop_by_hop(&mut out_headers);
        // A redirect not followed above (a `303`, too many hops) that points at the upstream
        // points at the proxy instead, as the legacy `endpoint` event does.
        let local = out_headers
            .get(hyper::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.strip_prefix(self.upstream_origin.as_str()))
            .filter(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#']))
            .and_then(|rest| HeaderValue::from_str(&format!("{}{rest}", self.public_origin)).ok());
        if let Some(l) = local {
            out_headers.insert(hyper::header::LOCATION, l);
        }
        // An upstream that compresses all the same: its bytes go to the client as they are,
        // and the tape says what passed instead of holding bytes it cannot read or redact.
        let encoded = out_headers
            .get(hyper::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
            .map(str::to_string);
        let respond = |body: RespBody| {
            let mut r = Response::new(body);
            *r.status_mut() = status;
            *r.headers_mut() = out_headers;
            r
        };
        let sse = content_type.starts_with("text/event-stream");
        if get_or_delete && (sse || encoded.is_some()) {
            // No body to tape: a stream (its messages are taped as they come), or bytes
            // mcptape cannot read.
            self.tape_get_or_delete(&parts.method, answer_facts(&facts, &content_type), None);
        }
        if let Some(coding) = encoded {
            return self.pass_encoded(rbody, &coding, facts, respond).await;
        }
        if sse {
            facts.stream = Some(if parts.method == Method::GET {
                "get"
            } else {
                "post"
            });
            let facts = facts.to_map();
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            let proxy = self.clone_handle();
            tokio::spawn(async move { proxy.pump_sse(rbody, facts, tx).await });
            return respond(BodyExt::boxed(CuttableBody { rx }));
        }
        let body = match rbody.collect(self.max_message).await {
            Ok(b) => {
                rbody.finish(&self.pool);
                b
            }
            Err(why) => {
                if get_or_delete {
                    let facts = answer_facts(&facts, &content_type);
                    self.tape_get_or_delete(&parts.method, facts, None);
                }
                self.tape_event("upstream-error", json!({ "error": why }));
                return jsonrpc_error(StatusCode::BAD_GATEWAY, &body, &format!("mcptape: {why}"));
            }
        };
        if get_or_delete {
            // Its answer whatever it is, a JSON-RPC error too (the reference servers refuse a
            // GET or a DELETE of a session they do not have with one): it answers no message.
            let facts = answer_facts(&facts, &content_type);
            self.tape_get_or_delete(&parts.method, facts, Some(&body));
        } else if !body.is_empty() && content_type.starts_with("application/json") {
            self.tape.message(Dir::S2C, &body, Some(&facts));
        } else if !status.is_success() {
            // A refusal without a JSON-RPC answer (`405`, a plain-text `400`, a `404` for an
            // unknown session): its status, headers that matter and body, for play to give again.
            // The content type is the answer's own, none when it sent none: the facts' is the
            // request's then, and play would answer with a type the server never sent.
            let mut facts = answer_facts(&facts, &content_type);
            facts.insert(
                "body".into(),
                json!(String::from_utf8_lossy(
                    &body[..body.len().min(ERROR_BODY_MAX)]
                )),
            );
            self.tape_event("http-error", Value::Object(facts));
        } else if parts.method == Method::POST {
            // A POST answered without a message (the `202 Accepted` to a notification or a
            // response): how, for play to answer the same.
            let mut facts = answer_facts(&facts, &content_type);
            if !body.is_empty() {
                facts.insert(
                    "body".into(),
                    json!(String::from_utf8_lossy(
                        &body[..body.len().min(ERROR_BODY_MAX)]
                    )),
                );
            }
            self.tape_event("http-accepted", Value::Object(facts));
        }
        respond(crate::transport::http::whole_body(body))
    }
}
