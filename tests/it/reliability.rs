//! Issue 7, stdio: faults (the server dies early, the client leaves with answers pending, the
//! disk fills, 64 MiB messages, half a line, a stalled peer) and bad input (invalid UTF-8,
//! truncated JSON, 10,000-deep nesting, non-objects, batches, odd ids, bad tapes, hostile names).
//! docs/reliability.md states each promise and names the test that shows it.

use crate::harness::*;
use crate::record::{assert_server_exit_passed_on, py, record, record_mt, record_sh, sh};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

// --- helpers ---------------------------------------------------------------------------------

/// The tape's `msg` lines, read with the crate's own reader (which, unlike a `Value`, takes
/// 10,000-deep messages): dir, kind, problem, text, b64, eol and the raw `msg` text.
fn reader_msgs(tape: &Path) -> Vec<Value> {
    use mcptape::tape::{Entry, TapeReader};
    let mut r = TapeReader::open(tape).expect("a tape");
    let mut out = Vec::new();
    while let Some(item) = r.next_item().expect("readable") {
        if let Entry::Msg(m) = item.entry {
            out.push(json!({
                "seq": m.seq,
                "dir": m.dir.as_str(),
                "kind": m.kind.as_str(),
                "problem": m.problem.as_deref(),
                "text": m.text.as_deref(),
                "b64": m.b64.as_deref(),
                "eol": m.eol,
                "msg": m.msg.map(|v| v.get().to_string()),
            }));
        }
    }
    out
}

/// The next line from a player that is JSON (recorded non-JSON lines are replayed as they were).
fn recv_json(c: &mut LineClient) -> Value {
    loop {
        let l = c
            .recv_raw(Duration::from_secs(30))
            .expect("a line within 30 s");
        if let Ok(v) = serde_json::from_slice(&l) {
            return v;
        }
    }
}

/// The verbatim message bytes spliced into a raw `msg` tape line (between `"msg":` and `,"h":`).
fn spliced_msg(line: &[u8]) -> &[u8] {
    let start = line
        .windows(7)
        .position(|w| w == b",\"msg\":")
        .expect("a msg field")
        + 7;
    let end = line.len() - (b",\"h\":\"".len() + 64 + 2);
    &line[start..end]
}

/// A raw-bytes responder: reads requests, takes each top-level `"id":` text exactly as sent
/// (the client writes it first), and answers `{"k": n}` (n = the request's 0-based index).
/// With `rev N` it reads N requests before answering them last first; with `now` at once.
/// Batches (`[`…) get a batch answer; lines it cannot read get nothing.
const RAW_RESPONDER: &str = r##"
import sys, re
out = sys.stdout.buffer
mode = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ID = re.compile(rb'^\{"id":(-?[0-9][0-9.eE+-]*|"[^"\\]*")')
pending = []; k = 0
for raw in iter(sys.stdin.buffer.readline, b''):
    if raw.startswith(b'['):
        out.write(b'[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"nope"}}]\n'); out.flush()
        continue
    m = ID.match(raw)
    if not m or b'"method"' not in raw:
        continue
    pending.append((m.group(1), k)); k += 1
    if mode == "now" or len(pending) == n:
        for i, j in (reversed(pending) if mode == "rev" else pending):
            out.write(b'{"id":' + i + b',"jsonrpc":"2.0","result":{"k":' + str(j).encode() + b'}}\n')
        out.flush(); pending = []
"##;

fn responder(mode: &str, n: usize) -> Vec<String> {
    py(RAW_RESPONDER, &[mode, &n.to_string()])
}

/// A request line with the id first and written exactly as given.
fn raw_request(id: &str, method: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"id":{id},"jsonrpc":"2.0","method":"{method}","params":{params}}}"#).into_bytes()
}

fn line(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.push(b'\n');
    bytes
}

// --- faults ----------------------------------------------------------------------------------

#[test]
fn a_server_that_exits_before_the_handshake_leaves_a_closed_tape_and_its_exit_code() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // The server prints a banner and a diagnostic, then dies before reading anything.
    let mut c = record_sh(
        &tape,
        "echo 'starting…'; echo 'fatal: no API key' >&2; exit 3",
    );
    assert_eq!(
        c.recv_raw(Duration::from_secs(30)).as_deref(),
        Some(&b"starting\xe2\x80\xa6\n"[..]),
        "the banner is forwarded"
    );
    assert_eq!(c.recv_raw(Duration::from_secs(30)), None, "then EOF");
    c.wait_exit(Duration::from_secs(30));
    let (status, stderr) = c.finish();
    assert_server_exit_passed_on(status, &stderr, 3, "fatal: no API key");
    assert_contains(&stderr, "mcptape: recorded 1 message (");
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        (&msgs[0]["kind"], &msgs[0]["text"]),
        (&json!("not_json"), &json!("starting…"))
    );
    let end = end_of(&tape);
    assert_eq!(end["exit"], json!({"code": 3}));
    assert_eq!(end["reason"], "the server exited");
    assert_eq!(
        (end["messages"].as_u64(), end["raw"].as_u64()),
        (Some(1), Some(1))
    );

    // Played back, the handshake is a miss that says what the tape holds: no hang, exit 1.
    let mut p = LineClient::spawn(&play_cmd(&tape));
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}});
    p.send(&init);
    // The recorded banner is replayed first, as on the wire.
    let v = recv_json(&mut p);
    assert_eq!(v["id"], 0);
    assert!(v["error"]["message"].is_string(), "{v}");
    p.finish_with(1);
}

/// Reads requests until EOF, waits a moment, then answers them all (last first).
const ANSWER_ALL_AFTER_EOF: &str = r##"
import sys, json, time
reqs = [json.loads(l) for l in sys.stdin]
time.sleep(0.5)
for m in reversed(reqs):
    sys.stdout.write(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":{"n":m["params"]["n"]}}) + "\n")
    sys.stdout.flush()
"##;

#[test]
fn answers_pending_when_the_client_closes_stdin_are_forwarded_and_recorded() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &["--grace", "10"], &py(ANSWER_ALL_AFTER_EOF, &[]));
    for i in 1..=3 {
        c.send(&json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"n":i}}));
    }
    c.close_stdin();
    let got: Vec<Value> = (0..3).map(|_| c.recv()).collect();
    let ids: Vec<i64> = got.iter().map(|v| v["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [3, 2, 1], "every pending answer reaches the client");
    c.finish_with(0);
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 6);
    let answers: Vec<&Value> = msgs[3..].iter().map(|m| &m["msg"]).collect();
    assert_eq!(answers, got.iter().collect::<Vec<_>>());
    let end = end_of(&tape);
    assert_eq!(end["exchanges"], 3);
    assert_eq!(end["reason"], "the client closed stdin");
    assert_eq!(end["exit"], json!({"code": 0}));
}

