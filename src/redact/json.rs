//! Redaction that changes only the secret's bytes. The message is walked as raw JSON, never
//! parsed into a value and re-serialized: each string is decoded (so `\u0067hp_…` and
//! `postgres:\/\/…` are seen as what they are), the rules run on the decoded text, and each
//! secret's marker is spliced into the raw bytes over exactly the raw span that encoded it.
//! Key order, whitespace, escapes and number spelling stay as they were, also inside JSON held
//! in a string (whose own splices are lifted into the outer string, escaped for it).

use super::text::Span;
use super::{rules, squash, Finding, Redactor};
use base64::Engine as _;
use std::borrow::Cow;

/// Nesting deeper than this is left to the text rules (serde_json stops at 128 too).
const MAX_DEPTH: usize = 256;

/// The rule of `Walk::secret_at_top` fields: `[REDACTED:key:session-id:…]`.
const SECRET_FIELD_RULE: &str = "session-id";

/// A JSON-RPC message's envelope: protocol, never a secret.
pub(crate) const ENVELOPE: &[&str] = &["jsonrpc", "id", "method"];

/// One replacement in the input: bytes `start..end` become `with` (already in the input's own
/// form: raw JSON at the top level, string content inside a string).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Splice {
    pub start: usize,
    pub end: usize,
    pub with: String,
}

/// Applies sorted, non-overlapping splices.
pub(crate) fn apply(input: &[u8], splices: &[Splice]) -> Vec<u8> {
    let grow: usize = splices.iter().map(|s| s.with.len()).sum();
    let mut out = Vec::with_capacity(input.len() + grow);
    let mut at = 0;
    for s in splices {
        out.extend_from_slice(&input[at..s.start]);
        out.extend_from_slice(s.with.as_bytes());
        at = s.end;
    }
    out.extend_from_slice(&input[at..]);
    out
}

/// The input was not JSON the walker could read (or nested too deep).
#[derive(Debug)]
pub(crate) struct NotJson;

/// How the rules apply to a value, from where it sits.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Names of keys and shapes of strings decide.
    Normal,
    /// Inside a JSON Schema: no key is the name of a secret; strings get the shape rules.
    Schema,
    /// Under a sensitive key: strings (and long numbers) are secrets. With `all`, objects
    /// below are secrets through and through (a user's `path:` rule); without, an object is
    /// walked by its own keys (structure is never redacted).
    Secret { all: bool },
    /// Protocol: left alone.
    Skip,
    /// The server's own prose (a listed tool's or a schema's `description`, `initialize`'s
    /// `instructions`): the rules that know a credential's shape apply, the guesses from a
    /// sensitive word or from randomness do not. The model reads these words as they are.
    Prose,
}

/// Where in a message a value sits, as far as `Mode::Prose` asks.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Other,
    /// The message's `result`.
    Result,
    /// Inside a listing answer's `tools`, `prompts`, `resources` or `resourceTemplates`, or
    /// a model API request's `tools` (the MCP servers' tools, as the agent passes them on).
    Listing,
    /// Inside the top-level `request` of a Gemini Code Assist call, which wraps a Gemini
    /// request.
    Wrapped,
}

#[derive(Clone, Copy)]
struct Ctx<'k> {
    mode: Mode,
    /// The key the value sits under (for arrays, the array's key).
    key: Option<&'k str>,
    /// The rule a secret here is reported under.
    rule: Option<&'k str>,
    /// The value is the whole text: its keys in `Walk::kept` are left alone (a message's
    /// envelope, a tape line's own fields).
    root: bool,
    /// Inside an object that sits under a sensitive key: its `value` is the secret.
    under_sensitive: Option<&'k str>,
    place: Place,
}

/// A `token` value walked as a secret, and where its splice and finding went.
struct TokenValue {
    key: String,
    /// The string's opening quote.
    at: usize,
    /// Its splice and finding (at most one of each; later siblings' come after them).
    splices: std::ops::Range<usize>,
    found: std::ops::Range<usize>,
}

