//! Other recorders' files to mcptape tapes (`mcptape import`). One file per format reads the
//! format into [`Imported`] — messages in wire order, with the times and server facts the format
//! kept, and the list of what it did not keep — and [`write_tape`] writes that with the ordinary
//! [`TapeWriter`], so an imported tape is hash-chained and redacted exactly like a recorded one.
//!
//! Nothing a format lacks is invented: a lost handshake stays lost, a lost id is said to be
//! renumbered, and every such gap is in [`Imported::lacks`], which the command prints.

mod agent_vcr;
mod json;
mod localab_vcr;
mod mcp_cassette;
mod mcp_rec;
mod mcp_recorder;
mod mcp_replay;
mod mcp_vcr;
mod yaml;

use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
use crate::wire::{Dir, Frame, Line};
use std::path::{Path, PathBuf};

/// The formats `mcptape import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// agent-vcr's `.vcr` (one JSON document: metadata, the handshake, interactions).
    AgentVcr,
    /// localab-vcr's JSONL tape (`tool_call` / `tool_result` events of an agent run).
    LocalabVcr,
    /// mcp-rec's JSONL (`ts`, `dir`, `msg` per wire line).
    McpRec,
    /// mcp-recorder's cassette (one JSON document of interactions).
    McpRecorder,
    /// mcp-cassette's cassette (one JSON document of wire messages).
    McpCassette,
    /// mcp-vcr's transcript, YAML or NDJSON.
    McpVcr,
    /// mcp-replay's fixture directory (or one fixture file).
    McpReplay,
}

impl Format {
    /// Every format, in the order auto-detection names candidates.
    pub const ALL: [Format; 7] = [
        Format::AgentVcr,
        Format::LocalabVcr,
        Format::McpRec,
        Format::McpRecorder,
        Format::McpCassette,
        Format::McpVcr,
        Format::McpReplay,
    ];

