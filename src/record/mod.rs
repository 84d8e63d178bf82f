//! `mcptape record`: a proxy between a client and a server that tapes every message it forwards.
//! Over stdio (`stdio`: the server is a child process) or Streamable HTTP / HTTP+SSE (`http`: a
//! reverse proxy in front of an upstream URL).

pub mod bridge;
pub mod http;
pub(crate) mod stdio;

pub use stdio::{record_stdio, shell_words, RecordConfig, RecordError, RecordOutcome};
