//! mcp-cassette (PyPI `mcp-cassette`, format versions 1 to 3): one JSON document, as its
//! `cassette.py` writes (`Cassette.save`): `format_version`, `recorded_at`, `transport`
//! (`stdio` | `http`), `server_url`, `server_info`, … and `messages`, each
//! `{seq, t_offset_ms, sender: "client" | "server", kind, method, msg_id, payload, redacted,
//! exchange, channel}` where `payload` is the decoded message, or the line's text for `raw`.

use super::json::{self};
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::{ServerDecl, DEFAULT_SERVER};
use crate::wire::Dir;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::path::Path;

/// The newest format version its writer writes (and this reader reads).
const NEWEST: u64 = 3;

#[derive(Deserialize)]
struct Cassette<'a> {
    format_version: u64,
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    server_url: Option<String>,
    #[serde(borrow)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    t_offset_ms: u64,
    sender: String,
    kind: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(default)]
    redacted: bool,
    #[serde(default)]
    channel: Option<String>,
}

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.doc.as_ref().is_some_and(|d| {
        d.get("format_version").is_some_and(|v| v.is_u64())
            && d.get("recorded_at").is_some()
            && d.get("messages").is_some_and(|m| m.is_array())
    })
}

pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    let c: Cassette<'_> = super::parse_doc(
        path,
        text,
        "an mcp-cassette cassette (format_version, recorded_at, messages[…])",
    )?;
    if c.format_version > NEWEST {
        return Err(malformed(
            path,
            "format_version",
            format!(
                "cassette format version {} is newer than mcptape reads (up to {NEWEST})",
                c.format_version
            ),
        ));
    }
    let mut out = Imported::default();
    let mut redacted = 0;
    let mut on_get = 0;
    for (i, m) in c.messages.iter().enumerate() {
        let dir = match m.sender.as_str() {
            "client" => Dir::C2S,
            "server" => Dir::S2C,
            other => {
                return Err(malformed(
                    path,
                    format!("messages[{i}]"),
                    format!("sender {other:?}; expected \"client\" or \"server\""),
                ))
            }
        };
        let line = if m.kind == "raw" {
            serde_json::from_str::<String>(m.payload.get()).map_err(|_| {
                malformed(
                    path,
                    format!("messages[{i}]"),
                    "a raw message whose payload is not the line's text",
                )
            })?
        } else {
            json::compact(m.payload.get())
        };
        redacted += usize::from(m.redacted);
        on_get += usize::from(m.channel.as_deref() == Some("get"));
        out.msgs.push(Msg {
            server: DEFAULT_SERVER.into(),
            dir,
            t_us: Some(super::ms_to_us(
                path,
                &format!("messages[{i}]"),
                "t_offset_ms",
                m.t_offset_ms,
            )?),
            line,
        });
    }
    let http = c.transport.as_deref() == Some("http");
    out.servers.push(match (&c.server_url, http) {
        (Some(url), true) => ServerDecl::http(DEFAULT_SERVER, url.clone()),
        _ => super::stdio_decl(DEFAULT_SERVER, None),
    });
    out.lacks.push("timing finer than a millisecond (t_offset_ms), the server's command line, its stderr and its exit code".into());
    out.lacks.push("the wire bytes: mcp-cassette stores each message decoded and re-encoded (its key order kept, Python's number and string spelling)".into());
    if http {
        out.lacks.push(format!(
            "the HTTP facts (session ids, SSE event ids, which POST carried what): the messages are imported as one conversation{}",
            if on_get > 0 { format!("; {on_get} came on the GET stream") } else { String::new() }
        ));
    }
    if redacted > 0 {
        out.lacks.push(format!("the values mcp-cassette redacted when it recorded ({redacted} messages): they are its placeholders"));
    }
    if out.msgs.is_empty() {
        out.lacks
            .push("any message: the cassette holds none".into());
    }
    Ok(out)
}
