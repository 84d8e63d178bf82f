//! `mcptape import`: each other recorder records a real session of a real server driven by the
//! official Python SDK client (tests/peers/py_client.py); its file is imported, the tape
//! verified, and `mcptape play` of it serves the same client, whose transcript must equal the
//! one it saw live — except, named in each test, what the format did not keep.
//!
//! The recorders are installed by `./scripts/test` in tests/recorders (see its README).

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A program of the recorders' venv (`tests/recorders/.venv`, or `.venv-localab`).
fn recorder(venv: &str, bin: &str) -> String {
    let p = repo()
        .join("tests/recorders")
        .join(venv)
        .join("bin")
        .join(bin);
    assert!(
        p.exists(),
        "{} is missing: run ./scripts/test once (it installs tests/recorders)",
        p.display()
    );
    s(p)
}

/// A script of tests/recorders run by the recorders' Python.
fn recorder_script(name: &str) -> Vec<String> {
    vec![
        recorder(".venv", "python"),
        s(repo().join("tests/recorders").join(name)),
    ]
}

/// The live session: the Python client's `scenario` through `through` (a recorder in front of
/// the server); its transcript.
fn live(scenario: &str, through: Vec<String>) -> Value {
    py_ok(scenario, "legacy", &through, "through the recorder")
}

/// `mcptape import ARGS… -o TAPE`, which must succeed; its stderr.
fn import(args: &[&str], tape: &Path) -> String {
    let run = Mt::new(["import"])
        .args(args)
        .arg("-o")
        .arg(tape)
        .run()
        .success();
    let err = run.console();
    Mt::new(["verify"]).arg(tape).run().success();
    err
}

/// The Python client against `mcptape play TAPE`.
fn played(scenario: &str, tape: &Path) -> Value {
    py_ok(scenario, "legacy", &play_cmd(tape), "against mcptape play")
}

fn pyserver() -> Vec<String> {
    py_server()
}

#[test]
fn mcp_rec_a_real_recording_plays_back_what_the_client_saw() {
    let dir = tmp();
    let file = dir.path().join("session.jsonl");
    let mut through = vec![
        recorder(".venv", "mcp-rec"),
        "record".into(),
        "--out".into(),
        s(&file),
        "--".into(),
    ];
    through.extend(pyserver());
    let seen = live("pyserver", through);
    let tape = dir.path().join("imported.jsonl");
    // Detected from the content (the format is not named).
    let err = import(&[&s(&file)], &tape);
    assert_contains(&err, "mcptape import: mcp-rec ");
    assert_contains(&err, "warning: mcp-rec lacks the wire bytes");
    // mcp-rec keeps every line both ways: the sampling request, the progress notifications.
    assert_eq!(played("pyserver", &tape), seen);
}

#[test]
fn mcp_cassette_its_writer_on_a_real_session_plays_back_what_the_client_saw() {
    // mcp-cassette needs Python 3.12 (its CLI and proxy import a module with 3.12-only syntax):
    // its own recorder and writer run in-process in a relay (tests/recorders/mcp_cassette_record.py
    // says why and how). Its default redaction would replace the `api_key` property of
    // py_server's `deploy` tool schema; off here so the tools list is the server's.
    let dir = tmp();
    let file = dir.path().join("cassette.json");
    let mut through = recorder_script("mcp_cassette_record.py");
    through.extend(["--no-default-redactions".into(), s(&file), "--".into()]);
    through.extend(pyserver());
    let seen = live("pyserver", through);
    let tape = dir.path().join("imported.jsonl");
    let err = import(&["auto", &s(&file)], &tape);
    assert_contains(&err, "mcptape import: mcp-cassette ");
    assert_eq!(played("pyserver", &tape), seen);
}

#[test]
fn mcp_vcr_yaml_and_ndjson_from_its_cli_play_back_what_the_client_saw() {
    // mcp-vcr declares Python >= 3.12 but runs on 3.11 (installed with --ignore-requires-python).
    for format in ["yaml", "ndjson"] {
        let dir = tmp();
        let file = dir.path().join(format!("session.{format}"));
        let mut through = vec![
            recorder(".venv", "mcp-vcr"),
            "record".into(),
            "--no-redact".into(),
            "--format".into(),
            format.into(),
            "-o".into(),
            s(&file),
            "--".into(),
        ];
        through.extend(pyserver());
        let seen = live("pyserver", through);
        let tape = dir.path().join("imported.jsonl");
        let err = import(&["mcp-vcr", &s(&file)], &tape);
        assert_contains(&err, "mcptape import: mcp-vcr ");
        assert_eq!(played("pyserver", &tape), seen, "{format}");
    }
}

