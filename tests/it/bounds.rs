//! Every queue and every listener is bounded, and the bounds hold: a flood of connections past
//! the cap is turned away while the server keeps serving; sessions past the cap get 503 until
//! one is deleted; a GET stream nobody opened keeps the newest messages only, and says how many
//! it dropped; a stdio client that stops reading holds play back, not play's memory.

use crate::harness::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Open file descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the process is running")
        .count()
}

/// VmRSS of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .expect("a VmRSS line")
        * 1024
}

/// A tape of one `initialize` and `count` copies of one `tools/call` answered with `answer`.
fn tape_of_calls(path: &Path, count: usize, pad: usize, answer: &str) {
    let mut msgs = vec![
        ("c2s", req(0, "initialize", init_params())),
        (
            "s2c",
            json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}}),
        ),
    ];
    for i in 1..=count {
        msgs.push((
            "c2s",
            req(
                i as u64,
                "tools/call",
                json!({"name":"echo","arguments":{"pad":"x".repeat(pad)}}),
            ),
        ));
        msgs.push((
            "s2c",
            json!({"jsonrpc":"2.0","id":i,"result":{"content":[{"type":"text","text":answer}]}}),
        ));
    }
    write_tape(path, &msgs, true);
}

/// `initialize` over HTTP at `url`: (status, session id).
fn initialize(url: &str) -> (u16, Option<String>) {
    let mut s = post_open(url, &req(1, "initialize", init_params()));
    let id = s.header("mcp-session-id").map(str::to_string);
    let _ = s.body();
    (s.status, id)
}

#[test]
fn a_flood_of_connections_past_the_cap_is_turned_away_and_play_keeps_serving() {
    let (_dir, tape) = tmp_tape("flood.jsonl");
    tape_of_calls(&tape, 1, 1, "ok");
    let served = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "20",
    ]);
    let before = fds(served.pid());
    // 100 idle connections: the first 20 are served (and wait for a request), the other 80 get
    // 503 and are closed at once.
    let mut held: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(served.authority()).expect("connect"))
        .collect();
    let mut busy = 0;
    let mut idle = 0;
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut got = Vec::new();
        match c.read_to_end(&mut got) {
            Ok(_) => {
                let text = String::from_utf8_lossy(&got);
                assert!(
                    text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
                    "an answer to a connection over the cap: {text:?}"
                );
                assert!(text.contains("retry-after: 1"), "{text}");
                busy += 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                assert!(
                    got.is_empty(),
                    "a served connection says nothing unasked: {got:?}"
                );
                idle += 1;
            }
            Err(e) => panic!("reading a flooding connection: {e}"),
        }
    }
    assert_eq!((idle, busy), (20, 80), "20 served, the rest turned away");
    // The descriptors held are the cap's, not the flood's.
    let during = fds(served.pid());
    assert!(
        during <= before + 20,
        "play holds {during} descriptors with 100 connections open (started with {before}, cap 20)"
    );
    // While the cap is full, a new client is turned away too; once the flood goes, it is served.
    let (status, _) = initialize(&served.url);
    assert_eq!(status, 503, "a client past the full cap");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, session) = loop {
        let (status, session) = initialize(&served.url);
        if status != 503 || Instant::now() > deadline {
            break (status, session);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status, 200, "served again once the flood closed");
    assert!(session.is_some());
    let err = served.stop();
    assert_contains(&err, "served 1, missed 0");
}

