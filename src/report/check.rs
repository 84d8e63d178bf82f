//! `mcptape check` reports: console, Markdown, JUnit XML, shields.io badge.

use super::{
    change_lines, md_cell, md_code, md_values, ms, pad, pct, plural, surface_lines, surface_table,
    Style, ARGS_WIDTH, MD_MAX_ROWS,
};
use crate::check::grade::WEIGHTS;
use crate::check::report::{CheckReport, CheckedExchange, Grade, Status};
use crate::compare::ChangeKind;
use crate::wire::canonical::short_pair;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

struct Counts {
    pass: usize,
    regression: usize,
    missing: usize,
    unrecorded: usize,
}

fn counts(r: &CheckReport) -> Counts {
    let n = |s: Status| r.exchanges.iter().filter(|e| e.status == s).count();
    Counts {
        pass: n(Status::Pass),
        regression: n(Status::Regression),
        missing: n(Status::Missing),
        unrecorded: n(Status::Unrecorded),
    }
}

fn with_status(r: &CheckReport, s: Status) -> impl Iterator<Item = &CheckedExchange> {
    r.exchanges.iter().filter(move |e| e.status == s)
}

fn slower(r: &CheckReport) -> Vec<&CheckedExchange> {
    if r.latency.is_none() {
        return Vec::new();
    }
    r.exchanges.iter().filter(|e| e.slower).collect()
}

/// What the gate asked for, and why it failed: (`passed`, `None` when no gate was set, else the
/// requirements or the failure reasons).
fn gate_text(r: &CheckReport) -> (bool, Option<String>) {
    let g = &r.gate;
    let mut asked = Vec::new();
    if let Some(m) = g.min_grade {
        asked.push(format!("--min-grade {}", m.as_str()));
    }
    if g.default {
        asked.push("the default gate: any regression fails".to_string());
    } else if g.fail_on_regression {
        asked.push("--fail-on-regression".to_string());
    }
    if g.passed {
        let text = (!asked.is_empty()).then(|| asked.join(", "));
        return (true, text);
    }
    let mut why = Vec::new();
    if r.exchanges.is_empty() {
        why.push("nothing was checked: the baseline holds no exchange".to_string());
    } else if counts(r).unrecorded == r.exchanges.len() {
        why.push("nothing was checked: the baseline holds no answer to compare with".to_string());
    }
    if let Some(m) = g.min_grade {
        if r.grade > m {
            why.push(format!(
                "grade {} is below --min-grade {}",
                r.grade.as_str(),
                m.as_str()
            ));
        }
    }
    if g.fail_on_regression && r.regression_count() > 0 {
        // What did not pass, counted as the summary counts it: a missing response is not a
        // regression there.
        let c = counts(r);
        let failing: Vec<String> = [
            (c.regression, "regression", "regressions"),
            (c.missing, "missing response", "missing responses"),
        ]
        .into_iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| plural(n, one, many))
        .collect();
        why.push(format!(
            "{} ({})",
            failing.join(" and "),
            if g.default {
                "the default gate: any regression fails; --min-grade sets another"
            } else {
                "--fail-on-regression"
            }
        ));
    }
    if why.is_empty() {
        why = asked;
    }
    (false, (!why.is_empty()).then(|| why.join("; ")))
}

fn grade_style(st: Style, g: Grade, s: &str) -> String {
    match g {
        Grade::A | Grade::B => st.bold_green(s),
        Grade::C | Grade::D => st.bold_yellow(s),
        Grade::F => st.bold_red(s),
    }
}

fn latency_rule(r: &CheckReport) -> String {
    match &r.latency {
        Some(l) => format!("over {}× and {} ms", l.factor, l.floor_ms),
        None => String::new(),
    }
}

fn line_label(e: &CheckedExchange) -> String {
    format!("line {}", e.exchange.line)
}

