//! The JSON reports of `mcptape check --json` and `mcptape diff --format json`, as the tests
//! expect them. These are the tests' own copies of the report shape, not the library's types, on
//! purpose: each struct refuses unknown fields and each required field must be there, so a field
//! the library adds, renames or drops fails a test instead of passing silently (and a reader of
//! the JSON outside Rust would be broken the same way). Optional fields are `Option`, absent when
//! the report leaves them out.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

// --- check -----------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Grade {
    A,
    B,
    C,
    D,
    F,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pass,
    Regression,
    Missing,
    Unrecorded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    MissingResponse,
    ErrorStatusChange,
    StructureChange,
    OrderingChange,
    ValueChange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurfaceKind {
    Added,
    Removed,
    Narrowed,
    Widened,
    Changed,
}

/// A recorded client request: what it was and where it is on its tape.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeRef {
    #[serde(default)]
    pub server: Option<String>,
    pub method: String,
    pub target: Option<String>,
    pub arguments: Option<Value>,
    pub line: u64,
}

/// One classified difference between a recorded answer and another.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub kind: ChangeKind,
    pub path: String,
    pub recorded: Option<Value>,
    pub observed: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolChange {
    #[serde(default)]
    pub server: Option<String>,
    pub tool: String,
    pub kind: SurfaceKind,
    pub details: Vec<String>,
}

/// A method whose server messages differ in number between the two sides.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageCount {
    #[serde(default)]
    pub server: Option<String>,
    pub method: String,
    pub recorded: u64,
    pub observed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dimensions {
    pub responsiveness: f64,
    pub match_rate: f64,
    pub error_parity: f64,
    pub structural_stability: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckedExchange {
    pub exchange: ExchangeRef,
    pub status: Status,
    #[serde(default)]
    pub changes: Vec<Change>,
    pub detail: Option<String>,
    pub recorded_latency_us: Option<u64>,
    pub observed_latency_us: Option<u64>,
    #[serde(default)]
    pub slower: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyRule {
    pub factor: f64,
    pub floor_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub min_grade: Option<Grade>,
    pub fail_on_regression: bool,
    #[serde(default)]
    pub default: bool,
    pub passed: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// `mcptape check --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    pub tape: String,
    pub server: String,
    pub server_label: Option<String>,
    #[serde(default)]
    pub other_servers: Vec<String>,
    pub grade: Grade,
    pub score: f64,
    pub capped: bool,
    pub dimensions: Dimensions,
    pub exchanges: Vec<CheckedExchange>,
    pub regressions: BTreeMap<ChangeKind, usize>,
    pub tool_surface: Vec<ToolChange>,
    #[serde(default)]
    pub server_messages: Vec<MessageCount>,
    pub latency: Option<LatencyRule>,
    pub gate: Gate,
    pub run_error: Option<String>,
    pub server_exit: Option<ExitInfo>,
    pub updated_backup: Option<String>,
    #[serde(default)]
    pub skipped_lines: Vec<BadLine>,
    pub duration_ms: u64,
}

/// A tape line skipped as malformed (`--skip-bad-lines`), in the JSON reports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadLine {
    pub line: u64,
    pub why: String,
}

impl CheckReport {
    /// Exchanges not answered as recorded (one the tape has no answer for is neither).
    pub fn regression_count(&self) -> usize {
        self.exchanges
            .iter()
            .filter(|e| matches!(e.status, Status::Regression | Status::Missing))
            .count()
    }
}

// --- diff ------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Same,
    OutputDrift,
    StructuralDrift,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Same,
    Changed,
    Absent,
    Unanswered,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeComparison {
    pub exchange: ExchangeRef,
    pub outcome: Outcome,
    pub other_line: Option<u64>,
    #[serde(default)]
    pub changes: Vec<Change>,
    pub latency_us: Option<u64>,
    pub other_latency_us: Option<u64>,
}

/// `mcptape diff --format json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffReport {
    pub a: String,
    pub b: String,
    /// `--server`: the label of A's server compared, and B's.
    #[serde(default)]
    pub server_a: Option<String>,
    #[serde(default)]
    pub server_b: Option<String>,
    pub verdict: Verdict,
    pub compared: usize,
    pub drifts: Vec<ExchangeComparison>,
    pub only_in_a: Vec<ExchangeRef>,
    pub only_in_b: Vec<ExchangeRef>,
    pub tool_surface: Vec<ToolChange>,
    #[serde(default)]
    pub server_messages: Vec<MessageCount>,
    /// Agent runs: how their model calls compare (absent without model calls, or with
    /// `--server`).
    #[serde(default)]
    pub model: Option<ModelDiff>,
    #[serde(default)]
    pub skipped_lines_a: Vec<BadLine>,
    #[serde(default)]
    pub skipped_lines_b: Vec<BadLine>,
}

/// [`DiffReport::model`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDiff {
    pub calls_a: usize,
    pub calls_b: usize,
    /// Code Assist's setup calls, counted apart.
    #[serde(default)]
    pub setup_a: usize,
    #[serde(default)]
    pub setup_b: usize,
    /// The first model request the runs disagree on.
    #[serde(default)]
    pub first: Option<ModelDivergence>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDivergence {
    /// 1-based, among the model calls.
    pub position: usize,
    #[serde(default)]
    pub line_a: Option<u64>,
    #[serde(default)]
    pub line_b: Option<u64>,
    pub endpoint: String,
    /// B's endpoint, when another API.
    #[serde(default)]
    pub endpoint_b: Option<String>,
    pub changes: Vec<Change>,
}

// --- play --unused-report --------------------------------------------------------------------

/// `mcptape play --unused-report FILE`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnusedReport {
    pub format: String,
    pub version: u32,
    pub tape: String,
    pub server: String,
    pub exchanges: usize,
    pub unused: Vec<ExchangeUse>,
    pub used: Vec<ExchangeUse>,
}

/// One exchange of an [`UnusedReport`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeUse {
    pub line: u64,
    pub seq: u64,
    pub method: String,
    pub target: Option<String>,
    pub id: Value,
    pub lines: Vec<u64>,
    pub h: Option<String>,
    pub served: u32,
}

/// The unused report at `path`, read strictly.
pub fn unused_report(path: &std::path::Path) -> UnusedReport {
    let text = std::fs::read_to_string(path).expect("the unused report");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not an unused report ({e}):\n{text}"))
}

// --- show --stats ----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sizes {
    pub total: u64,
    pub mean: u64,
    pub max: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsRow {
    pub server: String,
    pub kind: String,
    pub method: String,
    pub target: Option<String>,
    pub calls: u64,
    pub errors: u64,
    pub unanswered: u64,
    pub latency_us: Option<Latency>,
    pub request_bytes: Sizes,
    pub answer_bytes: Sizes,
}

/// `mcptape show --stats --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsDoc {
    pub tape: String,
    pub rows: Vec<StatsRow>,
}

impl StatsDoc {
    /// The row of `method` (and `target`) on `server`, which must be there.
    pub fn row(&self, server: &str, method: &str, target: Option<&str>) -> &StatsRow {
        self.rows
            .iter()
            .find(|r| r.server == server && r.method == method && r.target.as_deref() == target)
            .unwrap_or_else(|| panic!("no row {server} {method} {target:?} in {:#?}", self.rows))
    }
}
