//! Tapes in object storage, against a real S3-compatible server on 127.0.0.1: moto in server
//! mode (PyPI `moto[server]`, pinned in tests/peers/requirements-moto.txt, its own venv that
//! ./scripts/test installs), started by each test on a port of the kernel's choosing (werkzeug
//! says which). A real MCP server (the Python
//! SDK fixture) is recorded straight to `s3://`, listed, played from `s3://` to the official
//! Python SDK client, checked from `s3://`; a second machine (an empty cache) reads the same
//! tape while the first one's cache is not downloaded again (moto's request log counts the
//! GETs); a recording killed mid-session and one whose endpoint is gone at close are uploaded
//! by `mcptape push`, the killed one without its writer's padding, as a killed local tape is
//! (never while a recording writes it); a large tape goes up as a multipart upload; a miss answered live is
//! appended to the tape in the bucket. Every file the tests' runs wrote, every stderr and moto's
//! log are searched for the secret key: it is never there.

use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The secret key every run is given: it must never be written anywhere.
const SECRET: &str = "mcptape-test-secret-4Qz8Xv2Lw9";
const KEY_ID: &str = "AKIAMCPTAPETEST00001";
const BUCKET: &str = "team-tapes";

/// A moto server on 127.0.0.1, killed when dropped.
struct Moto {
    _proc: Proc,
    port: u16,
    log: PathBuf,
    /// Served over TLS: the CA its certificate is signed by.
    ca: Option<PathBuf>,
}

fn moto_bin(name: &str) -> PathBuf {
    let p = repo().join("tests/peers/.venv-moto/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run ./scripts/test (it installs moto from tests/peers/requirements-moto.txt)",
        p.display()
    );
    p
}

impl Moto {
    /// moto on a port of the kernel's choosing, its log in `dir`.
    fn start(dir: &Path, name: &str) -> Moto {
        Moto::start_with(dir, name, &[])
    }

    /// [`Moto::start`] with `env` (e.g. INITIAL_NO_AUTH_ACTION_COUNT, which turns its checks of
    /// credentials on).
    fn start_with(dir: &Path, name: &str, env: &[(&str, &str)]) -> Moto {
        Moto::spawn(dir, name, 0, env, &[], None)
    }

    /// moto on the port `hold` keeps (for a moto that comes back where one was), bound while it
    /// is held (werkzeug sets SO_REUSEADDR too); the hold ends once moto listens.
    fn start_on(dir: &Path, name: &str, hold: PortHold) -> Moto {
        let moto = Moto::spawn(dir, name, hold.port, &[], &[], None);
        drop(hold);
        moto
    }

    /// moto over TLS, with a certificate for 127.0.0.1 signed by a private CA made in `dir`
    /// (`dir/ca.pem`; the same maker as the model proxy's TLS tests).
    fn start_tls(dir: &Path, name: &str) -> Moto {
        let mut c = Command::new(moto_bin("python"));
        c.arg("-c").arg(format!(
            "import sys; sys.path.insert(0, {:?}); from stream_upstream import make_certs; make_certs({:?})",
            s(repo().join("tests/agents")),
            s(dir)
        ));
        let out = run_with_timeout(c, Duration::from_secs(60));
        assert!(out.status.success(), "make_certs: {}", text(&out.stderr));
        let (cert, key) = (s(dir.join("server.pem")), s(dir.join("server.key")));
        let tls = ["-c", cert.as_str(), "-k", key.as_str()];
        Moto::spawn(dir, name, 0, &[], &tls, Some(dir.join("ca.pem")))
    }

    /// moto_server on `port`, 0 for one of the kernel's choosing: werkzeug says the port it
    /// listens on (` * Running on http://127.0.0.1:PORT`), which is read from its log.
    fn spawn(
        dir: &Path,
        name: &str,
        port: u16,
        env: &[(&str, &str)],
        args: &[&str],
        ca: Option<PathBuf>,
    ) -> Moto {
        let log = dir.join(format!("{name}.log"));
        let mut c = Command::new(moto_bin("moto_server"));
        c.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let scheme = if ca.is_some() { "https" } else { "http" };
        let said = format!("Running on {scheme}://127.0.0.1:");
        let (proc, bound) = listening_on_0(name, log.clone(), c, &said);
        assert!(
            port == 0 || bound == port,
            "{name} listens on {bound}, not {port}"
        );
        let port = bound;
        Moto {
            _proc: proc,
            port,
            log,
            ca,
        }
    }

    fn endpoint(&self) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Runs a boto3 script against this moto (`ENDPOINT` is set for it), with the test keys.
    fn boto(&self, script: &str) -> String {
        let mut c = Command::new(moto_bin("python"));
        c.arg("-c")
            .arg(format!(
                "import boto3, json, sys\nENDPOINT = {:?}\ns3 = boto3.client('s3', endpoint_url=ENDPOINT, region_name='us-east-1', aws_access_key_id={KEY_ID:?}, aws_secret_access_key={SECRET:?}, verify={})\n{script}",
                self.endpoint(),
                self.ca.as_ref().map_or("True".to_string(), |ca| format!("{:?}", s(ca)))
            ));
        let out = run_with_timeout(c, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "boto3 script failed: {}\n{}",
            text(&out.stderr),
            script
        );
        text(&out.stdout)
    }

    fn bucket(&self, name: &str) {
        self.boto(&format!("s3.create_bucket(Bucket={name:?})"));
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many requests `METHOD /BUCKET/KEY…` moto logged.
    fn count(&self, method: &str, key: &str) -> usize {
        let needle = format!("\"{method} /{BUCKET}/{key}");
        self.log_text().matches(&needle).count()
    }
}

/// What a machine of the team has: its own cache folder and home, the endpoint, the keys.
struct Machine {
    cache: PathBuf,
    home: PathBuf,
    endpoint: String,
}

impl Machine {
    fn new(dir: &Path, name: &str, moto: &Moto) -> Machine {
        let (cache, home) = (dir.join(name).join("cache"), dir.join(name).join("home"));
        std::fs::create_dir_all(&home).unwrap();
        Machine {
            cache,
            home,
            endpoint: moto.endpoint(),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("MCPTAPE_CACHE_DIR", s(&self.cache)),
            ("HOME", s(&self.home)),
        ]
    }

    fn mt<I, A>(&self, args: I) -> Mt
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        let mut mt = Mt::new(args)
            .dir(&self.home)
            .env_remove("AWS_PROFILE")
            .timeout(Duration::from_secs(120));
        for (k, v) in self.env() {
            mt = mt.env(k, v);
        }
        mt
    }

    fn spool_dir(&self) -> PathBuf {
        self.cache.join("spool")
    }
}

