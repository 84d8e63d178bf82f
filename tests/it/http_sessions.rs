//! HTTP fidelity: every answer paired with its own request. Many sessions of a real client
//! against server-everything over Streamable HTTP (each starting its ids again), sequential and
//! concurrent, one with an elicitation in flight; and the stateless era's many POSTs with one id,
//! each answered on its own stream; and the recorded statuses given again.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;

/// The `tagged` scenario of the Python SDK client for session `tag` against `url`.
fn tagged(url: &str, tag: u32, elicit: bool) -> Value {
    let tag_s = tag.to_string();
    let mut env = vec![("MCPTAPE_TAG", tag_s.as_str())];
    if elicit {
        env.push(("MCPTAPE_ELICIT", "1"));
    }
    let (t, out) = py_client("tagged", "legacy", &[url.to_string()], &env);
    assert!(
        out.status.success(),
        "session {tag} against {url}: {}\n{}",
        text(&out.stderr),
        t
    );
    t
}

/// 20 sessions: 10 one after the other, then 10 at once; session 13 has an elicitation in
/// flight. Their transcripts, by tag.
fn twenty_sessions(url: &str) -> Vec<(u32, Value)> {
    let mut out: Vec<(u32, Value)> = (1..=10).map(|t| (t, tagged(url, t, false))).collect();
    let concurrent: Vec<_> = (11..=20)
        .map(|t| {
            let url = url.to_string();
            std::thread::spawn(move || (t, tagged(&url, t, t == 13)))
        })
        .collect();
    out.extend(concurrent.into_iter().map(|h| h.join().expect("a session")));
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The transcript without what varies run to run in server-everything's answers (none of the
/// steps used here has any: echo and get-sum are pure; the elicitation is declined).
fn steps(t: &Value) -> Value {
    t["steps"].clone()
}

#[test]
fn twenty_sessions_over_http_each_get_their_own_answers_through_record_and_play() {
    let dir = tmp();
    let (_server, upstream) = everything_http(dir.path());
    let tape = dir.path().join("sessions.jsonl");
    let direct = twenty_sessions(&upstream);
    for (tag, t) in &direct {
        // The session's own arguments come back in its answers.
        let text = t.to_string();
        assert!(text.contains(&format!("session {tag}")), "{tag}: {text}");
        assert!(
            text.contains(&format!("{}", tag + 1000 * tag)),
            "{tag}: {text}"
        );
    }
    let rec = Served::record(&upstream, &tape);
    let recorded = twenty_sessions(&rec.url);
    rec.stop();
    for ((tag, d), (_, r)) in direct.iter().zip(&recorded) {
        assert_eq!(steps(r), steps(d), "session {tag} through record");
    }
    // Every session started its ids again: the same request ids recur in many sessions.
    let lines = tape_lines(&tape);
    let ids_of_echo: Vec<&Value> = lines
        .iter()
        .filter(|l| l["dir"] == "c2s" && l["msg"]["params"]["name"] == "echo")
        .map(|l| &l["id"])
        .collect();
    assert!(ids_of_echo.len() >= 40, "{}", ids_of_echo.len());
    let first = ids_of_echo[0];
    assert!(
        ids_of_echo.iter().filter(|i| **i == first).count() > 10,
        "ids repeat across sessions: {ids_of_echo:?}"
    );
    // `show` pairs each answer with its own request: every echo's answer echoes its own text.
    show_json(&tape);
    // Against play: each session gets its own answers, sequential and concurrent alike.
    let play = Served::play(&tape);
    let played = twenty_sessions(&play.url);
    let err = play.stop();
    for ((tag, d), (_, p)) in direct.iter().zip(&played) {
        assert_eq!(
            steps(p),
            steps(d),
            "session {tag} against play; play said:\n{err}"
        );
    }
    assert!(err.contains("missed 0"), "no miss: {err}");
}

/// A stdlib stateless (2026-07-28 style) upstream: every POST is its own request, no session,
/// answered as SSE on its own stream after a delay that makes later POSTs finish first.
const STATELESS: &str = r#"
class H(Quiet):
    def do_POST(self):
        body, method, rid = self.read_msg()
        p = body.get("params", {})
        if method == "ping":
            self.send_json({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "ping is gone in 2026-07-28"}}, 404)
            return
        if method == "bad/header":
            self.send_response(400)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"Mcp-Method does not match the body")
            return
        n = p.get("n", 0)
        time.sleep(0.05 * (10 - n))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t%d" % n, "progress": n}}
        res = {"jsonrpc": "2.0", "id": rid, "result": {"n": n, "resultType": "complete"}}
        self.wfile.write(("data: %s\n\n" % json.dumps(note)).encode())
        self.wfile.write(("data: %s\n\n" % json.dumps(res)).encode())
    def do_GET(self):
        self.not_allowed(("Allow", "POST"), ("Content-Length", "0"))
