//! Adding to a tape that is there (`play --on-miss live`): the tape is read once to find where
//! its chain stands, its closing line is cut off, and the writer goes on from its last line,
//! marking every line it adds `appended` and closing the tape again after every write (see
//! `TapeWriter::resume`). The tape stays at its path throughout: no copy, no rename.

use super::format::End;
use super::writer::Resume;
use super::{Chain, Entry, TapeError, TapeReader, TapeWriter, Warning, WriteOptions};
use std::io::{self, Seek};
use std::path::{Path, PathBuf};

/// Why a tape cannot be added to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// It could not be read (missing, not a tape, malformed).
    #[error(transparent)]
    Read(#[from] TapeError),
    /// It has no hash chain (format 1.0): appended lines could not be chained to it.
    #[error("{}: cannot append to a tape without a hash chain (format 1.0)", path.display())]
    Unchained {
        /// The tape.
        path: PathBuf,
    },
    /// Its chain breaks: appending would chain new lines to a tape that is no longer what was
    /// written.
    #[error("{}: cannot append: the hash chain breaks at line {line} (`mcptape verify` tells more)", path.display())]
    Broken {
        /// The tape.
        path: PathBuf,
        /// The first line that does not hold.
        line: u64,
    },
    /// Bytes follow its closing line (`verify`: tampered): appending would cut them off with the
    /// closing line, and the evidence with them.
    #[error("{}: cannot append: line {line} holds {bytes} bytes after the closing line (`mcptape verify` tells more); look at them, remove them if they are not wanted (the tape then verifies again)", path.display())]
    AfterEnd {
        /// The tape.
        path: PathBuf,
        /// The line after the closing line.
        line: u64,
        /// How many bytes are there.
        bytes: usize,
    },
    /// It is signed and no key was given to sign it again.
    #[error("{}: the tape is signed: set MCPTAPE_SIGNING_KEY to sign it again after appending", path.display())]
    Signed {
        /// The tape.
        path: PathBuf,
    },
    /// Another process is writing it (a recording still going on, another append), or reading
    /// it whole (`mcptape push` uploading it): cutting its closing line off under either would
    /// break it.
    #[error("{}: the tape is being {} by another process ({}); append when it is done", path.display(), if *read { "read" } else { "written" }, if *read { "`mcptape push` uploading it?" } else { "a recording still going on?" })]
    Busy {
        /// The tape.
        path: PathBuf,
        /// Only readers hold its lock (a reader's share of it can be taken).
        read: bool,
    },
    /// It could not be opened for writing.
    #[error("could not open tape {} for appending", path.display())]
    Io {
        /// The tape.
        path: PathBuf,
        /// Why.
        #[source]
        cause: io::Error,
    },
}

impl AppendError {
    /// When the tape refused to be appended to as it is (no chain, a broken one, bytes after
    /// the closing line, a signature and no key, another process at it), what joins this error
    /// to the caller's words on what else can be done — which depend on the command (`play
    /// --append-to OTHER`, `vcr --mode once`), so the error itself does not say it: `"; "`
    /// after a fact, `", or "` after the error's own advice. `None`: the tape could not be
    /// read or opened.
    pub fn or_else(&self) -> Option<&'static str> {
        match self {
            AppendError::Read(_) | AppendError::Io { .. } => None,
            AppendError::Unchained { .. } | AppendError::Broken { .. } => Some("; "),
            AppendError::AfterEnd { .. }
            | AppendError::Signed { .. }
            | AppendError::Busy { .. } => Some(", or "),
        }
    }
}

impl crate::exit::Coded for AppendError {
    fn exit_code(&self) -> i32 {
        match self {
            AppendError::Read(e) => e.exit_code(),
            AppendError::Io { .. } => crate::exit::IO_ERR,
            AppendError::Busy { .. } => crate::exit::IO_ERR,
            _ => crate::exit::DATA_ERR,
        }
    }
}

