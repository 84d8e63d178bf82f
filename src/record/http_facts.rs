//! What `record --url` tapes of an HTTP exchange beside each message: the request's method,
//! path and MCP headers, the POST's number, the answer's status and content type. Kept as
//! fields, not a JSON map: building a map of owned keys and values for every message, then
//! walking it to write the line, cost more than the rest of taping a small message but the
//! hash. `HttpFacts::to_map` gives the map the tape line holds (events, SSE streams and
//! the rare facts take that path); [`LineFacts::write_direct`] writes the same bytes without
//! it.

use crate::redact::{FactsCache, Redactor};
use crate::tape::writer::{LineFacts, FACTS_KEPT, FACTS_SECRET};
use crate::wire::json_out::push_str;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::Method;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// Request headers recorded as facts, with their fact names. Everything else is forwarded but
/// not taped. Header names are built once here: a lookup by `&str` would parse the name anew.
static RECORDED_HEADERS: [(HeaderName, &str); 7] = [
    (HeaderName::from_static("mcp-session-id"), "mcp_session_id"),
    (
        HeaderName::from_static("mcp-protocol-version"),
        "mcp_protocol_version",
    ),
    (HeaderName::from_static("mcp-method"), "mcp_method"),
    (HeaderName::from_static("mcp-name"), "mcp_name"),
    (HeaderName::from_static("last-event-id"), "last_event_id"),
    (HeaderName::from_static("content-type"), "content_type"),
    (HeaderName::from_static("accept"), "accept"),
];

/// Places in [`HttpFacts::headers`] (the order of [`RECORDED_HEADERS`]).
const SESSION_ID: usize = 0;
const PROTOCOL: usize = 1;
const MCP_METHOD: usize = 2;
const MCP_NAME: usize = 3;
const LAST_EVENT_ID: usize = 4;
const CONTENT_TYPE: usize = 5;
const ACCEPT: usize = 6;

/// `name` without `prefix`, compared without regard to case.
fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

/// The HTTP facts of one message.
#[derive(Debug, Clone)]
pub struct HttpFacts {
    method: Method,
    path: String,
    /// The recorded request headers whose values are visible ASCII (others are not taped).
    headers: [Option<HeaderValue>; 7],
    /// The 2026-07-28 era's `Mcp-Param-<Name>` headers (params mirrored for routing).
    params: Option<Map<String, Value>>,
    /// The POST's number in this recording.
    pub post: Option<u64>,
    /// The id of the request the POST carried.
    pub request_id: Option<Value>,
    /// The answer's status.
    pub status: Option<u16>,
    /// The session id the answer handed out.
    pub session: Option<String>,
    /// The answer's content type (lower case), in place of the request's.
    pub content_type: Option<String>,
    /// What a refusal says it would take (`405` with `Allow: POST`).
    pub allow: Option<String>,
    /// Which stream an SSE answer is: `get` or `post`.
    pub stream: Option<&'static str>,
}

impl HttpFacts {
    /// The facts of a request's head.
    pub(crate) fn request(method: &Method, headers: &HeaderMap, path: &str) -> HttpFacts {
        // One pass over the headers (a server's head holds a handful): looking up each of the
        // seven names would hash it and probe the map seven times.
        HttpFacts::from_pairs(
            method.clone(),
            path,
            headers.iter().map(|(k, v)| (k.as_str(), Cow::Borrowed(v))),
        )
    }

    /// The facts of a request's head given as name and value pairs (names in any case), as a
    /// parser that builds no header map gives them: the bench's floor tapes with this what
    /// `record --url` tapes. `None` for a method or a header value HTTP does not allow.
    pub fn of_head<'a>(
        method: &str,
        path: &str,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Option<HttpFacts> {
        let method = Method::from_bytes(method.as_bytes()).ok()?;
        let mut pairs = Vec::new();
        for (name, value) in headers {
            pairs.push((name, Cow::Owned(HeaderValue::from_bytes(value).ok()?)));
        }
        Some(HttpFacts::from_pairs(method, path, pairs.into_iter()))
    }

