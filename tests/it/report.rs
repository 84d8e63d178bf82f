//! `mcptape show --stats` and `mcptape report`: per-tool statistics of sessions recorded from
//! the Python SDK fixture server (and of model calls through the model proxy), and the HTML
//! report opened from disk in headless Chromium (tests/browser): rows expanded and read, filters
//! and search applied, drift of a check and of a diff marked, tape content that tries to break
//! out of the page kept as text, a big tape's list virtualised. Screenshots are kept under
//! target/tmp/screenshots.

use crate::check_diff::{record_py, tool};
use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What a tool result may carry to break out of the page: a script end tag, markup with a
/// handler, an HTML comment opener, a placeholder of the page's template.
const HOSTILE: &str =
    "</script><script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\"><!-- {{JS}}";

/// Records the fixture session every test here reads: the handshake, tools/list, echo twice
/// (once with [`HOSTILE`] text), add with a bad argument (a tool error), progress_steps (three
/// progress notifications during the call), a resource, a prompt.
fn fixture_tape(dir: &Path) -> PathBuf {
    let tape = dir.join("fixture.jsonl");
    let answers = record_py(
        &tape,
        &[
            ("tools/list", json!({})),
            tool("echo", json!({"text": "hello"})),
            tool("echo", json!({"text": HOSTILE})),
            tool("add", json!({"a": "not a number", "b": 1})),
            (
                "tools/call",
                json!({"name": "progress_steps", "arguments": {"steps": 3},
                       "_meta": {"progressToken": "p1"}}),
            ),
            ("resources/read", json!({"uri": "fixture://greeting"})),
            (
                "prompts/get",
                json!({"name": "review", "arguments": {"code": "x = 1"}}),
            ),
        ],
    );
    assert_eq!(
        answers[3]["result"]["isError"], true,
        "add with a bad argument is a tool error: {}",
        answers[3]
    );
    tape
}

