//! Command-line surface: one file per subcommand, each turning its arguments into a config.

mod check;
mod demo;
mod diff;
mod export;
mod import;
mod inspect;
mod integrity;
mod matching;
mod model_proxy;
mod play;
mod prune;
mod record;
mod remote;
mod report;
mod run;
mod runtime;
mod vcr;

use clap::{Parser, Subcommand};
use mcptape::exit;

const EXIT_CODES: &str = "\
Exit codes:
  0   success: recorded, everything served, same, gate passed
  1   play: misses or drift; diff: output drift; check: gate failed;
      verify: tampered or cut off; lint: secrets or problems found
  2   diff: structural drift
  64  usage error
  65  malformed tape, or a tape from a newer format version;
      play --require-chain: the tape's hash chain is missing or breaks;
      report --check: not a check report, or another tape's
  66  tape (or report --check's file) not found; s3://: no such key or bucket
  69  the server could not be started (check --url: reached), or a listener could not listen;
      s3://: the store could not be reached, or refused the credentials
  70  internal error (a bug)
  74  I/O error (writing the tape…; s3://: the upload failed, the spool kept for push)
  75  play over stdio: a --faults drop cut the connection on purpose
  record exits with the server's own exit code (128+N when a signal N ended it).
  `mcptape help COMMAND` gives each command's own.";

/// Each command's own exit codes (`--help` of the command); the whole table is `mcptape --help`.
const EXIT_RECORD: &str = "\
Exit codes: the server's own (128+N when a signal N ended it); 64 usage error; 69 the server
could not be started, or --listen could not listen; 70 internal error (how the server ended could
not be learned: said on stderr, the tape closed all the same); 74 the tape could not be written
(or replaced) and the server exited 0.";
const EXIT_PLAY: &str = "\
Exit codes: 0 everything asked was served; 1 a miss, a drifted answer to a replayed server
request, or a request the recorded server never answered (a live server that could not answer
is a miss; faults injected with --faults are not); 64 usage error (an unknown --server, a bad
--faults, a live policy without a live server); 65 malformed tape (--require-chain: no hash
chain, or a broken one); 66 tape not found; 69 --listen could not listen; 74 the appended tape
could not be closed, or --unused-report's folder is missing or not writable (before serving);
75 over stdio, a --faults drop cut the connection.";
const EXIT_CHECK: &str = "\
Exit codes: 0 the gate passed (or --update accepted the changes); 1 the gate failed; 64 usage
error; 65 malformed baseline; 66 baseline not found; 69 the server could not be started or
reached; 74 the baseline could not be updated.";
const EXIT_DIFF: &str = "\
Exit codes: 0 same; 1 output drift; 2 structural drift; 64 usage error; 65 malformed tape; 66
tape not found.";
const EXIT_LS: &str = "\
Exit codes: 0 listed; 64 DIR is not a folder, or a malformed s3:// URL; 66 no such bucket; 69 the
store could not be reached, or refused the credentials.";
const EXIT_PUSH: &str = "\
Exit codes: 0 uploaded (or nothing to upload); 64 usage error (a malformed URL, a tape that is
not a spool and no URL, a tape still being written); 66 tape or bucket not found; 69 the store
could not be reached, or refused the credentials; 74 an upload failed (the spool is kept).";
const EXIT_VERIFY: &str = "\
Exit codes: 0 intact; 1 tampered, cut off, or a bad signature (a malformed line too); 64 usage
error; 65 not a tape, or a tape of a newer format version; 66 tape not found.";
const EXIT_REDACT: &str = "\
Exit codes: 0 redacted; 64 usage error (a bad rule); 65 malformed tape; 66 tape not found; 74 the
tape or its backup could not be written (a symbolic link at TAPE.bak or TAPE.redact-tmp is
refused, not followed).";
const EXIT_LINT: &str = "\
Exit codes: 0 clean; 1 suspected secrets or format problems (a malformed line too); 64 usage
error; 65 not a tape, or a tape of a newer format version; 66 tape not found.";
const EXIT_SHOW: &str = "\
Exit codes: 0 shown; 64 usage error (an unknown --server); 65 malformed tape; 66 tape not found.";
const EXIT_REPORT: &str = "\
Exit codes: 0 written; 64 usage error; 65 malformed tape, or a --check file that is
not a check report (or is another tape's); 66 tape (or --check file) not found; 74 the report
could not be written.";
const EXIT_MODEL_PROXY: &str = "\
Exit codes: 0 stopped (Ctrl-C) with every request answered; 1 --playback: a request matched no
recorded call; 64 usage error; 65 malformed tape; 66 tape (or --upstream-ca file) not found; 69
could not listen; 74 the tape could not be written.";
const EXIT_PRUNE: &str = "\
Exit codes: 0 pruned; 64 usage error; 65 malformed tape or report, a report written for another
tape (or the tape changed since), or a broken hash chain; 66 tape or report not found; 74 the
tape could not be written.";
const EXIT_RUN: &str = "\
Exit codes: the agent's own; 1 --playback: a model request matched no recorded call (when the
agent exited 0); 64 usage error; 65 an agent config that does not read, or a malformed tape; 66
tape not found; 69 the agent could not be started; 74 the tape could not be written.";
const EXIT_EXPORT: &str = "\
Exit codes: 0 exported; 64 usage error (a bad endpoint or header); 65 malformed tape; 66 tape not
found; 69 the endpoint could not be reached or refused the export; 74 the file could not be written.";
const EXIT_IMPORT: &str = "\
Exit codes: 0 imported; 64 usage error (an unknown format, a file that could be several formats);
65 a file that is not of its format (or of none); 66 file not found; 74 the tape could not be
written.";
const EXIT_DEMO: &str = "\
Exit codes: 0 every step went as expected; 1 a step did not.";

#[derive(Parser)]
#[command(
    name = "mcptape",
    version,
    about = "A tape recorder for the Model Context Protocol: record an MCP session, play it back as the server.",
    after_help = EXIT_CODES,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(about = "Record an MCP session: run the server, relay stdio, tape every message.")]
    Record(record::Args),
    #[command(about = "Serve a tape as the MCP server: no server process, no side effects.")]
    Play(play::Args),
    #[command(about = "Record or play, as the tape and --mode say (once, new, all, none).")]
    Vcr(vcr::Args),
    #[command(about = "Check a new build of a server against a recording, graded A–F.")]
    Check(check::Args),
    #[command(about = "Compare two recordings, down to the first call that drifted.")]
    Diff(diff::Args),
    #[command(about = "List the tapes (of the store, or of a folder).")]
    Ls(inspect::LsArgs),
    #[command(
        about = "Upload tapes to s3:// (a spool left by a killed or failed upload, or any tape)."
    )]
    Push(remote::PushArgs),
    #[command(
        about = "Drop the recorded exchanges a play run never used (a play --unused-report)."
    )]
    Prune(prune::Args),
    #[command(about = "Check a tape's hash chain (and signature): intact, tampered or cut off.")]
    Verify(integrity::VerifyArgs),
    #[command(about = "Take secrets out of an existing tape.")]
    Redact(integrity::RedactCmdArgs),
    #[command(about = "Look for secrets and format problems left in a tape.")]
    Lint(integrity::LintArgs),
    #[command(about = "Show a tape's messages and model calls, or its per-tool statistics.")]
    Show(inspect::ShowArgs),
    #[command(
        about = "Write a self-contained HTML report of a tape: timeline, calls, statistics."
    )]
    Report(report::Args),
    #[command(
        about = "Export a tape as OpenTelemetry traces (OTLP/JSON or protobuf, file or endpoint)."
    )]
    Export(export::Args),
    #[command(
        about = "Import another recorder's file (agent-vcr, mcp-cassette, mcp-vcr, …) as a tape."
    )]
    Import(import::Args),
    #[command(about = "Record an agent's model API calls onto a tape, or answer them from one.")]
    ModelProxy(model_proxy::Args),
    #[command(
        about = "Run an agent with its model calls and MCP servers on one tape; replay it, or offline."
    )]
    Run(run::Args),
    #[command(
        about = "The whole loop on a bundled demo server: record, play, a miss, check, diff."
    )]
    Demo(demo::Args),
    /// The bundled demo MCP server (stdio), used by `mcptape demo`.
    #[command(hide = true)]
    DemoServer(demo::ServerArgs),
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    exit::OK
                }
                _ => exit::USAGE,
            };
        }
    };
    // The commands with --skip-bad-lines say so when a malformed line stops them.
    let skips = matches!(
        cli.command,
        Command::Play(_)
            | Command::Check(_)
            | Command::Diff(_)
            | Command::Show(_)
            | Command::Verify(_)
            | Command::Lint(_)
            | Command::Redact(_)
    );
    let result = match cli.command {
        Command::Record(a) => record::run(a),
        Command::Play(a) => play::run(a),
        Command::Vcr(a) => vcr::run(a),
        Command::Check(a) => check::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Ls(a) => inspect::ls(a),
        Command::Push(a) => remote::push(a),
        Command::Prune(a) => prune::run(a),
        Command::Verify(a) => integrity::verify(a),
        Command::Redact(a) => integrity::redact(a),
        Command::Lint(a) => integrity::lint(a),
        Command::Show(a) => inspect::show(a),
        Command::Report(a) => report::run(a),
        Command::Export(a) => export::run(a),
        Command::Import(a) => import::run(a),
        Command::ModelProxy(a) => model_proxy::run(a),
        Command::Run(a) => run::run_cmd(a),
        Command::Demo(a) => demo::run(a),
        Command::DemoServer(a) => demo::server(a),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            let hint = if skips && malformed_line(&e) {
                " (--skip-bad-lines reads past such lines, each reported)"
            } else {
                ""
            };
            crate::diag!("mcptape: error: {e:#}{hint}");
            code_for(&e)
        }
    };
    // The tapes written to s3:// are uploaded now, whatever the command's outcome.
    remote::settle(code)
}

