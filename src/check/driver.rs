//! Drives a live stdio server with a recording's client side: the recorded requests in recorded
//! order (those that overlapped in the recording are sent without waiting for each other),
//! server-initiated requests answered with the client's recorded answers. Each answer is compared
//! with the baseline as it arrives (`observe.rs`); with `--update` everything that crosses the
//! wire is also written to an observed tape, which becomes the new baseline.

use super::observe::Observer;
use crate::compare::server_messages;
use crate::record::recorder::{server_ended, spawn_and_tape, StartError};
use crate::record::Recorder;
use crate::tape::index::{Exchange, MsgMeta};
use crate::tape::{ExitInfo, TapeIndex, WriteOptions, DEFAULT_SERVER};
use crate::transport::stdio::shell_words;
use crate::wire::canonical::canonical;
use crate::wire::params::params_of;
use crate::wire::rewrite::{with_id, RawObject};
use crate::wire::{classify, Dir, Frame, Framer, Kind};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, ExitStatus};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a stdio check needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub(crate) struct DriveConfig {
    /// The server command and its arguments.
    pub command: Vec<String>,
    /// How long each request may take.
    pub timeout: Duration,
    /// Where the observed session is written (`--update`); none: nothing is taped.
    pub observed_tape: Option<PathBuf>,
    /// Largest message kept whole, in bytes.
    pub max_message: usize,
    /// After the last answer and closing the server's stdin, how long it has to exit.
    pub grace: Duration,
    /// How the observed tape is written (it may become the baseline with `--update`).
    pub write: WriteOptions,
    /// Real values for redacted arguments, for the live calls only.
    pub filler: Arc<super::fill::Filler>,
}

/// Why a check could not be driven over stdio.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The server could not be started (exit 69).
    #[error("could not start server `{command}`")]
    Spawn {
        /// The command as a user would type it.
        command: String,
        /// Why.
        #[source]
        cause: io::Error,
    },
    /// The server at the URL could not be reached: nothing listens there, or the host is
    /// unknown (exit 69, as for a stdio server that cannot start).
    #[error("the server could not be reached at {url}")]
    Unreachable {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        cause: io::Error,
    },
    /// The server URL is not one the driver can use (exit 64).
    #[error("invalid server URL {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// Why not.
        why: String,
    },
    /// The observed tape could not be written (exit 74).
    #[error("could not write the observed tape {}", path.display())]
    Tape {
        /// The tape.
        path: PathBuf,
        /// Why.
        #[source]
        cause: io::Error,
    },
}

impl crate::exit::Coded for DriveError {
    fn exit_code(&self) -> i32 {
        match self {
            DriveError::Spawn { .. } | DriveError::Unreachable { .. } => crate::exit::UNAVAILABLE,
            DriveError::Url { .. } => crate::exit::USAGE,
            DriveError::Tape { .. } => crate::exit::IO_ERR,
        }
    }
}

/// How a drive went.
#[derive(Debug, Default)]
pub(crate) struct DriveOutcome {
    /// Baseline exchange → why it got no answer.
    pub missing: HashMap<usize, String>,
    /// Something that cut the run short.
    pub run_error: Option<String>,
    /// How the server ended (stdio).
    pub exit: Option<ExitInfo>,
    /// Waiting for the server failed (stdio): the line that says so, an internal error.
    pub lost_end: Option<String>,
}

/// What the live side reports to the driver.
pub(crate) enum Event {
    /// The responses and errors that arrived together (at the instant given), in order: their
    /// id texts and the messages themselves.
    Answers(Instant, Vec<(String, Vec<u8>)>),
    /// A request that got no answer, and why (an HTTP refusal, a broken stream).
    Failed(String, String),
    /// Server-initiated messages that arrived, in order: (method, whether a request). Requests
    /// are already answered with the client's recorded answers when this is sent.
    Seen(Vec<(String, bool)>),
    /// The server's output ended: nothing more will come.
    Gone,
}

/// One client message of the baseline to send, in recorded order.
pub(crate) enum Step {
    Request { exchange: usize, msg: usize },
    Notification { msg: usize },
}

/// What a recorded stdio line held around its message, as `TapeIndex::read_line_ends` gives it:
/// the whitespace before its JSON, and the whitespace after it with the CR of a `\r\n` (the
/// `\n` is the transport's). Empty for nearly every line.
#[derive(Debug, Default)]
pub(crate) struct LineEnds {
    pub before: Vec<u8>,
    pub after: Vec<u8>,
}

/// The live server's side of a check: how client messages reach it. Its answers come back to
/// the driver as `Event`s.
pub(crate) trait Live {
    /// Queues a request (carrying the driver's id, `id`) to send, framed on its line as
    /// recorded (`ends`; a transport without lines ignores it).
    fn request(&mut self, id: &str, text: String, ends: &LineEnds);
    /// Queues a notification to send, framed as recorded.
    fn notification(&mut self, text: &[u8], ends: &LineEnds);
    /// Sends what is queued: the driver is about to wait. False when the server is gone.
    fn flush(&mut self) -> bool;
    /// Whether this side reports (as `Event::Seen`) a server-initiated message recorded as
    /// `meta`; the driver waits only for those it can see arrive.
    fn sees(&self, meta: &MsgMeta) -> bool {
        let _ = meta;
        true
    }
    /// Whether the server messages this side sees can be counted against those `base` recorded
    /// (and seen) by method.
    fn counts_comparable(&self, base: &TapeIndex) -> bool {
        let _ = base;
        true
    }
}

