//! A bounded newline framer over a byte stream.
//!
//! The framer is push-based: the stdio relay forwards every chunk it reads unchanged and only
//! *also* feeds it here, so framing can never alter, delay or drop a byte on the wire. The
//! partial line lives in the struct, not in a future, so the framer is trivially cancel-safe.

/// Default largest message kept whole: larger lines are forwarded but recorded as `oversize`.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How many leading bytes of an over-long line are kept for the record, to say what it was.
pub const OVERSIZE_HEAD: usize = 256;

/// Line-buffer capacity always kept between lines. A larger one is kept while the lines keep
/// being that large (a server answering 8 MiB after 8 MiB reuses one buffer instead of growing,
/// faulting in and freeing a fresh one per message) and released by the first smaller line.
const KEEP_CAPACITY: usize = 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One complete unit of the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A line without its terminator (`\n` or `\r\n`) and without a leading BOM.
    Line(Line<'a>),
    /// A line longer than the limit: forwarded, but only its length and head are kept.
    Oversize {
        /// The line's full length in bytes, without its `\n`.
        len: u64,
        /// Its first bytes ([`OVERSIZE_HEAD`] at most).
        head: Vec<u8>,
    },
}

/// A complete line, borrowed from the framer's buffer (or the chunk) until `emit` returns.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Line<'a> {
    /// The line's bytes, without terminator or BOM.
    pub bytes: &'a [u8],
    /// The line ended with `\r\n` rather than `\n`.
    pub crlf: bool,
    /// The stream ended without a terminator after this line (a torn last line).
    pub unterminated: bool,
    /// A UTF-8 byte-order mark preceded the line (only possible at the start of the stream).
    pub bom: bool,
}

/// Splits a byte stream into lines, at most `max` bytes kept per line; fed chunk by chunk.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    max: usize,
    /// Set while discarding the rest of an over-long line.
    oversize: Option<(u64, Vec<u8>)>,
    at_stream_start: bool,
}

impl<'a> Frame<'a> {
    /// A whole message given as one line (an HTTP body, an SSE event's data): `\n`-terminated,
    /// no BOM.
    pub fn whole(bytes: &'a [u8]) -> Frame<'a> {
        Frame::Line(Line {
            bytes,
            crlf: false,
            unterminated: false,
            bom: false,
        })
    }
}

impl Framer {
    /// A framer keeping lines of up to `max` bytes (at least 1) whole.
    pub fn new(max: usize) -> Self {
        Framer {
            buf: Vec::new(),
            max: max.max(1),
            oversize: None,
            at_stream_start: true,
        }
    }

    /// Feeds one chunk; calls `emit` for every frame it completes, in order.
    pub fn push(&mut self, mut chunk: &[u8], mut emit: impl FnMut(Frame<'_>)) {
        while !chunk.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(pos) => {
                    let (head, rest) = (&chunk[..pos], &chunk[pos + 1..]);
                    chunk = rest;
                    if let Some((len, mut kept)) = self.oversize.take() {
                        fill_head(&mut kept, head);
                        emit(Frame::Oversize {
                            len: len + head.len() as u64,
                            head: kept,
                        });
                        continue;
                    }
                    if self.buf.is_empty() {
                        // Fast path: the whole line is inside this chunk, no copy.
                        if self.buf.capacity() > KEEP_CAPACITY && head.len() <= KEEP_CAPACITY {
                            self.buf = Vec::new(); // the large lines are over
                        }
                        if head.len() > self.max {
                            emit(Frame::Oversize {
                                len: head.len() as u64,
                                head: head[..OVERSIZE_HEAD.min(head.len())].to_vec(),
                            });
                        } else {
                            let line = self.line(head, false);
                            emit_line(line, &mut emit);
                        }
                    } else if self.buf.len() + head.len() > self.max {
                        let len = (self.buf.len() + head.len()) as u64;
                        let mut kept = take_head(&mut self.buf);
                        fill_head(&mut kept, head);
                        emit(Frame::Oversize { len, head: kept });
                    } else {
                        let mut buf = std::mem::take(&mut self.buf);
                        buf.extend_from_slice(head);
                        let line = self.line(&buf, false);
                        emit_line(line, &mut emit);
                        if buf.capacity() <= KEEP_CAPACITY || buf.len() > KEEP_CAPACITY {
                            buf.clear();
                            self.buf = buf; // modest, or the next line is likely as large
                        }
                    }
                }
                None => {
                    self.stash(chunk);
                    chunk = &[];
                }
            }
        }
    }

