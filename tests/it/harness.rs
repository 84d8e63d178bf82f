//! The test harness: [`Mt`], a small builder around the `mcptape` binary (run it, then check its
//! exit status, stdout and stderr); the real peers; tapes read back; a line client over real
//! pipes. Beside it: processes and a raw HTTP/1.1 client ([`net`]), golden files ([`golden`]), a
//! stdio server scripted in a few lines of Python ([`line_server`]), the JSON report shapes the
//! tests read back strictly ([`reports`]), headless Chromium over an HTML page ([`browser`]).
#![allow(dead_code)]

mod browser;
mod golden;
mod line_server;
mod net;
mod reports;

pub use browser::*;
pub use golden::*;
pub use line_server::*;
pub use net::*;
pub use reports::*;

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcptape"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the installed test peers (tests/peers), or a failure that says how to install them.
pub fn peer(rel: &str) -> PathBuf {
    let path = repo().join("tests/peers").join(rel);
    assert!(
        path.exists(),
        "test peer {} is missing: run ./scripts/test (it installs the peers)",
        path.display()
    );
    path
}

/// The MCP Inspector's CLI (`mcp-inspector --cli`, npm `@modelcontextprotocol/inspector`, on
/// the Node 22 that scripts/conformance.d installs), run in `home` as its HOME (it may keep a
/// catalog there) with `args`: a server command or `--config FILE --server NAME`, and a
/// `--method …`. Its output, after at most 90 s.
pub fn inspector_cli(home: &Path, args: &[String]) -> Output {
    let d = repo().join("scripts/conformance.d/node_modules");
    let (node, cli) = (
        d.join(".bin/node"),
        d.join("@modelcontextprotocol/inspector"),
    );
    assert!(
        node.exists() && cli.exists(),
        "the MCP Inspector (or its Node 22) is missing from {}: run ./scripts/test (it installs them)",
        d.display()
    );
    let mut cmd = Command::new(node);
    cmd.arg(d.join(".bin/mcp-inspector"))
        .arg("--cli")
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        // No keychain here: without this it says so on every run.
        .env("MCP_INSPECTOR_SECRET_STORE", "memory");
    run_with_timeout(cmd, Duration::from_secs(90))
}

/// `mcp-server-everything stdio`.
pub fn everything() -> Vec<String> {
    vec![
        s(peer("node_modules/.bin/mcp-server-everything")),
        "stdio".into(),
    ]
}

/// `mcp-server-memory`.
pub fn memory() -> Vec<String> {
    vec![s(peer("node_modules/.bin/mcp-server-memory"))]
}

/// `mcp-server-filesystem DIR`.
pub fn filesystem(dir: &Path) -> Vec<String> {
    vec![s(peer("node_modules/.bin/mcp-server-filesystem")), s(dir)]
}

pub fn python() -> String {
    s(peer(".venv/bin/python"))
}

/// The Python SDK fixture server (both eras, stdio).
pub fn py_server() -> Vec<String> {
    vec![python(), s(peer("py_server.py"))]
}

/// The rmcp client example (built by `cargo test --all-targets`).
pub fn rmcp_client() -> PathBuf {
    example("rmcp_client")
}

/// An example of examples/, built (by `cargo test --all-targets`, or scripts/test).
pub fn example(name: &str) -> PathBuf {
    let exe = bin();
    let path = exe
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/test (cargo test --all-targets builds it)",
        path.display()
    );
    path
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