/// Ignores EOF; on SIGTERM answers what is pending, then exits 0.
const ANSWER_ON_SIGTERM: &str = r##"
import sys, json, signal, os
reqs = []
def bye(*a):
    for m in reqs:
        sys.stdout.write(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":{"bye":True}}) + "\n")
    sys.stdout.flush()
    os._exit(0)
signal.signal(signal.SIGTERM, bye)
for l in sys.stdin:
    reqs.append(json.loads(l))
signal.pause()
"##;

#[test]
fn answers_a_server_gives_when_the_grace_period_ends_are_still_recorded() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &["--grace", "0.5"], &py(ANSWER_ON_SIGTERM, &[]));
    c.send(&json!({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{}}));
    c.send(&json!({"jsonrpc":"2.0","id":"b","method":"tools/call","params":{}}));
    c.close_stdin();
    let a = c.recv();
    let b = c.recv();
    assert_eq!((&a["id"], &b["id"]), (&json!("a"), &json!("b")));
    c.finish_with(0);
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 4, "{msgs:#?}");
    assert_eq!((&msgs[2]["msg"], &msgs[3]["msg"]), (&a, &b));
    let end = end_of(&tape);
    assert_eq!(end["exchanges"], 2);
    assert_eq!(
        end["reason"],
        "the server did not exit within the grace period after stdin closed: SIGTERM"
    );
}

/// `mcptape record` with RLIMIT_FSIZE (and optionally SIGXFSZ ignored, as inherited dispositions
/// survive exec), against the raw responder.
fn record_with_fsize(tape: &Path, limit: u64, ignore_xfsz: bool) -> LineClient {
    with_fsize(
        record_mt(tape, &[], &responder("now", 1)).command(),
        limit,
        ignore_xfsz,
    )
}

/// `cmd` run with RLIMIT_FSIZE at `limit` (and SIGXFSZ ignored if asked).
fn with_fsize(mut cmd: Command, limit: u64, ignore_xfsz: bool) -> LineClient {
    // SAFETY: only async-signal-safe calls (setrlimit, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if ignore_xfsz {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    LineClient::spawn_cmd(cmd)
}

/// A small call, a 64 KiB call (the tape cannot take it), another small call: every answer must
/// reach the client. Returns the answers.
fn session_past_the_limit(c: &mut LineClient) -> Vec<Vec<u8>> {
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(64 * 1024));
    let mut answers = Vec::new();
    for (id, params) in [("1", "{}"), ("2", big.as_str()), ("3", "{}")] {
        c.send_raw(&line(raw_request(id, "tools/call", params)));
        let a = c
            .recv_raw(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("answer {id} forwarded although the tape is full"));
        assert!(
            a.starts_with(format!(r#"{{"id":{id},"#).as_bytes()),
            "{}",
            String::from_utf8_lossy(&a)
        );
        answers.push(a);
    }
    answers
}

/// The promised disk-full outcome: session kept, loss loud on stderr, exit 74, tape closed and
/// marked incomplete, its written lines intact.
fn assert_loud_incomplete(tape: &Path, status: std::process::ExitStatus, stderr: &str) {
    assert_eq!(
        status.code(),
        Some(74),
        "server exited 0 but lines were lost: exit 74; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("mcptape: WARNING: writing tape"),
        "the first failure is reported when it happens: {stderr}"
    );
    assert!(
        stderr.contains("the tape is INCOMPLETE: 4 lines could not be written"),
        "the loss is counted at the end: {stderr}"
    );
    let lines = tape_lines(tape);
    let msgs: Vec<&Value> = lines.iter().filter(|l| l["type"] == "msg").collect();
    assert_eq!(
        msgs.len(),
        2,
        "the first exchange is on the tape: {msgs:#?}"
    );
    let end = lines.last().unwrap();
    assert_eq!(
        end["type"], "end",
        "the tape is closed on a line of its own"
    );
    assert_eq!(end["incomplete"], true);
    assert_eq!(end["messages"], 6, "counts cover what crossed the wire");
    let doc = show_json(tape);
    assert!(
        doc["warnings"].to_string().contains("could not write"),
        "readers say the tape is incomplete: {doc}"
    );
    // The closing line chains to the last line written: incomplete, not tampered.
    let out = Mt::new(["verify"]).arg(tape).run().status(1);
    assert!(
        out.stdout.contains(&format!(
            "cut off at line {} (disk full or crash): the recorder could not write",
            lines.len()
        )),
        "{}",
        out.stdout
    );
}

/// [`session_past_the_limit`] through `c`, which then ends as [`assert_loud_incomplete`] says;
/// returns its stderr.
fn lose_lines_loudly(mut c: LineClient, tape: &Path) -> String {
    session_past_the_limit(&mut c);
    let (status, stderr) = c.finish();
    assert_loud_incomplete(tape, status, &stderr);
    stderr
}

#[test]
fn a_write_error_keeps_the_session_and_marks_the_tape_incomplete_loudly() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let stderr = lose_lines_loudly(record_with_fsize(&tape, 16 * 1024, true), &tape);
    assert_contains(&stderr, "File too large");
}

#[test]

fn a_file_size_limit_with_the_default_sigxfsz_is_not_a_silent_death() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    lose_lines_loudly(record_with_fsize(&tape, 16 * 1024, false), &tape);
}

