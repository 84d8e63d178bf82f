//! A fast path for reading message lines as the recorder writes them, for the exchange index.
//!
//! A full serde parse of every line (and of every answer inside it) made loading a big tape slow.
//! This scanner walks the fields in the order the writer puts them, takes borrowed slices, and
//! skips the message body with a validating scanner that builds nothing. It accepts only lines
//! that serde would read to exactly the same fields; for anything else (other field orders,
//! escapes in names, `redacted`, `problem`, `http` facts, `null` ids, deep nesting, whitespace
//! between fields) it gives up and the caller parses the line with serde as before.

use crate::wire::{Dir, Kind};
use std::borrow::Cow;

/// Where the message's body text is on the line (slices of the line, so offsets follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyText<'a> {
    /// The verbatim JSON message.
    Json(&'a str),
    /// The JSON string literal (quotes included) of a non-JSON UTF-8 line.
    Text(&'a str),
    /// The JSON string literal (quotes included) of base64 of a non-UTF-8 line.
    B64(&'a str),
    /// Only the length of an over-long line is known.
    Oversize(u64),
}

/// What the exchange index reads from a message line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MsgFields<'a> {
    pub seq: u64,
    pub t_us: u64,
    pub server: Cow<'a, str>,
    pub dir: Dir,
    pub kind: Kind,
    /// The id as raw JSON text.
    pub id: Option<&'a str>,
    pub method: Option<Cow<'a, str>>,
    pub body: BodyText<'a>,
    /// A JSON object body: where the value of its one top-level `id` lies, relative to the
    /// body's start; `None` when that is not known.
    pub id_in_body: Option<(u32, u32)>,
    /// What the HTTP facts say (all absent for stdio tapes).
    pub http: HttpMeta<'a>,
    /// Added after the recording (`"appended":true`, by `play --on-miss live`).
    pub appended: bool,
}

/// The HTTP facts the index uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct HttpMeta<'a> {
    /// Recorded over HTTP inside an SSE stream.
    pub sse: bool,
    /// HTTP: the request (raw id text) whose answer stream this server message came on.
    pub stream_of: Option<&'a str>,
    /// The session the message belongs to (the `Mcp-Session-Id` its POST or GET carried).
    pub session: Option<Cow<'a, str>>,
    /// The session the server's answer opened (`initialize`).
    pub created: Option<Cow<'a, str>>,
    /// The POST's number.
    pub post: Option<u64>,
    /// The answer's HTTP status and content type.
    pub status: Option<u16>,
    pub content_type: Option<Cow<'a, str>>,
    /// A server message that came on a GET stream.
    pub get_stream: bool,
    /// Its SSE event id.
    pub event_id: Option<Cow<'a, str>>,
    /// A hash of the request's routing headers (see `index::Exchange::headers`), 0 for none.
    pub headers: u64,
}

/// Deeper values are left to serde, which has its own nesting limit.
const MAX_DEPTH: usize = 64;