/// A stdio server (stdlib Python) that writes a bare CR between some tokens of its messages:
/// whitespace in JSON, and legal on a stdio line. `echo` answers `cr:TEXT`, after a log
/// notification. The script is written into `dir`; returns its command.
pub fn cr_server(dir: &Path) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, sys
def out(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None or method is None:
        continue
    i = json.dumps(rid)
    if method == "initialize":
        v = json.dumps(msg["params"]["protocolVersion"])
        out('{"jsonrpc":"2.0",\r"id":%s,"result":{"protocolVersion":%s,"capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"cr","version":"1"}}}' % (i, v))
    elif method == "tools/list":
        out('{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object",\r"properties":{"text":{"type":"string"}}}}]}}' % i)
    elif method == "tools/call":
        text = json.dumps("cr:" + msg["params"]["arguments"]["text"])
        out('{"jsonrpc":"2.0",\r"method":"notifications/message","params":{"level":"info","data":"working"}}')
        out('{"jsonrpc":"2.0",\r"id":%s,\r"result":{"content":[{"type":"text","text":%s}]}}' % (i, text))
    else:
        out('{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}' % i)
"#;
    let script = dir.join("cr_server.py");
    std::fs::write(&script, SCRIPT).expect("write cr_server.py");
    vec![python(), s(script)]
}

pub fn s(p: impl AsRef<Path>) -> String {
    p.as_ref().display().to_string()
}

/// Bytes as text, lossily.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("json")
}

pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mcptape-it-")
        .tempdir()
        .expect("temp dir")
}

/// A fresh temp folder and the path of a tape `name` in it (not created yet).
pub fn tmp_tape(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tmp();
    let tape = dir.path().join(name);
    (dir, tape)
}

// --- the builder around the binary ---------------------------------------------------------

