//! Play's live server: what answers a request the tape does not (`--on-miss live`), and the
//! calls chosen to go live (`--live`, `--from-tape`). One live connection per play session,
//! started on its first live request: mcptape does its handshake itself (the client's own
//! `initialize`, else the recorded one; in the 2026-07-28 era a `server/discover` with the
//! request's `_meta`), forwards the request with an id of its own, passes the live server's
//! notifications and requests (sampling, elicitation, roots) to the client with ids mapped both
//! ways, and answers with the client's id. What a miss brought is appended to the tape
//! ([`LiveTape`]); the handshake is not (the tape has its own).

use super::framing::OutLine;
use super::serve::{Shared, Sink};
use crate::record::Recorder;
use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
use crate::wire::rewrite::with_id;
use crate::wire::{classify, Dir, Framer, Kind};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// How long the live server has for each step of its handshake: a server started with `npx`
/// may first be fetched and compiled.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// After play closes the live server's stdin, how long it has to exit before it is killed.
const LIVE_GRACE: Duration = Duration::from_secs(5);

/// Server messages for one forwarded request waiting to be written to the client. Bounded: a
/// client that stops reading holds the live server back, not memory.
const ROUTE_QUEUE: usize = 64;

/// What play does with a request the tape does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnMiss {
    /// A JSON-RPC error explaining the miss (strict play).
    #[default]
    Error,
    /// The next unused recorded exchange of the same method.
    Lenient,
    /// The live server answers, and the exchange is appended to the tape.
    Live,
}

/// Where the live server is.
#[derive(Debug, Clone)]
pub enum LiveTarget {
    /// A stdio server, started by play with this command.
    Command(Vec<String>),
    /// A Streamable HTTP server at this URL.
    Url(String),
}

impl LiveTarget {
    fn describe(&self) -> String {
        match self {
            LiveTarget::Command(c) => format!("`{}`", crate::transport::stdio::shell_words(c)),
            LiveTarget::Url(u) => u.clone(),
        }
    }
}

/// The live server of a play run, shared by its sessions: where it is, which calls go to it,
/// and the tape its exchanges are appended to.
#[derive(Debug)]
pub struct LiveConfig {
    /// Where the live server is.
    pub target: LiveTarget,
    /// Which calls go live whether or not the tape has them (`--live`, `--from-tape`).
    pub select: super::select::Selection,
    /// Where what a miss brought is taped (`None`: nowhere).
    pub tape: Option<LiveTape>,
    /// The ids of the requests play sends the live servers: one counter for every session, so
    /// that the appended exchanges pair on the tape whatever session they came from.
    next_id: AtomicU64,
}

impl LiveConfig {
    /// The live server at `target`, calls chosen by `select`, misses taped on `tape`.
    pub fn new(
        target: LiveTarget,
        select: super::select::Selection,
        tape: Option<LiveTape>,
    ) -> LiveConfig {
        LiveConfig {
            target,
            select,
            tape,
            next_id: AtomicU64::new(1),
        }
    }

    fn id(&self) -> String {
        format!(
            "\"mcptape-live-{}\"",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// The tape a live run appends to, opened on the first exchange that needs it (a play that
/// never misses leaves the tape untouched, byte for byte).
pub struct LiveTape {
    path: PathBuf,
    write: WriteOptions,
    label: String,
    state: Mutex<TapeState>,
    /// What to do when the tape cannot be appended to, said after why (the end of a sentence).
    elsewhere: String,
    /// Exchanges appended.
    pub appended: AtomicU64,
}

impl std::fmt::Debug for LiveTape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTape")
            .field("path", &self.path)
            .finish()
    }
}

enum TapeState {
    Unopened,
    Open(Recorder),
    Failed,
}

impl LiveTape {
    /// Appends to the tape at `path` (or, when there is none, starts it), as server `label`.
    pub fn new(path: PathBuf, write: WriteOptions, label: &str) -> LiveTape {
        LiveTape {
            path,
            write,
            label: label.to_string(),
            state: Mutex::new(TapeState::Unopened),
            elsewhere: "append to another tape".into(),
            appended: AtomicU64::new(0),
        }
    }