    fn from_pairs<'a>(
        method: Method,
        path: &str,
        pairs: impl Iterator<Item = (&'a str, Cow<'a, HeaderValue>)>,
    ) -> HttpFacts {
        let mut headers: [Option<HeaderValue>; 7] = Default::default();
        // A header given twice counts by its first value, as `HeaderMap::get` takes it.
        let mut seen = [false; 7];
        let mut params = Map::new();
        for (name, value) in pairs {
            let slot = RECORDED_HEADERS
                .iter()
                .position(|(h, _)| h.as_str().eq_ignore_ascii_case(name));
            if let Some(i) = slot {
                if !std::mem::replace(&mut seen[i], true) && value.to_str().is_ok() {
                    headers[i] = Some(value.into_owned());
                }
            } else if let Some(param) = strip_prefix_ignore_case(name, "mcp-param-") {
                if let Ok(v) = value.to_str() {
                    params.insert(param.to_ascii_lowercase(), json!(v));
                }
            }
        }
        HttpFacts {
            method,
            path: path.to_string(),
            headers,
            params: (!params.is_empty()).then_some(params),
            post: None,
            request_id: None,
            status: None,
            session: None,
            content_type: None,
            allow: None,
            stream: None,
        }
    }

    fn header(&self, i: usize) -> Option<&str> {
        self.headers[i].as_ref().and_then(|v| v.to_str().ok())
    }

    fn content_type(&self) -> Option<&str> {
        self.content_type
            .as_deref()
            .or_else(|| self.header(CONTENT_TYPE))
    }

    /// The facts as the map the tape line holds.
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut f = Map::new();
        f.insert("method".into(), json!(self.method.as_str()));
        f.insert("path".into(), json!(self.path));
        for (i, (_, fact)) in RECORDED_HEADERS.iter().enumerate() {
            if let Some(v) = self.header(i) {
                f.insert((*fact).into(), json!(v));
            }
        }
        if let Some(params) = &self.params {
            f.insert("mcp_params".into(), Value::Object(params.clone()));
        }
        if let Some(n) = self.post {
            f.insert("post".into(), json!(n));
        }
        if let Some(id) = &self.request_id {
            f.insert("request_id".into(), id.clone());
        }
        if let Some(s) = self.status {
            f.insert("status".into(), json!(s));
        }
        if let Some(s) = &self.session {
            f.insert("session".into(), json!(s));
        }
        if let Some(ct) = &self.content_type {
            f.insert("content_type".into(), json!(ct));
        }
        if let Some(a) = &self.allow {
            f.insert("allow".into(), json!(a));
        }
        if let Some(s) = self.stream {
            f.insert("stream".into(), json!(s));
        }
        f
    }
}

