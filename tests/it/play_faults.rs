//! `play --pace`, `--latency`, `--faults`, `--seed`: a tape recorded from the Python SDK fixture
//! server by the official Python SDK client, played back to that client over stdio and over
//! HTTP, and what the client sees of each call (tests/peers/py_faults.py): the recorded
//! latencies, the delays, the injected errors, stalls, skipped sampling requests and cut
//! connections.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The recorded `slow_echo` sleeps this long: long enough that an unpaced answer from memory
/// comes sooner even on a machine loaded far past its cores (an unpaced call was seen to take
/// 400 ms at a load average of 80 on 2 cores).
const SLOW_MS: u64 = 1000;

fn add() -> Value {
    json!({"tool": "add", "args": {"a": 2, "b": 3}})
}

fn echo(text: &str) -> Value {
    json!({"tool": "echo", "args": {"text": text}, "timeout": 5})
}

fn slow() -> Value {
    json!({"tool": "slow_echo", "args": {"text": "later", "delay_ms": SLOW_MS}})
}

fn ask() -> Value {
    json!({"tool": "ask_llm", "args": {"topic": "tapes"}})
}

/// Records `steps` made by the Python client against py_server.py through `mcptape record`.
fn record_steps(steps: &Value) -> (tempfile::TempDir, PathBuf) {
    let (dir, tape) = tmp_tape("faults.jsonl");
    let seen = py_faults(steps, &record_cmd(&tape, &py_server()));
    for s in flat(&seen) {
        assert_eq!(s["outcome"], "result", "recording: {}", pretty(&seen));
    }
    (dir, tape)
}

/// The recording every test but the seeded one plays: add, echo, slow_echo (SLOW_MS), ask_llm
/// (one sampling request).
fn recorded() -> (tempfile::TempDir, PathBuf) {
    record_steps(&json!([add(), echo("hi"), slow(), ask()]))
}

/// Every call's outcome, steps made at once flattened in order.
fn flat(doc: &Value) -> Vec<Value> {
    doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .flat_map(|s| match s {
            Value::Array(a) => a.clone(),
            one => vec![one.clone()],
        })
        .collect()
}

fn call<'a>(calls: &'a [Value], tool: &str) -> &'a Value {
    calls
        .iter()
        .find(|c| c["tool"] == tool)
        .unwrap_or_else(|| panic!("no call of {tool}: {calls:#?}"))
}

fn ms(c: &Value) -> u64 {
    c["ms"].as_u64().unwrap_or_else(|| panic!("no time: {c}"))
}

/// Plays `tape` with `flags` to the Python client making `steps`, over stdio: what the client
/// saw, play's exit status and its stderr.
fn over_stdio(tape: &Path, flags: &[&str], steps: &Value) -> (Vec<Value>, i32, String) {
    let dir = tmp();
    let (rc, err) = (dir.path().join("rc"), dir.path().join("err"));
    let seen = py_faults(steps, &play_reporting_with(tape, flags, &rc, Some(&err)));
    let status = reported_status(&rc);
    (
        flat(&seen),
        status,
        std::fs::read_to_string(&err).unwrap_or_default(),
    )
}

/// The same over `play --listen` (stopped with SIGINT, which must exit 0): what the client saw
/// and play's stderr.
fn over_http(tape: &Path, flags: &[&str], steps: &Value) -> (Vec<Value>, String) {
    let play = Served::play_with(tape, flags);
    let seen = py_faults(steps, std::slice::from_ref(&play.url));
    (flat(&seen), play.stop())
}

