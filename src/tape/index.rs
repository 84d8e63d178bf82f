//! The exchange index of one server's conversation on a tape: requests paired with their
//! responses, what the server sent while each was open, and the messages tied to no exchange.
//! It holds offsets into the tape file and match hashes, never copies of message bodies.

use super::format::{End, Header, MsgLine, ServerDecl};
use super::reader::{Entry, Scanned, ScannedEntry, TapeError, TapeReader, Warning};
use super::scan::{BodyText, MsgFields};
use crate::wire::canonical::{canonical, match_params};
use crate::wire::{Dir, Kind};
use base64::Engine as _;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where a message's body lies in the tape file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Body {
    /// The verbatim JSON message.
    Json { offset: u64, len: u32 },
    /// A JSON string literal holding a non-JSON UTF-8 line.
    Text { offset: u64, len: u32 },
    /// A JSON string literal holding base64 of a non-UTF-8 line.
    B64 { offset: u64, len: u32 },
    /// Only the length of an over-long line is known.
    Oversize { len: u64 },
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MsgMeta {
    pub seq: u64,
    pub t_us: u64,
    /// 1-based line in the tape file.
    pub line: u64,
    pub dir: Dir,
    pub kind: Kind,
    pub id: Option<String>,
    pub method: Option<String>,
    pub body: Body,
    /// Recorded over HTTP inside an SSE stream.
    pub sse: bool,
    /// HTTP: the request (id text) whose answer stream this server message came on.
    pub stream_of: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Exchange {
    /// Index of the client's request in `msgs`.
    pub request: usize,
    pub response: Option<usize>,
    /// Server-to-client messages sent while this exchange was open, in order (notifications,
    /// server-initiated requests, stray lines).
    pub during: Vec<usize>,
    /// Server request (index in `msgs`) → the client's recorded answer (index in `msgs`).
    pub client_answers: HashMap<usize, usize>,
    /// Hash of method and match params (volatile fields removed).
    pub key: MatchKey,
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
}

/// A 128-bit hash of a request's method and match params: equal keys are taken as equal
/// requests (a collision is as likely as two random UUIDs being equal), so matching needs no
/// re-reading of the tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MatchKey(u64, u64);

impl MatchKey {
    pub fn from_halves(a: u64, b: u64) -> MatchKey {
        MatchKey(a, b)
    }
}

/// A server message tied to no exchange, with the point of the conversation it came at.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Standalone {
    /// How many client messages had been sent before it.
    pub point: u64,
    pub msg: usize,
    /// For a server request: the client's recorded answer.
    pub client_answer: Option<usize>,
}

pub struct TapeIndex {
    pub path: PathBuf,
    pub header: Header,
    pub servers: Vec<ServerDecl>,
    /// The server label this index covers.
    pub server: String,
    pub end: Option<End>,
    pub warnings: Vec<Warning>,
    pub msgs: Vec<MsgMeta>,
    pub exchanges: Vec<Exchange>,
    pub standalone: Vec<Standalone>,
    file: File,
}

/// The match key of a request. `initialize` is matched leniently: who the client is and which
/// protocol version it asks for are not drift, so its params take no part.
pub fn match_key(method: &str, params: Option<&Value>) -> (MatchKey, Value) {
    let params = if method == "initialize" {
        Value::Null
    } else {
        match_params(params)
    };
    let text = canonical(&params);
    (crate::wire::canonical::hash_key(method, &text), params)
}

#[derive(serde::Deserialize)]
struct ReqProbe {
    #[serde(default)]
    params: Option<Value>,
}

/// A message's params as a value. Params too deep for a `Value` (over serde_json's nesting limit)
/// stand in as their exact text, so such a request still matches itself byte for byte.
pub fn params_of(message: &[u8]) -> Option<Value> {
    match serde_json::from_slice::<ReqProbe>(message) {
        Ok(p) => p.params,
        Err(_) => {
            let obj: crate::wire::rewrite::RawObject<'_> = serde_json::from_slice(message).ok()?;
            Some(Value::String(format!(
                "(unparsed params) {}",
                obj.get("params")?.get()
            )))
        }
    }
}

