//! The serving loop: mcptape is the server. One thread reads the client's messages and answers
//! each at once, writing to stdout itself: no hand-off to another thread on the way, which is
//! what a call costs on a busy machine. An exchange that must wait for the client (a
//! server-initiated request) runs as its own task on a runtime thread, so the loop keeps serving;
//! its messages go out through a queue written by that thread. Both write whole lines under one
//! lock, so nothing interleaves mid-line.

use super::explain::Miss;
use super::framing::{OutLine, OwnStream};
use super::matcher::{Matcher, Outcome};
use super::plan::Verdict;
use crate::tape::index::MsgMeta;
use crate::tape::TapeIndex;
use crate::wire::canonical::{differences, short, Difference};
use crate::wire::classify::{scalar_id, unservable};
use crate::wire::rewrite::{tape_id_span, with_id, with_progress_token};
use crate::wire::{classify, Frame, Framer, Kind};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// The tasks' lines waiting for stdout. Bounded so a client that stops reading stops the tasks,
/// not memory.
const OUTPUT_QUEUE: usize = 256;

/// How play serves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// On a miss, serve the next unused exchange of the same method instead.
    pub lenient: bool,
    /// Largest client message read whole, in bytes.
    pub max_message: usize,
    /// How long to wait for the client's answer to a server-initiated request.
    pub answer_timeout: Duration,
    /// The redactor applied to what a client asked before it is quoted in an explanation
    /// (`None`: quoted as asked).
    pub display: Option<Arc<crate::redact::Redactor>>,
    /// The id of the user's marker key (`$MCPTAPE_REDACT_KEY`, [`MarkerKey::id`]), whether or
    /// not the tape's markers were made with it (matching uses `display`'s key, only the
    /// tape's): for what the ambiguity warning says of it.
    ///
    /// [`MarkerKey::id`]: crate::redact::MarkerKey::id
    pub marker_key_id: Option<String>,
    /// Over HTTP: what the listener allows its connections (see
    /// [`Limits`](crate::transport::http::Limits)).
    pub limits: crate::transport::http::Limits,
    /// Over HTTP: sessions open at once (see [`MAX_SESSIONS`](crate::play::http::MAX_SESSIONS)).
    pub max_sessions: usize,
    /// Over HTTP: how long a session may go without a request (and without an open GET
    /// stream) before it is closed (see [`SESSION_IDLE`](crate::play::http::SESSION_IDLE)).
    pub session_idle: Duration,
    /// How requests are matched (`--match`, `--ignore-param`) and repeated (`--repeat`).
    pub policy: Arc<super::MatchPolicy>,
    /// `--pace`, `--latency`, `--faults`, `--seed` (see [`Plan`](super::Plan)).
    pub plan: Arc<super::Plan>,
    /// What a request the tape does not answer gets (`Lenient` is `lenient`).
    pub on_miss: super::live::OnMiss,
    /// The live server, for `--on-miss live` and the calls chosen to go live.
    pub live: Option<Arc<super::live::LiveConfig>>,
}

impl Default for ServeOptions {
    /// Strict, 64 MiB messages, a 60 s answer timeout, explanations redacted by the built-in
    /// rules.
    fn default() -> ServeOptions {
        ServeOptions::with_display(Some(Arc::new(
            crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults())
                .expect("the built-in rules compile"),
        )))
    }
}

impl ServeOptions {
    /// The defaults with explanations redacted by `display` (`None`: quoted as asked). Building a
    /// redactor compiles its rules (tens of milliseconds): a caller with its own rules passes
    /// them here rather than replacing the default's.
    pub fn with_display(display: Option<Arc<crate::redact::Redactor>>) -> ServeOptions {
        ServeOptions {
            lenient: false,
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            answer_timeout: Duration::from_secs(60),
            display,
            marker_key_id: None,
            limits: Default::default(),
            max_sessions: crate::play::http::MAX_SESSIONS,
            session_idle: crate::play::http::SESSION_IDLE,
            policy: Default::default(),
            plan: Default::default(),
            on_miss: Default::default(),
            live: None,
        }
    }
}

/// A difference between the client's answer to a replayed server request and the recorded one.
#[derive(Debug, Clone)]
pub struct Drift {
    /// The server request's method (e.g. `sampling/createMessage`).
    pub method: String,
    /// Tape line of the recorded server request.
    pub line: u64,
    /// Where the client's answer differs, recorded (`left`) against given (`right`); empty when
    /// no answer came.
    pub differences: Vec<Difference>,
    /// Set when no answer came at all.
    pub no_answer: bool,
}

/// How a play session went: what was served, missed and drifted.
#[derive(Debug, Default, Clone)]
pub struct PlayReport {
    /// Requests answered from the tape (those served by `--lenient` included).
    pub served: u64,
    /// Requests with no recorded answer: the client got a JSON-RPC error explaining why.
    pub missed: u64,
    /// Misses that `--lenient` answered with another exchange of the same method.
    pub lenient: u64,
    /// Replayed server requests whose client answer differed from the recording, or never came.
    pub drifted: u64,
    /// Every miss, explained, in order.
    pub misses: Vec<Miss>,
    /// Every drift, in order.
    pub drifts: Vec<Drift>,
    /// Exchanges never served, in recorded order.
    pub unused: Vec<Unused>,
    /// Client lines that were not requests play could answer (not JSON, batches…).
    pub rejected: u64,
    /// Requests over Streamable HTTP (POST, GET, DELETE) naming a session play does not have
    /// (deleted, expired, cut, or play restarted): refused as the server refused them, not
    /// misses.
    pub unknown_session: u64,
    /// POSTs over Streamable HTTP naming no session, to a tape whose server gave sessions and
    /// served no request outside one: refused as the server refused them, not misses.
    pub no_session: u64,
    /// Requests matched to a recorded exchange whose server never answered (it died mid-call,
    /// or the tape was cut): the client got an error saying so.
    pub unanswered: u64,
    /// Messages for a GET stream no client opened, dropped past
    /// [`GET_BACKLOG`](crate::transport::http::GET_BACKLOG) (over HTTP only).
    pub dropped: u64,
    /// Redaction markers (`[REDACTED:…]`) in the answers served, where the recorded server had
    /// sent a value.
    pub markers: u64,
    /// Requests matched to a recorded exchange whose answer was too large to record (taped as
    /// `oversize`, over the recorder's `--max-message`): the client got an error saying so.
    pub too_large: u64,
    /// `server/discover` probes answered "method not found", as the recorded pre-2026 server
    /// would have (the tape has no `server/discover`): not misses.
    pub probes: u64,
    /// `server/discover` probes on a tape of 2026-07-28 requests recorded without one, answered
    /// with a discover result built from the tape: not misses.
    pub discovered: u64,
    /// Answers served again by `--repeat last|cycle` (counted in `served` too).
    pub repeats: u64,
    /// How many times each recorded exchange was served, by exchange number (what
    /// `--unused-report` writes).
    pub uses: Vec<u32>,
    /// Faults injected on purpose (`--faults`), in order: not misses.
    pub injected: Vec<super::Injected>,
    /// A `drop` fault cut the connection (over stdio: play stopped there).
    pub cut: bool,
    /// Requests the live server answered (`--on-miss live`, `--live`, `--from-tape`).
    pub live: u64,
    /// Requests served among recorded requests that differ only in redacted values (warned
    /// about once each), by recorded request.
    pub ambiguous: Vec<super::matcher::Ambiguity>,
}

impl PlayReport {
    /// Counts a `server/discover` probe answered without a recorded answer; the answer's text.
    pub(crate) fn answer_probe(&mut self, answer: ProbeAnswer) -> String {
        match answer {
            ProbeAnswer::Legacy(text) => {
                self.probes += 1;
                text
            }
            ProbeAnswer::Modern(text) => {
                self.discovered += 1;
                text
            }
        }
    }
}

/// How play answers a `server/discover` probe that the tape has no recorded answer for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// The tape is a pre-2026 server's (it has an `initialize`, or no 2026-07-28 request):
    /// `-32601`, as that server answered, so that the client falls back to `initialize`.
    Legacy(String),
    /// Every request on the tape is of the 2026-07-28 era (the recorded client did not probe):
    /// a discover result built from the tape, as the recorded 2026 server would have answered.
    Modern(String),
}

/// The answer to a `server/discover` probe when the tape has no `server/discover` of its own;
/// `None` for anything else. The recorded server's era decides it: a tape with no `initialize`
/// whose requests carry the 2026-07-28 `_meta` protocol version was a 2026 server's.
pub(crate) fn probe_answer(index: &TapeIndex, method: &str, id: &str) -> Option<ProbeAnswer> {
    const PROBE: &str = "server/discover";
    let has = |m: &str| {
        index
            .exchanges
            .iter()
            .any(|ex| index.msgs[ex.request].method.as_deref() == Some(m))
    };
    if method != PROBE || has(PROBE) {
        return None;
    }
    if !has("initialize") {
        if let Some(result) = modern_discover_result(index) {
            let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "result": result});
            return with_id(&msg.to_string(), id).ok().map(ProbeAnswer::Modern);
        }
    }
    let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32601, "message": "Method not found: server/discover (the recorded server predates the 2026-07-28 protocol; initialize instead)"}});
    with_id(&msg.to_string(), id).ok().map(ProbeAnswer::Legacy)
}

