//! `mcptape record` edge cases, with real processes over real pipes: each test checks what the
//! client saw and what the tape holds.

use crate::harness::*;
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// `python -u -c SCRIPT ARGS…` as a server command.
pub(crate) fn py(script: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec![python(), "-u".into(), "-c".into(), script.into()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// `sh -c SCRIPT` as a server command.
pub(crate) fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

/// `mcptape record --tape TAPE FLAGS… -- SERVER…`, not started.
pub(crate) fn record_mt(tape: &Path, flags: &[&str], server: &[String]) -> Mt {
    Mt::new(["record", "--tape"])
        .arg(tape)
        .args(flags)
        .arg("--")
        .args(server)
}

/// `mcptape record --tape TAPE FLAGS… -- SERVER…` as a line client.
pub(crate) fn record(tape: &Path, flags: &[&str], server: &[String]) -> LineClient {
    record_mt(tape, flags, server).spawn()
}

/// `mcptape record --tape TAPE -- sh -c SCRIPT` as a line client.
pub(crate) fn record_sh(tape: &Path, script: &str) -> LineClient {
    record(tape, &[], &sh(script))
}

/// Waits for the child to exit without closing its stdin first; returns (status, stderr).
fn wait_exit(c: LineClient) -> (std::process::ExitStatus, String) {
    // `finish` closes stdin, then waits: the child has exited (or is exiting) already, so closing
    // stdin changes nothing.
    c.finish()
}

/// Requires record's exit `status` to be the server's exit `code`, and the server's stderr
/// (`said`) to have reached record's `stderr`.
#[track_caller]
pub(crate) fn assert_server_exit_passed_on(
    status: std::process::ExitStatus,
    stderr: &str,
    code: i32,
    said: &str,
) {
    assert_eq!(
        status.code(),
        Some(code),
        "the server's exit code: {stderr}"
    );
    assert!(
        stderr.contains(said),
        "the server's stderr reaches ours: {stderr}"
    );
}

fn end_line(tape: &Path) -> Value {
    let lines = tape_lines(tape);
    assert_eq!(lines[0]["type"], "header", "first tape line");
    assert_eq!(lines[1]["type"], "server", "second tape line");
    let last = lines.last().expect("tape lines").clone();
    assert_eq!(
        last["type"], "end",
        "the tape is closed with an end line: {last}"
    );
    assert_eq!(lines.iter().filter(|l| l["type"] == "end").count(), 1);
    last
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Replies to each line with the hex of the exact bytes received: id 1 with a CRLF line, the
/// others with invalid UTF-8 inside the message. Starts with a non-JSON line on stdout.
const HEX_ECHO: &str = r##"
import sys, re
out = sys.stdout.buffer
out.write(b"server banner: not json\n"); out.flush()
while True:
    raw = sys.stdin.buffer.readline()
    if not raw:
        break
    i = re.search(rb'"id":(\d+)', raw).group(1)
    got = raw.hex().encode()
    if i == b"1":
        out.write(b'{"jsonrpc":"2.0","id":1,"result":{"got":"' + got + b'"}}\r\n')
    else:
        out.write(b'{"jsonrpc":"2.0","id":' + i + b',"result":{"got":"' + got + b'","bad":"\xff\xfe"}}\n')
    out.flush()
"##;

#[test]
fn bytes_are_forwarded_unchanged_both_ways() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &py(HEX_ECHO, &[]));

    let banner = c.recv_raw(Duration::from_secs(30)).expect("the banner");
    assert_eq!(banner, b"server banner: not json\n");

    let crlf = br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}}"#.to_vec();
    let mut sent1 = crlf.clone();
    sent1.extend_from_slice(b"\r\n");
    c.send_raw(&sent1);
    let got1 = c.recv_raw(Duration::from_secs(30)).expect("answer 1");
    let want1 = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"got\":\"{}\"}}}}\r\n",
        hex(&sent1)
    );
    assert_eq!(
        String::from_utf8_lossy(&got1),
        want1,
        "the server got the CRLF line exactly, the client its CRLF answer"
    );

    let bad =
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"echo\",\"params\":{\"s\":\"\xff\xc3(\"}}"
            .to_vec();
    let mut sent2 = bad.clone();
    sent2.push(b'\n');
    c.send_raw(&sent2);
    let got2 = c.recv_raw(Duration::from_secs(30)).expect("answer 2");
    let mut want2 = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"got\":\"{}\",\"bad\":\"",
        hex(&sent2)
    )
    .into_bytes();
    want2.extend_from_slice(b"\xff\xfe\"}}\n");
    assert_eq!(got2, want2, "invalid UTF-8 forwarded exactly both ways");

    let stderr = c.finish_with(0);
    assert_contains(&stderr, "mcptape: recorded 5 messages");

    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 5, "{msgs:#?}");
    let seqs: Vec<u64> = msgs.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    // The banner: not JSON, kept as text.
    assert_eq!(
        (msgs[0]["dir"].as_str(), msgs[0]["kind"].as_str()),
        (Some("s2c"), Some("not_json"))
    );
    assert_eq!(msgs[0]["text"], "server banner: not json");
    assert!(msgs[0].get("msg").is_none());
    // The CRLF request and answer: JSON, flagged crlf, stored verbatim.
    assert_eq!(
        (msgs[1]["dir"].as_str(), msgs[1]["kind"].as_str()),
        (Some("c2s"), Some("request"))
    );
    assert_eq!(msgs[1]["id"], 1);
    assert_eq!(msgs[1]["method"], "echo");
    assert_eq!(msgs[1]["crlf"], true);
    assert_eq!(
        msgs[1]["msg"],
        json!({"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}})
    );
    assert_eq!(
        (msgs[2]["dir"].as_str(), msgs[2]["kind"].as_str()),
        (Some("s2c"), Some("response"))
    );
    assert_eq!(msgs[2]["crlf"], true);
    assert_eq!(msgs[2]["msg"]["result"]["got"], hex(&sent1));
    let text = std::fs::read_to_string(&tape).unwrap();
    assert!(
        text.contains(&format!(
            ",\"msg\":{},\"h\":\"",
            String::from_utf8(crlf).unwrap()
        )),
        "verbatim request on the tape:\n{text}"
    );
    // Invalid UTF-8 both ways: not_json, base64 of the exact line.
    assert_eq!(
        (msgs[3]["dir"].as_str(), msgs[3]["kind"].as_str()),
        (Some("c2s"), Some("not_json"))
    );
    assert_eq!(msgs[3]["b64"], b64(&bad));
    assert!(
        msgs[3]["problem"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid UTF-8"),
        "{}",
        msgs[3]
    );
    assert_eq!(
        (msgs[4]["dir"].as_str(), msgs[4]["kind"].as_str()),
        (Some("s2c"), Some("not_json"))
    );
    assert_eq!(msgs[4]["b64"], b64(&want2[..want2.len() - 1]));

    let end = end_line(&tape);
    assert_eq!(
        (
            end["messages"].as_u64(),
            end["c2s"].as_u64(),
            end["s2c"].as_u64()
        ),
        (Some(5), Some(2), Some(3))
    );
    assert_eq!(end["raw"], 3);
    assert_eq!(
        end["exchanges"], 1,
        "only the CRLF call was a JSON exchange"
    );
    assert_eq!(end["exit"], json!({"code": 0}));
    assert_eq!(end["reason"], "the client closed stdin");
}

#[test]
fn server_stderr_passes_through_and_its_exit_code_is_ours() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record_sh(
        &tape,
        r#"read -r line; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{}}'; echo 'server says: oops' >&2; exit 3"#,
    );
    let r = c.call(1, "tools/list", json!({}));
    assert_eq!(r, json!({"jsonrpc":"2.0","id":1,"result":{}}));
    let (status, stderr) = wait_exit(c);
    assert_server_exit_passed_on(status, &stderr, 3, "server says: oops\n");
    assert_contains(&stderr, "mcptape: recorded 2 messages (1 exchange)");
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({"code": 3}));
    assert_eq!(end["exchanges"], 1);
}

