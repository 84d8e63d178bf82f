//! An HTTP request as the listeners see it: arbitrary bytes made into a request head (method,
//! target, headers; what the `http` builders refuse is skipped, as hyper would refuse it) and a
//! body, then everything mcptape does with a request before and while proxying it: the
//! Host/Origin check, the facts `record --url` tapes (raw and redacted), the routing-header hash
//! play computes against the one the tape gives, the upstream URIs, the model route, the body's
//! classification, the hop-by-hop headers taken out.
//!
//! Input: two bytes of the listener's port (big-endian), then the head (`METHOD TARGET`, then
//! `Name: value` lines), a blank line, the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::fuzz_api::http::{self, header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use mcptape::fuzz_api::{self as api};
use mcptape::redact::{RedactConfig, Redactor};
use std::sync::OnceLock;

fn redactor() -> &'static Redactor {
    static R: OnceLock<Redactor> = OnceLock::new();
    R.get_or_init(|| Redactor::new(&RedactConfig::defaults()).expect("default rules"))
}

/// The request in `head`, or `None` where the builders (and so hyper) would refuse it.
fn request(head: &[u8]) -> Option<http::Request<()>> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next()?;
    let mut words = first.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let method = Method::from_bytes(words.next()?).ok()?;
    let uri = Uri::try_from(words.next().unwrap_or(b"/")).ok()?;
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        headers.append(name, value);
    }
    let mut req = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .ok()?;
    *req.headers_mut() = headers;
    Some(req)
}

/// `req` with its Host and Origin replaced (`None`: left out) and its target in origin form.
fn with(
    req: &http::Request<()>,
    host: Option<&str>,
    origin: Option<&str>,
    keep_target: bool,
) -> http::Request<()> {
    let mut r = http::Request::new(());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = if keep_target {
        req.uri().clone()
    } else {
        req.uri()
            .path_and_query()
            .and_then(|pq| Uri::try_from(pq.as_str()).ok())
            .unwrap_or_else(|| Uri::from_static("/"))
    };
    *r.headers_mut() = req.headers().clone();
    let h = r.headers_mut();
    h.remove(header::HOST);
    h.remove(header::ORIGIN);
    if let Some(host) = host {
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
    }
    if let Some(origin) = origin {
        h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
    }
    r
}

