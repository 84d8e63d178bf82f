//! The install paths, from the artefacts `scripts/package` builds (./scripts/test runs it first):
//! the Python wheel installed into a fresh venv (the binary on PATH, the pytest plugin), by
//! `pipx install` and run by `uvx`, the npm packages installed from their local tarballs into a
//! fresh project (`npx mcptape`), each then
//! used for real — a session of server-everything recorded through it and played back to the
//! official Python SDK client — and the pytest plugin driving that same client.

use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The artefact in target/package-out/`sub` whose file name starts with `prefix`.
fn artefact(sub: &str, prefix: &str) -> PathBuf {
    let dir = repo().join("target/package-out").join(sub);
    let found = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run ./scripts/test (it runs scripts/package)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        });
    found.unwrap_or_else(|| panic!("no {prefix}* in {}: run scripts/package", dir.display()))
}

fn ok(mut cmd: Command, what: &str) -> String {
    let out = run_with_timeout(
        {
            cmd.env_remove("MCPTAPE_BIN").env_remove("CI");
            cmd
        },
        Duration::from_secs(300),
    );
    assert!(
        out.status.success(),
        "{what}: {}\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A fresh venv in `dir` with the wheel installed from its file: its `bin` folder.
fn wheel_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    ok(
        {
            let mut c = Command::new("python3");
            c.args(["-m", "venv"]).arg(&venv);
            c
        },
        "python3 -m venv",
    );
    ok(
        {
            let mut c = Command::new(venv.join("bin/pip"));
            c.args([
                "install",
                "--quiet",
                "--no-index",
                "--disable-pip-version-check",
            ])
            .arg(artefact("wheel", "mcptape-"));
            c
        },
        "pip install the wheel",
    );
    venv.join("bin")
}

/// Records the Python client's `everything` scenario through `mcptape` (a command line that
/// runs the installed binary), plays it back to the same client, and checks the answers agree.
fn record_and_play_through(mcptape: &[String], dir: &Path, what: &str) {
    let tape = s(dir.join("installed.jsonl"));
    let mut record = mcptape.to_vec();
    record.extend(["record".into(), "--tape".into(), tape.clone(), "--".into()]);
    record.extend(everything());
    let live = py_ok(
        "everything",
        "legacy",
        &record,
        &format!("through {what} record"),
    );
    let mut play = mcptape.to_vec();
    play.extend(["play".into(), tape]);
    let played = py_ok(
        "everything",
        "legacy",
        &play,
        &format!("against {what} play"),
    );
    assert_eq!(
        steps(&live),
        steps(&played),
        "{what}: play answers as recorded"
    );
}

fn steps(t: &Value) -> Value {
    t["steps"].clone()
}

#[test]
fn the_wheel_installs_into_a_fresh_venv_and_records_and_plays() {
    let dir = tmp();
    let bin = wheel_venv(dir.path());
    let v = ok(
        {
            let mut c = Command::new(bin.join("mcptape"));
            c.arg("--version");
            c
        },
        "mcptape --version",
    );
    assert_eq!(v.trim(), format!("mcptape {}", env!("CARGO_PKG_VERSION")));
    record_and_play_through(&[s(bin.join("mcptape"))], dir.path(), "the wheel's");
}

/// `pipx install WHEEL` (pipx pinned in tests/dist, installed by scripts/package) into a fresh
/// PIPX_HOME and PIPX_BIN_DIR, offline: the `mcptape` it puts on the bin dir records and plays.
#[test]
fn pipx_installs_the_local_wheel_and_its_mcptape_records_and_plays() {
    let dir = tmp();
    let pipx = repo().join("tests/dist/.venv/bin/pipx");
    assert!(
        pipx.exists(),
        "{} is missing: run ./scripts/test (scripts/package installs tests/dist/requirements.txt)",
        pipx.display()
    );
    let (home, bin) = (dir.path().join("pipx-home"), dir.path().join("pipx-bin"));
    let out = ok(
        {
            let mut c = Command::new(&pipx);
            c.args(["install", "--pip-args=--no-index"])
                .arg(artefact("wheel", "mcptape-"))
                .env("PIPX_HOME", &home)
                .env("PIPX_BIN_DIR", &bin)
                .env("PIPX_MAN_DIR", dir.path().join("pipx-man"))
                .env("PIP_NO_INDEX", "1");
            c
        },
        "pipx install the wheel",
    );
    assert!(out.contains("installed package mcptape"), "{out}");
    let mcptape = bin.join("mcptape");
    let v = ok(
        {
            let mut c = Command::new(&mcptape);
            c.arg("--version");
            c
        },
        "mcptape --version (pipx)",
    );
    assert_eq!(v.trim(), format!("mcptape {}", env!("CARGO_PKG_VERSION")));
    record_and_play_through(&[s(&mcptape)], dir.path(), "pipx's");
}

/// `uvx --from WHEEL mcptape`: uv (pinned in tests/dist, installed by scripts/package) makes a
/// throwaway environment from the local wheel, offline.
#[test]
fn uvx_runs_the_binary_from_the_local_wheel() {
    let dir = tmp();
    let uvx = repo().join("tests/dist/.venv/bin/uvx");
    assert!(
        uvx.exists(),
        "{} is missing: run ./scripts/test",
        uvx.display()
    );
    // `env` first: the client that spawns it passes no environment of its own.
    let wrapper = vec![
        "env".to_string(),
        format!("UV_CACHE_DIR={}", s(dir.path().join("uv-cache"))),
        format!("UV_TOOL_DIR={}", s(dir.path().join("uv-tools"))),
        s(&uvx),
        "--offline".into(),
        "--from".into(),
        s(artefact("wheel", "mcptape-")),
        "mcptape".into(),
    ];
    let mut c = Command::new(&wrapper[0]);
    c.args(&wrapper[1..]).arg("--version");
    let v = ok(c, "uvx mcptape --version");
    assert_eq!(v.trim(), format!("mcptape {}", env!("CARGO_PKG_VERSION")));
    record_and_play_through(&wrapper, dir.path(), "uvx mcptape");
}

#[test]
fn the_npm_packages_install_from_their_tarballs_and_npx_runs_the_binary() {
    let dir = tmp();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"name":"try-mcptape","private":true}"#,
    )
    .unwrap();
    ok(
        {
            let mut c = Command::new("npm");
            c.args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .arg(artefact("npm", "mcptape-linux-"))
                .arg(artefact("npm", "mcptape-0"))
                .current_dir(&project);
            c
        },
        "npm install the tarballs",
    );
    let npx = |args: &[&str]| {
        let mut c = Command::new("npx");
        c.arg("--no-install")
            .arg("mcptape")
            .args(args)
            .current_dir(&project);
        c
    };
    let v = ok(npx(&["--version"]), "npx mcptape --version");
    assert_eq!(v.trim(), format!("mcptape {}", env!("CARGO_PKG_VERSION")));
    // The exit status comes through the wrapper: a usage error is 64.
    let out = run_with_timeout(npx(&["no-such-command"]), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let wrapper = vec![
        "npx".to_string(),
        "--prefix".into(),
        s(&project),
        "--no-install".into(),
        "mcptape".into(),
    ];
    record_and_play_through(&wrapper, dir.path(), "npx mcptape");
}

