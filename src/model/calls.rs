//! The model calls on a tape, read back: each call's request, its answer's head, its stream
//! events (or whole body) and how it ended, from the `model` lines of one label.

use super::provider::Provider;
use crate::tape::index::TapeServers;
use crate::tape::{Entry, TapeError, TapeIndex, TapeReader};
use crate::transport::sse;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::path::Path;

/// One stream event, as taped.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `event:` (none for data-only streams: OpenAI Chat, Gemini).
    pub event: Option<String>,
    /// `id:`.
    pub id: Option<String>,
    /// `retry:`.
    pub retry: Option<u64>,
    /// The data (JSON verbatim, or text such as `[DONE]`).
    pub data: Option<String>,
    /// A block kept raw (comments only, or over the size limit): `data` is the block.
    pub raw: bool,
    /// Microseconds since the call's request was read.
    pub t_us: u64,
}

impl Event {
    /// The event as it goes on the wire again: `event:`, `id:`, `retry:`, then the data one
    /// `data:` line per line, and the blank line.
    pub fn to_wire(&self) -> Vec<u8> {
        if self.raw {
            return self.data.clone().unwrap_or_default().into_bytes();
        }
        // Field by field as `sse` writes them: no string from the tape can break the framing.
        let mut out = String::new();
        if let Some(e) = &self.event {
            sse::push_field(&mut out, "event", e);
        }
        if let Some(id) = &self.id {
            sse::push_field(&mut out, "id", id);
        }
        if let Some(r) = self.retry {
            out.push_str(&format!("retry: {r}\n"));
        }
        if let Some(d) = &self.data {
            sse::push_data(&mut out, d);
        }
        out.push('\n');
        out.into_bytes()
    }
}

/// One model call, as taped.
#[derive(Debug, Clone)]
pub struct Call {
    /// Its number on the tape (1, 2, … per label).
    pub n: u64,
    /// The tape line of its request.
    pub line: u64,
    /// The label it was taped under.
    pub label: String,
    /// When its request was read, in microseconds since the recording started.
    pub t_us: u64,
    /// The API.
    pub provider: Provider,
    /// The endpoint (see [`super::provider::Route::endpoint`]).
    pub endpoint: String,
    /// The model asked for.
    pub model: Option<String>,
    /// The HTTP method and path (with the query) the client used.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The request body, as taped (redacted).
    pub request: Vec<u8>,
    /// The answer's status, when one came.
    pub status: Option<u16>,
    /// The answer's content type.
    pub content_type: Option<String>,
    /// A whole (non-streamed) answer body.
    pub body: Option<Vec<u8>>,
    /// A streamed answer's events.
    pub events: Vec<Event>,
    /// Set when the stream was cut (or the upstream failed): why.
    pub cut: Option<String>,
    /// Time to the answer's head, and to its end, in microseconds.
    pub ttfb_us: Option<u64>,
    /// Total time, in microseconds.
    pub total_us: Option<u64>,
    /// What the answer said about itself (usage, tool calls, stop reason).
    pub summary: Value,
    /// The answer's tape line (its head), for explanations.
    pub answer_line: Option<u64>,
}

#[derive(Deserialize)]
struct Line<'a> {
    server: Cow<'a, str>,
    t_us: u64,
    call: u64,
    #[serde(borrow)]
    part: Cow<'a, str>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    retry: Option<u64>,
    #[serde(default)]
    raw: bool,
    #[serde(default)]
    cut: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    ttfb_us: Option<u64>,
    #[serde(default)]
    total_us: Option<u64>,
    #[serde(default)]
    summary: Option<Value>,
    /// `null` is a body too (an answer or event that said `null`).
    #[serde(borrow, default, deserialize_with = "crate::tape::format::raw_body")]
    msg: Option<&'a RawValue>,
    #[serde(default)]
    text: Option<String>,
    /// A body that is not UTF-8, in base64.
    #[serde(borrow, default)]
    b64: Option<Cow<'a, str>>,
    #[serde(default)]
    http: Option<Value>,
}

impl Line<'_> {
    fn body(&self) -> Option<Vec<u8>> {
        use base64::Engine as _;
        match (&self.msg, &self.text, &self.b64) {
            (Some(m), _, _) => Some(m.get().as_bytes().to_vec()),
            (None, Some(t), _) => Some(t.clone().into_bytes()),
            (None, None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(&**b).ok(),
            _ => None,
        }
    }
}

/// Whether the tape line `raw` is a model line.
pub(crate) fn is_model_line(raw: &[u8]) -> bool {
    raw.starts_with(b"{\"type\":\"model\"")
}

