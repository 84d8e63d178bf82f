//! The spool: where a tape bound for object storage is written before it is uploaded, in the
//! cache folder's `spool/`. Each spool file has a sidecar beside it (`<spool>.target`, JSON)
//! naming the URL it goes to, the process writing it and what the file was when the command
//! started (a copy of the object that was there, or nothing), so that an unchanged spool is not
//! uploaded again. No credential is ever in it: only the URL, a process id, a host name and the
//! file's size and times.
//!
//! The spool and its sidecar are removed once uploaded. A command killed before that, or whose
//! upload failed, leaves both: `mcptape push` uploads every such spool whose writer is gone
//! (a killed recording's without the padding its writer left at its end: the CLI cuts it off
//! first, `tape::place::cut_padding`, as this module knows nothing of tapes).

use super::S3Url;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// The spool folder (not created).
pub fn dir() -> PathBuf {
    super::cache::dir().join("spool")
}

/// What a file was: its size, modification time and inode. A tape written, appended to or
/// replaced (renamed over) is another stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Size in bytes.
    pub len: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Inode number (0 where there is none).
    pub ino: u64,
}

impl Stamp {
    /// The file's stamp now, `None` if it is not there.
    pub fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        let mtime_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let ino = 0;
        Some(Stamp {
            len: m.len(),
            mtime_ns,
            ino,
        })
    }
}

/// The sidecar's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sidecar {
    /// `s3://BUCKET/KEY`.
    target: String,
    /// The process writing the spool.
    pid: u32,
    /// Its host, so that a spool on shared storage is not taken for another machine's.
    host: String,
    /// The spool as the command started (a copy of the object then there), or `None`.
    base: Option<Stamp>,
}

/// A spool file and where it goes.
#[derive(Debug, Clone)]
pub struct Spool {
    /// The tape written.
    pub path: PathBuf,
    /// Where it is uploaded.
    pub target: S3Url,
    /// The process that wrote it.
    pub pid: u32,
    /// That process's host.
    pub host: String,
    /// What it was when the command started.
    pub base: Option<Stamp>,
}

/// The sidecar's path for a spool.
pub fn sidecar_of(spool: &Path) -> PathBuf {
    let mut p = spool.as_os_str().to_owned();
    p.push(".target");
    p.into()
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

impl Spool {
    /// A new spool for `target` in the spool folder, starting as a copy of `from` (the object
    /// there now, fetched) or empty (no file: the command creates it). Its sidecar is written
    /// before this returns.
    pub fn create(target: &S3Url, from: Option<&Path>) -> io::Result<Spool> {
        let folder = dir();
        super::cache::create_private_dir(&folder)?;
        let name = super::cache::file_name(target);
        let url_hash = super::cache::url_hash(target);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = folder.join(format!(
            "{url_hash}-{}-{nanos:09}-{name}",
            std::process::id()
        ));
        if let Some(src) = from {
            copy_private(src, &path)?;
        }
        let spool = Spool {
            base: from.and_then(|_| Stamp::of(&path)),
            path,
            target: target.clone(),
            pid: std::process::id(),
            host: host(),
        };
        spool.write_sidecar()?;
        Ok(spool)
    }

    fn write_sidecar(&self) -> io::Result<()> {
        let doc = Sidecar {
            target: self.target.to_string(),
            pid: self.pid,
            host: self.host.clone(),
            base: self.base,
        };
        let text = serde_json::to_string(&doc).map_err(io::Error::other)? + "\n";
        let side = sidecar_of(&self.path);
        let tmp = with_suffix(&side, ".tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &side)
    }

    /// The spool of a file that has a sidecar beside it, `None` if it has none (or the sidecar
    /// does not read).
    pub fn load(path: &Path) -> Option<Spool> {
        let text = std::fs::read_to_string(sidecar_of(path)).ok()?;
        let doc: Sidecar = serde_json::from_str(&text).ok()?;
        let target = match super::parse(&doc.target, false).ok()? {
            super::Target::S3(u) => u,
            super::Target::File(_) => return None,
        };
        Some(Spool {
            path: path.to_path_buf(),
            target,
            pid: doc.pid,
            host: doc.host,
            base: doc.base,
        })
    }

    /// Whether the tape differs from what the command started with (and so is to be uploaded).
    pub fn changed(&self) -> bool {
        match (Stamp::of(&self.path), self.base) {
            (None, _) => false,
            (Some(now), Some(base)) => now != base,
            (Some(_), None) => true,
        }
    }

    /// Whether the process that wrote it is still running on this machine (and so may still be
    /// writing).
    pub fn writer_alive(&self) -> bool {
        if self.pid == std::process::id() {
            return false;
        }
        if !self.host.is_empty() && self.host != host() {
            // Another machine's: its writer cannot be asked; taken as gone.
            return false;
        }
        // SAFETY: kill(2) with signal 0 sends nothing; it only asks whether the process exists.
        let r = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
        r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// Removes the spool, its sidecar and the files recording leaves beside it (`.new`, `.bak`).
    pub fn remove(&self) {
        for p in [
            self.path.clone(),
            sidecar_of(&self.path),
            with_suffix(&self.path, ".new"),
            with_suffix(&self.path, ".bak"),
        ] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Every spool of the spool folder that has a sidecar, oldest first.
pub fn pending() -> io::Result<Vec<Spool>> {
    let entries = match std::fs::read_dir(dir()) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(spool) = name.strip_suffix(".target") else {
            continue;
        };
        let spool_path = p.with_file_name(spool);
        if let Some(s) = Spool::load(&spool_path) {
            out.push(s);
        }
    }
    out.sort_by_key(|s| {
        std::fs::metadata(sidecar_of(&s.path))
            .and_then(|m| m.modified())
            .ok()
    });
    Ok(out)
}

/// Copies `from` to a new owner-only file `to`.
fn copy_private(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = std::fs::File::open(from)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut dst = opts.open(to)?;
    io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}
