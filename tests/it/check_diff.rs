//! `mcptape check` and `mcptape diff` against real processes: sessions recorded through
//! `mcptape record` (with the Python SDK client, or by hand with a line client), then checked
//! against the same server, or against the fixture server's drifted build (`FIXTURE_DRIFT=1`,
//! see tests/peers/README.md), and diffed. JSON reports are read back into the harness's copies
//! of the report shape, which refuse unknown fields; the console, Markdown and JUnit reports of
//! the bundled demo are compared with golden files (tests/golden).

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

// --- helpers ---------------------------------------------------------------------------------

const DRIFT: &[(&str, &str)] = &[("FIXTURE_DRIFT", "1")];

/// `mcptape check TAPE FLAGS… -- SERVER…` with extra environment variables (FIXTURE_DRIFT is
/// never inherited), given 120 s: a check drives a real server.
fn check_cmd(tape: &Path, flags: &[&str], server: &[String], env: &[(&str, &str)]) -> Run {
    Mt::new(["check"])
        .arg(tape)
        .args(flags)
        .arg("--")
        .args(server)
        .envs(env)
        .timeout(Duration::from_secs(120))
        .run()
}

/// `mcptape check … --json -`, the report read back (strictly).
fn check(
    tape: &Path,
    flags: &[&str],
    server: &[String],
    env: &[(&str, &str)],
) -> (CheckReport, Run) {
    let mut f = flags.to_vec();
    f.extend(["--json", "-"]);
    let out = check_cmd(tape, &f, server, env);
    (out.json(), out)
}

/// A JSON report written to a file, read back (strictly).
fn check_report_file(path: &Path) -> CheckReport {
    let text = std::fs::read_to_string(path).expect("JSON report written");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the JSON report does not read back ({e}):\n{text}"))
}

/// The exchange for `method` (and tool, prompt or resource `target`), the first such.
fn ex<'a>(r: &'a CheckReport, method: &str, target: Option<&str>) -> &'a CheckedExchange {
    r.exchanges
        .iter()
        .find(|e| e.exchange.method == method && e.exchange.target.as_deref() == target)
        .unwrap_or_else(|| panic!("no {method} {target:?} exchange in the report: {r:#?}"))
}

/// The change of `kind` at `path`, which `e` must have.
fn assert_change(e: &CheckedExchange, kind: ChangeKind, path: &str) -> Change {
    e.changes
        .iter()
        .find(|c| c.kind == kind && c.path == path)
        .unwrap_or_else(|| {
            panic!(
                "expected {kind:?} at {path} for {:?}; got {:#?}",
                e.exchange, e.changes
            )
        })
        .clone()
}

/// Records a session with the fixture server by hand: `mcptape record` in front of the normal
/// (undrifted) `py_server.py`, a line client doing the handshake then each call in turn.
/// Returns the responses.
pub(crate) fn record_py(tape: &Path, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut c = Mt::new(["record", "--tape"])
        .arg(tape)
        .arg("--")
        .args(py_server())
        .spawn();
    let init = c.initialize();
    assert!(init.get("result").is_some(), "handshake failed: {init}");
    let responses: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (method, params))| c.call(i as i64 + 1, method, params.clone()))
        .collect();
    let (status, stderr) = c.finish();
    assert!(status.success(), "record failed: {status:?}\n{stderr}");
    responses
}

pub(crate) fn tool(name: &str, arguments: Value) -> (&'static str, Value) {
    ("tools/call", json!({"name": name, "arguments": arguments}))
}

/// `mcptape diff A B FLAGS…`.
fn diff_cmd(a: &Path, b: &Path, flags: &[&str]) -> Run {
    Mt::new(["diff"]).arg(a).arg(b).args(flags).run()
}

/// `mcptape diff A B --format json FLAGS…`, read back strictly.
fn diff_json(a: &Path, b: &Path, flags: &[&str]) -> (DiffReport, Run) {
    let out = diff_cmd(a, b, &[&["--format", "json"], flags].concat());
    (out.json(), out)
}

/// The Python SDK client's scenario through the recorder in front of `server`; the tape path.
fn py_record(
    dir: &Path,
    name: &str,
    scenario: &str,
    server: &[String],
    env: &[(&str, &str)],
) -> PathBuf {
    let tape = dir.join(name);
    let (_, out) = py_client(scenario, "legacy", &record_cmd(&tape, server), env);
    assert!(
        out.status.success(),
        "py_client {scenario} through the recorder failed: {:?}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(tape.exists(), "no tape written");
    tape
}

/// `mcptape demo --dir DIR`: the demo's healthy and drifted recordings, `demo.jsonl` and
/// `demo-drifted.jsonl` in `dir`.
fn demo_tapes(dir: &Path) -> (PathBuf, PathBuf) {
    Mt::new(["demo", "--dir"]).arg(dir).run().success();
    (dir.join("demo.jsonl"), dir.join("demo-drifted.jsonl"))
}

// --- check against the same server: grade A ------------------------------------------------

#[test]
fn memory_session_checked_against_the_same_server_is_grade_a() {
    let dir = tmp();
    let rec_mem = s(dir.path().join("record-memory.jsonl"));
    let tape = py_record(
        dir.path(),
        "memory.jsonl",
        "memory",
        &memory(),
        &[("MEMORY_FILE_PATH", &rec_mem)],
    );
    // server-memory keeps its graph in the file: the check run starts from an empty one too.
    let check_mem = s(dir.path().join("check-memory.jsonl"));
    let json_file = dir.path().join("report.json");
    let out = check_cmd(
        &tape,
        &["--fail-on-regression", "--json", &s(&json_file)],
        &memory(),
        &[("MEMORY_FILE_PATH", &check_mem)],
    );
    let report = check_report_file(&json_file);
    let out = out.success();
    assert_eq!(report.grade, Grade::A, "{}", out.console());
    assert_eq!(report.score, 100.0);
    assert!(!report.capped);
    assert!(report.regressions.is_empty(), "{:#?}", report.regressions);
    assert_eq!(report.regression_count(), 0);
    assert!(report.gate.passed && report.gate.fail_on_regression);
    assert!(report.tool_surface.is_empty(), "{:?}", report.tool_surface);
    assert_eq!(report.run_error, None);
    // initialize + the scenario's 7 steps, every one answered as recorded.
    assert_eq!(report.exchanges.len(), 8, "{:#?}", report.exchanges);
    assert!(report.exchanges.iter().all(|e| e.status == Status::Pass));
    for t in [
        "create_entities",
        "create_relations",
        "add_observations",
        "read_graph",
        "search_nodes",
        "open_nodes",
    ] {
        assert_eq!(ex(&report, "tools/call", Some(t)).status, Status::Pass);
    }
    // The console summary went to stdout (no --json -).
    out.stdout_contains("grade A");
}

#[test]
fn everything_session_checked_against_the_same_server_is_grade_a_and_sampling_is_answered() {
    let dir = tmp();
    let tape = py_record(
        dir.path(),
        "everything.jsonl",
        "everything",
        &everything(),
        &[],
    );
    let original = std::fs::read(&tape).expect("tape");
    // --update keeps the check's own session, so what crossed the wire can be inspected.
    let (report, out) = check(&tape, &["--update"], &everything(), &[]);
    let failing: Vec<&CheckedExchange> = report
        .exchanges
        .iter()
        .filter(|e| e.status != Status::Pass)
        .collect();
    assert!(
        failing.is_empty(),
        "volatile values not masked? {failing:#?}\n{}",
        out.console()
    );
    assert_eq!(report.grade, Grade::A, "{}", out.console());
    assert_eq!(report.score, 100.0);
    assert!(report.regressions.is_empty());
    out.success();
    for t in [
        "echo",
        "get-sum",
        "trigger-sampling-request",
        "trigger-long-running-operation",
        "get-structured-content",
    ] {
        assert_eq!(
            ex(&report, "tools/call", Some(t)).status,
            Status::Pass,
            "{t}"
        );
    }
    let bak = report
        .updated_backup
        .as_deref()
        .expect("--update names the backup");
    assert_eq!(std::fs::read(bak).expect("backup"), original);

    // The live server asked for sampling; the check answered with the client's recorded answer.
    let msgs = tape_msgs(&tape);
    let ask = msgs
        .iter()
        .find(|m| m["dir"] == "s2c" && m["method"] == "sampling/createMessage")
        .expect("the live server sent sampling/createMessage during the check");
    let answer = msgs
        .iter()
        .find(|m| {
            m["dir"] == "c2s" && m["kind"] == "response" && m["msg"]["id"] == ask["msg"]["id"]
        })
        .expect("the check answered the sampling request");
    assert_eq!(
        answer["msg"]["result"]["model"], "mcptape-fixed-model",
        "{answer}"
    );
    assert_eq!(
        answer["msg"]["result"]["content"]["text"],
        "A fixed answer from the mcptape test client."
    );
    // Progress was sent by the live server too.
    assert!(msgs
        .iter()
        .any(|m| m["dir"] == "s2c" && m["method"] == "notifications/progress"));
}

// --- check against a drifted build ----------------------------------------------------------

/// The session checked against the drifted fixture: every regression kind, one each.
fn drift_session() -> Vec<(&'static str, Value)> {
    vec![
        ("tools/list", json!({})),
        tool("add", json!({"a": 2, "b": 3})),
        tool("echo", json!({"text": "hello tape"})),
        tool("weather", json!({"city": "Oslo"})),
        ("resources/list", json!({})),
        tool("now", json!({})),
        ("resources/templates/list", json!({})),
        ("resources/read", json!({"uri": "fixture://greeting"})),
        ("resources/read", json!({"uri": "fixture://items/7"})),
        ("prompts/list", json!({})),
        (
            "prompts/get",
            json!({"name": "review", "arguments": {"code": "x = 1"}}),
        ),
        // Last: the drifted build exits here without answering.
        tool("counter", json!({})),
    ]
}

#[test]
fn drifted_server_each_regression_kind_with_its_path_and_every_report() {
    let (dir, tape) = tmp_tape("fixture.jsonl");
    let responses = record_py(&tape, &drift_session());
    assert_eq!(responses[1]["result"]["structuredContent"]["result"], 5);

    let (json_file, md, junit, badge) = (
        dir.path().join("r.json"),
        dir.path().join("r.md"),
        dir.path().join("r.xml"),
        dir.path().join("badge.json"),
    );
    let out = check_cmd(
        &tape,
        &[
            "--fail-on-regression",
            "--json",
            &s(&json_file),
            "--markdown",
            &s(&md),
            "--junit",
            &s(&junit),
            "--badge",
            &s(&badge),
        ],
        &py_server(),
        DRIFT,
    );
    assert_eq!(
        out.code(),
        1,
        "--fail-on-regression fails: {}",
        out.console()
    );
    let r = check_report_file(&json_file);

    // value-change: add answers 6.
    let add = ex(&r, "tools/call", Some("add"));
    assert_eq!(add.status, Status::Regression);
    let c = assert_change(
        add,
        ChangeKind::ValueChange,
        "$.result.structuredContent.result",
    );
    assert_eq!((c.recorded, c.observed), (Some(json!(5)), Some(json!(6))));
    let c = assert_change(add, ChangeKind::ValueChange, "$.result.content[0].text");
    assert_eq!(
        (c.recorded, c.observed),
        (Some(json!("5")), Some(json!("6")))
    );
    assert_eq!(add.exchange.arguments, Some(json!({"a": 2, "b": 3})));

    // error-status-change: echo's result became a JSON-RPC error.
    let echo = ex(&r, "tools/call", Some("echo"));
    let c = assert_change(echo, ChangeKind::ErrorStatusChange, "$");
    assert!(
        c.recorded.as_ref().unwrap().get("result").is_some(),
        "{c:?}"
    );
    assert_eq!(
        c.observed.as_ref().unwrap()["error"]["code"],
        -32603,
        "{c:?}"
    );

    // structure-change: weather's structured output gained a field (JSON text too).
    let weather = ex(&r, "tools/call", Some("weather"));
    let c = assert_change(
        weather,
        ChangeKind::StructureChange,
        "$.result.structuredContent.humidity_pct",
    );
    assert_eq!((c.recorded, c.observed), (None, Some(json!(80))));
    assert_change(
        weather,
        ChangeKind::StructureChange,
        "$.result.content[0].text.humidity_pct",
    );
    assert!(
        weather
            .changes
            .iter()
            .all(|c| c.kind == ChangeKind::StructureChange),
        "{:#?}",
        weather.changes
    );

    // ordering-change: the same resources, listed the other way round.
    let list = ex(&r, "resources/list", None);
    assert_eq!(list.changes.len(), 1, "{:#?}", list.changes);
    let c = assert_change(list, ChangeKind::OrderingChange, "$.result.resources");
    assert_eq!(c.recorded.unwrap()[0]["uri"], "fixture://greeting");
    assert_eq!(c.observed.unwrap()[0]["uri"], "fixture://config");

    // missing-response: counter crashed the drifted build.
    let counter = ex(&r, "tools/call", Some("counter"));
    assert_eq!(counter.status, Status::Missing, "{counter:#?}");
    assert_change(counter, ChangeKind::MissingResponse, "$");
    assert!(counter.detail.is_some(), "{counter:#?}");

    // Everything else answered as recorded (now's timestamp and UUID are masked).
    for (method, target) in [
        ("initialize", None),
        ("tools/list", None),
        ("tools/call", Some("now")),
        ("resources/templates/list", None),
        ("prompts/list", None),
        ("prompts/get", Some("review")),
    ] {
        let e = ex(&r, method, target);
        assert_eq!(e.status, Status::Pass, "{e:#?}");
    }
    assert_eq!(r.exchanges.len(), 13);
    assert!(r
        .exchanges
        .iter()
        .filter(|e| e.exchange.method == "resources/read")
        .all(|e| e.status == Status::Pass));
    assert!(
        r.tool_surface.is_empty(),
        "same tools/list: {:?}",
        r.tool_surface
    );

    let expected: std::collections::BTreeMap<ChangeKind, usize> = [
        (ChangeKind::MissingResponse, 1),
        (ChangeKind::ErrorStatusChange, 1),
        (ChangeKind::StructureChange, 1),
        (ChangeKind::OrderingChange, 1),
        (ChangeKind::ValueChange, 1),
    ]
    .into();
    assert_eq!(r.regressions, expected);
    assert_eq!(r.regression_count(), 5);
    // 13 exchanges: 12 answered, 8 matched; the score alone would be a C, the missing answer
    // caps it at D.
    assert!(r.score >= 70.0 && r.score < 80.0, "score {}", r.score);
    assert_eq!((r.grade, r.capped), (Grade::D, true));
    assert!(!r.gate.passed && r.gate.fail_on_regression);

    // JUnit: a testcase per exchange; regressions are failures, the missing answer an error.
    let xml = std::fs::read_to_string(&junit).expect("JUnit written");
    let report = quick_junit::Report::deserialize_from_str(&xml)
        .unwrap_or_else(|e| panic!("JUnit does not parse ({e}):\n{xml}"));
    assert_eq!(report.test_suites.len(), 1, "{xml}");
    let suite = &report.test_suites[0];
    // One testcase per exchange, plus one for the run error (the server exited mid-session).
    let exchanges: Vec<&quick_junit::TestCase> = suite
        .test_cases
        .iter()
        .filter(|tc| tc.classname.as_ref().map(|c| c.as_str()) != Some("mcptape"))
        .collect();
    assert_eq!(exchanges.len(), 13, "{xml}");
    assert_eq!(suite.test_cases.len(), 14, "{xml}");
    assert!(r.run_error.is_some(), "{:?}", r.run_error);
    assert_eq!((suite.failures, suite.errors), (4, 2), "{xml}");
    let kind_of = |tc: &quick_junit::TestCase| match &tc.status {
        quick_junit::TestCaseStatus::Success { .. } => None,
        quick_junit::TestCaseStatus::NonSuccess { kind, .. } => Some(*kind),
        quick_junit::TestCaseStatus::Skipped { .. } => panic!("skipped: {}", tc.name.as_str()),
    };
    let case = |needle: &str| {
        suite
            .test_cases
            .iter()
            .find(|tc| tc.name.as_str().contains(needle))
            .unwrap_or_else(|| panic!("no testcase {needle:?} in\n{xml}"))
    };
    assert_eq!(
        kind_of(case("tools/call add")),
        Some(quick_junit::NonSuccessKind::Failure)
    );
    if let quick_junit::TestCaseStatus::NonSuccess { message, .. } = &case("tools/call add").status
    {
        assert!(
            message.as_ref().unwrap().as_str().contains("value-change"),
            "{xml}"
        );
    }
    assert_eq!(
        kind_of(case("tools/call counter")),
        Some(quick_junit::NonSuccessKind::Error)
    );
    assert_eq!(kind_of(case("tools/call now")), None);
    let run_case = suite
        .test_cases
        .iter()
        .find(|tc| tc.name.as_str() == "run")
        .expect("a testcase for the run error");
    assert_eq!(kind_of(run_case), Some(quick_junit::NonSuccessKind::Error));
    assert_eq!(
        suite
            .test_cases
            .iter()
            .filter(|tc| kind_of(tc) == Some(quick_junit::NonSuccessKind::Failure))
            .count(),
        4
    );

    // Markdown: the grade, the cap, the regressions.
    let md = std::fs::read_to_string(&md).expect("Markdown written");
    assert_contains(&md, "grade D");
    assert_contains(&md, "| --- |");
    assert_contains(&md, "$.result.structuredContent.result");

    // Badge: shields.io endpoint JSON.
    let badge: Value =
        serde_json::from_str(&std::fs::read_to_string(&badge).unwrap()).expect("badge is JSON");
    assert_eq!(badge["schemaVersion"], 1);
    assert!(
        badge["message"].as_str().unwrap().starts_with("D "),
        "{badge}"
    );
    assert_eq!(badge["color"], "orange");

    // Gates: --min-grade F alone passes (exit 0); --min-grade C fails on a D.
    let (r2, out) = check(&tape, &["--min-grade", "F"], &py_server(), DRIFT);
    out.success();
    assert!(r2.gate.passed && !r2.gate.fail_on_regression);
    assert_eq!(r2.gate.min_grade, Some(Grade::F));
    assert_eq!(r2.grade, Grade::D);
    check_cmd(&tape, &["--min-grade", "C"], &py_server(), DRIFT).status(1);
}

/// A baseline with nothing on it (its header only: a recording cut off at once) checks
/// nothing, and that is no pass: it graded A and passed the gate.
#[test]
fn a_baseline_with_no_exchange_fails_the_gate() {
    let dir = tmp();
    let (healthy, _) = demo_tapes(dir.path());
    let header = std::fs::read_to_string(&healthy)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, format!("{header}\n")).unwrap();
    let server = vec![s(bin()), "demo-server".to_string()];
    check_cmd(&empty, &[], &server, &[])
        .status(1)
        .stdout_contains("gate failed: nothing was checked: the baseline holds no exchange");
    // Asked only for a grade, all the same.
    check_cmd(&empty, &["--min-grade", "F"], &server, &[])
        .status(1)
        .stdout_contains("nothing was checked");
}