#[test]
fn a_server_killed_by_a_signal_gives_128_plus_n() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record_sh(&tape, r#"read -r line; echo 'dying' >&2; kill -KILL $$"#);
    c.send(&json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
    assert_eq!(
        c.recv_raw(Duration::from_secs(30)),
        None,
        "no answer, just EOF"
    );
    let (status, stderr) = wait_exit(c);
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    assert_contains(&stderr, "dying");
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({"signal": 9}));
}

#[test]
fn a_server_that_exits_mid_call_leaves_a_closed_tape_with_the_request() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record_sh(&tape, "read -r line; exit 5");
    let req = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}});
    c.send(&req);
    assert_eq!(
        c.recv_raw(Duration::from_secs(30)),
        None,
        "the server died without answering: EOF"
    );
    // mcptape exits with the server, though the client still holds stdin open.
    c.wait_exit(Duration::from_secs(30));
    let (status, stderr) = wait_exit(c);
    assert_eq!(status.code(), Some(5), "{stderr}");
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 1, "{msgs:#?}");
    assert_eq!(msgs[0]["msg"], req);
    assert_eq!(msgs[0]["kind"], "request");
    let end = end_line(&tape);
    assert_eq!(
        (end["messages"].as_u64(), end["exchanges"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(end["exit"], json!({"code": 5}));
    assert_eq!(end["reason"], "the server exited");
    let doc = show_json(&tape);
    assert_eq!(doc["warnings"], json!([]), "a well-formed tape");
}

/// Answers every request with `{"ok": true}`; optionally says goodbye and exits 0 on SIGTERM.
fn ok_server(handle_term: bool) -> Vec<String> {
    let script = format!(
        r##"
import sys, json, signal
if {handle_term}:
    def bye(*a):
        sys.stdout.write(json.dumps({{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"bye"}}}}) + "\n")
        sys.stdout.flush()
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    m = json.loads(line)
    if "id" in m and "method" in m:
        sys.stdout.write(json.dumps({{"jsonrpc":"2.0","id":m["id"],"result":{{"ok":True}}}}) + "\n")
        sys.stdout.flush()
"##,
        handle_term = if handle_term { "True" } else { "False" }
    );
    py(&script, &[])
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill {pid} {sig}");
}

/// Started with SIGCHLD ignored (a parent can leave it so, and exec keeps it), the kernel would
/// reap the server itself and `wait` would fail with ECHILD: its exit status, which record
/// exits with, lost (mcptape exited 70, "internal error"). mcptape puts SIGCHLD back to its
/// default at start, so the session goes as any other: the server's exit code passed on and on
/// the tape's closing line, and the server itself started with SIGCHLD at its default.
#[test]
fn started_with_sigchld_ignored_record_still_passes_on_the_servers_exit_code() {
    use std::os::unix::process::CommandExt as _;
    let (_dir, tape) = tmp_tape("t.jsonl");
    // The server says whether it was started with SIGCHLD ignored, answers one request and
    // exits 3.
    let server = vec![
        s(python()),
        "-c".to_string(),
        r#"import json, signal, sys
sys.stdin.readline()
ignored = signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN
print(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"ignored": ignored}}), flush=True)
sys.exit(3)"#
            .to_string(),
    ];
    let mut cmd = record_mt(&tape, &[], &server).command();
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut c = LineClient::spawn_cmd(cmd);
    let r = c.call(1, "tools/list", json!({}));
    assert_eq!(
        r["result"]["ignored"], false,
        "the server ignores SIGCHLD: {r}"
    );
    let (status, stderr) = wait_exit(c);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("internal error"), "{stderr}");
    assert_contains(&stderr, "mcptape: recorded 2 messages (1 exchange)");
    assert_eq!(end_line(&tape)["exit"], json!({"code": 3}));
    Mt::new(["verify"]).arg(&tape).run().success();
}

#[test]
fn sigterm_is_forwarded_and_a_server_that_dies_of_it_gives_143() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &ok_server(false));
    let r1 = c.call(1, "tools/list", json!({}));
    let r2 = c.call(2, "tools/call", json!({"name": "x"}));
    assert_eq!(r2["result"], json!({"ok": true}));
    kill(c.pid(), libc::SIGTERM);
    assert_eq!(
        c.recv_raw(Duration::from_secs(30)),
        None,
        "stdout closes when the server is gone"
    );
    let (status, stderr) = wait_exit(c);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    let msgs = tape_msgs(&tape);
    let bodies: Vec<&Value> = msgs.iter().map(|m| &m["msg"]).collect();
    assert_eq!(bodies.len(), 4, "{msgs:#?}");
    assert_eq!(bodies[1], &r1);
    assert_eq!(bodies[3], &r2);
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({"signal": libc::SIGTERM}));
    assert_eq!(end["reason"], "SIGTERM forwarded to the server");
    assert_eq!(end["messages"], 4);
}

#[test]
fn sigterm_to_a_server_that_handles_it_gives_the_servers_exit_code() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &ok_server(true));
    let r1 = c.call(1, "tools/call", json!({"name": "x"}));
    assert_eq!(r1["result"], json!({"ok": true}));
    kill(c.pid(), libc::SIGTERM);
    // The server's last words still reach the client and the tape.
    let bye = c.recv();
    assert_eq!(bye["params"]["data"], "bye");
    assert_eq!(c.recv_raw(Duration::from_secs(30)), None);
    let (status, stderr) = wait_exit(c);
    assert_eq!(
        status.code(),
        Some(0),
        "record exits with the server's own code: {stderr}"
    );
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 3, "{msgs:#?}");
    assert_eq!(msgs[2]["msg"], bye);
    assert_eq!(msgs[2]["kind"], "notification");
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({"code": 0}));
    assert_eq!(end["reason"], "SIGTERM forwarded to the server");
}

#[test]
fn after_sigkill_the_tape_reads_up_to_the_last_forwarded_message() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "5");
    kill(c.pid(), libc::SIGKILL);
    let (status, _) = wait_exit(c);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );

    let lines = tape_lines(&tape);
    assert!(
        lines.iter().all(|l| l["type"] != "end"),
        "no end line after SIGKILL"
    );
    let msgs = tape_msgs(&tape);
    assert_eq!(
        msgs.len(),
        5,
        "initialize, its answer, initialized, the call, its answer: {msgs:#?}"
    );
    assert_eq!(
        msgs[4]["msg"], r,
        "the last message forwarded is on the tape"
    );

    let doc = show_json(&tape);
    let warnings = doc["warnings"].to_string();
    assert_contains(&warnings, "no closing line");
    assert_eq!(doc["messages"].as_array().unwrap().len(), 5);
    assert_eq!(doc["exchanges"], 2);
    let table = Mt::new(["show"]).arg(&tape).run().stdout;
    assert!(
        table.contains("(no closing line)") && table.contains("tools/call add"),
        "{table}"
    );
}

