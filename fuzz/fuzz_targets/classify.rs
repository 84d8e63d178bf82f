//! The classifier: never panics; what it says agrees with a full parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::wire::{classify, Kind};

fuzz_target!(|data: &[u8]| {
    let c = classify(data);
    if let Some(id) = &c.id {
        // The id is kept as its exact JSON text: it must itself be JSON.
        assert!(
            serde_json::from_str::<&serde_json::value::RawValue>(id).is_ok(),
            "id text {id:?} is not JSON"
        );
    }
    match c.kind {
        Kind::Request => assert!(c.id.is_some() && c.method.is_some()),
        Kind::Notification => assert!(c.id.is_none() && c.method.is_some()),
        Kind::NotJson | Kind::Invalid => assert!(c.problem.is_some()),
        _ => {}
    }
    if c.kind.is_json() {
        // Whatever the classifier took for JSON must be valid JSON (it is spliced into the tape
        // verbatim).
        assert!(
            serde_json::from_slice::<&serde_json::value::RawValue>(data).is_ok(),
            "{:?} classified as {} but is not JSON",
            String::from_utf8_lossy(data),
            c.kind
        );
    }
});
