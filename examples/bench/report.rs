//! The results of one run: printed as tables, written as JSON, and judged against issue 6's
//! targets (ratios within the run).

use crate::scenarios::{Latency, Memory, Startup, Throughput, ToolRun, Who, MIB};
use serde::Serialize;

#[derive(Debug, Default, Serialize)]
pub struct Results {
    pub mode: String,
    pub pinned_cpu: Option<usize>,
    pub mcptape: String,
    pub started: String,
    pub plan: Option<crate::scenarios::Plan>,
    pub latency: Vec<Latency>,
    pub pipelined: Vec<Throughput>,
    pub large: Vec<Throughput>,
    pub memory: Vec<Memory>,
    pub big_tape_record_secs: Option<f64>,
    pub startup: Vec<Startup>,
    /// play on the big tape asked for calls it never recorded.
    pub misses: Option<crate::scenarios::Misses>,
    pub tools: Vec<ToolRun>,
    /// Streamable HTTP (`POST /mcp`): sequential 1 KiB calls on one connection.
    pub http_latency: Vec<Latency>,
    /// Streamable HTTP: 1 KiB calls over 64 keep-alive connections.
    pub http_pipelined: Vec<Throughput>,
    /// Model proxy: short streams, time to the first event (issue 19).
    pub model_ttfb: Vec<crate::model::ModelTtfb>,
    /// Model proxy: one long stream of small events.
    pub model_rate: Vec<crate::model::ModelRate>,
    /// `mcptape run` of Claude Code against the plain run, wall times.
    pub agent_runs: Vec<crate::agent_run::AgentRuns>,
    /// The soak (`--only soak`): record and play --listen under load for minutes.
    pub soak: Option<crate::soak::Soak>,
    pub targets: Vec<Target>,
    /// The HTTP proxies against the floor of their design (hyper on both sides, no tape).
    pub floors: Vec<String>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    pub measured: String,
    pub limit: String,
    pub met: bool,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

fn opt_mib(bytes: Option<u64>) -> String {
    bytes.map(mib).unwrap_or_else(|| "-".into())
}

/// CPU µs a call, one decimal.
fn opt_us(us: Option<f64>) -> String {
    us.map_or_else(|| "-".into(), |u| format!("{u:.1}"))
}

fn find<T>(rows: &[T], who: Who, of: impl Fn(&T) -> Who) -> Option<&T> {
    rows.iter().find(|r| of(r) == who)
}

impl Results {
    pub fn judge(&mut self) {
        let mut t = Vec::new();
        let lat = |w| find(&self.latency, w, |r| r.target).map(|r| r.p50_us);
        if let (Some(d), Some(r), Some(m)) = (lat(Who::Direct), lat(Who::Relay), lat(Who::Record)) {
            let ratio = (m - d) / (r - d);
            t.push(Target {
                name: "record: extra p50 over direct vs the relay's extra".into(),
                measured: format!("{:.1} µs vs {:.1} µs = {ratio:.2}×", m - d, r - d),
                limit: "≤ 1.50×".into(),
                met: ratio <= 1.5,
            });
        }
        let thr = |rows: &[Throughput], w, size| {
            rows.iter()
                .find(|r| r.target == w && r.size == size)
                .map(|r| r.mb_per_s)
        };
        if let (Some(r), Some(m)) = (
            thr(&self.pipelined, Who::Relay, 1024),
            thr(&self.pipelined, Who::Record, 1024),
        ) {
            // Issue 19's targets (issue 6 asked for 0.9×; docs/performance.md shows why a
            // taping proxy cannot reach either on one core).
            t.push(ratio_target(
                "record: pipelined throughput vs relay",
                m,
                r,
                0.75,
            ));
        }
        if let (Some(r), Some(m)) = (
            thr(&self.large, Who::Relay, 8 * MIB),
            thr(&self.large, Who::Record, 8 * MIB),
        ) {
            t.push(ratio_target("record: 8 MiB MB/s vs relay", m, r, 0.75));
        }
        for row in self.large.iter().filter(|r| r.target == Who::Record) {
            if let Some(peak) = row.peak_rss {
                let limit = 16 * MIB as u64 + 2 * (row.size as u64 + 1);
                t.push(Target {
                    name: format!("record: peak memory, {} MiB messages", row.size / MIB),
                    measured: mib(peak),
                    limit: format!("≤ {}", mib(limit)),
                    met: peak <= limit,
                });
            }
        }
        if let Some(m) = find(&self.memory, Who::Record, |r| r.target) {
            let limit = 16 * MIB as u64 + 2 * 257;
            t.push(Target {
                name: format!("record: peak memory over {} messages", m.messages),
                measured: mib(m.peak_rss),
                limit: format!("≤ {}", mib(limit)),
                met: m.peak_rss <= limit,
            });
            // Flat: the late part of the session holds no more than the early part plus 1 MiB
            // (allocator noise), however long the session runs.
            let growth = m.rss_late as i64 - m.rss_early as i64;
            t.push(Target {
                name: "record: memory flat across the session".into(),
                measured: format!(
                    "{} early → {} late ({:+.2} MiB)",
                    mib(m.rss_early),
                    mib(m.rss_late),
                    growth as f64 / MIB as f64
                ),
                limit: "growth ≤ 1 MiB".into(),
                met: growth <= MIB as i64,
            });
        }
        if let (Some(d), Some(p)) = (lat(Who::Direct), lat(Who::Play)) {
            t.push(Target {
                name: "play: p50 vs the direct server's p50".into(),
                measured: format!("{p:.1} µs vs {d:.1} µs = {:.2}×", p / d),
                limit: "≤ 1.00×".into(),
                met: p <= d,
            });
        }
        if let (Some(d), Some(p)) = (
            thr(&self.pipelined, Who::Direct, 1024),
            thr(&self.pipelined, Who::Play, 1024),
        ) {
            t.push(Target {
                name: "play: pipelined throughput vs the direct server".into(),
                measured: format!("{p:.1} vs {d:.1} MB/s = {:.2}×", p / d),
                limit: "≥ 1.00×".into(),
                met: p >= d,
            });
        }
        if let Some(s) = self
            .startup
            .iter()
            .find(|s| s.what == "mcptape play, big tape")
        {
            t.push(Target {
                name: format!("play: start-up on {} exchanges, warm", s.exchanges),
                measured: format!("{:.0} ms", s.median_ms),
                limit: "≤ 300 ms".into(),
                met: s.median_ms <= 300.0 && s.exchanges >= 100_000,
                // (a quick run's smaller tape says nothing about 100k: not met, run the full mode)
            });
            t.push(Target {
                name: format!("play: start-up on {} exchanges, cold", s.exchanges),
                measured: format!("{:.0} ms", s.cold_ms),
                limit: "≤ 300 ms".into(),
                met: s.cold_ms <= 300.0 && s.exchanges >= 100_000,
            });
        }
        if let Some(s) = self
            .startup
            .iter()
            .find(|s| s.what == "mcptape play, big tape, first play after record")
        {
            t.push(Target {
                name: format!(
                    "play: start-up on {} exchanges, first play after record",
                    s.exchanges
                ),
                measured: format!("{:.0} ms", s.cold_ms),
                limit: "≤ 300 ms".into(),
                met: s.cold_ms <= 300.0 && s.exchanges >= 100_000,
            });
        }
        for r in &self.tools {
            t.push(Target {
                name: format!("{}: MB/s of tape", r.what),
                measured: if r.correct {
                    format!("{:.0} MB/s", r.mb_per_s)
                } else {
                    format!("WRONG: exit {}", r.exit)
                },
                limit: "≥ 100 MB/s".into(),
                met: r.correct && r.mb_per_s >= 100.0,
            });
        }
        self.judge_round_two(&mut t);
        self.targets = t;
        self.floors = self.hyper_floors();
        self.floors.extend(self.lean_floors());
    }

