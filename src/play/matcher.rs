//! Which recorded exchange answers a request: same method and canonical params (volatile fields
//! ignored), the earliest unconsumed first. Repeated identical calls get their recorded answers in
//! order; parallel and reordered calls each find their own.

use super::explain::{Miss, MissReason, Near};
use crate::tape::index::Exchange;
use crate::tape::TapeIndex;
use crate::wire::canonical::{count_differences, differences, differences_shown, match_key_halves};
use crate::wire::params::MatchKey;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// The unserved exchanges of one tape by match key: each `take` consumes the one it returns.
pub struct Matcher {
    /// Unconsumed exchanges by match key, in recorded order. A queue may start with exchanges
    /// already consumed by [`take_raw`](Self::take_raw)'s in-order step, which does not look the
    /// queue up: they are dropped from its front before it is used.
    by_key: HashMap<MatchKey, VecDeque<usize>, BuildHasherDefault<KeyHasher>>,
    /// Key of a recorded request's exact params text → its match key under the policy: a
    /// client request of the same bytes needs no params value built to be matched.
    by_raw: HashMap<MatchKey, MatchKey, BuildHasherDefault<KeyHasher>>,
    /// Each exchange's `raw_key`, and the exchange before it of the same match key.
    raw_keys: Vec<Option<MatchKey>>,
    prev_same: Vec<Option<u32>>,
    /// Every exchange consumed so far was the earliest unconsumed one of its key: then an
    /// exchange whose `prev_same` is consumed is the earliest of its key.
    in_order: bool,
    /// The exchange after the one served last: what a client replaying its session asks next.
    cursor: usize,
    /// Reused for the canonical text of each request's params.
    scratch: Vec<u8>,
    consumed: Vec<bool>,
    /// Exchanges never to serve ([`set_aside`](Self::set_aside)): consumed, and explained so.
    aside: Vec<usize>,
    /// Redacts what the client asked before it is shown in an explanation.
    display: Option<std::sync::Arc<crate::redact::Redactor>>,
    /// The id of the user's marker key, the tape's or not (for what warnings say).
    user_key: Option<String>,
    /// `--match`, `--ignore-param`, `--repeat`, and what they keep (see `policy.rs`).
    pub(super) policy: super::policy::PolicyState,
    /// What miss explanations read, built at the first miss.
    misses: Option<MissIndex>,
    /// How much of the tape's requests it keeps parsed ([`MISS_VIEWS_ROOM`]).
    miss_room: u64,
    /// The markers of the redacted requests read so far, by exchange.
    markers: HashMap<usize, std::sync::Arc<[String]>>,
    /// Requests served among recorded ones that differ only in redacted values, one entry per
    /// recorded request (its params with every marker alike), warned about once.
    ambiguous: Vec<Ambiguity>,
    /// The recorded requests warned about already by any matcher of this play run (over
    /// HTTP each session has its matcher; the warning is said once a run, as over stdio).
    warned: Option<Warned>,
}

/// The match keys of the recorded requests whose ambiguity warning was said, shared by the
/// matchers of one play run.
pub(crate) type Warned = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<MatchKey>>>;

/// Requests that fitted several recorded requests differing only in redacted values (made with
/// different secrets), one recorded request's worth: said once on stderr, counted for the
/// summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguity {
    /// Method and tool, prompt or resource name (`tools/call deploy`).
    pub what: String,
    /// How many requests were served so.
    pub times: u64,
    /// The recorded request's match key (its markers taken as wildcards): what the entry is for.
    key: MatchKey,
}

/// The tape as miss explanations see it, which serving does not change: built once, at a
/// session's first miss, rather than at each. Each miss used to read and compare every
/// recorded request of its method, 43 ms a miss on a tape of 20,000 calls; now the calls of
/// one key are compared once, and the calls are ranked by counting their differences.
struct MissIndex {
    /// Every method on the tape with its count, by name.
    methods: Vec<(String, usize)>,
    /// Each method's exchanges grouped by match key (equal keys, equal views), the groups in
    /// the order of their first exchange.
    by_method: HashMap<String, Vec<KeyGroup>>,
    /// Room left for the views kept, counted in bytes of their requests on the tape.
    room: u64,
}

/// How much of the tape's requests a session keeps parsed for its miss explanations, in bytes
/// of their text; past it, a view is read again at each miss. The views take about twice their
/// text: on a tape of 100,000 distinct calls (15 MB of requests), play's peak RSS went from 200
/// to 215 MB and a miss took 66 ms instead of 223 ms; twice the room took 250 MB for 33 ms.
const MISS_VIEWS_ROOM: u64 = 8 << 20;

/// The exchanges of one match key.
#[derive(Clone)]
struct KeyGroup {
    /// In recorded order.
    members: Vec<usize>,
    /// Their params as the policy compares them, once read (while there was room).
    view: Option<Value>,
}

impl KeyGroup {
    /// The group's view, read from the tape: of its first member that can be read.
    fn read_view(&self, m: &Matcher, index: &TapeIndex) -> Option<Value> {
        self.members
            .iter()
            .find_map(|&ex| m.recorded_view(index, ex))
    }

    /// `f` of the group's view: the one kept, or one read now and kept while `room` allows;
    /// `None` when no member can be read.
    fn with_view<T>(
        &mut self,
        m: &Matcher,
        index: &TapeIndex,
        room: &mut u64,
        f: impl FnOnce(&Value) -> T,
    ) -> Option<T> {
        if let Some(view) = &self.view {
            return Some(f(view));
        }
        let view = self.read_view(m, index)?;
        let out = f(&view);
        *room = self.keep(view, *room, index);
        Some(out)
    }

