//! Streamable HTTP: `mcptape record --url` (the reverse proxy) and `mcptape play --listen`,
//! against server-everything in its `streamableHttp` mode, the Python SDK server over HTTP in
//! both eras, the Python SDK client, and tiny stdlib Python upstreams crafted for the SSE edge
//! cases. Every server is forced onto 127.0.0.1; every process a test starts is killed when the
//! test ends (the guards below), pass or fail. No timing assertions: only ordering.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// The process guard, the URL-printing mcptape and the HTTP client are the harness's; corpus_e2e
// takes them from here.
pub(crate) use crate::harness::{http_open, post_headers, Proc, Served};

/// A stdlib HTTP upstream for the edge cases. POST answers by JSON-RPC method:
/// `edge/sse` a crafted SSE stream (heartbeat, priming event with id and retry, an event written
/// in pieces with flushes and pauses between them, a multi-line `data:` event, then — only once
/// `GET /release/sse` arrived — the response); `edge/hang` one progress event, then after
/// `GET /release/hang` more events until the reader goes away; `edge/fail` a 500 in text/plain;
/// `edge/bare` a 400 with a body and no `Content-Type`; anything else a plain JSON result echoing the method. HTTP/1.0: bodies end when it closes.
const EDGE_UPSTREAM: &str = r#"
SSE_HEAD = [
    (": heartbeat\n\n", 0.05),
    ("id: prime-1\nretry: 1500\ndata:\n\n", 0.05),
    ("event: message\nid: ev-2\nda", 0.1),
    ('ta: {"jsonrpc":"2.0","method":"notifications/message",', 0.1),
    ('"params":{"level":"info","data":"split"}}\n', 0.1),
    ("\n", 0.05),
    ('id: ev-3\ndata: {"jsonrpc":"2.0","method":"notifications/message",\n'
     'data: "params":{"level":"info","data":"multi-line","token":"s3cr3t-sse-token-value"}}\n\n', 0.0),
]

class H(Quiet):
    def do_GET(self):
        if self.released():
            return
        last = self.headers.get("Last-Event-ID")
        if last is not None:
            # Resumption: the stream picks up after the event the client last saw.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.w('id: resumed-1\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"resumed after %s"}}\n\n' % last)
            return
        self.not_allowed()

    def do_POST(self):
        msg, method, rid = self.read_msg()
        if method == "edge/fail":
            body = b"upstream exploded"
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if method == "edge/bare":
            # A refusal with a body but no Content-Type at all.
            body = b"refused, and no content type"
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if method in ("edge/sse", "edge/hang"):
            self.start_sse()
            try:
                if method == "edge/sse":
                    self.stream_sse(rid)
                else:
                    self.stream_hang(rid)
            except (BrokenPipeError, ConnectionResetError):
                print("edge: the reader went away", file=sys.stderr, flush=True)
            return
        if rid is None:
            self.accepted()
            return
        self.send_json({"jsonrpc": "2.0", "id": rid, "result": {"echo": method}})

    def stream_sse(self, rid):
        for text, pause in SSE_HEAD:
            self.w(text, pause)
        switch("sse").wait(30)
        self.w('id: ev-4\nevent: message\ndata: {"jsonrpc":"2.0","id":%s,"result":{"ok":true}}\n\n'
               % json.dumps(rid))

    def stream_hang(self, rid):
        progress = 'id: h-%d\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":%d}}\n\n'
        self.w(progress % (1, 1))
        switch("hang").wait(30)
        for i in range(2, 1000):
            self.w(progress % (i, i), 0.01)
        self.w('data: {"jsonrpc":"2.0","id":%s,"result":{}}\n\n' % json.dumps(rid))

switch("sse"); switch("hang")
"#;

/// A request to the edge upstream: `method` (no params) with `id`.
fn edge_request(id: i64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method})
}

/// The edge upstream with `record --url` in front of it, taping to `dir/TAPE`.
fn edge_recording(dir: &Path, tape: &str) -> RecordedUpstream {
    record_upstream(dir, "edge", EDGE_UPSTREAM, tape)
}

// --- assertions ------------------------------------------------------------------------------

/// server-everything sends `notifications/tools/list_changed` (registering its conditional
/// tools) while it handles `notifications/initialized`: they go out on the GET stream only if the
/// client's GET, sent concurrently, got there first. How many a client sees is a race between the
/// peers, direct or through the proxy; comparisons of two live runs leave them out. (A replay
/// serves what the tape holds, so replays are compared with them.) Its `roots/list` request and
/// the "Roots updated" log after it race the same way: it asks once the client's initialized
/// notification is handled, and a client that is done before then never sees either (seen in a
/// CI run: the direct session without them, the one through the bridge with them).
fn without_handshake_list_changed(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(list) = t["notifications"].as_array_mut() {
        list.retain(|n| {
            n["method"] != "notifications/tools/list_changed"
                && n["server_request"] != "roots/list"
                && !n["params"]["data"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("Roots updated"))
        });
    }
    t
}

fn assert_same(expected: &Value, actual: &Value, what: &str) {
    assert!(
        expected == actual,
        "the client saw something else {what}.\n--- expected:\n{}\n--- actual:\n{}",
        pretty(expected),
        pretty(actual)
    );
}

/// [`assert_same`] for two live runs: the handshake's `list_changed` notifications left out (see
/// [`without_handshake_list_changed`]).
fn assert_same_live(expected: &Value, actual: &Value, what: &str) {
    assert_same(
        &without_handshake_list_changed(expected),
        &without_handshake_list_changed(actual),
        what,
    );
}

/// play's summary on stderr says nothing was missed or drifted.
fn assert_clean_play(stderr: &str) {
    assert!(
        stderr.contains("missed 0, drifted 0"),
        "play summary: {stderr}"
    );
}

/// Replays `tape` over stdio to the Python client; requires the same transcript, play exit 0
/// and nothing missed.
fn replay_stdio(tape: &Path, dir: &Path, scenario: &str, mode: &str, expected: &Value) {
    let rc = dir.join("play.rc");
    let err = dir.join("play.err");
    let _ = std::fs::remove_file(&rc);
    let replayed = py_ok(
        scenario,
        mode,
        &play_reporting(tape, &rc, Some(&err)),
        "against play over stdio",
    );
    let status = reported_status(&rc);
    let play_err = std::fs::read_to_string(&err).unwrap_or_default();
    assert_same(expected, &replayed, "through play over stdio");
    assert_eq!(status, 0, "play exit status; stderr:\n{play_err}");
    assert_clean_play(&play_err);
}

/// Replays `tape` over HTTP (`play --listen`) to the Python client; requires the same
/// transcript, play exit 0 after SIGINT and nothing missed.
fn replay_http(tape: &Path, scenario: &str, mode: &str, expected: &Value) {
    let play = Served::play(tape);
    let replayed = py_ok(
        scenario,
        mode,
        std::slice::from_ref(&play.url),
        "against play --listen",
    );
    let err = play.stop();
    assert_same(expected, &replayed, "through play over HTTP");
    assert_clean_play(&err);
}

/// Tape lines, skipping (and returning) those that are not JSON.
fn tape_lines_lenient(path: &Path) -> (Vec<Value>, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("read tape");
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for l in text.lines() {
        match serde_json::from_str(l) {
            Ok(v) => ok.push(v),
            Err(_) => bad.push(l.to_string()),
        }
    }
    (ok, bad)
}

fn events<'a>(lines: &'a [Value], what: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "event" && l["what"] == what)
        .collect()
}

/// Records `scenario` of the Python client through `record --url upstream`; returns the tape
/// and the transcript.
fn record_py(
    upstream: &str,
    dir: &Path,
    scenario: &str,
    mode: &str,
    extra: impl FnOnce(&Served),
) -> (PathBuf, Value) {
    let tape = dir.join(format!("{scenario}-{mode}.jsonl"));
    let rec = Served::record(upstream, &tape);
    assert!(rec.url.ends_with("/mcp"), "proxy URL {}", rec.url);
    let recorded = py_ok(
        scenario,
        mode,
        std::slice::from_ref(&rec.url),
        "through record --url",
    );
    extra(&rec);
    rec.stop();
    (tape, recorded)
}

/// Starts a server with `start` (in `dir`), records `scenario` through `record --url` to it and
/// stops the server again, so that play cannot lean on it; returns the tape and the transcript.
fn record_py_then_stop_server(
    start: fn(&Path) -> (Proc, String),
    dir: &Path,
    scenario: &str,
    mode: &str,
) -> (PathBuf, Value) {
    let (_server, upstream) = start(dir);
    record_py(&upstream, dir, scenario, mode, |_| {})
}

/// The Python client's legacy-era `everything` scenario against `url` (`what` the run is).
fn everything_at(url: &str, what: &str) -> Value {
    py_ok("everything", "legacy", &[url.to_string()], what)
}

// --- 1, 2: server-everything over Streamable HTTP --------------------------------------------

