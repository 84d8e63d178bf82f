//! The one recorder every transport feeds: framed messages and transport events in, one tape
//! writer, one policy for a failed write. The stdio proxy, the HTTP proxy, the bridge and both
//! check drivers tape through it; a tape that holds several servers (and, for an agent run, the
//! model API) has one recorder per server label over the same writer.
//!
//! The failed-write policy (docs/reliability.md): the session matters more than the tape. The
//! first failure is reported once on stderr, the session goes on, what could not be written is
//! counted, and the closing line marks the tape incomplete.

use crate::tape::writer::{LineFacts, ModelFacts};
use crate::tape::{End, ExitInfo, Placed, RawKinds, ServerDecl, TapeWriter, WriteOptions};
use crate::wire::classify::ClassifiedRef;
use crate::wire::{Dir, Frame, Framer};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Shared {
    /// `None` once closed: what comes after the tape's end is not taped.
    writer: Mutex<Option<TapeWriter>>,
    /// Set when another process owns the tape (`record --join`): everything goes there.
    joined: Option<Mutex<super::join::JoinSink>>,
    path: PathBuf,
    warned: AtomicBool,
}

/// A handle on one tape for one server label; cheap to clone, shared by every thread and task
/// of a session.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
    label: Arc<str>,
}

/// Why a recording could not happen (any transport).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The server could not be started (exit 69).
    #[error("could not start server `{command}`")]
    Spawn {
        /// The command as a user would type it.
        command: String,
        /// Why.
        #[source]
        cause: io::Error,
    },
    /// The upstream URL is not one the proxy can use (exit 64).
    #[error("invalid upstream URL {url:?}: {why}")]
    Upstream {
        /// The URL, without a password it may carry.
        url: String,
        /// Why not.
        why: String,
    },
    /// The listening socket could not be opened (exit 69).
    #[error("could not listen on {addr}")]
    Listen {
        /// Where.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        cause: io::Error,
    },
    /// The client to an `https://` upstream could not be set up (its CA file, exit 66).
    #[error(transparent)]
    Client(#[from] crate::transport::upstream::UpstreamError),
    /// The tape could not be written (exit 74).
    #[error("could not write tape {}", path.display())]
    Tape {
        /// The tape.
        path: PathBuf,
        /// Why.
        #[source]
        cause: io::Error,
    },
}

impl crate::exit::Coded for RecordError {
    fn exit_code(&self) -> i32 {
        match self {
            RecordError::Spawn { .. } | RecordError::Listen { .. } => crate::exit::UNAVAILABLE,
            RecordError::Upstream { .. } => crate::exit::USAGE,
            RecordError::Tape { .. } => crate::exit::IO_ERR,
            RecordError::Client(e) => crate::exit::Coded::exit_code(e),
        }
    }
}

/// How a recording ended, for the summary and the exit code.
#[derive(Debug)]
pub struct Closed {
    /// Where the recording is: the tape's path, or `TAPE.new` beside the tape it did not
    /// replace (see `placed`).
    pub tape: PathBuf,
    /// The closing line as written.
    pub end: End,
    /// Tape lines that could not be written (disk full…), with the first error.
    pub write_failure: Option<(u64, String)>,
    /// What became of a tape that was there already (said on stderr when it closed).
    pub placed: Placed,
    /// The lines counted in `end.raw`, by kind (none counted for a joined tape: its owner
    /// closes it).
    pub raw_kinds: RawKinds,
}

/// How a recording ended: what every transport's record function returns.
#[derive(Debug)]
#[non_exhaustive]
pub struct RecordOutcome {
    /// Where the recording is: the tape, or `TAPE.new` beside the tape it did not replace.
    pub tape: PathBuf,
    /// Its closing line.
    pub end: End,
    /// What became of a tape that was there already.
    pub placed: Placed,
    /// The exit code mcptape should exit with: the server's, or 128+n for a signal (0 for an
    /// HTTP upstream).
    pub exit_code: i32,
    /// Tape lines that could not be written (disk full…), with the first error.
    pub write_failure: Option<(u64, String)>,
    /// The lines counted in `end.raw`, by kind.
    pub raw_kinds: RawKinds,
    /// Server messages for a GET stream no client opened, dropped past
    /// [`GET_BACKLOG`](crate::transport::http::GET_BACKLOG) (the bridge only). They are on
    /// the tape.
    pub dropped: u64,
}

