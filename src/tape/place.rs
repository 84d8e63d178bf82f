//! Recording over a tape that is there already. The new recording of `TAPE` is written beside
//! it, to `TAPE.new`, and replaces `TAPE` only when it holds a session — at least one exchange:
//! a request and its answer, or a model call and its answer — the old tape then kept as
//! `TAPE.bak`. A recording without one (the client left at once, the server never answered)
//! costs no tape: `TAPE` stays as it was and the recording stays at `TAPE.new`, where the next
//! recording writes over it. Killed mid-recording, mcptape leaves `TAPE` untouched and the partial
//! recording at `TAPE.new`.
//!
//! With no tape there yet (no file, an empty one, or something that is not a regular file such
//! as `/dev/null`) the recording is written in place, as before: a first recording killed with
//! SIGKILL is still readable at its path. Every command that records goes through
//! [`TapeWriter`](super::TapeWriter), so this is the one place of the policy.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A recording written beside the tape it may replace.
#[derive(Debug)]
pub(crate) struct Beside {
    /// The tape (a symbolic link given as a path is followed to its file).
    target: PathBuf,
    /// Where the recording is written: `TAPE.new`.
    staging: PathBuf,
}

/// What became of a recording when its tape closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Written at its path: no tape was there.
    InPlace,
    /// It replaced the tape at its path; the old one is kept at `backup`.
    Replaced {
        /// `TAPE.bak`.
        backup: PathBuf,
    },
    /// It held no exchange: the tape at its path is kept as it was; the recording is at `at`.
    KeptOld {
        /// `TAPE.new`.
        at: PathBuf,
    },
    /// The tape could not be replaced: it is kept as it was; the recording is at `at`.
    NotReplaced {
        /// `TAPE.new`.
        at: PathBuf,
        /// Why, in words.
        why: String,
    },
}

impl Placed {
    /// Where the recording is now, if not at the path it was asked for.
    pub fn elsewhere(&self) -> Option<&Path> {
        match self {
            Placed::KeptOld { at } | Placed::NotReplaced { at, .. } => Some(at),
            Placed::InPlace | Placed::Replaced { .. } => None,
        }
    }
}

/// `path` with `suffix` appended to its file name (`t.jsonl` → `t.jsonl.new`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

/// Opens the file a recording of `path` is written to: `path` itself unless a tape is there (a
/// regular file with something in it), else `TAPE.new` beside it, never through a symbolic link
/// someone left at that name.
pub(crate) fn open(path: &Path) -> io::Result<(File, Option<Beside>)> {
    let there = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0);
    if !there {
        // Opened without truncating, locked, then emptied: an empty file may be a first
        // recording that has not written its header yet.
        let file = super::writer::open_private(path)?;
        if file.metadata()?.is_file() {
            match super::sink::lock(&file) {
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                    return Err(being_recorded(path, path));
                }
                // A file system without `flock` (some NFS and FUSE mounts): recorded unlocked,
                // as a re-recording's `TAPE.new` is there.
                Err(_) | Ok(()) => {}
            }
            if file.metadata()?.len() > 0 {
                // A tape was written there since it was looked at: re-recorded, not emptied.
                drop(file);
                return open(path);
            }
            file.set_len(0)?;
        }
        // Only now: a file another writer holds is refused above, and left as it was.
        super::writer::make_private(&file)?;
        return Ok((file, None));
    }
    // A link given as a path is the user's choice (a named tape that is a link was refused
    // already): the file it points to is the tape, and its backup goes beside that file.
    let target = behind_link(path)?;
    let staging = with_suffix(&target, ".new");
    // Two recordings of one tape would each take the other's place (and its backup): the
    // second is refused, the first goes on. A re-recording holds its lock on `TAPE.new`, a
    // first recording (written in place) on the tape itself. `TAPE.new` first: a re-recording
    // renames it over the tape holding its lock, so looked at in this order it is found at
    // one name or the other.
    for live in [&staging, &target] {
        if being_written(live) {
            return Err(being_recorded(path, live));
        }
    }
    if unfinished(&staging) {
        crate::diag!(
            "mcptape: found {}, left by a recording that did not finish (killed, or the machine stopped); this recording writes over it",
            staging.display()
        );
    }
    let file = super::writer::open_own(&staging)?;
    #[cfg(unix)]
    {
        // `open_own` sets the mode only when it creates the file.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok((file, Some(Beside { target, staging })))
}

