//! `mcptape run` with the real agents (tests/agents): Claude Code and Codex CLI recorded whole —
//! their model calls and their MCP server on one tape — then run again with the tools served
//! from the tape and the model live (`--replay`), and fully offline (`--playback`, twice), each
//! time with the recorded final answer; a project `.mcp.json` rewritten for the run and put back
//! byte for byte, also by `run --restore` after a `kill -9`; a playback whose prompt changed
//! failing with the nearest recorded call named; and what one tape with many writers costs,
//! measured (printed, not asserted).
//!
//! Each agent test runs in a loopback-only network namespace of its own with every process of it
//! inside (the fake provider, mcptape, the agent, its MCP server), so nothing can leave the
//! machine. The MCP server is started through `tests/agents/runs/marker_server.sh`, which appends
//! a line to a marker file each time it starts one: a replay or a playback must start none. A
//! playback runs with the recording's fake provider stopped and a sentinel fake listening on its
//! port (the upstream the agent is configured with): the sentinel's log must stay empty, not one
//! connection.
//!
//! Both agents are told to wait for their MCP server before the first model request (Claude
//! Code `MCP_CONNECTION_NONBLOCKING=0`, Codex `required = true`): left to themselves they ask the
//! model at once with whatever tools are connected by then, and on a loaded machine that is none
//! (measured: 4 of 4 runs "FINAL: no tool" under CPU starvation, with and without mcptape).

use crate::agents::bed::{agent_bin, agents_dir, which, Bg, Fake, Net};
use crate::harness::*;
use serde_json::{json, Value};
use std::ffi::OsStr;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a process may take to print its URL, to start a server, or to exit after a signal.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long one `mcptape run` of an agent may take (they take 2-6 s; a stuck one fails the test).
const AGENT_LIMIT: Duration = Duration::from_secs(90);

const PROMPT: &str = "Call the echo tool once, then reply with its result.";
const ECHO: &str = "Echo: hello from the fake model";

// --- the bed: paths, the namespace, background processes, the fake provider ------------------

/// A helper of these tests (tests/agents/runs).
fn runs_file(name: &str) -> PathBuf {
    agents_dir().join("runs").join(name)
}

// --- the agents under `mcptape run` ---------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Agent {
    Claude,
    Codex,
    Gemini,
    OpenCode,
}

impl Agent {
    /// As `mcptape run` names it.
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Codex => "Codex CLI",
            Agent::Gemini => "Gemini CLI",
            Agent::OpenCode => "opencode",
        }
    }

    /// The model calls of one run: the two turns, and for opencode the title it has its small
    /// model write for the session, asked beside the first turn.
    fn model_calls(self) -> usize {
        match self {
            Agent::OpenCode => 3,
            _ => 2,
        }
    }

    /// The model the turns are asked of (opencode's title call asks another).
    fn turn_model(self) -> Option<&'static str> {
        match self {
            Agent::OpenCode => Some(OPENCODE_MODEL),
            _ => None,
        }
    }
}

/// The model opencode is run with (`-m anthropic/…`): the fake provider answers any.
const OPENCODE_MODEL: &str = "claude-sonnet-4-5";

/// Where the agent's MCP servers come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Servers {
    /// `--mcp-config ROOT/mcp.json --strict-mcp-config` (Claude), `-c mcp_servers.S=…` (Codex).
    CommandLine,
    /// Claude Code's project `.mcp.json` in the working folder, no `--mcp-config`.
    ProjectFile,
    /// Claude Code's user scope: `mcpServers` of `$CLAUDE_CONFIG_DIR/.claude.json`.
    UserScope,
    /// Claude Code's local scope: `projects["<working folder>"].mcpServers` there.
    LocalScope,
}

/// A test's folder and namespace, and the fixed paths of its agent runs (`ROOT/home`,
/// `ROOT/work`: the agents put them in their prompts, so every run of one test uses the same
/// ones; the config folder is made anew for each run, as on a fresh CI machine).
struct Bed {
    dir: tempfile::TempDir,
    net: Net,
    root: PathBuf,
    /// `MCPTAPE_DIR` of every run (where `run` keeps its journal of rewritten files).
    mcptape_dir: PathBuf,
    /// One line per MCP server started (see marker_server.sh).
    marker: PathBuf,
    /// Codex with its built-in `openai` provider in place of one pointed at the fake
    /// provider, signed in (`codex login`) with this `auth.json` in its home (none if empty).
    codex_login: Option<String>,
    /// Gemini CLI signed in by its environment alone (`GEMINI_API_KEY`), its settings naming
    /// no sign-in.
    gemini_env_auth: bool,
    /// Gemini CLI on Vertex AI in express mode (`GOOGLE_GENAI_USE_VERTEXAI`, `GOOGLE_API_KEY`),
    /// signed in by its environment alone.
    gemini_vertex: bool,
    /// Claude Code's model base URL in its user settings (`env`), not in its environment.
    claude_settings_base: bool,
    /// Gemini CLI with its built-in agent skills on, as it comes (the other tests turn them
    /// off).
    gemini_skills: bool,
    /// Gemini CLI's settings with comments in them (it reads them through
    /// strip-json-comments).
    gemini_commented: bool,
    /// Gemini CLI signed in with Google (`oauth-personal`, its login cached in
    /// `~/.gemini/oauth_creds.json`), asking Code Assist at its own `CODE_ASSIST_ENDPOINT`
    /// (the fake provider). `Some(true)`: also given `GOOGLE_GENAI_USE_GCA` and
    /// `GOOGLE_CLOUD_ACCESS_TOKEN`, which it takes as they are (offline it cannot check its
    /// cached login with Google: `oauth2.googleapis.com/tokeninfo`).
    gemini_google: Option<bool>,
    /// Claude Code on Vertex AI (`CLAUDE_CODE_USE_VERTEX`, its auth skipped as behind a
    /// gateway), its base URL `ANTHROPIC_VERTEX_BASE_URL`.
    claude_vertex: bool,
    /// Claude Code's user settings name S by its command in this list of its MCP server
    /// policy (`deniedMcpServers` or `allowedMcpServers`).
    claude_policy_on_s: Option<&'static str>,
}

/// What one `mcptape run` did.
struct RunOut {
    agent: Agent,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    secs: f64,
}

impl RunOut {
    fn console(&self) -> String {
        format!(
            "mcptape run ({:?}) exit {:?} after {:.2} s\n--- stdout:\n{}\n--- stderr:\n{}",
            self.agent, self.code, self.secs, self.stdout, self.stderr
        )
    }

    /// Claude Code's `--output-format json` document (its last JSON line on stdout).
    fn claude_json(&self) -> Value {
        let line = self.stdout.lines().rev().find(|l| l.starts_with('{'));
        line.and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no result JSON from Claude Code:\n{}", self.console()))
    }

    /// The agent's final answer: Claude's `result`, Codex's stdout (its last message).
    fn answer(&self) -> String {
        match self.agent {
            Agent::Claude => self.claude_json()["result"]
                .as_str()
                .unwrap_or_else(|| panic!("no result string:\n{}", self.console()))
                .to_string(),
            Agent::Codex | Agent::Gemini => self.stdout.trim().to_string(),
            // `opencode run` prints each turn's text: the final answer is the last.
            Agent::OpenCode => self
                .stdout
                .lines()
                .rfind(|l| l.starts_with("FINAL:"))
                .unwrap_or_else(|| panic!("no final answer:\n{}", self.console()))
                .to_string(),
        }
    }

    /// Requires exit 0 and the fake provider's final answer quoting the echo tool's result
    /// (Codex prefixes the tool's text with its own `Wall time: … seconds\nOutput:` lines);
    /// returns the answer.
    #[track_caller]
    fn ok(&self) -> String {
        assert_eq!(self.code, Some(0), "the run failed:\n{}", self.console());
        let answer = self.answer();
        match self.agent {
            Agent::Claude => {
                assert_eq!(answer, format!("FINAL: {ECHO}"), "{}", self.console());
                assert_eq!(self.claude_json()["is_error"], false, "{}", self.console());
            }
            Agent::Codex => assert!(
                answer.starts_with("FINAL: Wall time: ")
                    && answer.ends_with(&format!("Output:\n{ECHO}")),
                "the agent's answer:\n{}",
                self.console()
            ),
            Agent::OpenCode => assert_eq!(answer, format!("FINAL: {ECHO}"), "{}", self.console()),
            // Gemini CLI fences the tool's text as untrusted before the model sees it.
            Agent::Gemini => assert_eq!(
                answer,
                format!("FINAL: <untrusted_context>\n{ECHO}\n</untrusted_context>"),
                "{}",
                self.console()
            ),
        }
        answer
    }
}

/// Codex's answer with the wall time it measured for the tool call taken out (the one part of
/// it that a live model, fed the live measurement, says differently each run).
fn without_wall_time(answer: &str) -> String {
    let Some(start) = answer.find("Wall time: ") else {
        return answer.to_string();
    };
    let rest = &answer[start + "Wall time: ".len()..];
    let end = rest.find(" seconds").unwrap_or(0);
    format!("{}Wall time: N{}", &answer[..start], &rest[end..])
}

