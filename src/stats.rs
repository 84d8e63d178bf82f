//! Per-tool statistics of a tape: for each server and each method — tools, prompts and
//! resources apart (`tools/call` by tool, `prompts/get` by prompt, `resources/read` by URI) —
//! how many calls, how many failed, their latency (p50, p95, max, from the tape's timing) and
//! their request and answer sizes. Server-initiated requests (sampling, roots, elicitation) and
//! an agent run's model calls are rows of their own. `show --stats` prints it; the HTML report
//! shows the same table.

use crate::model::calls::Call;
use crate::tape::format::MODEL_API;
use crate::tape::index::{Body, MsgMeta};
use crate::tape::{TapeError, TapeIndex};
use crate::wire::Kind;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What a row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    /// Client requests to an MCP server, answered by it.
    Mcp,
    /// Requests the server sent the client (sampling, roots, elicitation), answered by it.
    ServerRequest,
    /// An agent run's model API calls.
    Model,
}

impl RowKind {
    /// The kind as the table and the JSON name it.
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::Mcp => "mcp",
            RowKind::ServerRequest => "server-request",
            RowKind::Model => "model",
        }
    }
}

/// One call, as the statistics count it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The server's label (a model call: its label).
    pub server: String,
    /// What kind of call.
    pub kind: RowKind,
    /// The method (a model call: `provider endpoint`).
    pub method: String,
    /// The tool, prompt or resource (a model call: the model asked for).
    pub target: Option<String>,
    /// Request to answer, microseconds; None when no answer came.
    pub latency_us: Option<u64>,
    /// A JSON-RPC error, a tool result with `isError: true`, a model answer with an HTTP error
    /// status or cut off.
    pub error: bool,
    /// The request's size in bytes, as taped.
    pub request_bytes: u64,
    /// The answer's size in bytes, as taped; None when no answer came.
    pub answer_bytes: Option<u64>,
}

/// p50, p95 and max of the answered calls' latencies, microseconds (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// The median.
    pub p50: u64,
    /// The 95th percentile.
    pub p95: u64,
    /// The slowest.
    pub max: u64,
}

/// Sizes of a row's requests or answers, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Sizes {
    /// All of them together.
    pub total: u64,
    /// The mean, rounded down.
    pub mean: u64,
    /// The largest.
    pub max: u64,
}

/// One row of the table: one method (and tool, prompt or resource) of one server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsRow {
    /// The server's label.
    pub server: String,
    /// What the row counts.
    pub kind: RowKind,
    /// The method.
    pub method: String,
    /// The tool, prompt, resource URI or model; absent for methods about none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Requests made.
    pub calls: u64,
    /// Of them, answered with an error (see [`Sample::error`]).
    pub errors: u64,
    /// Of them, never answered on the tape.
    pub unanswered: u64,
    /// Over the answered calls; null when none was answered.
    pub latency_us: Option<Latency>,
    /// The requests' sizes.
    pub request_bytes: Sizes,
    /// The answers' sizes (answered calls only).
    pub answer_bytes: Sizes,
}

/// What `show --stats` prints (as a table, or this serialized with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct StatsDoc {
    /// The tape's path.
    pub tape: PathBuf,
    /// One row per server, kind, method and target, in that order.
    pub rows: Vec<StatsRow>,
    /// The servers the tape declares (not printed: for checking a `--server` asked).
    #[serde(skip)]
    pub declared: Vec<crate::tape::ServerDecl>,
    /// The labels of its message lines, then of the rows (model calls by label among them):
    /// not printed, for checking a `--server` asked.
    #[serde(skip)]
    pub labels: Vec<String>,
}