/// The file a tape is rewritten in: `path`, or the file a symbolic link given as `path` leads
/// to. Every command that replaces a tape (a re-recording, `prune`, `redact`, `check --update`)
/// replaces that file, its `.bak` beside it, and keeps the link.
pub(crate) fn behind_link(path: &Path) -> io::Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("following the symbolic link {}: {e}", path.display()),
            )
        }),
        _ => Ok(path.to_path_buf()),
    }
}

/// Whether a live writer holds `path` (its lock, `sink::lock`): a recording still going on. A
/// reader's share of the lock (`mcptape push` reading the tape) is no writer: a re-recording
/// writes `TAPE.new` and renames it over the tape, which the reader's open file does not see.
pub(crate) fn being_written(path: &Path) -> bool {
    File::open(path).is_ok_and(|f| {
        super::sink::lock_shared(&f).is_err_and(|e| e.raw_os_error() == Some(libc::EWOULDBLOCK))
    })
}

/// The refusal of a second recording of `tape`, whose live writer writes `into`; or, when only
/// readers hold the lock (a reader's share of it takes: [`open_unless_written`]), of a
/// recording while `mcptape push` uploads the tape.
fn being_recorded(tape: &Path, into: &Path) -> io::Error {
    if !being_written(into) {
        return io::Error::other(format!(
            "{} is being read by another mcptape right now (`mcptape push` uploading it); record it once that is done, or to another tape",
            tape.display()
        ));
    }
    io::Error::other(format!(
        "{} is being recorded by another mcptape right now (into {}); record to another tape, or when that recording ends",
        tape.display(),
        into.display()
    ))
}

/// Whether `path` is a recording cut off before its closing line (what a killed re-recording
/// leaves at `TAPE.new`). One left by a recording that held no exchange is closed: it was
/// reported when it ended and is written over without a word.
fn unfinished(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
        && last_line(path).is_some_and(|last| !last.starts_with(b"{\"type\":\"end\""))
}

/// A file's last line, within its last 4 KiB (a closing line is short: counts, exit, reason,
/// hashes), trailing newlines skipped. A recorder killed mid-session leaves up to 64 KiB of them
/// (`sink`): past 4 KiB of them the line is empty, which is no closing line either. `None` for
/// a file that cannot be read.
pub fn last_line(path: &Path) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut tail = Vec::new();
    f.seek(io::SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    f.read_to_end(&mut tail).ok()?;
    let last = tail.trim_ascii_end();
    Some(
        last.rsplit(|&b| b == b'\n')
            .next()
            .unwrap_or_default()
            .to_vec(),
    )
}

/// Cuts off the newlines a recorder killed mid-session left at the end of its tape (its
/// padding, up to 64 KiB: `sink.rs`), for a tape about to be moved elsewhere (`mcptape push`
/// uploading a killed recording's spool): the tape then reads as it did, to the line
/// ([`reader::unpadded_len`](super::reader::unpadded_len): a whole last line keeps its newline,
/// a torn one none). How many bytes were cut: 0 for a tape that does not end in padding (one
/// closed cleanly), and for one whose writer's lock cannot be taken (a writer still at it,
/// whatever else says it is gone: a file written through a map is never cut under it).
pub fn cut_padding(path: &Path) -> io::Result<u64> {
    cut_padding_unless_held(path).map(Option::unwrap_or_default)
}

/// Whether a writer holds `path`'s lock (`flock`): a recording still writing it, whatever else
/// says it is gone (its process in another PID namespace, a host name that differs). False
/// when the file cannot be opened.
pub fn held_by_a_writer(path: &Path) -> bool {
    std::fs::File::open(path).is_ok_and(|f| super::sink::lock(&f).is_err())
}