/// `mcptape ARGS…`: built up, run to completion, then checked.
///
/// ```ignore
/// Mt::new(["diff", &a, &b]).run().status(1).stdout_is(expected).stderr_is("");
/// let doc: Value = Mt::new(["show", "--json", &tape]).run().success().json();
/// let client = Mt::new(["play", &tape]).dir(home).spawn(); // a LineClient instead
/// ```
///
/// What mcptape reads from its environment is pinned: `NO_COLOR=1`, and `CLICOLOR_FORCE`,
/// `MCPTAPE_DIR`, `MCPTAPE_SIGNING_KEY` and `FIXTURE_DRIFT` are not inherited (a test sets
/// them with [`Mt::env`]). Stdin is empty unless [`Mt::stdin`] gives it; a run that takes longer
/// than the timeout (60 s unless [`Mt::timeout`]) is killed and fails the test.
#[must_use]
pub struct Mt {
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl Mt {
    pub fn new<I, A>(args: I) -> Mt
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        let pinned = [
            ("NO_COLOR", Some("1")),
            ("CLICOLOR_FORCE", None),
            ("MCPTAPE_DIR", None),
            ("MCPTAPE_SIGNING_KEY", None),
            ("FIXTURE_DRIFT", None),
        ];
        Mt {
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: pinned
                .iter()
                .map(|(k, v)| (k.into(), v.map(Into::into)))
                .collect(),
            dir: None,
            stdin: None,
            timeout: Duration::from_secs(60),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Mt {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, A>(mut self, args: I) -> Mt
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Mt {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Each `(key, value)` of `vars`, as [`Mt::env`].
    pub fn envs<'a>(self, vars: &[(&'a str, &'a str)]) -> Mt {
        vars.iter().fold(self, |mt, (k, v)| mt.env(k, v))
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Mt {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// The working folder.
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Mt {
        self.dir = Some(dir.as_ref().to_owned());
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Mt {
        self.stdin = Some(bytes.into());
        self
    }

    pub fn timeout(mut self, limit: Duration) -> Mt {
        self.timeout = limit;
        self
    }

    /// `mcptape ARGS…` as a shell would show it, for messages.
    fn describe(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        format!("mcptape {}", args.join(" "))
    }

    /// The command, not started (stdio left to the caller).
    pub fn command(&self) -> Command {
        let mut c = Command::new(bin());
        c.args(&self.args);
        for (k, v) in &self.env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        c
    }

    /// Started with stdin, stdout and stderr piped, as a line client.
    pub fn spawn(self) -> LineClient {
        LineClient::spawn_cmd(self.command())
    }

    /// Runs to completion (killed, and the test failed, after the timeout).
    pub fn run(self) -> Run {
        let mut cmd = self.command();
        let stdin = if self.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        let mut child = cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.describe()));
        if let Some(bytes) = self.stdin.clone() {
            let mut pipe = child.stdin.take().expect("stdin piped");
            // A thread: a large stdin must not wait for stdout to be read.
            std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        let out = wait_output(child, self.timeout);
        Run {
            what: self.describe(),
            exit: out.status,
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
        }
    }
}

/// What one [`Mt::run`] did. The checks take and give back the run, so they chain; each failure
/// shows the command, its exit status and both streams.
pub struct Run {
    what: String,
    pub exit: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The command, its exit status, stdout and stderr: the context for an assertion message.
    pub fn console(&self) -> String {
        format!(
            "{}: {}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.what, self.exit, self.stdout, self.stderr
        )
    }

    /// The exit code (a death by signal fails the test).
    #[track_caller]
    pub fn code(&self) -> i32 {
        match self.exit.code() {
            Some(code) => code,
            None => panic!("killed by a signal, not exited: {}", self.console()),
        }
    }

    /// Requires exit code `code`.
    #[track_caller]
    pub fn status(self, code: i32) -> Run {
        assert_eq!(self.code(), code, "exit code of {}", self.console());
        self
    }

    #[track_caller]
    pub fn success(self) -> Run {
        self.status(0)
    }

    /// Requires stdout to be exactly `want`.
    #[track_caller]
    pub fn stdout_is(self, want: &str) -> Run {
        self.stream_is("stdout", want)
    }

    /// Requires stderr to be exactly `want`.
    #[track_caller]
    pub fn stderr_is(self, want: &str) -> Run {
        self.stream_is("stderr", want)
    }

    #[track_caller]
    pub fn stdout_contains(self, needle: &str) -> Run {
        self.stream_contains("stdout", needle)
    }

    #[track_caller]
    pub fn stderr_contains(self, needle: &str) -> Run {
        self.stream_contains("stderr", needle)
    }

    fn stream(&self, name: &str) -> &str {
        match name {
            "stdout" => &self.stdout,
            _ => &self.stderr,
        }
    }

    #[track_caller]
    fn stream_is(self, name: &str, want: &str) -> Run {
        assert_same_text(name, want, self.stream(name), &self.console());
        self
    }

    #[track_caller]
    fn stream_contains(self, name: &str, needle: &str) -> Run {
        assert!(
            self.stream(name).contains(needle),
            "{name} lacks {needle:?}: {}",
            self.console()
        );
        self
    }

    /// stdout as JSON, into `T` (a report shape of [`reports`] refuses unknown fields).
    #[track_caller]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        match serde_json::from_str(&self.stdout) {
            Ok(v) => v,
            Err(e) => panic!("stdout is not the JSON expected ({e}): {}", self.console()),
        }
    }
}

/// Requires `needle` in `haystack`, which the failure shows.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "{needle:?} is not in:\n{haystack}"
    );
}

/// Fails with the first line where `actual` differs from `want`, and both texts.
#[track_caller]
pub fn assert_same_text(what: &str, want: &str, actual: &str, context: &str) {
    if want == actual {
        return;
    }
    let (w, a): (Vec<&str>, Vec<&str>) = (want.lines().collect(), actual.lines().collect());
    let at = (0..w.len().max(a.len()))
        .find(|&i| w.get(i) != a.get(i))
        .unwrap_or(w.len());
    panic!(
        "{what} differs from line {}:\n  expected: {:?}\n  actual:   {:?}\n--- expected {what}:\n{want}\n--- {context}",
        at + 1,
        w.get(at).copied().unwrap_or("<end>"),
        a.get(at).copied().unwrap_or("<end>"),
    );
}

/// `mcptape show --json TAPE`, which must succeed, as JSON.
#[track_caller]
pub fn show_json(tape: &Path) -> Value {
    Mt::new(["show", "--json"]).arg(tape).run().success().json()
}

/// Play's stderr warns once, on one line, that the client asked for protocol version `asked`
/// and the tape answers `recorded`.
#[track_caller]
pub fn assert_one_version_warning(stderr: &str, asked: &str, recorded: &str) {
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("protocol version"))
        .collect();
    assert_eq!(warned.len(), 1, "one warning line: {stderr}");
    assert_contains(
        warned[0],
        &format!("the client asked for protocol version {asked}, the tape answers {recorded}"),
    );
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

/// [`play_cmd`] behind `/bin/sh`, which writes play's exit status to `rc` (and, with `err`,
/// play's stderr there): for a client that spawns play, whose status it does not show.
pub fn play_reporting(tape: &Path, rc: &Path, err: Option<&Path>) -> Vec<String> {
    play_reporting_with(tape, &[], rc, err)
}

/// [`play_reporting`] with play's `flags`.
pub fn play_reporting_with(
    tape: &Path,
    flags: &[&str],
    rc: &Path,
    err: Option<&Path>,
) -> Vec<String> {
    let mut v: Vec<String> = vec!["/bin/sh".into(), "-c".into()];
    match err {
        Some(err) => v.extend([
            r#"rc="$1"; err="$2"; shift 2; "$@" 2>"$err"; echo $? > "$rc""#.into(),
            "sh".into(),
            s(rc),
            s(err),
        ]),
        None => v.extend([
            r#"rc="$1"; shift; "$@"; echo $? > "$rc""#.into(),
            "sh".into(),
            s(rc),
        ]),
    }
    v.extend(play_cmd(tape));
    v.extend(flags.iter().map(|f| f.to_string()));
    v
}

/// The exit status [`play_reporting`] wrote to `rc` (waits up to 10 s for it).
pub fn reported_status(rc: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(rc) {
            if text.ends_with('\n') {
                return text
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("bad status {text:?}: {e}"));
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "mcptape play never exited (no status in {})",
            rc.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the Python SDK client scenario against `server` and returns its transcript.
pub fn py_client(
    scenario: &str,
    mode: &str,
    server: &[String],
    env: &[(&str, &str)],
) -> (Value, Output) {
    let mut cmd = Command::new(python());
    cmd.arg(peer("py_client.py"))
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
            text(&out.stderr)
        )
    });
    (transcript, out)
}

