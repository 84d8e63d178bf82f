//! Micro-benchmark of play's matcher: a tape of recorded `tools/call` exchanges is written with
//! the library's `TapeWriter`, indexed, and every request looked up once.
//! Run: `cargo bench --bench matcher`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use mcptape::play::matcher::{Matcher, Outcome};
use mcptape::tape::{ServerDecl, TapeIndex, TapeWriter, WriteOptions};
use mcptape::wire::{Dir, Frame};
use std::hint::black_box;
use std::time::Instant;

const EXCHANGES: u64 = 10_000;

fn line(bytes: &[u8]) -> Frame<'_> {
    Frame::whole(bytes)
}

fn request(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id},"city":"Paris"}}}}}}"#
    )
}

fn write_tape(path: &std::path::Path) {
    let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
    w.declare_server(ServerDecl::stdio("bench", vec!["bench".into()]))
        .unwrap();
    for id in 0..EXCHANGES {
        let req = request(id);
        let res = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"answer {id}"}}]}}}}"#
        );
        w.message("bench", Dir::C2S, &line(req.as_bytes()), Instant::now());
        w.message("bench", Dir::S2C, &line(res.as_bytes()), Instant::now());
        w.commit().unwrap();
    }
    w.finish(None, None).unwrap();
}

fn matcher(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("matcher.jsonl");
    write_tape(&path);
    let mut g = c.benchmark_group("matcher");
    g.sample_size(10);
    g.bench_function("index-load/10k-exchanges", |b| {
        b.iter(|| black_box(TapeIndex::load(&path, None).unwrap().exchanges.len()))
    });
    let index = TapeIndex::load(&path, None).unwrap();
    let asks: Vec<serde_json::Value> = (0..EXCHANGES)
        .map(|id| serde_json::from_str::<serde_json::Value>(&request(id)).unwrap()["params"].take())
        .collect();
    g.bench_function("take/10k-requests", |b| {
        b.iter_batched_ref(
            || Matcher::new(&index),
            |m| {
                for p in &asks {
                    match m.take(&index, "tools/call", Some(p), false) {
                        Outcome::Hit(ex) => {
                            black_box(ex);
                        }
                        _ => panic!("every recorded request matches"),
                    }
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, matcher);
criterion_main!(benches);
