//! `mcptape diff`: two recordings, aligned by content, down to the first call that drifted.

use crate::compare::server_messages::MessageCount;
use crate::compare::surface::{SurfaceKind, ToolChange};
use crate::compare::{compare_tapes_drift, ExchangeComparison, ExchangeRef, Normalizer, Outcome};
use crate::model::calls::Call;
use crate::tape::index::TapeServers;
use crate::tape::{ReadOptions, TapeError, TapeIndex};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The overall answer, which is also the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Exit 0.
    Same,
    /// Exit 1: the same calls, some answered differently (or a tool schema widened).
    OutputDrift,
    /// Exit 2: calls present on one side only, tools added or removed, or a schema narrowed.
    StructuralDrift,
}

impl Verdict {
    /// The exit code `mcptape diff` gives for it: 0, 1 or 2.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Same => 0,
            Verdict::OutputDrift => 1,
            Verdict::StructuralDrift => 2,
        }
    }
}

/// What `diff` found: the verdict and everything that led to it (also the `--json` output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffReport {
    /// The first tape's path, as given.
    pub a: String,
    /// The second tape's path, as given.
    pub b: String,
    /// `--server`: the label of A's server compared (only that one; absent: every MCP server,
    /// by label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_a: Option<String>,
    /// `--server`: the label of B's server compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_b: Option<String>,
    /// The overall answer.
    pub verdict: Verdict,
    /// Exchanges of A that found a counterpart in B.
    pub compared: usize,
    /// Compared exchanges whose answers differ, in A's order.
    pub drifts: Vec<ExchangeComparison>,
    /// Calls only A made (line in A).
    pub only_in_a: Vec<ExchangeRef>,
    /// Calls only B made (line in B).
    pub only_in_b: Vec<ExchangeRef>,
    /// How the tools listed changed from A to B.
    pub tool_surface: Vec<ToolChange>,
    /// The server's requests and notifications whose number differs from A to B, by method
    /// (`recorded`: A's, `observed`: B's). Not in the verdict: log and progress messages vary
    /// in number with timing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_messages: Vec<MessageCount>,
    /// Agent runs: the first model request that diverged (absent when neither tape has model
    /// calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelDiff>,
    /// A's lines skipped as malformed (`--skip-bad-lines`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines_a: Vec<crate::tape::BadLine>,
    /// B's lines skipped as malformed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines_b: Vec<crate::tape::BadLine>,
}

/// How the model calls of two agent runs compare: by request, in order (answers of a live
/// model differ from run to run; what the agent asked is what diverges first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDiff {
    /// Model calls on A (Code Assist's setup calls not among them).
    pub calls_a: usize,
    /// Model calls on B (Code Assist's setup calls not among them).
    pub calls_b: usize,
    /// Code Assist's setup and bookkeeping calls on A (Gemini CLI signed in with Google:
    /// `loadCodeAssist`, `retrieveUserQuota`…), counted apart as `run` counts them, and not
    /// compared: how many an agent makes depends on timing, some carry a timestamp, and
    /// playback serves them by endpoint whatever their number.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub setup_a: usize,
    /// Code Assist's setup calls on B.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub setup_b: usize,
    /// The first call whose request differs, or that only one run made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<ModelDivergence>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The first model call two runs disagree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDivergence {
    /// Its position among the model calls (1-based; setup calls not counted).
    pub position: usize,
    /// Its request's tape line in A (absent: only B made it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_a: Option<u64>,
    /// Its request's tape line in B (absent: only A made it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_b: Option<u64>,
    /// The endpoint (A's, else B's).
    pub endpoint: String,
    /// B's endpoint, when it is another one (another API: Claude Code against Codex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_b: Option<String>,
    /// How the request differs (volatile fields left out), A → B.
    pub changes: Vec<crate::compare::diff_values::Change>,
}

