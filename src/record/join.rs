//! One tape, many writers: the recorders an agent starts (one `mcptape record --join SOCKET`
//! per MCP server, each a process of its own) send what they read to the process that owns
//! the tape (`mcptape run`) over a Unix socket, and that one process writes every line. So
//! lines never interleave, the hash chain has one writer, nobody rescans the file, and framing
//! is the same code as a local recording's (the owner frames the raw chunks).
//!
//! A frame: one byte of type, one of direction (0 client→server, 1 server→client), a
//! little-endian u32 length, the payload. The first frame is `HELLO` (JSON: label, command,
//! cwd); `CHUNK` carries bytes as read, `FINISH` says a direction's stream ended, `WHOLE` one
//! whole message, `END` (JSON: exit, reason) the server's end.

use super::Recorder;
use crate::tape::{ExitInfo, ServerDecl};
use crate::wire::{Dir, Framer};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use tokio::io::AsyncReadExt;

const HELLO: u8 = 1;
const CHUNK: u8 = 2;
const FINISH: u8 = 3;
const WHOLE: u8 = 4;
const END: u8 = 5;

/// Largest frame accepted (a chunk is at most the relay's read size; a whole message may be
/// large).
const MAX_FRAME: usize = 1 << 30;

/// What a joining recorder says first.
#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    /// The server's label on the tape (its name in the agent's config).
    pub label: String,
    /// The server's command line.
    pub command: Vec<String>,
    /// Where it was started.
    pub cwd: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct EndFrame {
    exit: Option<ExitInfo>,
    reason: String,
}

fn dir_byte(dir: Dir) -> u8 {
    match dir {
        Dir::C2S => 0,
        Dir::S2C => 1,
    }
}

/// The joining side: a connection to the tape's owner.
pub(crate) struct JoinSink {
    stream: UnixStream,
}

impl JoinSink {
    /// Connects to the owner at `socket` and says who this server is.
    pub(crate) fn connect(socket: &Path, hello: &Hello) -> io::Result<JoinSink> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("joining the recording at {}: {e}", socket.display()),
            )
        })?;
        let mut sink = JoinSink { stream };
        let hello = serde_json::to_vec(hello).expect("a hello serializes");
        sink.send(HELLO, Dir::C2S, &hello)?;
        Ok(sink)
    }

    fn send(&mut self, kind: u8, dir: Dir, payload: &[u8]) -> io::Result<()> {
        let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("frame too large"))?;
        let mut head = [0u8; 6];
        head[0] = kind;
        head[1] = dir_byte(dir);
        head[2..].copy_from_slice(&len.to_le_bytes());
        // One write per frame when small (a chunk's head and bytes together).
        if payload.len() <= 64 * 1024 {
            let mut buf = Vec::with_capacity(6 + payload.len());
            buf.extend_from_slice(&head);
            buf.extend_from_slice(payload);
            self.stream.write_all(&buf)
        } else {
            self.stream.write_all(&head)?;
            self.stream.write_all(payload)
        }
    }

    pub(crate) fn chunk(&mut self, dir: Dir, bytes: &[u8]) -> io::Result<()> {
        self.send(CHUNK, dir, bytes)
    }

    pub(crate) fn finish(&mut self, dir: Dir) -> io::Result<()> {
        self.send(FINISH, dir, &[])
    }

    pub(crate) fn whole(&mut self, dir: Dir, bytes: &[u8]) -> io::Result<()> {
        self.send(WHOLE, dir, bytes)
    }

    pub(crate) fn end(&mut self, exit: Option<ExitInfo>, reason: String) -> io::Result<()> {
        let end = serde_json::to_vec(&EndFrame { exit, reason }).expect("an end serializes");
        self.send(END, Dir::S2C, &end)?;
        self.stream.shutdown(std::net::Shutdown::Write)
    }
}

/// The recorders joined and not yet gone, for the owner to wait on.
#[derive(Debug, Default)]
pub struct Joined {
    count: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Joined {
    /// Waits until no joined recorder is connected.
    pub async fn all_gone(&self) {
        loop {
            let changed = self.changed.notified();
            if self.count.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// The owner's side: tapes what every joined recorder sends, each under its own label, until
/// the task is dropped.
pub async fn serve(
    listener: tokio::net::UnixListener,
    tape: Recorder,
    joined: std::sync::Arc<Joined>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        // Cancel-safe: accept() loses nothing when the task is dropped.
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let tape = tape.clone();
        let joined = joined.clone();
        joined.count.fetch_add(1, SeqCst);
        tasks.spawn(async move {
            if let Err(e) = one(stream, tape).await {
                crate::diag!("mcptape: a joined recorder: {e}");
            }
            joined.count.fetch_sub(1, SeqCst);
            joined.changed.notify_waiters();
        });
        while tasks.try_join_next().is_some() {}
    }
}

async fn read_frame(stream: &mut tokio::net::UnixStream) -> io::Result<Option<(u8, Dir, Vec<u8>)>> {
    let mut head = [0u8; 6];
    match stream.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let dir = if head[1] == 0 { Dir::C2S } else { Dir::S2C };
    let len = u32::from_le_bytes(head[2..].try_into().expect("four bytes")) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await?;
    Ok(Some((head[0], dir, payload)))
}

/// One joined recorder, until it disconnects.
async fn one(mut stream: tokio::net::UnixStream, tape: Recorder) -> io::Result<()> {
    let Some((HELLO, _, hello)) = read_frame(&mut stream).await? else {
        return Err(io::Error::other("it did not say hello"));
    };
    let hello: Hello = serde_json::from_slice(&hello)
        .map_err(|e| io::Error::other(format!("a bad hello: {e}")))?;
    let tape = tape.server(&hello.label);
    tape.declare(ServerDecl {
        cwd: hello.cwd.clone(),
        ..ServerDecl::stdio(&hello.label, hello.command.clone())
    });
    let max = crate::wire::DEFAULT_MAX_MESSAGE;
    let mut framers = [Framer::new(max), Framer::new(max)];
    let at = |d: Dir| match d {
        Dir::C2S => 0,
        Dir::S2C => 1,
    };
    let mut ended = false;
    while let Some((kind, dir, payload)) = read_frame(&mut stream).await? {
        match kind {
            CHUNK => tape.chunk(&mut framers[at(dir)], dir, &payload),
            FINISH => tape.finish_framer(&mut framers[at(dir)], dir),
            WHOLE => tape.message(dir, &payload, None),
            END => {
                let end: EndFrame = serde_json::from_slice(&payload)
                    .map_err(|e| io::Error::other(format!("a bad end: {e}")))?;
                tape.event(
                    "server-exit",
                    serde_json::json!({"exit": end.exit, "reason": end.reason}),
                );
                ended = true;
            }
            other => return Err(io::Error::other(format!("an unknown frame type {other}"))),
        }
    }
    for d in [Dir::C2S, Dir::S2C] {
        tape.finish_framer(&mut framers[at(d)], d);
    }
    if !ended {
        tape.event(
            "server-exit",
            serde_json::json!({"reason": "the recorder went away without saying how the server ended"}),
        );
    }
    Ok(())
}
