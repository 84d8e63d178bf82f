//! Tape format v1: one JSON object per line, tagged by `type`. Documented in docs/tape-format.md;
//! these are the serialization types. The writer puts `type` first on every line, which lets the
//! reader recognise message lines without a second parse.

use crate::wire::{Dir, Kind};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The `transport` of a model API's `server` line (the model proxy's calls).
pub const MODEL_API: &str = "model_api";

/// The `format` every tape's header carries; a file whose header says otherwise is not a tape.
pub const FORMAT_NAME: &str = "mcptape";
/// A reader refuses a tape whose major version is newer than this.
pub const VERSION: u32 = 1;
/// Minor versions only add optional fields or line types, which older readers skip.
/// 1: the hash chain (`h` on every line after the header; `head` and `sig` on `end`) and
/// `redacted` on message lines. 2: `http` facts on message lines, and `event` lines. 3:
/// `appended` on message lines (added to a tape by `play --on-miss live`), `append` events.
pub const MINOR: u32 = 4;

/// The label of the only server of a single-server tape.
pub const DEFAULT_SERVER: &str = "default";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
/// The first line of every tape: what it is and which format version wrote it.
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// The format's major version ([`VERSION`] when written by this build).
    pub version: u32,
    /// The format's minor version ([`MINOR`]); 0 on tapes written before minors existed.
    #[serde(default)]
    pub minor: u32,
    /// Wall-clock start of the recording, RFC 3339 with microseconds, UTC.
    pub created: String,
    /// The program and version that wrote the tape.
    pub tool: String,
    /// The id of the user's key the markers' hashes were made with (`$MCPTAPE_REDACT_KEY`);
    /// absent when each tape's key is random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker_key: Option<String>,
}

impl Header {
    /// Whether the tape is hash-chained: from format 1.1 on, every line after the header is.
    pub fn chained(&self) -> bool {
        self.minor >= 1
    }
}

/// Declares one server of the tape and how it was reached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerDecl {
    /// The server's label, which every message line of its conversation repeats
    /// ([`DEFAULT_SERVER`] on a single-server tape).
    pub server: String,
    /// How it was reached: `stdio`, `streamable_http`, or `model_api` (the model proxy).
    pub transport: String,
    /// Stdio: the command line that started it (through the redactor, like the messages). None
    /// over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Stdio: the directory it was started in, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// HTTP: the server's URL (without a password; through the redactor). None over stdio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Microseconds since the recording started.
    pub t_us: u64,
}

/// Why `--server LABEL` names no server of a tape: `asked` is neither declared (`declared`)
/// nor on any of its lines read (`labels`: the labels of its message lines, and where the
/// command takes model calls by label, theirs). None when the tape has it, or no label was
/// asked. What play, show, prune, check and diff refuse such a label with (exit 64):
/// `no server labelled nope; this tape has: a, b`, listing the labels their `--server` takes:
/// the MCP servers ([`mcp_labels`]), and the model APIs too where `model_api` (show, whose
/// model calls are by label); a label the command would refuse is no help there.
pub fn unknown_server(
    asked: Option<&str>,
    declared: &[ServerDecl],
    labels: &[String],
    model_api: bool,
) -> Option<String> {
    let label = asked?;
    if labels.iter().any(|l| l == label) || declared.iter().any(|s| s.server == label) {
        return None;
    }
    let listed = labels_of(declared, labels, model_api);
    let has = if !listed.is_empty() {
        format!("this tape has: {}", listed.join(", "))
    } else if model_api {
        "this tape has no server".to_string()
    } else {
        "this tape has no MCP server".to_string()
    };
    Some(format!("no server labelled {label}; {has}"))
}

/// The labels of a tape's MCP servers, the ones `--server` takes where an MCP server is asked
/// for: those declared (`declared`, a model API left out), then those only its message lines
/// carry (`labels`, in the order met).
pub fn mcp_labels<'a>(declared: &'a [ServerDecl], labels: &'a [String]) -> Vec<&'a str> {
    labels_of(declared, labels, false)
}

/// The servers declared (their model APIs too where `model_api`), then the labels only message
/// lines carry.
fn labels_of<'a>(
    declared: &'a [ServerDecl],
    labels: &'a [String],
    model_api: bool,
) -> Vec<&'a str> {
    let mut listed: Vec<&str> = declared
        .iter()
        .filter(|d| model_api || d.is_mcp())
        .map(|d| d.server.as_str())
        .collect();
    for l in labels {
        if !declared.iter().any(|d| d.server == *l) && !listed.contains(&l.as_str()) {
            listed.push(l);
        }
    }
    listed
}