    /// Where the lean taping proxy (`bench --lean-*-proxy`: parse, tape with mcptape's
    /// recorder, forward, nothing else) stands on the HTTP targets: met by it, a target is
    /// within reach of a taping proxy here, and the distance to mcptape's is what mcptape's HTTP
    /// handling costs; missed by it, the target is at the edge of what taping costs here.
    fn lean_floors(&self) -> Vec<String> {
        let mut out = Vec::new();
        let verdict = |ratio: f64, ok: bool| {
            format!(
                "{ratio:.2}× ({})",
                if ok {
                    "met by a proxy that only parses, tapes and forwards"
                } else {
                    "missed even by a proxy that only parses, tapes and forwards"
                }
            )
        };
        let lat = |w| find(&self.http_latency, w, |r| r.target).map(|r| r.p50_us);
        if let (Some(d), Some(r), Some(l), Some(m)) = (
            lat(Who::HttpDirect),
            lat(Who::HttpRelay),
            lat(Who::HttpLean),
            lat(Who::HttpRecord),
        ) {
            let ratio = (l - d) / (r - d);
            out.push(format!(
                "record --url's extra p50: the lean taping proxy's is {:.1} µs = {}; record --url's {:.1} µs",
                l - d,
                verdict(ratio, ratio <= 1.5),
                m - d
            ));
        }
        let thr = |w| find(&self.http_pipelined, w, |r| r.target).map(|r| r.mb_per_s);
        if let (Some(r), Some(l), Some(m)) = (
            thr(Who::HttpRelay),
            thr(Who::HttpLean),
            thr(Who::HttpRecord),
        ) {
            let ratio = l / r;
            out.push(format!(
                "record --url's throughput: the lean taping proxy moves {} the TCP relay's; record --url {:.2}×",
                verdict(ratio, ratio >= 0.75),
                m / r
            ));
        }
        let first = |w| find(&self.model_ttfb, w, |r| r.target).map(|r| r.first_p50_us);
        if let (Some(d), Some(r), Some(l), Some(m)) = (
            first(Who::ModelDirect),
            first(Who::ModelRelay),
            first(Who::ModelLean),
            first(Who::ModelRecord),
        ) {
            let ratio = (l - d) / (r - d);
            out.push(format!(
                "model-proxy's extra time to the first event: the lean taping proxy's is {:.1} µs = {}; model-proxy's {:.1} µs",
                l - d,
                verdict(ratio, ratio <= 1.5),
                m - d
            ));
        }
        // Not for events/s: the lean proxy parses each event plainly (a string or two each),
        // where model-proxy's per-event path was tuned over six rounds, so it is no floor there.
        out
    }

