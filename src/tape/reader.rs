//! The streaming tape reader: one line at a time, memory bounded by the longest line. A torn last
//! line (a crash mid-write) and a missing closing line are reported, not fatal.

use super::format::{End, Header, MsgLine, ServerDecl, TypeProbe, FORMAT_NAME, VERSION};
use super::scan::{scan_msg_line, MsgFields};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Why a tape could not be read. Every variant names the tape's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TapeError {
    /// No file at the path (exit 66).
    #[error("tape not found: {}", path.display())]
    NotFound {
        /// The tape asked for.
        path: PathBuf,
    },
    /// The file could not be opened or read (exit 74).
    #[error("reading tape {}", path.display())]
    Io {
        /// The tape being read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        cause: io::Error,
    },
    /// A complete line that is not a valid tape line (a torn last line is a warning instead).
    #[error("{}: tape line {line}{}", path.display(), located(message))]
    Malformed {
        /// The tape being read.
        path: PathBuf,
        /// 1-based number of the bad line.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// The first line is not an mcptape header.
    #[error("{}: not an mcptape tape ({why})", path.display())]
    NotATape {
        /// The file that was opened.
        path: PathBuf,
        /// What the first line is instead.
        why: String,
    },
    /// Written by a newer major format version than this build reads.
    #[error("{}: tape format version {version} is newer than this mcptape reads (up to {VERSION}); upgrade mcptape", path.display())]
    TooNew {
        /// The tape being read.
        path: PathBuf,
        /// The major version its header declares.
        version: u32,
    },
}

impl crate::exit::Coded for TapeError {
    fn exit_code(&self) -> i32 {
        match self {
            TapeError::NotFound { .. } => crate::exit::NO_INPUT,
            TapeError::Io { .. } => crate::exit::IO_ERR,
            _ => crate::exit::DATA_ERR,
        }
    }
}

/// Something about the tape worth saying that does not stop reading it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Warning {
    /// The last line was cut off mid-write; it was skipped.
    TornLastLine {
        /// 1-based number of the torn line.
        line: u64,
        /// How many bytes of it made it to disk.
        bytes: usize,
    },
    /// No closing line: the recording did not end cleanly (crash, SIGKILL, still running).
    NotClosed,
    /// A closing line was present but said some messages could not be written.
    Incomplete,
    /// The hash chain does not hold from this line on: the tape was edited after it was written.
    ChainBroken {
        /// 1-based number of the first line whose link does not hold.
        line: u64,
    },
    /// A complete line that is not a valid tape line, skipped (`--skip-bad-lines`).
    SkippedLine(BadLine),
    /// The recording stopped short (no closing line, or one marked incomplete) and was then
    /// appended to (`play --on-miss live`): the `append` event at `line` says so in its `cut`.
    CutBeforeAppend {
        /// 1-based number of the `append` event line: the first line after the cut.
        line: u64,
        /// How the recording before it ended, in words (the event's `cut.reason`).
        reason: String,
    },
}

/// A tape line skipped as malformed: where, and why (as the refusal would have said).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadLine {
    /// 1-based number of the line.
    pub line: u64,
    /// What is wrong with it: `column C: …` when serde placed it.
    pub why: String,
}