"#;

fn stateless_upstream(dir: &Path) -> (Proc, String) {
    let (p, port) = py_upstream(dir, "stateless", STATELESS, &[]);
    (p, format!("http://127.0.0.1:{port}/mcp"))
}

/// POSTs `body` and returns (status, content type, body).
fn post_seen(url: &str, body: &Value) -> (u16, String, String) {
    let mut conn = post_open(url, body);
    let ct = conn.content_type().to_string();
    (conn.status, ct, text(&conn.body()))
}

/// Ten POSTs with the same id at once, each on its own stream; a 404 with a JSON-RPC error; a
/// plain-text 400; a GET refused with 405. The (status, results) each got.
fn stateless_round(url: &str) -> Vec<(u16, String, String)> {
    let handles: Vec<_> = (0..10)
        .map(|n| {
            let url = url.to_string();
            std::thread::spawn(move || {
                post_seen(
                    &url,
                    &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"count","arguments":{},"n":n,"_meta":{"progressToken":format!("t{n}")}}}),
                )
            })
        })
        .collect();
    let mut out: Vec<(u16, String, String)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    out.push(post_seen(
        url,
        &json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
    ));
    out.push(post_seen(
        url,
        &json!({"jsonrpc":"2.0","id":1,"method":"bad/header"}),
    ));
    let conn = http_open(url, "GET", &[("Accept", "text/event-stream")], b"");
    out.push((
        conn.status,
        conn.header("allow").unwrap_or_default().to_string(),
        String::new(),
    ));
    out
}

/// Only what the client sees of each answer: status, JSON-RPC results in order (no framing).
fn seen(round: &[(u16, String, String)]) -> Vec<(u16, Vec<Value>)> {
    round
        .iter()
        .map(|(st, _, body)| {
            let msgs: Vec<Value> = body
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or(Some(l)))
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect();
            (*st, msgs)
        })
        .collect()
}

#[test]
fn stateless_posts_with_one_id_each_get_their_own_answer_and_statuses_are_replayed() {
    let dir = tmp();
    let (_up, upstream) = stateless_upstream(dir.path());
    let tape = dir.path().join("stateless.jsonl");
    let direct = seen(&stateless_round(&upstream));
    for (n, (st, msgs)) in direct[..10].iter().enumerate() {
        assert_eq!(*st, 200);
        assert_eq!(msgs.last().unwrap()["result"]["n"], n, "{msgs:?}");
    }
    let rec = Served::record(&upstream, &tape);
    let recorded = seen(&stateless_round(&rec.url));
    rec.stop();
    assert_eq!(recorded, direct, "through record");
    let play = Served::play(&tape);
    let round = stateless_round(&play.url);
    let err = play.stop();
    let played = seen(&round);
    assert_eq!(played, direct, "against play; play said:\n{err}");
    // The 404 is a 404 with its JSON-RPC error, the plain-text 400 a plain-text 400, the GET a
    // 405 with `Allow: POST`.
    assert_eq!(round[10].0, 404);
    assert!(
        round[10].1.starts_with("application/json"),
        "{:?}",
        round[10]
    );
    assert_eq!(round[11].0, 400);
    assert_eq!(round[11].2, "Mcp-Method does not match the body");
    assert_eq!((round[12].0, round[12].1.as_str()), (405, "POST"));
}