/// Which param names what a request is about.
fn target_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        _ => None,
    }
}

/// The tool, prompt or resource a request with these params is about (see `call_target`).
pub fn target_of(method: Option<&str>, params: Option<&Value>) -> Option<String> {
    let key = target_key(method?)?;
    params?.get(key)?.as_str().map(str::to_string)
}

/// A progress token, canonical JSON text: the request's `_meta.progressToken` (`in_meta`), or a
/// progress notification's `progressToken`.
pub fn progress_token(params: Option<&Value>, in_meta: bool) -> Option<String> {
    let p = params?;
    let t = if in_meta {
        p.get("_meta")?.get("progressToken")?
    } else {
        p.get("progressToken")?
    };
    Some(canonical(t))
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
}

impl ChainJob {
    fn run(&self, slot: &mut Option<Report>) {
        let report = slot.take();
        // The tape was just read whole; an error reading it again is not a broken chain.
        let broken = TapeReader::open(&self.path).and_then(TapeReader::check_chain);
        if let (Ok(Some(line)), Some(report)) = (broken, report) {
            report(Warning::ChainBroken { line });
        }
    }
}

impl PendingChain {
    /// Waits for the check to finish (its warning, if any, has then been reported).
    pub fn wait(self) {}
}

impl Drop for PendingChain {
    fn drop(&mut self) {
        let mut slot = self.0.report.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            self.0.run(&mut slot);
        }
    }
}

impl TapeIndex {
    /// Reads the tape and indexes the conversation of `server` (default: the first declared).
    pub fn load(path: &Path, server: Option<&str>) -> Result<TapeIndex, TapeError> {
        Self::load_checking(path, server, true)
    }

    /// Loads a tape this process has just written itself (`check`'s observed recording): its
    /// hash chain cannot have been changed by anyone else, so it is not checked.
    pub fn load_own(path: &Path) -> Result<TapeIndex, TapeError> {
        Self::load_checking(path, None, false)
    }

    /// Like `load`, but the hash chain is checked afterwards on a background thread of the
    /// lowest priority, so a player can answer while it runs; a broken chain is passed to
    /// `report` (as the `ChainBroken` warning `load` would have given) when found. Call
    /// `PendingChain::wait` before exiting so that the report is never lost.
    pub fn load_deferred(
        path: &Path,
        server: Option<&str>,
        report: impl FnOnce(Warning) + Send + 'static,
    ) -> Result<(TapeIndex, PendingChain), TapeError> {
        // A big tape's index is kept in the user's cache between plays (`index_cache.rs`): the
        // chain check below still reads the whole tape, but in the background.
        let index = match super::index_cache::load(path, server) {
            Some(parts) => Self::from_parts(path, parts)?,
            None => {
                let index = Self::load_checking(path, server, false)?;
                super::index_cache::store(&index, server);
                index
            }
        };
        let job = Arc::new(ChainJob {
            path: path.to_path_buf(),
            report: Mutex::new(Some(Box::new(report))),
        });
        let background = job.clone();
        // Without a thread the check is simply left to `PendingChain`'s drop.
        let _ = std::thread::Builder::new()
            .name("chain-check".into())
            .spawn(move || {
                lower_priority();
                let broken = TapeReader::open(&background.path).and_then(TapeReader::check_chain);
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
            server: p.server,
            end: p.end,
            warnings: p.warnings,
            msgs: p.msgs,
            exchanges: p.exchanges,
            standalone: p.standalone,
            file,
        })
    }