/// The first model request two runs disagree on, or `None` when neither has model calls.
/// Code Assist's setup calls are counted, not compared.
fn model_diff(ca: &[Call], cb: &[Call]) -> Option<ModelDiff> {
    if ca.is_empty() && cb.is_empty() {
        return None;
    }
    let setup = |c: &Call| crate::model::provider::is_code_assist_setup(&c.endpoint);
    let (setup_a, setup_b) = (
        ca.iter().filter(|c| setup(c)).count(),
        cb.iter().filter(|c| setup(c)).count(),
    );
    let ca: Vec<&Call> = ca.iter().filter(|c| !setup(c)).collect();
    let cb: Vec<&Call> = cb.iter().filter(|c| !setup(c)).collect();
    let canon = |c: &Call| {
        let mut v = crate::model::volatile::canonical(&c.request).unwrap_or_else(|| {
            serde_json::Value::String(String::from_utf8_lossy(&c.request).into())
        });
        crate::wire::marker::strip_marker_hashes(&mut v);
        v
    };
    let mut first = None;
    for i in 0..ca.len().max(cb.len()) {
        let (x, y) = (ca.get(i), cb.get(i));
        let changes = match (x, y) {
            (Some(x), Some(y)) if x.endpoint == y.endpoint => {
                let (vx, vy) = (canon(x), canon(y));
                if crate::wire::marker::wildcard_eq(&vx, &vy) {
                    continue;
                }
                crate::compare::diff_values::changes(&vx, &vy, false)
            }
            _ => Vec::new(),
        };
        first = Some(ModelDivergence {
            position: i + 1,
            line_a: x.map(|c| c.line),
            line_b: y.map(|c| c.line),
            endpoint: x.or(y).map(|c| c.endpoint.clone()).unwrap_or_default(),
            endpoint_b: match (x, y) {
                (Some(x), Some(y)) if x.endpoint != y.endpoint => Some(y.endpoint.clone()),
                _ => None,
            },
            changes,
        });
        break;
    }
    Some(ModelDiff {
        calls_a: ca.len(),
        calls_b: cb.len(),
        setup_a,
        setup_b,
        first,
    })
}

/// Why two tapes could not be diffed.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// A tape could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// `--server` names no MCP server of a tape (a label a tape of several does not have, or
    /// its model API), or is malformed (exit 64).
    #[error("{0}")]
    Server(String),
}

impl crate::exit::Coded for DiffError {
    fn exit_code(&self) -> i32 {
        match self {
            DiffError::Tape(t) => t.exit_code(),
            DiffError::Server(_) => crate::exit::USAGE,
        }
    }
}

/// Compares two recordings (every MCP server of each, by label, when a tape holds several):
/// the report, and the tapes' reader warnings, each prefixed with its tape's path.
pub fn diff(
    a_path: &Path,
    b_path: &Path,
    norm: &Normalizer,
) -> Result<(DiffReport, Vec<String>), DiffError> {
    let d = diff_with(a_path, b_path, norm, ReadOptions::default(), None)?;
    Ok((d.report, d.warnings))
}

/// What [`diff_with`] found: the report, and what to say beside it on stderr.
#[derive(Debug)]
pub struct Diffed {
    /// The report.
    pub report: DiffReport,
    /// The tapes' reader warnings, each prefixed with its tape's path, each said once.
    pub warnings: Vec<String>,
    /// Tapes compared server by server whose labels have nothing in common: that no call was
    /// compared, and how `--server` compares one server of each.
    pub hint: Option<String>,
}