/// A human summary for a terminal.
pub fn check_console(r: &CheckReport, color: bool) -> String {
    let st = Style::new(color);
    let mut out = console_summary(r, st);
    let regressions: Vec<_> = with_status(r, Status::Regression).collect();
    if !regressions.is_empty() {
        out.push(String::new());
        out.push(st.bold_red("regressions"));
        let lw = label_width(&regressions);
        for e in regressions {
            out.push(console_row(e, lw, st));
            out.extend(change_lines(&e.changes, "    ", st, |_, s| st.red(s)));
        }
    }
    let missing: Vec<_> = with_status(r, Status::Missing).collect();
    if !missing.is_empty() {
        out.push(String::new());
        out.push(st.bold_red("missing responses"));
        let lw = label_width(&missing);
        for e in missing {
            out.push(console_row(e, lw, st));
            out.push(format!(
                "    {}",
                st.red(e.detail.as_deref().unwrap_or("no answer"))
            ));
            let others: Vec<_> = e
                .changes
                .iter()
                .filter(|c| c.kind != ChangeKind::MissingResponse)
                .cloned()
                .collect();
            out.extend(change_lines(&others, "    ", st, |_, s| st.red(s)));
        }
    }
    let unrecorded: Vec<_> = with_status(r, Status::Unrecorded).collect();
    if !unrecorded.is_empty() {
        out.push(String::new());
        out.push(st.bold_yellow(UNRECORDED_HEADING));
        let lw = label_width(&unrecorded);
        for e in unrecorded {
            out.push(console_row(e, lw, st));
            out.push(format!("    {}", st.dim(e.detail.as_deref().unwrap_or(""))));
        }
    }
    if !r.tool_surface.is_empty() {
        out.push(String::new());
        out.push(st.bold("tool surface"));
        out.extend(surface_lines(&r.tool_surface, "  ", st));
    }
    let messages = super::message_lines(&r.server_messages, "recorded", "live", "grade", st);
    if !messages.is_empty() {
        out.push(String::new());
        out.extend(messages);
    }
    out.extend(console_slower(r, st));
    out.extend(console_ending(r, st));
    let mut s = out.join("\n");
    s.push('\n');
    s
}

/// The console section of the exchanges the recording has no answer for.
const UNRECORDED_HEADING: &str = "not on the tape (the recording has no answer for it: not graded)";

/// The head of the console report: what was checked, the grade and counts, the dimensions.
fn console_summary(r: &CheckReport, st: Style) -> Vec<String> {
    let c = counts(r);
    let mut out: Vec<String> = Vec::new();
    out.push(format!(
        "{} {}{} against {} {}",
        st.bold("check"),
        r.tape,
        r.server_label
            .as_ref()
            .map(|l| format!(" server {l}"))
            .unwrap_or_default(),
        r.server,
        st.dim(&format!(
            "({}, {})",
            plural(r.exchanges.len(), "exchange", "exchanges"),
            ms(r.duration_ms.saturating_mul(1000))
        ))
    ));
    let count = |n: usize, one: &str, many: &str, bad: bool| {
        let s = plural(n, one, many);
        match (n, bad) {
            (0, _) => st.dim(&s),
            (_, true) => st.red(&s),
            (_, false) => st.green(&s),
        }
    };
    out.push(format!(
        "{}  {:.1}/100   {}   {}   {}{}",
        grade_style(st, r.grade, &format!("grade {}", r.grade.as_str())),
        r.score,
        count(c.pass, "pass", "pass", false),
        count(c.regression, "regression", "regressions", true),
        count(c.missing, "missing", "missing", true),
        if c.unrecorded > 0 {
            format!(
                "   {}",
                st.yellow(&format!("{} not on the tape", c.unrecorded))
            )
        } else {
            String::new()
        },
    ));
    let d = &r.dimensions;
    out.push(st.dim(&format!(
        "  responsiveness {}   match rate {}   error parity {}   structural stability {}",
        pct(d.responsiveness),
        pct(d.match_rate),
        pct(d.error_parity),
        pct(d.structural_stability)
    )));
    if r.capped {
        out.push(st.yellow("  capped at D: a response is missing"));
    }
    if c.regression == 0 && c.missing == 0 && c.pass > 0 {
        let graded = if c.unrecorded > 0 { "graded " } else { "" };
        out.push(st.green(&format!(
            "  {} answered as recorded",
            if c.pass == 1 {
                format!("the {graded}exchange")
            } else {
                format!("all {} {graded}exchanges", c.pass)
            }
        )));
    }
    out
}

/// The width of the widest `line N` label of `rows`.
fn label_width(rows: &[&CheckedExchange]) -> usize {
    rows.iter().map(|e| line_label(e).len()).max().unwrap_or(0)
}

/// `  line N  method target args` for one exchange of a section.
fn console_row(e: &CheckedExchange, lw: usize, st: Style) -> String {
    format!(
        "  {}  {}",
        st.bold(&pad(&line_label(e), lw)),
        e.exchange.describe(ARGS_WIDTH)
    )
}

/// The exchanges over the latency rule, recorded → observed.
fn console_slower(r: &CheckReport, st: Style) -> Vec<String> {
    let mut out = Vec::new();
    let slow = slower(r);
    if !slow.is_empty() {
        out.push(String::new());
        out.push(st.bold_yellow(&format!("slower ({})", latency_rule(r))));
        let lat = |v: Option<u64>| v.map(ms).unwrap_or_else(|| "?".into());
        let lw = slow.iter().map(|e| line_label(e).len()).max().unwrap_or(0);
        let rw = slow
            .iter()
            .map(|e| lat(e.recorded_latency_us).len())
            .max()
            .unwrap_or(0);
        let ow = slow
            .iter()
            .map(|e| lat(e.observed_latency_us).len())
            .max()
            .unwrap_or(0);
        for e in slow {
            out.push(format!(
                "  {}  {:>rw$} {} {}  {}",
                st.bold(&pad(&line_label(e), lw)),
                lat(e.recorded_latency_us),
                st.dim("→"),
                st.yellow(&format!("{:>ow$}", lat(e.observed_latency_us))),
                e.exchange.describe(ARGS_WIDTH)
            ));
        }
    }
    out
}

