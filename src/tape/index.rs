//! The exchange index of one server's conversation on a tape: requests paired with their
//! responses, what the server sent while each was open, and the messages tied to no exchange.
//! It holds offsets into the tape file and match hashes, never copies of message bodies.

use super::format::{End, Header, MsgLine, ServerDecl};
use super::open_ids::id_key;
use super::reader::{
    BadLine, Chain, Entry, ReadOptions, Scanned, ScannedEntry, TapeError, TapeReader, Warning,
};
use super::request_facts::{request_facts, RequestFacts, Scratch};
use super::scan::{BodyText, HttpMeta, MsgFields};
use crate::wire::canonical::canonical;
use crate::wire::params::{match_key, params_of, progress_token, target_key, target_of, MatchKey};
use crate::wire::{Dir, Kind};
use base64::Engine as _;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where a message's body lies in the tape file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Body {
    /// The verbatim JSON message.
    Json {
        /// Byte offset in the tape file.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// A JSON string literal holding a non-JSON UTF-8 line.
    Text {
        /// Byte offset of the literal (its opening quote) in the tape file.
        offset: u64,
        /// Length of the literal in bytes, quotes included.
        len: u32,
    },
    /// A JSON string literal holding base64 of a non-UTF-8 line.
    B64 {
        /// Byte offset of the literal (its opening quote) in the tape file.
        offset: u64,
        /// Length of the literal in bytes, quotes included.
        len: u32,
    },
    /// Only the length of an over-long line is known.
    Oversize {
        /// The line's full length in bytes, as it crossed the wire.
        len: u64,
    },
}

/// One message of the indexed conversation: what matching and reports need, and where its body
/// lies (read it with [`TapeIndex::read_bytes`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MsgMeta {
    /// Its `seq` on the tape.
    pub seq: u64,
    /// Microseconds since the recording started.
    pub t_us: u64,
    /// 1-based line in the tape file.
    pub line: u64,
    /// Which way it went.
    pub dir: Dir,
    /// What it is.
    pub kind: Kind,
    /// The JSON-RPC id as its exact JSON text (`1`, `"1"` and `1.0` differ); None when it has
    /// none.
    pub id: Option<String>,
    /// The JSON-RPC method, for requests and notifications.
    pub method: Option<String>,
    /// Where its bytes are in the tape file.
    pub body: Body,
    /// A JSON object body: where the value of its one top-level `id` lies, relative to the
    /// body's start (found while the index validates it); `None` when that is not known.
    pub id_in_body: Option<(u32, u32)>,
    /// Recorded over HTTP inside an SSE stream.
    pub sse: bool,
    /// HTTP: the request (id text) whose answer stream this server message came on.
    pub stream_of: Option<String>,
    /// HTTP: the recorded session (numbered in order of appearance) the message belongs to, and
    /// what its answer was.
    pub http: Option<Box<HttpMsg>>,
    /// Added to the tape after its recording (`play --on-miss live`).
    #[serde(default)]
    pub appended: bool,
    /// How its line was framed on the wire around the body: its terminator and the whitespace
    /// around its JSON (what play over stdio writes back).
    #[serde(default)]
    pub ends: LineEnds,
}

/// What a stdio line held besides its message: the whitespace before and after the JSON (on
/// the tape, spliced into `msg` with it: the bytes just before and after [`Body::Json`]'s
/// span) and whether it ended in `\r\n`. All zero for nearly every message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineEnds {
    /// Bytes of whitespace before the JSON.
    pub lead: u32,
    /// Bytes of whitespace after it.
    pub trail: u32,
    /// The line ended in `\r\n` rather than `\n` (`crlf` on the tape).
    pub crlf: bool,
}

impl LineEnds {
    /// A line ended by a bare `\n`, with nothing around its message.
    pub fn is_plain(&self) -> bool {
        *self == LineEnds::default()
    }
}

/// A message's HTTP facts, as play and the pairing need them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpMsg {
    /// The recorded session (its `Mcp-Session-Id`, numbered on the tape).
    pub session: Option<u32>,
    /// The POST that carried it (see `format::HttpFacts::post`).
    pub post: Option<u64>,
    /// For an answer: its HTTP status.
    pub status: Option<u16>,
    /// For an answer: its `Content-Type`.
    pub content_type: Option<String>,
    /// A server message: its SSE event id.
    pub event_id: Option<String>,
    /// A server message that came in an SSE event: the event's name, when the server gave one
    /// (play writes `event:` only then).
    pub event: Option<SseName>,
    /// A server message came on a GET stream (a resumed stream, when it answers a POSTed
    /// request).
    pub on_get: bool,
    /// A server message whose HTTP answer carried the session's `Mcp-Session-Id` (both
    /// reference SDKs' servers send it on every answer in a session): play sends its own.
    #[serde(default)]
    pub with_session: bool,
}

/// An SSE event's name as recorded: `message`, what nearly every server names its events, is
/// kept without a string of its own (a big tape has one per message).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SseName {
    /// `event: message`.
    Message,
    /// Any other name.
    Other(Box<str>),
}

impl SseName {
    /// The name as recorded.
    pub fn of(name: &str) -> SseName {
        match name {
            "message" => SseName::Message,
            other => SseName::Other(other.into()),
        }
    }

    /// The name to write after `event: `.
    pub fn as_str(&self) -> &str {
        match self {
            SseName::Message => "message",
            SseName::Other(name) => name,
        }
    }
}

/// An SSE priming event (an id with empty data, and usually a `retry:` hint): what a server
/// that will close a stream sends first, so that the client can resume it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SsePriming {
    /// The event's `id:`, which the client sends back as `Last-Event-ID` to resume.
    pub id: String,
    /// The `retry:` hint in milliseconds, when sent.
    pub retry: Option<u64>,
}

/// A client request and what came of it: its answer, and the server's messages while it was
/// open. Message numbers are indexes into [`TapeIndex::msgs`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Exchange {
    /// Index of the client's request in `msgs`.
    pub request: usize,
    /// Index of the server's answer (result or error) in `msgs`; None when none came (over
    /// HTTP, also when the request was refused: see `refusal`).
    pub response: Option<usize>,
    /// Server-to-client messages sent while this exchange was open, in order (notifications,
    /// server-initiated requests, stray lines).
    pub during: Vec<usize>,
    /// Server request (index in `msgs`) → the client's recorded answer (index in `msgs`).
    pub client_answers: HashMap<usize, usize>,
    /// Hash of method and match params (volatile fields removed).
    pub(crate) key: MatchKey,
    /// Hash of method and the params' exact text (`wire::params::raw_key`), where the request
    /// holds no redacted value: the first lookup of play.
    #[serde(default)]
    pub(crate) raw_key: Option<MatchKey>,
    /// The request's `_meta.progressToken`, canonical JSON text.
    pub progress_token: Option<String>,
    /// The client sent `notifications/cancelled` for it.
    pub cancelled: bool,
    /// The request holds redacted values: play matches them as wildcards.
    pub redacted: bool,
    /// Its answer was a 2026-07-28 `input_required` result: the client retries it.
    pub input_required: bool,
    /// This request is the retry (with `inputResponses`) of that earlier exchange: the two are
    /// one multi-round-trip call.
    pub retry_of: Option<usize>,
    /// HTTP: the recorded session the exchange belongs to (for `initialize`, the one its answer
    /// opened). Play over HTTP keeps a client session to one recorded session where it can.
    pub session: Option<u32>,
    /// HTTP: the request was refused without a JSON-RPC answer (its status and body).
    pub refusal: Option<Box<HttpRefusal>>,
    /// HTTP: the priming event that opened the answer's POST stream.
    pub priming: Option<Box<SsePriming>>,
    /// HTTP: the answer's POST stream was closed and the client resumed it with a GET
    /// (`Last-Event-ID`): the rest came on that GET stream, which opened with this priming.
    pub resumed: Option<Box<SsePriming>>,
    /// HTTP: a hash of the routing headers the request carried (`Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`, `MCP-Protocol-Version`); 0 for none. Two requests with one body and
    /// different headers (one of them refused for a header mismatch) are told apart by it.
    pub headers: u64,
}

/// A server message tied to no exchange, with the point of the conversation it came at.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Standalone {
    /// How many client messages had been sent before it (in its session, over HTTP).
    pub point: u64,
    /// HTTP: the recorded session it came in (on that session's GET stream).
    pub session: Option<u32>,
    /// Index of the message in `msgs`.
    pub msg: usize,
    /// For a server request: the client's recorded answer.
    pub client_answer: Option<usize>,
}

/// A client line that no server could serve as a request (not JSON, not a message, a batch, a
/// request whose id is not a string or a number, a method with `"id": null`: see
/// `wire::classify::unservable`), and how the recorded server answered it, if it did.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BadClientLine {
    /// Index of the client's line in `msgs`.
    pub msg: usize,
    /// The server's error without an id (`"id": null`, as JSON-RPC answers what it cannot
    /// read) that answered it: paired with the earliest unanswered bad line of its scope, on
    /// its own POST over HTTP.
    pub answer: Option<usize>,
    /// A request with an id that is not a string or a number is also an exchange (a server
    /// may answer it with that id): its number.
    pub exchange: Option<usize>,
    /// Over HTTP, the refusal without a JSON-RPC answer its POST got (`http-error`): the
    /// HTTP+SSE transport's servers answer a body they cannot read `400` with a plain text.
    #[serde(default)]
    pub refusal: Option<Box<HttpRefusal>>,
}

impl BadClientLine {
    /// The refusal its POST got, also where it is the refusal of its exchange.
    pub fn refusal<'a>(&'a self, index: &'a TapeIndex) -> Option<&'a HttpRefusal> {
        self.refusal.as_deref().or_else(|| {
            let ex = index.exchanges.get(self.exchange?)?;
            ex.refusal.as_deref()
        })
    }
}

/// An HTTP answer that carried no JSON-RPC message: a refusal (`405` with `Allow: POST`, a
/// plain-text `400`, a `404` for an unknown session), as `record --url` taped it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpRefusal {
    /// The HTTP status (400 when the tape does not say).
    pub status: u16,
    /// Its `Content-Type`, when it had one.
    pub content_type: Option<String>,
    /// Its `Allow` header, when it had one.
    pub allow: Option<String>,
    /// The body (errors are small: at most 64 KiB of it is taped).
    pub body: String,
    /// It carried the session's `Mcp-Session-Id` (the Python SDK's server sends it on every
    /// answer in a session, its `202 Accepted` too): play sends its own session's.
    #[serde(default)]
    pub session: bool,
}

/// Which `Mcp-Session-Id` a recorded answer to a GET or a DELETE carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SessionSent {
    /// None.
    #[default]
    None,
    /// The one the request named (the session's own: both reference SDKs' servers send it on
    /// a GET stream, the Python SDK's on its `200` to a DELETE too).
    Same,
    /// Another one: the Python SDK's server gives a GET or DELETE without a session id its
    /// `400` with a new id of a session it never keeps.
    Other,
}

/// How the server answered a GET or a DELETE, as `http-get` and `http-delete` tape it: a GET
/// stream opened (`text/event-stream`, no body), a session ended, or a refusal — JSON-RPC
/// error bodies included (`404` "Session not found" from the Python SDK's server, `400` from
/// server-everything's).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpAnswer {
    /// The HTTP status.
    pub status: u16,
    /// Its `Content-Type`, when it had one.
    pub content_type: Option<String>,
    /// Its `Allow` header, when it had one.
    pub allow: Option<String>,
    /// The body (at most 64 KiB of it is taped; none for a stream).
    pub body: String,
    /// The `Mcp-Session-Id` it carried.
    pub session: SessionSent,
}

impl HttpAnswer {
    /// A `2xx`: the stream opened, the session ended.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// How the server answered one method (GET or DELETE), by what the request named: the first
/// answer taped of each case. Play answers a request as the recorded one of its case.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionAnswers {
    /// A request that named no session.
    pub missing: Option<HttpAnswer>,
    /// A request that named a session the server had (it had given that id on an answer, and
    /// no DELETE of it had succeeded; or it answered with a success).
    pub open: Option<HttpAnswer>,
    /// A request that named a session the server did not have (never given on the tape, or
    /// deleted).
    pub unknown: Option<HttpAnswer>,
    /// A GET refused `409 Conflict` in a session the server had: the TypeScript and Python
    /// SDKs' servers allow one GET stream a session and refuse a second while the first is
    /// open. Kept apart from `open`, which says how a GET opening the stream is answered.
    #[serde(default)]
    pub conflict: Option<HttpAnswer>,
}