/// Drives the baseline's client side through `live`, which reports answers on `inbox`, keeping
/// the recorded causality: each client message is sent only once what preceded it in the
/// recording has happened live — the answers to earlier requests, the server's own requests
/// (answered with the client's recorded answers) and notifications, and, after the client's
/// answer to a server request, the pause the recording had (up to `SETTLE_MAX`: the server may
/// act on the answer without saying so). Requests that overlapped in the recording are sent
/// without waiting for each other. The live server's multi-round-trip state is carried into
/// retries; requests time out. Returns (missing, whether the server went away, the server
/// messages' counts).
pub(crate) fn drive(
    base: &TapeIndex,
    live: &mut dyn Live,
    inbox: mpsc::Receiver<Event>,
    timeout: Duration,
    filler: &super::fill::Filler,
    observer: &mut Observer,
) -> (HashMap<usize, String>, bool, ServerCounts) {
    let causes = Causes::of(base, &*live);
    let mut run = Run {
        base,
        live,
        timeout,
        filler,
        observer,
        inbox,
        next_id: 1,
        pending: HashMap::new(),
        sent_ids: HashMap::new(),
        grace: HashMap::new(),
        expired: HashMap::new(),
        done: vec![false; base.exchanges.len()],
        missing: HashMap::new(),
        gone: false,
        states: HashMap::new(),
        seen: HashMap::new(),
        last_seen_request: None,
    };
    // Requests whose recorded answer came before a step must be answered before it is sent.
    let mut by_answer: Vec<(usize, usize)> = base
        .exchanges
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.response.map(|r| (r, i)))
        .collect();
    by_answer.sort_unstable();
    let mut answered_before = 0;
    let mut needs = Needs::default();
    for step in plan(base) {
        let at = match step {
            Step::Request { msg, .. } | Step::Notification { msg } => msg,
        };
        while answered_before < by_answer.len() && by_answer[answered_before].0 < at {
            let ex = by_answer[answered_before].1;
            run.wait_for(|r| r.done[ex] || r.gone, None);
            answered_before += 1;
        }
        if needs.add(&causes, at) {
            run.wait_for_server(&mut needs);
        }
        if let Some(pause) = causes.settle(base, at) {
            run.settle(pause);
        }
        match step {
            Step::Request { exchange, msg } => run.send_request(exchange, msg),
            Step::Notification { msg } => run.send_raw(msg),
        }
    }
    // What is still queued (a notification after the last answer) goes out, even when
    // nothing is left to wait for.
    if !run.live.flush() {
        run.server_gone();
    }
    run.wait_for(|r| r.pending.is_empty(), None);
    let comparable = run.live.counts_comparable(base);
    let mut recorded = BTreeMap::new();
    for (_, method, _) in &causes.msgs {
        *recorded.entry(method.clone()).or_default() += 1;
    }
    let Run {
        missing,
        gone,
        seen,
        inbox,
        ..
    } = run;
    let counts = ServerCounts {
        recorded,
        seen,
        inbox,
        comparable,
    };
    (missing, gone, counts)
}

/// The server's requests and notifications by method, recorded and seen live, for the report
/// ([`server_messages`]). Counted once the run is over and the server has said all it will:
/// a server may say something as its stdin closes (after `drive`), which the recording holds
/// too; what came then is still in `inbox`.
pub(crate) struct ServerCounts {
    recorded: BTreeMap<String, u64>,
    seen: HashMap<String, u64>,
    inbox: mpsc::Receiver<Event>,
    /// Whether the two sides can be counted alike (not a stdio tape against an HTTP server,
    /// which sends a request's messages on its answer stream and the rest on a GET stream
    /// check does not open).
    comparable: bool,
}

impl ServerCounts {
    /// The methods whose counts differ, the server messages still in the inbox taken in.
    pub(crate) fn differing(mut self) -> Vec<server_messages::MessageCount> {
        if !self.comparable {
            return Vec::new();
        }
        while let Ok(event) = self.inbox.try_recv() {
            if let Event::Seen(msgs) = event {
                for (m, _) in msgs {
                    *self.seen.entry(m).or_default() += 1;
                }
            }
        }
        let observed = self.seen.into_iter().collect();
        server_messages::differing(&self.recorded, &observed)
    }
}

/// After the client's answer to a server request, the recorded pause before its next message is
/// kept, up to this long: a server may act on the answer (roots that replace its allowed
/// directories) without saying when it is done.
const SETTLE_MAX: Duration = Duration::from_secs(1);

/// A recorded notification that does not come live is waited for at most this long (a server
/// request, up to the request timeout): a new build may send fewer progress or log messages
/// (the report counts them, outside the grade); waiting for each the full timeout would only
/// slow the check.
const NOTIFICATION_WAIT: Duration = Duration::from_secs(2);

/// The server-initiated messages of the recording that the live side can see arrive, in
/// recorded order: (message index, method, whether it is a request).
struct Causes {
    msgs: Vec<(usize, String, bool)>,
}

impl Causes {
    fn of(base: &TapeIndex, live: &dyn Live) -> Causes {
        let msgs = base
            .msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.dir == Dir::S2C)
            .filter(|(_, m)| matches!(m.kind, Kind::Request | Kind::Notification))
            .filter(|(_, m)| live.sees(m))
            .map(|(i, m)| {
                (
                    i,
                    m.method.clone().unwrap_or_default(),
                    m.kind == Kind::Request,
                )
            })
            .collect();
        Causes { msgs }
    }

    /// When the client message at `at` came right after the client's answer to a server
    /// request that the live side sees: the recorded pause between the two, capped.
    fn settle(&self, base: &TapeIndex, at: usize) -> Option<Duration> {
        if self.msgs.is_empty() || at == 0 {
            return None;
        }
        let prev = base.msgs[..at].iter().rposition(|m| m.dir == Dir::C2S)?;
        let answer = &base.msgs[prev];
        if !matches!(answer.kind, Kind::Response | Kind::Error) {
            return None;
        }
        let gap = base.msgs[at].t_us.saturating_sub(answer.t_us);
        Some(Duration::from_micros(gap).min(SETTLE_MAX))
    }
}

/// What the live server must have sent before the next client message: counts by method of the
/// server's requests and notifications recorded before it (cumulative), less those given up on.
#[derive(Default)]
struct Needs {
    /// How many of `Causes::msgs` are before the current step.
    next: usize,
    /// Method → (how many are needed, whether one of them is a request).
    want: HashMap<String, (u64, bool)>,
    /// Method → how many were waited for and did not come.
    excused: HashMap<String, u64>,
}

impl Needs {
    /// Takes in the recorded server messages before `at`; true when there were new ones.
    fn add(&mut self, causes: &Causes, at: usize) -> bool {
        let start = self.next;
        while let Some((i, method, request)) = causes.msgs.get(self.next) {
            if *i >= at {
                break;
            }
            let w = self.want.entry(method.clone()).or_default();
            w.0 += 1;
            w.1 |= *request;
            self.next += 1;
        }
        self.next > start
    }

