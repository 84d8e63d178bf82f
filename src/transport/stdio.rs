//! The stdio transport: an MCP server as a child process, its stdin and stdout piped, its
//! stderr passed through; how it is stopped (its stdin closed, a grace period, then SIGTERM,
//! then SIGKILL) and how its end is told (its exit code, or 128+N for a signal N).

use std::io;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// After SIGTERM at the end of the grace period, how long before SIGKILL.
pub(crate) const TERM_TO_KILL: Duration = Duration::from_secs(2);

/// Starts `command` with stdin and stdout piped and stderr passed through. The child starts
/// with every signal at its default disposition: mcptape ignores SIGXFSZ for itself (a full
/// disk must show as a failed tape write, not kill it), which the child must not inherit.
pub(crate) fn spawn(command: &[String]) -> io::Result<Child> {
    server_command(command)?.spawn()
}

/// The command `spawn` runs, not started yet (play's live server is started on the runtime,
/// as a `tokio::process::Command` made from it).
pub(crate) fn server_command(command: &[String]) -> io::Result<Command> {
    let program = command
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no server command given"))?;
    let mut cmd = Command::new(program);
    cmd.args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: runs in the child between fork and exec; signal(2) is async-signal-safe and
        // touches nothing but the child's own signal table.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
                Ok(())
            });
        }
    }
    Ok(cmd)
}

/// Makes a file-size limit (RLIMIT_FSIZE) show up as a failed write — the tape marked
/// incomplete, the loss reported — rather than SIGXFSZ killing the process silently. For the
/// binary to call once; servers spawned by `spawn` keep the default disposition.
pub fn ignore_sigxfsz() {
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// After the server's stdin is closed: waits up to `grace` for it to exit, then sends it
/// SIGTERM (to its pid, as `record` over stdio does), waits up to [`TERM_TO_KILL`] more, then
/// kills it (SIGKILL). For `check` and the bridge (`record --listen`); `record` over stdio
/// does the same in its supervisor, forwarding signals meanwhile. An error when it could not
/// be waited for (how it ended is then unknown: see [`lost_end`]).
pub(crate) fn wait_with_grace(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    if let Some(st) = wait_until(child, Instant::now() + grace)? {
        return Ok(st);
    }
    // Not reaped yet, so the pid is still this child's (a zombie at worst).
    signal(child.id(), libc::SIGTERM);
    if let Some(st) = wait_until(child, Instant::now() + TERM_TO_KILL)? {
        return Ok(st);
    }
    let _ = child.kill();
    child.wait()
}

/// Waits for `child` to exit until `deadline`: its status, or None if it is still running.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    loop {
        match child.try_wait()? {
            Some(st) => return Ok(Some(st)),
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            None => return Ok(None),
        }
    }
}

/// The line said when how a child of mcptape's (`who`: "the server", "the agent") ended could
/// not be learned, waiting for it having failed with `e`: an internal error, mcptape exits 70
/// ([`SOFTWARE`](crate::exit::SOFTWARE)) with no exit code of the child's to pass on, never
/// as if it had succeeded. `then` says what goes without it ("the tape is closed without it").
/// Not seen from outside: SIGCHLD ignored by whoever started mcptape, the one cause known, is
/// put back to its default at start ([`wait_for_own_children`]).
pub(crate) fn lost_end(who: &str, pid: u32, e: &io::Error, then: &str) -> String {
    format!("mcptape: internal error: could not learn how {who} (pid {pid}) ended: {e}; {then}")
}

/// The exit code to pass on for a server that ended so: its own, or 128+N for a signal N.
pub(crate) fn exit_code(st: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    st.code().or_else(|| st.signal().map(|s| 128 + s))
}

/// Whether this process's children are reaped by the kernel, unwaited: SIGCHLD ignored (or
/// `SA_NOCLDWAIT`), as a parent may leave it across exec. Then `wait` fails with ECHILD and a
/// child's exit status is lost.
fn children_reaped_unwaited() -> bool {
    // SAFETY: sigaction(2) only reads the current disposition into a zeroed struct.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut now) == 0
            && (now.sa_sigaction == libc::SIG_IGN || now.sa_flags & libc::SA_NOCLDWAIT != 0)
    }
}

/// Puts SIGCHLD back to its default when this process was started with it ignored (or with
/// `SA_NOCLDWAIT`), as a parent may leave it across exec: the kernel would reap every child
/// unwaited, and the server's exit status, which `record` exits with, would be lost. Children
/// started after this get SIGCHLD at its default too, as they expect. Called once, at start.
pub fn wait_for_own_children() {
    if children_reaped_unwaited() {
        // SAFETY: sigaction(2) with a zeroed struct: SIG_DFL, no flags, an empty mask. At
        // start, before any thread or child exists.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGCHLD, &default, std::ptr::null_mut());
        }
    }
}

/// Sends signal `sig` to the process `pid` (our own child).
pub(crate) fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a pid we spawned.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// The command as a user would type it, for messages.
pub fn shell_words(cmd: &[String]) -> String {
    cmd.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A child that exits 3, started as `record` and `check` start their servers: for the unit
/// tests of how a server's end is told.
#[cfg(test)]
pub(crate) fn child_exiting_3() -> std::process::Child {
    spawn(&["sh".into(), "-c".into(), "exit 3".into()]).expect("sh starts")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead as _;
    use std::os::unix::process::ExitStatusExt as _;

    /// `sh -c SCRIPT` started as a server is, once it has said `ready` on stdout (its traps
    /// set), its stdin closed.
    fn ready_child(script: &str) -> Child {
        let mut child = spawn(&["sh".into(), "-c".into(), script.into()]).expect("sh starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
            .read_line(&mut line)
            .expect("a line");
        assert_eq!(line, "ready\n");
        drop(child.stdin.take());
        child
    }

    /// A server still running when the grace period ends gets SIGTERM, and how it answers
    /// it is how it ended (`wait_with_grace` used to SIGKILL it at once).
    #[test]
    fn a_server_past_the_grace_gets_sigterm_first() {
        let mut child = ready_child("trap 'kill $!; exit 7' TERM; echo ready; sleep 30 & wait");
        let st = wait_with_grace(&mut child, Duration::ZERO).expect("waited");
        assert_eq!((st.code(), st.signal()), (Some(7), None));
    }

    /// One that ignores SIGTERM is killed after it.
    #[test]
    fn a_server_that_ignores_sigterm_is_killed() {
        let mut child = ready_child("trap '' TERM; echo ready; while :; do sleep 1; done");
        let st = wait_with_grace(&mut child, Duration::ZERO).expect("waited");
        assert_eq!((st.code(), st.signal()), (None, Some(libc::SIGKILL)));
    }
}
