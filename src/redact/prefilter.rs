//! The redactor's prefilter: does a message possibly hold something a rule would take out? A
//! "no" must be certain (the message is then taped verbatim, unparsed); a "yes" only sends the
//! message through the exact JSON walk. Almost every message is a "no", so this runs on every
//! byte recorded and has to go at memory speed.
//!
//! A multi-pattern regex over the whole message ran at about 230 MB/s (a lazy DFA stepping byte by
//! byte). Here each rule is reduced to the bytes it cannot match without:
//! - a sensitive key (and the suffix and `name = value` rules) needs a `:` or `=` right after the
//!   name (quotes and blanks between): only the names in front of those separators are looked at
//!   (`memchr2`, SIMD);
//! - a URL with credentials needs `://` and a later `@`; a URL parameter needs `?name=`/`&name=`;
//! - a credential shape is at least 15 token characters in a row, an auth-scheme credential at
//!   least 8, and the high-entropy rule needs a quoted string of 24–128 token characters: only
//!   such runs are checked, the shapes by their own regexes on just that window;
//! - a private key needs `-----BEGIN`.
//!
//! Messages with non-ASCII text are read through their ASCII shadow ([`ascii_shadow`]): one
//! byte a character, the byte each rule of the regex set treats the character as (Unicode
//! blanks as a space, anything else as a byte no rule takes). They went through the regex set
//! until session 37: its first use compiled it and built a lazy DFA for some ten milliseconds,
//! and each message after cost four to five times the byte rules' time. Messages that are not
//! UTF-8 still go through the set, as do all messages when a user key holds characters a name
//! run cannot (a space, a dot); those holding `K` or `ſ` (which `(?i)` folds onto `k` and `s`)
//! go to the exact walk. User regexes (`re:`) cannot be reasoned about: they run over the
//! whole message, as before.

use super::rules;
use std::collections::BTreeSet;

/// Longest name looked at in front of a separator; a longer run is treated as a possible match.
const MAX_NAME: usize = 128;

/// The shortest run of token characters a credential shape can match (slack: `xoxb-` + 10).
const MIN_SHAPE_RUN: usize = 15;

/// How far before a long run a shape may start (`[0-9]{8,10}:` before a Telegram token).
const SHAPE_LEAD: usize = 24;

/// The shortest credential after `Bearer`/`Basic`/`Token` (AUTH_SCHEME's `{8,}`).
const MIN_AUTH_RUN: usize = 8;

/// What [`Prefilter::may_match_runs`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// [`Prefilter::may_match`].
    pub may_match: bool,
    /// A run of `LONG_RUN` token characters or more may be there (`false` is certain).
    pub long_run: bool,
}

/// The shortest stretch the quote walks look at: the high-entropy rule's shortest string, and
/// the shortest base64 that is decoded.
const LONG_RUN: usize = if rules::ENTROPY_MIN_LEN < rules::BASE64_MIN_LEN {
    rules::ENTROPY_MIN_LEN
} else {
    rules::BASE64_MIN_LEN
};
// The run scan sees every run of `MIN_AUTH_RUN` or more: a long run is one of those.
const _: () = assert!(LONG_RUN >= MIN_AUTH_RUN);

pub(crate) struct Prefilter {
    /// Squashed (lower-case, no `-`/`_`) key names: the defaults and the user's.
    keys: BTreeSet<String>,
    defaults: bool,
    /// The default credential shapes, run only on windows around long token runs.
    shapes: Option<super::lazy::Lazy<Vec<String>, regex::bytes::RegexSet>>,
    /// The user's own regexes: over the whole message.
    user: Option<regex::bytes::RegexSet>,
    /// Everything as one regex set (the old prefilter): for messages the byte rules above do
    /// not cover.
    full: super::lazy::Lazy<Vec<String>, regex::bytes::RegexSet>,
    /// A user key has characters outside `[a-z0-9]`: the name runs cannot find it.
    exotic_keys: bool,
    /// Every sensitive name (keys and suffixes) by its last two bytes. `None` when a name is
    /// shorter.
    endings: Option<Endings>,
    /// `-----BEGIN`, built once (a `Finder` has set-up cost).
    pem: memchr::memmem::Finder<'static>,
    /// The sensitive words of `rules::KEYWORD`, where they start a word or a name's part.
    keyword: super::lazy::Lazy<String, regex::bytes::Regex>,
    /// Exact secrets (`check --fill`), as they are and as they look inside a JSON string.
    literals: Vec<memchr::memmem::Finder<'static>>,
    /// Windows the shapes were run on lately and did not match.
    clean: CleanWindows,
}

impl Prefilter {
    pub(crate) fn new(
        keys: &BTreeSet<String>,
        defaults: bool,
        user_patterns: &[String],
        literals: &[(String, String)],
    ) -> Result<Prefilter, regex::Error> {
        let shapes = defaults.then(|| {
            super::lazy::builtin_set(
                rules::SHAPES
                    .iter()
                    .map(|(_, re)| rules::ascii_words(re))
                    .collect(),
            )
        });
        let user = if user_patterns.is_empty() {
            None
        } else {
            Some(regex::bytes::RegexSet::new(user_patterns)?)
        };
        let suffixes: &[&str] = if defaults {
            rules::SENSITIVE_SUFFIXES
        } else {
            &[]
        };
        let names = keys
            .iter()
            .map(String::as_str)
            .chain(suffixes.iter().copied());
        let mut endings = Some(Endings {
            set: Box::new([0u64; 1024]),
            names: Vec::new(),
        });
        for (i, name) in names.enumerate() {
            match (name.as_bytes(), endings.as_mut()) {
                ([.., a, b], Some(e)) => {
                    let end = u16::from_be_bytes([*a, *b]);
                    e.set[end as usize / 64] |= 1 << (end % 64);
                    e.names.push((end, name.into(), i >= keys.len()));
                }
                _ => endings = None,
            }
        }
        if let Some(e) = endings.as_mut() {
            e.names.sort();
        }
        let mut finders = Vec::new();
        for (_, lit) in literals {
            let escaped = serde_json::to_string(lit).expect("strings serialize");
            let escaped = &escaped[1..escaped.len() - 1];
            finders.push(memchr::memmem::Finder::new(lit.as_bytes()).into_owned());
            if escaped != lit {
                finders.push(memchr::memmem::Finder::new(escaped.as_bytes()).into_owned());
            }
        }
        Ok(Prefilter {
            endings,
            exotic_keys: keys.iter().any(|k| {
                !k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            }),
            full: super::lazy::builtin_set(full_set(keys, defaults)),
            keys: keys.clone(),
            defaults,
            shapes,
            user,
            pem: memchr::memmem::Finder::new(b"-----BEGIN"),
            keyword: super::lazy::builtin_bytes(rules::ascii_words(&keyword_pattern())),
            literals: finders,
            clean: CleanWindows::default(),
        })
    }

    /// Compiles every deferred regex now (a test that they all compile).
    #[cfg(test)]
    pub(crate) fn force_all(&self) {
        self.compile_prose_rules();
        let _: &regex::bytes::RegexSet = &self.full;
    }

    /// Compiles the regexes text with a keyword in it needs: all but the whole set, which only
    /// text that is not UTF-8 and a user's key outside `[a-z0-9]` send messages to.
    pub(crate) fn compile_prose_rules(&self) {
        if let Some(shapes) = &self.shapes {
            let _: &regex::bytes::RegexSet = shapes;
        }
        let _: &regex::bytes::Regex = &self.keyword;
    }

    /// Whether a key, shape, scheme, URL or user rule might match (`false` is certain).
    #[cfg(test)]
    pub(crate) fn may_match(&self, bytes: &[u8]) -> bool {
        self.may_match_runs(bytes).may_match
    }

    /// [`Prefilter::may_match`], and whether `bytes` may hold a run of token characters long
    /// enough for the quote walks ([`has_quoted_token`], and the quoted-stretch part of
    /// [`has_entropy_candidate_or_hidden_text`]) to find anything: the run scan this does
    /// anyway sees every run of 8 token characters or more, so when it ran and saw none of
    /// `LONG_RUN` or more, those walks are certain to find nothing (every stretch they take is
    /// `LONG_RUN` or more characters of a subset of the token characters, between quotes).
    pub(crate) fn may_match_runs(&self, bytes: &[u8]) -> Scan {
        let unknown = |may_match| Scan {
            may_match,
            long_run: true,
        };
        if self.user.as_ref().is_some_and(|u| u.is_match(bytes)) {
            return unknown(true);
        }
        if !self.literals.is_empty()
            && (self.literals.iter().any(|f| f.find(bytes).is_some()) || has_escapes(bytes))
        {
            return unknown(true);
        }
        if self.exotic_keys {
            return unknown(self.full.is_match(bytes));
        }
        // Non-ASCII text is read through its shadow: what the regex set would catch in the text
        // the byte rules catch in the shadow (`never_misses_what_the_regex_set_catches`).
        let shadow;
        let bytes = if bytes.is_ascii() {
            bytes
        } else {
            match ascii_shadow(bytes) {
                Ok(s) => {
                    shadow = s;
                    &shadow[..]
                }
                // The regex set's `(?i)` and the rules' `(?-u:\b)` read these two letters
                // differently (`KAuthorization:x`: no name to the set, one to the rules): the
                // exact walk decides. They are rare enough for that to cost nothing.
                Err(NoShadow::Folds) => return unknown(true),
                Err(NoShadow::NotUtf8) => return unknown(self.full.is_match(bytes)),
            }
        };
        // Whether the message has a `-` at all (the flag scan sees every one).
        let mut dash = false;
        if !self.keys.is_empty() || self.defaults {
            // What each byte a scan stops at asks; both ways of finding them below call it.
            let mut stop = |at: usize| match bytes[at] {
                b'>' => self.xml_hit(bytes, at),
                b'-' => {
                    dash = true;
                    self.flag_hit(bytes, at)
                }
                _ => self.separator_hit(bytes, at),
            };
            let hit = if bytes.len() < SHORT_SCAN {
                // One pass for the four bytes: in a short message (a request, a stream event)
                // a `memchr` call per separator costs more than the bytes it skips (measured:
                // ~1,500 of the 6,200 instructions a `tools/call` request's scan took), and a
                // loop over its bytes cost ~13 instructions a byte (1,300 of the 4,000 a
                // stream event's scan took): the stops are found 64 bytes at a time.
                any_stop(bytes, &mut stop)
            } else {
                memchr::memchr3_iter(b':', b'=', b'>', bytes).any(&mut stop)
                    || memchr::memchr_iter(b'-', bytes).any(&mut stop)
            };
            if hit {
                return unknown(true);
            }
        }
        if !self.defaults {
            return unknown(false);
        }
        // `-----BEGIN` needs a `-`: most messages (a stream's text deltas) have none, and are
        // spared the search.
        if dash && self.pem.find(bytes).is_some() {
            return unknown(true);
        }
        let (hit, longest) = self.runs_hit(bytes);
        if hit {
            return unknown(true);
        }
        Scan {
            may_match: self.keyword_hit(bytes),
            long_run: longest >= LONG_RUN,
        }
    }