/// A second recording of a tape, started while the first still runs, is refused: the two would
/// each take the other's place and backup, and on ext4, XFS and tmpfs cutting the first one's
/// file under its map (src/tape/sink.rs) killed it with SIGBUS. The first session goes on and
/// its recording replaces the tape.
#[test]
fn a_second_recording_of_a_tape_being_recorded_is_refused_and_the_first_goes_on() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let add = |c: &mut LineClient, id: i64, a: i64| {
        let r = c.call(
            id,
            "tools/call",
            json!({"name": "add", "arguments": {"a": a, "b": 1}}),
        );
        assert_eq!(
            r["result"]["content"][0]["text"],
            (a + 1).to_string(),
            "{r}"
        );
    };
    // A tape there already: a recording is written beside it, to TAPE.new.
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    add(&mut c, 1, 1);
    c.finish_with(0);
    let mut first = record(&tape, &[], &demo_server("healthy"));
    first.initialize();
    add(&mut first, 1, 10);
    let second = record(&tape, &[], &demo_server("healthy"));
    let stderr = second.finish_with(74);
    assert_contains(&stderr, "is being recorded by another mcptape right now");
    for id in 2..50 {
        add(&mut first, id, 100 + id);
    }
    let stderr = first.finish_with(0);
    assert_contains(&stderr, "replaced");
    let calls = tape_msgs(&tape)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(calls, 49, "the first recording is the tape");
}

/// The same with no tape there before: the first recording writes the tape in place, and the
/// second is refused all the same (it took the first's tape for an old one and replaced it, the
/// first recording left only at `TAPE.bak`).
#[test]
fn a_second_recording_of_a_new_tape_being_recorded_is_refused_and_the_first_goes_on() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut first = record(&tape, &[], &demo_server("healthy"));
    first.initialize();
    let r = first.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 1}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "2", "{r}");
    let second = record(&tape, &[], &demo_server("healthy"));
    let stderr = second.finish_with(74);
    assert_contains(&stderr, "is being recorded by another mcptape right now");
    let stderr = first.finish_with(0);
    assert!(!stderr.contains("replaced"), "{stderr}");
    assert!(!beside(&tape, ".bak").exists(), "nothing was replaced");
    assert!(
        !beside(&tape, ".new").exists(),
        "nothing was written beside"
    );
    let calls = tape_msgs(&tape)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(calls, 1, "the first recording is the tape");
}

/// An empty file at a tape's path is no tape yet (src/tape/place.rs): a first recording that has
/// opened and locked it but not written its header, or one that crashed before it did. While a
/// writer holds it (its `flock`, taken here by the test as a recorder takes it) a recording of
/// that path is refused, as one of a tape being recorded is, and nothing is written to it or
/// beside it; once the writer is gone, the next recording is written in place, as on a path with
/// no file: no `TAPE.new`, no `TAPE.bak`, no word of an unfinished recording, made private.
#[test]
fn an_empty_tape_file_held_by_another_writer_is_refused_and_once_free_recorded_in_place() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::io::AsRawFd;
    let (_dir, tape) = tmp_tape("t.jsonl");
    let writer = std::fs::File::create(&tape).unwrap();
    std::fs::set_permissions(&tape, std::fs::Permissions::from_mode(0o644)).unwrap();
    // SAFETY: a valid descriptor; flock touches nothing else.
    let locked = unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());

    let stderr = record(&tape, &[], &demo_server("healthy")).finish_with(74);
    assert_contains(
        &stderr,
        &format!(
            "{0} is being recorded by another mcptape right now (into {0})",
            tape.display()
        ),
    );
    assert_eq!(read(&tape), b"", "the writer's file is left empty");
    let mode = std::fs::metadata(&tape).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644, "the writer's file is left as it was");
    for suffix in [".new", ".bak"] {
        assert!(!beside(&tape, suffix).exists(), "{suffix} written");
    }

    // The writer is gone before it wrote a line: its empty file is what a crash leaves.
    drop(writer);
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "5", "{r}");
    let stderr = c.finish_with(0);
    for said in ["replaced", "kept as it was", "did not finish"] {
        assert!(!stderr.contains(said), "{said:?}: {stderr}");
    }
    for suffix in [".new", ".bak"] {
        assert!(!beside(&tape, suffix).exists(), "{suffix} written");
    }
    let mode = std::fs::metadata(&tape).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the tape is private");
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.last().expect("messages")["msg"], r, "{msgs:#?}");
    assert_eq!(end_of(&tape)["exchanges"], 2);
}

/// A tape path that is not a regular file (a FIFO here; a character device such as `/dev/null`
/// takes the same path) is written through as it is: its mode is left alone (it was made 0600)
/// and the recording ends with the server's exit code (the file's sync failed with "Invalid
/// argument", exit 74, after the whole tape had gone through).
#[test]
fn a_tape_path_that_is_a_fifo_is_written_through_and_left_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp();
    let fifo = dir.path().join("fifo.jsonl");
    let c_path = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o644)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let mut c = record(&fifo, &[], &demo_server("healthy"));
    c.initialize();
    c.call(1, "tools/list", json!({}));
    let stderr = c.finish_with(0);
    let got = text(&reader.join().unwrap());
    let mode = std::fs::symlink_metadata(&fifo)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o7777,
        0o644,
        "the FIFO's mode is kept; stderr:\n{stderr}"
    );
    assert!(
        got.lines().next().unwrap().contains(r#""type":"header""#),
        "{got}"
    );
    assert!(
        got.lines().last().unwrap().starts_with(r#"{"type":"end""#),
        "the whole tape went through the FIFO: {got}"
    );
}

/// While a recording runs, the tape ends in newline padding where the writer maps it (ext4,
/// XFS or tmpfs: the test directory's ext4 here), and on its last line with `MCPTAPE_NO_MAP=1`
/// or on another file system; both close on one newline and read the same.
#[test]
#[allow(clippy::unnecessary_cast)] // `f_type` and the magic numbers differ in type between architectures
fn a_live_tape_is_padded_unless_mapping_is_off() {
    let (dir, tape) = tmp_tape("t.jsonl");
    let mapped_here = {
        let c = std::ffi::CString::new(s(dir.path())).unwrap();
        // SAFETY: plain data, filled in by the call.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a `statfs` that outlives the call.
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut fs) }, 0);
        let kind = fs.f_type as i64;
        [
            libc::EXT4_SUPER_MAGIC,
            libc::XFS_SUPER_MAGIC,
            libc::TMPFS_MAGIC,
        ]
        .map(|m| m as i64)
        .contains(&kind)
    };
    for no_map in ["", "1"] {
        let mut argv = vec![
            s(bin()),
            "record".into(),
            "--tape".into(),
            s(&tape),
            "--".into(),
        ];
        argv.extend(demo_server("healthy"));
        let mut cmd = command(&argv);
        cmd.env("MCPTAPE_NO_MAP", no_map);
        let mut c = LineClient::spawn_cmd(cmd);
        c.initialize();
        let r = c.call(
            1,
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
        );
        assert_eq!(r["result"]["content"][0]["text"], "5");
        let live = std::fs::read(&tape).unwrap();
        let padding = live.len() - live.trim_ascii_end().len();
        if no_map.is_empty() && mapped_here {
            assert!(padding > 1 && live.len() % 65536 == 0, "padded: {padding}");
        } else {
            assert_eq!(padding, 1, "ends on its last line");
        }
        assert_eq!(tape_msgs(&tape).len(), 5, "read while live");
        c.finish_with(0);
        assert_eq!(tape_msgs(&tape).len(), 5);
        std::fs::remove_file(&tape).unwrap();
    }
}