enum Seg<'k> {
    Key(Cow<'k, str>),
    Index(usize),
}

/// One walk over one JSON text.
pub(crate) struct Walk<'r> {
    r: &'r Redactor,
    pub(crate) splices: Vec<Splice>,
    pub(crate) found: Vec<Finding>,
    /// JSON pointers selected by the user's `path:` rules (empty: none).
    selected: &'r [String],
    /// Top-level keys left alone.
    kept: &'r [&'r str],
    /// Top-level keys whose values are secrets whatever they look like (an HTTP session id).
    secret_top: &'r [&'r str],
    path: Vec<Seg<'static>>,
}

/// A decoded string token: its content span in the input and its text (borrowed when it holds
/// no escape). When it does, the raw offset of every decoded byte is worked out the first time
/// a span of it is asked for: most strings hold nothing to take out.
struct Str<'a> {
    start: usize,
    end: usize,
    text: Cow<'a, str>,
    /// The raw content, when it holds escapes.
    escaped: Option<&'a [u8]>,
    map: std::cell::OnceCell<Vec<u32>>,
}

impl Str<'_> {
    /// The raw span (absolute) that encodes decoded bytes `a..b`.
    fn raw(&self, a: usize, b: usize) -> (usize, usize) {
        match self.escaped {
            None => (self.start + a, self.start + b),
            Some(raw) => {
                let m = self.map.get_or_init(|| {
                    let mut map = Vec::with_capacity(raw.len() + 1);
                    decode(raw, Some(&mut map)).expect("decoded once already");
                    map
                });
                (self.start + m[a] as usize, self.start + m[b] as usize)
            }
        }
    }
}

