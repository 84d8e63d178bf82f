//! Processes that listen, and a raw HTTP/1.1 client to talk to them. Every server a test starts
//! is on 127.0.0.1, on a port the kernel chose when the server bound it (the server says which),
//! and is killed and reaped when its guard drops (also when the test fails). A port picked free
//! beforehand and handed to a server is not used where that can be helped: tests run in
//! parallel, and another test's server could take the port first (see [`listening_on_0`]).

use super::{bin, peer, python, repo, s, text, tmp};
use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to listen, and record or play to exit after a signal.
const PATIENCE: Duration = Duration::from_secs(30);

// --- processes -------------------------------------------------------------------------------

/// A process a test started: SIGKILLed and reaped on drop unless it has exited. Stdin is closed;
/// stderr (and stdout, unless piped) goes to its log file.
pub struct Proc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr to `log`.
    pub fn spawn(name: &str, cmd: Command, log: PathBuf) -> Proc {
        Proc::spawn_to(name, cmd, log, None)
    }

    pub fn spawn_to(name: &str, mut cmd: Command, log: PathBuf, stdout: Option<Stdio>) -> Proc {
        let file = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let out = match stdout {
            Some(o) => o,
            None => file.try_clone().expect("log file").into(),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.into(),
            child: Some(child),
            log,
        }
    }

    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("not stopped yet")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("not stopped yet").id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn died(&mut self) -> Option<ExitStatus> {
        self.child().try_wait().expect("wait")
    }

    /// Waits until the log has a whole line with `said` followed by a port number, as a server
    /// told to bind port 0 says which port it got (and listens by then); returns the port. Fails,
    /// with the log, if the process exits first or does not say it within [`PATIENCE`].
    pub fn wait_port(&mut self, said: &str) -> u16 {
        let start = Instant::now();
        loop {
            if let Some(port) = said_port(&self.log_text(), said) {
                return port;
            }
            if let Some(st) = self.died() {
                panic!(
                    "{} exited ({st}) before saying its port ({said:?}…); log {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_text()
                );
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{} never said its port ({said:?}…) within {PATIENCE:?}; log {}:\n{}",
                self.name,
                self.log.display(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the log holds `needle` (or the process dies, or 20 s pass).
    pub fn wait_log(&mut self, needle: &str) {
        let start = Instant::now();
        while !self.log_text().contains(needle) {
            if let Some(st) = self.died() {
                panic!("{} exited ({st}); log:\n{}", self.name, self.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{} never logged {needle:?}; log:\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit by itself; after `limit` it is killed and `None` returned.
    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.died() {
                self.child = None;
                return Some(st);
            }
            if start.elapsed() > limit {
                let mut c = self.child.take().expect("running");
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` and waits for the exit; fails the test if it takes longer than `within`.
    pub fn stop(&mut self, sig: i32, within: Duration) -> ExitStatus {
        let pid = self.pid() as i32;
        // SAFETY: kill(2) on a child this guard spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill {pid} {sig}");
        match self.wait_for(within) {
            Some(st) => st,
            None => panic!(
                "{} did not exit within {within:?} of signal {sig}; log {}:\n{}",
                self.name,
                self.log.display(),
                self.log_text()
            ),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The port in the first whole line (one ended by a newline) of `log` that holds `said` followed
/// at once by digits.
fn said_port(log: &str, said: &str) -> Option<u16> {
    let whole = &log[..log.rfind('\n')? + 1];
    whole.lines().find_map(|l| {
        let rest = &l[l.find(said)? + said.len()..];
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..digits].parse().ok()
    })
}

/// What the test servers of ours say once they listen, before the port they bound: the stdlib
/// upstreams of [`py_upstream`], tests/peers/py_server.py and corpus_server.py over HTTP, and
/// server-everything under tests/peers/loopback.js.
pub const LISTENING_ON: &str = "mcptape-test-upstream listening on port ";

/// Starts `cmd`, a server told to bind a loopback port of the kernel's choosing (port 0) that
/// says which in its output (to `log`) with a line holding `said` and then the port, e.g.
/// [`LISTENING_ON`]; returns it and the port once it said so. It listens by then, on a port
/// nothing else had: a port picked free beforehand and handed to the server could be taken by
/// another test's server before it bound it (seen in CI: the upstream died on the bind, the
/// test's wait for the port was answered by the other server, and the test then met a refused
/// connection). Fails, with the log, if the server exits first or does not say within 30 s.
pub fn listening_on_0(name: &str, log: PathBuf, cmd: Command, said: &str) -> (Proc, u16) {
    let mut p = Proc::spawn(name, cmd, log);
    let port = p.wait_port(said);
    (p, port)
}

/// A loopback port picked free: bound with port 0, read, closed. Nothing keeps another process
/// from taking it before it is used: see [`listening`], the one user.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// How many times [`listening`] starts a server that lost its port to another process.
const PORT_TRIES: usize = 5;

/// For a server that takes a port but cannot say which one it bound (use [`listening_on_0`]
/// for one that can): starts what `cmd` builds for a port picked free, output to `log`, and
/// waits until the port is listened on by the process or one of its descendants (a socket in
/// its descriptors), not by anything else. Another process can take the port between the pick
/// and the server's bind: the server is then started again on another port (when it exited
/// saying the address is in use, or the port is seen listened on by someone else), up to
/// [`PORT_TRIES`] times. Returns it and the port. Waits a minute at most (the third-party
/// servers started so may be slow to start; the deadline only ends a hung wait).
pub fn listening(name: &str, log: PathBuf, mut cmd: impl FnMut(u16) -> Command) -> (Proc, u16) {
    let mut lost = String::new();
    for _ in 0..PORT_TRIES {
        let port = free_port();
        let mut p = Proc::spawn(name, cmd(port), log.clone());
        let start = Instant::now();
        let why = loop {
            let listeners = listening_sockets(port);
            if !listeners.is_empty() {
                if process_tree(p.pid())
                    .iter()
                    .any(|pid| owns_a_socket(*pid, &listeners))
                {
                    return (p, port);
                }
                break "another process listens there";
            }
            if let Some(st) = p.died() {
                let text = p.log_text();
                let lower = text.to_ascii_lowercase();
                let in_use = lower.contains("in use") || lower.contains("eaddrinuse");
                assert!(
                    in_use,
                    "{name} exited ({st}) before listening on {port}; log {}:\n{text}",
                    log.display()
                );
                break "it exited: the address was in use";
            }
            assert!(
                start.elapsed() < PATIENCE * 2,
                "{name} never listened on {port}; log {}:\n{}",
                log.display(),
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        lost.push_str(&format!(
            "\n--- port {port} lost ({why}); its log:\n{}",
            p.log_text()
        ));
    }
    panic!("{name} lost its port {PORT_TRIES} times:{lost}");
}

/// The inodes of the TCP sockets listening on `port` (any address, IPv4 or IPv6), from
/// /proc/net/tcp and tcp6.
fn listening_sockets(port: u16) -> Vec<String> {
    const LISTEN: &str = "0A";
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && f.get(3) == Some(&LISTEN) {
                if let Some(inode) = f.get(9) {
                    inodes.push(inode.to_string());
                }
            }
        }
    }
    inodes
}

/// Whether one of `pid`'s descriptors is one of the sockets `inodes`.
fn owns_a_socket(pid: u32, inodes: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| {
            let l = l.to_string_lossy();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|i| inodes.iter().any(|x| x == i))
        })
    })
}

/// `root` and its descendants, from /proc/PID/stat.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `PID (COMM) STATE PPID …`; COMM may hold spaces and parentheses.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// A loopback port held bound but not listening. A connection to it is refused, as to a port
/// nothing listens on; unlike a port picked free and closed, it cannot be taken by another
/// test's server while the guard lives: the kernel hands out no bound port for port 0, and a
/// bind to it fails (for [`PortHold::on`], one without SO_REUSEADDR).
pub struct PortHold {
    _sock: socket2::Socket,
    pub port: u16,
}

impl PortHold {
    /// A port of the kernel's choosing, held: nothing else can bind it.
    pub fn any() -> PortHold {
        PortHold::hold(0, false)
    }

    /// `port` held (fails if it is taken), for a server of ours to be started on again: the
    /// socket has SO_REUSEADDR, so it binds despite the TIME_WAIT connections of the server that
    /// was there, and a server that sets it too (Python's http.server and werkzeug do) can bind
    /// the port while it is held. Drop the hold once that server listens.
    pub fn on(port: u16) -> PortHold {
        PortHold::hold(port, true)
    }

    fn hold(port: u16, reuse: bool) -> PortHold {
        use socket2::{Domain, Socket, Type};
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        if reuse {
            sock.set_reuse_address(true).expect("SO_REUSEADDR");
        }
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        sock.bind(&at.into())
            .unwrap_or_else(|e| panic!("hold 127.0.0.1:{port}: {e}"));
        let port = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("the held port")
            .port();
        PortHold { _sock: sock, port }
    }

    /// `http://127.0.0.1:PORT`, where a connection is refused.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// server-everything in an HTTP `mode` (`streamableHttp` or `sse`) on a port of the kernel's
/// choosing (PORT=0): the real entry file behind node_modules/.bin/mcp-server-everything under
/// the preload tests/peers/loopback.js, which keeps its listener on 127.0.0.1 (it binds all
/// interfaces otherwise) and says the port it got with a line of [`LISTENING_ON`]
/// (server-everything itself would say "port 0"). Start it with [`listening_on_0`].
pub fn everything_http_cmd(mode: &str) -> Command {
    let entry = std::fs::canonicalize(peer("node_modules/.bin/mcp-server-everything"))
        .expect("resolve server-everything's entry file");
    let mut c = Command::new("node");
    c.arg("--require")
        .arg(peer("loopback.js"))
        .arg(entry)
        .arg(mode)
        .env("PORT", "0");
    c
}

/// The Python SDK fixture server over Streamable HTTP on a port of the kernel's choosing
/// (`--port 0`), which it says with a line of [`LISTENING_ON`]. Start it with
/// [`listening_on_0`].
pub fn py_server_http_cmd() -> Command {
    let mut c = Command::new(python());
    c.arg(peer("py_server.py")).args(["--http", "--port", "0"]);
    c
}

/// What every stdlib upstream script of the tests starts with: its imports; `switch(NAME)`, an
/// event the test sets with `GET /release/NAME` ([`release`]); and `Quiet`, a handler base
/// speaking HTTP/1.0 (a body without a length ends when the connection closes) that logs no
/// requests, with what the scripts share: read the POSTed message, write at once, answer 202,
/// 405, JSON, start an SSE stream, take a release switch.
const PY_HTTP_PRELUDE: &str = r#"
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

switches = {}

def switch(name):
    return switches.setdefault(name, threading.Event())

class Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def read_msg(self):
        """The JSON-RPC message POSTed: (it, its method, its id)."""
        n = int(self.headers.get("Content-Length") or 0)
        msg = json.loads(self.rfile.read(n) or b"{}")
        return msg, msg.get("method"), msg.get("id")

    def w(self, text, pause=0.0):
        """Writes `text` at once (then sleeps `pause` seconds)."""
        self.wfile.write(text.encode())
        self.wfile.flush()
        if pause:
            time.sleep(pause)

    def accepted(self):
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def not_allowed(self, *headers):
        self.send_response(405)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()

    def send_json(self, obj, status=200, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def released(self):
        """`GET /release/NAME` of a switch: set it, answer 204, True. Other paths: False."""
        name = self.path.rsplit("/", 1)[-1]
        if not (self.path.startswith("/release/") and name in switches):
            return False
        switches[name].set()
        self.send_response(204)
        self.end_headers()
        return True
"#;

/// What it ends with: handler `H` served, a thread per request, on the port in argv[1] (0: one
/// of the kernel's choosing), said on stderr with a line of [`LISTENING_ON`] once it listens.
const PY_HTTP_SERVE: &str = r#"
ThreadingHTTPServer.daemon_threads = True
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
sys.stderr.write("%s%d\n" % (LISTENING_ON, server.server_address[1]))
sys.stderr.flush()
server.serve_forever()
"#;

/// A stdlib-Python HTTP upstream: `handler` defines class `H(Quiet)` (see PY_HTTP_PRELUDE);
/// run as `python NAME.py 0 ARGS…` in `dir`, logging to `dir/NAME.log`. Returns it and its
/// port, once it listens: it binds a port of the kernel's choosing and says which (see
/// [`listening_on_0`]).
pub fn py_upstream(dir: &Path, name: &str, handler: &str, args: &[&str]) -> (Proc, u16) {
    let script = dir.join(format!("{name}.py"));
    let listening_line = format!("LISTENING_ON = {LISTENING_ON:?}\n");
    std::fs::write(
        &script,
        [PY_HTTP_PRELUDE, &listening_line, handler, PY_HTTP_SERVE].concat(),
    )
    .expect("write upstream script");
    let mut c = Command::new(python());
    c.arg(&script).arg("0").args(args);
    listening_on_0(name, dir.join(format!("{name}.log")), c, LISTENING_ON)
}

/// An upstream of [`py_upstream`] with `mcptape record --url` in front of it.
pub struct RecordedUpstream {
    pub up: Proc,
    /// The upstream's `http://127.0.0.1:P` (its release switches are under it).
    pub base: String,
    pub tape: PathBuf,
    /// The proxy, recording `BASE/mcp` to `tape`.
    pub rec: Served,
}

/// [`py_upstream`] `name` running `handler` in `dir`, recorded through `record --url` to
/// `dir/TAPE`.
pub fn record_upstream(dir: &Path, name: &str, handler: &str, tape: &str) -> RecordedUpstream {
    let (up, port) = py_upstream(dir, name, handler, &[]);
    let base = format!("http://127.0.0.1:{port}");
    let tape = dir.join(tape);
    let rec = Served::record(&format!("{base}/mcp"), &tape);
    RecordedUpstream {
        up,
        base,
        tape,
        rec,
    }
}

/// `GET BASE/release/WHAT`: sets the switch WHAT of an upstream of [`py_upstream`], which must
/// answer 204.
pub fn release(base: &str, what: &str) {
    let s = http_open(&format!("{base}/release/{what}"), "GET", &[], b"");
    assert!(
        s.status_line.starts_with("HTTP/1.0 204"),
        "release {what}: {}",
        s.status_line
    );
}

/// `mcptape record --url`, `record --listen` or `play --listen`: the first stdout line is the URL
/// to use; stopped with a signal. Its stderr goes to a log file (its own temp folder unless
/// given). Killed on drop if still running.
pub struct Served {
    proc: Proc,
    what: String,
    pub url: String,
    _logs: Option<tempfile::TempDir>,
}

impl Served {
    pub fn spawn(args: &[&str]) -> Served {
        let logs = tmp();
        let log = logs.path().join("stderr.log");
        let mut served = Served::spawn_logged(args, log);
        served._logs = Some(logs);
        served
    }

    /// [`Served::spawn`] with stderr to `log`.
    pub fn spawn_logged<A: AsRef<str>>(args: &[A], log: PathBuf) -> Served {
        Served::spawn_logged_env(args, log, &[])
    }

    /// [`Served::spawn`] with these environment variables set (they reach a server mcptape
    /// starts).
    pub fn spawn_env<A: AsRef<str>>(args: &[A], env: &[(String, String)]) -> Served {
        let logs = tmp();
        let log = logs.path().join("stderr.log");
        let mut served = Served::spawn_logged_env(args, log, env);
        served._logs = Some(logs);
        served
    }

    fn spawn_logged_env<A: AsRef<str>>(
        args: &[A],
        log: PathBuf,
        env: &[(String, String)],
    ) -> Served {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let what = format!("mcptape {}", args.join(" "));
        let mut cmd = Command::new(bin());
        cmd.args(&args);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let mut proc = Proc::spawn_to(&what, cmd, log, Some(Stdio::piped()));
        let stdout = proc.child().stdout.take().expect("stdout piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let _ = tx.send(first);
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest); // stdout carries nothing else; keep it drained
        });
        let mut served = Served {
            proc,
            what,
            url: String::new(),
            _logs: None,
        };
        let first = rx.recv_timeout(PATIENCE).unwrap_or_default();
        if !first.starts_with("http://") || !first.ends_with('\n') {
            let (st, err) = served.signal(libc::SIGKILL, PATIENCE);
            panic!(
                "{} printed no URL first (got {first:?}); {st}; stderr:\n{err}",
                served.what
            );
        }
        served.url = first.trim_end().to_string();
        served
    }

    /// `mcptape record --url UPSTREAM --tape TAPE`.
    pub fn record(upstream: &str, tape: &Path) -> Served {
        Served::spawn(&["record", "--url", upstream, "--tape", &s(tape)])
    }

    /// `mcptape record --listen 127.0.0.1:0 --tape TAPE -- SERVER…`: a stdio server behind HTTP.
    pub fn bridge(tape: &Path, server: &[String]) -> Served {
        let tape = s(tape);
        let mut args = vec!["record", "--listen", "127.0.0.1:0", "--tape", &tape, "--"];
        args.extend(server.iter().map(String::as_str));
        Served::spawn(&args)
    }

    /// `mcptape play TAPE --listen 127.0.0.1:0`.
    pub fn play(tape: &Path) -> Served {
        Served::play_with(tape, &[])
    }

    /// [`Served::play`] with more flags.
    pub fn play_with(tape: &Path, flags: &[&str]) -> Served {
        let tape = s(tape);
        let mut args = vec!["play", &tape, "--listen", "127.0.0.1:0"];
        args.extend(flags);
        Served::spawn(&args)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// `host:port` of the URL.
    pub fn authority(&self) -> String {
        split_url(&self.url).0
    }

    pub fn port(&self) -> u16 {
        let a = self.authority();
        a.rsplit_once(':').expect("port").1.parse().expect("port")
    }

    /// stderr so far.
    pub fn log_text(&self) -> String {
        self.proc.log_text()
    }

    /// Sends `sig` and waits (at most `within`) for the exit; returns the status and stderr.
    pub fn signal(&mut self, sig: i32, within: Duration) -> (ExitStatus, String) {
        let st = self.proc.stop(sig, within);
        (st, self.log_text())
    }

    /// SIGINT; requires exit status 0 and returns stderr.
    pub fn stop(mut self) -> String {
        let (st, err) = self.signal(libc::SIGINT, PATIENCE);
        assert!(
            st.success(),
            "{} should exit 0 after SIGINT, got {st}; stderr:\n{err}",
            self.what
        );
        err
    }
}

// --- a raw HTTP/1.1 client -------------------------------------------------------------------

/// How long a read may wait before the test fails (instead of hanging).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// (`host:port`, `/path`) of an `http://` URL.
pub fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    }
}

/// One response being read: head parsed, body decoded piece by piece as it arrives.
pub struct HttpStream {
    r: BufReader<TcpStream>,
    /// `HTTP/1.0 204 No Content`, as sent (line end removed).
    pub status_line: String,
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    chunked: bool,
    remaining: Option<usize>,
    done: bool,
}

/// Sends one request (`Connection: close`) and reads the response head. A `Host` in `headers`
/// replaces the default one.
pub fn http_open(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpStream {
    let (authority, path) = split_url(url);
    let mut stream =
        TcpStream::connect(&authority).unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("read timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    // A server that answers before reading (a listener over its connection cap answers 503 and
    // closes at once) can make the rest of the write fail: what it answered is still read.
    let sent = stream
        .write_all(req.as_bytes())
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush());
    if let Err(e) = &sent {
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "{method} {url}: writing the request: {e}"
        );
    }
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)
        .unwrap_or_else(|e| panic!("{method} {url}: no status line: {e}"));
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {url}: bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).expect("header line");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').expect("header: value");
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut s = HttpStream {
        r,
        status_line: line.trim_end().to_string(),
        status,
        headers,
        chunked: false,
        remaining: None,
        done: false,
    };
    s.chunked = s
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    s.remaining = s.header("content-length").and_then(|v| v.parse().ok());
    s
}

impl HttpStream {
    /// The header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }

    /// The next piece of the body as it arrives; None at its end.
    pub fn next_piece(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        if self.chunked {
            let mut size = String::new();
            self.r.read_line(&mut size).expect("chunk size line");
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {size:?}"));
            if n == 0 {
                self.done = true;
                return None;
            }
            let mut buf = vec![0; n + 2];
            self.r.read_exact(&mut buf).expect("chunk data");
            buf.truncate(n);
            return Some(buf);
        }
        let want = self.remaining.unwrap_or(64 * 1024).min(64 * 1024);
        if want == 0 {
            self.done = true;
            return None;
        }
        let mut buf = vec![0; want];
        let n = self.r.read(&mut buf).expect("body read");
        if n == 0 {
            self.done = true;
            return None;
        }
        buf.truncate(n);
        if let Some(rem) = self.remaining.as_mut() {
            *rem -= n;
        }
        Some(buf)
    }

    /// Reads pieces until what came holds `needle`; returns all of it.
    pub fn read_until(&mut self, needle: &str) -> Vec<u8> {
        let mut got = Vec::new();
        while !text(&got).contains(needle) {
            let piece = self.next_piece().unwrap_or_else(|| {
                panic!("the body ended before {needle:?}; got:\n{}", text(&got))
            });
            got.extend(piece);
        }
        got
    }

    /// The rest of a chunked body, and whether it ended as HTTP/1.1 ends one (the terminating
    /// chunk) rather than cut: the connection closed or reset, or a size line broken. A body
    /// that neither ends nor is cut within the read timeout fails the test.
    pub fn chunked_body_or_cut(&mut self) -> (Vec<u8>, bool) {
        assert!(self.chunked, "not a chunked body: {:?}", self.headers);
        let cut = |e: std::io::Error| {
            assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "the body neither ended nor was cut within {READ_TIMEOUT:?}"
            );
        };
        let mut all = Vec::new();
        loop {
            let mut size = String::new();
            match self.r.read_line(&mut size) {
                Ok(0) => return (all, false),
                Ok(_) => {}
                Err(e) => {
                    cut(e);
                    return (all, false);
                }
            }
            let Ok(n) = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            else {
                return (all, false);
            };
            if n == 0 {
                self.done = true;
                return (all, true);
            }
            let mut buf = vec![0; n + 2];
            if let Err(e) = self.r.read_exact(&mut buf) {
                cut(e);
                return (all, false);
            }
            all.extend_from_slice(&buf[..n]);
        }
    }

    /// The rest of the body.
    pub fn body(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(p) = self.next_piece() {
            all.extend(p);
        }
        all
    }

    /// Closes the connection both ways, the response unread: a client going away.
    pub fn hang_up(self) {
        self.r
            .get_ref()
            .shutdown(std::net::Shutdown::Both)
            .expect("shutdown");
    }
}

/// A whole request: (status, body).
pub fn http(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = http_open(url, method, headers, body);
    let b = s.body();
    (s.status, b)
}

/// A loopback upstream that answers the requests it gets, in the order they arrive (on any
/// connection), with `answers` in turn, again from the first after the last: each answer's
/// bytes as they are (already framed: chunked, a length, or to the close) in the writes its
/// cuts split them into, 20 ms apart, on a keep-alive connection (closed after the answer when
/// its head says `connection: close`). An upstream that sends many events in one write, or one
/// across two. With the connections it accepted.
pub fn scripted_upstream(
    answers: Vec<(Vec<u8>, Vec<usize>)>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let answers = Arc::new(answers);
    let next = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let (answers, next) = (answers.clone(), next.clone());
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request: its head, then its content-length's bytes.
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    let (stream, cuts) =
                        &answers[next.fetch_add(1, Ordering::SeqCst) % answers.len()];
                    let answer_head = stream.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                    let close = String::from_utf8_lossy(&stream[..answer_head])
                        .to_ascii_lowercase()
                        .contains("\r\nconnection: close");
                    let mut from = 0;
                    for &to in cuts.iter().chain([&stream.len()]) {
                        if conn.write_all(&stream[from..to]).is_err() {
                            return;
                        }
                        conn.flush().unwrap();
                        std::thread::sleep(Duration::from_millis(20));
                        from = to;
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (url, accepted)
}

/// The headers every MCP POST carries.
const MCP_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// [`MCP_POST`] and `extra`.
pub fn post_headers<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = MCP_POST.to_vec();
    h.extend_from_slice(extra);
    h
}

/// An MCP POST of `msg`, its response head read.
pub fn post_open(url: &str, msg: &Value) -> HttpStream {
    http_open(url, "POST", &post_headers(&[]), msg.to_string().as_bytes())
}

/// [`post_open`], requiring the answer's status to be 200.
#[track_caller]
pub fn post_open_ok(url: &str, msg: &Value) -> HttpStream {
    let s = post_open(url, msg);
    assert_eq!(s.status, 200, "the status of POST {url} {msg}");
    s
}

/// A whole MCP POST of `msg`: (status, body).
pub fn post(url: &str, msg: &Value) -> (u16, Vec<u8>) {
    let mut s = post_open(url, msg);
    let b = s.body();
    (s.status, b)
}

/// server-everything in an HTTP `mode` on a loopback port of the kernel's choosing, its log in
/// `dir`; returns it and its URL, `path` on it.
pub fn everything_http_at(dir: &Path, mode: &str, path: &str) -> (Proc, String) {
    let (p, port) = listening_on_0(
        &format!("server-everything {mode}"),
        dir.join(format!("everything-{mode}.log")),
        everything_http_cmd(mode),
        LISTENING_ON,
    );
    (p, format!("http://127.0.0.1:{port}{path}"))
}

/// server-everything `streamableHttp`; its URL is `http://…/mcp`.
pub fn everything_http(dir: &Path) -> (Proc, String) {
    everything_http_at(dir, "streamableHttp", "/mcp")
}

/// Starts a reference server in a folder (for its log): the process and its URL.
pub type StartServer = fn(&Path) -> (Proc, String);

/// Both reference servers over Streamable HTTP, by name, for the tests that compare what each
/// answers directly, through `record --url` and from the tape: server-everything
/// (`streamableHttp`) and the Python SDK's.
pub fn reference_http_servers() -> [(&'static str, StartServer); 2] {
    [
        ("server-everything", everything_http),
        ("the Python SDK", py_server_http),
    ]
}

/// The Python SDK fixture server over Streamable HTTP, its log in `dir`: it and its port.
pub fn py_server_http_port(dir: &Path) -> (Proc, u16) {
    listening_on_0(
        "py_server --http",
        dir.join("py_server.log"),
        py_server_http_cmd(),
        LISTENING_ON,
    )
}

/// The Python SDK fixture server over Streamable HTTP; its URL is `http://…/mcp`.
pub fn py_server_http(dir: &Path) -> (Proc, String) {
    let (p, port) = py_server_http_port(dir);
    (p, format!("http://127.0.0.1:{port}/mcp"))
}

/// The Python SDK fixture server over the HTTP+SSE transport (2024-11-05); its URL is
/// `http://…/sse`.
pub fn py_server_sse(dir: &Path) -> (Proc, String) {
    let mut c = Command::new(python());
    c.arg(peer("py_server.py")).args(["--sse", "--port", "0"]);
    let (p, port) = listening_on_0(
        "py_server --sse",
        dir.join("py_server.log"),
        c,
        LISTENING_ON,
    );
    (p, format!("http://127.0.0.1:{port}/sse"))
}

/// tests/agents/stream_upstream.py in `dir`, a small Anthropic-shaped model API (HTTPS with
/// `tls`, its CA in `dir/ca.pem`): the process and its base URL.
pub fn model_upstream(dir: &Path, tls: bool) -> (Proc, String) {
    let mut cmd = Command::new(python());
    cmd.arg(repo().join("tests/agents/stream_upstream.py"))
        .arg("--dir")
        .arg(dir)
        .arg("--release")
        .arg(dir.join("go"));
    if tls {
        cmd.arg("--tls");
    }
    let mut p = Proc::spawn_to(
        "stream_upstream.py",
        cmd,
        dir.join("upstream.log"),
        Some(Stdio::piped()),
    );
    let stdout = p.child().stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let mut r = BufReader::new(stdout);
        let _ = r.read_line(&mut first);
        let _ = tx.send(first);
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the upstream printed no URL: {}", p.log_text()));
    (p, url.trim().to_string())
}

/// The JSON-RPC messages of an HTTP answer body: the body itself when it is JSON, else its SSE
/// events' data, read as the SSE spec reads a stream: a line ends at CRLF, CR or LF, an event
/// at a blank line, and its `data:` lines are joined with LF. (A reader that splits at LF
/// alone would miss what a CR does to a client.) Panics on an event whose data is not JSON.
pub fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return vec![v];
    }
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        if line.is_empty() {
            if !data.is_empty() {
                let d = data.join("\n");
                let v = serde_json::from_str(&d)
                    .unwrap_or_else(|e| panic!("an event's data is not JSON ({e}): {d:?}"));
                out.push(v);
                data.clear();
            }
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        if field == "data" {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    out
}
