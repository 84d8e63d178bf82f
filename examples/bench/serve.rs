//! `bench --serve`: a minimal, fast stdio MCP server. It answers `initialize`, `ping`,
//! `tools/list` and `tools/call` of `echo`, reads through a large buffer and writes its answers
//! in one `write(2)` whenever no more input is already waiting, so a pipelined client is answered
//! in batches and a sequential one at once.

use crate::proto;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    name: &'a str,
    arguments: Args,
}

#[derive(Deserialize)]
struct Args {
    n: u64,
    size: usize,
}

/// With `MCPTAPE_BENCH_COLD_ANSWERS=N` in the environment (an experiment, not a scenario):
/// the 1 KiB answers to `echo` with `n` below N, made at start-up and served from memory, a
/// different one each call, as play serves each from its tape; else every answer is built
/// from constants that stay in the CPU's first-level cache. docs/performance.md, "After round
/// nineteen (session 55)".
static COLD: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
const COLD_SIZE: usize = 1024;

pub fn run() -> anyhow::Result<()> {
    if let Ok(n) = std::env::var("MCPTAPE_BENCH_COLD_ANSWERS") {
        let n: u64 = n.parse()?;
        let t = (0..n)
            .map(|i| {
                let mut v = Vec::new();
                proto::call_result(&mut v, &i.to_string(), i, COLD_SIZE);
                v
            })
            .collect();
        let _ = COLD.set(t);
    }
    let stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let mut input = BufReader::with_capacity(1 << 20, stdin);
    let mut line = Vec::new();
    let mut out = Vec::with_capacity(1 << 20);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        answer(trim(&line), &mut out);
        if input.buffer().is_empty() && !out.is_empty() {
            stdout.write_all(&out)?;
            out.clear();
            if out.capacity() > 16 << 20 {
                out.shrink_to(1 << 20);
            }
        }
    }
    stdout.write_all(&out)?;
    Ok(())
}

pub fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Appends the answer line to `line` (nothing for a notification); true when `line` was an
/// `initialize` request (the HTTP server then hands out a session id).
pub fn answer(line: &[u8], out: &mut Vec<u8>) -> bool {
    if line.iter().all(u8::is_ascii_whitespace) {
        return false;
    }
    let req: Request<'_> = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            out.extend(proto::error_result("null", -32700, &e.to_string()));
            out.push(b'\n');
            return false;
        }
    };
    let Some(id) = req.id.map(RawValue::get) else {
        return false; // a notification
    };
    let method = req.method.unwrap_or_default();
    match method {
        "initialize" => out.extend(proto::initialize_result(id)),
        "ping" => out.extend(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#).bytes()),
        "tools/list" => out.extend(proto::tools_list_result(id)),
        "tools/call" => {
            match req
                .params
                .map(|p| serde_json::from_str::<CallParams<'_>>(p.get()))
            {
                Some(Ok(p)) if p.name == proto::TOOL => {
                    let (n, size) = (p.arguments.n, p.arguments.size);
                    let made = COLD
                        .get()
                        .filter(|_| size == COLD_SIZE && id.parse() == Ok(n))
                        .and_then(|t| t.get(n as usize));
                    if let Some(t) = made {
                        out.extend_from_slice(t);
                    } else {
                        proto::call_result(out, id, p.arguments.n, p.arguments.size)
                    }
                }
                _ => out.extend(proto::error_result(id, -32602, "unknown tool or arguments")),
            }
        }
        m => out.extend(proto::error_result(id, -32601, &format!("no method {m}"))),
    }
    out.push(b'\n');
    method == "initialize"
}
