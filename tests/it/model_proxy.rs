//! The model proxy's own promises, with an upstream of our own (tests/agents/stream_upstream.py):
//! a streamed answer reaches the client event by event while the upstream still holds the rest
//! (nothing buffered to the end), over TLS checked against a private CA (and refused without
//! it), API keys forwarded and never taped, and the same events played back. `record --url`
//! reaches an `https://` upstream through the same connector (TLS, the private CA).

use crate::harness::*;

const KEY: &str = "sk-ant-api03-Q7vN2pXcL9mR4tY8wK1zH6bJ3fD5sA0gE2uI9oP7lM4nB8vC1xZ6qW3eR5tY";

pub(crate) fn ask(stream: bool) -> Vec<u8> {
    serde_json::json!({
        "model": "claude-test", "max_tokens": 5, "stream": stream,
        "messages": [{"role": "user", "content": "say something"}]
    })
    .to_string()
    .into_bytes()
}

pub(crate) const HEADERS: &[(&str, &str)] = &[
    ("content-type", "application/json"),
    ("x-api-key", KEY),
    ("anthropic-version", "2023-06-01"),
];

#[test]
fn a_stream_goes_through_event_by_event_over_tls_and_plays_back_the_same() {
    let dir = tmp();
    let (_up, base) = model_upstream(dir.path(), true);
    assert!(base.starts_with("https://"), "{base}");
    let tape = dir.path().join("model.jsonl");
    let ca = dir.path().join("ca.pem");
    let proxy = Served::spawn(&[
        "model-proxy",
        "--tape",
        &s(&tape),
        "--upstream",
        &base,
        "--upstream-ca",
        &s(&ca),
    ]);
    let url = format!("{}/v1/messages?beta=true", proxy.url);

    // The first event arrives while the upstream still holds the rest of the stream: had the
    // proxy buffered the stream, this read would wait for a release that never comes.
    let mut live = http_open(&url, "POST", HEADERS, &ask(true));
    assert_eq!(live.status, 200);
    assert!(live.content_type().starts_with("text/event-stream"));
    let first = live.read_until("message_start");
    assert!(
        !text(&first).contains("released"),
        "only the first event yet: {}",
        text(&first)
    );
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let rest = text(&live.body());
    assert!(
        rest.contains("released") && rest.contains("message_stop"),
        "{rest}"
    );
    let streamed = format!("{}{rest}", text(&first));

    let (status, whole) = http(&url, "POST", HEADERS, &ask(false));
    assert_eq!(status, 200);
    assert!(text(&whole).contains("whole"));
    proxy.stop();

    // On the tape: the calls, their events and facts; never the key.
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(!raw.contains(&KEY[..24]), "the API key reached the tape");
    let calls: Vec<serde_json::Value> = tape_lines(&tape)
        .into_iter()
        .filter(|l| l["type"] == "model")
        .collect();
    let part = |call: u64, part: &str| {
        calls
            .iter()
            .filter(|l| l["call"] == call && l["part"] == part)
            .count()
    };
    assert_eq!(
        (part(1, "request"), part(1, "event"), part(1, "end")),
        (1, 6, 1)
    );
    assert_eq!(
        (part(2, "request"), part(2, "response"), part(2, "event")),
        (1, 1, 0)
    );
    let req = calls.iter().find(|l| l["part"] == "request").unwrap();
    assert_eq!(req["provider"], "anthropic");
    assert_eq!(req["model"], "claude-test");
    assert_eq!(req["stream"], true);
    assert_eq!(req["http"]["path"], "/v1/messages?beta=true");
    let end = calls.iter().find(|l| l["part"] == "end").unwrap();
    assert_eq!(end["summary"]["input_tokens"], 3);
    assert_eq!(end["summary"]["output_tokens"], 2);
    assert_eq!(end["summary"]["stop"], "end_turn");
    Mt::new(["verify", &s(&tape)]).run().status(0);
    Mt::new(["lint", &s(&tape)]).run().status(0);

    // Playback: the same events, in order, byte for byte; no upstream at all.
    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    let purl = format!("{}/v1/messages?beta=true", player.url);
    let mut replayed = http_open(&purl, "POST", HEADERS, &ask(true));
    assert_eq!(replayed.status, 200);
    assert_eq!(text(&replayed.body()), streamed);
    let (status, again) = http(&purl, "POST", HEADERS, &ask(false));
    assert_eq!((status, text(&again)), (200, text(&whole)));
    let log = player.stop();
    assert_contains(&log, "2 model calls served, 0 missed");
}

#[test]
fn an_upstream_whose_certificate_is_not_trusted_is_refused_and_taped() {
    let dir = tmp();
    let (_up, base) = model_upstream(dir.path(), true);
    let tape = dir.path().join("model.jsonl");
    // No --upstream-ca: the private CA is not among the system's roots.
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let (status, body) = http(
        &format!("{}/v1/messages", proxy.url),
        "POST",
        HEADERS,
        &ask(false),
    );
    assert_eq!(status, 502);
    let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(err["type"], "error", "Anthropic's error shape: {err}");
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer"), "{message}");
    assert!(
        message.to_ascii_lowercase().contains("certificate"),
        "says why: {message}"
    );
    proxy.stop();
    let end = tape_lines(&tape)
        .into_iter()
        .find(|l| l["type"] == "model" && l["part"] == "end")
        .expect("the failed call is on the tape");
    assert!(end["error"]
        .as_str()
        .unwrap_or_default()
        .contains("certificate"));
}

#[test]
fn record_url_reaches_an_https_upstream_with_a_private_ca() {
    let dir = tmp();
    let (_up, base) = model_upstream(dir.path(), true);
    let tape = dir.path().join("http.jsonl");
    let upstream_url = format!("{base}/v1/messages");
    let rec = Served::spawn(&[
        "record",
        "--url",
        &upstream_url,
        "--upstream-ca",
        &s(dir.path().join("ca.pem")),
        "--tape",
        &s(&tape),
    ]);
    let (status, body) = http(&rec.url, "POST", HEADERS, &ask(false));
    assert_eq!(status, 200, "{}", text(&body));
    assert!(text(&body).contains("whole"));
    rec.stop();
    let lines = tape_lines(&tape);
    assert_eq!(lines[1]["url"], upstream_url.as_str());
    assert!(
        lines
            .iter()
            .any(|l| l["dir"] == "s2c" && l["http"]["status"] == 200),
        "the answer is on the tape"
    );
}