    /// Keeps `view` if the room allows; returns the room left.
    fn keep(&mut self, view: Value, room: u64, index: &TapeIndex) -> u64 {
        let cost = match index.msgs[index.exchanges[self.members[0]].request].body {
            crate::tape::index::Body::Json { len, .. }
            | crate::tape::index::Body::Text { len, .. }
            | crate::tape::index::Body::B64 { len, .. } => u64::from(len),
            crate::tape::index::Body::Oversize { .. } => u64::MAX,
        };
        if cost > room {
            return room;
        }
        self.view = Some(view);
        room - cost
    }
}

/// A recorded call ranked for a miss explanation.
struct Ranked {
    /// Differences from what was asked, wildcards aside.
    real: usize,
    used: bool,
    seq: u64,
    ex: usize,
    group: usize,
    /// Redacted values that matched what was asked.
    wildcards: usize,
}

impl MissIndex {
    fn new(index: &TapeIndex, keys: &[MatchKey], room: u64) -> MissIndex {
        let mut methods: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_method: HashMap<&str, Vec<KeyGroup>> = HashMap::new();
        let mut at: HashMap<(&str, MatchKey), usize> = HashMap::new();
        for (i, ex) in index.exchanges.iter().enumerate() {
            let m = index.msgs[ex.request].method.as_deref().unwrap_or_default();
            *methods.entry(m).or_default() += 1;
            let groups = by_method.entry(m).or_default();
            let g = *at.entry((m, keys[i])).or_insert_with(|| {
                groups.push(KeyGroup {
                    members: Vec::new(),
                    view: None,
                });
                groups.len() - 1
            });
            groups[g].members.push(i);
        }
        MissIndex {
            methods: methods
                .into_iter()
                .map(|(m, n)| (m.to_string(), n))
                .collect(),
            by_method: by_method
                .into_iter()
                .map(|(m, g)| (m.to_string(), g))
                .collect(),
            room,
        }
    }
}

/// What `take` found for a request; exchanges are indexes into [`TapeIndex::exchanges`].
pub enum Outcome {
    /// This recorded exchange answers it (now consumed).
    Hit(usize),
    /// No match; `--lenient` served this other exchange of the same method instead.
    Lenient(usize, Miss),
    /// Nothing on the tape answers it, and why.
    Miss(Miss),
}