#[test]
fn everything_through_the_proxy_is_transparent_tapes_http_facts_and_no_credentials() {
    let dir = tmp();
    let (_server, upstream) = everything_http(dir.path());
    let direct = everything_at(&upstream, "direct");

    const SECRETS: [&str; 3] = [
        "sk-test-9f8e7d6c5b4a-TOPSECRET",
        "cookie-secret-0xC0FFEE",
        "apikey-secret-12345",
    ];
    let (tape, recorded) = record_py(&upstream, dir.path(), "everything", "legacy", |rec| {
        // A raw client with credentials: forwarded (server-everything answers), never taped.
        let auth = format!("Bearer {}", SECRETS[0]);
        let cookie = format!("session={}", SECRETS[1]);
        let init = json!({"jsonrpc": "2.0", "id": 77, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
        let (status, body) = http(
            &rec.url,
            "POST",
            &post_headers(&[
                ("Authorization", &auth),
                ("Cookie", &cookie),
                ("X-API-Key", SECRETS[2]),
            ]),
            init.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "raw initialize: {}", text(&body));
        assert!(
            text(&body).contains(r#""id":77"#),
            "raw initialize answered: {}",
            text(&body)
        );
    });
    assert_same_live(&direct, &recorded, "through record --url");

    let bytes = std::fs::read(&tape).expect("tape");
    let all = text(&bytes);
    for secret in SECRETS {
        assert!(
            !all.contains(secret),
            "a credential reached the tape: {secret}"
        );
    }
    assert!(!all.to_ascii_lowercase().contains("bearer"), "{all}");
    assert!(
        all.contains(r#""id":77"#),
        "the raw request is on the tape (without its credentials)"
    );

    let lines = tape_lines(&tape);
    assert_eq!(lines[1]["transport"], "streamable_http", "{}", lines[1]);
    assert_eq!(lines[1]["url"], upstream.as_str());
    let msgs = tape_msgs(&tape);
    let sse_facts = |m: &Value| {
        let h = &m["http"];
        assert_eq!(h["status"], 200, "{m}");
        assert!(
            h["content_type"]
                .as_str()
                .is_some_and(|c| c.starts_with("text/event-stream")),
            "{m}"
        );
        assert_eq!(h["stream"], "post", "{m}");
        assert!(h["session"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
        assert!(h["event_id"].is_string(), "{m}");
    };
    let sampling: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "s2c" && m["method"] == "sampling/createMessage")
        .collect();
    assert_eq!(sampling.len(), 1, "one sampling request on the tape");
    sse_facts(sampling[0]);
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "s2c" && m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "three progress notifications");
    for p in &progress {
        sse_facts(p);
    }
    // Every client message went by POST with the session after initialize; the MCP headers
    // are facts.
    let tools_list = msgs
        .iter()
        .find(|m| m["dir"] == "c2s" && m["method"] == "tools/list")
        .expect("tools/list on the tape");
    assert_eq!(tools_list["http"]["method"], "POST");
    assert!(
        tools_list["http"]["mcp_session_id"].is_string(),
        "{tools_list}"
    );
    assert!(
        tools_list["http"]["mcp_protocol_version"].is_string(),
        "{tools_list}"
    );
    // The client's GET stream and its DELETE are events.
    assert!(!events(&lines, "http-get").is_empty(), "no http-get event");
    assert!(
        !events(&lines, "http-delete").is_empty(),
        "no http-delete event"
    );
    assert_eq!(
        lines.last().expect("lines")["type"],
        "end",
        "the tape is closed"
    );
}

#[test]
fn an_http_tape_plays_over_stdio_and_over_http() {
    let dir = tmp();
    let (tape, recorded) =
        record_py_then_stop_server(everything_http, dir.path(), "everything", "legacy");
    replay_stdio(&tape, dir.path(), "everything", "legacy", &recorded);
    replay_http(&tape, "everything", "legacy", &recorded);
}

// --- 3: a stdio tape served over HTTP --------------------------------------------------------

#[test]
fn a_stdio_tape_plays_over_http() {
    let (_dir, tape) = tmp_tape("stdio.jsonl");
    let recorded = py_ok(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        "through record (stdio)",
    );
    assert_eq!(tape_lines(&tape)[1]["transport"], "stdio");
    replay_http(&tape, "everything", "legacy", &recorded);
}

#[test]
fn a_bare_cr_between_a_messages_tokens_reaches_the_python_client_over_http_as_the_same_json() {
    // A stdio server may write a CR between a message's tokens (whitespace in JSON), and the
    // tape keeps it. Live through `record --listen` and from the tape through `play --listen`,
    // each message went out as one SSE `data:` line: the client's parser ended the line at the
    // CR, and the Python SDK client never got its answer.
    let dir = tmp();
    let server = cr_server(dir.path());
    let tape = dir.path().join("cr.jsonl");
    let steps = json!([{"tool": "echo", "args": {"text": "hi"}, "timeout": 10}]);
    let answered = |doc: &Value, what: &str| {
        let call = &doc["steps"][0];
        assert_eq!(call["outcome"], "result", "{what}: {}", pretty(doc));
        assert_eq!(call["text"], "cr:hi", "{what}: {}", pretty(doc));
    };
    let bridge = Served::bridge(&tape, &server);
    answered(
        &py_faults(&steps, std::slice::from_ref(&bridge.url)),
        "live, through record --listen",
    );
    bridge.stop();
    // The tape holds the server's bytes, CRs and all (the handshake's answer, `tools/list`'s
    // if the SDK asks, the log notification and the tool's answer).
    let taped = String::from_utf8_lossy(&std::fs::read(&tape).unwrap()).into_owned();
    for needle in [
        "\"jsonrpc\":\"2.0\",\r\"method\":\"notifications/message\"",
        "\r\"result\":{\"content\"",
    ] {
        assert!(taped.contains(needle), "{needle:?} on the tape:\n{taped}");
    }
    let play = Served::play(&tape);
    answered(
        &py_faults(&steps, std::slice::from_ref(&play.url)),
        "from the tape, through play --listen",
    );
    // And as the spec reads the stream: the log notification, then the answer, each whole.
    let sid = {
        let mut s = post_open_ok(&play.url, &req(0, "initialize", init_params()));
        let sid = s
            .header("mcp-session-id")
            .expect("a session id")
            .to_string();
        let _ = s.body();
        sid
    };
    let (status, body) = http(
        &play.url,
        "POST",
        &post_headers(&[("Mcp-Session-Id", &sid)]),
        req(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .to_string()
        .as_bytes(),
    );
    assert_eq!(status, 200, "{}", text(&body));
    let got = sse_messages(&body);
    assert_eq!(got.len(), 2, "{}", text(&body));
    assert_eq!(got[0]["method"], "notifications/message", "{}", text(&body));
    assert_eq!(
        got[1]["result"]["content"][0]["text"],
        "cr:hi",
        "{}",
        text(&body)
    );
    let err = play.stop();
    assert_clean_play(&err);
}

// --- 4: the Python SDK server over HTTP, both eras -------------------------------------------

/// Records the `pyserver` scenario over HTTP in `mode` (checked against a direct run), then
/// replays it over stdio and over HTTP. Returns the tape's messages.
fn pyserver_round_trip(mode: &str) -> Vec<Value> {
    let dir = tmp();
    // `counter` counts per server process: the direct run gets a server of its own.
    let direct = {
        let (_server, upstream) = py_server_http(dir.path());
        py_ok("pyserver", mode, &[upstream], "direct")
    };
    let (tape, recorded) = record_py_then_stop_server(py_server_http, dir.path(), "pyserver", mode);
    assert_same(&direct, &recorded, "through record --url");
    replay_stdio(&tape, dir.path(), "pyserver", mode, &recorded);
    replay_http(&tape, "pyserver", mode, &recorded);
    tape_msgs(&tape)
}

#[test]
fn the_python_server_over_http_in_the_2026_era_records_and_replays() {
    let msgs = pyserver_round_trip("2026-07-28");
    let call = msgs
        .iter()
        .find(|m| {
            m["dir"] == "c2s" && m["method"] == "tools/call" && m["msg"]["params"]["name"] == "add"
        })
        .expect("tools/call add on the tape");
    assert_eq!(call["http"]["mcp_method"], "tools/call", "{call}");
    assert_eq!(call["http"]["mcp_name"], "add", "{call}");
    assert_eq!(call["http"]["mcp_protocol_version"], "2026-07-28", "{call}");
    assert!(
        msgs.iter()
            .all(|m| m["http"].get("mcp_session_id").is_none()),
        "stateless: no session ids"
    );
}

#[test]
fn the_python_server_over_http_in_the_legacy_era_records_and_replays() {
    let msgs = pyserver_round_trip("legacy");
    let init = msgs
        .iter()
        .find(|m| m["dir"] == "s2c" && m["id"] == 1 && m["kind"] == "response")
        .expect("the initialize response");
    assert!(init["http"]["session"].is_string(), "{init}");
}

// --- 5: Origin and Host ----------------------------------------------------------------------

#[test]
fn a_foreign_origin_or_host_gets_403_from_the_proxy_and_from_play() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "rec.jsonl");
    let rec = &edge.rec;

    let play_tape = dir.path().join("play.jsonl");
    write_tape(
        &play_tape,
        &[
            (
                "c2s",
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let play = Served::play(&play_tape);

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for served in [rec, &play] {
        let evil_host = format!("evil.example:{}", served.port());
        let cases: [(&str, Vec<(&str, &str)>); 3] = [
            (
                "Origin http://evil.example",
                post_headers(&[("Origin", "http://evil.example")]),
            ),
            (
                "Host evil.example",
                post_headers(&[("Host", evil_host.as_str())]),
            ),
            (
                "Origin evil with a loopback Host",
                post_headers(&[("Origin", "https://evil.example:443")]),
            ),
        ];
        for (what, headers) in cases {
            let (status, resp) = http(&served.url, "POST", &headers, body.as_bytes());
            assert_eq!(status, 403, "{what} at {}: {}", served.url, text(&resp));
        }
        // The same request from a loopback origin is served.
        let own = format!("http://127.0.0.1:{}", served.port());
        let (status, resp) = http(
            &served.url,
            "POST",
            &post_headers(&[("Origin", &own)]),
            body.as_bytes(),
        );
        assert_eq!(
            status,
            200,
            "loopback origin at {}: {}",
            served.url,
            text(&resp)
        );
    }
    play.stop();
    edge.rec.stop();
    // Refused requests were neither forwarded nor taped: only the allowed one is on the tape.
    let msgs = tape_msgs(&edge.tape);
    let c2s = msgs.iter().filter(|m| m["dir"] == "c2s").count();
    assert_eq!(c2s, 1, "only the allowed request is taped: {msgs:?}");
}

/// One raw request `head` (its request line and headers, as written) with `body` to `port`:
/// the response's status.
fn raw_status(port: u16, head: &str, body: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let req = format!(
        "{head}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let line = String::from_utf8_lossy(&out);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"))
}

/// The Host and Origin edge cases, decided once for every listener (play, the `record --url`
/// proxy, the model proxy; `src/transport/http.rs`, `refuse_foreign`): an empty Host, two Host
/// headers, an absolute-form request line naming a foreign host, `Origin: null` are refused; a
/// loopback Origin on another port, an absolute-form line naming this listener, a Host in
/// capitals are served.
#[test]
fn host_and_origin_edge_cases_are_decided_alike_by_every_listener() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "rec.jsonl");
    let play_tape = dir.path().join("play.jsonl");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}});
    // One recorded answer for each request that passes.
    let msgs: Vec<(&str, Value)> = (0..3)
        .flat_map(|_| [("c2s", call.clone()), ("s2c", answer.clone())])
        .collect();
    write_tape(&play_tape, &msgs, true);
    let play = Served::play(&play_tape);
    // Its upstream refuses connections: what passes the check gets 502, not 403.
    let model = Served::spawn(&[
        "model-proxy",
        "--tape",
        &s(dir.path().join("model.jsonl")),
        "--upstream",
        "http://127.0.0.1:9",
    ]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for (served, path, ok) in [
        (&edge.rec, "/mcp", 200),
        (&play, "/mcp", 200),
        (&model, "/v1/messages", 502),
    ] {
        let port = served.port();
        let here = format!("127.0.0.1:{port}");
        let cases: Vec<(&str, String, u16)> = vec![
            (
                "an empty Host",
                format!("POST {path} HTTP/1.1\r\nHost: \r\n"),
                403,
            ),
            (
                "two Host headers",
                format!("POST {path} HTTP/1.1\r\nHost: {here}\r\nHost: evil.example\r\n"),
                403,
            ),
            (
                "an absolute-form line naming another host",
                format!("POST http://evil.example:{port}{path} HTTP/1.1\r\nHost: {here}\r\n"),
                403,
            ),
            (
                "Origin: null",
                format!("POST {path} HTTP/1.1\r\nHost: {here}\r\nOrigin: null\r\n"),
                403,
            ),
            (
                "a loopback Origin on another port",
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {here}\r\nOrigin: http://localhost:6274\r\n"
                ),
                ok,
            ),
            (
                "an absolute-form line naming this listener",
                format!("POST http://{here}{path} HTTP/1.1\r\nHost: {here}\r\n"),
                ok,
            ),
            (
                "a Host in capitals",
                format!("POST {path} HTTP/1.1\r\nHost: LOCALHOST:{port}\r\n"),
                ok,
            ),
        ];
        for (what, head, want) in cases {
            assert_eq!(
                raw_status(port, &head, &body),
                want,
                "{what} at {}",
                served.url
            );
        }
    }
    model.stop();
    play.stop();
    edge.rec.stop();
}