/// The `_meta` key of a 2026-07-28 request's protocol version, and of a result's server info.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
/// How many of a tape's first exchanges a synthesized discover result reads for protocol
/// versions and server info (the methods of all are in the index).
const DISCOVER_READS: usize = 64;

/// A `server/discover` result for a tape of 2026-07-28 requests: the protocol versions the
/// recorded client used (the server answered them), capabilities for the kinds of call it
/// answered, and the server info its results carried. `None` when no request on the tape
/// names a protocol version in its `_meta` (not a 2026 tape).
fn modern_discover_result(index: &TapeIndex) -> Option<Value> {
    let read = |i: usize| -> Option<Value> {
        serde_json::from_str(&index.read_text(&index.msgs[i]).ok()?).ok()
    };
    let mut versions: Vec<String> = Vec::new();
    let mut capabilities = serde_json::Map::new();
    let mut server_info = None;
    for (n, ex) in index.exchanges.iter().enumerate() {
        let req = &index.msgs[ex.request];
        // The versions and the server info are read from the first requests and answers only:
        // a probe must not read a whole big tape.
        let early = n < DISCOVER_READS;
        if let Some(v) = early.then(|| read(ex.request)).flatten().and_then(|r| {
            r.pointer("/params/_meta")?
                .get(PROTOCOL_VERSION_META)
                .cloned()
        }) {
            if let Some(v) = v.as_str().filter(|v| !versions.iter().any(|k| k == v)) {
                versions.push(v.to_string());
            }
        }
        let method = req.method.as_deref().unwrap_or_default();
        let capability = match method.split('/').next().unwrap_or_default() {
            "tools" => Some("tools"),
            "resources" => Some("resources"),
            "prompts" => Some("prompts"),
            "completion" => Some("completions"),
            _ => None,
        };
        if let Some(c) = capability {
            let entry = capabilities.entry(c).or_insert_with(|| json!({}));
            if method == "resources/subscribe" {
                entry["subscribe"] = json!(true);
            }
        }
        if early && server_info.is_none() {
            server_info = ex
                .response
                .and_then(read)
                .and_then(|r| r.pointer("/result/_meta")?.get(SERVER_INFO_META).cloned());
        }
    }
    if versions.is_empty() {
        return None;
    }
    let mut result = json!({
        "supportedVersions": versions,
        "capabilities": capabilities,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(info) = server_info {
        result["_meta"] = json!({ SERVER_INFO_META: info });
    }
    Some(result)
}

/// The warning for an `initialize` that asks another protocol version than the recorded client
/// did (the recorded answer is served all the same). `None` when they agree — a client that
/// asks what the recorded one asked gets what it got, even where the server answered another
/// version — or when either names none.
pub(crate) fn version_warning(
    index: &TapeIndex,
    bodies: &Bodies,
    ex: usize,
    params: Option<&Value>,
) -> Option<String> {
    let asked = params?.get("protocolVersion")?.as_str()?;
    let json_of = |meta: &crate::tape::index::MsgMeta| -> Option<Value> {
        let text = match bodies.json(meta) {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => std::borrow::Cow::Owned(index.read_text(meta).ok()?),
        };
        serde_json::from_str(&text).ok()
    };
    let req = json_of(&index.msgs[index.exchanges[ex].request]);
    let recorded = req
        .as_ref()
        .and_then(|v| v["params"]["protocolVersion"].as_str().map(String::from));
    let meta = &index.msgs[index.exchanges[ex].response?];
    let v = json_of(meta)?;
    let answered = v.get("result")?.get("protocolVersion")?.as_str()?;
    let differs = match &recorded {
        Some(r) => asked != r,
        None => asked != answered,
    };
    differs.then(|| {
        let rec = recorded
            .map(|r| format!("the recorded client asked for {r}; "))
            .unwrap_or_default();
        format!(
            "mcptape play: warning: the client asked for protocol version {asked}, the tape answers {answered} ({rec}tape line {}): the recorded answer is served",
            meta.line
        )
    })
}

/// How many redaction markers an answer holds.
fn count_markers(text: &str) -> u64 {
    if !crate::wire::marker::has_marker(text) {
        return 0;
    }
    crate::wire::marker::marker_re().find_iter(text).count() as u64
}

/// A recorded exchange that was never served.
#[derive(Debug, Clone)]
pub struct Unused {
    /// Tape line of its request.
    pub line: u64,
    /// Method, target and arguments in short, as play shows them (its display rules); empty
    /// past the first [`UNUSED_DESCRIBED`] (each is read from the tape and redacted).
    pub what: String,
}

/// How many unused exchanges play's exit report describes, in tape order (the rest counted).
pub const UNUSED_DESCRIBED: usize = 20;

impl Unused {
    /// The `nth` exchange left unused, its request `req`: described while `nth` is among the
    /// first [`UNUSED_DESCRIBED`].
    pub(crate) fn of(
        nth: usize,
        index: &TapeIndex,
        req: &MsgMeta,
        display: Option<&crate::redact::Redactor>,
    ) -> Unused {
        let what = if nth < UNUSED_DESCRIBED {
            index.describe_request_shown(req, |p| super::matcher::shown_params(display, p))
        } else {
            String::new()
        };
        Unused {
            line: req.line,
            what,
        }
    }
}

pub(crate) struct Shared {
    pub(crate) index: Arc<TapeIndex>,
    /// Where messages not tied to a request go (stdout; over HTTP, the session's GET stream).
    pub(crate) out: mpsc::Sender<OutLine>,
    /// Our server-request id → where the client's answer goes.
    pub(crate) pending: Mutex<HashMap<String, oneshot::Sender<Vec<u8>>>>,
    pub(crate) next_id: AtomicU64,
    /// Turns true once the client closed its input: no answer can come any more.
    pub(crate) closed: watch::Sender<bool>,
    pub(crate) report: Mutex<PlayReport>,
    pub(crate) opts: ServeOptions,
    /// The tape's bytes when it was small enough to read at start-up: answers come from memory.
    pub(crate) bodies: Bodies,
    /// This session's live server, when there is one to go to.
    pub(crate) live: Option<super::live::Live>,
    /// Recorded lines go out framed as the server framed them (over stdio): the whitespace
    /// around their JSON and their `\r\n` (see [`Shared::line_ends`]). Over HTTP the
    /// transport frames them.
    pub(crate) keep_line_ends: bool,
    /// Which of the tape's bad client lines (`TapeIndex::bad_lines`) had their answer given.
    pub(crate) bad_lines_used: Mutex<Vec<bool>>,
}

/// How the recorded server answered a bad client line (see [`Shared::recorded_bad_post`]).
pub(crate) enum BadAnswer<'a> {
    /// A JSON-RPC message (an error without an id, or the answer to a request with an unusual
    /// id).
    Message(&'a MsgMeta),
    /// Over HTTP, a refusal without one.
    Refused(&'a crate::tape::index::HttpRefusal),
    /// Over HTTP+SSE, accepted and not answered.
    Accepted,
}

impl Shared {
    /// The recorded server's answer to a bad client line of exactly these bytes (see
    /// [`BadClientLine`](crate::tape::index::BadClientLine)), the earliest not yet given; `None`
    /// when the tape holds no such line with an answer play can give (an error without an id,
    /// or the answer to a request with an unusual id) left.
    pub(crate) fn recorded_bad_line(&self, bytes: &[u8]) -> Option<&MsgMeta> {
        match self.recorded_bad(bytes, false, false)? {
            BadAnswer::Message(m) => Some(m),
            BadAnswer::Refused(_) | BadAnswer::Accepted => None,
        }
    }

    /// [`recorded_bad_line`](Self::recorded_bad_line) over HTTP: the recorded answer may also
    /// be a refusal without a JSON-RPC message (an `http-error` of its POST); with
    /// `accepted_too`, a line its server answered neither way counts as accepted (on the
    /// HTTP+SSE transport, what a server accepts it answers `202` and nothing more).
    pub(crate) fn recorded_bad_post(
        &self,
        bytes: &[u8],
        accepted_too: bool,
    ) -> Option<BadAnswer<'_>> {
        self.recorded_bad(bytes, true, accepted_too)
    }

    /// The earliest bad client line of these bytes not given yet whose answer is a message,
    /// or (`refusals`) a refusal, or (`accepted_too`) neither; marked given. Lines answered
    /// otherwise are left for a reader that takes their answer.
    fn recorded_bad(
        &self,
        bytes: &[u8],
        refusals: bool,
        accepted_too: bool,
    ) -> Option<BadAnswer<'_>> {
        let index: &TapeIndex = &self.index;
        let answer = |n: usize| -> Option<BadAnswer<'_>> {
            let b = &index.bad_lines[n];
            let message = b
                .answer
                .or_else(|| index.exchanges.get(b.exchange?)?.response);
            match (message, b.refusal(index)) {
                (Some(m), _) => Some(BadAnswer::Message(&index.msgs[m])),
                (None, Some(r)) => refusals.then_some(BadAnswer::Refused(r)),
                (None, None) => accepted_too.then_some(BadAnswer::Accepted),
            }
        };
        let mut used = self.bad_lines_used.lock().expect("bad lines lock");
        used.resize(index.bad_lines.len(), false);
        let (n, a) = index.bad_lines.iter().enumerate().find_map(|(n, b)| {
            if used[n] {
                return None;
            }
            let a = answer(n)?;
            index
                .read_bytes(&index.msgs[b.msg])
                .is_ok_and(|r| r == bytes)
                .then_some((n, a))
        })?;
        used[n] = true;
        Some(a)
    }

    /// What goes around recorded message `meta`'s body on the line play writes, when it is not
    /// plain JSON and `\n` and play serves over stdio: the whitespace the server wrote before
    /// and after its JSON, then the CR of its `\r\n` (the sink adds the `\n`).
    pub(crate) fn line_ends(&self, meta: &MsgMeta) -> Option<(Vec<u8>, Vec<u8>)> {
        if !self.keep_line_ends || meta.ends.is_plain() {
            return None;
        }
        match self.index.read_line_ends(meta) {
            Ok(ends) => Some(ends),
            Err(e) => {
                crate::diag!("mcptape play: tape line {}: {e}", meta.line);
                None
            }
        }
    }

    /// Reports fault `fault` of the plan as injected on recorded message `msg` (a client
    /// request answered `id`, or a server request).
    pub(crate) fn inject(&self, fault: usize, msg: usize, id: Option<&str>) {
        let injected = self.opts.plan.injected(&self.index, fault, msg, id);
        self.report
            .lock()
            .expect("report lock")
            .injected
            .push(injected);
    }
}