#[test]
fn a_request_past_the_timeout_is_a_missing_response() {
    let (_dir, tape) = tmp_tape("slow.jsonl");
    record_py(
        &tape,
        &[tool("slow_echo", json!({"text": "late", "delay_ms": 10}))],
    );
    // The drifted build sleeps 4 s longer; the check waits 1 s.
    let (r, out) = check(&tape, &["--timeout", "1"], &py_server(), DRIFT);
    let e = ex(&r, "tools/call", Some("slow_echo"));
    assert_eq!(
        e.status,
        Status::Missing,
        "no answer within --timeout must be a missing response, whatever arrives later: {e:#?}\n{}",
        out.console()
    );
    assert_change(e, ChangeKind::MissingResponse, "$");
    assert!(
        r.grade >= Grade::D,
        "a missing answer caps the grade at D: {r:#?}"
    );
    out.status(1);
}

#[test]
fn a_tool_result_turned_into_a_tool_error_is_an_error_status_change() {
    let (_dir, tape) = tmp_tape("toolerror.jsonl");
    let responses = record_py(&tape, &[tool("progress_steps", json!({"steps": 1}))]);
    assert_eq!(responses[0]["result"]["isError"], false);
    // The drifted build answers {"content": […], "isError": true}: the tool failed.
    let (r, out) = check(&tape, &[], &py_server(), DRIFT);
    let e = ex(&r, "tools/call", Some("progress_steps"));
    assert_eq!(e.status, Status::Regression, "{}", out.console());
    assert!(
        e.changes
            .iter()
            .any(|c| c.kind == ChangeKind::ErrorStatusChange),
        "isError false → true should be an error-status-change; got {:#?}",
        e.changes
    );
    assert!(r.dimensions.error_parity < 1.0, "{:?}", r.dimensions);
}

// --- normalization --------------------------------------------------------------------------

/// `--ignore-path` over add's answer, both places it appears.
const IGNORE_ADD: &[&str] = &[
    "--ignore-path",
    "$.result.structuredContent.result",
    "--ignore-path",
    "$.result.content[0].text",
];

#[test]
fn masking_ignore_path_and_allow_reorder() {
    let (_dir, tape) = tmp_tape("clock.jsonl");
    let responses = record_py(
        &tape,
        &[
            tool("now", json!({})),
            tool("add", json!({"a": 1, "b": 1})),
            ("resources/list", json!({})),
        ],
    );
    let recorded_stamp = responses[0]["result"]["structuredContent"]["stamp"].clone();
    assert!(recorded_stamp.is_string(), "{}", responses[0]);

    // Same server: the timestamp, the epoch seconds and the UUID differ, and are masked.
    let (r, out) = check(&tape, &[], &py_server(), &[]);
    out.success();
    assert_eq!(r.grade, Grade::A);
    assert!(
        r.exchanges.iter().all(|e| e.status == Status::Pass),
        "{r:#?}"
    );

    // --no-auto-mask: the same values are regressions, at their own paths.
    let (r, out) = check(&tape, &["--no-auto-mask"], &py_server(), &[]);
    out.status(1);
    let now = ex(&r, "tools/call", Some("now"));
    assert_eq!(now.status, Status::Regression);
    for path in [
        "$.result.structuredContent.stamp",
        "$.result.structuredContent.id",
        "$.result.structuredContent.created_at",
        "$.result.content[0].text.stamp",
        "$.result.content[0].text.id",
    ] {
        assert_change(now, ChangeKind::ValueChange, path);
    }
    assert_eq!(
        assert_change(
            now,
            ChangeKind::ValueChange,
            "$.result.structuredContent.stamp"
        )
        .recorded,
        Some(recorded_stamp)
    );
    assert!(now.changes.iter().all(|c| !c.path.ends_with(".label")));
    assert_eq!(ex(&r, "tools/call", Some("add")).status, Status::Pass);

    // Drifted build, --ignore-path over add's answer: add passes, the reordered list does not.
    let (r, out) = check(&tape, IGNORE_ADD, &py_server(), DRIFT);
    assert_eq!(
        ex(&r, "tools/call", Some("add")).status,
        Status::Pass,
        "{}",
        out.console()
    );
    let list = ex(&r, "resources/list", None);
    assert_change(list, ChangeKind::OrderingChange, "$.result.resources");
    out.status(1);

    // Drifted build, --allow-reorder: the list passes, add's value change remains.
    let (r, out) = check(&tape, &["--allow-reorder"], &py_server(), DRIFT);
    assert_eq!(
        ex(&r, "resources/list", None).status,
        Status::Pass,
        "{}",
        out.console()
    );
    let add = ex(&r, "tools/call", Some("add"));
    assert_change(
        add,
        ChangeKind::ValueChange,
        "$.result.structuredContent.result",
    );
    assert_eq!(ex(&r, "tools/call", Some("now")).status, Status::Pass);
    assert_eq!(r.regressions.len(), 1, "{:?}", r.regressions);

    // Both together: nothing left.
    let (r, out) = check(
        &tape,
        &[&["--allow-reorder"][..], IGNORE_ADD].concat(),
        &py_server(),
        DRIFT,
    );
    out.success();
    assert_eq!(r.grade, Grade::A);
}