/// `n` and what is counted, in the plural unless `n` is 1: "1 model call", "2 model calls".
pub(crate) fn plural(n: u64, what: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {what}{s}")
}

/// A malformed tape line stopped the command (also inside check's, redact's and diff's errors,
/// which wrap the tape's transparently).
fn malformed_line(e: &anyhow::Error) -> bool {
    use mcptape::tape::TapeError;
    e.chain().any(|c| {
        let tape = c.downcast_ref::<TapeError>().or_else(|| {
            match c.downcast_ref::<mcptape::check::CheckError>() {
                Some(mcptape::check::CheckError::Tape(t)) => Some(t),
                _ => match c.downcast_ref::<mcptape::integrity::RedactError>() {
                    Some(mcptape::integrity::RedactError::Tape(t)) => Some(t),
                    _ => match c.downcast_ref::<mcptape::diff::DiffError>() {
                        Some(mcptape::diff::DiffError::Tape(t)) => Some(t),
                        _ => None,
                    },
                },
            }
        });
        matches!(tape, Some(TapeError::Malformed { .. }))
    })
}

/// Exit code for an error that stopped a command: the library's errors know their own; a usage
/// problem found by the binary is 64.
fn code_for(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.downcast_ref::<UsageError>().is_some()) {
        return exit::USAGE;
    }
    let root: &(dyn std::error::Error + 'static) = e.as_ref();
    mcptape::errors::exit_code(root)
}