/// A small tmpfs, unmounted on drop.
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    /// A tmpfs of `kib` KiB (a multiple of the 4 KiB page: all of it holds file data).
    fn mount(kib: u64) -> SmallFs {
        let d = tmp();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(d.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a {kib} KiB tmpfs needs root (the dev machines and CI are): {}",
            text(&out.stderr)
        );
        SmallFs(d)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_filesystem_keeps_the_session_and_marks_the_tape_incomplete_loudly() {
    let fs = SmallFs::mount(64);
    let tape = fs.0.path().join("t.jsonl");
    // Leave a little room: the header, the first exchange and the closing line fit.
    std::fs::write(fs.0.path().join("filler"), vec![0u8; 56 * 1024]).unwrap();
    let stderr = lose_lines_loudly(record(&tape, &[], &responder("now", 1)), &tape);
    assert_contains(&stderr, "No space left on device");
}

/// A 12 KiB tmpfs takes about 55 tape lines; the client sends `initialize` and 200 pings in one
/// write, so the recorder frames many lines from each read and hands them to the kernel in one
/// `write(2)`, which the full disk cuts short.
#[test]
fn a_burst_that_fills_the_disk_keeps_every_line_that_fits_and_verify_calls_it_cut_off() {
    const FS: u64 = 12 * 1024;
    let fs = SmallFs::mount(FS / 1024);
    let tape = fs.0.path().join("t.jsonl");
    let mut c = record(&tape, &[], &responder("now", 1));
    let mut burst = line(raw_request("0", "initialize", &init_params().to_string()));
    for id in 1..=200 {
        burst.extend(line(raw_request(&id.to_string(), "ping", "{}")));
    }
    c.send_raw(&burst);
    for id in 0..=200 {
        let a = c
            .recv_raw(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("answer {id} forwarded although the disk is full"));
        assert!(
            a.starts_with(format!(r#"{{"id":{id},"#).as_bytes()),
            "{}",
            text(&a)
        );
    }
    let (status, stderr) = c.finish();
    assert_eq!(
        status.code(),
        Some(74),
        "lines were lost: exit 74; stderr:\n{stderr}"
    );
    assert_eq!(
        stderr.matches("mcptape: WARNING: writing tape").count(),
        1,
        "one message when taping stops: {stderr}"
    );
    assert_contains(&stderr, "No space left on device");

    // Every line on the tape is whole; the messages kept are the first ones, in order.
    let bytes = std::fs::read(&tape).unwrap();
    assert!(bytes.ends_with(b"\n"), "no torn last line");
    let lines = tape_lines(&tape);
    let msgs: Vec<&Value> = lines.iter().filter(|l| l["type"] == "msg").collect();
    let seqs: Vec<u64> = msgs.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=msgs.len() as u64).collect::<Vec<_>>(),
        "a prefix"
    );
    // What fits is kept: the room left is less than one more line (and the closing line).
    let longest = raw_lines(&tape)
        .iter()
        .map(|l| l.len() as u64 + 1)
        .max()
        .unwrap();
    assert!(
        bytes.len() as u64 + 2 * longest >= FS,
        "{} messages in {} bytes of a {FS}-byte disk: more would have fit",
        msgs.len(),
        bytes.len()
    );
    let end = lines.last().filter(|l| l["type"] == "end");
    // The closing line fits only if the torn line cut off was longer than it (here it is not).
    let lost = 402 - msgs.len();
    match end {
        Some(end) => {
            assert_eq!(end["incomplete"], true);
            assert_eq!(end["messages"], 402, "counts cover what crossed the wire");
            assert_contains(
                &stderr,
                &format!("the tape is INCOMPLETE: {lost} lines could not be written"),
            );
        }
        None => {
            assert_contains(&stderr, "mcptape: error: could not write tape");
            assert_contains(
                &stderr,
                &format!("neither the closing line nor {lost} lines before it could be written"),
            );
        }
    }

    // Cut off, not tampered: the hash chain holds over every line kept.
    let out = Mt::new(["verify"]).arg(&tape).run().status(1);
    let cut_at = msgs.len() + 3; // header, server, the messages: the next line is where it stops
    assert!(
        out.stdout
            .contains(&format!("cut off at line {cut_at} (disk full or crash)"))
            && !out.stdout.contains("TAMPERED"),
        "{}",
        out.stdout
    );
    let doc = show_json(&tape);
    assert_eq!(doc["messages"].as_array().unwrap().len(), msgs.len());
}

#[test]
fn no_room_even_for_the_closing_line_is_an_error_not_silence() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // No limit at first (SIGXFSZ ignored); once the first exchange is on the tape, the limit is
    // set 50 bytes past its end with prlimit(1): the next call and the closing line cannot fit.
    // Every write a write(2) (`MCPTAPE_NO_MAP`): a writer that maps the tape has made its room
    // before the limit is set, and a limit on a file's size does not stop copies into the size
    // it has. A full disk in that mode is the tmpfs tests' matter.
    let mut cmd = record_mt(&tape, &[], &responder("now", 1)).command();
    cmd.env("MCPTAPE_NO_MAP", "1");
    let mut c = with_fsize(cmd, libc::RLIM_INFINITY, true);
    c.send_raw(&line(raw_request("1", "tools/call", "{}")));
    assert!(c.recv_raw(Duration::from_secs(30)).is_some());
    let size = std::fs::metadata(&tape).unwrap().len();
    let limit = format!("--fsize={}", size + 50);
    let st = Command::new("prlimit")
        .args(["--pid", &c.pid().to_string(), &limit])
        .status()
        .expect("run prlimit");
    assert!(st.success(), "prlimit");
    c.send_raw(&line(raw_request("2", "tools/call", "{}")));
    assert!(
        c.recv_raw(Duration::from_secs(30)).is_some(),
        "still forwarded"
    );
    let stderr = c.finish_with(74);
    assert!(
        stderr.contains("mcptape: WARNING: writing tape"),
        "the first loss is reported: {stderr}"
    );
    assert!(
        stderr.contains("mcptape: error: could not write tape")
            && stderr.contains("File too large"),
        "the failed close is an error: {stderr}"
    );
    // The failed closing line may be left torn: readers skip it and say so.
    let doc = show_json(&tape);
    assert!(
        doc["warnings"].to_string().contains("no closing line"),
        "the tape itself says it is cut off: {doc}"
    );
}

const MIB64: usize = 64 * 1024 * 1024;

/// Answers one request with a line of exactly 64 MiB holding the SHA-256 of what it received.
const BIG_ANSWER: &str = r##"
import sys, hashlib
raw = sys.stdin.buffer.readline()
sha = hashlib.sha256(raw).hexdigest().encode()
pre = b'{"id":1,"jsonrpc":"2.0","result":{"sha":"' + sha + b'","blob":"'
post = b'"}}'
n = int(sys.argv[1])
sys.stdout.buffer.write(pre + b'y' * (n - len(pre) - len(post)) + post + b'\n')
sys.stdout.buffer.flush()
sys.stdin.buffer.read()
"##;

