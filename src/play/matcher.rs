//! Which recorded exchange answers a request: same method and canonical params (volatile fields
//! ignored), the earliest unconsumed first. Repeated identical calls get their recorded answers in
//! order; parallel and reordered calls each find their own.

use super::explain::{Miss, MissReason, Near};
use crate::tape::index::Exchange;
use crate::tape::TapeIndex;
use crate::wire::canonical::{differences, match_key_halves};
use crate::wire::params::MatchKey;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// The unserved exchanges of one tape by match key: each `take` consumes the one it returns.
pub struct Matcher {
    /// Unconsumed exchanges by match key, in recorded order.
    by_key: HashMap<MatchKey, VecDeque<usize>, BuildHasherDefault<KeyHasher>>,
    /// Reused for the canonical text of each request's params.
    scratch: Vec<u8>,
    consumed: Vec<bool>,
    /// Redacts what the client asked before it is shown in an explanation.
    display: Option<std::sync::Arc<crate::redact::Redactor>>,
    /// `--match`, `--ignore-param`, `--repeat`, and what they keep (see `policy.rs`).
    pub(super) policy: super::policy::PolicyState,
}

/// What `take` found for a request; exchanges are indexes into [`TapeIndex::exchanges`].
pub enum Outcome {
    /// This recorded exchange answers it (now consumed).
    Hit(usize),
    /// No match; `--lenient` served this other exchange of the same method instead.
    Lenient(usize, Miss),
    /// Nothing on the tape answers it, and why.
    Miss(Miss),
}

impl Matcher {
    /// A matcher over every exchange of `index`, explanations redacted by the built-in rules.
    pub fn new(index: &TapeIndex) -> Matcher {
        let display = crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults())
            .expect("the built-in rules compile");
        Matcher::with_display(index, Some(std::sync::Arc::new(display)))
    }

    /// A matcher sharing an already built display redactor (building one compiles its regexes:
    /// an HTTP player opening a session per `initialize` builds it once).
    pub(crate) fn with_display(
        index: &TapeIndex,
        display: Option<std::sync::Arc<crate::redact::Redactor>>,
    ) -> Matcher {
        Matcher::with_policy(index, display, Default::default())
    }

    /// The matcher of one play session: the options' display redactor and match policy.
    pub(crate) fn for_play(index: &TapeIndex, opts: &super::ServeOptions) -> Matcher {
        Matcher::with_policy(index, opts.display.clone(), opts.policy.clone())
    }

    fn with_policy(
        index: &TapeIndex,
        display: Option<std::sync::Arc<crate::redact::Redactor>>,
        policy: std::sync::Arc<super::policy::MatchPolicy>,
    ) -> Matcher {
        let policy = super::policy::PolicyState::new(index, policy);
        let mut by_key: HashMap<MatchKey, VecDeque<usize>, _> = HashMap::default();
        for (i, key) in policy.keys.iter().enumerate() {
            by_key.entry(*key).or_default().push_back(i);
        }
        Matcher {
            by_key,
            scratch: Vec::new(),
            consumed: vec![false; index.exchanges.len()],
            display,
            policy,
        }
    }

    /// Takes the earliest unserved exchange with the request's method and match params (redacted
    /// values on the tape match anything); with `lenient`, on a miss, the earliest unserved one
    /// of the same method.
    pub fn take(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
    ) -> Outcome {
        self.take_preferring(index, method, params, lenient, &Prefer::none())
    }

    /// `take`, where among the matching exchanges the one `prefer` scores highest is taken
    /// (the earliest of those): over HTTP, one recorded session's own exchange, and the one
    /// recorded with the same routing headers.
    pub(crate) fn take_preferring(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
        prefer: &Prefer<'_>,
    ) -> Outcome {
        let plain = self.policy.policy.plain();
        if self.policy.policy.mode == super::policy::MatchMode::Sequence && method != "ping" {
            return self.take_in_sequence(index, method, params, lenient, prefer);
        }
        // The fast key takes no copy of the params; the general one is for the rare rest
        // (redaction markers, a policy other than plain content) and gives what a miss
        // explanation shows.
        let fast = match (plain, method == "initialize") {
            (false, _) => None,
            (true, true) => match_key_halves(method, None, &mut self.scratch),
            (true, false) => match_key_halves(method, params, &mut self.scratch),
        };
        let (key, asked) = match fast {
            Some(key) => (key, None),
            None => {
                let (key, asked) = self.policy.policy.asked(method, params);
                (key, Some(asked))
            }
        };
        if let Some(q) = self.by_key.get_mut(&key).filter(|q| !q.is_empty()) {
            let at = best(q.iter().copied(), prefer, index).map_or(0, |(at, _)| at);
            let ex = q.remove(at).expect("in the queue");
            self.consumed[ex] = true;
            self.policy.served[ex] += 1;
            return Outcome::Hit(ex);
        }
        let asked = asked.unwrap_or_else(|| self.policy.policy.asked(method, params).1);
        // A recorded request with redacted values matches a live one holding the real secret:
        // the markers are wildcards.
        let wild = best(
            self.unused_of(index, method).filter(|&i| {
                let ex = &index.exchanges[i];
                ex.redacted
                    && self
                        .recorded_view(index, i)
                        .is_some_and(|recorded| crate::redact::wildcard_eq(&recorded, &asked))
            }),
            prefer,
            index,
        );
        if let Some((_, ex)) = wild {
            self.consume(index, ex);
            return Outcome::Hit(ex);
        }
        if let Some(ex) = self.repeat(index, key, &asked, method, prefer) {
            return Outcome::Hit(ex);
        }
        let miss = self.explain(index, method, asked);
        if lenient {
            if let Some(ex) = self.next_unused(index, method, prefer) {
                self.consume(index, ex);
                return Outcome::Lenient(ex, miss);
            }
        }
        Outcome::Miss(miss)
    }

    /// The exchanges of `method` not served yet, in recorded order.
    fn unused_of<'a>(
        &'a self,
        index: &'a TapeIndex,
        method: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        index
            .exchanges
            .iter()
            .enumerate()
            .filter(move |(i, ex)| {
                !self.consumed[*i] && index.msgs[ex.request].method.as_deref() == Some(method)
            })
            .map(|(i, _)| i)
    }

    /// The earliest unserved exchange of `method` (the best by `prefer`): what `--lenient`
    /// serves on a miss.
    pub(super) fn next_unused(
        &self,
        index: &TapeIndex,
        method: &str,
        prefer: &Prefer<'_>,
    ) -> Option<usize> {
        best(self.unused_of(index, method), prefer, index).map(|(_, ex)| ex)
    }

    /// Marks `ex` served when it was found another way than by its key's queue.
    pub(super) fn consume(&mut self, _index: &TapeIndex, ex: usize) {
        self.consumed[ex] = true;
        self.policy.served[ex] += 1;
        if let Some(q) = self.by_key.get_mut(&self.policy.keys[ex]) {
            q.retain(|&e| e != ex);
        }
    }

    /// A client's line quoted for humans with the display rules applied (it may hold the
    /// client's secrets).
    pub(crate) fn quote(&self, text: &str) -> String {
        match &self.display {
            Some(r) => r
                .redact_text(text)
                .map(|(t, _)| t)
                .unwrap_or_else(|| text.to_string()),
            None => text.to_string(),
        }
    }

    /// How many times each exchange was served (repeats included).
    pub(crate) fn uses(&self) -> &[u32] {
        &self.policy.served
    }

    /// Answers served again by `--repeat last|cycle`.
    pub(crate) fn repeats(&self) -> u64 {
        self.policy.repeats
    }

    /// Recorded exchanges never served, in recorded order.
    pub(crate) fn unused(&self) -> Vec<usize> {
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
                let recorded = self.recorded_view(index, i)?;
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
        let (matcher, ignored) = self.described();
        Miss {
            method: method.to_string(),
            asked,
            reason,
            nearest: near,
            recorded_methods: methods.into_iter().collect(),
            matcher,
            ignored,
            skipped_lines: index.skipped_lines().iter().map(|b| b.line).collect(),
        }
    }
}