    /// Says `what` (the end of a sentence: `name another tape with --append-to`) when the tape
    /// turns out not to take appended lines ([`AppendError::or_else`]).
    ///
    /// [`AppendError::or_else`]: crate::tape::append::AppendError::or_else
    pub fn elsewhere(mut self, what: &str) -> LiveTape {
        self.elsewhere = what.to_string();
        self
    }

    /// The tape's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn recorder(&self, target: &LiveTarget) -> Option<Recorder> {
        let mut state = self.state.lock().expect("tape lock");
        if let TapeState::Unopened = *state {
            *state = match self.open(target) {
                Ok(r) => TapeState::Open(r),
                Err(e) => {
                    let or = match e
                        .downcast_ref::<crate::tape::append::AppendError>()
                        .and_then(|a| a.or_else())
                    {
                        Some(join) => format!("{join}{}", self.elsewhere),
                        None => String::new(),
                    };
                    crate::diag!("mcptape play: --on-miss live: {e:#}{or}; the live answers are served but not taped");
                    TapeState::Failed
                }
            };
        }
        match &*state {
            TapeState::Open(r) => Some(r.clone()),
            _ => None,
        }
    }

    fn open(&self, target: &LiveTarget) -> Result<Recorder, anyhow::Error> {
        let there = std::fs::metadata(&self.path).is_ok_and(|m| m.is_file() && m.len() > 0);
        if !there {
            // A tape of its own (`--append-to NEW`): a plain recording of the live exchanges.
            let mut w = TapeWriter::create(&self.path, self.write.clone())?;
            w.declare_server(match target {
                LiveTarget::Command(c) => ServerDecl::stdio(&self.label, c.clone()),
                LiveTarget::Url(u) => ServerDecl::http(&self.label, u.clone()),
            })?;
            return Ok(Recorder::new(w, &self.label));
        }
        let w = crate::tape::append::append(&self.path, self.write.clone())?;
        let cut = w.append_cut().cloned();
        let r = Recorder::new(w, &self.label);
        let live = match target {
            LiveTarget::Command(c) => json!(c),
            LiveTarget::Url(u) => json!(u),
        };
        let mut details = json!({
            "by": format!("mcptape {} play --on-miss live", env!("CARGO_PKG_VERSION")),
            "at": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
            "live": live,
        });
        if let Some(cut) = cut {
            details["cut"] = cut;
        }
        r.event("append", details);
        Ok(r)
    }

    /// Closes the tape if anything was taped; where it is and how many exchanges were added.
    pub fn close(&self) -> Option<Result<u64, std::io::Error>> {
        let state = std::mem::replace(
            &mut *self.state.lock().expect("tape lock"),
            TapeState::Failed,
        );
        let TapeState::Open(r) = state else {
            return None;
        };
        let n = self.appended.load(Ordering::Relaxed);
        let s = if n == 1 { "" } else { "s" };
        Some(
            r.close(
                None,
                format!("mcptape play appended {n} exchange{s} from the live server"),
            )
            .map(|_| n),
        )
    }
}

/// One play session's live server: connected on its first live request.
pub(crate) struct Live {
    cfg: Arc<LiveConfig>,
    conn: tokio::sync::Mutex<Option<Result<Arc<Conn>, String>>>,
    /// The client's own `initialize`, for the live server's handshake.
    init: Mutex<Option<String>>,
}

impl Live {
    pub(crate) fn new(cfg: Arc<LiveConfig>) -> Live {
        Live {
            cfg,
            conn: tokio::sync::Mutex::new(None),
            init: Mutex::new(None),
        }
    }

    /// Which calls go live whatever the tape holds.
    pub(crate) fn chosen(&self, method: &str, params: Option<&Value>) -> bool {
        self.cfg.select.goes_live(method, params)
    }

