//! `mcptape record --listen ADDR -- <stdio server>`: put a stdio server behind Streamable HTTP
//! while recording it. Each POSTed message is written to the server's stdin; a request is
//! answered with an SSE stream carrying what the server sends for it (progress by token, other
//! messages while it is the only request in flight) and ends with its response. Messages tied to
//! no request go to the GET stream. Everything is taped as it passes, as `record` does over stdio.

use super::recorder::spawn_and_tape;
use super::Recorder;
use super::{RecordError, RecordOutcome};
use crate::tape::{ExitInfo, WriteOptions};
use crate::transport::http::{accept_until, collect, plain, ChannelBody, RespBody};
use crate::transport::sse;
use crate::wire::{classify, Dir, Frame, Framer, Kind};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use std::collections::HashMap;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ChildStdin, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Messages waiting for one HTTP stream. Bounded: a client that stops reading holds the
/// server's output back rather than memory.
const STREAM_QUEUE: usize = 256;

/// What the bridge needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BridgeConfig {
    /// Where the tape goes.
    pub tape: PathBuf,
    /// The stdio server's command and arguments.
    pub command: Vec<String>,
    /// Where the HTTP side listens (loopback unless told otherwise).
    pub listen: SocketAddr,
    /// The server's label on the tape.
    pub server_label: String,
    /// How the tape is written: the redactor, the signing key.
    pub write: WriteOptions,
    /// Largest message kept whole, in bytes.
    pub max_message: usize,
    /// What the listener allows client connections (see
    /// [`Limits`](crate::transport::http::Limits)).
    pub limits: crate::transport::http::Limits,
    /// After the listener stops and the server's stdin closes, how long it has to exit.
    pub grace: Duration,
}

impl BridgeConfig {
    /// A configuration with the defaults (any free loopback port, 64 MiB messages, a 5 s grace
    /// period), the tape written with `write` ([`WriteOptions::redacted`] for the built-in
    /// rules).
    pub fn new(tape: PathBuf, command: Vec<String>, write: WriteOptions) -> BridgeConfig {
        BridgeConfig {
            tape,
            command,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            server_label: crate::tape::DEFAULT_SERVER.into(),
            write,
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            limits: Default::default(),
            grace: Duration::from_secs(5),
        }
    }
}

#[derive(Default)]
struct Routes {
    /// Request id → its answer stream.
    by_id: HashMap<String, mpsc::Sender<Bytes>>,
    /// Progress token → request id.
    by_token: HashMap<String, String>,
    /// The GET stream, or what waits for one.
    get: Option<mpsc::Sender<Bytes>>,
    waiting: crate::transport::http::Backlog<Bytes>,
}

struct Bridge {
    tape: Recorder,
    stdin: Mutex<Option<ChildStdin>>,
    routes: Arc<Mutex<Routes>>,
    session: String,
    max_message: usize,
}

