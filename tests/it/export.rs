//! `mcptape export --otlp`: real sessions (server-everything through the Python SDK client over
//! stdio and over Streamable HTTP, a model call through the model proxy) exported as OTLP, read
//! back with the official OpenTelemetry protobuf definitions (PyPI `opentelemetry-proto`,
//! tests/peers/otlp_peer.py) in both encodings, and sent to an OTLP/HTTP receiver on 127.0.0.1.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The attribute names the semantic conventions define that the export may use (MCP, GenAI,
/// JSON-RPC, network, server, error, HTTP), beside mcptape's own `mcptape.*`.
const CONVENTIONS: &[&str] = &[
    "mcp.method.name",
    "mcp.session.id",
    "mcp.protocol.version",
    "mcp.resource.uri",
    "jsonrpc.request.id",
    "jsonrpc.protocol.version",
    "rpc.response.status_code",
    "gen_ai.tool.name",
    "gen_ai.prompt.name",
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "network.transport",
    "network.protocol.name",
    "server.address",
    "server.port",
    "error.type",
    "http.response.status_code",
];

/// What otlp_peer.py parsed: one entry per resource, with its spans.
fn parsed(file: &Path, encoding: &str) -> Value {
    let out = run_with_timeout(
        {
            let mut c = Command::new(python());
            c.arg(peer("otlp_peer.py"))
                .arg("parse")
                .arg(file)
                .arg(encoding);
            c
        },
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "the official OTLP definitions refused the {encoding} export: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("otlp_peer.py prints JSON")
}

/// `export --otlp TAPE -o FILE --encoding ENC`, parsed back.
fn exported(tape: &Path, dir: &Path, encoding: &str) -> Value {
    let file = dir.join(format!("spans.{encoding}"));
    Mt::new(["export", "--otlp"])
        .arg(tape)
        .arg("-o")
        .arg(&file)
        .args(["--encoding", encoding])
        .run()
        .success()
        .stderr_contains("mcptape export: wrote ");
    parsed(&file, encoding)
}

fn spans(doc: &Value) -> Vec<Value> {
    doc.as_array()
        .expect("resources")
        .iter()
        .flat_map(|r| r["spans"].as_array().expect("spans").clone())
        .collect()
}

fn span<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {}", pretty(&json!(spans))))
}

/// Every attribute of every span is a name of the conventions or mcptape's own.
fn assert_conventional(spans: &[Value]) {
    for s in spans {
        for key in s["attributes"].as_object().expect("attributes").keys() {
            assert!(
                CONVENTIONS.contains(&key.as_str()) || key.starts_with("mcptape."),
                "attribute {key} of span {} is not in the conventions",
                s["name"]
            );
        }
    }
}

/// The Python SDK client's `everything` scenario through `record` over stdio; the tape.
fn everything_tape(dir: &Path) -> PathBuf {
    let tape = dir.join("everything.jsonl");
    py_ok(
        "everything",
        "legacy",
        &record_cmd(&tape, &everything()),
        "through record",
    );
    tape
}