/// A tape no larger than this is read into memory when play starts, so that an answer costs no
/// system call; a larger one is read ahead in chunks.
const PRELOAD_MAX: u64 = 16 * 1024 * 1024;

/// Where play reads the answers it serves: the whole tape, read at start-up when small enough;
/// else the tape in chunks, an answer lent from the chunk it is in (no copy of it made on the
/// way to stdout, where the index's reader gives each answer as a `Vec`).
#[derive(Default)]
pub(crate) enum Bodies {
    /// Each answer read from the index's file (HTTP play; a tape that could not be opened again
    /// or, small, is not UTF-8).
    #[default]
    File,
    /// The whole tape, read at start-up.
    Whole(String),
    /// The tape, read ahead in chunks.
    Chunks(crate::tape::read_ahead::ReadAhead),
}

impl Bodies {
    /// Reads `index`'s tape when it is small and UTF-8 (as a tape is); otherwise opens it to read
    /// in chunks. Opened by its path, as the index was, just after it.
    pub(crate) fn preload(index: &TapeIndex) -> Bodies {
        let Ok(meta) = std::fs::metadata(&index.path) else {
            return Bodies::File;
        };
        if meta.len() > PRELOAD_MAX {
            return match std::fs::File::open(&index.path) {
                Ok(f) => Bodies::Chunks(crate::tape::read_ahead::ReadAhead::new(f)),
                Err(_) => Bodies::File,
            };
        }
        std::fs::read(&index.path)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .map_or(Bodies::File, Bodies::Whole)
    }

    /// A JSON message body, from memory; `None` when not preloaded or not found there (then it
    /// is read from the file, which says why it cannot be).
    fn json(&self, meta: &MsgMeta) -> Option<&str> {
        let crate::tape::index::Body::Json { offset, len } = meta.body else {
            return None;
        };
        let Bodies::Whole(text) = self else {
            return None;
        };
        let start = usize::try_from(offset).ok()?;
        text.get(start..start.checked_add(len as usize)?)
    }

    /// `f` of a JSON message body's bytes, from memory or lent from a chunk (a chunk's bytes
    /// are not checked to be UTF-8 here); `None` when it cannot be read so (then it is read
    /// from the index's file, which says why it cannot be).
    fn with_json_bytes<T>(&self, meta: &MsgMeta, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        match self {
            Bodies::File => None,
            Bodies::Whole(_) => self.json(meta).map(|t| f(t.as_bytes())),
            Bodies::Chunks(chunks) => {
                let crate::tape::index::Body::Json { offset, len } = meta.body else {
                    return None;
                };
                chunks.with_at(offset, len, f).ok()
            }
        }
    }
}

/// Where an exchange's messages go, one whole line at a time: a queue (the tasks that wait for
/// the client, HTTP streams) or straight to stdout (the serving loop).
pub(crate) trait Sink: Sync {
    /// Sends one message; the line terminator is added here.
    fn emit(&self, line: Vec<u8>) -> impl Future<Output = ()> + Send;

    /// Sends one message given in parts (written in order, as one line).
    fn emit_parts(&self, parts: &[&[u8]]) -> impl Future<Output = ()> + Send {
        self.emit(parts.concat())
    }

    /// Says which recorded message the next line replays (an HTTP stream writes its SSE event
    /// id, and knows whether it came on a resumed stream). Nothing by default.
    fn before(&self, _recorded: &MsgMeta) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Completes once nothing sent here can reach the client any more (an HTTP stream whose
    /// client left): a paced or stalled answer stops waiting. Never, by default.
    fn gone(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// Whether [`write_now`](Self::write_now) writes: a sink that takes a line at once, with
    /// nothing to do [`before`](Self::before) it (the serving loop's stdout). Then an answer goes
    /// to it straight from the tape's bytes, lent for no longer than the call. Not by default.
    fn writes_now(&self) -> bool {
        false
    }

    /// Writes one message given in parts (as one line) at once; called only when `writes_now`.
    fn write_now(&self, _parts: &[&[u8]]) {}
}

/// stdout, written by the serving loop directly and by the queue of the tasks' messages. Each
/// line is written under the lock, so lines never interleave.
struct Output<W: Write> {
    /// `None` once closed (a `drop` fault): dropping the writer closes the client's pipe.
    w: Option<std::io::BufWriter<W>>,
    /// A write failed (the client closed its end of our stdout): nothing more can be delivered.
    broken: bool,
}

impl<W: Write> Output<W> {
    fn write(&mut self, parts: &[&[u8]]) {
        let Some(w) = self.w.as_mut().filter(|_| !self.broken) else {
            return;
        };
        if parts.iter().any(|p| w.write_all(p).is_err()) {
            self.broken = true;
        }
    }

    fn flush(&mut self) {
        let Some(w) = self.w.as_mut().filter(|_| !self.broken) else {
            return;
        };
        if w.flush().is_err() {
            self.broken = true;
        }
    }

    /// Sends what is buffered and closes the client's end: a `drop` fault.
    fn close(&mut self) {
        self.flush();
        self.broken = true;
        self.w = None;
    }
}

/// The serving loop's sink: writes at once, on the loop's thread (no hand-off to another thread,
/// which on a busy machine costs a wake-up and a context switch per message). Buffered: the
/// loop flushes before it waits for more input.
struct Direct<W: Write>(Arc<Mutex<Output<W>>>);

impl<W: Write + Send> Sink for Direct<W> {
    fn emit(&self, line: Vec<u8>) -> impl Future<Output = ()> + Send {
        self.0.lock().expect("output lock").write(&[&line, b"\n"]);
        std::future::ready(())
    }

    /// Straight into the output buffer: no line is assembled first.
    fn emit_parts(&self, parts: &[&[u8]]) -> impl Future<Output = ()> + Send {
        self.write_now(parts);
        std::future::ready(())
    }

    fn writes_now(&self) -> bool {
        true
    }

    fn write_now(&self, parts: &[&[u8]]) {
        let mut out = self.0.lock().expect("output lock");
        for p in parts {
            out.write(&[p]);
        }
        out.write(&[b"\n"]);
    }
}

/// Serves `index` to the client on `input`/`output` until the client closes its side.
///
/// A blocking thread reads the client's messages and answers each at once, writing to `output`
/// itself. Only an exchange that must wait for the client (a server-initiated request) runs as a
/// task, on the caller's runtime, which also writes the tasks' messages.
pub async fn serve<R, W>(index: TapeIndex, opts: ServeOptions, input: R, output: W) -> PlayReport
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let rt_handle = tokio::runtime::Handle::current();
    let output = Arc::new(Mutex::new(Output {
        w: Some(std::io::BufWriter::with_capacity(64 * 1024, output)),
        broken: false,
    }));
    let (out_tx, out_rx) = mpsc::channel::<OutLine>(OUTPUT_QUEUE);
    let writer = tokio::spawn(write_queue(out_rx, output.clone()));
    let serving = Loop {
        matcher: Matcher::for_play(&index, &opts),
        shared: Arc::new(Shared {
            live: opts.live.clone().map(super::live::Live::new),
            bodies: Bodies::preload(&index),
            index: Arc::new(index),
            out: out_tx,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            closed: watch::channel(false).0,
            report: Mutex::new(PlayReport::default()),
            opts,
            keep_line_ends: true,
            bad_lines_used: Mutex::default(),
        }),
        direct: Direct(output.clone()),
        rt: rt_handle,
        tasks: tokio::task::JoinSet::new(),
        c2s: 0,
        next_standalone: 0,
        cut: false,
        arrived: tokio::time::Instant::now(),
    };
    let out = output.clone();
    // Panics from before this session (another session of the process, a caught one) are not
    // this session's.
    let panics_before = super::panics();
    let report =
        tokio::task::spawn_blocking(move || read_loop(serving, input, &out, panics_before))
            .await
            .unwrap_or_default();
    // `finish` dropped the queue's last sender: the writer ends once it wrote the rest.
    let _ = writer.await;
    output.lock().expect("output lock").flush();
    report
}

/// The serving loop proper, on a blocking thread: read, answer, flush before the next read.
fn read_loop<R: Read, W: Write + Send + 'static>(
    mut serving: Loop<W>,
    mut input: R,
    output: &Mutex<Output<W>>,
    panics_before: usize,
) -> PlayReport {
    serving.standalone(0);
    output.lock().expect("output lock").flush();
    let mut framer = Framer::new(serving.shared.opts.max_message);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => framer.push(&buf[..n], |f| serving.frame(f)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        // Everything this read brought is answered: out before waiting for more.
        output.lock().expect("output lock").flush();
        // A serving task panicked (a bug): stop reading, the caller reports it.
        if serving.cut || super::panics() > panics_before {
            break;
        }
    }
    if !serving.cut {
        framer.finish(|f| serving.frame(f));
    }
    serving.finish()
}

