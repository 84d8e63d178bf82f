//! The redaction corpora (tests/corpus) end to end, through the real binary: a server
//! (tests/peers/corpus_server.py) puts every secret of `secrets.jsonl` in every position a server
//! has — tool results, JSON inside a text result, resource text and base64 `blob`, log
//! notifications, JSON-RPC error messages and data, its own command line — and a client sends
//! every secret as tool arguments (and, over HTTP, as `Mcp-Param-*` headers). The session is
//! recorded over stdio, through `record --url` (Streamable HTTP, the official Python SDK server)
//! and through the bridge (`record --listen`, the stdio server behind HTTP); no secret may be
//! left on any tape, in any encoding `corpus::leaks` knows, and `mcptape lint` must find the tape
//! clean. Every ordinary value of `ordinary.jsonl` is recorded and played back: the client's
//! transcript against play is byte-identical to the one from the real server.
//!
//! Figures go to stderr: `cargo test --test it corpus_e2e -- --nocapture`.

use crate::corpus::{leak_pieces, leaks, ordinary, secrets, views, Secret};
use crate::harness::*;
use crate::http::{http_open, post_headers, Served};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const PROTOCOL: &str = "2025-06-18";

fn fixture() -> PathBuf {
    let p = repo().join("tests/peers/corpus_server.py");
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}

fn js(s: &str) -> String {
    serde_json::to_string(s).expect("json string")
}

/// The server's config file: the texts it serves and the raw answers of its `answers` tools.
fn write_config(dir: &Path, name: &str, texts: &[String], answers: &[(String, String)]) -> PathBuf {
    let answers: serde_json::Map<String, Value> = answers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let path = dir.join(name);
    std::fs::write(
        &path,
        json!({"texts": texts, "answers": answers}).to_string(),
    )
    .expect("write server config");
    path
}

/// A hermetic `mcptape` command: run in `home`, its store `home/.mcptape`, no inherited key.
fn mcptape_in(home: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(home)
        .env("MCPTAPE_DIR", home.join(".mcptape"))
        .env_remove("MCPTAPE_SIGNING_KEY")
        .env("NO_COLOR", "1");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// At most `n` characters of `s`, for failure messages.
fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

// --- finding secrets fast --------------------------------------------------------------------

/// Finds the corpus secrets in a text as `corpus::leaks` does — the same pieces (windows of the
/// secret) looked for in the same views (`corpus::views`: the bytes, every JSON string decoded,
/// JSON inside strings, base64 that decodes to text) — but for all 329 secrets in one pass over
/// the text: `leaks` secret by secret over a whole tape is 329 × ~40 000 pieces × megabytes.
///
/// `leaks` was made for one secret in one message. On a whole tape, which holds all 329 texts
/// around their secrets, a piece can also turn up where no secret is: DER and OpenSSH headers
/// are the same in every key, an ed25519 public key sits inside its private key, a JWT's base64
/// of `{"alg":…` or `https://a…` is the base64 of the same text in a `blob`. So pieces that also
/// occur in what a perfect redaction leaves on the tape (each text with every corpus secret cut
/// out, as text, inside JSON and as base64 at every alignment), and pieces shared by two
/// secrets, are not looked for (`exclude_innocent`). Every secret keeps most of its pieces, and
/// the sessions check that each secret is still found in everything the client sent and got.
struct Detector<'a> {
    secrets: &'a [Secret],
    /// The pieces looked for, per secret.
    per_secret: Vec<Vec<String>>,
    /// Per piece length: (the piece's bytes packed, secret index), sorted.
    index: Vec<(usize, Vec<(u128, usize)>)>,
    /// One bit per hash of a piece's first four bytes.
    bloom: Vec<u64>,
    /// Pieces left out by `exclude_innocent`.
    excluded: usize,
}

const BLOOM_BITS: u32 = 24;

fn bloom_index(b: &[u8]) -> usize {
    let x = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    (x.wrapping_mul(0x9E37_79B1) >> (32 - BLOOM_BITS)) as usize
}

fn pack(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |k, &c| (k << 8) | u128::from(c))
}

