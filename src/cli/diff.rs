use anyhow::Result;
use mcptape::compare::Normalizer;

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
    let (report, warnings) = mcptape::diff::diff_with(&pa, &pb, &norm, a.read.options())?;
    for w in warnings {
        crate::diag!("mcptape: warning: {w}");
    }
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
