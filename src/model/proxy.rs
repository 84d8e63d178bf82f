//! The model proxy in record mode: every request is taped (its body through the redactor),
//! forwarded to the upstream with its headers (API keys forwarded, never taped), and the answer
//! taped and forwarded — a stream event by event, each the moment it is complete and on the
//! tape, nothing held back to the end of the stream.

use super::provider::{self, Provider, Summary};
use crate::record::Recorder;
use crate::tape::writer::ModelFacts;
use crate::transport::coding;
use crate::transport::h1_client::{self, Buffered, Pool};
use crate::transport::http::{collect, full, CuttableBody, Handler, RespBody};
use crate::transport::sse::{Block, SseParser};
use crate::transport::upstream::strip_hop_by_hop;
use crate::wire::Dir;
use bytes::Bytes;
use bytestring::ByteString;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Stream events in flight between the upstream reader and the client, per call: the reader
/// waits when the client is slower (the queue bounds what one stream holds in memory).
const EVENT_QUEUE: usize = 64;

/// How long the answer's head waits for the stream's first event, so both are taped in one
/// write and go out to the client in one (the upstream sends them together; sent apart, the
/// client wakes twice for one event). Only a stream whose first event is slower than this gets
/// its head taped and forwarded alone first.
const FIRST_EVENT_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// A model call's facts, the same on each of its lines.
#[derive(Clone)]
struct Call {
    n: u64,
    provider: Provider,
    started: Instant,
}

impl Call {
    /// Tapes one part of this call.
    fn tape(
        &self,
        tape: &Recorder,
        dir: Dir,
        part: &str,
        facts: &(impl ModelFacts + ?Sized),
        body: Option<&[u8]>,
        http: Option<&Value>,
    ) {
        tape.model(dir, self.n, part, facts, body, http);
    }

    fn us_since(&self, t: Instant) -> u64 {
        u64::try_from(t.duration_since(self.started).as_micros()).unwrap_or(u64::MAX)
    }
}

/// Records model calls to `tape` and forwards them to `upstream`.
pub struct ModelProxy {
    tape: Recorder,
    /// The upstream's base URL: its scheme, host and path prefix (no trailing `/`).
    upstream: Uri,
    prefix: String,
    host: Option<HeaderValue>,
    pool: Arc<Pool>,
    max_message: usize,
    calls: AtomicU64,
    /// Of them, Code Assist's setup calls.
    setup: AtomicU64,
}

impl ModelProxy {
    /// A proxy taping through `tape` (declared as a model API already) to `upstream`, over
    /// keep-alive connections `connector` opens.
    pub fn new(
        tape: Recorder,
        upstream: Uri,
        connector: crate::transport::upstream::Connector,
        max_message: usize,
    ) -> ModelProxy {
        let prefix = upstream.path().trim_end_matches('/').to_string();
        let host = upstream
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        ModelProxy {
            tape,
            pool: Arc::new(Pool::new(connector, &upstream)),
            upstream,
            prefix,
            host,
            max_message,
            calls: AtomicU64::new(0),
            setup: AtomicU64::new(0),
        }
    }

    /// Model calls taped so far; Code Assist's setup calls (Gemini CLI signed in with
    /// Google), taped beside them, are not model calls: [`ModelProxy::setup_calls`].
    pub fn calls(&self) -> u64 {
        self.calls
            .load(Ordering::Relaxed)
            .saturating_sub(self.setup_calls())
    }

    /// Code Assist's setup calls taped so far (`loadCodeAssist`, `retrieveUserQuota`…).
    pub fn setup_calls(&self) -> u64 {
        self.setup.load(Ordering::Relaxed)
    }

    /// The upstream request's target in origin form (the path prefix, then the client's path
    /// and query), as sent on a connection of the pool; `None`: not a URI.
    fn upstream_target(&self, path_and_query: &str) -> Option<PathAndQuery> {
        // Through [`upstream_uri`], which the fuzz target checks.
        let uri = upstream_uri(&self.upstream, &self.prefix, path_and_query)?;
        uri.path_and_query().cloned()
    }

    fn error(&self, provider: Provider, status: StatusCode, message: &str) -> Response<RespBody> {
        let body = provider::error_body(provider, status.as_u16(), message);
        full(status, "application/json", body.to_string())
    }