/// Opens the tape at `path` for adding to it: checks its chain, cuts its closing line (and a
/// torn last line) off, and returns a writer that goes on from its last whole line.
pub fn append(path: &Path, opts: WriteOptions) -> Result<TapeWriter, AppendError> {
    let io_err = |cause| AppendError::Io {
        path: path.to_path_buf(),
        cause,
    };
    // Locked before it is read: a recording that ends meanwhile must not lose the lines it
    // wrote after the read. Held by the writer from here on (`sink::TapeFile::new` takes it
    // again on the same open).
    let mut file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(TapeError::NotFound {
                path: path.to_path_buf(),
            }
            .into())
        }
        Err(e) => return Err(io_err(e)),
    };
    super::sink::lock(&file).map_err(|e| match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => AppendError::Busy {
            path: path.to_path_buf(),
            read: !super::place::being_written(path),
        },
        _ => io_err(e),
    })?;
    let mut r = TapeReader::open(path)?;
    if !r.header().chained() {
        return Err(AppendError::Unchained {
            path: path.to_path_buf(),
        });
    }
    let created = r.header().created.clone();
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default)]
        seq: Option<u64>,
        #[serde(default)]
        dir: Option<crate::wire::Dir>,
    }
    let mut counts = End::default();
    // Without a closing line the counts are made from the lines, as the writer made them.
    let mut pairing = super::open_ids::Exchanges::default();
    let mut last_line = 1u64;
    let mut old: Option<End> = None;
    let mut seq = 0;
    let mut head = String::new();
    // Where the kept lines end: after the last line that is not the closing one.
    let mut keep = 0u64;
    loop {
        let before = match r.chain() {
            Chain::Linked(h) => h.clone(),
            _ => String::new(),
        };
        let Some(item) = r.next_item()? else { break };
        match &item.entry {
            Entry::End(e) => {
                old = Some(e.clone());
                head = before;
                continue;
            }
            Entry::Msg(_) | Entry::Unknown => {
                if let (Entry::Msg(m), None) = (&item.entry, &old) {
                    use crate::wire::Kind;
                    counts.exchanges += u64::from(pairing.line(m));
                    if matches!(m.kind, Kind::Invalid | Kind::NotJson | Kind::Oversize) {
                        counts.raw += 1;
                    }
                }
                if let Ok(p) = serde_json::from_slice::<Probe>(item.raw) {
                    seq = seq.max(p.seq.unwrap_or(0));
                    if old.is_none() {
                        match p.dir {
                            Some(crate::wire::Dir::C2S) => counts.c2s += 1,
                            Some(crate::wire::Dir::S2C) => counts.s2c += 1,
                            None => {}
                        }
                        counts.messages += p.dir.is_some() as u64;
                    }
                }
            }
            Entry::Server(_) => {}
        }
        keep = item.offset + item.raw.len() as u64;
        last_line = item.line;
        head.clear();
    }
    let torn = r.warnings().iter().find_map(|w| match w {
        Warning::TornLastLine { line, bytes } => Some((*line, *bytes)),
        _ => None,
    });
    let torn_at = r.line_offset();
    let cut_before = r
        .warnings()
        .iter()
        .any(|w| matches!(w, Warning::CutBeforeAppend { .. }));
    match r.chain() {
        Chain::Broken(line) => {
            return Err(AppendError::Broken {
                path: path.to_path_buf(),
                line: *line,
            })
        }
        Chain::Linked(h) if head.is_empty() => head = h.clone(),
        _ => {}
    }
    if keep == 0 {
        keep = header_len(path)?;
    }
    if old.as_ref().is_some_and(|e| e.sig.is_some()) && opts.signing_key.is_none() {
        return Err(AppendError::Signed {
            path: path.to_path_buf(),
        });
    }
    if let (Some(_), Some((line, bytes))) = (&old, torn) {
        return Err(AppendError::AfterEnd {
            path: path.to_path_buf(),
            line,
            bytes,
        });
    }
    // A recording that stopped short stays on record as such: the `append` event says where
    // and how (`cut`, with a torn last line's bytes), and the closing line stays incomplete.
    let cut = match &old {
        None => {
            let mut reason = format!(
                "the recording has no closing line after line {last_line}: its recorder was killed, or its disk filled"
            );
            let torn = match torn {
                Some((line, bytes)) => {
                    reason.push_str(&format!(
                        "; its torn line {line} ({bytes} bytes) is kept in this event's cut.torn"
                    ));
                    Some(torn_json(path, torn_at, line, bytes)?)
                }
                None => None,
            };
            let mut cut = serde_json::json!({ "after_line": last_line, "reason": reason });
            if let Some(t) = torn {
                cut["torn"] = t;
            }
            Some(cut)
        }
        Some(e) if e.incomplete && !cut_before => Some(serde_json::json!({
            "after_line": last_line,
            "reason": "the recorder could not write everything: its closing line said so (`incomplete`)",
        })),
        Some(_) => None,
    };
    let old = old.unwrap_or_else(|| End {
        reason: Some(format!(
            "the recording was cut off after line {last_line} (no closing line)"
        )),
        incomplete: true,
        ..End::default()
    });
    // The counts so far: the closing line's (it counted everything), else the lines read.
    if old.messages > 0 || old.head.is_some() {
        counts = End {
            messages: old.messages,
            exchanges: old.exchanges,
            c2s: old.c2s,
            s2c: old.s2c,
            raw: old.raw,
            ..End::default()
        };
    }
    file.set_len(keep).map_err(io_err)?;
    file.seek(io::SeekFrom::Start(keep)).map_err(io_err)?;
    let t_base_us = humantime::parse_rfc3339(&created)
        .ok()
        .and_then(|t| std::time::SystemTime::now().duration_since(t).ok())
        .map_or(old.t_us, |d| (d.as_micros() as u64).max(old.t_us));
    let resume = Resume {
        file,
        seq,
        head,
        counts,
        len: keep,
        t_base_us,
    };
    TapeWriter::resume(path, resume, old, cut, opts).map_err(io_err)
}