    /// Keeps the client's `initialize` for the live server's handshake.
    pub(crate) fn note_initialize(&self, bytes: &[u8]) {
        if let Ok(t) = std::str::from_utf8(bytes) {
            *self.init.lock().expect("init lock") = Some(t.to_string());
        }
    }

    /// Ends the live connection: the server's stdin closed (then killed after a grace period),
    /// or the HTTP session deleted. Its tasks end with it.
    pub(crate) async fn shutdown(&self) {
        let conn = self.conn.lock().await.take();
        if let Some(Ok(conn)) = conn {
            conn.shutdown().await;
        }
    }

    async fn connect(&self, shared: &Arc<Shared>, request: &[u8]) -> Result<Arc<Conn>, String> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = &*slot {
            return c.clone();
        }
        let init = self
            .init
            .lock()
            .expect("init lock")
            .clone()
            .or_else(|| recorded_initialize(shared));
        let c = Conn::start(&self.cfg, shared, init, request).await;
        if let Err(e) = &c {
            crate::diag!(
                "mcptape play: live server {}: {e}",
                self.cfg.target.describe()
            );
        }
        *slot = Some(c.clone());
        c
    }
}

/// The recorded `initialize` request, for a live server's handshake when the client sent none
/// (a client that probed with `server/discover`, or a session opened without one).
fn recorded_initialize(shared: &Shared) -> Option<String> {
    let index = &shared.index;
    let ex = index
        .exchanges
        .iter()
        .find(|ex| index.msgs[ex.request].method.as_deref() == Some("initialize"))?;
    index.read_text(&index.msgs[ex.request]).ok()
}

/// Answers the client's request `bytes` (id `client_id`) from the live server, passing what it
/// sends meanwhile to `out`. `taped`: the exchange is appended to the tape (a miss), or not (a
/// call chosen with `--live`).
pub(crate) async fn forward<O: Sink + ?Sized>(
    shared: &Arc<Shared>,
    out: &O,
    bytes: &[u8],
    client_id: &str,
    taped: bool,
) {
    let Some(live) = &shared.live else { return };
    let fail = |why: String| {
        let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": super::explain::MISS_CODE, "message": format!("mcptape play: the live server could not answer: {why}")}});
        with_id(&msg.to_string(), client_id).expect("our own JSON")
    };
    let conn = match live.connect(shared, bytes).await {
        Ok(c) => c,
        Err(why) => {
            out.emit(fail(why).into_bytes()).await;
            shared.report.lock().expect("report lock").missed += 1;
            return;
        }
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let live_id = live.cfg.id();
    let Ok(sent) = with_id(text, &live_id) else {
        return;
    };
    let params = crate::wire::params::params_of(bytes);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(ROUTE_QUEUE);
    let answer = conn.expect(&live_id);
    conn.routes.lock().expect("routes lock").push(Route {
        id: live_id.clone(),
        token: crate::wire::params::progress_token(params.as_ref(), true),
        tx,
        taped,
    });
    let tape = taped.then(|| conn.tape.clone()).flatten();
    if let Some(t) = &tape {
        t.message(Dir::C2S, sent.as_bytes(), None);
    }
    conn.send(sent.into_bytes(), Some(live_id.clone())).await;
    // What the live server sends meanwhile goes out in order, the answer last. Both branches
    // are cancel-safe (a channel receive, a oneshot).
    let mut answer = answer;
    let got = loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some(line) => out.emit(line).await,
                None => break None,
            },
            a = &mut answer => break a.ok(),
        }
    };
    conn.routes
        .lock()
        .expect("routes lock")
        .retain(|r| r.id != live_id);
    while let Ok(line) = rx.try_recv() {
        out.emit(line).await;
    }
    let got = match got {
        Some(Ok(got)) => got,
        missing => {
            let why = match missing {
                Some(Err(why)) => why,
                _ => "it exited before answering".into(),
            };
            out.emit(fail(why).into_bytes()).await;
            shared.report.lock().expect("report lock").missed += 1;
            return;
        }
    };
    let reply = std::str::from_utf8(&got)
        .ok()
        .and_then(|t| with_id(t, client_id).ok());
    match reply {
        Some(r) => out.emit(r.into_bytes()).await,
        None => {
            out.emit(fail("its answer was not JSON".into()).into_bytes())
                .await
        }
    }
    if tape.is_some() {
        if let Some(t) = &live.cfg.tape {
            t.appended.fetch_add(1, Ordering::Relaxed);
        }
    }
    shared.report.lock().expect("report lock").live += 1;
}

