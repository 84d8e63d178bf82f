//! Rewriting an agent's MCP server entries so each stdio server goes through mcptape: recorded
//! into the run's tape (`record --join`), or served from it (`play --server`). The JSON
//! `mcpServers` shape (Claude Code, Cursor, Gemini CLI, Claude Desktop), VS Code's `servers`,
//! and Codex's TOML `[mcp_servers.NAME]`.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What each stdio server entry becomes.
#[derive(Debug, Clone)]
pub enum Through {
    /// `mcptape record --join SOCKET --label NAME -- <command…>`.
    Record {
        /// The mcptape binary.
        exe: PathBuf,
        /// The run's join socket.
        socket: PathBuf,
    },
    /// `mcptape play TAPE --server NAME`: no server process at all.
    Play {
        /// The mcptape binary.
        exe: PathBuf,
        /// The tape.
        tape: PathBuf,
    },
}

impl Through {
    /// The command and arguments for the server `name` started as `command args…`.
    pub fn argv(&self, name: &str, command: &str, args: &[String]) -> (String, Vec<String>) {
        match self {
            Through::Record { exe, socket } => {
                let mut a = vec![
                    "record".to_string(),
                    "--join".into(),
                    socket.display().to_string(),
                    "--label".into(),
                    name.to_string(),
                    "--".into(),
                    command.to_string(),
                ];
                a.extend(args.iter().cloned());
                (exe.display().to_string(), a)
            }
            Through::Play { exe, tape } => (
                exe.display().to_string(),
                vec![
                    "play".into(),
                    tape.display().to_string(),
                    "--server".into(),
                    name.to_string(),
                ],
            ),
        }
    }
}

/// The servers rewritten, by name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rewritten {
    /// Stdio servers now going through mcptape.
    pub stdio: Vec<String>,
    /// HTTP servers now going through mcptape (their URL is one of mcptape's).
    pub http_through: Vec<String>,
    /// HTTP servers left alone: not on the tape.
    pub http: Vec<String>,
    /// Servers left as they are for the agent's own policy ([`Keep`]): not on the tape.
    pub kept: Vec<String>,
}

/// What an HTTP server entry's URL becomes: given the server's name and URL, mcptape's URL for
/// it (`None`: left alone).
pub type HttpHook<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// Which server entries stay as they are, given the server's name and entry: those an agent's
/// own policy would judge differently once rewritten (see `agent::ClaudePolicy`).
pub type Keep<'a> = &'a dyn Fn(&str, &serde_json::Map<String, Value>) -> bool;

fn keep_none(_: &str, _: &serde_json::Map<String, Value>) -> bool {
    false
}

/// Every entry rewritten.
pub const KEEP_NONE: Keep<'static> = &keep_none;

/// The keys an HTTP server entry's URL is under: `url`, Gemini CLI's `httpUrl`, Windsurf's
/// `serverUrl`.
const URL_KEYS: &[&str] = &["url", "httpUrl", "serverUrl"];

