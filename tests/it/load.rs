//! A slow upstream behind `mcptape record --url`, and load: 1,000 concurrent HTTP sessions
//! through the proxy, 100 parallel stdio `mcptape play` processes. Loopback only, bounded in
//! count and time. No timing assertions: ordering, correctness and a generous memory bound
//! (peak RSS from `/proc/PID/status`). The figures are printed (`-- --nocapture` shows them).

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A stdlib HTTP upstream that takes its time. POST by JSON-RPC method: `slow/json` sleeps
/// SLOW seconds, waits for `GET /release/json`, then answers JSON; `slow/sse` sleeps SLOW
/// seconds before its headers, sends a progress event, pauses, sends another, waits for
/// `GET /release/sse`, then sends the response event; anything else is answered at once.
/// Each slow request logs when it arrives and when it answers. Threaded: one thread per request.
const SLOW_UPSTREAM: &str = r#"
SLOW = 2.0

def say(what):
    print(what, file=sys.stderr, flush=True)

class H(Quiet):
    def do_GET(self):
        if not self.released():
            self.not_allowed()

    def do_POST(self):
        msg, method, rid = self.read_msg()
        if method == "slow/json":
            say("slow/json: received")
            time.sleep(SLOW)
            switch("json").wait(15)
            say("slow/json: answering")
            self.send_json({"jsonrpc": "2.0", "id": rid, "result": {"slow": "json"}})
            return
        if method == "slow/sse":
            say("slow/sse: received")
            time.sleep(SLOW)
            self.start_sse()
            progress = ('id: p-%d\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
                        '"params":{"progressToken":"t","progress":%d}}\n\n')
            self.w(progress % (1, 1))
            time.sleep(1.0)
            self.w(progress % (2, 2))
            switch("sse").wait(15)
            say("slow/sse: answering")
            self.w('id: p-3\ndata: {"jsonrpc":"2.0","id":%s,"result":{"slow":"sse"}}\n\n'
                   % json.dumps(rid))
            return
        if rid is None:
            self.accepted()
            return
        self.send_json({"jsonrpc": "2.0", "id": rid, "result": {"fast": method}})

switch("json"); switch("sse")
"#;

/// The slow upstream with `record --url` in front of it, taping to `dir/TAPE`.
fn slow_recording(dir: &Path, tape: &str) -> RecordedUpstream {
    record_upstream(dir, "slow", SLOW_UPSTREAM, tape)
}

fn json_body(status: u16, body: &[u8]) -> Value {
    assert_eq!(status, 200, "{}", text(body));
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(body)))
}

// --- 1: a slow upstream ----------------------------------------------------------------------

/// The proxy waits for a slow JSON answer (no timeout of its own), forwards and tapes it; a
/// second client's request is served meanwhile: its answer comes back while the slow one is
/// still held by the upstream (which answers only after the test releases it).
#[test]
fn a_slow_json_answer_is_awaited_forwarded_and_taped_and_a_fast_request_passes_meanwhile() {
    let dir = tmp();
    let mut slow = slow_recording(dir.path(), "slow-json.jsonl");

    let (done_tx, done_rx) = mpsc::channel();
    let url = slow.rec.url.clone();
    let slow_client = std::thread::spawn(move || {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": "slow/json"});
        let (status, body) = post(&url, &req);
        let _ = done_tx.send(());
        (status, body)
    });
    slow.up.wait_log("slow/json: received");

    // Another client, while the slow request is in the upstream's hands.
    let fast = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, body) = post(&slow.rec.url, &fast);
    let v = json_body(status, &body);
    assert_eq!(v["id"], 2, "{v}");
    assert_eq!(v["result"]["fast"], "tools/list", "{v}");
    assert!(
        done_rx.try_recv().is_err(),
        "the slow answer came back before the fast one: the fast request was held behind it"
    );
    assert!(!slow.up.log_text().contains("slow/json: answering"));

    release(&slow.base, "json");
    let (status, body) = slow_client.join().expect("the slow client");
    let v = json_body(status, &body);
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"slow": "json"}})
    );
    slow.rec.stop();

    let lines = tape_lines(&slow.tape);
    let slow_req = position_of(&lines, "c2s", 1);
    let fast_req = position_of(&lines, "c2s", 2);
    let fast_resp = position_of(&lines, "s2c", 2);
    let slow_resp = position_of(&lines, "s2c", 1);
    assert!(
        slow_req < fast_req && fast_req < fast_resp && fast_resp < slow_resp,
        "tape order: {lines:#?}"
    );
    assert_eq!(lines[slow_resp]["msg"]["result"]["slow"], "json");
    assert_eq!(lines[slow_resp]["http"]["status"], 200);
    assert!(
        !lines
            .iter()
            .any(|l| l["type"] == "event" && l["what"] == "upstream-error"),
        "no upstream error: {lines:#?}"
    );
    assert_eq!(lines.last().expect("lines")["type"], "end");
}

