//! Play's start-up on a big tape is the index: every line read and every request's params
//! hashed (about 0.4 s for 100,000 exchanges). The index of a tape of 4 MiB or more is therefore
//! kept between plays in the user's cache (`$MCPTAPE_CACHE_DIR/index/`, else
//! `$XDG_CACHE_HOME/mcptape/index/`, else `~/.cache/mcptape/index/`), one file per tape path
//! and server, and used only while the tape
//! file is exactly the one it was built from: same device, inode, length, modification and
//! change time, and the same mcptape build (match keys are hashes whose function may change
//! between versions and Rust releases: a probe key is stored and compared). Anything else — no cache dir, a
//! stale or unreadable entry — means a cold load.
//!
//! `record` writes the entry as it closes a tape; a play that built the index writes it behind
//! its serving loop (`PendingStore`, on play's background thread), only if the tape is still
//! the file the index was read from.
//!
//! The cache is bounded ([`MAX_BYTES`], [`MAX_ENTRIES`]): every write drops the entries used
//! longest ago (a hit marks its entry used, by its access time) until it holds, so the entries
//! of tapes deleted long since (a CI's, a test suite's temporary folders) do not pile up.
//!
//! The cache holds offsets and hashes, never message bodies: bodies are still read from the tape.
//! Every entry ends with the SHA-256 of the bytes before it, checked before the entry is read:
//! a damaged entry (one flipped bit) is a cold load, never a wrong answer or a crash. Every
//! message number in it is checked to lie inside the index too.
//!
//! Beside the index, a second small entry remembers that the tape's hash chain was found whole
//! (by play's background check, or because `record` wrote it), for the same file as above and
//! the same change time: a change time cannot be set back without root, so an edit, even one
//! that restores length and modification time, makes it stale. Play then skips re-reading and
//! re-hashing the whole tape behind its serving loop (SHA-256 of every line: the largest CPU cost
//! of a warm start on a pinned CPU), and `check`, `diff` and the other commands that read a tape
//! whole skip hashing it (a chain they find whole is noted too). A broken chain is never
//! remembered: it is reported every time. `verify` and `play --require-chain` always check the
//! chain themselves.

use super::format::{End, Header, ServerDecl};
use super::index::{BadClientLine, Exchange, HttpSummary, MsgMeta, Standalone, TapeIndex};
use super::reader::Warning;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Smaller tapes load fast enough that a cache would only add files.
const MIN_TAPE_LEN: u64 = 4 * 1024 * 1024;

/// The most the cache folder holds: 512 MiB (an index is about a tenth of its tape: the
/// indexes of some 35 tapes of 145 MiB, or of hundreds of a few MiB) …
const MAX_BYTES: u64 = 512 * 1024 * 1024;
/// … in at most this many entries (a chain note is one of 136 bytes).
const MAX_ENTRIES: usize = 4096;
/// A write left in the folder (`<entry>.tmp<pid>`) by a process killed mid-write is dropped
/// once this old (a live writer renames its file within moments).
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// The tape file as it was when its index was built.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        })
    }
}

/// An index as read back: everything but the open file.
pub(crate) struct Parts {
    pub header: Header,
    pub servers: Vec<ServerDecl>,
    pub labels: Vec<String>,
    pub server: String,
    pub end: Option<End>,
    pub warnings: Vec<Warning>,
    pub msgs: Vec<MsgMeta>,
    pub exchanges: Vec<Exchange>,
    pub standalone: Vec<Standalone>,
    pub http: HttpSummary,
    pub bad_lines: Vec<BadClientLine>,
}

/// A cache entry, in postcard (compact binary: a fifth of the JSON's size, and several times
/// faster to read). The tape's own records keep their JSON form inside it: they skip absent
/// fields, which a format without field names cannot do.
#[derive(serde::Deserialize)]
struct Stored {
    tool: String,
    stamp: Stamp,
    meta: String,
    msgs: Vec<MsgMeta>,
    exchanges: Vec<Exchange>,
    standalone: Vec<Standalone>,
}

