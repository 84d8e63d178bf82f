//! `--skip-bad-lines`: a real recording of server-memory with one line corrupted in the middle,
//! read by every command that reads a tape — refused by default (naming the flag), read past
//! with it (each line reported on stderr and counted), the hash chain still broken there.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The session the client runs, recorded and replayed: its answers' results in order.
fn session(c: &mut LineClient) -> Vec<Value> {
    c.initialize();
    let entity = json!({"entities": [{"observations": ["price 2.50", "api_key in the vault"], "name": "Ada", "entityType": "person"}]});
    let steps = [
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "create_entities", "arguments": entity}),
        ),
        ("tools/call", json!({"arguments": {}, "name": "read_graph"})),
    ];
    steps
        .iter()
        .enumerate()
        .map(|(i, (method, params))| c.call(i as i64 + 1, method, params.clone())["result"].clone())
        .collect()
}

/// server-memory with its graph in a fresh file under `dir`.
fn memory_in(dir: &Path, argv: &[String], file: &str) -> std::process::Command {
    let mut cmd = command(argv);
    cmd.env("MEMORY_FILE_PATH", dir.join(file));
    cmd
}

/// A recording of [`session`] against server-memory: `good.jsonl` in `dir`, and what the client got.
fn recorded(dir: &Path) -> (PathBuf, Vec<Value>) {
    let tape = dir.join("good.jsonl");
    let mut c = LineClient::spawn_cmd(memory_in(
        dir,
        &record_cmd(&tape, &memory()),
        "record-memory.jsonl",
    ));
    let answers = session(&mut c);
    c.finish_with(0);
    (tape, answers)
}

/// A copy of `tape` as `bad.jsonl` with the first message line matching `pred` made invalid JSON
/// (a `#` after its `type`); returns the copy and that line's 1-based number.
fn corrupted(tape: &Path, pred: impl Fn(&Value) -> bool) -> (PathBuf, u64) {
    let bad = tape.with_file_name("bad.jsonl");
    let mut lines = raw_lines(tape);
    let at = tape_lines(tape)
        .iter()
        .position(|l| l["type"] == "msg" && pred(l))
        .expect("the line to corrupt");
    let prefix = br#"{"type":"msg","#.len();
    lines[at].insert(prefix, b'#');
    let mut bytes = lines.join(&b'\n');
    bytes.push(b'\n');
    std::fs::write(&bad, bytes).unwrap();
    (bad, at as u64 + 1)
}

/// `check --skip-bad-lines --json -` of `bad` against a fresh server-memory, which must exit
/// `code` and count the one skipped `line` in its report.
fn check_skipping(dir: &Path, bad: &Path, code: i32, line: u64) -> (CheckReport, Run) {
    let out = Mt::new(["check", "--skip-bad-lines", "--json", "-"])
        .arg(bad)
        .args(memory())
        .env("MEMORY_FILE_PATH", dir.join("check-memory.jsonl"))
        .timeout(Duration::from_secs(120))
        .run()
        .status(code);
    let r: CheckReport = out.json();
    let skipped: Vec<u64> = r.skipped_lines.iter().map(|b| b.line).collect();
    assert_eq!(skipped, [line], "{}", out.console());
    (r, out)
}

/// A recording whose `notifications/initialized` line (in the middle, answering nothing) is
/// corrupted: the folder, the whole tape, the recorded answers, the bad copy and its bad line.
fn initialized_corrupted() -> (tempfile::TempDir, PathBuf, Vec<Value>, PathBuf, u64) {
    let dir = tmp();
    let (good, answers) = recorded(dir.path());
    let (bad, line) = corrupted(&good, |l| l["method"] == "notifications/initialized");
    (dir, good, answers, bad, line)
}

/// The response to the client's request with this tool name.
fn answer_of_tool(tape: &Path, tool: &str) -> impl Fn(&Value) -> bool {
    let lines = tape_lines(tape);
    let id = lines
        .iter()
        .find(|l| l["dir"] == "c2s" && l["msg"]["params"]["name"] == tool)
        .map(|l| l["id"].clone())
        .expect("the tool call");
    move |l: &Value| l["dir"] == "s2c" && l["id"] == id
}

/// Play over stdio with `flags`, the same session as recorded; the client's answers and play's
/// status and stderr.
fn replay(dir: &Path, tape: &Path, flags: &[&str]) -> (Vec<Value>, String, i32) {
    let mut argv = play_cmd(tape);
    argv.extend(flags.iter().map(|f| f.to_string()));
    let mut c = LineClient::spawn_cmd(memory_in(dir, &argv, "unused.jsonl"));
    let answers = session(&mut c);
    let (status, stderr) = c.finish();
    (answers, stderr, status.code().unwrap_or(-1))
}