// --- --update -------------------------------------------------------------------------------

#[test]
fn update_makes_the_drifted_behaviour_the_baseline_and_keeps_a_backup() {
    let (_dir, tape) = tmp_tape("base.jsonl");
    record_py(
        &tape,
        &[
            ("tools/list", json!({})),
            tool("add", json!({"a": 2, "b": 3})),
            tool("echo", json!({"text": "hi"})),
            tool("weather", json!({"city": "Paris"})),
            ("resources/list", json!({})),
        ],
    );
    let original = std::fs::read(&tape).unwrap();

    let (r, out) = check(&tape, &["--update"], &py_server(), DRIFT);
    let out = out.success(); // accepting the change is what was asked: exit 0 (it was 1)
    assert_contains(
        &out.stderr,
        "--update accepted the changes above as the new baseline",
    );
    assert_eq!(r.regression_count(), 4, "{}", out.console());
    let bak = PathBuf::from(r.updated_backup.as_deref().expect("backup named"));
    assert_eq!(bak, PathBuf::from(format!("{}.bak", tape.display())));
    assert_eq!(
        std::fs::read(&bak).unwrap(),
        original,
        "TAPE.bak is the old baseline"
    );
    assert_ne!(std::fs::read(&tape).unwrap(), original);
    let msgs = tape_msgs(&tape);
    assert!(
        msgs.iter()
            .any(|m| m["msg"]["error"]["message"] == "echo is broken in this build"),
        "the new baseline holds the drifted answers"
    );

    // The drifted build now matches its baseline.
    let (r, out) = check(&tape, &["--fail-on-regression"], &py_server(), DRIFT);
    let out = out.success();
    assert_eq!((r.grade, r.score), (Grade::A, 100.0), "{}", out.console());
    assert_eq!(r.updated_backup, None);
    assert_eq!(r.exchanges.len(), 6);
}

// --- diff -----------------------------------------------------------------------------------

#[test]
fn diff_of_parallel_and_reordered_recordings_is_same() {
    let dir = tmp();
    let a = py_record(dir.path(), "a.jsonl", "parallel", &py_server(), &[]);
    let b = py_record(dir.path(), "b.jsonl", "parallel", &py_server(), &[]);
    // In both, the 8 answers came back in (roughly) reverse order of the requests.
    let out = diff_cmd(&a, &b, &[]).success();
    assert!(out.stdout.starts_with("same"), "{}", out.console());

    // The same calls made one at a time, in reverse order, by another client (same handshake).
    let msgs = tape_msgs(&a);
    let requests: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "c2s" && m["kind"] == "request")
        .map(|m| &m["msg"])
        .collect();
    assert_eq!(requests[0]["method"], "initialize");
    let c_tape = dir.path().join("c.jsonl");
    let mut c = Mt::new(["record", "--tape"])
        .arg(&c_tape)
        .arg("--")
        .args(py_server())
        .spawn();
    c.call(0, "initialize", requests[0]["params"].clone());
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let calls: Vec<&Value> = requests[1..].iter().rev().copied().collect();
    assert_eq!(calls.len(), 9, "tools/list and 8 slow_echo");
    for (i, r) in calls.iter().enumerate() {
        let params = r.get("params").cloned().unwrap_or(Value::Null);
        let resp = c.call(100 + i as i64, r["method"].as_str().unwrap(), params);
        assert!(resp.get("result").is_some(), "{resp}");
    }
    c.finish_with(0);

    let (r, out) = diff_json(&a, &c_tape, &[]);
    out.success();
    assert_eq!(r.verdict, Verdict::Same, "{r:#?}");
    assert_eq!(r.compared, 10);
    assert!(r.drifts.is_empty() && r.only_in_a.is_empty() && r.only_in_b.is_empty());
    assert!(r.tool_surface.is_empty());
}

#[test]
fn diff_of_the_demo_tapes_is_output_drift_at_the_right_paths() {
    let dir = tmp();
    let (a, b) = demo_tapes(dir.path());

    // Text: the first drift only, then --all for both.
    let t = diff_cmd(&a, &b, &[]).status(1).stdout;
    assert!(t.starts_with("output drift"), "{t}");
    assert_contains(&t, "first drift: tools/call convert_temperature");
    assert_contains(&t, "$.result.content[0].text");
    assert_contains(&t, "1 more drift; --all shows it");
    assert!(!t.contains("lookup_city"), "{t}");
    let t = diff_cmd(&a, &b, &["--all"]).status(1).stdout;
    assert!(
        t.contains("convert_temperature") && t.contains("lookup_city"),
        "{t}"
    );
    assert_contains(&t, "$.result.structuredContent.coordinates");
    assert_contains(&t, "$.result.structuredContent.coords");

    // JSON, strictly.
    let (r, out) = diff_json(&a, &b, &[]);
    out.status(1);
    assert_eq!(r.verdict, Verdict::OutputDrift);
    assert_eq!(r.drifts.len(), 2, "{r:#?}");
    assert!(r.only_in_a.is_empty() && r.only_in_b.is_empty() && r.tool_surface.is_empty());
    let conv = &r.drifts[0];
    assert_eq!(conv.exchange.target.as_deref(), Some("convert_temperature"));
    let c = &conv.changes[0];
    assert_eq!(
        (c.kind, c.path.as_str()),
        (ChangeKind::ValueChange, "$.result.content[0].text")
    );
    assert_eq!(c.recorded, Some(json!("21.5 °C is 70.7 °F")));
    assert_eq!(c.observed, Some(json!("21.5 °C is 69.7 °F")));
    let city = &r.drifts[1];
    assert_eq!(city.exchange.target.as_deref(), Some("lookup_city"));
    let paths: Vec<(ChangeKind, &str)> = city
        .changes
        .iter()
        .map(|c| (c.kind, c.path.as_str()))
        .collect();
    assert!(
        paths.contains(&(
            ChangeKind::StructureChange,
            "$.result.structuredContent.coordinates"
        )) && paths.contains(&(
            ChangeKind::StructureChange,
            "$.result.structuredContent.coords"
        )),
        "{paths:?}"
    );

    // Markdown: a table.
    let md = diff_cmd(&a, &b, &["--format", "markdown"]).status(1).stdout;
    assert!(md.contains("| --- |") || md.contains("|---|"), "{md}");
    assert_contains(&md, "convert_temperature");

    // The same tape against itself.
    let (r, out) = diff_json(&a, &a, &[]);
    assert_eq!((out.code(), r.verdict), (0, Verdict::Same));
}

fn init_pair(id: i64) -> [(&'static str, Value); 2] {
    [
        (
            "c2s",
            json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}}),
        ),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}}),
        ),
    ]
}

fn call_pair(id: i64, name: &str, args: Value, answer: Value) -> [(&'static str, Value); 2] {
    [
        (
            "c2s",
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}}),
        ),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": answer}]}}),
        ),
    ]
}

fn list_pair(id: i64, tools: Value) -> [(&'static str, Value); 2] {
    [
        (
            "c2s",
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        ),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
        ),
    ]
}

