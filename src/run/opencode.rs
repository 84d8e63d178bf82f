//! opencode pointed at mcptape. opencode merges its config from many files (the user's,
//! `OPENCODE_CONFIG`, the project's `opencode.json[c]` up to the worktree's root, `.opencode`
//! folders) and last from `OPENCODE_CONFIG_CONTENT`, inline JSON that outranks all of them but
//! an administrator's managed config. So nothing is rewritten in place: `run` reads the files
//! as opencode 1.18 reads them, works out each MCP server's entry and the model's provider, and
//! gives opencode an inline config (the user's own `OPENCODE_CONFIG_CONTENT` with the overrides
//! merged in) where each local server's `command` goes through mcptape, each remote server's
//! `url` is mcptape's, and the provider's `options.baseURL` is the model proxy's.

use super::agent::{config_err, split_base, Plan, PrepareError, Prepared};
use super::config::{self, Rewritten};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The folder of opencode's managed (administrator's) config, which outranks the inline one.
const MANAGED_DIR: &str = if cfg!(target_os = "macos") {
    "/Library/Application Support/opencode"
} else {
    "/etc/opencode"
};

/// The inline config opencode reads last (and `run` gives it).
const INLINE: &str = "OPENCODE_CONFIG_CONTENT";

/// opencode: its config read, the overrides given as `OPENCODE_CONFIG_CONTENT`.
pub(super) fn prepare(command: &[String], plan: &Plan<'_>) -> Result<Prepared, PrepareError> {
    prepare_in(command, plan, &|k: &str| {
        std::env::var(k).ok().filter(|v| !v.is_empty())
    })
}

/// [`prepare`] with the environment `env` gives (a variable set to nothing is unset).
fn prepare_in(
    command: &[String],
    plan: &Plan<'_>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Prepared, PrepareError> {
    let mut merged = Value::Object(Map::new());
    for file in config_files(plan.cwd, plan.home, env) {
        if let Some(doc) = read(&file, env)? {
            deep_merge(&mut merged, doc);
        }
    }
    let inline_path = Path::new(INLINE);
    let inline = match env(INLINE) {
        Some(text) => config::parse_config(&substitute(&text, env), true)
            .map_err(|e| config_err(inline_path, e))?,
        None => Value::Object(Map::new()),
    };
    deep_merge(&mut merged, inline.clone());
    let mut p = Prepared {
        argv: command.to_vec(),
        ..Prepared::default()
    };
    let mut overrides = Map::new();
    let (servers, rewritten) = rewrite_servers(&merged, plan);
    if !servers.is_empty() {
        overrides.insert("mcp".into(), Value::Object(servers));
    }
    p.servers = rewritten;
    let managed = managed_config(env);
    if let Some(url) = plan.model_url {
        let model = model_flag(command).or_else(|| {
            merged
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        match model.as_deref().and_then(|m| m.split_once('/')) {
            Some((provider, _)) => {
                match provider_base(&merged, provider, env) {
                    Some(base) => {
                        let (upstream, prefix) = split_base(&base);
                        p.upstream = Some(upstream);
                        overrides.insert(
                            "provider".into(),
                            json!({provider: {"options": {"baseURL": format!("{url}{prefix}")}}}),
                        );
                    }
                    None => crate::diag!(
                        "mcptape run: WARNING: opencode's provider {provider} has no options.baseURL in its config and is not one whose default mcptape knows (anthropic, openai, google): its model calls are not pointed at the tape"
                    ),
                }
                warn_managed_base(&managed, provider);
            }
            None => crate::diag!(
                "mcptape run: WARNING: no model named for opencode (`-m provider/model`, or `model` in its config): its model calls are not pointed at the tape"
            ),
        }
    }
    warn_managed_servers(&managed);
    if !overrides.is_empty() {
        let mut out = inline;
        deep_merge(&mut out, Value::Object(overrides));
        p.env.push((INLINE.into(), out.to_string()));
    }
    Ok(p)
}

/// The `-m`/`--model` of opencode's command line (`provider/model`).
fn model_flag(command: &[String]) -> Option<String> {
    let mut it = command.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "-m" || a == "--model" {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix("--model=") {
            return Some(v.to_string());
        }
    }
    None
}

/// The config files opencode 1.18 merges before its inline config, lowest rank first: the
/// user's (`config.json`, `opencode.json`, `opencode.jsonc` in `$XDG_CONFIG_HOME/opencode`),
/// `OPENCODE_CONFIG`, the project's `opencode.json[c]` from the worktree's root down to the
/// working folder (unless `OPENCODE_DISABLE_PROJECT_CONFIG`), then the `opencode.json[c]` of
/// each `.opencode` folder (the working folder's up to the worktree's root, then the home
/// folder's) and of `OPENCODE_CONFIG_DIR`.
fn config_files(
    cwd: &Path,
    home: Option<&Path>,
    env: &impl Fn(&str) -> Option<String>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let global = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".config")))
        .map(|c| c.join("opencode"));
    if let Some(g) = &global {
        for name in ["config.json", "opencode.json", "opencode.jsonc"] {
            out.push(g.join(name));
        }
    }
    if let Some(custom) = env("OPENCODE_CONFIG") {
        out.push(cwd.join(custom));
    }
    let project = !env("OPENCODE_DISABLE_PROJECT_CONFIG").is_some_and(|v| truthy(&v));
    let up = up_to_worktree(cwd);
    if project {
        // Found child first, each folder's `.jsonc` before its `.json`; merged reversed.
        let mut found: Vec<PathBuf> = up
            .iter()
            .flat_map(|d| [d.join("opencode.jsonc"), d.join("opencode.json")])
            .collect();
        found.reverse();
        out.extend(found);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if project {
        dirs.extend(up.iter().map(|d| d.join(".opencode")));
    }
    dirs.extend(home.map(|h| h.join(".opencode")));
    let config_dir = env("OPENCODE_CONFIG_DIR").map(PathBuf::from);
    dirs.extend(config_dir.clone());
    let mut seen: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if seen.contains(&d) || global.as_ref() == Some(&d) && config_dir.as_ref() != Some(&d) {
            continue;
        }
        seen.push(d.clone());
        out.push(d.join("opencode.json"));
        out.push(d.join("opencode.jsonc"));
    }
    out
}

