//! Codex CLI pointed at mcptape: a temporary `CODEX_HOME` with a rewritten copy of its
//! `config.toml`, its built-in `openai` provider spelled out as Codex defines it (signed in
//! from `auth.json`, at the base URL of its sign-in), and its login linked, not copied.

use super::agent::{config_err, split_base, Plan, PrepareError, Prepared};
use super::config;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Codex: a temporary `CODEX_HOME` holding a rewritten copy of its `config.toml` (with the
/// command line's `-c` overrides folded in): the model through a provider of mcptape's
/// (Responses), the MCP servers through mcptape; `auth.json` linked. Codex ignores
/// `OPENAI_BASE_URL`, so the provider is the only way.
pub(super) fn prepare(command: &[String], plan: &Plan<'_>) -> Result<Prepared, PrepareError> {
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
}
