//! Tape arguments that are URLs, for every command: `s3://BUCKET/KEY` is fetched into the
//! cache to be read, or written through a spool and uploaded when the command ends;
//! `file:///PATH` is that path. Anything else is a name or a path, resolved as before
//! ([`store::resolve`], [`store::resolve_for_write`]), without a look at the network.

use anyhow::{Context as _, Result};
use mcptape::inspect::human_bytes;
use mcptape::remote::{self, cache, spool::Spool, Bucket, S3Url, Target};
use mcptape::tape::{place, reader, store};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The spools this command writes, uploaded by [`settle`] when it ends, each with whether it
/// is a new recording over an object that is there (uploaded only if it holds an exchange).
static PENDING: Mutex<Vec<(Spool, bool)>> = Mutex::new(Vec::new());

/// A tape argument to read: a name, a path, or a URL (an `s3://` tape fetched into the cache,
/// once per version of the object).
pub fn resolve(arg: &str) -> Result<PathBuf> {
    if !remote::is_url(arg) {
        return Ok(store::resolve(arg)?);
    }
    match remote::parse(arg, false)? {
        Target::File(p) => Ok(store::resolve(&file_arg(&p))?),
        Target::S3(url) => fetch(&url),
    }
}

/// [`resolve`] for a command that reads a tape once, front to back (`verify`, `lint`): a FIFO
/// or a pipe is read as a file is.
pub fn resolve_stream(arg: &str) -> Result<PathBuf> {
    if !remote::is_url(arg) {
        return Ok(store::resolve_stream(arg)?);
    }
    match remote::parse(arg, false)? {
        Target::File(p) => Ok(store::resolve_stream(&file_arg(&p))?),
        Target::S3(url) => fetch(&url),
    }
}

/// A tape argument to write: a name, a path, or a URL (an `s3://` tape is written to a spool,
/// which starts as a copy of the object there, if any, and is uploaded when the command ends).
pub fn resolve_for_write(arg: &str) -> Result<PathBuf> {
    resolve_for_write_as(arg, false)
}

/// [`resolve_for_write`] for a new recording (`record`): an `s3://` spool starts empty (the
/// object there is not downloaded), and replaces the object only if it holds an exchange, as a
/// re-recording replaces a local tape.
pub fn resolve_for_recording(arg: &str) -> Result<PathBuf> {
    resolve_for_write_as(arg, true)
}

fn resolve_for_write_as(arg: &str, fresh: bool) -> Result<PathBuf> {
    if !remote::is_url(arg) {
        return Ok(store::resolve_for_write(arg)?);
    }
    let url = match remote::parse(arg, false)? {
        Target::File(p) => return Ok(store::resolve_for_write(&file_arg(&p))?),
        Target::S3(url) => url,
    };
    let bucket = Bucket::connect(&url)?;
    let (there, existed) = super::runtime::single()?.block_on(async {
        let (fetched, existed) = if fresh {
            (None, bucket.head(&url.key).await?.is_some())
        } else {
            let f = cache::fetch(&bucket, &url).await?;
            let existed = f.is_some();
            (f, existed)
        };
        if !existed {
            // A HEAD cannot tell a missing key from a missing bucket: ask now, before a server
            // is started and a session recorded for nowhere.
            bucket.check_bucket(&url.key).await?;
        }
        anyhow::Ok((fetched, existed))
    })?;
    // Context, not words: the I/O error stays the cause, so the exit code is 74.
    let spool =
        Spool::create(&url, there.as_ref().map(|f| f.path.as_path())).with_context(|| {
            format!(
                "{url}: creating the spool in {}",
                remote::spool::dir().display()
            )
        })?;
    crate::diag!(
        "mcptape: {url}: writing to the spool {}; uploaded when the tape closes",
        spool.path.display()
    );
    let path = spool.path.clone();
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((spool, fresh && existed));
    Ok(path)
}

/// A tape argument to read and then change in place (`redact`, `prune`, `check --update`):
/// an `s3://` tape is copied to a spool, changed there and uploaded when the command ends.
pub fn resolve_to_modify(arg: &str) -> Result<PathBuf> {
    match remote::is_url(arg)
        .then(|| remote::parse(arg, false))
        .transpose()?
    {
        Some(Target::S3(url)) => {
            let path = resolve_for_write(arg)?;
            if !path.exists() {
                settle_quietly();
                return Err(remote::RemoteError::NotFound {
                    url: url.to_string(),
                    hint: String::new(),
                }
                .into());
            }
            Ok(path)
        }
        _ => resolve(arg),
    }
}

/// Drops the spools registered so far without uploading (the command stopped before writing).
fn settle_quietly() {
    for (s, _) in std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner())) {
        s.remove();
    }
}

