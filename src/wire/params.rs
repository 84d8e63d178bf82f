//! What a request is: its params as a value, what it is about (a tool, a prompt, a resource),
//! its progress token, and its match key — the hash of method and canonical params that play,
//! check and diff pair requests by.

use super::canonical::{canonical, hash_key, match_params};
use serde_json::Value;

/// A 128-bit hash of a request's method and match params: equal keys are taken as equal
/// requests (a collision is as likely as two random UUIDs being equal), so matching needs no
/// re-reading of the tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MatchKey(u64, u64);

impl MatchKey {
    /// The key made of its two 64-bit halves.
    pub(crate) fn from_halves(a: u64, b: u64) -> MatchKey {
        MatchKey(a, b)
    }
}

/// The match key of a request. `initialize` is matched leniently: who the client is and which
/// protocol version it asks for are not drift, so its params take no part.
pub(crate) fn match_key(method: &str, params: Option<&Value>) -> (MatchKey, Value) {
    let params = if method == "initialize" {
        Value::Null
    } else {
        match_params(params)
    };
    let text = canonical(&params);
    (hash_key(method, &text), params)
}

#[derive(serde::Deserialize)]
struct ReqProbe {
    #[serde(default)]
    params: Option<Value>,
}

/// A message's params as a value. Params too deep for a `Value` (over serde_json's nesting limit)
/// stand in as their exact text, so such a request still matches itself byte for byte.
pub(crate) fn params_of(message: &[u8]) -> Option<Value> {
    match super::exact::from_slice::<ReqProbe>(message) {
        Ok(p) => p.params,
        Err(_) => {
            let obj: super::rewrite::RawObject<'_> = serde_json::from_slice(message).ok()?;
            Some(Value::String(format!(
                "(unparsed params) {}",
                obj.get("params")?.get()
            )))
        }
    }
}

/// [`params_of`], and the params' exact text (`None` inside: the message has none), in one
/// parse: the index keys a request by both (see [`raw_key`]).
pub(crate) fn params_with_raw(message: &[u8]) -> (Option<Value>, Option<Option<&str>>) {
    #[derive(serde::Deserialize)]
    struct RawProbe<'a> {
        #[serde(borrow, default)]
        params: Option<&'a serde_json::value::RawValue>,
    }
    let Ok(p) = serde_json::from_slice::<RawProbe<'_>>(message) else {
        return (params_of(message), None);
    };
    let raw = p.params.map(|r| r.get());
    match raw.map(super::exact::from_str::<Value>) {
        None => (None, Some(None)),
        Some(Ok(v)) => (Some(v), Some(raw)),
        // Too deep for a `Value`: as `params_of` gives it.
        Some(Err(_)) => (params_of(message), Some(raw)),
    }
}

/// The key of a request by its method and its params' exact bytes: play looks a client's
/// request up by it before building and canonicalizing its params (the same bytes give the same
/// canonical params, so the same match key). Absent params hash as the empty text, which no
/// params' JSON text is.
pub(crate) fn raw_key(method: &str, raw_params: Option<&str>) -> MatchKey {
    super::canonical::hash_key(method, raw_params.unwrap_or(""))
}

/// Which param names what a request is about.
pub(crate) fn target_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        _ => None,
    }
}

/// The tool, prompt or resource a request with these params is about (see `call_target`).
pub(crate) fn target_of(method: Option<&str>, params: Option<&Value>) -> Option<String> {
    let key = target_key(method?)?;
    params?.get(key)?.as_str().map(str::to_string)
}

/// The progress token of the client request `message` as the client wrote it: the exact text of
/// its `params._meta.progressToken`, which play puts on the recorded progress notifications. The
/// canonical text of a parsed value is no substitute: an integer beyond 64 bits is parsed into a
/// stand-in (`wire::exact`), and escapes are re-spelled. Falls back to [`progress_token`] of
/// `params` where the text cannot be followed (a duplicated key).
pub(crate) fn request_progress_token(message: &[u8], params: Option<&Value>) -> Option<String> {
    use super::rewrite::member_span;
    let exact = std::str::from_utf8(message).ok().and_then(|text| {
        let (ps, pe) = member_span(text, "params")?;
        let params = &text[ps..pe];
        let (ms, me) = member_span(params, "_meta")?;
        let meta = &params[ms..me];
        let (ts, te) = member_span(meta, "progressToken")?;
        Some(meta[ts..te].to_string())
    });
    exact.or_else(|| progress_token(params, true))
}

/// A progress token, canonical JSON text: the request's `_meta.progressToken` (`in_meta`), or a
/// progress notification's `progressToken`.
pub(crate) fn progress_token(params: Option<&Value>, in_meta: bool) -> Option<String> {
    let p = params?;
    let t = if in_meta {
        p.get("_meta")?.get("progressToken")?
    } else {
        p.get("progressToken")?
    };
    Some(canonical(t))
}
