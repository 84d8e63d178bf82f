//! mcp-replay (`mcp-replay` 0.1.0, github.com/mstuart/mcp-replay, not on npm): a fixture
//! directory as its `FixtureStore.save` writes it — `DIR/METHOD_DIR/PARAMSHASH.json`, the method
//! with `/` made `_`, each file `JSON.stringify({method, paramsHash, params, response,
//! recordedAt}, null, 2)` — or one such fixture file. A fixture is one request (its method and
//! params, no id) and the answer to it; one per method and params, the last recorded kept.

use super::json;
use super::{malformed, ImportError, Imported, Msg, Probe};
use crate::tape::DEFAULT_SERVER;
use crate::wire::Dir;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::path::{Path, PathBuf};

const SHAPE: &str =
    "an mcp-replay fixture ({\"method\", \"paramsHash\", \"params\", \"response\", \"recordedAt\"})";

#[derive(Deserialize)]
struct Fixture<'a> {
    method: String,
    #[serde(rename = "paramsHash")]
    _params_hash: String,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    response: &'a RawValue,
    #[serde(rename = "recordedAt")]
    recorded_at: String,
}

/// The answer's id: the request's, which the fixture does not keep otherwise.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
}

/// One fixture, read: when it was recorded and its two lines.
struct Entry {
    file: PathBuf,
    at_us: u64,
    /// The answer's id, when it is a number (the clients number their requests in order).
    id: Option<u64>,
    request: String,
    answer: String,
}

pub(super) fn sniff(p: &Probe<'_>) -> bool {
    p.doc.as_ref().is_some_and(|d| {
        d.get("method").is_some_and(|m| m.is_string())
            && d.get("paramsHash").is_some_and(|h| h.is_string())
            && d.get("response").is_some_and(|r| r.is_object())
            && d.get("recordedAt").is_some()
    })
}

/// The fixture files of the directory `dir`, as mcp-replay's `load` finds them (`*/*.json`),
/// sorted by path.
pub(super) fn fixture_files(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let mut files = Vec::new();
    for method_dir in entries(dir)? {
        if method_dir.is_dir() {
            files.extend(
                entries(&method_dir)?
                    .into_iter()
                    .filter(|f| f.extension().is_some_and(|e| e == "json") && f.is_file()),
            );
        }
    }
    files.sort();
    Ok(files)
}

/// The paths in the directory `dir`.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let err = |e| ImportError::Read {
        path: dir.to_path_buf(),
        source: e,
    };
    std::fs::read_dir(dir)
        .map_err(err)?
        .map(|e| e.map(|e| e.path()).map_err(err))
        .collect()
}

/// Whether the directory `dir` holds at least one mcp-replay fixture.
pub(super) fn sniff_dir(dir: &Path) -> bool {
    fixture_files(dir).is_ok_and(|files| {
        files
            .iter()
            .any(|f| super::read_text(f).is_ok_and(|text| sniff(&Probe::new(&text))))
    })
}

/// One fixture file's text.
pub(super) fn read(path: &Path, text: &str) -> Result<Imported, ImportError> {
    imported(vec![entry(path, text)?])
}

/// Every fixture of the directory `dir`.
pub(super) fn read_dir(dir: &Path) -> Result<Imported, ImportError> {
    let mut entries = Vec::new();
    for file in fixture_files(dir)? {
        let text = super::read_text(&file)?;
        entries.push(entry(&file, &text)?);
    }
    if entries.is_empty() {
        return Err(malformed(
            dir,
            "the directory",
            "no mcp-replay fixture in it; mcp-replay writes FIXTURE_DIR/METHOD_DIR/PARAMSHASH.json",
        ));
    }
    imported(entries)
}

fn entry(path: &Path, text: &str) -> Result<Entry, ImportError> {
    let f: Fixture<'_> = super::parse_doc(path, text, SHAPE)?;
    let answer: Answer<'_> = serde_json::from_str(f.response.get()).map_err(|e| {
        malformed(
            path,
            "response",
            format!(
                "{}; mcp-replay stores the JSON-RPC answer there, with its id",
                json::what(&e)
            ),
        )
    })?;
    let at = humantime::parse_rfc3339_weak(&f.recorded_at).map_err(|e| {
        malformed(
            path,
            "recordedAt",
            format!(
                "{:?}: {e}; mcp-replay writes an ISO 8601 time",
                f.recorded_at
            ),
        )
    })?;
    let at_us = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let id = json::compact(answer.id.get());
    let method = serde_json::to_string(&f.method).expect("a string serializes");
    // The request is rebuilt: the fixture keeps its method and params, the answer its id.
    let request = match f.params {
        Some(p) => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{}}}"#,
            json::compact(p.get())
        ),
        None => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method}}}"#),
    };
    Ok(Entry {
        file: path.to_path_buf(),
        at_us,
        id: id.parse().ok(),
        request,
        answer: json::compact(f.response.get()),
    })
}

fn imported(mut entries: Vec<Entry>) -> Result<Imported, ImportError> {
    // mcp-replay keeps no order: each fixture's recordedAt (to the millisecond) is the best it
    // has; within a millisecond the clients' increasing ids, then the file name, decide.
    entries.sort_by(|a, b| {
        (a.at_us, a.id.is_none(), a.id, &a.file).cmp(&(b.at_us, b.id.is_none(), b.id, &b.file))
    });
    let start = entries.first().map_or(0, |e| e.at_us);
    let mut out = Imported::default();
    out.servers.push(super::stdio_decl(DEFAULT_SERVER, None));
    for e in entries {
        let since = e.at_us - start;
        if since > super::MAX_T_US {
            return Err(super::out_of_range(
                &e.file,
                "recordedAt",
                format!("{since} µs after the earliest fixture's recordedAt"),
            ));
        }
        let t_us = Some(since);
        for (dir, line) in [(Dir::C2S, e.request), (Dir::S2C, e.answer)] {
            out.msgs.push(Msg {
                server: DEFAULT_SERVER.into(),
                dir,
                t_us,
                line,
            });
        }
    }
    out.lacks.push("notifications both ways (notifications/initialized, progress, logging, list_changed) and the server's requests to the client (sampling, elicitation, roots) with their answers: mcp-replay keeps a request and its answer only".into());
    out.lacks.push("repeats: one answer per method and params, the last recorded (play --repeat last answers every repeat with it, as mcp-replay does)".into());
    out.lacks.push("the order of calls and their latency: each fixture has the time its answer was recorded (to the millisecond); the request is placed at that time".into());
    out.lacks.push("the request as sent: it is rebuilt from the fixture's method and params and its answer's id".into());
    out.lacks.push("the wire bytes: mcp-replay stores JavaScript's JSON.stringify of each message (numbers as doubles: 4.0 is written 4; integer-like keys first); params fields its scrubFields removed, if any; the server's command line, its stderr and its exit code".into());
    Ok(out)
}
