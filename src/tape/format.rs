//! Tape format v1: one JSON object per line, tagged by `type`. Documented in docs/tape-format.md;
//! these are the serialization types. The writer puts `type` first on every line, which lets the
//! reader recognise message lines without a second parse.

use crate::wire::{Dir, Kind};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

pub const FORMAT_NAME: &str = "mcptape";
/// A reader refuses a tape whose major version is newer than this.
pub const VERSION: u32 = 1;
/// Minor versions only add optional fields or line types, which older readers skip.
/// 1: the hash chain (`h` on every line after the header; `head` and `sig` on `end`) and
/// `redacted` on message lines. 2: `http` facts on message lines, and `event` lines.
pub const MINOR: u32 = 2;

/// The label of the only server of a single-server tape.
pub const DEFAULT_SERVER: &str = "default";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub format: String,
    pub version: u32,
    #[serde(default)]
    pub minor: u32,
    /// Wall-clock start of the recording, RFC 3339 with microseconds, UTC.
    pub created: String,
    /// The program and version that wrote the tape.
    pub tool: String,
}

/// Declares one server of the tape and how it was reached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerDecl {
    pub server: String,
    pub transport: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub t_us: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExitInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// The closing line: counts, and how the session ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct End {
    pub t_us: u64,
    pub messages: u64,
    pub exchanges: u64,
    #[serde(default)]
    pub c2s: u64,
    #[serde(default)]
    pub s2c: u64,
    /// Lines that were not JSON-RPC messages (not JSON, invalid, oversize).
    #[serde(default)]
    pub raw: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
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
    pub seq: u64,
    pub t_us: u64,
    #[serde(borrow)]
    pub server: Cow<'a, str>,
    pub dir: Dir,
    pub kind: Kind,
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    /// The message verbatim, for JSON kinds.
    #[serde(borrow, default)]
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
    #[serde(default)]
    pub crlf: bool,
    #[serde(default = "yes")]
    pub eol: bool,
    #[serde(borrow, default)]
    pub problem: Option<Cow<'a, str>>,
    /// HTTP tapes: the transport facts (only what readers use is parsed; boxed, as most
    /// lines have none).
    #[serde(borrow, default)]
    pub http: Option<Box<HttpFacts<'a>>>,
}

/// The part of a message's `http` facts that readers use.
#[derive(Debug, Default, Deserialize)]
pub struct HttpFacts<'a> {
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
    /// The 2026-07-28 routing headers and the protocol version header the request carried.
    #[serde(borrow, default)]
    pub mcp_method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub mcp_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub mcp_params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub mcp_protocol_version: Option<Cow<'a, str>>,
    /// The SSE event's `id:`.
    #[serde(borrow, default)]
    pub event_id: Option<Cow<'a, str>>,
}

impl HttpFacts<'_> {
    /// A hash of the request's routing headers, 0 when it carried none. Play over HTTP
    /// computes the same from a live request (`routing_hash`).
    pub fn routing_headers_hash(&self) -> u64 {
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
pub fn routing_hash(
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