/// The working folder and each folder above it up to the worktree's root (the nearest with a
/// `.git`; without one, up to `/`, as opencode takes a folder outside git).
fn up_to_worktree(cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in cwd.ancestors() {
        out.push(d.to_path_buf());
        if d.join(".git").exists() {
            break;
        }
    }
    out
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true")
}

/// A config file as opencode reads it (JSON with comments, `{env:NAME}` replaced); `None`
/// when there is none.
fn read(file: &Path, env: &impl Fn(&str) -> Option<String>) -> Result<Option<Value>, PrepareError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(config_err(file, e)),
    };
    config::parse_config(&substitute(&text, env), true)
        .map(Some)
        .map_err(|e| config_err(file, e))
}

/// `{env:NAME}` replaced by the variable's value (nothing when it is unset), as opencode does
/// before it parses a config.
fn substitute(text: &str, env: &impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{env:") {
        let after = &rest[i + 5..];
        let Some(j) = after.find('}').filter(|&j| j > 0) else {
            break;
        };
        out.push_str(&rest[..i]);
        out.push_str(&env(&after[..j]).unwrap_or_default());
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    out
}

/// `over` merged into `base` as opencode merges configs: objects key by key, anything else
/// (arrays too) replaced.
fn deep_merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => deep_merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The overrides of the merged config's `mcp` servers: a local server's `command` through
/// mcptape, a remote server's `url` mcptape's (where the run proxies it), each with its `type`
/// (opencode checks every config source as a whole entry; the rest of the entry merges in from
/// the files). Servers turned off (`enabled: false`) are left alone.
fn rewrite_servers(merged: &Value, plan: &Plan<'_>) -> (Map<String, Value>, Rewritten) {
    let mut out = Map::new();
    let mut r = Rewritten::default();
    let Some(Value::Object(servers)) = merged.get("mcp") else {
        return (out, r);
    };
    for (name, entry) in servers {
        if entry.get("enabled") == Some(&Value::Bool(false)) {
            continue;
        }
        match entry.get("type").and_then(Value::as_str) {
            Some("local") => {
                let Some(words) = entry.get("command").and_then(Value::as_array) else {
                    continue;
                };
                let words: Vec<String> = words
                    .iter()
                    .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_string))
                    .collect();
                let Some((command, args)) = words.split_first() else {
                    continue;
                };
                let (exe, argv) = plan.through.argv(name, command, args);
                let mut line = vec![exe];
                line.extend(argv);
                out.insert(name.clone(), json!({"type": "local", "command": line}));
                r.stdio.push(name.clone());
            }
            Some("remote") => {
                let Some(url) = entry.get("url").and_then(Value::as_str) else {
                    continue;
                };
                match (plan.http)(name, url) {
                    Some(ours) => {
                        out.insert(name.clone(), json!({"type": "remote", "url": ours}));
                        r.http_through.push(name.clone());
                    }
                    None => r.http.push(name.clone()),
                }
            }
            _ => {}
        }
    }
    (out, r)
}

