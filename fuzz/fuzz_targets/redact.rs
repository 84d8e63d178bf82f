//! The redactor: arbitrary bytes never panic it; what it writes instead of a JSON message is
//! JSON, and carries no finding of its own rules any more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::redact::{RedactConfig, Redactor};
use std::sync::OnceLock;

fn redactor() -> &'static Redactor {
    static R: OnceLock<Redactor> = OnceLock::new();
    R.get_or_init(|| Redactor::new(&RedactConfig::defaults()).expect("default rules"))
}

fuzz_target!(|data: &[u8]| {
    let r = redactor();
    if let Some((out, rules)) = r.redact_json(data) {
        assert!(!rules.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&out).expect("redacted JSON is JSON");
        // Idempotent: the redacted message needs no more redaction. (Only for a message that
        // was JSON: one that was not comes back as a JSON string of its redacted text, and
        // redacting that string reads the text inside it as JSON, which text rules did not.)
        let was_json = serde_json::from_slice::<serde_json::Value>(data).is_ok();
        if let Some((again, _)) = r.redact_json(&out).filter(|_| was_json) {
            let w: serde_json::Value = serde_json::from_slice(&again).unwrap();
            assert_eq!(v, w, "redacting twice changed the message");
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = r.redact_text(text);
    }
});
