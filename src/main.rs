//! The `mcptape` binary: parse arguments, build a validated config, call the library, map the
//! result to an exit code. Everything else lives in the library.

/// A diagnostic line on stderr. Unlike `eprintln!`, a closed or broken stderr is not a panic.
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use diag;

mod cli;

fn main() {
    let code = cli::main();
    std::process::exit(code);
}
