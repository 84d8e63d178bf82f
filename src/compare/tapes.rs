//! Two conversations side by side: exchanges aligned by content (method and canonical params,
//! as play matches), not by position, then each pair's answers compared after normalization.
//! `diff` compares two recordings with it; `check` compares a recording with a live run.

use super::diff_values::{changes_with, Change, ChangeKind};
use super::normalize::Normalizer;
use super::server_messages;
use super::surface::{self, ToolChange};
use crate::tape::TapeIndex;
use crate::wire::params::{params_of, MatchKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};

/// An exchange, named for humans and machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeRef {
    /// The server of a multi-server comparison it belongs to (its label on the tape); absent
    /// when the tapes compared hold one server each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The request's method.
    pub method: String,
    /// The tool, prompt or resource it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `params.arguments`, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Tape line of the request.
    pub line: u64,
    /// Appended to the tape after its recording (`play --on-miss live`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub appended: bool,
}

impl ExchangeRef {
    /// `tools/call convert_temperature {"celsius":21.5}`; `server search: tools/call find …`
    /// in a comparison of several servers.
    pub(crate) fn describe(&self, max_args: usize) -> String {
        let mut s = match &self.server {
            Some(server) => format!("server {server}: {}", self.method),
            None => self.method.clone(),
        };
        if let Some(t) = &self.target {
            s.push(' ');
            s.push_str(t);
        }
        if let Some(a) = &self.arguments {
            s.push(' ');
            s.push_str(&crate::wire::canonical::short(Some(a), max_args));
        }
        if self.appended {
            s.push_str(" (appended)");
        }
        s
    }
}

/// How an exchange of the first tape fared on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The other side answered the same, after normalization.
    Same,
    /// The other side answered differently (see the changes).
    Changed,
    /// The other side has no such call at all.
    Absent,
    /// The other side made the call but got no answer.
    Unanswered,
}

/// One exchange of the first tape, and how it fared on the other side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeComparison {
    /// The exchange on the first side.
    pub exchange: ExchangeRef,
    /// How it fared on the other side.
    pub outcome: Outcome,
    /// Tape line of the matching request on the other side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_line: Option<u64>,
    /// What differs between the two answers (empty unless `Changed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Request-to-response time on the first side, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    /// The same on the other side, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_latency_us: Option<u64>,
}

/// Two conversations compared (`compare_tapes`).
pub(crate) struct TapeComparison {
    /// Every exchange of the first tape, in its order.
    pub exchanges: Vec<ExchangeComparison>,
    /// Exchanges of the second tape with no counterpart in the first.
    pub only_in_other: Vec<ExchangeRef>,
    /// How the tools listed changed from the first tape to the second.
    pub tool_surface: Vec<ToolChange>,
    /// The server's requests and notifications whose number differs, by method.
    pub server_messages: Vec<super::server_messages::MessageCount>,
}

/// The answer body as compared: `{"result": …}` or `{"error": …}`; `None` without an answer.
pub(crate) fn answer_body(index: &TapeIndex, ex: usize) -> Option<Value> {
    body_of(&answer_bytes(index, ex)?)
}

/// The answer's bytes as recorded; `None` without an answer (or when it cannot be read).
pub(crate) fn answer_bytes(index: &TapeIndex, ex: usize) -> Option<Vec<u8>> {
    let r = index.exchanges[ex].response?;
    index.read_bytes(&index.msgs[r]).ok()
}

/// Two recorded answers whose bytes differ only in the value of the top-level `id` (a checker
/// or another client numbers its requests differently).
fn equal_but_id(x: &[u8], y: &[u8]) -> bool {
    let (Ok(x), Ok(y)) = (std::str::from_utf8(x), std::str::from_utf8(y)) else {
        return false;
    };
    match (
        crate::wire::rewrite::id_span(x),
        crate::wire::rewrite::id_span(y),
    ) {
        (Some((xs, xe)), Some((ys, ye))) => x[..xs] == y[..ys] && x[xe..] == y[ye..],
        _ => false,
    }
}

