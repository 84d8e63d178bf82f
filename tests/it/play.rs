//! `mcptape play` edge cases: record a real session, then play it with no server and check what
//! the client gets, what stderr says, and the exit code.

use crate::harness::*;
use crate::record::{py, record, record_sh};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `mcptape play TAPE FLAGS…` as a line client.
fn play(tape: &Path, flags: &[&str]) -> LineClient {
    Mt::new(["play"]).arg(tape).args(flags).spawn()
}

/// `v` with its top-level `id` set to `id`.
fn with_id(v: &Value, id: Value) -> Value {
    let mut v = v.clone();
    v["id"] = id;
    v
}

/// 1-based tape line of the client request with this id.
fn tape_line_of_request(tape: &Path, id: &Value) -> u64 {
    let lines = tape_lines(tape);
    let i = lines.iter().position(|l| {
        l["type"] == "msg" && l["dir"] == "c2s" && l["kind"] == "request" && &l["id"] == id
    });
    i.expect("request on the tape") as u64 + 1
}

/// A recorded demo session: each request with the response and notifications the client saw.
struct Demo {
    tape: PathBuf,
    _dir: tempfile::TempDir,
    steps: Vec<(Value, Value, Vec<Value>)>,
}

impl Demo {
    fn step(&self, method_or_tool: &str) -> &(Value, Value, Vec<Value>) {
        self.steps
            .iter()
            .find(|(r, _, _)| {
                r["params"]["name"] == method_or_tool || r["method"] == method_or_tool
            })
            .expect("a recorded step")
    }
}

fn add_params(a: i64, b: i64) -> Value {
    json!({"name": "add", "arguments": {"a": a, "b": b}})
}

fn forecast_params(token: Option<Value>) -> Value {
    let mut p = json!({"name": "forecast", "arguments": {"city": "Lisbon", "days": 3}});
    if let Some(t) = token {
        p["_meta"] = json!({"progressToken": t});
    }
    p
}

fn lookup_params() -> Value {
    json!({"name": "lookup_city", "arguments": {"name": "Lisbon"}})
}

fn record_demo() -> Demo {
    let (dir, tape) = tmp_tape("demo.jsonl");
    let mut c = record(&tape, &[], &demo_server("healthy"));
    let requests = [
        req(1, "initialize", init_params()),
        req(2, "tools/list", json!({})),
        req(3, "tools/call", add_params(2, 3)),
        req(4, "tools/call", forecast_params(Some(json!("rec-tok")))),
        req(5, "tools/call", lookup_params()),
    ];
    let mut steps = Vec::new();
    for (i, r) in requests.into_iter().enumerate() {
        let (resp, before) = c.ask(&r);
        assert!(resp.get("result").is_some(), "{resp}");
        steps.push((r, resp, before));
        if i == 0 {
            c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
    }
    c.finish_with(0);
    let progress = &steps[3].2;
    assert_eq!(
        progress
            .iter()
            .filter(|n| n["method"] == "notifications/progress")
            .count(),
        3,
        "{progress:?}"
    );
    Demo {
        tape,
        _dir: dir,
        steps,
    }
}

#[test]
fn play_answers_like_the_recording_with_the_clients_ids_and_progress_token() {
    let demo = record_demo();
    let mut c = play(&demo.tape, &[]);
    let ids = ["init-901", "list-902", "add-903", "fc-904", "city-905"];
    for (k, (recorded_req, recorded_resp, recorded_before)) in demo.steps.iter().enumerate() {
        let mut r = with_id(recorded_req, json!(ids[k]));
        if recorded_req["params"]["name"] == "forecast" {
            r["params"]["_meta"]["progressToken"] = json!(4242);
        }
        let (resp, before) = c.ask(&r);
        assert_eq!(resp["id"], ids[k]);
        assert_eq!(resp, with_id(recorded_resp, json!(ids[k])), "step {k}");
        let expected: Vec<Value> = recorded_before
            .iter()
            .map(|n| {
                let mut n = n.clone();
                if n["method"] == "notifications/progress" {
                    assert_eq!(n["params"]["progressToken"], "rec-tok");
                    n["params"]["progressToken"] = json!(4242);
                }
                n
            })
            .collect();
        assert_eq!(
            before, expected,
            "step {k}: notifications carry the client's token"
        );
        if k == 0 {
            c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
    }
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        "served 5, missed 0, drifted 0; every recorded exchange was used",
    );
}

#[test]
fn reordered_and_parallel_calls_match_by_content() {
    let demo = record_demo();
    let mut c = play(&demo.tape, &[]);
    // Out of recorded order, all in flight before any answer is read.
    let asked = [
        req("a", "tools/call", lookup_params()),
        req("b", "tools/call", add_params(2, 3)),
        req("c", "tools/list", json!({})),
    ];
    for r in &asked {
        c.send(r);
    }
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let v = c.recv();
        if v.get("id").is_some() {
            answers.push(v);
        }
    }
    for r in &asked {
        let got = answers
            .iter()
            .find(|a| a["id"] == r["id"])
            .expect("an answer per call");
        let key = r["params"]["name"].as_str().unwrap_or("tools/list");
        let recorded = &demo.step(key).1;
        assert_eq!(got, &with_id(recorded, r["id"].clone()), "{key}");
    }
    let (status, stderr) = c.finish();
    assert_eq!(
        status.code(),
        Some(0),
        "unused exchanges are not a failure: {stderr}"
    );
    assert_contains(
        &stderr,
        "served 3, missed 0, drifted 0; 2 recorded exchanges never used:",
    );
    let init_line = tape_line_of_request(&demo.tape, &json!(1));
    assert_contains(&stderr, &format!("tape line {init_line:>5}  initialize\n"));
    let fc_line = tape_line_of_request(&demo.tape, &json!(4));
    assert_contains(
        &stderr,
        &format!("tape line {fc_line:>5}  tools/call forecast {{\"city\":\"Lisbon\",\"days\":3}}"),
    );
}

/// Python that the inline servers below start with: `send(o)` writes one JSON line,
/// `messages()` yields every JSON line read from stdin until EOF, `requests()` only the requests.
const PY_LINES: &str = r##"
import sys, json
def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
def messages():
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        yield json.loads(line)
def requests():
    for m in messages():
        if "id" in m and "method" in m:
            yield m
"##;

/// `python -u -c` running [`PY_LINES`], then `body`: a server command.
fn line_server(body: &str) -> Vec<String> {
    py(&format!("{PY_LINES}{body}"), &[])
}

/// `tools/call counter` answers 1, 2, 3… ; other requests get `{}`.
const COUNTER: &str = r##"
n = 0
for m in requests():
    r = {}
    if m["method"] == "tools/call":
        n += 1
        r = {"content": [{"type": "text", "text": str(n)}]}
    send({"jsonrpc": "2.0", "id": m["id"], "result": r})
"##;

fn counter_text(v: &Value) -> &str {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a counter answer: {v}"))
}