#[test]
fn agent_vcr_plays_back_everything_but_the_server_request_it_dropped() {
    let dir = tmp();
    let file = dir.path().join("session.vcr");
    let mut through = recorder_script("agent_vcr_record.py");
    through.extend([s(&file), "--".into()]);
    through.extend(pyserver());
    let seen = live("pyserver", through);
    let tape = dir.path().join("imported.jsonl");
    let err = import(&["agent-vcr", &s(&file)], &tape);
    assert_contains(
        &err,
        "warning: agent-vcr lacks server-to-client requests (sampling, elicitation, roots)",
    );
    let got = played("pyserver", &tape);
    // `ask_llm` asks the client for a sampling answer mid-call: agent-vcr never recorded that
    // request, so play cannot re-issue it. The rest of the transcript is the live one.
    let mut want = seen.clone();
    let ask = want["steps"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| s["step"] == "call ask_llm")
        .expect("the ask_llm step");
    assert_eq!(
        ask["observed"][0]["server_request"],
        "sampling/createMessage",
        "live: {}",
        pretty(ask)
    );
    ask.as_object_mut().unwrap().remove("observed");
    assert_eq!(got, want);
}

#[test]
fn localab_vcr_holds_only_tool_calls_and_play_answers_them_as_live() {
    let dir = tmp();
    let file = dir.path().join("run.jsonl");
    let mut through = vec![
        recorder(".venv-localab", "agent-vcr"),
        "mcp-stdio".into(),
        "--server".into(),
        "fixture".into(),
        "--tape".into(),
        s(&file),
        "--mode".into(),
        "record".into(),
        "--".into(),
    ];
    through.extend(pyserver());
    let seen = live("pyserver", through);
    let tape = dir.path().join("imported.jsonl");
    let err = import(&[&s(&file)], &tape);
    assert_contains(
        &err,
        "warning: localab-vcr lacks everything of MCP but tool calls: no handshake (initialize)",
    );
    assert_contains(&err, "20 messages, 10 exchanges");
    // No handshake on the tape: a client that initializes is refused, said so.
    let mut c = LineClient::spawn(&play_cmd(&tape));
    let init = c.initialize();
    assert_contains(
        &init["error"]["message"].to_string(),
        "the tape has no initialize call",
    );
    // The tool calls, as the client sent them (the recorded name and arguments), are answered
    // as the live server answered the client: each call step's result, in order.
    let calls: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "tool_call")
        .collect();
    let steps: Vec<&Value> = seen["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step"].as_str().unwrap().starts_with("call "))
        .collect();
    assert_eq!(calls.len(), steps.len(), "one recorded call per call step");
    for (i, (call, step)) in calls.iter().zip(&steps).enumerate() {
        let answer = c.call(
            100 + i as i64,
            "tools/call",
            json!({"name": call["tool"], "arguments": call["args"]}),
        );
        let result = &answer["result"];
        for key in ["content", "structuredContent", "isError"] {
            assert_eq!(result[key], step["result"][key], "{}: {key}", step["step"]);
        }
    }
    c.close_stdin();
    let (status, _) = c.finish();
    assert_eq!(status.code(), Some(1), "the refused initialize is a miss");
}

/// tests/recorders/mcp_replay_record.mjs, which records into `fixtures` with mcp-replay's own
/// code (vendored in tests/recorders/mcp-replay, built by ./scripts/test), in front of `server`.
fn mcp_replay_relay(fixtures: &Path, server: Vec<String>) -> Vec<String> {
    let built = repo().join("tests/recorders/mcp-replay/dist/src/index.js");
    assert!(
        built.exists(),
        "{} is missing: run ./scripts/test once (it builds tests/recorders/mcp-replay)",
        built.display()
    );
    let mut through = vec![
        "node".into(),
        s(repo().join("tests/recorders/mcp_replay_record.mjs")),
        s(fixtures),
        "--".into(),
    ];
    through.extend(server);
    through
}