/// The lines skipped as malformed, in tape order, from a reader's warnings.
pub fn skipped_lines(warnings: &[Warning]) -> Vec<BadLine> {
    warnings
        .iter()
        .filter_map(|w| match w {
            Warning::SkippedLine(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// `2 malformed tape lines skipped (lines 8, 12)`: the count every summary gives.
pub fn skipped_summary(skipped: &[BadLine]) -> String {
    let lines: Vec<String> = skipped.iter().map(|b| b.line.to_string()).collect();
    let s = if skipped.len() == 1 { "" } else { "s" };
    format!(
        "{} malformed tape line{s} skipped (line{s} {})",
        skipped.len(),
        lines.join(", ")
    )
}

/// Two readers' skipped lines as one list, in tape order, each line once (the index and the
/// model-call reader both read every line of a tape).
pub fn merge_skipped(mut a: Vec<BadLine>, b: Vec<BadLine>) -> Vec<BadLine> {
    for x in b {
        if !a.iter().any(|y| y.line == x.line) {
            a.push(x);
        }
    }
    a.sort_by_key(|x| x.line);
    a
}

/// How a reader treats a complete line that is not a valid tape line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip it, with a [`Warning::SkippedLine`], instead of refusing the tape. The hash chain
    /// still runs over it, so a chained tape's chain breaks there.
    pub skip_bad_lines: bool,
    /// Check the hash chain even where the index cache remembers it whole
    /// (`play --require-chain`).
    pub recheck_chain: bool,
}

/// Where the hash chain stands after the lines read so far.
#[derive(Debug, Clone, PartialEq)]
pub enum Chain {
    /// Every line so far linked; the current head.
    Linked(String),
    /// The tape has no chain (written before format 1.1).
    Absent,
    /// Broken at this line.
    Broken(u64),
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::TornLastLine { line, bytes } => {
                write!(f, "line {line} is torn ({bytes} bytes, no newline): the recording was cut off mid-write; read up to the line before")
            }
            Warning::NotClosed => f.write_str("the tape has no closing line: the recording did not end cleanly; everything before the cut is read"),
            Warning::Incomplete => f.write_str("the recorder reported messages it could not write (tape marked incomplete)"),
            Warning::ChainBroken { line } => write!(f, "the hash chain breaks at line {line}: the tape was changed after it was written (`mcptape verify` tells more)"),
            Warning::SkippedLine(b) => write!(f, "tape line {} skipped (--skip-bad-lines){}", b.line, located(&b.why)),
            Warning::CutBeforeAppend { line, reason } => write!(f, "the recording was cut off before line {line} ({reason}); mcptape play appended to it from line {line} on: what the recording lost after the cut is not on the tape"),
        }
    }
}

/// One line of the tape, borrowed from the reader's buffer.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A `server` line: one server of the tape declared.
    Server(ServerDecl),
    /// A `msg` line: one message, or one line that was not a message, as it crossed the wire.
    Msg(MsgLine<'a>),
    /// The closing `end` line.
    End(End),
    /// A line type this version does not know (from a newer minor version): skipped.
    Unknown,
}

/// An entry with where it came from.
#[derive(Debug)]
pub struct Item<'a> {
    /// The line, parsed.
    pub entry: Entry<'a>,
    /// The whole line, as on disk.
    pub raw: &'a [u8],
    /// File offset of the line.
    pub offset: u64,
    /// 1-based line number.
    pub line: u64,
}

impl Item<'_> {
    /// The line without its terminator, `\n` or `\r\n`: what its hash covers (with its `h`).
    /// A tape checked out with CRLF line ends (git's `core.autocrlf` on Windows) reads as it
    /// was written, and a command that rewrites it must find each line's `h` at its end.
    pub fn stored(&self) -> &[u8] {
        stored(self.raw)
    }
}

