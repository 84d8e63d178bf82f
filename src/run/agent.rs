//! Pointing an agent at mcptape without touching the user's files where the agent allows it:
//! which agent a command line starts, where it reads its model's base URL and its MCP servers,
//! and the command line, environment and temporary files that send both through mcptape.

use super::claude_dir::{self, Borrowed};
use super::config::{self, InPlace, Rewritten, Through};
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
    /// Anything else: `ANTHROPIC_BASE_URL` and `OPENAI_BASE_URL`, and `--mcp-config` or a
    /// project `.mcp.json` when there is one.
    Other,
}

impl Agent {
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

fn config_err(path: &Path, why: impl std::fmt::Display) -> PrepareError {
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
}

/// The base URL split into what the upstream is (scheme and host) and the path prefix the
/// client puts in front of its paths (`https://api.openai.com/v1` → (`https://api.openai.com`,
/// `/v1`)).
fn split_base(url: &str) -> (String, String) {
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
        Agent::Codex => prepare_codex(command, plan),
        _ => prepare_json_agent(agent, command, plan),
    }
}

/// Every agent but Codex: the model's base URL from the environment (none for the GUI
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
    let mut gemini_sign_in = None;
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
            let own_base = env("GOOGLE_GEMINI_BASE_URL");
            if own_base.is_none() {
                // Pointing it is setting GOOGLE_GEMINI_BASE_URL, which Gemini CLI also reads as
                // the sign-in to use when its settings name none: "gateway", refused ("Invalid
                // auth method selected."). The sign-in its environment gave it is written into
                // the user's settings for the run (below).
                gemini_sign_in = gemini_env_auth_type(&env);
            }
            p.upstream = Some(
                own_base.unwrap_or_else(|| "https://generativelanguage.googleapis.com".to_string()),
            );
            p.env
                .push(("GOOGLE_GEMINI_BASE_URL".into(), url.to_string()));
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
    rewrite_mcp_config_flags(&mut p, plan)?;
    let flag_only = p.argv.iter().any(|a| a == "--strict-mcp-config");
    let mut files = config_files(agent, plan.cwd, plan.home);
    // Run in the home folder, a project's file is the user's: rewritten once.
    files.dedup_by(|a, b| same_file(a, b));
    if gemini_sign_in.is_some() && files.iter().any(|f| names_gemini_sign_in(f)) {
        gemini_sign_in = None;
    }
    // Gemini CLI's user settings get the sign-in (none without a home folder).
    let user_settings = gemini_home(plan.home)
        .map(|h| h.join(".gemini/settings.json"))
        .filter(|_| gemini_sign_in.is_some());
    for file in files {
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
        if flag_only && sign_in.is_none() {
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(|e| config_err(&file, e))?;
        let mut json: Value = serde_json::from_str(&text).map_err(|e| config_err(&file, e))?;
        let r = if flag_only {
            config::Rewritten::default()
        } else {
            config::rewrite_json(&mut json, plan.through, plan.http)
        };
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
        borrow_claude_dir(&mut p, plan)?;
    }
    Ok(p)
}

