//! JSON helpers shared by the formats: messages are taken from the other recorder's file as
//! written (its key order, its number spelling), only made one line, since a tape line holds
//! each message on one line and the other formats pretty-print theirs.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// `raw` without the whitespace between its tokens: the same JSON text on one line. Strings are
/// copied untouched (escapes included).
pub fn compact(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}

/// A JSON object's members in the order written, values kept as raw text.
pub struct Members<'a>(pub Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, &'a RawValue>()? {
                    out.push((k, v));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl Members<'_> {
    /// The object again, compact, without the members named in `drop_if_null` whose value is
    /// `null` (a Python model that dumps every field writes `"error": null` beside a `result`,
    /// which is not what went on the wire).
    pub fn to_line(&self, drop_if_null: &[&str]) -> String {
        let mut out = String::from("{");
        for (k, v) in &self.0 {
            if drop_if_null.contains(&k.as_str()) && v.get().trim() == "null" {
                continue;
            }
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(k).expect("a string serializes"));
            out.push(':');
            out.push_str(&compact(v.get()));
        }
        out.push('}');
        out
    }

    /// The raw value of member `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// Where a serde_json error is, for a message: `line L column C`.
pub fn at(e: &serde_json::Error) -> String {
    format!("line {} column {}", e.line(), e.column())
}

/// The error's message without serde_json's own ` at line L column C` suffix (said by [`at`]).
pub fn what(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_keeps_strings_order_and_numbers() {
        let raw = "{\n  \"b\": \"a  \\\" b\",\n  \"a\": [1.50, 2e3 ]\n}";
        assert_eq!(compact(raw), r#"{"b":"a  \" b","a":[1.50,2e3]}"#);
    }

    #[test]
    fn members_drop_only_the_named_nulls() {
        let m: Members<'_> = serde_json::from_str(
            r#"{"id": 1, "result": {"x": null}, "error": null, "data": null}"#,
        )
        .unwrap();
        assert_eq!(
            m.to_line(&["error", "result"]),
            r#"{"id":1,"result":{"x":null},"data":null}"#
        );
    }
}
