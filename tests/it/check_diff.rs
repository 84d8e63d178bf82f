//! `mcptape check` and `mcptape diff` against real processes: sessions recorded through
//! `mcptape record` (with the Python SDK client, or by hand with a line client), then checked
//! against the same server, or against the fixture server's drifted build (`FIXTURE_DRIFT=1`,
//! see tests/peers/README.md), and diffed. Reports are read back into the crate's own types,
//! which refuse unknown fields.

use crate::harness::*;
use mcptape::check::{CheckReport, CheckedExchange, Grade, Status};
use mcptape::compare::surface::SurfaceKind;
use mcptape::compare::ChangeKind;
use mcptape::diff::{DiffReport, Verdict};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

// --- helpers ---------------------------------------------------------------------------------

const DRIFT: &[(&str, &str)] = &[("FIXTURE_DRIFT", "1")];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed by a signal")
}

/// `mcptape ARGS…` with extra environment variables (FIXTURE_DRIFT is never inherited).
fn run(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove("FIXTURE_DRIFT")
        .env("NO_COLOR", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    run_with_timeout(c, Duration::from_secs(120))
}

/// `mcptape check TAPE FLAGS… -- SERVER…`.
fn check_cmd(tape: &Path, flags: &[&str], server: &[String], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["check".to_string(), s(tape)];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.push("--".into());
    args.extend(server.iter().cloned());
    run(&args, env)
}

/// `mcptape check … --json -`, the report read back (strictly).
fn check(
    tape: &Path,
    flags: &[&str],
    server: &[String],
    env: &[(&str, &str)],
) -> (CheckReport, Output) {
    let mut f = flags.to_vec();
    f.extend(["--json", "-"]);
    let out = check_cmd(tape, &f, server, env);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON report ({e}); status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (report, out)
}

/// The exchange for `method` (and tool, prompt or resource `target`), the first such.
fn ex<'a>(r: &'a CheckReport, method: &str, target: Option<&str>) -> &'a CheckedExchange {
    r.exchanges
        .iter()
        .find(|e| e.exchange.method == method && e.exchange.target.as_deref() == target)
        .unwrap_or_else(|| panic!("no {method} {target:?} exchange in the report: {r:#?}"))
}

/// The change of `kind` at `path`, if `e` has it.
fn change<'a>(
    e: &'a CheckedExchange,
    kind: ChangeKind,
    path: &str,
) -> Option<&'a mcptape::compare::Change> {
    e.changes.iter().find(|c| c.kind == kind && c.path == path)
}

fn assert_change(e: &CheckedExchange, kind: ChangeKind, path: &str) -> mcptape::compare::Change {
    change(e, kind, path)
        .unwrap_or_else(|| {
            panic!(
                "expected {} at {path} for {}; got {:#?}",
                kind.as_str(),
                e.exchange.describe(80),
                e.changes
            )
        })
        .clone()
}