#[test]
fn mcp_replay_fixtures_of_a_memory_session_play_back_what_the_client_saw() {
    // server-memory makes no request of the client and sends no notification, and the session
    // repeats no call: all of it is in mcp-replay's request/answer fixtures.
    let dir = tmp();
    let fixtures = dir.path().join("fixtures");
    let memory_file = dir.path().join("memory.jsonl");
    let (seen, out) = py_client(
        "memory",
        "legacy",
        &mcp_replay_relay(&fixtures, memory()),
        &[("MEMORY_FILE_PATH", &s(&memory_file))],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // mcp-replay's layout: one directory per method, one file per method and params.
    assert!(fixtures.join("initialize").is_dir() && fixtures.join("tools_call").is_dir());
    let tape = dir.path().join("imported.jsonl");
    // A directory: detected as mcp-replay's.
    let err = import(&[&s(&fixtures)], &tape);
    assert_contains(&err, "mcptape import: mcp-replay ");
    // initialize, tools/list and the 6 calls: a request and its answer each.
    assert_contains(&err, "16 messages, 8 exchanges");
    assert_contains(&err, "warning: mcp-replay lacks notifications both ways");
    let played = py_ok("memory", "legacy", &play_cmd(&tape), "against mcptape play");
    assert_eq!(played, seen);
}

#[test]
fn mcp_replay_fixtures_play_back_all_but_notifications_server_requests_and_repeats() {
    let dir = tmp();
    let fixtures = dir.path().join("fixtures");
    let seen = live("pyserver", mcp_replay_relay(&fixtures, pyserver()));
    let tape = dir.path().join("imported.jsonl");
    let err = import(&["mcp-replay", &s(&fixtures)], &tape);
    assert_contains(
        &err,
        "warning: mcp-replay lacks repeats: one answer per method and params",
    );
    // mcp-replay answers a repeated request with its one fixture every time; so does play with
    // --repeat last.
    let mut cmd = play_cmd(&tape);
    cmd.extend(["--repeat".into(), "last".into()]);
    let got = py_ok(
        "pyserver",
        "legacy",
        &cmd,
        "against mcptape play --repeat last",
    );
    // What mcp-replay did not keep, named: the progress notifications of `progress_steps`, the
    // sampling request inside `ask_llm`, the answers to the counter's first two calls (the
    // fixture holds the third), and the spelling of a number: JavaScript writes the weather's
    // `4.0` as `4`, which the Python client then reads as an int. The rest is the live
    // transcript.
    let mut want = seen.clone();
    let steps = want["steps"].as_array_mut().unwrap();
    let step = |steps: &[Value], name: &str| -> usize {
        steps
            .iter()
            .position(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name}"))
    };
    let weather = step(steps, "call weather");
    let temperature = &mut steps[weather]["result"]["structuredContent"]["temperature_c"];
    assert_eq!(temperature.to_string(), "4.0", "live");
    *temperature = json!(4);
    let progress = step(steps, "call progress_steps");
    assert_eq!(
        steps[progress]["progress"].as_array().map(Vec::len),
        Some(3)
    );
    steps[progress]["progress"] = json!([]);
    let ask = step(steps, "call ask_llm");
    assert_eq!(
        steps[ask]["observed"][0]["server_request"],
        "sampling/createMessage"
    );
    steps[ask].as_object_mut().unwrap().remove("observed");
    let third = steps[step(steps, "call counter #3")]["result"].clone();
    assert_eq!(third["structuredContent"]["result"], 3);
    for n in ["call counter #1", "call counter #2"] {
        let i = step(steps, n);
        assert_ne!(
            steps[i]["result"], third,
            "live, {n} differs from the third"
        );
        steps[i]["result"] = third.clone();
    }
    assert_eq!(got, want);
}

#[test]
fn mcp_recorder_over_http_plays_back_what_the_client_saw() {
    // mcp-recorder is an HTTP proxy (its stdio target sits behind it): the client reaches it over
    // Streamable HTTP; play serves the import over stdio. Its stdio transport cannot pass a
    // server's request to the client (a sampling call hangs it), so the session is the memory
    // server's, which asks the client nothing.
    let dir = tmp();
    let file = dir.path().join("cassette.json");
    // It takes a fixed `--port` and does not say which it bound (port 0 would not do): a port
    // picked free, checked to be listened on by this mcp-recorder (started again on another
    // port if another process took it first).
    let (mut proxy, port) = listening(
        "mcp-recorder",
        dir.path().join("mcp-recorder.log"),
        |port| {
            let mut c = Command::new(recorder(".venv", "mcp-recorder"));
            c.args([
                "record",
                "--target-stdio",
                &memory().join(" "),
                "--port",
                &port.to_string(),
                "--output",
                &s(&file),
            ])
            .env("MEMORY_FILE_PATH", dir.path().join("memory.jsonl"));
            c
        },
    );
    let seen = py_ok(
        "memory",
        "legacy",
        &[format!("http://127.0.0.1:{port}/mcp")],
        "through mcp-recorder",
    );
    // It saves the cassette when interrupted (Ctrl-C).
    let st = proxy.stop(libc::SIGINT, Duration::from_secs(60));
    assert!(
        st.success(),
        "mcp-recorder: {st}; log:\n{}",
        proxy.log_text()
    );
    let tape = dir.path().join("imported.jsonl");
    let err = import(&[&s(&file)], &tape);
    assert_contains(&err, "mcptape import: mcp-recorder ");
    assert_contains(&err, "lacks the time between calls");
    let played = py_ok("memory", "legacy", &play_cmd(&tape), "against mcptape play");
    assert_eq!(played, seen);
}

#[test]
fn bad_input_gets_its_file_line_and_exit_code() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let bad: PathBuf = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"ts\": 1, \"dir\": \"client->server\", \"msg\": {}}\nnot json\n{}\n",
    )
    .unwrap();
    Mt::new(["import", "mcp-rec"])
        .arg(&bad)
        .arg("-o")
        .arg(&tape)
        .run()
        .status(65)
        .stderr_contains(&format!(
            "mcptape: error: {}: line 2: expected ident; mcp-rec writes",
            s(&bad)
        ));
    Mt::new(["import"])
        .arg(dir.path().join("none.json"))
        .arg("-o")
        .arg(&tape)
        .run()
        .status(66)
        .stderr_contains("no such file");
    Mt::new(["import", "vcr-9000"]).arg(&bad).arg("-o").arg(&tape).run().status(64)
        .stderr_contains("unknown format \"vcr-9000\"; mcptape imports: agent-vcr, localab-vcr, mcp-rec, mcp-recorder, mcp-cassette, mcp-vcr, mcp-replay, or auto");
    assert!(!tape.exists(), "no tape written from bad input");
}