/// Claude Code's user- and local-scope servers (`.claude.json`): its config folder borrowed
/// for the run (see [`claude_dir`]), `CLAUDE_CONFIG_DIR` pointing at the borrowed one (at
/// the stable folder: the same path for every run of a tape).
fn borrow_claude_dir(p: &mut Prepared, plan: &Plan<'_>) -> Result<(), PrepareError> {
    let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from);
    let Some(real) = claude_dir::Home::locate(config_dir.as_deref(), plan.home) else {
        return Ok(());
    };
    let state = real.state.clone();
    let Some((borrowed, servers)) =
        claude_dir::borrow(real, plan.stable, plan.cwd, plan.through, plan.http)
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
        Agent::Codex => {}
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
        let own = p
            .argv
            .iter()
            .any(|a| a == "--settings" || a.starts_with("--settings="));
        match claude_settings_base_url(plan.cwd, config_dir.as_deref(), plan.home) {
            Some(_) if own => crate::diag!(
                "mcptape run: WARNING: Claude Code's settings set env.ANTHROPIC_BASE_URL and its command line has a --settings of its own, which mcptape leaves alone: unless that sets env.ANTHROPIC_BASE_URL to mcptape's, its model calls bypass the tape"
            ),
            Some(base) => {
                p.upstream = Some(base);
                let settings = serde_json::json!({"env": {"ANTHROPIC_BASE_URL": url}});
                p.argv
                    .splice(1..1, ["--settings".to_string(), settings.to_string()]);
            }
            None => {}
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
fn rewrite_mcp_config_flags(p: &mut Prepared, plan: &Plan<'_>) -> Result<(), PrepareError> {
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
            let r = config::rewrite_json(&mut json, plan.through, plan.http);
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
}

/// Codex: a temporary `CODEX_HOME` holding a rewritten copy of its `config.toml` (with the
/// command line's `-c` overrides folded in): the model through a provider of mcptape's
/// (Responses), the MCP servers through mcptape; `auth.json` copied. Codex ignores
/// `OPENAI_BASE_URL`, so the provider is the only way.
fn prepare_codex(command: &[String], plan: &Plan<'_>) -> Result<Prepared, PrepareError> {
    let home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| plan.home.map(|h| h.join(".codex")))
        .unwrap_or_else(|| PathBuf::from(".codex"));
    let file = home.join("config.toml");
    let mut cfg: toml::Table = match std::fs::read_to_string(&file) {
        Ok(text) => text.parse().map_err(|e| config_err(&file, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => return Err(config_err(&file, e)),
    };
    // `-c key=value` overrides are folded into the copy (and taken off the command line), so
    // the rewritten entries are the ones Codex sees.
    let mut argv = vec![command[0].clone()];
    let mut i = 1;
    while i < command.len() {
        let a = &command[i];
        let value = if a == "-c" || a == "--config" {
            i += 1;
            command.get(i).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_string)
        };
        match value {
            Some(v) => config::apply_override(&mut cfg, &v)
                .map_err(|why| config_err(Path::new("codex -c"), why))?,
            None => argv.push(a.clone()),
        }
        i += 1;
    }
    let mut p = Prepared {
        argv,
        ..Prepared::default()
    };
    if let Some(url) = plan.model_url {
        let auth = read_codex_auth(&home.join("auth.json"))?;
        // Codex reads CODEX_API_KEY in `codex exec` only (its TUI signs in from auth.json).
        let exec = p.argv.iter().skip(1).any(|a| a == "exec" || a == "e");
        let api_key_env =
            exec && std::env::var("CODEX_API_KEY").is_ok_and(|k| !k.trim().is_empty());
        let (provider, base) = codex_provider(&cfg, CodexAuth::of(auth.as_deref(), api_key_env));
        let (upstream, prefix) = split_base(&base);
        p.upstream = Some(upstream);
        let mut provider = provider;
        provider.insert("base_url".into(), format!("{url}{prefix}").into());
        provider.insert("wire_api".into(), "responses".into());
        let providers = cfg
            .entry("model_providers")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let Some(t) = providers.as_table_mut() {
            t.insert("mcptape".into(), toml::Value::Table(provider));
        }
        cfg.insert("model_provider".into(), "mcptape".into());
    }
    p.servers = config::rewrite_toml(&mut cfg, plan.through, plan.http);
    let temp_home = plan.stable.to_path_buf();
    config::fresh_private_dir(&temp_home).map_err(|e| config_err(&temp_home, e))?;
    let out = temp_home.join("config.toml");
    std::fs::write(
        &out,
        toml::to_string(&cfg).map_err(|e| config_err(&out, e))?,
    )
    .map_err(|e| config_err(&out, e))?;
    link_codex_auth(&home.join("auth.json"), &temp_home.join("auth.json"))?;
    p.env
        .push(("CODEX_HOME".into(), temp_home.display().to_string()));
    Ok(p)
}

/// How Codex signs in, as far as where its built-in `openai` provider sends requests goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CodexAuth {
    /// An API key (`codex login --with-api-key`, `CODEX_API_KEY`), or no login at all:
    /// `https://api.openai.com/v1`.
    ApiKey,
    /// A ChatGPT login (`codex login`): `https://chatgpt.com/backend-api/codex`.
    ChatGpt,
}

