//! The model proxy rows' client: one keep-alive HTTP/1.1 connection, `POST /v1/messages` asking
//! for a stream, the answer read as it arrives and checked byte for byte against the stream the
//! bench provider sends (a wrong byte, a missing event or a wrong status is an error, not a
//! number). Times the response head, the first complete event and the end of the stream.

use crate::provider::Spec;
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// When the parts of one streamed answer arrived, from the request's write.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub head: Duration,
    pub first_event: Duration,
    pub end: Duration,
}

pub struct ModelConn {
    name: String,
    stream: TcpStream,
    host: String,
    rbuf: Vec<u8>,
    pos: usize,
    spec: Option<Spec>,
    expected: Vec<u8>,
    first_len: usize,
}

impl ModelConn {
    /// Connects to the base URL `url` (`http://host:port`, any path ignored).
    pub fn connect(name: &str, url: &str) -> Result<ModelConn> {
        let host = crate::http::authority(url)?;
        let stream =
            TcpStream::connect(&host).with_context(|| format!("{name}: connecting to {host}"))?;
        stream.set_nodelay(true)?;
        Ok(ModelConn {
            name: name.to_string(),
            stream,
            host,
            rbuf: Vec::with_capacity(256 * 1024),
            pos: 0,
            spec: None,
            expected: Vec::new(),
            first_len: 0,
        })
    }

    /// Bytes buffered and not yet consumed.
    fn avail(&self) -> usize {
        self.rbuf.len() - self.pos
    }

    /// Reads more bytes; EOF is an error (the answer was not complete).
    fn fill(&mut self) -> Result<()> {
        if self.pos == self.rbuf.len() {
            self.rbuf.clear();
            self.pos = 0;
        } else if self.pos > 128 * 1024 {
            self.rbuf.drain(..self.pos);
            self.pos = 0;
        }
        let at = self.rbuf.len();
        self.rbuf.resize(at + 64 * 1024, 0);
        let n = loop {
            match self.stream.read(&mut self.rbuf[at..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let n = n.with_context(|| format!("{}: reading the answer", self.name))?;
        self.rbuf.truncate(at + n);
        if n == 0 {
            bail!(
                "{}: the connection closed before the answer ended",
                self.name
            );
        }
        Ok(())
    }

    /// Index just past the next `pat` at or after `pos`, reading as needed.
    fn find(&mut self, pat: &[u8]) -> Result<usize> {
        loop {
            if let Some(i) = memchr::memmem::find(&self.rbuf[self.pos..], pat) {
                return Ok(self.pos + i + pat.len());
            }
            self.fill()?;
        }
    }

    /// Asks for the stream `spec` and reads it whole, checking every byte.
    pub fn stream(&mut self, spec: Spec) -> Result<Timing> {
        if self.spec != Some(spec) {
            (self.expected, self.first_len) = spec.stream();
            self.spec = Some(spec);
        }
        let body = spec.request();
        let mut req = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             accept: text/event-stream\r\nx-api-key: sk-bench-not-a-key\r\n\
             anthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        let t0 = Instant::now();
        self.stream
            .write_all(&req)
            .with_context(|| format!("{}: sending the request", self.name))?;
        let head_end = self.find(b"\r\n\r\n")?;
        let head_at = t0.elapsed();
        let head = String::from_utf8_lossy(&self.rbuf[self.pos..head_end]).to_string();
        self.pos = head_end;
        let status = head.split(' ').nth(1).unwrap_or("");
        let header = |name: &str| {
            head.split("\r\n")
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
        };
        if status != "200" {
            bail!("{}: answered {status}: {head:?}", self.name);
        }
        if !header("content-type").is_some_and(|c| c.starts_with("text/event-stream")) {
            bail!("{}: not an event stream: {head:?}", self.name);
        }
        let chunked = header("transfer-encoding").is_some_and(|t| t.contains("chunked"));
        let mut got = 0usize;
        let mut first_at = None;
        let mut take = |this: &mut ModelConn, mut left: usize| -> Result<()> {
            while left > 0 {
                if this.avail() == 0 {
                    this.fill()?;
                }
                let n = left.min(this.avail());
                let part = &this.rbuf[this.pos..this.pos + n];
                let want = this.expected.get(got..got + n);
                if want != Some(part) {
                    let at = got
                        + part
                            .iter()
                            .zip(want.unwrap_or(&[]))
                            .take_while(|(a, b)| a == b)
                            .count();
                    bail!(
                        "{}: the stream differs from the provider's at byte {at} of {}: got {:?}",
                        this.name,
                        this.expected.len(),
                        String::from_utf8_lossy(&part[(at - got).min(part.len())..][..n.min(80)])
                    );
                }
                got += n;
                this.pos += n;
                left -= n;
                if first_at.is_none() && got >= this.first_len {
                    first_at = Some(t0.elapsed());
                }
            }
            Ok(())
        };
        if chunked {
            loop {
                let end = self.find(b"\r\n")?;
                let line = String::from_utf8_lossy(&self.rbuf[self.pos..end - 2]).to_string();
                let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                    .with_context(|| format!("{}: a bad chunk size {line:?}", self.name))?;
                self.pos = end;
                if size == 0 {
                    self.pos = self.find(b"\r\n")?; // no trailers are sent
                    break;
                }
                take(self, size)?;
                self.pos = self.find(b"\r\n")?;
            }
        } else {
            let length = header("content-length")
                .and_then(|l| l.parse::<usize>().ok())
                .with_context(|| format!("{}: neither chunked nor a length", self.name))?;
            take(self, length)?;
        }
        let end = t0.elapsed();
        if got != self.expected.len() {
            bail!(
                "{}: the stream ended after {got} of {} bytes",
                self.name,
                self.expected.len()
            );
        }
        Ok(Timing {
            head: head_at,
            first_event: first_at.unwrap_or(end),
            end,
        })
    }
}
