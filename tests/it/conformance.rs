//! The MCP conformance suite (`@modelcontextprotocol/conformance`) three ways, as
//! `scripts/conformance` does it by hand: its server scenarios **direct** against a server,
//! **through** `mcptape record --url` in front of that same server, and **against**
//! `mcptape play <that tape> --listen`. A scenario agrees when the same check ids end with the
//! same statuses (INFO entries left out). A test fails on any scenario where a check that
//! passes directly does not pass through record or against play, and lists every difference
//! with its checks (a check may pass where it fails directly: mcptape's listener refuses a
//! foreign `Host` itself, stricter than some servers).
//!
//! The suite and the Node 22 it needs are the pinned install in `scripts/conformance.d`
//! (`./scripts/test` runs `npm ci` there): 0.1.16 for the legacy era (`--suite all`), and
//! 0.2.0-alpha.11 (the alias package `conformance-2026`) for the 2026 era
//! (`--requirements 2026-07-28`). Every server is on 127.0.0.1 and a port the kernel chose (it says which); everything a test
//! starts is killed when it ends, pass or fail. Results stay in
//! `target/tmp/conformance/<run>/{direct,record,play}/` for a look afterwards.

use crate::harness::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// The longest one suite run (one column) may take before it is killed (a run takes 2-15 s).
const SUITE_LIMIT: Duration = Duration::from_secs(90);

// --- what runs ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Server {
    /// `tests/peers/conformance_server.py --port 0`: passes every scenario directly.
    Ours,
    /// server-everything `streamableHttp`, forced onto loopback.
    Everything,
    /// The Python SDK fixture, `tests/peers/py_server.py --http --port 0`.
    PySdk,
}

impl Server {
    /// Whether the server is known to pass every scenario the suite scores, directly.
    fn passes_every_scenario(self) -> bool {
        matches!(self, Server::Ours)
    }

    fn name(self) -> &'static str {
        match self {
            Server::Ours => "ours",
            Server::Everything => "everything",
            Server::PySdk => "py-sdk",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Era {
    /// conformance 0.1.16, `--suite all`.
    Legacy,
    /// conformance 0.2.0-alpha.11, `--requirements 2026-07-28`.
    Y2026,
}

impl Era {
    fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Y2026 => "2026",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Era::Legacy => "conformance 0.1.16 --suite all",
            Era::Y2026 => "conformance 0.2.0-alpha.11 --requirements 2026-07-28",
        }
    }

    /// The suite's entry file in the pinned install.
    fn suite_js(self) -> PathBuf {
        let modules = pinned();
        installed(match self {
            Era::Legacy => modules.join("@modelcontextprotocol/conformance/dist/index.js"),
            Era::Y2026 => modules.join("conformance-2026/dist/index.js"),
        })
    }

    fn args(self, url: &str, out: &Path) -> Vec<String> {
        let mut v = vec![
            "server".into(),
            "--url".into(),
            url.into(),
            "-o".into(),
            s(out),
        ];
        match self {
            Era::Legacy => v.extend(["--suite".into(), "all".into()]),
            Era::Y2026 => v.extend(["--requirements".into(), "2026-07-28".into()]),
        }
        v
    }
}

fn pinned() -> PathBuf {
    repo().join("scripts/conformance.d/node_modules")
}

/// A file of the pinned suite install, or a failure that says how to install it.
fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "the conformance suite is not installed ({} is missing): run ./scripts/test \
         (it runs npm ci in scripts/conformance.d)",
        path.display()
    );
    path
}

/// The pinned Node 22 (the suite needs it; the machine's node may be older).
fn node22() -> PathBuf {
    installed(pinned().join(".bin/node"))
}

// --- processes ---------------------------------------------------------------------------------

/// Starts `server` on a loopback port of the kernel's choosing (each says which); returns it
/// and its `http://127.0.0.1:P/mcp`.
fn start_server(server: Server, dir: &Path) -> (Proc, String) {
    let (cmd, said) = match server {
        Server::Ours => {
            let mut c = Command::new(python());
            c.arg(peer("conformance_server.py")).args(["--port", "0"]);
            (c, "listening http://127.0.0.1:")
        }
        Server::PySdk => (py_server_http_cmd(), LISTENING_ON),
        Server::Everything => (everything_http_cmd("streamableHttp"), LISTENING_ON),
    };
    let (p, port) = listening_on_0(server.name(), dir.join("server.log"), cmd, said);
    (p, format!("http://127.0.0.1:{port}/mcp"))
}

/// How long record and play may take to exit after SIGINT, and a server after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(10);

// --- the suite's results -------------------------------------------------------------------------

