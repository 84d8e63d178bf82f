//! What the HTML report shows, gathered from a tape: one item per call, notification and stray
//! line (bodies verbatim), the per-tool statistics, and the drift of a check or a diff. It is
//! embedded in the page as JSON and rendered by the page's script; the fields are named in
//! `docs/report.md`.

use crate::check::{CheckReport, Status};
use crate::compare::{Change, ExchangeComparison, Outcome};
use crate::diff::DiffReport;
use crate::model::calls::Call;
use crate::stats::{self, RowKind, Sample, StatsRow};
use crate::tape::format::MODEL_API;
use crate::tape::index::TapeServers;
use crate::tape::{ReadOptions, TapeError, TapeIndex};
use crate::wire::params::{params_of, target_of};
use crate::wire::Kind;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The most of one body the report embeds: a multi-megabyte answer would make the page slow to
/// open for one message; the rest is on the tape, at the line the report names.
pub const MAX_BODY: usize = 256 * 1024;

/// The report's data (the page's embedded JSON).
#[derive(Debug, Serialize)]
pub struct ReportData {
    /// The format of this document (bumped when a field changes meaning).
    pub v: u32,
    /// The tape's path.
    pub tape: String,
    /// When it was recorded (the header's `created`).
    pub created: String,
    /// The program that wrote it.
    pub tool: String,
    /// The lanes of the timeline: each MCP server, then each model label.
    pub lanes: Vec<Lane>,
    /// The end of the session, microseconds since the recording started.
    pub end_us: u64,
    /// Every call, notification and stray line, by time.
    pub items: Vec<Item>,
    /// How many of the model items are Code Assist's setup calls (Gemini CLI signed in with
    /// Google): the header counts them apart from the model calls.
    pub model_setup: usize,
    /// The per-tool statistics.
    pub stats: Vec<StatsRow>,
    /// The reader's warnings.
    pub warnings: Vec<String>,
    /// What `--check` or `--diff` found, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSummary>,
}

/// One lane of the timeline.
#[derive(Debug, Serialize)]
pub struct Lane {
    /// The server's (or model API's) label.
    pub label: String,
    /// Its transport (`stdio`, `streamable_http`, `model_api`).
    pub transport: String,
    /// How it was reached, for humans.
    pub desc: String,
}

/// One row of the list: a call with its answer, a notification, a stray line.
#[derive(Debug, Serialize)]
pub struct Item {
    /// `x` client request, `s` server→client request, `n` notification, `r` another line
    /// (not JSON-RPC, a batch, an answer to no request), `m` model call.
    pub k: &'static str,
    /// The lane (index into `lanes`).
    pub s: usize,
    /// Direction of the first message: `c2s` or `s2c`.
    pub dir: &'static str,
    /// The method (a model call: `provider endpoint`).
    pub m: String,
    /// The tool, prompt, resource URI, or model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub g: Option<String>,
    /// Start, microseconds since the recording started.
    pub t: u64,
    /// Duration to the answer, microseconds; null when no answer came (or none is due).
    pub d: Option<u64>,
    /// 0 fine, 1 an error answer (JSON-RPC error, `isError`, HTTP error, cut stream), 2 no
    /// answer.
    pub e: u8,
    /// Tape line of the request (or of the message), and of its answer.
    pub l: Vec<u64>,
    /// The JSON-RPC id, as on the wire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The request (or message), verbatim; cut at [`MAX_BODY`].
    pub q: String,
    /// The answer, verbatim; cut at [`MAX_BODY`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a: Option<String>,
    /// For a message sent while a request was open: that request's tape line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p: Option<u64>,
    /// How it drifted (`--check`, `--diff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dr: Option<Drift>,
}

/// How one exchange drifted.
#[derive(Debug, Serialize)]
pub struct Drift {
    /// `regression`, `missing` (check); `changed`, `unanswered`, `absent` (diff); `diverged`
    /// (a model request, diff).
    pub o: String,
    /// The differences, each with both values as JSON text.
    pub c: Vec<DriftChange>,
    /// Why an answer is missing (check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub det: Option<String>,
    /// The other side's tape line (diff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ol: Option<u64>,
    /// The other side's answer, verbatim (diff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oa: Option<String>,
}