fn add_tool(required: &[&str]) -> Value {
    json!({"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}, "c": {"type": "number"}}, "required": required}})
}

fn echo_tool() -> Value {
    json!({"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
}

/// The tool-surface change the report names for `tool`.
fn surface<'a>(r: &'a DiffReport, tool: &str) -> &'a ToolChange {
    r.tool_surface
        .iter()
        .find(|t| t.tool == tool)
        .unwrap_or_else(|| panic!("no tool-surface change of {tool} reported: {r:#?}"))
}

/// Three tapes by hand: A (initialize, tools/list of add and echo, add 2 3); B, A and one more
/// call (add 5 5); C, echo removed and add's `c` now required, the same call answered the same.
fn structural_tapes(dir: &Path) -> [PathBuf; 3] {
    let base: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(list_pair(2, json!([add_tool(&["a", "b"]), echo_tool()])))
        .chain(call_pair(3, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    let mut extra = base.clone();
    extra.extend(call_pair(4, "add", json!({"a": 5, "b": 5}), json!("10")));
    let narrowed: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(list_pair(2, json!([add_tool(&["a", "b", "c"])])))
        .chain(call_pair(3, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    let paths = ["a.jsonl", "b.jsonl", "c.jsonl"].map(|n| dir.join(n));
    for (path, msgs) in paths.iter().zip([base, extra, narrowed]) {
        write_tape(path, &msgs, true);
    }
    paths
}

#[test]
fn diff_structural_drift_extra_call_and_tool_surface() {
    let dir = tmp();
    let [a, b, c] = structural_tapes(dir.path());
    // B made one more call.
    let (r, out) = diff_json(&a, &b, &[]);
    out.status(2);
    assert_eq!(r.verdict, Verdict::StructuralDrift);
    assert_eq!(r.only_in_b.len(), 1, "{r:#?}");
    assert_eq!(r.only_in_b[0].target.as_deref(), Some("add"));
    assert_eq!(r.only_in_b[0].arguments, Some(json!({"a": 5, "b": 5})));
    assert!(r.only_in_a.is_empty() && r.drifts.is_empty());
    // And the other way round.
    let (r, out) = diff_json(&b, &a, &[]);
    assert_eq!((out.code(), r.only_in_a.len()), (2, 1), "{r:#?}");
    let out = diff_cmd(&a, &b, &[]).status(2);
    assert!(
        out.stdout.starts_with("structural drift"),
        "{}",
        out.console()
    );

    // C: echo removed, add's `c` now required, the same calls answered the same.
    let (r, out) = diff_json(&a, &c, &[]);
    out.status(2);
    assert_eq!(r.verdict, Verdict::StructuralDrift);
    assert_eq!(surface(&r, "echo").kind, SurfaceKind::Removed);
    let add = surface(&r, "add");
    assert_eq!(add.kind, SurfaceKind::Narrowed);
    assert!(
        add.details
            .iter()
            .any(|d| d.contains("`c` is now required")),
        "{:?}",
        add.details
    );
    let t = diff_cmd(&a, &c, &["--all"]).stdout;
    assert!(
        t.contains("echo") && t.contains("`c` is now required"),
        "{t}"
    );
    let md = diff_cmd(&a, &c, &["--format", "markdown"]).stdout;
    assert!(md.contains("echo") && md.contains('|'), "{md}");
}

// --- exit codes -----------------------------------------------------------------------------

#[test]
fn check_and_diff_exit_codes_for_tool_errors() {
    let (dir, tape) = tmp_tape("t.jsonl");
    let msgs: Vec<(&str, Value)> = init_pair(1).into_iter().collect();
    write_tape(&tape, &msgs, true);

    let out = check_cmd(&tape, &[], &["/nonexistent/mcp-server".to_string()], &[]);
    assert_eq!(out.code(), 69, "server cannot start: {}", out.console());

    let missing = dir.path().join("nope.jsonl");
    check_cmd(&missing, &[], &py_server(), &[]).status(66);
    diff_cmd(&missing, &tape, &[]).status(66);

    check_cmd(&tape, &["--ignore-path", "$["], &py_server(), &[])
        .status(64)
        .stderr_contains("--ignore-path");
    diff_cmd(&tape, &tape, &["--ignore-path", "$["]).status(64);
}

// --- golden reports ----------------------------------------------------------------------------

/// The demo's recording checked against its healthy and its drifted build: the console, Markdown
/// and JUnit reports, each compared with its golden file.
#[test]
fn check_reports_of_the_demo_match_the_golden_files() {
    let dir = tmp();
    demo_tapes(dir.path());
    for (variant, code) in [("healthy", 0), ("drifted", 1)] {
        let (md, junit) = (format!("{variant}.md"), format!("{variant}.xml"));
        let out = Mt::new([
            "check",
            "demo.jsonl",
            "--markdown",
            &md,
            "--junit",
            &junit,
            "--",
        ])
        .args(demo_server(variant))
        .dir(dir.path())
        .run()
        .status(code)
        .stderr_is("");
        let masked = |t: &str| mask(t, &[dir.path()]);
        let file = |f: &str| masked(&std::fs::read_to_string(dir.path().join(f)).expect("written"));
        assert_golden(&format!("check-{variant}.txt"), &masked(&out.stdout));
        assert_golden(&format!("check-{variant}.md"), &file(&md));
        assert_golden(&format!("check-{variant}.junit.xml"), &file(&junit));
    }
}

/// Text (first drift, `--all`) and Markdown reports of diff: the demo's two recordings (output
/// drift), a recording and itself (same), and hand-made tapes that drift structurally.
#[test]
fn diff_reports_match_the_golden_files() {
    let dir = tmp();
    demo_tapes(dir.path());
    structural_tapes(dir.path());
    let (demo, drifted) = ("demo.jsonl", "demo-drifted.jsonl");
    let cases: [(&str, [&str; 2], &[&str], i32); 8] = [
        ("diff-output-drift.txt", [demo, drifted], &[], 1),
        ("diff-output-drift-all.txt", [demo, drifted], &["--all"], 1),
        (
            "diff-output-drift.md",
            [demo, drifted],
            &["--format", "markdown"],
            1,
        ),
        ("diff-same.txt", [demo, demo], &[], 0),
        ("diff-same.md", [demo, demo], &["--format", "markdown"], 0),
        ("diff-extra-call.txt", ["a.jsonl", "b.jsonl"], &["--all"], 2),
        (
            "diff-tool-surface.txt",
            ["a.jsonl", "c.jsonl"],
            &["--all"],
            2,
        ),
        (
            "diff-tool-surface.md",
            ["a.jsonl", "c.jsonl"],
            &["--format", "markdown"],
            2,
        ),
    ];
    for (golden, tapes, flags, code) in cases {
        let out = Mt::new(["diff"])
            .args(tapes)
            .args(flags)
            .dir(dir.path())
            .run()
            .status(code)
            .stderr_is("");
        assert_golden(golden, &mask(&out.stdout, &[dir.path()]));
    }
}

/// A long value that changes late (a time inside a tool's text answer, as mcp-server-time
/// gives it): the text and Markdown reports show the part that differs on both sides, the
/// common start left out and marked, not the same 48-character prefix twice.
#[test]
fn a_long_value_that_changes_late_is_shown_where_it_differs() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    write_tape(&a, &late_change_exchange("16:30"), true);
    write_tape(&b, &late_change_exchange("16:31"), true);
    for (format, golden) in [
        ("text", "diff-long-value.txt"),
        ("markdown", "diff-long-value.md"),
    ] {
        let out = diff_cmd(&a, &b, &["--format", format]).status(1);
        assert_golden(golden, &mask(&out.stdout, &[dir.path()]));
        assert_shown_where_it_differs(format, &out.stdout);
    }
}

/// A convert_time call and its answer: a long text whose time, near the end, is `time`.
fn late_change_exchange(time: &str) -> [(&'static str, Value); 2] {
    let call = req(
        1,
        "tools/call",
        json!({"name": "convert_time", "arguments": {"time": "09:30"}}),
    );
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": late_change_text(time)}]}});
    [("c2s", call), ("s2c", answer)]
}

fn late_change_text(time: &str) -> String {
    format!("Converted from the source timezone Europe/Lisbon at 09:30, the time in the target timezone Asia/Tokyo is {time}; daylight saving time is not in effect.")
}

/// The report's line with the recorded 16:30 shows the 16:31 too, the common start left out
/// and the elision marked.
fn assert_shown_where_it_differs(format: &str, report: &str) {
    let line = report
        .lines()
        .find(|l| l.contains("16:30"))
        .unwrap_or_else(|| panic!("{format}: the recorded time is shown:\n{report}"));
    assert_contains(line, "16:31");
    assert_contains(line, "…");
    assert!(
        !line.contains("Converted from"),
        "{format}: the common start is left out: {line}"
    );
}

/// check's console and Markdown reports show such a value where it differs too, against a live
/// server whose answer changed late.
#[test]
fn check_shows_a_long_value_that_changes_late_where_it_differs() {
    let dir = tmp();
    let tape = dir.path().join("time.jsonl");
    write_tape(&tape, &late_change_exchange("16:30"), true);
    let server = crate::record::py(
        &format!(
            "import sys, json\nfor line in sys.stdin:\n    m = json.loads(line)\n    if 'id' in m and 'method' in m:\n        print(json.dumps({{'jsonrpc': '2.0', 'id': m['id'], 'result': {{'content': [{{'type': 'text', 'text': {:?}}}]}}}}), flush=True)\n",
            late_change_text("16:31")
        ),
        &[],
    );
    let md = dir.path().join("report.md");
    let out = check_cmd(&tape, &["--markdown", &s(&md)], &server, &[]).status(1);
    assert_shown_where_it_differs("console", &out.stdout);
    assert_shown_where_it_differs("markdown", &std::fs::read_to_string(&md).unwrap());
}

// --- masking of dates and epoch times --------------------------------------------------------

/// A file-info answer, as JSON text: its times in several formats, and a count.
fn file_info(mtime: u64, js: &str, rfc2822: &str, iso: &str, count: u64) -> Value {
    json!(json!({
        "mtime": mtime, "created_at": mtime * 1000, "modifiedAt": mtime,
        "note": format!("changed {js}"), "sent": rfc2822, "built": iso, "count": count
    })
    .to_string())
}

#[test]
fn diff_masks_javascript_rfc2822_zoneless_iso_and_epoch_times_but_not_other_numbers() {
    let dir = tmp();
    let tape = |name: &str, info: Value| {
        let path = dir.path().join(name);
        let msgs: Vec<(&str, Value)> = init_pair(1)
            .into_iter()
            .chain(call_pair(
                2,
                "get_file_info",
                json!({"path": "a.txt"}),
                info,
            ))
            .collect();
        write_tape(&path, &msgs, true);
        path
    };
    let a = tape(
        "a.jsonl",
        file_info(
            1764573600,
            "Mon Dec 01 2026 07:20:00 GMT+0000 (Coordinated Universal Time)",
            "Tue, 01 Dec 2026 07:20:00 +0000",
            "2026-12-01T07:20:00",
            7,
        ),
    );
    let b = tape(
        "b.jsonl",
        file_info(
            1764577200,
            "Tue Dec 01 2026 08:20:00 GMT+0100",
            "Tue, 01 Dec 2026 08:20:00 GMT",
            "2026-12-01 08:20:00.123",
            7,
        ),
    );
    let (r, out) = diff_json(&a, &b, &[]);
    out.status(0);
    assert_eq!(r.verdict, Verdict::Same, "{r:#?}");

    // Without masking every one of them drifts.
    let (r, out) = diff_json(&a, &b, &["--no-auto-mask"]);
    out.status(1);
    let mut paths: Vec<&str> = r.drifts[0]
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    paths.sort();
    let t = "$.result.content[0].text";
    assert_eq!(
        paths,
        ["built", "created_at", "modifiedAt", "mtime", "note", "sent"].map(|k| format!("{t}.{k}")),
        "{r:#?}"
    );

    // An epoch-sized number under another key is not a time: its change is drift.
    let c = tape(
        "c.jsonl",
        file_info(
            1764573600,
            "Mon Dec 01 2026 07:20:00 GMT+0000",
            "Tue, 01 Dec 2026 07:20:00 +0000",
            "2026-12-01T07:20:00",
            1764573600,
        ),
    );
    let d = tape(
        "d.jsonl",
        file_info(
            1764573600,
            "Mon Dec 01 2026 07:20:00 GMT+0000",
            "Tue, 01 Dec 2026 07:20:00 +0000",
            "2026-12-01T07:20:00",
            1764577200,
        ),
    );
    let (r, out) = diff_json(&c, &d, &[]);
    out.status(1);
    assert_eq!(r.drifts.len(), 1, "{r:#?}");
    let ch = &r.drifts[0].changes;
    assert_eq!(ch.len(), 1, "{r:#?}");
    assert_eq!(ch[0].kind, ChangeKind::ValueChange);
    assert_eq!(ch[0].path, format!("{t}.count"));
    assert_eq!(ch[0].observed, Some(json!(1764577200)));
}

// --- --ignore-path scoped to a method or a tool ----------------------------------------------

#[test]
fn ignore_path_scoped_to_a_tool_leaves_the_same_field_of_another_tool_compared() {
    let dir = tmp();
    let tape = |name: &str, rev: &str| {
        let path = dir.path().join(name);
        let answer = json!(json!({"name": "a.txt", "rev": rev}).to_string());
        let msgs: Vec<(&str, Value)> = init_pair(1)
            .into_iter()
            .chain(call_pair(
                2,
                "get_file_info",
                json!({"path": "a.txt"}),
                answer.clone(),
            ))
            .chain(call_pair(3, "stat", json!({"path": "a.txt"}), answer))
            .collect();
        write_tape(&path, &msgs, true);
        path
    };
    let (a, b) = (tape("a.jsonl", "r1"), tape("b.jsonl", "r2"));
    let scoped = "tools/call:get_file_info:$.result.content[0].text.rev";
    let (r, out) = diff_json(&a, &b, &["--ignore-path", scoped]);
    out.status(1);
    assert_eq!(r.drifts.len(), 1, "{r:#?}");
    assert_eq!(r.drifts[0].exchange.target.as_deref(), Some("stat"));
    assert_eq!(r.drifts[0].changes[0].path, "$.result.content[0].text.rev");
    // Scoped to the method, or not scoped: both calls ignore it.
    for p in [
        "tools/call:$.result.content[0].text.rev",
        "$.result.content[0].text.rev",
    ] {
        let (r, out) = diff_json(&a, &b, &["--ignore-path", p]);
        out.status(0);
        assert_eq!(r.verdict, Verdict::Same, "{p}: {r:#?}");
    }
    // Scoped to another method: neither.
    let (r, _) = diff_json(&a, &b, &["--ignore-path", "resources/read:$..rev"]);
    assert_eq!(r.drifts.len(), 2, "{r:#?}");

    // A bad scope is a usage error naming the flag value.
    for bad in [
        "tools/call get_file_info:$.result",
        "initialize:x:$.a",
        "tools/call:x",
    ] {
        diff_cmd(&a, &b, &["--ignore-path", bad])
            .status(64)
            .stderr_contains(bad);
        check_cmd(&a, &["--ignore-path", bad], &py_server(), &[])
            .status(64)
            .stderr_contains(bad);
    }
}

// --- check keeps the recorded causality -----------------------------------------------------

/// A session with server-filesystem whose answer depends on what the server was told before it:
/// the client declares roots; on `initialized` the server asks for them, and once the client has
/// answered, the roots replace the directory of its command line (asynchronously: it resolves
/// them on the file system, and says nothing when done). The client asks for the allowed
/// directories a moment later. Recorded by hand through `mcptape record`.
fn record_roots_session(tape: &Path, server: &[String], root: &Path) {
    let mut c = LineClient::spawn(&record_cmd(tape, server));
    let mut init = init_params();
    init["capabilities"] = json!({"roots": {"listChanged": true}});
    c.call(0, "initialize", init);
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let ask = c.recv();
    assert_eq!(ask["method"], "roots/list", "{ask}");
    let uri = format!("file://{}", root.display());
    c.send(
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [
            {"uri": uri, "name": "project"}
        ]}}),
    );
    // As a person at a client would be: not at once.
    std::thread::sleep(Duration::from_millis(300));
    let listed = c.call(
        1,
        "tools/call",
        json!({"name": "list_allowed_directories", "arguments": {}}),
    );
    assert_contains(&listed.to_string(), &s(root));
    c.close_stdin();
    let (status, err) = c.finish();
    assert!(status.success(), "record: {status:?}\n{err}");
}

/// The same check, 20 times, against a server with such a race: the same grade every time
/// (A: the session is the same), because check sends each client message only once what
/// preceded it in the recording has happened — the server's roots request arrived and was
/// answered, and the pause the recording had after that answer (up to a second) has passed.
#[test]
fn check_keeps_the_recorded_order_of_server_requests_and_grades_the_same_twenty_times() {
    let dir = tmp();
    let (cli_dir, root) = (dir.path().join("cli"), dir.path().join("root"));
    for d in [&cli_dir, &root] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let server = filesystem(&cli_dir);
    let tape = dir.path().join("roots.jsonl");
    record_roots_session(&tape, &server, &root);
    let mut grades = Vec::new();
    for run in 0..20 {
        let (report, out) = check(&tape, &[], &server, &[]);
        assert!(
            report.regressions.is_empty() && report.grade == Grade::A,
            "run {run}: grade {:?} {}\n{}",
            report.grade,
            report.score,
            out.console()
        );
        grades.push((report.grade, report.score));
    }
    assert!(grades.iter().all(|g| *g == grades[0]), "{grades:?}");
}

// --- check sends each recorded line as the client framed it ---------------------------------

/// A line server that appends every line it reads, bytes as they came (terminator included),
/// to the file named by its first argument, and answers each request with its method; before
/// answering a `tools/call` it asks the client for its roots and reads the answer.
const STDIN_LOG: &str = r##"
import sys, json
log = open(sys.argv[1], "ab")
def read():
    raw = sys.stdin.buffer.readline()
    if raw:
        log.write(raw)
        log.flush()
    return raw
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
while True:
    raw = read()
    if not raw:
        break
    m = json.loads(raw)
    if "id" in m and "method" in m:
        if m["method"] == "tools/call":
            send({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"})
            read()
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": m["method"]}]}})
"##;

/// `check` writes each recorded client line as the client wrote it — requests, notifications
/// and its answer to the server's request alike: its `\r\n` and the whitespace around its JSON
/// (which the tape keeps, and play writes back), not the JSON and a bare `\n`. The ids are
/// those check numbers its requests with (1, 2, …), as recorded here, so the server must read
/// the very bytes it read when recorded.
#[test]
fn check_sends_each_recorded_line_with_its_own_whitespace_and_terminator() {
    let dir = tmp();
    let tape = dir.path().join("framing.jsonl");
    let (recorded_log, checked_log) = (
        dir.path().join("recorded.log"),
        dir.path().join("checked.log"),
    );
    let server = |log: &Path| crate::record::py(STDIN_LOG, &[&s(log)]);
    // Each line, and how many lines the server sends after it.
    let lines: [(&[u8], usize); 5] = [
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"roots\":{}},\"clientInfo\":{\"name\":\"crlf\",\"version\":\"1\"}}}\r\n", 1),
        (b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n", 0),
        (b"  \t{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"} \t \r\n", 1),
        (b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"x\"}}\t\n", 1),
        (b" {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{\"roots\":[]}}\r\n", 1),
    ];
    let mut c = crate::record::record(&tape, &[], &server(&recorded_log));
    for (line, answers) in lines {
        c.send_raw(line);
        for _ in 0..answers {
            c.recv_raw(Duration::from_secs(30))
                .expect("a line within 30 s");
        }
    }
    let lines = lines.map(|(line, _)| line);
    c.finish_with(0);
    assert_eq!(
        std::fs::read(&recorded_log).unwrap(),
        lines.concat(),
        "record forwards every byte"
    );
    check_cmd(&tape, &[], &server(&checked_log), &[]).success();
    assert_eq!(
        text(&std::fs::read(&checked_log).unwrap()),
        text(&lines.concat()),
        "check sends the recorded lines as they were framed"
    );
    // The observed tape, made the baseline with --update, keeps the framing it sent.
    let updated_log = dir.path().join("updated.log");
    check_cmd(&tape, &["--update"], &server(&updated_log), &[]).success();
    let rechecked_log = dir.path().join("rechecked.log");
    check_cmd(&tape, &[], &server(&rechecked_log), &[]).success();
    assert_eq!(
        text(&std::fs::read(&rechecked_log).unwrap()),
        text(&lines.concat()),
        "the updated baseline holds the lines as they were framed"
    );
}

/// A client batch on the tape (2025-03-26 allowed them) is not sent by `check`, which sends one
/// message at a time, and check says so, naming the line: it was skipped without a word, so a
/// `notifications/initialized` inside one silently never reached the live server.
#[test]
fn check_names_a_recorded_client_batch_it_does_not_send() {
    let dir = tmp();
    let tape = dir.path().join("batch.jsonl");
    let (recorded_log, checked_log) = (
        dir.path().join("recorded.log"),
        dir.path().join("checked.log"),
    );
    let server = |log: &Path| crate::record::py(STDIN_LOG, &[&s(log)]);
    let batch: &[u8] = b"[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}]\n";
    let mut c = crate::record::record(&tape, &[], &server(&recorded_log));
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-03-26\",\"capabilities\":{},\"clientInfo\":{\"name\":\"batch\",\"version\":\"1\"}}}\n");
    c.recv_raw(Duration::from_secs(30))
        .expect("initialize answered");
    c.send_raw(batch);
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n");
    c.recv_raw(Duration::from_secs(30))
        .expect("tools/list answered");
    c.finish_with(0);
    assert!(
        text(&std::fs::read(&recorded_log).unwrap()).contains(&text(batch)),
        "record forwarded the batch"
    );
    let line = tape_lines(&tape)
        .iter()
        .position(|l| l["kind"] == "batch")
        .expect("the batch is on the tape")
        + 1;
    check_cmd(&tape, &[], &server(&checked_log), &[])
        .success()
        .stderr_contains(&format!(
            "line {line}: the client's JSON-RPC batch is not sent to the live server"
        ));
    let sent = text(&std::fs::read(&checked_log).unwrap());
    assert!(
        !sent.contains("notifications/initialized") && sent.contains("tools/list"),
        "check sent the rest and not the batch: {sent}"
    );
}

// --- the tool surface of a side that listed no tools ---------------------------------------

/// A line server whose `tools/list` answers after `arg` seconds (the list of `add` and
/// `echo`), and whose calls answer at once.
const SLOW_LIST: &str = r#"
import time
def answer(m, arg):
    if m["method"] == "tools/list":
        time.sleep(float(arg))
        return {"tools": [
            {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}, "c": {"type": "number"}}, "required": ["a", "b"]}},
            {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}
    return {"content": [{"type": "text", "text": "5"}]}
"#;

/// A side that never got a `tools/list` answer (it timed out live; the recording was cut off
/// after the request) or never asked for one announced no tools: its tool surface is unknown,
/// not empty. Check said every tool was removed when the live `tools/list` timed out, and diff
/// said so of a cut-off tape, or of a session that did not list tools (and "added" the other
/// way round).
#[test]
fn a_side_that_listed_no_tools_has_no_tool_surface_change() {
    let dir = tmp();
    let [a, _, _] = structural_tapes(dir.path());
    // The live tools/list comes after --timeout: a missing response, and no tool removed.
    let (r, out) = check(
        &a,
        &["--timeout", "1"],
        &line_server("slow", SLOW_LIST, "3"),
        &[],
    );
    assert_eq!(
        ex(&r, "tools/list", None).status,
        Status::Missing,
        "{}",
        out.console()
    );
    assert!(
        r.tool_surface.is_empty(),
        "{:#?}\n{}",
        r.tool_surface,
        out.console()
    );
    assert!(!out.stderr.contains("removed"), "{}", out.console());
    // Answered in time, the same tools: nothing to say either; the control.
    let (r, out) = check(&a, &[], &line_server("slow", SLOW_LIST, "0"), &[]);
    assert!(r.tool_surface.is_empty(), "{}", out.console());

    // B: A cut off after its tools/list request (no answer, no closing line).
    let cut = dir.path().join("cut.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&a)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let list_request = lines
        .iter()
        .position(|l| l.contains(r#""method":"tools/list""#))
        .expect("a tools/list request");
    std::fs::write(&cut, lines[..=list_request].join("\n") + "\n").unwrap();
    // C: the same session without tools/list.
    let unlisted = dir.path().join("unlisted.jsonl");
    let msgs: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(call_pair(3, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    write_tape(&unlisted, &msgs, true);
    for (x, y) in [(&a, &cut), (&cut, &a), (&a, &unlisted), (&unlisted, &a)] {
        let (r, out) = diff_json(x, y, &[]);
        assert!(
            r.tool_surface.is_empty(),
            "{} → {}: {:#?}\n{}",
            x.display(),
            y.display(),
            r.tool_surface,
            out.console()
        );
    }
    // The tools/list only one side made is said all the same: structural drift.
    diff_cmd(&a, &unlisted, &[])
        .status(2)
        .stdout_contains("only in A\n  line 5  tools/list");
}

/// A line server that exits (code 3) at its first `tools/call`, unanswered.
const CRASH_ON_CALL: &str = r#"
def answer(m, arg):
    if m["method"] == "tools/call":
        sys.exit(3)
    return {}
"#;

/// The gate's reason counts what failed as the summary counts it: missing responses are not
/// regressions. A server that crashed said "0 regressions   1 missing" and then "gate failed:
/// 1 regression".
#[test]
fn the_gate_names_missing_responses_as_missing_not_as_regressions() {
    let (_dir, tape) = tmp_tape("crash.jsonl");
    let msgs: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .map(|(d, mut m)| {
            if d == "s2c" {
                m["result"]["serverInfo"]["name"] = json!("crash");
            }
            (d, m)
        })
        .chain(call_pair(2, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    write_tape(&tape, &msgs, true);
    let server = line_server("crash", CRASH_ON_CALL, "");
    let out = check_cmd(&tape, &[], &server, &[]).status(1);
    assert_contains(&out.stdout, "1 pass   0 regressions   1 missing");
    assert_contains(
        &out.stdout,
        "gate failed: 1 missing response (the default gate: any regression fails; --min-grade sets another)",
    );
    let md = tape.with_file_name("report.md");
    check_cmd(
        &tape,
        &["--fail-on-regression", "--markdown", md.to_str().unwrap()],
        &server,
        &[],
    )
    .status(1)
    .stdout_contains("gate failed: 1 missing response (--fail-on-regression)");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(!md.contains("1 regression"), "{md}");
}

/// A line server answering `tools/call add` with the sum of `a` and `b`.
const ADDER: &str = r#"
def answer(m, arg):
    a = m["params"]["arguments"]
    return {"content": [{"type": "text", "text": str(a["a"] + a["b"])}]}
"#;

/// A recording cut off after a request was sent (the recorder or the client killed, or the
/// recorded server crashed on it) holds no answer to compare the live one with: that exchange is
/// reported apart, "not on the tape", and neither graded nor failing the gate. It was a
/// regression ("missing-response: (absent) → the answer"), grade B and exit 1, on every check of
/// the very build that was recorded.
#[test]
fn a_request_the_recording_has_no_answer_for_is_not_graded() {
    let (dir, tape) = tmp_tape("cut.jsonl");
    let mut msgs: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(call_pair(2, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    msgs.push((
        "c2s",
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 1}}}),
    ));
    write_tape(&tape, &msgs, false);
    let server = line_server("s", ADDER, "");
    let (r, out) = check(&tape, &[], &server, &[]);
    out.status(0);
    assert_eq!(r.grade, Grade::A, "{r:#?}");
    assert_eq!(r.score, 100.0);
    assert!(r.gate.passed);
    assert_eq!(r.regression_count(), 0, "{r:#?}");
    assert!(r.regressions.is_empty(), "{:?}", r.regressions);
    let cut = ex(&r, "tools/call", Some("add"));
    assert_eq!(cut.status, Status::Pass);
    let unanswered = r
        .exchanges
        .iter()
        .find(|e| e.exchange.arguments == Some(json!({"a": 1, "b": 1})))
        .expect("the unanswered call is in the report");
    assert_eq!(unanswered.status, Status::Unrecorded, "{unanswered:#?}");
    assert!(unanswered.changes.is_empty(), "{unanswered:#?}");

    let md = dir.path().join("report.md");
    let junit = dir.path().join("junit.xml");
    let out = check_cmd(
        &tape,
        &[
            "--markdown",
            md.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
        &server,
        &[],
    )
    .status(0);
    assert_contains(
        &out.stdout,
        "grade A  100.0/100   2 pass   0 regressions   0 missing   1 not on the tape",
    );
    assert_contains(
        &out.stdout,
        "not on the tape (the recording has no answer for it: not graded)\n  line 7  tools/call add {\"a\":1,\"b\":1}\n    the live server answered {\"result\":{\"content\":[{\"text\":\"2\"",
    );
    assert_contains(&out.stdout, "all 2 graded exchanges answered as recorded");
    let md = std::fs::read_to_string(&md).unwrap();
    assert_contains(&md, "### Not on the tape");
    assert_contains(&md, "2 pass, 0 regressions, 0 missing, 1 not on the tape");
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert_contains(
        &junit,
        "<skipped message=\"not on the tape: the recording has no answer for it\"",
    );

    // The live server silent on it too: that is what was recorded, a pass.
    let (r, _) = check(&tape, &[], &line_server("s", CRASH_ON_THIRD, ""), &[]);
    assert_eq!(r.grade, Grade::A, "{r:#?}");
    assert!(
        r.exchanges.iter().all(|e| e.status == Status::Pass),
        "{r:#?}"
    );
}

/// A line server answering `add` as [`ADDER`] does, and exiting at request id 3, unanswered.
const CRASH_ON_THIRD: &str = r#"
def answer(m, arg):
    if m["id"] == 3:
        sys.exit(3)
    a = m["params"]["arguments"]
    return {"content": [{"type": "text", "text": str(a["a"] + a["b"])}]}
"#;

// --- tapes of several servers ----------------------------------------------------------------

/// A closed tape of two stdio servers, `files` and `search` (as an agent run tapes its MCP
/// servers): each lists one tool and answers one call of it, `files` first; `search` answers
/// `search_answer`, and lists `search_tools`.
fn two_server_tape(path: &Path, search_answer: &str, search_tools: Value) {
    let mut lines = vec![
        json!({"type": "header", "format": "mcptape", "version": 1, "minor": 0, "created": "2026-01-01T00:00:00Z", "tool": "test"}),
        json!({"type": "server", "server": "files", "transport": "stdio", "command": ["files-server"], "t_us": 0}),
        json!({"type": "server", "server": "search", "transport": "stdio", "command": ["search-server"], "t_us": 0}),
    ];
    let files = [
        list_pair(1, json!([echo_tool()])),
        call_pair(2, "echo", json!({"text": "hi"}), json!("hi")),
    ];
    let search = [
        list_pair(1, search_tools),
        call_pair(2, "find", json!({"q": "tape"}), json!(search_answer)),
    ];
    let mut seq = 0;
    for (server, pairs) in [("files", files), ("search", search)] {
        for (dir, m) in pairs.into_iter().flatten() {
            seq += 1;
            let kind = if m.get("method").is_some() {
                "request"
            } else {
                "response"
            };
            let mut line = json!({"type": "msg", "seq": seq, "t_us": seq * 10, "server": server, "dir": dir, "kind": kind, "id": m["id"], "msg": m});
            if let Some(method) = m.get("method") {
                line["method"] = method.clone();
            }
            lines.push(line);
        }
    }
    lines.push(json!({"type": "end", "t_us": 1000, "messages": seq, "exchanges": seq / 2}));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A tape that declares no server (written by hand, or by an older tool) holds the one its
/// messages are labelled with: diffed against a tape of several servers, it is compared with
/// the server of that label. Its exchanges were dropped: "0 compared, …, 0 only in A".
#[test]
fn a_tape_that_declares_no_server_is_diffed_as_the_server_its_messages_name() {
    let dir = tmp();
    let (two, one) = (dir.path().join("two.jsonl"), dir.path().join("one.jsonl"));
    two_server_tape(&two, "3 hits", json!([find_tool(&["q"])]));
    let text = std::fs::read_to_string(&two).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] != "server" && v["server"] != "search"
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&one, kept).unwrap();
    let (r, out) = diff_json(&one, &two, &[]);
    assert_eq!(
        (r.compared, r.only_in_a.len(), r.only_in_b.len()),
        (2, 0, 2),
        "{}",
        out.console()
    );
    assert!(r.drifts.is_empty(), "{r:#?}");
    assert!(r
        .only_in_b
        .iter()
        .all(|e| e.server.as_deref() == Some("search")));
}

fn find_tool(required: &[&str]) -> Value {
    json!({"name": "find", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}}, "required": required}})
}

/// diff compares every server of a multi-server tape, each with the server of its label on
/// the other tape: the second server's drift was not looked at, and two tapes whose `search`
/// server answered differently and narrowed its tool were "same: … agree on all 2 exchanges".
#[test]
fn diff_compares_every_server_of_a_multi_server_tape() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    two_server_tape(&a, "3 hits", json!([find_tool(&["q"])]));
    two_server_tape(&b, "4 hits", json!([find_tool(&["q"])]));
    diff_cmd(&a, &a, &[]).status(0).stdout_is(&format!(
        "same: {} and {} agree on all 4 exchanges\n",
        s(&a),
        s(&a)
    ));
    let (r, out) = diff_json(&a, &b, &[]);
    assert_eq!(
        (out.code(), r.verdict),
        (1, Verdict::OutputDrift),
        "{}",
        out.console()
    );
    assert_eq!(r.compared, 4);
    assert_eq!(r.drifts.len(), 1, "{r:#?}");
    assert_eq!(r.drifts[0].exchange.server.as_deref(), Some("search"));
    assert_eq!(r.drifts[0].exchange.target.as_deref(), Some("find"));
    assert_eq!(r.drifts[0].exchange.line, 10);
    diff_cmd(&a, &b, &[]).status(1).stdout_contains(
        "first drift: server search: tools/call find {\"q\":\"tape\"}  (A line 10, B line 10)",
    );

    // The search server's tool narrowed: structural, and said of that server.
    let c = dir.path().join("c.jsonl");
    two_server_tape(&c, "3 hits", json!([find_tool(&["q", "limit"])]));
    let (r, out) = diff_json(&a, &c, &[]);
    assert_eq!(
        (out.code(), r.verdict),
        (2, Verdict::StructuralDrift),
        "{}",
        out.console()
    );
    let find = surface(&r, "find");
    assert_eq!(
        (find.kind, find.server.as_deref()),
        (SurfaceKind::Narrowed, Some("search"))
    );
    diff_cmd(&a, &c, &[])
        .status(2)
        .stdout_contains("narrowed  search: find");
}

/// A stdio server that logs `LOGS` messages (`notifications/message`) before each tool answer,
/// and says its tools changed (`notifications/tools/list_changed`) after the handshake unless
/// `QUIET_LIST=1`: two builds of it answer every call alike and differ in what else they say.
const CHATTY_SERVER: &str = r#"
import json, os, sys
logs = int(os.environ.get("LOGS", "2"))
def out(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    method, i = m.get("method"), m.get("id")
    if method == "initialize":
        out({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}, "logging": {}}, "serverInfo": {"name": "chatty", "version": "1"}}})
    elif method == "notifications/initialized":
        if os.environ.get("QUIET_LIST") != "1":
            out({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif method == "tools/call":
        for n in range(logs):
            out({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "step %d" % n}})
        out({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "done " + str(m["params"]["arguments"]["n"])}]}})