/// The Python SDK server recorded to `url` through the Python SDK client (legacy era), with
/// `env`: the client's transcript and the run's output.
fn record_py_server(url: &str, env: &[(&'static str, String)]) -> (Value, std::process::Output) {
    let mut record = vec![
        s(bin()),
        "record".into(),
        "--tape".into(),
        url.to_string(),
        "--".into(),
    ];
    record.extend(py_server());
    py_client("pyserver", "legacy", &record, &envs(env))
}

fn envs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                let bytes = std::fs::read(&p).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Checks that the secret key is in none of the files under `dir` and none of the outputs.
fn assert_secret_nowhere(dir: &Path, outputs: &[&str]) {
    let found = files_holding(dir, SECRET);
    assert!(found.is_empty(), "the secret key was written to {found:?}");
    for (i, o) in outputs.iter().enumerate() {
        assert!(!o.contains(SECRET), "output {i} holds the secret key:\n{o}");
    }
}

/// The spool files (not their sidecars) in a machine's spool folder.
fn spools(m: &Machine) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(m.spool_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn sidecar(spool: &Path) -> PathBuf {
    PathBuf::from(format!("{}.target", spool.display()))
}

/// An `https://` endpoint: the S3 client's TLS (on ring, the process's default crypto
/// provider since object_store no longer brings aws-lc) checks the endpoint's certificate
/// against the system's roots, here a private CA named by `SSL_CERT_FILE`. A session is
/// recorded to it and verified from it; without the CA the endpoint is refused, and said so.
#[test]
fn an_https_endpoint_is_reached_over_tls_checked_against_the_systems_roots() {
    let dir = tmp();
    let moto = Moto::start_tls(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let url = format!("s3://{BUCKET}/tls/pyserver.jsonl");
    let mut env = m.env();
    env.push(("SSL_CERT_FILE", s(dir.path().join("ca.pem"))));
    let (_, out) = record_py_server(&url, &env);
    let err = text(&out.stderr);
    assert!(out.status.success(), "record to s3 over TLS: {err}");
    assert_contains(&err, &format!("mcptape: uploaded {url} ("));
    assert_eq!(
        moto.count("PUT", "tls/pyserver.jsonl"),
        1,
        "{}",
        moto.log_text()
    );
    // A cache of its own: the tape is fetched over TLS, not found in the recording's cache.
    m.mt(["verify", &url])
        .env("SSL_CERT_FILE", s(dir.path().join("ca.pem")))
        .env("MCPTAPE_CACHE_DIR", s(dir.path().join("fresh-cache")))
        .run()
        .success()
        .stdout_contains("intact");
    assert_eq!(
        moto.count("GET", "tls/pyserver.jsonl"),
        1,
        "{}",
        moto.log_text()
    );

    // The same endpoint without its CA among the roots: refused, naming the certificate.
    let refused = m
        .mt(["ls", &format!("s3://{BUCKET}/")])
        .env("SSL_CERT_FILE", s(dir.path().join("no-such-ca.pem")))
        .run();
    assert!(!refused.exit.success(), "{}", refused.console());
    assert_contains(&refused.stderr.to_lowercase(), "certificate");
}

#[test]
fn a_session_recorded_to_s3_is_listed_played_checked_and_fetched_once_per_machine() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let (a, b) = (
        Machine::new(dir.path(), "a", &moto),
        Machine::new(dir.path(), "b", &moto),
    );
    let key = "ci/py-server/pyserver.jsonl";
    let url = format!("s3://{BUCKET}/{key}");
    let mut outputs = Vec::new();

    // Record the Python SDK server straight to s3:// through the Python SDK client.
    let a_env = a.env();
    let (live, out) = record_py_server(&url, &a_env);
    let err = text(&out.stderr);
    assert!(out.status.success(), "record to s3: {err}");
    assert_contains(&err, &format!("mcptape: uploaded {url} ("));
    assert!(spools(&a).is_empty(), "the spool is removed once uploaded");
    outputs.push(err);

    // Listed, with its size and time.
    let ls = a.mt(["ls", &format!("s3://{BUCKET}/ci/")]).run().success();
    let row = ls
        .stdout
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("{key} not listed:\n{}", ls.console()));
    assert!(row.contains("KiB") && row.contains(" 20"), "{row}");
    assert!(ls.stdout.starts_with("KEY"), "{}", ls.stdout);
    let listed: Value = a
        .mt(["ls", "--json", &format!("s3://{BUCKET}/")])
        .run()
        .success()
        .json();
    assert_eq!(listed[0]["url"], url.as_str());
    assert!(listed[0]["size"].as_u64().unwrap() > 1000);
    outputs.push(ls.stderr.clone());

    // Played from s3:// to the same client: the same transcript as live. The recording
    // machine kept what it uploaded as its cached copy: no download.
    let (played, out) = py_client(
        "pyserver",
        "legacy",
        &[s(bin()), "play".into(), url.clone()],
        &envs(&a_env),
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "play from s3: {err}");
    assert_eq!(live["steps"], played["steps"], "played as recorded");
    assert_contains(
        &err,
        &format!("mcptape: {url}: unchanged, read from the cache"),
    );
    assert_eq!(moto.count("GET", key), 0, "{}", moto.log_text());
    outputs.push(err);

    // Checked from s3:// against the live server, verified: from the cache too.
    let check = a
        .mt(["check", &url, "--"])
        .args(py_server())
        .run()
        .success();
    assert_contains(&check.stdout, "gate passed");
    assert_contains(&check.stderr, "unchanged, read from the cache");
    outputs.push(check.stderr.clone());
    let verify = a.mt(["verify", &url]).run().success();
    assert_contains(&verify.stdout, "intact");
    assert_eq!(
        moto.count("GET", key),
        0,
        "check and verify downloaded nothing"
    );

    // A second machine (an empty cache) plays the same tape: one GET; then it plays again, and
    // so does the first machine: none.
    let b_env = b.env();
    for (machine, env, gets) in [("b", &b_env, 1), ("b", &b_env, 1), ("a", &a_env, 1)] {
        let (played, out) = py_client(
            "pyserver",
            "legacy",
            &[s(bin()), "play".into(), url.clone()],
            &envs(env),
        );
        let err = text(&out.stderr);
        assert!(out.status.success(), "play on {machine}: {err}");
        assert_eq!(
            live["steps"], played["steps"],
            "played on {machine} as recorded"
        );
        assert_eq!(moto.count("GET", key), gets, "play on {machine}: {err}");
        outputs.push(err);
    }
    assert!(moto.count("HEAD", key) >= 6, "each read asks for the ETag");

    // Recorded again from machine b (from its cache: no download): the object changed, so
    // machine a downloads it again, and keeps one copy of the URL; b has the new one already.
    let (_, out) = record_py_server(&url, &b_env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    outputs.push(text(&out.stderr));
    assert_eq!(moto.count("GET", key), 1, "b re-recorded from its cache");
    let show = a.mt(["show", "--json", &url]).run().success();
    assert_contains(&show.stderr, &format!("mcptape: {url}: fetched "));
    assert_eq!(moto.count("GET", key), 2, "a fetched the new version");
    let show_b = b.mt(["show", "--json", &url]).run().success();
    assert_contains(&show_b.stderr, "unchanged, read from the cache");
    assert_eq!(show.json::<Value>()["end"], show_b.json::<Value>()["end"]);
    assert_eq!(moto.count("GET", key), 2);
    for m in [&a, &b] {
        let copies = std::fs::read_dir(m.cache.join("objects")).unwrap().count();
        assert_eq!(copies, 1, "the older copy of the URL is dropped");
    }
    outputs.push(show.stderr.clone());

    let outs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    assert_secret_nowhere(dir.path(), &outs);
}

/// `mcptape record --tape URL -- py_server` as a line client, with a machine's environment.
fn record_client(m: &Machine, url: &str) -> LineClient {
    let mut cmd = m
        .mt(["record", "--tape", url, "--"])
        .args(py_server())
        .command();
    cmd.stdin(std::process::Stdio::piped());
    LineClient::spawn_cmd(cmd)
}

/// Waits until a file holds `needle`.
fn wait_holding(path: &Path, needle: &str) {
    let start = Instant::now();
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never held {needle:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_recording_killed_mid_session_leaves_its_spool_and_push_uploads_it() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let url = format!("s3://{BUCKET}/killed/echo.jsonl");
    let mut rec = record_client(&m, &url);
    rec.initialize();
    let answer = rec.call(
        2,
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "before the kill"}}),
    );
    assert!(answer["result"].is_object(), "{answer}");
    let spool = spools(&m).pop().expect("a spool while recording");
    wait_holding(&spool, "before the kill");
    // The sidecar names the URL and the writer, nothing else; push leaves a live writer alone.
    let side: Value = serde_json::from_str(&std::fs::read_to_string(sidecar(&spool)).unwrap())
        .expect("a JSON sidecar");
    assert_eq!(side["target"], url.as_str());
    assert_eq!(side["pid"], rec.pid());
    let busy = m.mt(["push"]).run().success();
    assert_contains(&busy.stderr, "still being written by process");
    assert_eq!(moto.count("PUT", "killed/echo.jsonl"), 0);
    // A writer push cannot see (its process in another PID namespace, on another host name)
    // still holds the tape's lock: left alone too. Before, push uploaded the spool mid-session
    // and removed it under the writer, whose closed recording was then uploaded nowhere.
    let mut hidden = side.clone();
    hidden["pid"] = 2_147_483_646u32.into();
    std::fs::write(sidecar(&spool), hidden.to_string()).unwrap();
    let unseen = m.mt(["push"]).run().success();
    assert_contains(
        &unseen.stderr,
        "(process gone from here, but a writer holds the tape's lock); left alone",
    );
    assert_eq!(moto.count("PUT", "killed/echo.jsonl"), 0);
    assert!(spool.exists(), "the spool stays with its writer");
    std::fs::write(sidecar(&spool), side.to_string()).unwrap();

    // SAFETY: kill(2) on the recorder this test spawned.
    unsafe { libc::kill(rec.pid(), libc::SIGKILL) };
    rec.wait_exit(Duration::from_secs(10));
    assert!(
        spool.exists() && sidecar(&spool).exists(),
        "the spool stays"
    );
    assert_eq!(
        moto.count("PUT", "killed/echo.jsonl"),
        0,
        "nothing uploaded"
    );

    let pushed = m.mt(["push"]).run().success();
    assert_contains(&pushed.stderr, &format!("mcptape: uploaded {url} ("));
    assert_contains(&pushed.stderr, "has no closing line");
    assert_contains(&pushed.stderr, "mcptape push: uploaded 1");
    assert!(
        !spool.exists() && !sidecar(&spool).exists(),
        "removed once uploaded"
    );
    let again = m.mt(["push"]).run().success();
    assert_contains(&again.stderr, "no tape is waiting to be uploaded");

    // The cut-off tape plays from s3:// (on another machine) with a warning.
    let b = Machine::new(dir.path(), "b", &moto);
    let mut play = b.mt(["play", &url]).spawn();
    play.initialize();
    let replayed = play.call(
        2,
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "before the kill"}}),
    );
    assert_eq!(replayed["result"], answer["result"]);
    play.close_stdin();
    let (_, err) = play.finish();
    assert_contains(&err, "the tape has no closing line");

    // A re-recording that holds no exchange (the client left at once) keeps the tape in the
    // bucket as it was, as over a local tape, and is not left pending for push.
    let puts = moto.count("PUT", "killed/echo.jsonl");
    let empty = m
        .mt(["record", "--tape", &url, "--", "sh", "-c", "cat >/dev/null"])
        .run()
        .success();
    assert_contains(
        &empty.stderr,
        &format!("mcptape: the new recording held no exchange: {url} is kept as it was"),
    );
    assert_eq!(
        moto.count("PUT", "killed/echo.jsonl"),
        puts,
        "nothing uploaded"
    );
    assert_eq!(
        moto.count("GET", "killed/echo.jsonl"),
        1,
        "only b's play downloaded it"
    );
    let none = m.mt(["push"]).run().success();
    assert_contains(&none.stderr, "no tape is waiting to be uploaded");
    assert_secret_nowhere(
        dir.path(),
        &[&busy.stderr, &pushed.stderr, &err, &empty.stderr],
    );
}

