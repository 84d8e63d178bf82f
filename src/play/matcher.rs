//! Which recorded exchange answers a request: same method and canonical params (volatile fields
//! ignored), the earliest unconsumed first. Repeated identical calls get their recorded answers in
//! order; parallel and reordered calls each find their own.

use super::explain::{Miss, MissReason, Near};
use crate::tape::index::{match_key, MatchKey};
use crate::tape::TapeIndex;
use crate::wire::canonical::differences;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};

pub struct Matcher {
    /// Unconsumed exchanges by match key, in recorded order.
    by_key: HashMap<MatchKey, VecDeque<usize>>,
    consumed: Vec<bool>,
    /// Redacts what the client asked before it is shown in an explanation.
    display: Option<std::sync::Arc<crate::redact::Redactor>>,
}

pub enum Outcome {
    Hit(usize),
    /// No match; `--lenient` served this other exchange of the same method instead.
    Lenient(usize, Miss),
    Miss(Miss),
}

impl Matcher {
    pub fn new(index: &TapeIndex) -> Matcher {
        Matcher::with_display_rules(index, &crate::redact::RedactConfig::defaults())
    }

    /// A matcher whose miss explanations redact what the client asked with these rules.
    pub fn with_display_rules(index: &TapeIndex, rules: &crate::redact::RedactConfig) -> Matcher {
        Matcher::with_display(
            index,
            crate::redact::Redactor::for_config(rules).map(std::sync::Arc::new),
        )
    }

    /// A matcher sharing an already built display redactor (building one compiles its regexes:
    /// an HTTP player opening a session per `initialize` builds it once).
    pub fn with_display(
        index: &TapeIndex,
        display: Option<std::sync::Arc<crate::redact::Redactor>>,
    ) -> Matcher {
        let mut by_key: HashMap<MatchKey, VecDeque<usize>> = HashMap::new();
        for (i, ex) in index.exchanges.iter().enumerate() {
            by_key.entry(ex.key).or_default().push_back(i);
        }
        Matcher {
            by_key,
            consumed: vec![false; index.exchanges.len()],
            display,
        }
    }

    pub fn take(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
    ) -> Outcome {
        let (key, asked) = match_key(method, params);
        if let Some(ex) = self.by_key.get_mut(&key).and_then(VecDeque::pop_front) {
            self.consumed[ex] = true;
            return Outcome::Hit(ex);
        }
        // A recorded request with redacted values matches a live one holding the real secret:
        // the markers are wildcards.
        let wild = index.exchanges.iter().enumerate().find(|(i, ex)| {
            !self.consumed[*i]
                && ex.redacted
                && index.msgs[ex.request].method.as_deref() == Some(method)
                && index
                    .request_match_params(&index.msgs[ex.request])
                    .is_ok_and(|recorded| crate::redact::wildcard_eq(&recorded, &asked))
        });
        if let Some((ex, _)) = wild {
            self.consumed[ex] = true;
            if let Some(q) = self.by_key.get_mut(&index.exchanges[ex].key) {
                q.retain(|&e| e != ex);
            }
            return Outcome::Hit(ex);
        }
        let miss = self.explain(index, method, asked);
        if lenient {
            let next = index
                .exchanges
                .iter()
                .enumerate()
                .find(|(i, ex)| {
                    !self.consumed[*i] && index.msgs[ex.request].method.as_deref() == Some(method)
                })
                .map(|(i, _)| i);
            if let Some(ex) = next {
                self.consumed[ex] = true;
                if let Some(q) = self.by_key.get_mut(&index.exchanges[ex].key) {
                    q.retain(|&e| e != ex);
                }
                return Outcome::Lenient(ex, miss);
            }
        }
        Outcome::Miss(miss)
    }

    /// Recorded exchanges never served, in recorded order.
    pub fn unused(&self) -> Vec<usize> {
        (0..self.consumed.len())
            .filter(|&i| !self.consumed[i])
            .collect()
    }

    fn explain(&self, index: &TapeIndex, method: &str, asked: Value) -> Miss {
        // What the client asked may hold its secrets: explanations go to stderr and back to the
        // client, so they show it redacted. Compare against the redacted form too.
        let asked = match &self.display {
            Some(r) => {
                let mut wrapped = serde_json::json!({ "params": asked });
                r.redact_value(&mut wrapped, &mut Vec::new());
                wrapped["params"].take()
            }
            None => asked,
        };
        let mut same_method = Vec::new();
        let mut methods: BTreeMap<String, usize> = BTreeMap::new();
        for (i, ex) in index.exchanges.iter().enumerate() {
            let req = &index.msgs[ex.request];
            let m = req.method.clone().unwrap_or_default();
            if m == method {
                same_method.push(i);
            }
            *methods.entry(m).or_default() += 1;
        }
        let mut near: Vec<Near> = same_method
            .iter()
            .filter_map(|&i| {
                let req = &index.msgs[index.exchanges[i].request];
                let recorded = index.request_match_params(req).ok()?;
                // Redacted values on the tape match anything: not differences.
                let (wild, real): (Vec<_>, Vec<_>) = differences(&recorded, &asked)
                    .into_iter()
                    .partition(|d| match (&d.left, &d.right) {
                        (Some(l), Some(r)) => {
                            l.as_str().is_some_and(crate::redact::has_marker)
                                && crate::redact::wildcard_eq(l, r)
                        }
                        _ => false,
                    });
                Some(Near {
                    line: req.line,
                    seq: req.seq,
                    used: self.consumed[i],
                    differences: real,
                    wildcards: wild.len(),
                })
            })
            .collect();
        let identical = near.iter().filter(|n| n.differences.is_empty()).count();
        let reason = if same_method.is_empty() {
            MissReason::MethodNotRecorded
        } else if identical > 0 {
            MissReason::AllUsed {
                recorded: identical,
            }
        } else {
            MissReason::NoMatch
        };
        // Nearest first: fewest differing paths, then unused before used, then recorded order.
        near.sort_by_key(|n| (n.differences.len(), n.used, n.seq));
        // Keep the nearest and those about as near; far-off calls are noise, not explanation.
        let best = near.first().map(|n| n.differences.len()).unwrap_or(0);
        near.retain(|n| n.differences.len() <= best + 1);
        near.truncate(3);
        Miss {
            method: method.to_string(),
            asked,
            reason,
            nearest: near,
            recorded_methods: methods.into_iter().collect(),
        }
    }
}