impl CodexAuth {
    /// The mode Codex resolves from its `auth.json` (its text, when there is one) as Codex
    /// does: the file's `auth_mode`, else an API key in it, else its ChatGPT tokens. A
    /// `CODEX_API_KEY` in the environment is an API key whatever the file holds.
    fn of(auth_json: Option<&str>, api_key_env: bool) -> CodexAuth {
        if api_key_env {
            return CodexAuth::ApiKey;
        }
        let Some(doc) = auth_json.and_then(|t| serde_json::from_str::<Value>(t).ok()) else {
            return CodexAuth::ApiKey;
        };
        match doc.get("auth_mode").and_then(Value::as_str) {
            Some("api_key" | "apikey" | "apiKey") => return CodexAuth::ApiKey,
            Some("chatgpt" | "chatgpt_auth_tokens" | "chatgptAuthTokens") => {
                return CodexAuth::ChatGpt
            }
            _ => {}
        }
        match doc.get("OPENAI_API_KEY") {
            Some(Value::String(_)) => CodexAuth::ApiKey,
            _ => CodexAuth::ChatGpt,
        }
    }

    /// Where a provider with no `base_url` of its own sends requests in this mode.
    fn default_base(self) -> &'static str {
        match self {
            CodexAuth::ApiKey => "https://api.openai.com/v1",
            CodexAuth::ChatGpt => "https://chatgpt.com/backend-api/codex",
        }
    }
}

/// The text of Codex's `auth.json` (`None`: there is none).
fn read_codex_auth(path: &Path) -> Result<Option<String>, PrepareError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(config_err(path, e)),
    }
}

/// The provider Codex would use under `cfg` (its `model_provider`, the built-in `openai` by
/// default), as a table mcptape can point elsewhere, and the base URL it would send requests
/// to. The built-in is spelled out as Codex defines it: signed in from `auth.json` (an API
/// key or a ChatGPT login, or `CODEX_API_KEY`; not `OPENAI_API_KEY` from the environment,
/// which Codex's own `openai` provider does not send either), its organization and project
/// headers from the environment, and its base URL from `openai_base_url` or the sign-in mode.
fn codex_provider(cfg: &toml::Table, auth: CodexAuth) -> (toml::Table, String) {
    let id = cfg
        .get("model_provider")
        .and_then(|v| v.as_str())
        .unwrap_or("openai");
    // A `[model_providers.openai]` of the user's never replaces Codex's built-in one (0.171
    // refuses such a config: "Built-in providers cannot be overridden"): not read here either.
    let configured = cfg
        .get("model_providers")
        .and_then(|t| t.get(id))
        .and_then(|v| v.as_table())
        .filter(|_| id != "openai")
        .cloned();
    let provider = configured.unwrap_or_else(|| {
        let mut t = toml::Table::new();
        // The name is what Codex checks to treat a provider as OpenAI's (remote compaction,
        // compressed requests): kept, so the agent behaves as it does without mcptape.
        t.insert("name".into(), "OpenAI".into());
        t.insert("requires_openai_auth".into(), true.into());
        let mut headers = toml::Table::new();
        headers.insert("OpenAI-Organization".into(), "OPENAI_ORGANIZATION".into());
        headers.insert("OpenAI-Project".into(), "OPENAI_PROJECT".into());
        t.insert("env_http_headers".into(), toml::Value::Table(headers));
        t
    });
    let base = provider
        .get("base_url")
        .and_then(|v| v.as_str())
        .or_else(|| {
            // Only the built-in reads `openai_base_url`.
            (id == "openai")
                .then(|| cfg.get("openai_base_url").and_then(|v| v.as_str()))
                .flatten()
        })
        .unwrap_or(auth.default_base())
        .to_string();
    (provider, base)
}

/// Codex's `auth.json` in the temporary `CODEX_HOME`: a link to the user's, so Codex reads
/// the login from it and a token it refreshes during the run is written back there (a copy
/// would keep the new token and leave the user's file with a refresh token already used).
fn link_codex_auth(auth: &Path, link: &Path) -> Result<(), PrepareError> {
    if !auth.exists() {
        return Ok(());
    }
    let target = std::path::absolute(auth).map_err(|e| config_err(auth, e))?;
    #[cfg(unix)]
    let linked = std::os::unix::fs::symlink(&target, link);
    #[cfg(not(unix))]
    let linked = std::fs::copy(&target, link).map(|_| ());
    linked.map_err(|e| config_err(link, e))
}