    fn load_checking(
        path: &Path,
        server: Option<&str>,
        check_chain: bool,
    ) -> Result<TapeIndex, TapeError> {
        let mut reader = TapeReader::open(path)?;
        if !check_chain {
            reader.skip_chain();
        }
        let header = reader.header().clone();
        let mut servers = Vec::new();
        let mut end = None;
        let mut chosen: Option<String> = server.map(str::to_string);
        let mut b = Builder::default();
        loop {
            let item = match reader.next_scanned()? {
                None => break,
                Some(item) => item,
            };
            let fields = match &item.entry {
                ScannedEntry::Msg(m) => m.clone(),
                ScannedEntry::Entry(Entry::Server(decl)) => {
                    if chosen.is_none() {
                        chosen = Some(decl.server.clone());
                    }
                    servers.push(decl.clone());
                    continue;
                }
                ScannedEntry::Entry(Entry::End(e)) => {
                    end = Some(e.clone());
                    continue;
                }
                ScannedEntry::Entry(Entry::Unknown) => continue,
                ScannedEntry::Entry(Entry::Msg(m)) => {
                    fields_of(item.raw, m).map_err(|message| TapeError::Malformed {
                        path: path.to_path_buf(),
                        line: item.line,
                        message,
                    })?
                }
            };
            let label = chosen.get_or_insert_with(|| fields.server.to_string());
            if fields.server != label.as_str() {
                continue;
            }
            b.add(&item, fields);
        }
        let warnings = reader.warnings().to_vec();
        let server = chosen.unwrap_or_else(|| super::format::DEFAULT_SERVER.to_string());
        let file = File::open(path).map_err(|e| TapeError::Io {
            path: path.to_path_buf(),
            cause: e,
        })?;
        Ok(TapeIndex {
            path: path.to_path_buf(),
            header,
            servers,
            server,
            end,
            warnings,
            msgs: b.msgs,
            exchanges: b.exchanges,
            standalone: b.standalone,
            file,
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

    /// The message as text; only for JSON bodies.
    pub fn read_text(&self, m: &MsgMeta) -> io::Result<String> {
        String::from_utf8(self.read_bytes(m)?).map_err(io::Error::other)
    }

    /// A request's params as they take part in matching.
    pub fn request_match_params(&self, m: &MsgMeta) -> io::Result<Value> {
        let text = self.read_bytes(m)?;
        Ok(match_key(
            m.method.as_deref().unwrap_or_default(),
            params_of(&text).as_ref(),
        )
        .1)
    }

    /// The tool, prompt or resource a request is about (`params.name` or `params.uri`).
    pub fn call_target(&self, req: &MsgMeta) -> Option<String> {
        target_key(req.method.as_deref()?)?;
        let params = params_of(&self.read_bytes(req).ok()?)?;
        target_of(req.method.as_deref(), Some(&params))
    }

    /// A request in a few words for humans: method, target and arguments in short.
    pub fn describe_request(&self, req: &MsgMeta) -> String {
        let method = req.method.as_deref().unwrap_or("?");
        let mut s = method.to_string();
        if let Some(t) = self.call_target(req) {
            s.push(' ');
            s.push_str(&t);
        }
        if let Ok(text) = self.read_bytes(req) {
            let args = params_of(&text).and_then(|p| p.get("arguments").cloned());
            if let Some(args) = args {
                s.push(' ');
                s.push_str(&crate::wire::canonical::short(Some(&args), 60));
            }
        }
        s
    }

    fn read_at(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
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
        sse: m
            .http
            .as_ref()
            .and_then(|h| h.content_type.as_deref())
            .is_some_and(|c| c.starts_with("text/event-stream")),
        stream_of: m
            .http
            .as_ref()
            .filter(|h| m.dir == Dir::S2C && h.stream.as_deref() == Some("post"))
            .and_then(|h| h.request_id)
            .map(|r| r.get()),
    })
}

fn meta_of(item: &Scanned<'_>, m: &MsgFields<'_>) -> MsgMeta {
    // Body slices borrow from the line: their file offset follows from the line's.
    let span = |s: &str| {
        let at = item.offset + (s.as_ptr() as usize - item.raw.as_ptr() as usize) as u64;
        (at, s.len() as u32)
    };
    let body = match m.body {
        BodyText::Json(t) => {
            let (offset, len) = span(t);
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
        sse: m.sse,
        stream_of: m.stream_of.map(str::to_string),
    }
}

#[derive(serde::Deserialize)]
struct RawFields<'a> {
    #[serde(borrow, default)]
    text: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    b64: Option<&'a serde_json::value::RawValue>,
}

#[derive(Default)]
struct Builder {
    msgs: Vec<MsgMeta>,
    exchanges: Vec<Exchange>,
    standalone: Vec<Standalone>,
    c2s_count: u64,
    /// Open exchanges; in opening order, since exchange numbers grow (a set: closing one is
    /// not a scan of all open ones).
    open: BTreeSet<usize>,
    /// Open exchanges by request id; a list, first in first out, because a client may (wrongly)
    /// reuse an id while an earlier request with it is still open.
    open_by_id: HashMap<String, VecDeque<usize>>,
    open_by_token: HashMap<String, usize>,
    /// Server request id → (exchange, or None when standalone; message index).
    server_requests: HashMap<String, (Option<usize>, usize)>,
    /// Exchange → its request's `params.name`, for linking multi-round-trip retries.
    request_names: Vec<Option<Value>>,
}

impl Builder {
    fn add(&mut self, item: &Scanned<'_>, m: MsgFields<'_>) {
        let meta = meta_of(item, &m);
        let json = match m.body {
            BodyText::Json(t) => Some(t),
            _ => None,
        };
        // Only the messages whose params take part in the index are parsed: the client's
        // requests and cancellations, and the server's progress notifications.
        let method_is = |name: &str| m.method.as_deref() == Some(name);
        let needs_params = match (m.dir, m.kind) {
            (Dir::C2S, Kind::Request) => true,
            (Dir::C2S, Kind::Notification) => method_is("notifications/cancelled"),
            (Dir::S2C, Kind::Notification) => method_is("notifications/progress"),
            _ => false,
        };
        let params = json
            .filter(|_| needs_params)
            .and_then(|t| params_of(t.as_bytes()));
        let redacted = m.dir == Dir::C2S
            && m.kind == Kind::Request
            && json.is_some_and(crate::redact::has_marker);
        // Cheap first, exact second: only a candidate answer is parsed.
        let input_required = m.dir == Dir::S2C
            && m.kind == Kind::Response
            && json.is_some_and(|t| {
                t.contains("\"input_required\"")
                    && serde_json::from_str::<Value>(t).is_ok_and(|v| {
                        v.pointer("/result/resultType").and_then(Value::as_str)
                            == Some("input_required")
                    })
            });
        let idx = self.msgs.len();
        // Borrowed from the line: only map keys are allocated.
        let (dir, kind, id, method, stream_of) =
            (m.dir, m.kind, m.id, m.method.as_deref(), m.stream_of);
        self.msgs.push(meta);
        match dir {
            Dir::C2S => {
                match (kind, id) {
                    (Kind::Request, Some(id)) => {
                        let method = method.unwrap_or_default();
                        let (key, _) = match_key(method, params.as_ref());
                        let token = progress_token(params.as_ref(), true);
                        let ex = self.exchanges.len();
                        // A retry carrying `inputResponses` continues the latest exchange of the
                        // same call that asked for input.
                        let retry_of = params
                            .as_ref()
                            .filter(|p| p.get("inputResponses").is_some())
                            .and_then(|p| {
                                let name = p.get("name");
                                (0..ex).rev().find(|&e| {
                                    let prev = &self.exchanges[e];
                                    prev.input_required
                                        && self.msgs[prev.request].method.as_deref() == Some(method)
                                        && self.request_names.get(e).map(|n| n.as_ref())
                                            == Some(name)
                                })
                            });
                        self.request_names
                            .push(params.as_ref().and_then(|p| p.get("name").cloned()));
                        self.exchanges.push(Exchange {
                            request: idx,
                            response: None,
                            during: Vec::new(),
                            client_answers: HashMap::new(),
                            key,
                            progress_token: token.clone(),
                            cancelled: false,
                            redacted,
                            input_required: false,
                            retry_of,
                        });
                        self.open.insert(ex);
                        self.open_by_id
                            .entry(id.to_string())
                            .or_default()
                            .push_back(ex);
                        if let Some(t) = token {
                            self.open_by_token.insert(t, ex);
                        }
                    }
                    (Kind::Response | Kind::Error, Some(id)) => {
                        match self.server_requests.remove(id) {
                            Some((Some(ex), req)) => {
                                self.exchanges[ex].client_answers.insert(req, idx);
                            }
                            Some((None, req)) => {
                                if let Some(s) =
                                    self.standalone.iter_mut().rev().find(|s| s.msg == req)
                                {
                                    s.client_answer = Some(idx);
                                }
                            }
                            None => {}
                        }
                    }
                    (Kind::Notification, _) if method == Some("notifications/cancelled") => {
                        // The client gave up on a request: it stays pairable with a late answer,
                        // but later server messages no longer belong to it.
                        let target = params
                            .as_ref()
                            .and_then(|p| p.get("requestId"))
                            .map(canonical);
                        if let Some(&ex) = target
                            .as_ref()
                            .and_then(|id| self.open_by_id.get(id))
                            .and_then(|q| q.front())
                        {
                            self.exchanges[ex].cancelled = true;
                            self.open.remove(&ex);
                        }
                    }
                    _ => {}
                }
                self.c2s_count += 1;
            }
            Dir::S2C => match (kind, id) {
                (Kind::Response | Kind::Error, Some(id))
                    if self.open_by_id.get(id).is_some_and(|q| !q.is_empty()) =>
                {
                    let queue = self.open_by_id.get_mut(id).expect("checked");
                    let ex = queue.pop_front().expect("checked");
                    if queue.is_empty() {
                        self.open_by_id.remove(id);
                    }
                    self.exchanges[ex].response = Some(idx);
                    self.exchanges[ex].input_required = input_required;
                    self.open.remove(&ex);
                    if let Some(t) = self.exchanges[ex].progress_token.clone() {
                        if self.open_by_token.get(&t) == Some(&ex) {
                            self.open_by_token.remove(&t);
                        }
                    }
                }
                (k, id) => {
                    // Over HTTP the stream says whose message it is; then the progress token; then
                    // the request most recently opened.
                    let by_stream = stream_of
                        .and_then(|rid| self.open_by_id.get(rid).and_then(|q| q.front().copied()));
                    let by_token = if by_stream.is_some() {
                        by_stream
                    } else if method == Some("notifications/progress") {
                        progress_token(params.as_ref(), false)
                            .and_then(|t| self.open_by_token.get(&t).copied())
                    } else {
                        None
                    };
                    let ex = by_token.or_else(|| self.open.last().copied());
                    match ex {
                        Some(ex) => self.exchanges[ex].during.push(idx),
                        None => self.standalone.push(Standalone {
                            point: self.c2s_count,
                            msg: idx,
                            client_answer: None,
                        }),
                    }
                    if let (Kind::Request, Some(id)) = (k, id) {
                        self.server_requests.insert(id.to_string(), (ex, idx));
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::chain;

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
                if let Some(fast) = fast {
                    let slow = slow(line.as_bytes());
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

    #[test]
    fn a_malformed_body_is_still_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let bad = RESP.replace(r#""result":{"#, r#""result":{,"#);
        chained_tape(&path, &[SERVER, REQ, &bad, REQ]);
        let err = TapeIndex::load(&path, None).err().expect("malformed");
        assert!(matches!(err, TapeError::Malformed { line: 4, .. }), "{err}");
    }
}
