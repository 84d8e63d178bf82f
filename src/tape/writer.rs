//! The streaming tape writer. Every message is handed to the kernel (`write(2)`, no user-space
//! buffer left behind) before the proxy forwards it, so a crash or SIGKILL of mcptape loses
//! nothing that was forwarded. There is no whole-session buffering: memory is one line.
//!
//! Before a message is written, the redactor takes out secrets (on by default). Every line after
//! the header carries `h`, a SHA-256 chained to the line before; the closing line carries the
//! head of the chain and, with a signing key, an HMAC of it.

use super::chain;
use super::format::{End, ExitInfo, Header, OwnedLine, ServerDecl, FORMAT_NAME, MINOR, VERSION};
use super::place::Placed;
use super::sink::TapeFile;
use crate::redact::Redactor;
use crate::wire::json_out::push_str;
use crate::wire::{classify, json_scan, Dir, Frame, Kind};
use base64::Engine as _;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

/// A closed tape: its closing line, and where the recording is.
#[derive(Debug)]
pub struct Finished {
    /// The closing line as written.
    pub end: End,
    /// At its path, in place of the tape that was there, or beside it.
    pub placed: Placed,
}

/// The message lines counted in the closing line's `raw` (those that are no JSON-RPC message),
/// by kind: for a summary that names each for what it is. Not on the tape, which has the kind
/// of every line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawKinds {
    /// Not JSON, or not UTF-8 (`not_json`): a banner a server prints on stdout.
    pub not_json: u64,
    /// JSON that is no JSON-RPC message (`invalid`): a number, `null`, an object without
    /// `method`, `result` or `error`.
    pub invalid: u64,
    /// Longer than the recorder's `--max-message` (`oversize`): forwarded whole, taped as its
    /// length and first bytes, JSON or not.
    pub oversize: u64,
}

/// Buffer capacity kept between messages; anything larger is released after use.
const KEEP_CAPACITY: usize = 1024 * 1024;

/// Writes one tape: the header on `create`, then server declarations, messages and events,
/// each line chained to the one before, and the closing line on `finish`. Over a tape that is
/// there already, the recording is written beside it and replaces it only if it holds a session
/// (`super::place`).
pub struct TapeWriter {
    file: TapeFile,
    /// The tape asked for.
    path: PathBuf,
    /// Set when a tape was there already: this recording is written beside it (`TAPE.new`)
    /// and replaces it on `finish` only if it holds a session (see `super::place`).
    beside: Option<super::place::Beside>,
    /// The file written: `path`, or `TAPE.new`.
    file_path: PathBuf,
    start: Instant,
    seq: u64,
    pending: Vec<u8>,
    counts: End,
    /// `counts.raw`, by kind.
    raw_kinds: RawKinds,
    /// Which requests are still waiting for an answer: for `counts.exchanges`.
    pairing: super::open_ids::Exchanges,
    /// The first write error; once set, the tape is marked incomplete and writing stops.
    failed: Option<io::Error>,
    /// Bytes of complete lines written so far.
    good_len: u64,
    /// Model calls that got an answer (`part: "response"`): a session, as an exchange is.
    model_answers: u64,
    /// Exchanges and answered model calls on the file as of the last whole write: whether the
    /// recording holds a session.
    sessions_written: u64,
    dropped: u64,
    redactor: Option<std::sync::Arc<Redactor>>,
    /// The markers of HTTP facts already seen (the session id), so each is computed once.
    facts_cache: crate::redact::FactsCache,
    /// Tests: every message's facts walked, to hold the cached and direct paths to that.
    #[cfg(test)]
    pub(crate) facts_uncached: bool,
    signing_key: Option<Vec<u8>>,
    /// The chain's head: hex SHA-256 of the last line.
    head: String,
    /// The chain's head at the last line that reached the file: after a failed write the
    /// closing line chains to it, not to the lines that were lost.
    written_head: String,
    /// The end of a line whose body is written straight from the caller's buffer.
    tail: Vec<u8>,
    /// A write error from a message written out at once (a big one), for the next `commit`.
    unreported: Option<io::Error>,
    /// Microseconds from the tape's start to this writer's `start` (an appended tape began
    /// before this process did): added to every `t_us`.
    t_base_us: u64,
    /// Set when adding to a tape that was closed already (`super::append`).
    appending: Option<Appending>,
    /// The closing line's time when it is known from elsewhere ([`TapeWriter::finish_at`]);
    /// `None`: when it is written.
    closes_at: Option<Instant>,
}

/// Adding to a tape that is there: every line is marked `appended`, and the tape is closed
/// again after every write, so that it is a whole, verifiable tape between writes.
pub(super) struct Appending {
    /// Where the closing line written after the last write starts: cut off before the next.
    pub(super) end_at: Option<u64>,
    /// The tape's own closing line, as it was: its exit and reason are kept.
    pub(super) old: End,
    /// How the recording appended to had stopped short, for the `append` event's `cut`.
    pub(super) cut: Option<serde_json::Value>,
}

/// Where an appended tape stands: what `super::append` read from it.
pub(super) struct Resume {
    /// The tape file, open for writing at the end of its last whole line (closing line cut).
    pub(super) file: File,
    /// The last `seq` on the tape.
    pub(super) seq: u64,
    /// The chain's head: `h` of the last line kept.
    pub(super) head: String,
    /// The counts so far, to which the appended lines are added.
    pub(super) counts: End,
    /// Bytes kept.
    pub(super) len: u64,
    /// Microseconds from the tape's start to now.
    pub(super) t_base_us: u64,
}

/// A message body at least this large is not copied into `pending`: the line is written with
/// `writev` as (pending + line head, body, line end), hashed in those parts. This saves two
/// copies of a large message and keeps memory at about one copy of it.
const BIG_BODY: usize = 64 * 1024;

/// HTTP facts that readers pair and classify messages by: protocol, left alone by the
/// redactor (the rest — session ids, event ids, `Mcp-Param-*` values, error bodies — is not).
pub(crate) const FACTS_KEPT: &[&str] = &[
    "method",
    "path",
    "status",
    "content_type",
    "accept",
    "stream",
    "request_id",
    "mcp_protocol_version",
    "mcp_method",
    "event",
    "retry",
    "post",
    "allow",
    "content_encoding",
];

/// HTTP facts that are credentials whatever they look like: the session id, asked for and
/// given. Equal ids get equal markers, so messages still pair by session.
pub(crate) const FACTS_SECRET: &[&str] = &["mcp_session_id", "session"];

