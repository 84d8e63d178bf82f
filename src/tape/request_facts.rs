//! What the exchange index needs of a client's request, read straight from its bytes.
//!
//! Indexing a big tape parsed every request's params into a `serde_json::Value`, cloned it,
//! stripped it, serialized it again to hash it, and dropped both trees: about 13k instructions
//! for `{"name":"echo","arguments":{"n":1}}`, most of a cold start-up's index build. Here the
//! canonical text (the one `wire::params::match_key` hashes) is written from the params' raw
//! text, members sorted in place of a map, and nothing is built. It only answers when it is sure
//! to give exactly what the general path gives: escapes, numbers that serde would re-spell
//! (fractions, exponents, `-0`, integers past 64 bits), duplicate keys, redaction markers,
//! `inputResponses` (a retry: the general path links it) and deep nesting all leave the request
//! to the general path. A proptest holds the two paths equal.

use crate::wire::canonical::{hash_key, VOLATILE_META_KEYS};
use crate::wire::json_scan::{number_end, skip_ws, string_end, value_end};
use crate::wire::params::MatchKey;
use serde_json::Value;

/// Objects and arrays nested deeper than this go to the general path: each object copies what
/// it wrote once more to put its members in order.
const MAX_DEPTH: usize = 16;

/// What the index keeps of a request, as the general path computes it from the parsed params.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestFacts {
    /// `match_key(method, params)`.
    pub key: MatchKey,
    /// `progress_token(params, true)`.
    pub progress_token: Option<String>,
    /// `params.name`.
    pub name: Option<Value>,
}

/// The facts of a request of `method` whose message is `message` (valid JSON: the tape reader
/// checked it), or `None` when only the general path can be trusted with it.
pub(crate) fn request_facts<'m>(
    method: &str,
    message: &'m str,
    w: &mut Scratch,
) -> Option<Raw<'m>> {
    // `initialize` is keyed without its params, and markers are stripped of their hashes
    // first: both rare, both left to the general path.
    if method == "initialize" || crate::wire::marker::has_marker(message) {
        return None;
    }
    let s = message.as_bytes();
    w.out.clear();
    w.members.clear();
    let mut found = Found::default();
    let mut params = None;
    // The message's own members: `params` written canonically on the way, the others skipped.
    let mut i = skip_ws(s, 0);
    if s.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(s, i + 1);
    if s.get(i) != Some(&b'}') {
        loop {
            let (key, start) = member_key(s, i)?;
            let end = if key == b"params" {
                // A repeated `params`: serde's derive refuses the message.
                if params.is_some() {
                    return None;
                }
                let end = match s[start] {
                    b'{' => canonical_object(s, start, w, 1, Level::Params, &mut found)?,
                    _ => canonical(s, start, w, 1)?,
                };
                params = Some((start, end));
                end
            } else {
                value_end(s, start, 0)?
            };
            i = skip_ws(s, end);
            match *s.get(i)? {
                b',' => i = skip_ws(s, i + 1),
                b'}' => break,
                _ => return None,
            }
        }
    }
    // `"params":null` is no params to serde's `Option`, as to `params_with_raw`.
    let raw = params.map(|(a, b)| &message[a..b]).filter(|t| *t != "null");
    if raw.is_none() || w.out.as_slice() == b"{}" {
        // No params, or `{}` (or only stripped keys): the same request.
        w.out.clear();
        w.out.extend_from_slice(b"null");
    }
    let text = std::str::from_utf8(&w.out).ok()?;
    Some(Raw {
        facts: RequestFacts {
            key: hash_key(method, text),
            progress_token: found.progress_token,
            name: match found.name {
                Some((a, b)) => Some(name_value(&message[a..b])?),
                None => None,
            },
        },
        raw,
    })
}

/// [`RequestFacts`], and the params' exact text (`None`: no params) for `raw_key`, borrowed
/// from the message.
#[derive(Debug)]
pub(crate) struct Raw<'a> {
    pub facts: RequestFacts,
    pub raw: Option<&'a str>,
}

/// Where some text lies: `start..end`.
type Span = (usize, usize);