impl Matcher {
    /// A matcher over every exchange of `index`, explanations redacted by the built-in rules.
    pub fn new(index: &TapeIndex) -> Matcher {
        let display = crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults())
            .expect("the built-in rules compile");
        Matcher::with_display(index, Some(std::sync::Arc::new(display)))
    }

    /// A matcher sharing an already built display redactor (building one compiles its regexes:
    /// an HTTP player opening a session per `initialize` builds it once).
    pub(crate) fn with_display(
        index: &TapeIndex,
        display: Option<std::sync::Arc<crate::redact::Redactor>>,
    ) -> Matcher {
        Matcher::with_policy(index, display, Default::default())
    }

    /// The matcher of one play session: the options' display redactor and match policy.
    pub(crate) fn for_play(index: &TapeIndex, opts: &super::ServeOptions) -> Matcher {
        let mut m = Matcher::with_policy(index, opts.display.clone(), opts.policy.clone());
        m.user_key = opts.marker_key_id.clone();
        m
    }

    fn with_policy(
        index: &TapeIndex,
        display: Option<std::sync::Arc<crate::redact::Redactor>>,
        policy: std::sync::Arc<super::policy::MatchPolicy>,
    ) -> Matcher {
        let policy = super::policy::PolicyState::new(index, policy);
        // Sized up front: growing maps of 100k keys rehashes them several times at start-up.
        let n = policy.keys.len();
        let mut by_key: HashMap<MatchKey, VecDeque<usize>, _> =
            HashMap::with_capacity_and_hasher(n, Default::default());
        let mut by_raw: HashMap<MatchKey, MatchKey, _> =
            HashMap::with_capacity_and_hasher(n, Default::default());
        let mut prev_same = Vec::with_capacity(policy.keys.len());
        for (i, key) in policy.keys.iter().enumerate() {
            let q = by_key.entry(*key).or_default();
            prev_same.push(q.back().map(|&p| p as u32));
            q.push_back(i);
            if let Some(raw) = index.exchanges[i].raw_key {
                by_raw.insert(raw, *key);
            }
        }
        Matcher {
            by_key,
            by_raw,
            raw_keys: index.exchanges.iter().map(|e| e.raw_key).collect(),
            prev_same,
            in_order: true,
            cursor: 0,
            scratch: Vec::new(),
            consumed: vec![false; index.exchanges.len()],
            display,
            user_key: None,
            policy,
            misses: None,
            miss_room: MISS_VIEWS_ROOM,
            markers: HashMap::new(),
            ambiguous: Vec::new(),
            warned: None,
            aside: Vec::new(),
        }
    }

    /// This matcher, saying its ambiguity warnings only where no matcher sharing `warned`
    /// said them (its counts stay its own, for the summary to add up).
    pub(crate) fn sharing_warnings(mut self, warned: Warned) -> Matcher {
        self.warned = Some(warned);
        self
    }

    /// [`take`](Self::take)'s answer for a request whose params' exact text (`None`: it has no
    /// params) is a recorded request's, when that is a plain hit: the earliest unserved exchange
    /// of that match key. `None` otherwise (no recorded request of these bytes, all of them
    /// served, `--match sequence`): the caller then goes `take`'s way, with the params parsed.
    /// The same bytes make the same canonical params, so a hit here is the hit `take` gives.
    pub(crate) fn take_raw(&mut self, method: &str, raw_params: Option<&str>) -> Option<usize> {
        if self.policy.policy.mode == super::policy::MatchMode::Sequence && method != "ping" {
            return None;
        }
        let raw = crate::wire::params::raw_key(method, raw_params);
        // In recorded order, the next exchange answers without a map lookup (each is a cache
        // miss on a big tape): the earliest unconsumed of its key when the one before it of the
        // same key is consumed and every consumption so far was in order.
        let next = self.cursor;
        if self.in_order
            && self.raw_keys.get(next) == Some(&Some(raw))
            && !self.consumed[next]
            && self.prev_same[next].is_none_or(|p| self.consumed[p as usize])
        {
            self.served(next);
            return Some(next);
        }
        let key = *self.by_raw.get(&raw)?;
        let ex = self.front(key)?;
        self.by_key.get_mut(&key)?.pop_front();
        self.served(ex);
        Some(ex)
    }

    /// The earliest unconsumed exchange of `key`, its queue's stale front dropped first.
    fn front(&mut self, key: MatchKey) -> Option<usize> {
        let q = self.by_key.get_mut(&key)?;
        while q.front().is_some_and(|&e| self.consumed[e]) {
            q.pop_front();
        }
        q.front().copied()
    }

    /// Marks `ex`, its key's earliest unconsumed exchange, served.
    fn served(&mut self, ex: usize) {
        self.consumed[ex] = true;
        self.policy.served[ex] += 1;
        self.cursor = ex + 1;
    }

    /// Takes the earliest unserved exchange with the request's method and match params (redacted
    /// values on the tape match anything); with `lenient`, on a miss, the earliest unserved one
    /// of the same method.
    pub fn take(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
    ) -> Outcome {
        self.take_preferring(index, method, params, lenient, &Prefer::none())
    }

    /// `take`, where among the matching exchanges the one `prefer` scores highest is taken
    /// (the earliest of those): over HTTP, one recorded session's own exchange, and the one
    /// recorded with the same routing headers.
    pub(crate) fn take_preferring(
        &mut self,
        index: &TapeIndex,
        method: &str,
        params: Option<&Value>,
        lenient: bool,
        prefer: &Prefer<'_>,
    ) -> Outcome {
        let plain = self.policy.policy.plain();
        if self.policy.policy.mode == super::policy::MatchMode::Sequence && method != "ping" {
            return self.take_in_sequence(index, method, params, lenient, prefer);
        }
        // The fast key takes no copy of the params; the general one is for the rare rest
        // (redaction markers, a policy other than plain content) and gives what a miss
        // explanation shows.
        let fast = match (plain, method == "initialize") {
            (false, _) => None,
            (true, true) => match_key_halves(method, None, &mut self.scratch),
            (true, false) => match_key_halves(method, params, &mut self.scratch),
        };
        let (key, asked) = match fast {
            Some(key) => (key, None),
            None => {
                let (key, asked) = self.policy.policy.asked(method, params);
                (key, Some(asked))
            }
        };
        if self.front(key).is_some() {
            let q = self.by_key.get_mut(&key).expect("just found");
            let at = best(q.iter().copied(), prefer, index).map_or(0, |(at, _)| at);
            let ex = q.remove(at).expect("in the queue");
            // Preferred over the earliest: out of order for `take_raw`'s in-order step.
            self.in_order &= at == 0;
            self.served(ex);
            return Outcome::Hit(ex);
        }
        let asked = asked.unwrap_or_else(|| self.policy.policy.asked(method, params).1);
        // A recorded request with redacted values matches a live one holding the real secret:
        // the markers are wildcards.
        if let Some(ex) = self.wildcard_hit(index, method, &asked, prefer) {
            self.consume(index, ex);
            return Outcome::Hit(ex);
        }
        if let Some(ex) = self.repeat(index, key, &asked, method, prefer) {
            return Outcome::Hit(ex);
        }
        // `initialize` matches whatever it asks (its key has no params), but a miss shows what
        // it asked.
        let shown = match method {
            "initialize" => crate::wire::canonical::match_params(params),
            _ => asked,
        };
        let miss = self.explain(index, method, shown);
        if lenient {
            if let Some(ex) = self.next_unused(index, method, prefer) {
                self.consume(index, ex);
                return Outcome::Lenient(ex, miss);
            }
        }
        Outcome::Miss(miss)
    }

    /// The exchanges of `method` not served yet, in recorded order.
    fn unused_of<'a>(
        &'a self,
        index: &'a TapeIndex,
        method: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        index
            .exchanges
            .iter()
            .enumerate()
            .filter(move |(i, ex)| {
                !self.consumed[*i] && index.msgs[ex.request].method.as_deref() == Some(method)
            })
            .map(|(i, _)| i)
    }

    /// The earliest unserved exchange of `method` (the best by `prefer`): what `--lenient`
    /// serves on a miss.
    pub(super) fn next_unused(
        &self,
        index: &TapeIndex,
        method: &str,
        prefer: &Prefer<'_>,
    ) -> Option<usize> {
        best(self.unused_of(index, method), prefer, index).map(|(_, ex)| ex)
    }

    /// Never serves `ex`, nor counts it served: over HTTP, an exchange the recorded server
    /// refused for its session, whose answer play gives such a request before matching it.
    pub(crate) fn set_aside(&mut self, ex: usize) {
        self.consumed[ex] = true;
        self.aside.push(ex);
        self.in_order = false;
        if let Some(q) = self.by_key.get_mut(&self.policy.keys[ex]) {
            q.retain(|&e| e != ex);
        }
        self.policy.set_aside(ex);
    }

    /// Marks `ex` served when it was found another way than by its key's queue.
    pub(super) fn consume(&mut self, _index: &TapeIndex, ex: usize) {
        self.consumed[ex] = true;
        self.policy.served[ex] += 1;
        // Not necessarily its key's earliest (a wildcard, `--lenient`, `--match sequence`).
        self.in_order = false;
        if let Some(q) = self.by_key.get_mut(&self.policy.keys[ex]) {
            q.retain(|&e| e != ex);
        }
    }

    /// A client's line quoted for humans with the display rules applied (it may hold the
    /// client's secrets).
    pub(crate) fn quote(&self, text: &str) -> String {
        match &self.display {
            Some(r) => r
                .redact_text(text)
                .map(|(t, _)| t)
                .unwrap_or_else(|| text.to_string()),
            None => text.to_string(),
        }
    }

    /// How many times each exchange was served (repeats included).
    pub(crate) fn uses(&self) -> &[u32] {
        &self.policy.served
    }

    /// Requests served among recorded ones that differ only in redacted values, per recorded
    /// request.
    pub(crate) fn ambiguous(&self) -> &[Ambiguity] {
        &self.ambiguous
    }

    /// Answers served again by `--repeat last|cycle`.
    pub(crate) fn repeats(&self) -> u64 {
        self.policy.repeats
    }

    /// Recorded exchanges never served, in recorded order.
    pub(crate) fn unused(&self) -> Vec<usize> {
        // One set aside was never served, though no request can take it.
        (0..self.consumed.len())
            .filter(|&i| !self.consumed[i] || self.aside.contains(&i))
            .collect()
    }

    /// What the client asked, as an explanation shows it: it may hold the client's secrets, and
    /// explanations go to stderr and back to the client, so it is redacted (and compared so).
    fn shown(&self, asked: Value) -> Value {
        shown_params(self.display.as_deref(), asked)
    }

    /// The tape as miss explanations see it, built at a session's first miss.
    fn miss_index(&mut self, index: &TapeIndex) -> &mut MissIndex {
        self.misses
            .get_or_insert_with(|| MissIndex::new(index, &self.policy.keys, self.miss_room))
    }

    /// The unserved exchange of `method` with redacted values whose recorded view, its markers
    /// taken as wildcards, fits `asked` (the best by `prefer`, the earliest among equals). One
    /// view is compared per match key: it read and compared every unserved redacted request
    /// of the method at each request that missed by key (11 ms a miss with 5,000 of them).
    fn wildcard_hit(
        &mut self,
        index: &TapeIndex,
        method: &str,
        asked: &Value,
        prefer: &Prefer<'_>,
    ) -> Option<usize> {
        self.miss_index(index);
        let mut misses = self.misses.take().expect("just built");
        let mut fitting: Vec<usize> = Vec::new();
        let open = |ex: usize| !self.consumed[ex] && index.exchanges[ex].redacted;
        for group in misses.by_method.get_mut(method).into_iter().flatten() {
            if !group.members.iter().any(|&ex| open(ex)) {
                continue;
            }
            let Some(fits) = group.with_view(self, index, &mut misses.room, |view| {
                crate::redact::wildcard_eq(view, asked)
            }) else {
                continue;
            };
            if fits {
                fitting.extend(group.members.iter().copied().filter(|&ex| open(ex)));
            }
        }
        self.misses = Some(misses);
        // In recorded order, as `best` takes them.
        fitting.sort_unstable();
        // With the tape's own marker key, the fitting requests whose markers were made from
        // the client's values: no doubt which one it meant. A match key does not hold the
        // markers' hashes, so each distinct set of them is compared once.
        let keyed = self.keyed(index);
        if let Some(k) = &keyed {
            let mut compared: Vec<(std::sync::Arc<[String]>, bool)> = Vec::new();
            let mut exact = Vec::new();
            for &ex in &fitting {
                let hashes = self.marker_hashes(index, ex);
                let agrees = match compared.iter().find(|(h, _)| *h == hashes) {
                    Some((_, a)) => *a,
                    None => {
                        // The request as recorded: its match view holds markers without
                        // their hashes.
                        let recorded = index
                            .read_bytes(&index.msgs[index.exchanges[ex].request])
                            .ok()
                            .and_then(|text| crate::wire::params::params_of(&text));
                        let a = recorded.is_some_and(|params| {
                            crate::wire::marker::keyed_agrees(&params, asked, &|t| k.hash_of(t))
                        });
                        compared.push((hashes, a));
                        a
                    }
                };
                if agrees {
                    exact.push(ex);
                }
            }
            if let Some((_, ex)) = best(exact.iter().copied(), prefer, index) {
                return Some(ex);
            }
        }
        let ex = best(fitting.iter().copied(), prefer, index).map(|(_, ex)| ex)?;
        // Requests that fit with different markers (their hashes: equal secrets have equal
        // markers within a tape) were made with different secrets. A few are read.
        let mut secrets: Vec<std::sync::Arc<[String]>> = Vec::new();
        for &e in fitting.iter().take(AMBIGUITY_READS) {
            let markers = self.marker_hashes(index, e);
            if !secrets.contains(&markers) {
                secrets.push(markers);
            }
        }
        if secrets.len() > 1 {
            // The recorded request's match key: its params (not its id) with its markers taken
            // as wildcards, whichever secret it was made with.
            let key = self.policy.keys[ex];
            match self.ambiguous.iter_mut().find(|a| a.key == key) {
                Some(a) => a.times += 1,
                None => {
                    let first = self
                        .warned
                        .as_ref()
                        .is_none_or(|w| w.lock().expect("warned lock").insert(key));
                    if first {
                        crate::diag!(
                            "{}",
                            ambiguous_warning(
                                index,
                                method,
                                asked,
                                ex,
                                secrets.len(),
                                keyed.is_some(),
                                self.user_key.as_deref(),
                            )
                        );
                    }
                    self.ambiguous.push(Ambiguity {
                        what: format!("{method}{}", tool_name(asked)),
                        times: 1,
                        key,
                    });
                }
            }
        }
        Some(ex)
    }

    /// The markers of recorded exchange `ex`'s request, in order (read once a session): equal
    /// for requests made with equal secrets.
    fn marker_hashes(&mut self, index: &TapeIndex, ex: usize) -> std::sync::Arc<[String]> {
        if let Some(m) = self.markers.get(&ex) {
            return m.clone();
        }
        let text = index
            .read_bytes(&index.msgs[index.exchanges[ex].request])
            .unwrap_or_default();
        let markers: std::sync::Arc<[String]> = crate::wire::marker::marker_re()
            .find_iter(&String::from_utf8_lossy(&text))
            .map(|m| m.as_str().to_string())
            .collect();
        self.markers.insert(ex, markers.clone());
        markers
    }

    /// The display redactor, when its marker key is the one the tape's markers were made
    /// with (`$MCPTAPE_REDACT_KEY`, named by the header): then a marker's hash tells which
    /// value a recorded request carried.
    fn keyed(&self, index: &TapeIndex) -> Option<std::sync::Arc<crate::redact::Redactor>> {
        let d = self.display.as_ref()?;
        let id = d.marker_key_id()?;
        (index.header.marker_key.as_deref() == Some(id)).then(|| d.clone())
    }

    /// Every method on the tape with its count, by name.
    pub(super) fn recorded_methods(&mut self, index: &TapeIndex) -> Vec<(String, usize)> {
        self.miss_index(index).methods.clone()
    }

    fn explain(&mut self, index: &TapeIndex, method: &str, asked: Value) -> Miss {
        // Compared as asked, as the tape is matched (markers on it are wildcards), and shown
        // with the display rules: comparing the shown request, a tape recorded without
        // redaction differed from it at every secret, equal or not.
        let shown = self.shown(asked.clone());
        // Taken out while it is read, and put back.
        self.miss_index(index);
        let mut misses = self.misses.take().expect("just built");
        // Redacted values on the tape match anything: not differences.
        let wild = |l: &Value, r: &Value| {
            l.as_str().is_some_and(crate::redact::has_marker) && crate::redact::wildcard_eq(l, r)
        };
        let mut no_groups = Vec::new();
        let groups = misses.by_method.get_mut(method);
        let method_recorded = groups.is_some();
        let groups = groups.unwrap_or(&mut no_groups);
        // Every recorded call is ranked by how many differences it has, none of them built yet;
        // only the nearest are spelled out below.
        let mut ranked: Vec<Ranked> = Vec::new();
        let (mut identical, mut identical_aside) = (0, 0);
        for (g, group) in groups.iter_mut().enumerate() {
            // The exchanges of one key have the same view: one is read and compared for all
            // (an unreadable one, an oversize request, is passed over for the next).
            let Some((real, wildcards)) = group.with_view(self, index, &mut misses.room, |view| {
                count_differences(view, &asked, &wild)
            }) else {
                continue;
            };
            if real == 0 {
                identical += group.members.len();
                identical_aside += group
                    .members
                    .iter()
                    .filter(|e| self.aside.contains(e))
                    .count();
            }
            // Within a key, the nearest are the unused before the used, then in recorded
            // order: no more than three of them can be among the three shown.
            let at = ranked.len();
            ranked.extend(group.members.iter().map(|&ex| Ranked {
                real,
                used: self.consumed[ex],
                seq: index.msgs[index.exchanges[ex].request].seq,
                ex,
                group: g,
                wildcards,
            }));
            let mine = &mut ranked[at..];
            if mine.len() > 3 {
                mine.select_nth_unstable_by_key(2, |r| (r.used, r.seq));
                ranked.truncate(at + 3);
            }
        }
        let reason = match identical {
            n if n > 0 && n == identical_aside => MissReason::RefusedForSession { recorded: n },
            _ => MissReason::of(method_recorded, identical),
        };
        // Nearest first: fewest differing paths, then unused before used, then recorded order.
        // Three at most are shown: the three first are found without sorting the rest.
        let nearest = |r: &Ranked| (r.real, r.used, r.seq);
        if ranked.len() > 3 {
            ranked.select_nth_unstable_by_key(2, nearest);
            ranked.truncate(3);
        }
        ranked.sort_by_key(nearest);
        // Keep the nearest and those about as near; far-off calls are noise, not explanation.
        let best = ranked.first().map(|r| r.real).unwrap_or(0);
        ranked.retain(|r| r.real <= best + 1);
        let near: Vec<Near> = ranked
            .iter()
            .filter_map(|r| {
                let group = &groups[r.group];
                let read;
                let view = match &group.view {
                    Some(v) => v,
                    None => {
                        read = group.read_view(self, index)?;
                        &read
                    }
                };
                let differences = match &self.display {
                    Some(_) => {
                        let view_shown = self.shown(view.clone());
                        differences_shown(view, &asked, [&view_shown, &shown], &wild)
                    }
                    None => differences(view, &asked)
                        .into_iter()
                        .filter(|d| match (&d.left, &d.right) {
                            (Some(l), Some(r)) => !wild(l, r),
                            _ => true,
                        })
                        .collect(),
                };
                Some(Near {
                    line: index.msgs[index.exchanges[r.ex].request].line,
                    seq: r.seq,
                    used: r.used,
                    refused: self.aside.contains(&r.ex),
                    differences,
                    wildcards: r.wildcards,
                })
            })
            .collect();
        let (matcher, ignored) = self.described();
        let recorded_methods = misses.methods.clone();
        self.misses = Some(misses);
        Miss {
            method: method.to_string(),
            asked: shown,
            reason,
            nearest: near,
            recorded_methods,
            matcher,
            ignored,
            skipped_lines: index.skipped_lines().iter().map(|b| b.line).collect(),
        }
    }
}

