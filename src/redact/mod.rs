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

mod argv;
mod config;
mod entropy;
mod facts;
mod json;
mod lazy;
mod prefilter;
pub(crate) mod rules;
mod text;

pub(crate) use config::Replayer;
pub use config::{MarkerKey, RedactConfig, RuleError, MARKER_KEY_MIN};
pub(crate) use entropy::is_high_entropy;
pub use facts::FactsCache;

pub(crate) use crate::wire::marker::marker_re;
pub(crate) use crate::wire::marker::{
    has_marker, is_marker, marker_rule, strip_marker_hashes, wildcard_eq, wildcard_eq_either,
    MARKER_PREFIX,
};

use hmac::{Hmac, Mac};
use regex::Regex;
use serde_json::Value;
use serde_json_path::JsonPath;
use sha2::Sha256;
use std::collections::BTreeSet;

/// One thing the redactor found (for `lint`) or replaced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    /// The rule that matched (`key:api_key`, `github-token`, …), as in the marker.
    pub rule: String,
    /// JSONPath of the value inside the message.
    pub path: String,
}

/// Takes secrets out of tape lines: the built-in rules and the user's, compiled once, with a
/// random per-redactor HMAC key for the markers' hashes (never stored).
pub struct Redactor {
    key: [u8; 32],
    /// The id of the user's marker key, when the key is theirs (not random).
    key_id: Option<String>,
    defaults: bool,
    keys: BTreeSet<String>,
    /// The user's own sensitive keys (squashed): numbers under them are secrets too.
    user_keys: BTreeSet<String>,
    shapes: Vec<(String, lazy::LazyRegex)>,
    literals: Vec<(String, String)>,
    auth_scheme: lazy::LazyRegex,
    url_param: lazy::LazyRegex,
    url_credentials: lazy::LazyRegex,
    assignment: lazy::LazyRegex,
    cli_flag: lazy::LazyRegex,
    glued_p: lazy::LazyRegex,
    keyword: lazy::LazyRegex,
    xml_element: lazy::LazyRegex,
    paths: Vec<(String, JsonPath)>,
    prefilter: prefilter::Prefilter,
}

impl std::fmt::Debug for Redactor {
    /// The rules in short: never a key or a literal secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("defaults", &self.defaults)
            .field("keys", &self.keys.len())
            .field("shapes", &self.shapes.len())
            .field("paths", &self.paths.len())
            .field("literals", &self.literals.len())
            .finish()
    }
}

/// A key as the key rules compare it: lower case, without `_` and `-`. Borrowed when the key
/// already is that (most keys a message holds: `type`, `name`, `description`), so the walk
/// allocates nothing for them.
fn squash(key: &str) -> std::borrow::Cow<'_, str> {
    let b = key.as_bytes();
    if b.iter()
        .all(|c| !c.is_ascii_uppercase() && *c != b'_' && *c != b'-' && c.is_ascii())
    {
        return std::borrow::Cow::Borrowed(key);
    }
    if key.is_ascii() {
        let squashed = b
            .iter()
            .filter(|c| **c != b'_' && **c != b'-')
            .map(|c| char::from(c.to_ascii_lowercase()))
            .collect();
        return std::borrow::Cow::Owned(squashed);
    }
    std::borrow::Cow::Owned(
        key.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect(),
    )
}