/// A forwarded request waiting for its answer: where the server's messages for it go.
struct Route {
    id: String,
    /// The request's progress token (canonical JSON): progress for it goes here.
    token: Option<String>,
    tx: mpsc::Sender<Vec<u8>>,
    taped: bool,
}

/// The live server's answer to a request, or why none will come (said by its HTTP client; a
/// child that exits just drops the sender).
type LiveAnswer = Result<Vec<u8>, String>;

/// One live connection: a child process over pipes, or an HTTP session.
struct Conn {
    wire: Wire,
    /// Live request id → where its answer goes.
    /// Live request id → where its answer goes (or why none will come).
    pending: Mutex<HashMap<String, oneshot::Sender<LiveAnswer>>>,
    routes: Mutex<Vec<Route>>,
    /// The session's own output (stdout; the GET stream over HTTP), for what belongs to no
    /// forwarded request.
    out: mpsc::Sender<OutLine>,
    shared: Weak<Shared>,
    tape: Option<Recorder>,
    /// The handshake is over: what the server sends is the client's from now on.
    ready: AtomicBool,
    tasks: Mutex<tokio::task::JoinSet<()>>,
}

enum Wire {
    Stdio {
        stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
        /// Boxed: a child's handle is large, and one connection holds one.
        child: Box<tokio::sync::Mutex<Option<tokio::process::Child>>>,
    },
    Http {
        wire: super::live_http::HttpWire,
        /// What came back on the POSTs, for the reader task (as a child's stdout is read).
        inbox: mpsc::Sender<Vec<u8>>,
    },
}