/// A message's HTTP facts (raw JSON) as the writer tapes them: `None` when nothing changes.
pub fn redact_http_facts(
    r: &Redactor,
    facts: &[u8],
) -> Option<(Vec<u8>, Vec<crate::redact::Finding>)> {
    r.redact_facts(facts, FACTS_KEPT, FACTS_SECRET)
}

/// An event line's own fields.
const EVENT_FIELDS: &[&str] = &["type", "t_us", "server", "what", "h"];

/// An event line (raw JSON) as the writer tapes it: its own fields and the HTTP facts readers
/// use kept, session ids always out, the rest by the rules. `None` when nothing changes.
pub(crate) fn redact_event(
    r: &Redactor,
    line: &[u8],
) -> Option<(Vec<u8>, Vec<crate::redact::Finding>)> {
    let kept: Vec<&str> = EVENT_FIELDS.iter().chain(FACTS_KEPT).copied().collect();
    r.redact_facts(line, &kept, FACTS_SECRET)
}

/// The facts of a model line ([`TapeWriter::model`]): written after the line's head, each as
/// `,"name":value`, in their order.
pub trait ModelFacts {
    /// Appends `,"name":value` for each fact.
    fn push_facts(&self, p: &mut Vec<u8>);
}

impl ModelFacts for serde_json::Map<String, serde_json::Value> {
    fn push_facts(&self, p: &mut Vec<u8>) {
        for (k, v) in self {
            p.push(b',');
            push_str(p, k);
            p.push(b':');
            serde_json::to_writer(&mut *p, v).expect("a Value serializes");
        }
    }
}

/// A message line's transport facts (`"http":{…}`): a JSON object, or a type that can also
/// write itself as one for less than building the object would cost.
pub trait LineFacts {
    /// The facts as a JSON object.
    fn to_value(&self) -> std::borrow::Cow<'_, serde_json::Value>;

    /// Appends the object `finish_line` would write for `to_value()` (redacted by `redactor`
    /// as [`redact_http_facts`] would), and returns true; or appends nothing and returns false,
    /// for the caller to take the general path.
    fn write_direct(
        &self,
        _redactor: Option<&Redactor>,
        _cache: &mut crate::redact::FactsCache,
        _out: &mut Vec<u8>,
    ) -> bool {
        false
    }
}

impl LineFacts for serde_json::Value {
    fn to_value(&self) -> std::borrow::Cow<'_, serde_json::Value> {
        std::borrow::Cow::Borrowed(self)
    }

    /// Unredacted, the object as it is; redacted, the facts cache's path when every fact fits.
    fn write_direct(
        &self,
        redactor: Option<&Redactor>,
        cache: &mut crate::redact::FactsCache,
        out: &mut Vec<u8>,
    ) -> bool {
        match redactor {
            None => {
                serde_json::to_writer(&mut *out, self).expect("a Value serializes");
                true
            }
            Some(r) => r.write_facts_cached(self, FACTS_KEPT, FACTS_SECRET, cache, out),
        }
    }
}

/// How a tape is written.
#[derive(Clone, Default)]
pub struct WriteOptions {
    /// Secrets out before anything is written (`None`: redaction off).
    pub redactor: Option<std::sync::Arc<Redactor>>,
    /// Sign the chain's head with HMAC-SHA256.
    pub signing_key: Option<Vec<u8>>,
}

impl WriteOptions {
    /// The built-in redaction rules, no signature.
    pub fn redacted() -> WriteOptions {
        WriteOptions {
            redactor: Some(std::sync::Arc::new(
                Redactor::new(&crate::redact::RedactConfig::defaults())
                    .expect("the built-in rules compile"),
            )),
            signing_key: None,
        }
    }
}

impl std::fmt::Debug for WriteOptions {
    /// No key bytes in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteOptions")
            .field("redacted", &self.redactor.is_some())
            .field("signed", &self.signing_key.is_some())
            .finish()
    }
}