/// [`diff`], with how the tapes' malformed lines are treated (`--skip-bad-lines`), and the one
/// MCP server of each tape to compare (`--server`: `LABEL` or `A_LABEL:B_LABEL`), the model
/// calls of agent runs then left out. Each tape is read once, for its MCP servers whatever
/// their number and for its model calls; a warning of a tape is said once, also when A and B
/// are the same tape.
pub fn diff_with(
    a_path: &Path,
    b_path: &Path,
    norm: &Normalizer,
    read: ReadOptions,
    server: Option<&str>,
) -> Result<Diffed, DiffError> {
    // Without --server the model calls are compared too: gathered in the same read.
    let load = |path: &Path| crate::model::calls::load_every(path, read, server.is_none());
    let (a, calls_a) = load(a_path)?;
    let (b, calls_b) = load(b_path)?;
    diff_read(
        Side {
            path: a_path,
            servers: &a,
            calls: &calls_a,
        },
        Side {
            path: b_path,
            servers: &b,
            calls: &calls_b,
        },
        norm,
        server,
    )
}

/// One tape of a diff, read ([`crate::model::calls::load_every`]): where it is, the
/// conversations of its MCP servers, and its model calls (none read is none compared).
#[derive(Clone, Copy)]
pub struct Side<'a> {
    /// The tape's path.
    pub path: &'a Path,
    /// Its MCP servers' conversations.
    pub servers: &'a TapeServers,
    /// Its model calls: compared without `server`, left aside with it.
    pub calls: &'a [Call],
}

