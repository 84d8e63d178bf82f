//! `bench --lean-model-proxy TAPE UPSTREAM_URL` and `bench --lean-http-proxy TAPE UPSTREAM_URL`:
//! the floor of a proxy that tapes before it forwards, as issue 19 asks for it ("the best ratio
//! a proxy that tapes every byte before forwarding it could reach"). What a taping proxy cannot
//! skip, and nothing else:
//!
//! - the HTTP head parsed (`httparse`, as hyper and mcptape's own client parse it), the body
//!   read by its length or its chunks, the bytes forwarded as they came (no header changed,
//!   one upstream connection per client connection, as the TCP relay has);
//! - every message taped with mcptape's own `Recorder` before it is forwarded: the request
//!   line; the answer's head with its first event in one write; then each read's events;
//!   redacted by the built-in rules and chained by SHA-256, on the tape format every mcptape
//!   tape has. The model lines carry the facts `model-proxy` tapes (endpoint, model, provider,
//!   stream; each event's name); the MCP lines carry the HTTP facts `record --url` tapes (the
//!   MCP headers, the session id redacted, the POST's number, the request's id, the status),
//!   made by `record --url`'s own code from the parsed head.
//!
//! Left out on purpose, so that the row is a floor: hop-by-hop headers, the upstream's host,
//! compressed bodies, summaries, sessions, errors, limits. One thread, tokio's current-thread
//! runtime, as the relays. If this floor misses a target, no taping proxy on this tape format
//! meets it on this machine; if it meets it, the distance to it is what `mcptape`'s HTTP side
//! costs above the floor.

use crate::http::{authority, loopback};
use anyhow::{bail, Context, Result};
use mcptape::model::provider::{self, RequestHead};
use mcptape::record::http::tape_post;
use mcptape::record::http_facts::HttpFacts;
use mcptape::record::Recorder;
use mcptape::tape::writer::ModelFacts;
use mcptape::tape::{ServerDecl, TapeWriter, WriteOptions};
use mcptape::wire::Dir;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the floor tapes: model calls (`model-proxy`'s lines) or MCP messages (`record --url`'s).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Model,
    Mcp,
}

pub fn run(kind: Kind, tape: &str, upstream: &str) -> Result<i32> {
    let up: SocketAddr = loopback(&authority(upstream)?)?;
    let write = WriteOptions::redacted();
    if let Some(r) = &write.redactor {
        r.compile_in_background();
    }
    let mut writer = TapeWriter::create(Path::new(tape), write)
        .with_context(|| format!("creating the tape {tape}"))?;
    let decl = match kind {
        Kind::Model => ServerDecl::model("model", upstream.to_string()),
        Kind::Mcp => ServerDecl::http("lean", upstream.to_string()),
    };
    writer.declare_server(decl)?;
    let label = if kind == Kind::Model { "model" } else { "lean" };
    let rec = Recorder::new(writer, label);
    // Closing stdin stops the process, the tape closed first (the bench checks it).
    let closer = rec.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let code = match closer.close(None, "stdin closed".into()) {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("bench: closing the tape: {e}");
                1
            }
        };
        std::process::exit(code);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{}/mcp", listener.local_addr()?)?;
        out.flush()?;
        drop(out);
        let calls = Arc::new(AtomicU64::new(0));
        loop {
            let (client, _) = listener.accept().await?;
            let rec = rec.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                if let Err(e) = connection(kind, client, up, rec, calls).await {
                    eprintln!("bench: lean proxy: {e:#}");
                }
            });
        }
    })
}

/// A request's facts, as `model-proxy` tapes them (keys in the map's order).
struct RequestFacts<'a> {
    endpoint: &'a str,
    model: Option<&'a str>,
    provider: &'static str,
    stream: bool,
}

impl ModelFacts for RequestFacts<'_> {
    fn push_facts(&self, p: &mut Vec<u8>) {
        let string = |p: &mut Vec<u8>, key: &str, v: &str| {
            p.extend_from_slice(format!(",\"{key}\":").as_bytes());
            serde_json::to_writer(&mut *p, v).expect("a string");
        };
        string(p, "endpoint", self.endpoint);
        if let Some(m) = self.model {
            string(p, "model", m);
        }
        string(p, "provider", self.provider);
        p.extend_from_slice(if self.stream {
            b",\"stream\":true"
        } else {
            b",\"stream\":false"
        });
    }
}

/// An event's name, as `model-proxy` tapes it.
struct EventFacts<'a>(Option<&'a str>);

impl ModelFacts for EventFacts<'_> {
    fn push_facts(&self, p: &mut Vec<u8>) {
        if let Some(name) = self.0 {
            p.extend_from_slice(b",\"event\":");
            serde_json::to_writer(&mut *p, name).expect("a string");
        }
    }
}

/// Bytes read from one side, consumed from the front.
struct Side {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Side {
    fn new(s: TcpStream) -> Side {
        let _ = s.set_nodelay(true);
        Side {
            s,
            buf: Vec::with_capacity(64 * 1024),
        }
    }