impl SessionAnswers {
    /// The slot of a case: the request named no session (`None`), one the server had
    /// (`Some(true)`), one it had not (`Some(false)`).
    pub fn of(&self, named: Option<bool>) -> Option<&HttpAnswer> {
        match named {
            None => self.missing.as_ref(),
            Some(true) => self.open.as_ref(),
            Some(false) => self.unknown.as_ref(),
        }
    }

    /// The slot of a case, to fill (see [`Self::of`]).
    fn slot_mut(&mut self, named: Option<bool>) -> &mut Option<HttpAnswer> {
        match named {
            None => &mut self.missing,
            Some(true) => &mut self.open,
            Some(false) => &mut self.unknown,
        }
    }
}

/// The `Access-Control-*` headers of a recorded answer (`http-options`, `http-cors`), which play
/// gives a browser again (`transport::cors`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpCors {
    /// The answer's status (a preflight's; `200` for the headers of other answers).
    pub status: u16,
    /// Name (lower case) and value, in the order the server sent them.
    pub headers: Vec<(String, String)>,
    /// Names whose value was the request's own (an `Origin` reflected, the requested headers
    /// allowed): play gives the live request's.
    pub reflected: Vec<String>,
}

impl HttpCors {
    /// Read from an event's `status`, `headers` and `reflected`.
    fn of(
        status: Option<u16>,
        headers: &serde_json::Map<String, Value>,
        reflected: &[String],
    ) -> HttpCors {
        HttpCors {
            status: status.unwrap_or(200),
            headers: headers
                .iter()
                .filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_string())))
                .collect(),
            reflected: reflected.to_vec(),
        }
    }
}

/// What an HTTP tape says about requests that are not POSTed messages.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpSummary {
    /// How the server refused a GET or a DELETE (the first such refusal, by method).
    pub refusals: std::collections::BTreeMap<String, HttpRefusal>,
    /// Server messages that came on a GET stream (a server that refuses GET sends none).
    pub get_stream_msgs: u64,
    /// How the server answered a POST that called for no JSON-RPC answer (a notification, a
    /// response; any POST on the older HTTP+SSE transport): the first such answer taped
    /// (`http-accepted`), `allow` unused. `None` on a tape recorded before it was taped.
    pub accepted: Option<HttpRefusal>,
    /// How the server answered a browser's preflight (`OPTIONS`, `http-options`): the first
    /// one taped. `None` when no client sent one (or on a tape from before it was taped).
    #[serde(default)]
    pub preflight: Option<HttpCors>,
    /// The CORS headers its other answers carried (`http-cors`): the first set taped.
    #[serde(default)]
    pub cors: Option<HttpCors>,
    /// How the server answered GETs (`http-get` with its answer); empty on a tape recorded
    /// before mcptape taped the answer, where `refusals` says what there is to say.
    #[serde(default)]
    pub get: SessionAnswers,
    /// How the server answered DELETEs (`http-delete` with its answer).
    #[serde(default)]
    pub delete: SessionAnswers,
    /// The server sent the session's `Mcp-Session-Id` on its answers in a session, not only
    /// on `initialize`'s (both reference SDKs' servers do): play's own answers in a session
    /// (a miss explained, an unrecorded ping, an injected error, a GET stream or a DELETE the
    /// tape has no answer for) carry play's.
    #[serde(default)]
    pub session_on_answers: bool,
}

/// One server's conversation on a tape, indexed: its messages, its exchanges, and the server
/// messages tied to no exchange. Bodies stay in the file; the index keeps it open to read them.
pub struct TapeIndex {
    /// The tape's path, as loaded.
    pub path: PathBuf,
    /// The tape's header line.
    pub header: Header,
    /// Every server the tape declares, in order (not only the one indexed).
    pub servers: Vec<ServerDecl>,
    /// Every label the tape's message lines carry, in the order met (not only the one indexed):
    /// with `servers`, the labels `--server` takes. A label may be on message lines only, not
    /// declared: added by `play --on-miss live --append-to` to a tape of another server, or a
    /// tape written by hand or by an older tool.
    pub labels: Vec<String>,
    /// The server label this index covers.
    pub server: String,
    /// The closing line; None when the recording did not end cleanly.
    pub end: Option<End>,
    /// What the reader found worth saying (torn last line, not closed, broken chain).
    pub warnings: Vec<Warning>,
    /// The server's messages in tape order, both directions.
    pub msgs: Arc<Vec<MsgMeta>>,
    /// The client's requests with their answers, in the order they were sent.
    pub exchanges: Arc<Vec<Exchange>>,
    /// Server messages tied to no exchange.
    pub standalone: Arc<Vec<Standalone>>,
    /// HTTP tapes: refused GETs and DELETEs, and how much came on GET streams.
    pub http: HttpSummary,
    /// The client lines no server could serve as requests, in tape order, with the recorded
    /// server's answers.
    pub bad_lines: Arc<Vec<BadClientLine>>,
    /// The tape, for bodies: read ahead in chunks (`read_ahead.rs`).
    file: super::read_ahead::ReadAhead,
}

/// A hash-chain check running on its own thread (`TapeIndex::load_deferred`). Dropping it makes
/// sure the check is done and reported: if the background thread has not finished (it runs at
/// the lowest priority and a busy machine may starve it), the check runs on the dropping thread.
pub struct PendingChain(Arc<ChainJob>);

type Report = Box<dyn FnOnce(Warning) + Send>;

struct ChainJob {
    path: PathBuf,
    /// Taken by whichever thread finishes the check first; held while it reports.
    report: Mutex<Option<Report>>,
    /// A cold start's index, to be kept in the cache: written first by the same thread (or the
    /// drop), so that serving does not wait for it.
    store: Mutex<Option<super::index_cache::PendingStore>>,
}

impl ChainJob {
    fn store_pending(&self) -> bool {
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn check_pending(&self) -> bool {
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Writes the index to the cache unless done already, under the lock: a drop that comes
    /// meanwhile waits for the entry rather than exit with it half written.
    fn write_store(&self) {
        let mut slot = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pending) = slot.take() {
            pending.write();
        }
    }

    fn run(&self, slot: &mut Option<Report>) {
        let report = slot.take();
        // The tape was just read whole; an error reading it again is not a broken chain.
        if let (Ok(Some(line)), Some(report)) = (self.check(), report) {
            report(Warning::ChainBroken { line });
        }
    }

    /// Checks the chain (`Some(line)`: broken there); a chain found whole is remembered for
    /// this very file (`index_cache.rs`), so the next play need not check it again.
    fn check(&self) -> Result<Option<u64>, TapeError> {
        let stamp = super::index_cache::FileStamp::of(&self.path);
        let broken = TapeReader::open(&self.path).and_then(TapeReader::check_chain)?;
        if let (None, Some(stamp)) = (broken, stamp) {
            super::index_cache::note_chain_held(&self.path, &stamp);
        }
        Ok(broken)
    }
}

impl PendingChain {
    /// Waits for the check to finish (its warning, if any, has then been reported).
    pub fn wait(self) {}
}

impl Drop for PendingChain {
    fn drop(&mut self) {
        self.0.write_store();
        let mut slot = self.0.report.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            self.0.run(&mut slot);
        }
    }
}

impl TapeIndex {
    /// Reads the tape and indexes the conversation of `server` (default: the first declared).
    pub fn load(path: &Path, server: Option<&str>) -> Result<TapeIndex, TapeError> {
        Self::load_with(path, server, ReadOptions::default())
    }

    /// [`load`](Self::load), with how bad lines are treated (`--skip-bad-lines`).
    pub fn load_with(
        path: &Path,
        server: Option<&str>,
        options: ReadOptions,
    ) -> Result<TapeIndex, TapeError> {
        Self::load_checking(path, server, true, options)
    }

    /// The lines skipped as malformed (`--skip-bad-lines`), in tape order.
    pub fn skipped_lines(&self) -> Vec<BadLine> {
        super::reader::skipped_lines(&self.warnings)
    }

    /// Loads a tape this process has just written itself (`check`'s observed recording): its
    /// hash chain cannot have been changed by anyone else, so it is not checked.
    pub(crate) fn load_own(path: &Path) -> Result<TapeIndex, TapeError> {
        Self::load_checking(path, None, false, ReadOptions::default())
    }

    /// Builds the index of a big tape just written and keeps it in the user's cache
    /// (`index_cache.rs`), so that the first play of a fresh recording starts warm: `record`
    /// calls it once the tape is closed, while the tape is still in the page cache. Best
    /// effort, and nothing for a small tape (it loads fast anyway) or a tape of several
    /// servers (play is then told which one, and indexes it then).
    pub fn warm_cache(path: &Path) {
        if !super::index_cache::worth_caching(path) {
            return;
        }
        let Some(stamp) = super::index_cache::FileStamp::of(path) else {
            return;
        };
        if let Ok(index) = Self::load_checking(path, None, false, ReadOptions::default()) {
            super::index_cache::store(&index, None, stamp.clone());
            // Written whole by the caller, its chain holds as written (as for `load_own`).
            super::index_cache::note_chain_held(path, &stamp);
        }
    }

    /// Like `load`, but a big tape's hash chain is checked afterwards on a background thread of
    /// the lowest priority, so a player can answer while it runs (a small tape's is checked at
    /// once, and one found whole before on this very file not at all); a broken chain is passed to
    /// `report` (as the `ChainBroken` warning `load` would have given) when found. Call
    /// `PendingChain::wait` before exiting so that the report is never lost.
    pub fn load_deferred(
        path: &Path,
        server: Option<&str>,
        report: impl FnOnce(Warning) + Send + 'static,
    ) -> Result<(TapeIndex, PendingChain), TapeError> {
        Self::load_deferred_with(path, server, ReadOptions::default(), report)
    }

    /// [`load_deferred`](Self::load_deferred), with how bad lines are treated.
    pub fn load_deferred_with(
        path: &Path,
        server: Option<&str>,
        options: ReadOptions,
        report: impl FnOnce(Warning) + Send + 'static,
    ) -> Result<(TapeIndex, PendingChain), TapeError> {
        // A big tape's index is kept in the user's cache between plays (`index_cache.rs`): the
        // chain check below reads the whole tape in the background, unless the cache says this
        // very file's chain was found whole before. An index read skipping bad lines is neither
        // taken from the cache nor put there, so that a play without the flag still refuses the
        // tape.
        let cached = (!options.skip_bad_lines)
            .then(|| super::index_cache::load(path, server))
            .flatten();
        let mut store = None;
        let index = match cached {
            Some(parts) => Self::from_parts(path, parts)?,
            None => {
                let before = super::index_cache::FileStamp::of(path);
                let index = Self::load_checking(path, server, false, options)?;
                // Kept for the next play by the background thread below, not before serving.
                if !options.skip_bad_lines {
                    store = before.and_then(|b| super::index_cache::pending(&index, server, b));
                }
                index
            }
        };
        let held = chain_noted_whole(path, options);
        let job = Arc::new(ChainJob {
            path: path.to_path_buf(),
            report: Mutex::new((!held).then(|| Box::new(report) as Report)),
            store: Mutex::new(store),
        });
        // A small tape's chain is checked now, before serving (a few milliseconds at most):
        // checked behind the serving loop it would take the loop's caches and CPU while it
        // answers the first calls. (Its index is not kept: it loads fast.)
        if !held && std::fs::metadata(path).is_ok_and(|m| super::index_cache::is_small(m.len())) {
            let mut slot = job.report.lock().unwrap_or_else(|e| e.into_inner());
            job.run(&mut slot);
            drop(slot);
        }
        let background_work = job.store_pending() || job.check_pending();
        if !background_work {
            return Ok((index, PendingChain(job)));
        }
        let background = job.clone();
        // Without a thread the work is simply left to `PendingChain`'s drop.
        let _ = std::thread::Builder::new()
            .name("chain-check".into())
            .spawn(move || {
                lower_priority();
                background.write_store();
                if !background.check_pending() {
                    return;
                }
                let broken = background.check();
                let mut slot = background.report.lock().unwrap_or_else(|e| e.into_inner());
                // Reported under the lock, so a drop that comes meanwhile waits for the report.
                // An error leaves the check to the drop.
                if let Ok(broken) = broken {
                    let report = slot.take();
                    if let (Some(line), Some(report)) = (broken, report) {
                        report(Warning::ChainBroken { line });
                    }
                }
            });
        Ok((index, PendingChain(job)))
    }

