//! The command line itself: help, exit codes, the demo.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;

#[test]
fn demo_runs_the_whole_loop() {
    let dir = tmp();
    Mt::new(["demo", "--dir"])
        .arg(dir.path())
        .run()
        .success()
        .stdout_contains("8 of 8 steps identical")
        .stdout_contains("$.arguments.celsius  recorded 21.5  asked 30")
        .stdout_contains("tools/call convert_temperature drifted");
    assert!(dir.path().join("demo.jsonl").exists());
}

/// Without `--dir`, runs of the demo share one folder under the temp dir, made anew each time:
/// the second run records fresh tapes (no `.bak` of the first), and one folder is left, not one
/// per run (each run left `/tmp/mcptape-demo-<pid>`).
#[test]
fn demo_runs_leave_one_folder_not_one_each() {
    let tmpdir = tmp();
    for run in 1..=2 {
        let out = Mt::new(["demo"])
            .env("TMPDIR", tmpdir.path())
            .run()
            .success();
        assert!(
            !out.stderr.contains("replaced"),
            "run {run} recorded over the last one's tapes:\n{}",
            out.stderr
        );
    }
    let left: Vec<String> = std::fs::read_dir(tmpdir.path())
        .expect("the temp dir")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.starts_with("mcptape-demo"))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let files: Vec<String> = std::fs::read_dir(tmpdir.path().join(&left[0]))
        .expect("the demo folder")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(
        !files.iter().any(|f| f.ends_with(".bak")),
        "no backups of the last run: {files:?}"
    );
}

#[test]
fn help_states_the_exit_codes() {
    Mt::new(["--help"])
        .run()
        .success()
        .stdout_contains("65  malformed tape");
    // Each command its own codes, not the whole table again.
    for (cmd, says) in [
        ("record", "Exit codes: the server's own"),
        ("play", "1 a miss, a drifted answer"),
        (
            "check",
            "0 the gate passed (or --update accepted the changes)",
        ),
        ("diff", "2 structural drift"),
        (
            "verify",
            "0 intact; 1 tampered, cut off, or a bad signature",
        ),
        ("run", "Exit codes: the agent's own"),
    ] {
        let out = Mt::new([cmd, "--help"]).run().success();
        assert_contains(&out.stdout, says);
        assert!(
            !out.stdout.contains("70  internal error"),
            "{cmd}: the whole table again:\n{}",
            out.stdout
        );
    }
}

/// The command list is one line per command (short summaries, not long descriptions wrapped
/// raggedly), and every command's TAPE argument says what it is.
#[test]
fn help_lists_one_line_per_command_and_describes_every_tape_argument() {
    let out = Mt::new(["--help"]).run().success();
    let list: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(list.len() >= 12, "{}", out.stdout);
    for l in &list {
        assert!(
            l.starts_with("  ") && !l.starts_with("   "),
            "a continuation line in the command list: {l:?}\n{}",
            out.stdout
        );
    }
    for cmd in ["verify", "redact", "lint", "show", "play"] {
        let out = Mt::new([cmd, "--help"]).run().success();
        let lines: Vec<&str> = out.stdout.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with("<TAPE>"))
            .unwrap_or_else(|| panic!("{cmd}: no <TAPE> line:\n{}", out.stdout));
        // Short help puts the description beside it, long help on the next line.
        let described =
            lines[at].trim() != "<TAPE>" || lines.get(at + 1).is_some_and(|n| !n.trim().is_empty());
        assert!(
            described,
            "{cmd}: <TAPE> has no description:\n{}",
            out.stdout
        );
    }
}

/// The top level's `--help` and every command's, as (command, text); the top level is "".
fn every_help() -> Vec<(String, String)> {
    let top = Mt::new(["--help"]).run().success().stdout;
    let cmds: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(cmds.len() >= 12, "{top}");
    let mut out = vec![(String::new(), top)];
    for c in cmds {
        let text = Mt::new([c.as_str(), "--help"]).run().success().stdout;
        out.push((c, text));
    }
    out
}

/// A document a `--help` points to is in the repository (play's `--faults` named
/// docs/play-policies.md, which is not: the grammar is in docs/play-time-and-faults.md).
#[test]
fn every_doc_a_help_names_exists() {
    let doc = regex::Regex::new(r"docs/[A-Za-z0-9_.-]+\.md").unwrap();
    for (cmd, text) in every_help() {
        for m in doc.find_iter(&text) {
            assert!(
                repo().join(m.as_str()).is_file(),
                "`mcptape {cmd} --help` names {}, which is not in the repository:\n{text}",
                m.as_str()
            );
        }
    }
}

