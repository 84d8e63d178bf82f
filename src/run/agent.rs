//! Pointing an agent at mcptape without touching the user's files where the agent allows it:
//! which agent a command line starts, where it reads its model's base URL and its MCP servers,
//! and the command line, environment and temporary files that send both through mcptape.

use super::claude_dir::{self, Borrowed};
use super::config::{self, InPlace, Rewritten, Through};
use super::gemini::{
    gemini_auth, gemini_dotenv, gemini_env_auth_type, gemini_home, gemini_loads_system_file,
    gemini_playback_token, gemini_settings_sign_in, gemini_system_files, gemini_vertex_base,
    CODE_ASSIST_DEFAULT, CODE_ASSIST_SIGN_IN,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The agents mcptape knows how to point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code (`claude`): `ANTHROPIC_BASE_URL`, `--mcp-config`, a project `.mcp.json`,
    /// its user- and local-scope servers through a borrowed `CLAUDE_CONFIG_DIR`.
    ClaudeCode,
    /// Codex CLI (`codex`): `$CODEX_HOME/config.toml` and `-c` overrides, Responses only.
    Codex,
    /// Gemini CLI (`gemini`): `GOOGLE_GEMINI_BASE_URL`, `.gemini/settings.json` and
    /// `~/.gemini/settings.json`.
    GeminiCli,
    /// Cursor (`cursor`): `.cursor/mcp.json`, `~/.cursor/mcp.json`. Its model is not pointed.
    Cursor,
    /// VS Code (`code`): `.vscode/mcp.json` (`servers`), the user profile's `mcp.json`. Its
    /// model is not pointed.
    VsCode,
    /// Claude Desktop (`claude-desktop`): `claude_desktop_config.json`. Its model is not
    /// pointed.
    ClaudeDesktop,
    /// The `llm` CLI with `llm-tools-mcp`: `OPENAI_BASE_URL`, `~/.llm-tools-mcp/mcp.json`.
    Llm,
    /// opencode (`opencode`): its config files read, the overrides given as
    /// `OPENCODE_CONFIG_CONTENT` (nothing rewritten in place).
    OpenCode,
    /// Anything else: `ANTHROPIC_BASE_URL` and `OPENAI_BASE_URL`, and `--mcp-config` or a
    /// project `.mcp.json` when there is one.
    Other,
}

impl Agent {
    /// Whether its JSON config files may hold comments and trailing commas (VS Code's and
    /// Cursor's `mcp.json`, Gemini CLI's settings).
    fn reads_jsonc(self) -> bool {
        matches!(self, Agent::VsCode | Agent::Cursor | Agent::GeminiCli)
    }

    /// The agent a command line starts (by the program's file name).
    pub fn of(command: &[String]) -> Agent {
        let name = command
            .first()
            .map(|c| {
                Path::new(c)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or(c)
            })
            .unwrap_or("");
        match name {
            "claude" => Agent::ClaudeCode,
            "codex" => Agent::Codex,
            "gemini" => Agent::GeminiCli,
            "cursor" => Agent::Cursor,
            "code" | "code-insiders" => Agent::VsCode,
            "claude-desktop" | "Claude" => Agent::ClaudeDesktop,
            "llm" => Agent::Llm,
            "opencode" => Agent::OpenCode,
            _ => Agent::Other,
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "Claude Code",
            Agent::Codex => "Codex CLI",
            Agent::GeminiCli => "Gemini CLI",
            Agent::Cursor => "Cursor",
            Agent::VsCode => "VS Code",
            Agent::ClaudeDesktop => "Claude Desktop",
            Agent::Llm => "llm",
            Agent::OpenCode => "opencode",
            Agent::Other => "the agent",
        }
    }

    /// Whether `run` points this agent's model at mcptape (the GUI clients' model is theirs).
    pub fn model_pointed(self) -> bool {
        !matches!(self, Agent::Cursor | Agent::VsCode | Agent::ClaudeDesktop)
    }
}

/// The agent's command line and environment, pointed at mcptape.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The command line to run.
    pub argv: Vec<String>,
    /// Variables to set for it.
    pub env: Vec<(String, String)>,
    /// Files rewritten in place, to restore at the end.
    pub in_place: Vec<InPlace>,
    /// The MCP servers found.
    pub servers: Rewritten,
    /// Where the model calls really go (record): the base URL the agent would have used.
    pub upstream: Option<String>,
    /// Claude Code's config folder, borrowed (its user- and local-scope servers): given back
    /// at the end.
    pub borrowed: Option<Borrowed>,
}

/// Why an agent could not be pointed at mcptape.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A config file could not be read, parsed or written.
    #[error("{}: {why}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
}

impl crate::exit::Coded for PrepareError {
    /// A config file that cannot be read or parsed is bad input (65).
    fn exit_code(&self) -> i32 {
        crate::exit::DATA_ERR
    }
}

