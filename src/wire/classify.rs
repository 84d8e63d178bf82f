//! Light classification of one framed message, beside its original bytes.
//!
//! Only the top level is looked at: kind, id (kept as its exact JSON text, so `1`, `1.0` and `"1"`
//! stay distinct) and method. Deeper parsing is left to whoever needs it (matching, comparing).

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
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

/// [`Classified`] with the id and method borrowed from the message (a method with escapes is
/// decoded): the tape writer's form, which allocates nothing for a message without a problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClassifiedRef<'a> {
    pub kind: Kind,
    pub id: Option<&'a str>,
    pub method: Option<Cow<'a, str>>,
    pub problem: Option<String>,
}

impl ClassifiedRef<'_> {
    fn into_owned(self) -> Classified {
        Classified {
            kind: self.kind,
            id: self.id.map(str::to_owned),
            method: self.method.map(Cow::into_owned),
            problem: self.problem,
        }
    }

    fn not(kind: Kind, problem: String) -> Self {
        ClassifiedRef {
            kind,
            id: None,
            method: None,
            problem: Some(problem),
        }
    }
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Classifies one message (a framed line without its terminator) by its top level only.
pub fn classify(bytes: &[u8]) -> Classified {
    classify_ref(bytes).into_owned()
}

/// [`classify`], borrowing from `bytes`.
pub(crate) fn classify_ref(bytes: &[u8]) -> ClassifiedRef<'_> {
    let not = ClassifiedRef::not;
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
                Ok(_) => ClassifiedRef {
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
    match top_level(text) {
        Some(top) => from_top(top.id, top.method.map(Cow::Borrowed), top.result, top.error),
        None => with_serde(text),
    }
}

/// [`classify`] of an object, by serde: what [`top_level`] is not sure to read as serde does.
fn with_serde(text: &str) -> ClassifiedRef<'_> {
    let not = ClassifiedRef::not;
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
    from_top(
        probe.id.map(RawValue::get),
        probe.method,
        probe.result.is_some(),
        probe.error.is_some(),
    )
}

/// The message's kind from its top-level fields.
fn from_top<'a>(
    id: Option<&'a str>,
    method: Option<Cow<'a, str>>,
    result: bool,
    error: bool,
) -> ClassifiedRef<'a> {
    let kind = match (&method, id, result, error) {
        (Some(_), Some(_), _, _) => Kind::Request,
        (Some(_), None, _, _) => Kind::Notification,
        (None, _, _, true) => Kind::Error,
        (None, Some(_), true, false) => Kind::Response,
        _ => {
            return ClassifiedRef {
                kind: Kind::Invalid,
                id,
                method: None,
                problem: Some("object has neither method nor result/error".into()),
            }
        }
    };
    ClassifiedRef {
        kind,
        id,
        method,
        problem: None,
    }
}

/// A JSON object's top-level fields as [`Probe`] reads them.
struct Top<'a> {
    id: Option<&'a str>,
    method: Option<&'a str>,
    result: bool,
    error: bool,
}

/// The top level of the object `text`, read without serde (which cost about 3,500
/// instructions for a `tools/call` request and 5,400 for its 1 KiB answer, a third of what
/// `record` spends taping a message, the hash aside): one validating walk that builds nothing.
/// `None` wherever it is not sure to read what serde's [`Probe`] reads, and serde decides: not
/// one valid object (or nested deeper than the scanner goes), a key with an escape (it could
/// spell one of the four), one of the four twice (serde refuses), a `method` that is neither a
/// string without escapes nor `null`. A `null` field is an absent one, as serde reads it.
fn top_level(text: &str) -> Option<Top<'_>> {
    let [id, method, result, error] =
        super::json_scan::object_fields(text.as_bytes(), [b"id", b"method", b"result", b"error"])?;
    let present =
        |span: Option<(usize, usize)>| span.map(|(a, b)| &text[a..b]).filter(|v| *v != "null");
    let method = match present(method) {
        Some(m) => Some(super::json_scan::plain_str(m)?),
        None => None,
    };
    Some(Top {
        id: present(id),
        method,
        result: present(result).is_some(),
        error: present(error).is_some(),
    })
}

