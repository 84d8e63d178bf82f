//! Transports: each turns its traffic into the same framed messages (with transport facts kept
//! beside them), so record, play, check and diff never care how a message travelled. One file
//! per transport: the stdio child process, Streamable HTTP (server pieces), the SSE codec, the
//! client the HTTP proxies forward with (and the model proxy's own HTTP/1.1 client), an MCP
//! client's POST, and the content codings a client may compress a request body with.

pub(crate) mod coding;
pub(crate) mod h1_client;
pub mod http;
pub(crate) mod post;
pub mod sse;
pub mod stdio;
#[cfg(test)]
mod test_upstream;
pub mod upstream;