#[test]
fn what_cannot_start_says_so_with_its_exit_code_and_loses_no_tape() {
    let dir = tmp();
    // A CA file that is not there: 66, before any tape is written.
    let tape = dir.path().join("never.jsonl");
    Mt::new([
        "model-proxy",
        "--tape",
        &s(&tape),
        "--upstream",
        "https://127.0.0.1:1",
        "--upstream-ca",
        &s(dir.path().join("missing.pem")),
    ])
    .run()
    .status(66);
    assert!(!tape.exists(), "no tape for a proxy that never started");
    // Playback of a tape that is not there: 66.
    Mt::new(["model-proxy", "--tape", &s(&tape), "--playback"])
        .run()
        .status(66);
    // An agent that cannot start: 69, and the run's tape is closed, saying why.
    let run_tape = dir.path().join("run.jsonl");
    let out = Mt::new(["run", "--tape", &s(&run_tape), "--", "/nonexistent/agent"])
        .env("MCPTAPE_DIR", dir.path().join("store"))
        .run()
        .status(69);
    assert_contains(&out.stderr, "could not start the agent");
    let end = tape_lines(&run_tape).pop().expect("a tape");
    assert_eq!(end["type"], "end");
    assert!(end["reason"]
        .as_str()
        .unwrap_or_default()
        .contains("/nonexistent/agent"));
}

/// An agent whose model calls never came through the proxy (it made none, or its sign-in
/// sends them elsewhere): the run says so, since the tape then has nothing for `--playback`.
/// A GUI client, whose model `run` leaves alone, is not warned about.
#[test]
fn a_recorded_run_with_no_model_call_says_so() {
    let dir = tmp();
    let store = dir.path().join("store");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // A home and a working folder of the test's own: `run` rewrites the agents' config files
    // there (Cursor's `~/.cursor/mcp.json`, a project's `.cursor/mcp.json`).
    let run = |tape: &str, agent: &[&str]| {
        let tape = dir.path().join(tape);
        let mut args = vec!["run", "--tape", tape.to_str().unwrap(), "--"];
        args.extend(agent);
        Mt::new(args)
            .env("MCPTAPE_DIR", &store)
            .env("HOME", &home)
            .dir(&home)
            .run()
            .success()
    };
    let out = run("quiet.jsonl", &["sh", "-c", "exit 0"]);
    assert_contains(
        &out.stderr,
        "mcptape run: the agent exited 0; 0 model calls and no MCP server on",
    );
    assert_contains(
        &out.stderr,
        "mcptape run: WARNING: the agent sent no model request through mcptape, so the tape holds none and --playback has none to serve.",
    );
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let cursor = bin_dir.join("cursor");
    std::fs::write(&cursor, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&cursor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run("gui.jsonl", &[cursor.to_str().unwrap()]);
    assert!(
        !out.stderr.contains("sent no model request"),
        "{}",
        out.console()
    );
}

/// A run that fails after the agent's config files were rewritten (here: an upstream that is
/// not a URL) puts them back before it exits: nothing is left pointing at mcptape.
#[test]
fn a_run_that_cannot_start_puts_the_rewritten_files_back() {
    let dir = tmp();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mcp = r#"{"mcpServers": {"S": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}}}"#;
    std::fs::write(work.join(".mcp.json"), mcp).unwrap();
    let out = Mt::new([
        "run",
        "--tape",
        &s(dir.path().join("t.jsonl")),
        "--upstream",
        "not a url",
        "--",
        "sh",
        "-c",
        "exit 0",
    ])
    .env("MCPTAPE_DIR", dir.path().join("store"))
    .env("HOME", dir.path())
    .dir(&work)
    .run();
    assert!(!out.exit.success(), "{}", out.console());
    assert_eq!(
        std::fs::read_to_string(work.join(".mcp.json")).unwrap(),
        mcp
    );
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from(".mcp.json")],
        "no backup left"
    );
}

/// Re-recording (issue 15): a model call the upstream answered is a session; one it never
/// answered is not, and costs no tape.
#[test]
fn re_recording_model_calls_replaces_the_tape_only_once_a_call_was_answered() {
    let dir = tmp();
    let tape = dir.path().join("model.jsonl");
    let (new, bak) = (
        dir.path().join("model.jsonl.new"),
        dir.path().join("model.jsonl.bak"),
    );
    write_tape(
        &tape,
        &[
            (
                "c2s",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            ),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            ),
        ],
        true,
    );
    let first = std::fs::read(&tape).unwrap();
    let proxy = |upstream: &str| {
        Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", upstream])
    };

    // An upstream that is not there: the call fails (502), the tape stays.
    let nothing = PortHold::any(); // bound, not listening: connections are refused
    let dead = proxy(&nothing.url());
    let (status, _) = http(
        &format!("{}/v1/messages", dead.url),
        "POST",
        HEADERS,
        &ask(false),
    );
    assert_eq!(status, 502);
    let err = dead.stop();
    assert_contains(&err, "the new recording held no exchange");
    assert!(
        std::fs::read(&tape).unwrap() == first,
        "the tape is untouched"
    );
    assert!(tape_lines(&new).iter().any(|l| l["part"] == "request"));

    // An answered call replaces it.
    let (_up, base) = model_upstream(dir.path(), false);
    let live = proxy(&base);
    let (status, body) = http(
        &format!("{}/v1/messages", live.url),
        "POST",
        HEADERS,
        &ask(false),
    );
    assert_eq!(status, 200, "{}", text(&body));
    let err = live.stop();
    assert_contains(
        &err,
        &format!(
            "replaced {}; the old tape is kept as {}",
            tape.display(),
            bak.display()
        ),
    );
    assert!(
        std::fs::read(&bak).unwrap() == first,
        "the old tape, byte for byte"
    );
    assert!(tape_lines(&tape).iter().any(|l| l["part"] == "response"));
}

