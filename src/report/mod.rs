//! Rendering check and diff results: console text, Markdown, JUnit XML, shields.io badge; and
//! the HTML report of a session ([`html`]).
//!
//! Every renderer is pure: a report in, a `String` out; the caller decides where it goes (the
//! HTML report's data is read from the tape first, by [`html::gather`]).
//! Console output takes a `color` flag (see [`use_color`]); the other formats never colour.

mod check;
mod diff;
pub mod html;

pub use check::{check_badge, check_console, check_junit, check_markdown};
pub use diff::{diff_markdown, diff_text};

use crate::compare::server_messages::{self, MessageCount};
use crate::compare::surface::{SurfaceKind, ToolChange};
use crate::compare::{Change, ChangeKind};
use crate::wire::canonical::short_pair;

/// Whether console output should be coloured: never with a non-empty `NO_COLOR`, always with a
/// non-empty `CLICOLOR_FORCE` other than `0`, otherwise when the stream is a terminal (and
/// `TERM` is not `dumb`).
pub fn use_color(stream_is_terminal: bool) -> bool {
    let set = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    color_choice(
        set("NO_COLOR").is_some(),
        set("CLICOLOR_FORCE").is_some_and(|v| v != "0"),
        stream_is_terminal && std::env::var_os("TERM").is_none_or(|t| t != "dumb"),
    )
}

fn color_choice(no_color: bool, force: bool, terminal: bool) -> bool {
    !no_color && (force || terminal)
}

/// ANSI styling that is a no-op when colour is off.
#[derive(Clone, Copy)]
pub(crate) struct Style {
    on: bool,
}

impl Style {
    pub(crate) fn new(on: bool) -> Style {
        Style { on }
    }
    fn paint(self, code: &str, s: &str) -> String {
        if self.on && !s.is_empty() {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub(crate) fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }
    pub(crate) fn dim(self, s: &str) -> String {
        self.paint("2", s)
    }
    pub(crate) fn red(self, s: &str) -> String {
        self.paint("31", s)
    }
    pub(crate) fn green(self, s: &str) -> String {
        self.paint("32", s)
    }
    pub(crate) fn yellow(self, s: &str) -> String {
        self.paint("33", s)
    }
    pub(crate) fn bold_red(self, s: &str) -> String {
        self.paint("1;31", s)
    }
    pub(crate) fn bold_green(self, s: &str) -> String {
        self.paint("1;32", s)
    }
    pub(crate) fn bold_yellow(self, s: &str) -> String {
        self.paint("1;33", s)
    }
}

/// Widest value shown on a change line, in characters.
pub(crate) const VALUE_WIDTH: usize = 48;
/// Widest arguments shown when naming an exchange.
pub(crate) const ARGS_WIDTH: usize = 60;
/// Paths longer than this are not padded to a common column.
const PATH_ALIGN_MAX: usize = 48;

fn width(s: &str) -> usize {
    s.chars().count()
}

/// `s` padded with spaces to `w` characters (never truncated).
pub(crate) fn pad(s: &str, w: usize) -> String {
    format!("{s}{}", " ".repeat(w.saturating_sub(width(s))))
}

/// Change lines with aligned columns: `kind  path  recorded  →  observed`, each prefixed with
/// `indent`. `kind_style` colours the kind.
pub(crate) fn change_lines(
    changes: &[Change],
    indent: &str,
    st: Style,
    kind_style: impl Fn(ChangeKind, &str) -> String,
) -> Vec<String> {
    let kw = changes
        .iter()
        .map(|c| width(c.kind.as_str()))
        .max()
        .unwrap_or(0);
    let paths_w = changes.iter().map(|c| width(&c.path)).max().unwrap_or(0);
    let pw = if paths_w <= PATH_ALIGN_MAX {
        paths_w
    } else {
        0
    };
    // Each pair shown where its two sides differ (a long value cut at a width would print
    // the same prefix on both sides).
    let pairs: Vec<(String, String)> = changes
        .iter()
        .map(|c| short_pair(c.recorded.as_ref(), c.observed.as_ref(), VALUE_WIDTH))
        .collect();
    let rw = pairs.iter().map(|(r, _)| width(r)).max().unwrap_or(0);
    // `(absent)` is not a value: dimmed, after padding so the columns stay aligned.
    let value = |v: Option<&serde_json::Value>, shown: &str, st: Style| match v {
        Some(_) => shown.to_string(),
        None => st.dim(shown),
    };
    changes
        .iter()
        .zip(&pairs)
        .map(|(c, (r, o))| {
            let r = if c.recorded.is_some() {
                pad(r, rw)
            } else {
                st.dim(&pad(r, rw))
            };
            let kind = kind_style(c.kind, &pad(c.kind.as_str(), kw));
            let o = value(c.observed.as_ref(), o, st);
            format!(
                "{indent}{kind}  {}  {}  {}  {o}",
                pad(&c.path, pw),
                r,
                st.dim("→")
            )
            .trim_end()
            .to_string()
        })
        .collect()
}

/// Microseconds as a readable duration: `0.8 ms`, `12 ms`, `1.25 s`.
pub(crate) fn ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

/// A fraction as a percentage, without a decimal when it is whole: `90%`, `87.5%`.
pub(crate) fn pct(f: f64) -> String {
    let p = (f * 1000.0).round() / 10.0;
    if p.fract() == 0.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

pub(crate) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Text for a Markdown table cell: pipes escaped, line breaks flattened.
pub(crate) fn md_cell(s: &str) -> String {
    s.replace(['\r', '\n'], " ").replace('|', "\\|")
}

/// Inline code for a Markdown table cell: a fence longer than any backtick run inside, pipes
/// escaped (GitHub unescapes `\|` inside code spans in tables).
pub(crate) fn md_code(s: &str) -> String {
    let s = s.replace(['\r', '\n'], " ");
    if s.trim().is_empty() {
        return "` `".into();
    }
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", s.replace('|', "\\|"))
}

/// The word for a tool-surface change. (Kept here rather than on `SurfaceKind` so this module
/// stays self-contained; it could move to `compare::surface` as `SurfaceKind::as_str`.)
pub(crate) fn surface_kind(k: SurfaceKind) -> &'static str {
    match k {
        SurfaceKind::Added => "added",
        SurfaceKind::Removed => "removed",
        SurfaceKind::Narrowed => "narrowed",
        SurfaceKind::Widened => "widened",
        SurfaceKind::Changed => "changed",
    }
}

/// Breaking for callers: a tool removed or a schema narrowed.
pub(crate) fn surface_breaking(k: SurfaceKind) -> bool {
    matches!(k, SurfaceKind::Removed | SurfaceKind::Narrowed)
}

/// The server's requests and notifications whose number differs between the two sides, under
/// a title that says they are not in the `what` (a diff's verdict, a check's grade); nothing
/// when none differs. `first` and `other` name the sides: `in A`/`in B`, `recorded`/`live`.
pub(crate) fn message_lines(
    counts: &[MessageCount],
    first: &str,
    other: &str,
    what: &str,
    st: Style,
) -> Vec<String> {
    if counts.is_empty() {
        return Vec::new();
    }
    let mut out = vec![st.bold_yellow(&format!("server messages, in number (not in the {what})"))];
    out.extend(
        counts
            .iter()
            .map(|c| format!("  {}", server_messages::describe(c, first, other))),
    );
    out
}

/// Markdown: [`message_lines`] as a section; empty when none differs.
pub(crate) fn md_message_list(
    counts: &[MessageCount],
    first: &str,
    other: &str,
    what: &str,
) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let mut s = format!("### Server messages, in number (not in the {what})\n\n");
    for c in counts {
        let server = c
            .server
            .as_ref()
            .map(|l| format!("server {}: ", md_code(l)))
            .unwrap_or_default();
        s.push_str(&format!(
            "- {server}{}: {} {first}, {} {other}\n",
            md_code(&c.method),
            c.recorded,
            c.observed
        ));
    }
    s.push('\n');
    s
}