/// `mcptape --help` lists every exit code of the README's table (it left out 75, play's
/// `--faults drop` over stdio).
#[test]
fn the_top_level_help_lists_every_exit_code_of_the_readme() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let codes: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != "## Exit codes")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next())
        .filter(|c| c.parse::<u8>().is_ok())
        .collect();
    assert!(codes.len() >= 10, "the README's exit code table: {codes:?}");
    let top = Mt::new(["--help"]).run().success().stdout;
    for code in codes {
        assert!(
            top.lines().any(|l| l.starts_with(&format!("  {code} "))),
            "exit code {code} of the README's table is not in `mcptape --help`:\n{top}"
        );
    }
}

/// Every usage line's brackets nest (`import`'s read `<FORMAT] [PATH>...`).
#[test]
fn every_usage_line_reads() {
    for (cmd, text) in every_help() {
        let usage = text
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap_or_else(|| panic!("`mcptape {cmd} --help` has no usage line:\n{text}"));
        let mut open = Vec::new();
        for c in usage.chars() {
            match c {
                '<' | '[' => open.push(c),
                '>' | ']' => {
                    let want = if c == '>' { '<' } else { '[' };
                    assert_eq!(open.pop(), Some(want), "`mcptape {cmd}`: {usage}");
                }
                _ => {}
            }
        }
        assert!(open.is_empty(), "`mcptape {cmd}`: {usage}");
    }
}

#[test]
fn usage_errors_exit_64() {
    for args in [&["record"][..], &["play"], &["frobnicate"]] {
        Mt::new(args).run().status(64);
    }
}

/// A limit of zero refuses everything (`play --max-message 0` answered every line with an
/// error and exited 0): a usage error naming the flag, as `--session-idle 0` already was.
#[test]
fn a_zero_limit_is_a_usage_error() {
    for (args, flag) in [
        (
            &["play", "t.jsonl", "--max-message", "0"][..],
            "--max-message",
        ),
        (
            &[
                "record",
                "--tape",
                "t.jsonl",
                "--max-message",
                "0",
                "--",
                "true",
            ],
            "--max-message",
        ),
        (
            &["check", "t.jsonl", "--max-message", "0", "--", "true"],
            "--max-message",
        ),
        (
            &["model-proxy", "--tape", "t.jsonl", "--max-message", "0"],
            "--max-message",
        ),
        (
            &["check", "t.jsonl", "--timeout", "0", "--", "true"],
            "--timeout",
        ),
        (
            &[
                "play",
                "t.jsonl",
                "--listen",
                "127.0.0.1:0",
                "--max-connections",
                "0",
            ],
            "--max-connections",
        ),
    ] {
        Mt::new(args)
            .run()
            .status(64)
            .stderr_contains(&format!("invalid value '0' for '{flag}"));
    }
}

/// An empty redaction rule — `--redact ''`, a key of only `_`/`-`, `re:` with nothing after
/// it or a pattern that matches the empty string — redacts nothing (or everything): a usage
/// error naming the flag, before any server starts or any tape is written. `''` and `re:`
/// were accepted, and the session recorded.
#[test]
fn an_empty_redaction_rule_is_a_usage_error_naming_the_flag() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    for rule in ["", " ", "_", "re:", "re:a*", "path:"] {
        let run = Mt::new(["record", "--redact", rule, "--tape"])
            .arg(&tape)
            .args(["--", "cat"])
            .stdin("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .run()
            .status(64)
            .stderr_contains("--redact");
        assert_eq!(run.stdout, "", "no server started: {}", run.console());
        assert!(!tape.exists(), "no tape for {rule:?}: {}", run.console());
    }
    Mt::new(["lint", "--redact", ""])
        .arg(&tape)
        .run()
        .status(64)
        .stderr_contains("empty");
}

#[test]
fn missing_tape_exits_66_and_bad_tape_65() {
    let dir = tmp();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    let future = dir.path().join("future.jsonl");
    std::fs::write(&future, "{\"type\":\"header\",\"format\":\"mcptape\",\"version\":2,\"created\":\"x\",\"tool\":\"mcptape 9\"}\n").unwrap();
    for (command, tape, code, says) in [
        ("play", dir.path().join("nope.jsonl"), 66, "tape not found"),
        ("show", bad, 65, "not an mcptape tape"),
        ("play", future, 65, "tape format version 2 is newer"),
    ] {
        Mt::new([command])
            .arg(tape)
            .run()
            .status(code)
            .stderr_contains(says);
    }
}

