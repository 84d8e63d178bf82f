//! `mcptape run -- <agent…>`: a whole agent run on one tape. The model proxy and a join socket
//! are started in this process, the agent is pointed at them (see [`agent`]), each of its stdio
//! MCP servers is started through `mcptape record --join` and taped here under its config name,
//! and when the agent exits everything is stopped and the tape closed. With `--replay` every
//! MCP server is served from the tape (no server process) and the model is live; with
//! `--playback` the model is answered from the tape too (no upstream connection at all).

pub mod agent;
pub mod claude_dir;
mod codex;
pub mod config;
mod gemini;
mod opencode;

use crate::model::player::{ModelPlayer, PlaybackReport};
use crate::model::proxy::ModelProxy;
use crate::record::{RecordError, Recorder};
use crate::tape::{End, ServerDecl, WriteOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How the run uses its tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Record the model and every stdio MCP server onto the tape.
    Record,
    /// The model live (not taped), every MCP server from the tape.
    Replay,
    /// Everything from the tape: no server process, no upstream connection.
    Playback,
}

/// What a run needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunConfig {
    /// The tape (written when recording, read otherwise).
    pub tape: PathBuf,
    /// How it is used.
    pub mode: Mode,
    /// The agent's command line.
    pub command: Vec<String>,
    /// How the tape is written.
    pub write: WriteOptions,
    /// The model API to record against, instead of the one the agent is configured with.
    pub upstream: Option<String>,
    /// CA certificates (PEM) for an `https://` upstream.
    pub upstream_ca: Option<PathBuf>,
    /// The journal of config files rewritten in place (restored by the next run after a
    /// crash).
    pub journal: PathBuf,
    /// `--lenient` for the model in playback.
    pub lenient: bool,
    /// Playback: the user's marker key (`$MCPTAPE_REDACT_KEY`); the model's playback uses it
    /// when the tape's markers were made with it.
    pub marker_key: Option<crate::redact::MarkerKey>,
}

impl RunConfig {
    /// A run of `command` on `tape` in `mode`, the tape written with `write`.
    pub fn new(tape: PathBuf, mode: Mode, command: Vec<String>, write: WriteOptions) -> RunConfig {
        RunConfig {
            tape,
            mode,
            command,
            write,
            upstream: None,
            upstream_ca: None,
            journal: {
                let tapes = crate::tape::store::tapes_dir();
                tapes.parent().unwrap_or(&tapes).join("run-restore.json")
            },
            lenient: false,
            marker_key: None,
        }
    }
}

/// How a run went.
#[derive(Debug)]
pub struct RunOutcome {
    /// The agent's exit code (128+n for a signal); 70 when how it ended could not be learned.
    pub agent_exit: i32,
    /// How the agent ended could not be learned (waiting for it failed, said on stderr):
    /// `agent_exit` is 70, not the agent's.
    pub agent_end_lost: bool,
    /// Which agent it was.
    pub agent: agent::Agent,
    /// The MCP servers that went through mcptape, and the HTTP ones left alone.
    pub servers: config::Rewritten,
    /// Recording: the tape's closing line.
    pub end: Option<End>,
    /// Recording: model calls taped (Code Assist's setup calls not among them).
    pub model_calls: u64,
    /// Recording: Code Assist's setup calls taped (Gemini CLI signed in with Google).
    pub setup_calls: u64,
    /// Playback: how the model was answered.
    pub model: Option<PlaybackReport>,
    /// Config files put back.
    pub restored: Vec<PathBuf>,
    /// Claude Code's borrowed config folder given back: its real state file, and what went
    /// back into it.
    pub given_back: Option<(PathBuf, claude_dir::GivenBack)>,
}