    /// A `:` or `=` at `at`: is the name in front of it sensitive, or is it a URL with
    /// credentials or a secret query parameter?
    fn separator_hit(&self, bytes: &[u8], at: usize) -> bool {
        let sep = bytes[at];
        if self.defaults
            && sep == b':'
            && bytes[at + 1..].starts_with(b"//")
            && memchr::memchr(b'@', &bytes[at..]).is_some()
        {
            return true;
        }
        // Back over blanks, one quote (`"`, `'`) and the backslash escaping it (`\"`).
        let mut end = at;
        while end > 0 && is_blank(bytes[end - 1]) {
            end -= 1;
        }
        if end > 0 && matches!(bytes[end - 1], b'"' | b'\'') {
            end -= 1;
            // Escaped once or more (JSON in a string in a string: `\\\"password\\\":`).
            while end > 0 && bytes[end - 1] == b'\\' {
                end -= 1;
            }
        }
        let mut start = end;
        // Whether the name has a `-` (most have none: the split below is then skipped).
        let mut dash = false;
        while start > 0 && is_name_byte(bytes[start - 1]) {
            start -= 1;
            dash |= bytes[start] == b'-';
            if end - start > MAX_NAME {
                return true;
            }
        }
        if start == end {
            return false;
        }
        if start > 0 && bytes[start - 1] == b'\\' {
            // A name written with JSON escapes (`"p\u0061ssword":`) cannot be judged from its
            // bytes; after `\n`, `\t`, `\r` the name starts one byte later.
            if end < at && !matches!(bytes[start], b'n' | b't' | b'r') {
                return true;
            }
            start += 1;
            if start == end {
                return false;
            }
        }
        let name = &bytes[start..end];
        // The assignment rule's name starts at a word boundary: after a `-` too, when what is
        // in front of it starts with a digit (`0-Authorization:` assigns `Authorization`).
        if self.sensitive_name_bytes(name)
            || (dash
                && (1..name.len())
                    .any(|i| name[i - 1] == b'-' && self.sensitive_name_bytes(&name[i..])))
        {
            return true;
        }
        self.defaults
            && sep == b'='
            && start > 0
            && matches!(bytes[start - 1], b'?' | b'&' | b';')
            && rules::URL_PARAM_NAMES
                .iter()
                .any(|p| name.eq_ignore_ascii_case(p.as_bytes()))
    }

    /// Whether a name (as bytes) is sensitive once squashed.
    fn sensitive_name_bytes(&self, name: &[u8]) -> bool {
        if name.len() > MAX_NAME {
            return true;
        }
        // Most names end in no sensitive name's last two letters: ruled out from those, before
        // the name is squashed (as `sensitive_name` would, from the squashed name's last two).
        debug_assert!(name.is_ascii(), "names are runs of ASCII name bytes");
        if let Some(e) = &self.endings {
            let mut tail = name
                .iter()
                .rev()
                .filter(|&&b| b != b'-' && b != b'_')
                .map(u8::to_ascii_lowercase);
            match (tail.next(), tail.next()) {
                (Some(b), Some(a)) if !e.has(u16::from_be_bytes([a, b])) => return false,
                (Some(_), Some(_)) => {}
                // Shorter than every sensitive name (all have two bytes or more).
                _ => return false,
            }
        }
        let mut squashed = [0u8; MAX_NAME];
        let mut n = 0;
        for &b in name {
            if b != b'-' && b != b'_' {
                squashed[n] = b.to_ascii_lowercase();
                n += 1;
            }
        }
        match std::str::from_utf8(&squashed[..n]) {
            Ok(sq) => self.sensitive_name(sq),
            Err(_) => true,
        }
    }

    /// A command-line flag in text: `--api-key X`, `-p X`, `-u user:pass`, `-pX`.
    fn flag_hit(&self, bytes: &[u8], at: usize) -> bool {
        let before_ok = at == 0
            || matches!(bytes[at - 1], b'\'' | b'"' | b'(' | b'=')
            || is_blank(bytes[at - 1])
            || (at >= 2 && bytes[at - 2] == b'\\' && matches!(bytes[at - 1], b'n' | b't' | b'r'));
        if !before_ok {
            return false;
        }
        let mut i = at + 1;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        let start = i;
        if !bytes.get(i).is_some_and(u8::is_ascii_alphabetic) {
            return false;
        }
        while i < bytes.len() && is_name_byte(bytes[i]) {
            i += 1;
        }
        let name = &bytes[start..i];
        // `-pSECRET`.
        if start == at + 1
            && name.len() > 1
            && name[0] == b'p'
            && !matches!(bytes[at + 2], b'\'' | b'"' | b'=' | b'-')
        {
            return true;
        }
        let then = bytes.get(i).copied();
        if !matches!(then, Some(b' ' | b'\t' | b'=')) {
            return false;
        }
        let flag_named =
            |list: &[&str]| list.iter().any(|f| name.eq_ignore_ascii_case(f.as_bytes()));
        self.sensitive_name_bytes(name)
            || flag_named(rules::SECRET_FLAGS)
            || flag_named(rules::USER_PASS_FLAGS)
    }

    /// `<password>`: a sensitive name as an XML element.
    fn xml_hit(&self, bytes: &[u8], at: usize) -> bool {
        let mut start = at;
        while start > 0
            && (is_name_byte(bytes[start - 1]) || matches!(bytes[start - 1], b'.' | b':'))
        {
            start -= 1;
            if at - start > MAX_NAME {
                return true;
            }
        }
        if start == 0 || bytes[start - 1] != b'<' || start == at {
            return false;
        }
        // The part after a namespace prefix or a dot decides, as squashing keeps those.
        let name = &bytes[start..at];
        let last = name
            .iter()
            .rposition(|&b| b == b':' || b == b'.')
            .map_or(name, |i| &name[i + 1..]);
        self.sensitive_name_bytes(name) || self.sensitive_name_bytes(last)
    }

    /// A sensitive word with something that may be a credential within a few words after it
    /// (`password afffac04-…`, `the password for the office is oeHVn…`).
    ///
    /// The keyword regex is case-insensitive, so no literal prefilter speeds it up (its words
    /// expand to too many literals) and over a whole message it ran at ~0.5 GB/s, the slowest
    /// step of taping a message. It now runs only on windows around the gate's trigrams; a
    /// window's edges count as word boundaries, so a window finds every match the whole
    /// message holds (and perhaps a few more, which only costs the exact walk).
    fn keyword_hit(&self, bytes: &[u8]) -> bool {
        let mut window: Option<(usize, usize)> = None;
        let mut hit = false;
        for_each_gate_hit(bytes, |g| {
            let (s, e) = (
                g.saturating_sub(KEYWORD_WINDOW),
                (g + 3 + KEYWORD_WINDOW).min(bytes.len()),
            );
            match window {
                Some((ws, we)) if s <= we => window = Some((ws, we.max(e))),
                Some(w) if self.keyword_in(bytes, w) => {
                    hit = true;
                    return false;
                }
                _ => window = Some((s, e)),
            }
            true
        });
        hit || window.is_some_and(|w| self.keyword_in(bytes, w))
    }

    /// A sensitive word in `bytes[start..end]` with something like a credential after it.
    fn keyword_in(&self, bytes: &[u8], (start, end): (usize, usize)) -> bool {
        self.keyword.find_iter(&bytes[start..end]).any(|m| {
            let at = start + m.end();
            let tail = &bytes[at..(at + rules::KEYWORD_REACH + 6).min(bytes.len())];
            let line = memchr::memchr(b'\n', tail).map_or(tail, |i| &tail[..i]);
            // A credential has a digit or a symbol (`text::looks_secret`): a word does not.
            line.iter().any(|&b| is_credential_mark(b))
        })
    }

    /// Whether a squashed name is a sensitive key or ends in a sensitive word.
    fn sensitive_name(&self, squashed: &str) -> bool {
        // A superset of the exact rule: `NOT_SENSITIVE_KEYS` is left to it.
        if let Some(e) = &self.endings {
            // A key equal to the name, or a suffix it ends in, ends as it does (every one has
            // two bytes or more): only those are compared.
            let [.., a, b] = squashed.as_bytes() else {
                return false;
            };
            let end = u16::from_be_bytes([*a, *b]);
            if !e.has(end) {
                return false;
            }
            let from = e.names.partition_point(|(k, ..)| *k < end);
            return e.names[from..].iter().take_while(|(k, ..)| *k == end).any(
                |(_, name, suffix)| {
                    if *suffix {
                        squashed.ends_with(&**name)
                    } else {
                        squashed == &**name
                    }
                },
            );
        }
        self.keys.contains(squashed)
            || (self.defaults
                && rules::SENSITIVE_SUFFIXES
                    .iter()
                    .any(|s| squashed.ends_with(s)))
    }

    /// Runs of token characters long enough to be a credential: a shape inside one, a scheme
    /// (`Bearer`, `Basic`, `Token`) and blanks in front of one.
    /// Also returns the longest run seen (every run of `MIN_AUTH_RUN` or more is seen, in
    /// full, unless one hits first).
    fn runs_hit(&self, bytes: &[u8]) -> (bool, usize) {
        let mut from = 0;
        let mut longest = 0;
        while let Some(at) = next_long_run(bytes, from) {
            // The whole run around the first 8 token bytes found.
            let mut start = at;
            while start > from && is_token_byte(bytes[start - 1]) {
                start -= 1;
            }
            let mut end = at + MIN_AUTH_RUN;
            while end < bytes.len() && is_token_byte(bytes[end]) {
                end += 1;
            }
            longest = longest.max(end - start);
            if follows_scheme(bytes, start) {
                return (true, longest);
            }
            if end - start >= MIN_SHAPE_RUN {
                // The window keeps one byte after, for the shapes' `\b`, and some before: a
                // shape may begin with characters that are not token characters
                // (`123456789:AA…`, a Telegram bot token).
                let window = &bytes[start.saturating_sub(SHAPE_LEAD)..(end + 1).min(bytes.len())];
                // In JSON a shape may follow `\n` (the `n` would spoil its `\b`): the window is
                // also looked at with escapes turned into blanks.
                if let Some(shapes) = &self.shapes {
                    if !self.clean.has(window) {
                        if shapes_match(shapes, window) {
                            return (true, longest);
                        }
                        self.clean.add(window);
                    }
                }
            }
            from = end;
        }
        (false, longest)
    }
}

/// Whether a credential shape matches `window`, as it is or with its JSON escapes decoded.
fn shapes_match(shapes: &regex::bytes::RegexSet, window: &[u8]) -> bool {
    if shapes.is_match(window) {
        return true;
    }
    // JSON in a string in a string escapes twice (`\\n`): a level at a time.
    let mut level = unescape(window);
    for _ in 0..3 {
        let Some(u) = level else { break };
        if shapes.is_match(&u) {
            return true;
        }
        level = unescape(&u);
    }
    false
}

