//! Canonical JSON for matching, and the structural difference between two values.
//!
//! serde_json's default map is ordered by key, so parsing and re-serializing gives a canonical
//! text: key order and whitespace stop mattering, values (including `1` vs `1.0`) still do.

use serde_json::Value;
use std::fmt::Write as _;

/// `_meta` keys that say who is asking rather than what is asked: they take no part in matching.
/// `progressToken` is chosen by each client run; the `io.modelcontextprotocol/*` keys are the
/// 2026-07-28 era's per-request handshake. Agents tag each tool call with their own session
/// and the model's call ids, new on every run (measured: Claude Code 2.1, Codex CLI 0.171).
pub(crate) const VOLATILE_META_KEYS: &[&str] = &[
    "progressToken",
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    // Claude Code: the model's tool_use id.
    "claudecode/toolUseId",
    // Codex CLI: its session, thread, window and turn, and the model's call and item ids.
    "sessionId",
    "threadId",
    "windowId",
    "x-codex-turn-metadata",
    "callId",
    "itemId",
];

/// Removes the volatile `_meta` keys (and `_meta` itself once empty) from request params, and
/// the 2026-07-28 era's `requestState`: opaque server state that a server may encrypt with a
/// per-process key, so a retry of the same request carries a different one on every run.
pub(crate) fn strip_volatile(params: &mut Value) {
    if let Value::Object(map) = params {
        map.remove("requestState");
        let mut now_empty = false;
        if let Some(Value::Object(meta)) = map.get_mut("_meta") {
            for key in VOLATILE_META_KEYS {
                meta.remove(*key);
            }
            now_empty = meta.is_empty();
        }
        if now_empty {
            map.remove("_meta");
        }
    }
}

/// The params as they take part in matching: parsed, volatile keys removed. Absent params and
/// an empty object are the same request.
pub fn match_params(params: Option<&Value>) -> Value {
    let mut v = params.cloned().unwrap_or(Value::Null);
    strip_volatile(&mut v);
    // Redacted values match by rule, not by the per-tape hash.
    super::marker::strip_marker_hashes(&mut v);
    match v {
        Value::Object(ref m) if m.is_empty() => Value::Null,
        v => v,
    }
}

/// Canonical text of a value (sorted keys, no whitespace).
pub fn canonical(v: &Value) -> String {
    serde_json::to_string(v).expect("a Value always serializes")
}

/// The two halves of a request's match key as `params::match_key` hashes them (seeds 1
/// and 2 over seed, method, canonical match params), without cloning the params: the canonical
/// text is written straight from the borrowed value into `scratch`, the volatile keys skipped
/// on the way. `None` when a string may hold a redaction marker (its hash is stripped first,
/// which only the general path does): then the caller computes the key the general way.
/// `initialize` is not special-cased here: callers pass `None` params for it.
pub(crate) fn match_key_halves(
    method: &str,
    params: Option<&Value>,
    scratch: &mut Vec<u8>,
) -> Option<super::params::MatchKey> {
    scratch.clear();
    write_match_params(params, scratch);
    // Serialized JSON escapes only quotes, backslashes and control characters, none of which
    // is in the marker prefix: a marker in any key or string shows in the text as is. (A `[`
    // scan: building a substring searcher per request costs more than the whole walk.)
    let marker = super::marker::MARKER_PREFIX.as_bytes();
    if memchr::memchr_iter(b'[', scratch).any(|i| scratch[i..].starts_with(marker)) {
        return None;
    }
    let text = std::str::from_utf8(scratch).ok()?;
    Some(hash_key(method, text))
}

/// The 128-bit match key of a method and its canonical match params (the one function both the
/// index and play's fast path use, so their keys are equal by construction). XXH3's 128-bit
/// hash of the params, seeded by the method's 64-bit one: one pass over the bytes, where two
/// 64-bit SipHash passes (std's `DefaultHasher`) cost play about 1,100 instructions a call and
/// the index four passes a request. Not a cryptographic hash, nor was SipHash with its fixed
/// keys: keys pair a tape's requests, they guard nothing.
pub(crate) fn hash_key(method: &str, canonical_params: &str) -> super::params::MatchKey {
    use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64};
    let h = xxh3_128_with_seed(canonical_params.as_bytes(), xxh3_64(method.as_bytes()));
    super::params::MatchKey::from_halves((h >> 64) as u64, h as u64)
}