/// `--header-timeout`: a connection that sends its headers a byte at a time (slowloris) is
/// closed once the timeout passes (the default, 30 s, is what the test's bound would not see),
/// and a normal request is served meanwhile.
#[test]
fn a_slow_header_connection_is_closed_after_the_header_timeout() {
    use std::io::{Read as _, Write as _};
    let dir = tmp();
    let tape = dir.path().join("play.jsonl");
    write_tape(
        &tape,
        &[
            (
                "c2s",
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let play = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--header-timeout",
        "1",
    ]);
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", play.port())).expect("connect");
    slow.write_all(b"POST /mcp HTTP/1.1\r\nX-Slow: ")
        .expect("write");
    slow.set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .expect("timeout");
    let start = std::time::Instant::now();
    let closed = loop {
        let _ = slow.write_all(b"a");
        let mut buf = [0u8; 64];
        match slow.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => break true, // an answer (408) before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => {}
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            break false;
        }
    };
    assert!(closed, "the slow connection was still open after 20 s");
    let (status, resp) = http(
        &play.url,
        "POST",
        &post_headers(&[]),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200, "{}", text(&resp));
    play.stop();
}

// --- 6: upstream refuses or fails ------------------------------------------------------------

#[test]
fn an_upstream_that_refuses_gives_502_with_the_request_id_and_is_taped() {
    let dir = tmp();
    let nothing = PortHold::any(); // bound, not listening: connections are refused
    let port = nothing.port;
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    let tape = dir.path().join("refused.jsonl");
    let rec = Served::record(&upstream, &tape);
    let req = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/list"});
    let mut resp = post_open(&rec.url, &req);
    let body = resp.body();
    assert_eq!(resp.status, 502, "{}", text(&body));
    assert!(
        resp.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        resp.headers
    );
    let v: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("502 body not JSON ({e}): {}", text(&body)));
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], 42, "the error carries the request's id: {v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        v["error"]["code"].is_i64() && message.contains(&format!("127.0.0.1:{port}")),
        "the error names the upstream: {v}"
    );
    let err = rec.stop();
    assert_contains(&err, &format!("127.0.0.1:{port}"));
    assert_contains(&the_upstream_error(&tape), &format!("127.0.0.1:{port}"));
    assert!(
        tape_msgs(&tape)
            .iter()
            .any(|m| m["dir"] == "c2s" && m["id"] == 42),
        "the request is on the tape"
    );
}

/// The text of the tape's one `upstream-error` event.
fn the_upstream_error(tape: &Path) -> String {
    let lines = tape_lines(tape);
    let ev = events(&lines, "upstream-error");
    assert_eq!(ev.len(), 1, "one upstream-error event: {lines:?}");
    ev[0]["error"].as_str().expect("its error").to_string()
}

/// An upstream whose stream breaks mid-way (a chunk size line that is not one) reaches the
/// client broken too: the events before the break, then the connection cut with no terminating
/// chunk, as the client would have seen it without the recorder; not a stream that ended well,
/// which leaves an MCP client waiting for an answer that will never come. The tape has the
/// events and the break, and verifies.
#[test]
fn an_sse_stream_the_upstream_breaks_is_cut_for_the_client_too_and_taped() {
    let dir = tmp();
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}}}"#;
    let answer1 = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{init}",
        init.len()
    )
    .into_bytes();
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":2.50}}"#;
    let event = format!("id: e-1\ndata: {progress}\n\n");
    let answer2 = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\nzz not a size\r\ndata: {{}}\n\n\r\n",
        event.len()
    )
    .into_bytes();
    let (upstream, _) = scripted_upstream(vec![(answer1, vec![]), (answer2, vec![])]);
    let tape = dir.path().join("broken-stream.jsonl");
    // `initialize`, then the call whose answer streams: its response, head read.
    let call = |url: &str| {
        let (status, _) = post(
            url,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        assert_eq!(status, 200, "initialize at {url}");
        post_open_ok(
            url,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"_meta": {"progressToken": "p"}, "name": "slow", "arguments": {"token": "tok-5f4e3d2c1b0a99887766"}}}),
        )
    };
    let rec = Served::record(&format!("{upstream}/mcp"), &tape);
    let mut resp = call(&rec.url);
    let (body, ended) = resp.chunked_body_or_cut();
    assert_eq!(
        text(&body),
        event,
        "the event before the break reaches the client"
    );
    assert!(
        !ended,
        "the stream broke upstream but ended cleanly for the client"
    );
    rec.stop();

    Mt::new(["verify", &s(&tape)]).run().status(0);
    assert_contains(&the_upstream_error(&tape), "the SSE stream broke");
    assert!(
        tape_msgs(&tape)
            .iter()
            .any(|m| m["msg"]["method"] == "notifications/progress"),
        "the event before the break is not on the tape"
    );
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert!(
        !raw.contains("tok-5f4e3d2c1b0a99887766"),
        "the token is on the tape"
    );

    // Play serves the event the server sent, then says plainly that the recorded server never
    // answered (the tape's line), instead of a stream that ends with nothing.
    let mut play = Served::play(&tape);
    let body = text(&call(&play.url).body());
    assert!(body.contains(r#""progress":2.50}"#), "{body}");
    // The recorded event as framed (an id, no name); play's own error as the transport's
    // default, `event: message`.
    let events: Vec<&str> = body.split_terminator("\n\n").collect();
    assert_eq!(events.len(), 2, "{body:?}");
    assert!(events[0].starts_with("id: e-1\ndata: "), "{body:?}");
    assert!(events[1].starts_with("event: message\ndata: "), "{body:?}");
    assert!(
        body.contains(r#""code":-32099"#)
            && body.contains("the recorded server never answered this request"),
        "{body}"
    );
    let (st, err) = play.signal(libc::SIGINT, Duration::from_secs(20));
    assert_eq!(
        st.code(),
        Some(1),
        "an unanswerable request fails play's run: {err}"
    );
    assert_contains(&err, "request id 2: the recorded server never answered");
}

#[test]
fn an_upstream_5xx_is_forwarded_with_its_status_and_taped() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "5xx.jsonl");
    let (status, body) = post(&edge.rec.url, &edge_request(7, "edge/fail"));
    assert_eq!(status, 500, "{}", text(&body));
    assert_eq!(text(&body), "upstream exploded");
    edge.rec.stop();
    let lines = tape_lines(&edge.tape);
    let ev = events(&lines, "http-error");
    assert_eq!(ev.len(), 1, "{lines:?}");
    assert_eq!(ev[0]["status"], 500, "{}", ev[0]);
    assert!(
        ev[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains("upstream exploded")),
        "{}",
        ev[0]
    );
}

/// A refusal the upstream sent without a `Content-Type` is taped without one (not with the
/// request's `application/json`), and play gives it again without one: its status and body,
/// nothing the server never said.
#[test]
fn a_refusal_without_a_content_type_is_taped_and_played_without_one() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "bare.jsonl");
    let answer = |url: &str| {
        let mut s = post_open(url, &edge_request(3, "edge/bare"));
        let ct = s.header("content-type").map(String::from);
        (s.status, ct, text(&s.body()))
    };
    let recorded = answer(&edge.rec.url);
    assert_eq!(
        recorded,
        (400, None, "refused, and no content type".to_string()),
        "through record --url"
    );
    edge.rec.stop();
    let lines = tape_lines(&edge.tape);
    let ev = events(&lines, "http-error");
    assert_eq!(ev.len(), 1, "{lines:?}");
    assert_eq!(ev[0]["status"], 400, "{}", ev[0]);
    assert!(ev[0].get("content_type").is_none(), "{}", ev[0]);
    let play = Served::play(&edge.tape);
    let played = answer(&play.url);
    play.stop();
    assert_eq!(played, recorded, "from the tape");
}

// --- 7, 8: SSE edge cases --------------------------------------------------------------------

/// What the edge upstream writes for `edge/sse`, concatenated, with the response id `rid`.
fn crafted_sse(rid: i64) -> String {
    [
        ": heartbeat\n\n",
        "id: prime-1\nretry: 1500\ndata:\n\n",
        "event: message\nid: ev-2\nda",
        r#"ta: {"jsonrpc":"2.0","method":"notifications/message","#,
        "\"params\":{\"level\":\"info\",\"data\":\"split\"}}\n",
        "\n",
        "id: ev-3\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n",
        "data: \"params\":{\"level\":\"info\",\"data\":\"multi-line\",\"token\":\"s3cr3t-sse-token-value\"}}\n\n",
        &format!(
            "id: ev-4\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{rid},\"result\":{{\"ok\":true}}}}\n\n"
        ),
    ]
    .concat()
}

#[test]
fn sse_events_pass_byte_exact_and_each_before_the_stream_ends() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "sse.jsonl");

    let mut stream = post_open_ok(&edge.rec.url, &edge_request(5, "edge/sse"));
    assert!(
        stream
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        stream.headers
    );
    let expected = crafted_sse(5);
    let before_release = expected.find("id: ev-4").expect("the last event");
    // Everything up to the last event must reach the client while the upstream still holds the
    // response back (it waits for /release/sse): nothing is held until the stream ends.
    let mut got = Vec::new();
    let mut pieces = 0;
    while got.len() < before_release {
        match stream.next_piece() {
            Some(p) => {
                pieces += 1;
                got.extend(p);
            }
            None => panic!(
                "the stream ended before the response was released; got:\n{}",
                text(&got)
            ),
        }
    }
    assert_eq!(
        text(&got),
        expected[..before_release],
        "the events before the response, byte for byte"
    );
    assert!(pieces >= 2, "the events arrived in several pieces");
    release(&edge.base, "sse"); // the response
    got.extend(stream.body());
    assert_eq!(text(&got), expected, "the whole stream, byte for byte");

    // The proxy still serves the next request (a pretty-printed body is JSON too).
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    let (status, body) = http(
        &edge.rec.url,
        "POST",
        &post_headers(&[]),
        pretty(&ping).as_bytes(),
    );
    assert_eq!(status, 200, "{}", text(&body));
    edge.rec.stop();

    let (lines, bad) = tape_lines_lenient(&edge.tape);
    let msgs: Vec<&Value> = lines.iter().filter(|l| l["type"] == "msg").collect();
    let response = msgs
        .iter()
        .find(|m| m["dir"] == "s2c" && m["id"] == 5)
        .expect("the SSE response on the tape");
    assert_eq!(response["http"]["event_id"], "ev-4", "{response}");
    assert_eq!(response["http"]["stream"], "post", "{response}");
    assert_eq!(response["msg"]["result"]["ok"], true, "{response}");
    let split = msgs
        .iter()
        .find(|m| m["msg"]["params"]["data"] == "split")
        .expect("the event written in pieces is on the tape");
    assert_eq!(split["http"]["event_id"], "ev-2", "{split}");
    let priming = events(&lines, "sse-priming");
    assert!(
        priming
            .iter()
            .any(|e| e["event_id"] == "prime-1" && e["retry"] == 1500),
        "the priming event with its id and retry: {priming:?}"
    );
    // The multi-line `data:` event is one message (its data lines joined with "\n"), the
    // pretty-printed request another, and the tape stays one JSON document per line.
    assert!(
        bad.is_empty(),
        "tape lines that are not JSON (a message with a newline inside was written verbatim):\n{}",
        bad.join("\n")
    );
    assert!(
        msgs.iter().any(|m| m["dir"] == "c2s" && m["id"] == 6),
        "the pretty-printed request is on the tape"
    );
    let multi = msgs
        .iter()
        .find(|m| m["msg"]["params"]["data"] == "multi-line")
        .expect("the multi-line data event is on the tape");
    assert_eq!(multi["http"]["event_id"], "ev-3", "{multi}");
    // A secret in an SSE frame reached the client (the byte-exact check above) but not the tape.
    let bytes = std::fs::read_to_string(&edge.tape).unwrap();
    assert!(
        !bytes.contains("s3cr3t-sse-token-value"),
        "the SSE secret is on the tape"
    );
    assert!(
        multi["msg"]["params"]["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("[REDACTED:key:token:")),
        "{multi}"
    );
}

#[test]
fn a_client_that_leaves_mid_stream_keeps_what_passed_and_the_proxy_goes_on() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "gone.jsonl");

    let mut stream = post_open_ok(&edge.rec.url, &edge_request(9, "edge/hang"));
    let got = stream.read_until("\n\n");
    assert!(text(&got).starts_with("id: h-1\n"), "{}", text(&got));
    // The client goes away mid-stream; then the upstream carries on writing.
    stream.hang_up();
    release(&edge.base, "hang");

    // The proxy notices and stops reading the upstream; what passed is on the tape already.
    let start = Instant::now();
    loop {
        let (lines, _) = tape_lines_lenient(&edge.tape);
        if !events(&lines, "client-gone").is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no client-gone event on the tape; upstream log:\n{}\ntape:\n{}",
            edge.up.log_text(),
            std::fs::read_to_string(&edge.tape).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The next request is served.
    let next = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"});
    let (status, body) = post(&edge.rec.url, &next);
    assert_eq!(status, 200, "{}", text(&body));
    let v: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(v["id"], 10, "{v}");
    edge.rec.stop();

    let lines = tape_lines(&edge.tape);
    let msgs = tape_msgs(&edge.tape);
    assert!(
        msgs.iter().any(|m| m["dir"] == "c2s" && m["id"] == 9),
        "the request"
    );
    let first = msgs
        .iter()
        .find(|m| m["http"]["event_id"] == "h-1")
        .expect("the event the client got is on the tape");
    assert_eq!(first["msg"]["params"]["progress"], 1, "{first}");
    let pos = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred).expect("on the tape");
    let gone = pos(&|l| l["what"] == "client-gone");
    let h1 = pos(&|l| l["http"]["event_id"] == "h-1");
    let next_req = pos(&|l| l["dir"] == "c2s" && l["id"] == 10);
    assert!(h1 < gone && gone < next_req, "tape order: {lines:?}");
    assert!(
        msgs.iter().any(|m| m["dir"] == "s2c" && m["id"] == 10),
        "the next answer is on the tape"
    );
    assert!(
        !msgs.iter().any(|m| m["dir"] == "s2c" && m["id"] == 9),
        "the interrupted exchange has no response on the tape"
    );
    assert_eq!(lines.last().expect("lines")["type"], "end");
}

