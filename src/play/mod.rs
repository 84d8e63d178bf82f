//! `mcptape play`: serve a tape as the server.

pub mod explain;
pub mod faults;
mod framing;
pub mod http;
pub mod live;
mod live_http;
pub mod matcher;
pub mod pace;
pub mod plan;
pub mod player;
pub mod policy;
pub mod select;
pub mod serve;
pub mod usage;

pub use live::{LiveConfig, LiveTape, LiveTarget, OnMiss};
pub use plan::{Injected, Plan};
pub use player::{Player, Playing};
pub use policy::{MatchMode, MatchPolicy, Repeat};
pub use serve::{serve, Drift, PlayReport, ServeOptions, Unused};

/// A serving task that panicked lost an answer, so play must not end as if all went well:
/// play counts panics (tokio catches a task's panic and the task just ends).
pub use crate::exit::{count_panics, panics};

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
    /// `--require-chain`, and the tape's hash chain is missing or does not hold (exit 65).
    #[error("{}: refusing to play it (--require-chain): {why}", path.display())]
    Unchecked {
        /// The tape.
        path: std::path::PathBuf,
        /// What is wrong with its chain, in words.
        why: String,
    },
}

impl crate::exit::Coded for PlayError {
    fn exit_code(&self) -> i32 {
        match self {
            PlayError::Listen { .. } => crate::exit::UNAVAILABLE,
            PlayError::Unchecked { .. } => crate::exit::DATA_ERR,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panic_in_a_task_is_counted() {
        super::count_panics();
        let before = super::panics();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let joined = rt.block_on(async { tokio::spawn(async { panic!("a serving bug") }).await });
        assert!(joined.is_err());
        assert!(super::panics() > before);
    }
}