/// The same, borrowed from an index, for writing.
#[derive(serde::Serialize)]
struct StoredRef<'a> {
    tool: String,
    stamp: Stamp,
    meta: String,
    msgs: &'a [MsgMeta],
    exchanges: &'a [Exchange],
    standalone: &'a [Standalone],
}

/// The small part: header, server declarations, closing line, warnings.
#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    header: Header,
    servers: Vec<ServerDecl>,
    labels: Vec<String>,
    server: String,
    end: Option<End>,
    warnings: Vec<Warning>,
    #[serde(default)]
    http: HttpSummary,
    #[serde(default)]
    bad_lines: Vec<BadClientLine>,
}

/// What the index is made of, by what rules: bumped whenever the index is built differently
/// from the same tape (2: answers paired by HTTP session and POST; 3: messages say whether
/// they were appended; 4: requests keyed by their params' exact text too; 5: where a body's
/// id lies, and keys hashed with XXH3; 6: an SSE message's event name; 7: a session's
/// standalone points count the `initialize` that opened it; 8: an oversize line's id and method,
/// read from its first bytes, and an oversize answer closes its exchange; 9: a server batch of
/// answers belongs to no exchange and is not standalone; 10: an entry ends with its SHA-256;
/// 11: the header's marker key id, a stdio line's CRLF and the whitespace around its JSON, an
/// HTTP tape's `http-accepted`, and the client's bad lines with their answers; 12: integers
/// beyond 64 bits and lone surrogates in params keyed exactly, `wire/exact.rs`; 13: a POST
/// refusal's `content_type` that can only be the request's is dropped, and an `http-accepted`
/// or `http-error` answer says whether it carried the session id, a bad client line holds
/// its POST's refusal, and a server message whether its answer carried the session id; 14: the
/// server's CORS headers, `http-options` and `http-cors`; 15: the answers to GETs and DELETEs,
/// `http-get` and `http-delete` with their `status`, by case, and whether the server sent the
/// session id on its answers in a session; 16, 17: a field added to the HTTP summary and taken
/// out again; 18: an error without an id that is the body of a POST's answer answers the
/// request that POST carried, and a string id pairs by its value however escaped; 19: a GET
/// refused `409 Conflict` in a session the server had is kept apart; 20: the labels of every
/// message line, the other servers' too), so an entry written by a build of the same version
/// before the change is not used.
const INDEX_FORMAT: u32 = 20;

/// This build: its version, and the match key of a probe, so that an entry whose keys another
/// key function made (a build with another hash) is never used.
fn tool() -> String {
    let probe = crate::wire::canonical::hash_key("mcptape-index-cache", "null");
    format!(
        "mcptape {} index {INDEX_FORMAT} {probe:?}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The cache folder: `index/` in mcptape's cache folder, the one remote tapes are kept in —
/// `$MCPTAPE_CACHE_DIR`, else under `$XDG_CACHE_HOME`, else under `$HOME/.cache` — only when
/// that home is a folder that is there. The cache is never worth making the user's home (a
/// HOME that does not exist: a service account, a sandbox): without it every load is cold.
fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MCPTAPE_CACHE_DIR").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir).join("index"));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?);
            if !home.is_dir() {
                return None;
            }
            home.join(".cache")
        }
    };
    Some(base.join("mcptape").join("index"))
}

/// The cache file of a tape and a server choice: a hash of both, so any path fits.
fn entry(dir: &Path, tape: &Path, server: Option<&str>) -> Option<PathBuf> {
    entry_with(dir, tape, server, "idx")
}

fn entry_with(dir: &Path, tape: &Path, server: Option<&str>, ext: &str) -> Option<PathBuf> {
    let tape = std::fs::canonicalize(tape).ok()?;
    let mut h = Sha256::new();
    h.update(tape.as_os_str().as_encoded_bytes());
    h.update([0]);
    if let Some(s) = server {
        h.update(s.as_bytes());
    }
    let name: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Some(dir.join(format!("{name}.{ext}")))
}

/// The cached index of `tape`, if there is one for exactly this file.
pub(crate) fn load(tape: &Path, server: Option<&str>) -> Option<Parts> {
    load_in(&default_dir()?, tape, server)
}

