//! What `check` found: the data behind every report format (console, JSON, Markdown, JUnit,
//! badge). The JSON report is this structure serialized; readers can rely on its fields.

use crate::compare::surface::ToolChange;
use crate::compare::{Change, ChangeKind, ExchangeRef};
use crate::tape::ExitInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A check's grade, best first: `A < F` in the ordering, so `grade <= min` means at least as
/// good as `min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Grade {
    /// Score 90 or more.
    A,
    /// Score 80 or more.
    B,
    /// Score 70 or more.
    C,
    /// Score 60 or more, or any better score with a missing response.
    D,
    /// Score under 60.
    F,
}

impl Grade {
    /// The grade's letter.
    pub fn as_str(self) -> &'static str {
        match self {
            Grade::A => "A",
            Grade::B => "B",
            Grade::C => "C",
            Grade::D => "D",
            Grade::F => "F",
        }
    }
}

impl std::str::FromStr for Grade {
    type Err = String;
    fn from_str(s: &str) -> Result<Grade, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "A" => Ok(Grade::A),
            "B" => Ok(Grade::B),
            "C" => Ok(Grade::C),
            "D" => Ok(Grade::D),
            "F" => Ok(Grade::F),
            _ => Err(format!("{s:?} is not a grade (A, B, C, D or F)")),
        }
    }
}

/// The four dimensions of the score, each a fraction of the graded exchanges (0.0–1.0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dimensions {
    /// Answered at all (no missing response). Weight 25 %.
    pub responsiveness: f64,
    /// Answered exactly as recorded, after normalization. Weight 45 %.
    pub match_rate: f64,
    /// No error-status change. Weight 20 %.
    pub error_parity: f64,
    /// No structure change. Weight 10 %.
    pub structural_stability: f64,
}

/// How one recorded exchange fared against the live server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Answered as recorded, after normalization.
    Pass,
    /// Answered, but differently (see the changes).
    Regression,
    /// No answer: timeout, crash, or never sent because the server was gone.
    Missing,
    /// The live server answered a request the recording has no answer for (it was cut off
    /// after the request, or the recorded server never answered): nothing to compare with, so
    /// neither graded nor failing the gate.
    Unrecorded,
}

impl Status {
    /// Whether this exchange counts against the server: a regression or a missing answer.
    pub fn failed(self) -> bool {
        matches!(self, Status::Regression | Status::Missing)
    }

    /// Whether this exchange is graded (all but the ones the recording has no answer for).
    pub fn graded(self) -> bool {
        self != Status::Unrecorded
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// One recorded exchange, checked.
pub struct CheckedExchange {
    /// The recorded request.
    pub exchange: ExchangeRef,
    /// How it fared.
    pub status: Status,
    /// What differs from the recorded answer (a missing answer is one `missing-response`);
    /// empty when it passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Why an answer is missing ("no answer within 30s", "the server exited with code 1").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Request-to-answer time in the recording, microseconds; None when it was not answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_latency_us: Option<u64>,
    /// Request-to-answer time of the live server, microseconds; None when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_latency_us: Option<u64>,
    /// Latency grew past the `--compare-latency` factor and floor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slower: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// When an answer counts as slower (`--compare-latency`): over `factor` times the recorded
/// latency and more than `floor_ms` later, both.
pub struct LatencyRule {
    /// How many times the recorded latency the observed one must exceed.
    pub factor: f64,
    /// How many milliseconds more than recorded it must take at least, so that fast calls'
    /// jitter is not flagged.
    pub floor_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// The pass/fail rule of the run and its outcome (exit 0 or 1).
pub struct Gate {
    /// The worst grade that passes; None: any grade does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_grade: Option<Grade>,
    /// Any regression or missing answer fails the gate, whatever the grade.
    pub fail_on_regression: bool,
    /// No gate was named, so the default one applied (any regression fails).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// The gate passed.
    pub passed: bool,
}

/// Everything `check` found: the grade, each exchange, and the gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// The baseline tape.
    pub tape: String,
    /// The server checked (command line or URL).
    pub server: String,
    /// The label of the tape's server whose conversation was replayed, when the tape holds
    /// several MCP servers (an agent run's): the first, or the one `--server` named. Absent for
    /// a tape of one MCP server (its model API, if any, is not one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_label: Option<String>,
    /// The tape's other MCP servers, not checked (`--server LABEL` checks one), when it holds
    /// several; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_servers: Vec<String>,
    /// The grade the score earned (after the missing-response cap).
    pub grade: Grade,
    /// 0–100, one decimal.
    pub score: f64,
    /// A missing response capped the grade at D.
    pub capped: bool,
    /// The four dimensions the score is made of.
    pub dimensions: Dimensions,
    /// Every recorded client request, in recorded order.
    pub exchanges: Vec<CheckedExchange>,
    /// Regressions by kind (`value-change`: 2, …); an exchange counts once per kind.
    pub regressions: BTreeMap<ChangeKind, usize>,
    /// How the tools listed changed from the recording to the live server.
    pub tool_surface: Vec<ToolChange>,
    /// The server's requests and notifications whose number differs live, by method
    /// (`recorded`, `observed`: live). Not graded: log and progress messages vary in number
    /// with timing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_messages: Vec<crate::compare::server_messages::MessageCount>,
    /// The latency rule applied; None without `--compare-latency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyRule>,
    /// Whether the run passes.
    pub gate: Gate,
    /// Something that stopped the run from completing (the server crashed, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<String>,
    /// How the server process ended, when it was a process that ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_exit: Option<ExitInfo>,
    /// With `--update`: where the previous baseline was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_backup: Option<String>,
    /// Baseline lines skipped as malformed (`--skip-bad-lines`): their exchanges were not
    /// checked (a request on one was never sent; an answer on one left its request unanswered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<crate::tape::BadLine>,
    /// Wall-clock time of the whole check, milliseconds.
    pub duration_ms: u64,
    /// An internal error that leaves the report standing (how the server ended could not be
    /// learned): the line that says so. Not written: the exit code (70) tells it.
    #[serde(skip)]
    pub internal_error: Option<String>,
}

impl CheckReport {
    /// `check`'s exit code for this report: 70 after an internal error, else 0 when the gate
    /// passed or `--update` made the observed session the baseline (the success asked for),
    /// 1 when the gate failed.
    pub fn exit_code(&self) -> i32 {
        if self.internal_error.is_some() {
            crate::exit::SOFTWARE
        } else if self.gate.passed || self.updated_backup.is_some() {
            crate::exit::OK
        } else {
            crate::exit::DRIFT
        }
    }

    /// Exchanges that failed (regressions and missing answers).
    pub fn regression_count(&self) -> usize {
        self.exchanges.iter().filter(|e| e.status.failed()).count()
    }
}