/// The last few windows no credential shape matched ([`shapes_match`] is a function of the
/// window's bytes alone, so an equal window is certain not to match either). A stream's events
/// repeat their structure, and with it their long runs (Anthropic's `content_block_delta`,
/// an OpenAI chunk's `id`, `object` and `model`): without this, each event sent the same
/// window through the shapes' regexes (measured: ~500 of the ~4,000 instructions a text
/// delta's scan took).
#[derive(Default)]
struct CleanWindows(std::sync::Mutex<CleanRing>);

/// How many windows [`CleanWindows`] keeps, and the longest it keeps.
const CLEAN_SLOTS: usize = 8;
const CLEAN_MAX: usize = 64;

struct CleanRing {
    windows: [(u8, [u8; CLEAN_MAX]); CLEAN_SLOTS],
    /// The slot the next window goes in (the oldest).
    next: usize,
}

impl Default for CleanRing {
    fn default() -> CleanRing {
        CleanRing {
            windows: [(0, [0; CLEAN_MAX]); CLEAN_SLOTS],
            next: 0,
        }
    }
}

impl CleanWindows {
    /// Whether `window` is known not to match. Another thread holding the memo is not waited
    /// for: the window is then simply not known.
    fn has(&self, window: &[u8]) -> bool {
        if window.is_empty() || window.len() > CLEAN_MAX {
            return false;
        }
        let Ok(ring) = self.0.try_lock() else {
            return false;
        };
        ring.windows
            .iter()
            .any(|(len, w)| usize::from(*len) == window.len() && &w[..window.len()] == window)
    }

    /// Remembers that `window` did not match (in place of the oldest one remembered).
    fn add(&self, window: &[u8]) {
        if window.is_empty() || window.len() > CLEAN_MAX {
            return;
        }
        let Ok(mut ring) = self.0.try_lock() else {
            return;
        };
        let at = ring.next;
        let slot = &mut ring.windows[at];
        slot.0 = window.len() as u8;
        slot.1[..window.len()].copy_from_slice(window);
        ring.next = (at + 1) % CLEAN_SLOTS;
    }
}

/// Every sensitive name by its last two bytes, when all of them have two or more.
struct Endings {
    /// Bit `b1 << 8 | b2` set when a name ends in `b1 b2`: most names are ruled out by one
    /// lookup.
    set: Box<[u64; 1024]>,
    /// (ending, name, is a suffix), sorted: a name that passes `set` is compared with only
    /// the names that end as it does (a `tools/call` request's `arguments` was compared with
    /// every key and suffix: callgrind put the request's eight names at 1,609 instructions,
    /// most of them the two that got past `set`).
    names: Vec<(u16, Box<str>, bool)>,
}

impl Endings {
    fn has(&self, end: u16) -> bool {
        self.set[end as usize / 64] & (1 << (end % 64)) != 0
    }
}

/// Where the first 8 token bytes in a row start, at or after `from`. Token-ness is computed 64
/// bytes at a time into a bit mask (which the compiler turns into vector compares), and 8 in a
/// row found by shifting the mask onto itself. Windows overlap by 8 bytes, so no run is missed
/// at a window edge.
fn next_long_run(bytes: &[u8], from: usize) -> Option<usize> {
    const WINDOW: usize = 64;
    const STEP: usize = WINDOW - MIN_AUTH_RUN;
    let mut base = from;
    while base + MIN_AUTH_RUN <= bytes.len() {
        let window = &bytes[base..(base + WINDOW).min(bytes.len())];
        let mask = padded_mask(window, token_mask);
        let mut eight = mask & (mask >> 1);
        eight &= eight >> 2;
        eight &= eight >> 4;
        // Bits whose 8-run would reach past the window are not real runs (yet).
        let valid = window.len().saturating_sub(MIN_AUTH_RUN - 1);
        if valid < 64 {
            eight &= (1u64 << valid) - 1;
        }
        if eight != 0 {
            return Some(base + eight.trailing_zeros() as usize);
        }
        base += STEP;
    }
    None
}

/// Bit `i` set when `window[i]` is a token byte: 32 bytes per step with AVX2 where the CPU has
/// it (this scan runs over every byte taped: on an 8 MiB answer it was the largest part of the
/// prefilter), else 16 with SSE2 (part of every x86-64 CPU).
#[cfg(target_arch = "x86_64")]
fn token_mask(window: &[u8; 64]) -> u64 {
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked; the answer is cached by std).
        unsafe { token_mask_avx2(window) }
    } else {
        token_mask_sse2(window)
    }
}

/// [`token_mask_sse2`] 32 bytes at a time (macros, not closures: the comparisons must be
/// compiled with AVX2 enabled).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn token_mask_avx2(window: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY: AVX2 is there (the caller's promise); every load reads 32 bytes inside `window`,
    // and `loadu` needs no alignment.
    unsafe {
        macro_rules! in_range {
            ($x:expr, $lo:expr, $hi:expr) => {{
                let t = _mm256_sub_epi8($x, _mm256_set1_epi8($lo as i8));
                _mm256_cmpeq_epi8(_mm256_min_epu8(t, _mm256_set1_epi8(($hi - $lo) as i8)), t)
            }};
        }
        macro_rules! is {
            ($x:expr, $b:expr) => {
                _mm256_cmpeq_epi8($x, _mm256_set1_epi8($b as i8))
            };
        }
        let mut mask = 0u64;
        for (i, part) in window.chunks_exact(32).enumerate() {
            let x = _mm256_loadu_si256(part.as_ptr().cast());
            let letters = in_range!(_mm256_or_si256(x, _mm256_set1_epi8(0x20)), b'a', b'z');
            let digits = in_range!(x, b'0', b'9');
            let punct = _mm256_or_si256(
                _mm256_or_si256(in_range!(x, b'-', b'/'), is!(x, b'+')), // `-` `.` `/` `+`
                _mm256_or_si256(_mm256_or_si256(is!(x, b'='), is!(x, b'_')), is!(x, b'~')),
            );
            let all = _mm256_or_si256(_mm256_or_si256(letters, digits), punct);
            mask |= (_mm256_movemask_epi8(all) as u32 as u64) << (32 * i);
        }
        mask
    }
}

/// Bit `i` set when `window[i]` is a token byte: 16 bytes per step with SSE2, classified by
/// range compares.
#[cfg(target_arch = "x86_64")]
fn token_mask_sse2(window: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY (every block below): SSE2 is part of the x86-64 baseline, so these intrinsics are
    // always available.
    // `lo <= x <= hi` as unsigned bytes: `min(x - lo, hi - lo) == x - lo`.
    let in_range = |x: __m128i, lo: u8, hi: u8| unsafe {
        let t = _mm_sub_epi8(x, _mm_set1_epi8(lo as i8));
        _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8((hi - lo) as i8)), t)
    };
    let is = |x: __m128i, b: u8| unsafe { _mm_cmpeq_epi8(x, _mm_set1_epi8(b as i8)) };
    sse2_mask(window, |x| unsafe {
        let letters = in_range(_mm_or_si128(x, _mm_set1_epi8(0x20)), b'a', b'z');
        let digits = in_range(x, b'0', b'9');
        let punct = _mm_or_si128(
            _mm_or_si128(in_range(x, b'-', b'/'), is(x, b'+')), // `-` `.` `/` `+`
            _mm_or_si128(_mm_or_si128(is(x, b'='), is(x, b'_')), is(x, b'~')),
        );
        _mm_or_si128(_mm_or_si128(letters, digits), punct)
    })
}

/// Bit `i` set when `class` sets byte `i % 16` of what it gives for the 16 bytes holding
/// `window[i]` (a compare's all-ones lane): 16 bytes per step, packed with `movemask`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn sse2_mask(
    window: &[u8; 64],
    class: impl Fn(std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i,
) -> u64 {
    use std::arch::x86_64::*;
    let mut mask = 0u64;
    for (i, part) in window.chunks_exact(16).enumerate() {
        // SAFETY: SSE2 is part of the x86-64 baseline; the load reads the 16 bytes of `part`,
        // and `loadu` needs no alignment.
        let lanes = unsafe { _mm_movemask_epi8(class(_mm_loadu_si128(part.as_ptr().cast()))) };
        mask |= (lanes as u16 as u64) << (16 * i);
    }
    mask
}

/// `mask` of the first 64 bytes of `bytes`; fewer (the last window of a message, all of a short
/// one) padded with zeros, which no mask sets a bit for (no token byte, letter or stop), so that
/// the vector compares always read 64 bytes.
fn padded_mask(bytes: &[u8], mask: impl Fn(&[u8; 64]) -> u64) -> u64 {
    match <&[u8; 64]>::try_from(bytes.get(..64).unwrap_or(bytes)) {
        Ok(full) => mask(full),
        Err(_) => {
            let mut pad = [0u8; 64];
            pad[..bytes.len()].copy_from_slice(bytes);
            mask(&pad)
        }
    }
}

/// Bit `i` set when `window[i]` passes `test`, a byte at a time (where there is no SSE2, and
/// for the tests).
#[cfg(any(test, not(target_arch = "x86_64")))]
fn byte_mask(window: &[u8; 64], test: impl Fn(u8) -> bool) -> u64 {
    window
        .iter()
        .enumerate()
        .fold(0u64, |m, (i, &b)| m | (test(b) as u64) << i)
}

#[cfg(not(target_arch = "x86_64"))]
fn token_mask(window: &[u8; 64]) -> u64 {
    byte_mask(window, is_token_byte)
}

/// Whether one of `rules::AUTH_SCHEMES` (any case) and at least one blank end right before
/// `start`.
fn follows_scheme(bytes: &[u8], start: usize) -> bool {
    let mut end = start;
    while end > 0 && is_blank(bytes[end - 1]) {
        end -= 1;
    }
    if end == start {
        return false;
    }
    let before = &bytes[..end];
    rules::AUTH_SCHEMES.iter().any(|w| {
        let w = w.as_bytes();
        before.len() >= w.len() && before[before.len() - w.len()..].eq_ignore_ascii_case(w)
    })
}

/// Characters of a key or parameter name as the key rules see them.
fn is_name_byte(b: u8) -> bool {
    NAME_BYTES[b as usize]
}

/// [`is_name_byte`] as a table: the walk back over every name before a `:` or `=` looks each
/// byte up once (the comparisons cost ~19 instructions a byte).
static NAME_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
        b += 1;
    }
    t
};

/// The bytes a short message's one pass stops at: separators (`:`, `=`), a tag's end (`>`)
/// and a flag's dash (`-`).
const STOPS: [u8; 4] = [b':', b'=', b'>', b'-'];

