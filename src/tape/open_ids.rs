//! The requests a recording has seen go out and not yet come back, by id, for the closing line's
//! count of exchanges. Asked twice a round trip on the recorder's hot path, so the usual ids
//! (JSON integers: clients number their requests) are kept as numbers: no `String` made for a
//! request, and one lookup a message instead of two. In place, keying every id by its text
//! cost about 0.2 µs a round trip (docs/performance.md, round ten).

use crate::wire::{Dir, Kind};
use std::collections::hash_map::{Entry, HashMap};

/// The closing line's count of exchanges, made as the lines go by: a client's request that the
/// server answered. The writer counts with it, and so does every reader that counts a tape's
/// lines itself (one without its closing line), so that they all count as the writer does.
#[derive(Debug, Default)]
pub(crate) struct Exchanges {
    /// Requests still waiting for an answer, by id: `[client's, server's]`.
    open: [OpenIds; 2],
}

impl Exchanges {
    /// A message of `kind` with id text `id` went `dir`: whether it answered a client's request
    /// (one exchange more).
    #[inline]
    pub(crate) fn message(&mut self, dir: Dir, kind: Kind, id: Option<&str>) -> bool {
        match (kind, id) {
            (Kind::Request, Some(id)) => {
                self.open[side(dir)].opened(id);
                false
            }
            (Kind::Response | Kind::Error, Some(id)) => self.answer(dir, id),
            _ => false,
        }
    }

    /// An answer with id text `id` went `dir` (an `oversize` one's id read from its head, as
    /// readers pair it): whether it answered a client's request.
    pub(crate) fn answer(&mut self, dir: Dir, id: &str) -> bool {
        // The request went the other way.
        let was_open = self.open[1 - side(dir)].answered(id);
        was_open && dir == Dir::S2C
    }

    /// A message line read back from a tape: whether it answered a client's request. An
    /// `oversize` line answers by the id it carries, else by the one its head gives (as the
    /// index pairs it).
    pub(crate) fn line(&mut self, m: &super::format::MsgLine<'_>) -> bool {
        let id = m.id.map(|id| id.get());
        if m.kind != Kind::Oversize {
            return self.message(m.dir, m.kind, id);
        }
        match id {
            Some(id) => self.answer(m.dir, id),
            None => oversize_answer_id(m).is_some_and(|id| self.answer(m.dir, &id)),
        }
    }
}

/// The id an `oversize` line's head (its `b64`) answers, when it is an answer's with the id
/// before the body.
fn oversize_answer_id(m: &super::format::MsgLine<'_>) -> Option<String> {
    use base64::Engine as _;
    let head = base64::engine::general_purpose::STANDARD
        .decode(m.b64.as_deref()?.as_bytes())
        .ok()?;
    crate::wire::head_facts(&head)
        .answer_id()
        .map(str::to_owned)
}

fn side(d: Dir) -> usize {
    match d {
        Dir::C2S => 0,
        Dir::S2C => 1,
    }
}

/// Open requests of one direction, each id with how many requests carry it (a client may reuse
/// an id; each answer closes one).
#[derive(Debug, Default)]
pub(crate) struct OpenIds {
    /// Ids that are canonical JSON integers (see [`int_id`]). std's hasher, not a faster
    /// unkeyed one: the ids come from the peers, and a peer could pick colliding ones.
    ints: HashMap<i64, u32>,
    /// Any other id, by its JSON text (`"abc"`, `1.0`, `-0`, `1e3`).
    texts: HashMap<String, u32>,
}

impl OpenIds {
    /// A request with id text `id` went out.
    pub(crate) fn opened(&mut self, id: &str) {
        let id = &*id_key(id);
        match int_id(id) {
            Some(n) => *self.ints.entry(n).or_insert(0) += 1,
            None => match self.texts.get_mut(id) {
                Some(n) => *n += 1,
                None => {
                    self.texts.insert(id.to_owned(), 1);
                }
            },
        }
    }

    /// An answer with id text `id` came back: whether it closed an open request.
    pub(crate) fn answered(&mut self, id: &str) -> bool {
        let id = &*id_key(id);
        match int_id(id) {
            Some(n) => match self.ints.entry(n) {
                Entry::Occupied(mut e) => {
                    if *e.get() > 1 {
                        *e.get_mut() -= 1;
                    } else {
                        e.remove();
                    }
                    true
                }
                Entry::Vacant(_) => false,
            },
            None => match self.texts.get_mut(id) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    true
                }
                Some(_) => self.texts.remove(id).is_some(),
                None => false,
            },
        }
    }
}

/// Whether two id texts (`None`: no id) name the same id, as answers are paired with requests
/// (see [`id_key`]).
pub(crate) fn same_id(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b || id_key(a) == id_key(b),
        (None, None) => true,
        _ => false,
    }
}