    /// An index read back from the cache, with the tape opened for reading bodies.
    fn from_parts(path: &Path, p: super::index_cache::Parts) -> Result<TapeIndex, TapeError> {
        let file = File::open(path).map_err(|cause| TapeError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        Ok(TapeIndex {
            path: path.to_path_buf(),
            header: p.header,
            servers: p.servers,
            labels: p.labels,
            server: p.server,
            end: p.end,
            warnings: p.warnings,
            msgs: Arc::new(p.msgs),
            exchanges: Arc::new(p.exchanges),
            standalone: Arc::new(p.standalone),
            http: p.http,
            bad_lines: Arc::new(p.bad_lines),
            file: super::read_ahead::ReadAhead::new(file),
        })
    }

    fn load_checking(
        path: &Path,
        server: Option<&str>,
        check_chain: bool,
        options: ReadOptions,
    ) -> Result<TapeIndex, TapeError> {
        let mut scan = scan(path, Pick::One(server), check_chain, options, None)?;
        let (label, built) = scan.built.pop().unwrap_or_default();
        Self::of_builder(path, &scan, label, built)
    }

    /// Reads the tape once and indexes the conversation of every MCP server on it, each as
    /// [`load_with`](Self::load_with) indexes the one it is asked for (the chain checked, as
    /// there). Nothing is read twice however many servers the tape holds, and the reader's
    /// warnings come once, with the tape, not once per server.
    pub fn load_every_with(path: &Path, options: ReadOptions) -> Result<TapeServers, TapeError> {
        let scan = scan(path, Pick::Every, true, options, None)?;
        Self::every_of(path, scan)
    }

    /// [`load_every_with`](Self::load_every_with), handing `other` each line of a type the
    /// index does not read (an agent run's model lines among them) in the same read: a reader
    /// of such lines (diff's of model calls) needs no read of its own. `Err` from `other` is
    /// why the line does not read: a bad line, refused or skipped (`--skip-bad-lines`), its
    /// warning said with the tape's.
    pub fn load_every_with_lines(
        path: &Path,
        options: ReadOptions,
        other: &mut OtherLine<'_>,
    ) -> Result<TapeServers, TapeError> {
        let scan = scan(path, Pick::Every, true, options, Some(other))?;
        Self::every_of(path, scan)
    }

    /// The indexes of every conversation a `Pick::Every` scan built.
    fn every_of(path: &Path, mut scan: Scan) -> Result<TapeServers, TapeError> {
        let built = std::mem::take(&mut scan.built);
        let indexes = built
            .into_iter()
            .map(|(label, b)| Self::of_builder(path, &scan, label, b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TapeServers {
            servers: scan.servers,
            warnings: scan.warnings,
            indexes,
        })
    }

    /// The index of one conversation a scan built, with the tape opened for reading bodies.
    fn of_builder(
        path: &Path,
        scan: &Scan,
        server: String,
        b: Builder,
    ) -> Result<TapeIndex, TapeError> {
        let file = File::open(path).map_err(|e| TapeError::Io {
            path: path.to_path_buf(),
            cause: e,
        })?;
        Ok(TapeIndex {
            path: path.to_path_buf(),
            header: scan.header.clone(),
            servers: scan.servers.clone(),
            labels: scan.labels.clone(),
            server,
            end: scan.end.clone(),
            warnings: scan.warnings.clone(),
            msgs: Arc::new(b.msgs),
            exchanges: Arc::new(b.exchanges),
            standalone: Arc::new(b.standalone),
            http: b.http,
            bad_lines: Arc::new(b.bad_lines),
            file: super::read_ahead::ReadAhead::new(file),
        })
    }

    /// The message's bytes as they crossed the wire (without the line terminator).
    pub fn read_bytes(&self, m: &MsgMeta) -> io::Result<Vec<u8>> {
        match m.body {
            Body::Json { offset, len } => self.read_at(offset, len),
            Body::Text { offset, len } => {
                let raw = self.read_at(offset, len)?;
                let s: String = serde_json::from_slice(&raw).map_err(io::Error::other)?;
                Ok(s.into_bytes())
            }
            Body::B64 { offset, len } => {
                let raw = self.read_at(offset, len)?;
                let s: String = serde_json::from_slice(&raw).map_err(io::Error::other)?;
                base64::engine::general_purpose::STANDARD.decode(s).map_err(io::Error::other)
            }
            Body::Oversize { len } => Err(io::Error::other(format!(
                "line {} was {len} bytes, over the recording's size limit: only its head is on the tape",
                m.line
            ))),
        }
    }

    /// What the message's wire line held around its body: the whitespace before its JSON, and
    /// the whitespace after it followed by the CR of a `\r\n` (the line's `\n` is not
    /// included). Empty for a line of nothing but its message and a `\n`.
    pub fn read_line_ends(&self, m: &MsgMeta) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let LineEnds { lead, trail, crlf } = m.ends;
        let (mut before, mut after) = (Vec::new(), Vec::new());
        if let Body::Json { offset, len } = m.body {
            if lead > 0 {
                before = self.read_at(offset.saturating_sub(lead.into()), lead)?;
            }
            if trail > 0 {
                after = self.read_at(offset + u64::from(len), trail)?;
            }
        }
        if crlf {
            after.push(b'\r');
        }
        Ok((before, after))
    }

    /// The message as text; only for JSON bodies.
    pub fn read_text(&self, m: &MsgMeta) -> io::Result<String> {
        String::from_utf8(self.read_bytes(m)?).map_err(io::Error::other)
    }

    /// A request's params as they take part in matching.
    pub(crate) fn request_match_params(&self, m: &MsgMeta) -> io::Result<Value> {
        let text = self.read_bytes(m)?;
        Ok(match_key(
            m.method.as_deref().unwrap_or_default(),
            params_of(&text).as_ref(),
        )
        .1)
    }

    /// The tool, prompt or resource a request is about (`params.name` or `params.uri`).
    pub(crate) fn call_target(&self, req: &MsgMeta) -> Option<String> {
        target_key(req.method.as_deref()?)?;
        let params = params_of(&self.read_bytes(req).ok()?)?;
        target_of(req.method.as_deref(), Some(&params))
    }

    /// A request in a few words for humans: method, target and arguments in short.
    /// The request is read and its params parsed once (play's exit report describes every
    /// exchange a session left unused: on a big tape, thousands).
    pub(crate) fn describe_request(&self, req: &MsgMeta) -> String {
        self.describe_request_shown(req, |p| p)
    }

    /// [`describe_request`](Self::describe_request), its params as `shown` shows them (play's
    /// display rules: a tape recorded without redaction holds the client's secrets).
    pub(crate) fn describe_request_shown(
        &self,
        req: &MsgMeta,
        shown: impl FnOnce(serde_json::Value) -> serde_json::Value,
    ) -> String {
        let method = req.method.as_deref().unwrap_or("?");
        let mut s = method.to_string();
        let params = self
            .read_bytes(req)
            .ok()
            .and_then(|text| params_of(&text))
            .map(shown);
        if let Some(t) = target_of(req.method.as_deref(), params.as_ref()) {
            s.push(' ');
            s.push_str(&t);
        }
        if let Some(args) = params.as_ref().and_then(|p| p.get("arguments")) {
            s.push(' ');
            s.push_str(&crate::wire::canonical::short(Some(args), 60));
        }
        s
    }

    fn read_at(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        self.file.read_at(offset, len)
    }
}

/// A tape read once with the conversation of each of its MCP servers indexed
/// ([`TapeIndex::load_every_with`]).
pub struct TapeServers {
    /// Every server the tape declares, in order (its model API too, which has no index here).
    pub servers: Vec<ServerDecl>,
    /// What the reader found worth saying, once for the tape (each index holds the same).
    pub warnings: Vec<Warning>,
    /// One index per MCP server: the servers declared, in their order, then the labels that
    /// only message lines (or HTTP events) carry, in the order met.
    pub indexes: Vec<TapeIndex>,
}

impl TapeServers {
    /// The index of the server labelled `label`.
    pub fn get(&self, label: &str) -> Option<&TapeIndex> {
        self.indexes.iter().find(|i| i.server == label)
    }

    /// The lines skipped as malformed (`--skip-bad-lines`), in tape order.
    pub fn skipped_lines(&self) -> Vec<BadLine> {
        super::reader::skipped_lines(&self.warnings)
    }
}

/// What [`TapeIndex::load_every_with_lines`] hands a line the index does not read: its number
/// and bytes; `Err` says why it does not read.
pub type OtherLine<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// Which conversations one read of a tape indexes.
#[derive(Clone, Copy)]
enum Pick<'a> {
    /// One server's: the label asked for, else the first MCP server declared, else the label
    /// of the first message line.
    One(Option<&'a str>),
    /// Every MCP server's, each apart.
    Every,
}

/// What one read of a tape found: its header, declarations, end and warnings, and the
/// conversations picked, built ([`Pick`]).
struct Scan {
    header: Header,
    servers: Vec<ServerDecl>,
    /// The labels of the message lines, in the order met.
    labels: Vec<String>,
    end: Option<End>,
    warnings: Vec<Warning>,
    /// `Pick::One`: the one conversation. `Pick::Every`: one per label, declared servers
    /// first; a declared model API's left out.
    built: Vec<(String, Builder)>,
}

/// The conversations being built while the tape is read, by label.
struct Conversations {
    every: bool,
    /// `Pick::One`: the label taken, once known.
    chosen: Option<String>,
    /// `Pick::One`: one builder, whose label is `chosen`. `Pick::Every`: one per label met.
    built: Vec<(String, Builder)>,
}

impl Conversations {
    fn new(pick: Pick<'_>) -> Conversations {
        match pick {
            Pick::One(server) => Conversations {
                every: false,
                chosen: server.map(str::to_string),
                built: vec![(String::new(), Builder::default())],
            },
            Pick::Every => Conversations {
                every: true,
                chosen: None,
                built: Vec::new(),
            },
        }
    }

    fn declared(&mut self, decl: &ServerDecl) {
        if self.every {
            self.of_label(&decl.server);
        } else if self.chosen.is_none() && decl.is_mcp() {
            // The default is the first MCP server: a model API is not one.
            self.chosen = Some(decl.server.clone());
        }
    }

    /// Where an HTTP event of server `label` goes (`Pick::One`: before a server is known, to
    /// the one conversation).
    fn for_event(&mut self, label: &str) -> Option<&mut Builder> {
        if self.every {
            return Some(self.of_label(label));
        }
        if self.chosen.as_deref().is_none_or(|c| c == label) {
            return self.built.first_mut().map(|(_, b)| b);
        }
        None
    }

    /// Where a message line of server `label` goes (`Pick::One`: the first message's label is
    /// taken when none is known yet).
    fn for_msg(&mut self, label: &str) -> Option<&mut Builder> {
        if self.every {
            return Some(self.of_label(label));
        }
        let chosen = self.chosen.get_or_insert_with(|| label.to_string());
        if chosen != label {
            return None;
        }
        self.built.first_mut().map(|(_, b)| b)
    }

    fn of_label(&mut self, label: &str) -> &mut Builder {
        let i = match self.built.iter().position(|(l, _)| l == label) {
            Some(i) => i,
            None => {
                self.built.push((label.to_string(), Builder::default()));
                self.built.len() - 1
            }
        };
        &mut self.built[i].1
    }

