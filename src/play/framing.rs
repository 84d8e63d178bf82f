//! How play's lines go out as SSE events over HTTP: the recorded message's event id and name
//! where a line replays one, the transport's default otherwise; and the session's own stream,
//! whose lines carry that framing with them (over stdio it is not written).

use super::serve::Sink;
use crate::tape::index::{MsgMeta, SseName};
use std::future::Future;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// How a line goes out as an SSE event.
#[derive(Debug, Clone)]
pub(crate) struct Framing {
    pub(crate) event_id: Option<String>,
    /// The `event:` name to write: the recorded one, none where the recorded event had none.
    pub(crate) name: Option<SseName>,
    /// Recorded on a GET stream (a resumed one, or the session's own).
    pub(crate) on_get: bool,
}

impl Framing {
    /// A line that replays no recorded message is play's own (an error it answers with, a live
    /// server's message): named as the transport's default.
    pub(crate) fn ours() -> Framing {
        Framing {
            event_id: None,
            name: Some(SseName::Message),
            on_get: false,
        }
    }

    /// How `recorded` was framed. A message recorded in an SSE event goes out named as it was;
    /// one recorded otherwise (a JSON answer, a stdio tape) as the transport's default,
    /// `message`.
    pub(crate) fn of(recorded: &MsgMeta) -> Framing {
        let http = recorded.http.as_ref();
        Framing {
            event_id: http.and_then(|h| h.event_id.clone()),
            name: if recorded.sse {
                http.and_then(|h| h.event.clone())
            } else {
                Some(SseName::Message)
            },
            on_get: http.is_some_and(|h| h.on_get),
        }
    }
}

impl Framing {
    /// `data` as an SSE event framed so.
    pub(crate) fn event(&self, data: &str) -> bytes::Bytes {
        bytes::Bytes::from(crate::transport::sse::encode(
            self.name.as_ref().map(SseName::as_str),
            self.event_id.as_deref(),
            data,
        ))
    }
}

/// A line for a session's own stream (stdout over stdio; over HTTP the session's GET stream),
/// its terminator included, with how the recorded message it replays was framed, if it
/// replays one.
pub(crate) struct OutLine {
    pub(crate) line: Vec<u8>,
    pub(crate) framing: Option<Framing>,
}

/// Sends `line` (a terminator added) to a session's own stream as play's own.
pub(crate) async fn send(out: &mpsc::Sender<OutLine>, line: Vec<u8>) {
    send_framed(out, line, None).await
}

async fn send_framed(out: &mpsc::Sender<OutLine>, mut line: Vec<u8>, framing: Option<Framing>) {
    line.push(b'\n');
    let _ = out.send(OutLine { line, framing }).await;
}

impl Sink for mpsc::Sender<OutLine> {
    fn emit(&self, line: Vec<u8>) -> impl Future<Output = ()> + Send {
        send(self, line)
    }
}

/// A session's own stream, for one task that replays recorded messages onto it: `before`
/// notes a recorded message, and the next `emit` carries its framing. One per task, so no
/// other task's line can come between the two.
pub(crate) struct OwnStream<'a> {
    out: &'a mpsc::Sender<OutLine>,
    next: Mutex<Option<Framing>>,
}

impl<'a> OwnStream<'a> {
    pub(crate) fn new(out: &'a mpsc::Sender<OutLine>) -> OwnStream<'a> {
        OwnStream {
            out,
            next: Mutex::new(None),
        }
    }
}

impl Sink for OwnStream<'_> {
    fn emit(&self, line: Vec<u8>) -> impl Future<Output = ()> + Send {
        let framing = self.next.lock().expect("framing lock").take();
        send_framed(self.out, line, framing)
    }

    fn before(&self, recorded: &MsgMeta) -> impl Future<Output = ()> + Send {
        *self.next.lock().expect("framing lock") = Some(Framing::of(recorded));
        std::future::ready(())
    }
}