/// Another recorder's times that no recording can have — an offset past a year, one that
/// overflows when made microseconds, a Unix time of 1e300 — are refused naming the file and
/// the entry (exit 65), and no tape is written. They overflowed (a panic, exit 101, in a debug
/// build; a wrapped `t_us` in a release one) or became a `t_us` centuries long.
#[test]
fn absurd_timestamps_are_refused_naming_the_file_and_the_entry() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let pong = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let cassette = |t: &str| {
        format!(
            r#"{{"format_version": 3, "recorded_at": "2026-01-01T00:00:00Z", "messages": [
            {{"seq": 0, "t_offset_ms": 0, "sender": "client", "kind": "request", "payload": {ping}}},
            {{"seq": 1, "t_offset_ms": {t}, "sender": "server", "kind": "response", "payload": {pong}}}]}}"#
        )
    };
    let year_and_a_day_ms = ((366 + 1) * 24 * 3600 * 1000u64).to_string();
    let cases = [
        ("mcp-cassette", "c1.json", cassette(&u64::MAX.to_string()), "messages[1]"),
        ("mcp-cassette", "c2.json", cassette(&year_and_a_day_ms), "messages[1]"),
        (
            "mcp-vcr",
            "v.ndjson",
            format!("{{\"_type\": \"meta\"}}\n{{\"t\": 0, \"dir\": \"c2s\", \"payload\": {ping}}}\n{{\"t\": {}, \"dir\": \"s2c\", \"payload\": {pong}}}\n", u64::MAX),
            "line 3",
        ),
        (
            "mcp-rec",
            "r1.jsonl",
            format!("{{\"ts\": 1e300, \"dir\": \"client->server\", \"msg\": {ping}}}\n"),
            "line 1",
        ),
        (
            "mcp-rec",
            "r2.jsonl",
            format!("{{\"ts\": 1767225600, \"dir\": \"client->server\", \"msg\": {ping}}}\n{{\"ts\": 1e15, \"dir\": \"server->client\", \"msg\": {pong}}}\n"),
            "line 2",
        ),
    ];
    for (format, name, text, at) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        Mt::new(["import", format])
            .arg(&file)
            .arg("-o")
            .arg(&tape)
            .run()
            .status(65)
            .stderr_contains(&format!("{}: {at}: ", s(&file)));
        assert!(!tape.exists(), "no tape written from {name}");
    }
}

