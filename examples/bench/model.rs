//! The model proxy rows (issue 19): streamed Anthropic Messages answers from the bench provider
//! (`bench --serve-model`) straight, through the TCP byte relay (`bench --relay-http`), through
//! `mcptape model-proxy` recording, and through localab-vcr's model proxy recording. Two
//! figures: time to the first event of a short stream (sequential requests on one keep-alive
//! connection), and events per second of one long stream of small events. Every byte of every
//! stream is checked by the client; each recorder's tape is checked to hold every stream.

use crate::http_client::{Served, Stop};
use crate::model_client::ModelConn;
use crate::provider::Spec;
use crate::scenarios::{pct, CpuTally, Env, Who, GRACE};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::PathBuf;

/// The short stream of the time-to-first-event row: a brief answer, as a tool-use turn is.
pub const SHORT: Spec = Spec {
    events: 20,
    size: 16,
};

/// Text bytes per delta in the long stream: a few tokens, as providers send them.
const SMALL_EVENT: usize = 16;

#[derive(Debug, Clone, Serialize)]
pub struct ModelTtfb {
    pub target: Who,
    pub requests: usize,
    pub events_per_stream: usize,
    pub head_p50_us: f64,
    pub first_p50_us: f64,
    pub first_p90_us: f64,
    pub first_p99_us: f64,
    pub end_p50_us: f64,
    pub peak_rss: Option<u64>,
    /// CPU time of the process the client talks to (the provider, the relay, the proxy), µs
    /// per streamed answer.
    pub cpu_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelRate {
    pub target: Who,
    pub events: usize,
    pub stream_bytes: usize,
    pub secs: f64,
    pub events_per_s: f64,
    pub mb_per_s: f64,
    pub peak_rss: Option<u64>,
}

/// A running target: what the client talks to, the provider behind it, the tape it writes.
struct Target {
    front: Served,
    upstream: Option<Served>,
    tape: Option<PathBuf>,
}

impl Env {
    /// localab-vcr's Python (its venv), when it installed.
    fn localab_python(&self) -> Option<PathBuf> {
        let p = self.peer.as_ref()?.parent()?.join("python");
        p.exists().then_some(p)
    }

