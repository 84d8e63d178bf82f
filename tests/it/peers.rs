//! Against real peers the project did not write: the official Python SDK client and server,
//! the reference npm servers, the rmcp client. Each test records a session through
//! `mcptape record` (the client spawns the recorder, which spawns the server), then points the
//! same client at `mcptape play` with no server at all, and requires the client to observe
//! exactly what it observed through the recorder, with nothing missed.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

// --- helpers ---------------------------------------------------------------------------------

/// One record/play round trip of one client.
struct Trip {
    tape: PathBuf,
    recorded: Value,
    replayed: Value,
    record_out: Output,
    play_out: Output,
    play_status: i32,
}

impl Trip {
    /// One round trip in `dir`: `client` run against the recorder in front of `server` (its
    /// second argument false), then against play of the tape, `dir/x.jsonl` (true).
    fn run(
        dir: &Path,
        server: &[String],
        client: impl Fn(&[String], bool) -> (Value, Output),
    ) -> Trip {
        let tape = dir.join("x.jsonl");
        let rc = dir.join("play.rc");
        let (recorded, record_out) = client(&record_cmd(&tape, server), false);
        assert!(
            tape.exists(),
            "no tape written; client stderr:\n{}",
            text(&record_out.stderr)
        );
        let (replayed, play_out) = client(&play_reporting(&tape, &rc, None), true);
        let play_status = reported_status(&rc);
        Trip {
            tape,
            recorded,
            replayed,
            record_out,
            play_out,
            play_status,
        }
    }

    /// The checks every round trip must pass: both runs succeed, the client saw the same thing
    /// through play as through the recorder, and play served everything (exit 0, `missed 0`).
    fn assert_identical(&self) {
        assert!(
            self.record_out.status.success(),
            "client failed through the recorder: {:?}\n{}",
            self.record_out.status,
            text(&self.record_out.stderr)
        );
        let play_err = text(&self.play_out.stderr);
        assert!(
            self.play_out.status.success(),
            "client failed through play: {:?}\n{play_err}",
            self.play_out.status
        );
        assert!(
            self.recorded == self.replayed,
            "the client saw something else through play.\n--- through record:\n{}\n--- through play:\n{}\n--- play stderr:\n{play_err}",
            pretty(&self.recorded),
            pretty(&self.replayed)
        );
        assert!(
            play_err.contains("missed 0, drifted 0"),
            "play summary: {play_err}"
        );
        assert!(
            play_err.contains("every recorded exchange was used"),
            "play summary: {play_err}"
        );
        assert_eq!(self.play_status, 0, "play exit status; stderr:\n{play_err}");
    }

    fn msgs(&self) -> Vec<Value> {
        tape_msgs(&self.tape)
    }
}

/// Python SDK client, scenario `scenario` in `mode`: once through the recorder in front of
/// `server`, once against play. `record_env`/`play_env` go to the client (and so to what it spawns).
fn py_trip(
    dir: &Path,
    scenario: &str,
    mode: &str,
    server: &[String],
    record_env: &[(&str, &str)],
    play_env: &[(&str, &str)],
) -> Trip {
    Trip::run(dir, server, |target, play| {
        py_client(
            scenario,
            mode,
            target,
            if play { play_env } else { record_env },
        )
    })
}

/// [`py_trip`] in a temp folder of its own, without extra environment, required to be
/// identical: (the folder, the trip, the tape's messages).
fn identical_py_trip(
    scenario: &str,
    mode: &str,
    server: &[String],
) -> (tempfile::TempDir, Trip, Vec<Value>) {
    let dir = tmp();
    let trip = py_trip(dir.path(), scenario, mode, server, &[], &[]);
    trip.assert_identical();
    let msgs = trip.msgs();
    (dir, trip, msgs)
}

/// The one sampling request on the tape, which came inside the exchange of the client's
/// request `call`.
fn sampling_inside<'a>(msgs: &'a [Value], call: &Value) -> &'a Value {
    let sampling = select(msgs, "s2c", "request", Some("sampling/createMessage"));
    assert_eq!(sampling.len(), 1, "one sampling request on the tape");
    let at = position(msgs, sampling[0]);
    assert!(
        position(msgs, call) < at && at < response_to(msgs, call).0,
        "sampling request inside the exchange"
    );
    sampling[0]
}

