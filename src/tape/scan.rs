//! A fast path for reading message lines as the recorder writes them, for the exchange index.
//!
//! A full serde parse of every line (and of every answer inside it) made loading a big tape slow.
//! This scanner walks the fields in the order the writer puts them, takes borrowed slices, and
//! skips the message body with a validating scanner that builds nothing. It accepts only lines
//! that serde would read to exactly the same fields; for anything else (other field orders,
//! escapes in names, `redacted`, `problem`, `http` facts, `null` ids, deep nesting, whitespace
//! between fields) it gives up and the caller parses the line with serde as before.

use crate::wire::json_scan::{
    container_end, number_end, object_fields, plain_str, string_end, value_end,
};
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
    /// The line ended in `\r\n` on the wire (`"crlf":true`).
    pub crlf: bool,
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
    /// Its SSE event name, when the server gave one.
    pub event: Option<Cow<'a, str>>,
    /// A hash of the request's routing headers (see `index::Exchange::headers`), 0 for none.
    pub headers: u64,
}

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
    // Flags; only their plain forms are taken. `eol` the index does not use.
    let crlf = c.lit(b",\"crlf\":true").is_some();
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
        crlf,
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

/// The raw texts of the `id`, `method` (inside its quotes) and `params` of the JSON-RPC request
/// `text`, as serde's derive reads them into borrowed fields: play's fast path for every client
/// request, where serde cost about 3,000 instructions a call. `None` when `text` is not one JSON
/// object, has no `id` (or a `null` one) or no `method`, and wherever this is not sure to read
/// what serde reads: a key with an escape (it could spell one of the three), a key twice (serde
/// refuses), a method that is not a plain string, nesting deeper than `MAX_DEPTH`. A `null`
/// `params` is none, as serde reads it.
pub(crate) fn request_parts(text: &str) -> Option<(&str, &str, Option<&str>)> {
    let [id, method, params] = object_fields(text.as_bytes(), [b"id", b"method", b"params"])?;
    let raw = |(a, b): (usize, usize)| &text[a..b];
    let id = raw(id?);
    let method = raw(method?);
    let method = plain_str(method)?;
    if id == "null" {
        return None;
    }
    let params = params.map(raw).filter(|p| *p != "null");
    Some((id, method, params))
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
}