// --- stopping --------------------------------------------------------------------------------

/// The URL on stdout means "ready": a SIGINT sent the moment it is read must stop record (tape
/// closed with its `end` line) and play cleanly, exit 0. A few rounds, since it is a race.
#[test]
fn sigint_right_after_the_url_stops_record_and_play_cleanly() {
    let dir = tmp();
    let nothing = PortHold::any(); // never reached: record connects on the first request
    let upstream = format!("{}/mcp", nothing.url());
    for round in 0..5 {
        let tape = dir.path().join(format!("early-{round}.jsonl"));
        let rec = Served::record(&upstream, &tape);
        let err = rec.stop();
        let lines = tape_lines(&tape);
        assert_eq!(
            lines.last().expect("lines")["type"],
            "end",
            "round {round}: the tape is closed; stderr:\n{err}"
        );
    }
    let tape = dir.path().join("play.jsonl");
    write_tape(
        &tape,
        &[
            ("c2s", json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            ("s2c", json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        ],
        true,
    );
    for _ in 0..5 {
        Served::play(&tape).stop();
    }
}

// --- The older HTTP+SSE transport (2024-11-05) ----------------------------------------------

#[test]
fn the_legacy_sse_transport_records_and_replays_over_stdio_and_over_sse() {
    let dir = tmp();
    // server-everything's `sse` mode: GET /sse, whose `endpoint` event names the POST URL.
    let (tape, recorded, direct) = {
        let (_server, upstream) = everything_http_at(dir.path(), "sse", "/sse");
        let direct = everything_at(&upstream, "direct over SSE");
        let tape = dir.path().join("sse.jsonl");
        let rec = Served::record(&upstream, &tape);
        assert!(rec.url.ends_with("/sse"), "proxy URL {}", rec.url);
        let recorded = everything_at(&rec.url, "through record --url (SSE)");
        rec.stop();
        (tape, recorded, direct)
    };
    assert_same_live(&direct, &recorded, "through the proxy");
    let lines = tape_lines(&tape);
    assert!(
        !events(&lines, "sse-endpoint").is_empty(),
        "the endpoint event is on the tape"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "msg"
            && l["method"] == "sampling/createMessage"
            && l["http"]["stream"] == "get"),
        "server messages came over the GET stream"
    );
    replay_stdio(&tape, dir.path(), "everything", "legacy", &recorded);
    // And served as a legacy SSE server.
    let play = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--transport",
        "sse",
    ]);
    assert!(play.url.ends_with("/sse"), "play URL {}", play.url);
    let replayed = everything_at(&play.url, "against play --transport sse");
    // A POST naming a session play does not have, and one naming none: refused as the Python
    // SDK's SSE server refuses them, the first counted in the summary. Before, both were
    // play's own `404` "mcptape play: unknown sessionId", and the summary said nothing.
    let base = play.url.trim_end_matches("/sse");
    let list = req(7, "tools/list", json!({})).to_string();
    let post = |query: &str| {
        let h = [("Content-Type", "application/json")];
        let mut s = http_open(
            &format!("{base}/message{query}"),
            "POST",
            &h,
            list.as_bytes(),
        );
        (s.status, text(&s.body()))
    };
    assert_eq!(
        post("?sessionId=no-such-session"),
        (404, "Could not find session".to_string())
    );
    assert_eq!(post(""), (400, "sessionId is required".to_string()));
    let err = play.stop();
    assert_same(&recorded, &replayed, "through play over HTTP+SSE");
    assert_clean_play(&err);
    assert!(
        err.contains("refused 1 request naming a session play does not have"),
        "the summary counts it: {err}"
    );
}

// --- The official Rust SDK's client over Streamable HTTP -------------------------------------

#[test]
fn an_rmcp_client_through_the_proxy_and_against_play_sees_the_same() {
    let dir = tmp();
    let args = [
        "--call",
        "echo",
        r#"{"message":"hello tape"}"#,
        "--call",
        "get-sum",
        r#"{"a":2,"b":3}"#,
        "--list-resources",
    ]
    .map(String::from);
    let rmcp = |url: &str| -> Value {
        let (doc, out) = rmcp_run(&args, &[url.to_string()], None);
        assert!(
            out.status.success(),
            "rmcp_client against {url}: {}",
            text(&out.stderr)
        );
        doc
    };
    let tape = dir.path().join("rmcp.jsonl");
    let (direct, recorded) = {
        let (_server, upstream) = everything_http(dir.path());
        let direct = rmcp(&upstream);
        let rec = Served::record(&upstream, &tape);
        let recorded = rmcp(&rec.url);
        rec.stop();
        (direct, recorded)
    };
    assert_eq!(direct, recorded, "the proxy is transparent to rmcp");
    assert!(
        tape_msgs(&tape)
            .iter()
            .any(|m| m["method"] == "tools/call" && m["http"]["mcp_session_id"].is_string()),
        "rmcp's calls are on the tape with their session"
    );
    let play = Served::play(&tape);
    let replayed = rmcp(&play.url);
    let err = play.stop();
    assert_eq!(recorded, replayed, "play answers rmcp as the server did");
    assert_clean_play(&err);
}

// --- A stdio server behind HTTP while recording (the bridge) ---------------------------------

#[test]
fn a_stdio_server_behind_http_records_and_replays() {
    let dir = tmp();
    let direct = py_ok("everything", "legacy", &everything(), "direct over stdio");
    let tape = dir.path().join("bridge.jsonl");
    let bridge = Served::bridge(&tape, &everything());
    let through = everything_at(&bridge.url, "through the bridge");
    bridge.stop();
    assert_same_live(&direct, &through, "through the bridge");
    assert_eq!(
        tape_lines(&tape)[1]["transport"],
        "stdio",
        "the tape is of the stdio server"
    );
    replay_stdio(&tape, dir.path(), "everything", "legacy", &through);
}

// --- 2026-07-28 `subscriptions/listen` --------------------------------------------------------

#[test]
fn a_subscriptions_listen_stream_is_recorded_and_replayed_over_http() {
    let dir = tmp();
    let (tape, recorded) =
        record_py_then_stop_server(py_server_http, dir.path(), "listen", "2026-07-28");
    let msgs = tape_msgs(&tape);
    let listen = msgs
        .iter()
        .find(|m| m["method"] == "subscriptions/listen")
        .expect("the listen request");
    let changed = msgs
        .iter()
        .find(|m| m["method"] == "notifications/tools/list_changed")
        .expect("the change notification is on the tape");
    assert_eq!(
        changed["http"]["request_id"], listen["id"],
        "it came on the listen stream: {changed}"
    );
    let events = &recorded["steps"][2];
    assert_eq!(events["result"]["event"], "ToolsListChanged", "{recorded}");
    replay_http(&tape, "listen", "2026-07-28", &recorded);
}

#[test]
fn last_event_id_resumption_passes_through() {
    let dir = tmp();
    let edge = edge_recording(dir.path(), "resume.jsonl");
    let (status, body) = http(
        &edge.rec.url,
        "GET",
        &[("Accept", "text/event-stream"), ("Last-Event-ID", "ev-2")],
        b"",
    );
    edge.rec.stop();
    assert_eq!(status, 200, "{}", text(&body));
    assert!(
        text(&body).contains("resumed after ev-2"),
        "the header reached the upstream: {}",
        text(&body)
    );
    let lines = tape_lines(&edge.tape);
    assert!(
        lines
            .iter()
            .any(|l| l["what"] == "http-get" && l["last_event_id"] == "ev-2"),
        "the resumption is on the tape"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "msg"
            && l["http"]["stream"] == "get"
            && l["http"]["event_id"] == "resumed-1"),
        "the resumed stream's message is on the tape"
    );
}

/// One Python SDK server (stateful, its default), two clients on one tape: a legacy one, in a
/// session, and a 2026-07-28 one, which that server serves without a session (it reads the
/// protocol version first). Play serves both as recorded. A change made in review refused the
/// second's every request with `400` "no Mcp-Session-Id" where the server had given session
/// ids, while play said "missed 0" and exited 0: a request naming no session is now served.
#[test]
fn a_tape_of_a_session_and_of_sessionless_2026_requests_plays_both() {
    let dir = tmp();
    let (_server, upstream) = py_server_http(dir.path());
    let tape = dir.path().join("both-eras.jsonl");
    let rec = Served::record(&upstream, &tape);
    let via = std::slice::from_ref(&rec.url);
    let legacy = py_ok("pyserver", "legacy", via, "legacy, through record --url");
    let modern = py_ok(
        "pyserver",
        "2026-07-28",
        via,
        "2026-07-28, through record --url",
    );
    rec.stop();
    let play = Served::play(&tape);
    let at = std::slice::from_ref(&play.url);
    let legacy_played = py_ok("pyserver", "legacy", at, "legacy, against play");
    let modern_played = py_ok("pyserver", "2026-07-28", at, "2026-07-28, against play");
    let err = play.stop();
    assert_same(&legacy, &legacy_played, "legacy, through play over HTTP");
    assert_same(
        &modern,
        &modern_played,
        "2026-07-28, through play over HTTP",
    );
    assert_clean_play(&err);
    assert!(err.contains("every recorded exchange was used"), "{err}");
}

// --- check --url ------------------------------------------------------------------------------