/// The buffers `request_facts` writes in, kept between requests (the index keeps one): the
/// canonical text, the members of the objects being written (each object's after those of the
/// objects it is inside, taken off when it is done), and a copy to reorder them from. Nothing
/// is allocated for a request once they have grown.
#[derive(Default)]
pub(crate) struct Scratch {
    out: Vec<u8>,
    /// (the key's text in the message, where its `"key":value` lies in `out` or nothing when
    /// dropped); dropped keys stay so that a repeated one is still seen.
    members: Vec<(Span, Option<Span>)>,
    reorder: Vec<u8>,
}

/// Which object is being written: the params (whose `requestState` is dropped and whose
/// `_meta` is filtered), their `_meta` (volatile keys dropped), or any other.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Params,
    Meta,
    Plain,
}

/// What the params say besides their canonical text.
#[derive(Default)]
struct Found {
    progress_token: Option<String>,
    /// Where `params.name`'s value lies in the message.
    name: Option<Span>,
}

/// The key of the member at `s[i]` (its text: `None` if escaped, which serde would decode) and
/// where its value starts.
fn member_key(s: &[u8], i: usize) -> Option<(&[u8], usize)> {
    let key_end = string_end(s, i)?;
    let key = &s[i + 1..key_end - 1];
    if memchr::memchr(b'\\', key).is_some() {
        return None;
    }
    let i = skip_ws(s, key_end);
    if s.get(i) != Some(&b':') {
        return None;
    }
    Some((key, skip_ws(s, i + 1)))
}

/// Writes the object at `s[i]` canonically: each member is written as it comes (one walk of the
/// bytes), then the members are put in serde_json's map order (byte order of the key text,
/// which without escapes is the key) with commas between. `None` on a repeated key (serde
/// keeps the last) or anything `canonical` refuses.
fn canonical_object(
    s: &[u8],
    i: usize,
    w: &mut Scratch,
    depth: usize,
    level: Level,
    found: &mut Found,
) -> Option<usize> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let start = w.out.len();
    let base = w.members.len();
    let mut i = skip_ws(s, i + 1);
    let end = if s.get(i) == Some(&b'}') {
        i + 1
    } else {
        loop {
            let (key, value) = member_key(s, i)?;
            let key_span = (i + 1, i + 1 + key.len());
            let from = w.out.len();
            let skip = match (level, key) {
                (Level::Params, b"requestState") => true,
                (Level::Params, b"inputResponses") => return None,
                (Level::Meta, k) => VOLATILE_META_KEYS.iter().any(|v| v.as_bytes() == k),
                _ => false,
            };
            w.out.push(b'"');
            w.out.extend_from_slice(key);
            w.out.extend_from_slice(b"\":");
            let value_at = w.out.len();
            let end = match (level, key, s[value]) {
                (Level::Params, b"_meta", b'{') => {
                    canonical_object(s, value, w, depth + 1, Level::Meta, found)?
                }
                _ => canonical(s, value, w, depth + 1)?,
            };
            if level == Level::Params && key == b"name" {
                found.name = Some((value, end));
            }
            if level == Level::Meta && key == b"progressToken" {
                found.progress_token = Some(String::from_utf8(w.out[value_at..].to_vec()).ok()?);
            }
            // A `_meta` left empty by its volatile keys goes too.
            let emptied = level == Level::Params
                && key == b"_meta"
                && &w.out[value_at..] == b"{}"
                && s[value] == b'{';
            if skip || emptied {
                w.out.truncate(from);
                w.members.push((key_span, None));
            } else {
                w.members.push((key_span, Some((from, w.out.len()))));
            }
            i = skip_ws(s, end);
            match *s.get(i)? {
                b',' => i = skip_ws(s, i + 1),
                b'}' => break i + 1,
                _ => return None,
            }
        }
    };
    let key = |m: &(Span, Option<Span>)| &s[m.0 .0..m.0 .1];
    let members = &mut w.members[base..];
    let sorted = members.windows(2).all(|p| key(&p[0]) < key(&p[1]));
    if !sorted {
        members.sort_by(|a, b| key(a).cmp(key(b)));
        if members.windows(2).any(|p| key(&p[0]) == key(&p[1])) {
            return None;
        }
    }
    // Reassembled from a copy: `{`, the members in order, commas, `}`.
    w.reorder.clear();
    w.reorder.extend_from_slice(&w.out[start..]);
    w.out.truncate(start);
    w.out.push(b'{');
    for (n, (from, to)) in w.members[base..].iter().filter_map(|m| m.1).enumerate() {
        if n > 0 {
            w.out.push(b',');
        }
        w.out
            .extend_from_slice(&w.reorder[from - start..to - start]);
    }
    w.out.push(b'}');
    w.members.truncate(base);
    Some(end)
}