impl<'r> Walk<'r> {
    /// A walk that leaves the top-level keys `kept` alone (see `ENVELOPE`).
    pub(crate) fn new(r: &'r Redactor, selected: &'r [String], kept: &'r [&'r str]) -> Walk<'r> {
        Walk {
            r,
            splices: Vec::new(),
            found: Vec::new(),
            selected,
            kept,
            secret_top: &[],
            path: Vec::new(),
        }
    }

    /// Top-level keys whose values are secrets whatever they look like.
    pub(crate) fn secret_at_top(mut self, keys: &'r [&'r str]) -> Walk<'r> {
        self.secret_top = keys;
        self
    }

    /// Walks a whole JSON text; `batch`: a top-level array holds messages, each with its own
    /// kept keys.
    pub(crate) fn run(&mut self, b: &[u8], batch: bool) -> Result<(), NotJson> {
        let mut i = skip_ws(b, 0);
        let ctx = Ctx {
            mode: Mode::Normal,
            key: None,
            rule: None,
            root: true,
            under_sensitive: None,
            place: Place::Other,
        };
        if batch && b.get(i) == Some(&b'[') {
            // A batch: each item is a message.
            i = self.array(b, i, ctx, 0, true)?;
        } else {
            i = self.value(b, i, ctx, 0)?;
        }
        if skip_ws(b, i) != b.len() {
            return Err(NotJson);
        }
        self.splices.sort_by_key(|s| s.start);
        Ok(())
    }

    fn value(&mut self, b: &[u8], i: usize, ctx: Ctx<'_>, depth: usize) -> Result<usize, NotJson> {
        if depth > MAX_DEPTH {
            return Err(NotJson);
        }
        let selected = !self.selected.is_empty() && self.selected.contains(&self.pointer());
        let ctx = if selected {
            Ctx {
                mode: Mode::Secret { all: true },
                rule: Some("user-path"),
                ..ctx
            }
        } else {
            ctx
        };
        match b.get(i) {
            Some(b'{') => self.object(b, i, ctx, depth),
            Some(b'[') => self.array(b, i, ctx, depth, false),
            Some(b'"') => {
                let (s, next) = string(b, i)?;
                self.string(s, ctx);
                Ok(next)
            }
            Some(b't') => literal(b, i, b"true"),
            Some(b'f') => literal(b, i, b"false"),
            Some(b'n') => literal(b, i, b"null"),
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let end = number(b, i);
                let secret_number = match ctx.mode {
                    Mode::Secret { all: true } => true,
                    // The sensitive key that made this a secret (also over a `value` below it).
                    Mode::Secret { all: false } => {
                        ctx.rule.is_none_or(|k| self.r.number_is_secret(k))
                    }
                    _ => false,
                };
                if secret_number {
                    let digits = b[i..end].iter().filter(|c| c.is_ascii_digit()).count();
                    if digits >= 4 {
                        let secret = String::from_utf8_lossy(&b[i..end]);
                        let rule = self.rule_of(ctx);
                        let marker = self.r.marker(&rule, &secret);
                        self.splice(i, end, format!("\"{marker}\""), rule);
                    }
                }
                Ok(end)
            }
            _ => Err(NotJson),
        }
    }

    fn object(&mut self, b: &[u8], i: usize, ctx: Ctx<'_>, depth: usize) -> Result<usize, NotJson> {
        let mut i = skip_ws(b, i + 1);
        if b.get(i) == Some(&b'}') {
            return Ok(i + 1);
        }
        // A string under `token`, taken for a secret until the object turns out to be a
        // log-probability entry (its other keys can come after it).
        let mut token: Option<TokenValue> = None;
        let mut logprob_entry = false;
        loop {
            if b.get(i) != Some(&b'"') {
                return Err(NotJson);
            }
            let (key, next) = string(b, i)?;
            if ctx.mode != Mode::Skip {
                // A secret used as a key (`{"sk-…": …}`): the shape rules, not the key rules.
                self.key_shapes(&key);
            }
            i = skip_ws(b, next);
            if b.get(i) != Some(&b':') {
                return Err(NotJson);
            }
            i = skip_ws(b, i + 1);
            let k: &str = &key.text;
            let child = self.child_ctx(ctx, k);
            let mut watched = None;
            // Both kinds of key start with `l` or `t`: the rest are not squashed a second time.
            if self.r.defaults
                && matches!(ctx.mode, Mode::Normal | Mode::Secret { all: false })
                && matches!(k.as_bytes().first(), Some(b'l' | b'L' | b't' | b'T'))
            {
                let squashed = squash(k);
                if rules::LOGPROB_KEYS.contains(&&*squashed) {
                    logprob_entry = true;
                } else if squashed == "token"
                    && child.mode == (Mode::Secret { all: false })
                    && !self.r.is_user_key(&squashed)
                    && b.get(i) == Some(&b'"')
                {
                    watched = Some((self.splices.len(), self.found.len()));
                }
            }
            self.path.push(Seg::Key(Cow::Owned(k.to_string())));
            let r = self.value(b, i, child, depth + 1);
            self.path.pop();
            if let Some((splices, found)) = watched {
                // A string adds one splice and one finding, or none.
                token = Some(TokenValue {
                    key: k.to_string(),
                    at: i,
                    splices: splices..self.splices.len(),
                    found: found..self.found.len(),
                });
            }
            i = skip_ws(b, r?);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b'}') => {
                    if let (Some(t), true) = (token, logprob_entry) {
                        self.unsecret_token(b, t, depth)?;
                    }
                    return Ok(i + 1);
                }
                _ => return Err(NotJson),
            }
        }
    }

    /// A log-probability entry's `token` is the model's text: what was taken out as a secret
    /// under the key is put back, and the string gets the rules any text gets.
    fn unsecret_token(&mut self, b: &[u8], t: TokenValue, depth: usize) -> Result<(), NotJson> {
        self.splices.drain(t.splices);
        self.found.drain(t.found);
        let ctx = Ctx {
            mode: Mode::Normal,
            key: Some("token"),
            rule: None,
            root: false,
            under_sensitive: None,
            place: Place::Other,
        };
        self.path.push(Seg::Key(Cow::Owned(t.key)));
        let r = self.value(b, t.at, ctx, depth + 1);
        self.path.pop();
        r.map(|_| ())
    }

    fn array(
        &mut self,
        b: &[u8],
        i: usize,
        ctx: Ctx<'_>,
        depth: usize,
        batch: bool,
    ) -> Result<usize, NotJson> {
        let mut i = skip_ws(b, i + 1);
        if b.get(i) == Some(&b']') {
            return Ok(i + 1);
        }
        let item = Ctx { root: batch, ..ctx };
        let mut n = 0;
        loop {
            self.path.push(Seg::Index(n));
            let r = self.value(b, i, item, depth + 1);
            self.path.pop();
            i = skip_ws(b, r?);
            n += 1;
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b']') => return Ok(i + 1),
                _ => return Err(NotJson),
            }
        }
    }

    /// How the rules apply to the value under `key` in an object seen with `ctx`.
    fn child_ctx<'k>(&self, ctx: Ctx<'k>, key: &'k str) -> Ctx<'k> {
        let place = match ctx.place {
            Place::Other if ctx.root && key == "result" => Place::Result,
            Place::Result if rules::LISTING_KEYS.contains(&key) => Place::Listing,
            Place::Listing => Place::Listing,
            // A model API request's tool definitions: every provider's request has them at
            // its top level (Code Assist's in its `request`), where a JSON-RPC message never
            // has a `tools` or a `request`.
            Place::Other if ctx.root && key == "tools" => Place::Listing,
            Place::Other if ctx.root && key == "request" => Place::Wrapped,
            Place::Wrapped if key == "tools" => Place::Listing,
            _ => Place::Other,
        };
        let base = Ctx {
            mode: ctx.mode,
            key: Some(key),
            rule: ctx.rule,
            root: false,
            under_sensitive: None,
            place,
        };
        let prose = self.r.defaults
            && match ctx.place {
                Place::Result => key == "instructions",
                Place::Listing => rules::PROSE_KEYS.contains(&key),
                Place::Other | Place::Wrapped => {
                    ctx.mode == Mode::Schema && rules::PROSE_KEYS.contains(&key)
                }
            };
        if prose && matches!(ctx.mode, Mode::Normal | Mode::Schema) {
            return Ctx {
                mode: Mode::Prose,
                ..base
            };
        }
        match ctx.mode {
            Mode::Skip => return base,
            Mode::Secret { all: true } => return base,
            Mode::Schema => return base,
            Mode::Normal | Mode::Secret { all: false } | Mode::Prose => {}
        }
        let skip = Ctx {
            mode: Mode::Skip,
            ..base
        };
        if ctx.root && self.kept.contains(&key) {
            return skip;
        }
        let squashed = squash(key);
        if self.r.defaults
            && (rules::PROTOCOL_KEYS.contains(&key)
                || rules::NOT_SENSITIVE_KEYS.contains(&&*squashed))
        {
            // Protocol, and cursors: opaque to clients, served back as they were.
            return skip;
        }
        if ctx.root && self.secret_top.contains(&key) {
            // One rule for all of them (a session id asked for and given): equal values get
            // equal markers whichever field holds them.
            return Ctx {
                mode: Mode::Secret { all: true },
                rule: Some(SECRET_FIELD_RULE),
                ..base
            };
        }
        if self.r.defaults
            && (rules::SCHEMA_KEYS.contains(&key)
                || (ctx.place == Place::Listing && rules::TOOL_SCHEMA_KEYS.contains(&key)))
        {
            return Ctx {
                mode: Mode::Schema,
                ..base
            };
        }
        let sensitive = self.r.is_sensitive_squashed(&squashed);
        if sensitive || (ctx.under_sensitive.is_some() && key == "value") {
            let rule = if key == "value" && !sensitive {
                ctx.under_sensitive
            } else {
                Some(key)
            };
            return Ctx {
                mode: Mode::Secret { all: false },
                rule,
                under_sensitive: rule,
                ..base
            };
        }
        Ctx {
            mode: Mode::Normal,
            rule: None,
            ..base
        }
    }

    fn string(&mut self, s: Str<'_>, ctx: Ctx<'_>) {
        let text: &str = &s.text;
        if text.is_empty() || super::is_marker(text) {
            return;
        }
        match ctx.mode {
            Mode::Skip => {}
            Mode::Secret { all } => {
                // `PWD=/home/me` is a directory, not a password; `credentials: "include"` is
                // a `fetch` option.
                let pwd = ctx.key.is_some_and(|k| squash(k) == "pwd");
                if !all
                    && ((pwd && super::text::looks_like_path(text))
                        || rules::NOT_SECRET_VALUES.contains(&text))
                {
                    return;
                }
                let rule = self.rule_of(ctx);
                let marker = self.r.marker(&rule, text);
                self.splice(s.start, s.end, marker, rule);
            }
            Mode::Normal | Mode::Schema | Mode::Prose => self.content(&s, ctx),
        }
    }

    /// A string that is not a secret by its key: JSON inside it, base64 text inside it, the
    /// text rules, and the high-entropy rule for the whole string.
    fn content(&mut self, s: &Str<'_>, ctx: Ctx<'_>) {
        let text: &str = &s.text;
        let t = text.trim_start();
        if (t.starts_with('{') || t.starts_with('[')) && text.len() < 16 * 1024 * 1024 {
            let mut inner = Walk::new(self.r, &[], &[]);
            if inner.run(text.as_bytes(), false).is_ok() {
                for sp in inner.splices {
                    let (a, b) = s.raw(sp.start, sp.end);
                    self.splices.push(Splice {
                        start: a,
                        end: b,
                        with: escape_content(&sp.with),
                    });
                }
                let path = self.pointer_path();
                for f in inner.found {
                    self.found.push(Finding {
                        rule: f.rule,
                        path: path.clone(),
                    });
                }
                return;
            }
        }
        let media = ctx.key.is_some_and(|k| rules::MEDIA_KEYS.contains(&k));
        if self.r.defaults
            && (ctx.key == Some("blob") || media || text.len() >= rules::BASE64_MIN_LEN)
        {
            if let Some(redacted) = self.base64_text(text) {
                let (a, b) = s.raw(0, text.len());
                let path = self.pointer_path();
                for rule in redacted.1 {
                    self.found.push(Finding {
                        rule,
                        path: path.clone(),
                    });
                }
                self.splices.push(Splice {
                    start: a,
                    end: b,
                    with: redacted.0,
                });
                return;
            }
        }
        let mut spans = self.r.spans_of(text);
        let prose = ctx.mode == Mode::Prose;
        if prose {
            spans.retain(|sp| !super::text::is_fallback(&sp.rule));
        }
        // Asked at most once a string, and only when it decides something.
        let identifier = std::cell::OnceCell::new();
        let is_identifier = || *identifier.get_or_init(|| ctx.key.is_some_and(is_identifier_key));
        if !spans.is_empty() && is_identifier() {
            // An id's or a digest's value may quote an opaque token (an ETag): not a secret.
            spans.retain(|sp| sp.rule != "high-entropy");
        }
        if !spans.is_empty() {
            for Span { start, end, rule } in spans {
                let (a, b) = s.raw(start, end);
                let marker = self.r.marker(&rule, &text[start..end]);
                self.splice(a, b, marker, rule);
            }
            return;
        }
        if self.r.defaults && !media && !prose && super::is_high_entropy(text) && !is_identifier() {
            let marker = self.r.marker("high-entropy", text);
            self.splice(s.start, s.end, marker, "high-entropy".into());
        }
    }

    /// Base64 that decodes to text: the text redacted, encoded again the same way. `None` when
    /// it is not base64 of text, or the text holds nothing to redact.
    fn base64_text(&self, text: &str) -> Option<(String, Vec<String>)> {
        let (engine, bytes) = decode_base64(text)?;
        let decoded = std::str::from_utf8(&bytes).ok()?;
        if !is_text(decoded) {
            return None;
        }
        let (out, rules) = self.r.redact_str(decoded)?;
        Some((engine.encode(out), rules))
    }

    /// The shape rules over an object key.
    fn key_shapes(&mut self, key: &Str<'_>) {
        for Span { start, end, rule } in key_spans(self.r, &key.text) {
            let (a, b) = key.raw(start, end);
            let marker = self.r.marker(&rule, &key.text[start..end]);
            self.splice(a, b, marker, rule);
        }
    }

    fn rule_of(&self, ctx: Ctx<'_>) -> String {
        match ctx.rule {
            Some("user-path") => "user-path".into(),
            Some(k) => format!("key:{}", rule_name(k)),
            None => "key".into(),
        }
    }

    fn splice(&mut self, start: usize, end: usize, with: String, rule: String) {
        let path = self.pointer_path();
        self.found.push(Finding { rule, path });
        self.splices.push(Splice { start, end, with });
    }

    /// The JSONPath of the value being walked, for findings.
    fn pointer_path(&self) -> String {
        let mut p = "$".to_string();
        for seg in &self.path {
            match seg {
                Seg::Key(k) => p = crate::wire::canonical::child_path(&p, k),
                Seg::Index(i) => p.push_str(&format!("[{i}]")),
            }
        }
        p
    }

    /// The JSON pointer (RFC 6901) of the value being walked, for the user's `path:` rules.
    fn pointer(&self) -> String {
        let mut p = String::new();
        for seg in &self.path {
            p.push('/');
            match seg {
                Seg::Key(k) => p.push_str(&k.replace('~', "~0").replace('/', "~1")),
                Seg::Index(i) => p.push_str(&i.to_string()),
            }
        }
        p
    }
}