    async fn forward(&self, req: Request<Incoming>) -> Response<RespBody> {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let route = provider::route(&path);
        let body = match collect(body, self.max_message).await {
            Ok(b) => b,
            Err(why) => {
                return self.error(route.provider, StatusCode::PAYLOAD_TOO_LARGE, &why);
            }
        };
        let mut http = json!({"method": parts.method.as_str(), "path": path});
        // A compressed body is taped (redacted, matched) decoded, and forwarded as it came.
        let decoded = match coding::decode(&parts.headers, &body, self.max_message) {
            Ok(d) => d,
            Err(why) => {
                // The path without its query: a query may hold a key (Gemini's `?key=`).
                let shown = path.split_once('?').map_or(path.as_str(), |(p, _)| p);
                crate::diag!("mcptape: model request {shown}: {why}; taped as it came");
                http["content_encoding"] = json!(coding::listed(&parts.headers));
                http["decode_error"] = json!(why);
                None
            }
        };
        let plain: &[u8] = match &decoded {
            Some(d) => {
                http["content_encoding"] = json!(d.coding);
                &d.body
            }
            None => &body,
        };
        let parsed = provider::RequestHead::of(plain);
        if provider::is_code_assist_setup(&route.endpoint) {
            self.setup.fetch_add(1, Ordering::Relaxed);
        }
        let call = Call {
            n: self.calls.fetch_add(1, Ordering::Relaxed) + 1,
            provider: route.provider,
            started,
        };
        let facts = RequestFacts::of(&route, &parsed);
        call.tape(
            &self.tape,
            Dir::C2S,
            "request",
            &facts,
            Some(plain),
            Some(&http),
        );

        let Some(target) = self.upstream_target(&path) else {
            return self.error(route.provider, StatusCode::BAD_REQUEST, "bad request path");
        };
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        // The answer is taped and parsed as it streams.
        crate::transport::upstream::ask_uncompressed(&mut headers);
        if let Some(h) = &self.host {
            headers.insert(hyper::header::HOST, h.clone());
        }
        let answer = match self
            .pool
            .send(&parts.method, target.as_str(), &headers, &body)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let why = format!(
                    "mcptape: the model API {} did not answer: {}",
                    self.upstream,
                    crate::transport::upstream::error_chain(&*e)
                );
                let mut f = Map::new();
                f.insert("error".into(), json!(why));
                f.insert("total_us".into(), json!(call.us_since(Instant::now())));
                call.tape(&self.tape, Dir::S2C, "end", &f, None, None);
                crate::diag!("{why}");
                return self.error(route.provider, StatusCode::BAD_GATEWAY, &why);
            }
        };
        let content_type = answer.content_type().to_string();
        let h1_client::Answer {
            status,
            headers: mut out_headers,
            body: mut rbody,
        } = answer;
        let http = json!({"status": status.as_u16(), "content_type": content_type});
        strip_hop_by_hop(&mut out_headers);
        let respond = |body: RespBody| {
            let mut r = Response::new(body);
            *r.status_mut() = status;
            *r.headers_mut() = out_headers;
            r
        };
        let ttfb = call.us_since(Instant::now());
        if content_type.starts_with("text/event-stream") {
            let mut f = Map::new();
            f.insert("ttfb_us".into(), json!(ttfb));
            // The head and the first event are taped here, in one write, and returned together:
            // no task or channel between the upstream's first event and the client.
            let mut pump = Pump::new(self.tape.clone(), call, rbody, self.max_message);
            let first = pump.first(&f, &http).await;
            let (tx, rx) = mpsc::channel(EVENT_QUEUE);
            tokio::spawn(pump.run(tx, self.pool.clone()));
            let first = first.map(Ok);
            let rest = CuttableBody { rx };
            return respond(BodyExt::boxed(FirstThen { first, rest }));
        }
        let answer = match rbody.collect(self.max_message).await {
            Ok(b) => {
                // Read to its end: the connection can carry the next request.
                rbody.finish(&self.pool);
                b
            }
            Err(why) => {
                let mut f = Map::new();
                f.insert("error".into(), json!(why));
                call.tape(&self.tape, Dir::S2C, "end", &f, None, Some(&http));
                return self.error(route.provider, StatusCode::BAD_GATEWAY, &why);
            }
        };
        let mut f = Map::new();
        f.insert("ttfb_us".into(), json!(ttfb));
        f.insert("total_us".into(), json!(call.us_since(Instant::now())));
        if let Ok(v) = serde_json::from_slice::<Value>(&answer) {
            let mut s = Summary::default();
            s.add(call.provider, &v);
            f.insert("summary".into(), s.to_json());
        }
        call.tape(
            &self.tape,
            Dir::S2C,
            "response",
            &f,
            Some(&answer),
            Some(&http),
        );
        respond(
            Full::new(answer)
                .map_err(|never| -> crate::transport::http::BodyError { match never {} })
                .boxed(),
        )
    }
}