pub(super) fn config_err(path: &Path, why: impl std::fmt::Display) -> PrepareError {
    PrepareError::Config {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// How the run is pointed: where the model proxy listens (`None`: the model is left alone),
/// what MCP servers become, and where temporary files go.
pub struct Plan<'a> {
    /// The model proxy's base URL.
    pub model_url: Option<&'a str>,
    /// What stdio servers become.
    pub through: &'a Through,
    /// A private temporary folder for rewritten copies.
    pub temp: &'a Path,
    /// A private folder whose path is the same for every run of one tape: an agent puts the
    /// path of its home into its prompts (Codex: its skills folder), so a home that moved
    /// would make every model request of a replay differ from the recorded one.
    pub stable: &'a Path,
    /// The journal of files rewritten in place.
    pub journal: &'a Path,
    /// The working folder the agent runs in.
    pub cwd: &'a Path,
    /// What HTTP server entries' URLs become.
    pub http: config::HttpHook<'a>,
    /// The user's home folder (`$HOME`), where user-level configs are.
    pub home: Option<&'a Path>,
    /// Claude Code's managed-policy folder ([`CLAUDE_MANAGED_DIR`]; tests give their own).
    pub claude_managed: &'a Path,
}

/// Where Claude Code reads its managed (administrator's) settings, `managed-settings.json` and
/// the drop-ins of `managed-settings.d/`: they outrank every other settings source, the
/// command line's `--settings` included.
pub const CLAUDE_MANAGED_DIR: &str = if cfg!(target_os = "macos") {
    "/Library/Application Support/ClaudeCode"
} else {
    "/etc/claude-code"
};

/// The base URL split into what the upstream is (scheme and host) and the path prefix the
/// client puts in front of its paths (`https://api.openai.com/v1` → (`https://api.openai.com`,
/// `/v1`)).
pub(super) fn split_base(url: &str) -> (String, String) {
    let trimmed = url.trim_end_matches('/');
    let after_scheme = trimmed.find("://").map_or(0, |i| i + 3);
    match trimmed[after_scheme..].find('/') {
        Some(i) => (
            trimmed[..after_scheme + i].to_string(),
            trimmed[after_scheme + i..].to_string(),
        ),
        None => (trimmed.to_string(), String::new()),
    }
}

/// Points `command` (run by `agent`) at mcptape as `plan` says.
pub fn prepare(
    agent: Agent,
    command: &[String],
    plan: &Plan<'_>,
) -> Result<Prepared, PrepareError> {
    match agent {
        Agent::Codex => super::codex::prepare(command, plan),
        Agent::OpenCode => super::opencode::prepare(command, plan),
        _ => prepare_json_agent(agent, command, plan),
    }
}

/// Every agent but Codex and opencode: the model's base URL from the environment (none for the GUI
/// clients), the servers from `--mcp-config` (a file or inline JSON: rewritten into a
/// temporary copy) and the agent's config files ([`config_files`]: rewritten in place,
/// restored at the end).
fn prepare_json_agent(
    agent: Agent,
    command: &[String],
    plan: &Plan<'_>,
) -> Result<Prepared, PrepareError> {
    let mut p = Prepared {
        argv: command.to_vec(),
        ..Prepared::default()
    };
    let mut gemini_sign_in: Option<&str> = None;
    match (plan.model_url, agent) {
        (Some(url), Agent::GeminiCli) => {
            let dotenv = gemini_dotenv(plan.cwd, gemini_home(plan.home).as_deref());
            // Its environment as Gemini CLI sees it: the process's, then its `.env` file.
            let env = |k: &str| {
                std::env::var(k)
                    .ok()
                    .or_else(|| dotenv.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
                    .filter(|v| !v.is_empty())
            };
            // By rank: the system settings, the workspace's, the user's, the system defaults
            // (those two where Gemini CLI would load them).
            let [(_, system), (_, defaults)] = gemini_system_files();
            let loaded = |f: PathBuf| Some(f).filter(|f| gemini_loads_system_file(f));
            let mut ranked: Vec<PathBuf> = loaded(system).into_iter().collect();
            ranked.extend(config_files(agent, plan.cwd, plan.home));
            ranked.extend(loaded(defaults));
            let in_settings = gemini_settings_sign_in(&ranked);
            let from_env = gemini_env_auth_type(&env);
            let sign_in = in_settings.as_deref().or(from_env);
            if matches!(
                sign_in,
                Some(CODE_ASSIST_SIGN_IN | "compute-default-credentials")
            ) {
                // Signed in with Google (or a compute default credential) it asks Code Assist
                // at `${CODE_ASSIST_ENDPOINT}/v1internal:…`, and takes no other base URL.
                p.upstream = Some(
                    env("CODE_ASSIST_ENDPOINT").unwrap_or_else(|| CODE_ASSIST_DEFAULT.to_string()),
                );
                p.env.push(("CODE_ASSIST_ENDPOINT".into(), url.to_string()));
                if matches!(plan.through, config::Through::Play { .. }) {
                    // Offline it cannot check its cached login (Google's tokeninfo, or a
                    // refresh) and asks for a new one: given a token, it takes it as it is.
                    // Nothing leaves in playback, so the token is a placeholder.
                    p.env.extend(gemini_playback_token(&env));
                }
            } else if sign_in == Some("vertex-ai") {
                // Vertex AI reads its own base URL (and never takes one for a sign-in).
                p.upstream =
                    Some(env("GOOGLE_VERTEX_BASE_URL").unwrap_or_else(|| gemini_vertex_base(&env)));
                p.env
                    .push(("GOOGLE_VERTEX_BASE_URL".into(), url.to_string()));
            } else {
                let own_base = env("GOOGLE_GEMINI_BASE_URL");
                if own_base.is_none() && in_settings.is_none() {
                    // Pointing it is setting GOOGLE_GEMINI_BASE_URL, which Gemini CLI also
                    // reads as the sign-in to use when its settings name none: "gateway",
                    // refused ("Invalid auth method selected."). The sign-in its environment
                    // gave it is written into the user's settings for the run (below).
                    gemini_sign_in = from_env;
                }
                p.upstream =
                    Some(own_base.unwrap_or_else(|| {
                        "https://generativelanguage.googleapis.com".to_string()
                    }));
                p.env
                    .push(("GOOGLE_GEMINI_BASE_URL".into(), url.to_string()));
            }
        }
        (Some(url), Agent::Llm) => {
            let base = std::env::var("OPENAI_BASE_URL")
                .unwrap_or_else(|_| "https://api.openai.com/v1".to_string());
            let (upstream, prefix) = split_base(&base);
            p.upstream = Some(upstream);
            p.env
                .push(("OPENAI_BASE_URL".into(), format!("{url}{prefix}")));
        }
        // The GUI clients' model is theirs: only their MCP servers go through mcptape.
        (_, a) if !a.model_pointed() => {}
        (None, _) => {}
        (Some(url), _) => point_anthropic_and_openai(agent, url, plan, &mut p),
    }
    // Claude Code's MCP server policy: entries it judges by their command or URL stay as they
    // are. Other agents have none that `run` could get wrong.
    let policy = match agent {
        Agent::ClaudeCode => ClaudePolicy::read(plan, &p.argv),
        _ => ClaudePolicy::default(),
    };
    let keep_for = |name: &str, entry: &serde_json::Map<String, Value>| policy.keeps(name, entry);
    let keep: config::Keep<'_> = &keep_for;
    rewrite_mcp_config_flags(&mut p, plan, keep)?;
    let flag_only = p.argv.iter().any(|a| a == "--strict-mcp-config");
    let mut files = config_files(agent, plan.cwd, plan.home);
    // Run in the home folder, a project's file is the user's: rewritten once.
    files.dedup_by(|a, b| same_file(a, b));
    // Gemini CLI's user settings get the sign-in (none without a home folder).
    let user_settings = gemini_home(plan.home)
        .map(|h| h.join(".gemini/settings.json"))
        .filter(|_| gemini_sign_in.is_some());
    for file in files {
        if flag_only {
            continue;
        }
        let sign_in =
            gemini_sign_in.filter(|_| user_settings.as_ref().is_some_and(|u| same_file(u, &file)));
        if !file.exists() {
            // A link to nothing is not written through: the file stays as it was.
            let dangling = file.symlink_metadata().is_ok();
            if let Some(kind) = sign_in.filter(|_| !dangling) {
                let bytes = serde_json::to_vec_pretty(&gemini_auth(
                    Value::Object(Default::default()),
                    kind,
                ))
                .expect("JSON serializes");
                p.in_place.push(
                    InPlace::create(&file, &bytes, plan.journal)
                        .map_err(|e| config_err(&file, e))?,
                );
            }
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(|e| config_err(&file, e))?;
        let mut json =
            config::parse_config(&text, agent.reads_jsonc()).map_err(|e| config_err(&file, e))?;
        let r = config::rewrite_json(&mut json, plan.through, plan.http, keep);
        if let Some(kind) = sign_in {
            json = gemini_auth(json, kind);
        }
        if !r.stdio.is_empty() || !r.http_through.is_empty() || sign_in.is_some() {
            let bytes = serde_json::to_vec_pretty(&json).expect("JSON serializes");
            p.in_place.push(
                InPlace::rewrite(&file, &bytes, plan.journal).map_err(|e| config_err(&file, e))?,
            );
        }
        merge(&mut p.servers, r);
    }
    if agent == Agent::ClaudeCode && !flag_only {
        borrow_claude_dir(&mut p, plan, keep)?;
    }
    if agent == Agent::ClaudeCode {
        warn_claude_managed_mcp(plan.claude_managed);
    }
    if agent == Agent::GeminiCli {
        warn_gemini_system_servers(&gemini_system_files(), gemini_loads_system_file);
    }
    Ok(p)
}

/// Gemini CLI's system settings and defaults ([`gemini_system_files`]) that it would load
/// ([`gemini_loads_system_file`]) and that define MCP servers: named in a warning, as their
/// servers cannot be routed through mcptape. Those files outrank (the settings) or fill in
/// under (the defaults) the ones `run` rewrites, and Gemini CLI takes one only where root owns
/// it and every folder above it, so a rewritten copy of the user's would be refused. Returns
/// the servers named.
fn warn_gemini_system_servers(
    files: &[(&'static str, PathBuf); 2],
    loads: impl Fn(&Path) -> bool,
) -> Vec<String> {
    let mut named = Vec::new();
    for (var, file) in files {
        if !file.is_file() || !loads(file) {
            continue;
        }
        let Some(Value::Object(servers)) =
            config::read_json(file).and_then(|mut v| v.get_mut("mcpServers").map(Value::take))
        else {
            continue;
        };
        if servers.is_empty() {
            continue;
        }
        let names: Vec<String> = servers.keys().cloned().collect();
        crate::diag!(
            "mcptape run: WARNING: Gemini CLI's system {} ({}) define the MCP servers {}, which mcptape cannot route (an administrator's file, which Gemini CLI takes only where root owns it and every folder above it): they run past the tape",
            if var.contains("DEFAULTS") { "defaults" } else { "settings" },
            file.display(),
            names.join(", ")
        );
        named.extend(names);
    }
    named
}

/// Claude Code's managed MCP servers (`managed-mcp.json` in its policy folder) take exclusive
/// control: it starts those and no server of any other source, so none that `run` rewrote.
/// They are an administrator's, not routed: named in a warning. Returns their names (none when
/// there is no such file).
fn warn_claude_managed_mcp(dir: &Path) -> Vec<String> {
    let file = dir.join("managed-mcp.json");
    let Some(Value::Object(servers)) =
        config::read_json(&file).and_then(|mut v| v.get_mut("mcpServers").map(Value::take))
    else {
        return Vec::new();
    };
    let names: Vec<String> = servers.keys().cloned().collect();
    crate::diag!(
        "mcptape run: WARNING: Claude Code's managed MCP servers ({}) take exclusive control: it starts only those ({}), which mcptape cannot route, and none of the servers run points at the tape",
        file.display(),
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    );
    names
}

/// Claude Code's user- and local-scope servers (`.claude.json`): its config folder borrowed
/// for the run (see [`claude_dir`]), `CLAUDE_CONFIG_DIR` pointing at the borrowed one (at
/// the stable folder: the same path for every run of a tape).
fn borrow_claude_dir(
    p: &mut Prepared,
    plan: &Plan<'_>,
    keep: config::Keep<'_>,
) -> Result<(), PrepareError> {
    let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from);
    let Some(real) = claude_dir::Home::locate(config_dir.as_deref(), plan.home) else {
        return Ok(());
    };
    let state = real.state.clone();
    let Some((borrowed, servers)) =
        claude_dir::borrow(real, plan.stable, plan.cwd, plan.through, plan.http, keep)
            .map_err(|e| config_err(&state, e))?
    else {
        return Ok(());
    };
    merge(&mut p.servers, servers);
    p.env.push((
        "CLAUDE_CONFIG_DIR".into(),
        borrowed.dir.display().to_string(),
    ));
    p.borrowed = Some(borrowed);
    Ok(())
}

/// The config files an agent reads its MCP servers from that `run` rewrites in place (and
/// puts back), project files first.
pub fn config_files(agent: Agent, cwd: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let user = |rel: &str| home.map(|h| h.join(rel));
    match agent {
        Agent::ClaudeCode | Agent::Other => out.push(cwd.join(".mcp.json")),
        Agent::GeminiCli => {
            out.push(cwd.join(".gemini/settings.json"));
            out.extend(gemini_home(home).map(|h| h.join(".gemini/settings.json")));
        }
        Agent::Cursor => {
            out.push(cwd.join(".cursor/mcp.json"));
            out.extend(user(".cursor/mcp.json"));
        }
        Agent::VsCode => {
            out.push(cwd.join(".vscode/mcp.json"));
            out.extend(user(".config/Code/User/mcp.json"));
            out.extend(user("Library/Application Support/Code/User/mcp.json"));
        }
        Agent::ClaudeDesktop => {
            out.extend(user(
                "Library/Application Support/Claude/claude_desktop_config.json",
            ));
            out.extend(user(".config/Claude/claude_desktop_config.json"));
        }
        Agent::Llm => out.extend(user(".llm-tools-mcp/mcp.json")),
        Agent::Codex | Agent::OpenCode => {}
    }
    out
}

/// `ANTHROPIC_BASE_URL` (and for other agents `OPENAI_BASE_URL`, with the `/v1` its base URL
/// had) at the model proxy.
fn point_anthropic_and_openai(agent: Agent, url: &str, plan: &Plan<'_>, p: &mut Prepared) {
    p.upstream = Some(
        std::env::var("ANTHROPIC_BASE_URL")
            .unwrap_or_else(|_| "https://api.anthropic.com".to_string()),
    );
    p.env.push(("ANTHROPIC_BASE_URL".into(), url.to_string()));
    // Claude Code's settings files set environment variables of their own (`env`), over the
    // process's: a base URL there (a gateway's) is the upstream, and the proxy's is given as
    // command-line settings, which outrank every settings file but the managed policy.
    if agent == Agent::ClaudeCode {
        let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from);
        let mut settings = claude_settings_env(plan.cwd, config_dir.as_deref(), plan.home);
        // The managed settings outrank the files: whether it is on Vertex AI, too.
        let managed = claude_managed_env(plan.claude_managed);
        for (key, (value, _)) in &managed {
            settings.insert(key.clone(), value.clone());
        }
        if point_claude_vertex(url, &settings, &managed, p) {
            return;
        }
        if managed_outranks(&managed, "ANTHROPIC_BASE_URL") {
            return;
        }
        if let Some(base) = settings.get("ANTHROPIC_BASE_URL") {
            if over_claude_settings(p, "ANTHROPIC_BASE_URL", url) {
                p.upstream = Some(base.clone());
            }
        }
    }
    if agent == Agent::Other {
        let openai = std::env::var("OPENAI_BASE_URL").ok();
        let (_, prefix) = split_base(openai.as_deref().unwrap_or("https://api.openai.com/v1"));
        p.env
            .push(("OPENAI_BASE_URL".into(), format!("{url}{prefix}")));
    }
}

/// Each `--mcp-config` value (a file or inline JSON) rewritten into a temporary copy, the
/// command line pointing at the copy.
fn rewrite_mcp_config_flags(
    p: &mut Prepared,
    plan: &Plan<'_>,
    keep: config::Keep<'_>,
) -> Result<(), PrepareError> {
    let mut i = 1;
    let mut n = 0;
    while i < p.argv.len() {
        let arg = p.argv[i].clone();
        let inline = arg.strip_prefix("--mcp-config=").map(str::to_string);
        if arg != "--mcp-config" && inline.is_none() {
            i += 1;
            continue;
        }
        // `--mcp-config A B …` takes values up to the next flag; `--mcp-config=A` one.
        let values: Vec<usize> = if inline.is_some() {
            vec![i]
        } else {
            (i + 1..p.argv.len())
                .take_while(|&j| !p.argv[j].starts_with('-'))
                .collect()
        };
        for j in values.iter().copied() {
            let value = if j == i {
                inline.clone().unwrap_or_default()
            } else {
                p.argv[j].clone()
            };
            let mut json: Value = if value.trim_start().starts_with('{') {
                serde_json::from_str(&value)
                    .map_err(|e| config_err(Path::new("--mcp-config"), e))?
            } else {
                let path = plan.cwd.join(&value);
                let text = std::fs::read_to_string(&path).map_err(|e| config_err(&path, e))?;
                serde_json::from_str(&text).map_err(|e| config_err(&path, e))?
            };
            let r = config::rewrite_json(&mut json, plan.through, plan.http, keep);
            merge(&mut p.servers, r);
            n += 1;
            let copy = plan.temp.join(format!("mcp-config-{n}.json"));
            std::fs::write(
                &copy,
                serde_json::to_vec_pretty(&json).expect("JSON serializes"),
            )
            .map_err(|e| config_err(&copy, e))?;
            p.argv[j] = if j == i {
                format!("--mcp-config={}", copy.display())
            } else {
                copy.display().to_string()
            };
        }
        i += values.len().max(1);
    }
    Ok(())
}

fn merge(into: &mut Rewritten, r: Rewritten) {
    into.stdio.extend(r.stdio);
    into.http_through.extend(r.http_through);
    into.http.extend(r.http);
    into.kept.extend(r.kept);
}

/// Claude Code's MCP server policy (`deniedMcpServers` and `allowedMcpServers` in its settings)
/// as far as `run` must heed it. A server the policy denies by its command or its URL, or a
/// stdio (HTTP) server where the allow list names servers by command (URL), is judged by what
/// its entry says: rewritten to go through mcptape, a denied one would get past the policy and
/// an allowed one would be refused. Those entries are left as they are, and said so; entries
/// judged by name only are rewritten (the name stays).
#[derive(Default)]
struct ClaudePolicy {
    denied: Vec<Value>,
    allowed: Option<Vec<Value>>,
}

impl ClaudePolicy {
    /// The policy of every settings source Claude Code reads it from: the managed settings,
    /// the project's local and shared settings, the user's, and `--settings` of `argv`. The
    /// deny lists add up; the allow list is the managed one alone when they say
    /// `allowManagedMcpServersOnly`, else every source's together.
    fn read(plan: &Plan<'_>, argv: &[String]) -> ClaudePolicy {
        let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from);
        let read = |f: &Path| config::read_json(f);
        let managed: Vec<Value> = claude_managed_files(plan.claude_managed)
            .iter()
            .filter_map(|f| read(f))
            .collect();
        let mut others: Vec<Value> =
            claude_settings_files(plan.cwd, config_dir.as_deref(), plan.home)
                .iter()
                .filter_map(|f| read(f))
                .collect();
        let flag = argv.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix("--settings=")
                .map(str::to_string)
                .or_else(|| {
                    (a == "--settings")
                        .then(|| argv.get(i + 1).cloned())
                        .flatten()
                })
        });
        if let Some(v) = flag {
            let json = if v.trim_start().starts_with('{') {
                serde_json::from_str(&v).ok()
            } else {
                read(&plan.cwd.join(&v))
            };
            others.extend(json);
        }
        let list = |docs: &[Value], key: &str| -> Option<Vec<Value>> {
            let lists: Vec<&Vec<Value>> = docs
                .iter()
                .filter_map(|d| d.get(key).and_then(Value::as_array))
                .collect();
            (!lists.is_empty()).then(|| lists.into_iter().flatten().cloned().collect())
        };
        let managed_only = managed
            .iter()
            .any(|d| d.get("allowManagedMcpServersOnly") == Some(&Value::Bool(true)));
        let every: Vec<Value> = managed.iter().chain(&others).cloned().collect();
        ClaudePolicy {
            denied: list(&every, "deniedMcpServers").unwrap_or_default(),
            allowed: list(
                if managed_only { &managed } else { &every },
                "allowedMcpServers",
            ),
        }
    }

    /// Whether the entry of server `name` stays as it is (said on stderr when it does).
    fn keeps(&self, name: &str, entry: &serde_json::Map<String, Value>) -> bool {
        let why = self.why_kept(entry);
        if let Some(why) = why {
            crate::diag!(
                "mcptape run: Claude Code's {why}: server {name} is left as it is, and not on the tape (rewritten, the policy would judge it differently)"
            );
        }
        why.is_some()
    }

    fn why_kept(&self, entry: &serde_json::Map<String, Value>) -> Option<&'static str> {
        let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), expand_claude_vars);
        let stdio = matches!(
            entry.get("type").and_then(Value::as_str),
            None | Some("stdio")
        );
        let command: Option<Vec<String>> = entry.get("command").filter(|_| stdio).map(|c| {
            let args = entry.get("args").and_then(Value::as_array);
            std::iter::once(text(c))
                .chain(args.into_iter().flatten().map(text))
                .collect()
        });
        let url = entry
            .get("url")
            .and_then(Value::as_str)
            .map(expand_claude_vars);
        for rule in &self.denied {
            let by_command = rule.get("serverCommand").and_then(Value::as_array);
            if let (Some(c), Some(r)) = (&command, by_command) {
                if r.iter().map(text).eq(c.iter().cloned()) {
                    return Some("deniedMcpServers denies it by its command");
                }
            }
            let by_url = rule.get("serverUrl").and_then(Value::as_str);
            if let (Some(u), Some(r)) = (&url, by_url) {
                if url_may_match(u, &expand_claude_vars(r)) {
                    return Some("deniedMcpServers denies it by its URL");
                }
            }
        }
        let allowed = self.allowed.as_deref().unwrap_or_default();
        if command.is_some() && allowed.iter().any(|r| r.get("serverCommand").is_some()) {
            return Some("allowedMcpServers allows stdio servers by their command");
        }
        if url.is_some() && allowed.iter().any(|r| r.get("serverUrl").is_some()) {
            return Some("allowedMcpServers allows HTTP servers by their URL");
        }
        None
    }
}