/// A `file://` URL's path as a tape argument (it has a '/': a path, never a name).
fn file_arg(p: &Path) -> String {
    p.display().to_string()
}

/// Fetches an `s3://` tape into the cache (or finds it there, unchanged) and says which.
fn fetch(url: &S3Url) -> Result<PathBuf> {
    let bucket = Bucket::connect(url)?;
    let fetched = super::runtime::single()?.block_on(async {
        match cache::fetch(&bucket, url).await? {
            Some(f) => anyhow::Ok(f),
            None => {
                bucket.check_bucket(&url.key).await?;
                Err(remote::RemoteError::NotFound {
                    url: url.to_string(),
                    hint: format!(" at {}", bucket.endpoint()),
                }
                .into())
            }
        }
    })?;
    if fetched.downloaded {
        crate::diag!(
            "mcptape: {url}: fetched {} into the cache ({})",
            human_bytes(fetched.object.size),
            fetched.path.display()
        );
    } else {
        crate::diag!(
            "mcptape: {url}: unchanged, read from the cache ({})",
            fetched.path.display()
        );
    }
    Ok(fetched.path)
}

/// Uploads the spools this command wrote, once it has ended with `code`. A spool that was not
/// changed (a tape played, not appended to; a recording that held no exchange) is dropped. A
/// failed upload keeps the spool for `mcptape push` and turns a success into 74.
pub fn settle(code: i32) -> i32 {
    let spools = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    let mut failed = false;
    for (spool, replaces) in spools {
        if replaces && held_no_exchange(&spool.path) {
            // As over a local tape: the object stays, the recording stays in the spool (no
            // longer pending: `push` would put it over the tape).
            let _ = std::fs::remove_file(remote::spool::sidecar_of(&spool.path));
            crate::diag!(
                "mcptape: the new recording held no exchange: {} is kept as it was; the new recording is at {}",
                spool.target,
                spool.path.display()
            );
            continue;
        }
        if !spool.changed() {
            if spool.path.exists() {
                crate::diag!(
                    "mcptape: {}: the tape did not change; nothing uploaded",
                    spool.target
                );
            }
            // Else the command wrote no tape at all (a server that could not start): nothing
            // to say beyond its own error.
            spool.remove();
            continue;
        }
        match upload_spool(&spool, &spool.target) {
            Ok(()) => {}
            Err(e) => {
                crate::diag!(
                    "mcptape: error: {e:#}; the tape is kept at {} (`mcptape push` uploads it)",
                    spool.path.display()
                );
                failed = true;
            }
        }
    }
    if failed && code == mcptape::exit::OK {
        mcptape::exit::IO_ERR
    } else {
        code
    }
}

/// Whether a closed recording's last line says it held no exchange.
fn held_no_exchange(path: &Path) -> bool {
    let Some(last) = mcptape::tape::place::last_line(path) else {
        return false;
    };
    let Ok(end) = serde_json::from_slice::<serde_json::Value>(&last) else {
        return false;
    };
    end["type"] == "end" && end["exchanges"] == 0
}

/// Uploads a local tape to `url`, whole, and says how it went.
fn upload(path: &Path, url: &S3Url) -> Result<remote::Uploaded> {
    let bucket = Bucket::connect(url)?;
    let up = super::runtime::single()?.block_on(bucket.upload(path, &url.key))?;
    Ok(uploaded(url, up))
}

/// Says how an upload to `url` went.
fn uploaded(url: &S3Url, up: remote::Uploaded) -> remote::Uploaded {
    let how = if up.parts > 0 {
        format!(", a multipart upload of {} parts", up.parts)
    } else {
        String::new()
    };
    crate::diag!("mcptape: uploaded {url} ({}{how})", human_bytes(up.bytes));
    up
}

/// Uploads a tape that is not a spool (`push TAPE s3://…`) as a reader reads it: one left by a
/// recorder killed mid-session goes up without its writer's padding of newlines (the first
/// [`reader::unpadded_len`] bytes: a whole last line keeps its newline, a torn one none), one
/// closed cleanly byte for byte. The file is read, not cut: it is the user's (perhaps not
/// theirs to write, perhaps a `TAPE.new` the next recording writes over), and nothing but the
/// upload needs it shorter; a spool is cut in place because it becomes the cache's copy of the
/// object. A reader's share of the tape's writer's lock is held while it is read
/// ([`place::open_unless_written`]), so that no recording or append starts on it meanwhile; a
/// tape whose lock a writer holds is being recorded, and is refused (before, it went up
/// mid-session with its padding).
fn push_local(path: &Path, url: &S3Url) -> Result<()> {
    let local = |source| remote::RemoteError::Local {
        url: url.to_string(),
        what: "reading",
        path: path.to_path_buf(),
        source,
    };
    let Some(file) = place::open_unless_written(path).map_err(local)? else {
        return Err(super::UsageError(format!(
            "{}: still being written: a writer holds the tape's lock (a recording in progress); push it once that recording has ended",
            path.display()
        ))
        .into());
    };
    warn_if_open(path);
    let len = match reader::unpadded_len(&file) {
        Some(len) => len,
        None => file.metadata().map_err(local)?.len(),
    };
    let bucket = Bucket::connect(url)?;
    let up = super::runtime::single()?.block_on(bucket.upload_file(file, len, path, &url.key))?;
    uploaded(url, up);
    Ok(())
}

