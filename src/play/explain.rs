//! Why a request was not on the tape, for the client (a JSON-RPC error) and for the human
//! (stderr): what was asked, and the nearest recorded calls with the exact JSON differences.

use crate::wire::canonical::{short, Difference};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The JSON-RPC error code play answers a miss with (implementation-defined server error range).
pub const MISS_CODE: i64 = -32099;

/// A recorded call of the same method, near to what was asked.
#[derive(Debug, Clone, Serialize)]
pub struct Near {
    /// Tape line of the recorded request.
    pub line: u64,
    /// Its `seq` on the tape.
    pub seq: u64,
    /// Already served earlier in this session.
    pub used: bool,
    /// Over HTTP: the recorded server refused it for its session (no session named, or one it
    /// never gave), so it answers no request in a session.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// Differences, recorded (`left`) against asked (`right`).
    pub differences: Vec<Difference>,
    /// Redacted values on the tape that matched what was asked (wildcards, not differences).
    pub wildcards: usize,
}

/// Why nothing on the tape answers a request.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum MissReason {
    /// The tape has no call of this method at all.
    MethodNotRecorded,
    /// Calls of this method were recorded, none with these params.
    NoMatch,
    /// This exact call was recorded, but fewer times than asked: all its answers are used.
    AllUsed {
        /// How many times it was recorded.
        recorded: usize,
    },
    /// Over HTTP: this exact call was recorded, and every time the server refused it for its
    /// session (no session named, or one it never gave): the tape has no answer to it in a
    /// session.
    RefusedForSession {
        /// How many times it was recorded.
        recorded: usize,
    },
    /// A request of this method was recorded too large to keep whole (`oversize`, over the
    /// recorder's `--max-message`), and what was asked is as large: it cannot be matched, the
    /// tape having only the request's length and first bytes.
    TooLarge {
        /// Tape line of the oversize request.
        line: u64,
        /// Its id as recorded (read from its first bytes), when known.
        recorded_id: Option<String>,
        /// Its length in bytes.
        len: u64,
    },
    /// `--match sequence`: the recording has another method at this place of the session, or
    /// none (its requests ran out).
    OutOfSequence {
        /// The request's place in the session, from 1 (pings take none).
        position: usize,
        /// The method the recording has there.
        recorded_method: Option<String>,
        /// Tape line of that recorded request.
        recorded_line: Option<u64>,
        /// How many requests the recorded session has (pings aside).
        recorded_requests: usize,
    },
}

impl MissReason {
    /// The reason of a content match's miss: whether the method was recorded at all, and how
    /// many of its recorded calls are the one asked.
    pub(crate) fn of(method_recorded: bool, identical: usize) -> MissReason {
        if !method_recorded {
            MissReason::MethodNotRecorded
        } else if identical > 0 {
            MissReason::AllUsed {
                recorded: identical,
            }
        } else {
            MissReason::NoMatch
        }
    }
}

/// A request play had no recorded answer for, explained (also the `data` of the error the
/// client gets).
#[derive(Debug, Clone, Serialize)]
pub struct Miss {
    /// The request's method.
    pub method: String,
    /// The params as matched (volatile fields removed).
    pub asked: Value,
    /// Why it missed.
    #[serde(flatten)]
    pub reason: MissReason,
    /// Up to three recorded calls of the method, nearest first (fewest differences).
    pub nearest: Vec<Near>,
    /// Every method on the tape with its count.
    pub recorded_methods: Vec<(String, usize)>,
    /// The matcher that ran (`--match`: `content`, `method` or `sequence`).
    pub matcher: String,
    /// The `--ignore-param` paths left out of matching, as given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// Tape lines skipped as malformed (`--skip-bad-lines`): the call may have been on one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<u64>,
}

impl Miss {
    /// One line, for the JSON-RPC error message: the default matcher goes unsaid, another one
    /// (or ignored params) is named at the end.
    pub fn headline(&self) -> String {
        let mut s = self.reason_line();
        if self.matcher != "content" || !self.ignored.is_empty() {
            let _ = write!(s, " ({})", self.matcher_line());
        }
        s
    }

    /// `--match content, ignoring $.arguments.nonce`.
    fn matcher_line(&self) -> String {
        let mut s = format!("--match {}", self.matcher);
        if !self.ignored.is_empty() {
            let _ = write!(s, ", ignoring {}", self.ignored.join(", "));
        }
        s
    }

    /// A miss of a request `asked_len` bytes long, on a tape where a request of its method was
    /// too large to record: when nothing the recorder kept whole from the client was as long
    /// (the recorder would have cut this one too), that is the reason given, not the nearest
    /// call of another shape.
    pub(crate) fn note_too_large(&mut self, index: &crate::tape::TapeIndex, asked_len: usize) {
        use crate::tape::index::Body;
        use crate::wire::{Dir, Kind};
        if !matches!(
            self.reason,
            MissReason::NoMatch | MissReason::MethodNotRecorded
        ) {
            return;
        }
        let client = || index.msgs.iter().filter(|m| m.dir == Dir::C2S);
        let Some(over) = client().find(|m| {
            m.kind == Kind::Oversize && m.method.as_deref() == Some(self.method.as_str())
        }) else {
            return;
        };
        let longest_whole = client()
            .filter_map(|m| match m.body {
                Body::Json { len, .. } | Body::Text { len, .. } | Body::B64 { len, .. } => {
                    Some(len as usize)
                }
                Body::Oversize { .. } => None,
            })
            .max()
            .unwrap_or(0);
        let Body::Oversize { len } = over.body else {
            return;
        };
        if asked_len > longest_whole {
            self.reason = MissReason::TooLarge {
                line: over.line,
                recorded_id: over.id.clone(),
                len,
            };
            self.nearest.clear();
        }
    }