/// A request's params as play shows them to humans and clients (explanations, the unused
/// list): redacted by the display rules `display`, if any.
pub(crate) fn shown_params(display: Option<&crate::redact::Redactor>, params: Value) -> Value {
    match display {
        Some(r) => {
            let mut wrapped = serde_json::json!({ "params": params });
            r.redact_value(&mut wrapped, &mut Vec::new());
            wrapped["params"].take()
        }
        None => params,
    }
}

/// Which of several matching exchanges to take: a score (higher first) and the best score
/// there can be, so that the search stops at the first exchange reaching it (with no
/// preference, the earliest at once: the stdio path never scans).
pub(crate) struct Prefer<'a> {
    pub score: &'a (dyn Fn(&Exchange) -> u32 + Sync),
    pub max: u32,
}

impl Prefer<'_> {
    /// No preference: the earliest matching exchange.
    pub fn none() -> Prefer<'static> {
        Prefer {
            score: &|_| 0,
            max: 0,
        }
    }
}

/// How many of the recorded requests a request fits by wildcards are read to see whether they
/// were made with different secrets.
const AMBIGUITY_READS: usize = 8;

/// Said when a request fits `views` recorded requests that differ from each other only in
/// redacted values: the tape holds markers, not the secrets, so play cannot tell which of them
/// the client meant, and serves the earliest (`ex`) — the answer to another secret, maybe.
/// `keyed`: with the tape's own marker key; `user_key`: the id of the user's, whichever.
fn ambiguous_warning(
    index: &TapeIndex,
    method: &str,
    asked: &Value,
    ex: usize,
    views: usize,
    keyed: bool,
    user_key: Option<&str>,
) -> String {
    let name = tool_name(asked);
    let line = index.msgs[index.exchanges[ex].request].line;
    let why = crate::redact::MarkerKey::ambiguity_why(
        crate::redact::Replayer::Play,
        keyed,
        index.header.marker_key.as_deref(),
        user_key,
    );
    format!(
        "mcptape play: WARNING: {method}{name} fits {views} recorded requests that differ only in redacted values; served the one at line {line}, the first unused in play's order. {why} (said once for this request; play's summary counts every call it applied to)"
    )
}