/// Why a run could not happen.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Recording could not start (tape, upstream, listener).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The agent's config could not be rewritten.
    #[error(transparent)]
    Prepare(#[from] agent::PrepareError),
    /// The tape to replay could not be read.
    #[error(transparent)]
    Tape(#[from] crate::tape::TapeError),
    /// The agent could not be started.
    #[error("could not start the agent `{command}`")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// A temporary file or the journal could not be written.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for RunError {
    fn exit_code(&self) -> i32 {
        match self {
            RunError::Record(e) => crate::exit::Coded::exit_code(e),
            RunError::Prepare(e) => crate::exit::Coded::exit_code(e),
            RunError::Tape(e) => crate::exit::Coded::exit_code(e),
            RunError::Spawn { .. } => crate::exit::UNAVAILABLE,
            RunError::Io { .. } => crate::exit::IO_ERR,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |cause| RunError::Io { what, cause }
}

/// The model side of a run, listening.
enum ModelSide {
    None,
    Proxy(Arc<ModelProxy>),
    Player(Arc<ModelPlayer>),
}

/// Runs the agent to its end. Each signal number received on `signals` is passed on to the
/// agent (the binary feeds it SIGINT, SIGTERM and SIGHUP); the run ends when the agent does.
pub async fn run(
    cfg: &RunConfig,
    mut signals: mpsc::UnboundedReceiver<i32>,
) -> Result<RunOutcome, RunError> {
    let mut restored = config::restore_all(&cfg.journal).map_err(io_err(format!(
        "restoring the files a run that did not finish left rewritten ({})",
        cfg.journal.display()
    )))?;
    let agent = agent::Agent::of(&cfg.command);
    let exe = std::env::current_exe().map_err(io_err("finding the mcptape binary"))?;
    let temp = tempfile::Builder::new()
        .prefix("mcptape-run-")
        .tempdir()
        .map_err(io_err("making a temporary folder"))?;
    let socket = temp.path().join("join.sock");
    let cwd = std::env::current_dir().map_err(io_err("reading the working folder"))?;

    // The model side listens first: its URL goes into the agent's config.
    let (listener, local) =
        crate::transport::http::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|cause| RecordError::Listen {
                addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                cause,
            })?;
    let model_url = format!("http://{local}");
    let through = match cfg.mode {
        Mode::Record => config::Through::Record {
            exe: exe.clone(),
            socket: socket.clone(),
        },
        Mode::Replay | Mode::Playback => config::Through::Play {
            exe: exe.clone(),
            tape: std::path::absolute(&cfg.tape).map_err(io_err("resolving the tape's path"))?,
        },
    };
    let stable = stable_dir(&cfg.tape)?;
    // HTTP MCP servers: a listener of mcptape's for each (a proxy when recording, the tape's
    // player otherwise), bound now so the agent's config can name its URL.
    let on_tape: Vec<String> = match cfg.mode {
        Mode::Record => Vec::new(),
        _ => crate::tape::TapeIndex::load(&cfg.tape, None)?
            .servers
            .iter()
            .filter(|s| s.transport == "streamable_http")
            .map(|s| s.server.clone())
            .collect(),
    };
    let http_servers: std::cell::RefCell<Vec<(String, String, std::net::TcpListener)>> =
        Default::default();
    let hook = |name: &str, url: &str| -> Option<String> {
        if cfg.mode != Mode::Record && !on_tape.iter().any(|n| n == name) {
            return None; // not recorded: left live
        }
        let uri: hyper::Uri = url.parse().ok()?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).ok()?;
        let port = l.local_addr().ok()?.port();
        http_servers
            .borrow_mut()
            .push((name.to_string(), url.to_string(), l));
        Some(format!("http://127.0.0.1:{port}{path}"))
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let plan = agent::Plan {
        home: home.as_deref(),
        http: &hook,
        model_url: (cfg.mode != Mode::Replay).then_some(model_url.as_str()),
        through: &through,
        temp: temp.path(),
        stable: &stable,
        journal: &cfg.journal,
        cwd: &cwd,
        claude_managed: std::path::Path::new(agent::CLAUDE_MANAGED_DIR),
    };
    let prepared = agent::prepare(agent, &cfg.command, &plan)?;

    // The tape, the model side and the join socket.
    let mut tape: Option<Recorder> = None;
    // What fails from here on, before the agent starts, puts the rewritten files back.
    let mut setup = || -> Result<ModelSide, RunError> {
        Ok(match cfg.mode {
            Mode::Record => {
                let upstream = cfg
                    .upstream
                    .clone()
                    .or_else(|| prepared.upstream.clone())
                    .unwrap_or_else(|| "https://api.anthropic.com".into());
                let uri = crate::model::serve::upstream_uri(&upstream)?;
                let connector =
                    crate::transport::upstream::connector_to(&uri, cfg.upstream_ca.as_deref())
                        .map_err(RecordError::from)?;
                let rec = crate::model::serve::model_tape(
                    &cfg.tape,
                    &cfg.write,
                    crate::model::serve::DEFAULT_LABEL,
                    &upstream,
                )?;
                tape = Some(rec.clone());
                ModelSide::Proxy(Arc::new(ModelProxy::new(
                    rec,
                    uri,
                    connector,
                    crate::wire::DEFAULT_MAX_MESSAGE,
                )))
            }
            Mode::Playback => {
                let calls =
                    crate::model::calls::load(&cfg.tape, Some(crate::model::serve::DEFAULT_LABEL))?;
                // With the user's marker key, requests made with different secrets are told
                // apart, as the MCP servers' playback does.
                let tape_key_id = crate::tape::TapeReader::open(&cfg.tape)?
                    .header()
                    .marker_key
                    .clone();
                ModelSide::Player(Arc::new(
                    ModelPlayer::new(calls, cfg.lenient, crate::wire::DEFAULT_MAX_MESSAGE)
                        .with_marker_key(tape_key_id, cfg.marker_key.clone()),
                ))
            }
            Mode::Replay => ModelSide::None,
        })
    };
    let put_back = || {
        for f in &prepared.in_place {
            let _ = f.restore(&cfg.journal);
        }
    };
    let model = match setup() {
        Ok(m) => m,
        Err(e) => {
            put_back();
            return Err(e);
        }
    };
    let (stop_all, stopped) = tokio::sync::watch::channel(false);
    let stop_signal = move || {
        let mut rx = stopped.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
            "the agent exited".to_string()
        }
    };
    let http_tasks =
        match serve_http_servers(cfg, http_servers.into_inner(), tape.as_ref(), &stop_signal) {
            Ok(t) => t,
            Err(e) => {
                put_back();
                return Err(e);
            }
        };
    let max = crate::transport::http::Limits::default();
    let serving = {
        let stop = stop_signal();
        match &model {
            ModelSide::Proxy(p) => {
                let p = p.clone();
                tokio::spawn(async move {
                    let (_, c) =
                        crate::transport::http::accept_until(&listener, max, p, stop).await;
                    drain(c).await;
                })
            }
            ModelSide::Player(p) => {
                let p = p.clone();
                tokio::spawn(async move {
                    let (_, c) =
                        crate::transport::http::accept_until(&listener, max, p, stop).await;
                    drain(c).await;
                })
            }
            ModelSide::None => tokio::spawn(async move {
                drop(listener);
                let _ = stop.await;
            }),
        }
    };
    let joined = Arc::new(crate::record::join::Joined::default());
    let joins = match &tape {
        Some(rec) => {
            let l = match tokio::net::UnixListener::bind(&socket) {
                Ok(l) => l,
                Err(e) => {
                    put_back();
                    return Err(io_err(format!("listening on {}", socket.display()))(e));
                }
            };
            Some(tokio::spawn(crate::record::join::serve(
                l,
                rec.clone(),
                joined.clone(),
            )))
        }
        None => None,
    };

    // The agent.
    let mut cmd = tokio::process::Command::new(&prepared.argv[0]);
    cmd.args(&prepared.argv[1..]);
    for (k, v) in &prepared.env {
        cmd.env(k, v);
    }
    let spawned = cmd.spawn();
    let outcome = match spawned {
        Ok(mut child) => {
            let (code, lost) = wait_agent(&mut child, &mut signals).await;
            if let Some(said) = &lost {
                crate::diag!("{said}");
            }
            Ok((code, lost.is_some()))
        }
        Err(cause) => Err(RunError::Spawn {
            command: crate::transport::stdio::shell_words(&cfg.command),
            cause,
        }),
    };

    // The agent is gone: its servers get their grace period, the model side stops.
    for f in &prepared.in_place {
        match f.restore(&cfg.journal) {
            Ok(()) => restored.push(f.path.clone()),
            Err(e) if f.created => crate::diag!(
                "mcptape: WARNING: could not remove {}, made for the run (and {}): {e}",
                f.path.display(),
                f.backup.display()
            ),
            Err(e) => crate::diag!(
                "mcptape: WARNING: could not put {} back (the original is {}): {e}",
                f.path.display(),
                f.backup.display()
            ),
        }
    }
    let _ = stop_all.send(true);
    let _ = serving.await;
    for t in http_tasks {
        let _ = t.await;
    }
    if let Some(j) = joins {
        // Joined recorders end when their servers do (the agent closed their stdin): they get
        // their grace period (5 s) and a second more to say so, then the socket closes.
        let _ = tokio::time::timeout(Duration::from_secs(6), joined.all_gone()).await;
        j.abort();
    }
    // What Claude Code wrote in its borrowed folder goes back before the folder goes.
    let given_back = prepared
        .borrowed
        .as_ref()
        .map(|b| (b.real.state.clone(), b.give_back()));
    let _ = std::fs::remove_dir_all(&stable);
    // The tape is closed whatever happened to the agent (one that could not start too).
    let reason = match &outcome {
        Ok((_, true)) => "the agent ended, how could not be learned".to_string(),
        Ok((code, false)) => format!("the agent exited ({code})"),
        Err(e) => format!("{e}"),
    };
    let (end, (model_calls, setup_calls)) = match (&tape, &model) {
        (Some(rec), ModelSide::Proxy(p)) => {
            let closed = rec.close(None, reason).map_err(|cause| RecordError::Tape {
                path: cfg.tape.clone(),
                cause,
            })?;
            (Some(closed.end), (p.calls(), p.setup_calls()))
        }
        _ => (None, (0, 0)),
    };
    let (agent_exit, agent_end_lost) = outcome?;
    let model = match &model {
        ModelSide::Player(p) => Some(p.report()),
        _ => None,
    };
    Ok(RunOutcome {
        agent_exit,
        agent_end_lost,
        agent,
        servers: prepared.servers,
        end,
        model_calls,
        setup_calls,
        model,
        restored,
        given_back,
    })
}

/// Waits for the agent, forwarding each signal received on `signals` to it. The exit code
/// `run` passes on: the agent's own (128+N for a signal N); when waiting for it failed, 70
/// and the line that says so (said by the caller).
async fn wait_agent(
    child: &mut tokio::process::Child,
    signals: &mut mpsc::UnboundedReceiver<i32>,
) -> (i32, Option<String>) {
    let pid = child.id();
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            Some(sig) = signals.recv() => {
                if let Some(pid) = pid {
                    crate::transport::stdio::signal(pid, sig);
                }
            }
        }
    };
    match status {
        Ok(st) => (
            crate::transport::stdio::exit_code(&st).unwrap_or(crate::exit::SOFTWARE),
            None,
        ),
        Err(e) => (
            crate::exit::SOFTWARE,
            Some(crate::transport::stdio::lost_end(
                "the agent",
                pid.unwrap_or_default(),
                &e,
                "exit code 70 instead of the agent's",
            )),
        ),
    }
}