#[test]
fn repeated_identical_calls_get_their_answers_in_recorded_order() {
    let (_dir, tape) = tmp_tape("counter.jsonl");
    let call = json!({"name": "counter", "arguments": {}});
    let mut c = record(&tape, &[], &line_server(COUNTER));
    let recorded: Vec<String> = (1..=3)
        .map(|i| counter_text(&c.call(i, "tools/call", call.clone())).to_string())
        .collect();
    assert_eq!(recorded, ["1", "2", "3"]);
    c.finish_with(0);

    let mut c = play(&tape, &[]);
    // All three in flight at once: still 1, 2, 3 in the order asked.
    for id in ["x", "y", "z"] {
        c.send(&req(id, "tools/call", call.clone()));
    }
    for (id, want) in [("x", "1"), ("y", "2"), ("z", "3")] {
        let v = c.recv();
        assert_eq!(v["id"], id);
        assert_eq!(counter_text(&v), want);
    }
    // A fourth: every recorded answer is used.
    let (v, _) = c.ask(&req("w", "tools/call", call.clone()));
    assert_eq!(v["error"]["code"], -32099, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert_contains(
        msg,
        "this call was recorded 3 times and every answer is used",
    );
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        "served 3, missed 1, drifted 0; every recorded exchange was used",
    );
}

#[test]
fn a_miss_names_the_nearest_call_and_its_differences() {
    let demo = record_demo();
    let add_line = tape_line_of_request(&demo.tape, &json!(3));
    let mut c = play(&demo.tape, &[]);
    let (v, before) = c.ask(&req("m-1", "tools/call", add_params(2, 5)));
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(v["id"], "m-1");
    let err = &v["error"];
    assert_eq!(err["code"], -32099);
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.starts_with("mcptape: no recorded answer for tools/call"),
        "{msg}"
    );
    assert_contains(
        msg,
        &format!("nearest (tape line {add_line}): $.arguments.b recorded 3 asked 5"),
    );
    let data = &err["data"]["mcptape"];
    assert_eq!(data["reason"], "no_match");
    assert_eq!(data["method"], "tools/call");
    assert_eq!(data["asked"], add_params(2, 5));
    assert_eq!(data["nearest"][0]["line"], add_line);
    assert_eq!(data["nearest"][0]["used"], false);
    assert_eq!(
        data["nearest"][0]["differences"],
        json!([{"path": "$.arguments.b", "left": 3, "right": 5}])
    );

    // An unknown method is a miss too, listing what the tape has.
    let (v, _) = c.ask(&req("m-2", "prompts/list", json!({})));
    let msg = v["error"]["message"].as_str().unwrap();
    assert_contains(msg, "the tape has no prompts/list call");
    // A recorded call is still served after the misses.
    let (v, _) = c.ask(&req("m-3", "tools/call", add_params(2, 3)));
    assert_eq!(v, with_id(&demo.step("add").1, json!("m-3")));

    let stderr = c.finish_with(1);
    assert_contains(&stderr, "mcptape play: no recorded answer for tools/call");
    assert_contains(&stderr, "(request id \"m-1\")");
    assert_contains(
        &stderr,
        &format!("nearest recorded call, tape line {add_line} (unused):"),
    );
    assert_contains(&stderr, "$.arguments.b  recorded 3  asked 5");
    assert_contains(
        &stderr,
        "the tape has: initialize ×1, tools/call ×3, tools/list ×1",
    );
    assert_contains(
        &stderr,
        "served 1, missed 2, drifted 0; 4 recorded exchanges never used:",
    );
    let fc_line = tape_line_of_request(&demo.tape, &json!(4));
    assert_contains(
        &stderr,
        &format!("tape line {fc_line:>5}  tools/call forecast {{\"city\":\"Lisbon\",\"days\":3}}"),
    );
}

#[test]
fn lenient_serves_the_next_unused_exchange_of_the_method() {
    let demo = record_demo();
    let add_line = tape_line_of_request(&demo.tape, &json!(3));
    let mut c = play(&demo.tape, &["--lenient"]);
    let (v, _) = c.ask(&req("l-1", "tools/call", add_params(2, 5)));
    assert_eq!(
        v,
        with_id(&demo.step("add").1, json!("l-1")),
        "the first unused tools/call: add(2, 3)"
    );
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        &format!("--lenient: served tape line {add_line} instead"),
    );
    assert_contains(&stderr, "$.arguments.b  recorded 3  asked 5");
    assert_contains(&stderr, "served 1, missed 0, drifted 0, served leniently 1");
}

#[test]
fn key_order_whitespace_and_progress_token_do_not_matter() {
    let demo = record_demo();
    let mut c = play(&demo.tape, &[]);
    // Keys in another order, spaces and tabs everywhere.
    c.send_raw(b"{ \"params\" :\t{ \"arguments\" : { \"b\" : 3 , \"a\" : 2 } , \"name\" : \"add\" } , \"method\" : \"tools/call\" , \"id\" : \"k-1\" , \"jsonrpc\" : \"2.0\" }\n");
    let (v, _) = c.recv_response(&json!("k-1"));
    assert_eq!(v, with_id(&demo.step("add").1, json!("k-1")));
    // A progress token where none was recorded.
    let mut p = lookup_params();
    p["_meta"] = json!({"progressToken": "not-recorded"});
    let (v, _) = c.ask(&req("k-2", "tools/call", p));
    assert_eq!(v, with_id(&demo.step("lookup_city").1, json!("k-2")));
    // No progress token where one was recorded: served, and no progress is sent.
    let (v, before) = c.ask(&req("k-3", "tools/call", forecast_params(None)));
    let (_, recorded, recorded_before) = demo.step("forecast");
    assert_eq!(v, with_id(recorded, json!("k-3")));
    let without_progress: Vec<Value> = recorded_before
        .iter()
        .filter(|n| n["method"] != "notifications/progress")
        .cloned()
        .collect();
    assert_eq!(before, without_progress);
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "served 3, missed 0");
}

/// On `tools/call ask`, asks the client for a sampling (server ids 0, 1, …), waits for the
/// answer, then responds with the sampled text.
const SAMPLER: &str = r##"
sid = 0
for m in requests():
    if m["method"] != "tools/call":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
        continue
    mine = sid
    sid += 1
    prompt = m["params"]["arguments"]["prompt"]
    send({"jsonrpc": "2.0", "id": mine, "method": "sampling/createMessage",
          "params": {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 10}})
    for a in messages():
        if a.get("id") == mine and "method" not in a:
            break
    text = a["result"]["content"]["text"]
    send({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": "sampled: " + text}]}})
"##;

fn sample_answer(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}})
}

fn ask_params(prompt: &str) -> Value {
    json!({"name": "ask", "arguments": {"prompt": prompt}})
}

/// Calls `ask(prompt)`, answers the server's sampling request with `answer`; returns the
/// sampling request and the final response.
fn ask_with_sampling(c: &mut LineClient, id: Value, prompt: &str, answer: &str) -> (Value, Value) {
    c.send(&req(id.clone(), "tools/call", ask_params(prompt)));
    let sampling = c.recv();
    assert_eq!(sampling["method"], "sampling/createMessage", "{sampling}");
    assert!(sampling.get("id").is_some(), "{sampling}");
    c.send(&sample_answer(&sampling["id"], answer));
    let (resp, before) = c.recv_response(&id);
    assert!(before.is_empty(), "{before:?}");
    (sampling, resp)
}

