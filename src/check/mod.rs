//! `mcptape check`: replay the recorded client side against a live server and grade how its
//! answers differ from the recording.

pub mod driver;
pub mod fill;
pub mod grade;
pub mod http_driver;
mod observe;
pub mod report;

pub use report::{CheckReport, CheckedExchange, Gate, Grade, LatencyRule, Status};

use crate::compare::{Change, ChangeKind, Normalizer, Outcome};
use crate::tape::{TapeError, TapeIndex, WriteOptions};
use crate::transport::stdio::shell_words;
use driver::{drive_stdio, DriveConfig, DriveError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `check` needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckConfig {
    /// The baseline tape.
    pub tape: PathBuf,
    /// Which MCP server of a multi-server tape to replay, by label (`--server`); None: the
    /// first.
    pub server: Option<String>,
    /// The server to start (stdio)…
    pub command: Vec<String>,
    /// …or the URL of a running Streamable HTTP server.
    pub url: Option<String>,
    /// How long each request may take before it counts as a missing response.
    pub timeout: Duration,
    /// What is masked and how answers compare.
    pub normalizer: Normalizer,
    /// Flag exchanges whose latency grew past a factor.
    pub latency: Option<LatencyRule>,
    /// Fail when the grade is worse than this.
    pub min_grade: Option<Grade>,
    /// Fail on any regression.
    pub fail_on_regression: bool,
    /// Whether the gate was named (`--min-grade`, `--fail-on-regression`); without, the
    /// default gate (any regression fails) is what the report names.
    pub gate_named: bool,
    /// Keep the observed session as the new baseline (the old one kept as a backup).
    pub update: bool,
    /// Largest message kept whole, in bytes.
    pub max_message: usize,
    /// How long a stdio server has to exit once its stdin is closed.
    pub grace: Duration,
    /// The redaction rules of the observed tape (the fills' values are added to them, so a
    /// server echoing one does not put it on the tape).
    pub redact: crate::redact::RedactConfig,
    /// `--fill NAME=env:VAR`: real values for redacted arguments, for the live calls only.
    pub fills: Vec<fill::Fill>,
    /// How the baseline's malformed lines are treated (`--skip-bad-lines`).
    pub read: crate::tape::ReadOptions,
}

impl CheckConfig {
    /// A configuration with the defaults: a 30 s timeout, automatic masks, any regression
    /// fails, the built-in redaction rules for the observed tape.
    pub fn new(tape: PathBuf, command: Vec<String>) -> CheckConfig {
        CheckConfig {
            tape,
            server: None,
            command,
            url: None,
            timeout: Duration::from_secs(30),
            normalizer: Normalizer::default(),
            latency: None,
            min_grade: None,
            fail_on_regression: true,
            gate_named: false,
            update: false,
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            grace: Duration::from_secs(5),
            redact: crate::redact::RedactConfig::defaults(),
            fills: Vec::new(),
            read: crate::tape::ReadOptions::default(),
        }
    }
}

/// Why a check could not run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The baseline could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// The server could not be driven.
    #[error(transparent)]
    Drive(#[from] DriveError),
    /// The redaction rules do not compile.
    #[error(transparent)]
    Rules(#[from] crate::redact::RuleError),
    /// `--server` names no MCP server of the tape: a label it does not have, or its model API
    /// (exit 64). Said before any server is started.
    #[error("{0}")]
    Server(String),
    /// `--update` on a tape that holds more than the server checked: the live session would
    /// replace the whole tape, the other servers' lines and the model traffic with it
    /// (exit 64). Said before any server is started; the tape is not touched.
    #[error("--update would replace all of {} with the live session of server {server}, and the tape also holds {others}, which would be lost: refused. Check without --update, or keep a baseline of {server} on a tape of its own (mcptape record --tape TAPE -- <server command>) and update that", path.display())]
    UpdateWouldLose {
        /// The baseline.
        path: PathBuf,
        /// The server checked.
        server: String,
        /// What else the tape holds, said for humans ("server fixture and the model API
        /// model").
        others: String,
    },
    /// `--update` could not replace the baseline (exit 74).
    #[error("updating the baseline {}", path.display())]
    Update {
        /// The baseline.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for CheckError {
    fn exit_code(&self) -> i32 {
        match self {
            CheckError::Tape(t) => t.exit_code(),
            CheckError::Drive(d) => d.exit_code(),
            CheckError::Rules(r) => r.exit_code(),
            CheckError::Update { .. } => crate::exit::IO_ERR,
            CheckError::Server(_) | CheckError::UpdateWouldLose { .. } => crate::exit::USAGE,
        }
    }
}

/// Replays the baseline's client side against the live server and grades its answers; also
/// returns warnings for humans (a torn baseline, markers sent unfilled).
pub async fn check(cfg: &CheckConfig) -> Result<(CheckReport, Vec<String>), CheckError> {
    let started = Instant::now();
    let base = Arc::new(TapeIndex::load_with(
        &cfg.tape,
        cfg.server.as_deref(),
        cfg.read,
    )?);
    let (server_label, other_servers) = servers_checked(&base, cfg)?;
    let mut warnings: Vec<String> = base
        .warnings
        .iter()
        .map(|w| format!("{}: {w}", cfg.tape.display()))
        .collect();
    // A recorded client batch (2025-03-26 only) is not sent: the live session would differ
    // from the recorded one in what it carried, so the user is told, not left to wonder why
    // a `notifications/initialized` inside one never reached the server.
    for m in base
        .msgs
        .iter()
        .filter(|m| m.dir == crate::wire::Dir::C2S && m.kind == crate::wire::Kind::Batch)
    {
        warnings.push(format!(
            "{}: line {}: the client's JSON-RPC batch is not sent to the live server (check sends one message at a time; batches were removed from MCP in 2025-06-18), so nothing in it is checked",
            cfg.tape.display(),
            m.line
        ));
    }
    // The observed session is taped only to become the new baseline (`--update`): answers are
    // compared as they arrive, not read back from it.
    let observed_path = cfg.update.then(|| {
        std::env::temp_dir().join(format!(
            "mcptape-check-{}-{}.jsonl",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ))
    });
    let filler = Arc::new(fill::Filler::new(cfg.fills.clone()));
    let mut rules = cfg.redact.clone();
    rules.literals.extend(filler.literals());
    let redactor = Arc::new(crate::redact::Redactor::new(&rules)?);
    let write = WriteOptions {
        redactor: Some(redactor.clone()),
        signing_key: None,
    };
    let observer = observe::Observer::new(base.clone(), cfg.normalizer.clone(), Some(redactor));
    let (outcome, observer) = match &cfg.url {
        Some(url) => {
            http_driver::drive_http(
                base.clone(),
                url,
                cfg.timeout,
                observed_path.as_deref(),
                write,
                filler.clone(),
                observer,
            )
            .await?
        }
        None => {
            let drive = DriveConfig {
                command: cfg.command.clone(),
                timeout: cfg.timeout,
                observed_tape: observed_path.clone(),
                max_message: cfg.max_message,
                grace: cfg.grace,
                write,
                filler: filler.clone(),
            };
            // The stdio driver's loop blocks on its pipes: on a thread of its own.
            let base = base.clone();
            let mut observer = observer;
            let driving = tokio::task::spawn_blocking(move || {
                drive_stdio(&base, &drive, &mut observer).map(|o| (o, observer))
            })
            .await;
            // The driver panicking is a bug: not hidden as an error of the run.
            driving.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?
        }
    };
    for rule in filler.unfilled() {
        let name = rule.strip_prefix("key:").unwrap_or(&rule);
        warnings.push(format!(
            "a redacted value ({rule}) was sent to the live server as its marker, so calls that carry it may differ: give --fill {name}=env:VAR to send the real value"
        ));
    }
    let cmp = observer.finish();

    let skipped = base.skipped_lines();
    let refused: Vec<usize> = crate::tape::refusals::SessionRefusals::of(&base)
        .all()
        .collect();
    let exchanges = checked_exchanges(
        cmp.exchanges,
        &outcome.missing,
        cfg.latency.as_ref(),
        (&skipped, &refused),
    );
    let dims = grade::dimensions(&exchanges);
    let score = grade::score(&dims);
    let any_missing = exchanges.iter().any(|e| e.status == Status::Missing);
    let (grade, capped) = grade::grade(score, any_missing);
    let regressions = regression_counts(&exchanges);
    let failing = exchanges.iter().any(|e| e.status.failed());
    // A baseline with no exchange checks nothing: that is no pass (a gate on a cut-off or empty
    // tape graded A and passed). So does one with no recorded answer.
    let nothing_checked = !exchanges.iter().any(|e| e.status.graded());
    let regressed = cfg.fail_on_regression && failing;
    let passed = !nothing_checked && !regressed && cfg.min_grade.is_none_or(|min| grade <= min);
    let mut report = CheckReport {
        tape: cfg.tape.display().to_string(),
        server: cfg.url.clone().unwrap_or_else(|| shell_words(&cfg.command)),
        server_label,
        other_servers,
        grade,
        score,
        capped,
        dimensions: dims,
        exchanges,
        regressions,
        tool_surface: cmp.tool_surface,
        server_messages: cmp.server_messages,
        latency: cfg.latency.clone(),
        gate: Gate {
            min_grade: cfg.min_grade,
            fail_on_regression: cfg.fail_on_regression,
            default: !cfg.gate_named && cfg.min_grade.is_none(),
            passed,
        },
        run_error: outcome.run_error,
        server_exit: outcome.exit,
        updated_backup: None,
        skipped_lines: base.skipped_lines(),
        duration_ms: started.elapsed().as_millis() as u64,
        internal_error: outcome.lost_end,
    };
    if let Some(observed) = &observed_path {
        // The new baseline is indexed before it replaces the old one: a tape that would not
        // load never becomes the baseline.
        let updated = TapeIndex::load_own(observed)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|_| update_baseline(&cfg.tape, observed))
            .map_err(|cause| CheckError::Update {
                path: cfg.tape.clone(),
                cause,
            });
        let _ = std::fs::remove_file(observed);
        report.updated_backup = Some(updated?.display().to_string());
    }
    Ok((report, warnings))
}

/// Which server of the tape is checked, refusing what cannot be (before any server starts):
/// a `--server` label the tape does not have (as play and show refuse it), its model API, and
/// `--update` on a tape holding more than the server checked. Returns the label checked and
/// the tape's other MCP servers when it holds several (for the report), else `(None, [])`.
fn servers_checked(
    base: &TapeIndex,
    cfg: &CheckConfig,
) -> Result<(Option<String>, Vec<String>), CheckError> {
    let declared = &base.servers;
    // The model API is refused below: not one to list.
    if let Some(why) =
        crate::tape::format::unknown_server(cfg.server.as_deref(), declared, &base.labels, false)
    {
        return Err(CheckError::Server(why));
    }
    let mcp = crate::tape::format::mcp_labels(declared, &base.labels);
    let checked = base.server.as_str();
    if let Some(why) = crate::tape::format::model_api_refusal(
        checked,
        declared,
        &mcp,
        "check replays an MCP server's conversation",
    ) {
        return Err(CheckError::Server(why));
    }
    let others: Vec<String> = mcp
        .iter()
        .filter(|&&l| l != checked)
        .map(|l| l.to_string())
        .collect();
    if cfg.update {
        let models: Vec<&str> = declared
            .iter()
            .filter(|d| !d.is_mcp())
            .map(|d| d.server.as_str())
            .collect();
        let mut parts = Vec::new();
        if !others.is_empty() {
            let s = if others.len() == 1 { "" } else { "s" };
            parts.push(format!("server{s} {}", others.join(", ")));
        }
        if !models.is_empty() {
            parts.push(format!("the model API {}", models.join(", ")));
        }
        if !parts.is_empty() {
            return Err(CheckError::UpdateWouldLose {
                path: cfg.tape.clone(),
                server: checked.to_string(),
                others: parts.join(" and "),
            });
        }
    }
    if others.is_empty() {
        return Ok((None, Vec::new()));
    }
    Ok((Some(checked.to_string()), others))
}

/// Why an exchange the recorded server refused for its session is not graded.
const REFUSED_FOR_SESSION: &str = "the recording has only the server's refusal of this POST for its session (none named, or one it never gave), and check sends it in its own session";

/// Each compared exchange with its status: the same, a regression, missing (no answer, or one
/// that came after the deadline), or not on the tape (answered live, never in the recording),
/// and whether it was slower than the latency rule allows. `skipped`: the baseline's lines
/// skipped as malformed; a recorded answer may have been on one after its request, so such a
/// request stays a regression rather than not on the tape.
fn checked_exchanges(
    compared: Vec<crate::compare::ExchangeComparison>,
    missing: &std::collections::HashMap<usize, String>,
    latency: Option<&LatencyRule>,
    (skipped, refused): (&[crate::tape::BadLine], &[usize]),
) -> Vec<CheckedExchange> {
    let mut out = Vec::with_capacity(compared.len());
    for (i, e) in compared.into_iter().enumerate() {
        // A request that timed out is missing whatever arrived after the deadline.
        // (Unless the recording had no answer either: then silence is what was recorded.)
        let late = missing.contains_key(&i)
            && e.latency_us.is_some()
            && matches!(e.outcome, Outcome::Same | Outcome::Changed);
        // Answered live, unanswered in the recording (and not on a skipped line): what it said.
        let live_only = unrecorded(&e.changes)
            .filter(|_| !skipped.iter().any(|b| b.line > e.exchange.line))
            .map(|v| {
                let answer = crate::wire::canonical::short(Some(v), 120);
                format!("the live server answered {answer}")
            });
        let (status, changes, detail) = match e.outcome {
            // Over HTTP the recording has only the server's refusal of the POST for its
            // session (none named, or one it never gave); check sends it in its own session.
            _ if e.outcome != Outcome::Same && refused.contains(&i) => (
                Status::Unrecorded,
                Vec::new(),
                Some(REFUSED_FOR_SESSION.into()),
            ),
            Outcome::Same if !late => (Status::Pass, Vec::new(), None),
            Outcome::Changed if !late && live_only.is_some() => {
                (Status::Unrecorded, Vec::new(), live_only)
            }
            Outcome::Changed if !late => (Status::Regression, e.changes, None),
            _ => {
                let detail = missing
                    .get(&i)
                    .cloned()
                    .unwrap_or_else(|| "no answer".into());
                let change = Change {
                    kind: ChangeKind::MissingResponse,
                    path: "$".into(),
                    recorded: None,
                    observed: None,
                };
                (Status::Missing, vec![change], Some(detail))
            }
        };
        let slower = match (latency, e.latency_us, e.other_latency_us) {
            (Some(rule), Some(rec), Some(obs)) if status.graded() => {
                obs as f64 > rule.factor * rec as f64
                    && (obs as f64 - rec as f64) / 1000.0 > rule.floor_ms
            }
            _ => false,
        };
        out.push(CheckedExchange {
            exchange: e.exchange,
            status,
            changes,
            detail,
            recorded_latency_us: e.latency_us,
            observed_latency_us: e.other_latency_us,
            slower,
        });
    }
    out
}

/// The live answer, when the only change is that the recording has none (the exchange is
/// then [`Status::Unrecorded`], not a regression).
fn unrecorded(changes: &[Change]) -> Option<&serde_json::Value> {
    match changes {
        [c] if c.kind == ChangeKind::MissingResponse && c.recorded.is_none() => c.observed.as_ref(),
        _ => None,
    }
}

/// How many exchanges show each kind of change (an exchange counts once per kind).
fn regression_counts(exchanges: &[CheckedExchange]) -> BTreeMap<ChangeKind, usize> {
    let mut regressions: BTreeMap<ChangeKind, usize> = BTreeMap::new();
    for e in exchanges {
        let mut kinds: Vec<ChangeKind> = e.changes.iter().map(|c| c.kind).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            *regressions.entry(k).or_default() += 1;
        }
    }
    regressions
}

/// Keeps the old baseline as `<tape>.bak` and puts the observed session in its place
/// (written beside it, then renamed, so the baseline is never half-written; the staging file is
/// removed if anything fails).
fn update_baseline(tape: &Path, observed: &Path) -> std::io::Result<PathBuf> {
    // Through a symbolic link: the file it leads to is replaced, the link kept.
    let tape = &crate::tape::place::behind_link(tape)?;
    let mut backup = tape.as_os_str().to_owned();
    backup.push(".bak");
    let backup = PathBuf::from(backup);
    let mut staging = tape.as_os_str().to_owned();
    staging.push(".new");
    let (staged, mut file) = crate::tape::writer::Staged::create(Path::new(&staging))?;
    std::io::copy(&mut std::fs::File::open(observed)?, &mut file)?;
    file.sync_data()?;
    drop(file);
    crate::tape::writer::copy_own(tape, &backup)?;
    staged.commit(tape)?;
    Ok(backup)
}
