//! `mcptape diff` reports: console text and Markdown.

use super::{
    change_lines, md_code, md_values, plural, surface_breaking, surface_lines, surface_table,
    Style, ARGS_WIDTH, MD_MAX_ROWS,
};
use crate::compare::{ChangeKind, ExchangeComparison, ExchangeRef, Outcome};
use crate::diff::{DiffReport, ModelDiff, Verdict};

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Same => "same",
        Verdict::OutputDrift => "output drift",
        Verdict::StructuralDrift => "structural drift",
    }
}

fn counts_line(r: &DiffReport) -> String {
    format!(
        "{} compared, {} drifted, {} only in A, {} only in B, {}",
        r.compared,
        r.drifts.len(),
        r.only_in_a.len(),
        r.only_in_b.len(),
        plural(
            r.tool_surface.len(),
            "tool-surface change",
            "tool-surface changes"
        )
    )
}

fn is_same(r: &DiffReport) -> bool {
    r.verdict == Verdict::Same
        && r.drifts.is_empty()
        && r.only_in_a.is_empty()
        && r.only_in_b.is_empty()
        && r.tool_surface.is_empty()
        && r.model.as_ref().is_none_or(|m| m.first.is_none())
}

/// Code Assist's setup calls (Gemini CLI signed in with Google), said apart from the model
/// requests they are taped beside, as `run` says them; `None` when neither run has any.
fn setup_beside(m: &ModelDiff) -> Option<String> {
    let calls = |n: usize| plural(n, "Code Assist setup call", "Code Assist setup calls");
    match (m.setup_a, m.setup_b) {
        (0, 0) => None,
        (a, b) if a == b => Some(format!("{} beside them in each", calls(a))),
        (a, b) => Some(format!("{} beside them in A, {b} in B", calls(a))),
    }
}

/// Agent runs: where the model requests of the two runs first differ, in words.
fn model_lines(r: &DiffReport) -> Vec<String> {
    let Some(m) = &r.model else {
        return Vec::new();
    };
    let setup = setup_beside(m);
    let Some(d) = &m.first else {
        return vec![format!(
            "model calls: the same {} requests{}",
            m.calls_a,
            setup.map(|s| format!(" ({s})")).unwrap_or_default()
        )];
    };
    let line = |l: Option<u64>| l.map_or("-".to_string(), |l| l.to_string());
    let endpoint = match &d.endpoint_b {
        Some(b) => format!("{} in A, {b} in B", d.endpoint),
        None => d.endpoint.clone(),
    };
    let mut out = vec![format!(
        "first model request that diverged: call {} ({endpoint}), A line {}, B line {} ({} model calls in A, {} in B{})",
        d.position,
        line(d.line_a),
        line(d.line_b),
        m.calls_a,
        m.calls_b,
        setup.map(|s| format!("; {s}")).unwrap_or_default()
    )];
    if d.line_a.is_none() || d.line_b.is_none() {
        out.push(format!(
            "  only {} made it",
            if d.line_a.is_some() { "A" } else { "B" }
        ));
    }
    for c in d.changes.iter().take(8) {
        let (a, b) = match (&c.recorded, &c.observed) {
            (Some(serde_json::Value::String(a)), Some(serde_json::Value::String(b))) => {
                crate::wire::canonical::around_difference(a, b)
            }
            (a, b) => crate::wire::canonical::short_pair(a.as_ref(), b.as_ref(), 60),
        };
        out.push(format!("  {}  {a} → {b}", c.path));
    }
    if d.changes.len() > 8 {
        out.push(format!("  … and {} more", d.changes.len() - 8));
    }
    out
}

/// A side as the reports name it: its path, and with `--server` the server compared
/// (`run.jsonl server fixture`).
fn side(path: &str, server: Option<&str>) -> String {
    match server {
        Some(label) => format!("{path} server {label}"),
        None => path.to_string(),
    }
}

/// [`side`] in Markdown: `` `run.jsonl` server `fixture` ``.
fn md_side(path: &str, server: Option<&str>) -> String {
    match server {
        Some(label) => format!("{} server {}", md_code(path), md_code(label)),
        None => md_code(path),
    }
}