#[test]
fn check_drives_a_running_http_server_in_both_eras() {
    let dir = tmp();
    for mode in ["legacy", "2026-07-28"] {
        // Recorded over stdio; checked against the same server running over HTTP.
        let tape = dir.path().join(format!("check-{mode}.jsonl"));
        let (_, out) = py_client("pyserver", mode, &record_cmd(&tape, &py_server()), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (_server, url) = py_server_http(dir.path());
        let report = dir.path().join(format!("report-{mode}.json"));
        let out = Mt::new(["check", &s(&tape), "--url", &url, "--json", &s(&report)]).run();
        let r: CheckReport = serde_json::from_slice(&std::fs::read(&report).expect("report"))
            .expect("a check report");
        // `counter` counts per server process and this one is fresh: its answers match.
        assert_eq!(out.code(), 0, "{mode}: {}", out.console());
        assert_eq!(r.grade, Grade::A, "{mode}: {}", out.stdout);
        assert_eq!(r.server, url);
        assert!(
            r.exchanges.iter().all(|e| e.status == Status::Pass),
            "{mode}"
        );
    }
}

/// `check --url` where nothing listens: "the server could not be reached", exit 69 (as for a
/// stdio server that cannot start), not a grade F with exit 1; no report is written.
#[test]
fn check_url_of_a_server_that_is_not_there_exits_69() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    write_tape(
        &tape,
        &[
            (
                "c2s",
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    // A port nothing listens on (held bound, not listening: connections are refused).
    let nothing = PortHold::any();
    let url = format!("{}/mcp", nothing.url());
    let report = dir.path().join("report.json");
    let out = Mt::new(["check", &s(&tape), "--url", &url, "--json", &s(&report)])
        .run()
        .status(69);
    assert_contains(
        &out.stderr,
        &format!("the server could not be reached at {url}"),
    );
    assert!(!out.stdout.contains("grade F"), "{}", out.console());
    assert!(!report.exists(), "no report for a check that did not run");
}

#[test]
fn play_answers_over_sse_or_json_as_the_recording_did() {
    // Recorded: one answer that came as JSON, one that came as an SSE stream (with nothing but
    // the answer on it). Play keeps each one's form.
    let dir = tmp();
    let edge = edge_recording(dir.path(), "forms.jsonl");
    let json_req = edge_request(1, "edge/json");
    let (status, _) = post(&edge.rec.url, &json_req);
    assert_eq!(status, 200);
    edge.rec.stop();
    // Mark the JSON answer as if it had come on an SSE stream, as many servers answer.
    let lines: Vec<Value> = tape_lines(&edge.tape);
    let mut sse_copy = None;
    for l in lines.iter() {
        if l["type"] == "msg" && l["dir"] == "s2c" {
            let mut m = l.clone();
            m["http"]["content_type"] = json!("text/event-stream");
            m["http"]["stream"] = json!("post");
            sse_copy = Some(m);
        }
    }
    let sse_line = sse_copy.expect("the recorded answer");
    let mut req2 = lines
        .iter()
        .find(|l| l["type"] == "msg" && l["dir"] == "c2s")
        .expect("request")
        .clone();
    req2["msg"]["id"] = json!(2);
    req2["id"] = json!(2);
    req2["msg"]["params"] = json!({"form": "sse"});
    let mut resp2 = sse_line;
    resp2["msg"]["id"] = json!(2);
    resp2["id"] = json!(2);
    // A hand-made tape (no hash chain) with both forms.
    let msgs: Vec<(&str, Value)> = vec![
        (
            "c2s",
            lines
                .iter()
                .find(|l| l["type"] == "msg" && l["dir"] == "c2s")
                .unwrap()["msg"]
                .clone(),
        ),
        (
            "s2c",
            lines
                .iter()
                .find(|l| l["type"] == "msg" && l["dir"] == "s2c")
                .unwrap()["msg"]
                .clone(),
        ),
    ];
    write_tape(&edge.tape, &msgs, true);
    // Append the SSE exchange with its http facts.
    let mut lines_text = std::fs::read_to_string(&edge.tape).unwrap();
    let end = lines_text.lines().last().unwrap().to_string();
    lines_text = lines_text.replace(&format!("{end}\n"), "");
    lines_text.push_str(&format!("{}\n{}\n{end}\n", req2, resp2));
    std::fs::write(&edge.tape, lines_text).unwrap();

    let play = Served::play(&edge.tape);
    let mut a = post_open(&play.url, &json_req);
    assert_eq!(
        a.header("content-type"),
        Some("application/json"),
        "recorded as JSON, played as JSON"
    );
    let _ = a.body();
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "edge/json", "params": {"form": "sse"}});
    let mut b = post_open(&play.url, &req);
    assert_eq!(
        b.header("content-type"),
        Some("text/event-stream"),
        "recorded over SSE, played over SSE"
    );
    let body = text(&b.body());
    assert!(
        body.contains("data: ") && body.contains("\"id\":7"),
        "{body}"
    );
    let err = play.stop();
    assert_clean_play(&err);
}

// --- recording over a tape that is there already (issue 15) ----------------------------------

#[test]
fn re_recording_over_http_keeps_the_old_tape_until_the_new_one_holds_an_exchange() {
    let dir = tmp();
    let tape = dir.path().join("http.jsonl");
    let (new, bak) = (
        dir.path().join("http.jsonl.new"),
        dir.path().join("http.jsonl.bak"),
    );
    write_tape(
        &tape,
        &[
            ("c2s", json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            ("s2c", json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        ],
        true,
    );
    let first = std::fs::read(&tape).unwrap();

    // Started and stopped before any request: the tape stays, the empty recording is beside it.
    let edge = edge_recording(dir.path(), "http.jsonl");
    let err = edge.rec.stop();
    assert!(
        std::fs::read(&tape).unwrap() == first,
        "the tape is untouched"
    );
    assert_contains(
        &err,
        &format!(
            "the new recording held no exchange: {} is kept as it was; the new recording is at {}",
            tape.display(),
            new.display()
        ),
    );
    assert_eq!(tape_lines(&new).last().unwrap()["exchanges"], 0);

    // One request answered: the new recording replaces the tape, the old one kept as .bak.
    let rec = Served::record(&format!("{}/mcp", edge.base), &tape);
    let (status, body) = post(&rec.url, &edge_request(7, "tools/list"));
    assert_eq!(status, 200, "{}", text(&body));
    let err = rec.stop();
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
    assert!(!new.exists());
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs[1]["msg"]["result"]["echo"], "tools/list", "{msgs:#?}");
}

// --- the upstream's framings (record --url's own HTTP/1.1 client) ------------------------------

/// `body` as a chunked body: three lines a chunk, an extension on every size line, a trailer.
fn chunked_with_extensions(body: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for lines in body.split_inclusive('\n').collect::<Vec<_>>().chunks(3) {
        let piece = lines.concat();
        out.extend_from_slice(format!("{:X};name=\"v\"\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nx-checksum: 1\r\n\r\n");
    out
}

/// Every way HTTP/1.1 lets an upstream frame its answer reaches the client byte for byte
/// through `record --url` and is taped message by message, the shapes of real traffic kept
/// (keys in odd order, `2.50`, a secret under `api_key`): a length cut inside the head and the
/// body, an empty 202, an SSE stream chunked with extensions on every size line and a trailer
/// cut at odd places, a JSON answer in two chunks, an SSE stream delimited by the connection's
/// close. The upstream connection is kept for every answer until the one that closes it; the
/// tape verifies, and play answers the same calls with the recorded bytes.
#[test]
fn every_framing_an_upstream_may_use_is_forwarded_byte_for_byte_and_taped() {
    let dir = tmp();
    let init = r#"{"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}},"id":1,"jsonrpc":"2.0"}"#;
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":2.50,"total":10}}"#;
    let result2 = r#"{"id":2,"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"price 2.50"}],"structuredContent":{"price":2.50,"api_key":"sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"},"isError":false}}"#;
    let sse2 = format!("event: message\nid: a-1\ndata: {progress}\n\nid: a-2\ndata: {result2}\n\n");
    let result3 = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":false}}"#;
    let sse4 =
        r#"data: {"jsonrpc":"2.0","id":4,"result":{"n":1.0e3,"content":[]}}"#.to_string() + "\n\n";
    let result5 = r#"{"jsonrpc":"2.0","id":5,"result":{}}"#;

    let json_head = |extra: &str, len: usize| {
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {len}\r\n\r\n")
    };
    let answer1 =
        format!("{}{init}", json_head("mcp-session-id: S-1\r\n", init.len())).into_bytes();
    let answer2 = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_vec();
    let mut answer3 =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    let head3 = answer3.len();
    answer3.extend(chunked_with_extensions(&sse2));
    let (a, b) = result3.split_at(20);
    let answer4 = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    )
    .into_bytes();
    let answer5 = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{sse4}"
    )
    .into_bytes();
    let answer6 = format!("{}{result5}", json_head("", result5.len())).into_bytes();
    let cuts3 = vec![head3 + 3, answer3.len() / 3, answer3.len() / 2 + 1];
    let (upstream, accepted) = scripted_upstream(vec![
        (answer1.clone(), vec![20, answer1.len() - 10]),
        (answer2, vec![]),
        (answer3.clone(), cuts3),
        (answer4.clone(), vec![answer4.len() / 2]),
        (answer5.clone(), vec![answer5.len() - 7]),
        (answer6, vec![]),
    ]);
    let tape = dir.path().join("framings.jsonl");
    let rec = Served::record(&format!("{upstream}/mcp"), &tape);

    let calls = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"_meta": {"progressToken": "p"}, "name": "buy", "arguments": {"api_key": "sk-client-00112233445566778899aabbccddeeff", "password": "hunter2hunter2", "price": 2.50}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "none", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "big", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
    ];
    let send_in = |url: &str, sid: &str, i: usize| {
        let session = [
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        let extra: &[(&str, &str)] = if i == 0 { &[] } else { &session };
        let mut stream = http_open(
            url,
            "POST",
            &post_headers(extra),
            calls[i].to_string().as_bytes(),
        );
        let body = text(&stream.body());
        (
            stream.status,
            stream.header("mcp-session-id").map(str::to_string),
            body,
        )
    };
    let send = |url: &str, i: usize| send_in(url, "S-1", i);
    let want = [
        (200, Some("S-1".to_string()), init.to_string()),
        (202, None, String::new()),
        (200, None, sse2.clone()),
        (200, None, result3.to_string()),
        (200, None, sse4.clone()),
        (200, None, result5.to_string()),
    ];
    for (i, want) in want.iter().enumerate() {
        assert_eq!(&send(&rec.url, i), want, "answer {i} through record --url");
    }
    rec.stop();
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one upstream connection until the answer delimited by its close, then a new one"
    );

    Mt::new(["verify", &s(&tape)]).run().status(0);
    let raw = std::fs::read_to_string(&tape).unwrap();
    for secret in [
        "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0",
        "sk-client-00112233445566778899aabbccddeeff",
        "hunter2hunter2",
    ] {
        assert!(!raw.contains(secret), "{secret} is on the tape");
    }
    let line_of = |needle: &str| {
        raw.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no tape line with {needle}:\n{raw}"))
    };
    // The server's bytes are kept as they came: `2.50` stays `2.50`, keys in their order.
    assert!(line_of("notifications/progress").contains(r#""progress":2.50,"total":10"#));
    assert!(line_of(r#""text":"price 2.50""#).contains(r#"{"id":2,"jsonrpc":"2.0","result""#));
    assert!(line_of(r#""n":1.0e3"#).contains(r#""stream":"post""#));
    let lines = tape_lines(&tape);
    let s2c: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "msg" && l["dir"] == "s2c")
        .collect();
    let ids: Vec<&Value> = s2c.iter().map(|l| &l["msg"]["id"]).collect();
    assert_eq!(
        ids,
        [
            &json!(1),
            &Value::Null,
            &json!(2),
            &json!(3),
            &json!(4),
            &json!(5)
        ]
    );
    assert_eq!(s2c[2]["http"]["event_id"], "a-2");

    // Play answers the same calls with what was recorded (the secrets as the tape has them),
    // JSON as JSON, a stream as a stream: the same messages, byte for byte, in its events' data.
    let data = |sse: &str| -> Vec<String> {
        sse.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    };
    let play = Served::play(&tape);
    let (status, sid, body) = send(&play.url, 0);
    assert_eq!((status, body.as_str()), (200, init), "initialize from play");
    let sid = sid.expect("play's session id");
    for i in [1, 3, 5] {
        let (status, _, body) = send_in(&play.url, &sid, i);
        assert_eq!(
            (status, body),
            (want[i].0, want[i].2.clone()),
            "answer {i} from play"
        );
    }
    // Each event as the server framed it: an `event:` name only where it gave one (an rmcp
    // server never does), its id where it gave one.
    let (status, _, body) = send_in(&play.url, &sid, 4);
    assert_eq!(
        (status, body.as_str()),
        (200, sse4.as_str()),
        "answer 4 from play"
    );
    let (status, _, body) = send_in(&play.url, &sid, 2);
    let played = data(&body);
    assert_eq!(
        (status, played.len()),
        (200, 2),
        "answer 2 from play: {body:?}"
    );
    assert_eq!(played[0], progress);
    assert!(played[1].contains(r#""price":2.50"#), "{body}");
    let fields = |event: &str| -> Vec<String> {
        event
            .lines()
            .filter(|l| !l.starts_with("data: "))
            .map(str::to_string)
            .collect()
    };
    let events: Vec<&str> = body.split_terminator("\n\n").collect();
    assert_eq!(events.len(), 2, "{body:?}");
    assert_eq!(fields(events[0]), ["id: a-1", "event: message"], "{body:?}");
    assert_eq!(fields(events[1]), ["id: a-2"], "{body:?}");
    assert_clean_play(&play.stop());
}

/// The session's own GET stream, as the recorded server framed it: each event with its id,
/// and an `event:` name only where the server gave one (an rmcp server never does). Play named
/// every event there `message` and dropped its id.
#[test]
fn the_standalone_get_streams_events_keep_their_recorded_ids_and_names() {
    let dir = tmp();
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"logging":{}},"serverInfo":{"name":"scripted","version":"1"}}}"#;
    let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"price":2.50,"z":1,"a":2}}}"#;
    let changed = r#"{"method":"notifications/tools/list_changed","jsonrpc":"2.0"}"#;
    let plain = r#"{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}"#;
    let get_events = format!(
        "id: g-1\ndata: {log}\n\nid: g-2\nevent: note\ndata: {changed}\n\ndata: {plain}\n\n"
    );
    let pong = r#"{"jsonrpc":"2.0","id":2,"result":{}}"#;
    let json = |extra: &str, body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let get_answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{get_events}"
    )
    .into_bytes();
    let (upstream, _) = scripted_upstream(vec![
        (json("mcp-session-id: S-1\r\n", init), vec![]),
        (
            b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_vec(),
            vec![],
        ),
        (get_answer, vec![]),
        (json("", pong), vec![]),
    ]);
    let tape = dir.path().join("get.jsonl");
    let rec = Served::record(&format!("{upstream}/mcp"), &tape);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let in_session = |url: &str, sid: &str, msg: &Value| {
        let (status, _) = http(
            url,
            "POST",
            &post_headers(&[("Mcp-Session-Id", sid)]),
            msg.to_string().as_bytes(),
        );
        status
    };
    let get_stream = |url: &str, sid: &str| {
        http_open(
            url,
            "GET",
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", sid)],
            b"",
        )
    };
    let mut first = post_open_ok(&rec.url, &initialize);
    assert_eq!(text(&first.body()), init);
    assert_eq!(in_session(&rec.url, "S-1", &initialized), 202);
    let mut get = get_stream(&rec.url, "S-1");
    assert_eq!(
        text(&get.body()),
        get_events,
        "the GET stream through record --url"
    );
    assert_eq!(in_session(&rec.url, "S-1", &ping), 200);
    rec.stop();
    Mt::new(["verify", &s(&tape)]).run().status(0);
    let on_get: Vec<Value> = tape_msgs(&tape)
        .into_iter()
        .filter(|m| m["http"]["stream"] == "get")
        .collect();
    assert_eq!(on_get.len(), 3, "{on_get:#?}");

    let play = Served::play(&tape);
    let mut s = post_open_ok(&play.url, &initialize);
    let sid = s
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    assert_eq!(text(&s.body()), init);
    assert_eq!(in_session(&play.url, &sid, &initialized), 202);
    let mut get = get_stream(&play.url, &sid);
    assert_eq!(get.status, 200);
    let got = text(&get.read_until(&format!("{plain}\n\n")));
    assert_eq!(got, get_events, "the GET stream from play");
    assert_eq!(in_session(&play.url, &sid, &ping), 200);
    drop(get);
    assert_clean_play(&play.stop());

    // The older HTTP+SSE transport sends every server message as a `message` event, whatever
    // the recording's names: the same tape played with `--transport sse`.
    let play = Served::play_with(&tape, &["--transport", "sse"]);
    let mut stream = http_open(&play.url, "GET", &[("Accept", "text/event-stream")], b"");
    let endpoint = text(&stream.read_until("\n\n"));
    let path = endpoint
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no endpoint event: {endpoint:?}"))
        .trim()
        .to_string();
    let (base, _) = split_url(&play.url);
    let post_url = format!("http://{base}{path}");
    // As a client does: the answer to initialize, then `initialized`.
    let mut got = String::new();
    let steps = [
        (&initialize, "scripted".to_string()),
        (&initialized, format!("{plain}\n\n")),
    ];
    for (msg, until) in steps {
        let (status, _) = http(
            &post_url,
            "POST",
            &post_headers(&[]),
            msg.to_string().as_bytes(),
        );
        assert_eq!(status, 202, "POST {msg}");
        got.push_str(&text(&stream.read_until(&until)));
        if msg == &initialize {
            // Nothing recorded after `initialized` comes before it: play counted the
            // session's messages from one where the recording counted from none, and sent
            // the three events here, ahead of the answer itself.
            assert_eq!(got.matches("\n\n").count(), 1, "{got:?}");
        }
    }
    let events: Vec<&str> = got.split_terminator("\n\n").collect();
    assert_eq!(events.len(), 4, "the answer, then three events: {got:?}");
    for e in &events {
        let fields: Vec<&str> = e.lines().filter(|l| !l.starts_with("data: ")).collect();
        assert_eq!(fields, ["event: message"], "{got:?}");
    }
    drop(stream);
    assert_clean_play(&play.stop());
}

/// A stdlib upstream that gzips its JSON answers when the request accepts gzip (as a CDN or a
/// server's middleware does) or says nothing (then any coding is acceptable, RFC 9110), or
/// always with `always` in argv; it logs each request's `Accept-Encoding`.
const GZIP_UPSTREAM: &str = r#"
import gzip
ALWAYS = "always" in sys.argv[2:]
KEY = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"

class H(Quiet):
    def do_GET(self):
        self.not_allowed(("Allow", "POST"))

    def do_DELETE(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        msg, method, rid = self.read_msg()
        asked = self.headers.get("Accept-Encoding") or "-"
        print("accept-encoding:", asked, flush=True)
        if rid is None:
            return self.accepted()
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "gzipped", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "deploy", "inputSchema": {"type": "object"}}]}
        else:
            result = {"content": [{"type": "text", "text": "deployed " + "x" * 600}],
                      "structuredContent": {"api_key": KEY, "price": 2.50}}
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if method == "initialize":
            self.send_header("Mcp-Session-Id", "Z-1")
        if ALWAYS or "gzip" in asked or asked == "-":
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
"#;

