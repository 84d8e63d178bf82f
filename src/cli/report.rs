use anyhow::{Context as _, Result};
use mcptape::report::html;
use std::path::PathBuf;

/// Write a self-contained HTML report of a tape: a timeline of the session, a list of every
/// exchange (filter by server, method or tool, errors, slow calls; search; each opens to its
/// request and answer), the per-tool statistics. It needs no network: open it from disk.
///
/// With --check REPORT.json (from `mcptape check --json FILE`) or --diff OTHER, the exchanges
/// that drifted are marked and their differences shown side by side. --diff OTHER --server
/// LABEL compares one MCP server of each tape, as `mcptape diff --server` does.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_REPORT, verbatim_doc_comment)]
#[command(mut_arg("server", |a| a.requires("diff")))]
pub struct Args {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Where to write the report (`-`: stdout). Default: TAPE's name with `.html`, in the
    /// current folder.
    #[arg(short, long, value_name = "FILE.html")]
    output: Option<PathBuf>,
    /// Mark what this check found: the JSON report of `mcptape check TAPE --json FILE`.
    #[arg(long, value_name = "REPORT.json", conflicts_with = "diff")]
    check: Option<PathBuf>,
    /// Mark how TAPE drifted from OTHER (as `mcptape diff TAPE OTHER`), OTHER's answers beside.
    #[arg(long, value_name = "OTHER")]
    diff: Option<String>,
    // With --diff only (`requires` above), as `mcptape diff --server`.
    #[command(flatten)]
    server: super::diff::ServerArg,
    #[command(flatten)]
    norm: super::check::NormArgs,
}

pub fn run(a: Args) -> Result<i32> {
    // Read now, with or without --diff (the only one that uses it): a bad --ignore-path is a
    // usage error either way, before anything is read or written.
    let norm = a.norm.normalizer()?;
    let path = super::remote::resolve(&a.tape)?;
    // TAPE is read once, its model calls with it: for the page, and for --diff's comparison.
    let read = mcptape::tape::ReadOptions::default();
    let (tape, calls) = mcptape::model::calls::load_every(&path, read, true)?;
    let mut data = html::gather_read(&path, &tape, &calls);
    for w in &data.warnings {
        crate::diag!("mcptape: warning: {}: {w}", path.display());
    }
    if let Some(file) = &a.check {
        let report = html::read_check_report(file)?;
        html::mark_check(&mut data, &report, file)?;
    }
    if let Some(other) = &a.diff {
        let other = super::remote::resolve(other)?;
        // OTHER once too: its model calls only where they are compared (without --server).
        let (b, b_calls) =
            mcptape::model::calls::load_every(&other, read, a.server.server.is_none())?;
        let side = |path, servers, calls| mcptape::diff::Side {
            path,
            servers,
            calls,
        };
        let report = super::diff::diffed_read(
            side(&path, &tape, &calls),
            side(&other, &b, &b_calls),
            &norm,
            &a.server,
            "report",
        )?;
        html::mark_diff(&mut data, &report, &b);
    }
    // What was read is in the page's data now.
    drop((tape, calls));
    let page = html::render(&data);
    let out = a.output.unwrap_or_else(|| {
        let stem = path
            .file_stem()
            .map(|s| s.to_os_string())
            .unwrap_or_default();
        PathBuf::from(stem).with_extension("html")
    });
    if out.as_os_str() == "-" {
        super::stdout(&page)?;
    } else {
        write_owner_only(&out, page.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        crate::diag!(
            "mcptape: wrote {} ({} items, {}); open it in a browser",
            out.display(),
            data.items.len(),
            mcptape::inspect::human_bytes(std::fs::metadata(&out).map_or(0, |m| m.len()))
        );
    }
    Ok(mcptape::exit::OK)
}

/// Writes the report owner-only (0600), as tapes are: it holds what crossed the wire.
fn write_owner_only(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