    /// Ends the stream: a partial last line is emitted as unterminated.
    pub fn finish(&mut self, mut emit: impl FnMut(Frame<'_>)) {
        if let Some((len, head)) = self.oversize.take() {
            emit(Frame::Oversize { len, head });
        } else if !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            let line = self.line(&buf, true);
            emit_line(line, &mut emit);
        }
    }

    fn stash(&mut self, part: &[u8]) {
        if let Some((len, head)) = &mut self.oversize {
            *len += part.len() as u64;
            fill_head(head, part);
        } else if self.buf.len() + part.len() > self.max {
            let len = (self.buf.len() + part.len()) as u64;
            let mut head = take_head(&mut self.buf);
            fill_head(&mut head, part);
            self.oversize = Some((len, head));
        } else {
            self.buf.extend_from_slice(part);
        }
    }

    fn line<'a>(&mut self, raw: &'a [u8], unterminated: bool) -> Line<'a> {
        let mut bytes = raw;
        let mut bom = false;
        if std::mem::take(&mut self.at_stream_start) && bytes.starts_with(BOM) {
            bytes = &bytes[BOM.len()..];
            bom = true;
        }
        let mut crlf = false;
        if !unterminated && bytes.last() == Some(&b'\r') {
            bytes = &bytes[..bytes.len() - 1];
            crlf = true;
        }
        Line {
            bytes,
            crlf,
            unterminated,
            bom,
        }
    }
}

fn emit_line(line: Line<'_>, emit: &mut impl FnMut(Frame<'_>)) {
    // Blank lines carry no message; they are forwarded on the wire but not framed.
    if line.bytes.iter().all(|b| b.is_ascii_whitespace()) && !line.bom {
        return;
    }
    emit(Frame::Line(line));
}

/// Tops the kept head of an over-long line up to `OVERSIZE_HEAD` bytes from `more`, so the head
/// is the same however reads split the line.
fn fill_head(kept: &mut Vec<u8>, more: &[u8]) {
    let room = OVERSIZE_HEAD.saturating_sub(kept.len());
    kept.extend_from_slice(&more[..room.min(more.len())]);
}

fn take_head(buf: &mut Vec<u8>) -> Vec<u8> {
    let head = buf[..OVERSIZE_HEAD.min(buf.len())].to_vec();
    *buf = Vec::new(); // release the large allocation
    head
}

