//! `mcptape model-proxy` with real agents and real SDKs (tests/agents): Claude Code and Codex CLI
//! recorded through the proxy in front of the scripted fake provider, with a real MCP server
//! (`mcp-server-everything`, stdio), then replayed from the tape with the provider gone; faults
//! recorded and replayed; a miss explained; the official Python SDKs parsing replayed streams;
//! secrets kept off the tape yet matched on replay. Everything of a test runs in a loopback-only
//! network namespace of its own (see [`bed::Net`]).
//!
//! Every replay runs with the recording's fake provider stopped and a fresh fake, a sentinel,
//! listening on its port (the upstream the tape names): a replay must leave its log empty.

pub(crate) mod bed;

use crate::harness::*;
use bed::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A test's folder, its network namespace and the agents' fixed paths.
struct Bed {
    dir: tempfile::TempDir,
    net: Net,
    root: Root,
}

/// A run recorded through `model-proxy`.
struct Recording {
    tape: PathBuf,
    /// The fake provider's port: where the sentinel listens on replay.
    upstream_port: String,
    run: AgentRun,
    fake_log: Vec<Value>,
}

/// A run replayed by `model-proxy --playback`.
struct Replay {
    run: AgentRun,
    code: i32,
    stderr: String,
    /// The sentinel's log: connections and requests that reached the recorded upstream address.
    sentinel: Vec<Value>,
}

impl Replay {
    /// Requires playback to have served all `n` calls (nothing missed, nothing left) and the
    /// upstream address to have seen nothing.
    #[track_caller]
    fn served_all(&self, n: u64) {
        assert_eq!(
            self.code,
            0,
            "playback exit code; stderr:\n{}\n{}",
            self.stderr,
            self.run.console()
        );
        assert_contains(&self.stderr, &summary(n, 0, 0, 0));
        assert!(
            self.sentinel.is_empty(),
            "playback reached the recorded upstream: {:?}",
            self.sentinel
        );
    }
}