/// Where the model's provider sends its requests: its `options.baseURL`, else for the
/// providers opencode builds in with the AI SDK their base URL from the environment or their
/// default. `None`: a provider whose URL opencode takes from its models catalogue.
fn provider_base(
    merged: &Value,
    provider: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let own = merged
        .pointer(&format!(
            "/provider/{}/options/baseURL",
            pointer_token(provider)
        ))
        .and_then(Value::as_str)
        .map(str::to_string);
    own.or_else(|| match provider {
        "anthropic" => {
            Some(env("ANTHROPIC_BASE_URL").unwrap_or_else(|| "https://api.anthropic.com/v1".into()))
        }
        "openai" => {
            Some(env("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()))
        }
        "google" => Some(
            env("GOOGLE_GENERATIVE_AI_BASE_URL")
                .unwrap_or_else(|| "https://generativelanguage.googleapis.com/v1beta".into()),
        ),
        _ => None,
    })
}

/// `s` as one token of a JSON pointer.
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// opencode's managed config (`OPENCODE_TEST_MANAGED_CONFIG_DIR`, as opencode takes it, else
/// [`MANAGED_DIR`]): its files, merged, with their paths.
fn managed_config(env: &impl Fn(&str) -> Option<String>) -> Option<(Value, Vec<PathBuf>)> {
    let dir = env("OPENCODE_TEST_MANAGED_CONFIG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(MANAGED_DIR));
    let mut merged = Value::Object(Map::new());
    let mut files = Vec::new();
    for name in ["opencode.json", "opencode.jsonc"] {
        let file = dir.join(name);
        if let Ok(Some(doc)) = read(&file, env) {
            deep_merge(&mut merged, doc);
            files.push(file);
        }
    }
    (!files.is_empty()).then_some((merged, files))
}

fn shown(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A base URL for `provider` in the managed config outranks the proxy's: said before the run.
fn warn_managed_base(managed: &Option<(Value, Vec<PathBuf>)>, provider: &str) -> bool {
    let Some((doc, files)) = managed else {
        return false;
    };
    let path = format!("/provider/{}/options/baseURL", pointer_token(provider));
    let Some(base) = doc.pointer(&path).and_then(Value::as_str) else {
        return false;
    };
    crate::diag!(
        "mcptape run: WARNING: opencode's managed config ({}) sets provider.{provider}.options.baseURL to {base}, which outranks anything mcptape can give it: its model calls are not taped",
        shown(files)
    );
    true
}

/// MCP servers the managed config sets outrank the overrides: named before the run, as what
/// it sets of them (their command, their URL) wins over mcptape's.
fn warn_managed_servers(managed: &Option<(Value, Vec<PathBuf>)>) -> Vec<String> {
    let Some((doc, files)) = managed else {
        return Vec::new();
    };
    let Some(Value::Object(entries)) = doc.get("mcp") else {
        return Vec::new();
    };
    let names: Vec<String> = entries.keys().cloned().collect();
    if names.is_empty() {
        return names;
    }
    crate::diag!(
        "mcptape run: WARNING: opencode's managed config ({}) sets the MCP servers {}, which outrank anything mcptape can give it: what it sets of them runs past the tape",
        shown(files),
        names.join(", ")
    );
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::config::Through;
    use std::collections::HashMap;

    struct Bed {
        dir: tempfile::TempDir,
        through: Through,
    }

    impl Bed {
        fn new() -> Bed {
            let dir = tempfile::tempdir().unwrap();
            let through = Through::Record {
                exe: "/bin/mcptape".into(),
                socket: dir.path().join("join.sock"),
            };
            Bed { dir, through }
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn write(&self, rel: &str, text: &str) {
            let p = self.path(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }

        /// `prepare` run in `proj/sub` with home `home`, the environment `vars` and the model
        /// proxy at `http://127.0.0.1:9`; its inline config and what it prepared.
        fn prepare(&self, argv: &[&str], vars: &[(&str, &str)]) -> (Value, Prepared) {
            let cwd = self.path("proj/sub");
            std::fs::create_dir_all(&cwd).unwrap();
            let home = self.path("home");
            let vars: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let ours = |name: &str, _url: &str| Some(format!("http://127.0.0.1:7/{name}"));
            let plan = Plan {
                model_url: Some("http://127.0.0.1:9"),
                through: &self.through,
                temp: self.dir.path(),
                stable: &self.path("stable"),
                journal: &self.path("journal"),
                cwd: &cwd,
                http: &ours,
                home: Some(&home),
                claude_managed: &self.path("claude-managed"),
            };
            let mut env = vars.clone();
            env.entry("OPENCODE_TEST_MANAGED_CONFIG_DIR".into())
                .or_insert_with(|| self.path("managed").display().to_string());
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            let p = prepare_in(&argv, &plan, &|k: &str| env.get(k).cloned()).unwrap();
            let inline = p
                .env
                .iter()
                .find(|(k, _)| k == INLINE)
                .map(|(_, v)| serde_json::from_str(v).unwrap())
                .unwrap_or(Value::Null);
            (inline, p)
        }
    }

    /// Every source opencode merges, in its order: the later one's entry is the one rewritten,
    /// a server turned off is left alone, the project's files up to the worktree's root.
    #[test]
    fn servers_from_every_source_are_rewritten_as_opencode_merges_them() {
        let bed = Bed::new();
        bed.write(
            "home/.config/opencode/opencode.json",
            r#"{"mcp": {"a": {"type": "local", "command": ["old-a"]}, "off": {"type": "local", "command": ["x"], "enabled": false}}, "model": "anthropic/claude-x"}"#,
        );
        // The project's root (a git worktree) and the working folder below it, with comments.
        std::fs::create_dir_all(bed.path("proj/.git")).unwrap();
        bed.write(
            "proj/opencode.jsonc",
            "{ // the team's\n \"mcp\": {\"a\": {\"type\": \"local\", \"command\": [\"team-a\", \"--x\"]}, \"web\": {\"type\": \"remote\", \"url\": \"https://mcp.example/{env:TEAM}\"}},\n}",
        );
        bed.write(
            "proj/sub/.opencode/opencode.json",
            r#"{"mcp": {"b": {"type": "local", "command": ["b", "{env:B_ARG}"], "environment": {"K": "v"}}}}"#,
        );
        // Above the worktree: not read.
        bed.write(
            "opencode.json",
            r#"{"mcp": {"outside": {"type": "local", "command": ["no"]}}}"#,
        );
        let (inline, p) = bed.prepare(
            &["opencode", "run", "hi"],
            &[("TEAM", "t1"), ("B_ARG", "--fast")],
        );
        let mcp = &inline["mcp"];
        assert_eq!(
            mcp["a"],
            json!({"type": "local", "command": ["/bin/mcptape", "record", "--join", bed.path("join.sock").display().to_string(), "--label", "a", "--", "team-a", "--x"]})
        );
        assert_eq!(mcp["b"]["command"][7], "b");
        assert_eq!(mcp["b"]["command"][8], "--fast", "{{env:}} replaced");
        assert!(
            mcp["b"].get("environment").is_none(),
            "merged in by opencode"
        );
        assert_eq!(
            mcp["web"],
            json!({"type": "remote", "url": "http://127.0.0.1:7/web"})
        );
        assert!(
            mcp.get("off").is_none() && mcp.get("outside").is_none(),
            "{mcp}"
        );
        assert_eq!(p.servers.stdio, ["a", "b"]);
        assert_eq!(p.servers.http_through, ["web"]);
        // The model's provider: the AI SDK's default base URL, its `/v1` kept.
        assert_eq!(
            inline["provider"],
            json!({"anthropic": {"options": {"baseURL": "http://127.0.0.1:9/v1"}}})
        );
        assert_eq!(p.upstream.as_deref(), Some("https://api.anthropic.com"));
        assert!(p.in_place.is_empty(), "no file touched");
    }

    /// The user's own inline config stays (merged under the overrides); `-m` outranks the
    /// config's model; a provider's own base URL is the upstream; project files can be off.
    #[test]
    fn the_users_inline_config_and_model_flag_and_base_url_are_kept() {
        let bed = Bed::new();
        bed.write(
            "proj/sub/opencode.json",
            r#"{"mcp": {"p": {"type": "local", "command": ["p"]}}, "provider": {"openai": {"options": {"baseURL": "https://gw.example/openai/v1", "apiKey": "{env:KEY}"}}}}"#,
        );
        let user = r#"{"theme": "dark", "provider": {"openai": {"options": {"timeout": 5}}}}"#;
        let (inline, p) = bed.prepare(
            &["opencode", "run", "--model", "openai/gpt-5", "hi"],
            &[(INLINE, user)],
        );
        assert_eq!(inline["theme"], "dark");
        assert_eq!(
            inline["provider"]["openai"]["options"],
            json!({"timeout": 5, "baseURL": "http://127.0.0.1:9/openai/v1"})
        );
        assert_eq!(p.upstream.as_deref(), Some("https://gw.example"));
        assert_eq!(p.servers.stdio, ["p"]);
        let (inline, p) = bed.prepare(
            &["opencode", "-m", "openai/gpt-5"],
            &[("OPENCODE_DISABLE_PROJECT_CONFIG", "true")],
        );
        assert!(inline.get("mcp").is_none() && p.servers.stdio.is_empty());
        assert_eq!(p.upstream.as_deref(), Some("https://api.openai.com"));
    }

    /// No model named, or a provider whose URL comes from opencode's catalogue: not pointed
    /// (and said so), the servers still are.
    #[test]
    fn a_model_that_cannot_be_pointed_is_left_alone() {
        let bed = Bed::new();
        bed.write(
            "proj/opencode.json",
            r#"{"mcp": {"s": {"type": "local", "command": ["s"]}}}"#,
        );
        for argv in [&["opencode"][..], &["opencode", "-m", "openrouter/x"]] {
            let (inline, p) = bed.prepare(argv, &[]);
            assert!(inline.get("provider").is_none(), "{inline}");
            assert_eq!(p.upstream, None);
            assert_eq!(p.servers.stdio, ["s"]);
        }
    }

    /// The managed config outranks the inline one: its servers and base URL are named.
    #[test]
    fn the_managed_config_is_named() {
        let bed = Bed::new();
        let dir = bed.path("managed").display().to_string();
        let env = |k: &str| (k == "OPENCODE_TEST_MANAGED_CONFIG_DIR").then(|| dir.clone());
        assert!(managed_config(&env).is_none(), "no managed config");
        bed.write(
            "managed/opencode.json",
            r#"{"mcp": {"corp": {"type": "remote", "url": "https://corp"}}, "provider": {"anthropic": {"options": {"baseURL": "https://gw.corp/v1"}}}}"#,
        );
        let managed = managed_config(&env);
        assert_eq!(warn_managed_servers(&managed), ["corp"]);
        assert!(warn_managed_base(&managed, "anthropic"));
        assert!(!warn_managed_base(&managed, "openai"));
    }

    /// A config opencode cannot read is an error naming the file and where in it.
    #[test]
    fn a_broken_config_names_its_file() {
        let bed = Bed::new();
        bed.write("proj/sub/opencode.json", "{\"mcp\": {\n  \"s\": }\n}");
        let cwd = bed.path("proj/sub");
        let err = read(&cwd.join("opencode.json"), &|_: &str| None).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("proj/sub/opencode.json") && shown.contains("line 2"),
            "{shown}"
        );
    }

    #[test]
    fn env_references_are_replaced_as_opencode_replaces_them() {
        let env = |k: &str| (k == "A").then(|| "1".to_string());
        assert_eq!(substitute("x{env:A}y{env:B}z", &env), "x1yz");
        assert_eq!(substitute("{env:}{env:A", &env), "{env:}{env:A");
    }
}
