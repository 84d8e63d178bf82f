//! For the fuzz targets in `fuzz/` only, not an API: the crate-private readers of outside bytes,
//! reachable from the fuzz crate (its own workspace, so it sees only what is `pub`). Each item
//! calls the code the transports call; nothing here is used by mcptape itself. Hidden from the
//! docs; it may change with any commit.

use serde_json::{Map, Value};
use std::path::Path;

/// The `http` crate of the HTTP requests these take (hyper's own, so the versions agree).
pub use hyper::http;
/// The `toml` crate of Codex's config (the one mcptape parses and writes it with).
pub use toml;

pub use crate::model::provider::{Provider, Summary};
pub use crate::run::config::{HttpHook, Rewritten, Through};

// ---- SSE (`transport::sse`) ----

/// One event, as the parser reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: Option<String>,
    /// `id:`.
    pub id: Option<String>,
    /// `retry:`.
    pub retry: Option<u64>,
}

/// One block of a stream: its exact bytes and the event in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseBlock {
    /// The bytes of the block, blank line included.
    pub raw: Vec<u8>,
    /// The event (none for comments only, or a block over the limit).
    pub event: Option<SseEvent>,
}

fn block(b: crate::transport::sse::Block) -> SseBlock {
    SseBlock {
        raw: b.raw.to_vec(),
        event: b.event.map(|e| SseEvent {
            event: e.event.map(String::from),
            data: e.data.map(String::from),
            id: e.id.map(String::from),
            retry: e.retry,
        }),
    }
}

/// The SSE parser every transport and the model proxy use.
#[derive(Debug)]
pub struct SseParser(crate::transport::sse::SseParser);

impl SseParser {
    /// A parser holding at most `max_block` bytes of an incomplete block.
    pub fn new(max_block: usize) -> SseParser {
        SseParser(crate::transport::sse::SseParser::new(max_block))
    }

    /// Feeds bytes; the blocks they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseBlock> {
        self.0.push(chunk).into_iter().map(block).collect()
    }

    /// Feeds a chunk as the model proxy feeds its upstream's (whole blocks are slices of it);
    /// how many blocks it completed, dropped unconverted (what `benches/limits.rs` times).
    pub fn push_bytes(&mut self, chunk: bytes::Bytes) -> usize {
        self.0.push_bytes(chunk).len()
    }

    /// The end of the stream: what is left.
    pub fn finish(&mut self) -> Option<SseBlock> {
        self.0.finish().map(block)
    }
}

// ---- The tape index ----

/// [`crate::tape::TapeIndex`]'s request params as matching takes them.
pub fn request_match_params(
    index: &crate::tape::TapeIndex,
    m: &crate::tape::index::MsgMeta,
) -> std::io::Result<Value> {
    index.request_match_params(m)
}

/// A request in a few words, as explanations name it.
pub fn describe_request(index: &crate::tape::TapeIndex, m: &crate::tape::index::MsgMeta) -> String {
    index.describe_request(m)
}

// ---- HTTP requests (the listeners, `record --url`, `play --listen`) ----

/// The Host/Origin check every listener makes before any handler sees a request: why it is
/// refused, or `None`.
pub fn refuse_foreign<B>(req: &http::Request<B>, local_port: u16) -> Option<String> {
    crate::transport::http::refuse_foreign(req, local_port)
}

/// What `record --url` tapes of a request's head.
pub fn request_facts(
    method: &http::Method,
    headers: &http::HeaderMap,
    path: &str,
) -> Map<String, Value> {
    crate::record::http::request_facts(method, headers, path)
}

/// The routing-header hash `play --listen` computes from a live request.
pub fn play_routing(headers: &http::HeaderMap) -> u64 {
    crate::play::http::routing_of(headers)
}

/// The routing-header hash the tape index computes from a message's taped `http` facts
/// (`None`: the facts do not read).
pub fn taped_routing(facts: &[u8]) -> Option<u64> {
    serde_json::from_slice::<crate::tape::format::HttpFacts<'_>>(facts)
        .ok()
        .map(|f| f.routing_headers_hash())
}

