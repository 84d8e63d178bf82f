//! Play policies on matching: `--repeat`, `--ignore-param`, `--match`, and the unused
//! recordings (`--unused-report`, `mcptape prune`). Tapes are recorded from real peers (the
//! Python SDK server, server-everything, server-memory), then played over stdio and HTTP.

use crate::harness::*;
use crate::record::record_mt;
use serde_json::{json, Value};
use std::path::Path;

/// `mcptape play TAPE FLAGS…` as a line client.
fn play(tape: &Path, flags: &[&str]) -> LineClient {
    Mt::new(["play"]).arg(tape).args(flags).spawn()
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// The first text content of a tool answer.
fn text_of(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool answer with text: {v}"))
        .to_string()
}

/// Records `server` answering the handshake and then each `tools/call` of `calls` (ids 1, 2…),
/// with `env` set for it; returns the answers.
fn record_calls(
    tape: &Path,
    server: &[String],
    env: &[(&str, &str)],
    calls: &[Value],
) -> Vec<Value> {
    let mut c = record_mt(tape, &[], server).envs(env).spawn();
    c.initialize();
    let answers: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let v = c.call(i as i64 + 1, "tools/call", p.clone());
            assert!(v.get("result").is_some(), "{p} answered {v}");
            v
        })
        .collect();
    c.finish_with(0);
    answers
}

/// A tape of the Python SDK server's `counter` called twice: answers 1 and 2.
fn counter_tape(dir: &Path) -> std::path::PathBuf {
    let tape = dir.join("counter.jsonl");
    let answers = record_calls(
        &tape,
        &py_server(),
        &[],
        &[tool("counter", json!({})), tool("counter", json!({}))],
    );
    let texts: Vec<String> = answers.iter().map(text_of).collect();
    assert_eq!(texts, ["1", "2"]);
    tape
}

#[test]
fn repeats_error_last_and_cycle_over_stdio_with_the_python_sdk_server() {
    let dir = tmp();
    let tape = counter_tape(dir.path());
    for (flags, want, code) in [
        (&[][..], &["1", "2", "miss", "miss"][..], 1),
        (
            &["--repeat", "error"][..],
            &["1", "2", "miss", "miss"][..],
            1,
        ),
        (&["--repeat", "last"][..], &["1", "2", "2", "2"][..], 0),
        (&["--repeat", "cycle"][..], &["1", "2", "1", "2"][..], 0),
    ] {
        let mut c = play(&tape, flags);
        c.initialize();
        let got: Vec<String> = (0..4)
            .map(|i| {
                let v = c.call(10 + i, "tools/call", tool("counter", json!({})));
                match v.get("error") {
                    Some(e) => {
                        assert_eq!(e["code"], -32099, "{v}");
                        assert_contains(
                            e["message"].as_str().unwrap(),
                            "this call was recorded 2 times and every answer is used",
                        );
                        assert_eq!(e["data"]["mcptape"]["matcher"], "content", "{v}");
                        "miss".to_string()
                    }
                    None => text_of(&v),
                }
            })
            .collect();
        assert_eq!(got, want, "{flags:?}");
        let stderr = c.finish_with(code);
        if code == 0 {
            let mode = flags[1];
            assert_contains(
                &stderr,
                &format!("served 5, missed 0, drifted 0, 2 answers were repeats (--repeat {mode}); every recorded exchange was used"),
            );
        } else {
            assert_contains(&stderr, "served 3, missed 2, drifted 0;");
            assert_contains(&stderr, "matched by: --match content");
            assert_contains(
                &stderr,
                "(--repeat last or --repeat cycle serves used answers again)",
            );
            assert!(!stderr.contains("repeats"), "{stderr}");
        }
    }
}

/// `initialize` over HTTP: the session id play gave.
fn http_session(url: &str) -> String {
    let mut s = post_open_ok(url, &req(0, "initialize", init_params()));
    let id = s
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let _ = s.body();
    id
}

/// A request in session `session` over HTTP, its JSON-RPC answer (from JSON or SSE).
fn http_call(url: &str, session: &str, id: i64, method: &str, params: Value) -> Value {
    let body = req(id, method, params).to_string();
    let mut s = http_open(
        url,
        "POST",
        &post_headers(&[("Mcp-Session-Id", session)]),
        body.as_bytes(),
    );
    let sse = s.content_type().starts_with("text/event-stream");
    let raw = text(&s.body());
    let json = if sse {
        raw.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|v| v["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {id} in {raw}"))
    } else {
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("not JSON ({e}): {raw}"))
    };
    assert_eq!(json["id"], id, "{json}");
    json
}