/// Serves each HTTP MCP server of the agent's config on its listener until the agent exits:
/// the `record --url` proxy taping under the server's name, or the tape's player for it.
fn serve_http_servers<F, S>(
    cfg: &RunConfig,
    servers: Vec<(String, String, std::net::TcpListener)>,
    tape: Option<&Recorder>,
    stop: &F,
) -> Result<Vec<tokio::task::JoinHandle<()>>, RunError>
where
    F: Fn() -> S,
    S: std::future::Future<Output = String> + Send + 'static,
{
    let mut tasks = Vec::new();
    for (name, url, l) in servers {
        l.set_nonblocking(true)
            .map_err(io_err(format!("listening for the MCP server {name}")))?;
        let local = l
            .local_addr()
            .map_err(io_err("reading a listener's address"))?;
        let listener = tokio::net::TcpListener::from_std(l)
            .map_err(io_err(format!("listening for the MCP server {name}")))?;
        let stop = stop();
        match tape {
            Some(rec) => {
                let upstream = crate::record::http::checked_upstream(&url)?;
                let connector = crate::transport::upstream::connector_to(
                    upstream.uri(),
                    cfg.upstream_ca.as_deref(),
                )
                .map_err(RecordError::from)?;
                let rec = rec.server(&name);
                rec.declare(ServerDecl::http(
                    &name,
                    crate::record::http::without_password(&url),
                ));
                let proxy = crate::record::http::HttpProxy::new(
                    rec,
                    &upstream,
                    connector,
                    crate::wire::DEFAULT_MAX_MESSAGE,
                    local,
                );
                tasks.push(tokio::spawn(async move {
                    proxy.serve(&listener, Default::default(), stop).await;
                }));
            }
            None => {
                let index = crate::tape::TapeIndex::load(&cfg.tape, Some(&name))?;
                let mut opts = crate::play::ServeOptions::with_display(play_display(
                    &name,
                    cfg.write.redactor.as_ref(),
                    cfg.marker_key.as_ref(),
                    index.header.marker_key.as_deref(),
                ));
                opts.marker_key_id = cfg.marker_key.as_ref().map(crate::redact::MarkerKey::id);
                tasks.push(tokio::spawn(async move {
                    crate::play::http::serve_http_on(
                        listener,
                        local,
                        index,
                        opts,
                        false,
                        stop,
                        |_| {},
                    )
                    .await;
                }));
            }
        }
    }
    Ok(tasks)
}