/// `canonical(&match_params(params))` written into `out`, without the clone: the top level and
/// `_meta` are walked here, everything under them serialized as is.
fn write_match_params(params: Option<&Value>, out: &mut Vec<u8>) {
    let map = match params {
        None | Some(Value::Null) => return out.extend_from_slice(b"null"),
        Some(Value::Object(map)) => map,
        Some(v) => return write_value(v, out),
    };
    out.push(b'{');
    let mut any = false;
    for (k, v) in map {
        if k == "requestState" {
            continue;
        }
        if k == "_meta" {
            if let Value::Object(meta) = v {
                let kept = || {
                    meta.iter()
                        .filter(|(k, _)| !VOLATILE_META_KEYS.contains(&k.as_str()))
                };
                if kept().next().is_none() {
                    continue;
                }
                member(any, k, out);
                any = true;
                out.push(b'{');
                for (i, (mk, mv)) in kept().enumerate() {
                    member(i > 0, mk, out);
                    write_value(mv, out);
                }
                out.push(b'}');
                continue;
            }
        }
        member(any, k, out);
        any = true;
        write_value(v, out);
    }
    if any {
        out.push(b'}');
    } else {
        // Nothing left (or `{}` from the start): the same request as no params.
        out.clear();
        out.extend_from_slice(b"null");
    }
}

/// `,"key":` (the comma only after a first member).
fn member(comma: bool, key: &str, out: &mut Vec<u8>) {
    if comma {
        out.push(b',');
    }
    write_value_str(key, out);
    out.push(b':');
}

fn write_value_str(s: &str, out: &mut Vec<u8>) {
    serde_json::to_writer(&mut *out, s).expect("a string always serializes");
}

fn write_value(v: &Value, out: &mut Vec<u8>) {
    serde_json::to_writer(&mut *out, v).expect("a Value always serializes");
}

/// One place where two JSON values differ.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    /// JSONPath of the place, e.g. `$.arguments.city`.
    pub path: String,
    /// The value on the left (`None`: absent there).
    pub left: Option<Value>,
    /// The value on the right (`None`: absent there).
    pub right: Option<Value>,
}

/// Every leaf-most difference between `left` and `right`, in key order.
pub(crate) fn differences(left: &Value, right: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    diff_into("$".to_string(), Some(left), Some(right), &mut out);
    out
}

fn diff_into(path: String, left: Option<&Value>, right: Option<&Value>, out: &mut Vec<Difference>) {
    match (left, right) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                diff_into(child_path(&path, k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                diff_into(format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference {
            path,
            left: a.cloned(),
            right: b.cloned(),
        }),
    }
}

/// [`differences`] of `left` and `right` but for those `skip` (given both values) passes
/// over, each value given as it stands at the same place of `shown`: the two with secrets
/// redacted for display. A miss explanation compares what was asked as it was asked (equal
/// secrets are no difference) and shows neither side's secrets. A place the shown values do
/// not have (a key redacted, a value redacted whole) is shown as `[REDACTED]`, its key too.
pub(crate) fn differences_shown(
    left: &Value,
    right: &Value,
    shown: [&Value; 2],
    skip: &impl Fn(&Value, &Value) -> bool,
) -> Vec<Difference> {
    let mut out = Vec::new();
    diff_shown_into(
        "$".to_string(),
        [Some(left), Some(right)],
        shown.map(Some),
        skip,
        &mut out,
    );
    out
}

const HIDDEN: &str = "[REDACTED]";

fn diff_shown_into(
    path: String,
    raw: [Option<&Value>; 2],
    shown: [Option<&Value>; 2],
    skip: &impl Fn(&Value, &Value) -> bool,
    out: &mut Vec<Difference>,
) {
    match raw {
        [Some(Value::Object(a)), Some(Value::Object(b))] => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let child = shown.map(|v| v.and_then(|v| v.get(k.as_str())));
                let key = if child.iter().any(Option::is_some) {
                    k.as_str()
                } else {
                    HIDDEN
                };
                diff_shown_into(
                    child_path(&path, key),
                    [a.get(k), b.get(k)],
                    child,
                    skip,
                    out,
                );
            }
        }
        [Some(Value::Array(a)), Some(Value::Array(b))] => {
            for i in 0..a.len().max(b.len()) {
                let child = shown.map(|v| v.and_then(|v| v.get(i)));
                diff_shown_into(
                    format!("{path}[{i}]"),
                    [a.get(i), b.get(i)],
                    child,
                    skip,
                    out,
                );
            }
        }
        [a, b] if a == b => {}
        [Some(a), Some(b)] if skip(a, b) => {}
        [a, b] => {
            let show = |raw: Option<&Value>, shown: Option<&Value>| {
                raw.map(|_| shown.cloned().unwrap_or_else(|| Value::from(HIDDEN)))
            };
            out.push(Difference {
                path,
                left: show(a, shown[0]),
                right: show(b, shown[1]),
            });
        }
    }
}