/// (request t_us, answer t_us) of each `tools/call NAME` on the tape, from its lines.
fn call_times(tape: &Path, name: &str) -> Vec<(u64, u64)> {
    let msgs = tape_msgs(tape);
    msgs.iter()
        .filter(|m| m["method"] == "tools/call" && m["msg"]["params"]["name"] == name)
        .map(|req| {
            let answer = msgs
                .iter()
                .find(|m| m["dir"] == "s2c" && m["id"] == req["id"] && m.get("method").is_none())
                .expect("answered");
            (
                req["t_us"].as_u64().unwrap(),
                answer["t_us"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn show_stats_counts_calls_errors_latency_and_sizes_per_tool() {
    let dir = tmp();
    let tape = fixture_tape(dir.path());
    let doc: StatsDoc = Mt::new(["show", "--stats", "--json"])
        .arg(&tape)
        .run()
        .success()
        .json();
    let echo = doc.row("default", "tools/call", Some("echo"));
    assert_eq!((echo.kind.as_str(), echo.calls, echo.errors), ("mcp", 2, 0));
    // p50 of two is the faster one (nearest rank), the max the slower, both from the tape.
    let mut lat: Vec<u64> = call_times(&tape, "echo")
        .iter()
        .map(|(q, a)| a - q)
        .collect();
    lat.sort();
    assert_eq!(
        echo.latency_us,
        Some(Latency {
            p50: lat[0],
            p95: lat[1],
            max: lat[1]
        })
    );
    assert!(
        echo.request_bytes.max > HOSTILE.len() as u64,
        "the hostile request is the larger: {echo:?}"
    );
    assert_eq!(
        echo.request_bytes.total,
        2 * echo.request_bytes.mean + echo.request_bytes.total % 2
    );
    let add = doc.row("default", "tools/call", Some("add"));
    assert_eq!(
        (add.calls, add.errors),
        (1, 1),
        "isError counts as an error"
    );
    for (method, target) in [
        ("resources/read", Some("fixture://greeting")),
        ("prompts/get", Some("review")),
        ("tools/list", None),
        ("initialize", None),
    ] {
        let r = doc.row("default", method, target);
        assert_eq!((r.calls, r.errors, r.unanswered), (1, 0, 0), "{r:?}");
        assert!(
            r.answer_bytes.total > 0 && r.request_bytes.total > 0,
            "{r:?}"
        );
    }
    // The table says the same, one line per row.
    let table = Mt::new(["show", "--stats"])
        .arg(&tape)
        .run()
        .success()
        .console();
    assert_contains(&table, "SERVER   KIND            METHOD / TARGET");
    let echo_line = table
        .lines()
        .find(|l| l.contains("tools/call echo"))
        .expect("an echo line");
    let cols: Vec<&str> = echo_line.split_whitespace().collect();
    assert_eq!(&cols[..5], ["default", "mcp", "tools/call", "echo", "2"]);
    assert_eq!(
        cols[6..8].join(" "),
        format!("{:.2} ms", lat[0] as f64 / 1000.0)
    );
    // --server names one; one the tape does not have is a usage error.
    Mt::new(["show", "--stats", "--server", "nope"])
        .arg(&tape)
        .run()
        .status(64)
        .stderr_contains("no server labelled nope; this tape has: default");
}

#[test]
fn show_stats_has_model_calls_as_rows_of_their_own() {
    let dir = tmp();
    let (_up, base) = model_upstream(dir.path(), false);
    // Streams are released at once: the upstream waits for this file.
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let tape = dir.path().join("run.jsonl");
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let url = format!("{}/v1/messages", proxy.url);
    for stream in [true, false] {
        let (status, _) = http(
            &url,
            "POST",
            crate::model_proxy::HEADERS,
            &crate::model_proxy::ask(stream),
        );
        assert_eq!(status, 200);
    }
    proxy.stop();
    let doc: StatsDoc = Mt::new(["show", "--stats", "--json"])
        .arg(&tape)
        .run()
        .success()
        .json();
    assert_eq!(doc.rows.len(), 1, "{doc:#?}");
    let r = doc.row("model", "anthropic messages", Some("claude-test"));
    assert_eq!(
        (r.kind.as_str(), r.calls, r.errors, r.unanswered),
        ("model", 2, 0, 0)
    );
    let totals: Vec<u64> = tape_lines(&tape)
        .iter()
        .filter_map(|l| l.get("total_us").and_then(Value::as_u64))
        .collect();
    assert_eq!(
        r.latency_us.map(|l| l.max),
        totals.iter().copied().max(),
        "the slowest call's total time, from the tape"
    );
    assert!(r.answer_bytes.total > 0);

    // A tape of model calls alone has no MCP server to serve, check or prune: without
    // `--server`, these are refused (exit 64) rather than taking an empty `default`.
    let no_mcp = "this tape has no MCP server, only the model API of an agent run (model): ";
    let out = Mt::new(["play"])
        .arg(&tape)
        .stdin(format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
        ))
        .run()
        .status(64);
    assert_contains(
        &out.stderr,
        &format!("{no_mcp}play serves an MCP server's conversation; its model calls are played back by `mcptape model-proxy --playback`"),
    );
    assert!(out.stdout.is_empty(), "{}", out.console());
    Mt::new(["check"])
        .arg(&tape)
        .args(["--", "true"])
        .run()
        .status(64)
        .stderr_contains(&format!(
            "{no_mcp}check replays an MCP server's conversation"
        ));
}

/// `mcptape report TAPE -o OUT EXTRA…`, which must succeed (a debug build given 10 minutes:
/// the big tape's report takes a while on a busy machine).
fn report(tape: &Path, out: &Path, extra: &[&str]) {
    Mt::new(["report"])
        .arg(tape)
        .arg("-o")
        .arg(out)
        .args(extra)
        .timeout(std::time::Duration::from_secs(600))
        .run()
        .success()
        .stderr_contains("mcptape: wrote");
}

#[test]
fn the_report_opens_from_disk_and_its_rows_open_filter_and_search() {
    let dir = tmp();
    let tape = fixture_tape(dir.path());
    let page = dir.path().join("fixture.html");
    report(&tape, &page, &[]);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&page).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "owner-only, as tapes are");
    let add_line = tape_lines(&tape)
        .iter()
        .position(|l| l["msg"]["params"]["name"] == "add")
        .expect("add on the tape") as u64
        + 1;
    let shot = artefact("report-fixture.png");
    let row = format!(".row[data-line='{add_line}']");
    let p = probe(
        &page,
        &[
            step("count", ".row"),
            step("click", &format!("{row} .head")),
            step("texts", &format!("{row} .detail h3")),
            step("texts", &format!("{row} .detail pre")),
            step("texts", &format!("{row} .badge")),
            step_with("select", "#f-method", "tools/call echo"),
            step("count", ".row"),
            step_with("select", "#f-method", ""),
            step("check", "#f-errors"),
            step("texts", ".row .c-what"),
            step("uncheck", "#f-errors"),
            step_with("fill", "#f-search", "hello from the mcptape"),
            step("texts", ".row .c-what"),
            step_with("fill", "#f-search", ""),
            step("texts", ".row.child .c-what"),
            step("texts", "#stats-table tr"),
            screenshot(&shot),
        ],
    )
    .clean();
    println!("screenshot: {}", shot.display());
    // Every message is a row but the answers: 9 requests, the initialized notification, 3
    // progress notifications.
    let msgs = tape_msgs(&tape);
    let answers = msgs
        .iter()
        .filter(|m| m["dir"] == "s2c" && m.get("method").is_none())
        .count();
    assert_eq!(p.count(0), (msgs.len() - answers) as u64);
    assert_eq!(
        p.texts(2),
        [
            format!("request · tape line {add_line}"),
            format!("answer · tape line {}", add_line + 1)
        ]
    );
    let (req, answer) = (&p.texts(3)[0], &p.texts(3)[1]);
    assert!(
        req.contains("\"name\": \"add\"") && req.contains("\"a\": \"not a number\""),
        "{req}"
    );
    assert!(
        answer.contains("\"isError\": true"),
        "pretty-printed: {answer}"
    );
    assert_eq!(p.texts(4), ["error"]);
    assert_eq!(p.count(6), 2, "the two echo calls");
    assert_eq!(p.texts(9), ["tools/call add  #4"], "errors only");
    assert_eq!(
        p.texts(12),
        ["resources/read fixture://greeting  #6"],
        "the search finds the answer's text"
    );
    assert_eq!(
        p.texts(14),
        ["notifications/progress"; 3],
        "progress notifications in place, under their call"
    );
    let stats = p.texts(15);
    assert!(
        stats
            .iter()
            .any(|r| r.starts_with("defaultmcptools/call echo20")),
        "the statistics table: {stats:?}"
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
}

#[test]
fn tape_content_that_tries_to_break_out_of_the_page_stays_text() {
    let dir = tmp();
    let tape = fixture_tape(dir.path());
    let page = dir.path().join("hostile.html");
    report(&tape, &page, &[]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("</script>").count(),
        2,
        "only the page's own two"
    );
    assert!(
        !html.contains("onerror=\"window"),
        "no markup of the tape's in the page"
    );
    let hostile_line = tape_lines(&tape)
        .iter()
        .position(|l| l["msg"]["params"]["arguments"]["text"] == HOSTILE)
        .expect("the hostile call on the tape") as u64
        + 1;
    let row = format!(".row[data-line='{hostile_line}']");
    let p = probe(
        &page,
        &[
            step("click", &format!("{row} .head")),
            eval("String(window.pwned)"),
            step("texts", &format!("{row} .detail pre")),
            step("count", "img, iframe, object"),
            step("count", "script"),
        ],
    )
    .clean();
    assert_eq!(p.results[1], "undefined", "no script of the tape's ran");
    let shown = p.texts(2);
    let escaped = HOSTILE.replace('"', "\\\"");
    assert!(
        shown[0].contains(&escaped) && shown[1].contains(&escaped),
        "request and answer show the text as it was: {shown:?}"
    );
    assert_eq!((p.count(3), p.count(4)), (0, 2));
}

#[test]
fn a_check_report_and_a_diff_mark_the_drifted_exchanges_side_by_side() {
    let dir = tmp();
    let tape = fixture_tape(dir.path());
    let checked = dir.path().join("check.json");
    Mt::new(["check"])
        .arg(&tape)
        .args(["--json"])
        .arg(&checked)
        .arg("--")
        .args(py_server())
        .env("FIXTURE_DRIFT", "1")
        .timeout(std::time::Duration::from_secs(120))
        .run()
        .status(1);
    let page = dir.path().join("checked.html");
    report(&tape, &page, &["--check", &s(&checked)]);
    let report_json: CheckReport =
        serde_json::from_str(&std::fs::read_to_string(&checked).unwrap()).unwrap();
    let drifted = report_json
        .exchanges
        .iter()
        .filter(|e| e.status != Status::Pass)
        .count();
    let echo = report_json
        .exchanges
        .iter()
        .find(|e| e.exchange.target.as_deref() == Some("echo") && e.status != Status::Pass)
        .expect("echo drifted");
    let row = format!(".row[data-line='{}']", echo.exchange.line);
    let p = probe(
        &page,
        &[
            step("count", ".row .badge.b-drift"),
            step("texts", "#h-drift"),
            step("click", &format!("{row} .head")),
            step("texts", &format!("{row} table.changes th")),
            step("texts", &format!("{row} table.changes td")),
            step("check", "#f-drift"),
            step("count", ".row"),
            screenshot(&artefact("report-check.png")),
        ],
    )
    .clean();
    assert_eq!(p.count(0), drifted as u64);
    assert_contains(&p.texts(1)[0], &format!("grade {:?}", report_json.grade));
    assert_eq!(p.texts(3), ["kind", "path", "recorded", "observed"]);
    let cells = p.texts(4);
    let first = &echo.changes[0];
    assert_eq!(cells[1], first.path);
    assert_eq!(
        cells[2],
        first
            .recorded
            .as_ref()
            .map_or("(absent)".into(), |v| serde_json::to_string_pretty(v)
                .unwrap())
    );
    assert_eq!(p.count(6), drifted as u64, "drifted only");

    // A diff against a recording of the drifted build: its answers beside this tape's.
    let other = dir.path().join("drifted.jsonl");
    let mut c = Mt::new(["record", "--tape"])
        .arg(&other)
        .arg("--")
        .args(py_server())
        .env("FIXTURE_DRIFT", "1")
        .spawn();
    c.initialize();
    c.call(1, "tools/list", json!({}));
    c.call(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hello"}}),
    );
    let (status, stderr) = c.finish();
    assert!(status.success(), "{stderr}");
    let page = dir.path().join("diffed.html");
    report(&tape, &page, &["--diff", &s(&other)]);
    let hello = tape_lines(&tape)
        .iter()
        .position(|l| l["msg"]["params"]["arguments"]["text"] == "hello")
        .unwrap() as u64
        + 1;
    let row = format!(".row[data-line='{hello}']");
    let p = probe(
        &page,
        &[
            step("texts", &format!("{row} .badge")),
            step("click", &format!("{row} .head")),
            step("texts", &format!("{row} .drift .cols h3")),
            step("texts", &format!("{row} .drift .cols pre")),
            step("texts", ".row .badge.b-drift"),
        ],
    )
    .clean();
    assert_eq!(p.texts(0), ["changed"]);
    assert_eq!(p.texts(2)[1], "answer on the other tape");
    let (here, there) = (&p.texts(3)[0], &p.texts(3)[1]);
    assert!(here.contains("\"text\": \"echo: hello\""), "{here}");
    assert_ne!(here, there, "the drifted build answers echo differently");
    // Calls the other recording never made are marked absent.
    assert!(p.texts(4).iter().any(|b| b == "absent"), "{:?}", p.texts(4));
}

#[test]
fn a_check_report_that_is_not_one_or_is_another_tapes_is_refused() {
    let dir = tmp();
    let tape = fixture_tape(dir.path());
    let out = dir.path().join("r.html");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"grade\": 3}").unwrap();
    Mt::new(["report"])
        .arg(&tape)
        .arg("-o")
        .arg(&out)
        .arg("--check")
        .arg(&bad)
        .run()
        .status(65)
        .stderr_contains(&format!("{} is not a check report", bad.display()));
    Mt::new(["report"])
        .arg(&tape)
        .arg("--check")
        .arg(dir.path().join("missing.json"))
        .run()
        .status(66);
    // A report of another recording names an exchange this tape does not have at that line.
    let small = dir.path().join("small.jsonl");
    record_py(
        &small,
        &[
            tool("echo", json!({"text": "a"})),
            tool("echo", json!({"text": "b"})),
            tool("echo", json!({"text": "c"})),
            tool("echo", json!({"text": "d"})),
        ],
    );
    let checked = dir.path().join("small.json");
    Mt::new(["check"])
        .arg(&small)
        .arg("--json")
        .arg(&checked)
        .arg("--")
        .args(py_server())
        .timeout(std::time::Duration::from_secs(120))
        .run()
        .status(0);
    Mt::new(["report"])
        .arg(&tape)
        .arg("-o")
        .arg(&out)
        .arg("--check")
        .arg(&checked)
        .run()
        .status(65)
        .stderr_contains("is not a request on")
        .stderr_contains("(a report of another tape?)");
    assert!(!out.exists(), "no report written");
}

/// `--ignore-path`, `--allow-reorder` and `--no-auto-mask` shape the comparison of `--diff`; an
/// `--ignore-path` that is not a JSONPath is a usage error whether or not `--diff` is given (it
/// was read only for `--diff`: without it, a typo went unnoticed and the report was written).
#[test]
fn an_invalid_ignore_path_is_a_usage_error_with_or_without_diff() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let ping = req(1, "ping", json!({}));
    let pong = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    write_tape(&tape, &[("c2s", ping), ("s2c", pong)], true);
    let out = dir.path().join("r.html");
    for extra in [&[][..], &["--diff", &s(&tape)][..]] {
        Mt::new(["report"])
            .arg(&tape)
            .arg("-o")
            .arg(&out)
            .args(["--ignore-path", "$.result[oops"])
            .args(extra)
            .run()
            .status(64)
            .stderr_contains("$.result[oops");
        assert!(!out.exists(), "no report written");
    }
}

/// How many exchanges the big-tape test records: `MCPTAPE_REPORT_EXCHANGES`, else 20,000 (the
/// 100,000 of docs/report.md take a few minutes in a debug build).
fn big_size() -> usize {
    std::env::var("MCPTAPE_REPORT_EXCHANGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn a_big_tape_makes_a_report_whose_list_holds_only_the_rows_in_view() {
    let n = big_size();
    let dir = tmp();
    let tape = dir.path().join("big.jsonl");
    let mut c = Mt::new(["record", "--tape"])
        .arg(&tape)
        .arg("--")
        .args(demo_server("healthy"))
        .spawn();
    c.initialize();
    for i in 0..n {
        let args = json!({"a": i, "b": 1});
        let answer = c.call(
            i as i64 + 2,
            "tools/call",
            json!({"name": "add", "arguments": args}),
        );
        assert!(answer.get("result").is_some(), "{answer}");
    }
    let (status, stderr) = c.finish();
    assert!(status.success(), "{stderr}");
    let page = dir.path().join("big.html");
    report(&tape, &page, &[]);
    let size = std::fs::metadata(&page).unwrap().len();
    let last_line = tape_lines(&tape).len() as u64 - 2; // the last request, before its answer and the end
    let p = probe(
        &page,
        &[
            step("count", ".row"),
            eval("document.getElementById('spacer').offsetHeight"),
            step_with("scroll", "#list", 1e9),
            step("texts", ".row .c-line"),
            step("count", ".row"),
            screenshot(&artefact("report-big.png")),
        ],
    )
    .clean();
    println!(
        "big report: {n} exchanges, {} bytes of tape, {size} bytes of report; paint {}",
        std::fs::metadata(&tape).unwrap().len(),
        p.paint
    );
    assert_eq!(
        p.paint["items"],
        n as u64 + 2,
        "every request and the initialized notification"
    );
    assert!(
        p.count(0) < 100 && p.count(4) < 100,
        "only the rows in view are in the DOM"
    );
    assert!(
        p.results[1].as_u64().unwrap() >= n as u64 * 24,
        "the list is as tall as all rows"
    );
    assert!(
        p.texts(3).contains(&last_line.to_string()),
        "scrolled to the end, the last request (line {last_line}) is there: {:?}",
        p.texts(3)
    );
}