impl TapeWriter {
    /// Creates the tape, owner-only, and writes the header line: at `path`, or beside the tape
    /// already there (`TAPE.new`, see `super::place`).
    pub fn create(path: &Path, opts: WriteOptions) -> io::Result<TapeWriter> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            super::store::create_private_dir(dir)?;
        }
        let (file, beside) = super::place::open(path)?;
        let file_path = match &beside {
            Some(b) => b.staging().to_path_buf(),
            None => path.to_path_buf(),
        };
        let mut w = TapeWriter::blank(TapeFile::new(file, 0), path, file_path, opts);
        w.beside = beside;
        let header = Header {
            format: FORMAT_NAME.into(),
            version: VERSION,
            minor: MINOR,
            created: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            tool: format!("mcptape {}", env!("CARGO_PKG_VERSION")),
            marker_key: w
                .redactor
                .as_ref()
                .and_then(|r| r.marker_key_id())
                .map(str::to_string),
        };
        serde_json::to_writer(&mut w.pending, &OwnedLine::Header(&header))
            .expect("tape records serialize");
        w.head = chain::start(&w.pending);
        w.pending.push(b'\n');
        w.commit()?;
        Ok(w)
    }

    fn blank(file: TapeFile, path: &Path, file_path: PathBuf, opts: WriteOptions) -> TapeWriter {
        TapeWriter {
            file,
            path: path.to_path_buf(),
            beside: None,
            file_path,
            start: Instant::now(),
            seq: 0,
            pending: Vec::with_capacity(64 * 1024),
            counts: End::default(),
            raw_kinds: RawKinds::default(),
            pairing: Default::default(),
            failed: None,
            good_len: 0,
            model_answers: 0,
            sessions_written: 0,
            dropped: 0,
            redactor: opts.redactor,
            facts_cache: Default::default(),
            #[cfg(test)]
            facts_uncached: false,
            signing_key: opts.signing_key,
            head: String::new(),
            written_head: String::new(),
            tail: Vec::new(),
            unreported: None,
            t_base_us: 0,
            appending: None,
            closes_at: None,
        }
    }

    /// A writer that adds to the tape `super::append` read (`r`), closed again at once: its
    /// lines are marked `appended`, chained to the last line kept.
    pub(super) fn resume(
        path: &Path,
        r: Resume,
        old: End,
        cut: Option<serde_json::Value>,
        opts: WriteOptions,
    ) -> io::Result<Self> {
        let mut file = TapeFile::new(r.file, r.len);
        // Cut back after every write: padding would have to be written again each time.
        file.unmapped();
        let mut w = TapeWriter::blank(file, path, path.to_path_buf(), opts);
        w.seq = r.seq;
        w.head.clone_from(&r.head);
        w.written_head = r.head;
        w.counts = r.counts;
        w.good_len = r.len;
        w.t_base_us = r.t_base_us;
        w.appending = Some(Appending {
            end_at: None,
            old,
            cut,
        });
        w.reclose()?;
        Ok(w)
    }

    /// When this writer appends to a tape whose recording had stopped short (no closing line,
    /// a torn last line, a closing line marked incomplete): where and how, for the `cut` of the
    /// `append` event the caller writes first (docs/tape-format.md).
    pub fn append_cut(&self) -> Option<&serde_json::Value> {
        self.appending.as_ref().and_then(|a| a.cut.as_ref())
    }

    /// The tape's path, as asked for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file being written: the tape's path, or `TAPE.new` beside the tape already there.
    pub fn writing(&self) -> &Path {
        &self.file_path
    }

    /// The moment `t_us` microseconds after the tape started: for messages whose time is known
    /// from elsewhere (`mcptape import` keeps another recorder's timing).
    pub fn at_offset(&self, t_us: u64) -> Instant {
        self.start + std::time::Duration::from_micros(t_us)
    }

    /// Microseconds since the tape started.
    pub(crate) fn elapsed_us(&self, at: Instant) -> u64 {
        self.t_base_us + at.saturating_duration_since(self.start).as_micros() as u64
    }

    /// Declares a server. Its command line and URL go through the redactor like everything
    /// else on the tape (`--api-key sk-…`, `https://user:pass@host/?token=…`).
    pub fn declare_server(&mut self, decl: ServerDecl) -> io::Result<()> {
        self.declare_server_at(decl, Instant::now())
    }

    /// [`TapeWriter::declare_server`] at `at` (see [`TapeWriter::at_offset`]): for a server
    /// whose time is known from elsewhere (`mcptape import`: the recording's start).
    pub fn declare_server_at(&mut self, mut decl: ServerDecl, at: Instant) -> io::Result<()> {
        decl.t_us = self.elapsed_us(at);
        if let Some(r) = &self.redactor {
            decl.command = decl.command.map(|argv| r.redact_argv(&argv));
            decl.url = decl.url.map(|u| r.redact_url(&u));
        }
        self.push_record(&OwnedLine::Server(&decl));
        self.commit()
    }

    /// Appends one framed message to the pending buffer (call `commit` to write it out).
    pub fn message(&mut self, server: &str, dir: Dir, frame: &Frame<'_>, at: Instant) {
        self.message_with(server, dir, frame, at, None);
    }

    /// The same, with transport facts (`"http":{…}`) recorded beside the message.
    pub fn message_with(
        &mut self,
        server: &str,
        dir: Dir,
        frame: &Frame<'_>,
        at: Instant,
        facts: Option<&dyn LineFacts>,
    ) {
        self.message_known(server, dir, frame, at, facts, None);
    }

    /// [`TapeWriter::message_with`], given the line's classification when the caller has made
    /// it already (`record --url` reads a request's id for its facts): it must be what
    /// `classify_ref` gives for the frame's line.
    pub(crate) fn message_known<'a>(
        &mut self,
        server: &str,
        dir: Dir,
        frame: &Frame<'a>,
        at: Instant,
        facts: Option<&dyn LineFacts>,
        known: Option<classify::ClassifiedRef<'a>>,
    ) {
        self.seq += 1;
        let t_us = self.elapsed_us(at);
        self.counts.messages += 1;
        match dir {
            Dir::C2S => self.counts.c2s += 1,
            Dir::S2C => self.counts.s2c += 1,
        }
        // The line is built in place at the end of `pending` (no separate line buffer to copy).
        let start = self.pending.len();
        let mut p = std::mem::take(&mut self.pending);
        push_msg_head(&mut p, self.seq, t_us, server, dir);
        let redactor = self.redactor.as_deref();
        // A large body stays where it is (the framer's buffer, or the redacted copy).
        let big = match frame {
            Frame::Oversize { len, head } => {
                self.counts.raw += 1;
                self.raw_kinds.oversize += 1;
                let taped = push_oversize(&mut p, redactor, *len, head);
                // Readers pair an answer too large to keep by the id in its head as taped:
                // counted here as they pair it, not when its id is past the head.
                let facts = crate::wire::head_facts(&taped);
                if let Some(id) = facts.answer_id() {
                    self.counts.exchanges += u64::from(self.pairing.answer(dir, id));
                }
                None
            }
            Frame::Line(line) => {
                let c = match known {
                    Some(c) => {
                        debug_assert_eq!(c, classify::classify_ref(line.bytes));
                        c
                    }
                    None => classify::classify_ref(line.bytes),
                };
                push_line_facts(&mut p, &c, line);
                let big = if c.kind.is_json() {
                    if c.kind == Kind::Invalid {
                        self.counts.raw += 1;
                        self.raw_kinds.invalid += 1;
                    }
                    push_json_body(&mut p, redactor, line.bytes)
                } else {
                    self.counts.raw += 1;
                    self.raw_kinds.not_json += 1;
                    push_text_body(&mut p, redactor, line.bytes);
                    None
                };
                self.counts.exchanges += u64::from(self.pairing.message(dir, c.kind, c.id));
                big
            }
        };
        self.pending = p;
        self.finish_line(start, big, facts);
    }

    /// Ends the line begun at `pending[start..]`: the transport facts, the closing brace, the
    /// hash; then seals it, or writes it around a large body that was never copied.
    fn finish_line(
        &mut self,
        start: usize,
        big: Option<std::borrow::Cow<'_, [u8]>>,
        facts: Option<&dyn LineFacts>,
    ) {
        let mut tail = std::mem::take(&mut self.tail);
        tail.clear();
        let appended = self.appending.is_some();
        let end = if big.is_some() {
            &mut tail
        } else {
            &mut self.pending
        };
        if let Some(facts) = facts {
            end.extend_from_slice(b",\"http\":");
            #[cfg(test)]
            let may_cache = !self.facts_uncached;
            #[cfg(not(test))]
            let may_cache = true;
            let direct = may_cache
                && facts.write_direct(self.redactor.as_deref(), &mut self.facts_cache, end);
            if !direct {
                let raw = serde_json::to_vec(&*facts.to_value()).expect("a Value serializes");
                // Session ids, event ids, `Mcp-Param-*` values and error bodies can be
                // credentials; what readers pair messages by is protocol and stays.
                match self
                    .redactor
                    .as_ref()
                    .and_then(|r| redact_http_facts(r, &raw))
                {
                    Some((out, _)) => end.extend_from_slice(&out),
                    None => end.extend_from_slice(&raw),
                }
            }
        }
        if appended {
            end.extend_from_slice(b",\"appended\":true");
        }
        end.push(b'}');
        match big {
            None => self.seal_pending(start),
            Some(body) => {
                chain::advance(&mut self.head, &[&self.pending[start..], &body, &tail]);
                tail.pop();
                push_h(&mut tail, &self.head);
                if let Err(e) = self.write_out(&[&body, &tail]) {
                    self.unreported.get_or_insert(e);
                }
            }
        }
        self.tail = tail;
    }

    /// Chains the complete line at `pending[start..]` (`{…}`, no newline) and gives it its `h`.
    fn seal_pending(&mut self, start: usize) {
        chain::advance(&mut self.head, &[&self.pending[start..]]);
        self.pending.pop(); // the closing brace
        push_h(&mut self.pending, &self.head);
    }

    /// Appends a transport event line (`{"type":"event","what":…}`): an HTTP stream opened, a
    /// session deleted, the upstream unreachable. Readers that do not know it skip it.
    pub fn event(&mut self, server: &str, what: &str, details: serde_json::Value, at: Instant) {
        // Built by hand so that `type` comes first, as on every line.
        let t_us = self.elapsed_us(at);
        let mut line = format!("{{\"type\":\"event\",\"t_us\":{t_us},\"server\":").into_bytes();
        push_str(&mut line, server);
        line.extend_from_slice(b",\"what\":");
        push_str(&mut line, what);
        if let serde_json::Value::Object(d) = details {
            for (k, v) in d {
                line.push(b',');
                push_str(&mut line, &k);
                line.push(b':');
                serde_json::to_writer(&mut line, &v).expect("a Value serializes");
            }
        }
        line.push(b'}');
        // An upstream's error text or a URL in an event is tape content like any other; the
        // HTTP facts an event carries are redacted as a message's are (session ids always).
        if let Some((out, _)) = self.redactor.as_ref().and_then(|r| redact_event(r, &line)) {
            line = out;
        }
        let start = self.pending.len();
        self.pending.extend_from_slice(&line);
        self.seal_pending(start);
    }

    /// Appends a model API line (`{"type":"model",…}`): one part of one model call (its request,
    /// the answer's head, one stream event, its end). `facts` are written after the head, in
    /// their order; `body` is the request or answer body, or the event's data: JSON bodies go in
    /// `msg` verbatim, anything else in `text` (or `b64`), each through the redactor as a
    /// message's body is; `http` (method, path, status, content type) as a message's HTTP facts
    /// are. Counted as a message; never as an exchange of an MCP server.
    #[allow(clippy::too_many_arguments)]
    pub fn model(
        &mut self,
        server: &str,
        dir: Dir,
        call: u64,
        part: &str,
        facts: &(impl ModelFacts + ?Sized),
        body: Option<&[u8]>,
        http: Option<&serde_json::Value>,
        at: Instant,
    ) {
        self.seq += 1;
        let t_us = self.elapsed_us(at);
        self.counts.messages += 1;
        match dir {
            Dir::C2S => self.counts.c2s += 1,
            Dir::S2C => self.counts.s2c += 1,
        }
        if dir == Dir::S2C && part == "response" {
            self.model_answers += 1;
        }
        let start = self.pending.len();
        let mut p = std::mem::take(&mut self.pending);
        let mut num = itoa::Buffer::new();
        p.extend_from_slice(b"{\"type\":\"model\",\"seq\":");
        p.extend_from_slice(num.format(self.seq).as_bytes());
        p.extend_from_slice(b",\"t_us\":");
        p.extend_from_slice(num.format(t_us).as_bytes());
        p.extend_from_slice(b",\"server\":");
        push_str(&mut p, server);
        p.extend_from_slice(b",\"dir\":\"");
        p.extend_from_slice(dir.as_str().as_bytes());
        p.extend_from_slice(b"\",\"call\":");
        p.extend_from_slice(num.format(call).as_bytes());
        p.extend_from_slice(b",\"part\":");
        push_str(&mut p, part);
        facts.push_facts(&mut p);
        let redactor = self.redactor.as_deref();
        // A pretty-printed JSON body (OpenAI's) holds line breaks only between tokens: on a
        // tape line they become spaces, the one change a body may see.
        // Validated once: a line break in valid JSON is whitespace between tokens, so the
        // flattened body is valid too (and most bodies have none: no copy then).
        let flat: std::borrow::Cow<'_, [u8]>;
        let (body, json) = match body {
            Some(b) if is_json(b) => {
                flat = crate::wire::codec::one_line(b.trim_ascii());
                (Some(&flat[..]), true)
            }
            other => (other, false),
        };
        let big = match body {
            Some(b) if !b.is_empty() && json => push_json_body(&mut p, redactor, b),
            // An empty body is kept as one (`"text":""`): an event's empty `data:` is not the
            // same as no data field, which a client would not dispatch at all.
            Some(b) => {
                push_text_body(&mut p, redactor, b);
                None
            }
            None => None,
        };
        self.pending = p;
        self.finish_line(start, big, http.map(|h| h as &dyn LineFacts));
    }

    /// Writes everything pending in one `write(2)`. After a failure the tape is marked
    /// incomplete: the proxy keeps forwarding (the session matters more than the tape), the loss
    /// is counted and reported loudly at the end.
    pub fn commit(&mut self) -> io::Result<()> {
        self.commit_lines()?;
        match &self.appending {
            // Appending: closed again after every write that cut the closing line off.
            Some(a) if a.end_at.is_none() && self.failed.is_none() => self.reclose(),
            _ => Ok(()),
        }
    }

    fn commit_lines(&mut self) -> io::Result<()> {
        if let Some(e) = self.unreported.take() {
            self.write_out(&[])?;
            return Err(e);
        }
        self.write_out(&[])
    }

    /// Appending: writes a closing line after the lines written so far, and remembers where
    /// it starts, so that the next write replaces it. Killed between writes, the tape is
    /// closed and verifies; killed mid-write, it verifies up to its last whole line.
    fn reclose(&mut self) -> io::Result<()> {
        let (head, written) = (self.head.clone(), self.written_head.clone());
        let at = self.good_len;
        let end = self.closing_line(None, None);
        self.push_record(&OwnedLine::End(&end));
        let result = self.write_out(&[]);
        // The next line chains to the last message, not to this closing line.
        self.head = head;
        self.written_head = written;
        if result.is_ok() {
            if let Some(a) = &mut self.appending {
                a.end_at = Some(at);
            }
        }
        result
    }

    /// The closing line for the lines so far (`head` is the last line's `h`). An appended
    /// tape keeps its recording's exit and reason, and says what was added.
    fn closing_line(&self, exit: Option<ExitInfo>, reason: Option<String>) -> End {
        let mut end = self.counts.clone();
        end.t_us = self.elapsed_us(self.closes_at.unwrap_or_else(Instant::now));
        end.exit = exit;
        end.reason = reason;
        if let Some(a) = &self.appending {
            end.exit = end.exit.or(a.old.exit.clone());
            end.reason = match (&a.old.reason, end.reason) {
                (Some(old), Some(new)) => Some(format!("{old}; then {new}")),
                (old, new) => new.or(old.clone()),
            };
        }
        end.incomplete =
            self.failed.is_some() || self.appending.as_ref().is_some_and(|a| a.old.incomplete);
        end.head = Some(self.head.clone());
        end.sig = None;
        end.sig = self
            .signing_key
            .as_deref()
            .map(|k| chain::sign(k, &self.head, &end));
        end
    }

    /// Writes `pending` and then `more` (the rest of a line whose big body was not copied) in
    /// one `writev(2)`. When the write fails part way (a full disk takes what fits), the whole
    /// lines that reached the file stay and the torn rest is cut off at once: the tape ends on a
    /// complete line, chained, whatever happens next.
    fn write_out(&mut self, more: &[&[u8]]) -> io::Result<()> {
        if self.pending.is_empty() && more.iter().all(|m| m.is_empty()) {
            return Ok(());
        }
        let lines = |pending: &[u8]| {
            pending.iter().filter(|&&b| b == b'\n').count() as u64
                + more
                    .iter()
                    .map(|m| memchr::memchr_iter(b'\n', m).count() as u64)
                    .sum::<u64>()
        };
        if self.failed.is_some() {
            self.dropped += lines(&self.pending);
            self.pending.clear();
            return Ok(());
        }
        if let Some(at) = self.appending.as_mut().and_then(|a| a.end_at.take()) {
            // The closing line written after the last write goes: these lines come after.
            self.good_len = at;
            if let Err(e) = self.file.cut(at) {
                self.failed = Some(io::Error::new(e.kind(), e.to_string()));
                return Err(e);
            }
        }
        // `pending`, then at most a big body and the rest of its line: slices on the stack.
        let mut slots = [io::IoSlice::new(&[]); 3];
        assert!(
            more.len() < slots.len(),
            "a line is written in at most three parts"
        );
        slots[0] = io::IoSlice::new(&self.pending);
        for (slot, m) in slots[1..].iter_mut().zip(more) {
            *slot = io::IoSlice::new(m);
        }
        let parts = &mut slots[..1 + more.len()];
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let result = self.file.write_at_end(self.good_len, parts);
        if let Err((written, e)) = result {
            let slices: Vec<&[u8]> = std::iter::once(&self.pending[..])
                .chain(more.iter().copied())
                .collect();
            let (kept, kept_lines) = match last_whole_line(&slices, written) {
                Some((end, lines, h)) => {
                    self.written_head.clear();
                    self.written_head.push_str(h);
                    (end, lines)
                }
                None => (0, 0),
            };
            self.dropped += lines(&self.pending) - kept_lines;
            self.good_len += kept as u64;
            self.pending.clear();
            // Best effort: `finish` cuts back again before the closing line.
            let _ = self.file.cut(self.good_len);
            let msg = e.to_string();
            self.failed = Some(e);
            return Err(io::Error::other(format!(
                "writing tape {}: {msg}",
                self.file_path.display()
            )));
        }
        self.good_len += len as u64;
        self.written_head.clone_from(&self.head);
        self.sessions_written = self.counts.exchanges + self.model_answers;
        self.pending.clear();
        if self.pending.capacity() > KEEP_CAPACITY {
            // One huge message should not pin its size in memory for the rest of the session.
            self.pending.shrink_to(KEEP_CAPACITY);
        }
        if self.tail.capacity() > KEEP_CAPACITY {
            self.tail = Vec::new();
        }
        Ok(())
    }

    /// The first write error, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed.as_ref().map(|e| e.to_string())
    }

    /// Lines that could not be written.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The message lines this writer counted in `raw`, by kind (lines it appended, for a tape
    /// it appends to).
    pub fn raw_kinds(&self) -> RawKinds {
        self.raw_kinds
    }

    /// Writes the closing line and syncs the file; over a tape that was there already, puts the
    /// recording in its place if it holds a session. Returns the counts written and where the
    /// recording is.
    pub fn finish(
        mut self,
        exit: Option<ExitInfo>,
        reason: Option<String>,
    ) -> io::Result<Finished> {
        let beside = self.beside.take();
        let lost = self.dropped; // before the closing line is counted among them
        match self.close(exit, reason) {
            Ok(end) => {
                let placed = match beside {
                    None => Placed::InPlace,
                    Some(b) => b.settle(self.sessions_written > 0),
                };
                Ok(Finished { end, placed })
            }
            Err(e) => {
                // There is no closing line to count what else was lost: say it here.
                let e = match lost {
                    0 => e,
                    n => io::Error::new(
                        e.kind(),
                        format!("{e}; neither the closing line nor {n} lines before it could be written"),
                    ),
                };
                Err(match &beside {
                    Some(b) => b.not_closed(e),
                    None => e,
                })
            }
        }
    }

    /// [`TapeWriter::finish`], the closing line at `at` rather than now (see
    /// [`TapeWriter::at_offset`]): for a tape whose times are known from elsewhere
    /// (`mcptape import` closes it at the recording's last message).
    pub fn finish_at(
        mut self,
        exit: Option<ExitInfo>,
        reason: Option<String>,
        at: Instant,
    ) -> io::Result<Finished> {
        self.closes_at = Some(at);
        self.finish(exit, reason)
    }

    /// The closing line, written and synced.
    fn close(&mut self, exit: Option<ExitInfo>, reason: Option<String>) -> io::Result<End> {
        if self.failed.is_some() {
            // Lines built after the failure were never written: chain to the last one that was.
            self.head.clone_from(&self.written_head);
        }
        let end = self.closing_line(exit, reason);
        if self.failed.take().is_some() {
            // A failed write may have left part of a line behind; cut back to the last complete
            // line so the closing line starts on a line of its own. Then try once more: a
            // transient failure (space freed) still gets the tape closed.
            self.file.cut(self.good_len)?;
        }
        if let Some(at) = self.appending.as_mut().and_then(|a| a.end_at.take()) {
            // The last write's closing line makes way for this one.
            self.file.cut(at)?;
            self.good_len = at;
        }
        self.push_record(&OwnedLine::End(&end));
        self.commit_lines()?;
        if self.file.padded_after(self.good_len) {
            self.file.cut(self.good_len)?;
        }
        self.file.sync_data()?;
        Ok(end)
    }

    fn push_record(&mut self, record: &OwnedLine<'_>) {
        let start = self.pending.len();
        serde_json::to_writer(&mut self.pending, record).expect("tape records serialize");
        self.seal_pending(start);
    }
}