#[test]
fn sessions_past_the_cap_get_503_until_one_is_deleted() {
    let (_dir, tape) = tmp_tape("sessions.jsonl");
    tape_of_calls(&tape, 1, 1, "ok");
    let index = mcptape::tape::TapeIndex::load(&tape, None).expect("the tape loads");
    let mut opts = mcptape::play::ServeOptions::default();
    opts.max_sessions = 3;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (url_tx, url_rx) = std::sync::mpsc::channel::<String>();
    // The library's own HTTP player, in this process, on a runtime of the test's.
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(mcptape::play::http::serve_http(
            index,
            opts,
            "127.0.0.1:0".parse().unwrap(),
            false,
            async move {
                let _ = stop_rx.await;
                "stopped".to_string()
            },
            |url| {
                url_tx
                    .send(url.to_string())
                    .expect("the test waits for the URL")
            },
        ))
    });
    let url = url_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the player listens");
    let sessions: Vec<String> = (0..3)
        .map(|i| {
            let (status, id) = initialize(&url);
            assert_eq!(status, 200, "session {i} of 3");
            id.expect("a session id")
        })
        .collect();
    let mut s = post_open(&url, &req(1, "initialize", init_params()));
    assert_eq!(s.status, 503, "a fourth session");
    assert_eq!(s.header("retry-after"), Some("1"));
    assert_contains(&text(&s.body()), "3 sessions are open");
    let (status, _) = http(&url, "DELETE", &[("Mcp-Session-Id", &sessions[0])], b"");
    assert_eq!(status, 200, "deleting a session");
    let (status, id) = initialize(&url);
    assert_eq!(status, 200, "a session once one was deleted");
    assert!(id.is_some());
    stop_tx.send(()).expect("the player runs");
    let report = server
        .join()
        .expect("the player thread")
        .expect("the player ran");
    assert_eq!(report.missed, 0);
}

/// `play --listen --max-sessions 2 --session-idle 0.5`: a third session gets 503 until the two
/// go half a second without a request: they are closed (said on stderr) and their ids get
/// 404; a session with its GET stream open is not closed however long it waits.
#[test]
fn idle_sessions_are_closed_and_their_ids_get_404() {
    let (_dir, tape) = tmp_tape("idle.jsonl");
    tape_of_calls(&tape, 1, 1, "ok");
    let play = Served::spawn(&[
        "play",
        &s(&tape),
        "--listen",
        "127.0.0.1:0",
        "--max-sessions",
        "2",
        "--session-idle",
        "0.5",
    ]);
    let ids: Vec<String> = (0..2)
        .map(|i| {
            let (status, id) = initialize(&play.url);
            assert_eq!(status, 200, "session {i}");
            id.expect("a session id")
        })
        .collect();
    // A session, once one is free: 503 until then.
    let next_session = || {
        let start = Instant::now();
        loop {
            let (status, id) = initialize(&play.url);
            if status == 200 {
                break id.expect("a session id");
            }
            assert_eq!(status, 503, "past --max-sessions");
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the idle sessions were never closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // Two new sessions fit only once both old ones are gone.
    next_session();
    next_session();
    for id in &ids {
        let (status, body) = http(&play.url, "DELETE", &[("Mcp-Session-Id", id)], b"");
        assert_eq!(status, 404, "an expired session: {}", text(&body));
    }
    // A session whose GET stream is open stays, however long it waits (opened at once; should
    // a loaded machine take longer than the idle time to open it, with another session).
    let (kept, stream) = loop {
        let id = next_session();
        let stream = http_open(
            &play.url,
            "GET",
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &id)],
            b"",
        );
        if stream.status == 200 {
            break (id, stream);
        }
        assert_eq!(stream.status, 404, "the GET stream");
    };
    std::thread::sleep(Duration::from_secs(2));
    let (status, _) = http(&play.url, "DELETE", &[("Mcp-Session-Id", &kept)], b"");
    assert_eq!(status, 200, "the streaming session was kept");
    drop(stream);
    let stderr = play.stop();
    for id in &ids {
        assert_contains(
            &stderr,
            &format!(
                "mcptape play: session {id} closed after 0.5 s without a request (--session-idle)"
            ),
        );
    }
}

/// A stdio server that answers `initialize`, then, on `notifications/initialized`, writes
/// `count` log notifications of its own (tied to no request).
fn chatty_server(dir: &Path, count: usize) -> Vec<String> {
    let script = dir.join("chatty.py");
    std::fs::write(
        &script,
        format!(
            r#"import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        print(json.dumps({{"jsonrpc": "2.0", "id": m["id"], "result": {{"protocolVersion": "2025-06-18", "capabilities": {{"logging": {{}}}}, "serverInfo": {{"name": "chatty", "version": "1"}}}}}}), flush=True)
    elif m.get("method") == "notifications/initialized":
        for i in range({count}):
            print(json.dumps({{"jsonrpc": "2.0", "method": "notifications/message", "params": {{"level": "info", "data": i}}}}))
        sys.stdout.flush()
"#
        ),
    )
    .unwrap();
    vec![python(), s(&script)]
}