impl Bed {
    fn new() -> Bed {
        let dir = tmp();
        let net = Net::new();
        let root = Root::new(dir.path());
        Bed { dir, net, root }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `agent` with [`PROMPT`] through `model-proxy` in front of the fake provider (with
    /// `fake_args`, e.g. `--fault KIND`); the proxy must exit 0 on SIGTERM.
    fn record(&self, agent: Agent, fake_args: &[&str]) -> Recording {
        let tape = self.path().join("model.jsonl");
        let fake = Fake::start(&self.net, self.path(), "fake", fake_args);
        let proxy = Proxy::record(&self.net, self.path(), "record", &tape, &fake.url);
        let run = self.root.run(&self.net, agent, &proxy.url, PROMPT);
        let (code, stderr) = proxy.stop();
        assert_eq!(code, 0, "model-proxy (record) exit code; stderr:\n{stderr}");
        let upstream_port = fake.port();
        let url = fake.url.clone();
        let fake_log = fake.stop();
        let lines = tape_lines(&tape);
        // The summary counts the calls (their requests), and the tape lines they took.
        let calls = lines
            .iter()
            .filter(|l| l["type"] == "model" && l["part"] == "request")
            .count();
        let taped = lines.iter().filter(|l| l["type"] == "model").count();
        let s = if calls == 1 { "" } else { "s" };
        assert_contains(
            &stderr,
            &format!("recorded {calls} model call{s} to {}", tape.display()),
        );
        assert_contains(&stderr, &format!("({taped} lines: "));
        let declared = lines
            .into_iter()
            .find(|l| l["type"] == "server")
            .expect("a server line");
        assert_eq!(declared["transport"], "model_api", "{declared}");
        assert_eq!(
            declared["url"],
            url.as_str(),
            "the tape names its upstream: {declared}"
        );
        Recording {
            tape,
            upstream_port,
            run,
            fake_log,
        }
    }

    /// `agent` with `prompt` against `model-proxy --playback` of `tape`, the recorded upstream's
    /// port taken by a sentinel fake provider.
    fn replay(&self, name: &str, agent: Agent, rec: &Recording, prompt: &str) -> Replay {
        let sentinel = Fake::start(
            &self.net,
            self.path(),
            &format!("{name}-sentinel"),
            &["--port", &rec.upstream_port],
        );
        let proxy = Proxy::play(&self.net, self.path(), name, &rec.tape);
        let run = self.root.run(&self.net, agent, &proxy.url, prompt);
        let (code, stderr) = proxy.stop();
        Replay {
            run,
            code,
            stderr,
            sentinel: sentinel.stop(),
        }
    }
}

/// The model requests the fake provider got: (path, status, reply).
fn requests(log: &[Value]) -> Vec<(String, u64, String)> {
    posts(log)
        .into_iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap_or_default().to_string(),
                r["status"].as_u64().unwrap_or_default(),
                r["reply"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn has_tool_result(request: &Value) -> bool {
    let t = request.to_string();
    t.contains(r#""type":"tool_result""#) || t.contains(r#""type":"function_call_output""#)
}

/// Requires `c` to be a streamed 200 answer of `endpoint` whose events run from `first` to
/// `last`; returns its event names.
#[track_caller]
fn streamed(c: &TapedCall, endpoint: &str, first: &str, last: &str) -> Vec<String> {
    assert_eq!(
        (c.endpoint.as_str(), c.stream, c.status),
        (endpoint, true, Some(200))
    );
    let names = c.event_names();
    assert_eq!(names.first().map(String::as_str), Some(first), "{names:?}");
    assert_eq!(names.last().map(String::as_str), Some(last), "{names:?}");
    names
}

// --- 1, 2: whole agent runs, replayed offline --------------------------------------------------

#[test]
fn claude_code_run_replays_offline_twice_with_the_same_result() {
    let bed = Bed::new();
    let rec = bed.record(Agent::Claude, &[]);
    let answer = rec.run.ok();
    let m = "/v1/messages?beta=true";
    assert_eq!(
        requests(&rec.fake_log),
        [
            (m.into(), 200, "tool mcp__S__echo".into()),
            (m.into(), 200, "final".into())
        ],
        "what the fake provider answered"
    );

    let calls = taped_calls(&rec.tape);
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for c in &calls {
        let names = streamed(c, "messages", "message_start", "message_stop");
        let end = c.end.as_ref().expect("an end line");
        assert_eq!(end["events"], names.len(), "{end}");
        assert!(end.get("cut").is_none(), "{end}");
    }
    assert_eq!(calls[0].summary["tool_calls"], json!(["mcp__S__echo"]));
    assert_eq!(calls[1].summary["stop"], "end_turn");
    assert!(!has_tool_result(&calls[0].request) && has_tool_result(&calls[1].request));
    assert_eq!(
        calls[0].request["messages"][0]["content"][1]["text"],
        PROMPT
    );
    assert_intact_and_clean(&rec.tape);
    Mt::new(["show"])
        .arg(&rec.tape)
        .run()
        .success()
        .stdout_contains("anthropic messages");

    for name in ["replay1", "replay2"] {
        let r = bed.replay(name, Agent::Claude, &rec, PROMPT);
        r.served_all(2);
        assert_eq!(r.run.ok(), answer, "{name}: {}", r.run.console());
        assert_eq!(
            r.run.claude_json()["num_turns"],
            rec.run.claude_json()["num_turns"]
        );
    }
}

#[test]
fn codex_run_replays_offline_twice_with_the_same_answer() {
    let bed = Bed::new();
    let rec = bed.record(Agent::Codex, &[]);
    let answer = rec.run.ok();
    let r = "/v1/responses";
    assert_eq!(
        requests(&rec.fake_log),
        [
            (r.into(), 200, "tool echo".into()),
            (r.into(), 200, "final".into())
        ],
        "what the fake provider answered"
    );

    let calls = taped_calls(&rec.tape);
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for c in &calls {
        streamed(c, "responses", "response.created", "response.completed");
    }
    assert!(!has_tool_result(&calls[0].request) && has_tool_result(&calls[1].request));
    assert_intact_and_clean(&rec.tape);

    for name in ["replay1", "replay2"] {
        let r = bed.replay(name, Agent::Codex, &rec, PROMPT);
        r.served_all(2);
        assert_eq!(r.run.ok(), answer, "{name}: {}", r.run.console());
    }
}

// --- 3: faults, recorded and replayed ------------------------------------------------------------

/// Claude Code through a provider that fails once with `fault`: it retries; the tape holds the
/// failed call, the retry and the last call. Returns the bed, the recording and the calls.
fn claude_through_fault(fault: &str) -> (Bed, Recording, Vec<TapedCall>) {
    let bed = Bed::new();
    let rec = bed.record(Agent::Claude, &["--fault", fault]);
    rec.run.ok();
    let got = requests(&rec.fake_log);
    assert_eq!(
        got.len(),
        3,
        "the failure, the retry, the last call: {got:?}"
    );
    assert!(got[0].2.contains(&format!("fault {fault}")), "{got:?}");
    assert_eq!(got[2].2, "final", "{got:?}");

    let calls = taped_calls(&rec.tape);
    assert_eq!(calls.len(), 3, "{calls:#?}");
    assert!(!has_tool_result(&calls[1].request) && has_tool_result(&calls[2].request));
    assert_eq!(
        calls[1].summary["tool_calls"],
        json!(["mcp__S__echo"]),
        "{:?}",
        calls[1]
    );
    assert_eq!(calls[2].summary["stop"], "end_turn", "{:?}", calls[2]);
    assert_intact_and_clean(&rec.tape);
    (bed, rec, calls)
}

/// Playback of a fault's recording: the failure is replayed first (the retry asks again, and
/// gets the recorded retry's answer), every call is used, and the run ends with the same answer.
fn claude_replays_the_recovery(bed: &Bed, rec: &Recording) {
    let r = bed.replay("replay", Agent::Claude, rec, PROMPT);
    assert_eq!(r.run.ok(), rec.run.ok(), "{}", r.run.console());
    r.served_all(3);
}

fn claude_recovers_from(fault: &str) -> Vec<TapedCall> {
    let (bed, rec, calls) = claude_through_fault(fault);
    claude_replays_the_recovery(&bed, &rec);
    calls
}

#[test]
fn claude_code_stream_error_event_is_replayed_then_the_retry() {
    let calls = claude_recovers_from("event-error-once");
    let c = &calls[0];
    assert_eq!((c.stream, c.status), (true, Some(200)));
    assert_eq!(c.event_names(), ["message_start", "error"]);
    assert_eq!(c.events[1].1["error"]["type"], "overloaded_error");
    assert!(
        c.end.as_ref().expect("end").get("cut").is_none(),
        "the stream ended cleanly"
    );
    assert_eq!(
        calls[1].request, c.request,
        "Claude Code retries with the same body"
    );
}

#[test]
fn claude_code_server_error_is_replayed_then_the_retry() {
    let calls = claude_recovers_from("server-error-once");
    let c = &calls[0];
    assert_eq!(c.status, Some(500));
    assert_eq!(
        c.body.as_ref().expect("a body")["error"]["type"],
        "api_error"
    );
    assert!(c.events.is_empty());
    assert_eq!(
        calls[1].request, c.request,
        "Claude Code retries with the same body"
    );
}

#[test]
fn claude_code_overload_is_replayed_then_the_retry() {
    let calls = claude_recovers_from("overload-once");
    let c = &calls[0];
    assert_eq!(c.status, Some(529));
    assert_eq!(
        c.body.as_ref().expect("a body")["error"]["type"],
        "overloaded_error"
    );
    assert_eq!(
        calls[1].request, c.request,
        "Claude Code retries with the same body"
    );
}

#[test]
fn claude_code_cut_stream_is_replayed_as_a_cut() {
    let (bed, rec, calls) = claude_through_fault("cut-stream-once");
    let c = &calls[0];
    assert_eq!((c.stream, c.status), (true, Some(200)));
    assert_eq!(c.event_names(), ["message_start", "ping"]);
    let end = c.end.as_ref().expect("end");
    assert!(end["cut"].is_string(), "the cut is on the tape: {end}");
    // Claude Code retries a stream cut before any content as a non-streaming request (when it
    // saw the two events, then the cut): another call on the tape.
    assert_eq!(
        calls[1].request.get("stream"),
        None,
        "{}",
        calls[1].request["stream"]
    );
    assert_eq!(calls[1].status, Some(200));
    assert!(calls[1].body.is_some() && calls[1].events.is_empty());

    // The replayed cut, as a plain HTTP client sees it: the answer's head and the two recorded
    // events, then the connection closes with the chunked body unfinished.
    let body = write_json(bed.path(), "call1.json", &c.request);
    let proxy = Proxy::play(&bed.net, bed.path(), "raw-play", &rec.tape);
    let mut cmd = bed.net.cmd(which("python3"));
    cmd.arg(agents_dir().join("http_client.py"))
        .args(["raw", &proxy.url, "/v1/messages?beta=true"])
        .arg(&body);
    let out = run_with_timeout(cmd, std::time::Duration::from_secs(30));
    let (code, stderr) = proxy.stop();
    assert!(
        out.status.success(),
        "http_client raw: {}",
        text(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(code, 0, "{stderr}");
    assert_contains(&stderr, &summary(1, 0, 0, 2));
    assert_eq!(
        (&seen["status"], &seen["chunked"], &seen["ended"]),
        (&json!(200), &json!(true), &json!("IncompleteRead")),
        "the replayed cut must deliver the head and the recorded events, then cut the body: {seen}"
    );
    let data = seen["data"].as_str().expect("data");
    let replayed: Vec<Value> = data
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("JSON data"))
        .collect();
    let recorded: Vec<Value> = c.events.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(replayed, recorded, "the replayed events:\n{data}");

    // And Claude Code, seeing the same cut, recovers the same way.
    claude_replays_the_recovery(&bed, &rec);
}

// --- 4: a miss, explained --------------------------------------------------------------------------

#[test]
fn a_different_prompt_is_a_miss_naming_the_nearest_call_and_the_path() {
    let bed = Bed::new();
    let rec = bed.record(Agent::Claude, &[]);
    rec.run.ok();
    let other = "Call the echo tool twice, then stop.";
    let r = bed.replay("miss", Agent::Claude, &rec, other);
    assert_eq!(
        r.code, 1,
        "playback exit code after a miss; stderr:\n{}",
        r.stderr
    );
    assert_contains(
        &r.stderr,
        "mcptape: no recorded model call matches this request (POST messages); nearest: call 1 at tape line 3 (unused)",
    );
    assert_contains(
        &r.stderr,
        &format!("  $.messages[0].content[1].text: recorded {PROMPT:?}, asked {other:?}"),
    );
    assert_contains(&r.stderr, &summary(0, 1, 0, 2));
    assert!(r.sentinel.is_empty(), "{:?}", r.sentinel);
    // The agent got the explanation as an Anthropic error, and gave up.
    let doc = r.run.claude_json();
    assert_eq!(doc["is_error"], true, "{}", r.run.console());
    assert_eq!(doc["api_error_status"], 400, "{}", r.run.console());
    let result = doc["result"].as_str().expect("result");
    assert_contains(result, "no recorded model call matches this request");
    assert_contains(result, "$.messages[0].content[1].text");
}

// --- 5: the official Python SDKs reading replayed answers ----------------------------------------

#[test]
fn anthropic_and_openai_python_sdks_parse_replayed_streams_as_recorded() {
    let bed = Bed::new();
    let tape = bed.path().join("sdk.jsonl");
    let sdk = |url: &str| -> Value {
        let mut cmd = bed.net.cmd(python());
        cmd.arg(agents_dir().join("sdk_client.py")).arg(url);
        let out = run_with_timeout(cmd, std::time::Duration::from_secs(60));
        assert!(out.status.success(), "sdk_client.py: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("sdk_client JSON")
    };
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let proxy = Proxy::record(&bed.net, bed.path(), "record", &tape, &fake.url);
    let recorded = sdk(&proxy.url);
    let (code, stderr) = proxy.stop();
    assert_eq!(code, 0, "{stderr}");
    let port = fake.port();
    assert_eq!(posts(&fake.stop()).len(), 9);

    // What the SDKs parsed when recording: the scripted answers, whole.
    let r = &recorded;
    let echo_args = json!({"message": "hello from the fake model"});
    let final_text = "FINAL: Echo: hello from the SDK";
    let tool_use = &r["anthropic.messages.stream"]["final"]["content"][1];
    assert_eq!(tool_use["type"], "tool_use", "{}", pretty(r));
    assert_eq!(
        (&tool_use["name"], &tool_use["input"]),
        (&json!("echo"), &echo_args)
    );
    assert_eq!(
        r["anthropic.messages.stream"]["text_stream"],
        json!(["Calling echo."])
    );
    assert_eq!(
        r["anthropic.messages.create(stream=True)"]["text"],
        final_text
    );
    assert_eq!(
        r["anthropic.messages.create(stream=True)"]["events"][0],
        "message_start"
    );
    assert_eq!(r["anthropic.messages.create"]["text"], final_text);
    let counted = |k: &str| r[k]["input_tokens"].as_u64().unwrap_or(0);
    let (ask, history) = (
        counted("anthropic.messages.count_tokens(ask)"),
        counted("anthropic.messages.count_tokens(history)"),
    );
    assert!(
        ask > 0 && history > ask,
        "count_tokens answered per request: {}",
        pretty(r)
    );
    let chat_call = &r["openai.chat.completions.create(stream=True)"]["tool_calls"][0];
    assert_eq!(chat_call["name"], "echo", "{}", pretty(r));
    let args: Value =
        serde_json::from_str(chat_call["arguments"].as_str().expect("arguments")).expect("JSON");
    assert_eq!(args, echo_args);
    assert_eq!(r["openai.chat.completions.create"]["text"], final_text);
    let fc = &r["openai.responses.create(stream=True)"]["function_calls"][0];
    assert_eq!(
        (&fc["name"], &fc["call_id"]),
        (&json!("echo"), &json!("call_fake_00")),
        "{}",
        pretty(r)
    );
    assert_eq!(
        r["openai.responses.create(stream=True)"]["arguments_from_deltas"],
        fc["arguments"]
    );
    assert_eq!(r["openai.responses.create"]["text"], final_text);

    let calls = taped_calls(&tape);
    let shape: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c.endpoint.as_str(), c.stream))
        .collect();
    assert_eq!(
        shape,
        [
            ("messages", true),
            ("messages", true),
            ("messages", false),
            ("messages/count_tokens", false),
            ("messages/count_tokens", false),
            ("chat/completions", true),
            ("chat/completions", false),
            ("responses", true),
            ("responses", false)
        ]
    );
    assert_intact_and_clean(&tape);

    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    let proxy = Proxy::play(&bed.net, bed.path(), "play", &tape);
    let replayed = sdk(&proxy.url);
    let (code, stderr) = proxy.stop();
    assert_eq!(code, 0, "{stderr}");
    assert_contains(&stderr, &summary(9, 0, 0, 0));
    assert!(sentinel.stop().is_empty(), "playback reached the upstream");
    assert!(
        recorded == replayed,
        "the SDKs parsed something else on replay.\n--- recorded:\n{}\n--- replayed:\n{}",
        pretty(&recorded),
        pretty(&replayed)
    );
}

// --- 6: a plain HTTP client, secrets in the requests ---------------------------------------------

/// A credential of OpenAI's shape.
const SECRET: &str = "sk-proj-Xq7Jd93KsLm2Pz8RtVw4Nb6YcHf1GaE5uTiO";

#[test]
fn gemini_and_chat_requests_with_a_secret_tape_no_secret_and_still_match() {
    let bed = Bed::new();
    let tape = bed.path().join("http.jsonl");
    let client = |url: &str| -> Value {
        let mut cmd = bed.net.cmd(which("python3"));
        cmd.arg(agents_dir().join("http_client.py"))
            .args(["secrets", url, SECRET]);
        let out = run_with_timeout(cmd, std::time::Duration::from_secs(60));
        assert!(
            out.status.success(),
            "http_client.py: {}",
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("http_client JSON")
    };
    let fake = Fake::start(&bed.net, bed.path(), "fake", &[]);
    let proxy = Proxy::record(&bed.net, bed.path(), "record", &tape, &fake.url);
    let recorded = client(&proxy.url);
    let (code, stderr) = proxy.stop();
    assert_eq!(code, 0, "{stderr}");
    let port = fake.port();
    let log = fake.stop();

    // The upstream got the real requests, secret and all (in bodies and key headers).
    let got = requests(&log);
    assert_eq!(got.len(), 4, "{got:?}");
    for p in posts(&log) {
        assert_contains(&p["body"].to_string(), SECRET);
        let key = p["headers"]
            .as_object()
            .expect("headers")
            .iter()
            .find(|(k, _)| {
                ["x-goog-api-key", "authorization"].contains(&k.to_ascii_lowercase().as_str())
            })
            .map(|(_, v)| v.as_str().expect("a header").to_string())
            .expect("a key header");
        assert_contains(&key, SECRET);
    }
    let r = &recorded;
    let g1: Vec<&Value> = r["gemini 1"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .collect();
    assert_eq!(
        g1[0]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"],
        "echo",
        "{}",
        pretty(r)
    );
    let g2: String = r["gemini 2"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|c| {
            c["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(g2, "FINAL: Echo: hi");
    assert_eq!(
        r["chat stream"]["events"]
            .as_array()
            .expect("events")
            .last(),
        Some(&json!("[DONE]"))
    );
    assert_eq!(
        r["chat"]["body"]["choices"][0]["message"]["content"],
        "FINAL: Echo: hi"
    );

    // The tape: no secret anywhere, markers where it was, lint clean.
    let raw = std::fs::read_to_string(&tape).expect("tape");
    assert!(!raw.contains(SECRET), "the secret is on the tape");
    assert!(
        !raw.contains(&SECRET[8..24]),
        "part of the secret is on the tape"
    );
    assert_contains(&raw, "[REDACTED:");
    let calls = taped_calls(&tape);
    let shape: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c.endpoint.as_str(), c.stream))
        .collect();
    assert_eq!(
        shape,
        [
            ("streamGenerateContent", true),
            ("streamGenerateContent", true),
            ("chat/completions", true),
            ("chat/completions", false)
        ]
    );
    assert_intact_and_clean(&tape);

    // Playback matches the live requests, which carry the real secret, and answers as recorded.
    let sentinel = Fake::start(&bed.net, bed.path(), "sentinel", &["--port", &port]);
    let proxy = Proxy::play(&bed.net, bed.path(), "play", &tape);
    let replayed = client(&proxy.url);
    let (code, stderr) = proxy.stop();
    assert_eq!(code, 0, "{stderr}");
    assert_contains(&stderr, &summary(4, 0, 0, 0));
    assert!(sentinel.stop().is_empty(), "playback reached the upstream");
    assert!(
        recorded == replayed,
        "the client saw something else on replay.\n--- recorded:\n{}\n--- replayed:\n{}",
        pretty(&recorded),
        pretty(&replayed)
    );
}