/// The run error, the updated baseline, and the gate: passed (what it asked) or failed (why).
fn console_ending(r: &CheckReport, st: Style) -> Vec<String> {
    let (passed, gate) = gate_text(r);
    let mut out = Vec::new();
    if !r.skipped_lines.is_empty() {
        out.push(String::new());
        out.push(format!(
            "{} {}",
            st.bold_yellow("baseline:"),
            crate::tape::reader::skipped_summary(&r.skipped_lines)
        ));
    }
    if let Some(err) = &r.run_error {
        out.push(String::new());
        out.push(format!(
            "{} {err}{}",
            st.bold_red("run error:"),
            exit_note(r)
        ));
    }
    if let Some(b) = &r.updated_backup {
        out.push(String::new());
        out.push(format!(
            "{} {}; the previous one is kept at {b}",
            st.green("baseline updated:"),
            r.tape
        ));
    }
    // The gate on a line of its own, last: what CI reads first.
    out.push(String::new());
    if r.updated_backup.is_some() {
        out.push(st.green(
            "gate: not applied — --update accepted the changes above as the new baseline (exit 0)",
        ));
        return out;
    }
    out.push(match (passed, gate) {
        (false, Some(why)) => format!("{} {why}", st.bold_red("gate failed:")),
        (false, None) => st.bold_red("gate failed"),
        (true, Some(asked)) => format!("{} ({asked})", st.green("gate passed")),
        (true, None) => st.dim("no gate"),
    });
    out
}

fn exit_note(r: &CheckReport) -> String {
    match &r.server_exit {
        Some(x) => match (x.code, x.signal) {
            (Some(c), _) => format!(" (the server exited with code {c})"),
            (None, Some(sig)) => format!(" (the server was killed by signal {sig})"),
            (None, None) => String::new(),
        },
        None => String::new(),
    }
}

/// Markdown for a CI step summary.
pub fn check_markdown(r: &CheckReport) -> String {
    let mut s = md_summary(r);
    md_regressions(r, &mut s);
    md_missing(r, &mut s);
    md_unrecorded(r, &mut s);
    if !r.tool_surface.is_empty() {
        s.push_str("### Tool surface\n\n");
        s.push_str(&surface_table(&r.tool_surface));
        s.push('\n');
    }
    s.push_str(&super::md_message_list(
        &r.server_messages,
        "recorded",
        "live",
        "grade",
    ));
    md_slower(r, &mut s);
    md_ending(r, &mut s);
    s
}

/// The heading (grade and score), the counts, the dimensions' table.
fn md_summary(r: &CheckReport) -> String {
    let c = counts(r);
    let (passed, _) = gate_text(r);
    let mut s = format!(
        "## {} mcptape check: grade {} · {:.1} / 100\n\n",
        if passed { "✅" } else { "❌" },
        r.grade.as_str(),
        r.score
    );
    s.push_str(&format!(
        "{}{} against {}: {}, {} pass, {}, {} missing{} ({}).\n\n",
        md_code(&r.tape),
        r.server_label
            .as_ref()
            .map(|l| format!(" server {}", md_code(l)))
            .unwrap_or_default(),
        md_code(&r.server),
        plural(r.exchanges.len(), "exchange", "exchanges"),
        c.pass,
        plural(c.regression, "regression", "regressions"),
        c.missing,
        if c.unrecorded > 0 {
            format!(", {} not on the tape", c.unrecorded)
        } else {
            String::new()
        },
        ms(r.duration_ms.saturating_mul(1000)),
    ));
    if !r.other_servers.is_empty() {
        let others: Vec<String> = r.other_servers.iter().map(|l| md_code(l)).collect();
        s.push_str(&format!(
            "The tape's other MCP servers were not checked: {} (`--server LABEL` checks one).\n\n",
            others.join(", ")
        ));
    }
    let d = &r.dimensions;
    s.push_str("| Dimension | Weight | Score |\n| --- | ---: | ---: |\n");
    for (name, w, v) in [
        ("Responsiveness", WEIGHTS.responsiveness, d.responsiveness),
        ("Match rate", WEIGHTS.match_rate, d.match_rate),
        ("Error parity", WEIGHTS.error_parity, d.error_parity),
        (
            "Structural stability",
            WEIGHTS.structural_stability,
            d.structural_stability,
        ),
    ] {
        s.push_str(&format!("| {name} | {} | {} |\n", pct(w), pct(v)));
    }
    s.push_str(&format!("| **Total** | | **{:.1}** |\n\n", r.score));
    if r.capped {
        s.push_str("> [!WARNING]\n> Capped at D: a response is missing.\n\n");
    }
    s
}

