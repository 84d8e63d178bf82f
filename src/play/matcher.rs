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
    /// Unconsumed exchanges by match key, in recorded order. A queue may start with exchanges
    /// already consumed by [`take_raw`](Self::take_raw)'s in-order step, which does not look the
    /// queue up: they are dropped from its front before it is used.
    by_key: HashMap<MatchKey, VecDeque<usize>, BuildHasherDefault<KeyHasher>>,
    /// Key of a recorded request's exact params text → its match key under the policy: a
    /// client request of the same bytes needs no params value built to be matched.
    by_raw: HashMap<MatchKey, MatchKey, BuildHasherDefault<KeyHasher>>,
    /// Each exchange's `raw_key`, and the exchange before it of the same match key.
    raw_keys: Vec<Option<MatchKey>>,
    prev_same: Vec<Option<u32>>,
    /// Every exchange consumed so far was the earliest unconsumed one of its key: then an
    /// exchange whose `prev_same` is consumed is the earliest of its key.
    in_order: bool,
    /// The exchange after the one served last: what a client replaying its session asks next.
    cursor: usize,
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
        // Sized up front: growing maps of 100k keys rehashes them several times at start-up.
        let n = policy.keys.len();
        let mut by_key: HashMap<MatchKey, VecDeque<usize>, _> =
            HashMap::with_capacity_and_hasher(n, Default::default());
        let mut by_raw: HashMap<MatchKey, MatchKey, _> =
            HashMap::with_capacity_and_hasher(n, Default::default());
        let mut prev_same = Vec::with_capacity(policy.keys.len());
        for (i, key) in policy.keys.iter().enumerate() {
            let q = by_key.entry(*key).or_default();
            prev_same.push(q.back().map(|&p| p as u32));
            q.push_back(i);
            if let Some(raw) = index.exchanges[i].raw_key {
                by_raw.insert(raw, *key);
            }
        }
        Matcher {
            by_key,
            by_raw,
            raw_keys: index.exchanges.iter().map(|e| e.raw_key).collect(),
            prev_same,
            in_order: true,
            cursor: 0,
            scratch: Vec::new(),
            consumed: vec![false; index.exchanges.len()],
            display,
            policy,
        }
    }

    /// [`take`](Self::take)'s answer for a request whose params' exact text (`None`: it has no
    /// params) is a recorded request's, when that is a plain hit: the earliest unserved exchange
    /// of that match key. `None` otherwise (no recorded request of these bytes, all of them
    /// served, `--match sequence`): the caller then goes `take`'s way, with the params parsed.
    /// The same bytes make the same canonical params, so a hit here is the hit `take` gives.
    pub(crate) fn take_raw(&mut self, method: &str, raw_params: Option<&str>) -> Option<usize> {
        if self.policy.policy.mode == super::policy::MatchMode::Sequence && method != "ping" {
            return None;
        }
        let raw = crate::wire::params::raw_key(method, raw_params);
        // In recorded order, the next exchange answers without a map lookup (each is a cache
        // miss on a big tape): the earliest unconsumed of its key when the one before it of the
        // same key is consumed and every consumption so far was in order.
        let next = self.cursor;
        if self.in_order
            && self.raw_keys.get(next) == Some(&Some(raw))
            && !self.consumed[next]
            && self.prev_same[next].is_none_or(|p| self.consumed[p as usize])
        {
            self.served(next);
            return Some(next);
        }
        let key = *self.by_raw.get(&raw)?;
        let ex = self.front(key)?;
        self.by_key.get_mut(&key)?.pop_front();
        self.served(ex);
        Some(ex)
    }

    /// The earliest unconsumed exchange of `key`, its queue's stale front dropped first.
    fn front(&mut self, key: MatchKey) -> Option<usize> {
        let q = self.by_key.get_mut(&key)?;
        while q.front().is_some_and(|&e| self.consumed[e]) {
            q.pop_front();
        }
        q.front().copied()
    }

    /// Marks `ex`, its key's earliest unconsumed exchange, served.
    fn served(&mut self, ex: usize) {
        self.consumed[ex] = true;
        self.policy.served[ex] += 1;
        self.cursor = ex + 1;
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
        if self.front(key).is_some() {
            let q = self.by_key.get_mut(&key).expect("just found");
            let at = best(q.iter().copied(), prefer, index).map_or(0, |(at, _)| at);
            let ex = q.remove(at).expect("in the queue");
            // Preferred over the earliest: out of order for `take_raw`'s in-order step.
            self.in_order &= at == 0;
            self.served(ex);
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
        // Not necessarily its key's earliest (a wildcard, `--lenient`, `--match sequence`).
        self.in_order = false;
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

    /// A tape of `calls` (each `tools/call` with arguments `{"n":k,"m":0}`), each answered.
    fn tape_of(dir: &std::path::Path, calls: &[u8]) -> TapeIndex {
        use crate::tape::{TapeWriter, WriteOptions};
        use crate::wire::{Dir, Frame, Line};
        let path = dir.join("t.jsonl");
        let mut w = TapeWriter::create(&path, WriteOptions::default()).unwrap();
        for (i, k) in calls.iter().enumerate() {
            let req = request(i, *k, false);
            let res = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"k":{k},"i":{i}}}}}"#);
            for (dir, bytes) in [(Dir::C2S, req.as_bytes()), (Dir::S2C, res.as_bytes())] {
                let line = Line {
                    bytes,
                    crlf: false,
                    unterminated: false,
                    bom: false,
                };
                w.message(
                    "default",
                    dir,
                    &Frame::Line(line),
                    std::time::Instant::now(),
                );
            }
            w.commit().unwrap();
        }
        w.finish(None, None).unwrap();
        TapeIndex::load(&path, None).unwrap()
    }

    /// A request for key `k`; `swapped`: the same params with their keys in another order (equal
    /// canonically, other bytes).
    fn request(id: usize, k: u8, swapped: bool) -> String {
        let args = if swapped {
            format!(r#"{{"m":0,"n":{k}}}"#)
        } else {
            format!(r#"{{"n":{k},"m":0}}"#)
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","arguments":{args}}}}}"#
        )
    }

    fn params_of(req: &str) -> (Option<String>, Option<Value>) {
        let v: Value = serde_json::from_str(req).unwrap();
        let p = v.get("params").cloned();
        (p.as_ref().map(|p| p.to_string()), p)
    }

    proptest::proptest! {
        /// Whatever order the client asks in (repeats, misses, other key orders), the exact-bytes
        /// lookup first and `take` after it serve exactly what `take` alone serves.
        #[test]
        fn the_exact_bytes_lookup_serves_what_take_serves(
            recorded in proptest::collection::vec(0u8..4, 1..24),
            asked in proptest::collection::vec((0u8..5, proptest::bool::ANY), 0..40),
            in_recorded_order in proptest::bool::ANY,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let index = tape_of(dir.path(), &recorded);
            let asked: Vec<(u8, bool)> = if in_recorded_order {
                recorded.iter().map(|&k| (k, false)).chain(asked).collect()
            } else {
                asked
            };
            let mut both = Matcher::with_display(&index, None);
            let mut plain = Matcher::with_display(&index, None);
            for (i, (k, swapped)) in asked.into_iter().enumerate() {
                let req = request(1000 + i, k, swapped);
                let (raw, value) = params_of(&req);
                // Byte-exact text of the params as sent.
                let raw = raw.map(|_| {
                    let at = req.find(r#""params":"#).unwrap() + 9;
                    req[at..req.len() - 1].to_string()
                });
                let a = match both.take_raw("tools/call", raw.as_deref()) {
                    Some(ex) => Some(ex),
                    None => match both.take(&index, "tools/call", value.as_ref(), false) {
                        Outcome::Hit(ex) => Some(ex),
                        _ => None,
                    },
                };
                let b = match plain.take(&index, "tools/call", value.as_ref(), false) {
                    Outcome::Hit(ex) => Some(ex),
                    _ => None,
                };
                proptest::prop_assert_eq!(a, b, "request {} for key {} (swapped {})", i, k, swapped);
            }
            proptest::prop_assert_eq!(both.unused(), plain.unused());
        }
    }

    #[test]
    fn a_session_asked_in_recorded_order_is_served_by_the_exact_bytes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let recorded = [0, 1, 0, 2, 1, 0];
        let index = tape_of(dir.path(), &recorded);
        let mut m = Matcher::with_display(&index, None);
        for (i, k) in recorded.iter().enumerate() {
            let req = request(i, *k, false);
            let at = req.find(r#""params":"#).unwrap() + 9;
            assert_eq!(
                m.take_raw("tools/call", Some(&req[at..req.len() - 1])),
                Some(i)
            );
        }
        // All served: the exact-bytes lookup leaves repeats to `take`.
        let req = request(9, 0, false);
        let at = req.find(r#""params":"#).unwrap() + 9;
        assert_eq!(
            m.take_raw("tools/call", Some(&req[at..req.len() - 1])),
            None
        );
    }

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