/// The sign-in Gemini CLI takes from its environment when its settings name none, as it
/// decides it (0.61's `getAuthTypeFromEnv`) with `GOOGLE_GEMINI_BASE_URL` unset.
fn gemini_env_auth_type(env: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    let on = |k: &str| env(k).is_some_and(|v| v == "true");
    if on("GOOGLE_GENAI_USE_GCA") {
        Some("oauth-personal")
    } else if on("GOOGLE_GENAI_USE_VERTEXAI") {
        Some("vertex-ai")
    } else if env("GEMINI_API_KEY").is_some_and(|k| !k.is_empty()) {
        Some("gemini-api-key")
    } else if on("CLOUD_SHELL") || on("GEMINI_CLI_USE_COMPUTE_ADC") {
        Some("compute-default-credentials")
    } else {
        None
    }
}

/// The folder Gemini CLI keeps `.gemini` in: `GEMINI_CLI_HOME`, else the home folder.
fn gemini_home(home: Option<&Path>) -> Option<PathBuf> {
    std::env::var_os("GEMINI_CLI_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(Path::to_path_buf))
}

/// Whether two paths name one file (through links, when it exists).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether the Gemini CLI settings file `path` names a sign-in (`security.auth.selectedType`).
/// A file that cannot be read as JSON names none here; reading it for its servers says why.
fn names_gemini_sign_in(path: &Path) -> bool {
    let named = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|t| !t.is_empty());
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| {
            // `selectedAuthType`: the key before settings had sections, still migrated.
            named(v.pointer("/security/auth/selectedType")) || named(v.get("selectedAuthType"))
        })
}

