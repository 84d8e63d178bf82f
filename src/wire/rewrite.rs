//! Order-preserving edits of one top-level field of a JSON object, leaving every other byte of
//! the other fields as recorded. Used to give a recorded response the client's id and a recorded
//! progress notification the client's progress token.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// The top-level members of an object, in order, each value kept as raw JSON text.
pub struct RawObject<'a>(pub Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) =
                    map.next_entry::<std::borrow::Cow<'de, str>, &'de RawValue>()?
                {
                    out.push((k, v));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl RawObject<'_> {
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Serializes back, replacing (or appending) `key` with `value` (raw JSON text).
    pub fn to_string_with(&self, key: &str, value: &str) -> String {
        let mut out = String::with_capacity(
            self.0
                .iter()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>()
                + value.len()
                + 16,
        );
        out.push('{');
        let mut replaced = false;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(k.as_ref()).expect("string serializes"));
            out.push(':');
            if k == key {
                out.push_str(value);
                replaced = true;
            } else {
                out.push_str(v.get());
            }
        }
        if !replaced {
            if !self.0.is_empty() {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).expect("string serializes"));
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

/// `message` with its top-level `id` replaced by `id` (raw JSON text).
pub fn with_id(message: &str, id: &str) -> Result<String, serde_json::Error> {
    let obj: RawObject<'_> = serde_json::from_str(message)?;
    Ok(obj.to_string_with("id", id))
}

/// A `notifications/progress` message with `params.progressToken` replaced by `token`.
pub fn with_progress_token(message: &str, token: &str) -> Result<String, serde_json::Error> {
    let obj: RawObject<'_> = serde_json::from_str(message)?;
    let Some(params) = obj.get("params") else {
        return Ok(message.to_string());
    };
    let params: RawObject<'_> = serde_json::from_str(params.get())?;
    let new_params = params.to_string_with("progressToken", token);
    Ok(obj.to_string_with("params", &new_params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_replaced_and_the_rest_kept_byte_for_byte() {
        let m = r#"{"jsonrpc":"2.0","id":3,"result":{"z": 1,  "a":[1, 2]}}"#;
        assert_eq!(
            with_id(m, r#""abc""#).unwrap(),
            r#"{"jsonrpc":"2.0","id":"abc","result":{"z": 1,  "a":[1, 2]}}"#
        );
    }

    #[test]
    fn progress_token_is_replaced() {
        let m =
            r#"{"method":"notifications/progress","params":{"progressToken":"r1","progress":1}}"#;
        assert_eq!(
            with_progress_token(m, "42").unwrap(),
            r#"{"method":"notifications/progress","params":{"progressToken":42,"progress":1}}"#
        );
    }
}
