//! Secrets never reach the tape. A redactor runs on every line before it is written: values
//! under sensitive keys, credential shapes inside strings, long high-entropy opaque strings, and
//! the user's own rules are replaced by a marker `[REDACTED:<rule>:<hash>]`. The hash is an
//! HMAC with a random per-tape key that is never stored: equal secrets stay equal within a tape
//! (so a replayed session still lines up), and nothing about them can be learned from it.
//!
//! Only a secret's own bytes change (`json.rs`): a redacted message is the original with each
//! secret's raw span replaced by its marker, so play still serves what the server said, key
//! order, whitespace and number spelling included. Structure is never redacted: an object under
//! a sensitive key is walked, and a JSON Schema's keywords are never taken for secrets.
//!
//! A cheap byte-level prefilter (`prefilter.rs`) decides whether a message needs the walk at
//! all, so the common message costs a scan at memory speed.

mod json;
mod marker;
mod prefilter;
pub mod rules;
mod text;

pub(crate) use marker::marker_re;
pub use marker::{
    has_marker, is_marker, marker_rule, strip_marker_hashes, wildcard_eq, wildcard_eq_either,
    MARKER_PREFIX,
};

use hmac::{Hmac, Mac};
use regex::Regex;
use serde_json::Value;
use serde_json_path::JsonPath;
use sha2::Sha256;
use std::collections::BTreeSet;

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
    /// Exact values that are secrets wherever they appear, with the rule they are reported
    /// under (`check --fill`: the real values put back for the live call must not come back
    /// onto the observed tape through an echo).
    pub literals: Vec<(String, String)>,
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
        !self.defaults
            && self.keys.is_empty()
            && self.patterns.is_empty()
            && self.paths.is_empty()
            && self.literals.is_empty()
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
    literals: Vec<(String, String)>,
    auth_scheme: Regex,
    url_param: Regex,
    url_credentials: Regex,
    assignment: Regex,
    cli_flag: Regex,
    glued_p: Regex,
    keyword: Regex,
    xml_element: Regex,
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
        let literals: Vec<(String, String)> = cfg
            .literals
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .cloned()
            .collect();
        let prefilter = prefilter::Prefilter::new(&keys, cfg.defaults, &cfg.patterns, &literals)
            .map_err(|e| RuleError::Regex {
                pattern: cfg.patterns.join(" | "),
                message: e.to_string(),
            })?;
        Ok(Redactor {
            key,
            defaults: cfg.defaults,
            keys,
            shapes,
            literals,
            auth_scheme: Regex::new(rules::AUTH_SCHEME).expect("built-in regex"),
            url_param: Regex::new(rules::URL_PARAM).expect("built-in regex"),
            url_credentials: Regex::new(rules::URL_CREDENTIALS).expect("built-in regex"),
            assignment: Regex::new(rules::ASSIGNMENT).expect("built-in regex"),
            cli_flag: Regex::new(rules::CLI_FLAG).expect("built-in regex"),
            glued_p: Regex::new(rules::GLUED_P).expect("built-in regex"),
            keyword: Regex::new(rules::KEYWORD).expect("built-in regex"),
            xml_element: Regex::new(rules::XML_ELEMENT).expect("built-in regex"),
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

    pub(crate) fn marker(&self, rule: &str, secret: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(secret.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{MARKER_PREFIX}{rule}:{}]", hex(&tag[..4]))
    }

    /// Whether the message might hold a secret (cheap; false means certainly not).
    fn may_need(&self, bytes: &[u8]) -> bool {
        !self.paths.is_empty()
            || self.prefilter.may_match(bytes)
            || (self.defaults
                && (prefilter::has_entropy_candidate(bytes)
                    || prefilter::has_quoted_token(bytes)
                    || prefilter::has_hidden_text(bytes)))
    }

    /// The redacted message, or `None` when nothing had to change (the bytes stay verbatim).
    /// The result is the input with each secret's bytes replaced by its marker, nothing else
    /// changed. The JSON-RPC envelope (`jsonrpc`, `id`, `method`) is protocol, never a secret.
    pub fn redact_json(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        self.redact_json_found(bytes)
            .map(|(out, found)| (out, rule_names(&found)))
    }

    /// `redact_json`, with what was replaced where (for `lint` and `redact`).
    pub fn redact_json_found(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<Finding>)> {
        self.redact_raw(bytes, json::ENVELOPE, &[], true)
    }

    /// Any JSON object whose top-level keys `kept` are left alone (a tape line's own fields,
    /// HTTP facts that readers pair messages by), the rest redacted as a message is.
    pub fn redact_fields(&self, bytes: &[u8], kept: &[&str]) -> Option<(Vec<u8>, Vec<String>)> {
        self.redact_fields_found(bytes, kept)
            .map(|(out, found)| (out, rule_names(&found)))
    }

    /// `redact_fields`, with what was replaced where.
    pub fn redact_fields_found(
        &self,
        bytes: &[u8],
        kept: &[&str],
    ) -> Option<(Vec<u8>, Vec<Finding>)> {
        self.redact_raw(bytes, kept, &[], false)
    }

    /// HTTP facts: `kept` left alone, the values of `secret` always taken out (a session id is
    /// a credential for as long as the session lives, and its value matters to no reader but
    /// for pairing, which equal markers keep), the rest redacted by the rules.
    pub fn redact_facts(
        &self,
        bytes: &[u8],
        kept: &[&str],
        secret: &[&str],
    ) -> Option<(Vec<u8>, Vec<Finding>)> {
        self.redact_raw(bytes, kept, secret, false)
    }

    fn redact_raw(
        &self,
        bytes: &[u8],
        kept: &[&str],
        secret: &[&str],
        batch: bool,
    ) -> Option<(Vec<u8>, Vec<Finding>)> {
        if secret.is_empty() && !self.may_need(bytes) {
            return None;
        }
        let selected = self.selected_pointers(bytes);
        let mut walk = json::Walk::new(self, &selected, kept).secret_at_top(secret);
        match walk.run(bytes, batch) {
            Ok(()) if walk.splices.is_empty() => None,
            Ok(()) => Some((json::apply(bytes, &walk.splices), walk.found)),
            // Too deep to walk (or not JSON after all): redacted as text. Markers hold no quote
            // or backslash, so the result keeps the JSON shape; it is checked before use.
            Err(json::NotJson) => {
                let text = std::str::from_utf8(bytes).ok()?;
                let (out, rules) = self.redact_text(text)?;
                let found = rules
                    .into_iter()
                    .map(|rule| Finding {
                        rule,
                        path: "$".into(),
                    })
                    .collect();
                match serde_json::from_str::<&serde_json::value::RawValue>(&out) {
                    Ok(_) => Some((out.into_bytes(), found)),
                    Err(_) => Some((serde_json::to_vec(&out).expect("strings serialize"), found)),
                }
            }
        }
    }

    /// Redacts a value in place (for showing what a client asked: explanations quote it).
    pub fn redact_value(&self, v: &mut Value, found: &mut Vec<Finding>) {
        let bytes = serde_json::to_vec(&*v).expect("a Value serializes");
        let selected = self.selected_pointers(&bytes);
        let mut walk = json::Walk::new(self, &selected, json::ENVELOPE);
        if walk.run(&bytes, true).is_ok() && !walk.splices.is_empty() {
            if let Ok(out) = serde_json::from_slice(&json::apply(&bytes, &walk.splices)) {
                *v = out;
                found.extend(walk.found);
            }
        }
    }

    /// The JSON pointers the user's `path:` rules select in a message.
    fn selected_pointers(&self, bytes: &[u8]) -> Vec<String> {
        if self.paths.is_empty() {
            return Vec::new();
        }
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (_, path) in &self.paths {
            out.extend(
                path.query_located(&v)
                    .locations()
                    .map(|l| l.to_json_pointer()),
            );
        }
        out
    }

    /// A string decoded from base64: redacted as JSON when it is JSON, as text otherwise.
    pub(crate) fn redact_str(&self, s: &str) -> Option<(String, Vec<String>)> {
        let t = s.trim_start();
        if t.starts_with('{') || t.starts_with('[') {
            let mut walk = json::Walk::new(self, &[], &[]);
            if walk.run(s.as_bytes(), false).is_ok() {
                if walk.splices.is_empty() {
                    return None;
                }
                let out = json::apply(s.as_bytes(), &walk.splices);
                return Some((
                    String::from_utf8(out).expect("splices keep UTF-8"),
                    rule_names(&walk.found),
                ));
            }
        }
        self.redact_text_as(s, false)
    }

    /// A command line with its secrets out: each argument as text (shapes, assignments such as
    /// `TOKEN=…` or `--api-key=…`), the argument after a flag named like a sensitive key
    /// (`--password hunter2`) or one of `rules::SECRET_FLAGS` (`-p`, `--auth`, `--pat`, …), and
    /// the password of `-u user:pass`.
    pub fn redact_argv(&self, argv: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(argv.len());
        let mut next: Option<&str> = None; // the flag whose value comes next
        for arg in argv {
            // A flag is `-x` or `--name`; anything else starting with `-` is a value (a PEM
            // block starts with `-----BEGIN`).
            let flag = is_flag(arg);
            if let Some(name) = next.take() {
                if !flag {
                    out.push(self.flag_value(name, arg));
                    continue;
                }
            }
            if flag {
                let stripped = arg.trim_start_matches('-');
                if self.defaults && self.is_secret_flag(stripped) {
                    next = Some(stripped);
                }
                out.push(arg.clone());
                continue;
            }
            // `--name=value`, `NAME=value`.
            if let Some((k, v)) = arg.split_once('=') {
                let name = k.trim_start_matches('-');
                if !v.is_empty()
                    && self.defaults
                    && is_flag(&format!("--{name}"))
                    && (self.is_secret_flag(name) || self.is_sensitive_key(name))
                    && !(squash(name) == "pwd" && text::looks_like_path(v))
                {
                    out.push(format!("{k}={}", self.flag_value(name, v)));
                    continue;
                }
            }
            out.push(
                self.redact_text(arg)
                    .map(|(t, _)| t)
                    .unwrap_or_else(|| arg.clone()),
            );
        }
        out
    }

    fn is_secret_flag(&self, flag: &str) -> bool {
        self.is_sensitive_key(flag)
            || rules::SECRET_FLAGS.contains(&flag)
            || rules::USER_PASS_FLAGS.contains(&flag)
    }

    /// The value after a secret flag, redacted (a port after `-p`, a user name without a
    /// password after `-u`, stay).
    fn flag_value(&self, flag: &str, v: &str) -> String {
        // Already taken out (a tape redacted again): as it is.
        if is_marker(v) {
            return v.to_string();
        }
        if rules::USER_PASS_FLAGS.contains(&flag) {
            return match v.split_once(':') {
                Some((user, pass)) if !pass.is_empty() && !is_marker(pass) => {
                    format!("{user}:{}", self.marker("argument", pass))
                }
                _ => v.to_string(),
            };
        }
        let numeric = !v.is_empty() && v.len() <= 5 && v.bytes().all(|b| b.is_ascii_digit());
        if matches!(flag, "p" | "k") && numeric {
            return v.to_string();
        }
        self.marker("argument", v)
    }

    /// A URL with its credentials and secret parameters out (the server line, `show`).
    pub fn redact_url(&self, url: &str) -> String {
        self.redact_text(url)
            .map(|(t, _)| t)
            .unwrap_or_else(|| url.to_string())
    }

    /// Redacts a line that is not UTF-8, byte for byte: each UTF-8 stretch is redacted as text
    /// and spliced back among the bytes that are not. `None`: nothing found, keep the bytes.
    pub fn redact_bytes(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        let mut splices = Vec::new();
        let mut rules = Vec::new();
        let mut at = 0;
        for chunk in bytes.utf8_chunks() {
            let valid = chunk.valid();
            for sp in self.spans_of(valid) {
                rules.push(sp.rule.clone());
                splices.push(json::Splice {
                    start: at + sp.start,
                    end: at + sp.end,
                    with: self.marker(&sp.rule, &valid[sp.start..sp.end]),
                });
            }
            at += valid.len() + chunk.invalid().len();
        }
        if splices.is_empty() {
            return None;
        }
        rules.sort();
        rules.dedup();
        Some((json::apply(bytes, &splices), rules))
    }

    /// The first bytes kept of an over-long line: cut before anything that may be the start
    /// of a secret cut in two (a string still open, a run of token characters at the end),
    /// then redacted.
    pub fn redact_head(&self, head: &[u8]) -> (Vec<u8>, Vec<String>) {
        let cut = safe_head(head);
        match self.redact_bytes(&head[..cut]) {
            Some((out, rules)) => (out, rules),
            None => (head[..cut].to_vec(), Vec::new()),
        }
    }

    /// Redacts a non-JSON line (a server's log line on stdout, say): only the secrets' bytes
    /// change.
    pub fn redact_text(&self, text: &str) -> Option<(String, Vec<String>)> {
        self.redact_text_as(text, true)
    }

    /// `redact_text`; `whole_token`: a text that is one opaque token is taken for a secret
    /// (not for text decoded from base64, which is then simply random).
    fn redact_text_as(&self, text: &str, whole_token: bool) -> Option<(String, Vec<String>)> {
        let mut spans = self.spans_of(text);
        if spans.is_empty() && self.defaults && whole_token {
            // A line (or argument) that is one opaque token and nothing else: a key file
            // printed line by line, a token passed as a plain argument.
            let token = text.trim();
            if is_high_entropy(token) {
                let at = text.len() - text.trim_start().len();
                spans.push(text::Span {
                    start: at,
                    end: at + token.len(),
                    rule: "high-entropy".into(),
                });
            }
        }
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len() + 32 * spans.len());
        let mut rules = Vec::with_capacity(spans.len());
        let mut at = 0;
        for sp in spans {
            out.push_str(&text[at..sp.start]);
            out.push_str(&self.marker(&sp.rule, &text[sp.start..sp.end]));
            at = sp.end;
            rules.push(sp.rule);
        }
        out.push_str(&text[at..]);
        rules.sort();
        rules.dedup();
        Some((out, rules))
    }

    /// The text rules' spans, after the prefilter says they may find something.
    pub(crate) fn spans_of(&self, text: &str) -> Vec<text::Span> {
        let maybe = self.prefilter.may_match(text.as_bytes())
            || (self.defaults && prefilter::has_quoted_token(text.as_bytes()));
        if !maybe {
            return Vec::new();
        }
        self.text_spans(text)
    }

    /// Every string under a sensitive key goes, whatever it looks like.
    fn is_sensitive_key(&self, key: &str) -> bool {
        let k = squash(key);
        if self.keys.contains(&k) {
            return true;
        }
        self.defaults
            && !rules::NOT_SENSITIVE_KEYS.contains(&k.as_str())
            && rules::SENSITIVE_SUFFIXES.iter().any(|s| k.ends_with(s))
    }
}

