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
    ($($arg:tt)*) => {
        $crate::write_diag(&mut std::io::stderr().lock(), format_args!($($arg)*))
    };
}
pub(crate) use diag;

/// Writes one diagnostic line (`args` and a newline) to `out` in one `write` call. stderr is
/// unbuffered: `writeln!` on it makes a `write(2)` of every piece of the format (a line of a
/// play report was eleven), and the mcptape processes of one `mcptape run` (the proxy, a
/// recorder per MCP server) share the agent's stderr, so their lines interleaved mid-line. One
/// `write(2)` of up to `PIPE_BUF` (4 KiB) bytes to a pipe is never interleaved with another's.
/// A failed write is ignored, as `diag!` promises. Public for the binary's own `diag!`.
#[doc(hidden)]
pub fn write_diag(out: &mut dyn std::io::Write, args: std::fmt::Arguments<'_>) {
    let mut line = std::fmt::format(args);
    line.push('\n');
    let _ = out.write_all(line.as_bytes());
}

#[cfg(test)]
mod diag_tests {
    /// Records each `write` call it gets.
    #[derive(Default)]
    struct Calls(Vec<Vec<u8>>);

    impl std::io::Write for Calls {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_diagnostic_line_is_one_write() {
        let mut out = Calls::default();
        let (line, method) = (52, "tools/call");
        super::write_diag(
            &mut out,
            format_args!("  tape line {line:>5}  {method} {}", "echo {\"n\":23}"),
        );
        assert_eq!(
            out.0,
            vec![b"  tape line    52  tools/call echo {\"n\":23}\n".to_vec()]
        );
    }
}

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