impl Conn {
    async fn start(
        cfg: &Arc<LiveConfig>,
        shared: &Arc<Shared>,
        init: Option<String>,
        request: &[u8],
    ) -> Result<Arc<Conn>, String> {
        let mut inbox_rx = None;
        let (wire, stdout) = match &cfg.target {
            LiveTarget::Command(command) => {
                let cmd = crate::transport::stdio::server_command(command)
                    .map_err(|e| format!("could not start it: {e}"))?;
                let mut child = tokio::process::Command::from(cmd)
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| format!("could not start it: {e}"))?;
                let stdin = child.stdin.take();
                let stdout = child.stdout.take();
                (
                    Wire::Stdio {
                        stdin: tokio::sync::Mutex::new(stdin),
                        child: Box::new(tokio::sync::Mutex::new(Some(child))),
                    },
                    stdout,
                )
            }
            LiveTarget::Url(url) => {
                let (inbox, rx) = mpsc::channel(ROUTE_QUEUE);
                inbox_rx = Some(rx);
                let wire = super::live_http::HttpWire::new(url)?;
                (Wire::Http { wire, inbox }, None)
            }
        };
        let conn = Arc::new(Conn {
            wire,
            pending: Mutex::new(HashMap::new()),
            routes: Mutex::new(Vec::new()),
            out: shared.out.clone(),
            shared: Arc::downgrade(shared),
            tape: cfg.tape.as_ref().and_then(|t| t.recorder(&cfg.target)),
            ready: AtomicBool::new(false),
            tasks: Mutex::new(tokio::task::JoinSet::new()),
        });
        if let Some(stdout) = stdout {
            let reader = read_stdout(Arc::downgrade(&conn), stdout, shared.opts.max_message);
            conn.tasks.lock().expect("tasks lock").spawn(reader);
        }
        if let Some(rx) = inbox_rx {
            let reader = read_inbox(Arc::downgrade(&conn), rx);
            conn.tasks.lock().expect("tasks lock").spawn(reader);
        }
        conn.handshake(cfg, init, request).await?;
        conn.ready.store(true, Ordering::SeqCst);
        Ok(conn)
    }

    /// The live server's handshake, not taped: `server/discover` for a 2026-07-28 request
    /// (falling back to `initialize` when the server does not know it), else `initialize` and
    /// `notifications/initialized`.
    async fn handshake(
        self: &Arc<Self>,
        cfg: &LiveConfig,
        init: Option<String>,
        request: &[u8],
    ) -> Result<(), String> {
        let meta = crate::wire::params::params_of(request)
            .and_then(|p| p.get("_meta").cloned())
            .filter(|m| m.get("io.modelcontextprotocol/protocolVersion").is_some());
        if let Some(meta) = meta {
            let id = cfg.id();
            let probe = json!({"jsonrpc": "2.0", "id": Value::Null, "method": "server/discover", "params": {"_meta": meta}});
            let probe = with_id(&probe.to_string(), &id).expect("our own JSON");
            let answer = self.ask(&id, probe).await?;
            if classify(&answer).kind != Kind::Error {
                return Ok(());
            }
        }
        let init = init.unwrap_or_else(|| {
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "mcptape", "version": env!("CARGO_PKG_VERSION")}}}).to_string()
        });
        let id = cfg.id();
        let init =
            with_id(&init, &id).map_err(|e| format!("the initialize to send is not JSON: {e}"))?;
        let answer = self.ask(&id, init).await?;
        if classify(&answer).kind == Kind::Error {
            return Err(format!(
                "it refused initialize: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(300)])
            ));
        }
        if let Wire::Http { wire, .. } = &self.wire {
            wire.note_initialized(&answer);
        }
        let done = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec();
        self.send(done, None).await;
        Ok(())
    }

    /// Sends a handshake request and waits for its answer.
    async fn ask(self: &Arc<Self>, id: &str, text: String) -> Result<Vec<u8>, String> {
        let rx = self.expect(id);
        self.send(text.into_bytes(), Some(id.to_string())).await;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, rx).await {
            Ok(Ok(Ok(a))) => Ok(a),
            Ok(Ok(Err(why))) => Err(format!("its answer to the handshake: {why}")),
            Ok(Err(_)) => Err("it exited during the handshake".into()),
            Err(_) => Err(format!(
                "no answer to the handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            )),
        }
    }

    fn expect(&self, id: &str) -> oneshot::Receiver<LiveAnswer> {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .expect("pending lock")
            .insert(id.to_string(), tx);
        rx
    }

    /// Sends one message to the live server. `request`: the live id of a request, whose
    /// answer (over HTTP, with what comes on its stream) is read back.
    async fn send(self: &Arc<Self>, mut bytes: Vec<u8>, request: Option<String>) {
        match &self.wire {
            Wire::Stdio { stdin, .. } => {
                // One message per line: a pretty-printed body POSTed to play over HTTP would
                // otherwise reach the server as several broken lines, and its answer never come.
                if let std::borrow::Cow::Owned(flat) = crate::wire::codec::one_line(&bytes) {
                    bytes = flat;
                }
                bytes.push(b'\n');
                let mut stdin = stdin.lock().await;
                let broken = match stdin.as_mut() {
                    Some(s) => s.write_all(&bytes).await.and(s.flush().await).is_err(),
                    None => true,
                };
                if broken {
                    // The server is gone: nothing will answer what waits.
                    *stdin = None;
                    self.pending.lock().expect("pending lock").clear();
                }
            }
            Wire::Http { wire, inbox } => {
                let (wire, inbox) = (wire.clone(), inbox.clone());
                let conn = Arc::downgrade(self);
                let task = async move {
                    let failed = wire
                        .post(bytes, |msg| {
                            let inbox = inbox.clone();
                            async move {
                                let _ = inbox.send(msg).await;
                            }
                        })
                        .await;
                    if let Err(why) = failed {
                        crate::diag!("mcptape play: live server: {why}");
                        if let (Some(id), Some(c)) = (request, conn.upgrade()) {
                            // Its waiter is told why: no answer can come.
                            let tx = c.pending.lock().expect("pending lock").remove(&id);
                            if let Some(tx) = tx {
                                let _ = tx.send(Err(why));
                            }
                        }
                    }
                };
                self.tasks.lock().expect("tasks lock").spawn(task);
            }
        }
    }

    /// What the live server sent: an answer goes to its waiter; a notification or a request
    /// to the client, by the request it belongs to.
    async fn incoming(self: &Arc<Self>, bytes: Vec<u8>) {
        let c = classify(&bytes);
        let ready = self.ready.load(Ordering::SeqCst);
        // Which forwarded request a message belongs to: its own id (an answer), its progress
        // token, else the latest request still open (a stdio server says no more).
        let route = {
            let routes = self.routes.lock().expect("routes lock");
            let by_token = (c.method.as_deref() == Some("notifications/progress"))
                .then(|| crate::wire::params::params_of(&bytes))
                .flatten()
                .and_then(|p| crate::wire::params::progress_token(Some(&p), false))
                .and_then(|t| {
                    routes
                        .iter()
                        .find(|r| r.token.as_deref() == Some(t.as_str()))
                });
            let own = c.id.as_deref().and_then(|id| {
                matches!(c.kind, Kind::Response | Kind::Error)
                    .then(|| routes.iter().find(|r| r.id == id))
                    .flatten()
            });
            own.or(by_token)
                .or(routes.last())
                .map(|r| (r.tx.clone(), r.taped))
        };
        let taped = route.as_ref().is_some_and(|(_, t)| *t);
        if let (true, Some(t)) = (ready && taped, &self.tape) {
            t.message(Dir::S2C, &bytes, None);
        }
        match c.kind {
            Kind::Response | Kind::Error => {
                let id = c.id.unwrap_or_default();
                let tx = self.pending.lock().expect("pending lock").remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(Ok(bytes));
                }
            }
            // Notifications during the handshake were for the handshake: the client has had
            // its own from the tape. A request (server-everything asks for roots at once)
            // waits for an answer, so it goes to the client all the same.
            Kind::Notification if !ready => {}
            Kind::Request => {
                let server_id = c.id.unwrap_or_default();
                let to = route.map_or_else(|| To::Own(self.out.clone()), |(tx, _)| To::Route(tx));
                // Sent from here, in the order the server wrote it: neither a notification
                // after it nor the answer that ends its call can overtake it (the call's
                // stream would then be gone before it). Only the wait for the client is a task.
                let Some(asked) = self.ask_client(to, &bytes).await else {
                    return;
                };
                let conn = Arc::downgrade(self);
                self.tasks
                    .lock()
                    .expect("tasks lock")
                    .spawn(answer_back(conn, asked, server_id, taped));
            }
            Kind::Notification => match route {
                Some((tx, _)) => {
                    let _ = tx.send(bytes).await;
                }
                None => self.out.emit(bytes).await,
            },
            // A stray line on the server's stdout: taped (above), not the client's.
            _ => {}
        }
    }

    async fn shutdown(&self) {
        match &self.wire {
            Wire::Stdio { stdin, child } => {
                stdin.lock().await.take();
                if let Some(mut child) = child.lock().await.take() {
                    if tokio::time::timeout(LIVE_GRACE, child.wait())
                        .await
                        .is_err()
                    {
                        let _ = child.kill().await;
                    }
                }
            }
            Wire::Http { wire, .. } => wire.delete().await,
        }
        let mut tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks lock"));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        self.pending.lock().expect("pending lock").clear();
    }
}

