//! Claude Code's config folder, borrowed for a run. Its user-scope servers (`mcpServers` of
//! `~/.claude.json`, or of `$CLAUDE_CONFIG_DIR/.claude.json`) and local-scope ones
//! (`projects["<dir>"].mcpServers` there) are not rewritten in place: Claude Code writes that
//! file itself while it runs, so putting a backup back would drop its writes, and a crash
//! would leave the user's servers pointing at mcptape. Instead the agent gets
//! `CLAUDE_CONFIG_DIR` pointing at a private folder holding a link to every entry of the real
//! one (credentials, settings, sessions: written through) and a rewritten copy of the state
//! file. At the end what Claude Code changed in the copy goes back into the real file with
//! the server entries as they were, and what it created in the folder is moved into the real
//! one. The user's files are never pointed at mcptape, not even after a `kill -9`.

use super::config::{self, Rewritten, Through};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The state file's name, inside the config folder (or beside it, in the home folder, when
/// `CLAUDE_CONFIG_DIR` is not set).
pub const STATE: &str = ".claude.json";

/// The folder Claude Code keeps backups of its state file in (`.claude.json.backup.<time>`).
const BACKUPS: &str = "backups";

/// Where Claude Code keeps its config: the folder and its state file.
#[derive(Debug, Clone, PartialEq)]
pub struct Home {
    /// `$CLAUDE_CONFIG_DIR`, or `~/.claude`.
    pub dir: PathBuf,
    /// `$CLAUDE_CONFIG_DIR/.claude.json`, or `~/.claude.json`.
    pub state: PathBuf,
}

impl Home {
    /// Claude Code's config as its environment says: `config_dir` is `CLAUDE_CONFIG_DIR`.
    pub fn locate(config_dir: Option<&Path>, home: Option<&Path>) -> Option<Home> {
        match config_dir {
            Some(d) => Some(Home {
                dir: d.to_path_buf(),
                state: d.join(STATE),
            }),
            None => home.map(|h| Home {
                dir: h.join(".claude"),
                state: h.join(STATE),
            }),
        }
    }
}

/// A borrowed config folder (see the module's documentation).
#[derive(Debug)]
pub struct Borrowed {
    /// The real config.
    pub real: Home,
    /// The private folder the agent's `CLAUDE_CONFIG_DIR` points at.
    pub dir: PathBuf,
    /// The real state file's bytes when the run started.
    original: Vec<u8>,
    /// What the copy held when the agent started.
    written: Vec<u8>,
    /// Each rewritten server entry: its JSON pointer in the state file, and what it was.
    entries: Vec<(String, Value)>,
}

/// What giving a borrowed folder back did.
#[derive(Debug, Default, PartialEq)]
pub struct GivenBack {
    /// The agent changed its state file: the changes are in the real one now.
    pub state: bool,
    /// Entries the agent created or replaced in the folder, moved into the real one.
    pub moved: Vec<PathBuf>,
    /// What could not be given back, and why.
    pub warnings: Vec<String>,
}

/// `/` and `~` escaped for a JSON pointer (RFC 6901).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Rewrites the state file's servers for a run in the folders `bases` (the working folder, and
/// the same canonicalized): the user's (`mcpServers`), and the local ones (`mcpServers` of
/// `projects["<dir>"]`) of each base and of the folders above it (Claude Code keys a project by the folder it was started in, or its
/// repository's root). Returns each rewritten entry (its JSON pointer, and what it was) and the
/// servers by kind. Touches no file.
pub(crate) fn point(
    json: &mut Value,
    bases: &[&Path],
    through: &Through,
    http: config::HttpHook<'_>,
    keep: config::Keep<'_>,
) -> (Vec<(String, Value)>, Rewritten) {
    let mut at: Vec<String> = vec![String::new()];
    for base in bases {
        for a in base.ancestors() {
            let key = format!("/projects/{}", pointer_token(&a.to_string_lossy()));
            if json.pointer(&key).is_some() && !at.contains(&key) {
                at.push(key);
            }
        }
    }
    let mut servers = Rewritten::default();
    let mut entries = Vec::new();
    for scope in &at {
        // Only `mcpServers`: Claude Code reads nothing else here (a VS Code style `servers` is
        // not its own, and would not be given back as it was).
        let Some(value) = json
            .pointer_mut(scope)
            .and_then(|v| v.get_mut("mcpServers"))
        else {
            continue;
        };
        let before = value.clone();
        let mut only = serde_json::json!({ "mcpServers": value.take() });
        let r = config::rewrite_json(&mut only, through, http, keep);
        *value = only["mcpServers"].take();
        for name in r.stdio.iter().chain(&r.http_through) {
            let was = before.get(name).cloned().unwrap_or(Value::Null);
            entries.push((format!("{scope}/mcpServers/{}", pointer_token(name)), was));
        }
        servers.stdio.extend(r.stdio);
        servers.http_through.extend(r.http_through);
        servers.http.extend(r.http);
        servers.kept.extend(r.kept);
    }
    (entries, servers)
}