/// A slow SSE answer (headers after a pause, events with pauses between them) is forwarded
/// event by event; a fast request in the middle of the stream is answered before the stream's
/// response, which the upstream sends only once released; everything is taped in that order.
#[test]
fn a_slow_sse_answer_is_forwarded_event_by_event_and_a_fast_request_passes_mid_stream() {
    let dir = tmp();
    let mut slow = slow_recording(dir.path(), "slow-sse.jsonl");

    let req = json!({"jsonrpc": "2.0", "id": 5, "method": "slow/sse"});
    // Returns once the (late) headers are through.
    let mut stream = post_open_ok(&slow.rec.url, &req);
    assert!(
        stream.content_type().starts_with("text/event-stream"),
        "{:?}",
        stream.headers
    );
    let mut got = stream.read_until("\n\n");
    assert!(text(&got).starts_with("id: p-1\n"), "{}", text(&got));

    let fast = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    let (status, body) = post(&slow.rec.url, &fast);
    let v = json_body(status, &body);
    assert_eq!(v["result"]["fast"], "ping", "{v}");

    // The second progress event arrives on its own, still before the response is released.
    while !text(&got).contains("id: p-2\n") {
        got.extend(stream.next_piece().expect("the second event"));
    }
    assert!(!text(&got).contains("\"result\""), "{}", text(&got));
    assert!(!slow.up.log_text().contains("slow/sse: answering"));
    release(&slow.base, "sse");
    got.extend(stream.body());
    let all = text(&got);
    assert!(
        all.ends_with(
            "id: p-3\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"slow\":\"sse\"}}\n\n"
        ),
        "{all}"
    );
    slow.up.wait_log("slow/sse: answering");
    slow.rec.stop();

    let lines = tape_lines(&slow.tape);
    let p1 = position(&lines, "progress 1", |l| l["http"]["event_id"] == "p-1");
    let p2 = position(&lines, "progress 2", |l| l["http"]["event_id"] == "p-2");
    let fast_req = position_of(&lines, "c2s", 6);
    let fast_resp = position_of(&lines, "s2c", 6);
    let resp = position_of(&lines, "s2c", 5);
    assert!(
        p1 < fast_req && fast_req < fast_resp && fast_resp < resp && p2 < resp,
        "tape order: {lines:#?}"
    );
    assert_eq!(lines[resp]["http"]["stream"], "post", "{}", lines[resp]);
    assert_eq!(lines[resp]["msg"]["result"]["slow"], "sse");
    assert_eq!(lines.last().expect("lines")["type"], "end");
}

// --- 2: load ---------------------------------------------------------------------------------

const MIB: u64 = 1024 * 1024;
/// Generous: a few MiB are expected for either process.
const RSS_BOUND: u64 = 200 * MIB;

/// (VmRSS, VmHWM) of a live process, in bytes.
fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(b: u64) -> f64 {
    b as f64 / MIB as f64
}

/// Enough file descriptors for this process and the children it starts (they inherit it).
fn raise_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur < want as libc::rlim_t {
        lim.rlim_cur = (want as libc::rlim_t).min(lim.rlim_max);
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
}

fn add_params() -> Value {
    json!({"name": "add", "arguments": {"a": 2, "b": 3}})
}