/// The regressions' table, at most `MD_MAX_ROWS` changes.
fn md_regressions(r: &CheckReport, s: &mut String) {
    let regressions: Vec<_> = with_status(r, Status::Regression).collect();
    if !regressions.is_empty() {
        s.push_str("### Regressions\n\n");
        s.push_str("| Exchange | Kind | Path | Recorded | Observed |\n");
        s.push_str("| --- | --- | --- | --- | --- |\n");
        let mut rows = 0;
        let total: usize = regressions.iter().map(|e| e.changes.len().max(1)).sum();
        'outer: for e in &regressions {
            let name = format!(
                "line {}: {}",
                e.exchange.line,
                md_code(&e.exchange.describe(ARGS_WIDTH))
            );
            if e.changes.is_empty() {
                s.push_str(&format!("| {name} | | | | |\n"));
                rows += 1;
            }
            for (i, ch) in e.changes.iter().enumerate() {
                if rows == MD_MAX_ROWS {
                    break 'outer;
                }
                let (r, o) = md_values(ch);
                s.push_str(&format!(
                    "| {} | {} | {} | {r} | {o} |\n",
                    if i == 0 { name.as_str() } else { "" },
                    ch.kind.as_str(),
                    md_code(&ch.path),
                ));
                rows += 1;
            }
        }
        if total > rows {
            s.push_str(&format!(
                "\n…and {} more (see the JSON report).\n",
                plural(total - rows, "change", "changes")
            ));
        }
        s.push('\n');
    }
}

/// The missing responses' table.
fn md_missing(r: &CheckReport, s: &mut String) {
    md_detail_table(
        r,
        Status::Missing,
        "### Missing responses\n\n| Exchange | Detail |\n",
        "no answer",
        s,
    );
}

/// The exchanges the recording has no answer for: the live answer, not graded.
fn md_unrecorded(r: &CheckReport, s: &mut String) {
    md_detail_table(
        r,
        Status::Unrecorded,
        "### Not on the tape\n\nThe recording has no answer for these requests (it was cut off after them, or the recorded server never answered): not graded.\n\n| Exchange | Live |\n",
        "",
        s,
    );
}

/// A table of the exchanges of `status` and their detail (`none` when they have none), at most
/// `MD_MAX_ROWS` rows, under `head` (the heading and the table's header row); nothing when
/// there are none.
fn md_detail_table(r: &CheckReport, status: Status, head: &str, none: &str, s: &mut String) {
    let rows: Vec<_> = with_status(r, status).collect();
    if rows.is_empty() {
        return;
    }
    s.push_str(head);
    s.push_str("| --- | --- |\n");
    for e in rows.iter().take(MD_MAX_ROWS) {
        s.push_str(&format!(
            "| line {}: {} | {} |\n",
            e.exchange.line,
            md_code(&e.exchange.describe(ARGS_WIDTH)),
            md_cell(e.detail.as_deref().unwrap_or(none))
        ));
    }
    if rows.len() > MD_MAX_ROWS {
        s.push_str(&format!("\n…and {} more.\n", rows.len() - MD_MAX_ROWS));
    }
    s.push('\n');
}

/// The exchanges over the latency rule.
fn md_slower(r: &CheckReport, s: &mut String) {
    let slow = slower(r);
    if !slow.is_empty() {
        s.push_str(&format!("### Slower ({})\n\n", latency_rule(r)));
        s.push_str("| Exchange | Recorded | Observed |\n| --- | ---: | ---: |\n");
        let lat = |v: Option<u64>| v.map(ms).unwrap_or_else(|| "?".into());
        for e in slow.iter().take(MD_MAX_ROWS) {
            s.push_str(&format!(
                "| line {}: {} | {} | {} |\n",
                e.exchange.line,
                md_code(&e.exchange.describe(ARGS_WIDTH)),
                lat(e.recorded_latency_us),
                lat(e.observed_latency_us)
            ));
        }
        if slow.len() > MD_MAX_ROWS {
            s.push_str(&format!("\n…and {} more.\n", slow.len() - MD_MAX_ROWS));
        }
        s.push('\n');
    }
}

