//! How many requests and notifications a server sent, by method, on the two sides of a
//! comparison (`diff`: two tapes; `check`: the recording and the live server). Reported beside
//! the answers, never graded and never in `diff`'s verdict: a server's log and progress messages
//! vary in number from run to run with timing. But a `list_changed` that no longer comes, log
//! messages a new build stopped sending or a sampling request it now makes are behaviour a user
//! wants to see, and comparing answers alone hides them.

use crate::tape::TapeIndex;
use crate::wire::{Dir, Kind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A method whose messages from the server differ in number between the two sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageCount {
    /// The server of a multi-server comparison (its label on the tape); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `notifications/message`, `notifications/tools/list_changed`, `sampling/createMessage`, …
    pub method: String,
    /// How many the first side has: the recording (`check`), tape A (`diff`).
    pub recorded: u64,
    /// How many the other side has: the live server (`check`), tape B (`diff`).
    pub observed: u64,
}

/// The server's requests and notifications on a conversation, counted by method.
pub fn counts_of(index: &TapeIndex) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for m in index.msgs.iter() {
        if m.dir == Dir::S2C && matches!(m.kind, Kind::Request | Kind::Notification) {
            *counts
                .entry(m.method.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }
    counts
}

/// The methods whose counts differ, in method order.
pub fn differing(
    recorded: &BTreeMap<String, u64>,
    observed: &BTreeMap<String, u64>,
) -> Vec<MessageCount> {
    let mut methods: Vec<&String> = recorded.keys().chain(observed.keys()).collect();
    methods.sort();
    methods.dedup();
    methods
        .into_iter()
        .filter_map(|m| {
            let (r, o) = (
                recorded.get(m).copied().unwrap_or(0),
                observed.get(m).copied().unwrap_or(0),
            );
            (r != o).then(|| MessageCount {
                server: None,
                method: m.clone(),
                recorded: r,
                observed: o,
            })
        })
        .collect()
}

/// One line a report gives a count: `notifications/message: 4 in A, 2 in B`, with the two
/// sides named as the report names them.
pub(crate) fn describe(c: &MessageCount, first: &str, other: &str) -> String {
    let server = c
        .server
        .as_ref()
        .map(|s| format!("server {s}: "))
        .unwrap_or_default();
    format!(
        "{server}{}: {} {first}, {} {other}",
        c.method, c.recorded, c.observed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_methods_whose_counts_differ_are_listed_either_way() {
        let map = |v: &[(&str, u64)]| -> BTreeMap<String, u64> {
            v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let a = map(&[("notifications/message", 4), ("notifications/progress", 2)]);
        let b = map(&[
            ("notifications/message", 2),
            ("notifications/progress", 2),
            ("sampling/createMessage", 1),
        ]);
        let d = differing(&a, &b);
        let got: Vec<_> = d
            .iter()
            .map(|c| (c.method.as_str(), c.recorded, c.observed))
            .collect();
        assert_eq!(
            got,
            [
                ("notifications/message", 4, 2),
                ("sampling/createMessage", 0, 1)
            ]
        );
        assert_eq!(
            describe(&d[0], "in A", "in B"),
            "notifications/message: 4 in A, 2 in B"
        );
        assert!(differing(&a, &a).is_empty());
    }
}
