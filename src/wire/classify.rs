//! Light classification of one framed message, beside its original bytes.
//!
//! Only the top level is looked at: kind, id (kept as its exact JSON text, so `1`, `1.0` and `"1"`
//! stay distinct) and method. Deeper parsing is left to whoever needs it (matching, comparing).

use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// What a framed line is, as far as its top level tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A JSON-RPC request: a `method` and an `id`.
    Request,
    /// A JSON-RPC notification: a `method` and no `id`.
    Notification,
    /// A JSON-RPC answer with a `result`.
    Response,
    /// A JSON-RPC answer with an `error`.
    Error,
    /// A JSON array (JSON-RPC batch), forwarded and recorded as one unit.
    Batch,
    /// Valid JSON that is not a JSON-RPC message (a number, an object without method or id…).
    Invalid,
    /// Not JSON at all, or not UTF-8.
    NotJson,
    /// A line over the size limit: only its length and head were kept.
    Oversize,
}

impl Kind {
    /// The kind's name on the tape (`request`, `not_json`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Notification => "notification",
            Kind::Response => "response",
            Kind::Error => "error",
            Kind::Batch => "batch",
            Kind::Invalid => "invalid",
            Kind::NotJson => "not_json",
            Kind::Oversize => "oversize",
        }
    }

    /// Whether the message is JSON and can be stored verbatim as a JSON value.
    pub fn is_json(self) -> bool {
        !matches!(self, Kind::NotJson | Kind::Oversize)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the classifier found. `id` is the id's JSON text exactly as it appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// What the message is.
    pub kind: Kind,
    /// The id's exact JSON text; None when it has none (or is not a JSON-RPC message).
    pub id: Option<String>,
    /// The method, for requests and notifications.
    pub method: Option<String>,
    /// Why the message is `not_json` or `invalid`, for the tape and for humans.
    pub problem: Option<String>,
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Classifies one message (a framed line without its terminator) by its top level only.
pub fn classify(bytes: &[u8]) -> Classified {
    let not = |kind, problem: String| Classified {
        kind,
        id: None,
        method: None,
        problem: Some(problem),
    };
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return not(
                Kind::NotJson,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            )
        }
    };
    match text.trim_start().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => Classified {
                    kind: Kind::Batch,
                    id: None,
                    method: None,
                    problem: None,
                },
                Err(e) => not(Kind::NotJson, e.to_string()),
            }
        }
        _ => {
            return match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => not(Kind::Invalid, "JSON value is not an object".into()),
                Err(e) => not(Kind::NotJson, e.to_string()),
            }
        }
    }
    let probe: Probe<'_> = match serde_json::from_str(text) {
        Ok(p) => p,
        Err(e) if e.is_data() => {
            // Valid JSON whose top-level fields have unexpected types (e.g. a numeric method).
            return match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => not(Kind::Invalid, e.to_string()),
                Err(e) => not(Kind::NotJson, e.to_string()),
            };
        }
        Err(e) => return not(Kind::NotJson, e.to_string()),
    };
    // `"id": null` deserializes to None, which is what we want: it is no usable id.
    let id = probe.id.map(|r| r.get().to_owned());
    let method = probe.method.map(|m| m.into_owned());
    let kind = match (&method, &id, probe.result.is_some(), probe.error.is_some()) {
        (Some(_), Some(_), _, _) => Kind::Request,
        (Some(_), None, _, _) => Kind::Notification,
        (None, _, _, true) => Kind::Error,
        (None, Some(_), true, false) => Kind::Response,
        _ => {
            return Classified {
                kind: Kind::Invalid,
                id,
                method: None,
                problem: Some("object has neither method nor result/error".into()),
            }
        }
    };
    Classified {
        kind,
        id,
        method,
        problem: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &[u8]) -> (Kind, Option<String>, Option<String>) {
        let c = classify(s);
        (c.kind, c.id, c.method)
    }

    #[test]
    fn kinds_ids_and_methods() {
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            k(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            (Kind::Request, s("1"), s("ping"))
        );
        assert_eq!(
            k(br#"{"jsonrpc":"2.0","id":"a b","method":"x"}"#),
            (Kind::Request, s("\"a b\""), s("x"))
        );
        assert_eq!(
            k(br#"{"id":1.0,"method":"x"}"#),
            (Kind::Request, s("1.0"), s("x"))
        );
        assert_eq!(
            k(br#"{"method":"notifications/initialized"}"#),
            (Kind::Notification, None, s("notifications/initialized"))
        );
        assert_eq!(
            k(br#"{"id":7,"result":{}}"#),
            (Kind::Response, s("7"), None)
        );
        assert_eq!(
            k(br#"{"id":7,"error":{"code":-1,"message":"m"}}"#),
            (Kind::Error, s("7"), None)
        );
        assert_eq!(
            k(br#"{"id":null,"error":{"code":-32700,"message":"m"}}"#),
            (Kind::Error, None, None)
        );
        assert_eq!(k(br#"[{"id":1,"method":"a"}]"#).0, Kind::Batch);
        assert_eq!(k(b"hello").0, Kind::NotJson);
        assert_eq!(k(b"{\"a\":").0, Kind::NotJson);
        assert_eq!(k(b"42").0, Kind::Invalid);
        assert_eq!(k(br#"{"method":5}"#).0, Kind::Invalid);
        assert_eq!(k(br#"{"x":1}"#).0, Kind::Invalid);
        assert_eq!(k(b"{\"method\":\"\xff\"}").0, Kind::NotJson);
        // Deep nesting is valid JSON: classified without recursion (serde_json skips raw values
        // iteratively), never a stack overflow.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(k(deep.as_bytes()).0, Kind::Batch);
        let deep = format!(
            r#"{{"id":1,"method":"m","params":{}{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(k(deep.as_bytes()).0, Kind::Request);
        let torn = "[".repeat(10_000);
        assert_eq!(k(torn.as_bytes()).0, Kind::NotJson);
    }

    #[test]
    fn huge_ids_are_kept_exactly() {
        let c = classify(br#"{"id":123456789012345678901234567890,"method":"m"}"#);
        assert_eq!(c.id.as_deref(), Some("123456789012345678901234567890"));
        let c = classify(br#"{"id":-1.5e3,"result":{}}"#);
        assert_eq!(c.id.as_deref(), Some("-1.5e3"));
    }
}
