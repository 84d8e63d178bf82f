//! The marker grammar, `[REDACTED:<rule>:<hash>]`, and comparing values that hold markers: a
//! marker stands for any value (a whole marker for any JSON value, a marker inside a string for
//! any text there), so a recorded request with a redacted argument matches the live one that
//! carries the real secret, and two tapes redacted with different per-tape keys compare equal.

use regex::Regex;
use serde_json::Value;

/// What every marker starts with.
pub(crate) const MARKER_PREFIX: &str = "[REDACTED:";

/// Whether a string is (exactly) a redaction marker.
pub(crate) fn is_marker(s: &str) -> bool {
    s.starts_with(MARKER_PREFIX) && s.ends_with(']') && !s[MARKER_PREFIX.len()..].contains('[')
}

/// Whether a string holds a marker anywhere. A prebuilt vectorized searcher: play asks this of
/// every answer it serves, and `str::contains` builds its searcher anew on each call (748 →
/// 574 instructions on the bench's 1.1 KiB answers, callgrind).
pub(crate) fn has_marker(s: &str) -> bool {
    has_marker_in(s.as_bytes())
}

/// [`has_marker`] of bytes.
pub(crate) fn has_marker_in(b: &[u8]) -> bool {
    static PREFIX: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(MARKER_PREFIX));
    PREFIX.find(b).is_some()
}

/// A marker's rule, without its per-tape hash (`key:api_key` of `[REDACTED:key:api_key:0a1b2c3d]`).
pub(crate) fn marker_rule(s: &str) -> Option<&str> {
    if !is_marker(s) {
        return None;
    }
    let inner = &s[MARKER_PREFIX.len()..s.len() - 1];
    Some(match inner.rsplit_once(':') {
        Some((rule, hash)) if is_hash(hash) => rule,
        _ => inner,
    })
}

fn is_hash(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A marker, its rule in group 1.
pub(crate) fn marker_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\[REDACTED:([a-z0-9:_\-]+?)(?::[0-9a-f]{8})?\]").expect("valid regex")
    })
}

/// Markers reduced to their rule (`[REDACTED:openai-key]`), for matching across tapes whose
/// per-tape hash keys differ.
pub(crate) fn strip_marker_hashes(v: &mut Value) {
    match v {
        Value::String(s) if has_marker(s) => {
            let out = marker_re().replace_all(s, |c: &regex::Captures<'_>| {
                format!("{MARKER_PREFIX}{}]", &c[1])
            });
            if out != s.as_str() {
                *s = out.into_owned();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_marker_hashes),
        Value::Object(map) => {
            if map.keys().any(|k| has_marker(k)) {
                let old = std::mem::take(map);
                for (k, mut child) in old {
                    strip_marker_hashes(&mut child);
                    let mut key = Value::String(k);
                    strip_marker_hashes(&mut key);
                    map.insert(key.as_str().unwrap_or_default().to_string(), child);
                }
            } else {
                map.values_mut().for_each(strip_marker_hashes);
            }
        }
        _ => {}
    }
}

/// Does `actual` fit `recorded`, where every marker in `recorded` stands for any value? A whole
/// marker matches any JSON value; a marker inside a string matches any (non-empty) text there.
pub(crate) fn wildcard_eq(recorded: &Value, actual: &Value) -> bool {
    match (recorded, actual) {
        (Value::String(r), _) if is_marker(r) => true,
        (Value::String(r), Value::String(a)) if has_marker(r) => glob_match(r, a),
        (Value::Object(r), Value::Object(a)) => {
            r.len() == a.len()
                && r.iter().all(|(k, rv)| match a.get(k) {
                    Some(av) => wildcard_eq(rv, av),
                    // A redacted key: some key of the other side that fits it.
                    None if has_marker(k) => a
                        .iter()
                        .any(|(ak, av)| glob_match(k, ak) && wildcard_eq(rv, av)),
                    None => false,
                })
        }
        (Value::Array(r), Value::Array(a)) => {
            r.len() == a.len() && r.iter().zip(a).all(|(x, y)| wildcard_eq(x, y))
        }
        (r, a) => r == a,
    }
}

