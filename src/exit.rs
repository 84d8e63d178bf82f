//! Exit codes: a documented contract (README, `--help`). Tool failures use the sysexits values.

/// Clean: same, everything served.
pub const OK: i32 = 0;
/// Drift, misses or regressions found.
pub const DRIFT: i32 = 1;
/// Command-line usage error.
pub const USAGE: i32 = 64;
/// The tape is malformed or not a tape (or from a newer major version).
pub const DATA_ERR: i32 = 65;
/// The tape was not found.
pub const NO_INPUT: i32 = 66;
/// The server could not be started.
pub const UNAVAILABLE: i32 = 69;
/// An internal error (a bug: please report it).
pub const SOFTWARE: i32 = 70;
/// An I/O error (writing the tape, reading stdin…).
pub const IO_ERR: i32 = 74;
