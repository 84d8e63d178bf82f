//! How play pairs a request with a recorded exchange, beyond the default (`--match content`,
//! strict, nothing ignored): `--ignore-param` leaves parts of the params out of matching,
//! `--match method` pairs by method and target alone, `--match sequence` by position in the
//! session, and `--repeat` says what a repeated call gets once its recorded answers are used.
//! The [`Matcher`] keeps the queues; this file holds the policy and the state it needs.

use super::explain::{Miss, MissReason};
use super::matcher::{best, Matcher, Outcome, Prefer};
use crate::tape::TapeIndex;
use crate::wire::canonical::{canonical, hash_key};
use crate::wire::jsonpath::IgnorePath;
use crate::wire::params::{match_key, target_key, target_of, MatchKey};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What a request is matched by (`--match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchMode {
    /// Method and canonical params, volatile fields and `--ignore-param` paths left out.
    #[default]
    Content,
    /// Method, and for `tools/call`, `resources/read`, `prompts/get` (and `resources/…`) the
    /// tool, resource or prompt: any recorded call of it, in recorded order.
    Method,
    /// Position: the session's Nth request gets the Nth recorded exchange when the methods
    /// agree (pings take no place: they are answered as ever).
    Sequence,
}

impl MatchMode {
    /// The `--match` value.
    pub fn name(self) -> &'static str {
        match self {
            MatchMode::Content => "content",
            MatchMode::Method => "method",
            MatchMode::Sequence => "sequence",
        }
    }
}

/// What a call gets once every recorded answer to it is used (`--repeat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Repeat {
    /// A miss, explained (the recorded answers ran out).
    #[default]
    Error,
    /// The last recorded answer, again and again.
    Last,
    /// The recorded answers again from the first, in order.
    Cycle,
}

impl Repeat {
    /// The `--repeat` value.
    pub fn name(self) -> &'static str {
        match self {
            Repeat::Error => "error",
            Repeat::Last => "last",
            Repeat::Cycle => "cycle",
        }
    }
}

/// `--match`, `--repeat` and `--ignore-param` together.
#[derive(Debug, Clone, Default)]
pub struct MatchPolicy {
    /// What a request is matched by.
    pub mode: MatchMode,
    /// What a call gets once its recorded answers are used.
    pub repeat: Repeat,
    /// Parts of the params left out of matching (`--match content` only).
    pub ignore: Vec<IgnorePath>,
}

impl MatchPolicy {
    /// The default matching: the keys the tape index computed serve as they are.
    pub(crate) fn plain(&self) -> bool {
        self.mode == MatchMode::Content && self.ignore.is_empty()
    }

    /// The params as this policy compares them, from their match params (volatile fields
    /// already removed): the ignored paths removed, or only the target kept.
    pub(crate) fn project(&self, method: &str, mut matched: Value) -> Value {
        match self.mode {
            MatchMode::Content => {
                if self.ignore.is_empty() {
                    return matched;
                }
                let target = target_of(Some(method), Some(&matched));
                for p in self
                    .ignore
                    .iter()
                    .filter(|p| p.applies(method, target.as_deref()))
                {
                    p.remove_from(&mut matched);
                }
                match matched {
                    Value::Object(ref m) if m.is_empty() => Value::Null,
                    v => v,
                }
            }
            MatchMode::Method | MatchMode::Sequence => target_key(method)
                .and_then(|k| Some((k, matched.get(k)?.clone())))
                .map(|(k, t)| Value::Object([(k.to_string(), t)].into_iter().collect()))
                .unwrap_or(Value::Null),
        }
    }

    /// A request's key under this policy, and its params as compared.
    pub(crate) fn asked(&self, method: &str, params: Option<&Value>) -> (MatchKey, Value) {
        let (key, matched) = match_key(method, params);
        if self.plain() {
            return (key, matched);
        }
        let view = self.project(method, matched);
        (hash_key(method, &canonical(&view)), view)
    }

    /// What a miss explanation says about the matcher: its name and the paths ignored.
    fn described(&self) -> (String, Vec<String>) {
        let ignored = match self.mode {
            MatchMode::Content => self.ignore.iter().map(|p| p.spec.clone()).collect(),
            _ => Vec::new(),
        };
        (self.mode.name().to_string(), ignored)
    }
}

/// What a session's matcher keeps for its policy.
pub(crate) struct PolicyState {
    pub(crate) policy: Arc<MatchPolicy>,
    /// Each exchange's key under the policy (the index's own when [`MatchPolicy::plain`]).
    pub(crate) keys: Vec<MatchKey>,
    /// Every exchange by key in recorded order, never consumed: what `--repeat` serves again
    /// (empty with `--repeat error`).
    recorded: HashMap<MatchKey, Vec<usize>>,
    /// `--repeat cycle`: how many repeats each key has served so far.
    cycles: HashMap<MatchKey, usize>,
    /// Answers served again by `--repeat`.
    pub(crate) repeats: u64,
    /// How many times each exchange was served.
    pub(crate) served: Vec<u32>,
    /// `--match sequence`: requests asked so far (pings aside).
    asked: usize,
    /// `--match sequence`: the exchanges of each recorded session (the whole tape over stdio),
    /// pings aside, in recorded order.
    lists: Vec<Vec<usize>>,
    /// `--match sequence`: the list this session follows, once its first request chose one.
    bound: Option<usize>,
}