/// `${NAME}` and `${NAME:-default}` in `s` replaced as Claude Code replaces them in a server's
/// command, arguments and URL (from the environment; a missing one with no default stays).
fn expand_claude_vars(s: &str) -> String {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}").expect("a regex")
    });
    RE.replace_all(s, |c: &regex::Captures<'_>| {
        match (std::env::var(&c[1]), c.get(2)) {
            (Ok(v), _) => v,
            (Err(_), Some(d)) => d.as_str().to_string(),
            (Err(_), None) => c[0].to_string(),
        }
    })
    .into_owned()
}

/// Whether a deny rule's URL pattern (`*` anywhere) may match `url`. Claude Code matches the
/// parts of a URL; this errs toward a match (the pattern over the whole URL, or over its
/// start), as a server wrongly left as it is only goes untaped, where one wrongly rewritten
/// would get past the policy.
fn url_may_match(url: &str, pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let glob = regex::escape(pattern).replace(r"\*", ".*");
    regex::Regex::new(&format!("^{glob}"))
        .map(|re| re.is_match(url))
        .unwrap_or(true)
}

/// Whether two paths name one file (through links, when it exists).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The `env.ANTHROPIC_BASE_URL` Claude Code's settings files set (see
/// [`claude_settings_env`]).
#[cfg(test)]
fn claude_settings_base_url(
    cwd: &Path,
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> Option<String> {
    claude_settings_env(cwd, config_dir, home).remove("ANTHROPIC_BASE_URL")
}

/// The variables the `env` of Claude Code's settings files set (non-empty strings), each the one
/// that wins: the project's local settings, then the project's, then the user's (in
/// `config_dir`, else `~/.claude`). Each file is read once.
fn claude_settings_env(
    cwd: &Path,
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> std::collections::HashMap<String, String> {
    let mut vars = std::collections::HashMap::new();
    for f in claude_settings_files(cwd, config_dir, home) {
        for (key, v) in settings_env(&f) {
            vars.entry(key).or_insert(v);
        }
    }
    vars
}

/// Claude Code's settings files below its managed ones, by rank: the project's local settings,
/// the project's, the user's (in `config_dir`, else `~/.claude`).
fn claude_settings_files(
    cwd: &Path,
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let user = config_dir
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".claude")));
    let mut files = vec![
        cwd.join(".claude/settings.local.json"),
        cwd.join(".claude/settings.json"),
    ];
    files.extend(user.map(|d| d.join("settings.json")));
    files
}

