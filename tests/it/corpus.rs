//! The redaction corpora (tests/corpus): every secret, in every position a secret turns up in,
//! never reaches a tape; every ordinary value comes back unchanged. The rates are printed
//! (`cargo test corpus -- --nocapture`) and the bar is checked: no leak, and few false positives.

use crate::harness::*;
use base64::Engine as _;
use mcptape::redact::{RedactConfig, Redactor};
use serde_json::{json, Value};

pub struct Secret {
    pub format: String,
    pub secret: String,
    pub text: String,
}

pub struct Ordinary {
    pub category: String,
    pub key: String,
    /// The value's JSON text exactly as in the corpus (`2.50` stays `2.50`).
    pub raw: String,
}

pub fn secrets() -> Vec<Secret> {
    let text = std::fs::read_to_string(repo().join("tests/corpus/secrets.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Secret {
                format: v["format"].as_str().unwrap().into(),
                secret: v["secret"].as_str().unwrap().into(),
                text: v["text"].as_str().unwrap().into(),
            }
        })
        .collect()
}

pub fn ordinary() -> Vec<Ordinary> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        category: String,
        key: String,
        #[serde(borrow)]
        value: &'a serde_json::value::RawValue,
    }
    let text = std::fs::read_to_string(repo().join("tests/corpus/ordinary.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: Line<'_> = serde_json::from_str(l).unwrap();
            Ordinary {
                category: v.category,
                key: v.key,
                raw: v.value.get().to_string(),
            }
        })
        .collect()
}

/// Every form in which `out` could still show a secret: its raw bytes, and every string in it
/// decoded (recursively through JSON held in strings, and base64 that decodes to text).
pub fn views(out: &str) -> Vec<String> {
    let mut v = vec![out.to_string()];
    if let Ok(value) = serde_json::from_str::<Value>(out) {
        collect_strings(&value, &mut v, 0);
    }
    v
}

fn collect_strings(value: &Value, out: &mut Vec<String>, depth: usize) {
    if depth > 8 {
        return;
    }
    match value {
        Value::String(s) => {
            out.push(s.clone());
            if let Ok(inner) = serde_json::from_str::<Value>(s) {
                if inner.is_object() || inner.is_array() {
                    collect_strings(&inner, out, depth + 1);
                }
            }
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ] {
                if let Ok(bytes) = engine.decode(s.trim_end_matches('=')) {
                    if let Ok(t) = String::from_utf8(bytes) {
                        out.push(t);
                    }
                }
                if let Ok(bytes) = engine.decode(s) {
                    if let Ok(t) = String::from_utf8(bytes) {
                        out.push(t);
                    }
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out, depth + 1)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k.clone());
            collect_strings(x, out, depth + 1)
        }),
        _ => {}
    }
}

/// The pieces of `secret` that [`leaks`] looks for: windows of two thirds of it (6 to 12
/// characters) with at least 6 alphanumerics, a PEM block's armour lines dropped.
pub fn leak_pieces(secret: &str) -> Vec<String> {
    // A PEM block's armour (`-----BEGIN EC PRIVATE KEY-----`) says what it is, not what it
    // holds: only its body is the secret.
    let body: String = secret
        .lines()
        .filter(|l| !l.starts_with("-----") && !l.contains(": "))
        .collect::<Vec<_>>()
        .join("\n");
    let secret = if body.is_empty() {
        secret
    } else {
        body.as_str()
    };
    let chars: Vec<char> = secret.chars().collect();
    let window = (chars.len() * 2 / 3).clamp(6, 12).min(chars.len());
    chars
        .windows(window)
        .map(|w| w.iter().collect::<String>())
        .filter(|p| p.chars().filter(|c| c.is_alphanumeric()).count() >= window.min(6))
        .collect()
}

