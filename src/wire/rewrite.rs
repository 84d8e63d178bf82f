//! Order-preserving edits of one top-level field of a JSON object, leaving every other byte of
//! the other fields as recorded. Used to give a recorded response the client's id and a recorded
//! progress notification the client's progress token.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// The top-level members of an object, in order, each value kept as raw JSON text.
pub(crate) struct RawObject<'a>(pub(crate) Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) =
                    map.next_entry::<std::borrow::Cow<'de, str>, &'de RawValue>()?
                {
                    out.push((k, v));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl RawObject<'_> {
    /// The raw value of member `key` (the first, if repeated).
    pub(crate) fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Serializes back, replacing (or appending) `key` with `value` (raw JSON text).
    pub(crate) fn to_string_with(&self, key: &str, value: &str) -> String {
        let mut out = String::with_capacity(
            self.0
                .iter()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>()
                + value.len()
                + 16,
        );
        out.push('{');
        let mut replaced = false;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(k.as_ref()).expect("string serializes"));
            out.push(':');
            if k == key {
                out.push_str(value);
                replaced = true;
            } else {
                out.push_str(v.get());
            }
        }
        if !replaced {
            if !self.0.is_empty() {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).expect("string serializes"));
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

/// `message` with its top-level `id` replaced by `id` (raw JSON text): every other byte as it
/// was, whatever the spacing or escapes; appended when there is none.
pub(crate) fn with_id(message: &str, id: &str) -> Result<String, serde_json::Error> {
    if let Some(out) = splice_id(message, id) {
        return Ok(out);
    }
    let obj: RawObject<'_> = serde_json::from_str(message)?;
    Ok(obj.to_string_with("id", id))
}

/// A `notifications/progress` message with `params.progressToken` replaced by `token`, every
/// other byte kept.
pub(crate) fn with_progress_token(message: &str, token: &str) -> Result<String, serde_json::Error> {
    let spliced = member_span(message, "params").and_then(|(ps, pe)| {
        let (ts, te) = member_span(&message[ps..pe], "progressToken")?;
        Some(splice(message, ps + ts, ps + te, token))
    });
    if let Some(out) = spliced {
        return Ok(out);
    }
    let obj: RawObject<'_> = serde_json::from_str(message)?;
    let Some(params) = obj.get("params") else {
        return Ok(message.to_string());
    };
    let params: RawObject<'_> = serde_json::from_str(params.get())?;
    let new_params = params.to_string_with("progressToken", token);
    Ok(obj.to_string_with("params", &new_params))
}

fn splice(message: &str, start: usize, end: usize, with: &str) -> String {
    // One more byte: the line terminator is appended to this buffer.
    let mut out = String::with_capacity(message.len() - (end - start) + with.len() + 1);
    out.push_str(&message[..start]);
    out.push_str(with);
    out.push_str(&message[end..]);
    out
}

/// `message` with its top-level `id` value replaced by `id`, without parsing the values.
/// `None` when `id_span` finds no single id (then `with_id` appends one).
pub(crate) fn splice_id(message: &str, id: &str) -> Option<String> {
    let (start, end) = id_span(message)?;
    Some(splice(message, start, end, id))
}

/// Where the value of `message`'s top-level `id` lies: `None` when it is not an object with
/// exactly one `id`. Only structure is followed: the message is a tape body, validated when
/// the tape was loaded.
pub(crate) fn id_span(message: &str) -> Option<(usize, usize)> {
    member_span(message, "id")
}

/// [`id_span`] of a tape body (valid JSON, as the index found it): once the first top-level
/// `id` is found, the rest is walked only when it could hold another. A member named `id` is
/// spelled `"id"` or with a `\u` escape (`i` and `d` have no other), so a rest with neither
/// bytes holds none: two vectorized scans of it, not a walk of its structure (which, for valid
/// JSON, would find what `id_span` finds). Play's answers: 1,786 → about 700 instructions on
/// the bench's 1.1 KiB answers.
pub(crate) fn tape_id_span(body: &str) -> Option<(usize, usize)> {
    member_span_until(body, "id", |rest| {
        static NAME: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"id\""));
        NAME.find(rest).is_none()
            && !memchr::memchr_iter(b'\\', rest).any(|j| rest.get(j + 1) == Some(&b'u'))
    })
}

/// Where the value of the top-level member `key` of the object `text` lies (spaces around
/// tokens and escaped keys allowed); `None` unless there is exactly one.
pub(crate) fn member_span(text: &str, key: &str) -> Option<(usize, usize)> {
    member_span_until(text, key, |_| false)
}

/// [`member_span`], stopping at the first `key` when `lacks_key` says the bytes after its value
/// cannot hold another.
fn member_span_until(
    text: &str,
    key: &str,
    lacks_key: impl Fn(&[u8]) -> bool,
) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(i + 1);
    if b.get(i) == Some(&b'}') {
        return None;
    }
    let mut span = None;
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = skip_string(b, i)?;
        let raw = &text[i..end];
        let same = if raw.contains('\\') {
            serde_json::from_str::<String>(raw).ok()? == key
        } else {
            &raw[1..raw.len() - 1] == key
        };
        i = ws(end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        i = skip_value(b, start)?;
        if same {
            if span.is_some() {
                return None;
            }
            span = Some((start, i));
            if lacks_key(&b[i..]) {
                return span;
            }
        }
        i = ws(i);
        match b.get(i) {
            Some(b',') => i = ws(i + 1),
            Some(b'}') if ws(i + 1) == b.len() => break,
            _ => return None,
        }
    }
    span
}

