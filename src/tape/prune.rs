//! `mcptape prune`: a tape without some of its exchanges. Each dropped exchange takes its lines
//! with it — the request, its answer, what the server sent while it was open (notifications,
//! server requests and the client's answers to them), the client's cancellation of it, and over
//! HTTP the events of its POST (a refusal, an SSE priming) — and nothing else: messages tied to
//! no exchange stay, and so does the handshake (`initialize`, `server/discover`), whatever the
//! list says. The rest is written anew with a fresh hash chain, `seq` kept as recorded (a pruned
//! tape has gaps in it), the closing line's counts lowered to match; the new tape replaces the
//! old one as a re-recording does (see `place.rs`), the original kept as `TAPE.bak`.

use super::format::OwnedLine;
use super::reader::{Chain, Entry, TapeError, TapeReader};
use super::{chain, place, TapeIndex};
use crate::wire::{Dir, Kind};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write as _;
use std::path::PathBuf;

/// Methods whose exchanges are never pruned: without them a client cannot start a session.
pub const HANDSHAKE: &[&str] = &["initialize", "server/discover"];

/// Why a tape could not be pruned.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// The tape's hash chain breaks: re-chaining would hide the edit (exit 65).
    #[error("{}: the hash chain breaks at line {line}; prune would re-chain an edited tape (`mcptape verify` tells more)", path.display())]
    Broken {
        /// The tape.
        path: PathBuf,
        /// Where the chain breaks.
        line: u64,
    },
    /// The pruned tape could not be written or put in place (exit 74).
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for PruneError {
    fn exit_code(&self) -> i32 {
        match self {
            PruneError::Tape(t) => crate::exit::Coded::exit_code(t),
            PruneError::Broken { .. } => crate::exit::DATA_ERR,
            PruneError::Write { .. } => crate::exit::IO_ERR,
        }
    }
}

/// What `prune` did.
#[derive(Debug, Clone)]
pub struct Pruned {
    /// Exchanges dropped.
    pub exchanges: usize,
    /// Lines dropped (messages and events).
    pub lines: usize,
    /// Exchanges asked to be dropped but kept: the handshake.
    pub handshake_kept: usize,
    /// Where the original is kept.
    pub backup: PathBuf,
}

/// The messages (indexes into `index.msgs`) each exchange owns: what goes with it when it is
/// dropped.
pub fn owned_msgs(index: &TapeIndex) -> Vec<Vec<usize>> {
    let mut owned: Vec<Vec<usize>> = index
        .exchanges
        .iter()
        .map(|ex| {
            let mut m = vec![ex.request];
            m.extend(ex.response);
            m.extend(ex.during.iter().copied());
            m.extend(ex.client_answers.values().copied());
            m
        })
        .collect();
    // A cancellation belongs to the latest request with its id in its scope before it (the
    // index pairs it the same way).
    let mut latest: HashMap<(Option<u32>, String), usize> = HashMap::new();
    let by_request: HashMap<usize, usize> = index
        .exchanges
        .iter()
        .enumerate()
        .map(|(i, ex)| (ex.request, i))
        .collect();
    for (i, m) in index.msgs.iter().enumerate() {
        let scope = m.http.as_ref().and_then(|h| h.session);
        if let (Some(&ex), Some(id)) = (by_request.get(&i), &m.id) {
            latest.insert((scope, id.clone()), ex);
            continue;
        }
        if m.dir != Dir::C2S || m.method.as_deref() != Some("notifications/cancelled") {
            continue;
        }
        let target = index
            .read_bytes(m)
            .ok()
            .and_then(|b| crate::wire::params::params_of(&b))
            .and_then(|p| p.get("requestId").map(crate::wire::canonical::canonical));
        if let Some(&ex) = target.and_then(|id| latest.get(&(scope, id))) {
            owned[ex].push(i);
        }
    }
    for m in &mut owned {
        m.sort_unstable();
        m.dedup();
    }
    owned
}

/// An event line's fields that tie it to a POST.
#[derive(serde::Deserialize)]
struct EventProbe<'a> {
    #[serde(rename = "type", borrow)]
    ty: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    server: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    post: Option<u64>,
}

