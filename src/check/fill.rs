//! `check --fill NAME=env:VAR`: the real value of a redacted argument, put back into the
//! recorded request for the live call only. A tape holds `[REDACTED:key:api_key:…]` where the
//! client sent its key; a live server given the marker answers differently (or refuses), so
//! without a fill such a call may differ for no fault of the build. The value never reaches a
//! tape or a report: the observed tape's redactor is given it as an exact secret.

use crate::redact::{is_marker, marker_rule, MARKER_PREFIX};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// One `NAME=SOURCE` pair, resolved.
#[derive(Debug, Clone)]
pub struct Fill {
    /// What markers it fills: a marker's rule (`openai-key`, `key:api_key`) or the key a
    /// marker's rule names (`api_key` fills `key:api_key`).
    pub name: String,
    /// The real value (a secret: never printed, never taped).
    pub value: String,
}

/// A fill that cannot be used (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    /// Not `NAME=SOURCE` (the argument as given).
    #[error("--fill {0:?}: expected NAME=env:VAR or NAME=file:PATH")]
    Syntax(String),
    /// The value itself was given instead of where to read it.
    #[error("--fill {name}: give the value as env:VAR or file:PATH, not on the command line (every user of the machine can read a process's arguments)")]
    Literal {
        /// The fill's name.
        name: String,
    },
    /// `env:VAR` names a variable that is not set (or not Unicode).
    #[error("--fill {name}: the environment variable {var} is not set")]
    NoVar {
        /// The fill's name.
        name: String,
        /// The variable.
        var: String,
    },
    /// `file:PATH` could not be read.
    #[error("--fill {name}: reading {path}: {cause}")]
    File {
        /// The fill's name.
        name: String,
        /// The file, as given.
        path: String,
        /// Why it could not be read.
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for FillError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

impl Fill {
    /// Parses `NAME=env:VAR` / `NAME=file:PATH` and reads the value.
    pub fn parse(arg: &str) -> Result<Fill, FillError> {
        let (name, source) = arg
            .split_once('=')
            .filter(|(n, s)| !n.is_empty() && !s.is_empty())
            .ok_or_else(|| FillError::Syntax(arg.to_string()))?;
        Fill::resolve(name, source)
    }

    /// A name and its source (`env:VAR`, `file:PATH`), as in `--fill` or the `[fill]` table.
    pub fn resolve(name: &str, source: &str) -> Result<Fill, FillError> {
        let value = if let Some(var) = source.strip_prefix("env:") {
            std::env::var(var).map_err(|_| FillError::NoVar {
                name: name.into(),
                var: var.into(),
            })?
        } else if let Some(path) = source.strip_prefix("file:") {
            let text = std::fs::read_to_string(path).map_err(|cause| FillError::File {
                name: name.into(),
                path: path.into(),
                cause,
            })?;
            text.trim_end_matches(['\n', '\r']).to_string()
        } else {
            return Err(FillError::Literal { name: name.into() });
        };
        Ok(Fill {
            name: name.to_string(),
            value,
        })
    }

    fn fills(&self, rule: &str) -> bool {
        rule == self.name
            || rule
                .strip_prefix("key:")
                .is_some_and(|k| k.eq_ignore_ascii_case(&self.name.replace(['-', ' '], "_")))
    }
}

/// Puts fills into recorded requests, and remembers the markers it had no fill for.
#[derive(Default)]
pub(crate) struct Filler {
    fills: Vec<Fill>,
    unfilled: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Filler {
    /// Names only: the values are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.fills.iter().map(|x| x.name.as_str()).collect();
        f.debug_struct("Filler").field("names", &names).finish()
    }
}

impl Filler {
    /// A filler with these fills; where two fill one marker, the first is used.
    pub fn new(fills: Vec<Fill>) -> Filler {
        Filler {
            fills,
            unfilled: Mutex::default(),
        }
    }

    /// The exact secrets for the observed tape's redactor (rule `fill:NAME`).
    pub fn literals(&self) -> Vec<(String, String)> {
        self.fills
            .iter()
            .map(|f| (format!("fill:{}", f.name), f.value.clone()))
            .collect()
    }

    /// A recorded request (raw JSON) with its markers filled where a fill names them.
    pub fn fill(&self, request: &str) -> String {
        if !request.contains(MARKER_PREFIX) {
            return request.to_string();
        }
        let mut out = String::with_capacity(request.len());
        let mut last = 0;
        for m in crate::redact::marker_re().find_iter(request) {
            let marker = m.as_str();
            let rule = marker_rule(marker).unwrap_or(marker);
            match self.fills.iter().find(|f| f.fills(rule)) {
                Some(f) if is_marker(marker) => {
                    out.push_str(&request[last..m.start()]);
                    out.push_str(&escaped(&f.value, depth(&request[..m.start()])));
                }
                _ => {
                    self.unfilled
                        .lock()
                        .expect("unfilled lock")
                        .insert(rule.to_string());
                    out.push_str(&request[last..m.end()]);
                }
            }
            last = m.end();
        }
        out.push_str(&request[last..]);
        out
    }

    /// The rules of markers sent as they were, once each.
    pub fn unfilled(&self) -> Vec<String> {
        self.unfilled
            .lock()
            .expect("unfilled lock")
            .iter()
            .cloned()
            .collect()
    }
}

/// How many times the string the marker stands in is escaped: a marker right after `"` is in
/// a plain string, after `\"` in JSON inside a string, and so on (anywhere else, one level).
fn depth(before: &str) -> usize {
    let Some(rest) = before.strip_suffix('"') else {
        return 1;
    };
    let slashes = rest.len() - rest.trim_end_matches('\\').len();
    // 0 backslashes: one level; 1: two; 3: three (each level doubles them and adds one).
    let mut level = 1;
    let mut n = 0;
    while n < slashes {
        n = 2 * n + 1;
        level += 1;
    }
    level
}

/// `value` as the content of a JSON string, `levels` deep.
fn escaped(value: &str, levels: usize) -> String {
    let mut v = value.to_string();
    for _ in 0..levels {
        let q = serde_json::to_string(&v).expect("strings serialize");
        v = q[1..q.len() - 1].to_string();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filler() -> Filler {
        Filler::new(vec![
            Fill {
                name: "api_key".into(),
                value: "sk-\"real\"".into(),
            },
            Fill {
                name: "openai-key".into(),
                value: "sk-proj-abc".into(),
            },
        ])
    }

    #[test]
    fn markers_named_by_a_fill_get_the_value_escaped_for_where_they_are() {
        let f = filler();
        let req = r#"{"params":{"arguments":{"api_key":"[REDACTED:key:api_key:0a1b2c3d]","note":"use [REDACTED:openai-key:11223344] now","payload":"{\"api_key\":\"[REDACTED:key:api_key:0a1b2c3d]\"}","pw":"[REDACTED:key:password:44556677]"}}}"#;
        let out = f.fill(req);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let a = &v["params"]["arguments"];
        assert_eq!(a["api_key"], "sk-\"real\"");
        assert_eq!(a["note"], "use sk-proj-abc now");
        let inner: serde_json::Value =
            serde_json::from_str(a["payload"].as_str().unwrap()).unwrap();
        assert_eq!(inner["api_key"], "sk-\"real\"");
        assert!(is_marker(a["pw"].as_str().unwrap()));
        assert_eq!(f.unfilled(), ["key:password"]);
    }

    #[test]
    fn sources_are_the_environment_or_a_file_never_the_command_line() {
        std::env::set_var("MCPTAPE_FILL_TEST", "v1");
        assert_eq!(Fill::parse("k=env:MCPTAPE_FILL_TEST").unwrap().value, "v1");
        assert!(matches!(
            Fill::parse("k=hunter2"),
            Err(FillError::Literal { .. })
        ));
        assert!(matches!(
            Fill::parse("k=env:MCPTAPE_NO_SUCH_VAR_42"),
            Err(FillError::NoVar { .. })
        ));
        assert!(matches!(Fill::parse("novalue"), Err(FillError::Syntax(_))));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, "from-file\n").unwrap();
        assert_eq!(
            Fill::parse(&format!("k=file:{}", p.display()))
                .unwrap()
                .value,
            "from-file"
        );
    }
}