/// Prints tape warnings (torn last line, not closed) once, on stderr.
fn warn_tape(path: &std::path::Path, warnings: &[mcptape::tape::Warning]) {
    for w in warnings {
        crate::diag!("mcptape: warning: {}: {w}", path.display());
    }
}

/// Refuses (exit 64) a `--server LABEL` the tape does not have: neither declared nor on any of
/// its lines read (`labels`); the labels listed are the MCP servers', and the model APIs' too
/// where the command takes one (`model_api`).
fn known_server(
    asked: Option<&str>,
    declared: &[mcptape::tape::ServerDecl],
    labels: &[String],
    model_api: bool,
) -> anyhow::Result<()> {
    match mcptape::tape::format::unknown_server(asked, declared, labels, model_api) {
        None => Ok(()),
        Some(why) => Err(UsageError(why).into()),
    }
}

/// Refuses (exit 64) an index of a model API (`--server model` on an agent run's tape): its
/// calls are no MCP conversation, and served or pruned it would be an empty one. `does`: what
/// the command does with an MCP server; `then`: what to use instead, if anything.
fn mcp_server(index: &mcptape::tape::TapeIndex, does: &str, then: &str) -> anyhow::Result<()> {
    let mcp = mcptape::tape::format::mcp_labels(&index.servers, &index.labels);
    match mcptape::tape::format::model_api_refusal(&index.server, &index.servers, &mcp, does) {
        None => Ok(()),
        Some(why) => Err(UsageError(format!("{why}{then}")).into()),
    }
}

