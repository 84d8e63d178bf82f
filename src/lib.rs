//! mcptape: a tape recorder for the Model Context Protocol.
//!
//! Layout: [`wire`] frames and classifies messages; [`tape`] writes, reads and indexes tapes;
//! [`record`] is the stdio recording proxy; [`play`] serves a tape as the server; [`inspect`]
//! lists and shows tapes; [`demo`] is the bundled demo. The binary (`main.rs`, `cli/`) only parses
//! arguments and maps results to exit codes ([`exit`]).

/// A diagnostic line on stderr. Unlike `eprintln!`, a closed or broken stderr is not a panic:
/// diagnostics must never stop a proxy from forwarding or a player from answering.
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub mod check;
pub mod compare;
pub mod config;
pub mod demo;
pub mod diff;
pub mod exit;
pub mod inspect;
pub mod integrity;
pub mod play;
pub mod record;
pub mod redact;
pub mod report;
pub mod tape;
pub mod transport;
pub mod wire;