/// Reads the live server's stdout, a line at a time, until it closes.
async fn read_stdout(conn: Weak<Conn>, mut stdout: tokio::process::ChildStdout, max: usize) {
    let mut framer = Framer::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut lines = Vec::new();
        framer.push(&buf[..n], |f| {
            if let crate::wire::Frame::Line(l) = f {
                lines.push(l.bytes.to_vec());
            }
        });
        let Some(c) = conn.upgrade() else { return };
        for line in lines {
            c.incoming(line).await;
        }
    }
    // The server is gone: whoever waits for an answer gets none.
    if let Some(c) = conn.upgrade() {
        c.pending.lock().expect("pending lock").clear();
    }
}

/// Hands what came back on the POSTs to `incoming`, one message at a time, in order.
async fn read_inbox(conn: Weak<Conn>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(msg) = rx.recv().await {
        let Some(c) = conn.upgrade() else { return };
        c.incoming(msg).await;
    }
}

/// Where a live server's request goes to the client.
enum To {
    /// A forwarded call's stream (its lines are framed where they go out).
    Route(mpsc::Sender<Vec<u8>>),
    /// The session's own output: a line, its terminator added here.
    Own(mpsc::Sender<OutLine>),
}

impl To {
    async fn send(&self, line: Vec<u8>) {
        match self {
            To::Route(tx) => {
                let _ = tx.send(line).await;
            }
            To::Own(out) => out.emit(line).await,
        }
    }
}