#[test]
fn a_get_stream_nobody_opened_keeps_the_newest_messages_and_says_how_many_it_dropped() {
    let dir = tmp();
    let tape = dir.path().join("chatty.jsonl");
    let total = 1500;
    let mut bridge = Served::bridge(&tape, &chatty_server(dir.path(), total));
    let (status, session) = initialize(&bridge.url);
    assert_eq!(status, 200);
    let session = session.expect("a session id");
    let mut headers = post_headers(&[("Mcp-Session-Id", &session)]);
    let (status, _) = http(
        &bridge.url,
        "POST",
        &headers,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 202);
    // Every notification reaches the tape, whether or not a client takes it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while live_tape_msgs(&tape)
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count()
        < total
    {
        assert!(
            Instant::now() < deadline,
            "the server's notifications reach the tape"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Now the GET stream: the backlog's newest 1024, in order.
    headers.retain(|(k, _)| *k != "Content-Type");
    let mut get = http_open(&bridge.url, "GET", &headers, b"");
    assert_eq!(get.status, 200);
    let kept = mcptape::transport::http::GET_BACKLOG;
    let mut got: Vec<i64> = Vec::new();
    while got.len() < kept {
        let piece = get.next_piece().expect("the GET stream stays open");
        for line in text(&piece).lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data).expect("an event's data is JSON");
                got.push(
                    v["params"]["data"]
                        .as_i64()
                        .expect("the notification's number"),
                );
            }
        }
    }
    let want: Vec<i64> = ((total - kept) as i64..total as i64).collect();
    assert_eq!(got, want, "the newest {kept} notifications, in order");
    get.hang_up();
    let (_, err) = bridge.signal(libc::SIGINT, Duration::from_secs(20));
    assert_contains(
        &err,
        &format!(
            "{} server messages for a GET stream no client opened were not delivered (they are on the tape)",
            total - kept
        ),
    );
}

#[test]
fn a_stdio_client_that_stops_reading_holds_play_back_not_its_memory() {
    let (_dir, tape) = tmp_tape("unread.jsonl");
    let calls = 2000;
    let pad = 4000; // 4 KB a request: 8 MB of requests in all
    let answer = "y".repeat(8000); // 8 KB an answer: 16 MB of answers in all
    tape_of_calls(&tape, calls, pad, &answer);
    let mut child = std::process::Command::new(bin())
        .args(["play", &s(&tape)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("play starts");
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            let init = req(0, "initialize", init_params()).to_string();
            let _ = writeln!(stdin, "{init}");
            for i in 1..=calls {
                let line = req(
                    i as u64,
                    "tools/call",
                    json!({"name":"echo","arguments":{"pad":"x".repeat(pad)}}),
                )
                .to_string();
                if writeln!(stdin, "{line}").is_err() {
                    return;
                }
                written.fetch_add(line.len() + 1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // Nobody reads play's stdout. Wait until the client's writes stop moving.
    let mut last = usize::MAX;
    let mut still = 0;
    while still < 5 {
        std::thread::sleep(Duration::from_millis(200));
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    let total = calls * (pad + 100);
    assert!(
        last < total / 4,
        "play kept reading a client that does not read its answers: {last} of {total} bytes taken"
    );
    let held = rss(pid);
    assert!(
        held < 64 << 20,
        "play's memory with a client that stopped reading: {} MiB",
        held >> 20
    );
    // The client reads again: every answer comes, in order, and the writer finishes.
    let stdout = child.stdout.take().unwrap();
    let mut answers = 0;
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
        let v: Value = serde_json::from_str(&line.expect("a line")).expect("an answer is JSON");
        if v["id"] != 0 {
            assert_eq!(v["id"], answers + 1, "answers in order");
            assert_eq!(
                v["result"]["content"][0]["text"].as_str().map(str::len),
                Some(8000)
            );
            answers += 1;
        }
    }
    writer.join().expect("the writer");
    assert_eq!(answers, calls as u64);
    let out = child.wait_with_output().expect("play exits");
    assert!(out.status.success(), "{}", text(&out.stderr));
}