/// An upstream that compresses for a client that accepts it (the Python SDK's httpx asks for
/// gzip): `record --url` taped the gzip bytes as non-JSON lines (no exchange to play, and a
/// secret in them unredacted). It now asks the upstream for `identity`; an upstream that
/// compresses all the same is forwarded as it came and the tape says so instead.
#[test]
fn a_compressing_upstream_is_asked_for_plain_answers_and_never_tapes_compressed_bytes() {
    let dir = tmp();
    let (up, port) = py_upstream(dir.path(), "gzipped", GZIP_UPSTREAM, &[]);
    let tape = dir.path().join("gz.jsonl");
    let rec = Served::record(&format!("http://127.0.0.1:{port}/mcp"), &tape);
    let steps = json!([{"tool": "deploy", "args": {"service": "api"}, "timeout": 10}]);
    let through = py_faults(&steps, std::slice::from_ref(&rec.url));
    let call = &through["steps"][0];
    assert_eq!(call["outcome"], "result", "{}", pretty(&through));
    assert!(call["text"]
        .as_str()
        .unwrap_or_default()
        .starts_with("deployed xxx"));
    rec.stop();
    let asked = up.log_text();
    assert!(asked.contains("accept-encoding: identity"), "{asked}");
    assert!(
        !asked.contains("gzip"),
        "the upstream was asked for gzip:\n{asked}"
    );
    Mt::new(["verify", &s(&tape)]).run().status(0);
    let taped = std::fs::read_to_string(&tape).unwrap();
    assert!(!taped.contains("not_json"), "{taped}");
    assert!(!taped.contains("sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"));
    assert_contains(&taped, r#""price": 2.5"#);
    let play = Served::play(&tape);
    let played = py_faults(&steps, std::slice::from_ref(&play.url));
    assert_eq!(
        played["steps"][0]["outcome"],
        "result",
        "{}",
        pretty(&played)
    );
    assert_eq!(played["steps"][0]["text"], call["text"]);
    assert_clean_play(&play.stop());
    // Play's own client to a live server asks for plain answers too: a call the tape does not
    // hold, answered live over stdio (asked nothing, this upstream compresses).
    let mut argv = play_cmd(&tape);
    let live = format!("http://127.0.0.1:{port}/mcp");
    argv.extend(["--on-miss", "live", "--url", &live].map(String::from));
    let mut c = LineClient::spawn(&argv);
    c.initialize();
    let r = c.call(
        9,
        "tools/call",
        json!({"name": "deploy", "arguments": {"service": "other"}}),
    );
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("deployed xxx")),
        "{r}"
    );
    c.finish_with(0);
    let asked = up.log_text();
    assert!(!asked.contains("accept-encoding: -"), "{asked}");

    // One that compresses whatever it is asked: the client gets its bytes as they came, the
    // tape an event that says what passed, and no bytes it could not read or redact.
    let (_up, port) = py_upstream(dir.path(), "always", GZIP_UPSTREAM, &["always"]);
    let tape = dir.path().join("always.jsonl");
    let rec = Served::record(&format!("http://127.0.0.1:{port}/mcp"), &tape);
    let mut s = http_open(
        &rec.url,
        "POST",
        &post_headers(&[]),
        req(1, "initialize", init_params()).to_string().as_bytes(),
    );
    assert_eq!(s.header("content-encoding"), Some("gzip"));
    let body = s.body();
    assert_eq!(&body[..2], b"\x1f\x8b", "gzip bytes, as they came");
    let err = rec.stop();
    assert_contains(
        &err,
        "answered with Content-Encoding: gzip although asked for identity",
    );
    let lines = tape_lines(&tape);
    let errors = events(&lines, "upstream-error");
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert_contains(errors[0]["error"].as_str().unwrap(), "not taped");
    assert!(
        !lines
            .iter()
            .any(|l| l["type"] == "msg" && l["dir"] == "s2c"),
        "{lines:#?}"
    );
}

