//! Property tests (issue 7): canonical JSON is idempotent and blind to key order and whitespace;
//! play serves any permutation of a recorded session's requests completely; diff calls a tape
//! and any reordering of its concurrent calls "same". Case counts keep the file well under a
//! minute.

use mcptape::tape::{ServerDecl, TapeIndex, TapeWriter, WriteOptions, DEFAULT_SERVER};
use mcptape::wire::canonical::{canonical, match_params};
use mcptape::wire::{Dir, Framer};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

// --- JSON values and their many spellings ----------------------------------------------------

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-z_\\-\u{e9}\u{1F600}\"\\\\/\n]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_$]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `v` as JSON text with object keys in an order chosen by `seed` and whitespace sprinkled in.
fn spell(v: &Value, seed: &mut u64, out: &mut String) {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as usize
    };
    let ws = [" ", "", "\n", "\t", "  "][next() % 5];
    out.push_str(ws);
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                spell(item, seed, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            // A seeded Fisher–Yates shuffle.
            for i in (1..keys.len()).rev() {
                *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                keys.swap(i, (*seed >> 33) as usize % (i + 1));
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                spell(&map[k.as_str()], seed, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn spelled(v: &Value, seed: u64) -> String {
    let mut s = seed;
    let mut out = String::new();
    spell(v, &mut s, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn canonical_is_idempotent_and_blind_to_key_order_and_whitespace(
        v in json_value(),
        s1 in any::<u64>(),
        s2 in any::<u64>(),
    ) {
        let a: Value = serde_json::from_str(&spelled(&v, s1)).unwrap();
        let b: Value = serde_json::from_str(&spelled(&v, s2)).unwrap();
        let c = canonical(&a);
        prop_assert_eq!(&c, &canonical(&b), "equal JSON, different spellings");
        let again: Value = serde_json::from_str(&c).unwrap();
        prop_assert_eq!(&canonical(&again), &c, "idempotent");
        // (Not `again == v`: without serde_json's float_roundtrip, a float's shortest text may
        // parse to its neighbour. Both sides of a match parse the same way, so this is benign.)
    }

    #[test]
    fn match_params_is_idempotent_and_blind_to_key_order(
        v in json_value(),
        token in any::<u32>(),
        state in "[a-z0-9]{0,12}",
        s1 in any::<u64>(),
        s2 in any::<u64>(),
    ) {
        // Volatile fields in the params take no part; spelled differently, still equal.
        let mut p = json!({"name": "t", "arguments": v});
        p["_meta"] = json!({"progressToken": token});
        p["requestState"] = json!(state);
        let a: Value = serde_json::from_str(&spelled(&p, s1)).unwrap();
        let b: Value = serde_json::from_str(&spelled(&p, s2)).unwrap();
        let ma = match_params(Some(&a));
        prop_assert_eq!(canonical(&ma), canonical(&match_params(Some(&b))));
        prop_assert_eq!(&match_params(Some(&ma)), &ma, "idempotent");
        prop_assert!(ma.get("_meta").is_none() && ma.get("requestState").is_none());
    }
}

// --- sessions --------------------------------------------------------------------------------

/// Writes a session tape: the client's messages and the server's, in the given order.
fn write_session(path: &Path, lines: &[(Dir, String)]) {
    let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
    w.declare_server(ServerDecl::stdio(DEFAULT_SERVER, vec!["srv".into()]))
        .unwrap();
    let mut framers = (Framer::new(1 << 20), Framer::new(1 << 20));
    for (dir, text) in lines {
        let f = match dir {
            Dir::C2S => &mut framers.0,
            Dir::S2C => &mut framers.1,
        };
        let line = format!("{text}\n");
        f.push(line.as_bytes(), |fr| {
            w.message(DEFAULT_SERVER, *dir, &fr, Instant::now())
        });
        w.commit().unwrap();
    }
    w.finish(None, Some("test".into())).unwrap();
}

fn request(id: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

fn response(id: &str, n: usize) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"n": n}}).to_string()
}

/// The params of call `i`: some calls repeat earlier ones exactly (`dup` of them).
fn params_of_call(i: usize, dup: usize) -> Value {
    let k = if i < dup { 0 } else { i };
    json!({"name": "t", "arguments": {"k": k, "nested": {"b": [k, "x"], "a": null}}})
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn play_serves_any_permutation_of_the_recorded_requests_completely(
        (n, dup, order) in (1usize..10).prop_flat_map(|n| {
            (Just(n), 0..=n, Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
        }),
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let tape = dir.path().join("t.jsonl");
        // Recorded one call after the other.
        let mut lines = Vec::new();
        for i in 0..n {
            let id = format!("r{i}");
            lines.push((Dir::C2S, request(&id, &params_of_call(i, dup))));
            lines.push((Dir::S2C, response(&id, i)));
        }
        write_session(&tape, &lines);
        let index = TapeIndex::load(&tape, None).unwrap();
        // Replayed in any order, with new ids and the params spelled differently.
        let mut input = Vec::new();
        for (j, &i) in order.iter().enumerate() {
            // One message per line: no raw newlines in the spelling.
            let p = spelled(&params_of_call(i, dup), seed ^ j as u64).replace('\n', " ");
            input.extend_from_slice(
                format!(r#"{{"params":{p},"method":"tools/call","id":{j},"jsonrpc":"2.0"}}"#).as_bytes(),
            );
            input.push(b'\n');
        }
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut opts = mcptape::play::ServeOptions::default();
        opts.max_message = 1 << 20;
        opts.answer_timeout = std::time::Duration::from_secs(5);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let report = rt.block_on(mcptape::play::serve(index, opts, std::io::Cursor::new(input), Sink(out.clone())));
        prop_assert_eq!((report.served, report.missed, report.unanswered), (n as u64, 0, 0));
        prop_assert!(report.unused.is_empty());
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let answers: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        prop_assert_eq!(answers.len(), n);
        // Each answer carries the client's id; a distinct call gets its own recorded answer, and
        // repeated identical calls get theirs in recorded order.
        let mut next_dup = 0;
        for a in &answers {
            let j = a["id"].as_u64().unwrap() as usize;
            let i = order[j];
            let got = a["result"]["n"].as_u64().unwrap() as usize;
            if i < dup {
                prop_assert_eq!(got, next_dup);
                next_dup += 1;
            } else {
                prop_assert_eq!(got, i);
            }
        }
    }

    #[test]
    fn diff_of_a_tape_and_any_reordering_of_its_concurrent_calls_is_same(
        (n, sent, answered) in (1usize..10).prop_flat_map(|n| {
            let all: Vec<usize> = (0..n).collect();
            (Just(n), Just(all.clone()).prop_shuffle(), Just(all).prop_shuffle())
        }),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        // A: the calls one after the other. B: all in flight at once, sent and answered in any
        // order, under other ids.
        let mut la = Vec::new();
        for i in 0..n {
            la.push((Dir::C2S, request(&format!("a{i}"), &params_of_call(i, 0))));
            la.push((Dir::S2C, response(&format!("a{i}"), i)));
        }
        let mut lb = Vec::new();
        for &i in &sent {
            lb.push((Dir::C2S, request(&format!("b{i}"), &params_of_call(i, 0))));
        }
        for &i in &answered {
            lb.push((Dir::S2C, response(&format!("b{i}"), i)));
        }
        write_session(&a, &la);
        write_session(&b, &lb);
        let norm = mcptape::compare::Normalizer::new(true, &[], false).unwrap();
        let (report, warnings) = mcptape::diff::diff(&a, &b, &norm).unwrap();
        prop_assert!(warnings.is_empty(), "{:?}", warnings);
        prop_assert_eq!(report.verdict, mcptape::diff::Verdict::Same, "{:#?}", report);
        prop_assert_eq!(report.compared, n);
        let (report, _) = mcptape::diff::diff(&b, &a, &norm).unwrap();
        prop_assert_eq!(report.verdict, mcptape::diff::Verdict::Same);
    }
}
