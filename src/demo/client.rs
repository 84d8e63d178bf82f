//! A scripted, blocking MCP client for the demo and for tests.
//!
//! It runs one fixed session (handshake, every demo tool, resource and prompt listings) over
//! newline-delimited JSON-RPC and keeps what came back as a [`Transcript`]. It is deliberately
//! simple: one request in flight at a time, ids 1, 2, 3, … in order.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

/// The protocol version the scripted client asks for.
pub(crate) const CLIENT_PROTOCOL_VERSION: &str = "2025-06-18";
/// The progress token put on the `forecast` call.
pub(crate) const FORECAST_PROGRESS_TOKEN: &str = "demo-forecast";

/// How long [`run_session`] waits for the server to exit once its stdin is closed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// One request of the script and what the server sent until its answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    /// A short label, e.g. `initialize` or `tools/call lookup_city`.
    pub name: String,
    /// The request message as sent.
    pub request: Value,
    /// The whole JSON-RPC response message (result or error).
    pub response: Value,
    /// Messages without our id that arrived before the response, in order: notifications, and
    /// any server requests (which the client also answers: `ping` with `{}`, others with -32601).
    pub notifications: Vec<Value>,
}

/// The outcome of a scripted session, one [`Step`] per request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Transcript {
    /// The steps in the order sent.
    pub steps: Vec<Step>,
}

/// Spawns `cmd` (stdin/stdout piped, stderr inherited), runs the scripted session, closes stdin, waits for exit.
///
/// The server is killed if the session fails or if it does not exit within a few seconds of its
/// stdin closing; a non-zero exit status is an error.
pub(crate) fn run_session(mut cmd: Command) -> anyhow::Result<Transcript> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start MCP server `{program}`"))?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"));

    // `run_session_on` takes the writer by value, so stdin is closed when it returns.
    let transcript = match run_session_on(stdout, stdin) {
        Ok(transcript) => transcript,
        Err(err) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err.context(format!("session with `{program}` failed")));
        }
    };

    let deadline = Instant::now() + EXIT_GRACE;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "MCP server `{program}` did not exit within {}s of its stdin closing",
                EXIT_GRACE.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if !status.success() {
        bail!("MCP server `{program}` exited with {status}");
    }
    Ok(transcript)
}

/// The same, over already-open streams (for tests against serve() in-process).
///
/// `writer` is dropped on return, which closes the server's input when it is a pipe.
pub(crate) fn run_session_on<R: BufRead, W: Write>(
    reader: R,
    writer: W,
) -> anyhow::Result<Transcript> {
    let mut session = Session {
        reader,
        writer,
        next_id: 1,
    };
    let mut steps = Vec::new();

    steps.push(session.request(
        "initialize",
        "initialize",
        json!({
            "protocolVersion": CLIENT_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mcptape-demo-client", "version": "1.0.0"},
        }),
    )?);
    session
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .context("step `notifications/initialized`: cannot send the notification")?;
    steps.push(session.request("tools/list", "tools/list", json!({}))?);

    let calls = [
        ("add", json!({"a": 2, "b": 3}), None),
        ("convert_temperature", json!({"celsius": 21.5}), None),
        ("lookup_city", json!({"name": "Lisbon"}), None),
        (
            "forecast",
            json!({"city": "Lisbon", "days": 3}),
            Some(FORECAST_PROGRESS_TOKEN),
        ),
    ];
    for (tool, arguments, progress_token) in calls {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(token) = progress_token {
            params["_meta"] = json!({"progressToken": token});
        }
        steps.push(session.request(&format!("tools/call {tool}"), "tools/call", params)?);
    }

    steps.push(session.request("resources/list", "resources/list", json!({}))?);
    steps.push(session.request("prompts/list", "prompts/list", json!({}))?);
    Ok(Transcript { steps })
}

struct Session<R, W> {
    reader: R,
    writer: W,
    next_id: u64,
}

impl<R: BufRead, W: Write> Session<R, W> {
    fn send(&mut self, message: &Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.writer, message)?;
        self.writer.write_all(b"\n")?;
        self.writer.flush()
    }

    /// Sends one request and reads until its response, collecting what arrives meanwhile.
    fn request(&mut self, name: &str, method: &str, params: Value) -> anyhow::Result<Step> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&request)
            .with_context(|| format!("step `{name}`: cannot send request {id}"))?;

        let mut notifications = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            let read = self
                .reader
                .read_line(&mut line)
                .with_context(|| format!("step `{name}`: cannot read from the server"))?;
            if read == 0 {
                bail!("step `{name}`: the server closed its output before answering request {id}");
            }
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(text).map_err(|err| {
                anyhow!("step `{name}`: the server wrote a line that is not JSON ({err}): {text}")
            })?;
            let is_response = message.get("method").is_none()
                && (message.get("result").is_some() || message.get("error").is_some());
            if is_response {
                if message.get("id") == Some(&json!(id)) {
                    return Ok(Step {
                        name: name.to_owned(),
                        request,
                        response: message,
                        notifications,
                    });
                }
                bail!("step `{name}`: expected the response to request {id}, got: {text}");
            }
            if let Some(server_id) = message.get("id") {
                self.answer_server_request(server_id.clone(), &message)
                    .with_context(|| format!("step `{name}`: cannot answer a server request"))?;
            }
            notifications.push(message);
        }
    }

    /// The client declares no capabilities, so it only answers `ping`.
    fn answer_server_request(&mut self, id: Value, message: &Value) -> std::io::Result<()> {
        let answer = if message["method"] == "ping" {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            json!({"jsonrpc": "2.0", "id": id,
                   "error": {"code": -32601, "message": "Method not found"}})
        };
        self.send(&answer)
    }
}

