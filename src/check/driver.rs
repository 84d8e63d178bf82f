//! Drives a live stdio server with a recording's client side: the recorded requests in recorded
//! order (those that overlapped in the recording are sent without waiting for each other),
//! server-initiated requests answered with the client's recorded answers. Everything that crosses
//! the wire is written to an observed tape, which is then compared with the baseline — so a
//! check run is itself a recording, and `--update` simply keeps it.

use crate::record::shell_words;
use crate::record::stdio::{start_stdio_server, StartError};
use crate::tape::index::{params_of, Exchange};
use crate::tape::{ExitInfo, TapeIndex, TapeWriter, WriteOptions, DEFAULT_SERVER};
use crate::wire::canonical::canonical;
use crate::wire::rewrite::{with_id, RawObject};
use crate::wire::{classify, Dir, Frame, Framer, Kind};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct DriveConfig {
    pub command: Vec<String>,
    /// How long each request may take.
    pub timeout: Duration,
    /// Where the observed session is written.
    pub observed_tape: PathBuf,
    pub max_message: usize,
    /// After the last answer and closing the server's stdin, how long it has to exit.
    pub grace: Duration,
    /// Redaction for the observed tape (it may become the baseline with `--update`).
    pub redact: crate::redact::RedactConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("could not start server `{command}`: {cause}")]
    Spawn { command: String, cause: io::Error },
    #[error("could not write the observed tape {}: {cause}", path.display())]
    Tape { path: PathBuf, cause: io::Error },
}

#[derive(Debug, Default)]
pub struct DriveOutcome {
    /// Baseline exchange → why it got no answer.
    pub missing: HashMap<usize, String>,
    /// Something that cut the run short.
    pub run_error: Option<String>,
    pub exit: Option<ExitInfo>,
}

enum Event {
    /// A response or error from the server, by its id text.
    Answer(String, Vec<u8>),
    /// The server's stdout ended.
    Gone,
}

/// One client message of the baseline to send, in recorded order.
pub(crate) enum Step {
    Request { exchange: usize, msg: usize },
    Notification { msg: usize },
}

type SharedWriter = Arc<Mutex<Option<TapeWriter>>>;
type SharedStdin = Arc<Mutex<Option<ChildStdin>>>;