/// A copy of the state file (`bytes`) with each rewritten entry of `entries` as it was;
/// anything else as it is (the same bytes when nothing was pointed, or not JSON).
pub(crate) fn unpoint(entries: &[(String, Value)], bytes: Vec<u8>) -> Vec<u8> {
    let Ok(mut json) = serde_json::from_slice::<Value>(&bytes) else {
        return bytes;
    };
    let mut changed = false;
    for (pointer, was) in entries {
        if let Some(v) = json.pointer_mut(pointer) {
            if v != was {
                *v = was.clone();
                changed = true;
            }
        }
    }
    if !changed {
        return bytes;
    }
    let mut out = serde_json::to_vec_pretty(&json).expect("JSON serializes");
    out.push(b'\n');
    out
}

/// Borrows `real` into `dir` when its state file has servers for a run in `cwd`: `None` when
/// there is no state file or nothing in it to rewrite (the agent then uses its own folder).
pub fn borrow(
    real: Home,
    dir: &Path,
    cwd: &Path,
    through: &Through,
    http: config::HttpHook<'_>,
    keep: config::Keep<'_>,
) -> std::io::Result<Option<(Borrowed, Rewritten)>> {
    let original = match std::fs::read(&real.state) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut json: Value = serde_json::from_slice(&original).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not JSON ({e}); Claude Code would not read it either"),
        )
    })?;
    let canonical = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let (entries, servers) = point(&mut json, &[cwd, canonical.as_path()], through, http, keep);
    if entries.is_empty() {
        return Ok(None);
    }
    config::fresh_private_dir(dir)?;
    match std::fs::read_dir(&real.dir) {
        Ok(list) => {
            for entry in list {
                let entry = entry?;
                // Its backups are copies of the state file: written here, given back with the
                // server entries as they were.
                if entry.file_name() == STATE || entry.file_name() == BACKUPS {
                    continue;
                }
                std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let written = serde_json::to_vec_pretty(&json).expect("JSON serializes");
    write_private(&dir.join(STATE), &written)?;
    Ok(Some((
        Borrowed {
            real,
            dir: dir.to_path_buf(),
            original,
            written,
            entries,
        },
        servers,
    )))
}

impl Borrowed {
    /// Gives the folder back: the state file's changes (with the server entries as they were)
    /// into the real one, unless something else changed the real one meanwhile; what the agent
    /// created or replaced in the folder into the real folder. The folder itself is left for
    /// the caller to remove.
    pub fn give_back(&self) -> GivenBack {
        let mut out = GivenBack::default();
        match self.state_back() {
            Ok(changed) => out.state = changed,
            Err(why) => out.warnings.push(why),
        }
        let list = match std::fs::read_dir(&self.dir) {
            Ok(l) => l,
            Err(e) => {
                out.warnings
                    .push(format!("could not read {}: {e}", self.dir.display()));
                return out;
            }
        };
        for entry in list.flatten() {
            let name = entry.file_name();
            let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(true);
            if name == STATE || is_link {
                continue;
            }
            let to = self.real.dir.join(&name);
            let moved = std::fs::create_dir_all(&self.real.dir)
                .and_then(|()| move_over(&entry.path(), &to, &|bytes| self.unpointed(bytes)));
            match moved {
                Ok(()) => out.moved.push(to),
                Err(e) => out.warnings.push(format!(
                    "could not move {} to {}: {e}",
                    entry.path().display(),
                    to.display()
                )),
            }
        }
        out
    }

    /// A copy of the state file (the copy itself, or a backup of it) with the server entries
    /// as they were; anything else as it is.
    fn unpointed(&self, bytes: Vec<u8>) -> Vec<u8> {
        unpoint(&self.entries, bytes)
    }

    /// The state file's changes into the real one: `Ok(false)` when the agent changed nothing.
    fn state_back(&self) -> Result<bool, String> {
        let copy = self.dir.join(STATE);
        let now =
            std::fs::read(&copy).map_err(|e| format!("could not read {}: {e}", copy.display()))?;
        if now == self.written {
            return Ok(false);
        }
        if let Err(e) = serde_json::from_slice::<Value>(&now) {
            return Err(format!(
                "{} is not JSON after the run ({e}); {} left as it was",
                copy.display(),
                self.real.state.display()
            ));
        }
        let real_now = std::fs::read(&self.real.state).unwrap_or_default();
        if real_now != self.original {
            return Err(format!(
                "{} changed during the run (another Claude Code?): Claude Code's changes of this run are not copied into it",
                self.real.state.display()
            ));
        }
        replace_keeping_mode(&self.real.state, &self.unpointed(now))
            .map_err(|e| format!("could not write {}: {e}", self.real.state.display()))?;
        Ok(true)
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(bytes)
}

/// `path` replaced by `bytes` at once (a sibling renamed over it), its permissions kept.
fn replace_keeping_mode(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mode = std::fs::metadata(path).map(|m| m.permissions()).ok();
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".mcptape-run-new");
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, bytes)?;
    if let Some(m) = mode {
        std::fs::set_permissions(&tmp, m)?;
    }
    std::fs::rename(&tmp, path)
}

/// Moves `from` to `to`: a folder entry by entry (into one there), a file over one there. A
/// file named like the state file (`.claude.json…`: a backup of it) is written through `fix`.
fn move_over(from: &Path, to: &Path, fix: &dyn Fn(Vec<u8>) -> Vec<u8>) -> std::io::Result<()> {
    if std::fs::symlink_metadata(from)?.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            move_over(&entry.path(), &to.join(entry.file_name()), fix)?;
        }
        return std::fs::remove_dir(from);
    }
    let is_state_copy = from
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(STATE));
    if is_state_copy {
        std::fs::write(to, fix(std::fs::read(from)?))?;
        return std::fs::remove_file(from);
    }
    match std::fs::rename(from, to) {
        // Across file systems (the folder is under the temporary folder): copy, then remove.
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(from, to)?;
            std::fs::remove_file(from)
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn through() -> Through {
        Through::Record {
            exe: "/bin/mcptape".into(),
            socket: "/tmp/s.sock".into(),
        }
    }

    fn no_http(_: &str, _: &str) -> Option<String> {
        None
    }

    /// The user's and this folder's servers go through mcptape in the copy only; the agent's
    /// writes come back with the entries as they were; what it made in the folder is moved.
    #[test]
    fn a_borrowed_folder_points_the_copy_and_gives_the_agents_writes_back() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("config");
        std::fs::create_dir_all(real.join("projects")).unwrap();
        std::fs::write(real.join(".credentials.json"), "{\"token\":\"x\"}").unwrap();
        let cwd = t.path().join("work/sub");
        std::fs::create_dir_all(&cwd).unwrap();
        let work = t.path().join("work");
        let state = json!({
            "numStartups": 3,
            "mcpServers": {"mem": {"type": "stdio", "command": "npx", "args": ["-y", "server-memory"]}},
            "projects": {
                work.to_string_lossy(): {"mcpServers": {"git/x": {"command": "uvx", "args": ["mcp-server-git"]}}},
                "/elsewhere": {"mcpServers": {"other": {"command": "other"}}}
            }
        });
        let text = serde_json::to_string(&state).unwrap();
        std::fs::write(real.join(STATE), &text).unwrap();
        let home = Home::locate(Some(&real), None).unwrap();
        let dir = t.path().join("borrowed");
        let (b, servers) = borrow(home, &dir, &cwd, &through(), &no_http, config::KEEP_NONE)
            .unwrap()
            .unwrap();
        assert_eq!(
            servers.stdio,
            ["mem", "git/x"],
            "the user's and this project's, not another's"
        );
        assert_eq!(
            std::fs::read_to_string(real.join(STATE)).unwrap(),
            text,
            "the real file untouched"
        );
        let copy: Value = serde_json::from_slice(&std::fs::read(dir.join(STATE)).unwrap()).unwrap();
        assert_eq!(copy["mcpServers"]["mem"]["command"], "/bin/mcptape");
        assert_eq!(
            copy["projects"][work.to_string_lossy().as_ref()]["mcpServers"]["git/x"]["args"][0],
            "record"
        );
        assert_eq!(
            copy["projects"]["/elsewhere"]["mcpServers"]["other"]["command"],
            "other"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join(".credentials.json")).unwrap(),
            "{\"token\":\"x\"}",
            "linked"
        );

        // The agent writes its state, a session through a link, and a new folder of its own.
        let mut after = copy.clone();
        after["numStartups"] = json!(4);
        after["projects"][work.to_string_lossy().as_ref()]["lastCost"] = json!(0.5);
        std::fs::write(dir.join(STATE), serde_json::to_vec(&after).unwrap()).unwrap();
        std::fs::write(dir.join("projects/session.jsonl"), "{}\n").unwrap();
        std::fs::create_dir(dir.join("todos")).unwrap();
        std::fs::write(dir.join("todos/a.json"), "[]").unwrap();
        // Backups of the state file, as Claude Code writes them: the copy, pointed.
        let pointed = serde_json::to_vec(&copy).unwrap();
        std::fs::create_dir(dir.join("backups")).unwrap();
        std::fs::write(dir.join("backups/.claude.json.backup.1"), &pointed).unwrap();
        std::fs::write(dir.join(".claude.json.backup"), &pointed).unwrap();
        let given = b.give_back();
        assert!(given.warnings.is_empty(), "{:?}", given.warnings);
        assert!(given.state);
        let mut moved = given.moved.clone();
        moved.sort();
        assert_eq!(
            moved,
            [
                real.join(".claude.json.backup"),
                real.join("backups"),
                real.join("todos")
            ]
        );
        for backup in [
            real.join("backups/.claude.json.backup.1"),
            real.join(".claude.json.backup"),
        ] {
            let b: Value = serde_json::from_slice(&std::fs::read(&backup).unwrap()).unwrap();
            assert_eq!(
                b["mcpServers"],
                state["mcpServers"],
                "{}: not pointed",
                backup.display()
            );
            assert_eq!(b["projects"], state["projects"], "{}", backup.display());
        }
        let back: Value =
            serde_json::from_slice(&std::fs::read(real.join(STATE)).unwrap()).unwrap();
        assert_eq!(back["numStartups"], 4, "the agent's write kept");
        assert_eq!(
            back["projects"][work.to_string_lossy().as_ref()]["lastCost"],
            0.5
        );
        assert_eq!(
            back["mcpServers"], state["mcpServers"],
            "the user's servers as they were"
        );
        assert_eq!(back["projects"], {
            let mut p = state["projects"].clone();
            p[work.to_string_lossy().as_ref()]["lastCost"] = json!(0.5);
            p
        });
        assert_eq!(
            std::fs::read_to_string(real.join("projects/session.jsonl")).unwrap(),
            "{}\n"
        );
        assert_eq!(
            std::fs::read_to_string(real.join("todos/a.json")).unwrap(),
            "[]"
        );
    }

    /// Claude Code reads `mcpServers` in its state file, nothing else: a `servers` key (VS
    /// Code's shape) there is left alone, and everything pointed comes back as it was. (Found by
    /// the `agent_config` fuzz target: `servers` entries were rewritten in the copy but given
    /// back under `mcpServers`, so the real file kept them pointed at mcptape.)
    #[test]
    fn only_the_servers_claude_code_reads_are_pointed_and_all_come_back() {
        let state = json!({
            "servers": {"fs": {"command": "node", "args": ["fs.js"]}},
            "mcpServers": {"fs": {"command": "npx"}},
            "projects": {"/w": {"servers": {"x": {"command": "x"}}}}
        });
        let mut pointed = state.clone();
        let (entries, servers) = point(
            &mut pointed,
            &[Path::new("/w")],
            &through(),
            &no_http,
            config::KEEP_NONE,
        );
        assert_eq!(servers.stdio, ["fs"]);
        assert_eq!(pointed["servers"], state["servers"]);
        assert_eq!(pointed["projects"], state["projects"]);
        assert_eq!(pointed["mcpServers"]["fs"]["command"], "/bin/mcptape");
        let back = unpoint(&entries, serde_json::to_vec_pretty(&pointed).unwrap());
        assert_eq!(serde_json::from_slice::<Value>(&back).unwrap(), state);
    }

    /// Numbers the agent's state file holds (JavaScript writes the shortest text that reads
    /// back as its double) come back as they were: read exactly, written shortest. Without
    /// serde_json's `float_roundtrip` about one in eight such costs read an ulp off, and the
    /// user's file was given back changed (found by the `model_body` fuzz target, whose
    /// canonical form was not idempotent for the same reason).
    #[test]
    fn numbers_in_the_state_file_come_back_as_they_were() {
        let text = r#"{"lastCost": 0.009043200000000001, "big": 3.3333333333333334e42,
            "mcpServers": {"a": {"command": "a"}}}"#;
        let mut json: Value = serde_json::from_str(text).unwrap();
        let (entries, _) = point(
            &mut json,
            &[Path::new("/w")],
            &through(),
            &no_http,
            config::KEEP_NONE,
        );
        let back = unpoint(&entries, serde_json::to_vec_pretty(&json).unwrap());
        let back = String::from_utf8(back).unwrap();
        assert!(back.contains("0.009043200000000001"), "{back}");
        assert!(back.contains("3.3333333333333334e+42"), "{back}");
    }

    /// No servers: nothing borrowed. Something else wrote the real file meanwhile: it wins, and
    /// that is said.
    #[test]
    fn nothing_to_point_borrows_nothing_and_a_concurrent_write_is_not_overwritten() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().to_path_buf();
        let located = Home::locate(None, Some(&home)).unwrap();
        assert_eq!(located.state, home.join(".claude.json"));
        assert_eq!(located.dir, home.join(".claude"));
        let dir = t.path().join("borrowed");
        let lend = || {
            borrow(
                located.clone(),
                &dir,
                t.path(),
                &through(),
                &no_http,
                config::KEEP_NONE,
            )
        };
        assert!(lend().unwrap().is_none(), "no file");
        std::fs::write(&located.state, "{\"numStartups\": 1}").unwrap();
        assert!(lend().unwrap().is_none(), "no servers");
        std::fs::write(
            &located.state,
            "{\"mcpServers\": {\"a\": {\"command\": \"a\"}}}",
        )
        .unwrap();
        let (b, _) = lend().unwrap().unwrap();
        std::fs::write(dir.join(STATE), "{\"mcpServers\": {}, \"x\": 1}").unwrap();
        std::fs::write(&located.state, "{\"theirs\": true}").unwrap();
        let given = b.give_back();
        assert!(!given.state);
        assert_eq!(given.warnings.len(), 1, "{:?}", given.warnings);
        assert!(
            given.warnings[0].contains("changed during the run"),
            "{:?}",
            given.warnings
        );
        assert_eq!(
            std::fs::read_to_string(&located.state).unwrap(),
            "{\"theirs\": true}"
        );
        std::fs::write(&located.state, "not json").unwrap();
        let e = borrow(
            located,
            &dir,
            t.path(),
            &through(),
            &no_http,
            config::KEEP_NONE,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