fuzz_target!(|data: &[u8]| {
    let [p0, p1, rest @ ..] = data else { return };
    let port = u16::from_be_bytes([*p0, *p1]);
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest, &[][..]),
    };
    let Some(req) = request(head) else { return };

    // ---- The Host/Origin check.
    let refused = api::refuse_foreign(&req, port);
    if let Some(why) = &refused {
        assert!(why.starts_with("mcptape: "), "{why}");
    }
    // A loopback Host with the listener's port, no Origin, an origin-form target: always served,
    // whatever else the request carries; no Host at all (HTTP/1.0) too.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("LocalHost:{port}"),
        "127.0.0.1".to_string(),
    ] {
        let r = with(&req, Some(&host), None, false);
        assert_eq!(api::refuse_foreign(&r, port), None, "Host {host} refused");
        // A loopback Origin on any port is this machine: served too.
        let r = with(&req, Some(&host), Some("http://localhost:5173"), false);
        assert_eq!(
            api::refuse_foreign(&r, port),
            None,
            "loopback Origin with Host {host}"
        );
    }
    assert_eq!(
        api::refuse_foreign(&with(&req, None, None, false), port),
        None,
        "no Host"
    );
    // A foreign Origin or Host is refused whatever else the request carries.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    for origin in [
        "http://evil.example",
        "null",
        "https://127.0.0.1.evil.example",
    ] {
        let r = with(&req, host.as_deref(), Some(origin), true);
        assert!(
            api::refuse_foreign(&r, port).is_some(),
            "Origin {origin} served"
        );
    }
    let r = with(&req, Some(&format!("evil.example:{port}")), None, true);
    assert!(
        api::refuse_foreign(&r, port).is_some(),
        "a foreign Host served"
    );
    // Case does not matter in a Host.
    if let Some(h) = req.headers().get(header::HOST) {
        if req.headers().get_all(header::HOST).iter().count() == 1 {
            let mut r = req.clone();
            let upper = HeaderValue::from_bytes(&h.as_bytes().to_ascii_uppercase()).unwrap();
            r.headers_mut().insert(header::HOST, upper);
            assert_eq!(
                api::refuse_foreign(&r, port).is_some(),
                refused.is_some(),
                "Host case"
            );
        }
    }

    // ---- What `record --url` tapes, and play's routing hash against the tape's.
    let path = req.uri().path();
    let facts = api::request_facts(req.method(), req.headers(), path);
    assert_eq!(facts["method"], req.method().as_str());
    assert_eq!(facts["path"], path);
    let raw = serde_json::to_vec(&facts).unwrap();
    let live = api::play_routing(req.headers());
    assert_eq!(
        api::taped_routing(&raw),
        Some(live),
        "the taped routing headers hash otherwise"
    );
    let redacted = mcptape::tape::writer::redact_http_facts(redactor(), &raw).map(|(b, _)| b);
    let taped = redacted.as_deref().unwrap_or(&raw);
    let v: serde_json::Value = serde_json::from_slice(taped).expect("redacted facts are JSON");
    assert_eq!(
        v["method"], facts["method"],
        "the method is protocol and stays"
    );
    assert_eq!(v["path"], facts["path"], "the path is protocol and stays");
    // `Mcp-Method` and `MCP-Protocol-Version` are kept as they are; `Mcp-Name` and
    // `Mcp-Param-*` values go through the rules (they can be credentials), so only without those
    // must the hash survive redaction.
    let redactable = req
        .headers()
        .keys()
        .any(|k| k == "mcp-name" || k.as_str().starts_with("mcp-param-"));
    if !redactable {
        assert_eq!(
            api::taped_routing(taped),
            Some(live),
            "redaction changed the routing hash"
        );
    }

    // ---- Where the proxies send it.
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    if pq.starts_with('/') {
        let up = Uri::from_static("http://127.0.0.1:3001/mcp");
        let u = api::record_upstream_uri(&up, pq).expect("record --url refuses a path hyper took");
        assert_eq!(u.authority().map(|a| a.as_str()), Some("127.0.0.1:3001"));
        assert_eq!(u.path_and_query().map(|p| p.as_str()), Some(pq));
        let up = Uri::from_static("https://api.example.com/v1/");
        let u = api::model_upstream_uri(&up, "/v1", pq).expect("the model proxy refuses a path");
        assert_eq!(
            u.path_and_query().map(|p| p.as_str()),
            Some(format!("/v1{pq}").as_str())
        );
    }
    let route = mcptape::model::provider::route(pq);
    let path_only = pq.split_once('?').map_or(pq, |(p, _)| p);
    let other_query = format!("{path_only}?alt=sse&key=x");
    assert_eq!(
        route,
        mcptape::model::provider::route(&other_query),
        "the query changed the route"
    );
    if route.provider == api::Provider::Other {
        assert_eq!(route.endpoint, path_only);
    }

    // ---- The body.
    let c = mcptape::wire::classify(body);
    if let (mcptape::wire::Kind::Request, Some(id)) = (c.kind, &c.id) {
        serde_json::from_str::<serde_json::Value>(id).expect("a request id is JSON");
    }
    // What the model proxy reads of a body (`model`, `stream`) is what a parse into a `Value`
    // gives. Except for a key no client sends: with serde_json's `raw_value` feature (mcptape's),
    // a `Value` reads an object whose key is its private raw-value token as a raw value.
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
    let head = mcptape::model::provider::RequestHead::of(body);
    if !unescaped(body).contains("$serde_json::private::RawValue") {
        assert_eq!(
            head,
            mcptape::model::provider::RequestHead {
                model: parsed
                    .get("model")
                    .and_then(|m| m.as_str())
                    .map(String::from),
                stream: parsed.get("stream").and_then(|s| s.as_bool()) == Some(true),
            },
            "the request head read otherwise than the parsed body"
        );
    }
    let _ = mcptape::model::provider::model_of(&route, &head);
    let _ = mcptape::model::provider::streams(&route, &head);

    // ---- Hop-by-hop headers never go on.
    let mut h = req.headers().clone();
    mcptape::transport::upstream::strip_hop_by_hop(&mut h);
    for name in [
        "connection",
        "keep-alive",
        "te",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    ] {
        assert!(!h.contains_key(name), "{name} forwarded");
    }
});

/// `bytes` as text with JSON's escapes undone wherever they are (`\u0052` is `R`): roughly, for
/// a search of what a key may spell.
fn unescaped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    out.push(c);
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}
