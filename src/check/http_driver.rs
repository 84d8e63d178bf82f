//! Drives a live Streamable HTTP server with a recording's client side, as the stdio driver does
//! over pipes: each client message is a POST (the session id and protocol version the server
//! gave are sent back), answers are read as JSON or as an SSE stream, server requests arriving
//! on a stream are answered with the client's recorded answers, and everything is taped.

use super::driver::{
    drive, recorded_reply, DriveError, DriveOutcome, Event, LineEnds, Live, RecordedAnswers,
};
use super::observe::Observer;
use crate::record::Recorder;
use crate::tape::index::MsgMeta;
use crate::tape::{ServerDecl, TapeIndex, TapeWriter, WriteOptions, DEFAULT_SERVER};
use crate::transport::post::{answer_head, mcp_post};
use crate::transport::sse::SseParser;
use crate::wire::{classify, Dir, Kind};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The HTTP side of a check: each client message is a POST (the session id and protocol version
/// the server gave are sent back), answers are read as JSON or as an SSE stream, server requests
/// arriving on a stream are answered with the client's recorded answers.
struct Ctx {
    url: Uri,
    client: HttpClient,
    /// The observed tape (`--update`).
    tape: Option<Recorder>,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    answers: Mutex<RecordedAnswers>,
    unreachable: Mutex<Option<String>>,
}

/// The driver's handle on the HTTP side: requests run as tasks on the runtime, each reporting
/// its answer (or why there is none) to the driver.
struct HttpLive {
    ctx: Arc<Ctx>,
    rt: tokio::runtime::Handle,
    events: mpsc::Sender<Event>,
}

impl Live for HttpLive {
    // HTTP bodies are not lines: how a stdio recording framed its lines does not apply.
    fn request(&mut self, id: &str, text: String, _ends: &LineEnds) {
        let (ctx, events, id) = (self.ctx.clone(), self.events.clone(), id.to_string());
        self.rt.spawn(async move {
            let event = match ctx.request(text, &events).await {
                Ok(answer) => Event::Answers(std::time::Instant::now(), vec![(id, answer)]),
                Err(why) => Event::Failed(id, why),
            };
            let _ = events.send(event);
        });
    }

    fn notification(&mut self, text: &[u8], _ends: &LineEnds) {
        // In order: the driver's thread waits for the POST before going on.
        let _ = self.rt.block_on(self.ctx.post(text.to_vec()));
    }

    fn flush(&mut self) -> bool {
        true
    }

    /// Only what came on a POST's answer stream: the driver opens no GET stream.
    fn sees(&self, meta: &MsgMeta) -> bool {
        meta.stream_of.is_some() && !meta.http.as_ref().is_some_and(|h| h.on_get)
    }

    /// Only a tape recorded over HTTP: a stdio tape does not say which of its server's
    /// messages an HTTP server would send on a request's answer stream (seen here) and which on
    /// the GET stream (not opened), so none of its messages is seen as recorded.
    fn counts_comparable(&self, base: &TapeIndex) -> bool {
        base.msgs.iter().any(|m| m.http.is_some())
    }
}

/// Drives a running Streamable HTTP server at `url` with the baseline's client side, each answer
/// compared by `observer` as it arrives, everything taped on `observed` when given.
pub(crate) async fn drive_http(
    base: Arc<TapeIndex>,
    url: &str,
    timeout: Duration,
    observed: Option<&std::path::Path>,
    write: WriteOptions,
    filler: Arc<super::fill::Filler>,
    mut observer: Observer,
) -> Result<(DriveOutcome, Observer), DriveError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| DriveError::Url {
            url: url.into(),
            why: e.to_string(),
        })?;
    if uri.scheme_str() != Some("http") {
        return Err(DriveError::Url {
            url: url.into(),
            why: "only http:// URLs are supported".into(),
        });
    }
    crate::transport::check_port(&uri).map_err(|why| DriveError::Url {
        url: url.into(),
        why,
    })?;
    // A server that is not there is not a server that answers badly: found before anything is
    // sent, so it is not graded F.
    let port = uri.port_u16().unwrap_or(80);
    let host = uri
        .host()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']');
    let reach = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await;
    match reach {
        Ok(Ok(_)) => {}
        Ok(Err(cause)) => {
            return Err(DriveError::Unreachable {
                url: url.into(),
                cause,
            })
        }
        Err(_) => {
            return Err(DriveError::Unreachable {
                url: url.into(),
                cause: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection within {} s (--timeout)",
                        timeout.as_secs_f64()
                    ),
                ),
            })
        }
    }
    let tape_err = |path: &std::path::Path, cause| DriveError::Tape {
        path: path.to_path_buf(),
        cause,
    };
    let tape = match observed {
        Some(path) => {
            let mut writer = TapeWriter::create(path, write).map_err(|e| tape_err(path, e))?;
            writer
                .declare_server(ServerDecl::http(DEFAULT_SERVER, url.into()))
                .map_err(|e| tape_err(path, e))?;
            Some(Recorder::new(writer, DEFAULT_SERVER))
        }
        None => None,
    };
    let ctx = Arc::new(Ctx {
        url: uri,
        client: Client::builder(TokioExecutor::new()).build_http(),
        tape,
        session: Mutex::new(None),
        protocol: Mutex::new(None),
        answers: Mutex::new(RecordedAnswers::new(&base)),
        unreachable: Mutex::new(None),
    });
    // The driver's loop blocks on its events: on a thread of its own, the requests' tasks on
    // the runtime.
    // One event per request sent (its answer or failure): bounded by the baseline's requests.
    let (events, inbox) = mpsc::channel::<Event>();
    let mut live = HttpLive {
        ctx: ctx.clone(),
        rt: tokio::runtime::Handle::current(),
        events,
    };
    let driving = tokio::task::spawn_blocking(move || {
        let (missing, _, counts) = drive(&base, &mut live, inbox, timeout, &filler, &mut observer);
        // Over HTTP a request's messages come before its answer on its stream: all are in.
        observer.server_messages(counts.differing());
        (missing, observer)
    })
    .await;
    // The driver panicking is a bug: not hidden as an empty run.
    let (missing, observer) = driving.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    // End the session, as a client would.
    let session = ctx.session.lock().expect("session").clone();
    if let Some(sid) = session {
        let req = Request::builder()
            .method(Method::DELETE)
            .uri(ctx.url.clone())
            .header("mcp-session-id", sid)
            .body(Full::new(Bytes::new()));
        if let Ok(req) = req {
            let _ = tokio::time::timeout(Duration::from_secs(5), ctx.client.request(req)).await;
        }
    }
    if let (Some(tape), Some(path)) = (&ctx.tape, observed) {
        tape.close(None, "mcptape check finished".into())
            .map_err(|e| tape_err(path, e))?;
    }
    let run_error = ctx.unreachable.lock().expect("unreachable").clone();
    Ok((
        DriveOutcome {
            missing,
            run_error,
            exit: None,
            lost_end: None,
        },
        observer,
    ))
}