/// Reads a stored message line (without its newline), or `None` when the line is not in the
/// writer's plain form and must be parsed with serde.
pub(crate) fn scan_msg_line(line: &[u8]) -> Option<MsgFields<'_>> {
    // One UTF-8 check up front, as serde does for the borrowed strings; slices are then &str.
    let line = std::str::from_utf8(line).ok()?;
    let mut c = Cursor {
        s: line.as_bytes(),
        i: 0,
    };
    c.lit(b"{\"type\":\"msg\",\"seq\":")?;
    let seq = c.uint()?;
    c.lit(b",\"t_us\":")?;
    let t_us = c.uint()?;
    c.lit(b",\"server\":")?;
    let server = c.plain_str(line)?;
    c.lit(b",\"dir\":")?;
    let dir = match c.plain_str(line)? {
        "c2s" => Dir::C2S,
        "s2c" => Dir::S2C,
        _ => return None,
    };
    c.lit(b",\"kind\":")?;
    let kind = kind_of(c.plain_str(line)?)?;
    let id = if c.lit(b",\"id\":").is_some() {
        // Strings and numbers only: serde reads a `null` id as no id.
        let start = c.i;
        c.i = match c.peek()? {
            b'"' => string_end(c.s, c.i)?,
            b'-' | b'0'..=b'9' => number_end(c.s, c.i)?,
            _ => return None,
        };
        Some(&line[start..c.i])
    } else {
        None
    };
    let method = if c.lit(b",\"method\":").is_some() {
        Some(c.plain_str(line)?)
    } else {
        None
    };
    // Flags the index does not use; only their plain forms are taken.
    let _ = c.lit(b",\"crlf\":true");
    let _ = c.lit(b",\"eol\":false");
    let len = if c.lit(b",\"len\":").is_some() {
        Some(c.uint()?)
    } else {
        None
    };
    let mut id_in_body = None;
    let body = if c.lit(b",\"msg\":").is_some() {
        // Objects and arrays only: other values are rare (the writer puts a `problem`, which
        // sends the line to serde, before them), so they are left to serde.
        if !matches!(c.peek()?, b'{' | b'[') {
            return None;
        }
        let start = c.i;
        if c.s[start] == b'{' {
            (c.i, id_in_body) = message_end(c.s, start)?;
        } else {
            c.i = value_end(c.s, c.i, 0)?;
        }
        BodyText::Json(&line[start..c.i])
    } else if c.lit(b",\"text\":").is_some() {
        BodyText::Text(c.literal(line)?)
    } else if c.lit(b",\"b64\":").is_some() {
        BodyText::B64(c.literal(line)?)
    } else {
        return None;
    };
    // A body decides the kind's body, as the slow path does: `msg` first, then oversize.
    let body = match (body, kind, len) {
        (BodyText::Json(_), _, _) => body,
        (_, Kind::Oversize, Some(n)) => BodyText::Oversize(n),
        (_, Kind::Oversize, None) => return None,
        _ => body,
    };
    let appended = c.lit(b",\"appended\":true").is_some();
    // The tail: `}` (an unchained tape) or the chain hash and `}`.
    let rest = &c.s[c.i..];
    let tail_ok = rest == b"}"
        || (rest.len() == 6 + 64 + 2
            && rest.starts_with(b",\"h\":\"")
            && rest.ends_with(b"\"}")
            && super::chain::all_hex(&rest[6..6 + 64]));
    if !tail_ok {
        return None;
    }
    Some(MsgFields {
        seq,
        t_us,
        server: Cow::Borrowed(server),
        dir,
        kind,
        id,
        method: method.map(Cow::Borrowed),
        body,
        id_in_body,
        http: HttpMeta::default(),
        appended,
    })
}

fn kind_of(s: &str) -> Option<Kind> {
    Some(match s {
        "request" => Kind::Request,
        "notification" => Kind::Notification,
        "response" => Kind::Response,
        "error" => Kind::Error,
        "batch" => Kind::Batch,
        "invalid" => Kind::Invalid,
        "not_json" => Kind::NotJson,
        "oversize" => Kind::Oversize,
        _ => return None,
    })
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn lit(&mut self, l: &[u8]) -> Option<()> {
        if self.s[self.i..].starts_with(l) {
            self.i += l.len();
            Some(())
        } else {
            None
        }
    }

    /// An unsigned integer as serde reads one into a `u64`: no leading zeros, no fraction or
    /// exponent (the next field's comma must follow), no overflow.
    fn uint(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && self.s[start] == b'0') {
            return None;
        }
        Some(n)
    }

    /// A string without escapes, as borrowed text (without quotes).
    fn plain_str<'l>(&mut self, line: &'l str) -> Option<&'l str> {
        let start = self.i;
        let end = string_end(self.s, start)?;
        let inner = &line[start + 1..end - 1];
        if inner.contains('\\') {
            return None;
        }
        self.i = end;
        Some(inner)
    }

    /// A string literal, quotes included.
    fn literal<'l>(&mut self, line: &'l str) -> Option<&'l str> {
        let start = self.i;
        self.i = string_end(self.s, start)?;
        Some(&line[start..self.i])
    }
}

/// The end (one past the closing quote) of the string literal starting at `i`; `None` if it is
/// not a valid JSON string (unterminated, a bad escape, a raw control character).
pub(super) fn string_end(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) != Some(&b'"') {
        return None;
    }
    let mut i = i + 1;
    loop {
        i = find_special(s, i);
        match *s.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => {
                i = match *s.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i + 2,
                    b'u' => {
                        let hex = s.get(i + 2..i + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        i + 6
                    }
                    _ => return None,
                }
            }
            _ => return None, // a control character
        }
    }
}