/// An Anthropic stream of `deltas` text deltas: its events' data, the SSE bytes a client
/// gets, and the chunked answer on the wire with the offset where its first event ends.
fn anthropic_stream(deltas: usize) -> (Vec<String>, Vec<u8>, Vec<u8>, usize, usize) {
    let mut events = Vec::new();
    events.push(
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[],"usage":{"input_tokens":4,"output_tokens":1}}}"#
            .to_string(),
    );
    for i in 0..deltas {
        events.push(format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word {i} "}}}}"#
        ));
    }
    events.push(format!(
        r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}},"usage":{{"output_tokens":{deltas}}}}}"#
    ));
    events.push(r#"{"type":"message_stop"}"#.to_string());
    let mut sse = Vec::new();
    let mut body = Vec::new();
    let mut first_len = 0;
    for e in &events {
        let name = serde_json::from_str::<serde_json::Value>(e).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        let ev = format!("event: {name}\ndata: {e}\n\n");
        sse.extend_from_slice(ev.as_bytes());
        body.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        if first_len == 0 {
            first_len = body.len();
        }
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let mut wire =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    let head_len = wire.len();
    wire.extend_from_slice(&body);
    (events, sse, wire, head_len, first_len)
}

/// The model lines of call `call` on `tape`, in tape order: each line's part, and its `msg`.
fn call_parts(tape: &std::path::Path, call: u64) -> Vec<(String, serde_json::Value)> {
    tape_lines(tape)
        .into_iter()
        .filter(|l| l["type"] == "model" && l["call"] == call)
        .map(|l| {
            (
                l["part"].as_str().unwrap_or("").to_string(),
                l["msg"].clone(),
            )
        })
        .collect()
}

/// Events that arrive together (one HTTP chunk each, read out of one socket read) are taped in one
/// write and forwarded in one piece: still one tape line each, the client's bytes the
/// upstream's, the tape verified and played back byte for byte. An event cut across two
/// writes is held until it is whole.
#[test]
fn events_that_arrive_together_are_each_taped_and_forwarded_byte_for_byte() {
    let dir = tmp();
    let (events, sse, wire, head_len, first_len) = anthropic_stream(300);
    // The head and the first event in one write, then the middle of the stream with an event
    // cut in two, then the rest.
    let cuts = vec![head_len + first_len, wire.len() / 2, wire.len() / 2 + 7];
    let (base, _) = scripted_upstream(vec![(wire, cuts)]);
    let tape = dir.path().join("model.jsonl");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let url = format!("{}/v1/messages", proxy.url);
    let (status, got) = http(&url, "POST", HEADERS, &ask(true));
    assert_eq!(status, 200);
    assert_eq!(
        text(&got),
        text(&sse),
        "the client gets the upstream's bytes"
    );
    proxy.stop();

    let taped: Vec<serde_json::Value> = tape_lines(&tape)
        .into_iter()
        .filter(|l| l["type"] == "model" && l["part"] == "event")
        .collect();
    assert_eq!(taped.len(), events.len(), "one line per event");
    // The head first (taped with the first event, in one write), then every event in order.
    let parts: Vec<String> = call_parts(&tape, 1).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        parts[..3],
        ["request", "response", "event"],
        "the head is taped before any event"
    );
    assert_eq!(parts.last().map(String::as_str), Some("end"));
    for (line, e) in taped.iter().zip(&events) {
        let want: serde_json::Value = serde_json::from_str(e).unwrap();
        assert_eq!(line["msg"], want);
    }
    let end = tape_lines(&tape)
        .into_iter()
        .find(|l| l["type"] == "model" && l["part"] == "end")
        .unwrap();
    assert_eq!(end["events"], events.len());
    assert_eq!(end["summary"]["output_tokens"], 300);
    Mt::new(["verify", &s(&tape)]).run().status(0);

    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    let (status, again) = http(
        &format!("{}/v1/messages", player.url),
        "POST",
        HEADERS,
        &ask(true),
    );
    assert_eq!((status, text(&again)), (200, text(&sse)));
    let log = player.stop();
    assert_contains(&log, "1 model call served, 0 missed");
}

/// The framings an upstream may use besides one chunk an event, each read to its end, taped
/// event by event and forwarded byte for byte: chunk-size lines with extensions and a trailer
/// section (the trailer is not forwarded, as it was not before); and a stream delimited by the
/// connection's close (no length, no chunks), whose connection is then not used again.
#[test]
fn streams_framed_every_way_http_allows_are_taped_whole() {
    let dir = tmp();
    let (events, sse, wire, head_len, _) = anthropic_stream(40);
    // Chunked, with extensions on every size line and a trailer, cut at odd places.
    let mut odd = wire[..head_len].to_vec();
    for ev in sse
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(3)
    {
        let piece = ev.concat();
        odd.extend_from_slice(format!("{:X};name=\"v\"\r\n", piece.len()).as_bytes());
        odd.extend_from_slice(&piece);
        odd.extend_from_slice(b"\r\n");
    }
    odd.extend_from_slice(b"0\r\nx-checksum: 1\r\n\r\n");
    let cuts = vec![head_len + 3, odd.len() / 3, odd.len() / 2 + 1];
    // To the close: the bytes of the events as they are, the connection ended after them.
    let mut to_close =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec();
    to_close.extend_from_slice(&sse);
    for (name, wire, cuts, connections) in [
        ("chunked, with extensions and a trailer", odd, cuts, 1),
        (
            "delimited by the close",
            to_close,
            vec![head_len, sse.len() / 2],
            2,
        ),
    ] {
        let (base, accepted) = scripted_upstream(vec![(wire, cuts)]);
        let tape = dir.path().join(format!("{connections}.jsonl"));
        let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
        let url = format!("{}/v1/messages", proxy.url);
        for _ in 0..2 {
            let (status, got) = http(&url, "POST", HEADERS, &ask(true));
            assert_eq!((status, text(&got)), (200, text(&sse)), "{name}");
        }
        proxy.stop();
        for call in [1, 2] {
            let parts = call_parts(&tape, call);
            let taped: Vec<&serde_json::Value> = parts
                .iter()
                .filter(|(p, _)| p == "event")
                .map(|(_, m)| m)
                .collect();
            assert_eq!(taped.len(), events.len(), "{name}: one line per event");
            for (m, e) in taped.iter().zip(&events) {
                assert_eq!(**m, serde_json::from_str::<serde_json::Value>(e).unwrap());
            }
        }
        let ends: Vec<serde_json::Value> = tape_lines(&tape)
            .into_iter()
            .filter(|l| l["type"] == "model" && l["part"] == "end")
            .collect();
        assert_eq!(ends.len(), 2);
        assert!(
            ends.iter().all(|e| e.get("cut").is_none()),
            "{name}: {ends:?}"
        );
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            connections,
            "{name}: connections the upstream accepted"
        );
        Mt::new(["verify", &s(&tape)]).run().status(0);
    }
}