/// The tape's statistics: every MCP server on it (or only `server`), and its model calls (all
/// labels, or only `server`'s). The tape is read once for all of them: every server's
/// conversation, the labels only message lines carry (an appended live server's) among them,
/// and the model calls.
pub fn tape_stats(path: &Path, server: Option<&str>) -> Result<StatsDoc, TapeError> {
    let (tape, calls) =
        crate::model::calls::load_every(path, crate::tape::ReadOptions::default(), true)?;
    let mut samples = Vec::new();
    let mut order = Vec::new();
    for index in &tape.indexes {
        if server.is_some_and(|s| s != index.server) {
            continue;
        }
        // A tape of model calls only has no MCP conversation to count.
        let declared_mcp = tape
            .servers
            .iter()
            .any(|d| d.server == index.server && d.transport != MODEL_API);
        if index.msgs.is_empty() && !declared_mcp {
            continue;
        }
        order.push(index.server.clone());
        samples.extend(mcp_samples(index));
    }
    for call in calls {
        if server.is_some_and(|s| s != call.label) {
            continue;
        }
        if !order.contains(&call.label) {
            order.push(call.label.clone());
        }
        samples.push(model_sample(&call));
    }
    let rows = tally(&samples, &order);
    let mut labels: Vec<String> = tape.indexes.iter().map(|i| i.server.clone()).collect();
    labels.extend(rows.iter().map(|r| r.server.clone()));
    Ok(StatsDoc {
        tape: path.to_path_buf(),
        rows,
        declared: tape.servers,
        labels,
    })
}

/// A message's size as taped: its bytes for a JSON body, its string literal for a non-JSON
/// line, the line's full length for one over the size limit.
pub fn body_len(m: &MsgMeta) -> u64 {
    match m.body {
        Body::Json { len, .. } | Body::Text { len, .. } | Body::B64 { len, .. } => len.into(),
        Body::Oversize { len } => len,
    }
}

/// Whether an answer is an error: a JSON-RPC error, or a tool result that says `isError: true`.
pub fn is_error_answer(index: &TapeIndex, answer: &MsgMeta) -> bool {
    match answer.kind {
        Kind::Error => true,
        Kind::Response => index
            .read_bytes(answer)
            .is_ok_and(|b| is_error_body(answer.kind, &b)),
        _ => false,
    }
}

/// [`is_error_answer`] of an answer already read.
pub fn is_error_body(kind: Kind, bytes: &[u8]) -> bool {
    match kind {
        Kind::Error => true,
        // Most answers never mention it: parse only those that do.
        Kind::Response => {
            memchr::memmem::find(bytes, b"\"isError\"").is_some()
                && serde_json::from_slice::<serde_json::Value>(bytes)
                    .ok()
                    .and_then(|v| v.pointer("/result/isError").and_then(|e| e.as_bool()))
                    .unwrap_or(false)
        }
        _ => false,
    }
}

/// The calls of one server's conversation: the client's requests, and the server's requests
/// that the client answered (or did not).
pub fn mcp_samples(index: &TapeIndex) -> Vec<Sample> {
    let mut out = Vec::new();
    let answered = |req: usize, answer: Option<usize>, kind: RowKind, target| {
        let (rq, an) = (&index.msgs[req], answer.map(|a| &index.msgs[a]));
        Sample {
            server: index.server.clone(),
            kind,
            method: rq.method.clone().unwrap_or_default(),
            target,
            latency_us: an.map(|a| a.t_us.saturating_sub(rq.t_us)),
            error: an.is_some_and(|a| is_error_answer(index, a)),
            request_bytes: body_len(rq),
            answer_bytes: an.map(body_len),
        }
    };
    let mut server_requests = Vec::new();
    for ex in index.exchanges.iter() {
        let target = index.call_target(&index.msgs[ex.request]);
        out.push(answered(ex.request, ex.response, RowKind::Mcp, target));
        for &m in &ex.during {
            if index.msgs[m].kind == Kind::Request {
                server_requests.push((m, ex.client_answers.get(&m).copied()));
            }
        }
    }
    for s in index.standalone.iter() {
        if index.msgs[s.msg].kind == Kind::Request {
            server_requests.push((s.msg, s.client_answer));
        }
    }
    for (req, answer) in server_requests {
        out.push(answered(req, answer, RowKind::ServerRequest, None));
    }
    out
}