/// Console output of a check (stderr with `--json -`), for assertion messages.
fn console(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Records a session with the fixture server by hand: `mcptape record` in front of the normal
/// (undrifted) `py_server.py`, a line client doing the handshake then each call in turn.
/// Returns the responses.
fn record_py(tape: &Path, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut c = LineClient::spawn_cmd({
        let argv = record_cmd(tape, &py_server());
        let mut cmd = command(&argv);
        cmd.env_remove("FIXTURE_DRIFT");
        cmd
    });
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

fn tool(name: &str, arguments: Value) -> (&'static str, Value) {
    ("tools/call", json!({"name": name, "arguments": arguments}))
}

/// `mcptape diff A B FLAGS…`.
fn diff_cmd(a: &Path, b: &Path, flags: &[&str]) -> Output {
    let mut args = vec!["diff".to_string(), s(a), s(b)];
    args.extend(flags.iter().map(|f| f.to_string()));
    run(&args, &[])
}

/// `mcptape diff A B --format json FLAGS…`, read back strictly.
fn diff_json(a: &Path, b: &Path, flags: &[&str]) -> (DiffReport, Output) {
    let mut f = vec!["--format", "json"];
    f.extend(flags);
    let out = diff_cmd(a, b, &f);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("diff printed no JSON report ({e}); {}", console(&out)));
    (report, out)
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
    let report: CheckReport =
        serde_json::from_str(&std::fs::read_to_string(&json_file).expect("JSON report written"))
            .expect("the JSON report reads back with deny_unknown_fields");
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert_eq!(report.grade, Grade::A, "{}", console(&out));
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
    let stdout = text(&out.stdout);
    assert!(stdout.contains("grade A"), "{stdout}");
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
        console(&out)
    );
    assert_eq!(report.grade, Grade::A, "{}", console(&out));
    assert_eq!(report.score, 100.0);
    assert!(report.regressions.is_empty());
    assert_eq!(code(&out), 0, "{}", console(&out));
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
    let dir = tmp();
    let tape = dir.path().join("fixture.jsonl");
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
        code(&out),
        1,
        "--fail-on-regression fails: {}",
        console(&out)
    );
    let r: CheckReport = serde_json::from_str(&std::fs::read_to_string(&json_file).unwrap())
        .expect("JSON report reads back with deny_unknown_fields");

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
    assert!(md.contains("grade D"), "{md}");
    assert!(md.contains("| --- |"), "{md}");
    assert!(md.contains("$.result.structuredContent.result"), "{md}");

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
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert!(r2.gate.passed && !r2.gate.fail_on_regression);
    assert_eq!(r2.gate.min_grade, Some(Grade::F));
    assert_eq!(r2.grade, Grade::D);
    let out = check_cmd(&tape, &["--min-grade", "C"], &py_server(), DRIFT);
    assert_eq!(code(&out), 1, "{}", console(&out));
}

#[test]
fn a_request_past_the_timeout_is_a_missing_response() {
    let dir = tmp();
    let tape = dir.path().join("slow.jsonl");
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
        console(&out)
    );
    assert_change(e, ChangeKind::MissingResponse, "$");
    assert!(
        r.grade >= Grade::D,
        "a missing answer caps the grade at D: {r:#?}"
    );
    assert_eq!(code(&out), 1);
}