    fn met(&self, seen: &HashMap<String, u64>) -> bool {
        self.want.iter().all(|(m, (n, _))| {
            seen.get(m).copied().unwrap_or(0) + self.excused.get(m).copied().unwrap_or(0) >= *n
        })
    }

    /// Gives up on what has not come: later steps do not wait for it again (a late one still
    /// counts towards the next).
    fn excuse(&mut self, seen: &HashMap<String, u64>) {
        for (m, (n, _)) in &self.want {
            let have =
                seen.get(m).copied().unwrap_or(0) + self.excused.get(m).copied().unwrap_or(0);
            if have < *n {
                *self.excused.entry(m.clone()).or_default() += n - have;
            }
        }
    }

    /// Whether a request is among what is still awaited.
    fn awaits_request(&self, seen: &HashMap<String, u64>) -> bool {
        self.want.iter().any(|(m, (n, request))| {
            *request
                && seen.get(m).copied().unwrap_or(0) + self.excused.get(m).copied().unwrap_or(0)
                    < *n
        })
    }
}

/// Drives a live stdio server: started here, its requests answered with the recording's
/// answers by a reader thread, each answer compared by `observer` as it arrives, and everything
/// taped when `cfg.observed_tape` names a tape.
pub(crate) fn drive_stdio(
    base: &TapeIndex,
    cfg: &DriveConfig,
    observer: &mut Observer,
) -> Result<DriveOutcome, DriveError> {
    let tape_err = |path: &PathBuf, cause| DriveError::Tape {
        path: path.clone(),
        cause,
    };
    let spawn_err = |cause| DriveError::Spawn {
        command: shell_words(&cfg.command),
        cause,
    };
    let (mut child, tape) = match &cfg.observed_tape {
        Some(path) => {
            let (child, tape) =
                spawn_and_tape(&cfg.command, DEFAULT_SERVER, path, cfg.write.clone()).map_err(
                    |e| match e {
                        StartError::Spawn(cause) => spawn_err(cause),
                        StartError::Tape(cause) => tape_err(path, cause),
                    },
                )?;
            (child, Some(tape))
        }
        None => (
            crate::transport::stdio::spawn(&cfg.command).map_err(spawn_err)?,
            None,
        ),
    };
    let stdin: SharedStdin = Arc::new(Mutex::new(child.stdin.take()));
    let stdout = child.stdout.take().expect("stdout is piped");
    // Unbounded on purpose: the driver may be blocked writing to the server's stdin while the
    // server is blocked writing its stdout to the reader; a reader that blocked on a full
    // queue would close that circle. What bounds it is the server's output, one event per read.
    let (events, inbox) = mpsc::channel::<Event>();

    let answers = RecordedAnswers::new(base);
    let reader = {
        let (tape, stdin, max) = (tape.clone(), stdin.clone(), cfg.max_message);
        let base_answers = Arc::new(Mutex::new(answers));
        std::thread::Builder::new()
            .name("check-reader".into())
            .spawn(move || read_server(stdout, max, tape.as_ref(), &stdin, &base_answers, &events))
            .expect("spawn thread")
    };
    let mut live = StdioLive {
        tape: tape.clone(),
        stdin: stdin.clone(),
        out: Vec::new(),
        framer: Framer::new(usize::MAX),
    };
    let (missing, gone, counts) = drive(base, &mut live, inbox, cfg.timeout, &cfg.filler, observer);
    let run_error = gone.then(|| "the server's output ended before the session did".to_string());

    // Close the server's stdin and give it the grace period to exit.
    stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
    let waited = crate::transport::stdio::wait_with_grace(&mut child, cfg.grace);
    let (exit, lost_end) = server_end(child.id(), &waited);
    // Let the reader take the server's last words to the tape, then close it.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Counted now: what the server said as its stdin closed has come, as it was recorded.
    observer.server_messages(counts.differing());
    if let (Some(tape), Some(path)) = (tape, &cfg.observed_tape) {
        tape.close(exit.clone(), "mcptape check finished".into())
            .map_err(|cause| tape_err(path, cause))?;
    }
    Ok(DriveOutcome {
        missing,
        run_error,
        exit,
        lost_end,
    })
}

/// How the server ended, for the report; when waiting for it failed, the line that says so
/// (check then exits 70 after writing its report: the error was ignored, the report just
/// had no exit of the server's).
fn server_end(pid: u32, waited: &io::Result<ExitStatus>) -> (Option<ExitInfo>, Option<String>) {
    match server_ended(pid, waited, "the report is written without it") {
        Ok((info, _)) => (Some(info), None),
        Err(said) => (None, Some(said)),
    }
}

/// The client messages to send, in recorded order: requests and notifications (answers to server
/// requests are given when the live server asks; stray non-JSON lines are not replayed).
pub(crate) fn plan(base: &TapeIndex) -> Vec<Step> {
    let by_request: HashMap<usize, usize> = base
        .exchanges
        .iter()
        .enumerate()
        .map(|(i, e)| (e.request, i))
        .collect();
    base.msgs
        .iter()
        .enumerate()
        .filter(|(_, m)| m.dir == Dir::C2S)
        .filter_map(|(i, m)| match m.kind {
            Kind::Request => by_request
                .get(&i)
                .map(|&exchange| Step::Request { exchange, msg: i }),
            Kind::Notification => Some(Step::Notification { msg: i }),
            _ => None,
        })
        .collect()
}

