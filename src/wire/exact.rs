//! JSON that a `serde_json::Value` (built without `arbitrary_precision`) cannot hold exactly,
//! made exact for matching and comparing: integers beyond 64 bits, which serde_json reads as
//! the nearest `f64` (so 2^64 and 2^64+1 would be one value), and lone UTF-16 surrogates
//! (`"\ud800"`: valid JSON text, not valid Unicode), which serde_json refuses.
//!
//! Such text is rare: a cheap byte scan ([`needs_exact`]) finds where it may be, and only then
//! is the text rewritten before it is parsed ([`exact_text`]): each such integer becomes the
//! string `"\u0000int:DIGITS"`, each lone surrogate the characters NUL, `\`, `u` and its four
//! hex digits (lower case) in place. A NUL starts no string a client sends in earnest, so these
//! stand-ins compare equal exactly when the originals are equal and differ from every ordinary
//! value; numbers a `Value` holds exactly (64-bit integers, and every decimal, compared as its
//! `f64`) are untouched.

/// Whether `s` may hold an integer beyond 64 bits (a run of 19 or more digits) or a surrogate
/// escape (`\uD800` to `\uDFFF`, paired or not). One pass over the bytes, no allocation.
pub(crate) fn needs_exact(s: &[u8]) -> bool {
    let mut run = 0u32;
    for (i, &c) in s.iter().enumerate() {
        if c.is_ascii_digit() {
            run += 1;
            if run >= 19 {
                return true;
            }
            continue;
        }
        run = 0;
        if c == b'\\'
            && s.get(i + 1) == Some(&b'u')
            && matches!(s.get(i + 2), Some(b'd' | b'D'))
            && matches!(s.get(i + 3), Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
        {
            return true;
        }
    }
    false
}

/// `s` rewritten so that serde_json reads it exactly (see the module's note), or `None` when it
/// needs no rewrite (or is not valid JSON text: then serde_json decides, as before).
pub(crate) fn exact_text(s: &[u8]) -> Option<String> {
    if !needs_exact(s) {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(s.len() + 16);
    let mut changed = false;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'"' => {
                let end = super::json_scan::string_end(s, i)?;
                changed |= string_into(&s[i..end], &mut out);
                i = end;
            }
            b'-' | b'0'..=b'9' => {
                let end = super::json_scan::number_end(s, i)?;
                let token = &s[i..end];
                let integer = !token.iter().any(|c| matches!(c, b'.' | b'e' | b'E'));
                let text = std::str::from_utf8(token).ok()?;
                if integer && text.parse::<i64>().is_err() && text.parse::<u64>().is_err() {
                    out.extend_from_slice(b"\"\\u0000int:");
                    out.extend_from_slice(token);
                    out.push(b'"');
                    changed = true;
                } else {
                    out.extend_from_slice(token);
                }
                i = end;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    if !changed {
        return None;
    }
    String::from_utf8(out).ok()
}

/// Copies the string literal `lit` (quotes included, already validated) into `out`, each lone
/// surrogate escape written as `\u0000\\uXXXX`; whether there was one.
fn string_into(lit: &[u8], out: &mut Vec<u8>) -> bool {
    let hex = |at: usize| -> Option<u16> {
        let h = std::str::from_utf8(lit.get(at..at + 4)?).ok()?;
        u16::from_str_radix(h, 16).ok()
    };
    // A `\uXXXX` escape at `at`: its code unit.
    let escape = |at: usize| -> Option<u16> {
        (lit.get(at) == Some(&b'\\') && lit.get(at + 1) == Some(&b'u'))
            .then(|| hex(at + 2))
            .flatten()
    };
    let mut changed = false;
    let mut i = 0;
    while i < lit.len() {
        if lit[i] != b'\\' {
            out.push(lit[i]);
            i += 1;
            continue;
        }
        let Some(unit) = escape(i) else {
            // Any other escape: two bytes.
            out.extend_from_slice(&lit[i..(i + 2).min(lit.len())]);
            i += 2;
            continue;
        };
        let high = (0xD800..0xDC00).contains(&unit);
        let paired = high && escape(i + 6).is_some_and(|u| (0xDC00..0xE000).contains(&u));
        if paired {
            out.extend_from_slice(&lit[i..i + 12]);
            i += 12;
        } else if (0xD800..0xE000).contains(&unit) {
            out.extend_from_slice(format!("\\u0000\\\\u{unit:04x}").as_bytes());
            changed = true;
            i += 6;
        } else {
            out.extend_from_slice(&lit[i..i + 6]);
            i += 6;
        }
    }
    changed
}

/// `serde_json::from_slice`, with the rare text a `Value` cannot hold made exact first.
pub(crate) fn from_slice<T: serde::de::DeserializeOwned>(s: &[u8]) -> serde_json::Result<T> {
    match exact_text(s) {
        Some(text) => serde_json::from_str(&text),
        None => serde_json::from_slice(s),
    }
}

/// [`from_slice`] of a string.
pub(crate) fn from_str<T: serde::de::DeserializeOwned>(s: &str) -> serde_json::Result<T> {
    from_slice(s.as_bytes())
}

/// `v` as one line of JSON for people (messages, reports): its text as `serde_json` writes it,
/// with each stand-in of [`exact_text`] written back as the tape has it: an integer beyond 64
/// bits as its digits, not as a string starting with NUL (`"\u0000int:123…"` would tell of a
/// string where the tape has a number); a lone surrogate as its escape (`\ud800`).
pub(crate) fn display(v: &serde_json::Value) -> String {
    let mut out = String::new();
    display_into(v, &mut out);
    out
}

fn display_into(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::String(s) => display_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                display_into(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (k, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                display_str(k, out);
                out.push(':');
                display_into(item, out);
            }
            out.push('}');
        }
        other => out.push_str(&serde_json::to_string(other).expect("a Value serializes")),
    }
}

/// A string (or key) as JSON text, its stand-ins written back (see [`display`]).
fn display_str(s: &str, out: &mut String) {
    if let Some(digits) = s.strip_prefix(INT_STAND_IN) {
        let unsigned = digits.strip_prefix('-').unwrap_or(digits);
        if !unsigned.is_empty() && unsigned.bytes().all(|c| c.is_ascii_digit()) {
            out.push_str(digits);
            return;
        }
    }
    let text = serde_json::to_string(s).expect("a string serializes");
    if !s.contains('\0') {
        out.push_str(&text);
        return;
    }
    // A lone surrogate's stand-in (NUL, a backslash, `u`, four hex digits) as serde_json
    // writes it; escapes are read left to right, so an escaped backslash is never taken for one.
    const STAND_IN: &str = "\\u0000\\\\u";
    let mut rest = text.as_str();
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let hex = rest.get(STAND_IN.len()..STAND_IN.len() + 4);
        if rest.starts_with(STAND_IN)
            && hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
        {
            out.push_str("\\u");
            out.push_str(hex.unwrap_or_default());
            rest = &rest[STAND_IN.len() + 4..];
        } else {
            // `\uXXXX`: six characters; any other escape: two.
            let n = if rest.as_bytes().get(1) == Some(&b'u') {
                6
            } else {
                2
            };
            let n = n.min(rest.len());
            out.push_str(&rest[..n]);
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
}

/// What a big integer's stand-in starts with: NUL, then `int:`.
const INT_STAND_IN: &str = "\u{0}int:";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn v(s: &str) -> Value {
        from_str(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn integers_beyond_64_bits_are_kept_exactly() {
        assert_ne!(v("18446744073709551617"), v("18446744073709551616"));
        assert_eq!(v("18446744073709551617"), v("18446744073709551617"));
        assert_ne!(
            v("123456789012345678901234567890"),
            v("123456789012345678901234567891")
        );
        assert_ne!(v("-9223372036854775809"), v("-9223372036854775810"));
        assert_eq!(
            v(r#"{"n":18446744073709551616}"#)["n"],
            json!("\u{0}int:18446744073709551616")
        );
        // What a Value holds exactly is untouched: 64-bit integers, decimals by value.
        assert_eq!(v("18446744073709551615"), json!(u64::MAX));
        assert_eq!(v("-9223372036854775808"), json!(i64::MIN));
        assert_eq!(v("2.50"), v("2.5"));
        assert_ne!(v("1"), v("1.0"));
        assert_eq!(v("18446744073709551617.0"), json!(18446744073709551617.0));
        // Digits inside a string are the string's.
        assert_eq!(
            v(r#""18446744073709551617""#),
            json!("18446744073709551617")
        );
        assert_eq!(exact_text(br#"{"a":[1,2.5e3,"x"]}"#), None);
    }

    #[test]
    fn lone_surrogates_are_kept_and_told_apart() {
        assert_eq!(v(r#""\ud800""#), v(r#""\uD800""#));
        assert_ne!(v(r#""\ud800""#), v(r#""\udc00""#));
        assert_eq!(v(r#"{"q":"a\ud800b"}"#)["q"], json!("a\u{0}\\ud800b"));
        assert_eq!(v(r#""\udc00\ud800""#), json!("\u{0}\\udc00\u{0}\\ud800"));
        // A pair is a character, as serde_json reads it.
        assert_eq!(v(r#""\ud83d\ude00""#), json!("😀"));
        assert_eq!(exact_text(br#""\ud83d\ude00""#), None);
        // An escaped backslash before `ud800` is text.
        assert_eq!(v(r#""\\ud800""#), json!("\\ud800"));
        // Keys too.
        assert_ne!(v(r#"{"\ud800":1}"#), v(r#"{"\udbff":1}"#));
    }

    #[test]
    fn stand_ins_are_shown_as_the_tape_has_them() {
        let shown = |s: &str| display(&v(s));
        assert_eq!(
            shown(r#"{"big":123456789012345678901234567890,"neg":-18446744073709551617}"#),
            r#"{"big":123456789012345678901234567890,"neg":-18446744073709551617}"#
        );
        assert_eq!(
            shown(r#"["a\ud800b",{"\udbff":1}]"#),
            r#"["a\ud800b",{"\udbff":1}]"#
        );
        // Ordinary text, escapes and an escaped backslash before `u0000` are as serde writes them.
        for s in [
            r#"{"a":"x\"y\\z\n","n":2.5,"t":[true,null]}"#,
            r#""\\u0000\\\\ud800""#,
            r#""\u0000 \\u0000\\ud800""#,
            r#""\u0000int:1x""#,
        ] {
            assert_eq!(shown(s), serde_json::to_string(&v(s)).unwrap(), "{s}");
        }
    }

    #[test]
    fn invalid_text_is_left_to_serde() {
        for s in [r#"{"a":"\ud800"#, "[18446744073709551617", r#""\uZZZZ""#] {
            assert!(from_str::<Value>(s).is_err(), "{s}");
        }
    }
}
