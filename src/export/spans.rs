//! A tape as trace spans, transport-neutral: one span per exchange (a client request and its
//! answer, or a server request and the client's answer), one per notification, and one per
//! model call of an agent run, with the recorded start times and durations and the attributes
//! of the OpenTelemetry semantic conventions for MCP and for GenAI. The encodings (OTLP/JSON,
//! OTLP protobuf) are in their own files.

use crate::model::calls::Call;
use crate::tape::index::MsgMeta;
use crate::tape::{TapeError, TapeIndex};
use crate::wire::params::target_of;
use crate::wire::{Dir, Kind};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// A 64-bit integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A list of strings.
    StrList(Vec<String>),
}

/// A key and its value.
pub type Attr = (&'static str, AttrValue);

/// OTLP span kinds used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// The side that sent the request (or notification) and waited for the answer.
    Client,
}

/// Whether the operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanStatus {
    /// No error recorded.
    Unset,
    /// Failed, with a description.
    Error(String),
}

/// A timestamped event inside a span (a notification that came while a request was open).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    /// Unix time in nanoseconds.
    pub time_ns: u64,
    /// The event's name (the notification's method).
    pub name: String,
    /// Its attributes.
    pub attrs: Vec<Attr>,
}

/// One span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// 16 bytes: one trace per session (or per agent run).
    pub trace_id: [u8; 16],
    /// 8 bytes, unique in the trace.
    pub span_id: [u8; 8],
    /// The span this one happened inside (a server request made while a tool call was open).
    pub parent: Option<[u8; 8]>,
    /// `{mcp.method.name} {target}`, or `{gen_ai.operation.name} {model}` for model calls.
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Unix time in nanoseconds.
    pub start_ns: u64,
    /// Unix time in nanoseconds.
    pub end_ns: u64,
    /// Its attributes.
    pub attrs: Vec<Attr>,
    /// Events inside it.
    pub events: Vec<SpanEvent>,
    /// Its status.
    pub status: SpanStatus,
    /// The tape line it starts at (for people; not exported as an attribute name of the
    /// conventions, but as `mcptape.tape.line`).
    pub line: u64,
}

/// The spans of one resource: a server's sessions, or an agent run's model calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Resource attributes (`service.name` first).
    pub attrs: Vec<Attr>,
    /// Its spans, in start order.
    pub spans: Vec<Span>,
}

/// Why a tape could not be turned into spans.
#[derive(Debug, thiserror::Error)]
pub enum SpansError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// The header's start time is not RFC 3339.
    #[error("{}: the tape's start time {created:?} is not an RFC 3339 time", path.display())]
    Created {
        /// The tape.
        path: std::path::PathBuf,
        /// What the header says.
        created: String,
    },
}

impl crate::exit::Coded for SpansError {
    fn exit_code(&self) -> i32 {
        match self {
            SpansError::Tape(e) => e.exit_code(),
            SpansError::Created { .. } => crate::exit::DATA_ERR,
        }
    }
}

/// Every server's exchanges and the model calls of the tape at `path`, as spans.
pub fn of_tape(path: &Path) -> Result<Vec<Resource>, SpansError> {
    let first = TapeIndex::load(path, None)?;
    let created = &first.header.created;
    let start_ns = humantime::parse_rfc3339_weak(created.trim_end_matches('Z'))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as u64)
        .ok_or_else(|| SpansError::Created {
            path: path.to_path_buf(),
            created: created.clone(),
        })?;
    let calls = crate::model::calls::load(path, None)?;
    // An agent run is one trace: its model calls and its tool calls are one causal story.
    let run_trace = (!calls.is_empty()).then(|| trace_id(created, "run", 0));
    let labels: Vec<(String, String, Option<String>)> = first
        .servers
        .iter()
        .filter(|d| d.transport != "model_api")
        .map(|d| (d.server.clone(), d.transport.clone(), d.url.clone()))
        .collect();
    let mut out = Vec::new();
    for (label, transport, url) in labels {
        let index = if label == first.server {
            None
        } else {
            Some(TapeIndex::load(path, Some(&label))?)
        };
        let index = index.as_ref().unwrap_or(&first);
        let ctx = Ctx {
            index,
            created,
            start_ns,
            label: &label,
            http: transport == "streamable_http",
            url: url.as_deref(),
            run_trace,
        };
        out.push(ctx.resource());
    }
    if !calls.is_empty() {
        out.push(model_resource(&calls, created, start_ns, run_trace));
    }
    Ok(out)
}

/// Deterministic ids: the same tape exports the same trace and span ids every time, so a
/// backend that receives it twice can tell.
fn trace_id(created: &str, label: &str, session: u32) -> [u8; 16] {
    let h = Sha256::digest(format!("mcptape trace\0{created}\0{label}\0{session}"));
    h[..16].try_into().expect("16 bytes")
}

