//! `play`'s matching options: `--match`, `--ignore-param`, `--repeat`, and `--unused-report`
//! (what the run used, for `mcptape prune`), turned into the library's [`MatchPolicy`].

use mcptape::play::{MatchMode, MatchPolicy, PlayReport, Repeat};
use mcptape::wire::jsonpath::IgnorePath;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct MatchArgs {
    /// Match requests by content (method, params), method (and tool, resource, prompt), sequence.
    #[arg(
        long = "match",
        value_enum,
        value_name = "BY",
        default_value = "content"
    )]
    by: By,
    /// Leave part of the params out of matching: $.arguments.ts, tools/call:NAME:$… (repeatable).
    #[arg(long, value_name = "JSONPATH")]
    ignore_param: Vec<String>,
    /// When a call's recorded answers run out: error (a miss), last (it again), cycle (restart).
    #[arg(long, value_enum, value_name = "WHAT", default_value = "error")]
    repeat: RepeatArg,
    /// Write the recorded exchanges used and never used, as JSON (for `mcptape prune`).
    #[arg(long, value_name = "FILE")]
    unused_report: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum By {
    Content,
    Method,
    Sequence,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RepeatArg {
    Error,
    Last,
    Cycle,
}

impl MatchArgs {
    /// The policy, or a usage error (a JSONPath that does not parse, or paths to ignore with a
    /// matcher that compares no params).
    pub fn policy(&self) -> anyhow::Result<MatchPolicy> {
        let mode = match self.by {
            By::Content => MatchMode::Content,
            By::Method => MatchMode::Method,
            By::Sequence => MatchMode::Sequence,
        };
        if mode != MatchMode::Content && !self.ignore_param.is_empty() {
            return Err(super::UsageError(format!(
                "--ignore-param has no effect with --match {}: it compares no params (only with --match content)",
                mode.name()
            ))
            .into());
        }
        let ignore = self
            .ignore_param
            .iter()
            .map(|p| IgnorePath::parse_for(p, "--ignore-param"))
            .collect::<Result<Vec<_>, _>>()?;
        let repeat = match self.repeat {
            RepeatArg::Error => Repeat::Error,
            RepeatArg::Last => Repeat::Last,
            RepeatArg::Cycle => Repeat::Cycle,
        };
        Ok(MatchPolicy {
            mode,
            repeat,
            ignore,
        })
    }

    /// Refuses an `--unused-report` that could not be written when play ends, before play
    /// serves anything: a folder (usage error), a missing or read-only folder (I/O error).
    pub fn check_report_path(&self) -> anyhow::Result<()> {
        let Some(out) = &self.unused_report else {
            return Ok(());
        };
        if out.is_dir() {
            return Err(super::UsageError(format!(
                "--unused-report {}: is a folder; name a file to write the report to",
                out.display()
            ))
            .into());
        }
        mcptape::play::usage::check_writable(out)?;
        Ok(())
    }

    /// The summary's word on repeats, when there were any (`, 2 answers were repeats
    /// (--repeat last)`).
    pub fn summary(&self, report: &PlayReport) -> String {
        if report.repeats == 0 {
            return String::new();
        }
        let which = match self.repeat {
            RepeatArg::Last => "last",
            RepeatArg::Cycle => "cycle",
            RepeatArg::Error => "error",
        };
        let (s, were) = if report.repeats == 1 {
            ("", "was a repeat")
        } else {
            ("s", "were repeats")
        };
        format!(", {} answer{s} {were} (--repeat {which})", report.repeats)
    }

    /// Writes `--unused-report`, when asked, for the tape at `tape` (loaded again: play took
    /// its index) and the server played.
    pub fn write_report(
        &self,
        tape: &Path,
        server: &str,
        report: &PlayReport,
    ) -> anyhow::Result<()> {
        let Some(out) = &self.unused_report else {
            return Ok(());
        };
        let index = mcptape::tape::TapeIndex::load(tape, Some(server))?;
        let mut uses = report.uses.clone();
        uses.resize(uses.len().max(index.exchanges.len()), 0);
        uses.truncate(index.exchanges.len());
        let doc = mcptape::play::usage::build(&index, &uses)?;
        mcptape::play::usage::write(&doc, out)?;
        crate::diag!(
            "mcptape play: wrote the unused report to {} ({} unused, {} used)",
            out.display(),
            doc.unused.len(),
            doc.used.len()
        );
        Ok(())
    }
}