impl Bed {
    /// `mcptape run` of `agent` with `servers`, on `tape`, its model at `base`, asked
    /// [`PROMPT`]: a function of the run's mode arguments.
    fn runner<'a>(
        &'a self,
        agent: Agent,
        servers: Servers,
        tape: &'a Path,
        base: &'a str,
    ) -> impl Fn(&[&str]) -> RunOut + 'a {
        move |mode| self.run(agent, servers, tape, mode, base, PROMPT)
    }

    fn new() -> Bed {
        let dir = tmp();
        let net = Net::new();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("work")).expect("root");
        let mcptape_dir = dir.path().join("mcptape");
        let marker = dir.path().join("servers-started");
        let bed = Bed {
            dir,
            net,
            root,
            mcptape_dir,
            marker,
            codex_login: None,
            gemini_env_auth: false,
            gemini_vertex: false,
            claude_settings_base: false,
            gemini_skills: false,
            gemini_commented: false,
            gemini_google: None,
            claude_vertex: false,
            claude_policy_on_s: None,
        };
        let (command, args) = bed.server_entry(None);
        let mcp = json!({"mcpServers": {"S": {"type": "stdio", "command": command, "args": args}}});
        std::fs::write(bed.root.join("mcp.json"), mcp.to_string()).expect("mcp.json");
        bed
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn tape(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// The MCP server S as a config entry: `mcp-server-everything stdio` behind the marker
    /// (which also copies `copy` aside when it starts the server).
    fn server_entry(&self, copy: Option<&Path>) -> (String, Vec<String>) {
        let mut args = vec![s(runs_file("marker_server.sh")), s(&self.marker)];
        if let Some(c) = copy {
            args.extend(["--copy".into(), s(c)]);
        }
        args.push("--".into());
        args.extend(everything());
        ("/bin/sh".into(), args)
    }

    /// Claude Code's state file with S in the user or the local scope (S copying the file
    /// aside as it starts): written by hand, as a user's has keys of its own.
    fn claude_state(&self, servers: Servers) -> String {
        let state = self.home().join(".claude/.claude.json");
        let (command, args) = self.server_entry(Some(&state));
        let entry = json!({"S": {"type": "stdio", "command": command, "args": args}});
        let doc = match servers {
            Servers::UserScope => {
                json!({"numStartups": 7, "tipsHistory": {"x": 1}, "mcpServers": entry})
            }
            _ => {
                json!({"numStartups": 7, "projects": {s(self.work()): {"allowedTools": [], "mcpServers": entry}}})
            }
        };
        serde_json::to_string_pretty(&doc).expect("JSON")
    }

    /// How many MCP servers were really started so far.
    fn starts(&self) -> usize {
        std::fs::read_to_string(&self.marker)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// The `mcptape run MODE… -- AGENT…` command, inside the namespace, in the working folder,
    /// with a cleared environment: the agent pointed at the model API `base`, asked `prompt`.
    /// The agent's config folder is made anew.
    fn command(
        &self,
        agent: Agent,
        servers: Servers,
        tape: &Path,
        mode: &[&str],
        base: &str,
        prompt: &str,
    ) -> Command {
        let home = self.home();
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("home");
        let mut cmd = self.net.cmd(bin());
        cmd.arg("run").arg("--tape").arg(tape).args(mode).arg("--");
        match agent {
            Agent::Claude => {
                let config = home.join(".claude");
                std::fs::create_dir_all(&config).expect(".claude");
                cmd.arg(agent_bin("claude")).args(["-p", prompt]);
                match servers {
                    Servers::CommandLine => {
                        cmd.arg("--mcp-config")
                            .arg(self.root.join("mcp.json"))
                            .arg("--strict-mcp-config");
                    }
                    Servers::ProjectFile => {
                        // A project's servers need the user's approval; in print mode this
                        // setting is that approval.
                        std::fs::write(
                            config.join("settings.json"),
                            r#"{"enableAllProjectMcpServers": true}"#,
                        )
                        .expect("settings.json");
                    }
                    Servers::UserScope | Servers::LocalScope => {
                        std::fs::write(config.join(".claude.json"), self.claude_state(servers))
                            .expect(".claude.json");
                    }
                }
                if self.claude_settings_base {
                    // A gateway's URL, as its users set it: in Claude Code's own settings.
                    let settings = json!({"env": {"ANTHROPIC_BASE_URL": base, "DISABLE_ERROR_REPORTING": "1"}});
                    std::fs::write(config.join("settings.json"), settings.to_string())
                        .expect("settings.json");
                }
                if let Some(list) = self.claude_policy_on_s {
                    // An administrator's (or the user's own) policy: S's command is denied,
                    // or the only one allowed.
                    let (command, args) = self.server_entry(None);
                    let mut exact = vec![command];
                    exact.extend(args);
                    let settings = json!({list: [{"serverCommand": exact}]});
                    std::fs::write(config.join("settings.json"), settings.to_string())
                        .expect("settings.json");
                }
                cmd.args(["--allowedTools", "mcp__S__echo", "--output-format", "json"])
                    .env_clear()
                    .env("CLAUDE_CONFIG_DIR", &config);
                if self.claude_vertex {
                    cmd.env("CLAUDE_CODE_USE_VERTEX", "1")
                        .env("CLAUDE_CODE_SKIP_VERTEX_AUTH", "1")
                        .env("ANTHROPIC_VERTEX_PROJECT_ID", "test-project")
                        .env("CLOUD_ML_REGION", "us-east5")
                        .env("ANTHROPIC_VERTEX_BASE_URL", format!("{base}/v1"));
                } else if !self.claude_settings_base {
                    cmd.env("ANTHROPIC_BASE_URL", base);
                }
                cmd.env("ANTHROPIC_API_KEY", "sk-ant-fake-key-for-tests")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    // In print mode Claude Code connects its MCP servers in the background
                    // and asks the model at once, with whatever tools are there by then: on
                    // a loaded machine (node starting slowly) the first request has no echo
                    // tool. Blocking, it waits for them (5 s unless told).
                    .env("MCP_CONNECTION_NONBLOCKING", "0")
                    .env("MCP_CONNECT_TIMEOUT_MS", "60000");
            }
            Agent::Gemini => {
                assert_eq!(servers, Servers::UserScope, "Gemini CLI: its user settings");
                let (command, args) = self.server_entry(None);
                let mut settings = json!({
                    "mcpServers": {"S": {"command": command, "args": args, "trust": true}},
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "telemetry": {"enabled": false},
                    "privacy": {"usageStatisticsEnabled": false},
                    // Gemini CLI 0.61 lists its built-in skills in an order that changes from
                    // run to run (matching sorts them: docs/agent-runs.md). Off here, so the
                    // other tests' requests stay small; on in the test of that.
                    "skills": {"enabled": false},
                });
                if self.gemini_google.is_some() {
                    settings["security"]["auth"]["selectedType"] = json!("oauth-personal");
                    // As `gemini` writes it after a Google login (mode 600), its access token
                    // good until 2100: Gemini CLI has no reason to refresh it.
                    let creds = json!({
                        "access_token": "ya29.fake-access-token-for-tests",
                        "refresh_token": "1//fake-refresh-token-for-tests",
                        "scope": "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email https://www.googleapis.com/auth/userinfo.profile openid",
                        "token_type": "Bearer",
                        "id_token": "fake.id.token",
                        "expiry_date": 4_102_444_800_000u64,
                    });
                    std::fs::create_dir_all(home.join(".gemini")).expect(".gemini");
                    let file = home.join(".gemini/oauth_creds.json");
                    std::fs::write(&file, serde_json::to_string_pretty(&creds).expect("creds"))
                        .expect("oauth_creds.json");
                    std::fs::set_permissions(
                        &file,
                        std::os::unix::fs::PermissionsExt::from_mode(0o600),
                    )
                    .expect("chmod oauth_creds.json");
                }
                if self.gemini_env_auth || self.gemini_vertex {
                    settings
                        .as_object_mut()
                        .expect("settings")
                        .remove("security");
                }
                if self.gemini_skills {
                    settings.as_object_mut().expect("settings").remove("skills");
                }
                std::fs::create_dir_all(home.join(".gemini")).expect(".gemini");
                let mut text = serde_json::to_string_pretty(&settings).expect("settings");
                if self.gemini_commented {
                    text = format!("// The test bed's settings.\n{text}")
                        .replace("\"mcpServers\"", "/* its server */ \"mcpServers\"");
                }
                std::fs::write(home.join(".gemini/settings.json"), text).expect("settings.json");
                // Without -m a router asks the model which model to use first.
                cmd.arg(agent_bin("gemini"))
                    .args(["-m", "gemini-2.5-flash", "-p", prompt, "--yolo"])
                    .env_clear()
                    .env("GEMINI_CLI_TRUST_WORKSPACE", "true");
                if let Some(token) = self.gemini_google {
                    // Its own Code Assist endpoint: the fake provider, as the upstream.
                    cmd.env("CODE_ASSIST_ENDPOINT", base);
                    if token {
                        cmd.env("GOOGLE_GENAI_USE_GCA", "true").env(
                            "GOOGLE_CLOUD_ACCESS_TOKEN",
                            "ya29.fake-access-token-for-tests",
                        );
                    }
                } else if self.gemini_vertex {
                    cmd.env("GOOGLE_GENAI_USE_VERTEXAI", "true")
                        .env("GOOGLE_API_KEY", "fake-vertex-key-for-tests");
                } else {
                    cmd.env("GEMINI_API_KEY", "fake-gemini-key-for-tests");
                }
                if !self.gemini_env_auth && !self.gemini_vertex && self.gemini_google.is_none() {
                    // Signed in by its environment alone, it has no base URL of its own (one
                    // would make its sign-in "gateway"): the test points the run's upstream.
                    cmd.env("GOOGLE_GEMINI_BASE_URL", base);
                }
            }
            Agent::OpenCode => {
                assert_eq!(servers, Servers::ProjectFile, "opencode: its opencode.json");
                let (command, args) = self.server_entry(None);
                let mut line = vec![command];
                line.extend(args);
                // As its users write it: JSON with comments and a trailing comma.
                let config = format!(
                    "{{\n  // the test bed's server\n  \"mcp\": {{\"S\": {{\"type\": \"local\", \"command\": {}, \"timeout\": 60000}}}},\n}}\n",
                    serde_json::to_string(&line).expect("command")
                );
                std::fs::write(self.work().join("opencode.json"), config).expect("opencode.json");
                cmd.arg(agent_bin("opencode"))
                    .args(["run", "-m", &format!("anthropic/{OPENCODE_MODEL}"), prompt])
                    .env_clear()
                    .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-for-tests")
                    // The AI SDK's Anthropic provider reads its base URL here (with `/v1`).
                    .env("ANTHROPIC_BASE_URL", format!("{base}/v1"))
                    .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                    .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
            }
            Agent::Codex => {
                assert_eq!(
                    servers,
                    Servers::CommandLine,
                    "Codex has no project file here"
                );
                let (command, args) = self.server_entry(None);
                let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
                // Codex waits ~2 s for an optional MCP server before its first request, then
                // asks without its tools; a required one is waited for (and its failure is
                // an error, not a quiet "no tool").
                cmd.arg(agent_bin("codex"))
                    .args([
                        "exec",
                        "--skip-git-repo-check",
                        "--disable",
                        "apps",
                        "--disable",
                        "plugins",
                    ])
                    .args([
                        "-c",
                        "model=\"gpt-fake\"",
                        "-c",
                        "approval_policy=\"never\"",
                    ])
                    .args(["-c", "analytics.enabled=false"]);
                match &self.codex_login {
                    Some(auth) if auth.is_empty() => {}
                    Some(auth) => {
                        // `codex login` keeps its credentials here, readable by the user only.
                        let file = home.join("auth.json");
                        std::fs::write(&file, auth).expect("auth.json");
                        std::fs::set_permissions(
                            &file,
                            std::os::unix::fs::PermissionsExt::from_mode(0o600),
                        )
                        .expect("chmod auth.json");
                    }
                    None => {
                        cmd.args(["-c", "model_provider=\"fake\""]).arg("-c").arg(format!(
                            "model_providers.fake={{name=\"fake\",base_url=\"{base}/v1\",env_key=\"FAKE_KEY\",wire_api=\"responses\"}}"
                        ));
                    }
                }
                cmd.arg("-c")
                    .arg(format!(
                        "mcp_servers.S={{command={command:?},args=[{}],default_tools_approval_mode=\"approve\",required=true,startup_timeout_sec=60}}",
                        args.join(",")
                    ))
                    .arg(prompt)
                    .env_clear()
                    .env("CODEX_HOME", &home)
                    .env("FAKE_KEY", "sk-fake-key-for-tests");
            }
        }
        cmd.env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TERM", "dumb")
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .env("MCPTAPE_DIR", &self.mcptape_dir)
            .current_dir(self.work());
        cmd
    }

    /// `mcptape run` of `agent` to its end.
    fn run(
        &self,
        agent: Agent,
        servers: Servers,
        tape: &Path,
        mode: &[&str],
        base: &str,
        prompt: &str,
    ) -> RunOut {
        let cmd = self.command(agent, servers, tape, mode, base, prompt);
        let start = Instant::now();
        let out = run_with_timeout(cmd, AGENT_LIMIT);
        RunOut {
            agent,
            code: out.status.code(),
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
            secs: start.elapsed().as_secs_f64(),
        }
    }

    /// `mcptape ARGS…` with this bed's `MCPTAPE_DIR`, in the working folder.
    fn mt<I, A>(&self, args: I) -> Mt
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        Mt::new(args)
            .env("MCPTAPE_DIR", &self.mcptape_dir)
            .dir(self.work())
    }
}

