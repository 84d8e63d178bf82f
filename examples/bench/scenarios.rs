//! The scenarios. Each starts every target afresh, drives the same session through it and keeps
//! the figures; the targets run one after the other within a round, rounds interleave them so a
//! slow moment of this noisy machine does not land on one target only.

use crate::client::{self, Conn};
use crate::http_client::{self, Served, Stop};
use crate::mem::{Sample, Sampler};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * 1024;

/// How long a target has to exit after EOF on its stdin.
pub const GRACE: Duration = Duration::from_secs(30);

/// What sits between the client and the bench server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Who {
    /// The bench server itself.
    Direct,
    /// `bench --relay`: two threads copying bytes, the floor for any proxy.
    Relay,
    /// `mcptape record` in front of the server.
    Record,
    /// `mcptape play` of the tape the `Record` run of the same scenario wrote: no server.
    Play,
    /// `agent-vcr mcp-stdio --mode record` (PyPI `localab-vcr`).
    Peer,
    /// `agent-vcr mcp-stdio --mode replay` of the peer's tape.
    PeerReplay,
    /// `bench --serve-http`: the bench server over Streamable HTTP.
    HttpDirect,
    /// `bench --relay-http`: a TCP byte relay in front of it, the floor for any HTTP proxy.
    HttpRelay,
    /// `bench --hyper-proxy`: hyper on both sides and no tape, the floor for a proxy built on
    /// hyper as `record --url` is.
    HttpHyper,
    /// `bench --lean-http-proxy`: the floor of any proxy that tapes before it forwards, on
    /// mcptape's tape format (examples/bench/lean.rs).
    HttpLean,
    /// `mcptape record --url` in front of it.
    HttpRecord,
    /// `mcptape play --listen` of the tape the `HttpRecord` run of the same scenario wrote.
    HttpPlay,
    /// `bench --serve-model`: the scripted streaming model API.
    ModelDirect,
    /// `bench --relay-http` in front of it.
    ModelRelay,
    /// `bench --hyper-proxy` in front of it: the floor for `model-proxy`'s design, no tape.
    ModelHyper,
    /// `bench --lean-model-proxy` in front of it: the floor of a taping model proxy.
    ModelLean,
    /// `mcptape model-proxy` recording in front of it.
    ModelRecord,
    /// localab-vcr's model proxy recording in front of it (examples/bench/localab_model_proxy.py).
    ModelPeer,
    /// `mcp-recorder record --target-stdio` (PyPI mcp-recorder): a Streamable HTTP front.
    HttpMcpRecorder,
    /// `mcp-rec record` (PyPI mcp-rec).
    McpRec,
    /// `mcp-vcr record` (PyPI mcp-vcr).
    McpVcr,
    /// agent-vcr's recorder (PyPI agent-vcr) through tests/recorders/agent_vcr_record.py.
    AgentVcr,
    /// mcp-cassette's recorder (PyPI mcp-cassette) through tests/recorders/mcp_cassette_record.py.
    McpCassette,
}

impl Who {
    pub fn label(self) -> &'static str {
        match self {
            Who::Direct => "direct",
            Who::Relay => "relay",
            Who::Record => "mcptape record",
            Who::Play => "mcptape play",
            Who::Peer => "localab-vcr record",
            Who::PeerReplay => "localab-vcr replay",
            Who::HttpDirect => "http direct",
            Who::HttpRelay => "http relay",
            Who::HttpHyper => "http hyper proxy",
            Who::HttpLean => "http lean taping proxy",
            Who::HttpRecord => "http record --url",
            Who::HttpPlay => "http play --listen",
            Who::ModelDirect => "model direct",
            Who::ModelRelay => "model relay",
            Who::ModelHyper => "model hyper proxy",
            Who::ModelLean => "model lean taping proxy",
            Who::ModelRecord => "mcptape model-proxy",
            Who::ModelPeer => "localab-vcr model",
            Who::HttpMcpRecorder => "http mcp-recorder",
            Who::McpRec => "mcp-rec record",
            Who::McpVcr => "mcp-vcr record",
            Who::AgentVcr => "agent-vcr record",
            Who::McpCassette => "mcp-cassette record",
        }
    }
    pub fn is_peer(self) -> bool {
        matches!(
            self,
            Who::Peer
                | Who::PeerReplay
                | Who::McpRec
                | Who::McpVcr
                | Who::AgentVcr
                | Who::McpCassette
                | Who::HttpMcpRecorder
        )
    }
}

