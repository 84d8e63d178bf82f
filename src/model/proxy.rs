//! The model proxy in record mode: every request is taped (its body through the redactor),
//! forwarded to the upstream with its headers (API keys forwarded, never taped), and the answer
//! taped and forwarded — a stream event by event, each the moment it is complete and on the
//! tape, nothing held back to the end of the stream.

use super::provider::{self, Provider, Summary};
use crate::record::Recorder;
use crate::transport::http::{collect, full, CuttableBody, Handler, RespBody};
use crate::transport::sse::SseParser;
use crate::transport::upstream::{strip_hop_by_hop, Upstream};
use crate::wire::Dir;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;

/// Stream events in flight between the upstream reader and the client, per call: the reader
/// waits when the client is slower (the queue bounds what one stream holds in memory).
const EVENT_QUEUE: usize = 64;

/// How long the answer's head waits for the stream's first event, so both go out in one write
/// (the upstream sends them together; sent apart, the client wakes twice for one event). Only
/// a stream whose first event is slower than this gets its head alone first.
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
        facts: &Map<String, Value>,
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
    client: Upstream,
    max_message: usize,
    calls: AtomicU64,
}

impl ModelProxy {
    /// A proxy taping through `tape` (declared as a model API already) to `upstream`.
    pub fn new(tape: Recorder, upstream: Uri, client: Upstream, max_message: usize) -> ModelProxy {
        let prefix = upstream.path().trim_end_matches('/').to_string();
        let host = upstream
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        ModelProxy {
            tape,
            upstream,
            prefix,
            host,
            client,
            max_message,
            calls: AtomicU64::new(0),
        }
    }

    /// Model calls taped so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn upstream_uri(&self, path_and_query: &str) -> Option<Uri> {
        upstream_uri(&self.upstream, &self.prefix, path_and_query)
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
        let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let call = Call {
            n: self.calls.fetch_add(1, Ordering::Relaxed) + 1,
            provider: route.provider,
            started,
        };
        let mut facts = Map::new();
        facts.insert("provider".into(), json!(route.provider.name()));
        facts.insert("endpoint".into(), json!(route.endpoint));
        if let Some(m) = provider::model_of(&route, &parsed) {
            facts.insert("model".into(), json!(m));
        }
        facts.insert("stream".into(), json!(provider::streams(&route, &parsed)));
        let http = json!({"method": parts.method.as_str(), "path": path});
        call.tape(
            &self.tape,
            Dir::C2S,
            "request",
            &facts,
            Some(&body),
            Some(&http),
        );