/// Runs tests/peers/py_faults.py (the Python SDK client making the tool calls of `steps`, see
/// its doc) against `target` and returns what it saw of each call.
pub fn py_faults(steps: &Value, target: &[String]) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(peer("py_faults.py"))
        .args(["--steps", &steps.to_string(), "--"])
        .args(target);
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "py_faults failed: {:?}\n{}",
        out.status,
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "py_faults printed no JSON ({e}); stderr:\n{}",
            text(&out.stderr)
        )
    })
}

/// [`py_client`] that must succeed; `what` says where it ran, for the failure message.
pub fn py_ok(scenario: &str, mode: &str, target: &[String], what: &str) -> Value {
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

/// Runs the rmcp client example with `args` against `target` (a server command or a URL); with
/// `env`, in exactly that environment. Returns the JSON it printed and its output.
pub fn rmcp_run(
    args: &[String],
    target: &[String],
    env: Option<&[(&str, &str)]>,
) -> (Value, Output) {
    let mut cmd = Command::new(rmcp_client());
    cmd.args(args).arg("--").args(target);
    if let Some(env) = env {
        cmd.env_clear();
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    let out = run_with_timeout(cmd, Duration::from_secs(60));
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rmcp_client printed no JSON ({e}); status {:?}; stderr:\n{}",
            out.status,
            text(&out.stderr)
        )
    });
    (doc, out)
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
                text(&stderr)
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

// --- tapes -----------------------------------------------------------------------------------

/// The tape's lines as JSON values.
///
/// A tape still being written, or whose recorder was killed, ends in newline padding
/// (src/tape/sink.rs), which is skipped; a closed tape must end in one newline.
pub fn tape_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read tape");
    let body = text.trim_end_matches('\n');
    let lines: Vec<Value> = body
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("tape line not JSON ({e}): {l}"))
        })
        .collect();
    let padded = text.len() > body.len() + 1;
    assert!(
        !(padded && lines.last().is_some_and(|l| l["type"] == "end")),
        "{}: a closed tape ends in one newline, not in padding",
        path.display()
    );
    lines
}