/// What an MCP server played from the tape quotes the agent's requests with in a miss's
/// explanation, and matches redacted values by: the run's redactor when it has one; else the
/// default rules, with the user's marker key (`MCPTAPE_REDACT_KEY`) when the tape's markers were
/// made with it, so requests made with different secrets are told apart, as `mcptape play`
/// does for the stdio servers (and, as it does, says so when the key is another: then redacted
/// values in requests to server `name` match as wildcards). Without it an explanation quoted a
/// secret the agent sent.
fn play_display(
    name: &str,
    run: Option<&Arc<crate::redact::Redactor>>,
    key: Option<&crate::redact::MarkerKey>,
    tape_key_id: Option<&str>,
) -> Option<Arc<crate::redact::Redactor>> {
    if let Some(r) = run {
        return Some(r.clone());
    }
    let mut rules = crate::redact::RedactConfig::defaults();
    rules.marker_key = crate::redact::MarkerKey::for_tape(
        key.cloned(),
        tape_key_id,
        "mcptape run",
        &format!("in requests to the MCP server {name} "),
    );
    // The default rules always compile (their own unit tests say so); no user rule is here.
    crate::redact::Redactor::new(&rules).ok().map(Arc::new)
}

/// The folder an agent's home is copied to for runs of `tape`: the same path every time (see
/// [`agent::Plan::stable`]), private to this user.
fn stable_dir(tape: &std::path::Path) -> Result<PathBuf, RunError> {
    use sha2::Digest as _;
    let abs = std::path::absolute(tape).map_err(io_err("resolving the tape's path"))?;
    let hash = sha2::Sha256::digest(abs.as_os_str().as_encoded_bytes());
    let tag: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    Ok(std::env::temp_dir().join(format!("mcptape-run-{uid}-{tag}")))
}