/// The variables a Claude Code settings file's `env` sets to non-empty strings (none when the
/// file is missing or not JSON).
fn settings_env(f: &Path) -> Vec<(String, String)> {
    let Some(Value::Object(env)) =
        config::read_json(f).and_then(|mut v| v.get_mut("env").map(Value::take))
    else {
        return Vec::new();
    };
    env.into_iter()
        .filter_map(|(key, value)| match value {
            Value::String(v) if !v.is_empty() => Some((key, v)),
            _ => None,
        })
        .collect()
}

/// The variables the `env` of Claude Code's managed settings in `dir` sets (non-empty strings),
/// each with the file it is in: `managed-settings.json`, then the drop-ins of
/// `managed-settings.d/` in name order (`*.json`, not hidden), a later file's over an earlier's.
fn claude_managed_env(dir: &Path) -> std::collections::HashMap<String, (String, PathBuf)> {
    let mut vars = std::collections::HashMap::new();
    for f in claude_managed_files(dir) {
        for (key, v) in settings_env(&f) {
            vars.insert(key, (v, f.clone()));
        }
    }
    vars
}

/// Claude Code's managed settings files in `dir`: `managed-settings.json`, then the drop-ins of
/// `managed-settings.d/` in name order (`*.json`, not hidden).
fn claude_managed_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![dir.join("managed-settings.json")];
    if let Ok(entries) = std::fs::read_dir(dir.join("managed-settings.d")) {
        let mut drop_ins: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|f| {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or(".");
                name.ends_with(".json") && !name.starts_with('.')
            })
            .collect();
        drop_ins.sort();
        files.extend(drop_ins);
    }
    files
}