/// Adds one session's [`Ambiguity`] counts to a running total (over HTTP, each session has its
/// matcher, and says its warnings once).
pub(crate) fn add_ambiguous(total: &mut Vec<Ambiguity>, more: &[Ambiguity]) {
    for a in more {
        match total.iter_mut().find(|t| t.key == a.key) {
            Some(t) => t.times += a.times,
            None => total.push(a.clone()),
        }
    }
}

/// ` NAME` of a request's `params.name`, or nothing.
fn tool_name(params: &Value) -> String {
    params
        .get("name")
        .and_then(Value::as_str)
        .map(|n| format!(" {n}"))
        .unwrap_or_default()
}

/// The candidate (position, exchange) scoring highest, the earliest among equals.
pub(super) fn best(
    candidates: impl Iterator<Item = usize>,
    prefer: &Prefer<'_>,
    index: &TapeIndex,
) -> Option<(usize, usize)> {
    let mut top: Option<(usize, usize, u32)> = None;
    for (at, ex) in candidates.enumerate() {
        let s = (prefer.score)(&index.exchanges[ex]);
        if top.is_none_or(|(_, _, t)| s > t) {
            top = Some((at, ex, s));
            if s >= prefer.max {
                break;
            }
        }
    }
    top.map(|(at, ex, _)| (at, ex))
}