#[test]
fn closing_stdin_gives_the_server_eof() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let server = py(
        "import sys\nsys.stdin.read()\nsys.stderr.write('server saw EOF\\n')\nsys.exit(4)\n",
        &[],
    );
    let c = record(&tape, &["--grace", "30"], &server);
    let stderr = c.finish_with(4);
    assert_contains(&stderr, "server saw EOF");
    let end = end_line(&tape);
    assert_eq!(end["reason"], "the client closed stdin");
    assert_eq!(end["exit"], json!({"code": 4}));
}

/// Records the Python server `script` with `--grace SECS` and closes stdin at once; requires
/// record to exit as the server did, killed by `signal`. Returns record's stderr and the end line.
fn stopped_after_grace(script: &str, secs: &str, signal: i32) -> (String, Value) {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let c = record(&tape, &["--grace", secs], &py(script, &[]));
    let (status, stderr) = c.finish();
    assert_eq!(status.code(), Some(128 + signal), "{stderr}");
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({ "signal": signal }));
    (stderr, end)
}

#[test]
fn a_server_that_ignores_eof_is_terminated_after_the_grace_period() {
    let (stderr, end) = stopped_after_grace(
        "import sys, time\nsys.stdin.read()\nsys.stderr.write('server saw EOF\\n')\ntime.sleep(120)\n",
        "0.2",
        libc::SIGTERM,
    );
    assert_contains(&stderr, "server saw EOF");
    assert_eq!(
        end["reason"],
        "the server did not exit within the grace period after stdin closed: SIGTERM"
    );
}

#[test]
fn a_server_that_ignores_eof_and_sigterm_is_killed() {
    let (_, end) = stopped_after_grace(
        "import sys, time, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nsys.stdin.read()\ntime.sleep(120)\n",
        "0.1",
        libc::SIGKILL,
    );
    assert_eq!(
        end["reason"],
        "the server did not exit after SIGTERM: SIGKILL"
    );
}

/// A server that answers, closes its stdout and keeps running (stdin open on both sides): the
/// client gets EOF at once, while the server still runs; then the server gets the grace period
/// and SIGTERM. (The client waited until the process exited: 120 s here.)
#[test]
fn a_server_that_closes_stdout_but_keeps_running_gives_the_client_eof_at_once() {
    let (dir, tape) = tmp_tape("t.jsonl");
    let pidfile = dir.path().join("pid");
    let script = "import os, sys, time\nsys.stdin.readline()\nsys.stdout.write('{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\\n')\nsys.stdout.flush()\nos.close(1)\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(120)\n";
    let mut c = record(&tape, &["--grace", "4"], &py(script, &[&s(&pidfile)]));
    let answer = c.call(1, "ping", json!({}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert!(
        c.eof_within(Duration::from_secs(30)),
        "the client got no EOF while the server kept running"
    );
    let start = std::time::Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .filter(|p| !p.is_empty())
        {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server wrote no pid"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the server still ran when the client got its EOF"
    );
    // stdin still open: the grace period, then SIGTERM.
    c.wait_exit(Duration::from_secs(30));
    let (status, stderr) = c.finish();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    let end = end_line(&tape);
    assert_eq!(
        end["reason"],
        "the server closed its stdout and did not exit within the grace period: SIGTERM"
    );
    assert_eq!(end["messages"], 2, "{end}");
}

/// Reads one request line, saves its exact bytes to argv[1], answers with a result of `size`
/// bytes of `y`; then the same once more (for a second request).
const BIG: &str = r##"
import sys
size = int(sys.argv[2])
for n in range(2):
    line = sys.stdin.buffer.readline()
    if not line:
        break
    with open(sys.argv[1] + str(n), "wb") as f:
        f.write(line)
    i = str(n + 1).encode()
    sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":' + i + b',"result":{"blob":"' + b"y" * size + b'"}}\n')
    sys.stdout.buffer.flush()
"##;

const MIB16: usize = 16 * 1024 * 1024;

pub(crate) fn big_request(id: u64) -> Vec<u8> {
    let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"store","arguments":{{"blob":""#).into_bytes();
    line.extend(std::iter::repeat_n(b'x', MIB16));
    line.extend_from_slice(b"\"}}}\n");
    line
}

pub(crate) fn big_response(id: u64) -> Vec<u8> {
    let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"blob":""#).into_bytes();
    line.extend(std::iter::repeat_n(b'y', MIB16));
    line.extend_from_slice(b"\"}}\n");
    line
}

/// Two 16 MiB calls through record; returns the tape's raw lines.
pub(crate) fn big_session(dir: &Path, flags: &[&str]) -> Vec<Vec<u8>> {
    let tape = dir.join("t.jsonl");
    let seen = dir.join("seen");
    let mut c = record(&tape, flags, &py(BIG, &[&s(&seen), &MIB16.to_string()]));
    for id in 1..=2u64 {
        let req = big_request(id);
        c.send_raw(&req);
        let got = c
            .recv_raw(Duration::from_secs(120))
            .expect("a 16 MiB answer");
        assert!(
            got == big_response(id),
            "answer {id} forwarded intact ({} bytes)",
            got.len()
        );
        let at_server = std::fs::read(format!("{}{}", seen.display(), id - 1)).unwrap();
        assert!(
            at_server == req,
            "request {id} reached the server intact ({} bytes)",
            at_server.len()
        );
    }
    c.finish_with(0);
    raw_lines(&tape)
}

/// The four messages of [`big_session`], in order, with their direction.
fn big_messages() -> [(Vec<u8>, &'static str); 4] {
    [
        (big_request(1), "c2s"),
        (big_response(1), "s2c"),
        (big_request(2), "c2s"),
        (big_response(2), "s2c"),
    ]
}

/// Requires `line` to be a tape's end line with `count` (`exchanges`, `messages`) at `n` and
/// `raw` at `raw`.
#[track_caller]
fn assert_end_line(line: &[u8], count: &str, n: u64, raw: u64) {
    let end: Value = serde_json::from_slice(line).expect("the end line is JSON");
    assert_eq!(
        (
            end["type"].as_str(),
            end[count].as_u64(),
            end["raw"].as_u64()
        ),
        (Some("end"), Some(n), Some(raw)),
        "{end}"
    );
}

#[test]
fn sixteen_mib_messages_each_way_are_forwarded_and_recorded_verbatim() {
    let dir = tmp();
    let lines = big_session(dir.path(), &[]);
    assert_eq!(lines.len(), 2 + 4 + 1, "header, server, 4 messages, end");
    for (i, (want, dir)) in big_messages().into_iter().enumerate() {
        let line = &lines[2 + i];
        // The message is spliced in verbatim, followed only by the chain hash.
        let mut tail = b",\"msg\":".to_vec();
        tail.extend_from_slice(&want[..want.len() - 1]);
        tail.extend_from_slice(b",\"h\":\"");
        let at = line.len() - (64 + 2) - tail.len();
        assert_eq!(
            &line[at..at + tail.len()],
            &tail[..],
            "message {i} recorded verbatim"
        );
        let head: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(head["dir"], dir);
        assert!(
            head["kind"] == "request" || head["kind"] == "response",
            "{}",
            head["kind"]
        );
    }
    assert_end_line(&lines[6], "exchanges", 2, 0);
}

#[test]
fn messages_over_max_message_are_recorded_as_oversize_and_forwarded_intact() {
    let dir = tmp();
    let lines = big_session(dir.path(), &["--max-message", "1048576"]);
    assert_eq!(lines.len(), 7);
    for (i, (want, dir)) in big_messages().into_iter().enumerate() {
        let m: Value = serde_json::from_slice(&lines[2 + i]).unwrap();
        assert_eq!(m["kind"], "oversize", "message {i}");
        assert_eq!(m["dir"], dir);
        assert_eq!(
            m["len"].as_u64(),
            Some(want.len() as u64 - 1),
            "length without the newline"
        );
        // The head of the line, cut before the string still open at byte 256 (a secret cut in
        // two there would match no rule).
        let head = &want[..256];
        let open = head.iter().rposition(|&b| b == b'"').unwrap();
        assert_eq!(m["b64"], b64(&head[..open]), "the head of the line");
        assert!(m.get("msg").is_none());
    }
    assert_end_line(&lines[6], "messages", 4, 4);
}

/// A banner on stdout that is not JSON, a line that is JSON but no JSON-RPC message, then
/// `initialize` and every `tools/call` answered (a call with a text of `argv[1]` bytes).
const BANNER_AND_BIG_ANSWER: &str = r##"
import sys, json
sys.stdout.write("server banner: not json\n")
sys.stdout.write('{"hello": 1}\n')
sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    r = {}
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "big", "version": "1"}}
    elif m["method"] == "tools/call":
        r = {"content": [{"type": "text", "text": "A" * int(sys.argv[1])}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"##;

/// record's summary called a JSON answer over `--max-message` a "non-JSON line" (its `raw`
/// count is every line that is not a JSON-RPC message: not JSON, JSON but no message, and
/// oversize). It names each for what it is; the tape's `end` line keeps `raw` as documented.
#[test]
fn the_summary_names_a_line_over_max_message_for_what_it_is() {
    let (_dir, tape) = tmp_tape("big.jsonl");
    let mut c = record(
        &tape,
        &["--max-message", "3000"],
        &py(BANNER_AND_BIG_ANSWER, &["4000"]),
    );
    let banner = c.recv_raw(Duration::from_secs(30)).expect("the banner");
    assert_eq!(banner, b"server banner: not json\n");
    let hello = c.recv_raw(Duration::from_secs(30)).expect("the JSON line");
    assert_eq!(hello, b"{\"hello\": 1}\n");
    c.initialize();
    let answer = c.call(1, "tools/call", json!({"name": "big", "arguments": {}}));
    assert_eq!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(4000),
        "forwarded whole"
    );
    let stderr = c.finish_with(0);
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("mcptape: recorded "))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"));
    for says in [
        "1 non-JSON line",
        "1 JSON line that is not a JSON-RPC message",
        "1 line over --max-message taped as its length and first bytes only",
    ] {
        assert!(summary.contains(says), "{says:?} not in: {summary}");
    }
    assert!(!summary.contains("non-JSON lines"), "{summary}");
    let kinds: Vec<Value> = tape_msgs(&tape).iter().map(|m| m["kind"].clone()).collect();
    for kind in ["not_json", "invalid", "oversize"] {
        assert_eq!(
            kinds.iter().filter(|k| *k == kind).count(),
            1,
            "{kind}: {kinds:?}"
        );
    }
    let end = end_line(&tape);
    assert_eq!(
        end["raw"], 3,
        "every line that is not a JSON-RPC message: {end}"
    );
}

/// Answers `initialize`, and every `tools/call` with a text of 5,000 bytes: the id before the
/// result, or with `argv[1]` = `late-id`, the result first and the id after it.
const BIG_ANSWER_ID_FIRST_OR_LATE: &str = r##"
import sys, json
late = sys.argv[1] == "late-id"
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    r = {}
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "big", "version": "1"}}
    elif m["method"] == "tools/call":
        r = {"content": [{"type": "text", "text": "A" * 5000}]}
    a = {"result": r, "jsonrpc": "2.0", "id": m["id"]} if late else {"jsonrpc": "2.0", "id": m["id"], "result": r}
    sys.stdout.write(json.dumps(a) + "\n")
    sys.stdout.flush()
"##;

/// Records `initialize` and one `tools/call` whose answer is over `--max-message` (taped as
/// `oversize`), the server writing the answer's id `where_id` (`id-first`, `late-id`); returns
/// the tape and record's summary line.
fn record_an_oversize_answer(where_id: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (dir, tape) = tmp_tape("big.jsonl");
    let server = py(BIG_ANSWER_ID_FIRST_OR_LATE, &[where_id]);
    let mut c = record(&tape, &["--max-message", "3000"], &server);
    c.initialize();
    let answer = c.call(1, "tools/call", json!({"name": "big", "arguments": {}}));
    assert_eq!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(5000),
        "forwarded whole"
    );
    let stderr = c.finish_with(0);
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("mcptape: recorded "))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"))
        .to_string();
    let over = tape_msgs(&tape);
    assert_eq!(over.last().unwrap()["kind"], "oversize", "{over:?}");
    (dir, tape, summary)
}