    /// The conversations built, labelled; `servers`: the tape's declarations.
    fn finish(self, servers: &[ServerDecl]) -> Vec<(String, Builder)> {
        if self.every {
            let model = |l: &str| servers.iter().any(|d| d.server == l && !d.is_mcp());
            return self.built.into_iter().filter(|(l, _)| !model(l)).collect();
        }
        let label = self
            .chosen
            .unwrap_or_else(|| super::format::DEFAULT_SERVER.to_string());
        self.built
            .into_iter()
            .take(1)
            .map(|(_, b)| (label.clone(), b))
            .collect()
    }
}

/// Reads the tape once, indexing the conversations `pick` names, and handing `other` the lines
/// of other types ([`TapeIndex::load_every_with_lines`]).
fn scan(
    path: &Path,
    pick: Pick<'_>,
    check_chain: bool,
    options: ReadOptions,
    mut other: Option<&mut OtherLine<'_>>,
) -> Result<Scan, TapeError> {
    // A chain found whole before on exactly this file (`index_cache.rs`) is not hashed
    // again; one checked whole here is noted for next time.
    let check_chain = check_chain && !chain_noted_whole(path, options);
    let stamp = check_chain
        .then(|| super::index_cache::FileStamp::of(path))
        .flatten();
    let mut reader = TapeReader::open_with(path, options)?;
    if !check_chain {
        reader.skip_chain();
    }
    let header = reader.header().clone();
    let mut servers = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    let mut conv = Conversations::new(pick);
    loop {
        let item = match reader.next_scanned()? {
            None => break,
            Some(item) => item,
        };
        let fields = match &item.entry {
            ScannedEntry::Msg(m) => m.clone(),
            ScannedEntry::Entry(Entry::Server(decl)) => {
                conv.declared(decl);
                servers.push(decl.clone());
                continue;
            }
            ScannedEntry::Entry(Entry::End(e)) => {
                end = Some(e.clone());
                continue;
            }
            ScannedEntry::Entry(Entry::Unknown) => {
                if let Some(read) = other.as_mut() {
                    let line = item.line;
                    if let Err(message) = read(line, item.raw) {
                        reader.bad_line(line, message)?;
                        continue;
                    }
                }
                if let Some(ev) = http_event(item.raw) {
                    if let Some(b) = conv.for_event(&ev.server) {
                        match ev.what.as_ref() {
                            "http-error" => b.refusal(ev),
                            "http-accepted" => b.accepted(ev),
                            "http-options" => b.preflight(ev),
                            "http-cors" => b.cors(ev),
                            "http-get" | "http-delete" => b.get_or_delete(ev),
                            "sse-priming" => b.priming(ev),
                            _ => {}
                        }
                    }
                }
                continue;
            }
            ScannedEntry::Entry(Entry::Msg(m)) => match fields_of(item.raw, m) {
                Ok(fields) => fields,
                Err(message) => {
                    let line = item.line;
                    reader.bad_line(line, message)?;
                    continue;
                }
            },
        };
        // Nearly every line has the label of the line before: one comparison.
        let label = &*fields.server;
        if labels.last().map(String::as_str) != Some(label) && !labels.iter().any(|l| l == label) {
            labels.push(fields.server.to_string());
        }
        if let Some(b) = conv.for_msg(&fields.server) {
            b.add(&item, fields);
        }
    }
    if let (Some(stamp), Chain::Linked(_) | Chain::Absent) = (&stamp, reader.chain()) {
        super::index_cache::note_chain_held(path, stamp);
    }
    let built = conv.finish(&servers);
    Ok(Scan {
        header,
        warnings: reader.warnings().to_vec(),
        servers,
        labels,
        end,
        built,
    })
}

/// Whether `path`'s hash chain was found whole before on exactly this file (`index_cache.rs`)
/// and may be taken as checked: not with `--require-chain`'s recheck, nor when bad lines are
/// skipped (a skipped line breaks the chain).
fn chain_noted_whole(path: &Path, options: ReadOptions) -> bool {
    !options.recheck_chain && !options.skip_bad_lines && super::index_cache::chain_held(path)
}

/// Runs the calling thread only when nothing else wants its CPU (Linux `SCHED_IDLE`).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid parameter; a failure
        // only leaves the priority as it was.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}

/// The index's fields of a message line that the fast scanner left to serde.
fn fields_of<'a>(raw_line: &'a [u8], m: &MsgLine<'a>) -> Result<MsgFields<'a>, String> {
    let body = if let Some(raw) = m.msg {
        BodyText::Json(raw.get())
    } else if m.kind == Kind::Oversize {
        BodyText::Oversize(m.len.unwrap_or(0))
    } else if m.text.is_some() || m.b64.is_some() {
        // Locate the string literal itself: re-scan the line for the field's raw value.
        let raw: RawFields<'_> = serde_json::from_slice(raw_line).map_err(|e| e.to_string())?;
        match (raw.text, raw.b64) {
            (Some(t), _) => BodyText::Text(t.get()),
            (None, Some(b)) => BodyText::B64(b.get()),
            _ => return Err("message line has neither msg, text nor b64".into()),
        }
    } else {
        return Err(format!("{} message has no body (msg, text or b64)", m.kind));
    };
    Ok(MsgFields {
        seq: m.seq,
        t_us: m.t_us,
        server: m.server.clone(),
        dir: m.dir,
        kind: m.kind,
        id: m.id.map(|r| r.get()),
        method: m.method.clone(),
        body,
        id_in_body: None,
        http: match &m.http {
            None => HttpMeta::default(),
            Some(h) => HttpMeta {
                sse: h
                    .content_type
                    .as_deref()
                    .is_some_and(|c| c.starts_with("text/event-stream")),
                stream_of: (m.dir == Dir::S2C && h.stream.as_deref() == Some("post"))
                    .then_some(h.request_id.map(|r| r.get()))
                    .flatten(),
                get_stream: h.stream.as_deref() == Some("get"),
                session: h.mcp_session_id.clone(),
                created: h.session.clone(),
                post: h.post,
                status: h.status,
                content_type: h.content_type.clone(),
                headers: h.routing_headers_hash(),
                event_id: h.event_id.clone(),
                event: h.event.clone(),
            },
        },
        appended: m.appended,
        crlf: m.crlf,
    })
}

fn meta_of(item: &Scanned<'_>, m: &MsgFields<'_>, session: Option<u32>) -> MsgMeta {
    // Body slices borrow from the line: their file offset follows from the line's.
    let span = |s: &str| {
        let at = item.offset + (s.as_ptr() as usize - item.raw.as_ptr() as usize) as u64;
        (at, s.len() as u32)
    };
    let mut ends = LineEnds {
        crlf: m.crlf,
        ..LineEnds::default()
    };
    let body = match m.body {
        BodyText::Json(t) => {
            let (offset, len) = span(t);
            (ends.lead, ends.trail) = padding(item.raw, (offset - item.offset) as usize, t.len());
            Body::Json { offset, len }
        }
        BodyText::Text(t) => {
            let (offset, len) = span(t);
            Body::Text { offset, len }
        }
        BodyText::B64(t) => {
            let (offset, len) = span(t);
            Body::B64 { offset, len }
        }
        BodyText::Oversize(len) => Body::Oversize { len },
    };
    MsgMeta {
        seq: m.seq,
        t_us: m.t_us,
        line: item.line,
        dir: m.dir,
        kind: m.kind,
        id: m.id.map(str::to_string),
        method: m.method.as_ref().map(|s| s.to_string()),
        body,
        id_in_body: m.id_in_body,
        sse: m.http.sse,
        stream_of: m.http.stream_of.map(str::to_string),
        http: (m.http != HttpMeta::default()).then(|| {
            Box::new(HttpMsg {
                session,
                post: m.http.post,
                status: m.http.status,
                content_type: m.http.content_type.as_deref().map(str::to_string),
                event_id: m.http.event_id.as_deref().map(str::to_string),
                event: m.http.event.as_deref().map(SseName::of),
                on_get: m.http.get_stream,
                with_session: m.http.created.is_some(),
            })
        }),
        appended: m.appended,
        ends,
    }
}

/// How many bytes of JSON whitespace are just before and just after the body at
/// `line[start..start + len]`: on a `msg` line the writer spliced the wire line in whole,
/// whitespace around its JSON included, and serde's raw value leaves that out.
fn padding(line: &[u8], start: usize, len: usize) -> (u32, u32) {
    let ws = |c: &&u8| matches!(**c, b' ' | b'\t' | b'\r' | b'\n');
    let before = line.get(..start).unwrap_or_default();
    let after = line.get(start + len..).unwrap_or_default();
    let lead = before.iter().rev().take_while(ws).count();
    let trail = after.iter().take_while(ws).count();
    (lead as u32, trail as u32)
}

/// A JSON-RPC batch whose every element is an answer (`result` or `error`, no `method`).
fn is_batch_of_answers(json: &str) -> bool {
    serde_json::from_str::<Vec<Value>>(json).is_ok_and(|items| {
        !items.is_empty()
            && items.iter().all(|m| {
                m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some())
            })
    })
}

/// What the first bytes of an `oversize` line's message (its `b64`) tell; `None` when the
/// line has no head that reads.
fn oversize_head(raw_line: &[u8]) -> Option<crate::wire::HeadFacts> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        b64: Option<Cow<'a, str>>,
    }
    let line = raw_line.strip_suffix(b"\n").unwrap_or(raw_line);
    let head: Head<'_> = serde_json::from_slice(line).ok()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(head.b64?.as_bytes())
        .ok()?;
    Some(crate::wire::head_facts(&bytes))
}

#[derive(serde::Deserialize)]
struct RawFields<'a> {
    #[serde(borrow, default)]
    text: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    b64: Option<&'a serde_json::value::RawValue>,
}

/// Requests are paired with their answers within a scope: the recorded HTTP session (ids start
/// again in every session), or, over stdio and where HTTP has no session, the whole tape. Over
/// HTTP the POST number pairs exactly, whatever the ids (the stateless era sends many POSTs with
/// one id).
type Scope = Option<u32>;

/// The builder's maps: FxHash, where std's SipHash was about 3 % of a cold start (the keys
/// are the tape's own ids and numbers, no one else's input).
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

#[derive(Default)]
struct Builder {
    msgs: Vec<MsgMeta>,
    exchanges: Vec<Exchange>,
    standalone: Vec<Standalone>,
    bad_lines: Vec<BadClientLine>,
    /// Bad lines not answered yet, per scope, in order (numbers in `bad_lines`).
    bad_open: FastMap<Scope, VecDeque<usize>>,
    /// Client messages so far, per scope.
    c2s_count: FastMap<Scope, u64>,
    /// Open exchanges per scope; in opening order, since exchange numbers grow (a set: closing
    /// one is not a scan of all open ones).
    open: FastMap<Scope, BTreeSet<usize>>,
    /// Open exchanges by scope and request id.
    open_by_id: OpenById,
    /// Open exchanges by the POST that carried their request.
    open_by_post: FastMap<u64, usize>,
    open_by_token: FastMap<(Scope, String), usize>,
    /// Server request (scope, id) → (exchange, or None when standalone; message index).
    server_requests: FastMap<(Scope, String), (Option<usize>, usize)>,
    /// Exchange → its request's `params.name`, for linking multi-round-trip retries.
    request_names: Vec<Option<Value>>,
    /// Recorded HTTP session ids (as on the tape: markers) → their numbers.
    sessions: FastMap<String, u32>,
    /// The sessions the server had at this point of the tape: it gave their ids on an answer,
    /// and no DELETE of them succeeded since (true).
    alive: FastMap<u32, bool>,
    http: HttpSummary,
    /// SSE event ids sent on an exchange's POST stream → the exchange (what a GET with
    /// `Last-Event-ID` resumes).
    event_ids: FastMap<(Scope, String), usize>,
    /// `request_facts`'s buffers, kept between requests.
    scratch: Scratch,
}

/// Open exchanges by scope and request id (its JSON text; a string written with escapes as
/// `id_key` spells it); a list, first in first out, because a client may (wrongly) reuse an id
/// while an earlier request with it is still open. Looked up by the id's text as it stands on
/// the line: no key is built for an answer, but for the rare string id with an escape.
#[derive(Default)]
struct OpenById(FastMap<Scope, FastMap<String, Queue>>);

/// The open exchanges with one id: nearly always one, kept without a list of its own (an
/// allocation for every request otherwise).
enum Queue {
    One(usize),
    Many(VecDeque<usize>),
}

impl Queue {
    fn front(&self) -> Option<usize> {
        match self {
            Queue::One(ex) => Some(*ex),
            Queue::Many(q) => q.front().copied(),
        }
    }

    fn push_back(&mut self, ex: usize) {
        match self {
            Queue::One(first) => *self = Queue::Many(VecDeque::from([*first, ex])),
            Queue::Many(q) => q.push_back(ex),
        }
    }

    /// Takes the first; whether the queue is empty after.
    fn pop_front(&mut self) -> (Option<usize>, bool) {
        match self {
            Queue::One(ex) => (Some(*ex), true),
            Queue::Many(q) => (q.pop_front(), q.is_empty()),
        }
    }

    /// Removes `ex`; whether the queue is empty after.
    fn remove(&mut self, ex: usize) -> bool {
        match self {
            Queue::One(e) => *e == ex,
            Queue::Many(q) => {
                q.retain(|&e| e != ex);
                q.is_empty()
            }
        }
    }
}

impl OpenById {
    fn push(&mut self, scope: Scope, id: &str, ex: usize) {
        let id = &*id_key(id);
        let ids = self.0.entry(scope).or_default();
        match ids.get_mut(id) {
            Some(queue) => queue.push_back(ex),
            None => {
                ids.insert(id.to_string(), Queue::One(ex));
            }
        }
    }

