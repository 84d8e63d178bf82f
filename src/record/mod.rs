//! `mcptape record`: a proxy between a client and a server that tapes every message it forwards.
//! Over stdio (`stdio`: the server is a child process), Streamable HTTP / HTTP+SSE (`http`: a
//! reverse proxy in front of an upstream URL), or a stdio server put behind Streamable HTTP
//! (`bridge`). Every one of them tapes through the one [`Recorder`].

pub mod bridge;
pub mod http;
pub mod http_facts;
pub mod join;
pub mod recorder;
pub mod stdio;
pub mod tap;

pub use recorder::{Closed, RecordError, RecordOutcome, Recorder};
pub use stdio::{record_stdio, RecordConfig};