/// [`diff_with`] of tapes read already: the HTML report's (`report --diff`), which shows what it
/// read of A, and B's answers beside, without reading either again.
pub fn diff_read(
    a: Side<'_>,
    b: Side<'_>,
    norm: &Normalizer,
    server: Option<&str>,
) -> Result<Diffed, DiffError> {
    let (a_path, b_path) = (a.path, b.path);
    let (calls_a, calls_b) = (a.calls, b.calls);
    let (a, b) = (a.servers, b.servers);
    let mut warnings: Vec<String> = Vec::new();
    for (p, tape) in [(a_path, a), (b_path, b)] {
        for w in &tape.warnings {
            let w = format!("{}: {w}", p.display());
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    let mut found = Found::default();
    let mut hint = None;
    let (mut server_a, mut server_b) = (None, None);
    match server {
        // One server of each: the model calls are no server's, so not compared.
        Some(spec) => {
            let (la, lb) = asked_labels(spec, a, b)?;
            let x = server_of(a_path, a, &la)?;
            let y = server_of(b_path, b, &lb)?;
            found.add(x, y, norm, None);
            (server_a, server_b) = (Some(x.server.clone()), Some(y.server.clone()));
        }
        None => {
            let (ma, mb) = (&a.indexes, &b.indexes);
            if ma.len() <= 1 && mb.len() <= 1 {
                // One server on each side (or none): the two, whatever their labels.
                match (ma.first(), mb.first()) {
                    (Some(x), Some(y)) => found.add(x, y, norm, None),
                    (Some(x), None) => found.only_in_a.extend(refs(x, None)),
                    (None, Some(y)) => found.only_in_b.extend(refs(y, None)),
                    (None, None) => {}
                }
            } else {
                // Several: each server with the server of its label on the other tape.
                for label in labels_of_both(a, b) {
                    match (a.get(&label), b.get(&label)) {
                        (Some(x), Some(y)) => found.add(x, y, norm, Some(&label)),
                        (Some(x), None) => found.only_in_a.extend(refs(x, Some(&label))),
                        (None, Some(y)) => found.only_in_b.extend(refs(y, Some(&label))),
                        (None, None) => {}
                    }
                }
                hint = no_label_in_common(a_path, a, b_path, b);
            }
        }
    }
    let Found {
        compared,
        drifts,
        only_in_a,
        only_in_b,
        tool_surface,
        server_messages,
    } = found;
    let structural = !only_in_a.is_empty()
        || !only_in_b.is_empty()
        || tool_surface.iter().any(|t| {
            matches!(
                t.kind,
                SurfaceKind::Added | SurfaceKind::Removed | SurfaceKind::Narrowed
            )
        });
    let output = !drifts.is_empty() || tool_surface.iter().any(|t| t.kind == SurfaceKind::Widened);
    // One server of each (`server`): the model calls are no server's, so not compared.
    let model = match server {
        None => model_diff(calls_a, calls_b),
        Some(_) => None,
    };
    let model_structural = model.as_ref().is_some_and(|m| m.calls_a != m.calls_b);
    let model_output = model.as_ref().is_some_and(|m| m.first.is_some());
    let structural = structural || model_structural;
    let output = output || model_output;
    let verdict = if structural {
        Verdict::StructuralDrift
    } else if output {
        Verdict::OutputDrift
    } else {
        Verdict::Same
    };
    let report = DiffReport {
        a: a_path.display().to_string(),
        b: b_path.display().to_string(),
        server_a,
        server_b,
        verdict,
        compared,
        drifts,
        only_in_a,
        only_in_b,
        tool_surface,
        server_messages,
        model,
        skipped_lines_a: a.skipped_lines(),
        skipped_lines_b: b.skipped_lines(),
    };
    Ok(Diffed {
        report,
        warnings,
        hint,
    })
}

/// The labels `--server SPEC` asks for on A and on B: `LABEL` on both, or `A_LABEL:B_LABEL`
/// apart (split at the first colon). A label that holds a colon itself is taken whole when
/// either tape has a server of that label.
fn asked_labels(
    spec: &str,
    a: &TapeServers,
    b: &TapeServers,
) -> Result<(String, String), DiffError> {
    let has = |t: &TapeServers| t.get(spec).is_some() || t.servers.iter().any(|d| d.server == spec);
    let pair = match spec.split_once(':') {
        Some(pair) if !has(a) && !has(b) => pair,
        _ => (spec, spec),
    };
    if pair.0.is_empty() || pair.1.is_empty() {
        return Err(DiffError::Server(format!(
            "--server {spec:?} names no server: --server LABEL compares the server of that label, --server A_LABEL:B_LABEL A's and B's apart"
        )));
    }
    Ok((pair.0.to_string(), pair.1.to_string()))
}

/// The server of `tape` that `--server` compares: the one labelled `label` on a tape of several
/// MCP servers, the only one on a tape of one (whatever its label, so that a plain recording
/// of a server, labelled `default`, is compared with that server of an agent run). A label the
/// tape does not have is refused as check, play and show refuse it, the tape named; so is its
/// model API, and a tape with no MCP server at all.
fn server_of<'t>(
    path: &Path,
    tape: &'t TapeServers,
    label: &str,
) -> Result<&'t TapeIndex, DiffError> {
    let named = |why: String| DiffError::Server(format!("{}: {why}", path.display()));
    // The labels diff --server takes: those of its MCP servers' conversations.
    let labels: Vec<String> = tape.indexes.iter().map(|i| i.server.clone()).collect();
    let mcp: Vec<&str> = labels.iter().map(String::as_str).collect();
    if let Some(why) = crate::tape::format::model_api_refusal(
        label,
        &tape.servers,
        &mcp,
        "diff --server compares an MCP server's conversations",
    ) {
        return Err(named(why));
    }
    if let [only] = &tape.indexes[..] {
        return Ok(only);
    }
    if let Some(index) = tape.get(label) {
        return Ok(index);
    }
    Err(named(
        crate::tape::format::unknown_server(Some(label), &tape.servers, &labels, false)
            .unwrap_or_else(|| format!("no MCP server labelled {label}")),
    ))
}

/// The server labels to compare one by one: A's in order, then those only B has.
fn labels_of_both(a: &TapeServers, b: &TapeServers) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for i in a.indexes.iter().chain(&b.indexes) {
        if !labels.contains(&i.server) {
            labels.push(i.server.clone());
        }
    }
    labels
}

