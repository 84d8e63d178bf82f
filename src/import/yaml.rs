//! A YAML document read as JSON with its integers kept exactly. `serde_json::Value` (built
//! without `arbitrary_precision`) holds no integer beyond 64 bits, so a YAML transcript with one
//! (`12345678901234567890123`) was refused ("number out of range"); [`Node`] keeps the digits,
//! and writes them back as the same JSON number.
//!
//! serde_yaml reads a plain integer up to 128 bits as one; beyond that it hands over the nearest
//! `f64`, the digits lost. Such a number is refused naming its line ([`huge_int_line`]), never
//! written as another number.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;

/// One YAML node, as JSON. Mappings are sorted by key, a repeated key's last value kept (as
/// `serde_json::Value` does).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    /// An integer, as its decimal digits (a `-` first when negative): any integer serde_yaml
    /// reads as one (up to 128 bits).
    Int(String),
    /// A number with a fraction or an exponent (or `.inf`, `.nan`: `null` in JSON, as
    /// `serde_json` writes them).
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(BTreeMap<String, Node>),
}

impl Node {
    /// The member `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(m) => m.get(key),
            _ => None,
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self, Node::Map(_))
    }

    pub fn as_array(&self) -> Option<&[Node]> {
        match self {
            Node::Seq(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Node::Int(digits) => digits.parse().ok(),
            _ => None,
        }
    }

    /// The node as compact JSON text: integers as their digits, whatever their size.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a Node serializes")
    }

    /// The node as a `serde_json::Value`, for what is only looked at (not written to a tape):
    /// there an integer beyond 64 bits is its nearest `f64`.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.to_json()).unwrap_or(Value::Null)
    }

    /// Whether a number in it may be an integer serde_yaml could not keep: a float with no
    /// fraction beyond the 128-bit integers (`1e40` written as such is one too; only the text
    /// tells them apart).
    pub fn has_huge_float(&self) -> bool {
        match self {
            Node::Float(f) => f.fract() == 0.0 && (*f >= 2f64.powi(128) || *f < -(2f64.powi(127))),
            Node::Seq(s) => s.iter().any(Node::has_huge_float),
            Node::Map(m) => m.values().any(Node::has_huge_float),
            _ => false,
        }
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            // The digits as they are: a JSON number of any size (serde_json writes a raw value
            // as its text).
            Node::Int(digits) => match serde_json::value::RawValue::from_string(digits.clone()) {
                Ok(raw) => raw.serialize(s),
                Err(_) => s.serialize_str(digits),
            },
            Node::Float(f) => s.serialize_f64(*f),
            Node::Str(t) => s.serialize_str(t),
            Node::Seq(items) => s.collect_seq(items),
            Node::Map(m) => s.collect_map(m),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value JSON holds")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
                Ok(Node::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Node, E> {
                Ok(Node::Int(n.to_string()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Node, E> {
                Ok(Node::Int(n.to_string()))
            }
            fn visit_i128<E>(self, n: i128) -> Result<Node, E> {
                Ok(Node::Int(n.to_string()))
            }
            fn visit_u128<E>(self, n: u128) -> Result<Node, E> {
                Ok(Node::Int(n.to_string()))
            }
            fn visit_f64<E>(self, f: f64) -> Result<Node, E> {
                Ok(Node::Float(f))
            }
            fn visit_str<E>(self, s: &str) -> Result<Node, E> {
                Ok(Node::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Node, E> {
                Ok(Node::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = seq.next_element()? {
                    out.push(n);
                }
                Ok(Node::Seq(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Node>()? {
                    out.insert(k, v);
                }
                Ok(Node::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The 1-based line of the first plain YAML integer (`123…`, `-123…`, standing alone as a
/// value: after the start of the line, `: `, `- `, `[`, `{` or `,`, and before the end of the
/// line, `,`, `]`, `}` or a comment) that 128 bits do not hold: one serde_yaml reads as the
/// nearest `f64`. A look at the text, line by line: looked for only when the document read has
/// such a float ([`Node::has_huge_float`]).
pub(crate) fn huge_int_line(text: &str) -> Option<usize> {
    for (n, line) in text.lines().enumerate() {
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if !b[i].is_ascii_digit() {
                i += 1;
                continue;
            }
            let digits_at = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let signed = digits_at > 0 && matches!(b[digits_at - 1], b'-' | b'+');
            let start = if signed { digits_at - 1 } else { digits_at };
            let opens = start == 0 || matches!(b[start - 1], b' ' | b'\t' | b'[' | b'{' | b',');
            let before = line[..start].trim_end();
            let value_starts =
                before.is_empty() || before.ends_with([':', '-', '[', '{', ',', '?']);
            let after = line[i..].trim_start();
            let ends = after.is_empty()
                || after.starts_with([',', ']', '}'])
                || (after.starts_with('#') && i < b.len() && b[i] == b' ');
            let digits = &line[digits_at..i];
            // `0123` is a string to YAML 1.2, not a number.
            let number = !(digits.len() > 1 && digits.starts_with('0'));
            if opens && value_starts && ends && number {
                let token = &line[start..i];
                let held = token.parse::<u128>().is_ok() || token.parse::<i128>().is_ok();
                if !held {
                    return Some(n + 1);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Node {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn integers_up_to_128_bits_are_kept_as_their_digits() {
        let n = read("a: 12345678901234567890123\nb: -170141183460469231731687303715884105728\nc: 340282366920938463463374607431768211455\nd: 7\ne: 1.5\nf: x\ng: [1, null, true]\n");
        assert_eq!(
            n.to_json(),
            r#"{"a":12345678901234567890123,"b":-170141183460469231731687303715884105728,"c":340282366920938463463374607431768211455,"d":7,"e":1.5,"f":"x","g":[1,null,true]}"#
        );
        assert!(!n.has_huge_float());
        assert_eq!(n.get("d").and_then(Node::as_u64), Some(7));
        assert_eq!(n.get("a").and_then(Node::as_u64), None);
    }

    #[test]
    fn a_larger_integer_is_found_by_its_line_and_a_float_is_not_taken_for_one() {
        let big = "340282366920938463463374607431768211456"; // 2^128
        let text = format!("a: 1\nb:\n- x\n- {big}\n");
        assert!(read(&text).has_huge_float());
        assert_eq!(huge_int_line(&text), Some(4));
        for text in [
            format!("a: [1, -{big}0]\n"),
            format!("a: {{k: {big}}}\n"),
            format!("a: {big} # a comment\n"),
        ] {
            assert!(read(&text).has_huge_float(), "{text}");
            assert_eq!(huge_int_line(&text), Some(1), "{text}");
        }
        // Floats, strings, and digits inside other scalars.
        for text in [
            "a: 1.0e+40\n".to_string(),
            format!("a: '{big}'\n"),
            format!("a: x{big}\n"),
            format!("a: 0{big}\n"),
            format!("a: {big}.5\n"),
        ] {
            assert_eq!(huge_int_line(&text), None, "{text}");
        }
    }
}