/// YAML nested 200,000 flow levels deep (`[[[…]]]`, 400 KB): the YAML parser's scanner takes
/// time quadratic in that depth (40,000 levels took 8 s, so this took minutes) before its
/// deserializer refuses anything past 128 levels anyway. The depth is now found in one pass
/// first: refused at once, naming the line, by `import mcp-vcr`, and not taken for mcp-vcr by
/// auto-detection. (The timeout is generous: it is there to fail a run that hangs.)
#[test]
fn deeply_nested_yaml_is_refused_at_once_not_parsed_in_quadratic_time() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let n = 200_000;
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!("meta: {{}}\nmessages: {}{}\n", "[".repeat(n), "]".repeat(n)),
    )
    .unwrap();
    let limit = std::time::Duration::from_secs(30);
    Mt::new(["import", "mcp-vcr"])
        .arg(&deep)
        .arg("-o")
        .arg(&tape)
        .timeout(limit)
        .run()
        .status(65)
        .stderr_contains(&format!("{}: line 2: ", s(&deep)))
        .stderr_contains("nested deeper than 128");
    Mt::new(["import"])
        .arg(&deep)
        .arg("-o")
        .arg(&tape)
        .timeout(limit)
        .run()
        .status(65)
        .stderr_contains("not a file of any format mcptape imports");
    // Within the limit, mappings and sequences mixed, flow and block, quoted brackets aside:
    // read as YAML as before (the messages are not mcp-vcr's, and it says so).
    let nested = format!(
        "meta: {{note: \"[[[[ not a level\", other: '{{{{'}}\nmessages:\n  - {}1{}\n",
        "{a: [".repeat(60),
        "]}".repeat(60)
    );
    let ok = dir.path().join("ok.yaml");
    std::fs::write(&ok, nested).unwrap();
    Mt::new(["import", "mcp-vcr"])
        .arg(&ok)
        .arg("-o")
        .arg(&tape)
        .timeout(limit)
        .run()
        .status(65)
        .stderr_contains("messages[0]: no \"payload\" object");
    assert!(!tape.exists());
}

