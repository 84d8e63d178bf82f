#![warn(missing_docs)]
//! mcptape: a tape recorder for the Model Context Protocol.
//!
//! It sits between an MCP client and an MCP server, tapes every message that crosses, and later
//! serves the tape as the server ([`play`]), replays its client side against a new build
//! ([`check`]), or compares two tapes ([`diff`]).
//!
//! # Layout
//!
//! The modules form layers; each uses only the ones below it (checked by a test, drawn in
//! `docs/architecture.md`):
//!
//! * [`exit`] — the exit codes and the [`exit::Coded`] trait every error implements. A leaf.
//! * [`wire`] — bytes to framed messages and their JSON-RPC facts: the line codec, the
//!   classifier, ids and params, match keys, canonical JSON, id and token rewriting, the
//!   redaction marker's grammar. Uses nothing above it.
//! * [`transport`] — one file per transport: the stdio child (spawn, grace, signals), the HTTP
//!   pieces (listener, bodies, limits), the SSE codec.
//! * [`redact`] — the rules that take secrets out of a message, byte-faithfully.
//! * [`tape`] — the tape format: writing (hash-chained, redacted), reading, indexing into
//!   exchanges, the store of named tapes.
//! * [`record`] — the [`Recorder`](record::Recorder) every transport feeds, and one record
//!   function per transport: [`record_stdio`](record::record_stdio),
//!   [`record_http`](record::http::record_http), [`record_bridge`](record::bridge::record_bridge).
//! * [`play`] — a tape served as the server, over stdio ([`serve`](fn@play::serve)) or HTTP.
//! * [`compare`] and [`check`] — how two answers differ; the recorded client side driven
//!   against a live server ([`check::check`]) and graded.
//! * [`export`] — a tape as OpenTelemetry traces (OTLP/JSON or protobuf, to a file or an
//!   OTLP/HTTP endpoint).
//! * [`diff`], [`report`], [`inspect`], [`integrity`], [`config`], [`demo`] — the commands'
//!   library halves; [`errors::exit_code`] maps any of the library's errors to its exit code.
//!
//! The library never takes over the process: its entry points are `async` functions that run
//! on the caller's tokio runtime, take their shutdown as a future (or, for stdio, a channel of
//! signals to forward), and return a typed outcome. The binary (`main.rs`, `cli/`) owns the
//! runtime, the signal handlers and the exit codes.
//!
//! # Record and play in-process
//!
//! ```
//! use mcptape::play::{serve, ServeOptions};
//! use mcptape::record::{record_stdio, RecordConfig};
//! use mcptape::tape::{TapeIndex, WriteOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let tape = dir.path().join("hello.jsonl");
//! let rt = tokio::runtime::Runtime::new()?;
//!
//! // Record: a one-answer server (reads a request, answers it, exits) and a client that sends
//! // one request and closes.
//! let server = r#"read request; echo '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'"#;
//! let command = vec!["sh".into(), "-c".into(), server.into()];
//! let cfg = RecordConfig::new(tape.clone(), command, WriteOptions::redacted());
//! let request = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
//! let (_signals_in, signals) = tokio::sync::mpsc::unbounded_channel();
//! let recorded = rt.block_on(record_stdio(
//!     &cfg,
//!     std::io::Cursor::new(request),
//!     std::io::sink(),
//!     signals,
//! ))?;
//! assert_eq!(recorded.end.messages, 2);
//!
//! // Play: no server at all; the tape answers the same request with the recorded bytes.
//! let index = TapeIndex::load(&tape, None)?;
//! let answers = dir.path().join("answers");
//! let report = rt.block_on(serve(
//!     index,
//!     ServeOptions::default(),
//!     std::io::Cursor::new(request),
//!     std::fs::File::create(&answers)?,
//! ));
//! assert_eq!(report.served, 1);
//! assert_eq!(
//!     std::fs::read_to_string(&answers)?,
//!     "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[]}}\n"
//! );
//! # Ok(())
//! # }
//! ```

/// A diagnostic line on stderr. Unlike `eprintln!`, a closed or broken stderr is not a panic:
/// diagnostics must never stop a proxy from forwarding or a player from answering.
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use diag;

pub mod check;
pub mod compare;
pub mod config;
pub mod demo;
pub mod diff;
pub mod errors;
pub mod exit;
pub mod export;
#[doc(hidden)]
pub mod fuzz_api;
pub mod import;
pub mod inspect;
pub mod integrity;
#[cfg(test)]
mod layers;
pub mod model;
pub mod play;
pub mod record;
pub mod redact;
pub mod remote;
pub mod report;
pub mod run;
pub mod stats;
pub mod tape;
pub mod transport;
pub mod wire;