/// The head alone, then the first event cut across two writes, each 20 ms later (longer than
/// the head waits for the first event): the head is taped and forwarded alone, the first event
/// once it is whole, then the rest; every byte the client gets is the upstream's, every event a
/// tape line after the head, in order. Three such calls, one after the other, reuse the one
/// upstream connection (it goes back to the pool once each stream has ended).
#[test]
fn a_first_event_that_comes_late_and_cut_is_taped_after_the_head_and_forwarded_whole() {
    let dir = tmp();
    let (events, sse, wire, head_len, first_len) = anthropic_stream(5);
    let cuts = vec![head_len, head_len + first_len / 2, head_len + first_len];
    let (base, accepted) = scripted_upstream(vec![(wire, cuts)]);
    let tape = dir.path().join("model.jsonl");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let url = format!("{}/v1/messages", proxy.url);
    for _ in 0..3 {
        let (status, got) = http(&url, "POST", HEADERS, &ask(true));
        assert_eq!(status, 200);
        assert_eq!(
            text(&got),
            text(&sse),
            "the client gets the upstream's bytes"
        );
    }
    proxy.stop();
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the calls share one upstream connection"
    );
    for call in 1..=3 {
        let parts = call_parts(&tape, call);
        let names: Vec<&str> = parts.iter().map(|(p, _)| p.as_str()).collect();
        let mut want = vec!["request", "response"];
        want.extend(std::iter::repeat_n("event", events.len()));
        want.push("end");
        assert_eq!(names, want, "call {call}");
        for ((_, msg), e) in parts[2..].iter().zip(&events) {
            assert_eq!(*msg, serde_json::from_str::<serde_json::Value>(e).unwrap());
        }
    }
    let end = tape_lines(&tape)
        .into_iter()
        .find(|l| l["type"] == "model" && l["part"] == "end")
        .unwrap();
    assert_eq!(end["events"], events.len());
    assert_eq!(end["summary"]["input_tokens"], 4);
    assert_eq!(end["summary"]["output_tokens"], 5);
    assert_eq!(end["summary"]["stop"], "end_turn");
    Mt::new(["verify", &s(&tape)]).run().status(0);
}

/// The answer is taped as it streams, so it must come uncompressed: the proxy asks for
/// `identity` outright. (Dropping `Accept-Encoding` is not enough: with none, any coding is
/// acceptable.) A client that asks for gzip gets the answer, and the tape the JSON.
#[test]
fn the_provider_is_asked_for_an_uncompressed_answer_whatever_the_client_accepts() {
    let dir = tmp();
    let handler = r#"
class H(Quiet):
    def do_POST(self):
        print("accept-encoding:", self.headers.get("Accept-Encoding") or "(none)", flush=True)
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.send_json({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                        "content": [{"type": "text", "text": "plain"}], "stop_reason": "end_turn",
                        "usage": {"input_tokens": 3, "output_tokens": 1}})
"#;
    let (up, port) = py_upstream(dir.path(), "provider", handler, &[]);
    let tape = dir.path().join("model.jsonl");
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let mut headers = HEADERS.to_vec();
    headers.push(("accept-encoding", "gzip, deflate, br"));
    let (status, body) = http(
        &format!("{}/v1/messages", proxy.url.trim_end_matches('/')),
        "POST",
        &headers,
        &ask(false),
    );
    assert_eq!(status, 200, "{}", text(&body));
    assert_contains(&text(&body), r#""text": "plain""#);
    proxy.stop();
    let asked = up.log_text();
    assert!(asked.contains("accept-encoding: identity"), "{asked}");
    assert_contains(
        &std::fs::read_to_string(&tape).unwrap(),
        r#""text": "plain""#,
    );
}

/// The request Codex CLI sends signed in to ChatGPT, zstd-compressed (its default) by the
/// reference `zstd` (tests/fixtures/codex-chatgpt-request.json{,.zst}): secrets in the prompt,
/// in a tool call's arguments and in a tool's output, `2.50`, keys in odd order.
fn codex_request() -> (Vec<u8>, Vec<u8>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let json = std::fs::read(dir.join("codex-chatgpt-request.json")).expect("fixture");
    let zst = std::fs::read(dir.join("codex-chatgpt-request.json.zst")).expect("fixture");
    (json, zst)
}

/// A compressed request (Codex CLI's zstd) is forwarded as it came and taped decoded: the
/// redactor sees inside it, the tape's request is the JSON the agent sent, and playback
/// matches it whatever coding the replayed request uses. A coding mcptape does not know is
/// forwarded and taped as it came, with why. (The tape held the zstd bytes as `b64`: every
/// secret in them readable by anyone with `zstd -d`, and no request ever matched again.)
#[test]
fn a_compressed_request_is_forwarded_as_it_came_and_taped_and_matched_decoded() {
    let dir = tmp();
    let handler = r#"
import hashlib
class H(Quiet):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        print("got", self.headers.get("Content-Encoding"), hashlib.sha256(body).hexdigest(), flush=True)
        self.send_json({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5.2-codex",
                        "output": [{"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": "deployed"}]}],
                        "usage": {"input_tokens": 40, "output_tokens": 2}})