/// Sizes of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub rounds: usize,
    pub warmup: usize,
    pub latency_calls: usize,
    pub pipelined_calls: usize,
    pub large: Vec<(usize, usize)>,
    pub memory_messages: usize,
    pub big_tape_exchanges: usize,
    pub startup_runs: usize,
    /// The peer writes its tape in O(n) per event (it re-reads the whole tape on every write):
    /// it gets smaller sessions, stated beside its rows.
    pub peer_calls: usize,
    pub peer_large: bool,
    /// Model proxy: short streams timed to their first event, and events in the long stream.
    pub model_requests: usize,
    pub model_events: usize,
    /// `mcptape run` of Claude Code: runs with and without mcptape each.
    pub agent_runs: usize,
}

impl Plan {
    pub fn quick() -> Plan {
        Plan {
            rounds: 1,
            warmup: 200,
            latency_calls: 2_000,
            pipelined_calls: 20_000,
            large: vec![(8 * MIB, 3), (64 * MIB, 1)],
            memory_messages: 200_000,
            big_tape_exchanges: 20_000,
            startup_runs: 3,
            peer_calls: 300,
            peer_large: false,
            model_requests: 300,
            model_events: 20_000,
            agent_runs: 2,
        }
    }
    pub fn full() -> Plan {
        Plan {
            rounds: 3,
            warmup: 500,
            latency_calls: 10_000,
            pipelined_calls: 100_000,
            large: vec![(8 * MIB, 12), (64 * MIB, 3)],
            memory_messages: 1_000_000,
            big_tape_exchanges: 100_000,
            startup_runs: 7,
            peer_calls: 500,
            peer_large: true,
            model_requests: 2_000,
            model_events: 100_000,
            agent_runs: 11,
        }
    }
}

pub struct Env {
    pub bench: PathBuf,
    pub mcptape: PathBuf,
    /// The peer's `agent-vcr` executable, when it installed.
    pub peer: Option<PathBuf>,
    /// The venv of the other recorders (tests/recorders/.venv), when it is there.
    pub recorders: Option<PathBuf>,
    pub work: PathBuf,
    pub plan: Plan,
}

impl Env {
    pub fn server(&self) -> Vec<String> {
        vec![self.bench.display().to_string(), "--serve".into()]
    }

    fn tape(&self, scenario: &str, who: Who) -> PathBuf {
        let stem = match who {
            Who::Peer | Who::PeerReplay => "peer".to_string(),
            w if w.is_peer() => w.label().replace(' ', "-"),
            _ => "mcptape".to_string(),
        };
        self.work.join(format!("{scenario}-{stem}.jsonl"))
    }