/// The variables of the `.env` file Gemini CLI loads (variables already set win over it): the
/// first of `.gemini/.env` and `.env` in the working folder and each folder above it, else
/// `~/.gemini/.env`, else `~/.env`.
fn gemini_dotenv(cwd: &Path, home: Option<&Path>) -> Vec<(String, String)> {
    let mut candidates = Vec::new();
    for dir in cwd.ancestors() {
        candidates.push(dir.join(".gemini/.env"));
        candidates.push(dir.join(".env"));
    }
    if let Some(h) = home {
        candidates.push(h.join(".gemini/.env"));
        candidates.push(h.join(".env"));
    }
    let Some(text) = candidates
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
    else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            if line.starts_with('#') {
                return None;
            }
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// Gemini CLI settings `doc` with `security.auth.selectedType` set to `kind` (the rest kept; a
/// `security` or `auth` that is not an object is replaced, as Gemini CLI could not read it).
fn gemini_auth(mut doc: Value, kind: &str) -> Value {
    if !doc.is_object() {
        doc = Value::Object(Default::default());
    }
    let mut at = &mut doc;
    for key in ["security", "auth"] {
        let map = at.as_object_mut().expect("an object");
        let entry = map
            .entry(key)
            .or_insert_with(|| Value::Object(Default::default()));
        if !entry.is_object() {
            *entry = Value::Object(Default::default());
        }
        at = entry;
    }
    at.as_object_mut()
        .expect("an object")
        .insert("selectedType".into(), Value::String(kind.into()));
    doc
}

/// The `env.ANTHROPIC_BASE_URL` Claude Code's settings files set, the one that wins: the
/// project's local settings, then the project's, then the user's (in `config_dir`, else
/// `~/.claude`).
fn claude_settings_base_url(
    cwd: &Path,
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> Option<String> {
    let user = config_dir
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".claude")));
    [
        Some(cwd.join(".claude/settings.local.json")),
        Some(cwd.join(".claude/settings.json")),
        user.map(|d| d.join("settings.json")),
    ]
    .into_iter()
    .flatten()
    .find_map(|f| {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok()?;
        doc.pointer("/env/ANTHROPIC_BASE_URL")?
            .as_str()
            .filter(|u| !u.is_empty())
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codex's sign-in mode, read from its `auth.json` as Codex reads it.
    #[test]
    fn codex_sign_in_is_read_from_auth_json_as_codex_reads_it() {
        let chatgpt = r#"{"OPENAI_API_KEY":null,"tokens":{"id_token":"x","access_token":"y","refresh_token":"z","account_id":"a"},"last_refresh":"2026-12-01T00:00:00Z"}"#;
        let cases: &[(Option<&str>, bool, CodexAuth)] = &[
            (None, false, CodexAuth::ApiKey),
            (
                Some(r#"{"OPENAI_API_KEY":"sk-1"}"#),
                false,
                CodexAuth::ApiKey,
            ),
            (Some(chatgpt), false, CodexAuth::ChatGpt),
            (Some(chatgpt), true, CodexAuth::ApiKey),
            (
                Some(r#"{"auth_mode":"chatgpt","OPENAI_API_KEY":"sk-1"}"#),
                false,
                CodexAuth::ChatGpt,
            ),
            (
                Some(r#"{"auth_mode":"api_key","tokens":{}}"#),
                false,
                CodexAuth::ApiKey,
            ),
            (Some("not json"), false, CodexAuth::ApiKey),
        ];
        for (auth, env, want) in cases {
            assert_eq!(CodexAuth::of(*auth, *env), *want, "{auth:?} env {env}");
        }
    }

    /// The built-in `openai` provider is spelled out signed in from `auth.json` (not from an
    /// environment variable Codex would not read), at the base URL of the sign-in mode or of
    /// `openai_base_url`; a provider of the user's is kept as it is.
    #[test]
    fn codex_built_in_provider_is_spelled_out_as_codex_defines_it() {
        let (p, base) = codex_provider(&toml::Table::new(), CodexAuth::ApiKey);
        assert_eq!(base, "https://api.openai.com/v1");
        assert_eq!(
            p.get("requires_openai_auth"),
            Some(&toml::Value::Boolean(true))
        );
        assert_eq!(p.get("name").and_then(|v| v.as_str()), Some("OpenAI"));
        assert!(p.get("env_key").is_none(), "{p:?}");
        assert_eq!(
            p["env_http_headers"]["OpenAI-Project"].as_str(),
            Some("OPENAI_PROJECT")
        );
        let (_, base) = codex_provider(&toml::Table::new(), CodexAuth::ChatGpt);
        assert_eq!(base, "https://chatgpt.com/backend-api/codex");
        let cfg: toml::Table = r#"
            [model_providers.openai]
            name = "mine"
            base_url = "https://ignored.example/v1"
        "#
        .parse()
        .unwrap();
        let (p, base) = codex_provider(&cfg, CodexAuth::ApiKey);
        assert_eq!(base, "https://api.openai.com/v1", "Codex's built-in wins");
        assert_eq!(p.get("name").and_then(|v| v.as_str()), Some("OpenAI"));
        let cfg: toml::Table = r#"openai_base_url = "https://gateway.example/openai/v1""#
            .parse()
            .unwrap();
        let (_, base) = codex_provider(&cfg, CodexAuth::ChatGpt);
        assert_eq!(base, "https://gateway.example/openai/v1");
        let cfg: toml::Table = r#"
            model_provider = "corp"
            openai_base_url = "https://not-for-corp.example/v1"
            [model_providers.corp]
            name = "Corp"
            env_key = "CORP_KEY"
            base_url = "https://llm.corp.example/v1"
        "#
        .parse()
        .unwrap();
        let (p, base) = codex_provider(&cfg, CodexAuth::ChatGpt);
        assert_eq!(base, "https://llm.corp.example/v1");
        assert_eq!(p.get("env_key").and_then(|v| v.as_str()), Some("CORP_KEY"));
        assert!(p.get("requires_openai_auth").is_none());
    }

    /// The temporary home's `auth.json` is the user's: a token Codex refreshes during the run
    /// (written in place, as Codex writes it) lands in the user's file.
    #[test]
    fn codex_auth_json_is_linked_so_a_refreshed_token_reaches_the_users_file() {
        let dir = tempfile::tempdir().unwrap();
        let (user, temp) = (dir.path().join("auth.json"), dir.path().join("run"));
        std::fs::create_dir(&temp).unwrap();
        link_codex_auth(&user, &temp.join("auth.json")).unwrap();
        assert!(!temp.join("auth.json").exists(), "no login, no file");
        std::fs::write(&user, r#"{"tokens":{"refresh_token":"old"}}"#).unwrap();
        link_codex_auth(&user, &temp.join("auth.json")).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(temp.join("auth.json"))
            .unwrap();
        std::io::Write::write_all(&mut f, br#"{"tokens":{"refresh_token":"new"}}"#).unwrap();
        drop(f);
        assert_eq!(
            std::fs::read_to_string(&user).unwrap(),
            r#"{"tokens":{"refresh_token":"new"}}"#
        );
    }

    /// Gemini CLI's sign-in from its environment, as it reads it with no base URL set.
    #[test]
    fn gemini_sign_in_is_read_from_the_environment_as_gemini_cli_reads_it() {
        let of = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            gemini_env_auth_type(&move |k: &str| {
                vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
        };
        assert_eq!(of(&[]), None);
        assert_eq!(of(&[("GEMINI_API_KEY", "k")]), Some("gemini-api-key"));
        assert_eq!(of(&[("GEMINI_API_KEY", "")]), None);
        assert_eq!(
            of(&[
                ("GEMINI_API_KEY", "k"),
                ("GOOGLE_GENAI_USE_VERTEXAI", "true")
            ]),
            Some("vertex-ai")
        );
        assert_eq!(
            of(&[("GOOGLE_GENAI_USE_GCA", "true")]),
            Some("oauth-personal")
        );
        assert_eq!(
            of(&[("CLOUD_SHELL", "true")]),
            Some("compute-default-credentials")
        );
    }

    /// The sign-in goes into settings with everything else in them kept.
    #[test]
    fn gemini_sign_in_is_added_to_settings_keeping_the_rest() {
        let doc = serde_json::json!({"ui": {"theme": "X"}, "security": {"folderTrust": {"enabled": false}}});
        let got = gemini_auth(doc, "gemini-api-key");
        assert_eq!(got["ui"]["theme"], "X");
        assert_eq!(got["security"]["folderTrust"]["enabled"], false);
        assert_eq!(got["security"]["auth"]["selectedType"], "gemini-api-key");
        let got = gemini_auth(serde_json::json!({"security": 1}), "vertex-ai");
        assert_eq!(
            got,
            serde_json::json!({"security": {"auth": {"selectedType": "vertex-ai"}}})
        );
    }

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

    /// Gemini CLI's `.env`: the nearest one up from the working folder, else the home's.
    #[test]
    fn gemini_dotenv_is_the_file_gemini_cli_loads() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("proj/sub"), dir.path().join("home"));
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        std::fs::write(home.join(".gemini/.env"), "GEMINI_API_KEY=home-key\n").unwrap();
        assert_eq!(
            gemini_dotenv(&cwd, Some(&home)),
            [("GEMINI_API_KEY".to_string(), "home-key".to_string())]
        );
        std::fs::write(
            dir.path().join("proj/.env"),
            "# keys\nexport GEMINI_API_KEY=\"proj-key\"\nOTHER = 'x'\n",
        )
        .unwrap();
        assert_eq!(
            gemini_dotenv(&cwd, Some(&home)),
            [
                ("GEMINI_API_KEY".to_string(), "proj-key".to_string()),
                ("OTHER".to_string(), "x".to_string())
            ]
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
            // Gemini CLI: settings beside the servers, `httpUrl` for HTTP.
            (
                "home/.gemini/settings.json",
                "{\n  \"theme\": \"Default\",\n  \"telemetry\": {\"enabled\": false},\n  \"mcpServers\": {\n    \"mem\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"], \"trust\": true},\n    \"web\": {\"httpUrl\": \"http://127.0.0.1:9/mcp\"}\n  }\n}\n",
            ),
            // Cursor: `command` or `url`.
            (
                "proj/.cursor/mcp.json",
                "{\"mcpServers\":{\"fs\":{\"command\":\"npx\",\"args\":[\"-y\",\"@modelcontextprotocol/server-filesystem\",\".\"],\"env\":{\"DEBUG\":\"1\"}}}}",
            ),
            // VS Code: `servers` and `inputs`.
            (
                "proj/.vscode/mcp.json",
                "{\n\t\"inputs\": [{\"type\": \"promptString\", \"id\": \"key\", \"password\": true}],\n\t\"servers\": {\"git\": {\"type\": \"stdio\", \"command\": \"uvx\", \"args\": [\"mcp-server-git\"]}}\n}\n",
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