/// Whether any long enough piece of `secret` is still in `out` (a secret redacted only in part
/// is a leak too).
pub fn leaks(out: &str, secret: &str) -> bool {
    let pieces = leak_pieces(secret);
    views(out)
        .iter()
        .any(|v| pieces.iter().any(|p| v.contains(p.as_str())))
}

fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The positions a secret's text is put in, each as (name, what is redacted, how).
fn positions(s: &Secret) -> Vec<(&'static str, String)> {
    let t = js(&s.text);
    let mut out = vec![
        (
            "argument",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"run","arguments":{{"input":{t}}}}}}}"#
            ),
        ),
        (
            "result",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":{t}}}],"isError":false}}}}"#
            ),
        ),
        (
            "resource",
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"result":{{"contents":[{{"uri":"file:///srv/notes.txt","mimeType":"text/plain","text":{t}}}]}}}}"#
            ),
        ),
        (
            "resource-blob",
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"result":{{"contents":[{{"uri":"file:///srv/app.env","mimeType":"application/octet-stream","blob":"{}"}}]}}}}"#,
                base64::engine::general_purpose::STANDARD.encode(&s.text)
            ),
        ),
        (
            "log",
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"warning","logger":"app","data":{t}}}}}"#
            ),
        ),
        (
            "error",
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"error":{{"code":-32000,"message":{t},"data":{{"detail":{t}}}}}}}"#
            ),
        ),
        (
            "nested-json",
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"cfg","arguments":{{"payload":{}}}}}}}"#,
                js(&json!({"config": {"value": s.text, "n": 2.50}}).to_string())
            ),
        ),
        (
            "structured",
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"result":{{"structuredContent":{{"output":{t}}}}}}}"#
            ),
        ),
    ];
    // The same text with its secret hidden behind JSON escapes (`\u0067hp_…`, `\/`).
    let escaped = {
        let quoted = js(&s.text);
        let first = s.secret.chars().next().unwrap();
        let at = quoted.find(&js(&s.secret)[1..]);
        match (first.is_ascii_alphanumeric(), at) {
            (true, Some(i)) => format!(
                "{}\\u{:04x}{}",
                &quoted[..i],
                first as u32,
                &quoted[i + 1..]
            )
            .replace('/', "\\/"),
            _ => quoted.replace('/', "\\/"),
        }
    };
    out.push((
        "escaped",
        format!(r#"{{"jsonrpc":"2.0","id":6,"result":{{"content":[{{"type":"text","text":{escaped}}}]}}}}"#),
    ));
    out
}

/// What each position's redaction gives, as text.
fn redact_in(r: &Redactor, name: &str, msg: &str) -> String {
    match r.redact_json(msg.as_bytes()) {
        Some((b, _)) => {
            let out = String::from_utf8(b).unwrap();
            assert!(
                serde_json::from_str::<Value>(&out).is_ok(),
                "{name}: the redacted message is still JSON: {out}"
            );
            out
        }
        None => msg.to_string(),
    }
}

#[derive(Default)]
pub struct Sweep {
    pub tried: usize,
    pub leaked: Vec<String>,
}