/// What the readers say of the tape's `tools/call` answer: the number of exchanges `show
/// --json` counts answered, whether it pairs the answer with the call (its row has the call's
/// method and a latency), the calls `show --stats` counts unanswered, and `ls`'s count of a
/// copy of the tape without its closing line (its estimate).
fn readers_on_the_oversize_answer(tape: &Path) -> (usize, bool, u64, u64) {
    let doc = show_json(tape);
    let rows = doc["messages"].as_array().unwrap();
    let answered = rows
        .iter()
        .filter(|r| r["dir"] == "s2c" && r.get("latency_us").is_some())
        .count();
    let over = rows.iter().find(|r| r["kind"] == "oversize").unwrap();
    let paired = over["method"] == "tools/call" && over.get("latency_us").is_some();
    let stats: Value = Mt::new(["show", "--stats", "--json"])
        .arg(tape)
        .run()
        .success()
        .json();
    let call = stats["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == "tools/call")
        .unwrap_or_else(|| panic!("no tools/call row: {stats}"));
    let unanswered = call["unanswered"].as_u64().unwrap();
    let open = tmp();
    let lines = raw_lines(tape);
    let mut cut = lines[..lines.len() - 1].join(&b'\n');
    cut.push(b'\n');
    std::fs::write(open.path().join("open.jsonl"), cut).unwrap();
    let listed: Value = Mt::new(["ls", "--json"])
        .arg(open.path())
        .run()
        .success()
        .json();
    let estimate = listed[0]["exchanges"].as_u64().unwrap();
    (answered, paired, unanswered, estimate)
}

/// An answer over `--max-message` is on the tape (its length and first bytes) and readers pair
/// it with its request by the id in its head; the closing line and record's summary counted no
/// exchange for it (show said 2 exchanges answered where the end line said 1).
#[test]
fn an_answer_over_max_message_counts_as_an_exchange_for_writer_and_readers_alike() {
    let (_dir, tape, summary) = record_an_oversize_answer("id-first");
    assert_contains(&summary, "recorded 5 messages (2 exchanges, ");
    assert_eq!(end_line(&tape)["exchanges"], 2);
    assert_eq!(readers_on_the_oversize_answer(&tape), (2, true, 0, 2));
    let verified = Mt::new(["verify"]).arg(&tape).run().success();
    assert_contains(&verified.stdout, "intact");
    // A tape closed as before, counting no exchange for the oversize answer, stays valid: no
    // reader checks the count.
    let old = tape.with_file_name("old.jsonl");
    std::fs::write(&old, with_end_exchanges(&tape, 1)).unwrap();
    assert_eq!(end_line(&old)["exchanges"], 1);
    let verified = Mt::new(["verify"]).arg(&old).run().success();
    assert_contains(&verified.stdout, "intact");
    Mt::new(["lint"]).arg(&old).run().success();
}

/// The tape's bytes with its closing line's `exchanges` set to `n`, its chain hash made anew.
fn with_end_exchanges(tape: &Path, n: u64) -> Vec<u8> {
    use sha2::Digest as _;
    let mut lines = raw_lines(tape);
    let before: Value = serde_json::from_slice(&lines[lines.len() - 2]).unwrap();
    let end = String::from_utf8(lines.pop().unwrap()).unwrap();
    let end = regex::Regex::new(r#""exchanges":\d+"#)
        .unwrap()
        .replace(&end, format!(r#""exchanges":{n}"#).as_str())
        .into_owned();
    let at = end.rfind(r#","h":""#).expect("a chained end line");
    let unhashed = format!("{}}}", &end[..at]);
    let h = sha2::Sha256::new()
        .chain_update(before["h"].as_str().unwrap())
        .chain_update(&unhashed)
        .finalize();
    lines.push(format!("{},\"h\":\"{}\"}}", &end[..at], hex(&h)).into_bytes());
    let mut bytes = lines.join(&b'\n');
    bytes.push(b'\n');
    bytes
}

/// An oversize answer whose id comes after its body (past the head kept) cannot be paired: no
/// reader pairs it, and the writer does not count it.
#[test]
fn an_oversize_answer_whose_id_is_past_its_head_is_paired_by_no_one() {
    let (_dir, tape, summary) = record_an_oversize_answer("late-id");
    assert_contains(&summary, "recorded 5 messages (1 exchange, ");
    assert_eq!(end_line(&tape)["exchanges"], 1);
    assert_eq!(readers_on_the_oversize_answer(&tape), (1, false, 1, 1));
}

/// Reads `n` requests before answering any, then answers them last first.
const REVERSE: &str = r##"
import sys, json
n = int(sys.argv[1])
reqs = [json.loads(sys.stdin.readline()) for _ in range(n)]
for m in reversed(reqs):
    sys.stdout.write(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":{"echo":m["params"]}}) + "\n")
    sys.stdout.flush()
sys.stdin.read()
"##;

#[test]
fn parallel_calls_in_flight_are_forwarded_and_paired() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &py(REVERSE, &["4"]));
    let reqs: Vec<Value> = (1..=4)
        .map(|i| json!({"jsonrpc":"2.0","id":format!("r{i}"),"method":"tools/call","params":{"name":"t","arguments":{"i":i}}}))
        .collect();
    for r in &reqs {
        c.send(r);
    }
    let answers: Vec<Value> = (0..4).map(|_| c.recv()).collect();
    let ids: Vec<&str> = answers.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r4", "r3", "r2", "r1"]);
    for a in &answers {
        let req = reqs.iter().find(|r| r["id"] == a["id"]).unwrap();
        assert_eq!(a["result"]["echo"], req["params"]);
    }
    c.finish_with(0);
    let msgs = tape_msgs(&tape);
    let on_tape: Vec<&Value> = msgs.iter().map(|m| &m["msg"]).collect();
    let expected: Vec<&Value> = reqs.iter().chain(&answers).collect();
    assert_eq!(on_tape, expected);
    assert!(
        msgs[..4].iter().all(|m| m["dir"] == "c2s") && msgs[4..].iter().all(|m| m["dir"] == "s2c")
    );
    let end = end_line(&tape);
    assert_eq!(end["exchanges"], 4);
    assert_eq!(show_json(&tape)["exchanges"], 4);
}

#[test]
fn sigint_is_forwarded_too() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &ok_server(false));
    c.call(1, "tools/list", json!({}));
    kill(c.pid(), libc::SIGINT);
    assert_eq!(c.recv_raw(Duration::from_secs(30)), None);
    let (status, stderr) = wait_exit(c);
    // Python dies of an uncaught KeyboardInterrupt by re-raising SIGINT.
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{stderr}");
    assert_contains(&stderr, "KeyboardInterrupt");
    let end = end_line(&tape);
    assert_eq!(end["exit"], json!({"signal": libc::SIGINT}));
    assert_eq!(end["reason"], "SIGINT forwarded to the server");
}

/// Reads one request, waits for EOF, then answers it.
const ANSWER_AFTER_EOF: &str = r##"
import sys, json
m = json.loads(sys.stdin.readline())
sys.stdin.read()
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"late": True}}) + "\n")
sys.stdout.flush()
"##;