/// What a client sees of an answer: status, `Content-Type`, `Mcp-Session-Id` (`"the
/// session's"` when it is the id of the session the client is in, `"another"` for any other:
/// ids differ from run to run) and body.
type Seen = (u16, Option<String>, Option<&'static str>, String);

/// The answer's head as [`Seen`], and its body unless `stream` (a GET stream stays open: its
/// head is what there is to compare).
fn seen_answer(mut s: HttpStream, sid: &str, stream: bool) -> Seen {
    let session =
        s.header("mcp-session-id")
            .map(|v| if v == sid { "the session's" } else { "another" });
    let ct = s.header("content-type").map(String::from);
    let status = s.status;
    let body = if stream {
        s.hang_up();
        String::new()
    } else {
        text(&s.body())
    };
    (status, ct, session, body)
}

/// Opens a session at `url` (`initialize`, then `notifications/initialized`): its id.
fn open_session(url: &str) -> String {
    let mut init = post_open_ok(url, &req(0, "initialize", init_params()));
    let sid = init
        .header("mcp-session-id")
        .expect("a session")
        .to_string();
    let _ = init.body();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let h = post_headers(&[
        ("Mcp-Session-Id", &sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]);
    let mut s = http_open(url, "POST", &h, initialized.to_string().as_bytes());
    assert_eq!(s.status, 202, "notifications/initialized at {url}");
    let _ = s.body();
    sid
}

/// GETs and DELETEs at `url` in the cases a client meets: the session's GET stream opened,
/// the session deleted; the same DELETE again, a GET of the deleted session, a GET of a
/// session the server never gave; a GET and a DELETE naming no session. What each got.
fn gets_and_deletes(url: &str) -> Vec<(&'static str, Seen)> {
    let sid = open_session(url);
    let version = ("MCP-Protocol-Version", "2025-06-18");
    let accept = ("Accept", "text/event-stream");
    let mine = [("Mcp-Session-Id", sid.as_str()), version, accept];
    let never = [("Mcp-Session-Id", "no-such-session-0123"), version, accept];
    let none = [version, accept];
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let steps: [(&str, &str, Headers); 7] = [
        ("GET, the session's stream", "GET", &mine),
        ("DELETE of the session", "DELETE", &mine),
        ("DELETE again", "DELETE", &mine),
        ("GET of the deleted session", "GET", &mine),
        ("GET of a session never given", "GET", &never),
        ("GET naming no session", "GET", &none),
        ("DELETE naming no session", "DELETE", &none),
    ];
    steps
        .into_iter()
        .map(|(what, method, h)| {
            let s = http_open(url, method, h, b"");
            // Only a GET that opened a stream has a body that does not end.
            let stream = s.status == 200 && method == "GET";
            (what, seen_answer(s, &sid, stream))
        })
        .collect()
}

/// Both reference servers, seen with curl too. The Python SDK's server: the GET stream `200
/// text/event-stream` with the session's id; DELETE `200 application/json`, no body, the
/// session's id; a DELETE or GET of a session it does not have `404` with the JSON-RPC error
/// "Session not found" and no id; a GET or DELETE naming none `400` with "Missing session ID"
/// and the id of a new session it never keeps. server-everything: the GET stream likewise;
/// DELETE `200`, no `Content-Type`, no body, no id; every other case `400` with the JSON-RPC
/// error "No valid session ID provided", no id. Play answers each as its server did (before:
/// no id on the GET stream, `200 text/plain` without an id to the DELETE, its own `404
/// text/plain` to the rest, which it never taped: the JSON-RPC errors were taped as messages).
#[test]
fn get_and_delete_are_answered_as_each_reference_server_answered_them() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let tape = dir.path().join("get-delete.jsonl");
        let (_server, upstream) = start(dir.path());
        let direct = gets_and_deletes(&upstream);
        let python = name == "the Python SDK";
        // What each server does, as seen with curl: a JSON-RPC error (status, session id, and
        // words of its message) to a request naming a session it does not have, and to one
        // naming none.
        type JsonError = (u16, Option<&'static str>, &'static str);
        let (unknown, none): (JsonError, JsonError) = if python {
            (
                (404, None, "Session not found"),
                (400, Some("another"), "Missing session ID"),
            )
        } else {
            let refused = (400, None, "No valid session ID provided");
            (refused, refused)
        };
        let is = |s: &Seen, (status, session, message): JsonError| {
            s.0 == status
                && s.1
                    .as_deref()
                    .is_some_and(|c| c.starts_with("application/json"))
                && s.2 == session
                && s.3.contains(message)
        };
        let get = &direct[0].1;
        assert_eq!(
            (get.0, get.1.as_deref(), get.2),
            (200, Some("text/event-stream"), Some("the session's")),
            "{name}: {direct:#?}"
        );
        let delete = &direct[1].1;
        let want_delete: Seen = if python {
            (
                200,
                Some("application/json".into()),
                Some("the session's"),
                String::new(),
            )
        } else {
            (200, None, None, String::new())
        };
        assert_eq!(delete, &want_delete, "{name}: {direct:#?}");
        for (what, s) in &direct[2..5] {
            assert!(is(s, unknown), "{name}: {what}: {s:?}");
        }
        for (what, s) in &direct[5..] {
            assert!(is(s, none), "{name}: {what}: {s:?}");
        }
        let rec = Served::record(&upstream, &tape);
        let recorded = gets_and_deletes(&rec.url);
        rec.stop();
        assert_eq!(recorded, direct, "{name}: through record --url");
        let play = Served::play(&tape);
        let played = gets_and_deletes(&play.url);
        let err = play.stop();
        assert_eq!(played, direct, "{name}: from the tape; play said:\n{err}");
        // The DELETE again, and the two GETs of a session play does not have (before, the
        // summary counted only POSTs).
        assert!(
            err.contains("refused 3 requests naming a session play does not have"),
            "{name}: the summary counts them: {err}"
        );
    }
}