    fn front(&self, scope: Scope, id: &str) -> Option<usize> {
        self.0.get(&scope)?.get(&*id_key(id))?.front()
    }

    fn pop_front(&mut self, scope: Scope, id: &str) -> Option<usize> {
        let id = &*id_key(id);
        let ids = self.0.get_mut(&scope)?;
        let (ex, empty) = ids.get_mut(id)?.pop_front();
        if empty {
            ids.remove(id);
        }
        ex
    }

    fn remove(&mut self, scope: Scope, id: &str, ex: usize) {
        let id = &*id_key(id);
        if let Some(ids) = self.0.get_mut(&scope) {
            if ids.get_mut(id).is_some_and(|queue| queue.remove(ex)) {
                ids.remove(id);
            }
        }
    }
}

/// What the index keeps of a client's request.
struct Request {
    facts: RequestFacts,
    /// `wire::params::raw_key`, unless the request is redacted (or its params unreadable).
    raw_key: Option<MatchKey>,
    /// It carries `inputResponses`: a retry of an earlier call that asked for input.
    retry: bool,
    redacted: bool,
}

impl Builder {
    fn session_number(&mut self, id: Option<&str>) -> Scope {
        let id = id?;
        // A redacted id is its marker; the rule part may differ between the field asked with
        // and the one given (`key:mcp_session_id` / `key:session` on older tapes): the keyed
        // hash is what names the session.
        let id = match crate::redact::marker_rule(id) {
            Some(rule) => &id[crate::redact::MARKER_PREFIX.len() + rule.len()..],
            None => id,
        };
        let next = self.sessions.len() as u32;
        Some(*self.sessions.entry(id.to_string()).or_insert(next))
    }

    /// Closes an exchange once answered (or given up on): no later message belongs to it.
    fn close(&mut self, ex: usize, scope: Scope) {
        if let Some(open) = self.open.get_mut(&scope) {
            open.remove(&ex);
        }
        let req = &self.msgs[self.exchanges[ex].request];
        if let Some(post) = req.http.as_ref().and_then(|h| h.post) {
            if self.open_by_post.get(&post) == Some(&ex) {
                self.open_by_post.remove(&post);
            }
        }
        if let Some(t) = self.exchanges[ex].progress_token.clone() {
            let key = (scope, t);
            if self.open_by_token.get(&key) == Some(&ex) {
                self.open_by_token.remove(&key);
            }
        }
    }

    /// An event id sent on the exchange's own POST stream: a GET may resume from it.
    fn note_event_id(&mut self, http: &HttpMeta<'_>, scope: Scope, ex: usize) {
        if let (Some(id), false) = (http.event_id.as_deref(), http.get_stream) {
            self.event_ids.insert((scope, id.to_string()), ex);
        }
    }

    /// The open exchange an answer with `id` answers: by its POST, else by id in its scope.
    fn answered(&mut self, scope: Scope, post: Option<u64>, id: &str) -> Option<usize> {
        if let Some(&ex) = post.and_then(|p| self.open_by_post.get(&p)) {
            let req = &self.msgs[self.exchanges[ex].request];
            if req.id.as_deref() == Some(id) {
                self.open_by_id.remove(scope_of(req), id, ex);
                return Some(ex);
            }
        }
        self.open_by_id.pop_front(scope, id)
    }

    /// The open request POST `post` carried, no longer open by its id: it was answered by an
    /// error without an id.
    fn refused_post(&mut self, post: u64) -> Option<usize> {
        let ex = *self.open_by_post.get(&post)?;
        let req = &self.msgs[self.exchanges[ex].request];
        if let Some(id) = req.id.clone() {
            self.open_by_id.remove(scope_of(req), &id, ex);
        }
        Some(ex)
    }