impl Drop for TapeWriter {
    /// A writer dropped without `finish` (an error path, a panic) leaves its tape as a killed
    /// recorder would, without the padding: the file ends on its last whole line.
    fn drop(&mut self) {
        if self.file.padded_after(self.good_len) {
            let _ = self.file.cut(self.good_len);
        }
    }
}

/// `{"type":"msg","seq":…,"t_us":…,"server":…,"dir":…,"kind":"` — the kind follows.
fn push_msg_head(p: &mut Vec<u8>, seq: u64, t_us: u64, server: &str, dir: Dir) {
    let mut num = itoa::Buffer::new();
    p.extend_from_slice(b"{\"type\":\"msg\",\"seq\":");
    p.extend_from_slice(num.format(seq).as_bytes());
    p.extend_from_slice(b",\"t_us\":");
    p.extend_from_slice(num.format(t_us).as_bytes());
    p.extend_from_slice(b",\"server\":");
    push_str(p, server);
    p.extend_from_slice(b",\"dir\":\"");
    p.extend_from_slice(dir.as_str().as_bytes());
    p.extend_from_slice(b"\",\"kind\":\"");
}

fn is_json(b: &[u8]) -> bool {
    // `IgnoredAny` skips strings without checking their UTF-8: a body with other bytes in a
    // string would go on the tape line verbatim and the line would not read.
    let Ok(s) = std::str::from_utf8(b) else {
        return false;
    };
    // The tape reader's validating scanner first: what it takes, serde takes (tests here and
    // in `scan` hold it to that), and on a stream's small events it costs less than serde's
    // set-up and walk (measured: ~1,430 instructions an event against ~1,680). What it does
    // not take (not JSON, or nested deeper than it goes) serde decides, as before.
    let at = json_scan::skip_ws(b, 0);
    if json_scan::value_end(b, at, 0).is_some_and(|end| json_scan::skip_ws(b, end) == b.len()) {
        return true;
    }
    serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok()
}