/// The upstream's scheme and authority, its path prefix, then the client's path and query
/// (`None`: not a URI).
pub(crate) fn upstream_uri(upstream: &Uri, prefix: &str, path_and_query: &str) -> Option<Uri> {
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = upstream.scheme().cloned();
    parts.authority = upstream.authority().cloned();
    parts.path_and_query = Some(format!("{prefix}{path_and_query}").parse().ok()?);
    Uri::from_parts(parts).ok()
}

impl Handler for ModelProxy {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        if req.method() == hyper::Method::HEAD {
            return self.preconnect(req).await;
        }
        self.forward(req).await
    }
}

impl ModelProxy {
    /// A `HEAD` (Claude Code's preconnect): forwarded, not taped — it asks nothing of the
    /// model, and play answers it by itself.
    async fn preconnect(&self, req: Request<Incoming>) -> Response<RespBody> {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let Some(target) = self.upstream_target(path) else {
            return full(StatusCode::BAD_REQUEST, "text/plain", "bad request path");
        };
        let mut headers = req.headers().clone();
        strip_hop_by_hop(&mut headers);
        if let Some(h) = &self.host {
            headers.insert(hyper::header::HOST, h.clone());
        }
        match self
            .pool
            .send(&hyper::Method::HEAD, target.as_str(), &headers, &[])
            .await
        {
            Ok(mut r) => {
                let status = r.status;
                // A HEAD answer has no body: the connection is free for the next request.
                r.body.finish(&self.pool);
                let mut out = full(status, "text/plain", Bytes::new());
                out.headers_mut().remove(hyper::header::CONTENT_TYPE);
                out
            }
            Err(_) => full(StatusCode::BAD_GATEWAY, "text/plain", Bytes::new()),
        }
    }
}

/// A request's facts, written as the map of them would be (its keys in order) without
/// building it: the map's nodes and key strings cost more than writing the facts, on the path
/// every request waits on.
struct RequestFacts<'a> {
    endpoint: &'a str,
    model: Option<&'a str>,
    provider: &'static str,
    stream: bool,
}

impl<'a> RequestFacts<'a> {
    fn of(route: &'a provider::Route, parsed: &'a provider::RequestHead) -> RequestFacts<'a> {
        RequestFacts {
            endpoint: &route.endpoint,
            model: provider::model_of(route, parsed),
            provider: route.provider.name(),
            stream: provider::streams(route, parsed),
        }
    }
}

impl ModelFacts for RequestFacts<'_> {
    fn push_facts(&self, p: &mut Vec<u8>) {
        let string = crate::wire::json_out::push_str;
        p.extend_from_slice(b",\"endpoint\":");
        string(p, self.endpoint);
        if let Some(m) = self.model {
            p.extend_from_slice(b",\"model\":");
            string(p, m);
        }
        p.extend_from_slice(b",\"provider\":");
        string(p, self.provider);
        p.extend_from_slice(if self.stream {
            b",\"stream\":true"
        } else {
            b",\"stream\":false"
        });
    }
}

/// A stream's body: the event already received, then the rest from the pump.
struct FirstThen {
    first: Option<Result<Bytes, String>>,
    rest: CuttableBody,
}

impl hyper::body::Body for FirstThen {
    type Data = Bytes;
    type Error = crate::transport::http::BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(first) = self.first.take() {
            return std::task::Poll::Ready(Some(
                first.map(hyper::body::Frame::data).map_err(Into::into),
            ));
        }
        std::pin::Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// One streamed answer on its way from the upstream to the client: each complete event is
/// taped, then forwarded. A stream that breaks is taped as cut and cut for the client too.
struct Pump {
    tape: Recorder,
    call: Call,
    body: h1_client::Body,
    parser: SseParser,
    summary: Summary,
    events: u64,
    /// Events read with the first one, not yet taped or forwarded.
    backlog: Vec<Block>,
    /// The first event's data, taped and forwarded, not yet read for the summary.
    first_data: Option<ByteString>,
    cut: Option<String>,
    /// The upstream's body has ended (or broken).
    ended: bool,
}

impl Pump {
    fn new(tape: Recorder, call: Call, body: h1_client::Body, max: usize) -> Pump {
        Pump {
            tape,
            call,
            body,
            parser: SseParser::new(max),
            summary: Summary::default(),
            events: 0,
            backlog: Vec::new(),
            first_data: None,
            cut: None,
            ended: false,
        }
    }