/// In a new session at `url`: the session's GET stream, a second GET while it is open, and a
/// GET after the first was hung up (retried for up to 5 s while the server has not yet seen
/// the hang-up). What the second and the third got.
fn second_get_stream(url: &str) -> (Seen, Seen) {
    let sid = open_session(url);
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Accept", "text/event-stream"),
    ];
    let first = http_open(url, "GET", &h, b"");
    assert_eq!(first.status, 200, "the session's GET stream at {url}");
    let second = seen_answer(http_open(url, "GET", &h, b""), &sid, false);
    first.hang_up();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let third = loop {
        let s = http_open(url, "GET", &h, b"");
        let stream = s.status == 200;
        let seen = seen_answer(s, &sid, stream);
        if seen.0 != 409 || std::time::Instant::now() > until {
            break seen;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    (second, third)
}

/// Both reference servers allow one GET stream a session: a second GET while the first is open
/// is refused `409 Conflict` with a JSON-RPC error, and once the first is gone a GET opens the
/// stream again. Play answers the same: the recorded `409` when the tape has one, else its own
/// (before, play gave the second GET the session's stream and left the first open and silent).
#[test]
fn a_second_get_stream_in_a_session_is_refused_as_the_reference_servers_refuse_it() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let (_server, upstream) = start(dir.path());
        let (second, third) = second_get_stream(&upstream);
        assert_eq!(second.0, 409, "{name}: {second:?}");
        assert!(
            second
                .1
                .as_deref()
                .is_some_and(|c| c.starts_with("application/json"))
                && second
                    .3
                    .contains("Only one SSE stream is allowed per session"),
            "{name}: {second:?}"
        );
        assert_eq!(
            third.0, 200,
            "{name}: a GET after the first hung up: {third:?}"
        );
        let direct = (second, third);
        let tape = dir.path().join("second-get.jsonl");
        let rec = Served::record(&upstream, &tape);
        let recorded = second_get_stream(&rec.url);
        rec.stop();
        assert_eq!(recorded, direct, "{name}: through record --url");
        let play = Served::play(&tape);
        let played = second_get_stream(&play.url);
        let err = play.stop();
        assert_eq!(played, direct, "{name}: from the tape; play said:\n{err}");
        // A tape on which no client opened a second stream: play's own 409.
        let plain = dir.path().join("one-get.jsonl");
        let rec = Served::record(&upstream, &plain);
        gets_and_deletes(&rec.url);
        rec.stop();
        let play = Served::play(&plain);
        let (own, again) = second_get_stream(&play.url);
        let err = play.stop();
        assert_eq!(own.0, 409, "{name}: play's own; play said:\n{err}");
        assert!(
            own.1.as_deref() == Some("application/json")
                && own.3.contains("Only one SSE stream is allowed per session"),
            "{name}: {own:?}"
        );
        assert_eq!(again.0, 200, "{name}: {again:?}");
    }
}

/// A bad POST: JSON cut short.
const CUT_SHORT: &[u8] = b"[1,2";