/// The Python SDK's server answers `/mcp/` with a 307 to `http://ITS-ORIGIN/mcp`. Passed on,
/// it sent the client to the upstream, past the recorder: the SDK's client refused it
/// ("Redirect to … not followed") and nothing was recorded. `record --url` now follows a
/// redirect to the upstream's own path itself, and tapes that it did.
#[test]
fn a_servers_redirect_to_its_own_path_is_followed_so_the_client_stays_on_the_recorder() {
    let dir = tmp();
    let (_server, port) = py_server_http_port(dir.path());
    let tape = dir.path().join("slash.jsonl");
    let rec = Served::record(&format!("http://127.0.0.1:{port}/mcp/"), &tape);
    assert!(rec.url.ends_with("/mcp/"), "{}", rec.url);
    let steps = json!([{"tool": "echo", "args": {"text": "hi"}, "timeout": 10}]);
    let answered = |doc: &Value, what: &str| {
        assert_eq!(
            doc["steps"][0]["outcome"],
            "result",
            "{what}: {}",
            pretty(doc)
        );
        assert_eq!(
            doc["steps"][0]["text"],
            "echo: hi",
            "{what}: {}",
            pretty(doc)
        );
    };
    answered(
        &py_faults(&steps, std::slice::from_ref(&rec.url)),
        "through record --url",
    );
    rec.stop();
    Mt::new(["verify", &s(&tape)]).run().status(0);
    let lines = tape_lines(&tape);
    let redirects = events(&lines, "http-redirect");
    assert!(!redirects.is_empty(), "{lines:#?}");
    for r in &redirects {
        assert_eq!(
            (&r["status"], &r["to"]),
            (&json!(307), &json!("/mcp")),
            "{r}"
        );
    }
    assert!(
        events(&lines, "http-error").is_empty(),
        "no redirect taped as a refusal: {lines:#?}"
    );
    let play = Served::play(&tape);
    answered(
        &py_faults(&steps, std::slice::from_ref(&play.url)),
        "against play",
    );
    assert_clean_play(&play.stop());
}

/// A redirect `record --url` does not follow (a `303`) still keeps the client on the proxy when
/// it points at the upstream; one to another origin (here the upstream's address with one more
/// digit in the port) is passed on as it came.
#[test]
fn a_redirect_not_followed_points_at_the_proxy_when_it_points_at_the_upstream() {
    let dir = tmp();
    let handler = r#"
class H(Quiet):
    def see_other(self, where):
        self.send_response(303)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.read_msg()
        self.see_other("http://127.0.0.1:%d/elsewhere?x=1" % self.server.server_address[1])

    def do_DELETE(self):
        self.see_other("http://127.0.0.1:%d0/elsewhere" % self.server.server_address[1])
"#;
    let (_up, port) = py_upstream(dir.path(), "see-other", handler, &[]);
    let tape = dir.path().join("303.jsonl");
    let rec = Served::record(&format!("http://127.0.0.1:{port}/mcp"), &tape);
    let s = post_open(&rec.url, &req(1, "initialize", init_params()));
    assert_eq!(s.status, 303);
    assert_eq!(
        s.header("location"),
        Some(format!("http://{}/elsewhere?x=1", rec.authority()).as_str())
    );
    let s = http_open(&rec.url, "DELETE", &[], b"");
    assert_eq!(s.status, 303);
    let other = format!("http://127.0.0.1:{port}0/elsewhere");
    assert_eq!(s.header("location"), Some(other.as_str()));
    rec.stop();
}

/// What a server answers to a POSTed notification and to a POSTed response (to a server request
/// it never sent: accepted all the same), then to a `ping`, after an `initialize` at `url`:
/// status, `Content-Type` (`None`: none sent), `Mcp-Session-Id` (`"the session's"` when it is
/// the id `initialize` gave, as ids differ from session to session) and body, each (the
/// ping's left out: its SSE event ids differ from session to session too).
type Accepted = (u16, Option<String>, Option<String>, String);
fn accepted_answers(url: &str) -> Vec<Accepted> {
    let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
    let sid = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let _ = init.body();
    let h = post_headers(&[
        ("Mcp-Session-Id", &sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]);
    let msgs = [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": "s-1", "result": {}}),
        req(1, "ping", json!({})),
    ];
    msgs.iter()
        .map(|m| {
            let mut s = http_open(url, "POST", &h, m.to_string().as_bytes());
            let body = text(&s.body());
            let body = if m.get("method").is_some_and(|m| m == "ping") {
                String::new()
            } else {
                body
            };
            let session = s
                .header("mcp-session-id")
                .map(|v| if v == sid { "the session's" } else { v }.to_string());
            (
                s.status,
                s.header("content-type").map(String::from),
                session,
                body,
            )
        })
        .collect()
}

/// The `202 Accepted` a POSTed notification or response gets is played back as the recorded
/// server sent it: server-everything sends no `Content-Type` and no `Mcp-Session-Id`, the
/// Python SDK `application/json` and the session's id; the tape keeps which (an
/// `http-accepted` event), and play sends that (its own session's id). Both send the session's
/// id on the answer to a request, and play does too.
#[test]
fn play_answers_a_posted_notification_or_response_as_the_recorded_server_did() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let tape = dir.path().join("accepted.jsonl");
        let (_server, upstream) = start(dir.path());
        let direct = accepted_answers(&upstream);
        let (accepted, ping) = direct.split_at(2);
        assert!(
            accepted.iter().all(|(status, ..)| *status == 202),
            "{name}: {direct:?}"
        );
        // What each server does with the session id on a 202 (seen with curl too), and on
        // the answer to a request: both send it there.
        assert_eq!(ping[0].0, 200, "{name}: {direct:?}");
        assert_eq!(
            ping[0].2.as_deref(),
            Some("the session's"),
            "{name}: {direct:?}"
        );
        let with_session = accepted
            .iter()
            .all(|a| a.2.as_deref() == Some("the session's"));
        let without = accepted.iter().all(|a| a.2.is_none());
        assert!(
            if name == "the Python SDK" {
                with_session
            } else {
                without
            },
            "{name}: {direct:?}"
        );
        let rec = Served::record(&upstream, &tape);
        let recorded = accepted_answers(&rec.url);
        rec.stop();
        assert_eq!(recorded, direct, "{name}: through record --url");
        let play = Served::play(&tape);
        let played = accepted_answers(&play.url);
        play.stop();
        assert_eq!(played, direct, "{name}: from the tape");
    }
}

/// server-everything answers a POST it cannot read with `400` and a `-32700` error whose id is
/// `null`: play gives the same POST that recorded answer (its status, content type and body),
/// not its own.
#[test]
fn play_answers_a_bad_post_with_what_server_everything_answered_it() {
    let dir = tmp();
    let tape = dir.path().join("bad-posts.jsonl");
    let (_server, upstream) = everything_http(dir.path());
    let bad = |url: &str| -> Vec<(u16, String, String)> {
        let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
        let sid = init
            .header("mcp-session-id")
            .expect("a session")
            .to_string();
        let _ = init.body();
        let h = post_headers(&[
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-06-18"),
        ]);
        [
            &b"this is not json"[..],
            br#"{"jsonrpc":"2.0","id":{"k":1},"method":"tools/list"}"#,
        ]
        .iter()
        .map(|b| {
            let mut s = http_open(url, "POST", &h, b);
            let body = text(&s.body());
            (s.status, s.content_type().to_string(), body)
        })
        .collect()
    };
    let rec = Served::record(&upstream, &tape);
    let recorded = bad(&rec.url);
    rec.stop();
    assert!(
        recorded
            .iter()
            .all(|(st, _, b)| *st == 400 && b.contains("\"id\":null")),
        "{recorded:?}"
    );
    let play = Served::play(&tape);
    let played = bad(&play.url);
    play.stop();
    assert_eq!(played, recorded, "the recorded answers, as they were");
}

/// What a server answers POSTs no server can serve (not JSON, JSON that is no message, JSON
/// cut short) in a session it opened at `url`: status, `Content-Type`, `Mcp-Session-Id`
/// (`"the session's"` when it is the session's: ids differ from session to session) and body,
/// each.
type BadAnswer = (u16, String, Option<String>, String);
fn bad_answers_in_a_session(url: &str) -> Vec<BadAnswer> {
    let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
    let sid = init
        .header("mcp-session-id")
        .expect("a session")
        .to_string();
    let _ = init.body();
    let h = post_headers(&[
        ("Mcp-Session-Id", &sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]);
    [&b"this is not json"[..], br#"{"foo":1}"#, b"[1,2"]
        .iter()
        .map(|b| {
            let mut s = http_open(url, "POST", &h, b);
            let session = s
                .header("mcp-session-id")
                .map(|v| if v == sid { "the session's" } else { v }.to_string());
            let ct = s.content_type().to_string();
            (s.status, ct, session, text(&s.body()))
        })
        .collect()
}

/// Both reference servers answer a POST they cannot read `400` with a JSON-RPC error whose id
/// is `null`; the Python SDK's server sends the session's `Mcp-Session-Id` on it (as on every
/// answer in a session), server-everything none (seen with curl too). Play gives each bad
/// POST its recorded error with its own session's id where the recorded server sent one, and
/// none where it did not (before, never).
#[test]
fn a_bad_posts_recorded_error_carries_the_session_id_where_the_server_sent_it() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let tape = dir.path().join("bad-in-session.jsonl");
        let (_server, upstream) = start(dir.path());
        let direct = bad_answers_in_a_session(&upstream);
        let python = name == "the Python SDK";
        for (status, ct, session, body) in &direct {
            assert!(
                *status == 400
                    && ct.starts_with("application/json")
                    && body.contains("\"id\":null"),
                "{name}: {direct:?}"
            );
            assert_eq!(
                session.as_deref(),
                python.then_some("the session's"),
                "{name}: {direct:?}"
            );
        }
        let rec = Served::record(&upstream, &tape);
        let recorded = bad_answers_in_a_session(&rec.url);
        rec.stop();
        assert_eq!(recorded, direct, "{name}: through record --url");
        let play = Served::play(&tape);
        let played = bad_answers_in_a_session(&play.url);
        let err = play.stop();
        assert_eq!(played, direct, "{name}: from the tape; play said:\n{err}");
    }
}

/// A stateful upstream with no GET stream and no session termination, which (as the Python
/// SDK's server does on every answer in a session) sends the session's id on its refusals:
/// `initialize` opens session `S-1`; a GET or a DELETE is refused `405` with `Allow: POST`,
/// no body and no `Content-Type`, carrying `S-1` when the request named it. None of the
/// reference servers refuses so (they refuse a GET or DELETE only of a session they do not
/// have, or naming none, with JSON-RPC errors: `http_sessions::get_and_delete_…`): this one
/// stands for a server that does.
const NO_GET_NO_DELETE: &str = r#"
class H(Quiet):
    def session(self):
        return [("Mcp-Session-Id", "S-1")] if self.headers.get("Mcp-Session-Id") else []

    def do_POST(self):
        msg, method, rid = self.read_msg()
        if method == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {},
                      "serverInfo": {"name": "no-get", "version": "1"}}
            self.send_json({"jsonrpc": "2.0", "id": rid, "result": result},
                           headers=[("Mcp-Session-Id", "S-1")])
        elif rid is None:
            self.send_response(202)
            for k, v in self.session():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_json({"jsonrpc": "2.0", "id": rid, "result": {}}, headers=self.session())

    def do_GET(self):
        self.not_allowed(("Allow", "POST"), ("Content-Length", "0"), *self.session())

    def do_DELETE(self):
        self.not_allowed(("Allow", "POST"), ("Content-Length", "0"), *self.session())
