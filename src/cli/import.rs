use anyhow::Result;
use mcptape::import::{self, Format};
use mcptape::tape::{Placed, WriteOptions};
use std::path::PathBuf;

/// Import another recorder's file as an mcptape tape: hash-chained and redacted like a recorded
/// one, so play, check, diff and show read it. What the format does not keep (timing,
/// notifications, server requests, the handshake…) is said on stderr, never made up.
///
/// Formats: agent-vcr, localab-vcr, mcp-rec, mcp-recorder, mcp-cassette, mcp-vcr (YAML or
/// NDJSON), mcp-replay (a fixture directory, or one fixture), or auto (the default: detected from the file's content, refused with the candidates
/// when it could be several). See docs/import.md.
#[derive(clap::Args)]
#[command(
    after_help = super::EXIT_IMPORT,
    override_usage = "mcptape import [OPTIONS] --output <TAPE> [FORMAT] <PATH>"
)]
pub struct Args {
    /// The format (or `auto`), then the file (mcp-replay: its fixture directory); with the path
    /// alone, the format is detected.
    #[arg(value_names = ["FORMAT|PATH", "PATH"], num_args = 1..=2, required = true)]
    what: Vec<String>,
    /// The tape to write: a name (stored as .mcptape/tapes/NAME.jsonl) or a path.
    #[arg(short = 'o', long = "output", value_name = "TAPE")]
    output: String,
    #[command(flatten)]
    redact: super::RedactArgs,
    #[command(flatten)]
    sign: super::SignArgs,
}

pub fn run(a: Args) -> Result<i32> {
    let (format, path) = match a.what.as_slice() {
        [path] => (None, PathBuf::from(path)),
        [f, path] if f == "auto" => (None, PathBuf::from(path)),
        [f, path] => match Format::from_name(f) {
            Some(f) => (Some(f), PathBuf::from(path)),
            None => {
                let known: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
                return Err(super::UsageError(format!(
                    "unknown format {f:?}; mcptape imports: {}, or auto",
                    known.join(", ")
                ))
                .into());
            }
        },
        _ => unreachable!("clap takes one or two values"),
    };
    let tape = super::remote::resolve_for_write(&a.output)?;
    let opts = WriteOptions {
        redactor: Some(std::sync::Arc::new(a.redact.redactor()?)),
        signing_key: a.sign.signing_key()?,
    };
    let (format, imported) = import::read(&path, format)?;
    for lack in &imported.lacks {
        crate::diag!("mcptape import: warning: {format} lacks {lack}");
    }
    let w = import::write_tape(&imported, format, &path, &tape, opts)?;
    let at = match &w.placed {
        Placed::InPlace => tape.display().to_string(),
        Placed::Replaced { backup } => {
            format!(
                "{} (the tape there is kept at {})",
                tape.display(),
                backup.display()
            )
        }
        Placed::KeptOld { at } | Placed::NotReplaced { at, .. } => {
            format!(
                "{} (beside the tape at {}, kept as it was)",
                at.display(),
                tape.display()
            )
        }
    };
    crate::diag!(
        "mcptape import: {format} {} -> {at}: {}, {}",
        path.display(),
        super::plural(w.messages as u64, "message"),
        super::plural(w.exchanges as u64, "exchange")
    );
    Ok(mcptape::exit::OK)
}
