//! Named tapes: `NAME` means `<root>/tapes/NAME.jsonl`, where the root is `$MCPTAPE_DIR` or
//! `./.mcptape`. Names cannot escape that folder. Anything that looks like a path is a path.
//! Reading, a name that is not in the store but is a file in the working folder is that file.

use std::io;
use std::path::{Path, PathBuf};

/// The folder under the root that holds named tapes.
pub(crate) const TAPES_DIR: &str = "tapes";
/// The file extension of a named tape.
pub(crate) const EXTENSION: &str = "jsonl";

#[derive(Debug, thiserror::Error)]
/// A tape name that cannot be used (exit 64).
#[error("invalid tape name {name:?}: {why}")]
pub struct NameError {
    /// The name as given.
    pub name: String,
    /// What is wrong with it, in words.
    pub why: &'static str,
}

/// The folder that holds `tapes/`.
pub(crate) fn root() -> PathBuf {
    match std::env::var_os("MCPTAPE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(".mcptape"),
    }
}

/// The folder of named tapes: `<root>/tapes`.
pub fn tapes_dir() -> PathBuf {
    root().join(TAPES_DIR)
}

/// A tape argument is a path when it contains a path separator or ends in `.jsonl` (or in
/// `.jsonl.bak` or `.jsonl.new`, the names mcptape gives the tapes it keeps beside one);
/// otherwise it is a name in the tape store.
pub(crate) fn looks_like_path(arg: &str) -> bool {
    arg.contains('/')
        || arg.contains(std::path::MAIN_SEPARATOR)
        || arg.ends_with(".jsonl")
        || arg.ends_with(".jsonl.bak")
        || arg.ends_with(".jsonl.new")
        || arg == "."
        || arg == ".."
}

/// Checks a tape name: letters, digits, `.`, `_`, `-`; not starting with `.` or `-`; at most
/// 128 characters. That keeps every name a plain file inside the tapes folder.
pub(crate) fn validate_name(name: &str) -> Result<(), NameError> {
    let err = |why| {
        Err(NameError {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return err("it is empty");
    }
    if name.len() > 128 {
        return err("it is longer than 128 characters");
    }
    if name.starts_with('.') || name.starts_with('-') {
        return err("it starts with '.' or '-'");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return err("only letters, digits, '.', '_' and '-' are allowed (use a path with '/' for anything else)");
    }
    Ok(())
}

/// A tape argument that cannot be used (exit 64): a bad name, or a folder.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A name that cannot be a tape in the store.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The argument names a folder.
    #[error("{} is a folder, not a tape (a tape is a .jsonl file; `mcptape ls {}` lists the tapes in a folder)", .0.display(), .0.display())]
    Folder(PathBuf),
    /// The argument names something that is not a regular file (a FIFO, a socket, a device),
    /// for a command that reads a tape more than once, or by offset.
    #[error("{} is {}, not a regular file: this command reads a tape more than once and by offset (only `verify` and `lint` read one front to back, once); copy it to a file first (`cat {} > tape.jsonl`)", path.display(), kind, path.display())]
    NotAFile {
        /// The argument's path.
        path: PathBuf,
        /// What it is, with its article: `a FIFO (named pipe)`.
        kind: &'static str,
    },
    /// A name that is neither a tape in the store nor a file in the working folder (exit 66).
    #[error("tape not found: neither {} (the store's tape {name}) nor {} (a file in the working folder) exists", store.display(), local.display())]
    NotFound {
        /// The name as given.
        name: String,
        /// The store's tape of that name.
        store: PathBuf,
        /// The working folder's file of that name.
        local: PathBuf,
    },
}

/// Where a tape argument points, as written: a path as given, a name in the store.
fn place(arg: &str) -> Result<PathBuf, NameError> {
    if looks_like_path(arg) {
        return Ok(PathBuf::from(arg));
    }
    validate_name(arg)?;
    Ok(tapes_dir().join(format!("{arg}.{EXTENSION}")))
}

/// Resolves a tape argument (name or path) to the file of a tape to read. A name that is not a
/// tape in the store but is a file in the working folder (`demo.json`) is that file. A folder is
/// refused.
pub fn resolve(arg: &str) -> Result<PathBuf, ResolveError> {
    a_regular_file(resolve_stream(arg)?)
}

/// [`resolve`] for a command that reads a tape once, front to back (`verify`, `lint`): a FIFO
/// or a pipe (`<(zcat t.jsonl.gz)`) is read as a file is.
pub fn resolve_stream(arg: &str) -> Result<PathBuf, ResolveError> {
    let path = match place(arg) {
        Ok(p) if p.exists() || looks_like_path(arg) => p,
        named => {
            // Anything there (a FIFO, a folder too) is what the name means: refused below as
            // what it is, not as a file that "does not exist".
            if !arg.is_empty() && Path::new(arg).exists() {
                PathBuf::from(arg)
            } else {
                let store = named?;
                // Both places were tried: say so, so that a tape kept elsewhere is found.
                return Err(ResolveError::NotFound {
                    name: arg.to_string(),
                    store,
                    local: std::env::current_dir()
                        .map(|d| d.join(arg))
                        .unwrap_or_else(|_| PathBuf::from(".").join(arg)),
                });
            }
        }
    };
    not_a_folder(path)
}

/// Refuses what is there but is not a regular file (a missing file is left to the reader).
fn a_regular_file(path: PathBuf) -> Result<PathBuf, ResolveError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(path);
    };
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(path);
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        return Ok(path);
    };
    Err(ResolveError::NotAFile { path, kind })
}