/// In a new session at `url`, requests the tape of [`recorded_session`] has no answer for: a
/// ping, a call of a tool no server has, a POST of JSON cut short. What each got: status, the
/// media type (without parameters), the session id as in [`Seen`], and the JSON-RPC message
/// (from the JSON body or the SSE event).
type Own = (u16, String, Option<&'static str>, Value);
fn own_answers(url: &str) -> Vec<Own> {
    let sid = open_session(url);
    let h = post_headers(&[
        ("Mcp-Session-Id", &sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]);
    let ping = req(7, "ping", json!({}));
    let call = req(
        8,
        "tools/call",
        json!({"name": "no-such-tool", "arguments": {}}),
    );
    [
        ping.to_string().into_bytes(),
        call.to_string().into_bytes(),
        CUT_SHORT.to_vec(),
    ]
    .iter()
    .map(|b| {
        let s = http_open(url, "POST", &h, b);
        let (status, ct, session, body) = seen_answer(s, &sid, false);
        let media = ct
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        let msg = sse_messages(body.as_bytes()).pop().unwrap_or(Value::Null);
        (status, media, session, msg)
    })
    .collect()
}

/// The session the tape of [`own_answers`] holds: `tools/list`, and a POST that is not JSON
/// (which tells play how the server answers a POST it cannot read).
fn recorded_session(url: &str) {
    let sid = open_session(url);
    let h = post_headers(&[
        ("Mcp-Session-Id", &sid),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]);
    for body in [
        req(2, "tools/list", json!({})).to_string().into_bytes(),
        b"this is not json".to_vec(),
    ] {
        let _ = http_open(url, "POST", &h, &body).body();
    }
}

/// Play's own answers in a session — an unrecorded ping answered, a miss explained, its own
/// parse error — carry its session's id where the recorded server sent the session's id on its
/// answers: both reference servers send it on their answers to requests; on their `400` to a
/// POST they cannot read the Python SDK's server does, server-everything does not (seen with
/// curl too). Before, play's own answers never carried it. Both servers answer requests as an
/// SSE stream, and play's own answers to requests come so too (before, as JSON).
#[test]
fn plays_own_answers_carry_the_session_id_where_the_recorded_server_sent_it() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let (_server, upstream) = start(dir.path());
        let direct = own_answers(&upstream);
        let python = name == "the Python SDK";
        let session = |carried: bool| carried.then_some("the session's");
        assert_eq!(
            direct.iter().map(|o| (o.0, o.2)).collect::<Vec<_>>(),
            [
                (200, session(true)),
                (200, session(true)),
                (400, session(python))
            ],
            "{name}: {direct:#?}"
        );
        assert_eq!(direct[0].3["result"], json!({}), "{name}: {direct:#?}");
        assert_eq!(direct[2].1, "application/json", "{name}: {direct:#?}");
        // Through record --url, the same (onto a tape of their own).
        let rec = Served::record(&upstream, &dir.path().join("own-through.jsonl"));
        let through = own_answers(&rec.url);
        rec.stop();
        assert_eq!(through, direct, "{name}: through record --url");
        // Against play of a tape without them: play's own answers, each as the server's in
        // status and session id; the ping's result is the server's; the parse error is JSON.
        let tape = dir.path().join("own.jsonl");
        let rec = Served::record(&upstream, &tape);
        recorded_session(&rec.url);
        rec.stop();
        let mut play = Served::play(&tape);
        let played = own_answers(&play.url);
        let (st, err) = play.signal(libc::SIGINT, std::time::Duration::from_secs(20));
        assert_eq!(st.code(), Some(1), "{name}: a miss is exit 1: {err}");
        let head = |o: &[Own]| o.iter().map(|o| (o.0, o.2)).collect::<Vec<_>>();
        assert_eq!(
            head(&played),
            head(&direct),
            "{name}: from the tape; play said:\n{err}"
        );
        assert_eq!(played[0].3, direct[0].3, "{name}: the ping's answer");
        // Both servers answer requests over SSE, and so do play's own answers to them (before,
        // `application/json`); its parse error is JSON, as theirs.
        assert_eq!(direct[0].1, "text/event-stream", "{name}: {direct:#?}");
        let media = |o: &[Own]| o.iter().map(|o| o.1.clone()).collect::<Vec<_>>();
        assert_eq!(media(&played), media(&direct), "{name}: the media types");
        assert!(
            err.contains("no-such-tool"),
            "{name}: the miss explained: {err}"
        );
    }
}