fn span_id(trace: &[u8; 16], line: u64) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(trace);
    h.update(line.to_le_bytes());
    h.finalize()[..8].try_into().expect("8 bytes")
}

struct Ctx<'a> {
    index: &'a TapeIndex,
    created: &'a str,
    start_ns: u64,
    label: &'a str,
    http: bool,
    url: Option<&'a str>,
    run_trace: Option<[u8; 16]>,
}

impl Ctx<'_> {
    fn at(&self, m: &MsgMeta) -> u64 {
        self.start_ns + m.t_us * 1000
    }

    fn json(&self, m: &MsgMeta) -> Option<Value> {
        serde_json::from_slice(&self.index.read_bytes(m).ok()?).ok()
    }

    fn trace(&self, session: Option<u32>) -> [u8; 16] {
        self.run_trace
            .unwrap_or_else(|| trace_id(self.created, self.label, session.unwrap_or(0)))
    }

    /// What every span of a session carries: the transport, the session, the protocol version.
    fn common(&self, session: Option<u32>, protocol: Option<&str>) -> Vec<Attr> {
        let mut a: Vec<Attr> = vec![(
            "network.transport",
            AttrValue::Str(if self.http { "tcp" } else { "pipe" }.into()),
        )];
        if self.http {
            a.push(("network.protocol.name", AttrValue::Str("http".into())));
            if let Some((host, port)) = self.url.and_then(host_port) {
                a.push(("server.address", AttrValue::Str(host)));
                a.push(("server.port", AttrValue::Int(port.into())));
            }
            // The recorded session id is a secret (taped redacted): a stable stand-in.
            let sid = Sha256::digest(format!(
                "mcptape session\0{}\0{}\0{}",
                self.created,
                self.label,
                session.unwrap_or(0)
            ));
            a.push(("mcp.session.id", AttrValue::Str(hex(&sid[..16]))));
        }
        if let Some(p) = protocol {
            a.push(("mcp.protocol.version", AttrValue::Str(p.into())));
        }
        a
    }

    fn resource(&self) -> Resource {
        let index = self.index;
        // The protocol version each session agreed on (initialize's answer), by session.
        let mut protocol: HashMap<Option<u32>, String> = HashMap::new();
        let mut client_name = None;
        for e in index.exchanges.iter() {
            let req = &index.msgs[e.request];
            if req.method.as_deref() != Some("initialize") {
                continue;
            }
            if client_name.is_none() {
                client_name = self
                    .json(req)
                    .and_then(|v| v["params"]["clientInfo"]["name"].as_str().map(String::from));
            }
            if let Some(v) = e.response.and_then(|r| self.json(&index.msgs[r])) {
                if let Some(p) = v["result"]["protocolVersion"].as_str() {
                    protocol.entry(e.session).or_insert_with(|| p.to_string());
                }
            }
        }
        let mut spans = Vec::new();
        // Which exchange each server request belongs to (it was made while that one was open).
        let mut parent_of: HashMap<usize, usize> = HashMap::new();
        for (i, e) in index.exchanges.iter().enumerate() {
            for &d in &e.during {
                parent_of.insert(d, i);
            }
        }
        let mut span_of_exchange: HashMap<usize, [u8; 8]> = HashMap::new();
        for (i, e) in index.exchanges.iter().enumerate() {
            let req = &index.msgs[e.request];
            let trace = self.trace(e.session);
            let id = span_id(&trace, req.line);
            span_of_exchange.insert(i, id);
            let body = self.json(req);
            let p = body
                .as_ref()
                .and_then(|v| v.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion"))
                .and_then(Value::as_str)
                .map(String::from)
                .or_else(|| protocol.get(&e.session).cloned());
            let mut span =
                self.request_span(req, body.as_ref(), trace, id, e.session, p.as_deref());
            let answer = e.response.map(|r| &index.msgs[r]);
            self.finish(&mut span, req, answer);
            for &d in &e.during {
                let m = &index.msgs[d];
                if m.kind == Kind::Notification {
                    span.events.push(SpanEvent {
                        time_ns: self.at(m),
                        name: m.method.clone().unwrap_or_default(),
                        attrs: vec![(
                            "mcp.method.name",
                            AttrValue::Str(m.method.clone().unwrap_or_default()),
                        )],
                    });
                }
            }
            spans.push(span);
        }
        // Server requests (with the client's answers) and notifications outside any exchange.
        let mut server_requests: Vec<(usize, Option<usize>, Option<u32>)> = Vec::new();
        for e in index.exchanges.iter() {
            for &d in &e.during {
                if index.msgs[d].kind == Kind::Request {
                    server_requests.push((d, e.client_answers.get(&d).copied(), e.session));
                }
            }
        }
        for s in index.standalone.iter() {
            server_requests.push((s.msg, s.client_answer, s.session));
        }
        server_requests.sort_unstable();
        for (q, a, session) in server_requests {
            let m = &index.msgs[q];
            let during = parent_of.get(&q).copied();
            if m.kind == Kind::Notification && during.is_some() {
                continue; // an event of its exchange's span
            }
            if !matches!(m.kind, Kind::Request | Kind::Notification) {
                continue;
            }
            let trace = self.trace(session);
            let id = span_id(&trace, m.line);
            let body = self.json(m);
            let mut span = self.request_span(
                m,
                body.as_ref(),
                trace,
                id,
                session,
                protocol.get(&session).map(String::as_str),
            );
            span.parent = during.and_then(|i| span_of_exchange.get(&i).copied());
            self.finish(&mut span, m, a.map(|a| &index.msgs[a]));
            spans.push(span);
        }
        // Client notifications: spans of no duration (the conventions count them as operations).
        for m in index.msgs.iter() {
            if m.dir == Dir::C2S && m.kind == Kind::Notification {
                let session = m.http.as_ref().and_then(|h| h.session);
                let trace = self.trace(session);
                let body = self.json(m);
                let mut span = self.request_span(
                    m,
                    body.as_ref(),
                    trace,
                    span_id(&trace, m.line),
                    session,
                    protocol.get(&session).map(String::as_str),
                );
                span.end_ns = span.start_ns;
                spans.push(span);
            }
        }
        spans.sort_by_key(|s| (s.start_ns, s.line));
        let mut attrs: Vec<Attr> = vec![(
            "service.name",
            AttrValue::Str(client_name.unwrap_or_else(|| "mcp-client".into())),
        )];
        attrs.push(("mcptape.server", AttrValue::Str(self.label.to_string())));
        attrs.push((
            "mcptape.tape",
            AttrValue::Str(index.path.display().to_string()),
        ));
        Resource { attrs, spans }
    }

    /// The span of a request or notification `m` (its answer added by `finish`).
    fn request_span(
        &self,
        m: &MsgMeta,
        body: Option<&Value>,
        trace: [u8; 16],
        id: [u8; 8],
        session: Option<u32>,
        protocol: Option<&str>,
    ) -> Span {
        let method = m.method.clone().unwrap_or_default();
        let params = body.and_then(|v| v.get("params"));
        let target = target_of(Some(&method), params);
        let mut attrs: Vec<Attr> = vec![("mcp.method.name", AttrValue::Str(method.clone()))];
        if let Some(id) = &m.id {
            // The id's value, not its JSON spelling: `"a"` is `a`.
            let id = serde_json::from_str::<Value>(id)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_else(|| id.clone());
            attrs.push(("jsonrpc.request.id", AttrValue::Str(id)));
        }
        attrs.push(("jsonrpc.protocol.version", AttrValue::Str("2.0".into())));
        // The span name's target: tool and prompt names only, never a resource URI (high
        // cardinality), as the conventions ask.
        let mut name = method.clone();
        match (method.as_str(), &target) {
            ("tools/call", Some(t)) => {
                attrs.push(("gen_ai.tool.name", AttrValue::Str(t.clone())));
                attrs.push((
                    "gen_ai.operation.name",
                    AttrValue::Str("execute_tool".into()),
                ));
                name = format!("{method} {t}");
            }
            ("prompts/get", Some(t)) => {
                attrs.push(("gen_ai.prompt.name", AttrValue::Str(t.clone())));
                name = format!("{method} {t}");
            }
            (_, Some(uri)) if method.starts_with("resources/") => {
                attrs.push(("mcp.resource.uri", AttrValue::Str(uri.clone())));
            }
            _ => {}
        }
        attrs.extend(self.common(session, protocol));
        attrs.push(("mcptape.tape.line", AttrValue::Int(m.line as i64)));
        Span {
            trace_id: trace,
            span_id: id,
            parent: None,
            name,
            kind: SpanKind::Client,
            start_ns: self.at(m),
            end_ns: self.at(m),
            attrs,
            events: Vec::new(),
            status: SpanStatus::Unset,
            line: m.line,
        }
    }

    /// The answer's time and outcome: a JSON-RPC error (`error.type` and
    /// `rpc.response.status_code` are its code), a tool result with `isError` (`tool_error`),
    /// or none on the tape.
    fn finish(&self, span: &mut Span, req: &MsgMeta, answer: Option<&MsgMeta>) {
        if req.kind == Kind::Notification {
            return;
        }
        let Some(a) = answer else {
            span.status = SpanStatus::Error("no answer on the tape".into());
            span.attrs
                .push(("error.type", AttrValue::Str("no_answer".into())));
            return;
        };
        span.end_ns = self.at(a).max(span.start_ns);
        let v = self.json(a);
        if let Some(err) = v.as_ref().and_then(|v| v.get("error")) {
            let code = err["code"].as_i64().map(|c| c.to_string());
            let code = code.unwrap_or_else(|| "_OTHER".into());
            span.attrs
                .push(("error.type", AttrValue::Str(code.clone())));
            span.attrs
                .push(("rpc.response.status_code", AttrValue::Str(code)));
            span.status = SpanStatus::Error(err["message"].as_str().unwrap_or_default().into());
        } else if v.as_ref().and_then(|v| v["result"]["isError"].as_bool()) == Some(true) {
            span.attrs
                .push(("error.type", AttrValue::Str("tool_error".into())));
            span.status = SpanStatus::Error("the tool reported an error (isError)".into());
        }
    }
}

