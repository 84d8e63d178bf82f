//! Secrets never reach the tape. A redactor runs on every message before it is written: values
//! under sensitive keys, credential shapes inside strings, long high-entropy opaque strings, and
//! the user's own rules are replaced by a marker `[REDACTED:<rule>:<hash>]`. The hash is an
//! HMAC with a random per-tape key that is never stored: equal secrets stay equal within a tape
//! (so a replayed session still lines up), and nothing about them can be learned from it.
//!
//! A cheap byte-level prefilter (`prefilter.rs`) decides whether a message needs the full JSON
//! walk, so the common message costs a scan at memory speed, not a parse.

mod prefilter;
pub mod rules;

use hmac::{Hmac, Mac};
use regex::Regex;
use serde_json::{Map, Value};
use serde_json_path::JsonPath;
use sha2::Sha256;
use std::collections::BTreeSet;

pub const MARKER_PREFIX: &str = "[REDACTED:";

/// Whether a string is (exactly) a redaction marker.
pub fn is_marker(s: &str) -> bool {
    s.starts_with(MARKER_PREFIX) && s.ends_with(']') && !s[MARKER_PREFIX.len()..].contains('[')
}

/// A marker without its per-tape hash (`[REDACTED:openai-key]`): what matching compares, so
/// tapes redacted with different keys still line up.
pub fn marker_rule(s: &str) -> Option<&str> {
    if !is_marker(s) {
        return None;
    }
    let inner = &s[MARKER_PREFIX.len()..s.len() - 1];
    Some(
        inner
            .rsplit_once(':')
            .map(|(rule, _)| rule)
            .unwrap_or(inner),
    )
}

/// User rules, from flags and `.mcptape/config.toml`.
#[derive(Debug, Clone, Default)]
pub struct RedactConfig {
    /// Apply the built-in rules (on unless `--no-default-redaction`).
    pub defaults: bool,
    /// Extra sensitive keys (`--redact KEY`).
    pub keys: Vec<String>,
    /// Extra patterns (`--redact re:REGEX`).
    pub patterns: Vec<String>,
    /// JSONPath queries over each message (`--redact path:JSONPATH`).
    pub paths: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("invalid redaction regex {pattern:?}: {message}")]
    Regex { pattern: String, message: String },
    #[error("invalid redaction path {path:?}: {message}")]
    Path { path: String, message: String },
}

impl RedactConfig {
    pub fn defaults() -> RedactConfig {
        RedactConfig {
            defaults: true,
            ..RedactConfig::default()
        }
    }

    /// Adds one `--redact` argument: `re:REGEX`, `path:JSONPATH`, or a key name.
    pub fn add_rule(&mut self, rule: &str) {
        if let Some(re) = rule.strip_prefix("re:") {
            self.patterns.push(re.to_string());
        } else if let Some(p) = rule.strip_prefix("path:") {
            self.paths.push(p.to_string());
        } else {
            self.keys.push(rule.to_string());
        }
    }

    pub fn is_off(&self) -> bool {
        !self.defaults && self.keys.is_empty() && self.patterns.is_empty() && self.paths.is_empty()
    }
}

/// One thing the redactor found (for `lint`) or replaced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub rule: String,
    /// JSONPath of the value inside the message.
    pub path: String,
}

pub struct Redactor {
    key: [u8; 32],
    defaults: bool,
    keys: BTreeSet<String>,
    shapes: Vec<(String, Regex)>,
    auth_scheme: Regex,
    url_param: Regex,
    url_credentials: Regex,
    assignment: Regex,
    paths: Vec<(String, JsonPath)>,
    prefilter: prefilter::Prefilter,
}

