//! `mcptape check`: replay the recorded client side against a live server and grade how its
//! answers differ from the recording.

pub mod driver;
pub mod fill;
pub mod grade;
pub mod http_driver;
pub mod report;

pub use report::{CheckReport, CheckedExchange, Gate, Grade, LatencyRule, Status};

use crate::compare::{compare_tapes, Change, ChangeKind, Normalizer, Outcome};
use crate::record::shell_words;
use crate::tape::{TapeError, TapeIndex};
use driver::{drive_stdio, DriveConfig, DriveError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CheckConfig {
    pub tape: PathBuf,
    /// The server to start (stdio)…
    pub command: Vec<String>,
    /// …or the URL of a running Streamable HTTP server.
    pub url: Option<String>,
    pub timeout: Duration,
    pub normalizer: Normalizer,
    pub latency: Option<LatencyRule>,
    pub min_grade: Option<Grade>,
    pub fail_on_regression: bool,
    /// Keep the observed session as the new baseline (the old one kept as a backup).
    pub update: bool,
    pub max_message: usize,
    pub grace: Duration,
    pub redact: crate::redact::RedactConfig,
    /// `--fill NAME=env:VAR`: real values for redacted arguments, for the live calls only.
    pub fills: Vec<fill::Fill>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error(transparent)]
    Drive(#[from] DriveError),
    #[error(transparent)]
    HttpDrive(#[from] http_driver::HttpDriveError),
    #[error("updating the baseline {}: {cause}", path.display())]
    Update {
        path: PathBuf,
        cause: std::io::Error,
    },
}

pub fn check(cfg: &CheckConfig) -> Result<(CheckReport, Vec<String>), CheckError> {
    let started = Instant::now();
    let base = TapeIndex::load(&cfg.tape, None)?;
    let warnings: Vec<String> = base
        .warnings
        .iter()
        .map(|w| format!("{}: {w}", cfg.tape.display()))
        .collect();
    let observed_path = std::env::temp_dir().join(format!(
        "mcptape-check-{}-{}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let filler = std::sync::Arc::new(fill::Filler::new(cfg.fills.clone()));
    // The filled values are secrets on the observed tape too (a server may echo them).
    let mut redact = cfg.redact.clone();
    redact.literals.extend(filler.literals());
    let drive = DriveConfig {
        command: cfg.command.clone(),
        timeout: cfg.timeout,
        observed_tape: observed_path.clone(),
        max_message: cfg.max_message,
        grace: cfg.grace,
        redact: redact.clone(),
        filler: filler.clone(),
    };
    let outcome = match &cfg.url {
        Some(url) => {
            http_driver::drive_http(&base, url, cfg.timeout, &observed_path, &redact, &filler)?
        }
        None => drive_stdio(&base, &drive)?,
    };
    let mut warnings = warnings;
    for rule in filler.unfilled() {
        let name = rule.strip_prefix("key:").unwrap_or(&rule);
        warnings.push(format!(
            "a redacted value ({rule}) was sent to the live server as its marker, so calls that carry it may differ: give --fill {name}=env:VAR to send the real value"
        ));
    }
    let observed = TapeIndex::load_own(&observed_path)?;
    let cmp = compare_tapes(&base, &observed, &cfg.normalizer);

    let mut exchanges = Vec::with_capacity(cmp.exchanges.len());
    for (i, e) in cmp.exchanges.into_iter().enumerate() {
        // A request that timed out is missing whatever arrived after the deadline.
        // (Unless the recording had no answer either: then silence is what was recorded.)
        let late = outcome.missing.contains_key(&i)
            && e.latency_us.is_some()
            && matches!(e.outcome, Outcome::Same | Outcome::Changed);
        let (status, changes, detail) = match e.outcome {
            Outcome::Same if !late => (Status::Pass, Vec::new(), None),
            Outcome::Changed if !late => (Status::Regression, e.changes, None),
            _ => {
                let detail = outcome
                    .missing
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
        let slower = match (&cfg.latency, e.latency_us, e.other_latency_us) {
            (Some(rule), Some(rec), Some(obs)) => {
                obs as f64 > rule.factor * rec as f64
                    && (obs as f64 - rec as f64) / 1000.0 > rule.floor_ms
            }
            _ => false,
        };
        exchanges.push(CheckedExchange {
            exchange: e.exchange,
            status,
            changes,
            detail,
            recorded_latency_us: e.latency_us,
            observed_latency_us: e.other_latency_us,
            slower,
        });
    }
    let dims = grade::dimensions(&exchanges);
    let score = grade::score(&dims);
    let any_missing = exchanges.iter().any(|e| e.status == Status::Missing);
    let (grade, capped) = grade::grade(score, any_missing);
    let mut regressions: BTreeMap<ChangeKind, usize> = BTreeMap::new();
    for e in &exchanges {
        let mut kinds: Vec<ChangeKind> = e.changes.iter().map(|c| c.kind).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            *regressions.entry(k).or_default() += 1;
        }
    }
    let failing = exchanges.iter().any(|e| e.status != Status::Pass);
    let passed =
        !(cfg.fail_on_regression && failing) && cfg.min_grade.is_none_or(|min| grade <= min);
    let mut report = CheckReport {
        tape: cfg.tape.display().to_string(),
        server: cfg.url.clone().unwrap_or_else(|| shell_words(&cfg.command)),
        grade,
        score,
        capped,
        dimensions: dims,
        exchanges,
        regressions,
        tool_surface: cmp.tool_surface,
        latency: cfg.latency.clone(),
        gate: Gate {
            min_grade: cfg.min_grade,
            fail_on_regression: cfg.fail_on_regression,
            passed,
        },
        run_error: outcome.run_error,
        server_exit: outcome.exit,
        updated_backup: None,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    if cfg.update {
        let backup =
            update_baseline(&cfg.tape, &observed_path).map_err(|cause| CheckError::Update {
                path: cfg.tape.clone(),
                cause,
            })?;
        report.updated_backup = Some(backup.display().to_string());
    }
    let _ = std::fs::remove_file(&observed_path);
    Ok((report, warnings))
}

/// Keeps the old baseline as `<tape>.bak` and puts the observed session in its place
/// (written beside it, then renamed, so the baseline is never half-written).
fn update_baseline(tape: &Path, observed: &Path) -> std::io::Result<PathBuf> {
    let mut backup = tape.as_os_str().to_owned();
    backup.push(".bak");
    let backup = PathBuf::from(backup);
    let mut staging = tape.as_os_str().to_owned();
    staging.push(".new");
    let staging = PathBuf::from(staging);
    crate::tape::writer::copy_own(observed, &staging)?;
    crate::tape::writer::copy_own(tape, &backup)?;
    std::fs::rename(&staging, tape)?;
    Ok(backup)
}
