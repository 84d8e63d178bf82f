//! `--faults SPEC`: failures injected on purpose, to test how a client copes. The grammar
//! (docs/play-time-and-faults.md has it with examples):
//!
//! ```text
//! SPEC  := FAULT (',' FAULT)*
//! FAULT := KIND ('@' WHERE)*          every WHERE must hold (none: every call)
//! KIND  := error=CODE                 the call is answered with JSON-RPC error CODE
//!        | drop                       the connection is cut when the call arrives
//!        | stall | stall=DURATION     the answer never comes, or comes DURATION late
//!        | skip                       a recorded server request (sampling, elicitation,
//!                                     roots) is not sent
//! WHERE := tool:NAME | prompt:NAME | resource:URI | method:METHOD
//!        | P%                         a share of the calls, chosen by the seed
//!        | after:N                    the client's messages after its first N
//! ```

use serde_json::Value;
use std::time::Duration;

/// One fault of `--faults`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// What happens.
    pub kind: FaultKind,
    /// When: every condition must hold.
    pub when: Vec<When>,
    /// The fault as it was written, for the summary.
    pub spec: String,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// The call gets this JSON-RPC error instead of its recorded answer.
    Error(i64),
    /// The connection is cut (stdio: play closes stdout and exits; HTTP: the session ends and
    /// the request's connection is cut).
    Drop,
    /// The answer never comes (`None`), or comes this much later.
    Stall(Option<Duration>),
    /// A recorded server→client request is not sent.
    Skip,
}

/// A condition on the message a fault applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// A call of this method with this name (`tools/call` and `name`, `prompts/get` and
    /// `name`, `resources/read` and `uri`).
    Target {
        /// The method.
        method: &'static str,
        /// The tool's or prompt's name, or the resource's URI.
        name: String,
    },
    /// The request's method (for `skip`: the server request's, such as
    /// `sampling/createMessage`).
    Method(String),
    /// This share of the calls, in percent, chosen by the seed.
    Share(f64),
    /// The client's messages after its first N (requests, notifications and answers alike).
    After(u64),
}

/// A `--faults` value that does not parse: which fault, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--faults {spec:?}: {why}")]
pub struct FaultError {
    /// The fault as written.
    pub spec: String,
    /// What is wrong with it.
    pub why: String,
}

impl crate::exit::Coded for FaultError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

/// Parses a comma-separated list of faults.
pub fn parse_faults(list: &str) -> Result<Vec<Fault>, FaultError> {
    list.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(parse_fault)
        .collect()
}

/// Parses one fault.
pub fn parse_fault(spec: &str) -> Result<Fault, FaultError> {
    let fail = |why: String| FaultError {
        spec: spec.to_string(),
        why,
    };
    let mut parts = spec.split('@');
    let head = parts.next().unwrap_or_default();
    let (name, value) = match head.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (head, None),
    };
    let kind = match (name, value) {
        ("error", Some(v)) => FaultKind::Error(
            v.parse()
                .map_err(|_| fail(format!("{v:?} is not a JSON-RPC error code such as -32603")))?,
        ),
        ("error", None) => return Err(fail("error needs a code: error=-32603".into())),
        ("drop", None) => FaultKind::Drop,
        ("stall", None) => FaultKind::Stall(None),
        ("stall", Some(v)) => {
            let d = humantime::parse_duration(v)
                .map_err(|e| fail(format!("{v:?} is not a duration such as 2s or 500ms ({e})")))?;
            FaultKind::Stall(Some(
                super::pace::bounded_delay(d, &format!("{v:?}")).map_err(fail)?,
            ))
        }
        ("skip", None) => FaultKind::Skip,
        ("drop" | "skip", Some(_)) => {
            return Err(fail(format!("{name} takes no value (say where with @)")))
        }
        _ => {
            return Err(fail(format!(
                "{name:?} is not a fault: error=CODE, drop, stall, stall=DURATION or skip"
            )))
        }
    };
    let when = parts
        .map(|w| parse_when(w).map_err(fail))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Fault {
        kind,
        when,
        spec: spec.to_string(),
    })
}