/// One entry of a scenario's `checks.json`.
struct Check {
    id: String,
    status: String,
    error: Option<String>,
}

/// One suite run (a column): per scenario, its checks (`None`: no readable checks.json), the
/// order the suite ran them in, and the scenarios it said it does not score.
struct Column {
    scenarios: BTreeMap<String, Option<Vec<Check>>>,
    order: Vec<String>,
    not_scored: BTreeSet<String>,
    /// The suite's exit status (`None`: killed after SUITE_LIMIT).
    status: Option<ExitStatus>,
    console: PathBuf,
}

impl Column {
    /// (passed, passed + failed) over all scenarios, INFO/WARNING/SKIPPED left out.
    fn totals(&self) -> (usize, usize) {
        let mut pass = 0;
        let mut all = 0;
        for checks in self.scenarios.values().flatten() {
            for c in checks {
                match c.status.as_str() {
                    "SUCCESS" => {
                        pass += 1;
                        all += 1
                    }
                    "FAILURE" => all += 1,
                    _ => {}
                }
            }
        }
        (pass, all)
    }
}

/// `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>` (the suite's folder name) → the scenario.
fn scenario_of(dir_name: &str) -> Option<String> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$").expect("regex")
    });
    re.captures(dir_name).map(|c| c[1].to_string())
}

/// "0", "1", "signal 9": how a process ended.
fn ended(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => c.to_string(),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => st.to_string(),
    }
}

/// Runs the era's suite against `url`; results in `dir/NAME/`, console output in `dir/NAME.txt`.
fn run_suite(era: Era, url: &str, dir: &Path, name: &str) -> Column {
    let out = dir.join(name);
    let console = dir.join(format!("{name}.txt"));
    let mut cmd = Command::new(node22());
    cmd.arg(era.suite_js()).args(era.args(url, &out));
    let mut g = Proc::spawn(&format!("conformance ({name})"), cmd, console.clone());
    // The suite exits non-zero whenever a scenario fails: that is data here, not an error.
    let status = g.wait_for(SUITE_LIMIT);
    read_column(&out, &console, status)
}

fn read_column(out: &Path, console: &Path, status: Option<ExitStatus>) -> Column {
    let mut scenarios = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(out) {
        for e in entries.flatten() {
            let Some(name) = scenario_of(&e.file_name().to_string_lossy()) else {
                continue;
            };
            let checks = std::fs::read_to_string(e.path().join("checks.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v.as_array().cloned())
                .map(|a| {
                    a.iter()
                        .map(|c| Check {
                            id: c["id"].as_str().unwrap_or("?").to_string(),
                            status: c["status"].as_str().unwrap_or("?").to_string(),
                            error: c["errorMessage"].as_str().map(str::to_string),
                        })
                        .filter(|c| c.status != "INFO")
                        .collect()
                });
            scenarios.insert(name, checks);
        }
    }
    let text = std::fs::read_to_string(console).unwrap_or_default();
    let mut order = Vec::new();
    let mut not_scored = BTreeSet::new();
    let mut in_not_scored = false;
    for line in text.lines() {
        if let Some(s) = line
            .strip_prefix("=== Running scenario: ")
            .and_then(|l| l.strip_suffix(" ==="))
        {
            if !order.iter().any(|o| o == s) {
                order.push(s.to_string());
            }
        }
        // "Not scored for 2026-07-28: N scenario(s) run, …" then "  ✗ name (reason)" lines.
        if line.starts_with("Not scored for ") {
            in_not_scored = true;
        } else if in_not_scored {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(_mark), Some(name), Some(reason)) if reason.starts_with('(') => {
                    not_scored.insert(name.to_string());
                }
                _ => in_not_scored = false,
            }
        }
    }
    Column {
        scenarios,
        order,
        not_scored,
        status,
        console: console.to_path_buf(),
    }
}

/// A scenario's checks as sorted `id=STATUS`, the thing two runs must agree on.
fn signature(checks: Option<&Option<Vec<Check>>>) -> Vec<String> {
    match checks {
        None => vec!["<not run>".into()],
        Some(None) => vec!["<no checks.json>".into()],
        Some(Some(c)) => {
            let mut v: Vec<String> = c.iter().map(|c| format!("{}={}", c.id, c.status)).collect();
            v.sort();
            v
        }
    }
}

