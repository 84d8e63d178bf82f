//! Which calls play sends to the live server whatever the tape holds: `--live SELECTOR…` (those,
//! the rest from the tape) or `--from-tape SELECTOR…` (those from the tape, every other call
//! live). A selector is `tool:NAME`, `resource:URI` or `prompt:NAME`; a bare name is a tool; a
//! trailing `*` matches any rest (`tool:db_*`, `resource:file:///tmp/*`). Only calls are
//! selected (`tools/call`, `resources/read`, `prompts/get`): the handshake and the lists
//! always come from the tape.

use serde_json::Value;

/// What a selector names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `tools/call` by `name`.
    Tool,
    /// `resources/read` by `uri`.
    Resource,
    /// `prompts/get` by `name`.
    Prompt,
}

impl Kind {
    fn of_method(method: &str) -> Option<Kind> {
        Some(match method {
            "tools/call" => Kind::Tool,
            "resources/read" => Kind::Resource,
            "prompts/get" => Kind::Prompt,
            _ => return None,
        })
    }
}

/// One `--live` / `--from-tape` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// What it names.
    pub kind: Kind,
    /// The name or URI; a trailing `*` matches any rest.
    pub pattern: String,
}

impl std::str::FromStr for Selector {
    type Err = String;

    /// `tool:NAME`, `resource:URI`, `prompt:NAME`, or a bare tool name.
    fn from_str(s: &str) -> Result<Selector, String> {
        let (kind, pattern) = match s.split_once(':') {
            Some(("tool", rest)) => (Kind::Tool, rest),
            Some(("resource", rest)) => (Kind::Resource, rest),
            Some(("prompt", rest)) => (Kind::Prompt, rest),
            Some((other, _)) if !other.contains('/') && !s.contains("://") => {
                return Err(format!(
                    "{s:?}: unknown kind {other:?} (tool:NAME, resource:URI, prompt:NAME, or a bare tool name)"
                ))
            }
            _ => (Kind::Tool, s),
        };
        if pattern.is_empty() {
            return Err(format!("{s:?}: nothing after the kind"));
        }
        Ok(Selector {
            kind,
            pattern: pattern.to_string(),
        })
    }
}

impl Selector {
    fn matches(&self, kind: Kind, target: &str) -> bool {
        self.kind == kind
            && match self.pattern.strip_suffix('*') {
                Some(prefix) => target.starts_with(prefix),
                None => target == self.pattern,
            }
    }
}

/// The calls that go live whatever the tape holds.
#[derive(Debug, Clone, Default)]
pub enum Selection {
    /// None (`--on-miss live` alone: only misses go live).
    #[default]
    None,
    /// These calls (`--live`).
    Live(Vec<Selector>),
    /// Every call but these (`--from-tape`).
    AllBut(Vec<Selector>),
}

impl Selection {
    /// Whether the request (`method` with `params`) goes to the live server, not the tape.
    pub fn goes_live(&self, method: &str, params: Option<&Value>) -> bool {
        let Some(kind) = Kind::of_method(method) else {
            return false;
        };
        let target = crate::wire::params::target_of(Some(method), params).unwrap_or_default();
        match self {
            Selection::None => false,
            Selection::Live(s) => s.iter().any(|s| s.matches(kind, &target)),
            Selection::AllBut(s) => !s.iter().any(|s| s.matches(kind, &target)),
        }
    }

    /// Whether any call is chosen at all.
    pub fn is_none(&self) -> bool {
        matches!(self, Selection::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(s: &str) -> Selector {
        s.parse().unwrap()
    }

    #[test]
    fn selectors_name_tools_resources_and_prompts() {
        let live = Selection::Live(vec![
            sel("echo"),
            sel("resource:file:///tmp/*"),
            sel("prompt:greet"),
        ]);
        let call = |m: &str, p: Value| live.goes_live(m, Some(&p));
        assert!(call("tools/call", json!({"name": "echo", "arguments": {}})));
        assert!(!call("tools/call", json!({"name": "echo2"})));
        assert!(call("resources/read", json!({"uri": "file:///tmp/a.txt"})));
        assert!(!call(
            "resources/read",
            json!({"uri": "file:///etc/passwd"})
        ));
        assert!(call("prompts/get", json!({"name": "greet"})));
        assert!(!call("prompts/get", json!({"name": "echo"})));
        assert!(!call("tools/list", json!({})));
        let but = Selection::AllBut(vec![sel("tool:add")]);
        assert!(!but.goes_live("tools/call", Some(&json!({"name": "add"}))));
        assert!(but.goes_live("tools/call", Some(&json!({"name": "echo"}))));
        assert!(but.goes_live("resources/read", Some(&json!({"uri": "x:y"}))));
        assert!(!but.goes_live("initialize", Some(&json!({}))));
        assert_eq!(sel("resource:https://x/y").pattern, "https://x/y");
        assert!("tol:echo"
            .parse::<Selector>()
            .unwrap_err()
            .contains("unknown kind"));
        assert!("tool:".parse::<Selector>().is_err());
    }
}