    pub fn command(&self, who: Who, tape: &Path) -> Vec<String> {
        let tape = tape.display().to_string();
        let mcptape = self.mcptape.display().to_string();
        let peer = || {
            self.peer
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let mut cmd: Vec<String> = match who {
            Who::Direct => return self.server(),
            Who::HttpDirect
            | Who::HttpRelay
            | Who::HttpHyper
            | Who::HttpLean
            | Who::HttpRecord
            | Who::HttpPlay
            | Who::HttpMcpRecorder => {
                unreachable!("HTTP targets are started by Env::spawn_http")
            }
            Who::ModelDirect
            | Who::ModelRelay
            | Who::ModelHyper
            | Who::ModelLean
            | Who::ModelRecord
            | Who::ModelPeer => {
                unreachable!("model targets are started by Env::spawn_model")
            }
            Who::McpRec | Who::McpVcr | Who::AgentVcr | Who::McpCassette => {
                self.recorder_command(who, &tape)
            }
            Who::Relay => vec![self.bench.display().to_string(), "--relay".into()],
            Who::Record => vec![mcptape, "record".into(), "--tape".into(), tape],
            Who::Play => return vec![mcptape, "play".into(), tape],
            Who::Peer | Who::PeerReplay => vec![
                peer(),
                "mcp-stdio".into(),
                "--server".into(),
                "bench".into(),
                "--tape".into(),
                tape,
                "--mode".into(),
                if who == Who::Peer { "record" } else { "replay" }.into(),
            ],
        };
        cmd.push("--".into());
        cmd.extend(self.server());
        cmd
    }

    /// Starts `who` for `scenario` (a recording target starts on a fresh tape).
    pub fn spawn(&self, scenario: &str, who: Who) -> Result<Conn> {
        let tape = self.tape(scenario, who);
        if who == Who::Record || (who.is_peer() && who != Who::PeerReplay) {
            let _ = std::fs::remove_file(&tape);
            let _ = std::fs::remove_file(tape.with_extension("jsonl.lock"));
        }
        let stderr = self.work.join(format!(
            "{scenario}-{}.stderr",
            who.label().replace(' ', "-")
        ));
        Conn::spawn(who.label(), &self.command(who, &tape), &self.work, &stderr)
    }

    /// The targets of a scenario, in run order (a recorder before its player).
    pub fn targets(&self, with_play: bool, with_peer: bool) -> Vec<Who> {
        let mut v = vec![Who::Direct, Who::Relay, Who::Record];
        if with_play {
            v.push(Who::Play);
        }
        if with_peer && self.peer.is_some() {
            v.push(Who::Peer);
            if with_play {
                v.push(Who::PeerReplay);
            }
        }
        v
    }

    /// The other PyPI recorders (tests/recorders/.venv) that drive a stdio session, when
    /// their venv is there.
    pub fn other_peers(&self) -> Vec<Who> {
        if self.recorders.is_none() {
            return Vec::new();
        }
        vec![Who::McpRec, Who::McpVcr, Who::AgentVcr, Who::McpCassette]
    }

    /// How tests/it/import.rs drives each of them (tests/recorders/README.md says why).
    fn recorder_command(&self, who: Who, tape: &str) -> Vec<String> {
        let venv = self.recorders.clone().unwrap_or_default();
        let bin = |b: &str| venv.join("bin").join(b).display().to_string();
        let script = |f: &str| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/recorders")
                .join(f)
                .display()
                .to_string()
        };
        let mut cmd: Vec<String> = match who {
            Who::McpRec => vec![bin("mcp-rec"), "record".into(), "--out".into()],
            Who::McpVcr => vec![
                bin("mcp-vcr"),
                "record".into(),
                "--no-redact".into(),
                "--format".into(),
                "ndjson".into(),
                "-o".into(),
            ],
            Who::AgentVcr => vec![bin("python"), script("agent_vcr_record.py")],
            _ => vec![bin("python"), script("mcp_cassette_record.py")],
        };
        cmd.push(tape.to_string());
        cmd
    }

    fn calls_for(&self, who: Who, calls: usize) -> usize {
        if who.is_peer() {
            calls.min(self.plan.peer_calls)
        } else {
            calls
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub target: Who,
    pub calls: usize,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub peak_rss: Option<u64>,
    /// CPU time of the process the client talks to (the server, the relay, the recorder, the
    /// player; not the server behind a proxy), µs per call, handshake and start-up left out.
    pub cpu_us: Option<f64>,
}

/// Sequential 1 KiB `tools/call` round trips.
pub fn latency(env: &Env) -> Result<Vec<Latency>> {
    let mut whos = env.targets(true, true);
    whos.extend(env.other_peers());
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); whos.len()];
    let mut peaks: Vec<Option<u64>> = vec![None; whos.len()];
    let mut cpu = vec![CpuTally::default(); whos.len()];
    for _ in 0..env.plan.rounds {
        for (i, &who) in whos.iter().enumerate() {
            let calls = env.calls_for(who, env.plan.latency_calls);
            let warm = env.plan.warmup.min(calls / 4);
            let mut c = env.spawn("latency", who)?;
            c.handshake()?;
            let before = crate::mem::cpu_ns(c.pid());
            let t = client::sequential(&mut c, 1, warm + calls, KIB)?;
            cpu[i].add(before, crate::mem::cpu_ns(c.pid()), warm + calls);
            peaks[i] = peaks[i].max(c.peak_rss());
            c.finish(GRACE)?;
            samples[i].extend_from_slice(&t[warm..]);
        }
    }
    Ok(whos
        .iter()
        .zip(samples.iter_mut())
        .zip(peaks)
        .zip(cpu)
        .map(|(((&who, s), peak), cpu)| Latency::of(who, s, peak, cpu.per_call()))
        .collect())
}

/// A target's CPU time over the rounds of a scenario, and the calls it served in them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTally {
    ns: u64,
    calls: usize,
    lost: bool,
}

