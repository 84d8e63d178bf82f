//! The HTTP facts of a tape line redacted without the JSON walk, for the common case: every
//! fact is one the walk would leave alone or always take out. `record --url` tapes the same
//! handful of facts on every message, the session id among them; walking their serialized
//! JSON and computing the session id's HMAC anew for each message was most of what taping a
//! small message cost. The result is byte for byte what `Redactor::redact_facts` gives (a test
//! holds them together); anything else takes that path.

use super::Redactor;
use crate::wire::json_out::push_str;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Distinct values remembered before the cache starts again: a session has one session id,
/// a long-lived proxy sees one per session, and memory stays bounded either way.
const MARKERS_MAX: usize = 256;

/// Facts a line may have for the fast path (a request's head gives about ten); more take the
/// walk.
const FACTS_MAX: usize = 32;

/// What one tape writer remembers between messages. In memory only, never written: the values
/// are secrets (session ids), kept beside their markers so each is hashed once per session.
#[derive(Default)]
pub struct FactsCache {
    /// A secret fact's value → its marker.
    markers: HashMap<String, String>,
    /// The last value looked up and its marker: a session's lines all carry one session id,
    /// and comparing it is cheaper than hashing it for the map.
    last: Option<(String, String)>,
    /// Whether the text rules leave every fact name alone (the walk checks each top-level key
    /// for a secret's shape, and a user's `re:` rule could match one). Worked out once: a
    /// cache serves one writer, which always passes the same `kept` and `secret` names.
    names_clean: Option<bool>,
}

/// How the fast path writes a fact.
#[derive(Clone, Copy, PartialEq)]
enum Fact {
    /// Left as it is.
    Kept,
    /// A string taken out (its marker written).
    Secret,
}

impl FactsCache {
    /// Writes the marker of secret `value`, hashing it only the first time it is seen.
    fn write_marker(&mut self, r: &Redactor, value: &str, out: &mut Vec<u8>) {
        if let Some((v, marker)) = &self.last {
            if v == value {
                push_str(out, marker);
                return;
            }
        }
        let marker = match self.markers.get(value) {
            Some(marker) => marker.clone(),
            None => {
                if self.markers.len() >= MARKERS_MAX {
                    self.markers.clear();
                }
                let marker = r.marker(&super::json::secret_top_rule(), value);
                self.markers.insert(value.to_string(), marker.clone());
                marker
            }
        };
        push_str(out, &marker);
        self.last = Some((value.to_string(), marker));
    }
}

impl Redactor {
    /// Writes the facts object `facts` to `out` as `redact_facts(to_vec(facts), kept, secret)`
    /// would leave it, and returns true; or returns false having written nothing, when it
    /// cannot be sure to give the same bytes (a fact outside `kept` and `secret`, a value that
    /// is not a plain string or scalar, `path:` rules).
    pub(crate) fn write_facts_cached(
        &self,
        facts: &Value,
        kept: &[&str],
        secret: &[&str],
        cache: &mut FactsCache,
        out: &mut Vec<u8>,
    ) -> bool {
        let Value::Object(map) = facts else {
            return false;
        };
        let mut how = [Fact::Kept; FACTS_MAX];
        if !self.facts_direct_ok(kept, secret, cache) || !facts_fit(map, kept, secret, &mut how) {
            return false;
        }
        out.push(b'{');
        for (i, ((name, value), how)) in map.iter().zip(how).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_str(out, name);
            out.push(b':');
            match value {
                Value::String(s) if how == Fact::Secret => self.write_secret_fact(s, cache, out),
                Value::String(s) => push_str(out, s),
                _ => serde_json::to_writer(&mut *out, value).expect("a Value serializes"),
            }
        }
        out.push(b'}');
        true
    }

    /// Writes the string value of a secret fact as the walk leaves it: its marker, or itself
    /// when it is empty or a marker already.
    pub(crate) fn write_secret_fact(&self, value: &str, cache: &mut FactsCache, out: &mut Vec<u8>) {
        if value.is_empty() || super::is_marker(value) {
            push_str(out, value);
        } else {
            cache.write_marker(self, value, out);
        }
    }

    /// Whether facts named only from `kept` and `secret` may be written without the walk: no
    /// `path:` rules, and the text rules leave each of those names alone.
    pub(crate) fn facts_direct_ok(
        &self,
        kept: &[&str],
        secret: &[&str],
        cache: &mut FactsCache,
    ) -> bool {
        self.paths.is_empty()
            && *cache.names_clean.get_or_insert_with(|| {
                kept.iter()
                    .chain(secret)
                    .all(|name| super::json::key_is_clean(self, name))
            })
    }
}

/// Whether every fact is one the fast path gives exactly as the walk would; `how` gets how
/// each is written, in the map's order.
fn facts_fit(
    map: &Map<String, Value>,
    kept: &[&str],
    secret: &[&str],
    how: &mut [Fact; FACTS_MAX],
) -> bool {
    map.len() <= FACTS_MAX
        && map.iter().zip(how.iter_mut()).all(|((name, value), how)| {
            if kept.contains(&name.as_str()) {
                // Left alone whatever it holds; a nested value could be too deep for the
                // walk, which would then redact the whole text as text.
                *how = Fact::Kept;
                !matches!(value, Value::Array(_) | Value::Object(_))
            } else if secret.contains(&name.as_str()) {
                // A number under a secret name is taken out only from four digits on, an
                // object walked: the walk decides those.
                *how = Fact::Secret;
                matches!(value, Value::String(_))
            } else {
                false
            }
        })
}
