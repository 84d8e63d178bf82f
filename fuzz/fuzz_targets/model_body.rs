//! A model API call as the model proxy records it and the player serves it again: arbitrary
//! bytes as the request body and as the answer (an SSE stream, or a whole body). The
//! request's canonical form (what replay compares) is deterministic and idempotent, and a
//! request matches itself; the call goes on a tape as the proxy tapes it (through the default
//! redactor) and is read back as the player reads it: the recorded request still matches the
//! live one, each stream event reads back as it was taped (markers standing for what was
//! redacted) and goes on the wire again as an event that parses to the same, and the summary
//! (usage, tool calls, stop reason) survives.
//!
//! Input: a byte choosing the provider and whether the answer streams, a byte for the chunk
//! sizes, then the request body, a 0xFF byte, the answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::fuzz_api::{self as api, Provider};
use mcptape::model::volatile::canonical;
use mcptape::tape::{ServerDecl, TapeWriter, WriteOptions};
use mcptape::wire::Dir;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

fn options() -> WriteOptions {
    static R: OnceLock<Arc<mcptape::redact::Redactor>> = OnceLock::new();
    let r = R.get_or_init(|| {
        Arc::new(
            mcptape::redact::Redactor::new(&mcptape::redact::RedactConfig::defaults())
                .expect("default rules"),
        )
    });
    WriteOptions {
        redactor: Some(r.clone()),
        signing_key: None,
    }
}

fn path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!("mcptape-fuzz-model-{}.jsonl", std::process::id()))
    })
}

const PROVIDERS: [(Provider, &str); 5] = [
    (Provider::Anthropic, "/v1/messages"),
    (Provider::OpenAiChat, "/v1/chat/completions"),
    (Provider::OpenAiResponses, "/v1/responses"),
    (
        Provider::Gemini,
        "/v1beta/models/gemini-x:streamGenerateContent",
    ),
    (Provider::Other, "/v1/other"),
];

/// What was taped, read back, is what was meant: JSON equal with markers standing for any
/// value, text equal unless redacted.
fn same_body(taped: &[u8], meant: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(meant) {
        Ok(m) => match serde_json::from_slice::<Value>(taped) {
            Ok(mut t) => {
                api::strip_marker_hashes(&mut t);
                api::wildcard_eq(&t, &m)
            }
            Err(_) => false,
        },
        Err(_) => taped == meant || api::has_marker(&String::from_utf8_lossy(taped)),
    }
}