/// A model call as the statistics count it.
pub fn model_sample(c: &Call) -> Sample {
    let answered = c.status.is_some();
    let answer_bytes = match &c.body {
        Some(b) => b.len() as u64,
        None => c
            .events
            .iter()
            .map(|e| e.data.as_ref().map_or(0, |d| d.len() as u64))
            .sum(),
    };
    Sample {
        server: c.label.clone(),
        kind: RowKind::Model,
        method: format!("{} {}", c.provider.name(), c.endpoint),
        target: c.model.clone(),
        latency_us: if answered {
            c.total_us.or(c.ttfb_us)
        } else {
            None
        },
        error: c.cut.is_some() || c.status.is_some_and(|s| s >= 400),
        request_bytes: c.request.len() as u64,
        answer_bytes: answered.then_some(answer_bytes),
    }
}

/// The rows of `samples`: grouped by server (in `order`, then any other by name), kind, method
/// and target.
pub fn tally(samples: &[Sample], order: &[String]) -> Vec<StatsRow> {
    type Key<'a> = (usize, &'a str, RowKind, &'a str, Option<&'a str>);
    let rank = |s: &str| order.iter().position(|o| o == s).unwrap_or(order.len());
    let mut groups: BTreeMap<Key<'_>, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        let key = (
            rank(&s.server),
            s.server.as_str(),
            s.kind,
            s.method.as_str(),
            s.target.as_deref(),
        );
        groups.entry(key).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|((_, server, kind, method, target), group)| {
            let mut latencies: Vec<u64> = group.iter().filter_map(|s| s.latency_us).collect();
            latencies.sort_unstable();
            let answers: Vec<u64> = group.iter().filter_map(|s| s.answer_bytes).collect();
            let requests: Vec<u64> = group.iter().map(|s| s.request_bytes).collect();
            StatsRow {
                server: server.to_string(),
                kind,
                method: method.to_string(),
                target: target.map(str::to_string),
                calls: group.len() as u64,
                errors: group.iter().filter(|s| s.error).count() as u64,
                unanswered: group.iter().filter(|s| s.latency_us.is_none()).count() as u64,
                latency_us: (!latencies.is_empty()).then(|| Latency {
                    p50: nearest_rank(&latencies, 50),
                    p95: nearest_rank(&latencies, 95),
                    max: latencies[latencies.len() - 1],
                }),
                request_bytes: sizes(&requests),
                answer_bytes: sizes(&answers),
            }
        })
        .collect()
}

/// The `pct`th percentile of sorted, non-empty `v` by nearest rank: the smallest value with at
/// least `pct` % of the values at or below it.
pub fn nearest_rank(v: &[u64], pct: u64) -> u64 {
    let rank = (v.len() as u64 * pct).div_ceil(100).max(1);
    v[(rank - 1) as usize]
}

fn sizes(v: &[u64]) -> Sizes {
    let total: u64 = v.iter().sum();
    Sizes {
        total,
        mean: if v.is_empty() {
            0
        } else {
            total / v.len() as u64
        },
        max: v.iter().copied().max().unwrap_or(0),
    }
}