/// Writes the tasks' messages, flushing once the queue is empty: a burst goes out in few writes.
async fn write_queue<W: Write>(mut rx: mpsc::Receiver<OutLine>, out: Arc<Mutex<Output<W>>>) {
    while let Some(OutLine { line, .. }) = rx.recv().await {
        let mut out = out.lock().expect("output lock");
        out.write(&[&line]);
        if rx.is_empty() {
            out.flush();
        }
    }
}

/// The serving loop's state: it runs on the thread that reads the client.
struct Loop<W: Write + Send + 'static> {
    shared: Arc<Shared>,
    matcher: Matcher,
    direct: Direct<W>,
    rt: tokio::runtime::Handle,
    tasks: tokio::task::JoinSet<()>,
    /// Client messages seen so far.
    c2s: u64,
    next_standalone: usize,
    /// A `drop` fault cut the connection: nothing more is read or answered.
    cut: bool,
    /// When the client's latest message arrived (what paced standalone messages count from).
    arrived: tokio::time::Instant,
}

impl<W: Write + Send + 'static> Loop<W> {
    fn frame(&mut self, f: Frame<'_>) {
        if self.cut {
            return;
        }
        self.c2s += 1;
        // Read only by `--pace` (standalone messages count from it): no clock read per message
        // otherwise.
        if self.shared.opts.plan.pace.is_some() {
            self.arrived = tokio::time::Instant::now();
        }
        match f {
            Frame::Line(l) => self.message(l.bytes),
            Frame::Oversize { len, head } => {
                crate::diag!("mcptape play: a client message of {len} bytes is over the size limit (--max-message)");
                // Answer it if its id can be read from its first bytes, so the client does not hang.
                let id = leading_id(&head).unwrap_or_else(|| "null".into());
                let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32600, "message": format!("Invalid Request: message of {len} bytes is over mcptape play's --max-message")}});
                if let Ok(text) = with_id(&msg.to_string(), &id) {
                    now(&self.rt, self.direct.emit(text.into_bytes()));
                }
                self.shared.report.lock().expect("report lock").rejected += 1;
            }
        }
        self.standalone(self.c2s);
        // Reap finished tasks so the set does not grow with the session.
        while self.tasks.try_join_next().is_some() {}
    }

    fn message(&mut self, bytes: &[u8]) {
        let Loop {
            shared,
            matcher,
            direct,
            rt,
            tasks,
            c2s,
            ..
        } = self;
        now(rt, handle(shared, matcher, direct, rt, tasks, bytes, *c2s));
        if shared.opts.plan.may_drop() && shared.report.lock().expect("report lock").cut {
            self.cut = true;
        }
    }

    /// Sends the standalone messages due once `point` client messages were seen.
    fn standalone(&mut self, point: u64) {
        let Loop {
            shared,
            direct,
            rt,
            tasks,
            next_standalone,
            arrived,
            cut,
            ..
        } = self;
        if *cut {
            return;
        }
        let at = Due {
            point,
            arrived: *arrived,
        };
        now(
            rt,
            emit_standalone(shared, direct, rt, tasks, next_standalone, at),
        );
    }

    /// The client closed its side: waits for the tasks, sends what is left, and reports.
    fn finish(mut self) -> PlayReport {
        if self.cut {
            // Cut on purpose: the client sees its pipe close now, and nothing still waiting
            // (a paced answer, a server request) goes out.
            self.direct.0.lock().expect("output lock").close();
            self.tasks.abort_all();
        }
        // No answer to a server request can come any more. Waiters see `closed` and end now
        // (reported as unanswered) rather than at the timeout.
        self.shared.closed.send_replace(true);
        self.shared.pending.lock().expect("pending lock").clear();
        self.join_tasks();
        self.standalone(u64::MAX);
        self.join_tasks();
        if let Some(live) = &self.shared.live {
            self.rt.block_on(live.shutdown());
        }

        let Loop {
            shared, matcher, ..
        } = self;
        let unused: Vec<Unused> = matcher
            .unused()
            .into_iter()
            .enumerate()
            .map(|(nth, ex)| {
                let req = &shared.index.msgs[shared.index.exchanges[ex].request];
                Unused::of(nth, &shared.index, req, shared.opts.display.as_deref())
            })
            .collect();
        let shared = match Arc::try_unwrap(shared) {
            Ok(s) => s,
            Err(_) => unreachable!("every task has finished"),
        };
        // Dropping the last sender ends the queue's writer, and with it the runtime thread.
        drop(shared.out);
        let mut report = shared.report.into_inner().expect("report lock");
        report.unused = unused;
        report.repeats = matcher.repeats();
        report.ambiguous = matcher.ambiguous().to_vec();
        report.uses = matcher.uses().to_vec();
        report
    }

    fn join_tasks(&mut self) {
        let tasks = &mut self.tasks;
        self.rt
            .block_on(async { while tasks.join_next().await.is_some() {} });
    }
}

/// Runs one step of the serving loop to its end on this thread. Writing to the direct sink never
/// waits and anything that waits for the client runs as a task, so one poll finishes it; the
/// runtime's `block_on` is only the fallback.
fn now<F: Future>(rt: &tokio::runtime::Handle, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => rt.block_on(fut),
    }
}

async fn handle<W: Write + Send + 'static>(
    shared: &Arc<Shared>,
    matcher: &mut Matcher,
    direct: &Direct<W>,
    rt: &tokio::runtime::Handle,
    tasks: &mut tokio::task::JoinSet<()>,
    bytes: &[u8],
    msg_no: u64,
) {
    let at = (rt, tasks, msg_no);
    if let Some((id, method, raw)) = parse_request(bytes).filter(|(id, ..)| scalar_id(id)) {
        let params = Params::exact(raw);
        return request(
            shared,
            matcher,
            direct,
            at,
            (id.into(), &method, params, bytes),
        )
        .await;
    }
    let c = classify(bytes);
    if unservable(c.kind, c.id.as_deref(), bytes) {
        let recorded = shared
            .recorded_bad_line(bytes)
            .and_then(|meta| Some((meta, shared.index.read_bytes(meta).ok()?)));
        if let Some((meta, line)) = recorded {
            emit_recorded(shared, direct, meta, line).await;
            shared.report.lock().expect("report lock").rejected += 1;
            return;
        }
        let (code, text) = rejection(c.kind);
        // Quoted with the session's redaction rules applied: it may hold the client's secrets.
        let quoted = matcher.quote(&String::from_utf8_lossy(&bytes[..bytes.len().min(200)]));
        crate::diag!(
            "mcptape play: {text}: {quoted}{}",
            c.problem.map(|p| format!(" ({p})")).unwrap_or_default()
        );
        let msg =
            json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": text}});
        direct.emit(msg.to_string().into_bytes()).await;
        shared.report.lock().expect("report lock").rejected += 1;
        return;
    }
    match c.kind {
        Kind::Request => {
            let id = c.id.expect("requests have ids");
            let method = c.method.expect("requests have methods");
            let params = Params::parsed(crate::wire::params::params_of(bytes));
            request(
                shared,
                matcher,
                direct,
                at,
                (id.into(), &method, params, bytes),
            )
            .await;
        }
        Kind::Response | Kind::Error => {
            let id = c.id.unwrap_or_else(|| "null".into());
            let tx = shared.pending.lock().expect("pending lock").remove(&id);
            match tx {
                Some(tx) => {
                    let _ = tx.send(bytes.to_vec());
                }
                // Only the id: the answer itself may carry the client's secrets.
                None => crate::diag!(
                    "mcptape play: the client answered a request mcptape did not send (id {id})"
                ),
            }
        }
        // Oversize lines are answered where they are framed; the rest is `unservable`.
        _ => {}
    }
}