/// `mcptape push` on `m` against a moto that refuses every credential (started in `dir`):
/// what it gave, exit 74.
fn push_refused(dir: &Path, m: &Machine) -> Run {
    let strict = Moto::start_with(dir, "moto-auth", &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]);
    m.mt(["push"])
        .env("AWS_ENDPOINT_URL", strict.endpoint())
        .run()
        .status(74)
}

/// The object at `key`, as stored (read back with boto3, not through mcptape's cache).
fn object_bytes(moto: &Moto, dir: &Path, key: &str) -> Vec<u8> {
    let out = dir.join(format!("object-{}", key.replace('/', "_")));
    moto.boto(&format!(
        "open({:?}, 'wb').write(s3.get_object(Bucket={BUCKET:?}, Key={key:?})['Body'].read())",
        s(&out)
    ));
    std::fs::read(&out).unwrap()
}

/// `verify --json` of a tape, without the tape's path: how a reader takes the tape.
fn verified(m: &Machine, tape: &str) -> Value {
    let mut v: Value = m.mt(["verify", "--json", tape]).run().status(1).json();
    v.as_object_mut().unwrap().remove("tape");
    v
}

/// A recording to `s3://` killed mid-session leaves its spool padded with the writer's
/// newlines (up to 64 KiB, tape/sink.rs): `push` uploads it without them, as a reader takes
/// it. A whole last line keeps its newline; a last line torn mid-copy (the padding gave it its
/// only newline: made here from the killed spool, as a kill mid-copy leaves it) keeps none, so
/// that it still reads as torn, not as a malformed line. `verify` says of each object what it
/// said of its spool, and the tape plays.
#[test]
fn a_killed_recordings_spool_is_pushed_without_the_writers_padding() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let (key, torn_key) = ("killed/padded.jsonl", "killed/torn.jsonl");
    let (url, torn_url) = (
        format!("s3://{BUCKET}/{key}"),
        format!("s3://{BUCKET}/{torn_key}"),
    );
    let mut rec = record_client(&m, &url);
    rec.initialize();
    let answer = rec.call(
        2,
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "before the kill"}}),
    );
    assert!(answer["result"].is_object(), "{answer}");
    let spool = spools(&m).pop().expect("a spool while recording");
    wait_holding(&spool, "before the kill");
    // SAFETY: kill(2) on the recorder this test spawned.
    unsafe { libc::kill(rec.pid(), libc::SIGKILL) };
    rec.wait_exit(Duration::from_secs(10));

    // The spool as the kill left it: its lines, then the padding.
    let padded = std::fs::read(&spool).unwrap();
    let data_end = padded.iter().rposition(|&b| b != b'\n').unwrap() + 1;
    assert!(
        padded.len() - data_end >= 2 && padded.len() % (64 * 1024) == 0,
        "the spool ends in the writer's padding ({} bytes, data {data_end}): is the cache on ext4, XFS or tmpfs?",
        padded.len()
    );
    let whole = &padded[..=data_end]; // the last line with its own newline
                                      // The same spool with its last line torn half-way, for another key.
    let last_start = padded[..data_end]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let cut = last_start + (data_end - last_start) / 2;
    let mut torn = padded.clone();
    torn[cut..].fill(b'\n');
    let torn_spool = spool.with_file_name(format!(
        "torn-{}",
        spool.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&torn_spool, &torn).unwrap();
    let mut side: Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar(&spool)).unwrap()).unwrap();
    side["target"] = torn_url.clone().into();
    std::fs::write(sidecar(&torn_spool), side.to_string()).unwrap();

    let before = verified(&m, &s(&spool));
    assert_eq!(before["verdict"], "cut", "{before}");
    let torn_before = verified(&m, &s(&torn_spool));
    assert_contains(&torn_before["reason"].to_string(), "is torn");

    // An upload that fails (credentials the store refuses) leaves each spool cut, reading as it
    // did, still pending: nothing lost, and nothing more to cut the next time.
    let refused = push_refused(dir.path(), &m);
    assert_contains(&refused.stderr, "mcptape push: uploaded 0, failed 2");
    assert!(std::fs::read(&spool).unwrap() == whole, "cut, not lost");
    assert!(
        std::fs::read(&torn_spool).unwrap() == torn[..cut],
        "cut, still torn"
    );
    assert!(sidecar(&spool).exists() && sidecar(&torn_spool).exists());
    assert_eq!(verified(&m, &s(&spool)), before);
    assert_eq!(verified(&m, &s(&torn_spool)), torn_before);

    let pushed = m.mt(["push"]).run().success();
    assert_contains(&pushed.stderr, "mcptape push: uploaded 2");
    assert!(spools(&m).is_empty(), "{}", pushed.console());
    let object = object_bytes(&moto, dir.path(), key);
    assert_eq!(
        object.len(),
        whole.len(),
        "the object is the spool without its padding"
    );
    assert!(
        object == whole,
        "the object is the spool's lines, byte for byte"
    );
    let torn_object = object_bytes(&moto, dir.path(), torn_key);
    assert!(
        torn_object == torn[..cut],
        "the torn object ends on the torn line's bytes, no newline ({} bytes, {cut} expected)",
        torn_object.len()
    );
    assert_contains(
        &pushed.stderr,
        &format!(
            "mcptape: uploaded {url} ({})",
            mcptape::inspect::human_bytes(whole.len() as u64)
        ),
    );

    // Read back on another machine, each object is what its spool was to a reader.
    let b = Machine::new(dir.path(), "b", &moto);
    assert_eq!(verified(&b, &url), before);
    assert_eq!(verified(&b, &torn_url), torn_before);
    let mut play = b.mt(["play", &url]).spawn();
    play.initialize();
    let replayed = play.call(
        2,
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "before the kill"}}),
    );
    assert_eq!(replayed["result"], answer["result"]);
    play.close_stdin();
    let (_, err) = play.finish();
    assert_contains(&err, "the tape has no closing line");
    let mut play = b.mt(["play", &torn_url]).spawn();
    play.initialize();
    play.close_stdin();
    let (_, err) = play.finish();
    assert_contains(&err, "is torn");
    assert_secret_nowhere(dir.path(), &[&refused.stderr, &pushed.stderr, &err]);
}