    /// What hyper on both sides costs before anything is taped (`bench --hyper-proxy`), against
    /// the relay, and how far `record --url` and `model-proxy` stand above that floor.
    fn hyper_floors(&self) -> Vec<String> {
        let mut out = Vec::new();
        let lat = |w| find(&self.http_latency, w, |r| r.target).map(|r| r.p50_us);
        if let (Some(d), Some(r), Some(h), Some(m)) = (
            lat(Who::HttpDirect),
            lat(Who::HttpRelay),
            lat(Who::HttpHyper),
            lat(Who::HttpRecord),
        ) {
            out.push(format!(
                "record --url's extra p50: the hyper proxy's (no tape) is {:.1} µs = {:.2}× the TCP relay's {:.1} µs; record --url's {:.1} µs = {:.2}× the hyper proxy's",
                h - d,
                (h - d) / (r - d),
                r - d,
                m - d,
                (m - d) / (h - d)
            ));
        }
        let thr = |w| find(&self.http_pipelined, w, |r| r.target).map(|r| r.mb_per_s);
        if let (Some(r), Some(h), Some(m)) = (
            thr(Who::HttpRelay),
            thr(Who::HttpHyper),
            thr(Who::HttpRecord),
        ) {
            out.push(format!(
                "record --url's throughput: the hyper proxy (no tape) moves {:.2}× the TCP relay's; record --url {:.2}× the hyper proxy's",
                h / r,
                m / h
            ));
        }
        let first = |w| find(&self.model_ttfb, w, |r| r.target).map(|r| r.first_p50_us);
        if let (Some(d), Some(r), Some(h), Some(m)) = (
            first(Who::ModelDirect),
            first(Who::ModelRelay),
            first(Who::ModelHyper),
            first(Who::ModelRecord),
        ) {
            out.push(format!(
                "model-proxy's extra time to the first event: the hyper proxy's (no tape) is {:.1} µs = {:.2}× the relay's {:.1} µs; model-proxy's {:.1} µs = {:.2}× the hyper proxy's",
                h - d,
                (h - d) / (r - d),
                r - d,
                m - d,
                (m - d) / (h - d)
            ));
        }
        let rate = |w| find(&self.model_rate, w, |r| r.target).map(|r| r.events_per_s);
        if let (Some(r), Some(h), Some(m)) = (
            rate(Who::ModelRelay),
            rate(Who::ModelHyper),
            rate(Who::ModelRecord),
        ) {
            out.push(format!(
                "model-proxy's events/s: the hyper proxy (no tape) moves {:.2}× the relay's; model-proxy {:.2}× the hyper proxy's",
                h / r,
                m / h
            ));
        }
        out
    }

