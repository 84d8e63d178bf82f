//! The soak (issue 15): `mcptape record` (stdio) and `mcptape play --listen` (Streamable HTTP)
//! under a steady mixed load at the same time, for minutes; each process's RSS and open file
//! descriptors sampled every second. Memory and descriptors must stay flat: the figures are the
//! start (after a warm-up), the peak and the end. Not part of the default run (`--only soak`,
//! `--soak-secs N`).

use crate::client::Conn;
use crate::http_client::{self, HttpConn};
use crate::mem::status_kib;
use crate::scenarios::{Env, Who, KIB};
use anyhow::{bail, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Calls a second to `record` (a steady rate, not a flood: a flood would measure the disk).
const STDIO_RATE: u64 = 100;
/// Every this many stdio calls, one with a 64 KiB answer instead of 1 KiB.
const LARGE_EVERY: u64 = 100;
/// HTTP sessions a second to `play --listen`, each `SESSION_CALLS` calls.
const HTTP_SESSIONS_RATE: u64 = 10;
const SESSION_CALLS: u64 = 10;
/// One session in this many is abandoned without `DELETE` (most real clients do that): the
/// `--session-idle` given to play (seconds) must close them.
const ABANDON_EVERY: u64 = 3;
const SESSION_IDLE: &str = "5";
/// The first samples left out of "start" (start-up and the first buffers).
const WARMUP: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Default)]
pub struct Resource {
    pub start: u64,
    pub peak: u64,
    pub end: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakTarget {
    pub target: Who,
    /// RSS in bytes.
    pub rss: Resource,
    pub fds: Resource,
    pub samples: usize,
    /// Calls answered (and checked).
    pub calls: u64,
    pub sessions: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Soak {
    pub secs: f64,
    pub targets: Vec<SoakTarget>,
}

fn fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Samples RSS and descriptors of `pid` every second until `stop`.
fn sample(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(Duration, u64, u64)>> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let (Some(rss), Some(n)) = (status_kib(pid, "VmRSS:"), fds(pid)) {
                out.push((t0.elapsed(), rss * 1024, n));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        out
    })
}

fn summarize(
    samples: &[(Duration, u64, u64)],
    pick: impl Fn(&(Duration, u64, u64)) -> u64,
) -> Resource {
    let after: Vec<u64> = samples
        .iter()
        .filter(|s| s.0 >= WARMUP)
        .map(&pick)
        .collect();
    Resource {
        start: after.first().copied().unwrap_or(0),
        peak: samples.iter().map(&pick).max().unwrap_or(0),
        end: after.last().copied().unwrap_or(0),
    }
}

/// Paces a loop at `rate` a second: sleeps until the `n`th tick.
fn pace(t0: Instant, n: u64, rate: u64) {
    let due = t0 + Duration::from_micros(n * 1_000_000 / rate);
    if let Some(wait) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

pub fn soak(env: &Env, secs: u64) -> Result<Soak> {
    // The tape play serves: one recorded HTTP session of the calls each soak session makes.
    let rec = env.spawn_http("soak", Who::HttpRecord)?;
    http_client::sequential("soak recording", &rec.url(), SESSION_CALLS as usize, KIB)?;
    rec.finish(3 + 2 * SESSION_CALLS as usize)?;
    let play = env.spawn_http_with("soak", Who::HttpPlay, &["--session-idle", SESSION_IDLE])?;
    let mut record: Conn = env.spawn("soak", Who::Record)?;
    record.handshake()?;

    let stop = Arc::new(AtomicBool::new(false));
    let samplers = [
        sample(record.pid(), stop.clone()),
        sample(play.pid(), stop.clone()),
    ];
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (http_calls, sessions) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let http = {
        let (url, calls, sessions) = (play.url(), http_calls.clone(), sessions.clone());
        std::thread::spawn(move || -> Result<()> {
            http_client::runtime()?.block_on(async {
                let t0 = Instant::now();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    pace(t0, n, HTTP_SESSIONS_RATE);
                    let mut c = HttpConn::connect("soak play", &url, None).await?;
                    c.handshake().await?;
                    for id in 1..=SESSION_CALLS {
                        c.call(id, KIB).await?;
                        c.check(id, KIB)?;
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                    if n % ABANDON_EVERY != 0 {
                        let status = c.delete().await?;
                        if status != 200 {
                            bail!("soak play: DELETE answered {status}");
                        }
                    }
                    sessions.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Ok(())
            })
        })
    };
    let t0 = Instant::now();
    let mut id = 0u64;
    while Instant::now() < deadline {
        pace(t0, id, STDIO_RATE);
        id += 1;
        let size = if id % LARGE_EVERY == 0 { 64 * KIB } else { KIB };
        record.send_call(id, size)?;
        let got = record.recv()?;
        if got != id {
            bail!("soak record: answer {got} to call {id}");
        }
        record.check(id, size)?;
    }
    http.join()
        .map_err(|_| anyhow::anyhow!("the HTTP load panicked"))??;
    stop.store(true, Ordering::Relaxed);
    let [rs, ps] = samplers.map(|h| h.join().unwrap_or_default());
    let target = |who, s: &[(Duration, u64, u64)], calls, sessions| SoakTarget {
        target: who,
        rss: summarize(s, |x| x.1),
        fds: summarize(s, |x| x.2),
        samples: s.len(),
        calls,
        sessions,
    };
    let out = Soak {
        secs: t0.elapsed().as_secs_f64(),
        targets: vec![
            target(Who::Record, &rs, id, 1),
            target(
                Who::HttpPlay,
                &ps,
                http_calls.load(Ordering::Relaxed),
                sessions.load(Ordering::Relaxed),
            ),
        ],
    };
    record.finish(Duration::from_secs(30))?;
    // Play exits 0 only if every call was served: none missed, none drifted.
    play.finish(0)?;
    Ok(out)
}