/// Calls `f` at every [`STOPS`] byte of `bytes`, in order, until it returns `true` (then
/// `true`). The stops of 64 bytes are found at once, as a bit mask.
fn any_stop(bytes: &[u8], mut f: impl FnMut(usize) -> bool) -> bool {
    for (k, window) in bytes.chunks(64).enumerate() {
        let mut mask = padded_mask(window, stop_mask);
        while mask != 0 {
            if f(k * 64 + mask.trailing_zeros() as usize) {
                return true;
            }
            mask &= mask - 1;
        }
    }
    false
}

/// Bit `i` set when `window[i]` is one of [`STOPS`]: four compares per 16 bytes with SSE2.
#[cfg(target_arch = "x86_64")]
fn stop_mask(window: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86-64 baseline, so these intrinsics are always available.
    let is = |x: __m128i, b: u8| unsafe { _mm_cmpeq_epi8(x, _mm_set1_epi8(b as i8)) };
    sse2_mask(window, |x| unsafe {
        _mm_or_si128(
            _mm_or_si128(is(x, STOPS[0]), is(x, STOPS[1])),
            _mm_or_si128(is(x, STOPS[2]), is(x, STOPS[3])),
        )
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn stop_mask(window: &[u8; 64]) -> u64 {
    byte_mask(window, |b| STOPS.contains(&b))
}

/// Characters of a credential (AUTH_SCHEME's class, which holds every shape's). Comparisons
/// only, no table or slice search, so that the window loop vectorizes.
#[inline(always)]
fn is_token_byte(b: u8) -> bool {
    (b | 0x20).wrapping_sub(b'a') < 26
        || b.wrapping_sub(b'0') < 10
        || b == b'.'
        || b == b'_'
        || b == b'~'
        || b == b'+'
        || b == b'/'
        || b == b'='
        || b == b'-'
}

/// What the byte rules read in place of a non-ASCII character: no letter, digit, token
/// character, blank, quote, separator, escape or symbol any rule looks for, so that every
/// negated class of the regex set (`[^a-z0-9_]`, `[^\s]`, `[^\n]`) takes it as it takes the
/// character, and no other rule does.
const NOT_ASCII: u8 = b'`';

/// Why a message has no ASCII shadow.
#[derive(Debug, PartialEq, Eq)]
enum NoShadow {
    /// It holds `K` (KELVIN SIGN) or `ſ` (LONG S), the only characters `(?i)` folds onto ASCII
    /// letters (`only_kelvin_and_long_s_fold_onto_ascii`): one byte cannot stand for them (a
    /// letter to `(?i)`, no word character to `(?-u:\b)`).
    Folds,
    /// It is not UTF-8.
    NotUtf8,
}

/// UTF-8 text as the byte rules can read it, one byte a character: Unicode blanks (the set's
/// `\s`) as a space, any other character as [`NOT_ASCII`]. A `(?-u:\b)` sees the same
/// boundaries in the shadow as in the text; a Unicode `\b` sees more (a non-ASCII letter next
/// to an ASCII one becomes a boundary), never fewer, so whatever the regex set or the exact
/// rules match in the text, they match in the shadow.
fn ascii_shadow(bytes: &[u8]) -> Result<Vec<u8>, NoShadow> {
    let text = std::str::from_utf8(bytes).map_err(|_| NoShadow::NotUtf8)?;
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(skip) = first_non_ascii(&text.as_bytes()[at..]) {
        out.extend_from_slice(&text.as_bytes()[at..at + skip]);
        at += skip;
        let c = text[at..].chars().next().expect("a character starts here");
        out.push(match c {
            '\u{212A}' | '\u{017F}' => return Err(NoShadow::Folds),
            c if c.is_whitespace() => b' ',
            _ => NOT_ASCII,
        });
        at += c.len_utf8();
    }
    out.extend_from_slice(&text.as_bytes()[at..]);
    Ok(out)
}

/// Where the first byte with the high bit set is, eight bytes at a time (a message is mostly
/// ASCII between its non-ASCII characters).
fn first_non_ascii(bytes: &[u8]) -> Option<usize> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for w in words.by_ref() {
        let high = u64::from_le_bytes(w.try_into().expect("eight bytes")) & HIGH;
        if high != 0 {
            return Some(at + high.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|b| !b.is_ascii())
        .map(|i| at + i)
}

/// The regex `\s` on ASCII: space, `\t`, `\n`, `\v`, `\f`, `\r` (`u8::is_ascii_whitespace`
/// leaves out `\v`).
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Below this many bytes, the quote walkers find the next quote with a plain loop: in a
/// short message (a stream event: ~100 bytes, a quote every 6) a `memchr` call per quote
/// costs more than the bytes it skips (measured: a third of the proxy's memchr time).
const SHORT_SCAN: usize = 256;

/// The first `needle` in `bytes` (as `memchr::memchr`).
fn find_byte(needle: u8, bytes: &[u8]) -> Option<usize> {
    if bytes.len() < SHORT_SCAN {
        bytes.iter().position(|&b| b == needle)
    } else {
        memchr::memchr(needle, bytes)
    }
}

/// The first `a` or `b` in `bytes` (as `memchr::memchr2`).
fn find_byte2(a: u8, b: u8, bytes: &[u8]) -> Option<usize> {
    if bytes.len() < SHORT_SCAN {
        bytes.iter().position(|&c| c == a || c == b)
    } else {
        memchr::memchr2(a, b, bytes)
    }
}

/// Every offset of `needle` in `bytes`, in order (as `memchr::memchr_iter`).
fn byte_offsets(needle: u8, bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let i = at + find_byte(needle, bytes.get(at..)?)?;
        at = i + 1;
        Some(i)
    })
}

/// Whether a quoted string of 24–128 token characters (an opaque-secret candidate for the
/// high-entropy rule) appears: `"…"`, or `\"…\"` inside embedded JSON. Only the stretches
/// between quotes are looked at.
#[cfg(test)]
pub(crate) fn has_entropy_candidate(bytes: &[u8]) -> bool {
    let mut prev: Option<usize> = None;
    for q in byte_offsets(b'"', bytes) {
        if let Some(p) = prev {
            if is_entropy_stretch(bytes, p, q) {
                return true;
            }
        }
        prev = Some(q);
    }
    false
}

/// Whether the stretch between the quotes at `p` and `q` is an opaque-secret candidate.
fn is_entropy_stretch(bytes: &[u8], p: usize, q: usize) -> bool {
    let mut end = q;
    // `\"` ends the stretch at the backslash.
    if end > p + 1 && bytes[end - 1] == b'\\' {
        end -= 1;
    }
    let run = &bytes[p + 1..end];
    (rules::ENTROPY_MIN_LEN..=rules::ENTROPY_MAX_LEN).contains(&run.len())
        && run
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(b))
}

/// `has_entropy_candidate(bytes) || has_hidden_text(bytes)` with one walk over the quotes
/// instead of two: on a large message each walk is a pass over every byte.
pub(crate) fn has_entropy_candidate_or_hidden_text(bytes: &[u8]) -> bool {
    if has_escapes_or_blob(bytes) {
        return true;
    }
    let mut prev: Option<usize> = None;
    for q in byte_offsets(b'"', bytes) {
        if let Some(p) = prev {
            if is_entropy_stretch(bytes, p, q) || is_base64_text_candidate(&bytes[p + 1..q]) {
                return true;
            }
        }
        prev = Some(q);
    }
    false
}

/// The part of [`has_entropy_candidate_or_hidden_text`] that is not a quoted stretch of
/// `LONG_RUN` token characters or more: escapes, and a resource `blob`.
pub(crate) fn has_escapes_or_blob(bytes: &[u8]) -> bool {
    has_escapes(bytes) || BLOB.find(bytes).is_some()
}

/// `"blob"`, built once: building a memmem searcher costs more than running it over a small
/// message.
static BLOB: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"blob\""));

/// A window with one level of JSON escapes decoded (`\u…` only to a blank: no shape needs
/// it); `None` when it has none.
fn unescape(window: &[u8]) -> Option<Vec<u8>> {
    memchr::memchr(b'\\', window)?;
    let mut out = Vec::with_capacity(window.len());
    let mut i = 0;
    while i < window.len() {
        if window[i] == b'\\' && i + 1 < window.len() {
            out.push(match window[i + 1] {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b @ (b'\\' | b'"' | b'/') => b,
                _ => b' ',
            });
            i += 2;
        } else {
            out.push(window[i]);
            i += 1;
        }
    }
    Some(out)
}

/// What a credential after a sensitive word has and an English word has not: a digit, or a
/// symbol that does not end a word.
fn is_credential_mark(b: u8) -> bool {
    b.is_ascii_digit() || CREDENTIAL_MARKS.contains(&b)
}

const CREDENTIAL_MARKS: &[u8] = b"!#$%*+/?@\\^|~";

/// Every word of `keyword_pattern` holds one of these, in any case: pas(sword, sphrase,
/// scode, swd), pwd, (s)ecr(et), (t)oke(n), key, (cr)ede(ntial). A unit test holds them to it;
/// [`for_each_gate_hit`] finds them (as this regex's `find_iter` would, another test says).
#[cfg(test)]
const KEYWORD_GATE: &str = r"(?i-u)pas|pwd|ecr|oke|key|ede";

/// The gate's trigrams, lower case, as [`gate_mask`] looks for them.
const GATE_TRIGRAMS: [[u8; 3]; 6] = [*b"pas", *b"pwd", *b"ecr", *b"oke", *b"key", *b"ede"];

/// Calls `f` with where each of the gate's trigrams starts (any ASCII case), left to right,
/// not overlapping (what `KEYWORD_GATE`'s `find_iter` gives), until `f` returns false. A
/// stream event is ~100 bytes: the regex's per-search set-up (its teddy searcher, then the
/// DFA to confirm) cost more than the bytes it looked at (measured: ~1,800 instructions per
/// event, a fifth of the redactor's time on a stream of small events). Found here 62 bytes at
/// a time by [`gate_mask`].
fn for_each_gate_hit(bytes: &[u8], mut f: impl FnMut(usize) -> bool) {
    const STEP: usize = 62;
    let mut base = 0;
    let mut next = 0;
    while base + 3 <= bytes.len() {
        let mut mask = padded_mask(&bytes[base..], gate_mask);
        // A trigram starting at 62 or 63 reaches past the window: the next one has it.
        mask &= (1u64 << STEP) - 1;
        while mask != 0 {
            let at = base + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if at >= next {
                if !f(at) {
                    return;
                }
                next = at + 3;
            }
        }
        base += STEP;
    }
}

