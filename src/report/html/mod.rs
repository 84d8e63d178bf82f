//! `mcptape report`: one self-contained HTML file of a session — a timeline, a filterable list
//! whose rows open to their request and answer, the per-tool statistics, and what a check or a
//! diff found. The page holds its data as JSON in a non-executed script block and builds its DOM
//! on demand (only the rows in view exist), so a 100,000-exchange tape stays usable.
//!
//! Tape content is untrusted. In the page it is JSON text in which `<`, `>` and `&` are written
//! as `\u003c`, `\u003e`, `\u0026` (so no `</script>` can end the block), and the script puts
//! it in the DOM only as text nodes. The page's Content-Security-Policy allows its own script
//! and style (by hash) and nothing else: no network, no other script.

pub mod data;

pub use data::{
    gather, gather_read, mark_check, mark_diff, read_check_report, ReportData, ReportError,
};

use base64::Engine as _;
use sha2::{Digest, Sha256};

const TEMPLATE: &str = include_str!("report.html");
const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

/// The report page for `data`.
pub fn render(data: &ReportData) -> String {
    let json = serde_json::to_string(data).unwrap_or_else(|e| {
        // Only maps with non-string keys fail to serialize; the report has none.
        format!("{{\"error\":{:?}}}", e.to_string())
    });
    let json = script_safe(&json);
    let title = html_escape(
        std::path::Path::new(&data.tape)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| data.tape.clone())
            .as_str(),
    );
    let tool = html_escape(&format!("mcptape {}", env!("CARGO_PKG_VERSION")));
    let (script_hash, style_hash) = (csp_hash(JS), csp_hash(CSS));
    // One pass over the template: a placeholder's text inside the tape's data is never
    // replaced in turn.
    let mut out = String::with_capacity(TEMPLATE.len() + CSS.len() + JS.len() + json.len());
    let mut rest = TEMPLATE;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        out.push_str(match &after[..end] {
            "CSS" => CSS,
            "JS" => JS,
            "DATA" => &json,
            "TITLE" => &title,
            "TOOL" => &tool,
            "SCRIPT_HASH" => &script_hash,
            "STYLE_HASH" => &style_hash,
            other => other,
        });
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// JSON made safe inside a `<script>` element: `<`, `>` and `&` only occur inside JSON
/// strings, where their `\u` escapes mean the same.
pub fn script_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            // Legal in JSON, but line terminators in older JavaScript: escaped for any reader.
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text safe in HTML content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A CSP source naming an inline block by its SHA-256.
fn csp_hash(block: &str) -> String {
    let digest = Sha256::digest(block.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_in_the_page_cannot_end_its_script_block() {
        let v = serde_json::json!({"q": "</script><script>alert(1)</script><!-- & \u{2028}"});
        let safe = script_safe(&v.to_string());
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v, "the escapes mean the same JSON");
    }

    #[test]
    fn the_page_allows_exactly_its_own_script_and_style() {
        let page = render(&ReportData {
            v: 1,
            tape: "/t/<b>x.jsonl".into(),
            created: String::new(),
            tool: String::new(),
            lanes: Vec::new(),
            end_us: 0,
            items: Vec::new(),
            model_setup: 0,
            stats: Vec::new(),
            warnings: vec!["{{JS}}".into()],
            drift: None,
        });
        assert!(page.contains(&format!("script-src '{}'", csp_hash(JS))));
        assert!(page.contains(&format!("style-src '{}'", csp_hash(CSS))));
        assert!(page.contains("<title>mcptape report: &lt;b&gt;x.jsonl</title>"));
        // A placeholder inside the data stays text.
        assert!(page.contains(r#""warnings":["{{JS}}"]"#));
        assert_eq!(page.matches("<script").count(), 2);
        assert_eq!(page.matches("{{").count(), 1, "every placeholder filled");
    }
}