struct Run<'a> {
    base: &'a TapeIndex,
    live: &'a mut dyn Live,
    timeout: Duration,
    filler: &'a super::fill::Filler,
    observer: &'a mut Observer,
    inbox: mpsc::Receiver<Event>,
    next_id: u64,
    /// Live id → (baseline exchange, when sent).
    pending: HashMap<String, (usize, Instant)>,
    /// Recorded request id (its text on the tape) → (baseline exchange, live id) of the latest
    /// request sent with it: what a recorded `notifications/cancelled` names.
    sent_ids: HashMap<String, (usize, String)>,
    /// Live id → its deadline, for requests cancelled as recorded that the recording left
    /// unanswered: silence is expected of them, so they are not waited for the full timeout.
    grace: HashMap<String, Instant>,
    /// The same for requests that timed out: an answer that comes after all is still compared
    /// (it is graded missing, but its latency is reported, as the observed tape held it).
    expired: HashMap<String, (usize, Instant)>,
    done: Vec<bool>,
    missing: HashMap<usize, String>,
    gone: bool,
    /// The latest `requestState` the live server gave, by (method, target): a multi-round-trip
    /// retry must carry the live server's state, not the recorded one.
    states: HashMap<(String, Option<String>), String>,
    /// Server-initiated messages seen live, by method.
    seen: HashMap<String, u64>,
    /// When the live server's latest request was seen (and answered).
    last_seen_request: Option<Instant>,
}

impl Run<'_> {
    /// Waits until the live server has sent what `needs` names: for a server request up to the
    /// request timeout, for notifications only up to `NOTIFICATION_WAIT`.
    fn wait_for_server(&mut self, needs: &mut Needs) {
        if needs.met(&self.seen) {
            return;
        }
        let limit = if needs.awaits_request(&self.seen) {
            self.timeout
        } else {
            NOTIFICATION_WAIT.min(self.timeout)
        };
        let until = Instant::now() + limit;
        let needs_ref = &*needs;
        self.wait_for(|r| r.gone || needs_ref.met(&r.seen), Some(until));
        needs.excuse(&self.seen);
    }

    /// Lets `pause` pass after the live server's latest request was answered (handling events
    /// meanwhile).
    fn settle(&mut self, pause: Duration) {
        let Some(answered) = self.last_seen_request else {
            return;
        };
        let until = answered + pause;
        if Instant::now() < until {
            self.wait_for(|r| r.gone, Some(until));
        }
    }

    fn send_request(&mut self, exchange: usize, msg: usize) {
        if self.gone {
            self.missing
                .insert(exchange, "never sent: the server had already exited".into());
            self.done[exchange] = true;
            return;
        }
        let meta = &self.base.msgs[msg];
        let Ok(bytes) = self.base.read_bytes(meta) else {
            self.done[exchange] = true;
            return;
        };
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        let text = self.filler.fill(&text);
        let id = self.next_id.to_string();
        self.next_id += 1;
        let mut out = with_id(&text, &id).unwrap_or(text);
        // The target costs a read and a parse of the request: only looked up when some live
        // state is kept (multi-round-trip servers).
        if !self.states.is_empty() {
            let method = meta.method.clone().unwrap_or_default();
            let target = self.base.call_target(meta);
            if let Some(state) = self.states.get(&(method, target)) {
                out = with_request_state(&out, state).unwrap_or(out);
            }
        }
        self.live.request(&id, out, &self.line_ends(meta));
        self.observer.sent(exchange);
        if let Some(recorded) = &meta.id {
            self.sent_ids
                .insert(recorded.clone(), (exchange, id.clone()));
        }
        self.pending.insert(id, (exchange, Instant::now()));
    }

    fn send_raw(&mut self, msg: usize) {
        if self.gone {
            return;
        }
        let meta = &self.base.msgs[msg];
        if let Ok(bytes) = self.base.read_bytes(meta) {
            let bytes = if meta.method.as_deref() == Some("notifications/cancelled") {
                self.cancel_for_live(bytes)
            } else {
                bytes
            };
            self.live.notification(&bytes, &self.line_ends(meta));
        }
    }

    /// A recorded `notifications/cancelled` made to name the live request: its `requestId` is
    /// the recorded client's id, and requests go out with fresh ids, so as recorded it would
    /// cancel whatever live request has that id (or none). A request cancelled so, whose
    /// recording has no answer, is waited for only `NOTIFICATION_WAIT`: silence was recorded.
    fn cancel_for_live(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        use crate::wire::rewrite::member_span;
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return bytes;
        };
        let Some((ps, pe)) = member_span(text, "params") else {
            return bytes;
        };
        let Some((rs, re)) = member_span(&text[ps..pe], "requestId") else {
            return bytes;
        };
        let raw = &text[ps + rs..ps + re];
        let found = self.sent_ids.get(raw).or_else(|| {
            let id = serde_json::from_str::<Value>(raw).ok()?;
            self.sent_ids.get(&canonical(&id))
        });
        let Some((exchange, live_id)) = found.cloned() else {
            return bytes;
        };
        if self.base.exchanges[exchange].response.is_none() && self.pending.contains_key(&live_id) {
            let until = Instant::now() + NOTIFICATION_WAIT.min(self.timeout);
            self.grace.insert(live_id.clone(), until);
        }
        let mut out = Vec::with_capacity(bytes.len() + live_id.len());
        out.extend_from_slice(&bytes[..ps + rs]);
        out.extend_from_slice(live_id.as_bytes());
        out.extend_from_slice(&bytes[ps + re..]);
        out
    }

    /// When the live request `id`, sent at `sent`, times out.
    fn deadline(&self, id: &str, sent: Instant) -> Instant {
        let full = sent + self.timeout;
        self.grace.get(id).map_or(full, |&g| g.min(full))
    }

    /// What the recorded client wrote around message `meta` on its line: a server may read its
    /// input by lines and care how they end (`\r\n`), as play gives a client the server's own.
    /// Read from the tape only for the rare line that had more than its JSON and a `\n`.
    fn line_ends(&self, meta: &MsgMeta) -> LineEnds {
        if meta.ends.is_plain() {
            return LineEnds::default();
        }
        match self.base.read_line_ends(meta) {
            Ok((before, after)) => LineEnds { before, after },
            Err(e) => {
                crate::diag!("mcptape check: tape line {}: {e}", meta.line);
                LineEnds::default()
            }
        }
    }

    /// Handles events until `cond` holds (or `until` passes), timing out requests as their
    /// deadlines pass.
    fn wait_for(&mut self, cond: impl Fn(&Run<'_>) -> bool, until: Option<Instant>) {
        while !cond(self) {
            if until.is_some_and(|u| Instant::now() >= u) {
                return;
            }
            // About to wait: what is queued goes out first (an answer may depend on it).
            if !self.live.flush() {
                self.server_gone();
            }
            if cond(self) {
                return;
            }
            if self.pending.is_empty() && self.gone {
                return;
            }
            let next_deadline = self
                .pending
                .iter()
                .map(|(id, (_, at))| self.deadline(id, *at))
                .chain(until)
                .min();
            let event = match next_deadline {
                Some(d) => self
                    .inbox
                    .recv_timeout(d.saturating_duration_since(Instant::now())),
                None => self
                    .inbox
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Answers(at, answers)) => {
                    for (id, bytes) in answers {
                        if let Some((ex, sent)) = self.pending.remove(&id) {
                            self.done[ex] = true;
                            if may_hold_state(&bytes) {
                                self.note_state(ex, &bytes);
                            }
                            self.observer.answer(ex, &bytes, micros(at, sent));
                        } else if let Some((ex, sent)) = self.expired.remove(&id) {
                            self.observer.answer(ex, &bytes, micros(at, sent));
                        }
                    }
                }
                Ok(Event::Failed(id, why)) => {
                    if let Some((ex, _)) = self.pending.remove(&id) {
                        self.done[ex] = true;
                        self.missing.insert(ex, why);
                    }
                }
                Ok(Event::Seen(msgs)) => {
                    for (m, request) in msgs {
                        *self.seen.entry(m).or_default() += 1;
                        if request {
                            self.last_seen_request = Some(Instant::now());
                        }
                    }
                }
                Ok(Event::Gone) | Err(mpsc::RecvTimeoutError::Disconnected) => self.server_gone(),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    let expired: Vec<String> = self
                        .pending
                        .iter()
                        .filter(|(id, (_, at))| self.deadline(id, *at) <= now)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in expired {
                        if let Some((ex, sent)) = self.pending.remove(&id) {
                            self.done[ex] = true;
                            // Cancelled and unanswered, as recorded: no answer is no miss.
                            if self.grace.remove(&id).is_none() {
                                self.missing
                                    .insert(ex, format!("no answer within {:?}", self.timeout));
                            }
                            self.expired.insert(id, (ex, sent));
                        }
                    }
                }
            }
        }
    }

    fn server_gone(&mut self) {
        if self.gone {
            return;
        }
        self.gone = true;
        for (_, (ex, _)) in self.pending.drain() {
            self.done[ex] = true;
            self.missing.insert(
                ex,
                "no answer: the server's output ended (it exited or crashed)".into(),
            );
        }
    }

    fn note_state(&mut self, ex: usize, bytes: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        let result = &v["result"];
        if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return;
        }
        if let Some(state) = result.get("requestState") {
            let req = &self.base.msgs[self.base.exchanges[ex].request];
            let key = (
                req.method.clone().unwrap_or_default(),
                self.base.call_target(req),
            );
            self.states.insert(key, canonical(state));
        }
    }
}

