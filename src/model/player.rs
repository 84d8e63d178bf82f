//! The model proxy in playback: answers model requests from the tape, with no upstream at all.
//! A request is matched by content (its body with the volatile fields left out, markers
//! standing for any value), the earliest unconsumed call first, so repeated identical requests
//! get their recorded answers in order. With the marker key the tape's markers were made with
//! (`$MCPTAPE_REDACT_KEY`), of the recorded calls a request fits, the one whose markers were
//! made from the request's very values is served. A miss is answered in the provider's own
//! error format, naming the nearest recorded call and how it differs.

use super::calls::Call;
use super::provider::{self, Provider};
use super::volatile::canonical;
use crate::redact::MarkerKey;
use crate::transport::http::{collect, full, CuttableBody, Handler, RespBody};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// How playback went, for the summary and the exit code.
#[derive(Debug, Default, Clone)]
pub struct PlaybackReport {
    /// Model calls answered from the tape (Code Assist's setup calls not among them).
    pub served: u64,
    /// Code Assist's setup and bookkeeping calls answered from the tape (Gemini CLI signed in
    /// with Google: `loadCodeAssist`, `retrieveUserQuota`…), counted apart: they are not
    /// model calls, and how many an agent makes depends on timing.
    pub setup_served: u64,
    /// Requests served another call of the same endpoint (`--lenient`), with why.
    pub lenient: Vec<String>,
    /// Requests nothing on the tape answered, with the explanation each got.
    pub misses: Vec<String>,
    /// Recorded model calls never asked for (setup calls not counted: they are served by
    /// endpoint, as often as asked).
    pub unused: u64,
    /// Requests served among recorded calls that differ only in redacted values (made with
    /// other secrets, which the markers did not tell apart), by `METHOD endpoint`: how many
    /// each. The warning is said once a request shape; these count every request.
    pub ambiguous: Vec<(String, u64)>,
}

impl PlaybackReport {
    /// The summary's words for [`ambiguous`](Self::ambiguous), as `mcptape play` says them of
    /// MCP requests; `None` when there were none.
    pub fn ambiguity(&self) -> Option<String> {
        if self.ambiguous.is_empty() {
            return None;
        }
        let n: u64 = self.ambiguous.iter().map(|(_, times)| times).sum();
        let each: Vec<String> = self
            .ambiguous
            .iter()
            .map(|(what, times)| format!("{what}: {times}"))
            .collect();
        Some(format!(
            "{n} model request{} served among recorded calls that differ only in redacted values ({})",
            if n == 1 { "" } else { "s" },
            each.join(", ")
        ))
    }
}

struct Recorded {
    call: Call,
    canon: Option<Value>,
    /// One of Code Assist's setup calls ([`provider::is_code_assist_setup`]).
    setup: bool,
    /// The markers of its request, in order: equal for requests made with equal secrets.
    /// Empty for a request with none (most), which is all the matching looks at then.
    markers: Vec<String>,
    /// Its request as matching compares it with the markers' hashes kept, to check them with
    /// the marker key; only with the key, and only for a request with markers.
    keyed: Option<Value>,
}

/// Serves recorded model calls.
pub struct ModelPlayer {
    calls: Vec<Recorded>,
    lenient: bool,
    max_message: usize,
    /// The user's marker key, when the tape's markers were made with it.
    key: Option<MarkerKey>,
    /// The id of the key the tape's markers were made with (its header's), for warnings.
    tape_key_id: Option<String>,
    /// The id of the user's key, the tape's or not, for warnings.
    user_key_id: Option<String>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: Vec<bool>,
    report: PlaybackReport,
    /// A recorded call of each request shape whose ambiguity (several fitting, made with
    /// different secrets) was said: said once for each shape ([`ModelPlayer::same_shape`]),
    /// as `play` says it once for each recorded request's match key.
    warned: Vec<usize>,
}

/// How many of the recorded calls a request fits by wildcards are looked at, without the
/// marker key, to see whether they were made with different secrets (as `play` does).
const AMBIGUITY_READS: usize = 8;