impl Redactor {
    /// Compiles the rules; an error names the first user rule that does not compile.
    pub fn new(cfg: &RedactConfig) -> Result<Redactor, RuleError> {
        use lazy::builtin;
        let mut key = [0u8; 32];
        match &cfg.marker_key {
            Some(k) => key = *k.bytes(),
            None => fill_random(&mut key),
        }
        if let Some(k) = cfg.keys.iter().find(|k| squash(k).trim().is_empty()) {
            return Err(RuleError::Empty {
                rule: k.clone(),
                why: "a key name with no letter or digit matches no key (`_`, `-` and case are ignored)",
            });
        }
        if let Some(p) = cfg.paths.iter().find(|p| p.trim().is_empty()) {
            return Err(RuleError::Empty {
                rule: format!("path:{p}"),
                why: "a path: rule with no JSONPath",
            });
        }
        let user_keys: BTreeSet<String> = cfg.keys.iter().map(|k| squash(k).into_owned()).collect();
        let mut keys = user_keys.clone();
        let mut shapes = Vec::new();
        if cfg.defaults {
            keys.extend(rules::SENSITIVE_KEYS.iter().map(|k| k.to_string()));
            for (name, re) in rules::SHAPES {
                shapes.push((name.to_string(), builtin(re)));
            }
        }
        for p in &cfg.patterns {
            let re = Regex::new(p).map_err(|e| RuleError::Regex {
                pattern: p.clone(),
                message: e.to_string(),
            })?;
            if re.is_match("") {
                return Err(RuleError::Empty {
                    rule: format!("re:{p}"),
                    why: "the regex matches the empty string, so it would match at every place of every string",
                });
            }
            let compiled = lazy::Lazy::ready(
                p.clone(),
                |p| Regex::new(p).expect("compiled once already"),
                re,
            );
            shapes.push(("user-regex".to_string(), compiled));
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
            key_id: cfg.marker_key.as_ref().map(MarkerKey::id),
            defaults: cfg.defaults,
            keys,
            user_keys,
            shapes,
            literals,
            auth_scheme: builtin(rules::AUTH_SCHEME),
            url_param: builtin(rules::URL_PARAM),
            url_credentials: builtin(rules::URL_CREDENTIALS),
            assignment: builtin(rules::ASSIGNMENT),
            cli_flag: builtin(rules::CLI_FLAG),
            glued_p: builtin(rules::GLUED_P),
            keyword: builtin(rules::KEYWORD),
            xml_element: builtin(rules::XML_ELEMENT),
            paths,
            prefilter,
        })
    }

    /// Compiles every rule now (a test that they all compile).
    #[cfg(test)]
    pub(crate) fn force_all(&self) {
        self.compile_text_rules();
        self.prefilter.force_all();
    }

    /// Compiles, on a thread of its own, the rules prose needs (the text rules, the prefilter's
    /// shapes and keyword), which are otherwise compiled the first time a message needs them:
    /// ≈ 45 million instructions, 10 ms and more, on the first request of an agent run,
    /// whose prompts always need them. Started where the first message is seconds away (the
    /// agent starting up); a message that comes sooner waits for the rule being compiled, as
    /// it would have compiled it. Not for `record`, whose traffic may never need them. Not on
    /// one CPU either (an affinity mask of one, a container's CPU quota under two): there the
    /// compiling would take its time from the agent starting up instead of from the first
    /// request.
    ///
    /// Gives the thread, when one was started (callers need not wait for it).
    pub fn compile_in_background(
        self: &std::sync::Arc<Self>,
    ) -> Option<std::thread::JoinHandle<()>> {
        if !std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
            return None;
        }
        let r = std::sync::Arc::clone(self);
        // Only the compiled programs are shared; each searching thread still builds its own
        // lazy DFA, so nothing here makes the proxy's searches slower.
        std::thread::Builder::new()
            .name("mcptape-rules".into())
            .spawn(move || {
                r.compile_text_rules();
                r.prefilter.compile_prose_rules();
            })
            .ok()
    }

    /// Whether every text rule is compiled.
    #[cfg(test)]
    pub(crate) fn text_rules_compiled(&self) -> bool {
        self.text_rules().all(|re| re.is_built())
    }

    fn compile_text_rules(&self) {
        for re in self.text_rules() {
            let _: &Regex = re;
        }
    }

    /// The built-in text rules: the shapes and the rules `text_spans` runs after them.
    fn text_rules(&self) -> impl Iterator<Item = &lazy::LazyRegex> {
        self.shapes.iter().map(|(_, re)| re).chain([
            &self.auth_scheme,
            &self.url_param,
            &self.url_credentials,
            &self.assignment,
            &self.cli_flag,
            &self.glued_p,
            &self.keyword,
            &self.xml_element,
        ])
    }

    pub(crate) fn marker(&self, rule: &str, secret: &str) -> String {
        format!(
            "{MARKER_PREFIX}{rule}:{}]",
            hash_tag(&self.key, secret.as_bytes())
        )
    }

    /// The hash a marker made by this redactor has for `secret`.
    pub(crate) fn hash_of(&self, secret: &str) -> String {
        hash_tag(&self.key, secret.as_bytes())
    }

    /// The id of the user's marker key (`$MCPTAPE_REDACT_KEY`), which the tape's header
    /// records; `None` when the markers' key is random.
    pub fn marker_key_id(&self) -> Option<&str> {
        self.key_id.as_deref()
    }

    /// Whether the message might hold a secret (cheap; false means certainly not).
    fn may_need(&self, bytes: &[u8]) -> bool {
        if !self.paths.is_empty() {
            return true;
        }
        let scan = self.prefilter.may_match_runs(bytes);
        scan.may_match
            || (self.defaults
                && if scan.long_run {
                    prefilter::has_entropy_candidate_or_hidden_text(bytes)
                        || prefilter::has_quoted_token(bytes)
                } else {
                    // No run of token characters long enough for the quote walks to take: of
                    // what they look for, only escapes and a blob can be there.
                    prefilter::has_escapes_or_blob(bytes)
                })
    }

    /// The redacted message, or `None` when nothing had to change (the bytes stay verbatim).
    /// The result is the input with each secret's bytes replaced by its marker, nothing else
    /// changed. The JSON-RPC envelope (`jsonrpc`, `id`, `method`) is protocol, never a secret.
    pub fn redact_json(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        self.redact_json_found(bytes)
            .map(|(out, found)| (out, rule_names(&found)))
    }

    /// `redact_json`, with what was replaced where (for `lint` and `redact`).
    pub(crate) fn redact_json_found(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<Finding>)> {
        self.redact_raw(bytes, json::ENVELOPE, &[], true)
    }

    /// HTTP facts: `kept` left alone, the values of `secret` always taken out (a session id is
    /// a credential for as long as the session lives, and its value matters to no reader but
    /// for pairing, which equal markers keep), the rest redacted by the rules.
    pub(crate) fn redact_facts(
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
            Ok(()) => {
                let out = json::apply(bytes, &walk.splices);
                // The walk is lenient (it is meant for JSON already checked): what it spliced in
                // a message that was not JSON after all is not handed back as JSON.
                if std::str::from_utf8(&out)
                    .is_ok_and(|s| serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok())
                {
                    Some((out, walk.found))
                } else {
                    self.redact_as_text(bytes)
                }
            }
            Err(json::NotJson) => self.redact_as_text(bytes),
        }
    }

    /// Too deep to walk (or not JSON after all): redacted as text. Markers hold no quote or
    /// backslash, so the result keeps the JSON shape; it is checked before use, and what is not
    /// JSON becomes a JSON string.
    fn redact_as_text(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<Finding>)> {
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

    /// Redacts a value in place (for showing what a client asked: explanations quote it).
    pub(crate) fn redact_value(&self, v: &mut Value, found: &mut Vec<Finding>) {
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

    /// Redacts a line that is not UTF-8, byte for byte: each UTF-8 stretch is redacted as text
    /// and spliced back among the bytes that are not. `None`: nothing found, keep the bytes.
    pub(crate) fn redact_bytes(&self, bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
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
    pub(crate) fn redact_head(&self, head: &[u8]) -> (Vec<u8>, Vec<String>) {
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
        let scan = self.prefilter.may_match_runs(text.as_bytes());
        let maybe = scan.may_match
            || (self.defaults && scan.long_run && prefilter::has_quoted_token(text.as_bytes()));
        if !maybe {
            return Vec::new();
        }
        self.text_spans(text)
    }

    /// Every string under a sensitive key goes, whatever it looks like.
    fn is_sensitive_key(&self, key: &str) -> bool {
        self.is_sensitive_squashed(&squash(key))
    }

    /// Whether a number (of four digits or more) under the sensitive key `key` is a secret:
    /// under a key of the user's, or one naming a password or a secret. The built-in keys
    /// that name a token, a key, a credential or a cookie hold strings when they hold a
    /// secret, and numbers there are counts and ids (`"token": 31373`, a tokenizer's): turned
    /// into a marker string, such a number broke the tool's `outputSchema` for every client
    /// that checks it.
    pub(crate) fn number_is_secret(&self, key: &str) -> bool {
        let k = squash(key);
        self.user_keys.contains(k.as_ref())
            || rules::NUMERIC_SECRET_KEYS.contains(&k.as_ref())
            || rules::NUMERIC_SECRET_SUFFIXES
                .iter()
                .any(|s| k.ends_with(s))
    }

    /// [`Redactor::is_sensitive_key`] of a key already squashed.
    /// A key (squashed) the user named with `--redact KEY`.
    fn is_user_key(&self, k: &str) -> bool {
        self.user_keys.contains(k)
    }

    fn is_sensitive_squashed(&self, k: &str) -> bool {
        if self.keys.contains(k) {
            return true;
        }
        self.defaults
            && !rules::NOT_SENSITIVE_KEYS.contains(&k)
            && rules::SENSITIVE_SUFFIXES.iter().any(|s| k.ends_with(s))
    }
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

/// A marker's hash: the first 4 bytes of the HMAC-SHA256 of `data` under `key`, in hex.
fn hash_tag(key: &[u8], data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    hex(&mac.finalize().into_bytes()[..4])
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