/// Whether an id (its JSON text) is one JSON-RPC allows a request and MCP takes: a string or a
/// number (not `null`, an object, an array or a boolean).
pub(crate) fn scalar_id(id: &str) -> bool {
    matches!(id.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9'))
}

/// Whether a message classified `kind` (with `id`, its text `bytes`) is a client line no
/// server could serve as a request or take as a notification: not JSON, not a message, a
/// batch, a request whose id is not a string or a number, or a method with `"id": null`
/// (JSON-RPC's request with a null id, which MCP forbids; the classifier reads it as a
/// notification).
pub(crate) fn unservable(kind: Kind, id: Option<&str>, bytes: &[u8]) -> bool {
    match kind {
        Kind::NotJson | Kind::Invalid | Kind::Batch => true,
        Kind::Request => id.is_some_and(|id| !scalar_id(id)),
        Kind::Notification => null_id(bytes),
        _ => false,
    }
}

/// Whether the object `bytes` has an `id` member that is `null`.
fn null_id(bytes: &[u8]) -> bool {
    let span = match super::json_scan::object_fields(bytes, [b"id"]) {
        Some([span]) => span,
        // What the scanner is not sure of: serde says.
        None => {
            #[derive(Deserialize)]
            struct IdOnly<'a> {
                #[serde(borrow, default, deserialize_with = "raw")]
                id: Option<&'a RawValue>,
            }
            fn raw<'de, D: serde::Deserializer<'de>>(
                d: D,
            ) -> Result<Option<&'de RawValue>, D::Error> {
                <&'de RawValue>::deserialize(d).map(Some)
            }
            return serde_json::from_slice::<IdOnly<'_>>(bytes)
                .is_ok_and(|p| p.id.is_some_and(|id| id.get() == "null"));
        }
    };
    span.is_some_and(|(a, b)| &bytes[a..b] == b"null")
}

/// What the first bytes of an over-long message (`oversize`: only its length and head are
/// kept) tell of it: the top-level members written before its body, as writers put them
/// (`jsonrpc`, `id`, `method`, then `params`, `result` or `error`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadFacts {
    /// The id's exact JSON text, when it comes before the body.
    pub id: Option<String>,
    /// The method, when it comes before the body.
    pub method: Option<String>,
    /// A `result` or `error` member starts within the head: an answer.
    pub answer: bool,
}

impl HeadFacts {
    /// The id of the request this message answers, when the head says it is an answer and its
    /// id comes before the body; else none (an id past the head is not guessed).
    pub fn answer_id(&self) -> Option<&str> {
        self.id.as_deref().filter(|_| self.answer)
    }
}

