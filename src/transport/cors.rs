//! CORS as a recorded server gave it. A browser client (the MCP Inspector connecting directly,
//! a web app) sends an `OPTIONS` preflight before each POST with MCP's headers and reads an
//! answer only if it carries `Access-Control-Allow-Origin`; servers made for such clients
//! (server-everything's HTTP modes) send those headers. `record --url` tapes them
//! (`http-options` for a preflight's answer, `http-cors` when other answers carry them) and
//! `play --listen` gives them again, so a browser can use the tape as it used the server.

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Map, Value};

/// A recorded answer's CORS headers as the tape's index holds them (`tape::index::HttpCors`):
/// name (lower case) and value in the order the server sent them, and the names whose value
/// was the request's own (an `Origin` reflected, the requested headers allowed).
pub(crate) struct Recorded<'a> {
    pub headers: &'a [(String, String)],
    pub reflected: &'a [String],
}

/// The request header an answer's CORS header may echo.
fn echoed(name: &str) -> Option<&'static str> {
    match name {
        "access-control-allow-origin" => Some("origin"),
        "access-control-allow-headers" => Some("access-control-request-headers"),
        "access-control-allow-methods" => Some("access-control-request-method"),
        _ => None,
    }
}

/// The CORS headers of `answer` to request `request` as an event's details (`status`,
/// `headers`, `reflected`), or `None` when it carries none.
pub(crate) fn taped(request: &HeaderMap, answer: &HeaderMap, status: u16) -> Option<Value> {
    let mut headers = Map::new();
    let mut reflected = Vec::new();
    for name in answer.keys() {
        let n = name.as_str();
        if !n.starts_with("access-control-") {
            continue;
        }
        let values: Vec<&str> = answer
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if values.is_empty() {
            continue;
        }
        let value = values.join(", ");
        let mirrors = echoed(n)
            .and_then(|from| request.get(from))
            .and_then(|v| v.to_str().ok())
            .is_some_and(|asked| asked == value && value != "*");
        if mirrors {
            reflected.push(json!(n));
        }
        headers.insert(n.to_string(), json!(value));
    }
    if headers.is_empty() {
        return None;
    }
    Some(json!({"status": status, "headers": headers, "reflected": reflected}))
}

/// Whether `answer` carries CORS headers at all: one lookup, for every answer `record --url`
/// forwards.
pub(crate) fn carried(answer: &HeaderMap) -> bool {
    answer.contains_key(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN)
}

impl Recorded<'_> {
    /// Adds the recorded headers to `out`, a reflected one as the live request gives it (left
    /// out when the request has none to give).
    pub(crate) fn apply(&self, request: &HeaderMap, out: &mut HeaderMap) {
        for (name, value) in self.headers {
            let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
                continue;
            };
            let value = if self.reflected.iter().any(|r| r == name) {
                match echoed(name).and_then(|from| request.get(from)) {
                    Some(v) => v.clone(),
                    None => continue,
                }
            } else {
                match HeaderValue::from_str(value) {
                    Ok(v) => v,
                    Err(_) => continue,
                }
            };
            out.insert(header, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn a_preflight_is_taped_with_what_it_echoed_and_given_again_for_another_origin() {
        let asked = map(&[
            ("origin", "http://localhost:6274"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type,mcp-protocol-version",
            ),
        ]);
        let answer = map(&[
            ("access-control-allow-origin", "http://localhost:6274"),
            ("access-control-allow-methods", "GET,POST,DELETE"),
            (
                "access-control-allow-headers",
                "content-type,mcp-protocol-version",
            ),
            ("content-length", "0"),
        ]);
        let t = taped(&asked, &answer, 204).expect("CORS headers");
        assert_eq!(t["status"], 204);
        assert_eq!(t["headers"].as_object().unwrap().len(), 3, "{t}");
        assert_eq!(
            t["reflected"],
            json!([
                "access-control-allow-origin",
                "access-control-allow-headers"
            ]),
            "GET,POST,DELETE was not the request's: {t}"
        );
        let reflected: Vec<String> = serde_json::from_value(t["reflected"].clone()).unwrap();
        let headers: Vec<(String, String)> = t["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        let cors = Recorded {
            headers: &headers,
            reflected: &reflected,
        };
        let live = map(&[
            ("origin", "http://127.0.0.1:9000"),
            ("access-control-request-headers", "content-type"),
        ]);
        let mut out = HeaderMap::new();
        cors.apply(&live, &mut out);
        assert_eq!(out["access-control-allow-origin"], "http://127.0.0.1:9000");
        assert_eq!(out["access-control-allow-headers"], "content-type");
        assert_eq!(out["access-control-allow-methods"], "GET,POST,DELETE");
        // A reflected header the live request cannot fill is left out, never made up.
        let mut out = HeaderMap::new();
        cors.apply(&HeaderMap::new(), &mut out);
        assert!(!out.contains_key("access-control-allow-origin"));
        assert_eq!(out["access-control-allow-methods"], "GET,POST,DELETE");
    }

    #[test]
    fn a_wildcard_is_kept_as_it_is_and_no_cors_is_none() {
        let asked = map(&[("origin", "http://localhost:6274")]);
        let answer = map(&[
            ("access-control-allow-origin", "*"),
            ("access-control-expose-headers", "mcp-session-id"),
            ("access-control-expose-headers", "last-event-id"),
        ]);
        let t = taped(&asked, &answer, 200).unwrap();
        assert_eq!(t["reflected"], json!([]));
        assert_eq!(
            t["headers"]["access-control-expose-headers"],
            "mcp-session-id, last-event-id"
        );
        assert!(carried(&answer));
        assert!(taped(&asked, &map(&[("content-type", "text/plain")]), 200).is_none());
        assert!(!carried(&map(&[("content-type", "text/plain")])));
    }
}