fn squash(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

impl Redactor {
    pub fn new(cfg: &RedactConfig) -> Result<Redactor, RuleError> {
        let mut key = [0u8; 32];
        fill_random(&mut key);
        let mut keys: BTreeSet<String> = cfg.keys.iter().map(|k| squash(k)).collect();
        let mut shapes = Vec::new();
        if cfg.defaults {
            keys.extend(rules::SENSITIVE_KEYS.iter().map(|k| k.to_string()));
            for (name, re) in rules::SHAPES {
                shapes.push((name.to_string(), Regex::new(re).expect("built-in regex")));
            }
        }
        for p in &cfg.patterns {
            let re = Regex::new(p).map_err(|e| RuleError::Regex {
                pattern: p.clone(),
                message: e.to_string(),
            })?;
            shapes.push(("user-regex".to_string(), re));
        }
        let mut paths = Vec::new();
        for p in &cfg.paths {
            let jp = JsonPath::parse(p).map_err(|e| RuleError::Path {
                path: p.clone(),
                message: e.to_string(),
            })?;
            paths.push((p.clone(), jp));
        }
        // The prefilter: any sensitive key as a JSON key (also escaped, inside embedded JSON),
        // any shape, any auth scheme or URL parameter. High-entropy candidates are found by a
        // separate scan.
        let mut pre: Vec<String> = Vec::new();
        if !keys.is_empty() {
            // Keys are matched loosely here (any case, `-`/`_` anywhere); the walk is exact.
            let alts: Vec<String> = keys
                .iter()
                .map(|k| {
                    k.chars()
                        .map(|c| format!("{}[-_]?", regex::escape(&c.to_string())))
                        .collect::<String>()
                })
                .collect();
            pre.push(format!(r#"(?i)\\?"(?:{})\\?"\s*:"#, alts.join("|")));
        }
        for (_, re) in &shapes {
            pre.push(re.as_str().to_string());
        }
        if cfg.defaults {
            pre.push(rules::AUTH_SCHEME.to_string());
            pre.push(rules::URL_PARAM.to_string());
            pre.push(rules::URL_CREDENTIALS.to_string());
            pre.push(rules::ASSIGNMENT.to_string());
            // Keys ending in a sensitive word, also inside embedded JSON (`\"db_password\":`).
            let suffixes: Vec<String> = rules::SENSITIVE_SUFFIXES
                .iter()
                .map(|k| regex::escape(k))
                .collect();
            pre.push(format!(
                r#"(?i)[a-z0-9_\-]*(?:{})\\?"\s*:"#,
                suffixes.join("|")
            ));
        }
        let regex_err = |e: regex::Error| RuleError::Regex {
            pattern: pre.join(" | "),
            message: e.to_string(),
        };
        let full = regex::bytes::RegexSet::new(&pre).map_err(regex_err)?;
        let prefilter = prefilter::Prefilter::new(&keys, cfg.defaults, &cfg.patterns, full)
            .map_err(regex_err)?;
        Ok(Redactor {
            key,
            defaults: cfg.defaults,
            keys,
            shapes,
            auth_scheme: Regex::new(rules::AUTH_SCHEME).expect("built-in regex"),
            url_param: Regex::new(rules::URL_PARAM).expect("built-in regex"),
            url_credentials: Regex::new(rules::URL_CREDENTIALS).expect("built-in regex"),
            assignment: Regex::new(rules::ASSIGNMENT).expect("built-in regex"),
            paths,
            prefilter,
        })
    }

    /// The redactor for a configuration, `None` when redaction is off. The rules must have been
    /// validated with [`Redactor::new`] already (the command line does so before starting).
    pub fn for_config(cfg: &RedactConfig) -> Option<Redactor> {
        if cfg.is_off() {
            return None;
        }
        Some(Redactor::new(cfg).expect("redaction rules validated before use"))
    }

    fn marker(&self, rule: &str, secret: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(secret.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{MARKER_PREFIX}{rule}:{}]", hex(&tag[..4]))
    }

    /// Whether the message might hold a secret (cheap; false means certainly not).
    fn may_need(&self, bytes: &[u8]) -> bool {
        !self.paths.is_empty()
            || self.prefilter.may_match(bytes)
            || (self.defaults && prefilter::has_entropy_candidate(bytes))
    }

    /// The redacted message, or `None` when nothing had to change (the bytes stay verbatim).
    /// Only `params`, `result` and `error` are looked into: the envelope (`jsonrpc`, `id`,
    /// `method`) is protocol, never a secret.
    pub fn redact_json(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        if !self.may_need(bytes) {
            return None;
        }
        let mut v: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            // Too deep for a Value (serde_json stops at 128 levels): redact it as text. Markers
            // hold no quote or backslash, so the result is still the same JSON shape; it is
            // checked (without recursion) before it is used.
            Err(_) => {
                let text = std::str::from_utf8(bytes).ok()?;
                let (out, rules) = self.redact_text(text)?;
                return match serde_json::from_str::<&serde_json::value::RawValue>(&out) {
                    Ok(_) => Some((out.into_bytes(), rules)),
                    Err(_) => Some((serde_json::to_vec(&out).expect("strings serialize"), rules)),
                };
            }
        };
        let mut found = Vec::new();
        self.redact_value(&mut v, &mut found);
        if found.is_empty() {
            return None;
        }
        let mut rules: Vec<String> = found.into_iter().map(|f| f.rule).collect();
        rules.sort();
        rules.dedup();
        Some((serde_json::to_vec(&v).expect("a Value serializes"), rules))
    }

    /// Redacts in place, returning what was replaced (rule and path).
    pub fn redact_value(&self, v: &mut Value, found: &mut Vec<Finding>) {
        match v {
            Value::Object(map) => {
                // Everything but the envelope: `params`/`result`/`error` of a JSON-RPC message,
                // and every field of JSON that is not one (a log line on stdout, say).
                for (key, child) in map.iter_mut() {
                    if matches!(key.as_str(), "jsonrpc" | "id" | "method") {
                        continue;
                    }
                    let path = crate::wire::canonical::child_path("$", key);
                    if self.is_sensitive_key(key) {
                        self.redact_all_strings(child, key, &path, found);
                    } else {
                        self.walk(child, Some(key), &path, found);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    let before = found.len();
                    self.redact_value(item, found);
                    for f in &mut found[before..] {
                        f.path = format!("$[{i}]{}", &f.path[1..]);
                    }
                }
            }
            _ => {}
        }
        for (name, path) in &self.paths {
            let locations: Vec<String> = path
                .query_located(v)
                .locations()
                .map(|l| l.to_json_pointer())
                .collect();
            for ptr in locations {
                if let Some(node) = v.pointer_mut(&ptr) {
                    if node.as_str().is_some_and(is_marker) {
                        continue;
                    }
                    let secret = match &*node {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    *node = Value::String(self.marker("user-path", &secret));
                    found.push(Finding {
                        rule: "user-path".into(),
                        path: format!("{name} ({ptr})"),
                    });
                }
            }
        }
    }

    /// A command line with its secrets out: each argument as text (shapes, assignments such as
    /// `TOKEN=…` or `--api-key=…`), and the argument after a flag named like a sensitive key
    /// (`--password hunter2`).
    pub fn redact_argv(&self, argv: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(argv.len());
        let mut secret_next = false;
        for arg in argv {
            if secret_next && !arg.starts_with('-') {
                out.push(self.marker("argument", arg));
                secret_next = false;
                continue;
            }
            secret_next = false;
            let flag = arg.trim_start_matches('-');
            if arg.starts_with('-') && !flag.contains('=') && self.is_sensitive_key(flag) {
                secret_next = true;
            }
            let assign = arg
                .split_once('=')
                .filter(|(k, _)| self.is_sensitive_key(k.trim_start_matches('-')));
            match assign {
                Some((k, v)) if !v.is_empty() => {
                    out.push(format!("{k}={}", self.marker("argument", v)))
                }
                _ => out.push(
                    self.redact_text(arg)
                        .map(|(t, _)| t)
                        .unwrap_or_else(|| arg.clone()),
                ),
            }
        }
        out
    }

    /// Redacts a line that is not UTF-8: what can be read of it is redacted as text, and when a
    /// secret is found the line is kept as that redacted text (the secret matters more than the
    /// exact bytes). `None`: nothing found, keep the bytes.
    pub fn redact_bytes(&self, bytes: &[u8]) -> Option<(String, Vec<String>)> {
        self.redact_text(&String::from_utf8_lossy(bytes))
    }

    /// Redacts a non-JSON line (a server's log line on stdout, say): shapes, schemes, URL
    /// credentials and parameters, `name = value` assignments, and `"key": "value"` pairs of
    /// sensitive keys in JSON-looking text that did not parse (a cut-off line).
    pub fn redact_text(&self, text: &str) -> Option<(String, Vec<String>)> {
        if !self.prefilter.may_match(text.as_bytes()) {
            return None;
        }
        let mut found = Vec::new();
        // Whole values under sensitive keys first: a shape or assignment rule matching only part
        // of such a value must not leave the rest of it behind.
        let mut out = text.to_string();
        let kv = key_value_re();
        if kv.is_match(&out) {
            out = kv
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    if !self.is_sensitive_key(&c[1]) || is_marker(&c[3]) {
                        return c[0].to_string();
                    }
                    let rule = format!("key:{}", c[1].to_ascii_lowercase());
                    found.push(Finding {
                        rule: rule.clone(),
                        path: "$".into(),
                    });
                    format!("\"{}\"{}\"{}\"", &c[1], &c[2], self.marker(&rule, &c[3]))
                })
                .into_owned();
        }
        out = self.scrub(&out, "$", &mut found);
        (!found.is_empty()).then(|| (out, found.into_iter().map(|f| f.rule).collect()))
    }

    fn walk(&self, v: &mut Value, key: Option<&str>, path: &str, found: &mut Vec<Finding>) {
        match v {
            Value::Object(map) => self.walk_map(map, path, found),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.walk(item, key, &format!("{path}[{i}]"), found);
                }
            }
            Value::String(s) => {
                if is_marker(s) {
                    return;
                }
                // JSON held in a string (a tool's text result, say) is redacted as JSON.
                let t = s.trim_start();
                if (t.starts_with('{') || t.starts_with('[')) && s.len() < 16 * 1024 * 1024 {
                    if let Ok(mut inner) = serde_json::from_str::<Value>(s) {
                        let before = found.len();
                        self.walk(&mut inner, None, path, found);
                        if found.len() > before {
                            *s = serde_json::to_string(&inner).expect("a Value serializes");
                        }
                        return;
                    }
                }
                let scrubbed = self.scrub(s, path, found);
                if scrubbed != *s {
                    *s = scrubbed;
                    return;
                }
                let media = key.is_some_and(|k| rules::MEDIA_KEYS.contains(&k));
                if self.defaults && !media && is_high_entropy(s) {
                    *s = self.marker("high-entropy", s);
                    found.push(Finding {
                        rule: "high-entropy".into(),
                        path: path.to_string(),
                    });
                }
            }
            _ => {}
        }
    }

    fn walk_map(&self, map: &mut Map<String, Value>, path: &str, found: &mut Vec<Finding>) {
        for (k, child) in map.iter_mut() {
            let child_path = crate::wire::canonical::child_path(path, k);
            if rules::PROTOCOL_KEYS.contains(&k.as_str()) {
                continue;
            }
            if self.is_sensitive_key(k) {
                self.redact_all_strings(child, k, &child_path, found);
                continue;
            }
            self.walk(child, Some(k), &child_path, found);
        }
    }

    /// Every string under a sensitive key goes, whatever it looks like.
    fn is_sensitive_key(&self, key: &str) -> bool {
        let k = squash(key);
        self.keys.contains(&k)
            || (self.defaults && rules::SENSITIVE_SUFFIXES.iter().any(|s| k.ends_with(s)))
    }

    fn redact_all_strings(&self, v: &mut Value, key: &str, path: &str, found: &mut Vec<Finding>) {
        match v {
            Value::Number(n) => {
                let rule = format!("key:{}", key.to_ascii_lowercase());
                let secret = n.to_string();
                *v = Value::String(self.marker(&rule, &secret));
                found.push(Finding {
                    rule,
                    path: path.to_string(),
                });
            }
            Value::String(s) if !s.is_empty() && !is_marker(s) => {
                let rule = format!("key:{}", key.to_ascii_lowercase());
                *s = self.marker(&rule, s);
                found.push(Finding {
                    rule,
                    path: path.to_string(),
                });
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.redact_all_strings(item, key, &format!("{path}[{i}]"), found);
                }
            }
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    let p = crate::wire::canonical::child_path(path, k);
                    self.redact_all_strings(child, key, &p, found);
                }
            }
            _ => {}
        }
    }

    /// Shapes, auth schemes and URL parameters replaced inside a string.
    fn scrub(&self, s: &str, path: &str, found: &mut Vec<Finding>) -> String {
        let mut out = s.to_string();
        for (name, re) in &self.shapes {
            if re.is_match(&out) {
                out = re
                    .replace_all(&out, |c: &regex::Captures<'_>| {
                        found.push(Finding {
                            rule: name.clone(),
                            path: path.to_string(),
                        });
                        self.marker(name, &c[0])
                    })
                    .into_owned();
            }
        }
        if self.defaults {
            if self.auth_scheme.is_match(&out) {
                out = self
                    .auth_scheme
                    .replace_all(&out, |c: &regex::Captures<'_>| {
                        if c[2].starts_with(MARKER_PREFIX) || c[2].len() < 8 {
                            return c[0].to_string();
                        }
                        let rule = c[1].to_ascii_lowercase();
                        found.push(Finding {
                            rule: rule.clone(),
                            path: path.to_string(),
                        });
                        format!("{} {}", &c[1], self.marker(&rule, &c[2]))
                    })
                    .into_owned();
            }
            if self.url_credentials.is_match(&out) {
                out = self
                    .url_credentials
                    .replace_all(&out, |c: &regex::Captures<'_>| {
                        if c[2].starts_with(MARKER_PREFIX) {
                            return c[0].to_string();
                        }
                        found.push(Finding {
                            rule: "url-credentials".into(),
                            path: path.to_string(),
                        });
                        format!(
                            "{}{}{}",
                            &c[1],
                            self.marker("url-credentials", &c[2]),
                            &c[3]
                        )
                    })
                    .into_owned();
            }
            if self.url_param.is_match(&out) {
                out = self
                    .url_param
                    .replace_all(&out, |c: &regex::Captures<'_>| {
                        if c[2].starts_with(MARKER_PREFIX) {
                            return c[0].to_string();
                        }
                        found.push(Finding {
                            rule: "url-param".into(),
                            path: path.to_string(),
                        });
                        format!("{}{}", &c[1], self.marker("url-param", &c[2]))
                    })
                    .into_owned();
            }
        }
        if self.assignment.is_match(&out) {
            // Not inside a marker already written (`[REDACTED:aws-access-key:…]`).
            let spans: Vec<(usize, usize)> = marker_re()
                .find_iter(&out)
                .map(|m| (m.start(), m.end()))
                .collect();
            out = self
                .assignment
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let at = c.get(0).map_or(0, |m| m.start());
                    if c[3].starts_with(MARKER_PREFIX)
                        || spans.iter().any(|&(a, b)| a <= at && at < b)
                    {
                        return c[0].to_string();
                    }
                    found.push(Finding {
                        rule: "assignment".into(),
                        path: path.to_string(),
                    });
                    format!("{}{}{}", &c[1], &c[2], self.marker("assignment", &c[3]))
                })
                .into_owned();
        }
        out
    }
}