impl CpuTally {
    /// Adds one session's `calls`, between two [`crate::mem::cpu_ns`] readings.
    pub fn add(&mut self, before: Option<u64>, after: Option<u64>, calls: usize) {
        match before.zip(after) {
            Some((b, a)) if a >= b => {
                self.ns += a - b;
                self.calls += calls;
            }
            _ => self.lost = true,
        }
    }

    /// µs a call; `None` when a reading was missing.
    pub fn per_call(self) -> Option<f64> {
        (!self.lost && self.calls > 0).then(|| self.ns as f64 / 1e3 / self.calls as f64)
    }
}

impl Latency {
    /// Percentiles of one target's round trips (µs), sorted here.
    fn of(target: Who, samples: &mut [u64], peak_rss: Option<u64>, cpu_us: Option<f64>) -> Latency {
        samples.sort_unstable();
        Latency {
            target,
            calls: samples.len(),
            p50_us: pct(samples, 50.0),
            p90_us: pct(samples, 90.0),
            p99_us: pct(samples, 99.0),
            peak_rss,
            cpu_us,
        }
    }
}

pub fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub target: Who,
    /// Answer size (bytes per response line).
    pub size: usize,
    pub calls: usize,
    pub secs: f64,
    pub calls_per_s: f64,
    pub mb_per_s: f64,
    pub peak_rss: Option<u64>,
}

impl Throughput {
    fn measured(
        target: Who,
        size: usize,
        calls: usize,
        took: Duration,
        bytes: f64,
        peak_rss: Option<u64>,
    ) -> Throughput {
        let secs = took.as_secs_f64();
        Throughput {
            target,
            size,
            calls,
            secs,
            calls_per_s: calls as f64 / secs,
            mb_per_s: bytes / secs / 1e6,
            peak_rss,
        }
    }
}

/// Keeps the faster of two rounds: throughput is limited from above, noise only lowers it.
fn keep_faster(best: &mut Option<Throughput>, t: Throughput) {
    if best.as_ref().is_none_or(|b| b.calls_per_s < t.calls_per_s) {
        *best = Some(t);
    }
}

/// 1 KiB calls, `client::WINDOW` in flight. Rounds are kept apart; the best round counts
/// (throughput is limited from above, noise only lowers it).
pub fn pipelined(env: &Env) -> Result<Vec<Throughput>> {
    let mut whos = env.targets(true, true);
    whos.extend(env.other_peers());
    let mut best: Vec<Option<Throughput>> = vec![None; whos.len()];
    for _ in 0..env.plan.rounds {
        for (i, &who) in whos.iter().enumerate() {
            let calls = env.calls_for(who, env.plan.pipelined_calls);
            let mut c = env.spawn("pipelined", who)?;
            c.handshake()?;
            let (took, bytes) = client::pipelined(&mut c, 1, calls, KIB, None)?;
            let peak = c.peak_rss();
            c.finish(GRACE)?;
            keep_faster(
                &mut best[i],
                Throughput::measured(who, KIB, calls, took, bytes as f64, peak),
            );
        }
    }
    Ok(best.into_iter().flatten().collect())
}

