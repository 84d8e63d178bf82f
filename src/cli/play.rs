use anyhow::Result;
use mcptape::play::serve::UNUSED_DESCRIBED;
use mcptape::play::{serve, ServeOptions};
use mcptape::tape::{TapeIndex, Warning};
use mcptape::wire::DEFAULT_MAX_MESSAGE;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Serve a tape as the MCP server over stdio: no server process, no side effects.
///
/// Requests are matched by content (method and canonical params, volatile fields ignored), the
/// earliest unused recorded exchange first. A request that is not on the tape gets a JSON-RPC
/// error naming the nearest recorded calls and the exact JSON differences (also on stderr), and
/// play exits 1 at the end. A summary goes to stderr: served, missed, drifted, unused.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_PLAY)]
pub struct Args {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// The same as --on-miss lenient.
    #[arg(long, conflicts_with = "on_miss")]
    lenient: bool,
    #[command(flatten)]
    matching: super::matching::MatchArgs,
    /// A miss gets: error (explained), lenient, or live [default: error]
    ///
    /// error: a JSON-RPC error explaining the miss. lenient: the next unused recorded exchange of
    /// the same method (reported). live: the live server's answer (a command after --, or --url),
    /// appended to the tape.
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        default_value = "error",
        hide_default_value = true,
        hide_possible_values = true
    )]
    on_miss: OnMiss,
    /// These calls live, the rest from the tape: tool:NAME, resource:URI, prompt:NAME
    ///
    /// A bare name is a tool; a trailing * matches any rest; repeatable or comma-separated. Only
    /// tools/call, resources/read and prompts/get are chosen; nothing is appended.
    #[arg(
        long,
        value_name = "SELECTOR",
        value_delimiter = ',',
        conflicts_with = "from_tape"
    )]
    live: Vec<mcptape::play::select::Selector>,
    /// These calls from the tape, every other call live (selectors as for --live)
    #[arg(long, value_name = "SELECTOR", value_delimiter = ',')]
    from_tape: Vec<mcptape::play::select::Selector>,
    /// The live server at this Streamable HTTP URL (instead of a command)
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// Append the live answers to this tape, not to the one played
    ///
    /// A tape that is not there is started.
    #[arg(long, value_name = "TAPE")]
    append_to: Option<String>,
    /// Which server of a multi-server tape to play (default: the first).
    #[arg(long, value_name = "LABEL")]
    server: Option<String>,
    /// Seconds to wait for the client's answer to a replayed server request (sampling,
    /// elicitation, roots) before reporting it as drift.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = super::parse_secs)]
    answer_timeout: Duration,
    /// Serve over Streamable HTTP on this address (e.g. 127.0.0.1:8931; port 0 picks one)
    /// instead of stdio. The URL to give the client is printed on stdout; Ctrl-C stops.
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// With --listen: `streamable-http` (the default), or `sse` for clients of the older HTTP+SSE
    /// transport (GET /sse for the event stream, POST to the endpoint it names).
    #[arg(
        long,
        value_enum,
        default_value = "streamable-http",
        requires = "listen"
    )]
    transport: Transport,
    #[command(flatten)]
    limits: super::LimitArgs,
    /// With --listen: sessions open at once; past it an `initialize` gets 503.
    #[arg(long, value_name = "N", default_value_t = mcptape::play::http::MAX_SESSIONS, requires = "listen")]
    max_sessions: usize,
    /// With --listen: seconds a session may go without a request (and no GET stream open)
    /// before it is closed; its id then gets 404, and the client initializes again.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = super::parse_positive_secs, requires = "listen")]
    session_idle: std::time::Duration,
    /// Largest client message accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE, value_parser = super::parse_nonzero)]
    max_message: usize,
    /// Refuse (exit 65) a tape whose hash chain is missing or does not hold, before serving
    /// anything. Without it such a tape is played with a warning.
    #[arg(long)]
    require_chain: bool,
    #[command(flatten)]
    read: super::ReadArgs,
    /// Answer with the recorded latencies (`recorded`), or N times them.
    ///
    /// Each answer goes out as long after its request arrived as it took in the recording;
    /// notifications and server requests at their recorded offsets. Other calls are served
    /// meanwhile.
    #[arg(long, value_name = "recorded|N", value_parser = mcptape::play::pace::parse_pace)]
    pace: Option<f64>,
    /// Add a random delay to every answer, e.g. 20ms..200ms.
    ///
    /// Drawn from the seed for each answer; one duration (50ms) is a fixed delay. At most a
    /// day.
    #[arg(long, value_name = "MIN..MAX")]
    latency: Option<mcptape::play::pace::Latency>,
    /// Inject failures, e.g. error=-32603@tool:echo (docs/play-time-and-faults.md).
    ///
    /// error=CODE, drop, stall, stall=DURATION or skip, each @tool:NAME, @prompt:NAME,
    /// @resource:URI, @method:METHOD, @P% or @after:N (all must hold). Repeatable, or a comma
    /// list. Faults injected are listed in the summary and are not misses.
    #[arg(long, value_name = "SPEC", value_parser = parse_fault_list)]
    faults: Vec<FaultList>,
    /// Seed the random choices (--latency, P% faults); else one is printed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The live server's command, after the tape (for --on-miss live, --live, --from-tape)
    #[arg(trailing_var_arg = true, value_name = "SERVER COMMAND")]
    command: Vec<String>,
}

