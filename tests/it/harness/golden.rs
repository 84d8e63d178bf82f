//! Golden files (tests/golden, see its README.md): a report compared exactly with the file of
//! its name, after [`mask`]; with `MCPTAPE_BLESS=1` in the environment the file is written
//! instead, and the test passes.

use super::{assert_same_text, bin, repo, s};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn golden_path(name: &str) -> PathBuf {
    repo().join("tests/golden").join(name)
}

/// What legitimately differs from one run (or machine) to the next, replaced by a placeholder:
///
/// | what                                             | becomes             |
/// | ------------------------------------------------ | ------------------- |
/// | each of `dirs` (the test's temp folders)         | `<TMP>`             |
/// | the path of the mcptape binary under test        | `mcptape`           |
/// | a duration: `107 ms`, `(0 ms)`, `1.18 s` (a slow machine's) | `<N> ms`  |
/// | a JUnit `time="0.107"` (seconds)                 | `time="<T>"`        |
/// | an RFC 3339 date and time (`2026-01-01T09:45:…Z`) | `<DATE>`            |
///
/// Everything else (grades, scores, counts, lines, paths inside the answers) must match.
pub fn mask(text: &str, dirs: &[&Path]) -> String {
    static RULES: OnceLock<[(regex::Regex, &'static str); 3]> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        let re = |p: &str| regex::Regex::new(p).expect("mask regex");
        [
            (re(r"\b\d+(\.\d+)? m?s\b"), "<N> ms"),
            (re(r#"\btime="[0-9.]+""#), r#"time="<T>""#),
            (
                re(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"),
                "<DATE>",
            ),
        ]
    });
    let mut out = text.to_string();
    let mut dirs: Vec<String> = dirs.iter().map(s).collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.len())); // a folder inside another first
    for d in dirs {
        out = out.replace(&d, "<TMP>");
    }
    out = out.replace(&s(bin()), "mcptape");
    for (re, with) in rules {
        out = re.replace_all(&out, *with).into_owned();
    }
    out
}

/// Whether this run writes golden files instead of comparing with them.
pub fn blessing() -> bool {
    std::env::var_os("MCPTAPE_BLESS").is_some_and(|v| v == "1")
}

/// Requires `actual` (masked already) to be exactly tests/golden/`name`; with `MCPTAPE_BLESS=1`
/// writes it there instead.
#[track_caller]
pub fn assert_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if blessing() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create tests/golden");
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        eprintln!("blessed {}", path.display());
        return;
    }
    let want = match std::fs::read_to_string(&path) {
        Ok(want) => want,
        Err(e) => panic!(
            "golden file {} unreadable ({e}): MCPTAPE_BLESS=1 writes it",
            path.display()
        ),
    };
    assert_same_text(
        name,
        &want,
        actual,
        &format!(
            "actual (masked; if the change is intended, rerun with MCPTAPE_BLESS=1 and review \
             the diff of tests/golden):\n{actual}"
        ),
    );
}