#[test]
fn hostile_tape_names_are_refused() {
    let dir = tmp();
    for name in [".hidden", "a b", "x:y", "é"] {
        Mt::new(["play", name])
            .env("MCPTAPE_DIR", dir.path())
            .timeout(Duration::from_secs(10))
            .run()
            .status(64)
            .stderr_contains("invalid tape name");
    }
}

/// `mcptape record --tape TAPE -- /nonexistent/server`.
fn record_nonexistent(tape: &std::path::Path) -> Run {
    Mt::new(["record", "--tape"])
        .arg(tape)
        .args(["--", "/nonexistent/server"])
        .run()
}

#[test]
fn a_server_that_cannot_start_exits_69_and_leaves_no_tape() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    record_nonexistent(&tape)
        .status(69)
        .stderr_contains("could not start server `/nonexistent/server`");
    assert!(!tape.exists());
}

#[test]
fn show_and_ls_into_a_closed_pipe_end_quietly() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    let tape = s(dir.path().join("demo.jsonl"));
    for args in [
        vec!["show", tape.as_str()],
        vec!["show", "--json", tape.as_str()],
    ] {
        let mut child = Mt::new(&args)
            .command()
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before mcptape writes
        let out = wait_output(child, Duration::from_secs(20));
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn a_server_that_cannot_start_does_not_cost_an_existing_tape() {
    // Regression: the tape was truncated before the spawn, then removed when it failed.
    let (_dir, tape) = tmp_tape("t.jsonl");
    std::fs::write(&tape, "precious\n").unwrap();
    record_nonexistent(&tape).status(69);
    assert_eq!(std::fs::read_to_string(&tape).unwrap(), "precious\n");
}

#[test]
fn show_json_keeps_ids_exactly() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let raw = r#"{"type":"msg","seq":1,"t_us":0,"server":"default","dir":"c2s","kind":"request","id":123456789012345678901234567890,"method":"ping","msg":{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}}"#;
    std::fs::write(
        &tape,
        format!("{{\"type\":\"header\",\"format\":\"mcptape\",\"version\":1,\"created\":\"x\",\"tool\":\"t\"}}\n{raw}\n"),
    )
    .unwrap();
    Mt::new(["show", "--json"])
        .arg(&tape)
        .run()
        .stdout_contains("\"id\": 123456789012345678901234567890");
    let out = Mt::new(["show"]).arg(&tape).run();
    assert!(
        out.stdout.contains("12345…"),
        "ids are shown as written, cut to the column"
    );
}

/// The server command may follow without `--` (the MCP Inspector's CLI swallows a `--`); the
/// flags after it are the server's.
#[test]
fn a_server_command_needs_no_double_dash() {
    let dir = tmp();
    let tape = s(dir.path().join("t.jsonl"));
    let server = [
        "sh",
        "-c",
        "echo \"server got: $*\" >&2; exit 7",
        "sh",
        "--port",
        "1",
    ];
    Mt::new(["record", "--tape", &tape])
        .args(server)
        .timeout(Duration::from_secs(20))
        .run()
        .status(7)
        .stderr_contains("server got: --port 1");
    // `--` still works, and what follows it is the server's even when it looks like a flag.
    Mt::new(["record", "--tape", &tape, "--"])
        .args(server)
        .timeout(Duration::from_secs(20))
        .run()
        .status(7)
        .stderr_contains("server got: --port 1");
    // A mistyped flag before the command is still a usage error, not a server to start.
    Mt::new(["record", "--tapee", &tape])
        .args(server)
        .run()
        .status(64)
        .stderr_contains("unexpected argument '--tapee'");
    // `run`: the agent's command line the same way.
    Mt::new(["run", "--tape", &tape])
        .args([
            "sh",
            "-c",
            "echo \"agent got: $*\" >&2; exit 5",
            "sh",
            "-p",
            "x",
        ])
        .env("MCPTAPE_DIR", dir.path())
        .dir(dir.path())
        .timeout(Duration::from_secs(30))
        .run()
        .status(5)
        .stderr_contains("agent got: -p x");
    // `check TAPE CMD…`: the command is taken (the tape is missing, so 66, not a usage error).
    Mt::new(["check", "nope.jsonl"])
        .args(server)
        .dir(dir.path())
        .timeout(Duration::from_secs(20))
        .run()
        .status(66)
        .stderr_contains("tape not found");
}