impl ModelPlayer {
    /// A player of `calls`; with `lenient`, a miss is served the next unused call of its
    /// endpoint.
    pub fn new(calls: Vec<Call>, lenient: bool, max_message: usize) -> ModelPlayer {
        let n = calls.len();
        let calls = calls
            .into_iter()
            .map(|call| Recorded {
                canon: recorded_canonical(&call.request),
                setup: provider::is_code_assist_setup(&call.endpoint),
                markers: markers_of(&call.request),
                keyed: None,
                call,
            })
            .collect();
        ModelPlayer {
            calls,
            lenient,
            max_message,
            key: None,
            tape_key_id: None,
            user_key_id: None,
            state: Mutex::new(State {
                used: vec![false; n],
                ..State::default()
            }),
        }
    }

    /// The player with the tape's marker key id (its header's `marker_key`) and the user's
    /// key (`$MCPTAPE_REDACT_KEY`): when they are the same key, a request that fits several
    /// recorded calls is served the one recorded with its very values. A different key is
    /// said, and markers stay wildcards.
    pub fn with_marker_key(
        mut self,
        tape_key_id: Option<String>,
        key: Option<MarkerKey>,
    ) -> ModelPlayer {
        self.user_key_id = key.as_ref().map(MarkerKey::id);
        self.key =
            MarkerKey::for_tape(key, tape_key_id.as_deref(), "mcptape", "in model requests ");
        self.tape_key_id = tape_key_id;
        if self.key.is_some() {
            // Read once here: per request only the calls a request fits are checked.
            for r in &mut self.calls {
                if !r.markers.is_empty() {
                    r.keyed = canonical(&r.call.request);
                }
            }
        }
        self
    }

    /// The report so far (unused calls counted now).
    pub fn report(&self) -> PlaybackReport {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut r = st.report.clone();
        r.unused = (0..self.calls.len())
            .filter(|&i| !st.used[i] && !self.calls[i].setup)
            .count() as u64;
        r
    }

    /// The recorded call answering a request to `endpoint` with body `body`: the earliest
    /// unused one whose body matches (with the marker key, the earliest recorded with the
    /// request's values). Marks it used.
    fn take(&self, endpoint: &str, method: &str, body: &[u8]) -> Result<usize, String> {
        let live = canonical(body);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let same_endpoint = |r: &Recorded| r.call.endpoint == endpoint && r.call.method == method;
        let fits = |r: &Recorded| body_fits(r.canon.as_ref(), &r.call.request, live.as_ref(), body);
        let mut fitting = (0..self.calls.len())
            .filter(|&i| !st.used[i] && same_endpoint(&self.calls[i]) && fits(&self.calls[i]));
        if let Some(first) = fitting.next() {
            let i = if self.calls[first].markers.is_empty() {
                first
            } else {
                // With the key, every fitting call may be the one made with these values;
                // without it, a few tell whether they were made with different secrets.
                let more: Vec<usize> = match self.key {
                    Some(_) => fitting.collect(),
                    None => fitting.take(AMBIGUITY_READS - 1).collect(),
                };
                self.choose(&mut st, first, more, live.as_ref(), method, endpoint)
            };
            st.used[i] = true;
            self.count_served(&mut st, i);
            return Ok(i);
        }
        if let Some(i) = self.setup_again(endpoint, method, body, live.as_ref()) {
            st.used[i] = true;
            self.count_served(&mut st, i);
            return Ok(i);
        }
        let why = self.explain(&st.used, endpoint, method, live.as_ref());
        if self.lenient {
            if let Some(i) =
                (0..self.calls.len()).find(|&i| !st.used[i] && same_endpoint(&self.calls[i]))
            {
                st.used[i] = true;
                self.count_served(&mut st, i);
                st.report.lenient.push(format!(
                    "{why}\n  --lenient: served call {} (tape line {}) instead",
                    self.calls[i].call.n, self.calls[i].call.line
                ));
                return Ok(i);
            }
        }
        st.report.misses.push(why.clone());
        Err(why)
    }

    fn count_served(&self, st: &mut State, i: usize) {
        if self.calls[i].setup {
            st.report.setup_served += 1;
        } else {
            st.report.served += 1;
        }
    }

