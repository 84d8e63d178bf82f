//! The benchmark client: starts a target (the server itself, or something in front of it),
//! speaks MCP over its stdio and checks every answer byte for byte against the one the bench
//! server gives (falling back to a JSON comparison). A wrong answer is an error, not a number.

use crate::proto;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Requests in flight in the pipelined scenarios.
pub const WINDOW: usize = 64;

pub struct Conn {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    send: Vec<u8>,
    expected: Vec<u8>,
    stderr_path: std::path::PathBuf,
    /// When the process was started (for start-up time).
    pub started: Instant,
}

impl Conn {
    /// Starts `cmd` in `cwd`, its stderr going to `stderr_path`.
    pub fn spawn(name: &str, cmd: &[String], cwd: &Path, stderr_path: &Path) -> Result<Conn> {
        let (program, args) = cmd.split_first().context("empty command")?;
        let stderr = std::fs::File::create(stderr_path)?;
        let started = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", cmd.join(" ")))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("piped"));
        Ok(Conn {
            name: name.to_string(),
            child,
            stdin,
            stdout,
            line: Vec::new(),
            send: Vec::new(),
            expected: Vec::new(),
            stderr_path: stderr_path.to_path_buf(),
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn write_line(&mut self, bytes: &[u8]) -> Result<()> {
        self.send.clear();
        self.send.extend_from_slice(bytes);
        self.send.push(b'\n');
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin
            .write_all(&self.send)
            .with_context(|| format!("{}: writing a request", self.name))
    }

    fn read_line(&mut self) -> Result<&[u8]> {
        self.line.clear();
        let n = self
            .stdout
            .read_until(b'\n', &mut self.line)
            .with_context(|| format!("{}: reading an answer", self.name))?;
        if n == 0 {
            bail!(
                "{}: the target closed its stdout early{}",
                self.name,
                self.stderr_tail()
            );
        }
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        }
        Ok(&self.line)
    }

    /// `initialize`, its answer checked, then `notifications/initialized`. Returns the time
    /// from starting the process to the answer (start-up time).
    pub fn handshake(&mut self) -> Result<Duration> {
        self.write_line(&proto::initialize_request(0))?;
        let answer = self.read_line()?.to_vec();
        let took = self.started.elapsed();
        let v: serde_json::Value = serde_json::from_slice(&answer)
            .with_context(|| format!("{}: initialize answer is not JSON", self.name))?;
        if v["id"] != 0 || v["result"]["protocolVersion"] != proto::PROTOCOL {
            bail!("{}: wrong initialize answer: {}", self.name, short(&answer));
        }
        self.write_line(&proto::initialized_notification())?;
        Ok(took)
    }

    /// Sends one `tools/call` of `echo`.
    pub fn send_call(&mut self, id: u64, size: usize) -> Result<()> {
        let mut req = std::mem::take(&mut self.send);
        req.clear();
        proto::call_request(&mut req, id, size);
        req.push(b'\n');
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        let r = stdin.write_all(&req);
        self.send = req;
        r.with_context(|| format!("{}: writing a request", self.name))
    }

    /// Reads one answer; returns its id. Call `check` on it afterwards (outside timing).
    pub fn recv(&mut self) -> Result<u64> {
        let name = self.name.clone();
        let line = self.read_line()?;
        proto::response_id(line)
            .with_context(|| format!("{name}: an answer without an integer id: {}", short(line)))
    }

    /// The last answer read.
    pub fn last_line(&self) -> &[u8] {
        &self.line
    }

    /// Length of the last answer read.
    pub fn last_len(&self) -> usize {
        self.line.len()
    }

    /// Checks the last answer read against what the bench server answers to call `id`.
    pub fn check(&mut self, id: u64, size: usize) -> Result<()> {
        check_answer(&self.name, &self.line, &mut self.expected, id, size)
    }

    /// VmHWM (peak RSS) of the started process so far, in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        crate::mem::status_kib(self.pid(), "VmHWM:").map(|k| k * 1024)
    }

    /// Closes stdin and waits for a clean exit (status 0), killing the target after `grace`.
    pub fn finish(self, grace: Duration) -> Result<()> {
        self.close(grace, true)
    }

    /// Like `finish`, but any exit status will do.
    pub fn finish_any(self, grace: Duration) -> Result<()> {
        self.close(grace, false)
    }

    fn close(mut self, grace: Duration, need_success: bool) -> Result<()> {
        drop(self.stdin.take());
        // Whatever is still unread (there should be nothing) is drained, so the target never
        // blocks on a full pipe while exiting.
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut self.stdout, &mut rest);
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if need_success && !status.success() {
                    bail!("{}: exited with {status}{}", self.name, self.stderr_tail());
                }
                if !rest.iter().all(u8::is_ascii_whitespace) {
                    bail!("{}: unexpected extra output: {}", self.name, short(&rest));
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{}: did not exit within {grace:?} of EOF", self.name);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        if tail.is_empty() {
            String::new()
        } else {
            let mut tail = tail;
            tail.reverse();
            format!("; its stderr ends:\n  {}", tail.join("\n  "))
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Checks `got` against what the bench server answers to call `id` (built into `expected`, a
/// buffer kept between calls): byte for byte, or else as equal JSON.
pub fn check_answer(
    name: &str,
    got: &[u8],
    expected: &mut Vec<u8>,
    id: u64,
    size: usize,
) -> Result<()> {
    expected.clear();
    proto::call_result(expected, &id.to_string(), id, size);
    if got == expected.as_slice() {
        return Ok(());
    }
    let got_json: serde_json::Value =
        serde_json::from_slice(got).with_context(|| format!("{name}: answer {id} is not JSON"))?;
    let want: serde_json::Value = serde_json::from_slice(expected)?;
    if got_json != want {
        bail!(
            "{name}: wrong answer to call {id}: got {} want {}",
            short(got),
            short(expected)
        );
    }
    Ok(())
}

pub fn short(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
    if bytes.len() > 200 {
        format!("{s}… ({} bytes)", bytes.len())
    } else {
        s
    }
}

/// Sequential round trips: one `tools/call` at a time; returns each round trip in nanoseconds.
pub fn sequential(conn: &mut Conn, first_id: u64, calls: usize, size: usize) -> Result<Vec<u64>> {
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls as u64 {
        let id = first_id + i;
        let t0 = Instant::now();
        conn.send_call(id, size)?;
        let got = conn.recv()?;
        times.push(t0.elapsed().as_nanos() as u64);
        if got != id {
            bail!("{}: answer to {got} while waiting for {id}", conn.name);
        }
        conn.check(id, size)?;
    }
    Ok(times)
}

/// Pipelined calls, `WINDOW` in flight; `progress` is bumped per answer. Returns the elapsed time
/// and the answer bytes.
pub fn pipelined(
    conn: &mut Conn,
    first_id: u64,
    calls: usize,
    size: usize,
    progress: Option<&std::sync::atomic::AtomicU64>,
) -> Result<(Duration, u64)> {
    let end = first_id + calls as u64;
    let mut next = first_id;
    let mut seen = vec![false; calls];
    let mut bytes = 0u64;
    let t0 = Instant::now();
    while next < end && next < first_id + WINDOW as u64 {
        conn.send_call(next, size)?;
        next += 1;
    }
    for _ in 0..calls {
        let id = conn.recv()?;
        if !(first_id..end).contains(&id)
            || std::mem::replace(&mut seen[(id - first_id) as usize], true)
        {
            bail!("{}: unexpected or repeated answer id {id}", conn.name);
        }
        bytes += conn.last_len() as u64 + 1;
        conn.check(id, size)?;
        if let Some(p) = progress {
            p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if next < end {
            conn.send_call(next, size)?;
            next += 1;
        }
    }
    Ok((t0.elapsed(), bytes))
}

/// Large answers, one at a time: returns the time spent in round trips (checks excluded).
pub fn large(conn: &mut Conn, first_id: u64, calls: usize, size: usize) -> Result<Duration> {
    let mut total = Duration::ZERO;
    for i in 0..calls as u64 {
        let id = first_id + i;
        let t0 = Instant::now();
        conn.send_call(id, size)?;
        let got = conn.recv()?;
        total += t0.elapsed();
        if got != id {
            bail!("{}: answer to {got} while waiting for {id}", conn.name);
        }
        conn.check(id, size)?;
    }
    Ok(total)
}