fn lines_of(d: &ExchangeComparison) -> String {
    match d.other_line {
        Some(b) => format!("A line {}, B line {b}", d.exchange.line),
        None => format!("A line {}", d.exchange.line),
    }
}

/// Console text: the verdict and counts, the first drift (every drift with `all`), calls on one
/// side only, tool-surface changes.
pub fn diff_text(r: &DiffReport, all: bool, color: bool) -> String {
    let mut s = diff_text_body(r, all, color);
    for note in skipped_notes(r) {
        s.push_str(&format!("note: {note}\n"));
    }
    s
}

/// The lines each tape had skipped as malformed (`--skip-bad-lines`), for every rendering.
fn skipped_notes(r: &DiffReport) -> Vec<String> {
    [
        ("A", &r.a, &r.skipped_lines_a),
        ("B", &r.b, &r.skipped_lines_b),
    ]
    .into_iter()
    .filter(|(_, _, s)| !s.is_empty())
    .map(|(side, path, s)| {
        format!(
            "{side} ({path}): {}",
            crate::tape::reader::skipped_summary(s)
        )
    })
    .collect()
}

fn diff_text_body(r: &DiffReport, all: bool, color: bool) -> String {
    let st = Style::new(color);
    if is_same(r) {
        let exchanges = match r.compared {
            0 => None,
            1 => Some("the one exchange".to_string()),
            n => Some(format!("all {n} exchanges")),
        };
        // Agent runs: the model requests agree too (answers of a live model are not compared).
        let model = r.model.as_ref().map(|m| {
            let requests = match m.calls_a {
                0 => "no model request".to_string(),
                1 => "the one model request".to_string(),
                n => format!("all {n} model requests"),
            };
            match setup_beside(m) {
                Some(s) => format!("{requests} ({s})"),
                None => requests,
            }
        });
        let what: Vec<String> = exchanges.into_iter().chain(model).collect();
        let mut same = format!(
            "{}: {} and {} agree on {}\n",
            st.bold_green("same"),
            side(&r.a, r.server_a.as_deref()),
            side(&r.b, r.server_b.as_deref()),
            if what.is_empty() {
                "everything (no exchanges)".to_string()
            } else {
                what.join(" and ")
            }
        );
        for l in message_lines(r, st) {
            same.push_str(&l);
            same.push('\n');
        }
        return same;
    }
    let mut out: Vec<String> = Vec::new();
    let word = verdict_word(r.verdict);
    out.push(format!(
        "{}  {} {} {}",
        match r.verdict {
            Verdict::Same => st.bold_green(word),
            Verdict::OutputDrift => st.bold_yellow(word),
            Verdict::StructuralDrift => st.bold_red(word),
        },
        side(&r.a, r.server_a.as_deref()),
        st.dim("→"),
        side(&r.b, r.server_b.as_deref())
    ));
    out.push(format!("  {}", counts_line(r)));

    let kind_style = |k: ChangeKind, s: &str| match k {
        ChangeKind::MissingResponse
        | ChangeKind::ErrorStatusChange
        | ChangeKind::StructureChange => st.red(s),
        ChangeKind::OrderingChange | ChangeKind::ValueChange => st.yellow(s),
    };
    let n = r.drifts.len();
    let shown = if all { n } else { n.min(1) };
    for (i, d) in r.drifts.iter().take(shown).enumerate() {
        out.push(String::new());
        let title = if all && n > 1 {
            format!("drift {} of {n}:", i + 1)
        } else {
            "first drift:".to_string()
        };
        out.push(format!(
            "{} {}  {}",
            st.bold(&title),
            d.exchange.describe(ARGS_WIDTH),
            st.dim(&format!("({})", lines_of(d)))
        ));
        if d.outcome == Outcome::Unanswered {
            out.push(format!("  {}", st.red("B made the call but got no answer")));
        }
        out.extend(change_lines(&d.changes, "  ", st, kind_style));
    }
    if shown < n {
        out.push(String::new());
        out.push(st.dim(&format!(
            "{} more {}; --all shows {}",
            n - shown,
            if n - shown == 1 { "drift" } else { "drifts" },
            if n - shown == 1 { "it" } else { "them" }
        )));
    }

    for (title, refs) in [("only in A", &r.only_in_a), ("only in B", &r.only_in_b)] {
        if refs.is_empty() {
            continue;
        }
        out.push(String::new());
        out.push(st.bold_red(title));
        out.extend(ref_lines(refs, st));
    }

    if !r.tool_surface.is_empty() {
        out.push(String::new());
        let title = "tool surface";
        out.push(if r.tool_surface.iter().any(|t| surface_breaking(t.kind)) {
            st.bold_red(title)
        } else {
            st.bold_yellow(title)
        });
        out.extend(surface_lines(&r.tool_surface, "  ", st));
    }
    let messages = message_lines(r, st);
    if !messages.is_empty() {
        out.push(String::new());
        out.extend(messages);
    }
    let model = model_lines(r);
    if !model.is_empty() {
        out.push(String::new());
        out.extend(model);
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

/// The server's messages whose number differs from A to B ([`super::message_lines`]).
fn message_lines(r: &DiffReport, st: Style) -> Vec<String> {
    super::message_lines(&r.server_messages, "in A", "in B", "verdict", st)
}

fn ref_lines(refs: &[ExchangeRef], st: Style) -> Vec<String> {
    let label = |e: &ExchangeRef| format!("line {}", e.line);
    let w = refs.iter().map(|e| label(e).len()).max().unwrap_or(0);
    refs.iter()
        .map(|e| {
            format!(
                "  {}  {}",
                st.bold(&super::pad(&label(e), w)),
                e.describe(ARGS_WIDTH)
            )
        })
        .collect()
}

/// Markdown: the verdict and counts, every drift in a table, calls on one side only, tool
/// surface changes.
pub fn diff_markdown(r: &DiffReport) -> String {
    let mut s = diff_markdown_body(r);
    for note in skipped_notes(r) {
        s.push_str(&format!(
            "\n**Note:** {} (`--skip-bad-lines`).\n",
            super::md_cell(&note)
        ));
    }
    s
}

fn diff_markdown_body(r: &DiffReport) -> String {
    let same = is_same(r);
    let mut s = format!(
        "## {} mcptape diff: {}\n\n{} → {}: {}.\n\n",
        match r.verdict {
            Verdict::Same => "✅",
            Verdict::OutputDrift => "⚠️",
            Verdict::StructuralDrift => "❌",
        },
        verdict_word(r.verdict),
        md_side(&r.a, r.server_a.as_deref()),
        md_side(&r.b, r.server_b.as_deref()),
        counts_line(r)
    );
    if same {
        s.push_str(&md_messages(r));
        return s;
    }
    if !r.drifts.is_empty() {
        s.push_str("### Drifts\n\n");
        s.push_str("| Exchange | Lines | Kind | Path | A | B |\n");
        s.push_str("| --- | --- | --- | --- | --- | --- |\n");
        let mut rows = 0;
        let total: usize = r.drifts.iter().map(|d| d.changes.len().max(1)).sum();
        'outer: for d in &r.drifts {
            let name = md_code(&d.exchange.describe(ARGS_WIDTH));
            let lines = match d.other_line {
                Some(b) => format!("{} / {b}", d.exchange.line),
                None => d.exchange.line.to_string(),
            };
            if d.changes.is_empty() {
                if rows == MD_MAX_ROWS {
                    break;
                }
                let what = if d.outcome == Outcome::Unanswered {
                    format!(
                        "{} | `$` | `…` | no answer",
                        ChangeKind::MissingResponse.as_str()
                    )
                } else {
                    " | | |".to_string()
                };
                s.push_str(&format!("| {name} | {lines} | {what} |\n"));
                rows += 1;
            }
            for (i, c) in d.changes.iter().enumerate() {
                if rows == MD_MAX_ROWS {
                    break 'outer;
                }
                let (n, l) = if i == 0 {
                    (name.as_str(), lines.as_str())
                } else {
                    ("", "")
                };
                let (r, o) = md_values(c);
                s.push_str(&format!(
                    "| {n} | {l} | {} | {} | {r} | {o} |\n",
                    c.kind.as_str(),
                    md_code(&c.path),
                ));
                rows += 1;
            }
        }
        if total > rows {
            s.push_str(&format!(
                "\n…and {} more (see `--format json`).\n",
                plural(total - rows, "change", "changes")
            ));
        }
        s.push('\n');
    }
    for (title, refs) in [("Only in A", &r.only_in_a), ("Only in B", &r.only_in_b)] {
        if refs.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "### {title}\n\n| Line | Exchange |\n| ---: | --- |\n"
        ));
        for e in refs.iter().take(MD_MAX_ROWS) {
            s.push_str(&format!(
                "| {} | {} |\n",
                e.line,
                md_code(&e.describe(ARGS_WIDTH))
            ));
        }
        if refs.len() > MD_MAX_ROWS {
            s.push_str(&format!("\n…and {} more.\n", refs.len() - MD_MAX_ROWS));
        }
        s.push('\n');
    }
    if !r.tool_surface.is_empty() {
        s.push_str("### Tool surface\n\n");
        s.push_str(&surface_table(&r.tool_surface));
        s.push('\n');
    }
    s.push_str(&md_messages(r));
    let model = model_lines(r);
    if !model.is_empty() {
        s.push_str("\n### Model calls\n\n");
        for l in model {
            s.push_str(&format!("- {}\n", md_escape_line(l.trim_start())));
        }
    }
    s.truncate(s.trim_end().len());
    s.push('\n');
    s
}