/// Longest summary detail before it is cut with an ellipsis.
const SUMMARY_WIDTH: usize = 110;

impl Transcript {
    /// One short human line per step, e.g. `tools/call convert_temperature → "21.5 °C is 70.7 °F"`.
    pub fn summary_lines(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|step| {
                let mut line = format!("{} → {}", step.name, describe(&step.response));
                if !step.notifications.is_empty() {
                    let n = step.notifications.len();
                    let plural = if n == 1 { "" } else { "s" };
                    line.push_str(&format!(" (+{n} notification{plural})"));
                }
                line
            })
            .collect()
    }
}

/// Summarises a response by the shape of its result rather than by method, so it also reads
/// well for unexpected answers.
fn describe(response: &Value) -> String {
    if let Some(error) = response.get("error") {
        let code = error["code"].as_i64().unwrap_or_default();
        let message = error["message"].as_str().unwrap_or("");
        return format!("error {code}: {}", shorten(message));
    }
    let result = &response["result"];
    if let Some(info) = result.get("serverInfo") {
        return format!(
            "{} {}, protocol {}",
            info["name"].as_str().unwrap_or("?"),
            info["version"].as_str().unwrap_or("?"),
            result["protocolVersion"].as_str().unwrap_or("?")
        );
    }
    for (key, label, id_key) in [
        ("tools", "tool", "name"),
        ("resources", "resource", "uri"),
        ("prompts", "prompt", "name"),
    ] {
        if let Some(items) = result.get(key).and_then(Value::as_array) {
            let names: Vec<&str> = items.iter().filter_map(|i| i[id_key].as_str()).collect();
            let plural = if items.len() == 1 { "" } else { "s" };
            return shorten(&format!(
                "{} {label}{plural}: {}",
                items.len(),
                names.join(", ")
            ));
        }
    }
    // Structured output reads better as compact JSON than as its quoted text twin.
    if let Some(structured) = result.get("structuredContent") {
        if result["isError"] != true {
            return shorten(&structured.to_string());
        }
    }
    if let Some(content) = result.get("content").and_then(Value::as_array) {
        let text = content
            .iter()
            .find_map(|c| c["text"].as_str())
            .unwrap_or("(no text)");
        // Multi-line answers (the forecast) are joined so the summary stays on one line.
        let text = text.lines().collect::<Vec<_>>().join(" / ");
        let quoted = format!("\"{}\"", shorten(&text));
        return if result["isError"] == true {
            format!("tool error: {quoted}")
        } else {
            quoted
        };
    }
    shorten(&result.to_string())
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= SUMMARY_WIDTH {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(SUMMARY_WIDTH - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::super::server::{serve, Variant};
    use super::*;
    use std::io::{BufReader, Read};
    use std::sync::mpsc::{channel, Receiver, Sender};

    /// The writing end of an in-memory pipe; dropping it gives the reader EOF.
    struct PipeWriter(Sender<Vec<u8>>);

    impl Write for PipeWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .send(buf.to_vec())
                .map_err(|_| std::io::ErrorKind::BrokenPipe)?;
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct PipeReader {
        rx: Receiver<Vec<u8>>,
        pending: Vec<u8>,
        pos: usize,
    }

    impl Read for PipeReader {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            while self.pos == self.pending.len() {
                match self.rx.recv() {
                    Ok(chunk) => {
                        self.pending = chunk;
                        self.pos = 0;
                    }
                    Err(_) => return Ok(0),
                }
            }
            let n = buf.len().min(self.pending.len() - self.pos);
            buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    /// `std::io::pipe` needs Rust 1.87; the crate supports 1.85.
    fn pipe() -> (BufReader<PipeReader>, PipeWriter) {
        let (tx, rx) = channel();
        let reader = PipeReader {
            rx,
            pending: Vec::new(),
            pos: 0,
        };
        (BufReader::new(reader), PipeWriter(tx))
    }

    /// Runs the scripted client against `serve()` on a thread, returning the transcript.
    fn session(variant: Variant) -> Transcript {
        let (server_in, client_out) = pipe();
        let (client_in, server_out) = pipe();
        let server = std::thread::spawn(move || serve(variant, server_in, server_out));
        let transcript = run_session_on(client_in, client_out).unwrap();
        // The client dropped its writer, so the server saw EOF and returned.
        server.join().unwrap().unwrap();
        transcript
    }

    fn step<'a>(t: &'a Transcript, name: &str) -> &'a Step {
        t.steps.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn healthy_session() {
        let t = session(Variant::Healthy);
        let names: Vec<&str> = t.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "initialize",
                "tools/list",
                "tools/call add",
                "tools/call convert_temperature",
                "tools/call lookup_city",
                "tools/call forecast",
                "resources/list",
                "prompts/list",
            ]
        );
        for (i, s) in t.steps.iter().enumerate() {
            assert_eq!(s.request["id"], i as u64 + 1);
            assert_eq!(s.response["id"], i as u64 + 1);
            assert!(s.response.get("result").is_some(), "{}", s.response);
        }
        let forecast = step(&t, "tools/call forecast");
        assert_eq!(forecast.notifications.len(), 4);
        assert_eq!(
            forecast.notifications[0]["params"]["progressToken"],
            FORECAST_PROGRESS_TOKEN
        );
        assert!(t
            .steps
            .iter()
            .filter(|s| s.name != "tools/call forecast")
            .all(|s| s.notifications.is_empty()));

        let summary = t.summary_lines();
        assert_eq!(summary.len(), t.steps.len());
        assert_eq!(
            summary[0],
            "initialize → mcptape-demo 1.0.0, protocol 2025-06-18"
        );
        assert_eq!(
            summary[1],
            "tools/list → 4 tools: add, convert_temperature, lookup_city, forecast"
        );
        assert_eq!(summary[2], "tools/call add → \"5\"");
        assert_eq!(
            summary[3],
            "tools/call convert_temperature → \"21.5 °C is 70.7 °F\""
        );
        // Key order depends on serde_json's `preserve_order` feature, so check pieces.
        assert!(summary[4].starts_with("tools/call lookup_city → {"));
        assert!(summary[4].contains("\"coordinates\":{\"lat\":38.7223,\"lon\":-9.1393}"));
        assert!(summary[4].ends_with('}'), "{}", summary[4]);
        assert!(
            summary[5].starts_with("tools/call forecast → \"Lisbon forecast / day 1: "),
            "{}",
            summary[5]
        );
        assert!(summary[5].ends_with("(+4 notifications)"), "{}", summary[5]);
        assert_eq!(
            summary[6],
            "resources/list → 2 resources: weather://stations, weather://readme"
        );
        assert_eq!(summary[7], "prompts/list → 1 prompt: daily_briefing");
        assert!(summary.iter().all(|l| !l.contains('\n')));
    }

    #[test]
    fn drifted_session_differs_only_where_intended() {
        let healthy = session(Variant::Healthy);
        let drifted = session(Variant::Drifted);
        let changed: Vec<&str> = healthy
            .steps
            .iter()
            .zip(&drifted.steps)
            .filter(|(h, d)| h != d)
            .map(|(h, _)| h.name.as_str())
            .collect();
        assert_eq!(
            changed,
            ["tools/call convert_temperature", "tools/call lookup_city"]
        );
        let summary = drifted.summary_lines();
        assert_eq!(
            summary[3],
            "tools/call convert_temperature → \"21.5 °C is 69.7 °F\""
        );
        let city = &step(&drifted, "tools/call lookup_city").response["result"];
        assert!(city["structuredContent"].get("coords").is_some());
        // Recording the same session twice gives the same transcript.
        assert_eq!(drifted, session(Variant::Drifted));
    }

    #[test]
    fn eof_before_a_response_names_the_step() {
        let err = run_session_on(&b""[..], Vec::new()).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("step `initialize`"), "{text}");
        assert!(text.contains("closed its output"), "{text}");
    }

    #[test]
    fn a_non_json_line_names_the_step() {
        let init = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "x", "version": "0"}}});
        let input = format!("{init}\nStarting up...\n");
        let err = run_session_on(input.as_bytes(), Vec::new()).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("step `tools/list`"), "{text}");
        assert!(text.contains("Starting up..."), "{text}");
    }

    #[test]
    fn answers_server_pings_and_keeps_them() {
        let ping = json!({"jsonrpc": "2.0", "id": 0, "method": "ping"});
        let init = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        let input = format!("{ping}\n{init}\n");
        let mut written = Vec::new();
        let err = run_session_on(input.as_bytes(), &mut written).unwrap_err();
        assert!(format!("{err:#}").contains("step `tools/list`"));
        let lines: Vec<Value> = String::from_utf8(written)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["method"], "initialize");
        assert_eq!(lines[1], json!({"jsonrpc": "2.0", "id": 0, "result": {}}));
        assert_eq!(lines[2]["method"], "notifications/initialized");
    }

    #[cfg(unix)]
    #[test]
    fn run_session_reports_a_server_that_dies() {
        let err = run_session(Command::new("true")).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("step `initialize`"), "{text}");
        assert!(text.contains("`true`"), "{text}");
    }

    #[test]
    fn run_session_reports_a_missing_program() {
        let err = run_session(Command::new("/nonexistent/mcp-server")).unwrap_err();
        assert!(format!("{err:#}").contains("cannot start"));
    }
}