impl RecordOutcome {
    /// The outcome of a closed tape and the exit code.
    pub fn new(closed: Closed, exit_code: i32) -> RecordOutcome {
        RecordOutcome {
            tape: closed.tape,
            end: closed.end,
            placed: closed.placed,
            exit_code,
            write_failure: closed.write_failure,
            raw_kinds: closed.raw_kinds,
            dropped: 0,
        }
    }
}

impl Recorder {
    /// A recorder for `writer`'s tape, taping as server `label`.
    pub fn new(writer: TapeWriter, label: &str) -> Recorder {
        Recorder {
            shared: Arc::new(Shared {
                path: writer.path().to_path_buf(),
                writer: Mutex::new(Some(writer)),
                joined: None,
                warned: AtomicBool::new(false),
            }),
            label: label.into(),
        }
    }

    /// A recorder whose tape another process owns (`mcptape run`): what it is given goes over
    /// `sink` to that process, which writes it.
    pub(crate) fn joined(sink: super::join::JoinSink, socket: &Path, label: &str) -> Recorder {
        Recorder {
            shared: Arc::new(Shared {
                path: socket.to_path_buf(),
                writer: Mutex::new(None),
                joined: Some(Mutex::new(sink)),
                warned: AtomicBool::new(false),
            }),
            label: label.into(),
        }
    }

    /// Sends to the owner of a joined tape; a failure is warned once, as a failed write is.
    fn to_owner(&self, f: impl FnOnce(&mut super::join::JoinSink) -> io::Result<()>) -> bool {
        let Some(j) = &self.shared.joined else {
            return false;
        };
        let mut sink = j.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f(&mut sink) {
            if !self.shared.warned.swap(true, Ordering::Relaxed) {
                crate::diag!("mcptape: WARNING: {e}; the session goes on, not recorded");
            }
        }
        true
    }

    /// Declares another server on the tape (an agent run's servers, as they join).
    pub fn declare(&self, decl: ServerDecl) {
        self.with(|w| {
            if let Err(e) = w.declare_server(decl) {
                crate::diag!("mcptape: WARNING: could not declare a server on the tape: {e}");
            }
        });
    }

    /// The same tape, another server label.
    pub fn server(&self, label: &str) -> Recorder {
        Recorder {
            shared: self.shared.clone(),
            label: label.into(),
        }
    }

    /// The server label messages are taped under.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The tape's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Tapes every message `chunk` completes (the framer keeps the rest for the next chunk) and
    /// hands them to the kernel, so that the caller forwards the chunk only once they are on
    /// the tape: a crash then loses nothing already forwarded.
    pub fn chunk(&self, framer: &mut Framer, dir: Dir, chunk: &[u8]) {
        if self.to_owner(|j| j.chunk(dir, chunk)) {
            return;
        }
        let at = Instant::now();
        self.with(|w| {
            framer.push(chunk, |frame| {
                report_oversize(&frame, dir);
                w.message(&self.label, dir, &frame, at)
            })
        });
    }

    /// Tapes what the framer still holds: the stream ended (a last line without its newline).
    pub fn finish_framer(&self, framer: &mut Framer, dir: Dir) {
        if self.to_owner(|j| j.finish(dir)) {
            return;
        }
        let at = Instant::now();
        self.with(|w| {
            framer.finish(|frame| {
                report_oversize(&frame, dir);
                w.message(&self.label, dir, &frame, at)
            })
        });
    }

    /// Tapes one whole message (an HTTP body, an SSE event's data, a line written by a
    /// driver) with the transport facts beside it. A message on a tape line holds no line
    /// break: in valid JSON one can only be whitespace between tokens, so it becomes a space.
    pub fn message(&self, dir: Dir, bytes: &[u8], facts: Option<&dyn LineFacts>) {
        self.message_known(dir, bytes, facts, None);
    }

