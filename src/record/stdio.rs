//! `mcptape record` over stdio: the client's stdin/stdout on one side, the server process on the
//! other. Every chunk read is forwarded unchanged; the framer only watches a copy, and each
//! complete message reaches the tape (kernel) before the chunk that completes it is forwarded.
//!
//! Plain threads, not async: a relay of two pipes is two blocking loops, and a thread waking on
//! its own read costs less latency than a reactor hop.

use crate::tape::{End, ExitInfo, ServerDecl, TapeWriter, WriteOptions};
use crate::wire::{Dir, Frame, Framer};
use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Size of one read from either pipe; a pipe holds 64 KiB on Linux, so this drains it in one go.
const CHUNK: usize = 64 * 1024;

/// After the server exits, how long to wait for its stdout to reach EOF (a grandchild may hold
/// the pipe open) before closing the tape anyway.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// After SIGTERM at the end of the grace period, how long before SIGKILL.
const TERM_TO_KILL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub tape: PathBuf,
    pub command: Vec<String>,
    pub server_label: String,
    pub max_message: usize,
    /// After the client closes stdin, how long the server has to exit by itself.
    pub grace: Duration,
    /// Redaction rules (validated by the caller: see `Redactor::new`).
    pub redact: crate::redact::RedactConfig,
    /// Sign the tape's hash chain with this HMAC key.
    pub signing_key: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    // `cause`, not `source`: the message includes it, and anyhow would print it a second time.
    #[error("could not start server `{command}`: {cause}")]
    Spawn { command: String, cause: io::Error },
    #[error("could not write tape {}: {cause}", path.display())]
    Tape { path: PathBuf, cause: io::Error },
    #[error("could not set up signal forwarding: {cause}")]
    Signals { cause: io::Error },
}

#[derive(Debug)]
pub struct RecordOutcome {
    pub tape: PathBuf,
    pub end: End,
    /// The exit code mcptape should exit with: the server's, or 128+n for a signal.
    pub exit_code: i32,
    /// Tape lines that could not be written (disk full…), with the first error.
    pub write_failure: Option<(u64, String)>,
}

enum Event {
    ClientClosed,
    ServerOutputClosed,
    ServerExited(io::Result<ExitStatus>),
    Signal(i32),
}