/// Tapes compared server by server whose labels have nothing in common, both holding MCP
/// servers: no call was compared, every one is on one side only ([`Diffed::hint`]), and how to
/// compare one server of each; `None` when a label is on both (or a tape has no MCP server:
/// an agent run whose servers did not start is compared as it is).
fn no_label_in_common(
    a_path: &Path,
    a: &TapeServers,
    b_path: &Path,
    b: &TapeServers,
) -> Option<String> {
    if a.indexes.is_empty()
        || b.indexes.is_empty()
        || a.indexes.iter().any(|i| b.get(&i.server).is_some())
    {
        return None;
    }
    let joined = |t: &TapeServers, sep: &str| {
        t.indexes
            .iter()
            .map(|i| i.server.as_str())
            .collect::<Vec<_>>()
            .join(sep)
    };
    let labels = |t: &TapeServers| joined(t, ", ");
    let either = |t: &TapeServers| joined(t, " or ");
    let how = match (a.indexes.len(), b.indexes.len()) {
        (_, 1) => format!(
            "--server LABEL ({}) compares that server of {} with the only one of {}",
            either(a),
            a_path.display(),
            b_path.display()
        ),
        (1, _) => format!(
            "--server LABEL ({}) compares the only server of {} with that server of {}",
            either(b),
            a_path.display(),
            b_path.display()
        ),
        _ => "--server A_LABEL:B_LABEL compares A's server A_LABEL with B's B_LABEL".to_string(),
    };
    Some(format!(
        "no MCP server label is on both tapes ({}: {}; {}: {}), so no call was compared: each server's calls are on one side only. {how}",
        a_path.display(),
        labels(a),
        b_path.display(),
        labels(b),
    ))
}

/// What the comparisons of a diff's servers found, together.
#[derive(Default)]
struct Found {
    compared: usize,
    drifts: Vec<ExchangeComparison>,
    only_in_a: Vec<ExchangeRef>,
    only_in_b: Vec<ExchangeRef>,
    tool_surface: Vec<ToolChange>,
    server_messages: Vec<MessageCount>,
}

impl Found {
    /// One server's conversations compared (`label`: named in what is reported, in a diff of
    /// several servers).
    fn add(&mut self, a: &TapeIndex, b: &TapeIndex, norm: &Normalizer, label: Option<&str>) {
        let named = |mut e: ExchangeRef| {
            e.server = label.map(str::to_string);
            e
        };
        // Only drifts are reported: the exchanges answered the same are counted, not listed.
        let (cmp, same) = compare_tapes_drift(a, b, norm);
        self.compared += same;
        for mut e in cmp.exchanges {
            e.exchange = named(e.exchange);
            match e.outcome {
                Outcome::Absent => self.only_in_a.push(e.exchange),
                Outcome::Same => self.compared += 1,
                Outcome::Changed | Outcome::Unanswered => {
                    self.compared += 1;
                    self.drifts.push(e)
                }
            }
        }
        self.only_in_b
            .extend(cmp.only_in_other.into_iter().map(named));
        self.tool_surface
            .extend(cmp.tool_surface.into_iter().map(|mut t| {
                t.server = label.map(str::to_string);
                t
            }));
        self.server_messages
            .extend(cmp.server_messages.into_iter().map(|mut c| {
                c.server = label.map(str::to_string);
                c
            }));
    }
}