/// One difference.
#[derive(Debug, Serialize)]
pub struct DriftChange {
    /// Its kind (`value-change`, …).
    pub kind: String,
    /// Its JSONPath.
    pub path: String,
    /// The recorded value as JSON text; absent when it was absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
    /// The other side's value as JSON text; absent when it was absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<String>,
}

/// What the drift source said overall.
#[derive(Debug, Serialize)]
pub struct DriftSummary {
    /// `check` or `diff`.
    pub source: &'static str,
    /// One line: the grade, or the verdict.
    pub title: String,
    /// Calls of the other side with no counterpart here (diff), described.
    pub only_other: Vec<String>,
}

/// Why the report could not be made from what it was given.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// `--check FILE` could not be read.
    #[error("reading the check report {}", path.display())]
    CheckIo {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// `--check FILE` is not a check report (`mcptape check --json`).
    #[error("{} is not a check report (mcptape check --json FILE): {message}", path.display())]
    CheckMalformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, with serde's line and column.
        message: String,
    },
    /// The check report names an exchange this tape does not have: it is another tape's.
    #[error(
        "{}: the check report's exchange {what} at tape line {line} is not a request on {} \
         (a report of another tape?)",
        report.display(),
        tape.display()
    )]
    CheckNotOfTape {
        /// The check report.
        report: PathBuf,
        /// The tape.
        tape: PathBuf,
        /// The exchange, named.
        what: String,
        /// Its line.
        line: u64,
    },
}

