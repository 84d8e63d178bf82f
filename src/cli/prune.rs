use anyhow::Result;
use mcptape::play::usage;
use mcptape::tape::TapeIndex;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Drop recorded exchanges a play run never used, as `play --unused-report` listed them.
///
/// `--unused FILE` drops the exchanges that report lists as unused. `--keep-used-by FILE`
/// (repeatable: the reports of several runs) keeps only what at least one of those runs used
/// and drops every other exchange. The handshake (initialize, server/discover) is never
/// dropped. The tape is written anew with a fresh hash chain (`mcptape verify` passes); the
/// original is kept as TAPE.bak.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_PRUNE, verbatim_doc_comment)]
pub struct Args {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Drop the exchanges this unused report lists as unused.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "keep_used_by",
        conflicts_with = "keep_used_by"
    )]
    unused: Option<PathBuf>,
    /// Keep only the exchanges one of these reports' runs used (repeatable); drop the rest.
    #[arg(long, value_name = "FILE")]
    keep_used_by: Vec<PathBuf>,
    #[command(flatten)]
    sign: super::SignArgs,
}

pub fn run(a: Args) -> Result<i32> {
    let path = super::remote::resolve_to_modify(&a.tape)?;
    let reports: Vec<(PathBuf, usage::UsageReport)> = a
        .unused
        .iter()
        .chain(&a.keep_used_by)
        .map(|f| usage::read(f).map(|r| (f.clone(), r)))
        .collect::<Result<_, _>>()?;
    // Every report names the server it played; they must agree, and it must be on the tape.
    let server = reports[0].1.server.clone();
    if let Some((f, r)) = reports.iter().find(|(_, r)| r.server != server) {
        return Err(super::UsageError(format!(
            "{} is a report on server {:?}, {} on server {server:?}: prune one server at a time",
            f.display(),
            r.server,
            reports[0].0.display()
        ))
        .into());
    }
    let index = TapeIndex::load(&path, Some(&server))?;
    super::known_server(Some(&server), &index.servers, &index.labels, false)?;
    super::mcp_server(&index, "prune drops an MCP server's exchanges", "")?;
    let doomed: BTreeSet<usize> = match &a.unused {
        Some(f) => usage::resolve(&index, f, &reports[0].1.unused)?,
        None => {
            let mut kept = BTreeSet::new();
            for (f, r) in &reports {
                kept.extend(usage::resolve(&index, f, &r.used)?);
            }
            (0..index.exchanges.len())
                .filter(|i| !kept.contains(i))
                .collect()
        }
    };
    let key = a.sign.key(false)?;
    if key.is_none() && index.end.as_ref().is_some_and(|e| e.sig.is_some()) {
        crate::diag!("mcptape prune: warning: {} was signed; the pruned tape is not (give --sign with a key to sign it)", path.display());
    }
    let out = mcptape::tape::prune::prune(&index, &doomed, key.as_deref())?;
    let kept = index.exchanges.len() - out.exchanges;
    let handshake = if out.handshake_kept > 0 {
        format!(
            " ({} handshake exchange{} kept)",
            out.handshake_kept,
            if out.handshake_kept == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    crate::diag!(
        "mcptape prune: dropped {} of {} ({}){handshake}; {kept} kept; wrote {} with a fresh hash chain; the original is kept as {}",
        out.exchanges,
        super::plural(index.exchanges.len() as u64, "exchange"),
        super::plural(out.lines as u64, "line"),
        path.display(),
        out.backup.display()
    );
    Ok(mcptape::exit::OK)
}