/// The secrets' shapes `Walk` takes out of an object's key.
fn key_spans(r: &Redactor, key: &str) -> Vec<Span> {
    if key.len() < 8 {
        return Vec::new();
    }
    let mut spans = r.spans_of(key);
    spans.retain(|sp| sp.rule != "assignment" && sp.rule != "url-param");
    spans
}

/// Whether a walk leaves `key`, as an object's key, as it is.
pub(crate) fn key_is_clean(r: &Redactor, key: &str) -> bool {
    key_spans(r, key).is_empty()
}

/// The rule `Walk::secret_at_top` fields are taken out under (what `rule_of` gives for them).
pub(crate) fn secret_top_rule() -> String {
    format!("key:{}", rule_name(SECRET_FIELD_RULE))
}

/// A key as a rule name: lower case, `[a-z0-9_-]` only (a marker holds no quote, no bracket).
fn rule_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn is_identifier_key(key: &str) -> bool {
    let k = squash(key);
    rules::IDENTIFIER_KEYS.contains(&&*k)
        || ((k.ends_with("id") || k.ends_with("ids")) && key.len() > 2)
        || rules::IDENTIFIER_PARTS.iter().any(|p| k.contains(p))
}

/// Standard or URL-safe base64, padded or not; `None` unless the whole text is that.
fn decode_base64(text: &str) -> Option<(base64::engine::GeneralPurpose, Vec<u8>)> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let b = text.as_bytes();
    if b.len() < rules::BASE64_MIN_LEN
        || !b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"+/-_=".contains(c))
    {
        return None;
    }
    let url = b.iter().any(|c| *c == b'-' || *c == b'_');
    let padded = b.ends_with(b"=");
    let engine = match (url, padded) {
        (false, true) => STANDARD,
        (false, false) => STANDARD_NO_PAD,
        (true, true) => URL_SAFE,
        (true, false) => URL_SAFE_NO_PAD,
    };
    engine.decode(b).ok().map(|d| (engine, d))
}