pub(crate) fn body_of(bytes: &[u8]) -> Option<Value> {
    let v: Value = crate::wire::exact::from_slice(bytes).ok()?;
    let Value::Object(mut m) = v else { return None };
    if let Some(e) = m.remove("error") {
        return Some(serde_json::json!({ "error": e }));
    }
    m.remove("result")
        .map(|r| serde_json::json!({ "result": r }))
}

/// The exchange `ex` of `index`, named.
pub(crate) fn exchange_ref(index: &TapeIndex, ex: usize) -> ExchangeRef {
    let req = &index.msgs[index.exchanges[ex].request];
    let params = index.read_bytes(req).ok().and_then(|b| params_of(&b));
    ExchangeRef {
        server: None,
        method: req.method.clone().unwrap_or_default(),
        target: crate::wire::params::target_of(req.method.as_deref(), params.as_ref()),
        arguments: params
            .and_then(|p| p.get("arguments").cloned())
            .filter(|a| a.as_object().is_none_or(|o| !o.is_empty())),
        line: req.line,
        appended: req.appended,
    }
}

pub(crate) fn latency(index: &TapeIndex, ex: usize) -> Option<u64> {
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
pub(crate) fn align(a: &TapeIndex, b: &TapeIndex) -> (Vec<Option<usize>>, Vec<usize>) {
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

/// Each exchange of `a` aligned with `b` by content and their answers compared. (`check`
/// compares answers as they arrive, `check/observe.rs`; the tests hold the two ways equal.)
#[cfg(test)]
pub(crate) fn compare_tapes(a: &TapeIndex, b: &TapeIndex, norm: &Normalizer) -> TapeComparison {
    compare(a, b, norm, true).0
}

/// Like `compare_tapes`, but the exchanges whose answers are the same are only counted, not
/// listed (`diff` reports only what drifted): the count is returned beside the comparison.
/// Answers recorded byte for byte the same are then not parsed at all.
pub(crate) fn compare_tapes_drift(
    a: &TapeIndex,
    b: &TapeIndex,
    norm: &Normalizer,
) -> (TapeComparison, usize) {
    compare(a, b, norm, false)
}

fn compare(
    a: &TapeIndex,
    b: &TapeIndex,
    norm: &Normalizer,
    keep_same: bool,
) -> (TapeComparison, usize) {
    let (pairs, rest) = align(a, b);
    let keyed = one_marker_key(
        a.header.marker_key.as_deref(),
        b.header.marker_key.as_deref(),
    );
    let mut exchanges = Vec::with_capacity(if keep_same { pairs.len() } else { 0 });
    let mut same = 0;
    for (i, pair) in pairs.iter().enumerate() {
        let (outcome, other_line, changes_found, other_latency) = match *pair {
            None => (Outcome::Absent, None, Vec::new(), None),
            Some(j) => {
                let line = Some(b.msgs[b.exchanges[j].request].line);
                let (x, y) = (answer_bytes(a, i), answer_bytes(b, j));
                if !keep_same && answers_equal(x.as_deref(), y.as_deref()) {
                    same += 1;
                    continue;
                }
                let c = compare_answers(a, i, x.as_deref(), y.as_deref(), norm, keyed);
                let other_latency = c.answered.then(|| latency(b, j)).flatten();
                (c.outcome, line, c.changes, other_latency)
            }
        };
        if !keep_same && outcome == Outcome::Same {
            same += 1;
            continue;
        }
        exchanges.push(ExchangeComparison {
            exchange: exchange_ref(a, i),
            outcome,
            other_line,
            changes: changes_found,
            latency_us: latency(a, i),
            other_latency_us: other_latency,
        });
    }
    let only_in_other = rest.into_iter().map(|j| exchange_ref(b, j)).collect();
    let tool_surface = surface_changes(listed_tools(a).as_ref(), listed_tools(b).as_ref());
    (
        TapeComparison {
            exchanges,
            only_in_other,
            tool_surface,
            server_messages: server_messages::differing(
                &server_messages::counts_of(a),
                &server_messages::counts_of(b),
            ),
        },
        same,
    )
}

/// Whether two sides' markers were made with one marker key (`$MCPTAPE_REDACT_KEY`, named by
/// its id): then a marker's hash tells secrets apart, and markers with different hashes are
/// different values. Otherwise each side's hashes are its own (a random per-tape key) and
/// markers compare by rule.
pub(crate) fn one_marker_key(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(x), Some(y)) if x == y)
}

