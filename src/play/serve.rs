//! The serving loop: mcptape is the server. Client messages come in on a reader thread, answers
//! go out through one writer thread (one ordered queue, so nothing interleaves mid-line), and an
//! exchange that must wait for the client (a server-initiated request) runs as its own task so
//! the loop keeps serving.

use super::explain::Miss;
use super::matcher::{Matcher, Outcome};
use crate::tape::index::MsgMeta;
use crate::tape::TapeIndex;
use crate::wire::canonical::{differences, short, Difference};
use crate::wire::rewrite::{with_id, with_progress_token};
use crate::wire::{classify, Frame, Framer, Kind};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Client messages read ahead of the serving loop. Small: the loop is fast, and a bounded queue
/// pushes back on a client that floods us.
const INPUT_QUEUE: usize = 64;
/// Lines waiting for stdout. Bounded so a client that stops reading stops the loop, not memory.
const OUTPUT_QUEUE: usize = 256;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub lenient: bool,
    pub max_message: usize,
    /// How long to wait for the client's answer to a server-initiated request.
    pub answer_timeout: Duration,
    /// The redaction rules applied to what a client asked before it is quoted in an explanation.
    pub display_rules: crate::redact::RedactConfig,
}

/// A difference between the client's answer to a replayed server request and the recorded one.
#[derive(Debug, Clone)]
pub struct Drift {
    /// The server request's method (e.g. `sampling/createMessage`).
    pub method: String,
    /// Tape line of the recorded server request.
    pub line: u64,
    pub differences: Vec<Difference>,
    /// Set when no answer came at all.
    pub no_answer: bool,
}

#[derive(Debug, Default)]
pub struct PlayReport {
    pub served: u64,
    pub missed: u64,
    pub lenient: u64,
    pub drifted: u64,
    pub misses: Vec<Miss>,
    pub drifts: Vec<Drift>,
    /// Exchanges never served, in recorded order.
    pub unused: Vec<Unused>,
    /// Client lines that were not requests play could answer (not JSON, batches…).
    pub rejected: u64,
    /// Requests matched to a recorded exchange whose server never answered (it died mid-call,
    /// or the tape was cut): the client got an error saying so.
    pub unanswered: u64,
}

/// A recorded exchange that was never served.
#[derive(Debug, Clone)]
pub struct Unused {
    /// Tape line of its request.
    pub line: u64,
    /// Method, target and arguments in short.
    pub what: String,
}

enum Incoming {
    Line(Vec<u8>),
    /// Length and first bytes of a message over the size limit.
    Oversize(u64, Vec<u8>),
}

pub(crate) struct Shared {
    pub(crate) index: Arc<TapeIndex>,
    /// Where messages not tied to a request go (stdout; over HTTP, the session's GET stream).
    pub(crate) out: mpsc::Sender<Vec<u8>>,
    /// Our server-request id → where the client's answer goes.
    pub(crate) pending: Mutex<HashMap<String, oneshot::Sender<Vec<u8>>>>,
    pub(crate) next_id: AtomicU64,
    /// Turns true once the client closed its input: no answer can come any more.
    pub(crate) closed: watch::Sender<bool>,
    pub(crate) report: Mutex<PlayReport>,
    pub(crate) opts: ServeOptions,
}

/// Serves `index` to the client on `input`/`output` until the client closes its side.
pub fn serve<R, W>(index: TapeIndex, opts: ServeOptions, input: R, output: W) -> PlayReport
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    rt.block_on(serve_async(index, opts, input, output))
}