impl<'a> Detector<'a> {
    fn new(secrets: &'a [Secret]) -> Detector<'a> {
        let mut by_len: BTreeMap<usize, Vec<(u128, usize)>> = BTreeMap::new();
        let mut bloom = vec![0u64; (1usize << BLOOM_BITS) / 64];
        let mut per_secret = Vec::new();
        for (i, s) in secrets.iter().enumerate() {
            let pieces = leak_pieces(&s.secret);
            assert!(!pieces.is_empty(), "{}: no piece to look for", s.format);
            for p in &pieces {
                // Corpus secrets are ASCII: a piece's characters are its bytes.
                assert!(
                    p.is_ascii() && (4..=16).contains(&p.len()),
                    "{}: piece {p:?}",
                    s.format
                );
                let b = p.as_bytes();
                let bit = bloom_index(b);
                bloom[bit / 64] |= 1 << (bit % 64);
                by_len.entry(b.len()).or_default().push((pack(b), i));
            }
            per_secret.push(pieces);
        }
        let index = by_len
            .into_iter()
            .map(|(n, mut v)| {
                v.sort_unstable();
                v.dedup();
                (n, v)
            })
            .collect();
        Detector {
            secrets,
            per_secret,
            index,
            bloom,
            excluded: 0,
        }
    }

    /// Every (secret, piece length, piece) found in one of `views`.
    fn scan(&self, views: &[String]) -> BTreeSet<(usize, usize, u128)> {
        let mut out = BTreeSet::new();
        for v in views {
            let b = v.as_bytes();
            for p in 0..b.len().saturating_sub(3) {
                let bit = bloom_index(&b[p..]);
                if self.bloom[bit / 64] & (1 << (bit % 64)) == 0 {
                    continue;
                }
                for (n, list) in &self.index {
                    if p + n > b.len() {
                        break;
                    }
                    let key = pack(&b[p..p + n]);
                    let from = list.partition_point(|(k, _)| *k < key);
                    for (_, i) in list[from..].iter().take_while(|(k, _)| *k == key) {
                        out.insert((*i, *n, key));
                    }
                }
            }
        }
        out
    }

    /// The secrets with a piece in a view of `hay`.
    fn found(&self, hay: &str) -> BTreeSet<usize> {
        self.scan(&views(hay)).into_iter().map(|e| e.0).collect()
    }

    /// The pieces of secret `i` found in `views` (a few, for the report).
    fn pieces_in(&self, views: &[String], i: usize) -> Vec<String> {
        self.per_secret[i]
            .iter()
            .filter(|p| views.iter().any(|v| v.contains(p.as_str())))
            .take(3)
            .cloned()
            .collect()
    }

    /// Whether secret `i` has a piece in one of `views` (what `leaks` asks, the views made once).
    fn in_views(&self, views: &[String], i: usize) -> bool {
        self.per_secret[i]
            .iter()
            .any(|p| views.iter().any(|v| v.contains(p.as_str())))
    }

    /// The detector finds what `corpus::leaks` finds, secret by secret, in each text as a JSON
    /// string, as base64 in a JSON string and inside JSON inside a JSON string (and a secret's
    /// neighbour's text, to see it say no too). Before `exclude_innocent`.
    fn assert_agrees_with_leaks(&self) {
        use base64::Engine as _;
        assert_eq!(self.excluded, 0, "checked on the full detector");
        let n = self.secrets.len();
        for i in 0..n {
            let t = &self.secrets[i].text;
            for hay in [
                js(t),
                js(&base64::engine::general_purpose::STANDARD.encode(t)),
                js(&json!({"config": {"value": t}}).to_string()),
            ] {
                let found = self.found(&hay);
                let v = views(&hay);
                for j in [i, (i + 1) % n] {
                    let want = leaks(&hay, &self.secrets[j].secret);
                    assert_eq!(
                        found.contains(&j),
                        want,
                        "the detector and corpus::leaks disagree on {} in {}",
                        self.secrets[j].format,
                        clip(&hay, 200)
                    );
                    assert_eq!(self.in_views(&v, j), want, "{}", self.secrets[j].format);
                }
            }
        }
    }

    /// Stops looking for pieces that occur where no secret is (see the type's comment).
    fn exclude_innocent(&mut self) {
        use base64::Engine as _;
        let b64 = &base64::engine::general_purpose::STANDARD;
        let mut by_len: Vec<&Secret> = self.secrets.iter().collect();
        by_len.sort_by_key(|x| std::cmp::Reverse(x.secret.len()));
        let mut innocent = Vec::new();
        for x in self.secrets {
            let mut t = x.text.clone();
            for y in &by_len {
                t = t.replace(y.secret.as_str(), "[REDACTED]");
            }
            for pad in ["", "x", "xx"] {
                innocent.push(b64.encode(format!("{pad}{t}")));
            }
            innocent.push(json!({"config": {"value": t, "n": 2.5}}).to_string());
            innocent.push(t);
        }
        let mut drop: BTreeSet<(usize, u128)> = self
            .scan(&innocent)
            .into_iter()
            .map(|(_, n, key)| (n, key))
            .collect();
        for (n, list) in &self.index {
            for w in list.windows(2) {
                if w[0].0 == w[1].0 {
                    drop.insert((*n, w[0].0));
                }
            }
        }
        for (n, list) in &mut self.index {
            list.retain(|(k, _)| !drop.contains(&(*n, *k)));
        }
        for (i, pieces) in self.per_secret.iter_mut().enumerate() {
            let before = pieces.len();
            pieces.retain(|p| !drop.contains(&(p.len(), pack(p.as_bytes()))));
            self.excluded += before - pieces.len();
            assert!(
                !pieces.is_empty(),
                "{}: all of its {before} pieces also occur where no secret is",
                self.secrets[i].format,
            );
        }
    }
}

/// The secrets corpus and its detector, made once for the tests that share them: checked
/// against `corpus::leaks`, then without the pieces that occur where no secret is.
fn detector() -> &'static Detector<'static> {
    static CORPUS: OnceLock<Vec<Secret>> = OnceLock::new();
    static DETECTOR: OnceLock<Detector<'static>> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let mut det = Detector::new(CORPUS.get_or_init(secrets));
        det.assert_agrees_with_leaks();
        det.exclude_innocent();
        det
    })
}