fn rmcp_trip(
    dir: &Path,
    args: &[String],
    server: &[String],
    play_env: Option<&[(&str, &str)]>,
) -> Trip {
    Trip::run(dir, server, |target, play| {
        rmcp_run(args, target, if play { play_env } else { None })
    })
}

/// `--call TOOL ARGS` pairs for the rmcp client.
fn calls(list: &[(&str, Value)]) -> Vec<String> {
    list.iter()
        .flat_map(|(tool, args)| ["--call".to_string(), tool.to_string(), args.to_string()])
        .collect()
}

fn is(m: &Value, dir: &str, kind: &str, method: Option<&str>) -> bool {
    m["dir"] == dir && m["kind"] == kind && method.is_none_or(|x| m["method"] == x)
}

/// Tape messages of one direction, kind and (optionally) method.
fn select<'a>(msgs: &'a [Value], dir: &str, kind: &str, method: Option<&str>) -> Vec<&'a Value> {
    msgs.iter().filter(|m| is(m, dir, kind, method)).collect()
}

/// The recorded `tools/call` requests to tool `name`.
fn calls_to<'a>(msgs: &'a [Value], name: &str) -> Vec<&'a Value> {
    select(msgs, "c2s", "request", Some("tools/call"))
        .into_iter()
        .filter(|m| m["msg"]["params"]["name"] == name)
        .collect()
}

/// The server's response (result or error) to the client request `req`, and its position.
fn response_to<'a>(msgs: &'a [Value], req: &Value) -> (usize, &'a Value) {
    msgs.iter()
        .enumerate()
        .find(|(_, m)| {
            m["dir"] == "s2c"
                && (m["kind"] == "response" || m["kind"] == "error")
                && m["id"] == req["id"]
        })
        .unwrap_or_else(|| panic!("no response recorded to {}", req["msg"]))
}

fn position(msgs: &[Value], m: &Value) -> usize {
    msgs.iter()
        .position(|x| x["seq"] == m["seq"])
        .expect("message on the tape")
}

fn step<'a>(transcript: &'a Value, name: &str) -> &'a Value {
    transcript["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {}", pretty(transcript)))
}

fn progress_values(list: &Value) -> Vec<f64> {
    list.as_array()
        .expect("a progress list")
        .iter()
        .map(|p| p["progress"].as_f64().expect("progress number"))
        .collect()
}

/// Recorded progress notifications carrying `token`.
fn progress_for<'a>(msgs: &'a [Value], token: &Value) -> Vec<&'a Value> {
    select(msgs, "s2c", "notification", Some("notifications/progress"))
        .into_iter()
        .filter(|m| &m["msg"]["params"]["progressToken"] == token)
        .collect()
}

/// Asserts the three `counter` calls were answered 1, 2, 3 on the tape and in `transcript`.
fn assert_counter_in_order(msgs: &[Value], transcript: &Value) {
    let counter = calls_to(msgs, "counter");
    assert_eq!(
        counter.len(),
        3,
        "three identical counter calls on the tape"
    );
    let answers: Vec<Value> = counter
        .iter()
        .map(|c| response_to(msgs, c).1["msg"]["result"]["structuredContent"]["result"].clone())
        .collect();
    assert_eq!(answers, [json!(1), json!(2), json!(3)]);
    for i in 1..=3 {
        let got = &step(transcript, &format!("call counter #{i}"))["result"]["structuredContent"]
            ["result"];
        assert_eq!(got, &json!(i), "counter call #{i}");
    }
}

/// The fixture's `progress_steps` call: three progress notifications for its token on the tape,
/// and 1, 2, 3 through play.
fn assert_progress_steps(msgs: &[Value], transcript: &Value) {
    let p = calls_to(msgs, "progress_steps");
    assert_eq!(
        progress_for(msgs, &p[0]["msg"]["params"]["_meta"]["progressToken"]).len(),
        3
    );
    assert_eq!(
        progress_values(&step(transcript, "call progress_steps")["progress"]),
        [1.0, 2.0, 3.0]
    );
}