/// The `msg` lines of a tape still being written, read while its recorder runs: the line the
/// recorder is copying into the file at that moment (its last, torn) is left out; any other
/// line must be JSON.
pub fn live_tape_msgs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read tape");
    let lines: Vec<&str> = text.trim_end_matches('\n').lines().collect();
    let last = lines.len().saturating_sub(1);
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match serde_json::from_str::<Value>(l) {
            Ok(v) => Some(v),
            Err(_) if i == last => None,
            Err(e) => panic!("tape line not JSON ({e}): {l}"),
        })
        .filter(|l| l["type"] == "msg")
        .collect()
}

/// The `msg` lines of a tape.
pub fn tape_msgs(path: &Path) -> Vec<Value> {
    tape_lines(path)
        .into_iter()
        .filter(|l| l["type"] == "msg")
        .collect()
}

/// The raw bytes of each line of a file (terminator removed, empty lines skipped).
pub fn raw_lines(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .expect("read")
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The tape's closing line, which must be its last.
pub fn end_of(tape: &Path) -> Value {
    let lines = raw_lines(tape);
    let last: Value = serde_json::from_slice(lines.last().expect("tape lines")).expect("JSON");
    assert_eq!(last["type"], "end", "the tape is closed: {last}");
    last
}

/// Where in `lines` the first line matching `pred` is; `what` names it for the failure.
pub fn position(lines: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    lines
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("{what} is not on the tape: {lines:#?}"))
}

/// Where the message of direction `dir` ("c2s", "s2c") with JSON-RPC id `id` is in `lines`.
pub fn position_of(lines: &[Value], dir: &str, id: impl Into<Value>) -> usize {
    let id = id.into();
    position(lines, &format!("the {dir} message with id {id}"), |l| {
        l["dir"] == dir && l["id"] == id
    })
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

/// A JSON-RPC request.
pub fn req(id: impl Into<Value>, method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

/// The `initialize` params [`LineClient::initialize`] sends.
pub fn init_params() -> Value {
    serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}})
}

// --- a line client ---------------------------------------------------------------------------

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

    /// Whether the child's stdout reaches EOF within `limit` (a line instead is a failure).
    pub fn eof_within(&mut self, limit: Duration) -> bool {
        match self.lines.recv_timeout(limit) {
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
            Ok(line) => panic!("a line where EOF was expected: {}", text(&line)),
        }
    }

    /// The next line (raw bytes, terminator included), or None on EOF or timeout.
    pub fn recv_raw(&mut self, limit: Duration) -> Option<Vec<u8>> {
        self.lines.recv_timeout(limit).ok()
    }

    pub fn recv(&mut self) -> Value {
        let line = self
            .recv_raw(Duration::from_secs(30))
            .expect("a line from the child within 30 s");
        serde_json::from_slice(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&line)))
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

    /// Sends `request` and returns (its response, messages before it).
    pub fn ask(&mut self, request: &Value) -> (Value, Vec<Value>) {
        self.send(request);
        self.recv_response(&request["id"])
    }

    /// `request` and its response.
    pub fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.ask(&req(id, method, params)).0
    }

    /// The legacy handshake.
    pub fn initialize(&mut self) -> Value {
        let r = self.call(0, "initialize", init_params());
        self.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    /// Waits for the child to exit by itself (stdin still open), for at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) {
        let start = Instant::now();
        while self.child.try_wait().expect("wait").is_none() {
            assert!(
                start.elapsed() < limit,
                "the child did not exit by itself within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Closes stdin and waits for exit; returns (status, stderr).
    pub fn finish(mut self) -> (ExitStatus, String) {
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
        (status, text(&stderr))
    }

    /// [`LineClient::finish`] that requires exit code `code`; returns stderr.
    #[track_caller]
    pub fn finish_with(self, code: i32) -> String {
        let (status, stderr) = self.finish();
        assert_eq!(status.code(), Some(code), "exit status; stderr:\n{stderr}");
        stderr
    }
}

pub fn command(argv: &[String]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}
