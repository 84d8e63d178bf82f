//! The process-wide parts the library leaves to the binary: which tokio runtime a command runs
//! on, and what the process does with signals.

use anyhow::{Context, Result};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::mpsc;

/// One thread: for loops where every step takes one lock anyway (recording over HTTP, serving
/// stdio), so a message's hops between tasks need no wake-up of another worker.
pub fn single() -> Result<Runtime> {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Two workers (the machine's cores in CI): for servers of many concurrent sessions.
pub fn multi() -> Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The signals `record` passes on to its stdio server (INT, TERM, HUP, QUIT), caught from now
/// on: none of them can kill mcptape before its tape is closed. The server, spawned later,
/// starts with the default dispositions (exec resets caught signals).
pub fn forwarded_signals() -> Result<mpsc::UnboundedReceiver<i32>> {
    let mut signals = signal_hook::iterator::Signals::new([
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
    ])
    .context("setting up signal forwarding")?;
    // Unbounded: a signal handler's thread must never wait, and signals are few.
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if tx.send(sig).is_err() {
                    break;
                }
            }
        })
        .context("starting the signal thread")?;
    Ok(rx)
}

/// Completes with the signal's name on SIGINT or SIGTERM: the end of an HTTP listener. The
/// handlers are installed before this returns (so call it before the URL is given out): a
/// signal that comes after is never lost and never takes its default action. Needs a runtime.
pub fn stop_signal() -> Result<impl Future<Output = String>> {
    let mut stop = mcptape::transport::http::StopSignals::new()
        .context("setting up the SIGINT and SIGTERM handlers")?;
    Ok(async move { stop.recv().await.to_string() })
}

/// This process's stdin and stdout as raw descriptors: no std buffering on stdin (a proxy must
/// not hold the client's bytes back) and no line buffering on stdout. Dropping the stdout one
/// closes the client's pipe (see [`ClientOut`]).
pub fn stdio() -> (FdIo, ClientOut) {
    // SAFETY: fds 0 and 1 are ours for the whole process; ManuallyDrop never closes them.
    unsafe {
        (
            FdIo(ManuallyDrop::new(std::fs::File::from_raw_fd(0))),
            ClientOut(FdIo(ManuallyDrop::new(std::fs::File::from_raw_fd(1)))),
        )
    }
}

/// This process's stdout, to the client: when it is dropped (the server closed its output),
/// the client's pipe is closed at once, so the client sees EOF while mcptape still waits for
/// the server to exit. fd 1 is pointed at `/dev/null` rather than closed, so it can never be
/// reused by a file opened later.
pub struct ClientOut(FdIo);

impl std::io::Write for ClientOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ClientOut {
    fn drop(&mut self) {
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            // SAFETY: dup2 onto fd 1, which this process owns; `null` stays valid for the call.
            unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) };
        }
    }
}

/// Raw fd I/O without std's stdin buffering or stdout line buffering.
pub struct FdIo(ManuallyDrop<std::fs::File>);

impl std::io::Read for FdIo {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut *self.0, buf)
    }
}

impl std::io::Write for FdIo {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::Write::write(&mut *self.0, buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