/// Rewrites a JSON MCP config in place (`mcpServers`, or VS Code's `servers`).
pub fn rewrite_json(
    config: &mut Value,
    through: &Through,
    http: HttpHook<'_>,
    keep: Keep<'_>,
) -> Rewritten {
    let mut out = Rewritten::default();
    for key in ["mcpServers", "servers"] {
        let Some(Value::Object(servers)) = config.get_mut(key) else {
            continue;
        };
        for (name, entry) in servers.iter_mut() {
            let Value::Object(e) = entry else { continue };
            if keep(name, e) {
                out.kept.push(name.clone());
                continue;
            }
            let Some(command) = e.get("command").and_then(Value::as_str).map(str::to_string) else {
                let Some(key) = URL_KEYS.iter().find(|k| e.contains_key(**k)) else {
                    continue;
                };
                let url = e
                    .get(*key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                match http(name, &url) {
                    Some(ours) => {
                        e.insert((*key).to_string(), json!(ours));
                        out.http_through.push(name.clone());
                    }
                    None => out.http.push(name.clone()),
                }
                continue;
            };
            let args: Vec<String> = e
                .get("args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let (cmd, argv) = through.argv(name, &command, &args);
            e.insert("command".into(), json!(cmd));
            e.insert("args".into(), json!(argv));
            out.stdio.push(name.clone());
        }
    }
    out
}

/// Rewrites Codex's TOML config in place: each `[mcp_servers.NAME]` with a `command`.
pub fn rewrite_toml(config: &mut toml::Table, through: &Through, http: HttpHook<'_>) -> Rewritten {
    let mut out = Rewritten::default();
    let Some(toml::Value::Table(servers)) = config.get_mut("mcp_servers") else {
        return out;
    };
    for (name, entry) in servers.iter_mut() {
        let toml::Value::Table(e) = entry else {
            continue;
        };
        let Some(command) = e
            .get("command")
            .and_then(|v| v.as_str())
            .map(str::to_string)
        else {
            let Some(url) = e.get("url").and_then(|v| v.as_str()).map(str::to_string) else {
                continue;
            };
            match http(name, &url) {
                Some(ours) => {
                    e.insert("url".into(), toml::Value::String(ours));
                    out.http_through.push(name.clone());
                }
                None => out.http.push(name.clone()),
            }
            continue;
        };
        let args: Vec<String> = e
            .get("args")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let (cmd, argv) = through.argv(name, &command, &args);
        e.insert("command".into(), toml::Value::String(cmd));
        e.insert(
            "args".into(),
            toml::Value::Array(argv.into_iter().map(toml::Value::String).collect()),
        );
        out.stdio.push(name.clone());
    }
    out
}

/// Merges a Codex `-c key.path=value` override into `config` (the value is TOML), as Codex
/// applies it: later keys win.
pub fn apply_override(config: &mut toml::Table, assignment: &str) -> Result<(), String> {
    let (path, value) = assignment
        .split_once('=')
        .ok_or_else(|| format!("-c {assignment:?}: no `=`"))?;
    let parsed: toml::Table = format!("v = {}", value.trim())
        .parse()
        .or_else(|_| format!("v = {}", toml::Value::String(value.trim().into())).parse())
        .map_err(|e| format!("-c {assignment:?}: {e}"))?;
    let value = parsed.get("v").cloned().expect("parsed as v");
    let keys: Vec<&str> = path.trim().split('.').collect();
    let mut table = config;
    for k in &keys[..keys.len() - 1] {
        let next = table
            .entry((*k).to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !next.is_table() {
            *next = toml::Value::Table(toml::Table::new());
        }
        table = next.as_table_mut().expect("made a table");
    }
    table.insert(keys[keys.len() - 1].to_string(), value);
    Ok(())
}

/// A file rewritten in place for the run (a project `.mcp.json`), with its original kept
/// beside it until it is restored: on exit, on SIGINT/SIGTERM, or by the next `mcptape run`
/// after a crash (the journal lists what is out).
#[derive(Debug)]
pub struct InPlace {
    /// The rewritten file.
    pub path: PathBuf,
    /// Where the original is (none for a file the run created).
    pub backup: PathBuf,
    /// The file was not there before the run: put back is removed.
    pub created: bool,
}

/// The suffix of the marker `run` keeps beside a file it created (no original to put back).
pub const CREATED_SUFFIX: &str = ".mcptape-run-created";

/// The suffix of a backup `run` keeps beside a file it rewrote.
pub const BACKUP_SUFFIX: &str = ".mcptape-run-backup";

impl InPlace {
    /// Keeps `path`'s original beside it, notes it in the journal, then writes `contents`.
    pub fn rewrite(path: &Path, contents: &[u8], journal: &Path) -> std::io::Result<InPlace> {
        // A link (a dotfiles manager's) stays a link: the file it points to is rewritten.
        let path = &std::fs::canonicalize(path)?;
        let mut b = path.as_os_str().to_owned();
        b.push(BACKUP_SUFFIX);
        let backup = PathBuf::from(b);
        if backup.exists() {
            // A run that died left it: the original is the backup, not the rewritten file.
            std::fs::rename(&backup, path)?;
        }
        std::fs::copy(path, &backup)?;
        InPlace::write(path, contents, journal, backup, false)
    }

    /// Writes `contents` to `path`, which is not there: a marker beside it and the journal
    /// say so, so putting it back (also after a crash) removes it.
    pub fn create(path: &Path, contents: &[u8], journal: &Path) -> std::io::Result<InPlace> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let marker = suffixed(path, CREATED_SUFFIX);
        std::fs::write(&marker, b"")?;
        InPlace::write(path, contents, journal, marker, true)
    }

    /// Notes `path` in the journal, then writes `contents` over it whole (through a temporary
    /// file renamed into place: a crash leaves the old file or the new one, never half).
    fn write(
        path: &Path,
        contents: &[u8],
        journal: &Path,
        backup: PathBuf,
        created: bool,
    ) -> std::io::Result<InPlace> {
        journal_add(journal, path)?;
        let tmp = path.with_extension("mcptape-run-tmp");
        std::fs::write(&tmp, contents)?;
        std::fs::rename(&tmp, path)?;
        Ok(InPlace {
            path: path.to_path_buf(),
            backup,
            created,
        })
    }

    /// Puts the original back (removes a file the run created).
    pub fn restore(&self, journal: &Path) -> std::io::Result<()> {
        if self.created {
            remove_created(&self.path)?;
        } else {
            std::fs::rename(&self.backup, &self.path)?;
        }
        journal_remove(journal, &self.path)
    }
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut b = path.as_os_str().to_owned();
    b.push(suffix);
    PathBuf::from(b)
}

/// Removes a file a run created, then its marker.
fn remove_created(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::remove_file(suffixed(path, CREATED_SUFFIX))
}

fn read_journal(journal: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(journal)
        .ok()
        .and_then(|s| serde_json::from_str::<Vec<PathBuf>>(&s).ok())
        .unwrap_or_default()
}

fn write_journal(journal: &Path, files: &[PathBuf]) -> std::io::Result<()> {
    if files.is_empty() {
        return match std::fs::remove_file(journal) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    if let Some(dir) = journal.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = journal.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(files).expect("paths serialize"))?;
    std::fs::rename(&tmp, journal)
}

fn journal_add(journal: &Path, path: &Path) -> std::io::Result<()> {
    let mut files = read_journal(journal);
    let path = std::path::absolute(path)?;
    if !files.contains(&path) {
        files.push(path);
    }
    write_journal(journal, &files)
}

fn journal_remove(journal: &Path, path: &Path) -> std::io::Result<()> {
    let path = std::path::absolute(path)?;
    let files: Vec<PathBuf> = read_journal(journal)
        .into_iter()
        .filter(|p| p != &path)
        .collect();
    write_journal(journal, &files)
}

/// Puts back every file a run that did not finish left rewritten; returns them.
pub fn restore_all(journal: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut restored = Vec::new();
    for path in read_journal(journal) {
        let mut b = path.as_os_str().to_owned();
        b.push(BACKUP_SUFFIX);
        let backup = PathBuf::from(b);
        if backup.exists() {
            std::fs::rename(&backup, &path)?;
            restored.push(path.clone());
        } else if suffixed(&path, CREATED_SUFFIX).exists() {
            remove_created(&path)?;
            restored.push(path.clone());
        }
        journal_remove(journal, &path)?;
    }
    Ok(restored)
}

/// A config file read as JSON (comments and trailing commas taken), for a value looked up in
/// it: `None` when it is not there or does not parse (rewriting it, when it is rewritten, says
/// why).
pub fn read_json(path: &Path) -> Option<Value> {
    parse_config(&std::fs::read_to_string(path).ok()?, true).ok()
}

/// A config file's text as its client reads it: JSON, or with `jsonc` also JSON with comments
/// and trailing commas (VS Code reads its `mcp.json` so, Gemini CLI its settings through
/// strip-json-comments). The file is rewritten for the run as plain JSON, without them; its own
/// bytes, comments and all, are put back after. Comments are blanked, not cut, so an error's
/// line and column are the file's.
pub fn parse_config(text: &str, jsonc: bool) -> Result<Value, String> {
    let strict = match serde_json::from_str(text) {
        Ok(v) => return Ok(v),
        Err(e) if !jsonc => return Err(e.to_string()),
        Err(e) => e,
    };
    let mut plain = text.to_string();
    if json_strip_comments::strip(&mut plain).is_err() {
        // A comment that never ends: the strict reading's error is the one to show.
        return Err(strict.to_string());
    }
    serde_json::from_str(&plain).map_err(|e| e.to_string())
}

/// Makes `dir` anew, empty and owner-only. Links in an old one are removed, not followed.
pub fn fresh_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(test)]
mod jsonc_tests {
    use super::parse_config;
    use serde_json::json;

    /// VS Code's `mcp.json` as its users write it: line and block comments, a trailing comma,
    /// and comment-like text inside strings, which stays.
    #[test]
    fn a_config_with_comments_and_trailing_commas_reads_as_its_client_reads_it() {
        let text = r#"{
  // My servers
  "servers": {
    "fs": { "command": "npx", "args": ["-y", "server-fs", "/tmp//x"], }, /* the files */
    "web": { "url": "http://localhost:3000/mcp#a" },
  },
}"#;
        let v = parse_config(text, true).unwrap();
        assert_eq!(
            v,
            json!({"servers": {"fs": {"command": "npx", "args": ["-y", "server-fs", "/tmp//x"]},
                "web": {"url": "http://localhost:3000/mcp#a"}}})
        );
        // Not for a client that reads strict JSON: its own reader would refuse the file.
        assert!(parse_config(text, false).is_err());
    }

    /// An error keeps the file's line and column, comments or not.
    #[test]
    fn an_error_in_a_commented_file_names_its_line() {
        let text = "{\n  // one\n  /* two */\n  \"a\": 1 2\n}";
        let e = parse_config(text, true).unwrap_err();
        assert!(e.contains("line 4"), "{e}");
        let e = parse_config("{\"a\": 1 /* never closed", true).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> Through {
        Through::Record {
            exe: "/bin/mcptape".into(),
            socket: "/tmp/s.sock".into(),
        }
    }

    #[test]
    fn json_configs_of_every_shape_are_rewritten() {
        let mut claude = json!({"mcpServers": {
            "mem": {"type": "stdio", "command": "npx", "args": ["-y", "server-memory"], "env": {"X": "1"}},
            "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"}
        }});
        let ours = |name: &str, url: &str| {
            (name == "web")
                .then(|| format!("http://127.0.0.1:2{}", &url[url.rfind('/').unwrap()..]))
        };
        let r = rewrite_json(&mut claude, &rec(), &ours, KEEP_NONE);
        assert_eq!(r.stdio, ["mem"]);
        assert_eq!(r.http_through, ["web"]);
        assert_eq!(claude["mcpServers"]["web"]["url"], "http://127.0.0.1:2/mcp");
        assert_eq!(claude["mcpServers"]["mem"]["command"], "/bin/mcptape");
        assert_eq!(
            claude["mcpServers"]["mem"]["args"],
            json!([
                "record",
                "--join",
                "/tmp/s.sock",
                "--label",
                "mem",
                "--",
                "npx",
                "-y",
                "server-memory"
            ])
        );
        assert_eq!(
            claude["mcpServers"]["mem"]["env"],
            json!({"X": "1"}),
            "env kept"
        );
        // VS Code's `servers` key.
        let mut vscode =
            json!({"servers": {"fs": {"command": "node", "args": ["fs.js"]}}, "inputs": []});
        let play = Through::Play {
            exe: "/bin/mcptape".into(),
            tape: "/t.jsonl".into(),
        };
        assert_eq!(
            rewrite_json(&mut vscode, &play, &|_, _| None, KEEP_NONE).stdio,
            ["fs"]
        );
        assert_eq!(
            vscode["servers"]["fs"]["args"],
            json!(["play", "/t.jsonl", "--server", "fs"])
        );
    }

    #[test]
    fn codex_toml_and_its_overrides() {
        let mut t: toml::Table = r#"
model = "gpt-x"
[mcp_servers.S]
command = "server"
args = ["stdio"]
default_tools_approval_mode = "approve"
"#
        .parse()
        .unwrap();
        apply_override(&mut t, r#"model_provider="fake""#).unwrap();
        apply_override(
            &mut t,
            r#"model_providers.fake={name="fake",base_url="http://127.0.0.1:1/v1",env_key="KEY",wire_api="responses"}"#,
        )
        .unwrap();
        apply_override(&mut t, "analytics.enabled=false").unwrap();
        let r = rewrite_toml(&mut t, &rec(), &|_, _| None);
        assert_eq!(r.stdio, ["S"]);
        assert_eq!(t["model_provider"].as_str(), Some("fake"));
        assert_eq!(
            t["model_providers"]["fake"]["base_url"].as_str(),
            Some("http://127.0.0.1:1/v1")
        );
        assert_eq!(t["mcp_servers"]["S"]["args"][6].as_str(), Some("server"));
        assert_eq!(
            t["mcp_servers"]["S"]["default_tools_approval_mode"].as_str(),
            Some("approve")
        );
        assert_eq!(t["analytics"]["enabled"].as_bool(), Some(false));
    }

    #[test]
    fn a_rewritten_file_comes_back_and_a_crashed_run_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(".mcp.json");
        let journal = dir.path().join("journal.json");
        std::fs::write(&f, b"original").unwrap();
        let r = InPlace::rewrite(&f, b"rewritten", &journal).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"rewritten");
        r.restore(&journal).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"original");
        assert!(!journal.exists());
        // A run that died (SIGKILL) before restoring: the next one puts it back.
        let _left = InPlace::rewrite(&f, b"rewritten", &journal).unwrap();
        assert_eq!(
            restore_all(&journal).unwrap(),
            [std::path::absolute(&f).unwrap()]
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"original");
    }

    /// A config file that is a link (a dotfiles manager's) is still that link after the run,
    /// its target rewritten for the run and put back.
    #[test]
    fn a_linked_config_file_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (target, link) = (
            dir.path().join("dotfiles-settings.json"),
            dir.path().join("settings.json"),
        );
        let journal = dir.path().join("journal.json");
        std::fs::write(&target, b"original").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let r = InPlace::rewrite(&link, b"rewritten", &journal).unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"rewritten");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        r.restore(&journal).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "still a link"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"original");
    }

    /// A file the run created is gone when put back, also after a crash; nothing else is
    /// touched.
    #[test]
    fn a_created_file_is_removed_and_a_crashed_run_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(".gemini/settings.json");
        let journal = dir.path().join("journal.json");
        let r = InPlace::create(&f, b"{}", &journal).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"{}");
        r.restore(&journal).unwrap();
        assert!(!f.exists());
        assert_eq!(
            std::fs::read_dir(dir.path().join(".gemini"))
                .unwrap()
                .count(),
            0,
            "no marker left"
        );
        assert!(!journal.exists());
        let _left = InPlace::create(&f, b"{}", &journal).unwrap();
        assert_eq!(
            restore_all(&journal).unwrap(),
            [std::path::absolute(&f).unwrap()]
        );
        assert!(!f.exists());
        assert_eq!(
            std::fs::read_dir(dir.path().join(".gemini"))
                .unwrap()
                .count(),
            0
        );
    }
}