#[test]
fn server_requests_are_reissued_and_a_different_answer_is_drift() {
    let (_dir, tape) = tmp_tape("sampling.jsonl");
    let mut c = record(&tape, &[], &line_server(SAMPLER));
    let (s1, r1) = ask_with_sampling(&mut c, json!(1), "first", "hello");
    let (s2, r2) = ask_with_sampling(&mut c, json!(2), "second", "world");
    assert_eq!((s1["id"].clone(), s2["id"].clone()), (json!(0), json!(1)));
    assert_eq!(r2["result"]["content"][0]["text"], "sampled: world");
    let list = c.call(3, "tools/list", json!({}));
    c.finish_with(0);
    let s2_line = tape_lines(&tape)
        .iter()
        .position(|l| l["dir"] == "s2c" && l["method"] == "sampling/createMessage" && l["id"] == 1)
        .expect("the second sampling request on the tape") as u64
        + 1;

    let mut c = play(&tape, &[]);
    // The second call first: play issues the sampling request with its own id, not the recorded 1.
    c.send(&req("q-1", "tools/call", ask_params("second")));
    let p1 = c.recv();
    assert_eq!(p1["method"], "sampling/createMessage");
    assert_eq!(p1["params"], s2["params"]);
    assert_ne!(p1["id"], s2["id"], "a fresh id: {p1}");
    // The answer is awaited: nothing comes before the client answers.
    assert_eq!(
        c.recv_raw(Duration::from_millis(300)),
        None,
        "play answered before the sampling answer"
    );
    // A different answer: drift.
    c.send(&sample_answer(&p1["id"], "WORLD"));
    let (v, before) = c.recv_response(&json!("q-1"));
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(
        v,
        with_id(&r2, json!("q-1")),
        "the recorded answer is served all the same"
    );
    // Serving continues: the first call, answered as recorded (no drift), with another fresh id.
    let (p2, v) = ask_with_sampling(&mut c, json!("q-2"), "first", "hello");
    assert_eq!(p2["params"], s1["params"]);
    assert_ne!(p2["id"], p1["id"]);
    assert_eq!(v, with_id(&r1, json!("q-2")));
    let (v, _) = c.ask(&req("q-3", "tools/list", json!({})));
    assert_eq!(v, with_id(&list, json!("q-3")));
    let (status, stderr) = c.finish();
    assert_eq!(status.code(), Some(1), "drift fails play: {stderr}");
    assert_contains(&stderr, &format!("drift: the client's answer to sampling/createMessage (tape line {s2_line}) differs from the recording"));
    assert_contains(
        &stderr,
        "$.result.content.text  recorded \"world\"  got \"WORLD\"",
    );
    assert_eq!(
        stderr.matches("drift:").count(),
        1,
        "only the changed answer drifted: {stderr}"
    );
    assert_contains(
        &stderr,
        "served 3, missed 0, drifted 1; every recorded exchange was used",
    );
}

/// Says something before any request, and again right after `notifications/initialized`.
const EARLY: &str = r##"
send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "early bird"}})
for m in messages():
    if m.get("method") == "notifications/initialized":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif "id" in m and "method" in m:
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "early", "version": "1"}}})
"##;

#[test]
fn standalone_notifications_are_replayed_at_the_same_point() {
    let (_dir, tape) = tmp_tape("early.jsonl");
    let mut c = record(&tape, &[], &line_server(EARLY));
    let early = c.recv();
    assert_eq!(early["params"]["data"], "early bird");
    let init = c.call(1, "initialize", init_params());
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let changed = c.recv();
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    c.finish_with(0);

    let mut c = play(&tape, &[]);
    // Before the client says anything.
    assert_eq!(c.recv(), early);
    c.send(&req("i-1", "initialize", init_params()));
    assert_eq!(
        c.recv(),
        with_id(&init, json!("i-1")),
        "the answer comes first, nothing before it"
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(
        c.recv(),
        changed,
        "after the client's second message, as recorded"
    );
    c.finish_with(0);
}

#[test]
fn a_torn_tape_still_plays_and_bad_client_lines_get_parse_errors() {
    let demo = record_demo();
    let text = std::fs::read_to_string(&demo.tape).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.pop().unwrap().starts_with("{\"type\":\"end\""));
    let last = lines.pop().unwrap();
    let torn_at = lines.len() + 1;
    let mut torn = lines.join("\n");
    torn.push('\n');
    torn.push_str(&last[..last.len() / 2]);
    std::fs::write(&demo.tape, torn).unwrap();

    let mut c = play(&demo.tape, &[]);
    c.send_raw(b"this is not json\n");
    let v = c.recv();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Value::Null);
    let (v, _) = c.ask(&req(77, "tools/call", add_params(2, 3)));
    assert_eq!(v, with_id(&demo.step("add").1, json!(77)));
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\n");
    let v = c.recv();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    let (v, _) = c.ask(&req(78, "tools/list", json!({})));
    assert_eq!(v, with_id(&demo.step("tools/list").1, json!(78)));
    let stderr = c.finish_with(0);
    assert_contains(&stderr, &format!("line {torn_at} is torn"));
    assert_contains(&stderr, "the tape has no closing line");
    assert_contains(&stderr, "mcptape play: Parse error: this is not json");
    assert_contains(&stderr, "rejected 2 unusable client lines");
}

#[test]
fn bad_posts_get_the_errors_over_http_that_bad_lines_get_over_stdio() {
    // Over HTTP every POST play could not serve was a "Parse error" (-32700), a batch or a
    // JSON number too, and went uncounted; over stdio each gets its own error and is counted.
    let demo = record_demo();
    let play = Served::play(&demo.tape);
    let mut s = post_open_ok(&play.url, &req(1, "initialize", init_params()));
    let sid = s
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let _ = s.body();
    let post = |body: &str| {
        let (status, answer) = http(
            &play.url,
            "POST",
            &post_headers(&[("Mcp-Session-Id", &sid)]),
            body.as_bytes(),
        );
        let v: Value = serde_json::from_slice(&answer)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&answer)));
        (status, v)
    };
    let (status, v) = post("this is not json");
    assert_eq!((status, &v["error"]["code"]), (400, &json!(-32700)), "{v}");
    let (status, v) = post(r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#);
    assert_eq!((status, &v["error"]["code"]), (400, &json!(-32600)), "{v}");
    assert_contains(v["error"]["message"].as_str().unwrap(), "batches");
    let (status, v) = post("2.50");
    assert_eq!((status, &v["error"]["code"]), (400, &json!(-32600)), "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    // The session goes on.
    let (status, v) = post(&req(7, "tools/call", add_params(2, 3)).to_string());
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, with_id(&demo.step("add").1, json!(7)));
    let stderr = play.stop();
    assert_contains(&stderr, "mcptape play: Parse error: a POST of 16 bytes");
    assert_contains(&stderr, "rejected 3 unusable client lines");
}

#[test]
fn sixteen_mib_exchanges_play_back_intact() {
    use crate::record::{big_request, big_response, big_session};
    let dir = tmp();
    big_session(dir.path(), &[]);
    let mut c = play(&dir.path().join("t.jsonl"), &[]);
    // The second recorded call first, under another id: matched by its 16 MiB params.
    let mut asked: Value = serde_json::from_slice(&big_request(2)).unwrap();
    asked["id"] = json!("big");
    let mut line = serde_json::to_vec(&asked).unwrap();
    line.push(b'\n');
    c.send_raw(&line);
    let got = c
        .recv_raw(Duration::from_secs(120))
        .expect("a 16 MiB answer");
    let want =
        String::from_utf8(big_response(2))
            .unwrap()
            .replacen("\"id\":2", "\"id\":\"big\"", 1);
    assert!(
        got == want.as_bytes(),
        "served intact with the client's id ({} bytes)",
        got.len()
    );
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        "served 1, missed 0, drifted 0; 1 recorded exchange never used",
    );
}

