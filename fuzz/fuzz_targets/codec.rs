//! The line codec: any chunking of a stream gives the frames of the stream fed whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::wire::{Frame, Framer};

#[derive(Debug, PartialEq)]
enum Owned {
    Line(Vec<u8>, bool, bool, bool),
    Over(u64, Vec<u8>),
}

fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Owned> {
    let mut f = Framer::new(max);
    let mut out = Vec::new();
    let mut push = |fr: Frame<'_>| {
        out.push(match fr {
            Frame::Line(l) => Owned::Line(l.bytes.to_vec(), l.crlf, l.unterminated, l.bom),
            Frame::Oversize { len, head } => Owned::Over(len, head),
        })
    };
    for c in chunks {
        f.push(c, &mut push);
    }
    f.finish(&mut push);
    out
}

fuzz_target!(|data: &[u8]| {
    // First byte: the size limit (1..=256); second: a seed for the chunk sizes.
    let (max, seed, stream) = match data {
        [a, b, rest @ ..] => (*a as usize + 1, *b as usize, rest),
        _ => return,
    };
    let whole = frames(max, &[stream]);
    let mut chunks = Vec::new();
    let mut rest = stream;
    let mut k = seed;
    while !rest.is_empty() {
        k = k.wrapping_mul(31).wrapping_add(7);
        let n = (k % 17 + 1).min(rest.len());
        chunks.push(&rest[..n]);
        rest = &rest[n..];
    }
    let chunked = frames(max, &chunks);
    // The kept head of an over-long line once depended on chunking (bug 4 in
    // docs/reliability.md; corpus/codec/crash-oversize-head-chunking): now everything must agree.
    assert_eq!(chunked, whole, "chunking changed the frames");
    // Nothing is lost: every non-blank byte is in a frame (lines) or counted (oversize).
    for f in &whole {
        match f {
            Owned::Line(b, ..) => assert!(b.len() <= max + 3, "a kept line is within the limit"),
            Owned::Over(len, head) => {
                assert!(*len as usize > max);
                assert!(head.len() <= 256 && head.len() as u64 <= *len);
            }
        }
    }
});