/// server-memory's `read_graph` text: the entity names it lists.
fn graph_names(v: &Value) -> Vec<String> {
    let graph: Value = serde_json::from_str(&text_of(v)).expect("a graph as JSON");
    graph["entities"]
        .as_array()
        .expect("entities")
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// server-memory: read_graph (empty), create_entities(Ada), read_graph (Ada), search_nodes.
fn memory_tape(dir: &Path, name: &str) -> std::path::PathBuf {
    let tape = dir.join(name);
    let store = dir.join(format!("{name}.memory.jsonl"));
    let answers = record_calls(
        &tape,
        &memory(),
        &[("MEMORY_FILE_PATH", &s(&store))],
        &[
            tool("read_graph", json!({})),
            tool(
                "create_entities",
                json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}),
            ),
            tool("read_graph", json!({})),
            tool("search_nodes", json!({"query": "Ada"})),
        ],
    );
    assert_eq!(graph_names(&answers[0]), Vec::<String>::new());
    assert_eq!(graph_names(&answers[2]), ["Ada"]);
    tape
}

#[test]
fn repeats_over_http_are_per_session_with_server_memory() {
    let dir = tmp();
    let tape = memory_tape(dir.path(), "memory.jsonl");
    let read = || tool("read_graph", json!({}));
    for (mode, third) in [("cycle", vec![]), ("last", vec!["Ada".to_string()])] {
        let served = Served::spawn(&[
            "play",
            &s(&tape),
            "--listen",
            "127.0.0.1:0",
            "--repeat",
            mode,
        ]);
        // Two sessions, one after the other: each replays the tape from the start.
        for _ in 0..2 {
            let session = http_session(&served.url);
            let got: Vec<Vec<String>> = (1..=3)
                .map(|i| graph_names(&http_call(&served.url, &session, i, "tools/call", read())))
                .collect();
            assert_eq!(
                got,
                [vec![], vec!["Ada".to_string()], third.clone()],
                "--repeat {mode}"
            );
        }
        let stderr = served.stop();
        assert_contains(
            &stderr,
            &format!("served 8, missed 0, drifted 0, 2 answers were repeats (--repeat {mode}); 2 recorded exchanges never used:"),
        );
    }
}

/// server-everything's `echo`, with a nonce the client makes up on every run.
fn echo(message: &str, nonce: &str) -> Value {
    tool("echo", json!({"message": message, "nonce": nonce}))
}

const NONCE: &str = "tools/call:echo:$.arguments.nonce";

#[test]
fn ignore_param_leaves_a_volatile_argument_out_of_matching_over_stdio_and_http() {
    let dir = tmp();
    let tape = dir.path().join("echo.jsonl");
    let recorded = record_calls(&tape, &everything(), &[], &[echo("hello", "run-1-5f0c")]);
    assert_contains(&text_of(&recorded[0]), "hello");

    // Without it: a miss on the nonce alone.
    let mut c = play(&tape, &[]);
    c.initialize();
    let v = c.call(7, "tools/call", echo("hello", "run-2-9a1e"));
    assert_contains(
        v["error"]["message"].as_str().unwrap(),
        "$.arguments.nonce recorded \"run-1-5f0c\" asked \"run-2-9a1e\"",
    );
    c.finish_with(1);

    // With it: served, over stdio; another message is still a miss, which names what was
    // ignored.
    let mut c = play(&tape, &["--ignore-param", NONCE]);
    c.initialize();
    let v = c.call(7, "tools/call", echo("hello", "run-2-9a1e"));
    assert_eq!(v["result"], recorded[0]["result"], "{v}");
    let v = c.call(8, "tools/call", echo("bye", "run-2-77d0"));
    let e = &v["error"];
    assert_contains(
        e["message"].as_str().unwrap(),
        &format!("(--match content, ignoring {NONCE})"),
    );
    assert_eq!(e["data"]["mcptape"]["ignored"], json!([NONCE]));
    assert_eq!(
        e["data"]["mcptape"]["asked"],
        json!({"name": "echo", "arguments": {"message": "bye"}})
    );
    assert_eq!(
        e["data"]["mcptape"]["nearest"][0]["differences"],
        json!([{"path": "$.arguments.message", "left": "hello", "right": "bye"}])
    );
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        &format!("matched by: --match content, ignoring {NONCE}"),
    );

    // Over HTTP too; unscoped, the path applies to every method.
    let served = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--ignore-param",
        "$.arguments.nonce",
    ]);
    let session = http_session(&served.url);
    let v = http_call(
        &served.url,
        &session,
        3,
        "tools/call",
        echo("hello", "run-3-0b2d"),
    );
    assert_eq!(v["result"], recorded[0]["result"], "{v}");
    let stderr = served.stop();
    assert_contains(
        &stderr,
        "served 2, missed 0, drifted 0; every recorded exchange was used",
    );

    // A path that does not parse, or one with a matcher that compares no params: usage errors.
    Mt::new(["play"])
        .arg(&tape)
        .args(["--ignore-param", "$.arguments["])
        .run()
        .status(64)
        .stderr_contains("invalid --ignore-param \"$.arguments[\"");
    Mt::new(["play"])
        .arg(&tape)
        .args(["--ignore-param", "$.x", "--match", "method"])
        .run()
        .status(64)
        .stderr_contains("--ignore-param has no effect with --match method");
}