#[test]
fn a_request_the_recorded_server_never_answered_gets_an_error_not_silence() {
    let (_dir, tape) = tmp_tape("crash.jsonl");
    // The server reads one request and dies without answering.
    let mut rec = record_sh(&tape, "read -r l; exit 5");
    rec.send(&req(
        1,
        "tools/call",
        json!({"name": "boom", "arguments": {}}),
    ));
    let (status, _) = rec.finish();
    assert_eq!(status.code(), Some(5));

    let mut c = play(&tape, &[]);
    let (answer, _) = c.ask(&req(
        "x",
        "tools/call",
        json!({"name": "boom", "arguments": {}}),
    ));
    assert_eq!(answer["id"], json!("x"));
    assert_eq!(answer["error"]["code"], json!(-32099));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_contains(message, "never answered this request");
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "unanswered on the tape 1");
}

#[test]
fn a_client_that_closes_while_a_server_request_waits_ends_play_at_once() {
    // Regression: the waiter for the client's answer was registered after the main loop had
    // dropped all waiters, so play sat out the whole --answer-timeout (here an hour: the
    // harness's 30 s limit fails the test instead).
    let (_dir, tape) = tmp_tape("s.jsonl");
    write_tape(
        &tape,
        &[
            (
                "c2s",
                req(1, "tools/call", json!({"name": "ask", "arguments": {}})),
            ),
            (
                "s2c",
                req(
                    0,
                    "sampling/createMessage",
                    json!({"messages": [], "maxTokens": 5}),
                ),
            ),
            (
                "c2s",
                json!({"jsonrpc": "2.0", "id": 0, "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}}),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "done"}]}}),
            ),
        ],
        true,
    );
    let mut c = play(&tape, &["--answer-timeout", "3600"]);
    c.send(&req(
        7,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    ));
    // Close at once: the exchange's task starts after play has seen the end of input.
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        "did not answer sampling/createMessage (tape line 4) before closing its input",
    );
}

#[test]
fn a_cancelled_request_is_replayed_without_an_error_and_later_notifications_keep_their_place() {
    // Regression: `notifications/cancelled` did not close the exchange, so a later
    // `list_changed` was bundled with the cancelled call and play reported it unanswered.
    let (_dir, tape) = tmp_tape("c.jsonl");
    let slow = req(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    let list = req(2, "tools/list", json!({}));
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    write_tape(
        &tape,
        &[
            ("c2s", slow.clone()),
            (
                "c2s",
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "timeout"}}),
            ),
            ("c2s", list.clone()),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}),
            ),
            ("s2c", changed.clone()),
        ],
        true,
    );
    let mut c = play(&tape, &[]);
    c.send(&slow);
    c.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    );
    let (answer, before) = c.ask(&list);
    assert_eq!(answer["result"], json!({"tools": []}));
    assert!(
        before.is_empty(),
        "nothing comes before the tools/list answer: {before:?}"
    );
    assert_eq!(
        c.recv(),
        changed,
        "the notification follows the answer, as recorded"
    );
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "cancelled by the client in the recording");
}

#[test]
fn a_closed_stderr_does_not_stop_play_from_answering() {
    // Regression: eprintln! panicked on a closed stderr, killing play mid-session.
    let (_dir, tape) = tmp_tape("t.jsonl");
    let list = req(1, "tools/list", json!({}));
    write_tape(
        &tape,
        &[
            ("c2s", list.clone()),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let mut cmd = command(&play_cmd(&tape));
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stderr.take()); // stderr is a closed pipe from the start
    let mut stdin = child.stdin.take().unwrap();
    // A miss writes an explanation to stderr; then a hit must still be answered.
    writeln!(stdin, "{}", req(9, "nope", json!({}))).unwrap();
    writeln!(stdin, "{}", with_id(&list, json!(2))).unwrap();
    drop(stdin);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let status = child.wait().unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[1]["result"], json!({"tools": []}));
    assert_eq!(status.code(), Some(1), "a miss, and no panic (101)");
}

/// `n=I` for plain call I (recorded id I + 1) as the recorded server answered it.
fn plain_answer(i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": i + 1, "result": {"content": [{"type": "text", "text": format!("n={i}")}]}})
}

#[test]
fn pipelined_plain_calls_around_a_server_request_a_miss_and_progress_all_get_their_answers_in_order(
) {
    // Plain calls are answered at once by the reading thread; the exchange with a server
    // request waits for the client as a task, beside them.
    let (_dir, tape) = tmp_tape("mixed.jsonl");
    let plain = |i: usize| {
        (
            req(
                i + 1,
                "tools/call",
                json!({"name": "add", "arguments": {"n": i}}),
            ),
            plain_answer(i),
        )
    };
    let mut msgs: Vec<(&str, Value)> = vec![
        ("c2s", req(0, "initialize", init_params())),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "t", "version": "1"}}}),
        ),
    ];
    for i in 0..100 {
        let (q, a) = plain(i);
        msgs.extend([("c2s", q), ("s2c", a)]);
    }
    let sampling = json!({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}});
    let asked = json!({"name": "ask", "arguments": {"prompt": "hi"}});
    let asked_answer = json!({"jsonrpc": "2.0", "id": 1000, "result": {"content": [{"type": "text", "text": "sampled: yo"}]}});
    let slow = json!({"name": "slow", "arguments": {}, "_meta": {"progressToken": "rec"}});
    let slow_answer = json!({"jsonrpc": "2.0", "id": 1001, "result": {"content": []}});
    msgs.extend([
        ("c2s", req(1000, "tools/call", asked.clone())),
        ("s2c", sampling.clone()),
        ("c2s", sample_answer(&json!(0), "yo")),
        ("s2c", asked_answer.clone()),
        ("c2s", req(1001, "tools/call", slow.clone())),
        ("s2c", json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "rec", "progress": 1}})),
        ("s2c", slow_answer.clone()),
    ]);
    for i in 100..200 {
        let (q, a) = plain(i);
        msgs.extend([("c2s", q), ("s2c", a)]);
    }
    write_tape(&tape, &msgs, true);

    // Everything in one write, the calls out of their recorded order around the slow ones.
    let mut c = play(&tape, &[]);
    let mut batch = vec![req("i", "initialize", init_params())];
    let mut order = vec![json!("i")];
    let mut add = |id: Value, r: Value, batch: &mut Vec<Value>| {
        order.push(id);
        batch.push(r);
    };
    for i in (0..100).rev() {
        let q = req(
            format!("c-{i}"),
            "tools/call",
            json!({"name": "add", "arguments": {"n": i}}),
        );
        add(json!(format!("c-{i}")), q, &mut batch);
    }
    batch.push(req("a", "tools/call", asked));
    add(
        json!("m"),
        req("m", "tools/call", json!({"name": "nope", "arguments": {}})),
        &mut batch,
    );
    let mut slow_asked = slow;
    slow_asked["_meta"]["progressToken"] = json!(77);
    add(json!("p"), req("p", "tools/call", slow_asked), &mut batch);
    for i in 100..200 {
        let q = req(
            format!("c-{i}"),
            "tools/call",
            json!({"name": "add", "arguments": {"n": i}}),
        );
        add(json!(format!("c-{i}")), q, &mut batch);
    }
    let mut bytes = Vec::new();
    for r in &batch {
        bytes.extend(serde_json::to_vec(r).unwrap());
        bytes.push(b'\n');
    }
    c.send_raw(&bytes);

    // The answers, the sampling request answered as it comes; the "ask" answer set aside.
    let mut answered = Vec::new();
    let mut sampled = None;
    let mut asked_got = None;
    while answered.len() < order.len() || asked_got.is_none() {
        let v = c.recv();
        if v["method"] == "sampling/createMessage" {
            assert!(sampled.is_none(), "one sampling request: {v}");
            assert_eq!(v["params"], sampling["params"]);
            c.send(&sample_answer(&v["id"], "yo"));
            sampled = Some(v);
        } else if v["id"] == "a" {
            assert!(
                sampled.is_some(),
                "the answer after the sampling request: {v}"
            );
            asked_got = Some(v);
        } else {
            answered.push(v);
        }
    }
    assert_eq!(asked_got.unwrap(), with_id(&asked_answer, json!("a")));
    // Progress right before its answer, with the client's token; the rest in the asked order.
    let at = answered.iter().position(|v| v["id"] == "p").unwrap();
    assert_eq!(answered[at - 1]["method"], "notifications/progress");
    assert_eq!(answered[at - 1]["params"]["progressToken"], 77);
    answered.remove(at - 1);
    let ids: Vec<&Value> = answered.iter().map(|v| &v["id"]).collect();
    assert_eq!(ids, order.iter().collect::<Vec<_>>());
    for v in &answered {
        let Some(i) = v["id"].as_str().and_then(|s| s.strip_prefix("c-")) else {
            continue;
        };
        let i: usize = i.parse().unwrap();
        assert_eq!(v, &with_id(&plain_answer(i), v["id"].clone()));
    }
    assert_eq!(answered[0]["result"]["serverInfo"]["name"], "t");
    assert_eq!(
        answered[101]["error"]["code"], -32099,
        "the miss: {}",
        answered[101]
    );
    assert_eq!(answered[102], with_id(&slow_answer, json!("p")));

    let (status, stderr) = c.finish();
    assert_eq!(status.code(), Some(1), "the miss fails play: {stderr}");
    assert_contains(
        &stderr,
        "served 203, missed 1, drifted 0; every recorded exchange was used",
    );
}