    /// The name on the command line (the recorder's package name).
    pub fn name(self) -> &'static str {
        match self {
            Format::AgentVcr => "agent-vcr",
            Format::LocalabVcr => "localab-vcr",
            Format::McpRec => "mcp-rec",
            Format::McpRecorder => "mcp-recorder",
            Format::McpCassette => "mcp-cassette",
            Format::McpVcr => "mcp-vcr",
            Format::McpReplay => "mcp-replay",
        }
    }

    /// The format named `name`, if any.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether `probe` looks like this format (a cheap look at its shape, not a full read).
    fn sniff(self, probe: &Probe<'_>) -> bool {
        match self {
            Format::AgentVcr => agent_vcr::sniff(probe),
            Format::LocalabVcr => localab_vcr::sniff(probe),
            Format::McpRec => mcp_rec::sniff(probe),
            Format::McpRecorder => mcp_recorder::sniff(probe),
            Format::McpCassette => mcp_cassette::sniff(probe),
            Format::McpVcr => mcp_vcr::sniff(probe),
            Format::McpReplay => mcp_replay::sniff(probe),
        }
    }

    fn read(self, path: &Path, text: &str) -> Result<Imported, ImportError> {
        match self {
            Format::AgentVcr => agent_vcr::read(path, text),
            Format::LocalabVcr => localab_vcr::read(path, text),
            Format::McpRec => mcp_rec::read(path, text),
            Format::McpRecorder => mcp_recorder::read(path, text),
            Format::McpCassette => mcp_cassette::read(path, text),
            Format::McpVcr => mcp_vcr::read(path, text),
            Format::McpReplay => mcp_replay::read(path, text),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file to import is not there.
    #[error("{}: no such file", path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The file is not what its format writes.
    #[error("{}: {at}: {problem}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Where: `line 3`, `line 40 column 5`, `messages[2]`.
        at: String,
        /// What was found, and what the format has there.
        problem: String,
    },
    /// The file is UTF-16 (it starts with a UTF-16 byte-order mark); every format is UTF-8.
    #[error("{}: the file is UTF-16 (it starts with a UTF-16 byte-order mark); mcptape imports UTF-8 files: save it as UTF-8", path.display())]
    Utf16 {
        /// The file.
        path: PathBuf,
    },
    /// Auto-detection recognised no format.
    #[error("{}: not a file of any format mcptape imports ({}); name the format: mcptape import FORMAT {}", path.display(), names(&Format::ALL), path.display())]
    Unknown {
        /// The file.
        path: PathBuf,
    },
    /// Auto-detection found several formats the file could be.
    #[error("{}: could be {}; name the format: mcptape import FORMAT {}", path.display(), names(candidates).replace(", ", " or "), path.display())]
    Ambiguous {
        /// The file.
        path: PathBuf,
        /// The formats it looks like.
        candidates: Vec<Format>,
    },
    /// The tape could not be written.
    #[error("writing tape {}: {source}", path.display())]
    Write {
        /// The tape.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

fn names(formats: &[Format]) -> String {
    formats
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl crate::exit::Coded for ImportError {
    fn exit_code(&self) -> i32 {
        match self {
            ImportError::NotFound { .. } => crate::exit::NO_INPUT,
            ImportError::Read { .. } | ImportError::Write { .. } => crate::exit::IO_ERR,
            ImportError::Malformed { .. }
            | ImportError::Utf16 { .. }
            | ImportError::Unknown { .. } => crate::exit::DATA_ERR,
            // The user has to say which format: a usage question, not bad data.
            ImportError::Ambiguous { .. } => crate::exit::USAGE,
        }
    }
}

/// One message as the other recorder kept it.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The server's label (a multi-server format), else the single server's.
    pub server: String,
    /// Which way it went.
    pub dir: Dir,
    /// Microseconds since the recording started, when the format says.
    pub t_us: Option<u64>,
    /// The message: compact JSON (the format's own key order and number spelling), or the text
    /// of a line that was not JSON.
    pub line: String,
}

/// A file read into messages, with what its format lacks.
#[derive(Debug, Default)]
pub struct Imported {
    /// The servers, as the format describes them.
    pub servers: Vec<ServerDecl>,
    /// The messages, in the order they crossed the wire (as far as the format says).
    pub msgs: Vec<Msg>,
    /// What the format (or this file) does not hold, one sentence each: printed as warnings.
    pub lacks: Vec<String>,
}

/// What [`write_tape`] wrote.
#[derive(Debug)]
pub struct Written {
    /// Messages on the tape.
    pub messages: u64,
    /// Requests with their answer.
    pub exchanges: u64,
    /// Where the tape is (over a tape that was there: replaced, or beside it).
    pub placed: crate::tape::Placed,
}

/// The file's text, read once, with the cheap parses detection needs.
pub(crate) struct Probe<'a> {
    /// The whole file.
    pub text: &'a str,
    /// The whole file as one JSON document, if it is one.
    pub doc: Option<serde_json::Value>,
    /// The first non-blank line as JSON, if it is JSON.
    pub first: Option<serde_json::Value>,
}

impl<'a> Probe<'a> {
    fn new(text: &'a str) -> Probe<'a> {
        let doc = serde_json::from_str(text).ok();
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| serde_json::from_str(l).ok());
        Probe { text, doc, first }
    }
}

/// The UTF-8 encoding of U+FEFF, which some editors (on Windows) put at the start of a file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads the file at `path` as UTF-8 text, past a UTF-8 byte-order mark: every format is read
/// through here, so none sees the mark (an encoding marker, not content). A UTF-16 file is
/// refused saying so.
fn read_text(path: &Path) -> Result<String, ImportError> {
    let mut bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ImportError::NotFound {
            path: path.to_path_buf(),
        },
        _ => ImportError::Read {
            path: path.to_path_buf(),
            source: e,
        },
    })?;
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err(ImportError::Utf16 {
            path: path.to_path_buf(),
        });
    }
    let bom = if bytes.starts_with(UTF8_BOM) {
        UTF8_BOM.len()
    } else {
        0
    };
    bytes.drain(..bom);
    String::from_utf8(bytes).map_err(|e| ImportError::Malformed {
        path: path.to_path_buf(),
        // Where in the file, the mark counted.
        at: format!("byte {}", e.utf8_error().valid_up_to() + bom),
        problem: "not UTF-8; every format mcptape imports is UTF-8 JSON or YAML".into(),
    })
}

/// The format of the file at `path`: the one format it looks like, else an error naming the
/// candidates (or none).
pub fn detect(path: &Path) -> Result<Format, ImportError> {
    if path.is_dir() {
        return detect_dir(path);
    }
    let text = read_text(path)?;
    detect_text(path, &text)
}

fn detect_text(path: &Path, text: &str) -> Result<Format, ImportError> {
    let probe = Probe::new(text);
    let found: Vec<Format> = Format::ALL
        .into_iter()
        .filter(|f| f.sniff(&probe))
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(ImportError::Unknown {
            path: path.to_path_buf(),
        }),
        _ => Err(ImportError::Ambiguous {
            path: path.to_path_buf(),
            candidates: found,
        }),
    }
}

/// A directory: only mcp-replay writes one (its fixture directory).
fn detect_dir(path: &Path) -> Result<Format, ImportError> {
    if mcp_replay::sniff_dir(path) {
        Ok(Format::McpReplay)
    } else {
        Err(ImportError::Unknown {
            path: path.to_path_buf(),
        })
    }
}