/// Reads [`HeadFacts`] from `head`, the first bytes of a message; members after the first one
/// it cannot read (a nested value, the end of the head) are not looked for.
pub fn head_facts(head: &[u8]) -> HeadFacts {
    static MEMBER: std::sync::OnceLock<regex::bytes::Regex> = std::sync::OnceLock::new();
    let re = MEMBER.get_or_init(|| {
        regex::bytes::Regex::new(
            r#"^\s*[{,]\s*"(jsonrpc|id|method|params|result|error)"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|"(?:[^"\\]|\\.){0,512}")?"#,
        )
        .expect("valid regex")
    });
    let mut facts = HeadFacts::default();
    let mut at = 0;
    while let Some(caps) = re.captures(&head[at..]) {
        let text = |i: usize| {
            caps.get(i)
                .and_then(|m| std::str::from_utf8(m.as_bytes()).ok())
        };
        let end = at + caps.get(0).map_or(0, |m| m.end());
        // A value is read only where the head goes on past it: `"id":12` at the head's end
        // may be the first digits of `1234`.
        let whole = head[end..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| matches!(b, b',' | b'}'));
        match (text(1), text(2)) {
            (Some("id" | "method" | "jsonrpc"), Some(_)) if !whole => break,
            (Some("result" | "error"), _) => {
                facts.answer = true;
                break;
            }
            (Some("id"), Some(id)) => facts.id = Some(id.to_string()),
            (Some("method"), Some(m)) => facts.method = serde_json::from_str(m).ok(),
            (Some("jsonrpc"), Some(_)) => {}
            _ => break,
        }
        at = end;
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversize_heads_id_method_and_answer_are_read_from_its_first_bytes() {
        let answer = head_facts(br#"{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"te"#);
        assert_eq!(answer.id.as_deref(), Some("12"));
        assert!(answer.answer);
        assert_eq!(answer.answer_id(), Some("12"));
        let request = head_facts(
            br#" { "jsonrpc" : "2.0", "method": "tools/call", "id": "a\"1", "params":{"q":"bbb"#,
        );
        assert_eq!(request.id.as_deref(), Some(r#""a\"1""#));
        assert_eq!(request.method.as_deref(), Some("tools/call"));
        assert!(!request.answer);
        assert_eq!(request.answer_id(), None, "a request answers nothing");
        // The body first: the id is past the head, and is not guessed.
        let late = head_facts(br#"{"result":{"text":"x","id":3"#);
        assert_eq!(late.answer_id(), None);
        assert_eq!((late.id, late.answer), (None, true));
        assert_eq!(head_facts(b"not json"), HeadFacts::default());
        // Cut right after a number: it may be the first digits of a longer one, so not read.
        assert_eq!(head_facts(br#"{"jsonrpc":"2.0","id":12"#).id, None);
        assert_eq!(
            head_facts(br#"{"jsonrpc":"2.0","id":12 ,"result":"#)
                .id
                .as_deref(),
            Some("12")
        );
    }

    #[test]
    fn lines_no_server_could_serve_as_a_request() {
        let bad = |b: &[u8]| {
            let c = classify(b);
            unservable(c.kind, c.id.as_deref(), b)
        };
        for line in [
            &b"not json"[..],
            b"42",
            b"[]",
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            br#"{"jsonrpc":"2.0", "id" : null , "method":"m"}"#,
            br#"{"jsonrpc":"2.0","\u0069d":null,"method":"m"}"#,
        ] {
            assert!(bad(line), "{}", String::from_utf8_lossy(line));
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#[..],
            br#"{"jsonrpc":"2.0","id":-1.5,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":"x","method":"m"}"#,
            br#"{"jsonrpc":"2.0","method":"m"}"#,
            br#"{"jsonrpc":"2.0","method":"m","params":{"id":null}}"#,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
        ] {
            assert!(!bad(line), "{}", String::from_utf8_lossy(line));
        }
    }

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

    #[test]
    fn the_top_level_walk_reads_what_serde_reads() {
        let fast = [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{"api_key":"k","price":2.50}}}"#,
            r#" { "params" : {} , "method" : "m" , "id" : "a\"b" } "#,
            r#"{"id":1,"result":null,"error":{"code":1}}"#,
            r#"{"id":4,"result":null}"#,
            r#"{"id":null,"method":"n"}"#,
            r#"{"method":null,"id":4,"result":[]}"#,
            r#"{"id":{"a":[1]},"result":{"x":"\u00e9\n"}}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"id":1}"#,
            r#"{}"#,
        ];
        for text in fast {
            assert!(top_level(text).is_some(), "{text}");
            assert_eq!(classify_ref(text.as_bytes()), with_serde(text), "{text}");
        }
        let left_to_serde = [
            r#"{"id":1,"id":2,"result":{}}"#,
            r#"{"\u0069d":1,"result":{}}"#,
            r#"{"id":1,"method":"a\/b"}"#,
            r#"{"id":1,"method":5}"#,
            r#"{"id":1,"method":"m"} x"#,
            r#"{"id":1,"method":"m""#,
            "\u{c}{\"id\":1,\"method\":\"m\"}",
        ];
        for text in left_to_serde {
            assert!(top_level(text).is_none(), "{text}");
            assert_eq!(classify_ref(text.as_bytes()), with_serde(text), "{text}");
        }
    }

    /// Pieces of JSON-RPC objects put together at random: wherever the walk reads a message,
    /// it reads what serde reads.
    fn object() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        // Mostly what a peer sends, now and then what it must not: the walk's two ways out.
        let key = prop_oneof![
            8 => prop::sample::select(vec![
                "\"id\"", "\"method\"", "\"result\"", "\"error\"", "\"jsonrpc\"", "\"params\"",
            ]),
            1 => prop::sample::select(vec!["\"\\u0069d\"", "\"i\\\"d\"", "\"\"", "id"]),
        ];
        let value = prop_oneof![
            8 => prop::sample::select(vec![
                "1", "1.0", "-0", "2.50", "1e5", "null", "true", "\"tools/call\"", "\"a\\\"b\"",
                "\"\\u00e9\"", "\"\\ud800\"", "\"m\\n\"", "{}", "[]", "{\"a\":[1,{\"b\":null}]}",
            ]),
            1 => prop::sample::select(vec![
                "01", "1.", "fals", "\"\\x\"", "[1,]", "{\"k\" 1}", "\"tab\there\"", "\"",
            ]),
        ];
        let blank = prop_oneof![
            8 => prop::sample::select(vec!["", " ", "\n", "\t", "\r\n"]),
            1 => proptest::strategy::Just("\u{c}"),
        ];
        (
            prop::collection::vec((key, value, blank.clone()), 0..5),
            blank.clone(),
            prop_oneof![4 => proptest::strategy::Just(""), 1 => prop::sample::select(vec![" ", "x", ",", "}"])],
        )
            .prop_map(|(members, lead, trail)| {
                let body: Vec<String> = members
                    .iter()
                    .map(|(k, v, b)| format!("{b}{k}{b}:{b}{v}{b}"))
                    .collect();
                format!("{lead}{{{}}}{trail}", body.join(","))
            })
    }

    proptest::proptest! {
        #[test]
        fn random_objects_are_classified_as_serde_classifies_them(text in object()) {
            proptest::prop_assert_eq!(classify_ref(text.as_bytes()), with_serde(&text), "{}", text);
        }
    }
}