    /// Reads more; false at the end of the stream.
    async fn fill(&mut self) -> Result<bool> {
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        Ok(self.s.read_buf(&mut self.buf).await? > 0)
    }
}

/// One client connection and its own upstream connection: requests one after the other.
async fn connection(
    kind: Kind,
    client: TcpStream,
    up: SocketAddr,
    tape: Recorder,
    calls: Arc<AtomicU64>,
) -> Result<()> {
    let mut client = Side::new(client);
    let mut server = Side::new(TcpStream::connect(up).await?);
    loop {
        // The request's head, then its body by its length.
        let (head_len, length, path, mut facts) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let httparse::Status::Complete(n) = req.parse(&client.buf)? {
                let length = content_length(req.headers)?;
                let path = req.path.unwrap_or("/");
                // What `record --url` tapes of the head, made by its own code.
                let facts = match kind {
                    Kind::Model => None,
                    Kind::Mcp => Some(
                        HttpFacts::of_head(
                            req.method.unwrap_or("POST"),
                            path.split('?').next().unwrap_or(path),
                            req.headers.iter().map(|h| (h.name, h.value)),
                        )
                        .context("a request head record --url would refuse")?,
                    ),
                };
                break (n, length, path.to_string(), facts);
            }
            if !client.fill().await? {
                return Ok(());
            }
        };
        let end = head_len + length;
        while client.buf.len() < end {
            if !client.fill().await? {
                bail!("the client closed inside a request");
            }
        }
        let started = Instant::now();
        let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
        let body = &client.buf[head_len..end];
        match kind {
            Kind::Model => {
                let route = provider::route(&path);
                let parsed = RequestHead::of(body);
                let facts = RequestFacts {
                    endpoint: &route.endpoint,
                    model: provider::model_of(&route, &parsed),
                    provider: route.provider.name(),
                    stream: provider::streams(&route, &parsed),
                };
                let http = json!({"method": "POST", "path": path});
                tape.model(Dir::C2S, n, "request", &facts, Some(body), Some(&http));
            }
            Kind::Mcp => {
                let facts = facts.as_mut().expect("made for MCP");
                tape_post(&tape, n, body, facts);
            }
        }
        server.s.write_all(&client.buf[..end]).await?;
        client.buf.drain(..end);
        answer(kind, &mut server, &mut client.s, &tape, n, started, facts).await?;
    }
}

/// Reads the upstream's answer, tapes it and forwards it as it came.
async fn answer(
    kind: Kind,
    server: &mut Side,
    client: &mut TcpStream,
    tape: &Recorder,
    n: u64,
    started: Instant,
    mut facts: Option<HttpFacts>,
) -> Result<()> {
    let (head_len, length, status, sse) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(h) = resp.parse(&server.buf)? {
            let chunked = resp.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("transfer-encoding")
                    && h.value.eq_ignore_ascii_case(b"chunked")
            });
            let sse = resp.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("content-type") && h.value.starts_with(b"text/event")
            });
            let length = if chunked {
                None
            } else {
                Some(content_length(resp.headers)?)
            };
            let status = resp.code.unwrap_or(0);
            if let Some(f) = &mut facts {
                // The answer's facts, as `record --url` adds them.
                f.status = Some(status);
                for h in resp.headers.iter() {
                    if h.name.eq_ignore_ascii_case("mcp-session-id") {
                        f.session = Some(String::from_utf8_lossy(h.value).into_owned());
                    } else if h.name.eq_ignore_ascii_case("content-type") {
                        f.content_type = Some(String::from_utf8_lossy(h.value).to_lowercase());
                    }
                }
            }
            break (h, length, status, sse);
        }
        if !server.fill().await? {
            bail!("the upstream closed before its answer's head");
        }
    };
    if let Some(length) = length {
        // A whole body (MCP's JSON answers): taped, then forwarded.
        let end = head_len + length;
        while server.buf.len() < end {
            if !server.fill().await? {
                bail!("the upstream closed inside an answer");
            }
        }
        let body = &server.buf[head_len..end];
        match kind {
            // An empty answer (a notification's 202) carries no message.
            Kind::Mcp if body.is_empty() => {}
            Kind::Mcp => tape.message(Dir::S2C, body, facts.as_ref().map(|f| f as _)),
            Kind::Model => {
                let http = json!({"status": status});
                tape.model(
                    Dir::S2C,
                    n,
                    "response",
                    &Map::new(),
                    Some(body),
                    Some(&http),
                );
            }
        }
        client.write_all(&server.buf[..end]).await?;
        server.buf.drain(..end);
        return Ok(());
    }
    // Chunked: each read's complete events taped, then the read's bytes forwarded. (An event
    // split across reads has its first bytes forwarded before it is taped, which a real proxy
    // must not do; the bench provider never splits one, and doing less only flatters the floor.)
    let http =
        json!({"status": status, "content_type": if sse { "text/event-stream" } else { "" }});
    let mut head = Map::new();
    head.insert(
        "ttfb_us".into(),
        json!(started.elapsed().as_micros() as u64),
    );
    let mut head = Some((head, http));
    let mut chunks = Chunks::default();
    let mut events: Vec<u8> = Vec::new();
    let mut pos = head_len;
    loop {
        let done = chunks.decode(&server.buf[pos..], &mut events)?;
        let taken = chunks.consumed;
        chunks.consumed = 0;
        let blocks = split_blocks(&mut events);
        if head.is_some() && blocks.is_empty() && !done {
            // The head goes out with the first event, as `model-proxy` sends them.
            pos += taken;
            if !server.fill().await? {
                bail!("the upstream closed inside a stream");
            }
            continue;
        }
        tape_events(tape, n, head.take(), &blocks, done.then_some(started));
        pos += taken;
        client.write_all(&server.buf[..pos]).await?;
        server.buf.drain(..pos);
        pos = 0;
        if done {
            return Ok(());
        }
        if !server.fill().await? {
            bail!("the upstream closed inside a stream");
        }
    }
}