    /// Reads until the stream's first event is complete, for at most [`FIRST_EVENT_WAIT`], and
    /// tapes the answer's head (`head`, `http`) with it in one write: its bytes, to go out with
    /// the head. `None`: the head is taped alone (no event in time, or none before the end).
    async fn first(&mut self, head: &Map<String, Value>, http: &Value) -> Option<Bytes> {
        let deadline = tokio::time::Instant::now() + FIRST_EVENT_WAIT;
        let mut blocks = Vec::new();
        while blocks.is_empty() && !self.ended {
            // The first chunk often came with the head: it is looked for without a timer
            // first (arming one wakes the runtime's driver, a system call), and waited for
            // with one only when the upstream has not sent it yet.
            let data = match self.body.buffered() {
                Buffered::Data(d) => d,
                Buffered::End => {
                    self.ended = true;
                    break;
                }
                Buffered::Broke(e) => {
                    self.broke(&e);
                    break;
                }
                Buffered::Nothing => {
                    // Cancel-safe (`Body::next`): a read the timer interrupts loses nothing.
                    match tokio::time::timeout_at(deadline, self.body.next()).await {
                        Err(_) => break,
                        Ok(None) => {
                            self.ended = true;
                            break;
                        }
                        Ok(Some(Err(e))) => {
                            self.broke(&e);
                            break;
                        }
                        Ok(Some(Ok(d))) => d,
                    }
                }
            };
            blocks = self.parser.push_bytes(data);
        }
        if blocks.is_empty() {
            self.call
                .tape(&self.tape, Dir::S2C, "response", head, None, Some(http));
            return None;
        }
        // The first event goes out alone with the head, the moment both are taped: the client
        // waits for it (time to first token); the rest of the read follows from the task.
        self.backlog = blocks.split_off(1);
        let mut first = blocks.swap_remove(0);
        let (f, data) = block_facts(&mut first);
        self.tape.model_parts(
            Dir::S2C,
            self.call.n,
            [
                ("response", head as &dyn ModelFacts, None, Some(http)),
                ("event", &f, data.as_deref().map(str::as_bytes), None),
            ],
        );
        self.events += 1;
        self.first_data = data;
        Some(first.raw)
    }

    fn broke(&mut self, e: &h1_client::Error) {
        self.cut = Some(format!("the upstream stream broke: {e}"));
        self.ended = true;
    }

