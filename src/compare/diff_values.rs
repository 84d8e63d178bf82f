//! Classified differences between a recorded answer and another one (a second recording, or a
//! live server's): each change has a kind, a JSONPath, and both values.

use crate::wire::canonical::canonical;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What kind of difference; ordered from most to least severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// No answer: timeout, crash, or the exchange is missing on one side.
    MissingResponse,
    /// A result became an error or the other way round, or the error code changed.
    ErrorStatusChange,
    /// A key added or removed, a type changed, items added or removed.
    StructureChange,
    /// The same items in another order.
    OrderingChange,
    /// A value changed.
    ValueChange,
}

impl ChangeKind {
    /// The kind's name in reports and JSON (`value-change`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::MissingResponse => "missing-response",
            ChangeKind::ErrorStatusChange => "error-status-change",
            ChangeKind::StructureChange => "structure-change",
            ChangeKind::OrderingChange => "ordering-change",
            ChangeKind::ValueChange => "value-change",
        }
    }
}

/// One classified difference between two answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// What kind of difference it is.
    pub kind: ChangeKind,
    /// JSONPath into the answer body (`$.result…` or `$.error…`).
    pub path: String,
    /// The recorded value (`None`: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Value>,
    /// The other side's value (`None`: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Value>,
}

/// Classified changes from `recorded` to `observed` (both normalized answer bodies), their
/// markers compared by rule.
pub(crate) fn changes(recorded: &Value, observed: &Value, allow_reorder: bool) -> Vec<Change> {
    changes_with(recorded, observed, allow_reorder, false)
}

/// [`changes`]; `keyed`: both sides were redacted with one marker key, so markers with
/// different hashes stand for different secrets and are a change.
pub(crate) fn changes_with(
    recorded: &Value,
    observed: &Value,
    allow_reorder: bool,
    keyed: bool,
) -> Vec<Change> {
    let mut out = Vec::new();
    let (r_err, o_err) = (recorded.get("error"), observed.get("error"));
    match (r_err, o_err) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            if a.get("code") != b.get("code") {
                out.push(change(
                    ChangeKind::ErrorStatusChange,
                    "$.error.code".into(),
                    a.get("code"),
                    b.get("code"),
                ));
            }
        }
        _ => {
            out.push(change(
                ChangeKind::ErrorStatusChange,
                "$".into(),
                Some(recorded),
                Some(observed),
            ));
            return out;
        }
    }
    // A tool reports failure in its result (`isError: true`), not as a JSON-RPC error: a tool
    // that starts or stops failing is an error-status change too.
    let is_error = |v: &Value| {
        v.pointer("/result/isError")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    if is_error(recorded) != is_error(observed) {
        out.push(change(
            ChangeKind::ErrorStatusChange,
            "$.result.isError".into(),
            recorded.get("result"),
            observed.get("result"),
        ));
        return out;
    }
    let how = How {
        allow_reorder,
        keyed,
    };
    walk("$".into(), recorded, observed, how, &mut out);
    out.retain(|c| !(c.kind == ChangeKind::ValueChange && c.path == "$.error.code"));
    out
}