/// Processes whose parent is `pid` (from /proc).
fn children_of(pid: i32) -> Vec<String> {
    let mut kids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let ppid: Option<i32> = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(pid) {
            kids.push(stat.trim().to_string());
        }
    }
    kids
}

// --- tests -----------------------------------------------------------------------------------

/// server-everything driven by the Python SDK (legacy era): a tool call whose answer needs the
/// client's LLM (server→client `sampling/createMessage` mid-call) and one that reports progress.
#[test]
fn python_client_and_server_everything_replay_sampling_and_progress() {
    let (_dir, trip, msgs) = identical_py_trip("everything", "legacy", &everything());

    // Sampling: the server's request arrived inside the tools/call exchange and the client's
    // answer went back with the server's id.
    let sampling_call = calls_to(&msgs, "trigger-sampling-request");
    assert_eq!(sampling_call.len(), 1);
    let sampling = sampling_inside(&msgs, sampling_call[0]);
    let answer = select(&msgs, "c2s", "response", None)
        .into_iter()
        .find(|m| m["id"] == sampling["id"])
        .expect("the client's answer to the sampling request is recorded");
    assert_eq!(answer["msg"]["result"]["model"], "mcptape-fixed-model");
    let observed = &step(&trip.replayed, "call trigger-sampling-request")["observed"];
    assert_eq!(
        observed[0]["server_request"], "sampling/createMessage",
        "play asked the client to sample"
    );

    // Progress: three notifications for the long-running call's token, all before its answer.
    let long = calls_to(&msgs, "trigger-long-running-operation");
    assert_eq!(long.len(), 1);
    let token = &long[0]["msg"]["params"]["_meta"]["progressToken"];
    assert!(
        !token.is_null(),
        "the client asked for progress: {}",
        long[0]["msg"]
    );
    let progress = progress_for(&msgs, token);
    assert_eq!(
        progress.len(),
        3,
        "three progress notifications on the tape"
    );
    let (long_done, _) = response_to(&msgs, long[0]);
    assert!(progress.iter().all(|p| position(&msgs, p) < long_done));
    let seen = &step(&trip.replayed, "call trigger-long-running-operation")["progress"];
    assert_eq!(
        progress_values(seen),
        [1.0, 2.0, 3.0],
        "progress through play"
    );

    // server-everything also asks for roots on its own; play re-asked it.
    assert_eq!(select(&msgs, "s2c", "request", Some("roots/list")).len(), 1);
    assert!(trip.replayed["notifications"]
        .as_array()
        .expect("notifications")
        .contains(&json!({"server_request": "roots/list"})));
}

/// The same client in `auto` mode probes `server/discover` first; server-everything answers
/// -32601 and the client falls back to `initialize`. The failed probe is recorded and replayed.
#[test]
fn python_client_auto_mode_replays_the_failed_discover_probe() {
    let (_dir, trip, msgs) = identical_py_trip("everything", "auto", &everything());
    let requests = select(&msgs, "c2s", "request", None);
    assert_eq!(
        requests[0]["method"], "server/discover",
        "the probe comes first"
    );
    assert_eq!(requests[1]["method"], "initialize", "then the fallback");
    let (_, probe_answer) = response_to(&msgs, requests[0]);
    assert_eq!(probe_answer["kind"], "error");
    assert_eq!(probe_answer["msg"]["error"]["code"], -32601);
    assert_eq!(trip.replayed["protocolVersion"], "2025-11-25");
    assert_eq!(
        select(&msgs, "s2c", "request", Some("sampling/createMessage")).len(),
        1
    );
}