/// How many of the differences [`differences`] finds between `left` and `right` are `wild`
/// (given both values) and how many are not, as `(real, wild)`, with none of them built: what a
/// miss explanation ranks every recorded call by before it spells out the nearest.
pub(crate) fn count_differences(
    left: &Value,
    right: &Value,
    wild: &impl Fn(&Value, &Value) -> bool,
) -> (usize, usize) {
    let mut n = (0, 0);
    count_into(Some(left), Some(right), wild, &mut n);
    n
}

fn count_into(
    left: Option<&Value>,
    right: Option<&Value>,
    wild: &impl Fn(&Value, &Value) -> bool,
    n: &mut (usize, usize),
) {
    match (left, right) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            for (k, v) in a {
                count_into(Some(v), b.get(k), wild, n);
            }
            for (k, v) in b {
                if !a.contains_key(k) {
                    count_into(None, Some(v), wild, n);
                }
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                count_into(a.get(i), b.get(i), wild, n);
            }
        }
        (a, b) if a == b => {}
        (Some(a), Some(b)) if wild(a, b) => n.1 += 1,
        _ => n.0 += 1,
    }
}

/// The JSONPath of member `key` of `parent`: `.key` for a plain name, `['…']` otherwise.
pub(crate) fn child_path(parent: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    let mut p = parent.to_string();
    if simple {
        let _ = write!(p, ".{key}");
    } else {
        let _ = write!(
            p,
            "[{}]",
            serde_json::to_string(key)
                .expect("string serializes")
                .replace('"', "'")
        );
    }
    p
}

/// A short one-line rendering of a value for humans: long values are cut with an ellipsis.
/// Integers beyond 64 bits and lone surrogates are shown as the tape has them
/// ([`super::exact::display`]).
pub(crate) fn short(v: Option<&Value>, max: usize) -> String {
    let s = match v {
        None => return "(absent)".into(),
        Some(v) => super::exact::display(v),
    };
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Where two texts differ, as char ranges of each to show: from a little before their first
/// difference (`context` chars) to a little after their last, at most `width` chars.
fn window(
    a: &[char],
    b: &[char],
    context: usize,
    width: usize,
) -> ((usize, usize), (usize, usize)) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let range = |c: &[char]| {
        let start = prefix.saturating_sub(context);
        let end = (c.len() - suffix + context).min(c.len()).min(start + width);
        (start, end)
    };
    (range(a), range(b))
}

/// `c[start..end]`, with `…` where text was left out at either end.
fn elided(c: &[char], (start, end): (usize, usize), escape: bool) -> String {
    let mut s = String::new();
    if start > 0 {
        s.push('…');
    }
    let part: String = c[start..end].iter().collect();
    if escape {
        s.push_str(&part.escape_debug().to_string());
    } else {
        s.push_str(&part);
    }
    if end < c.len() {
        s.push('…');
    }
    s
}

/// Two long strings shown where they differ: the common start and end left out (`…`), a
/// little context kept, so the difference is what is printed.
pub(crate) fn around_difference(a: &str, b: &str) -> (String, String) {
    let (ac, bc): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (ra, rb) = window(&ac, &bc, 24, 80);
    (
        format!("\"{}\"", elided(&ac, ra, true)),
        format!("\"{}\"", elided(&bc, rb, true)),
    )
}