/// The matcher's map hasher: its keys are already uniform hashes, so their low bits serve.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    /// A `MatchKey` writes its two halves: mixed into one.
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(32) ^ n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::params::match_key;
    use serde_json::json;

    /// A tape of `calls` (each `tools/call` with arguments `{"n":k,"m":0}`), each answered.
    fn tape_of(dir: &std::path::Path, calls: &[u8]) -> TapeIndex {
        let pairs = calls.iter().enumerate().map(|(i, k)| {
            let res = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"k":{k},"i":{i}}}}}"#);
            (request(i, *k, false), res)
        });
        tape_with(&dir.join("t.jsonl"), pairs)
    }

    /// A tape at `path` of these requests, each followed by its answer.
    fn tape_with(
        path: &std::path::Path,
        pairs: impl Iterator<Item = (String, String)>,
    ) -> TapeIndex {
        use crate::tape::{TapeWriter, WriteOptions};
        use crate::wire::{Dir, Frame, Line};
        let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
        for (req, res) in pairs {
            for (dir, bytes) in [(Dir::C2S, req.as_bytes()), (Dir::S2C, res.as_bytes())] {
                let line = Line {
                    bytes,
                    crlf: false,
                    unterminated: false,
                    bom: false,
                };
                w.message(
                    "default",
                    dir,
                    &Frame::Line(line),
                    std::time::Instant::now(),
                );
            }
            w.commit().unwrap();
        }
        w.finish(None, None).unwrap();
        TapeIndex::load(path, None).unwrap()
    }

    /// A request for key `k`; `swapped`: the same params with their keys in another order (equal
    /// canonically, other bytes).
    fn request(id: usize, k: u8, swapped: bool) -> String {
        let args = if swapped {
            format!(r#"{{"m":0,"n":{k}}}"#)
        } else {
            format!(r#"{{"n":{k},"m":0}}"#)
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","arguments":{args}}}}}"#
        )
    }

    fn params_of(req: &str) -> (Option<String>, Option<Value>) {
        let v: Value = serde_json::from_str(req).unwrap();
        let p = v.get("params").cloned();
        (p.as_ref().map(|p| p.to_string()), p)
    }

    proptest::proptest! {
        /// Whatever order the client asks in (repeats, misses, other key orders), the exact-bytes
        /// lookup first and `take` after it serve exactly what `take` alone serves.
        #[test]
        fn the_exact_bytes_lookup_serves_what_take_serves(
            recorded in proptest::collection::vec(0u8..4, 1..24),
            asked in proptest::collection::vec((0u8..5, proptest::bool::ANY), 0..40),
            in_recorded_order in proptest::bool::ANY,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let index = tape_of(dir.path(), &recorded);
            let asked: Vec<(u8, bool)> = if in_recorded_order {
                recorded.iter().map(|&k| (k, false)).chain(asked).collect()
            } else {
                asked
            };
            let mut both = Matcher::with_display(&index, None);
            let mut plain = Matcher::with_display(&index, None);
            for (i, (k, swapped)) in asked.into_iter().enumerate() {
                let req = request(1000 + i, k, swapped);
                let (raw, value) = params_of(&req);
                // Byte-exact text of the params as sent.
                let raw = raw.map(|_| {
                    let at = req.find(r#""params":"#).unwrap() + 9;
                    req[at..req.len() - 1].to_string()
                });
                let a = match both.take_raw("tools/call", raw.as_deref()) {
                    Some(ex) => Some(ex),
                    None => match both.take(&index, "tools/call", value.as_ref(), false) {
                        Outcome::Hit(ex) => Some(ex),
                        _ => None,
                    },
                };
                let b = match plain.take(&index, "tools/call", value.as_ref(), false) {
                    Outcome::Hit(ex) => Some(ex),
                    _ => None,
                };
                proptest::prop_assert_eq!(a, b, "request {} for key {} (swapped {})", i, k, swapped);
            }
            proptest::prop_assert_eq!(both.unused(), plain.unused());
        }
    }

    /// The miss explanation as it was made before the miss index: every recorded request of
    /// the method read and compared in full at each miss.
    fn explain_reference(m: &Matcher, index: &TapeIndex, method: &str, asked: Value) -> Miss {
        let shown = m.shown(asked.clone());
        let mut same_method = Vec::new();
        let mut methods: BTreeMap<String, usize> = BTreeMap::new();
        for (i, ex) in index.exchanges.iter().enumerate() {
            let req = &index.msgs[ex.request];
            let m = req.method.clone().unwrap_or_default();
            if m == method {
                same_method.push(i);
            }
            *methods.entry(m).or_default() += 1;
        }
        let mut near: Vec<Near> = same_method
            .iter()
            .filter_map(|&i| {
                let req = &index.msgs[index.exchanges[i].request];
                let recorded = m.recorded_view(index, i)?;
                // Redacted values on the tape match anything: not differences.
                let wild = |l: &Value, r: &Value| {
                    l.as_str().is_some_and(crate::redact::has_marker)
                        && crate::redact::wildcard_eq(l, r)
                };
                let wild_places = differences(&recorded, &asked)
                    .into_iter()
                    .filter(|d| match (&d.left, &d.right) {
                        (Some(l), Some(r)) => wild(l, r),
                        _ => false,
                    })
                    .count();
                // Compared as asked, shown with the display rules.
                let recorded_shown = m.shown(recorded.clone());
                let real = differences_shown(&recorded, &asked, [&recorded_shown, &shown], &wild);
                Some(Near {
                    line: req.line,
                    seq: req.seq,
                    used: m.consumed[i],
                    refused: m.aside.contains(&i),
                    differences: real,
                    wildcards: wild_places,
                })
            })
            .collect();
        let identical = near.iter().filter(|n| n.differences.is_empty()).count();
        let reason = MissReason::of(!same_method.is_empty(), identical);
        // Nearest first: fewest differing paths, then unused before used, then recorded order.
        near.sort_by_key(|n| (n.differences.len(), n.used, n.seq));
        // Keep the nearest and those about as near; far-off calls are noise, not explanation.
        let best = near.first().map(|n| n.differences.len()).unwrap_or(0);
        near.retain(|n| n.differences.len() <= best + 1);
        near.truncate(3);
        let (matcher, ignored) = m.described();
        Miss {
            method: method.to_string(),
            asked: shown,
            reason,
            nearest: near,
            recorded_methods: methods.into_iter().collect(),
            matcher,
            ignored,
            skipped_lines: index.skipped_lines().iter().map(|b| b.line).collect(),
        }
    }

    /// The wildcard lookup as it was before the miss index: every unserved redacted request of
    /// the method read and compared.
    fn wildcard_reference(
        m: &Matcher,
        index: &TapeIndex,
        method: &str,
        asked: &Value,
    ) -> Option<usize> {
        best(
            m.unused_of(index, method).filter(|&i| {
                index.exchanges[i].redacted
                    && m.recorded_view(index, i)
                        .is_some_and(|recorded| crate::redact::wildcard_eq(&recorded, asked))
            }),
            &Prefer::none(),
            index,
        )
        .map(|(_, ex)| ex)
    }

    /// A tape of calls of several shapes: `tools/call` of tool `t` with arguments `n`, `m` and
    /// maybe a redacted `api_key`, and `resources/read` of a URI; each answered.
    fn varied_tape(dir: &std::path::Path, calls: &[(u8, u8, u8)]) -> TapeIndex {
        let pairs = calls.iter().enumerate().map(|(i, &(shape, n, m))| {
            let res = format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"i":{i}}}}}"#);
            (varied_request(i, shape, n, m, true), res)
        });
        tape_with(&dir.join("v.jsonl"), pairs)
    }

    /// Shape 0: `tools/call` of `t` with `n` and `m`; 1: the same with an `api_key` (on the
    /// tape, `recorded`: a redaction marker); 2: `resources/read` of `file:///n`; 3: a
    /// `prompts/get`, which no tape here records.
    fn varied_request(id: usize, shape: u8, n: u8, m: u8, recorded: bool) -> String {
        let key = if recorded {
            "[REDACTED:key:api_key:6bd4f209]"
        } else {
            "sk-live-abcdefghijklmnopqrstu"
        };
        let (method, params) = match shape % 4 {
            0 => (
                "tools/call",
                format!(r#"{{"name":"t","arguments":{{"n":{n},"m":{m}}}}}"#),
            ),
            1 => (
                "tools/call",
                format!(r#"{{"name":"t","arguments":{{"m":{m},"api_key":"{key}","n":{n}}}}}"#),
            ),
            2 => ("resources/read", format!(r#"{{"uri":"file:///{n}"}}"#)),
            _ => ("prompts/get", format!(r#"{{"name":"p{n}"}}"#)),
        };
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
    }

    proptest::proptest! {
        /// Whatever the tape and the order of asking, every miss is explained exactly as when
        /// each miss read and compared every recorded request of its method.
        #[test]
        fn a_miss_is_explained_as_by_reading_every_recorded_request(
            recorded in proptest::collection::vec((0u8..3, 0u8..4, 0u8..3), 1..30),
            asked in proptest::collection::vec((0u8..4, 0u8..5, 0u8..3), 1..40),
            room in proptest::prop_oneof![proptest::strategy::Just(MISS_VIEWS_ROOM), 0u64..2000],
        ) {
            let dir = tempfile::tempdir().unwrap();
            let index = varied_tape(dir.path(), &recorded);
            let mut m = Matcher::new(&index);
            // Some views kept, some read again at each miss, or all kept.
            m.miss_room = room;
            let mut misses = 0;
            for (i, &(shape, n, k)) in asked.iter().enumerate() {
                let req = varied_request(1000 + i, shape, n, k, false);
                let v: Value = serde_json::from_str(&req).unwrap();
                let method = v["method"].as_str().unwrap().to_string();
                let params = v.get("params");
                let as_asked = m.policy.policy.asked(&method, params).1;
                proptest::prop_assert_eq!(
                    m.wildcard_hit(&index, &method, &as_asked, &Prefer::none()),
                    wildcard_reference(&m, &index, &method, &as_asked),
                    "request {} ({:?})", i, (shape, n, k)
                );
                let want = explain_reference(&m, &index, &method, as_asked);
                if let Outcome::Miss(got) = m.take(&index, &method, params, false) {
                    misses += 1;
                    proptest::prop_assert_eq!(
                        serde_json::to_value(&got).unwrap(),
                        serde_json::to_value(&want).unwrap(),
                        "request {} ({:?})", i, (shape, n, k)
                    );
                }
            }
            // Asked more often than recorded, or never recorded: the property was exercised.
            proptest::prop_assert!(misses > 0 || asked.len() <= recorded.len());
        }
    }

    #[test]
    fn a_session_asked_in_recorded_order_is_served_by_the_exact_bytes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let recorded = [0, 1, 0, 2, 1, 0];
        let index = tape_of(dir.path(), &recorded);
        let mut m = Matcher::with_display(&index, None);
        for (i, k) in recorded.iter().enumerate() {
            let req = request(i, *k, false);
            let at = req.find(r#""params":"#).unwrap() + 9;
            assert_eq!(
                m.take_raw("tools/call", Some(&req[at..req.len() - 1])),
                Some(i)
            );
        }
        // All served: the exact-bytes lookup leaves repeats to `take`.
        let req = request(9, 0, false);
        let at = req.find(r#""params":"#).unwrap() + 9;
        assert_eq!(
            m.take_raw("tools/call", Some(&req[at..req.len() - 1])),
            None
        );
    }

    #[test]
    fn the_fast_key_is_the_index_key() {
        for (method, p) in [
            (
                "tools/call",
                Some(json!({"name":"add","arguments":{"b":2,"a":1}})),
            ),
            (
                "tools/call",
                Some(json!({"name":"add","_meta":{"progressToken":3}})),
            ),
            ("tools/list", Some(json!({}))),
            ("tools/list", None),
            ("ping", Some(json!(null))),
            (
                "x",
                Some(json!({"requestState":"s","_meta":{"keep":[1,2.5,"é\\n"]}})),
            ),
        ] {
            assert_eq!(
                match_key_halves(method, p.as_ref(), &mut Vec::new()).unwrap(),
                match_key(method, p.as_ref()).0,
                "{method} {p:?}"
            );
        }
    }
}
