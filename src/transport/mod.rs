//! Transports: each turns its traffic into the same framed messages (with transport facts kept
//! beside them), so record, play, check and diff never care how a message travelled. One file
//! per transport: the stdio child process, Streamable HTTP (server pieces), the SSE codec, the
//! client the HTTP proxies forward with, and an MCP client's POST.

pub mod http;
pub(crate) mod post;
pub mod sse;
pub mod stdio;
pub mod upstream;