#[test]
fn the_tape_holds_the_recorded_latency_pace_replays_it_scaled_and_a_slow_call_holds_no_fast_one_back(
) {
    let (_dir, tape) = recorded();
    // What the tape says the slow call took (request read → answer read, at the recorder).
    let msgs = tape_msgs(&tape);
    let at = |pred: &dyn Fn(&Value) -> bool| {
        msgs.iter().find(|m| pred(m)).expect("on the tape")["t_us"]
            .as_u64()
            .expect("t_us")
    };
    let asked = at(&|m| m["dir"] == "c2s" && m["msg"]["params"]["name"] == "slow_echo");
    let id = msgs
        .iter()
        .find(|m| m["dir"] == "c2s" && m["msg"]["params"]["name"] == "slow_echo")
        .expect("slow_echo")["id"]
        .clone();
    let answered = at(&|m| m["dir"] == "s2c" && m["id"] == id && m["kind"] == "response");
    assert!(
        answered - asked >= SLOW_MS * 1000,
        "recorded {} µs",
        answered - asked
    );

    // The slow call and a fast one at once.
    let together = json!([[slow(), add()]]);
    let (calls, status, err) = over_stdio(&tape, &["--pace", "recorded"], &together);
    assert_eq!(status, 0, "{err}");
    assert_contains(&err, "mcptape play: paced as recorded");
    let (s, a) = (ms(call(&calls, "slow_echo")), ms(call(&calls, "add")));
    assert!(s >= SLOW_MS, "paced slow_echo took {s} ms");
    assert!(
        a < s,
        "the fast call waited for the slow one: add {a} ms, slow_echo {s} ms"
    );

    let (calls, err) = over_http(&tape, &["--pace", "recorded"], &together);
    let (s, a) = (ms(call(&calls, "slow_echo")), ms(call(&calls, "add")));
    assert!(
        s >= SLOW_MS,
        "paced over HTTP, slow_echo took {s} ms; {err}"
    );
    assert!(a < s, "over HTTP, add {a} ms, slow_echo {s} ms");

    // Half the recorded time, and unpaced: served from memory, far sooner.
    let (calls, _, _) = over_stdio(&tape, &["--pace", "0.5"], &json!([slow()]));
    let half = ms(&calls[0]);
    assert!(half >= SLOW_MS / 2, "--pace 0.5: {half} ms");
    let (calls, _, _) = over_stdio(&tape, &[], &json!([slow()]));
    let unpaced = ms(&calls[0]);
    assert!(
        unpaced < SLOW_MS,
        "unpaced {unpaced} ms, recorded {SLOW_MS} ms"
    );
}

#[test]
fn latency_adds_a_delay_from_its_range_to_every_answer() {
    let (_dir, tape) = recorded();
    let steps = json!([add(), echo("hi"), ask()]);
    let flags = ["--latency", "200ms..400ms", "--seed", "5"];
    let (calls, status, err) = over_stdio(&tape, &flags, &steps);
    assert_eq!(status, 0, "{err}");
    for c in &calls {
        assert_eq!(c["outcome"], "result", "{c}");
        assert!(ms(c) >= 200, "{c}");
    }
    assert_contains(
        &err,
        "mcptape play: latency 200ms..400ms added to every answer; seed 5 (--seed 5 repeats these choices)",
    );
    let (calls, _) = over_http(&tape, &flags, &steps);
    assert!(calls.iter().all(|c| ms(c) >= 200), "{calls:#?}");
}

/// Each fault kind as the client sees it; the same over stdio and HTTP but for the cut.
fn check_faults(calls: &[Value], err: &str) {
    let a = call(calls, "add");
    assert_eq!(
        (&a["outcome"], &a["code"]),
        (&json!("error"), &json!(-32603)),
        "{a}"
    );
    assert_contains(
        a["message"].as_str().unwrap_or_default(),
        "fault injected on purpose (--faults error=-32603@tool:add)",
    );
    let stalled = &calls[1];
    assert_eq!(stalled["outcome"], "timeout", "{stalled}");
    let late = &calls[2];
    assert_eq!(late["outcome"], "result", "{late}");
    assert!(
        ms(late) >= 500,
        "stall=500ms answered after {} ms",
        ms(late)
    );
    let asked = call(calls, "ask_llm");
    assert_eq!(
        (&asked["outcome"], &asked["sampled"]),
        (&json!("result"), &json!(0)),
        "the sampling request was skipped: {asked}"
    );
    assert_contains(err, "injected 4 faults on purpose");
    for line in [
        "tools/call add {\"a\":2,\"b\":3}: error=-32603@tool:add (request id",
        "tools/call echo {\"text\":\"hi\"}: stall@tool:echo (request id",
        "tools/call echo {\"text\":\"hi\"}: stall=500ms@tool:echo@after:5 (request id",
        "sampling/createMessage: skip@method:sampling/createMessage",
    ] {
        assert_contains(err, line);
    }
    assert_contains(err, "missed 0, drifted 0");
}