"#;
    let (up, port) = py_upstream(dir.path(), "provider", handler, &[]);
    let tape = dir.path().join("model.jsonl");
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let (json, zst) = codex_request();
    let url = format!("{}/v1/responses", proxy.url.trim_end_matches('/'));
    let headers = |coding: &'static str| {
        vec![
            ("content-type", "application/json"),
            (
                "authorization",
                "Bearer eyJhbGciOiJSUzI1NiJ9.chatgpt-access-token",
            ),
            ("chatgpt-account-id", "acc-123"),
            ("content-encoding", coding),
        ]
    };
    let (status, body) = http(&url, "POST", &headers("zstd"), &zst);
    assert_eq!(status, 200, "{}", text(&body));
    assert_contains(&text(&body), "deployed");
    // Not a coding mcptape reads: forwarded all the same, taped as it came, and said so.
    let (status, _) = http(&url, "POST", &headers("br"), b"\x8b\x02\x80{}\x03");
    assert_eq!(status, 200);
    let err = proxy.stop();

    let sha = |b: &[u8]| {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(b))
    };
    let got = up.log_text();
    assert_contains(&got, &format!("got zstd {}", sha(&zst)));
    assert_contains(&got, &format!("got br {}", sha(b"\x8b\x02\x80{}\x03")));

    let taped = std::fs::read_to_string(&tape).expect("tape");
    for secret in [
        "sk-proj-Zq8XbT3vLm5N2cRy7WkHd4FgJs6Ap9Ue1Io0Qw",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaSJ9",
        "chatgpt-access-token",
        "hunter2-correct-horse",
    ] {
        assert!(!taped.contains(secret), "{secret} is on the tape:\n{taped}");
    }
    assert_contains(
        &err,
        r#"mcptape: model request /v1/responses: the content coding "br" is not one mcptape decodes; taped as it came"#,
    );
    let requests: Vec<serde_json::Value> = taped
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["type"] == "model" && l["part"] == "request")
        .collect();
    assert_eq!(requests.len(), 2, "{taped}");
    let first = &requests[0];
    assert_eq!(first["http"]["content_encoding"], "zstd", "{first}");
    assert_eq!(first["model"], "gpt-5.2-codex", "{first}");
    assert_eq!(first["stream"], true, "{first}");
    assert!(first.get("b64").is_none(), "{first}");
    let sent: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let mut msg = first["msg"].clone();
    assert_eq!(
        msg["input"][0]["content"][0]["text"]
            .as_str()
            .map(|t| t.contains("[REDACTED:")),
        Some(true),
        "{msg}"
    );
    // Everything but the redacted values is the JSON the agent sent, `2.50` as written.
    assert_contains(&taped, r#"\"total\":2.50"#);
    msg["input"] = sent["input"].clone();
    assert_eq!(msg, sent);
    let second = &requests[1];
    assert_eq!(second["http"]["content_encoding"], "br", "{second}");
    assert_contains(
        second["http"]["decode_error"].as_str().unwrap_or(""),
        "is not one mcptape decodes",
    );
    assert!(second.get("b64").is_some(), "{second}");
    Mt::new(["verify"]).arg(&tape).run().success();

    // Played back: the same request matches, sent gzip-compressed this time.
    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&json).unwrap();
        e.finish().unwrap()
    };
    let url = format!("{}/v1/responses", player.url.trim_end_matches('/'));
    let (status, body) = http(&url, "POST", &headers("gzip"), &gz);
    assert_eq!(status, 200, "{}", text(&body));
    assert_contains(&text(&body), "deployed");
    player.stop();
}

/// A streamed OpenAI chat answer with `logprobs: true` names every piece of the model's text
/// `token`: the tape kept markers in their place, and playback served the answer with its words
/// replaced. Now the tape holds the events as the provider sent them (nothing redacted in
/// them), and playback serves them byte for byte; the API key is still not taped.
#[test]
fn a_streamed_answer_with_logprobs_is_taped_and_played_back_as_the_model_said_it() {
    let dir = tmp();
    let words = ["Hello", " token", " world"];
    let mut events: Vec<String> = words
        .iter()
        .map(|w| {
            let bytes: Vec<u8> = w.bytes().collect();
            format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-test","choices":[{{"index":0,"delta":{{"content":{w:?}}},"logprobs":{{"content":[{{"token":{w:?},"logprob":-0.25,"bytes":{bytes:?},"top_logprobs":[{{"token":{w:?},"logprob":-0.25,"bytes":{bytes:?}}},{{"token":"Password1","logprob":-3.50,"bytes":[80]}}]}}]}},"finish_reason":null}}]}}"#
            )
        })
        .collect();
    events.push(
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-test","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#.to_string(),
    );
    let mut sse = Vec::new();
    for e in &events {
        sse.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    sse.extend_from_slice(b"data: [DONE]\n\n");
    let mut wire = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        sse.len()
    )
    .into_bytes();
    wire.extend_from_slice(&sse);
    let (base, _) = scripted_upstream(vec![(wire, vec![])]);
    let tape = dir.path().join("model.jsonl");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let request = serde_json::json!({
        "model": "gpt-test", "stream": true, "logprobs": true, "top_logprobs": 2,
        "messages": [{"role": "user", "content": "say hello"}]
    })
    .to_string();
    let headers: &[(&str, &str)] = &[
        ("content-type", "application/json"),
        (
            "authorization",
            "Bearer sk-proj-Q7vN2pXcL9mR4tY8wK1zH6bJ3fD5sA0gE2uI9oP7lM4nB8vC",
        ),
    ];
    let url = format!("{}/v1/chat/completions", proxy.url);
    let (status, got) = http(&url, "POST", headers, request.as_bytes());
    assert_eq!((status, text(&got)), (200, text(&sse)));
    proxy.stop();

    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(!raw.contains("sk-proj-Q7vN"), "the key is not taped");
    let taped: Vec<serde_json::Value> = tape_lines(&tape)
        .into_iter()
        .filter(|l| l["type"] == "model" && l["part"] == "event")
        .collect();
    assert!(taped.len() >= events.len(), "{taped:?}");
    for (line, e) in taped.iter().zip(&events) {
        assert_eq!(
            line["msg"],
            serde_json::from_str::<serde_json::Value>(e).unwrap()
        );
        assert!(line.get("redacted").is_none(), "nothing redacted: {line}");
    }

    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    let (status, again) = http(
        &format!("{}/v1/chat/completions", player.url),
        "POST",
        headers,
        request.as_bytes(),
    );
    assert_eq!((status, text(&again)), (200, text(&sse)));
    let log = player.stop();
    assert_contains(&log, "1 model call served, 0 missed");
}

/// A provider whose every answer says which call it was: its count of requests.
const COUNTING_PROVIDER: &str = r#"
class H(Quiet):
    n = 0
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        H.n += 1
        self.send_json({"id": "msg_%d" % H.n, "type": "message", "role": "assistant",
                        "model": "claude-test", "stop_reason": "end_turn",
                        "content": [{"type": "text", "text": "answer %d" % H.n}],
                        "usage": {"input_tokens": 3, "output_tokens": 2}})
"#;

/// GitHub tokens, which the redactor replaces with markers.
const TOKENS: [&str; 3] = [
    "ghp_Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk1Ll2Mm3",
    "ghp_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8Nn7",
    "ghp_Mm3Nn4Oo5Pp6Qq7Rr8Ss9Tt0Uu1Vv2Ww3Xx4Yy5",
];

/// An Anthropic request whose prompt holds `token`.
fn ask_with(token: &str) -> Vec<u8> {
    serde_json::json!({
        "model": "claude-test", "max_tokens": 5, "stream": false,
        "messages": [{"role": "user", "content": format!("deploy billing with {token}, then say done")}]
    })
    .to_string()
    .into_bytes()
}

/// An agent of our own: for each token in its arguments, the request of [`ask_with`] to
/// `$ANTHROPIC_BASE_URL`, printing each answer's text.
const TOKEN_AGENT: &str = r#"import json, os, sys, urllib.request
for token in sys.argv[1:]:
    body = {"model": "claude-test", "max_tokens": 5, "stream": False,
            "messages": [{"role": "user", "content": "deploy billing with %s, then say done" % token}]}
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "x-api-key": "k",
                                          "anthropic-version": "2023-06-01"})
    print(json.loads(urllib.request.urlopen(req).read())["content"][0]["text"], flush=True)