/// Microseconds from `sent` to `at`.
fn micros(at: Instant, sent: Instant) -> u64 {
    at.saturating_duration_since(sent).as_micros() as u64
}

type SharedStdin = Arc<Mutex<Option<ChildStdin>>>;

/// The stdio side: client messages taped and batched, written to the server's stdin when the
/// driver is about to wait. Nothing is waited for between them, so what overlapped in the
/// recording still overlaps, at one system call (and one server wake-up) per batch rather
/// than per message.
struct StdioLive {
    tape: Option<Recorder>,
    stdin: SharedStdin,
    out: Vec<u8>,
    /// Frames the batch for the tape (whole lines only).
    framer: Framer,
}

impl StdioLive {
    fn queue(&mut self, bytes: &[u8], ends: &LineEnds) {
        self.out.extend_from_slice(&ends.before);
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(&ends.after);
        self.out.push(b'\n');
        // Batches stay well under a pipe's capacity, so one write never holds the server's
        // stdin much longer than a single message did.
        if self.out.len() >= FLUSH_AT && !self.flush() {
            // The next flush, before a wait, reports the server gone.
        }
    }
}

impl Live for StdioLive {
    fn request(&mut self, _id: &str, text: String, ends: &LineEnds) {
        self.queue(text.as_bytes(), ends);
    }

    fn notification(&mut self, text: &[u8], ends: &LineEnds) {
        self.queue(text, ends);
    }

    fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        // The batch's tape lines first, then the write.
        if let Some(tape) = &self.tape {
            tape.chunk(&mut self.framer, Dir::C2S, &self.out);
        }
        let sent = write_stdin(&self.stdin, &self.out);
        self.out.clear();
        if self.out.capacity() > OUT_KEEP {
            self.out.shrink_to(OUT_KEEP);
        }
        sent
    }
}

/// `params.requestState` replaced by `state` (raw JSON text).
pub(crate) fn with_request_state(message: &str, state: &str) -> Option<String> {
    let obj: RawObject<'_> = serde_json::from_str(message).ok()?;
    let params: RawObject<'_> = serde_json::from_str(obj.get("params")?.get()).ok()?;
    params.get("requestState")?;
    Some(obj.to_string_with("params", &params.to_string_with("requestState", state)))
}

/// Queued client messages are written once they reach this size (bytes), waiting or not.
const FLUSH_AT: usize = 16 * 1024;

/// The queued client messages kept in memory between batches, at most (bytes).
const OUT_KEEP: usize = 1 << 20;

/// Tapes a client message, then writes it to the server framed as `ends` says. False when the
/// server's stdin is gone.
fn write_client(
    tape: Option<&Recorder>,
    stdin: &SharedStdin,
    bytes: &[u8],
    ends: &LineEnds,
) -> bool {
    let mut line = Vec::with_capacity(ends.before.len() + bytes.len() + ends.after.len() + 1);
    line.extend_from_slice(&ends.before);
    line.extend_from_slice(bytes);
    line.extend_from_slice(&ends.after);
    line.push(b'\n');
    if let Some(tape) = tape {
        if ends.before.is_empty() && ends.after.is_empty() {
            tape.message(Dir::C2S, bytes, None);
        } else {
            // Framed as a line, so the observed tape keeps its whitespace and `\r\n` too.
            tape.chunk(&mut Framer::new(usize::MAX), Dir::C2S, &line);
        }
    }
    write_stdin(stdin, &line)
}