/// Is this whole string a long opaque token (see `rules::ENTROPY_*`)?
pub fn is_high_entropy(s: &str) -> bool {
    let n = s.len();
    if !(rules::ENTROPY_MIN_LEN..=rules::ENTROPY_MAX_LEN).contains(&n) {
        return false;
    }
    let bytes = s.as_bytes();
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(b))
    {
        return false;
    }
    if rules::NOT_SECRET_PREFIXES.iter().any(|p| s.starts_with(p)) {
        return false;
    }
    // A path or file name (`docs/Architecture-Overview-2024.md`) is not a token.
    let file_like = s.rsplit_once('.').is_some_and(|(_, ext)| {
        (1..=5).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphabetic())
    });
    if s.contains('/') && file_like {
        return false;
    }
    let digits = bytes.iter().filter(|b| b.is_ascii_digit()).count();
    if (digits as f64) < rules::ENTROPY_MIN_DIGITS * n as f64 {
        return false;
    }
    let (upper, lower, digit) = (
        bytes.iter().any(u8::is_ascii_uppercase),
        bytes.iter().any(u8::is_ascii_lowercase),
        bytes.iter().any(u8::is_ascii_digit),
    );
    if !(upper && lower && digit) {
        return false;
    }
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum();
    entropy >= rules::ENTROPY_MIN_BITS
}