    /// [`Recorder::message`], given `classify_ref(bytes)` when the caller has made it already
    /// (used only where the line is `bytes` as they are).
    pub(crate) fn message_known<'a>(
        &self,
        dir: Dir,
        bytes: &'a [u8],
        facts: Option<&dyn LineFacts>,
        known: Option<ClassifiedRef<'a>>,
    ) {
        let whole = bytes.len();
        let bytes = bytes.trim_ascii();
        let flat: Vec<u8>;
        let (bytes, known) = match crate::wire::codec::one_line(bytes) {
            std::borrow::Cow::Owned(v) => {
                flat = v;
                (&flat[..], None)
            }
            std::borrow::Cow::Borrowed(b) => (b, known.filter(|_| b.len() == whole)),
        };
        if self.to_owner(|j| j.whole(dir, bytes)) {
            return;
        }
        let frame = Frame::whole(bytes);
        let at = Instant::now();
        self.with(|w| w.message_known(&self.label, dir, &frame, at, facts, known));
    }

    /// Tapes one part of a model API call (see [`TapeWriter::model`]).
    pub fn model(
        &self,
        dir: Dir,
        call: u64,
        part: &str,
        facts: &(impl ModelFacts + ?Sized),
        body: Option<&[u8]>,
        http: Option<&serde_json::Value>,
    ) {
        let at = Instant::now();
        self.with(|w| w.model(&self.label, dir, call, part, facts, body, http, at));
    }

    /// Tapes several parts of model call `call` in one `write(2)`: the events of one read
    /// from the upstream (a stream of small events would otherwise cost a system call each),
    /// an answer's head with its first event. Each part: its name, facts, body and HTTP facts.
    pub fn model_parts<'a>(
        &self,
        dir: Dir,
        call: u64,
        parts: impl IntoIterator<
            Item = (
                &'a str,
                &'a dyn ModelFacts,
                Option<&'a [u8]>,
                Option<&'a serde_json::Value>,
            ),
        >,
    ) {
        let at = Instant::now();
        self.with(|w| {
            for (part, facts, body, http) in parts {
                w.model(&self.label, dir, call, part, facts, body, http, at);
            }
        });
    }

    /// Tapes a transport event (an HTTP stream opened, the upstream unreachable…).
    pub fn event(&self, what: &str, details: serde_json::Value) {
        let at = Instant::now();
        self.with(|w| w.event(&self.label, what, details, at));
    }

    /// Writes the closing line. Later calls, and messages after it, are not taped.
    pub fn close(&self, exit: Option<ExitInfo>, reason: String) -> io::Result<Closed> {
        if let Some(j) = &self.shared.joined {
            // The owner writes the closing line; this process says how its server ended.
            let mut sink = j.lock().unwrap_or_else(|p| p.into_inner());
            let _ = sink.end(exit.clone(), reason.clone());
            return Ok(Closed {
                tape: self.shared.path.clone(),
                end: End {
                    exit,
                    reason: Some(reason),
                    ..End::default()
                },
                write_failure: None,
                placed: Placed::InPlace,
                raw_kinds: RawKinds::default(),
            });
        }
        let writer = self
            .shared
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| io::Error::other("the tape was closed already"))?;
        let dropped = writer.dropped();
        let failure = writer.failure();
        let raw_kinds = writer.raw_kinds();
        let finished = writer.finish(exit, Some(reason))?;
        Ok(Closed {
            tape: finished
                .placed
                .elsewhere()
                .map_or_else(|| self.shared.path.clone(), Path::to_path_buf),
            end: finished.end,
            write_failure: failure.map(|f| (dropped, f)),
            placed: finished.placed,
            raw_kinds,
        })
    }

    /// Runs `f` on the writer under the lock, then commits what it added (one `write(2)`).
    fn with(&self, f: impl FnOnce(&mut TapeWriter)) {
        let mut guard = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(w) = guard.as_mut() else { return };
        f(w);
        if let Err(e) = w.commit() {
            if !self.shared.warned.swap(true, Ordering::Relaxed) {
                crate::diag!(
                    "mcptape: WARNING: {e}; the session goes on, the tape will be marked incomplete"
                );
            }
        }
    }
}

