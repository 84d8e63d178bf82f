//! The tape's hash chain. The header starts it: `h0 = SHA-256(header line)`. Every later line `i`
//! ends with `"h":"<hex>"`, where `h_i = SHA-256(h_{i-1} as hex ‖ line_i without its h field)`
//! and "without its h field" means the line with `,"h":"…"` removed before the closing brace.
//! Editing, deleting, inserting or swapping lines breaks the chain at the first line touched.
//!
//! An unkeyed chain shows accidents and naive edits; someone who rewrites a tape can recompute
//! it. Signing (`--sign`) adds `sig = HMAC-SHA256(key, head)` on the closing line, which cannot
//! be recomputed without the key.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What a closing line's `sig` starts with, before the hex.
pub(crate) const SIG_PREFIX: &str = "hmac-sha256:";

/// Lower-case hex of a 32-byte digest (SHA-256, HMAC-SHA256).
fn hex_digits(digest: &[u8]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (i, b) in digest.iter().take(32).enumerate() {
        out[2 * i] = DIGITS[(b >> 4) as usize];
        out[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    out
}

fn hex(digest: &[u8]) -> String {
    String::from_utf8(hex_digits(digest).to_vec()).expect("hex digits are ASCII")
}

/// The chain step over a line given in consecutive parts, as hex digits.
fn chained(prev: &str, parts: &[&[u8]]) -> [u8; 64] {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    for part in parts {
        h.update(part);
    }
    hex_digits(&h.finalize())
}

/// `h0`: the chain's start, from the header line (no newline).
pub(crate) fn start(header_line: &[u8]) -> String {
    hex(&Sha256::digest(header_line))
}

/// `h_i` from `h_{i-1}` and line `i` without its `h` field.
pub(crate) fn link(prev: &str, line_without_h: &[u8]) -> String {
    String::from_utf8(chained(prev, &[line_without_h]).to_vec()).expect("hex digits are ASCII")
}

/// `head` moved on in place over the next line, given in consecutive parts (hashed where they
/// lie, not copied): the writer's step for every message, which then allocates nothing.
pub(crate) fn advance(head: &mut String, parts: &[&[u8]]) {
    let next = chained(head, parts);
    head.clear();
    head.push_str(std::str::from_utf8(&next).expect("hex digits are ASCII"));
}

/// The signature of a closing line: an HMAC over the chain's head and the closing line itself
/// (serialized without `sig` and `h`), so neither the lines before nor the counts and exit status
/// on the closing line can change unnoticed.
pub(crate) fn sign(key: &[u8], head: &str, end: &super::format::End) -> String {
    let mut unsigned = end.clone();
    unsigned.sig = None;
    let line = serde_json::to_vec(&super::format::OwnedLine::End(&unsigned))
        .expect("tape records serialize");
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(head.as_bytes());
    mac.update(b"\n");
    mac.update(&line);
    format!("{SIG_PREFIX}{}", hex(&mac.finalize().into_bytes()))
}

/// Splits a stored line (no newline) into the line without its `h` field, and `h`.
pub(crate) fn split_h(line: &[u8]) -> Option<(Vec<u8>, &str)> {
    let (key_start, h) = locate_h(line)?;
    let mut without = line[..key_start].to_vec();
    without.push(b'}');
    Some((without, h))
}

/// Where a stored line's `h` field lies: the offset of `,"h":"` and the hex value. The line
/// without its `h` field is `line[..key_start]` followed by `}`, so it can be hashed in place.
pub(crate) fn locate_h(line: &[u8]) -> Option<(usize, &str)> {
    const TAIL: usize = 2; // `"}`
    const HEX: usize = 64;
    const KEY: &[u8] = b",\"h\":\"";
    if line.len() < KEY.len() + HEX + TAIL || !line.ends_with(b"\"}") {
        return None;
    }
    let h_start = line.len() - TAIL - HEX;
    let key_start = h_start - KEY.len();
    if &line[key_start..h_start] != KEY {
        return None;
    }
    let h = &line[h_start..line.len() - TAIL];
    if !all_hex(h) {
        return None;
    }
    // All ASCII hex digits: valid UTF-8.
    Some((key_start, std::str::from_utf8(h).ok()?))
}

/// `link(prev, line[..key_start] ‖ "}")` without copying the line, as lowercase hex bytes.
pub(crate) fn link_in_place(prev: &str, line: &[u8], key_start: usize) -> [u8; 64] {
    chained(prev, &[&line[..key_start], b"}"])
}

/// Whether every byte is an ASCII hex digit (`u8::is_ascii_hexdigit`), without an early exit so
/// that it vectorizes: asked of every chained line's 64-digit hash, byte by byte it was 8 % of a
/// cold index build.
pub(crate) fn all_hex(h: &[u8]) -> bool {
    h.iter().fold(true, |ok, &c| {
        // `c | 0x20` folds `A`–`F` onto `a`–`f` (and nothing else onto them).
        ok & (c.is_ascii_digit() | ((c | 0x20).wrapping_sub(b'a') < 6))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_hex_is_is_ascii_hexdigit_for_every_byte() {
        for c in 0..=255u8 {
            assert_eq!(all_hex(&[c]), c.is_ascii_hexdigit(), "{c:#x}");
            assert_eq!(all_hex(&[b'a', c, b'0']), c.is_ascii_hexdigit(), "{c:#x}");
        }
        assert!(all_hex(b""));
    }

    #[test]
    fn split_and_relink() {
        let line = br#"{"type":"msg","seq":1}"#;
        let h = link("abc", line);
        let stored = format!(r#"{{"type":"msg","seq":1,"h":"{h}"}}"#);
        let (without, got) = split_h(stored.as_bytes()).unwrap();
        assert_eq!(without, line);
        assert_eq!(got, h);
        assert!(split_h(br#"{"type":"msg"}"#).is_none());
        assert!(sign(b"k", &h, &Default::default()).starts_with(SIG_PREFIX));
    }

    #[test]
    fn link_in_place_agrees_with_split_and_link() {
        let line = br#"{"type":"msg","seq":1}"#;
        let h = link("abc", line);
        let stored = format!(r#"{{"type":"msg","seq":1,"h":"{h}"}}"#);
        let (key_start, got) = locate_h(stored.as_bytes()).unwrap();
        assert_eq!(got, h);
        assert_eq!(
            &link_in_place("abc", stored.as_bytes(), key_start),
            h.as_bytes()
        );
        assert!(locate_h(br#"{"type":"msg"}"#).is_none());
        let upper = stored.replace(&h, &h.to_uppercase());
        assert_eq!(
            split_h(upper.as_bytes()).map(|(_, h)| h.to_string()),
            locate_h(upper.as_bytes()).map(|(_, h)| h.to_string())
        );
    }
}