/// A file saved with a UTF-8 byte-order mark (a Windows editor's) imports as the same file
/// without it — named or detected, for a one-document format, two line formats and a YAML
/// one — where it was refused as not JSON ("expected value at line 1 column 1") or as no
/// known format. A UTF-16 file (either byte order) is refused saying so, naming the file.
#[test]
fn a_file_saved_with_a_byte_order_mark_imports_as_without_and_utf16_is_refused() {
    let dir = tmp();
    let files = ping_pong_files(5);
    // The wire messages of a tape, with their direction and time.
    let msgs = |tape: &Path| -> Vec<Value> {
        tape_msgs(tape)
            .into_iter()
            .map(|m| json!([m["dir"], m["t_us"], m["msg"]]))
            .collect()
    };
    for (format, name, text) in files {
        let plain = dir.path().join(name);
        std::fs::write(&plain, &text).unwrap();
        let want = dir.path().join(format!("{name}-plain.jsonl"));
        import(&[format, &s(&plain)], &want);
        assert_eq!(msgs(&want).len(), 2, "{format}: {:?}", msgs(&want));

        let bom = dir.path().join(format!("bom-{name}"));
        std::fs::write(&bom, [&b"\xEF\xBB\xBF"[..], text.as_bytes()].concat()).unwrap();
        for how in [format, "auto"] {
            let tape = dir.path().join(format!("{name}-bom-{how}.jsonl"));
            let err = import(&[how, &s(&bom)], &tape);
            assert_contains(&err, &format!("mcptape import: {format} "));
            assert_eq!(msgs(&tape), msgs(&want), "{name} ({how})");
        }

        for (order, mark) in [("LE", [0xFF, 0xFE]), ("BE", [0xFE, 0xFF])] {
            let units: Vec<u8> = text
                .encode_utf16()
                .flat_map(|u| match order {
                    "LE" => u.to_le_bytes(),
                    _ => u.to_be_bytes(),
                })
                .collect();
            let utf16 = dir.path().join(format!("utf16{order}-{name}"));
            std::fs::write(&utf16, [&mark[..], &units].concat()).unwrap();
            let tape = dir.path().join("never.jsonl");
            for how in [format, "auto"] {
                Mt::new(["import", how])
                    .arg(&utf16)
                    .arg("-o")
                    .arg(&tape)
                    .run()
                    .status(65)
                    .stderr_contains(&format!(
                        "{}: the file is UTF-16 (it starts with a UTF-16 byte-order mark)",
                        s(&utf16)
                    ));
                assert!(!tape.exists(), "no tape written from {}", s(&utf16));
            }
        }
    }
}

