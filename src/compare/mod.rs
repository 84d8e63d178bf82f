//! Comparing answers: normalization, classified changes, tool-surface changes.

pub mod diff_values;
pub mod normalize;
pub mod surface;

pub use diff_values::{changes, Change, ChangeKind};
pub use normalize::Normalizer;
pub mod tapes;

pub use tapes::{
    compare_tapes, compare_tapes_drift, ExchangeComparison, ExchangeRef, Outcome, TapeComparison,
};