#[test]
fn match_method_serves_any_call_of_the_tool_in_recorded_order() {
    let dir = tmp();
    let tape = dir.path().join("sums.jsonl");
    let sum = |a: i64, b: i64| tool("get-sum", json!({"a": a, "b": b}));
    let recorded = record_calls(
        &tape,
        &everything(),
        &[],
        &[sum(1, 2), sum(3, 4), echo("x", "n")],
    );
    let mut c = play(&tape, &["--match", "method"]);
    c.initialize();
    // Other arguments: the get-sum calls in recorded order.
    assert_eq!(
        c.call(5, "tools/call", sum(10, 20))["result"],
        recorded[0]["result"]
    );
    assert_eq!(
        c.call(6, "tools/call", sum(5, 5))["result"],
        recorded[1]["result"]
    );
    // A third: both are used.
    let v = c.call(7, "tools/call", sum(0, 0));
    let msg = v["error"]["message"].as_str().unwrap();
    assert_contains(
        msg,
        "this call was recorded 2 times and every answer is used (--match method)",
    );
    assert_eq!(v["error"]["data"]["mcptape"]["matcher"], "method");
    // A tool that was never recorded: the nearest calls differ in the name.
    let v = c.call(8, "tools/call", tool("get-tiny-image", json!({})));
    let data = &v["error"]["data"]["mcptape"];
    assert_eq!(data["reason"], "no_match", "{v}");
    assert_eq!(
        data["nearest"][0]["differences"][0]["path"], "$.name",
        "{v}"
    );
    let stderr = c.finish_with(1);
    assert_contains(&stderr, "matched by: --match method");
    assert_contains(
        &stderr,
        "served 3, missed 2, drifted 0; 1 recorded exchange never used:",
    );
}

#[test]
fn match_sequence_pairs_by_position_and_says_where_the_method_disagrees() {
    let dir = tmp();
    let tape = dir.path().join("seq.jsonl");
    let recorded = record_calls(
        &tape,
        &py_server(),
        &[],
        &[
            tool("add", json!({"a": 1, "b": 2})),
            tool("echo", json!({"text": "a"})),
            tool("add", json!({"a": 3, "b": 4})),
        ],
    );
    let echo_line = tape_lines(&tape)
        .iter()
        .position(|l| l["dir"] == "c2s" && l["msg"]["params"]["name"] == "echo")
        .unwrap()
        + 1;
    for (flags, fifth) in [
        (&["--match", "sequence"][..], None),
        (
            &["--match", "sequence", "--repeat", "last"][..],
            Some(&recorded[2]),
        ),
    ] {
        let mut c = play(&tape, flags);
        c.initialize(); // request 1
                        // Request 2: whatever its arguments, the recording's second request (add 1 2).
        let v = c.call(2, "tools/call", tool("add", json!({"a": 40, "b": 2})));
        assert_eq!(v["result"], recorded[0]["result"]);
        // Request 3 is tools/list; the recording's third is a tools/call.
        let v = c.call(3, "tools/list", json!({}));
        let msg = v["error"]["message"].as_str().unwrap();
        assert_contains(
            msg,
            &format!("it is request 3 of the session, and the recording's request 3 (tape line {echo_line}) is tools/call (--match sequence)"),
        );
        assert_eq!(v["error"]["data"]["mcptape"]["reason"], "out_of_sequence");
        assert_eq!(v["error"]["data"]["mcptape"]["position"], 3);
        // Request 4: the recording's fourth (add 3 4), though echo is asked.
        let v = c.call(4, "tools/call", tool("echo", json!({"text": "b"})));
        assert_eq!(v["result"], recorded[2]["result"]);
        // Request 5: past the end of the recording.
        let v = c.call(5, "tools/call", tool("add", json!({"a": 1, "b": 1})));
        match fifth {
            Some(want) => assert_eq!(&v["result"], &want["result"]),
            None => assert_contains(
                v["error"]["message"].as_str().unwrap(),
                "it is request 5 of the session, and the recording has 4 (--repeat last or cycle serves past the end)",
            ),
        }
        let stderr = c.finish_with(1);
        assert_contains(&stderr, "matched by: --match sequence");
    }
}