fn load_in(dir: &Path, tape: &Path, server: Option<&str>) -> Option<Parts> {
    let stamp = Stamp::of(tape)?;
    if stamp.len < MIN_TAPE_LEN {
        return None;
    }
    let stored: Stored = read_entry(&entry(dir, tape, server)?)?;
    if stored.tool != tool()
        || stored.stamp != stamp
        || !offsets_fit(&stored.msgs, stamp.len)
        || !numbers_fit(&stored)
    {
        return None;
    }
    let meta: Meta = serde_json::from_str(&stored.meta).ok()?;
    let (n, e) = (stored.msgs.len(), stored.exchanges.len());
    let bad_fit = meta
        .bad_lines
        .iter()
        .all(|b| b.msg < n && b.answer.is_none_or(|a| a < n) && b.exchange.is_none_or(|x| x < e));
    if !bad_fit {
        return None;
    }
    mark_used(&entry(dir, tape, server)?);
    Some(Parts {
        header: meta.header,
        servers: meta.servers,
        labels: meta.labels,
        server: meta.server,
        end: meta.end,
        warnings: meta.warnings,
        msgs: stored.msgs,
        exchanges: stored.exchanges,
        standalone: stored.standalone,
        http: meta.http,
        bad_lines: meta.bad_lines,
    })
}

/// Every body lies inside the tape (a damaged entry must not send reads astray).
fn offsets_fit(msgs: &[MsgMeta], len: u64) -> bool {
    use super::index::Body;
    msgs.iter().all(|m| match m.body {
        Body::Json { offset, len: l }
        | Body::Text { offset, len: l }
        | Body::B64 { offset, len: l } => {
            offset.checked_add(l as u64).is_some_and(|end| end <= len)
        }
        Body::Oversize { .. } => true,
    })
}

/// Every message an exchange or a standalone message names is in the index (play indexes
/// `msgs` with these numbers).
fn numbers_fit(stored: &Stored) -> bool {
    let n = stored.msgs.len();
    let fits = |i: &usize| *i < n;
    stored.exchanges.iter().all(|e| {
        fits(&e.request)
            && e.response.as_ref().is_none_or(fits)
            && e.during.iter().all(fits)
            && e.client_answers.iter().all(|(a, b)| fits(a) && fits(b))
            && e.retry_of.is_none_or(|r| r < stored.exchanges.len())
    }) && stored
        .standalone
        .iter()
        .all(|s| fits(&s.msg) && s.client_answer.as_ref().is_none_or(fits))
}

/// Whether a tape of `len` bytes is small enough to load (and check) at once: under the size
/// at which indexes are cached.
pub(crate) fn is_small(len: u64) -> bool {
    len < MIN_TAPE_LEN
}

/// Whether a tape at `tape` is big enough for its index to be cached.
pub(crate) fn worth_caching(tape: &Path) -> bool {
    default_dir().is_some() && Stamp::of(tape).is_some_and(|s| s.len >= MIN_TAPE_LEN)
}

/// Keeps the index of a big tape for the next play. Best effort: a failure only costs the next
/// start-up a cold load. `built_from`: the tape as it was before its index was read.
pub(crate) fn store(index: &TapeIndex, server: Option<&str>, built_from: FileStamp) {
    if let Some(pending) = pending(index, server, built_from) {
        pending.write();
    }
}

/// An index to keep, taken apart (its tables shared, not copied) so that play's background
/// thread writes it while play serves: serializing 100,000 exchanges is a tenth of a cold
/// start-up.
pub(crate) struct PendingStore {
    dir: PathBuf,
    tape: PathBuf,
    server: Option<String>,
    stamp: Stamp,
    meta: Meta,
    msgs: Arc<Vec<MsgMeta>>,
    exchanges: Arc<Vec<Exchange>>,
    standalone: Arc<Vec<Standalone>>,
}

/// The index of a big tape, ready to be kept; `None` for a small one or without a cache dir.
pub(crate) fn pending(
    index: &TapeIndex,
    server: Option<&str>,
    built_from: FileStamp,
) -> Option<PendingStore> {
    pending_in(default_dir()?, index, server, built_from)
}