/// Whether each marker of `recorded` (which [`wildcard_eq`]s `actual`) was made from what
/// `actual` holds in its place: its hash is `hash(text)`, the text a whole value (a string's
/// text, a number's spelling) or the part of a string between the literal text around a
/// string's one marker. Markers that cannot be lined up with a value (several in one string, a
/// redacted key, a marker without a hash) are taken as agreeing.
pub(crate) fn keyed_agrees(
    recorded: &Value,
    actual: &Value,
    hash: &dyn Fn(&str) -> String,
) -> bool {
    let agrees = |marker: &str, text: &str| marker_hash(marker).is_none_or(|h| h == hash(text));
    match (recorded, actual) {
        (Value::String(r), a) if is_marker(r) => match a {
            Value::String(t) => agrees(r, t),
            Value::Number(n) => agrees(r, &n.to_string()),
            _ => true,
        },
        (Value::String(r), Value::String(a)) if has_marker(r) => {
            let mut found = marker_re().find_iter(r);
            match (found.next(), found.next()) {
                (Some(m), None) => {
                    let (head, tail) = (&r[..m.start()], &r[m.end()..]);
                    a.len() >= head.len() + tail.len()
                        && a.get(head.len()..a.len() - tail.len())
                            .is_none_or(|t| agrees(m.as_str(), t))
                }
                _ => true,
            }
        }
        (Value::Object(r), Value::Object(a)) => r
            .iter()
            .all(|(k, rv)| a.get(k).is_none_or(|av| keyed_agrees(rv, av, hash))),
        (Value::Array(r), Value::Array(a)) => {
            r.iter().zip(a).all(|(x, y)| keyed_agrees(x, y, hash))
        }
        _ => true,
    }
}

/// A marker's hash (`0a1b2c3d` of `[REDACTED:key:api_key:0a1b2c3d]`).
fn marker_hash(s: &str) -> Option<&str> {
    let inner = s.strip_prefix(MARKER_PREFIX)?.strip_suffix(']')?;
    inner
        .rsplit_once(':')
        .map(|(_, h)| h)
        .filter(|h| is_hash(h))
}

/// For two sides redacted with one marker key (`check` and `diff`): whether `a` and `b`, which
/// [`wildcard_eq_either`] holds equal, also carry the same markers. Under one key a secret's
/// hash is the same whichever rule caught it, so two strings that both hold markers must hold
/// as many, in order, each pair of the same hash (of the same rule where one has no hash); a
/// marker against a value without one still stands for it. The rule is not compared beside
/// the hash: one secret may be caught by another rule on the other side (a `check --fill`
/// value by its `fill:` literal rule).
pub(crate) fn same_keyed_markers(a: &Value, b: &Value) -> bool {
    let same = |x: &str, y: &str| match (marker_hash(x), marker_hash(y)) {
        (Some(h), Some(k)) => h == k,
        _ => marker_rule(x) == marker_rule(y),
    };
    match (a, b) {
        (Value::String(x), Value::String(y)) if has_marker(x) && has_marker(y) => {
            let re = marker_re();
            let (mut xs, mut ys) = (re.find_iter(x), re.find_iter(y));
            loop {
                match (xs.next(), ys.next()) {
                    (None, None) => return true,
                    (Some(m), Some(n)) if same(m.as_str(), n.as_str()) => {}
                    _ => return false,
                }
            }
        }
        _ => true,
    }
}

/// Either side's markers stand for what the other side holds (`diff` of two recordings, where
/// both may be redacted).
pub(crate) fn wildcard_eq_either(a: &Value, b: &Value) -> bool {
    wildcard_eq(a, b) || wildcard_eq(b, a)
}

/// `text` against `pattern`, whose markers each stand for one or more characters: the literal
/// pieces between markers must appear in order, the first at the start and the last at the end.
fn glob_match(pattern: &str, text: &str) -> bool {
    let mut pieces: Vec<&str> = Vec::new();
    let mut last = 0;
    for m in marker_re().find_iter(pattern) {
        pieces.push(&pattern[last..m.start()]);
        last = m.end();
    }
    if pieces.is_empty() {
        return pattern == text;
    }
    pieces.push(&pattern[last..]);
    let (first, rest) = pieces.split_first().expect("two pieces at least");
    let (tail, middle) = rest.split_last().expect("two pieces at least");
    let Some(mut at) = text.strip_prefix(first).map(|_| first.len()) else {
        return false;
    };
    for piece in middle {
        // Each marker stands for at least one character.
        let from = next_char(text, at);
        match text.get(from..).and_then(|t| t.find(piece)) {
            Some(i) => at = from + i + piece.len(),
            None => return false,
        }
    }
    let from = next_char(text, at);
    text.len() >= from + tail.len() && text.ends_with(tail) && text.len() - tail.len() >= from
}