/// Equal bytes (or equal but for the id, which is not compared) are equal bodies, or both
/// unparsable: the same either way, without parsing.
pub(crate) fn answers_equal(x: Option<&[u8]>, y: Option<&[u8]>) -> bool {
    match (x, y) {
        (Some(x), Some(y)) => x == y || equal_but_id(x, y),
        (None, None) => true,
        _ => false,
    }
}

/// How one answer compared with the recorded one (`compare_answers`).
pub(crate) struct AnswerComparison {
    pub outcome: Outcome,
    pub changes: Vec<Change>,
    /// Whether the other side's latency is reported (it answered, and the comparison used it).
    pub answered: bool,
}

/// The recorded answer `x` of exchange `i` of `a` against the other side's answer `y` to the
/// same request (`None`: no answer). Shared by `compare_tapes` (`y` read from a second tape)
/// and `check` (`y` as it arrives from the live server). `keyed`: both sides were redacted
/// with one marker key ([`one_marker_key`]).
pub(crate) fn compare_answers(
    a: &TapeIndex,
    i: usize,
    x: Option<&[u8]>,
    y: Option<&[u8]>,
    norm: &Normalizer,
    keyed: bool,
) -> AnswerComparison {
    let done = |outcome, changes, answered| AnswerComparison {
        outcome,
        changes,
        answered,
    };
    if answers_equal(x, y) {
        return done(Outcome::Same, Vec::new(), x.is_some());
    }
    match (x.and_then(body_of), y.and_then(body_of)) {
        (None, None) => done(Outcome::Same, Vec::new(), false),
        (Some(_), None) => done(Outcome::Unanswered, Vec::new(), false),
        (None, Some(body)) => done(
            Outcome::Changed,
            vec![Change {
                kind: ChangeKind::MissingResponse,
                path: "$".into(),
                recorded: None,
                observed: Some(body),
            }],
            true,
        ),
        (Some(x), Some(y)) => {
            // The same method and params on both sides (aligned by them).
            let req = &a.msgs[a.exchanges[i].request];
            let method = req.method.clone().unwrap_or_default();
            let target = if norm.has_scoped() {
                exchange_ref(a, i).target
            } else {
                None
            };
            let c = changes_with(
                &norm.normalize(x, &method, target.as_deref()),
                &norm.normalize(y, &method, target.as_deref()),
                norm.allow_reorder,
                keyed,
            );
            let outcome = if c.is_empty() {
                Outcome::Same
            } else {
                Outcome::Changed
            };
            done(outcome, c, true)
        }
    }
}

/// The `tools/list` exchanges of a conversation, in order.
pub(crate) fn tools_list_exchanges(index: &TapeIndex) -> impl Iterator<Item = usize> + '_ {
    (0..index.exchanges.len())
        .filter(|&i| index.msgs[index.exchanges[i].request].method.as_deref() == Some("tools/list"))
}

/// Every tool the `tools/list` answers of a conversation announced (pages merged), or `None`
/// when what it listed is not known: it asked for no list, a `tools/list` went unanswered (the
/// recording was cut off after it), or none was answered with a list. Such a side has no tool
/// surface to compare: its tools were not removed, they were not seen.
pub(crate) fn listed_tools(index: &TapeIndex) -> Option<std::collections::BTreeMap<String, Value>> {
    let mut results = Vec::new();
    for i in tools_list_exchanges(index) {
        let mut body = answer_body(index, i)?;
        if let Some(r) = body.get_mut("result") {
            results.push(r.take());
        }
    }
    known_tools(&results, true)
}

/// The tools of the `tools/list` `results` (pages merged) when the list is known: `all_answered`
/// (no `tools/list` went without an answer) and at least one answer was a list.
pub(crate) fn known_tools(
    results: &[Value],
    all_answered: bool,
) -> Option<std::collections::BTreeMap<String, Value>> {
    (all_answered && !results.is_empty()).then(|| surface::tools_of(results.iter()))
}

