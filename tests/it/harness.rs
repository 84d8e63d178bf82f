//! A small builder around the `mcptape` binary and the real peers.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcptape"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn peers() -> PathBuf {
    repo().join("tests/peers")
}

fn require(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "test peer {} is missing: run ./scripts/test (it installs the peers)",
        path.display()
    );
    path
}

/// `mcp-server-everything stdio`.
pub fn everything() -> Vec<String> {
    vec![
        s(require(
            peers().join("node_modules/.bin/mcp-server-everything"),
        )),
        "stdio".into(),
    ]
}

/// `mcp-server-memory`.
pub fn memory() -> Vec<String> {
    vec![s(require(
        peers().join("node_modules/.bin/mcp-server-memory"),
    ))]
}

pub fn python() -> String {
    s(require(peers().join(".venv/bin/python")))
}

/// The Python SDK fixture server (both eras, stdio).
pub fn py_server() -> Vec<String> {
    vec![python(), s(require(peers().join("py_server.py")))]
}

/// The rmcp client example (built by `cargo test --all-targets`).
pub fn rmcp_client() -> PathBuf {
    let exe = bin();
    let dir = exe.parent().expect("target dir");
    require(dir.join("examples/rmcp_client"))
}

/// The bundled demo server, as a command.
pub fn demo_server(variant: &str) -> Vec<String> {
    vec![
        s(bin()),
        "demo-server".into(),
        "--variant".into(),
        variant.into(),
    ]
}

pub fn s(p: impl AsRef<Path>) -> String {
    p.as_ref().display().to_string()
}

pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mcptape-it-")
        .tempdir()
        .expect("temp dir")
}

/// `mcptape record --tape TAPE -- server…` as a command line (for clients that spawn it).
pub fn record_cmd(tape: &Path, server: &[String]) -> Vec<String> {
    let mut v = vec![
        s(bin()),
        "record".into(),
        "--tape".into(),
        s(tape),
        "--".into(),
    ];
    v.extend(server.iter().cloned());
    v
}

/// `mcptape play TAPE` as a command line.
pub fn play_cmd(tape: &Path) -> Vec<String> {
    vec![s(bin()), "play".into(), s(tape)]
}

/// Runs the Python SDK client scenario against `server` and returns its transcript.
pub fn py_client(
    scenario: &str,
    mode: &str,
    server: &[String],
    env: &[(&str, &str)],
) -> (Value, Output) {
    let mut cmd = Command::new(python());
    cmd.arg(require(peers().join("py_client.py")))
        .args(["--scenario", scenario, "--mode", mode, "--"])
        .args(server);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_with_timeout(cmd, Duration::from_secs(90));
    let transcript: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "py_client {scenario} printed no transcript ({e}); status {:?}; stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (transcript, out)
}

/// Runs a command to completion (stdin closed), killing it after `limit`.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_output(child, limit)
}

pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let out = child.stdout.take();
    let mut err = child.stderr.take().expect("stderr piped");
    let t1 = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(mut out) = out {
            let _ = out.read_to_end(&mut b);
        }
        b
    });
    let t2 = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let st = child.wait().expect("wait");
            let stderr = t2.join().unwrap_or_default();
            panic!(
                "process timed out after {limit:?} (status {st:?}); stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t1.join().expect("stdout reader"),
        stderr: t2.join().expect("stderr reader"),
    }
}

/// The tape's lines as JSON values.
pub fn tape_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read tape");
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("tape line not JSON ({e}): {l}"))
        })
        .collect()
}

/// The `msg` lines of a tape.
pub fn tape_msgs(path: &Path) -> Vec<Value> {
    tape_lines(path)
        .into_iter()
        .filter(|l| l["type"] == "msg")
        .collect()
}

/// A raw line-oriented client over a spawned process: write lines, read lines, with timeouts.
pub struct LineClient {
    pub child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl LineClient {
    pub fn spawn(argv: &[String]) -> LineClient {
        Self::spawn_cmd(command(argv))
    }

    pub fn spawn_cmd(mut cmd: Command) -> LineClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = stderr.read_to_end(&mut b);
            b
        });
        LineClient {
            child,
            stdin,
            lines: rx,
            stderr,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to child");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("json");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The next line (raw bytes, terminator included), or None on EOF or timeout.
    pub fn recv_raw(&mut self, limit: Duration) -> Option<Vec<u8>> {
        self.lines.recv_timeout(limit).ok()
    }

    pub fn recv(&mut self) -> Value {
        let line = self
            .recv_raw(Duration::from_secs(30))
            .expect("a line from the child within 30 s");
        serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&line)))
    }

    /// Reads lines until the response with `id`; returns (response, messages before it).
    pub fn recv_response(&mut self, id: &Value) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let v = self.recv();
            if v.get("id") == Some(id) && (v.get("result").is_some() || v.get("error").is_some()) {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// `request` and its response.
    pub fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        self.recv_response(&serde_json::json!(id)).0
    }

    /// The legacy handshake.
    pub fn initialize(&mut self) -> Value {
        let r = self.call(
            0,
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}),
        );
        self.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Closes stdin and waits for exit; returns (status, stderr).
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        self.close_stdin();
        let start = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!("child did not exit within 30 s of stdin closing");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stderr = self.stderr.join().unwrap_or_default();
        (status, String::from_utf8_lossy(&stderr).into_owned())
    }
}

pub fn command(argv: &[String]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

/// `mcptape ARGS…` to completion, with a timeout.
pub fn mcptape(args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.args(args);
    run_with_timeout(c, Duration::from_secs(60))
}

/// Writes a tape by hand: a header, a server line, one `msg` line per (direction, message), and
/// an `end` line if `closed`. For cases a real session cannot produce on demand.
pub fn write_tape(path: &Path, msgs: &[(&str, Value)], closed: bool) {
    use std::fmt::Write as _;
    let mut out = String::new();
    out.push_str(r#"{"type":"header","format":"mcptape","version":1,"minor":0,"created":"2026-01-01T00:00:00Z","tool":"test"}"#);
    out.push('\n');
    out.push_str(
        r#"{"type":"server","server":"default","transport":"stdio","command":["x"],"t_us":0}"#,
    );
    out.push('\n');
    for (i, (dir, m)) in msgs.iter().enumerate() {
        let kind = if m.get("method").is_some() {
            if m.get("id").is_some() {
                "request"
            } else {
                "notification"
            }
        } else if m.get("error").is_some() {
            "error"
        } else {
            "response"
        };
        let mut line = serde_json::json!({"type": "msg", "seq": i + 1, "t_us": i * 10, "server": "default", "dir": dir, "kind": kind, "msg": m});
        if let Some(id) = m.get("id") {
            line["id"] = id.clone();
        }
        if let Some(method) = m.get("method") {
            line["method"] = method.clone();
        }
        let _ = writeln!(out, "{line}");
    }
    if closed {
        let _ = writeln!(
            out,
            r#"{{"type":"end","t_us":1000,"messages":{},"exchanges":0}}"#,
            msgs.len()
        );
    }
    std::fs::write(path, out).expect("write tape");
}
