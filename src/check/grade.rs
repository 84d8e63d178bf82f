//! The grade: a 0–100 score over four weighted dimensions, mapped to A–F.
//!
//! score = 100 × (0.25·responsiveness + 0.45·match rate + 0.20·error parity + 0.10·structural
//! stability), each dimension the fraction of graded exchanges without that kind of problem.
//! A ≥ 90, B ≥ 80, C ≥ 70, D ≥ 60, else F. Any missing response caps the grade at D: a server
//! that does not answer is not a B server however well it answers the rest.

use super::report::{CheckedExchange, Dimensions, Grade, Status};
use crate::compare::ChangeKind;

/// Each dimension's weight in the score; they sum to 1.
pub(crate) const WEIGHTS: Dimensions = Dimensions {
    responsiveness: 0.25,
    match_rate: 0.45,
    error_parity: 0.20,
    structural_stability: 0.10,
};

/// The four dimensions over the graded exchanges (not those the recording has no answer
/// for); all 1.0 when there are none.
pub(crate) fn dimensions(exchanges: &[CheckedExchange]) -> Dimensions {
    let exchanges: Vec<&CheckedExchange> = exchanges.iter().filter(|e| e.status.graded()).collect();
    let n = exchanges.len();
    if n == 0 {
        return Dimensions {
            responsiveness: 1.0,
            match_rate: 1.0,
            error_parity: 1.0,
            structural_stability: 1.0,
        };
    }
    let frac = |bad: usize| 1.0 - bad as f64 / n as f64;
    let has = |e: &CheckedExchange, k: ChangeKind| e.changes.iter().any(|c| c.kind == k);
    Dimensions {
        responsiveness: frac(
            exchanges
                .iter()
                .filter(|e| e.status == Status::Missing)
                .count(),
        ),
        match_rate: frac(
            exchanges
                .iter()
                .filter(|e| e.status != Status::Pass)
                .count(),
        ),
        error_parity: frac(
            exchanges
                .iter()
                .filter(|e| has(e, ChangeKind::ErrorStatusChange))
                .count(),
        ),
        structural_stability: frac(
            exchanges
                .iter()
                .filter(|e| has(e, ChangeKind::StructureChange))
                .count(),
        ),
    }
}

/// The weighted score, 0–100, rounded to one decimal.
pub(crate) fn score(d: &Dimensions) -> f64 {
    let s = 100.0
        * (WEIGHTS.responsiveness * d.responsiveness
            + WEIGHTS.match_rate * d.match_rate
            + WEIGHTS.error_parity * d.error_parity
            + WEIGHTS.structural_stability * d.structural_stability);
    (s * 10.0).round() / 10.0
}

/// The grade for a score, and whether the missing-response cap lowered it.
pub(crate) fn grade(score: f64, any_missing: bool) -> (Grade, bool) {
    let g = if score >= 90.0 {
        Grade::A
    } else if score >= 80.0 {
        Grade::B
    } else if score >= 70.0 {
        Grade::C
    } else if score >= 60.0 {
        Grade::D
    } else {
        Grade::F
    };
    if any_missing && g < Grade::D {
        (Grade::D, true)
    } else {
        (g, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{Change, ExchangeRef};

    fn ex(status: Status, kinds: &[ChangeKind]) -> CheckedExchange {
        CheckedExchange {
            exchange: ExchangeRef {
                server: None,
                method: "m".into(),
                target: None,
                arguments: None,
                line: 1,
                appended: false,
            },
            status,
            changes: kinds
                .iter()
                .map(|&kind| Change {
                    kind,
                    path: "$".into(),
                    recorded: None,
                    observed: None,
                })
                .collect(),
            detail: None,
            recorded_latency_us: None,
            observed_latency_us: None,
            slower: false,
        }
    }

    #[test]
    fn the_formula_and_the_cap() {
        let all_pass: Vec<_> = (0..10).map(|_| ex(Status::Pass, &[])).collect();
        assert_eq!(score(&dimensions(&all_pass)), 100.0);
        assert_eq!(grade(100.0, false), (Grade::A, false));

        // One value change in 10: match rate 0.9 → 100 − 4.5 = 95.5, still A.
        let mut one = all_pass.clone();
        one[0] = ex(Status::Regression, &[ChangeKind::ValueChange]);
        assert_eq!(score(&dimensions(&one)), 95.5);

        // One missing in 10: responsiveness and match rate 0.9 → 93.0, but capped at D.
        let mut missing = all_pass.clone();
        missing[0] = ex(Status::Missing, &[ChangeKind::MissingResponse]);
        let s = score(&dimensions(&missing));
        assert_eq!(s, 93.0);
        assert_eq!(grade(s, true), (Grade::D, true));
        assert_eq!(grade(50.0, true), (Grade::F, false));

        // Structure + error status on half: 100 − 22.5 − 10 − 5 = 62.5 → D.
        let mut half = all_pass;
        for e in half.iter_mut().take(5) {
            *e = ex(
                Status::Regression,
                &[ChangeKind::ErrorStatusChange, ChangeKind::StructureChange],
            );
        }
        assert_eq!(score(&dimensions(&half)), 62.5);
        assert_eq!(grade(62.5, false).0, Grade::D);
    }
}
