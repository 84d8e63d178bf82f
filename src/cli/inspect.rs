use anyhow::Result;
use mcptape::inspect;
use mcptape::tape::store;

/// List the tapes in .mcptape/tapes (or $MCPTAPE_DIR/tapes), or in a folder of your own.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_LS)]
pub struct LsArgs {
    /// A folder to list instead: its `.jsonl` files that are mcptape tapes. Or s3://BUCKET/PREFIX:
    /// the `.jsonl` objects under that prefix (key, size, last modified).
    #[arg(value_name = "DIR|URL")]
    dir: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Show the messages of a tape: direction, kind, method or tool, id, latency per exchange.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_SHOW)]
pub struct ShowArgs {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Which server of a multi-server tape (default: the first; with --stats, all).
    #[arg(long, value_name = "LABEL")]
    server: Option<String>,
    /// Per-tool statistics instead of the messages: calls, errors, p50 / p95 / max latency,
    /// request and answer sizes, per server and method (tools, prompts and resources apart),
    /// model calls included.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    read: super::ReadArgs,
}

pub fn ls(a: LsArgs) -> Result<i32> {
    let url = a
        .dir
        .as_ref()
        .and_then(|d| d.to_str())
        .filter(|d| mcptape::remote::is_url(d))
        .map(str::to_string);
    let mut a = a;
    if let Some(url) = url.as_deref() {
        match mcptape::remote::parse(url, true)? {
            mcptape::remote::Target::File(p) => a.dir = Some(p),
            mcptape::remote::Target::S3(_) => return super::remote::ls(url, a.json),
        }
    }
    let listed = match &a.dir {
        Some(dir) if !dir.exists() => {
            return Err(super::UsageError(format!("no such folder: {}", dir.display())).into())
        }
        Some(dir) if !dir.is_dir() => {
            return Err(super::UsageError(format!(
                "{} is not a folder (`mcptape show {}` shows a tape)",
                dir.display(),
                dir.display()
            ))
            .into())
        }
        Some(dir) => inspect::ls_in(dir)?,
        None => inspect::ls()?,
    };
    let mut rows = Vec::new();
    for r in listed {
        match r {
            Ok(row) => rows.push(row),
            Err(e) => crate::diag!("mcptape: skipping: {e}"),
        }
    }
    if a.json {
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?))?;
    } else if rows.is_empty() {
        let dir = a.dir.clone().unwrap_or_else(store::tapes_dir);
        crate::diag!("no tapes in {}", dir.display());
    } else {
        super::stdout(&inspect::ls_table(&rows))?;
    }
    Ok(mcptape::exit::OK)
}

pub fn show(a: ShowArgs) -> Result<i32> {
    let path = super::remote::resolve(&a.tape)?;
    if a.stats {
        let doc = mcptape::stats::tape_stats(&path, a.server.as_deref())?;
        super::known_server(a.server.as_deref(), &doc.declared, &doc.labels, true)?;
        if a.json {
            super::stdout(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
        } else {
            super::stdout(&mcptape::stats::stats_table(&doc))?;
        }
        return Ok(mcptape::exit::OK);
    }
    let doc = inspect::show(&path, a.server.as_deref(), a.read.options())?;
    for b in &doc.skipped_lines {
        super::warn_tape(&path, &[mcptape::tape::Warning::SkippedLine(b.clone())]);
    }
    super::known_server(a.server.as_deref(), &doc.servers, &doc.labels, true)?;
    if a.json {
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        super::stdout(&inspect::show_table(&doc))?;
    }
    Ok(mcptape::exit::OK)
}