#[test]
fn a_tool_result_turned_into_a_tool_error_is_an_error_status_change() {
    let dir = tmp();
    let tape = dir.path().join("toolerror.jsonl");
    let responses = record_py(&tape, &[tool("progress_steps", json!({"steps": 1}))]);
    assert_eq!(responses[0]["result"]["isError"], false);
    // The drifted build answers {"content": […], "isError": true}: the tool failed.
    let (r, out) = check(&tape, &[], &py_server(), DRIFT);
    let e = ex(&r, "tools/call", Some("progress_steps"));
    assert_eq!(e.status, Status::Regression, "{}", console(&out));
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

#[test]
fn masking_ignore_path_and_allow_reorder() {
    let dir = tmp();
    let tape = dir.path().join("clock.jsonl");
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
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert_eq!(r.grade, Grade::A);
    assert!(
        r.exchanges.iter().all(|e| e.status == Status::Pass),
        "{r:#?}"
    );

    // --no-auto-mask: the same values are regressions, at their own paths.
    let (r, out) = check(&tape, &["--no-auto-mask"], &py_server(), &[]);
    assert_eq!(code(&out), 1, "{}", console(&out));
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
    let (r, out) = check(
        &tape,
        &[
            "--ignore-path",
            "$.result.structuredContent.result",
            "--ignore-path",
            "$.result.content[0].text",
        ],
        &py_server(),
        DRIFT,
    );
    assert_eq!(
        ex(&r, "tools/call", Some("add")).status,
        Status::Pass,
        "{}",
        console(&out)
    );
    let list = ex(&r, "resources/list", None);
    assert_change(list, ChangeKind::OrderingChange, "$.result.resources");
    assert_eq!(code(&out), 1);

    // Drifted build, --allow-reorder: the list passes, add's value change remains.
    let (r, out) = check(&tape, &["--allow-reorder"], &py_server(), DRIFT);
    assert_eq!(
        ex(&r, "resources/list", None).status,
        Status::Pass,
        "{}",
        console(&out)
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
        &[
            "--allow-reorder",
            "--ignore-path",
            "$.result.structuredContent.result",
            "--ignore-path",
            "$.result.content[0].text",
        ],
        &py_server(),
        DRIFT,
    );
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert_eq!(r.grade, Grade::A);
}

// --- --update -------------------------------------------------------------------------------

#[test]
fn update_makes_the_drifted_behaviour_the_baseline_and_keeps_a_backup() {
    let dir = tmp();
    let tape = dir.path().join("base.jsonl");
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
    assert_eq!(r.regression_count(), 4, "{}", console(&out));
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
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert_eq!((r.grade, r.score), (Grade::A, 100.0), "{}", console(&out));
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
    let out = diff_cmd(&a, &b, &[]);
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert!(text(&out.stdout).starts_with("same"), "{}", console(&out));

    // The same calls made one at a time, in reverse order, by another client (same handshake).
    let msgs = tape_msgs(&a);
    let requests: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["dir"] == "c2s" && m["kind"] == "request")
        .map(|m| &m["msg"])
        .collect();
    assert_eq!(requests[0]["method"], "initialize");
    let c_tape = dir.path().join("c.jsonl");
    let mut c = LineClient::spawn(&record_cmd(&c_tape, &py_server()));
    c.call(0, "initialize", requests[0]["params"].clone());
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let calls: Vec<&Value> = requests[1..].iter().rev().copied().collect();
    assert_eq!(calls.len(), 9, "tools/list and 8 slow_echo");
    for (i, r) in calls.iter().enumerate() {
        let params = r.get("params").cloned().unwrap_or(Value::Null);
        let resp = c.call(100 + i as i64, r["method"].as_str().unwrap(), params);
        assert!(resp.get("result").is_some(), "{resp}");
    }
    let (status, stderr) = c.finish();
    assert!(status.success(), "{stderr}");

    let (r, out) = diff_json(&a, &c_tape, &[]);
    assert_eq!(code(&out), 0, "{}", console(&out));
    assert_eq!(r.verdict, Verdict::Same, "{r:#?}");
    assert_eq!(r.compared, 10);
    assert!(r.drifts.is_empty() && r.only_in_a.is_empty() && r.only_in_b.is_empty());
    assert!(r.tool_surface.is_empty());
}

