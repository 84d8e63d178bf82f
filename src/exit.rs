//! Exit codes: a documented contract (README, `--help`). Tool failures use the sysexits values.
//! Every library error knows its own code ([`Coded`]); [`crate::errors::exit_code`] finds it
//! along a chain of causes, so the binary maps errors to codes without knowing their types.
//! A leaf: every layer uses it, it uses none.

/// Clean: same, everything served.
pub const OK: i32 = 0;
/// Drift, misses or regressions found.
pub const DRIFT: i32 = 1;
/// Structural drift (`diff`).
pub const STRUCTURAL: i32 = 2;
/// Command-line usage error.
pub const USAGE: i32 = 64;
/// The tape is malformed or not a tape (or from a newer major version).
pub const DATA_ERR: i32 = 65;
/// The tape was not found.
pub const NO_INPUT: i32 = 66;
/// The server could not be started (or reached).
pub const UNAVAILABLE: i32 = 69;
/// An internal error (a bug: please report it).
pub const SOFTWARE: i32 = 70;
/// An I/O error (writing the tape, reading stdin…).
pub const IO_ERR: i32 = 74;
/// `play` over stdio cut the connection on purpose (`--faults drop`): a transient failure,
/// as sysexits' EX_TEMPFAIL says.
pub const TEMPFAIL: i32 = 75;

/// An error that knows which exit code it means.
pub trait Coded {
    /// The exit code.
    fn exit_code(&self) -> i32;
}

/// Panics seen in this process since [`count_panics`] was called.
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts every panic from now on, in any thread (the previous hook still prints it). A panic
/// is a bug whatever the command: the binary exits [`SOFTWARE`] after one (not Rust's own 101),
/// and `play`, whose serving tasks tokio would let die quietly, stops saying so.
pub fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// How many panics [`count_panics`] has seen.
pub fn panics() -> usize {
    PANICS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Runs a command's `main` and gives its exit code, or [`SOFTWARE`] when it panicked or a panic
/// was seen in any other thread while it ran (said on stderr: a proxy's relay thread that died
/// may have lost messages; the command's own code would pass that for a success).
pub fn guarded(main: impl FnOnce() -> i32 + std::panic::UnwindSafe) -> i32 {
    count_panics();
    let before = panics();
    let Ok(code) = std::panic::catch_unwind(main) else {
        crate::diag!("mcptape: internal error: the panic above stopped the command (a bug: please report it)");
        return SOFTWARE;
    };
    let seen = panics() - before;
    if seen > 0 && code != SOFTWARE {
        let s = if seen == 1 { "" } else { "s" };
        crate::diag!(
            "mcptape: internal error: {seen} panic{s} above (a bug: please report it): exit code {SOFTWARE} instead of {code}"
        );
        return SOFTWARE;
    }
    code // 70 already: the command said why
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only panicking cases: the count is the process's, and another test may panic meanwhile
    // (which can only make a code 70 more certain).
    #[test]
    fn a_panic_in_main_or_in_another_thread_exits_70() {
        assert_eq!(guarded(|| panic!("a bug in main")), SOFTWARE);
        let code = guarded(|| {
            let _ = std::thread::spawn(|| panic!("a bug in a relay thread")).join();
            0
        });
        assert_eq!(code, SOFTWARE);
        let code = guarded(|| {
            let _ = std::thread::spawn(|| panic!("a bug")).join();
            3
        });
        assert_eq!(code, SOFTWARE, "not the server's 3: a message may be lost");
    }
}