#[test]
fn a_big_tapes_answers_to_calls_sent_in_one_write_are_each_the_recorded_bytes_in_order() {
    // Over 16 MiB: play reads this tape's answers in chunks and writes them to stdout from
    // there (not read into memory at start-up). Answers of about 5 KiB, asked in one write: in
    // recorded order (one chunk serves many), backwards (each far from the chunk), then in order
    // again from where the chunk is not.
    let (_dir, tape) = tmp_tape("big.jsonl");
    let n = 3500;
    let answer = |i: usize| json!({"jsonrpc": "2.0", "id": i + 1, "result": {"content": [{"type": "text", "text": format!("n={i} {}", "x".repeat(5000 + i % 7))}]}});
    let call = |id: Value, i: usize| {
        req(
            id,
            "tools/call",
            json!({"name": "add", "arguments": {"n": i}}),
        )
    };
    let mut msgs: Vec<(&str, Value)> = vec![
        ("c2s", req(0, "initialize", init_params())),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "t", "version": "1"}}}),
        ),
    ];
    for i in 0..n {
        msgs.extend([("c2s", call(json!(i + 1), i)), ("s2c", answer(i))]);
    }
    write_tape(&tape, &msgs, true);
    let size = std::fs::metadata(&tape).unwrap().len();
    assert!(
        size > 16 << 20,
        "a tape over the preload size: {size} bytes"
    );

    let order: Vec<usize> = (0..1000)
        .chain((2000..3000).rev())
        .chain(1000..2000)
        .chain(3000..n)
        .collect();
    let mut c = play(&tape, &[]);
    let mut bytes = serde_json::to_vec(&req("i", "initialize", init_params())).unwrap();
    bytes.push(b'\n');
    for &i in &order {
        bytes.extend(serde_json::to_vec(&call(json!(format!("c-{i}")), i)).unwrap());
        bytes.push(b'\n');
    }
    c.send_raw(&bytes);
    let init: Value = c.recv();
    assert_eq!(init["id"], "i");
    for &i in &order {
        let got = c.recv_raw(Duration::from_secs(30)).expect("an answer");
        let mut want = serde_json::to_vec(&with_id(&answer(i), json!(format!("c-{i}")))).unwrap();
        want.push(b'\n');
        assert!(
            got == want,
            "call {i}: the recorded bytes with the client's id, got {} bytes, want {}: {}",
            got.len(),
            want.len(),
            String::from_utf8_lossy(&got[got.len().saturating_sub(120)..])
        );
    }
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        &format!(
            "served {}, missed 0, drifted 0; every recorded exchange was used",
            n + 1
        ),
    );
}

/// A pre-2026 tape: `initialize` (2025-06-18), `tools/list`, and a call whose answer holds two
/// redaction markers.
fn pre_2026_tape(tape: &Path) {
    write_tape(
        tape,
        &[
            ("c2s", req(1, "initialize", init_params())),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "old", "version": "1"}}}),
            ),
            (
                "c2s",
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            ),
            ("c2s", req(2, "tools/list", json!({}))),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}),
            ),
            (
                "c2s",
                req(3, "tools/call", json!({"name": "whoami", "arguments": {}})),
            ),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "key [REDACTED:key:api_key:0a1b2c3d], token [REDACTED:bearer]"}]}}),
            ),
        ],
        true,
    );
}

#[test]
fn an_initialize_asking_another_protocol_version_gets_the_recorded_answer_and_one_warning() {
    let (_dir, tape) = tmp_tape("v.jsonl");
    pre_2026_tape(&tape);
    let mut c = play(&tape, &[]);
    let mut params = init_params();
    params["protocolVersion"] = json!("2025-03-26");
    let (answer, _) = c.ask(&req(1, "initialize", params));
    assert_eq!(answer["result"]["protocolVersion"], json!("2025-06-18"));
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let stderr = c.finish_with(0);
    assert_one_version_warning(&stderr, "2025-03-26", "2025-06-18");
}

#[test]
fn a_server_discover_probe_on_a_pre_2026_tape_is_method_not_found_and_no_miss() {
    let (_dir, tape) = tmp_tape("d.jsonl");
    pre_2026_tape(&tape);
    let mut c = play(&tape, &[]);
    let (probe, _) = c.ask(&req(
        0,
        "server/discover",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    ));
    assert_eq!(probe["id"], json!(0));
    assert_eq!(probe["error"]["code"], json!(-32601), "{probe}");
    let (init, _) = c.ask(&req(1, "initialize", init_params()));
    assert_eq!(init["result"]["protocolVersion"], json!("2025-06-18"));
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (list, _) = c.ask(&req(2, "tools/list", json!({})));
    assert_eq!(list["result"], json!({"tools": []}));
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "served 2, missed 0, drifted 0");
    assert_contains(&stderr, "server/discover");
}

#[test]
fn the_summary_counts_the_redaction_markers_served_in_place_of_values() {
    let (_dir, tape) = tmp_tape("m.jsonl");
    pre_2026_tape(&tape);
    let mut c = play(&tape, &[]);
    c.initialize();
    let answer = c.call(7, "tools/call", json!({"name": "whoami", "arguments": {}}));
    assert_contains(&answer.to_string(), "[REDACTED:bearer]");
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        "served 2, missed 0, drifted 0, 2 redaction markers served in place of values",
    );
}