    fn reason_line(&self) -> String {
        let what = format!("{} {}", self.method, short(Some(&self.asked), 120));
        match &self.reason {
            MissReason::TooLarge {
                line,
                recorded_id,
                len,
            } => format!(
                "no recorded answer for {what}: the recorded {} request like it (tape line {line}{}) was {len} bytes, too large to record: over the recorder's --max-message, the tape keeps only its length and first bytes, so it cannot be matched; re-record with a larger --max-message",
                self.method,
                recorded_id
                    .as_deref()
                    .map(|id| format!(", request id {id}"))
                    .unwrap_or_default()
            ),
            MissReason::OutOfSequence {
                position,
                recorded_method,
                recorded_line,
                recorded_requests,
            } => match (recorded_method, recorded_line) {
                (Some(m), Some(line)) => format!(
                    "no recorded answer for {what}: it is request {position} of the session, and the recording's request {position} (tape line {line}) is {m}"
                ),
                _ => format!(
                    "no recorded answer for {what}: it is request {position} of the session, and the recording has {recorded_requests} (--repeat last or cycle serves past the end)"
                ),
            },
            MissReason::MethodNotRecorded => format!("no recorded answer for {what}: the tape has no {} call", self.method),
            MissReason::AllUsed { recorded } => format!(
                "no recorded answer for {what}: this call was recorded {recorded} time{} and every answer is used",
                if *recorded == 1 { "" } else { "s" }
            ),
            MissReason::RefusedForSession { recorded } => format!(
                "no recorded answer for {what}: this call was recorded {recorded} time{}, and the server refused it each time for its session (no session named, or one it never gave)",
                if *recorded == 1 { "" } else { "s" }
            ),
            MissReason::NoMatch => {
                let mut s = format!("no recorded answer for {what}");
                if let Some(n) = self.nearest.first() {
                    let diffs: Vec<String> = n
                        .differences
                        .iter()
                        .take(3)
                        .map(|d| format!("{} recorded {} asked {}", d.path, short(d.left.as_ref(), 40), short(d.right.as_ref(), 40)))
                        .collect();
                    let _ = write!(s, "; nearest (tape line {}): {}", n.line, diffs.join(", "));
                }
                s
            }
        }
    }

    /// The full explanation for stderr.
    pub fn render(&self, client_id: &str) -> String {
        let mut s = format!("{} (request id {client_id})\n", self.reason_line());
        let _ = writeln!(
            s,
            "  asked:  {} {}",
            self.method,
            short(Some(&self.asked), 200)
        );
        let _ = writeln!(s, "  matched by: {}", self.matcher_line());
        match &self.reason {
            MissReason::OutOfSequence { .. } | MissReason::TooLarge { .. } => {}
            MissReason::MethodNotRecorded => {
                let list: Vec<String> = self
                    .recorded_methods
                    .iter()
                    .map(|(m, n)| format!("{m} ×{n}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "  the tape has: {}",
                    if list.is_empty() {
                        "no requests".into()
                    } else {
                        list.join(", ")
                    }
                );
            }
            MissReason::AllUsed { .. }
            | MissReason::NoMatch
            | MissReason::RefusedForSession { .. } => {
                if matches!(self.reason, MissReason::AllUsed { .. }) {
                    let _ = writeln!(
                        s,
                        "  (--repeat last or --repeat cycle serves used answers again)"
                    );
                }
                for n in &self.nearest {
                    let state = match (n.refused, n.used) {
                        (true, _) => "refused for its session",
                        (false, true) => "already used",
                        (false, false) => "unused",
                    };
                    if n.differences.is_empty() {
                        let _ =
                            writeln!(s, "  recorded at tape line {} ({state}): identical", n.line);
                        continue;
                    }
                    let _ = writeln!(
                        s,
                        "  nearest recorded call, tape line {} ({state}):",
                        n.line
                    );
                    let width = n
                        .differences
                        .iter()
                        .map(|d| d.path.len())
                        .max()
                        .unwrap_or(0)
                        .min(40);
                    for d in n.differences.iter().take(8) {
                        let _ = writeln!(
                            s,
                            "    {:width$}  recorded {}  asked {}",
                            d.path,
                            short(d.left.as_ref(), 60),
                            short(d.right.as_ref(), 60)
                        );
                    }
                    if n.wildcards > 0 {
                        let plural = if n.wildcards == 1 { "" } else { "s" };
                        let _ = writeln!(
                            s,
                            "    ({} redacted value{plural} on the tape matched as wildcards)",
                            n.wildcards
                        );
                    }
                    if n.differences.len() > 8 {
                        let _ =
                            writeln!(s, "    … and {} more differences", n.differences.len() - 8);
                    }
                }
            }
        }
        if !self.skipped_lines.is_empty() {
            let lines: Vec<String> = self.skipped_lines.iter().map(u64::to_string).collect();
            let _ = writeln!(
                s,
                "  tape lines skipped as malformed (--skip-bad-lines): {}; the call may have been on one",
                lines.join(", ")
            );
        }
        s
    }

    /// The JSON-RPC error object sent to the client.
    pub(crate) fn error_object(&self) -> Value {
        json!({
            "code": MISS_CODE,
            "message": format!("mcptape: {}", self.headline()),
            "data": { "mcptape": self },
        })
    }
}