#[test]
fn an_answer_sent_after_the_client_closed_stdin_still_reaches_client_and_tape() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &py(ANSWER_AFTER_EOF, &[]));
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}));
    c.close_stdin();
    let v = c.recv();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"late": true}})
    );
    c.finish_with(0);
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1]["msg"], v);
    let end = end_line(&tape);
    assert_eq!(end["exchanges"], 1);
    assert_eq!(end["reason"], "the client closed stdin");
}

// --- recording over a tape that is there already (issue 15) ----------------------------------

/// `path` + `suffix` (`t.jsonl` → `t.jsonl.bak`).
fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `mcptape record --tape NAME -- demo-server` with the store in `store`: the handshake and
/// one `add` call per pair, or nothing at all (the client leaves at once) when `sums` is empty.
/// Requires exit `code`; returns stderr.
fn record_named(store: &Path, name: &str, sums: &[(i64, i64)], code: i32) -> String {
    let mut c = Mt::new(["record", "--tape", name, "--"])
        .args(demo_server("healthy"))
        .env("MCPTAPE_DIR", store)
        .spawn();
    if !sums.is_empty() {
        c.initialize();
    }
    for (i, (a, b)) in sums.iter().enumerate() {
        let r = c.call(
            i as i64 + 1,
            "tools/call",
            json!({"name": "add", "arguments": {"a": a, "b": b}}),
        );
        assert_eq!(r["result"]["content"][0]["text"], (a + b).to_string());
    }
    c.finish_with(code)
}