if os.environ.get("BYE") == "1":
    out({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "bye"}})
"#;

/// A session with [`CHATTY_SERVER`] recorded to `tape`, its build chosen by `env`: the
/// handshake, then two calls, each once its answer came.
fn chatty_session(tape: &Path, env: &[(&str, &str)]) {
    let server = crate::record::py(CHATTY_SERVER, &[]);
    let mut c = crate::record::record_mt(tape, &[], &server)
        .envs(env)
        .spawn();
    c.initialize();
    for n in 1..=2 {
        let r = c.call(
            n,
            "tools/call",
            json!({"name": "work", "arguments": {"n": n}}),
        );
        assert_eq!(r["result"]["content"][0]["text"], format!("done {n}"));
    }
    c.finish();
}

/// A server that says something as its stdin closes (`BYE=1`), checked against the same build:
/// nothing differs. The counts were taken before check closed the server's stdin, so the
/// recorded goodbye was "1 recorded, 0 live" on every run, after a 2 s wait for it. And a
/// stdio tape checked against the same server behind HTTP (`record --listen`): check sees only
/// a request's answer stream there, the tape says nothing of streams, so nothing is counted.
/// Every live log message was "0 recorded, N live".
#[test]
fn server_messages_are_counted_alike_at_the_servers_end_and_not_across_transports() {
    let dir = tmp();
    let bye = dir.path().join("bye.jsonl");
    chatty_session(&bye, &[("BYE", "1")]);
    assert_eq!(
        tape_msgs(&bye)
            .iter()
            .filter(|m| m["msg"]["params"]["data"] == "bye")
            .count(),
        1,
        "the goodbye is on the tape"
    );
    let server = crate::record::py(CHATTY_SERVER, &[]);
    let (r, out) = check(&bye, &[], &server, &[("BYE", "1")]);
    assert_eq!(r.grade, Grade::A, "{}", out.console());
    assert!(r.server_messages.is_empty(), "{}", out.console());

    let chatty = dir.path().join("chatty.jsonl");
    chatty_session(&chatty, &[]);
    let bridge = Served::bridge(&dir.path().join("bridge.jsonl"), &server);
    let (r, out) = check(&chatty, &["--url", &bridge.url], &[], &[]);
    bridge.stop();
    assert_eq!(r.grade, Grade::A, "{}", out.console());
    assert!(r.server_messages.is_empty(), "{}", out.console());
}

