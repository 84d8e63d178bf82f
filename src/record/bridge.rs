//! `mcptape record --listen ADDR -- <stdio server>`: put a stdio server behind Streamable HTTP
//! while recording it. Each POSTed message is written to the server's stdin; a request is
//! answered with an SSE stream carrying what the server sends for it (progress by token, other
//! messages while it is the only request in flight) and ends with its response. Messages tied to
//! no request go to the GET stream. Everything is taped as it passes, as `record` does over stdio.

use super::stdio::{ignore_sigxfsz, shell_words, start_stdio_server, RecordOutcome, StartError};
use crate::redact::{RedactConfig, Redactor};
use crate::tape::{TapeWriter, WriteOptions};
use crate::transport::http::{
    accept_until, collect, plain, refuse_foreign, ChannelBody, RespBody, StopSignals,
};
use crate::transport::sse;
use crate::wire::{classify, Dir, Frame, Framer, Kind};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Messages waiting for one HTTP stream. Bounded: a client that stops reading holds the
/// server's output back rather than memory.
const STREAM_QUEUE: usize = 256;

#[derive(Debug, Clone)]
pub struct BridgeConfig {
    pub tape: PathBuf,
    pub command: Vec<String>,
    pub listen: SocketAddr,
    pub server_label: String,
    pub redact: RedactConfig,
    pub signing_key: Option<Vec<u8>>,
    pub max_message: usize,
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("could not start server `{command}`: {cause}")]
    Spawn { command: String, cause: io::Error },
    #[error("could not listen on {addr}: {cause}")]
    Listen { addr: SocketAddr, cause: io::Error },
    #[error("could not write tape {}: {cause}", path.display())]
    Tape { path: PathBuf, cause: io::Error },
}

#[derive(Default)]
struct Routes {
    /// Request id → its answer stream.
    by_id: HashMap<String, mpsc::Sender<Bytes>>,
    /// Progress token → request id.
    by_token: HashMap<String, String>,
    /// The GET stream, or what waits for one.
    get: Option<mpsc::Sender<Bytes>>,
    waiting: VecDeque<Bytes>,
}

struct Bridge {
    tape: Mutex<Option<TapeWriter>>,
    label: String,
    stdin: Mutex<Option<ChildStdin>>,
    routes: Mutex<Routes>,
    session: String,
    local_port: u16,
    max_message: usize,
}

pub fn record_bridge(
    cfg: &BridgeConfig,
    on_ready: impl FnOnce(&str),
) -> Result<RecordOutcome, BridgeError> {
    let tape_err = |cause| BridgeError::Tape {
        path: cfg.tape.clone(),
        cause,
    };
    let opts = WriteOptions {
        redactor: Redactor::for_config(&cfg.redact),
        signing_key: cfg.signing_key.clone(),
    };
    let (mut child, writer) = start_stdio_server(&cfg.command, &cfg.server_label, &cfg.tape, opts)
        .map_err(|e| match e {
            StartError::Spawn(cause) => BridgeError::Spawn {
                command: shell_words(&cfg.command),
                cause,
            },
            StartError::Tape(cause) => tape_err(cause),
        })?;
    ignore_sigxfsz();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(tape_err)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stdin = child.stdin.take();
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|cause| BridgeError::Listen {
                addr: cfg.listen,
                cause,
            })?;
        let local = listener.local_addr().map_err(|cause| BridgeError::Listen {
            addr: cfg.listen,
            cause,
        })?;
        let bridge = Arc::new(Bridge {
            tape: Mutex::new(Some(writer)),
            label: cfg.server_label.clone(),
            stdin: Mutex::new(stdin),
            routes: Mutex::new(Routes::default()),
            session: crate::transport::http::session_id(),
            local_port: local.port(),
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
        let mut signals = StopSignals::new().map_err(|cause| BridgeError::Listen {
            addr: cfg.listen,
            cause,
        })?;
        on_ready(&format!("http://{local}/mcp"));
        let handler = {
            let bridge = bridge.clone();
            move |req| {
                let bridge = bridge.clone();
                async move { bridge.handle(req).await }
            }
        };
        // The router ends when the server's output does (the reader drops its sender).
        let stop = async {
            tokio::select! {
                _ = &mut router => "the server's output ended".to_string(),
                s = signals.recv() => format!("{s}: recording stopped"),
            }
        };
        let (reason, mut connections) = accept_until(&listener, handler, stop).await;
        connections.abort_all();
        // EOF for the server, as over stdio.
        bridge.stdin.lock().expect("stdin lock").take();
        Ok::<_, BridgeError>((reason, bridge))
    })?;
    let (reason, bridge) = served;
    let ended = crate::record::stdio::wait_with_grace(&mut child, cfg.grace);
    let exit = ended.as_ref().map(|(info, _)| info.clone());
    let exit_code = ended.map(|(_, code)| code).unwrap_or(0);
    let writer = bridge
        .tape
        .lock()
        .expect("tape lock")
        .take()
        .expect("taken once");
    let dropped = writer.dropped();
    let failure = writer.failure();
    let tape = writer.path().to_path_buf();
    let end = writer.finish(exit, Some(reason)).map_err(tape_err)?;
    Ok(RecordOutcome {
        tape,
        end,
        exit_code,
        write_failure: failure.map(|f| (dropped, f)),
    })
}

impl Bridge {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        if let Some(why) = refuse_foreign(req.headers(), self.local_port) {
            return plain(StatusCode::FORBIDDEN, &why);
        }
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
                let waiting: Vec<Bytes> = {
                    let mut r = self.routes.lock().expect("routes lock");
                    r.get = Some(tx.clone());
                    r.waiting.drain(..).collect()
                };
                for b in waiting {
                    let _ = tx.send(b).await;
                }
                sse_response(rx, None)
            }
            Method::DELETE => plain(StatusCode::OK, ""),
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "POST, GET or DELETE"),
        }
    }

    async fn post(&self, body: Bytes) -> Response<RespBody> {
        // One message per line on the server's stdin: line breaks inside it (whitespace in
        // valid JSON) become spaces.
        let line: Vec<u8> = body
            .iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .collect();
        let line = line.trim_ascii().to_vec();
        let c = classify(&line);
        let stream = if c.kind == Kind::Request {
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            let mut r = self.routes.lock().expect("routes lock");
            let id = c.id.clone().unwrap_or_default();
            if let Some(token) = crate::tape::index::progress_token(
                crate::tape::index::params_of(&line).as_ref(),
                true,
            ) {
                r.by_token.insert(token, id.clone());
            }
            r.by_id.insert(id, tx);
            Some(rx)
        } else {
            None
        };
        {
            let mut guard = self.tape.lock().expect("tape lock");
            if let Some(w) = guard.as_mut() {
                let mut framer = Framer::new(usize::MAX);
                let mut full = line.clone();
                full.push(b'\n');
                framer.push(&full, |f| {
                    w.message(&self.label, Dir::C2S, &f, Instant::now())
                });
                let _ = w.commit();
            }
        }
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
                            crate::tape::index::progress_token(
                                crate::tape::index::params_of(&line).as_ref(),
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
                            r.waiting.push_back(event.clone());
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
    let mut handle = |frame: Frame<'_>| {
        {
            let mut guard = bridge.tape.lock().expect("tape lock");
            if let Some(w) = guard.as_mut() {
                w.message(&bridge.label, Dir::S2C, &frame, Instant::now());
                let _ = w.commit();
            }
        }
        if let Frame::Line(l) = frame {
            let _ = out.blocking_send(l.bytes.to_vec());
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