/// The key an id text is paired by: the text itself, except that a string id spelled with
/// escapes is keyed by its canonical spelling (escapes decoded, then written as serde_json
/// writes a string). JSON-RPC answers carry the request's id *value*, and a server that parses
/// and re-writes it spells a string its own way: a client's `"r-é"` comes back `"r-\u00e9"`
/// from Python's `json`, `"a\/b"` comes back `"a/b"` from JavaScript; keyed by text, no
/// answer of such a session was paired. Numbers stay keyed by their text (`1` and `1.0`
/// differ, see [`int_id`]); a string that does not decode (a lone surrogate) too.
pub(crate) fn id_key(id: &str) -> std::borrow::Cow<'_, str> {
    if id.starts_with('"') && id.contains('\\') {
        if let Ok(s) = serde_json::from_str::<String>(id) {
            if let Ok(text) = serde_json::to_string(&s) {
                return std::borrow::Cow::Owned(text);
            }
        }
    }
    std::borrow::Cow::Borrowed(id)
}

/// The value of an id text that is a JSON integer written the one way an `i64` is written
/// (`0`, `-12`, `1234`): no sign but a leading `-`, no leading zero, not `-0`, within `i64`.
/// Any other text is `None` and keyed by its text, so two ids match exactly when their texts
/// do, as before numbers had their own table (`1` and `1.0`, `0` and `-0` stay apart).
fn int_id(id: &str) -> Option<i64> {
    let digits = id.strip_prefix('-').unwrap_or(id).as_bytes();
    let canonical = match digits {
        [] => false,
        [b'0'] => digits.len() == id.len(), // `0`, not `-0`
        [first, rest @ ..] => {
            // At most 19 digits: i64's range, checked by `parse`.
            (b'1'..=b'9').contains(first) && rest.len() < 19 && rest.iter().all(u8::is_ascii_digit)
        }
    };
    if canonical {
        id.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The table as it was: every id by its text.
    #[derive(Default)]
    struct ByText(HashMap<String, u32>);

    impl ByText {
        fn opened(&mut self, id: &str) {
            *self.0.entry(id.to_owned()).or_insert(0) += 1;
        }
        fn answered(&mut self, id: &str) -> bool {
            match self.0.get_mut(id) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    true
                }
                Some(_) => self.0.remove(id).is_some(),
                None => false,
            }
        }
    }

    #[test]
    fn integers_are_read_only_when_written_as_an_i64_is() {
        for (text, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("99999999999999999999", None),
            ("-0", None),
            ("00", None),
            ("01", None),
            ("+1", None),
            ("1.0", None),
            ("1e3", None),
            ("\"1\"", None),
            ("-", None),
            ("", None),
            (" 1", None),
            ("1 ", None),
        ] {
            assert_eq!(int_id(text), want, "{text:?}");
        }
    }

    #[test]
    fn same_id_is_the_pairing_rule() {
        assert!(same_id(Some(r#""r-é""#), Some(r#""r-\u00e9""#)));
        assert!(same_id(Some(r#""a\/b""#), Some(r#""a/b""#)));
        assert!(!same_id(Some("1"), Some("1.0")));
        assert!(!same_id(Some("1"), None));
        assert!(!same_id(None, Some(r#""server-error""#)));
        assert!(same_id(None, None));
    }

    #[test]
    fn a_string_id_is_paired_however_it_is_escaped() {
        let mut open = OpenIds::default();
        open.opened(r#""init-é""#);
        open.opened(r#""a\/b""#);
        assert!(open.answered(r#""init-\u00e9""#));
        assert!(open.answered(r#""a/b""#));
        assert!(!open.answered(r#""a/b""#));
        // Numbers and undecodable strings keep their text.
        assert_eq!(id_key("1.0"), "1.0");
        assert_eq!(id_key(r#""\ud800""#), r#""\ud800""#);
        assert_eq!(id_key(r#""\u0041\n""#), r#""A\n""#);
    }

    fn id_text() -> impl Strategy<Value = String> {
        prop_oneof![
            (0i64..20).prop_map(|n| n.to_string()),
            (-3i64..3).prop_map(|n| n.to_string()),
            Just("-0".to_string()),
            Just("1.0".to_string()),
            Just("01".to_string()),
            Just("\"1\"".to_string()),
            Just("\"a\"".to_string()),
            Just("9223372036854775807".to_string()),
            Just("9223372036854775808".to_string()),
            Just("null".to_string()),
        ]
    }

    proptest! {
        /// Opened and answered in any order, the table answers as the text-keyed one did.
        #[test]
        fn answers_as_the_table_keyed_by_text(
            steps in proptest::collection::vec((any::<bool>(), id_text()), 0..200)
        ) {
            let (mut new, mut old) = (OpenIds::default(), ByText::default());
            for (open, id) in &steps {
                if *open {
                    new.opened(id);
                    old.opened(id);
                } else {
                    prop_assert_eq!(new.answered(id), old.answered(id), "{}", id);
                }
            }
        }
    }
}