/// Writes the canonical text (serde_json's serialization of the parsed value) of the value at
/// `s[i]` into `out` and returns its end; `None` when serde would spell some of it differently.
fn canonical(s: &[u8], i: usize, w: &mut Scratch, depth: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => {
            let end = string_end(s, i)?;
            // Without a backslash the text is the string as serde writes it back (it escapes
            // only quotes, backslashes and control characters, which cannot be raw in JSON).
            if memchr::memchr(b'\\', &s[i..end]).is_some() {
                return None;
            }
            w.out.extend_from_slice(&s[i..end]);
            Some(end)
        }
        b'-' | b'0'..=b'9' => {
            let end = number_end(s, i)?;
            let text = &s[i..end];
            // Integers that serde keeps as integers: within 64 bits for sure, and not `-0`
            // (a float to serde, written `-0.0`).
            let digits = text.strip_prefix(b"-").unwrap_or(text);
            let plain = digits.iter().all(u8::is_ascii_digit)
                && digits.len() <= 18
                && !(text[0] == b'-' && digits == b"0");
            if !plain {
                return None;
            }
            w.out.extend_from_slice(text);
            Some(end)
        }
        b't' | b'f' | b'n' => {
            let end = value_end(s, i, 0)?;
            w.out.extend_from_slice(&s[i..end]);
            Some(end)
        }
        b'{' => canonical_object(s, i, w, depth, Level::Plain, &mut Found::default()),
        b'[' => {
            if depth >= MAX_DEPTH {
                return None;
            }
            w.out.push(b'[');
            let mut j = skip_ws(s, i + 1);
            if s.get(j) == Some(&b']') {
                w.out.push(b']');
                return Some(j + 1);
            }
            let mut first = true;
            loop {
                if !first {
                    w.out.push(b',');
                }
                first = false;
                j = skip_ws(s, canonical(s, j, w, depth + 1)?);
                match *s.get(j)? {
                    b',' => j = skip_ws(s, j + 1),
                    b']' => {
                        w.out.push(b']');
                        return Some(j + 1);
                    }
                    _ => return None,
                }
            }
        }
        _ => None,
    }
}