/// Why a stdio server and its tape could not both be started.
pub(crate) enum StartError {
    Spawn(io::Error),
    Tape(io::Error),
}

impl StartError {
    /// As a recording's error, for the server `command` and the tape at `tape`.
    pub(crate) fn for_record(self, command: &[String], tape: &Path) -> RecordError {
        match self {
            StartError::Spawn(cause) => RecordError::Spawn {
                command: crate::transport::stdio::shell_words(command),
                cause,
            },
            StartError::Tape(cause) => RecordError::Tape {
                path: tape.to_path_buf(),
                cause,
            },
        }
    }
}

/// Starts a stdio server and joins the recording another process owns at `socket` (see
/// [`super::join`]): for `record --join`, which `mcptape run` puts in an agent's config.
pub(crate) fn spawn_and_join(
    command: &[String],
    label: &str,
    socket: &Path,
) -> Result<(Child, Recorder), StartError> {
    let mut child = crate::transport::stdio::spawn(command).map_err(StartError::Spawn)?;
    let hello = super::join::Hello {
        label: label.to_string(),
        command: command.to_vec(),
        cwd: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
    };
    match super::join::JoinSink::connect(socket, &hello) {
        Ok(sink) => Ok((child, Recorder::joined(sink, socket, label))),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartError::Tape(e))
        }
    }
}

/// Starts a stdio server, then opens its tape with the server declared — in that order, so a
/// server that cannot start costs no existing tape. For `record`, the bridge and `check`.
pub(crate) fn spawn_and_tape(
    command: &[String],
    label: &str,
    tape: &Path,
    opts: WriteOptions,
) -> Result<(Child, Recorder), StartError> {
    let mut child = crate::transport::stdio::spawn(command).map_err(StartError::Spawn)?;
    // The command line can hold secrets too (`--api-key …`, `TOKEN=…`): the writer's redactor
    // takes them out when it declares the server.
    let declared = TapeWriter::create(tape, opts).and_then(|mut w| {
        w.declare_server(ServerDecl {
            cwd: std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string()),
            ..ServerDecl::stdio(label, command.to_vec())
        })?;
        Ok(w)
    });
    match declared {
        Ok(w) => Ok((child, Recorder::new(w, label))),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartError::Tape(e))
        }
    }
}

/// How a server that was waited for ended, for the closing line, and the exit code mcptape
/// passes on ([`exit_info`]); when waiting failed, the line that says so instead, `then`
/// saying what goes without it (mcptape then exits 70).
pub(crate) fn server_ended(
    pid: u32,
    waited: &io::Result<ExitStatus>,
    then: &str,
) -> Result<(ExitInfo, i32), String> {
    match waited {
        Ok(st) => Ok(exit_info(st)),
        Err(e) => Err(crate::transport::stdio::lost_end(
            "the server",
            pid,
            e,
            then,
        )),
    }
}

/// How a server ended, for the closing line, and the exit code mcptape passes on.
pub(crate) fn exit_info(st: &ExitStatus) -> (ExitInfo, i32) {
    use std::os::unix::process::ExitStatusExt;
    let info = ExitInfo {
        code: st.code(),
        signal: if st.code().is_none() {
            st.signal()
        } else {
            None
        },
    };
    let code = crate::transport::stdio::exit_code(st).unwrap_or(crate::exit::SOFTWARE);
    (info, code)
}

fn report_oversize(frame: &Frame<'_>, dir: Dir) {
    if let Frame::Oversize { len, .. } = frame {
        let who = match dir {
            Dir::C2S => "client",
            Dir::S2C => "server",
        };
        crate::diag!(
            "mcptape: a {len}-byte {who} message is over --max-message: forwarded intact, recorded as `oversize` (length and first bytes only)"
        );
    }
}
