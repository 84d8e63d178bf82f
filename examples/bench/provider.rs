//! `bench --serve-model ADDR`: a scripted streaming model API, the upstream of the model proxy
//! rows. `POST /v1/messages` (Anthropic Messages) is answered `text/event-stream`, chunked, with
//! the stream [`stream`] builds from the request's `bench` field: `message_start`,
//! `content_block_start`, `events` text deltas of `size` bytes, `content_block_stop`,
//! `message_delta`, `message_stop`. Each event goes out in a `write(2)` of its own (the first
//! with the response head), as a provider streams tokens. Keep-alive; any other request is 404.
//!
//! The client builds the same bytes from the same function and checks every byte it receives.

use crate::http::{loopback, runtime};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one streamed answer holds: `events` text deltas of `size` bytes of text each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub events: usize,
    pub size: usize,
}

/// Text of the deltas: prose, nothing for a redactor to take out.
const FILLER: &[u8] = b"the quick brown fox jumps over the lazy dog ";

impl Spec {
    /// Events in the whole stream: the deltas and the five around them.
    pub fn total(self) -> usize {
        self.events + 5
    }

    /// The request a client sends for this stream (what Claude Code sends, in short).
    pub fn request(self) -> Vec<u8> {
        format!(
            r#"{{"model":"bench-model","max_tokens":4096,"stream":true,"bench":{{"events":{},"size":{}}},"messages":[{{"role":"user","content":"stream please"}}]}}"#,
            self.events, self.size
        )
        .into_bytes()
    }

    /// Appends event `i` (0-based, below [`Spec::total`]) as it goes on the wire.
    pub fn event(self, i: usize, out: &mut Vec<u8>) {
        let last = self.total() - 1;
        let (name, data) = match i {
            0 => (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#.to_string(),
            ),
            1 => (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_string(),
            ),
            i if i == last - 2 => (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#.to_string(),
            ),
            i if i == last - 1 => (
                "message_delta",
                format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                    self.events
                ),
            ),
            i if i == last => ("message_stop", r#"{"type":"message_stop"}"#.to_string()),
            i => {
                let k = i - 2;
                let mut text = Vec::with_capacity(self.size);
                let offset = k % FILLER.len();
                while text.len() < self.size {
                    let src = if text.is_empty() { &FILLER[offset..] } else { FILLER };
                    let take = src.len().min(self.size - text.len());
                    text.extend_from_slice(&src[..take]);
                }
                (
                    "content_block_delta",
                    format!(
                        r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{}"}}}}"#,
                        String::from_utf8(text).expect("ASCII filler")
                    ),
                )
            }
        };
        let _ = write!(out, "event: {name}\ndata: {data}\n\n");
    }

    /// The whole stream, and the length of its first event.
    pub fn stream(self) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut first = 0;
        for i in 0..self.total() {
            self.event(i, &mut out);
            if i == 0 {
                first = out.len();
            }
        }
        (out, first)
    }
}

#[derive(Deserialize)]
struct Asked {
    bench: Spec,
}

pub fn serve(addr: &str) -> Result<i32> {
    let addr = loopback(addr)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{}", listener.local_addr()?)?;
        out.flush()?;
        drop(out);
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = connection(stream).await;
            });
        }
    })
}

/// One keep-alive connection: requests one after the other until the client closes.
async fn connection(mut s: tokio::net::TcpStream) -> Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut ev: Vec<u8> = Vec::with_capacity(1024);
    loop {
        let head_end = loop {
            if let Some(i) = memchr::memmem::find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if s.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let length = head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            if s.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let body = buf[head_end..head_end + length].to_vec();
        buf.drain(..head_end + length);
        let post = head.starts_with("POST ") && head.split(' ').nth(1) == Some("/v1/messages");
        let spec = match serde_json::from_slice::<Asked>(&body) {
            Ok(a) if post => a.bench,
            _ => {
                let why = b"not a bench stream request";
                let resp = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                    why.len()
                );
                s.write_all(resp.as_bytes()).await?;
                s.write_all(why).await?;
                continue;
            }
        };
        out.clear();
        out.extend_from_slice(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
              transfer-encoding: chunked\r\n\r\n",
        );
        for i in 0..spec.total() {
            ev.clear();
            spec.event(i, &mut ev);
            let _ = write!(out, "{:x}\r\n", ev.len());
            out.extend_from_slice(&ev);
            out.extend_from_slice(b"\r\n");
            if i + 1 == spec.total() {
                out.extend_from_slice(b"0\r\n\r\n");
            }
            s.write_all(&out).await?;
            out.clear();
        }
    }
}