/// The table `show --stats` prints: one line per row, latencies in milliseconds, sizes in
/// bytes (mean and max).
pub fn stats_table(doc: &StatsDoc) -> String {
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    let what = |r: &StatsRow| match &r.target {
        Some(t) => format!("{} {t}", r.method),
        None => r.method.clone(),
    };
    let server_w = doc.rows.iter().map(|r| r.server.len()).max().unwrap_or(0);
    let what_w = doc.rows.iter().map(|r| what(r).chars().count()).max();
    let (server_w, what_w) = (server_w.max(6), what_w.unwrap_or(0).clamp(15, 60));
    let mut out = String::new();
    let _ = writeln!(out, "tape  {}", doc.tape.display());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:server_w$}  {:14}  {:what_w$}  {:>6}  {:>6}  {:>11}  {:>11}  {:>11}  {:>9}  {:>9}",
        "SERVER",
        "KIND",
        "METHOD / TARGET",
        "CALLS",
        "ERRORS",
        "P50",
        "P95",
        "MAX",
        "REQ MEAN",
        "ANS MEAN"
    );
    for r in &doc.rows {
        let (p50, p95, max) = match r.latency_us {
            Some(l) => (ms(l.p50), ms(l.p95), ms(l.max)),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let mut errors = r.errors.to_string();
        if r.unanswered > 0 {
            let _ = write!(errors, "+{}?", r.unanswered);
        }
        let answer = if r.calls > r.unanswered {
            crate::inspect::human_bytes(r.answer_bytes.mean)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{:server_w$}  {:14}  {:what_w$}  {:>6}  {:>6}  {:>11}  {:>11}  {:>11}  {:>9}  {:>9}",
            r.server,
            r.kind.as_str(),
            crate::inspect::truncate(&what(r), what_w),
            r.calls,
            errors,
            p50,
            p95,
            max,
            crate::inspect::human_bytes(r.request_bytes.mean),
            answer
        );
    }
    if doc.rows.iter().any(|r| r.unanswered > 0) {
        let _ = writeln!(out, "\n+N? in ERRORS: N calls never answered on the tape");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(method: &str, target: Option<&str>, latency: Option<u64>, error: bool) -> Sample {
        Sample {
            server: "default".into(),
            kind: RowKind::Mcp,
            method: method.into(),
            target: target.map(str::to_string),
            latency_us: latency,
            error,
            request_bytes: 10,
            answer_bytes: latency.map(|l| l * 2),
        }
    }

    #[test]
    fn percentiles_are_by_nearest_rank() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(nearest_rank(&v, 50), 10);
        assert_eq!(nearest_rank(&v, 95), 19);
        assert_eq!(nearest_rank(&[7], 95), 7);
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 50), 2);
    }

    #[test]
    fn rows_are_one_per_method_and_target_with_errors_and_unanswered_counted() {
        let samples = vec![
            sample("tools/call", Some("echo"), Some(100), false),
            sample("tools/call", Some("add"), Some(300), true),
            sample("tools/call", Some("echo"), Some(200), false),
            sample("tools/call", Some("echo"), None, false),
            sample("tools/list", None, Some(50), false),
        ];
        let rows = tally(&samples, &["default".into()]);
        let names: Vec<(String, Option<String>)> = rows
            .iter()
            .map(|r| (r.method.clone(), r.target.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("tools/call".into(), Some("add".into())),
                ("tools/call".into(), Some("echo".into())),
                ("tools/list".into(), None)
            ]
        );
        let echo = &rows[1];
        assert_eq!((echo.calls, echo.errors, echo.unanswered), (3, 0, 1));
        assert_eq!(
            echo.latency_us,
            Some(Latency {
                p50: 100,
                p95: 200,
                max: 200
            })
        );
        assert_eq!(
            echo.answer_bytes,
            Sizes {
                total: 600,
                mean: 300,
                max: 400
            }
        );
        assert_eq!(echo.request_bytes.total, 30);
        assert_eq!(rows[0].errors, 1);
    }

    #[test]
    fn servers_come_in_the_order_given_and_kinds_apart() {
        let mut a = sample("tools/list", None, Some(1), false);
        a.server = "zeta".into();
        let mut m = sample("anthropic messages", Some("claude"), Some(5), false);
        m.kind = RowKind::Model;
        m.server = "model".into();
        let b = sample("tools/list", None, Some(1), false);
        let rows = tally(&[m, a, b], &["zeta".into(), "default".into()]);
        let order: Vec<&str> = rows.iter().map(|r| r.server.as_str()).collect();
        assert_eq!(order, ["zeta", "default", "model"]);
    }

    #[test]
    fn a_row_without_answers_has_no_latency() {
        let rows = tally(&[sample("tools/call", Some("x"), None, false)], &[]);
        assert_eq!(rows[0].latency_us, None);
        assert_eq!(rows[0].answer_bytes, Sizes::default());
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["latency_us"], serde_json::Value::Null);
        assert_eq!(json["kind"], "mcp");
    }
}
