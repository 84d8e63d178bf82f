//! What HTTP says outside message bodies goes through the redactor too, and credentials in the
//! upstream URL never travel in `Host` or reach the tape.

use crate::harness::*;
use base64::Engine as _;
use serde_json::Value;
use std::path::Path;

const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZXNzaW9uLTQyIiwiZXhwIjo5OTk5OTk5OTk5fQ.Q2hhbmdlTWVQbGVhc2VTaWduYXR1cmUx";
/// A session id of no recognizable shape: a credential all the same while the session lives.
const SESSION: &str = "plain-session-4242";
const ERROR_SECRET: &str = "sk-proj-ErrBodyT0kenAbcdefghijklmnop99";
const EVENT_ID: &str = "evt-ghp_EventIdT0kenAbcdefghijklmnopqrstuv12";

/// An upstream that tells what it got: each answer echoes the `Host` and `Authorization`
/// headers; `initialize` sets a plain session id; `fail` is a plain-text 401 quoting a key;
/// `stream` answers over SSE with an event id that holds a token; GET is refused.
const UPSTREAM: &str = r#"
SESSION, SECRET, EVENT = sys.argv[2], sys.argv[3], sys.argv[4]
class H(Quiet):
    def do_POST(self):
        body, m, rid = self.read_msg()
        if rid is None:
            self.accepted(); return
        if m == "fail":
            out = ("invalid key %s for this account" % SECRET).encode()
            self.send_response(401); self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out); return
        res = {"jsonrpc": "2.0", "id": rid, "result": {"host": self.headers.get("Host"), "auth": self.headers.get("Authorization")}}
        if m == "stream":
            self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
            self.wfile.write(("id: %s\ndata: %s\n\n" % (EVENT, json.dumps(res))).encode()); return
        self.send_json(res, headers=[("Mcp-Session-Id", SESSION)] if m == "initialize" else [])
    def do_GET(self):
        self.not_allowed(("Allow", "POST"), ("Content-Length", "0"))
"#;

fn upstream(dir: &Path) -> (Proc, u16) {
    py_upstream(
        dir,
        "upstream",
        UPSTREAM,
        &[SESSION, ERROR_SECRET, EVENT_ID],
    )
}

fn call(url: &str, id: u64, method: &str, session: Option<&str>) -> (u16, String) {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{}}}}"#);
    let mut extra = vec![
        ("Mcp-Param-Note", "ghp_ParamHeaderT0kenAbcdefghijklmnopqr12"),
        ("Mcp-Param-Token", JWT),
    ];
    if let Some(s) = session {
        extra.push(("Mcp-Session-Id", s));
    }
    let headers = post_headers(&extra);
    let (status, body) = http(url, "POST", &headers, body.as_bytes());
    (status, text(&body))
}

#[test]
fn url_credentials_become_basic_auth_upstream_and_nothing_secret_reaches_the_tape() {
    let dir = tmp();
    let (_up, port) = upstream(dir.path());
    let tape = dir.path().join("t.jsonl");
    let rec = Served::spawn(&[
        "record",
        "--url",
        &format!("http://ann:p%40ss-w0rd@127.0.0.1:{port}/mcp?token=QueryT0kenValue42"),
        "--tape",
        &s(&tape),
    ]);
    let (st, body) = call(&rec.url, 0, "initialize", None);
    assert_eq!(st, 200, "{body}");
    let got: Value = serde_json::from_str(&body).unwrap();
    // Host is the upstream's own; the credentials arrived as Basic auth, decoded.
    assert_eq!(got["result"]["host"], format!("127.0.0.1:{port}"), "{got}");
    let basic = base64::engine::general_purpose::STANDARD.encode("ann:p@ss-w0rd");
    assert_eq!(got["result"]["auth"], format!("Basic {basic}"), "{got}");
    let (_, body) = call(&rec.url, 1, "tools/list", Some(SESSION));
    assert_contains(&body, "Basic");
    let (st, body) = call(&rec.url, 2, "fail", Some(SESSION));
    assert_eq!(
        (st, body.contains(ERROR_SECRET)),
        (401, true),
        "the client gets it all"
    );
    let (_, body) = call(&rec.url, 3, "stream", Some(SESSION));
    assert!(
        body.contains(EVENT_ID),
        "the client gets the event id: {body}"
    );
    // A GET (refused) is an event on the tape, with the session id it carried.
    let get = http_open(
        &rec.url,
        "GET",
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", SESSION)],
        b"",
    );
    assert_eq!(get.status, 405);
    let err = rec.stop();
    assert!(!err.contains("p%40ss") && !err.contains("p@ss"), "{err}");
    let raw = std::fs::read_to_string(&tape).unwrap();
    for secret in [
        "p%40ss-w0rd",
        "p@ss-w0rd",
        basic.as_str(),
        "QueryT0kenValue42",
        JWT,
        SESSION,
        ERROR_SECRET,
        EVENT_ID,
        "ghp_ParamHeaderT0kenAbcdefghijklmnopqr12",
    ] {
        assert!(!raw.contains(secret), "{secret} on the tape:\n{raw}");
    }
    // The upstream URL on the server line keeps its user, not its password or token.
    let server = tape_lines(&tape)
        .into_iter()
        .find(|l| l["type"] == "server")
        .unwrap();
    let url = server["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("http://ann@127.0.0.1:{port}/mcp?token=[REDACTED:")),
        "{url}"
    );
    // And `lint` finds nothing left.
    Mt::new(["lint"]).arg(&tape).run().success();
}
