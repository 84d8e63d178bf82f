//! Tool-surface changes between two `tools/list` answers: tools added or removed, input and
//! output schemas narrowed (breaking for callers) or widened (compatible).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// How one tool changed between the first `tools/list` and the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurfaceKind {
    /// Only the second side has it.
    Added,
    /// Only the first side has it.
    Removed,
    /// A schema now accepts less (input) or promises less (output): breaking.
    Narrowed,
    /// A schema now accepts more (input) or promises more (output): compatible.
    Widened,
    /// Something else changed (description, title, annotations): informational.
    Changed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// A tool that changed, and how.
pub struct ToolChange {
    /// The server of a multi-server comparison whose tool it is (its label on the tape);
    /// absent when the tapes compared hold one server each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The tool's name.
    pub tool: String,
    /// How it changed.
    pub kind: SurfaceKind,
    /// What changed, one phrase each (e.g. "inputSchema: property `units` is now required").
    pub details: Vec<String>,
}

impl ToolChange {
    /// The tool as reports name it: `search: find` in a comparison of several servers.
    pub(crate) fn shown(&self) -> String {
        match &self.server {
            Some(server) => format!("{server}: {}", self.tool),
            None => self.tool.clone(),
        }
    }
}

/// Every tool in the `tools` arrays of the given `tools/list` results, by name. Redaction
/// markers are reduced to their rule: two tapes redacted with different per-tape keys announce
/// the same tools.
pub(crate) fn tools_of<'a>(
    results: impl IntoIterator<Item = &'a Value>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for r in results {
        if let Some(tools) = r.get("tools").and_then(Value::as_array) {
            for t in tools {
                if let Some(name) = t.get("name").and_then(Value::as_str) {
                    let mut t = t.clone();
                    crate::redact::strip_marker_hashes(&mut t);
                    out.insert(name.to_string(), t);
                }
            }
        }
    }
    out
}

/// Equal, where a marker on either side stands for what the other side holds.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => crate::redact::wildcard_eq_either(a, b),
        (a, b) => a == b,
    }
}