/// POSTs of `tools/list` at `url` naming the session a DELETE just ended and one the server
/// never gave. What each got.
fn posts_to_sessions_gone(url: &str) -> Vec<(&'static str, Seen)> {
    let sid = open_session(url);
    let version = ("MCP-Protocol-Version", "2025-06-18");
    let mut ended = http_open(url, "DELETE", &[("Mcp-Session-Id", &sid), version], b"");
    assert_eq!(ended.status, 200, "DELETE of the session at {url}");
    let _ = ended.body();
    let list = req(5, "tools/list", json!({})).to_string();
    let cases: [(&str, &str); 2] = [
        ("POST naming the deleted session", &sid),
        ("POST naming a session never given", "no-such-session-0123"),
    ];
    cases
        .into_iter()
        .map(|(what, named)| {
            let h = post_headers(&[version, ("Mcp-Session-Id", named)]);
            let s = http_open(url, "POST", &h, list.as_bytes());
            (what, seen_answer(s, &sid, false))
        })
        .collect()
}

/// The JSON-RPC error of an answer seen, as `(code, message)`; `None` when its body is none.
fn json_rpc_error(s: &Seen) -> Option<(i64, String)> {
    let v: Value = serde_json::from_str(&s.3).ok()?;
    Some((
        v["error"]["code"].as_i64()?,
        v["error"]["message"].as_str()?.to_string(),
    ))
}

/// A POST naming a session the server does not have: both reference servers refuse it with a
/// JSON-RPC error, as they refuse a GET or a DELETE naming one (seen with curl: the Python
/// SDK's server `404` "Session not found", server-everything `400` "No valid session ID
/// provided"). Play answers as the recorded server answered a GET or a DELETE of the case; on
/// a tape that does not say, with its own JSON-RPC error, `404` "Session not found", and its
/// summary counts them. Before, play answered its own `404 text/plain`.
#[test]
fn posts_to_a_session_the_server_does_not_have_are_refused_as_it_refused_them() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let (_server, upstream) = start(dir.path());
        let direct = posts_to_sessions_gone(&upstream);
        for (what, s) in &direct {
            assert!(
                matches!(s.0, 400 | 404) && json_rpc_error(s).is_some(),
                "{name}: {what}: {s:?}"
            );
        }
        // A tape where the client met those cases with a GET and a DELETE: the recorded
        // answer, byte for byte.
        let tape = dir.path().join("get-delete.jsonl");
        let rec = Served::record(&upstream, &tape);
        let _ = gets_and_deletes(&rec.url);
        rec.stop();
        let play = Served::play(&tape);
        let played = posts_to_sessions_gone(&play.url);
        let err = play.stop();
        assert_eq!(played, direct, "{name}: from the tape; play said:\n{err}");
        // A tape that does not say: play's own JSON-RPC error.
        let tape = dir.path().join("posts-only.jsonl");
        let rec = Served::record(&upstream, &tape);
        recorded_session(&rec.url);
        rec.stop();
        let play = Served::play(&tape);
        let played = posts_to_sessions_gone(&play.url);
        let err = play.stop();
        let own: Vec<_> = played
            .iter()
            .map(|(_, s)| (s.0, s.1.as_deref(), s.2, json_rpc_error(s).map(|e| e.0)))
            .collect();
        let own_error = (404, Some("application/json"), None, Some(-32600));
        assert_eq!(
            own,
            [own_error, own_error],
            "{name}: play's own answers: {played:#?}\nplay said:\n{err}"
        );
        assert!(
            json_rpc_error(&played[0].1).is_some_and(|e| e.1.starts_with("Session not found")),
            "{name}: {played:#?}"
        );
        assert!(
            err.contains("refused 2 requests naming a session play does not have"),
            "{name}: the summary counts them: {err}"
        );
    }
}