    /// Tapes and forwards the rest of the stream, then tapes its end; the connection goes back
    /// to `pool` once the answer has been read to its end.
    async fn run(mut self, tx: mpsc::Sender<Result<Bytes, String>>, pool: Arc<Pool>) {
        let mut client_gone = false;
        if self.events > 0 {
            // The head and first event were just written to the client, which is waiting for
            // them (time to first token); what follows here (the summary, the backlog) is not.
            // Step aside once so a client sharing this CPU reads them first: without it the
            // scheduler often ran this task on, then the upstream, and the client last
            // (measured: p50 of the first event 92 → 84 µs, p90 320 → 227 µs, bench pinned to
            // one CPU). A no-op when nothing else waits for this CPU.
            std::thread::yield_now();
        }
        if let Some(d) = self.first_data.take() {
            add_to_summary(&self.call, &d, &mut self.summary);
        }
        let backlog = std::mem::take(&mut self.backlog);
        self.pass(backlog, &tx, &mut client_gone).await;
        while !self.ended {
            let data = match self.body.next().await {
                None => {
                    self.ended = true;
                    break;
                }
                Some(Ok(d)) => d,
                Some(Err(e)) => {
                    self.broke(&e);
                    break;
                }
            };
            let mut gathered = data.len();
            let mut blocks = self.parser.push_bytes(data);
            if self.events == 0 && !blocks.is_empty() {
                // A first event later than the head's wait: it goes out alone, the moment it
                // is taped (taping the rest of the read would delay it).
                let rest = blocks.split_off(1);
                self.pass(blocks, &tx, &mut client_gone).await;
                blocks = rest;
            } else {
                // A chunked answer comes a chunk at a time (a provider's chunk is one event):
                // the chunks already read from the socket are gathered too, so that everything
                // of one upstream read is taped in one write and forwarded in one piece.
                while gathered < GATHER_MAX {
                    match self.body.buffered() {
                        Buffered::Data(more) => {
                            gathered += more.len();
                            self.parser.push_bytes_into(more, &mut blocks);
                        }
                        Buffered::Nothing => break,
                        Buffered::End => {
                            self.ended = true;
                            break;
                        }
                        Buffered::Broke(e) => {
                            self.broke(&e);
                            break;
                        }
                    }
                }
            }
            self.pass(blocks, &tx, &mut client_gone).await;
        }
        if self.cut.is_none() {
            // Read to its end: the connection can carry the next request.
            self.body.finish(&pool);
        }
        let (tape, call) = (&self.tape, &self.call);
        if let Some(mut block) = self.parser.finish() {
            // An event the stream ended in the middle of: forwarded, taped as it stood.
            let (f, data) = block_facts(&mut block);
            call.tape(
                tape,
                Dir::S2C,
                "event",
                &f,
                data.as_deref().map(str::as_bytes),
                None,
            );
            self.events += 1;
            if let Some(d) = &data {
                add_to_summary(call, d, &mut self.summary);
            }
            if !client_gone {
                let _ = tx.send(Ok(block.raw)).await;
            }
            self.cut
                .get_or_insert_with(|| "the stream ended inside an event".into());
        }
        let mut f = Map::new();
        f.insert("events".into(), json!(self.events));
        f.insert("total_us".into(), json!(call.us_since(Instant::now())));
        f.insert("summary".into(), self.summary.to_json());
        if let Some(why) = &self.cut {
            f.insert("cut".into(), json!(why));
        }
        call.tape(tape, Dir::S2C, "end", &f, None, None);
        if let Some(why) = self.cut {
            crate::transport::http::cut_after_flush(&tx, why).await;
        }
    }

    /// Tapes `blocks` (the events of one read) in one write, then forwards them in one piece,
    /// as a byte relay forwards a read: not a system call each way per event. Their data is
    /// read for the call's summary only after they have gone out.
    async fn pass(
        &mut self,
        mut blocks: Vec<Block>,
        tx: &mpsc::Sender<Result<Bytes, String>>,
        client_gone: &mut bool,
    ) {
        if blocks.is_empty() {
            return;
        }
        let taped: Vec<_> = blocks.iter_mut().map(block_facts).collect();
        self.tape.model_parts(
            Dir::S2C,
            self.call.n,
            taped.iter().map(|(f, data)| {
                let f: &dyn ModelFacts = f;
                ("event", f, data.as_deref().map(str::as_bytes), None)
            }),
        );
        self.events += taped.len() as u64;
        let out = match <[_; 1]>::try_from(blocks) {
            Ok([one]) => one.raw,
            Err(blocks) => {
                let mut all = Vec::with_capacity(blocks.iter().map(|b| b.raw.len()).sum());
                for b in &blocks {
                    all.extend_from_slice(&b.raw);
                }
                Bytes::from(all)
            }
        };
        if !*client_gone && tx.send(Ok(out)).await.is_err() {
            // The client went away: keep reading, so the tape holds the whole answer.
            *client_gone = true;
        }
        for d in taped.iter().filter_map(|(_, d)| d.as_deref()) {
            add_to_summary(&self.call, d, &mut self.summary);
        }
    }
}

/// At most this many bytes of an answer are gathered into one write to the tape and one to
/// the client (a fast upstream's backlog is still passed on in pieces).
const GATHER_MAX: usize = 64 * 1024;

/// Adds the tokens, tools and stop reason of one event's data to `summary`.
fn add_to_summary(call: &Call, data: &str, summary: &mut Summary) {
    if may_summarize(call.provider, data) {
        if let Ok(v) = serde_json::from_str::<Value>(data) {
            summary.add(call.provider, &v);
        }
    }
}

/// Whether an event's data can hold anything [`Summary::add`] reads: a key or value it looks
/// for, quoted as JSON writes it (or any `\u` escape, which could spell one). Most events are
/// text deltas, which hold none, and are not parsed (measured: a fifth of the proxy's
/// instructions per event went into parsing and dropping them).
fn may_summarize(provider: Provider, data: &str) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: a memmem searcher costs more to build than to run over a small event.
    type Needles = LazyLock<Vec<Finder<'static>>>;
    fn needles(words: &'static [&'static str]) -> Vec<Finder<'static>> {
        words.iter().map(|w| Finder::new(w.as_bytes())).collect()
    }
    static ANTHROPIC: Needles = LazyLock::new(|| {
        needles(&[
            "\"usage\"",
            "\"input_tokens\"",
            "\"stop_reason\"",
            "\"tool_use\"",
        ])
    });
    static OPENAI_CHAT: Needles =
        LazyLock::new(|| needles(&["\"usage\"", "\"tool_calls\"", "\"finish_reason\""]));
    static OPENAI_RESPONSES: Needles =
        LazyLock::new(|| needles(&["\"usage\"", "\"status\"", "\"function_call\""]));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    let needles: &[Finder<'static>] = match provider {
        Provider::Anthropic => &ANTHROPIC,
        Provider::OpenAiChat => &OPENAI_CHAT,
        Provider::OpenAiResponses => &OPENAI_RESPONSES,
        Provider::Gemini => return true,
        Provider::Other => return false,
    };
    let d = data.as_bytes();
    ESCAPE.find(d).is_some() || needles.iter().any(|n| n.find(d).is_some())
}

