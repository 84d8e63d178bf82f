//! Play policies with a live server (issue 16): a request the tape does not answer goes to a
//! real server (`--on-miss live`) and is appended to the tape; `--live` / `--from-tape` choose
//! calls to serve live. Real peers over real pipes and sockets: server-memory,
//! server-everything (stdio and Streamable HTTP), the Python SDK server.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A session recorded through `mcptape record` against `server`: `steps` are run on the line
/// client after the handshake (with `caps` as the client's capabilities).
fn record_with(
    tape: &Path,
    server: &[String],
    caps: Value,
    steps: impl FnOnce(&mut LineClient),
) -> Value {
    let mut c = LineClient::spawn(&record_cmd(tape, server));
    let init = handshake(&mut c, caps);
    steps(&mut c);
    c.finish_with(0);
    init
}

/// The legacy handshake with these client capabilities; the `initialize` answer.
fn handshake(c: &mut LineClient, caps: Value) -> Value {
    let mut params = init_params();
    params["capabilities"] = caps;
    let r = c.call(0, "initialize", params);
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    r
}

/// `mcptape play TAPE ARGS… -- SERVER…` as a line client.
fn play_live(tape: &Path, args: &[&str], server: &[String]) -> LineClient {
    let mut argv = play_cmd(tape);
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.push("--".into());
    argv.extend(server.iter().cloned());
    LineClient::spawn(&argv)
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// The text of a tool result's first content item.
fn text_of(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {r}"))
}

/// How many of the tape's messages are marked `appended`.
fn appended(tape: &Path) -> usize {
    tape_msgs(tape)
        .iter()
        .filter(|m| m["appended"] == true)
        .count()
}

/// `mcptape verify` says the tape is intact.
#[track_caller]
fn assert_verifies(tape: &Path) {
    Mt::new(["verify"])
        .arg(tape)
        .run()
        .success()
        .stdout_contains("intact");
}

/// The memory server with its graph in `dir`.
fn memory_in(dir: &Path) -> (Vec<String>, [(String, String); 1]) {
    let file = dir.join("memory.json");
    (memory(), [("MEMORY_FILE_PATH".into(), s(file))])
}

fn entities(observation: &str) -> Value {
    json!({"entities": [{"observations": [observation], "entityType": "tool", "name": "mcptape"}]})
}

/// A `create_entities` call as a client may write it: the id last, keys in no order, a number
/// spelled 2.50. Sent to the live server and taped as written (but for the id).
fn create_raw(id: u64) -> String {
    format!(
        r#"{{"method":"tools/call","params":{{"name":"create_entities","arguments":{{"entities":[{{"observations":["price 2.50"],"entityType":"tool","name":"mcptape","weight":2.50}}]}}}},"jsonrpc":"2.0","id":{id}}}"#
    ) + "\n"
}

/// `mcptape play` with the memory server in `env`, as a line client.
fn play_live_env(
    tape: &Path,
    args: &[&str],
    server: &[String],
    env: &[(String, String)],
) -> LineClient {
    let mut argv = play_cmd(tape);
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.push("--".into());
    argv.extend(server.iter().cloned());
    let mut cmd = command(&argv);
    for (k, v) in env {
        cmd.env(k, v);
    }
    LineClient::spawn_cmd(cmd)
}

fn record_memory(dir: &Path) -> PathBuf {
    let tape = dir.join("memory.jsonl");
    let (server, env) = memory_in(dir);
    let mut cmd = command(&record_cmd(&tape, &server));
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let mut c = LineClient::spawn_cmd(cmd);
    handshake(&mut c, json!({}));
    let graph = c.call(1, "tools/call", call("read_graph", json!({})));
    assert_eq!(graph["result"]["structuredContent"]["entities"], json!([]));
    c.finish_with(0);
    tape
}

#[test]
fn a_miss_goes_to_the_live_memory_server_is_appended_marked_and_then_plays_strictly() {
    let dir = tmp();
    let tape = record_memory(dir.path());
    let original = dir.path().join("original.jsonl");
    std::fs::copy(&tape, &original).unwrap();
    let (server, env) = memory_in(dir.path());

    let mut c = play_live_env(&tape, &["--on-miss", "live"], &server, &env);
    handshake(&mut c, json!({}));
    // On the tape: served from it.
    let graph = c.call(11, "tools/call", call("read_graph", json!({})));
    assert_eq!(graph["result"]["structuredContent"]["entities"], json!([]));
    // Not on the tape: the live server creates the entity, the client gets its own id back.
    c.send_raw(create_raw(12).as_bytes());
    let (created, _) = c.recv_response(&json!(12));
    assert_eq!(created["id"], 12, "{created}");
    assert_eq!(
        created["result"]["structuredContent"]["entities"][0]["observations"],
        json!(["price 2.50"]),
        "{created}"
    );
    let err = c.finish_with(0);
    assert_contains(&err, "served 2, missed 0, drifted 0, answered live 1");
    assert_contains(
        &err,
        &format!(
            "appended 1 exchange from the live server to {} (marked \"appended\")",
            tape.display()
        ),
    );
    // The live server really ran: its graph file holds the entity.
    let graph_file = std::fs::read_to_string(dir.path().join("memory.json")).unwrap();
    assert_contains(&graph_file, "price 2.50");

    // The appended lines: marked, after an `append` event, chained; the tape verifies.
    assert_verifies(&tape);
    let lines = tape_lines(&tape);
    let event = position(&lines, "the append event", |l| {
        l["type"] == "event" && l["what"] == "append"
    });
    let appended: Vec<&Value> = lines.iter().filter(|l| l["appended"] == true).collect();
    assert_eq!(appended.len(), 2, "request and answer: {appended:#?}");
    assert!(lines[..event].iter().all(|l| l.get("appended").is_none()));
    assert_eq!(appended[0]["dir"], "c2s");
    assert_eq!(appended[0]["msg"]["params"]["name"], "create_entities");
    assert_eq!(appended[1]["id"], appended[0]["id"]);
    let raw = std::fs::read_to_string(&tape).unwrap();
    assert_contains(
        &raw,
        r#""arguments":{"entities":[{"observations":["price 2.50"],"entityType":"tool","name":"mcptape","weight":2.50}]}},"jsonrpc":"2.0","id":"mcptape-live-"#,
    );
    let end = end_of(&tape);
    assert_eq!(end["exchanges"], 3, "{end}");

    // `show` marks them, in the table and in JSON.
    let shown = show_json(&tape);
    let marked: Vec<&Value> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["appended"] == true)
        .collect();
    assert_eq!(marked.len(), 2);
    Mt::new(["show"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains(
            "appended 2 messages after the recording (play --on-miss live), marked + below",
        )
        .stdout_contains("+→");

    // `diff` against the tape before: the appended call is only in the new one, marked.
    let diff = Mt::new(["diff"]).arg(&original).arg(&tape).run().status(2);
    assert_contains(&diff.console(), "create_entities");
    assert_contains(&diff.console(), "(appended)");

    // Strict play serves the appended exchange, with no server at all.
    let mut c = LineClient::spawn(&play_cmd(&tape));
    handshake(&mut c, json!({}));
    c.send_raw(create_raw(30).as_bytes());
    let (again, _) = c.recv_response(&json!(30));
    assert_eq!(again["result"], created["result"]);
    let err = c.finish_with(0);
    assert_contains(
        &err,
        "served 2, missed 0, drifted 0; 1 recorded exchange never used",
    );
}

#[test]
fn a_missed_call_that_samples_is_relayed_to_the_client_and_its_answer_back_to_the_live_server() {
    let dir = tmp();
    let tape = dir.path().join("everything.jsonl");
    let caps = json!({"sampling": {}});
    record_with(&tape, &everything(), caps.clone(), |c| {
        let r = c.call(1, "tools/call", call("echo", json!({"message": "hi"})));
        assert_eq!(text_of(&r), "Echo: hi");
    });

    let mut c = play_live(&tape, &["--on-miss", "live"], &everything());
    handshake(&mut c, caps);
    c.send(&req(
        "call-7",
        "tools/call",
        call(
            "trigger-sampling-request",
            json!({"prompt": "Say hi to the tape", "maxTokens": 64}),
        ),
    ));
    // The live server's sampling request reaches the client with an id of play's.
    let (sampling, _) = loop {
        let m = c.recv();
        if m["method"] == "sampling/createMessage" {
            break (m, ());
        }
        assert!(
            m.get("method").is_some(),
            "only notifications before it: {m}"
        );
    };
    let play_id = sampling["id"].clone();
    assert!(!play_id.is_null());
    assert_contains(
        &sampling["params"]["messages"][0]["content"]["text"].to_string(),
        "Say hi to the tape",
    );
    c.send(&json!({"jsonrpc": "2.0", "id": play_id, "result": {"role": "assistant", "content": {"type": "text", "text": "Hi from the client"}, "model": "fixed-model", "stopReason": "endTurn"}}));
    let (answer, _) = c.recv_response(&json!("call-7"));
    assert_contains(&answer["result"].to_string(), "Hi from the client");
    let err = c.finish_with(0);
    assert_contains(&err, "answered live 1");

    // On the tape: the call, the server's request with the server's own id, the client's answer
    // with that id, and the result, all appended.
    assert_verifies(&tape);
    let msgs = tape_msgs(&tape);
    let appended: Vec<&Value> = msgs.iter().filter(|m| m["appended"] == true).collect();
    let kinds: Vec<(String, String)> = appended
        .iter()
        .filter(|m| m["kind"] != "notification")
        .map(|m| (s_of(&m["dir"]), s_of(&m["kind"])))
        .collect();
    assert_eq!(
        kinds,
        [
            ("c2s".into(), "request".into()),
            ("s2c".into(), "request".into()),
            ("c2s".into(), "response".into()),
            ("s2c".into(), "response".into())
        ],
        "{appended:#?}"
    );
    let server_req = appended
        .iter()
        .find(|m| m["dir"] == "s2c" && m["kind"] == "request")
        .unwrap();
    let client_answer = appended
        .iter()
        .find(|m| m["dir"] == "c2s" && m["kind"] == "response")
        .unwrap();
    assert_eq!(
        client_answer["id"], server_req["id"],
        "mapped back to the server's id"
    );
    assert_eq!(client_answer["msg"]["result"]["model"], "fixed-model");

    // And played strictly, the sampling request is re-issued to the client from the tape.
    let mut c = LineClient::spawn(&play_cmd(&tape));
    handshake(&mut c, json!({"sampling": {}}));
    c.send(&req(
        9,
        "tools/call",
        call(
            "trigger-sampling-request",
            json!({"prompt": "Say hi to the tape", "maxTokens": 64}),
        ),
    ));
    let m = loop {
        let m = c.recv();
        if m["method"] == "sampling/createMessage" {
            break m;
        }
    };
    c.send(&json!({"jsonrpc": "2.0", "id": m["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "Hi from the client"}, "model": "fixed-model", "stopReason": "endTurn"}}));
    let (again, _) = c.recv_response(&json!(9));
    assert_eq!(again["result"], answer["result"]);
    let err = c.finish_with(0);
    assert_contains(&err, "missed 0, drifted 0");
}

fn s_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn without_a_live_server_the_policies_are_usage_errors_and_a_strict_miss_still_fails() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    record_with(&tape, &everything(), json!({}), |_| {});
    Mt::new(["play"])
        .arg(&tape)
        .args(["--on-miss", "live"])
        .run()
        .status(64)
        .stderr_contains("--on-miss live needs a live server: its command after --");
    Mt::new(["play"])
        .arg(&tape)
        .args(["--live", "tool:echo"])
        .run()
        .status(64)
        .stderr_contains("--live needs a live server");
    Mt::new(["play"])
        .arg(&tape)
        .args(["--", "true"])
        .run()
        .status(64)
        .stderr_contains("is for --on-miss live, --live or --from-tape");
    Mt::new(["play"])
        .arg(&tape)
        .args(["--live", "tol:echo", "--", "true"])
        .run()
        .status(64)
        .stderr_contains("unknown kind \"tol\"");
    // A live server that cannot start: the client gets an error naming it, play exits 1.
    let mut c = play_live(
        &tape,
        &["--on-miss", "live"],
        &["/nonexistent/server".into()],
    );
    handshake(&mut c, json!({}));
    let r = c.call(5, "tools/call", call("echo", json!({"message": "x"})));
    assert_contains(&r["error"]["message"].to_string(), "could not start it");
    let err = c.finish_with(1);
    assert_contains(
        &err,
        "live server `/nonexistent/server`: could not start it",
    );
    // Nothing was appended: the tape is as it was.
    assert_verifies(&tape);
    assert!(tape_lines(&tape)
        .iter()
        .all(|l| l.get("appended").is_none()));
}

/// The Python SDK server over stdio: a session that called `now` and `counter` once.
fn record_py_server(dir: &Path) -> (PathBuf, Value, Value) {
    let tape = dir.join("py.jsonl");
    let (mut now, mut counter) = (Value::Null, Value::Null);
    record_with(&tape, &py_server(), json!({}), |c| {
        now = c.call(1, "tools/call", call("now", json!({})));
        counter = c.call(2, "tools/call", call("counter", json!({})));
    });
    (tape, now, counter)
}

#[test]
fn live_tools_come_from_the_python_server_the_rest_from_the_tape_and_nothing_is_appended() {
    let dir = tmp();
    let (tape, now, counter) = record_py_server(dir.path());
    let before = std::fs::read(&tape).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // `now` answers in seconds

    // --live counter: counted live from 1 each time play starts it, twice; `now` from the tape.
    let mut c = play_live(&tape, &["--live", "counter"], &py_server());
    handshake(&mut c, json!({}));
    let one = c.call(10, "tools/call", call("counter", json!({})));
    let two = c.call(11, "tools/call", call("counter", json!({})));
    assert_eq!(text_of(&one), text_of(&counter));
    assert_ne!(
        text_of(&two),
        text_of(&one),
        "the second came live too: {two}"
    );
    let served_now = c.call(12, "tools/call", call("now", json!({})));
    assert_eq!(served_now["result"], now["result"], "from the tape");
    let err = c.finish_with(0);
    assert_contains(&err, "answered live 2");
    // A recorded `counter` answer was not used: the call went live.
    assert_contains(&err, "tools/call counter");
    assert_eq!(
        std::fs::read(&tape).unwrap(),
        before,
        "--live appends nothing"
    );

    // --from-tape counter: `now` goes live (a later time than recorded), counter from the tape.
    let mut c = play_live(&tape, &["--from-tape", "tool:counter"], &py_server());
    handshake(&mut c, json!({}));
    let live_now = c.call(20, "tools/call", call("now", json!({})));
    assert_ne!(
        live_now["result"], now["result"],
        "now went live: {live_now}"
    );
    let taped = c.call(21, "tools/call", call("counter", json!({})));
    assert_eq!(taped["result"], counter["result"]);
    let err = c.finish_with(0);
    assert_contains(&err, "answered live 1");
    assert_eq!(std::fs::read(&tape).unwrap(), before);
}

#[test]
fn a_kill_9_of_play_after_an_append_leaves_a_closed_tape_that_verifies() {
    let dir = tmp();
    let tape = record_memory(dir.path());
    let (server, env) = memory_in(dir.path());
    let mut c = play_live_env(&tape, &["--on-miss", "live"], &server, &env);
    handshake(&mut c, json!({}));
    let created = c.call(
        3,
        "tools/call",
        call("create_entities", entities("kill -9")),
    );
    assert!(created.get("result").is_some(), "{created}");
    // SIGKILL: no closing of the tape by play; it was closed again after the last write.
    unsafe { libc::kill(c.pid(), libc::SIGKILL) };
    let _ = c.finish();
    assert_verifies(&tape);
    let end = end_of(&tape);
    assert_contains(&end["reason"].to_string(), "the client closed stdin");
    // A second live run appends after it, and the tape still verifies.
    let mut c = play_live_env(&tape, &["--on-miss", "live"], &server, &env);
    handshake(&mut c, json!({}));
    let again = c.call(4, "tools/call", call("read_graph", json!({"x": 1})));
    assert!(again.get("result").is_some(), "{again}");
    c.finish_with(0);
    assert_verifies(&tape);
    assert_eq!(appended(&tape), 4);
    let appends = tape_lines(&tape)
        .into_iter()
        .filter(|l| l["what"] == "append")
        .count();
    assert_eq!(appends, 2, "one append event per run");
}

/// A tape whose recorder was killed (no closing line, its last line torn mid-write) is appended
/// to after its last whole line, and the cut stays on record: `verify` still calls the tape cut
/// off where the recording stopped (not intact), `show` says so, the torn bytes are kept in the
/// `append` event, and the new closing line's counts cover the recording as well as the
/// appended exchange (they counted no exchange of the recording, and `verify` said intact).
#[test]
fn appending_to_a_cut_off_tape_keeps_the_cut_on_record_and_counts_everything() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let server = demo_server("healthy");
    record_with(&tape, &server, json!({}), |c| {
        let r = c.call(1, "tools/call", call("add", json!({"a": 1, "b": 1})));
        assert_eq!(text_of(&r), "2", "{r}");
    });
    let recorded = end_of(&tape);
    // The recorder killed mid-write: no closing line, a torn last line.
    let mut text = std::fs::read_to_string(&tape).unwrap();
    let closing = text.trim_end_matches('\n').rfind('\n').unwrap() + 1;
    text.truncate(closing);
    let torn = r#"{"type":"msg","seq":99,"t_us":5,"server":"default","dir":"c2s","kind":"requ"#;
    text.push_str(torn);
    std::fs::write(&tape, &text).unwrap();
    let cut_line = text.lines().count();
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .status(1)
        .stdout_contains(&format!("cut off at line {cut_line}"));

    let mut c = play_live(&tape, &["--on-miss", "live"], &server);
    handshake(&mut c, json!({}));
    let r = c.call(2, "tools/call", call("add", json!({"a": 40, "b": 2})));
    assert_eq!(text_of(&r), "42", "{r}");
    c.finish_with(0);

    let end = end_of(&tape);
    assert_eq!(
        end["messages"].as_u64().unwrap(),
        recorded["messages"].as_u64().unwrap() + 2,
        "{end}"
    );
    assert_eq!(
        end["exchanges"].as_u64().unwrap(),
        recorded["exchanges"].as_u64().unwrap() + 1,
        "{end}"
    );
    assert_eq!(end["raw"], recorded["raw"], "{end}");
    assert_eq!(end["incomplete"], true, "{end}");
    assert_contains(&end["reason"].to_string(), "cut off");
    let lines = tape_lines(&tape);
    let event = &lines[position(&lines, "the append event", |l| l["what"] == "append")];
    assert_eq!(event["cut"]["torn"]["text"], torn, "{event}");
    let v = Mt::new(["verify"]).arg(&tape).run().status(1);
    assert_contains(&v.stdout, &format!("cut off at line {cut_line}"));
    assert_contains(&v.stdout, "appended");
    Mt::new(["show"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains(&format!("cut off before line {cut_line}"));
    // A second append keeps the count and the record of the cut.
    let mut c = play_live(&tape, &["--on-miss", "live"], &server);
    handshake(&mut c, json!({}));
    let r = c.call(3, "tools/call", call("add", json!({"a": 1, "b": 2})));
    assert_eq!(text_of(&r), "3", "{r}");
    c.finish_with(0);
    let again = end_of(&tape);
    assert_eq!(
        again["exchanges"].as_u64().unwrap(),
        end["exchanges"].as_u64().unwrap() + 1,
        "{again}"
    );
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .status(1)
        .stdout_contains(&format!("cut off at line {cut_line}"));
}

/// Bytes after a tape's closing line are what `verify` calls tampering: appending would cut
/// them off with the closing line, and the evidence with them. Refused, naming the line.
#[test]
fn a_tape_with_bytes_after_its_closing_line_is_not_appended_to() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let server = demo_server("healthy");
    record_with(&tape, &server, json!({}), |c| {
        c.call(1, "tools/call", call("add", json!({"a": 1, "b": 1})));
    });
    let mut bytes = std::fs::read(&tape).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"msg\",\"se");
    std::fs::write(&tape, &bytes).unwrap();
    let lines = bytes.split(|&b| b == b'\n').count();
    let mut c = play_live(&tape, &["--on-miss", "live"], &server);
    handshake(&mut c, json!({}));
    let r = c.call(2, "tools/call", call("add", json!({"a": 40, "b": 2})));
    assert_eq!(text_of(&r), "42", "{r}");
    let err = c.finish_with(0);
    assert_contains(&err, &format!("line {lines}"));
    assert_contains(&err, "after the closing line");
    assert_eq!(
        std::fs::read(&tape).unwrap(),
        bytes,
        "the tape is untouched"
    );
}

/// `--on-miss live` does not append to a tape whose recording is still going on: cutting its
/// closing place under the recorder would break the recording (and, where the recorder writes
/// through a map of the file, end it with SIGBUS). The live answer is still served; the
/// recording goes on and closes whole.
#[test]
fn a_tape_still_being_recorded_is_not_appended_to() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let server = demo_server("healthy");
    let mut rec = LineClient::spawn(&record_cmd(&tape, &server));
    handshake(&mut rec, json!({}));
    let add = |c: &mut LineClient, id: i64, a: i64| {
        let r = c.call(id, "tools/call", call("add", json!({"a": a, "b": 1})));
        assert_eq!(text_of(&r), (a + 1).to_string(), "{r}");
    };
    add(&mut rec, 1, 1);
    let mut play = play_live(&tape, &["--on-miss", "live"], &server);
    handshake(&mut play, json!({}));
    add(&mut play, 1, 41);
    let stderr = play.finish_with(0);
    assert_contains(
        &stderr,
        "the tape is being written by another process (a recording still going on?)",
    );
    assert_contains(&stderr, "the live answers are served but not taped");
    add(&mut rec, 2, 2);
    rec.finish_with(0);
    assert_verifies(&tape);
    assert_eq!(appended(&tape), 0);
}

#[test]
fn append_to_another_tape_leaves_the_played_one_untouched() {
    let dir = tmp();
    let tape = record_memory(dir.path());
    let before = std::fs::read(&tape).unwrap();
    let other = dir.path().join("misses.jsonl");
    let (server, env) = memory_in(dir.path());
    let mut c = play_live_env(
        &tape,
        &["--on-miss", "live", "--append-to", &s(&other)],
        &server,
        &env,
    );
    handshake(&mut c, json!({}));
    c.call(
        3,
        "tools/call",
        call("create_entities", entities("elsewhere")),
    );
    let err = c.finish_with(0);
    assert_contains(&err, &format!("to {}", other.display()));
    assert_eq!(std::fs::read(&tape).unwrap(), before);
    assert_verifies(&other);
    let msgs = tape_msgs(&other);
    assert_eq!(msgs.len(), 2, "{msgs:#?}");
    assert_eq!(msgs[0]["msg"]["params"]["name"], "create_entities");
}

/// `--append-to` a tape that was there adds the played server's misses under the played label,
/// which that tape does not declare: its label is then on message lines only. `--server` takes
/// it, and a label the tape has not is refused listing it beside the declared one, by play,
/// show, check, diff, prune and report --diff alike; the HTML report shows its conversation.
#[test]
fn a_label_appended_to_another_tape_is_listed_where_server_is_refused() {
    let dir = tmp();
    let played = record_memory(dir.path());
    let (server, env) = memory_in(dir.path());
    let other = dir.path().join("notes.jsonl");
    let mut argv = record_cmd(&other, &server);
    argv.splice(2..2, ["--label".to_string(), "notes".to_string()]);
    let mut cmd = command(&argv);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let mut c = LineClient::spawn_cmd(cmd);
    handshake(&mut c, json!({}));
    c.call(1, "tools/call", call("read_graph", json!({})));
    c.finish_with(0);

    let mut c = play_live_env(
        &played,
        &["--on-miss", "live", "--append-to", &s(&other)],
        &server,
        &env,
    );
    handshake(&mut c, json!({}));
    c.call(3, "tools/call", call("create_entities", entities("noted")));
    c.finish_with(0);
    assert_verifies(&other);
    let lines = tape_lines(&other);
    let declared: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "server")
        .map(|l| &l["server"])
        .collect();
    assert_eq!(declared, [&json!("notes")], "{lines:#?}");
    assert!(
        tape_msgs(&other).iter().any(|m| m["server"] == "default"),
        "{lines:#?}"
    );

    let has = "no server labelled nope; this tape has: notes, default\n";
    let named = format!("{}: {has}", other.display());
    Mt::new(["show", "--server", "default"])
        .arg(&other)
        .run()
        .success()
        .stdout_contains("create_entities");
    // Its statistics count both: the label only message lines carry is a server of the tape.
    let stats: Value = Mt::new(["show", "--stats", "--json"])
        .arg(&other)
        .run()
        .success()
        .json();
    let rows: Vec<(&str, &str)> = stats["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["method"] == "tools/call")
        .map(|r| (r["server"].as_str().unwrap(), r["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [("notes", "read_graph"), ("default", "create_entities")],
        "{stats:#}"
    );
    for command in [&["play"][..], &["show"], &["show", "--stats"]] {
        Mt::new(command)
            .args(["--server", "nope"])
            .arg(&other)
            .run()
            .status(64)
            .stderr_contains(has);
    }
    Mt::new(["check", "--server", "nope"])
        .arg(&other)
        .arg("--")
        .args(&server)
        .run()
        .status(64)
        .stderr_contains(has);
    Mt::new(["diff", "--server", "nope"])
        .arg(&other)
        .arg(&other)
        .run()
        .status(64)
        .stderr_contains(&named);
    Mt::new(["report", "--server", "nope", "-o"])
        .arg(dir.path().join("page.html"))
        .arg(&other)
        .arg("--diff")
        .arg(&other)
        .run()
        .status(64)
        .stderr_contains(&named);
    // Its HTML report shows both conversations, a lane each.
    let page = Mt::new(["report", "-o", "-"]).arg(&other).run().success();
    for label in ["notes", "default"] {
        assert_contains(&page.stdout, &format!("{{\"label\":\"{label}\","));
    }
    let report = dir.path().join("nope.json");
    let doc = json!({"format": "mcptape-unused-report", "version": 1, "tape": s(&other),
                     "server": "nope", "exchanges": 0, "unused": [], "used": []});
    std::fs::write(&report, doc.to_string()).unwrap();
    Mt::new(["prune", "--unused"])
        .arg(&report)
        .arg(&other)
        .run()
        .status(64)
        .stderr_contains(has);
}

// --- over HTTP -------------------------------------------------------------------------------

/// `mcptape play TAPE --listen 127.0.0.1:0 ARGS…`.
fn play_listen(tape: &Path, args: &[&str]) -> Served {
    let tape = s(tape);
    let mut argv = vec!["play", &tape, "--listen", "127.0.0.1:0"];
    argv.extend(args);
    Served::spawn(&argv)
}

/// The JSON-RPC messages of an SSE or JSON answer body.
fn messages_of(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return vec![v];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// An HTTP session with play: `initialize` (its session id kept) and `initialized`.
fn http_session(url: &str) -> String {
    let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
    let sid = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let _ = init.body();
    let (st, _) = http(
        url,
        "POST",
        &post_headers(&[("Mcp-Session-Id", &sid)]),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(st, 202);
    sid
}

fn http_call(url: &str, sid: &str, msg: &Value) -> Vec<Value> {
    let (st, body) = http(
        url,
        "POST",
        &post_headers(&[("Mcp-Session-Id", sid)]),
        msg.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{}", text(&body));
    messages_of(&body)
}

#[test]
fn over_http_a_miss_goes_to_server_everything_over_http_and_to_the_memory_server_over_stdio() {
    let dir = tmp();
    let tape = dir.path().join("e.jsonl");
    record_with(&tape, &everything(), json!({}), |c| {
        c.call(
            1,
            "tools/call",
            call("echo", json!({"message": "recorded"})),
        );
    });

    // The live server: server-everything over Streamable HTTP (on loopback).
    let (_everything, port) = listening_on_0(
        "everything",
        dir.path().join("e.log"),
        everything_http_cmd("streamableHttp"),
        LISTENING_ON,
    );
    let live_url = format!("http://127.0.0.1:{port}/mcp");
    let play = play_listen(&tape, &["--on-miss", "live", "--url", &live_url]);
    let sid = http_session(&play.url);
    let recorded = http_call(
        &play.url,
        &sid,
        &req(
            1,
            "tools/call",
            call("echo", json!({"message": "recorded"})),
        ),
    );
    assert_eq!(text_of(recorded.last().unwrap()), "Echo: recorded");
    // The client gets the live answer as it is; the tape gets it redacted.
    let key = "sk-proj-Fx3kQ9mZ2pLw7Rt5Yv1Nb8Hc4Jd6Gs0Ae";
    let msg = format!("live api_key={key}");
    let live = http_call(
        &play.url,
        &sid,
        &req("x", "tools/call", call("echo", json!({"message": msg}))),
    );
    let answer = live.last().unwrap();
    assert_eq!(answer["id"], "x");
    assert_eq!(text_of(answer), format!("Echo: {msg}"));
    let err = play.stop();
    assert_contains(&err, "answered live 1");
    assert_verifies(&tape);
    let appended: Vec<Value> = tape_msgs(&tape)
        .into_iter()
        .filter(|m| m["appended"] == true)
        .collect();
    assert_eq!(appended.len(), 2, "{appended:#?}");
    let taped = std::fs::read_to_string(&tape).unwrap();
    assert!(!taped.contains(key), "the key is not on the tape:\n{taped}");
    assert_contains(&taped, "[REDACTED:");

    // The memory server over stdio behind play --listen: one live process per HTTP session.
    let mtape = record_memory(dir.path());
    let (server, env) = memory_in(dir.path());
    let mut args: Vec<String> = ["play", &s(&mtape), "--listen", "127.0.0.1:0"]
        .iter()
        .chain(&["--on-miss", "live", "--"])
        .map(|a| a.to_string())
        .collect();
    args.extend(server);
    let play = Served::spawn_env(&args, &env);
    let sid = http_session(&play.url);
    let created = http_call(
        &play.url,
        &sid,
        &req(
            5,
            "tools/call",
            call("create_entities", entities("over http")),
        ),
    );
    assert_eq!(
        created.last().unwrap()["result"]["structuredContent"]["entities"][0]["name"],
        "mcptape"
    );
    let err = play.stop();
    assert_contains(&err, "answered live 1");
    assert_verifies(&mtape);
    assert_contains(&std::fs::read_to_string(&env[0].1).unwrap(), "over http");
}

// --- line breaks inside a message, between the two transports --------------------------------

/// A tape of [`cr_server`], recorded over stdio: one `echo` call.
fn cr_tape(dir: &Path) -> (Vec<String>, PathBuf) {
    let server = cr_server(dir);
    let tape = dir.join("cr.jsonl");
    record_with(&tape, &server, json!({}), |c| {
        let r = c.call(1, "tools/call", call("echo", json!({"text": "recorded"})));
        assert_eq!(text_of(&r), "cr:recorded");
    });
    (server, tape)
}

/// `mcptape play TAPE --on-miss live --url URL` (over stdio) as a line client.
fn play_live_url(tape: &Path, url: &str) -> LineClient {
    let mut argv = play_cmd(tape);
    argv.extend(["--on-miss", "live", "--url", url].map(String::from));
    LineClient::spawn(&argv)
}

#[test]
fn a_pretty_printed_post_reaches_a_live_stdio_server_as_one_message() {
    // Play over HTTP, a stdio server live behind it: a POSTed body with line breaks between
    // its tokens (curl, a hand-written test, a client that pretty-prints) went to the server's
    // stdin as several broken lines, and the client waited for an answer that never came.
    let dir = tmp();
    let (server, tape) = cr_tape(dir.path());
    let mut args: Vec<String> = ["play", &s(&tape), "--listen", "127.0.0.1:0"]
        .iter()
        .chain(&["--on-miss", "live", "--"])
        .map(|a| a.to_string())
        .collect();
    args.extend(server);
    let play = Served::spawn_env(&args, &[]);
    let sid = http_session(&play.url);
    let pretty = "{\n  \"jsonrpc\": \"2.0\",\r\n  \"id\": 7,\n  \"method\": \"tools/call\",\n  \"params\": {\"name\": \"echo\", \"arguments\": {\"text\": \"live\"}}\n}\n";
    let (st, body) = http(
        &play.url,
        "POST",
        &post_headers(&[("Mcp-Session-Id", &sid)]),
        pretty.as_bytes(),
    );
    assert_eq!(st, 200, "{}", text(&body));
    let got = sse_messages(&body);
    let answer = got
        .last()
        .unwrap_or_else(|| panic!("no answer: {}", text(&body)));
    assert_eq!(answer["id"], 7, "{}", text(&body));
    assert_eq!(text_of(answer), "cr:live");
    let err = play.stop();
    assert_contains(&err, "answered live 1");
    assert_verifies(&tape);
    let appended: Vec<Value> = tape_msgs(&tape)
        .into_iter()
        .filter(|m| m["appended"] == true && m["dir"] == "c2s")
        .collect();
    assert_eq!(appended.len(), 1, "{appended:#?}");
    assert_eq!(appended[0]["msg"]["params"]["arguments"]["text"], "live");
}

#[test]
fn a_live_http_servers_pretty_printed_answers_reach_a_stdio_client_of_play_one_line_each() {
    // Play over stdio, an HTTP server live behind it: an answer pretty-printed as a JSON body,
    // or as an SSE event over several `data:` lines (joined with line breaks), went to the
    // client as several lines, none of them a message.
    let dir = tmp();
    let (_, tape) = cr_tape(dir.path());
    let handler = r#"
class H(Quiet):
    def do_POST(self):
        msg, method, rid = self.read_msg()
        if rid is None:
            return self.accepted()
        if method == "initialize":
            v = msg["params"]["protocolVersion"]
            return self.send_json({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": v,
                "capabilities": {"tools": {}}, "serverInfo": {"name": "pretty", "version": "1"}}})
        how = msg["params"]["arguments"]["text"]
        answer = json.dumps({"jsonrpc": "2.0", "id": rid,
            "result": {"content": [{"type": "text", "text": "pretty:" + how}]}}, indent=2)
        if how == "json":
            body = answer.replace("\n", "\r\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.start_sse()
            self.w("".join("data: " + l + "\n" for l in answer.split("\n")) + "\n")
"#;
    let (_up, port) = py_upstream(dir.path(), "pretty", handler, &[]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut c = play_live_url(&tape, &url);
    handshake(&mut c, json!({}));
    for (id, how) in [(2, "json"), (3, "sse")] {
        let r = c.call(id, "tools/call", call("echo", json!({"text": how})));
        assert_eq!(text_of(&r), format!("pretty:{how}"), "{r}");
    }
    let err = c.finish_with(0);
    assert_contains(&err, "answered live 2");
    assert_verifies(&tape);
}

#[test]
fn a_live_servers_request_while_no_call_is_open_reaches_a_stdio_client_as_a_whole_line() {
    // A live stdio server that asks the client something (roots/list) after its answer, with
    // no forwarded call open: play sent the request to its stdout without a line terminator,
    // so the client read nothing until the next message, glued to it.
    let dir = tmp();
    let script = dir.path().join("asker.py");
    std::fs::write(
        &script,
        r#"
import json, sys, time
def out(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    method, rid = m.get("method"), m.get("id")
    if method == "initialize":
        out({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-06-18",
             "capabilities": {"tools": {}}, "serverInfo": {"name": "asker", "version": "1"}}})
    elif method == "tools/call":
        out({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text",
             "text": "live:" + m["params"]["name"]}]}})
        if m["params"]["name"] == "ask":
            time.sleep(0.3)
            out({"jsonrpc": "2.0", "id": "late", "method": "roots/list"})
    elif method is None and rid == "late":
        sys.stderr.write("answered: " + json.dumps(m["result"]) + "\n")
        out({"jsonrpc": "2.0", "method": "notifications/message",
             "params": {"level": "info", "data": "roots: " + json.dumps(m["result"])}})
"#,
    )
    .unwrap();
    let server = vec![python(), s(&script)];
    let tape = dir.path().join("asker.jsonl");
    record_with(&tape, &server, json!({"roots": {}}), |c| {
        let r = c.call(1, "tools/call", call("recorded", json!({})));
        assert_eq!(text_of(&r), "live:recorded");
    });
    let mut c = play_live(&tape, &["--on-miss", "live"], &server);
    handshake(&mut c, json!({"roots": {}}));
    let r = c.call(2, "tools/call", call("ask", json!({})));
    assert_eq!(text_of(&r), "live:ask");
    let late = c.recv();
    assert_eq!(late["method"], "roots/list", "{late}");
    let roots = json!({"roots": [{"uri": "file:///tmp", "name": "tmp"}]});
    c.send(&json!({"jsonrpc": "2.0", "id": late["id"], "result": roots}));
    // The answer went back to the live server, under its own id.
    let note = c.recv();
    assert_eq!(note["method"], "notifications/message", "{note}");
    let data = note["params"]["data"].as_str().unwrap_or_default();
    let back: Value = serde_json::from_str(data.strip_prefix("roots: ").unwrap_or("null"))
        .unwrap_or_else(|e| panic!("{e}: {note}"));
    assert_eq!(back, roots, "{note}");
    c.finish_with(0);
}

#[test]
fn a_live_server_that_answers_with_no_message_is_an_error_that_says_so_at_once() {
    // A `--url` that is a web page, not an MCP server: it answers every POST `200` with HTML.
    // That counted as an acknowledgement: the client waited out the handshake's timeout, then
    // was told of no answer; and once such a body was an error, it was told the server
    // "exited during the handshake". It now gets the reason, at once.
    let dir = tmp();
    let (_, tape) = cr_tape(dir.path());
    let handler = r#"
class H(Quiet):
    def do_POST(self):
        self.read_msg()
        body = b"<html><body>Welcome</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
"#;
    let (_up, port) = py_upstream(dir.path(), "page", handler, &[]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut c = play_live_url(&tape, &url);
    handshake(&mut c, json!({}));
    let r = c.call(2, "tools/call", call("echo", json!({"text": "missed"})));
    let message = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_contains(
        &message,
        "HTTP 200 OK with no JSON-RPC message in its body: <html>",
    );
    // A call the live server could not answer is a miss (exit 1), and stderr says why.
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        "its answer to the handshake: HTTP 200 OK with no JSON-RPC message",
    );
}

// --- record modes (`mcptape vcr`) ------------------------------------------------------------

/// The memory server behind `sh`, which first leaves a marker file: whether the server was
/// started at all.
fn marked_memory(dir: &Path) -> (Vec<String>, PathBuf) {
    let marker = dir.join("server-started");
    let script = format!("touch '{}'; exec '{}'", marker.display(), memory()[0]);
    (vec!["/bin/sh".into(), "-c".into(), script], marker)
}

/// `mcptape vcr ARGS… -- SERVER…` as a line client, with the memory server's file in `dir` and
/// `CI` as given.
fn vcr(dir: &Path, args: &[&str], server: &[String], ci: Option<&str>) -> LineClient {
    let mut argv: Vec<String> = vec![s(bin()), "vcr".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.push("--".into());
    argv.extend(server.iter().cloned());
    let mut cmd = command(&argv);
    cmd.env("MEMORY_FILE_PATH", dir.join("memory.json"));
    match ci {
        Some(v) => cmd.env("CI", v),
        None => cmd.env_remove("CI"),
    };
    LineClient::spawn_cmd(cmd)
}

fn read_graph(c: &mut LineClient, id: i64) -> Value {
    c.call(id, "tools/call", call("read_graph", json!({})))
}

#[test]
fn vcr_once_records_then_plays_with_no_server_process_the_second_time() {
    let dir = tmp();
    let tape = dir.path().join("once.jsonl");
    let (server, marker) = marked_memory(dir.path());
    let args = ["--tape", &s(&tape)];

    let mut c = vcr(dir.path(), &args, &server, None);
    handshake(&mut c, json!({}));
    let recorded = read_graph(&mut c, 1);
    let err = c.finish_with(0);
    assert_contains(
        &err,
        &format!(
            "mcptape vcr: mode once (the default), {}: no tape there yet: recording it",
            tape.display()
        ),
    );
    assert!(marker.exists(), "the first run started the server");
    std::fs::remove_file(&marker).unwrap();
    assert_verifies(&tape);

    let mut c = vcr(dir.path(), &args, &server, None);
    handshake(&mut c, json!({}));
    let played = read_graph(&mut c, 7);
    assert_eq!(played["result"], recorded["result"]);
    assert_eq!(played["id"], 7);
    // A call the tape does not hold is a strict miss: no server to ask.
    let miss = c.call(8, "tools/call", call("create_entities", entities("x")));
    assert_eq!(miss["error"]["code"], -32099, "{miss}");
    let err = c.finish_with(1);
    assert_contains(
        &err,
        "the tape is there: playing it strictly, the server is not started",
    );
    assert!(!marker.exists(), "no server process the second time");
}

#[test]
fn vcr_with_ci_set_refuses_to_record_and_says_so_and_plays_strictly() {
    let dir = tmp();
    let tape = dir.path().join("ci.jsonl");
    let (server, marker) = marked_memory(dir.path());
    let args = ["--tape", &s(&tape)];
    let c = vcr(dir.path(), &args, &server, Some("true"));
    let err = c.finish_with(66);
    assert_contains(&err, "mode none ($CI is set and no --mode was named)");
    assert_contains(&err, "refusing to record");
    assert_contains(&err, "unset $CI or name a --mode to record");
    assert!(!tape.exists() && !marker.exists());

    // Named, a mode records in CI too; then, with no mode, CI plays it strictly.
    let mut c = vcr(
        dir.path(),
        &["--mode", "once", "--tape", &s(&tape)],
        &server,
        Some("true"),
    );
    handshake(&mut c, json!({}));
    read_graph(&mut c, 1);
    c.finish_with(0);
    std::fs::remove_file(&marker).unwrap();
    let mut c = vcr(dir.path(), &args, &server, Some("1"));
    handshake(&mut c, json!({}));
    read_graph(&mut c, 2);
    let err = c.finish_with(0);
    assert_contains(&err, "mode none ($CI is set and no --mode was named)");
    assert!(!marker.exists());
    // `CI=false` is not CI.
    let c = vcr(
        dir.path(),
        &["--tape", &s(dir.path().join("other.jsonl"))],
        &server,
        Some("false"),
    );
    assert_contains(&c.finish_with(0), "mode once (the default)");
}

#[test]
fn vcr_new_appends_what_is_missing_and_all_records_again_keeping_the_old_tape() {
    let dir = tmp();
    let tape = dir.path().join("new.jsonl");
    let (server, marker) = marked_memory(dir.path());
    let args = ["--mode", "new", "--tape", &s(&tape)];
    let mut c = vcr(dir.path(), &args, &server, None);
    handshake(&mut c, json!({}));
    read_graph(&mut c, 1);
    c.finish_with(0);

    let mut c = vcr(dir.path(), &args, &server, None);
    handshake(&mut c, json!({}));
    read_graph(&mut c, 2);
    let created = c.call(
        3,
        "tools/call",
        call("create_entities", entities("new mode")),
    );
    assert!(created.get("result").is_some(), "{created}");
    let err = c.finish_with(0);
    assert_contains(
        &err,
        "what it does not hold goes to the server and is appended",
    );
    assert_contains(&err, "answered live 1");
    assert_verifies(&tape);
    assert_eq!(appended(&tape), 2);

    let before = std::fs::read(&tape).unwrap();
    std::fs::remove_file(&marker).unwrap();
    let mut c = vcr(
        dir.path(),
        &["--mode", "all", "--tape", &s(&tape)],
        &server,
        Some("true"),
    );
    handshake(&mut c, json!({}));
    read_graph(&mut c, 1);
    let err = c.finish_with(0);
    assert_contains(&err, "mode all (--mode)");
    assert!(marker.exists());
    let bak = dir.path().join("new.jsonl.bak");
    assert_eq!(
        std::fs::read(&bak).unwrap(),
        before,
        "the old tape kept as .bak"
    );
    assert!(tape_msgs(&tape).iter().all(|m| m.get("appended").is_none()));
}

/// The Python SDK client's `everything` scenario, recorded; played again with the sampling
/// tool live: server-everything asks the client to sample through play, the client's SDK
/// answers, and the client sees what it saw when recording. Every other step comes from the
/// tape.
#[test]
fn the_python_client_answers_a_live_servers_sampling_request_through_play() {
    let dir = tmp();
    let tape = dir.path().join("everything.jsonl");
    let recorded = py_ok(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        "through record",
    );
    let mut argv = play_cmd(&tape);
    argv.extend([
        "--live".into(),
        "tool:trigger-sampling-request".into(),
        "--".into(),
    ]);
    argv.extend(everything());
    let replayed = py_ok("everything", "legacy", &argv, "through play --live");
    let step = |t: &Value, name: &str| -> Value {
        t["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["step"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no step {name:?} in {}", pretty(t)))
    };
    let sampling = step(&replayed, "call trigger-sampling-request");
    assert_eq!(sampling, step(&recorded, "call trigger-sampling-request"));
    assert_eq!(
        sampling["observed"][0]["server_request"],
        "sampling/createMessage"
    );
    for other in ["call echo", "call trigger-long-running-operation"] {
        assert_eq!(step(&replayed, other), step(&recorded, other), "{other}");
    }
}

/// The `_meta` every 2026-07-28 request carries.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "1"}
    })
}

fn modern_call(id: i64, name: &str, arguments: Value) -> Value {
    let mut p = call(name, arguments);
    p["_meta"] = modern_meta();
    req(id, "tools/call", p)
}

/// The 2026-07-28 era has no handshake: play sets up the live server with a `server/discover`
/// carrying the request's `_meta`, which is not appended; the live answer is.
#[test]
fn a_2026_miss_goes_to_the_python_server_after_a_discovery_that_is_not_taped() {
    let dir = tmp();
    let tape = dir.path().join("modern.jsonl");
    let mut c = LineClient::spawn(&record_cmd(&tape, &py_server()));
    let (echoed, _) = c.ask(&modern_call(1, "echo", json!({"text": "taped"})));
    assert_eq!(text_of(&echoed), "echo: taped");
    c.finish_with(0);

    let mut c = play_live(&tape, &["--on-miss", "live"], &py_server());
    let (again, _) = c.ask(&modern_call(5, "echo", json!({"text": "taped"})));
    assert_eq!(again["result"], echoed["result"]);
    let (added, _) = c.ask(&modern_call(6, "add", json!({"b": 2, "a": 40})));
    assert_eq!(added["id"], 6);
    assert_eq!(text_of(&added), "42");
    assert_eq!(added["result"]["resultType"], "complete", "{added}");
    let err = c.finish_with(0);
    assert_contains(&err, "served 1, missed 0, drifted 0, answered live 1");

    assert_verifies(&tape);
    let appended: Vec<Value> = tape_msgs(&tape)
        .into_iter()
        .filter(|m| m["appended"] == true)
        .collect();
    let methods: Vec<&Value> = appended.iter().map(|m| &m["method"]).collect();
    assert_eq!(
        methods,
        [&json!("tools/call"), &Value::Null],
        "{appended:#?}"
    );
    assert!(tape_msgs(&tape)
        .iter()
        .all(|m| m["method"] != "server/discover"));
}

/// Stdin for a session of the demo server: the handshake, then `add` of each pair.
fn adds(pairs: &[(i64, i64)]) -> String {
    let mut lines = vec![
        req(0, "initialize", init_params()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for (i, (a, b)) in pairs.iter().enumerate() {
        let id = i as i64 + 1;
        lines.push(req(id, "tools/call", call("add", json!({"a": a, "b": b}))));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A tape path that starts with `-`, given as `--tape=-x.jsonl` (clap's `=` form: a value,
/// whatever it starts with), is a file of that name, as for `record --tape=-x.jsonl` and
/// `play -- -x.jsonl`. vcr handed it on to record's and play's parsers as a separate word,
/// which they took for an option: exit 64, and the error said `error:` twice
/// (`mcptape: error: error: unexpected argument '-x' found`, with the usage of a command line
/// the user never typed).
#[test]
fn vcr_takes_a_tape_path_that_starts_with_a_dash_in_every_mode() {
    let dir = tmp();
    let server = demo_server("healthy");
    let vcr_run = |mode: &str, pairs: &[(i64, i64)]| {
        let run = Mt::new(["vcr", "--mode", mode, "--tape=-x.jsonl", "--"])
            .args(&server)
            .dir(dir.path())
            .stdin(adds(pairs))
            .run();
        assert!(!run.stderr.contains("error: error:"), "{}", run.console());
        run.success()
    };
    vcr_run("once", &[(1, 1)])
        .stdout_contains(r#""text":"2""#)
        .stderr_contains("-x.jsonl: no tape there yet: recording it")
        .stderr_contains("recorded 5 messages (2 exchanges) to -x.jsonl");
    let tape = dir.path().join("-x.jsonl");
    assert_eq!(tape_msgs(&tape).len(), 5);
    vcr_run("once", &[(1, 1)])
        .stdout_contains(r#""text":"2""#)
        .stderr_contains("playing it strictly, the server is not started");
    vcr_run("new", &[(1, 1), (40, 2)])
        .stdout_contains(r#""text":"42""#)
        .stderr_contains("appended 1 exchange from the live server to -x.jsonl");
    assert_eq!(appended(&tape), 2);
    assert_verifies(&tape);
}

/// `vcr --mode new` over a tape it cannot append to (signed and no key; no hash chain; one
/// that breaks, found at the first miss) said what `play` can do — `name another tape with
/// --append-to` — but vcr has no `--append-to`. It names what vcr can do: set the key, play
/// the tape without appending (`--mode once`), record it again (`--mode all`). `play` still
/// names `--append-to`.
#[test]
fn vcr_new_over_a_tape_it_cannot_append_to_names_what_vcr_can_do() {
    let dir = tmp();
    let server = demo_server("healthy");
    let vcr_new = |tape: &Path| {
        Mt::new(["vcr", "--mode", "new", "--tape"])
            .arg(tape)
            .arg("--")
            .args(&server)
            .stdin(adds(&[(1, 1), (40, 2)]))
            .run()
    };
    let play_new = |tape: &Path| {
        Mt::new(["play", "--on-miss", "live"])
            .arg(tape)
            .arg("--")
            .args(&server)
            .stdin(adds(&[(1, 1), (40, 2)]))
            .run()
    };
    let no_append_to =
        |run: &Run| assert!(!run.stderr.contains("--append-to"), "{}", run.console());

    let signed = dir.path().join("signed.jsonl");
    Mt::new(["record", "--sign", "--tape"])
        .arg(&signed)
        .arg("--")
        .args(&server)
        .env("MCPTAPE_SIGNING_KEY", "a signing key for the test")
        .stdin(adds(&[(1, 1)]))
        .run()
        .success();
    let run = vcr_new(&signed).status(64).stderr_contains(&format!(
        "mcptape: error: {}: the tape is signed: set MCPTAPE_SIGNING_KEY to sign it again after appending, or play it without appending (--mode once)",
        s(&signed)
    ));
    no_append_to(&run);
    assert_eq!(run.stderr.matches("error:").count(), 1, "{}", run.console());
    play_new(&signed).status(64).stderr_contains(
        "the tape is signed: set MCPTAPE_SIGNING_KEY to sign it again after appending, or name another tape with --append-to",
    );

    let unchained = dir.path().join("unchained.jsonl");
    write_tape(
        &unchained,
        &[(
            "c2s",
            req(1, "tools/call", call("add", json!({"a": 1, "b": 1}))),
        )],
        true,
    );
    let run = vcr_new(&unchained).status(64).stderr_contains(&format!(
        "{}: --mode new cannot append to a tape without a hash chain (format 1.0); play it without appending (--mode once), or record it again with --mode all (the old tape kept as .bak)",
        s(&unchained)
    ));
    no_append_to(&run);
    play_new(&unchained).status(64).stderr_contains(
        "--on-miss live cannot append to a tape without a hash chain (format 1.0); name another tape with --append-to",
    );

    // A chain that breaks is found when the first miss opens the tape: the live answer is
    // served, not taped.
    let broken = dir.path().join("broken.jsonl");
    Mt::new(["record", "--tape"])
        .arg(&broken)
        .arg("--")
        .args(&server)
        .stdin(adds(&[(1, 1)]))
        .run()
        .success();
    let text = std::fs::read_to_string(&broken).unwrap();
    let edited = text.replacen(r#""text":"2""#, r#""text":"3""#, 1);
    assert_ne!(edited, text);
    std::fs::write(&broken, &edited).unwrap();
    let run = vcr_new(&broken)
        .success()
        .stdout_contains(r#""text":"42""#)
        .stderr_contains("(`mcptape verify` tells more); play it without appending (--mode once); the live answers are served but not taped");
    no_append_to(&run);
    play_new(&broken)
        .success()
        .stderr_contains("(`mcptape verify` tells more); name another tape with --append-to; the live answers are served but not taped");
    assert_eq!(std::fs::read_to_string(&broken).unwrap(), edited);
}
