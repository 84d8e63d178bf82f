//! The live answers compared with the baseline as they arrive: each answer is redacted as the
//! observed tape would store it, compared with the recorded one and dropped, so a check needs
//! no second tape to read back (`--update` still writes one, but it is not read to compare).
//! Each live answer belongs to the baseline exchange whose request the driver sent for it: the
//! pairing `compare_tapes` finds by content is, for a check, the pairing by what was sent.

use crate::compare::server_messages::MessageCount;
use crate::compare::tapes::{
    answer_bytes, body_of, compare_answers, exchange_ref, known_tools, latency, listed_tools,
    one_marker_key, surface_changes, tools_list_exchanges, TapeComparison,
};
use crate::compare::{ExchangeComparison, Normalizer, Outcome};
use crate::redact::Redactor;
use crate::tape::TapeIndex;
use serde_json::Value;
use std::sync::Arc;

/// What the live side did with one baseline exchange.
enum Seen {
    /// Its request was never sent (the server had gone, or the request could not be read).
    NotSent,
    /// Sent; no answer (yet).
    Sent,
    /// Answered: the comparison with the recorded answer, and the live latency.
    Answered(crate::compare::tapes::AnswerComparison, u64),
}

/// Collects the comparison of each exchange as the driver sees its live answer.
pub(crate) struct Observer {
    base: Arc<TapeIndex>,
    norm: Normalizer,
    /// The observed tape's redactor: the live answer is compared as it would have been taped.
    redactor: Option<Arc<Redactor>>,
    /// The baseline's markers and the live answers' (by `redactor`) were made with one marker
    /// key: their hashes tell secrets apart.
    keyed: bool,
    seen: Vec<Seen>,
    /// The live `tools/list` results: (baseline exchange, `result`).
    tools: Vec<(usize, Value)>,
    /// How many live `tools/list` answers came (results or errors).
    tools_answered: usize,
    /// The server's requests and notifications whose number differs live, by method.
    server_messages: Vec<MessageCount>,
}

impl Observer {
    pub(crate) fn new(
        base: Arc<TapeIndex>,
        norm: Normalizer,
        redactor: Option<Arc<Redactor>>,
    ) -> Observer {
        let seen = (0..base.exchanges.len()).map(|_| Seen::NotSent).collect();
        let keyed = one_marker_key(
            base.header.marker_key.as_deref(),
            redactor.as_deref().and_then(Redactor::marker_key_id),
        );
        Observer {
            base,
            norm,
            redactor,
            keyed,
            seen,
            tools: Vec::new(),
            tools_answered: 0,
            server_messages: Vec::new(),
        }
    }

    /// The request of exchange `ex` went to the live server.
    pub(crate) fn sent(&mut self, ex: usize) {
        if let Some(s @ Seen::NotSent) = self.seen.get_mut(ex) {
            *s = Seen::Sent;
        }
    }

    /// The live answer to exchange `ex` (its first: a second one is not an answer the client
    /// would take), `latency_us` after the request was sent.
    pub(crate) fn answer(&mut self, ex: usize, bytes: &[u8], latency_us: u64) {
        if !matches!(self.seen.get(ex), Some(Seen::Sent)) {
            return;
        }
        let redacted = self.redactor.as_ref().and_then(|r| r.redact_json(bytes));
        let y = redacted.as_ref().map_or(bytes, |(r, _)| r.as_slice());
        let x = answer_bytes(&self.base, ex);
        let c = compare_answers(
            &self.base,
            ex,
            x.as_deref(),
            Some(y),
            &self.norm,
            self.keyed,
        );
        let req = &self.base.msgs[self.base.exchanges[ex].request];
        if req.method.as_deref() == Some("tools/list") {
            self.tools_answered += 1;
            if let Some(result) = body_of(y).and_then(|mut b| b.get_mut("result").map(Value::take))
            {
                self.tools.push((ex, result));
            }
        }
        self.seen[ex] = Seen::Answered(c, latency_us);
    }

    /// The server's requests and notifications whose number differs from the recording's, by
    /// method, as the driver counted them at the end of the run.
    pub(crate) fn server_messages(&mut self, counts: Vec<MessageCount>) {
        self.server_messages = counts;
    }

    /// Every exchange of the baseline with how it fared live, as `compare_tapes` of the
    /// baseline and the observed tape gives it.
    pub(crate) fn finish(self) -> TapeComparison {
        let base = &*self.base;
        let exchanges = self
            .seen
            .into_iter()
            .enumerate()
            .map(|(i, seen)| {
                let (outcome, changes, other_latency_us) = match seen {
                    Seen::NotSent => (Outcome::Absent, Vec::new(), None),
                    Seen::Sent => {
                        let x = answer_bytes(base, i);
                        let c =
                            compare_answers(base, i, x.as_deref(), None, &self.norm, self.keyed);
                        (c.outcome, c.changes, None)
                    }
                    Seen::Answered(c, us) => (c.outcome, c.changes, c.answered.then_some(us)),
                };
                ExchangeComparison {
                    exchange: exchange_ref(base, i),
                    outcome,
                    other_line: None,
                    changes,
                    latency_us: latency(base, i),
                    other_latency_us,
                }
            })
            .collect();
        let mut tools = self.tools;
        tools.sort_by_key(|(ex, _)| *ex);
        let results: Vec<Value> = tools.into_iter().map(|(_, r)| r).collect();
        // Every recorded tools/list answered live (in time or late), or the live list is not
        // known: a tools/list that timed out removed no tool.
        let all_answered = self.tools_answered == tools_list_exchanges(base).count();
        let live_tools = known_tools(&results, all_answered);
        TapeComparison {
            exchanges,
            only_in_other: Vec::new(),
            tool_surface: surface_changes(listed_tools(base).as_ref(), live_tools.as_ref()),
            server_messages: self.server_messages,
        }
    }
}
