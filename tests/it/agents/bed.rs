//! The agent test bed (tests/agents) driven from Rust: a loopback-only network namespace per
//! test, the scripted fake provider, `mcptape model-proxy` (record and playback), and the real
//! agents (Claude Code, Codex CLI) with `mcp-server-everything` over stdio, every one of them
//! started inside the namespace, so nothing a test runs can reach another machine.

use crate::harness::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to print its URL, or to exit after a signal.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long one agent run may take (they take 1-3 s; a stuck one fails the test).
const AGENT_LIMIT: Duration = Duration::from_secs(90);

/// The agent test bed's folder.
pub fn agents_dir() -> PathBuf {
    repo().join("tests/agents")
}

/// A file of the installed agents (tests/agents/node_modules), or a failure saying how to get it.
pub fn agent_bin(name: &str) -> PathBuf {
    let path = agents_dir().join("node_modules/.bin").join(name);
    assert!(
        path.exists(),
        "agent {} is missing: run ./scripts/test (it runs tests/agents/install.sh)",
        path.display()
    );
    path
}

/// A program on `PATH`, as an absolute path (the commands here run with a cleared environment).
pub fn which(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

// --- the network namespace -------------------------------------------------------------------

/// A loopback-only network namespace, held open by a small process (`unshare -n`) that exits
/// when its stdin closes (also when the test process dies); commands enter it with `nsenter`.
/// Where `unshare -n` is not permitted (not root), plain loopback, said on stderr.
pub struct Net {
    holder: Option<(Child, ChildStdin)>,
    nsenter: PathBuf,
}

impl Net {
    pub fn new() -> Net {
        let mut holder = Command::new(which("unshare"))
            .args(["-n", "sh", "-c", "ip link set lo up && echo up && read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn unshare");
        let mut line = String::new();
        let _ = BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line);
        if line.trim() != "up" {
            let _ = holder.kill();
            let out = holder.wait_with_output().expect("wait unshare");
            eprintln!(
                "note: unshare -n is not permitted here ({}); the agents run on plain loopback, outside hosts NOT blocked",
                text(&out.stderr).trim()
            );
            return Net {
                holder: None,
                nsenter: PathBuf::new(),
            };
        }
        let stdin = holder.stdin.take().expect("stdin");
        let net = Net {
            holder: Some((holder, stdin)),
            nsenter: which("nsenter"),
        };
        let mut links = net.cmd(which("ip"));
        links.args(["-o", "link"]);
        let out = run_with_timeout(links, PATIENCE);
        let names: Vec<String> = text(&out.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1).map(str::to_string))
            .collect();
        assert_eq!(names, ["lo"], "the namespace has loopback only");
        net
    }

    /// `program` run inside the namespace (`nsenter --net=… -- program`: nsenter enters it and
    /// execs the program, so the child's pid is the program's).
    pub fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        match &self.holder {
            Some((child, _)) => {
                let mut c = Command::new(&self.nsenter);
                c.arg(format!("--net=/proc/{}/ns/net", child.id()))
                    .arg("--")
                    .arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// `mcptape ARGS…` inside the namespace, with what mcptape reads from its environment
    /// pinned as [`Mt`] pins it.
    pub fn mcptape<I, A>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        let mut c = self.cmd(bin());
        c.args(args).env("NO_COLOR", "1");
        for k in [
            "CLICOLOR_FORCE",
            "MCPTAPE_DIR",
            "MCPTAPE_SIGNING_KEY",
            "FIXTURE_DRIFT",
        ] {
            c.env_remove(k);
        }
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.holder.take() {
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// --- background processes --------------------------------------------------------------------

/// A process running while the test goes on: stdout and stderr to files in the test's folder,
/// stdin closed; SIGKILLed and reaped on drop unless it exited.
pub struct Bg {
    name: String,
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
}

impl Bg {
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Bg {
        let out = dir.join(format!("{name}.stdout"));
        let err = dir.join(format!("{name}.stderr"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(File::create(&out).expect("stdout file"))
            .stderr(File::create(&err).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Bg {
            name: name.into(),
            child: Some(child),
            out,
            err,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Whether it has exited (reaping it if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("wait"))
    }

    /// The first stdout line (a URL), waited for; fails if the process dies first.
    pub fn first_line(&mut self) -> String {
        let start = Instant::now();
        loop {
            if let Some((line, _)) = self.stdout().split_once('\n') {
                return line.to_string();
            }
            if let Some(st) = self.exited() {
                panic!(
                    "{} exited ({st}) before printing a line:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{} printed no line within {PATIENCE:?}:\n{}",
                self.name,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig`, waits for the exit; returns the exit status and stderr.
    pub fn stop(&mut self, sig: i32) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().expect("still running");
        // SAFETY: kill(2) on a child this guard spawned and has not reaped.
        unsafe { libc::kill(child.id() as i32, sig) };
        let start = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not exit within {PATIENCE:?} of signal {sig}:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (st, self.stderr())
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// --- the fake provider -----------------------------------------------------------------------

/// `fake_provider.py --tool echo` (optionally `--fault KIND`, `--port N`, `--args JSON`), its
/// JSON-lines log in the test's folder.
pub struct Fake {
    proc: Bg,
    pub url: String,
    pub log: PathBuf,
}

impl Fake {
    pub fn start(net: &Net, dir: &Path, name: &str, extra: &[&str]) -> Fake {
        let log = dir.join(format!("{name}.log"));
        let mut cmd = net.cmd(which("python3"));
        cmd.arg(agents_dir().join("fake_provider.py"))
            .args(["--tool", "echo", "--log"])
            .arg(&log)
            .args(extra);
        let mut proc = Bg::spawn(name, cmd, dir);
        let url = proc.first_line();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "fake provider URL {url:?}"
        );
        Fake { proc, url, log }
    }

    pub fn port(&self) -> String {
        self.url.rsplit(':').next().expect("port").to_string()
    }

    /// Its log so far: `{"connection": n}` per accepted connection, one line per request.
    pub fn log(&self) -> Vec<Value> {
        log_lines(&self.log)
    }

    /// The model requests it answered so far (POSTs).
    pub fn posts(&self) -> Vec<Value> {
        posts(&self.log()).into_iter().cloned().collect()
    }

    /// Stops it (SIGTERM) and returns its log.
    pub fn stop(mut self) -> Vec<Value> {
        self.proc.stop(libc::SIGTERM);
        log_lines(&self.log)
    }
}

pub fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON log line"))
        .collect()
}

/// The model requests in a fake provider's log (not HEAD, not connections).
pub fn posts(log: &[Value]) -> Vec<&Value> {
    log.iter().filter(|l| l["method"] == "POST").collect()
}

// --- the model proxy -------------------------------------------------------------------------

/// `mcptape model-proxy` running (record or playback), its base URL read from stdout.
pub struct Proxy {
    proc: Bg,
    pub url: String,
}

impl Proxy {
    pub fn record(net: &Net, dir: &Path, name: &str, tape: &Path, upstream: &str) -> Proxy {
        let cmd = net.mcptape([
            "model-proxy".as_ref(),
            "--tape".as_ref(),
            tape.as_os_str(),
            "--upstream".as_ref(),
            upstream.as_ref(),
        ]);
        Proxy::start(name, cmd, dir)
    }

    pub fn play(net: &Net, dir: &Path, name: &str, tape: &Path) -> Proxy {
        let cmd = net.mcptape([
            "model-proxy".as_ref(),
            "--tape".as_ref(),
            tape.as_os_str(),
            "--playback".as_ref(),
        ]);
        Proxy::start(name, cmd, dir)
    }

    fn start(name: &str, cmd: Command, dir: &Path) -> Proxy {
        let mut proc = Bg::spawn(name, cmd, dir);
        let url = proc.first_line();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "{name} printed {url:?}"
        );
        Proxy { proc, url }
    }

    /// SIGTERM; (exit code, stderr).
    pub fn stop(mut self) -> (i32, String) {
        let (st, stderr) = self.proc.stop(libc::SIGTERM);
        match st.code() {
            Some(code) => (code, stderr),
            None => panic!("model-proxy died of a signal ({st}), not exited:\n{stderr}"),
        }
    }
}

/// The closing summary a playback prints: served, missed, served leniently, unused.
pub fn summary(served: u64, missed: u64, lenient: u64, unused: u64) -> String {
    let s = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "mcptape model-proxy: {served} model call{} served, {missed} missed, {lenient} served leniently, {unused} recorded call{} unused",
        s(served),
        s(unused)
    )
}

// --- the agents --------------------------------------------------------------------------------

/// Which agent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Agent {
    Claude,
    Codex,
}

/// Fixed paths for an agent's runs (`ROOT/home`, `ROOT/work`, `ROOT/mcp.json`): the agents put
/// their config folder and working folder in the prompt, so every run of a test uses the same
/// ones. The config folder is new for each run (as on a fresh CI machine).
pub struct Root {
    pub dir: PathBuf,
}

/// What one agent run did.
pub struct AgentRun {
    pub agent: Agent,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub secs: f64,
}

impl AgentRun {
    pub fn console(&self) -> String {
        format!(
            "{:?} exit {:?} after {:.2} s\n--- stdout:\n{}\n--- stderr:\n{}",
            self.agent, self.code, self.secs, self.stdout, self.stderr
        )
    }

    /// Claude Code's `--output-format json` document (its last stdout line).
    pub fn claude_json(&self) -> Value {
        let line = self.stdout.lines().rev().find(|l| l.starts_with('{'));
        line.and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no result JSON from Claude Code:\n{}", self.console()))
    }

    /// What the agent answered in the end: Claude's `result`, Codex's stdout (its last message).
    pub fn answer(&self) -> String {
        match self.agent {
            Agent::Claude => self.claude_json()["result"]
                .as_str()
                .unwrap_or_else(|| panic!("no result string:\n{}", self.console()))
                .to_string(),
            Agent::Codex => self.stdout.trim().to_string(),
        }
    }

    /// Requires exit 0 and the fake provider's final answer quoting the echo tool's result
    /// (Claude Code's tool result is the echo text alone; Codex's is prefixed with its own
    /// `Wall time: … seconds\nOutput:` lines); returns the answer.
    #[track_caller]
    pub fn ok(&self) -> String {
        assert_eq!(self.code, Some(0), "agent failed:\n{}", self.console());
        let answer = self.answer();
        let echo = "Echo: hello from the fake model";
        match self.agent {
            Agent::Claude => {
                assert_eq!(answer, format!("FINAL: {echo}"), "{}", self.console());
                assert_eq!(self.claude_json()["is_error"], false, "{}", self.console());
            }
            Agent::Codex => assert!(
                answer.starts_with("FINAL: Wall time: ")
                    && answer.ends_with(&format!("Output:\n{echo}")),
                "the agent's answer:\n{}",
                self.console()
            ),
        }
        answer
    }
}

pub const PROMPT: &str = "Call the echo tool once, then reply with its result.";

impl Root {
    pub fn new(dir: &Path) -> Root {
        let dir = dir.join("root");
        std::fs::create_dir_all(dir.join("work")).expect("root");
        let server = peer("node_modules/.bin/mcp-server-everything");
        let mcp = serde_json::json!({"mcpServers": {"S": {"type": "stdio", "command": s(&server), "args": ["stdio"]}}});
        std::fs::write(dir.join("mcp.json"), mcp.to_string()).expect("mcp.json");
        Root { dir }
    }

    /// Runs `agent` with `prompt` against the model API at `base` (the proxy), inside `net`.
    pub fn run(&self, net: &Net, agent: Agent, base: &str, prompt: &str) -> AgentRun {
        let home = self.dir.join("home");
        let work = self.dir.join("work");
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("home");
        let path = std::env::var("PATH").unwrap_or_default();
        let mut cmd = match agent {
            Agent::Claude => {
                std::fs::create_dir_all(home.join(".claude")).expect(".claude");
                let mut c = net.cmd(agent_bin("claude"));
                c.args(["-p", prompt, "--mcp-config"])
                    .arg(self.dir.join("mcp.json"))
                    .args(["--strict-mcp-config", "--allowedTools", "mcp__S__echo"])
                    .args(["--output-format", "json"])
                    .env_clear()
                    .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
                    .env("ANTHROPIC_BASE_URL", base)
                    .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-for-tests")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    // By default Claude Code does not wait for its MCP servers: on a loaded
                    // machine the first request then offers no MCP tool at all (seen: the
                    // fake answered "FINAL: no tool"). Blocking makes the runs repeatable.
                    .env("MCP_CONNECTION_NONBLOCKING", "false");
                c
            }
            Agent::Codex => {
                let server = s(peer("node_modules/.bin/mcp-server-everything"));
                let mut c = net.cmd(agent_bin("codex"));
                c.args(["exec", "--skip-git-repo-check", "--disable", "apps", "--disable", "plugins"])
                    .args(["-c", "model=\"gpt-fake\"", "-c", "approval_policy=\"never\""])
                    .args(["-c", "analytics.enabled=false", "-c", "model_provider=\"fake\""])
                    .arg("-c")
                    .arg(format!(
                        "model_providers.fake={{name=\"fake\",base_url=\"{base}/v1\",env_key=\"FAKE_KEY\",wire_api=\"responses\"}}"
                    ))
                    // `required`: Codex waits for the server before its first request (else,
                    // on a loaded machine, that request offers no MCP tool: "FINAL: no tool").
                    .arg("-c")
                    .arg(format!(
                        "mcp_servers.S={{command=\"{server}\",args=[\"stdio\"],default_tools_approval_mode=\"approve\",required=true,startup_timeout_sec=60}}"
                    ))
                    .arg(prompt)
                    .env_clear()
                    .env("CODEX_HOME", &home)
                    .env("FAKE_KEY", "sk-fake-key-for-tests")
                    .env("OPENAI_API_KEY", "sk-fake-key-for-tests");
                c
            }
        };
        cmd.env("PATH", path)
            .env("TERM", "dumb")
            .env("HOME", &home)
            .current_dir(&work);
        let start = Instant::now();
        let out = run_with_timeout(cmd, AGENT_LIMIT);
        AgentRun {
            agent,
            code: out.status.code(),
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
            secs: start.elapsed().as_secs_f64(),
        }
    }
}

// --- tapes -----------------------------------------------------------------------------------

/// One model call as the tape holds it.
#[derive(Debug)]
pub struct TapedCall {
    pub n: u64,
    pub endpoint: String,
    pub stream: bool,
    /// The request body.
    pub request: Value,
    /// The answer's head: `http.status`.
    pub status: Option<u64>,
    /// A whole answer's body.
    pub body: Option<Value>,
    /// The stream's events: (event name, data).
    pub events: Vec<(Option<String>, Value)>,
    /// The call's `end` line (a stream's; a whole answer has none).
    pub end: Option<Value>,
    /// What the answer said about itself (`summary` of the `end` line, or of the `response` line
    /// of a whole answer).
    pub summary: Value,
}

impl TapedCall {
    pub fn event_names(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|(e, d)| {
                e.clone()
                    .or_else(|| d.get("type").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_else(|| "data".into())
            })
            .collect()
    }
}

/// The model calls on a tape, in order, each line of a call required to carry its number.
pub fn taped_calls(tape: &Path) -> Vec<TapedCall> {
    let mut calls: Vec<TapedCall> = Vec::new();
    for l in tape_lines(tape)
        .into_iter()
        .filter(|l| l["type"] == "model")
    {
        let n = l["call"].as_u64().expect("call number");
        let part = l["part"].as_str().expect("part");
        if part == "request" {
            assert_eq!(
                calls.len() as u64 + 1,
                n,
                "calls are numbered in order: {l}"
            );
            calls.push(TapedCall {
                n,
                endpoint: l["endpoint"].as_str().unwrap_or_default().into(),
                stream: l["stream"] == true,
                request: l["msg"].clone(),
                status: None,
                body: None,
                events: Vec::new(),
                end: None,
                summary: Value::Null,
            });
            continue;
        }
        let call = calls
            .iter_mut()
            .find(|c| c.n == n)
            .unwrap_or_else(|| panic!("a {part} line before its request: {l}"));
        match part {
            "response" => {
                call.status = l["http"]["status"].as_u64();
                call.body = l.get("msg").cloned();
                if let Some(sum) = l.get("summary") {
                    call.summary = sum.clone();
                }
            }
            "event" => call.events.push((
                l["event"].as_str().map(str::to_string),
                l.get("msg")
                    .or(l.get("text"))
                    .cloned()
                    .unwrap_or(Value::Null),
            )),
            "end" => {
                if let Some(sum) = l.get("summary") {
                    call.summary = sum.clone();
                }
                call.end = Some(l);
            }
            other => panic!("unknown part {other:?}: {l}"),
        }
    }
    calls
}

/// `mcptape verify` and `mcptape lint` of the tape: intact and clean.
#[track_caller]
pub fn assert_intact_and_clean(tape: &Path) {
    Mt::new(["verify"])
        .arg(tape)
        .run()
        .success()
        .stdout_contains("intact");
    Mt::new(["lint"])
        .arg(tape)
        .run()
        .success()
        .stdout_contains("clean");
}

/// Writes `v` to a file in `dir` and returns its path.
pub fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let path = dir.join(name);
    let mut f = File::create(&path).expect("create");
    f.write_all(v.to_string().as_bytes()).expect("write");
    path
}
