//! The tape reader and index: arbitrary bytes as a tape file load or fail with an error, never
//! a panic; every indexed body reads back; what the index keeps of the HTTP events (`http-get`
//! and `http-delete` answers, refusals, CORS) reads back as it was from the JSON the index
//! cache keeps it in.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::tape::TapeIndex;
use std::path::PathBuf;
use std::sync::OnceLock;

fn path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!("mcptape-fuzz-{}.jsonl", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let p = path();
    std::fs::write(p, data).expect("write the temp tape");
    if let Ok(index) = TapeIndex::load(p, None) {
        for m in index.msgs.iter() {
            let _ = index.read_bytes(m);
            if m.kind == mcptape::wire::Kind::Request {
                let _ = mcptape::fuzz_api::request_match_params(&index, m);
                let _ = mcptape::fuzz_api::describe_request(&index, m);
            }
        }
        let json = serde_json::to_string(&index.http).expect("the HTTP summary serializes");
        let back: mcptape::tape::index::HttpSummary =
            serde_json::from_str(&json).expect("the HTTP summary reads back");
        assert_eq!(back, index.http, "the HTTP summary changed through JSON");
    }
});
