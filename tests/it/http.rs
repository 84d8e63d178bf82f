//! Streamable HTTP: `mcptape record --url` (the reverse proxy) and `mcptape play --listen`,
//! against server-everything in its `streamableHttp` mode, the Python SDK server over HTTP in
//! both eras, the Python SDK client, and tiny stdlib Python upstreams crafted for the SSE edge
//! cases. Every server is forced onto 127.0.0.1; every process a test starts is killed when the
//! test ends (the guards below), pass or fail. No timing assertions: only ordering.

use crate::harness::*;
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// --- processes -------------------------------------------------------------------------------

/// A spawned peer (server or upstream); killed and reaped on drop. Its output goes to a log file.
pub(crate) struct Proc {
    child: Child,
    name: String,
    log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            child,
            name: name.into(),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until something accepts connections on `port` (or the process dies).
    pub(crate) fn wait_listening(&mut self, port: u16) {
        let start = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Some(st) = self.child.try_wait().expect("wait") {
                panic!(
                    "{} exited ({st}) before listening on {port}; log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} never listened on {port}; log:\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on right now (bound on loopback, then closed).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

fn peers_dir() -> PathBuf {
    repo().join("tests/peers")
}

/// server-everything `streamableHttp` on a free loopback port; its URL is `http://…/mcp`.
pub(crate) fn everything_http(dir: &Path) -> (Proc, String) {
    everything_http_mode(dir, "streamableHttp", "/mcp")
}

/// server-everything in an HTTP `mode` (`streamableHttp` or `sse`), forced onto loopback.
fn everything_http_mode(dir: &Path, mode: &str, path: &str) -> (Proc, String) {
    let bin = peers_dir().join("node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "test peer {} is missing: run ./scripts/test (it installs the peers)",
        bin.display()
    );
    let entry = std::fs::canonicalize(&bin).expect("resolve server-everything entry");
    let port = free_port();
    let mut cmd = Command::new("node");
    cmd.arg("--require")
        .arg(peers_dir().join("loopback.js"))
        .arg(entry)
        .arg(mode)
        .env("PORT", port.to_string());
    let mut p = Proc::spawn(
        &format!("server-everything {mode}"),
        cmd,
        dir.join(format!("everything-{mode}.log")),
    );
    p.wait_listening(port);
    (p, format!("http://127.0.0.1:{port}{path}"))
}

/// The Python SDK fixture server over Streamable HTTP (loopback); its URL is `http://…/mcp`.
pub(crate) fn py_server_http(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let mut cmd = command(&py_server());
    cmd.args(["--http", "--port", &port.to_string()]);
    let mut p = Proc::spawn("py_server --http", cmd, dir.join("py_server.log"));
    p.wait_listening(port);
    (p, format!("http://127.0.0.1:{port}/mcp"))
}

/// A stdlib HTTP upstream for the edge cases. POST answers by JSON-RPC method:
/// `edge/sse` a crafted SSE stream (heartbeat, priming event with id and retry, an event written
/// in pieces with flushes and pauses between them, a multi-line `data:` event, then — only once
/// `GET /release/sse` arrived — the response); `edge/hang` one progress event, then after
/// `GET /release/hang` more events until the reader goes away; `edge/fail` a 500 in text/plain;
/// anything else a plain JSON result echoing the method. HTTP/1.0: bodies end when it closes.
const EDGE_UPSTREAM: &str = r#"
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

release = {"sse": threading.Event(), "hang": threading.Event()}

SSE_HEAD = [
    (": heartbeat\n\n", 0.05),
    ("id: prime-1\nretry: 1500\ndata:\n\n", 0.05),
    ("event: message\nid: ev-2\nda", 0.1),
    ('ta: {"jsonrpc":"2.0","method":"notifications/message",', 0.1),
    ('"params":{"level":"info","data":"split"}}\n', 0.1),
    ("\n", 0.05),
    ('id: ev-3\ndata: {"jsonrpc":"2.0","method":"notifications/message",\n'
     'data: "params":{"level":"info","data":"multi-line","token":"s3cr3t-sse-token-value"}}\n\n', 0.0),
]

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def w(self, text, pause=0.0):
        self.wfile.write(text.encode())
        self.wfile.flush()
        if pause:
            time.sleep(pause)

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        if self.path.startswith("/release/") and name in release:
            release[name].set()
            self.send_response(204)
            self.end_headers()
            return
        last = self.headers.get("Last-Event-ID")
        if last is not None:
            # Resumption: the stream picks up after the event the client last saw.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.w('id: resumed-1\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"resumed after %s"}}\n\n' % last)
            return
        self.send_response(405)
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        msg = json.loads(self.rfile.read(n) or b"{}")
        method, rid = msg.get("method"), msg.get("id")
        if method == "edge/fail":
            body = b"upstream exploded"
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if method in ("edge/sse", "edge/hang"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            try:
                if method == "edge/sse":
                    self.stream_sse(rid)
                else:
                    self.stream_hang(rid)
            except (BrokenPipeError, ConnectionResetError):
                print("edge: the reader went away", file=sys.stderr, flush=True)
            return
        if rid is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"echo": method}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream_sse(self, rid):
        for text, pause in SSE_HEAD:
            self.w(text, pause)
        release["sse"].wait(30)
        self.w('id: ev-4\nevent: message\ndata: {"jsonrpc":"2.0","id":%s,"result":{"ok":true}}\n\n'
               % json.dumps(rid))

    def stream_hang(self, rid):
        progress = 'id: h-%d\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":%d}}\n\n'
        self.w(progress % (1, 1))
        release["hang"].wait(30)
        for i in range(2, 1000):
            self.w(progress % (i, i), 0.01)
        self.w('data: {"jsonrpc":"2.0","id":%s,"result":{}}\n\n' % json.dumps(rid))

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// The edge-case upstream on a free loopback port; returns it and its base `http://127.0.0.1:P`.
pub(crate) fn edge_upstream(dir: &Path) -> (Proc, String) {
    let script = dir.join("edge_upstream.py");
    std::fs::write(&script, EDGE_UPSTREAM).expect("write upstream script");
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg(port.to_string());
    let mut p = Proc::spawn("edge upstream", cmd, dir.join("edge.log"));
    p.wait_listening(port);
    (p, format!("http://127.0.0.1:{port}"))
}

/// `mcptape record --url` or `mcptape play --listen`: the first stdout line is the URL to use;
/// stopped with SIGINT. Killed on drop if still running.
pub(crate) struct Served {
    what: String,
    child: Option<Child>,
    pub(crate) url: String,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

impl Served {
    pub(crate) fn spawn(args: &[&str]) -> Served {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcptape");
        let stdout = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = err.read_to_end(&mut b);
            b
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let _ = tx.send(first);
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest); // stdout carries nothing else; keep it drained
        });
        let mut served = Served {
            what: format!("mcptape {}", args.join(" ")),
            child: Some(child),
            url: String::new(),
            stderr: Some(stderr),
        };
        let first = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        if !first.starts_with("http://") || !first.ends_with('\n') {
            let (st, err) = served.stop_with(libc::SIGKILL);
            panic!("mcptape {args:?} printed no URL first (got {first:?}); {st}; stderr:\n{err}");
        }
        served.url = first.trim_end().to_string();
        served
    }

    /// `mcptape record --url UPSTREAM --tape TAPE`.
    pub(crate) fn record(upstream: &str, tape: &Path) -> Served {
        Served::spawn(&["record", "--url", upstream, "--tape", &s(tape)])
    }

    /// `mcptape play TAPE --listen 127.0.0.1:0`.
    pub(crate) fn play(tape: &Path) -> Served {
        Served::spawn(&["play", &s(tape), "--listen", "127.0.0.1:0"])
    }

    /// `host:port` of the URL.
    fn authority(&self) -> String {
        split_url(&self.url).0
    }

    fn port(&self) -> u16 {
        let a = self.authority();
        a.rsplit_once(':').expect("port").1.parse().expect("port")
    }

    fn stop_with(&mut self, sig: i32) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("stopped once");
        assert_eq!(
            unsafe { libc::kill(child.id() as i32, sig) },
            0,
            "kill {sig}"
        );
        let start = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not exit within 30 s of signal {sig}", self.what);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&err).into_owned())
    }

    /// SIGINT; requires exit status 0 and returns stderr.
    pub(crate) fn stop(mut self) -> String {
        let (st, err) = self.stop_with(libc::SIGINT);
        assert!(
            st.success(),
            "{} should exit 0 after SIGINT, got {st}; stderr:\n{err}",
            self.what
        );
        err
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// --- a raw HTTP/1.1 client -------------------------------------------------------------------

/// (`host:port`, `/path`) of an `http://` URL.
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    }
}

/// One response being read: head parsed, body decoded piece by piece as it arrives.
pub(crate) struct HttpStream {
    r: BufReader<TcpStream>,
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    chunked: bool,
    remaining: Option<usize>,
    done: bool,
}

/// Sends one request (`Connection: close`) and reads the response head. A `Host` in `headers`
/// replaces the default one.
pub(crate) fn http_open(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpStream {
    let (authority, path) = split_url(url);
    let mut stream =
        TcpStream::connect(&authority).unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
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
    stream.write_all(req.as_bytes()).expect("write request");
    stream.write_all(body).expect("write body");
    stream.flush().expect("flush");
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
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The next piece of the body as it arrives; None at its end.
    fn next_piece(&mut self) -> Option<Vec<u8>> {
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

    pub(crate) fn body(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(p) = self.next_piece() {
            all.extend(p);
        }
        all
    }
}

/// A whole request: (status, the response stream with its body unread).
fn http(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = http_open(url, method, headers, body);
    let b = s.body();
    (s.status, b)
}

/// The headers every MCP POST carries.
const MCP_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

pub(crate) fn post_headers<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = MCP_POST.to_vec();
    h.extend_from_slice(extra);
    h
}

// --- assertions ------------------------------------------------------------------------------

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("json")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the Python client against `target` (a URL or a command) and requires success.
fn py_ok(scenario: &str, mode: &str, target: &[String], what: &str) -> Value {
    let (t, out) = py_client(scenario, mode, target, &[]);
    assert!(
        out.status.success(),
        "the Python client failed {what}: {:?}\n{}\ntranscript:\n{}",
        out.status,
        text(&out.stderr),
        pretty(&t)
    );
    t
}

/// server-everything sends `notifications/tools/list_changed` (registering its conditional
/// tools) while it handles `notifications/initialized`: they go out on the GET stream only if the
/// client's GET, sent concurrently, got there first. How many a client sees is a race between the
/// peers, direct or through the proxy; comparisons of two live runs leave them out. (A replay
/// serves what the tape holds, so replays are compared with them.)
fn without_handshake_list_changed(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(list) = t["notifications"].as_array_mut() {
        list.retain(|n| n["method"] != "notifications/tools/list_changed");
    }
    t
}

fn assert_same(expected: &Value, actual: &Value, what: &str) {
    assert!(
        expected == actual,
        "the client saw something else {what}.\n--- expected:\n{}\n--- actual:\n{}",
        pretty(expected),
        pretty(actual)
    );
}

/// play's summary on stderr says nothing was missed or drifted.
fn assert_clean_play(stderr: &str) {
    assert!(
        stderr.contains("missed 0, drifted 0"),
        "play summary: {stderr}"
    );
}

/// `mcptape play TAPE` for a client to spawn, behind `/bin/sh` writing play's exit status to
/// `rc` and its stderr to `err`.
fn play_stdio_reporting(tape: &Path, rc: &Path, err: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        r#"rc="$1"; err="$2"; shift 2; "$@" 2>"$err"; echo $? > "$rc""#.into(),
        "sh".into(),
        s(rc),
        s(err),
    ];
    v.extend(play_cmd(tape));
    v
}

/// Replays `tape` over stdio to the Python client; requires the same transcript, play exit 0
/// and nothing missed.
fn replay_stdio(tape: &Path, dir: &Path, scenario: &str, mode: &str, expected: &Value) {
    let rc = dir.join("play.rc");
    let err = dir.join("play.err");
    let _ = std::fs::remove_file(&rc);
    let replayed = py_ok(
        scenario,
        mode,
        &play_stdio_reporting(tape, &rc, &err),
        "against play over stdio",
    );
    let start = Instant::now();
    let status = loop {
        if let Ok(t) = std::fs::read_to_string(&rc) {
            if t.ends_with('\n') {
                break t.trim().to_string();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "play over stdio never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let play_err = std::fs::read_to_string(&err).unwrap_or_default();
    assert_same(expected, &replayed, "through play over stdio");
    assert_eq!(status, "0", "play exit status; stderr:\n{play_err}");
    assert_clean_play(&play_err);
}

/// Replays `tape` over HTTP (`play --listen`) to the Python client; requires the same
/// transcript, play exit 0 after SIGINT and nothing missed.
fn replay_http(tape: &Path, scenario: &str, mode: &str, expected: &Value) {
    let play = Served::play(tape);
    let replayed = py_ok(
        scenario,
        mode,
        std::slice::from_ref(&play.url),
        "against play --listen",
    );
    let err = play.stop();
    assert_same(expected, &replayed, "through play over HTTP");
    assert_clean_play(&err);
}

/// Tape lines, skipping (and returning) those that are not JSON.
fn tape_lines_lenient(path: &Path) -> (Vec<Value>, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("read tape");
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for l in text.lines() {
        match serde_json::from_str(l) {
            Ok(v) => ok.push(v),
            Err(_) => bad.push(l.to_string()),
        }
    }
    (ok, bad)
}

fn events<'a>(lines: &'a [Value], what: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "event" && l["what"] == what)
        .collect()
}

/// Records `scenario` of the Python client through `record --url upstream`; returns the tape
/// and the transcript.
fn record_py(
    upstream: &str,
    dir: &Path,
    scenario: &str,
    mode: &str,
    extra: impl FnOnce(&Served),
) -> (PathBuf, Value) {
    let tape = dir.join(format!("{scenario}-{mode}.jsonl"));
    let rec = Served::record(upstream, &tape);
    assert!(rec.url.ends_with("/mcp"), "proxy URL {}", rec.url);
    let recorded = py_ok(
        scenario,
        mode,
        std::slice::from_ref(&rec.url),
        "through record --url",
    );
    extra(&rec);
    rec.stop();
    (tape, recorded)
}

// --- 1, 2: server-everything over Streamable HTTP --------------------------------------------

#[test]
fn everything_through_the_proxy_is_transparent_tapes_http_facts_and_no_credentials() {
    let dir = tmp();
    let (_server, upstream) = everything_http(dir.path());
    let direct = py_ok(
        "everything",
        "legacy",
        std::slice::from_ref(&upstream),
        "direct",
    );

    const SECRETS: [&str; 3] = [
        "sk-test-9f8e7d6c5b4a-TOPSECRET",
        "cookie-secret-0xC0FFEE",
        "apikey-secret-12345",
    ];
    let (tape, recorded) = record_py(&upstream, dir.path(), "everything", "legacy", |rec| {
        // A raw client with credentials: forwarded (server-everything answers), never taped.
        let auth = format!("Bearer {}", SECRETS[0]);
        let cookie = format!("session={}", SECRETS[1]);
        let init = json!({"jsonrpc": "2.0", "id": 77, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
        let (status, body) = http(
            &rec.url,
            "POST",
            &post_headers(&[
                ("Authorization", &auth),
                ("Cookie", &cookie),
                ("X-API-Key", SECRETS[2]),
            ]),
            init.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "raw initialize: {}", text(&body));
        assert!(
            text(&body).contains(r#""id":77"#),
            "raw initialize answered: {}",
            text(&body)
        );
    });
    assert_same(
        &without_handshake_list_changed(&direct),
        &without_handshake_list_changed(&recorded),
        "through record --url",
    );

    let bytes = std::fs::read(&tape).expect("tape");
    let all = text(&bytes);
    for secret in SECRETS {
        assert!(
            !all.contains(secret),
            "a credential reached the tape: {secret}"
        );
    }
    assert!(!all.to_ascii_lowercase().contains("bearer"), "{all}");
    assert!(
        all.contains(r#""id":77"#),
        "the raw request is on the tape (without its credentials)"
    );

    let lines = tape_lines(&tape);
    assert_eq!(lines[1]["transport"], "streamable_http", "{}", lines[1]);
    assert_eq!(lines[1]["url"], upstream.as_str());
    let msgs = tape_msgs(&tape);
    let sse_facts = |m: &Value| {
        let h = &m["http"];
        assert_eq!(h["status"], 200, "{m}");
        assert!(
            h["content_type"]
                .as_str()
                .is_some_and(|c| c.starts_with("text/event-stream")),
            "{m}"
        );
        assert_eq!(h["stream"], "post", "{m}");
        assert!(h["session"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
        assert!(h["event_id"].is_string(), "{m}");
    };
    let sampling: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "s2c" && m["method"] == "sampling/createMessage")
        .collect();
    assert_eq!(sampling.len(), 1, "one sampling request on the tape");
    sse_facts(sampling[0]);
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "s2c" && m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "three progress notifications");
    for p in &progress {
        sse_facts(p);
    }
    // Every client message went by POST with the session after initialize; the MCP headers
    // are facts.
    let tools_list = msgs
        .iter()
        .find(|m| m["dir"] == "c2s" && m["method"] == "tools/list")
        .expect("tools/list on the tape");
    assert_eq!(tools_list["http"]["method"], "POST");
    assert!(
        tools_list["http"]["mcp_session_id"].is_string(),
        "{tools_list}"
    );
    assert!(
        tools_list["http"]["mcp_protocol_version"].is_string(),
        "{tools_list}"
    );
    // The client's GET stream and its DELETE are events.
    assert!(!events(&lines, "http-get").is_empty(), "no http-get event");
    assert!(
        !events(&lines, "http-delete").is_empty(),
        "no http-delete event"
    );
    assert_eq!(
        lines.last().expect("lines")["type"],
        "end",
        "the tape is closed"
    );
}

#[test]
fn an_http_tape_plays_over_stdio_and_over_http() {
    let dir = tmp();
    let (tape, recorded) = {
        let (_server, upstream) = everything_http(dir.path());
        record_py(&upstream, dir.path(), "everything", "legacy", |_| {})
    }; // the server is gone before play
    replay_stdio(&tape, dir.path(), "everything", "legacy", &recorded);
    replay_http(&tape, "everything", "legacy", &recorded);
}

// --- 3: a stdio tape served over HTTP --------------------------------------------------------

#[test]
fn a_stdio_tape_plays_over_http() {
    let dir = tmp();
    let tape = dir.path().join("stdio.jsonl");
    let recorded = py_ok(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        "through record (stdio)",
    );
    assert_eq!(tape_lines(&tape)[1]["transport"], "stdio");
    replay_http(&tape, "everything", "legacy", &recorded);
}

// --- 4: the Python SDK server over HTTP, both eras -------------------------------------------

/// Records the `pyserver` scenario over HTTP in `mode` (checked against a direct run), then
/// replays it over stdio and over HTTP. Returns the tape's messages.
fn pyserver_round_trip(mode: &str) -> Vec<Value> {
    let dir = tmp();
    // `counter` counts per server process: the direct run gets a server of its own.
    let direct = {
        let (_server, upstream) = py_server_http(dir.path());
        py_ok("pyserver", mode, &[upstream], "direct")
    };
    let (tape, recorded) = {
        let (_server, upstream) = py_server_http(dir.path());
        record_py(&upstream, dir.path(), "pyserver", mode, |_| {})
    }; // the server is gone before play
    assert_same(&direct, &recorded, "through record --url");
    replay_stdio(&tape, dir.path(), "pyserver", mode, &recorded);
    replay_http(&tape, "pyserver", mode, &recorded);
    tape_msgs(&tape)
}

#[test]
fn the_python_server_over_http_in_the_2026_era_records_and_replays() {
    let msgs = pyserver_round_trip("2026-07-28");
    let call = msgs
        .iter()
        .find(|m| {
            m["dir"] == "c2s" && m["method"] == "tools/call" && m["msg"]["params"]["name"] == "add"
        })
        .expect("tools/call add on the tape");
    assert_eq!(call["http"]["mcp_method"], "tools/call", "{call}");
    assert_eq!(call["http"]["mcp_name"], "add", "{call}");
    assert_eq!(call["http"]["mcp_protocol_version"], "2026-07-28", "{call}");
    assert!(
        msgs.iter()
            .all(|m| m["http"].get("mcp_session_id").is_none()),
        "stateless: no session ids"
    );
}

#[test]
fn the_python_server_over_http_in_the_legacy_era_records_and_replays() {
    let msgs = pyserver_round_trip("legacy");
    let init = msgs
        .iter()
        .find(|m| m["dir"] == "s2c" && m["id"] == 1 && m["kind"] == "response")
        .expect("the initialize response");
    assert!(init["http"]["session"].is_string(), "{init}");
}

// --- 5: Origin and Host ----------------------------------------------------------------------

#[test]
fn a_foreign_origin_or_host_gets_403_from_the_proxy_and_from_play() {
    let dir = tmp();
    let (_up, base) = edge_upstream(dir.path());
    let rec_tape = dir.path().join("rec.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &rec_tape);

    let play_tape = dir.path().join("play.jsonl");
    write_tape(
        &play_tape,
        &[
            (
                "c2s",
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let play = Served::play(&play_tape);

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for served in [&rec, &play] {
        let evil_host = format!("evil.example:{}", served.port());
        let cases: [(&str, Vec<(&str, &str)>); 3] = [
            (
                "Origin http://evil.example",
                post_headers(&[("Origin", "http://evil.example")]),
            ),
            (
                "Host evil.example",
                post_headers(&[("Host", evil_host.as_str())]),
            ),
            (
                "Origin evil with a loopback Host",
                post_headers(&[("Origin", "https://evil.example:443")]),
            ),
        ];
        for (what, headers) in cases {
            let (status, resp) = http(&served.url, "POST", &headers, body.as_bytes());
            assert_eq!(status, 403, "{what} at {}: {}", served.url, text(&resp));
        }
        // The same request from a loopback origin is served.
        let own = format!("http://127.0.0.1:{}", served.port());
        let (status, resp) = http(
            &served.url,
            "POST",
            &post_headers(&[("Origin", &own)]),
            body.as_bytes(),
        );
        assert_eq!(
            status,
            200,
            "loopback origin at {}: {}",
            served.url,
            text(&resp)
        );
    }
    play.stop();
    rec.stop();
    // Refused requests were neither forwarded nor taped: only the allowed one is on the tape.
    let msgs = tape_msgs(&rec_tape);
    let c2s = msgs.iter().filter(|m| m["dir"] == "c2s").count();
    assert_eq!(c2s, 1, "only the allowed request is taped: {msgs:?}");
}

// --- 6: upstream refuses or fails ------------------------------------------------------------

#[test]
fn an_upstream_that_refuses_gives_502_with_the_request_id_and_is_taped() {
    let dir = tmp();
    let port = free_port(); // nothing listens here
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    let tape = dir.path().join("refused.jsonl");
    let rec = Served::record(&upstream, &tape);
    let req = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/list"});
    let mut resp = http_open(
        &rec.url,
        "POST",
        &post_headers(&[]),
        req.to_string().as_bytes(),
    );
    let body = resp.body();
    assert_eq!(resp.status, 502, "{}", text(&body));
    assert!(
        resp.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        resp.headers
    );
    let v: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("502 body not JSON ({e}): {}", text(&body)));
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], 42, "the error carries the request's id: {v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        v["error"]["code"].is_i64() && message.contains(&format!("127.0.0.1:{port}")),
        "the error names the upstream: {v}"
    );
    let err = rec.stop();
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    let lines = tape_lines(&tape);
    let ev = events(&lines, "upstream-error");
    assert_eq!(ev.len(), 1, "{lines:?}");
    assert!(
        ev[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("127.0.0.1:{port}"))),
        "{}",
        ev[0]
    );
    assert!(
        tape_msgs(&tape)
            .iter()
            .any(|m| m["dir"] == "c2s" && m["id"] == 42),
        "the request is on the tape"
    );
}

#[test]
fn an_upstream_5xx_is_forwarded_with_its_status_and_taped() {
    let dir = tmp();
    let (_up, base) = edge_upstream(dir.path());
    let tape = dir.path().join("5xx.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &tape);
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "edge/fail"});
    let (status, body) = http(
        &rec.url,
        "POST",
        &post_headers(&[]),
        req.to_string().as_bytes(),
    );
    assert_eq!(status, 500, "{}", text(&body));
    assert_eq!(text(&body), "upstream exploded");
    rec.stop();
    let lines = tape_lines(&tape);
    let ev = events(&lines, "http-error");
    assert_eq!(ev.len(), 1, "{lines:?}");
    assert_eq!(ev[0]["status"], 500, "{}", ev[0]);
    assert!(
        ev[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains("upstream exploded")),
        "{}",
        ev[0]
    );
}

// --- 7, 8: SSE edge cases --------------------------------------------------------------------

/// What the edge upstream writes for `edge/sse`, concatenated, with the response id `rid`.
fn crafted_sse(rid: i64) -> String {
    [
        ": heartbeat\n\n",
        "id: prime-1\nretry: 1500\ndata:\n\n",
        "event: message\nid: ev-2\nda",
        r#"ta: {"jsonrpc":"2.0","method":"notifications/message","#,
        "\"params\":{\"level\":\"info\",\"data\":\"split\"}}\n",
        "\n",
        "id: ev-3\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n",
        "data: \"params\":{\"level\":\"info\",\"data\":\"multi-line\",\"token\":\"s3cr3t-sse-token-value\"}}\n\n",
        &format!(
            "id: ev-4\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{rid},\"result\":{{\"ok\":true}}}}\n\n"
        ),
    ]
    .concat()
}

#[test]
fn sse_events_pass_byte_exact_and_each_before_the_stream_ends() {
    let dir = tmp();
    let (_up, base) = edge_upstream(dir.path());
    let tape = dir.path().join("sse.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &tape);

    let req = json!({"jsonrpc": "2.0", "id": 5, "method": "edge/sse"});
    let mut stream = http_open(
        &rec.url,
        "POST",
        &post_headers(&[]),
        req.to_string().as_bytes(),
    );
    assert_eq!(stream.status, 200);
    assert!(
        stream
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        stream.headers
    );
    let expected = crafted_sse(5);
    let before_release = expected.find("id: ev-4").expect("the last event");
    // Everything up to the last event must reach the client while the upstream still holds the
    // response back (it waits for /release/sse): nothing is held until the stream ends.
    let mut got = Vec::new();
    let mut pieces = 0;
    while got.len() < before_release {
        match stream.next_piece() {
            Some(p) => {
                pieces += 1;
                got.extend(p);
            }
            None => panic!(
                "the stream ended before the response was released; got:\n{}",
                text(&got)
            ),
        }
    }
    assert_eq!(
        text(&got),
        expected[..before_release],
        "the events before the response, byte for byte"
    );
    assert!(pieces >= 2, "the events arrived in several pieces");
    let (status, _) = http(&format!("{base}/release/sse"), "GET", &[], b"");
    assert_eq!(status, 204, "release the response");
    got.extend(stream.body());
    assert_eq!(text(&got), expected, "the whole stream, byte for byte");

    // The proxy still serves the next request (a pretty-printed body is JSON too).
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    let (status, body) = http(
        &rec.url,
        "POST",
        &post_headers(&[]),
        pretty(&ping).as_bytes(),
    );
    assert_eq!(status, 200, "{}", text(&body));
    rec.stop();

    let (lines, bad) = tape_lines_lenient(&tape);
    let msgs: Vec<&Value> = lines.iter().filter(|l| l["type"] == "msg").collect();
    let response = msgs
        .iter()
        .find(|m| m["dir"] == "s2c" && m["id"] == 5)
        .expect("the SSE response on the tape");
    assert_eq!(response["http"]["event_id"], "ev-4", "{response}");
    assert_eq!(response["http"]["stream"], "post", "{response}");
    assert_eq!(response["msg"]["result"]["ok"], true, "{response}");
    let split = msgs
        .iter()
        .find(|m| m["msg"]["params"]["data"] == "split")
        .expect("the event written in pieces is on the tape");
    assert_eq!(split["http"]["event_id"], "ev-2", "{split}");
    let priming = events(&lines, "sse-priming");
    assert!(
        priming
            .iter()
            .any(|e| e["event_id"] == "prime-1" && e["retry"] == 1500),
        "the priming event with its id and retry: {priming:?}"
    );
    // The multi-line `data:` event is one message (its data lines joined with "\n"), the
    // pretty-printed request another, and the tape stays one JSON document per line.
    assert!(
        bad.is_empty(),
        "tape lines that are not JSON (a message with a newline inside was written verbatim):\n{}",
        bad.join("\n")
    );
    assert!(
        msgs.iter().any(|m| m["dir"] == "c2s" && m["id"] == 6),
        "the pretty-printed request is on the tape"
    );
    let multi = msgs
        .iter()
        .find(|m| m["msg"]["params"]["data"] == "multi-line")
        .expect("the multi-line data event is on the tape");
    assert_eq!(multi["http"]["event_id"], "ev-3", "{multi}");
    // A secret in an SSE frame reached the client (the byte-exact check above) but not the tape.
    let bytes = std::fs::read_to_string(&tape).unwrap();
    assert!(
        !bytes.contains("s3cr3t-sse-token-value"),
        "the SSE secret is on the tape"
    );
    assert!(
        multi["msg"]["params"]["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("[REDACTED:key:token:")),
        "{multi}"
    );
}

#[test]
fn a_client_that_leaves_mid_stream_keeps_what_passed_and_the_proxy_goes_on() {
    let dir = tmp();
    let (up, base) = edge_upstream(dir.path());
    let tape = dir.path().join("gone.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &tape);

    let req = json!({"jsonrpc": "2.0", "id": 9, "method": "edge/hang"});
    let mut stream = http_open(
        &rec.url,
        "POST",
        &post_headers(&[]),
        req.to_string().as_bytes(),
    );
    assert_eq!(stream.status, 200);
    let mut got = Vec::new();
    while !text(&got).contains("\n\n") {
        got.extend(stream.next_piece().expect("the first event"));
    }
    assert!(text(&got).starts_with("id: h-1\n"), "{}", text(&got));
    // The client goes away mid-stream; then the upstream carries on writing.
    stream
        .r
        .get_ref()
        .shutdown(std::net::Shutdown::Both)
        .expect("shutdown");
    drop(stream);
    let (status, _) = http(&format!("{base}/release/hang"), "GET", &[], b"");
    assert_eq!(status, 204);

    // The proxy notices and stops reading the upstream; what passed is on the tape already.
    let start = Instant::now();
    loop {
        let (lines, _) = tape_lines_lenient(&tape);
        if !events(&lines, "client-gone").is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no client-gone event on the tape; upstream log:\n{}\ntape:\n{}",
            up.log_text(),
            std::fs::read_to_string(&tape).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The next request is served.
    let next = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"});
    let (status, body) = http(
        &rec.url,
        "POST",
        &post_headers(&[]),
        next.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", text(&body));
    let v: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(v["id"], 10, "{v}");
    rec.stop();

    let lines = tape_lines(&tape);
    let msgs = tape_msgs(&tape);
    assert!(
        msgs.iter().any(|m| m["dir"] == "c2s" && m["id"] == 9),
        "the request"
    );
    let first = msgs
        .iter()
        .find(|m| m["http"]["event_id"] == "h-1")
        .expect("the event the client got is on the tape");
    assert_eq!(first["msg"]["params"]["progress"], 1, "{first}");
    let pos = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred).expect("on the tape");
    let gone = pos(&|l| l["what"] == "client-gone");
    let h1 = pos(&|l| l["http"]["event_id"] == "h-1");
    let next_req = pos(&|l| l["dir"] == "c2s" && l["id"] == 10);
    assert!(h1 < gone && gone < next_req, "tape order: {lines:?}");
    assert!(
        msgs.iter().any(|m| m["dir"] == "s2c" && m["id"] == 10),
        "the next answer is on the tape"
    );
    assert!(
        !msgs.iter().any(|m| m["dir"] == "s2c" && m["id"] == 9),
        "the interrupted exchange has no response on the tape"
    );
    assert_eq!(lines.last().expect("lines")["type"], "end");
}

// --- stopping --------------------------------------------------------------------------------

/// The URL on stdout means "ready": a SIGINT sent the moment it is read must stop record (tape
/// closed with its `end` line) and play cleanly, exit 0. A few rounds, since it is a race.
#[test]
fn sigint_right_after_the_url_stops_record_and_play_cleanly() {
    let dir = tmp();
    let upstream = format!("http://127.0.0.1:{}/mcp", free_port());
    for round in 0..5 {
        let tape = dir.path().join(format!("early-{round}.jsonl"));
        let rec = Served::record(&upstream, &tape);
        let err = rec.stop();
        let lines = tape_lines(&tape);
        assert_eq!(
            lines.last().expect("lines")["type"],
            "end",
            "round {round}: the tape is closed; stderr:\n{err}"
        );
    }
    let tape = dir.path().join("play.jsonl");
    write_tape(
        &tape,
        &[
            ("c2s", json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            ("s2c", json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        ],
        true,
    );
    for _ in 0..5 {
        Served::play(&tape).stop();
    }
}

// --- The older HTTP+SSE transport (2024-11-05) ----------------------------------------------

#[test]
fn the_legacy_sse_transport_records_and_replays_over_stdio_and_over_sse() {
    let dir = tmp();
    // server-everything's `sse` mode: GET /sse, whose `endpoint` event names the POST URL.
    let (tape, recorded, direct) = {
        let (_server, upstream) = everything_http_mode(dir.path(), "sse", "/sse");
        let direct = py_ok(
            "everything",
            "legacy",
            std::slice::from_ref(&upstream),
            "direct over SSE",
        );
        let tape = dir.path().join("sse.jsonl");
        let rec = Served::spawn(&["record", "--url", &upstream, "--tape", &s(&tape)]);
        assert!(rec.url.ends_with("/sse"), "proxy URL {}", rec.url);
        let recorded = py_ok(
            "everything",
            "legacy",
            std::slice::from_ref(&rec.url),
            "through record --url (SSE)",
        );
        rec.stop();
        (tape, recorded, direct)
    };
    assert_same(
        &without_handshake_list_changed(&direct),
        &without_handshake_list_changed(&recorded),
        "through the proxy",
    );
    let lines = tape_lines(&tape);
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "event" && l["what"] == "sse-endpoint"),
        "the endpoint event is on the tape"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "msg"
            && l["method"] == "sampling/createMessage"
            && l["http"]["stream"] == "get"),
        "server messages came over the GET stream"
    );
    replay_stdio(&tape, dir.path(), "everything", "legacy", &recorded);
    // And served as a legacy SSE server.
    let play = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--transport",
        "sse",
    ]);
    assert!(play.url.ends_with("/sse"), "play URL {}", play.url);
    let replayed = py_ok(
        "everything",
        "legacy",
        std::slice::from_ref(&play.url),
        "against play --transport sse",
    );
    let err = play.stop();
    assert_same(&recorded, &replayed, "through play over HTTP+SSE");
    assert_clean_play(&err);
}

// --- The official Rust SDK's client over Streamable HTTP -------------------------------------

#[test]
fn an_rmcp_client_through_the_proxy_and_against_play_sees_the_same() {
    let dir = tmp();
    let rmcp = |url: &str| -> Value {
        let mut cmd = Command::new(rmcp_client());
        cmd.args([
            "--call",
            "echo",
            r#"{"message":"hello tape"}"#,
            "--call",
            "get-sum",
            r#"{"a":2,"b":3}"#,
            "--list-resources",
            "--",
            url,
        ]);
        let out = run_with_timeout(cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "rmcp_client against {url}: {}",
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("rmcp_client prints JSON")
    };
    let tape = dir.path().join("rmcp.jsonl");
    let (direct, recorded) = {
        let (_server, upstream) = everything_http(dir.path());
        let direct = rmcp(&upstream);
        let rec = Served::record(&upstream, &tape);
        let recorded = rmcp(&rec.url);
        rec.stop();
        (direct, recorded)
    };
    assert_eq!(direct, recorded, "the proxy is transparent to rmcp");
    assert!(
        tape_msgs(&tape)
            .iter()
            .any(|m| m["method"] == "tools/call" && m["http"]["mcp_session_id"].is_string()),
        "rmcp's calls are on the tape with their session"
    );
    let play = Served::play(&tape);
    let replayed = rmcp(&play.url);
    let err = play.stop();
    assert_eq!(recorded, replayed, "play answers rmcp as the server did");
    assert_clean_play(&err);
}

// --- A stdio server behind HTTP while recording (the bridge) ---------------------------------

#[test]
fn a_stdio_server_behind_http_records_and_replays() {
    let dir = tmp();
    let direct = py_ok("everything", "legacy", &everything(), "direct over stdio");
    let tape = dir.path().join("bridge.jsonl");
    let mut args = vec![
        "record".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--tape".into(),
        s(&tape),
        "--".into(),
    ];
    args.extend(everything());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let bridge = Served::spawn(&args);
    let through = py_ok(
        "everything",
        "legacy",
        std::slice::from_ref(&bridge.url),
        "through the bridge",
    );
    bridge.stop();
    assert_same(
        &without_handshake_list_changed(&direct),
        &without_handshake_list_changed(&through),
        "through the bridge",
    );
    assert_eq!(
        tape_lines(&tape)[1]["transport"],
        "stdio",
        "the tape is of the stdio server"
    );
    replay_stdio(&tape, dir.path(), "everything", "legacy", &through);
}

// --- 2026-07-28 `subscriptions/listen` --------------------------------------------------------

#[test]
fn a_subscriptions_listen_stream_is_recorded_and_replayed_over_http() {
    let dir = tmp();
    let (tape, recorded) = {
        let (_server, upstream) = py_server_http(dir.path());
        record_py(&upstream, dir.path(), "listen", "2026-07-28", |_| {})
    };
    let msgs = tape_msgs(&tape);
    let listen = msgs
        .iter()
        .find(|m| m["method"] == "subscriptions/listen")
        .expect("the listen request");
    let changed = msgs
        .iter()
        .find(|m| m["method"] == "notifications/tools/list_changed")
        .expect("the change notification is on the tape");
    assert_eq!(
        changed["http"]["request_id"], listen["id"],
        "it came on the listen stream: {changed}"
    );
    let events = &recorded["steps"][2];
    assert_eq!(events["result"]["event"], "ToolsListChanged", "{recorded}");
    replay_http(&tape, "listen", "2026-07-28", &recorded);
}

#[test]
fn last_event_id_resumption_passes_through() {
    let dir = tmp();
    let (_up, base) = edge_upstream(dir.path());
    let tape = dir.path().join("resume.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &tape);
    let (status, body) = http(
        &rec.url,
        "GET",
        &[("Accept", "text/event-stream"), ("Last-Event-ID", "ev-2")],
        b"",
    );
    rec.stop();
    assert_eq!(status, 200, "{}", text(&body));
    assert!(
        text(&body).contains("resumed after ev-2"),
        "the header reached the upstream: {}",
        text(&body)
    );
    let lines = tape_lines(&tape);
    assert!(
        lines
            .iter()
            .any(|l| l["what"] == "http-get" && l["last_event_id"] == "ev-2"),
        "the resumption is on the tape"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "msg"
            && l["http"]["stream"] == "get"
            && l["http"]["event_id"] == "resumed-1"),
        "the resumed stream's message is on the tape"
    );
}

// --- check --url ------------------------------------------------------------------------------

#[test]
fn check_drives_a_running_http_server_in_both_eras() {
    let dir = tmp();
    for mode in ["legacy", "2026-07-28"] {
        // Recorded over stdio; checked against the same server running over HTTP.
        let tape = dir.path().join(format!("check-{mode}.jsonl"));
        let (_, out) = py_client("pyserver", mode, &record_cmd(&tape, &py_server()), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (_server, url) = py_server_http(dir.path());
        let report = dir.path().join(format!("report-{mode}.json"));
        let out = mcptape(&["check", &s(&tape), "--url", &url, "--json", &s(&report)]);
        let r: mcptape::check::CheckReport =
            serde_json::from_slice(&std::fs::read(&report).expect("report"))
                .expect("a check report");
        // `counter` counts per server process and this one is fresh: its answers match.
        assert_eq!(
            out.status.code(),
            Some(0),
            "{mode}: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(
            r.grade,
            mcptape::check::Grade::A,
            "{mode}: {}",
            text(&out.stdout)
        );
        assert_eq!(r.server, url);
        assert!(
            r.exchanges
                .iter()
                .all(|e| e.status == mcptape::check::Status::Pass),
            "{mode}"
        );
    }
}

#[test]
fn play_answers_over_sse_or_json_as_the_recording_did() {
    // Recorded: one answer that came as JSON, one that came as an SSE stream (with nothing but
    // the answer on it). Play keeps each one's form.
    let dir = tmp();
    let (_up, base) = edge_upstream(dir.path());
    let tape = dir.path().join("forms.jsonl");
    let rec = Served::record(&format!("{base}/mcp"), &tape);
    let json_req = json!({"jsonrpc": "2.0", "id": 1, "method": "edge/json"});
    let (status, _) = http(
        &rec.url,
        "POST",
        &post_headers(&[]),
        json_req.to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    rec.stop();
    // Mark the JSON answer as if it had come on an SSE stream, as many servers answer.
    let lines: Vec<Value> = tape_lines(&tape);
    let mut sse_copy = None;
    for l in lines.iter() {
        if l["type"] == "msg" && l["dir"] == "s2c" {
            let mut m = l.clone();
            m["http"]["content_type"] = json!("text/event-stream");
            m["http"]["stream"] = json!("post");
            sse_copy = Some(m);
        }
    }
    let sse_line = sse_copy.expect("the recorded answer");
    let mut req2 = lines
        .iter()
        .find(|l| l["type"] == "msg" && l["dir"] == "c2s")
        .expect("request")
        .clone();
    req2["msg"]["id"] = json!(2);
    req2["id"] = json!(2);
    req2["msg"]["params"] = json!({"form": "sse"});
    let mut resp2 = sse_line;
    resp2["msg"]["id"] = json!(2);
    resp2["id"] = json!(2);
    // A hand-made tape (no hash chain) with both forms.
    let msgs: Vec<(&str, Value)> = vec![
        (
            "c2s",
            lines
                .iter()
                .find(|l| l["type"] == "msg" && l["dir"] == "c2s")
                .unwrap()["msg"]
                .clone(),
        ),
        (
            "s2c",
            lines
                .iter()
                .find(|l| l["type"] == "msg" && l["dir"] == "s2c")
                .unwrap()["msg"]
                .clone(),
        ),
    ];
    write_tape(&tape, &msgs, true);
    // Append the SSE exchange with its http facts.
    let mut text = std::fs::read_to_string(&tape).unwrap();
    let end = text.lines().last().unwrap().to_string();
    text = text.replace(&format!("{end}\n"), "");
    text.push_str(&format!("{}\n{}\n{end}\n", req2, resp2));
    std::fs::write(&tape, text).unwrap();

    let play = Served::play(&tape);
    let mut a = http_open(
        &play.url,
        "POST",
        &post_headers(&[]),
        json_req.to_string().as_bytes(),
    );
    assert_eq!(
        a.header("content-type"),
        Some("application/json"),
        "recorded as JSON, played as JSON"
    );
    let _ = a.body();
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "edge/json", "params": {"form": "sse"}});
    let mut b = http_open(
        &play.url,
        "POST",
        &post_headers(&[]),
        req.to_string().as_bytes(),
    );
    assert_eq!(
        b.header("content-type"),
        Some("text/event-stream"),
        "recorded over SSE, played over SSE"
    );
    let body = text_of(&b.body());
    assert!(
        body.contains("data: ") && body.contains("\"id\":7"),
        "{body}"
    );
    let err = play.stop();
    assert_clean_play(&err);
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
