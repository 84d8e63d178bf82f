//! Normalization before comparing two answers: what legitimately changes from run to run is
//! masked, ignored paths are removed, and JSON held inside text content is parsed so it is
//! compared as JSON. Both sides go through the same normalizer.

use regex::Regex;
use serde_json::{Map, Value};
use std::sync::OnceLock;

/// Keys (compared lower-case, without `_` and `-`) whose values are timestamps: masked whatever
/// their value (string, or a number in a plausible epoch range).
pub(crate) const TIMESTAMP_KEYS: &[&str] = &[
    "timestamp",
    "time",
    "date",
    "datetime",
    "createdat",
    "updatedat",
    "modifiedat",
    "deletedat",
    "expiresat",
    "startedat",
    "endedat",
    "finishedat",
    "lastmodified",
    "lastupdated",
    "ts",
    "now",
    "epoch",
    "generatedat",
    "servertime",
];

/// Keys (compared like [`TIMESTAMP_KEYS`]) whose numbers are masked when they look like epoch
/// seconds or milliseconds; their strings only where they hold a date. So are keys ending in
/// `_at`, `-at` or `At` (`created_at`, `updatedAt`): see [`is_epoch_key`].
pub(crate) const EPOCH_KEYS: &[&str] = &[
    "mtime",
    "atime",
    "ctime",
    "birthtime",
    "created",
    "modified",
    "updated",
];

/// Keys whose values identify a session, request or trace rather than describe behaviour.
pub(crate) const ID_KEYS: &[&str] = &[
    "sessionid",
    "requestid",
    "traceid",
    "spanid",
    "correlationid",
    "nonce",
    "etag",
    "requeststate",
    "cursor",
    "nextcursor",
    "mcpsessionid",
];

/// What a masked timestamp becomes.
pub(crate) const MASK_TIMESTAMP: &str = "<timestamp>";
/// What a masked UUID becomes.
pub(crate) const MASK_UUID: &str = "<uuid>";
/// What a masked session, request or trace id becomes.
pub(crate) const MASK_ID: &str = "<id>";

pub use crate::wire::jsonpath::{IgnorePath, PathError, Scope};

/// What is masked or removed from both answers before they are compared.
#[derive(Debug, Clone, Default)]
pub struct Normalizer {
    /// Mask timestamps, UUIDs and session/request ids (on unless `--no-auto-mask`).
    pub auto_mask: bool,
    /// `--ignore-path`s: nodes removed before comparing.
    pub ignore: Vec<IgnorePath>,
    /// Compare arrays as multisets.
    pub allow_reorder: bool,
}

impl Normalizer {
    /// A normalizer; an error names the first of `ignore_paths` that does not parse.
    pub fn new(
        auto_mask: bool,
        ignore_paths: &[String],
        allow_reorder: bool,
    ) -> Result<Normalizer, PathError> {
        let ignore = ignore_paths
            .iter()
            .map(|p| IgnorePath::parse(p))
            .collect::<Result<_, _>>()?;
        Ok(Normalizer {
            auto_mask,
            ignore,
            allow_reorder,
        })
    }

    /// Whether some `--ignore-path` is scoped (so the request's method and target matter).
    pub(crate) fn has_scoped(&self) -> bool {
        self.ignore.iter().any(|p| p.scope.is_some())
    }

    /// The comparable form of one answer body (`{"result": …}` or `{"error": …}`) to a request
    /// of `method` about `target` (the tool, prompt or resource, if any).
    pub(crate) fn normalize(&self, mut v: Value, method: &str, target: Option<&str>) -> Value {
        parse_embedded_json(&mut v, 0);
        for p in self.ignore.iter().filter(|p| p.applies(method, target)) {
            p.remove_from(&mut v);
        }
        if self.auto_mask {
            mask(&mut v, None);
        }
        v
    }
}

