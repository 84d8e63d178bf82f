//! `bench --relay -- CMD…`: the floor for any stdio proxy. It starts CMD and copies bytes both
//! ways with two threads and plain `read(2)`/`write(2)`: no framing, no parsing, no tape.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

/// Read size: as large as a pipe's default capacity, so one read drains a full pipe.
const CHUNK: usize = 64 * 1024;

pub fn run(cmd: &[String]) -> anyhow::Result<i32> {
    let (program, args) = cmd
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("--relay needs a command after --"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_child = child.stdin.take().expect("piped");
    let mut from_child = child.stdout.take().expect("piped");
    let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let up = std::thread::spawn(move || copy(&mut stdin, &mut to_child));
    // to_child is dropped when `up` ends: the child sees EOF when we do.
    let down = copy(&mut from_child, &mut stdout);
    let _ = up.join();
    down?;
    let status = child.wait()?;
    Ok(status.code().unwrap_or(1))
}

fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}
