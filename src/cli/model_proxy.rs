use anyhow::Result;
use mcptape::model::serve::{play_model, record_model, ModelProxyConfig};
use mcptape::tape::{store, WriteOptions};
use mcptape::wire::DEFAULT_MAX_MESSAGE;

/// Record an agent's model API calls onto a tape, or answer them from one.
///
/// Record: a local proxy in front of the model API. Point the agent's base URL at the URL
/// printed on stdout:
///
///   mcptape model-proxy --tape run1 --upstream https://api.anthropic.com
///   ANTHROPIC_BASE_URL=http://127.0.0.1:PORT claude -p "…"
///
/// Anthropic Messages, OpenAI Chat Completions and Responses, Gemini and any OpenAI-compatible
/// API: streamed answers are forwarded event by event, each on the tape first. API keys are
/// forwarded, never taped; bodies go through the redactor.
///
/// Playback (--playback): no upstream at all. A request is matched by its content (volatile
/// fields such as session ids and dates left out), the earliest unused recorded call first; a
/// miss gets an error in the provider's format naming the nearest recorded call, and exit 1.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_MODEL_PROXY, verbatim_doc_comment)]
pub struct Args {
    /// Tape name or path (as for `record`). Default when recording: `model` and the time.
    #[arg(
        long,
        short = 't',
        value_name = "NAME|PATH",
        required_if_eq("playback", "true")
    )]
    tape: Option<String>,
    /// The model API's base URL, e.g. https://api.anthropic.com or https://api.openai.com (a
    /// path prefix is kept: the client's path is appended to it).
    #[arg(long, value_name = "URL", required_unless_present = "playback")]
    upstream: Option<String>,
    /// Answer from the tape instead: no upstream connection at all.
    #[arg(long, conflicts_with = "upstream")]
    playback: bool,
    /// Playback: serve a request that matches nothing the next unused call of its endpoint
    /// (reported, exit 1 all the same).
    #[arg(long, requires = "playback")]
    lenient: bool,
    /// Where to listen (default 127.0.0.1 with a free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// CA certificates (PEM) to check an https:// upstream against, instead of the system's.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<std::path::PathBuf>,
    /// The label of the model calls on the tape.
    #[arg(long, value_name = "LABEL", default_value = mcptape::model::serve::DEFAULT_LABEL)]
    label: String,
    /// Largest request or answer body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE, value_parser = super::parse_nonzero)]
    max_message: usize,
    #[command(flatten)]
    limits: super::LimitArgs,
    #[command(flatten)]
    redact: super::RedactArgs,
    #[command(flatten)]
    sign: super::SignArgs,
}

pub fn run(a: Args) -> Result<i32> {
    let listen = a
        .listen
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    if !listen.ip().is_loopback() {
        crate::diag!("mcptape: WARNING: listening on {listen}, reachable from other machines");
    }
    if a.playback {
        let name = a.tape.clone().unwrap_or_default();
        let path = super::remote::resolve(&name)?;
        let mut cfg = ModelProxyConfig::new(path.clone(), String::new(), WriteOptions::default());
        cfg.listen = listen;
        cfg.label = a.label.clone();
        cfg.max_message = a.max_message;
        cfg.limits = a.limits.limits();
        cfg.marker_key = super::marker_key()?;
        let report = super::runtime::multi()?.block_on(async {
            let stop = super::runtime::stop_signal()?;
            let on_ready = |url: &str| {
                let _ = super::stdout(&format!("{url}\n"));
                crate::diag!(
                    "mcptape model-proxy: playing the model calls of {} at {url}; Ctrl-C to stop",
                    path.display()
                );
            };
            anyhow::Ok(play_model(&cfg, a.lenient, stop, on_ready).await?)
        })?;
        for l in &report.lenient {
            crate::diag!("{l}");
        }
        crate::diag!(
            "mcptape model-proxy: {} served, {} missed, {} served leniently, {} unused{}{}",
            super::plural(report.served, "model call"),
            report.misses.len(),
            report.lenient.len(),
            super::plural(report.unused, "recorded call"),
            report
                .ambiguity()
                .map(|a| format!(", {a}"))
                .unwrap_or_default(),
            match report.setup_served {
                0 => String::new(),
                n => format!(
                    "; {} served beside them",
                    super::plural(n, "Code Assist setup call")
                ),
            }
        );
        let failed = !report.misses.is_empty() || !report.lenient.is_empty();
        return Ok(if failed {
            mcptape::exit::DRIFT
        } else {
            mcptape::exit::OK
        });
    }
    let upstream = a
        .upstream
        .clone()
        .expect("clap requires --upstream without --playback");
    let name = a
        .tape
        .clone()
        .unwrap_or_else(|| store::default_name(&["model".to_string()]));
    let tape = super::remote::resolve_for_write(&name)?;
    let write = WriteOptions {
        redactor: Some(std::sync::Arc::new(a.redact.redactor()?)),
        signing_key: a.sign.signing_key()?,
    };
    let mut cfg = ModelProxyConfig::new(tape, upstream.clone(), write);
    cfg.listen = listen;
    cfg.label = a.label;
    cfg.upstream_ca = a.upstream_ca;
    cfg.max_message = a.max_message;
    cfg.limits = a.limits.limits();
    // One thread: every event takes the tape's lock anyway, and on one thread the hops between
    // the client's connection, the upstream's and the pump need no wake-up of another worker
    // (measured, pinned to one CPU: a fifth less CPU per streamed event, and whole reads
    // gathered into one tape write).
    let out = super::runtime::single()?.block_on(async {
        let stop = super::runtime::stop_signal()?;
        let on_ready = |url: &str| {
            let _ = super::stdout(&format!("{url}\n"));
            crate::diag!(
                "mcptape model-proxy: recording model calls to {upstream} at {url} (tape {}); Ctrl-C to stop",
                cfg.tape.display()
            );
        };
        anyhow::Ok(record_model(&cfg, stop, on_ready).await?)
    })?;
    // A call is one request line; its answer may be many (a streamed one, event by event).
    let (out, taped) = out;
    crate::diag!(
        "mcptape model-proxy: recorded {}{} to {} ({} lines: the requests, the answers event by event)",
        super::plural(taped.calls, "model call"),
        super::run::setup_beside(taped.setup),
        out.tape.display(),
        out.end.messages,
    );
    if let Some((n, why)) = &out.write_failure {
        crate::diag!("mcptape: WARNING: {n} tape lines could not be written ({why}); the tape is marked incomplete");
        return Ok(mcptape::exit::IO_ERR);
    }
    if matches!(out.placed, mcptape::tape::Placed::NotReplaced { .. }) {
        return Ok(mcptape::exit::IO_ERR);
    }
    Ok(mcptape::exit::OK)
}
