//! The benchmark's Streamable HTTP client: plain HTTP/1.1 over keep-alive loopback connections,
//! one `POST` per message, every answer checked byte for byte (falling back to a JSON
//! comparison) like the stdio client. A wrong answer is an error, not a number. Also the
//! processes that print their URL first (`bench --serve-http`, `--relay-http`, `mcptape record
//! --url`, `mcptape play --listen`).

use crate::client::{short, WINDOW};
use crate::proto;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a started process is told to stop.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// Its stdin is closed (the bench's own modes).
    CloseStdin,
    /// SIGINT (mcptape's HTTP modes).
    Interrupt,
}

/// A process that prints the URL it serves as its first stdout line.
pub struct Served {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    pub url: String,
    stderr_path: PathBuf,
    stop: Stop,
}

impl Served {
    pub fn spawn(
        name: &str,
        cmd: &[String],
        cwd: &Path,
        stderr_path: &Path,
        stop: Stop,
    ) -> Result<Served> {
        let (program, args) = cmd.split_first().context("empty command")?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr_path)?)
            .spawn()
            .with_context(|| format!("starting {}", cmd.join(" ")))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let _ = tx.send(first);
            let _ = std::io::copy(&mut r, &mut std::io::sink()); // nothing else is expected
        });
        let mut served = Served {
            name: name.to_string(),
            child,
            stdin,
            url: String::new(),
            stderr_path: stderr_path.to_path_buf(),
            stop,
        };
        let first = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        if !first.starts_with("http://") || !first.ends_with('\n') {
            bail!(
                "{name}: printed no URL first (got {first:?}){}",
                stderr_tail(&served.stderr_path)
            );
        }
        served.url = first.trim_end().to_string();
        Ok(served)
    }

    /// Starts `cmd`, which listens on loopback `port` and prints no URL (mcp-recorder): ready
    /// when a connection to the port succeeds.
    pub fn spawn_on_port(
        name: &str,
        cmd: &[String],
        cwd: &Path,
        stderr_path: &Path,
        port: u16,
    ) -> Result<Served> {
        let (program, args) = cmd.split_first().context("empty command")?;
        let child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(stderr_path.with_extension("stdout"))?)
            .stderr(std::fs::File::create(stderr_path)?)
            .spawn()
            .with_context(|| format!("starting {}", cmd.join(" ")))?;
        let mut served = Served {
            name: name.to_string(),
            child,
            stdin: None,
            url: format!("http://127.0.0.1:{port}/mcp"),
            stderr_path: stderr_path.to_path_buf(),
            stop: Stop::Interrupt,
        };
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = served.child.try_wait()? {
                bail!(
                    "{name}: exited ({st}) before listening{}",
                    stderr_tail(stderr_path)
                );
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{name}: not listening on {port} after 60 s{}",
                    stderr_tail(stderr_path)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(served)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// VmHWM (peak RSS) of the process so far, in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        crate::mem::status_kib(self.pid(), "VmHWM:").map(|k| k * 1024)
    }

    /// Stops the process and waits for a clean exit (status 0), killing it after `grace`.
    pub fn finish(mut self, grace: Duration) -> Result<()> {
        match self.stop {
            Stop::CloseStdin => drop(self.stdin.take()),
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            Stop::Interrupt => unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
            },
        }
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!(
                        "{}: exited with {status}{}",
                        self.name,
                        stderr_tail(&self.stderr_path)
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: did not exit within {grace:?} of being stopped",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn stderr_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut tail: Vec<&str> = text.lines().rev().take(8).collect();
    if tail.is_empty() {
        return String::new();
    }
    tail.reverse();
    format!("; its stderr ends:\n  {}", tail.join("\n  "))
}

/// `(host:port, /path)` of an `http://` URL.
fn split_url(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?} is not an http:// URL"))?;
    Ok(match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    })
}

/// What a response said besides its body.
struct Head {
    status: u16,
    json: bool,
    session: Option<String>,
}

/// One keep-alive connection.
pub struct HttpConn {
    name: String,
    stream: TcpStream,
    host: String,
    path: String,
    session: Option<String>,
    req: Vec<u8>,
    payload: Vec<u8>,
    /// Bytes read and not yet consumed start at `pos`.
    rbuf: Vec<u8>,
    pos: usize,
    body: Vec<u8>,
    expected: Vec<u8>,
}