/// Every string (and key) in `v` with its JSON path.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((path, s.clone())),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{path}[{i}]"), out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                out.push((format!("{path} (key {k:?})"), k.clone()));
                leaves(x, format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

// --- the secret session ----------------------------------------------------------------------

/// Request ids of the session, and the position each carries.
const ID_RESULTS: i64 = 1;
const ID_NESTED: i64 = 2;
const ID_LOG: i64 = 3;
const ID_RESOURCE_TEXT: i64 = 4;
const ID_RESOURCE_BLOB: i64 = 5;
const ID_ARGUMENTS: i64 = 6;
const ID_ERRORS: i64 = 100;
const ID_HEADERS: i64 = 10_000;

/// The command line's fixed part: python, the script, `stdio`, the config.
const ARGV_FIXED: usize = 4;

fn position_of_id(id: i64) -> &'static str {
    match id {
        0 => "initialize",
        ID_RESULTS => "tool result (content text, structuredContent)",
        ID_NESTED => "JSON inside a text result",
        ID_LOG => "log notifications' call",
        ID_RESOURCE_TEXT => "resource text",
        ID_RESOURCE_BLOB => "resource blob",
        ID_ARGUMENTS => "tool arguments",
        i if (ID_ERRORS..ID_HEADERS).contains(&i) => "JSON-RPC error",
        i if i >= ID_HEADERS => "Mcp-Param headers' call",
        _ => "other",
    }
}

/// The position a tape line (and a JSON path in it) stands for.
fn position_of_line(line: &Value, path: &str) -> String {
    match line["type"].as_str() {
        Some("server") => {
            // Per secret: `--api-key`, the secret, `TOKEN=` the secret, the text.
            let form = path
                .strip_prefix("$.command[")
                .and_then(|p| p.split(']').next())
                .and_then(|k| k.parse::<usize>().ok())
                .filter(|&k| k >= ARGV_FIXED)
                .map(|k| match (k - ARGV_FIXED) % 4 {
                    0 => "the `--api-key` flag",
                    1 => "--api-key <secret>",
                    2 => "TOKEN=<secret>",
                    _ => "the text as one argument",
                });
            format!("command line ({})", form.unwrap_or("?"))
        }
        Some("msg") => {
            if path.starts_with("$.http") {
                return "HTTP facts (Mcp-Param headers)".into();
            }
            if line["method"] == "notifications/message" {
                return "log notification".into();
            }
            match line["id"].as_i64() {
                Some(id) => format!(
                    "{} ({})",
                    position_of_id(id),
                    line["dir"].as_str().unwrap_or("?")
                ),
                None => format!("{} {}", line["kind"], line["method"]),
            }
        }
        Some(t) => format!("{t} line"),
        None => "a line with no type".into(),
    }
}

/// The server's command line: the fixture, then for every secret `--api-key SECRET`,
/// `TOKEN=SECRET` and its text as one argument.
fn secret_argv(config: &Path, corpus: &[Secret]) -> Vec<String> {
    let mut argv = vec![python(), s(fixture()), "stdio".into(), s(config)];
    assert_eq!(argv.len(), ARGV_FIXED);
    for x in corpus {
        argv.push("--api-key".into());
        argv.push(x.secret.clone());
        argv.push(format!("TOKEN={}", x.secret));
        argv.push(x.text.clone());
    }
    argv
}

/// A text an HTTP header can carry: one line of printable ASCII.
fn header_safe(t: &str) -> bool {
    t.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\t')
}

/// The texts a header can carry, in groups small enough for one request head each (the SDK's
/// server reads heads of up to 16 KiB).
fn header_groups(corpus: &[Secret]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for (i, x) in corpus.iter().enumerate() {
        if !header_safe(&x.text) {
            continue;
        }
        let cost = x.text.len() + 24;
        match groups.last_mut() {
            Some(g) if size + cost <= 6000 && g.len() < 32 => g.push(i),
            _ => {
                groups.push(vec![i]);
                size = 0;
            }
        }
        size += cost;
    }
    groups
}

/// A client's side of one transport: a request (raw JSON text) and every message the client got
/// until its response (the response last).
trait Wire {
    fn request(&mut self, id: i64, raw: &str, headers: &[(String, String)]) -> Vec<String>;
    fn notify(&mut self, raw: &str);
}

struct StdioWire(LineClient);

impl Wire for StdioWire {
    fn request(&mut self, id: i64, raw: &str, headers: &[(String, String)]) -> Vec<String> {
        assert!(headers.is_empty(), "no headers over stdio");
        self.0.send_raw(format!("{raw}\n").as_bytes());
        let mut got = Vec::new();
        loop {
            let line = self
                .0
                .recv_raw(Duration::from_secs(30))
                .unwrap_or_else(|| panic!("no answer to request {id} within 30 s"));
            let line = text(&line).trim_end_matches(['\r', '\n']).to_string();
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", clip(&line, 300)));
            let done =
                v["id"] == json!(id) && (v.get("result").is_some() || v.get("error").is_some());
            got.push(line);
            if done {
                return got;
            }
        }
    }

