//! `mcptape run` with an MCP server over HTTP, end to end: a scripted agent (stdlib Python) reads
//! its `--mcp-config` as Claude Code does and calls a tool of server W, a stdlib HTTP MCP server
//! on loopback, with a token in the arguments. The run is recorded with the marker key
//! (`MCPTAPE_REDACT_KEY`), then replayed (`--replay`) and played back (`--playback`) with the
//! server stopped: the run's player for W matches a token by its marker's hash only with the
//! tape's own key, and a miss's explanation — on stderr and back to the agent — never quotes a
//! token the agent sent.

use crate::harness::*;
use std::path::PathBuf;

const KEY: &str = "k3y-0f-the-ci-s3cret-store-2026";
const OTHER_KEY: &str = "another-key-of-32-characters-xx";
const TOKEN_A: &str = "ghp_Q7wE3rT9yU1iO5pA2sD8fG4hJ6kL0zXcV1bN";
const TOKEN_B: &str = "ghp_Zz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8";
const TOKEN_C: &str = "ghp_Aa1bB2cC3dD4eE5fF6gG7hH8iI9jJ0kK1lL2";

/// Server W over HTTP (a handler of [`py_upstream`]): `initialize`, and every `tools/call`
/// answered `answer N`, N counting its calls: which recorded call a replay served shows in
/// the answer, whatever token it was asked with.
const SERVER: &str = r#"
calls = []

class H(Quiet):
    def do_POST(self):
        msg, method, rid = self.read_msg()
        if rid is None or method is None:
            return self.accepted()
        if method == "initialize":
            r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                 "serverInfo": {"name": "issuer", "version": "1"}}
        else:
            calls.append(rid)
            r = {"content": [{"type": "text", "text": "answer %d" % len(calls)}]}
        self.send_json({"jsonrpc": "2.0", "id": rid, "result": r})

    def do_GET(self):
        self.not_allowed(("Allow", "POST"))

    def do_DELETE(self):
        self.not_allowed(("Allow", "POST"))
"#;

/// The agent: `agent.py TOKEN… --mcp-config FILE` (the flag last: `run` reads the values after
/// it up to the next flag as config files). Initializes with server W of the config, then calls
/// `issue` once per token, in order, printing a line each: the answer's text, or `error: ` and
/// the JSON-RPC error's message.
const AGENT: &str = r#"
import json, sys, urllib.request

args = sys.argv[1:]
tokens, cfg = [], None
while args:
    a = args.pop(0)
    if a == "--mcp-config":
        cfg = args.pop(0)
    elif a.startswith("--mcp-config="):
        cfg = a.split("=", 1)[1]
    else:
        tokens.append(a)
url = json.load(open(cfg))["mcpServers"]["W"]["url"]
session = None

def rpc(msg):
    global session
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=headers,
                                 method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        session = r.headers.get("Mcp-Session-Id") or session
        ctype = r.headers.get("Content-Type", "")
        body = r.read().decode()
    if "id" not in msg:
        return None
    if ctype.startswith("text/event-stream"):
        for line in body.splitlines():
            if line.startswith("data:"):
                m = json.loads(line[5:])
                if m.get("id") == msg["id"]:
                    return m
        raise SystemExit("no answer to %s in the stream: %r" % (msg["id"], body))
    return json.loads(body)

rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "scripted-agent", "version": "1"}}})
rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
for n, token in enumerate(tokens, 1):
    m = rpc({"jsonrpc": "2.0", "id": n, "method": "tools/call",
             "params": {"name": "issue", "arguments": {"token": token}}})
    if "result" in m:
        print(m["result"]["content"][0]["text"], flush=True)
    else:
        print("error: " + m["error"]["message"].replace("\n", " | "), flush=True)
"#;

/// A test's folder: the agent, its MCP config naming W at `url`, a home, the tape.
struct Bed {
    dir: tempfile::TempDir,
    agent: PathBuf,
    config: PathBuf,
    home: PathBuf,
    tape: PathBuf,
}

impl Bed {
    fn new(url: &str, dir: tempfile::TempDir) -> Bed {
        let agent = dir.path().join("agent.py");
        std::fs::write(&agent, AGENT).unwrap();
        let config = dir.path().join("mcp.json");
        let cfg = serde_json::json!({"mcpServers": {"W": {"type": "http", "url": url}}});
        std::fs::write(&config, cfg.to_string()).unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let tape = dir.path().join("run.jsonl");
        Bed {
            dir,
            agent,
            config,
            home,
            tape,
        }
    }

    /// `mcptape run MODE… --tape TAPE -- python agent.py TOKENS… --mcp-config CFG` with the
    /// marker key `key` (or none).
    fn run(&self, mode: &[&str], key: Option<&str>, tokens: &[&str]) -> Run {
        let mut mt = Mt::new(["run"])
            .args(mode)
            .arg("--tape")
            .arg(&self.tape)
            .arg("--")
            .arg(python())
            .arg(&self.agent)
            .args(tokens)
            .arg("--mcp-config")
            .arg(&self.config)
            .env("MCPTAPE_DIR", self.dir.path().join("store"))
            .env("HOME", &self.home)
            .env_remove("MCPTAPE_REDACT_KEY")
            .dir(&self.home);
        if let Some(k) = key {
            mt = mt.env("MCPTAPE_REDACT_KEY", k);
        }
        mt.run()
    }
}

/// Requires that no token is quoted: neither on mcptape's stderr nor in what the agent was
/// answered (its stdout).
#[track_caller]
fn assert_no_token(run: &Run) {
    for t in [TOKEN_A, TOKEN_B, TOKEN_C] {
        assert!(
            !run.stdout.contains(t) && !run.stderr.contains(t),
            "{t} quoted: {}",
            run.console()
        );
    }
}