/// The 1-based lines of `tape` that are messages about tool `name`.
fn lines_of_tool(tape: &Path, name: &str) -> Vec<usize> {
    tape_lines(tape)
        .iter()
        .enumerate()
        .filter(|(_, l)| l["dir"] == "c2s" && l["msg"]["params"]["name"] == name)
        .map(|(i, _)| i + 1)
        .collect()
}

/// Plays `tape` reading the graph once (and `search` if asked), writing the unused report to
/// `report`.
fn play_some(tape: &Path, report: &Path, read: bool, search: bool) {
    let mut c = play(tape, &["--unused-report", &s(report)]);
    c.initialize();
    if read {
        let v = c.call(1, "tools/call", tool("read_graph", json!({})));
        assert_eq!(graph_names(&v), Vec::<String>::new());
    }
    if search {
        let v = c.call(
            2,
            "tools/call",
            tool("search_nodes", json!({"query": "Ada"})),
        );
        assert_contains(&text_of(&v), "Ada");
    }
    let stderr = c.finish_with(0);
    assert_contains(
        &stderr,
        &format!("wrote the unused report to {}", report.display()),
    );
}

#[test]
fn unused_report_then_prune_then_verify_then_play() {
    let dir = tmp();
    let tape = memory_tape(dir.path(), "memory.jsonl");
    let original = std::fs::read(&tape).unwrap();
    let report = dir.path().join("unused.json");
    play_some(&tape, &report, true, false);

    let r = unused_report(&report);
    assert_eq!((r.format.as_str(), r.version), ("mcptape-unused-report", 1));
    assert_eq!((r.server.as_str(), r.exchanges), ("default", 5));
    let used: Vec<(&str, Option<&str>, u32)> = r
        .used
        .iter()
        .map(|e| (e.method.as_str(), e.target.as_deref(), e.served))
        .collect();
    assert_eq!(
        used,
        [
            ("initialize", None, 1),
            ("tools/call", Some("read_graph"), 1)
        ]
    );
    let unused: Vec<(Option<&str>, &Value)> = r
        .unused
        .iter()
        .map(|e| (e.target.as_deref(), &e.id))
        .collect();
    assert_eq!(
        unused,
        [
            (Some("create_entities"), &json!(2)),
            (Some("read_graph"), &json!(3)),
            (Some("search_nodes"), &json!(4))
        ]
    );
    let create = &r.unused[0];
    assert_eq!(create.lines.len(), 2, "request and answer: {create:?}");
    assert_eq!(create.lines[0], create.line);
    assert_eq!(
        create.lines[0] as usize,
        lines_of_tool(&tape, "create_entities")[0]
    );
    assert_eq!(create.h.as_ref().map(String::len), Some(64));

    let out = Mt::new(["prune"])
        .arg(&tape)
        .args(["--unused", &s(&report)])
        .run()
        .success();
    let bak = dir.path().join("memory.jsonl.bak");
    out.stderr_contains(&format!(
        "mcptape prune: dropped 3 of 5 exchanges (6 lines); 2 kept; wrote {} with a fresh hash chain; the original is kept as {}",
        tape.display(),
        bak.display()
    ));
    assert_eq!(
        std::fs::read(&bak).unwrap(),
        original,
        "the original, as it was"
    );
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("intact:");
    assert!(lines_of_tool(&tape, "create_entities").is_empty());
    assert!(lines_of_tool(&tape, "search_nodes").is_empty());
    assert_eq!(lines_of_tool(&tape, "read_graph").len(), 1);
    let end = end_of(&tape);
    let msgs = tape_msgs(&tape);
    assert_eq!(end["messages"], msgs.len(), "{end}");
    assert_eq!(end["exchanges"], 2, "{end}");
    // The handshake's notification stays.
    assert!(msgs
        .iter()
        .any(|m| m["method"] == "notifications/initialized"));

    // The pruned tape plays what was used, and nothing else.
    let mut c = play(&tape, &[]);
    c.initialize();
    let v = c.call(1, "tools/call", tool("read_graph", json!({})));
    assert_eq!(graph_names(&v), Vec::<String>::new());
    let v = c.call(
        2,
        "tools/call",
        tool("search_nodes", json!({"query": "Ada"})),
    );
    assert_eq!(v["error"]["data"]["mcptape"]["reason"], "no_match", "{v}");
    let stderr = c.finish_with(1);
    assert_contains(
        &stderr,
        "served 2, missed 1, drifted 0; every recorded exchange was used",
    );

    // The report no longer fits the pruned tape.
    Mt::new(["prune"])
        .arg(&tape)
        .args(["--unused", &s(&report)])
        .run()
        .status(65)
        .stderr_contains("written for another tape than");
}