/// Which of several matching exchanges to take: a score (higher first) and the best score
/// there can be, so that the search stops at the first exchange reaching it (with no
/// preference, the earliest at once: the stdio path never scans).
pub(crate) struct Prefer<'a> {
    pub score: &'a (dyn Fn(&Exchange) -> u32 + Sync),
    pub max: u32,
}

impl Prefer<'_> {
    /// No preference: the earliest matching exchange.
    pub fn none() -> Prefer<'static> {
        Prefer {
            score: &|_| 0,
            max: 0,
        }
    }
}

/// The candidate (position, exchange) scoring highest, the earliest among equals.
pub(super) fn best(
    candidates: impl Iterator<Item = usize>,
    prefer: &Prefer<'_>,
    index: &TapeIndex,
) -> Option<(usize, usize)> {
    let mut top: Option<(usize, usize, u32)> = None;
    for (at, ex) in candidates.enumerate() {
        let s = (prefer.score)(&index.exchanges[ex]);
        if top.is_none_or(|(_, _, t)| s > t) {
            top = Some((at, ex, s));
            if s >= prefer.max {
                break;
            }
        }
    }
    top.map(|(at, ex, _)| (at, ex))
}

/// The matcher's map hasher: its keys are already uniform hashes, so their low bits serve.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    /// A `MatchKey` writes its two halves: mixed into one.
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(32) ^ n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::params::match_key;
    use serde_json::json;

    #[test]
    fn the_fast_key_is_the_index_key() {
        for (method, p) in [
            (
                "tools/call",
                Some(json!({"name":"add","arguments":{"b":2,"a":1}})),
            ),
            (
                "tools/call",
                Some(json!({"name":"add","_meta":{"progressToken":3}})),
            ),
            ("tools/list", Some(json!({}))),
            ("tools/list", None),
            ("ping", Some(json!(null))),
            (
                "x",
                Some(json!({"requestState":"s","_meta":{"keep":[1,2.5,"é\\n"]}})),
            ),
        ] {
            assert_eq!(
                match_key_halves(method, p.as_ref(), &mut Vec::new()).unwrap(),
                match_key(method, p.as_ref()).0,
                "{method} {p:?}"
            );
        }
    }
}