/// Text content that is itself JSON (an object or array) is replaced by the parsed value, so a
/// changed field inside it is reported at its own path rather than as one changed string.
fn parse_embedded_json(v: &mut Value, depth: usize) {
    if depth > 64 {
        return;
    }
    match v {
        Value::Object(map) => {
            let is_text_item = map.get("type").and_then(Value::as_str) == Some("text");
            for (k, child) in map.iter_mut() {
                if is_text_item && k == "text" {
                    if let Value::String(s) = child {
                        let t = s.trim_start();
                        if t.starts_with('{') || t.starts_with('[') {
                            // Read as exactly as the message around it (integers beyond
                            // 64 bits, lone surrogates); plain serde_json unless the text
                            // has a long digit run or a surrogate escape.
                            if let Ok(parsed) = crate::wire::exact::from_str::<Value>(s) {
                                *child = parsed;
                                continue;
                            }
                        }
                    }
                }
                parse_embedded_json(child, depth + 1);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|i| parse_embedded_json(i, depth + 1)),
        _ => {}
    }
}

fn squash(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// A key an epoch number under which is a timestamp: a [`TIMESTAMP_KEYS`] or [`EPOCH_KEYS`]
/// key, or one ending in `_at`, `-at` or `At`.
fn is_epoch_key(key: &str, squashed: &str) -> bool {
    TIMESTAMP_KEYS.contains(&squashed)
        || EPOCH_KEYS.contains(&squashed)
        || (key.len() > 3 && (key.ends_with("_at") || key.ends_with("-at") || key.ends_with("At")))
}

/// Dates in text: ISO 8601 / RFC 3339 (with or without a zone), JavaScript's
/// `Date.prototype.toString` (`Mon Dec 01 2026 07:20:00 GMT+0000 (Coordinated Universal Time)`)
/// and RFC 2822 (`Tue, 01 Dec 2026 07:20:00 +0000`).
fn timestamp_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        const DAY: &str = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)";
        const MONTH: &str = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)";
        let iso = r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b";
        let js = format!(
            r"\b{DAY} {MONTH} \d{{1,2}} \d{{4}} \d{{2}}:\d{{2}}:\d{{2}} GMT[+-]\d{{4}}(?: \([^()]*\))?"
        );
        let rfc2822 = format!(
            r"\b(?:{DAY}, )?\d{{1,2}} {MONTH} \d{{4}} \d{{2}}:\d{{2}}(?::\d{{2}})? (?:[+-]\d{{4}}|GMT|UTC?|[ECMP][SD]T)\b"
        );
        Regex::new(&format!("{js}|{rfc2822}|{iso}")).expect("valid regex")
    })
}

fn uuid_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
            .expect("valid regex")
    })
}

/// Epoch seconds (10 digits) or milliseconds (13 digits) from 2001-09-09 to the end of 2099.
fn is_epoch(n: &serde_json::Number) -> bool {
    const END_2099: f64 = 4_102_444_800.0;
    let Some(f) = n.as_f64() else { return false };
    (1.0e9..END_2099).contains(&f) || (1.0e12..END_2099 * 1000.0).contains(&f)
}

fn mask(v: &mut Value, key: Option<&str>) {
    let squashed = key.map(squash);
    let epoch_key = match (key, squashed.as_deref()) {
        (Some(k), Some(s)) => is_epoch_key(k, s),
        _ => false,
    };
    let role = squashed.as_deref().map(|k| {
        if TIMESTAMP_KEYS.contains(&k) {
            Some(MASK_TIMESTAMP)
        } else if ID_KEYS.contains(&k) {
            Some(MASK_ID)
        } else {
            None
        }
    });
    match v {
        Value::Object(map) => mask_map(map),
        Value::Array(items) => items.iter_mut().for_each(|i| mask(i, None)),
        Value::String(s) => {
            if let Some(Some(m)) = role {
                *s = m.to_string();
                return;
            }
            if s.len() >= 10 && s.as_bytes().iter().any(u8::is_ascii_digit) {
                let t = timestamp_re().replace_all(s, MASK_TIMESTAMP);
                let u = uuid_re().replace_all(&t, MASK_UUID);
                if u != s.as_str() {
                    *s = u.into_owned();
                }
            }
        }
        Value::Number(n) => {
            if epoch_key && is_epoch(n) {
                *v = Value::String(MASK_TIMESTAMP.into());
            } else if role == Some(Some(MASK_ID)) {
                *v = Value::String(MASK_ID.into());
            }
        }
        _ => {}
    }
}