    fn notify(&mut self, raw: &str) {
        self.0.send_raw(format!("{raw}\n").as_bytes());
    }
}

/// Streamable HTTP in the handshake era: the session id from `initialize`, then on every POST.
struct HttpWire {
    url: String,
    session: Option<String>,
}

impl HttpWire {
    /// A client of `url` with no session yet.
    fn new(url: &str) -> HttpWire {
        HttpWire {
            url: url.to_string(),
            session: None,
        }
    }

    fn post(&mut self, raw: &str, extra: &[(String, String)]) -> (u16, Vec<String>) {
        let session = self.session.clone();
        let mut h = post_headers(&[]);
        if let Some(sid) = &session {
            h.push(("Mcp-Session-Id", sid));
            h.push(("MCP-Protocol-Version", PROTOCOL));
        }
        h.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut st = http_open(&self.url, "POST", &h, raw.as_bytes());
        let ctype = st.header("content-type").unwrap_or_default().to_string();
        if self.session.is_none() {
            self.session = st.header("mcp-session-id").map(str::to_string);
        }
        let status = st.status;
        let body = text(&st.body());
        let msgs = if ctype.starts_with("text/event-stream") {
            sse_data(&body)
        } else if body.trim().is_empty() {
            Vec::new()
        } else {
            vec![body]
        };
        (status, msgs)
    }
}

/// The `data` of each SSE event in a body (events without data left out).
fn sse_data(body: &str) -> Vec<String> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let d = data.join("\n");
            (!d.trim().is_empty()).then_some(d)
        })
        .collect()
}

impl Wire for HttpWire {
    fn request(&mut self, id: i64, raw: &str, headers: &[(String, String)]) -> Vec<String> {
        let (status, msgs) = self.post(raw, headers);
        assert_eq!(status, 200, "request {id}: HTTP {status}: {msgs:?}");
        let last = msgs
            .last()
            .and_then(|m| serde_json::from_str::<Value>(m).ok())
            .unwrap_or_else(|| panic!("request {id}: no JSON answer: {msgs:?}"));
        assert_eq!(last["id"], json!(id), "request {id}: the answer comes last");
        msgs
    }

    fn notify(&mut self, raw: &str) {
        let (status, _) = self.post(raw, &[]);
        assert_eq!(status, 202, "a notification is accepted");
    }
}

/// What the client sent and got in each position: the traffic (to show every secret crossed the
/// wire there) and the secrets placed in it.
#[derive(Default)]
struct Placed {
    positions: Vec<(&'static str, String, BTreeSet<usize>)>,
}

impl Placed {
    /// The server's command line (past its fixed head), which holds every one of the `n`
    /// secrets.
    fn add_command_line(&mut self, argv: &[String], n: usize) {
        self.add(
            "command line",
            serde_json::to_string(&argv[ARGV_FIXED..]).unwrap(),
            0..n,
        );
    }

    fn add(
        &mut self,
        name: &'static str,
        traffic: String,
        placed: impl IntoIterator<Item = usize>,
    ) {
        self.positions
            .push((name, traffic, placed.into_iter().collect()));
    }
}

fn parse(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|e| panic!("not JSON ({e}): {}", clip(raw, 300)))
}

/// The client's `initialize` request (id 0).
fn initialize_raw() -> String {
    let params = json!({
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "corpus-e2e", "version": "1"},
    });
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).to_string()
}

/// Messages (raw JSON texts) as one JSON array, so `corpus::views` decodes all of them.
fn json_list(msgs: &[String]) -> String {
    format!("[{}]", msgs.join(","))
}