/// One `--faults` value.
#[derive(Clone)]
struct FaultList(Vec<mcptape::play::faults::Fault>);

fn parse_fault_list(s: &str) -> Result<FaultList, String> {
    mcptape::play::faults::parse_faults(s)
        .map(FaultList)
        .map_err(|e| e.to_string())
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnMiss {
    Error,
    Lenient,
    Live,
}

pub fn run(a: Args) -> Result<i32> {
    run_as(a, Caller::Play)
}

/// The command play runs for: its hints for a tape that `--on-miss live` cannot append to name
/// what that command can do instead.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `mcptape play`: another tape (`--append-to`).
    Play,
    /// `mcptape vcr --mode new`, which has no `--append-to`: play without appending
    /// (`--mode once`).
    Vcr,
}

impl Caller {
    /// What to do instead of appending to a tape that cannot be appended to, as the end of a
    /// sentence.
    fn elsewhere(self) -> &'static str {
        match self {
            Caller::Play => "name another tape with --append-to",
            Caller::Vcr => "play it without appending (--mode once)",
        }
    }

    /// The option that makes play append.
    fn appending(self) -> &'static str {
        match self {
            Caller::Play => "--on-miss live",
            Caller::Vcr => "--mode new",
        }
    }
}

/// [`run`], for `caller`.
pub fn run_as(a: Args, caller: Caller) -> Result<i32> {
    a.matching.check_report_path()?;
    // `--on-miss live` appends to the tape played: an s3:// tape is then played from a spool,
    // uploaded when play ends if something was appended.
    let path = if a.on_miss == OnMiss::Live && a.append_to.is_none() {
        super::remote::resolve_to_modify(&a.tape)?
    } else {
        super::remote::resolve(&a.tape)?
    };
    // The hash chain is checked on a background thread while play serves: a broken chain is
    // still reported on stderr (and waited for before exit), but start-up does not wait for it,
    // unless --require-chain, which refuses the tape instead.
    let warn_path = path.clone();
    let broken_at = Arc::new(AtomicU64::new(0));
    let broken = broken_at.clone();
    let require = a.require_chain;
    let read = mcptape::tape::ReadOptions {
        recheck_chain: a.require_chain,
        ..a.read.options()
    };
    let (index, chain) =
        TapeIndex::load_deferred_with(&path, a.server.as_deref(), read, move |w| {
            if let Warning::ChainBroken { line } = w {
                broken.store(line, Ordering::SeqCst);
            }
            if !require {
                super::warn_tape(&warn_path, &[w]);
            }
        })?;
    super::known_server(a.server.as_deref(), &index.servers, &index.labels, false)?;
    super::mcp_server(
        &index,
        "play serves an MCP server's conversation",
        "; its model calls are played back by `mcptape model-proxy --playback` or `mcptape run --playback`",
    )?;
    super::warn_tape(&path, &index.warnings);
    let skipped = index.skipped_lines();
    let refuse = |why: String| mcptape::play::PlayError::Unchecked {
        path: path.clone(),
        why,
    };
    if !index.header.chained() {
        let why =
            "the tape has no hash chain (format 1.0, or stripped): it cannot be checked for edits";
        if a.require_chain {
            anyhow::bail!(refuse(why.into()));
        }
        crate::diag!(
            "mcptape: warning: {}: {why} (`play --require-chain` refuses such a tape)",
            path.display()
        );
    }
    let mut chain = Some(chain);
    if a.require_chain {
        if let Some(pending) = chain.take() {
            pending.wait();
        }
        let line = broken_at.load(Ordering::SeqCst);
        if line > 0 {
            anyhow::bail!(refuse(Warning::ChainBroken { line }.to_string()));
        }
    }
    // Explanations quote what the client asked: with the project's redaction rules applied.
    let mut rules = mcptape::config::load()
        .map_err(|e| super::UsageError(e.to_string()))?
        .redaction(false, &[]);
    // The user's marker key, when the tape's markers were made with it: then a live request
    // is matched to the recorded one made with its very values (and what `--on-miss live`
    // appends is marked alike).
    let user_key = super::marker_key()?;
    let user_key_id = user_key.as_ref().map(mcptape::redact::MarkerKey::id);
    rules.marker_key = mcptape::redact::MarkerKey::for_tape(
        user_key,
        index.header.marker_key.as_deref(),
        "mcptape play",
        "",
    );
    let display = std::sync::Arc::new(mcptape::redact::Redactor::new(&rules)?);
    let live = live_config(&a, &path, &index, &display, caller)?;
    let mut opts = ServeOptions::with_display(Some(display));
    opts.marker_key_id = user_key_id;
    opts.lenient = a.lenient;
    opts.on_miss = match (a.lenient, a.on_miss) {
        (true, _) | (_, OnMiss::Lenient) => mcptape::play::OnMiss::Lenient,
        (_, OnMiss::Live) => mcptape::play::OnMiss::Live,
        (_, OnMiss::Error) => mcptape::play::OnMiss::Error,
    };
    opts.live = live.clone();
    opts.max_message = a.max_message;
    opts.answer_timeout = a.answer_timeout;
    opts.limits = a.limits.limits();
    opts.max_sessions = a.max_sessions;
    opts.session_idle = a.session_idle;
    opts.policy = std::sync::Arc::new(a.matching.policy()?);
    let played = (path.clone(), index.server.clone());
    let plan = mcptape::play::Plan {
        pace: a.pace,
        latency: a.latency,
        faults: a.faults.into_iter().flat_map(|f| f.0).collect(),
        seed: a.seed.unwrap_or_else(mcptape::play::plan::fresh_seed),
    };
    // Said before serving, so that a run cut short still tells its seed.
    let settings = plan.settings();
    if let Some(s) = &settings {
        crate::diag!("mcptape play: {s}");
    }
    opts.plan = Arc::new(plan);
    mcptape::play::count_panics();
    let report = match a.listen {
        Some(addr) => {
            if !addr.ip().is_loopback() {
                crate::diag!(
                    "mcptape: WARNING: listening on {addr}, reachable from other machines"
                );
            }
            let on_ready = |url: &str| {
                let _ = super::stdout(&format!("{url}\n"));
                crate::diag!(
                    "mcptape play: serving {} at {url}; Ctrl-C to stop",
                    path.display()
                );
            };
            let legacy = a.transport == Transport::Sse;
            super::runtime::multi()?.block_on(async {
                let stop = super::runtime::stop_signal()?;
                mcptape::play::http::serve_http(index, opts, addr, legacy, stop, on_ready)
                    .await
                    .map_err(anyhow::Error::from)
            })?
        }
        None => {
            super::hint_if_terminal("play");
            let (stdin, stdout) = super::runtime::stdio();
            super::runtime::single()?.block_on(serve(index, opts, stdin, stdout))
        }
    };

    drop(chain); // waits for the chain check and its report
                 // The live tape is closed first, whatever happened: its old closing line was cut at the
                 // first append, and a tape left without one reads as cut off.
    let appended = live
        .as_ref()
        .and_then(|l| l.tape.as_ref().map(|t| (t.path().to_path_buf(), t.close())));
    // A task panicked (printed above): an answer may be lost, the counts are not true.
    let panics = mcptape::play::panics();
    if panics > 0 {
        let s = if panics == 1 { "" } else { "s" };
        anyhow::bail!(
            "internal error: {panics} panic{s} while playing {} (see above): play stopped, answers may be lost (a bug: please report it)",
            path.display()
        );
    }
    let mut summary = format!(
        "mcptape play: served {}, missed {}, drifted {}",
        report.served, report.missed, report.drifted
    );
    if report.lenient > 0 {
        summary.push_str(&format!(", served leniently {}", report.lenient));
    }
    summary.push_str(&a.matching.summary(&report));
    if report.live > 0 {
        summary.push_str(&format!(", answered live {}", report.live));
    }
    if report.unanswered > 0 {
        summary.push_str(&format!(", unanswered on the tape {}", report.unanswered));
    }
    if report.too_large > 0 {
        summary.push_str(&format!(
            ", answers too large to have been recorded {}",
            report.too_large
        ));
    }
    if report.probes > 0 {
        let s = if report.probes == 1 { "" } else { "s" };
        summary.push_str(&format!(
            ", answered {} server/discover probe{s} as the recorded pre-2026 server would (method not found)",
            report.probes
        ));
    }
    if report.discovered > 0 {
        let s = if report.discovered == 1 { "" } else { "s" };
        summary.push_str(&format!(
            ", answered {} server/discover probe{s} from the tape's 2026-07-28 exchanges (none was recorded)",
            report.discovered
        ));
    }
    if !report.ambiguous.is_empty() {
        let n: u64 = report.ambiguous.iter().map(|a| a.times).sum();
        let s = if n == 1 { "" } else { "s" };
        let each: Vec<String> = report
            .ambiguous
            .iter()
            .map(|a| format!("{}: {}", a.what, a.times))
            .collect();
        summary.push_str(&format!(
            ", {n} request{s} served among recorded requests that differ only in redacted values ({})",
            each.join(", ")
        ));
    }
    if report.markers > 0 {
        let s = if report.markers == 1 { "" } else { "s" };
        summary.push_str(&format!(
            ", {} redaction marker{s} served in place of values",
            report.markers
        ));
    }
    if !skipped.is_empty() {
        summary.push_str(&format!(
            ", {}",
            mcptape::tape::reader::skipped_summary(&skipped)
        ));
    }
    if report.dropped > 0 {
        summary.push_str(&format!(
            ", {} for a GET stream no client opened not delivered",
            super::plural(report.dropped, "message")
        ));
    }
    if report.rejected > 0 {
        summary.push_str(&format!(
            ", rejected {}",
            super::plural(report.rejected, "unusable client line")
        ));
    }
    if report.unknown_session > 0 {
        summary.push_str(&format!(
            ", refused {} naming a session play does not have",
            super::plural(report.unknown_session, "request")
        ));
    }
    if report.no_session > 0 {
        summary.push_str(&format!(
            ", refused {} naming no session",
            super::plural(report.no_session, "request")
        ));
    }
    if !report.injected.is_empty() {
        let n = report.injected.len();
        let s = if n == 1 { "" } else { "s" };
        summary.push_str(&format!(", injected {n} fault{s} on purpose"));
    }
    if report.cut {
        summary.push_str(", the connection cut on purpose (--faults drop)");
    }
    if report.unused.is_empty() {
        summary.push_str("; every recorded exchange was used");
        crate::diag!("{summary}");
    } else {
        let n = report.unused.len();
        let s = if n == 1 { "" } else { "s" };
        crate::diag!("{summary}; {n} recorded exchange{s} never used:");
        for u in report.unused.iter().take(UNUSED_DESCRIBED) {
            crate::diag!("  tape line {:>5}  {}", u.line, u.what);
        }
        if report.unused.len() > UNUSED_DESCRIBED {
            crate::diag!("  … and {} more", report.unused.len() - UNUSED_DESCRIBED);
        }
    }
    a.matching.write_report(&played.0, &played.1, &report)?;
    if let Some(s) = &settings {
        let list = if report.injected.is_empty() {
            ""
        } else {
            "; injected on purpose:"
        };
        crate::diag!("mcptape play: {s}{list}");
    }
    for f in &report.injected {
        let id =
            f.id.as_deref()
                .map(|id| format!(" (request id {id})"))
                .unwrap_or_default();
        crate::diag!("  tape line {:>5}  {}: {}{id}", f.line, f.what, f.fault);
    }
    // Faults are on purpose: not misses. A cut over stdio ended play early, which its status
    // says (75, "try again"), unless something missed or drifted before it.
    let mut tape_failed = false;
    match appended {
        Some((at, Some(Ok(n)))) => {
            let s = if n == 1 { "" } else { "s" };
            crate::diag!(
                "mcptape play: appended {n} exchange{s} from the live server to {} (marked \"appended\")",
                at.display()
            );
        }
        Some((at, Some(Err(e)))) => {
            crate::diag!("mcptape play: could not close {}: {e}", at.display());
            tape_failed = true;
        }
        _ => {}
    }
    if tape_failed && report.missed == 0 {
        return Ok(mcptape::exit::IO_ERR);
    }
    Ok(
        if report.missed > 0 || report.drifted > 0 || report.unanswered > 0 {
            mcptape::exit::DRIFT
        } else if report.cut && a.listen.is_none() {
            mcptape::exit::TEMPFAIL
        } else {
            mcptape::exit::OK
        },
    )
}