pub fn record_stdio(cfg: &RecordConfig) -> Result<RecordOutcome, RecordError> {
    let tape_err = |cause| RecordError::Tape {
        path: cfg.tape.clone(),
        cause,
    };
    let opts = WriteOptions {
        redactor: crate::redact::Redactor::for_config(&cfg.redact),
        signing_key: cfg.signing_key.clone(),
    };
    let (mut child, writer) = start_stdio_server(&cfg.command, &cfg.server_label, &cfg.tape, opts)
        .map_err(|e| match e {
            StartError::Spawn(cause) => RecordError::Spawn {
                command: shell_words(&cfg.command),
                cause,
            },
            StartError::Tape(cause) => tape_err(cause),
        })?;
    ignore_sigxfsz();
    let pid = child.id() as libc::pid_t;
    let tape = Arc::new(Mutex::new(Some(writer)));
    let warned = Arc::new(AtomicBool::new(false));
    let (events, inbox) = mpsc::channel::<Event>();

    let mut child_in = child.stdin.take().expect("stdin is piped");
    let mut child_out = child.stdout.take().expect("stdout is piped");

    // Client → server.
    {
        let (tape, warned, events, label, max) = (
            tape.clone(),
            warned.clone(),
            events.clone(),
            cfg.server_label.clone(),
            cfg.max_message,
        );
        std::thread::Builder::new()
            .name("c2s".into())
            .spawn(move || {
                // SAFETY: fd 0 is our stdin for the whole process life; ManuallyDrop never closes it.
                let mut stdin = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
                let mut forward = true;
                relay(
                    &mut *stdin,
                    max,
                    &tape,
                    &warned,
                    &label,
                    Dir::C2S,
                    |chunk| {
                        if forward && child_in.write_all(chunk).is_err() {
                            // The server closed its stdin (or died): keep recording what the client says.
                            forward = false;
                        }
                    },
                );
                // Said before the server sees EOF: a server that exits at once on EOF must not
                // win the race and have its exit taken for the reason the session ended.
                let _ = events.send(Event::ClientClosed);
                drop(child_in); // EOF for the server
            })
            .expect("spawn thread");
    }
    // Server → client.
    {
        let (tape, warned, events, label, max) = (
            tape.clone(),
            warned.clone(),
            events.clone(),
            cfg.server_label.clone(),
            cfg.max_message,
        );
        std::thread::Builder::new()
            .name("s2c".into())
            .spawn(move || {
                // SAFETY: fd 1 is our stdout for the whole process life; ManuallyDrop never closes it.
                let mut stdout = ManuallyDrop::new(unsafe { File::from_raw_fd(1) });
                let mut forward = true;
                relay(
                    &mut child_out,
                    max,
                    &tape,
                    &warned,
                    &label,
                    Dir::S2C,
                    |chunk| {
                        if forward && stdout.write_all(chunk).is_err() {
                            // The client is gone: keep draining and recording the server.
                            forward = false;
                        }
                    },
                );
                let _ = events.send(Event::ServerOutputClosed);
            })
            .expect("spawn thread");
    }
    // The server's exit.
    {
        let events = events.clone();
        std::thread::Builder::new()
            .name("wait".into())
            .spawn(move || {
                let _ = events.send(Event::ServerExited(child.wait()));
            })
            .expect("spawn thread");
    }
    // Signals to mcptape go to the server; the session ends when the server does.
    let mut signals = signal_hook::iterator::Signals::new([
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
    ])
    .map_err(|cause| RecordError::Signals { cause })?;
    let signal_handle = signals.handle();
    {
        let events = events.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if events.send(Event::Signal(sig)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn thread");
    }
    drop(events);

    let mut deadline: Option<(Instant, i32)> = None; // when to send which signal
    let mut reason = None;
    let mut output_closed = false;
    let status = loop {
        let event = match deadline {
            Some((at, _)) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => inbox
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::ClientClosed) => {
                reason.get_or_insert("the client closed stdin");
                deadline = Some((Instant::now() + cfg.grace, libc::SIGTERM));
            }
            Ok(Event::ServerOutputClosed) => output_closed = true,
            Ok(Event::ServerExited(status)) => break status,
            Ok(Event::Signal(sig)) => {
                reason = Some(match sig {
                    libc::SIGINT => "SIGINT forwarded to the server",
                    libc::SIGTERM => "SIGTERM forwarded to the server",
                    libc::SIGHUP => "SIGHUP forwarded to the server",
                    _ => "signal forwarded to the server",
                });
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(pid, sig) };
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let (_, sig) = deadline.take().expect("timeout implies a deadline");
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(pid, sig) };
                if sig == libc::SIGTERM {
                    reason = Some("the server did not exit within the grace period after stdin closed: SIGTERM");
                    deadline = Some((Instant::now() + TERM_TO_KILL, libc::SIGKILL));
                } else {
                    reason = Some("the server did not exit after SIGTERM: SIGKILL");
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(io::Error::other("lost track of the server process"));
            }
        }
    };
    signal_handle.close();
    // Let the server's last words reach the tape (unless its output already ended).
    let drain_until = Instant::now() + DRAIN_AFTER_EXIT;
    if !output_closed {
        loop {
            match inbox.recv_timeout(drain_until.saturating_duration_since(Instant::now())) {
                Ok(Event::ServerOutputClosed) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    let (exit, exit_code) = match &status {
        Ok(st) => exit_info(st),
        Err(_) => (ExitInfo::default(), crate::exit::SOFTWARE),
    };
    let reason = reason.unwrap_or("the server exited").to_string();
    // The relay threads may still hold the writer (stdin open); take it under the lock.
    let writer = {
        let mut guard = tape.lock().unwrap_or_else(|p| p.into_inner());
        guard.take().expect("only the main thread takes the writer")
    };
    let dropped = writer.dropped();
    let failure = writer.failure();
    let path = writer.path().to_path_buf();
    let end = writer.finish(Some(exit), Some(reason)).map_err(tape_err)?;
    Ok(RecordOutcome {
        tape: path,
        end,
        exit_code,
        write_failure: failure.map(|f| (dropped, f)),
    })
}

/// A file-size limit (RLIMIT_FSIZE) must show up as a failed write — the tape marked incomplete,
/// the loss reported — not as SIGXFSZ killing mcptape silently mid-session. Called after the
/// server is spawned, so the server keeps the default disposition.
pub(crate) fn ignore_sigxfsz() {
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

pub(crate) enum StartError {
    Spawn(io::Error),
    Tape(io::Error),
}

/// Starts a stdio server (stdin and stdout piped, stderr passed through) and then opens its tape
/// with the server declared — in that order, so a server that cannot start costs no existing
/// tape. Shared by `record` and `check`.
pub(crate) fn start_stdio_server(
    command: &[String],
    label: &str,
    tape: &std::path::Path,
    opts: WriteOptions,
) -> Result<(std::process::Child, TapeWriter), StartError> {
    let program = command.first().ok_or_else(|| {
        StartError::Spawn(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no server command given",
        ))
    })?;
    let mut child = Command::new(program)
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(StartError::Spawn)?;
    // The command line can hold secrets too (`--api-key …`, `TOKEN=…`): the writer's redactor
    // takes them out when it declares the server.
    let argv = command.to_vec();
    let declared = TapeWriter::create(tape, opts).and_then(|mut w| {
        w.declare_server(ServerDecl {
            server: label.to_string(),
            transport: "stdio".into(),
            command: Some(argv),
            cwd: std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string()),
            url: None,
            t_us: 0,
        })?;
        Ok(w)
    });
    match declared {
        Ok(w) => Ok((child, w)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartError::Tape(e))
        }
    }
}