/// Why `label` is refused where an MCP server is asked for (check, diff, play, prune): it is a
/// model API the tape declares, whose calls are no MCP conversation. `does`: what the command
/// does with the MCP server it takes; `mcp`: the MCP servers it could take instead
/// ([`mcp_labels`]). Also refused: a label the tape does not declare (the default taken when
/// none is asked) on a tape whose only server is a model API. None when `label` is no model
/// API of the tape. `{label} is the model API of an agent run, not an MCP server: {does} (this
/// tape has: a, b)`.
pub fn model_api_refusal(
    label: &str,
    declared: &[ServerDecl],
    mcp: &[&str],
    does: &str,
) -> Option<String> {
    let model_apis: Vec<&str> = declared
        .iter()
        .filter(|d| !d.is_mcp())
        .map(|d| d.server.as_str())
        .collect();
    // No label asked, on a tape of model calls only: the default picked is no server at all.
    if mcp.is_empty() && !model_apis.is_empty() && !declared.iter().any(|d| d.server == label) {
        return Some(format!(
            "this tape has no MCP server, only the model API of an agent run ({}): {does}",
            model_apis.join(", ")
        ));
    }
    if !model_apis.contains(&label) {
        return None;
    }
    let has = if mcp.is_empty() {
        "this tape has no MCP server".to_string()
    } else {
        format!("this tape has: {}", mcp.join(", "))
    };
    Some(format!(
        "{label} is the model API of an agent run, not an MCP server: {does} ({has})"
    ))
}

impl ServerDecl {
    /// An MCP server (stdio or HTTP), not the model API of an agent run.
    pub fn is_mcp(&self) -> bool {
        self.transport != MODEL_API
    }

    /// A stdio server labelled `server`, started with `command`, declared at the start.
    pub fn stdio(server: &str, command: Vec<String>) -> ServerDecl {
        ServerDecl {
            server: server.to_string(),
            transport: "stdio".into(),
            command: Some(command),
            cwd: None,
            url: None,
            t_us: 0,
        }
    }

    /// A model API labelled `server` (the model proxy's upstream at `url`), declared at the
    /// start.
    pub fn model(server: &str, url: String) -> ServerDecl {
        ServerDecl {
            transport: MODEL_API.into(),
            ..ServerDecl::http(server, url)
        }
    }

