//! Headless Chromium (Debian's `chromium`, installed by ./scripts/test) driven by playwright-core
//! (tests/browser, its own npm folder): [`probe`] loads an HTML file from disk, runs steps in it
//! and gives back what it saw — the steps' results, console errors and warnings, uncaught page
//! errors, and every request the page made (a self-contained page makes none).

use super::{pretty, repo, run_with_timeout, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What the page showed.
#[derive(Debug)]
pub struct Probe {
    /// One per step: a count, texts, an `eval`'s value (null for actions).
    pub results: Vec<Value>,
    pub console: Vec<String>,
    pub page_errors: Vec<String>,
    pub requests: Vec<String>,
    /// `first-contentful-paint` and the page's own `readyMs` (its script's run to the first
    /// rendered list), milliseconds.
    pub paint: Value,
    doc: Value,
}

impl Probe {
    /// The page loaded, every step ran, and nothing went wrong in it: no console error or
    /// warning, no uncaught error, no request for anything but the file itself.
    pub fn clean(self) -> Probe {
        assert!(
            self.doc.get("error").is_none()
                && self.console.is_empty()
                && self.page_errors.is_empty()
                && self.requests.is_empty(),
            "the page did not run cleanly:\n{}",
            pretty(&self.doc)
        );
        self
    }

    /// Step `n`'s result as a number.
    pub fn count(&self, n: usize) -> u64 {
        self.results[n]
            .as_u64()
            .unwrap_or_else(|| panic!("step {n} gave no count: {}", pretty(&self.doc)))
    }

    /// Step `n`'s result as texts.
    pub fn texts(&self, n: usize) -> Vec<String> {
        serde_json::from_value(self.results[n].clone())
            .unwrap_or_else(|_| panic!("step {n} gave no texts: {}", pretty(&self.doc)))
    }
}

/// A probe step: `step("click", ".row .head")`, …; see tests/browser/probe.mjs.
pub fn step(what: &str, sel: &str) -> Value {
    serde_json::json!({"do": what, "sel": sel})
}

/// A probe step with a value (`select`, `fill`, `scroll`, `screenshot` full page).
pub fn step_with(what: &str, sel: &str, value: impl Into<Value>) -> Value {
    serde_json::json!({"do": what, "sel": sel, "value": value.into()})
}

/// A step evaluating `js` in the page; its value is the result.
pub fn eval(js: &str) -> Value {
    serde_json::json!({"do": "eval", "js": js})
}

/// A screenshot of the page into `path` (the whole page).
pub fn screenshot(path: &Path) -> Value {
    serde_json::json!({"do": "screenshot", "path": path, "value": true})
}

/// Where the tests keep their screenshots: target/tmp/screenshots (kept after the run).
pub fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir.join(name)
}

/// Opens `page` in headless Chromium and runs `steps`.
pub fn probe(page: &Path, steps: &[Value]) -> Probe {
    probe_at(page.as_os_str(), steps)
}

/// Opens the page at `url` (one a test serves on loopback) in headless Chromium and runs
/// `steps`.
pub fn probe_url(url: &str, steps: &[Value]) -> Probe {
    probe_at(std::ffi::OsStr::new(url), steps)
}

fn probe_at(page: &std::ffi::OsStr, steps: &[Value]) -> Probe {
    let driver = repo().join("tests/browser/node_modules/playwright-core");
    assert!(
        driver.exists() && Path::new("/usr/bin/chromium").exists(),
        "headless Chromium or playwright-core is missing: run ./scripts/test (it installs \
         Debian's chromium and tests/browser)"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let steps_file = dir.path().join("steps.json");
    std::fs::write(&steps_file, Value::from(steps.to_vec()).to_string()).expect("steps");
    let mut cmd = Command::new("node");
    cmd.arg(repo().join("tests/browser/probe.mjs"))
        .arg(page)
        .arg(&steps_file)
        .env("HOME", dir.path());
    let out = run_with_timeout(cmd, Duration::from_secs(240));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the browser probe printed no JSON ({e}); status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    let strings =
        |k: &str| -> Vec<String> { serde_json::from_value(doc[k].clone()).unwrap_or_default() };
    Probe {
        results: serde_json::from_value(doc["results"].clone()).unwrap_or_default(),
        console: strings("console"),
        page_errors: strings("pageErrors"),
        requests: strings("requests"),
        paint: doc["paint"].clone(),
        doc,
    }
}