/// Bit `i` set when `window[i..i + 3]` is one of `GATE_TRIGRAMS` in any ASCII case (bits 62
/// and 63, whose trigrams reach past the window, are never set).
#[cfg(target_arch = "x86_64")]
fn gate_mask(window: &[u8; 64]) -> u64 {
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked; the answer is cached by std).
        unsafe { gate_mask_avx2(window) }
    } else {
        gate_mask_letters(window)
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn gate_mask(window: &[u8; 64]) -> u64 {
    gate_mask_letters(window)
}

/// For each letter position of a trigram (first, second, third), bit `j` of `[p][0][n]` is set
/// when the `p`th letter of `GATE_TRIGRAMS[j]` has `n` for its low nibble, of `[p][1][n]` when
/// it has `n` for its high nibble. A byte's two lookups, ANDed, give the trigrams whose `p`th
/// letter it is: exactly, as each trigram has one letter at each position (both nibbles must
/// match that one letter's).
const GATE_NIBBLES: [[[u8; 16]; 2]; 3] = {
    let mut t = [[[0u8; 16]; 2]; 3];
    let mut j = 0;
    while j < GATE_TRIGRAMS.len() {
        let mut p = 0;
        while p < 3 {
            let c = GATE_TRIGRAMS[j][p];
            t[p][0][(c & 0x0f) as usize] |= 1 << j;
            t[p][1][(c >> 4) as usize] |= 1 << j;
            p += 1;
        }
        j += 1;
    }
    t
};
const _: () = assert!(GATE_TRIGRAMS.len() <= 8, "one bit per trigram in a byte");

/// [`gate_mask`] with AVX2: each byte's trigram set for each position by two table lookups
/// (`vpshufb` on its nibbles), the three positions read as three loads one byte apart and
/// ANDed: about 70 instructions a window where eleven letter compares per 32 bytes took about
/// 170 (callgrind, the bench's 1 KiB answer: the keyword gate 3,448 → 2,116 instructions).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gate_mask_avx2(window: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY: AVX2 is there (the caller's promise); the tables are 16 bytes each and every
    // window load reads 32 bytes at `base + p` ≤ 32, inside `window`; `loadu` needs no
    // alignment.
    unsafe {
        let low4 = _mm256_set1_epi8(0x0f);
        let fold = _mm256_set1_epi8(0x20);
        let table = |t: &[u8; 16]| _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast()));
        // Bit k: a trigram starts at `base + k`.
        let starts = |base: usize| -> u64 {
            let mut all = _mm256_set1_epi8(-1);
            for (p, [lo, hi]) in GATE_NIBBLES.iter().enumerate() {
                let x = _mm256_or_si256(
                    _mm256_loadu_si256(window.as_ptr().add(base + p).cast()),
                    fold,
                );
                let lo_n = _mm256_and_si256(x, low4);
                let hi_n = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low4);
                let set = _mm256_and_si256(
                    _mm256_shuffle_epi8(table(lo), lo_n),
                    _mm256_shuffle_epi8(table(hi), hi_n),
                );
                all = _mm256_and_si256(all, set);
            }
            let none = _mm256_cmpeq_epi8(all, _mm256_setzero_si256());
            u64::from(!(_mm256_movemask_epi8(none) as u32))
        };
        // Starts 0..=31 from bytes 0..34, starts 30..=61 from bytes 30..64.
        starts(0) | starts(30) << 30
    }
}

/// [`gate_mask`] from one bit mask per letter: for CPUs without AVX2.
fn gate_mask_letters(window: &[u8; 64]) -> u64 {
    let letters = letter_masks(window);
    let m = |c: u8| letters[letter_index(c)];
    GATE_TRIGRAMS.iter().fold(0u64, |all, [a, b, c]| {
        all | (m(*a) & (m(*b) >> 1) & (m(*c) >> 2))
    })
}

/// The letters of `GATE_TRIGRAMS`, each once.
const GATE_LETTERS: [u8; 11] = *b"paswdecroky";

const fn letter_index(c: u8) -> usize {
    let mut i = 0;
    while GATE_LETTERS[i] != c {
        i += 1;
    }
    i
}