/// A small real session, recorded over stdio from the bundled demo server: initialize (id 0),
/// initialized, tools/list (id 1), tools/call add 2 3 (id 2).
fn demo_tape(dir: &Path) -> PathBuf {
    let tape = dir.join("demo.jsonl");
    let mut c = Mt::new(["record", "--tape"])
        .arg(&tape)
        .arg("--")
        .args(demo_server("healthy"))
        .spawn();
    let init = c.initialize();
    assert_eq!(
        init["result"]["serverInfo"]["name"], "mcptape-demo",
        "{init}"
    );
    let list = c.call(1, "tools/list", json!({}));
    assert!(list["result"]["tools"].is_array(), "{list}");
    let add = c.call(2, "tools/call", add_params());
    assert_eq!(add["result"]["content"][0]["text"], "5", "{add}");
    let (st, err) = c.finish();
    assert!(st.success(), "record: {st}; {err}");
    tape
}

/// Samples a process's RSS every 20 ms until stopped; returns the largest VmRSS seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<u64>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Some((now, _)) = rss(pid) {
                    peak = peak.max(now);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("sampler")
    }
}

mod client {
    //! A tiny async MCP-over-HTTP client (hyper), for many concurrent sessions.
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{Method, Request, Uri};
    use hyper_util::client::legacy::{connect::HttpConnector, Client};
    use serde_json::Value;
    use std::time::Duration;

    pub type Http = Client<HttpConnector, Full<Bytes>>;

    pub fn new() -> Http {
        Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
    }

    /// One request: (status, the session id header, the body). Errors are strings naming what.
    pub async fn send(
        http: &Http,
        url: &Uri,
        method: Method,
        session: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(u16, Option<String>, Bytes), String> {
        let mut b = Request::builder()
            .method(method.clone())
            .uri(url.clone())
            .header("accept", "application/json, text/event-stream");
        if body.is_some() {
            b = b.header("content-type", "application/json");
        }
        if let Some(s) = session {
            b = b.header("mcp-session-id", s);
        }
        let payload = body.map(|v| v.to_string()).unwrap_or_default();
        let req = b
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| e.to_string())?;
        let what = format!(
            "{method} {}",
            body.map(|v| v["method"].clone()).unwrap_or_default()
        );
        let work = async {
            let resp = http
                .request(req)
                .await
                .map_err(|e| format!("{what}: {e:?}"))?;
            let status = resp.status().as_u16();
            let sid = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{what}: body: {e}"))?
                .to_bytes();
            Ok((status, sid, body))
        };
        tokio::time::timeout(Duration::from_secs(40), work)
            .await
            .map_err(|_| format!("{what}: no answer within 40 s"))?
    }

    /// A JSON-RPC answer with `id`, as JSON, from a 200 `application/json` body.
    pub fn answer(what: &str, status: u16, body: &[u8], id: i64) -> Result<Value, String> {
        let shown = || String::from_utf8_lossy(body).into_owned();
        if status != 200 {
            return Err(format!("{what}: status {status}: {}", shown()));
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| format!("{what}: not JSON ({e}): {}", shown()))?;
        if v["id"] != id || v.get("result").is_none() {
            return Err(format!("{what}: not the answer to id {id}: {v}"));
        }
        Ok(v)
    }
}

/// One minimal MCP session over HTTP: initialize, wait until every session is open, then one
/// call (tools/call add) and DELETE; every answer checked. (initialized and tools/list as well
/// would make the debug-build proxy take over 35 s for the 1,000 sessions on two cores.)
async fn one_session(
    http: client::Http,
    url: hyper::Uri,
    all_open: Arc<tokio::sync::Barrier>,
) -> Result<(), String> {
    use hyper::Method;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init_params()});
    let opened = client::send(&http, &url, Method::POST, None, Some(&init)).await;
    all_open.wait().await; // also on failure: the others must not wait for this one forever
    let (status, sid, body) = opened?;
    let v = client::answer("initialize", status, &body, 0)?;
    if v["result"]["serverInfo"]["name"] != "mcptape-demo" {
        return Err(format!("initialize: {v}"));
    }
    let sid = sid.ok_or("initialize: no mcp-session-id")?;
    let sid = Some(sid.as_str());

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": add_params()});
    let (status, _, body) = client::send(&http, &url, Method::POST, sid, Some(&call)).await?;
    let v = client::answer("tools/call", status, &body, 2)?;
    if v["result"]["content"][0]["text"] != "5" {
        return Err(format!("tools/call: {v}"));
    }
    let (status, _, body) = client::send(&http, &url, Method::DELETE, sid, None).await?;
    if !(200..300).contains(&status) {
        return Err(format!("DELETE: status {status}: {}", text(&body)));
    }
    Ok(())
}

