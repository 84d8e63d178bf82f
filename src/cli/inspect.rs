use anyhow::Result;
use mcptape::inspect;
use mcptape::tape::store;

/// List the tapes in .mcptape/tapes (or $MCPTAPE_DIR/tapes).
#[derive(clap::Args)]
#[command(after_help = super::EXIT_CODES)]
pub struct LsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Show the messages of a tape: direction, kind, method or tool, id, latency per exchange.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_CODES)]
pub struct ShowArgs {
    /// Tape name or path.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Which server of a multi-server tape (default: the first).
    #[arg(long, value_name = "LABEL")]
    server: Option<String>,
}

pub fn ls(a: LsArgs) -> Result<i32> {
    let mut rows = Vec::new();
    for r in inspect::ls()? {
        match r {
            Ok(row) => rows.push(row),
            Err(e) => crate::diag!("mcptape: skipping: {e}"),
        }
    }
    if a.json {
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?))?;
    } else if rows.is_empty() {
        crate::diag!("no tapes in {}", store::tapes_dir().display());
    } else {
        super::stdout(&inspect::ls_table(&rows))?;
    }
    Ok(mcptape::exit::OK)
}

pub fn show(a: ShowArgs) -> Result<i32> {
    let path = store::resolve(&a.tape)?;
    let doc = inspect::show(&path, a.server.as_deref())?;
    super::known_server(a.server.as_deref(), &doc.servers, !doc.messages.is_empty())?;
    if a.json {
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        super::stdout(&inspect::show_table(&doc))?;
    }
    Ok(mcptape::exit::OK)
}