/// In a session's company (one opened first), POSTs of `tools/list` at `url` naming no
/// session and naming one the server never gave; then `tools/list` in the session. What the
/// two got, and the session's answer (its JSON-RPC message).
fn posts_outside_a_session(url: &str) -> (Vec<(&'static str, Seen)>, Value) {
    let sid = open_session(url);
    let version = ("MCP-Protocol-Version", "2025-06-18");
    let list = req(5, "tools/list", json!({})).to_string();
    let cases: [(&str, &[(&str, &str)]); 2] = [
        ("POST naming no session", &[version]),
        (
            "POST naming a session never given",
            &[version, ("Mcp-Session-Id", "no-such-session-0123")],
        ),
    ];
    let seen = cases
        .into_iter()
        .map(|(what, h)| {
            let s = http_open(url, "POST", &post_headers(h), list.as_bytes());
            (what, seen_answer(s, &sid, false))
        })
        .collect();
    let h = post_headers(&[version, ("Mcp-Session-Id", &sid)]);
    let mut s = http_open(url, "POST", &h, list.as_bytes());
    let mine = sse_messages(&s.body()).pop().unwrap_or(Value::Null);
    (seen, mine)
}

/// A POST naming no session, or one the server never gave, is refused by both reference
/// servers before they read the request: server-everything `400` with a JSON-RPC error of id
/// `null` (no session) or none (unknown), the Python SDK's server `400` "Missing session ID" and
/// `404` "Session not found" with the id `"server-error"` (seen with curl too). Recorded, those
/// errors answer the request their POST carried, and play gives them again byte for byte,
/// status and headers too; the same call in a session is not answered with them. On a tape
/// whose server gave sessions and served no request outside one, a POST naming no session gets
/// play's own `400`. Before: the recorded errors belonged to no request, play said the server
/// "never answered" the request (`200`), and served a POST naming no session from the tape
/// as if the server served requests without one.
#[test]
fn posts_naming_no_session_or_an_unknown_one_are_answered_as_the_server_answered_them() {
    for (name, start) in reference_http_servers() {
        let dir = tmp();
        let (_server, upstream) = start(dir.path());
        let (direct, direct_mine) = posts_outside_a_session(&upstream);
        for (what, s) in &direct {
            assert!(
                matches!(s.0, 400 | 404) && json_rpc_error(s).is_some(),
                "{name}: {what}: {s:?}"
            );
        }
        assert!(
            direct_mine["result"]["tools"].is_array(),
            "{name}: {direct_mine}"
        );
        let tape = dir.path().join("outside.jsonl");
        let rec = Served::record(&upstream, &tape);
        let through = posts_outside_a_session(&rec.url);
        rec.stop();
        assert_eq!(through.0, direct, "{name}: through the recorder");
        let play = Served::play(&tape);
        let (played, played_mine) = posts_outside_a_session(&play.url);
        let err = play.stop();
        assert_eq!(played, direct, "{name}: from the tape; play said:\n{err}");
        assert_eq!(
            played_mine, through.1,
            "{name}: in the session; play said:\n{err}"
        );
        assert!(
            err.contains("refused 1 request naming no session")
                && err.contains("refused 1 request naming a session play does not have")
                && err.contains("every recorded exchange was used"),
            "{name}: the summary: {err}"
        );
        // Checked against the same server, which check drives in its own session: the two
        // refusals are not graded against its answers there (before: regressions).
        let out = Mt::new(["check", &s(&tape), "--url", &upstream]).run();
        assert_eq!(out.code(), 0, "{name}: {}", out.console());
        assert!(
            out.stdout.contains("0 regressions") && out.stdout.contains("2 not on the tape"),
            "{name}: {}",
            out.console()
        );
        // A tape of a session alone: the server gave sessions and served nothing outside one.
        let tape = dir.path().join("session-only.jsonl");
        let rec = Served::record(&upstream, &tape);
        recorded_session(&rec.url);
        rec.stop();
        let play = Served::play(&tape);
        let (played, played_mine) = posts_outside_a_session(&play.url);
        let err = play.stop();
        let no_session = &played[0].1;
        assert_eq!(
            (no_session.0, no_session.1.as_deref(), no_session.2),
            (400, Some("application/json"), None),
            "{name}: play's own answer: {played:#?}\nplay said:\n{err}"
        );
        assert!(
            json_rpc_error(no_session).is_some_and(|e| e
                .1
                .starts_with("Bad Request: Mcp-Session-Id header is required")),
            "{name}: {no_session:?}"
        );
        assert!(
            played_mine["result"]["tools"].is_array(),
            "{name}: in the session: {played_mine}\nplay said:\n{err}"
        );
        assert!(
            err.contains("refused 1 request naming no session"),
            "{name}: the summary: {err}"
        );
    }
}