/// `,"redacted":[…]` when rules fired.
fn push_rules<T: serde::Serialize>(p: &mut Vec<u8>, rules: &[T]) {
    if !rules.is_empty() {
        p.extend_from_slice(b",\"redacted\":");
        p.extend_from_slice(&serde_json::to_vec(rules).expect("strings serialize"));
    }
}

/// `,"b64":"…"`.
fn push_b64(p: &mut Vec<u8>, bytes: &[u8]) {
    p.extend_from_slice(b",\"b64\":\"");
    p.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .as_bytes(),
    );
    p.push(b'"');
}

/// An oversize message: its length and its head. The head is cut mid-message: it ends before
/// anything a secret cut in two could be, and is redacted as text, since it cannot parse.
/// Returns the head as taped.
fn push_oversize<'h>(
    p: &mut Vec<u8>,
    redactor: Option<&Redactor>,
    len: u64,
    head: &'h [u8],
) -> std::borrow::Cow<'h, [u8]> {
    p.extend_from_slice(b"oversize\",\"len\":");
    p.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    let taped: std::borrow::Cow<'h, [u8]> = match redactor.map(|r| r.redact_head(head)) {
        Some((cut, rules)) => {
            push_rules(p, &rules);
            cut.into()
        }
        None => head.into(),
    };
    push_b64(p, &taped);
    taped
}