/// Decoded bytes that read as text (a config file, a document), not binary that happens to be
/// valid UTF-8.
fn is_text(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
}

/// `with` as the content of a JSON string.
fn escape_content(with: &str) -> String {
    let quoted = serde_json::to_string(with).expect("strings serialize");
    quoted[1..quoted.len() - 1].to_string()
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Result<usize, NotJson> {
    if b[i..].starts_with(word) {
        Ok(i + word.len())
    } else {
        Err(NotJson)
    }
}

fn number(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
        i += 1;
    }
    i
}

/// The string token at `b[i] == '"'`: its decoded text and where it ends.
fn string(b: &[u8], i: usize) -> Result<(Str<'_>, usize), NotJson> {
    let start = i + 1;
    let mut j = start;
    let mut escaped = false;
    loop {
        match memchr::memchr2(b'"', b'\\', &b[j..]) {
            None => return Err(NotJson),
            Some(k) => {
                j += k;
                if b[j] == b'"' {
                    break;
                }
                escaped = true;
                j += 2; // the backslash and the character it escapes
                if j > b.len() {
                    return Err(NotJson);
                }
            }
        }
    }
    let raw = &b[start..j];
    let s = if escaped {
        Str {
            start,
            end: j,
            text: Cow::Owned(decode(raw, None)?),
            escaped: Some(raw),
            map: std::cell::OnceCell::new(),
        }
    } else {
        Str {
            start,
            end: j,
            text: Cow::Borrowed(std::str::from_utf8(raw).map_err(|_| NotJson)?),
            escaped: None,
            map: std::cell::OnceCell::new(),
        }
    };
    Ok((s, j + 1))
}

