//! The benchmark's few MCP messages, built as bytes by both the server and the client, so the
//! client knows the exact answer to every request and can check it.

/// The protocol version the bench server speaks.
pub const PROTOCOL: &str = "2025-06-18";

/// The one tool: `echo` answers `{n, size}` with a text result whose whole response line is
/// exactly `size` bytes (at least the envelope's length), its text a function of `n` and `size`.
pub const TOOL: &str = "echo";

/// Filler for result texts: prose, so redaction's entropy rule has nothing to take out.
const FILLER: &[u8] = b"the quick brown fox jumps over the lazy dog; ";

pub fn initialize_request(id: u64) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"{PROTOCOL}","capabilities":{{}},"clientInfo":{{"name":"mcptape-bench-client","version":"1"}}}}}}"#
    )
    .into_bytes()
}

pub fn initialized_notification() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec()
}

/// The server's answer to `initialize`, `id` being the request id's JSON text.
pub fn initialize_result(id: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"{PROTOCOL}","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"mcptape-bench-server","version":"1"}}}}}}"#
    )
    .into_bytes()
}

pub fn tools_list_result(id: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"{TOOL}","description":"Answers with a text of the asked size","inputSchema":{{"type":"object","properties":{{"n":{{"type":"integer"}},"size":{{"type":"integer"}}}},"required":["n","size"]}}}}]}}}}"#
    )
    .into_bytes()
}

pub fn error_result(id: &str, code: i64, message: &str) -> Vec<u8> {
    let message = serde_json::to_string(message).expect("strings serialize");
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#)
        .into_bytes()
}

/// A `tools/call` of `echo` with id `id` (also its `n`), asking for a `size`-byte response line.
pub fn call_request(out: &mut Vec<u8>, id: u64, size: usize) {
    use std::io::Write as _;
    write!(
        out,
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{TOOL}","arguments":{{"n":{id},"size":{size}}}}}}}"#
    )
    .expect("writing to a Vec");
}

const RESULT_HEAD: &[u8] = br#","result":{"content":[{"type":"text","text":""#;
const RESULT_TAIL: &[u8] = br#""}],"isError":false}}"#;

/// Appends the `echo` response line (without newline) for request id text `id`, argument `n`.
pub fn call_result(out: &mut Vec<u8>, id: &str, n: u64, size: usize) {
    let start = out.len();
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(RESULT_HEAD);
    let head = format!("call {n}: ");
    out.extend_from_slice(head.as_bytes());
    // The text depends on `n` and `size` only, never on the id (a checker may renumber ids):
    // the line is exactly `size` bytes when the id's text is `n`'s.
    let id_delta = n.to_string().len() as isize - id.len() as isize;
    let envelope = (out.len() - start) as isize + id_delta + RESULT_TAIL.len() as isize;
    let envelope = envelope.max(0) as usize;
    let fill = size.saturating_sub(envelope);
    let offset = (n as usize) % FILLER.len();
    let mut left = fill;
    let mut first = true;
    while left > 0 {
        let src = if first { &FILLER[offset..] } else { FILLER };
        first = false;
        let take = src.len().min(left);
        out.extend_from_slice(&src[..take]);
        left -= take;
    }
    out.extend_from_slice(RESULT_TAIL);
}

/// The id of a response line, when it is a plain integer.
pub fn response_id(line: &[u8]) -> Option<u64> {
    const PREFIX: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    if let Some(rest) = line.strip_prefix(PREFIX) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && matches!(rest.get(digits), Some(b',')) {
            return std::str::from_utf8(&rest[..digits]).ok()?.parse().ok();
        }
    }
    #[derive(serde::Deserialize)]
    struct Probe {
        id: u64,
    }
    serde_json::from_slice::<Probe>(line).ok().map(|p| p.id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn result_is_exactly_the_asked_size() {
        for size in [0usize, 100, 1024, 8 << 20] {
            let mut out = Vec::new();
            super::call_result(&mut out, "17", 17, size);
            if size >= 200 {
                assert_eq!(out.len(), size);
            }
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["id"], 17);
            assert_eq!(super::response_id(&out), Some(17));
        }
    }
}
