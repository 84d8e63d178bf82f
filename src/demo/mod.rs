//! The bundled demo: a small MCP server (hidden subcommand `demo-server`), a scripted client, and
//! `run_demo`, which drives the whole loop with the real binary in real processes.

pub(crate) mod client;
pub mod server;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs record → play → a miss → drift, printing each step. Returns whether everything behaved
/// as the demo expects (play identical to record, the miss explained, the drift seen).
pub fn run_demo(exe: &Path, dir: &Path) -> Result<bool> {
    crate::tape::store::create_private_dir(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let tape = dir.join("demo.jsonl");
    let drifted_tape = dir.join("demo-drifted.jsonl");
    let exe_s = exe.display().to_string();
    let mut ok = true;

    println!("mcptape demo: the whole loop on the bundled \"weather desk\" MCP server\n");
    println!("1. record: a scripted client talks to the demo server through mcptape record");
    println!(
        "   $ mcptape record --tape {} -- mcptape demo-server",
        tape.display()
    );
    let mut cmd = Command::new(exe);
    cmd.arg("record")
        .arg("--tape")
        .arg(&tape)
        .arg("--")
        .arg(exe)
        .arg("demo-server");
    let recorded = client::run_session(cmd).context("recording the demo session")?;
    print_lines(&recorded.summary_lines());

    println!("\n2. play: the same client, and no server at all: mcptape answers from the tape");
    println!("   $ mcptape play {}", tape.display());
    let mut cmd = Command::new(exe);
    cmd.arg("play").arg(&tape);
    let played = client::run_session(cmd).context("playing the demo tape")?;
    print_lines(&played.summary_lines());
    let same = recorded
        .steps
        .iter()
        .zip(&played.steps)
        .filter(|(a, b)| same_step(a, b))
        .count();
    if same == recorded.steps.len() && played.steps.len() == recorded.steps.len() {
        println!("   ✓ the client saw exactly what it saw against the real server ({same} of {same} steps identical)");
    } else {
        println!(
            "   ✗ only {same} of {} steps identical",
            recorded.steps.len()
        );
        ok = false;
    }

    println!("\n3. a call that is not on the tape: play says why, to the client and on stderr");
    let asked = json!({"name": "convert_temperature", "arguments": {"celsius": 30}});
    println!("   → tools/call {asked}");
    let (answer, stderr) = ask_play(exe, &tape, &asked)?;
    match answer.get("error") {
        Some(err) => {
            println!(
                "   ← error {}: {}",
                err["code"],
                err["message"].as_str().unwrap_or_default()
            );
            println!("   stderr of mcptape play:");
            print_lines(&stderr.lines().map(str::to_string).collect::<Vec<_>>());
        }
        None => {
            println!("   ✗ expected an error, got {answer}");
            ok = false;
        }
    }

    println!(
        "\n4. drift: the same session against a regressed build (its tools/list is byte-identical)"
    );
    println!(
        "   $ mcptape record --tape {} -- mcptape demo-server --variant drifted",
        drifted_tape.display()
    );
    let mut cmd = Command::new(exe);
    cmd.arg("record")
        .arg("--tape")
        .arg(&drifted_tape)
        .arg("--")
        .arg(exe)
        .args(["demo-server", "--variant", "drifted"]);
    let drifted = client::run_session(cmd).context("recording the drifted demo session")?;
    let mut drifts = 0;
    for (a, b) in recorded.steps.iter().zip(&drifted.steps) {
        if same_step(a, b) {
            continue;
        }
        drifts += 1;
        let (ra, rb) = (&a.response["result"], &b.response["result"]);
        println!("   ✗ {} drifted:", a.name);
        for d in crate::wire::canonical::differences(ra, rb).iter().take(4) {
            println!(
                "       {}  was {}  now {}",
                d.path.replacen('$', "result", 1),
                crate::wire::canonical::short(d.left.as_ref(), 50),
                crate::wire::canonical::short(d.right.as_ref(), 50)
            );
        }
    }
    if drifts == 0 {
        println!("   ✗ expected drift, saw none");
        ok = false;
    }

    let norm = crate::compare::Normalizer::new(true, &[], false)?;
    let check_cfg = |variant: &str| {
        let mut cfg = crate::check::CheckConfig::new(
            tape.clone(),
            vec![
                exe_s.clone(),
                "demo-server".into(),
                "--variant".into(),
                variant.into(),
            ],
        );
        cfg.timeout = std::time::Duration::from_secs(10);
        cfg.normalizer = norm.clone();
        cfg
    };
    // check is async (it shares the drivers with HTTP); the demo is a plain program.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the demo's runtime")?;
    println!("\n5. check: replay the recorded client side against the healthy build and grade it");
    println!(
        "   $ mcptape check {} -- mcptape demo-server",
        tape.display()
    );
    let (healthy, _) = rt.block_on(crate::check::check(&check_cfg("healthy")))?;
    print_lines(
        &crate::report::check_console(&healthy, false)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>(),
    );
    if healthy.grade != crate::check::Grade::A || !healthy.gate.passed {
        println!("   ✗ expected grade A");
        ok = false;
    }

    println!("\n6. check the regressed build: same tools/list, different behaviour; the gate fails (exit 1)");
    println!(
        "   $ mcptape check {} -- mcptape demo-server --variant drifted",
        tape.display()
    );
    let (regressed, _) = rt.block_on(crate::check::check(&check_cfg("drifted")))?;
    print_lines(
        &crate::report::check_console(&regressed, false)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>(),
    );
    let kinds = &regressed.regressions;
    if regressed.gate.passed
        || !kinds.contains_key(&crate::compare::ChangeKind::ValueChange)
        || !kinds.contains_key(&crate::compare::ChangeKind::StructureChange)
    {
        println!("   ✗ expected a value change and a structure change");
        ok = false;
    }

    println!("\n7. diff: the two recordings, aligned by content, down to the first drifted call (exit 1: output drift)");
    println!(
        "   $ mcptape diff {} {}",
        tape.display(),
        drifted_tape.display()
    );
    let (d, _) = crate::diff::diff(&tape, &drifted_tape, &norm)?;
    print_lines(
        &crate::report::diff_text(&d, false, false)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>(),
    );
    if d.verdict != crate::diff::Verdict::OutputDrift {
        println!("   ✗ expected output drift");
        ok = false;
    }
    println!("\nTapes: {} and {}", tape.display(), drifted_tape.display());
    println!("Look inside: {exe_s} show {}", tape.display());
    Ok(ok)
}

fn print_lines(lines: &[String]) {
    for l in lines {
        println!("   {l}");
    }
}

fn same_step(a: &client::Step, b: &client::Step) -> bool {
    a.response == b.response && a.notifications == b.notifications
}

/// Sends the handshake and one `tools/call` to `mcptape play`, returns its answer and stderr.
fn ask_play(exe: &Path, tape: &Path, params: &Value) -> Result<(Value, String)> {
    let mut child = Command::new(exe)
        .arg("play")
        .arg(tape)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting mcptape play")?;
    let mut stdin = child.stdin.take().expect("piped");
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":client::CLIENT_PROTOCOL_VERSION,"capabilities":{},"clientInfo":{"name":"demo","version":"1"}}});
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":params});
    writeln!(
        stdin,
        "{init}\n{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n{call}"
    )?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut answer = Value::Null;
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line?)?;
        if v.get("id") == Some(&json!(2)) {
            answer = v;
            break;
        }
    }
    drop(stdin);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)?;
    child.wait()?;
    if answer.is_null() {
        bail!("mcptape play gave no answer to the call; its stderr:\n{stderr}");
    }
    Ok((answer, stderr))
}