/// Decodes a string's raw content; with `map`, `map[k]` is the raw offset where decoded byte
/// `k`'s character starts (and `map[len]` the raw length).
fn decode(raw: &[u8], mut map: Option<&mut Vec<u32>>) -> Result<String, NotJson> {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    let text = std::str::from_utf8(raw).map_err(|_| NotJson)?;
    while i < raw.len() {
        let at = i as u32;
        if raw[i] != b'\\' {
            // The run up to the next escape, copied whole (prompts are long and escape little
            // but their line breaks). A backslash is ASCII: the run ends on a char boundary.
            let end = memchr::memchr(b'\\', &raw[i..]).map_or(raw.len(), |k| i + k);
            out.push_str(&text[i..end]);
            if let Some(map) = map.as_deref_mut() {
                let mut start = at;
                for (k, b) in raw[i..end].iter().enumerate() {
                    // A UTF-8 continuation byte maps to where its character starts.
                    if b & 0xC0 != 0x80 {
                        start = (i + k) as u32;
                    }
                    map.push(start);
                }
            }
            i = end;
            continue;
        }
        let (ch, used) = unescape(raw, i)?;
        out.push(ch);
        if let Some(map) = map.as_deref_mut() {
            map.extend(std::iter::repeat_n(at, ch.len_utf8()));
        }
        i += used;
    }
    if let Some(map) = map {
        map.push(raw.len() as u32);
    }
    Ok(out)
}