        let Some(uri) = self.upstream_uri(&path) else {
            return self.error(route.provider, StatusCode::BAD_REQUEST, "bad request path");
        };
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        // The answer is taped and parsed as it streams: it must come uncompressed.
        headers.remove(hyper::header::ACCEPT_ENCODING);
        if let Some(h) = &self.host {
            headers.insert(hyper::header::HOST, h.clone());
        }
        let mut up = Request::new(Full::new(body));
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        *up.headers_mut() = headers;
        let resp = match self.client.request(up).await {
            Ok(r) => r,
            Err(e) => {
                let why = format!(
                    "mcptape: the model API {} did not answer: {}",
                    self.upstream,
                    crate::transport::upstream::error_chain(&e)
                );
                let mut f = Map::new();
                f.insert("error".into(), json!(why));
                f.insert("total_us".into(), json!(call.us_since(Instant::now())));
                call.tape(&self.tape, Dir::S2C, "end", &f, None, None);
                crate::diag!("{why}");
                return self.error(route.provider, StatusCode::BAD_GATEWAY, &why);
            }
        };
        let (rparts, rbody) = resp.into_parts();
        let content_type = rparts
            .headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let status = rparts.status;
        let http = json!({"status": status.as_u16(), "content_type": content_type});
        let mut out_headers = rparts.headers;
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
            call.tape(&self.tape, Dir::S2C, "response", &f, None, Some(&http));
            let (tx, mut rx) = mpsc::channel(EVENT_QUEUE);
            let tape = self.tape.clone();
            tokio::spawn(pump_events(tape, call, rbody, tx, self.max_message));
            let first = tokio::time::timeout(FIRST_EVENT_WAIT, rx.recv())
                .await
                .ok()
                .flatten();
            let rest = CuttableBody { rx };
            return respond(BodyExt::boxed(FirstThen { first, rest }));
        }
        let answer = match collect(rbody, self.max_message).await {
            Ok(b) => b,
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
        let Some(uri) = self.upstream_uri(path) else {
            return full(StatusCode::BAD_REQUEST, "text/plain", "bad request path");
        };
        let mut up = Request::new(Full::new(Bytes::new()));
        *up.method_mut() = hyper::Method::HEAD;
        *up.uri_mut() = uri;
        let mut headers = req.headers().clone();
        strip_hop_by_hop(&mut headers);
        if let Some(h) = &self.host {
            headers.insert(hyper::header::HOST, h.clone());
        }
        *up.headers_mut() = headers;
        match self.client.request(up).await {
            Ok(r) => {
                let mut out = full(r.status(), "text/plain", Bytes::new());
                out.headers_mut().remove(hyper::header::CONTENT_TYPE);
                out
            }
            Err(_) => full(StatusCode::BAD_GATEWAY, "text/plain", Bytes::new()),
        }
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

/// Reads the upstream's event stream: each complete event is taped, then sent to the client.
/// A stream that breaks is taped as cut and cut for the client too.
async fn pump_events(
    tape: Recorder,
    call: Call,
    mut body: Incoming,
    tx: mpsc::Sender<Result<Bytes, String>>,
    max: usize,
) {
    let mut parser = SseParser::new(max);
    let mut summary = Summary::default();
    let mut events = 0u64;
    let mut client_gone = false;
    let mut cut: Option<String> = None;
    let mut ended = false;
    while !ended {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                cut = Some(format!("the upstream stream broke: {e}"));
                break;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let mut blocks = parser.push(&data);
        if events == 0 && !blocks.is_empty() {
            // The first event goes out alone, the moment it is taped: the client waits for it
            // (time to first token), and taping the rest of the read would delay it.
            let rest = blocks.split_off(1);
            pass(
                &tape,
                &call,
                blocks,
                &mut summary,
                &mut events,
                &tx,
                &mut client_gone,
            )
            .await;
            blocks = rest;
        } else {
            // hyper hands a chunked answer over one chunk at a time (a provider's chunk is one
            // event), through a one-slot channel its connection task fills: the chunks already
            // read from the socket are gathered too, so that everything of one upstream read
            // is taped in one write and forwarded in one piece.
            let mut gathered = data.len();
            while gathered < GATHER_MAX {
                match ready_frame(&mut body).await {
                    Ready::Data(more) => {
                        gathered += more.len();
                        blocks.extend(parser.push(&more));
                    }
                    Ready::Nothing => break,
                    Ready::End => {
                        ended = true;
                        break;
                    }
                    Ready::Broke(e) => {
                        cut = Some(format!("the upstream stream broke: {e}"));
                        ended = true;
                        break;
                    }
                }
            }
        }
        pass(
            &tape,
            &call,
            blocks,
            &mut summary,
            &mut events,
            &tx,
            &mut client_gone,
        )
        .await;
    }
    if let Some(block) = parser.finish() {
        // An event the stream ended in the middle of: forwarded, taped as it stood.
        tape_block(&tape, &call, &block, &mut summary, &mut events);
        if !client_gone {
            let _ = tx.send(Ok(Bytes::from(block.raw))).await;
        }
        cut.get_or_insert_with(|| "the stream ended inside an event".into());
    }
    let mut f = Map::new();
    f.insert("events".into(), json!(events));
    f.insert("total_us".into(), json!(call.us_since(Instant::now())));
    f.insert("summary".into(), summary.to_json());
    if let Some(why) = &cut {
        f.insert("cut".into(), json!(why));
    }
    call.tape(&tape, Dir::S2C, "end", &f, None, None);
    if let Some(why) = cut {
        crate::transport::http::cut_after_flush(&tx, why).await;
    }
}

/// Tapes `blocks` (the events of one read) in one write, then forwards them in one piece, as a
/// byte relay forwards a read: not a system call each way per event.
async fn pass(
    tape: &Recorder,
    call: &Call,
    blocks: Vec<crate::transport::sse::Block>,
    summary: &mut Summary,
    events: &mut u64,
    tx: &mpsc::Sender<Result<Bytes, String>>,
    client_gone: &mut bool,
) {
    if blocks.is_empty() {
        return;
    }
    let taped: Vec<_> = blocks
        .iter()
        .map(|block| summarize_block(call, block, summary, events))
        .collect();
    tape.model_parts(
        Dir::S2C,
        call.n,
        taped
            .iter()
            .map(|(f, data)| ("event", f, data.as_deref().map(str::as_bytes))),
    );
    let out = match <[_; 1]>::try_from(blocks) {
        Ok([one]) => Bytes::from(one.raw),
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
}

/// At most this many bytes of an answer are gathered into one write to the tape and one to
/// the client (a fast upstream's backlog is still passed on in pieces).
const GATHER_MAX: usize = 64 * 1024;

/// What the upstream's body holds without waiting for the network.
enum Ready {
    Data(Bytes),
    /// Nothing read yet: what came so far goes out now.
    Nothing,
    End,
    Broke(hyper::Error),
}

/// The body's next frame if its connection task has it already: polled once, then once more
/// after letting that task (woken when the last frame was taken) decode the next chunk from
/// what it has read; `Nothing` once it would have to wait for the socket.
async fn ready_frame(body: &mut Incoming) -> Ready {
    for attempt in 0..2 {
        let polled = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::pin::Pin::new(&mut *body).poll_frame(cx))
        })
        .await;
        match polled {
            std::task::Poll::Ready(None) => return Ready::End,
            std::task::Poll::Ready(Some(Err(e))) => return Ready::Broke(e),
            std::task::Poll::Ready(Some(Ok(f))) => match f.into_data() {
                Ok(d) => return Ready::Data(d),
                // Trailers: nothing to tape or forward; look again.
                Err(_) => continue,
            },
            std::task::Poll::Pending if attempt == 0 => tokio::task::yield_now().await,
            std::task::Poll::Pending => {}
        }
    }
    Ready::Nothing
}

