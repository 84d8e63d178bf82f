//! The agent run row (issue 19): the same scripted Claude Code run (tests/agents: the pinned
//! Claude Code, tests/agents/fake_provider.py as its model API, the bench server as its MCP
//! server `S`) with and without `mcptape run` in front, alternating, wall time of each from
//! start to exit. Every run is checked: exit 0, Claude Code's answer the fake model's `FINAL:`
//! quoting the echo tool's result, and (with mcptape) the tape holding both model calls and the
//! tool call. Everything runs inside a loopback-only network namespace (`unshare -n`, `lo` up)
//! when that is permitted, as the tests run the agents.

use crate::http_client::{Served, Stop};
use crate::scenarios::Env;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const PROMPT: &str = "Call the echo tool once, then reply with its result.";
/// The echo call the fake model makes (the bench server's tool takes `n` and `size`).
const ARGS: &str = r#"{"n":1,"size":300}"#;
/// Longest one run may take (they take 1–6 s).
const LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize)]
pub struct AgentRuns {
    pub what: String,
    pub runs: usize,
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub all_s: Vec<f64>,
}

/// A loopback-only network namespace held open by `unshare -n` (commands enter it with
/// `nsenter`), or plain loopback where that is not permitted.
struct Net {
    holder: Option<(Child, ChildStdin)>,
}

impl Net {
    fn new(notes: &mut Vec<String>) -> Net {
        let spawned = Command::new("unshare")
            .args(["-n", "sh", "-c", "ip link set lo up && echo up && read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut holder = match spawned {
            Ok(h) => h,
            Err(e) => {
                notes.push(format!(
                    "run: unshare could not start ({e}); the agent runs on plain loopback"
                ));
                return Net { holder: None };
            }
        };
        let mut line = String::new();
        let _ = BufReader::new(holder.stdout.take().expect("piped")).read_line(&mut line);
        if line.trim() != "up" {
            let _ = holder.kill();
            let out = holder.wait_with_output().ok();
            let why = out.map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string());
            notes.push(format!(
                "run: unshare -n is not permitted here ({}); the agent runs on plain loopback",
                why.unwrap_or_default()
            ));
            return Net { holder: None };
        }
        let stdin = holder.stdin.take().expect("piped");
        Net {
            holder: Some((holder, stdin)),
        }
    }