impl LineFacts for HttpFacts {
    fn to_value(&self) -> Cow<'_, Value> {
        Cow::Owned(Value::Object(self.to_map()))
    }

    /// The map's keys in its (sorted) order, each fact as the walk would leave it: the kept
    /// ones as they are, the session ids as their markers. Facts the walk decides by their
    /// contents (`mcp_name`, `last_event_id`, `Mcp-Param-*`, an id that is not a scalar), or
    /// rules that could touch a fact's name, take the general path.
    fn write_direct(
        &self,
        redactor: Option<&Redactor>,
        cache: &mut FactsCache,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.headers[MCP_NAME].is_some()
            || self.headers[LAST_EVENT_ID].is_some()
            || self.params.is_some()
            || matches!(self.request_id, Some(Value::Array(_) | Value::Object(_)))
        {
            return false;
        }
        if let Some(r) = redactor {
            if !r.facts_direct_ok(FACTS_KEPT, FACTS_SECRET, cache) {
                return false;
            }
        }
        let mut sep = b'{';
        let mut key = |out: &mut Vec<u8>, key: &[u8]| {
            out.push(sep);
            sep = b',';
            out.extend_from_slice(key);
        };
        let mut secret = |out: &mut Vec<u8>, value: &str| match redactor {
            Some(r) => r.write_secret_fact(value, cache, out),
            None => push_str(out, value),
        };
        let number = |out: &mut Vec<u8>, n: u64| {
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        };
        if let Some(v) = self.header(ACCEPT) {
            key(out, b"\"accept\":");
            push_str(out, v);
        }
        if let Some(v) = &self.allow {
            key(out, b"\"allow\":");
            push_str(out, v);
        }
        if let Some(v) = self.content_type() {
            key(out, b"\"content_type\":");
            push_str(out, v);
        }
        if let Some(v) = self.header(MCP_METHOD) {
            key(out, b"\"mcp_method\":");
            push_str(out, v);
        }
        if let Some(v) = self.header(PROTOCOL) {
            key(out, b"\"mcp_protocol_version\":");
            push_str(out, v);
        }
        if let Some(v) = self.header(SESSION_ID) {
            key(out, b"\"mcp_session_id\":");
            secret(out, v);
        }
        key(out, b"\"method\":");
        push_str(out, self.method.as_str());
        key(out, b"\"path\":");
        push_str(out, &self.path);
        if let Some(n) = self.post {
            key(out, b"\"post\":");
            number(out, n);
        }
        if let Some(id) = &self.request_id {
            key(out, b"\"request_id\":");
            serde_json::to_writer(&mut *out, id).expect("a Value serializes");
        }
        if let Some(s) = &self.session {
            key(out, b"\"session\":");
            secret(out, s);
        }
        if let Some(s) = self.status {
            key(out, b"\"status\":");
            number(out, u64::from(s));
        }
        if let Some(s) = self.stream {
            key(out, b"\"stream\":");
            push_str(out, s);
        }
        out.push(b'}');
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{TapeWriter, WriteOptions};
    use crate::wire::{Dir, Frame};

    /// The names `write_direct` writes as kept and as secret are the writer's.
    #[test]
    fn the_direct_names_are_the_writers() {
        for kept in [
            "accept",
            "allow",
            "content_type",
            "mcp_method",
            "mcp_protocol_version",
            "method",
            "path",
            "post",
            "request_id",
            "status",
            "stream",
        ] {
            assert!(FACTS_KEPT.contains(&kept), "{kept}");
        }
        for secret in ["mcp_session_id", "session"] {
            assert!(FACTS_SECRET.contains(&secret), "{secret}");
        }
        for walked in ["mcp_name", "last_event_id", "mcp_params"] {
            assert!(!FACTS_KEPT.contains(&walked) && !FACTS_SECRET.contains(&walked));
        }
    }

    fn head(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    /// Facts of every shape `record --url` makes, in sessions of repeated and changing ids.
    fn cases() -> Vec<HttpFacts> {
        let full: &[(&str, &[u8])] = &[
            ("content-type", b"application/json"),
            ("accept", b"application/json, text/event-stream"),
            ("mcp-protocol-version", b"2025-06-18"),
            ("mcp-session-id", b"bench-session-1"),
            ("authorization", b"Bearer sk-live-0a1b2c3d4e5f6a7b8c9d"),
        ];
        let heads: Vec<HeaderMap> = vec![
            head(&[]),
            head(full),
            head(&full[..3]),
            head(&[("mcp-session-id", b"sk-live-0a1b2c3d4e5f6a7b8c9d")]),
            head(&[("mcp-session-id", b"[REDACTED:key:session-id:0badf00d]")]),
            head(&[("mcp-session-id", b"")]),
            head(&[
                ("mcp-session-id", b"tab\there"),
                ("accept", b"a \"quoted\" one"),
            ]),
            head(&[("mcp-session-id", "s\u{e9}ss".as_bytes())]),
            head(&[
                ("mcp-method", b"tools/call"),
                ("mcp-session-id", b"bench-session-1"),
            ]),
            head(&[("mcp-name", b"ghp_0123456789abcdefghijklmnopqrstuvwxyzAB")]),
            head(&[
                ("last-event-id", b"e-1"),
                ("mcp-session-id", b"bench-session-1"),
            ]),
            head(&[
                ("mcp-param-token", b"abc"),
                ("content-type", b"application/json"),
            ]),
        ];
        let mut out = Vec::new();
        for (i, h) in heads.iter().enumerate() {
            for method in [Method::POST, Method::GET, Method::DELETE] {
                let request = HttpFacts::request(&method, h, "/mcp?x=\"1\"");
                out.push(request.clone());
                let mut f = request.clone();
                f.post = Some(i as u64 + 1);
                f.request_id = Some(match i % 4 {
                    0 => json!(i),
                    1 => json!("a\"b"),
                    2 => json!([[1]]),
                    _ => json!(null),
                });
                out.push(f.clone());
                f.status = Some(200);
                f.content_type = Some("text/event-stream".into());
                f.stream = Some("post");
                out.push(f.clone());
                f.session =
                    Some(["bench-session-1", "", "sk-live-0a1b2c3d4e5f6a7b8c9d"][i % 3].into());
                f.allow = Some("POST".into());
                f.status = Some(405);
                f.stream = None;
                out.push(f);
            }
        }
        out
    }

    /// A head given as pairs (names in any case, as a parser gives them) has the facts the same
    /// head has as a header map; a header given twice counts by its first value, and one whose
    /// first value is not visible ASCII is left out, as `HeaderMap::get` would have it.
    #[test]
    fn a_head_as_pairs_has_the_facts_of_the_head_as_a_map() {
        let pairs: &[(&str, &[u8])] = &[
            ("Content-Type", b"application/json"),
            ("ACCEPT", b"application/json, text/event-stream"),
            ("Mcp-Session-Id", b"s\xe9ss"),
            ("mcp-session-id", b"second"),
            ("Mcp-Protocol-Version", b"2025-06-18"),
            ("Mcp-Protocol-Version", b"2024-11-05"),
            ("MCP-Param-Region", b"eu"),
            ("mcp-param-region", b"us"),
            ("Mcp-Param-Limit", b"10"),
            ("Authorization", b"Bearer sk-live-0a1b2c3d4e5f6a7b8c9d"),
        ];
        let lower: Vec<(String, &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), *v))
            .collect();
        let lower: Vec<(&str, &[u8])> = lower.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let from_map = HttpFacts::request(&Method::POST, &head(&lower), "/mcp").to_map();
        let from_pairs = HttpFacts::of_head("POST", "/mcp", pairs.iter().copied())
            .unwrap()
            .to_map();
        assert_eq!(from_pairs, from_map);
        assert_eq!(
            Value::Object(from_map),
            json!({
                "method": "POST",
                "path": "/mcp",
                "content_type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp_protocol_version": "2025-06-18",
                "mcp_params": {"region": "us", "limit": "10"},
            })
        );
        assert!(HttpFacts::of_head("P OST", "/mcp", []).is_none());
        assert!(HttpFacts::of_head("POST", "/mcp", [("accept", &b"a\nb"[..])]).is_none());
    }

    /// A tape written with the facts as fields is byte for byte the tape written with their
    /// map, with redaction off, with the built-in rules, and with a rule that matches a
    /// fact's name (the direct path must step aside for that one).
    #[test]
    fn facts_as_fields_give_the_tape_their_map_gives() {
        let cases = cases();
        let dir = tempfile::tempdir().unwrap();
        let mut user = crate::redact::RedactConfig::defaults();
        user.add_rule("re:session_i");
        let redactors = [
            ("off", None),
            (
                "defaults",
                Some(Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap()),
            ),
            ("user rule", Some(Redactor::new(&user).unwrap())),
        ];
        for (name, r) in redactors {
            let opts = WriteOptions {
                redactor: r.map(std::sync::Arc::new),
                signing_key: None,
            };
            // `walked`: every line's facts through the walk, the truth both fast paths keep to.
            let tape = |as_map: bool, walked: bool| {
                let path = dir.path().join(format!("{name}-{as_map}-{walked}.jsonl"));
                let mut w = TapeWriter::create(&path, opts.clone()).unwrap();
                w.facts_uncached = walked;
                for (i, f) in cases.iter().enumerate() {
                    let msg = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#);
                    let map = Value::Object(f.to_map());
                    let facts: &dyn LineFacts = if as_map { &map } else { f };
                    let at = std::time::Instant::now();
                    w.message_with(
                        "s",
                        Dir::S2C,
                        &Frame::whole(msg.as_bytes()),
                        at,
                        Some(facts),
                    );
                }
                w.commit().unwrap();
                std::fs::read_to_string(&path).unwrap()
            };
            let (fields, map, walked) = (tape(false, false), tape(true, false), tape(true, true));
            // Times differ between the two tapes; everything else must not.
            let strip = |t: &str| -> Vec<String> {
                t.lines()
                    .filter(|l| l.contains("\"type\":\"msg\""))
                    .map(|l| {
                        let v: Value = serde_json::from_str(l).unwrap();
                        let mut v = v.as_object().unwrap().clone();
                        v.remove("t_us");
                        v.remove("h");
                        serde_json::to_string(&v).unwrap()
                    })
                    .collect()
            };
            let (a, b) = (strip(&fields), strip(&map));
            assert_eq!(a.len(), cases.len());
            assert_eq!(a, b, "{name}");
            // And the raw `http` text, not only its parse.
            let http = |t: &str| -> Vec<String> {
                t.lines()
                    .filter_map(|l| {
                        let (_, h) = l.split_once(",\"http\":")?;
                        Some(h.rsplit_once(",\"h\":")?.0.to_string())
                    })
                    .collect()
            };
            assert_eq!(http(&fields), http(&map), "{name}");
            assert_eq!(http(&fields), http(&walked), "{name}: the walk");
            if name != "off" {
                assert!(
                    !http(&fields).iter().any(|h| h.contains("bench-session-1")),
                    "{name}"
                );
            }
            // The direct path was taken for the usual facts and stepped aside for the rest.
            let mut cache = FactsCache::default();
            let direct = cases
                .iter()
                .filter(|f| f.write_direct(opts.redactor.as_deref(), &mut cache, &mut Vec::new()))
                .count();
            match name {
                "user rule" => assert_eq!(direct, 0),
                _ => assert!(
                    direct > cases.len() / 2 && direct < cases.len(),
                    "{name}: {direct}"
                ),
            }
        }
    }
}