/// What the tape keeps of one block of a stream: its event name, id and retry as facts, and
/// its data as the body; a block with no event (comments only, or over the size limit) as its
/// raw text, marked `raw`. The event is moved out of the block (no copy of its strings); its
/// raw bytes stay, to be forwarded.
pub(crate) fn block_facts(block: &mut Block) -> (BlockFacts, Option<ByteString>) {
    match block.event.take() {
        Some(ev) => (
            BlockFacts {
                event: ev.event,
                id: ev.id,
                retry: ev.retry,
                raw: false,
            },
            ev.data,
        ),
        // Comments only (a keep-alive), or a block over the size limit: kept raw.
        None => (
            BlockFacts {
                raw: true,
                ..BlockFacts::default()
            },
            Some(ByteString::from(
                String::from_utf8_lossy(&block.raw).into_owned(),
            )),
        ),
    }
}

/// A stream block's facts, written as the map [`BlockFacts::to_map`] gives would be (`event`,
/// `id`, `retry`, or `raw`, in that order, which is both the map's key order and its insertion
/// order) without building it: a map per event (its node, its key strings) cost more than
/// taping the event's facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BlockFacts {
    pub event: Option<ByteString>,
    pub id: Option<ByteString>,
    pub retry: Option<u64>,
    pub raw: bool,
}

impl BlockFacts {
    /// The facts as a map (what the tape line holds).
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut f = Map::new();
        if let Some(name) = &self.event {
            f.insert("event".into(), Value::String(name.to_string()));
        }
        if let Some(id) = &self.id {
            f.insert("id".into(), Value::String(id.to_string()));
        }
        if let Some(retry) = self.retry {
            f.insert("retry".into(), json!(retry));
        }
        if self.raw {
            f.insert("raw".into(), json!(true));
        }
        f
    }
}