async fn serve_async<R, W>(
    index: TapeIndex,
    opts: ServeOptions,
    mut input: R,
    mut output: W,
) -> PlayReport
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let (in_tx, mut in_rx) = mpsc::channel::<Incoming>(INPUT_QUEUE);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(OUTPUT_QUEUE);
    let max = opts.max_message;
    std::thread::Builder::new()
        .name("play-stdin".into())
        .spawn(move || {
            let mut framer = Framer::new(max);
            let mut buf = vec![0u8; 64 * 1024];
            let mut send = |f: Frame<'_>| {
                let item = match f {
                    Frame::Line(l) => Incoming::Line(l.bytes.to_vec()),
                    Frame::Oversize { len, head } => Incoming::Oversize(len, head),
                };
                let _ = in_tx.blocking_send(item);
            };
            loop {
                match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => framer.push(&buf[..n], &mut send),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            framer.finish(&mut send);
        })
        .expect("spawn thread");
    let writer = std::thread::Builder::new()
        .name("play-stdout".into())
        .spawn(move || {
            while let Some(line) = out_rx.blocking_recv() {
                if output.write_all(&line).is_err() {
                    break;
                }
                // Flush once the queue is empty: a burst goes out in few writes.
                if out_rx.is_empty() && output.flush().is_err() {
                    break;
                }
            }
            let _ = output.flush();
        })
        .expect("spawn thread");

    let mut matcher = Matcher::with_display_rules(&index, &opts.display_rules);
    let shared = Arc::new(Shared {
        index: Arc::new(index),
        out: out_tx,
        pending: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        closed: watch::channel(false).0,
        report: Mutex::new(PlayReport::default()),
        opts,
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut c2s: u64 = 0;
    let mut next_standalone = 0usize;
    emit_standalone(&shared, &mut tasks, &mut next_standalone, c2s).await;

    while let Some(incoming) = in_rx.recv().await {
        c2s += 1;
        match incoming {
            Incoming::Line(bytes) => handle(&shared, &mut matcher, &mut tasks, bytes).await,
            Incoming::Oversize(len, head) => {
                crate::diag!("mcptape play: a client message of {len} bytes is over the size limit (--max-message)");
                // Answer it if its id can be read from its first bytes, so the client does not hang.
                let id = leading_id(&head).unwrap_or_else(|| "null".into());
                let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32600, "message": format!("Invalid Request: message of {len} bytes is over mcptape play's --max-message")}});
                if let Ok(text) = with_id(&msg.to_string(), &id) {
                    send(&shared.out, text.into_bytes()).await;
                }
                shared.report.lock().expect("report lock").rejected += 1;
            }
        }
        emit_standalone(&shared, &mut tasks, &mut next_standalone, c2s).await;
        // Reap finished tasks so the set does not grow with the session.
        while tasks.try_join_next().is_some() {}
    }
    // The client closed its side: no answer to a server request can come any more. Waiters see
    // `closed` and end now (reported as unanswered) rather than at the timeout.
    shared.closed.send_replace(true);
    shared.pending.lock().expect("pending lock").clear();
    while tasks.join_next().await.is_some() {}
    emit_standalone(&shared, &mut tasks, &mut next_standalone, u64::MAX).await;
    while tasks.join_next().await.is_some() {}

    let unused: Vec<Unused> = matcher
        .unused()
        .into_iter()
        .map(|ex| {
            let req = &shared.index.msgs[shared.index.exchanges[ex].request];
            Unused {
                line: req.line,
                what: shared.index.describe_request(req),
            }
        })
        .collect();
    let shared = match Arc::try_unwrap(shared) {
        Ok(s) => s,
        Err(_) => unreachable!("every task has finished"),
    };
    drop(shared.out);
    let _ = writer.join();
    let mut report = shared.report.into_inner().expect("report lock");
    report.unused = unused;
    report
}

async fn handle(
    shared: &Arc<Shared>,
    matcher: &mut Matcher,
    tasks: &mut tokio::task::JoinSet<()>,
    bytes: Vec<u8>,
) {
    let c = classify(&bytes);
    match c.kind {
        Kind::Request => {
            let id = c.id.expect("requests have ids");
            let method = c.method.expect("requests have methods");
            let params = crate::tape::index::params_of(&bytes);
            let token = crate::tape::index::progress_token(params.as_ref(), true);
            let outcome =
                matcher.take(&shared.index, &method, params.as_ref(), shared.opts.lenient);
            let ex = match outcome {
                Outcome::Hit(ex) => ex,
                Outcome::Lenient(ex, miss) => {
                    let line = shared.index.msgs[shared.index.exchanges[ex].request].line;
                    crate::diag!(
                        "mcptape play: --lenient: served tape line {line} instead.\n{}",
                        miss.render(&id)
                    );
                    shared.report.lock().expect("report lock").lenient += 1;
                    ex
                }
                Outcome::Miss(_) if method == "ping" => {
                    // Liveness is protocol, not behaviour: answer it even when it was not recorded.
                    send(
                        &shared.out,
                        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#).into_bytes(),
                    )
                    .await;
                    return;
                }
                Outcome::Miss(miss) => {
                    crate::diag!("mcptape play: {}", miss.render(&id).trim_end());
                    let msg =
                        json!({"jsonrpc": "2.0", "id": Value::Null, "error": miss.error_object()});
                    let text = with_id(&msg.to_string(), &id).expect("our own JSON");
                    send(&shared.out, text.into_bytes()).await;
                    let mut r = shared.report.lock().expect("report lock");
                    r.missed += 1;
                    r.misses.push(miss);
                    return;
                }
            };
            let waits = shared.index.exchanges[ex]
                .during
                .iter()
                .any(|&m| shared.index.msgs[m].kind == Kind::Request);
            if waits {
                let shared = shared.clone();
                tasks.spawn(async move {
                    serve_exchange(&shared, &shared.out, ex, &id, token.as_deref()).await
                });
            } else {
                // Inline keeps the recorded order with the standalone messages that follow.
                serve_exchange(shared, &shared.out, ex, &id, token.as_deref()).await;
            }
        }
        Kind::Response | Kind::Error => {
            let id = c.id.unwrap_or_else(|| "null".into());
            let tx = shared.pending.lock().expect("pending lock").remove(&id);
            match tx {
                Some(tx) => {
                    let _ = tx.send(bytes);
                }
                // Only the id: the answer itself may carry the client's secrets.
                None => crate::diag!(
                    "mcptape play: the client answered a request mcptape did not send (id {id})"
                ),
            }
        }
        Kind::Notification => {}
        Kind::NotJson | Kind::Invalid | Kind::Batch | Kind::Oversize => {
            let (code, text) = match c.kind {
                Kind::NotJson => (-32700, "Parse error"),
                Kind::Batch => (-32600, "Invalid Request: mcptape play does not serve JSON-RPC batches (removed from MCP in 2025-06-18)"),
                _ => (-32600, "Invalid Request"),
            };
            // Quoted with the redaction rules applied: it may hold the client's secrets.
            let quoted = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            // One redactor for the whole session: building one compiles its regexes.
            static QUOTE: std::sync::OnceLock<Option<crate::redact::Redactor>> =
                std::sync::OnceLock::new();
            let quoted = QUOTE
                .get_or_init(|| {
                    crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).ok()
                })
                .as_ref()
                .and_then(|r| r.redact_text(&quoted).map(|(t, _)| t))
                .unwrap_or(quoted);
            crate::diag!(
                "mcptape play: {text}: {quoted}{}",
                c.problem.map(|p| format!(" ({p})")).unwrap_or_default()
            );
            let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": text}});
            send(&shared.out, msg.to_string().into_bytes()).await;
            shared.report.lock().expect("report lock").rejected += 1;
        }
    }
}