    fn spawn_model(&self, scenario: &str, who: Who) -> Result<Target> {
        let bench = self.bench.display().to_string();
        let label = who.label().replace(' ', "-");
        let stderr = |w: &str| self.work.join(format!("model-{scenario}-{w}.stderr"));
        let provider = || {
            Served::spawn(
                Who::ModelDirect.label(),
                &[bench.clone(), "--serve-model".into(), "127.0.0.1:0".into()],
                &self.work,
                &stderr(&format!("{label}-provider")),
                Stop::CloseStdin,
            )
        };
        let tape = self.work.join(format!("model-{scenario}-{label}.jsonl"));
        let _ = std::fs::remove_file(&tape);
        let _ = std::fs::remove_file(tape.with_extension("jsonl.lock"));
        let tape_s = tape.display().to_string();
        let (cmd, stop): (Vec<String>, Stop) = match who {
            Who::ModelDirect => {
                return Ok(Target {
                    front: provider()?,
                    upstream: None,
                    tape: None,
                })
            }
            Who::ModelRelay => (vec![bench.clone(), "--relay-http".into()], Stop::CloseStdin),
            Who::ModelHyper => (
                vec![bench.clone(), "--hyper-proxy".into()],
                Stop::CloseStdin,
            ),
            Who::ModelLean => (
                vec![bench.clone(), "--lean-model-proxy".into(), tape_s],
                Stop::CloseStdin,
            ),
            Who::ModelRecord => (
                vec![
                    self.mcptape.display().to_string(),
                    "model-proxy".into(),
                    "--tape".into(),
                    tape_s,
                    "--upstream".into(),
                ],
                Stop::Interrupt,
            ),
            Who::ModelPeer => {
                let python = self
                    .localab_python()
                    .context("localab-vcr is not installed")?;
                let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("examples/bench/localab_model_proxy.py");
                (
                    vec![
                        python.display().to_string(),
                        script.display().to_string(),
                        tape_s,
                    ],
                    Stop::CloseStdin,
                )
            }
            _ => bail!("{} is not a model target", who.label()),
        };
        let up = provider()?;
        let mut cmd = cmd;
        cmd.push(up.url.clone());
        let front = Served::spawn(who.label(), &cmd, &self.work, &stderr(&label), stop)?;
        Ok(Target {
            front,
            upstream: Some(up),
            tape: (!matches!(who, Who::ModelRelay | Who::ModelHyper)).then_some(tape),
        })
    }
}

impl Target {
    /// Stops every process (each must exit 0) and checks the tape holds `streams` streams of
    /// `spec` (mcptape: every event a line, the tape closed; localab-vcr: each answer's body
    /// the whole stream).
    fn finish(self, who: Who, streams: usize, spec: Spec) -> Result<()> {
        self.front.finish(GRACE)?;
        if let Some(up) = self.upstream {
            up.finish(GRACE)?;
        }
        let Some(tape) = &self.tape else {
            return Ok(());
        };
        let text = std::fs::read_to_string(tape)
            .with_context(|| format!("{}: reading its tape {}", who.label(), tape.display()))?;
        if matches!(who, Who::ModelRecord | Who::ModelLean) {
            let events = text
                .lines()
                .filter(|l| l.starts_with(r#"{"type":"model""#) && l.contains(r#""part":"event""#))
                .count();
            if events != streams * spec.total() {
                bail!(
                    "{}: the tape holds {events} stream events, {} crossed the wire",
                    who.label(),
                    streams * spec.total()
                );
            }
            if !text
                .lines()
                .last()
                .unwrap_or("")
                .starts_with(r#"{"type":"end""#)
            {
                bail!("{}: the tape was not closed", who.label());
            }
        } else {
            let (want, _) = spec.stream();
            let want = String::from_utf8(want).expect("ASCII stream");
            let mut answers = 0;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: serde_json::Value = serde_json::from_str(line)
                    .with_context(|| format!("{}: a tape line that is not JSON", who.label()))?;
                if v["kind"] == "model_response" {
                    if v["body"].as_str() != Some(want.as_str()) {
                        bail!("{}: a taped answer is not the stream sent", who.label());
                    }
                    answers += 1;
                }
            }
            if answers != streams {
                bail!(
                    "{}: the tape holds {answers} answers, {streams} were streamed",
                    who.label()
                );
            }
        }
        Ok(())
    }
}

/// The model targets of this run, in run order.
fn targets(env: &Env) -> Vec<Who> {
    let mut v = vec![
        Who::ModelDirect,
        Who::ModelRelay,
        Who::ModelHyper,
        Who::ModelLean,
        Who::ModelRecord,
    ];
    if env.localab_python().is_some() {
        v.push(Who::ModelPeer);
    }
    v
}

pub fn model(env: &Env) -> Result<(Vec<ModelTtfb>, Vec<ModelRate>)> {
    let whos = targets(env);
    let n = whos.len();
    let mut samples: Vec<[Vec<u64>; 3]> = vec![Default::default(); n];
    let mut peaks: Vec<Option<u64>> = vec![None; n];
    let mut best: Vec<Option<ModelRate>> = vec![None; n];
    let mut cpu = vec![CpuTally::default(); n];
    let long = Spec {
        events: env.plan.model_events,
        size: SMALL_EVENT,
    };
    for _ in 0..env.plan.rounds {
        for (i, &who) in whos.iter().enumerate() {
            let requests = if who == Who::ModelPeer {
                env.plan.model_requests.min(env.plan.peer_calls)
            } else {
                env.plan.model_requests
            };
            let warm = (requests / 10).max(1);
            let t = env.spawn_model("ttfb", who)?;
            let before = crate::mem::cpu_ns(t.front.pid());
            let mut c = ModelConn::connect(who.label(), &t.front.url)?;
            for k in 0..warm + requests {
                let timing = c.stream(SHORT)?;
                if k >= warm {
                    samples[i][0].push(timing.head.as_nanos() as u64);
                    samples[i][1].push(timing.first_event.as_nanos() as u64);
                    samples[i][2].push(timing.end.as_nanos() as u64);
                }
            }
            drop(c);
            cpu[i].add(before, crate::mem::cpu_ns(t.front.pid()), warm + requests);
            peaks[i] = peaks[i].max(t.front.peak_rss());
            t.finish(who, warm + requests, SHORT)?;
        }
        for (i, &who) in whos.iter().enumerate() {
            let t = env.spawn_model("rate", who)?;
            let mut c = ModelConn::connect(who.label(), &t.front.url)?;
            let timing = c.stream(long)?;
            drop(c);
            let peak = t.front.peak_rss();
            t.finish(who, 1, long)?;
            let secs = timing.end.as_secs_f64();
            let bytes = long.stream().0.len();
            let row = ModelRate {
                target: who,
                events: long.total(),
                stream_bytes: bytes,
                secs,
                events_per_s: long.total() as f64 / secs,
                mb_per_s: bytes as f64 / secs / 1e6,
                peak_rss: peak,
            };
            if best[i]
                .as_ref()
                .is_none_or(|b| b.events_per_s < row.events_per_s)
            {
                best[i] = Some(row);
            }
        }
    }
    let ttfb = whos
        .iter()
        .zip(samples.iter_mut())
        .zip(peaks)
        .zip(cpu)
        .map(|(((&who, s), peak), cpu)| {
            for v in s.iter_mut() {
                v.sort_unstable();
            }
            ModelTtfb {
                target: who,
                requests: s[1].len(),
                events_per_stream: SHORT.total(),
                head_p50_us: pct(&s[0], 50.0),
                first_p50_us: pct(&s[1], 50.0),
                first_p90_us: pct(&s[1], 90.0),
                first_p99_us: pct(&s[1], 99.0),
                end_p50_us: pct(&s[2], 50.0),
                peak_rss: peak,
                cpu_us: cpu.per_call(),
            }
        })
        .collect();
    Ok((ttfb, best.into_iter().flatten().collect()))
}