/// What play answers a client line that is no message it can serve (and that the tape holds no
/// answer to), over either transport: its JSON-RPC error code and message.
pub(crate) fn rejection(kind: Kind) -> (i64, &'static str) {
    match kind {
        Kind::NotJson => (-32700, "Parse error"),
        Kind::Batch => (-32600, "Invalid Request: mcptape play does not serve JSON-RPC batches (removed from MCP in 2025-06-18)"),
        Kind::Request | Kind::Notification => (-32600, "Invalid Request: a request's id must be a string or a number (MCP: never null)"),
        _ => (-32600, "Invalid Request"),
    }
}

/// A client request's params: their exact text where known, parsed into a value only when
/// something needs one. A request of the same bytes as a recorded one is answered without.
struct Params<'a> {
    /// `Some(text)` or `Some(None)` (no params): the exact bytes the client sent.
    exact: Option<Option<&'a str>>,
    value: std::cell::OnceCell<Option<Value>>,
}

impl<'a> Params<'a> {
    fn exact(raw: Option<&'a str>) -> Params<'a> {
        Params {
            exact: Some(raw),
            value: std::cell::OnceCell::new(),
        }
    }

    fn parsed(value: Option<Value>) -> Params<'a> {
        Params {
            exact: None,
            value: std::cell::OnceCell::from(value),
        }
    }

    /// As `params_of` gives them (too deep for a value: their text, marked).
    fn value(&self) -> Option<&Value> {
        self.value
            .get_or_init(|| {
                let raw = self.exact.flatten()?;
                Some(
                    crate::wire::exact::from_str(raw)
                        .unwrap_or_else(|_| Value::String(format!("(unparsed params) {raw}"))),
                )
            })
            .as_ref()
    }
}

/// Serves a client request: the recorded exchange that matches it, or an explanation of the
/// miss. `at`: the runtime and task set a waiting exchange runs on, and the client message's
/// number.
async fn request<W: Write + Send + 'static>(
    shared: &Arc<Shared>,
    matcher: &mut Matcher,
    direct: &Direct<W>,
    (rt, tasks, msg_no): (&tokio::runtime::Handle, &mut tokio::task::JoinSet<()>, u64),
    (id, method, params, bytes): (std::borrow::Cow<'_, str>, &str, Params<'_>, &[u8]),
) {
    if let Some(live) = &shared.live {
        if method == "initialize" {
            live.note_initialize(bytes);
        }
        if live.chosen(method, params.value()) {
            return spawn_live(shared, rt, tasks, bytes, id.into_owned(), false);
        }
    }
    let lenient = shared.opts.lenient || shared.opts.on_miss == super::live::OnMiss::Lenient;
    let fast = params.exact.and_then(|raw| matcher.take_raw(method, raw));
    let outcome = match fast {
        Some(ex) => Outcome::Hit(ex),
        None => matcher.take(&shared.index, method, params.value(), lenient),
    };
    // A `server/discover` probe the tape has no answer for: answered as its server's era was.
    if matches!(outcome, Outcome::Miss(_)) {
        if let Some(answer) = probe_answer(&shared.index, method, &id) {
            let text = shared
                .report
                .lock()
                .expect("report lock")
                .answer_probe(answer);
            direct.emit(text.into_bytes()).await;
            return;
        }
    }
    let ex = match outcome {
        Outcome::Hit(ex) => ex,
        Outcome::Lenient(ex, miss) => {
            let line = shared.index.msgs[shared.index.exchanges[ex].request].line;
            crate::diag!(
                "mcptape play: --lenient: served tape line {line} instead.\n{}",
                miss.render(&id)
            );
            shared.report.lock().expect("report lock").lenient += 1;
            ex
        }
        Outcome::Miss(_) if method == "ping" => {
            // Liveness is protocol, not behaviour: answer it even when it was not recorded.
            direct
                .emit(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#).into_bytes())
                .await;
            return;
        }
        Outcome::Miss(_)
            if shared.opts.on_miss == super::live::OnMiss::Live && shared.live.is_some() =>
        {
            return spawn_live(shared, rt, tasks, bytes, id.into_owned(), true);
        }
        Outcome::Miss(mut miss) => {
            miss.note_too_large(&shared.index, bytes.len());
            crate::diag!("mcptape play: {}", miss.render(&id).trim_end());
            let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": miss.error_object()});
            let text = with_id(&msg.to_string(), &id).expect("our own JSON");
            direct.emit(text.into_bytes()).await;
            let mut r = shared.report.lock().expect("report lock");
            r.missed += 1;
            r.misses.push(miss);
            return;
        }
    };
    if method == "initialize" {
        if let Some(w) = version_warning(&shared.index, &shared.bodies, ex, params.value()) {
            crate::diag!("{w}");
        }
    }
    let plan = &shared.opts.plan;
    let verdict = if plan.is_set() {
        plan.verdict(&shared.index, ex, method, params.value(), msg_no)
    } else {
        Verdict::default()
    };
    if let Some(i) = verdict.fault {
        // An error answers at once; a drop cuts here (the loop stops reading). A stall waits
        // in `serve_exchange_with`.
        let answer = plan.error_answer(i, &id);
        if answer.is_some() || *plan.kind(i) == super::faults::FaultKind::Drop {
            shared.inject(i, shared.index.exchanges[ex].request, Some(&id));
            shared.report.lock().expect("report lock").cut |= answer.is_none();
            if let Some(line) = answer {
                direct.emit(line.into_bytes()).await;
            }
            return;
        }
    }
    // The client's progress token matters only to an exchange with messages during it.
    let token = if shared.index.exchanges[ex].during.is_empty() {
        None
    } else {
        crate::wire::params::request_progress_token(bytes, params.value())
    };
    let waits = verdict.waits()
        || shared.index.exchanges[ex]
            .during
            .iter()
            .any(|&m| shared.index.msgs[m].kind == Kind::Request);
    if waits {
        let (shared, id) = (shared.clone(), id.into_owned());
        tasks.spawn_on(
            async move {
                serve_exchange_with(&shared, &shared.out, ex, &id, token.as_deref(), &verdict).await
            },
            rt,
        );
    } else {
        // Inline keeps the recorded order with the standalone messages that follow.
        serve_exchange(shared, direct, ex, &id, token.as_deref()).await;
    }
}

/// Answers a request from the live server, as a task: the loop serves on meanwhile.
fn spawn_live(
    shared: &Arc<Shared>,
    rt: &tokio::runtime::Handle,
    tasks: &mut tokio::task::JoinSet<()>,
    bytes: &[u8],
    id: String,
    taped: bool,
) {
    let (shared, bytes) = (shared.clone(), bytes.to_vec());
    tasks.spawn_on(
        async move { super::live::forward(&shared, &shared.out, &bytes, &id, taped).await },
        rt,
    );
}

/// What serving a request needs (id text, method, params' exact text) in one parse of it, with
/// nothing built: all three borrowed from `bytes` (the method copied only when it holds an
/// escape). `None` for anything else, and for a request this cannot read: the general path
/// classifies those.
fn parse_request(bytes: &[u8]) -> Option<(&str, std::borrow::Cow<'_, str>, Option<&str>)> {
    let text = std::str::from_utf8(bytes).ok()?;
    if let Some((id, method, params)) = crate::tape::scan::request_parts(text) {
        return Some((id, method.into(), params));
    }
    parse_request_serde(text)
}

/// [`parse_request`] by serde: whatever the scanner is not sure of.
fn parse_request_serde(text: &str) -> Option<(&str, std::borrow::Cow<'_, str>, Option<&str>)> {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
        #[serde(borrow, default)]
        method: Option<Text<'a>>,
        #[serde(borrow, default)]
        params: Option<&'a RawValue>,
    }
    /// A string borrowed where it has no escape. (serde borrows a `Cow<str>` field only when it
    /// is the field's own type: inside an `Option` it always copies, an allocation per request.)
    #[derive(serde::Deserialize)]
    struct Text<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);
    // A struct also deserializes from an array: only an object is a request.
    if text.trim_start().as_bytes().first() != Some(&b'{') {
        return None;
    }
    let p: Probe<'_> = serde_json::from_str(text).ok()?;
    // `"id": null` reads as None, as in `classify`: no usable id, not a request.
    Some((p.id?.get(), p.method?.0, p.params.map(RawValue::get)))
}

/// Sends what the server sent during the exchange, then the response with the client's id.
pub(crate) async fn serve_exchange<O: Sink + ?Sized>(
    shared: &Shared,
    out: &O,
    ex: usize,
    client_id: &str,
    client_token: Option<&str>,
) {
    serve_exchange_with(
        shared,
        out,
        ex,
        client_id,
        client_token,
        &Verdict::default(),
    )
    .await
}