/// What a load run measured.
struct LoadRun {
    wall: Duration,
    errors: Vec<String>,
    /// The largest VmRSS sampled while the sessions ran.
    peak_sampled: u64,
    /// VmRSS and VmHWM once they are done (or abandoned).
    after: u64,
    hwm: u64,
    /// Set when the run was abandoned because `pid` went over the memory bound.
    over_bound: bool,
}

/// Runs `sessions` concurrent sessions against `url` (all opened before any goes on), sampling
/// the RSS of `pid` throughout; abandons the run as soon as its VmHWM passes RSS_BOUND (the test
/// then fails on memory, without waiting for the rest).
fn run_sessions(url: &str, sessions: usize, pid: u32) -> LoadRun {
    let sampler = Sampler::start(pid);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let url: hyper::Uri = url.parse().expect("URL");
    let started = Instant::now();
    let (errors, over_bound) = rt.block_on(async {
        let http = client::new();
        let all_open = Arc::new(tokio::sync::Barrier::new(sessions));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..sessions {
            set.spawn(one_session(http.clone(), url.clone(), all_open.clone()));
        }
        let mut errors = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tokio::select! {
                joined = set.join_next() => match joined {
                    Some(r) => {
                        if let Err(e) = r.unwrap_or_else(|e| Err(format!("task: {e}"))) {
                            errors.push(e);
                        }
                    }
                    None => break (errors, false),
                },
                _ = tick.tick() => {
                    if rss(pid).is_some_and(|(_, hwm)| hwm >= RSS_BOUND) {
                        set.abort_all();
                        break (errors, true);
                    }
                }
            }
        }
    });
    let wall = started.elapsed();
    drop(rt);
    let peak_sampled = sampler.finish();
    let (after, hwm) = rss(pid).expect("the process is still there after the load");
    LoadRun {
        wall,
        errors,
        peak_sampled,
        after,
        hwm,
        over_bound,
    }
}

impl LoadRun {
    fn report(&self, what: &str, sessions: usize, start_rss: u64) {
        eprintln!(
            "load: {sessions} concurrent HTTP sessions {what} (initialize; all open; tools/call, \
             DELETE: {} requests) in {:.2?}{}; {} errors; RSS {:.1} MiB at start, {:.1} MiB \
             sampled peak, VmHWM {:.1} MiB, {:.1} MiB after",
            sessions * 3,
            self.wall,
            if self.over_bound {
                " (ABANDONED: over the memory bound)"
            } else {
                ""
            },
            self.errors.len(),
            mib(start_rss),
            mib(self.peak_sampled),
            mib(self.hwm),
            mib(self.after),
        );
    }

    fn assert_ok(&self, what: &str, sessions: usize) {
        assert!(
            !self.over_bound && self.hwm < RSS_BOUND,
            "{what}: VmHWM reached {:.1} MiB (bound {} MiB) with {sessions} sessions",
            mib(self.hwm),
            RSS_BOUND / MIB
        );
        assert!(
            self.errors.is_empty(),
            "{what}: {} of {sessions} sessions failed; first ones:\n{}",
            self.errors.len(),
            self.errors[..self.errors.len().min(5)].join("\n")
        );
    }
}