fn change(
    kind: ChangeKind,
    path: String,
    recorded: Option<&Value>,
    observed: Option<&Value>,
) -> Change {
    Change {
        kind,
        path,
        recorded: recorded.cloned(),
        observed: observed.cloned(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An array of objects that each have a distinct string `name` (or else `uri`): the field and the
/// items by it.
fn keyed(items: &[Value]) -> Option<(&'static str, Vec<(String, &Value)>)> {
    if items.is_empty() {
        return None;
    }
    for field in ["name", "uri"] {
        let named: Option<Vec<(String, &Value)>> = items
            .iter()
            .map(|v| {
                v.get(field)
                    .and_then(Value::as_str)
                    .map(|n| (n.to_string(), v))
            })
            .collect();
        if let Some(named) = named {
            let mut names: Vec<&String> = named.iter().map(|(n, _)| n).collect();
            names.sort();
            names.dedup();
            if names.len() == named.len() {
                return Some((field, named));
            }
        }
    }
    None
}

/// How [`walk`] compares.
#[derive(Clone, Copy)]
struct How {
    /// Arrays as multisets.
    allow_reorder: bool,
    /// Both sides' markers made with one marker key: their hashes count.
    keyed: bool,
}

fn walk(path: String, a: &Value, b: &Value, how: How, out: &mut Vec<Change>) {
    let allow_reorder = how.allow_reorder;
    // A redacted value on either side stands for whatever the other side holds; under one
    // marker key, not for a marker of another secret.
    let marked = |v: &Value| v.as_str().is_some_and(crate::redact::has_marker);
    if ((marked(a) && crate::redact::wildcard_eq(a, b))
        || (marked(b) && crate::redact::wildcard_eq(b, a)))
        && (!how.keyed || crate::wire::marker::same_keyed_markers(a, b))
    {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = crate::wire::canonical::child_path(&path, k);
                match y.get(k) {
                    Some(vb) => walk(p, va, vb, how, out),
                    None => out.push(change(ChangeKind::StructureChange, p, Some(va), None)),
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    let p = crate::wire::canonical::child_path(&path, k);
                    out.push(change(ChangeKind::StructureChange, p, None, Some(vb)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if keyed(x).is_some() && keyed(y).is_some() => {
            // Lists of named things (tools, prompts, resources) line up by name, not position:
            // a tool inserted in the middle is one addition, not every later tool changed.
            let (field, xs) = keyed(x).expect("checked");
            let (_, ys) = keyed(y).expect("checked");
            let item_path = |name: &str| {
                format!(
                    "{path}[?@.{field}=={}]",
                    serde_json::to_string(name)
                        .unwrap_or_default()
                        .replace('"', "'")
                )
            };
            for (name, va) in &xs {
                match ys.iter().find(|(n, _)| n == name) {
                    Some((_, vb)) => walk(item_path(name), va, vb, how, out),
                    None => out.push(change(
                        ChangeKind::StructureChange,
                        item_path(name),
                        Some(va),
                        None,
                    )),
                }
            }
            for (name, vb) in &ys {
                if !xs.iter().any(|(n, _)| n == name) {
                    out.push(change(
                        ChangeKind::StructureChange,
                        item_path(name),
                        None,
                        Some(vb),
                    ));
                }
            }
            if !allow_reorder {
                let common_x: Vec<&String> = xs
                    .iter()
                    .map(|(n, _)| n)
                    .filter(|n| ys.iter().any(|(m, _)| m == *n))
                    .collect();
                let common_y: Vec<&String> = ys
                    .iter()
                    .map(|(n, _)| n)
                    .filter(|n| xs.iter().any(|(m, _)| m == *n))
                    .collect();
                if common_x != common_y {
                    out.push(change(ChangeKind::OrderingChange, path, Some(a), Some(b)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            let mut xs: Vec<(String, &Value)> = x.iter().map(|v| (canonical(v), v)).collect();
            let mut ys: Vec<(String, &Value)> = y.iter().map(|v| (canonical(v), v)).collect();
            let same_multiset = {
                let mut a: Vec<&String> = xs.iter().map(|(c, _)| c).collect();
                let mut b: Vec<&String> = ys.iter().map(|(c, _)| c).collect();
                a.sort();
                b.sort();
                a == b
            };
            if same_multiset {
                if !allow_reorder && xs.iter().map(|(c, _)| c).ne(ys.iter().map(|(c, _)| c)) {
                    out.push(change(ChangeKind::OrderingChange, path, Some(a), Some(b)));
                }
                return;
            }
            if allow_reorder {
                xs.sort_by(|p, q| p.0.cmp(&q.0));
                ys.sort_by(|p, q| p.0.cmp(&q.0));
            }
            for i in 0..xs.len().max(ys.len()) {
                let p = format!("{path}[{i}]");
                match (xs.get(i), ys.get(i)) {
                    (Some((_, va)), Some((_, vb))) => walk(p, va, vb, how, out),
                    (Some((_, va)), None) => {
                        out.push(change(ChangeKind::StructureChange, p, Some(va), None))
                    }
                    (None, Some((_, vb))) => {
                        out.push(change(ChangeKind::StructureChange, p, None, Some(vb)))
                    }
                    (None, None) => {}
                }
            }
        }
        (x, y) if type_name(x) != type_name(y) => {
            out.push(change(ChangeKind::StructureChange, path, Some(x), Some(y)))
        }
        (x, y) if x != y => out.push(change(ChangeKind::ValueChange, path, Some(x), Some(y))),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(a: Value, b: Value, reorder: bool) -> Vec<(ChangeKind, String)> {
        changes(&a, &b, reorder)
            .into_iter()
            .map(|c| (c.kind, c.path))
            .collect()
    }

    /// Markers compare by rule, unless both sides were redacted with one marker key: then
    /// another hash is another secret, at the marker's own path; a plain value still fits.
    #[test]
    fn under_one_marker_key_another_hash_is_a_value_change() {
        let a = json!({"result": {"t": "[REDACTED:key:token:0000aaaa]", "s": "Bearer [REDACTED:bearer:0000aaaa]", "p": "[REDACTED:key:token:0000aaaa]"}});
        let b = json!({"result": {"t": "[REDACTED:key:token:0000bbbb]", "s": "Bearer [REDACTED:bearer:0000bbbb]", "p": "plain"}});
        assert!(changes(&a, &b, false).is_empty());
        let found: Vec<(ChangeKind, String)> = changes_with(&a, &b, false, true)
            .into_iter()
            .map(|c| (c.kind, c.path))
            .collect();
        assert_eq!(
            found,
            [
                (ChangeKind::ValueChange, "$.result.s".to_string()),
                (ChangeKind::ValueChange, "$.result.t".to_string())
            ]
        );
        assert!(changes_with(&a, &a, false, true).is_empty());
    }

    #[test]
    fn each_kind_with_its_path() {
        use ChangeKind::*;
        assert_eq!(
            kinds(
                json!({"result": {"a": 1}}),
                json!({"result": {"a": 2}}),
                false
            ),
            [(ValueChange, "$.result.a".into())]
        );
        assert_eq!(
            kinds(
                json!({"result": {"a": 1}}),
                json!({"result": {"b": 1}}),
                false
            ),
            [
                (StructureChange, "$.result.a".into()),
                (StructureChange, "$.result.b".into())
            ]
        );
        assert_eq!(
            kinds(
                json!({"result": {"a": 1}}),
                json!({"result": {"a": "1"}}),
                false
            ),
            [(StructureChange, "$.result.a".into())]
        );
        assert_eq!(
            kinds(
                json!({"result": {"l": [1, 2]}}),
                json!({"result": {"l": [2, 1]}}),
                false
            ),
            [(OrderingChange, "$.result.l".into())]
        );
        assert!(kinds(
            json!({"result": {"l": [1, 2]}}),
            json!({"result": {"l": [2, 1]}}),
            true
        )
        .is_empty());
        assert_eq!(
            kinds(json!({"result": {}}), json!({"error": {"code": 1}}), false),
            [(ErrorStatusChange, "$".into())]
        );
        assert_eq!(
            kinds(
                json!({"error": {"code": 1, "message": "a"}}),
                json!({"error": {"code": 2, "message": "a"}}),
                false
            ),
            [(ErrorStatusChange, "$.error.code".into())]
        );
        assert_eq!(
            kinds(
                json!({"result": {"l": [1]}}),
                json!({"result": {"l": [1, 3]}}),
                false
            ),
            [(StructureChange, "$.result.l[1]".into())]
        );
    }
}