/// Whether Claude Code's managed settings set `key` (a base URL), which nothing mcptape gives
/// outranks: then its model calls go past the proxy, and the user is told so before the run.
fn managed_outranks(
    managed: &std::collections::HashMap<String, (String, PathBuf)>,
    key: &str,
) -> bool {
    let Some((value, file)) = managed.get(key) else {
        return false;
    };
    crate::diag!(
        "mcptape run: WARNING: Claude Code's managed settings ({}) set env.{key} to {}, which outranks anything mcptape can give it: its model calls go there, past the tape (this run tapes its MCP traffic only)",
        file.display(),
        crate::record::http::without_password(value)
    );
    true
}

/// Gives Claude Code `value` as its `key` over a settings file that sets its own (which
/// outranks the environment): as command-line settings, unless the command line has a
/// `--settings` of its own, which is left alone with a warning (and false returned).
fn over_claude_settings(p: &mut Prepared, key: &str, value: &str) -> bool {
    let own = p
        .argv
        .iter()
        .any(|a| a == "--settings" || a.starts_with("--settings="));
    if own {
        crate::diag!(
            "mcptape run: WARNING: Claude Code's settings set env.{key} and its command line has a --settings of its own, which mcptape leaves alone: unless that sets env.{key} to mcptape's, its model calls bypass the tape"
        );
        return false;
    }
    let settings = serde_json::json!({"env": {key: value}});
    p.argv
        .splice(1..1, ["--settings".to_string(), settings.to_string()]);
    true
}