/// `msg` as one line of a newline-framed stream: every line break inside it becomes a space.
/// In valid JSON a line break can only be whitespace between tokens (a pretty-printed HTTP
/// body has them), so the message means the same, and a stdio server reads one message where
/// it would otherwise read several broken ones. Borrowed when there is none, as nearly always.
pub fn one_line(msg: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if memchr::memchr2(b'\n', b'\r', msg).is_none() {
        return std::borrow::Cow::Borrowed(msg);
    }
    std::borrow::Cow::Owned(
        msg.iter()
            .map(|&c| if c == b'\n' || c == b'\r' { b' ' } else { c })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_turns_line_breaks_into_spaces_and_borrows_otherwise() {
        let pretty = b"{\r\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1\r}";
        let flat = one_line(pretty);
        assert_eq!(&flat[..], b"{    \"jsonrpc\": \"2.0\",   \"id\": 1 }");
        assert!(matches!(
            one_line(b"{\"id\":1}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[derive(Debug, PartialEq)]
    enum Owned {
        Line(Vec<u8>, bool, bool, bool),
        Over(u64, Vec<u8>),
    }

    fn run(max: usize, input: &[u8], chunk: usize) -> Vec<Owned> {
        let mut f = Framer::new(max);
        let mut out = Vec::new();
        let mut push = |fr: Frame<'_>| {
            out.push(match fr {
                Frame::Line(l) => Owned::Line(l.bytes.to_vec(), l.crlf, l.unterminated, l.bom),
                Frame::Oversize { len, head } => Owned::Over(len, head),
            })
        };
        for c in input.chunks(chunk) {
            f.push(c, &mut push);
        }
        f.finish(&mut push);
        out
    }

    #[test]
    fn frames_are_the_same_for_every_chunk_size() {
        let input = b"\xEF\xBB\xBF{\"a\":1}\r\n\n{\"b\":2}\nnot json\n  \npartial";
        let expected = vec![
            Owned::Line(b"{\"a\":1}".to_vec(), true, false, true),
            Owned::Line(b"{\"b\":2}".to_vec(), false, false, false),
            Owned::Line(b"not json".to_vec(), false, false, false),
            Owned::Line(b"partial".to_vec(), false, true, false),
        ];
        for chunk in 1..=input.len() {
            assert_eq!(run(1024, input, chunk), expected, "chunk size {chunk}");
        }
    }

    #[test]
    fn over_long_lines_are_reported_with_length_and_head_then_framing_resumes() {
        let mut input = vec![b'x'; 1000];
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        input.extend(vec![b'y'; 700]); // over-long and unterminated
        for chunk in [1, 7, 64, 333, 5000] {
            let out = run(100, &input, chunk);
            assert_eq!(out.len(), 3, "chunk size {chunk}");
            assert_eq!(out[0], Owned::Over(1000, vec![b'x'; OVERSIZE_HEAD]));
            assert_eq!(
                out[1],
                Owned::Line(b"{\"ok\":true}".to_vec(), false, false, false)
            );
            assert_eq!(out[2], Owned::Over(700, vec![b'y'; OVERSIZE_HEAD]));
        }
    }

    #[test]
    fn the_kept_head_does_not_depend_on_chunking() {
        // Regression (found by fuzzing): the bytes of the last chunk before the newline were
        // left out of the head when the line was short of OVERSIZE_HEAD.
        let input = b"0123456789\n";
        for chunk in 1..=input.len() {
            assert_eq!(
                run(4, input, chunk),
                vec![Owned::Over(10, b"0123456789".to_vec())],
                "chunk size {chunk}"
            );
        }
    }

    #[test]
    fn a_line_exactly_at_the_limit_is_kept() {
        let mut input = vec![b'z'; 100];
        input.push(b'\n');
        for chunk in [1, 10, 101] {
            assert_eq!(
                run(100, &input, chunk),
                vec![Owned::Line(vec![b'z'; 100], false, false, false)]
            );
        }
    }

    /// A run of large lines reuses one line buffer (no growing, faulting in and freeing per
    /// message); the first small line after them releases it.
    #[test]
    fn a_large_line_buffer_is_kept_for_the_next_large_line_only() {
        const BIG: usize = 3 * KEEP_CAPACITY;
        let mut f = Framer::new(4 * KEEP_CAPACITY);
        let mut line = vec![b'x'; BIG];
        line.push(b'\n');
        let mut lens = Vec::new();
        let mut push = |f: &mut Framer, bytes: &[u8]| {
            for c in bytes.chunks(64 * 1024) {
                f.push(c, |fr| {
                    if let Frame::Line(l) = fr {
                        lens.push(l.bytes.len())
                    }
                });
            }
        };
        push(&mut f, &line);
        let kept = f.buf.capacity();
        assert!(kept >= BIG, "kept {kept}");
        let at = f.buf.as_ptr();
        push(&mut f, &line);
        assert_eq!((f.buf.capacity(), f.buf.as_ptr()), (kept, at), "reused");
        // A small line in several chunks, then one inside a chunk: released either way.
        push(&mut f, &line);
        f.push(b"{\"a\"", |_| {});
        f.push(b":1}\n", |_| {});
        assert!(f.buf.capacity() <= KEEP_CAPACITY);
        push(&mut f, &line);
        push(&mut f, b"{}\n");
        assert!(f.buf.capacity() <= KEEP_CAPACITY);
        assert_eq!(lens, [BIG, BIG, BIG, BIG, 2]);
    }

    #[test]
    fn bom_only_counts_at_stream_start() {
        let out = run(100, b"{}\n\xEF\xBB\xBF{}\n", 3);
        assert_eq!(
            out[1],
            Owned::Line(b"\xEF\xBB\xBF{}".to_vec(), false, false, false)
        );
    }
}