    /// Issue 19's targets: `record --url`, the model proxy and `mcptape run`.
    fn judge_round_two(&self, t: &mut Vec<Target>) {
        let lat = |w| find(&self.http_latency, w, |r| r.target).map(|r| r.p50_us);
        if let (Some(d), Some(r), Some(m)) = (
            lat(Who::HttpDirect),
            lat(Who::HttpRelay),
            lat(Who::HttpRecord),
        ) {
            let ratio = (m - d) / (r - d);
            t.push(Target {
                name: "record --url: extra p50 over direct vs the TCP relay's extra".into(),
                measured: format!("{:.1} µs vs {:.1} µs = {ratio:.2}×", m - d, r - d),
                limit: "≤ 1.50×".into(),
                met: ratio <= 1.5,
            });
        }
        let thr = |w| find(&self.http_pipelined, w, |r| r.target).map(|r| r.mb_per_s);
        if let (Some(r), Some(m)) = (thr(Who::HttpRelay), thr(Who::HttpRecord)) {
            t.push(ratio_target(
                "record --url: throughput, 64 connections, vs the TCP relay",
                m,
                r,
                0.75,
            ));
        }
        let first = |w| find(&self.model_ttfb, w, |r| r.target).map(|r| r.first_p50_us);
        if let (Some(d), Some(r), Some(m)) = (
            first(Who::ModelDirect),
            first(Who::ModelRelay),
            first(Who::ModelRecord),
        ) {
            let ratio = (m - d) / (r - d);
            t.push(Target {
                name: "model-proxy: extra time to first event vs the relay's".into(),
                measured: format!("{:.1} µs vs {:.1} µs = {ratio:.2}×", m - d, r - d),
                limit: "≤ 1.50×".into(),
                met: ratio <= 1.5,
            });
        }
        let rate = |w| find(&self.model_rate, w, |r| r.target).map(|r| r.events_per_s);
        if let (Some(r), Some(m)) = (rate(Who::ModelRelay), rate(Who::ModelRecord)) {
            let ratio = m / r;
            t.push(Target {
                name: "model-proxy: SSE events/s vs the relay".into(),
                measured: format!("{m:.0} vs {r:.0} events/s = {ratio:.2}×"),
                limit: "≥ 0.75×".into(),
                met: ratio >= 0.75,
            });
        }
        if let [direct, through] = &self.agent_runs[..] {
            let ratio = through.median_s / direct.median_s;
            t.push(Target {
                name: format!("run: Claude Code wall time, median of {}", direct.runs),
                measured: format!(
                    "{:.2} s vs {:.2} s = {ratio:.3}×",
                    through.median_s, direct.median_s
                ),
                limit: "≤ 1.05×".into(),
                met: ratio <= 1.05,
            });
        }
    }