/// Claude Code on Vertex AI (`CLAUDE_CODE_USE_VERTEX`, in its environment or its settings' `env`)
/// asks `ANTHROPIC_VERTEX_BASE_URL`, not `ANTHROPIC_BASE_URL`: that one is pointed. The upstream
/// is the user's own, else Vertex's for `CLOUD_ML_REGION` (default `us-east5`) as Claude Code
/// 2.1's client makes it. Returns false when Claude Code is not on Vertex AI.
fn point_claude_vertex(
    url: &str,
    settings: &std::collections::HashMap<String, String>,
    managed: &std::collections::HashMap<String, (String, PathBuf)>,
    p: &mut Prepared,
) -> bool {
    // Each variable from the settings files' `env` first: it outranks the process environment
    // (measured for the base URL).
    let var = |k: &str| {
        settings
            .get(k)
            .cloned()
            .or_else(|| std::env::var(k).ok().filter(|v| !v.is_empty()))
    };
    let on = var("CLAUDE_CODE_USE_VERTEX")
        .is_some_and(|v| ["1", "true", "yes", "on"].contains(&v.trim().to_lowercase().as_str()));
    if !on {
        return false;
    }
    let base = var("ANTHROPIC_VERTEX_BASE_URL").unwrap_or_else(|| {
        vertex_base(&var("CLOUD_ML_REGION").unwrap_or_else(|| "us-east5".into()))
    });
    let (upstream, prefix) = split_base(&base);
    p.upstream = Some(upstream);
    let ours = format!("{url}{prefix}");
    if managed_outranks(managed, "ANTHROPIC_VERTEX_BASE_URL") {
        return true;
    }
    if settings.contains_key("ANTHROPIC_VERTEX_BASE_URL") {
        over_claude_settings(p, "ANTHROPIC_VERTEX_BASE_URL", &ours);
    } else {
        p.env.push(("ANTHROPIC_VERTEX_BASE_URL".into(), ours));
    }
    true
}