impl ModelFacts for BlockFacts {
    fn push_facts(&self, p: &mut Vec<u8>) {
        let string = crate::wire::json_out::push_str;
        if let Some(name) = &self.event {
            p.extend_from_slice(b",\"event\":");
            string(p, name);
        }
        if let Some(id) = &self.id {
            p.extend_from_slice(b",\"id\":");
            string(p, id);
        }
        if let Some(retry) = self.retry {
            p.extend_from_slice(b",\"retry\":");
            p.extend_from_slice(itoa::Buffer::new().format(retry).as_bytes());
        }
        if self.raw {
            p.extend_from_slice(b",\"raw\":true");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's facts are written as the map of them was: the same bytes for every route
    /// (with and without a model, a streaming one), and for a model name JSON must escape.
    #[test]
    fn request_facts_write_what_their_map_wrote() {
        let bodies: &[&[u8]] = &[
            br#"{"model":"claude-sonnet-4-5","stream":true}"#,
            br#"{"model":"a \"quoted\" \u00e9 \u0001 model","stream":false}"#,
            br#"{"stream":true}"#,
            b"not json",
        ];
        let paths = [
            "/v1/messages",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "/v1/models",
        ];
        for path in paths {
            for body in bodies {
                let route = provider::route(path);
                let parsed = provider::RequestHead::of(body);
                let mut map = Map::new();
                map.insert("provider".into(), json!(route.provider.name()));
                map.insert("endpoint".into(), json!(route.endpoint));
                if let Some(m) = provider::model_of(&route, &parsed) {
                    map.insert("model".into(), json!(m));
                }
                map.insert("stream".into(), json!(provider::streams(&route, &parsed)));
                let facts = RequestFacts::of(&route, &parsed);
                let (mut want, mut got) = (Vec::new(), Vec::new());
                map.push_facts(&mut want);
                facts.push_facts(&mut got);
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    String::from_utf8(want).unwrap(),
                    "{path} {}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    /// Skipping the events `may_summarize` rules out gives the summary that parsing every
    /// event gives, for each provider's stream shapes (text deltas, tool calls, usage, stops).
    #[test]
    fn the_summary_prefilter_loses_nothing() {
        let streams: &[(Provider, &[&str])] = &[
            (
                Provider::Anthropic,
                &[
                    r#"{"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":1}}}"#,
                    r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"mcp__S__echo","input":{}}}"#,
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the usage of tools"}}"#,
                    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
                    r#"{"type":"message_stop"}"#,
                    r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool\u005fuse","name":"escaped"}}"#,
                ],
            ),
            (
                Provider::OpenAiChat,
                &[
                    r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"echo","arguments":""}}]}}]}"#,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                    r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}"#,
                ],
            ),
            (
                Provider::OpenAiResponses,
                &[
                    r#"{"type":"response.output_text.delta","delta":"hi"}"#,
                    r#"{"type":"response.output_item.done","item":{"type":"function_call","name":"echo","namespace":"mcp__S"}}"#,
                    r#"{"type":"response.completed","response":{"status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":4}}}"#,
                ],
            ),
        ];
        for (provider, events) in streams {
            let (mut all, mut filtered) = (Summary::default(), Summary::default());
            for e in *events {
                let v: Value = serde_json::from_str(e).unwrap();
                all.add(*provider, &v);
                if may_summarize(*provider, e) {
                    filtered.add(*provider, &v);
                }
            }
            assert_ne!(
                all,
                Summary::default(),
                "{provider:?}: the stream says something"
            );
            assert_eq!(filtered, all, "{provider:?}");
        }
        assert!(!may_summarize(
            Provider::Anthropic,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#
        ));
    }

    /// `block_facts` as it was: the facts built as a map.
    fn block_facts_reference(block: &mut Block) -> (Map<String, Value>, Option<String>) {
        let mut f = Map::new();
        let data = match block.event.take() {
            Some(ev) => {
                if let Some(name) = ev.event {
                    f.insert("event".into(), Value::String(name.into()));
                }
                if let Some(id) = ev.id {
                    f.insert("id".into(), Value::String(id.into()));
                }
                if let Some(retry) = ev.retry {
                    f.insert("retry".into(), json!(retry));
                }
                ev.data.map(String::from)
            }
            None => {
                f.insert("raw".into(), json!(true));
                Some(String::from_utf8_lossy(&block.raw).into_owned())
            }
        };
        (f, data)
    }

    /// Block facts are written as the map built before was, for every kind of block the
    /// parser gives; the data is the same.
    #[test]
    fn block_facts_are_written_as_their_map_is() {
        let stream = "event: content_block_delta\ndata: {\"a\":1}\n\n: keep-alive\n\nid: 7\nretry: 3000\nevent: m\u{e9}ss\"age\ndata: x\n\nid: 8\n\ndata: y\n\nretry: 10\n\n";
        let mut parser = crate::transport::sse::SseParser::new(1 << 20);
        let mut blocks = parser.push(stream.as_bytes());
        blocks.extend(parser.push(b"\xff: not utf-8\n\n"));
        blocks.extend(parser.push(b"data: cut"));
        blocks.extend(parser.finish());
        assert_eq!(blocks.len(), 8, "{blocks:?}");
        for mut b in blocks {
            let mut old = b.clone();
            let (f, data) = block_facts(&mut b);
            let (map, old_data) = block_facts_reference(&mut old);
            assert_eq!(data.map(String::from), old_data);
            assert_eq!(f.to_map(), map);
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            f.push_facts(&mut ours);
            map.push_facts(&mut theirs);
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{f:?}"
            );
        }
    }
}