/// check and diff compare answers; a build that answers alike but sends fewer log messages and
/// no longer says its tools changed was graded A and "same" without a word (the doc even said
/// the comparison reports it). Now both say how many of each method the server sent on each
/// side, outside the grade and the verdict: log and progress messages vary with timing.
#[test]
fn server_messages_that_differ_in_number_are_reported_beside_the_grade_and_the_verdict() {
    let dir = tmp();
    let (chatty, quiet) = (
        dir.path().join("chatty.jsonl"),
        dir.path().join("quiet.jsonl"),
    );
    chatty_session(&chatty, &[]);
    let quieter = [("LOGS", "1"), ("QUIET_LIST", "1")];
    chatty_session(&quiet, &quieter);
    let expected = |first: u64| {
        vec![
            MessageCount {
                server: None,
                method: "notifications/message".into(),
                recorded: 4,
                observed: first,
            },
            MessageCount {
                server: None,
                method: "notifications/tools/list_changed".into(),
                recorded: 1,
                observed: 0,
            },
        ]
    };

    // check: the quieter build answers every call as recorded.
    let server = crate::record::py(CHATTY_SERVER, &[]);
    let (r, out) = check(&chatty, &[], &server, &quieter);
    assert_eq!((out.code(), r.grade), (0, Grade::A), "{}", out.console());
    assert_eq!(r.server_messages, expected(2), "{}", out.console());
    check_cmd(&chatty, &[], &server, &quieter).status(0).stdout_contains(
        "server messages, in number (not in the grade)\n  notifications/message: 4 recorded, 2 live\n  notifications/tools/list_changed: 1 recorded, 0 live\n",
    );
    // The same build: nothing to say.
    let (r, out) = check(&chatty, &[], &server, &[]);
    assert!(r.server_messages.is_empty(), "{}", out.console());

    // diff: the same answers, so "same" (exit 0), and the counts beside it.
    let (r, out) = diff_json(&chatty, &quiet, &[]);
    assert_eq!(
        (out.code(), r.verdict),
        (0, Verdict::Same),
        "{}",
        out.console()
    );
    assert_eq!(r.server_messages, expected(2));
    diff_cmd(&chatty, &quiet, &[]).status(0).stdout_contains(
        "agree on all 3 exchanges\nserver messages, in number (not in the verdict)\n  notifications/message: 4 in A, 2 in B\n",
    );
}

// --- check: one server of a multi-server tape ------------------------------------------------

/// A stand-in agent (stdlib Python) reading its MCP config as Claude Code does (`--mcp-config
/// FILE`, the `mcpServers` shape): it starts each server in turn, in the config's order,
/// initializes it, makes the calls `calls` (argv[3], JSON: label → [[method, params], …]) lists
/// for its label, closes its stdin and waits for it to exit.
const TWO_SERVER_AGENT: &str = r#"
import json, subprocess, sys
cfg = json.load(open(sys.argv[sys.argv.index("--mcp-config") + 1]))
calls = json.loads(sys.argv[sys.argv.index("--calls") + 1])
for label, s in cfg["mcpServers"].items():
    p = subprocess.Popen([s["command"]] + list(s.get("args") or []), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    def rpc(i, method, params):
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                   "params": params}) + "\n").encode())
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"{label} closed its stdout at request {i}")
            m = json.loads(line)
            if m.get("id") == i and ("result" in m or "error" in m):
                return m
    rpc(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "standin-agent", "version": "1"}})
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.flush()
    for i, (method, params) in enumerate(calls.get(label, []), start=1):
        rpc(i, method, params)
    p.stdin.close()
    p.wait()