fn call_raw(id: i64, name: &str, args: Value) -> String {
    let params = json!({"name": name, "arguments": args});
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// The whole secret session on `w`; `headers`: also the `Mcp-Param-*` calls. Checks that the
/// client got every text exactly (mcptape forwards unchanged) and returns what was placed.
fn secret_session(w: &mut dyn Wire, corpus: &[Secret], headers: bool) -> Placed {
    let n = corpus.len();
    let texts: Vec<&str> = corpus.iter().map(|x| x.text.as_str()).collect();
    let all = || 0..n;
    let mut placed = Placed::default();

    let init = w.request(0, &initialize_raw(), &[]);
    assert!(
        parse(init.last().unwrap()).get("result").is_some(),
        "{init:?}"
    );
    w.notify(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // Tool results: every text as a content item and in structuredContent.
    let got = w.request(ID_RESULTS, &call_raw(ID_RESULTS, "results", json!({})), &[]);
    let r = parse(got.last().unwrap());
    let content: Vec<&str> = r["result"]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    assert_eq!(content, texts, "the client gets every text unchanged");
    assert_eq!(r["result"]["structuredContent"]["outputs"], json!(texts));
    placed.add("tool result", json_list(&got), all());

    // JSON inside a text result.
    let got = w.request(ID_NESTED, &call_raw(ID_NESTED, "nested", json!({})), &[]);
    let r = parse(got.last().unwrap());
    let inner: Vec<String> = r["result"]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|c| {
            parse(c["text"].as_str().expect("text"))["config"]["value"]
                .as_str()
                .expect("value")
                .to_string()
        })
        .collect();
    assert_eq!(inner, texts);
    placed.add("JSON inside a text result", json_list(&got), all());

    // Log notifications, one per text, before the call's answer.
    let got = w.request(ID_LOG, &call_raw(ID_LOG, "log", json!({})), &[]);
    let logs: Vec<Value> = got[..got.len() - 1].iter().map(|m| parse(m)).collect();
    assert!(
        logs.iter().all(|l| l["method"] == "notifications/message"),
        "only logs before the answer"
    );
    let data: Vec<&str> = logs
        .iter()
        .map(|l| l["params"]["data"].as_str().expect("data"))
        .collect();
    assert_eq!(data, texts, "a log notification per text, in order");
    placed.add("log notification", json_list(&got[..got.len() - 1]), all());

    // Resource contents: text, and base64 blob.
    for (id, uri, name) in [
        (ID_RESOURCE_TEXT, "corpus://texts", "resource text"),
        (ID_RESOURCE_BLOB, "corpus://blobs", "resource blob"),
    ] {
        let raw =
            json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}})
                .to_string();
        let got = w.request(id, &raw, &[]);
        let r = parse(got.last().unwrap());
        let contents = r["result"]["contents"].as_array().expect("contents");
        assert_eq!(contents.len(), n, "{uri}");
        placed.add(name, json_list(&got), all());
    }

    // The client's tool arguments.
    let raw = call_raw(ID_ARGUMENTS, "echo", json!({"inputs": texts}));
    let got = w.request(ID_ARGUMENTS, &raw, &[]);
    assert!(parse(got.last().unwrap()).get("result").is_some());
    placed.add("tool arguments", raw, all());

    // JSON-RPC errors: message and data.
    let mut errors = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let id = ID_ERRORS + i as i64;
        let got = w.request(id, &call_raw(id, "fail", json!({"i": i})), &[]);
        let r = parse(got.last().unwrap());
        assert_eq!(r["error"]["message"], json!(t), "error {i}");
        assert_eq!(r["error"]["data"]["detail"], json!(t), "error {i}");
        errors.push(got.last().unwrap().clone());
    }
    placed.add("JSON-RPC error", json_list(&errors), all());

    // `Mcp-Param-*` headers (single-line texts), mirroring the call's arguments.
    if headers {
        let mut heads = String::new();
        let mut carried = BTreeSet::new();
        for (g, group) in header_groups(corpus).iter().enumerate() {
            let id = ID_HEADERS + g as i64;
            let hs: Vec<(String, String)> = group
                .iter()
                .enumerate()
                .map(|(j, &i)| (format!("Mcp-Param-Input{j}"), corpus[i].text.clone()))
                .collect();
            let args: Vec<&str> = group.iter().map(|&i| texts[i]).collect();
            let got = w.request(id, &call_raw(id, "echo", json!({"inputs": args})), &hs);
            assert!(
                parse(got.last().unwrap()).get("result").is_some(),
                "{got:?}"
            );
            for (k, v) in &hs {
                heads.push_str(&format!("{k}: {v}\r\n"));
            }
            carried.extend(group.iter().copied());
        }
        placed.add("Mcp-Param header", heads, carried);
    }
    placed
}

/// Per position, every secret placed must be found in what crossed the wire (the detector
/// sees a secret where one is). Returns the number of placements.
fn assert_placed(det: &Detector, placed: &Placed, what: &str) -> usize {
    let mut total = 0;
    for (name, traffic, want) in &placed.positions {
        let v = views(traffic);
        let missing: Vec<&str> = want
            .iter()
            .filter(|&&i| !det.in_views(&v, i))
            .map(|&i| det.secrets[i].format.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "{what}, {name}: {} placed secrets not seen in the client's traffic (the detector or \
             the placement is broken): {missing:?}",
            missing.len()
        );
        total += want.len();
    }
    total
}

struct Leak {
    secret: usize,
    format: String,
    line: usize,
    position: String,
    path: String,
    /// Pieces of the secret seen there.
    pieces: Vec<String>,
    /// The whole secret is there, not only a piece.
    whole: bool,
    value: String,
}

/// How many (line, secret) leaks are traced to their JSON paths; the rest are counted (tracing
/// is slow, and a broken redactor would leak thousands).
const TRACED: usize = 200;