/// A tape argument that is not a name in the store but a file in the working folder is that file;
/// a folder is a usage error that says so, for every command that reads a tape.
#[test]
fn a_tape_argument_is_an_existing_file_and_never_a_folder() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    std::fs::copy(dir.path().join("demo.jsonl"), dir.path().join("demo.json")).unwrap();
    let store = tmp();
    for command in ["show", "verify", "lint"] {
        Mt::new([command, "demo.json"])
            .dir(dir.path())
            .env("MCPTAPE_DIR", store.path())
            .run()
            .stdout_contains("demo.json");
    }
    let folder = s(dir.path());
    for args in [
        vec!["show", "."],
        vec!["play", "."],
        vec!["verify", "."],
        vec!["lint", "."],
        vec!["redact", "."],
        vec!["diff", ".", "demo.jsonl"],
        vec!["check", ".", "sh", "-c", "exit 0"],
        vec!["show", &folder],
    ] {
        Mt::new(&args)
            .dir(dir.path())
            .env("MCPTAPE_DIR", store.path())
            .timeout(Duration::from_secs(20))
            .run()
            .status(64)
            .stderr_contains("is a folder, not a tape");
    }
}

/// A name that is neither the store's tape nor a file in the working folder: "not found" names
/// both places it looked (exit 66), for every command that reads a tape.
#[test]
fn a_tape_found_nowhere_is_not_found_naming_both_places_tried() {
    let dir = tmp();
    let store = tmp();
    let cwd = dir.path().canonicalize().unwrap();
    let want = format!(
        "tape not found: neither {} (the store's tape demo.json) nor {} (a file in the working folder) exists",
        store.path().join("tapes/demo.json.jsonl").display(),
        cwd.join("demo.json").display()
    );
    for args in [
        vec!["show", "demo.json"],
        vec!["play", "demo.json"],
        vec!["verify", "demo.json"],
        vec!["diff", "demo.json", "demo.json"],
        vec!["check", "demo.json", "sh", "-c", "exit 0"],
    ] {
        Mt::new(&args)
            .dir(&cwd)
            .env("MCPTAPE_DIR", store.path())
            .timeout(Duration::from_secs(20))
            .run()
            .status(66)
            .stderr_contains(&want);
    }
}

/// `show` numbers its rows by tape line, the number every error and report gives a message
/// (not by `seq`): a recording with notifications and a stray stdout line, each row's LINE is
/// the line of the file that holds it.
#[test]
fn show_numbers_rows_by_tape_line() {
    let (_dir, tape) = tmp_tape("lines.jsonl");
    let server = crate::record::py(
        "import sys, json\nfor line in sys.stdin:\n    m = json.loads(line)\n    print(json.dumps({'jsonrpc': '2.0', 'method': 'notifications/message', 'params': {'level': 'info', 'data': 'x'}}), flush=True)\n    print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {}}), flush=True)\nprint('a goodbye banner on stdout', flush=True)\n",
        &[],
    );
    let mut c = LineClient::spawn(&record_cmd(&tape, &server));
    c.call(1, "tools/list", json!({}));
    c.call(2, "tools/call", json!({"name": "a", "arguments": {}}));
    c.finish_with(0);
    let in_file: Vec<(u64, Value)> = tape_lines(&tape)
        .into_iter()
        .enumerate()
        .filter(|(_, l)| l["type"] == "msg")
        .map(|(i, l)| (i as u64 + 1, l))
        .collect();
    assert!(in_file.len() >= 6, "{in_file:?}");
    let doc = show_json(&tape);
    let rows = doc["messages"].as_array().unwrap();
    let lines: Vec<u64> = rows.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, in_file.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    assert!(
        in_file
            .iter()
            .any(|(n, l)| *n != l["seq"].as_u64().unwrap()),
        "lines and seqs differ"
    );
    let table = Mt::new(["show"]).arg(&tape).run().success().stdout;
    assert_contains(&table, " LINE ");
    for (n, l) in &in_file {
        let row = table
            .lines()
            .find(|r| r.trim_start().starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("no row for tape line {n}:\n{table}"));
        if let Some(method) = l["method"].as_str() {
            assert_contains(row, method);
        }
    }
}