/// Runs `argv` with its stdin a pseudo-terminal, types Ctrl-D (end of input) after a moment, and
/// gives its stderr.
fn on_a_terminal(argv: &[String]) -> String {
    const SCRIPT: &str = r#"
import os, subprocess, sys, time
m, s = os.openpty()
p = subprocess.Popen(sys.argv[1:], stdin=s, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
os.close(s)
time.sleep(1.0)
os.write(m, b"\x04")
_, err = p.communicate(timeout=20)
sys.stdout.write(err.decode())
"#;
    let mut cmd = std::process::Command::new(python());
    cmd.arg("-c").arg(SCRIPT).args(argv);
    let out = run_with_timeout(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn play_and_record_started_by_hand_in_a_terminal_say_they_wait_for_an_mcp_client() {
    let (dir, tape) = tmp_tape("t.jsonl");
    pre_2026_tape(&tape);
    let hint = "waiting for an MCP client on stdin";
    let stderr = on_a_terminal(&[s(bin()), "play".into(), s(&tape)]);
    assert_contains(&stderr, &format!("mcptape play: {hint}"));
    assert_contains(
        &stderr,
        "normally started by an MCP client, from the server command in its config",
    );
    let rec = dir.path().join("r.jsonl");
    let stderr = on_a_terminal(&[
        s(bin()),
        "record".into(),
        "--tape".into(),
        s(&rec),
        "--".into(),
        "cat".into(),
    ]);
    assert_contains(&stderr, &format!("mcptape record: {hint}"));
    // Started by a client (stdin a pipe): no such line.
    let mut c = play(&tape, &[]);
    c.initialize();
    let stderr = c.finish_with(0);
    assert!(!stderr.contains(hint), "{stderr}");
}

/// The Python SDK's `auto` mode probes `server/discover` first: against a tape of a pre-2026
/// server (recorded in `legacy` mode, so no probe on it) play answers -32601 as that server
/// would, the client falls back to `initialize`, and play exits 0.
#[test]
fn python_client_auto_mode_plays_a_tape_recorded_without_the_probe() {
    let (dir, tape) = tmp_tape("everything.jsonl");
    let (_, out) = py_client(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !std::fs::read_to_string(&tape)
            .unwrap()
            .contains("server/discover"),
        "the legacy recording has no probe"
    );
    let (rc, err) = (dir.path().join("rc"), dir.path().join("err"));
    let (transcript, out) = py_client(
        "everything",
        "auto",
        &play_reporting(&tape, &rc, Some(&err)),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(transcript["protocolVersion"], "2025-11-25");
    assert_eq!(reported_status(&rc), 0);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_contains(&stderr, "missed 0");
    assert_contains(&stderr, "answered 1 server/discover probe");
}

/// A tape recorded by a client pinned to 2026-07-28 has no `server/discover` (the client did
/// not probe) and no `initialize`: every request on it is of the 2026 era. Played to the Python
/// SDK's `auto` client, which probes first, the probe must be answered as the 2026 server would
/// (a discover result), not with the pre-2026 -32601 that sent the client to an `initialize` the
/// tape cannot answer. The run is the one the client has against the real server.
#[test]
fn python_client_auto_mode_plays_a_2026_tape_recorded_without_the_probe() {
    let (dir, tape) = tmp_tape("modern.jsonl");
    let (recorded, out) = py_client(
        "pyserver",
        "2026-07-28",
        &record_cmd(&tape, &py_server()),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let taped = std::fs::read_to_string(&tape).unwrap();
    assert!(
        !taped.contains("server/discover") && !taped.contains("\"initialize\""),
        "the pinned 2026 recording has neither a probe nor a handshake"
    );
    let (direct, out) = py_client("pyserver", "auto", &py_server(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (rc, err) = (dir.path().join("rc"), dir.path().join("err"));
    let (played, out) = py_client(
        "pyserver",
        "auto",
        &play_reporting(&tape, &rc, Some(&err)),
        &[],
    );
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stderr));
    assert_eq!(reported_status(&rc), 0, "{stderr}");
    assert_eq!(played["protocolVersion"], direct["protocolVersion"]);
    assert_eq!(played["serverInfo"], direct["serverInfo"]);
    assert_eq!(
        played["steps"], recorded["steps"],
        "the calls got their recorded answers"
    );
    assert_contains(&stderr, "missed 0");
    assert!(!stderr.contains("predates"), "{stderr}");
    assert_contains(
        &stderr,
        "answered 1 server/discover probe from the tape's 2026-07-28 exchanges",
    );
}

/// The probe's answer on a 2026 tape without one: the recorded versions, capabilities for the
/// calls recorded and the recorded server info. An `initialize` there is a miss that shows the
/// params the client sent (not `null`).
#[test]
fn a_server_discover_probe_on_a_2026_tape_is_answered_from_the_tape() {
    let (_dir, tape) = tmp_tape("m.jsonl");
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    write_tape(
        &tape,
        &[
            ("c2s", req(1, "tools/list", json!({"_meta": meta}))),
            (
                "s2c",
                json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "new", "version": "2"}}}}),
            ),
        ],
        true,
    );
    let mut c = play(&tape, &[]);
    let (probe, _) = c.ask(&req(0, "server/discover", json!({"_meta": meta})));
    let result = &probe["result"];
    assert_eq!(
        result["supportedVersions"],
        json!(["2026-07-28"]),
        "{probe}"
    );
    assert_eq!(result["capabilities"], json!({"tools": {}}));
    assert_eq!(result["resultType"], json!("complete"));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"],
        json!({"name": "new", "version": "2"})
    );
    let (init, _) = c.ask(&req(1, "initialize", init_params()));
    let message = init["error"]["message"].as_str().unwrap_or_default();
    assert_contains(message, r#"initialize {"capabilities":{},"clientInfo""#);
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        "answered 1 server/discover probe from the tape's 2026-07-28 exchanges",
    );
}

/// Real traffic: rmcp and other new clients ask for 2026-07-28 and server-everything answers
/// 2025-11-25. Playing that tape to a client that asks what the recorded client asked is no
/// surprise and gets no warning; a client asking another version does.
#[test]
fn the_protocol_version_warning_compares_with_what_the_recorded_client_asked() {
    let (_dir, tape) = tmp_tape("asked.jsonl");
    let mut init = init_params();
    init["protocolVersion"] = json!("2026-07-28");
    let mut c = LineClient::spawn(&record_cmd(&tape, &everything()));
    let answer = c.call(0, "initialize", init.clone());
    let answered = answer["result"]["protocolVersion"].clone();
    assert_ne!(answered, json!("2026-07-28"), "{answer}");
    c.close_stdin();
    c.finish();

    let mut c = play(&tape, &[]);
    c.call(0, "initialize", init.clone());
    let stderr = c.finish_with(0);
    assert!(!stderr.contains("protocol version"), "{stderr}");

    let mut c = play(&tape, &[]);
    init["protocolVersion"] = json!("2025-03-26");
    c.call(0, "initialize", init);
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        &format!(
            "the client asked for protocol version 2025-03-26, the tape answers {} (the recorded client asked for 2026-07-28;",
            answered.as_str().unwrap()
        ),
    );
}