/// The first index from `i` holding `"`, `\` or a control character (or `s.len()`; for a
/// control character, the first one). Answers are mostly long strings: after a first eight
/// bytes looked at together (keys and short values end there), the `memchr` crate finds the
/// next quote or backslash with the CPU's vector instructions, and the bytes before it are
/// checked for control characters in a loop the compiler vectorizes.
fn find_special(s: &[u8], i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    if let Some(chunk) = s.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let q = w ^ (LO * u64::from(b'"'));
        let b = w ^ (LO * u64::from(b'\\'));
        // A byte is flagged when it is zero (q, b) or below 0x20 (w); borrows can only flag
        // bytes after a true hit, so the lowest flag is exact.
        let hits = (q.wrapping_sub(LO) & !q)
            | (b.wrapping_sub(LO) & !b)
            | (w.wrapping_sub(LO * 0x20) & !w);
        let hits = hits & HI;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
    }
    let rest = &s[i.min(s.len())..];
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    // Without an early exit, so that it vectorizes; a control character is rare (it makes the
    // string invalid), and only then is it looked for one byte at a time.
    let control = rest[..end].iter().fold(false, |any, &c| any | (c < 0x20));
    if control {
        let at = rest[..end].iter().position(|&c| c < 0x20).unwrap_or(end);
        return i + at;
    }
    i + end
}

/// The end of the number starting at `i` (JSON's grammar: `-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`).
pub(super) fn number_end(s: &[u8], mut i: usize) -> Option<usize> {
    let digits = |s: &[u8], mut i: usize| {
        let start = i;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    if s.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match s.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(s, i)?,
        _ => return None,
    };
    if s.get(i) == Some(&b'.') {
        i = digits(s, i + 1)?;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(s, i)?;
    }
    Some(i)
}

pub(super) fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while matches!(s.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `i` (no leading whitespace), validated as serde would
/// validate it when skipping it; `None` when it is not valid JSON or nests deeper than
/// `MAX_DEPTH`.
pub(super) fn value_end(s: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => string_end(s, i),
        b'-' | b'0'..=b'9' => number_end(s, i),
        b't' => s[i..].starts_with(b"true").then_some(i + 4),
        b'f' => s[i..].starts_with(b"false").then_some(i + 5),
        b'n' => s[i..].starts_with(b"null").then_some(i + 4),
        b'{' | b'[' => container_end(s, i, depth, |_, _| {}),
        _ => None,
    }
}