/// Drops the exchanges `doomed` (exchange numbers of `index`; the handshake's are kept) from the
/// tape `index` was loaded from, re-chained (and signed with `signing_key`), the original kept
/// as `TAPE.bak`.
pub fn prune(
    index: &TapeIndex,
    doomed: &BTreeSet<usize>,
    signing_key: Option<&[u8]>,
) -> Result<Pruned, PruneError> {
    let path = index.path.as_path();
    let handshake = |ex: usize| {
        let m = index.msgs[index.exchanges[ex].request].method.as_deref();
        m.is_some_and(|m| HANDSHAKE.contains(&m))
    };
    let dropped: Vec<usize> = doomed
        .iter()
        .copied()
        .filter(|&e| e < index.exchanges.len() && !handshake(e))
        .collect();
    let handshake_kept = doomed.len() - dropped.len();
    let owned = owned_msgs(index);
    let lines: HashSet<u64> = dropped
        .iter()
        .flat_map(|&e| owned[e].iter().map(|&m| index.msgs[m].line))
        .collect();
    let posts: HashSet<u64> = dropped
        .iter()
        .filter_map(|&e| {
            let req = &index.msgs[index.exchanges[e].request];
            req.http.as_ref().and_then(|h| h.post)
        })
        .collect();
    let answered = dropped
        .iter()
        .filter(|&&e| index.exchanges[e].response.is_some())
        .count() as u64;

    let (file, beside) = place::open(path).map_err(|cause| PruneError::Write {
        path: path.to_path_buf(),
        cause,
    })?;
    let Some(beside) = beside else {
        // `place::open` writes in place only where no tape is: the tape was just read.
        return Err(PruneError::Write {
            path: path.to_path_buf(),
            cause: std::io::Error::other("the tape is gone or empty"),
        });
    };
    let staging = beside.staging().to_path_buf();
    let werr = |cause| PruneError::Write {
        path: staging.clone(),
        cause,
    };
    let mut out = std::io::BufWriter::new(file);
    let mut r = TapeReader::open(path)?;
    let mut header = r.header().clone();
    header.minor = header.minor.max(super::format::MINOR);
    let first = serde_json::to_vec(&OwnedLine::Header(&header)).expect("tape records serialize");
    let mut head = chain::start(&first);
    out.write_all(&first).map_err(werr)?;
    out.write_all(b"\n").map_err(werr)?;
    let (mut gone, mut c2s, mut s2c, mut raw) = (0usize, 0u64, 0u64, 0u64);
    while let Some(item) = r.next_item()? {
        let stored = item.stored();
        let keep = match &item.entry {
            Entry::Msg(m) if lines.contains(&item.line) && m.server == index.server => {
                match m.dir {
                    Dir::C2S => c2s += 1,
                    Dir::S2C => s2c += 1,
                }
                if matches!(m.kind, Kind::NotJson | Kind::Invalid | Kind::Oversize) {
                    raw += 1;
                }
                false
            }
            Entry::Unknown => !serde_json::from_slice::<EventProbe<'_>>(stored).is_ok_and(|e| {
                e.ty == "event"
                    && e.server.as_deref() == Some(index.server.as_str())
                    && e.post.is_some_and(|p| posts.contains(&p))
            }),
            _ => true,
        };
        if !keep {
            gone += 1;
            continue;
        }
        let line: Vec<u8> = match &item.entry {
            Entry::End(e) => {
                let mut e = e.clone();
                e.messages = e.messages.saturating_sub(c2s + s2c);
                e.c2s = e.c2s.saturating_sub(c2s);
                e.s2c = e.s2c.saturating_sub(s2c);
                e.raw = e.raw.saturating_sub(raw);
                e.exchanges = e.exchanges.saturating_sub(answered);
                e.head = Some(head.clone());
                e.sig = None;
                e.sig = signing_key.map(|k| chain::sign(k, &head, &e));
                serde_json::to_vec(&OwnedLine::End(&e)).expect("tape records serialize")
            }
            _ => chain::split_h(stored)
                .map(|(w, _)| w)
                .unwrap_or_else(|| stored.to_vec()),
        };
        head = chain::link(&head, &line);
        out.write_all(&line[..line.len() - 1]).map_err(werr)?;
        out.write_all(format!(",\"h\":\"{head}\"}}\n").as_bytes())
            .map_err(werr)?;
    }
    if let Chain::Broken(line) = r.chain() {
        let _ = std::fs::remove_file(&staging);
        return Err(PruneError::Broken {
            path: path.to_path_buf(),
            line: *line,
        });
    }
    let file = out.into_inner().map_err(|e| werr(e.into_error()))?;
    file.sync_data().map_err(werr)?;
    drop(file);
    match beside.settle(true) {
        place::Placed::Replaced { backup } => Ok(Pruned {
            exchanges: dropped.len(),
            lines: gone,
            handshake_kept,
            backup,
        }),
        other => Err(PruneError::Write {
            path: path.to_path_buf(),
            cause: std::io::Error::other(match other {
                place::Placed::NotReplaced { why, .. } => why,
                _ => "the pruned tape was not put in place".to_string(),
            }),
        }),
    }
}
