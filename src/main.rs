//! The `mcptape` binary: parse arguments, build a validated config, call the library, map the
//! result to an exit code. Everything else lives in the library.

/// A diagnostic line on stderr. Unlike `eprintln!`, a closed or broken stderr is not a panic.
/// One line, one `write(2)` (see `mcptape::write_diag`).
macro_rules! diag {
    ($($arg:tt)*) => {
        mcptape::write_diag(&mut std::io::stderr().lock(), format_args!($($arg)*))
    };
}
pub(crate) use diag;

mod cli;

fn main() {
    mcptape::transport::stdio::wait_for_own_children();
    let code = mcptape::exit::guarded(cli::main);
    std::process::exit(code);
}
