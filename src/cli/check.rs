use anyhow::{Context, Result};
use mcptape::check::{check, CheckConfig, Grade, LatencyRule};
use mcptape::compare::Normalizer;
use mcptape::wire::DEFAULT_MAX_MESSAGE;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Check a new build of a server against a recording: start it, replay the recorded client
/// requests (those that overlapped in the recording are sent concurrently, server requests are
/// answered with the recorded client answers), compare every answer with the recording after
/// masking what is legitimately volatile, classify each difference and grade the build A–F.
///
/// Regression kinds: missing-response, error-status-change, structure-change, ordering-change,
/// value-change. Score = 25 % responsiveness + 45 % match rate + 20 % error parity + 10 %
/// structural stability; A ≥ 90, B ≥ 80, C ≥ 70, D ≥ 60, else F; a missing response caps at D.
/// A request the tape has no answer for (a recording cut off after it) is reported as not on
/// the tape, with the live answer, and not graded.
///
/// Gates: --fail-on-regression and --min-grade; with neither, any regression fails.
///
/// When the replay is over, the server's stdin is closed; still running 5 s later, it gets
/// SIGTERM, then SIGKILL 2 s after that.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_CHECK, verbatim_doc_comment)]
pub struct Args {
    /// The baseline tape (name, path, or s3://BUCKET/KEY).
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Which MCP server of a multi-server tape (an agent run's) to replay, by label (default:
    /// the first; the model API is not one).
    #[arg(long, value_name = "LABEL")]
    server: Option<String>,
    /// Seconds each request may take before it counts as a missing response.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = super::parse_positive_secs)]
    timeout: Duration,
    /// Fail (exit 1) when the grade is worse than this (A, B, C, D or F).
    #[arg(long, value_name = "GRADE")]
    min_grade: Option<Grade>,
    /// Fail (exit 1) on any regression (the default when no gate is given).
    #[arg(long)]
    fail_on_regression: bool,
    /// Flag exchanges whose latency grew past FACTOR× the recorded one (default 2) and by more
    /// than --latency-floor milliseconds.
    #[arg(long, value_name = "FACTOR", num_args = 0..=1, default_missing_value = "2")]
    compare_latency: Option<f64>,
    /// The absolute floor for --compare-latency, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 25.0)]
    latency_floor: f64,
    /// Write the JSON report to FILE (`-` for stdout; the console summary then goes to stderr).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Markdown report to FILE (fit for $GITHUB_STEP_SUMMARY).
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Write a JUnit XML report to FILE: a testcase per exchange.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a shields.io endpoint badge (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    badge: Option<PathBuf>,
    /// Accept the observed behaviour as the new baseline (the old tape kept as TAPE.bak).
    #[arg(long)]
    update: bool,
    #[command(flatten)]
    norm: NormArgs,
    #[command(flatten)]
    read: super::ReadArgs,
    #[command(flatten)]
    redact: super::RedactArgs,
    /// Largest message kept whole, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE, value_parser = super::parse_nonzero)]
    max_message: usize,
    /// Send the real value of a redacted argument to the live server: NAME is a marker's
    /// rule or the key it names (`api_key` fills `[REDACTED:key:api_key:…]`), SOURCE is
    /// `env:VAR` or `file:PATH`. Never written to a tape or a report. Repeatable; also the
    /// `[fill]` table of .mcptape/config.toml.
    #[arg(long, value_name = "NAME=SOURCE")]
    fill: Vec<String>,
    /// Check a running Streamable HTTP server at this URL instead of starting one.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// The server command and its arguments (`--` before it is optional; everything after the
    /// command's name is the server's, flags too).
    #[arg(
        trailing_var_arg = true,
        required_unless_present = "url",
        value_name = "SERVER COMMAND"
    )]
    command: Vec<String>,
}

