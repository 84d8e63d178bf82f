//! Two conversations side by side: exchanges aligned by content (method and canonical params,
//! as play matches), not by position, then each pair's answers compared after normalization.
//! `diff` compares two recordings with it; `check` compares a recording with a live run.

use super::diff_values::{changes, Change, ChangeKind};
use super::normalize::Normalizer;
use super::surface::{self, ToolChange};
use crate::tape::index::{match_key, params_of, MatchKey};
use crate::tape::TapeIndex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};

/// An exchange, named for humans and machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeRef {
    pub method: String,
    /// The tool, prompt or resource it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `params.arguments`, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Tape line of the request.
    pub line: u64,
}

impl ExchangeRef {
    /// `tools/call convert_temperature {"celsius":21.5}`
    pub fn describe(&self, max_args: usize) -> String {
        let mut s = self.method.clone();
        if let Some(t) = &self.target {
            s.push(' ');
            s.push_str(t);
        }
        if let Some(a) = &self.arguments {
            s.push(' ');
            s.push_str(&crate::wire::canonical::short(Some(a), max_args));
        }
        s
    }
}

/// How an exchange of the first tape fared on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Same,
    Changed,
    /// The other side has no such call at all.
    Absent,
    /// The other side made the call but got no answer.
    Unanswered,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeComparison {
    pub exchange: ExchangeRef,
    pub outcome: Outcome,
    /// Tape line of the matching request on the other side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_line: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Request-to-response time on the first side, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_latency_us: Option<u64>,
}

pub struct TapeComparison {
    /// Every exchange of the first tape, in its order.
    pub exchanges: Vec<ExchangeComparison>,
    /// Exchanges of the second tape with no counterpart in the first.
    pub only_in_other: Vec<ExchangeRef>,
    pub tool_surface: Vec<ToolChange>,
}

/// The answer body as compared: `{"result": …}` or `{"error": …}`; `None` without an answer.
pub fn answer_body(index: &TapeIndex, ex: usize) -> Option<Value> {
    let r = index.exchanges[ex].response?;
    let bytes = index.read_bytes(&index.msgs[r]).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let Value::Object(mut m) = v else { return None };
    if let Some(e) = m.remove("error") {
        return Some(serde_json::json!({ "error": e }));
    }
    m.remove("result")
        .map(|r| serde_json::json!({ "result": r }))
}

pub fn exchange_ref(index: &TapeIndex, ex: usize) -> ExchangeRef {
    let req = &index.msgs[index.exchanges[ex].request];
    let params = index.read_bytes(req).ok().and_then(|b| params_of(&b));
    ExchangeRef {
        method: req.method.clone().unwrap_or_default(),
        target: index.call_target(req),
        arguments: params
            .and_then(|p| p.get("arguments").cloned())
            .filter(|a| a.as_object().is_none_or(|o| !o.is_empty())),
        line: req.line,
    }
}

fn latency(index: &TapeIndex, ex: usize) -> Option<u64> {
    let e = &index.exchanges[ex];
    let r = e.response?;
    Some(
        index.msgs[r]
            .t_us
            .saturating_sub(index.msgs[e.request].t_us),
    )
}

fn key_of(index: &TapeIndex, ex: usize) -> MatchKey {
    index.exchanges[ex].key
}

/// Aligns `b` to `a` by content: each exchange of `a`, in order, takes the earliest unmatched
/// exchange of `b` with the same match key.
pub fn align(a: &TapeIndex, b: &TapeIndex) -> (Vec<Option<usize>>, Vec<usize>) {
    let mut pool: HashMap<MatchKey, VecDeque<usize>> = HashMap::new();
    for i in 0..b.exchanges.len() {
        pool.entry(key_of(b, i)).or_default().push_back(i);
    }
    let pairs: Vec<Option<usize>> = (0..a.exchanges.len())
        .map(|i| pool.get_mut(&key_of(a, i)).and_then(VecDeque::pop_front))
        .collect();
    let mut rest: Vec<usize> = pool.into_values().flatten().collect();
    rest.sort_unstable();
    (pairs, rest)
}

pub fn compare_tapes(a: &TapeIndex, b: &TapeIndex, norm: &Normalizer) -> TapeComparison {
    let (pairs, rest) = align(a, b);
    let mut exchanges = Vec::with_capacity(pairs.len());
    for (i, pair) in pairs.iter().enumerate() {
        let exchange = exchange_ref(a, i);
        let (outcome, other_line, changes_found, other_latency) = match *pair {
            None => (Outcome::Absent, None, Vec::new(), None),
            Some(j) => {
                let line = Some(b.msgs[b.exchanges[j].request].line);
                match (answer_body(a, i), answer_body(b, j)) {
                    (None, None) => (Outcome::Same, line, Vec::new(), None),
                    (Some(_), None) => (Outcome::Unanswered, line, Vec::new(), None),
                    (None, Some(body)) => (
                        Outcome::Changed,
                        line,
                        vec![Change {
                            kind: ChangeKind::MissingResponse,
                            path: "$".into(),
                            recorded: None,
                            observed: Some(body),
                        }],
                        latency(b, j),
                    ),
                    (Some(x), Some(y)) => {
                        let c = changes(&norm.normalize(x), &norm.normalize(y), norm.allow_reorder);
                        let outcome = if c.is_empty() {
                            Outcome::Same
                        } else {
                            Outcome::Changed
                        };
                        (outcome, line, c, latency(b, j))
                    }
                }
            }
        };
        exchanges.push(ExchangeComparison {
            exchange,
            outcome,
            other_line,
            changes: changes_found,
            latency_us: latency(a, i),
            other_latency_us: other_latency,
        });
    }
    let only_in_other = rest.into_iter().map(|j| exchange_ref(b, j)).collect();
    let tool_surface = surface::compare(&tools_list(a), &tools_list(b));
    TapeComparison {
        exchanges,
        only_in_other,
        tool_surface,
    }
}

/// Every tool the `tools/list` answers of a conversation announced (pages merged).
fn tools_list(index: &TapeIndex) -> std::collections::BTreeMap<String, Value> {
    let results: Vec<Value> = (0..index.exchanges.len())
        .filter(|&i| index.msgs[index.exchanges[i].request].method.as_deref() == Some("tools/list"))
        .filter_map(|i| answer_body(index, i)?.get("result").cloned())
        .collect();
    surface::tools_of(results.iter())
}

/// The match key a request would have, for callers that build requests themselves.
pub fn request_key(method: &str, params: Option<&Value>) -> MatchKey {
    match_key(method, params).0
}