/// A quoted run of token characters of candidate length somewhere in the bytes.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Random bytes from the OS; a clock-and-pid mix only if /dev/urandom is unreadable.
fn fill_random(buf: &mut [u8]) {
    use std::io::Read;
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .is_ok()
    {
        return;
    }
    let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
    let digest = <Sha256 as sha2::Digest>::digest(seed.as_bytes());
    for (b, d) in buf.iter_mut().zip(digest.iter().cycle()) {
        *b = *d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn red(msg: Value) -> (Value, Vec<String>) {
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        match r.redact_json(msg.to_string().as_bytes()) {
            Some((bytes, rules)) => (serde_json::from_slice(&bytes).unwrap(), rules),
            None => (msg, vec![]),
        }
    }

    #[test]
    fn secrets_are_replaced_and_ordinary_content_kept() {
        let (v, rules) = red(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "name":"deploy",
            "arguments":{"apiKey":"hunter2","config":{"Authorization":"Bearer abcdefghijk"},
                "note":"use sk-ant-api03-abcdefghijklmnopqrstuvwxyz please",
                "url":"https://x.test/a?token=s3cr3tvalue&page=2",
                "hash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                "uuid":"123e4567-e89b-12d3-a456-426614174000",
                "opaque":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA",
                "image":{"type":"image","data":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA","mimeType":"image/png"},
                "embedded":"{\"password\":\"pw\",\"x\":1}",
                "_meta":{"progressToken":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA"}
            }}}),
        );
        let a = &v["params"]["arguments"];
        assert!(
            a["apiKey"]
                .as_str()
                .unwrap()
                .starts_with("[REDACTED:key:apikey:"),
            "{a}"
        );
        assert!(a["config"]["Authorization"]
            .as_str()
            .unwrap()
            .starts_with("[REDACTED:key:authorization:"));
        assert!(
            a["note"]
                .as_str()
                .unwrap()
                .starts_with("use [REDACTED:anthropic-key:"),
            "{a}"
        );
        assert!(
            a["url"]
                .as_str()
                .unwrap()
                .starts_with("https://x.test/a?token=[REDACTED:url-param:"),
            "{a}"
        );
        assert!(a["url"].as_str().unwrap().ends_with("&page=2"));
        assert_eq!(
            a["hash"],
            json!("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
        );
        assert_eq!(a["uuid"], json!("123e4567-e89b-12d3-a456-426614174000"));
        assert!(a["opaque"]
            .as_str()
            .unwrap()
            .starts_with("[REDACTED:high-entropy:"));
        assert_eq!(
            a["image"]["data"],
            json!("Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA")
        );
        assert!(
            a["embedded"]
                .as_str()
                .unwrap()
                .contains("[REDACTED:key:password:"),
            "{a}"
        );
        assert_eq!(
            a["_meta"]["progressToken"],
            json!("Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA")
        );
        assert_eq!(v["id"], json!(1));
        assert!(rules.contains(&"high-entropy".to_string()));
    }

    #[test]
    fn equal_secrets_get_equal_markers_within_a_redactor() {
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        let m1 = r.redact_json(br#"{"params":{"token":"abc"}}"#).unwrap().0;
        let m2 = r
            .redact_json(br#"{"result":{"x":{"token":"abc"}}}"#)
            .unwrap()
            .0;
        let v1: Value = serde_json::from_slice(&m1).unwrap();
        let v2: Value = serde_json::from_slice(&m2).unwrap();
        assert_eq!(v1["params"]["token"], v2["result"]["x"]["token"]);
        assert_eq!(
            marker_rule(v1["params"]["token"].as_str().unwrap()),
            Some("key:token")
        );
    }

    #[test]
    fn plain_messages_are_left_verbatim() {
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        assert!(r.redact_json(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"The sum of 2 and 3 is 5."}]}}"#).is_none());
        assert!(r.redact_json(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get","arguments":{"maxTokens":100}}}"#).is_none());
    }

    #[test]
    fn user_rules_and_defaults_off() {
        let mut cfg = RedactConfig {
            defaults: false,
            ..Default::default()
        };
        cfg.add_rule("x-internal");
        cfg.add_rule("re:corp-[0-9]{4}");
        cfg.add_rule("path:$.params.arguments.pin");
        let r = Redactor::new(&cfg).unwrap();
        let (bytes, rules) = r
            .redact_json(br#"{"params":{"arguments":{"X_Internal":"v","id":"corp-1234","pin":1234,"apiKey":"kept"}}}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let a = &v["params"]["arguments"];
        assert!(a["X_Internal"]
            .as_str()
            .unwrap()
            .starts_with("[REDACTED:key:x_internal:"));
        assert!(a["id"]
            .as_str()
            .unwrap()
            .starts_with("[REDACTED:user-regex:"));
        assert!(a["pin"]
            .as_str()
            .unwrap()
            .starts_with("[REDACTED:user-path:"));
        assert_eq!(a["apiKey"], json!("kept"), "defaults are off");
        assert_eq!(rules, ["key:x_internal", "user-path", "user-regex"]);
        assert!(Redactor::new(&RedactConfig {
            patterns: vec!["(".into()],
            ..Default::default()
        })
        .is_err());
    }

    #[test]
    fn a_value_under_a_sensitive_key_goes_whole_in_text() {
        // Found by fuzzing: in text (a line that is not valid JSON), the assignment rule took
        // `api_key":"sk-…` only up to a comma and left the rest of the secret behind.
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        let (t, _) = r
            .redact_text("{\"api_key\":\"sk-\u{10}defghijklmn,pqrstuvwxyz012345\"}")
            .unwrap();
        assert!(!t.contains("pqrstuvwxyz012345"), "{t}");
        assert!(t.contains("\"api_key\":\"[REDACTED:key:api_key:"), "{t}");
    }

    #[test]
    fn text_lines_are_scrubbed() {
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        let (t, rules) = r
            .redact_text("starting with key AKIAABCDEFGHIJKLMNOP")
            .unwrap();
        assert!(
            t.starts_with("starting with key [REDACTED:aws-access-key:"),
            "{t}"
        );
        assert_eq!(rules, ["aws-access-key"]);
    }
}

/// Whether a string holds a marker anywhere.
pub fn has_marker(s: &str) -> bool {
    s.contains(MARKER_PREFIX)
}

/// Markers reduced to their rule (`[REDACTED:openai-key]`), for matching across tapes whose
/// per-tape hash keys differ.
pub fn strip_marker_hashes(v: &mut Value) {
    match v {
        Value::String(s) if has_marker(s) => {
            let re = marker_re();
            let out = re.replace_all(s, |c: &regex::Captures<'_>| {
                format!("{MARKER_PREFIX}{}]", &c[1])
            });
            if out != s.as_str() {
                *s = out.into_owned();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_marker_hashes),
        Value::Object(map) => map.values_mut().for_each(strip_marker_hashes),
        _ => {}
    }
}

fn key_value_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#""([A-Za-z0-9_\-]{2,64})"(\s*:\s*)"([^"\\]{1,4096})""#).expect("valid regex")
    })
}

fn marker_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\[REDACTED:([a-z0-9:_\-]+?)(?::[0-9a-f]{8})?\]").expect("valid regex")
    })
}

