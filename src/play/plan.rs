//! What a play does to time and on purpose: `--pace`, `--latency`, `--faults` and the `--seed`
//! every random choice is drawn from. A [`Plan`] is fixed for the whole play; each call gets a
//! `Verdict` when it is matched — which fault (if any) it gets, which of its server requests
//! are skipped, how late its answer goes out. Choices are pure functions of the seed and the
//! recorded exchange a call matched, so the same seed gives the same faults to the same calls,
//! in whatever order they arrive and over stdio or HTTP alike.

use super::faults::{Call, Fault, FaultKind};
use super::pace::Latency;
use crate::tape::TapeIndex;
use crate::wire::{Dir, Kind};
use serde_json::{json, Value};
use std::time::Duration;

/// The draws of `--latency` use this salt; the faults use their position in the list.
const LATENCY_SALT: u64 = u64::MAX;

/// How play treats time and faults (by default: answers at once, nothing injected).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// `--pace`: the recorded latencies times this factor (`None`: answer at once).
    pub pace: Option<f64>,
    /// `--latency`: a random delay added to every answer.
    pub latency: Option<Latency>,
    /// `--faults`, in the order given: the first that applies to a message wins.
    pub faults: Vec<Fault>,
    /// What every random choice is drawn from.
    pub seed: u64,
}

/// A fault injected, for the summary.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The fault as written (`error=-32603@tool:echo`).
    pub fault: String,
    /// Tape line of the recorded request (or server request) it replaced.
    pub line: u64,
    /// The request in short (method, target, arguments).
    pub what: String,
    /// The client's request id, when it was a client request.
    pub id: Option<String>,
}

/// What happens to one call.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// The fault for the call itself (`error`, `drop`, `stall`), by its place in the plan.
    pub fault: Option<usize>,
    /// Its recorded server requests (message indexes) that are not sent, with the fault.
    pub skips: Vec<(usize, usize)>,
    /// `--pace`'s factor, when paced.
    pub pace: Option<f64>,
    /// `--latency`'s delay for this answer.
    pub latency: Duration,
}

impl Verdict {
    /// Whether the answer may wait (then the exchange runs as a task of its own, so that
    /// other calls are served meanwhile).
    pub(crate) fn waits(&self) -> bool {
        self.pace.is_some() || !self.latency.is_zero() || self.fault.is_some()
    }
}

impl Plan {
    /// Whether anything is set at all.
    pub fn is_set(&self) -> bool {
        self.pace.is_some() || self.latency.is_some() || !self.faults.is_empty()
    }

    /// Whether the seed decides anything (a latency range, a share of calls).
    pub fn is_random(&self) -> bool {
        self.latency.is_some_and(|l| l.min != l.max)
            || self.faults.iter().any(|f| {
                f.when
                    .iter()
                    .any(|w| matches!(w, super::faults::When::Share(_)))
            })
    }

    /// Whether some fault can cut the connection.
    pub(crate) fn may_drop(&self) -> bool {
        self.faults.iter().any(|f| f.kind == FaultKind::Drop)
    }

    /// The settings in words, for stderr (`None` when nothing is set).
    pub fn settings(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        let mut parts = Vec::new();
        match self.pace {
            Some(1.0) => parts.push("paced as recorded".to_string()),
            Some(p) => parts.push(format!("paced at {p} × the recorded latencies")),
            None => {}
        }
        if let Some(l) = self.latency {
            parts.push(format!("latency {l} added to every answer"));
        }
        if !self.faults.is_empty() {
            let list: Vec<&str> = self.faults.iter().map(|f| f.spec.as_str()).collect();
            parts.push(format!("faults {}", list.join(", ")));
        }
        if self.is_random() {
            parts.push(format!(
                "seed {} (--seed {} repeats these choices)",
                self.seed, self.seed
            ));
        }
        Some(parts.join("; "))
    }

    /// The verdict for a client call matched to recorded exchange `ex`, arriving as the
    /// client's message number `msg_no`.
    pub(crate) fn verdict(
        &self,
        index: &TapeIndex,
        ex: usize,
        method: &str,
        params: Option<&Value>,
        msg_no: u64,
    ) -> Verdict {
        let mut v = Verdict {
            pace: self.pace,
            latency: self
                .latency
                .map(|l| l.at(super::faults::draw(self.seed, LATENCY_SALT, ex as u64)))
                .unwrap_or_default(),
            ..Verdict::default()
        };
        if self.faults.is_empty() {
            return v;
        }
        let call = Call {
            method,
            call: Some((method, params)),
            msg_no,
            key: ex as u64,
        };
        v.fault = self.first(&call, |f| f.kind != FaultKind::Skip && !f.spares(method));
        for &m in &index.exchanges[ex].during {
            let meta = &index.msgs[m];
            if meta.kind != Kind::Request {
                continue;
            }
            let server = Call {
                method: meta.method.as_deref().unwrap_or_default(),
                key: m as u64,
                ..call
            };
            if let Some(f) = self.first(&server, |f| f.kind == FaultKind::Skip) {
                v.skips.push((m, f));
            }
        }
        v
    }