/// A pytest test file driving the official Python SDK client against `mcptape.server(…)`.
const PYTEST_FILE: &str = r#"
import os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = os.environ["EVERYTHING"].split("\x1f")

async def echo(cmd, message):
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("echo", {"message": message})
            return res.content[0].text

def test_echo(mcptape):
    cmd = mcptape.server(SERVER)
    assert anyio.run(echo, cmd, os.environ.get("MESSAGE", "taped")) == "Echo: " + os.environ.get("MESSAGE", "taped")
"#;

#[test]
fn the_pytest_plugin_records_once_plays_after_fails_a_test_on_a_miss_and_appends_in_mode_new() {
    let dir = tmp();
    let bin = wheel_venv(dir.path());
    let site = std::fs::read_dir(dir.path().join("venv/lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    let project = dir.path().join("proj");
    std::fs::create_dir_all(project.join("tests")).unwrap();
    std::fs::write(project.join("tests/test_echo.py"), PYTEST_FILE).unwrap();
    // pytest and the SDK come from the peers' venv; the plugin (and its binary) from the
    // wheel's fresh venv, found through its entry point.
    let pytest = |mode: Option<&str>, env: &[(&str, &str)]| {
        let mut c = Command::new(python());
        c.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .current_dir(&project)
            .env("PYTHONPATH", &site)
            .env(
                "PATH",
                format!("{}:{}", s(&bin), std::env::var("PATH").unwrap()),
            )
            .env("EVERYTHING", everything().join("\x1f"))
            .env_remove("CI");
        if let Some(m) = mode {
            c.arg(format!("--mcptape-mode={m}"));
        }
        for (k, v) in env {
            c.env(k, v);
        }
        run_with_timeout(c, Duration::from_secs(180))
    };
    let tape = project.join("tests/tapes/test_echo/test_echo.jsonl");

    // CI set and no tape: the test fails, saying so, and records nothing.
    let out = pytest(None, &[("CI", "true")]);
    assert!(!out.status.success());
    assert_contains(&text(&out.stdout), "no tape");
    assert!(!tape.exists());

    // once: records (the tape is named after the test) …
    let out = pytest(None, &[]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(tape.exists(), "the tape is named after the test");
    Mt::new(["verify"]).arg(&tape).run().success();
    // … then plays: no server at all (a server command that cannot start is never started).
    let out = pytest(None, &[("EVERYTHING", "/nonexistent/server")]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // A request that is not on the tape: the test fails with mcptape's explanation.
    let out = pytest(Some("none"), &[("MESSAGE", "something else")]);
    assert!(!out.status.success());
    let said = text(&out.stdout);
    assert_contains(&said, "1 failed");
    assert_contains(&said, "mcptape play");
    assert_contains(&said, "missed the tape");
    assert_contains(&said, "something else");

    // new: what is not on the tape goes to the live server and is appended; after that, the
    // tape alone answers it.
    let out = pytest(Some("new"), &[("MESSAGE", "something else")]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        tape_lines(&tape).iter().any(|l| l["appended"] == true),
        "the live answer is appended to the tape"
    );
    Mt::new(["verify"]).arg(&tape).run().success();
    let out = pytest(Some("none"), &[("MESSAGE", "something else")]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