/// Two values side by side, each in at most about `max` chars: as [`short`] when both fit;
/// otherwise the part of their JSON texts where they differ, the common start and end left
/// out and marked `…` — cut at a fixed width, both sides would print the same prefix and the
/// difference would not show.
pub(crate) fn short_pair(a: Option<&Value>, b: Option<&Value>, max: usize) -> (String, String) {
    let (Some(x), Some(y)) = (a, b) else {
        return (short(a, max), short(b, max));
    };
    let (sx, sy) = (super::exact::display(x), super::exact::display(y));
    let (xc, yc): (Vec<char>, Vec<char>) = (sx.chars().collect(), sy.chars().collect());
    if (xc.len() <= max && yc.len() <= max) || xc == yc {
        return (short(a, max), short(b, max));
    }
    let (rx, ry) = window(&xc, &yc, max / 4, max.saturating_sub(2));
    (elided(&xc, rx, false), elided(&yc, ry, false))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// Small JSON values over few keys and leaves, so that two of them overlap.
    fn small_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::{json, Value};
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..3).prop_map(|n| json!(n)),
            prop::sample::select(vec!["a", "b", "[REDACTED:key:token:0a1b2c3d]"])
                .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["k", "n", "x y"]).prop_map(String::from),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Counting finds as many differences, wild and not, as building them does.
        #[test]
        fn counted_differences_are_the_differences_built(a in small_value(), b in small_value()) {
            let wild = |l: &serde_json::Value, r: &serde_json::Value| {
                l.as_str().is_some_and(crate::wire::marker::has_marker)
                    && crate::wire::marker::wildcard_eq(l, r)
            };
            let built = super::differences(&a, &b);
            let wilds = built
                .iter()
                .filter(|d| matches!((&d.left, &d.right), (Some(l), Some(r)) if wild(l, r)))
                .count();
            prop_assert_eq!(
                super::count_differences(&a, &b, &wild),
                (built.len() - wilds, wilds)
            );
        }
    }

    /// Long values that differ late: both sides show the difference, not the same prefix.
    #[test]
    fn a_pair_of_long_values_shows_where_they_differ() {
        let a = serde_json::json!({"city": "Lisbon", "target_timezone": "Asia/Tokyo", "time": "16:30", "pad": "x".repeat(40)});
        let b = serde_json::json!({"city": "Lisbon", "target_timezone": "Asia/Tokyo", "time": "16:31", "pad": "x".repeat(40)});
        assert_eq!(
            short(Some(&a), 48),
            short(Some(&b), 48),
            "cut at a width: the same"
        );
        let (x, y) = short_pair(Some(&a), Some(&b), 48);
        assert_ne!(x, y);
        assert!(x.contains("16:30") && y.contains("16:31"), "{x} / {y}");
        assert!(x.starts_with('…'), "the common start left out: {x}");
        assert!(x.chars().count() <= 48, "{x}");
        let (p, q) = short_pair(Some(&serde_json::json!(1)), None, 48);
        assert_eq!((p.as_str(), q.as_str()), ("1", "(absent)"));
        let (p, q) = short_pair(
            Some(&serde_json::json!("ab")),
            Some(&serde_json::json!("ac")),
            48,
        );
        assert_eq!(
            (p.as_str(), q.as_str()),
            ("\"ab\"", "\"ac\""),
            "short ones as they are"
        );
    }

    #[test]
    fn a_difference_deep_in_a_long_string_is_what_is_shown() {
        let a = format!(
            "{}Today the answer is 16:30 exactly.{}",
            "x".repeat(500),
            "y".repeat(500)
        );
        let b = a.replace("16:30", "16:31");
        let (ra, rb) = super::around_difference(&a, &b);
        assert!(ra.contains("16:30") && rb.contains("16:31"), "{ra} / {rb}");
        assert!(ra.starts_with("\"…") && ra.ends_with("…\""), "{ra}");
        assert!(ra.chars().count() < 100);
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn differences_shown_compare_the_raw_values_and_show_the_shown_ones() {
        let recorded = json!({"arguments": {"key": "sk-1", "city": "Lisbon", "sk-2": 1}});
        let asked = json!({"arguments": {"key": "sk-1", "city": "Porto", "sk-2": 2}});
        // As a redactor shows them: the key's value and the secret-looking key redacted.
        let shown_rec = json!({"arguments": {"key": "[R:a]", "city": "Lisbon", "[R:k]": 1}});
        let shown_asked = json!({"arguments": {"key": "[R:a]", "city": "Porto", "[R:k]": 2}});
        let d = differences_shown(&recorded, &asked, [&shown_rec, &shown_asked], &|_, _| false);
        let got: Vec<(&str, Option<&Value>, Option<&Value>)> = d
            .iter()
            .map(|d| (d.path.as_str(), d.left.as_ref(), d.right.as_ref()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "$.arguments.city",
                    Some(&json!("Lisbon")),
                    Some(&json!("Porto"))
                ),
                (
                    "$.arguments['[REDACTED]']",
                    Some(&json!("[REDACTED]")),
                    Some(&json!("[REDACTED]"))
                ),
            ]
        );
        // A secret that differs is a difference, shown redacted; `skip` passes places over.
        let asked = json!({"arguments": {"key": "sk-9", "city": "Lisbon", "sk-2": 1}});
        let shown_asked = json!({"arguments": {"key": "[R:b]", "city": "Lisbon", "[R:k]": 1}});
        let d = differences_shown(&recorded, &asked, [&shown_rec, &shown_asked], &|_, _| false);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].path.as_str(), d[0].left.clone(), d[0].right.clone()),
            (
                "$.arguments.key",
                Some(json!("[R:a]")),
                Some(json!("[R:b]"))
            )
        );
        let d = differences_shown(&recorded, &asked, [&shown_rec, &shown_asked], &|l, _| {
            l == "sk-1"
        });
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn canonical_ignores_key_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{ "b": [1, {"y":2,"x":1}], "a": "s" }"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#);
    }

    #[test]
    fn volatile_meta_is_stripped() {
        let p =
            json!({"name":"t","_meta":{"progressToken":7,"io.modelcontextprotocol/clientInfo":{}}});
        assert_eq!(match_params(Some(&p)), json!({"name":"t"}));
        let p = json!({"name":"t","requestState":"v1.abc","inputResponses":{"k":1}});
        assert_eq!(
            match_params(Some(&p)),
            json!({"name":"t","inputResponses":{"k":1}})
        );
        let p = json!({"_meta":{"progressToken":7,"keep":1}});
        assert_eq!(match_params(Some(&p)), json!({"_meta":{"keep":1}}));
        assert_eq!(match_params(Some(&json!({}))), Value::Null);
        assert_eq!(match_params(None), Value::Null);
    }

    #[test]
    fn match_params_are_written_as_the_general_path_canonicalizes_them() {
        let cases = [
            json!(null),
            json!({}),
            json!(5),
            json!("text"),
            json!([1, {"b": 2, "a": 1}]),
            json!({"name":"t","arguments":{"z":1,"a":[1.5,"é\"\\\n",null]}}),
            json!({"name":"t","_meta":{"progressToken":7,"io.modelcontextprotocol/clientInfo":{}}}),
            json!({"name":"t","_meta":{"progressToken":7,"keep":1,"a":[2]}}),
            json!({"_meta":{"progressToken":7}}),
            json!({"_meta":{}}),
            json!({"_meta":5,"a":1}),
            json!({"requestState":"v1.abc"}),
            json!({"requestState":"v1","inputResponses":{"k":1},"name":"n"}),
        ];
        for p in cases {
            let mut out = Vec::new();
            write_match_params(Some(&p), &mut out);
            let want = canonical(&match_params(Some(&p)));
            assert_eq!(String::from_utf8(out).unwrap(), want, "{p}");
        }
        let mut out = Vec::new();
        write_match_params(None, &mut out);
        assert_eq!(out, b"null");
        // A redaction marker anywhere: the general path strips its hash, so no fast key.
        for p in [
            json!({"a":{"b":["[REDACTED:openai-key:0123abcd]"]}}),
            json!({"[REDACTED:x]":1}),
        ] {
            assert_eq!(match_key_halves("m", Some(&p), &mut Vec::new()), None);
        }
        assert!(match_key_halves("m", Some(&json!({"a":"[REDACTED"})), &mut Vec::new()).is_some());
    }

    #[test]
    fn differences_name_paths_and_both_sides() {
        let a = json!({"name":"add","arguments":{"a":1,"b":2,"weird key":1},"list":[1,2]});
        let b = json!({"name":"add","arguments":{"a":1,"b":3},"list":[1]});
        let d = differences(&a, &b);
        let paths: Vec<_> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            ["$.arguments.b", "$.arguments['weird key']", "$.list[1]"]
        );
        assert_eq!(d[0].left, Some(json!(2)));
        assert_eq!(d[0].right, Some(json!(3)));
        assert_eq!(d[2].right, None);
    }
}