/// Parses a number of seconds (fractions allowed) for duration options.
fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && (0.0..=86_400.0 * 365.0).contains(&v)) {
        return Err(format!("{s} is not a usable number of seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

/// Writes requested output to stdout. A reader that went away (`mcptape show t | head`) is not an
/// error: like ripgrep, a broken pipe ends the output quietly with success.
fn stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// A usage problem found after parsing (exit 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Like [`parse_secs`], more than zero.
fn parse_positive_secs(s: &str) -> Result<std::time::Duration, String> {
    match parse_secs(s)? {
        d if d.is_zero() => Err("must be more than 0 seconds".into()),
        d => Ok(d),
    }
}

/// A count or size that must be at least 1 (`--max-message 0` would refuse every message,
/// `--max-connections 0` every connection).
fn parse_nonzero(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// How the commands that read a tape treat a malformed line.
#[derive(clap::Args, Clone, Copy)]
pub struct ReadArgs {
    /// Skip malformed tape lines, each reported on stderr (default: refuse).
    #[arg(long)]
    skip_bad_lines: bool,
}

impl ReadArgs {
    /// As the library takes them.
    fn options(self) -> mcptape::tape::ReadOptions {
        mcptape::tape::ReadOptions {
            skip_bad_lines: self.skip_bad_lines,
            ..Default::default()
        }
    }
}

/// What an HTTP listener allows its connections, for the commands that listen.
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Over HTTP: client connections served at once; past it a new connection gets 503.
    #[arg(long, value_name = "N", default_value_t = mcptape::transport::http::MAX_CONNECTIONS, value_parser = parse_nonzero)]
    max_connections: usize,
    /// Over HTTP: seconds a connection may take to send a request's headers; also how long an
    /// idle keep-alive connection stays open (slow or silent connections are closed).
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_positive_secs)]
    header_timeout: std::time::Duration,
}

impl LimitArgs {
    /// As the library takes them.
    fn limits(&self) -> mcptape::transport::http::Limits {
        mcptape::transport::http::Limits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
        }
    }
}

/// Redaction options shared by the commands that write tapes.
#[derive(clap::Args)]
pub struct RedactArgs {
    /// Also redact: a KEY name, `re:REGEX`, or `path:JSONPATH` (repeatable). Adds to the built-in
    /// rules and to `[redact]` in .mcptape/config.toml.
    #[arg(long = "redact", value_name = "RULE")]
    rules: Vec<String>,
    /// Turn the built-in rules off (your own rules still apply).
    #[arg(long)]
    no_default_redaction: bool,
}

impl RedactArgs {
    /// The validated redaction rules.
    pub fn config(&self) -> anyhow::Result<mcptape::redact::RedactConfig> {
        let cfg = self.rules()?;
        self.build(&cfg)?;
        Ok(cfg)
    }

    /// The redactor, built once for the whole command.
    pub fn redactor(&self) -> anyhow::Result<mcptape::redact::Redactor> {
        self.build(&self.rules()?)
    }

    /// These options as they were given, to put in a suggested command line.
    pub fn as_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for r in &self.rules {
            args.push("--redact".to_string());
            args.push(r.clone());
        }
        if self.no_default_redaction {
            args.push("--no-default-redaction".to_string());
        }
        args
    }

    fn rules(&self) -> anyhow::Result<mcptape::redact::RedactConfig> {
        let project = mcptape::config::load().map_err(|e| UsageError(e.to_string()))?;
        let mut cfg = project.redaction(self.no_default_redaction, &self.rules);
        cfg.marker_key = marker_key()?;
        Ok(cfg)
    }

    fn build(
        &self,
        cfg: &mcptape::redact::RedactConfig,
    ) -> anyhow::Result<mcptape::redact::Redactor> {
        mcptape::redact::Redactor::new(cfg).map_err(|e| {
            UsageError(format!(
                "{e} (rules come from --redact and {})",
                mcptape::config::path().display()
            ))
            .into()
        })
    }
}