/// Serves the stdio server over Streamable HTTP until `shutdown` completes (with the reason)
/// or the server's output ends; `on_ready` gets the URL to give the client.
pub async fn record_bridge(
    cfg: &BridgeConfig,
    shutdown: impl Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> Result<RecordOutcome, RecordError> {
    let tape_err = |cause| RecordError::Tape {
        path: cfg.tape.clone(),
        cause,
    };
    let (mut child, tape) = spawn_and_tape(
        &cfg.command,
        &cfg.server_label,
        &cfg.tape,
        cfg.write.clone(),
    )
    .map_err(|e| e.for_record(&cfg.command, &cfg.tape))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stdin = child.stdin.take();
    let (listener, local) = crate::transport::http::bind(cfg.listen)
        .await
        .map_err(|cause| RecordError::Listen {
            addr: cfg.listen,
            cause,
        })?;
    let bridge = Arc::new(Bridge {
        tape: tape.clone(),
        stdin: Mutex::new(stdin),
        routes: Arc::new(Mutex::new(Routes::default())),
        session: crate::transport::http::session_id(),
        max_message: cfg.max_message,
    });
    // The server's output: taped, then routed to the stream it belongs to.
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(STREAM_QUEUE);
    {
        let (bridge, max) = (bridge.clone(), cfg.max_message);
        std::thread::Builder::new()
            .name("bridge-stdout".into())
            .spawn(move || read_server(stdout, max, &bridge, &out_tx))
            .expect("spawn thread");
    }
    let mut router = {
        let bridge = bridge.clone();
        tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                bridge.route(line).await;
            }
        })
    };
    on_ready(&format!("http://{local}/mcp"));
    let handler = bridge.clone();
    // The router ends when the server's output does (the reader drops its sender).
    let stop = async {
        tokio::select! {
            _ = &mut router => "the server's output ended".to_string(),
            s = shutdown => format!("{s}: recording stopped"),
        }
    };
    let (reason, mut connections) = accept_until(&listener, cfg.limits, handler, stop).await;
    connections.abort_all();
    // EOF for the server, as over stdio.
    bridge.stdin.lock().expect("stdin lock").take();
    let (grace, pid) = (cfg.grace, child.id());
    let waited = tokio::task::spawn_blocking(move || {
        crate::transport::stdio::wait_with_grace(&mut child, grace)
    })
    .await
    .unwrap_or_else(|e| {
        Err(io::Error::other(format!(
            "the thread waiting for it failed: {e}"
        )))
    });
    let (exit, exit_code, said) = server_end(pid, &waited);
    if let Some(said) = said {
        crate::diag!("{said}");
    }
    let closed = tape.close(exit, reason).map_err(tape_err)?;
    let mut outcome = RecordOutcome::new(closed, exit_code);
    outcome.dropped = bridge.routes.lock().expect("routes lock").waiting.dropped;
    Ok(outcome)
}

/// How the server ended, for the closing line, and the exit code the bridge passes on; when
/// waiting for it failed, no exit on the tape, exit 70 and the line that says so (it was taken
/// for exit 0).
fn server_end(
    pid: u32,
    waited: &io::Result<ExitStatus>,
) -> (Option<ExitInfo>, i32, Option<String>) {
    match super::recorder::server_ended(pid, waited, "the tape is closed without it") {
        Ok((info, code)) => (Some(info), code, None),
        Err(said) => (None, crate::exit::SOFTWARE, Some(said)),
    }
}

impl Bridge {
    async fn post(&self, body: Bytes) -> Response<RespBody> {
        // One message per line on the server's stdin.
        let line = crate::wire::codec::one_line(body.trim_ascii()).into_owned();
        let c = classify(&line);
        let stream = if c.kind == Kind::Request {
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            let mut r = self.routes.lock().expect("routes lock");
            let id = c.id.clone().unwrap_or_default();
            if let Some(token) = crate::wire::params::progress_token(
                crate::wire::params::params_of(&line).as_ref(),
                true,
            ) {
                r.by_token.insert(token, id.clone());
            }
            r.by_id.insert(id, tx);
            Some(rx)
        } else {
            None
        };
        self.tape.message(Dir::C2S, &line, None);
        let written = {
            let mut guard = self.stdin.lock().expect("stdin lock");
            match guard.as_mut() {
                Some(s) => s
                    .write_all(&line)
                    .and_then(|()| s.write_all(b"\n"))
                    .and_then(|()| s.flush())
                    .is_ok(),
                None => false,
            }
        };
        if !written {
            return plain(
                StatusCode::BAD_GATEWAY,
                "mcptape: the server's stdin is closed (it exited)",
            );
        }
        match stream {
            Some(rx) => {
                let session =
                    (c.method.as_deref() == Some("initialize")).then(|| self.session.clone());
                sse_response(rx, session)
            }
            None => plain(StatusCode::ACCEPTED, ""),
        }
    }

    /// Sends one server line to the stream it belongs to.
    async fn route(&self, line: Vec<u8>) {
        let c = classify(&line);
        let event = Bytes::from(sse::encode(
            Some("message"),
            None,
            &String::from_utf8_lossy(&line),
        ));
        let target = {
            let mut r = self.routes.lock().expect("routes lock");
            match (c.kind, &c.id) {
                (Kind::Response | Kind::Error, Some(id)) => {
                    r.by_token.retain(|_, v| v != id);
                    r.by_id.remove(id)
                }
                _ => {
                    let by_token = (c.method.as_deref() == Some("notifications/progress"))
                        .then(|| {
                            crate::wire::params::progress_token(
                                crate::wire::params::params_of(&line).as_ref(),
                                false,
                            )
                        })
                        .flatten()
                        .and_then(|t| r.by_token.get(&t).cloned())
                        .and_then(|id| r.by_id.get(&id).cloned());
                    let only = (r.by_id.len() == 1)
                        .then(|| r.by_id.values().next().cloned())
                        .flatten();
                    match by_token
                        .or(only)
                        .or_else(|| r.get.clone().filter(|g| !g.is_closed()))
                    {
                        Some(tx) => Some(tx),
                        None => {
                            r.waiting.push(event.clone());
                            None
                        }
                    }
                }
            }
        };
        if let Some(tx) = target {
            let _ = tx.send(event).await;
        }
    }
}