/// Uploads a spool, and keeps it as the cache's copy of the new object (this machine reads it
/// back without a download); the rest of the spool is removed. A spool left by a writer killed
/// mid-session is first cut at the end of its lines, its padding of newlines dropped
/// ([`place::cut_padding`]: in place, before the upload, so that an upload that fails leaves a
/// spool that reads as before, which the next `push` uploads as it is, and the cache's copy
/// is the object); if that cannot be done, it goes up as it is, as it did before.
fn upload_spool(spool: &Spool, to: &S3Url) -> Result<()> {
    let _ = place::cut_padding(&spool.path);
    let up = upload(&spool.path, to)?;
    cache::adopt(to, &spool.path, up.etag.as_deref());
    spool.remove();
    Ok(())
}

/// Upload tapes to object storage: a spool that was not uploaded, or any tape.
///
///   mcptape push                      every spool left by a command that did not upload it
///   mcptape push SPOOL                one of them (to the URL in its sidecar)
///   mcptape push TAPE s3://BUCKET/KEY a tape (a name, a path, a spool) to that URL
///
/// A spool is kept in the cache folder's spool/ while its tape is written; it is removed once
/// uploaded. A command killed before its upload (or whose upload failed) leaves it there with a
/// sidecar naming its URL: `push` uploads it. A spool whose command is still running is left
/// alone. A killed recording's tape is uploaded without the newlines its writer padded it
/// with, as it reads (cut off a spool first; a local tape is left as it is). A local tape a
/// recording is still writing is refused.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_PUSH, verbatim_doc_comment)]
pub struct PushArgs {
    /// The tape to upload: a spool, a name or a path. None: every pending spool.
    #[arg(value_name = "TAPE")]
    tape: Option<String>,
    /// Where to: s3://BUCKET/KEY (a KEY ending in '/' gets the tape's file name). For a
    /// spool, its sidecar's URL by default.
    #[arg(value_name = "URL")]
    url: Option<String>,
}

pub fn push(a: PushArgs) -> Result<i32> {
    let Some(tape) = a.tape else {
        return push_pending();
    };
    let path = store::resolve(&tape)?;
    let spool = Spool::load(&path);
    let url = match (&a.url, &spool) {
        (Some(u), _) => {
            let target = match remote::parse(u, true)? {
                Target::S3(t) => t,
                Target::File(_) => {
                    return Err(super::UsageError(format!(
                        "{u}: push uploads to s3://BUCKET/KEY (to copy a local file, use cp)"
                    ))
                    .into())
                }
            };
            if target.key.is_empty() || target.key.ends_with('/') {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let name = match &spool {
                    Some(s) => s.target.file_name().to_string(),
                    None => name,
                };
                S3Url {
                    key: format!("{}{name}", target.key),
                    ..target
                }
            } else {
                target
            }
        }
        (None, Some(s)) => s.target.clone(),
        (None, None) => {
            return Err(super::UsageError(format!(
                "{}: not a spool (no sidecar beside it): name where it goes, `mcptape push {tape} s3://BUCKET/KEY`",
                path.display()
            ))
            .into())
        }
    };
    if let Some(s) = &spool {
        if s.writer_alive() || place::held_by_a_writer(&s.path) {
            return Err(super::UsageError(format!(
                "{}: still being written by process {}: it is uploaded when that command ends",
                path.display(),
                s.pid
            ))
            .into());
        }
    }
    if !path.is_file() {
        return Err(store::ResolveError::NotFound {
            name: tape.clone(),
            store: path.clone(),
            local: path,
        }
        .into());
    }
    match spool {
        Some(s) => {
            warn_if_open(&path);
            upload_spool(&s, &url)?
        }
        None => push_local(&path, &url)?,
    }
    Ok(mcptape::exit::OK)
}