/// The end of the JSON value at `i` (which must start right there).
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            // A number, `true`, `false` or `null`: it ends where its characters do.
            let len = b[i..]
                .iter()
                .position(|&c| !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-')))?;
            (len > 0).then_some(i + len)
        }
    }
}

/// The end of the JSON string at `i` (its opening quote).
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        j += memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[j] == b'"' {
            return Some(j + 1);
        }
        j += 2; // an escape: the next byte is taken with it
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On valid JSON, the tape's quick `id` span is the full walk's, whatever follows the id.
    #[test]
    fn a_tape_bodys_id_span_is_the_walks_and_another_id_is_still_seen() {
        for body in [
            r#"{"jsonrpc":"2.0","id":7,"result":{"text":"plain"}}"#,
            r#"{"id":"a\"b","result":{}}"#,
            r#"{"result":{"id":1},"id":2}"#,
            r#"{"id":1,"result":{"id":2,"x":[{"id":3}]}}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"id":1,"result":{},"id":2}"#,
            r#"{"id":1,"result":{}, "id" :2}"#,
            r#"{"id":1,"\u0069d":2}"#,
            r#"{"id":1,"i\u0064":2}"#,
            r#"{"\u0069d":1,"id":2}"#,
            r#"{"id":1,"t":"say \"id\" and \\u0069d"}"#,
            r#"{"id":1,"t":"\u00e9t\u00e9"}"#,
            r#"{"id":1,"t":"\n\\"}"#,
            r#"{ "id" : 1 , "t" : "x" }"#,
            r#"{"result":{}}"#,
            r#"[{"id":1}]"#,
        ] {
            assert_eq!(tape_id_span(body), id_span(body), "{body}");
        }
        assert_eq!(tape_id_span(r#"{"id":1,"id":2}"#), None);
        assert_eq!(tape_id_span(r#"{"id":1,"\u0069d":2}"#), None);
        assert_eq!(tape_id_span(r#"{"id":12,"t":"x"}"#), Some((6, 8)));
    }

    #[test]
    fn the_id_is_spliced_whatever_the_spacing_and_the_rest_kept() {
        for (m, want) in [
            (
                r#"{"jsonrpc":"2.0","id":3,"result":{"z": 1,  "a":[1, 2]}}"#,
                r#"{"jsonrpc":"2.0","id":42,"result":{"z": 1,  "a":[1, 2]}}"#,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 3, "result": {}}"#,
                r#"{"jsonrpc": "2.0", "id": 42, "result": {}}"#,
            ),
            (
                r#"{ "i\u0064" : "a\"b" ,"result":{"id":7}} "#,
                r#"{ "i\u0064" : 42 ,"result":{"id":7}} "#,
            ),
            (
                r#"{"result":{"id":7,"nested":{"id":8}},"jsonrpc":"2.0","id":-1.5e3}"#,
                r#"{"result":{"id":7,"nested":{"id":8}},"jsonrpc":"2.0","id":42}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"no"},"id":null}"#,
                r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"no"},"id":42}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"text":"é ü \u00e9 ✓"}}"#,
                r#"{"jsonrpc":"2.0","id":42,"result":{"text":"é ü \u00e9 ✓"}}"#,
            ),
        ] {
            assert_eq!(with_id(m, "42").unwrap(), want, "{m}");
        }
        // No single id: appended (no id), or left to the general path (two).
        assert_eq!(
            with_id(r#"{"result":{}}"#, "9").unwrap(),
            r#"{"result":{},"id":9}"#
        );
        for m in [
            r#"{"id":1,"id":2}"#,
            r#"{"result":{}}"#,
            r#"{}"#,
            r#"{"id":3,"result":{"a":1}"#,
            r#"{"id":"unterminated}"#,
        ] {
            assert_eq!(id_span(m), None, "{m}");
        }
    }

    #[test]
    fn id_is_replaced_and_the_rest_kept_byte_for_byte() {
        let m = r#"{"jsonrpc":"2.0","id":3,"result":{"z": 1,  "a":[1, 2]}}"#;
        assert_eq!(
            with_id(m, r#""abc""#).unwrap(),
            r#"{"jsonrpc":"2.0","id":"abc","result":{"z": 1,  "a":[1, 2]}}"#
        );
    }

    #[test]
    fn progress_token_is_replaced() {
        let m =
            r#"{"method":"notifications/progress","params":{"progressToken":"r1","progress":1}}"#;
        assert_eq!(
            with_progress_token(m, "42").unwrap(),
            r#"{"method":"notifications/progress","params":{"progressToken":42,"progress":1}}"#
        );
        let spaced = r#"{"method": "notifications/progress", "params": {"progress": 2.50, "progressToken": "r1"}}"#;
        assert_eq!(
            with_progress_token(spaced, r#""t""#).unwrap(),
            r#"{"method": "notifications/progress", "params": {"progress": 2.50, "progressToken": "t"}}"#
        );
    }
}