/// Reads the file (or, for mcp-replay, the directory) at `path` as `format` (`None`: detect
/// it). Returns the format read too.
pub fn read(path: &Path, format: Option<Format>) -> Result<(Format, Imported), ImportError> {
    if path.is_dir() {
        let format = match format {
            Some(f) => f,
            None => detect_dir(path)?,
        };
        if format != Format::McpReplay {
            return Err(malformed(
                path,
                "the path",
                format!("a directory; {format} writes a file (only mcp-replay writes a directory)"),
            ));
        }
        return Ok((format, mcp_replay::read_dir(path)?));
    }
    let text = read_text(path)?;
    let format = match format {
        Some(f) => f,
        None => detect_text(path, &text)?,
    };
    let imported = format.read(path, &text)?;
    Ok((format, imported))
}

/// Writes `imported` as a tape at `out`, through the tape writer (redaction and hash chain as
/// `opts` say). An `event` line names the source (`what: "import"`); the closing line's reason
/// says it was imported.
pub fn write_tape(
    imported: &Imported,
    format: Format,
    source: &Path,
    out: &Path,
    opts: WriteOptions,
) -> Result<Written, ImportError> {
    let io = |e| ImportError::Write {
        path: out.to_path_buf(),
        source: e,
    };
    let mut w = TapeWriter::create(out, opts).map_err(io)?;
    // Every line is at the recording's time, never the import's: the servers and the import
    // event at its start, the closing line at its last message (docs/import.md, Timing).
    for decl in &imported.servers {
        w.declare_server_at(decl.clone(), w.at_offset(0))
            .map_err(io)?;
    }
    let label = imported
        .servers
        .first()
        .map_or(crate::tape::DEFAULT_SERVER, |d| d.server.as_str());
    w.event(
        label,
        "import",
        serde_json::json!({"format": format.name(), "source": source.display().to_string()}),
        w.at_offset(0),
    );
    w.commit().map_err(io)?;
    // Times only go forward on a tape: a format that times each call by its answer can put a
    // request before the previous answer; it is written at that answer's time instead.
    let mut last = 0u64;
    for (i, m) in imported.msgs.iter().enumerate() {
        let t = m.t_us.unwrap_or(last).max(last);
        // Each format refuses such times where it reads them; this holds for any other.
        if t > MAX_T_US {
            return Err(out_of_range(
                source,
                format!("message {}", i + 1),
                format!("a time of {t} µs"),
            ));
        }
        last = t;
        let frame = Frame::Line(Line {
            bytes: m.line.as_bytes(),
            crlf: false,
            unterminated: false,
            bom: false,
        });
        let at = w.at_offset(t);
        w.message(&m.server, m.dir, &frame, at);
        w.commit().map_err(io)?;
    }
    let reason = format!("imported from {} {}", format.name(), source.display());
    let end = w.at_offset(last);
    let done = w.finish_at(None, Some(reason), end).map_err(io)?;
    Ok(Written {
        messages: done.end.messages,
        exchanges: done.end.exchanges,
        placed: done.placed,
    })
}

/// The whole file as one JSON document of type `T`; a parse error names where it is and
/// `expected`, the format's shape.
pub(crate) fn parse_doc<'a, T: serde::Deserialize<'a>>(
    path: &Path,
    text: &'a str,
    expected: &str,
) -> Result<T, ImportError> {
    serde_json::from_str(text).map_err(|e| {
        malformed(
            path,
            json::at(&e),
            format!("{}; expected {expected}", json::what(&e)),
        )
    })
}

/// A stdio server whose command the format may not have kept.
pub(crate) fn stdio_decl(label: &str, command: Option<Vec<String>>) -> ServerDecl {
    let mut d = ServerDecl::stdio(label, Vec::new());
    d.command = command;
    d
}

/// A [`ImportError::Malformed`] for `path`.
/// The furthest from the recording's start an imported message may be: a year (366 days).
/// Another recorder's time past that is no recording's (a damaged or hand-edited file): it is
/// refused, naming the entry, rather than written as a `t_us` nobody can use, or overflowing.
pub(crate) const MAX_T_US: u64 = 366 * 24 * 3600 * 1_000_000;

/// `what`, a time at `at`, is out of range: the error that says so.
pub(crate) fn out_of_range(path: &Path, at: impl Into<String>, what: String) -> ImportError {
    malformed(
        path,
        at,
        format!("{what} is more than a year from the start of the recording: no time a recording can have (a damaged or edited file?); fix or remove the entry"),
    )
}

/// `ms` milliseconds since the recording started (the field `field` at `at`), in microseconds,
/// or an error when past [`MAX_T_US`] (or too large to multiply).
pub(crate) fn ms_to_us(path: &Path, at: &str, field: &str, ms: u64) -> Result<u64, ImportError> {
    ms.checked_mul(1000)
        .filter(|us| *us <= MAX_T_US)
        .ok_or_else(|| out_of_range(path, at, format!("{field} {ms} ms")))
}

pub(crate) fn malformed(
    path: &Path,
    at: impl Into<String>,
    problem: impl Into<String>,
) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        at: at.into(),
        problem: problem.into(),
    }
}

#[cfg(test)]
mod tests;