/// A run recorded in `dir` with the marker key: the agent calls `issue` with token A, then B,
/// through mcptape to W, which is stopped afterwards. The tokens are not on the tape, the
/// header names the key, and both calls are on it as W's.
fn recorded(dir: tempfile::TempDir) -> Bed {
    let (mut server, port) = py_upstream(dir.path(), "issuer", SERVER, &[]);
    let bed = Bed::new(&format!("http://127.0.0.1:{port}/mcp"), dir);
    let rec = bed.run(&[], Some(KEY), &[TOKEN_A, TOKEN_B]).success();
    assert_eq!(rec.stdout, "answer 1\nanswer 2\n", "{}", rec.console());
    assert!(!rec.stderr.contains("left live"), "{}", rec.console());
    // Replayed from the tape from now on: the server is gone.
    server.stop(libc::SIGTERM, std::time::Duration::from_secs(10));
    let raw = std::fs::read_to_string(&bed.tape).unwrap();
    for t in [TOKEN_A, TOKEN_B] {
        assert!(!raw.contains(t), "{t} on the tape");
    }
    let calls = tape_msgs(&bed.tape)
        .iter()
        .filter(|m| m["server"] == "W" && m["dir"] == "c2s" && m["method"] == "tools/call")
        .count();
    assert_eq!(calls, 2, "W's calls on the tape");
    let header = &tape_lines(&bed.tape)[0];
    assert!(
        header["marker_key"].is_string(),
        "made with a key: {header}"
    );
    bed
}

/// The agent's line for a call the tape has no answer left for: the explanation, the token
/// quoted as a marker.
const MISSED: &str = r#"error: mcptape: no recorded answer for tools/call {"arguments":{"token":"[REDACTED:key:token:"#;

/// Recorded with the marker key, then for `--replay` (the model live) and `--playback` (offline):
/// with the tape's key, tokens B and A are each served the call recorded with them (out of
/// recorded order), and a third token, C, finds every answer used: a miss, explained on stderr
/// and to the agent with C as a marker. With no key, or another key than the tape's, markers
/// are wildcards: B gets the first recorded call (said), C the second, A misses; another key is
/// said not to be the tape's. No token is quoted anywhere.
#[test]
fn a_replayed_http_server_matches_with_the_tapes_key_only_and_never_quotes_a_token() {
    let bed = recorded(tmp());
    for mode in ["--replay", "--playback"] {
        let run = bed
            .run(&[mode], Some(KEY), &[TOKEN_B, TOKEN_A, TOKEN_C])
            .success();
        assert_no_token(&run);
        let lines: Vec<&str> = run.stdout.lines().collect();
        assert_eq!(lines[..2], ["answer 2", "answer 1"], "{}", run.console());
        assert!(lines[2].starts_with(MISSED), "{}", run.console());
        assert_contains(
            &run.stderr,
            "mcptape play: no recorded answer for tools/call {\"arguments\":{\"token\":\"[REDACTED:key:token:",
        );
        assert_contains(
            &run.stderr,
            "  asked:  tools/call {\"arguments\":{\"token\":\"[REDACTED:key:token:",
        );
        assert!(
            !run.stderr.contains("differ only in redacted values"),
            "matched by the key, not as wildcards: {}",
            run.console()
        );
        assert!(
            !run.stderr.contains("MCPTAPE_REDACT_KEY is not the key"),
            "{}",
            run.console()
        );

        for key in [None, Some(OTHER_KEY)] {
            let run = bed
                .run(&[mode], key, &[TOKEN_B, TOKEN_C, TOKEN_A])
                .success();
            assert_no_token(&run);
            let lines: Vec<&str> = run.stdout.lines().collect();
            assert_eq!(lines[..2], ["answer 1", "answer 2"], "{}", run.console());
            assert!(lines[2].starts_with(MISSED), "{}", run.console());
            assert_contains(
                &run.stderr,
                "mcptape play: WARNING: tools/call issue fits 2 recorded requests that differ only in redacted values; served the one at line 8",
            );
            // Told apart by no key: not "none of them was recorded with the values sent";
            // the user's key, when set, named as another (it said "with MCPTAPE_REDACT_KEY set
            // to that key", as if none were set).
            let tape_id = tape_lines(&bed.tape)[0]["marker_key"]
                .as_str()
                .expect("the header names the key")
                .to_string();
            let why = match key {
                None => format!("The tape holds markers, not the secrets; its markers were made with a marker key (id {tape_id}) and MCPTAPE_REDACT_KEY is not set: with it set to that key, play serves the one recorded with the client's values"),
                Some(_) => format!(
                    "The tape holds markers, not the secrets; its markers were made with a marker key (id {tape_id}) and MCPTAPE_REDACT_KEY is another key (id {}): with it set to the tape's key, play serves the one recorded with the client's values",
                    crate::secret_args::another_key_id(&run.stderr, &tape_id)
                ),
            };
            assert_contains(
                &run.stderr,
                &format!("mcptape play: WARNING: tools/call issue fits 2 recorded requests that differ only in redacted values; served the one at line 8, the first unused in play's order. {why} (said once for this request; play's summary counts every call it applied to)\n"),
            );
            assert_eq!(
                run.stderr.contains(
                    "mcptape run: MCPTAPE_REDACT_KEY is not the key this tape's markers were made with (its id is "
                ) && run.stderr.contains(
                    "redacted values in requests to the MCP server W match as wildcards"
                ),
                key.is_some(),
                "another key than the tape's is said: {}",
                run.console()
            );
        }
    }
}
