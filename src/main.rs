//! The `mcptape` binary: parse arguments, build a validated config, call the library, map the
//! result to an exit code. Everything else lives in the library.

mod cli;

fn main() {
    let code = cli::main();
    std::process::exit(code);
}
