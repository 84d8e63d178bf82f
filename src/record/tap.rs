//! Recording in-process: [`Tap`] wraps the client's end of any byte stream to an MCP server
//! (a `tokio::io::duplex`, a socket, a pipe pair) and tapes what crosses it, line by line, as
//! `record` does on stdio — for a test that runs client and server in one process.
//!
//! ```
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use mcptape::record::{tap::Tap, Recorder};
//! use mcptape::tape::{TapeWriter, WriteOptions, DEFAULT_SERVER};
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
//! let dir = tempfile::tempdir()?;
//! let rec = Recorder::new(
//!     TapeWriter::create(&dir.path().join("t.jsonl"), WriteOptions::redacted())?,
//!     DEFAULT_SERVER,
//! );
//! let (client_end, mut server_end) = tokio::io::duplex(64 * 1024);
//! let mut client = Tap::new(client_end, rec.clone());
//! client.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n").await?;
//! // The server (here, by hand) answers.
//! server_end.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").await?;
//! let mut line = String::new();
//! tokio::io::BufReader::new(&mut client).read_line(&mut line).await?;
//! client.finish();
//! rec.close(None, "done".into())?;
//! # Ok(())
//! # }
//! # tokio::runtime::Runtime::new().unwrap().block_on(example()).unwrap();
//! ```

use super::Recorder;
use crate::wire::{Dir, Framer, DEFAULT_MAX_MESSAGE};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's end of a stream to a server, taped: what the client writes is taped as
/// client→server, what it reads as server→client, in whole lines.
pub struct Tap<S> {
    inner: S,
    rec: Recorder,
    c2s: Framer,
    s2c: Framer,
    finished: bool,
}

impl<S> Tap<S> {
    /// Tapes `inner` onto `rec` (its server label is the one the lines carry).
    pub fn new(inner: S, rec: Recorder) -> Tap<S> {
        Tap {
            inner,
            rec,
            c2s: Framer::new(DEFAULT_MAX_MESSAGE),
            s2c: Framer::new(DEFAULT_MAX_MESSAGE),
            finished: false,
        }
    }

    /// Tapes what is left of an unterminated last line in either direction. Dropping the tap
    /// does the same.
    pub fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.rec.finish_framer(&mut self.c2s, Dir::C2S);
            self.rec.finish_framer(&mut self.s2c, Dir::S2C);
        }
    }
}

impl<S> Drop for Tap<S> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                this.rec.chunk(&mut this.s2c, Dir::S2C, new);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        // Taped once written: what the stream took is what the server will get.
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                this.rec.chunk(&mut this.c2s, Dir::C2S, &buf[..n]);
            }
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