/// A tape as a recorder killed mid-session leaves it, read from `path`: its bytes (its lines, then
/// the writer's padding of newlines) and what a reader reads of them (the lines, the last one
/// whole with its own newline).
fn killed_tape(path: &Path) -> (Vec<u8>, Vec<u8>) {
    let padded = std::fs::read(path).unwrap();
    let data_end = padded.iter().rposition(|&b| b != b'\n').unwrap() + 1;
    assert!(
        padded.len() - data_end >= 2 && padded.len() % (64 * 1024) == 0,
        "{} ends in the writer's padding ({} bytes, data {data_end}): is the temp dir on ext4, XFS or tmpfs?",
        path.display(),
        padded.len()
    );
    let whole = padded[..=data_end].to_vec();
    (padded, whole)
}

/// `mcptape push TAPE s3://…` of a local tape (no spool): a tape a recording is still writing
/// (its writer holds the tape's lock) is refused, 64, naming it, and nothing is uploaded; a
/// killed recorder's tape (a first recording, written in place) and a killed re-recording's
/// `TAPE.new` go up without the writer's padding, as a reader reads them (a whole last line
/// keeps its newline, one torn mid-copy none; `verify` says of each object on another machine
/// what it says of the local file; the first plays), and the local files are left as they were. Before, push uploaded a live tape mid-session, and a killed one
/// with its padding (64 KiB for 3 KiB of lines).
#[test]
fn a_local_tape_is_pushed_without_its_writers_padding_and_not_while_it_is_recorded() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let b = Machine::new(dir.path(), "b", &moto);
    let tapes = dir.path().join("tapes");
    std::fs::create_dir_all(&tapes).unwrap();
    let tape = tapes.join("echo.jsonl");
    let staged = tapes.join("echo.jsonl.new");
    let (key, new_key) = ("local/echo.jsonl", "local/echo-rerecorded.jsonl");
    let (url, new_url) = (
        format!("s3://{BUCKET}/{key}"),
        format!("s3://{BUCKET}/{new_key}"),
    );
    let echo = |text: &str| serde_json::json!({"name": "echo", "arguments": {"text": text}});
    let refused = |path: &Path, url: &str| {
        let r = m.mt(["push", &s(path), url]).run().status(64);
        assert_contains(
            &r.stderr,
            &format!(
                "mcptape: error: {}: still being written: a writer holds the tape's lock",
                path.display()
            ),
        );
        r
    };

    // A first recording, written in place: while it records, its tape is not pushed.
    let mut rec = record_client(&m, &s(&tape));
    rec.initialize();
    let answer = rec.call(2, "tools/call", echo("before the kill"));
    assert!(answer["result"].is_object(), "{answer}");
    wait_holding(&tape, "before the kill");
    let busy = refused(&tape, &url);
    assert_eq!(moto.count("PUT", key), 0, "nothing uploaded");
    // SAFETY: kill(2) on the recorder this test spawned.
    unsafe { libc::kill(rec.pid(), libc::SIGKILL) };
    rec.wait_exit(Duration::from_secs(10));

    // Killed, it goes up without its padding; the file stays as it was.
    let (padded, whole) = killed_tape(&tape);
    let before = verified(&m, &s(&tape));
    assert_eq!(before["verdict"], "cut", "{before}");
    let pushed = m.mt(["push", &s(&tape), &url]).run().success();
    assert_contains(&pushed.stderr, "has no closing line");
    assert_contains(
        &pushed.stderr,
        &format!(
            "mcptape: uploaded {url} ({})",
            mcptape::inspect::human_bytes(whole.len() as u64)
        ),
    );
    assert!(
        std::fs::read(&tape).unwrap() == padded,
        "the local tape is left as it was"
    );
    let object = object_bytes(&moto, dir.path(), key);
    assert_eq!(
        object.len(),
        whole.len(),
        "the object is the tape without its padding"
    );
    assert!(
        object == whole,
        "the object is the tape's lines, byte for byte"
    );
    assert_eq!(verified(&b, &url), before);
    let mut play = b.mt(["play", &url]).spawn();
    play.initialize();
    let replayed = play.call(2, "tools/call", echo("before the kill"));
    assert_eq!(replayed["result"], answer["result"]);
    play.close_stdin();
    let (_, err) = play.finish();
    assert_contains(&err, "the tape has no closing line");

    // The same tape with its last line torn half-way (made from it, as a kill mid-copy leaves
    // it): the object ends on the torn line's bytes, no newline, and still reads as torn.
    let data_end = whole.len() - 1;
    let last_start = whole[..data_end].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let cut = last_start + (data_end - last_start) / 2;
    let mut torn = padded.clone();
    torn[cut..].fill(b'\n');
    let torn_tape = tapes.join("torn.jsonl");
    std::fs::write(&torn_tape, &torn).unwrap();
    let torn_before = verified(&m, &s(&torn_tape));
    assert_contains(&torn_before["reason"].to_string(), "is torn");
    let torn_key = "local/torn.jsonl";
    let torn_url = format!("s3://{BUCKET}/{torn_key}");
    let pushed_torn = m.mt(["push", &s(&torn_tape), &torn_url]).run().success();
    assert!(
        object_bytes(&moto, dir.path(), torn_key) == torn[..cut],
        "the torn object ends on the torn line's bytes: {}",
        pushed_torn.console()
    );
    assert!(std::fs::read(&torn_tape).unwrap() == torn, "left as it was");
    assert_eq!(verified(&b, &torn_url), torn_before);

    // A re-recording of it writes TAPE.new: not pushed while it records; killed, pushed without
    // its padding, TAPE.new and the tape left as they were.
    let mut rerec = record_client(&m, &s(&tape));
    rerec.initialize();
    rerec.call(2, "tools/call", echo("re-recorded"));
    wait_holding(&staged, "re-recorded");
    let busy_new = refused(&staged, &new_url);
    assert_eq!(moto.count("PUT", new_key), 0, "nothing uploaded");
    // SAFETY: kill(2) on the recorder this test spawned.
    unsafe { libc::kill(rerec.pid(), libc::SIGKILL) };
    rerec.wait_exit(Duration::from_secs(10));
    let (padded_new, whole_new) = killed_tape(&staged);
    let before_new = verified(&m, &s(&staged));
    assert_eq!(before_new["verdict"], "cut", "{before_new}");
    let pushed_new = m.mt(["push", &s(&staged), &new_url]).run().success();
    assert_contains(
        &pushed_new.stderr,
        &format!(
            "mcptape: uploaded {new_url} ({})",
            mcptape::inspect::human_bytes(whole_new.len() as u64)
        ),
    );
    assert!(
        std::fs::read(&staged).unwrap() == padded_new,
        "left as it was"
    );
    assert!(std::fs::read(&tape).unwrap() == padded, "left as it was");
    assert!(
        object_bytes(&moto, dir.path(), new_key) == whole_new,
        "the object is TAPE.new's lines, byte for byte"
    );
    assert_eq!(verified(&b, &new_url), before_new);
    assert_secret_nowhere(
        dir.path(),
        &[
            &busy.stderr,
            &pushed.stderr,
            &busy_new.stderr,
            &pushed_new.stderr,
            &err,
        ],
    );
}