#[test]
fn a_stdio_session_exports_as_otlp_that_the_official_definitions_read_in_both_encodings() {
    let dir = tmp();
    let tape = everything_tape(dir.path());
    let json_doc = exported(&tape, dir.path(), "json");
    let pb_doc = exported(&tape, dir.path(), "protobuf");
    assert_eq!(json_doc, pb_doc, "the two encodings say the same");
    let spans = spans(&json_doc);
    assert_conventional(&spans);

    let echo = span(&spans, "tools/call echo");
    let a = &echo["attributes"];
    assert_eq!(a["mcp.method.name"], "tools/call");
    assert_eq!(a["gen_ai.tool.name"], "echo");
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["network.transport"], "pipe");
    assert_eq!(a["jsonrpc.protocol.version"], "2.0");
    assert!(a["jsonrpc.request.id"].is_string(), "{a}");
    assert!(
        a["mcp.protocol.version"]
            .as_str()
            .is_some_and(|v| v.starts_with("20")),
        "{a}"
    );
    assert_eq!(echo["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(echo["status"]["code"], "STATUS_CODE_UNSET");

    // One trace for the session; the recorded times: within the recording, in order.
    let traces: std::collections::BTreeSet<&str> = spans
        .iter()
        .map(|s| s["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let created = tape_lines(&tape)[0]["created"]
        .as_str()
        .unwrap()
        .to_string();
    let created_ns = humantime::parse_rfc3339_weak(created.trim_end_matches('Z'))
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for s in &spans {
        let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        assert!(start >= created_ns && end >= start, "{s}");
        assert!(
            end - created_ns < 600_000_000_000,
            "within ten minutes of the start: {s}"
        );
    }
    // The span's duration is the recorded latency of the exchange (tape t_us, in µs).
    let lines = tape_lines(&tape);
    let line = a["mcptape.tape.line"].as_u64().unwrap() as usize;
    let req = &lines[line - 1];
    let answer = lines
        .iter()
        .find(|l| {
            l["dir"] == "s2c" && l["msg"]["id"] == req["msg"]["id"] && l["kind"] == "response"
        })
        .expect("the echo answer");
    let recorded_ns = (answer["t_us"].as_u64().unwrap() - req["t_us"].as_u64().unwrap()) * 1000;
    assert_eq!(
        echo["end"].as_u64().unwrap() - echo["start"].as_u64().unwrap(),
        recorded_ns
    );

    // The server's sampling request is a span inside the tool call that caused it; the
    // progress notifications of the long-running operation are events of its span.
    let trigger = span(&spans, "tools/call trigger-sampling-request");
    let sampling = span(&spans, "sampling/createMessage");
    assert_eq!(sampling["parent"], trigger["span_id"]);
    assert!(sampling["start"].as_u64() >= trigger["start"].as_u64());
    let long = span(&spans, "tools/call trigger-long-running-operation");
    let progress: Vec<&Value> = long["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{long}");
    // A client notification is a span of no duration.
    let init = span(&spans, "notifications/initialized");
    assert_eq!(init["start"], init["end"]);

    // The resource names the client and the tape.
    let res = &json_doc[0]["resource"];
    assert!(res["service.name"].is_string(), "{res}");
    assert_eq!(json_doc[0]["scope"]["name"], "mcptape");

    // Exporting again gives the same ids (a backend can tell it is the same trace).
    assert_eq!(exported(&tape, dir.path(), "json"), json_doc);
}

#[test]
fn errors_are_spans_with_error_status_and_type() {
    let dir = tmp();
    let tape = dir.path().join("errors.jsonl");
    let mut c = LineClient::spawn(&record_cmd(&tape, &everything()));
    c.initialize();
    // A JSON-RPC error (an unknown method) and a tool that does not exist.
    let e1 = c.call(1, "no/such/method", json!({}));
    assert!(e1["error"]["code"].is_i64(), "{e1}");
    let e2 = c.call(
        2,
        "tools/call",
        json!({"name": "no-such-tool", "arguments": {"api_key": "sk-1", "price": 2.50}}),
    );
    c.close_stdin();
    c.finish();
    let spans = spans(&exported(&tape, dir.path(), "protobuf"));
    assert_conventional(&spans);
    let m = span(&spans, "no/such/method");
    assert_eq!(m["status"]["code"], "STATUS_CODE_ERROR");
    let code = e1["error"]["code"].as_i64().unwrap().to_string();
    assert_eq!(m["attributes"]["error.type"], code.as_str());
    assert_eq!(m["attributes"]["rpc.response.status_code"], code.as_str());
    let t = span(&spans, "tools/call no-such-tool");
    assert_eq!(t["status"]["code"], "STATUS_CODE_ERROR", "{e2}\n{t}");
    let want = if e2.get("error").is_some() {
        e2["error"]["code"].as_i64().unwrap().to_string()
    } else {
        "tool_error".to_string()
    };
    assert_eq!(t["attributes"]["error.type"], want.as_str());
}

/// otlp_peer.py's receiver on 127.0.0.1: (process, its URL, the file it appends what it got to).
fn receiver(dir: &Path) -> (Proc, String, PathBuf) {
    let (port_file, out) = (dir.join("port"), dir.join("received.jsonl"));
    let mut cmd = Command::new(python());
    cmd.arg(peer("otlp_peer.py"))
        .arg("receive")
        .arg(&port_file)
        .arg(&out);
    let p = Proc::spawn("otlp receiver", cmd, dir.join("receiver.log"));
    let start = Instant::now();
    while !port_file.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the receiver did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = std::fs::read_to_string(&port_file).unwrap();
    (p, format!("http://127.0.0.1:{}", port.trim()), out)
}

fn received(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn endpoint_gets_the_export_in_either_encoding_with_the_headers_given() {
    let dir = tmp();
    let (upstream_proc, upstream) = everything_http(dir.path());
    let tape = dir.path().join("http.jsonl");
    let rec = Served::record(&upstream, &tape);
    py_ok(
        "everything",
        "legacy",
        std::slice::from_ref(&rec.url),
        "through record --url",
    );
    rec.stop();
    drop(upstream_proc);
    let file_doc = exported(&tape, dir.path(), "json");

    let (_recv, url, out) = receiver(dir.path());
    Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args(["--endpoint", &url, "--header", "authorization=Bearer t0ken"])
        .run()
        .success()
        .stderr_contains("OTLP protobuf")
        .stderr_contains("/v1/traces");
    Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args([
            "--endpoint",
            &format!("{url}/v1/traces"),
            "--encoding",
            "json",
        ])
        .run()
        .success();
    let got = received(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["path"], "/v1/traces");
    assert_eq!(got[0]["content_type"], "application/x-protobuf");
    assert_eq!(got[0]["authorization"], "Bearer t0ken");
    assert_eq!(got[1]["content_type"], "application/json");
    assert!(got[0].get("error").is_none(), "{}", got[0]);
    assert_eq!(
        got[0]["summary"], file_doc,
        "what was sent is what the file holds"
    );
    assert_eq!(got[1]["summary"], file_doc);

    // Over HTTP: tcp, the session (a stand-in for the taped, redacted id), the server's address.
    let spans = spans(&file_doc);
    assert_conventional(&spans);
    let echo = span(&spans, "tools/call echo");
    let a = &echo["attributes"];
    assert_eq!(a["network.transport"], "tcp");
    assert_eq!(a["network.protocol.name"], "http");
    assert_eq!(a["server.address"], "127.0.0.1");
    assert!(a["server.port"].as_i64().is_some_and(|p| p > 0), "{a}");
    assert!(
        a["mcp.session.id"].as_str().is_some_and(|s| s.len() == 32),
        "{a}"
    );
}

#[test]
fn export_errors_say_what_and_exit_with_their_codes() {
    let dir = tmp();
    let tape = everything_tape(dir.path());
    let nothing = PortHold::any(); // bound, not listening: connections are refused
    let port = nothing.port;
    Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args(["--endpoint", &format!("http://127.0.0.1:{port}")])
        .run()
        .status(69)
        .stderr_contains("could not be reached")
        // The reason in words, not hyper's debug form
        // (`hyper_util::client::legacy::Error(Connect, ConnectError(…))`).
        .stderr_contains("Connection refused (os error 111)");
    let out = Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args(["--endpoint", &format!("http://127.0.0.1:{port}")])
        .run();
    assert!(
        !out.stderr.contains("hyper_util") && !out.stderr.contains("ConnectError("),
        "{}",
        out.stderr
    );
    Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args(["--endpoint", "ftp://example.invalid/"])
        .run()
        .status(64)
        .stderr_contains("only http:// and https://");
    Mt::new(["export", "--otlp"])
        .arg(&tape)
        .args(["--endpoint", "http://127.0.0.1:1", "--header", "novalue"])
        .run()
        .status(64)
        .stderr_contains("NAME=VALUE");
    Mt::new(["export"])
        .arg(&tape)
        .run()
        .status(64)
        .stderr_contains("--otlp");
    Mt::new(["export", "--otlp", "no-such-tape"])
        .run()
        .status(66);
}

#[test]
fn model_calls_of_a_run_are_genai_spans() {
    let dir = tmp();
    let tape = dir.path().join("model.jsonl");
    let (_up, base) = model_upstream(dir.path(), false);
    let proxy = Served::spawn(&["model-proxy", "--tape", &s(&tape), "--upstream", &base]);
    let url = format!("{}/v1/messages", proxy.url);
    let body = json!({"model": "claude-test", "max_tokens": 5, "stream": false,
        "messages": [{"role": "user", "content": "say something"}]});
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let (status, _) = http(
        &url,
        "POST",
        &[
            ("content-type", "application/json"),
            ("anthropic-version", "2023-06-01"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    proxy.stop();
    let doc = exported(&tape, dir.path(), "protobuf");
    let spans = spans(&doc);
    assert_conventional(&spans);
    let chat = span(&spans, "chat claude-test");
    let a = &chat["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "anthropic");
    assert_eq!(a["gen_ai.request.model"], "claude-test");
    assert!(a["gen_ai.usage.input_tokens"].as_i64().is_some(), "{a}");
    assert!(a["gen_ai.usage.output_tokens"].as_i64().is_some(), "{a}");
    assert_eq!(a["http.response.status_code"], 200);
    assert!(chat["end"].as_u64() > chat["start"].as_u64(), "{chat}");
}
