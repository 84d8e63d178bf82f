//! `play --unused-report FILE`: which recorded exchanges a play run used and which it never
//! did, as JSON — what `mcptape prune` reads to drop the unused ones. Its schema is in the
//! README ("Unused recordings"); a report is tied to the tape it was written for by each
//! request line's hash-chain link (`h`), which an edit or a re-recording of the lines before
//! changes and an append does not.

use crate::tape::reader::{Entry, TapeReader};
use crate::tape::TapeIndex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// What a report file says it is.
pub const FORMAT: &str = "mcptape-unused-report";
/// The report schema's version.
pub const VERSION: u32 = 1;

/// A play run's use of a tape's exchanges.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    /// Always [`FORMAT`].
    pub format: String,
    /// Schema version ([`VERSION`]).
    pub version: u32,
    /// The tape, as played.
    pub tape: String,
    /// The server label played (one server of the tape).
    pub server: String,
    /// Exchanges of that server on the tape when play loaded it.
    pub exchanges: usize,
    /// The exchanges never served, in recorded order.
    pub unused: Vec<ExchangeUse>,
    /// The exchanges served at least once, in recorded order.
    pub used: Vec<ExchangeUse>,
}

/// One recorded exchange, as a report lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeUse {
    /// Tape line of the request.
    pub line: u64,
    /// Its `seq`.
    pub seq: u64,
    /// The request's method.
    pub method: String,
    /// The tool, prompt or resource (`params.name` or `params.uri`), when the method has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The request's JSON-RPC id, as recorded.
    pub id: Value,
    /// Every tape line of the exchange (request, answer, what came while it was open): the
    /// lines `prune` drops with it.
    pub lines: Vec<u64>,
    /// The request line's hash-chain link (absent on a tape without a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h: Option<String>,
    /// How many times it was served (repeats included).
    pub served: u32,
}

/// Why a report could not be written, read, or applied to a tape.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] crate::tape::TapeError),
    /// The report file is missing (exit 66).
    #[error("{}: no such unused report", path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The report could not be read or written (exit 74).
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// Not a report, or not one this mcptape reads (exit 65).
    #[error("{}: not an mcptape unused report: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, with where.
        message: String,
    },
    /// The report was written for another tape, or the tape changed since (exit 65).
    #[error("{}: written for another tape than {} (or the tape changed since): {message}", report.display(), tape.display())]
    Mismatch {
        /// The report.
        report: PathBuf,
        /// The tape.
        tape: PathBuf,
        /// The first disagreement.
        message: String,
    },
}

impl crate::exit::Coded for UsageError {
    fn exit_code(&self) -> i32 {
        match self {
            UsageError::Tape(t) => crate::exit::Coded::exit_code(t),
            UsageError::NotFound { .. } => crate::exit::NO_INPUT,
            UsageError::Io { .. } => crate::exit::IO_ERR,
            UsageError::Malformed { .. } | UsageError::Mismatch { .. } => crate::exit::DATA_ERR,
        }
    }
}

/// Adds one session's use counts to a running total (a total shorter than them grows).
pub(crate) fn add_uses(total: &mut Vec<u32>, uses: &[u32]) {
    if total.len() < uses.len() {
        total.resize(uses.len(), 0);
    }
    for (t, u) in total.iter_mut().zip(uses) {
        *t += u;
    }
}

/// The request lines' hash-chain links, by line number, for the lines asked.
fn links(
    path: &Path,
    wanted: &BTreeSet<u64>,
) -> Result<HashMap<u64, String>, crate::tape::TapeError> {
    let mut r = TapeReader::open(path)?;
    r.skip_chain();
    let mut out = HashMap::new();
    while let Some(item) = r.next_item()? {
        if !wanted.contains(&item.line) || !matches!(item.entry, Entry::Msg(_)) {
            continue;
        }
        let stored = item.stored();
        if let Some((_, h)) = crate::tape::chain::locate_h(stored) {
            out.insert(item.line, h.to_string());
        }
    }
    Ok(out)
}

/// The report of a run that served each exchange of `index` `uses[i]` times. Exchanges past the
/// end of `uses` (appended to the tape while play ran) are in neither list.
pub fn build(index: &TapeIndex, uses: &[u32]) -> Result<UsageReport, crate::tape::TapeError> {
    let owned = crate::tape::prune::owned_msgs(index);
    let n = index.exchanges.len().min(uses.len());
    let wanted: BTreeSet<u64> = (0..n)
        .map(|i| index.msgs[index.exchanges[i].request].line)
        .collect();
    let links = links(&index.path, &wanted)?;
    let (mut unused, mut used) = (Vec::new(), Vec::new());
    for i in 0..n {
        let req = &index.msgs[index.exchanges[i].request];
        let mut lines: Vec<u64> = owned[i].iter().map(|&m| index.msgs[m].line).collect();
        lines.sort_unstable();
        let entry = ExchangeUse {
            line: req.line,
            seq: req.seq,
            method: req.method.clone().unwrap_or_default(),
            target: index.call_target(req),
            id: req
                .id
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(Value::Null),
            lines,
            h: links.get(&req.line).cloned(),
            served: uses[i],
        };
        if uses[i] == 0 {
            unused.push(entry);
        } else {
            used.push(entry);
        }
    }
    Ok(UsageReport {
        format: FORMAT.into(),
        version: VERSION,
        tape: index.path.display().to_string(),
        server: index.server.clone(),
        exchanges: index.exchanges.len(),
        unused,
        used,
    })
}