/// A request an S3 endpoint was sent: its request line, its headers (names in lowercase), its
/// body.
type Request = (String, std::collections::HashMap<String, String>, Vec<u8>);

/// An S3 endpoint on 127.0.0.1 that takes one request, answers it 200 with an ETag and gives it
/// back through the handle: what a client sent, headers and bytes.
fn one_request_endpoint() -> (String, std::thread::JoinHandle<Request>) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut headers = std::collections::HashMap::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let len: usize = headers
            .get("content-length")
            .map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        conn.write_all(
            b"HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        (line.trim_end().to_string(), headers, body)
    });
    (endpoint, handle)
}

/// What `push` sends with a local tape it uploads in one PUT, to an endpoint that keeps the
/// request: a killed recorder's tape goes up without its padding, and the request's length and
/// every hash it carries — the SigV4 payload hash (`x-amz-content-sha256`), and the SHA-256
/// checksum the store checks the object against when `AWS_CHECKSUM_ALGORITHM=sha256` asks for
/// one (`x-amz-checksum-sha256`) — are those bytes', not the file's. A closed tape's request is
/// the file, byte for byte. (moto keeps no checksum sent without `x-amz-sdk-checksum-algorithm`,
/// so the request itself is looked at.)
#[test]
fn a_pushed_tapes_length_and_hashes_are_of_the_bytes_uploaded() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let dir = tmp();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let tape = dir.path().join("killed.jsonl");
    let mut rec = LineClient::spawn_cmd({
        let mut c = Mt::new(["record", "--tape", &s(&tape), "--"])
            .args(py_server())
            .dir(&home)
            .command();
        c.stdin(std::process::Stdio::piped());
        c
    });
    rec.initialize();
    rec.call(
        2,
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "before the kill"}}),
    );
    wait_holding(&tape, "before the kill");
    // SAFETY: kill(2) on the recorder this test spawned.
    unsafe { libc::kill(rec.pid(), libc::SIGKILL) };
    rec.wait_exit(Duration::from_secs(10));
    let (padded, whole) = killed_tape(&tape);

    let closed = dir.path().join("closed.jsonl");
    write_tape(
        &closed,
        &[
            ("c2s", req(1, "tools/list", serde_json::json!({}))),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let closed_bytes = std::fs::read(&closed).unwrap();

    for (path, key, sent) in [
        (&tape, "local/killed.jsonl", &whole),
        (&closed, "local/closed.jsonl", &closed_bytes),
    ] {
        let (endpoint, request) = one_request_endpoint();
        let url = format!("s3://{BUCKET}/{key}");
        let pushed = Mt::new(["push", &s(path), &url])
            .dir(&home)
            .env_remove("AWS_PROFILE")
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_CHECKSUM_ALGORITHM", "sha256")
            .env("MCPTAPE_CACHE_DIR", s(dir.path().join("cache")))
            .env("HOME", s(&home))
            .timeout(Duration::from_secs(60))
            .run()
            .success();
        let (line, headers, body) = request.join().expect("the endpoint got one request");
        assert!(line.starts_with(&format!("PUT /{BUCKET}/{key} ")), "{line}");
        assert_eq!(body.len(), sent.len(), "{key}: {}", pushed.console());
        assert!(body == *sent, "{key}: the bytes sent");
        let sha = sha2::Sha256::digest(sent);
        assert_eq!(headers["content-length"], sent.len().to_string(), "{key}");
        assert_eq!(headers["x-amz-content-sha256"], format!("{sha:x}"), "{key}");
        assert_eq!(
            headers["x-amz-checksum-sha256"],
            base64::engine::general_purpose::STANDARD.encode(sha),
            "{key}"
        );
        assert_contains(
            &pushed.stderr,
            &format!(
                "mcptape: uploaded {url} ({})",
                mcptape::inspect::human_bytes(sent.len() as u64)
            ),
        );
    }
    assert!(std::fs::read(&tape).unwrap() == padded, "left as it was");
}

/// A padded local tape past 8 MiB (its lines, then a writer's padding of newlines, as a
/// recorder killed mid-session leaves one) goes up as a multipart upload of its lines only.
#[test]
fn a_large_padded_local_tape_goes_up_in_parts_without_its_padding() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let tape = dir.path().join("big.jsonl");
    let text = "x".repeat(9 * 1024 * 1024);
    write_tape(
        &tape,
        &[
            (
                "c2s",
                req(1, "tools/call", serde_json::json!({"name": "big"})),
            ),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}}),
            ),
        ],
        false,
    );
    let lines = std::fs::read(&tape).unwrap();
    let mut padded = lines.clone();
    padded.resize(lines.len().next_multiple_of(64 * 1024) + 64 * 1024, b'\n');
    std::fs::write(&tape, &padded).unwrap();
    let key = "big/padded.jsonl";
    let url = format!("s3://{BUCKET}/{key}");
    let pushed = m.mt(["push", &s(&tape), &url]).run().success();
    assert_contains(
        &pushed.stderr,
        &format!(
            "mcptape: uploaded {url} ({}, a multipart upload of 2 parts)",
            mcptape::inspect::human_bytes(lines.len() as u64)
        ),
    );
    assert!(
        object_bytes(&moto, dir.path(), key) == lines,
        "the object is the tape's lines"
    );
    assert!(std::fs::read(&tape).unwrap() == padded, "left as it was");
}