/// `raw` without its line terminator, `\n` or `\r\n` (see [`Item::stored`]).
pub(crate) fn stored(raw: &[u8]) -> &[u8] {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads a tape line by line, after its header, checking the hash chain as it goes.
pub struct TapeReader {
    input: BufReader<File>,
    /// The line read last is the first `lent` bytes of `input`'s buffer (0: it is in `buf`),
    /// consumed when the next line is read.
    lent: usize,
    path: PathBuf,
    header: Header,
    buf: Vec<u8>,
    /// 1-based number of the line in `buf`.
    line: u64,
    /// Byte offset of the line in `buf` within the file.
    offset: u64,
    next_offset: u64,
    warnings: Vec<Warning>,
    saw_end: bool,
    chain: Chain,
    /// Off when another pass checks the chain (`TapeIndex::load_deferred`).
    check_chain: bool,
    options: ReadOptions,
    /// Where the newlines that end the file start, when there are two or more: the padding
    /// of a recorder killed mid-session (`writer`'s sink), after its last line.
    padding_from: Option<u64>,
}

/// The UTF-8 encoding of U+FEFF, which some editors put at the start of a file they save.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

impl TapeReader {
    /// Opens a tape and reads its header: an error if the file is missing, not a tape, or of a
    /// newer major version.
    pub fn open(path: &Path) -> Result<TapeReader, TapeError> {
        Self::open_with(path, ReadOptions::default())
    }

    /// [`open`](Self::open), with how bad lines are treated.
    pub fn open_with(path: &Path, options: ReadOptions) -> Result<TapeReader, TapeError> {
        let file = File::open(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TapeError::NotFound {
                path: path.to_path_buf(),
            },
            _ => TapeError::Io {
                path: path.to_path_buf(),
                cause: e,
            },
        })?;
        let padding_from = padding_from(&file);
        let mut input = BufReader::with_capacity(256 * 1024, file);
        let mut buf = Vec::new();
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(|e| TapeError::Io {
                path: path.to_path_buf(),
                cause: e,
            })?;
        let not_a_tape = |why: String| TapeError::NotATape {
            path: path.to_path_buf(),
            why,
        };
        if n == 0 {
            return Err(not_a_tape("the file is empty".into()));
        }
        if buf.starts_with(b"\xFF\xFE") || buf.starts_with(b"\xFE\xFF") {
            return Err(not_a_tape(
                "the file is UTF-16 (it starts with a UTF-16 byte-order mark); tapes are UTF-8: save it as UTF-8".into(),
            ));
        }
        // A UTF-8 byte-order mark (an editor's, on Windows) is an encoding marker, not content:
        // read past it, the header's hash (the chain's start) taken without it. Offsets stay
        // the file's.
        let bom = if buf.starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        let head = &buf[bom..];
        let header: Header = match serde_json::from_slice::<TypeProbe<'_>>(head) {
            Ok(p) if p.ty == "header" => {
                serde_json::from_slice(head).map_err(|e| not_a_tape(format!("bad header: {e}")))?
            }
            Ok(p) => {
                return Err(not_a_tape(format!(
                    "first line is of type {:?}, expected \"header\"",
                    p.ty
                )))
            }
            Err(_) => return Err(not_a_tape("the first line is not a JSON header".into())),
        };
        if header.format != FORMAT_NAME {
            return Err(not_a_tape(format!("format is {:?}", header.format)));
        }
        if header.version > VERSION {
            return Err(TapeError::TooNew {
                path: path.to_path_buf(),
                version: header.version,
            });
        }
        // Tapes from format 1.1 on are chained from their header line.
        let chain = if header.chained() {
            Chain::Linked(super::chain::start(stored(head)))
        } else {
            Chain::Absent
        };
        Ok(TapeReader {
            input,
            lent: 0,
            path: path.to_path_buf(),
            header,
            buf,
            line: 1,
            offset: 0,
            next_offset: n as u64,
            warnings: Vec::new(),
            saw_end: false,
            chain,
            check_chain: true,
            options,
            padding_from,
        })
    }

    /// A complete line the caller found malformed past the reader's own parse (the index's
    /// message fields): skipped and reported with `--skip-bad-lines`, else the tape's error.
    pub(crate) fn bad_line(&mut self, line: u64, message: String) -> Result<(), TapeError> {
        if !self.options.skip_bad_lines {
            return Err(TapeError::Malformed {
                path: self.path.clone(),
                line,
                message,
            });
        }
        self.warnings
            .push(Warning::SkippedLine(BadLine { line, why: message }));
        Ok(())
    }

    /// Reads without checking the hash chain (`chain` then stays as it was after the header):
    /// for a caller that checks it in a separate pass with `check_chain`.
    pub(crate) fn skip_chain(&mut self) {
        self.check_chain = false;
    }

    /// Checks the whole hash chain without parsing the lines, for a tape whose lines have all been
    /// read successfully by another reader: the chain advances over exactly the lines that reader
    /// took, a torn last line (one that does not parse) excluded. Returns where it breaks.
    pub(crate) fn check_chain(mut self) -> Result<Option<u64>, TapeError> {
        fn complete_or_parses(buf: &[u8]) -> Result<(), String> {
            if buf.last() == Some(&b'\n') {
                Ok(())
            } else {
                parse_entry(buf).map(|_| ())
            }
        }
        self.check_chain = true;
        while self.next_with(complete_or_parses)?.is_some() {}
        Ok(match self.chain {
            Chain::Broken(line) => Some(line),
            _ => None,
        })
    }

    /// The hash chain as far as read.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The tape's header line.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The tape's path, as opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file offset of the line read last: after a torn last line (`next_item` gave
    /// `None`), where that line starts.
    pub fn line_offset(&self) -> u64 {
        self.offset
    }

    /// Warnings so far (complete once `next_item` has returned `None`).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The next line after the header (blank lines skipped); `None` at the end of the file or at
    /// a torn last line, which is then a warning.
    pub fn next_item(&mut self) -> Result<Option<Item<'_>>, TapeError> {
        Ok(self
            .next_with(parse_entry)?
            .map(|(entry, raw, offset, line)| Item {
                entry,
                raw,
                offset,
                line,
            }))
    }

    /// The next line for the exchange index: message lines in the writer's plain form are
    /// scanned without a full parse (`scan`), every other line is parsed as by `next_item`.
    pub(crate) fn next_scanned(&mut self) -> Result<Option<Scanned<'_>>, TapeError> {
        Ok(self
            .next_with(parse_scanned)?
            .map(|(entry, raw, offset, line)| Scanned {
                entry,
                raw,
                offset,
                line,
            }))
    }

    /// Reads the next non-blank line, parses it with `parse`, and keeps the chain, the warnings
    /// and the torn-last-line rule; returns the parsed line, the raw line, its offset and number.
    #[allow(clippy::type_complexity)]
    fn next_with<'s, T: Parsed + 's>(
        &'s mut self,
        parse: fn(&'s [u8]) -> Result<T, String>,
    ) -> Result<Option<(T, &'s [u8], u64, u64)>, TapeError> {
        loop {
            self.offset = self.next_offset;
            let n = self.read_line().map_err(|e| TapeError::Io {
                path: self.path.clone(),
                cause: e,
            })?;
            if n == 0 {
                if !self.saw_end && !self.warnings.contains(&Warning::NotClosed) {
                    self.warnings.push(Warning::NotClosed);
                }
                return Ok(None);
            }
            self.next_offset += n as u64;
            self.line += 1;
            let line = self.line_bytes();
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            // The last line before a killed recorder's padding gets its newline from the
            // padding: torn when it does not parse, as a last line without one is.
            if self.padding_from.is_some_and(|at| self.next_offset > at) {
                let bytes = line.strip_suffix(b"\n").unwrap_or(line).len();
                if !whole_before_padding(line) {
                    self.warnings.push(Warning::TornLastLine {
                        line: self.line,
                        bytes,
                    });
                    if !self.saw_end {
                        self.warnings.push(Warning::NotClosed);
                    }
                    return Ok(None);
                }
            }
            // Skipping parses a complete line twice (here, and below as the caller asked): a
            // cost only damaged tapes pay. A torn last line stays the warning it always is.
            if self.options.skip_bad_lines && line.last() == Some(&b'\n') {
                if let Err(why) = parse_entry(line) {
                    // Skipped, not unread: the chain runs over the line as stored, so a chained
                    // tape's chain breaks here, as `verify` says.
                    if self.check_chain {
                        let line = if self.lent > 0 {
                            &self.input.buffer()[..self.lent]
                        } else {
                            &self.buf
                        };
                        advance_chain(&mut self.chain, line, self.line, &mut self.warnings);
                    }
                    self.warnings.push(Warning::SkippedLine(BadLine {
                        line: self.line,
                        why,
                    }));
                    continue;
                }
            }
            break;
        }
        // Disjoint field borrows: the entry borrows the line while the bookkeeping fields change.
        let TapeReader {
            input,
            lent,
            buf,
            warnings,
            saw_end,
            line,
            path,
            offset,
            chain,
            check_chain,
            ..
        } = self;
        let buf: &'s [u8] = if *lent > 0 {
            &input.buffer()[..*lent]
        } else {
            buf
        };
        match parse(buf) {
            Ok(entry) => {
                if *check_chain {
                    advance_chain(chain, buf, *line, warnings);
                }
                if let Some(end) = entry.end() {
                    *saw_end = true;
                    // A cut an append recorded is why the closing line says incomplete.
                    let cut = warnings
                        .iter()
                        .any(|w| matches!(w, Warning::CutBeforeAppend { .. }));
                    if end.incomplete && !cut {
                        warnings.push(Warning::Incomplete);
                    }
                } else if let Some(reason) = append_cut(buf) {
                    warnings.push(Warning::CutBeforeAppend {
                        line: *line,
                        reason,
                    });
                }
                Ok(Some((entry, buf, *offset, *line)))
            }
            Err(_) if buf.last() != Some(&b'\n') => {
                // Only the very last line can lack its newline: a write cut short.
                warnings.push(Warning::TornLastLine {
                    line: *line,
                    bytes: buf.len(),
                });
                if !*saw_end {
                    warnings.push(Warning::NotClosed);
                }
                Ok(None)
            }
            Err(message) => Err(TapeError::Malformed {
                path: path.clone(),
                line: *line,
                message,
            }),
        }
    }
}