    /// Code Assist's setup and bookkeeping calls (Gemini CLI signed in with Google) asked
    /// again when every recorded one that fits was used, or with a body none fits: how many
    /// there are depends on timing (it asks its quota again as it goes) and some carry a
    /// timestamp (its metrics), so the latest recorded answer of the endpoint whose request
    /// fits is served again, else the latest of the endpoint. A call that got no answer (the
    /// upstream failed, or recording stopped while it was in flight) is served again only
    /// when the endpoint has no answered one: it would fail every repeat. `None` for any
    /// other endpoint, or one never recorded.
    fn setup_again(
        &self,
        endpoint: &str,
        method: &str,
        body: &[u8],
        live: Option<&Value>,
    ) -> Option<usize> {
        if !provider::is_code_assist_setup(endpoint) {
            return None;
        }
        let same: Vec<usize> = (0..self.calls.len())
            .filter(|&i| {
                self.calls[i].call.endpoint == endpoint && self.calls[i].call.method == method
            })
            .collect();
        let answered: Vec<usize> = same
            .iter()
            .copied()
            .filter(|&i| self.calls[i].call.status.is_some())
            .collect();
        let latest = |among: &[usize]| {
            among
                .iter()
                .rev()
                .copied()
                .find(|&i| {
                    let r = &self.calls[i];
                    body_fits(r.canon.as_ref(), &r.call.request, live, body)
                })
                .or_else(|| among.last().copied())
        };
        latest(&answered).or_else(|| latest(&same))
    }

    /// Of the unused recorded calls a request fits (`first`, then `more`, in recorded order;
    /// `first` has markers), the one to serve: with the marker key, the earliest whose markers
    /// were made from the request's values; else `first`, and when calls made with other
    /// secrets fit too, a warning that the answer may be another value's (once a request
    /// shape), and
    /// the request counted in the report.
    fn choose(
        &self,
        st: &mut State,
        first: usize,
        more: Vec<usize>,
        live: Option<&Value>,
        method: &str,
        endpoint: &str,
    ) -> usize {
        let fitting = || std::iter::once(first).chain(more.iter().copied());
        if let (Some(key), Some(live)) = (&self.key, live) {
            let hash = |t: &str| key.hash_of(t);
            let agrees = |i: usize| {
                self.calls[i]
                    .keyed
                    .as_ref()
                    .is_some_and(|rec| crate::wire::marker::keyed_agrees(rec, live, &hash))
            };
            if let Some(i) = fitting().find(|&i| agrees(i)) {
                return i;
            }
        }
        let mut secrets: Vec<&[String]> = Vec::new();
        for i in fitting().take(AMBIGUITY_READS) {
            let m = self.calls[i].markers.as_slice();
            if !secrets.contains(&m) {
                secrets.push(m);
            }
        }
        if secrets.len() > 1 {
            // Counted every time, for the summary; warned once a request shape (the next
            // request of it fits the calls left, `first` another call of the same shape).
            let what = format!("{method} {endpoint}");
            match st.report.ambiguous.iter_mut().find(|(w, _)| *w == what) {
                Some((_, times)) => *times += 1,
                None => st.report.ambiguous.push((what, 1)),
            }
            if !st.warned.iter().any(|&w| self.same_shape(w, first)) {
                st.warned.push(first);
                crate::diag!(
                    "{}",
                    self.ambiguous_warning(method, endpoint, first, secrets.len())
                );
            }
        }
        first
    }

    /// Said when a request fits recorded calls that differ only in redacted values, as `play`
    /// says it of MCP requests.
    fn ambiguous_warning(&self, method: &str, endpoint: &str, i: usize, views: usize) -> String {
        let why = MarkerKey::ambiguity_why(
            crate::redact::Replayer::ModelPlayback,
            self.key.is_some(),
            self.tape_key_id.as_deref(),
            self.user_key_id.as_deref(),
        );
        let r = &self.calls[i].call;
        format!(
            "mcptape: WARNING: model request {method} {endpoint} fits {views} recorded calls that differ only in redacted values; served call {} (tape line {}), the first unused. {why} (said once for this request shape; the summary counts every request it applied to)",
            r.n, r.line
        )
    }

