//! What `check` found: the data behind every report format (console, JSON, Markdown, JUnit,
//! badge). The JSON report is this structure serialized; readers can rely on its fields.

use crate::compare::surface::ToolChange;
use crate::compare::{Change, ChangeKind, ExchangeRef};
use crate::tape::ExitInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Grade {
    A,
    B,
    C,
    D,
    F,
}

impl Grade {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pass,
    Regression,
    /// No answer: timeout, crash, or never sent because the server was gone.
    Missing,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckedExchange {
    pub exchange: ExchangeRef,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Why an answer is missing ("no answer within 30s", "the server exited with code 1").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_latency_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_latency_us: Option<u64>,
    /// Latency grew past the `--compare-latency` factor and floor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slower: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyRule {
    pub factor: f64,
    pub floor_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_grade: Option<Grade>,
    pub fail_on_regression: bool,
    pub passed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// The baseline tape.
    pub tape: String,
    /// The server checked (command line or URL).
    pub server: String,
    pub grade: Grade,
    /// 0–100, one decimal.
    pub score: f64,
    /// A missing response capped the grade at D.
    pub capped: bool,
    pub dimensions: Dimensions,
    /// Every recorded client request, in recorded order.
    pub exchanges: Vec<CheckedExchange>,
    /// Regressions by kind (`value-change`: 2, …); an exchange counts once per kind.
    pub regressions: BTreeMap<ChangeKind, usize>,
    pub tool_surface: Vec<ToolChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyRule>,
    pub gate: Gate,
    /// Something that stopped the run from completing (the server crashed, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_exit: Option<ExitInfo>,
    /// With `--update`: where the previous baseline was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_backup: Option<String>,
    pub duration_ms: u64,
}

impl CheckReport {
    pub fn regression_count(&self) -> usize {
        self.exchanges
            .iter()
            .filter(|e| e.status != Status::Pass)
            .count()
    }
}