/// `--server LABEL` that the tape does not have is a usage error naming the labels it has (show,
/// play, diff).
#[test]
fn an_unknown_server_label_names_the_ones_the_tape_has() {
    let (_dir, tape) = tmp_tape("two.jsonl");
    let lines = [
        r#"{"type":"header","format":"mcptape","version":1,"minor":0,"created":"2026-01-01T00:00:00Z","tool":"test"}"#,
        r#"{"type":"server","server":"a","transport":"stdio","command":["x"],"t_us":0}"#,
        r#"{"type":"server","server":"b","transport":"stdio","command":["y"],"t_us":0}"#,
        r#"{"type":"server","server":"model","transport":"model_api","url":"http://127.0.0.1:1","t_us":0}"#,
        r#"{"type":"msg","seq":1,"t_us":0,"server":"a","dir":"c2s","kind":"request","id":1,"method":"ping","msg":{"jsonrpc":"2.0","id":1,"method":"ping"}}"#,
        r#"{"type":"msg","seq":2,"t_us":5,"server":"a","dir":"s2c","kind":"response","id":1,"msg":{"jsonrpc":"2.0","id":1,"result":{}}}"#,
    ];
    std::fs::write(&tape, lines.join("\n") + "\n").unwrap();
    // The labels each command's --server takes: show's model calls are by label (and
    // `show --stats --server model` has that label's rows), play serves an MCP server.
    for (command, has) in [
        (&["show"][..], "a, b, model"),
        (&["show", "--stats"][..], "a, b, model"),
        (&["play"][..], "a, b"),
    ] {
        Mt::new(command)
            .args(["--server", "nope"])
            .arg(&tape)
            .timeout(Duration::from_secs(20))
            .run()
            .status(64)
            .stderr_contains(&format!("no server labelled nope; this tape has: {has}\n"));
    }
    // diff names the tape as well: either may be the one without it; like check, it refuses
    // the model API, so does not list it.
    Mt::new(["diff", "--server", "nope"])
        .arg(&tape)
        .arg(&tape)
        .run()
        .status(64)
        .stderr_contains(&format!(
            "{}: no server labelled nope; this tape has: a, b\n",
            tape.display()
        ));
    // A label it has still works.
    Mt::new(["show", "--server", "b"])
        .arg(&tape)
        .run()
        .success();

    // A tape that declares no server (written by hand, or by an older tool) has the labels of
    // its message lines: those are listed, not "declares no servers".
    let bare = tape.with_file_name("bare.jsonl");
    let lines = [
        lines[0],
        lines[4],
        lines[5],
        r#"{"type":"msg","seq":3,"t_us":9,"server":"b","dir":"c2s","kind":"request","id":1,"method":"ping","msg":{"jsonrpc":"2.0","id":1,"method":"ping"}}"#,
    ];
    std::fs::write(&bare, lines.join("\n") + "\n").unwrap();
    for command in [&["show"][..], &["show", "--stats"], &["play"]] {
        Mt::new(command)
            .args(["--server", "nope"])
            .arg(&bare)
            .timeout(Duration::from_secs(20))
            .run()
            .status(64)
            .stderr_contains("no server labelled nope; this tape has: a, b\n");
    }
    Mt::new(["diff", "--server", "nope"])
        .arg(&bare)
        .arg(&bare)
        .run()
        .status(64)
        .stderr_contains(&format!(
            "{}: no server labelled nope; this tape has: a, b\n",
            bare.display()
        ));
}

/// `ls DIR` lists the tapes kept in any folder, in the same table; other `.jsonl` files there
/// are not tapes and are left out.
#[test]
fn ls_lists_the_tapes_in_a_folder() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    std::fs::write(dir.path().join("events.jsonl"), "{\"a\":1}\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let store = tmp();
    let out = Mt::new(["ls"])
        .arg(dir.path())
        .env("MCPTAPE_DIR", store.path())
        .run()
        .success()
        .stdout_contains("NAME")
        .stdout_contains("demo ");
    assert!(!out.stdout.contains("events"), "{}", out.stdout);
    assert!(!out.stderr.contains("events"), "{}", out.stderr);
    let rows: serde_json::Value = Mt::new(["ls", "--json"])
        .arg(dir.path())
        .env("MCPTAPE_DIR", store.path())
        .run()
        .success()
        .json();
    // The demo writes demo.jsonl and demo-drifted.jsonl; events.jsonl is not a tape.
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{rows}");
    // An empty folder says so; a folder that is not there, or a file, is a usage error.
    Mt::new(["ls"])
        .arg(store.path())
        .run()
        .success()
        .stderr_contains("no tapes in");
    Mt::new(["ls"])
        .arg(store.path().join("nope"))
        .run()
        .status(64)
        .stderr_contains("no such folder");
    Mt::new(["ls"])
        .arg(dir.path().join("demo.jsonl"))
        .run()
        .status(64)
        .stderr_contains("is not a folder");
}