    pub fn print(&self) {
        println!(
            "mcptape bench ({} mode, {}), {}",
            self.mode,
            match self.pinned_cpu {
                Some(c) => format!("pinned to CPU {c}"),
                None => "unpinned".into(),
            },
            self.mcptape
        );
        let stdio = (Who::Direct, Who::Relay);
        print_latency(
            "Sequential latency, 1 KiB tools/call round trips",
            &self.latency,
            stdio,
        );
        print_throughput(
            "Pipelined, 64 in flight, 1 KiB answers",
            &self.pipelined,
            stdio,
        );
        let mut sizes: Vec<usize> = self.large.iter().map(|r| r.size).collect();
        sizes.dedup();
        for size in sizes {
            let rows: Vec<Throughput> = self
                .large
                .iter()
                .filter(|r| r.size == size)
                .cloned()
                .collect();
            print_throughput(
                &format!("Large answers, {} MiB each", size / MIB),
                &rows,
                stdio,
            );
        }
        if !self.memory.is_empty() {
            println!("\nLong session: memory (VmHWM peak; VmRSS early 5–25 %, late 80–100 %)");
            println!(
                "  {:<20} {:>9} {:>8} {:>10} {:>10} {:>10} {:>10}",
                "target", "messages", "secs", "peak", "early", "late", "tape"
            );
            for m in &self.memory {
                println!(
                    "  {:<20} {:>9} {:>8.1} {:>10} {:>10} {:>10} {:>10}",
                    m.target.label(),
                    m.messages,
                    m.secs,
                    mib(m.peak_rss),
                    mib(m.rss_early),
                    mib(m.rss_late),
                    opt_mib(m.tape_bytes)
                );
            }
        }
        if !self.startup.is_empty() {
            println!("\nStart-up: process start to the answer to initialize");
            println!(
                "  {:<28} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9}",
                "what", "exchanges", "tape", "cold ms", "median ms", "min ms", "max ms"
            );
            for s in &self.startup {
                println!(
                    "  {:<28} {:>9} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                    s.what,
                    s.exchanges,
                    mib(s.tape_bytes),
                    s.cold_ms,
                    s.median_ms,
                    s.min_ms,
                    s.max_ms
                );
            }
        }
        if let Some(m) = &self.misses {
            println!(
                "\nplay misses: calls the big tape ({} exchanges) never recorded, one at a time",
                m.exchanges
            );
            println!(
                "  {} misses: first {:.2} ms, then median {:.2} ms, max {:.2} ms; peak RSS {}",
                m.misses,
                m.first_ms,
                m.median_ms,
                m.max_ms,
                opt_mib(m.peak_rss)
            );
        }
        if !self.tools.is_empty() {
            println!("\ndiff (both tapes read) and check (baseline tape, live server)");
            println!(
                "  {:<8} {:>10} {:>8} {:>9} {:>6} {:>10}",
                "command", "tape", "secs", "MB/s", "exit", "peak RSS"
            );
            for r in &self.tools {
                println!(
                    "  {:<8} {:>10} {:>8.2} {:>9.0} {:>6} {:>10}",
                    r.what,
                    mib(r.tape_bytes),
                    r.secs,
                    r.mb_per_s,
                    r.exit,
                    mib(r.peak_rss)
                );
            }
        }
        let http = (Who::HttpDirect, Who::HttpRelay);
        print_latency(
            "Streamable HTTP: sequential latency, 1 KiB tools/call POSTs on one connection",
            &self.http_latency,
            http,
        );
        print_throughput(
            "Streamable HTTP: 64 keep-alive connections in flight, 1 KiB answers",
            &self.http_pipelined,
            http,
        );
        self.print_round_two();
        if let Some(soak) = &self.soak {
            println!(
                "\nSoak: {:.0} s of steady mixed load, sampled every second (start = after 10 s)",
                soak.secs
            );
            println!(
                "  {:<20} {:>8} {:>8} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6}",
                "target",
                "calls",
                "sessions",
                "RSS start",
                "RSS peak",
                "RSS end",
                "fds",
                "peak",
                "end"
            );
            for t in &soak.targets {
                println!(
                    "  {:<20} {:>8} {:>8} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6}",
                    t.target.label(),
                    t.calls,
                    t.sessions,
                    mib(t.rss.start),
                    mib(t.rss.peak),
                    mib(t.rss.end),
                    t.fds.start,
                    t.fds.peak,
                    t.fds.end
                );
            }
        }
        if !self.targets.is_empty() {
            println!("\nTargets (issues 6 and 19)");
            for t in &self.targets {
                println!(
                    "  {:<7} {:<52} {:<36} {}",
                    if t.met { "met" } else { "MISSED" },
                    t.name,
                    t.measured,
                    t.limit
                );
            }
        }
        if !self.floors.is_empty() {
            println!(
                "\nFloors: hyper on both sides, no tape (bench --hyper-proxy); a proxy that only parses, tapes and forwards (bench --lean-*-proxy)"
            );
            for f in &self.floors {
                println!("  {f}");
            }
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }
}

impl Results {
    fn print_round_two(&self) {
        if !self.model_ttfb.is_empty() {
            let d = find(&self.model_ttfb, Who::ModelDirect, |r| r.target).map(|r| r.first_p50_us);
            let r = find(&self.model_ttfb, Who::ModelRelay, |r| r.target).map(|r| r.first_p50_us);
            println!(
                "\nModel proxy: time to the first event, {}-event streams one after the other on one connection",
                crate::model::SHORT.total()
            );
            println!(
                "  {:<20} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10}",
                "target",
                "reqs",
                "head p50",
                "1st p50",
                "1st p90",
                "1st p99",
                "end p50",
                "extra",
                "×relay+",
                "CPU µs",
                "peak RSS"
            );
            for row in &self.model_ttfb {
                let extra = d.map(|d| row.first_p50_us - d);
                let vs = match (extra, r.zip(d)) {
                    (Some(e), Some((r, d))) if row.target != Who::ModelDirect => {
                        format!("{:.2}", e / (r - d))
                    }
                    _ => "-".into(),
                };
                println!(
                    "  {:<20} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>8} {:>8} {:>10}",
                    row.target.label(),
                    row.requests,
                    row.head_p50_us,
                    row.first_p50_us,
                    row.first_p90_us,
                    row.first_p99_us,
                    row.end_p50_us,
                    extra.map_or("-".into(), |e| format!("{e:+.1}")),
                    vs,
                    opt_us(row.cpu_us),
                    opt_mib(row.peak_rss)
                );
            }
        }
        if !self.model_rate.is_empty() {
            let d = find(&self.model_rate, Who::ModelDirect, |r| r.target).map(|r| r.events_per_s);
            let r = find(&self.model_rate, Who::ModelRelay, |r| r.target).map(|r| r.events_per_s);
            println!("\nModel proxy: one long stream of small events (16-byte text deltas)");
            println!(
                "  {:<20} {:>8} {:>8} {:>11} {:>8} {:>8} {:>8} {:>10}",
                "target", "events", "secs", "events/s", "MB/s", "×direct", "×relay", "peak RSS"
            );
            for row in &self.model_rate {
                let ratio = |b: Option<f64>| {
                    b.map_or("-".into(), |b| format!("{:.2}", row.events_per_s / b))
                };
                println!(
                    "  {:<20} {:>8} {:>8.3} {:>11.0} {:>8.1} {:>8} {:>8} {:>10}",
                    row.target.label(),
                    row.events,
                    row.secs,
                    row.events_per_s,
                    row.mb_per_s,
                    ratio(d),
                    ratio(r),
                    opt_mib(row.peak_rss)
                );
            }
        }
        if !self.agent_runs.is_empty() {
            println!("\nmcptape run: the same scripted Claude Code run, wall time (start to exit), alternating");
            println!(
                "  {:<26} {:>5} {:>9} {:>8} {:>8}  all",
                "what", "runs", "median s", "min s", "max s"
            );
            for a in &self.agent_runs {
                let all: Vec<String> = a.all_s.iter().map(|s| format!("{s:.2}")).collect();
                println!(
                    "  {:<26} {:>5} {:>9.3} {:>8.3} {:>8.3}  {}",
                    a.what,
                    a.runs,
                    a.median_s,
                    a.min_s,
                    a.max_s,
                    all.join(" ")
                );
            }
        }
    }
}

/// A latency table; `base` is (direct, relay): *extra* is over direct, ×relay+ its ratio to the
/// relay's extra.
fn print_latency(title: &str, rows: &[Latency], base: (Who, Who)) {
    if rows.is_empty() {
        return;
    }
    let d = find(rows, base.0, |r| r.target).map(|r| r.p50_us);
    let r = find(rows, base.1, |r| r.target).map(|r| r.p50_us);
    println!("\n{title}");
    println!(
        "  {:<20} {:>7} {:>9} {:>9} {:>9} {:>11} {:>9} {:>10} {:>10}",
        "target",
        "calls",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "extra p50",
        "×relay+",
        "CPU µs",
        "peak RSS"
    );
    for l in rows {
        let extra = d.map(|d| l.p50_us - d);
        let vs = match (extra, r.zip(d)) {
            (Some(e), Some((r, d))) if l.target != base.0 => format!("{:.2}", e / (r - d)),
            _ => "-".into(),
        };
        println!(
            "  {:<20} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>11} {:>9} {:>10} {:>10}",
            l.target.label(),
            l.calls,
            l.p50_us,
            l.p90_us,
            l.p99_us,
            extra.map_or("-".into(), |e| format!("{e:+.1}")),
            vs,
            opt_us(l.cpu_us),
            opt_mib(l.peak_rss)
        );
    }
}

/// A throughput table; `base` is (direct, relay), the rows' ratios are to theirs.
fn print_throughput(title: &str, rows: &[Throughput], base: (Who, Who)) {
    if rows.is_empty() {
        return;
    }
    let d = find(rows, base.0, |r| r.target).map(|r| r.mb_per_s);
    let r = find(rows, base.1, |r| r.target).map(|r| r.mb_per_s);
    println!("\n{title}");
    println!(
        "  {:<20} {:>7} {:>10} {:>9} {:>8} {:>8} {:>10}",
        "target", "calls", "calls/s", "MB/s", "×direct", "×relay", "peak RSS"
    );
    for row in rows {
        let ratio =
            |base: Option<f64>| base.map_or("-".into(), |b| format!("{:.2}", row.mb_per_s / b));
        println!(
            "  {:<20} {:>7} {:>10.0} {:>9.1} {:>8} {:>8} {:>10}",
            row.target.label(),
            row.calls,
            row.calls_per_s,
            row.mb_per_s,
            ratio(d),
            ratio(r),
            opt_mib(row.peak_rss)
        );
    }
}

fn ratio_target(name: &str, measured: f64, relay: f64, min: f64) -> Target {
    let ratio = measured / relay;
    Target {
        name: name.into(),
        measured: format!("{measured:.1} vs {relay:.1} MB/s = {ratio:.2}×"),
        limit: format!("≥ {min:.2}×"),
        met: ratio >= min,
    }
}