/// Sends what the server sent during the exchange, then the response with the client's id.
pub(crate) async fn serve_exchange(
    shared: &Shared,
    out: &mpsc::Sender<Vec<u8>>,
    ex: usize,
    client_id: &str,
    client_token: Option<&str>,
) {
    let index = &shared.index;
    let ex = &index.exchanges[ex];
    for &m in &ex.during {
        let meta = &index.msgs[m];
        match meta.kind {
            Kind::Notification if meta.method.as_deref() == Some("notifications/progress") => {
                // Progress goes to the token of this client's request; no token, no progress asked.
                let Some(token) = client_token else { continue };
                if let Some(text) = read_text(index, meta) {
                    match with_progress_token(&text, token) {
                        Ok(t) => send(out, t.into_bytes()).await,
                        Err(_) => send(out, text.into_bytes()).await,
                    }
                }
            }
            Kind::Request => {
                server_request(shared, out, meta, ex.client_answers.get(&m).copied()).await
            }
            Kind::Response | Kind::Error => {}
            _ => {
                if let Ok(bytes) = index.read_bytes(meta) {
                    send(out, bytes).await;
                }
            }
        }
    }
    let Some(r) = ex.response else {
        // A `subscriptions/listen` stream has no answer: it runs until the client closes it.
        if index.msgs[ex.request].method.as_deref() == Some("subscriptions/listen") {
            return;
        }
        if ex.cancelled {
            // The recorded client cancelled it and the server, as it should, never answered.
            crate::diag!("mcptape play: request id {client_id}: cancelled by the client in the recording; no answer, as recorded");
            return;
        }
        // Recorded without an answer: tell the client instead of leaving it waiting forever.
        let line = index.msgs[ex.request].line;
        let message = format!(
            "mcptape: the recorded server never answered this request (tape line {line}): it exited or the recording was cut off before its response"
        );
        crate::diag!(
            "mcptape play: request id {client_id}: {}",
            &message["mcptape: ".len()..]
        );
        let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": super::explain::MISS_CODE, "message": message}});
        send(
            out,
            with_id(&msg.to_string(), client_id)
                .expect("our own JSON")
                .into_bytes(),
        )
        .await;
        shared.report.lock().expect("report lock").unanswered += 1;
        return;
    };
    if let Some(text) = read_text(index, &index.msgs[r]) {
        match with_id(&text, client_id) {
            Ok(t) => send(out, t.into_bytes()).await,
            Err(e) => crate::diag!(
                "mcptape play: tape line {}: cannot rewrite the response id: {e}",
                index.msgs[r].line
            ),
        }
        shared.report.lock().expect("report lock").served += 1;
    }
}