/// Markdown: the server messages whose number differs from A to B.
fn md_messages(r: &DiffReport) -> String {
    super::md_message_list(&r.server_messages, "in A", "in B", "verdict")
}

/// A line of text safe in a Markdown list item (code spans for paths and values).
fn md_escape_line(l: &str) -> String {
    l.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::surface::{SurfaceKind, ToolChange};
    use crate::compare::Change;
    use serde_json::json;

    fn eref(line: u64, target: &str, args: serde_json::Value) -> ExchangeRef {
        ExchangeRef {
            server: None,
            method: "tools/call".into(),
            target: Some(target.into()),
            arguments: Some(args),
            line,
            appended: false,
        }
    }

    fn drift(line: u64, other: u64, path: &str, a: i64, b: i64) -> ExchangeComparison {
        ExchangeComparison {
            exchange: eref(line, "add", json!({"a": a})),
            outcome: Outcome::Changed,
            other_line: Some(other),
            changes: vec![Change {
                kind: ChangeKind::ValueChange,
                path: path.into(),
                recorded: Some(json!(a)),
                observed: Some(json!(b)),
            }],
            latency_us: None,
            other_latency_us: None,
        }
    }

    #[test]
    fn the_first_model_request_that_diverged_is_named_with_what_differs() {
        let mut r = sample();
        r.model = Some(crate::diff::ModelDiff {
            calls_a: 2,
            calls_b: 2,
            setup_a: 0,
            setup_b: 0,
            first: Some(crate::diff::ModelDivergence {
                position: 2,
                line_a: Some(5),
                line_b: Some(7),
                endpoint: "messages".into(),
                endpoint_b: None,
                changes: vec![Change {
                    kind: ChangeKind::ValueChange,
                    path: "$.messages[0].content".into(),
                    recorded: Some(json!(format!("{}list files", "x".repeat(200)))),
                    observed: Some(json!(format!("{}delete files", "x".repeat(200)))),
                }],
            }),
        });
        let text = diff_text(&r, false, false);
        assert!(
            text.contains(
                "first model request that diverged: call 2 (messages), A line 5, B line 7"
            ),
            "{text}"
        );
        assert!(
            text.contains("list files") && text.contains("delete files"),
            "{text}"
        );
        assert!(diff_markdown(&r).contains("### Model calls"));
        // Code Assist's setup calls counted beside the model calls, not among them.
        let m = r.model.as_mut().unwrap();
        (m.setup_a, m.setup_b) = (3, 2);
        let text = diff_text(&r, false, false);
        assert!(
            text.contains(
                "A line 5, B line 7 (2 model calls in A, 2 in B; 3 Code Assist setup calls beside them in A, 2 in B)"
            ),
            "{text}"
        );
    }

    fn sample() -> DiffReport {
        let mut second = drift(9, 11, "$.result.structuredContent.sum", 2, 5);
        second.changes.push(Change {
            kind: ChangeKind::StructureChange,
            path: "$.result.isError".into(),
            recorded: None,
            observed: Some(json!(true)),
        });
        DiffReport {
            a: "a.jsonl".into(),
            b: "b.jsonl".into(),
            server_a: None,
            server_b: None,
            verdict: Verdict::StructuralDrift,
            compared: 12,
            drifts: vec![
                drift(7, 8, "$.result.content[0].text", 1, 3),
                second,
                drift(13, 15, "$.result.x", 4, 6),
            ],
            only_in_a: vec![eref(20, "gone", json!({"q": "x|y"}))],
            only_in_b: vec![],
            server_messages: vec![],
            model: None,
            skipped_lines_a: vec![],
            skipped_lines_b: vec![],
            tool_surface: vec![
                ToolChange {
                    server: None,
                    tool: "gone".into(),
                    kind: SurfaceKind::Removed,
                    details: vec![],
                },
                ToolChange {
                    server: None,
                    tool: "look".into(),
                    kind: SurfaceKind::Widened,
                    details: vec![
                        "inputSchema: property `lang` added".into(),
                        "outputSchema: property `z` added".into(),
                    ],
                },
            ],
        }
    }

    #[test]
    fn text_first_drift_and_more() {
        let s = diff_text(&sample(), false, false);
        let expected = "\
structural drift  a.jsonl → b.jsonl
  12 compared, 3 drifted, 1 only in A, 0 only in B, 2 tool-surface changes

first drift: tools/call add {\"a\":1}  (A line 7, B line 8)
  value-change  $.result.content[0].text  1  →  3

2 more drifts; --all shows them

only in A
  line 20  tools/call gone {\"q\":\"x|y\"}

tool surface
  removed  gone
  widened  look  inputSchema: property `lang` added
                 outputSchema: property `z` added
";
        assert_eq!(s, expected);
    }

    #[test]
    fn text_all_and_colour() {
        let s = diff_text(&sample(), true, false);
        assert!(
            s.contains("drift 1 of 3: tools/call add {\"a\":1}  (A line 7, B line 8)\n"),
            "{s}"
        );
        assert!(s.contains("drift 2 of 3: tools/call add {\"a\":2}  (A line 9, B line 11)\n  value-change      $.result.structuredContent.sum  2         →  5\n  structure-change  $.result.isError                (absent)  →  true\n"), "{s}");
        assert!(s.contains("drift 3 of 3"), "{s}");
        assert!(!s.contains("--all"), "{s}");
        let c = diff_text(&sample(), false, true);
        assert!(c.contains("\x1b[1;31mstructural drift\x1b[0m"), "{c}");
    }

    #[test]
    fn same_is_one_line() {
        let r = DiffReport {
            a: "a.jsonl".into(),
            b: "b.jsonl".into(),
            server_a: None,
            server_b: None,
            verdict: Verdict::Same,
            compared: 12,
            drifts: vec![],
            only_in_a: vec![],
            only_in_b: vec![],
            server_messages: vec![],
            model: None,
            skipped_lines_a: vec![],
            skipped_lines_b: vec![],
            tool_surface: vec![],
        };
        assert_eq!(
            diff_text(&r, false, false),
            "same: a.jsonl and b.jsonl agree on all 12 exchanges\n"
        );
        // Server messages whose number differs are said, and leave the verdict alone.
        let quieter = DiffReport {
            server_messages: vec![crate::compare::server_messages::MessageCount {
                server: None,
                method: "notifications/message".into(),
                recorded: 4,
                observed: 2,
            }],
            ..r.clone()
        };
        assert_eq!(
            diff_text(&quieter, false, false),
            "same: a.jsonl and b.jsonl agree on all 12 exchanges\n\
             server messages, in number (not in the verdict)\n  \
             notifications/message: 4 in A, 2 in B\n"
        );
        assert!(diff_markdown(&quieter).contains(
            "### Server messages, in number (not in the verdict)\n\n- `notifications/message`"
        ));
        let run = DiffReport {
            model: Some(crate::diff::ModelDiff {
                calls_a: 2,
                calls_b: 2,
                setup_a: 0,
                setup_b: 0,
                first: None,
            }),
            ..r.clone()
        };
        assert_eq!(
            diff_text(&run, false, false),
            "same: a.jsonl and b.jsonl agree on all 12 exchanges and all 2 model requests\n"
        );
        // Gemini CLI signed in with Google: its Code Assist setup calls said apart.
        let gemini = |setup_a, setup_b| DiffReport {
            model: Some(crate::diff::ModelDiff {
                calls_a: 2,
                calls_b: 2,
                setup_a,
                setup_b,
                first: None,
            }),
            ..r.clone()
        };
        assert_eq!(
            diff_text(&gemini(5, 5), false, false),
            "same: a.jsonl and b.jsonl agree on all 12 exchanges and all 2 model requests (5 Code Assist setup calls beside them in each)\n"
        );
        assert_eq!(
            diff_text(&gemini(1, 4), false, false),
            "same: a.jsonl and b.jsonl agree on all 12 exchanges and all 2 model requests (1 Code Assist setup call beside them in A, 4 in B)\n"
        );
        let md = diff_markdown(&r);
        assert!(md.starts_with("## ✅ mcptape diff: same\n"), "{md}");
        assert!(!md.contains("###"), "{md}");
    }

    /// With `--server`, every rendering names the server compared on each side.
    #[test]
    fn the_servers_compared_are_named() {
        let mut r = sample();
        (r.server_a, r.server_b) = (Some("fixture".into()), Some("default".into()));
        let text = diff_text(&r, false, false);
        assert!(
            text.starts_with("structural drift  a.jsonl server fixture → b.jsonl server default\n"),
            "{text}"
        );
        assert!(
            diff_markdown(&r)
                .contains("`a.jsonl` server `fixture` → `b.jsonl` server `default`: 12 compared"),
            "{}",
            diff_markdown(&r)
        );
        let same = DiffReport {
            verdict: Verdict::Same,
            drifts: vec![],
            only_in_a: vec![],
            tool_surface: vec![],
            ..r.clone()
        };
        assert_eq!(
            diff_text(&same, false, false),
            "same: a.jsonl server fixture and b.jsonl server default agree on all 12 exchanges\n"
        );
        let json = serde_json::to_value(&same).unwrap();
        assert_eq!(
            (&json["server_a"], &json["server_b"]),
            (&json!("fixture"), &json!("default"))
        );
        let plain = serde_json::to_value(sample()).unwrap();
        assert!(plain.get("server_a").is_none() && plain.get("server_b").is_none());
    }

    #[test]
    fn unanswered_drift() {
        let mut r = sample();
        r.drifts = vec![ExchangeComparison {
            exchange: eref(7, "slow", json!({})),
            outcome: Outcome::Unanswered,
            other_line: Some(8),
            changes: vec![],
            latency_us: None,
            other_latency_us: None,
        }];
        let s = diff_text(&r, false, false);
        assert!(s.contains("first drift: tools/call slow {}  (A line 7, B line 8)\n  B made the call but got no answer\n"), "{s}");
        let md = diff_markdown(&r);
        assert!(
            md.contains(
                "| `tools/call slow {}` | 7 / 8 | missing-response | `$` | `…` | no answer |\n"
            ),
            "{md}"
        );
    }

    #[test]
    fn markdown() {
        let s = diff_markdown(&sample());
        assert!(s.starts_with("## ❌ mcptape diff: structural drift\n\n`a.jsonl` → `b.jsonl`: 12 compared, 3 drifted, 1 only in A, 0 only in B, 2 tool-surface changes.\n"), "{s}");
        assert!(s.contains("| `tools/call add {\"a\":2}` | 9 / 11 | value-change | `$.result.structuredContent.sum` | `2` | `5` |\n|  |  | structure-change | `$.result.isError` | *absent* | `true` |\n"), "{s}");
        assert!(s.contains("### Only in A\n\n| Line | Exchange |\n| ---: | --- |\n| 20 | `tools/call gone {\"q\":\"x\\|y\"}` |\n"), "{s}");
        assert!(s.contains("| `gone` | **removed** |  |\n"), "{s}");
        assert!(s.contains("| `look` | widened | inputSchema: property `lang` added<br>outputSchema: property `z` added |\n"), "{s}");
        assert!(!s.contains("### Only in B"), "{s}");
    }
}