/// lint's suggested `redact` command carries the `--redact` rules lint was given (shell-quoted),
/// so that running it takes out what lint found.
#[test]
fn lint_suggests_a_redact_command_with_the_rules_it_was_given() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let lines = [
        r#"{"type":"header","format":"mcptape","version":1,"minor":0,"created":"2026-01-01T00:00:00Z","tool":"test"}"#,
        r#"{"type":"server","server":"default","transport":"stdio","command":["x"],"t_us":0}"#,
        r#"{"type":"msg","seq":1,"t_us":0,"server":"default","dir":"c2s","kind":"request","id":1,"method":"tools/call","msg":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","arguments":{"badge":"ACME 1234"}}}}"#,
    ];
    std::fs::write(&tape, lines.join("\n") + "\n").unwrap();
    let rule = "re:ACME [0-9]+";
    Mt::new(["lint", "t.jsonl", "--redact", rule])
        .dir(dir.path())
        .run()
        .status(1)
        .stdout_contains("`mcptape redact t.jsonl --redact 're:ACME [0-9]+'` takes them out");
    // Running the suggestion leaves nothing for lint to find.
    Mt::new(["redact", "t.jsonl", "--redact", rule])
        .dir(dir.path())
        .run()
        .success();
    let after = Mt::new(["lint", "t.jsonl", "--redact", rule])
        .dir(dir.path())
        .run();
    assert!(
        !after.stdout.contains("suspected secret"),
        "{}",
        after.stdout
    );
}

/// A corrupt line in the middle of a tape is named as a tape line and a column in it, not with
/// serde's "at line 1 column 16" (which counts within the one line it was given).
#[test]
fn a_corrupt_tape_line_is_named_by_tape_line_and_column() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    std::fs::write(
        &tape,
        concat!(
            r#"{"type":"header","format":"mcptape","version":1,"minor":0,"created":"2026-01-01T00:00:00Z","tool":"t"}"#,
            "\n",
            r#"{"type":"server","server":"default","transport":"stdio","command":["x"],"t_us":0}"#,
            "\n",
            r#"{"type":"end","t_us":1,"messages":0,"exchanges":oops}"#,
            "\n",
            r#"{"type":"end","t_us":2,"messages":0,"exchanges":0}"#,
            "\n"
        ),
    )
    .unwrap();
    for cmd in ["show", "play"] {
        let out = Mt::new([cmd]).arg(&tape).run().status(65);
        assert_contains(&out.stderr, "t.jsonl: tape line 3, column 49: ");
        assert!(!out.stderr.contains(" at line 1 column"), "{}", out.stderr);
    }
}

/// A tape that is a FIFO (or `<(…)`, a pipe): `verify` and `lint` read a tape once, front to
/// back, and read it from a pipe as from a file; the other readers read a tape more than once
/// and by offset, and refuse one that is not a regular file, saying so, as a usage error like
/// a folder (64). `show` said "tape line 6: a second header line" (65, bad data: it read the
/// pipe twice) and `play` and `diff` waited forever for a second writer; a bare name that is a
/// FIFO in the working folder was "not found: … nor ./NAME exists".
#[test]
fn a_tape_that_is_a_fifo_is_read_once_by_verify_and_lint_and_refused_by_the_rest() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let mut c = LineClient::spawn(&record_cmd(&tape, &demo_server("healthy")));
    c.initialize();
    c.finish_with(0);
    let fifo = dir.path().join("feed");
    let c_path = std::ffi::CString::new(s(&fifo)).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // A writer for each run; killed after it (a refused run never opens the FIFO).
    let feed = || {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec cat '{}' > '{}'", s(&tape), s(&fifo)))
            .spawn()
            .unwrap()
    };
    for args in [
        vec!["show".to_string(), s(&fifo)],
        vec!["play".to_string(), s(&fifo)],
        vec!["diff".to_string(), s(&tape), s(&fifo)],
        vec!["show".to_string(), "feed".to_string()],
    ] {
        let mut writer = feed();
        Mt::new(&args)
            .dir(dir.path())
            .timeout(Duration::from_secs(20))
            .run()
            .status(64)
            .stderr_contains("is a FIFO")
            .stderr_contains("not a regular file");
        let _ = writer.kill();
        let _ = writer.wait();
    }
    for (cmd, says) in [("verify", "intact"), ("lint", "clean")] {
        let mut writer = feed();
        Mt::new([cmd])
            .arg(&fifo)
            .timeout(Duration::from_secs(20))
            .run()
            .success()
            .stdout_contains(says);
        assert!(writer.wait().unwrap().success());
    }
}