#[test]
fn an_endpoint_gone_at_close_fails_with_74_keeps_the_spool_and_push_resumes_it() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    let port = moto.port;
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let url = format!("s3://{BUCKET}/gone/echo.jsonl");
    let mut rec = record_client(&m, &url);
    rec.initialize();
    rec.call(
        2,
        "tools/call",
        serde_json::json!({"name": "add", "arguments": {"a": 20, "b": 22}}),
    );
    // The endpoint goes away before the client closes. Its port is held meanwhile (bound, not
    // listening: connections are refused, and no other test's server can take it) for the moto
    // that comes back on it.
    drop(moto);
    let hold = PortHold::on(port);
    rec.close_stdin();
    let (status, err) = rec.finish();
    assert_eq!(status.code(), Some(74), "{err}");
    assert_contains(
        &err,
        &format!("{url}: uploading the tape failed: cannot reach"),
    );
    assert_contains(&err, "`mcptape push` uploads it");
    let spool = spools(&m).pop().expect("the spool is kept");
    assert!(sidecar(&spool).exists());
    let recorded = std::fs::read(&spool).unwrap();

    // Pushed with credentials the store refuses: a clear error, the spool still there.
    let refused = push_refused(dir.path(), &m);
    assert_contains(
        &refused.stderr,
        &format!("{url}: uploading the tape was refused"),
    );
    assert_contains(&refused.stderr, "check AWS_ACCESS_KEY_ID");
    assert_eq!(std::fs::read(&spool).unwrap(), recorded, "nothing lost");

    // The endpoint is back (a fresh moto on the same port): push uploads it.
    let moto = Moto::start_on(dir.path(), "moto-again", hold);
    moto.bucket(BUCKET);
    let pushed = m.mt(["push", &s(&spool)]).run().success();
    assert_contains(&pushed.stderr, &format!("mcptape: uploaded {url} ("));
    assert!(!spool.exists());
    // A spool closed cleanly has no padding: it goes up byte for byte.
    assert!(recorded.ends_with(b"}\n"));
    assert!(object_bytes(&moto, dir.path(), "gone/echo.jsonl") == recorded);
    let shown: Value = m.mt(["show", "--json", &url]).run().success().json();
    assert_eq!(shown["exchanges"], 2);
    assert_contains(&shown.to_string(), "\"target\":\"add\"");
    assert_secret_nowhere(dir.path(), &[&err, &refused.stderr, &pushed.stderr]);
}

/// A spool folder that cannot be used (a file in its place) is an I/O error, 74, naming it:
/// `record s3://…` stops before the server starts and uploads nothing; `push` with no arguments
/// says it cannot read it. Both said so already but exited 70, "internal error (a bug)": the I/O
/// error was turned into the message's words and lost as a cause.
#[test]
fn a_spool_folder_that_cannot_be_used_is_an_io_error_74_naming_it() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    std::fs::create_dir_all(&m.cache).unwrap();
    std::fs::write(m.spool_dir(), "not a folder").unwrap();
    let url = format!("s3://{BUCKET}/spool-less.jsonl");
    let started = dir.path().join("server-started");
    let out = m
        .mt(["record", "--tape", &url, "--", "sh", "-c"])
        .arg(format!("touch '{}'; cat", started.display()))
        .run()
        .status(74);
    assert_contains(
        &out.stderr,
        &format!(
            "mcptape: error: {url}: creating the spool in {}: ",
            m.spool_dir().display()
        ),
    );
    assert!(!started.exists(), "no server started: {}", out.console());
    assert_eq!(moto.count("PUT", "spool-less"), 0, "nothing uploaded");
    let out = m.mt(["push"]).run().status(74);
    assert_contains(
        &out.stderr,
        &format!(
            "mcptape: error: reading the spool folder {}: Not a directory (os error 20)",
            m.spool_dir().display()
        ),
    );
    assert_eq!(
        std::fs::read_to_string(m.spool_dir()).unwrap(),
        "not a folder",
        "left as it was"
    );
}

