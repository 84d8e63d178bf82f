//! `mcptape play`: serve a tape as the server.

pub mod explain;
pub mod http;
pub mod matcher;
pub mod serve;

pub use serve::{serve, Drift, PlayReport, ServeOptions, Unused};

/// Why play could not serve.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    /// The listening socket could not be opened (exit 69).
    #[error("could not listen on {addr}")]
    Listen {
        /// Where.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for PlayError {
    fn exit_code(&self) -> i32 {
        match self {
            PlayError::Listen { .. } => crate::exit::UNAVAILABLE,
        }
    }
}
