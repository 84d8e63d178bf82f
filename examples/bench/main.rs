//! The mcptape benchmark (issue 6): the same MCP sessions straight to a server, through a bare
//! byte relay, through `mcptape record` and served by `mcptape play`, side by side in one run.
//!
//! ```text
//! cargo build --profile dist --bin mcptape
//! cargo run --profile dist --example bench -- [--quick] [--pin CPU] [--json FILE]
//! ```
//!
//! The binary is also the server (`--serve`, `--serve-http ADDR`) and the relays (`--relay --
//! CMD…`, `--relay-http URL`) it measures: it re-spawns itself. See docs/performance.md for what each scenario measures.

mod agent_run;
mod client;
mod http;
mod http_client;
mod lean;
mod mem;
mod model;
mod model_client;
mod proto;
mod provider;
mod relay;
mod report;
mod scenarios;
mod serve;
mod soak;

use anyhow::{bail, Context, Result};
use clap::Parser;
use scenarios::{Env, Plan};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "bench",
    about = "Benchmark mcptape record/play/diff/check against the server directly and a bare relay"
)]
struct Args {
    /// A short run (well under a minute): fewer calls, one round.
    #[arg(long)]
    quick: bool,
    /// Pin this process and everything it starts to one CPU (sched_setaffinity).
    #[arg(long, value_name = "CPU")]
    pin: Option<usize>,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The mcptape binary (default: the one built with the bench's own profile, beside it:
    /// target/dist/mcptape for `cargo run --profile dist --example bench`).
    #[arg(long, value_name = "PATH")]
    mcptape: Option<PathBuf>,
    /// Skip the PyPI peer localab-vcr (otherwise installed into a venv under target/).
    #[arg(long)]
    no_peer: bool,
    /// Run only these scenarios (repeatable): latency, pipelined, large, memory, startup, tools,
    /// http, model (the model proxy), run (`mcptape run` of Claude Code); and soak, which only
    /// runs when named.
    #[arg(long, value_name = "SCENARIO")]
    only: Vec<String>,
    /// How long the soak runs, in seconds (`--only soak`).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    soak_secs: u64,
    /// Keep the work directory (tapes, stderr of every target) and print its path.
    #[arg(long)]
    keep: bool,
}

const SCENARIOS: &[&str] = &[
    "latency",
    "pipelined",
    "large",
    "memory",
    "startup",
    "tools",
    "http",
    "model",
    "run",
    "soak",
];

fn main() {
    // The modes the benchmark re-spawns itself in come first and skip argument parsing.
    let argv: Vec<String> = std::env::args().collect();
    let code = match argv.get(1).map(String::as_str) {
        Some("--serve") => report_err(serve::run().map(|()| 0)),
        Some("--serve-http") => report_err(http::serve(argv.get(2).map_or("", String::as_str))),
        Some("--serve-model") => {
            report_err(provider::serve(argv.get(2).map_or("", String::as_str)))
        }
        Some("--relay-http") => report_err(http::relay(argv.get(2).map_or("", String::as_str))),
        Some("--hyper-proxy") => {
            report_err(http::hyper_proxy(argv.get(2).map_or("", String::as_str)))
        }
        Some(m @ ("--lean-model-proxy" | "--lean-http-proxy")) => {
            let kind = if m == "--lean-model-proxy" {
                lean::Kind::Model
            } else {
                lean::Kind::Mcp
            };
            let arg = |i: usize| argv.get(i).map_or("", String::as_str);
            report_err(lean::run(kind, arg(2), arg(3)))
        }
        Some("--relay") => {
            let cmd = argv.get(3..).unwrap_or_default();
            report_err(relay::run(cmd))
        }
        _ => report_err(run(Args::parse())),
    };
    std::process::exit(code);
}

fn report_err(r: Result<i32>) -> i32 {
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench: {e:#}");
            1
        }
    }
}