// --- the tape ---------------------------------------------------------------------------------

/// A recorded whole run: `verify` intact, `lint` clean, two model calls (the first answered
/// with a call of the echo tool), the model and the server S declared, and S's conversation
/// holding the `tools/call` of `echo` and its answer.
#[track_caller]
fn check_tape(agent: Agent, tape: &Path) {
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
    let doc = show_json(tape);
    let all = doc["model_calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        all.len(),
        agent.model_calls(),
        "the model calls:\n{}",
        pretty(&doc["model_calls"])
    );
    let (provider, endpoint) = match agent {
        Agent::Claude | Agent::OpenCode => ("anthropic", "messages"),
        Agent::Codex => ("openai-responses", "responses"),
        Agent::Gemini => ("gemini", "streamGenerateContent"),
    };
    for c in &all {
        assert_eq!(c["provider"], provider, "{}", pretty(c));
        assert_eq!(c["endpoint"], endpoint, "{}", pretty(c));
        assert_eq!(c["status"], 200, "{}", pretty(c));
        assert_eq!(c["label"], "model", "{}", pretty(c));
        assert!(
            c["events"].as_u64().unwrap_or(0) > 0,
            "streamed: {}",
            pretty(c)
        );
    }
    // The two turns.
    let calls: Vec<&Value> = all
        .iter()
        .filter(|c| agent.turn_model().is_none_or(|m| c["model"] == m))
        .collect();
    assert_eq!(
        calls.len(),
        2,
        "two turns:\n{}",
        pretty(&doc["model_calls"])
    );
    let called: Vec<String> = calls[0]["summary"]["tool_calls"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        called.len() == 1 && called[0].contains("echo"),
        "the first answer called the echo tool: {}",
        pretty(calls[0])
    );
    assert!(
        calls[1]["summary"]["tool_calls"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "the second answer is the final text: {}",
        pretty(calls[1])
    );
    let servers: Vec<(String, String)> = doc["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|d| {
            (
                d["server"].as_str().unwrap_or_default().to_string(),
                d["transport"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        servers.contains(&("model".into(), "model_api".into()))
            && servers.contains(&("S".into(), "stdio".into())),
        "the model and S declared: {servers:?}"
    );
    let s_doc: Value = Mt::new(["show", "--json", "--server", "S"])
        .arg(tape)
        .run()
        .success()
        .json();
    let msgs = s_doc["messages"].as_array().expect("messages");
    let is = |m: &Value, dir: &str, kind: &str| {
        m["dir"] == dir && m["kind"] == kind && m["method"] == "tools/call" && m["target"] == "echo"
    };
    assert_eq!(
        msgs.iter().filter(|m| is(m, "c2s", "request")).count(),
        1,
        "one tools/call of echo on S:\n{}",
        pretty(&s_doc["messages"])
    );
    assert_eq!(
        msgs.iter().filter(|m| is(m, "s2c", "response")).count(),
        1,
        "its answer on S:\n{}",
        pretty(&s_doc["messages"])
    );
    let lines = tape_lines(tape);
    assert!(
        lines.iter().any(|l| l["type"] == "msg"
            && l["server"] == "S"
            && l["dir"] == "s2c"
            && l["msg"].to_string().contains(ECHO)),
        "S's answer, the echo, on the tape"
    );
}

// --- 1, 2: record, replay, playback ------------------------------------------------------------

/// Records `agent` with `mcptape run`, replays it (`--replay`: S from the tape, the model live),
/// then plays it back twice (`--playback`: offline, a sentinel on the upstream's port): the same
/// answer each time, no server started after the recording, the tape untouched.
fn record_replay_playback(agent: Agent) {
    let bed = Bed::new();
    let tape = bed.tape("run.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let servers = match agent {
        Agent::Gemini => Servers::UserScope,
        Agent::OpenCode => Servers::ProjectFile,
        _ => Servers::CommandLine,
    };
    let n = agent.model_calls();
    let run = |mode: &[&str], base: &str| bed.run(agent, servers, &tape, mode, base, PROMPT);

    let rec = run(&[], &fake.url);
    let answer = rec.ok();
    assert_contains(
        &rec.stderr,
        &format!(
            "mcptape run: {} exited 0; {n} model calls and MCP servers S on {}",
            agent.name(),
            tape.display()
        ),
    );
    assert_eq!(
        bed.starts(),
        1,
        "recording started S once:\n{}",
        rec.console()
    );
    assert!(
        !rec.stderr.contains("sent no model request"),
        "{}",
        rec.console()
    );
    let posts = fake.posts();
    assert_eq!(posts.len(), n, "the model requests upstream: {posts:#?}");
    if agent == Agent::Gemini {
        let settings = bed.home().join(".gemini/settings.json");
        assert_contains(
            &rec.stderr,
            &format!("mcptape run: put back {}", settings.display()),
        );
        let now = std::fs::read_to_string(&settings).expect("settings.json");
        assert!(!now.contains("--join"), "put back: {now}");
    }
    if agent == Agent::OpenCode {
        let project = std::fs::read_to_string(bed.work().join("opencode.json")).expect("file");
        assert!(
            project.contains("// the test bed's server") && !project.contains("--join"),
            "opencode.json untouched: {project}"
        );
    }
    check_tape(agent, &tape);
    let taped = std::fs::read(&tape).expect("tape");

    let replay = run(&["--replay"], &fake.url);
    assert_eq!(
        without_wall_time(&replay.ok()),
        without_wall_time(&answer),
        "replay answered as recorded:\n{}",
        replay.console()
    );
    assert_contains(
        &replay.stderr,
        &format!(
            "mcptape run: {} exited 0; MCP servers S served from {}, the model live",
            agent.name(),
            tape.display()
        ),
    );
    assert_eq!(
        bed.starts(),
        1,
        "--replay started no server:\n{}",
        replay.console()
    );
    assert_eq!(fake.posts().len(), 2 * n, "--replay: the model live");
    assert!(
        std::fs::read(&tape).expect("tape") == taped,
        "--replay left the tape as it was"
    );

    let port = fake.port();
    let url = fake.url.clone();
    fake.stop();
    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    for round in 1..=2 {
        let play = run(&["--playback"], &url);
        assert_eq!(
            play.ok(),
            answer,
            "playback {round} answered exactly as recorded:\n{}",
            play.console()
        );
        assert_contains(
            &play.stderr,
            &format!(
                "mcptape run: {} exited 0; offline from {}: {n} model call{} served, 0 missed, MCP servers S from the tape",
                agent.name(),
                tape.display(),
                if n == 1 { "" } else { "s" }
            ),
        );
        assert_eq!(bed.starts(), 1, "--playback {round} started no server");
        let reached = sentinel.log();
        assert!(
            reached.is_empty(),
            "--playback {round} reached the upstream's port: {reached:#?}"
        );
        assert!(
            std::fs::read(&tape).expect("tape") == taped,
            "--playback left the tape as it was"
        );
    }
    assert!(sentinel.stop().is_empty());
}

#[test]
fn claude_code_is_recorded_replayed_and_played_back_offline() {
    record_replay_playback(Agent::Claude);
}

/// opencode's servers are in its project `opencode.json` (with comments): they and its model
/// are pointed by the inline config `OPENCODE_CONFIG_CONTENT`, nothing rewritten in place.
#[test]
fn opencode_is_recorded_replayed_and_played_back_offline() {
    record_replay_playback(Agent::OpenCode);
}

/// Claude Code whose model base URL is set in its settings (`env.ANTHROPIC_BASE_URL`, as a
/// gateway's users set it), which outrank the environment mcptape points it with: recorded
/// through mcptape against that URL, and played back offline. (Its model calls went to the
/// gateway directly, and the tape held none.)
#[test]
fn claude_code_with_its_base_url_in_its_settings_is_recorded_and_played_back() {
    let mut bed = Bed::new();
    bed.claude_settings_base = true;
    claude_recorded_and_played_back(&bed, "claude-settings.jsonl", |_| {});
}

/// Claude Code in `bed` recorded through mcptape against the fake provider (2 model calls,
/// `recorded` checking what the provider got), then played back offline with the same answer.
fn claude_recorded_and_played_back(bed: &Bed, tape: &str, recorded: impl FnOnce(&[Value])) {
    let tape = bed.tape(tape);
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Claude, Servers::CommandLine, &tape, &fake.url);
    let rec = run(&[]);
    let answer = rec.ok();
    assert_contains(
        &rec.stderr,
        "mcptape run: Claude Code exited 0; 2 model calls and MCP servers S on",
    );
    let posts = fake.posts();
    assert_eq!(posts.len(), 2, "{}", rec.console());
    recorded(&posts);
    check_tape(Agent::Claude, &tape);
    let play = run(&["--playback"]);
    assert_eq!(play.ok(), answer, "{}", play.console());
    assert_contains(&play.stderr, "2 model calls served, 0 missed");
    assert_eq!(fake.posts().len(), 2, "playback asked the model nothing");
}

/// Claude Code on Vertex AI (`CLAUDE_CODE_USE_VERTEX`; its Google sign-in skipped, as behind
/// a gateway), which asks `ANTHROPIC_VERTEX_BASE_URL` and not `ANTHROPIC_BASE_URL`: pointed
/// with that one, recorded (Vertex's `…/publishers/anthropic/models/M:streamRawPredict`), and
/// played back offline. (It was not pointed: its model calls went straight to its base URL
/// and the tape held none.)
#[test]
fn claude_code_on_vertex_ai_is_recorded_and_played_back() {
    let mut bed = Bed::new();
    bed.claude_vertex = true;
    claude_recorded_and_played_back(&bed, "claude-vertex.jsonl", |posts| {
        let vertex = "/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/";
        assert!(
            posts.iter().all(|p| p["path"]
                .as_str()
                .is_some_and(|p| p.starts_with(vertex) && p.ends_with(":streamRawPredict"))),
            "Vertex's paths: {posts:#?}"
        );
    });
}

#[test]
fn codex_is_recorded_replayed_and_played_back_offline() {
    record_replay_playback(Agent::Codex);
}

/// Codex signed in with `codex login --with-api-key` (the key in `auth.json`, none in the
/// environment) and its built-in `openai` provider: recorded through mcptape with the key
/// from `auth.json` on every model request, none of it on the tape, and the user's
/// `auth.json` left as it was. (mcptape spelled the built-in out with `env_key =
/// "OPENAI_API_KEY"`, and Codex stopped at once: "Missing environment variable".)
#[test]
fn codex_signed_in_with_codex_login_is_recorded_with_its_own_credentials() {
    const KEY: &str = "sk-proj-codex-login-key-for-tests-0123456789";
    let mut bed = Bed::new();
    let auth = format!("{{\n  \"OPENAI_API_KEY\": \"{KEY}\"\n}}");
    bed.codex_login = Some(auth.clone());
    let tape = bed.tape("login.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    // The built-in provider's API is api.openai.com: the recording is pointed at the fake.
    let rec = bed.run(
        Agent::Codex,
        Servers::CommandLine,
        &tape,
        &["--upstream", &fake.url],
        &fake.url,
        PROMPT,
    );
    rec.ok();
    let posts = fake.posts();
    assert_eq!(posts.len(), 2, "two model requests upstream: {posts:#?}");
    for p in &posts {
        assert_eq!(p["path"], "/v1/responses", "{p:#}");
        let auth = p["headers"].as_object().and_then(|h| {
            h.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
                .and_then(|(_, v)| v.as_str())
        });
        assert_eq!(
            auth,
            Some(format!("Bearer {KEY}").as_str()),
            "the key from auth.json reached the API: {:#}",
            p["headers"]
        );
    }
    check_tape(Agent::Codex, &tape);
    let taped = std::fs::read_to_string(&tape).expect("tape");
    assert!(!taped.contains(KEY), "the key is not on the tape");
    let file = bed.home().join("auth.json");
    assert!(
        !std::fs::symlink_metadata(&file)
            .expect("auth.json")
            .file_type()
            .is_symlink(),
        "the user's auth.json is still a file"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("auth.json"), auth);

    // Played back offline on a machine with no login at all (CI): the run needs no key.
    bed.codex_login = Some(String::new());
    let play = bed.run(
        Agent::Codex,
        Servers::CommandLine,
        &tape,
        &["--playback"],
        &fake.url,
        PROMPT,
    );
    assert_eq!(
        without_wall_time(&play.ok()),
        without_wall_time(&rec.answer()),
        "{}",
        play.console()
    );
    assert_eq!(fake.posts().len(), 2, "playback asked the model nothing");
}

/// Gemini CLI signed in by `GEMINI_API_KEY` alone, its settings naming no sign-in (a headless
/// setup): recorded and played back. Gemini CLI reads a `GOOGLE_GEMINI_BASE_URL` in its
/// environment as the sign-in "gateway" when its settings name none, and refuses it ("Invalid
/// auth method selected."), which is what every such run did under mcptape.
#[test]
fn gemini_cli_signed_in_by_its_environment_alone_is_recorded_and_played_back() {
    let mut bed = Bed::new();
    bed.gemini_env_auth = true;
    let settings = bed.home().join(".gemini/settings.json");
    gemini_recorded_against_upstream_and_played_back(&bed, "gemini-env.jsonl", |_| {
        let after = std::fs::read_to_string(&settings).expect("settings.json");
        assert!(
            !after.contains("selectedType") && !after.contains("--join"),
            "the settings are put back: {after}"
        );
    });
}

/// Gemini CLI on Vertex AI (express mode: `GOOGLE_GENAI_USE_VERTEXAI` and `GOOGLE_API_KEY`),
/// which reads its own base URL, `GOOGLE_VERTEX_BASE_URL`: pointed with that one, recorded
/// (Vertex's `/v1beta1/publishers/google/models/M:streamGenerateContent` path) and played back.
/// (It was not pointed: its model calls went to Vertex directly and the tape held none.)
#[test]
fn gemini_cli_on_vertex_ai_is_recorded_and_played_back() {
    let mut bed = Bed::new();
    bed.gemini_vertex = true;
    gemini_recorded_against_upstream_and_played_back(&bed, "gemini-vertex.jsonl", |posts| {
        assert!(
            posts.iter().all(|p| p["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/v1beta1/publishers/google/models/"))),
            "Vertex's paths: {posts:#?}"
        );
    });
}

/// Gemini CLI with its built-in skills on, as it comes: it lists them (in its system prompt,
/// and in the enum of its `activate_skill` tool) in an order that changes from run to run.
/// Recorded once and played back three times, each time offline and with no miss.
#[test]
fn gemini_cli_with_its_skills_on_plays_back_whatever_order_it_lists_them_in() {
    let mut bed = Bed::new();
    bed.gemini_skills = true;
    let tape = bed.tape("gemini-skills.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Gemini, Servers::UserScope, &tape, &fake.url);
    let rec = run(&[]);
    let answer = rec.ok();
    assert_eq!(fake.posts().len(), 2, "{}", rec.console());
    for round in 1..=3 {
        let play = run(&["--playback"]);
        assert_eq!(play.ok(), answer, "playback {round}:\n{}", play.console());
        assert_contains(&play.stderr, "2 model calls served, 0 missed");
    }
    assert_eq!(fake.posts().len(), 2, "playback asked the model nothing");
}

/// Gemini CLI whose settings hold comments, which it reads (through strip-json-comments): its
/// server goes through mcptape, the run is recorded and played back, and the settings are put
/// back with their comments. (`run` refused such a file as not JSON.)
#[test]
fn gemini_cli_with_comments_in_its_settings_is_recorded_and_played_back() {
    let mut bed = Bed::new();
    bed.gemini_commented = true;
    let tape = bed.tape("gemini-commented.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Gemini, Servers::UserScope, &tape, &fake.url);
    let settings = bed.home().join(".gemini/settings.json");
    let rec = run(&[]);
    let answer = rec.ok();
    assert_contains(
        &rec.stderr,
        "mcptape run: Gemini CLI exited 0; 2 model calls and MCP servers S on",
    );
    let after = std::fs::read_to_string(&settings).expect("settings.json");
    assert!(
        after.starts_with("// The test bed's settings.\n") && after.contains("/* its server */"),
        "put back with its comments: {after}"
    );
    let play = run(&["--playback"]);
    assert_eq!(play.ok(), answer, "{}", play.console());
    assert_eq!(fake.posts().len(), 2, "playback asked the model nothing");
}

/// A server Claude Code's settings deny by its command (`deniedMcpServers`, `serverCommand`)
/// stays denied under `run`: its entry is left as it is, not rewritten into a command the
/// policy would no longer recognise.
#[test]
fn claude_code_denying_a_server_by_its_command_still_denies_it_under_run() {
    let mut bed = Bed::new();
    bed.claude_policy_on_s = Some("deniedMcpServers");
    let tape = bed.tape("claude-denied.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Claude, Servers::CommandLine, &tape, &fake.url);
    let rec = run(&[]);
    assert_eq!(rec.code, Some(0), "{}", rec.console());
    assert_eq!(
        rec.claude_json()["result"],
        "FINAL: no tool",
        "S was denied before run; under it too:\n{}",
        rec.console()
    );
    assert_contains(&rec.stderr, "deniedMcpServers");
    assert!(
        std::fs::read_to_string(&bed.marker)
            .unwrap_or_default()
            .is_empty(),
        "S never started"
    );
}

/// A server Claude Code's settings allow by its command alone (`allowedMcpServers` naming only
/// `serverCommand`s) still runs under `run`: rewritten to go through mcptape, its command would
/// match no rule and Claude Code would refuse it, so its entry is left as it is (and said so).
#[test]
fn claude_code_allowing_a_server_by_its_command_still_runs_it_under_run() {
    let mut bed = Bed::new();
    bed.claude_policy_on_s = Some("allowedMcpServers");
    let tape = bed.tape("claude-allowed.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Claude, Servers::CommandLine, &tape, &fake.url);
    let rec = run(&[]);
    rec.ok();
    assert_contains(
        &rec.stderr,
        "allowedMcpServers allows stdio servers by their command",
    );
    assert!(bed.starts() > 0, "S started, as the policy allows it");
    assert_eq!(fake.posts().len(), 2, "{}", rec.console());
}

/// Gemini CLI in `bed` recorded with `run --upstream` at the fake provider (its own base URL
/// left unset, as its users have it), `recorded` checking the model requests the provider got
/// (and what else), then played back with the same answer and no model request.
fn gemini_recorded_against_upstream_and_played_back(
    bed: &Bed,
    tape: &str,
    recorded: impl FnOnce(&[Value]),
) {
    let tape = bed.tape(tape);
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let run = bed.runner(Agent::Gemini, Servers::UserScope, &tape, &fake.url);
    let rec = run(&["--upstream", &fake.url]);
    let answer = rec.ok();
    let posts = fake.posts();
    assert_eq!(posts.len(), 2, "{}", rec.console());
    recorded(&posts);
    check_tape(Agent::Gemini, &tape);
    let play = run(&["--playback"]);
    assert_eq!(play.ok(), answer, "{}", play.console());
    assert_eq!(fake.posts().len(), 2, "playback asked the model nothing");
}

/// Gemini CLI's servers are in its user settings (`~/.gemini/settings.json`), rewritten in
/// place for each run and put back.
#[test]
fn gemini_cli_is_recorded_replayed_and_played_back_offline() {
    record_replay_playback(Agent::Gemini);
}

/// The Code Assist calls a fake provider answered: (its model calls, its setup calls).
fn code_assist_posts(fake: &Fake) -> (Vec<Value>, Vec<Value>) {
    let posts = fake.posts();
    let of =
        |api: &str| -> Vec<Value> { posts.iter().filter(|p| p["api"] == api).cloned().collect() };
    (of("codeassist"), of("codeassist-setup"))
}

/// Gemini CLI signed in with Google (`oauth-personal`, a cached login in
/// `~/.gemini/oauth_creds.json`) asks Code Assist (`${CODE_ASSIST_ENDPOINT}/v1internal:…`):
/// `run` points `CODE_ASSIST_ENDPOINT` at the proxy, its own endpoint the upstream. Recorded
/// (the two turns taped as Gemini calls, unwrapped from Code Assist's envelope; its setup calls
/// — `loadCodeAssist`, `retrieveUserQuota`, `listExperiments` — taped beside them), replayed
/// with the model live, then played back offline from the cached login alone, twice, with a
/// sentinel on the upstream's port that nothing reaches. Recording and replay give it a token
/// (`GOOGLE_CLOUD_ACCESS_TOKEN`): in this namespace it could not check its cached login with
/// Google; playback needs none, `run` gives it a placeholder. (Before, its calls went straight
/// to Code Assist: the tape held no model call.)
#[test]
fn gemini_cli_signed_in_with_google_is_recorded_replayed_and_played_back_offline() {
    let mut bed = Bed::new();
    bed.gemini_google = Some(true);
    let tape = bed.tape("gemini-google.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let gemini = bed.home().join(".gemini");
    let files = || -> Vec<(PathBuf, Vec<u8>)> {
        ["settings.json", "oauth_creds.json"]
            .iter()
            .map(|f| {
                let p = gemini.join(f);
                let b = std::fs::read(&p).unwrap_or_default();
                (p, b)
            })
            .collect()
    };
    let untouched = |before: &[(PathBuf, Vec<u8>)], what: &str| {
        for (p, b) in before {
            assert!(
                std::fs::read(p).unwrap_or_default() == *b,
                "{what}: {} changed:\n{}",
                p.display(),
                std::fs::read_to_string(p).unwrap_or_default()
            );
        }
    };
    // Each run makes the home anew: the files as the bed writes them, kept to compare.
    let run_on = |tape: &Path, mode: &[&str], base: &str, bed: &Bed| {
        let cmd = bed.command(Agent::Gemini, Servers::UserScope, tape, mode, base, PROMPT);
        let before = files();
        let start = Instant::now();
        let out = run_with_timeout(cmd, AGENT_LIMIT);
        let out = RunOut {
            agent: Agent::Gemini,
            code: out.status.code(),
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
            secs: start.elapsed().as_secs_f64(),
        };
        untouched(&before, &out.console());
        out
    };
    let run = |mode: &[&str], base: &str, bed: &Bed| run_on(&tape, mode, base, bed);

    let rec = run(&[], &fake.url, &bed);
    let answer = rec.ok();
    assert!(
        !rec.stderr.contains("sent no model request"),
        "{}",
        rec.console()
    );
    let (turns, setup) = code_assist_posts(&fake);
    assert_eq!(turns.len(), 2, "the two turns upstream: {turns:#?}");
    assert!(
        turns
            .iter()
            .all(|t| t["path"] == "/v1internal:streamGenerateContent?alt=sse"
                && t["body"]["project"] == "fake-project"
                && t["body"]["request"]["contents"].is_array()),
        "Code Assist's wrapped requests: {turns:#?}"
    );
    let setup_paths: Vec<&str> = setup.iter().filter_map(|p| p["path"].as_str()).collect();
    assert!(
        setup_paths.contains(&"/v1internal:loadCodeAssist"),
        "its setup: {setup_paths:?}"
    );

    // The tape: intact, lint-clean, the turns as Gemini calls, the setup calls beside them.
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("intact");
    Mt::new(["lint"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("clean");
    let doc = show_json(&tape);
    let all = doc["model_calls"].as_array().cloned().unwrap_or_default();
    let calls: Vec<&Value> = all.iter().filter(|c| c["provider"] == "gemini").collect();
    assert_eq!(
        calls.len(),
        2,
        "two turns:\n{}",
        pretty(&doc["model_calls"])
    );
    for c in &calls {
        assert_eq!(c["endpoint"], "streamGenerateContent", "{}", pretty(c));
        assert_eq!(c["model"], "gemini-2.5-flash", "{}", pretty(c));
        assert_eq!(c["status"], 200, "{}", pretty(c));
        assert!(
            c["summary"]["input_tokens"].as_u64().is_some(),
            "{}",
            pretty(c)
        );
    }
    assert_eq!(
        calls[0]["summary"]["tool_calls"],
        json!(["mcp_S_echo"]),
        "the first answer called echo, read through the envelope: {}",
        pretty(calls[0])
    );
    assert!(
        calls[1]["summary"]["tool_calls"].is_null(),
        "{}",
        pretty(calls[1])
    );
    let others: Vec<&str> = all
        .iter()
        .filter(|c| c["provider"] != "gemini")
        .filter_map(|c| c["endpoint"].as_str())
        .collect();
    assert_eq!(
        others.len(),
        setup.len(),
        "every setup call taped: {others:?} vs {setup_paths:?}"
    );
    assert!(
        others.iter().all(|e| e.starts_with("/v1internal:")),
        "{others:?}"
    );
    eprintln!(
        "Code Assist, recorded in {:.2} s: {} calls on the tape, the setup calls {setup_paths:?}",
        rec.secs,
        all.len()
    );
    // The summary counts the agent's model calls, its turns; the setup calls apart (it said
    // "7 model calls" for 2 turns and 5 setup calls).
    assert_contains(
        &rec.stderr,
        &format!(
            "mcptape run: Gemini CLI exited 0; 2 model calls ({} Code Assist setup calls beside them) and MCP servers S on {}",
            others.len(),
            tape.display()
        ),
    );
    let s_doc: Value = Mt::new(["show", "--json", "--server", "S"])
        .arg(&tape)
        .run()
        .success()
        .json();
    assert!(
        s_doc["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| m["method"] == "tools/call" && m["target"] == "echo"),
        "S's tools/call on the tape"
    );
    let taped = std::fs::read(&tape).expect("tape");

    let replay = run(&["--replay"], &fake.url, &bed);
    assert_eq!(replay.ok(), answer, "{}", replay.console());
    assert_eq!(
        code_assist_posts(&fake).0.len(),
        4,
        "--replay: the model live"
    );
    assert_eq!(bed.starts(), 1, "--replay started no server");

    // Offline: the cached login alone, the upstream a sentinel.
    bed.gemini_google = Some(false);
    let port = fake.port();
    let url = fake.url.clone();
    fake.stop();
    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    for round in 1..=2 {
        let play = run(&["--playback"], &url, &bed);
        assert_eq!(play.ok(), answer, "playback {round}:\n{}", play.console());
        eprintln!("Code Assist, playback {round} in {:.2} s", play.secs);
        // The two turns served; the setup calls (as many as it asked, by endpoint) apart.
        let summary = play
            .stderr
            .lines()
            .find(|l| l.contains(" model calls served"))
            .unwrap_or_else(|| panic!("no playback summary:\n{}", play.console()));
        assert_contains(summary, ": 2 model calls served (");
        assert_contains(
            summary,
            " Code Assist setup calls beside them), 0 missed, MCP servers S from the tape",
        );
        assert!(
            sentinel.log().is_empty(),
            "playback {round} reached the upstream"
        );
        assert_eq!(bed.starts(), 1, "--playback started no server");
        assert!(
            std::fs::read(&tape).expect("tape") == taped,
            "the tape as it was"
        );
    }
    assert!(sentinel.stop().is_empty());

    // The HTML report's header counts the turns as model calls, the setup calls apart.
    let page = bed.tape("gemini-google.html");
    Mt::new(["report"])
        .arg(&tape)
        .arg("-o")
        .arg(&page)
        .run()
        .success();
    let meta = probe(&page, &[step("texts", "#h-meta span")])
        .clean()
        .texts(0);
    let setup_count = format!("{} Code Assist setup calls", others.len());
    assert!(
        meta.iter().any(|m| m == "2 model calls") && meta.contains(&setup_count),
        "the report's header: {meta:?}"
    );

    // A second run, recorded and diffed with the first: the same two model requests, each
    // run's Code Assist setup calls counted beside them, not among them, and not compared (how
    // often it asks its quota depends on timing), as `run` counts them. (Before, diff said
    // "all 7 model requests", and runs that asked their quota a different number of times
    // were a structural drift.)
    bed.gemini_google = Some(true);
    let fake = Fake::start(&bed.net, bed.path(), "fake-again", &[]);
    let again = bed.tape("gemini-google-again.jsonl");
    run_on(&again, &[], &fake.url, &bed).ok();
    fake.stop();
    let setup_again = show_json(&again)["model_calls"].as_array().map_or(0, |c| {
        c.iter().filter(|c| c["provider"] != "gemini").count()
    });
    let beside = if setup_again == others.len() {
        format!("({setup_again} Code Assist setup calls beside them in each)")
    } else {
        format!(
            "({} Code Assist setup calls beside them in A, {setup_again} in B)",
            others.len()
        )
    };
    // The MCP side may differ: Gemini CLI lists the server's tools once or twice, as timing
    // has it (a `tools/list` only in A is a structural drift, exit 2). The model side is what
    // is asked here, in whichever of diff's two wordings.
    let diffed = Mt::new(["diff"]).arg(&tape).arg(&again).run();
    let said = match diffed.code() {
        0 => format!(" exchanges and all 2 model requests {beside}\n"),
        1 | 2 => format!("model calls: the same 2 requests {beside}\n"),
        _ => panic!("diff failed:\n{}", diffed.console()),
    };
    assert_contains(&diffed.stdout, &said);
    let report: Value = Mt::new(["diff", "--format", "json"])
        .arg(&tape)
        .arg(&again)
        .run()
        .json();
    assert_eq!(
        report["model"],
        json!({"calls_a": 2, "calls_b": 2, "setup_a": others.len(), "setup_b": setup_again}),
        "{}",
        pretty(&report)
    );
}

// --- 3: a project .mcp.json --------------------------------------------------------------------

/// The journal of files `run` rewrote in place (under `MCPTAPE_DIR`).
fn journal(bed: &Bed) -> PathBuf {
    bed.mcptape_dir.join("run-restore.json")
}

/// A project `.mcp.json` with S (copying the file aside as it starts), written by hand: tabs,
/// odd spacing, a key order and non-ASCII text that a JSON writer would not reproduce, no
/// final newline: only the original bytes put back compare equal. Its path and text.
fn hand_written_project_file(bed: &Bed) -> (PathBuf, String) {
    let project = bed.work().join(".mcp.json");
    let (command, args) = bed.server_entry(Some(&project));
    let original = format!(
        "{{\t\"note\" :  \"ünïcödé – kept byte for byte\",\n  \"mcpServers\": {{ \"S\" : {{\"args\": {}, \"command\": {:?},   \"type\": \"stdio\"}} }}\n}}",
        serde_json::to_string(&args).unwrap(),
        command
    );
    serde_json::from_str::<Value>(&original).expect("the project file is JSON");
    std::fs::write(&project, &original).expect(".mcp.json");
    (project, original)
}

/// Waits until S has been started `n` times in all, the run still going.
fn wait_for_starts(bed: &Bed, run: &mut Bg, n: usize) {
    let start = Instant::now();
    while bed.starts() < n {
        if let Some(st) = run.exited() {
            panic!(
                "the run ended ({st}) before its server started:\n{}\n{}",
                run.stdout(),
                run.stderr()
            );
        }
        assert!(
            start.elapsed() < PATIENCE,
            "S was not started:\n{}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_project_mcp_json_is_rewritten_for_the_run_and_put_back_also_after_kill_9() {
    let bed = Bed::new();
    let backup = bed.work().join(".mcp.json.mcptape-run-backup");
    let seen = PathBuf::from(format!("{}.copy", bed.marker.display()));
    let (project, original) = hand_written_project_file(&bed);
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);

    // A run to its end: the agent sees the rewritten file, the original is back afterwards.
    let tape = bed.tape("project.jsonl");
    let rec = bed.run(
        Agent::Claude,
        Servers::ProjectFile,
        &tape,
        &[],
        &fake.url,
        PROMPT,
    );
    rec.ok();
    assert_eq!(bed.starts(), 1, "S started once:\n{}", rec.console());
    let during = std::fs::read_to_string(&seen).expect("the file as S started");
    assert_ne!(during, original, "rewritten during the run");
    let rewritten: Value = serde_json::from_str(&during).expect("rewritten JSON");
    let entry = &rewritten["mcpServers"]["S"];
    assert_eq!(entry["command"], s(bin()), "{during}");
    assert_eq!(entry["args"][0], "record", "{during}");
    assert_eq!(entry["args"][1], "--join", "{during}");
    assert_eq!(
        rewritten["note"], "ünïcödé – kept byte for byte",
        "other keys kept: {during}"
    );
    assert_eq!(
        std::fs::read_to_string(&project).unwrap(),
        original,
        "put back byte for byte"
    );
    assert!(!backup.exists(), "no backup left");
    assert!(!journal(&bed).exists(), "nothing left in the journal");
    assert_contains(
        &rec.stderr,
        &format!("mcptape run: put back {}", project.display()),
    );
    check_tape(Agent::Claude, &tape);

    // kill -9 of mcptape while the agent runs (its server just started): the file stays
    // rewritten, the original beside it, and `run --restore` puts it back.
    let killed_tape = bed.tape("killed.jsonl");
    let mut cmd = bed.command(
        Agent::Claude,
        Servers::ProjectFile,
        &killed_tape,
        &[],
        &fake.url,
        PROMPT,
    );
    cmd.process_group(0);
    let mut run = Bg::spawn("killed-run", cmd, bed.path());
    let pgid = run.pid();
    wait_for_starts(&bed, &mut run, 2);
    let (st, _) = run.stop(libc::SIGKILL);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL),
        "mcptape was killed mid-run, not ended: {st}\n{}",
        run.stderr()
    );
    // The agent and its servers (mcptape's process group, ours) go too.
    // SAFETY: kill(2) of the process group this test started.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let left = std::fs::read_to_string(&project).expect(".mcp.json");
    assert_ne!(left, original, "left rewritten by the killed run");
    assert_contains(&left, "--join");
    assert_eq!(
        std::fs::read_to_string(&backup).expect("the backup beside it"),
        original,
        "the original kept as {}",
        backup.display()
    );
    let listed: Vec<PathBuf> =
        serde_json::from_str(&std::fs::read_to_string(journal(&bed)).expect("journal"))
            .expect("journal JSON");
    assert_eq!(
        listed,
        std::slice::from_ref(&project),
        "the journal lists it"
    );

    bed.mt(["run", "--restore"])
        .run()
        .success()
        .stderr_contains(&format!("mcptape run: put back {}", project.display()));
    assert_eq!(
        std::fs::read(&project).unwrap(),
        original.as_bytes(),
        "--restore put the original back byte for byte"
    );
    assert!(!backup.exists(), "no backup left");
    assert!(!journal(&bed).exists(), "the journal is done with");
    bed.mt(["run", "--restore"])
        .run()
        .success()
        .stderr_contains("mcptape run: nothing to put back");
    assert_eq!(std::fs::read(&project).unwrap(), original.as_bytes());
    drop(fake);
}

/// kill -9 of the agent (not of mcptape) while it runs, its server just started: mcptape
/// sees it die, puts the project file back byte for byte, closes the tape intact and exits
/// with the agent's status (128 + 9).
#[test]
fn a_project_mcp_json_is_put_back_when_the_agent_is_killed() {
    let bed = Bed::new();
    let (project, original) = hand_written_project_file(&bed);
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let tape = bed.tape("agent-killed.jsonl");
    let cmd = bed.command(
        Agent::Claude,
        Servers::ProjectFile,
        &tape,
        &[],
        &fake.url,
        PROMPT,
    );
    let mut run = Bg::spawn("agent-killed", cmd, bed.path());
    wait_for_starts(&bed, &mut run, 1);
    // mcptape's one child is the agent (its servers are the agent's children); a thread's
    // children are listed under that thread.
    let mcptape = run.pid();
    let mut children = String::new();
    for t in std::fs::read_dir(format!("/proc/{mcptape}/task")).expect("mcptape's threads") {
        let t = t.expect("a thread").path();
        children += &std::fs::read_to_string(t.join("children")).unwrap_or_default();
    }
    let agent: Vec<i32> = children
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(agent.len(), 1, "one child, the agent: {children:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", agent[0])).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("claude"),
        "the child is Claude Code: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    // SAFETY: kill(2) of a process this test's run started.
    assert_eq!(unsafe { libc::kill(agent[0], libc::SIGKILL) }, 0);
    let start = Instant::now();
    let st = loop {
        if let Some(st) = run.exited() {
            break st;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "mcptape did not end after its agent was killed:\n{}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = run.stderr();
    assert_eq!(
        st.code(),
        Some(128 + 9),
        "the agent's status: {st}\n{stderr}"
    );
    assert_eq!(
        std::fs::read(&project).unwrap(),
        original.as_bytes(),
        "put back byte for byte:\n{stderr}"
    );
    assert!(!journal(&bed).exists(), "nothing left in the journal");
    assert_contains(
        &stderr,
        &format!("mcptape run: put back {}", project.display()),
    );
    assert_contains(&stderr, "mcptape run: Claude Code exited 137;");
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("intact");
    let end = tape_lines(&tape)
        .into_iter()
        .rfind(|l| l["type"] == "end")
        .expect("the tape closed");
    assert_eq!(end["reason"], "the agent exited (137)", "{end}");
    drop(fake);
}

/// Every file under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

// --- 3c: two runs diffed -----------------------------------------------------------------------

/// Runs of real agents diffed: two of Claude Code asked the same are the same (its session
/// ids and dates are volatile); asked something else, the first model request is named with
/// the text that differs; Claude Code against Codex CLI, the first request (another API).
#[test]
fn two_agent_runs_diffed_name_the_first_model_request_that_diverged() {
    let bed = Bed::new();
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let record = |agent: Agent, name: &str, prompt: &str| {
        let tape = bed.tape(name);
        bed.run(agent, Servers::CommandLine, &tape, &[], &fake.url, prompt)
            .ok();
        tape
    };
    let a = record(Agent::Claude, "a.jsonl", PROMPT);
    let again = record(Agent::Claude, "again.jsonl", PROMPT);
    let other = record(
        Agent::Claude,
        "other.jsonl",
        "Call the echo tool now, then reply with its result.",
    );
    let codex = record(Agent::Codex, "codex.jsonl", PROMPT);
    let diff = |b: &Path| Mt::new(["diff"]).arg(&a).arg(b).run();
    // The model calls as the JSON report has them, the exit code `code`.
    let model = |b: &Path, flags: &[&str], code: i32| {
        let r: DiffReport = Mt::new(["diff", "--format", "json"])
            .args(flags)
            .arg(&a)
            .arg(b)
            .run()
            .status(code)
            .json();
        r.model
    };
    let text_of = |v: &Option<Value>| v.as_ref().map(Value::to_string).unwrap_or_default();

    let same = model(&again, &[], 0).expect("the model calls compared");
    assert_eq!((same.calls_a, same.calls_b, &same.first), (2, 2, &None));
    let same = diff(&again).success();
    assert_contains(&same.stdout, " exchanges and all 2 model requests");
    // One MCP server compared, by its label: the model calls are left out then.
    assert_eq!(model(&again, &["--server", "S"], 0), None);
    let server = Mt::new(["diff", "--server", "S"])
        .arg(&a)
        .arg(&again)
        .run()
        .success();
    assert!(
        server.stdout.starts_with(&format!(
            "same: {} server S and {} server S agree on all ",
            s(&a),
            s(&again)
        )) && !server.stdout.contains("model"),
        "{}",
        server.console()
    );

    // The first request: the prompt, A's and B's.
    let m = model(&other, &[], 1).expect("the model calls compared");
    assert_eq!((m.calls_a, m.calls_b), (2, 2), "{m:#?}");
    let first = m.first.expect("a model request that diverged");
    assert_eq!(
        (first.position, first.endpoint.as_str(), &first.endpoint_b),
        (1, "messages", &None),
        "{first:#?}"
    );
    assert!(
        first.line_a.is_some() && first.line_b.is_some(),
        "{first:#?}"
    );
    assert!(
        first
            .changes
            .iter()
            .any(|c| text_of(&c.recorded).contains("once") && text_of(&c.observed).contains("now")),
        "the text that differs, both sides: {first:#?}"
    );
    let changed = diff(&other).status(1);
    let line = changed
        .stdout
        .lines()
        .find(|l| l.starts_with("first model request that diverged: call 1 (messages), A line "))
        .unwrap_or_else(|| panic!("the first model request named:\n{}", changed.stdout));
    assert_contains(line, "(2 model calls in A, 2 in B)");

    // Their MCP sides differ too (another protocol version, another tool surface): exit 2.
    let first = model(&codex, &[], 2)
        .and_then(|m| m.first)
        .expect("a model request that diverged");
    assert_eq!(
        (
            first.position,
            first.endpoint.as_str(),
            first.endpoint_b.as_deref()
        ),
        (1, "messages", Some("responses")),
        "{first:#?}"
    );
    assert_contains(
        &diff(&codex).status(2).stdout,
        "first model request that diverged: call 1 (messages in A, responses in B), A line ",
    );
    drop(fake);
}

// --- 3b: Claude Code's user and local scope ---------------------------------------------------

/// S in Claude Code's user scope (`.claude.json` of its config folder): recorded through a
/// borrowed config folder, the real state file untouched while the agent runs (S copies it
/// aside as it starts) and afterwards holding Claude Code's own writes with S as it was; then
/// played back offline with S in the local scope (`projects["<working folder>"]`).
#[test]
fn claude_user_and_local_scope_servers_go_through_a_borrowed_config_folder() {
    let bed = Bed::new();
    let state = bed.home().join(".claude/.claude.json");
    let seen = PathBuf::from(format!("{}.copy", bed.marker.display()));
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let tape = bed.tape("user.jsonl");
    let rec = bed.run(
        Agent::Claude,
        Servers::UserScope,
        &tape,
        &[],
        &fake.url,
        PROMPT,
    );
    let answer = rec.ok();
    assert_eq!(bed.starts(), 1, "S started once:\n{}", rec.console());
    let original = bed.claude_state(Servers::UserScope);
    assert_eq!(
        std::fs::read_to_string(&seen).expect("the state file as S started"),
        original,
        "the user's file was not rewritten"
    );
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state")).expect("JSON");
    let before: Value = serde_json::from_str(&original).expect("JSON");
    assert_eq!(
        after["mcpServers"], before["mcpServers"],
        "S as it was: {after:#}"
    );
    assert_eq!(
        after["tipsHistory"], before["tipsHistory"],
        "the user's keys kept"
    );
    let added: Vec<&String> = after
        .as_object()
        .expect("object")
        .keys()
        .filter(|k| before.get(k.as_str()).is_none())
        .collect();
    assert!(
        !added.is_empty(),
        "Claude Code's own writes kept: {after:#}\n{}",
        rec.console()
    );
    assert_contains(
        &rec.stderr,
        &format!(
            "mcptape run: Claude Code's changes to its state kept in {} (its MCP servers as they were)",
            state.display()
        ),
    );
    assert!(
        bed.home().join(".claude/projects").is_dir(),
        "its session transcript folder moved into the real one:\n{}",
        rec.console()
    );
    // Nothing of the user's points at mcptape: not the state file, not its backups.
    let pointed = files_under(&bed.home().join(".claude"))
        .into_iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("--join")))
        .collect::<Vec<_>>();
    assert!(pointed.is_empty(), "left pointed at mcptape: {pointed:?}");
    check_tape(Agent::Claude, &tape);

    let port = fake.port();
    let url = fake.url.clone();
    fake.stop();
    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    let play = bed.run(
        Agent::Claude,
        Servers::LocalScope,
        &tape,
        &["--playback"],
        &url,
        PROMPT,
    );
    assert_eq!(play.ok(), answer, "{}", play.console());
    assert_eq!(bed.starts(), 1, "no server started");
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state")).expect("JSON");
    let before: Value = serde_json::from_str(&bed.claude_state(Servers::LocalScope)).expect("JSON");
    let work = s(bed.work());
    assert_eq!(
        after["projects"][&work]["mcpServers"], before["projects"][&work]["mcpServers"],
        "S as it was: {after:#}"
    );
    assert!(sentinel.stop().is_empty(), "nothing reached the upstream");
}

// --- 4: a playback whose prompt changed --------------------------------------------------------

/// Claude Code recorded with [`PROMPT`], then played back asked something else (the recording's
/// fake provider stopped, a sentinel on its port): the `mcptape run --playback` and the
/// sentinel's log.
fn changed_prompt_playback() -> (RunOut, Vec<Value>) {
    let bed = Bed::new();
    let tape = bed.tape("run.jsonl");
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    bed.run(
        Agent::Claude,
        Servers::CommandLine,
        &tape,
        &[],
        &fake.url,
        PROMPT,
    )
    .ok();
    assert_eq!(bed.starts(), 1);
    let port = fake.port();
    let url = fake.url.clone();
    fake.stop();
    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    let other = "Call the echo tool twice, then reply with its result.";
    let play = bed.run(
        Agent::Claude,
        Servers::CommandLine,
        &tape,
        &["--playback"],
        &url,
        other,
    );
    assert_eq!(bed.starts(), 1, "no server started");
    (play, sentinel.stop())
}

const MISS: &str = "mcptape: no recorded model call matches this request (POST messages)";

#[test]
fn a_playback_whose_prompt_changed_fails_naming_the_nearest_recorded_call() {
    let (play, sentinel) = changed_prompt_playback();
    assert_eq!(play.code, Some(1), "{}", play.console());
    assert_contains(&play.stderr, MISS);
    assert_contains(&play.stderr, "nearest: call 1 at tape line ");
    // The difference itself, where it is.
    let line = play
        .stderr
        .lines()
        .find(|l| l.contains("recorded") && l.contains("asked") && l.contains("twice"))
        .unwrap_or_else(|| panic!("the differing text named:\n{}", play.console()));
    assert_contains(line, "once");
    assert_contains(line, "messages[");
    assert_contains(&play.stderr, "0 model calls served, ");
    assert!(
        !play.stderr.contains(" 0 missed"),
        "the misses counted:\n{}",
        play.console()
    );
    assert!(
        sentinel.is_empty(),
        "nothing reached the upstream: {sentinel:#?}"
    );
}

/// Each miss is explained once on stderr: `run --playback` printed every one twice, when it
/// happened (`ModelPlayer`, src/model/player.rs) and again before its summary (`run_cmd`,
/// src/cli/run.rs, `for l in r.lenient.iter().chain(&r.misses)`).
#[test]
fn a_playback_miss_is_explained_once() {
    let (play, _) = changed_prompt_playback();
    let summary = play
        .stderr
        .lines()
        .find(|l| l.starts_with("mcptape run: Claude Code exited"))
        .unwrap_or_else(|| panic!("a summary line:\n{}", play.console()));
    let missed: usize = summary
        .split(" missed")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the misses counted: {summary}"));
    assert!(missed >= 1, "{summary}");
    let explained = play.stderr.lines().filter(|l| l.starts_with(MISS)).count();
    assert_eq!(
        explained, missed,
        "{missed} misses, explained {explained} times:\n{}",
        play.stderr
    );
}

// --- 5: one tape, many writers: what it costs (measured, printed) ------------------------------
//
// The stand-in agent (tests/agents/runs/standin_agent.py) reads `--mcp-config` as Claude Code
// does, starts server S from it and sends sequential `tools/list` requests; it is run with S
// being `mcptape demo-server` directly, S being `mcptape record --tape X -- demo-server`, and
// the agent under `mcptape run` (S rewritten to `record --join`: one writer, the run's process).
// The figures are printed (and written to $TMPDIR/mcptape-one-tape-many-writers.txt), not
// asserted; what is asserted is that every answer arrived and is on the tape.

/// The stand-in agent's figures (standin_agent.py's JSON line) and its wall time.
fn standin(label: &str, mut cmd: Command, n: usize) -> Value {
    cmd.env("NO_COLOR", "1").env_remove("MCPTAPE_DIR");
    let start = Instant::now();
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    let secs = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{label}: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    let line = text(&out.stdout);
    let mut v: Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("{label}: {e}: {line:?}\n{}", text(&out.stderr)));
    assert_eq!(v["ok"], n, "{label}: every tools/list answered: {v}");
    v["wall_s"] = json!((secs * 1000.0).round() / 1000.0);
    v
}

/// How many `tools/list` answers the server's conversation on `tape` holds.
fn tools_list_answers(tape: &Path, server: Option<&str>) -> usize {
    let mut show = Mt::new(["show", "--json"]);
    if let Some(s) = server {
        show = show.args(["--server", s]);
    }
    let doc: Value = show.arg(tape).run().success().json();
    doc["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["dir"] == "s2c" && m["method"] == "tools/list")
        .count()
}

/// The stand-in agent's command: `python3 standin_agent.py --mcp-config CFG -n N`, optionally
/// under `mcptape run PRE… --tape TAPE --`.
fn standin_cmd(dir: &Path, cfg: &Path, n: usize, run: Option<(&Path, &[&str])>) -> Command {
    let mut c = match run {
        Some((tape, pre)) => {
            let mut c = Command::new(bin());
            c.arg("run").args(pre).arg("--tape").arg(tape).arg("--");
            c.arg(which("python3"));
            c
        }
        None => Command::new(which("python3")),
    };
    c.arg(runs_file("standin_agent.py"))
        .arg("--mcp-config")
        .arg(cfg)
        .args(["-n", &n.to_string()])
        .current_dir(dir);
    c
}

/// An MCP config naming `argv` server S.
fn standin_config(path: &Path, argv: &[String]) -> PathBuf {
    let cfg = json!({"mcpServers": {"S": {"command": argv[0], "args": argv[1..]}}});
    std::fs::write(path, cfg.to_string()).expect("config");
    path.to_path_buf()
}

/// One measurement: the stand-in agent `n` times against the server directly, through `record`,
/// and under `run`, `rounds` times each; the records' flags `redaction` (`[]`: the defaults).
fn measure(dir: &Path, tag: &str, n: usize, rounds: usize, redaction: &[&str]) -> String {
    let server = vec![s(bin()), "demo-server".to_string()];
    let direct = standin_config(&dir.join(format!("{tag}-direct.json")), &server);
    let mut rows: Vec<(&str, Vec<Value>)> = vec![
        ("the server directly", vec![]),
        ("agent -> mcptape record --tape X -- srv", vec![]),
        ("mcptape run -- agent (record --join)", vec![]),
    ];
    for round in 0..rounds {
        rows[0]
            .1
            .push(standin("direct", standin_cmd(dir, &direct, n, None), n));

        let rec_tape = dir.join(format!("{tag}-record-{round}.jsonl"));
        let mut argv = vec![s(bin()), "record".into()];
        argv.extend(redaction.iter().map(|f| f.to_string()));
        argv.extend(["--tape".into(), s(&rec_tape), "--".into()]);
        argv.extend(server.iter().cloned());
        let rec_cfg = standin_config(&dir.join(format!("{tag}-record-{round}.json")), &argv);
        rows[1]
            .1
            .push(standin("record", standin_cmd(dir, &rec_cfg, n, None), n));
        assert_eq!(
            tools_list_answers(&rec_tape, None),
            n,
            "record: every answer taped"
        );

        let run_tape = dir.join(format!("{tag}-run-{round}.jsonl"));
        let cmd = standin_cmd(dir, &direct, n, Some((&run_tape, redaction)));
        rows[2].1.push(standin("run", cmd, n));
        assert_eq!(
            tools_list_answers(&run_tape, Some("S")),
            n,
            "run: every answer taped under S"
        );
        Mt::new(["verify"]).arg(&run_tape).run().success();
    }
    let mut report = format!(
        "{n} sequential tools/list, server `mcptape demo-server`, debug build, redaction {}:\n",
        if redaction.is_empty() {
            "the defaults".to_string()
        } else {
            redaction.join(" ")
        }
    );
    for (what, runs) in &rows {
        for (i, v) in runs.iter().enumerate() {
            report.push_str(&format!(
                "  {what:<42} #{}: p50 {:>9} us  p90 {:>9} us  p99 {:>9} us  mean {:>9} us  all {:>7} s  wall {:>7} s\n",
                i + 1,
                v["p50_us"],
                v["p90_us"],
                v["p99_us"],
                v["mean_us"],
                v["total_s"],
                v["wall_s"]
            ));
        }
    }
    report
}

#[test]
fn one_tape_many_writers_costs_measured() {
    let dir = tmp();
    // 2000 calls as recorded by default (the built-in redaction rules on), twice; then once
    // without them (the hop, the join socket and the one writer alone).
    let mut report =
        String::from("one tape, many writers (the stand-in agent, tests/agents/runs)\n");
    report += &measure(dir.path(), "default", 2000, 2, &[]);
    report += &measure(dir.path(), "bare", 2000, 1, &["--no-default-redaction"]);
    eprintln!("{report}");
    std::fs::write(
        std::env::temp_dir().join("mcptape-one-tape-many-writers.txt"),
        &report,
    )
    .expect("report");
}
