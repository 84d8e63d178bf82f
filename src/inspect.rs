//! `ls` and `show`: what is on the tapes, for humans (tables) and machines (JSON).

use crate::tape::{store, End, Header, ServerDecl, TapeError, TapeIndex, TapeReader};
use crate::wire::{Dir, Kind};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One row of `mcptape ls`.
#[derive(Debug, Serialize)]
pub struct TapeSummary {
    /// The file name without `.jsonl`: the name to give `play`, `show`, `check`.
    pub name: String,
    /// The tape's path.
    pub path: PathBuf,
    /// When the recording started (the header's `created`).
    pub created: String,
    /// The first server declared, as a command line or URL; empty when none is.
    pub server: String,
    /// Answered requests: the closing line's count, or without one, the count the writer would
    /// have given it.
    pub exchanges: u64,
    /// Message lines, both directions, all servers.
    pub messages: u64,
    /// The file's size in bytes.
    pub bytes: u64,
    /// No closing line (recording interrupted or still running).
    pub open: bool,
}

/// The `ls` row of one tape (read whole, line by line).
pub(crate) fn summarize(path: &Path) -> Result<TapeSummary, TapeError> {
    let mut r = TapeReader::open(path)?;
    let created = r.header().created.clone();
    let mut server = String::new();
    let mut end: Option<End> = None;
    let (mut messages, mut exchanges) = (0u64, 0u64);
    let mut pairing = crate::tape::open_ids::Exchanges::default();
    while let Some(item) = r.next_item()? {
        match item.entry {
            crate::tape::Entry::Server(d) if server.is_empty() => server = describe_server(&d),
            crate::tape::Entry::Msg(m) => {
                messages += 1;
                exchanges += u64::from(pairing.line(&m));
            }
            crate::tape::Entry::End(e) => end = Some(e),
            _ => {}
        }
    }
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(TapeSummary {
        name,
        path: path.to_path_buf(),
        created,
        server,
        exchanges: end.as_ref().map(|e| e.exchanges).unwrap_or(exchanges),
        messages,
        bytes,
        open: end.is_none(),
    })
}

/// How a server was reached, for humans: its command line, else its URL, else its transport.
pub(crate) fn describe_server(d: &ServerDecl) -> String {
    if let Some(cmd) = &d.command {
        crate::transport::stdio::shell_words(cmd)
    } else if let Some(url) = &d.url {
        url.clone()
    } else {
        d.transport.clone()
    }
}

/// The `ls` table: a header line and one row per tape.
pub fn ls_table(rows: &[TapeSummary]) -> String {
    let mut out = String::new();
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "{:name_w$}  {:19}  {:>9}  {:>8}  {:>9}  SERVER",
        "NAME", "CREATED", "EXCHANGES", "MESSAGES", "SIZE"
    );
    for r in rows {
        let created: String = r.created.replace('T', " ").chars().take(19).collect();
        let open = if r.open { " (not closed)" } else { "" };
        let _ = writeln!(
            out,
            "{:name_w$}  {:19}  {:>9}  {:>8}  {:>9}  {}{open}",
            r.name,
            created,
            r.exchanges,
            r.messages,
            human_bytes(r.bytes),
            r.server
        );
    }
    out
}

/// A byte count for humans: `512 B`, `1.5 KiB`, … up to GiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// One message row of `mcptape show`.
#[derive(Debug, Serialize)]
pub struct ShowRow {
    /// The message's `seq` on the tape.
    pub seq: u64,
    /// 1-based line in the tape file.
    pub line: u64,
    /// Microseconds since the recording started.
    pub t_us: u64,
    /// Which way it went.
    pub dir: Dir,
    /// What it is.
    pub kind: Kind,
    /// The JSON-RPC id exactly as on the wire; None when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Box<serde_json::value::RawValue>>,
    /// The method, or for a response the method of the request it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The tool, prompt or resource the call is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// On a response: microseconds since its request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    /// On a 2026-07-28 retry (`inputResponses`): the tape line of the request it continues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of_line: Option<u64>,
    /// Added after the recording, by `play --on-miss live`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub appended: bool,
}