    /// A refusal without a JSON-RPC answer: the POSTed request it answers (by POST, else by id
    /// in the session) is answered by it; a refused GET or DELETE is kept for play.
    fn refusal(&mut self, ev: HttpEvent<'_>) {
        // Before the event taped the answer's own content type only, a POST refused without
        // one taped the request's (`application/json`). An answer of that type with a body is
        // taped as a message, never as this event: here it can only be the request's.
        let requests = ev.method.as_deref() == Some("POST")
            && ev.body.as_deref().is_some_and(|b| !b.is_empty())
            && ev
                .content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("application/json"));
        let refusal = HttpRefusal {
            status: ev.status.unwrap_or(400),
            content_type: ev
                .content_type
                .filter(|_| !requests)
                .map(|c| c.into_owned()),
            allow: ev.allow.map(|a| a.into_owned()),
            body: ev.body.map(|b| b.into_owned()).unwrap_or_default(),
            session: ev.session.is_some(),
        };
        match ev.method.as_deref() {
            Some("POST") => {
                let scope = self.session_number(ev.mcp_session_id.as_deref());
                let id = ev.request_id.map(|r| r.get());
                let ex = match id {
                    Some(id) => self.answered(scope, ev.post, id),
                    None => ev.post.and_then(|p| self.open_by_post.get(&p).copied()),
                };
                if let Some(ex) = ex {
                    self.exchanges[ex].refusal = Some(Box::new(refusal));
                    let req_scope = scope_of(&self.msgs[self.exchanges[ex].request]);
                    self.close(ex, req_scope);
                } else if let Some(b) = ev.post.and_then(|p| self.bad_line_of_post(p)) {
                    // A body no server could serve (not JSON, no message), refused.
                    self.bad_lines[b].refusal = Some(Box::new(refusal));
                }
            }
            Some(m) => {
                self.http.refusals.entry(m.to_string()).or_insert(refusal);
            }
            None => {}
        }
    }

    /// The bad client line POST `post` carried (the latest: a POST's answer follows it).
    fn bad_line_of_post(&self, post: u64) -> Option<usize> {
        self.bad_lines
            .iter()
            .rposition(|b| self.msgs[b.msg].http.as_ref().and_then(|h| h.post) == Some(post))
    }

    /// How the server answered a POST without a message (`http-accepted`): the first one is
    /// what play answers such POSTs with.
    /// A preflight's answer (`OPTIONS`): the first one taped, which play gives every preflight.
    fn preflight(&mut self, ev: HttpEvent<'_>) {
        if self.http.preflight.is_none() {
            let headers = ev.headers.unwrap_or_default();
            self.http.preflight = Some(HttpCors::of(ev.status, &headers, &ev.reflected));
        }
    }

    /// The CORS headers the server's other answers carried: the first set taped.
    fn cors(&mut self, ev: HttpEvent<'_>) {
        if self.http.cors.is_none() {
            if let Some(headers) = ev.headers {
                self.http.cors = Some(HttpCors::of(ev.status, &headers, &ev.reflected));
            }
        }
    }

    /// A GET or a DELETE and how the server answered it (`http-get`, `http-delete`: with
    /// `status` since mcptape tapes the answer; before, the request only, which play does not
    /// need). The first answer of each case is kept: the request named no session, one the
    /// server had, one it had not.
    fn get_or_delete(&mut self, ev: HttpEvent<'_>) {
        let Some(status) = ev.status else {
            return;
        };
        let named = self.session_number(ev.mcp_session_id.as_deref());
        let given = ev.session.as_deref().map(|s| self.session_number(Some(s)));
        let session = match given {
            None => SessionSent::None,
            Some(n) if n == named => SessionSent::Same,
            Some(_) => SessionSent::Other,
        };
        let answer = HttpAnswer {
            status,
            content_type: ev.content_type.map(|c| c.into_owned()),
            allow: ev.allow.map(|a| a.into_owned()),
            body: ev.body.map(|b| b.into_owned()).unwrap_or_default(),
            session,
        };
        if session == SessionSent::Same {
            self.http.session_on_answers = true;
        }
        let delete = ev.what == "http-delete";
        let case = match named {
            None => None,
            Some(n) => {
                // A success says the server had it, whatever the tape showed before.
                let open = answer.is_success() || self.alive.get(&n) == Some(&true);
                if answer.is_success() {
                    self.alive.insert(n, !delete);
                }
                Some(open)
            }
        };
        let answers = if delete {
            &mut self.http.delete
        } else {
            &mut self.http.get
        };
        if !delete && status == 409 && case == Some(true) {
            answers.conflict.get_or_insert(answer);
            return;
        }
        answers.slot_mut(case).get_or_insert(answer);
    }

    fn accepted(&mut self, ev: HttpEvent<'_>) {
        if self.http.accepted.is_none() {
            self.http.accepted = Some(HttpRefusal {
                status: ev.status.unwrap_or(202),
                content_type: ev.content_type.map(|c| c.into_owned()),
                allow: None,
                body: ev.body.map(|b| b.into_owned()).unwrap_or_default(),
                session: ev.session.is_some(),
            });
        }
    }

    /// A priming event: on a POST's stream, the exchange's answer stream opened with it; on a
    /// GET resuming a stream (`Last-Event-ID`), the exchange whose stream that was goes on there.
    fn priming(&mut self, ev: HttpEvent<'_>) {
        let Some(id) = ev.event_id.as_deref() else {
            return;
        };
        let scope = self.session_number(ev.mcp_session_id.as_deref());
        let priming = Box::new(SsePriming {
            id: id.to_string(),
            retry: ev.retry,
        });
        match ev.stream.as_deref() {
            Some("post") => {
                let ex = ev
                    .post
                    .and_then(|p| self.open_by_post.get(&p).copied())
                    .or_else(|| self.open_by_id.front(scope, ev.request_id?.get()));
                if let Some(ex) = ex {
                    self.exchanges[ex].priming.get_or_insert(priming);
                    self.event_ids.insert((scope, id.to_string()), ex);
                }
            }
            Some("get") => {
                let resumed = ev
                    .last_event_id
                    .as_deref()
                    .and_then(|last| self.event_ids.get(&(scope, last.to_string())).copied());
                if let Some(ex) = resumed {
                    self.exchanges[ex].resumed.get_or_insert(priming);
                }
            }
            _ => {}
        }
    }

    fn add(&mut self, item: &Scanned<'_>, m: MsgFields<'_>) {
        if m.dir == Dir::S2C && m.http.get_stream {
            self.http.get_stream_msgs += 1;
        }
        let scope = self.session_number(m.http.session.as_deref());
        // Numbered here, in the order sessions are first seen, whatever the message turns out to be.
        let created = self.session_number(m.http.created.as_deref());
        if let Some(n) = created {
            // The server gave the id: it has the session (unless a DELETE ended it).
            self.alive.entry(n).or_insert(true);
            if created == scope && m.dir == Dir::S2C {
                self.http.session_on_answers = true;
            }
        }
        let mut meta = meta_of(item, &m, scope);
        // An over-long line keeps only its first bytes: its id and method are read from them,
        // so that an answer too large to record still closes its exchange.
        let head = (m.kind == Kind::Oversize)
            .then(|| oversize_head(item.raw))
            .flatten();
        if let Some(h) = &head {
            meta.id = meta.id.take().or_else(|| h.id.clone());
            meta.method = meta.method.take().or_else(|| h.method.clone());
        }
        let answer_id = head.as_ref().and_then(|h| h.answer_id());
        let json = match m.body {
            BodyText::Json(t) => Some(t),
            _ => None,
        };
        // Only the messages whose params take part in the index are parsed: the client's
        // cancellations and the server's progress notifications (a request is read by
        // `request`).
        let method_is = |name: &str| m.method.as_deref() == Some(name);
        let needs_params = match (m.dir, m.kind) {
            (Dir::C2S, Kind::Notification) => method_is("notifications/cancelled"),
            (Dir::S2C, Kind::Notification) => method_is("notifications/progress"),
            _ => false,
        };
        let params = json
            .filter(|_| needs_params)
            .and_then(|t| params_of(t.as_bytes()));
        let idx = self.msgs.len();
        self.msgs.push(meta);
        let bad = m.dir == Dir::C2S
            && crate::wire::classify::unservable(m.kind, m.id, json.map_or(&[][..], str::as_bytes));
        if bad {
            let exchange = (m.kind == Kind::Request).then_some(self.exchanges.len());
            self.bad_open
                .entry(scope)
                .or_default()
                .push_back(self.bad_lines.len());
            self.bad_lines.push(BadClientLine {
                msg: idx,
                answer: None,
                exchange,
                refusal: None,
            });
        }
        match (m.dir, m.kind, m.id) {
            (Dir::C2S, Kind::Request, Some(id)) => {
                let request = self.request(m.method.as_deref().unwrap_or_default(), json);
                self.add_request(idx, &m, id, scope, request);
            }
            (Dir::S2C, Kind::Error, None) if self.answers_bad_line(idx, scope, m.http.post) => {}
            (Dir::C2S, Kind::Response | Kind::Error, Some(id)) => {
                self.add_client_answer(idx, scope, id)
            }
            (Dir::C2S, Kind::Notification, _) if method_is("notifications/cancelled") => {
                self.add_cancel(scope, params.as_ref())
            }
            (Dir::S2C, ..) => self.add_server_msg(
                idx,
                &m,
                (json, answer_id),
                (scope, created),
                params.as_ref(),
            ),
            _ => {}
        }
        if m.dir == Dir::C2S {
            *self.c2s_count.entry(scope).or_default() += 1;
        }
    }

    /// A server error without an id answers the earliest unanswered bad client line of its
    /// scope (over HTTP, the one its POST carried); whether there was one.
    fn answers_bad_line(&mut self, idx: usize, scope: Scope, post: Option<u64>) -> bool {
        let Some(open) = self.bad_open.get_mut(&scope) else {
            return false;
        };
        let at = match post {
            Some(p) => open.iter().position(|&b| {
                let msg = &self.msgs[self.bad_lines[b].msg];
                msg.http.as_ref().and_then(|h| h.post) == Some(p)
            }),
            None => (!open.is_empty()).then_some(0),
        };
        let Some(b) = at.and_then(|i| open.remove(i)) else {
            return false;
        };
        self.bad_lines[b].answer = Some(idx);
        true
    }

    /// What the index keeps of a request of `method` whose message is `json`: read from its
    /// bytes where `request_facts` can, else from its parsed params.
    fn request(&mut self, method: &str, json: Option<&str>) -> Request {
        if let Some(r) = json.and_then(|t| request_facts(method, t, &mut self.scratch)) {
            return Request {
                raw_key: Some(crate::wire::params::raw_key(method, r.raw)),
                facts: r.facts,
                retry: false,
                redacted: false,
            };
        }
        let (params, raw) = match json {
            Some(t) => crate::wire::params::params_with_raw(t.as_bytes()),
            None => (None, None),
        };
        let redacted = json.is_some_and(crate::redact::has_marker);
        // A redacted request matches live ones by wildcard, never by its bytes.
        let raw_key = raw
            .filter(|_| !redacted)
            .map(|r| crate::wire::params::raw_key(method, r));
        let (key, _) = match_key(method, params.as_ref());
        Request {
            facts: RequestFacts {
                key,
                progress_token: progress_token(params.as_ref(), true),
                name: params.as_ref().and_then(|p| p.get("name").cloned()),
            },
            raw_key,
            retry: params
                .as_ref()
                .is_some_and(|p| p.get("inputResponses").is_some()),
            redacted,
        }
    }

    /// A client request opens an exchange, findable by id, POST and progress token.
    fn add_request(
        &mut self,
        idx: usize,
        m: &MsgFields<'_>,
        id: &str,
        scope: Option<u32>,
        request: Request,
    ) {
        let method = m.method.as_deref().unwrap_or_default();
        let Request {
            facts:
                RequestFacts {
                    key,
                    progress_token: token,
                    name,
                },
            raw_key,
            retry,
            redacted,
        } = request;
        let ex = self.exchanges.len();
        // A retry carrying `inputResponses` continues the latest exchange of the same call
        // that asked for input.
        let retry_of = retry
            .then(|| {
                (0..ex).rev().find(|&e| {
                    let prev = &self.exchanges[e];
                    prev.input_required
                        && self.msgs[prev.request].method.as_deref() == Some(method)
                        && self.request_names.get(e).map(|n| n.as_ref()) == Some(name.as_ref())
                })
            })
            .flatten();
        self.request_names.push(name);
        self.exchanges.push(Exchange {
            request: idx,
            response: None,
            during: Vec::new(),
            client_answers: HashMap::new(),
            key,
            raw_key,
            progress_token: token.clone(),
            cancelled: false,
            redacted,
            input_required: false,
            retry_of,
            session: scope,
            refusal: None,
            priming: None,
            resumed: None,
            headers: m.http.headers,
        });
        self.open.entry(scope).or_default().insert(ex);
        self.open_by_id.push(scope, id, ex);
        if let Some(p) = m.http.post {
            self.open_by_post.insert(p, ex);
        }
        if let Some(t) = token {
            self.open_by_token.insert((scope, t), ex);
        }
    }

    /// The client's answer to a server request, inside an exchange or standalone.
    fn add_client_answer(&mut self, idx: usize, scope: Option<u32>, id: &str) {
        match self
            .server_requests
            .remove(&(scope, id_key(id).into_owned()))
        {
            Some((Some(ex), req)) => {
                self.exchanges[ex].client_answers.insert(req, idx);
            }
            Some((None, req)) => {
                if let Some(s) = self.standalone.iter_mut().rev().find(|s| s.msg == req) {
                    s.client_answer = Some(idx);
                }
            }
            None => {}
        }
    }

    /// The client gave up on a request: it stays pairable with a late answer, but later server
    /// messages no longer belong to it.
    fn add_cancel(&mut self, scope: Option<u32>, params: Option<&Value>) {
        let target = params.and_then(|p| p.get("requestId")).map(canonical);
        if let Some(ex) = target.and_then(|id| self.open_by_id.front(scope, &id)) {
            self.exchanges[ex].cancelled = true;
            if let Some(open) = self.open.get_mut(&scope) {
                open.remove(&ex);
            }
        }
    }

    /// A server message: the answer that closes an exchange, a message during one, or one of
    /// its own (standalone).
    fn add_server_msg(
        &mut self,
        idx: usize,
        m: &MsgFields<'_>,
        (json, oversize_answer): (Option<&str>, Option<&str>),
        (scope, created): (Option<u32>, Option<u32>),
        params: Option<&Value>,
    ) {
        let (kind, id, post) = (m.kind, m.id, m.http.post);
        let answers = match (kind, id.or(oversize_answer)) {
            (Kind::Response | Kind::Error | Kind::Oversize, Some(id)) => {
                self.answered(scope, post, id)
            }
            _ => None,
        }
        .or_else(|| {
            // An error that is the whole body of a POST's answer and answers no open request
            // by its id (none, `null`, the Python SDK's `"server-error"`): the server refused
            // the request the POST carried before reading it (no session named, an unknown
            // one), and that is the request's answer. In an SSE stream it is a message during.
            let whole_body = kind == Kind::Error && !m.http.sse;
            post.filter(|_| whole_body)
                .and_then(|p| self.refused_post(p))
        });
        if let Some(ex) = answers {
            // Cheap first, exact second: only a candidate answer is parsed.
            static INPUT_REQUIRED: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
                std::sync::LazyLock::new(|| memchr::memmem::Finder::new("\"input_required\""));
            let input_required = json.is_some_and(|t| {
                INPUT_REQUIRED.find(t.as_bytes()).is_some()
                    && serde_json::from_str::<Value>(t).is_ok_and(|v| {
                        v.pointer("/result/resultType").and_then(Value::as_str)
                            == Some("input_required")
                    })
            });
            self.note_event_id(&m.http, scope, ex);
            self.exchanges[ex].response = Some(idx);
            self.exchanges[ex].input_required = input_required;
            let req_scope = scope_of(&self.msgs[self.exchanges[ex].request]);
            // `initialize`'s answer opens the session the exchange belongs to. Its request,
            // sent before the session had an id, is the session's first client message: a
            // server message standalone in it comes after that many (play counts the
            // `initialize` a session opens with, and sent what came after `initialized` one
            // message early: over the legacy transport, before the answer to `initialize`).
            if self.exchanges[ex].session.is_none() {
                self.exchanges[ex].session = created;
                if created.is_some() && created != req_scope {
                    *self.c2s_count.entry(created).or_default() += 1;
                }
            }
            self.close(ex, req_scope);
            return;
        }
        // A batch of answers answered a batch of the client's (2025-03-26): play does not
        // serve batches, so it belongs to no exchange and is never sent on its own.
        if kind == Kind::Batch && json.is_some_and(is_batch_of_answers) {
            return;
        }
        let ex = self.owner_of(m, scope, params);
        match ex {
            Some(ex) => {
                self.note_event_id(&m.http, scope, ex);
                self.exchanges[ex].during.push(idx)
            }
            None => self.standalone.push(Standalone {
                point: self.c2s_count.get(&scope).copied().unwrap_or(0),
                session: scope,
                msg: idx,
                client_answer: None,
            }),
        }
        if let (Kind::Request, Some(id)) = (kind, id) {
            self.server_requests
                .insert((scope, id_key(id).into_owned()), (ex, idx));
        }
    }

    /// Which open exchange a server message that is not an answer belongs to. Over HTTP the
    /// stream says (by POST, else by request id in the session); then the progress token; then
    /// the request most recently opened in the session.
    fn owner_of(
        &self,
        m: &MsgFields<'_>,
        scope: Option<u32>,
        params: Option<&Value>,
    ) -> Option<usize> {
        let by_stream = m
            .http
            .post
            .and_then(|p| self.open_by_post.get(&p).copied())
            .or_else(|| {
                m.http
                    .stream_of
                    .and_then(|rid| self.open_by_id.front(scope, rid))
            });
        if by_stream.is_some() {
            return by_stream;
        }
        if m.method.as_deref() == Some("notifications/progress") {
            if let Some(ex) = progress_token(params, false)
                .and_then(|t| self.open_by_token.get(&(scope, t)).copied())
            {
                return Some(ex);
            }
        }
        self.open.get(&scope).and_then(|o| o.last().copied())
    }
}

/// An HTTP event line (`http-error`, `sse-priming`), as far as the index reads it.
#[derive(serde::Deserialize)]
struct HttpEvent<'a> {
    #[serde(borrow)]
    server: Cow<'a, str>,
    #[serde(borrow)]
    what: Cow<'a, str>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(borrow, default)]
    stream: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    last_event_id: Option<Cow<'a, str>>,
    #[serde(default)]
    retry: Option<u64>,
    #[serde(borrow, default)]
    content_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    allow: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    body: Option<Cow<'a, str>>,
    #[serde(default)]
    post: Option<u64>,
    #[serde(borrow, default)]
    request_id: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    mcp_session_id: Option<Cow<'a, str>>,
    /// The `Mcp-Session-Id` the answer carried (a marker on the tape: only whether it did).
    #[serde(borrow, default)]
    session: Option<Cow<'a, str>>,
    /// CORS headers (`http-options`, `http-cors`).
    #[serde(default)]
    headers: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    reflected: Vec<String>,
}

/// The line, when it is an event the index reads (`http-error`, `sse-priming`, `http-get`…).
fn http_event(raw: &[u8]) -> Option<HttpEvent<'_>> {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    // Cheap first: most unknown lines are other events.
    let wanted = |what: &[u8]| memchr::memmem::find(line, what).is_some();
    if !line.starts_with(b"{\"type\":\"event\"")
        || !(wanted(b"\"what\":\"http-error\"")
            || wanted(b"\"what\":\"sse-priming\"")
            || wanted(b"\"what\":\"http-accepted\"")
            || wanted(b"\"what\":\"http-options\"")
            || wanted(b"\"what\":\"http-cors\"")
            || wanted(b"\"what\":\"http-get\"")
            || wanted(b"\"what\":\"http-delete\""))
    {
        return None;
    }
    serde_json::from_slice(line).ok()
}

