//! JSONPath (RFC 9535) selections of parts of a message that take no part in a comparison:
//! `check --ignore-path` (in answers) and `play --ignore-param` (in request params), each
//! everywhere or scoped to one method, or one tool, prompt or resource of it.

use serde_json::Value;
use serde_json_path::JsonPath;

#[derive(Debug, thiserror::Error)]
/// An `--ignore-path` (check) or `--ignore-param` (play) that is not a valid JSONPath, or whose
/// scope is not valid (exit 64).
#[error("invalid {flag} {path:?}: {message}")]
pub struct PathError {
    /// The flag it was given with.
    pub flag: &'static str,
    /// The flag's value as given.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// The requests an `--ignore-path` applies to: one method, or one tool, prompt or resource of
/// it (`tools/call:get_file_info:$…`, `resources/read:$…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The request's method.
    pub method: String,
    /// `params.name` (tools/call, prompts/get) or `params.uri` (resources/…), when given.
    pub target: Option<String>,
}

/// One `--ignore-path` or `--ignore-param`: a JSONPath, everywhere or in one scope.
#[derive(Debug, Clone)]
pub struct IgnorePath {
    /// The flag's value as given.
    pub spec: String,
    /// Where it applies; everywhere when `None`.
    pub scope: Option<Scope>,
    /// The RFC 9535 query.
    pub path: JsonPath,
}

impl IgnorePath {
    /// `$…`, `METHOD:$…` or `METHOD:NAME:$…`. The JSONPath starts at the first `:$`, so a
    /// NAME may hold `:` (a resource URI) and the path may hold anything.
    pub fn parse(spec: &str) -> Result<IgnorePath, PathError> {
        IgnorePath::parse_for(spec, "--ignore-path")
    }

    /// [`IgnorePath::parse`], an error naming `flag` as the option it was given with.
    pub fn parse_for(spec: &str, flag: &'static str) -> Result<IgnorePath, PathError> {
        let err = |message: String| PathError {
            flag,
            path: spec.to_string(),
            message,
        };
        let (scope, path) = if spec.starts_with('$') {
            (None, spec)
        } else {
            let Some(at) = spec.find(":$") else {
                return Err(err(
                    "expected a JSONPath starting with `$`, alone or after `METHOD:` or \
                     `METHOD:NAME:` (e.g. `tools/call:get_file_info:$.result`)"
                        .into(),
                ));
            };
            let (scope, path) = (&spec[..at], &spec[at + 1..]);
            let (method, target) = match scope.split_once(':') {
                Some((m, t)) => (m, Some(t)),
                None => (scope, None),
            };
            let method_ok = !method.is_empty()
                && method
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c));
            if !method_ok {
                return Err(err(format!("{method:?} is not a method name")));
            }
            if let Some(t) = target {
                if t.is_empty() || t.trim() != t {
                    return Err(err(format!("{t:?} is not a tool, prompt or resource name")));
                }
                if super::params::target_key(method).is_none() {
                    return Err(err(format!(
                        "{method} names no tool, prompt or resource to scope to (use \
                         `{method}:$…`)"
                    )));
                }
            }
            let scope = Scope {
                method: method.to_string(),
                target: target.map(str::to_string),
            };
            (Some(scope), path)
        };
        let parsed = JsonPath::parse(path).map_err(|e| err(e.to_string()))?;
        Ok(IgnorePath {
            spec: spec.to_string(),
            scope,
            path: parsed,
        })
    }

    /// Whether it applies to a request of `method` about `target`.
    pub fn applies(&self, method: &str, target: Option<&str>) -> bool {
        match &self.scope {
            None => true,
            Some(s) => s.method == method && (s.target.is_none() || s.target.as_deref() == target),
        }
    }

    /// Removes every node the path selects from `v` (`$` itself leaves `null`).
    pub fn remove_from(&self, v: &mut Value) {
        remove_matches(v, &self.path);
    }
}

fn remove_matches(v: &mut Value, path: &JsonPath) {
    // Locate first (immutable), then remove from the last location backwards so that earlier
    // array indices stay valid.
    let mut pointers: Vec<Vec<Step>> = path
        .query_located(v)
        .locations()
        .map(|loc| {
            loc.iter()
                .map(|e| match e {
                    serde_json_path::PathElement::Name(n) => Step::Key(n.to_string()),
                    serde_json_path::PathElement::Index(i) => Step::Index(*i),
                })
                .collect()
        })
        .collect();
    pointers.sort();
    for p in pointers.iter().rev() {
        remove_at(v, p);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Key(String),
    Index(usize),
}

fn remove_at(v: &mut Value, path: &[Step]) {
    let Some((last, parents)) = path.split_last() else {
        *v = Value::Null; // `$` itself: nothing left to compare
        return;
    };
    let mut cur = v;
    for step in parents {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(m)) => match m.get_mut(k) {
                Some(c) => c,
                None => return,
            },
            (Step::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(c) => c,
                None => return,
            },
            _ => return,
        };
    }
    match (last, cur) {
        (Step::Key(k), Value::Object(m)) => {
            m.remove(k);
        }
        (Step::Index(i), Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

impl crate::exit::Coded for PathError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}