/// Normalization options shared by check and diff.
#[derive(clap::Args)]
pub struct NormArgs {
    /// Remove the nodes an RFC 9535 JSONPath selects (in the answer body: `$.result…`,
    /// `$.error…`) before comparing. Scoped to one method (`resources/read:$…`) or one tool,
    /// prompt or resource (`tools/call:get_file_info:$…`); unscoped, everywhere. Repeatable.
    #[arg(long, value_name = "[METHOD:[NAME:]]JSONPATH")]
    ignore_path: Vec<String>,
    /// Compare arrays as multisets: order does not matter.
    #[arg(long)]
    allow_reorder: bool,
    /// Do not mask timestamps, UUIDs and session/request ids automatically.
    #[arg(long)]
    no_auto_mask: bool,
}

impl NormArgs {
    pub fn normalizer(&self) -> Result<Normalizer> {
        Ok(Normalizer::new(
            !self.no_auto_mask,
            &self.ignore_path,
            self.allow_reorder,
        )?)
    }
}

pub fn run(a: Args) -> Result<i32> {
    let tape = if a.update {
        super::remote::resolve_to_modify(&a.tape)?
    } else {
        super::remote::resolve(&a.tape)?
    };
    if let Some(f) = a.compare_latency {
        if !(f.is_finite() && f >= 1.0) {
            return Err(super::UsageError(format!(
                "--compare-latency {f}: the factor must be at least 1"
            ))
            .into());
        }
    }
    // The project's fills, then the command line's (the same name: the command line wins).
    let project = mcptape::config::load().map_err(|e| super::UsageError(e.to_string()))?;
    let mut fills: Vec<mcptape::check::fill::Fill> = Vec::new();
    let usage = |e: mcptape::check::fill::FillError| super::UsageError(e.to_string());
    for (name, source) in &project.fill {
        if !a
            .fill
            .iter()
            .any(|f| f.split_once('=').is_some_and(|(n, _)| n == name))
        {
            fills.push(mcptape::check::fill::Fill::resolve(name, source).map_err(usage)?);
        }
    }
    for f in &a.fill {
        fills.push(mcptape::check::fill::Fill::parse(f).map_err(usage)?);
    }
    let mut cfg = CheckConfig::new(tape, a.command);
    cfg.server = a.server.clone();
    cfg.url = a.url;
    cfg.timeout = a.timeout;
    cfg.normalizer = a.norm.normalizer()?;
    cfg.latency = a.compare_latency.map(|factor| LatencyRule {
        factor,
        floor_ms: a.latency_floor,
    });
    cfg.min_grade = a.min_grade;
    // With no gate named, regressions fail the check: CI should not pass a drifting build.
    cfg.fail_on_regression = a.fail_on_regression || a.min_grade.is_none();
    cfg.gate_named = a.fail_on_regression || a.min_grade.is_some();
    cfg.update = a.update;
    cfg.max_message = a.max_message;
    cfg.redact = a.redact.config()?;
    cfg.fills = fills;
    cfg.read = a.read.options();
    let (report, warnings) = super::runtime::multi()?.block_on(check(&cfg))?;
    for w in warnings {
        crate::diag!("mcptape: warning: {w}");
    }
    if let Some(e) = &report.internal_error {
        crate::diag!("{e}");
    }
    // The first server of several was checked without being asked for: say which, and what
    // else the tape holds.
    if let (None, Some(label)) = (&a.server, &report.server_label) {
        crate::diag!(
            "mcptape check: checked server {label}, the first MCP server of {}; it also holds {} (--server LABEL checks another)",
            report.tape,
            report.other_servers.join(", ")
        );
    }
    let json_to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let console_is_tty = if json_to_stdout {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let console =
        mcptape::report::check_console(&report, mcptape::report::use_color(console_is_tty));
    if json_to_stdout {
        crate::diag!("{}", console.trim_end());
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        super::stdout(&console)?;
    }
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    };
    if let Some(p) = a.json.as_ref().filter(|_| !json_to_stdout) {
        write(p, format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    }
    if let Some(p) = &a.markdown {
        write(p, mcptape::report::check_markdown(&report))?;
    }
    if let Some(p) = &a.junit {
        write(p, mcptape::report::check_junit(&report))?;
    }
    if let Some(p) = &a.badge {
        write(p, mcptape::report::check_badge(&report))?;
    }
    Ok(report.exit_code())
}