/// A client that declares roots, is asked `roots/list` by server-everything, never answers it
/// and calls echo: the same session against play (the MCP Inspector's CLI is such a client: it
/// leaves before answering). Returns the client's echo answer and, for play, its stderr.
fn unanswered_roots_session(mut c: LineClient) -> (Value, LineClient) {
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": true}}, "clientInfo": {"name": "it", "version": "1"}});
    c.call(0, "initialize", init);
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    while c.recv()["method"] != "roots/list" {}
    let echo = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    );
    (echo, c)
}

/// A server request the recorded client never answered, unanswered again in play, is what was
/// recorded, not drift: play exits 0 (it said "drift: the client did not answer roots/list" and
/// exited 1, which made every Inspector CLI session against play a failure).
#[test]
fn a_server_request_unanswered_in_the_recording_and_in_play_is_no_drift() {
    let (_dir, tape) = tmp_tape("roots.jsonl");
    let (recorded, c) =
        unanswered_roots_session(LineClient::spawn(&record_cmd(&tape, &everything())));
    // server-everything, still waiting for its roots, outlives the grace period: SIGTERM (143).
    c.finish();
    let lines = tape_lines(&tape);
    let roots = position(&lines, "roots/list", |l| l["method"] == "roots/list");
    assert!(
        !lines
            .iter()
            .any(|l| l["dir"] == "c2s" && l["id"] == lines[roots]["id"] && l["kind"] == "response"),
        "the recorded client did not answer roots/list"
    );
    let (played, c) = unanswered_roots_session(play(&tape, &[]));
    assert_eq!(played["result"], recorded["result"]);
    let stderr = c.finish_with(0);
    assert!(!stderr.contains("drift:"), "{stderr}");
    assert_contains(&stderr, "served 2, missed 0, drifted 0");
}

/// Answers every `tools/call` with a text of 5,000 bytes; other requests get `{}`.
const BIG_ANSWERS: &str = r##"
for m in requests():
    r = {}
    if m["method"] == "tools/call":
        r = {"content": [{"type": "text", "text": "A" * 5000}]}
    send({"jsonrpc": "2.0", "id": m["id"], "result": r})
"##;

/// Recorded with `--max-message 2000`: a call whose request is over the limit, and one whose
/// answer is. Both lines are taped as `oversize` (length and first bytes only): play says the
/// recorded message was too large to record, naming its size, the limit and the request, rather
/// than that the server never answered or that an unrelated call is the nearest.
#[test]
fn an_exchange_too_large_to_record_is_said_to_be_so_in_play() {
    let (_dir, tape) = tmp_tape("big.jsonl");
    let big = json!({"name": "big", "arguments": {"q": "b".repeat(3000)}});
    let small = json!({"name": "small", "arguments": {}});
    let mut rec = record(&tape, &["--max-message", "2000"], &line_server(BIG_ANSWERS));
    rec.initialize();
    rec.call(1, "tools/call", big.clone());
    rec.call(2, "tools/call", small.clone());
    let (status, _) = rec.finish();
    assert!(status.success());
    let kinds: Vec<Value> = tape_lines(&tape)
        .iter()
        .map(|l| l["kind"].clone())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "oversize").count(),
        3,
        "the big request and both answers are oversize: {kinds:?}"
    );

    let mut c = play(&tape, &[]);
    c.initialize();
    let answer = c.call(7, "tools/call", small);
    assert_eq!(answer["error"]["code"], json!(-32099), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_contains(message, "too large to record");
    assert_contains(message, "--max-message");
    assert_contains(message, "bytes");
    assert!(!message.contains("never answered"), "{message}");

    let answer = c.call(8, "tools/call", big);
    assert_eq!(answer["error"]["code"], json!(-32099), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_contains(message, "too large to record");
    assert_contains(message, "--max-message");
    assert_contains(message, "request id 1");
    assert!(!message.contains("nearest"), "{message}");
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "request id 7: the recorded answer");
    assert_contains(&stderr, "too large to record");
    assert!(!stderr.contains("never answered"), "{stderr}");
    assert!(!stderr.contains("nearest recorded call"), "{stderr}");
}

/// Answers a request with `{}` and a batch with an array of `{}` answers, one per request in it.
const BATCH_ANSWERS: &str = r##"
for m in messages():
    if isinstance(m, list):
        send([{"jsonrpc": "2.0", "id": x["id"], "result": {}} for x in m if "id" in x])
    elif "id" in m and "method" in m:
        send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
"##;

/// A 2025-03-26 session where the client sent a batch and the server answered with an array.
/// Play does not serve batches: a batch gets -32600 and nothing else, and the recorded array
/// answer is never sent on its own — not after the -32600, not to a client that sends no batch.
#[test]
fn a_recorded_batch_answer_is_never_sent_unasked() {
    let (_dir, tape) = tmp_tape("batch.jsonl");
    let batch = br#"[{"jsonrpc":"2.0","id":10,"method":"tools/list"},{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"x","arguments":{}}}]"#;
    let mut rec = record(&tape, &[], &line_server(BATCH_ANSWERS));
    rec.initialize();
    rec.send_raw(&[&batch[..], b"\n"].concat());
    let answer = rec.recv();
    assert!(answer.is_array(), "the server answered the batch: {answer}");
    rec.call(1, "tools/list", json!({}));
    let (status, _) = rec.finish();
    assert!(status.success());

    // A client that sends the batch: one -32600, then the next answer is the next call's.
    let mut c = play(&tape, &[]);
    c.initialize();
    c.send_raw(&[&batch[..], b"\n"].concat());
    let refused = c.recv();
    assert_eq!(refused["error"]["code"], json!(-32600), "{refused}");
    let (list, before) = c.ask(&req(1, "tools/list", json!({})));
    assert_eq!(list["result"], json!({}));
    assert!(before.is_empty(), "nothing unasked: {before:?}");
    c.close_stdin();
    assert!(
        c.recv_raw(Duration::from_secs(10)).is_none(),
        "nothing after the last answer"
    );
    c.finish_with(0);

    // A client that never sends a batch gets nothing it did not ask for.
    let mut c = play(&tape, &[]);
    c.initialize();
    let (_, before) = c.ask(&req(1, "tools/list", json!({})));
    assert!(before.is_empty(), "nothing unasked: {before:?}");
    c.close_stdin();
    assert!(
        c.recv_raw(Duration::from_secs(10)).is_none(),
        "nothing after the last answer"
    );
    let stderr = c.finish_with(0);
    assert_contains(&stderr, "served 2, missed 0");
}

/// A stdio server that frames its lines as it likes: a banner (not JSON) and some answers end
/// in `\r\n`, one answer has spaces and a tab around its JSON, a notification during a call
/// ends in `\r\n`. Every line is written as raw bytes.
const RAW_FRAMING: &str = r##"
out = sys.stdout.buffer
def put(b):
    out.write(b)
    out.flush()