/// How the tools changed from one side to the other; nothing when either side's list is not
/// known ([`listed_tools`]).
pub(crate) fn surface_changes(
    a: Option<&std::collections::BTreeMap<String, Value>>,
    b: Option<&std::collections::BTreeMap<String, Value>>,
) -> Vec<ToolChange> {
    match (a, b) {
        (Some(a), Some(b)) => surface::compare(a, b),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unchained tape of one `tools/call` exchange per answer given.
    fn tape(dir: &std::path::Path, name: &str, answers: &[&str]) -> TapeIndex {
        let mut lines = vec![
            r#"{"type":"header","format":"mcptape","version":1,"minor":0,"created":"x","tool":"t"}"#
                .to_string(),
        ];
        for (i, answer) in answers.iter().enumerate() {
            lines.push(format!(
                r#"{{"type":"msg","seq":{},"t_us":1,"server":"default","dir":"c2s","kind":"request","id":{i},"method":"tools/call","msg":{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"t{i}"}}}}}}"#,
                2 * i + 1
            ));
            lines.push(format!(
                r#"{{"type":"msg","seq":{},"t_us":2,"server":"default","dir":"s2c","kind":"response","id":{i},"msg":{answer}}}"#,
                2 * i + 2
            ));
        }
        let path = dir.join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        TapeIndex::load(&path, None).unwrap()
    }

    #[test]
    fn equal_bytes_are_counted_the_rest_compared_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let same = r#"{"jsonrpc":"2.0","id":0,"result":{"a":1}}"#;
        // Different bytes, equal answers (the fast path does not apply; the slow one says same).
        let spaced = r#"{"jsonrpc":"2.0","id":1,"result":{ "a" : 1 }}"#;
        let a = tape(
            dir.path(),
            "a.jsonl",
            &[same, spaced.replace(" ", "").as_str(), same],
        );
        let changed = r#"{"jsonrpc":"2.0","id":2,"result":{"a":2}}"#;
        let b = tape(dir.path(), "b.jsonl", &[same, spaced, changed]);
        let norm = Normalizer::default();
        let (drift, same_count) = compare_tapes_drift(&a, &b, &norm);
        assert_eq!(same_count, 2);
        assert_eq!(drift.exchanges.len(), 1);
        assert_eq!(drift.exchanges[0].outcome, Outcome::Changed);
        assert_eq!(drift.exchanges[0].exchange.target.as_deref(), Some("t2"));
        let full = compare_tapes(&a, &b, &norm);
        let outcomes: Vec<Outcome> = full.exchanges.iter().map(|e| e.outcome).collect();
        assert_eq!(outcomes, [Outcome::Same, Outcome::Same, Outcome::Changed]);
        assert_eq!(full.exchanges[2], drift.exchanges[0]);
    }

    #[test]
    fn answers_equal_but_for_the_id_are_the_same_without_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let a = tape(
            dir.path(),
            "a.jsonl",
            &[
                r#"{"jsonrpc":"2.0","id":0,"result":{"a":1}}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#,
            ],
        );
        let b = tape(
            dir.path(),
            "b.jsonl",
            &[
                r#"{"jsonrpc":"2.0","id":"c-17","result":{"a":1}}"#,
                r#"{"jsonrpc":"2.0","id":"c-18","result":{"a":2}}"#,
            ],
        );
        assert!(equal_but_id(
            br#"{"jsonrpc":"2.0","id":0,"result":{"a":1}}"#,
            br#"{"jsonrpc":"2.0","id":"c-17","result":{"a":1}}"#
        ));
        assert!(!equal_but_id(
            br#"{"jsonrpc":"2.0","id":0,"result":{"a":1}}"#,
            br#"{"jsonrpc":"2.0","id":0,"result":{"a":2}}"#
        ));
        let full = compare_tapes(&a, &b, &Normalizer::default());
        let outcomes: Vec<Outcome> = full.exchanges.iter().map(|e| e.outcome).collect();
        assert_eq!(outcomes, [Outcome::Same, Outcome::Changed]);
        assert!(
            full.exchanges[0].other_latency_us.is_some(),
            "latency kept on the fast path"
        );
    }
}