fn read_server(mut stdout: impl Read, max: usize, bridge: &Bridge, out: &mpsc::Sender<Vec<u8>>) {
    let mut framer = Framer::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    // The tape's framer and the router's see the same bytes: each read is taped whole
    // (committed once), then its lines are routed.
    let mut routed = Framer::new(max);
    let mut route = |frame: Frame<'_>| {
        if let Frame::Line(l) = frame {
            let _ = out.blocking_send(l.bytes.to_vec());
        }
    };
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bridge.tape.chunk(&mut framer, Dir::S2C, &buf[..n]);
                routed.push(&buf[..n], &mut route);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    bridge.tape.finish_framer(&mut framer, Dir::S2C);
    routed.finish(&mut route);
}

fn sse_response(rx: mpsc::Receiver<Bytes>, session: Option<String>) -> Response<RespBody> {
    let mut r = Response::new(ChannelBody { rx }.boxed());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    if let Some(s) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        r.headers_mut().insert("mcp-session-id", s);
    }
    r
}

impl crate::transport::http::Handler for Bridge {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        match *req.method() {
            Method::POST => {
                let body = match collect(req.into_body(), self.max_message).await {
                    Ok(b) => b,
                    Err(why) => return plain(StatusCode::PAYLOAD_TOO_LARGE, &why),
                };
                self.post(body).await
            }
            Method::GET => {
                let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                // The backlog goes out from a task: the stream's queue is smaller than the
                // backlog, and nothing reads it before this response is returned.
                let routes = self.routes.clone();
                tokio::spawn(async move {
                    loop {
                        // The stream becomes the session's only once the backlog is out, so
                        // what arrives meanwhile waits behind it, in order.
                        let waiting = {
                            let mut r = routes.lock().expect("routes lock");
                            if r.waiting.is_empty() {
                                r.get = Some(tx);
                                return;
                            }
                            r.waiting.take()
                        };
                        for b in waiting {
                            if tx.send(b).await.is_err() {
                                return;
                            }
                        }
                    }
                });
                sse_response(rx, None)
            }
            Method::DELETE => plain(StatusCode::OK, ""),
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "POST, GET or DELETE"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::stdio::wait_with_grace;

    #[test]
    fn a_server_that_was_waited_for_passes_on_its_exit_code() {
        let mut child = crate::transport::stdio::child_exiting_3();
        let waited = wait_with_grace(&mut child, Duration::from_secs(10));
        let (exit, code, said) = server_end(child.id(), &waited);
        assert_eq!(exit.map(|x| x.code), Some(Some(3)));
        assert_eq!((code, said), (3, None));
    }

    /// Waiting for the server fails when something else reaped it (the kernel did, with
    /// SIGCHLD ignored, before `main` put it back to its default): the bridge took that for
    /// exit 0. Reaped here behind the `Child`'s back, `wait` fails as it would (ECHILD).
    #[test]
    fn a_server_whose_end_cannot_be_learned_exits_70_saying_so_not_0() {
        let mut child = crate::transport::stdio::child_exiting_3();
        let pid = child.id();
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, which is not waited for anywhere else.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(reaped, pid as libc::pid_t);
        let waited = wait_with_grace(&mut child, Duration::from_secs(10));
        let (exit, code, said) = server_end(pid, &waited);
        assert_eq!(exit, None, "no exit of the server's on the tape");
        assert_eq!(code, crate::exit::SOFTWARE);
        assert_eq!(
            said.as_deref(),
            Some(format!(
                "mcptape: internal error: could not learn how the server (pid {pid}) ended: No child processes (os error 10); the tape is closed without it"
            ).as_str())
        );
    }
}
