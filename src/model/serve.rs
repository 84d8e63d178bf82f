//! `mcptape model-proxy`: the proxy (record) or the player (playback) on a loopback listener
//! until the caller's stop future completes.

use super::player::{ModelPlayer, PlaybackReport};
use super::proxy::ModelProxy;
use crate::record::{RecordError, RecordOutcome, Recorder};
use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The label model calls are taped under unless told otherwise.
pub const DEFAULT_LABEL: &str = "model";

/// What the model proxy needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelProxyConfig {
    /// Where the tape goes (record) or comes from (playback).
    pub tape: PathBuf,
    /// The model API's base URL (`https://api.anthropic.com`); a path prefix is kept.
    pub upstream: String,
    /// Where to listen (loopback, any free port, unless told otherwise).
    pub listen: SocketAddr,
    /// The label on the tape.
    pub label: String,
    /// How the tape is written.
    pub write: WriteOptions,
    /// The CA certificates (PEM) for an `https://` upstream, instead of the system's roots.
    pub upstream_ca: Option<PathBuf>,
    /// Largest request or answer body, in bytes.
    pub max_message: usize,
    /// What the listener allows its connections.
    pub limits: crate::transport::http::Limits,
    /// Playback: the user's marker key (`$MCPTAPE_REDACT_KEY`); used when the tape's markers
    /// were made with it.
    pub marker_key: Option<crate::redact::MarkerKey>,
}

impl ModelProxyConfig {
    /// The defaults (any free loopback port, label `model`, 64 MiB bodies), the tape written
    /// with `write`.
    pub fn new(tape: PathBuf, upstream: String, write: WriteOptions) -> ModelProxyConfig {
        ModelProxyConfig {
            tape,
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            label: DEFAULT_LABEL.into(),
            write,
            upstream_ca: None,
            max_message: crate::wire::DEFAULT_MAX_MESSAGE,
            limits: Default::default(),
            marker_key: None,
        }
    }
}

/// The upstream base URL, checked: `http://` or `https://`, with a host.
pub fn upstream_uri(url: &str) -> Result<hyper::Uri, RecordError> {
    let bad = |why: &str| RecordError::Upstream {
        url: url.to_string(),
        why: why.to_string(),
    };
    let uri: hyper::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(bad("the URL must start with http:// or https://")),
    }
    if uri.authority().is_none() {
        return Err(bad("no host"));
    }
    crate::transport::check_port(&uri).map_err(|why| bad(&why))?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad(
            "credentials in the URL: give the API key the way the client sends it",
        ));
    }
    Ok(uri)
}

/// A new tape at `path` for model calls to `upstream`, labelled `label`.
pub(crate) fn model_tape(
    path: &Path,
    write: &WriteOptions,
    label: &str,
    upstream: &str,
) -> Result<Recorder, RecordError> {
    let tape_err = |cause| RecordError::Tape {
        path: path.to_path_buf(),
        cause,
    };
    let mut writer = TapeWriter::create(path, write.clone()).map_err(tape_err)?;
    if let Some(r) = &write.redactor {
        // A model request is prose: it needs the text rules, compiled while the client starts
        // (see `compile_in_background`).
        r.compile_in_background();
    }
    writer
        .declare_server(ServerDecl::model(label, upstream.to_string()))
        .map_err(tape_err)?;
    Ok(Recorder::new(writer, label))
}

/// What `record_model` taped, beside the tape's closing line (which counts lines, not calls).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelCalls {
    /// Model calls (their requests; a retry is a call of its own).
    pub calls: u64,
    /// Code Assist's setup calls (Gemini CLI signed in with Google), taped beside them.
    pub setup: u64,
}

/// Records model calls until `shutdown` completes; `on_ready` gets the proxy's base URL.
pub async fn record_model(
    cfg: &ModelProxyConfig,
    shutdown: impl Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> Result<(RecordOutcome, ModelCalls), RecordError> {
    let upstream = upstream_uri(&cfg.upstream)?;
    let connector =
        crate::transport::upstream::connector_to(&upstream, cfg.upstream_ca.as_deref())?;
    let (listener, local) = crate::transport::http::bind(cfg.listen)
        .await
        .map_err(|cause| RecordError::Listen {
            addr: cfg.listen,
            cause,
        })?;
    let tape = model_tape(&cfg.tape, &cfg.write, &cfg.label, &cfg.upstream)?;
    let proxy = Arc::new(ModelProxy::new(
        tape.clone(),
        upstream,
        connector,
        cfg.max_message,
    ));
    on_ready(&format!("http://{local}"));
    let (why, connections) =
        crate::transport::http::accept_until(&listener, cfg.limits, proxy.clone(), shutdown).await;
    // Streams still open get a moment to finish onto the tape.
    drain(connections).await;
    let closed = tape.close(None, why).map_err(|cause| RecordError::Tape {
        path: cfg.tape.clone(),
        cause,
    })?;
    let calls = ModelCalls {
        calls: proxy.calls(),
        setup: proxy.setup_calls(),
    };
    Ok((RecordOutcome::new(closed, 0), calls))
}

/// Serves the model calls on `cfg.tape` until `shutdown` completes, with no upstream.
pub async fn play_model(
    cfg: &ModelProxyConfig,
    lenient: bool,
    shutdown: impl Future<Output = String>,
    on_ready: impl FnOnce(&str),
) -> Result<PlaybackReport, PlayModelError> {
    let calls = super::calls::load(&cfg.tape, Some(&cfg.label))?;
    if calls.is_empty() {
        return Err(PlayModelError::NoCalls {
            tape: cfg.tape.clone(),
            label: cfg.label.clone(),
        });
    }
    let (listener, local) = crate::transport::http::bind(cfg.listen)
        .await
        .map_err(|cause| PlayModelError::Listen {
            addr: cfg.listen,
            cause,
        })?;
    let tape_key_id = crate::tape::TapeReader::open(&cfg.tape)?
        .header()
        .marker_key
        .clone();
    let player = Arc::new(
        ModelPlayer::new(calls, lenient, cfg.max_message)
            .with_marker_key(tape_key_id, cfg.marker_key.clone()),
    );
    on_ready(&format!("http://{local}"));
    let (_, connections) =
        crate::transport::http::accept_until(&listener, cfg.limits, player.clone(), shutdown).await;
    drain(connections).await;
    Ok(player.report())
}

/// Gives open connections a second to finish, then drops them.
async fn drain(mut connections: tokio::task::JoinSet<()>) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// Why playback of model calls could not start.
#[derive(Debug, thiserror::Error)]
pub enum PlayModelError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] crate::tape::TapeError),
    /// The tape holds no model calls under the label.
    #[error("{}: no model calls labelled {label:?} on this tape", tape.display())]
    NoCalls {
        /// The tape.
        tape: PathBuf,
        /// The label looked for.
        label: String,
    },
    /// The listening socket could not be opened.
    #[error("could not listen on {addr}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for PlayModelError {
    fn exit_code(&self) -> i32 {
        match self {
            PlayModelError::Tape(e) => crate::exit::Coded::exit_code(e),
            PlayModelError::NoCalls { .. } => crate::exit::DATA_ERR,
            PlayModelError::Listen { .. } => crate::exit::UNAVAILABLE,
        }
    }
}