/// Every secret left anywhere on the tape: each line's bytes, its JSON strings decoded, JSON
/// inside them and base64 that decodes to text.
fn tape_leaks(det: &Detector, tape: &Path) -> Vec<Leak> {
    let raw = std::fs::read_to_string(tape).expect("read tape");
    let mut out = Vec::new();
    let mut traced = 0;
    for (n, line) in raw.lines().enumerate() {
        let found = det.found(line);
        if found.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let mut strings: Option<Vec<(String, String, Vec<String>)>> = None;
        for i in found {
            let format = det.secrets[i].format.clone();
            if traced >= TRACED {
                out.push(Leak {
                    secret: i,
                    format,
                    line: n + 1,
                    position: position_of_line(&v, ""),
                    path: "(not traced)".into(),
                    pieces: Vec::new(),
                    whole: false,
                    value: String::new(),
                });
                continue;
            }
            traced += 1;
            let strings = strings.get_or_insert_with(|| {
                let mut all = Vec::new();
                leaves(&v, "$".into(), &mut all);
                all.into_iter()
                    .map(|(path, s)| {
                        let sv = views(&js(&s));
                        (path, s, sv)
                    })
                    .collect()
            });
            let secret = &det.secrets[i].secret;
            let before = out.len();
            for (path, s, sv) in strings.iter().filter(|(_, _, sv)| det.in_views(sv, i)) {
                out.push(Leak {
                    secret: i,
                    format: format.clone(),
                    line: n + 1,
                    position: position_of_line(&v, path),
                    path: path.clone(),
                    pieces: det.pieces_in(sv, i),
                    whole: sv.iter().any(|x| x.contains(secret.as_str())),
                    value: clip(s, 240),
                });
            }
            if out.len() == before {
                let lv = views(line);
                out.push(Leak {
                    secret: i,
                    format,
                    line: n + 1,
                    position: position_of_line(&v, ""),
                    path: "(the line)".into(),
                    pieces: det.pieces_in(&lv, i),
                    whole: lv.iter().any(|x| x.contains(secret.as_str())),
                    value: clip(line, 240),
                });
            }
        }
    }
    out
}

/// Prints the figures and fails on any leak, listing each (format, position, tape line, path).
fn report(det: &Detector, transport: &str, tape: &Path, placed: usize, leaks: &[Leak]) {
    let secrets: BTreeSet<usize> = leaks.iter().map(|l| l.secret).collect();
    let formats: BTreeSet<&str> = leaks.iter().map(|l| l.format.as_str()).collect();
    let mut by_position: BTreeMap<&str, usize> = BTreeMap::new();
    for l in leaks {
        *by_position.entry(l.position.as_str()).or_default() += 1;
    }
    eprintln!(
        "corpus e2e, {transport}: {} secrets placed {placed} times; leaked: {} secrets ({} \
         formats), {} places on the tape{} [{} of {} pieces not looked for: they occur where no \
         secret is]",
        det.secrets.len(),
        secrets.len(),
        formats.len(),
        leaks.len(),
        if by_position.is_empty() {
            String::new()
        } else {
            format!("; by position: {by_position:?}")
        },
        det.excluded,
        det.excluded + det.per_secret.iter().map(Vec::len).sum::<usize>()
    );
    if leaks.is_empty() {
        return;
    }
    let list: Vec<String> = leaks
        .iter()
        .take(80)
        .map(|l| {
            format!(
                "  {} in {} — tape line {}, {}{}; pieces {:?}: {:?}",
                l.format,
                l.position,
                l.line,
                l.path,
                if l.whole { " (the whole secret)" } else { "" },
                l.pieces,
                l.value
            )
        })
        .collect();
    panic!(
        "{transport}: {} secrets of the corpus left on the tape {}, in {} places ({} formats: \
         {formats:?}):\n{}{}",
        secrets.len(),
        tape.display(),
        leaks.len(),
        formats.len(),
        list.join("\n"),
        if leaks.len() > 80 { "\n  …" } else { "" }
    );
}

/// `mcptape lint TAPE`: its verdict (exit 0 and "clean"), or what it reported.
fn lint(home: &Path, tape: &Path) -> Result<(), String> {
    let mut c = mcptape_in(home);
    c.args(["lint", &s(tape)]);
    let out = run_with_timeout(c, Duration::from_secs(60));
    let stdout = text(&out.stdout);
    if out.status.code() == Some(0) && stdout.contains("clean") {
        Ok(())
    } else {
        Err(format!(
            "exit {:?}:\n{}\n{}",
            out.status.code(),
            clip(&stdout, 20_000),
            text(&out.stderr)
        ))
    }
}

/// The tape's verdict: the figures printed, no secret left on it, and lint calling it clean.
fn assert_clean(det: &Detector, home: &Path, transport: &str, tape: &Path, placed: usize) {
    let lint = lint(home, tape);
    eprintln!(
        "corpus e2e, {transport}: mcptape lint: {}",
        match &lint {
            Ok(()) => "clean".to_string(),
            Err(e) => clip(e, 2000),
        }
    );
    report(det, transport, tape, placed, &tape_leaks(det, tape));
    if let Err(e) = lint {
        panic!(
            "{transport}: mcptape lint finds the tape {} not clean: {e}",
            tape.display()
        );
    }
}

/// A secrets test's setup: a home folder holding the corpus server's config (every secret's
/// text), the server's stdio command line and where the tape goes.
struct SecretsSetup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    config: PathBuf,
    argv: Vec<String>,
    tape: PathBuf,
}