    /// The `skip` fault for a recorded server request tied to no call (message `msg`), sent
    /// once the client's message `msg_no` came.
    pub(crate) fn skip_standalone(
        &self,
        index: &TapeIndex,
        msg: usize,
        msg_no: u64,
    ) -> Option<usize> {
        let server = Call {
            method: index.msgs[msg].method.as_deref().unwrap_or_default(),
            call: None,
            msg_no,
            key: msg as u64,
        };
        self.first(&server, |f| f.kind == FaultKind::Skip)
    }

    fn first(&self, c: &Call<'_>, kind: impl Fn(&Fault) -> bool) -> Option<usize> {
        self.faults
            .iter()
            .enumerate()
            .find(|(i, f)| kind(f) && f.applies(c, self.seed, *i as u64))
            .map(|(i, _)| i)
    }

    /// The fault at `i` as injected on the recorded message `msg`.
    pub(crate) fn injected(
        &self,
        index: &TapeIndex,
        i: usize,
        msg: usize,
        id: Option<&str>,
    ) -> Injected {
        let meta = &index.msgs[msg];
        let what = match meta.dir {
            Dir::C2S => index.describe_request(meta),
            Dir::S2C => meta.method.clone().unwrap_or_default(),
        };
        crate::diag!(
            "mcptape play: injected {} on tape line {} ({what}{})",
            self.faults[i].spec,
            meta.line,
            id.map(|id| format!(", request id {id}"))
                .unwrap_or_default()
        );
        Injected {
            fault: self.faults[i].spec.clone(),
            line: meta.line,
            what,
            id: id.map(str::to_string),
        }
    }

    /// The error answer of an `error=CODE` fault, with the client's id.
    pub(crate) fn error_answer(&self, i: usize, client_id: &str) -> Option<String> {
        let f = &self.faults[i];
        let FaultKind::Error(code) = f.kind else {
            return None;
        };
        let msg = json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": format!("mcptape: fault injected on purpose (--faults {})", f.spec)}});
        crate::wire::rewrite::with_id(&msg.to_string(), client_id).ok()
    }

    /// The kind of the fault at `i`.
    pub(crate) fn kind(&self, i: usize) -> &FaultKind {
        &self.faults[i].kind
    }
}

/// A seed for a play that was given none: different every run (std's per-process random hash
/// keys), printed so that the run can be repeated with `--seed`.
pub fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    // Small enough to retype.
    h.finish() % 1_000_000
}

/// How long after the client message that made it due a message tied to no call went out in
/// the recording, in microseconds (from the recording's start when no client message came
/// before it).
pub(crate) fn standalone_offset(index: &TapeIndex, msg: usize) -> u64 {
    let at = index.msgs[msg].t_us;
    let before = index.msgs[..msg]
        .iter()
        .rev()
        .find(|m| m.dir == Dir::C2S)
        .map(|m| m.t_us)
        .unwrap_or(0);
    at.saturating_sub(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_say_what_is_set_and_the_seed_when_it_decides() {
        assert_eq!(Plan::default().settings(), None);
        let mut p = Plan {
            pace: Some(1.0),
            seed: 7,
            ..Plan::default()
        };
        assert_eq!(p.settings().unwrap(), "paced as recorded");
        p.pace = Some(0.5);
        p.latency = Some("20ms..200ms".parse().unwrap());
        p.faults = super::super::faults::parse_faults("error=-32000@25%").unwrap();
        assert_eq!(
            p.settings().unwrap(),
            "paced at 0.5 × the recorded latencies; latency 20ms..200ms added to every answer; faults error=-32000@25%; seed 7 (--seed 7 repeats these choices)"
        );
        p.faults = super::super::faults::parse_faults("drop@after:3").unwrap();
        p.latency = None;
        assert!(!p.settings().unwrap().contains("seed"));
    }

    #[test]
    fn fresh_seeds_differ() {
        let seeds: std::collections::HashSet<u64> = (0..20).map(|_| fresh_seed()).collect();
        assert!(seeds.len() > 10, "{seeds:?}");
    }
}
