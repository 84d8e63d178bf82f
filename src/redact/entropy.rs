//! The entropy rule: a long, mixed, opaque token is a credential even without a known shape.

use super::rules;

/// Is this whole string a long opaque token (see `rules::ENTROPY_*`)?
pub(crate) fn is_high_entropy(s: &str) -> bool {
    let n = s.len();
    if !(rules::ENTROPY_MIN_LEN..=rules::ENTROPY_MAX_LEN).contains(&n) {
        return false;
    }
    let bytes = s.as_bytes();
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(b))
    {
        return false;
    }
    if rules::NOT_SECRET_PREFIXES.iter().any(|p| s.starts_with(p)) {
        return false;
    }
    // A path or file name (`docs/Architecture-Overview-2024.md`) is not a token.
    let file_like = s.rsplit_once('.').is_some_and(|(_, ext)| {
        (1..=5).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphabetic())
    });
    if s.contains('/') && file_like {
        return false;
    }
    let digits = bytes.iter().filter(|b| b.is_ascii_digit()).count();
    if (digits as f64) < rules::ENTROPY_MIN_DIGITS * n as f64 {
        return false;
    }
    let (upper, lower, digit) = (
        bytes.iter().any(u8::is_ascii_uppercase),
        bytes.iter().any(u8::is_ascii_lowercase),
        bytes.iter().any(u8::is_ascii_digit),
    );
    if !(upper && lower && digit) {
        return false;
    }
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum();
    entropy >= rules::ENTROPY_MIN_BITS
}