#[test]
fn a_bad_line_in_the_middle_is_refused_by_default_and_the_refusal_names_the_flag() {
    let (dir, good, _, bad, line) = initialized_corrupted();
    let at = format!("bad.jsonl: tape line {line}, column 15: ");
    let hint = "(--skip-bad-lines reads past such lines, each reported)";
    for args in [
        vec!["show".to_string(), s(&bad)],
        vec!["play".into(), s(&bad)],
        vec!["diff".into(), s(&bad), s(&good)],
        vec![
            "redact".into(),
            s(&bad),
            "-o".into(),
            s(dir.path().join("r.jsonl")),
        ],
    ] {
        let out = Mt::new(&args).run().status(65);
        assert_contains(&out.stderr, &at);
        assert_contains(&out.stderr, hint);
    }
    let out = Mt::new(["check"])
        .arg(&bad)
        .args(memory())
        .env("MEMORY_FILE_PATH", dir.path().join("check-memory.jsonl"))
        .run()
        .status(65);
    assert_contains(&out.stderr, &at);
    assert_contains(&out.stderr, hint);
    // verify and lint report it as what they look for: tampered, a problem (exit 1).
    Mt::new(["verify"])
        .arg(&bad)
        .run()
        .status(1)
        .stdout_contains(&format!(
            "TAMPERED at line {line}: not a valid tape line: column 15"
        ));
    Mt::new(["lint"])
        .arg(&bad)
        .run()
        .status(1)
        .stdout_contains(&format!("line {line}: column 15"));
}

#[test]
fn with_skip_bad_lines_every_reader_reads_past_a_bad_line_and_reports_it() {
    let (dir, good, recorded_answers, bad, line) = initialized_corrupted();
    let skipped = format!("bad.jsonl: tape line {line} skipped (--skip-bad-lines), column 15: ");
    let counted = format!("1 malformed tape line skipped (line {line})");

    // show: the row is gone, the JSON counts it, stderr names it.
    let out = Mt::new(["show", "--json", "--skip-bad-lines"])
        .arg(&bad)
        .run()
        .success();
    assert_contains(&out.stderr, &skipped);
    let doc: Value = out.json();
    assert_eq!(doc["skipped_lines"][0]["line"], line, "{}", pretty(&doc));
    assert!(doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["line"] != line));
    let table = Mt::new(["show", "--skip-bad-lines"])
        .arg(&bad)
        .run()
        .success();
    table.stdout_contains(&format!(
        "skipped  malformed lines (--skip-bad-lines): {line}"
    ));

    // verify: still tampered at that line (the chain runs over it), and the JSON counts it.
    let out = Mt::new(["verify", "--json", "--skip-bad-lines"])
        .arg(&bad)
        .run()
        .status(1);
    let v: Value = out.json();
    assert_eq!(
        (v["verdict"].as_str(), v["line"].as_u64()),
        (Some("tampered"), Some(line))
    );
    assert_eq!(v["skipped_lines"][0]["line"], line);
    assert_contains(&out.stderr, &skipped);

    // play: the same answers as recorded, exit 0; the summary counts the line, and the chain
    // is said to break there; --require-chain still refuses the tape.
    let (answers, stderr, code) = replay(dir.path(), &bad, &["--skip-bad-lines"]);
    assert_eq!(answers, recorded_answers);
    assert_eq!(code, 0, "{stderr}");
    assert_contains(&stderr, &skipped);
    assert_contains(&stderr, &format!("missed 0, drifted 0, {counted}"));
    assert_contains(&stderr, &format!("the hash chain breaks at line {line}"));
    let out = Mt::new(["play", "--skip-bad-lines", "--require-chain"])
        .arg(&bad)
        .run()
        .status(65);
    assert_contains(
        &out.stderr,
        &format!("refusing to play it (--require-chain): the hash chain breaks at line {line}"),
    );

    // diff: the same session; the report counts A's skipped line.
    let out = Mt::new(["diff", "--format", "json", "--skip-bad-lines"])
        .arg(&bad)
        .arg(&good)
        .run()
        .success();
    let d: DiffReport = out.json();
    assert_eq!(d.verdict, Verdict::Same);
    assert_eq!(
        d.skipped_lines_a.iter().map(|b| b.line).collect::<Vec<_>>(),
        [line]
    );
    assert!(d.skipped_lines_b.is_empty());
    assert_contains(&out.stderr, &skipped);
    Mt::new(["diff", "--skip-bad-lines"])
        .arg(&bad)
        .arg(&good)
        .run()
        .success()
        .stdout_contains(&format!("note: A ({}): {counted}", s(&bad)));

    // check against a fresh server-memory: passes, the report counts the baseline's line.
    let (r, out) = check_skipping(dir.path(), &bad, 0, line);
    assert_eq!(r.regression_count(), 0, "{:#?}", r.exchanges);
    assert_contains(&out.stderr, &skipped);

    // lint lists it; redact leaves it out of a tape that then verifies intact.
    Mt::new(["lint", "--skip-bad-lines"])
        .arg(&bad)
        .run()
        .status(1)
        .stdout_contains(&skipped);
    let out_tape = dir.path().join("redacted.jsonl");
    Mt::new(["redact", "--skip-bad-lines", "-o"])
        .arg(&out_tape)
        .arg(&bad)
        .run()
        .success()
        .stderr_contains(&format!("{counted}, not copied"));
    Mt::new(["verify"]).arg(&out_tape).run().success();
}