/// A torn last line's bytes, to keep in the `append` event: `line`, `bytes`, and `text` (or
/// `b64` when they are not UTF-8).
fn torn_json(
    path: &Path,
    at: u64,
    line: u64,
    bytes: usize,
) -> Result<serde_json::Value, AppendError> {
    use base64::Engine as _;
    use std::io::Read;
    let io_err = |cause| AppendError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let mut f = std::fs::File::open(path).map_err(io_err)?;
    f.seek(io::SeekFrom::Start(at)).map_err(io_err)?;
    let mut buf = Vec::with_capacity(bytes);
    f.take(bytes as u64).read_to_end(&mut buf).map_err(io_err)?;
    let mut t = serde_json::json!({ "line": line, "bytes": bytes });
    match String::from_utf8(buf) {
        Ok(text) => t["text"] = text.into(),
        Err(e) => {
            t["b64"] = base64::engine::general_purpose::STANDARD
                .encode(e.as_bytes())
                .into()
        }
    }
    Ok(t)
}

/// The header line's length, newline included: where a tape with nothing after its header
/// is kept to.
fn header_len(path: &Path) -> Result<u64, AppendError> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|cause| AppendError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    let mut line = Vec::new();
    io::BufReader::new(file)
        .read_until(b'\n', &mut line)
        .map_err(|cause| AppendError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
    Ok(line.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{ServerDecl, DEFAULT_SERVER};
    use crate::wire::{Dir, Frame};
    use std::time::Instant;

    fn msg(w: &mut TapeWriter, dir: Dir, text: &str) {
        w.message(
            DEFAULT_SERVER,
            dir,
            &Frame::whole(text.as_bytes()),
            Instant::now(),
        );
        w.commit().unwrap();
    }

    /// Whether the tape's chain holds and it has its closing line (`verify`'s "intact").
    fn closed_and_chained(path: &Path) -> bool {
        let chain = TapeReader::open(path).unwrap().check_chain().unwrap();
        let index = crate::tape::TapeIndex::load(path, None).unwrap();
        chain.is_none() && index.end.is_some() && index.warnings.is_empty()
    }

    /// A new tape at `path` holding one `ping` request, still open.
    fn pinged(path: &Path) -> TapeWriter {
        let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
        w.declare_server(ServerDecl::stdio(DEFAULT_SERVER, vec!["srv".into()]))
            .unwrap();
        msg(
            &mut w,
            Dir::C2S,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        );
        w
    }

    #[test]
    fn an_appended_tape_verifies_after_every_write_and_marks_what_was_added() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = pinged(&path);
        msg(&mut w, Dir::S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        w.finish(None, Some("the client closed stdin".into()))
            .unwrap();
        let intact = |p: &Path| closed_and_chained(p);

        let mut w = append(&path, WriteOptions::default()).unwrap();
        assert!(intact(&path));
        msg(
            &mut w,
            Dir::C2S,
            r#"{"jsonrpc":"2.0","id":"live-1","method":"tools/call","params":{"name":"add","arguments":{"b":2.50,"a":1}}}"#,
        );
        assert!(intact(&path));
        msg(
            &mut w,
            Dir::S2C,
            r#"{"jsonrpc":"2.0","id":"live-1","result":{"content":[]}}"#,
        );
        let end = w.finish(None, Some("play ended".into())).unwrap().end;
        assert!(intact(&path));
        assert_eq!((end.messages, end.exchanges, end.c2s), (4, 2, 2));
        assert_eq!(
            end.reason.as_deref(),
            Some("the client closed stdin; then play ended")
        );
        let index = crate::tape::TapeIndex::load(&path, None).unwrap();
        let marks: Vec<(u64, bool)> = index.msgs.iter().map(|m| (m.seq, m.appended)).collect();
        assert_eq!(marks, [(1, false), (2, false), (3, true), (4, true)]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(r#""arguments":{"b":2.50,"a":1}}},"appended":true,"h":""#),
            "{text}"
        );
        assert_eq!(text.matches(r#""type":"end""#).count(), 1);
    }

    #[test]
    fn a_tape_cut_mid_line_is_appended_after_its_last_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let w = pinged(&path);
        drop(w); // killed: no closing line
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(br#"{"type":"msg","seq":2,"t_us":5,"ser"#)
                .unwrap();
        }
        let mut w = append(&path, WriteOptions::default()).unwrap();
        // The cut is kept for the `append` event: where, and the torn bytes.
        let cut = w.append_cut().expect("the cut is on record").clone();
        assert_eq!(cut["after_line"], 3, "{cut}");
        assert_eq!(cut["torn"]["line"], 4, "{cut}");
        assert_eq!(
            cut["torn"]["text"], r#"{"type":"msg","seq":2,"t_us":5,"ser"#,
            "{cut}"
        );
        msg(&mut w, Dir::S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        drop(w);
        let chain = TapeReader::open(&path).unwrap().check_chain().unwrap();
        assert!(chain.is_none(), "the chain holds: {chain:?}");
        let index = crate::tape::TapeIndex::load(&path, None).unwrap();
        let end = index.end.as_ref().expect("closed again");
        // Still incomplete: what the recording lost after its cut is not on the tape.
        assert!(end.incomplete, "{end:?}");
        assert_eq!((end.messages, end.c2s, end.s2c), (2, 1, 1), "{end:?}");
        assert_eq!(index.exchanges.len(), 1);
        assert_eq!(index.msgs[1].seq, 2);
    }

    /// Appended to without its closing line, a tape's exchanges are counted from its lines as
    /// the writer counts them: an answer too large to keep (`oversize`) closes its request when
    /// its head gives the id.
    #[test]
    fn a_cut_tapes_oversize_answer_is_counted_as_the_writer_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = pinged(&path);
        let head = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"AAAA"#;
        let over = Frame::Oversize {
            len: 1 << 20,
            head: head.to_vec(),
        };
        w.message(DEFAULT_SERVER, Dir::S2C, &over, Instant::now());
        w.commit().unwrap();
        drop(w); // killed: no closing line
        let w = append(&path, WriteOptions::default()).unwrap();
        let end = w.finish(None, None).unwrap().end;
        assert!(end.incomplete, "{end:?}");
        assert_eq!((end.messages, end.exchanges, end.raw), (2, 1, 1), "{end:?}");
        let index = crate::tape::TapeIndex::load(&path, None).unwrap();
        assert_eq!(index.exchanges[0].response, Some(1));
    }

    #[test]
    fn a_tape_without_a_chain_or_with_a_broken_one_is_not_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.jsonl");
        std::fs::write(
            &path,
            "{\"type\":\"header\",\"format\":\"mcptape\",\"version\":1,\"minor\":0,\"created\":\"2026-01-01T00:00:00Z\",\"tool\":\"t\"}\n",
        )
        .unwrap();
        let Err(e) = append(&path, WriteOptions::default()) else {
            panic!("appended")
        };
        assert!(e.to_string().contains("without a hash chain"), "{e}");

        let path = dir.path().join("edited.jsonl");
        let mut w = TapeWriter::create(&path, WriteOptions::default()).unwrap();
        msg(
            &mut w,
            Dir::C2S,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        );
        msg(&mut w, Dir::S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        w.finish(None, None).unwrap();
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(r#""result":{}"#, r#""result":{"x":1}"#);
        std::fs::write(&path, text).unwrap();
        let Err(e) = append(&path, WriteOptions::default()) else {
            panic!("appended")
        };
        assert!(e.to_string().contains("hash chain breaks at line 3"), "{e}");
    }
}
