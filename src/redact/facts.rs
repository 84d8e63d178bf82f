//! The HTTP facts of a tape line redacted without the JSON walk, for the common case: every
//! fact is one the walk would leave alone or always take out. `record --url` tapes the same
//! handful of facts on every message, the session id among them; walking their serialized
//! JSON and computing the session id's HMAC anew for each message was most of what taping a
//! small message cost. The result is byte for byte what `Redactor::redact_facts` gives (a test
//! holds them together); anything else takes that path.

use super::Redactor;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Distinct values remembered before the cache starts again: a session has one session id,
/// a long-lived proxy sees one per session, and memory stays bounded either way.
const MARKERS_MAX: usize = 256;

/// What one tape writer remembers between messages. In memory only, never written: the values
/// are secrets (session ids), kept beside their markers so each is hashed once per session.
#[derive(Default)]
pub(crate) struct FactsCache {
    /// A secret fact's value → its marker.
    markers: HashMap<String, String>,
    /// Whether the text rules leave every fact name alone (the walk checks each top-level key
    /// for a secret's shape, and a user's `re:` rule could match one). Worked out once: a
    /// cache serves one writer, which always passes the same `kept` and `secret` names.
    names_clean: Option<bool>,
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
        if !self.paths.is_empty() || !self.facts_fit(map, kept, secret, cache) {
            return false;
        }
        out.push(b'{');
        for (i, (name, value)) in map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json(out, name);
            out.push(b':');
            match value {
                // The walk leaves an empty value and a marker as they are.
                Value::String(s)
                    if secret.contains(&name.as_str()) && !s.is_empty() && !super::is_marker(s) =>
                {
                    match cache.markers.get(s.as_str()) {
                        Some(marker) => write_json(out, marker),
                        None => {
                            if cache.markers.len() >= MARKERS_MAX {
                                cache.markers.clear();
                            }
                            let marker = self.marker(&super::json::secret_top_rule(), s);
                            write_json(out, &marker);
                            cache.markers.insert(s.clone(), marker);
                        }
                    }
                }
                _ => write_json(out, value),
            }
        }
        out.push(b'}');
        true
    }

    /// Whether every fact is one the fast path gives exactly as the walk would.
    fn facts_fit(
        &self,
        map: &Map<String, Value>,
        kept: &[&str],
        secret: &[&str],
        cache: &mut FactsCache,
    ) -> bool {
        let names_clean = *cache.names_clean.get_or_insert_with(|| {
            kept.iter()
                .chain(secret)
                .all(|name| super::json::key_is_clean(self, name))
        });
        names_clean
            && map.iter().all(|(name, value)| {
                if kept.contains(&name.as_str()) {
                    // Left alone whatever it holds; a nested value could be too deep for the
                    // walk, which would then redact the whole text as text.
                    !matches!(value, Value::Array(_) | Value::Object(_))
                } else if secret.contains(&name.as_str()) {
                    // A number under a secret name is taken out only from four digits on, an
                    // object walked: the walk decides those.
                    matches!(value, Value::String(_))
                } else {
                    false
                }
            })
    }
}

/// Compact JSON, as `serde_json::to_vec` writes it.
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(out, v).expect("a Value serializes");
}