/// Large answers, one at a time, for each size of the plan.
pub fn large(env: &Env) -> Result<Vec<Throughput>> {
    let mut out = Vec::new();
    for &(size, calls) in &env.plan.large {
        let with_peer = env.plan.peer_large || size <= 8 * MIB;
        for who in env.targets(true, with_peer) {
            let calls = if who.is_peer() { calls.min(2) } else { calls };
            let scenario = format!("large{}m", size / MIB);
            let mut c = env.spawn(&scenario, who)?;
            c.handshake()?;
            let took = client::large(&mut c, 1, calls, size)?;
            let peak = c.peak_rss();
            c.finish(GRACE)?;
            let bytes = (size as f64 + 1.0) * calls as f64;
            out.push(Throughput::measured(who, size, calls, took, bytes, peak));
        }
        let _ = std::fs::remove_file(env.tape(&format!("large{}m", size / MIB), Who::Record));
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    pub target: Who,
    pub messages: usize,
    pub secs: f64,
    /// Peak RSS over the whole session (VmHWM).
    pub peak_rss: u64,
    /// Largest RSS sampled in the first and in the last fifth of the session (after the first
    /// 5 %, so start-up is not counted as growth).
    pub rss_early: u64,
    pub rss_late: u64,
    pub samples: usize,
    pub tape_bytes: Option<u64>,
}

/// Answer size in the memory session: small, so the session is about message count.
const MEMORY_SIZE: usize = 256;

/// A long session: `memory_messages` messages (half requests, half answers), pipelined, the
/// target's memory sampled every 20 ms.
pub fn memory(env: &Env) -> Result<Vec<Memory>> {
    let mut out = Vec::new();
    let calls = env.plan.memory_messages / 2;
    for who in [Who::Relay, Who::Record] {
        let mut c = env.spawn("memory", who)?;
        c.handshake()?;
        let progress = Arc::new(AtomicU64::new(0));
        let sampler = Sampler::start(c.pid(), progress.clone(), Duration::from_millis(20));
        let (took, _) = client::pipelined(&mut c, 1, calls, MEMORY_SIZE, Some(&progress))?;
        let peak = c.peak_rss().unwrap_or(0);
        let samples = sampler.stop();
        c.finish(GRACE)?;
        let tape = env.tape("memory", who);
        let tape_bytes = (who == Who::Record)
            .then(|| std::fs::metadata(&tape).map(|m| m.len()).ok())
            .flatten();
        let _ = std::fs::remove_file(&tape);
        let window = |from: f64, to: f64| -> u64 {
            let lo = (calls as f64 * from) as u64;
            let hi = (calls as f64 * to) as u64;
            samples
                .iter()
                .filter(|s: &&Sample| s.done >= lo && s.done <= hi)
                .map(|s| s.rss)
                .max()
                .unwrap_or(0)
        };
        out.push(Memory {
            target: who,
            messages: calls * 2,
            secs: took.as_secs_f64(),
            peak_rss: peak.max(samples.iter().map(|s| s.hwm).max().unwrap_or(0)),
            rss_early: window(0.05, 0.25),
            rss_late: window(0.80, 1.0),
            samples: samples.len(),
            tape_bytes,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct Startup {
    pub what: String,
    pub exchanges: usize,
    pub tape_bytes: u64,
    pub runs: usize,
    /// The first run, with an empty index cache.
    pub cold_ms: f64,
    /// Median, min and max of the other runs (warm: the index cache filled by the first).
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolRun {
    pub what: String,
    pub tape_bytes: u64,
    pub secs: f64,
    pub mb_per_s: f64,
    pub exit: i32,
    pub peak_rss: u64,
    /// The exit status was the right one (0: the same session recorded twice).
    pub correct: bool,
}

/// Records the same `big_tape_exchanges` session twice; returns both tapes.
pub fn big_tapes(env: &Env) -> Result<(PathBuf, PathBuf, f64)> {
    let n = env.plan.big_tape_exchanges;
    let mut tapes = Vec::new();
    let mut secs = 0.0;
    for name in ["big-a", "big-b"] {
        let mut c = env.spawn(name, Who::Record)?;
        c.handshake()?;
        let (took, _) = client::pipelined(&mut c, 1, n, KIB, None)?;
        secs = took.as_secs_f64();
        c.finish(GRACE)?;
        tapes.push(env.tape(name, Who::Record));
    }
    let b = tapes.pop().expect("two tapes");
    let a = tapes.pop().expect("two tapes");
    Ok((a, b, secs))
}

/// Time from starting a target to its answer to `initialize`.
pub fn startup(env: &Env, big: &Path) -> Result<Vec<Startup>> {
    let mut out = Vec::new();
    let small = env.tape("latency", Who::Record);
    let cases: Vec<(String, Vec<String>, usize, u64)> = vec![
        ("direct server".into(), env.server(), 0, 0),
        (
            "mcptape play, latency tape".into(),
            env.command(Who::Play, &small),
            // initialize and the last round's calls
            1 + env.plan.warmup.min(env.plan.latency_calls / 4) + env.plan.latency_calls,
            file_len(&small),
        ),
        (
            "mcptape play, big tape".into(),
            env.command(Who::Play, big),
            1 + env.plan.big_tape_exchanges,
            file_len(big),
        ),
    ];
    // play keeps a big tape's index in the user's cache (src/tape/index_cache.rs): the bench
    // gives it a cache of its own, emptied before each case, so the first run is a cold start
    // and the others are warm.
    let cache = env.work.join("cache");
    // But first the play a user makes right after recording: `record` indexed the big tape as
    // it closed it (into the same cache), so this first play should start warm.
    {
        let what = "mcptape play, big tape, first play after record".to_string();
        let stderr = env.work.join("startup.stderr");
        let mut c = Conn::spawn(&what, &env.command(Who::Play, big), &env.work, &stderr)?;
        let ms = c.handshake()?.as_secs_f64() * 1000.0;
        c.finish_any(GRACE)?;
        out.push(Startup {
            what,
            exchanges: 1 + env.plan.big_tape_exchanges,
            tape_bytes: file_len(big),
            runs: 1,
            cold_ms: ms,
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
        });
    }
    for (what, cmd, exchanges, tape_bytes) in cases {
        let _ = std::fs::remove_dir_all(&cache);
        let mut times = Vec::new();
        for _ in 0..env.plan.startup_runs {
            let stderr = env.work.join("startup.stderr");
            let mut c = Conn::spawn(&what, &cmd, &env.work, &stderr)?;
            times.push(c.handshake()?.as_secs_f64() * 1000.0);
            // Play reports the exchanges left unused; that is expected here.
            c.finish_any(GRACE)?;
        }
        let cold_ms = times[0];
        if times.len() > 1 {
            times.remove(0);
        }
        times.sort_by(f64::total_cmp);
        out.push(Startup {
            what,
            exchanges,
            tape_bytes,
            runs: times.len(),
            cold_ms,
            median_ms: times[times.len() / 2],
            min_ms: times[0],
            max_ms: times[times.len() - 1],
        });
    }
    Ok(out)
}

/// Requests play has no answer for, on the big tape: what a client that strays from the
/// recording waits for each (play explains the miss: the nearest recorded calls).
#[derive(Debug, Clone, Serialize)]
pub struct Misses {
    pub exchanges: usize,
    pub misses: usize,
    /// The first miss of the session (it builds what explanations read).
    pub first_ms: f64,
    /// Median of the others.
    pub median_ms: f64,
    pub max_ms: f64,
    pub peak_rss: Option<u64>,
}

/// How many misses the row asks for.
const MISSES: usize = 20;

/// The big tape played, then `MISSES` calls of arguments it never recorded, one at a time, each
/// answer checked to be play's miss error.
pub fn misses(env: &Env, big: &Path) -> Result<Misses> {
    let what = "mcptape play, big tape, misses";
    let stderr = env.work.join("misses.stderr");
    let mut c = Conn::spawn(what, &env.command(Who::Play, big), &env.work, &stderr)?;
    c.handshake()?;
    let mut times = Vec::with_capacity(MISSES);
    for k in 0..MISSES as u64 {
        // The big tape's calls are ids (and arguments) 1..=big_tape_exchanges.
        let id = 1_000_000_000 + k;
        let t0 = Instant::now();
        c.send_call(id, KIB)?;
        let got = c.recv()?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
        let line = String::from_utf8_lossy(c.last_line()).to_string();
        if got != id || !line.contains(r#""code":-32099"#) {
            bail!("{what}: call {id} was not answered with play's miss error: {line:.200}");
        }
    }
    let peak_rss = c.peak_rss();
    // A session with misses fails: any exit status will do.
    c.finish_any(GRACE)?;
    let first_ms = times[0];
    let mut rest = times[1..].to_vec();
    rest.sort_by(f64::total_cmp);
    Ok(Misses {
        exchanges: env.plan.big_tape_exchanges,
        misses: MISSES,
        first_ms,
        median_ms: rest[rest.len() / 2],
        max_ms: rest[rest.len() - 1],
        peak_rss,
    })
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// `mcptape diff A B` and `mcptape check A -- server` on the big tapes.
pub fn tools(env: &Env, a: &Path, b: &Path) -> Result<Vec<ToolRun>> {
    let mcptape = env.mcptape.display().to_string();
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    let mut check = vec![mcptape.clone(), "check".into(), a_s.clone(), "--".into()];
    check.extend(env.server());
    let runs = [
        (
            "diff",
            vec![mcptape.clone(), "diff".into(), a_s.clone(), b_s],
            file_len(a) + file_len(b),
        ),
        ("check", check, file_len(a)),
    ];
    let mut out = Vec::new();
    for (what, cmd, bytes) in runs {
        let (secs, exit, rss) = run_timed(&cmd, &env.work, &env.work.join(format!("{what}.out")))?;
        out.push(ToolRun {
            what: what.into(),
            tape_bytes: bytes,
            secs,
            mb_per_s: bytes as f64 / secs / 1e6,
            exit,
            peak_rss: rss,
            correct: exit == 0,
        });
    }
    Ok(out)
}

/// Runs `cmd` to completion; returns seconds, exit code and peak RSS (bytes, from wait4).
fn run_timed(cmd: &[String], cwd: &Path, out: &Path) -> Result<(f64, i32, u64)> {
    let stdout = std::fs::File::create(out)?;
    let stderr = stdout.try_clone()?;
    let t0 = Instant::now();
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", cmd.join(" ")))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (std never waits on its own).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = t0.elapsed().as_secs_f64();
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let exit = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok((secs, exit, usage.ru_maxrss as u64 * 1024))
}

/// A Streamable HTTP target: the process the client talks to, the bench server behind it
/// (for a proxy) and the tape `record` writes.
pub struct HttpTarget {
    front: Served,
    upstream: Option<Served>,
    tape: Option<PathBuf>,
}

impl HttpTarget {
    pub fn url(&self) -> String {
        self.front.url.clone()
    }

    pub fn pid(&self) -> u32 {
        self.front.pid()
    }

    /// Stops the target (every process must exit 0) and checks that the tape, if any, holds
    /// `messages` messages and was closed.
    pub fn finish(self, messages: usize) -> Result<()> {
        let name = self.front.name.clone();
        self.front.finish(GRACE)?;
        if let Some(up) = self.upstream {
            up.finish(GRACE)?;
        }
        if let Some(tape) = &self.tape {
            let n = http_client::tape_messages(tape)?;
            if n != messages {
                bail!("{name}: the tape holds {n} messages, {messages} crossed the wire");
            }
        }
        Ok(())
    }
}

impl Env {
    /// Starts `who` (an HTTP target) for `scenario`.
    pub fn spawn_http(&self, scenario: &str, who: Who) -> Result<HttpTarget> {
        self.spawn_http_with(scenario, who, &[])
    }

    /// [`Env::spawn_http`] with `extra` arguments for mcptape (`record --url`, `play --listen`).
    pub fn spawn_http_with(&self, scenario: &str, who: Who, extra: &[&str]) -> Result<HttpTarget> {
        let bench = self.bench.display().to_string();
        let mcptape = self.mcptape.display().to_string();
        let tape = self.work.join(format!("{scenario}-http.jsonl"));
        let stderr = |w: Who| {
            self.work
                .join(format!("{scenario}-{}.stderr", w.label().replace(' ', "-")))
        };
        let start = |w: Who, cmd: Vec<String>, stop| {
            Served::spawn(w.label(), &cmd, &self.work, &stderr(w), stop)
        };
        let server = || {
            start(
                Who::HttpDirect,
                vec![bench.clone(), "--serve-http".into(), "127.0.0.1:0".into()],
                Stop::CloseStdin,
            )
        };
        let (front, upstream, tape) = match who {
            Who::HttpDirect => (server()?, None, None),
            Who::HttpRelay | Who::HttpHyper => {
                let up = server()?;
                let mode = if who == Who::HttpRelay {
                    "--relay-http"
                } else {
                    "--hyper-proxy"
                };
                let cmd = vec![bench.clone(), mode.into(), up.url.clone()];
                (start(who, cmd, Stop::CloseStdin)?, Some(up), None)
            }
            Who::HttpLean => {
                let lean_tape = self.work.join(format!("{scenario}-http-lean.jsonl"));
                let _ = std::fs::remove_file(&lean_tape);
                let up = server()?;
                let cmd = vec![
                    bench.clone(),
                    "--lean-http-proxy".into(),
                    lean_tape.display().to_string(),
                    up.url.clone(),
                ];
                (
                    start(who, cmd, Stop::CloseStdin)?,
                    Some(up),
                    Some(lean_tape),
                )
            }
            Who::HttpRecord => {
                let _ = std::fs::remove_file(&tape);
                let _ = std::fs::remove_file(tape.with_extension("jsonl.lock"));
                let up = server()?;
                let cmd = vec![
                    mcptape,
                    "record".into(),
                    "--url".into(),
                    up.url.clone(),
                    "--listen".into(),
                    "127.0.0.1:0".into(),
                    "--tape".into(),
                    tape.display().to_string(),
                ];
                let cmd = [cmd, extra.iter().map(|a| a.to_string()).collect()].concat();
                (start(who, cmd, Stop::Interrupt)?, Some(up), Some(tape))
            }
            Who::HttpMcpRecorder => {
                let venv = self.recorders.clone().unwrap_or_default();
                // It takes a fixed --port: one nothing listens on now.
                let port = std::net::TcpListener::bind("127.0.0.1:0")?
                    .local_addr()?
                    .port();
                let cassette = self.work.join(format!("{scenario}-mcp-recorder.json"));
                let cmd = vec![
                    venv.join("bin/mcp-recorder").display().to_string(),
                    "record".into(),
                    "--target-stdio".into(),
                    format!("{bench} --serve"),
                    "--port".into(),
                    port.to_string(),
                    "--output".into(),
                    cassette.display().to_string(),
                ];
                let front =
                    Served::spawn_on_port(who.label(), &cmd, &self.work, &stderr(who), port)?;
                (front, None, None)
            }
            Who::HttpPlay => {
                let cmd = vec![
                    mcptape,
                    "play".into(),
                    tape.display().to_string(),
                    "--listen".into(),
                    "127.0.0.1:0".into(),
                ];
                let cmd = [cmd, extra.iter().map(|a| a.to_string()).collect()].concat();
                (start(who, cmd, Stop::Interrupt)?, None, None)
            }
            _ => bail!("{} is not an HTTP target", who.label()),
        };
        Ok(HttpTarget {
            front,
            upstream,
            tape,
        })
    }
}

/// The HTTP targets, in run order (the recorder before its player).
const HTTP_TARGETS: [Who; 6] = [
    Who::HttpDirect,
    Who::HttpRelay,
    Who::HttpHyper,
    Who::HttpLean,
    Who::HttpRecord,
    Who::HttpPlay,
];

impl Env {
    /// The HTTP targets of this run: mcptape's, then mcp-recorder when its venv is there.
    fn http_targets(&self) -> Vec<Who> {
        let mut v = HTTP_TARGETS.to_vec();
        if self.recorders.is_some() {
            v.push(Who::HttpMcpRecorder);
        }
        v
    }
}

/// Messages on the tape of an HTTP session of `calls` calls: the handshake's three, two per call.
fn http_messages(calls: usize) -> usize {
    3 + 2 * calls
}

/// Streamable HTTP: the latency and pipelined scenarios over `POST /mcp`, straight to the bench
/// server, through a TCP relay, through `mcptape record --url` and served by `mcptape play
/// --listen`. Every answer is checked, `record` must exit 0 and its tape hold every message.
pub fn http(env: &Env) -> Result<(Vec<Latency>, Vec<Throughput>)> {
    let whos = env.http_targets();
    let n = whos.len();
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut peaks: Vec<Option<u64>> = vec![None; n];
    let mut best: Vec<Option<Throughput>> = vec![None; n];
    let mut cpu = vec![CpuTally::default(); n];
    for _ in 0..env.plan.rounds {
        for (i, &who) in whos.iter().enumerate() {
            let calls = env.calls_for(who, env.plan.latency_calls);
            let warm = env.plan.warmup.min(calls / 4);
            let t = env.spawn_http("latency", who)?;
            // The handshake's three messages are in this count's CPU time too: 3 of 60,000.
            let before = crate::mem::cpu_ns(t.pid());
            let times = http_client::sequential(who.label(), &t.url(), warm + calls, KIB)?;
            cpu[i].add(before, crate::mem::cpu_ns(t.pid()), warm + calls);
            peaks[i] = peaks[i].max(t.front.peak_rss());
            t.finish(http_messages(warm + calls))?;
            samples[i].extend_from_slice(&times[warm..]);
        }
        for (i, &who) in whos.iter().enumerate() {
            let calls = env.calls_for(who, env.plan.pipelined_calls);
            let t = env.spawn_http("pipelined", who)?;
            let (took, bytes) = http_client::pipelined(who.label(), &t.url(), calls, KIB)?;
            let peak = t.front.peak_rss();
            t.finish(http_messages(calls))?;
            keep_faster(
                &mut best[i],
                Throughput::measured(who, KIB, calls, took, bytes as f64, peak),
            );
        }
    }
    let latency = whos
        .iter()
        .zip(samples.iter_mut())
        .zip(peaks)
        .zip(cpu)
        .map(|(((&who, s), peak), cpu)| Latency::of(who, s, peak, cpu.per_call()))
        .collect();
    Ok((latency, best.into_iter().flatten().collect()))
}