impl HttpConn {
    pub async fn connect(name: &str, url: &str, session: Option<String>) -> Result<HttpConn> {
        let (host, path) = split_url(url)?;
        let stream = TcpStream::connect(&host)
            .await
            .with_context(|| format!("{name}: connecting to {host}"))?;
        stream.set_nodelay(true)?;
        Ok(HttpConn {
            name: name.to_string(),
            stream,
            host,
            path,
            session,
            req: Vec::with_capacity(4096),
            payload: Vec::with_capacity(4096),
            rbuf: Vec::with_capacity(64 * 1024),
            pos: 0,
            body: Vec::new(),
            expected: Vec::new(),
        })
    }

    pub fn session(&self) -> Option<String> {
        self.session.clone()
    }

    /// POSTs `self.payload`; the answer's body lands in `self.body`.
    async fn post(&mut self) -> Result<Head> {
        use std::io::Write as _;
        self.req.clear();
        write!(
            self.req,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.path,
            self.host,
            self.payload.len()
        )?;
        if let Some(s) = &self.session {
            write!(
                self.req,
                "Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: {}\r\n",
                proto::PROTOCOL
            )?;
        }
        self.req.extend_from_slice(b"\r\n");
        self.req.extend_from_slice(&self.payload);
        self.stream
            .write_all(&self.req)
            .await
            .with_context(|| format!("{}: sending a request", self.name))?;
        self.read_response().await
    }

    /// Reads more bytes into `rbuf`; EOF is an error (an answer was due).
    async fn fill(&mut self) -> Result<()> {
        self.rbuf.reserve(64 * 1024);
        let n = self
            .stream
            .read_buf(&mut self.rbuf)
            .await
            .with_context(|| format!("{}: reading an answer", self.name))?;
        if n == 0 {
            bail!("{}: the connection closed before the answer", self.name);
        }
        Ok(())
    }

    /// Index (absolute) just past the next `\r\n` at or after `pos`, reading as needed.
    async fn line_end(&mut self, pat: &[u8]) -> Result<usize> {
        loop {
            if let Some(i) = memchr::memmem::find(&self.rbuf[self.pos..], pat) {
                return Ok(self.pos + i + pat.len());
            }
            self.fill().await?;
        }
    }