/// What `mcptape show` prints (as a table, or this serialized with `--json`).
#[derive(Debug, Serialize)]
pub struct ShowDoc {
    /// The tape's path.
    pub tape: PathBuf,
    /// Its header line.
    pub header: Header,
    /// Every server it declares.
    pub servers: Vec<ServerDecl>,
    /// The labels of its message lines (not printed: for checking a `--server` asked).
    #[serde(skip)]
    pub labels: Vec<String>,
    /// Its closing line; None when the recording did not end cleanly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<End>,
    /// The reader's warnings, in words.
    pub warnings: Vec<String>,
    /// Tape lines skipped as malformed (`--skip-bad-lines`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<crate::tape::BadLine>,
    /// How many client requests the shown server's conversation has.
    pub exchanges: usize,
    /// The shown server's messages, in tape order.
    pub messages: Vec<ShowRow>,
    /// The model calls on the tape (an agent run's), in tape order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub model_calls: Vec<ModelRow>,
}

/// One model call in `mcptape show`.
#[derive(Debug, Serialize)]
pub struct ModelRow {
    /// Its number under its label.
    pub call: u64,
    /// The label (`model` unless told otherwise).
    pub label: String,
    /// Tape line of its request.
    pub line: u64,
    /// When the request was read (microseconds since the recording started).
    pub t_us: u64,
    /// The API (`anthropic`, `openai-chat`, `openai-responses`, `gemini`, `other`).
    pub provider: String,
    /// The endpoint (`messages`, `responses`, …).
    pub endpoint: String,
    /// The model asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The answer's HTTP status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Stream events in the answer (0 for a whole JSON answer).
    pub events: usize,
    /// Time to the answer's head, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfb_us: Option<u64>,
    /// Time to its end, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_us: Option<u64>,
    /// What the answer said about itself: `input_tokens`, `output_tokens`, `tool_calls`,
    /// `stop`.
    pub summary: serde_json::Value,
    /// Why the answer was cut, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

impl ModelRow {
    fn of(c: crate::model::calls::Call) -> ModelRow {
        ModelRow {
            call: c.n,
            label: c.label,
            line: c.line,
            t_us: c.t_us,
            provider: c.provider.name().to_string(),
            endpoint: c.endpoint,
            model: c.model,
            status: c.status,
            events: c.events.len(),
            ttfb_us: c.ttfb_us,
            total_us: c.total_us,
            summary: c.summary,
            cut: c.cut,
        }
    }

