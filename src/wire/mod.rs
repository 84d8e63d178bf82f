//! The wire layer: framing a byte stream into messages, classifying them lightly, what a request
//! is about and its match key, canonical JSON for matching, the redaction marker grammar, and
//! the few byte-preserving rewrites play needs. It imports nothing of the crate above it.

pub mod canonical;
pub mod classify;
pub mod codec;
pub(crate) mod exact;
pub(crate) mod json_out;
pub(crate) mod json_scan;
pub mod jsonpath;
pub(crate) mod marker;
pub mod params;
pub(crate) mod rewrite;

pub use classify::{classify, head_facts, Classified, HeadFacts, Kind};
pub use codec::{Frame, Framer, Line, DEFAULT_MAX_MESSAGE};

/// Which way a message travelled. Ids are scoped by direction: the server's own request ids can
/// equal the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Dir {
    /// Client to server.
    #[serde(rename = "c2s")]
    C2S,
    /// Server to client.
    #[serde(rename = "s2c")]
    S2C,
}

impl Dir {
    /// An arrow for humans: `→` client to server, `←` server to client.
    pub fn arrow(self) -> &'static str {
        match self {
            Dir::C2S => "→",
            Dir::S2C => "←",
        }
    }

    /// The direction's name on the tape: `c2s` or `s2c`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::C2S => "c2s",
            Dir::S2C => "s2c",
        }
    }
}
