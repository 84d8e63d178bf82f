use anyhow::Result;
use mcptape::compare::Normalizer;
use std::path::Path;

/// Compare two recordings: exchanges aligned by content (reordered or parallel calls are not
/// drift), answers compared after normalization, down to the first call that drifted.
///
/// Output drift: the same calls, different answers. Structural drift: calls on one side only,
/// tools added or removed, a tool schema narrowed.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_DIFF, verbatim_doc_comment)]
pub struct Args {
    /// The first tape (name, path, or s3://BUCKET/KEY).
    #[arg(value_name = "A")]
    a: String,
    /// The second tape (name, path, or s3://BUCKET/KEY).
    #[arg(value_name = "B")]
    b: String,
    #[command(flatten)]
    server: ServerArg,
    /// Show every drift, not just the first.
    #[arg(long)]
    all: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    norm: super::check::NormArgs,
    #[command(flatten)]
    read: super::ReadArgs,
}

/// `--server` of `diff`, and of `report --diff`: which MCP server of each tape is compared.
#[derive(clap::Args)]
pub struct ServerArg {
    /// Compare only this MCP server: the one labelled LABEL on a tape of several (an agent
    /// run's), the only one on a tape of one, whatever its label (a plain `mcptape record`
    /// tape is labelled `default`). A_LABEL:B_LABEL names A's and B's apart (a label either
    /// tape has is taken whole, colon and all). The model calls of agent runs are then not
    /// compared. Default: every MCP server, each with the one of its label on the other tape.
    #[arg(long, value_name = "LABEL|A_LABEL:B_LABEL")]
    pub(super) server: Option<String>,
}

/// Diffs `pa` against `pb` as `mcptape diff` does (`--server`, refused as diff refuses it),
/// saying on stderr the tapes' warnings and the hint when the tapes have no server label in
/// common.
fn diffed(
    pa: &Path,
    pb: &Path,
    norm: &Normalizer,
    read: mcptape::tape::ReadOptions,
    server: &ServerArg,
) -> Result<mcptape::diff::DiffReport> {
    let d = mcptape::diff::diff_with(pa, pb, norm, read, server.server.as_deref())?;
    Ok(told(d, "diff", None))
}

/// [`diffed`] of tapes `command` has read already (`report --diff`: A, read for the page, whose
/// warnings it has said).
pub(super) fn diffed_read(
    a: mcptape::diff::Side<'_>,
    b: mcptape::diff::Side<'_>,
    norm: &Normalizer,
    server: &ServerArg,
    command: &str,
) -> Result<mcptape::diff::DiffReport> {
    let d = mcptape::diff::diff_read(a, b, norm, server.server.as_deref())?;
    Ok(told(d, command, Some(a.path)))
}

/// The report of a diff, its tapes' warnings said on stderr but `said`'s (a tape whose warnings
/// `command` has said already), and the hint when the tapes have no server label in common.
fn told(d: mcptape::diff::Diffed, command: &str, said: Option<&Path>) -> mcptape::diff::DiffReport {
    let mcptape::diff::Diffed {
        report,
        warnings,
        hint,
    } = d;
    let said = said.map(|p| format!("{}: ", p.display()));
    for w in warnings {
        if !said.as_deref().is_some_and(|p| w.starts_with(p)) {
            crate::diag!("mcptape: warning: {w}");
        }
    }
    if let Some(hint) = hint {
        crate::diag!("mcptape {command}: {hint}");
    }
    report
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Markdown,
}

pub fn run(a: Args) -> Result<i32> {
    let pa = super::remote::resolve(&a.a)?;
    let pb = super::remote::resolve(&a.b)?;
    let norm: Normalizer = a.norm.normalizer()?;
    let report = diffed(&pa, &pb, &norm, a.read.options(), &a.server)?;
    let text = match a.format {
        Format::Text => {
            use std::io::IsTerminal;
            let color = mcptape::report::use_color(std::io::stdout().is_terminal());
            mcptape::report::diff_text(&report, a.all, color)
        }
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        Format::Markdown => mcptape::report::diff_markdown(&report),
    };
    super::stdout(&text)?;
    Ok(report.verdict.exit_code())
}