impl PolicyState {
    /// Takes `ex` out of what `--repeat` and `--match sequence` serve.
    pub(crate) fn set_aside(&mut self, ex: usize) {
        if let Some(again) = self.recorded.get_mut(&self.keys[ex]) {
            again.retain(|&e| e != ex);
        }
        for list in &mut self.lists {
            list.retain(|&e| e != ex);
        }
    }

    pub(crate) fn new(index: &TapeIndex, policy: Arc<MatchPolicy>) -> PolicyState {
        let keys: Vec<MatchKey> = index
            .exchanges
            .iter()
            .map(|ex| {
                if policy.plain() {
                    return ex.key;
                }
                let req = &index.msgs[ex.request];
                let method = req.method.as_deref().unwrap_or_default();
                // An oversize request cannot be read back: its own key still matches itself.
                match index.request_match_params(req) {
                    Ok(m) => hash_key(method, &canonical(&policy.project(method, m))),
                    Err(_) => ex.key,
                }
            })
            .collect();
        let mut recorded: HashMap<MatchKey, Vec<usize>> = HashMap::new();
        if policy.repeat != Repeat::Error {
            for (i, k) in keys.iter().enumerate() {
                recorded.entry(*k).or_default().push(i);
            }
        }
        let mut lists: Vec<Vec<usize>> = Vec::new();
        if policy.mode == MatchMode::Sequence {
            let mut by_session: HashMap<Option<u32>, usize> = HashMap::new();
            for (i, ex) in index.exchanges.iter().enumerate() {
                if index.msgs[ex.request].method.as_deref() == Some("ping") {
                    continue;
                }
                let at = *by_session.entry(ex.session).or_insert_with(|| {
                    lists.push(Vec::new());
                    lists.len() - 1
                });
                lists[at].push(i);
            }
        }
        PolicyState {
            served: vec![0; keys.len()],
            keys,
            recorded,
            cycles: HashMap::new(),
            repeats: 0,
            asked: 0,
            lists,
            bound: None,
            policy,
        }
    }

    /// The exchange `--repeat` serves again for a call of `key` whose answers are all used, from
    /// `again` (the exchanges recorded for it; the best by `prefer` when several sessions
    /// recorded it). `None` with `--repeat error`.
    fn again(
        &mut self,
        key: MatchKey,
        again: &[usize],
        prefer: &Prefer<'_>,
        index: &TapeIndex,
    ) -> Option<usize> {
        if again.is_empty() {
            return None;
        }
        // The preferred exchanges only (a live HTTP session repeats its recorded session's).
        let top = again
            .iter()
            .map(|&e| (prefer.score)(&index.exchanges[e]))
            .max()
            .unwrap_or(0);
        let mine: Vec<usize> = again
            .iter()
            .copied()
            .filter(|&e| (prefer.score)(&index.exchanges[e]) == top)
            .collect();
        let ex = match self.policy.repeat {
            Repeat::Error => return None,
            Repeat::Last => *mine.last()?,
            Repeat::Cycle => {
                let n = self.cycles.entry(key).or_default();
                let ex = mine[*n % mine.len()];
                *n += 1;
                ex
            }
        };
        self.repeats += 1;
        self.served[ex] += 1;
        Some(ex)
    }
}

impl Matcher {
    /// `--repeat last|cycle` for a call whose recorded answers are all used: one of them again
    /// (a recorded call with redacted values matches as wildcards, as on its first use).
    pub(super) fn repeat(
        &mut self,
        index: &TapeIndex,
        key: MatchKey,
        asked: &Value,
        method: &str,
        prefer: &Prefer<'_>,
    ) -> Option<usize> {
        if self.policy.policy.repeat == Repeat::Error {
            return None;
        }
        let mut again = self.policy.recorded.get(&key).cloned().unwrap_or_default();
        if again.is_empty() {
            again = (0..index.exchanges.len())
                .filter(|&i| {
                    let ex = &index.exchanges[i];
                    ex.redacted
                        && index.msgs[ex.request].method.as_deref() == Some(method)
                        && self
                            .recorded_view(index, i)
                            .is_some_and(|r| crate::redact::wildcard_eq(&r, asked))
                })
                .collect();
        }
        self.policy.again(key, &again, prefer, index)
    }

    /// A recorded request's params as the policy compares them.
    pub(super) fn recorded_view(&self, index: &TapeIndex, ex: usize) -> Option<Value> {
        let req = &index.msgs[index.exchanges[ex].request];
        let matched = index.request_match_params(req).ok()?;
        Some(
            self.policy
                .policy
                .project(req.method.as_deref().unwrap_or_default(), matched),
        )
    }

    /// The matcher's name and ignored paths, for a miss explanation.
    pub(super) fn described(&self) -> (String, Vec<String>) {
        self.policy.policy.described()
    }