fuzz_target!(|data: &[u8]| {
    let [mode, seed, rest @ ..] = data else {
        return;
    };
    let (provider, route_path) = PROVIDERS[(*mode % 5) as usize];
    let streamed = mode & 0x80 == 0;
    let (req, answer) = match rest.iter().position(|&b| b == 0xFF) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };

    // ---- Canonical form: deterministic, idempotent; a request matches itself.
    for body in [req, answer] {
        let c = canonical(body);
        assert_eq!(c, canonical(body), "canonical is not deterministic");
        if let Some(c) = &c {
            let again = canonical(&serde_json::to_vec(c).unwrap());
            assert_eq!(again.as_ref(), Some(c), "canonical is not idempotent");
        }
    }
    let live = canonical(req);
    assert!(
        api::body_fits(
            api::recorded_canonical(req).as_ref(),
            req,
            live.as_ref(),
            req
        ),
        "a request does not match itself"
    );

    // ---- The answer, as the proxy's pump reads it.
    let mut chunks = Vec::new();
    let mut left = answer;
    let mut k = *seed as usize;
    while !left.is_empty() {
        let n = (k % 13 + 1).min(left.len());
        chunks.push(&left[..n]);
        left = &left[n..];
        k = k.wrapping_mul(31).wrapping_add(7);
    }
    let (blocks, summary) = if streamed {
        let (blocks, summary, _cut) = api::model_stream(provider, &chunks, 1 << 16);
        let whole: Vec<u8> = blocks.iter().flat_map(|b| b.raw.clone()).collect();
        let body = answer
            .strip_prefix(b"\xEF\xBB\xBF".as_slice())
            .filter(|_| answer.len() >= 3);
        assert_eq!(
            whole,
            body.unwrap_or(answer),
            "the pump forwarded other bytes"
        );
        (blocks, summary)
    } else {
        let mut s = api::Summary::default();
        if let Ok(v) = serde_json::from_slice::<Value>(answer) {
            s.add(provider, &v);
        }
        (Vec::new(), s)
    };

    // ---- On the tape as the proxy tapes it.
    let route = mcptape::model::provider::route(route_path);
    let p = path();
    let mut w = TapeWriter::create(p, options()).expect("create the temp tape");
    w.declare_server(ServerDecl::model("model", "http://127.0.0.1:1".into()))
        .unwrap();
    let now = Instant::now();
    let mut facts = Map::new();
    facts.insert("provider".into(), json!(provider.name()));
    facts.insert("endpoint".into(), json!(route.endpoint));
    let http = json!({"method": "POST", "path": route_path});
    w.model(
        "model",
        Dir::C2S,
        1,
        "request",
        &facts,
        Some(req),
        Some(&http),
        now,
    );
    let content_type = if streamed {
        "text/event-stream"
    } else {
        "application/json"
    };
    let http = json!({"status": 200, "content_type": content_type});
    if streamed {
        w.model(
            "model",
            Dir::S2C,
            1,
            "response",
            &Map::new(),
            None,
            Some(&http),
            now,
        );
        for b in &blocks {
            let data = b.data.as_deref().map(str::as_bytes);
            w.model("model", Dir::S2C, 1, "event", &b.facts, data, None, now);
        }
        let mut f = Map::new();
        f.insert("events".into(), json!(blocks.len()));
        f.insert("summary".into(), summary.to_json());
        w.model("model", Dir::S2C, 1, "end", &f, None, None, now);
    } else {
        let mut f = Map::new();
        f.insert("summary".into(), summary.to_json());
        w.model(
            "model",
            Dir::S2C,
            1,
            "response",
            &f,
            Some(answer),
            Some(&http),
            now,
        );
    }
    w.finish(None, Some("done".into())).unwrap();

    // ---- Read back as the player reads it.
    let calls = mcptape::model::calls::load(p, Some("model")).expect("the tape reads");
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.provider, provider);
    assert_eq!(call.endpoint, route.endpoint);
    assert_eq!(
        call.summary,
        summary.to_json(),
        "the summary changed on the tape"
    );
    // The recorded request answers the live one.
    let recorded = api::recorded_canonical(&call.request);
    assert!(
        api::body_fits(recorded.as_ref(), &call.request, live.as_ref(), req)
            || (live.is_none() && api::has_marker(&String::from_utf8_lossy(&call.request))),
        "the taped request {:?} does not match the request {:?}",
        String::from_utf8_lossy(&call.request),
        String::from_utf8_lossy(req),
    );
    if !streamed {
        let body = call.body.clone().unwrap_or_default();
        assert!(
            same_body(&body, answer),
            "the answer {:?} reads back as {:?}",
            String::from_utf8_lossy(answer),
            String::from_utf8_lossy(&body),
        );
        return;
    }
    assert_eq!(call.events.len(), blocks.len(), "events lost on the tape");
    for (ev, b) in call.events.iter().zip(&blocks) {
        let s = |k: &str| b.facts.get(k).and_then(Value::as_str).map(str::to_string);
        assert_eq!(ev.event, s("event"));
        assert_eq!(ev.id, s("id"));
        assert_eq!(ev.retry, b.facts.get("retry").and_then(Value::as_u64));
        assert_eq!(ev.raw, b.facts.contains_key("raw"));
        match (&ev.data, &b.data) {
            (Some(t), Some(m)) => assert!(
                same_body(t.as_bytes(), m.as_bytes()),
                "event data {m:?} reads back as {t:?}"
            ),
            (t, m) => assert_eq!(t, m, "event data"),
        }
        if ev.raw {
            continue;
        }
        // Served again: the event on the wire parses to what the tape holds.
        let wire = ev.to_wire();
        let mut parser = api::SseParser::new(1 << 16);
        let mut again = parser.push(&wire);
        again.extend(parser.finish());
        assert_eq!(
            again.len(),
            1,
            "one event became {} blocks: {:?}",
            again.len(),
            String::from_utf8_lossy(&wire)
        );
        let e = again[0].event.clone().unwrap_or(api::SseEvent {
            event: None,
            data: None,
            id: None,
            retry: None,
        });
        assert_eq!(
            (&e.event, &e.id, e.retry, &e.data),
            (&ev.event, &ev.id, ev.retry, &ev.data),
            "served as {:?}",
            String::from_utf8_lossy(&wire)
        );
    }
});