/// False when the server's stdin is gone.
fn write_stdin(stdin: &SharedStdin, bytes: &[u8]) -> bool {
    let mut guard = stdin.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Some(s) => s.write_all(bytes).and_then(|()| s.flush()).is_ok(),
        None => false,
    }
}

/// Whether an answer may hold `"resultType":"input_required"` (whose `requestState` the driver
/// keeps): only those are passed to the driver whole. An escape (`\u`) could spell the words
/// differently, so a message with one is passed too.
fn may_hold_state(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"input_required").is_some()
        || memchr::memmem::find(line, b"\\u").is_some()
}

/// The client's recorded answers to server-initiated requests, by method, in recorded order.
pub(crate) struct RecordedAnswers {
    /// Method → (canonical params of the recorded server request, the client's answer text, how
    /// its line was framed).
    by_method: HashMap<String, VecDeque<(String, String, LineEnds)>>,
}

impl RecordedAnswers {
    pub(crate) fn new(base: &TapeIndex) -> RecordedAnswers {
        let mut pairs: Vec<(usize, usize)> = base
            .exchanges
            .iter()
            .flat_map(|e: &Exchange| e.client_answers.iter().map(|(&q, &a)| (q, a)))
            .collect();
        pairs.extend(
            base.standalone
                .iter()
                .filter_map(|s| s.client_answer.map(|a| (s.msg, a))),
        );
        pairs.sort_unstable();
        let mut by_method: HashMap<String, VecDeque<(String, String, LineEnds)>> = HashMap::new();
        for (q, a) in pairs {
            let meta = &base.msgs[q];
            let params = base
                .read_bytes(meta)
                .ok()
                .and_then(|b| params_of(&b))
                .map(|p| canonical(&p))
                .unwrap_or_default();
            // Answers to server requests are small (sampling results, root lists): kept in memory
            // so the reader thread needs nothing else from the baseline.
            let answer_meta = &base.msgs[a];
            if let Ok(answer) = base.read_text(answer_meta) {
                let ends = if answer_meta.ends.is_plain() {
                    LineEnds::default()
                } else {
                    base.read_line_ends(answer_meta)
                        .map(|(before, after)| LineEnds { before, after })
                        .unwrap_or_default()
                };
                by_method
                    .entry(meta.method.clone().unwrap_or_default())
                    .or_default()
                    .push_back((params, answer, ends));
            }
        }
        RecordedAnswers { by_method }
    }

    /// The recorded answer for a live server request, and how its line was framed: the same
    /// params first, else the next one of the same method.
    pub(crate) fn take(&mut self, method: &str, params: &str) -> Option<(String, LineEnds)> {
        let q = self.by_method.get_mut(method)?;
        let pos = q.iter().position(|(p, _, _)| p == params).unwrap_or(0);
        q.remove(pos).map(|(_, a, ends)| (a, ends))
    }
}

/// What one read of the server's output brought, handed to the driver together.
#[derive(Default)]
struct Batch {
    answers: Vec<(String, Vec<u8>)>,
    seen: Vec<(String, bool)>,
}

fn read_server(
    mut stdout: impl Read,
    max: usize,
    tape: Option<&Recorder>,
    stdin: &SharedStdin,
    answers: &Mutex<RecordedAnswers>,
    events: &mpsc::Sender<Event>,
) {
    // The tape's framer and the driver's see the same bytes: each read is taped whole
    // (committed once), then its messages handled.
    let mut taped = Framer::new(max);
    let mut framer = Framer::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    // The answers of one read go to the driver together: one hand-off per read rather than
    // per answer.
    let mut batch = Batch::default();
    let handle = |frame: Frame<'_>, batch: &mut Batch| {
        let Frame::Line(line) = frame else { return };
        let c = classify(line.bytes);
        match (c.kind, c.id) {
            (Kind::Response | Kind::Error, Some(id)) => {
                batch.answers.push((id, line.bytes.to_vec()));
            }
            (Kind::Request, Some(id)) => {
                let method = c.method.unwrap_or_default();
                let (reply, ends) = recorded_reply(answers, line.bytes, &method, &id);
                write_client(tape, stdin, reply.as_bytes(), &ends);
                batch.seen.push((method, true));
            }
            (Kind::Notification, _) => batch.seen.push((c.method.unwrap_or_default(), false)),
            _ => {}
        }
    };
    let deliver = |batch: &mut Batch, at: Instant| {
        if !batch.seen.is_empty() {
            let _ = events.send(Event::Seen(std::mem::take(&mut batch.seen)));
        }
        if !batch.answers.is_empty() {
            let _ = events.send(Event::Answers(at, std::mem::take(&mut batch.answers)));
        }
    };
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let at = Instant::now();
                if let Some(tape) = tape {
                    tape.chunk(&mut taped, Dir::S2C, &buf[..n]);
                }
                framer.push(&buf[..n], |f| handle(f, &mut batch));
                deliver(&mut batch, at);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if let Some(tape) = tape {
        tape.finish_framer(&mut taped, Dir::S2C);
    }
    framer.finish(|f| handle(f, &mut batch));
    deliver(&mut batch, Instant::now());
    let _ = events.send(Event::Gone);
}

