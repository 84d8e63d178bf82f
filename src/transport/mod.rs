//! Transports: each turns its traffic into the same framed messages (with transport facts kept
//! beside them), so record, play, check and diff never care how a message travelled.

pub mod http;
pub mod sse;
