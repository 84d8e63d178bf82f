//! Comparing answers: normalization, classified changes, tool-surface changes.

pub mod diff_values;
pub mod normalize;
pub mod server_messages;
pub mod surface;

pub use diff_values::{Change, ChangeKind};
pub use normalize::Normalizer;
pub mod tapes;

#[cfg(test)]
pub(crate) use tapes::compare_tapes;
pub(crate) use tapes::compare_tapes_drift;
pub use tapes::{ExchangeComparison, ExchangeRef, Outcome};
