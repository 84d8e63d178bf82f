//! `mcptape record` over stdio: the client's stdin/stdout on one side, the server process on the
//! other. Every chunk read is forwarded unchanged; the framer only watches a copy, and each
//! complete message reaches the tape (kernel) before the chunk that completes it is forwarded.
//!
//! The two relays are plain threads, not tasks: a relay of two pipes is two blocking loops, and
//! a thread waking on its own read costs less latency than a reactor hop. The session's end (the
//! client closing, the server exiting, a signal to forward) is awaited by the async caller.

use super::recorder::{
    server_ended, spawn_and_join, spawn_and_tape, RecordError, RecordOutcome, Recorder,
};
use crate::tape::WriteOptions;
use crate::transport::stdio as child;
use crate::wire::{Dir, Framer};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::sync::mpsc;

/// Size of one read from either pipe; a pipe holds 64 KiB on Linux, so this drains it in one go.
const CHUNK: usize = 64 * 1024;

/// After the server exits, how long to wait for its stdout to reach EOF (a grandchild may hold
/// the pipe open) before closing the tape anyway.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// What `record` over stdio needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordConfig {
    /// Where the tape goes.
    pub tape: PathBuf,
    /// The server command and its arguments.
    pub command: Vec<String>,
    /// The server's label on the tape.
    pub server_label: String,
    /// Largest message kept whole, in bytes.
    pub max_message: usize,
    /// After the client closes stdin, how long the server has to exit by itself.
    pub grace: Duration,
    /// How the tape is written: the redactor, the signing key.
    pub write: WriteOptions,
    /// Join the recording another process owns at this socket (`mcptape run`) instead of
    /// writing a tape: `tape` and `write` are then unused.
    pub join: Option<PathBuf>,
}

impl RecordConfig {
    /// A configuration with the defaults (64 MiB messages, a 5 s grace period), the tape written
    /// with `write` ([`WriteOptions::redacted`] for the built-in rules and no signature).
    pub fn new(tape: PathBuf, command: Vec<String>, write: WriteOptions) -> RecordConfig {
        RecordConfig {
            tape,
            command,
            server_label: crate::tape::DEFAULT_SERVER.into(),
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            grace: Duration::from_secs(5),
            write,
            join: None,
        }
    }
}

enum Event {
    ClientClosed,
    ServerOutputClosed,
    ServerExited(io::Result<ExitStatus>),
}

/// Records a session until the client closes and the server exits: the client's messages are
/// read from `from_client` and the server's forwarded to `to_client` (the binary gives its own
/// stdin and stdout). Each signal number received on `signals` is forwarded to the server (the
/// binary feeds it SIGINT, SIGTERM, SIGHUP and SIGQUIT); the session ends when the server does.
pub async fn record_stdio(
    cfg: &RecordConfig,
    from_client: impl Read + Send + 'static,
    to_client: impl Write + Send + 'static,
    mut signals: mpsc::UnboundedReceiver<i32>,
) -> Result<RecordOutcome, RecordError> {
    let started = match &cfg.join {
        Some(socket) => spawn_and_join(&cfg.command, &cfg.server_label, socket)
            .map_err(|e| e.for_record(&cfg.command, socket)),
        None => spawn_and_tape(
            &cfg.command,
            &cfg.server_label,
            &cfg.tape,
            cfg.write.clone(),
        )
        .map_err(|e| e.for_record(&cfg.command, &cfg.tape)),
    };
    let (server, tape) = started?;
    let pid = server.id();
    // Unbounded, and bounded all the same: three threads send one event each.
    let (events, mut inbox) = mpsc::unbounded_channel::<Event>();
    start_relays(
        server,
        from_client,
        to_client,
        &tape,
        cfg.max_message,
        events,
    );

    let (status, reason) = supervise(pid, cfg.grace, &mut inbox, &mut signals).await;
    let (exit, exit_code) = match server_ended(pid, &status, "the tape is closed without it") {
        Ok(ended) => ended,
        Err(said) => {
            crate::diag!("{said}");
            (Default::default(), crate::exit::SOFTWARE)
        }
    };
    // The relay threads may still hold the tape (stdin open): the closing line ends it for them.
    let closed = tape
        .close(Some(exit), reason)
        .map_err(|cause| RecordError::Tape {
            path: cfg.tape.clone(),
            cause,
        })?;
    Ok(RecordOutcome::new(closed, exit_code))
}