/// The model calls of label `server` on the tape at `path` (any label when `None`), in order.
pub fn load(path: &Path, server: Option<&str>) -> Result<Vec<Call>, TapeError> {
    load_with(path, server, crate::tape::ReadOptions::default()).map(|(calls, _)| calls)
}

/// [`load`], with how bad lines are treated (`--skip-bad-lines`: a model line that does not
/// read is skipped like any other bad line); also the lines skipped.
pub fn load_with(
    path: &Path,
    server: Option<&str>,
    options: crate::tape::ReadOptions,
) -> Result<(Vec<Call>, Vec<crate::tape::BadLine>), TapeError> {
    let mut r = TapeReader::open_with(path, options)?;
    let mut calls = Gather::new(server);
    while let Some(item) = r.next_item()? {
        if !matches!(item.entry, Entry::Unknown) || !is_model_line(item.raw) {
            continue;
        }
        let line = item.line;
        if let Err(message) = calls.line(line, item.raw) {
            r.bad_line(line, message)?;
        }
    }
    Ok((
        calls.finish(),
        crate::tape::reader::skipped_lines(r.warnings()),
    ))
}

/// Reads the tape at `path` once for both: the conversation of each MCP server on it
/// ([`TapeIndex::load_every_with`]) and, with `calls`, its model calls (any label), gathered in
/// the same pass; without, model lines are passed over unparsed (so one that does not read is
/// no bad line). What diff and the HTML report read a tape with.
pub fn load_every(
    path: &Path,
    options: crate::tape::ReadOptions,
    calls: bool,
) -> Result<(TapeServers, Vec<Call>), TapeError> {
    if !calls {
        return TapeIndex::load_every_with(path, options).map(|t| (t, Vec::new()));
    }
    let mut gather = Gather::new(None);
    let tape = TapeIndex::load_every_with_lines(path, options, &mut |line, raw| {
        if is_model_line(raw) {
            gather.line(line, raw)
        } else {
            Ok(())
        }
    })?;
    Ok((tape, gather.finish()))
}

/// The model calls of a tape, put together line by line as the tape is read: by [`load_with`],
/// or by a read that indexes the tape's MCP servers at the same time (diff), so that the tape
/// is read once for both.
#[derive(Debug, Default)]
pub(crate) struct Gather {
    /// Only this label's calls (any label when `None`).
    server: Option<String>,
    calls: Vec<Call>,
    /// Each call's place in `calls` and its request's time, by label and number.
    starts: std::collections::HashMap<(String, u64), (usize, u64)>,
}

impl Gather {
    /// Gathers the calls of label `server` (any label when `None`).
    pub(crate) fn new(server: Option<&str>) -> Gather {
        Gather {
            server: server.map(str::to_string),
            ..Gather::default()
        }
    }