#[test]
fn a_64_mib_message_each_way_is_forwarded_and_recorded_verbatim() {
    use sha2::Digest as _;
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record(&tape, &[], &py(BIG_ANSWER, &[&MIB64.to_string()]));
    let pre = br#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"big","arguments":{"blob":""#;
    let post = br#""}}}"#;
    let mut req = pre.to_vec();
    req.resize(MIB64 - post.len(), b'x');
    req.extend_from_slice(post);
    assert_eq!(req.len(), MIB64, "exactly the default --max-message");
    let sent = line(req.clone());
    c.send_raw(&sent);
    let got = c
        .recv_raw(Duration::from_secs(120))
        .expect("a 64 MiB answer");
    assert_eq!(got.len(), MIB64 + 1);
    let sha = format!("{:x}", sha2::Sha256::digest(&sent));
    assert!(
        got.starts_with(format!(r#"{{"id":1,"jsonrpc":"2.0","result":{{"sha":"{sha}""#).as_bytes()),
        "the request reached the server intact"
    );
    c.finish_with(0);
    let lines = raw_lines(&tape);
    assert_eq!(lines.len(), 5, "header, server, 2 messages, end");
    assert!(
        spliced_msg(&lines[2]) == &req[..],
        "request recorded verbatim"
    );
    assert!(
        spliced_msg(&lines[3]) == &got[..got.len() - 1],
        "answer recorded verbatim"
    );
    let end: Value = serde_json::from_slice(&lines[4]).unwrap();
    assert_eq!(
        (end["exchanges"].as_u64(), end["raw"].as_u64()),
        (Some(1), Some(0))
    );
}

#[test]
fn a_server_that_writes_half_a_line_and_exits_is_recorded_as_a_torn_line() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record_sh(
        &tape,
        r#"read -r l; printf '{"jsonrpc":"2.0","id":1,"result":{"te'; exit 0"#,
    );
    c.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}));
    assert_eq!(
        c.recv_raw(Duration::from_secs(30)).as_deref(),
        Some(&br#"{"jsonrpc":"2.0","id":1,"result":{"te"#[..]),
        "the half line is forwarded as it came"
    );
    c.wait_exit(Duration::from_secs(30));
    c.finish_with(0);
    let msgs = tape_msgs(&tape);
    assert_eq!(msgs.len(), 2);
    let torn = &msgs[1];
    assert_eq!(torn["kind"], "not_json");
    assert_eq!(torn["eol"], false);
    assert_eq!(torn["text"], r#"{"jsonrpc":"2.0","id":1,"result":{"te"#);
    assert!(torn["problem"].as_str().unwrap().contains("EOF"), "{torn}");
    let end = end_of(&tape);
    assert_eq!(
        (end["exchanges"].as_u64(), end["raw"].as_u64()),
        (Some(0), Some(1))
    );

    // Play: the torn answer is no answer; the client is told so instead of waiting.
    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.send(&json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}));
    let v = loop {
        // The recorded half line is replayed first, as it was sent.
        let v = recv_json(&mut p);
        if v.get("id") == Some(&json!(5)) {
            break v;
        }
    };
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("never answered"),
        "{v}"
    );
    let (status, _) = p.finish();
    assert_eq!(status.code(), Some(1));
}

#[test]
fn record_waits_for_a_stalled_server() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let mut c = record_sh(
        &tape,
        r#"read -r l; sleep 3; echo '{"jsonrpc":"2.0","id":1,"result":{"late":true}}'; cat >/dev/null"#,
    );
    c.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}));
    assert_eq!(c.recv_raw(Duration::from_secs(2)), None, "nothing yet");
    assert!(
        c.child.try_wait().unwrap().is_none(),
        "record has no timeout of its own"
    );
    assert_eq!(c.recv()["result"]["late"], true);
    c.finish_with(0);
    assert_eq!(end_of(&tape)["exchanges"], 1);
}

/// A tape: the handshake, then one tools/call.
fn handshake_and_call(tape: &Path) {
    write_tape(
        tape,
        &[
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
            ),
            (
                "s2c",
                json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}),
            ),
            (
                "c2s",
                json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            ),
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{}}}),
            ),
            (
                "s2c",
                json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}),
            ),
        ],
        true,
    );
}

/// Answers initialize, then never answers anything and ignores EOF.
const STALLS: &str = r##"
import sys, json, time
for l in sys.stdin:
    m = json.loads(l)
    if m.get("method") == "initialize":
        sys.stdout.write(json.dumps({"jsonrpc":"2.0","id":m["id"],"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}) + "\n")
        sys.stdout.flush()
while True:
    time.sleep(1)
"##;

#[test]
fn check_times_out_on_a_stalled_server_and_kills_it() {
    let (_dir, tape) = tmp_tape("base.jsonl");
    handshake_and_call(&tape);
    let start = Instant::now();
    let out = Mt::new(["check"])
        .arg(&tape)
        .args(["--timeout", "1", "--json", "-", "--"])
        .args(py(STALLS, &[]))
        .run();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "bounded: --timeout, then the 5 s grace, then SIGTERM (SIGKILL 2 s later) ({:?})",
        start.elapsed()
    );
    let r: CheckReport = out.status(1).json();
    let call = r
        .exchanges
        .iter()
        .find(|e| e.exchange.method == "tools/call")
        .expect("the call is in the report");
    assert_eq!(call.status, Status::Missing, "{call:#?}");
}

/// `sh -c SCRIPT mcptape`: a server command whose script names the mcptape binary `$0`.
fn sh_with_mcptape(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into(), s(bin())]
}

/// The demo server that, once its stdin is closed, keeps running until SIGTERM, which it
/// answers by saying so on stderr (in words the command line does not hold: check and the
/// bridge print the command) and exiting 0 (its background `sleep` taken down with it, so
/// that nothing is left holding stderr).
const DEMO_UNTIL_SIGTERM: &str = r#"trap 'printf "server: %s handled\\n" TERM >&2; kill $! 2>/dev/null; exit 0' TERM
"$0" demo-server
sleep 30 &
wait"#;

/// check gave a server that outlived its grace period SIGKILL straight away (record gives
/// SIGTERM first, then SIGKILL 2 s later): a server that cleans up on SIGTERM never could, and
/// the report said `{"signal":9}`. Now the server gets SIGTERM after the grace, and its exit
/// code is what the report shows.
#[test]
fn check_gives_a_server_that_outlives_the_grace_sigterm_before_sigkill() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    let out = Mt::new(["check"])
        .arg(dir.path().join("demo.jsonl"))
        .args(["--json", "-", "--"])
        .args(sh_with_mcptape(DEMO_UNTIL_SIGTERM))
        .run();
    assert!(
        out.stderr.contains("server: TERM handled"),
        "the server was not sent SIGTERM:\n{}",
        out.console()
    );
    let r: CheckReport = out.status(0).json();
    assert_eq!(
        r.server_exit,
        Some(ExitInfo {
            code: Some(0),
            signal: None
        })
    );
}