/// Every exchange of a server only one tape has (named with its label in a diff of several).
fn refs(index: &TapeIndex, label: Option<&str>) -> Vec<ExchangeRef> {
    (0..index.exchanges.len())
        .map(|i| {
            let mut e = crate::compare::tapes::exchange_ref(index, i);
            e.server = label.map(str::to_string);
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
    use crate::wire::Dir;
    use serde_json::{json, Map};
    use std::time::Instant;

    /// A tape of an agent run with one model request per body in `asks`.
    fn run_tape(path: &std::path::Path, asks: &[serde_json::Value]) {
        let calls: Vec<_> = asks.iter().map(|a| ("messages", a.clone())).collect();
        calls_tape(path, &calls);
    }

    /// A tape of an agent run with one call per (endpoint, request body) in `calls`: the
    /// Anthropic API's `messages`, or Code Assist's `/v1internal:…` (provider `other`, as
    /// the proxy tapes its setup calls).
    fn calls_tape(path: &std::path::Path, calls: &[(&str, serde_json::Value)]) {
        let mut w = TapeWriter::create(path, WriteOptions::redacted()).unwrap();
        w.declare_server(ServerDecl::model("model", "http://127.0.0.1:1".into()))
            .unwrap();
        for (i, (endpoint, ask)) in calls.iter().enumerate() {
            let (provider, url_path) = match *endpoint {
                "messages" => ("anthropic", "/v1/messages"),
                other => ("other", other),
            };
            let mut f = Map::new();
            f.insert("provider".into(), json!(provider));
            f.insert("endpoint".into(), json!(endpoint));
            let http = json!({"method": "POST", "path": url_path});
            let body = ask.to_string();
            let n = i as u64 + 1;
            w.model(
                "model",
                Dir::C2S,
                n,
                "request",
                &f,
                Some(body.as_bytes()),
                Some(&http),
                Instant::now(),
            );
            let answer =
                json!({"content": [{"type": "text", "text": format!("answer {n}")}]}).to_string();
            let http = json!({"status": 200, "content_type": "application/json"});
            w.model(
                "model",
                Dir::S2C,
                n,
                "response",
                &Map::new(),
                Some(answer.as_bytes()),
                Some(&http),
                Instant::now(),
            );
        }
        w.finish(None, Some("done".into())).unwrap();
    }

    fn ask(text: &str, session: &str) -> serde_json::Value {
        json!({"model": "m", "metadata": {"user_id": session},
               "messages": [{"role": "user", "content": text}]})
    }

    #[test]
    fn two_runs_name_the_first_model_request_that_diverged() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a.jsonl"),
            dir.path().join("b.jsonl"),
            dir.path().join("c.jsonl"),
        );
        run_tape(&a, &[ask("hi", "s1"), ask("list files", "s1")]);
        // Another session (a volatile field) and the same questions: the same run.
        run_tape(&b, &[ask("hi", "s2"), ask("list files", "s2")]);
        // The second question differs.
        run_tape(&c, &[ask("hi", "s3"), ask("delete files", "s3")]);
        let norm = crate::compare::Normalizer::default();
        let (same, _) = super::diff(&a, &b, &norm).unwrap();
        assert_eq!(same.verdict, super::Verdict::Same);
        assert_eq!(same.model.as_ref().map(|m| m.calls_a), Some(2));
        let (drift, _) = super::diff(&a, &c, &norm).unwrap();
        assert_eq!(drift.verdict, super::Verdict::OutputDrift);
        let first = drift.model.unwrap().first.unwrap();
        assert_eq!(first.position, 2);
        assert_eq!(first.changes[0].path, "$.messages[0].content");
        assert_eq!((first.line_a, first.line_b), (Some(5), Some(5)));
    }

    /// A model line that does not read is a bad line of the one read diff makes of a tape, as
    /// it was of the second read, for the model calls alone: the diff refused (exit 65), or,
    /// with `--skip-bad-lines`, the line skipped, reported, and the other calls compared.
    #[test]
    fn a_model_line_that_does_not_read_is_a_bad_line_of_the_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        run_tape(&a, &[ask("hi", "s1")]);
        let text = std::fs::read_to_string(&a).unwrap();
        let (head, end) = text.trim_end().rsplit_once('\n').unwrap();
        let bad = head.lines().count() as u64 + 1;
        std::fs::write(
            &a,
            format!("{head}\n{{\"type\":\"model\",\"server\":7}}\n{end}\n"),
        )
        .unwrap();
        let norm = crate::compare::Normalizer::default();
        let e = super::diff(&a, &a, &norm).unwrap_err();
        assert!(matches!(e, super::DiffError::Tape(_)), "{e}");
        assert_eq!(crate::exit::Coded::exit_code(&e), 65, "{e}");
        let skip = super::ReadOptions {
            skip_bad_lines: true,
            ..super::ReadOptions::default()
        };
        let d = super::diff_with(&a, &a, &norm, skip, None).unwrap();
        let skipped: Vec<u64> = d.report.skipped_lines_a.iter().map(|b| b.line).collect();
        assert_eq!(skipped, [bad]);
        assert_eq!(d.report.model.map(|m| m.calls_a), Some(1));
    }

    /// Code Assist's setup calls (Gemini CLI signed in with Google) are counted apart from the
    /// model requests and not compared, as `run` and playback treat them: two runs that asked
    /// their quota a different number of times, with another metrics timestamp, made the same
    /// model requests. (Before, they were model requests: 6 against 5, a structural drift.)
    #[test]
    fn code_assist_setup_calls_are_counted_apart_and_not_compared() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a.jsonl"),
            dir.path().join("b.jsonl"),
            dir.path().join("c.jsonl"),
        );
        let load = (
            "/v1internal:loadCodeAssist",
            json!({"metadata": {"pluginType": "GEMINI"}}),
        );
        let quota = ("/v1internal:retrieveUserQuota", json!({"project": "p"}));
        let metrics = |t: &str| {
            (
                "/v1internal:recordCodeAssistMetrics",
                json!({"timestamp": t}),
            )
        };
        let turn = |text: &str| ("messages", ask(text, "s1"));
        calls_tape(
            &a,
            &[
                load.clone(),
                quota.clone(),
                quota.clone(),
                turn("hi"),
                metrics("2026-01-01T00:00:00Z"),
                turn("list files"),
            ],
        );
        calls_tape(
            &b,
            &[
                load.clone(),
                quota.clone(),
                turn("hi"),
                metrics("2026-01-02T00:00:00Z"),
                turn("list files"),
            ],
        );
        calls_tape(&c, &[load, quota, turn("hi"), turn("delete files")]);
        let norm = crate::compare::Normalizer::default();
        let (same, _) = super::diff(&a, &b, &norm).unwrap();
        assert_eq!(same.verdict, super::Verdict::Same, "{same:?}");
        let m = same.model.unwrap();
        assert_eq!(
            (m.calls_a, m.calls_b, m.setup_a, m.setup_b),
            (2, 2, 4, 3),
            "{m:?}"
        );
        assert_eq!(m.first, None);
        let (drift, _) = super::diff(&a, &c, &norm).unwrap();
        assert_eq!(drift.verdict, super::Verdict::OutputDrift);
        let first = drift.model.unwrap().first.unwrap();
        // The second model request, not the sixth call on the tape.
        assert_eq!((first.position, first.endpoint.as_str()), (2, "messages"));
        assert_eq!(first.changes[0].path, "$.messages[0].content");
    }

    /// A tape by hand: a stdio server per label (a model API for `model`), each answering a
    /// `ping`.
    fn labelled_tape(path: &std::path::Path, labels: &[&str]) {
        let mut lines = vec![
            json!({"type": "header", "format": "mcptape", "version": 1, "minor": 0, "created": "2026-01-01T00:00:00Z", "tool": "test"}),
        ];
        for l in labels {
            let transport = if *l == "model" { "model_api" } else { "stdio" };
            lines.push(json!({"type": "server", "server": l, "transport": transport, "t_us": 0}));
        }
        for (i, l) in labels.iter().filter(|l| **l != "model").enumerate() {
            let seq = 2 * i as u64;
            lines.push(json!({"type": "msg", "seq": seq + 1, "t_us": seq, "server": l, "dir": "c2s", "kind": "request", "id": 1, "method": "ping", "msg": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}));
            lines.push(json!({"type": "msg", "seq": seq + 2, "t_us": seq + 1, "server": l, "dir": "s2c", "kind": "response", "id": 1, "msg": {"jsonrpc": "2.0", "id": 1, "result": {}}}));
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(path, text).unwrap();
    }

    fn servers_of(path: &std::path::Path) -> super::TapeServers {
        super::TapeIndex::load_every_with(path, super::ReadOptions::default()).unwrap()
    }

    /// `--server SPEC`: one label for both tapes, or `A_LABEL:B_LABEL` split at the first
    /// colon, unless a tape has a server labelled with the whole of it; an empty side is
    /// refused (exit 64), never taken for "any".
    #[test]
    fn server_spec_is_a_label_or_a_pair_of_labels() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        labelled_tape(&a, &["fs", "web"]);
        labelled_tape(&b, &["files", "web:search"]);
        let (a, b) = (servers_of(&a), servers_of(&b));
        let asked = |spec: &str| super::asked_labels(spec, &a, &b);
        let pair = |x: &str, y: &str| (x.to_string(), y.to_string());
        assert_eq!(asked("fs").unwrap(), pair("fs", "fs"));
        assert_eq!(asked("fs:files").unwrap(), pair("fs", "files"));
        assert_eq!(asked("web:web:search").unwrap(), pair("web", "web:search"));
        assert_eq!(
            asked("web:search").unwrap(),
            pair("web:search", "web:search")
        );
        for spec in ["", "fs:", ":files"] {
            let e = asked(spec).unwrap_err();
            assert!(matches!(e, super::DiffError::Server(_)), "{spec:?}: {e}");
            assert_eq!(crate::exit::Coded::exit_code(&e), crate::exit::USAGE);
        }
    }

    /// Tapes compared server by server with no label in common get a hint naming `--server`
    /// (and the labels to pick from, on the side of several); a label in common, or a side
    /// without MCP servers (an agent run whose servers never started), gets none.
    #[test]
    fn tapes_with_no_label_in_common_get_a_hint_naming_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        labelled_tape(&path("run.jsonl"), &["model", "fs", "web"]);
        labelled_tape(&path("rec.jsonl"), &["default"]);
        labelled_tape(&path("other.jsonl"), &["files", "browser"]);
        labelled_tape(&path("fs.jsonl"), &["fs"]);
        labelled_tape(&path("none.jsonl"), &["model"]);
        let norm = crate::compare::Normalizer::default();
        let hint = |x: &str, y: &str| {
            let d = super::diff_with(
                &path(x),
                &path(y),
                &norm,
                super::ReadOptions::default(),
                None,
            )
            .unwrap();
            d.hint
        };
        let h = hint("run.jsonl", "rec.jsonl").expect("a hint");
        assert!(h.contains("(fs or web) compares that server of "), "{h}");
        assert!(h.contains(": fs, web; "), "{h}");
        let h = hint("rec.jsonl", "run.jsonl").expect("a hint");
        assert!(
            h.contains("(fs or web) compares the only server of "),
            "{h}"
        );
        let h = hint("run.jsonl", "other.jsonl").expect("a hint");
        assert!(h.contains("--server A_LABEL:B_LABEL"), "{h}");
        assert_eq!(hint("run.jsonl", "fs.jsonl"), None);
        assert_eq!(hint("run.jsonl", "none.jsonl"), None);
        // Asked for one server, nothing to hint.
        let d = super::diff_with(
            &path("run.jsonl"),
            &path("rec.jsonl"),
            &norm,
            super::ReadOptions::default(),
            Some("web"),
        )
        .unwrap();
        assert_eq!(d.hint, None);
        assert_eq!(d.report.verdict, super::Verdict::Same);
        assert_eq!(
            (d.report.server_a.as_deref(), d.report.server_b.as_deref()),
            (Some("web"), Some("default"))
        );
    }
}