    /// Tape line `line`, a model line ([`is_model_line`]): why it does not read, if it does
    /// not (a bad line for the reader to refuse or skip).
    pub(crate) fn line(&mut self, line: u64, raw: &[u8]) -> Result<(), String> {
        let l: Line<'_> = serde_json::from_slice(raw).map_err(|e| {
            crate::tape::reader::json_problem("a model line that does not read", &e, raw)
        })?;
        if self.server.as_deref().is_some_and(|s| s != l.server) {
            return Ok(());
        }
        let calls = &mut self.calls;
        let key = (l.server.to_string(), l.call);
        if l.part == "request" {
            let http = l.http.clone().unwrap_or(Value::Null);
            let s = |k: &str| {
                http.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            self.starts.insert(key, (calls.len(), l.t_us));
            calls.push(Call {
                n: l.call,
                line,
                label: l.server.to_string(),
                t_us: l.t_us,
                provider: Provider::from_name(l.provider.as_deref().unwrap_or("")),
                endpoint: l.endpoint.clone().unwrap_or_default(),
                model: l.model.clone(),
                method: s("method"),
                path: s("path"),
                request: l.body().unwrap_or_default(),
                status: None,
                content_type: None,
                body: None,
                events: Vec::new(),
                cut: None,
                ttfb_us: None,
                total_us: None,
                summary: Value::Null,
                answer_line: None,
            });
            return Ok(());
        }
        let Some(&(at, t0)) = self.starts.get(&key) else {
            return Ok(()); // a part of a call whose request is not on the tape (cut at the start)
        };
        let call = &mut calls[at];
        match l.part.as_ref() {
            "response" => {
                if let Some(h) = &l.http {
                    call.status = h.get("status").and_then(Value::as_u64).map(|s| s as u16);
                    call.content_type = h
                        .get("content_type")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                call.ttfb_us = l.ttfb_us;
                call.total_us = l.total_us.or(call.total_us);
                call.body = l.body();
                call.answer_line = Some(line);
                if let Some(s) = l.summary {
                    call.summary = s;
                }
            }
            "event" => call.events.push(Event {
                event: l.event.clone(),
                id: l.id.clone(),
                retry: l.retry,
                data: l.body().map(|b| String::from_utf8_lossy(&b).into_owned()),
                raw: l.raw,
                t_us: l.t_us.saturating_sub(t0),
            }),
            "end" => {
                call.total_us = l.total_us.or(call.total_us);
                call.cut = l.cut.clone().or(l.error.clone());
                if let Some(s) = l.summary {
                    call.summary = s;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The calls gathered, in tape order.
    pub(crate) fn finish(self) -> Vec<Call> {
        self.calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
    use crate::wire::Dir;
    use serde_json::{json, Map};
    use std::time::Instant;

    /// A model tape of one call: its request (a POST of `/v1/messages`), an answer with
    /// `content_type` and `answer` as its body (`None`: a stream, whose events follow), and
    /// `events` as `(event name, data)`. Returns the tape's folder (kept alive) and path.
    fn one_call(
        request: &[u8],
        content_type: &str,
        answer: Option<&[u8]>,
        events: &[(&str, &[u8])],
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = TapeWriter::create(&path, WriteOptions::redacted()).unwrap();
        w.declare_server(ServerDecl::model("model", "http://127.0.0.1:1".into()))
            .unwrap();
        let now = Instant::now();
        let post = json!({"method": "POST", "path": "/v1/messages"});
        let none = Map::new();
        w.model(
            "model",
            Dir::C2S,
            1,
            "request",
            &none,
            Some(request),
            Some(&post),
            now,
        );
        let head = json!({"status": 200, "content_type": content_type});
        w.model(
            "model",
            Dir::S2C,
            1,
            "response",
            &none,
            answer,
            Some(&head),
            now,
        );
        for (name, data) in events {
            let mut f = Map::new();
            f.insert("event".into(), json!(name));
            w.model("model", Dir::S2C, 1, "event", &f, Some(data), None, now);
        }
        w.finish(None, Some("done".into())).unwrap();
        (dir, path)
    }

    #[test]
    fn a_null_body_is_read_back_as_null_not_as_no_body() {
        let (_dir, path) = one_call(br#"{"model":"m"}"#, "application/json", Some(b"null"), &[]);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains(r#""msg":null"#));
        let calls = load(&path, None).unwrap();
        assert_eq!(calls[0].body.as_deref(), Some(&b"null"[..]));
    }

    /// A body that is not UTF-8 is taped as `b64`: it reads back byte for byte (found by the
    /// `model_body` fuzz target: it read back empty, so a binary answer was replayed as an empty
    /// body and a binary request never matched again).
    #[test]
    fn a_body_that_is_not_utf8_reads_back_byte_for_byte() {
        let request: &[u8] = b"\x1f\x8b\x08 binary \xff request";
        let answer: &[u8] = b"ID3\x04\x00 an mp3 \xfe\xff";
        let (_dir, path) = one_call(request, "audio/mpeg", Some(answer), &[]);
        let calls = load(&path, Some("model")).unwrap();
        assert_eq!(calls[0].request, request);
        assert_eq!(calls[0].body.as_deref(), Some(answer));
    }

    /// An event whose data is empty (`data:`) keeps it: replayed without its data line, a
    /// client would not see the event at all (an event-stream client dispatches nothing for an
    /// event with no data). Found by the `model_body` fuzz target.
    #[test]
    fn an_event_with_empty_data_is_served_with_its_data_line() {
        let (_dir, path) = one_call(b"{}", "text/event-stream", None, &[("ping", b"")]);
        let calls = load(&path, Some("model")).unwrap();
        assert_eq!(calls[0].events[0].data.as_deref(), Some(""));
        assert_eq!(calls[0].events[0].to_wire(), b"event: ping\ndata: \n\n");
    }

    /// JSON with bytes that are not UTF-8 inside a string is not JSON for the tape: taped as
    /// `b64`, the tape still reads (found by the `model_body` fuzz target: the body went on the
    /// tape line verbatim, the line no longer read, and neither did any model call of the tape).
    #[test]
    fn json_that_is_not_utf8_does_not_break_the_tape() {
        let request: &[u8] = b"{\"model\": \"m\", \"x\": \"caf\xe9\"}";
        let (_dir, path) = one_call(request, "application/json", Some(request), &[]);
        let calls = load(&path, Some("model")).expect("the tape reads");
        assert_eq!(calls[0].request, request);
        assert_eq!(calls[0].body.as_deref(), Some(request));
    }
}