/// A stdio MCP server (Python, no SDK) whose every tools/call answers with `size` bytes of text.
fn big_server(size: usize) -> Vec<String> {
    let script = format!(
        r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {{"protocolVersion": m["params"]["protocolVersion"], "capabilities": {{"tools": {{}}}}, "serverInfo": {{"name": "big", "version": "1"}}}}
    else:
        n = m["params"]["arguments"]["n"]
        r = {{"content": [{{"type": "text", "text": (str(n) * {size})[:{size}]}}]}}
    sys.stdout.write(json.dumps({{"jsonrpc": "2.0", "id": m["id"], "result": r}}) + "\n")
    sys.stdout.flush()
"#
    );
    vec!["python3".into(), "-c".into(), script]
}

#[test]
fn a_large_tape_goes_up_as_a_multipart_upload_and_plays_back_whole() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let key = "big/big.jsonl";
    let url = format!("s3://{BUCKET}/{key}");
    let size = 4 * 1024 * 1024;
    let mut cmd = m
        .mt(["record", "--max-message", "67108864", "--tape", &url, "--"])
        .args(big_server(size))
        .command();
    cmd.stdin(std::process::Stdio::piped());
    let mut rec = LineClient::spawn_cmd(cmd);
    rec.initialize();
    for n in 1..=4 {
        let r = rec.call(
            n + 1,
            "tools/call",
            serde_json::json!({"name": "big", "arguments": {"n": n}}),
        );
        assert_eq!(
            r["result"]["content"][0]["text"].as_str().unwrap().len(),
            size
        );
    }
    rec.close_stdin();
    let (status, err) = rec.finish();
    assert!(status.success(), "{err}");
    assert_contains(
        &err,
        &format!("mcptape: uploaded {url} (16.0 MiB, a multipart upload of 3 parts)"),
    );
    let log = moto.log_text();
    assert_contains(&log, &format!("\"POST /{BUCKET}/{key}?uploads"));
    assert!(log.contains("partNumber=3"), "{log}");
    assert_eq!(moto.count("PUT", &format!("{key} ")), 0, "not one PUT");

    // Another machine plays it whole; the object is the recorded tape, byte for byte verified.
    let b = Machine::new(dir.path(), "b", &moto);
    let verify = b.mt(["verify", &url]).run().success();
    assert_contains(&verify.stdout, "intact");
    let mut play = b.mt(["play", &url]).spawn();
    play.initialize();
    let r = play.call(
        3,
        "tools/call",
        serde_json::json!({"name": "big", "arguments": {"n": 2}}),
    );
    assert_eq!(
        r["result"]["content"][0]["text"].as_str().unwrap(),
        "2".repeat(size)
    );
    play.close_stdin();
    play.finish();
    assert_secret_nowhere(dir.path(), &[&err, &verify.stderr]);
}

