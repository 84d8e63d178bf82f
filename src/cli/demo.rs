use anyhow::{Context, Result};
use mcptape::demo;
use std::path::PathBuf;

/// Run the whole loop on the bundled demo server: record a session, play it back with no
/// server, show a miss explained, and record a regressed build to show drift.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_DEMO)]
pub struct Args {
    /// Folder for the demo's tapes (default: `mcptape-demo-<uid>` under the system temp dir,
    /// made anew by each run, so runs leave one folder, not one each).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Which build of the demo server to run.
    #[arg(long, value_enum, default_value = "healthy")]
    variant: VariantArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum VariantArg {
    Healthy,
    Drifted,
}

pub fn run(a: Args) -> Result<i32> {
    // The demo prints as it goes; a closed pipe (`mcptape demo | head`) should end it quietly,
    // as it does any Unix filter, rather than fail a print.
    // SAFETY: setting a signal disposition to its default before any thread is spawned.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let dir = match a.dir {
        Some(d) => d,
        None => {
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            let d = std::env::temp_dir().join(format!("mcptape-demo-{uid}"));
            // The last run's tapes go (a link there is removed, not followed): a run's
            // recordings are fresh ones, not re-recordings kept beside `.bak`s.
            match std::fs::remove_dir_all(&d) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("clearing {}", d.display()))
                }
                _ => {}
            }
            d
        }
    };
    let exe = std::env::current_exe().context("locating the mcptape binary")?;
    let ok = demo::run_demo(&exe, &dir)?;
    Ok(if ok {
        mcptape::exit::OK
    } else {
        mcptape::exit::DRIFT
    })
}

pub fn server(a: ServerArgs) -> Result<i32> {
    let variant = match a.variant {
        VariantArg::Healthy => demo::server::Variant::Healthy,
        VariantArg::Drifted => demo::server::Variant::Drifted,
    };
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    demo::server::serve(variant, stdin, stdout)?;
    Ok(mcptape::exit::OK)
}