    /// Whether recorded calls `a` and `b` are requests of one shape: the same method and
    /// endpoint, and bodies equal with every marker taken alike (what a request fitting one
    /// fits in the other), as `play`'s match key of a recorded request takes them.
    fn same_shape(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.calls[a], &self.calls[b]);
        a.call.method == b.call.method
            && a.call.endpoint == b.call.endpoint
            && match (&a.canon, &b.canon) {
                (Some(x), Some(y)) => x == y,
                (None, None) => a.call.request == b.call.request,
                _ => false,
            }
    }

    /// Why nothing matched: the nearest recorded call of the endpoint and its differences.
    fn explain(&self, used: &[bool], endpoint: &str, method: &str, live: Option<&Value>) -> String {
        let head =
            format!("mcptape: no recorded model call matches this request ({method} {endpoint})");
        let candidates: Vec<usize> = (0..self.calls.len())
            .filter(|&i| self.calls[i].call.endpoint == endpoint)
            .collect();
        if candidates.is_empty() {
            let mut have: Vec<String> =
                self.calls.iter().map(|r| r.call.endpoint.clone()).collect();
            have.dedup();
            return format!(
                "{head}: the tape has no call to this endpoint (it has: {})",
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            );
        }
        let Some(live) = live else {
            return format!("{head}: the request body is not JSON and matches no recorded body");
        };
        let diffs = |i: usize| {
            self.calls[i]
                .canon
                .as_ref()
                .map(|rec| crate::compare::diff_values::changes(rec, live, false))
                .unwrap_or_default()
        };
        // Unused calls first, then the fewest differences.
        let best = candidates
            .iter()
            .copied()
            .min_by_key(|&i| (used[i], diffs(i).len()))
            .expect("candidates is not empty");
        let changes = diffs(best);
        let state = if used[best] { "already used" } else { "unused" };
        let r = &self.calls[best].call;
        let mut s = format!(
            "{head}; nearest: call {} at tape line {} ({state}), {} difference{}",
            r.n,
            r.line,
            changes.len(),
            if changes.len() == 1 { "" } else { "s" }
        );
        if changes.is_empty() {
            s.push_str(" (identical: every recorded call like it was already used)");
        }
        for c in changes.iter().take(8) {
            let (rec, asked) = match (&c.recorded, &c.observed) {
                (Some(Value::String(a)), Some(Value::String(b))) => {
                    crate::wire::canonical::around_difference(a, b)
                }
                (r, o) => (
                    crate::wire::canonical::short(r.as_ref(), 120),
                    crate::wire::canonical::short(o.as_ref(), 120),
                ),
            };
            s.push_str(&format!("\n  {}: recorded {rec}, asked {asked}", c.path));
        }
        if changes.len() > 8 {
            s.push_str(&format!("\n  … and {} more", changes.len() - 8));
        }
        s
    }

    fn answer(&self, i: usize) -> Response<RespBody> {
        let call = &self.calls[i].call;
        let status = call
            .status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::BAD_GATEWAY);
        let content_type = call.content_type.clone().unwrap_or_default();
        if call.status.is_none() {
            // The upstream never answered when recording: the same failure again.
            let why = call
                .cut
                .clone()
                .unwrap_or_else(|| "no answer was recorded".into());
            return error(call.provider, StatusCode::BAD_GATEWAY, &why);
        }
        let mut resp = if content_type.starts_with("text/event-stream") {
            let (tx, rx) = mpsc::channel(call.events.len().max(1) + 1);
            for ev in &call.events {
                // The channel holds every event of the call: sending never waits.
                let _ = tx.try_send(Ok(Bytes::from(ev.to_wire())));
            }
            match &call.cut {
                Some(why) => {
                    let why = format!("cut as recorded: {why}");
                    tokio::spawn(async move {
                        crate::transport::http::cut_after_flush(&tx, why).await;
                    });
                }
                None => drop(tx),
            }
            Response::new(BodyExt::boxed(CuttableBody { rx }))
        } else {
            let body = call.body.clone().unwrap_or_default();
            let mut r = full(status, "application/json", body);
            r.headers_mut().remove(hyper::header::CONTENT_TYPE);
            r
        };
        *resp.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(&content_type) {
            if !content_type.is_empty() {
                resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
        }
        resp
    }
}