/// One thread per direction and one waiting for the server's exit, each saying on `events`
/// when its part is over. Threads, not tasks: the pipes and the client's I/O block.
fn start_relays(
    mut server: std::process::Child,
    mut from_client: impl Read + Send + 'static,
    mut to_client: impl Write + Send + 'static,
    tape: &Recorder,
    max: usize,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut child_in = server.stdin.take().expect("stdin is piped");
    let mut child_out = server.stdout.take().expect("stdout is piped");
    let thread = |name: &str| std::thread::Builder::new().name(name.into());
    let (c2s_tape, c2s_events) = (tape.clone(), events.clone());
    thread("c2s")
        .spawn(move || {
            let mut forward = true;
            relay(&mut from_client, max, &c2s_tape, Dir::C2S, |chunk| {
                if forward && child_in.write_all(chunk).is_err() {
                    // The server closed its stdin (or died): keep recording what the client says.
                    forward = false;
                }
            });
            // Said before the server sees EOF: a server that exits at once on EOF must not win
            // the race and have its exit taken for the reason the session ended.
            let _ = c2s_events.send(Event::ClientClosed);
            drop(child_in); // EOF for the server
        })
        .expect("spawn thread");
    let (s2c_tape, s2c_events) = (tape.clone(), events.clone());
    thread("s2c")
        .spawn(move || {
            let mut forward = true;
            relay(&mut child_out, max, &s2c_tape, Dir::S2C, |chunk| {
                if forward
                    && to_client
                        .write_all(chunk)
                        .and_then(|()| to_client.flush())
                        .is_err()
                {
                    // The client is gone: keep draining and recording the server.
                    forward = false;
                }
            });
            // The server's output is over: so is the client's (EOF now, not when the server
            // process finally exits; a `to_client` of the binary's closes its pipe on drop).
            drop(to_client);
            let _ = s2c_events.send(Event::ServerOutputClosed);
        })
        .expect("spawn thread");
    thread("wait")
        .spawn(move || {
            let _ = events.send(Event::ServerExited(server.wait()));
        })
        .expect("spawn thread");
}

/// Waits for the server to exit, forwarding signals, and once the client has closed (or the
/// server has closed its stdout: the client got its EOF when the relay dropped its side),
/// giving it the grace period, then SIGTERM, then SIGKILL. Returns how it exited and why the
/// session ended.
async fn supervise(
    pid: u32,
    grace: Duration,
    inbox: &mut mpsc::UnboundedReceiver<Event>,
    signals: &mut mpsc::UnboundedReceiver<i32>,
) -> (io::Result<ExitStatus>, String) {
    let mut deadline: Option<(tokio::time::Instant, i32)> = None; // when to send which signal
    let mut reason = None;
    let mut output_closed = false;
    // Whether the grace period started with the server closing its stdout while it kept
    // running (the client has had its EOF then: the session is over), not with stdin closing.
    let mut after_stdout = false;
    let status = loop {
        let timer = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // Cancel-safe: the channels keep what was not received; the timer is made anew each
        // turn from `deadline`.
        tokio::select! {
            ev = inbox.recv() => match ev {
                Some(Event::ClientClosed) => {
                    reason.get_or_insert("the client closed stdin");
                    deadline.get_or_insert((tokio::time::Instant::now() + grace, libc::SIGTERM));
                }
                Some(Event::ServerOutputClosed) => {
                    output_closed = true;
                    if deadline.is_none() {
                        after_stdout = true;
                        deadline = Some((tokio::time::Instant::now() + grace, libc::SIGTERM));
                    }
                }
                Some(Event::ServerExited(status)) => break status,
                None => break Err(io::Error::other("lost track of the server process")),
            },
            Some(sig) = signals.recv() => {
                reason = Some(match sig {
                    libc::SIGINT => "SIGINT forwarded to the server",
                    libc::SIGTERM => "SIGTERM forwarded to the server",
                    libc::SIGHUP => "SIGHUP forwarded to the server",
                    _ => "signal forwarded to the server",
                });
                child::signal(pid, sig);
            }
            () = timer => {
                let (_, sig) = deadline.take().expect("a timer implies a deadline");
                child::signal(pid, sig);
                if sig == libc::SIGTERM {
                    reason = Some(if after_stdout {
                        "the server closed its stdout and did not exit within the grace period: SIGTERM"
                    } else {
                        "the server did not exit within the grace period after stdin closed: SIGTERM"
                    });
                    deadline = Some((tokio::time::Instant::now() + child::TERM_TO_KILL, libc::SIGKILL));
                } else {
                    reason = Some("the server did not exit after SIGTERM: SIGKILL");
                }
            }
        }
    };
    // Let the server's last words reach the tape (unless its output already ended).
    if !output_closed {
        let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, async {
            while let Some(ev) = inbox.recv().await {
                if matches!(ev, Event::ServerOutputClosed) {
                    break;
                }
            }
        })
        .await;
    }
    (status, reason.unwrap_or("the server exited").to_string())
}

/// Reads `input` to EOF; each chunk's complete messages go to the tape first, then the chunk is
/// handed to `forward` unchanged.
fn relay(
    input: &mut dyn Read,
    max: usize,
    tape: &Recorder,
    dir: Dir,
    mut forward: impl FnMut(&[u8]),
) {
    let mut framer = Framer::new(max);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        tape.chunk(&mut framer, dir, chunk);
        forward(chunk);
    }
    tape.finish_framer(&mut framer, dir);
}