impl SecretsSetup {
    /// A fresh home for `corpus`, the tape to be `home/TAPE`.
    fn new(corpus: &[Secret], tape: &str) -> SecretsSetup {
        let dir = tmp();
        let home = dir.path().to_path_buf();
        let texts: Vec<String> = corpus.iter().map(|x| x.text.clone()).collect();
        let config = write_config(&home, "secrets.json", &texts, &[]);
        SecretsSetup {
            argv: secret_argv(&config, corpus),
            tape: home.join(tape),
            _dir: dir,
            home,
            config,
        }
    }

    /// Every placed secret was seen in the traffic ([`assert_placed`]), and none is left on the
    /// tape, which lint finds clean ([`assert_clean`]).
    fn assert_no_secret_left(&self, det: &Detector, transport: &str, placed: &Placed) {
        let n = assert_placed(det, placed, transport);
        assert_clean(det, &self.home, transport, &self.tape, n);
    }
}

// --- 1. stdio ----------------------------------------------------------------------------------

#[test]
fn corpus_e2e_stdio_record_leaves_no_secret_on_the_tape() {
    let det = detector();
    let setup = SecretsSetup::new(det.secrets, "stdio.jsonl");
    let n = det.secrets.len();
    let mut c = mcptape_in(&setup.home);
    c.args(["record", "--tape", &s(&setup.tape), "--"])
        .args(&setup.argv);
    let mut w = StdioWire(LineClient::spawn_cmd(c));
    let mut placed = secret_session(&mut w, det.secrets, false);
    let (status, stderr) = w.0.finish();
    assert_eq!(status.code(), Some(0), "record: {stderr}");
    placed.add_command_line(&setup.argv, n);

    let lines = tape_lines(&setup.tape);
    assert_eq!(lines[1]["type"], "server");
    assert_eq!(
        lines[1]["command"].as_array().map(Vec::len),
        Some(setup.argv.len()),
        "the command line is on the tape, argument by argument"
    );
    let logs = tape_msgs(&setup.tape)
        .iter()
        .filter(|l| l["method"] == "notifications/message")
        .count();
    assert_eq!(logs, n, "every log notification is on the tape");
    setup.assert_no_secret_left(det, "stdio record", &placed);
}

// --- 2. record --url -----------------------------------------------------------------------------

#[test]
fn corpus_e2e_record_url_leaves_no_secret_on_the_tape() {
    let det = detector();
    let setup = SecretsSetup::new(det.secrets, "http.jsonl");
    let mut cmd = Command::new(python());
    cmd.arg(fixture()).args(["http", "0"]).arg(&setup.config);
    let (server, port) = listening_on_0(
        "corpus_server http",
        setup.home.join("server.log"),
        cmd,
        LISTENING_ON,
    );
    let upstream = format!("http://127.0.0.1:{port}/mcp");

    let rec = Served::record(&upstream, &setup.tape);
    let mut w = HttpWire::new(&rec.url);
    let placed = secret_session(&mut w, det.secrets, true);
    assert!(w.session.is_some(), "the SDK server opened a session");
    rec.stop();
    drop(server);

    let lines = tape_lines(&setup.tape);
    assert_eq!(lines[1]["transport"], "streamable_http", "{}", lines[1]);
    let with_params = tape_msgs(&setup.tape)
        .iter()
        .filter(|l| l["dir"] == "c2s" && l["http"]["mcp_params"].is_object())
        .count();
    assert_eq!(
        with_params,
        header_groups(det.secrets).len(),
        "the Mcp-Param-* headers are on the tape (redacted)"
    );
    setup.assert_no_secret_left(det, "record --url", &placed);
}

// --- 3. the bridge ---------------------------------------------------------------------------

#[test]
fn corpus_e2e_bridge_leaves_no_secret_on_the_tape() {
    let det = detector();
    let setup = SecretsSetup::new(det.secrets, "bridge.jsonl");
    let bridge = Served::bridge(&setup.tape, &setup.argv);
    let mut w = HttpWire::new(&bridge.url);
    let mut placed = secret_session(&mut w, det.secrets, true);
    bridge.stop();
    placed.add_command_line(&setup.argv, det.secrets.len());

    let lines = tape_lines(&setup.tape);
    assert_eq!(
        lines[1]["transport"], "stdio",
        "the tape is of the stdio server"
    );
    assert_eq!(
        lines[1]["command"].as_array().map(Vec::len),
        Some(setup.argv.len())
    );
    setup.assert_no_secret_left(det, "bridge (record --listen)", &placed);
}

// --- 4. ordinary values survive replay ---------------------------------------------------------

/// Runs `requests` (raw lines, ids 0, 1, 2, … in order; `None` a notification) on a spawned
/// process and returns the raw lines it answered with, per request.
fn drive_raw(
    cmd: Command,
    requests: &[(Option<i64>, String)],
) -> (Vec<Vec<String>>, String, Option<i32>) {
    let mut c = LineClient::spawn_cmd(cmd);
    let mut answers = Vec::new();
    for (id, raw) in requests {
        c.send_raw(format!("{raw}\n").as_bytes());
        let Some(id) = id else { continue };
        let mut got = Vec::new();
        loop {
            let line = c
                .recv_raw(Duration::from_secs(30))
                .unwrap_or_else(|| panic!("no answer to request {id} within 30 s"));
            let line = text(&line);
            let v = parse(&line);
            let done = v["id"] == json!(id);
            got.push(line);
            if done {
                break;
            }
        }
        answers.push(got);
    }
    let (status, stderr) = c.finish();
    (answers, stderr, status.code())
}