/// How the tools of `a` (see `tools_of`) changed in `b`, by tool name.
pub(crate) fn compare(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<ToolChange> {
    let mut out = Vec::new();
    for (name, ta) in a {
        let Some(tb) = b.get(name) else {
            out.push(ToolChange {
                server: None,
                tool: name.clone(),
                kind: SurfaceKind::Removed,
                details: vec![],
            });
            continue;
        };
        let mut narrowed = Vec::new();
        let mut widened = Vec::new();
        schema_changes(
            "inputSchema",
            ta.get("inputSchema"),
            tb.get("inputSchema"),
            true,
            &mut narrowed,
            &mut widened,
        );
        schema_changes(
            "outputSchema",
            ta.get("outputSchema"),
            tb.get("outputSchema"),
            false,
            &mut narrowed,
            &mut widened,
        );
        if !narrowed.is_empty() {
            narrowed.extend(widened);
            out.push(ToolChange {
                server: None,
                tool: name.clone(),
                kind: SurfaceKind::Narrowed,
                details: narrowed,
            });
        } else if !widened.is_empty() {
            out.push(ToolChange {
                server: None,
                tool: name.clone(),
                kind: SurfaceKind::Widened,
                details: widened,
            });
        } else {
            let mut other = Vec::new();
            for key in [
                "description",
                "title",
                "annotations",
                "inputSchema",
                "outputSchema",
            ] {
                if !same(ta.get(key), tb.get(key)) {
                    other.push(format!("{key} changed"));
                }
            }
            if !other.is_empty() {
                out.push(ToolChange {
                    server: None,
                    tool: name.clone(),
                    kind: SurfaceKind::Changed,
                    details: other,
                });
            }
        }
    }
    for name in b.keys() {
        if !a.contains_key(name) {
            out.push(ToolChange {
                server: None,
                tool: name.clone(),
                kind: SurfaceKind::Added,
                details: vec![],
            });
        }
    }
    out
}

/// Compares two object schemas. For an input schema, accepting less is narrowing; for an output
/// schema, promising less is.
fn schema_changes(
    label: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    input: bool,
    narrowed: &mut Vec<String>,
    widened: &mut Vec<String>,
) {
    let (a, b) = match (a, b) {
        (None, None) => return,
        (Some(_), None) => {
            let d = format!("{label} removed");
            if input {
                widened.push(d)
            } else {
                narrowed.push(d)
            }
            return;
        }
        (None, Some(_)) => {
            let d = format!("{label} added");
            if input {
                narrowed.push(d)
            } else {
                widened.push(d)
            }
            return;
        }
        (Some(a), Some(b)) => (a, b),
    };
    compare_schema(label, a, b, input, narrowed, widened, 0);
}

#[allow(clippy::too_many_arguments)]
fn compare_schema(
    at: &str,
    a: &Value,
    b: &Value,
    input: bool,
    narrowed: &mut Vec<String>,
    widened: &mut Vec<String>,
    depth: usize,
) {
    if depth > 16 {
        return;
    }
    // Removing or adding things is sorted here by what it means for callers; changes that make
    // a schema match more or fewer documents go through `push_dir`, which knows that for an
    // output schema "matches more" means "promises less".
    let (less, more) = (narrowed, widened);
    let types = |v: &Value| -> BTreeSet<String> {
        match v.get("type") {
            Some(Value::String(s)) => [s.clone()].into(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            _ => BTreeSet::new(),
        }
    };
    let (ta, tb) = (types(a), types(b));
    if ta != tb && !ta.is_empty() && !tb.is_empty() {
        if tb.is_superset(&ta) {
            push_dir(
                input,
                true,
                format!("{at}: type {ta:?} → {tb:?}"),
                less,
                more,
            );
        } else {
            less.push(format!("{at}: type {ta:?} → {tb:?}"));
        }
    }
    let req = |v: &Value| -> BTreeSet<String> {
        v.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ra, rb) = (req(a), req(b));
    let empty = serde_json::Map::new();
    let pa = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let pb = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (k, sa) in pa {
        match pb.get(k) {
            None => {
                // Input: a property callers may send is gone. Output: a promised field is gone.
                less.push(format!("{at}: property `{k}` removed"));
            }
            Some(sb) => compare_schema(&format!("{at}.{k}"), sa, sb, input, less, more, depth + 1),
        }
    }
    for k in pb.keys() {
        if !pa.contains_key(k) {
            if input && rb.contains(k) {
                less.push(format!("{at}: new required property `{k}`"));
            } else {
                more.push(format!("{at}: property `{k}` added"));
            }
        }
    }
    for k in rb.difference(&ra) {
        if pa.contains_key(k) {
            push_dir(
                input,
                false,
                format!("{at}: property `{k}` is now required"),
                less,
                more,
            );
        }
    }
    for k in ra.difference(&rb) {
        if pb.contains_key(k) {
            push_dir(
                input,
                true,
                format!("{at}: property `{k}` is no longer required"),
                less,
                more,
            );
        }
    }
    let enums = |v: &Value| {
        v.get("enum").and_then(Value::as_array).map(|e| {
            e.iter()
                .map(crate::wire::canonical::canonical)
                .collect::<BTreeSet<_>>()
        })
    };
    if let (Some(ea), Some(eb)) = (enums(a), enums(b)) {
        if !ea.is_subset(&eb) {
            push_dir(
                input,
                false,
                format!("{at}: enum values removed"),
                less,
                more,
            );
        }
        if !eb.is_subset(&ea) {
            push_dir(input, true, format!("{at}: enum values added"), less, more);
        }
    }
    let closed = |v: &Value| v.get("additionalProperties") == Some(&Value::Bool(false));
    if closed(a) != closed(b) {
        push_dir(
            input,
            closed(a),
            format!(
                "{at}: additionalProperties {}",
                if closed(b) {
                    "now false"
                } else {
                    "no longer false"
                }
            ),
            less,
            more,
        );
    }
}

/// `accepts_more`: the change lets the schema match more documents. For an input schema that is
/// widening; for an output schema it is narrowing (callers can rely on less).
fn push_dir(
    input: bool,
    accepts_more: bool,
    what: String,
    narrowed: &mut Vec<String>,
    widened: &mut Vec<String>,
) {
    if accepts_more == input {
        widened.push(what);
    } else {
        narrowed.push(what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(tools: Value) -> BTreeMap<String, Value> {
        tools_of([&json!({ "tools": tools })])
    }

    #[test]
    fn added_removed_narrowed_widened() {
        let a = list(json!([
            {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a"]}},
            {"name": "gone", "inputSchema": {"type": "object"}},
            {"name": "look", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}, "outputSchema": {"type": "object", "properties": {"x": {}, "y": {}}}}
        ]));
        let b = list(json!([
            {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
            {"name": "look", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}, "lang": {"type": "string"}}}, "outputSchema": {"type": "object", "properties": {"x": {}, "y": {}, "z": {}}}},
            {"name": "new", "inputSchema": {"type": "object"}}
        ]));
        let c = compare(&a, &b);
        let got: Vec<(&str, SurfaceKind)> = c.iter().map(|c| (c.tool.as_str(), c.kind)).collect();
        assert_eq!(
            got,
            [
                ("add", SurfaceKind::Narrowed),
                ("gone", SurfaceKind::Removed),
                ("look", SurfaceKind::Widened),
                ("new", SurfaceKind::Added)
            ]
        );
        assert_eq!(c[0].details, ["inputSchema: property `b` is now required"]);
        // The other way round, the same changes mean the opposite.
        let back = compare(&b, &a);
        let look = back.iter().find(|c| c.tool == "look").unwrap();
        assert_eq!(look.kind, SurfaceKind::Narrowed, "{look:?}");
    }
}