fn pending_in(
    dir: PathBuf,
    index: &TapeIndex,
    server: Option<&str>,
    FileStamp(stamp): FileStamp,
) -> Option<PendingStore> {
    // A tape without its closing line may still be being written, through a map that changes
    // neither its length nor always its time (sink.rs): its index would not stay true.
    if stamp.len < MIN_TAPE_LEN || index.end.is_none() {
        return None;
    }
    Some(PendingStore {
        dir,
        tape: index.path.clone(),
        server: server.map(str::to_string),
        stamp,
        meta: Meta {
            header: index.header.clone(),
            servers: index.servers.clone(),
            labels: index.labels.clone(),
            server: index.server.clone(),
            end: index.end.clone(),
            warnings: index.warnings.clone(),
            http: index.http.clone(),
            bad_lines: index.bad_lines.to_vec(),
        },
        msgs: index.msgs.clone(),
        exchanges: index.exchanges.clone(),
        standalone: index.standalone.clone(),
    })
}

impl PendingStore {
    /// Writes the entry, unless the tape is no longer the file the index was read from.
    pub(crate) fn write(self) -> Option<()> {
        if Stamp::of(&self.tape).as_ref() != Some(&self.stamp) {
            return None;
        }
        let path = entry(&self.dir, &self.tape, self.server.as_deref())?;
        super::store::create_private_dir(&self.dir).ok()?;
        let stored = StoredRef {
            tool: tool(),
            stamp: self.stamp,
            meta: serde_json::to_string(&self.meta).ok()?,
            msgs: &self.msgs,
            exchanges: &self.exchanges,
            standalone: &self.standalone,
        };
        write_entry(&path, &stored)
    }
}

/// The length of the checksum that ends every entry: a SHA-256.
const CHECKSUM_LEN: usize = 32;

/// Reads an entry back: `None` unless its checksum holds and it parses.
fn read_entry<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    let body_len = bytes.len().checked_sub(CHECKSUM_LEN)?;
    let (body, sum) = bytes.split_at(body_len);
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    postcard::from_bytes(body).ok()
}

/// Writes an entry, its checksum last, to a name of our own, then renames it: a reader never
/// sees half an entry.
fn write_entry(path: &Path, value: &impl serde::Serialize) -> Option<()> {
    let staging = path.with_extension(format!("tmp{}", std::process::id()));
    let body = postcard::to_stdvec(value).ok()?;
    let sum = Sha256::digest(&body);
    let written = super::writer::open_own(&staging).and_then(|mut f| {
        f.write_all(&body)?;
        f.write_all(&sum)
    });
    if written.is_err() || std::fs::rename(&staging, path).is_err() {
        let _ = std::fs::remove_file(&staging);
        return None;
    }
    if let Some(dir) = path.parent() {
        trim(dir, path, MAX_BYTES, MAX_ENTRIES);
    }
    Some(())
}

/// Marks an entry used now: its access time, which [`trim`] goes by (set here, as a file
/// system mounted `noatime` or `relatime` may not; the modification time stays the time the
/// entry was written). Best effort: an entry that cannot be marked is only dropped sooner.
fn mark_used(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let now = std::time::SystemTime::now();
        let _ = f.set_times(std::fs::FileTimes::new().set_accessed(now));
    }
}