/// The sums the `add` calls on a tape answered.
fn sums_on(tape: &Path) -> Vec<String> {
    tape_msgs(tape)
        .iter()
        .filter_map(|m| {
            m["msg"]["result"]["content"][0]["text"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[test]
fn re_recording_replaces_a_tape_only_with_a_session_and_keeps_the_old_one_as_bak() {
    let store = tmp();
    let tape = store.path().join("tapes/fixture.jsonl");
    let (new, bak) = (beside(&tape, ".new"), beside(&tape, ".bak"));
    record_named(store.path(), "fixture", &[(2, 3)], 0);
    assert!(
        !new.exists() && !bak.exists(),
        "a first recording is written in place"
    );
    let first = read(&tape);

    // A session with no exchange (the client leaves at once) does not cost the fixture.
    let err = record_named(store.path(), "fixture", &[], 0);
    assert!(read(&tape) == first, "the tape is untouched");
    assert!(!bak.exists(), "nothing replaced, nothing backed up");
    assert_contains(
        &err,
        &format!(
            "mcptape: the new recording held no exchange: {} is kept as it was; the new recording is at {}",
            tape.display(),
            new.display()
        ),
    );
    assert_contains(&err, &format!("(0 exchanges) to {}", new.display()));
    assert_eq!(end_line(&new)["exchanges"], 0);

    // A session replaces it; the old tape is kept as TAPE.bak. (The closed recording left at
    // TAPE.new was reported when it ended: it is written over without a word.)
    let err = record_named(store.path(), "fixture", &[(4, 5)], 0);
    assert!(!err.contains("mcptape: found"), "{err}");
    assert_eq!(sums_on(&tape), ["9"]);
    assert!(read(&bak) == first, "the old tape, byte for byte");
    assert!(!new.exists(), "the new recording went into place");
    assert_contains(
        &err,
        &format!(
            "mcptape: replaced {}; the old tape is kept as {}",
            tape.display(),
            bak.display()
        ),
    );
    assert_contains(&err, &format!("(2 exchanges) to {}", tape.display()));
    Mt::new(["verify"]).arg(&tape).run().status(0);

    // Once more: the backup is the tape just replaced.
    let second = read(&tape);
    record_named(store.path(), "fixture", &[(6, 7)], 0);
    assert_eq!(sums_on(&tape), ["13"]);
    assert!(read(&bak) == second, "the backup is the tape just replaced");
    let names: Vec<String> = Mt::new(["ls"])
        .env("MCPTAPE_DIR", store.path())
        .run()
        .success()
        .stdout
        .lines()
        .filter(|l| l.contains("fixture"))
        .map(String::from)
        .collect();
    assert_eq!(
        names.len(),
        1,
        "ls lists the tape, not its backup: {names:?}"
    );
}

#[test]
fn a_re_recording_killed_with_sigkill_leaves_the_old_tape_at_its_path_and_the_new_one_beside_it() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let (new, bak) = (beside(&tape, ".new"), beside(&tape, ".bak"));
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    c.finish_with(0);
    let first = read(&tape);

    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    kill(c.pid(), libc::SIGKILL);
    wait_exit(c);
    assert!(read(&tape) == first, "the old tape is still at its path");
    let msgs = tape_msgs(&new);
    assert_eq!(
        msgs.len(),
        5,
        "the partial recording is beside it: {msgs:#?}"
    );
    assert_eq!(msgs[4]["msg"], r, "up to the last message forwarded");
    assert_contains(&show_json(&new)["warnings"].to_string(), "no closing line");
    assert!(!bak.exists());

    // The next recording says what it found, and goes on as usual.
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    let err = c.finish_with(0);
    assert_contains(
        &err,
        &format!(
            "mcptape: found {}, left by a recording that did not finish (killed, or the machine stopped); this recording writes over it",
            new.display()
        ),
    );
    assert!(read(&bak) == first, "the old tape, byte for byte");
    assert!(!new.exists());
}

#[test]
fn a_backup_name_that_is_a_symlink_is_refused_and_the_old_tape_stays() {
    let (dir, tape) = tmp_tape("t.jsonl");
    let (new, bak) = (beside(&tape, ".new"), beside(&tape, ".bak"));
    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    c.finish_with(0);
    let first = read(&tape);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, &bak).unwrap();

    let mut c = record(&tape, &[], &demo_server("healthy"));
    c.initialize();
    let err = c.finish_with(74);
    assert_contains(
        &err,
        &format!(
            "mcptape: error: could not replace {}: {} is a symbolic link; refusing to replace it. {} is kept as it was; the new recording is at {}",
            tape.display(),
            bak.display(),
            tape.display(),
            new.display()
        ),
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&bak)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(read(&tape) == first, "the tape is untouched");
    assert_eq!(end_line(&new)["exchanges"], 1, "the new recording is whole");
}

#[test]
fn a_tape_path_that_is_a_symlink_is_re_recorded_behind_the_link() {
    let (dir, real) = tmp_tape("real.jsonl");
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut c = record(&link, &[], &demo_server("healthy"));
    c.initialize();
    c.finish_with(0);
    let first = read(&real);

    let mut c = record(&link, &[], &demo_server("healthy"));
    c.initialize();
    c.call(2, "tools/list", json!({}));
    let err = c.finish_with(0);
    // The file the link points to is the tape: replaced there, its backup beside it.
    let real = real.canonicalize().unwrap();
    let bak = beside(&real, ".bak");
    assert_contains(
        &err,
        &format!(
            "replaced {}; the old tape is kept as {}",
            real.display(),
            bak.display()
        ),
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        tape_msgs(&link).len(),
        5,
        "the link leads to the new recording"
    );
    assert!(read(&bak) == first, "the old tape, byte for byte");
}

/// `redact` and `check --update` given a symbolic link write through it as `record` does: the
/// file it leads to is replaced (its backup beside it) and the link stays. They used to replace
/// the link with a new file, the real tape keeping its secrets or its old baseline.
#[test]
fn redact_and_check_update_through_a_symlink_replace_the_file_it_leads_to() {
    let (dir, real) = tmp_tape("real.jsonl");
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut c = record(&real, &[], &demo_server("healthy"));
    c.initialize();
    let r = c.call(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 12345, "b": 1}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "12346", "{r}");
    c.finish_with(0);
    let recorded = read(&real);
    let is_link = |p: &Path| {
        std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_symlink()
    };
    let bak = beside(&real, ".bak");

    Mt::new(["redact"])
        .arg(&link)
        .args(["--redact", "re:12346"])
        .run()
        .success();
    assert!(is_link(&link), "the link stays a link");
    // The messages, not the whole file: a hash or a `t_us` may spell 12346 by chance.
    let bodies: Vec<String> = tape_msgs(&real)
        .iter()
        .map(|m| m["msg"].to_string())
        .collect();
    assert!(
        bodies.iter().any(|b| b.contains("12345")) && !bodies.iter().any(|b| b.contains("12346")),
        "the file the link leads to is redacted: {bodies:?}"
    );
    assert!(read(&bak) == recorded, "its backup beside it");
    assert!(!beside(&link, ".bak").exists(), "no backup beside the link");

    let redacted = read(&real);
    Mt::new(["check"])
        .arg(&link)
        .arg("--update")
        .arg("--")
        .args(demo_server("drifted"))
        .run()
        .success();
    assert!(is_link(&link), "the link stays a link");
    assert!(
        read(&real) != redacted,
        "the baseline the link leads to is updated"
    );
    assert!(read(&bak) == redacted, "the old baseline beside it");
    assert!(!beside(&link, ".bak").exists(), "no backup beside the link");
    assert!(!beside(&link, ".new").exists() && !beside(&real, ".new").exists());
}

/// A server answering every request with a 3 MiB result.
const THREE_MIB_ANSWERS: &str = r##"
import json, sys
for line in sys.stdin:
    i = json.loads(line)["id"]
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": i, "result": {"text": "z" * (3 << 20)}}) + "\n")
    sys.stdout.flush()
"##;

/// Two calls with 3 MiB answers (a tape over the index cache's 4 MiB), recorded to `tape` with
/// the user's cache at `cache`: the client's lines and what record gave.
fn record_big(tape: &Path, cache: &Path) -> (String, Run) {
    let requests: String = (1..=2)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"n\":{i}}}}}}}\n"))
        .collect();
    let recorded = record_mt(tape, &[], &py(THREE_MIB_ANSWERS, &[]))
        .env("XDG_CACHE_HOME", cache)
        .env_remove("MCPTAPE_CACHE_DIR")
        .stdin(requests.clone())
        .run()
        .success();
    (requests, recorded)
}

/// `mcptape play` of `tape` with the user's cache at `cache`, the client sending `requests`.
fn play_big(tape: &Path, cache: &Path, requests: &str) -> Run {
    Mt::new(["play"])
        .arg(tape)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("MCPTAPE_CACHE_DIR")
        .stdin(requests.to_string())
        .run()
        .success()
}