/// `-x`, `--name`, `-name`: a command-line flag (letters, digits, `-`, `_`, `.`), not a value
/// that happens to start with `-`.
fn is_flag(arg: &str) -> bool {
    let name = arg
        .strip_prefix("--")
        .or_else(|| arg.strip_prefix('-'))
        .unwrap_or("");
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Where a cut-off head can safely end: before a JSON string still open at the cut, and before
/// a run of token characters that reaches the cut.
fn safe_head(head: &[u8]) -> usize {
    let mut open: Option<usize> = None;
    let mut escaped = false;
    for (i, &b) in head.iter().enumerate() {
        match b {
            b'\\' if !escaped => {
                escaped = true;
                continue;
            }
            b'"' if !escaped => open = if open.is_some() { None } else { Some(i) },
            _ => {}
        }
        escaped = false;
    }
    let mut end = open.unwrap_or(head.len());
    while end > 0
        && !matches!(
            head[end - 1],
            b' ' | b'\t'
                | b','
                | b':'
                | b'{'
                | b'}'
                | b'['
                | b']'
                | b'"'
                | b'\''
                | b';'
                | b'('
                | b')'
        )
    {
        end -= 1;
    }
    end
}

fn rule_names(found: &[Finding]) -> Vec<String> {
    let mut rules: Vec<String> = found.iter().map(|f| f.rule.clone()).collect();
    rules.sort();
    rules.dedup();
    rules
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
mod tests;