    /// `anthropic messages claude-x: 200, 150→11 tokens, ttfb 1.20 s → mcp__S__echo`.
    fn describe(&self) -> String {
        let mut s = format!("{} {}", self.provider, self.endpoint);
        if let Some(m) = &self.model {
            s.push(' ');
            s.push_str(m);
        }
        let num = |k: &str| self.summary.get(k).and_then(serde_json::Value::as_u64);
        if let (Some(i), Some(o)) = (num("input_tokens"), num("output_tokens")) {
            s.push_str(&format!(", {i}→{o} tok"));
        }
        if let Some(status) = self.status.filter(|s| *s != 200) {
            s.push_str(&format!(", HTTP {status}"));
        }
        if self.cut.is_some() {
            s.push_str(", CUT");
        }
        if let Some(calls) = self.summary.get("tool_calls").and_then(|v| v.as_array()) {
            let names: Vec<&str> = calls.iter().filter_map(|c| c.as_str()).collect();
            s.push_str(&format!(" → {}", names.join(", ")));
        }
        s
    }
}

/// The messages of one server of a tape (default: the first declared), each with the method
/// and target of the request it belongs to and its latency.
pub fn show(
    path: &Path,
    server: Option<&str>,
    read: crate::tape::ReadOptions,
) -> Result<ShowDoc, TapeError> {
    let index = TapeIndex::load_with(path, server, read)?;
    let (model_calls, model_skipped) = crate::model::calls::load_with(path, None, read)?;
    let mut method_of = vec![None; index.msgs.len()];
    let mut target_of = vec![None; index.msgs.len()];
    let mut latency_of = vec![None; index.msgs.len()];
    let mut retry_of = vec![None; index.msgs.len()];
    for ex in index.exchanges.iter() {
        let req = &index.msgs[ex.request];
        let target = index.call_target(req);
        retry_of[ex.request] = ex
            .retry_of
            .map(|r| index.msgs[index.exchanges[r].request].line);
        target_of[ex.request] = target.clone();
        if let Some(r) = ex.response {
            method_of[r] = req.method.clone();
            target_of[r] = target;
            latency_of[r] = Some(index.msgs[r].t_us.saturating_sub(req.t_us));
        }
        // The client's answers to server requests (sampling, roots…) carry that request's method.
        for (&server_req, &answer) in &ex.client_answers {
            method_of[answer] = index.msgs[server_req].method.clone();
            latency_of[answer] = Some(
                index.msgs[answer]
                    .t_us
                    .saturating_sub(index.msgs[server_req].t_us),
            );
        }
    }
    for s in index.standalone.iter() {
        if let Some(answer) = s.client_answer {
            method_of[answer] = index.msgs[s.msg].method.clone();
            latency_of[answer] = Some(
                index.msgs[answer]
                    .t_us
                    .saturating_sub(index.msgs[s.msg].t_us),
            );
        }
    }
    let messages = index
        .msgs
        .iter()
        .enumerate()
        .map(|(i, m)| ShowRow {
            seq: m.seq,
            line: m.line,
            t_us: m.t_us,
            dir: m.dir,
            kind: m.kind,
            // Raw, so an id prints exactly as on the wire (a huge number stays that number).
            id: m
                .id
                .as_deref()
                .and_then(|t| serde_json::value::RawValue::from_string(t.to_string()).ok()),
            method: m.method.clone().or_else(|| method_of[i].clone()),
            target: target_of[i].clone(),
            latency_us: latency_of[i],
            retry_of_line: retry_of[i],
            appended: m.appended,
        })
        .collect();
    Ok(ShowDoc {
        tape: path.to_path_buf(),
        header: index.header.clone(),
        servers: index.servers.clone(),
        labels: index.labels.clone(),
        end: index.end.clone(),
        warnings: index.warnings.iter().map(|w| w.to_string()).collect(),
        skipped_lines: crate::tape::reader::merge_skipped(index.skipped_lines(), model_skipped),
        exchanges: index.exchanges.len(),
        messages,
        model_calls: model_calls.into_iter().map(ModelRow::of).collect(),
    })
}

/// The `show` table: the tape's header, servers, ending and warnings, then one row per
/// message.
pub fn show_table(doc: &ShowDoc) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "tape     {}", doc.tape.display());
    let _ = writeln!(
        out,
        "created  {}  by {}",
        doc.header.created, doc.header.tool
    );
    for s in &doc.servers {
        let _ = writeln!(
            out,
            "server   {} ({}): {}",
            s.server,
            s.transport,
            describe_server(s)
        );
    }
    match &doc.end {
        Some(e) => {
            // An agent run's tape (a model API on it) has the agent's exit in its reason.
            let run = doc
                .servers
                .iter()
                .any(|s| s.transport == crate::tape::format::MODEL_API);
            let exit = match &e.exit {
                Some(x) if x.code.is_some() => {
                    format!(", exit code {}", x.code.unwrap_or_default())
                }
                Some(x) if x.signal.is_some() => {
                    format!(", signal {}", x.signal.unwrap_or_default())
                }
                _ if run => String::new(),
                _ if doc.servers.iter().all(|s| s.transport == "streamable_http") => {
                    ", no exit status (an HTTP server is not mcptape's child)".into()
                }
                _ => ", no exit status recorded".into(),
            };
            let _ = writeln!(
                out,
                "ended    after {:.3} s: {}{exit}; {}, {}",
                e.t_us as f64 / 1e6,
                e.reason.as_deref().unwrap_or("-"),
                counted(e.messages, "message"),
                counted(e.exchanges, "exchange")
            );
        }
        None => {
            let _ = writeln!(out, "ended    (no closing line)");
        }
    }
    for w in &doc.warnings {
        let _ = writeln!(out, "warning  {w}");
    }
    if !doc.skipped_lines.is_empty() {
        let lines: Vec<String> = doc
            .skipped_lines
            .iter()
            .map(|b| b.line.to_string())
            .collect();
        let _ = writeln!(
            out,
            "skipped  malformed lines (--skip-bad-lines): {}",
            lines.join(", ")
        );
    }
    let appended = doc.messages.iter().filter(|r| r.appended).count();
    if appended > 0 {
        let _ = writeln!(
            out,
            "appended {appended} messages after the recording (play --on-miss live), marked + below"
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>5}  {:>10}  {:3}  {:12}  {:44}  {:>6}  {:>10}",
        "LINE", "TIME", "DIR", "KIND", "METHOD / TARGET", "ID", "LATENCY"
    );
    let mut models = doc.model_calls.iter().peekable();
    let model_line = |out: &mut String, m: &ModelRow| {
        let ttfb = m
            .ttfb_us
            .map(|us| format!("{:.2} ms", us as f64 / 1000.0))
            .unwrap_or_default();
        row(
            out,
            format_args!(
                "{:>5}  {:>8.3} s  {:^3}  {:12}  {:44}  {:>6}  {:>10}",
                m.line,
                m.t_us as f64 / 1e6,
                "→←",
                format!("model:{}", m.label),
                m.describe(),
                m.call,
                ttfb
            ),
        );
    };
    for r in &doc.messages {
        while let Some(m) = models.next_if(|m| m.t_us <= r.t_us) {
            model_line(&mut out, m);
        }
        let mut what = match (&r.method, &r.target) {
            (Some(m), Some(t)) => format!("{m} {t}"),
            (Some(m), None) => m.clone(),
            (None, _) => String::new(),
        };
        if let Some(line) = r.retry_of_line {
            what = format!("{what} (retry of line {line})");
        }
        let id =
            r.id.as_ref()
                .map(|v| v.get().to_string())
                .unwrap_or_default();
        let latency = r
            .latency_us
            .map(|us| format!("{:.2} ms", us as f64 / 1000.0))
            .unwrap_or_default();
        row(
            &mut out,
            format_args!(
                // The tape line, as every other message names a message (`tape line N`).
                "{:>5}  {:>8.3} s  {:^3}  {:12}  {:44}  {:>6}  {:>10}",
                r.line,
                r.t_us as f64 / 1e6,
                if r.appended {
                    format!("+{}", r.dir.arrow())
                } else {
                    r.dir.arrow().to_string()
                },
                r.kind.as_str(),
                truncate(&what, 44),
                truncate(&id, 6),
                latency
            ),
        );
    }
    for m in models {
        model_line(&mut out, m);
    }
    out
}

/// Appends a row of the table and its newline, without the padding of the columns left empty
/// at its end (a row without a latency, or without an id either).
fn row(out: &mut String, cells: std::fmt::Arguments<'_>) {
    let start = out.len();
    let _ = out.write_fmt(cells);
    let end = start + out[start..].trim_end_matches(' ').len();
    out.truncate(end);
    out.push('\n');
}

/// `s` cut to `n` characters, the last one an ellipsis when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// All tapes in the store.
pub fn ls() -> std::io::Result<Vec<Result<TapeSummary, TapeError>>> {
    Ok(store::list()?.iter().map(|p| summarize(p)).collect())
}

/// The tapes in a folder: its `.jsonl` files that are mcptape tapes (a file that is not one is
/// left out; one that is, but cannot be read, is an error in the list).
pub fn ls_in(dir: &Path) -> std::io::Result<Vec<Result<TapeSummary, TapeError>>> {
    Ok(store::list_in(dir)?
        .iter()
        .map(|p| summarize(p))
        .filter(|r| !matches!(r, Err(TapeError::NotATape { .. })))
        .collect())
}

/// `n` and what is counted, in the plural unless `n` is 1.
fn counted(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
