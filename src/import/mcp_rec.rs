//! mcp-rec (PyPI `mcp-rec`): JSON Lines, one line per wire line, as its `recorder.py` writes:
//! `{"ts": <Unix time, float seconds>, "dir": "client->server" | "server->client", "msg": …}`,
//! where `msg` is the parsed message, or `{"_raw": <text>, "_unparsed": true}` for a line that
//! was not JSON.

use super::json::{self, Members};
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::DEFAULT_SERVER;
use crate::wire::Dir;
use std::path::Path;

const C2S: &str = "client->server";
const S2C: &str = "server->client";

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.first.as_ref().is_some_and(|v| {
        v.get("ts").is_some_and(|t| t.is_number())
            && v.get("msg").is_some()
            && v.get("dir")
                .and_then(|d| d.as_str())
                .is_some_and(|d| d == C2S || d == S2C)
    })
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let mut out = Imported::default();
    let mut start: Option<f64> = None;
    let lines: Vec<&str> = text.split('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let m: Members<'_> = match serde_json::from_str(line) {
            Ok(m) => m,
            // mcp-rec flushes line by line: a crash can leave the last line cut off.
            Err(_) if i + 1 == lines.len() => {
                out.lacks.push(format!(
                    "its last line: line {n} is cut off (the recording ended mid-line); read up to line {}",
                    n - 1
                ));
                break;
            }
            Err(e) => {
                return Err(malformed(
                    path,
                    format!("line {n}"),
                    format!(
                        "{}; mcp-rec writes {{\"ts\", \"dir\", \"msg\"}} objects, one a line",
                        json::what(&e)
                    ),
                ))
            }
        };
        let field = |k: &str| {
            m.get(k).ok_or_else(|| {
                malformed(path, format!("line {n}"), format!("no \"{k}\" field; mcp-rec writes {{\"ts\", \"dir\", \"msg\"}} on every line"))
            })
        };
        let ts: f64 = serde_json::from_str(field("ts")?.get()).map_err(|_| {
            malformed(
                path,
                format!("line {n}"),
                "\"ts\" is not a number (Unix time in seconds)",
            )
        })?;
        let dir = match serde_json::from_str::<String>(field("dir")?.get()).as_deref() {
            Ok(C2S) => Dir::C2S,
            Ok(S2C) => Dir::S2C,
            _ => {
                return Err(malformed(
                    path,
                    format!("line {n}"),
                    format!(
                        "\"dir\" is {}; expected \"{C2S}\" or \"{S2C}\"",
                        field("dir")?.get()
                    ),
                ))
            }
        };
        let body = field("msg")?;
        // Unix time in seconds, 1970 to 9999: anything else is no clock's.
        if !(0.0..=253_402_300_799.0).contains(&ts) {
            return Err(malformed(
                path,
                format!("line {n}"),
                format!("\"ts\" {ts} is not a Unix time in seconds (1970 to 9999)"),
            ));
        }
        let t0 = *start.get_or_insert(ts);
        // Earlier than the first line: at the start (times only go forward on a tape).
        let since = (ts - t0).max(0.0);
        if since * 1e6 > super::MAX_T_US as f64 {
            return Err(super::out_of_range(
                path,
                format!("line {n}"),
                format!("\"ts\" {ts}, {since} s after the first line,"),
            ));
        }
        let t_us = (since * 1e6).round() as u64;
        let line = match serde_json::from_str::<Members<'_>>(body.get()) {
            Ok(obj) if obj.get("_unparsed").is_some_and(|u| u.get() == "true") => {
                // A line that was not JSON: mcp-rec kept its text (stripped of whitespace).
                let raw = obj
                    .get("_raw")
                    .map(|r| serde_json::from_str::<String>(r.get()));
                match raw {
                    Some(Ok(text)) => text,
                    _ => {
                        return Err(malformed(
                            path,
                            format!("line {n}"),
                            "an \"_unparsed\" message without its \"_raw\" text",
                        ))
                    }
                }
            }
            _ => json::compact(body.get()),
        };
        out.msgs.push(Msg {
            server: DEFAULT_SERVER.into(),
            dir,
            t_us: Some(t_us),
            line,
        });
    }
    if out.msgs.is_empty() {
        return Err(malformed(
            path,
            "the whole file",
            "no messages; an mcp-rec recording has one line per message",
        ));
    }
    // mcp-rec does not write the server's command: the declaration says only the transport.
    out.servers.push(super::stdio_decl(DEFAULT_SERVER, None));
    out.lacks.extend([
        "the wire bytes: mcp-rec re-serializes each message with Python's json.dumps (its spacing, \\u escapes for non-ASCII), so the messages are that text, not what crossed the wire".to_string(),
        "the server's command line, its stderr and its exit code: mcp-rec does not record them".to_string(),
        "blank lines, and the whitespace around lines that were not JSON (mcp-rec strips it); bytes that were not UTF-8 were replaced by U+FFFD".to_string(),
    ]);
    Ok(out)
}