/// The `cut.reason` of an `append` event line: the recording it was appended to had stopped
/// short (`super::append`).
fn append_cut(buf: &[u8]) -> Option<String> {
    if !buf.starts_with(br#"{"type":"event","#)
        || memchr::memmem::find(buf, br#""what":"append""#).is_none()
    {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Cut {
        reason: String,
    }
    #[derive(serde::Deserialize)]
    struct Event {
        what: String,
        cut: Option<Cut>,
    }
    let e: Event = serde_json::from_slice(buf).ok()?;
    (e.what == "append").then_some(e.cut?.reason)
}

/// A parsed line, as far as the reader's bookkeeping needs it.
trait Parsed {
    fn end(&self) -> Option<&End>;
}

impl Parsed for () {
    fn end(&self) -> Option<&End> {
        None
    }
}

impl Parsed for Entry<'_> {
    fn end(&self) -> Option<&End> {
        match self {
            Entry::End(end) => Some(end),
            _ => None,
        }
    }
}

/// A line as the exchange index reads it.
pub(crate) enum ScannedEntry<'a> {
    /// A message line read by the fast scanner.
    Msg(MsgFields<'a>),
    /// Any other line, or a message line the scanner left to serde.
    Entry(Entry<'a>),
}

impl Parsed for ScannedEntry<'_> {
    fn end(&self) -> Option<&End> {
        match self {
            ScannedEntry::Msg(_) => None,
            ScannedEntry::Entry(e) => e.end(),
        }
    }
}

/// A scanned line with where it came from.
pub(crate) struct Scanned<'a> {
    pub entry: ScannedEntry<'a>,
    /// The whole line, as on disk.
    pub raw: &'a [u8],
    /// File offset of the line.
    pub offset: u64,
    /// 1-based line number.
    pub line: u64,
}

impl TapeReader {
    /// Reads the next line (with its newline, if it has one); its length, 0 at the end. A line
    /// wholly in `input`'s buffer, as nearly all are, is lent from there (`lent`): no copy of
    /// every byte of the tape into `buf` (5 % of a cold start's instructions).
    fn read_line(&mut self) -> io::Result<usize> {
        self.input.consume(std::mem::take(&mut self.lent));
        self.buf.clear();
        let available = loop {
            match self.input.fill_buf() {
                Ok(b) => break b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if let Some(i) = memchr::memchr(b'\n', available) {
            self.lent = i + 1;
            return Ok(i + 1);
        }
        read_line(&mut self.input, &mut self.buf)
    }

    /// The line read last.
    fn line_bytes(&self) -> &[u8] {
        if self.lent > 0 {
            &self.input.buffer()[..self.lent]
        } else {
            &self.buf
        }
    }
}

/// Where the run of newlines that ends `file` starts, when it is two or more long: a recorder
/// killed mid-session leaves its padding so (tape/sink.rs). A closed tape ends in one newline.
#[cfg(unix)]
fn padding_from(file: &File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata().ok()?.len();
    let mut buf = [0u8; 4096];
    let mut end = len;
    loop {
        let from = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - from) as usize];
        file.read_exact_at(chunk, from).ok()?;
        let start = match chunk.iter().rposition(|&b| b != b'\n') {
            Some(i) => from + i as u64 + 1,
            None if from == 0 => 0,
            None => {
                end = from;
                continue;
            }
        };
        return (len - start >= 2).then_some(start);
    }
}

#[cfg(not(unix))]
fn padding_from(_file: &File) -> Option<u64> {
    None
}

/// Whether the last line before a killed recorder's padding, `line` (with the newline the
/// padding gives it, when its own did not make it), is whole: it parses. A line cut mid-copy
/// never does (a tape line is a JSON object, and no proper prefix of one is JSON); the reader
/// takes a line that does not for torn.
fn whole_before_padding(line: &[u8]) -> bool {
    parse_entry(line).is_ok()
}

/// How long a tape left by a recorder killed mid-session is without the writer's padding
/// (`sink.rs`), read as this reader reads it: to the end of the last line before the padding
/// with its newline when that line is whole, without one when it is torn (so that a reader
/// still takes it for a torn last line, not for a malformed one). `None` when the file does not
/// end in padding (a tape closed cleanly ends in one newline; one written with `write(2)` ends
/// on its last byte), holds nothing but newlines, or cannot be read: nothing to cut.
///
/// For whoever moves such a tape elsewhere (`mcptape push` uploading a killed recording's
/// spool): cut there, it reads as it did, lines, warnings and chain alike.
#[cfg(unix)]
pub fn unpadded_len(file: &File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let at = padding_from(file).filter(|&at| at > 0)?;
    // Where the line before the padding starts: after the newline before it, or at 0.
    let mut buf = [0u8; 4096];
    let mut end = at;
    let start = loop {
        let from = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - from) as usize];
        file.read_exact_at(chunk, from).ok()?;
        if let Some(i) = memchr::memrchr(b'\n', chunk) {
            break from + i as u64 + 1;
        }
        if from == 0 {
            break 0;
        }
        end = from;
    };
    // The line with the padding's first newline, as the reader reads it.
    let mut line = vec![0u8; (at - start) as usize + 1];
    file.read_exact_at(&mut line, start).ok()?;
    let whole = if start == 0 {
        // The header (the reader's `open` takes no other first line): a torn one is no tape
        // either way.
        let head = line.strip_prefix(UTF8_BOM).unwrap_or(&line);
        serde_json::from_slice::<Header>(head).is_ok()
    } else {
        // A line of blanks is skipped, as every blank line is.
        line.iter().all(u8::is_ascii_whitespace) || whole_before_padding(&line)
    };
    Some(if whole { at + 1 } else { at })
}

