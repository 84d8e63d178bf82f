use anyhow::Result;
use mcptape::record::{record_stdio, RecordConfig};
use mcptape::tape::{store, WriteOptions};
use mcptape::wire::DEFAULT_MAX_MESSAGE;
use std::time::Duration;

/// Record an MCP session: run the server, forward stdio both ways unchanged, tape every message.
///
/// Put it in front of the server in your client's config:
///
///   "command": "mcptape",
///   "args": ["record", "--tape", "my-server", "--", "npx", "-y", "some-mcp-server"]
///
/// Every message is on the tape before it is forwarded. Signals (INT, TERM, HUP, QUIT) go to the
/// server; when the client closes stdin, the server gets EOF and --grace seconds to exit.
/// mcptape exits with the server's exit code; one summary line goes to stderr.
#[derive(clap::Args)]
#[command(visible_alias = "rec", after_help = super::EXIT_RECORD, verbatim_doc_comment)]
pub struct Args {
    /// Tape name (stored as .mcptape/tapes/NAME.jsonl, or under $MCPTAPE_DIR) or a path (with a
    /// '/' or ending in .jsonl). Default: the server's name and the time. Over a tape that is
    /// there, the recording goes to TAPE.new and replaces it only if it holds an exchange (the
    /// old one kept as TAPE.bak). Or s3://BUCKET/KEY: written to a local spool, uploaded when
    /// it closes (`mcptape push` uploads what a killed recording left).
    #[arg(long, short = 't', value_name = "NAME|PATH")]
    tape: Option<String>,
    /// Largest message kept whole, in bytes; longer lines are forwarded but recorded as
    /// `oversize` (length and first bytes).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE, value_parser = super::parse_nonzero)]
    max_message: usize,
    /// After the client closes stdin (with --listen and a server command: after mcptape is
    /// stopped), seconds the server has to exit before SIGTERM (then SIGKILL 2 s later).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = super::parse_secs)]
    grace: Duration,
    #[command(flatten)]
    redact: super::RedactArgs,
    #[command(flatten)]
    sign: super::SignArgs,
    /// Record an HTTP server instead: a reverse proxy for Streamable HTTP (and HTTP+SSE) in front
    /// of this upstream URL, e.g. http://127.0.0.1:3001/mcp. The URL to give the client is
    /// printed on stdout.
    #[arg(long, value_name = "UPSTREAM", conflicts_with = "command")]
    url: Option<String>,
    /// Serve over Streamable HTTP on this address: with --url, where the proxy listens (default
    /// 127.0.0.1 with a free port); with a server command, put that stdio server behind HTTP
    /// while recording it (a bridge). Loopback unless you name another address.
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    limits: super::LimitArgs,
    /// Over HTTP: the CA certificates (PEM) to check an https:// upstream against, instead of
    /// the system's roots.
    #[arg(long, value_name = "FILE", requires = "url")]
    upstream_ca: Option<std::path::PathBuf>,
    /// The server's label on the tape (default: `default`).
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// Join the recording `mcptape run` owns at this socket instead of writing a tape (what
    /// `run` puts in an agent's MCP config).
    #[arg(long, value_name = "SOCKET", hide = true, conflicts_with_all = ["url", "listen", "tape"])]
    join: Option<std::path::PathBuf>,
    /// The server command and its arguments (`--` before it is optional; everything after the
    /// command's name is the server's, flags too).
    #[arg(
        trailing_var_arg = true,
        required_unless_present = "url",
        value_name = "SERVER COMMAND"
    )]
    command: Vec<String>,
}

pub fn run(a: Args) -> Result<i32> {
    mcptape::transport::stdio::ignore_sigxfsz();
    if let Some(url) = a.url.clone() {
        return run_http(a, url);
    }
    if let Some(addr) = a.listen {
        return run_bridge(a, addr);
    }
    let name = a.tape.unwrap_or_else(|| store::default_name(&a.command));
    let (tape, write) = match &a.join {
        // The owner of the tape redacts and signs; nothing is written here.
        Some(socket) => (socket.clone(), WriteOptions::default()),
        None => (
            super::remote::resolve_for_recording(&name)?,
            write_options(&a.redact, &a.sign)?,
        ),
    };
    let mut cfg = RecordConfig::new(tape, a.command, write);
    cfg.max_message = a.max_message;
    cfg.grace = a.grace;
    cfg.join = a.join;
    if let Some(label) = a.label {
        cfg.server_label = label;
    }
    let signals = super::runtime::forwarded_signals()?;
    super::hint_if_terminal("record");
    let (stdin, stdout) = super::runtime::stdio();
    let joined = cfg.join.is_some();
    let out = super::runtime::single()?.block_on(record_stdio(&cfg, stdin, stdout, signals))?;
    if joined {
        // The owner of the tape gives the summary.
        return Ok(out.exit_code);
    }
    Ok(report(out))
}

/// How the tape is written: one redactor for the whole session, the signing key if asked.
fn write_options(redact: &super::RedactArgs, sign: &super::SignArgs) -> Result<WriteOptions> {
    Ok(WriteOptions {
        redactor: Some(std::sync::Arc::new(redact.redactor()?)),
        signing_key: sign.signing_key()?,
    })
}

