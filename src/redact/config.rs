//! The user's redaction rules, before they are compiled into a [`Redactor`](super::Redactor).

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
    /// The markers' hash key, when the user keeps one (`$MCPTAPE_REDACT_KEY`); else each
    /// redactor draws a random one.
    pub marker_key: Option<MarkerKey>,
}

/// Who says [`MarkerKey::ambiguity_why`], in its words: `play` (MCP requests) or the model
/// proxy's playback (model requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replayer {
    /// `mcptape play`, and `run`'s players of MCP servers.
    Play,
    /// `model-proxy --playback`, `run --playback`'s model side.
    ModelPlayback,
}

/// A stable key for the markers' hashes, derived from a secret the user keeps (never stored):
/// equal secrets get equal markers on every tape made with it, so `play` given the same key
/// can tell which recorded request carried the value a client sends. Without one, each tape's
/// key is random and its markers say only "equal" or "different" within the tape.
#[derive(Clone, PartialEq, Eq)]
pub struct MarkerKey([u8; 32]);

/// The fewest bytes a marker key's secret may have: with the key, a guessed secret can be
/// checked against a marker's hash, so the key must not be guessable itself.
pub const MARKER_KEY_MIN: usize = 16;

impl MarkerKey {
    /// The key of a secret of at least [`MARKER_KEY_MIN`] bytes.
    pub fn from_secret(secret: &[u8]) -> Option<MarkerKey> {
        use sha2::Digest as _;
        if secret.len() < MARKER_KEY_MIN {
            return None;
        }
        let mut h = sha2::Sha256::new();
        h.update(b"mcptape marker key v1\0");
        h.update(secret);
        Some(MarkerKey(h.finalize().into()))
    }

    /// The user's key when a tape's markers were made with it (`tape_id`, its header's
    /// `marker_key`); `None` otherwise, and a different key is said on stderr by `who` (`what`
    /// names where redacted values then match as wildcards). With no tape key there is nothing
    /// to say.
    pub fn for_tape(
        key: Option<MarkerKey>,
        tape_id: Option<&str>,
        who: &str,
        what: &str,
    ) -> Option<MarkerKey> {
        match (key, tape_id) {
            (Some(k), Some(id)) if k.id() == id => Some(k),
            (Some(k), Some(id)) => {
                crate::diag!(
                    "{who}: MCPTAPE_REDACT_KEY is not the key this tape's markers were made with (its id is {}, the tape's {id}): redacted values {what}match as wildcards",
                    k.id()
                );
                None
            }
            _ => None,
        }
    }

    /// Why a request that fits several recorded requests differing only in redacted values
    /// may have been served the one recorded for another value, and what would tell them
    /// apart, as `who` ("play", "playback") says it in its warning. `keyed`: the user's key is
    /// the tape's (its markers' hashes said none was made with the values sent); else by the
    /// tape's key id (its header's) and the user's (`$MCPTAPE_REDACT_KEY`'s, [`Self::id`]):
    /// none set, another key, or a tape recorded with none.
    pub(crate) fn ambiguity_why(
        who: Replayer,
        keyed: bool,
        tape_id: Option<&str>,
        user_id: Option<&str>,
    ) -> String {
        let (who, again) = match who {
            Replayer::Play => ("play", "play"),
            Replayer::ModelPlayback => ("playback", "play back"),
        };
        let apart = format!(
            "its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and {again} with the same key, to tell them apart)"
        );
        match (tape_id, user_id) {
            _ if keyed => "None of them was recorded with the values the client sent (their markers' hashes, made with MCPTAPE_REDACT_KEY, say so): its answer is the one recorded for another value".to_string(),
            (Some(tape), Some(user)) if user != tape => format!(
                "The tape holds markers, not the secrets; its markers were made with a marker key (id {tape}) and MCPTAPE_REDACT_KEY is another key (id {user}): with it set to the tape's key, {who} serves the one recorded with the client's values"
            ),
            (Some(tape), _) => format!(
                "The tape holds markers, not the secrets; its markers were made with a marker key (id {tape}) and MCPTAPE_REDACT_KEY is not set: with it set to that key, {who} serves the one recorded with the client's values"
            ),
            (None, Some(_)) => format!(
                "The tape holds markers, not the secrets, made with no marker key (it was recorded without MCPTAPE_REDACT_KEY), so {who} cannot tell which one the client meant, whatever MCPTAPE_REDACT_KEY is now: {apart}"
            ),
            (None, None) => format!(
                "The tape holds markers, not the secrets, so {who} cannot tell which one the client meant: {apart}"
            ),
        }
    }

    /// The key's bytes, for the markers' HMAC.
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// What the tape's header names the key by (8 hex digits, not the key): play compares it
    /// with its own key's before trusting the markers' hashes.
    pub fn id(&self) -> String {
        super::hash_tag(&self.0, b"mcptape marker key id")
    }

    /// The hash a marker made with this key has for `secret`.
    pub fn hash_of(&self, secret: &str) -> String {
        super::hash_tag(&self.0, secret.as_bytes())
    }
}

impl std::fmt::Debug for MarkerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MarkerKey({})", self.id())
    }
}

/// A user rule that does not compile (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// A `re:` pattern that is not a valid regex.
    #[error("invalid redaction regex {pattern:?}: {message}")]
    Regex {
        /// The pattern as given (all of them, `|`-joined, when only their union fails).
        pattern: String,
        /// The regex compiler's complaint.
        message: String,
    },
    /// A rule that takes nothing out, or everything: an empty key name (or one of only `_`,
    /// `-` and spaces, which matching ignores), an empty `re:` or one that matches the empty
    /// string, an empty `path:`.
    #[error("empty redaction rule {rule:?}: {why}; give a KEY name, re:REGEX or path:JSONPATH")]
    Empty {
        /// The rule as given.
        rule: String,
        /// Why it is empty, in words.
        why: &'static str,
    },
    /// A `path:` rule that is not a valid JSONPath.
    #[error("invalid redaction path {path:?}: {message}")]
    Path {
        /// The path as given.
        path: String,
        /// The parser's complaint.
        message: String,
    },
}

impl crate::exit::Coded for RuleError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

impl RedactConfig {
    /// The built-in rules and nothing else.
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

    /// No rule at all: redaction is off.
    pub fn is_off(&self) -> bool {
        !self.defaults
            && self.keys.is_empty()
            && self.patterns.is_empty()
            && self.paths.is_empty()
            && self.literals.is_empty()
    }
}