/// server-memory keeps a knowledge graph in a file: the recording writes it, play must not
/// (it never starts the server), yet the client reads the same graph back.
#[test]
fn python_client_and_server_memory() {
    let (dir, record_file) = tmp_tape("memory-record.jsonl");
    let play_file = dir.path().join("memory-play.jsonl");
    let trip = py_trip(
        dir.path(),
        "memory",
        "legacy",
        &memory(),
        &[("MEMORY_FILE_PATH", &s(&record_file))],
        &[("MEMORY_FILE_PATH", &s(&play_file))],
    );
    trip.assert_identical();
    let msgs = trip.msgs();
    assert_eq!(select(&msgs, "c2s", "request", Some("tools/call")).len(), 6);
    let graph = std::fs::read_to_string(&record_file)
        .expect("the server wrote its memory file while recording");
    assert_contains(&graph, "Analytical Engine");
    assert!(
        !play_file.exists(),
        "play started something that wrote {}",
        play_file.display()
    );
    let read = step(&trip.replayed, "read_graph").to_string();
    assert!(
        read.contains("Analytical Engine") && read.contains("punched cards"),
        "{read}"
    );
}

/// The Python SDK's own server in the stateless 2026-07-28 era: no handshake, `_meta` on every
/// request, sampling as an `input_required` round trip. `counter` answers 1, 2, 3 to identical
/// calls: play must serve them in recorded order.
#[test]
fn python_sdk_server_2026_era() {
    let (_dir, trip, msgs) = identical_py_trip("pyserver", "2026-07-28", &py_server());
    assert_eq!(trip.replayed["protocolVersion"], "2026-07-28");
    let requests = select(&msgs, "c2s", "request", None);
    assert!(
        !requests.iter().any(|r| r["method"] == "initialize"),
        "stateless era: no initialize"
    );
    for r in &requests {
        assert_eq!(
            r["msg"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "per-request _meta: {}",
            r["msg"]
        );
    }
    assert_counter_in_order(&msgs, &trip.replayed);

    // Sampling without a server→client request: input_required, then a retry with the answer.
    assert!(select(&msgs, "s2c", "request", None).is_empty());
    let ask = calls_to(&msgs, "ask_llm");
    assert_eq!(ask.len(), 2, "ask_llm and its retry");
    assert!(response_to(&msgs, ask[0]).1["msg"]["result"]["inputRequests"].is_object());
    assert!(ask[1]["msg"]["params"]["inputResponses"].is_object());
    let observed = &step(&trip.replayed, "call ask_llm")["observed"];
    assert_eq!(observed[0]["server_request"], "sampling/createMessage");
    assert_progress_steps(&msgs, &trip.replayed);
}

/// The same server and scenario in the legacy era: initialize, a real sampling request.
#[test]
fn python_sdk_server_legacy_era() {
    let (_dir, trip, msgs) = identical_py_trip("pyserver", "legacy", &py_server());
    assert_eq!(
        select(&msgs, "c2s", "request", None)[0]["method"],
        "initialize"
    );
    assert_counter_in_order(&msgs, &trip.replayed);
    let ask = calls_to(&msgs, "ask_llm");
    assert_eq!(ask.len(), 1);
    sampling_inside(&msgs, ask[0]);
    assert_progress_steps(&msgs, &trip.replayed);
}

/// Eight concurrent calls, answered out of order by the server; through play every call still
/// gets its own answer.
#[test]
fn python_client_parallel_calls_answered_out_of_order() {
    let (_dir, trip, msgs) = identical_py_trip("parallel", "legacy", &py_server());
    let reqs = calls_to(&msgs, "slow_echo");
    assert_eq!(reqs.len(), 8);
    let req_pos: Vec<usize> = reqs.iter().map(|r| position(&msgs, r)).collect();
    let answers: Vec<(usize, &Value)> = reqs.iter().map(|r| response_to(&msgs, r)).collect();
    let first_answer = answers.iter().map(|a| a.0).min().expect("answers");
    assert!(
        req_pos.iter().all(|&p| p < first_answer),
        "all eight requests were in flight before the first answer"
    );
    let mut order: Vec<usize> = (0..8).collect();
    order.sort_by_key(|&i| answers[i].0);
    assert_ne!(
        order,
        (0..8).collect::<Vec<_>>(),
        "the server answered out of order"
    );
    for (i, r) in reqs.iter().enumerate() {
        let want = format!(
            "slow_echo: {} after",
            r["msg"]["params"]["arguments"]["text"]
                .as_str()
                .expect("text")
        );
        let on_tape = answers[i].1["msg"]["result"]["content"][0]["text"]
            .as_str()
            .expect("text");
        assert!(on_tape.starts_with(&want), "{on_tape}");
        let name = format!(
            "parallel slow_echo #{i} {{\"delay_ms\": {}, \"text\": \"call-{i}\"}}",
            (8 - i) * 40
        );
        let got = &step(&trip.replayed, &name)["result"]["content"][0]["text"];
        assert_eq!(got, on_tape, "call {i} through play");
    }
}

/// The rmcp client (official Rust SDK) against server-everything: same JSON through play. rmcp
/// puts a progressToken in `_meta` of every request, which matching must ignore: play is also
/// driven with the calls in another order (so every token differs from the tape), and raw with
/// a string token, which the replayed progress must carry.
#[test]
fn rmcp_client_and_server_everything() {
    let dir = tmp();
    let list = [
        ("echo", json!({"message": "hello from rmcp"})),
        ("get-sum", json!({"a": 19, "b": 23})),
        (
            "trigger-long-running-operation",
            json!({"duration": 0.2, "steps": 2}),
        ),
        ("get-structured-content", json!({"location": "New York"})),
    ];
    let mut args = calls(&list);
    args.push("--list-resources".into());
    let trip = rmcp_trip(dir.path(), &args, &everything(), None);
    trip.assert_identical();
    let msgs = trip.msgs();
    for r in select(&msgs, "c2s", "request", None) {
        if r["method"] != "initialize" {
            assert!(
                !r["msg"]["params"]["_meta"]["progressToken"].is_null(),
                "rmcp sends a progressToken: {}",
                r["msg"]
            );
        }
    }
    let long = calls_to(&msgs, "trigger-long-running-operation");
    assert_eq!(
        progress_for(&msgs, &long[0]["msg"]["params"]["_meta"]["progressToken"]).len(),
        2
    );
    assert_eq!(trip.replayed["calls"].as_array().expect("calls").len(), 4);

    // Reversed: every request now carries another id and token than on the tape.
    let mut reversed: Vec<(&str, Value)> = list.to_vec();
    reversed.reverse();
    let mut args = calls(&reversed);
    args.push("--list-resources".into());
    let rc = dir.path().join("reversed.rc");
    let (doc, out) = rmcp_run(&args, &play_reporting(&trip.tape, &rc, None), None);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(reported_status(&rc), 0, "{err}");
    assert_contains(&err, "missed 0, drifted 0");
    let mut got = doc["calls"].as_array().expect("calls").clone();
    got.reverse();
    assert_eq!(Value::Array(got), trip.recorded["calls"]);
    assert_eq!(doc["resources"], trip.recorded["resources"]);

    // Raw: progress comes back with this client's token and id, whatever the tape holds.
    let mut c = LineClient::spawn(&play_cmd(&trip.tape));
    c.initialize();
    let call = json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
        "_meta": {"progressToken": "my-token"},
        "name": "trigger-long-running-operation",
        "arguments": {"duration": 0.2, "steps": 2},
    }});
    c.send(&call);
    let (resp, before) = c.recv_response(&json!("call-1"));
    let tokens: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"]["progressToken"])
        .collect();
    assert_eq!(
        tokens,
        [&json!("my-token"), &json!("my-token")],
        "{before:?}"
    );
    assert!(resp["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("Long running operation completed")));
    c.finish_with(0);
}

/// rmcp asking play for a call that is not on the tape gets the -32099 explanation, and play
/// exits 1 saying so.
#[test]
fn rmcp_client_gets_an_explained_miss() {
    let (dir, tape) = tmp_tape("x.jsonl");
    let recorded_args = calls(&[("get-sum", json!({"a": 1, "b": 2}))]);
    let (_, out) = rmcp_run(&recorded_args, &record_cmd(&tape, &everything()), None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let args = calls(&[
        ("get-sum", json!({"a": 1, "b": 2})),
        ("get-sum", json!({"a": 1, "b": 3})),
    ]);
    let rc = dir.path().join("play.rc");
    let (doc, out) = rmcp_run(&args, &play_reporting(&tape, &rc, None), None);
    let err = text(&out.stderr);
    assert_eq!(
        doc["calls"][0]["result"]["content"][0]["text"],
        "The sum of 1 and 2 is 3."
    );
    let miss = doc["calls"][1]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", pretty(&doc)));
    assert_contains(miss, "-32099");
    assert!(
        miss.contains("$.arguments.b"),
        "the explanation names the difference: {miss}"
    );
    assert_contains(&err, "missed 1");
    assert_eq!(reported_status(&rc), 1, "{err}");
}

/// Play starts no server: the recorded server command is a script that logs every start; it ran
/// once while recording and never during play, which also runs with a PATH holding no node or
/// python. While play serves, it has no child process at all.
#[test]
fn play_starts_no_server_process() {
    let dir = tmp();
    let log = dir.path().join("starts.log");
    let script = dir.path().join("server.sh");
    let everything = everything();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho started >> '{}'\nexec '{}' '{}'\n",
            log.display(),
            everything[0],
            everything[1]
        ),
    )
    .expect("write script");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");

    let empty = dir.path().join("empty-bin");
    std::fs::create_dir(&empty).expect("mkdir");
    let env = [("PATH", s(&empty))];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = calls(&[("echo", json!({"message": "is anybody there"}))]);
    let trip = rmcp_trip(dir.path(), &args, &[s(&script)], Some(&env));
    trip.assert_identical();
    let starts = std::fs::read_to_string(&log).expect("the script ran while recording");
    assert_eq!(
        starts.lines().count(),
        1,
        "started once (recording), never by play"
    );
    let decl = tape_lines(&trip.tape)
        .into_iter()
        .find(|l| l["type"] == "server")
        .expect("server line");
    assert_eq!(
        decl["command"],
        json!([s(&script)]),
        "the tape names the command play did not run"
    );

    let mut c = LineClient::spawn(&play_cmd(&trip.tape));
    let init = c.initialize();
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "mcp-servers/everything"
    );
    let r = c.call(1, "tools/list", json!({"_meta": {"progressToken": 0}}));
    assert!(r["result"]["tools"].is_array(), "{r}");
    assert_eq!(
        children_of(c.pid()),
        Vec::<String>::new(),
        "play has child processes"
    );
    c.finish_with(0);
    assert_eq!(
        std::fs::read_to_string(&log).expect("log").lines().count(),
        1
    );

    // Control: the same check does see the recorder's server.
    let mut c = LineClient::spawn(&record_cmd(&dir.path().join("control.jsonl"), &everything));
    c.initialize();
    assert_eq!(
        children_of(c.pid()).len(),
        1,
        "record runs its server as a child"
    );
    c.finish_with(0);
}

#[test]
fn a_multi_round_trip_call_is_shown_as_linked_exchanges() {
    // The 2026-07-28 era: `ask_llm` answers `input_required`; the client retries the same call
    // with `inputResponses`. The tape keeps both exchanges; `show` links the retry to the first.
    let (_dir, tape) = tmp_tape("mrtr.jsonl");
    let (_, out) = py_client(
        "pyserver",
        "2026-07-28",
        &record_cmd(&tape, &py_server()),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = show_json(&tape);
    let rows = doc["messages"].as_array().expect("rows");
    let first = rows
        .iter()
        .find(|r| {
            r["target"] == "ask_llm" && r["kind"] == "request" && r.get("retry_of_line").is_none()
        })
        .expect("the first ask_llm call");
    let retry = rows
        .iter()
        .find(|r| {
            r["target"] == "ask_llm" && r["kind"] == "request" && r.get("retry_of_line").is_some()
        })
        .expect("the retry is linked");
    assert_eq!(retry["retry_of_line"], first["line"], "{retry}");
}