/// A taped request body as matching compares it: [`canonical`], each redaction marker a
/// wildcard (its hash left out).
pub(crate) fn recorded_canonical(taped: &[u8]) -> Option<Value> {
    let mut canon = canonical(taped);
    if let Some(c) = canon.as_mut() {
        crate::wire::marker::strip_marker_hashes(c);
    }
    canon
}

/// The markers in a taped request body, in order (none without one: a quick scan).
fn markers_of(taped: &[u8]) -> Vec<String> {
    if !crate::wire::marker::has_marker_in(taped) {
        return Vec::new();
    }
    crate::wire::marker::marker_re()
        .find_iter(&String::from_utf8_lossy(taped))
        .map(|m| m.as_str().to_string())
        .collect()
}

/// Whether a live request body (`live` its [`canonical`] form) is answered by a recorded one
/// (`recorded` its [`recorded_canonical`] form): JSON compared with markers standing for any
/// value, anything else byte for byte.
pub(crate) fn body_fits(
    recorded: Option<&Value>,
    recorded_body: &[u8],
    live: Option<&Value>,
    live_body: &[u8],
) -> bool {
    match (recorded, live) {
        (Some(rec), Some(live)) => crate::wire::marker::wildcard_eq(rec, live),
        (None, None) => recorded_body == live_body,
        _ => false,
    }
}

fn error(provider: Provider, status: StatusCode, message: &str) -> Response<RespBody> {
    let body = provider::error_body(provider, status.as_u16(), message);
    full(status, "application/json", body.to_string())
}