/// The URI `record --url` sends a request for `pq` to.
pub fn record_upstream_uri(upstream: &http::Uri, pq: &str) -> Option<http::Uri> {
    crate::record::http::upstream_uri(upstream, pq)
}

/// The URI the model proxy sends a request for `pq` to (`prefix`: the base URL's path).
pub fn model_upstream_uri(upstream: &http::Uri, prefix: &str, pq: &str) -> Option<http::Uri> {
    crate::model::proxy::upstream_uri(upstream, prefix, pq)
}

// ---- The model proxy ----

/// One block of a model stream as the proxy tapes it.
#[derive(Debug, Clone)]
pub struct TapedBlock {
    /// The bytes forwarded to the client.
    pub raw: Vec<u8>,
    /// The block's facts on its tape line (`event`, `id`, `retry`, or `raw`).
    pub facts: Map<String, Value>,
    /// Its body on the tape.
    pub data: Option<String>,
}

/// A model answer stream read as the proxy's pump reads it (`chunks` as they arrive): each
/// block as it is taped, the summary of the call, and whether the stream ended inside an event.
pub fn model_stream(
    provider: Provider,
    chunks: &[&[u8]],
    max: usize,
) -> (Vec<TapedBlock>, Summary, bool) {
    let mut parser = crate::transport::sse::SseParser::new(max);
    let mut summary = Summary::default();
    let mut out = Vec::new();
    let mut take = |mut b: crate::transport::sse::Block, summary: &mut Summary| {
        let (facts, data) = crate::model::proxy::block_facts(&mut b);
        if let Some(d) = &data {
            if let Ok(v) = serde_json::from_str::<Value>(d) {
                summary.add(provider, &v);
            }
        }
        out.push(TapedBlock {
            raw: b.raw.to_vec(),
            facts: facts.to_map(),
            data: data.map(String::from),
        });
    };
    for c in chunks {
        for b in parser.push(c) {
            take(b, &mut summary);
        }
    }
    let cut = match parser.finish() {
        Some(b) => {
            take(b, &mut summary);
            true
        }
        None => false,
    };
    (out, summary, cut)
}

/// A taped model request as replay compares it (markers as wildcards).
pub fn recorded_canonical(taped: &[u8]) -> Option<Value> {
    crate::model::player::recorded_canonical(taped)
}

/// Whether the model player answers a live request with a recorded one.
pub fn body_fits(
    recorded: Option<&Value>,
    recorded_body: &[u8],
    live: Option<&Value>,
    live_body: &[u8],
) -> bool {
    crate::model::player::body_fits(recorded, recorded_body, live, live_body)
}

/// Whether `s` holds a redaction marker.
pub fn has_marker(s: &str) -> bool {
    crate::wire::marker::has_marker(s)
}

/// Recorded JSON equal to actual JSON, markers standing for any value.
pub fn wildcard_eq(recorded: &Value, actual: &Value) -> bool {
    crate::wire::marker::wildcard_eq(recorded, actual)
}

/// Markers' hashes left out, as replay compares.
pub fn strip_marker_hashes(v: &mut Value) {
    crate::wire::marker::strip_marker_hashes(v)
}

// ---- Claude Code's state file (`run::claude_dir`) ----

/// The state file's servers rewritten for a run in `bases` (no file touched): each rewritten
/// entry's pointer and what it was, and the servers.
pub fn claude_point(
    json: &mut Value,
    bases: &[&Path],
    through: &Through,
    http: HttpHook<'_>,
) -> (Vec<(String, Value)>, Rewritten) {
    crate::run::claude_dir::point(json, bases, through, http, crate::run::config::KEEP_NONE)
}

/// A copy of the state file given back with the entries as they were.
pub fn claude_unpoint(entries: &[(String, Value)], bytes: Vec<u8>) -> Vec<u8> {
    crate::run::claude_dir::unpoint(entries, bytes)
}