/// Does `actual` fit `recorded`, where every marker in `recorded` stands for any value? A whole
/// marker matches any JSON value; a marker inside a string matches any text there.
pub fn wildcard_eq(recorded: &Value, actual: &Value) -> bool {
    match (recorded, actual) {
        (Value::String(r), _) if is_marker(r) => true,
        (Value::String(r), Value::String(a)) if has_marker(r) => {
            let mut pattern = String::from("^");
            let mut last = 0;
            for m in marker_re().find_iter(r) {
                pattern.push_str(&regex::escape(&r[last..m.start()]));
                pattern.push_str("(?s:.+?)");
                last = m.end();
            }
            pattern.push_str(&regex::escape(&r[last..]));
            pattern.push('$');
            Regex::new(&pattern)
                .map(|re| re.is_match(a))
                .unwrap_or(false)
        }
        (Value::Object(r), Value::Object(a)) => {
            r.len() == a.len()
                && r.iter()
                    .all(|(k, rv)| a.get(k).is_some_and(|av| wildcard_eq(rv, av)))
        }
        (Value::Array(r), Value::Array(a)) => {
            r.len() == a.len() && r.iter().zip(a).all(|(x, y)| wildcard_eq(x, y))
        }
        (r, a) => r == a,
    }
}

#[cfg(test)]
mod wildcard_tests {
    use super::*;
    use serde_json::json;

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
    }
}