"#;

/// An agent run's tape (`mcptape run` of the stand-in agent above): two MCP servers,
/// `everything` (server-everything, first: `echo`) and `fixture` (the Python SDK fixture
/// server: `add` 2 + 3), each labelled by its config name, and the run's model API declared.
fn agent_run_tape(dir: &Path) -> PathBuf {
    let agent = dir.join("agent.py");
    std::fs::write(&agent, TWO_SERVER_AGENT).unwrap();
    let (e, f) = (everything(), py_server());
    let cfg = dir.join("mcp.json");
    let servers = json!({"mcpServers": {
        "everything": {"command": e[0], "args": e[1..]},
        "fixture": {"command": f[0], "args": f[1..]},
    }});
    std::fs::write(&cfg, servers.to_string()).unwrap();
    let calls = json!({
        "everything": [["tools/call", {"name": "echo", "arguments": {"message": "hi"}}]],
        "fixture": [["tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}]],
    });
    let tape = dir.join("run.jsonl");
    Mt::new(["run", "--tape"])
        .arg(&tape)
        .arg("--")
        .arg(python())
        .arg(&agent)
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("--calls")
        .arg(calls.to_string())
        .dir(dir)
        .timeout(Duration::from_secs(120))
        .run()
        .success();
    // Both servers are on it, in that order, and the model API.
    let doc: Value = Mt::new(["show", "--json"])
        .arg(&tape)
        .run()
        .success()
        .json();
    let labels: Vec<(&str, &str)> = doc["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|d| {
            (
                d["server"].as_str().unwrap(),
                d["transport"].as_str().unwrap(),
            )
        })
        .filter(|(_, t)| *t == "stdio")
        .collect();
    assert_eq!(
        labels,
        [("everything", "stdio"), ("fixture", "stdio")],
        "{}",
        pretty(&doc["servers"])
    );
    tape
}

/// `check --server LABEL` replays that server's conversation of a multi-server tape: the
/// second server of an agent run's tape, against the same build, is graded A on its own
/// exchanges (and the report names it); against a build that changed `add`'s answer, the
/// regression is that call. check replayed the first server whatever was asked (there was no
/// `--server`: a usage error).
#[test]
fn check_server_replays_the_second_server_of_an_agent_run_tape() {
    let dir = tmp();
    let tape = agent_run_tape(dir.path());

    let (r, out) = check(&tape, &["--server", "fixture"], &py_server(), &[]);
    let out = out.success();
    assert_eq!(r.grade, Grade::A, "{}", out.console());
    assert_eq!(
        r.exchanges.len(),
        2,
        "initialize and add: {:#?}",
        r.exchanges
    );
    assert_eq!(ex(&r, "tools/call", Some("add")).status, Status::Pass);
    assert_eq!(r.server_label.as_deref(), Some("fixture"));
    assert_eq!(r.other_servers, ["everything"]);
    assert_contains(
        &out.stderr,
        &format!("check {} server fixture against ", s(&tape)),
    );
    // Asked for, so no note about the others.
    assert!(!out.stderr.contains("--server LABEL"), "{}", out.console());

    let (r, out) = check(&tape, &["--server", "fixture"], &py_server(), DRIFT);
    let out = out.status(1);
    assert_eq!(r.regression_count(), 1, "{}", out.console());
    let add = ex(&r, "tools/call", Some("add"));
    assert_eq!(add.status, Status::Regression);
    let c = assert_change(add, ChangeKind::ValueChange, "$.result.content[0].text");
    assert_eq!(
        (c.recorded, c.observed),
        (Some(json!("5")), Some(json!("6")))
    );
    check_cmd(&tape, &["--server", "fixture"], &py_server(), DRIFT)
        .status(1)
        .stdout_contains("tools/call add {\"a\":2,\"b\":3}");
}

/// A label the tape does not have is refused as play and show refuse it (exit 64, the labels
/// it has listed), before any server is started; the model API is no MCP server to check.
#[test]
fn check_server_refuses_a_label_the_tape_does_not_have() {
    let dir = tmp();
    let tape = agent_run_tape(dir.path());
    let marker = dir.path().join("started");
    let server = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("touch {}; exec \"$@\"", s(&marker)),
        "sh".to_string(),
    ]
    .into_iter()
    .chain(py_server())
    .collect::<Vec<_>>();
    // The MCP servers, not the model API: `--server model` is refused too (below).
    let out = check_cmd(&tape, &["--server", "nope"], &server, &[]).status(64);
    assert_contains(
        &out.stderr,
        "no server labelled nope; this tape has: everything, fixture\n",
    );
    let out = check_cmd(&tape, &["--server", "model"], &server, &[]).status(64);
    assert_contains(&out.stderr, "model");
    assert_contains(&out.stderr, "not an MCP server");
    assert!(!marker.exists(), "no server was started");
}

/// `play --server model` on an agent run's tape is refused as check and diff refuse it (exit
/// 64, the MCP servers listed), pointing at what plays model calls back, rather than serving
/// an empty conversation; a client's request gets no answer from it.
#[test]
fn play_refuses_the_model_api_of_an_agent_run() {
    let dir = tmp();
    let tape = agent_run_tape(dir.path());
    let out = Mt::new(["play", "--server", "model"])
        .arg(&tape)
        .stdin(format!("{}\n", req(1, "tools/list", json!({}))))
        .run()
        .status(64);
    assert_contains(
        &out.stderr,
        "model is the model API of an agent run, not an MCP server: play serves an MCP server's conversation (this tape has: everything, fixture); its model calls are played back by `mcptape model-proxy --playback` or `mcptape run --playback`\n",
    );
    assert!(out.stdout.is_empty(), "{}", out.console());
    assert!(!out.stderr.contains("served"), "{}", out.console());

    // Nor is there anything of it to prune: a report said to be of its play is refused, the
    // tape left as it was.
    let report = dir.path().join("model.json");
    let doc = json!({"format": "mcptape-unused-report", "version": 1, "tape": s(&tape),
                     "server": "model", "exchanges": 0, "unused": [], "used": []});
    std::fs::write(&report, doc.to_string()).unwrap();
    let before = std::fs::read(&tape).unwrap();
    Mt::new(["prune"])
        .arg(&tape)
        .args(["--unused", &s(&report)])
        .run()
        .status(64)
        .stderr_contains("model is the model API of an agent run, not an MCP server: prune drops an MCP server's exchanges (this tape has: everything, fixture)\n");
    assert_eq!(std::fs::read(&tape).unwrap(), before);
}

/// Without `--server`, check replays the first MCP server of a tape of several, as before, and
/// says so: which one it checked, which others the tape holds, and `--server`. A tape of one
/// server gets no such note.
#[test]
fn check_of_a_multi_server_tape_without_server_names_the_server_checked_and_the_others() {
    let dir = tmp();
    let tape = agent_run_tape(dir.path());
    let (r, out) = check(&tape, &[], &everything(), &[]);
    let out = out.success();
    assert_eq!(r.grade, Grade::A, "{}", out.console());
    assert_eq!(ex(&r, "tools/call", Some("echo")).status, Status::Pass);
    assert_eq!(r.server_label.as_deref(), Some("everything"));
    assert_eq!(r.other_servers, ["fixture"]);
    assert_contains(
        &out.stderr,
        &format!(
            "mcptape check: checked server everything, the first MCP server of {}; it also holds fixture (--server LABEL checks another)",
            s(&tape)
        ),
    );

    let single = dir.path().join("single.jsonl");
    record_py(&single, &[tool("add", json!({"a": 2, "b": 3}))]);
    let (r, out) = check(&single, &[], &py_server(), &[]);
    let out = out.success();
    assert_eq!((r.server_label, r.other_servers.len()), (None, 0));
    assert!(!out.stderr.contains("--server"), "{}", out.console());
}

/// `check --update` on a tape of several servers would have replaced the whole tape with the
/// live session of the one server checked: the agent run's other server and its model traffic
/// gone from it (kept only in TAPE.bak). It is refused (exit 64), with `--server` or without,
/// before a server is started, and the tape is left as it was.
#[test]
fn check_update_refuses_a_tape_of_several_servers_and_keeps_it_whole() {
    let dir = tmp();
    let tape = agent_run_tape(dir.path());
    let before = std::fs::read(&tape).unwrap();
    for flags in [&["--update", "--server", "fixture"][..], &["--update"][..]] {
        let out = check_cmd(&tape, flags, &py_server(), &[]).status(64);
        assert_contains(&out.stderr, "--update");
        assert_contains(&out.stderr, "everything");
        assert_contains(&out.stderr, "fixture");
        assert_eq!(
            std::fs::read(&tape).unwrap(),
            before,
            "{flags:?}: the tape unchanged"
        );
        assert!(
            !dir.path().join("run.jsonl.bak").exists(),
            "{flags:?}: no backup made"
        );
    }
    // Every server's lines are still there (read back through show).
    for label in ["everything", "fixture"] {
        let doc: Value = Mt::new(["show", "--json", "--server", label])
            .arg(&tape)
            .run()
            .success()
            .json();
        assert!(
            doc["messages"].as_array().is_some_and(|m| m.len() >= 4),
            "{label}: {}",
            pretty(&doc["messages"])
        );
    }
}

// --- diff: one server of each tape ---------------------------------------------------------

/// `mcptape record` of the fixture server (label `default`), driven as the stand-in agent of
/// [`agent_run_tape`] drives its `fixture` server: the same handshake, then `add` 2 + 3; the
/// build chosen by `env`.
fn record_fixture_as_the_agent_does(tape: &Path, env: &[(&str, &str)]) {
    let mut c = Mt::new(["record", "--tape"])
        .arg(tape)
        .arg("--")
        .args(py_server())
        .envs(env)
        .spawn();
    let init = c.call(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "standin-agent", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "handshake failed: {init}");
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let sum = c.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    assert!(sum.get("result").is_some(), "add failed: {sum}");
    let (status, stderr) = c.finish();
    assert!(status.success(), "record failed: {status:?}\n{stderr}");
}