fn next_char(s: &str, at: usize) -> usize {
    s.get(at..)
        .and_then(|t| t.chars().next())
        .map_or(s.len() + 1, |c| at + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_keyed_marker_agrees_only_with_the_value_it_was_made_from() {
        let hash = |s: &str| match s {
            "right-password" => "0000aaaa".to_string(),
            "123456" => "0000bbbb".to_string(),
            "abc.def" => "0000cccc".to_string(),
            _ => "ffffffff".to_string(),
        };
        let rec = json!({"user": "ann", "password": "[REDACTED:key:password:0000aaaa]",
            "pin": "[REDACTED:key:pin:0000bbbb]", "auth": "Bearer [REDACTED:bearer:0000cccc]",
            "two": "[REDACTED:a:11111111]-[REDACTED:b:22222222]"});
        let live = json!({"user": "ann", "password": "right-password", "pin": 123456,
            "auth": "Bearer abc.def", "two": "x-y"});
        assert!(wildcard_eq(&rec, &live));
        assert!(keyed_agrees(&rec, &live, &hash));
        for (k, v) in [
            ("password", json!("wrong-password")),
            ("pin", json!(654321)),
            ("auth", json!("Bearer abc.xyz")),
        ] {
            let mut other = live.clone();
            other[k] = v;
            assert!(wildcard_eq(&rec, &other), "{k}");
            assert!(!keyed_agrees(&rec, &other, &hash), "{k}");
        }
        // Without a hash, nothing to compare.
        assert!(keyed_agrees(
            &json!("[REDACTED:key:password]"),
            &json!("x"),
            &hash
        ));
    }

    #[test]
    fn under_one_key_markers_of_different_secrets_differ() {
        let m = |hash: &str| json!(format!("[REDACTED:key:token:{hash}]"));
        assert!(same_keyed_markers(&m("0000aaaa"), &m("0000aaaa")));
        assert!(!same_keyed_markers(&m("0000aaaa"), &m("0000bbbb")));
        assert!(!same_keyed_markers(
            &json!("Bearer [REDACTED:bearer:0000aaaa]"),
            &json!("Bearer [REDACTED:bearer:0000bbbb]")
        ));
        // Another rule, the same hash: the same secret (caught by another rule there, such as
        // a `check --fill` value's `fill:` rule).
        assert!(same_keyed_markers(
            &m("0000aaaa"),
            &json!("[REDACTED:fill:token:0000aaaa]")
        ));
        // As many markers, pair by pair.
        assert!(!same_keyed_markers(
            &json!("[REDACTED:a:0000aaaa] [REDACTED:b:0000bbbb]"),
            &json!("[REDACTED:a:0000aaaa] x")
        ));
        // Without hashes, by rule.
        assert!(same_keyed_markers(
            &json!("[REDACTED:key:token]"),
            &json!("[REDACTED:key:token]")
        ));
        assert!(!same_keyed_markers(
            &json!("[REDACTED:key:token]"),
            &json!("[REDACTED:key:pin]")
        ));
        // A value without a marker: the marker still stands for it.
        assert!(same_keyed_markers(&m("0000aaaa"), &json!("plain")));
        assert!(same_keyed_markers(&json!(7), &m("0000aaaa")));
    }

    #[test]
    fn markers_are_wildcards() {
        let rec = json!({"name": "deploy", "arguments": {"apiKey": "[REDACTED:key:apikey:0a1b2c3d]", "auth": "Bearer [REDACTED:bearer:11223344]"}});
        let live = json!({"name": "deploy", "arguments": {"apiKey": "real-key", "auth": "Bearer abc.def"}});
        assert!(wildcard_eq(&rec, &live));
        let other =
            json!({"name": "deploy", "arguments": {"apiKey": "real-key", "auth": "Basic abc"}});
        assert!(!wildcard_eq(&rec, &other));
        let mut v = rec.clone();
        strip_marker_hashes(&mut v);
        assert_eq!(v["arguments"]["apiKey"], json!("[REDACTED:key:apikey]"));
        assert_eq!(v["arguments"]["auth"], json!("Bearer [REDACTED:bearer]"));
        assert_eq!(
            marker_rule("[REDACTED:key:api_key:0a1b2c3d]"),
            Some("key:api_key")
        );
        assert_eq!(marker_rule("[REDACTED:key:api_key]"), Some("key:api_key"));
    }

    #[test]
    fn glob_pieces_match_in_order_and_each_marker_takes_something() {
        let m = "[REDACTED:x:01234567]";
        assert!(glob_match(&format!("a{m}b{m}c"), "aXbYc"));
        assert!(glob_match(&format!("a{m}b{m}c"), "aXXbcbYYc"));
        assert!(
            !glob_match(&format!("a{m}b{m}c"), "abYc"),
            "an empty first wildcard"
        );
        assert!(!glob_match(&format!("a{m}c"), "ac"));
        assert!(!glob_match(&format!("a{m}c"), "xac"));
        assert!(glob_match(m, "é"));
        assert!(glob_match(&format!("p {m}"), "p é"));
        assert!(!glob_match(&format!("p {m}"), "p "));
        assert!(glob_match(&format!("{m}/{m}"), "a/b/c"));
        assert!(!glob_match(&format!("{m}/{m}"), "/b"));
    }

    #[test]
    fn a_redacted_key_fits_the_real_one() {
        let rec = json!({"[REDACTED:openai-key:01234567]": 1, "b": 2});
        assert!(wildcard_eq(&rec, &json!({"sk-abc": 1, "b": 2})));
        assert!(!wildcard_eq(&rec, &json!({"sk-abc": 2, "b": 2})));
        let mut v = rec.clone();
        strip_marker_hashes(&mut v);
        assert_eq!(v, json!({"[REDACTED:openai-key]": 1, "b": 2}));
    }
}