"#;

/// Two model calls recorded with `MCPTAPE_REDACT_KEY` set, their requests the same but for a
/// GitHub token in the user's prompt (redacted on the tape, each marker's hash made with the
/// key). Played back with the same key, in the opposite order, each request is served the
/// answer recorded with its own token (model playback treated every marker as a wildcard and
/// served the first recorded call to both). Without the key, the first recorded call still
/// answers, and a warning says the calls differ only in redacted values and names the key.
#[test]
fn with_the_marker_key_playback_serves_each_request_the_call_recorded_with_its_secret() {
    let dir = tmp();
    let (_up, port) = py_upstream(dir.path(), "provider", COUNTING_PROVIDER, &[]);
    let tape = dir.path().join("keyed.jsonl");
    let key = "k3y-0f-the-ci-s3cret-store-2026";
    let with_key = |k: Option<&str>| -> Vec<(String, String)> {
        k.map(|k| vec![("MCPTAPE_REDACT_KEY".to_string(), k.to_string())])
            .unwrap_or_default()
    };
    let tokens = &TOKENS[..2];
    let ask = ask_with;
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--upstream", &base],
        &with_key(Some(key)),
    );
    let url = format!("{}/v1/messages", proxy.url);
    for (n, token) in tokens.iter().enumerate() {
        let (status, body) = http(&url, "POST", HEADERS, &ask(token));
        assert_eq!(status, 200, "{}", text(&body));
        assert_contains(&text(&body), &format!("answer {}", n + 1));
    }
    proxy.stop();
    let raw = std::fs::read_to_string(&tape).unwrap();
    for secret in tokens.iter().chain([&key]) {
        assert!(!raw.contains(secret), "{secret} is on the tape");
    }
    let header: serde_json::Value = serde_json::from_str(raw.lines().next().unwrap()).unwrap();
    let id = header["marker_key"]
        .as_str()
        .expect("the header names the key")
        .to_string();
    let markers: Vec<String> = tape_lines(&tape)
        .iter()
        .filter(|l| l["type"] == "model" && l["part"] == "request")
        .map(|l| l["msg"]["messages"][0]["content"].to_string())
        .collect();
    assert_eq!(markers.len(), 2, "{raw}");
    assert!(
        markers.iter().all(|m| m.contains("[REDACTED:")) && markers[0] != markers[1],
        "each token its own marker: {markers:?}"
    );

    // The same key, the second token first: each its own answer, no warning.
    let player = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--playback"],
        &with_key(Some(key)),
    );
    let purl = format!("{}/v1/messages", player.url);
    for (token, answer) in [(tokens[1], "answer 2"), (tokens[0], "answer 1")] {
        let (status, body) = http(&purl, "POST", HEADERS, &ask(token));
        assert_eq!(status, 200, "{}", text(&body));
        assert_contains(&text(&body), answer);
    }
    let log = player.stop();
    assert_contains(&log, "2 model calls served, 0 missed");
    assert!(!log.contains("WARNING"), "{log}");

    // `run --playback` plays the model side the same way: an agent of our own asks with
    // the second token first.
    let agent = dir.path().join("agent.py");
    std::fs::write(&agent, TOKEN_AGENT).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let played = Mt::new(["run", "--playback", "--tape", &s(&tape), "--"])
        .arg(python())
        .arg(&agent)
        .args([tokens[1], tokens[0]])
        .env("MCPTAPE_DIR", dir.path().join("store"))
        .env("HOME", &home)
        .env("MCPTAPE_REDACT_KEY", key)
        .dir(&home)
        .run()
        .success();
    assert_eq!(
        played.stdout,
        "answer 2\nanswer 1\n",
        "{}",
        played.console()
    );
    assert_contains(&played.stderr, "2 model calls served, 0 missed");
    assert!(!played.stderr.contains("WARNING"), "{}", played.console());

    // The warning's words but for why, said of the first recorded call (served).
    let (n, line) = first_model_call(&tape);
    let warning = |why: &str| {
        format!(
            "mcptape: WARNING: model request POST messages fits 2 recorded calls that differ only in redacted values; served call {n} (tape line {line}), the first unused. {why} (said once for this request shape; the summary counts every request it applied to)"
        )
    };

    // No key: markers are wildcards, the first recorded call answers, and the warning says
    // which key would tell the calls apart.
    let player = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--playback"],
        &with_key(None),
    );
    let purl = format!("{}/v1/messages", player.url);
    let (status, body) = http(&purl, "POST", HEADERS, &ask(tokens[1]));
    assert_eq!(status, 200, "{}", text(&body));
    assert_contains(&text(&body), "answer 1");
    let log = player.stop();
    assert_eq!(
        model_warning(&log),
        warning(&format!(
            "The tape holds markers, not the secrets; its markers were made with a marker key (id {id}) and MCPTAPE_REDACT_KEY is not set: with it set to that key, playback serves the one recorded with the client's values"
        ))
    );

    // Another key: said, and markers are wildcards; the warning names both keys (it said
    // "with MCPTAPE_REDACT_KEY set to that key", as if none were set).
    let player = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--playback"],
        &with_key(Some("another-key-of-32-characters-xx")),
    );
    let purl = format!("{}/v1/messages", player.url);
    let (_, body) = http(&purl, "POST", HEADERS, &ask(tokens[1]));
    assert_contains(&text(&body), "answer 1");
    let log = player.stop();
    let other = crate::secret_args::another_key_id(&log, &id);
    assert_eq!(
        model_warning(&log),
        warning(&format!(
            "The tape holds markers, not the secrets; its markers were made with a marker key (id {id}) and MCPTAPE_REDACT_KEY is another key (id {other}): with it set to the tape's key, playback serves the one recorded with the client's values"
        ))
    );
}