/// A fast upstream in this process (hyper, its own runtime and thread): answers initialize,
/// tools/list and tools/call with the demo tape's answers (ids rewritten), gives each
/// initialize a session id and requires it afterwards, 202 to notifications, 200 to DELETE.
/// Stops when dropped.
struct FastUpstream {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FastUpstream {
    fn start(tape: &Path) -> FastUpstream {
        use bytes::Bytes;
        use http_body_util::{BodyExt, Full};
        use hyper::{Request, Response};
        use std::collections::HashMap;
        use std::sync::atomic::AtomicU64;

        // method -> recorded result
        let lines = tape_lines(tape);
        let mut results: HashMap<String, Value> = HashMap::new();
        for req in lines
            .iter()
            .filter(|l| l["dir"] == "c2s" && l["kind"] == "request")
        {
            let answer = lines
                .iter()
                .find(|l| l["dir"] == "s2c" && l["id"] == req["id"])
                .expect("every demo request is answered");
            let method = req["method"].as_str().expect("method").to_string();
            results.insert(method, answer["msg"]["result"].clone());
        }
        let results = Arc::new(results);
        let next_session = Arc::new(AtomicU64::new(1));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let stream = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => stream,
                            Err(_) => continue,
                        },
                        _ = &mut stopped => break,
                    };
                    let results = results.clone();
                    let next_session = next_session.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(
                            move |req: Request<hyper::body::Incoming>| {
                                let results = results.clone();
                                let next_session = next_session.clone();
                                async move {
                                    let reply = |status: u16, sid: Option<String>, body: String| {
                                        let mut r = Response::builder().status(status);
                                        if !body.is_empty() {
                                            r = r.header("content-type", "application/json");
                                        }
                                        if let Some(sid) = sid {
                                            r = r.header("mcp-session-id", sid);
                                        }
                                        r.body(Full::new(Bytes::from(body))).expect("response")
                                    };
                                    let has_session = req.headers().contains_key("mcp-session-id");
                                    if req.method() == hyper::Method::DELETE {
                                        let status = if has_session { 200 } else { 400 };
                                        return Ok::<_, std::convert::Infallible>(reply(
                                            status,
                                            None,
                                            String::new(),
                                        ));
                                    }
                                    let body = req.into_body().collect().await;
                                    let body = body.map(|b| b.to_bytes()).unwrap_or_default();
                                    let msg: Value =
                                        serde_json::from_slice(&body).unwrap_or(Value::Null);
                                    let method = msg["method"].as_str().unwrap_or("").to_string();
                                    let Some(id) = msg.get("id") else {
                                        return Ok(reply(202, None, String::new()));
                                    };
                                    let init = method == "initialize";
                                    if !init && !has_session {
                                        return Ok(reply(400, None, "no session".into()));
                                    }
                                    let answer = match results.get(&method) {
                                        Some(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                                        None => json!({"jsonrpc": "2.0", "id": id,
                                        "error": {"code": -32601, "message": "unknown"}}),
                                    };
                                    let sid = init.then(|| {
                                        format!(
                                            "s-{}",
                                            next_session.fetch_add(1, Ordering::Relaxed)
                                        )
                                    });
                                    Ok(reply(200, sid, answer.to_string()))
                                }
                            },
                        );
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        FastUpstream {
            url,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for FastUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How many concurrent HTTP sessions a load test runs.
const SESSIONS: usize = 1000;

/// [`SESSIONS`] concurrent sessions against `served`, its RSS sampled throughout; the figures
/// are printed (`what`: where the sessions went) and every session must pass in bounded memory.
fn load(served: &Served, what: &str, label: &str) {
    let pid = served.pid();
    let start_rss = rss(pid).expect("the process's status").0;
    let run = run_sessions(&served.url, SESSIONS, pid);
    run.report(what, SESSIONS, start_rss);
    run.assert_ok(label, SESSIONS);
}

/// 1,000 concurrent sessions through `record --url` to a fast upstream: every answer right, no
/// error, every message on the tape, the proxy's memory bounded.
#[test]
fn a_thousand_concurrent_http_sessions_through_the_proxy_are_all_answered_and_taped() {
    raise_nofile(8192);
    let dir = tmp();
    let upstream = FastUpstream::start(&demo_tape(dir.path()));
    let tape = dir.path().join("load.jsonl");
    let rec = Served::record(&upstream.url, &tape);
    load(&rec, "through record --url", "record --url");

    let err = rec.stop();
    drop(upstream);
    // Every message that crossed the proxy is on the tape, and the tape is closed.
    let lines = tape_lines(&tape);
    let count = |pred: &dyn Fn(&Value) -> bool| lines.iter().filter(|l| pred(l)).count();
    let c2s = |m: &str| count(&|l| l["dir"] == "c2s" && l["method"] == m);
    assert_eq!(c2s("initialize"), SESSIONS, "{err}");
    assert_eq!(c2s("tools/call"), SESSIONS);
    let answers =
        count(&|l| l["dir"] == "s2c" && l["kind"] == "response" && l["http"]["status"] == 200);
    assert_eq!(answers, 2 * SESSIONS);
    assert_eq!(
        count(&|l| l["type"] == "event" && l["what"] == "http-delete"),
        SESSIONS
    );
    let sessions: std::collections::HashSet<&str> = lines
        .iter()
        .filter(|l| l["dir"] == "s2c" && l["id"] == 0)
        .filter_map(|l| l["http"]["session"].as_str())
        .collect();
    assert_eq!(sessions.len(), SESSIONS, "one session id per session");
    assert!(
        !lines
            .iter()
            .any(|l| l["type"] == "event" && l["what"] == "upstream-error"),
        "an upstream error is on the tape"
    );
    let end = lines.last().expect("lines");
    assert_eq!(end["type"], "end", "{end}");
    assert!(end.get("incomplete").is_none(), "{end}");
    eprintln!(
        "load: the tape holds {} lines ({:.1} MiB)",
        lines.len(),
        mib(std::fs::metadata(&tape).expect("tape").len())
    );
}

/// 1,000 concurrent sessions straight to `play --listen` of the recorded demo session: every
/// answer right, play's memory bounded, and play's report counts every session's calls.
#[test]
fn a_thousand_concurrent_http_sessions_against_play_listen_are_served_in_bounded_memory() {
    raise_nofile(8192);
    let dir = tmp();
    let play = Served::play(&demo_tape(dir.path()));
    load(&play, "against play --listen", "play --listen");
    let err = play.stop();
    assert!(
        err.contains(&format!("served {}, missed 0, drifted 0", 2 * SESSIONS)),
        "play summary: {err}"
    );
}

/// 100 parallel stdio `mcptape play` processes of a recorded session, all alive at once, each
/// driven to completion: every answer right, each exits 0 having served everything.
#[test]
fn a_hundred_parallel_stdio_plays_each_serve_the_whole_session_and_exit_0() {
    const PLAYS: usize = 100;
    raise_nofile(4096);
    let dir = tmp();
    let tape = demo_tape(dir.path());
    let started = Instant::now();
    // All spawned first: the hundred processes run side by side while they are driven.
    let clients: Vec<LineClient> = (0..PLAYS)
        .map(|_| LineClient::spawn(&play_cmd(&tape)))
        .collect();
    let drivers: Vec<JoinHandle<(u64, std::process::ExitStatus, String)>> = clients
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let init = c.initialize();
                assert_eq!(
                    init["result"]["serverInfo"]["name"], "mcptape-demo",
                    "{init}"
                );
                let list = c.call(1, "tools/list", json!({}));
                assert_eq!(list["result"]["tools"][0]["name"], "add", "{list}");
                let add = c.call(2, "tools/call", add_params());
                assert_eq!(add["result"]["content"][0]["text"], "5", "{add}");
                let hwm = rss(c.child.id()).map(|r| r.1).unwrap_or(0);
                let (st, err) = c.finish();
                (hwm, st, err)
            })
        })
        .collect();
    let mut peak = 0;
    let mut failures = Vec::new();
    for (i, d) in drivers.into_iter().enumerate() {
        match d.join() {
            Ok((hwm, st, err)) => {
                peak = peak.max(hwm);
                if !st.success() || !err.contains("missed 0, drifted 0") {
                    failures.push(format!("play {i}: {st}; stderr:\n{err}"));
                }
            }
            Err(_) => failures.push(format!("play {i}: its driver panicked (see above)")),
        }
    }
    let wall = started.elapsed();
    eprintln!(
        "load: {PLAYS} parallel stdio plays (initialize, initialized, tools/list, tools/call) \
         in {wall:.2?}; {} failures; peak RSS of one play process (VmHWM) {:.1} MiB",
        failures.len(),
        mib(peak)
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(peak > 0, "no RSS figure was read");
    assert!(
        peak < RSS_BOUND,
        "a play process peaked at {:.1} MiB (bound {} MiB)",
        mib(peak),
        RSS_BOUND / MIB
    );
}
