//! Writing JSON text the way `serde_json` writes it, without its serializer for the common
//! case: a tape line's keys, labels and fact values are short strings that need no escape,
//! and going through `serde_json::to_writer` for each (a serializer, a formatter, an escape
//! table walk that then copies the bytes anyway) cost more than the copy itself.

/// Appends `s` as a JSON string, byte for byte what `serde_json::to_writer(out, s)` appends.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    if !needs_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, s).expect("strings serialize");
    }
}

/// Whether serde_json would escape a byte of `b`: `"`, `\` or a control character below
/// 0x20, nothing else. Eight bytes a step (a byte-at-a-time loop cost more than the copy).
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Bit Twiddling Hacks' `hasless(x, n)`: some byte of `x` is below `n` (exact as a
    // yes or no for n <= 128).
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_ne_bytes(w.try_into().expect("eight bytes"));
        if below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1)
            != 0
        {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&c| c < 0x20 || c == b'"' || c == b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde(s: &str) -> Vec<u8> {
        serde_json::to_vec(s).expect("strings serialize")
    }

    #[test]
    fn strings_are_written_as_serde_writes_them() {
        for s in [
            "",
            "plain",
            "application/json, text/event-stream",
            "quote\"inside",
            "back\\slash",
            "new\nline",
            "\u{1f}unit separator",
            "\u{7f} delete is not escaped",
            "ünïcödé and 😀",
            "</script>",
        ] {
            let mut ours = b"x".to_vec();
            push_str(&mut ours, s);
            assert_eq!(ours[1..], serde(s)[..], "{s:?}");
        }
    }

    /// Each byte serde escapes, and the ones next to them it does not, at every place of a
    /// string (the word loop and the remainder loop both see each).
    #[test]
    fn each_escaped_byte_is_found_wherever_it_is() {
        for len in 1..20 {
            for at in 0..len {
                for c in [
                    '\0', '\u{1f}', ' ', '"', '!', '#', '\\', '[', ']', '\u{7f}', 'é',
                ] {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    let mut ours = Vec::new();
                    push_str(&mut ours, &s);
                    assert_eq!(ours, serde(&s), "{s:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_strings_are_written_as_serde_writes_them(s in any::<String>()) {
            let mut ours = Vec::new();
            push_str(&mut ours, &s);
            prop_assert_eq!(ours, serde(&s));
        }

        #[test]
        fn random_ascii_strings_are_written_as_serde_writes_them(s in "[\\x00-\\x7f]{0,40}") {
            let mut ours = Vec::new();
            push_str(&mut ours, &s);
            prop_assert_eq!(ours, serde(&s));
        }
    }
}