#[test]
fn record_leaves_a_big_tape_indexed_so_that_its_first_play_starts_warm() {
    let (dir, tape) = tmp_tape("big.jsonl");
    let cache = dir.path().join("cache");
    let (requests, recorded) = record_big(&tape, &cache);
    assert_eq!(recorded.stdout.lines().count(), 2, "{}", recorded.console());
    let entries: Vec<_> = std::fs::read_dir(cache.join("mcptape/index"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    let idx: Vec<_> = entries
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect();
    assert_eq!(idx.len(), 1, "record cached the index: {entries:?}");
    assert!(
        entries
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "chain")),
        "record noted that the chain it wrote holds: {entries:?}"
    );
    let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = stamp(idx[0]);
    std::thread::sleep(Duration::from_millis(20));
    let played = play_big(&tape, &cache, &requests);
    assert_eq!(played.stdout, recorded.stdout, "play served the recording");
    // A cold load would have built the index and stored it again.
    assert_eq!(stamp(idx[0]), before, "play used the cached index");
}

/// `MCPTAPE_CACHE_DIR`, where remote tapes are kept, holds play's index cache too (`index/`), so
/// that a CI job keeping that folder between runs keeps its plays warm. Before, the index went
/// to `$XDG_CACHE_HOME/mcptape/index/` whatever `MCPTAPE_CACHE_DIR` said.
#[test]
fn mcptape_cache_dir_holds_the_index_cache_too() {
    let (dir, tape) = tmp_tape("big.jsonl");
    let (ours, xdg) = (dir.path().join("ours"), dir.path().join("xdg"));
    let requests: String = (1..=2)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"n\":{i}}}}}}}\n"))
        .collect();
    let recorded = record_mt(&tape, &[], &py(THREE_MIB_ANSWERS, &[]))
        .env("MCPTAPE_CACHE_DIR", &ours)
        .env("XDG_CACHE_HOME", &xdg)
        .stdin(requests.clone())
        .run()
        .success();
    let idx: Vec<std::path::PathBuf> = std::fs::read_dir(ours.join("index"))
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "idx"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(idx.len(), 1, "the index is in MCPTAPE_CACHE_DIR/index");
    assert!(!xdg.exists(), "nothing under XDG_CACHE_HOME");
    let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = stamp(&idx[0]);
    std::thread::sleep(Duration::from_millis(20));
    let played = Mt::new(["play"])
        .arg(&tape)
        .env("MCPTAPE_CACHE_DIR", &ours)
        .env("XDG_CACHE_HOME", &xdg)
        .stdin(requests)
        .run()
        .success();
    assert_eq!(played.stdout, recorded.stdout, "play served the recording");
    assert_eq!(stamp(&idx[0]), before, "play used the cached index");
    assert!(!xdg.exists(), "nothing under XDG_CACHE_HOME");
}

/// A cold play keeps the index it built in the cache, written behind its serving loop: the
/// entry is there once play has exited, whole, and the next play uses it.
#[test]
fn a_cold_play_leaves_the_index_cached_for_the_next_play() {
    let (dir, tape) = tmp_tape("big.jsonl");
    let recorded_cache = dir.path().join("recorded-cache");
    let (requests, recorded) = record_big(&tape, &recorded_cache);
    // A cache of its own, empty: this play starts cold.
    let cache = dir.path().join("cache");
    let play = || play_big(&tape, &cache, &requests);
    let played = play();
    assert_eq!(played.stdout, recorded.stdout, "play served the recording");
    let all = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(cache.join("mcptape/index"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };
    let entries = |ext: &str| -> Vec<std::path::PathBuf> {
        let with = |p: &std::path::PathBuf| p.extension().is_some_and(|e| e == ext);
        all().into_iter().filter(with).collect()
    };
    let idx = entries("idx");
    assert_eq!(idx.len(), 1, "the cold play kept its index: {:?}", all());
    assert_eq!(entries("chain").len(), 1, "and noted the chain it checked");
    let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = stamp(&idx[0]);
    std::thread::sleep(Duration::from_millis(20));
    let again = play();
    assert_eq!(
        again.stdout, recorded.stdout,
        "the warm play served the recording"
    );
    assert_eq!(
        stamp(&idx[0]),
        before,
        "the second play used the cached index"
    );
}

/// The index cache lives under the user's home; a HOME that is not there (a service account,
/// a sandbox) is not made by mcptape: record and play skip the cache and start cold, quietly.
#[test]
fn a_home_that_does_not_exist_is_not_created_for_the_index_cache() {
    let (dir, tape) = tmp_tape("big.jsonl");
    let home = dir.path().join("no-such-home");
    let requests: String = (1..=2)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"n\":{i}}}}}}}\n"))
        .collect();
    let recorded = record_mt(&tape, &[], &py(THREE_MIB_ANSWERS, &[]))
        .env_remove("XDG_CACHE_HOME")
        .env_remove("MCPTAPE_CACHE_DIR")
        .env("HOME", &home)
        .stdin(requests.clone())
        .run()
        .success();
    assert!(!home.exists(), "record made {}", home.display());
    let played = Mt::new(["play"])
        .arg(&tape)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("MCPTAPE_CACHE_DIR")
        .env("HOME", &home)
        .stdin(requests)
        .run()
        .success();
    assert_eq!(played.stdout, recorded.stdout, "play served the recording");
    assert!(!home.exists(), "play made {}", home.display());
    assert!(!played.stderr.contains("cache"), "{}", played.console());
}

/// The chain check play and check skip on a tape whose chain was found whole must come back for
/// any edit, even one that keeps the tape's length, inode and modification time: a broken chain
/// is reported every time, never remembered.
#[test]
fn an_edit_that_restores_length_and_mtime_still_gets_the_chain_checked_by_every_play_and_check() {
    let (dir, tape) = tmp_tape("big.jsonl");
    let cache = dir.path().join("cache");
    let (requests, _) = record_big(&tape, &cache);
    let play = || play_big(&tape, &cache, &requests);
    // check reads the tape whole: it too skips hashing a chain noted whole, and must not for
    // an edited one.
    let check = || {
        Mt::new(["check"])
            .arg(&tape)
            .arg("--")
            .args(py(THREE_MIB_ANSWERS, &[]))
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("MCPTAPE_CACHE_DIR")
            .run()
    };
    assert!(!play().stderr.contains("hash chain"), "a whole chain");
    let checked = check();
    assert!(
        !checked.stderr.contains("hash chain"),
        "{}",
        checked.console()
    );
    // One byte of the first answer changed in place, the modification time set back.
    let mtime = std::fs::metadata(&tape).unwrap().modified().unwrap();
    let bytes = std::fs::read(&tape).unwrap();
    let at = memchr::memmem::find(&bytes, b"zzzz").unwrap();
    let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    {
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&tape).unwrap();
        f.seek(std::io::SeekFrom::Start(at as u64)).unwrap();
        f.write_all(b"y").unwrap();
        f.set_modified(mtime).unwrap();
    }
    assert_eq!(std::fs::metadata(&tape).unwrap().modified().unwrap(), mtime);
    for round in 1..=2 {
        let played = play();
        assert!(
            played
                .stderr
                .contains(&format!("the hash chain breaks at line {line}")),
            "play {round} after the edit: {}",
            played.console()
        );
        let checked = check();
        assert!(
            checked
                .stderr
                .contains(&format!("the hash chain breaks at line {line}")),
            "check {round} after the edit: {}",
            checked.console()
        );
    }
}