/// `diff --server LABEL` compares one server of an agent run's tape (two MCP servers and the
/// model API, by `mcptape run`) with a plain recording of that server (`mcptape record`, label
/// `default`): the run's server of that label, the recording's only server whatever its label,
/// in either order; the model calls are not compared; the reports name both servers. Without
/// `--server` the labels had nothing in common and diff compared nothing ("structural drift",
/// every call on one side only, not a word about why): it still says so, and on stderr how to
/// ask for one server.
#[test]
fn diff_server_compares_one_server_of_an_agent_run_with_a_recording_of_it() {
    let dir = tmp();
    let run = agent_run_tape(dir.path());
    let rec = dir.path().join("fixture.jsonl");
    record_fixture_as_the_agent_does(&rec, &[]);
    let (run_s, rec_s) = (s(&run), s(&rec));

    let out = diff_cmd(&run, &rec, &[]).status(2);
    assert_contains(
        &out.stderr,
        &format!(
            "no MCP server label is on both tapes ({run_s}: everything, fixture; {rec_s}: default)"
        ),
    );
    assert_contains(
        &out.stderr,
        &format!(
            "--server LABEL (everything or fixture) compares that server of {run_s} with the only one of {rec_s}"
        ),
    );
    // Every call still listed, on its side.
    assert_contains(
        &out.stdout,
        "0 compared, 0 drifted, 4 only in A, 2 only in B",
    );

    diff_cmd(&run, &rec, &["--server", "fixture"])
        .status(0)
        .stdout_is(&format!(
            "same: {run_s} server fixture and {rec_s} server default agree on all 2 exchanges\n"
        ))
        .stderr_is("");
    let (r, out) = diff_json(&rec, &run, &["--server", "fixture"]);
    assert_eq!(
        (out.code(), r.verdict),
        (0, Verdict::Same),
        "{}",
        out.console()
    );
    assert_eq!(
        (r.server_a.as_deref(), r.server_b.as_deref(), r.compared),
        (Some("default"), Some("fixture"), 2)
    );
    assert!(r.drifts.is_empty() && r.only_in_a.is_empty() && r.only_in_b.is_empty());

    // The other server of the run is another conversation: its echo only in A, add only in B.
    let (r, out) = diff_json(&run, &rec, &["--server", "everything"]);
    assert_eq!(
        (out.code(), r.verdict),
        (2, Verdict::StructuralDrift),
        "{}",
        out.console()
    );
    assert_eq!(r.server_a.as_deref(), Some("everything"));
    assert!(
        r.only_in_a
            .iter()
            .any(|e| e.target.as_deref() == Some("echo"))
            && r.only_in_b
                .iter()
                .any(|e| e.target.as_deref() == Some("add")),
        "{r:#?}"
    );

    // A build that answers add differently: output drift, said of the server compared.
    let drifted = dir.path().join("drifted.jsonl");
    record_fixture_as_the_agent_does(&drifted, DRIFT);
    let (r, out) = diff_json(&run, &drifted, &["--server", "fixture"]);
    assert_eq!(
        (out.code(), r.verdict),
        (1, Verdict::OutputDrift),
        "{}",
        out.console()
    );
    assert_eq!(r.drifts.len(), 1, "{r:#?}");
    assert_eq!(r.drifts[0].exchange.target.as_deref(), Some("add"));
    let text = diff_cmd(&run, &drifted, &["--server", "fixture"]).status(1);
    assert!(
        text.stdout.starts_with(&format!(
            "output drift  {run_s} server fixture → {} server default\n",
            s(&drifted)
        )),
        "{}",
        text.console()
    );
    assert_contains(
        &text.stdout,
        "first drift: tools/call add {\"a\":2,\"b\":3}",
    );
    let md = diff_cmd(
        &run,
        &drifted,
        &["--server", "fixture", "--format", "markdown"],
    )
    .status(1);
    assert_contains(
        &md.stdout,
        &format!(
            "`{run_s}` server `fixture` → `{}` server `default`: 2 compared, 1 drifted",
            s(&drifted)
        ),
    );
}

/// A label a tape of several servers does not have is refused as check, play and show refuse
/// it (exit 64, the tape named, the labels it has listed); so is its model API, no MCP server.
/// `A_LABEL:B_LABEL` with a side left empty is a usage error too.
#[test]
fn diff_server_refuses_a_label_a_tape_of_several_does_not_have() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    two_server_tape(&a, "3 hits", json!([find_tool(&["q"])]));
    write_tape(
        &b,
        &call_pair(1, "find", json!({"q": "tape"}), json!("3 hits")),
        true,
    );
    let out = diff_cmd(&a, &b, &["--server", "nope"]).status(64);
    assert_contains(
        &out.stderr,
        &format!(
            "{}: no server labelled nope; this tape has: files, search",
            s(&a)
        ),
    );
    assert!(out.stdout.is_empty(), "{}", out.console());
    // B holds one server: whatever its label, it is the one; A's is refused, whichever side.
    diff_cmd(&b, &a, &["--server", "nope"])
        .status(64)
        .stderr_contains(&format!("{}: no server labelled nope", s(&a)));

    let run = dir.path().join("run.jsonl");
    let mut text = std::fs::read_to_string(&a).unwrap();
    text = text.replacen(
        "\n",
        "\n{\"type\":\"server\",\"server\":\"model\",\"transport\":\"model_api\",\"url\":\"http://127.0.0.1:1\",\"t_us\":0}\n",
        1,
    );
    std::fs::write(&run, text).unwrap();
    diff_cmd(&run, &b, &["--server", "model"])
        .status(64)
        .stderr_contains("model is the model API of an agent run, not an MCP server");
    // Nor is it listed among the labels diff takes.
    diff_cmd(&run, &b, &["--server", "nope"])
        .status(64)
        .stderr_contains(&format!(
            "{}: no server labelled nope; this tape has: files, search\n",
            s(&run)
        ));

    for spec in ["search:", ":search", ""] {
        let out = diff_cmd(&a, &a, &["--server", spec]).status(64);
        assert_contains(&out.stderr, "--server");
        assert!(!out.stderr.contains("panicked"), "{}", out.console());
    }
}

/// `report TAPE --diff OTHER --server LABEL|A_LABEL:B_LABEL` marks what `diff --server` finds,
/// the page naming both servers; it refuses what diff refuses, in the same words (exit 64),
/// and gives diff's hint when the labels have nothing in common. report had no `--server`: an
/// agent run's server could not be shown against a recording of it.
#[test]
fn report_diff_server_compares_one_server_as_diff_does() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    two_server_tape(&a, "3 hits", json!([find_tool(&["q"])]));
    write_tape(
        &b,
        &call_pair(1, "find", json!({"q": "tape"}), json!("4 hits")),
        true,
    );
    let report = |flags: &[&str]| {
        Mt::new(["report", "-o", "-"])
            .arg(&a)
            .arg("--diff")
            .arg(&b)
            .args(flags)
            .run()
    };
    let (d, _) = diff_json(&a, &b, &["--server", "search"]);
    assert_eq!((d.compared, d.drifts.len()), (1, 1), "{d:#?}");
    for spec in ["search", "search:default"] {
        let page = report(&["--server", spec]).success();
        assert_contains(
            &page.stdout,
            &format!(
                "diff of server search against {} server default: structural drift · 1 compared · 1 drifted · 1 only here · 0 only there",
                s(&b)
            ),
        );
        assert!(!page.stderr.contains("--server"), "{}", page.stderr);
    }
    // Without it, no label in common: diff's note, naming --server.
    let plain = report(&[]).success();
    assert_contains(
        &plain.stderr,
        "mcptape report: no MCP server label is on both tapes",
    );
    assert_contains(
        &plain.stderr,
        "--server LABEL (files or search) compares that server of ",
    );
    // Refused as diff refuses it.
    for spec in ["nope", "search:", "model"] {
        let by_diff = diff_cmd(&a, &b, &["--server", spec]).status(64);
        let by_report = report(&["--server", spec]).status(64);
        assert_eq!(by_report.stderr, by_diff.stderr, "--server {spec:?}");
        assert!(by_report.stdout.is_empty(), "{}", by_report.console());
    }
    // --server without --diff compares nothing: a usage error.
    Mt::new(["report", "-o", "-", "--server", "search"])
        .arg(&a)
        .run()
        .status(64)
        .stderr_contains("--diff");
}

/// `--server A_LABEL:B_LABEL` compares a server of A with a server of B labelled otherwise (a
/// server renamed between two runs); a label is a label though: `search` on both tapes is
/// compared as one, and a label with a colon that a tape has is taken whole.
#[test]
fn diff_server_a_colon_b_compares_servers_labelled_apart() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    two_server_tape(&a, "3 hits", json!([find_tool(&["q"])]));
    two_server_tape(&b, "4 hits", json!([find_tool(&["q"])]));
    let renamed = std::fs::read_to_string(&b)
        .unwrap()
        .replace("\"server\":\"search\"", "\"server\":\"web:search\"");
    std::fs::write(&b, renamed).unwrap();

    let (r, out) = diff_json(&a, &b, &["--server", "search:web:search"]);
    assert_eq!(
        (out.code(), r.verdict),
        (1, Verdict::OutputDrift),
        "{}",
        out.console()
    );
    assert_eq!(
        (r.server_a.as_deref(), r.server_b.as_deref()),
        (Some("search"), Some("web:search"))
    );
    assert_eq!((r.compared, r.drifts.len()), (2, 1), "{r:#?}");
    assert_eq!(r.drifts[0].exchange.server, None, "the header names it");
    diff_cmd(&a, &b, &["--server", "search:web:search"])
        .status(1)
        .stdout_contains(&format!(
            "output drift  {} server search → {} server web:search\n",
            s(&a),
            s(&b)
        ));
    // `files` on both: the same.
    diff_cmd(&a, &b, &["--server", "files"]).status(0);
    // B's label with its colon, whole: A has none such.
    diff_cmd(&b, &b, &["--server", "web:search"]).status(0);
    diff_cmd(&a, &b, &["--server", "web:search"])
        .status(64)
        .stderr_contains(&format!("{}: no server labelled web:search", s(&a)));
}

/// A tape of several servers is read once, however many it holds: a damaged line is reported
/// once for the tape, not once for each server nor lost with a server's reading, and once
/// when the same tape is both A and B.
#[test]
fn a_warning_of_a_multi_server_tape_is_said_once() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    two_server_tape(&a, "3 hits", json!([find_tool(&["q"])]));
    two_server_tape(&b, "3 hits", json!([find_tool(&["q"])]));
    for tape in [&a, &b] {
        // The `end` line torn: the recording was cut off.
        let text = std::fs::read_to_string(tape).unwrap();
        let cut = text.trim_end().rfind('\n').unwrap() + 20;
        std::fs::write(tape, &text[..cut]).unwrap();
    }
    let out = diff_cmd(&a, &b, &[]).status(0);
    for tape in [&a, &b] {
        let of_tape = format!("mcptape: warning: {}: ", s(tape));
        for what in ["line 12 is torn", "no closing line"] {
            let said = out
                .stderr
                .lines()
                .filter(|l| l.starts_with(&of_tape) && l.contains(what))
                .count();
            assert_eq!(said, 1, "{what}: {}", out.console());
        }
    }
    let out = diff_cmd(&a, &a, &[]).status(0);
    let said = |out: &Run, what: &str| out.stderr.lines().filter(|l| l.contains(what)).count();
    assert_eq!(said(&out, "line 12 is torn"), 1, "{}", out.console());
    assert_eq!(said(&out, "no closing line"), 1, "{}", out.console());
    let out = diff_cmd(&a, &b, &["--server", "search"]).status(0);
    assert_eq!(said(&out, "line 12 is torn"), 2, "{}", out.console());
}

/// A stdio server whose `tools/call` sleeps `arguments.s` seconds on a thread of its own and then
/// answers, unless `notifications/cancelled` named its request first: then it answers nothing,
/// as the TypeScript SDK's servers do.
const CANCELLABLE: &str = r#"
import sys, json, threading, time
lock = threading.Lock()
cancelled = set()
def write(m):
    with lock:
        sys.stdout.write(json.dumps(m) + "\n")
        sys.stdout.flush()
def work(i, s):
    time.sleep(s)
    with lock:
        if json.dumps(i) in cancelled:
            return
    write({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "slept %s" % s}]}})
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "notifications/cancelled":
        with lock:
            cancelled.add(json.dumps(m["params"]["requestId"]))
    elif method == "initialize":
        write({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}})
    elif method == "tools/call":
        threading.Thread(target=work, args=(m["id"], m["params"]["arguments"]["s"]), daemon=True).start()
"#;

/// A recorded `notifications/cancelled` names the recorded client's request id; check sends
/// requests with fresh ids, so it must name the live request. It went out as recorded and
/// cancelled another live request — the one that had the recorded id's number — which then went
/// unanswered (grade D, "missing"), while the request the client had cancelled ran on. And a
/// request cancelled and left unanswered in the recording is not waited for the whole timeout.
#[test]
fn check_cancels_the_live_request_the_recorded_client_cancelled() {
    let (_dir, tape) = tmp_tape("cancel.jsonl");
    let call = |id: i64, s: f64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "sleep", "arguments": {"s": s}}});
    let mut msgs: Vec<(&str, Value)> = init_pair(0).to_vec();
    msgs.extend([
        ("c2s", call(1, 1.0)),
        ("c2s", call(2, 6.0)),
        (
            "c2s",
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "user"}}),
        ),
        (
            "s2c",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "slept 1.0"}]}}),
        ),
    ]);
    write_tape(&tape, &msgs, true);
    let server = vec![python(), "-u".into(), "-c".into(), CANCELLABLE.into()];
    let started = std::time::Instant::now();
    let (r, out) = check(&tape, &["--timeout", "10"], &server, &[]);
    let took = started.elapsed();
    assert_eq!(r.grade, Grade::A, "{}", out.console());
    assert!(
        r.exchanges.iter().all(|e| e.status == Status::Pass),
        "{}",
        out.console()
    );
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}: {}",
        out.console()
    );
}