/// Every secret in every position, through the library's redactor (what every writer uses).
pub fn sweep_secrets(r: &Redactor) -> Sweep {
    let mut sw = Sweep::default();
    for s in secrets() {
        for (name, msg) in positions(&s) {
            sw.tried += 1;
            let out = redact_in(r, name, &msg);
            if leaks(&out, &s.secret) {
                sw.leaked.push(format!("{} in {name}: {out}", s.format));
            }
        }
        // A line that is not JSON (a log line on stdout).
        for line in s.text.lines().filter(|l| !l.trim().is_empty()) {
            if !line.contains(&s.secret) {
                continue;
            }
            sw.tried += 1;
            let out = r
                .redact_text(line)
                .map(|(t, _)| t)
                .unwrap_or(line.to_string());
            if leaks(&out, &s.secret) {
                sw.leaked
                    .push(format!("{} in a text line: {out}", s.format));
            }
        }
        // The server's command line: the text as one argument, and the secret after a flag.
        if !s.secret.contains('\n') {
            for argv in [
                vec!["srv".to_string(), s.text.clone()],
                vec!["srv".to_string(), "--api-key".into(), s.secret.clone()],
                vec!["srv".to_string(), format!("--token={}", s.secret)],
            ] {
                if argv[1].contains('\n') {
                    continue;
                }
                sw.tried += 1;
                let out = r.redact_argv(&argv).join(" ");
                if leaks(&out, &s.secret) {
                    sw.leaked
                        .push(format!("{} in a command line: {out}", s.format));
                }
            }
            // A URL: a query parameter, and a URL's password.
            let urls = [
                format!(
                    "https://api.example.test/v1/items?page=2&access_token={}",
                    s.secret
                ),
                format!("https://svc:{}@api.example.test/v1", s.secret),
            ];
            for url in urls {
                if s.secret.contains(['@', '/', ':', '?', '&', '#', ' ']) {
                    continue;
                }
                sw.tried += 1;
                let out = r.redact_url(&url);
                if leaks(&out, &s.secret) {
                    sw.leaked.push(format!("{} in a URL: {out}", s.format));
                }
            }
            // An HTTP header that is taped (`Mcp-Param-*`, a session id).
            if !s.text.contains('\n') {
                let facts = json!({"method":"POST","mcp_params":{"Note": s.text},"mcp_session_id": s.secret});
                sw.tried += 1;
                let raw = facts.to_string();
                let out = mcptape::tape::writer::redact_http_facts(r, raw.as_bytes())
                    .map(|(b, _)| String::from_utf8(b).unwrap())
                    .unwrap_or(raw);
                if leaks(&out, &s.secret) {
                    sw.leaked.push(format!("{} in HTTP facts: {out}", s.format));
                }
            }
        }
    }
    sw
}

/// Every ordinary value under its key, in a request and in a result: whether it comes through
/// byte for byte.
pub fn sweep_ordinary(r: &Redactor) -> (usize, Vec<String>) {
    let mut changed = Vec::new();
    let values = ordinary();
    let mut tried = 0;
    for o in &values {
        let k = js(&o.key);
        for msg in [
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{{k}:{}}}}}}}"#,
                o.raw
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"structuredContent":{{{k}:{}}},"content":[{{"type":"text","text":"ok"}}]}}}}"#,
                o.raw
            ),
        ] {
            tried += 1;
            let out = redact_in(r, "ordinary", &msg);
            if out != msg {
                changed.push(format!("{} ({}={}): {out}", o.category, o.key, o.raw));
            }
        }
    }
    (tried, changed)
}

#[test]
fn no_secret_of_the_corpus_gets_past_the_redactor_in_any_position() {
    let r = Redactor::new(&RedactConfig::defaults()).unwrap();
    let sw = sweep_secrets(&r);
    let n = secrets().len();
    eprintln!(
        "secrets corpus: {n} secrets, {} placements, {} leaked",
        sw.tried,
        sw.leaked.len()
    );
    assert!(n >= 150, "the corpus holds at least 150 secrets");
    assert!(
        sw.leaked.is_empty(),
        "{} of {} placements leaked:\n{}",
        sw.leaked.len(),
        sw.tried,
        sw.leaked.join("\n")
    );
}

#[test]
fn ordinary_values_of_the_corpus_come_through_unchanged() {
    let r = Redactor::new(&RedactConfig::defaults()).unwrap();
    let (tried, changed) = sweep_ordinary(&r);
    let n = ordinary().len();
    eprintln!(
        "ordinary corpus: {n} values, {tried} placements, {} changed ({:.1} %)",
        changed.len(),
        100.0 * changed.len() as f64 / tried as f64
    );
    assert!(n >= 200, "the corpus holds at least 200 ordinary values");
    assert!(
        changed.is_empty(),
        "{} of {tried} placements changed:\n{}",
        changed.len(),
        changed.join("\n")
    );
}