impl Ctx {
    /// POSTs one client message; returns the HTTP response.
    async fn post(&self, body: Vec<u8>) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        self.tape(Dir::C2S, &body);
        let req = mcp_post(
            &self.url,
            self.session.lock().expect("session").as_deref(),
            self.protocol.lock().expect("protocol").as_deref(),
            body,
        )?;
        match self.client.request(req).await {
            Ok(r) => Ok(r),
            Err(e) => {
                let why = format!("the server at {} did not answer: {e}", self.url);
                self.unreachable
                    .lock()
                    .expect("unreachable")
                    .get_or_insert(why.clone());
                Err(why)
            }
        }
    }

    /// Sends a request and reads its answer, answering server requests on the way.
    async fn request(
        self: Arc<Self>,
        message: String,
        events: &mpsc::Sender<Event>,
    ) -> Result<Vec<u8>, String> {
        let resp = self.post(message.into_bytes()).await?;
        let (sid, sse) = answer_head(&resp);
        if let Some(sid) = sid {
            *self.session.lock().expect("session") = Some(sid);
        }
        let status = resp.status();
        let mut body = resp.into_body();
        if !sse {
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            if bytes.is_empty() {
                return Err(format!("HTTP {status} with no answer"));
            }
            self.tape(Dir::S2C, &bytes);
            if !status.is_success() && classify(&bytes).id.is_none() {
                // An HTTP-level refusal not tied to the request (id null): say what it was.
                return Err(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                ));
            }
            self.note(&bytes);
            return Ok(bytes.to_vec());
        }
        let mut parser = SseParser::new(64 * 1024 * 1024);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("the SSE stream broke: {e}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for block in parser.push_bytes(data) {
                let Some(payload) = block
                    .event
                    .and_then(|e| e.data)
                    .filter(|d| !d.trim().is_empty())
                else {
                    continue;
                };
                self.tape(Dir::S2C, payload.as_bytes());
                let c = classify(payload.as_bytes());
                match c.kind {
                    Kind::Response | Kind::Error => {
                        self.note(payload.as_bytes());
                        return Ok(Vec::from(payload.into_bytes()));
                    }
                    Kind::Request => {
                        let id = c.id.unwrap_or_else(|| "null".into());
                        let method = c.method.unwrap_or_default();
                        // An HTTP body is not a line: how the answer's line was framed is dropped.
                        let (reply, _) =
                            recorded_reply(&self.answers, payload.as_bytes(), &method, &id);
                        let _ = self.post(reply.into_bytes()).await;
                        let _ = events.send(Event::Seen(vec![(method, true)]));
                    }
                    Kind::Notification => {
                        let method = c.method.unwrap_or_default();
                        let _ = events.send(Event::Seen(vec![(method, false)]));
                    }
                    _ => {}
                }
            }
        }
        Err("the SSE stream ended without an answer".into())
    }

    fn tape(&self, dir: Dir, bytes: &[u8]) {
        if let Some(tape) = &self.tape {
            tape.message(dir, bytes, None);
        }
    }

    /// Learns the protocol version `initialize` agreed on, for the later requests' header.
    fn note(&self, bytes: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        if let Some(p) = v["result"].get("protocolVersion").and_then(Value::as_str) {
            *self.protocol.lock().expect("protocol") = Some(p.to_string());
        }
    }
}