/// The scope a message was recorded in.
fn scope_of(m: &MsgMeta) -> Scope {
    m.http.as_ref().and_then(|h| h.session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::chain;

    #[test]
    fn an_sse_name_is_kept_as_recorded() {
        assert_eq!(SseName::of("message"), SseName::Message);
        for name in ["message", "update", "Message", "endpoint"] {
            assert_eq!(SseName::of(name).as_str(), name);
        }
        assert_eq!(SseName::of("Message"), SseName::Other("Message".into()));
    }

    const HEADER: &str =
        r#"{"type":"header","format":"mcptape","version":1,"minor":2,"created":"x","tool":"t"}"#;

    /// Writes `lines` (without `h`) as a chained tape, the way the writer chains them.
    fn chained_tape(path: &Path, lines: &[&str]) -> Vec<String> {
        let mut head = chain::start(HEADER.as_bytes());
        let mut out = vec![HEADER.to_string()];
        for l in lines {
            head = chain::link(&head, l.as_bytes());
            out.push(format!("{},\"h\":\"{head}\"}}", &l[..l.len() - 1]));
        }
        std::fs::write(path, out.join("\n") + "\n").unwrap();
        out
    }

    const SERVER: &str = r#"{"type":"server","server":"default","transport":"stdio","t_us":0}"#;
    const REQ: &str = r#"{"type":"msg","seq":1,"t_us":5,"server":"default","dir":"c2s","kind":"request","id":1,"method":"tools/call","msg":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"x":"a \"quoted\" é"}}}}"#;
    const RESP: &str = r#"{"type":"msg","seq":2,"t_us":9,"server":"default","dir":"s2c","kind":"response","id":1,"crlf":true,"msg":{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok\n\u00e9"}]}}}"#;
    /// Lines the scanner leaves to serde: `http` facts after the body, `redacted`, a `null` id,
    /// an escaped method name, a `problem`, whitespace between fields.
    const HTTP_REQ: &str = r#"{"type":"msg","seq":3,"t_us":10,"server":"default","dir":"c2s","kind":"request","id":"r\"2","method":"tools/call","msg":{"jsonrpc":"2.0","id":"r\"2","method":"tools/call","params":{"name":"echo"}},"http":{"method":"POST","content_type":"application/json"}}"#;
    const HTTP_NOTE: &str = r#"{"type":"msg","seq":4,"t_us":11,"server":"default","dir":"s2c","kind":"notification","method":"notifications/message","msg":{"jsonrpc":"2.0","method":"notifications/message","params":{}},"http":{"content_type":"text/event-stream","stream":"post","request_id":"r\"2"}}"#;
    const HTTP_RESP: &str = r#"{"type":"msg","seq":5,"t_us":12,"server":"default","dir":"s2c","kind":"response","id":"r\"2","msg":{"jsonrpc":"2.0","id":"r\"2","result":{}},"http":{"content_type":"text/event-stream","stream":"post","request_id":"r\"2"}}"#;
    const REDACTED: &str = r#"{"type":"msg","seq":6,"t_us":13,"server":"default","dir":"c2s","kind":"request","id":7,"method":"tools/call","redacted":["openai-key"],"msg":{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"k","arguments":{"key":"[REDACTED:openai-key:ab12]"}}}}"#;
    const NULL_ID: &str = r#"{"type":"msg","seq":7,"t_us":14,"server":"default","dir":"s2c","kind":"error","id":null,"msg":{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}}"#;
    const PROBLEM: &str = r#"{"type":"msg","seq":8,"t_us":15,"server":"default","dir":"c2s","kind":"invalid","problem":"no method","msg":{"jsonrpc":"2.0"}}"#;
    const ESCAPED_METHOD: &str = r#"{"type":"msg","seq":9,"t_us":16,"server":"default","dir":"c2s","kind":"notification","method":"notifications\/x","msg":{"jsonrpc":"2.0","method":"notifications/x"}}"#;
    const SPACED: &str = r#"{"type":"msg", "seq":10,"t_us":17,"server":"default","dir":"c2s","kind":"notification","method":"n","msg":{"jsonrpc":"2.0","method":"n"}}"#;
    /// Bodies other than `msg`, which the scanner takes.
    const TEXT: &str = r#"{"type":"msg","seq":11,"t_us":18,"server":"default","dir":"s2c","kind":"not_json","text":"banner: \"hi\"\t\u0001"}"#;
    const B64: &str = r#"{"type":"msg","seq":12,"t_us":19,"server":"default","dir":"s2c","kind":"not_json","eol":false,"b64":"/w=="}"#;
    const OVERSIZE: &str = r#"{"type":"msg","seq":13,"t_us":20,"server":"default","dir":"s2c","kind":"oversize","len":99999999,"b64":"e30="}"#;

    const ALL: &[&str] = &[
        SERVER,
        REQ,
        RESP,
        HTTP_REQ,
        HTTP_NOTE,
        HTTP_RESP,
        REDACTED,
        NULL_ID,
        PROBLEM,
        ESCAPED_METHOD,
        SPACED,
        TEXT,
        B64,
        OVERSIZE,
    ];

    /// The serde path's fields of a message line.
    fn slow(line: &[u8]) -> MsgFields<'_> {
        let m: MsgLine<'_> = serde_json::from_slice(line).unwrap();
        fields_of(line, &m).unwrap()
    }

    #[test]
    fn the_scanner_reads_what_serde_reads_or_leaves_the_line_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let stored = chained_tape(&dir.path().join("t.jsonl"), ALL);
        let fast_ones = [REQ, RESP, TEXT, B64, OVERSIZE];
        for (plain, line) in ALL.iter().zip(&stored[1..]).skip(1) {
            // Both as stored (chained) and as in an unchained tape.
            for line in [line.as_str(), plain] {
                let fast = crate::tape::scan::scan_msg_line(line.as_bytes());
                assert_eq!(fast.is_some(), fast_ones.contains(plain), "{line}");
                if let Some(mut fast) = fast {
                    let slow = slow(line.as_bytes());
                    // Only the scanner notes where a body's id is (serde's path leaves it to
                    // play); where it does, it is the id's place.
                    if let (Some((a, b)), BodyText::Json(t)) = (fast.id_in_body, fast.body) {
                        let span = crate::wire::rewrite::id_span(t);
                        assert_eq!(Some((a as usize, b as usize)), span, "{line}");
                        assert_eq!(t.get(a as usize..b as usize), fast.id, "{line}");
                    }
                    fast.id_in_body = None;
                    assert_eq!(fast, slow, "{line}");
                    // The body is the same slice of the line, so the same file offset.
                    let at = |b: &BodyText<'_>| match *b {
                        BodyText::Json(t) | BodyText::Text(t) | BodyText::B64(t) => {
                            t.as_ptr() as usize - line.as_ptr() as usize
                        }
                        BodyText::Oversize(n) => n as usize,
                    };
                    assert_eq!(at(&fast.body), at(&slow.body), "{line}");
                }
            }
        }
    }

    /// An `http-error` event of a POST as mcptape wrote it before it taped the answer's own
    /// content type only: a refusal sent without one carried the request's `application/json`.
    /// Its refusal has none; a refusal's own type other than JSON is kept.
    #[test]
    fn a_post_refusal_with_the_requests_content_type_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let req = r#"{"type":"msg","seq":1,"t_us":5,"server":"default","dir":"c2s","kind":"request","id":3,"method":"edge/bare","msg":{"jsonrpc":"2.0","id":3,"method":"edge/bare"},"http":{"method":"POST","path":"/mcp","content_type":"application/json","post":1,"request_id":3}}"#;
        let old = r#"{"type":"event","t_us":9,"server":"default","what":"http-error","method":"POST","path":"/mcp","content_type":"application/json","post":1,"request_id":3,"status":400,"body":"refused"}"#;
        let own = r#"{"type":"event","t_us":9,"server":"default","what":"http-error","method":"POST","path":"/mcp","content_type":"text/plain","post":1,"request_id":3,"status":400,"body":"refused"}"#;
        for (event, want) in [(old, None), (own, Some("text/plain"))] {
            let path = dir.path().join("t.jsonl");
            chained_tape(&path, &[SERVER, req, event]);
            let index = TapeIndex::load(&path, None).unwrap();
            let refusal = index.exchanges[0].refusal.as_deref().expect("refused");
            assert_eq!(refusal.status, 400);
            assert_eq!(refusal.body, "refused");
            assert_eq!(refusal.content_type.as_deref(), want, "{event}");
        }
    }

    /// `http-get` and `http-delete` with their answers, as the Python SDK's server gave them:
    /// kept by case (no session named, one the server had, one it had not: never given, or
    /// deleted), the first of each; with which session id each carried. A session the server
    /// gave on `initialize`'s answer is had; after a DELETE of it that succeeded, not. Events
    /// without a `status` (tapes recorded before mcptape taped the answer) say nothing.
    #[test]
    fn get_and_delete_answers_are_kept_by_case() {
        let dir = tempfile::tempdir().unwrap();
        let s1 = "[REDACTED:key:session-id:11111111]";
        let new = "[REDACTED:key:session-id:22222222]";
        let never = "[REDACTED:key:session-id:33333333]";
        let init = r#"{"type":"msg","seq":1,"t_us":1,"server":"default","dir":"c2s","kind":"request","id":0,"method":"initialize","msg":{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}},"http":{"method":"POST","path":"/mcp","post":1,"request_id":0}}"#;
        let answer = format!(
            r#"{{"type":"msg","seq":2,"t_us":2,"server":"default","dir":"s2c","kind":"response","id":0,"msg":{{"jsonrpc":"2.0","id":0,"result":{{}}}},"http":{{"method":"POST","path":"/mcp","post":1,"request_id":0,"status":200,"content_type":"application/json","session":"{s1}"}}}}"#
        );
        let ev = |what: &str, named: Option<&str>, answer: &str| {
            let named = named
                .map(|n| format!(r#","mcp_session_id":"{n}""#))
                .unwrap_or_default();
            format!(
                r#"{{"type":"event","t_us":3,"server":"default","what":"{what}","method":"x","path":"/mcp"{named}{answer}}}"#
            )
        };
        let gone = r#","status":404,"content_type":"application/json","body":"{\"error\":\"Session not found\"}""#;
        let lines = [
            init.to_string(),
            answer,
            // Before mcptape taped the answer: nothing to say.
            ev("http-get", Some(s1), ""),
            ev("http-get", Some(never), gone),
            ev(
                "http-get",
                Some(s1),
                &format!(r#","status":200,"content_type":"text/event-stream","session":"{s1}""#),
            ),
            // A second GET while the stream was open: kept apart from the stream's answer.
            ev(
                "http-get",
                Some(s1),
                r#","status":409,"content_type":"application/json","body":"one stream""#,
            ),
            ev(
                "http-delete",
                None,
                &format!(
                    r#","status":400,"content_type":"application/json","body":"missing","session":"{new}""#
                ),
            ),
            ev(
                "http-delete",
                Some(s1),
                &format!(r#","status":200,"content_type":"application/json","session":"{s1}""#),
            ),
            ev("http-delete", Some(s1), r#","status":404,"body":"again""#),
            ev("http-get", Some(s1), r#","status":404,"body":"deleted""#),
        ];
        let lines: Vec<&str> = std::iter::once(SERVER)
            .chain(lines.iter().map(String::as_str))
            .collect();
        let path = dir.path().join("t.jsonl");
        chained_tape(&path, &lines);
        let http = TapeIndex::load(&path, None).unwrap().http.clone();
        let answer = |status, ct: Option<&str>, body: &str, session| HttpAnswer {
            status,
            content_type: ct.map(String::from),
            allow: None,
            body: body.into(),
            session,
        };
        let json = Some("application/json");
        assert_eq!(
            http.get,
            SessionAnswers {
                missing: None,
                open: Some(answer(
                    200,
                    Some("text/event-stream"),
                    "",
                    SessionSent::Same
                )),
                unknown: Some(answer(
                    404,
                    json,
                    r#"{"error":"Session not found"}"#,
                    SessionSent::None
                )),
                conflict: Some(answer(409, json, "one stream", SessionSent::None)),
            }
        );
        assert_eq!(
            http.delete,
            SessionAnswers {
                missing: Some(answer(400, json, "missing", SessionSent::Other)),
                open: Some(answer(200, json, "", SessionSent::Same)),
                unknown: Some(answer(404, None, "again", SessionSent::None)),
                conflict: None,
            }
        );
        assert!(http.session_on_answers);
        assert!(http.refusals.is_empty());
    }

    #[test]
    fn fast_and_slow_lines_index_alike() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        chained_tape(&path, ALL);
        let index = TapeIndex::load(&path, None).unwrap();
        assert!(index.warnings.contains(&Warning::NotClosed));
        assert_eq!(index.warnings.len(), 1, "{:?}", index.warnings);
        assert_eq!(index.msgs.len(), ALL.len() - 1);
        let bytes: Vec<Vec<u8>> = index
            .msgs
            .iter()
            .map(|m| index.read_bytes(m).unwrap_or_default())
            .collect();
        assert!(bytes[0].ends_with(r#""x":"a \"quoted\" é"}}}"#.as_bytes()));
        assert!(bytes[1].ends_with(br#""text":"ok\n\u00e9"}]}}"#));
        assert_eq!(bytes[10], b"banner: \"hi\"\t\x01");
        assert_eq!(bytes[11], b"\xff");
        assert!(index.read_bytes(&index.msgs[12]).is_err(), "oversize");
        assert_eq!(index.msgs[12].body, Body::Oversize { len: 99999999 });
        // The HTTP facts after the body are read (serde path).
        assert_eq!(index.msgs[3].stream_of.as_deref(), Some(r#""r\"2""#));
        assert!(index.msgs[3].sse);
        assert_eq!(index.msgs[2].id.as_deref(), Some(r#""r\"2""#));
        assert_eq!(index.msgs[6].id, None, "a null id is no id");
        assert_eq!(index.msgs[8].method.as_deref(), Some("notifications/x"));
        // Exchanges: the plain one, the HTTP one (with its stream message), the redacted one.
        assert_eq!(index.exchanges.len(), 3);
        assert_eq!(index.exchanges[0].response, Some(1));
        assert_eq!(index.exchanges[1].response, Some(4));
        assert_eq!(index.exchanges[1].during, vec![3]);
        assert!(index.exchanges[2].redacted);
        assert!(!index.exchanges[0].redacted);
    }

    /// Loads with the chain checked inline and deferred; both must agree.
    fn chain_breaks(path: &Path) -> (Vec<Warning>, Vec<Warning>) {
        let inline = TapeIndex::load(path, None).unwrap().warnings;
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let (index, pending) =
            TapeIndex::load_deferred(path, None, move |w| sink.lock().unwrap().push(w)).unwrap();
        pending.wait();
        let mut deferred = index.warnings;
        deferred.extend(got.lock().unwrap().drain(..));
        let chain = |ws: Vec<Warning>| {
            ws.into_iter()
                .filter(|w| matches!(w, Warning::ChainBroken { .. }))
                .collect::<Vec<_>>()
        };
        (chain(inline), chain(deferred))
    }

    #[test]
    fn a_tampered_line_breaks_the_chain_at_that_line_inline_and_deferred() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut stored = chained_tape(&path, ALL);
        assert_eq!(chain_breaks(&path), (vec![], vec![]));
        // One byte of the answer's body (line 4, on the fast path) changed.
        stored[3] = stored[3].replace("ok\\n", "OK\\n");
        std::fs::write(&path, stored.join("\n") + "\n").unwrap();
        let broken = vec![Warning::ChainBroken { line: 4 }];
        assert_eq!(chain_breaks(&path), (broken.clone(), broken));
        // The old reader agrees on the line.
        let mut r = TapeReader::open(&path).unwrap();
        while r.next_item().unwrap().is_some() {}
        assert_eq!(r.chain(), &crate::tape::Chain::Broken(4));
    }

    #[test]
    fn a_torn_last_line_is_left_out_of_the_chain_inline_and_deferred() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let stored = chained_tape(&path, &[SERVER, REQ, RESP]);
        // Cut mid-body: torn, skipped, the chain holds up to it.
        let last = &stored[3];
        let torn = format!("{}\n{}", stored[..3].join("\n"), &last[..last.len() / 2]);
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(chain_breaks(&path), (vec![], vec![]));
        let index = TapeIndex::load(&path, None).unwrap();
        assert_eq!(index.msgs.len(), 1);
        assert!(matches!(
            index.warnings[0],
            Warning::TornLastLine { line: 4, .. }
        ));
        // Complete but without its newline: read (by serde) and chained.
        std::fs::write(&path, stored.join("\n")).unwrap();
        assert_eq!(chain_breaks(&path), (vec![], vec![]));
        assert_eq!(TapeIndex::load(&path, None).unwrap().msgs.len(), 2);
        // Its chain hash edited: read, and the chain breaks there.
        let edited = stored
            .join("\n")
            .replace(&last[last.len() - 10..], "00000000\"}");
        std::fs::write(&path, edited).unwrap();
        let broken = vec![Warning::ChainBroken { line: 4 }];
        assert_eq!(chain_breaks(&path), (broken.clone(), broken));
    }

    fn http_line(seq: u64, dir: &str, kind: &str, id: u64, body: &str, facts: &str) -> String {
        let method = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["method"].as_str().map(|m| format!(r#","method":"{m}""#)))
            .unwrap_or_default();
        format!(
            r#"{{"type":"msg","seq":{seq},"t_us":{seq},"server":"default","dir":"{dir}","kind":"{kind}","id":{id}{method},"msg":{body},"http":{facts}}}"#
        )
    }

    #[test]
    fn answers_pair_within_their_session_and_by_their_post() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let (a, b) = (
            r#""mcp_session_id":"[REDACTED:key:mcp_session_id:aaaaaaaa]""#,
            r#""mcp_session_id":"[REDACTED:key:mcp_session_id:bbbbbbbb]""#,
        );
        let req = |m: &str| format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
        let resp = |tag: &str| format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"of":"{tag}"}}}}"#);
        let lines = [
            SERVER.to_string(),
            // Two sessions, both with id 1 open at once; B answered first.
            http_line(
                1,
                "c2s",
                "request",
                1,
                &req("resources/list"),
                &format!("{{{a},\"post\":1}}"),
            ),
            http_line(
                2,
                "c2s",
                "request",
                1,
                &req("resources/read"),
                &format!("{{{b},\"post\":2}}"),
            ),
            http_line(
                3,
                "s2c",
                "response",
                1,
                &resp("read"),
                &format!("{{{b},\"post\":2,\"status\":200}}"),
            ),
            http_line(
                4,
                "s2c",
                "response",
                1,
                &resp("list"),
                &format!("{{{a},\"post\":1,\"status\":200}}"),
            ),
            // Stateless: two POSTs with id 1 at once, the second answered first, with a 404.
            http_line(
                5,
                "c2s",
                "request",
                1,
                &req("prompts/list"),
                r#"{"post":3}"#,
            ),
            http_line(6, "c2s", "request", 1, &req("ping"), r#"{"post":4}"#),
            http_line(
                7,
                "s2c",
                "error",
                1,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"gone"}}"#,
                r#"{"post":4,"status":404,"content_type":"application/json"}"#,
            ),
            http_line(
                8,
                "s2c",
                "response",
                1,
                &resp("prompts"),
                r#"{"post":3,"status":200}"#,
            ),
            // Without POST numbers (an older tape): the session alone pairs them.
            http_line(
                9,
                "c2s",
                "request",
                1,
                &req("tools/list"),
                &format!("{{{a}}}"),
            ),
            http_line(
                10,
                "c2s",
                "request",
                1,
                &req("tools/call"),
                &format!("{{{b}}}"),
            ),
            http_line(11, "s2c", "response", 1, &resp("call"), &format!("{{{b}}}")),
            http_line(
                12,
                "s2c",
                "response",
                1,
                &resp("tools"),
                &format!("{{{a}}}"),
            ),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        chained_tape(&path, &refs);
        let index = TapeIndex::load(&path, None).unwrap();
        let answer_of = |method: &str| {
            let ex = index
                .exchanges
                .iter()
                .find(|e| index.msgs[e.request].method.as_deref() == Some(method))
                .unwrap();
            let text = index
                .read_text(&index.msgs[ex.response.expect("answered")])
                .unwrap();
            (text, ex.session)
        };
        assert!(answer_of("resources/list").0.contains(r#""of":"list""#));
        assert!(answer_of("resources/read").0.contains(r#""of":"read""#));
        assert!(answer_of("prompts/list").0.contains(r#""of":"prompts""#));
        assert!(answer_of("ping").0.contains("gone"));
        assert!(answer_of("tools/list").0.contains(r#""of":"tools""#));
        assert!(answer_of("tools/call").0.contains(r#""of":"call""#));
        assert_eq!(answer_of("resources/list").1, Some(0));
        assert_eq!(answer_of("resources/read").1, Some(1));
        assert_eq!(answer_of("tools/call").1, Some(1));
        assert_eq!(answer_of("ping").1, None);
        let ping = index
            .exchanges
            .iter()
            .find(|e| index.msgs[e.request].method.as_deref() == Some("ping"))
            .unwrap();
        let http = index.msgs[ping.response.unwrap()].http.as_deref().unwrap();
        assert_eq!(http.status, Some(404));
        assert_eq!(http.content_type.as_deref(), Some("application/json"));
    }

    #[test]
    fn a_malformed_body_is_still_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let bad = RESP.replace(r#""result":{"#, r#""result":{,"#);
        chained_tape(&path, &[SERVER, REQ, &bad, REQ]);
        let err = TapeIndex::load(&path, None).err().expect("malformed");
        assert!(matches!(err, TapeError::Malformed { line: 4, .. }), "{err}");
    }

    /// One read of a tape of several servers indexes each as a load of its label alone does:
    /// the servers declared in order (not the model API), then a label only lines carry; each
    /// conversation's messages, exchanges, standalone messages, HTTP refusals and unserved
    /// lines the same. The reader's warnings (here a torn last line, so not closed either) come once with the tape.
    #[test]
    fn every_server_of_a_tape_is_indexed_in_one_read_as_each_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let decl = |label: &str, transport: &str| {
            format!(r#"{{"type":"server","server":"{label}","transport":"{transport}","t_us":0}}"#)
        };
        let msg = |seq: u64, label: &str, dir: &str, kind: &str, body: &str| {
            let v: Value = serde_json::from_str(body).unwrap();
            let mut line = serde_json::json!({"type": "msg", "seq": seq, "t_us": seq, "server": label, "dir": dir, "kind": kind, "msg": v});
            if let Some(id) = v.get("id") {
                line["id"] = id.clone();
            }
            if let Some(m) = v.get("method") {
                line["method"] = m.clone();
            }
            line.to_string()
        };
        let call = |id: u64, tool: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}"}}}}"#
            )
        };
        let answer = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
        let refused = r#"{"type":"event","t_us":9,"server":"web","what":"http-error","method":"POST","path":"/mcp","post":7,"request_id":2,"status":400,"body":"refused"}"#;
        let web_req = r#"{"type":"msg","seq":6,"t_us":6,"server":"web","dir":"c2s","kind":"request","id":2,"method":"tools/call","msg":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch"}},"http":{"method":"POST","path":"/mcp","post":7,"request_id":2}}"#;
        let lines = [
            decl("files", "stdio"),
            decl("model", "model_api"),
            decl("web", "streamable_http"),
            msg(1, "files", "c2s", "request", &call(1, "read")),
            msg(2, "web", "c2s", "request", &call(1, "fetch")),
            msg(3, "files", "s2c", "response", &answer(1)),
            msg(4, "extra", "c2s", "request", &call(1, "x")),
            msg(
                5,
                "files",
                "s2c",
                "notification",
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
            ),
            web_req.to_string(),
            refused.to_string(),
            msg(7, "web", "s2c", "response", &answer(1)),
            msg(8, "files", "c2s", "request", &call(2, "read")),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        chained_tape(&path, &refs);
        // A torn last line: a warning of the tape's, not of a server's.
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(br#"{"type":"msg","seq":9,"#);
        std::fs::write(&path, text).unwrap();

        let every = TapeIndex::load_every_with(&path, ReadOptions::default()).unwrap();
        let labels: Vec<&str> = every.indexes.iter().map(|i| i.server.as_str()).collect();
        assert_eq!(labels, ["files", "web", "extra"]);
        assert_eq!(every.servers.len(), 3);
        assert!(
            matches!(
                every.warnings[..],
                [Warning::TornLastLine { line: 14, .. }, Warning::NotClosed]
            ),
            "{:?}",
            every.warnings
        );
        let json = |i: &TapeIndex| {
            serde_json::json!({
                "msgs": *i.msgs, "exchanges": *i.exchanges, "standalone": *i.standalone,
                "http": i.http, "bad_lines": *i.bad_lines,
            })
        };
        for label in labels {
            let alone = TapeIndex::load_with(&path, Some(label), ReadOptions::default()).unwrap();
            let one = every.get(label).unwrap();
            assert!(!one.msgs.is_empty(), "{label}");
            assert_eq!(json(one), json(&alone), "{label}");
            assert_eq!(one.warnings, alone.warnings, "{label}");
            assert_eq!(every.warnings, alone.warnings, "{label}");
        }
        let web = every.get("web").unwrap();
        assert_eq!(
            web.exchanges
                .iter()
                .filter_map(|e| e.refusal.as_ref())
                .map(|r| r.status)
                .collect::<Vec<_>>(),
            [400]
        );
        assert_eq!(every.get("files").unwrap().exchanges.len(), 2);
        assert!(every.get("model").is_none());
    }
}