/// The exit code a command's `--help` gives for what `says` names: the code that begins the
/// clause of its "Exit codes:" text (clauses are separated by "; ") that holds `says`.
fn help_code_for(cmd: &str, says: &str) -> Option<String> {
    let help = Mt::new([cmd, "--help"]).run().success().stdout;
    let codes = help.split("Exit codes:").nth(1)?;
    let flat = codes.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.split("; ")
        .find(|clause| clause.contains(says))
        .and_then(|clause| clause.split(' ').next())
        .map(str::to_string)
}

/// `redact --help` said a symbolic link at `TAPE.bak` exits 64 ("a backup that is a link");
/// redact refuses it with 74, as `record` and `check --update` refuse a link at their backup
/// (README: the tape could not be written or replaced). Its help now names the code it exits
/// with.
#[cfg(unix)]
#[test]
fn redact_help_gives_the_code_a_link_at_the_backup_exits_with() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    let tape = dir.path().join("demo.jsonl");
    let before = std::fs::read(&tape).unwrap();
    let victim = dir.path().join("victim");
    std::os::unix::fs::symlink(&victim, dir.path().join("demo.jsonl.bak")).unwrap();
    let out = Mt::new(["redact"])
        .arg(&tape)
        .run()
        .stderr_contains("is a symbolic link; refusing to write through it");
    assert!(!victim.exists(), "nothing written through the link");
    assert!(
        std::fs::read(&tape).unwrap() == before,
        "the tape untouched"
    );
    assert_eq!(
        help_code_for("redact", "link"),
        Some(out.code().to_string()),
        "`redact --help` gives another code for a link at TAPE.bak than redact exits with"
    );
}

/// `verify` and `lint` exit 65 for a file that is not a tape and for a tape of a newer format
/// version, as every reader does; their `--help` left 65 out.
#[test]
fn verify_and_lint_exit_65_for_what_is_not_a_tape_and_say_so_in_their_help() {
    let dir = tmp();
    let not_a_tape = dir.path().join("nt.jsonl");
    std::fs::write(&not_a_tape, "{\"hello\":1}\n").unwrap();
    let future = dir.path().join("future.jsonl");
    std::fs::write(&future, "{\"type\":\"header\",\"format\":\"mcptape\",\"version\":2,\"created\":\"x\",\"tool\":\"mcptape 9\"}\n").unwrap();
    for cmd in ["verify", "lint"] {
        Mt::new([cmd])
            .arg(&not_a_tape)
            .run()
            .status(65)
            .stderr_contains("not an mcptape tape");
        Mt::new([cmd])
            .arg(&future)
            .run()
            .status(65)
            .stderr_contains("tape format version 2 is newer");
        for says in ["not a tape", "newer format version"] {
            assert_eq!(
                help_code_for(cmd, says).as_deref(),
                Some("65"),
                "`{cmd} --help` gives no 65 for {says:?}"
            );
        }
    }
}

/// `show`'s table padded every row to the LATENCY column, so a row without a latency (a
/// notification, a request with no answer) ended in spaces.
#[test]
fn show_rows_end_without_trailing_spaces() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    let out = Mt::new(["show"])
        .arg(dir.path().join("demo.jsonl"))
        .run()
        .success();
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("LINE"))
        .collect();
    assert!(
        rows.iter().any(|r| r.contains("notification")),
        "a row without a latency is shown:\n{}",
        out.stdout
    );
    let padded: Vec<&&str> = rows.iter().filter(|r| r.ends_with(' ')).collect();
    assert!(
        padded.is_empty(),
        "rows ending in spaces: {padded:#?}\n{}",
        out.stdout
    );
}