#[test]
fn diff_of_the_demo_tapes_is_output_drift_at_the_right_paths() {
    let dir = tmp();
    let out = mcptape(&["demo", "--dir", &s(dir.path())]);
    assert!(out.status.success(), "{}", console(&out));
    let (a, b) = (
        dir.path().join("demo.jsonl"),
        dir.path().join("demo-drifted.jsonl"),
    );

    // Text: the first drift only, then --all for both.
    let out = diff_cmd(&a, &b, &[]);
    assert_eq!(code(&out), 1, "{}", console(&out));
    let t = text(&out.stdout);
    assert!(t.starts_with("output drift"), "{t}");
    assert!(
        t.contains("first drift: tools/call convert_temperature"),
        "{t}"
    );
    assert!(t.contains("$.result.content[0].text"), "{t}");
    assert!(t.contains("1 more drift; --all shows it"), "{t}");
    assert!(!t.contains("lookup_city"), "{t}");
    let out = diff_cmd(&a, &b, &["--all"]);
    assert_eq!(code(&out), 1);
    let t = text(&out.stdout);
    assert!(
        t.contains("convert_temperature") && t.contains("lookup_city"),
        "{t}"
    );
    assert!(t.contains("$.result.structuredContent.coordinates"), "{t}");
    assert!(t.contains("$.result.structuredContent.coords"), "{t}");

    // JSON, strictly.
    let (r, out) = diff_json(&a, &b, &[]);
    assert_eq!(code(&out), 1);
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
    let out = diff_cmd(&a, &b, &["--format", "markdown"]);
    assert_eq!(code(&out), 1);
    let md = text(&out.stdout);
    assert!(md.contains("| --- |") || md.contains("|---|"), "{md}");
    assert!(md.contains("convert_temperature"), "{md}");

    // The same tape against itself.
    let (r, out) = diff_json(&a, &a, &[]);
    assert_eq!((code(&out), r.verdict), (0, Verdict::Same));
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

#[test]
fn diff_structural_drift_extra_call_and_tool_surface() {
    let dir = tmp();
    let base: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(list_pair(2, json!([add_tool(&["a", "b"]), echo_tool()])))
        .chain(call_pair(3, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    let a = dir.path().join("a.jsonl");
    write_tape(&a, &base, true);

    // B made one more call.
    let mut extra = base.clone();
    extra.extend(call_pair(4, "add", json!({"a": 5, "b": 5}), json!("10")));
    let b = dir.path().join("b.jsonl");
    write_tape(&b, &extra, true);
    let (r, out) = diff_json(&a, &b, &[]);
    assert_eq!(code(&out), 2, "{}", console(&out));
    assert_eq!(r.verdict, Verdict::StructuralDrift);
    assert_eq!(r.only_in_b.len(), 1, "{r:#?}");
    assert_eq!(r.only_in_b[0].target.as_deref(), Some("add"));
    assert_eq!(r.only_in_b[0].arguments, Some(json!({"a": 5, "b": 5})));
    assert!(r.only_in_a.is_empty() && r.drifts.is_empty());
    // And the other way round.
    let (r, out) = diff_json(&b, &a, &[]);
    assert_eq!((code(&out), r.only_in_a.len()), (2, 1), "{r:#?}");
    let out = diff_cmd(&a, &b, &[]);
    assert_eq!(code(&out), 2);
    assert!(
        text(&out.stdout).starts_with("structural drift"),
        "{}",
        console(&out)
    );

    // C: echo removed, add's `c` now required, the same calls answered the same.
    let narrowed: Vec<(&str, Value)> = init_pair(1)
        .into_iter()
        .chain(list_pair(2, json!([add_tool(&["a", "b", "c"])])))
        .chain(call_pair(3, "add", json!({"a": 2, "b": 3}), json!("5")))
        .collect();
    let c = dir.path().join("c.jsonl");
    write_tape(&c, &narrowed, true);
    let (r, out) = diff_json(&a, &c, &[]);
    assert_eq!(code(&out), 2, "{}", console(&out));
    assert_eq!(r.verdict, Verdict::StructuralDrift);
    let echo = r
        .tool_surface
        .iter()
        .find(|t| t.tool == "echo")
        .expect("echo's removal reported");
    assert_eq!(echo.kind, SurfaceKind::Removed);
    let add = r
        .tool_surface
        .iter()
        .find(|t| t.tool == "add")
        .expect("add's narrowing reported");
    assert_eq!(add.kind, SurfaceKind::Narrowed);
    assert!(
        add.details
            .iter()
            .any(|d| d.contains("`c` is now required")),
        "{:?}",
        add.details
    );
    let t = text(&diff_cmd(&a, &c, &["--all"]).stdout);
    assert!(
        t.contains("echo") && t.contains("`c` is now required"),
        "{t}"
    );
    let md = text(&diff_cmd(&a, &c, &["--format", "markdown"]).stdout);
    assert!(md.contains("echo") && md.contains('|'), "{md}");
}

// --- exit codes -----------------------------------------------------------------------------

#[test]
fn check_and_diff_exit_codes_for_tool_errors() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let msgs: Vec<(&str, Value)> = init_pair(1).into_iter().collect();
    write_tape(&tape, &msgs, true);

    let out = check_cmd(&tape, &[], &["/nonexistent/mcp-server".to_string()], &[]);
    assert_eq!(code(&out), 69, "server cannot start: {}", console(&out));

    let missing = dir.path().join("nope.jsonl");
    let out = check_cmd(&missing, &[], &py_server(), &[]);
    assert_eq!(code(&out), 66, "{}", console(&out));
    let out = diff_cmd(&missing, &tape, &[]);
    assert_eq!(code(&out), 66, "{}", console(&out));

    let out = check_cmd(&tape, &["--ignore-path", "$["], &py_server(), &[]);
    assert_eq!(code(&out), 64, "{}", console(&out));
    assert!(
        text(&out.stderr).contains("--ignore-path"),
        "{}",
        console(&out)
    );
    let out = diff_cmd(&tape, &tape, &["--ignore-path", "$["]);
    assert_eq!(code(&out), 64, "{}", console(&out));
}
