//! A tape played in-process, for the tests of an MCP client: [`Player`] serves the tape on a
//! fresh pair of pipes and hands the client its two ends (async, for tokio), as a child
//! process's stdio would be — with no child process. The client closing its end ends the play,
//! and its [`PlayReport`] says what was served and missed.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let playing = mcptape::play::Player::open("tests/tapes/session.jsonl".as_ref())?.start()?;
//! // An rmcp client: `().serve((playing.from_server, playing.to_server)).await?`; here, by hand:
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
//! let mut to_server = playing.to_server;
//! to_server.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n").await?;
//! let mut lines = tokio::io::BufReader::new(playing.from_server).lines();
//! let answer = lines.next_line().await?;
//! drop(to_server); // end of the session
//! let report = playing.done.await?;
//! assert_eq!(report.missed, 0);
//! # let _ = answer;
//! # Ok(())
//! # }
//! ```

use super::{serve, PlayReport, ServeOptions};
use crate::tape::{TapeError, TapeIndex};
use std::fs::File;
use std::path::Path;
use tokio::net::unix::pipe;

/// A tape ready to be served in-process.
pub struct Player {
    index: TapeIndex,
    opts: ServeOptions,
}

/// A play under way: the client's ends of its pipes, and the play itself.
pub struct Playing {
    /// What the client writes: its messages to the server, one per line.
    pub to_server: pipe::Sender,
    /// What the client reads: the server's messages, one per line.
    pub from_server: pipe::Receiver,
    /// The play; it ends when the client closes `to_server`.
    pub done: tokio::task::JoinHandle<PlayReport>,
}

impl Player {
    /// The tape at `path` (its first server, or the one of a single-server tape), played strictly.
    pub fn open(path: &Path) -> Result<Player, TapeError> {
        Ok(Player::from_index(TapeIndex::load(path, None)?))
    }

    /// A tape already loaded (`TapeIndex::load(path, Some(label))` for another server of it).
    pub fn from_index(index: TapeIndex) -> Player {
        Player {
            index,
            opts: ServeOptions::default(),
        }
    }

    /// How to serve (e.g. lenient, a shorter answer timeout).
    pub fn options(mut self, opts: ServeOptions) -> Player {
        self.opts = opts;
        self
    }

    /// Starts serving on a new pair of pipes, on the current tokio runtime.
    pub fn start(self) -> std::io::Result<Playing> {
        let (to_server, server_in) = pipe::pipe()?;
        let (server_out, from_server) = pipe::pipe()?;
        // The player's ends are read and written by blocking I/O on threads of its own, as
        // stdio is.
        let input = File::from(server_in.into_blocking_fd()?);
        let output = File::from(server_out.into_blocking_fd()?);
        let done = tokio::spawn(serve(self.index, self.opts, input, output));
        Ok(Playing {
            to_server,
            from_server,
            done,
        })
    }
}
