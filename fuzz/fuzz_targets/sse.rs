//! The SSE parser: any chunking of a stream gives the same blocks as the stream fed whole, every
//! input byte (after a leading BOM) is accounted for, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::fuzz_api::SseParser;

fn blocks(chunks: &[&[u8]]) -> Vec<(Vec<u8>, bool)> {
    let mut p = SseParser::new(1 << 16);
    let mut out = Vec::new();
    for c in chunks {
        out.extend(p.push(c).into_iter().map(|b| (b.raw, b.event.is_some())));
    }
    out.extend(p.finish().map(|b| (b.raw, b.event.is_some())));
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let whole = blocks(&[stream]);
    // Chunk sizes from the seed: 1..=8 bytes, cycling.
    let mut chunks = Vec::new();
    let mut rest = stream;
    let mut k = seed as usize;
    while !rest.is_empty() {
        let n = (k % 8 + 1).min(rest.len());
        chunks.push(&rest[..n]);
        rest = &rest[n..];
        k = k.wrapping_mul(31).wrapping_add(7);
    }
    let split = blocks(&chunks);
    assert_eq!(whole, split, "chunking changed the blocks");
    let joined: Vec<u8> = whole.iter().flat_map(|(raw, _)| raw.clone()).collect();
    let body = stream
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .filter(|_| stream.len() >= 3)
        .unwrap_or(stream);
    assert_eq!(joined, body, "bytes lost or invented");
});