/// An mcp-vcr YAML transcript with integers beyond 64 bits (a tool's argument and result,
/// negative too) imports them as the same numbers on the tape, digit for digit, as the NDJSON
/// transcript of the same session does: they were refused, `messages[0].payload…: JSON number
/// out of range`, and auto-detection did not know the file. One beyond 128 bits, which the
/// YAML reader can only make a float of, is refused naming the file and the line (exit 65).
#[test]
fn yaml_integers_beyond_64_bits_are_kept_as_the_numbers_on_the_wire() {
    let dir = tmp();
    let big = "12345678901234567890123";
    let neg = "-98765432109876543210";
    let request = format!(
        r#"{{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"n":{big}}},"name":"add"}}}}"#
    );
    let response = format!(
        r#"{{"id":1,"jsonrpc":"2.0","result":{{"content":[{{"text":"x","type":"text"}}],"sum":{neg}}}}}"#
    );
    let yaml = format!(
        "meta:\n  version: 1\nmessages:\n- dir: c2s\n  payload:\n    id: 1\n    jsonrpc: '2.0'\n    method: tools/call\n    params:\n      arguments:\n        n: {big}\n      name: add\n  t: 0\n- dir: s2c\n  payload: {{id: 1, jsonrpc: '2.0', result: {{content: [{{text: x, type: text}}], sum: {neg}}}}}\n  t: 5\n"
    );
    let ndjson = format!(
        "{{\"_type\": \"meta\"}}\n{{\"t\": 0, \"dir\": \"c2s\", \"payload\": {request}}}\n{{\"t\": 5, \"dir\": \"s2c\", \"payload\": {response}}}\n"
    );
    // The messages as the tape holds them, byte for byte.
    let wire = |tape: &Path| -> Vec<String> {
        raw_lines(tape)
            .iter()
            .map(|l| text(l))
            .filter(|l| l.starts_with(r#"{"type":"msg""#))
            .map(|l| {
                let from = l.find(r#""msg":"#).expect("a msg") + r#""msg":"#.len();
                let to = l.rfind(r#","h":"#).expect("an h");
                l[from..to].to_string()
            })
            .collect()
    };
    let file = dir.path().join("session.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let lines = dir.path().join("session.ndjson");
    std::fs::write(&lines, &ndjson).unwrap();
    let from_ndjson = dir.path().join("ndjson.jsonl");
    import(&["mcp-vcr", &s(&lines)], &from_ndjson);
    assert_eq!(wire(&from_ndjson), [request.clone(), response.clone()]);
    for how in ["mcp-vcr", "auto"] {
        let tape = dir.path().join(format!("yaml-{how}.jsonl"));
        let err = import(&[how, &s(&file)], &tape);
        assert_contains(&err, "mcptape import: mcp-vcr ");
        assert_eq!(wire(&tape), [request.clone(), response.clone()], "{how}");
    }

    let huge = "340282366920938463463374607431768211456"; // 2^128
    let beyond = dir.path().join("beyond.yaml");
    std::fs::write(&beyond, yaml.replace(big, huge)).unwrap();
    let tape = dir.path().join("never.jsonl");
    for how in ["mcp-vcr", "auto"] {
        Mt::new(["import", how])
            .arg(&beyond)
            .arg("-o")
            .arg(&tape)
            .run()
            .status(65)
            .stderr_contains(&format!(
                "{}: line 11: an integer beyond 128 bits, which mcptape's YAML reader cannot keep exactly",
                s(&beyond)
            ));
        assert!(!tape.exists());
    }
    // A float that large is a float, as it was.
    let float = dir.path().join("float.yaml");
    std::fs::write(&float, yaml.replace(big, "1.0e+40")).unwrap();
    let tape = dir.path().join("float.jsonl");
    import(&["mcp-vcr", &s(&float)], &tape);
    assert_contains(&wire(&tape)[0], r#""arguments":{"n":1e+40}"#);
}

/// Every line of an imported tape is at the recording's time, whatever the format: the server
/// lines and the `import` event at its start (0), the closing line at its last message. The
/// closing line (and the server lines) were at the import's own time: microseconds into
/// writing the tape, so a tape of a 7-second session ended at `t_us` ~200, before its own
/// messages. Each format is read by its own file and written by the one `write_tape`.
#[test]
fn an_imported_tape_ends_at_its_last_message_not_at_the_import() {
    let dir = tmp();
    let files = ping_pong_files(7000);
    for (format, name, body) in files {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        let tape = dir.path().join(format!("{name}.jsonl"));
        import(&[format, &s(&file)], &tape);
        let lines = tape_lines(&tape);
        let times: Vec<(String, u64)> = lines[1..]
            .iter()
            .map(|l| {
                let what = l["what"].as_str().or(l["dir"].as_str()).unwrap_or("");
                (
                    format!("{} {what}", l["type"].as_str().unwrap()),
                    l["t_us"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<(String, u64)> = [
            ("server ", 0),
            ("event import", 0),
            ("msg c2s", 0),
            ("msg s2c", 7_000_000),
            ("end ", 7_000_000),
        ]
        .iter()
        .map(|(w, t)| (w.to_string(), *t))
        .collect();
        assert_eq!(times, want, "{name}");
    }
}

/// A ping answered `ms` milliseconds later, as each recorder writes it (format, file name,
/// text): mcp-cassette, mcp-rec, mcp-vcr's NDJSON and its YAML.
fn ping_pong_files(ms: u64) -> [(&'static str, &'static str, String); 4] {
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let pong = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let ts = format!("{}.{:03}", 1767225600 + ms / 1000, ms % 1000);
    [
        (
            "mcp-cassette",
            "cassette.json",
            format!(
                r#"{{"format_version": 3, "recorded_at": "2026-01-01T00:00:00Z", "messages": [
            {{"seq": 0, "t_offset_ms": 0, "sender": "client", "kind": "request", "payload": {ping}}},
            {{"seq": 1, "t_offset_ms": {ms}, "sender": "server", "kind": "response", "payload": {pong}}}]}}"#
            ),
        ),
        (
            "mcp-rec",
            "session.jsonl",
            format!("{{\"ts\": 1767225600, \"dir\": \"client->server\", \"msg\": {ping}}}\n{{\"ts\": {ts}, \"dir\": \"server->client\", \"msg\": {pong}}}\n"),
        ),
        (
            "mcp-vcr",
            "session.ndjson",
            format!("{{\"_type\": \"meta\"}}\n{{\"t\": 0, \"dir\": \"c2s\", \"payload\": {ping}}}\n{{\"t\": {ms}, \"dir\": \"s2c\", \"payload\": {pong}}}\n"),
        ),
        (
            "mcp-vcr",
            "session.yaml",
            format!("meta:\n  version: 1\nmessages:\n- dir: c2s\n  payload: {ping}\n  t: 0\n- dir: s2c\n  payload: {pong}\n  t: {ms}\n"),
        ),
    ]
}