#[test]
fn each_fault_kind_is_the_error_timeout_or_missing_request_the_python_client_sees() {
    // Two echo calls: the first (the client's message 5: initialize, initialized, tools/list
    // and add come first) stalls for ever, the second (after it) 500 ms. The first fault
    // that applies wins.
    let (_dir, tape) = record_steps(&json!([add(), echo("hi"), echo("hi"), ask()]));
    let faults = "error=-32603@tool:add,stall=500ms@tool:echo@after:5,stall@tool:echo,skip@method:sampling/createMessage";
    let mut echo_once = echo("hi");
    echo_once["timeout"] = json!(2);
    let steps = json!([add(), echo_once, echo("hi"), ask()]);
    let (calls, status, err) = over_stdio(&tape, &["--faults", faults], &steps);
    check_faults(&calls, &err);
    assert_eq!(status, 0, "faults on purpose are not misses: {err}");
    let (calls, err) = over_http(&tape, &["--faults", faults], &steps);
    check_faults(&calls, &err);
}

#[test]
fn a_drop_cuts_the_connection_over_stdio_with_status_75_and_ends_the_http_session() {
    let (_dir, tape) = recorded();
    let steps = json!([add(), echo("hi"), slow()]);
    let flags = ["--faults", "drop@tool:echo"];
    let (calls, status, err) = over_stdio(&tape, &flags, &steps);
    assert_eq!(call(&calls, "add")["outcome"], "result");
    let cut = call(&calls, "echo");
    assert_eq!(cut["outcome"], "disconnected", "{cut}");
    assert_eq!(call(&calls, "slow_echo")["outcome"], "disconnected");
    assert_eq!(status, 75, "{err}");
    assert_contains(
        &err,
        "injected 1 fault on purpose, the connection cut on purpose (--faults drop)",
    );
    assert_contains(&err, "tools/call echo {\"text\":\"hi\"}: drop@tool:echo");

    // After N messages: initialize, initialized and tools/list are the client's first 3; add,
    // its 4th, is cut.
    let (calls, status, _) = over_stdio(&tape, &["--faults", "drop@after:3"], &steps);
    assert_eq!(call(&calls, "add")["outcome"], "disconnected", "{calls:#?}");
    assert_eq!(status, 75);

    let (calls, err) = over_http(&tape, &flags, &steps);
    assert_eq!(call(&calls, "add")["outcome"], "result");
    let cut = call(&calls, "echo");
    assert_eq!(cut["outcome"], "disconnected", "{cut}");
    assert_contains(
        cut["message"].as_str().unwrap_or_default(),
        "Server disconnected without sending a response",
    );
    assert_contains(&err, "the connection cut on purpose (--faults drop)");
}

/// Which of the calls (by position) got an error.
fn failed(calls: &[Value]) -> Vec<usize> {
    (0..calls.len())
        .filter(|&i| calls[i]["outcome"] == "error")
        .collect()
}

#[test]
fn the_same_seed_fails_the_same_calls_and_an_unseeded_run_prints_the_seed_that_repeats_it() {
    let steps: Vec<Value> = (0..16).map(|i| echo(&format!("call {i}"))).collect();
    let steps = Value::Array(steps);
    let (_dir, tape) = record_steps(&steps);
    let share = ["--faults", "error=-32000@50%"];
    let run = |extra: &[&str]| {
        let flags: Vec<&str> = share.iter().chain(extra).copied().collect();
        let (calls, status, err) = over_stdio(&tape, &flags, &steps);
        assert_eq!(status, 0, "{err}");
        (failed(&calls), err)
    };
    let (first, _) = run(&["--seed", "7"]);
    let (again, _) = run(&["--seed", "7"]);
    assert_eq!(first, again, "same seed, same faults");
    assert!(!first.is_empty() && first.len() < 16, "{first:?}");
    let (other, _) = run(&["--seed", "8"]);
    assert_ne!(first, other, "another seed chooses other calls");
    // Over HTTP, the same seed fails the same calls as over stdio.
    let (calls, _) = over_http(
        &tape,
        &["--faults", "error=-32000@50%", "--seed", "7"],
        &steps,
    );
    assert_eq!(first, failed(&calls), "over HTTP: {calls:#?}");

    let (unseeded, err) = run(&[]);
    let seed = regex::Regex::new(r"--seed (\d+) repeats these choices")
        .unwrap()
        .captures(&err)
        .unwrap_or_else(|| panic!("no seed printed: {err}"))[1]
        .to_string();
    let (repeated, _) = run(&["--seed", &seed]);
    assert_eq!(
        unseeded, repeated,
        "the printed seed {seed} repeats the run"
    );
}