async fn drain(mut connections: tokio::task::JoinSet<()>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent that exits 3.
    fn agent_exiting_3() -> tokio::process::Child {
        tokio::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .expect("sh starts")
    }

    #[tokio::test]
    async fn an_agent_that_was_waited_for_passes_on_its_exit_code() {
        let (_tx, mut signals) = mpsc::unbounded_channel();
        let mut child = agent_exiting_3();
        assert_eq!(wait_agent(&mut child, &mut signals).await, (3, None));
    }

    /// Waiting for the agent fails when something else reaped it (the kernel did, with
    /// SIGCHLD ignored, before `main` put it back to its default): `run` exited 70 and said
    /// nothing. Reaped here behind the `Child`'s back, `wait` fails as it would (ECHILD).
    #[tokio::test]
    async fn an_agent_whose_end_cannot_be_learned_exits_70_saying_so() {
        let (_tx, mut signals) = mpsc::unbounded_channel();
        let mut child = agent_exiting_3();
        let pid = child.id().expect("running");
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, which nothing else waits for yet.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(reaped, pid as libc::pid_t);
        let (code, said) = wait_agent(&mut child, &mut signals).await;
        assert_eq!(code, crate::exit::SOFTWARE);
        assert_eq!(
            said.as_deref(),
            Some(format!(
                "mcptape: internal error: could not learn how the agent (pid {pid}) ended: No child processes (os error 10); exit code 70 instead of the agent's"
            ).as_str())
        );
    }

    #[test]
    fn a_server_played_in_a_run_quotes_redacted_and_uses_the_marker_key_only_when_it_is_the_tapes()
    {
        let key = crate::redact::MarkerKey::from_secret(b"a marker key of sixteen bytes or more")
            .expect("a key");
        let id = key.id();
        let secret = r#"{"token":"ghp_Q7wE3rT9yU1iO5pA2sD8fG4hJ6kL0zXcV1bN"}"#;
        let quoted = |d: &crate::redact::Redactor| {
            String::from_utf8(d.redact_json(secret.as_bytes()).expect("redacted").0).unwrap()
        };
        // The tape's key: markers made with it, as the tape's were.
        let keyed = play_display("W", None, Some(&key), Some(&id)).expect("a redactor");
        assert_eq!(keyed.marker_key_id(), Some(id.as_str()));
        assert!(!quoted(&keyed).contains("ghp_"), "{}", quoted(&keyed));
        // Another tape's key, or none: the default rules alone (no secret quoted either).
        for tape in [Some("0badc0de"), None] {
            let plain = play_display("W", None, Some(&key), tape).expect("a redactor");
            assert_eq!(plain.marker_key_id(), None, "{tape:?}");
            assert!(!quoted(&plain).contains("ghp_"));
        }
        // A recording run's own redactor is used as it is.
        let own = Arc::new(
            crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap(),
        );
        assert!(Arc::ptr_eq(
            &play_display("W", Some(&own), Some(&key), Some(&id)).unwrap(),
            &own
        ));
    }
}