/// A line's kind (closing the `"kind":"` opened by the head), id, method and framing facts.
fn push_line_facts(p: &mut Vec<u8>, c: &classify::ClassifiedRef<'_>, line: &crate::wire::Line<'_>) {
    p.extend_from_slice(c.kind.as_str().as_bytes());
    p.push(b'"');
    if let Some(id) = &c.id {
        p.extend_from_slice(b",\"id\":");
        p.extend_from_slice(id.as_bytes());
    }
    if let Some(m) = &c.method {
        p.extend_from_slice(b",\"method\":");
        push_str(p, m);
    }
    if line.crlf {
        p.extend_from_slice(b",\"crlf\":true");
    }
    if line.unterminated {
        p.extend_from_slice(b",\"eol\":false");
    }
    if let Some(problem) = &c.problem {
        p.extend_from_slice(b",\"problem\":");
        push_str(p, problem);
    }
}

/// `,"msg":…`: verbatim unless a secret had to go (the classifier has just validated these
/// bytes as JSON, and the redactor's output is JSON too). A large body is returned instead of
/// copied.
fn push_json_body<'a>(
    p: &mut Vec<u8>,
    redactor: Option<&Redactor>,
    bytes: &'a [u8],
) -> Option<std::borrow::Cow<'a, [u8]>> {
    let body: std::borrow::Cow<'a, [u8]> = match redactor.and_then(|r| r.redact_json(bytes)) {
        Some((redacted, rules)) => {
            push_rules(p, &rules);
            redacted.into()
        }
        None => bytes.into(),
    };
    p.extend_from_slice(b",\"msg\":");
    if body.len() >= BIG_BODY {
        return Some(body);
    }
    p.extend_from_slice(&body);
    None
}