/// `push` without arguments: every spool whose command has ended.
fn push_pending() -> Result<i32> {
    let spools = remote::spool::pending().with_context(|| {
        format!(
            "reading the spool folder {}",
            remote::spool::dir().display()
        )
    })?;
    if spools.is_empty() {
        crate::diag!(
            "mcptape push: no tape is waiting to be uploaded (spool folder {})",
            remote::spool::dir().display()
        );
        return Ok(mcptape::exit::OK);
    }
    let (mut uploaded, mut failed, mut waiting) = (0, 0, 0);
    for s in &spools {
        // A writer this machine cannot see (another PID namespace, a host name that differs)
        // still holds the tape's lock: uploading and removing the spool under it would lose
        // the rest of its recording.
        let locked = !s.writer_alive() && place::held_by_a_writer(&s.path);
        if s.writer_alive() || locked {
            let seen = if locked {
                " (process gone from here, but a writer holds the tape's lock)"
            } else {
                ""
            };
            crate::diag!(
                "mcptape push: {} → {}: still being written by process {}{seen}; left alone",
                s.path.display(),
                s.target,
                s.pid
            );
            waiting += 1;
            continue;
        }
        let partial = with_suffix(&s.path, ".new");
        if partial.is_file() {
            crate::diag!(
                "mcptape push: {} is a re-recording that did not finish; `mcptape push {} {}` uploads it in place of the tape",
                partial.display(),
                partial.display(),
                s.target
            );
        }
        if !s.changed() {
            crate::diag!(
                "mcptape push: {}: the spool is the tape as it was fetched; nothing to upload",
                s.target
            );
            s.remove();
            continue;
        }
        warn_if_open(&s.path);
        match upload_spool(s, &s.target) {
            Ok(()) => uploaded += 1,
            Err(e) => {
                crate::diag!("mcptape push: error: {e:#}; {} is kept", s.path.display());
                failed += 1;
            }
        }
    }
    let mut summary = format!("mcptape push: uploaded {uploaded}");
    if failed > 0 {
        summary.push_str(&format!(", failed {failed}"));
    }
    if waiting > 0 {
        summary.push_str(&format!(", still being written {waiting}"));
    }
    crate::diag!("{summary}");
    Ok(if failed > 0 {
        mcptape::exit::IO_ERR
    } else {
        mcptape::exit::OK
    })
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

/// Says so when a tape about to be uploaded has no closing line (its recording was killed): it
/// is uploaded as it is but for its writer's padding, and reads with a warning.
fn warn_if_open(path: &Path) {
    let Some(last) = mcptape::tape::place::last_line(path) else {
        return;
    };
    if !last.starts_with(b"{\"type\":\"end\"") {
        crate::diag!(
            "mcptape push: warning: {} has no closing line (its recording was cut off): uploaded without its writer's padding, otherwise as it is; it plays with a warning",
            path.display()
        );
    }
}

/// `mcptape ls s3://BUCKET/PREFIX`: the tapes (`.jsonl` objects) under the prefix.
pub fn ls(arg: &str, json: bool) -> Result<i32> {
    let url = match remote::parse(arg, true)? {
        Target::S3(u) => u,
        Target::File(_) => unreachable!("file URLs are listed as folders"),
    };
    let bucket = Bucket::connect(&url)?;
    let objects = super::runtime::single()?.block_on(bucket.list(&url.key))?;
    let (tapes, others): (Vec<_>, Vec<_>) =
        objects.into_iter().partition(|o| o.key.ends_with(".jsonl"));
    let when = |secs: i64| {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
        humantime::format_rfc3339_seconds(t)
            .to_string()
            .replace('T', " ")
            .trim_end_matches('Z')
            .to_string()
    };
    if json {
        let rows: Vec<serde_json::Value> = tapes
            .iter()
            .map(|o| {
                serde_json::json!({
                    "url": format!("s3://{}/{}", url.bucket, o.key),
                    "key": o.key,
                    "size": o.size,
                    "modified": humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(o.modified.max(0) as u64)).to_string(),
                })
            })
            .collect();
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?))?;
        return Ok(mcptape::exit::OK);
    }
    if tapes.is_empty() {
        crate::diag!("no tapes under {url}");
    } else {
        let w = tapes.iter().map(|o| o.key.len()).max().unwrap_or(3).max(3);
        let mut out = format!("{:w$}  {:>9}  MODIFIED (UTC)\n", "KEY", "SIZE");
        for o in &tapes {
            out.push_str(&format!(
                "{:w$}  {:>9}  {}\n",
                o.key,
                human_bytes(o.size),
                when(o.modified)
            ));
        }
        super::stdout(&out)?;
    }
    if !others.is_empty() {
        let s = if others.len() == 1 { "" } else { "s" };
        crate::diag!(
            "mcptape ls: {} other object{s} under {url} (not .jsonl) not listed",
            others.len()
        );
    }
    Ok(mcptape::exit::OK)
}