/// A live server's request, sent to the client: where its answer comes, and how long and until
/// what it is waited for.
struct Asked {
    answer: oneshot::Receiver<Vec<u8>>,
    closed: tokio::sync::watch::Receiver<bool>,
    timeout: Duration,
}

impl Conn {
    /// Sends a live server's request (sampling, elicitation, roots) to the client with an id of
    /// play's, its answer expected under that id. `None` when the session is gone or the
    /// request is not JSON.
    async fn ask_client(&self, to: To, bytes: &[u8]) -> Option<Asked> {
        let shared = self.shared.upgrade()?;
        let play_id = shared.next_id.fetch_add(1, Ordering::Relaxed).to_string();
        let request = std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| with_id(t, &play_id).ok())?;
        let (tx, answer) = oneshot::channel();
        shared
            .pending
            .lock()
            .expect("pending lock")
            .insert(play_id, tx);
        let asked = Asked {
            answer,
            closed: shared.closed.subscribe(),
            timeout: shared.opts.answer_timeout,
        };
        // Not held while sending: the session's end must be able to take it back.
        drop(shared);
        to.send(request.into_bytes()).await;
        Some(asked)
    }
}

/// The client's answer to a live server's request, back to the server with the server's id
/// (an error of play's when none comes).
async fn answer_back(conn: Weak<Conn>, asked: Asked, server_id: String, taped: bool) {
    let Asked {
        answer,
        mut closed,
        timeout,
    } = asked;
    // Cancel-safe, all three: a oneshot, a watch wait, a sleep.
    let answer = tokio::select! {
        a = answer => a.ok(),
        _ = closed.wait_for(|c| *c) => None,
        _ = tokio::time::sleep(timeout) => None,
    };
    let reply = answer
        .and_then(|a| String::from_utf8(a).ok())
        .and_then(|a| with_id(&a, &server_id).ok())
        .unwrap_or_else(|| {
            let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": -32603, "message": "mcptape play: the client did not answer this request"}});
            with_id(&msg.to_string(), &server_id).expect("our own JSON")
        });
    let Some(conn) = conn.upgrade() else { return };
    if let (true, Some(t)) = (taped, &conn.tape) {
        t.message(Dir::C2S, reply.as_bytes(), None);
    }
    conn.send(reply.into_bytes(), None).await;
}