/// The live server, when one is asked for: `--on-miss live`, `--live` or `--from-tape` with a
/// server command or `--url`. Misses are appended to the tape played, or to `--append-to`.
fn live_config(
    a: &Args,
    path: &std::path::Path,
    index: &TapeIndex,
    display: &Arc<mcptape::redact::Redactor>,
    caller: Caller,
) -> Result<Option<Arc<mcptape::play::LiveConfig>>> {
    use mcptape::play::select::Selection;
    use mcptape::play::{LiveConfig, LiveTape, LiveTarget};
    let select = match (&a.live[..], &a.from_tape[..]) {
        ([], []) => Selection::None,
        (live, []) => Selection::Live(live.to_vec()),
        (_, from_tape) => Selection::AllBut(from_tape.to_vec()),
    };
    let misses = a.on_miss == OnMiss::Live;
    let target = match (&a.url, &a.command[..]) {
        (Some(url), _) => Some(LiveTarget::Url(url.clone())),
        (None, []) => None,
        (None, command) => Some(LiveTarget::Command(command.to_vec())),
    };
    let target = match target {
        Some(t) if misses || !select.is_none() => t,
        Some(_) => {
            return Err(super::UsageError(
                "a live server (a command after --, or --url) is for --on-miss live, --live or --from-tape"
                    .into(),
            )
            .into())
        }
        None if misses || !select.is_none() => {
            let what = if misses { "--on-miss live" } else if a.live.is_empty() { "--from-tape" } else { "--live" };
            return Err(super::UsageError(format!(
                "{what} needs a live server: its command after -- (mcptape play TAPE {what} … -- npx -y some-server), or --url URL"
            ))
            .into());
        }
        None => {
            if a.append_to.is_some() {
                return Err(super::UsageError("--append-to is for --on-miss live".into()).into());
            }
            return Ok(None);
        }
    };
    let tape = if misses {
        let at = match &a.append_to {
            Some(name) => super::remote::resolve_for_write(name)?,
            None => {
                // Checked now, not at the first miss: appending to this tape must be possible.
                if !index.header.chained() {
                    let again = match caller {
                        Caller::Play => "",
                        Caller::Vcr => {
                            ", or record it again with --mode all (the old tape kept as .bak)"
                        }
                    };
                    return Err(super::UsageError(format!(
                        "{}: {} cannot append to a tape without a hash chain (format 1.0); {}{again}",
                        path.display(),
                        caller.appending(),
                        caller.elsewhere()
                    ))
                    .into());
                }
                path.to_path_buf()
            }
        };
        let key = std::env::var_os("MCPTAPE_SIGNING_KEY")
            .filter(|k| !k.is_empty())
            .map(|k| k.into_encoded_bytes());
        if at == path && key.is_none() && index.end.as_ref().is_some_and(|e| e.sig.is_some()) {
            return Err(super::UsageError(format!(
                "{}: the tape is signed: set MCPTAPE_SIGNING_KEY to sign it again after appending, or {}",
                path.display(),
                caller.elsewhere()
            ))
            .into());
        }
        let write = mcptape::tape::WriteOptions {
            redactor: Some(display.clone()),
            signing_key: key,
        };
        Some(LiveTape::new(at, write, &index.server).elsewhere(caller.elsewhere()))
    } else {
        None
    };
    Ok(Some(Arc::new(LiveConfig::new(target, select, tape))))
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Transport {
    StreamableHttp,
    Sse,
}