/// Tool-surface lines: `kind  tool  detail`, further details aligned under the first.
pub(crate) fn surface_lines(changes: &[ToolChange], indent: &str, st: Style) -> Vec<String> {
    let kw = changes
        .iter()
        .map(|c| surface_kind(c.kind).len())
        .max()
        .unwrap_or(0);
    let tw = changes.iter().map(|c| width(&c.shown())).max().unwrap_or(0);
    let mut out = Vec::new();
    for c in changes {
        let k = pad(surface_kind(c.kind), kw);
        let k = if surface_breaking(c.kind) {
            st.red(&k)
        } else {
            st.yellow(&k)
        };
        let head = format!("{indent}{k}  {}", pad(&c.shown(), tw));
        let mut details = c.details.iter();
        match details.next() {
            Some(d) => out.push(format!("{head}  {d}")),
            None => out.push(head.trim_end().to_string()),
        }
        let cont = " ".repeat(width(indent) + kw + 2 + tw + 2);
        out.extend(details.map(|d| format!("{cont}{d}")));
    }
    out
}

/// A Markdown table of tool-surface changes.
pub(crate) fn surface_table(changes: &[ToolChange]) -> String {
    let mut s = String::from("| Tool | Change | Details |\n| --- | --- | --- |\n");
    for c in changes {
        let kind = if surface_breaking(c.kind) {
            format!("**{}**", surface_kind(c.kind))
        } else {
            surface_kind(c.kind).to_string()
        };
        let details: Vec<String> = c.details.iter().map(|d| md_cell(d)).collect();
        s.push_str(&format!(
            "| {} | {kind} | {} |\n",
            md_code(&c.shown()),
            details.join("<br>")
        ));
    }
    s
}

/// A change's two values for Markdown table cells: short inline code where they differ
/// ([`short_pair`]), or *absent*.
pub(crate) fn md_values(c: &Change) -> (String, String) {
    let (r, o) = short_pair(c.recorded.as_ref(), c.observed.as_ref(), VALUE_WIDTH);
    let cell = |v: Option<&serde_json::Value>, shown: String| match v {
        Some(_) => md_code(&shown),
        None => "*absent*".into(),
    };
    (cell(c.recorded.as_ref(), r), cell(c.observed.as_ref(), o))
}

/// Markdown rows kept per table; the rest are counted.
pub(crate) const MD_MAX_ROWS: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_choice_respects_no_color_then_force() {
        assert!(color_choice(false, false, true));
        assert!(!color_choice(false, false, false));
        assert!(color_choice(false, true, false));
        assert!(!color_choice(true, true, true));
        assert!(!color_choice(true, false, true));
    }

    #[test]
    fn markdown_code_escapes() {
        assert_eq!(md_code("a|b"), "`a\\|b`");
        assert_eq!(md_code("x`y"), "``x`y``");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_code(""), "` `");
        assert_eq!(md_cell("a|b\nc"), "a\\|b c");
    }

    #[test]
    fn numbers() {
        assert_eq!(pct(0.9), "90%");
        assert_eq!(pct(0.875), "87.5%");
        assert_eq!(ms(800), "0.8 ms");
        assert_eq!(ms(180_400), "180 ms");
        assert_eq!(ms(1_250_000), "1.25 s");
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(plural(1, "drift", "drifts"), "1 drift");
    }
}