fn not_a_folder(path: PathBuf) -> Result<PathBuf, ResolveError> {
    if path.is_dir() {
        return Err(ResolveError::Folder(path));
    }
    Ok(path)
}

/// Resolves a tape argument for writing. A named tape that is a symbolic link is refused: a
/// name must stay inside the tapes folder, and a link could point anywhere. (A path given
/// explicitly is the user's choice and is followed.) A name is always a name in the store here:
/// a file of that name in the working folder is never written over.
pub fn resolve_for_write(arg: &str) -> Result<PathBuf, ResolveError> {
    let path = place(arg)?;
    if !looks_like_path(arg)
        && std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(NameError {
            name: arg.to_string(),
            why: "the tape in the store is a symbolic link; give its path explicitly to write through it",
        }
        .into());
    }
    not_a_folder(path)
}

/// A default name for a new recording: the server program's name and the time.
pub fn default_name(command: &[String]) -> String {
    let program = command
        .iter()
        .map(|a| {
            Path::new(a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .find(|a| {
            !matches!(
                a.as_str(),
                "npx"
                    | "node"
                    | "python"
                    | "python3"
                    | "uv"
                    | "uvx"
                    | "-y"
                    | "run"
                    | "bunx"
                    | "deno"
                    | "sh"
                    | "bash"
                    | "env"
            ) && !a.starts_with('-')
        })
        .unwrap_or_else(|| "session".into());
    let clean: String = program
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let clean = clean.trim_start_matches(['-', '.']).to_string();
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = stamp.chars().filter(|c| c.is_ascii_digit()).collect();
    let name = format!(
        "{}-{}",
        if clean.is_empty() { "session" } else { &clean },
        &stamp[..14.min(stamp.len())]
    );
    name
}

/// Creates a folder (and parents) owner-only: tapes hold whatever crossed the wire.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// The tapes in the store, sorted by name.
pub(crate) fn list() -> io::Result<Vec<PathBuf>> {
    list_in(&tapes_dir())
}

/// The `.jsonl` files in a folder (not its subfolders), sorted by name; none when it is not there.
pub(crate) fn list_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == EXTENSION) && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

impl crate::exit::Coded for NameError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

impl crate::exit::Coded for ResolveError {
    fn exit_code(&self) -> i32 {
        match self {
            ResolveError::NotFound { .. } => crate::exit::NO_INPUT,
            _ => crate::exit::USAGE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape() {
        for bad in [
            "",
            ".hidden",
            "-x",
            "a b",
            "a\\b",
            "é",
            "a:b",
            &"x".repeat(129),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} should be refused");
        }
        for good in ["demo", "my-server_2.v1", "A1"] {
            assert!(validate_name(good).is_ok(), "{good:?} should be fine");
        }
        // Anything with a slash is a path, and is taken as given.
        assert_eq!(resolve("../x").unwrap(), PathBuf::from("../x"));
        assert_eq!(resolve("t.jsonl").unwrap(), PathBuf::from("t.jsonl"));
        // The tapes kept beside one (a re-recording's backup, a recording that did not replace).
        assert_eq!(
            resolve("t.jsonl.bak").unwrap(),
            PathBuf::from("t.jsonl.bak")
        );
        assert_eq!(
            resolve("t.jsonl.new").unwrap(),
            PathBuf::from("t.jsonl.new")
        );
        assert!(matches!(resolve(".."), Err(ResolveError::Folder(p)) if p == Path::new("..")));
    }

    #[test]
    fn default_names_skip_launchers() {
        let n = default_name(&[
            "npx".into(),
            "-y".into(),
            "@modelcontextprotocol/server-memory".into(),
        ]);
        assert!(n.starts_with("server-memory-"), "{n}");
        validate_name(&n).unwrap();
    }
}