impl Handler for ModelPlayer {
    async fn handle(&self, req: Request<Incoming>) -> Response<RespBody> {
        let (parts, body) = req.into_parts();
        if parts.method == Method::HEAD {
            // A client's preconnect (Claude Code sends `HEAD /`): no content, nothing to match.
            return full(StatusCode::OK, "text/plain", Bytes::new());
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let route = provider::route(path);
        let body = match collect(body, self.max_message).await {
            Ok(b) => b,
            Err(why) => return error(route.provider, StatusCode::PAYLOAD_TOO_LARGE, &why),
        };
        // Matched decoded, as it was taped; one that does not decode was taped as it came.
        let body = match crate::transport::coding::decode(&parts.headers, &body, self.max_message) {
            Ok(Some(d)) => Bytes::from(d.body),
            _ => body,
        };
        match self.take(&route.endpoint, parts.method.as_str(), &body) {
            Ok(i) => self.answer(i),
            Err(why) => {
                crate::diag!("{why}");
                error(route.provider, StatusCode::BAD_REQUEST, &why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LOAD: &str = "/v1internal:loadCodeAssist";
    const QUOTA: &str = "/v1internal:retrieveUserQuota";
    const EXPERIMENTS: &str = "/v1internal:listExperiments";
    const METRICS: &str = "/v1internal:recordCodeAssistMetrics";

    /// Recorded call `n`: a POST to `endpoint` with `request`, answered 200 (`answered`) or
    /// never answered (the upstream failed, or recording stopped while it was in flight).
    fn call(n: u64, endpoint: &str, request: Value, answered: bool) -> Call {
        let gemini = !endpoint.starts_with('/');
        Call {
            n,
            line: n + 1,
            label: "model".into(),
            t_us: n,
            provider: if gemini {
                Provider::Gemini
            } else {
                Provider::Other
            },
            endpoint: endpoint.into(),
            model: None,
            method: "POST".into(),
            path: if gemini {
                format!("/v1internal:{endpoint}")
            } else {
                endpoint.into()
            },
            request: request.to_string().into_bytes(),
            status: answered.then_some(200),
            content_type: answered.then(|| "application/json".into()),
            body: answered.then(|| format!(r#"{{"call":{n}}}"#).into_bytes()),
            events: Vec::new(),
            cut: (!answered).then(|| "the client went away".into()),
            ttfb_us: None,
            total_us: None,
            summary: Value::Null,
            answer_line: None,
        }
    }

    /// The number of the recorded call answering each request, or `None` for a miss.
    fn served(p: &ModelPlayer, asked: &[(&str, Value)]) -> Vec<Option<u64>> {
        asked
            .iter()
            .map(|(endpoint, body)| {
                p.take(endpoint, "POST", body.to_string().as_bytes())
                    .ok()
                    .map(|i| p.calls[i].call.n)
            })
            .collect()
    }

    fn project(p: &str) -> Value {
        json!({"project": p})
    }

    /// Gemini CLI's setup as measured: loadCodeAssist, retrieveUserQuota three times,
    /// listExperiments, and a turn.
    fn measured() -> ModelPlayer {
        let turn =
            json!({"model": "gemini-2.5-flash", "project": "p", "request": {"contents": []}});
        ModelPlayer::new(
            vec![
                call(1, LOAD, json!({"metadata": {"pluginType": "GEMINI"}}), true),
                call(2, QUOTA, project("p"), true),
                call(3, EXPERIMENTS, project("p"), true),
                call(4, QUOTA, project("p"), true),
                call(5, "streamGenerateContent", turn, true),
                call(6, QUOTA, project("p"), true),
            ],
            false,
            1 << 20,
        )
    }

    #[test]
    fn setup_calls_are_served_in_recorded_order_first() {
        let p = measured();
        assert_eq!(
            served(
                &p,
                &[
                    (LOAD, json!({"metadata": {"pluginType": "GEMINI"}})),
                    (QUOTA, project("p")),
                    (QUOTA, project("p")),
                    (EXPERIMENTS, project("p")),
                    (QUOTA, project("p")),
                ]
            ),
            [Some(1), Some(2), Some(4), Some(3), Some(6)]
        );
        let r = p.report();
        assert_eq!((r.served, r.setup_served, r.misses.len()), (0, 5, 0));
        assert_eq!(r.unused, 1, "the turn, never asked");
    }

    #[test]
    fn a_setup_call_asked_more_often_than_recorded_gets_the_latest_answer_again() {
        let p = measured();
        let quota = || (QUOTA, project("p"));
        let got = served(&p, &[quota(), quota(), quota(), quota(), quota()]);
        assert_eq!(got, [Some(2), Some(4), Some(6), Some(6), Some(6)]);
        let load = || (LOAD, json!({"metadata": {"pluginType": "GEMINI"}}));
        assert_eq!(served(&p, &[load(), load()]), [Some(1), Some(1)]);
        let r = p.report();
        assert_eq!((r.served, r.setup_served, r.misses.len()), (0, 7, 0));
        assert_eq!(
            r.unused, 1,
            "setup calls never asked are not counted unused"
        );
    }

    #[test]
    fn a_model_call_is_never_served_again() {
        let p = measured();
        let turn =
            json!({"model": "gemini-2.5-flash", "project": "p", "request": {"contents": []}});
        let got = served(
            &p,
            &[
                ("streamGenerateContent", turn.clone()),
                ("streamGenerateContent", turn),
            ],
        );
        assert_eq!(got, [Some(5), None]);
        let r = p.report();
        assert_eq!((r.served, r.setup_served, r.misses.len()), (1, 0, 1));
    }

    #[test]
    fn a_setup_call_is_answered_by_its_own_endpoint_only() {
        let p = measured();
        // Never recorded: a miss, though other setup calls (with the same body) were.
        assert_eq!(
            served(&p, &[("/v1internal:fetchAdminControls", project("p"))]),
            [None]
        );
        assert_contains(
            &p.report().misses[0],
            "the tape has no call to this endpoint",
        );
        // Each endpoint's latest, not the latest setup call of any endpoint.
        let asked = [
            (EXPERIMENTS, project("p")),
            (EXPERIMENTS, project("p")),
            (LOAD, json!({"metadata": {"pluginType": "GEMINI"}})),
            (LOAD, json!({})),
        ];
        assert_eq!(served(&p, &asked), [Some(3), Some(3), Some(1), Some(1)]);
        // Another method of the same endpoint is another call.
        assert!(p.take(EXPERIMENTS, "GET", b"").is_err());
    }

    #[test]
    fn a_setup_call_whose_body_differs_gets_the_latest_with_the_same_body_else_the_latest() {
        let p = ModelPlayer::new(
            vec![
                call(1, QUOTA, project("a"), true),
                call(2, QUOTA, project("b"), true),
                call(
                    3,
                    METRICS,
                    json!({"metrics": [{"timestamp": "2026-12-07T01:00:00Z"}]}),
                    true,
                ),
                call(
                    4,
                    METRICS,
                    json!({"metrics": [{"timestamp": "2026-12-07T01:00:09Z"}]}),
                    true,
                ),
            ],
            false,
            1 << 20,
        );
        let got = served(
            &p,
            &[
                (QUOTA, project("b")),
                (QUOTA, project("a")),
                (QUOTA, project("a")),
                (QUOTA, project("b")),
                (QUOTA, project("c")),
                (
                    METRICS,
                    json!({"metrics": [{"timestamp": "2026-12-07T02:00:00Z"}]}),
                ),
                (
                    METRICS,
                    json!({"metrics": [{"timestamp": "2026-12-07T02:00:05Z"}]}),
                ),
            ],
        );
        assert_eq!(
            got,
            [
                Some(2),
                Some(1),
                Some(1),
                Some(2),
                Some(2),
                Some(4),
                Some(4)
            ]
        );
        assert!(p.report().misses.is_empty());
    }

    #[test]
    fn a_repeat_is_served_the_latest_answer_not_a_call_that_never_got_one() {
        // Recording stopped while the last quota call was in flight: it has no answer, and
        // serving it again would cut every later quota call of the playback.
        let p = ModelPlayer::new(
            vec![
                call(1, QUOTA, project("p"), true),
                call(2, QUOTA, project("p"), false),
            ],
            false,
            1 << 20,
        );
        let quota = || (QUOTA, project("p"));
        assert_eq!(
            served(&p, &[quota(), quota(), quota(), (QUOTA, project("q"))]),
            [Some(1), Some(2), Some(1), Some(1)]
        );
    }

    #[test]
    fn with_the_marker_key_a_request_is_served_the_call_recorded_with_its_values() {
        let key = MarkerKey::from_secret(b"k3y-0f-the-ci-s3cret-store-2026").expect("long enough");
        let marked = |t: &str| {
            json!({"messages": [{"role": "user",
                "content": format!("deploy with [REDACTED:github-token:{}] now", key.hash_of(t))}]})
        };
        let live = |t: &str| {
            (
                "messages",
                json!({"messages": [{"role": "user", "content": format!("deploy with {t} now")}]}),
            )
        };
        let calls = || {
            vec![
                call(1, "messages", marked("ghp_one"), true),
                call(2, "messages", marked("ghp_two"), true),
            ]
        };
        let player = |tape_key: Option<String>, key: Option<MarkerKey>| {
            ModelPlayer::new(calls(), false, 1 << 20).with_marker_key(tape_key, key)
        };
        let asked = [live("ghp_two"), live("ghp_one")];
        let p = player(Some(key.id()), Some(key.clone()));
        assert_eq!(served(&p, &asked), [Some(2), Some(1)]);
        assert_eq!(p.report().ambiguity(), None, "each its own call");
        // A value never recorded: the first unused call still answers, counted for the
        // summary.
        let p = player(Some(key.id()), Some(key.clone()));
        assert_eq!(served(&p, &[live("ghp_three")]), [Some(1)]);
        assert_eq!(
            p.report().ambiguity().as_deref(),
            Some("1 model request served among recorded calls that differ only in redacted values (POST messages: 1)")
        );
        // Without the key, or with a key the tape's markers were not made with: wildcards,
        // in recorded order (the second request fits one call left: not counted).
        let p = player(Some(key.id()), None);
        assert_eq!(served(&p, &asked), [Some(1), Some(2)]);
        assert_eq!(p.report().ambiguous, [("POST messages".to_string(), 1)]);
        let other = player(Some("0badc0de".into()), Some(key.clone()));
        assert_eq!(served(&other, &asked), [Some(1), Some(2)]);
        assert!(
            other.calls.iter().all(|r| r.keyed.is_none()),
            "nothing kept for the key"
        );
    }

    fn assert_contains(haystack: &str, needle: &str) {
        assert!(
            haystack.contains(needle),
            "{needle:?} is not in {haystack:?}"
        );
    }
}