/// The summary line on stderr, and the exit code: the server's (0 over HTTP), or 74 when the
/// tape lost lines or could not replace the tape that was there, and the server exited 0 (so a
/// failing tape never passes silently).
fn report(out: mcptape::record::RecordOutcome) -> i32 {
    use super::plural;
    // The tape's `raw` counts every line that is no JSON-RPC message; each kind is named.
    let kinds = out.raw_kinds;
    let mut raw = String::new();
    for (n, one, many) in [
        (kinds.not_json, "non-JSON line", "non-JSON lines"),
        (
            kinds.invalid,
            "JSON line that is not a JSON-RPC message",
            "JSON lines that are not JSON-RPC messages",
        ),
        (
            kinds.oversize,
            "line over --max-message taped as its length and first bytes only",
            "lines over --max-message taped as their length and first bytes only",
        ),
    ] {
        if n > 0 {
            let what = if n == 1 { one } else { many };
            raw.push_str(&format!(", {n} {what}"));
        }
    }
    crate::diag!(
        "mcptape: recorded {} ({}{raw}) to {}",
        plural(out.end.messages, "message"),
        plural(out.end.exchanges, "exchange"),
        out.tape.display()
    );
    if out.dropped > 0 {
        crate::diag!(
            "mcptape: {} server messages for a GET stream no client opened were not delivered (they are on the tape)",
            out.dropped
        );
    }
    if out.write_failure.is_none() && out.placed.elsewhere().is_none() {
        // The first play of a big tape then starts warm (its index cached while the tape is
        // still in the page cache); a small tape is left alone.
        mcptape::tape::TapeIndex::warm_cache(&out.tape);
    }
    let mut failed = matches!(out.placed, mcptape::tape::Placed::NotReplaced { .. });
    if let Some((dropped, err)) = out.write_failure {
        crate::diag!("mcptape: WARNING: the tape is INCOMPLETE: {dropped} lines could not be written ({err})");
        failed = true;
    }
    if failed && out.exit_code == 0 {
        return mcptape::exit::IO_ERR;
    }
    out.exit_code
}

fn run_http(a: Args, url: String) -> Result<i32> {
    // What humans and file names see: without a password the URL may carry.
    let shown = mcptape::record::http::without_password(&url);
    let name = a
        .tape
        .clone()
        .unwrap_or_else(|| store::default_name(std::slice::from_ref(&shown)));
    let tape = super::remote::resolve_for_recording(&name)?;
    let listen = a
        .listen
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    if !listen.ip().is_loopback() {
        crate::diag!("mcptape: WARNING: listening on {listen}, reachable from other machines; the proxy forwards to {shown}");
    }
    let write = write_options(&a.redact, &a.sign)?;
    let mut cfg = mcptape::record::http::HttpRecordConfig::new(tape, url.clone(), write);
    cfg.listen = listen;
    cfg.max_message = a.max_message;
    cfg.limits = a.limits.limits();
    cfg.upstream_ca = a.upstream_ca;
    if let Some(label) = a.label {
        cfg.server_label = label;
    }
    let out = super::runtime::single()?.block_on(async {
        let stop = super::runtime::stop_signal()?;
        let on_ready = |public: &str| {
            // stdout carries only the URL (scripts read it); the human line goes to stderr.
            let _ = super::stdout(&format!("{public}\n"));
            crate::diag!(
                "mcptape: recording {shown} at {public} (tape {}); Ctrl-C to stop",
                cfg.tape.display()
            );
        };
        anyhow::Ok(mcptape::record::http::record_http(&cfg, stop, on_ready).await?)
    })?;
    Ok(report(out))
}

fn run_bridge(a: Args, listen: std::net::SocketAddr) -> Result<i32> {
    let name = a
        .tape
        .clone()
        .unwrap_or_else(|| store::default_name(&a.command));
    let tape = super::remote::resolve_for_recording(&name)?;
    if !listen.ip().is_loopback() {
        crate::diag!("mcptape: WARNING: listening on {listen}, reachable from other machines");
    }
    let write = write_options(&a.redact, &a.sign)?;
    let mut cfg = mcptape::record::bridge::BridgeConfig::new(tape, a.command.clone(), write);
    cfg.listen = listen;
    cfg.max_message = a.max_message;
    cfg.limits = a.limits.limits();
    cfg.grace = a.grace;
    if let Some(label) = a.label.clone() {
        cfg.server_label = label;
    }
    let out = super::runtime::multi()?.block_on(async {
        let stop = super::runtime::stop_signal()?;
        let on_ready = |public: &str| {
            let _ = super::stdout(&format!("{public}\n"));
            crate::diag!(
                "mcptape: serving `{}` at {public} while recording (tape {}); Ctrl-C to stop",
                mcptape::transport::stdio::shell_words(&cfg.command),
                cfg.tape.display()
            );
        };
        anyhow::Ok(mcptape::record::bridge::record_bridge(&cfg, stop, on_ready).await?)
    })?;
    Ok(report(out))
}