    async fn read_response(&mut self) -> Result<Head> {
        if self.pos == self.rbuf.len() {
            self.rbuf.clear();
        } else {
            self.rbuf.drain(..self.pos);
        }
        self.pos = 0;
        let head_end = self.line_end(b"\r\n\r\n").await?;
        let head = std::str::from_utf8(&self.rbuf[..head_end])
            .with_context(|| format!("{}: a response head that is not UTF-8", self.name))?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("{}: a bad status line in {head:?}", self.name))?;
        let (mut length, mut chunked, mut json, mut session) = (None, false, false, None);
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "content-type" => json = v.starts_with("application/json"),
                "mcp-session-id" => session = Some(v.to_string()),
                _ => {}
            }
        }
        self.pos = head_end;
        self.body.clear();
        if chunked {
            self.read_chunked().await?;
        } else {
            let length = match length {
                Some(n) => n,
                None if matches!(status, 202 | 204) => 0,
                None => bail!("{}: an answer with no length: {head:?}", self.name),
            };
            while self.rbuf.len() - self.pos < length {
                self.fill().await?;
            }
            self.body
                .extend_from_slice(&self.rbuf[self.pos..self.pos + length]);
            self.pos += length;
        }
        Ok(Head {
            status,
            json,
            session,
        })
    }

    async fn read_chunked(&mut self) -> Result<()> {
        loop {
            let end = self.line_end(b"\r\n").await?;
            let line = std::str::from_utf8(&self.rbuf[self.pos..end - 2]).unwrap_or("");
            let hex = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(hex, 16)
                .with_context(|| format!("{}: a bad chunk size {line:?}", self.name))?;
            self.pos = end;
            if size == 0 {
                // Trailers, if any, end with an empty line.
                loop {
                    let end = self.line_end(b"\r\n").await?;
                    let empty = end - self.pos == 2;
                    self.pos = end;
                    if empty {
                        return Ok(());
                    }
                }
            }
            while self.rbuf.len() - self.pos < size + 2 {
                self.fill().await?;
            }
            self.body
                .extend_from_slice(&self.rbuf[self.pos..self.pos + size]);
            self.pos += size + 2;
        }
    }

    /// `initialize` (answer checked, session id kept), then `notifications/initialized` (202).
    pub async fn handshake(&mut self) -> Result<()> {
        self.payload = proto::initialize_request(0);
        let head = self.post().await?;
        if head.status != 200 || !head.json {
            bail!(
                "{}: initialize answered {} (JSON: {}): {}",
                self.name,
                head.status,
                head.json,
                short(&self.body)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&self.body)
            .with_context(|| format!("{}: initialize answer is not JSON", self.name))?;
        if v["id"] != 0 || v["result"]["protocolVersion"] != proto::PROTOCOL {
            bail!(
                "{}: wrong initialize answer: {}",
                self.name,
                short(&self.body)
            );
        }
        self.session = head.session;
        self.payload = proto::initialized_notification();
        let head = self.post().await?;
        if head.status != 202 {
            bail!(
                "{}: notifications/initialized answered {}, not 202",
                self.name,
                head.status
            );
        }
        Ok(())
    }

    /// One `tools/call` of `echo`; returns the answer's length. Call `check` afterwards.
    pub async fn call(&mut self, id: u64, size: usize) -> Result<usize> {
        self.payload.clear();
        proto::call_request(&mut self.payload, id, size);
        let head = self.post().await?;
        if head.status != 200 || !head.json {
            bail!(
                "{}: call {id} answered {} (JSON: {}): {}",
                self.name,
                head.status,
                head.json,
                short(&self.body)
            );
        }
        Ok(self.body.len())
    }

    /// Checks the last answer against what the bench server answers to call `id`.
    pub fn check(&mut self, id: u64, size: usize) -> Result<()> {
        crate::client::check_answer(&self.name, &self.body, &mut self.expected, id, size)
    }

    /// `DELETE` of the session; returns the status.
    pub async fn delete(&mut self) -> Result<u16> {
        use std::io::Write as _;
        let session = self.session.clone().context("no session to delete")?;
        self.req.clear();
        write!(
            self.req,
            "DELETE {} HTTP/1.1\r\nHost: {}\r\nMcp-Session-Id: {session}\r\nContent-Length: 0\r\n\r\n",
            self.path, self.host
        )?;
        self.stream
            .write_all(&self.req)
            .await
            .with_context(|| format!("{}: sending DELETE", self.name))?;
        Ok(self.read_response().await?.status)
    }
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A session on one connection: the handshake, then `calls` sequential round trips (ids from
/// 1); returns each round trip in nanoseconds.
pub fn sequential(name: &str, url: &str, calls: usize, size: usize) -> Result<Vec<u64>> {
    runtime()?.block_on(async {
        let mut conn = HttpConn::connect(name, url, None).await?;
        conn.handshake().await?;
        let mut times = Vec::with_capacity(calls);
        for id in 1..=calls as u64 {
            let t0 = Instant::now();
            conn.call(id, size).await?;
            times.push(t0.elapsed().as_nanos() as u64);
            conn.check(id, size)?;
        }
        Ok(times)
    })
}

/// A session: the handshake on one connection, then `calls` calls (ids from 1) over `WINDOW`
/// keep-alive connections each doing its share one at a time, so `WINDOW` are in flight.
/// Returns the time from the first call to the last answer and the answer bytes.
pub fn pipelined(name: &str, url: &str, calls: usize, size: usize) -> Result<(Duration, u64)> {
    runtime()?.block_on(async {
        let mut first = HttpConn::connect(name, url, None).await?;
        first.handshake().await?;
        let session = first.session();
        let mut conns = vec![first];
        while conns.len() < WINDOW.min(calls.max(1)) {
            conns.push(HttpConn::connect(name, url, session.clone()).await?);
        }
        let n = conns.len() as u64;
        let t0 = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (k, mut conn) in conns.into_iter().enumerate() {
            tasks.spawn(async move {
                let mut bytes = 0u64;
                let mut id = 1 + k as u64;
                while id <= calls as u64 {
                    bytes += conn.call(id, size).await? as u64;
                    conn.check(id, size)?;
                    id += n;
                }
                anyhow::Ok(bytes)
            });
        }
        let mut bytes = 0;
        while let Some(r) = tasks.join_next().await {
            bytes += r.context("a client task panicked")??;
        }
        Ok((t0.elapsed(), bytes))
    })
}

/// Counts the `msg` lines of a tape and checks it was closed (an `end` line last).
pub fn tape_messages(path: &Path) -> Result<usize> {
    let mut text = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .read_to_end(&mut text)?;
    let mut msgs = 0;
    let mut last: &[u8] = b"";
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if line.starts_with(br#"{"type":"msg""#) {
            msgs += 1;
        }
        last = line;
    }
    if !last.starts_with(br#"{"type":"end""#) {
        bail!("{}: the tape was not closed (no end line)", path.display());
    }
    Ok(msgs)
}