/// The user's marker key, from `$MCPTAPE_REDACT_KEY` (unset or empty: none, each tape's key is
/// random). Too short a secret is a usage error: with the key, a guessed secret can be checked
/// against a marker's hash.
pub(crate) fn marker_key() -> anyhow::Result<Option<mcptape::redact::MarkerKey>> {
    let Some(secret) = std::env::var_os("MCPTAPE_REDACT_KEY").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let secret = secret.into_encoded_bytes();
    match mcptape::redact::MarkerKey::from_secret(&secret) {
        Some(k) => Ok(Some(k)),
        None => Err(UsageError(format!(
            "MCPTAPE_REDACT_KEY is {} bytes; a marker key needs at least {} (random bytes, such as `openssl rand -hex 32`)",
            secret.len(),
            mcptape::redact::MARKER_KEY_MIN
        ))
        .into()),
    }
}

/// Signing options: the HMAC key comes from --key-file or $MCPTAPE_SIGNING_KEY.
#[derive(clap::Args)]
pub struct SignArgs {
    /// Sign the tape: an HMAC-SHA256 of its hash chain's head on the closing line. The key is
    /// read from --key-file, else from $MCPTAPE_SIGNING_KEY.
    #[arg(long)]
    sign: bool,
    /// A file holding the signing key (its bytes, trailing newline ignored).
    #[arg(long, value_name = "FILE")]
    key_file: Option<std::path::PathBuf>,
}

impl SignArgs {
    /// The key, when signing (or a key file) was asked for.
    pub fn key(&self, required: bool) -> anyhow::Result<Option<Vec<u8>>> {
        if let Some(f) = &self.key_file {
            let mut k = std::fs::read(f)
                .map_err(|e| UsageError(format!("reading key file {}: {e}", f.display())))?;
            while k.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                k.pop();
            }
            if k.is_empty() {
                return Err(UsageError(format!("key file {} is empty", f.display())).into());
            }
            return Ok(Some(k));
        }
        match std::env::var_os("MCPTAPE_SIGNING_KEY") {
            Some(k) if !k.is_empty() => Ok(Some(k.into_encoded_bytes())),
            _ if self.sign || required => Err(UsageError(
                "signing needs a key: set MCPTAPE_SIGNING_KEY or pass --key-file FILE".into(),
            )
            .into()),
            _ => Ok(None),
        }
    }

    pub fn from_key_file(key_file: Option<std::path::PathBuf>) -> SignArgs {
        SignArgs {
            sign: false,
            key_file,
        }
    }

    /// The key to sign a tape being written with: `None` unless `--sign` was given.
    pub fn signing_key(&self) -> anyhow::Result<Option<Vec<u8>>> {
        if self.sign {
            self.key(true)
        } else {
            Ok(None)
        }
    }
}

/// The line `play` or `record` prints when started by hand in a terminal: it is an MCP server
/// on stdio, waiting for a client, which normally starts it.
pub(crate) fn terminal_hint(command: &str) -> String {
    format!(
        "mcptape {command}: waiting for an MCP client on stdin (JSON-RPC, one message a line); \
         `mcptape {command}` is normally started by an MCP client, from the server command in its \
         config (see the README's Quickstart); Ctrl-D or Ctrl-C to stop"
    )
}

/// Prints [`terminal_hint`] when stdin is a terminal (someone typed the command by hand).
pub(crate) fn hint_if_terminal(command: &str) {
    use std::io::IsTerminal as _;
    if std::io::stdin().is_terminal() {
        crate::diag!("{}", terminal_hint(command));
    }
}

#[cfg(test)]
mod hint_tests {
    #[test]
    fn the_terminal_hint_says_what_play_waits_for_and_who_starts_it() {
        let hint = super::terminal_hint("play");
        assert!(hint.starts_with("mcptape play: waiting for an MCP client on stdin"));
        assert!(hint
            .contains("normally started by an MCP client, from the server command in its config"));
        assert!(!hint.contains('\n'));
    }
}