    /// `--match sequence`: the session's Nth request (pings aside) gets the Nth recorded
    /// exchange of its recorded session when the methods agree; past the end, `--repeat` says.
    /// A miss takes its place in the sequence all the same.
    pub(super) fn take_in_sequence(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
        prefer: &Prefer<'_>,
    ) -> Outcome {
        let n = self.policy.asked;
        self.policy.asked += 1;
        let repeat = self.policy.policy.repeat;
        let at = |list: &[usize]| -> Option<(usize, bool)> {
            match list.get(n) {
                Some(&ex) => Some((ex, false)),
                None if list.is_empty() => None,
                None => match repeat {
                    Repeat::Error => None,
                    Repeat::Last => list.last().map(|&ex| (ex, true)),
                    Repeat::Cycle => Some((list[n % list.len()], true)),
                },
            }
        };
        let lists: Vec<usize> = match self.policy.bound {
            Some(b) => vec![b],
            None => (0..self.policy.lists.len()).collect(),
        };
        let candidates: Vec<(usize, usize, bool)> = lists
            .iter()
            .filter_map(|&l| at(&self.policy.lists[l]).map(|(ex, again)| (l, ex, again)))
            .filter(|&(_, ex, _)| {
                index.msgs[index.exchanges[ex].request].method.as_deref() == Some(method)
            })
            .collect();
        let chosen =
            best(candidates.iter().map(|c| c.1), prefer, index).map(|(pos, _)| candidates[pos]);
        if let Some((list, ex, again)) = chosen {
            self.policy.bound.get_or_insert(list);
            if again {
                self.policy.repeats += 1;
            }
            self.consume(index, ex);
            return Outcome::Hit(ex);
        }
        // What the recording had at this place, in the list the session follows (or the
        // first).
        let list = self.policy.bound.unwrap_or(0);
        let recorded = self
            .policy
            .lists
            .get(list)
            .and_then(|l| at(l))
            .map(|(ex, _)| {
                let req = &index.msgs[index.exchanges[ex].request];
                (req.method.clone().unwrap_or_default(), req.line)
            });
        let length = self.policy.lists.get(list).map_or(0, Vec::len);
        let (matcher, ignored) = self.described();
        let miss = Miss {
            method: method.to_string(),
            asked: match_key(method, params).1,
            reason: MissReason::OutOfSequence {
                position: n + 1,
                recorded_method: recorded.as_ref().map(|r| r.0.clone()),
                recorded_line: recorded.map(|r| r.1),
                recorded_requests: length,
            },
            nearest: Vec::new(),
            recorded_methods: self.recorded_methods(index),
            matcher,
            ignored,
            skipped_lines: index.skipped_lines().iter().map(|b| b.line).collect(),
        };
        if lenient {
            if let Some(ex) = self.next_unused(index, method, prefer) {
                self.consume(index, ex);
                return Outcome::Lenient(ex, miss);
            }
        }
        Outcome::Miss(miss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(mode: MatchMode, ignore: &[&str]) -> MatchPolicy {
        MatchPolicy {
            mode,
            repeat: Repeat::Error,
            ignore: ignore
                .iter()
                .map(|p| IgnorePath::parse_for(p, "--ignore-param").unwrap())
                .collect(),
        }
    }

    #[test]
    fn ignored_params_take_no_part_in_the_key_and_scopes_are_kept_to() {
        let p = policy(
            MatchMode::Content,
            &["tools/call:echo:$.arguments.nonce", "$.arguments.ts"],
        );
        let call = |name: &str, nonce: &str, ts: &str| json!({"name": name, "arguments": {"message": "hi", "nonce": nonce, "ts": ts}});
        let key = |v: Value| p.asked("tools/call", Some(&v)).0;
        assert_eq!(key(call("echo", "n1", "t1")), key(call("echo", "n2", "t2")));
        // The nonce is ignored for echo only; the timestamp everywhere.
        assert_ne!(key(call("add", "n1", "t1")), key(call("add", "n2", "t1")));
        assert_eq!(key(call("add", "n1", "t1")), key(call("add", "n1", "t2")));
        // Nothing left: the same as no params.
        let only = policy(MatchMode::Content, &["$.arguments"]);
        assert_eq!(
            only.project("x", json!({"arguments": {"a": 1}})),
            Value::Null
        );
    }

    #[test]
    fn method_matching_keeps_the_target_only() {
        let p = policy(MatchMode::Method, &[]);
        assert_eq!(
            p.project("tools/call", json!({"name": "add", "arguments": {"a": 1}})),
            json!({"name": "add"})
        );
        assert_eq!(
            p.project("resources/read", json!({"uri": "file:///a"})),
            json!({"uri": "file:///a"})
        );
        assert_eq!(p.project("tools/list", json!({"cursor": "c"})), Value::Null);
        // The default policy gives the index's own key.
        let plain = MatchPolicy::default();
        let params = json!({"name": "add", "arguments": {"b": 2, "a": 1}});
        assert_eq!(
            plain.asked("tools/call", Some(&params)).0,
            match_key("tools/call", Some(&params)).0
        );
    }
}