/// A line that is not JSON: `,"text":…` when it is UTF-8, else `,"b64":…` byte for byte, with
/// only a secret's bytes replaced either way.
fn push_text_body(p: &mut Vec<u8>, redactor: Option<&Redactor>, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            let redacted = redactor.and_then(|r| r.redact_text(text));
            let text = match &redacted {
                Some((redacted, rules)) => {
                    push_rules(p, rules);
                    redacted.as_str()
                }
                None => text,
            };
            p.extend_from_slice(b",\"text\":");
            push_str(p, text);
        }
        Err(_) => {
            let redacted = redactor.and_then(|r| r.redact_bytes(bytes));
            let bytes: &[u8] = match &redacted {
                Some((bytes, rules)) => {
                    push_rules(p, rules);
                    bytes
                }
                None => bytes,
            };
            push_b64(p, bytes);
        }
    }
}

/// Ends a line with its chain hash: `,"h":"<hex>"}` and the newline.
fn push_h(out: &mut Vec<u8>, head: &str) {
    out.extend_from_slice(b",\"h\":\"");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// Among the first `written` bytes of `parts` (consecutive tape lines, each ending in
/// `,"h":"<hex>"}` and a newline): where the last complete line ends, how many complete lines
/// there are, and that line's `h`. `None` when no line is complete.
fn last_whole_line<'a>(parts: &[&'a [u8]], written: usize) -> Option<(usize, u64, &'a str)> {
    let (mut at, mut lines, mut last) = (0usize, 0u64, None);
    for part in parts {
        let part: &'a [u8] = part;
        let got = &part[..part.len().min(written - at)];
        lines += memchr::memchr_iter(b'\n', got).count() as u64;
        if let Some(nl) = memchr::memrchr(b'\n', got) {
            // A line's newline and its `h` are in the same part (a big body is never last).
            last = Some((at + nl + 1, lines, chain::locate_h(&part[..nl])?.1));
        }
        at += got.len();
        if at == written {
            break;
        }
    }
    last
}

/// Opens `path` (a file of mcptape's own naming: `TAPE.new`, a backup, a staging file) with
/// `opts`, a regular file there removed first rather than truncated: whoever still has it open
/// keeps their file, where a truncation under a recorder's map would kill it with SIGBUS
/// (sink.rs). Where it cannot be removed (a directory without write permission), it is
/// truncated as before.
fn open_anew(path: &Path, opts: &std::fs::OpenOptions) -> io::Result<File> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        let _ = std::fs::remove_file(path);
    }
    opts.open(path)
}

/// Opens a tape for writing with mode 0600: tapes hold whatever crossed the wire. Not
/// truncated: the caller empties it once it holds the lock (`place::open`).
pub(crate) fn open_private(path: &Path) -> io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    // Read too: the writer maps the file's end (sink.rs), which needs both.
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    // `mode` applies only when the file is created: an empty regular file there, which becomes
    // the tape, is made private by the caller once it knows the file is its own
    // ([`make_private`]).
    opts.open(path)
}

/// Makes `file`, an empty regular file found at a tape's path and now this recording's, private
/// (0600), as a created tape is. Anything else (`/dev/null`, a FIFO) is written through and left
/// as it was: it is not the tape's to change.
pub(crate) fn make_private(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    if file.metadata()?.is_file() {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Opens a file mcptape names itself (a staging file, a backup) for writing, refusing to
/// follow a symbolic link someone left at that name.
pub(crate) fn open_own(path: &Path) -> io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    // Read too: the writer maps the file's end (sink.rs), which needs both.
    opts.read(true).write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    open_anew(path, &opts).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::other(format!(
                "{} is a symbolic link; refusing to write through it",
                path.display()
            ))
        } else {
            e
        }
    })
}

/// A file written under a name of mcptape's own beside a tape (`TAPE.redact-tmp`, `TAPE.new`)
/// and then renamed over the tape: removed when dropped unless `commit` renamed it, so that no
/// error path leaves it behind. Only a file this guard created is removed: a symbolic link left
/// at the name is refused by `open_own` before the guard exists.
pub(crate) struct Staged {
    path: PathBuf,
    armed: bool,
}

impl Staged {
    /// Creates (or truncates) the staging file, owner-only, never through a symbolic link.
    pub(crate) fn create(path: &Path) -> io::Result<(Staged, File)> {
        let file = open_own(path)?;
        let staged = Staged {
            path: path.to_path_buf(),
            armed: true,
        };
        Ok((staged, file))
    }