/// Tapes one block of the stream: its event name and id as facts, its data as the body.
fn tape_block(
    tape: &Recorder,
    call: &Call,
    block: &crate::transport::sse::Block,
    summary: &mut Summary,
    events: &mut u64,
) {
    let (f, data) = summarize_block(call, block, summary, events);
    call.tape(
        tape,
        Dir::S2C,
        "event",
        &f,
        data.as_deref().map(str::as_bytes),
        None,
    );
}

/// One block's facts and data as taped, its tokens, tools and stop reason added to `summary`.
fn summarize_block(
    call: &Call,
    block: &crate::transport::sse::Block,
    summary: &mut Summary,
    events: &mut u64,
) -> (Map<String, Value>, Option<String>) {
    let (f, data) = block_facts(block);
    if let Some(d) = data.as_deref().filter(|d| may_summarize(call.provider, d)) {
        if let Ok(v) = serde_json::from_str::<Value>(d) {
            summary.add(call.provider, &v);
        }
    }
    *events += 1;
    (f, data)
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
/// raw text, marked `raw`.
pub(crate) fn block_facts(
    block: &crate::transport::sse::Block,
) -> (Map<String, Value>, Option<String>) {
    let mut f = Map::new();
    let data = match &block.event {
        Some(ev) => {
            if let Some(name) = &ev.event {
                f.insert("event".into(), json!(name));
            }
            if let Some(id) = &ev.id {
                f.insert("id".into(), json!(id));
            }
            if let Some(retry) = ev.retry {
                f.insert("retry".into(), json!(retry));
            }
            ev.data.clone()
        }
        None => {
            // Comments only (a keep-alive), or a block over the size limit: kept raw.
            f.insert("raw".into(), json!(true));
            Some(String::from_utf8_lossy(&block.raw).into_owned())
        }
    };
    (f, data)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