/// Drops the entries of `dir` used longest ago until it holds at most `max_bytes` in at most
/// `max_entries` entries, `keep` (the entry just written) aside; and any staging file a killed
/// writer left. Only the cache's own files are touched: `*.idx`, `*.chain` and `*.tmp<pid>`
/// with a hex name. Best effort, as the cache is.
fn trim(dir: &Path, keep: &Path, max_bytes: u64, max_entries: usize) {
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut entries = Vec::new();
    for item in list.flatten() {
        let path = item.path();
        let Some(kind) = own_file(&path) else {
            continue;
        };
        let Ok(meta) = item.metadata() else {
            continue;
        };
        let written = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if kind == OwnFile::Staging {
            if now.duration_since(written).unwrap_or_default() > STALE_STAGING {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let used = meta.accessed().unwrap_or(written).max(written);
        entries.push((used, meta.len(), path));
    }
    let mut bytes: u64 = entries.iter().map(|e| e.1).sum();
    let mut count = entries.len();
    if bytes <= max_bytes && count <= max_entries {
        return;
    }
    entries.sort_by_key(|e| e.0);
    for (_, len, path) in entries {
        if bytes <= max_bytes && count <= max_entries {
            break;
        }
        if path == keep {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            bytes -= len;
            count -= 1;
        }
    }
}

/// The cache's own kinds of file.
#[derive(PartialEq)]
enum OwnFile {
    Entry,
    Staging,
}

/// Whether `path` is one of the cache's files: 32 hex digits, then `.idx` or `.chain`, or a
/// staging file `.tmp<pid>`.
fn own_file(path: &Path) -> Option<OwnFile> {
    let name = path.file_name()?.to_str()?;
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 32 || !stem.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    match ext {
        "idx" | "chain" => Some(OwnFile::Entry),
        _ if ext
            .strip_prefix("tmp")
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Some(OwnFile::Staging)
        }
        _ => None,
    }
}

/// The tape file as it is now, for [`note_chain_held`]: taken before the chain is read, so a
/// change during the check makes the note stale at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStamp(Stamp);

impl FileStamp {
    pub(crate) fn of(tape: &Path) -> Option<FileStamp> {
        Stamp::of(tape).map(FileStamp)
    }
}

/// What the chain entry holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChainHeld {
    tool: String,
    stamp: Stamp,
}

/// Whether `tape`'s hash chain was found whole for exactly this file (see the module comment).
pub(crate) fn chain_held(tape: &Path) -> bool {
    default_dir().is_some_and(|dir| chain_held_in(&dir, tape))
}

fn chain_held_in(dir: &Path, tape: &Path) -> bool {
    let Some(stamp) = Stamp::of(tape).filter(|s| s.len >= MIN_TAPE_LEN) else {
        return false;
    };
    let Some(path) = entry_with(dir, tape, None, "chain") else {
        return false;
    };
    let held = read_entry::<ChainHeld>(&path)
        .is_some_and(|held| held.tool == tool() && held.stamp == stamp);
    if held {
        mark_used(&path);
    }
    held
}

/// Remembers that `tape`'s chain holds, as the file was at `stamp`; nothing if the file has
/// changed since (or is small: its check is quick). Best effort.
pub(crate) fn note_chain_held(tape: &Path, stamp: &FileStamp) {
    if let Some(dir) = default_dir() {
        note_chain_held_in(&dir, tape, stamp);
    }
}