pub fn drive_stdio(base: &TapeIndex, cfg: &DriveConfig) -> Result<DriveOutcome, DriveError> {
    let tape_err = |cause| DriveError::Tape {
        path: cfg.observed_tape.clone(),
        cause,
    };
    let opts = WriteOptions {
        redactor: crate::redact::Redactor::for_config(&cfg.redact),
        signing_key: None,
    };
    let (mut child, writer) = start_stdio_server(
        &cfg.command,
        DEFAULT_SERVER,
        &cfg.observed_tape,
        opts,
        &cfg.redact,
    )
    .map_err(|e| match e {
        StartError::Spawn(cause) => DriveError::Spawn {
            command: shell_words(&cfg.command),
            cause,
        },
        StartError::Tape(cause) => tape_err(cause),
    })?;
    crate::record::stdio::ignore_sigxfsz();
    let tape: SharedWriter = Arc::new(Mutex::new(Some(writer)));
    let stdin: SharedStdin = Arc::new(Mutex::new(child.stdin.take()));
    let stdout = child.stdout.take().expect("stdout is piped");
    let (events, inbox) = mpsc::channel::<Event>();

    let answers = RecordedAnswers::new(base);
    let reader = {
        let (tape, stdin, max) = (tape.clone(), stdin.clone(), cfg.max_message);
        let base_answers = Arc::new(Mutex::new(answers));
        std::thread::Builder::new()
            .name("check-reader".into())
            .spawn(move || read_server(stdout, max, &tape, &stdin, &base_answers, &events))
            .expect("spawn thread")
    };

    let mut run = Run {
        base,
        cfg,
        tape: &tape,
        stdin: &stdin,
        inbox,
        next_id: 1,
        pending: HashMap::new(),
        done: vec![false; base.exchanges.len()],
        missing: HashMap::new(),
        gone: false,
        states: HashMap::new(),
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
    for step in plan(base) {
        let at = match step {
            Step::Request { msg, .. } | Step::Notification { msg } => msg,
        };
        while answered_before < by_answer.len() && by_answer[answered_before].0 < at {
            let ex = by_answer[answered_before].1;
            run.wait_for(|r| r.done[ex] || r.gone);
            answered_before += 1;
        }
        match step {
            Step::Request { exchange, msg } => run.send_request(exchange, msg),
            Step::Notification { msg } => run.send_raw(msg),
        }
    }
    run.wait_for(|r| r.pending.is_empty());
    let run_error = run
        .gone
        .then(|| "the server's output ended before the session did".to_string());
    let missing = std::mem::take(&mut run.missing);
    drop(run);

    // Close the server's stdin and give it the grace period to exit.
    stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
    let ended = crate::record::stdio::wait_with_grace(&mut child, cfg.grace);
    let exit = ended.as_ref().map(|(info, _)| info.clone());
    // Let the reader take the server's last words to the tape, then close it.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let writer = tape
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .expect("only here is the writer taken");
    writer
        .finish(exit.clone(), Some("mcptape check finished".into()))
        .map_err(tape_err)?;
    Ok(DriveOutcome {
        missing,
        run_error,
        exit,
    })
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
    cfg: &'a DriveConfig,
    tape: &'a SharedWriter,
    stdin: &'a SharedStdin,
    inbox: mpsc::Receiver<Event>,
    next_id: u64,
    /// Live id → (baseline exchange, when sent).
    pending: HashMap<String, (usize, Instant)>,
    done: Vec<bool>,
    missing: HashMap<usize, String>,
    gone: bool,
    /// The latest `requestState` the live server gave, by (method, target): a multi-round-trip
    /// retry must carry the live server's state, not the recorded one.
    states: HashMap<(String, Option<String>), String>,
}

impl Run<'_> {
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
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let id = self.next_id.to_string();
        self.next_id += 1;
        let mut out = with_id(&text, &id).unwrap_or(text);
        let method = meta.method.clone().unwrap_or_default();
        let target = self.base.call_target(meta);
        if let Some(state) = self.states.get(&(method, target)) {
            out = with_request_state(&out, state).unwrap_or(out);
        }
        self.pending.insert(id, (exchange, Instant::now()));
        if !write_client(self.tape, self.stdin, out.as_bytes()) {
            self.server_gone();
        }
    }

    fn send_raw(&mut self, msg: usize) {
        if self.gone {
            return;
        }
        if let Ok(bytes) = self.base.read_bytes(&self.base.msgs[msg]) {
            if !write_client(self.tape, self.stdin, &bytes) {
                self.server_gone();
            }
        }
    }

    /// Handles events until `cond` holds, timing out requests as their deadlines pass.
    fn wait_for(&mut self, cond: impl Fn(&Run<'_>) -> bool) {
        while !cond(self) {
            if self.pending.is_empty() && self.gone {
                return;
            }
            let next_deadline = self
                .pending
                .values()
                .map(|(_, at)| *at + self.cfg.timeout)
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
                Ok(Event::Answer(id, bytes)) => {
                    if let Some((ex, _)) = self.pending.remove(&id) {
                        self.done[ex] = true;
                        self.note_state(ex, &bytes);
                    }
                }
                Ok(Event::Gone) | Err(mpsc::RecvTimeoutError::Disconnected) => self.server_gone(),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    let expired: Vec<String> = self
                        .pending
                        .iter()
                        .filter(|(_, (_, at))| *at + self.cfg.timeout <= now)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in expired {
                        if let Some((ex, _)) = self.pending.remove(&id) {
                            self.done[ex] = true;
                            self.missing
                                .insert(ex, format!("no answer within {:?}", self.cfg.timeout));
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

/// `params.requestState` replaced by `state` (raw JSON text).
pub(crate) fn with_request_state(message: &str, state: &str) -> Option<String> {
    let obj: RawObject<'_> = serde_json::from_str(message).ok()?;
    let params: RawObject<'_> = serde_json::from_str(obj.get("params")?.get()).ok()?;
    params.get("requestState")?;
    Some(obj.to_string_with("params", &params.to_string_with("requestState", state)))
}

/// Tapes a client message, then writes it to the server. False when the server's stdin is gone.
fn write_client(tape: &SharedWriter, stdin: &SharedStdin, bytes: &[u8]) -> bool {
    let mut line = Vec::with_capacity(bytes.len() + 1);
    line.extend_from_slice(bytes);
    line.push(b'\n');
    {
        let mut guard = tape.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = guard.as_mut() {
            let mut framer = Framer::new(usize::MAX);
            framer.push(&line, |f| {
                w.message(DEFAULT_SERVER, Dir::C2S, &f, Instant::now())
            });
            let _ = w.commit();
        }
    }
    let mut guard = stdin.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Some(s) => s.write_all(&line).and_then(|()| s.flush()).is_ok(),
        None => false,
    }
}

/// The client's recorded answers to server-initiated requests, by method, in recorded order.
pub(crate) struct RecordedAnswers {
    /// Method → (canonical params of the recorded server request, the client's answer text).
    by_method: HashMap<String, VecDeque<(String, String)>>,
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
        let mut by_method: HashMap<String, VecDeque<(String, String)>> = HashMap::new();
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
            if let Ok(answer) = base.read_text(&base.msgs[a]) {
                by_method
                    .entry(meta.method.clone().unwrap_or_default())
                    .or_default()
                    .push_back((params, answer));
            }
        }
        RecordedAnswers { by_method }
    }

    /// The recorded answer for a live server request: the same params first, else the next one
    /// of the same method.
    pub(crate) fn take(&mut self, method: &str, params: &str) -> Option<String> {
        let q = self.by_method.get_mut(method)?;
        let pos = q.iter().position(|(p, _)| p == params).unwrap_or(0);
        q.remove(pos).map(|(_, a)| a)
    }
}

fn read_server(
    mut stdout: impl Read,
    max: usize,
    tape: &SharedWriter,
    stdin: &SharedStdin,
    answers: &Mutex<RecordedAnswers>,
    events: &mpsc::Sender<Event>,
) {
    let mut framer = Framer::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    let mut handle = |frame: Frame<'_>| {
        {
            let mut guard = tape.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = guard.as_mut() {
                w.message(DEFAULT_SERVER, Dir::S2C, &frame, Instant::now());
                let _ = w.commit();
            }
        }
        let Frame::Line(line) = frame else { return };
        let c = classify(line.bytes);
        match (c.kind, c.id) {
            (Kind::Response | Kind::Error, Some(id)) => {
                let _ = events.send(Event::Answer(id, line.bytes.to_vec()));
            }
            (Kind::Request, Some(id)) => {
                let method = c.method.unwrap_or_default();
                let params = params_of(line.bytes)
                    .map(|p| canonical(&p))
                    .unwrap_or_default();
                let recorded = answers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(&method, &params);
                let reply = recorded
                    .and_then(|text| with_id(&text, &id).ok())
                    .unwrap_or_else(|| {
                        let msg = serde_json::json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32601, "message": format!("mcptape check: the recording has no client answer to {method}")}});
                        with_id(&msg.to_string(), &id).unwrap_or_default()
                    });
                write_client(tape, stdin, reply.as_bytes());
            }
            _ => {}
        }
    };
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => framer.push(&buf[..n], &mut handle),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    framer.finish(&mut handle);
    let _ = events.send(Event::Gone);
}