/// The model calls of an agent run as GenAI client spans.
fn model_resource(
    calls: &[Call],
    created: &str,
    start_ns: u64,
    trace: Option<[u8; 16]>,
) -> Resource {
    let trace = trace.unwrap_or_else(|| trace_id(created, "run", 0));
    let mut spans = Vec::new();
    for c in calls {
        let op = if c.path.contains("count_tokens") {
            "count_tokens"
        } else if c.path.contains("embed") {
            "embeddings"
        } else {
            "chat"
        };
        let model = c.model.clone().unwrap_or_default();
        let mut attrs: Vec<Attr> = vec![
            ("gen_ai.operation.name", AttrValue::Str(op.into())),
            (
                "gen_ai.provider.name",
                AttrValue::Str(provider_name(c).into()),
            ),
        ];
        if !model.is_empty() {
            attrs.push(("gen_ai.request.model", AttrValue::Str(model.clone())));
        }
        if let Some(n) = c.summary.get("input_tokens").and_then(Value::as_i64) {
            attrs.push(("gen_ai.usage.input_tokens", AttrValue::Int(n)));
        }
        if let Some(n) = c.summary.get("output_tokens").and_then(Value::as_i64) {
            attrs.push(("gen_ai.usage.output_tokens", AttrValue::Int(n)));
        }
        if let Some(s) = c.summary.get("stop").and_then(Value::as_str) {
            attrs.push((
                "gen_ai.response.finish_reasons",
                AttrValue::StrList(vec![s.to_string()]),
            ));
        }
        if let Some(s) = c.status {
            attrs.push(("http.response.status_code", AttrValue::Int(s.into())));
        }
        if let Some((host, port)) = host_port(&c.endpoint) {
            attrs.push(("server.address", AttrValue::Str(host)));
            attrs.push(("server.port", AttrValue::Int(port.into())));
        }
        attrs.push(("mcptape.tape.line", AttrValue::Int(c.line as i64)));
        let start = start_ns + c.t_us * 1000;
        let status = match c.status {
            Some(s) if s >= 400 => SpanStatus::Error(format!("HTTP {s}")),
            None => SpanStatus::Error(
                c.cut
                    .clone()
                    .unwrap_or_else(|| "no answer on the tape".into()),
            ),
            _ if c.cut.is_some() => SpanStatus::Error(c.cut.clone().unwrap_or_default()),
            _ => SpanStatus::Unset,
        };
        if let SpanStatus::Error(_) = status {
            let kind = c.status.filter(|s| *s >= 400).map(|s| s.to_string());
            attrs.push((
                "error.type",
                AttrValue::Str(kind.unwrap_or_else(|| "_OTHER".into())),
            ));
        }
        spans.push(Span {
            trace_id: trace,
            span_id: span_id(&trace, c.line),
            parent: None,
            name: if model.is_empty() {
                op.to_string()
            } else {
                format!("{op} {model}")
            },
            kind: SpanKind::Client,
            start_ns: start,
            end_ns: start + c.total_us.unwrap_or(0) * 1000,
            attrs,
            events: Vec::new(),
            status,
            line: c.line,
        });
    }
    Resource {
        attrs: vec![
            ("service.name", AttrValue::Str("mcptape-agent-run".into())),
            ("mcptape.server", AttrValue::Str(calls[0].label.clone())),
        ],
        spans,
    }
}

/// The conventions' `gen_ai.provider.name` for the provider the call went to.
fn provider_name(c: &Call) -> &'static str {
    use crate::model::provider::Provider;
    match c.provider {
        Provider::Anthropic => "anthropic",
        Provider::OpenAiChat | Provider::OpenAiResponses => "openai",
        Provider::Gemini => "gcp.gemini",
        Provider::Other => "_OTHER",
    }
}

/// Host and port of an `http(s)://` URL.
fn host_port(url: &str) -> Option<(String, u16)> {
    let uri: hyper::Uri = url.parse().ok()?;
    let host = uri
        .host()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    Some((host, port))
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