/// Reads `input` to EOF; each chunk's complete messages go to the tape first, then the chunk is
/// handed to `forward` unchanged.
fn relay(
    input: &mut dyn Read,
    max: usize,
    tape: &Mutex<Option<TapeWriter>>,
    warned: &AtomicBool,
    label: &str,
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
        let at = Instant::now();
        let chunk = &buf[..n];
        let mut guard = tape.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = guard.as_mut() {
            framer.push(chunk, |frame| {
                report_oversize(&frame, dir);
                w.message(label, dir, &frame, at)
            });
            commit(w, warned);
        }
        drop(guard);
        forward(chunk);
    }
    let at = Instant::now();
    let mut guard = tape.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = guard.as_mut() {
        framer.finish(|frame| {
            report_oversize(&frame, dir);
            w.message(label, dir, &frame, at)
        });
        commit(w, warned);
    }
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

fn commit(w: &mut TapeWriter, warned: &AtomicBool) {
    if let Err(e) = w.commit() {
        if !warned.swap(true, Ordering::Relaxed) {
            crate::diag!(
                "mcptape: WARNING: {e}; the session goes on, the tape will be marked incomplete"
            );
        }
    }
}

/// After the server's stdin is closed: waits up to `grace` for it to exit, then kills it.
/// Returns how it ended and the exit code mcptape should pass on (128+n for a signal).
pub(crate) fn wait_with_grace(
    child: &mut std::process::Child,
    grace: Duration,
) -> Option<(ExitInfo, i32)> {
    let deadline = Instant::now() + grace;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                break child.wait().ok();
            }
            Err(_) => break None,
        }
    };
    status.map(|st| exit_info(&st))
}

pub(crate) fn exit_info(st: &ExitStatus) -> (ExitInfo, i32) {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(code), _) => (
            ExitInfo {
                code: Some(code),
                signal: None,
            },
            code,
        ),
        (None, Some(sig)) => (
            ExitInfo {
                code: None,
                signal: Some(sig),
            },
            128 + sig,
        ),
        _ => (ExitInfo::default(), crate::exit::SOFTWARE),
    }
}

/// The command as a user would type it, for messages.
pub fn shell_words(cmd: &[String]) -> String {
    cmd.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