fn parse_when(w: &str) -> Result<When, String> {
    if let Some(pct) = w.strip_suffix('%') {
        let p: f64 = pct
            .parse()
            .map_err(|_| format!("{w:?} is not a share such as 25%"))?;
        if !(p.is_finite() && (0.0..=100.0).contains(&p)) {
            return Err(format!("{w} is not a share from 0% to 100%"));
        }
        return Ok(When::Share(p));
    }
    let Some((what, arg)) = w.split_once(':') else {
        return Err(format!(
            "{w:?} is not a place: tool:NAME, prompt:NAME, resource:URI, method:METHOD, P% or after:N"
        ));
    };
    if arg.is_empty() {
        return Err(format!("{what}: needs a value"));
    }
    let target = |method| {
        Ok(When::Target {
            method,
            name: arg.to_string(),
        })
    };
    match what {
        "tool" => target("tools/call"),
        "prompt" => target("prompts/get"),
        "resource" => target("resources/read"),
        "method" => Ok(When::Method(arg.to_string())),
        "after" => arg
            .parse()
            .map(When::After)
            .map_err(|_| format!("after:{arg}: not a number of messages")),
        _ => Err(format!(
            "{what:?} is not a place: tool, prompt, resource, method, P% or after"
        )),
    }
}

/// What a fault is tested against.
pub(crate) struct Call<'a> {
    /// The request's method (for a server request: its own method).
    pub method: &'a str,
    /// The client call's method and params (for a server request: the call it came during).
    pub call: Option<(&'a str, Option<&'a Value>)>,
    /// The number of the client message it came with (1, 2, …).
    pub msg_no: u64,
    /// What the seeded share is drawn for: the same call on the same tape draws the same.
    pub key: u64,
}

impl Fault {
    /// Whether the fault applies to `c` with this seed; `salt` tells the faults apart, so two
    /// shares draw independently.
    pub(crate) fn applies(&self, c: &Call<'_>, seed: u64, salt: u64) -> bool {
        self.when.iter().all(|w| match w {
            When::Target { method, name } => c.call.is_some_and(|(m, params)| {
                m == *method
                    && params
                        .and_then(|p| {
                            p.get(if *method == "resources/read" {
                                "uri"
                            } else {
                                "name"
                            })
                        })
                        .and_then(Value::as_str)
                        == Some(name.as_str())
            }),
            When::Method(m) => c.method == m,
            When::Share(p) => draw(seed, salt, c.key) * 100.0 < *p,
            When::After(n) => c.msg_no > *n,
        })
    }

    /// Whether a fault without a method or target applies to `method` at all: the handshake
    /// (`initialize`, `server/discover`) is faulted only when asked for by name, so that
    /// `error=-32603@25%` fails a quarter of the calls, not the connection.
    pub(crate) fn spares(&self, method: &str) -> bool {
        let named = self
            .when
            .iter()
            .any(|w| matches!(w, When::Method(_) | When::Target { .. }));
        !named && matches!(method, "initialize" | "server/discover")
    }
}

