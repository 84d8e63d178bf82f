//! A validating JSON scanner that builds nothing: where a value ends, checked as serde_json
//! checks a value it skips. The tape's line scanner, play's request fast path and the
//! classifier's top-level walk use it where a serde parse costs thousands of instructions a
//! message; each gives up (and serde decides) wherever it is not sure to read what serde reads.

/// Deeper values are left to serde, which has its own nesting limit.
const MAX_DEPTH: usize = 64;

/// The end (one past the closing quote) of the string literal starting at `i`; `None` if it is
/// not a valid JSON string (unterminated, a bad escape, a raw control character).
pub(crate) fn string_end(s: &[u8], i: usize) -> Option<usize> {
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
pub(crate) fn number_end(s: &[u8], mut i: usize) -> Option<usize> {
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

pub(crate) fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while matches!(s.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `i` (no leading whitespace), validated as serde would
/// validate it when skipping it; `None` when it is not valid JSON or nests deeper than
/// `MAX_DEPTH`.
pub(crate) fn value_end(s: &[u8], i: usize, depth: usize) -> Option<usize> {
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
pub(crate) fn container_end(
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

/// The text of the string literal `raw` (a value the scanner took) when it has no escape: what
/// it decodes to, borrowed. `None` for another value, or a string with an escape.
pub(crate) fn plain_str(raw: &str) -> Option<&str> {
    (raw.len() >= 2 && raw.starts_with('"') && !raw.contains('\\')).then(|| &raw[1..raw.len() - 1])
}

/// The spans of the values of `keys` in the one JSON object `s` (its top level only), as serde's
/// derive reads them into borrowed fields: `None` when `s` is not one valid object, and wherever
/// this is not sure to read what serde reads: another key with an escape (it could spell one of
/// `keys`), one of `keys` twice (serde refuses), nesting deeper than [`MAX_DEPTH`].
pub(crate) fn object_fields<const N: usize>(
    s: &[u8],
    keys: [&[u8]; N],
) -> Option<[Option<(usize, usize)>; N]> {
    let at = skip_ws(s, 0);
    if s.get(at) != Some(&b'{') {
        return None;
    }
    let mut found = [None; N];
    let mut unsure = false;
    let end = container_end(s, at, 0, |(k0, k1), value| {
        let key = &s[k0 + 1..k1 - 1];
        match keys.iter().position(|k| *k == key) {
            Some(n) => unsure |= found[n].replace(value).is_some(),
            None => unsure |= memchr::memchr(b'\\', key).is_some(),
        }
    })?;
    if unsure || skip_ws(s, end) != s.len() {
        return None;
    }
    Some(found)
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

    #[test]
    fn too_deep_is_left_to_serde() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(value_end(deep.as_bytes(), 0, 0), None);
    }
}