#[test]
fn a_skipped_line_that_held_an_answer_leaves_its_request_unanswered_and_says_so() {
    let dir = tmp();
    let (good, _) = recorded(dir.path());
    let pred = answer_of_tool(&good, "read_graph");
    let (bad, line) = corrupted(&good, pred);
    let request_line = line - 1;

    // play answers the request with an error naming the skipped line; a miss-like exit 1.
    let (answers, stderr, code) = replay(dir.path(), &bad, &["--skip-bad-lines"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        answers[2].is_null(),
        "no result for read_graph: {answers:?}"
    );
    assert_contains(
        &stderr,
        &format!("the recorded answer to this request (tape line {request_line}) is not on the tape: tape line {line}, after it, was skipped as malformed (--skip-bad-lines) and may have held it"),
    );
    assert_contains(
        &stderr,
        &format!("unanswered on the tape 1, 1 malformed tape line skipped (line {line})"),
    );

    // show: the request is there, its answer is not (no latency for it).
    let doc: Value = Mt::new(["show", "--json", "--skip-bad-lines"])
        .arg(&bad)
        .run()
        .success()
        .json();
    let rows = doc["messages"].as_array().unwrap();
    assert!(rows.iter().any(|m| m["line"] == request_line));
    assert!(rows.iter().all(|m| m["line"] != line));

    // diff: the recording with the lost answer drifts from the whole one, and says why.
    let out = Mt::new(["diff", "--format", "json", "--skip-bad-lines"])
        .arg(&bad)
        .arg(&good)
        .run();
    assert_ne!(out.code(), 0);
    let d: DiffReport = out.json();
    assert_eq!(
        d.skipped_lines_a.iter().map(|b| b.line).collect::<Vec<_>>(),
        [line]
    );
    assert_eq!(d.drifts[0].exchange.line, request_line, "{d:#?}");

    // check: that exchange cannot pass (the baseline has no answer to compare); the report
    // names the skipped line beside it.
    let (r, _) = check_skipping(dir.path(), &bad, 1, line);
    let failing: Vec<u64> = r
        .exchanges
        .iter()
        .filter(|e| e.status != Status::Pass)
        .map(|e| e.exchange.line)
        .collect();
    assert_eq!(failing, [request_line], "{:#?}", r.exchanges);
}

#[test]
fn a_skipped_line_that_held_a_request_makes_it_a_miss_whose_explanation_lists_the_line() {
    let dir = tmp();
    let (good, _) = recorded(dir.path());
    let (bad, line) = corrupted(&good, |l| {
        l["dir"] == "c2s" && l["msg"]["params"]["name"] == "read_graph"
    });
    let (answers, stderr, code) = replay(dir.path(), &bad, &["--skip-bad-lines"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(answers[2].is_null(), "read_graph missed: {answers:?}");
    assert_contains(
        &stderr,
        &format!("tape lines skipped as malformed (--skip-bad-lines): {line}; the call may have been on one"),
    );
    assert_contains(
        &stderr,
        &format!("missed 1, drifted 0, 1 malformed tape line skipped (line {line})"),
    );
}

/// A tape an editor saved with a UTF-8 byte-order mark (Windows editors add one) is read by
/// every reader as the tape it is: the mark is an encoding marker, not content, so the hash
/// chain still holds from the header. It was refused as "the first line is not a JSON header",
/// without a word about the mark.
#[test]
fn a_tape_saved_with_a_utf8_byte_order_mark_is_read_by_every_reader() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let server = demo_server("healthy");
    let add = req(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    let mut c = LineClient::spawn(&record_cmd(&tape, &server));
    c.initialize();
    let (answer, _) = c.ask(&add);
    c.finish_with(0);
    let bom = dir.path().join("bom.jsonl");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(std::fs::read(&tape).unwrap());
    std::fs::write(&bom, &bytes).unwrap();

    Mt::new(["verify"])
        .arg(&bom)
        .run()
        .success()
        .stdout_contains("intact");
    Mt::new(["show"])
        .arg(&bom)
        .run()
        .success()
        .stdout_contains("tools/call");
    Mt::new(["lint"]).arg(&bom).run().success();
    Mt::new(["diff"]).arg(&tape).arg(&bom).run().success();
    let mut c = LineClient::spawn(&play_cmd(&bom));
    c.initialize();
    let (played, _) = c.ask(&add);
    assert_eq!(played, answer);
    c.finish_with(0);
    // Rewritten, it loses the mark.
    let out = dir.path().join("redacted.jsonl");
    Mt::new(["redact"])
        .arg(&bom)
        .arg("-o")
        .arg(&out)
        .run()
        .success();
    assert!(!std::fs::read(&out).unwrap().starts_with(b"\xEF\xBB\xBF"));
    // Saved as UTF-16 instead: refused, saying why.
    let utf16 = dir.path().join("utf16.jsonl");
    let text = std::fs::read_to_string(&tape).unwrap();
    let mut bytes = b"\xFF\xFE".to_vec();
    bytes.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    std::fs::write(&utf16, &bytes).unwrap();
    Mt::new(["show"])
        .arg(&utf16)
        .run()
        .status(65)
        .stderr_contains("UTF-16");
}

/// A tape edited by hand (a fixture changed in a repository) whose line fields no longer agree
/// with its messages: readers go by the fields (play matched the request by the line's
/// `method`, show listed it under the line's `kind`, a message of an undeclared server was left
/// out), and lint said only that the hash chain was broken. Now lint names each line and what
/// disagrees; a tape as recorded stays clean.
#[test]
fn lint_names_lines_whose_fields_disagree_with_their_message() {
    let dir = tmp();
    let (good, _) = recorded(dir.path());
    Mt::new(["lint"])
        .arg(&good)
        .run()
        .success()
        .stdout_contains("clean");
    let lines = tape_lines(&good);
    let request = lines
        .iter()
        .position(|l| l["type"] == "msg" && l["kind"] == "request" && l["method"] == "tools/call")
        .expect("a tool call");
    let notification = lines
        .iter()
        .position(|l| l["type"] == "msg" && l["kind"] == "notification")
        .expect("a notification");
    let mut edited = lines.clone();
    edited[request]["method"] = "tools/list".into();
    edited[request]["id"] = 999.into();
    edited[notification]["kind"] = "request".into();
    let answer = edited
        .iter()
        .rposition(|l| l["type"] == "msg" && l["dir"] == "s2c")
        .unwrap();
    edited[answer]["server"] = "elsewhere".into();
    // The line after the tool call numbered as the call.
    assert_eq!(edited[request + 1]["type"], "msg");
    let repeated = edited[request]["seq"].clone();
    edited[request + 1]["seq"] = repeated.clone();
    let bad = dir.path().join("edited.jsonl");
    let text: String = edited.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&bad, text).unwrap();
    let out = Mt::new(["lint"]).arg(&bad).run().status(1);
    let line = |i: usize| i + 1;
    for want in [
        format!(
            "line {} (seq {}): the line says id 999, the message's is {}; method \"tools/list\", the message's is \"tools/call\"",
            line(request),
            lines[request]["seq"],
            lines[request]["msg"]["id"]
        ),
        format!(
            "line {} (seq {}): the line says kind \"request\", the message is a notification",
            line(notification),
            lines[notification]["seq"]
        ),
        format!(
            "line {}: a message of server \"elsewhere\", which no server line before it declares (declared: default)",
            line(answer)
        ),
        format!(
            "line {}: seq {repeated} after seq {repeated}: message lines are numbered in the order they were written",
            line(request + 1)
        ),
    ] {
        assert_contains(&out.stdout, &want);
    }
}