/// The character the escape at `raw[i]` (a backslash) stands for, and how many raw bytes it
/// takes: a surrogate pair is one character of 12 bytes; a lone surrogate becomes U+FFFD.
fn unescape(raw: &[u8], i: usize) -> Result<(char, usize), NotJson> {
    Ok(match *raw.get(i + 1).ok_or(NotJson)? {
        b'"' => ('"', 2),
        b'\\' => ('\\', 2),
        b'/' => ('/', 2),
        b'b' => ('\u{8}', 2),
        b'f' => ('\u{c}', 2),
        b'n' => ('\n', 2),
        b'r' => ('\r', 2),
        b't' => ('\t', 2),
        b'u' => {
            let hi = hex4(raw, i + 2)?;
            if (0xD800..0xDC00).contains(&hi) && raw.get(i + 6..i + 8) == Some(b"\\u") {
                let lo = hex4(raw, i + 8)?;
                if (0xDC00..0xE000).contains(&lo) {
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    (char::from_u32(c).ok_or(NotJson)?, 12)
                } else {
                    ('\u{fffd}', 6)
                }
            } else {
                (char::from_u32(hi).unwrap_or('\u{fffd}'), 6)
            }
        }
        _ => return Err(NotJson),
    })
}

fn hex4(raw: &[u8], at: usize) -> Result<u32, NotJson> {
    let h = raw.get(at..at + 4).ok_or(NotJson)?;
    let s = std::str::from_utf8(h).map_err(|_| NotJson)?;
    u32::from_str_radix(s, 16).map_err(|_| NotJson)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_maps_every_byte_to_its_raw_start() {
        let mut m = Vec::new();
        let t = decode(br#"a\u0062\n\ud83d\ude00\"x"#, Some(&mut m)).unwrap();
        assert_eq!(t, "ab\n\u{1F600}\"x");
        assert_eq!(m.len(), t.len() + 1);
        assert_eq!(m[1], 1, "b from \\u0062");
        assert_eq!(m[2], 7, "\\n");
        assert_eq!(
            &m[3..7],
            &[9, 9, 9, 9],
            "one 4-byte char from a surrogate pair"
        );
        assert_eq!(m[7], 21, "the escaped quote");
        assert_eq!(*m.last().unwrap(), 24);
    }

    /// `decode` as it was (session 37), one character at a time with the map for every string:
    /// the new one must give the same text and the same map. (The escapes themselves are
    /// `unescape`'s, shared: what changed is the runs between them and the map.)
    fn decode_before(raw: &[u8]) -> Result<(String, Vec<u32>), NotJson> {
        let mut out = String::with_capacity(raw.len());
        let mut map: Vec<u32> = Vec::with_capacity(raw.len() + 1);
        let mut i = 0;
        let text = std::str::from_utf8(raw).map_err(|_| NotJson)?;
        while i < raw.len() {
            let at = i as u32;
            if raw[i] != b'\\' {
                let ch = text[i..].chars().next().ok_or(NotJson)?;
                let n = ch.len_utf8();
                out.push(ch);
                map.extend(std::iter::repeat_n(at, n));
                i += n;
                continue;
            }
            let (ch, used) = unescape(raw, i)?;
            out.push(ch);
            map.extend(std::iter::repeat_n(at, ch.len_utf8()));
            i += used;
        }
        map.push(raw.len() as u32);
        Ok((out, map))
    }

    proptest::proptest! {
        #[test]
        fn decoding_runs_is_decoding_characters(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("a".to_string()),
                    proptest::strategy::Just("\u{e9}".to_string()),
                    proptest::strategy::Just("\u{20ac}".to_string()),
                    proptest::strategy::Just("\u{1F600}".to_string()),
                    proptest::strategy::Just("\\n".to_string()),
                    proptest::strategy::Just("\\\"".to_string()),
                    proptest::strategy::Just("\\u00e9".to_string()),
                    proptest::strategy::Just("\\\\".to_string()),
                    proptest::strategy::Just("\\/".to_string()),
                    proptest::strategy::Just("\\t\\r\\b\\f".to_string()),
                    // A surrogate pair, a lone high one, a lone low one, a high one before
                    // an escape that is not a low one.
                    proptest::strategy::Just("\\ud83d\\ude00".to_string()),
                    proptest::strategy::Just("\\ud83d".to_string()),
                    proptest::strategy::Just("\\ude00".to_string()),
                    proptest::strategy::Just("\\ud83d\\u0041".to_string()),
                    "[a-z ]{0,12}",
                ],
                0..24,
            )
        ) {
            let raw = parts.concat();
            let mut map = Vec::new();
            let text = decode(raw.as_bytes(), Some(&mut map)).unwrap();
            let (want_text, want_map) = decode_before(raw.as_bytes()).unwrap();
            proptest::prop_assert_eq!(&text, &want_text);
            proptest::prop_assert_eq!(map, want_map);
            proptest::prop_assert_eq!(decode(raw.as_bytes(), None).unwrap(), want_text);
        }
    }

    #[test]
    fn splices_apply_in_order() {
        let out = apply(
            b"0123456789",
            &[
                Splice {
                    start: 1,
                    end: 3,
                    with: "ab".into(),
                },
                Splice {
                    start: 5,
                    end: 5,
                    with: "X".into(),
                },
                Splice {
                    start: 8,
                    end: 10,
                    with: String::new(),
                },
            ],
        );
        assert_eq!(out, b"0ab34X567");
    }
}