#[test]
fn corpus_e2e_ordinary_values_come_back_from_play_byte_for_byte() {
    let values = ordinary();
    let dir = tmp();
    let home = dir.path();

    // Value i: the result of tool `value_i`, and the arguments of its call, both raw text.
    let inner: Vec<String> = values
        .iter()
        .map(|o| format!("{{{}:{}}}", js(&o.key), o.raw))
        .collect();
    let results: Vec<String> = inner
        .iter()
        .map(|obj| {
            format!(
                r#"{{"content":[{{"type":"text","text":{}}}],"structuredContent":{obj}}}"#,
                js(obj)
            )
        })
        .collect();
    let answers: Vec<(String, String)> = results
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("value_{i}"), r.clone()))
        .collect();
    let config = write_config(home, "ordinary.json", &[], &answers);
    let mut requests: Vec<(Option<i64>, String)> = vec![
        (Some(0), initialize_raw()),
        (
            None,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        ),
    ];
    for (i, obj) in inner.iter().enumerate() {
        let id = i as i64 + 1;
        requests.push((
            Some(id),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"value_{i}","arguments":{obj}}}}}"#
            ),
        ));
    }

    let tape = home.join("ordinary.jsonl");
    let mut c = mcptape_in(home);
    c.args([
        "record",
        "--tape",
        &s(&tape),
        "--",
        &python(),
        &s(fixture()),
        "stdio",
        &s(&config),
    ]);
    let (recorded, stderr, code) = drive_raw(c, &requests);
    assert_eq!(code, Some(0), "record: {stderr}");

    let mut c = mcptape_in(home);
    c.args(["play", &s(&tape)]);
    let (played, play_err, code) = drive_raw(c, &requests);
    assert_eq!(code, Some(0), "play: {play_err}");
    assert!(
        play_err.contains("missed 0, drifted 0"),
        "play summary: {play_err}"
    );
    assert_eq!(
        recorded[0], played[0],
        "the initialize answer replays byte for byte"
    );

    // The tape's lines of each call, to check no marker went onto them.
    let mut on_tape: BTreeMap<(String, i64), String> = BTreeMap::new();
    for line in std::fs::read_to_string(&tape).unwrap().lines() {
        let v = parse(line);
        if let (Some(dir), Some(id)) = (v["dir"].as_str(), v["id"].as_i64()) {
            on_tape.insert((dir.to_string(), id), line.to_string());
        }
    }

    let mut identical = 0;
    let mut changed = Vec::new();
    let mut marked = Vec::new();
    for (i, o) in values.iter().enumerate() {
        let id = i as i64 + 1;
        let expected = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{}}}\n",
            results[i]
        );
        let real = &recorded[i + 1];
        assert_eq!(
            real,
            &vec![expected.clone()],
            "the server answers value {i} as given"
        );
        let replay = &played[i + 1];
        let same = replay == real;
        let answer = replay.last().map(String::as_str).unwrap_or("");
        let structured = answer.contains(&format!("\"structuredContent\":{}", inner[i]));
        let in_text = serde_json::from_str::<Value>(answer)
            .ok()
            .and_then(|v| {
                v["result"]["content"][0]["text"]
                    .as_str()
                    .map(str::to_string)
            })
            .is_some_and(|t| t == inner[i]);
        if same && structured && in_text {
            identical += 1;
        } else {
            changed.push(format!(
                "  {} ({}={}): recorded {:?}, played {:?}",
                o.category,
                o.key,
                clip(&o.raw, 120),
                clip(real.last().unwrap(), 300),
                clip(answer, 300)
            ));
        }
        for dir in ["c2s", "s2c"] {
            let line = on_tape
                .get(&(dir.to_string(), id))
                .unwrap_or_else(|| panic!("no {dir} line with id {id} on the tape"));
            if line.contains("[REDACTED:") || line.contains("\"redacted\":") {
                marked.push(format!(
                    "  {} ({}={}) in the {} line: {}",
                    o.category,
                    o.key,
                    clip(&o.raw, 120),
                    if dir == "c2s" { "request" } else { "response" },
                    clip(line, 400)
                ));
            }
        }
    }
    eprintln!(
        "corpus e2e, ordinary values over stdio record → play: {} placed (request and result each), \
         {identical} came back byte-identical, {} changed; {} tape lines with a redaction marker",
        values.len(),
        changed.len(),
        marked.len()
    );
    assert!(
        values.len() >= 200,
        "the corpus holds at least 200 ordinary values"
    );
    assert!(
        changed.is_empty(),
        "{} of {} ordinary values did not come back from play byte for byte:\n{}",
        changed.len(),
        values.len(),
        changed.join("\n")
    );
    assert!(
        marked.is_empty(),
        "{} tape lines of ordinary values hold a redaction marker:\n{}",
        marked.len(),
        marked.join("\n")
    );
}