/// The run error, the updated baseline, and the gate's verdict.
fn md_ending(r: &CheckReport, s: &mut String) {
    let (passed, gate) = gate_text(r);
    if !r.skipped_lines.is_empty() {
        s.push_str(&format!(
            "**Baseline:** {} (`--skip-bad-lines`).\n\n",
            crate::tape::reader::skipped_summary(&r.skipped_lines)
        ));
    }
    if let Some(err) = &r.run_error {
        s.push_str(&format!(
            "### Run error\n\n{}{}\n\n",
            md_cell(err),
            exit_note(r)
        ));
    }
    if let Some(b) = &r.updated_backup {
        s.push_str(&format!(
            "Baseline updated; the previous one is kept at {}.\n\n",
            md_code(b)
        ));
    }
    if r.updated_backup.is_some() {
        s.push_str("**Gate:** not applied: `--update` accepted the changes as the new baseline.\n");
        return;
    }
    s.push_str(&match (passed, gate) {
        (true, None) => "**Gate:** none set.\n".to_string(),
        (true, Some(asked)) => format!("**Gate: passed** ({asked}).\n"),
        (false, Some(why)) => format!("**Gate: failed**: {}.\n", md_cell(&why)),
        (false, None) => "**Gate: failed**.\n".to_string(),
    });
}

/// JUnit XML: one suite, a testcase per exchange; a regression is a failure, a missing response
/// or a run error is an error, an exchange the recording has no answer for is skipped.
pub fn check_junit(r: &CheckReport) -> String {
    let mut suite = TestSuite::new(format!("mcptape check {}", r.tape));
    suite.set_time(Duration::from_millis(r.duration_ms));
    suite.add_property(("server", r.server.as_str()));
    suite.add_property(("grade", r.grade.as_str()));
    suite.add_property(("score", format!("{:.1}", r.score).as_str()));
    for e in &r.exchanges {
        let status = match e.status {
            Status::Pass => TestCaseStatus::success(),
            Status::Regression => {
                let mut kinds: Vec<ChangeKind> = e.changes.iter().map(|c| c.kind).collect();
                kinds.sort();
                kinds.dedup();
                let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
                let lines: Vec<String> = e
                    .changes
                    .iter()
                    .map(|c| {
                        let (r, o) = short_pair(c.recorded.as_ref(), c.observed.as_ref(), 200);
                        format!("{} {}: {r} → {o}", c.kind.as_str(), c.path)
                    })
                    .collect();
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_type("regression")
                    .set_message(if kinds.is_empty() {
                        "regression".to_string()
                    } else {
                        kinds.join(", ")
                    })
                    .set_description(lines.join("\n"));
                st
            }
            Status::Missing => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                st.set_type(ChangeKind::MissingResponse.as_str())
                    .set_message(e.detail.as_deref().unwrap_or("no answer"));
                st
            }
            Status::Unrecorded => {
                let mut st = TestCaseStatus::skipped();
                st.set_message("not on the tape: the recording has no answer for it");
                if let Some(d) = &e.detail {
                    st.set_description(d.as_str());
                }
                st
            }
        };
        let mut tc = TestCase::new(
            format!(
                "line {}: {}",
                e.exchange.line,
                e.exchange.describe(ARGS_WIDTH)
            ),
            status,
        );
        tc.set_classname(e.exchange.method.as_str());
        if let Some(us) = e.observed_latency_us {
            tc.set_time(Duration::from_micros(us));
        }
        if e.slower {
            let lat = |v: Option<u64>| v.map(ms).unwrap_or_else(|| "?".into());
            tc.set_system_out(format!(
                "slower ({}): {} → {}",
                latency_rule(r),
                lat(e.recorded_latency_us),
                lat(e.observed_latency_us)
            ));
        }
        suite.add_test_case(tc);
    }
    if let Some(err) = &r.run_error {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
        st.set_type("run-error")
            .set_message(err.as_str())
            .set_description(format!("{err}{}", exit_note(r)));
        let mut tc = TestCase::new("run", st);
        tc.set_classname("mcptape");
        suite.add_test_case(tc);
    }
    let mut report = Report::new("mcptape check");
    report.set_time(Duration::from_millis(r.duration_ms));
    report.add_test_suite(suite);
    match report.to_string() {
        Ok(s) => s,
        // Serializing into memory does not fail in practice; keep the output well-formed anyway.
        Err(e) => format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mcptape check\" \
             tests=\"0\" failures=\"0\" errors=\"0\"/>\n<!-- {} -->\n",
            e.to_string().replace("--", "- -")
        ),
    }
}