/// Whether `other` passes every check `direct` passes (as many times: a check id may repeat).
/// A check that fails directly may pass elsewhere: mcptape's own listener is stricter than some
/// servers (it refuses a foreign `Host` or `Origin` itself), which is not a difference the bar
/// forbids: every check that passes directly must pass through record and against play.
fn keeps(direct: Option<&Option<Vec<Check>>>, other: Option<&Option<Vec<Check>>>) -> bool {
    let passed = |c: Option<&Option<Vec<Check>>>| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        if let Some(Some(checks)) = c {
            for c in checks.iter().filter(|c| c.status == "SUCCESS") {
                *m.entry(c.id.clone()).or_default() += 1;
            }
        }
        m
    };
    let (d, o) = (passed(direct), passed(other));
    d.iter()
        .all(|(id, n)| o.get(id).copied().unwrap_or(0) >= *n)
}

/// A check id's statuses in a column and the distinct error messages they came with.
type Cell = (String, Vec<String>);

/// A check id's statuses in a column ("SUCCESS", "3×FAILURE", "2×SUCCESS+FAILURE", "absent",
/// "not run"), plus the distinct error messages it came with.
fn check_cell(col: &Column, scenario: &str, id: &str) -> Cell {
    let checks = match col.scenarios.get(scenario) {
        None => return ("not run".into(), vec![]),
        Some(None) => return ("no result".into(), vec![]),
        Some(Some(checks)) => checks,
    };
    let of_id: Vec<&Check> = checks.iter().filter(|c| c.id == id).collect();
    if of_id.is_empty() {
        return ("absent".into(), vec![]);
    }
    // Runs of one status, in the order the suite reported them.
    let mut runs: Vec<(usize, &str)> = Vec::new();
    for c in &of_id {
        match runs.last_mut() {
            Some((n, st)) if *st == c.status => *n += 1,
            _ => runs.push((1, &c.status)),
        }
    }
    let cell = runs
        .iter()
        .map(|(n, st)| {
            if *n == 1 {
                st.to_string()
            } else {
                format!("{n}×{st}")
            }
        })
        .collect::<Vec<_>>()
        .join("+");
    let mut errors: Vec<String> = Vec::new();
    for c in &of_id {
        if let Some(e) = &c.error {
            if c.status != "SUCCESS" && !errors.contains(e) {
                errors.push(e.clone());
            }
        }
    }
    (cell, errors)
}

fn short(s: &str, n: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}…", one_line.chars().take(n).collect::<String>())
    }
}

/// The scenario's cell like the script's table: "✓ 3/3", "✗ 1/2 2w", "– 0/0", "not run".
fn scenario_cell(col: &Column, scenario: &str) -> String {
    match col.scenarios.get(scenario) {
        None => "not run".into(),
        Some(None) => "no result".into(),
        Some(Some(c)) => {
            let n = |st: &str| c.iter().filter(|x| x.status == st).count();
            let (pass, fail, warn) = (n("SUCCESS"), n("FAILURE"), n("WARNING"));
            let mark = if fail > 0 {
                "✗"
            } else if pass > 0 {
                "✓"
            } else {
                "–"
            };
            let w = if warn > 0 {
                format!(" {warn}w")
            } else {
                String::new()
            };
            format!("{mark} {pass}/{}{w}", pass + fail)
        }
    }
}

// --- the three-way run ---------------------------------------------------------------------------