/// Whether a report can be written to `path`, asked before play serves anything (the report
/// is written when the session ends, too late to say it cannot be): its folder is there and
/// writable, and the file, if there, is writable. Nothing is created.
pub fn check_writable(path: &Path) -> Result<(), UsageError> {
    let io = |cause: std::io::Error| UsageError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let writable = |p: &Path, mode: libc::c_int| -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        if unsafe { libc::access(c.as_ptr(), mode) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match std::fs::metadata(path) {
        Ok(_) => writable(path, libc::W_OK).map_err(io),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match std::fs::metadata(folder) {
                Ok(m) if m.is_dir() => writable(folder, libc::W_OK | libc::X_OK).map_err(|e| {
                    io(std::io::Error::new(
                        e.kind(),
                        format!("cannot create a file in {}: {e}", folder.display()),
                    ))
                }),
                Ok(_) => Err(io(std::io::Error::other(format!(
                    "{} is not a folder",
                    folder.display()
                )))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(io(std::io::Error::new(
                    e.kind(),
                    format!("the folder {} does not exist", folder.display()),
                ))),
                Err(e) => Err(io(e)),
            }
        }
        Err(e) => Err(io(e)),
    }
}

/// Writes `report` to `path`, pretty-printed.
pub fn write(report: &UsageReport, path: &Path) -> Result<(), UsageError> {
    let mut text = serde_json::to_string_pretty(report).expect("a report serializes");
    text.push('\n');
    std::fs::write(path, text).map_err(|cause| UsageError::Io {
        path: path.to_path_buf(),
        cause,
    })
}

/// Reads a report written by `play --unused-report`.
pub fn read(path: &Path) -> Result<UsageReport, UsageError> {
    let text = std::fs::read(path).map_err(|cause| match cause.kind() {
        std::io::ErrorKind::NotFound => UsageError::NotFound {
            path: path.to_path_buf(),
        },
        _ => UsageError::Io {
            path: path.to_path_buf(),
            cause,
        },
    })?;
    let malformed = |message: String| UsageError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let v: Value = serde_json::from_slice(&text)
        .map_err(|e| malformed(format!("line {} column {}: {e}", e.line(), e.column())))?;
    if v.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(malformed(format!("no \"format\": \"{FORMAT}\" field")));
    }
    let version = v.get("version").and_then(Value::as_u64).unwrap_or(0);
    if version != u64::from(VERSION) {
        return Err(malformed(format!(
            "schema version {version}; this mcptape reads version {VERSION}"
        )));
    }
    serde_json::from_value(v).map_err(|e| malformed(e.to_string()))
}

/// The exchange numbers of `index` that `list` (from the report at `report`) names, each
/// checked to be the same request on this tape: line, seq, method, id, and where both have one,
/// the hash-chain link.
pub fn resolve(
    index: &TapeIndex,
    report: &Path,
    list: &[ExchangeUse],
) -> Result<BTreeSet<usize>, UsageError> {
    let by_line: HashMap<u64, usize> = index
        .exchanges
        .iter()
        .enumerate()
        .map(|(i, ex)| (index.msgs[ex.request].line, i))
        .collect();
    let wanted: BTreeSet<u64> = list
        .iter()
        .filter(|e| e.h.is_some())
        .map(|e| e.line)
        .collect();
    let links = links(&index.path, &wanted)?;
    let mismatch = |message: String| UsageError::Mismatch {
        report: report.to_path_buf(),
        tape: index.path.clone(),
        message,
    };
    let mut out = BTreeSet::new();
    for e in list {
        let Some(&i) = by_line.get(&e.line) else {
            return Err(mismatch(format!(
                "it lists {} id {} at tape line {}, where the tape has no request of server {:?}",
                e.method, e.id, e.line, index.server
            )));
        };
        let req = &index.msgs[index.exchanges[i].request];
        let id: Value = req
            .id
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        let same = req.seq == e.seq
            && req.method.as_deref() == Some(e.method.as_str())
            && id == e.id
            && match (&e.h, links.get(&e.line)) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
        if !same {
            return Err(mismatch(format!(
                "it lists {} id {} (seq {}) at tape line {}; the tape has {} id {} (seq {}) there{}",
                e.method,
                e.id,
                e.seq,
                e.line,
                req.method.as_deref().unwrap_or("?"),
                id,
                req.seq,
                if req.seq == e.seq && id == e.id {
                    ", recorded anew (its hash-chain link differs)"
                } else {
                    ""
                }
            )));
        }
        out.insert(i);
    }
    Ok(out)
}