fn note_chain_held_in(dir: &Path, tape: &Path, stamp: &FileStamp) -> Option<()> {
    let now = Stamp::of(tape)?;
    if now != stamp.0 || now.len < MIN_TAPE_LEN {
        return None;
    }
    let path = entry_with(dir, tape, None, "chain")?;
    super::store::create_private_dir(dir).ok()?;
    write_entry(
        &path,
        &ChainHeld {
            tool: tool(),
            stamp: now,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps `index` in `dir` as play does, the tape as it is now taken as the one read.
    fn store_in(dir: &Path, index: &TapeIndex, server: Option<&str>) -> Option<()> {
        let stamp = FileStamp::of(&index.path)?;
        pending_in(dir.to_path_buf(), index, server, stamp)?.write()
    }

    /// A tape over the size threshold: 40 calls with 128 KiB answers.
    fn big_tape(path: &Path) {
        big_tape_closed(path, true)
    }

    /// The same, closed or left as a recorder killed after its last write leaves it.
    fn big_tape_closed(path: &Path, closed: bool) {
        use crate::tape::{TapeWriter, WriteOptions};
        use crate::wire::{Dir, Frame, Line};
        let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
        let text = "x".repeat(128 * 1024);
        let frame = |b: &[u8]| -> Vec<u8> { b.to_vec() };
        for i in 0..40 {
            let req = frame(
                format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"t","arguments":{{"i":{i}}}}}}}"#)
                    .as_bytes(),
            );
            let res = frame(
                format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#)
                    .as_bytes(),
            );
            for (dir, bytes) in [(Dir::C2S, &req), (Dir::S2C, &res)] {
                let line = Line {
                    bytes,
                    crlf: false,
                    unterminated: false,
                    bom: false,
                };
                w.message("srv", dir, &Frame::Line(line), std::time::Instant::now());
            }
            w.commit().unwrap();
        }
        if closed {
            w.finish(None, None).unwrap();
        } else {
            std::mem::forget(w); // as if killed: no closing line, and the padding stays
        }
    }

    /// A tape without its closing line may still be being written, through a map that moves
    /// neither its length nor always its time: its index is not kept.
    #[test]
    fn the_index_of_a_tape_without_its_closing_line_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let tape = dir.path().join("t.jsonl");
        big_tape_closed(&tape, false);
        let index = TapeIndex::load(&tape, None).unwrap();
        assert!(index.end.is_none() && index.exchanges.len() == 40);
        assert!(store_in(&dir.path().join("cache"), &index, None).is_none());
    }

    #[test]
    fn a_cached_index_equals_the_cold_one_and_goes_stale_with_the_tape() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let tape = dir.path().join("t.jsonl");
        big_tape(&tape);
        assert!(load_in(&cache, &tape, None).is_none(), "nothing cached yet");
        let cold = TapeIndex::load(&tape, None).unwrap();
        store_in(&cache, &cold, None).expect("stored");
        let warm = load_in(&cache, &tape, None).expect("a fresh entry is used");
        assert_eq!(warm.exchanges.len(), 40);
        assert_eq!(
            format!(
                "{:?}",
                (&warm.msgs, &warm.exchanges, &warm.standalone, &warm.end)
            ),
            format!(
                "{:?}",
                (&cold.msgs, &cold.exchanges, &cold.standalone, &cold.end)
            )
        );
        assert!(
            load_in(&cache, &tape, Some("other")).is_none(),
            "per server choice"
        );
        // Any change to the file (here: one more byte) makes the entry stale.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&tape)
            .unwrap()
            .write_all(b"\n")
            .unwrap();
        assert!(load_in(&cache, &tape, None).is_none());
    }

    /// A big tape in a fresh folder and its cold index stored in the cache there: the folder
    /// (kept alive), the cache, the tape, the index.
    fn stored() -> (tempfile::TempDir, PathBuf, PathBuf, TapeIndex) {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let tape = dir.path().join("t.jsonl");
        big_tape(&tape);
        let cold = TapeIndex::load(&tape, None).unwrap();
        store_in(&cache, &cold, None).expect("stored");
        (dir, cache, tape, cold)
    }

    /// One flipped bit anywhere in an entry made play panic (an exchange naming a message past
    /// the index) or serve another answer: a damaged entry is a cold load.
    #[test]
    fn a_damaged_entry_is_not_used() {
        let (_dir, cache, tape, _) = stored();
        let path = entry(&cache, &tape, None).unwrap();
        let good = std::fs::read(&path).unwrap();
        assert!(load_in(&cache, &tape, None).is_some());
        for pos in (0..good.len()).step_by(7).chain([good.len() - 1]) {
            let mut bad = good.clone();
            bad[pos] ^= 1 << (pos % 8);
            std::fs::write(&path, &bad).unwrap();
            assert!(
                load_in(&cache, &tape, None).is_none(),
                "bit flipped at {pos}"
            );
        }
        for cut in [0, 1, CHECKSUM_LEN, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert!(load_in(&cache, &tape, None).is_none(), "cut to {cut} bytes");
        }
        std::fs::write(&path, &good).unwrap();
        assert!(load_in(&cache, &tape, None).is_some(), "whole again");
    }

    #[test]
    fn an_index_whose_tape_changed_before_it_was_written_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let tape = dir.path().join("t.jsonl");
        big_tape(&tape);
        let before = FileStamp::of(&tape).unwrap();
        let index = TapeIndex::load(&tape, None).unwrap();
        // Play writes the entry behind its serving loop: the tape may change meanwhile.
        let pending = pending_in(cache.clone(), &index, None, before).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&tape)
            .unwrap()
            .write_all(b"\n")
            .unwrap();
        assert!(pending.write().is_none(), "not written");
        assert!(!entry(&cache, &tape, None).unwrap().exists());
        assert!(load_in(&cache, &tape, None).is_none());
    }

    /// Files in `dir` named as entries, each `len` bytes, used `ago` seconds ago.
    fn aged(dir: &Path, files: &[(&str, usize, u64)]) -> Vec<PathBuf> {
        std::fs::create_dir_all(dir).unwrap();
        files
            .iter()
            .map(|(name, len, ago)| {
                let path = dir.join(name);
                std::fs::write(&path, vec![0u8; *len]).unwrap();
                let when = std::time::SystemTime::now() - std::time::Duration::from_secs(*ago);
                set_times(&path, when);
                path
            })
            .collect()
    }

    /// Sets `path`'s access and modification times to `when`.
    fn set_times(path: &Path, when: std::time::SystemTime) {
        std::fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(when)
                    .set_modified(when),
            )
            .unwrap();
    }

    fn hex(c: char) -> String {
        std::iter::repeat_n(c, 32).collect()
    }

    /// The cache grew without bound: every big tape recorded or played, in a temporary folder
    /// deleted since (a test suite's, a CI's), left its entry for good (714 files, 89 MB on
    /// the development machine after a day). A write now drops the entries used longest ago.
    #[test]
    fn the_cache_drops_the_entries_used_longest_ago_past_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let (a, b, c, d) = (hex('a'), hex('b'), hex('c'), hex('d'));
        let files = aged(
            &cache,
            &[
                (&format!("{a}.idx"), 400, 40),
                (&format!("{b}.idx"), 400, 30),
                (&format!("{c}.chain"), 100, 20),
                (&format!("{d}.idx"), 400, 10),
                // Not the cache's: never touched, whatever their age.
                ("notes.txt", 5000, 50),
                (&format!("{a}.json"), 5000, 50),
            ],
        );
        // 1,300 bytes of entries against a bound of 1,000: the oldest goes, then enough.
        trim(&cache, &files[3], 1000, 100);
        let left = |files: &[PathBuf]| files.iter().map(|f| f.exists()).collect::<Vec<_>>();
        assert_eq!(left(&files), [false, true, true, true, true, true]);
        // The one just written stays even when it is the oldest; by count too.
        trim(&cache, &files[1], 0, 1);
        assert_eq!(left(&files), [false, true, false, false, true, true]);
    }

    #[test]
    fn a_hit_marks_its_entry_used_and_a_killed_writers_staging_file_goes() {
        let (_dir, cache, tape, _) = stored();
        let path = entry(&cache, &tape, None).unwrap();
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        set_times(&path, long_ago);
        assert!(load_in(&cache, &tape, None).is_some());
        let meta = std::fs::metadata(&path).unwrap();
        assert!(
            meta.accessed().unwrap() > long_ago,
            "marked used by the hit"
        );
        // Its modification time stays the time it was written (what tells a rewrite).
        assert_eq!(meta.modified().unwrap(), long_ago);
        // An older entry of another tape goes first once the cache is over its bound.
        let older = aged(&cache, &[(&format!("{}.idx", hex('e')), 10, 100)]);
        let len = std::fs::metadata(&path).unwrap().len();
        trim(&cache, &cache.join("none"), len, 100);
        assert!(path.exists() && !older[0].exists());
        // A staging file an hour old is a killed writer's; a fresh one may be being written.
        let staging = aged(
            &cache,
            &[
                (&format!("{}.tmp123", hex('f')), 10, 7200),
                (&format!("{}.tmp124", hex('f')), 10, 5),
            ],
        );
        trim(&cache, &cache.join("none"), u64::MAX, usize::MAX);
        assert_eq!((staging[0].exists(), staging[1].exists()), (false, true));
    }

    #[test]
    fn small_tapes_and_damaged_entries_are_not_used() {
        let (dir, cache, tape, _) = stored();
        let file = entry(&cache, &tape, None).unwrap();
        std::fs::write(&file, b"\x05damaged").unwrap();
        assert!(load_in(&cache, &tape, None).is_none());
        let small = dir.path().join("s.jsonl");
        crate::tape::TapeWriter::create(&small, Default::default())
            .unwrap()
            .finish(None, None)
            .unwrap();
        let index = TapeIndex::load(&small, None).unwrap();
        assert!(
            store_in(&cache, &index, None).is_none(),
            "under the threshold"
        );
    }
}