    /// A Streamable HTTP server labelled `server` at `url`, declared at the start.
    pub fn http(server: &str, url: String) -> ServerDecl {
        ServerDecl {
            server: server.to_string(),
            transport: "streamable_http".into(),
            command: None,
            cwd: None,
            url: Some(url),
            t_us: 0,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
/// How the recorded server process ended.
pub struct ExitInfo {
    /// Its exit status; None when a signal ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The signal that ended it; None when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// The closing line: counts, and how the session ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct End {
    /// Microseconds since the recording started.
    pub t_us: u64,
    /// Message lines written, both directions.
    pub messages: u64,
    /// Requests of the client that the server answered, an answer too large to keep
    /// (`oversize`) among them when its head gives its id (see `open_ids::Exchanges`).
    pub exchanges: u64,
    /// Message lines from client to server.
    #[serde(default)]
    pub c2s: u64,
    /// Message lines from server to client.
    #[serde(default)]
    pub s2c: u64,
    /// Lines that were not JSON-RPC messages (not JSON, invalid, oversize).
    #[serde(default)]
    pub raw: u64,
    /// How the server process ended; None when it was not a process (HTTP) or did not end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    /// Why the recording stopped, in words (for example "the client closed stdin").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set when some messages could not be written (for example the disk filled up).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// The hash chain's head: the `h` of the line before this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// `hmac-sha256:<hex>` of `head`, when the tape was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum OwnedLine<'a> {
    Header(&'a Header),
    Server(&'a ServerDecl),
    End(&'a End),
}

#[derive(Deserialize)]
pub(crate) struct TypeProbe<'a> {
    #[serde(rename = "type", borrow)]
    pub ty: Cow<'a, str>,
}

/// A message line as read back; borrowed from the line buffer.
#[derive(Debug, Deserialize)]
pub struct MsgLine<'a> {
    /// The message's number on the tape, from 1, both directions and all servers counted.
    pub seq: u64,
    /// Microseconds since the recording started.
    pub t_us: u64,
    /// The label of the server whose conversation it belongs to.
    #[serde(borrow)]
    pub server: Cow<'a, str>,
    /// Which way it went.
    pub dir: Dir,
    /// What it is (request, response, notification, or a line that is not a message).
    pub kind: Kind,
    /// The JSON-RPC id as it was written; None when the message has none.
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    /// The JSON-RPC method, for requests and notifications.
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    /// The message verbatim, for JSON kinds (`null` too: a line that said `null`).
    #[serde(borrow, default, deserialize_with = "raw_body")]
    pub msg: Option<&'a RawValue>,
    /// A non-JSON line that is valid UTF-8, as a string.
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
    /// A non-JSON line that is not UTF-8, base64.
    #[serde(borrow, default)]
    pub b64: Option<Cow<'a, str>>,
    /// Oversize lines: full length in bytes (`b64` holds the head).
    #[serde(default)]
    pub len: Option<u64>,
    /// The line ended in `\r\n` rather than `\n`.
    #[serde(default)]
    pub crlf: bool,
    /// The line had a terminator; false for a last line cut off without one.
    #[serde(default = "yes")]
    pub eol: bool,
    /// Why the message is `not_json` or `invalid`, in words.
    #[serde(borrow, default)]
    pub problem: Option<Cow<'a, str>>,
    /// HTTP tapes: the transport facts (only what readers use is parsed; boxed, as most
    /// lines have none).
    #[serde(borrow, default)]
    pub http: Option<Box<HttpFacts<'a>>>,
    /// Added to the tape after its recording, by `play --on-miss live` (format 1.3).
    #[serde(default)]
    pub appended: bool,
}

/// The part of a message's `http` facts that readers use.
#[derive(Debug, Default, Deserialize)]
pub struct HttpFacts<'a> {
    /// The `Content-Type` of the HTTP message that carried it.
    #[serde(borrow, default)]
    pub content_type: Option<Cow<'a, str>>,
    /// The id of the request whose POST carried this message or whose answer stream it came on.
    #[serde(borrow, default)]
    pub request_id: Option<&'a RawValue>,
    /// `post` or `get`: which stream a server message came on.
    #[serde(borrow, default)]
    pub stream: Option<Cow<'a, str>>,
    /// The `Mcp-Session-Id` the client sent with the POST (or GET) that carried the message:
    /// the session the message belongs to (redacted on the tape, one marker per session).
    #[serde(borrow, default)]
    pub mcp_session_id: Option<Cow<'a, str>>,
    /// The `Mcp-Session-Id` the server answered with (set by `initialize`'s answer).
    #[serde(borrow, default)]
    pub session: Option<Cow<'a, str>>,
    /// The HTTP status of the answer.
    #[serde(default)]
    pub status: Option<u16>,
    /// The number of the POST that carried the request, or whose answer carried the message:
    /// unique on the tape, so an answer pairs with its own request even where ids repeat.
    #[serde(default)]
    pub post: Option<u64>,
    /// The 2026-07-28 routing headers and the protocol version header the request carried, this
    /// field and the next three: `Mcp-Method`.
    #[serde(borrow, default)]
    pub mcp_method: Option<Cow<'a, str>>,
    /// `Mcp-Name`.
    #[serde(borrow, default)]
    pub mcp_name: Option<Cow<'a, str>>,
    /// The `Mcp-Param-*` headers, as a JSON object from lower-case name (without the prefix)
    /// to value.
    #[serde(borrow, default)]
    pub mcp_params: Option<&'a RawValue>,
    /// `MCP-Protocol-Version`.
    #[serde(borrow, default)]
    pub mcp_protocol_version: Option<Cow<'a, str>>,
    /// The SSE event's `id:`.
    #[serde(borrow, default)]
    pub event_id: Option<Cow<'a, str>>,
    /// The SSE event's `event:` name, when the server gave one (an rmcp server gives none).
    #[serde(borrow, default)]
    pub event: Option<Cow<'a, str>>,
}

impl HttpFacts<'_> {
    /// A hash of the request's routing headers, 0 when it carried none. Play over HTTP
    /// computes the same from a live request (`routing_hash`).
    pub(crate) fn routing_headers_hash(&self) -> u64 {
        let params = self
            .mcp_params
            .and_then(|p| {
                serde_json::from_str::<std::collections::BTreeMap<String, String>>(p.get()).ok()
            })
            .unwrap_or_default();
        routing_hash(
            self.mcp_method.as_deref(),
            self.mcp_name.as_deref(),
            &params,
            self.mcp_protocol_version.as_deref(),
        )
    }
}

/// A hash of routing headers (names of `Mcp-Param-*` lower-case, without the prefix); 0 when
/// there are none.
pub(crate) fn routing_hash(
    method: Option<&str>,
    name: Option<&str>,
    params: &std::collections::BTreeMap<String, String>,
    version: Option<&str>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    if method.is_none() && name.is_none() && params.is_empty() && version.is_none() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (method, name, params, version).hash(&mut h);
    h.finish() | 1
}

fn yes() -> bool {
    true
}

/// A `msg` body as its raw text, whatever JSON it is. A plain `Option` would read `"msg":null`
/// (a peer that printed `null`) as no body at all, and the line as unreadable.
pub(crate) fn raw_body<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&'de RawValue>::deserialize(d).map(Some)
}

impl MsgLine<'_> {
    /// Every message line has a body: `msg`, `text`, `b64`, or an oversize line's length.
    /// Checked where a line is parsed, so that every reader refuses a bodiless line alike.
    pub(crate) fn check_body(&self) -> Result<(), String> {
        if self.msg.is_some()
            || self.text.is_some()
            || self.b64.is_some()
            || self.kind == Kind::Oversize
        {
            Ok(())
        } else {
            Err(format!(
                "{} message has no body (msg, text or b64)",
                self.kind
            ))
        }
    }
}