/// Two shapes of model request recorded without a marker key, each with several GitHub
/// tokens (markers on the tape): `deploy billing with TOKEN` three times, then `rotate the
/// keys of TOKEN` twice. Played back in the same order, the deploy requests fit 3, 2 and 1
/// recorded calls and the rotate requests 2 and 1. Model playback warns once per request
/// shape, as `mcptape play` does: two warnings, each naming the first call of its shape (it
/// warned once per recorded call served: three, two for deploy). The summary still counts
/// every request served among calls that differ only in redacted values: three. `run
/// --playback` says the same.
#[test]
fn playback_warns_once_per_request_shape_however_many_requests_of_it_are_ambiguous() {
    let dir = tmp();
    let (_up, port) = py_upstream(dir.path(), "provider", COUNTING_PROVIDER, &[]);
    let tape = dir.path().join("two-shapes.jsonl");
    let rotate = |token: &str| {
        serde_json::json!({
            "model": "claude-test", "max_tokens": 5, "stream": false,
            "messages": [{"role": "user", "content": format!("rotate the keys of {token}")}]
        })
        .to_string()
        .into_bytes()
    };
    let requests: Vec<Vec<u8>> = TOKENS
        .iter()
        .map(|t| ask_with(t))
        .chain(TOKENS[..2].iter().map(|t| rotate(t)))
        .collect();
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--upstream", &base],
        &[],
    );
    for (n, body) in requests.iter().enumerate() {
        let (status, answer) = http(&format!("{}/v1/messages", proxy.url), "POST", HEADERS, body);
        assert_eq!(status, 200, "{}", text(&answer));
        assert_contains(&text(&answer), &format!("answer {}", n + 1));
    }
    proxy.stop();
    let header = &tape_lines(&tape)[0];
    assert!(
        header["marker_key"].is_null(),
        "recorded with no key: {header}"
    );
    let calls: Vec<(u64, usize)> = tape_lines(&tape)
        .iter()
        .enumerate()
        .filter(|(_, l)| l["type"] == "model" && l["part"] == "request")
        .map(|(i, l)| (l["call"].as_u64().expect("its number"), i + 1))
        .collect();
    assert_eq!(calls.len(), 5, "five calls taped");
    let warning = |(n, line): (u64, usize), views: usize| {
        format!(
            "mcptape: WARNING: model request POST messages fits {views} recorded calls that differ only in redacted values; served call {n} (tape line {line}), the first unused. The tape holds markers, not the secrets, so playback cannot tell which one the client meant: its answer may be the one recorded for another value (record with MCPTAPE_REDACT_KEY set, and play back with the same key, to tell them apart) (said once for this request shape; the summary counts every request it applied to)"
        )
    };
    let expected = [warning(calls[0], 3), warning(calls[3], 2)];
    const COUNTED: &str =
        "3 model requests served among recorded calls that differ only in redacted values (POST messages: 3)";
    let said = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("differ only in redacted values; served call"))
            .map(str::to_string)
            .collect()
    };

    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    for (n, body) in requests.iter().enumerate() {
        let (status, answer) = http(
            &format!("{}/v1/messages", player.url),
            "POST",
            HEADERS,
            body,
        );
        assert_eq!(status, 200, "{}", text(&answer));
        // Markers are wildcards without the key: the earliest unused call of the shape.
        assert_contains(&text(&answer), &format!("answer {}", n + 1));
    }
    let log = player.stop();
    assert_eq!(said(&log), expected, "once per request shape:\n{log}");
    assert_contains(
        &log,
        &format!("5 model calls served, 0 missed, 0 served leniently, 0 recorded calls unused, {COUNTED}"),
    );

    // run --playback: an agent of our own sends the same requests in the same order.
    let agent = dir.path().join("agent.py");
    std::fs::write(
        &agent,
        r#"import json, os, sys, urllib.request
for text in sys.argv[1:]:
    body = {"model": "claude-test", "max_tokens": 5, "stream": False,
            "messages": [{"role": "user", "content": text}]}
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "x-api-key": "k",
                                          "anthropic-version": "2023-06-01"})
    print(json.loads(urllib.request.urlopen(req).read())["content"][0]["text"], flush=True)
"#,
    )
    .unwrap();
    let prompts: Vec<String> = TOKENS
        .iter()
        .map(|t| format!("deploy billing with {t}, then say done"))
        .chain(
            TOKENS[..2]
                .iter()
                .map(|t| format!("rotate the keys of {t}")),
        )
        .collect();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let played = Mt::new(["run", "--playback", "--tape", &s(&tape), "--"])
        .arg(python())
        .arg(&agent)
        .args(&prompts)
        .env("MCPTAPE_DIR", dir.path().join("store"))
        .env("HOME", &home)
        .env_remove("MCPTAPE_REDACT_KEY")
        .dir(&home)
        .run()
        .success();
    assert_eq!(
        played.stdout,
        "answer 1\nanswer 2\nanswer 3\nanswer 4\nanswer 5\n",
        "{}",
        played.console()
    );
    assert_eq!(said(&played.stderr), expected, "{}", played.console());
    assert_contains(
        &played.stderr,
        &format!("5 model calls served, 0 missed, {COUNTED}, no MCP server from the tape"),
    );
}

/// The number and tape line (from 1) of the first model call on `tape`.
fn first_model_call(tape: &std::path::Path) -> (u64, usize) {
    let lines = tape_lines(tape);
    let at = lines
        .iter()
        .position(|l| l["type"] == "model" && l["part"] == "request")
        .expect("a model call on the tape");
    (lines[at]["call"].as_u64().expect("its number"), at + 1)
}

/// The one ambiguity warning in a playback's log.
#[track_caller]
fn model_warning(log: &str) -> &str {
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("differ only in redacted values; served call"))
        .collect();
    assert_eq!(said.len(), 1, "one warning:\n{log}");
    said[0]
}