/// A number in `[0, 1)` drawn from the seed for (`salt`, `key`): SplitMix64's finalizer over
/// the three, which spreads every input bit over the output. A pure function, so the same seed
/// draws the same for the same call whatever order calls arrive in (no state to share between
/// HTTP sessions; no `rand` dependency needed for a hash).
pub(crate) fn draw(seed: u64, salt: u64, key: u64) -> f64 {
    let mut z = seed
        .wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(key.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stall_longer_than_a_day_is_refused() {
        let e = parse_faults("stall=300000000000years@tool:add").unwrap_err();
        assert!(e.to_string().contains("longer than a day"), "{e}");
        assert!(parse_faults("stall=24h@tool:add").is_ok());
    }

    #[test]
    fn each_kind_and_place_parses() {
        let f = parse_faults("error=-32603@tool:echo, drop@after:4,stall=2s@25%,stall,skip@method:sampling/createMessage").unwrap();
        assert_eq!(f.len(), 5);
        assert_eq!(f[0].kind, FaultKind::Error(-32603));
        assert_eq!(
            f[0].when,
            vec![When::Target {
                method: "tools/call",
                name: "echo".into()
            }]
        );
        assert_eq!(
            (f[1].kind.clone(), f[1].when.clone()),
            (FaultKind::Drop, vec![When::After(4)])
        );
        assert_eq!(f[2].kind, FaultKind::Stall(Some(Duration::from_secs(2))));
        assert_eq!(f[2].when, vec![When::Share(25.0)]);
        assert_eq!(
            (f[3].kind.clone(), f[3].when.len()),
            (FaultKind::Stall(None), 0)
        );
        assert_eq!(
            f[4].when,
            vec![When::Method("sampling/createMessage".into())]
        );
        assert_eq!(f[1].spec, "drop@after:4");
        // A comma separates faults: a URI with one cannot be named (said in the docs).
        let cut = parse_faults("error=-32000@resource:file:///a,b").unwrap_err();
        assert_eq!(cut.spec, "b");
    }

    #[test]
    fn a_bad_fault_says_which_and_why() {
        for (spec, why) in [
            ("error", "needs a code"),
            ("error=abc", "not a JSON-RPC error code"),
            ("drop=3", "takes no value"),
            ("stall=soon", "not a duration"),
            ("explode", "not a fault"),
            ("drop@150%", "0% to 100%"),
            ("drop@after:x", "not a number"),
            ("drop@tool:", "needs a value"),
            ("drop@nowhere", "not a place"),
            ("drop@where:x", "not a place"),
        ] {
            let e = parse_fault(spec).unwrap_err();
            assert!(e.why.contains(why), "{spec}: {e}");
            assert!(
                e.to_string().starts_with(&format!("--faults {spec:?}")),
                "{e}"
            );
        }
    }

    fn call<'a>(method: &'a str, params: Option<&'a Value>, msg_no: u64, key: u64) -> Call<'a> {
        Call {
            method,
            call: Some((method, params)),
            msg_no,
            key,
        }
    }

    #[test]
    fn targets_methods_and_after_select_calls() {
        let echo = json!({"name": "echo", "arguments": {}});
        let add = json!({"name": "add"});
        let f = parse_fault("error=1@tool:echo@after:2").unwrap();
        assert!(f.applies(&call("tools/call", Some(&echo), 3, 0), 7, 0));
        assert!(!f.applies(&call("tools/call", Some(&echo), 2, 0), 7, 0));
        assert!(!f.applies(&call("tools/call", Some(&add), 3, 0), 7, 0));
        assert!(!f.applies(&call("prompts/get", Some(&echo), 3, 0), 7, 0));
        let r = parse_fault("drop@resource:fixture://greeting").unwrap();
        let uri = json!({"uri": "fixture://greeting"});
        assert!(r.applies(&call("resources/read", Some(&uri), 1, 0), 7, 0));
        let skip = parse_fault("skip@method:roots/list").unwrap();
        let during = Call {
            method: "roots/list",
            call: None,
            msg_no: 1,
            key: 0,
        };
        assert!(skip.applies(&during, 7, 0));
        assert!(!parse_fault("skip@tool:echo")
            .unwrap()
            .applies(&during, 7, 0));
    }

    #[test]
    fn the_handshake_is_spared_unless_named() {
        assert!(parse_fault("error=1@50%").unwrap().spares("initialize"));
        assert!(parse_fault("drop@after:0")
            .unwrap()
            .spares("server/discover"));
        assert!(!parse_fault("error=1@method:initialize")
            .unwrap()
            .spares("initialize"));
        assert!(!parse_fault("error=1").unwrap().spares("tools/call"));
    }

    #[test]
    fn a_share_is_about_its_size_and_the_same_for_the_same_seed() {
        let f = parse_fault("error=1@25%").unwrap();
        let hits = |seed| {
            (0..10_000)
                .filter(|&k| f.applies(&call("tools/call", None, 1, k), seed, 0))
                .collect::<Vec<u64>>()
        };
        let a = hits(42);
        assert!((2_300..2_700).contains(&a.len()), "{}", a.len());
        assert_eq!(a, hits(42));
        assert_ne!(a, hits(43));
        // Another fault (salt) draws independently on the same calls.
        let other: Vec<u64> = (0..10_000)
            .filter(|&k| f.applies(&call("tools/call", None, 1, k), 42, 1))
            .collect();
        assert_ne!(a, other);
        assert!((0..1000).all(|k| (0.0..1.0).contains(&draw(9, 3, k))));
    }
}
