//! Canonical JSON for matching, and the structural difference between two values.
//!
//! serde_json's default map is ordered by key, so parsing and re-serializing gives a canonical
//! text: key order and whitespace stop mattering, values (including `1` vs `1.0`) still do.

use serde_json::Value;
use std::fmt::Write as _;

/// `_meta` keys that say who is asking rather than what is asked: they take no part in matching.
/// `progressToken` is chosen by each client run; the `io.modelcontextprotocol/*` keys are the
/// 2026-07-28 era's per-request handshake.
pub const VOLATILE_META_KEYS: &[&str] = &[
    "progressToken",
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
];

/// Removes the volatile `_meta` keys (and `_meta` itself once empty) from request params, and
/// the 2026-07-28 era's `requestState`: opaque server state that a server may encrypt with a
/// per-process key, so a retry of the same request carries a different one on every run.
pub fn strip_volatile(params: &mut Value) {
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
    crate::redact::strip_marker_hashes(&mut v);
    match v {
        Value::Object(ref m) if m.is_empty() => Value::Null,
        v => v,
    }
}

/// Canonical text of a value (sorted keys, no whitespace).
pub fn canonical(v: &Value) -> String {
    serde_json::to_string(v).expect("a Value always serializes")
}

/// One place where two JSON values differ.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    /// JSONPath of the place, e.g. `$.arguments.city`.
    pub path: String,
    /// The value on the left (`None`: absent there).
    pub left: Option<Value>,
    pub right: Option<Value>,
}

/// Every leaf-most difference between `left` and `right`, in key order.
pub fn differences(left: &Value, right: &Value) -> Vec<Difference> {
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

pub fn child_path(parent: &str, key: &str) -> String {
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
pub fn short(v: Option<&Value>, max: usize) -> String {
    let s = match v {
        None => return "(absent)".into(),
        Some(v) => canonical(v),
    };
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