/// Runs the suite direct, through record and against play for (`server`, `era`); panics with
/// every scenario where record or play differs from direct. For a server that
/// [passes every scenario](Server::passes_every_scenario), every scenario the suite scores must
/// also pass directly (anything else is a fault of this harness).
fn three_way(server: Server, era: Era) {
    let direct_passes = server.passes_every_scenario();
    let label = format!("{} {} ({})", server.name(), era.name(), era.describe());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("conformance")
        .join(format!("{}-{}", server.name(), era.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("results dir");
    // Fail on a missing install before anything is started.
    node22();
    era.suite_js();

    let (mut upstream, url) = start_server(server, &dir);

    let direct = run_suite(era, &url, &dir, "direct");

    let tape = dir.join("conformance.jsonl");
    let mut recorder = Served::spawn_logged(
        &["record", "--url", &url, "--tape", &s(&tape)],
        dir.join("record.log"),
    );
    let record = run_suite(era, &recorder.url, &dir, "record");
    let (record_exit, _) = recorder.signal(libc::SIGINT, STOP_LIMIT); // the tape is closed and complete
    assert!(
        tape.exists(),
        "mcptape record left no tape at {} ({record_exit}); log:\n{}",
        tape.display(),
        recorder.log_text()
    );

    let mut player = Served::spawn_logged(
        &["play", &s(&tape), "--listen", "127.0.0.1:0"],
        dir.join("play.log"),
    );
    let play = run_suite(era, &player.url, &dir, "play");
    let (play_exit, _) = player.signal(libc::SIGINT, STOP_LIMIT);
    upstream.stop(libc::SIGTERM, STOP_LIMIT);

    for col in [&direct, &record, &play] {
        assert!(
            !col.scenarios.is_empty(),
            "the suite produced no results ({:?}); its output {}:\n{}",
            col.status,
            col.console.display(),
            std::fs::read_to_string(&col.console).unwrap_or_default()
        );
    }

    let report = compare(&label, &dir, &direct, &record, &play, direct_passes);
    let play_summary = player
        .log_text()
        .lines()
        .find(|l| l.contains("served"))
        .unwrap_or("(no summary line)")
        .to_string();
    let _ = std::fs::write(
        dir.join("table.txt"),
        format!("{}\n{}\n", report.table, report.summary),
    );
    eprintln!("{}\n{}", report.table, report.summary);
    if !report.problems.is_empty() {
        panic!(
            "{}\n\n{}\nrecord exited {} after SIGINT, play exited {} ({play_summary}); results, \
             tape and logs in {}",
            report.summary,
            report.problems,
            ended(record_exit),
            ended(play_exit),
            dir.display()
        );
    }
}

struct Report {
    /// The per-scenario table (as scripts/conformance prints it).
    table: String,
    /// One line: the three totals and how many scenarios differ.
    summary: String,
    /// Empty when the test passes: otherwise every differing scenario, with its checks.
    problems: String,
}

fn compare(
    label: &str,
    dir: &Path,
    direct: &Column,
    record: &Column,
    play: &Column,
    direct_passes: bool,
) -> Report {
    // Scenario order: as the suite ran them, then any others it left results for.
    let mut order: Vec<String> = Vec::new();
    for col in [direct, record, play] {
        for s in col.order.iter().chain(col.scenarios.keys()) {
            if !order.contains(s) {
                order.push(s.clone());
            }
        }
    }
    let cols = [("direct", direct), ("record", record), ("play", play)];

    let mut rows = vec![[
        "scenario".to_string(),
        "direct".into(),
        "through record".into(),
        "against play".into(),
        String::new(),
    ]];
    let mut differing = String::new();
    let mut regressed: Vec<String> = Vec::new();
    let (mut record_diff, mut play_diff) = (0, 0);
    let mut direct_failed = Vec::new();
    for sc in &order {
        let d = signature(direct.scenarios.get(sc));
        let r_same = signature(record.scenarios.get(sc)) == d;
        let p_same = signature(play.scenarios.get(sc)) == d;
        record_diff += usize::from(!r_same);
        play_diff += usize::from(!p_same);
        let scored = !direct.not_scored.contains(sc);
        if direct_passes && scored && !scenario_cell(direct, sc).starts_with('✓') {
            direct_failed.push(format!("{sc} ({})", scenario_cell(direct, sc)));
        }
        let r_keeps = keeps(direct.scenarios.get(sc), record.scenarios.get(sc));
        let p_keeps = keeps(direct.scenarios.get(sc), play.scenarios.get(sc));
        if !(r_keeps && p_keeps) {
            regressed.push(sc.clone());
        }
        let note = match (r_same, p_same) {
            (true, true) => "",
            (false, true) if r_keeps => "RECORD STRICTER",
            (true, false) if p_keeps => "PLAY STRICTER",
            (false, false) if r_keeps && p_keeps => "RECORD AND PLAY STRICTER",
            (false, true) => "RECORD DIFFERS",
            (true, false) => "PLAY DIFFERS",
            (false, false) => "RECORD AND PLAY DIFFER",
        };
        let note = if scored {
            note.to_string()
        } else {
            format!("{note} (not scored)").trim_start().to_string()
        };
        rows.push([
            sc.clone(),
            scenario_cell(direct, sc),
            scenario_cell(record, sc),
            scenario_cell(play, sc),
            note.clone(),
        ]);
        if r_same && p_same {
            continue;
        }

        // The scenario's check ids, in the order direct reported them, then any only the
        // others had.
        let mut ids: Vec<String> = Vec::new();
        for (_, col) in cols {
            if let Some(Some(checks)) = col.scenarios.get(sc) {
                for c in checks {
                    if !ids.contains(&c.id) {
                        ids.push(c.id.clone());
                    }
                }
            }
        }
        let _ = writeln!(
            differing,
            "  {sc}: {note}   [direct {}, through record {}, against play {}]",
            scenario_cell(direct, sc),
            scenario_cell(record, sc),
            scenario_cell(play, sc)
        );
        for (name, col) in cols {
            if matches!(col.scenarios.get(sc), None | Some(None)) {
                let _ = writeln!(differing, "      {name}: {}", check_cell(col, sc, "").0);
            }
        }
        // Only the checks whose statuses are not the same in all three columns.
        let rows: Vec<(&String, Vec<Cell>)> = ids
            .iter()
            .map(|id| {
                (
                    id,
                    cols.iter().map(|(_, c)| check_cell(c, sc, id)).collect(),
                )
            })
            .filter(|(_, cells): &(_, Vec<Cell>)| cells.iter().any(|(st, _)| *st != cells[0].0))
            .collect();
        let id_w = rows.iter().map(|(id, _)| id.len()).max().unwrap_or(0);
        let st_w = |i: usize| {
            rows.iter()
                .map(|(_, cells)| cells[i].0.chars().count())
                .max()
                .unwrap_or(0)
        };
        let (dw, rw) = (st_w(0), st_w(1));
        for (id, cells) in &rows {
            let _ = writeln!(
                differing,
                "      {id:<id_w$}  direct {:<dw$}  record {:<rw$}  play {}",
                cells[0].0, cells[1].0, cells[2].0
            );
            for ((name, _), (_, errors)) in cols.iter().zip(cells) {
                for e in errors.iter().take(4) {
                    let _ = writeln!(differing, "          {name} said: {}", short(e, 200));
                }
                if errors.len() > 4 {
                    let _ = writeln!(
                        differing,
                        "          {name} said {} more different things",
                        errors.len() - 4
                    );
                }
            }
        }
        let _ = writeln!(
            differing,
            "      checks.json: {}/{{direct,record,play}}/server-{sc}-*/",
            dir.display()
        );
    }
    let total = |c: &Column| {
        let (p, a) = c.totals();
        format!("{p}/{a}")
    };
    rows.push([
        "checks passed/total".into(),
        total(direct),
        total(record),
        total(play),
        String::new(),
    ]);

    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let fmt_row = |r: &[String; 5]| {
        r.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v}{}", " ".repeat(w - v.chars().count())))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let rule = widths
        .iter()
        .map(|w| "-".repeat(*w))
        .collect::<Vec<_>>()
        .join("  ");
    let mut table = format!("== {label}\n{}\n{rule}\n", fmt_row(&rows[0]));
    for r in &rows[1..rows.len() - 1] {
        let _ = writeln!(table, "{}", fmt_row(r));
    }
    let _ = writeln!(table, "{rule}\n{}", fmt_row(&rows[rows.len() - 1]));

    let n = order.len();
    let verdict = if record_diff == 0 && play_diff == 0 {
        format!("record and play agree with direct on all {n} scenarios")
    } else {
        format!("record differs on {record_diff}, play differs on {play_diff} of {n} scenarios")
    };
    let summary = format!(
        "{label}: direct {}, through record {}, against play {} checks passed; {verdict}",
        total(direct),
        total(record),
        total(play)
    );

    let mut problems = String::new();
    if !direct_failed.is_empty() {
        let _ = writeln!(
            problems,
            "HARNESS PROBLEM: this server passes every scored scenario directly, but the direct \
             run did not pass {} of them: {}",
            direct_failed.len(),
            direct_failed.join(", ")
        );
    }
    for (name, col) in cols {
        if col.status.is_none() {
            let _ = writeln!(
                problems,
                "the {name} run was killed after {SUITE_LIMIT:?} (see {})",
                col.console.display()
            );
        }
    }
    if !regressed.is_empty() {
        let _ = write!(
            problems,
            "{} scenario(s) where a check that passes directly does not pass through record or \
             against play ({}); every difference (checks whose statuses differ; INFO left \
             out):\n{differing}",
            regressed.len(),
            regressed.join(", ")
        );
    }
    Report {
        table,
        summary,
        problems,
    }
}

// --- the runs ------------------------------------------------------------------------------------

/// One `#[test]` per line `NAME: SERVER, ERA;`, running [`three_way`] for that server and era.
macro_rules! three_way_tests {
    ($($name:ident: $server:ident, $era:ident;)+) => {
        $(
            #[test]
            fn $name() {
                three_way(Server::$server, Era::$era);
            }
        )+
    };
}

three_way_tests! {
    conformance_ours_legacy_is_the_same_direct_through_record_and_against_play: Ours, Legacy;
    conformance_ours_2026_is_the_same_direct_through_record_and_against_play: Ours, Y2026;
    conformance_server_everything_legacy_is_the_same_direct_through_record_and_against_play:
        Everything, Legacy;
    conformance_py_sdk_2026_is_the_same_direct_through_record_and_against_play: PySdk, Y2026;
}
