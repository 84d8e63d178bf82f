//! `mcptape diff`: two recordings, aligned by content, down to the first call that drifted.

use crate::compare::surface::{SurfaceKind, ToolChange};
use crate::compare::{compare_tapes_drift, ExchangeComparison, ExchangeRef, Normalizer, Outcome};
use crate::tape::{TapeError, TapeIndex};
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
}

/// Compares two recordings (each the first server of its tape): the report, and the tapes'
/// reader warnings, each prefixed with its tape's path.
pub fn diff(
    a_path: &Path,
    b_path: &Path,
    norm: &Normalizer,
) -> Result<(DiffReport, Vec<String>), TapeError> {
    let a = TapeIndex::load(a_path, None)?;
    let b = TapeIndex::load(b_path, None)?;
    let mut warnings = Vec::new();
    for (p, idx) in [(a_path, &a), (b_path, &b)] {
        for w in &idx.warnings {
            warnings.push(format!("{}: {w}", p.display()));
        }
    }
    // Only drifts are reported: the exchanges answered the same are counted, not listed.
    let (cmp, same) = compare_tapes_drift(&a, &b, norm);
    let mut drifts = Vec::new();
    let mut only_in_a = Vec::new();
    let mut compared = same;
    for e in cmp.exchanges {
        match e.outcome {
            Outcome::Absent => only_in_a.push(e.exchange),
            Outcome::Same => compared += 1,
            Outcome::Changed | Outcome::Unanswered => {
                compared += 1;
                drifts.push(e)
            }
        }
    }
    let structural = !only_in_a.is_empty()
        || !cmp.only_in_other.is_empty()
        || cmp.tool_surface.iter().any(|t| {
            matches!(
                t.kind,
                SurfaceKind::Added | SurfaceKind::Removed | SurfaceKind::Narrowed
            )
        });
    let output = !drifts.is_empty()
        || cmp
            .tool_surface
            .iter()
            .any(|t| t.kind == SurfaceKind::Widened);
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
        verdict,
        compared,
        drifts,
        only_in_a,
        only_in_b: cmp.only_in_other,
        tool_surface: cmp.tool_surface,
    };
    Ok((report, warnings))
}