#[cfg(not(unix))]
pub fn unpadded_len(_file: &File) -> Option<u64> {
    None
}

/// `BufRead::read_until(b'\n')`, with the `memchr` crate's vectorized search in place of the
/// standard library's word-at-a-time one (6 % of a big tape's index build).
fn read_line(input: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut n = 0;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(n);
        }
        let (taken, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..taken]);
        input.consume(taken);
        n += taken;
        if done {
            return Ok(n);
        }
    }
}

fn parse_scanned(buf: &[u8]) -> Result<ScannedEntry<'_>, String> {
    // Only complete lines take the fast path: a torn last line goes through serde, which decides
    // whether it is torn, exactly as before.
    if let Some(line) = buf.strip_suffix(b"\n") {
        if let Some(m) = scan_msg_line(line) {
            return Ok(ScannedEntry::Msg(m));
        }
    }
    parse_entry(buf).map(ScannedEntry::Entry)
}

/// What serde says is wrong with a tape line, placed in the line: `column C: WHAT: why`
/// (serde's own "at line 1 column C" counts within the line's buffer, which is one tape line,
/// so its line number would mislead). An error at the buffer's end is at the line's end.
pub(crate) fn json_problem(what: &str, e: &serde_json::Error, buf: &[u8]) -> String {
    let full = e.to_string();
    let why = full
        .rfind(" at line ")
        .map_or(full.as_str(), |i| &full[..i]);
    let text = buf.strip_suffix(b"\n").unwrap_or(buf);
    let column = if e.line() <= 1 {
        e.column()
    } else {
        String::from_utf8_lossy(text).chars().count()
    };
    format!("column {column}: {what}: {why}")
}

