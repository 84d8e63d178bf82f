//! Exit codes: a documented contract (README, `--help`). Tool failures use the sysexits values.
//! Every library error knows its own code ([`Coded`]); [`crate::errors::exit_code`] finds it
//! along a chain of causes, so the binary maps errors to codes without knowing their types.
//! A leaf: every layer uses it, it uses none.

/// Clean: same, everything served.
pub const OK: i32 = 0;
/// Drift, misses or regressions found.
pub const DRIFT: i32 = 1;
/// Structural drift (`diff`).
pub const STRUCTURAL: i32 = 2;
/// Command-line usage error.
pub const USAGE: i32 = 64;
/// The tape is malformed or not a tape (or from a newer major version).
pub const DATA_ERR: i32 = 65;
/// The tape was not found.
pub const NO_INPUT: i32 = 66;
/// The server could not be started (or reached).
pub const UNAVAILABLE: i32 = 69;
/// An internal error (a bug: please report it).
pub const SOFTWARE: i32 = 70;
/// An I/O error (writing the tape, reading stdin…).
pub const IO_ERR: i32 = 74;
/// `play` over stdio cut the connection on purpose (`--faults drop`): a transient failure,
/// as sysexits' EX_TEMPFAIL says.
pub const TEMPFAIL: i32 = 75;

/// An error that knows which exit code it means.
pub trait Coded {
    /// The exit code.
    fn exit_code(&self) -> i32;
}