#[test]
fn bad_urls_missing_buckets_and_refused_credentials_are_clear_errors_naming_the_url() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    for (url, says) in [
        ("s3://Team_Tapes/t.jsonl", "may hold only lowercase letters"),
        ("s3://team-tapes", "no key: a tape is s3://team-tapes/KEY"),
        ("s3://team-tapes/dir/", "a prefix, not a tape"),
        ("s3:///t.jsonl", "is empty"),
        ("gs://team-tapes/t.jsonl", "gs:// is not supported"),
    ] {
        let r = m.mt(["play", url]).run().status(64);
        assert_contains(&r.stderr, &format!("mcptape: error: {url}: "));
        assert_contains(&r.stderr, says);
    }

    // A missing bucket: said before the server is started, so no session is lost.
    let marker = dir.path().join("server-started");
    let r = m
        .mt([
            "record",
            "--tape",
            "s3://no-such-bucket/t.jsonl",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("touch {}", s(&marker)))
        .run()
        .status(66);
    assert_contains(
        &r.stderr,
        &format!(
            "s3://no-such-bucket/t.jsonl: no such bucket \"no-such-bucket\" at {}",
            moto.endpoint()
        ),
    );
    assert!(!marker.exists(), "the server was not started");
    let r = m
        .mt(["play", "s3://no-such-bucket/t.jsonl"])
        .run()
        .status(66);
    assert_contains(&r.stderr, "no such bucket");
    let r = m.mt(["ls", "s3://no-such-bucket/"]).run().status(66);
    assert_contains(&r.stderr, "s3://no-such-bucket/: no such bucket");
    let r = m
        .mt(["show", &format!("s3://{BUCKET}/missing.jsonl")])
        .run()
        .status(66);
    assert_contains(
        &r.stderr,
        &format!("s3://{BUCKET}/missing.jsonl: no such tape"),
    );

    // Refused credentials (moto checking them), for reading, listing and uploading a local tape,
    // which stays as it was.
    let strict = Moto::start_with(
        dir.path(),
        "moto-auth",
        &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")],
    );
    let url = format!("s3://{BUCKET}/t.jsonl");
    let r = m
        .mt(["play", &url])
        .env("AWS_ENDPOINT_URL", strict.endpoint())
        .run()
        .status(69);
    assert_contains(
        &r.stderr,
        &format!("{url}: looking the tape up was refused"),
    );
    let r = m
        .mt(["ls", &format!("s3://{BUCKET}/")])
        .env("AWS_ENDPOINT_URL", strict.endpoint())
        .run()
        .status(69);
    assert_contains(&r.stderr, "InvalidAccessKeyId");
    let local = dir.path().join("local.jsonl");
    write_tape(
        &local,
        &[
            ("c2s", req(1, "tools/list", serde_json::json!({}))),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let before = std::fs::read(&local).unwrap();
    let r = m
        .mt(["push", &s(&local), &url])
        .env("AWS_ENDPOINT_URL", strict.endpoint())
        .run()
        .status(69);
    assert_contains(&r.stderr, &format!("{url}: uploading the tape was refused"));
    assert_eq!(std::fs::read(&local).unwrap(), before);
    let r = m.mt(["push", &s(&local)]).run().status(64);
    assert_contains(&r.stderr, "not a spool");

    // An endpoint that is not there (a port held bound, not listening: connections are refused).
    let nothing = PortHold::any();
    let r = m
        .mt(["play", &url])
        .env("AWS_ENDPOINT_URL", nothing.url())
        .run()
        .status(69);
    assert_contains(
        &r.stderr,
        &format!("{url}: looking the tape up failed: cannot reach"),
    );
    // No credentials at all for another store: said, instead of asking the EC2 metadata
    // service.
    let r = m
        .mt(["play", &url])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .run()
        .status(64);
    assert_contains(
        &r.stderr,
        &format!("{url}: no credentials for the endpoint {}", moto.endpoint()),
    );
    // Plain HTTP to another machine is refused without a request.
    let r = m
        .mt(["play", &url])
        .env("AWS_ENDPOINT_URL", "http://s3.example.invalid")
        .run()
        .status(64);
    assert_contains(&r.stderr, "set AWS_ALLOW_HTTP=true");
    assert_secret_nowhere(dir.path(), &[&r.stderr]);
}

#[test]
fn a_profile_of_the_shared_aws_files_gives_the_keys_region_and_endpoint() {
    let dir = tmp();
    // moto checking credentials, after the 4 requests that make an IAM user with S3 rights.
    let moto = Moto::start_with(
        dir.path(),
        "moto-auth",
        &[("INITIAL_NO_AUTH_ACTION_COUNT", "4")],
    );
    let keys = moto.boto(
        "iam = boto3.client('iam', endpoint_url=ENDPOINT, region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='y')\n\
         iam.create_user(UserName='ci')\n\
         k = iam.create_access_key(UserName='ci')['AccessKey']\n\
         iam.put_user_policy(UserName='ci', PolicyName='s3', PolicyDocument=json.dumps({'Version': '2012-10-17', 'Statement': [{'Effect': 'Allow', 'Action': 's3:*', 'Resource': '*'}]}))\n\
         boto3.client('s3', endpoint_url=ENDPOINT, region_name='us-east-1', aws_access_key_id=k['AccessKeyId'], aws_secret_access_key=k['SecretAccessKey']).create_bucket(Bucket='team-tapes')\n\
         print(k['AccessKeyId'], k['SecretAccessKey'])",
    );
    let (id, secret) = keys.trim().split_once(' ').expect("two keys");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[team]\naws_access_key_id = {id}\naws_secret_access_key = {secret}\n\n[sso]\nsso_session = corp\n"),
    )
    .unwrap();
    std::fs::write(
        home.join(".aws/config"),
        format!(
            "[profile team]\nregion = us-east-1\nendpoint_url = {}\n",
            moto.endpoint()
        ),
    )
    .unwrap();
    let mt = |profile: &str, args: &[&str]| {
        let mut mt = Mt::new(args)
            .dir(&home)
            .env("HOME", &home)
            .env("MCPTAPE_CACHE_DIR", home.join("cache"));
        for k in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_CONFIG_FILE",
        ] {
            mt = mt.env_remove(k);
        }
        if profile.is_empty() {
            mt.env_remove("AWS_PROFILE")
        } else {
            mt.env("AWS_PROFILE", profile)
        }
    };
    let local = dir.path().join("t.jsonl");
    write_tape(
        &local,
        &[
            ("c2s", req(1, "tools/list", serde_json::json!({}))),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let pushed = mt("team", &["push", &s(&local), "s3://team-tapes/p/"])
        .run()
        .success();
    assert_contains(
        &pushed.stderr,
        "mcptape: uploaded s3://team-tapes/p/t.jsonl (",
    );
    let ls = mt("team", &["ls", "s3://team-tapes/p/"]).run().success();
    assert_contains(&ls.stdout, "p/t.jsonl");
    let shown = mt("team", &["show", "s3://team-tapes/p/t.jsonl"])
        .run()
        .success();
    assert_contains(&shown.stdout, "tools/list");
    let r = mt("nope", &["ls", "s3://team-tapes/"]).run().status(64);
    assert_contains(&r.stderr, "AWS_PROFILE=nope: no such profile in");
    let r = mt("sso", &["ls", "s3://team-tapes/"]).run().status(64);
    assert_contains(&r.stderr, "it uses sso_session, which mcptape does not run");
    // The default profile's keys are refused by the store: the error names the URL.
    let r = mt("", &["ls", "s3://team-tapes/"])
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .run()
        .status(69);
    assert_contains(&r.stderr, "s3://team-tapes/: listing was refused");
    for out in [&pushed.stderr, &ls.stderr, &shown.stderr, &r.stderr] {
        assert!(!out.contains(secret), "{out}");
    }
    let leaked: Vec<PathBuf> = files_holding(&home.join("cache"), secret);
    assert!(leaked.is_empty(), "{leaked:?}");
}

#[test]
fn file_urls_are_local_paths() {
    let dir = tmp();
    let tape = dir.path().join("t.jsonl");
    write_tape(
        &tape,
        &[
            ("c2s", req(1, "tools/list", serde_json::json!({}))),
            (
                "s2c",
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            ),
        ],
        true,
    );
    let url = format!("file://{}", s(&tape));
    let shown = Mt::new(["show", &url]).run().success();
    assert_contains(&shown.stdout, "tools/list");
    let ls = Mt::new(["ls", &format!("file://{}", s(dir.path()))])
        .run()
        .success();
    assert_contains(&ls.stdout, "t ");
    let r = Mt::new(["show", "file://elsewhere/t.jsonl"])
        .run()
        .status(64);
    assert_contains(
        &r.stderr,
        "file://elsewhere/t.jsonl: a file URL names a path on this machine",
    );
}

#[test]
fn a_miss_answered_live_is_appended_to_the_s3_tape_and_uploaded() {
    let dir = tmp();
    let moto = Moto::start(dir.path(), "moto");
    moto.bucket(BUCKET);
    let m = Machine::new(dir.path(), "a", &moto);
    let key = "live/echo.jsonl";
    let url = format!("s3://{BUCKET}/{key}");
    let echo = |text: &str| serde_json::json!({"name": "echo", "arguments": {"text": text}});
    let mut rec = record_client(&m, &url);
    rec.initialize();
    rec.call(2, "tools/call", echo("on the tape"));
    let err = rec.finish_with(0);
    assert_contains(&err, &format!("mcptape: uploaded {url} ("));

    // Played on another machine with the live server for misses: the miss is answered live,
    // appended, and the longer tape uploaded when play ends.
    let b = Machine::new(dir.path(), "b", &moto);
    let mut play = b
        .mt(["play", &url, "--on-miss", "live", "--"])
        .args(py_server())
        .spawn();
    play.initialize();
    let taped = play.call(2, "tools/call", echo("on the tape"));
    let live = play.call(3, "tools/call", echo("not on the tape"));
    assert_contains(&live.to_string(), "not on the tape");
    assert!(taped["result"].is_object(), "{taped}");
    let err = play.finish_with(0);
    assert_contains(&err, "appended 1 exchange from the live server");
    assert_contains(&err, &format!("mcptape: uploaded {url} ("));
    assert!(spools(&b).is_empty(), "{err}");

    // Machine a (its cache holds the first version) sees the new one, chain intact.
    let verify = m.mt(["verify", &url]).run().success();
    assert_contains(&verify.stderr, &format!("mcptape: {url}: fetched "));
    assert_contains(&verify.stdout, "intact");
    let shown: Value = m.mt(["show", "--json", &url]).run().success().json();
    assert_eq!(shown["exchanges"], 3, "{shown}");
    assert_secret_nowhere(dir.path(), &[&err, &verify.stderr]);
}