/// A malformed line's message after "tape line N": `, column C: …` when it has a column.
fn located(message: &str) -> String {
    if message.starts_with("column ") {
        format!(", {message}")
    } else {
        format!(": {message}")
    }
}

fn parse_entry(buf: &[u8]) -> Result<Entry<'_>, String> {
    // The writer always puts `type` first; recognising message lines by prefix saves a parse.
    if buf.starts_with(br#"{"type":"msg","#) {
        return msg_entry(buf);
    }
    let probe: TypeProbe<'_> =
        serde_json::from_slice(buf).map_err(|e| json_problem("not a JSON tape line", &e, buf))?;
    match probe.ty.as_ref() {
        "msg" => msg_entry(buf),
        "server" => serde_json::from_slice(buf)
            .map(Entry::Server)
            .map_err(|e| json_problem("bad server line", &e, buf)),
        "end" => serde_json::from_slice(buf)
            .map(Entry::End)
            .map_err(|e| json_problem("bad end line", &e, buf)),
        "header" => Err("a second header line".into()),
        _ => Ok(Entry::Unknown),
    }
}

fn msg_entry(buf: &[u8]) -> Result<Entry<'_>, String> {
    let m: MsgLine<'_> =
        serde_json::from_slice(buf).map_err(|e| json_problem("bad msg line", &e, buf))?;
    m.check_body()?;
    Ok(Entry::Msg(m))
}

fn advance_chain(chain: &mut Chain, raw: &[u8], line: u64, warnings: &mut Vec<Warning>) {
    let stored = stored(raw);
    let located = super::chain::locate_h(stored);
    match (&mut *chain, located) {
        (Chain::Broken(_), _) | (Chain::Absent, None) => return,
        // Hashed in place and the head reused: no copy of the line, no allocation per line.
        (Chain::Linked(prev), Some((key_start, h)))
            if super::chain::link_in_place(prev, stored, key_start) == h.as_bytes() =>
        {
            prev.clear();
            prev.push_str(h);
            return;
        }
        (Chain::Linked(_), _) | (Chain::Absent, Some(_)) => {}
    }
    *chain = Chain::Broken(line);
    warnings.push(Warning::ChainBroken { line });
}
