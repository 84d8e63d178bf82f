//! Micro-benchmarks of the wire layer on the record path: framing, classification and
//! canonicalization of typical MCP messages. Run: `cargo bench --bench wire`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mcptape::wire::canonical::{canonical, match_params};
use mcptape::wire::{classify, Frame, Framer, DEFAULT_MAX_MESSAGE};
use std::hint::black_box;

fn call_request(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id},"size":1024,"city":"Paris"}},"_meta":{{"progressToken":{id}}}}}}}"#
    )
}

fn call_result(id: u64, size: usize) -> String {
    let text = "the quick brown fox jumps over the lazy dog; ".repeat(size / 45 + 1);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{}"}}],"isError":false}}}}"#,
        &text[..size]
    )
}

/// A stream of 1 KiB exchanges, as the relay reads it.
fn stream(exchanges: u64) -> Vec<u8> {
    let mut s = Vec::new();
    for id in 0..exchanges {
        s.extend_from_slice(call_request(id).as_bytes());
        s.push(b'\n');
        s.extend_from_slice(call_result(id, 1000).as_bytes());
        s.push(b'\n');
    }
    s
}

fn codec(c: &mut Criterion) {
    let data = stream(256);
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for chunk in [4096usize, 65536] {
        g.bench_function(format!("framer/{chunk}B-chunks"), |b| {
            b.iter_batched_ref(
                || Framer::new(DEFAULT_MAX_MESSAGE),
                |f| {
                    let mut n = 0usize;
                    for part in data.chunks(chunk) {
                        f.push(part, |frame| {
                            if let Frame::Line(l) = frame {
                                n += l.bytes.len();
                            }
                        });
                    }
                    black_box(n)
                },
                BatchSize::SmallInput,
            )
        });
    }
    let big = call_result(1, 8 << 20).into_bytes();
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("framer/8MiB-line-64KiB-chunks", |b| {
        b.iter_batched_ref(
            || Framer::new(DEFAULT_MAX_MESSAGE),
            |f| {
                for part in big.chunks(65536) {
                    f.push(part, |frame| {
                        black_box(&frame);
                    });
                }
                f.finish(|frame| {
                    black_box(&frame);
                });
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn classifier(c: &mut Criterion) {
    let req = call_request(42);
    let res = call_result(42, 1000);
    let big = call_result(42, 8 << 20);
    let mut g = c.benchmark_group("classify");
    for (name, msg) in [
        ("request", &req),
        ("result-1KiB", &res),
        ("result-8MiB", &big),
    ] {
        g.throughput(Throughput::Bytes(msg.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| black_box(classify(black_box(msg.as_bytes()))))
        });
    }
    g.finish();
}

fn canonicalization(c: &mut Criterion) {
    let v: serde_json::Value = serde_json::from_str(&call_request(7)).unwrap();
    let params = v.get("params").cloned();
    let mut g = c.benchmark_group("canonical");
    g.bench_function("match_params+canonical/tools-call", |b| {
        b.iter(|| black_box(canonical(&match_params(black_box(params.as_ref())))))
    });
    g.finish();
}

criterion_group!(benches, codec, classifier, canonicalization);
criterion_main!(benches);