/// [`serve_exchange`] as `verdict` says: paced, late, stalled, some server requests skipped.
pub(crate) async fn serve_exchange_with<O: Sink + ?Sized>(
    shared: &Shared,
    out: &O,
    ex_no: usize,
    client_id: &str,
    client_token: Option<&str>,
    verdict: &Verdict,
) {
    let index = &shared.index;
    let ex = &index.exchanges[ex_no];
    // The clock is read only when something waits: an answer due at once needs no time.
    let waits = verdict.waits();
    let start = waits.then(tokio::time::Instant::now);
    let recorded_at = index.msgs[ex.request].t_us;
    // When a recorded message of the exchange is due: as long after the request as recorded.
    let due = |meta: &MsgMeta| {
        let start = start.unwrap_or_else(tokio::time::Instant::now);
        match verdict.pace {
            Some(p) => start + super::pace::scaled(meta.t_us.saturating_sub(recorded_at), p),
            None => start,
        }
    };
    for &m in &ex.during {
        let meta = &index.msgs[m];
        if verdict.pace.is_some() && !super::pace::wait_until(due(meta), out.gone()).await {
            return;
        }
        match meta.kind {
            Kind::Notification if meta.method.as_deref() == Some("notifications/progress") => {
                // Progress goes to the token of this client's request; no token, no progress asked.
                let Some(token) = client_token else { continue };
                if let Some(text) = read_text(index, meta) {
                    let line = with_progress_token(&text, token).unwrap_or(text);
                    emit_recorded(shared, out, meta, line.into_bytes()).await;
                }
            }
            Kind::Request => match verdict.skips.iter().find(|(s, _)| *s == m) {
                Some(&(_, f)) => shared.inject(f, m, None),
                None => server_request(shared, out, meta, ex.client_answers.get(&m).copied()).await,
            },
            Kind::Response | Kind::Error => {}
            _ => {
                if let Ok(bytes) = index.read_bytes(meta) {
                    emit_recorded(shared, out, meta, bytes).await;
                }
            }
        }
    }
    // Nothing to wait for (no pace, latency or fault): due now.
    if waits && !answer_when_due(shared, out, ex_no, client_id, verdict, &due).await {
        return;
    }
    let Some(r) = ex.response else {
        // A `subscriptions/listen` stream has no answer: it runs until the client closes it.
        if index.msgs[ex.request].method.as_deref() == Some("subscriptions/listen") {
            return;
        }
        if ex.cancelled {
            // The recorded client cancelled it and the server, as it should, never answered.
            crate::diag!("mcptape play: request id {client_id}: cancelled by the client in the recording; no answer, as recorded");
            return;
        }
        // Recorded without an answer: tell the client instead of leaving it waiting forever.
        let line = index.msgs[ex.request].line;
        let message = match index.skipped_lines().iter().find(|b| b.line > line) {
            // --skip-bad-lines: the answer may have been on a line that did not read.
            Some(bad) => format!(
                "mcptape: the recorded answer to this request (tape line {line}) is not on the tape: tape line {}, after it, was skipped as malformed (--skip-bad-lines) and may have held it",
                bad.line
            ),
            None => format!(
                "mcptape: the recorded server never answered this request (tape line {line}): it exited or the recording was cut off before its response"
            ),
        };
        out.emit(no_answer(client_id, &message)).await;
        shared.report.lock().expect("report lock").unanswered += 1;
        return;
    };
    let meta = &index.msgs[r];
    if let crate::tape::index::Body::Oversize { len } = meta.body {
        let message = too_large_answer(index.msgs[ex.request].line, meta.line, len);
        out.before(meta).await;
        out.emit(no_answer(client_id, &message)).await;
        shared.report.lock().expect("report lock").too_large += 1;
        return;
    }
    let request_id = index.msgs[ex.request].id.as_deref();
    if !crate::tape::open_ids::same_id(meta.id.as_deref(), request_id) {
        // An answer without the request's id: the server refused the POST before reading the
        // request it carried (`"id": null`, no id, the Python SDK's `"server-error"`). It goes
        // out as it was: the server never said the request's id.
        if let Ok(bytes) = index.read_bytes(meta) {
            emit_recorded(shared, out, meta, bytes).await;
        }
        shared.report.lock().expect("report lock").served += 1;
        return;
    }
    // Over stdio, what the server wrote around its JSON on the line (nearly always nothing).
    let ends = shared.line_ends(meta);
    let (before, after) = match &ends {
        Some((b, a)) => (&b[..], &a[..]),
        None => (&[][..], &[][..]),
    };
    // To the serving loop's stdout straight from the tape's bytes: no copy of the answer made.
    let lent = out
        .writes_now()
        .then(|| {
            shared.bodies.with_json_bytes(meta, |bytes| {
                // Where the index noted the id and there is no marker to count, the bytes go out
                // as they are: the index read them as UTF-8 JSON, and checking that again cost
                // about a tenth of serving a 1 KiB answer.
                if let Some((start, end)) = noted_id_span(bytes, meta) {
                    if !crate::wire::marker::has_marker_in(bytes) {
                        let id = client_id.as_bytes();
                        out.write_now(&[before, &bytes[..start], id, &bytes[end..], after]);
                        return Some(0);
                    }
                }
                let text = std::str::from_utf8(bytes).ok()?;
                match reply(text, client_id, meta) {
                    Some(Reply::Spliced([a, b, c])) => out.write_now(&[before, a, b, c, after]),
                    Some(Reply::Rewritten(t)) => out.write_now(&[before, t.as_bytes(), after]),
                    None => {}
                }
                Some(count_markers(text))
            })
        })
        .flatten()
        .flatten();
    // Only the serving loop reads the chunks (a task's answers come from the index's file):
    // the chunk's lock, held while the line is written, is never waited for.
    let markers = match lent {
        Some(markers) => markers,
        None => {
            let read;
            let text = match shared.bodies.json(meta) {
                Some(t) => t,
                None => {
                    read = read_text(index, meta);
                    match read.as_deref() {
                        Some(t) => t,
                        None => return,
                    }
                }
            };
            let markers = count_markers(text);
            out.before(meta).await;
            match reply(text, client_id, meta) {
                Some(Reply::Spliced([a, b, c])) => out.emit_parts(&[before, a, b, c, after]).await,
                Some(Reply::Rewritten(t)) if ends.is_none() => out.emit(t.into_bytes()).await,
                Some(Reply::Rewritten(t)) => out.emit_parts(&[before, t.as_bytes(), after]).await,
                None => {}
            }
            markers
        }
    };
    let mut r = shared.report.lock().expect("report lock");
    r.served += 1;
    r.markers += markers;
}

/// Why a matched request gets no recorded answer, said on stderr, and the error the client gets
/// in its place (`message` starts `mcptape: `).
fn no_answer(client_id: &str, message: &str) -> Vec<u8> {
    crate::diag!(
        "mcptape play: request id {client_id}: {}",
        message.strip_prefix("mcptape: ").unwrap_or(message)
    );
    let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": super::explain::MISS_CODE, "message": message}});
    with_id(&msg.to_string(), client_id)
        .expect("our own JSON")
        .into_bytes()
}

/// The error message for a request whose recorded answer (tape line `line`, `len` bytes) was
/// over the recorder's `--max-message`: the tape has its length and first bytes only.
pub(crate) fn too_large_answer(request_line: u64, line: u64, len: u64) -> String {
    format!(
        "mcptape: the recorded answer to this request (tape line {request_line}) was {len} bytes, too large to record: over the recorder's --max-message, the tape keeps only its length and first bytes (tape line {line}); re-record with a larger --max-message to play it"
    )
}