    /// `program` inside the namespace.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.holder {
            Some((h, _)) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/proc/{}/ns/net", h.id()))
                    .arg("--")
                    .arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn argv(&self, program: &str) -> Vec<String> {
        match &self.holder {
            Some((h, _)) => vec![
                "nsenter".into(),
                format!("--net=/proc/{}/ns/net", h.id()),
                "--".into(),
                program.into(),
            ],
            None => vec![program.into()],
        }
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

/// The answer Claude Code must give: the fake model quotes the first 200 characters of the
/// echo tool's text.
fn expected_answer() -> Result<String> {
    let args: serde_json::Value = serde_json::from_str(ARGS)?;
    let mut line = Vec::new();
    let n = args["n"].as_u64().unwrap_or(1);
    let size = args["size"].as_u64().unwrap_or(0) as usize;
    crate::proto::call_result(&mut line, &n.to_string(), n, size);
    let v: serde_json::Value = serde_json::from_slice(&line)?;
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
    Ok(format!(
        "FINAL: {}",
        text.chars().take(200).collect::<String>()
    ))
}

/// Runs the row; `Ok(None)` with a note when Claude Code cannot run here.
pub fn agent_run(env: &Env, notes: &mut Vec<String>) -> Result<Option<Vec<AgentRuns>>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let claude = root.join("tests/agents/node_modules/.bin/claude");
    if !claude.exists() {
        notes.push(format!(
            "run: skipped, Claude Code is not installed at {} (tests/agents/install.sh installs it)",
            claude.display()
        ));
        return Ok(None);
    }
    let dir = env.work.join("agent");
    std::fs::create_dir_all(dir.join("work"))?;
    let mcp = serde_json::json!({"mcpServers": {"S": {
        "type": "stdio", "command": env.bench.display().to_string(), "args": ["--serve"]}}});
    let mcp_path = dir.join("mcp.json");
    std::fs::write(&mcp_path, mcp.to_string())?;
    let net = Net::new(notes);
    let mut fake_cmd = net.argv("python3");
    fake_cmd.extend([
        root.join("tests/agents/fake_provider.py")
            .display()
            .to_string(),
        "--tool".into(),
        "echo".into(),
        "--args".into(),
        ARGS.into(),
    ]);
    let fake = Served::spawn(
        "fake provider",
        &fake_cmd,
        &dir,
        &dir.join("fake-provider.stderr"),
        Stop::CloseStdin,
    )?;
    let want = expected_answer()?;
    let run = |with_mcptape: bool, i: usize| -> Result<f64> {
        let home = dir.join("home");
        let _ = std::fs::remove_dir_all(&home);
        let config = home.join(".claude");
        std::fs::create_dir_all(&config)?;
        let tape = dir.join(format!("run-{i}.jsonl"));
        let mut cmd = if with_mcptape {
            let _ = std::fs::remove_file(&tape);
            let mut c = net.cmd(&env.mcptape);
            c.arg("run").arg("--tape").arg(&tape).arg("--").arg(&claude);
            c
        } else {
            net.cmd(&claude)
        };
        cmd.args(["-p", PROMPT, "--mcp-config"])
            .arg(&mcp_path)
            .args(["--strict-mcp-config", "--allowedTools", "mcp__S__echo"])
            .args(["--output-format", "json"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("TERM", "dumb")
            .env("NO_COLOR", "1")
            .env("MCPTAPE_DIR", dir.join("mcptape"))
            .env("CLAUDE_CONFIG_DIR", &config)
            .env("ANTHROPIC_BASE_URL", &fake.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-bench-not-a-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // Wait for the MCP server before the first model request (tests/it/agent_runs.rs
            // says why: on a loaded machine the first request otherwise has no echo tool).
            .env("MCP_CONNECTION_NONBLOCKING", "0")
            .env("MCP_CONNECT_TIMEOUT_MS", "60000")
            .current_dir(dir.join("work"));
        let name = if with_mcptape {
            "mcptape run"
        } else {
            "claude"
        };
        let (secs, stdout, stderr) = timed(name, cmd, &dir, i)?;
        let answer = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
        let ok = answer
            .as_ref()
            .is_some_and(|a| a["result"].as_str() == Some(want.as_str()) && a["is_error"] == false);
        if !ok {
            bail!("{name}: a wrong answer (want {want:?}):\n{stdout}\n{stderr}");
        }
        if with_mcptape {
            check_tape(&tape)?;
        }
        Ok(secs)
    };
    // One of each first: node's first start reads Claude Code's 235 MB from disk.
    run(false, 0)?;
    run(true, 0)?;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 1..=env.plan.agent_runs {
        // Alternating which goes first, so a slow stretch of the machine lands on both.
        if i % 2 == 1 {
            direct.push(run(false, i)?);
            through.push(run(true, i)?);
        } else {
            through.push(run(true, i)?);
            direct.push(run(false, i)?);
        }
    }
    drop(fake);
    Ok(Some(vec![
        summary("claude -p (direct)", direct),
        summary("mcptape run -- claude -p", through),
    ]))
}

/// Runs `cmd` to its end (killed after [`LIMIT`]); wall seconds, stdout, stderr.
fn timed(name: &str, mut cmd: Command, dir: &Path, i: usize) -> Result<(f64, String, String)> {
    let out = dir.join(format!("{}-{i}.stdout", name.replace(' ', "-")));
    let err = dir.join(format!("{}-{i}.stderr", name.replace(' ', "-")));
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name}: did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let secs = t0.elapsed().as_secs_f64();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    if !status.success() {
        bail!("{name}: exited with {status}:\n{stdout}\n{stderr}");
    }
    Ok((secs, stdout, stderr))
}

/// The tape of a run holds both model requests and the echo tool call, and was closed.
fn check_tape(tape: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(tape).with_context(|| format!("reading {}", tape.display()))?;
    let requests = text
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"model""#) && l.contains(r#""part":"request""#))
        .count();
    let tool_call = text
        .lines()
        .any(|l| l.starts_with(r#"{"type":"msg""#) && l.contains(r#""method":"tools/call""#));
    let closed = text
        .lines()
        .last()
        .unwrap_or("")
        .starts_with(r#"{"type":"end""#);
    if requests != 2 || !tool_call || !closed {
        bail!(
            "{}: {requests} model requests (want 2), tool call taped: {tool_call}, closed: {closed}",
            tape.display()
        );
    }
    Ok(())
}

fn summary(what: &str, mut all: Vec<f64>) -> AgentRuns {
    let runs = all.clone();
    all.sort_by(f64::total_cmp);
    AgentRuns {
        what: what.into(),
        runs: all.len(),
        median_s: median(&all),
        min_s: all[0],
        max_s: all[all.len() - 1],
        all_s: runs,
    }
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}