/// `params.name` as a value: a plain string without building a parser.
fn name_value(text: &str) -> Option<Value> {
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(Value::String(inner.to_string())),
        _ => serde_json::from_str(text).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::params::{match_key, params_with_raw, progress_token};
    use proptest::prelude::*;

    /// What the general path (the index before this module) gives for the same message.
    fn general(method: &str, message: &str) -> (RequestFacts, Option<String>) {
        let (params, raw) = params_with_raw(message.as_bytes());
        let (key, _) = match_key(method, params.as_ref());
        let facts = RequestFacts {
            key,
            progress_token: progress_token(params.as_ref(), true),
            name: params.as_ref().and_then(|p| p.get("name").cloned()),
        };
        (facts, raw.flatten().map(str::to_string))
    }

    fn fast(method: &str, message: &str) -> Option<(RequestFacts, Option<String>)> {
        let r = request_facts(method, message, &mut Scratch::default())?;
        Some((r.facts, r.raw.map(str::to_string)))
    }

    #[test]
    fn common_requests_take_the_fast_path_and_agree() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"n":3,"size":1024}}}"#,
            r#"{"method":"tools/call","params":{"name":"weather","arguments":{"city":"Paris","units":"metric","days":[1,2,3]}},"jsonrpc":"2.0","id":"a-1"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":7,"claudecode/toolUseId":"toolu_1"},"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p-1","keep":{"b":1,"a":2}},"requestState":"v1.x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":7}}}"#,
            r#"{ "jsonrpc" : "2.0", "id" : 1, "method" : "x", "params" : { "b" : [ 1 , { "z" : true, "a" : null } ], "a" : "é€" } }"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1,"two",{"b":false,"a":-5}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"name":{"nested":1}}}"#,
        ];
        for message in cases {
            let method = serde_json::from_str::<Value>(message).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_string();
            let got = fast(&method, message).unwrap_or_else(|| panic!("no fast path: {message}"));
            assert_eq!(got, general(&method, message), "{message}");
        }
    }

    #[test]
    fn what_serde_would_respell_is_left_to_the_general_path() {
        let cases = [
            // numbers serde re-spells
            r#"{"id":1,"method":"x","params":{"price":2.50}}"#,
            r#"{"id":1,"method":"x","params":{"n":1e5}}"#,
            r#"{"id":1,"method":"x","params":{"n":-0}}"#,
            r#"{"id":1,"method":"x","params":{"n":123456789012345678901234}}"#,
            // escapes, in values and keys
            r#"{"id":1,"method":"x","params":{"s":"a\nb"}}"#,
            r#"{"id":1,"method":"x","params":{"\u0061":1}}"#,
            // a repeated key: serde keeps the last
            r#"{"id":1,"method":"x","params":{"a":1,"a":2}}"#,
            r#"{"id":1,"method":"x","params":{"a":1},"params":{"a":2}}"#,
            r#"{"id":1,"method":"x","params":{"_meta":{"progressToken":1},"_meta":{"k":2}}}"#,
            r#"{"id":1,"method":"x","params":{"requestState":"a","requestState":"b"}}"#,
            // markers, retries, initialize
            r#"{"id":1,"method":"x","params":{"api_key":"[REDACTED:key:api_key:0a1b2c3d]"}}"#,
            r#"{"id":1,"method":"x","params":{"name":"t","inputResponses":{"k":1}}}"#,
            r#"{"id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
        ];
        for message in cases {
            let method = serde_json::from_str::<Value>(message).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(fast(&method, message).is_none(), "{message}");
        }
    }

    /// A JSON value for the property test: keys drawn from a small set (so that `_meta`,
    /// volatile keys and collisions with the top-level names come up), numbers and strings in
    /// the spellings real clients use.
    fn value() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "name",
            "arguments",
            "_meta",
            "progressToken",
            "requestState",
            "inputResponses",
            "claudecode/toolUseId",
            "api_key",
            "token",
            "b",
            "a",
            "é",
        ]);
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            prop::sample::select(vec![
                "2.50",
                "-0",
                "0",
                "1e5",
                "1E-3",
                "-7",
                "3.0",
                "10",
                "99999999999999999999"
            ])
            .prop_map(str::to_string),
            "[a-z é\"\\\\\n/]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just(r#""\u00e9\/x""#.to_string()),
            Just(r#""[REDACTED:key:token:0a1b2c3d]""#.to_string()),
        ];
        leaf.prop_recursive(4, 32, 5, move |inner| {
            let ws = prop::sample::select(vec!["", " ", "\n "]);
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), ws.clone())
                    .prop_map(|(items, w)| format!("[{w}{}{w}]", items.join(&format!("{w},{w}")))),
                (prop::collection::vec((key.clone(), inner), 0..5), ws).prop_map(|(ms, w)| {
                    let ms: Vec<String> = ms
                        .into_iter()
                        .map(|(k, v)| format!("{w}{}{w}:{w}{v}", serde_json::to_string(k).unwrap()))
                        .collect();
                    format!("{{{}{w}}}", ms.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Whenever the fast path answers, it gives what the general path gives.
        #[test]
        fn the_fast_path_gives_what_the_general_path_gives(
            params in prop::option::of(value()),
            method in prop::sample::select(vec!["tools/call", "resources/read", "initialize"]),
        ) {
            let message = match &params {
                Some(p) => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{p}}}"#),
                None => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#),
            };
            prop_assume!(serde_json::from_str::<Value>(&message).is_ok());
            if let Some(got) = fast(method, &message) {
                prop_assert_eq!(got, general(method, &message), "{}", message);
            }
        }
    }
}