/// The client's recorded answer to a live server's request (its id made the server's) and how
/// its line was framed, or an error saying the recording has none.
pub(crate) fn recorded_reply(
    answers: &Mutex<RecordedAnswers>,
    request: &[u8],
    method: &str,
    id: &str,
) -> (String, LineEnds) {
    let params = params_of(request)
        .map(|p| canonical(&p))
        .unwrap_or_default();
    let recorded = answers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take(method, &params);
    recorded
        .and_then(|(text, ends)| Some((with_id(&text, id).ok()?, ends)))
        .unwrap_or_else(|| {
            let msg = serde_json::json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32601, "message": format!("mcptape check: the recording has no client answer to {method}")}});
            (with_id(&msg.to_string(), id).unwrap_or_default(), LineEnds::default())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tapes::TapeComparison;
    use crate::compare::{compare_tapes, Normalizer, Outcome};
    use crate::redact::{RedactConfig, Redactor};
    use crate::tape::{ServerDecl, TapeWriter};
    use crate::wire::Line;

    #[test]
    fn a_server_that_was_waited_for_has_its_exit_in_the_report() {
        let mut child = crate::transport::stdio::child_exiting_3();
        let waited = crate::transport::stdio::wait_with_grace(&mut child, Duration::from_secs(10));
        let (exit, lost) = server_end(child.id(), &waited);
        assert_eq!(exit.map(|x| x.code), Some(Some(3)));
        assert_eq!(lost, None);
    }

    /// Waiting for the server fails when something else reaped it (the kernel did, with
    /// SIGCHLD ignored, before `main` put it back to its default): check said nothing, its
    /// report just had no exit. Reaped here behind the `Child`'s back, `wait` fails as it
    /// would (ECHILD).
    #[test]
    fn a_server_whose_end_cannot_be_learned_is_said_to_be_an_internal_error() {
        let mut child = crate::transport::stdio::child_exiting_3();
        let pid = child.id();
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, which is not waited for anywhere else.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(reaped, pid as libc::pid_t);
        let waited = crate::transport::stdio::wait_with_grace(&mut child, Duration::from_secs(10));
        let (exit, lost) = server_end(pid, &waited);
        assert_eq!(exit, None);
        assert_eq!(
            lost.as_deref(),
            Some(format!(
                "mcptape: internal error: could not learn how the server (pid {pid}) ended: No child processes (os error 10); the report is written without it"
            ).as_str())
        );
    }

    #[test]
    fn only_answers_that_may_hold_a_state_are_passed_whole() {
        assert!(may_hold_state(
            br#"{"id":1,"result":{"resultType":"input_required","requestState":"s"}}"#
        ));
        // The same words spelled with an escape.
        assert!(may_hold_state(
            br#"{"id":1,"result":{"resultType":"input\u005frequired","requestState":"s"}}"#
        ));
        assert!(!may_hold_state(
            br#"{"id":1,"result":{"content":[{"type":"text","text":"hi"}]}}"#
        ));
    }

    /// Needs count server messages by method, cumulatively; what was given up on is not waited
    /// for again, and a late one counts towards the next need.
    #[test]
    fn needs_count_by_method_and_excuse_what_did_not_come() {
        let causes = Causes {
            msgs: vec![
                (2, "roots/list".into(), true),
                (4, "notifications/message".into(), false),
                (6, "notifications/message".into(), false),
            ],
        };
        let mut needs = Needs::default();
        let mut seen: HashMap<String, u64> = HashMap::new();
        assert!(!needs.add(&causes, 2), "nothing recorded before message 2");
        assert!(needs.met(&seen));
        assert!(needs.add(&causes, 5));
        assert!(!needs.met(&seen));
        assert!(needs.awaits_request(&seen));
        seen.insert("roots/list".into(), 1);
        assert!(!needs.met(&seen), "the log message is still awaited");
        assert!(!needs.awaits_request(&seen));
        needs.excuse(&seen);
        assert!(needs.met(&seen));
        // The second log message is needed next; the first, arriving late, counts for it.
        assert!(needs.add(&causes, 7));
        assert!(!needs.met(&seen));
        seen.insert("notifications/message".into(), 1);
        assert!(needs.met(&seen));
    }

    /// A stateful server: the first `ask` gets `input_required` with a live state, the retry
    /// echoes the state it carries; anything else gets an empty result.
    const SERVER: &str = r#"