/// A recorded answer with the client's id in place of the recorded one.
enum Reply<'a> {
    /// The answer's bytes before its id, the client's id, the bytes after: the bytes `with_id`
    /// gives, without building them first.
    Spliced([&'a [u8]; 3]),
    /// Rewritten whole: an answer whose one id its structure alone does not show.
    Rewritten(String),
}

/// The answer `text` (the body of `meta`) with the client's id; `None` (said on stderr) when it
/// cannot be rewritten.
fn reply<'a>(text: &'a str, client_id: &'a str, meta: &MsgMeta) -> Option<Reply<'a>> {
    if let Some((start, end)) = id_span_of(text, meta) {
        let b = text.as_bytes();
        return Some(Reply::Spliced([
            &b[..start],
            client_id.as_bytes(),
            &b[end..],
        ]));
    }
    match with_id(text, client_id) {
        Ok(t) => Some(Reply::Rewritten(t)),
        Err(e) => {
            crate::diag!(
                "mcptape play: tape line {}: cannot rewrite the response id: {e}",
                meta.line
            );
            None
        }
    }
}

/// Where the value of the answer's one top-level id lies: where the index found it, when the
/// bytes there are the id the tape line gives (they are unless the tape changed under the
/// index), else looked for.
fn id_span_of(text: &str, meta: &MsgMeta) -> Option<(usize, usize)> {
    noted_id_span(text.as_bytes(), meta).or_else(|| tape_id_span(text))
}

/// Where the index found the answer's one id, if the id the tape line gives stands there.
fn noted_id_span(b: &[u8], meta: &MsgMeta) -> Option<(usize, usize)> {
    let (start, end) = meta.id_in_body?;
    let (start, end) = (start as usize, end as usize);
    // The whole value: not a number the id only begins or ends.
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let whole = start
        .checked_sub(1)
        .and_then(|i| b.get(i))
        .is_some_and(|c| *c == b':' || ws(c))
        && b.get(end)
            .is_some_and(|c| matches!(c, b',' | b'}') || ws(c));
    let id = meta.id.as_deref()?.as_bytes();
    (whole && b.get(start..end) == Some(id)).then_some((start, end))
}

/// Waits until the answer of exchange `ex` is due: its recorded time when paced, plus the
/// verdict's latency, plus a `stall=DURATION`; a `stall` never is, and gives `false` once the
/// client has closed its side (or left), as does a client that leaves while an answer waits.
async fn answer_when_due<O: Sink + ?Sized>(
    shared: &Shared,
    out: &O,
    ex: usize,
    client_id: &str,
    verdict: &Verdict,
    due: &impl Fn(&MsgMeta) -> tokio::time::Instant,
) -> bool {
    let index = &shared.index;
    let exchange = &index.exchanges[ex];
    let at = match exchange.response {
        Some(r) => due(&index.msgs[r]),
        None => due(&index.msgs[exchange.request]),
    };
    // Delays are bounded when parsed (pace::LONGEST_DELAY); past the clock's range an answer
    // would never be due, so it is held like a `stall`, not a panic.
    let mut at = at.checked_add(verdict.latency);
    if let Some(i) = verdict.fault {
        let plan = &shared.opts.plan;
        let super::faults::FaultKind::Stall(delay) = *plan.kind(i) else {
            return true;
        };
        shared.inject(i, exchange.request, Some(client_id));
        at = match delay {
            Some(delay) => at.and_then(|at| at.checked_add(delay)),
            None => None,
        };
    }
    let Some(at) = at else {
        // Never answered: held until the client closes its side or leaves.
        let mut closed = shared.closed.subscribe();
        tokio::select! {
            _ = closed.wait_for(|c| *c) => {},
            _ = out.gone() => {},
        }
        return false;
    };
    at <= tokio::time::Instant::now() || super::pace::wait_until(at, out.gone()).await
}

/// Re-issues a recorded server request with a fresh id, awaits the client's answer and compares
/// it with the recorded one.
pub(crate) async fn server_request<O: Sink + ?Sized>(
    shared: &Shared,
    out: &O,
    meta: &MsgMeta,
    recorded_answer: Option<usize>,
) {
    let index = &shared.index;
    let mut closed = shared.closed.subscribe();
    let Some(text) = read_text(index, meta) else {
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed).to_string();
    let Ok(request) = with_id(&text, &id) else {
        return;
    };
    let (tx, rx) = oneshot::channel();
    let already_closed = *closed.borrow();
    shared
        .pending
        .lock()
        .expect("pending lock")
        .insert(id.clone(), tx);
    if !already_closed {
        emit_recorded(shared, out, meta, request.into_bytes()).await;
    }
    let method = meta.method.clone().unwrap_or_default();
    // A waiter registered after the main loop cleared `pending` is never dropped by it, so the
    // close is watched here too. All three futures are cancel-safe (a oneshot receiver, a watch
    // wait, a sleep): whichever loses is simply dropped.
    let answer = tokio::select! {
        a = rx => a.ok(),
        _ = closed.wait_for(|c| *c) => None,
        _ = tokio::time::sleep(shared.opts.answer_timeout) => None,
    };
    let drift = match answer {
        Some(bytes) => {
            let got = answer_body(&bytes);
            let want = recorded_answer
                .and_then(|a| read_text(index, &index.msgs[a]))
                .map(|t| answer_body(t.as_bytes()));
            match want {
                Some(want) => {
                    let diffs = differences(&want, &got);
                    (!diffs.is_empty()).then_some(Drift {
                        method,
                        line: meta.line,
                        differences: diffs,
                        no_answer: false,
                    })
                }
                None => None, // nothing recorded to compare with
            }
        }
        // The recorded client did not answer either (it left first, as the Inspector's CLI
        // does): silence is what was recorded, not drift. Nor is it when a connection cut on
        // purpose (`--faults drop`) left the request unanswered.
        None if recorded_answer.is_none() || shared.report.lock().expect("report lock").cut => {
            shared.pending.lock().expect("pending lock").remove(&id);
            None
        }
        _ => {
            shared.pending.lock().expect("pending lock").remove(&id);
            Some(Drift {
                method,
                line: meta.line,
                differences: Vec::new(),
                no_answer: true,
            })
        }
    };
    if let Some(d) = drift {
        if d.no_answer {
            let when = if *shared.closed.borrow() {
                "before closing its input".to_string()
            } else {
                format!("within {:?}", shared.opts.answer_timeout)
            };
            crate::diag!(
                "mcptape play: drift: the client did not answer {} (tape line {}) {when}",
                d.method,
                d.line
            );
        } else {
            let lines: Vec<String> = d
                .differences
                .iter()
                .take(8)
                .map(|x| {
                    format!(
                        "    {}  recorded {}  got {}",
                        x.path,
                        short(x.left.as_ref(), 60),
                        short(x.right.as_ref(), 60)
                    )
                })
                .collect();
            crate::diag!("mcptape play: drift: the client's answer to {} (tape line {}) differs from the recording:\n{}", d.method, d.line, lines.join("\n"));
        }
        let mut r = shared.report.lock().expect("report lock");
        r.drifted += 1;
        r.drifts.push(d);
    }
}

/// The part of a response that is compared: `result` or `error` (the id is ours, not theirs).
fn answer_body(bytes: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    match v {
        Value::Object(mut m) => m
            .remove("result")
            .map(|r| json!({"result": r}))
            .or_else(|| m.remove("error").map(|e| json!({"error": e})))
            .unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// Which client message made standalone messages due, and when it arrived.
pub(crate) struct Due {
    /// Client messages seen.
    pub point: u64,
    /// When the latest arrived.
    pub arrived: tokio::time::Instant,
}

/// What becomes of a standalone message (one tied to no call) under the plan.
#[derive(Clone, Copy)]
pub(crate) enum Standalone {
    /// Sent now.
    Now,
    /// Sent at this time (`--pace`: its recorded offset after the client message before it).
    At(tokio::time::Instant),
    /// Not sent: a `skip` fault (recorded in the report).
    Skipped,
}

impl Standalone {
    pub(crate) fn of(shared: &Shared, msg: usize, due: &Due) -> Standalone {
        let plan = &shared.opts.plan;
        if !plan.is_set() {
            return Standalone::Now;
        }
        if shared.index.msgs[msg].kind == Kind::Request {
            if let Some(f) = plan.skip_standalone(&shared.index, msg, due.point) {
                shared.inject(f, msg, None);
                return Standalone::Skipped;
            }
        }
        match plan.pace {
            Some(p) => Standalone::At(
                due.arrived
                    + super::pace::scaled(super::plan::standalone_offset(&shared.index, msg), p),
            ),
            None => Standalone::Now,
        }
    }

    /// Sends standalone message `msg` (a server request, or anything else) to `shared.out`,
    /// when due; a task.
    pub(crate) async fn send_later(self, shared: Arc<Shared>, msg: usize, answer: Option<usize>) {
        if let Standalone::At(t) = self {
            tokio::time::sleep_until(t).await;
        }
        let meta = shared.index.msgs[msg].clone();
        let own = OwnStream::new(&shared.out);
        if meta.kind == Kind::Request {
            server_request(&shared, &own, &meta, answer).await
        } else if let Ok(bytes) = shared.index.read_bytes(&meta) {
            emit_recorded(&shared, &own, &meta, bytes).await
        }
    }
}

async fn emit_standalone<W: Write + Send + 'static>(
    shared: &Arc<Shared>,
    direct: &Direct<W>,
    rt: &tokio::runtime::Handle,
    tasks: &mut tokio::task::JoinSet<()>,
    next: &mut usize,
    due: Due,
) {
    let index = &shared.index;
    while let Some(s) = index.standalone.get(*next).filter(|s| s.point <= due.point) {
        *next += 1;
        let meta = &index.msgs[s.msg];
        let when = Standalone::of(shared, s.msg, &due);
        match (meta.kind, when) {
            (_, Standalone::Skipped) | (Kind::Response | Kind::Error, _) => {}
            (Kind::Request, _) | (_, Standalone::At(_)) => {
                let send = when.send_later(shared.clone(), s.msg, s.client_answer);
                tasks.spawn_on(send, rt);
            }
            (_, Standalone::Now) => {
                if let Ok(bytes) = index.read_bytes(meta) {
                    emit_recorded(shared, direct, meta, bytes).await;
                }
            }
        }
    }
}

/// Sends recorded message `meta` as `line` (its bytes, with the client's ids where they go),
/// framed as the recorded server framed it where play keeps that (over stdio).
async fn emit_recorded<O: Sink + ?Sized>(shared: &Shared, out: &O, meta: &MsgMeta, line: Vec<u8>) {
    out.before(meta).await;
    match shared.line_ends(meta) {
        Some((before, after)) => out.emit_parts(&[&before, &line, &after]).await,
        None => out.emit(line).await,
    }
}

fn read_text(index: &TapeIndex, meta: &MsgMeta) -> Option<String> {
    match index.read_text(meta) {
        Ok(t) => Some(t),
        Err(e) => {
            crate::diag!("mcptape play: tape line {}: {e}", meta.line);
            None
        }
    }
}

pub(crate) use super::framing::send;

/// The id of a JSON-RPC message from its first bytes, when it comes early enough to be seen.
fn leading_id(head: &[u8]) -> Option<String> {
    static RE: std::sync::OnceLock<regex::bytes::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::bytes::Regex::new(r#"^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*\s*"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")"#)
            .expect("valid regex")
    });
    let caps = re.captures(head)?;
    String::from_utf8(caps.get(1)?.as_bytes().to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_requests_are_read_by_the_scanner_as_serde_reads_them() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"n":3,"size":1024}}}"#,
            r#"{"method":"tools/list","jsonrpc":"2.0","id":"a-1"}"#,
            r#" { "jsonrpc" : "2.0" , "id" : 1 , "method" : "x" , "params" : null } "#,
            r#"{"jsonrpc":"2.0","id":{"odd":1},"method":"x","params":[1,"two"]}"#,
            "{\"id\":1,\"method\":\"x\",\"params\":{\"price\":2.50,\"api_key\":\"k\\n\"}}\r",
        ];
        for text in cases {
            let fast = crate::tape::scan::request_parts(text)
                .unwrap_or_else(|| panic!("not read: {text}"));
            let slow = parse_request_serde(text).expect("a request");
            assert_eq!(
                (fast.0, fast.1, fast.2),
                (slow.0, &*slow.1, slow.2),
                "{text}"
            );
        }
        // Not sure, or not a request: left to serde.
        for text in [
            r#"{"id":1,"method":"x","id":2}"#,
            r#"{"\u0069d":1,"method":"x"}"#,
            r#"{"id":1,"method":"a\/b"}"#,
            r#"{"id":null,"method":"x"}"#,
            r#"{"id":1,"method":7}"#,
            r#"{"id":1}"#,
            r#"[{"id":1,"method":"x"}]"#,
            r#"{"id":1,"method":"x"} x"#,
            r#"{"id":1,"method":"x""#,
        ] {
            assert_eq!(crate::tape::scan::request_parts(text), None, "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whenever the scanner reads a request, serde reads the same id, method and params.
        #[test]
        fn the_request_scanner_reads_what_serde_reads(
            members in proptest::collection::vec((
                proptest::sample::select(vec!["id", "method", "params", "jsonrpc", "\\u0069d", "x", "a\\nb"]),
                proptest::sample::select(vec![
                    "1", "-0", "2.50", "1e5", "null", "true", "\"2.0\"", "\"tools/call\"",
                    "\"a\\/b\"", "\"\\u00e9\"", "\"é\"", "{}", "[]", "{\"name\":\"t\",\"id\":2}",
                    "[1,{\"method\":\"y\"}]", "01", "\"\\x\"", "{\"a\":}",
                ]),
            ), 0..6),
            ws in proptest::sample::select(vec!["", " ", "\n\t"]),
            tail in proptest::sample::select(vec!["", " ", "\r\n", "x", "}"]),
        ) {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}"))
                .collect();
            let text = format!("{ws}{{{}}}{tail}", body.join(","));
            if let Some(fast) = crate::tape::scan::request_parts(&text) {
                let slow = parse_request_serde(&text);
                proptest::prop_assert!(slow.is_some(), "{}", text);
                let slow = slow.unwrap();
                proptest::prop_assert_eq!((fast.0, fast.1, fast.2), (slow.0, &*slow.1, slow.2), "{}", text);
            }
        }
    }

    /// The id's place the index noted is taken only where the tape line's id stands there;
    /// anywhere else (a tape that changed under its index) the answer's id is looked for.
    #[test]
    fn an_answers_id_is_where_the_index_says_only_if_it_is_there() {
        let meta = |id: &str, at: (u32, u32)| MsgMeta {
            seq: 1,
            t_us: 0,
            line: 1,
            dir: crate::wire::Dir::S2C,
            kind: Kind::Response,
            id: Some(id.to_string()),
            method: None,
            body: crate::tape::index::Body::Json { offset: 0, len: 0 },
            id_in_body: Some(at),
            sse: false,
            stream_of: None,
            http: None,
            appended: false,
            ends: Default::default(),
        };
        let text = r#"{"jsonrpc":"2.0","id":17,"result":{}}"#;
        assert_eq!(id_span_of(text, &meta("17", (22, 24))), Some((22, 24)));
        // Elsewhere, past the end, or another id: found by looking.
        assert_eq!(id_span_of(text, &meta("17", (1, 3))), Some((22, 24)));
        assert_eq!(id_span_of(text, &meta("17", (40, 42))), Some((22, 24)));
        assert_eq!(id_span_of(text, &meta("1", (22, 23))), Some((22, 24)));
        assert_eq!(id_span_of(text, &meta("7", (23, 24))), Some((22, 24)));
        let two = r#"{"id":17,"id":18}"#;
        assert_eq!(id_span_of(two, &meta("1", (6, 7))), None);
    }

    #[test]
    fn preloaded_bodies_are_found_by_offset_or_left_to_the_file() {
        let meta = |body| MsgMeta {
            seq: 1,
            t_us: 0,
            line: 1,
            dir: crate::wire::Dir::S2C,
            kind: Kind::Response,
            id: None,
            method: None,
            body,
            id_in_body: None,
            sse: false,
            stream_of: None,
            http: None,
            appended: false,
            ends: Default::default(),
        };
        use crate::tape::index::Body;
        let tape = Bodies::Whole(r#"{"msg":{"id":1,"result":{}}}"#.to_string());
        let json = |offset, len| meta(Body::Json { offset, len });
        assert_eq!(tape.json(&json(7, 20)), Some(r#"{"id":1,"result":{}}"#));
        // Past the end (the file changed since it was indexed): read from the file instead.
        assert_eq!(tape.json(&json(7, 40)), None);
        assert_eq!(tape.json(&meta(Body::Text { offset: 7, len: 20 })), None);
        assert_eq!(Bodies::File.json(&json(7, 20)), None);
        // A big tape's bodies are lent from its chunks, the same bytes.
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, br#"{"msg":{"id":1,"result":{}}}"#).unwrap();
        let chunks = Bodies::Chunks(crate::tape::read_ahead::ReadAhead::new(f));
        let got = chunks.with_json_bytes(&json(7, 20), <[u8]>::to_vec);
        assert_eq!(got.as_deref(), Some(&br#"{"id":1,"result":{}}"#[..]));
        assert_eq!(chunks.with_json_bytes(&json(7, 40), <[u8]>::to_vec), None);
        assert_eq!(
            chunks.json(&json(7, 20)),
            None,
            "not in memory: read by the index"
        );
        let whole = tape.with_json_bytes(&json(7, 20), <[u8]>::to_vec);
        assert_eq!(whole.as_deref(), Some(&br#"{"id":1,"result":{}}"#[..]));
    }

    #[test]
    fn markers_are_counted_in_an_answer_and_nothing_else_is() {
        assert_eq!(count_markers(r#"{"result":{"text":"plain [REDACTED"}}"#), 0);
        assert_eq!(
            count_markers(
                r#"{"result":{"a":"[REDACTED:key:api_key:0a1b2c3d]","b":"x [REDACTED:bearer] y [REDACTED:jwt]"}}"#
            ),
            3
        );
    }

    #[test]
    fn a_request_is_read_in_one_parse_and_anything_else_goes_the_general_way() {
        let (id, method, params) = parse_request(
            br#"{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!((id, method.as_ref()), (r#""a\"b""#, "tools/call"));
        assert!(matches!(method, std::borrow::Cow::Borrowed(_)), "no copy");
        let (_, escaped, _) = parse_request(br#"{"id":1,"method":"tools\/call"}"#).unwrap();
        assert_eq!(escaped, "tools/call");
        assert_eq!(params, Some(r#"{"x":1}"#));
        let (_, _, params) = parse_request(br#"{"id":1,"method":"ping","params":null}"#).unwrap();
        assert_eq!(params, None);
        for other in [
            &br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..],
            br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            br#"[{"id":1,"method":"x"}]"#,
            br#"{"id":1,"method":5}"#,
            br#"{"id":1,"id":2,"method":"x"}"#,
            b"{\"id\":1,\"method\":\"\xff\"}",
            b"not json",
        ] {
            assert!(
                parse_request(other).is_none(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        // Too deep for a Value: its text is read all the same, and made the value the general
        // path (`params_of`) makes of it only when one is needed.
        let deep_params = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let deep = format!(r#"{{"id":1,"method":"x","params":{deep_params}}}"#);
        let (_, _, raw) = parse_request(deep.as_bytes()).unwrap();
        assert_eq!(raw, Some(deep_params.as_str()));
        assert_eq!(
            Params::exact(raw).value(),
            crate::wire::params::params_of(deep.as_bytes()).as_ref()
        );
    }
}