/// For each of `GATE_LETTERS`, bit `i` set when `window[i]` is that letter in either case
/// (`b | 0x20` is the letter for exactly its two cases), 16 bytes per step with SSE2 (part of
/// every x86-64 CPU).
#[cfg(target_arch = "x86_64")]
fn letter_masks(window: &[u8; 64]) -> [u64; 11] {
    use std::arch::x86_64::*;
    let mut out = [0u64; 11];
    // SAFETY: SSE2 is part of the x86-64 baseline; every load reads 16 bytes inside `window`,
    // and `loadu` needs no alignment.
    unsafe {
        for (i, part) in window.chunks_exact(16).enumerate() {
            let x = _mm_or_si128(_mm_loadu_si128(part.as_ptr().cast()), _mm_set1_epi8(0x20));
            for (m, &c) in out.iter_mut().zip(GATE_LETTERS.iter()) {
                let eq = _mm_cmpeq_epi8(x, _mm_set1_epi8(c as i8));
                *m |= (_mm_movemask_epi8(eq) as u16 as u64) << (16 * i);
            }
        }
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn letter_masks(window: &[u8; 64]) -> [u64; 11] {
    let mut out = [0u64; 11];
    for (i, &b) in window.iter().enumerate() {
        if let Some(k) = GATE_LETTERS.iter().position(|&c| c == b | 0x20) {
            out[k] |= 1 << i;
        }
    }
    out
}

/// How far around a gate hit a sensitive word can reach: the longest word with the character
/// before it (`\nclient_secret`, 15 bytes) and room for the boundaries.
const KEYWORD_WINDOW: usize = 24;

/// The sensitive words of `rules::KEYWORD`, at the start of a word, of a name's part (`aws_…`),
/// or after a JSON escape (`\npassword`).
fn keyword_pattern() -> String {
    r"(?i)(?:(?:\b|[_\-]|\\[ntr])(?:password|passphrase|passcode|passwd|pwd|secret|token|api[ _\-]?key|access[ _\-]?key|secret[ _\-]?key|private[ _\-]?key|client[ _\-]?secret|auth[ _\-]?token|credentials?)|password|passwd|passphrase)\b".to_string()
}

/// Everything the text and key rules can match, as one regex set: what the byte rules above
/// stand in for, and what non-ASCII messages are checked with.
/// The patterns of that set (compiled on first use: only a message the byte rules do not cover
/// needs it). User keys go in escaped, so the set compiles whatever they are.
fn full_set(keys: &BTreeSet<String>, defaults: bool) -> Vec<String> {
    // A name is matched loosely here (any case, any run of `-`/`_` anywhere — the exact rule
    // squashes them all: `password__` is `password` — anything before it); the exact rule
    // decides.
    let loose = |k: &str| {
        k.chars()
            .map(|c| format!("{}[-_]*", regex::escape(&c.to_string())))
            .collect::<String>()
    };
    let mut pre: Vec<String> = Vec::new();
    let names: Vec<String> = keys.iter().map(|k| loose(k)).collect();
    if !names.is_empty() {
        // A whole name: not preceded by a word character (after a `-`, as in
        // `0-Authorization:`, the assignment rule sees the name start).
        pre.push(format!(
            r#"(?i)(?:^|[^a-z0-9_])(?:{})\\?["']?\s*[:=]"#,
            names.join("|")
        ));
    }
    if defaults {
        let suffixes: Vec<String> = rules::SENSITIVE_SUFFIXES.iter().map(|k| loose(k)).collect();
        pre.push(format!(r#"(?i)(?:{})\\?["']?\s*[:=]"#, suffixes.join("|")));
    }
    if defaults {
        pre.extend(rules::SHAPES.iter().map(|(_, re)| re.to_string()));
        pre.push(rules::AUTH_SCHEME.to_string());
        pre.push(r"(?i)[a-z][a-z0-9+.\-]*://[^\s]*@".to_string());
        let extra: Vec<String> = rules::URL_PARAM_NAMES
            .iter()
            .map(|n| regex::escape(n))
            .collect();
        pre.push(format!(r"(?i)[?&;](?:{})=", extra.join("|")));
        pre.push(format!(
            r#"{}[^\n]{{0,{}}}[0-9!#$%*+/?@\\^|~]"#,
            keyword_pattern(),
            rules::KEYWORD_REACH + 5
        ));
        let flags: Vec<String> = rules::SECRET_FLAGS
            .iter()
            .chain(rules::USER_PASS_FLAGS)
            .map(|f| regex::escape(f))
            .collect();
        pre.push(format!(
            r#"(?i)(?:^|[\s'"(=]|\\[ntr])--?(?:{})[ \t=]"#,
            flags.join("|")
        ));
        pre.push(r#"(?:^|[\s'"(=]|\\[ntr])-p[^\s'"=\-]"#.to_string());
    }
    // Flags and XML elements named like sensitive keys.
    let mut named: Vec<String> = keys.iter().map(|k| loose(k)).collect();
    if defaults {
        named.extend(
            rules::SENSITIVE_SUFFIXES
                .iter()
                .map(|k| format!("(?:[a-z][a-z0-9_\\-]*)?{}", loose(k))),
        );
    }
    if !named.is_empty() {
        pre.push(format!(
            r#"(?i)(?:^|[\s'"(=]|\\[ntr])--?(?:{})[ \t=]"#,
            named.join("|")
        ));
        // A key must be the whole name or its last part (after `.` or `:`); a suffix may
        // follow anything.
        let exact: Vec<String> = keys.iter().map(|k| loose(k)).collect();
        if !exact.is_empty() {
            pre.push(format!(
                r"(?i)<(?:[a-z0-9_.:\-]*[.:])?(?:{})>",
                exact.join("|")
            ));
        }
        if defaults {
            let suffixes: Vec<String> =
                rules::SENSITIVE_SUFFIXES.iter().map(|k| loose(k)).collect();
            pre.push(format!(r"(?i)<[a-z0-9_.:\-]*(?:{})>", suffixes.join("|")));
        }
    }
    pre.iter().map(|p| rules::ascii_words(p)).collect()
}

/// Escapes that hide what a string says from the byte rules: `\/` (`postgres:\/\/…`) and `\u`
/// escapes of ASCII characters (`\u0067hp_…`); the message is then decoded and walked. `<` and
/// `>`, which some encoders always escape, are left out: no rule needs them.
pub(crate) fn has_escapes(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', bytes).any(|i| match bytes.get(i + 1) {
        Some(b'/') => true,
        Some(b'u') => match bytes.get(i + 2..i + 6) {
            Some([b'0', b'0', h, l]) => {
                let v = (hex_digit(*h) << 4) | hex_digit(*l);
                (0x20..0x7f).contains(&v) && v != 0x3c && v != 0x3e
            }
            _ => false,
        },
        _ => false,
    })
}

fn hex_digit(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0xff,
    }
}

/// A quoted stretch (`"…"` or `'…'`) of 24–128 token characters: what `text`'s quoted
/// high-entropy rule looks at.
pub(crate) fn has_quoted_token(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(k) = find_byte2(b'"', b'\'', &bytes[i..]) {
        let q = bytes[i + k];
        let start = i + k + 1;
        let Some(len) = find_byte(q, &bytes[start..]) else {
            return false;
        };
        let run = &bytes[start..start + len];
        if (rules::ENTROPY_MIN_LEN..=rules::ENTROPY_MAX_LEN).contains(&run.len())
            && run
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(b))
        {
            return true;
        }
        i = start;
    }
    false
}

/// What the byte rules cannot see into: escapes, a resource `blob`, and base64 long enough to
/// hold text (a `.env` file as a blob): the message is then decoded and walked. Recording asks
/// [`has_entropy_candidate_or_hidden_text`]; this is what that is held to.
#[cfg(test)]
pub(crate) fn has_hidden_text(bytes: &[u8]) -> bool {
    if has_escapes(bytes) || BLOB.find(bytes).is_some() {
        return true;
    }
    let mut prev: Option<usize> = None;
    for q in byte_offsets(b'"', bytes) {
        if let Some(p) = prev {
            if is_base64_text_candidate(&bytes[p + 1..q]) {
                return true;
            }
        }
        prev = Some(q);
    }
    false
}

/// A quoted stretch that may be base64 of text: long, all base64 characters, mixing upper
/// case, lower case and digits early (a run of one letter, as in padding, is not), and not the
/// start of a known image format.
fn is_base64_text_candidate(run: &[u8]) -> bool {
    if run.len() < rules::BASE64_MIN_LEN
        || !run
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=-_".contains(b))
    {
        return false;
    }
    if rules::NOT_SECRET_PREFIXES
        .iter()
        .any(|p| run.starts_with(p.as_bytes()))
    {
        return false;
    }
    let head = &run[..run.len().min(64)];
    head.iter().any(u8::is_ascii_uppercase)
        && head.iter().any(u8::is_ascii_lowercase)
        && head.iter().any(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan this replaced, byte by byte: the new one must agree with it everywhere.
    fn entropy_reference(bytes: &[u8]) -> bool {
        let mut run = 0usize;
        let mut in_run = false;
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'"' || (b == b'\\' && bytes.get(i + 1) == Some(&b'"')) {
                if in_run && (rules::ENTROPY_MIN_LEN..=rules::ENTROPY_MAX_LEN).contains(&run) {
                    return true;
                }
                in_run = i + 1 < bytes.len();
                run = 0;
            } else if in_run && (b.is_ascii_alphanumeric() || b"+/=_-.".contains(&b)) {
                run += 1;
            } else {
                in_run = false;
            }
        }
        false
    }

    /// The fused walk over the quotes answers what the two walks it replaced answer.
    #[test]
    fn the_fused_quote_walk_agrees_with_the_two_walks() {
        let token = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ";
        let b64 = "SGVsbG8gd29ybGQsIHRoaXMgaXMgYSBzZWNyZXQgZW52IGZpbGU9";
        let texts = [
            String::new(),
            r#"{"a":"b"}"#.into(),
            format!(r#"{{"a":"{token}"}}"#),
            format!(r#"{{"a":"x {token}"}}"#),
            format!(r#"{{"a":"{{\"k\":\"{token}\"}}"}}"#),
            format!(r#""{token}\\""#),
            format!(r#"{{"data":"{b64}"}}"#),
            format!(r#"{{"data":"{b64}{b64}{b64}"}}"#),
            r#"{"blob":"x"}"#.into(),
            r#"{"u":"\u0067hp"}"#.into(),
            r#"{"u":"http:\/\/x"}"#.into(),
            format!(r#"{{"t":"the quick brown fox; {}"}}"#, "jumps ".repeat(40)),
            format!(r#"""{token}"""#),
        ];
        for t in &texts {
            let b = t.as_bytes();
            assert_eq!(
                has_entropy_candidate_or_hidden_text(b),
                has_entropy_candidate(b) || has_hidden_text(b),
                "{t}"
            );
        }
        assert!(has_entropy_candidate_or_hidden_text(texts[2].as_bytes()));
        assert!(has_entropy_candidate_or_hidden_text(texts[6].as_bytes()));
        assert!(!has_entropy_candidate_or_hidden_text(texts[11].as_bytes()));
    }

    #[test]
    fn token_mask_agrees_with_the_byte_test() {
        for start in (0u16..256).step_by(64) {
            let window: [u8; 64] = std::array::from_fn(|i| (start as usize + i) as u8);
            let expected = byte_mask(&window, is_token_byte);
            assert_eq!(token_mask(&window), expected, "bytes {start}..");
            #[cfg(target_arch = "x86_64")]
            assert_eq!(token_mask_sse2(&window), expected, "bytes {start}.., SSE2");
        }
    }

    #[test]
    fn stop_mask_agrees_with_the_byte_test() {
        for start in (0u16..256).step_by(64) {
            let window: [u8; 64] = std::array::from_fn(|i| (start as usize + i) as u8);
            let expected = byte_mask(&window, |b| STOPS.contains(&b));
            assert_eq!(stop_mask(&window), expected, "bytes {start}..");
        }
        // Every stop of a message, in order, across windows and in a short last one.
        let text = b"a:b=c>d-e".repeat(20);
        for len in 0..text.len() {
            let mut seen = Vec::new();
            assert!(!any_stop(&text[..len], |at| {
                seen.push(at);
                false
            }));
            let expected: Vec<usize> = (0..len).filter(|&i| STOPS.contains(&text[i])).collect();
            assert_eq!(seen, expected, "{len} bytes");
        }
        let mut calls = 0;
        assert!(any_stop(b"x:y:z", |_| {
            calls += 1;
            true
        }));
        assert_eq!(calls, 1, "the first `true` ends the walk");
    }

    /// A window is taken for clean only when it is byte for byte one that did not match: an
    /// AWS key in the same place as a run remembered clean is still found, and the memo keeps
    /// only the last few windows.
    #[test]
    fn windows_remembered_clean_hide_no_shape() {
        let r = crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap();
        let p = &r.prefilter;
        let clean = br#"{"type":"content_block_delta","id":"ABCDEFGHIJKLMNOPQRST"}"#;
        let key = br#"{"type":"content_block_delta","id":"AKIAIOSFODNN7EXAMPLE"}"#;
        for _ in 0..3 {
            assert!(!p.may_match(clean));
            assert!(
                p.may_match(key),
                "the key, after its clean twin was remembered"
            );
        }
        let memo = CleanWindows::default();
        let windows: Vec<Vec<u8>> = (0..=CLEAN_SLOTS)
            .map(|i| format!("window number {i:02}").into_bytes())
            .collect();
        for w in &windows {
            memo.add(w);
        }
        assert!(!memo.has(&windows[0]), "the oldest went for the ninth");
        assert!(windows[1..].iter().all(|w| memo.has(w)));
        assert!(!memo.has(b"window number 1"), "a prefix is another window");
        assert!(
            !memo.has(b"window number 99"),
            "the same length, other bytes"
        );
        let long = vec![b'a'; CLEAN_MAX + 1];
        memo.add(&long);
        assert!(!memo.has(&long), "too long to keep");
        assert!(!memo.has(b""));
    }

    #[test]
    fn letter_masks_agree_with_the_byte_test() {
        for start in (0u16..256).step_by(64) {
            let window: [u8; 64] = std::array::from_fn(|i| (start as usize + i) as u8);
            let expected: [u64; 11] = std::array::from_fn(|k| {
                window.iter().enumerate().fold(0u64, |m, (i, &b)| {
                    m | ((b | 0x20 == GATE_LETTERS[k]) as u64) << i
                })
            });
            assert_eq!(letter_masks(&window), expected, "bytes {start}..");
        }
    }

    proptest::proptest! {
        /// The quote finders give what `memchr` gives, short message or long (both sides of
        /// the walk-or-memchr switch), from any offset.
        #[test]
        fn the_quote_finders_agree_with_memchr(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b'"'),
                    proptest::strategy::Just(b'\''),
                    proptest::strategy::Just(b'\\'),
                    proptest::strategy::Just(b'a'),
                    proptest::strategy::Just(b' '),
                ],
                0..600,
            ),
            from in 0usize..600,
        ) {
            let from = from.min(bytes.len());
            let tail = &bytes[from..];
            proptest::prop_assert_eq!(find_byte(b'"', tail), memchr::memchr(b'"', tail));
            proptest::prop_assert_eq!(
                find_byte2(b'"', b'\'', tail),
                memchr::memchr2(b'"', b'\'', tail)
            );
            proptest::prop_assert_eq!(
                byte_offsets(b'"', tail).collect::<Vec<_>>(),
                memchr::memchr_iter(b'"', tail).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn entropy_scan_agrees_with_the_byte_scan() {
        let token = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ";
        for s in [
            format!(r#"{{"a":"{token}"}}"#),
            format!(r#"{{"a":"x {token}"}}"#),
            format!(r#"{{"a":"{{\"k\":\"{token}\"}}"}}"#),
            format!(r#""\"{token}\""#),
            format!(r#""{token}\\""#),
            format!(r#""{token}"#),
            format!(r#"{token}""#),
            format!(r#""\"\"{token}"#),
            "\"\\\"".to_string(),
            "\"\"".to_string(),
            format!("\"{}\"", "a".repeat(200)),
        ] {
            assert_eq!(
                has_entropy_candidate(s.as_bytes()),
                entropy_reference(s.as_bytes()),
                "{s}"
            );
        }
    }

    /// The keyword scan this replaced: the regex over the whole message.
    fn keyword_reference(p: &Prefilter, bytes: &[u8]) -> bool {
        p.keyword_in(bytes, (0, bytes.len()))
    }

    fn defaults() -> Prefilter {
        let r = crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap();
        r.prefilter
    }

    /// The gate's trigram finder gives the starts the gate regex's `find_iter` gives.
    fn gate_reference(bytes: &[u8]) -> Vec<usize> {
        let gate = regex::bytes::Regex::new(KEYWORD_GATE).unwrap();
        gate.find_iter(bytes).map(|m| m.start()).collect()
    }

    fn gate_hits(bytes: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        for_each_gate_hit(bytes, |at| {
            out.push(at);
            true
        });
        out
    }

    #[test]
    fn the_gate_finder_agrees_with_the_gate_regex_at_window_edges() {
        for word in [
            "pas", "PwD", "eCR", "okE", "KEY", "ede", "edede", "keykey", "pass",
        ] {
            for at in 0..140 {
                let mut b = vec![b'x'; at];
                b.extend_from_slice(word.as_bytes());
                b.extend_from_slice(b" tail");
                assert_eq!(gate_hits(&b), gate_reference(&b), "{word} at {at}");
                assert_eq!(gate_hits(&b[..at + 2]), gate_reference(&b[..at + 2]));
            }
        }
        // Bytes whose `| 0x20` is no letter of theirs, and non-ASCII.
        let odd = b"\x10\x05\x03P\x01S\xd0\xe5\xf3\x8bey";
        assert_eq!(gate_hits(odd), gate_reference(odd));
        assert!(gate_hits(b"").is_empty() && gate_hits(b"pa").is_empty());
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #[test]
        fn the_gate_finder_agrees_with_the_gate_regex(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec![
                        "pas", "PAS", "pWd", "ecr", "OKE", "key", "Key", "ede", "eded", "kek",
                        "p", "e", "k", "o", " ", "\"", "\n", "\u{e9}", "\u{212a}", "\u{17f}",
                    ]).prop_map(str::to_string),
                    "[a-zA-Z ]{1,70}",
                    proptest::collection::vec(proptest::num::u8::ANY, 1..8)
                        .prop_map(|b: Vec<u8>| String::from_utf8_lossy(&b).into_owned()),
                ],
                0..30,
            )
        ) {
            let s = parts.concat();
            proptest::prop_assert_eq!(gate_hits(s.as_bytes()), gate_reference(s.as_bytes()), "{}", s);
        }
    }

    /// Bit `i` when `window[i..i + 3]` is a trigram of the gate, byte by byte.
    fn gate_mask_reference(window: &[u8; 64]) -> u64 {
        (0..62).fold(0u64, |m, i| {
            let w = [window[i] | 0x20, window[i + 1] | 0x20, window[i + 2] | 0x20];
            m | (GATE_TRIGRAMS.contains(&w) as u64) << i
        })
    }

    proptest::proptest! {
        /// Both ways of making the gate's mask (the nibble tables with AVX2, the letter masks
        /// without) give the byte-by-byte answer, at every position of a window: the gate tests
        /// above reach only the one this CPU takes.
        #[test]
        fn both_gate_masks_agree_with_the_byte_test(
            window in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(b"pPaAsSwWdDeEcCrRoOkKyY".to_vec()),
                    proptest::num::u8::ANY,
                ],
                64,
            )
        ) {
            let window: [u8; 64] = window.try_into().unwrap();
            let expected = gate_mask_reference(&window);
            proptest::prop_assert_eq!(gate_mask_letters(&window), expected);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (just checked).
                proptest::prop_assert_eq!(unsafe { gate_mask_avx2(&window) }, expected);
            }
        }
    }

    #[test]
    fn the_gate_mask_sees_every_start_in_a_window() {
        // A trigram at each start 0..=61, in both cases, and none across the edge at 62, 63.
        for at in 0..64 {
            for word in [*b"key", *b"KeY", *b"ede"] {
                let mut window = [b'x'; 64];
                for (k, &c) in word.iter().enumerate() {
                    if at + k < 64 {
                        window[at + k] = c;
                    }
                }
                let expected = if at < 62 { 1u64 << at } else { 0 };
                assert_eq!(gate_mask(&window), expected, "{word:?} at {at}");
                assert_eq!(
                    gate_mask_letters(&window),
                    expected,
                    "{word:?} at {at}, letters"
                );
            }
        }
    }

    /// The private-key search, skipped when the message has no `-`, still finds the marker
    /// wherever it is (the dash scan sees every `-`).
    #[test]
    fn a_pem_header_is_found_with_or_without_other_dashes() {
        let r = default_redactor();
        for m in [
            "-----BEGIN PRIVATE KEY-----",
            r#"{"k":"-----BEGIN RSA PRIVATE KEY-----\nMIIE"}"#,
            r#"{"a":"x","b":"y -----BEGIN OPENSSH PRIVATE KEY-----"}"#,
        ] {
            assert!(r.prefilter.may_match(m.as_bytes()), "{m}");
            assert!(r.may_need(m.as_bytes()), "{m}");
        }
        assert!(!r.prefilter.may_match(b"{\"a\":\"BEGIN PRIVATE KEY\"}"));
    }

    /// Every byte a scan stops at is seen in a short message (the stop masks) as in a
    /// long one (`memchr`): a name before `:` or `=`, an XML element's `>`, a flag's `-`.
    #[test]
    fn short_and_long_messages_stop_at_the_same_bytes() {
        let r = default_redactor();
        let pad = "x".repeat(300);
        for m in [
            r#"{"note":"<cookie>v</cookie>"}"#,
            r#"{"note":"<cfg:Authorization>v</cfg:Authorization>"}"#,
            r#"{"args":"login --token v"}"#,
            r#"{"x":{"api_key":"v"}}"#,
            r#"{"q":"a=1&secret=v"}"#,
        ] {
            assert!(r.prefilter.may_match(m.as_bytes()), "short: {m}");
            let long = format!(r#"{{"pad":"{pad}",{}"#, &m[1..]);
            assert!(long.len() >= SHORT_SCAN);
            assert!(r.prefilter.may_match(long.as_bytes()), "long: {long}");
        }
        for m in [r#"{"note":"<b>bold</b>"}"#, r#"{"args":"ls -la"}"#] {
            assert!(!r.prefilter.may_match(m.as_bytes()), "{m}");
        }
    }

    /// The early look at a name's last two letters answers what squashing it first answers.
    #[test]
    fn names_ruled_out_by_their_ending_are_not_sensitive() {
        let p = &default_redactor().prefilter;
        let mut names: Vec<String> = [
            "",
            "-",
            "_",
            "a",
            "y",
            "ey",
            "key",
            "KEY",
            "k_e_y",
            "k-e-y-",
            "_k-y",
            "type",
            "index",
            "delta",
            "text",
            "api_key",
            "x-api-key",
            "API_KEY",
            "db_password",
            "Token",
            "pageToken",
            "next_page_token",
            "secret__",
            "pass",
            "pwd",
            "PWD",
            "cookie",
            "set-cookie",
            "name",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        names.extend(
            crate::redact::rules::SENSITIVE_KEYS
                .iter()
                .map(|k| format!("My_{k}_")),
        );
        names.extend(
            crate::redact::rules::SENSITIVE_SUFFIXES
                .iter()
                .map(|k| k.to_uppercase()),
        );
        for n in &names {
            let squashed: String = n
                .bytes()
                .filter(|&b| b != b'-' && b != b'_')
                .map(|b| b.to_ascii_lowercase() as char)
                .collect();
            assert_eq!(
                p.sensitive_name_bytes(n.as_bytes()),
                p.sensitive_name(&squashed),
                "{n}"
            );
        }
    }

    /// The plain rule the ending index stands in for: a key, or a name ending in a suffix.
    fn sensitive_name_reference(p: &Prefilter, squashed: &str) -> bool {
        p.keys.contains(squashed)
            || (p.defaults
                && crate::redact::rules::SENSITIVE_SUFFIXES
                    .iter()
                    .any(|s| squashed.ends_with(s)))
    }

    fn prefilter_with(keys: &[&str], defaults: bool) -> Prefilter {
        let mut set: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
        if defaults {
            set.extend(
                crate::redact::rules::SENSITIVE_KEYS
                    .iter()
                    .map(|k| k.to_string()),
            );
        }
        Prefilter::new(&set, defaults, &[], &[]).unwrap()
    }

    proptest::proptest! {
        /// Names looked up by their ending are sensitive exactly when the plain rule says so:
        /// the defaults, user keys beside them (one sharing an ending with a suffix, one of two
        /// bytes), user keys alone, and a one-byte key (no ending index then).
        #[test]
        fn the_ending_index_agrees_with_the_plain_rule(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(
                        crate::redact::rules::SENSITIVE_KEYS
                            .iter()
                            .chain(crate::redact::rules::SENSITIVE_SUFFIXES)
                            .copied()
                            .chain(["ab", "mytoken", "keys", "ken", "et", "t", "s", "db", "x"])
                            .collect::<Vec<_>>()
                    ).prop_map(str::to_string),
                    "[a-z0-9]{1,4}",
                ],
                0..4,
            )
        ) {
            let squashed = parts.concat();
            for p in [
                prefilter_with(&[], true),
                prefilter_with(&["ab", "mytoken", "dbsecrets"], true),
                prefilter_with(&["ab", "mytoken"], false),
                prefilter_with(&["x", "ab"], true),
            ] {
                proptest::prop_assert_eq!(
                    p.sensitive_name(&squashed),
                    sensitive_name_reference(&p, &squashed),
                    "{} with keys {:?}", squashed, p.keys
                );
            }
        }
    }

    /// What the redactor asked before the run scan's `long_run` let it skip the quote walks.
    fn may_need_reference(r: &crate::redact::Redactor, b: &[u8]) -> bool {
        r.prefilter.may_match(b) || has_entropy_candidate_or_hidden_text(b) || has_quoted_token(b)
    }

    fn default_redactor() -> &'static crate::redact::Redactor {
        static R: std::sync::OnceLock<crate::redact::Redactor> = std::sync::OnceLock::new();
        R.get_or_init(|| {
            crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap()
        })
    }

    /// Skipping the quote walks when no long run of token characters is there changes no
    /// answer, on the shapes real traffic has: stream events, sensitive keys, escapes,
    /// non-ASCII, numbers, ids and tokens on either side of the length the walks look at.
    #[test]
    fn skipping_the_quote_walks_changes_no_answer() {
        let r = default_redactor();
        let long = |n: usize| "aB3dE5gH7jK9mN1pQ3sT5vW7yZ".repeat(8)[..n].to_string();
        let mut cases: Vec<String> = vec![
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the quick brown "}}"#.into(),
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2.50}}"#.into(),
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"api_key\": \"x"}}"#.into(),
            r#"{"api_key":"x"}"#.into(),
            r#"{"token":"abc"}"#.into(),
            r#"{"password":"hunter2"}"#.into(),
            r#"{"text":"caf\u00e9 \u0067hp"}"#.into(),
            r#"{"text":"http:\/\/x"}"#.into(),
            "{\"text\":\"caf\u{e9} na\u{ef}ve \u{212a}ey\"}".into(),
            r#"{"price":2.50,"n":-1e5,"ok":true}"#.into(),
            r#"{"blob":"x"}"#.into(),
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#.into(),
            r#"{"text":"the password is hunter22"}"#.into(),
            "'single quoted 'x''".into(),
        ];
        for n in [7, 8, 15, 23, 24, 25, 60, 128, 129, 200] {
            let t = long(n.min(208));
            cases.push(format!(r#"{{"id":"msg_{t}"}}"#));
            cases.push(format!(r#"{{"a":"{t}"}}"#));
            cases.push(format!(r#"{{"a":"x {t} y"}}"#));
            cases.push(format!(r#"{{"a":'{t}'}}"#));
            cases.push(format!(r#"{{"a":"{{\"k\":\"{t}\"}}"}}"#));
            cases.push(format!(r#"{{"data":"SGVsbG8gd29y{t}"}}"#));
            cases.push(format!(r#"{{"a":"{t}~{t}"}}"#));
        }
        for c in &cases {
            let b = c.as_bytes();
            assert_eq!(r.may_need(b), may_need_reference(r, b), "{c}");
            let scan = r.prefilter.may_match_runs(b);
            assert_eq!(scan.may_match, r.prefilter.may_match(b), "{c}");
        }
        // The stream event of the benchmark: no walk at all.
        let event = cases[0].as_bytes();
        assert_eq!(
            r.prefilter.may_match_runs(event),
            Scan {
                may_match: false,
                long_run: false
            }
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(3000))]
        #[test]
        fn skipping_the_quote_walks_never_changes_the_answer(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    fragment(),
                    "[A-Za-z0-9+/=_.~-]{20,30}",
                    proptest::sample::select(vec!["'", "\"", "\\\"", "~", "\\u0041"])
                        .prop_map(str::to_string),
                ],
                0..16,
            )
        ) {
            let s = parts.concat();
            let r = default_redactor();
            let b = s.as_bytes();
            proptest::prop_assert_eq!(r.may_need(b), may_need_reference(r, b), "{}", s);
            if !r.prefilter.may_match_runs(b).long_run {
                proptest::prop_assert!(!has_quoted_token(b), "{}", s);
                proptest::prop_assert_eq!(
                    has_entropy_candidate_or_hidden_text(b),
                    has_escapes_or_blob(b),
                    "{}", s
                );
            }
        }
    }

    #[test]
    fn every_sensitive_word_holds_a_gate_trigram() {
        let gate = regex::bytes::Regex::new(KEYWORD_GATE).unwrap();
        for word in [
            "password",
            "passphrase",
            "passcode",
            "passwd",
            "pwd",
            "secret",
            "token",
            "apikey",
            "api_key",
            "api-key",
            "api key",
            "access_key",
            "secret-key",
            "private key",
            "client_secret",
            "auth_token",
            "credential",
            "credentials",
        ] {
            for w in [word.to_string(), word.to_uppercase()] {
                assert!(gate.is_match(w.as_bytes()), "{w}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn windowed_keyword_scan_agrees_with_the_whole_message_scan(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("Password".to_string()),
                    proptest::strategy::Just("client_secret".to_string()),
                    proptest::strategy::Just("\\nauth-token".to_string()),
                    proptest::strategy::Just("credentials".to_string()),
                    proptest::strategy::Just("API key".to_string()),
                    proptest::strategy::Just("mypasswd".to_string()),
                    proptest::strategy::Just("key".to_string()),
                    proptest::strategy::Just(" ".to_string()),
                    proptest::strategy::Just("_".to_string()),
                    proptest::strategy::Just("\n".to_string()),
                    "[!#$%*+/?@^|~]{1,3}",
                    "[a-z]{1,30}",
                    "[A-Za-z0-9 ]{1,80}",
                ],
                0..40,
            )
        ) {
            let p = defaults();
            let s = parts.concat();
            proptest::prop_assert_eq!(
                p.keyword_hit(s.as_bytes()),
                keyword_reference(&p, s.as_bytes()),
                "{}", s
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn entropy_scan_agrees_on_any_input(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("\"".to_string()),
                    proptest::strategy::Just("\\".to_string()),
                    proptest::strategy::Just(" ".to_string()),
                    "[A-Za-z0-9+/=_.-]{1,40}",
                ],
                0..12,
            )
        ) {
            let s = parts.concat();
            proptest::prop_assert_eq!(
                has_entropy_candidate(s.as_bytes()),
                entropy_reference(s.as_bytes())
            );
        }
    }

    fn fragment() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            // Non-ASCII text (read through the ASCII shadow): letters a name or a shape may be
            // glued to, blanks `\s` takes, the two letters `(?i)` folds onto ASCII ones, and
            // names spelled with them.
            proptest::sample::select(vec![
                "\u{e9}",
                "\u{c4}",
                "\u{2014}",
                "\u{2192}",
                "\u{a0}",
                "\u{2003}",
                "\u{85}",
                "\u{2028}",
                "\u{3000}",
                "\u{212a}",
                "\u{17f}",
                "\u{212b}",
                "\u{131}",
                "\u{130}",
                "\u{663}",
                "\u{65e5}\u{672c}",
                "\u{1f600}",
                "to\u{212a}en",
                "\u{212a}ey",
                "api_\u{212a}ey",
                "pa\u{17f}\u{17f}word",
                "\u{17f}ecret",
            ])
            .prop_map(str::to_string),
            // Sensitive names in any case, with separators anywhere.
            (
                proptest::sample::select(vec![
                    "password",
                    "api_key",
                    "apiKey",
                    "X-Api-Key",
                    "token",
                    "access_token",
                    "db_password",
                    "client-secret",
                    "Authorization",
                    "cookie",
                    "key",
                    "sig",
                    "auth",
                    "passphrase",
                    "private_key",
                    "AWS_SECRET_ACCESS_KEY",
                    "name",
                ]),
                any::<bool>(),
            )
                .prop_map(|(k, upper)| if upper {
                    k.to_uppercase()
                } else {
                    k.to_string()
                }),
            proptest::sample::select(vec![
                "\"",
                "\\\"",
                ":",
                "=",
                " ",
                "\t",
                "'",
                "?",
                "&",
                "@",
                "://",
                "https://",
                "user:",
                "Bearer ",
                "basic\t",
                "TOKEN  ",
                "sk-ant-",
                "sk-",
                "ghp_",
                "xoxb-",
                "AKIA",
                "eyJ",
                ".",
                "sk_live_",
                "npm_",
                "hf_",
                "glpat-",
                "-----BEGIN RSA PRIVATE KEY-----",
                "-----END RSA PRIVATE KEY-----",
                "{",
                "}",
                ",",
                "\\n",
            ])
            .prop_map(str::to_string),
            "[A-Za-z0-9_-]{1,40}",
            "[a-z ]{1,12}",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4000))]
        /// Whatever the regex set (the exact rules' prefilter) would catch, this catches too.
        #[test]
        fn never_misses_what_the_regex_set_catches(
            parts in proptest::collection::vec(fragment(), 0..16)
        ) {
            let s = parts.concat();
            static R: std::sync::OnceLock<super::super::Redactor> = std::sync::OnceLock::new();
            let r = R.get_or_init(|| {
                super::super::Redactor::new(&super::super::RedactConfig::defaults()).unwrap()
            });
            if r.prefilter.full.is_match(s.as_bytes()) {
                proptest::prop_assert!(r.prefilter.may_match(s.as_bytes()), "missed: {}", s);
            }
            // And whatever the exact text rules take, this catches (through the regex set for
            // ASCII text; a Unicode `\b` of the set may not see a boundary the rules' ASCII
            // one does, next to a non-ASCII letter, where the shadow's does).
            if !r.text_spans(&s).is_empty() {
                proptest::prop_assert!(
                    r.prefilter.may_match(s.as_bytes()) || has_quoted_token(s.as_bytes()),
                    "missed what the rules take: {}",
                    s
                );
                if s.is_ascii() {
                    proptest::prop_assert!(
                        r.prefilter.full.is_match(s.as_bytes()) || has_quoted_token(s.as_bytes()),
                        "set missed: {}",
                        s
                    );
                }
            }
        }
    }

    /// The ASCII shadow knows which characters the regex set's `(?i)` folds onto ASCII letters
    /// and which its `\s` takes: it holds only while the regex crate folds no other character
    /// onto an ASCII letter and its `\s` is `char::is_whitespace`.
    #[test]
    fn only_kelvin_and_long_s_fold_onto_ascii() {
        let letter = regex::Regex::new("(?i)^[a-z]$").unwrap();
        let blank = regex::Regex::new(r"^\s$").unwrap();
        let mut folds = Vec::new();
        let mut buf = [0u8; 4];
        for c in ('\u{80}'..=char::MAX).filter(|c| !c.is_ascii()) {
            let s = c.encode_utf8(&mut buf);
            if letter.is_match(s) {
                folds.push(c);
            }
            assert_eq!(blank.is_match(s), c.is_whitespace(), "U+{:04X}", c as u32);
        }
        assert_eq!(folds, ['\u{17f}', '\u{212a}']);
        // Neither has a shadow: such text goes to the exact walk.
        assert_eq!(
            ascii_shadow("to\u{212a}en".as_bytes()),
            Err(NoShadow::Folds)
        );
        assert_eq!(
            ascii_shadow("pa\u{17f}\u{17f}word".as_bytes()),
            Err(NoShadow::Folds)
        );
        assert!(regex::Regex::new("(?i)^k$").unwrap().is_match("\u{212a}"));
        assert!(regex::Regex::new("(?i)^s$").unwrap().is_match("\u{17f}"));
    }

    #[test]
    fn the_shadow_has_a_byte_a_character() {
        let text = "caf\u{e9} \u{2014}\u{a0}\u{1f600}\u{3000}x\u{85}";
        assert_eq!(ascii_shadow(text.as_bytes()).unwrap(), b"caf` ` ` x ");
        assert_eq!(ascii_shadow(b"plain").unwrap(), b"plain");
        assert_eq!(ascii_shadow(b"\xff\xfe"), Err(NoShadow::NotUtf8));
        // Every length and position of the non-ASCII bytes: the word-at-a-time search.
        for len in 0..40 {
            for at in 0..len {
                let mut t = "a".repeat(len);
                t.replace_range(at..at + 1, "\u{e9}");
                let mut want = vec![b'a'; len];
                want[at] = NOT_ASCII;
                assert_eq!(ascii_shadow(t.as_bytes()).unwrap(), want, "{len} {at}");
                assert_eq!(first_non_ascii(t.as_bytes()), Some(at));
            }
            assert_eq!(first_non_ascii("a".repeat(len).as_bytes()), None);
        }
    }

    #[test]
    fn finds_each_rule_and_passes_plain_messages() {
        let r = super::super::Redactor::new(&super::super::RedactConfig::defaults()).unwrap();
        let p = &r.prefilter;
        for hit in [
            r#"{"params":{"apiKey":"x"}}"#,
            r#"{"params":{"Api-Key" : "x"}}"#,
            r#"{"text":"{\"db_password\":\"x\"}"}"#,
            r#"{"text":"PASSWORD = hunter22"}"#,
            r#"{"text":"see https://me:pw@host/x"}"#,
            r#"{"text":"GET /x?access_token=abcdef"}"#,
            r#"{"text":"Authorization: Bearer abcdefgh12"}"#,
            r#"{"text":"key sk-ant-api03-abcdefghijklmnopqrstuvwxyz"}"#,
            r#"{"text":"AKIAABCDEFGHIJKLMNOP"}"#,
            r#"{"text":"-----BEGIN PRIVATE KEY-----"}"#,
            r#"{"params":{"p\u0061ssword":"x"}}"#,
            "{\"caf\u{e9}\":1,\"apikey\":\"x\"}",
            // Found by the property below: the assignment rule takes `Authorization` here.
            r#"{"text":"0-Authorization:access_token"}"#,
        ] {
            assert!(p.may_match(hit.as_bytes()), "{hit}");
        }
        for plain in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":7,"size":1024}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"call 7: the quick brown fox jumps over the lazy dog; "}],"isError":false}}"#,
            r#"{"text":"see https://example.com/docs/getting-started for details"}"#,
            r#"{"text":"a token of appreciation; basic idea"}"#,
        ] {
            assert!(!p.may_match(plain.as_bytes()), "{plain}");
        }
    }
}