/// Vertex AI's base URL for `region`, as Claude Code's Vertex client makes it.
fn vertex_base(region: &str) -> String {
    match region {
        "global" => "https://aiplatform.googleapis.com/v1".into(),
        "us" | "eu" => format!("https://aiplatform.{region}.rep.googleapis.com/v1"),
        r => format!("https://{r}-aiplatform.googleapis.com/v1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The base URL Claude Code's settings set, by their precedence.
    #[test]
    fn claude_settings_base_url_is_the_one_claude_code_would_use() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("work"), dir.path().join("home"));
        let put = |f: PathBuf, url: &str| {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(
                f,
                format!(r#"{{"env": {{"ANTHROPIC_BASE_URL": "{url}", "X": "1"}}}}"#),
            )
            .unwrap();
        };
        assert_eq!(claude_settings_base_url(&cwd, None, Some(&home)), None);
        put(home.join(".claude/settings.json"), "https://user.example");
        assert_eq!(
            claude_settings_base_url(&cwd, None, Some(&home)).as_deref(),
            Some("https://user.example")
        );
        let other = dir.path().join("config");
        assert_eq!(
            claude_settings_base_url(&cwd, Some(&other), Some(&home)),
            None
        );
        put(cwd.join(".claude/settings.json"), "https://project.example");
        put(
            cwd.join(".claude/settings.local.json"),
            "https://local.example",
        );
        assert_eq!(
            claude_settings_base_url(&cwd, None, Some(&home)).as_deref(),
            Some("https://local.example")
        );
    }

    /// Gemini CLI's system settings and defaults that it would load and that define servers
    /// are named; files it would refuse, or without servers, are not.
    #[test]
    fn gemini_system_files_with_servers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            (
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
                dir.path().join("settings.json"),
            ),
            (
                "GEMINI_CLI_SYSTEM_DEFAULTS_PATH",
                dir.path().join("system-defaults.json"),
            ),
        ];
        let all = |_: &Path| true;
        assert!(
            warn_gemini_system_servers(&files, all).is_empty(),
            "no files"
        );
        std::fs::write(
            &files[0].1,
            r#"{"mcpServers": {"fs": {"command": "npx"}, "git": {"command": "uvx"}}, /* JSONC */}"#,
        )
        .unwrap();
        std::fs::write(&files[1].1, r#"{"ui": {"theme": "Y"}}"#).unwrap();
        assert_eq!(warn_gemini_system_servers(&files, all), ["fs", "git"]);
        std::fs::write(
            &files[1].1,
            r#"{"mcpServers": {"web": {"httpUrl": "http://x"}}}"#,
        )
        .unwrap();
        assert_eq!(
            warn_gemini_system_servers(&files, all),
            ["fs", "git", "web"]
        );
        let only_defaults = |f: &Path| f.ends_with("system-defaults.json");
        assert_eq!(warn_gemini_system_servers(&files, only_defaults), ["web"]);
        // A folder anyone may write to, above the file: Gemini CLI would refuse it.
        use std::os::unix::fs::PermissionsExt;
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(open.join("settings.json"), "{}").unwrap();
        assert!(!gemini_loads_system_file(&open.join("settings.json")));
        // A file root owns, in folders root owns that only it may write to: taken.
        #[cfg(target_os = "linux")]
        assert!(gemini_loads_system_file(Path::new("/etc/passwd")));
    }

    /// The folders a test's [`Plan`] lends: a working folder, a home, a managed-policy folder,
    /// all under `dir`; servers recorded through `/bin/mcptape`.
    struct Place {
        dir: PathBuf,
        cwd: PathBuf,
        home: PathBuf,
        managed: PathBuf,
        stable: PathBuf,
        journal: PathBuf,
        through: Through,
    }

    impl Place {
        fn new(dir: &Path) -> Place {
            Place {
                dir: dir.to_path_buf(),
                cwd: dir.join("work"),
                home: dir.join("home"),
                managed: dir.join("managed"),
                stable: dir.join("stable"),
                journal: dir.join("journal.json"),
                through: Through::Record {
                    exe: "/bin/mcptape".into(),
                    socket: "/tmp/s.sock".into(),
                },
            }
        }

        fn plan<'a>(&'a self, model_url: Option<&'a str>, http: config::HttpHook<'a>) -> Plan<'a> {
            Plan {
                model_url,
                through: &self.through,
                temp: &self.dir,
                stable: &self.stable,
                journal: &self.journal,
                cwd: &self.cwd,
                http,
                home: Some(&self.home),
                claude_managed: &self.managed,
            }
        }
    }

    /// Claude Code's managed MCP servers are named (their file takes exclusive control).
    #[test]
    fn claude_managed_mcp_servers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(warn_claude_managed_mcp(dir.path()).is_empty(), "no file");
        std::fs::write(
            dir.path().join("managed-mcp.json"),
            r#"{"mcpServers": {"corp-docs": {"command": "corp-docs"}, "jira": {"type": "http", "url": "https://jira.example/mcp"}}}"#,
        )
        .unwrap();
        assert_eq!(warn_claude_managed_mcp(dir.path()), ["corp-docs", "jira"]);
    }

    /// Which entries Claude Code's MCP server policy keeps as they are: those it judges by
    /// command or URL; a rule by name leaves the entry to be rewritten (the name stays).
    #[test]
    fn claude_policy_keeps_the_entries_it_judges_by_command_or_url() {
        let entry = |v: Value| v.as_object().unwrap().clone();
        let stdio = entry(json!({"command": "npx", "args": ["-y", "${MCPTAPE_NO_SUCH_VAR:-srv}"]}));
        let http = entry(json!({"type": "http", "url": "https://mcp.corp.example/v1/mcp"}));
        let policy = |denied: Value, allowed: Option<Value>| ClaudePolicy {
            denied: denied.as_array().unwrap().clone(),
            allowed: allowed.map(|a| a.as_array().unwrap().clone()),
        };
        let none = policy(json!([]), None);
        assert_eq!(none.why_kept(&stdio), None);
        assert_eq!(none.why_kept(&http), None);
        let by_command = policy(json!([{"serverCommand": ["npx", "-y", "srv"]}]), None);
        assert!(by_command.why_kept(&stdio).is_some(), "defaults expanded");
        assert_eq!(by_command.why_kept(&http), None);
        let other = policy(json!([{"serverCommand": ["npx", "-y", "other"]}]), None);
        assert_eq!(other.why_kept(&stdio), None);
        let by_name = policy(
            json!([{"serverName": "S"}]),
            Some(json!([{"serverName": "S"}])),
        );
        assert_eq!(by_name.why_kept(&stdio), None);
        let by_url = policy(json!([{"serverUrl": "https://*.corp.example/*"}]), None);
        assert!(by_url.why_kept(&http).is_some());
        let host_only = policy(json!([{"serverUrl": "https://mcp.corp.example"}]), None);
        assert!(host_only.why_kept(&http).is_some(), "errs toward a match");
        let elsewhere = policy(json!([{"serverUrl": "https://other.example/*"}]), None);
        assert_eq!(elsewhere.why_kept(&http), None);
        let allow_commands = policy(json!([]), Some(json!([{"serverCommand": ["uvx", "x"]}])));
        assert!(allow_commands.why_kept(&stdio).is_some());
        assert_eq!(allow_commands.why_kept(&http), None);
        let allow_urls = policy(json!([]), Some(json!([{"serverUrl": "https://*"}])));
        assert!(allow_urls.why_kept(&http).is_some());
        assert_eq!(allow_urls.why_kept(&stdio), None);
    }

    /// The policy is read from every source: deny lists add up, the allow list is the managed
    /// one alone under `allowManagedMcpServersOnly`.
    #[test]
    fn claude_policy_is_read_from_every_settings_source() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::new(dir.path());
        let (cwd, home, managed) = (&place.cwd, &place.home, &place.managed);
        let put = |f: PathBuf, v: Value| {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v.to_string()).unwrap();
        };
        put(
            cwd.join(".claude/settings.json"),
            json!({"deniedMcpServers": [{"serverName": "a"}], "allowedMcpServers": [{"serverCommand": ["x"]}]}),
        );
        put(
            home.join(".claude/settings.json"),
            json!({"deniedMcpServers": [{"serverName": "b"}]}),
        );
        put(
            managed.join("managed-settings.d/10.json"),
            json!({"deniedMcpServers": [{"serverName": "c"}], "allowedMcpServers": [{"serverName": "S"}]}),
        );
        let ours = |_: &str, url: &str| Some(url.to_string());
        let plan = place.plan(None, &ours);
        let flag = r#"{"deniedMcpServers": [{"serverName": "d"}]}"#;
        let argv = ["claude".to_string(), "--settings".into(), flag.into()];
        let p = ClaudePolicy::read(&plan, &argv);
        let names: Vec<&str> = p
            .denied
            .iter()
            .filter_map(|d| d["serverName"].as_str())
            .collect();
        assert_eq!(names, ["c", "a", "b", "d"]);
        assert_eq!(p.allowed.as_ref().map(Vec::len), Some(2));
        put(
            managed.join("managed-settings.json"),
            json!({"allowManagedMcpServersOnly": true}),
        );
        let p = ClaudePolicy::read(&plan, &argv);
        assert_eq!(p.allowed, Some(vec![json!({"serverName": "S"})]));
    }

    /// Claude Code's managed settings outrank every source mcptape can use: a base URL there is
    /// not overridden (no `--settings` that would lose), and their `env` says whether Claude
    /// Code is on Vertex AI (drop-ins read in name order, hidden ones not).
    #[test]
    fn claude_managed_settings_are_read_and_never_overridden() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::new(dir.path());
        let (cwd, managed) = (&place.cwd, &place.managed);
        let put = |f: PathBuf, text: &str| {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        put(
            cwd.join(".claude/settings.json"),
            r#"{"env": {"ANTHROPIC_BASE_URL": "https://project.example"}}"#,
        );
        let ours = |_: &str, url: &str| Some(url.to_string());
        let plan = place.plan(Some("http://127.0.0.1:7"), &ours);
        let argv = ["claude".to_string(), "-p".into(), "hi".into()];
        let settings_flag = |p: &Prepared| p.argv.iter().any(|a| a == "--settings");
        let vertex_env = |p: &Prepared| {
            p.env
                .iter()
                .find(|(k, _)| k == "ANTHROPIC_VERTEX_BASE_URL")
                .map(|(_, v)| v.clone())
        };

        // No managed settings: the project's base URL is the upstream, ours given as --settings.
        let p = prepare(Agent::ClaudeCode, &argv, &plan).unwrap();
        assert!(settings_flag(&p), "{:?}", p.argv);
        assert_eq!(p.upstream.as_deref(), Some("https://project.example"));

        // The managed base URL wins over everything: nothing is given that it would outrank.
        put(
            managed.join("managed-settings.json"),
            r#"{"env": {"ANTHROPIC_BASE_URL": "https://gateway.corp.example"}}"#,
        );
        let p = prepare(Agent::ClaudeCode, &argv, &plan).unwrap();
        assert!(!settings_flag(&p), "{:?}", p.argv);

        // Vertex AI turned on by a drop-in: its base URL is pointed, the region from the policy;
        // a hidden drop-in is not read.
        put(
            managed.join("managed-settings.json"),
            r#"{"permissions": {}}"#,
        );
        put(
            managed.join("managed-settings.d/10-vertex.json"),
            r#"{"env": {"CLAUDE_CODE_USE_VERTEX": "1", "CLOUD_ML_REGION": "us-east1"}}"#,
        );
        put(
            managed.join("managed-settings.d/20-region.json"),
            r#"{"env": {"CLOUD_ML_REGION": "europe-west1"}}"#,
        );
        put(
            managed.join("managed-settings.d/.30-off.json"),
            r#"{"env": {"ANTHROPIC_VERTEX_BASE_URL": "https://hidden.example/v1"}}"#,
        );
        let p = prepare(Agent::ClaudeCode, &argv, &plan).unwrap();
        assert_eq!(vertex_env(&p).as_deref(), Some("http://127.0.0.1:7/v1"));
        assert_eq!(
            p.upstream.as_deref(),
            Some("https://europe-west1-aiplatform.googleapis.com")
        );

        // …unless the policy sets Vertex's base URL too.
        put(
            managed.join("managed-settings.d/40-url.json"),
            r#"{"env": {"ANTHROPIC_VERTEX_BASE_URL": "https://vertex-gw.corp.example/v1"}}"#,
        );
        let p = prepare(Agent::ClaudeCode, &argv, &plan).unwrap();
        assert_eq!(vertex_env(&p), None);
        assert!(!settings_flag(&p), "{:?}", p.argv);
    }

    /// Vertex AI's base URL for a region, as Claude Code 2.1's client makes it.
    #[test]
    fn vertex_base_urls_are_claude_codes() {
        assert_eq!(
            vertex_base("global"),
            "https://aiplatform.googleapis.com/v1"
        );
        assert_eq!(
            vertex_base("eu"),
            "https://aiplatform.eu.rep.googleapis.com/v1"
        );
        assert_eq!(
            vertex_base("us-east5"),
            "https://us-east5-aiplatform.googleapis.com/v1"
        );
    }

    #[test]
    fn base_urls_split_into_upstream_and_prefix() {
        assert_eq!(
            split_base("https://api.openai.com/v1"),
            ("https://api.openai.com".into(), "/v1".into())
        );
        assert_eq!(
            split_base("http://127.0.0.1:8/"),
            ("http://127.0.0.1:8".into(), String::new())
        );
        assert_eq!(
            split_base("https://openrouter.ai/api/v1"),
            ("https://openrouter.ai".into(), "/api/v1".into())
        );
    }

    /// The GUI clients cannot run here: their files, in their real shapes, are rewritten and
    /// put back byte for byte.
    #[test]
    fn gui_and_gemini_config_files_are_rewritten_in_place_and_restored() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("proj"), dir.path().join("home"));
        let files: &[(&str, &str)] = &[
            // Gemini CLI: settings beside the servers, `httpUrl` for HTTP, a comment.
            (
                "home/.gemini/settings.json",
                "{\n  // Gemini CLI reads its settings with comments.\n  \"theme\": \"Default\",\n  \"telemetry\": {\"enabled\": false},\n  \"mcpServers\": {\n    \"mem\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"], \"trust\": true},\n    \"web\": {\"httpUrl\": \"http://127.0.0.1:9/mcp\"}\n  }\n}\n",
            ),
            // Cursor: `command` or `url`.
            (
                "proj/.cursor/mcp.json",
                "{\"mcpServers\":{\"fs\":{\"command\":\"npx\",\"args\":[\"-y\",\"@modelcontextprotocol/server-filesystem\",\".\"],\"env\":{\"DEBUG\":\"1\"}}}}",
            ),
            // VS Code: `servers` and `inputs`, with comments and a trailing comma (JSONC, as
            // VS Code reads it).
            (
                "proj/.vscode/mcp.json",
                "{\n\t// Inputs are asked for once.\n\t\"inputs\": [{\"type\": \"promptString\", \"id\": \"key\", \"password\": true}],\n\t/* git: see https://x.y/z */\n\t\"servers\": {\"git\": {\"type\": \"stdio\", \"command\": \"uvx\", \"args\": [\"mcp-server-git\"],},},\n}\n",
            ),
            // Claude Desktop (its Linux path).
            (
                "home/.config/Claude/claude_desktop_config.json",
                "{\"mcpServers\": {\"time\": {\"command\": \"uvx\", \"args\": [\"mcp-server-time\"]}}}",
            ),
        ];
        for (rel, text) in files {
            let f = dir.path().join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, text).unwrap();
        }
        let journal = dir.path().join("journal.json");
        let through = Through::Record {
            exe: "/bin/mcptape".into(),
            socket: "/tmp/s.sock".into(),
        };
        let ours = |_: &str, url: &str| Some(url.replace("127.0.0.1:9", "127.0.0.1:7"));
        let plan = Plan {
            model_url: None,
            through: &through,
            temp: dir.path(),
            stable: &dir.path().join("stable"),
            journal: &journal,
            cwd: &cwd,
            http: &ours,
            home: Some(&home),
            claude_managed: &dir.path().join("managed"),
        };
        for (agent, file, servers) in [
            (
                Agent::GeminiCli,
                "home/.gemini/settings.json",
                vec!["mem", "web"],
            ),
            (Agent::Cursor, "proj/.cursor/mcp.json", vec!["fs"]),
            (Agent::VsCode, "proj/.vscode/mcp.json", vec!["git"]),
            (
                Agent::ClaudeDesktop,
                "home/.config/Claude/claude_desktop_config.json",
                vec!["time"],
            ),
        ] {
            let f = dir.path().join(file);
            let before = std::fs::read(&f).unwrap();
            let p = prepare(agent, &["x".into()], &plan).unwrap();
            let mut names = p.servers.stdio.clone();
            names.extend(p.servers.http_through.clone());
            assert_eq!(names, servers, "{agent:?}");
            let now: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            let key = if agent == Agent::VsCode {
                "servers"
            } else {
                "mcpServers"
            };
            let first = &now[key][servers[0]];
            assert_eq!(first["command"], "/bin/mcptape", "{agent:?}: {now}");
            assert_eq!(first["args"][0], "record");
            if agent == Agent::GeminiCli {
                assert_eq!(now["theme"], "Default", "other settings kept");
                assert_eq!(now["mcpServers"]["mem"]["trust"], true);
                assert_eq!(
                    now["mcpServers"]["web"]["httpUrl"],
                    "http://127.0.0.1:7/mcp"
                );
            }
            if agent == Agent::VsCode {
                assert_eq!(now["inputs"][0]["id"], "key");
            }
            for f in &p.in_place {
                f.restore(&journal).unwrap();
            }
            assert_eq!(
                std::fs::read(&f).unwrap(),
                before,
                "{agent:?}: put back byte for byte"
            );
        }
        assert!(!journal.exists(), "nothing left to restore");

        // Run in the home folder, the project's file is the user's: rewritten once (its
        // server went through mcptape twice, and putting it back left the first rewrite).
        let plan = Plan { cwd: &home, ..plan };
        let f = home.join(".cursor/mcp.json");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, files[1].1).unwrap();
        let p = prepare(Agent::Cursor, &["x".into()], &plan).unwrap();
        assert_eq!(p.servers.stdio, ["fs"]);
        let now: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_ne!(now["mcpServers"]["fs"]["args"][1], "/bin/mcptape", "{now}");
        for f in &p.in_place {
            f.restore(&journal).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&f).unwrap(), files[1].1);
    }

    #[test]
    fn agents_are_told_by_their_program() {
        assert_eq!(
            Agent::of(&["/x/node_modules/.bin/claude".into()]),
            Agent::ClaudeCode
        );
        assert_eq!(Agent::of(&["codex".into(), "exec".into()]), Agent::Codex);
        assert_eq!(Agent::of(&["llm".into()]), Agent::Llm);
        assert_eq!(Agent::of(&["aider".into()]), Agent::Other);
    }
}
