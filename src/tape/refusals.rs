//! How the recorded server refused POSTs for their session: one that named no session (to a
//! server whose sessions need one) and one that named a session it did not have. Play over
//! HTTP refuses a live POST of either case as the server did, before matching it, and keeps
//! the refused exchanges out of its sessions' matching; check does not grade them against a
//! live answer in its session. Their answers say how the server treats a session, not what it
//! answers the request.

use crate::tape::TapeIndex;
use std::collections::HashSet;

/// What the tape says about POSTs refused for their session.
#[derive(Debug, Default)]
pub(crate) struct SessionRefusals {
    /// The server gave a session id at `initialize`, and answered no other request POSTed
    /// without one: a POST naming no session (other than an `initialize`) is refused.
    pub needs_session: bool,
    /// The exchanges refused for naming no session (numbers in `index.exchanges`); the first
    /// says how such a POST is answered.
    pub missing: Vec<usize>,
    /// The exchanges refused for naming a session the server never gave.
    pub unknown: Vec<usize>,
}

impl SessionRefusals {
    /// Every exchange refused for its session: no session's matching takes one.
    pub(crate) fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.missing.iter().chain(&self.unknown).copied()
    }

    /// Read from `index`; nothing for a tape recorded over stdio.
    pub(crate) fn of(index: &TapeIndex) -> SessionRefusals {
        let method = |ex: &crate::tape::index::Exchange| index.msgs[ex.request].method.as_deref();
        let opening = |ex: &crate::tape::index::Exchange| method(ex) == Some("initialize");
        // For `initialize`, the exchange's session is the one its answer opened.
        let given: HashSet<u32> = index
            .exchanges
            .iter()
            .filter(|ex| opening(ex))
            .filter_map(|ex| ex.session)
            .collect();
        let mut out = SessionRefusals::default();
        if given.is_empty() {
            // A server that gives no sessions refuses a POST for another reason.
            return out;
        }
        let mut served_without = false;
        for (n, ex) in index.exchanges.iter().enumerate() {
            let Some(http) = index.msgs[ex.request].http.as_deref() else {
                continue;
            };
            if opening(ex) {
                continue;
            }
            match (http.session, refused(index, ex)) {
                (None, true) => out.missing.push(n),
                (Some(s), true) if !given.contains(&s) => out.unknown.push(n),
                (None, false) => served_without |= ex.response.is_some() || ex.refusal.is_some(),
                _ => {}
            }
        }
        out.needs_session = !served_without;
        out
    }
}

/// Whether the server refused the exchange's POST without reading its request: an HTTP error
/// status, and no JSON-RPC answer carrying the request's id (`http-error`, or an error of
/// another id: `null`, none, `"server-error"`).
fn refused(index: &TapeIndex, ex: &crate::tape::index::Exchange) -> bool {
    let failed = |status: u16| !(200..300).contains(&status);
    if let Some(r) = &ex.refusal {
        return failed(r.status);
    }
    let Some(answer) = ex.response.map(|r| &index.msgs[r]) else {
        return false;
    };
    let status = answer.http.as_deref().and_then(|h| h.status);
    let request_id = index.msgs[ex.request].id.as_deref();
    !super::open_ids::same_id(answer.id.as_deref(), request_id) && status.is_some_and(failed)
}