/// [`value_end`] of the object or array at `i`, calling `member(key, value)` with the spans
/// of each of an object's members (the key with its quotes).
fn container_end(
    s: &[u8],
    i: usize,
    depth: usize,
    mut member: impl FnMut((usize, usize), (usize, usize)),
) -> Option<usize> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let object = s[i] == b'{';
    let close = if object { b'}' } else { b']' };
    let mut i = skip_ws(s, i + 1);
    if s.get(i) == Some(&close) {
        return Some(i + 1);
    }
    loop {
        let mut key = (0, 0);
        if object {
            key.0 = i;
            i = string_end(s, i)?;
            key.1 = i;
            i = skip_ws(s, i);
            if s.get(i) != Some(&b':') {
                return None;
            }
            i = skip_ws(s, i + 1);
        }
        let start = i;
        i = value_end(s, i, depth + 1)?;
        if object {
            member(key, (start, i));
        }
        i = skip_ws(s, i);
        match *s.get(i)? {
            b',' => i = skip_ws(s, i + 1),
            c if c == close => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The raw texts of the `id`, `method` (inside its quotes) and `params` of the JSON-RPC request
/// `text`, as serde's derive reads them into borrowed fields: play's fast path for every client
/// request, where serde cost about 3,000 instructions a call. `None` when `text` is not one JSON
/// object, has no `id` (or a `null` one) or no `method`, and wherever this is not sure to read
/// what serde reads: a key with an escape (it could spell one of the three), a key twice (serde
/// refuses), a method that is not a plain string, nesting deeper than `MAX_DEPTH`. A `null`
/// `params` is none, as serde reads it.
pub(crate) fn request_parts(text: &str) -> Option<(&str, &str, Option<&str>)> {
    let s = text.as_bytes();
    let i = skip_ws(s, 0);
    if s.get(i) != Some(&b'{') {
        return None;
    }
    let (mut id, mut method, mut params) = (None, None, None);
    let mut unsure = false;
    let end = container_end(s, i, 0, |(k0, k1), value| {
        let slot = match &s[k0 + 1..k1 - 1] {
            b"id" => &mut id,
            b"method" => &mut method,
            b"params" => &mut params,
            key => {
                unsure |= memchr::memchr(b'\\', key).is_some();
                return;
            }
        };
        unsure |= slot.replace(value).is_some();
    })?;
    if unsure || skip_ws(s, end) != s.len() {
        return None;
    }
    let raw = |(a, b): (usize, usize)| &text[a..b];
    let id = raw(id?);
    let method = raw(method?);
    let plain = method.len() >= 2 && method.starts_with('"') && !method.contains('\\');
    if id == "null" || !plain {
        return None;
    }
    let params = params.map(raw).filter(|p| *p != "null");
    Some((id, &method[1..method.len() - 1], params))
}

/// [`value_end`] of the message object at `i`, and where the value of its one top-level `id`
/// lies, relative to `i` (`None` when it has none, several, or a key with an escape, which
/// could spell `id`: then play looks for it). Found in the walk that validates the message, so
/// play need not look for it in every answer it serves (for a big answer, a pass over all of
/// its bytes).
fn message_end(s: &[u8], i: usize) -> Option<(usize, Option<(u32, u32)>)> {
    let mut id = None;
    let mut ids = 0;
    let mut escaped = false;
    let end = container_end(s, i, 0, |(k0, k1), (v0, v1)| {
        let key = &s[k0 + 1..k1 - 1];
        if key == b"id" {
            ids += 1;
            id = Some((v0 - i, v1 - i));
        } else if memchr::memchr(b'\\', key).is_some() {
            escaped = true;
        }
    })?;
    let id = id
        .filter(|_| ids == 1 && !escaped)
        .and_then(|(a, b)| Some((u32::try_from(a).ok()?, u32::try_from(b).ok()?)));
    Some((end, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    /// Whether serde accepts `text` as one JSON value (what the scanner must agree with).
    fn serde_ok(text: &str) -> bool {
        serde_json::from_str::<&RawValue>(text).is_ok()
    }

    #[test]
    fn the_value_scanner_agrees_with_serde() {
        let cases = [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":1}"#,
            r#"{ "a" : [1, 2.5, -0, 1e5, 1E-3, true, false, null, "x\"y\\z\u00e9\n"] }"#,
            r#"{"a":"€ unicode ok"}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":1,}"#,
            r#"[1,]"#,
            r#"{"a" 1}"#,
            r#"{1:1}"#,
            r#"{"a":1"#,
            r#"{"a":"unterminated}"#,
            r#"[[[[[]]]]]"#,
            r#"{"a":[{"b":{"c":[]}}],"d":"long string with no specials at all, more than eight"}"#,
        ];
        for case in cases {
            let ours = value_end(case.as_bytes(), 0, 0) == Some(case.len());
            assert_eq!(ours, serde_ok(case), "{case}");
        }
    }

    #[test]
    fn find_special_finds_the_first_hit_in_any_lane() {
        for pos in 0..20 {
            for c in [b'"', b'\\', 0x01, 0x1f] {
                let mut s = vec![b'a'; 20];
                s[pos] = c;
                // A later hit must not hide the first one.
                if pos + 3 < 20 {
                    s[pos + 3] = b'"';
                }
                assert_eq!(find_special(&s, 0), pos, "{pos} {c}");
            }
        }
        // Bytes over 0x7f and just over 0x20 are plain.
        let s = "é€ !#[]".as_bytes();
        assert_eq!(find_special(s, 0), s.len());
    }

    /// Where the index says a message's id is, `rewrite::id_span` finds it too; where the
    /// message has no single plainly spelled id, the index says nothing.
    #[test]
    fn the_id_found_while_validating_is_the_one_id_span_finds() {
        let found = |body: &str| {
            let (end, id) = message_end(body.as_bytes(), 0).expect("valid");
            assert_eq!(end, body.len(), "{body}");
            id.map(|(a, b)| (a as usize, b as usize))
        };
        let one = [
            r#"{"jsonrpc":"2.0","id":12,"result":{"id":"inner","content":[{"id":1}]}}"#,
            r#"{ "id" : "a\"b" , "result" : [ "\"id\":2" ] }"#,
            r#"{"result":{},"id":-3}"#,
            r#"{"id":null}"#,
        ];
        for body in one {
            let span = crate::wire::rewrite::id_span(body);
            assert!(span.is_some(), "{body}");
            assert_eq!(found(body), span, "{body}");
        }
        let unknown = [
            r#"{"jsonrpc":"2.0","result":{"id":1}}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"id":1,"\u0069d":2}"#,
            r#"{"\u0069d":2}"#,
            r#"{"a\nb":1,"id":3}"#,
        ];
        for body in unknown {
            assert_eq!(found(body), None, "{body}");
        }
    }

    #[test]
    fn too_deep_is_left_to_serde() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(value_end(deep.as_bytes(), 0, 0), None);
    }
}