import sys, json
n = 0
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    p = m.get("params") or {}
    if p.get("name") == "ask" and p.get("requestState") is None:
        n += 1
        r = {"resultType": "input_required", "requestState": "live-%d" % n}
    elif p.get("name") == "ask":
        r = {"content": [{"type": "text", "text": "state " + p["requestState"]}]}
    elif p.get("name") == "secret":
        r = {"content": [{"type": "text", "text": "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"}]}
    else:
        r = {"content": []}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"#;

    /// Where `drive_python` records the live session: beside the baseline.
    fn observed(base_path: &std::path::Path) -> std::path::PathBuf {
        base_path.with_file_name("observed.jsonl")
    }

    /// Drives the Python test server through the baseline tape at `base_path`, taping the
    /// session (redacted with the built-in rules) and comparing its answers as they arrive.
    fn drive_python(base_path: &std::path::Path) -> (DriveOutcome, TapeComparison) {
        let base = Arc::new(TapeIndex::load(base_path, None).unwrap());
        let redactor = Arc::new(Redactor::new(&RedactConfig::defaults()).unwrap());
        let cfg = DriveConfig {
            command: vec!["python3".into(), "-c".into(), SERVER.into()],
            timeout: Duration::from_secs(30),
            observed_tape: Some(observed(base_path)),
            max_message: 1 << 20,
            grace: Duration::from_secs(5),
            write: WriteOptions {
                redactor: Some(redactor.clone()),
                signing_key: None,
            },
            filler: Default::default(),
        };
        let mut observer = Observer::new(base.clone(), Normalizer::default(), Some(redactor));
        let outcome = drive_stdio(&base, &cfg, &mut observer).unwrap();
        (outcome, observer.finish())
    }

    fn write_tape(path: &std::path::Path, msgs: &[(Dir, &str)]) {
        let mut w = TapeWriter::create(path, WriteOptions::redacted()).unwrap();
        w.declare_server(ServerDecl::stdio(DEFAULT_SERVER, vec!["python3".into()]))
            .unwrap();
        for (dir, m) in msgs {
            let line = Line {
                bytes: m.as_bytes(),
                crlf: false,
                unterminated: false,
                bom: false,
            };
            w.message(DEFAULT_SERVER, *dir, &Frame::Line(line), Instant::now());
        }
        w.finish(None, None).unwrap();
    }

    /// Requests that overlapped in the recording are queued together; past `FLUSH_AT` bytes
    /// they go out without waiting, and every one is sent once, in recorded order.
    #[test]
    fn a_large_overlapping_batch_goes_out_in_parts_and_whole() {
        let dir = tempfile::tempdir().unwrap();
        let base_path = dir.path().join("base.jsonl");
        let pad = "x".repeat(1000);
        let n = 40; // 40 KB of requests: more than two FLUSH_AT batches
        let requests: Vec<String> = (1..=n)
            .map(|i| {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"plain","arguments":{{"pad":"{pad}","i":{i}}}}}}}"#
                )
            })
            .collect();
        let answers: Vec<String> = (1..=n)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"content":[]}}}}"#))
            .collect();
        let mut msgs: Vec<(Dir, &str)> = requests.iter().map(|r| (Dir::C2S, r.as_str())).collect();
        msgs.extend(answers.iter().map(|a| (Dir::S2C, a.as_str())));
        write_tape(&base_path, &msgs);
        let (outcome, _) = drive_python(&base_path);
        assert!(outcome.missing.is_empty(), "{:?}", outcome.missing);
        let text = std::fs::read_to_string(observed(&base_path)).unwrap();
        let sent: Vec<i64> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "msg" && v["dir"] == "c2s")
            .map(|v| v["msg"]["params"]["arguments"]["i"].as_i64().unwrap())
            .collect();
        assert_eq!(sent, (1..=n as i64).collect::<Vec<_>>());
    }

    /// Plain answers skip the state bookkeeping; an `input_required` answer still has its live
    /// state carried into the retry, and a notification after the last answer still goes out.
    #[test]
    fn live_request_state_is_carried_and_queued_messages_all_go_out() {
        let dir = tempfile::tempdir().unwrap();
        let base_path = dir.path().join("base.jsonl");
        write_tape(
            &base_path,
            &[
                (
                    Dir::C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","arguments":{}}}"#,
                ),
                (
                    Dir::S2C,
                    r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
                ),
                (
                    Dir::C2S,
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask","arguments":{}}}"#,
                ),
                (
                    Dir::S2C,
                    r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required","requestState":"rec-1"}}"#,
                ),
                (
                    Dir::C2S,
                    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask","arguments":{},"requestState":"rec-1"}}"#,
                ),
                (
                    Dir::S2C,
                    r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"state rec-1"}]}}"#,
                ),
                (
                    Dir::C2S,
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#,
                ),
            ],
        );
        let (outcome, _) = drive_python(&base_path);
        assert!(outcome.missing.is_empty(), "{:?}", outcome.missing);
        assert!(outcome.run_error.is_none(), "{:?}", outcome.run_error);
        let text = std::fs::read_to_string(observed(&base_path)).unwrap();
        let msgs: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "msg")
            .map(|v| v["msg"].clone())
            .collect();
        let retry = msgs
            .iter()
            .find(|m| m["params"]["requestState"].is_string())
            .expect("the retry was sent");
        assert_eq!(retry["params"]["requestState"], "live-1");
        assert!(msgs
            .iter()
            .any(|m| m["result"]["content"][0]["text"] == "state live-1"));
        assert_eq!(
            msgs.last().unwrap()["method"],
            "notifications/cancelled",
            "{msgs:?}"
        );
    }

    /// The answers compared as they arrive give what comparing the observed tape afterwards
    /// gives (how check worked before): for every exchange the same outcome and changes, and
    /// the same tool surface — over answers the same, changed, changed in error status, the
    /// same only once redacted, carrying a live `requestState`, and one the recording lacks.
    #[test]
    fn answers_compared_as_they_arrive_are_graded_as_the_observed_tape_compared() {
        let dir = tempfile::tempdir().unwrap();
        let base_path = dir.path().join("base.jsonl");
        let call = |id: u32, name: &str, extra: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{"id":{id}}}{extra}}}}}"#
            )
        };
        let result = |id: u32, r: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{r}}}"#);
        let msgs: Vec<(Dir, String)> = vec![
            (
                Dir::C2S,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(),
            ),
            (
                Dir::S2C,
                result(
                    1,
                    r#"{"tools":[{"name":"plain","inputSchema":{"type":"object"}}]}"#,
                ),
            ),
            (Dir::C2S, call(2, "plain", "")),
            (Dir::S2C, result(2, r#"{"content":[]}"#)),
            (Dir::C2S, call(3, "plain", "")),
            (
                Dir::S2C,
                result(3, r#"{"content":[{"type":"text","text":"old"}]}"#),
            ),
            (Dir::C2S, call(4, "secret", "")),
            (
                Dir::S2C,
                result(
                    4,
                    r#"{"content":[{"type":"text","text":"token ghp_abcdefghijklmnopqrstuvwxyz0123456789"}]}"#,
                ),
            ),
            (Dir::C2S, call(5, "plain", "")),
            (
                Dir::S2C,
                r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32000,"message":"down"}}"#.into(),
            ),
            (Dir::C2S, call(6, "ask", "")),
            (
                Dir::S2C,
                result(
                    6,
                    r#"{"resultType":"input_required","requestState":"rec-1"}"#,
                ),
            ),
            (Dir::C2S, call(7, "ask", r#","requestState":"rec-1""#)),
            (
                Dir::S2C,
                result(7, r#"{"content":[{"type":"text","text":"state rec-1"}]}"#),
            ),
            // No recorded answer: the live one is a change.
            (Dir::C2S, call(8, "plain", "")),
        ];
        let msgs: Vec<(Dir, &str)> = msgs.iter().map(|(d, m)| (*d, m.as_str())).collect();
        write_tape(&base_path, &msgs);
        let (outcome, live) = drive_python(&base_path);
        assert!(outcome.missing.is_empty(), "{:?}", outcome.missing);

        let base = TapeIndex::load(&base_path, None).unwrap();
        let observed = TapeIndex::load_own(&observed(&base_path)).unwrap();
        let taped = compare_tapes(&base, &observed, &Normalizer::default());
        let summary = |c: &TapeComparison| {
            c.exchanges
                .iter()
                .map(|e| {
                    (
                        e.exchange.clone(),
                        e.outcome,
                        e.changes.clone(),
                        e.latency_us,
                        e.other_latency_us.is_some(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(summary(&live), summary(&taped));
        assert_eq!(live.tool_surface, taped.tool_surface);
        assert!(!live.tool_surface.is_empty(), "the tool `plain` is gone");
        let outcomes: Vec<Outcome> = live.exchanges.iter().map(|e| e.outcome).collect();
        use Outcome::{Changed, Same};
        assert_eq!(
            outcomes,
            [Changed, Same, Changed, Same, Changed, Changed, Changed, Changed]
        );
    }
}