fn run(args: Args) -> Result<i32> {
    for s in &args.only {
        if !SCENARIOS.contains(&s.as_str()) {
            bail!("unknown scenario {s:?}; known: {}", SCENARIOS.join(", "));
        }
    }
    let named = |s: &str| args.only.iter().any(|o| o == s);
    let want = |s: &str| s != "soak" && (args.only.is_empty() || named(s));
    if let Some(cpu) = args.pin {
        pin(cpu)?;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The mcptape of the bench's own profile (target/PROFILE/examples/bench → target/PROFILE/
    // mcptape): what is measured and what measures it are built alike, and with `dist` that is
    // the binary `cargo install --profile dist` ships.
    let exe = std::env::current_exe().context("the bench's own path")?;
    let profile_dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .context("the bench runs from outside a cargo target directory: give --mcptape")?;
    // cargo builds the `dev` profile into `debug`.
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => "dist",
    };
    let mcptape = args
        .mcptape
        .clone()
        .unwrap_or_else(|| profile_dir.join("mcptape"));
    if !mcptape.exists() {
        bail!(
            "{} not found: run `cargo build --profile {profile} --bin mcptape` first",
            mcptape.display()
        );
    }
    // Absolute: every target runs in the bench's work directory, where a relative path such as
    // `target/release/mcptape` names nothing.
    let mcptape = std::fs::canonicalize(&mcptape)
        .with_context(|| format!("cannot resolve {}", mcptape.display()))?;
    let mut results = report::Results {
        mode: if args.quick { "quick" } else { "full" }.into(),
        pinned_cpu: args.pin,
        mcptape: mcptape.display().to_string(),
        started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        ..Default::default()
    };
    let peer = if args.no_peer {
        results
            .notes
            .push("localab-vcr: skipped (--no-peer)".into());
        None
    } else {
        match install_peer(&root.join("target/bench-peer-venv")) {
            Ok(p) => Some(p),
            Err(e) => {
                results
                    .notes
                    .push(format!("localab-vcr: skipped, it did not install: {e:#}"));
                None
            }
        }
    };
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if peer.is_some() {
        results.notes.push(format!(
            "localab-vcr re-reads its whole tape on every write (O(n²)): its rows use at most {} \
             calls (2 per large size), and it is left out of the long session",
            plan.peer_calls
        ));
    }
    let work = tempfile::Builder::new()
        .prefix("mcptape-bench-")
        .tempdir()?;
    // Every mcptape the bench starts keeps its index cache in the work directory, not the
    // user's (the start-up scenario measures cold and warm starts).
    std::env::set_var("XDG_CACHE_HOME", work.path().join("cache"));
    std::env::remove_var("MCPTAPE_CACHE_DIR"); // which would come first
    let env = Env {
        bench: std::env::current_exe()?,
        mcptape,
        peer,
        recorders: Some(root.join("tests/recorders/.venv"))
            .filter(|v| v.join("bin/python").exists()),
        work: work.path().to_path_buf(),
        plan: plan.clone(),
    };
    if env.recorders.is_none() {
        results.notes.push(
            "mcp-rec, mcp-vcr, agent-vcr, mcp-cassette: skipped, tests/recorders/.venv is not there \
             (./scripts/test installs it)"
                .into(),
        );
    }
    results.plan = Some(plan);
    let step = |name: &str| eprintln!("bench: {name}…");
    if want("latency") || want("startup") {
        step("sequential latency");
        results.latency = scenarios::latency(&env).context("latency")?;
    }
    if want("pipelined") {
        step("pipelined throughput");
        results.pipelined = scenarios::pipelined(&env).context("pipelined")?;
    }
    if want("large") {
        step("large messages");
        results.large = scenarios::large(&env).context("large messages")?;
    }
    if want("memory") {
        step("long session (memory)");
        results.memory = scenarios::memory(&env).context("memory")?;
    }
    if want("startup") || want("tools") {
        step("recording two big tapes");
        let (a, b, secs) = scenarios::big_tapes(&env).context("big tapes")?;
        results.big_tape_record_secs = Some(secs);
        if want("startup") {
            step("play start-up");
            results.startup = scenarios::startup(&env, &a).context("start-up")?;
            step("play misses on the big tape");
            results.misses = Some(scenarios::misses(&env, &a).context("play misses")?);
        }
        if want("tools") {
            step("diff and check");
            results.tools = scenarios::tools(&env, &a, &b).context("diff and check")?;
        }
    }
    if want("http") {
        step("Streamable HTTP");
        let (latency, pipelined) = scenarios::http(&env).context("Streamable HTTP")?;
        results.http_latency = latency;
        results.http_pipelined = pipelined;
    }
    if want("model") {
        step("model proxy");
        let (ttfb, rate) = model::model(&env).context("model proxy")?;
        results.model_ttfb = ttfb;
        results.model_rate = rate;
    }
    if want("run") {
        step("mcptape run of Claude Code");
        // Claude Code failing to run here is a row that says why, not the end of the bench.
        match agent_run::agent_run(&env, &mut results.notes) {
            Ok(rows) => results.agent_runs = rows.unwrap_or_default(),
            Err(e) => results.notes.push(format!(
                "run: Claude Code could not be run from the bench: {e:#}"
            )),
        }
    }
    if named("soak") {
        step(&format!("soak, {} s", args.soak_secs));
        results.soak = Some(soak::soak(&env, args.soak_secs).context("soak")?);
    }
    results.judge();
    results.print();
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&results)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if args.keep {
        eprintln!("bench: work directory kept: {}", work.keep().display());
    }
    Ok(0)
}

/// Pins this process (and so everything it starts) to `cpu`.
fn pin(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity get a valid
    // pointer to it and its exact size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Installs the PyPI peer `localab-vcr` into a venv at `dir` (once); returns its `agent-vcr`.
fn install_peer(dir: &std::path::Path) -> Result<PathBuf> {
    let exe = dir.join("bin/agent-vcr");
    if exe.exists() {
        return Ok(exe);
    }
    let quiet = |cmd: &mut std::process::Command| -> Result<()> {
        let out = cmd.output()?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    };
    eprintln!("bench: installing localab-vcr into {}…", dir.display());
    quiet(
        std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(dir),
    )?;
    quiet(std::process::Command::new(dir.join("bin/pip")).args([
        "install",
        "--quiet",
        "localab-vcr",
    ]))?;
    if !exe.exists() {
        bail!("localab-vcr installed but {} is missing", exe.display());
    }
    Ok(exe)
}