#[test]
fn keep_used_by_keeps_what_any_run_used_and_reports_that_do_not_fit_are_refused() {
    let dir = tmp();
    let tape = memory_tape(dir.path(), "memory.jsonl");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    play_some(&tape, &a, true, false);
    play_some(&tape, &b, false, true);
    Mt::new(["prune"])
        .arg(&tape)
        .args(["--keep-used-by", &s(&a), "--keep-used-by", &s(&b)])
        .run()
        .success()
        .stderr_contains("dropped 2 of 5 exchanges (4 lines); 3 kept;");
    Mt::new(["verify"]).arg(&tape).run().success();
    assert_eq!(lines_of_tool(&tape, "read_graph").len(), 1);
    assert_eq!(lines_of_tool(&tape, "search_nodes").len(), 1);
    assert!(lines_of_tool(&tape, "create_entities").is_empty());

    // The same session recorded again: same lines, ids and seqs, another hash chain.
    let again = memory_tape(dir.path(), "again.jsonl");
    let other = dir.path().join("other.json");
    play_some(&again, &other, true, false);
    let tape2 = memory_tape(dir.path(), "memory2.jsonl");
    Mt::new(["prune"])
        .arg(&tape2)
        .args(["--unused", &s(&other)])
        .run()
        .status(65)
        .stderr_contains("recorded anew (its hash-chain link differs)");
    // Not a report; no report.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"unused\": [").unwrap();
    Mt::new(["prune"])
        .arg(&tape2)
        .args(["--unused", &s(&junk)])
        .run()
        .status(65)
        .stderr_contains("not an mcptape unused report: line 1 column");
    Mt::new(["prune"])
        .arg(&tape2)
        .args(["--unused", &s(dir.path().join("none.json"))])
        .run()
        .status(66)
        .stderr_contains("no such unused report");
    Mt::new(["prune"]).arg(&tape2).run().status(64);
}

/// An `--unused-report` that cannot be written is refused before play serves anything (it was
/// found out only when the session ended: the session served, its report lost): a missing
/// folder is an I/O error (74), a folder given as the file a usage error (64), each naming it.
#[test]
fn an_unused_report_that_cannot_be_written_is_refused_before_serving() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let init = req(0, "initialize", init_params());
    let answer = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}});
    write_tape(&tape, &[("c2s", init.clone()), ("s2c", answer)], true);
    let client = format!("{init}\n");
    let missing = dir.path().join("no-such-folder").join("unused.json");
    let run = Mt::new(["play"])
        .arg(&tape)
        .args(["--unused-report", &s(&missing)])
        .stdin(client.clone())
        .run()
        .status(74)
        .stderr_contains(&s(&missing))
        .stderr_contains("does not exist");
    assert_eq!(run.stdout, "", "nothing served: {}", run.console());
    let run = Mt::new(["play"])
        .arg(&tape)
        .args(["--unused-report", &s(dir.path())])
        .stdin(client)
        .run()
        .status(64)
        .stderr_contains("--unused-report")
        .stderr_contains("is a folder");
    assert_eq!(run.stdout, "", "nothing served: {}", run.console());
}