/// `mcptape record` as the server under check, its own server ignoring EOF: check SIGKILLed
/// the recorder after its grace period, which left its tape without a closing line. Given
/// SIGTERM, the recorder forwards it to its server, closes its tape and exits 128+15.
#[test]
fn a_recorder_checked_as_the_server_closes_its_tape() {
    let dir = tmp();
    Mt::new(["demo", "--dir"]).arg(dir.path()).run().success();
    let inner = dir.path().join("inner.jsonl");
    let out = Mt::new(["check"])
        .arg(dir.path().join("demo.jsonl"))
        .args(["--json", "-", "--"])
        .arg(bin())
        .args(["record", "--grace", "30", "--tape"])
        .arg(&inner)
        .arg("--")
        .args(sh_with_mcptape(r#""$0" demo-server; exec sleep 30"#))
        .run();
    let lines = tape_lines(&inner);
    let end = lines.last().expect("tape lines");
    assert_eq!(
        end["type"],
        "end",
        "the recorder's tape has no closing line:\n{}",
        out.console()
    );
    assert_eq!(end["exit"], json!({"signal": libc::SIGTERM}), "{end}");
    assert_eq!(end["reason"], "SIGTERM forwarded to the server", "{end}");
    assert!(end["exchanges"].as_u64() > Some(0), "{end}");
    let r: CheckReport = out.status(0).json();
    assert_eq!(
        r.server_exit,
        Some(ExitInfo {
            code: Some(128 + libc::SIGTERM),
            signal: None
        })
    );
}

/// `record --listen` (the bridge) stops its stdio server as check does: stdin closed, the grace
/// period, then SIGTERM (it killed it with SIGKILL, and exited 137 with the tape saying
/// `{"signal":9}`), then SIGKILL.
#[test]
fn the_bridge_gives_a_server_that_outlives_the_grace_sigterm_before_sigkill() {
    let (_dir, tape) = tmp_tape("bridge.jsonl");
    let server = sh(
        r#"trap 'printf "server: %s handled\\n" TERM >&2; kill $! 2>/dev/null; exit 0' TERM
cat >/dev/null
sleep 30 &
wait"#,
    );
    let bridge = Served::bridge(&tape, &server);
    let stderr = bridge.stop();
    assert_contains(&stderr, "server: TERM handled");
    let lines = tape_lines(&tape);
    let end = lines.last().expect("tape lines");
    assert_eq!(end["type"], "end", "{end}");
    assert_eq!(end["exit"], json!({"code": 0}), "{end}");
}

#[test]
fn play_does_not_wait_forever_for_a_stalled_client() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // During the call the server asked the client for a sample; the client answered.
    write_tape(
        &tape,
        &[
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask"}}),
            ),
            (
                "s2c",
                json!({"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{"messages":[]}}),
            ),
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":0,"result":{"content":{"type":"text","text":"hi"}}}),
            ),
            (
                "s2c",
                json!({"jsonrpc":"2.0","id":1,"result":{"content":[]}}),
            ),
        ],
        true,
    );
    let mut p = Mt::new(["play"])
        .arg(&tape)
        .args(["--answer-timeout", "1"])
        .spawn();
    p.send(&json!({"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"ask"}}));
    let start = Instant::now();
    let asked = p.recv();
    assert_eq!(asked["method"], "sampling/createMessage");
    // The client never answers: after --answer-timeout the call is answered anyway.
    let v = p.recv();
    assert_eq!(v, json!({"jsonrpc":"2.0","id":"c","result":{"content":[]}}));
    assert!(start.elapsed() < Duration::from_secs(10));
    let (status, stderr) = p.finish();
    assert_eq!(status.code(), Some(1), "drift: {stderr}");
    assert_contains(&stderr, "did not answer sampling/createMessage");
}

// --- bad input -------------------------------------------------------------------------------

#[test]
fn bad_client_lines_are_forwarded_byte_for_byte_and_recorded_with_their_problem() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // `cat` sends every line straight back: what the client gets must be what it sent.
    let mut c = record(&tape, &[], &["cat".to_string()]);
    let deep_array = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"s\":\"\xff\xfe\"}}".to_vec(),
            "not_json",
        ),
        (br#"{"jsonrpc":"2.0","id":2,"method":"#.to_vec(), "not_json"),
        (b"42".to_vec(), "invalid"),
        (br#""a string""#.to_vec(), "invalid"),
        (b"null".to_vec(), "invalid"),
        (br#"{"jsonrpc":"2.0","x":1}"#.to_vec(), "invalid"),
        (
            br#"[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]"#.to_vec(),
            "batch",
        ),
        (deep_array.clone().into_bytes(), "batch"),
        ("[".repeat(10_000).into_bytes(), "not_json"),
    ];
    for (bytes, _) in &cases {
        let sent = line(bytes.clone());
        c.send_raw(&sent);
        let back = c.recv_raw(Duration::from_secs(30)).expect("echoed back");
        assert!(
            back == sent,
            "forwarded unchanged both ways: {}",
            String::from_utf8_lossy(bytes)
                .chars()
                .take(80)
                .collect::<String>()
        );
    }
    c.finish_with(0);
    let msgs = reader_msgs(&tape);
    assert_eq!(msgs.len(), cases.len() * 2);
    for (i, (bytes, kind)) in cases.iter().enumerate() {
        for m in &msgs[2 * i..2 * i + 2] {
            assert_eq!(
                m["kind"],
                *kind,
                "case {i}: {}",
                m.to_string().chars().take(200).collect::<String>()
            );
            if *kind == "not_json" {
                assert!(m["problem"].is_string(), "case {i} names its problem");
                let stored = match (m["text"].as_str(), m["b64"].as_str()) {
                    (Some(t), _) => t.as_bytes().to_vec(),
                    (None, Some(b)) => {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD.decode(b).unwrap()
                    }
                    _ => panic!("case {i}: no body"),
                };
                assert!(stored == *bytes, "case {i} kept exactly");
            }
        }
    }
    assert!(msgs[0]["problem"]
        .as_str()
        .unwrap()
        .contains("invalid UTF-8 at byte 52"));
    // JSON kinds are spliced verbatim (the 10,000-deep array too).
    let lines = raw_lines(&tape);
    for (i, (bytes, kind)) in cases.iter().enumerate() {
        if *kind != "not_json" {
            assert!(
                spliced_msg(&lines[2 + 2 * i]) == &bytes[..],
                "case {i} verbatim"
            );
        }
    }
    let end = end_of(&tape);
    assert_eq!(
        end["raw"],
        2 * (3 + 4),
        "not_json and invalid lines count as raw"
    );
}

#[test]
fn bad_client_lines_to_play_get_an_error_each_and_play_goes_on() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    handshake_and_call(&tape);
    let mut p = Mt::new(["play"])
        .arg(&tape)
        .args(["--max-message", "65536"])
        .spawn();
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let over = format!(
        r#"{{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{{"x":"{}"}}}}"#,
        "z".repeat(70_000)
    );
    let cases: Vec<(Vec<u8>, i64, &str, Value)> = vec![
        (
            b"{\"id\":1,\"method\":\"x\",\"s\":\"\xff\"}".to_vec(),
            -32700,
            "Parse error",
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":2,"method":"#.to_vec(),
            -32700,
            "Parse error",
            Value::Null,
        ),
        (b"42".to_vec(), -32600, "Invalid Request", Value::Null),
        (
            b"[1,2]".to_vec(),
            -32600,
            "does not serve JSON-RPC batches",
            Value::Null,
        ),
        (
            deep.into_bytes(),
            -32600,
            "does not serve JSON-RPC batches",
            Value::Null,
        ),
        (
            "{".repeat(10_000).into_bytes(),
            -32700,
            "Parse error",
            Value::Null,
        ),
        (
            over.into_bytes(),
            -32600,
            "over mcptape play's --max-message",
            json!(99),
        ),
    ];
    for (bytes, code, text, id) in &cases {
        p.send_raw(&line(bytes.clone()));
        let v = p.recv();
        assert_eq!(v["error"]["code"], *code, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(text),
            "{v}"
        );
        assert_eq!(v["id"], *id);
    }
    // Still serving.
    let v = p.call(7, "tools/call", json!({"name":"slow","arguments":{}}));
    assert_eq!(v["result"]["content"][0]["text"], "done");
    let stderr = p.finish_with(0);
    assert_contains(
        &stderr,
        &format!("rejected {} unusable client lines", cases.len()),
    );
}

/// JSON that is not a JSON-RPC message, as a server may print it among its answers.
const NOT_MESSAGES: [&str; 7] = ["null", "42", r#""s""#, "true", "{}", "[]", "[1]"];

/// Answers `initialize` and `tools/list`, printing its arguments, a line each, before each
/// answer.
const PRINTS_NOT_MESSAGES: &str = r##"
import sys, json
junk = sys.argv[1:]
for line in sys.stdin:
    m = json.loads(line)
    if not isinstance(m, dict) or "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "junk", "version": "1"}}
    else:
        r = {"tools": []}
    print("\n".join(junk), flush=True)
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"##;

/// Lines from a player up to and including the answer to `id`, raw.
fn lines_until_answer(c: &mut LineClient, id: i64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let l = c
            .recv_raw(Duration::from_secs(30))
            .expect("a line within 30 s");
        let done = serde_json::from_slice::<Value>(&l)
            .is_ok_and(|v| v.get("id") == Some(&json!(id)) && v.get("result").is_some());
        out.push(l);
        if done {
            return out;
        }
    }
}

#[test]
fn json_that_is_not_a_message_is_read_back_as_a_raw_line_by_every_reader() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    let server = py(PRINTS_NOT_MESSAGES, &NOT_MESSAGES);
    let mut c = record(&tape, &[], &server);
    let junk: Vec<Vec<u8>> = NOT_MESSAGES
        .iter()
        .map(|j| line(j.as_bytes().to_vec()))
        .collect();
    c.send(&req(1, "initialize", init_params()));
    let got = lines_until_answer(&mut c, 1);
    assert!(got[..got.len() - 1] == junk[..], "forwarded as printed");
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    // A client may print one too.
    c.send_raw(b"null\n");
    c.send(&req(2, "tools/list", json!({})));
    lines_until_answer(&mut c, 2);
    c.finish_with(0);
    // Recorded: verbatim in `msg`, `null` included; arrays as batches.
    let lines = raw_lines(&tape);
    let stored: Vec<&[u8]> = lines
        .iter()
        .filter(|l| {
            let v: Value = serde_json::from_slice(l).unwrap();
            v["kind"] == "invalid" || v["kind"] == "batch"
        })
        .map(|l| spliced_msg(l))
        .collect();
    let want: Vec<&[u8]> = NOT_MESSAGES
        .iter()
        .chain(&["null"])
        .chain(&NOT_MESSAGES)
        .map(|j| j.as_bytes())
        .collect();
    assert_eq!(stored, want, "each line stored verbatim");

    // Every reader reads the tape, and reads those lines as raw lines.
    let doc = show_json(&tape);
    assert_eq!(doc["exchanges"], 2, "{doc}");
    let kinds: Vec<&str> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("id").is_none() && m.get("method").is_none())
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    let one = [
        "invalid", "invalid", "invalid", "invalid", "invalid", "batch", "batch",
    ];
    assert_eq!(kinds, [&one[..], &["invalid"], &one].concat(), "{doc}");
    Mt::new(["show"]).arg(&tape).run().success();
    Mt::new(["verify"])
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("intact");
    Mt::new(["lint"]).arg(&tape).run().success();
    Mt::new(["diff"])
        .arg(&tape)
        .arg(&tape)
        .run()
        .success()
        .stdout_contains("same");
    Mt::new(["check"])
        .arg(&tape)
        .arg("--")
        .args(&server)
        .run()
        .success();
    let redacted = dir.path().join("redacted.jsonl");
    Mt::new(["redact"])
        .arg(&tape)
        .arg("-o")
        .arg(&redacted)
        .run()
        .success();
    // The same lines, with a fresh chain (and nothing to redact).
    let unchained = |lines: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
        let h = regex::bytes::Regex::new(r#","h":"[0-9a-f]{64}"\}$"#).unwrap();
        lines
            .iter()
            .map(|l| h.replace(l, &b"}"[..]).into_owned())
            .collect()
    };
    assert!(
        unchained(raw_lines(&redacted)) == unchained(lines.clone()),
        "redact kept every line"
    );
    Mt::new(["diff"])
        .arg(&tape)
        .arg(&redacted)
        .run()
        .success()
        .stdout_contains("same");

    // Play replays them as recorded, and still answers the client properly; a client line
    // `null` gets -32600.
    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.send(&req(1, "initialize", init_params()));
    let got = lines_until_answer(&mut p, 1);
    assert!(got[..got.len() - 1] == junk[..], "replayed verbatim");
    p.send_raw(b"null\n");
    let v = p.recv();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    p.send(&req(2, "tools/list", json!({})));
    let got = lines_until_answer(&mut p, 2);
    assert_eq!(got.len(), junk.len() + 1);
    let stderr = p.finish_with(0);
    assert_contains(&stderr, "served 2, missed 0");
}

#[test]
fn a_10000_deep_request_and_answer_go_through_record_and_play() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // Answers with the request's params as its result, byte for byte.
    let echo = py(
        r##"
import sys, re
for raw in iter(sys.stdin.buffer.readline, b''):
    i = re.match(rb'\{"id":(\d+)', raw).group(1)
    p = raw[raw.index(b'"params":') + 9:].rstrip(b'\n')[:-1]
    sys.stdout.buffer.write(b'{"id":' + i + b',"jsonrpc":"2.0","result":' + p + b'}\n'); sys.stdout.buffer.flush()
"##,
        &[],
    );
    let deep = format!(
        r#"{{"name":"deep","arguments":{{"x":{}{}{}}}}}"#,
        r#"{"a":["#.repeat(5_000),
        "1",
        "]}".repeat(5_000)
    );
    let mut c = record(&tape, &[], &echo);
    let req = raw_request("1", "tools/call", &deep);
    c.send_raw(&line(req.clone()));
    let got = c.recv_raw(Duration::from_secs(30)).expect("answer");
    let want = format!(r#"{{"id":1,"jsonrpc":"2.0","result":{deep}}}"#);
    assert!(got == line(want.clone().into_bytes()), "forwarded intact");
    c.finish_with(0);
    let lines = raw_lines(&tape);
    assert!(spliced_msg(&lines[2]) == &req[..]);
    assert!(spliced_msg(&lines[3]) == want.as_bytes());
    assert_eq!(end_of(&tape)["exchanges"], 1, "paired");

    let mut p = LineClient::spawn(&play_cmd(&tape));
    p.send_raw(&line(raw_request("\"again\"", "tools/call", &deep)));
    let got = p.recv_raw(Duration::from_secs(30)).expect("served");
    let want = format!(r#"{{"id":"again","jsonrpc":"2.0","result":{deep}}}"#);
    assert!(
        got == line(want.into_bytes()),
        "matched and served verbatim"
    );
    p.finish_with(0);
}

#[test]

fn a_secret_nested_deeper_than_serde_jsons_limit_is_still_redacted() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
    let deep = format!(
        r#"{{"x":{}{{"api_key":"{secret}"}}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut c = record(&tape, &[], &["cat".to_string()]);
    c.send_raw(&line(raw_request("1", "tools/call", &deep)));
    c.recv_raw(Duration::from_secs(30)).expect("echo");
    c.finish_with(0);
    let text = std::fs::read_to_string(&tape).unwrap();
    assert!(!text.contains(secret), "the secret reached the tape");
}

#[test]
fn huge_negative_fractional_and_duplicate_ids_are_paired_in_record() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    let ids = [
        "123456789012345678901234567890",
        "-7",
        "1.5",
        "1.0",
        "1",
        "1e3",
        "\"1\"",
        "-0",
    ];
    let mut c = record(&tape, &[], &responder("rev", ids.len()));
    for (k, id) in ids.iter().enumerate() {
        c.send_raw(&line(raw_request(
            id,
            "tools/call",
            &format!(r#"{{"k":{k}}}"#),
        )));
    }
    for (k, id) in ids.iter().enumerate().rev() {
        let a = c.recv_raw(Duration::from_secs(30)).expect("answer");
        assert_eq!(
            String::from_utf8(a).unwrap(),
            format!("{{\"id\":{id},\"jsonrpc\":\"2.0\",\"result\":{{\"k\":{k}}}}}\n"),
            "ids cross the proxy exactly"
        );
    }
    c.finish_with(0);
    let lines = raw_lines(&tape);
    for (k, id) in ids.iter().enumerate() {
        let l = String::from_utf8_lossy(&lines[2 + k]);
        assert!(
            l.contains(&format!(",\"id\":{id},")),
            "id text kept exactly: {l}"
        );
    }
    assert_eq!(
        end_of(&tape)["exchanges"],
        ids.len() as u64,
        "1, 1.0, \"1\" and 1e3 are distinct ids"
    );
    // The index pairs each answer with its own request (by the answer's k).
    let index = mcptape::tape::TapeIndex::load(&tape, None).unwrap();
    assert_eq!(index.exchanges.len(), ids.len());
    for ex in index.exchanges.iter() {
        let req = index.read_text(&index.msgs[ex.request]).unwrap();
        let resp = index
            .read_text(&index.msgs[ex.response.expect("answered")])
            .unwrap();
        let k = |t: &str| {
            t[t.find("\"k\":").unwrap() + 4..]
                .split('}')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(k(&req), k(&resp), "{req} ↔ {resp}");
    }
}

#[test]

fn duplicate_in_flight_ids_are_paired_first_in_first_out() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    // Two calls with id 7 in flight, answered in order (k 0 then k 1).
    let mut c = record(&tape, &[], &responder("fwd", 2));
    c.send_raw(&line(raw_request("7", "tools/call", r#"{"k":0}"#)));
    c.send_raw(&line(raw_request("7", "tools/call", r#"{"k":1}"#)));
    for k in 0..2 {
        let a = c.recv_raw(Duration::from_secs(30)).expect("answer");
        assert_eq!(
            String::from_utf8(a).unwrap(),
            format!("{{\"id\":7,\"jsonrpc\":\"2.0\",\"result\":{{\"k\":{k}}}}}\n")
        );
    }
    c.finish_with(0);
    assert_eq!(tape_msgs(&tape).len(), 4, "all four on the tape");
    let index = mcptape::tape::TapeIndex::load(&tape, None).unwrap();
    let pairs: Vec<(u64, Option<u64>)> = index
        .exchanges
        .iter()
        .map(|e| {
            (
                index.msgs[e.request].seq,
                e.response.map(|r| index.msgs[r].seq),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [(1, Some(3)), (2, Some(4))],
        "first answer to the first request"
    );
    assert_eq!(end_of(&tape)["exchanges"], 2);
}

#[test]
fn play_echoes_odd_client_ids_exactly() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    write_tape(
        &tape,
        &[
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"k":0}}),
            ),
            ("s2c", json!({"jsonrpc":"2.0","id":1,"result":{"k":0}})),
            (
                "c2s",
                json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"k":0}}),
            ),
            ("s2c", json!({"jsonrpc":"2.0","id":2,"result":{"k":0}})),
        ],
        true,
    );
    let ids = [
        "123456789012345678901234567890",
        "-7",
        "1.5",
        "1e3",
        "-0.0",
        "\"\\u00e9 x\"",
    ];
    let mut p = LineClient::spawn(&play_cmd(&tape));
    for id in ids {
        // Served or missed (there are only two recorded calls): the id comes back as sent.
        p.send_raw(&line(raw_request(id, "tools/call", r#"{"k":0}"#)));
        let got = String::from_utf8(p.recv_raw(Duration::from_secs(30)).expect("answer")).unwrap();
        assert!(got.contains(&format!("\"id\":{id}")), "{id}: {got}");
    }
    // Duplicate in-flight ids: both answered, each with that id.
    p.send_raw(&line(raw_request("7", "ping", "{}")));
    p.send_raw(&line(raw_request("7", "ping", "{}")));
    for _ in 0..2 {
        assert_eq!(p.recv(), json!({"jsonrpc":"2.0","id":7,"result":{}}));
    }
    let (status, stderr) = p.finish();
    assert_eq!(
        status.code(),
        Some(1),
        "misses after the two recorded calls: {stderr}"
    );
    assert_contains(&stderr, "served 2");
}

/// A valid tape with a defect spliced in at line `at` (1-based), as text.
fn tape_with(dir: &Path, name: &str, at: usize, bad: &[u8]) -> std::path::PathBuf {
    let good = dir.join("good.jsonl");
    handshake_and_call(&good);
    let mut lines = raw_lines(&good);
    lines.insert(at - 1, bad.to_vec());
    let mut bytes = lines.join(&b'\n');
    bytes.push(b'\n');
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn bad_tapes_are_refused_with_the_line_named_and_exit_65() {
    let dir = tmp();
    let deep = format!(
        r#"{{"type":"msg","seq":9,"t_us":0,"server":"default","dir":"c2s","kind":"request","id":9,"method":"m","msg":{{"id":9,"method":"m","params":{}{}}},"x":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000),
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("utf8", b"{\"type\":\"msg\",\"seq\":9,\"t_us\":0,\"server\":\"default\",\"dir\":\"c2s\",\"kind\":\"not_json\",\"text\":\"\xff\"}".to_vec()),
        ("truncated", br#"{"type":"msg","seq":9,"t_us":0,"server":"def"#.to_vec()),
        ("not-object", b"42".to_vec()),
        ("array", b"[1,2,3]".to_vec()),
        ("no-body", br#"{"type":"msg","seq":9,"t_us":0,"server":"default","dir":"c2s","kind":"request"}"#.to_vec()),
        ("bad-kind", br#"{"type":"msg","seq":9,"t_us":0,"server":"default","dir":"up","kind":"request","msg":{}}"#.to_vec()),
        ("second-header", br#"{"type":"header","format":"mcptape","version":1,"created":"x","tool":"t"}"#.to_vec()),
    ];
    for (name, bad) in &cases {
        let tape = tape_with(dir.path(), &format!("{name}.jsonl"), 4, bad);
        for cmd in ["show", "play", "verify", "lint"] {
            let out = Mt::new([cmd]).arg(&tape).run();
            let err = &out.stderr;
            assert!(
                out.exit.code() == Some(65)
                    || (cmd != "show" && cmd != "play" && out.exit.code() == Some(1)),
                "{name} {cmd:?}: exit {:?}\n{err}",
                out.exit.code()
            );
            assert!(!err.contains("panicked"), "{name} {cmd:?}: {err}");
            if cmd == "show" || cmd == "play" {
                assert!(
                    err.contains("line 4"),
                    "{name} {cmd:?} names the line: {err}"
                );
            }
        }
    }
    // A 10,000-deep message (and unknown field) on a tape line is no defect: read, no crash.
    let tape = tape_with(dir.path(), "deep.jsonl", 4, deep.as_bytes());
    let doc = show_json(&tape);
    assert_eq!(doc["exchanges"], 3, "the deep request is indexed");
}

#[test]
fn duplicate_sequence_numbers_do_not_break_reading() {
    let (dir, good) = tmp_tape("good.jsonl");
    handshake_and_call(&good);
    // Every msg line gets seq 1: seq is informational; lines are taken in file order.
    let text = std::fs::read_to_string(&good).unwrap();
    let re = regex::Regex::new(r#""seq":\d+"#).unwrap();
    let dup = dir.path().join("dup.jsonl");
    std::fs::write(&dup, re.replace_all(&text, r#""seq":1"#).as_ref()).unwrap();
    let doc = show_json(&dup);
    assert_eq!(doc["exchanges"], 2, "{doc}");
    let mut p = LineClient::spawn(&play_cmd(&dup));
    p.initialize();
    let v = p.call(5, "tools/call", json!({"name":"slow","arguments":{}}));
    assert_eq!(v["result"]["content"][0]["text"], "done");
    p.finish_with(0);
    Mt::new(["diff"]).arg(&good).arg(&dup).run().success();
}

#[test]
fn hostile_tape_names_are_refused_by_every_command_before_anything_runs() {
    let dir = tmp();
    let marker = dir.path().join("server-ran");
    let server = sh(&format!("touch {}", s(&marker)));
    let mcptape_in = |args: &[&str]| Mt::new(args).env("MCPTAPE_DIR", dir.path()).run();
    let long = "x".repeat(129);
    for name in [
        "",
        ".hidden",
        "-rf",
        "a b",
        "x:y",
        "é",
        "a\nb",
        "a\\b",
        "$(id)",
        long.as_str(),
    ] {
        // `--tape=NAME` and `-- NAME`: a name starting with '-' still reaches the name check.
        let flag = format!("--tape={name}");
        let mut rec = vec!["record", flag.as_str(), "--"];
        rec.extend(server.iter().map(String::as_str));
        for args in [
            rec,
            vec!["play", "--", name],
            vec!["show", "--", name],
            vec!["verify", "--", name],
        ] {
            let out = mcptape_in(&args);
            assert_eq!(out.code(), 64, "{name:?} {args:?}: {}", out.console());
            assert!(out.stderr.contains("invalid tape name"), "{name:?}");
        }
    }
    assert!(!marker.exists(), "the server never started");
    // A named tape that is a symbolic link is not written through.
    let tapes = dir.path().join("tapes");
    std::fs::create_dir_all(&tapes).unwrap();
    let target = dir.path().join("elsewhere.txt");
    std::fs::write(&target, "keep me").unwrap();
    std::os::unix::fs::symlink(&target, tapes.join("evil.jsonl")).unwrap();
    let mut args = vec!["record", "--tape", "evil", "--"];
    args.extend(server.iter().map(String::as_str));
    mcptape_in(&args)
        .status(64)
        .stderr_contains("symbolic link");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    assert!(!marker.exists());
    // `..` is a path (a folder): refused as a usage error before the server starts.
    let mut args = vec!["record", "--tape", "..", "--"];
    args.extend(server.iter().map(String::as_str));
    mcptape_in(&args)
        .status(64)
        .stderr_contains("is a folder, not a tape");
    assert!(!marker.exists());
}

/// A server that parses a request and writes its answer spells a string id its own way: Python's
/// `json` escapes non-ASCII (`"init-é"` comes back `"init-\u00e9"`), JavaScript drops needless
/// escapes (`"a\/b"` comes back `"a/b"`). Same id value, so the same request: keyed by the id's
/// text, none of this session's answers was paired — record counted 0 exchanges, and play
/// answered every request "the recorded server never answered this request".
#[test]
fn string_ids_the_server_respells_are_paired_with_their_requests() {
    let (_dir, tape) = tmp_tape("t.jsonl");
    const OK: &str = r#"
def answer(m, arg):
    return {"content": [{"type": "text", "text": "ok"}]}
"#;
    let init = r#"{"jsonrpc":"2.0","id":"init-é","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#;
    let call = r#"{"jsonrpc":"2.0","id":"a\/b","method":"tools/call","params":{"name":"e","arguments":{}}}"#;
    let mut c = record(&tape, &[], &line_server("esc", OK, ""));
    for l in [init, call] {
        c.send_raw(format!("{l}\n").as_bytes());
        let a = text(&c.recv_raw(Duration::from_secs(30)).expect("answer"));
        assert!(a.contains("\"result\""), "{a}");
    }
    c.finish_with(0);
    assert_eq!(end_of(&tape)["exchanges"], 2, "both answers paired");
    let mut p = Mt::new(["play"]).arg(&tape).spawn();
    for (l, id) in [(init, r#""id": "init-é""#), (call, r#""id": "a\/b""#)] {
        p.send_raw(format!("{l}\n").as_bytes());
        let a = text(&p.recv_raw(Duration::from_secs(30)).expect("answer"));
        assert!(a.contains("\"result\"") && a.contains(id), "{a}");
    }
    let stderr = p.finish_with(0);
    assert_contains(&stderr, "served 2, missed 0");
}