/// Re-issues a recorded server request with a fresh id, awaits the client's answer and compares
/// it with the recorded one.
pub(crate) async fn server_request(
    shared: &Shared,
    out: &mpsc::Sender<Vec<u8>>,
    meta: &MsgMeta,
    recorded_answer: Option<usize>,
) {
    let index = &shared.index;
    let mut closed = shared.closed.subscribe();
    let Some(text) = read_text(index, meta) else {
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed).to_string();
    let Ok(request) = with_id(&text, &id) else {
        return;
    };
    let (tx, rx) = oneshot::channel();
    let already_closed = *closed.borrow();
    shared
        .pending
        .lock()
        .expect("pending lock")
        .insert(id.clone(), tx);
    if !already_closed {
        send(out, request.into_bytes()).await;
    }
    let method = meta.method.clone().unwrap_or_default();
    // A waiter registered after the main loop cleared `pending` is never dropped by it, so the
    // close is watched here too. All three futures are cancel-safe (a oneshot receiver, a watch
    // wait, a sleep): whichever loses is simply dropped.
    let answer = tokio::select! {
        a = rx => a.ok(),
        _ = closed.wait_for(|c| *c) => None,
        _ = tokio::time::sleep(shared.opts.answer_timeout) => None,
    };
    let drift = match answer {
        Some(bytes) => {
            let got = answer_body(&bytes);
            let want = recorded_answer
                .and_then(|a| read_text(index, &index.msgs[a]))
                .map(|t| answer_body(t.as_bytes()));
            match want {
                Some(want) => {
                    let diffs = differences(&want, &got);
                    (!diffs.is_empty()).then_some(Drift {
                        method,
                        line: meta.line,
                        differences: diffs,
                        no_answer: false,
                    })
                }
                None => None, // nothing recorded to compare with
            }
        }
        _ => {
            shared.pending.lock().expect("pending lock").remove(&id);
            Some(Drift {
                method,
                line: meta.line,
                differences: Vec::new(),
                no_answer: true,
            })
        }
    };
    if let Some(d) = drift {
        if d.no_answer {
            let when = if *shared.closed.borrow() {
                "before closing its input".to_string()
            } else {
                format!("within {:?}", shared.opts.answer_timeout)
            };
            crate::diag!(
                "mcptape play: drift: the client did not answer {} (tape line {}) {when}",
                d.method,
                d.line
            );
        } else {
            let lines: Vec<String> = d
                .differences
                .iter()
                .take(8)
                .map(|x| {
                    format!(
                        "    {}  recorded {}  got {}",
                        x.path,
                        short(x.left.as_ref(), 60),
                        short(x.right.as_ref(), 60)
                    )
                })
                .collect();
            crate::diag!("mcptape play: drift: the client's answer to {} (tape line {}) differs from the recording:\n{}", d.method, d.line, lines.join("\n"));
        }
        let mut r = shared.report.lock().expect("report lock");
        r.drifted += 1;
        r.drifts.push(d);
    }
}

/// The part of a response that is compared: `result` or `error` (the id is ours, not theirs).
fn answer_body(bytes: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    match v {
        Value::Object(mut m) => m
            .remove("result")
            .map(|r| json!({"result": r}))
            .or_else(|| m.remove("error").map(|e| json!({"error": e})))
            .unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

async fn emit_standalone(
    shared: &Arc<Shared>,
    tasks: &mut tokio::task::JoinSet<()>,
    next: &mut usize,
    point: u64,
) {
    let index = &shared.index;
    while let Some(s) = index.standalone.get(*next).filter(|s| s.point <= point) {
        *next += 1;
        let meta = &index.msgs[s.msg];
        match meta.kind {
            Kind::Request => {
                let (shared, msg, answer) = (shared.clone(), s.msg, s.client_answer);
                tasks.spawn(async move {
                    let meta = shared.index.msgs[msg].clone();
                    server_request(&shared, &shared.out, &meta, answer).await
                });
            }
            Kind::Response | Kind::Error => {}
            _ => {
                if let Ok(bytes) = index.read_bytes(meta) {
                    send(&shared.out, bytes).await;
                }
            }
        }
    }
}

fn read_text(index: &TapeIndex, meta: &MsgMeta) -> Option<String> {
    match index.read_text(meta) {
        Ok(t) => Some(t),
        Err(e) => {
            crate::diag!("mcptape play: tape line {}: {e}", meta.line);
            None
        }
    }
}

pub(crate) async fn send(out: &mpsc::Sender<Vec<u8>>, mut line: Vec<u8>) {
    line.push(b'\n');
    let _ = out.send(line).await;
}

/// The id of a JSON-RPC message from its first bytes, when it comes early enough to be seen.
fn leading_id(head: &[u8]) -> Option<String> {
    static RE: std::sync::OnceLock<regex::bytes::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::bytes::Regex::new(r#"^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*\s*"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")"#)
            .expect("valid regex")
    });
    let caps = re.captures(head)?;
    String::from_utf8(caps.get(1)?.as_bytes().to_vec()).ok()
}