put(b"starting up\r\n")
for m in requests():
    i = json.dumps(m["id"]).encode()
    method = m["method"]
    if method == "initialize":
        put(b'{"jsonrpc":"2.0","id":' + i + b',"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}}\r\n')
    elif method == "tools/list":
        put(b'  \t{"jsonrpc":"2.0","id":' + i + b',"result":{"tools":[]}} \t \r\n')
    elif method == "tools/call":
        put(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\r\n')
        put(b'{"jsonrpc":"2.0", "id": ' + i + b' ,"result":{"content":[]}}\t\n')
    else:
        put(b'{"jsonrpc":"2.0","id":' + i + b',"error":{"code":-32601,"message":"no"}}  \r\r\n')
"##;

/// The raw lines a client gets from `server` for a fixed session (terminators included).
fn raw_framing_session(mut c: LineClient) -> (Vec<Vec<u8>>, LineClient) {
    let line = |c: &mut LineClient| {
        c.recv_raw(Duration::from_secs(30))
            .expect("a line within 30 s")
    };
    let mut got = vec![line(&mut c)]; // the banner
    c.send(&req(0, "initialize", init_params()));
    got.push(line(&mut c));
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, method, lines) in [(1, "tools/list", 1), (2, "tools/call", 2), (3, "nope", 1)] {
        c.send(&req(id, method, json!({"name": "x"})));
        for _ in 0..lines {
            got.push(line(&mut c));
        }
    }
    (got, c)
}

/// Play over stdio writes each recorded line back as the server wrote it: its `\r\n`, and the
/// whitespace around its JSON, which the tape holds (`crlf`, and `msg` spliced in verbatim).
/// Answers served at once and answers served by a task (`--latency`) alike.
#[test]
fn play_over_stdio_writes_each_recorded_line_with_its_own_whitespace_and_terminator() {
    let (_dir, tape) = tmp_tape("framing.jsonl");
    let server = line_server(RAW_FRAMING);
    let (direct, c) = raw_framing_session(LineClient::spawn(&server));
    c.finish_with(0);
    assert!(direct[0].ends_with(b"\r\n") && direct[2].starts_with(b"  \t"));
    let (recorded, c) = raw_framing_session(record(&tape, &[], &server));
    c.finish_with(0);
    assert_eq!(recorded, direct, "record forwards every byte");
    let lists = tape_msgs(&tape);
    assert!(
        lists.iter().any(|l| l["crlf"] == true),
        "the tape says which lines ended in CRLF: {lists:?}"
    );
    for flags in [&[][..], &["--latency", "1ms"][..]] {
        let (played, c) = raw_framing_session(play(&tape, flags));
        c.finish_with(0);
        for (i, (p, d)) in played.iter().zip(&direct).enumerate() {
            assert_eq!(
                text(p),
                text(d),
                "line {i} with {flags:?}: play writes the recorded line's bytes"
            );
        }
        assert_eq!(played.len(), direct.len());
    }
}

/// A stdio server that answers what it cannot take as JSON-RPC errors with `"id": null`, as
/// JSON-RPC has it (the reference SDKs say nothing instead): `-32700` for a line that is not
/// JSON, `-32600` for JSON that is no request, and for a request whose id is not a string or a
/// number (`null` too). Requests get their method back.
const ID_NULL_ERRORS: &str = r##"
import sys, json
def send(s):
    sys.stdout.write(s + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        send('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error (recorded)"}}')
        continue
    if not isinstance(m, dict) or "method" not in m:
        send('{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request (recorded)"}}')
        continue
    if "id" not in m:
        continue
    i = m["id"]
    if isinstance(i, bool) or not isinstance(i, (str, int, float)):
        send('{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid id (recorded)"}}')
        continue
    send(json.dumps({"jsonrpc": "2.0", "id": i, "result": {"method": m["method"]}}))
"##;

/// Bad lines a client sends: not JSON, not a message, a request with an object id, one with a
/// `null` id.
const BAD_LINES: [&str; 4] = [
    "this is not json",
    "42",
    r#"{"jsonrpc":"2.0","id":{"k":1},"method":"tools/list"}"#,
    r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
];

/// The recorded server's answers to bad client lines (errors with `"id": null`) are served
/// again when a client sends the same lines in play, in any order; a bad line the tape does
/// not hold gets play's own error.
#[test]
fn the_recorded_answer_to_a_bad_line_is_served_for_the_same_line() {
    let (_dir, tape) = tmp_tape("bad.jsonl");
    let mut c = record(&tape, &[], &line_server(ID_NULL_ERRORS));
    let mut recorded = Vec::new();
    for (i, bad) in BAD_LINES.iter().enumerate() {
        c.send_raw(format!("{bad}\n").as_bytes());
        recorded.push(text(
            &c.recv_raw(Duration::from_secs(30)).expect("an answer"),
        ));
        // A plain call between them: its answer is its own.
        let v = c.call(i as i64, "tools/call", json!({"name": "x"}));
        assert_eq!(v["result"]["method"], "tools/call", "{v}");
    }
    c.finish_with(0);
    assert!(
        recorded[0].contains("Parse error (recorded)"),
        "{recorded:?}"
    );
    assert!(
        recorded[3].contains("Invalid id (recorded)"),
        "{recorded:?}"
    );

    let mut p = play(&tape, &[]);
    // Backwards: each bad line gets the answer recorded for it.
    for (i, bad) in BAD_LINES.iter().enumerate().rev() {
        p.send_raw(format!("{bad}\n").as_bytes());
        let got = text(&p.recv_raw(Duration::from_secs(30)).expect("an answer"));
        assert_eq!(got, recorded[i], "the recorded answer to {bad}");
    }
    for i in 0..BAD_LINES.len() as i64 {
        let v = p.call(i, "tools/call", json!({"name": "x"}));
        assert_eq!(v["result"]["method"], "tools/call", "{v}");
    }
    // Again, or another bad line: not on the tape (any more), so play's own error.
    p.send_raw(b"this is not json\n");
    let again = p.recv();
    assert_eq!(again["error"]["code"], -32700, "{again}");
    assert_eq!(again["id"], Value::Null, "{again}");
    assert!(!again.to_string().contains("(recorded)"), "{again}");
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":{\"k\":2},\"method\":\"tools/list\"}\n");
    let other = p.recv();
    assert_eq!(other["error"]["code"], -32600, "{other}");
    let stderr = p.finish_with(0);
    assert_contains(&stderr, "served 4, missed 0");
}

/// A request whose id is not a string or a number (an object, an array, `true`, `null`) is no
/// request MCP allows: play answers `-32600` with `"id": null`, as JSON-RPC asks of a server,
/// rather than serving a recorded answer with that id, or dropping it as a notification and
/// leaving the client waiting. (Over stdio the reference SDKs' servers say nothing at all.)
#[test]
fn a_request_whose_id_is_no_string_or_number_gets_invalid_request() {
    let (_dir, tape) = tmp_tape("ids.jsonl");
    let mut c = record(&tape, &[], &line_server(COUNTER));
    c.call(1, "tools/list", json!({}));
    c.finish_with(0);
    let mut p = play(&tape, &[]);
    for id in [json!({"k": 1}), json!([1]), json!(true), Value::Null] {
        p.send(&req(id.clone(), "tools/list", json!({})));
        let v = p.recv();
        assert_eq!(v["error"]["code"], -32600, "id {id}: {v}");
        assert_eq!(v["id"], Value::Null, "id {id}: {v}");
        assert_contains(v["error"]["message"].as_str().unwrap(), "id");
    }
    // The recorded exchange is still there for a proper request.
    let v = p.call(7, "tools/list", json!({}));
    assert_eq!(v["result"], json!({}), "{v}");
    let stderr = p.finish_with(0);
    assert_contains(&stderr, "served 1, missed 0");
}