"#;

/// A GET and a DELETE in the session `initialize` opened at `url`, then each without a
/// session: status, `Allow`, `Content-Type` and `Mcp-Session-Id` (`"the session's"` when it
/// is the session's), each.
type Refused = (u16, Option<String>, Option<String>, Option<String>);
fn get_and_delete_refused(url: &str) -> Vec<Refused> {
    let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
    let sid = init
        .header("mcp-session-id")
        .expect("a session")
        .to_string();
    let _ = init.body();
    let in_session = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Accept", "text/event-stream"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let h = post_headers(&in_session[..2]);
    assert_eq!(
        http_open(url, "POST", &h, initialized.to_string().as_bytes()).status,
        202
    );
    let header = |s: &HttpStream, name: &str| s.header(name).map(String::from);
    [("GET", &in_session[..]), ("DELETE", &in_session[..])]
        .into_iter()
        .chain([("GET", &in_session[2..]), ("DELETE", &in_session[2..])])
        .map(|(method, h)| {
            let s = http_open(url, method, h, b"");
            let session = s
                .header("mcp-session-id")
                .map(|v| if v == sid { "the session's" } else { v }.to_string());
            (
                s.status,
                header(&s, "allow"),
                header(&s, "content-type"),
                session,
            )
        })
        .collect()
}

/// A GET or DELETE the recorded server refused carrying the session's id gets play's refusal
/// with play's session id, where the request named that session (before, play gave the
/// recorded status and `Allow` without the id).
#[test]
fn a_refused_get_or_delete_carries_the_session_id_where_the_server_sent_it() {
    let dir = tmp();
    let (_up, port) = py_upstream(dir.path(), "no-get", NO_GET_NO_DELETE, &[]);
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    let tape = dir.path().join("no-get.jsonl");
    let direct = get_and_delete_refused(&upstream);
    let refused = |session: Option<&str>| -> Refused {
        (405, Some("POST".into()), None, session.map(String::from))
    };
    assert_eq!(
        direct,
        [
            refused(Some("the session's")),
            refused(Some("the session's")),
            refused(None),
            refused(None)
        ],
        "the upstream as written"
    );
    let rec = Served::record(&upstream, &tape);
    let recorded = get_and_delete_refused(&rec.url);
    rec.stop();
    assert_eq!(recorded, direct, "through record --url");
    let play = Served::play(&tape);
    let played = get_and_delete_refused(&play.url);
    let err = play.stop();
    assert_eq!(played, direct, "from the tape; play said:\n{err}");
}

/// A session of the HTTP+SSE transport at `sse_url`: its event stream (kept open: the session
/// lives as long as it) and the URL its `endpoint` event names to POST to.
fn legacy_session(sse_url: &str) -> (HttpStream, String) {
    let mut get = http_open(sse_url, "GET", &[("Accept", "text/event-stream")], b"");
    assert_eq!(get.status, 200, "GET {sse_url}");
    let mut seen = String::new();
    let endpoint = loop {
        let piece = get
            .next_piece()
            .expect("an endpoint event before the stream ends");
        seen.push_str(&text(&piece).replace("\r\n", "\n"));
        let event = seen
            .split("\n\n")
            .find(|e| e.contains("event: endpoint") && seen.contains(&format!("{e}\n\n")));
        if let Some(data) = event.and_then(|e| e.lines().find_map(|l| l.strip_prefix("data: "))) {
            break data.trim().to_string();
        }
    };
    let url = if endpoint.starts_with("http://") {
        endpoint
    } else {
        let (authority, _) = crate::harness::split_url(sse_url);
        format!("http://{authority}{endpoint}")
    };
    (get, url)
}

/// POST bodies no server can serve as messages: not JSON, a request whose id is an object,
/// JSON that is no message.
const BAD_BODIES: [&str; 3] = [
    "this is not json",
    r#"{"jsonrpc":"2.0","id":{"k":1},"method":"tools/list"}"#,
    r#"{"foo":1}"#,
];

/// What a server of the HTTP+SSE transport at `sse_url` answers each of `bodies` POSTed in one
/// session: status, `Content-Type` (`None`: none sent) and body.
fn legacy_answers(sse_url: &str, bodies: &[&str]) -> Vec<(u16, Option<String>, String)> {
    let (_events, post_url) = legacy_session(sse_url);
    bodies
        .iter()
        .map(|b| {
            let mut s = http_open(
                &post_url,
                "POST",
                &[("Content-Type", "application/json")],
                b.as_bytes(),
            );
            let ct = s.header("content-type").map(String::from);
            (s.status, ct, text(&s.body()))
        })
        .collect()
}

/// On the HTTP+SSE transport a POST whose body is not a message is refused, not accepted:
/// server-everything's `sse` mode answers `400` with `Invalid message: <the body>` and the
/// Python SDK's SSE server `400` with `Could not parse message`, neither with a
/// `Content-Type` (the Python SDK accepts a request whose id is an object: `202`). Play answers
/// the same bytes as the recorded server did, and bytes it has no answer for `400`, as they
/// do, never `202`.
#[test]
fn play_over_http_sse_answers_a_bad_post_as_the_recorded_server_did() {
    let servers: [(&str, StartServer); 2] = [
        ("server-everything", |d| {
            everything_http_at(d, "sse", "/sse")
        }),
        ("the Python SDK", py_server_sse),
    ];
    for (name, start) in servers {
        let dir = tmp();
        let tape = dir.path().join("bad-sse.jsonl");
        let (_server, upstream) = start(dir.path());
        let direct = legacy_answers(&upstream, &BAD_BODIES);
        let (status, ct, body) = &direct[0];
        assert!(
            *status == 400 && ct.is_none() && !body.is_empty(),
            "{name}: not JSON is refused: {direct:?}"
        );
        let rec = Served::record(&upstream, &tape);
        let recorded = legacy_answers(&rec.url, &BAD_BODIES);
        rec.stop();
        assert_eq!(recorded, direct, "{name}: through record --url");
        let play = Served::play_with(&tape, &["--transport", "sse"]);
        let played = legacy_answers(&play.url, &BAD_BODIES);
        let unrecorded = legacy_answers(&play.url, &["[1,2", "{}"]);
        let err = play.stop();
        assert_eq!(
            played, direct,
            "{name}: from the tape; play's stderr:\n{err}"
        );
        for (status, ct, body) in &unrecorded {
            assert!(
                *status == 400 && ct.is_none() && body.starts_with("mcptape play: "),
                "{name}: not recorded: {unrecorded:?}"
            );
        }
    }
}

/// An MCP session run by a web page in headless Chromium with `fetch`, against `url`: the
/// handshake, `tools/list` and an `echo` call, as a browser client (the MCP Inspector
/// connecting directly) makes them: each POST with MCP's headers goes after a CORS preflight,
/// and its answer is read only if it allows the page's origin. What the page saw, as JSON.
fn browser_session(page: &str, url: &str) -> Value {
    let js = r#"(async () => {
  const url = "URL";
  const rpc = async (msg, sid) => {
    const h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"};
    if (sid) { h["Mcp-Session-Id"] = sid; h["MCP-Protocol-Version"] = "2025-06-18"; }
    const r = await fetch(url, {method: "POST", headers: h, body: JSON.stringify(msg)});
    const text = await r.text();
    let body = null;
    if ((r.headers.get("content-type") || "").startsWith("text/event-stream")) {
      for (const line of text.split("\n")) {
        if (line.startsWith("data:")) { const m = JSON.parse(line.slice(5)); if (m.id === msg.id) body = m; }
      }
    } else if (text) { body = JSON.parse(text); }
    return {status: r.status, sid: r.headers.get("mcp-session-id"), body};
  };
  try {
    const init = await rpc({jsonrpc: "2.0", id: 0, method: "initialize", params: {protocolVersion: "2025-06-18",
      capabilities: {}, clientInfo: {name: "browser", version: "1"}}});
    const note = await rpc({jsonrpc: "2.0", method: "notifications/initialized"}, init.sid);
    const list = await rpc({jsonrpc: "2.0", id: 1, method: "tools/list"}, init.sid);
    const echo = await rpc({jsonrpc: "2.0", id: 2, method: "tools/call",
      params: {name: "echo", arguments: {message: "from a browser"}}}, init.sid);
    return {session_id_readable: !!init.sid, initialized: note.status, server: init.body.result.serverInfo.name,
      tools: list.body.result.tools.map(t => t.name), echo: echo.body.result.content[0].text};
  } catch (e) { return {error: String(e)}; }
})()"#
        .replace("URL", url);
    let p = probe_url(page, &[eval(&js)]);
    match p.results.first() {
        Some(r) => r.clone(),
        None => panic!("the page ran no session: {p:?}"),
    }
}

/// server-everything's HTTP mode answers browsers (CORS, "for testing with Inspector direct
/// connect mode"): a page on another loopback origin runs a whole session with it. Through
/// `record --url` the page sees the same, and `play --listen` of that tape answers the page's
/// preflights and gives the CORS headers the server gave, so the page runs the session on the
/// tape too (before, play refused the preflight with 405 and the browser saw no answer at all).
#[test]
fn a_browser_client_runs_the_same_session_on_the_server_through_record_and_on_the_tape() {
    let dir = tmp();
    let tape = dir.path().join("browser.jsonl");
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<!doctype html><title>client</title><body data-ready=\"1\"><p>an MCP client</p></body>",
    )
    .unwrap();
    // Port 0: the kernel's choice, which http.server prints (unbuffered, so it reaches the log).
    let mut page = std::process::Command::new("python3");
    page.args(["-u", "-m", "http.server", "--bind", "127.0.0.1", "0"])
        .arg("--directory")
        .arg(&site);
    let (_site, site_port) = listening_on_0(
        "page",
        dir.path().join("site.log"),
        page,
        "Serving HTTP on 127.0.0.1 port ",
    );
    let page = format!("http://127.0.0.1:{site_port}/index.html");
    let (_server, upstream) = everything_http(dir.path());
    let direct = browser_session(&page, &upstream);
    assert!(direct.get("error").is_none(), "direct: {direct}");
    assert_eq!(direct["session_id_readable"], true, "{direct}");
    assert_eq!(direct["echo"], "Echo: from a browser", "{direct}");
    let rec = Served::record(&upstream, &tape);
    let recorded = browser_session(&page, &rec.url);
    rec.stop();
    assert_eq!(recorded, direct, "through record --url");
    let events: Vec<String> = std::fs::read_to_string(&tape)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l["what"].as_str().map(str::to_string))
        .collect();
    assert!(
        events.iter().any(|w| w == "http-options") && events.iter().any(|w| w == "http-cors"),
        "the preflight and the CORS headers are taped: {events:?}"
    );
    Mt::new(["lint"]).arg(&tape).run().status(0);
    let play = Served::play(&tape);
    let played = browser_session(&page, &play.url);
    play.stop();
    assert_eq!(played, direct, "from the tape");
}