/// One part of a model call as `Recorder::model_parts` takes it: name, facts, body, HTTP facts.
type Part<'a> = (
    &'a str,
    &'a dyn ModelFacts,
    Option<&'a [u8]>,
    Option<&'a Value>,
);

/// Tapes, in one write: the answer's head (with the first read's events), the events, and the
/// stream's end once `ended` (the request's start).
fn tape_events(
    tape: &Recorder,
    n: u64,
    head: Option<(Map<String, Value>, Value)>,
    blocks: &[Vec<u8>],
    ended: Option<Instant>,
) {
    let parts: Vec<(Option<String>, Option<String>)> = blocks.iter().map(|b| event_of(b)).collect();
    let facts: Vec<EventFacts> = parts
        .iter()
        .map(|(e, _)| EventFacts(e.as_deref()))
        .collect();
    let end = ended.map(|started| {
        let mut end = Map::new();
        end.insert(
            "total_us".into(),
            json!(started.elapsed().as_micros() as u64),
        );
        end
    });
    let mut list: Vec<Part<'_>> = Vec::new();
    if let Some((h, http)) = &head {
        list.push(("response", h as &dyn ModelFacts, None, Some(http)));
    }
    for (f, (_, data)) in facts.iter().zip(&parts) {
        list.push(("event", f, data.as_deref().map(str::as_bytes), None));
    }
    if let Some(end) = &end {
        list.push(("end", end as &dyn ModelFacts, None, None));
    }
    if !list.is_empty() {
        tape.model_parts(Dir::S2C, n, list);
    }
}

/// The Content-Length of a head (0 when there is none).
fn content_length(headers: &[httparse::Header<'_>]) -> Result<usize> {
    match headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        None => Ok(0),
        Some(h) => Ok(std::str::from_utf8(h.value)?.trim().parse()?),
    }
}

/// A chunked body's decoder (RFC 9112 §7.1, without extensions or trailers: the bench
/// provider sends neither).
#[derive(Default)]
struct Chunks {
    /// Bytes of the current chunk still to come.
    left: usize,
    /// The chunk's closing CRLF is still to come.
    crlf: bool,
    /// Input bytes consumed by the last `decode`.
    consumed: usize,
}

impl Chunks {
    /// Decodes what `input` holds onto `out`; true once the last chunk and its CRLF are in.
    fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let mut at = 0;
        loop {
            if self.left > 0 {
                let take = self.left.min(input.len() - at);
                out.extend_from_slice(&input[at..at + take]);
                at += take;
                self.left -= take;
                if self.left > 0 {
                    break;
                }
                self.crlf = true;
            }
            if self.crlf {
                if input.len() - at < 2 {
                    break;
                }
                at += 2;
                self.crlf = false;
            }
            let Some(nl) = memchr::memchr(b'\n', &input[at..]) else {
                break;
            };
            let line = std::str::from_utf8(&input[at..at + nl])?.trim_end_matches('\r');
            let size =
                usize::from_str_radix(line, 16).with_context(|| format!("chunk size {line:?}"))?;
            if size == 0 {
                // The last chunk, then the empty trailer line.
                if input.len() - (at + nl + 1) < 2 {
                    break;
                }
                self.consumed = at + nl + 3;
                return Ok(true);
            }
            at += nl + 1;
            self.left = size;
        }
        self.consumed = at;
        Ok(false)
    }
}

/// Takes the complete blocks (ended by a blank line) off the front of `events`.
fn split_blocks(events: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&events[from..], b"\n\n") {
        out.push(events[from..from + i + 2].to_vec());
        from += i + 2;
    }
    events.drain(..from);
    out
}

/// An event's name and data.
fn event_of(block: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(block);
    let mut name = None;
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim_start().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            let v = v.strip_prefix(' ').unwrap_or(v);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(v);
                }
                None => data = Some(v.to_string()),
            }
        }
    }
    (name, data)
}
