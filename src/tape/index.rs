//! The exchange index of one server's conversation on a tape: requests paired with their
//! responses, what the server sent while each was open, and the messages tied to no exchange.
//! It holds offsets into the tape file and match hashes, never copies of message bodies.

use super::format::{End, Header, MsgLine, ServerDecl};
use super::reader::{Entry, Item, TapeError, TapeReader, Warning};
use crate::wire::canonical::{canonical, match_params};
use crate::wire::{Dir, Kind};
use base64::Engine as _;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where a message's body lies in the tape file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone)]
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

#[derive(Debug, Clone)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatchKey(u64, u64);

/// A server message tied to no exchange, with the point of the conversation it came at.
#[derive(Debug, Clone)]
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
    let half = |seed: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        method.hash(&mut h);
        text.hash(&mut h);
        h.finish()
    };
    (MatchKey(half(1), half(2)), params)
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

impl TapeIndex {
    /// Reads the tape and indexes the conversation of `server` (default: the first declared).
    pub fn load(path: &Path, server: Option<&str>) -> Result<TapeIndex, TapeError> {
        let mut reader = TapeReader::open(path)?;
        let header = reader.header().clone();
        let mut servers = Vec::new();
        let mut end = None;
        let mut chosen: Option<String> = server.map(str::to_string);
        let mut b = Builder::default();
        loop {
            let item = match reader.next_item()? {
                None => break,
                Some(item) => item,
            };
            match &item.entry {
                Entry::Server(decl) => {
                    if chosen.is_none() {
                        chosen = Some(decl.server.clone());
                    }
                    servers.push(decl.clone());
                }
                Entry::End(e) => end = Some(e.clone()),
                Entry::Unknown => {}
                Entry::Msg(m) => {
                    let label = chosen.get_or_insert_with(|| m.server.to_string());
                    if m.server != label.as_str() {
                        continue;
                    }
                    let (meta, params) =
                        meta_of(&item, m).map_err(|message| TapeError::Malformed {
                            path: path.to_path_buf(),
                            line: item.line,
                            message,
                        })?;
                    let redacted = m
                        .msg
                        .is_some_and(|raw| crate::redact::has_marker(raw.get()));
                    // Cheap first, exact second: only a candidate answer is parsed.
                    let input_required = m.kind == Kind::Response
                        && m.msg.is_some_and(|raw| {
                            raw.get().contains("\"input_required\"")
                                && serde_json::from_str::<Value>(raw.get()).is_ok_and(|v| {
                                    v.pointer("/result/resultType").and_then(Value::as_str)
                                        == Some("input_required")
                                })
                        });
                    b.add(meta, params, redacted, input_required);
                }
            }
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
        let key = match req.method.as_deref()? {
            "tools/call" | "prompts/get" => "name",
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
            _ => return None,
        };
        let params = params_of(&self.read_bytes(req).ok()?)?;
        params.get(key)?.as_str().map(str::to_string)
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

fn meta_of(item: &Item<'_>, m: &MsgLine<'_>) -> Result<(MsgMeta, Option<Value>), String> {
    let span = |s: &str| (item.offset_of(s), s.len() as u32);
    let body = if let Some(raw) = m.msg {
        let (offset, len) = span(raw.get());
        Body::Json { offset, len }
    } else if m.kind == Kind::Oversize {
        Body::Oversize {
            len: m.len.unwrap_or(0),
        }
    } else if m.text.is_some() || m.b64.is_some() {
        // Locate the string literal itself: re-scan the line for the field's raw value.
        let raw: RawFields<'_> = serde_json::from_slice(item.raw).map_err(|e| e.to_string())?;
        match (raw.text, raw.b64) {
            (Some(t), _) => {
                let (offset, len) = span(t.get());
                Body::Text { offset, len }
            }
            (None, Some(b)) => {
                let (offset, len) = span(b.get());
                Body::B64 { offset, len }
            }
            _ => return Err("message line has neither msg, text nor b64".into()),
        }
    } else {
        return Err(format!("{} message has no body (msg, text or b64)", m.kind));
    };
    let params = match (m.dir, m.kind, m.msg) {
        (_, Kind::Request | Kind::Notification, Some(raw)) => params_of(raw.get().as_bytes()),
        _ => None,
    };
    let meta = MsgMeta {
        seq: m.seq,
        t_us: m.t_us,
        line: item.line,
        dir: m.dir,
        kind: m.kind,
        id: m.id.map(|r| r.get().to_string()),
        method: m.method.as_ref().map(|s| s.to_string()),
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
            .map(|r| r.get().to_string()),
    };
    Ok((meta, params))
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
    /// Open exchanges in opening order.
    open: Vec<usize>,
    /// Open exchanges by request id; a list, first in first out, because a client may (wrongly)
    /// reuse an id while an earlier request with it is still open.
    open_by_id: HashMap<String, VecDeque<usize>>,
    open_by_token: HashMap<String, usize>,
    /// Server request id → (exchange, or None when standalone; message index).
    server_requests: HashMap<String, (Option<usize>, usize)>,
    /// Exchange → its request's `params.name`, for linking multi-round-trip retries.
    request_names: HashMap<usize, Option<Value>>,
}

impl Builder {
    fn add(&mut self, meta: MsgMeta, params: Option<Value>, redacted: bool, input_required: bool) {
        let idx = self.msgs.len();
        let (dir, kind, id, method) = (meta.dir, meta.kind, meta.id.clone(), meta.method.clone());
        let stream_of = meta.stream_of.clone();
        self.msgs.push(meta);
        match dir {
            Dir::C2S => {
                match (kind, id) {
                    (Kind::Request, Some(id)) => {
                        let method = method.unwrap_or_default();
                        let (key, _) = match_key(&method, params.as_ref());
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
                                        && self.msgs[prev.request].method.as_deref()
                                            == Some(method.as_str())
                                        && self.request_names.get(&e).map(|n| n.as_ref())
                                            == Some(name)
                                })
                            });
                        self.request_names
                            .insert(ex, params.as_ref().and_then(|p| p.get("name").cloned()));
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
                        self.open.push(ex);
                        self.open_by_id.entry(id).or_default().push_back(ex);
                        if let Some(t) = token {
                            self.open_by_token.insert(t, ex);
                        }
                    }
                    (Kind::Response | Kind::Error, Some(id)) => {
                        match self.server_requests.remove(&id) {
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
                    (Kind::Notification, _)
                        if method.as_deref() == Some("notifications/cancelled") =>
                    {
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
                            self.open.retain(|&e| e != ex);
                        }
                    }
                    _ => {}
                }
                self.c2s_count += 1;
            }
            Dir::S2C => match (kind, id) {
                (Kind::Response | Kind::Error, Some(id))
                    if self.open_by_id.get(&id).is_some_and(|q| !q.is_empty()) =>
                {
                    let queue = self.open_by_id.get_mut(&id).expect("checked");
                    let ex = queue.pop_front().expect("checked");
                    if queue.is_empty() {
                        self.open_by_id.remove(&id);
                    }
                    self.exchanges[ex].response = Some(idx);
                    self.exchanges[ex].input_required = input_required;
                    self.open.retain(|&e| e != ex);
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
                        .and_then(|rid| self.open_by_id.get(&rid).and_then(|q| q.front().copied()));
                    let by_token = if by_stream.is_some() {
                        by_stream
                    } else if method.as_deref() == Some("notifications/progress") {
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
                        self.server_requests.insert(id, (ex, idx));
                    }
                }
            },
        }
    }
}