impl crate::exit::Coded for ReportError {
    fn exit_code(&self) -> i32 {
        match self {
            ReportError::Tape(t) => t.exit_code(),
            ReportError::CheckIo { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound => {
                crate::exit::NO_INPUT
            }
            ReportError::CheckIo { .. } => crate::exit::IO_ERR,
            ReportError::CheckMalformed { .. } | ReportError::CheckNotOfTape { .. } => {
                crate::exit::DATA_ERR
            }
        }
    }
}

/// Reads `check --json`'s report for `--check FILE`.
pub fn read_check_report(path: &Path) -> Result<CheckReport, ReportError> {
    let text = std::fs::read(path).map_err(|cause| ReportError::CheckIo {
        path: path.to_path_buf(),
        cause,
    })?;
    serde_json::from_slice(&text).map_err(|e| ReportError::CheckMalformed {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The body text, cut at [`MAX_BODY`] (on a character boundary) with a note of the rest.
fn body_text(bytes: Vec<u8>, line: u64) -> String {
    let mut s = String::from_utf8(bytes).unwrap_or_else(|e| {
        // Not UTF-8 (taped as base64): shown lossily; the tape has the bytes.
        String::from_utf8_lossy(e.as_bytes()).into_owned()
    });
    if s.len() > MAX_BODY {
        let total = s.len();
        let mut cut = MAX_BODY;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(&format!(
            "\n… cut: {total} bytes in all, the whole message is on tape line {line}"
        ));
    }
    s
}

fn read_body(index: &TapeIndex, i: usize) -> String {
    let m = &index.msgs[i];
    match index.read_bytes(m) {
        Ok(b) => body_text(b, m.line),
        Err(e) => format!("(not shown: {e})"),
    }
}

/// A message's bytes, read once for everything the report wants of them.
fn read_raw(index: &TapeIndex, i: usize) -> Result<Vec<u8>, String> {
    index
        .read_bytes(&index.msgs[i])
        .map_err(|e| format!("(not shown: {e})"))
}

fn dir_name(d: crate::wire::Dir) -> &'static str {
    match d {
        crate::wire::Dir::C2S => "c2s",
        crate::wire::Dir::S2C => "s2c",
    }
}

/// The items of one server's conversation, on lane `lane`, and its calls for the statistics
/// (each body read once, for both).
fn mcp_items(index: &TapeIndex, lane: usize, out: &mut Vec<Item>, samples: &mut Vec<Sample>) {
    // What each message is part of: an exchange's answer, or a client's answer to a server
    // request, are shown with their request, not as rows of their own.
    let mut part_of = vec![false; index.msgs.len()];
    let mut parent: HashMap<usize, u64> = HashMap::new();
    let mut client_answer: HashMap<usize, usize> = HashMap::new();
    for ex in index.exchanges.iter() {
        if let Some(r) = ex.response {
            part_of[r] = true;
        }
        let line = index.msgs[ex.request].line;
        for &m in &ex.during {
            parent.insert(m, line);
        }
        for (&req, &answer) in &ex.client_answers {
            part_of[answer] = true;
            client_answer.insert(req, answer);
        }
    }
    for s in index.standalone.iter() {
        if let Some(answer) = s.client_answer {
            part_of[answer] = true;
            client_answer.insert(s.msg, answer);
        }
    }
    let mut exchange_of: HashMap<usize, usize> = HashMap::new();
    for (n, ex) in index.exchanges.iter().enumerate() {
        exchange_of.insert(ex.request, n);
    }
    for (i, m) in index.msgs.iter().enumerate() {
        if part_of[i] {
            continue;
        }
        let raw = read_raw(index, i);
        let mut item = Item {
            k: "r",
            s: lane,
            dir: dir_name(m.dir),
            m: m.method.clone().unwrap_or_default(),
            g: None,
            t: m.t_us,
            d: None,
            e: 0,
            l: vec![m.line],
            id: m.id.clone(),
            q: String::new(),
            a: None,
            p: parent.get(&i).copied(),
            dr: None,
        };
        let answer = if let Some(&n) = exchange_of.get(&i) {
            item.k = "x";
            let params = raw.as_deref().ok().and_then(params_of);
            item.g = target_of(m.method.as_deref(), params.as_ref());
            index.exchanges[n].response
        } else if m.kind == Kind::Request {
            item.k = "s";
            client_answer.get(&i).copied()
        } else {
            if m.kind == Kind::Notification {
                item.k = "n";
            } else {
                item.m = m.kind.as_str().to_string();
            }
            item.q = raw.map_or_else(|e| e, |b| body_text(b, m.line));
            out.push(item);
            continue;
        };
        item.q = raw.map_or_else(|e| e, |b| body_text(b, m.line));
        let mut sample = Sample {
            server: index.server.clone(),
            kind: if item.k == "x" {
                RowKind::Mcp
            } else {
                RowKind::ServerRequest
            },
            method: item.m.clone(),
            target: item.g.clone(),
            latency_us: None,
            error: false,
            request_bytes: stats::body_len(m),
            answer_bytes: None,
        };
        match answer {
            Some(a) => {
                let am = &index.msgs[a];
                item.d = Some(am.t_us.saturating_sub(m.t_us));
                let bytes = read_raw(index, a);
                let error = bytes
                    .as_deref()
                    .is_ok_and(|b| stats::is_error_body(am.kind, b));
                item.e = u8::from(error);
                item.l.push(am.line);
                item.a = Some(bytes.map_or_else(|e| e, |b| body_text(b, am.line)));
                sample.latency_us = item.d;
                sample.error = error;
                sample.answer_bytes = Some(stats::body_len(am));
            }
            None => item.e = 2,
        }
        samples.push(sample);
        out.push(item);
    }
}

/// A model call's item, on lane `lane`.
fn model_item(c: &Call, lane: usize) -> Item {
    let sample = stats::model_sample(c);
    let answer = match (&c.body, c.events.is_empty()) {
        (Some(b), _) => Some(body_text(b.clone(), c.answer_line.unwrap_or(c.line))),
        (None, false) => {
            // A stream: its events' data, one a line, as the client read them.
            let data: Vec<&str> = c.events.iter().filter_map(|e| e.data.as_deref()).collect();
            Some(body_text(
                data.join("\n").into_bytes(),
                c.answer_line.unwrap_or(c.line),
            ))
        }
        (None, true) => None,
    };
    let mut l = vec![c.line];
    l.extend(c.answer_line);
    Item {
        k: "m",
        s: lane,
        dir: "c2s",
        m: sample.method,
        g: sample.target,
        t: c.t_us,
        d: sample.latency_us,
        e: if sample.latency_us.is_none() {
            2
        } else {
            u8::from(sample.error)
        },
        l,
        id: Some(c.n.to_string()),
        q: body_text(c.request.clone(), c.line),
        a: answer,
        p: None,
        dr: None,
    }
}

/// Everything the report shows of the tape at `path`, read once, model calls included.
pub fn gather(path: &Path) -> Result<ReportData, ReportError> {
    let (tape, calls) = crate::model::calls::load_every(path, ReadOptions::default(), true)?;
    Ok(gather_read(path, &tape, &calls))
}

/// [`gather`] of the tape at `path` read already ([`crate::model::calls::load_every`], its
/// model calls included): `report --diff` reads it once, for the page and the diff.
pub fn gather_read(path: &Path, tape: &TapeServers, calls: &[Call]) -> ReportData {
    let indexes = &tape.indexes;
    let first = indexes.first();
    let mut lanes = Vec::new();
    let mut items = Vec::new();
    let mut samples = Vec::new();
    let mut warnings = Vec::new();
    let mut end_us = 0;
    for index in indexes {
        let desc = index
            .servers
            .iter()
            .find(|d| d.server == index.server)
            .map(|d| (d.transport.clone(), crate::inspect::describe_server(d)))
            .unwrap_or_default();
        lanes.push(Lane {
            label: index.server.clone(),
            transport: desc.0,
            desc: desc.1,
        });
        mcp_items(index, lanes.len() - 1, &mut items, &mut samples);
        end_us = end_us.max(index.end.as_ref().map_or(0, |e| e.t_us));
        end_us = end_us.max(index.msgs.last().map_or(0, |m| m.t_us));
    }
    warnings.extend(tape.warnings.iter().map(|w| w.to_string()));
    for c in calls {
        let lane = match lanes.iter().position(|l| l.label == c.label) {
            Some(n) => n,
            None => {
                let decl = tape.servers.iter().find(|d| d.server == c.label);
                lanes.push(Lane {
                    label: c.label.clone(),
                    transport: MODEL_API.into(),
                    desc: decl
                        .and_then(|d| d.url.clone())
                        .unwrap_or_else(|| "model API".into()),
                });
                lanes.len() - 1
            }
        };
        items.push(model_item(c, lane));
        samples.push(stats::model_sample(c));
        end_us = end_us.max(c.t_us + c.total_us.unwrap_or(0));
    }
    items.sort_by_key(|i| (i.t, i.l[0]));
    let order: Vec<String> = lanes.iter().map(|l| l.label.clone()).collect();
    let (tape_header, created) = match first {
        Some(i) => (i.header.tool.clone(), i.header.created.clone()),
        None => (String::new(), String::new()),
    };
    ReportData {
        v: 1,
        tape: path.display().to_string(),
        created,
        tool: tape_header,
        lanes,
        end_us,
        model_setup: calls
            .iter()
            .filter(|c| crate::model::provider::is_code_assist_setup(&c.endpoint))
            .count(),
        items,
        stats: stats::tally(&samples, &order),
        warnings,
        drift: None,
    }
}

fn changes_of(c: &[Change]) -> Vec<DriftChange> {
    let text = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string());
    c.iter()
        .map(|c| DriftChange {
            kind: c.kind.as_str().to_string(),
            path: c.path.clone(),
            recorded: text(&c.recorded),
            observed: text(&c.observed),
        })
        .collect()
}

/// Where each client request is among the items, by its tape line.
fn requests_by_line(data: &ReportData) -> HashMap<u64, usize> {
    data.items
        .iter()
        .enumerate()
        .filter(|(_, i)| i.k == "x")
        .map(|(n, i)| (i.l[0], n))
        .collect()
}

/// Marks what `check --json`'s report (at `report_path`) found on the data's exchanges.
pub fn mark_check(
    data: &mut ReportData,
    report: &CheckReport,
    report_path: &Path,
) -> Result<(), ReportError> {
    let at = requests_by_line(data);
    for e in &report.exchanges {
        let tape = PathBuf::from(&data.tape);
        let found = at.get(&e.exchange.line).map(|&n| &mut data.items[n]);
        let Some(item) = found.filter(|i| i.m == e.exchange.method) else {
            return Err(ReportError::CheckNotOfTape {
                report: report_path.to_path_buf(),
                tape,
                what: e.exchange.describe(60),
                line: e.exchange.line,
            });
        };
        if e.status == Status::Pass {
            continue;
        }
        item.dr = Some(Drift {
            o: match e.status {
                Status::Missing => "missing",
                Status::Unrecorded => "not on the tape",
                _ => "regression",
            }
            .into(),
            c: changes_of(&e.changes),
            det: e.detail.clone(),
            ol: None,
            oa: None,
        });
    }
    data.drift = Some(DriftSummary {
        source: "check",
        title: format!(
            "check of {}: grade {} · {:.1} / 100 · {} of {} exchanges drifted · gate {}",
            report.server,
            report.grade.as_str(),
            report.score,
            report.regression_count(),
            report.exchanges.len(),
            if report.gate.passed {
                "passed"
            } else {
                "failed"
            }
        ),
        only_other: Vec::new(),
    });
    Ok(())
}

/// Marks what `diff` found between this tape (A) and B, whose answers are shown beside: `b`, B's
/// servers as the diff read them.
pub fn mark_diff(data: &mut ReportData, report: &DiffReport, b: &TapeServers) {
    let b_indexes = &b.indexes;
    // B's answers by their request's tape line.
    let mut in_b: HashMap<u64, (usize, usize)> = HashMap::new();
    for (n, idx) in b_indexes.iter().enumerate() {
        for ex in idx.exchanges.iter() {
            if let Some(r) = ex.response {
                in_b.insert(idx.msgs[ex.request].line, (n, r));
            }
        }
    }
    let answer_in_b = |line: u64| {
        let &(n, r) = in_b.get(&line)?;
        Some(read_body(&b_indexes[n], r))
    };
    let at = requests_by_line(data);
    let mut mark = |e: &ExchangeComparison, o: &str| {
        let oa = e.other_line.and_then(answer_in_b);
        if let Some(item) = at.get(&e.exchange.line).map(|&n| &mut data.items[n]) {
            item.dr = Some(Drift {
                o: o.into(),
                c: changes_of(&e.changes),
                det: None,
                ol: e.other_line,
                oa,
            });
        }
    };
    for e in &report.drifts {
        mark(
            e,
            match e.outcome {
                Outcome::Unanswered => "unanswered",
                _ => "changed",
            },
        );
    }
    for r in &report.only_in_a {
        let e = ExchangeComparison {
            exchange: r.clone(),
            outcome: Outcome::Absent,
            other_line: None,
            changes: Vec::new(),
            latency_us: None,
            other_latency_us: None,
        };
        mark(&e, "absent");
    }
    if let Some(first) = report.model.as_ref().and_then(|m| m.first.as_ref()) {
        if let Some(item) = data
            .items
            .iter_mut()
            .find(|i| i.k == "m" && first.line_a.is_some_and(|l| i.l[0] == l))
        {
            item.dr = Some(Drift {
                o: "diverged".into(),
                c: changes_of(&first.changes),
                det: Some("the first model request the two runs disagree on".into()),
                ol: first.line_b,
                oa: None,
            });
        }
    }
    let verdict = match report.verdict {
        crate::diff::Verdict::Same => "same",
        crate::diff::Verdict::OutputDrift => "output drift",
        crate::diff::Verdict::StructuralDrift => "structural drift",
    };
    // `--server`: the one server of each compared, named (the page holds all of TAPE's).
    let against = match (&report.server_a, &report.server_b) {
        (Some(a), Some(b)) => format!("diff of server {a} against {} server {b}", report.b),
        _ => format!("diff against {}", report.b),
    };
    data.drift = Some(DriftSummary {
        source: "diff",
        title: format!(
            "{against}: {verdict} · {} compared · {} drifted · {} only here · {} only there",
            report.compared,
            report.drifts.len(),
            report.only_in_a.len(),
            report.only_in_b.len()
        ),
        only_other: report
            .only_in_b
            .iter()
            .map(|r| format!("{} (line {})", r.describe(60), r.line))
            .collect(),
    });
}