/// Opens `path` to be read whole, holding a reader's share of its writer's lock (`flock`) while
/// the file stays open: no mcptape writer starts on it meanwhile (a recording, `play --on-miss
/// live` appending: each refuses a tape whose lock it cannot take) and changes it under the
/// reader; other readers share it. `None` when a writer holds the lock: a recording still
/// writing the file, whatever else says. On a file system without `flock` (some NFS and FUSE
/// mounts) the file is opened unlocked: no writer there maps or pads it (`sink.rs`).
pub fn open_unless_written(path: &Path) -> io::Result<Option<File>> {
    let file = File::open(path)?;
    match super::sink::lock_shared(&file) {
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
        Err(_) | Ok(()) => Ok(Some(file)),
    }
}

/// [`cut_padding`], `None` when a writer holds the file's lock.
fn cut_padding_unless_held(path: &Path) -> io::Result<Option<u64>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    // Every writer that pads holds the lock while it lasts (`sink::TapeFile::new`); it goes
    // with its process. This one goes with `file`.
    if super::sink::lock(&file).is_err() {
        return Ok(None);
    }
    let Some(keep) = super::reader::unpadded_len(&file) else {
        return Ok(Some(0));
    };
    let len = file.metadata()?.len();
    file.set_len(keep)?;
    Ok(Some(len.saturating_sub(keep)))
}

impl Beside {
    /// `TAPE.new`, the file written.
    pub(crate) fn staging(&self) -> &Path {
        &self.staging
    }

    /// Puts the closed recording in place if it holds a session, and says on stderr what
    /// became of it.
    pub(crate) fn settle(self, session: bool) -> Placed {
        let (tape, new) = (self.target.display(), self.staging.display());
        if !session {
            crate::diag!(
                "mcptape: the new recording held no exchange: {tape} is kept as it was; the new recording is at {new}"
            );
            return Placed::KeptOld { at: self.staging };
        }
        let backup = with_suffix(&self.target, ".bak");
        let replaced = keep_as_backup(&self.target, &backup).and_then(|()| {
            std::fs::rename(&self.staging, &self.target)
                .map_err(|e| io::Error::new(e.kind(), format!("moving {new} there: {e}")))
        });
        match replaced {
            Ok(()) => {
                crate::diag!(
                    "mcptape: replaced {tape}; the old tape is kept as {}",
                    backup.display()
                );
                Placed::Replaced { backup }
            }
            Err(e) => {
                crate::diag!(
                    "mcptape: error: could not replace {tape}: {e}. {tape} is kept as it was; the new recording is at {new}"
                );
                Placed::NotReplaced {
                    why: e.to_string(),
                    at: self.staging,
                }
            }
        }
    }

    /// The note for an error that kept the recording from closing: nothing was replaced.
    pub(crate) fn not_closed(&self, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!(
                "{e}; {} is kept as it was, the unfinished recording is at {}",
                self.target.display(),
                self.staging.display()
            ),
        )
    }
}

/// Keeps `tape` as `backup`: a hard link (no copy, and no moment without a tape at its path),
/// or a copy where links cannot be made. An earlier backup is replaced, a symbolic link at that
/// name is not (nor followed).
fn keep_as_backup(tape: &Path, backup: &Path) -> io::Result<()> {
    let named = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("keeping the old tape as {}: {e}", backup.display()),
        )
    };
    match std::fs::symlink_metadata(backup) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(io::Error::other(format!(
                "{} is a symbolic link; refusing to replace it",
                backup.display()
            )))
        }
        Ok(_) => std::fs::remove_file(backup).map_err(named)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(named(e)),
    }
    // `link` never follows a link at its new name: one planted meanwhile fails it, and then
    // `copy_own` refuses it too.
    if std::fs::hard_link(tape, backup).is_err() {
        super::writer::copy_own(tape, backup).map_err(named)?;
    }
    Ok(())
}