/// shields.io endpoint JSON.
pub fn check_badge(r: &CheckReport) -> String {
    let color = match r.grade {
        Grade::A => "brightgreen",
        Grade::B => "green",
        Grade::C => "yellow",
        Grade::D => "orange",
        Grade::F => "red",
    };
    serde_json::json!({
        "schemaVersion": 1,
        "label": "mcp check",
        "message": format!("{} · {:.1}", r.grade.as_str(), r.score),
        "color": color,
    })
    .to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::check::report::{Dimensions, Gate, LatencyRule};
    use crate::compare::surface::{SurfaceKind, ToolChange};
    use crate::compare::{Change, ExchangeRef};
    use serde_json::{json, Value};
    use std::collections::BTreeMap;

    fn ex(line: u64, target: &str, args: Value, status: Status) -> CheckedExchange {
        CheckedExchange {
            exchange: ExchangeRef {
                server: None,
                method: "tools/call".into(),
                target: Some(target.into()),
                arguments: Some(args),
                line,
                appended: false,
            },
            status,
            changes: vec![],
            detail: None,
            recorded_latency_us: Some(12_000),
            observed_latency_us: Some(14_000),
            slower: false,
        }
    }

    pub(crate) fn sample() -> CheckReport {
        let pass = ex(3, "add", json!({"a": 1, "b": 2}), Status::Pass);
        let mut value = ex(5, "convert", json!({"celsius": 21.5}), Status::Regression);
        value.changes = vec![Change {
            kind: ChangeKind::ValueChange,
            path: "$.result.content[0].text".into(),
            recorded: Some(json!("70.7|F")),
            observed: Some(json!("71.7|F")),
        }];
        let mut structure = ex(7, "weather", json!({"city": "Oslo"}), Status::Regression);
        structure.changes = vec![
            Change {
                kind: ChangeKind::StructureChange,
                path: "$.result.structuredContent.unit".into(),
                recorded: Some(json!("C")),
                observed: None,
            },
            Change {
                kind: ChangeKind::StructureChange,
                path: "$.result.structuredContent.units".into(),
                recorded: None,
                observed: Some(json!("metric")),
            },
        ];
        let mut missing = ex(9, "slow", json!({}), Status::Missing);
        missing.changes = vec![Change {
            kind: ChangeKind::MissingResponse,
            path: "$".into(),
            recorded: Some(json!({"result": {}})),
            observed: None,
        }];
        missing.detail = Some("no answer within 30s".into());
        missing.observed_latency_us = None;
        let mut slow = ex(11, "add", json!({"a": 2, "b": 2}), Status::Pass);
        slow.observed_latency_us = Some(180_000);
        slow.slower = true;
        let exchanges = vec![pass, value, structure, missing, slow];
        let dimensions = crate::check::grade::dimensions(&exchanges);
        let score = crate::check::grade::score(&dimensions);
        let (grade, capped) = crate::check::grade::grade(score, true);
        CheckReport {
            tape: "demo.jsonl".into(),
            server: "node server.js".into(),
            server_label: None,
            other_servers: Vec::new(),
            grade,
            score,
            capped,
            dimensions,
            exchanges,
            regressions: BTreeMap::from([
                (ChangeKind::MissingResponse, 1),
                (ChangeKind::StructureChange, 1),
                (ChangeKind::ValueChange, 1),
            ]),
            server_messages: vec![crate::compare::server_messages::MessageCount {
                server: None,
                method: "notifications/tools/list_changed".into(),
                recorded: 1,
                observed: 0,
            }],
            tool_surface: vec![
                ToolChange {
                    server: None,
                    tool: "add".into(),
                    kind: SurfaceKind::Narrowed,
                    details: vec!["inputSchema: property `b` is now required".into()],
                },
                ToolChange {
                    server: None,
                    tool: "hello".into(),
                    kind: SurfaceKind::Added,
                    details: vec![],
                },
            ],
            latency: Some(LatencyRule {
                factor: 2.0,
                floor_ms: 50.0,
            }),
            gate: Gate {
                min_grade: Some(Grade::B),
                fail_on_regression: false,
                default: false,
                passed: false,
            },
            run_error: None,
            skipped_lines: Vec::new(),
            server_exit: None,
            updated_backup: None,
            duration_ms: 1250,
            internal_error: None,
        }
    }

    fn all_pass() -> CheckReport {
        let exchanges = vec![
            ex(3, "add", json!({"a": 1}), Status::Pass),
            ex(5, "add", json!({"a": 2}), Status::Pass),
        ];
        CheckReport {
            tape: "t.jsonl".into(),
            server: "srv".into(),
            server_label: None,
            other_servers: Vec::new(),
            grade: Grade::A,
            score: 100.0,
            capped: false,
            dimensions: Dimensions {
                responsiveness: 1.0,
                match_rate: 1.0,
                error_parity: 1.0,
                structural_stability: 1.0,
            },
            exchanges,
            regressions: BTreeMap::new(),
            tool_surface: vec![],
            server_messages: vec![],
            latency: None,
            gate: Gate {
                min_grade: Some(Grade::B),
                fail_on_regression: true,
                default: false,
                passed: true,
            },
            run_error: None,
            skipped_lines: Vec::new(),
            server_exit: None,
            updated_backup: None,
            duration_ms: 340,
            internal_error: None,
        }
    }

    /// The gate's verdict, unless an internal error happened (how the server ended could not
    /// be learned): then 70, however the gate went, the report written all the same.
    #[test]
    fn the_exit_code_is_the_gates_unless_an_internal_error_happened() {
        let lost = "mcptape: internal error: could not learn how the server (pid 7) ended: No child processes (os error 10); the report is written without it";
        let mut passed = all_pass();
        assert_eq!(passed.exit_code(), crate::exit::OK);
        passed.internal_error = Some(lost.into());
        assert_eq!(passed.exit_code(), crate::exit::SOFTWARE);
        let mut failed = sample();
        assert_eq!(failed.exit_code(), crate::exit::DRIFT);
        failed.updated_backup = Some("demo.jsonl.bak".into());
        assert_eq!(failed.exit_code(), crate::exit::OK, "--update: accepted");
        failed.internal_error = Some(lost.into());
        assert_eq!(failed.exit_code(), crate::exit::SOFTWARE);
        // Not in the report's JSON: the exit code tells it.
        assert!(!serde_json::to_string(&failed).unwrap().contains("internal"));
    }

    /// A check of one server of a multi-server tape names it in the console's first line and
    /// the Markdown summary (which also lists the servers not checked), and in the JSON; a
    /// tape of one server's report has neither field.
    #[test]
    fn the_server_of_a_multi_server_tape_is_named() {
        let plain = serde_json::to_value(sample()).unwrap();
        assert!(plain.get("server_label").is_none() && plain.get("other_servers").is_none());
        let mut r = sample();
        r.server_label = Some("search".into());
        r.other_servers = vec!["files".into(), "web".into()];
        let console = check_console(&r, false);
        assert_eq!(
            console.lines().next(),
            Some("check demo.jsonl server search against node server.js (5 exchanges, 1.25 s)")
        );
        let md = check_markdown(&r);
        assert!(
            md.contains("`demo.jsonl` server `search` against `node server.js`: 5 exchanges"),
            "{md}"
        );
        assert!(
            md.contains("The tape's other MCP servers were not checked: `files`, `web` (`--server LABEL` checks one)."),
            "{md}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["server_label"], "search");
        assert_eq!(json["other_servers"], serde_json::json!(["files", "web"]));
        let back: CheckReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn console_plain() {
        let r = sample();
        let s = check_console(&r, false);
        assert!(!s.contains('\x1b'), "{s}");
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "check demo.jsonl against node server.js (5 exchanges, 1.25 s)"
        );
        assert_eq!(
            lines[1],
            "grade D  66.0/100   2 pass   2 regressions   1 missing"
        );
        assert!(
            s.contains("\n  line 5  tools/call convert {\"celsius\":21.5}\n"),
            "{s}"
        );
        assert!(
            s.contains("    value-change  $.result.content[0].text  \"70.7|F\"  →  \"71.7|F\"\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "    structure-change  $.result.structuredContent.unit   \"C\"       →  (absent)\n"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "    structure-change  $.result.structuredContent.units  (absent)  →  \"metric\"\n"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "missing responses\n  line 9  tools/call slow {}\n    no answer within 30s\n"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "  narrowed  add    inputSchema: property `b` is now required\n  added     hello\n"
            ),
            "{s}"
        );
        assert!(s.contains("slower (over 2× and 50 ms)\n  line 11  12 ms → 180 ms  tools/call add {\"a\":2,\"b\":2}\n"), "{s}");
        assert!(
            s.contains(
                "\n\nserver messages, in number (not in the grade)\n  notifications/tools/list_changed: 1 recorded, 0 live\n"
            ),
            "{s}"
        );
        assert!(
            s.ends_with("\n\ngate failed: grade D is below --min-grade B\n"),
            "{s}"
        );
    }

    #[test]
    fn console_colour_and_all_pass() {
        let s = check_console(&sample(), true);
        assert!(s.contains("\x1b[31m"), "{s}");
        let ok = check_console(&all_pass(), false);
        assert!(
            ok.contains("grade A  100.0/100   2 pass   0 regressions   0 missing\n"),
            "{ok}"
        );
        assert!(
            ok.ends_with("\n\ngate passed (--min-grade B, --fail-on-regression)\n"),
            "the gate on its own line, last: {ok}"
        );
        let mut default = all_pass();
        default.gate = Gate {
            min_grade: None,
            fail_on_regression: true,
            default: true,
            passed: false,
        };
        default.exchanges[1].status = Status::Regression;
        let s = check_console(&default, false);
        assert!(
            s.ends_with("\n\ngate failed: 1 regression (the default gate: any regression fails; --min-grade sets another)\n"),
            "no gate named: the default one said so: {s}"
        );
        assert!(!s.contains("--fail-on-regression"), "{s}");
        assert!(
            ok.contains("  all 2 exchanges answered as recorded\n"),
            "{ok}"
        );
        assert!(!ok.contains("gate failed"), "{ok}");
        let mut run = all_pass();
        run.run_error = Some("the server crashed".into());
        run.server_exit = Some(crate::tape::ExitInfo {
            code: Some(1),
            signal: None,
        });
        let s = check_console(&run, false);
        assert!(
            s.contains("run error: the server crashed (the server exited with code 1)\n"),
            "{s}"
        );
    }

    #[test]
    fn markdown() {
        let s = check_markdown(&sample());
        assert!(
            s.starts_with("## ❌ mcptape check: grade D · 66.0 / 100\n"),
            "{s}"
        );
        assert!(s.contains("| Match rate | 45% | 40% |\n"), "{s}");
        assert!(s.contains("| Responsiveness | 25% | 80% |\n"), "{s}");
        assert!(s.contains(
            "| line 5: `tools/call convert {\"celsius\":21.5}` | value-change | `$.result.content[0].text` | `\"70.7\\|F\"` | `\"71.7\\|F\"` |\n"
        ), "{s}");
        assert!(s.contains("|  | structure-change | `$.result.structuredContent.units` | *absent* | `\"metric\"` |\n"), "{s}");
        assert!(
            s.contains("| line 9: `tools/call slow {}` | no answer within 30s |\n"),
            "{s}"
        );
        assert!(
            s.contains("| `add` | **narrowed** | inputSchema: property `b` is now required |\n"),
            "{s}"
        );
        assert!(
            s.contains("| line 11: `tools/call add {\"a\":2,\"b\":2}` | 12 ms | 180 ms |\n"),
            "{s}"
        );
        assert!(
            s.contains("### Server messages, in number (not in the grade)\n\n- `notifications/tools/list_changed`: 1 recorded, 0 live\n"),
            "{s}"
        );
        assert!(
            s.ends_with("**Gate: failed**: grade D is below --min-grade B.\n"),
            "{s}"
        );
        let ok = check_markdown(&all_pass());
        assert!(
            ok.starts_with("## ✅ mcptape check: grade A · 100.0 / 100\n"),
            "{ok}"
        );
        assert!(!ok.contains("### Regressions"), "{ok}");
        assert!(
            ok.ends_with("**Gate: passed** (--min-grade B, --fail-on-regression).\n"),
            "{ok}"
        );
    }

    #[test]
    fn junit_parses_back() {
        let mut r = sample();
        r.run_error = Some("the server exited".into());
        let xml = check_junit(&r);
        let back = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(back.tests, 6);
        assert_eq!(back.failures, 2);
        assert_eq!(back.errors, 2);
        let suite = &back.test_suites[0];
        assert_eq!(suite.name.as_str(), "mcptape check demo.jsonl");
        let tc = &suite.test_cases[1];
        assert_eq!(
            tc.name.as_str(),
            "line 5: tools/call convert {\"celsius\":21.5}"
        );
        assert_eq!(tc.classname.as_deref(), Some("tools/call"));
        assert_eq!(tc.time, Some(Duration::from_millis(14)));
        match &tc.status {
            TestCaseStatus::NonSuccess {
                kind,
                message,
                description,
                ..
            } => {
                assert_eq!(*kind, NonSuccessKind::Failure);
                assert_eq!(message.as_deref(), Some("value-change"));
                assert_eq!(
                    description.as_deref(),
                    Some("value-change $.result.content[0].text: \"70.7|F\" → \"71.7|F\"")
                );
            }
            other => panic!("{other:?}"),
        }
        match &suite.test_cases[3].status {
            TestCaseStatus::NonSuccess { kind, message, .. } => {
                assert_eq!(*kind, NonSuccessKind::Error);
                assert_eq!(message.as_deref(), Some("no answer within 30s"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(suite.test_cases[5].name.as_str(), "run");
        let ok = quick_junit::Report::deserialize_from_str(&check_junit(&all_pass())).unwrap();
        assert_eq!((ok.tests, ok.failures, ok.errors), (2, 0, 0));
    }

    #[test]
    fn badge() {
        let v: Value = serde_json::from_str(&check_badge(&all_pass())).unwrap();
        assert_eq!(
            v,
            json!({"schemaVersion": 1, "label": "mcp check", "message": "A · 100.0", "color": "brightgreen"})
        );
        let v: Value = serde_json::from_str(&check_badge(&sample())).unwrap();
        assert_eq!(v["color"], "orange");
        assert_eq!(v["message"], "D · 66.0");
    }
}