    /// Renames the staging file to `to`; on failure it is removed.
    pub(crate) fn commit(mut self, to: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, to)?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Copies `from` to `to` (a name mcptape chose), never through a symbolic link at `to`.
pub(crate) fn copy_own(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = File::open(from)?;
    let mut dst = open_own(to)?;
    io::copy(&mut src, &mut dst)?;
    dst.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_json` as it was: serde alone.
    fn is_json_reference(b: &[u8]) -> bool {
        std::str::from_utf8(b)
            .is_ok_and(|s| serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok())
    }

    /// The scanner in front of serde answers what serde answers, on event bodies and on what
    /// is almost JSON: numbers (`2.50`, `-0`, `01`), escapes, non-ASCII, bytes that are not
    /// UTF-8, whitespace JSON has not (a form feed), nesting deeper than the scanner goes.
    #[test]
    fn is_json_answers_what_serde_answers() {
        let mut cases: Vec<Vec<u8>> = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the quick brown "}}"#,
            r#"{"price":2.50,"n":-0,"e":1E+5,"f":-1.5e-3}"#,
            r#"{"n":01}"#,
            r#"{"n":1.}"#,
            r#"{"n":.5}"#,
            r#"{"n":+1}"#,
            r#"{"n":-}"#,
            r#"{"t":"caf\u00e9 \ud83d\ude00 \ud800"}"#,
            r#"{"t":"\u00G0"}"#,
            r#"{"t":"\q"}"#,
            "{\"t\":\"caf\u{e9} na\u{ef}ve\"}",
            "{\"t\":\"tab\there\"}",
            " \t\r\n{\"a\":[1, 2 ,3]} \n",
            "\x0c{}",
            "{}\x0c",
            "",
            " ",
            "null",
            "2.50",
            "\"s\"",
            "[DONE]",
            "data",
            r#"{"a":1}{"b":2}"#,
            r#"{"a":1,}"#,
            r#"{"api_key":"sk-x","token":null}"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        cases.push(b"{\"t\":\"\xff\"}".to_vec());
        cases.push(b"\xef\xbb\xbf{}".to_vec());
        for depth in [63, 64, 65, 127, 128, 129, 300] {
            cases.push(format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes());
            cases.push(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)).into_bytes());
        }
        for c in &cases {
            assert_eq!(
                is_json(c),
                is_json_reference(c),
                "{}",
                String::from_utf8_lossy(c)
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4000))]
        #[test]
        fn is_json_agrees_with_serde(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "{", "}", "[", "]", "\"", "\"k\":", ":", ",", " ", "\n", "\x0c", "\t",
                    "0", "1", "-", ".", "e", "E", "+", "2.50", "true", "fals", "null", "\\",
                    "\\u00e9", "\\ud800", "\\uZZ", "\\n", "\\/", "\u{e9}", "\u{1}", "\u{7f}",
                    "abc", "\"text\":\"the quick\"",
                ]),
                0..24,
            ),
            bad in proptest::option::of(0usize..64),
        ) {
            let mut b = parts.concat().into_bytes();
            if let Some(at) = bad {
                // A byte that is not UTF-8 somewhere.
                b.insert(at.min(b.len()), 0xff);
            }
            proptest::prop_assert_eq!(
                is_json(&b),
                is_json_reference(&b),
                "{}",
                String::from_utf8_lossy(&b)
            );
        }
    }

    #[test]
    fn a_write_cut_short_keeps_the_whole_lines_and_the_last_ones_hash() {
        let h = |c: char| c.to_string().repeat(64);
        let a = format!("{{\"type\":\"msg\",\"h\":\"{}\"}}\n", h('a'));
        // The second line in three parts, as a big body is written: head, body, tail.
        let pending = format!("{a}{{\"type\":\"msg\",\"msg\":");
        let tail = format!(",\"h\":\"{}\"}}\n", h('b'));
        let parts: [&[u8]; 3] = [pending.as_bytes(), b"[1,2,3]", tail.as_bytes()];
        let all: usize = parts.iter().map(|p| p.len()).sum();
        // Nothing whole yet; the first line whole; the first line and part of the second; both.
        assert_eq!(last_whole_line(&parts, a.len() - 1), None);
        let first = Some((a.len(), 1, &*h('a')));
        assert_eq!(last_whole_line(&parts, a.len()), first);
        assert_eq!(last_whole_line(&parts, all - 1), first);
        assert_eq!(last_whole_line(&parts, all), Some((all, 2, &*h('b'))));
    }

    /// The HTTP facts written through the cache of markers are the bytes the walk gives, also
    /// where the cache cannot be used (facts it does not know, a user rule matching a fact's
    /// name): a session of repeated session ids, two sessions, and the odd cases.
    #[test]
    fn cached_facts_give_the_tape_the_walk_gives() {
        use serde_json::json;
        let head = json!({"method": "POST", "path": "/mcp", "content_type": "application/json",
            "accept": "application/json, text/event-stream", "mcp_protocol_version": "2025-06-18"});
        let with = |extra: serde_json::Value| {
            let mut f = head.clone();
            f.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            f
        };
        let mut facts = vec![with(json!({"post": 1, "request_id": 0}))];
        for (n, sid) in [
            (2, "bench-session-1"),
            (3, "bench-session-1"),
            (4, "sk-live-0a1b2c3d4e5f6a7b8c9d"),
            (5, "bench-session-1"),
            (6, "s\u{e9}\"ss\nion"),
        ] {
            facts.push(with(
                json!({"post": n, "request_id": n, "mcp_session_id": sid}),
            ));
            facts.push(with(
                json!({"post": n, "request_id": n, "mcp_session_id": sid,
                "session": sid, "status": 200}),
            ));
        }
        facts.extend([
            with(json!({"session": "", "status": 202})),
            with(json!({"session": "[REDACTED:key:session-id:0badf00d]"})),
            with(json!({"request_id": "a\"b", "session": "bench-session-1"})),
            with(json!({"session": 12345678})),
            with(json!({"request_id": [[1]], "session": "bench-session-1"})),
            with(
                json!({"mcp_name": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
                "mcp_session_id": "bench-session-1"}),
            ),
            with(json!({"mcp_params": {"token": "abc"}, "mcp_session_id": "bench-session-1"})),
            with(json!({"last_event_id": "e-1", "mcp_session_id": "bench-session-1"})),
            json!("not an object"),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let mut user = crate::redact::RedactConfig::defaults();
        user.add_rule("re:session_i");
        for (name, cfg) in [
            ("defaults", crate::redact::RedactConfig::defaults()),
            ("user rule", user),
        ] {
            let opts = WriteOptions {
                redactor: Some(std::sync::Arc::new(Redactor::new(&cfg).unwrap())),
                signing_key: None,
            };
            let tape = |uncached: bool| {
                let path = dir.path().join(format!("{name}-{uncached}.jsonl"));
                let mut w = TapeWriter::create(&path, opts.clone()).unwrap();
                w.facts_uncached = uncached;
                let at = w.start;
                for (i, f) in facts.iter().enumerate() {
                    let msg = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#);
                    w.message_with("s", Dir::S2C, &Frame::whole(msg.as_bytes()), at, Some(f));
                }
                w.commit().unwrap();
                let text = std::fs::read_to_string(&path).unwrap();
                // The header's time differs, and so every line's chain hash: the rest must not.
                // (The tape is not closed: the padding after its last line is blank lines.)
                text.lines()
                    .skip(1)
                    .filter(|l| !l.is_empty())
                    .map(|l| l.rsplit_once(",\"h\":").unwrap().0.to_string())
                    .collect::<Vec<_>>()
            };
            let (cached, walked) = (tape(false), tape(true));
            assert_eq!(cached.len(), facts.len());
            for (c, w) in cached.iter().zip(&walked) {
                assert_eq!(c, w, "{name}");
            }
            assert!(
                !cached.iter().any(|l| l.contains("bench-session-1")),
                "{name}"
            );
            // Both paths were taken: the usual facts cached, a fact it does not know walked.
            let r = opts.redactor.as_deref().unwrap();
            let mut cache = crate::redact::FactsCache::default();
            let mut out = Vec::new();
            let mut fits = |f: &serde_json::Value| {
                r.write_facts_cached(f, FACTS_KEPT, FACTS_SECRET, &mut cache, &mut out)
            };
            assert_eq!(fits(&facts[2]), name == "defaults");
            assert!(!fits(&facts[facts.len() - 4]));
        }
    }
}