fn mask_map(map: &mut Map<String, Value>) {
    for (k, child) in map.iter_mut() {
        mask(child, Some(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_timestamps_uuids_and_ids() {
        let n = Normalizer::new(true, &[], false).unwrap();
        let v = n.normalize(json!({
            "result": {
                "createdAt": 1764480000, "updated_at": "yesterday", "count": 1764480000,
                "sessionId": "abc", "note": "done at 2026-11-30T05:40:45.123Z by 123e4567-e89b-12d3-a456-426614174000",
                "plain": "2026 was a year"
            }
        }), "tools/call", None);
        assert_eq!(
            v,
            json!({"result": {
                "createdAt": "<timestamp>", "updated_at": "<timestamp>", "count": 1764480000,
                "sessionId": "<id>", "note": "done at <timestamp> by <uuid>", "plain": "2026 was a year"
            }})
        );
        let off = Normalizer::new(false, &[], false).unwrap();
        assert_eq!(
            off.normalize(json!({"sessionId": "abc"}), "tools/call", None),
            json!({"sessionId": "abc"})
        );
    }

    fn masked(v: Value) -> Value {
        Normalizer::new(true, &[], false)
            .unwrap()
            .normalize(v, "tools/call", None)
    }

    #[test]
    fn masks_javascript_rfc2822_and_zoneless_iso_dates_in_text() {
        for (text, want) in [
            (
                "at Mon Dec 01 2026 07:20:00 GMT+0000 (Coordinated Universal Time).",
                "at <timestamp>.",
            ),
            (
                "at Tue Dec 01 2026 08:20:00 GMT+0100, ok",
                "at <timestamp>, ok",
            ),
            (
                "sent Tue, 01 Dec 2026 07:20:00 +0000 ok",
                "sent <timestamp> ok",
            ),
            ("sent Tue, 01 Dec 2026 07:20:00 GMT", "sent <timestamp>"),
            ("sent 1 Dec 2026 07:20 -0500", "sent <timestamp>"),
            ("built 2026-12-01T07:20:00 here", "built <timestamp> here"),
            ("built 2026-12-01 07:20:00.123", "built <timestamp>"),
            ("built 2026-12-01T07:20:00+01:00", "built <timestamp>"),
            (
                "Dec 01 2026 is a day, 01 Dec 2026 too",
                "Dec 01 2026 is a day, 01 Dec 2026 too",
            ),
        ] {
            assert_eq!(
                masked(json!({"result": {"note": text}})),
                json!({"result": {"note": want}}),
                "{text}"
            );
        }
        let off = Normalizer::new(false, &[], false).unwrap();
        let js = json!({"note": "Mon Dec 01 2026 07:20:00 GMT+0000"});
        assert_eq!(off.normalize(js.clone(), "tools/call", None), js);
    }

    #[test]
    fn epoch_numbers_are_masked_under_time_like_keys_only() {
        let v = masked(json!({"result": {
            "mtime": 1764573600, "atime": 1764573600.25, "ctime": 1764573600123_u64,
            "created": 1764573600, "modified": 1764573600, "updated": 1764573600,
            "timestamp": 1764573600, "time": 1764573600, "date": 1764573600123_u64,
            "created_at": 1764573600, "updatedAt": 1764573600123_u64, "seen-at": 1764573600,
            "count": 1764573600, "size": 1764573600123_u64, "format": 1764573600,
            "mtime_small": 1764573600, "old": {"mtime": 999999999, "far": {"time": 4102444800_u64}}
        }}));
        let r = &v["result"];
        for k in [
            "mtime",
            "atime",
            "ctime",
            "created",
            "modified",
            "updated",
            "timestamp",
            "time",
            "date",
            "created_at",
            "updatedAt",
            "seen-at",
        ] {
            assert_eq!(r[k], json!("<timestamp>"), "{k}: {v}");
        }
        // Elsewhere, or outside 2001–2099, a number is a number.
        assert_eq!(r["count"], json!(1764573600));
        assert_eq!(r["size"], json!(1764573600123_u64));
        assert_eq!(r["format"], json!(1764573600));
        assert_eq!(r["mtime_small"], json!(1764573600));
        assert_eq!(
            r["old"],
            json!({"mtime": 999999999, "far": {"time": 4102444800_u64}})
        );
        // A string under one of these keys is masked only where it holds a date.
        let v = masked(json!({"created": "by alice", "updated": "Tue, 01 Dec 2026 07:20:00 GMT"}));
        assert_eq!(v, json!({"created": "by alice", "updated": "<timestamp>"}));
        let off = Normalizer::new(false, &[], false).unwrap();
        assert_eq!(
            off.normalize(json!({"mtime": 1764573600}), "tools/call", None),
            json!({"mtime": 1764573600})
        );
    }

    #[test]
    fn json_in_text_is_parsed_and_ignore_paths_removed() {
        let n = Normalizer::new(
            false,
            &[
                "$.result.content[*].text.population".into(),
                "$..debug".into(),
            ],
            false,
        )
        .unwrap();
        let v = n.normalize(
            json!({"result": {"content": [
            {"type": "text", "text": "{\"name\":\"Lisbon\",\"population\":5}"},
            {"type": "text", "text": "not json {"}
        ], "debug": {"x": 1}}}),
            "tools/call",
            None,
        );
        assert_eq!(
            v,
            json!({"result": {"content": [
                {"type": "text", "text": {"name": "Lisbon"}},
                {"type": "text", "text": "not json {"}
            ]}})
        );
    }

    #[test]
    fn ignore_paths_scoped_to_a_method_or_a_tool() {
        let n = Normalizer::new(
            false,
            &[
                "tools/call:get_file_info:$.result.content[0].text".into(),
                "resources/read:$.result.contents[*].text".into(),
                "resources/read:file:///a:b.txt:$.result.x".into(),
                "$..debug".into(),
            ],
            false,
        )
        .unwrap();
        let scopes: Vec<_> = n.ignore.iter().map(|p| p.scope.clone()).collect();
        let scope = |m: &str, t: Option<&str>| {
            Some(Scope {
                method: m.into(),
                target: t.map(Into::into),
            })
        };
        assert_eq!(
            scopes,
            [
                scope("tools/call", Some("get_file_info")),
                scope("resources/read", None),
                scope("resources/read", Some("file:///a:b.txt")),
                None
            ]
        );
        let call = json!({"result": {"content": [{"type": "text", "text": "now"}], "debug": 1}});
        assert_eq!(
            n.normalize(call.clone(), "tools/call", Some("get_file_info")),
            json!({"result": {"content": [{"type": "text"}]}})
        );
        assert_eq!(
            n.normalize(call.clone(), "tools/call", Some("other")),
            json!({"result": {"content": [{"type": "text", "text": "now"}]}})
        );
        let read = json!({"result": {"contents": [{"uri": "u", "text": "now"}], "x": 1}});
        assert_eq!(
            n.normalize(read.clone(), "resources/read", Some("u")),
            json!({"result": {"contents": [{"uri": "u"}], "x": 1}})
        );
        assert_eq!(
            n.normalize(read.clone(), "resources/read", Some("file:///a:b.txt")),
            json!({"result": {"contents": [{"uri": "u"}]}})
        );
        assert_eq!(n.normalize(read.clone(), "tools/call", Some("u")), read);
    }

    #[test]
    fn bad_scoped_ignore_paths_are_refused() {
        for (spec, says) in [
            ("tools/call:get_file_info", "expected a JSONPath"),
            (":$.result", "\"\" is not a method name"),
            ("tools call:$.result", "is not a method name"),
            (
                "tools/call::$.result",
                "is not a tool, prompt or resource name",
            ),
            ("initialize:x:$.result", "initialize names no tool"),
            (
                "tools/call:add:$[",
                "invalid --ignore-path \"tools/call:add:$[\"",
            ),
        ] {
            let e = Normalizer::new(false, &[spec.into()], false).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(says), "{spec}: {e}");
            assert!(e.contains(&format!("{spec:?}")), "{spec}: {e}");
        }
    }

    #[test]
    fn bad_ignore_paths_are_refused() {
        let e = Normalizer::new(false, &["$[".into()], false).unwrap_err();
        assert!(
            e.to_string().contains("invalid --ignore-path \"$[\""),
            "{e}"
        );
    }
}