/// The MCP servers' tools, as an agent passes them to its model, are taped as the servers said
/// them (the shape rules only, as in `tools/list`), and a tape whose tool definitions were
/// redacted by the keyword guess (before) still plays back.
#[test]
fn tool_definitions_in_a_model_request_are_taped_as_said_and_old_tapes_still_play() {
    let dir = tmp();
    let handler = r#"
class H(Quiet):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_json({"id": "msg_1", "type": "message", "role": "assistant",
                        "model": "claude-test", "stop_reason": "end_turn",
                        "content": [{"type": "text", "text": "deployed"}],
                        "usage": {"input_tokens": 3, "output_tokens": 2}})
"#;
    let (_up, port) = py_upstream(dir.path(), "provider", handler, &[]);
    let said = "Signs in to the demo tenant; its password is demo1234 (public, in the docs)";
    let about_token = "the token is a PAT with scope repo2";
    let user_token = "ghp_Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk1Ll2Mm3";
    let request = serde_json::json!({
        "model": "claude-test", "max_tokens": 5, "stream": false,
        "tools": [{"name": "mcp__demo__login", "description": said, "input_schema": {
            "type": "object", "properties": {"token": {"type": "string", "description": about_token}},
            "required": ["token"]}}],
        "messages": [{"role": "user", "content": format!("log in with {user_token}")}]
    })
    .to_string()
    .into_bytes();
    let tape = dir.path().join("tools.jsonl");
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let (status, body) = http(
        &format!("{}/v1/messages", proxy.url),
        "POST",
        HEADERS,
        &request,
    );
    assert_eq!(status, 200, "{}", text(&body));
    proxy.stop();
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(
        !raw.contains(user_token),
        "the user's token is on the tape: {raw}"
    );
    let taped = tape_lines(&tape)
        .into_iter()
        .find(|l| l["type"] == "model" && l["part"] == "request")
        .expect("the request is taped");
    let tool = &taped["msg"]["tools"][0];
    assert_eq!(tool["description"], said, "{taped}");
    assert_eq!(
        tool["input_schema"]["properties"]["token"]["description"], about_token,
        "{taped}"
    );

    // The tape as mcptape wrote it before: the same words redacted by the keyword rule. Its
    // markers stand for any value, so the request as the agent sends it still fits.
    let old = dir.path().join("old.jsonl");
    let lines: Vec<String> = raw
        .lines()
        .map(|l| {
            if l.contains(r#""part":"request""#) {
                l.replace("demo1234", "[REDACTED:keyword:5cca3e0b]")
                    .replace("repo2", "[REDACTED:keyword:0b1c2d3e]")
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_ne!(lines.join("\n"), raw.trim_end(), "the old tape differs");
    std::fs::write(
        &old,
        crate::security::rechain(&lines, false).join("\n") + "\n",
    )
    .unwrap();
    for t in [&tape, &old] {
        let player = Served::spawn(&["model-proxy", "--tape", &s(t), "--playback"]);
        let (status, body) = http(
            &format!("{}/v1/messages", player.url),
            "POST",
            HEADERS,
            &request,
        );
        assert_eq!(status, 200, "{}: {}", t.display(), text(&body));
        assert_contains(&text(&body), "deployed");
        let log = player.stop();
        assert_contains(&log, ": 1 model call served, 0 missed");
    }
}

/// Three model calls recorded without a marker key, their requests the same but for a GitHub
/// token (the tape holds a marker for each, not the tokens). Played back with the three
/// requests in turn, the first fits all three calls and the second the two left, each made
/// with other tokens: one warning (the request's shape is the same), and the summary counts
/// both, as `mcptape play` counts MCP requests served among recorded requests that differ only
/// in redacted values — `model-proxy --playback` and `run --playback` alike. The third fits one
/// call: not counted. (Before, only the warnings said it: the summary said nothing.)
#[test]
fn playback_counts_requests_served_among_calls_that_differ_only_in_redacted_values() {
    let dir = tmp();
    let (_up, port) = py_upstream(dir.path(), "provider", COUNTING_PROVIDER, &[]);
    let tape = dir.path().join("three-tokens.jsonl");
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let url = format!("{}/v1/messages", proxy.url);
    for (n, token) in TOKENS.iter().enumerate() {
        let (status, body) = http(&url, "POST", HEADERS, &ask_with(token));
        assert_eq!(status, 200, "{}", text(&body));
        assert_contains(&text(&body), &format!("answer {}", n + 1));
    }
    proxy.stop();
    const COUNTED: &str =
        "2 model requests served among recorded calls that differ only in redacted values (POST messages: 2)";

    let player = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--playback"]);
    let purl = format!("{}/v1/messages", player.url);
    for (n, token) in TOKENS.iter().enumerate() {
        let (status, body) = http(&purl, "POST", HEADERS, &ask_with(token));
        assert_eq!(status, 200, "{}", text(&body));
        // Markers are wildcards without the key: the earliest unused call answers.
        assert_contains(&text(&body), &format!("answer {}", n + 1));
    }
    let log = player.stop();
    let warnings = log
        .matches("differ only in redacted values; served call")
        .count();
    assert_eq!(warnings, 1, "once for the request's shape:\n{log}");
    let summary = log
        .lines()
        .find(|l| l.contains(" model calls served, "))
        .unwrap_or_else(|| panic!("no summary:\n{log}"));
    assert_contains(
        summary,
        &format!("3 model calls served, 0 missed, 0 served leniently, 0 recorded calls unused, {COUNTED}"),
    );

    let agent = dir.path().join("agent.py");
    std::fs::write(&agent, TOKEN_AGENT).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let played = Mt::new(["run", "--playback", "--tape", &s(&tape), "--"])
        .arg(python())
        .arg(&agent)
        .args(TOKENS)
        .env("MCPTAPE_DIR", dir.path().join("store"))
        .env("HOME", &home)
        .env_remove("MCPTAPE_REDACT_KEY")
        .dir(&home)
        .run()
        .success();
    assert_eq!(
        played.stdout,
        "answer 1\nanswer 2\nanswer 3\n",
        "{}",
        played.console()
    );
    assert_contains(
        &played.stderr,
        &format!("3 model calls served, 0 missed, {COUNTED}, no MCP server from the tape"),
    );
}

/// `model-proxy`'s summary counts the model calls, with Code Assist's setup calls (Gemini CLI
/// signed in with Google) beside them, as `run` and playback count them; it said "3 model
/// calls" for one call and two setup calls (it counted every request line), and before that
/// "N lines taped" (it counted every model line).
#[test]
fn the_record_summary_counts_model_calls_and_code_assist_setup_calls_apart() {
    let dir = tmp();
    let (_up, port) = py_upstream(dir.path(), "provider", COUNTING_PROVIDER, &[]);
    let tape = dir.path().join("code-assist.jsonl");
    let base = format!("http://127.0.0.1:{port}");
    let proxy = Served::spawn_env(
        &["model-proxy", "--tape", &s(&tape), "--upstream", &base],
        &[],
    );
    let body = br#"{"model":"gemini-2.5-pro","project":"p","request":{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}}"#;
    for method in ["loadCodeAssist", "retrieveUserQuota", "generateContent"] {
        let url = format!("{}/v1internal:{method}", proxy.url);
        let (status, answer) = http(&url, "POST", HEADERS, body);
        assert_eq!(status, 200, "{method}: {}", text(&answer));
    }
    let err = proxy.stop();
    let lines = tape_lines(&tape)
        .iter()
        .filter(|l| l["type"] == "model")
        .count();
    assert_contains(
        &err,
        &format!(
            "mcptape model-proxy: recorded 1 model call (2 Code Assist setup calls beside them) to {} ({lines} lines: ",
            tape.display()
        ),
    );
}