#[test]
fn a_bad_fault_pace_or_latency_is_a_usage_error_that_names_it() {
    let (_dir, tape) = tmp_tape("none.jsonl");
    for (flags, says) in [
        (
            ["--faults", "error=-32603@tool:add,explode"],
            "--faults \"explode\": \"explode\" is not a fault",
        ),
        (
            ["--faults", "drop@150%"],
            "150% is not a share from 0% to 100%",
        ),
        (
            ["--pace", "fast"],
            "\"fast\" is neither `recorded` nor a factor",
        ),
        (
            ["--latency", "200ms..20ms"],
            "the minimum is longer than the maximum",
        ),
        // Accepted by the duration parser, then past the clock's range: a panic in a serving
        // task, nothing answered, and exit 0.
        (
            ["--latency", "18446744073709551615s"],
            "\"18446744073709551615s\" in \"18446744073709551615s\" is longer than a day",
        ),
        (
            ["--faults", "stall=300000000000years@tool:add"],
            "\"300000000000years\" is longer than a day",
        ),
    ] {
        Mt::new(["play"])
            .arg(&tape)
            .args(flags)
            .run()
            .status(64)
            .stderr_contains(says);
    }
}

/// `--pace` is bounded on both sides, and its error does not repeat what was given: a factor
/// of 400 nines was echoed twice (once by the argument parser, once in the reason), and 1e-300
/// was accepted and printed as a 300-digit decimal in play's summary.
#[test]
fn a_pace_out_of_bounds_is_a_usage_error_and_no_huge_number_is_printed() {
    let (_dir, tape) = tmp_tape("none.jsonl");
    let nines = "9".repeat(400);
    let run = Mt::new(["play"])
        .arg(&tape)
        .args(["--pace", &nines])
        .run()
        .status(64)
        .stderr_contains("from 0.001 to 1000");
    assert_eq!(run.stderr.matches(&nines).count(), 1, "{}", run.console());
    for tiny in ["1e-300", "0.0000001"] {
        let run = Mt::new(["play"])
            .arg(&tape)
            .args(["--pace", tiny])
            .run()
            .status(64)
            .stderr_contains("from 0.001 to 1000");
        assert!(!run.stderr.contains("0.00000000"), "{}", run.console());
    }
}

/// A tape whose timing is known: a call at 1 s answered at 1.8 s, a log notification during
/// it at 1.4 s, and a `tools/list_changed` tied to no call at 1.9 s.
fn timed_tape(tape: &Path) {
    let call = req(2, "tools/call", json!({"name": "wait", "arguments": {}}));
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "halfway"}});
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    let done = json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "done"}]}});
    let msgs = [
        ("c2s", req(1, "initialize", init_params())),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "timed", "version": "1"}}}),
        ),
        (
            "c2s",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ),
        ("c2s", call),
        ("s2c", log),
        ("s2c", done),
        ("s2c", changed),
    ];
    write_tape(tape, &msgs, true);
    let times = [0, 1_000, 2_000, 1_000_000, 1_400_000, 1_800_000, 1_900_000];
    let text = std::fs::read_to_string(tape).expect("tape");
    let mut msg = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("JSON");
            if v["type"] == "msg" {
                v["t_us"] = json!(times[msg]);
                msg += 1;
            }
            v.to_string()
        })
        .collect();
    std::fs::write(tape, lines.join("\n") + "\n").expect("write");
}

#[test]
fn paced_notifications_come_at_their_recorded_offsets_after_the_request() {
    let (_dir, tape) = tmp_tape("timed.jsonl");
    timed_tape(&tape);
    for (pace, scale) in [("recorded", 1.0), ("0.5", 0.5)] {
        let mut c = Mt::new(["play"]).arg(&tape).args(["--pace", pace]).spawn();
        c.initialize();
        let start = std::time::Instant::now();
        c.send(&req(
            7,
            "tools/call",
            json!({"name": "wait", "arguments": {}}),
        ));
        let mut seen = Vec::new();
        for _ in 0..3 {
            let m = c.recv();
            let what = m["method"].as_str().unwrap_or("answer").to_string();
            seen.push((what, start.elapsed().as_millis() as f64));
        }
        let order: Vec<&str> = seen.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(
            order,
            [
                "notifications/message",
                "answer",
                "notifications/tools/list_changed"
            ],
            "--pace {pace}"
        );
        for ((what, at), recorded_ms) in seen.iter().zip([400.0, 800.0, 900.0]) {
            assert!(
                *at >= recorded_ms * scale,
                "--pace {pace}: {what} after {at} ms, recorded {recorded_ms} ms after the request"
            );
        }
        c.close_stdin();
        let (st, err) = c.finish();
        assert!(st.success(), "{err}");
        assert_contains(&err, "served 2, missed 0");
    }
}
