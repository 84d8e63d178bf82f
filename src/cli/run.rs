use anyhow::Result;
use mcptape::run::{run, Mode, RunConfig};
use mcptape::tape::{store, WriteOptions};

/// Run an agent with its model calls and its MCP servers on one tape; replay it with the tools
/// from the tape, or fully offline.
///
///   mcptape run --tape bug-123 -- claude -p "…" --mcp-config mcp.json
///   mcptape run --tape bug-123 --replay -- claude -p "…" --mcp-config mcp.json
///   mcptape run --tape bug-123 --playback -- claude -p "…" --mcp-config mcp.json
///
/// The model proxy and the recorders are started here and the agent pointed at them: Claude
/// Code through ANTHROPIC_BASE_URL and a rewritten copy of its --mcp-config (or its project
/// .mcp.json, rewritten in place and put back at the end, also after a crash on the next run);
/// Codex through a temporary CODEX_HOME holding a rewritten copy of its config.toml (with the
/// command line's -c overrides folded in). Other agents: ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
/// and --mcp-config or .mcp.json. Every stdio MCP server is labelled on the tape by its config
/// name. --replay: the model live (not taped), every MCP server from the tape, none started.
/// --playback: the model from the tape too, no upstream connection at all.
///
/// mcptape exits with the agent's exit code (1 when playback missed a model call and the agent
/// exited 0).
#[derive(clap::Args)]
#[command(after_help = super::EXIT_RUN, verbatim_doc_comment)]
pub struct Args {
    /// Tape name or path (as for `record`). Default when recording: the agent's name and the
    /// time.
    #[arg(long, short = 't', value_name = "NAME|PATH", required_if_eq_any([("replay", "true"), ("playback", "true")]))]
    tape: Option<String>,
    /// MCP servers from the tape, the model live.
    #[arg(long, conflicts_with = "playback")]
    replay: bool,
    /// Everything from the tape: no MCP server started, no upstream connection.
    #[arg(long)]
    playback: bool,
    /// Playback: a model request that matches nothing gets the next unused call of its
    /// endpoint (reported).
    #[arg(long, requires = "playback")]
    lenient: bool,
    /// Record against this model API instead of the one the agent is configured with.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// CA certificates (PEM) to check an https:// upstream against.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<std::path::PathBuf>,
    /// Only put back the config files a run that did not finish left rewritten, then exit.
    #[arg(long, conflicts_with_all = ["replay", "playback"])]
    restore: bool,
    #[command(flatten)]
    redact: super::RedactArgs,
    #[command(flatten)]
    sign: super::SignArgs,
    /// The agent's command line (`--` before it is optional; everything after the agent's name
    /// is the agent's, flags too).
    #[arg(
        trailing_var_arg = true,
        value_name = "AGENT COMMAND",
        required_unless_present = "restore"
    )]
    command: Vec<String>,
}

pub fn run_cmd(a: Args) -> Result<i32> {
    let mode = if a.playback {
        Mode::Playback
    } else if a.replay {
        Mode::Replay
    } else {
        Mode::Record
    };
    let (tape, write) = match mode {
        Mode::Record => {
            let name = a
                .tape
                .clone()
                .unwrap_or_else(|| store::default_name(&a.command));
            let write = WriteOptions {
                redactor: Some(std::sync::Arc::new(a.redact.redactor()?)),
                signing_key: a.sign.signing_key()?,
            };
            (super::remote::resolve_for_write(&name)?, write)
        }
        _ => (
            super::remote::resolve(a.tape.as_deref().unwrap_or_default())?,
            WriteOptions::default(),
        ),
    };
    let mut cfg = RunConfig::new(tape, mode, a.command.clone(), write);
    // Read from the tape (replay: the MCP servers; playback: them and the model), requests
    // made with different secrets are told apart with the user's marker key.
    if mode != Mode::Record {
        cfg.marker_key = super::marker_key()?;
    }
    if a.restore {
        let restored = mcptape::run::config::restore_all(&cfg.journal)?;
        for f in &restored {
            crate::diag!("mcptape run: put back {}", f.display());
        }
        if restored.is_empty() {
            crate::diag!("mcptape run: nothing to put back");
        }
        return Ok(mcptape::exit::OK);
    }
    cfg.upstream = a.upstream;
    cfg.upstream_ca = a.upstream_ca;
    cfg.lenient = a.lenient;
    let signals = super::runtime::forwarded_signals()?;
    let out = super::runtime::multi()?.block_on(run(&cfg, signals))?;
    for f in &out.restored {
        crate::diag!("mcptape run: put back {}", f.display());
    }
    if let Some((state, given)) = &out.given_back {
        if given.state {
            crate::diag!(
                "mcptape run: Claude Code's changes to its state kept in {} (its MCP servers as they were)",
                state.display()
            );
        }
        for m in &given.moved {
            crate::diag!("mcptape run: Claude Code's new {} kept", m.display());
        }
        for w in &given.warnings {
            crate::diag!("mcptape run: WARNING: {w}");
        }
    }
    if !out.servers.http.is_empty() {
        crate::diag!(
            "mcptape run: WARNING: HTTP MCP servers left live, not on the tape (not recorded on it): {}",
            out.servers.http.join(", ")
        );
    }
    let names: Vec<&str> = out
        .servers
        .stdio
        .iter()
        .chain(&out.servers.http_through)
        .map(String::as_str)
        .collect();
    let servers = if names.is_empty() {
        "no MCP server".to_string()
    } else {
        format!("MCP servers {}", names.join(", "))
    };
    let mut code = out.agent_exit;
    // How the agent ended, when it could be learned (else the internal error was said).
    let exited = if out.agent_end_lost {
        format!("ended, how could not be learned (exit {code})")
    } else {
        format!("exited {code}")
    };
    match mode {
        Mode::Record => {
            let end = out.end.unwrap_or_default();
            crate::diag!(
                "mcptape run: {} {}; {}{} and {servers} on {} ({})",
                out.agent.name(),
                exited,
                super::plural(out.model_calls, "model call"),
                setup_beside(out.setup_calls),
                cfg.tape.display(),
                super::plural(end.messages, "message")
            );
            if out.model_calls == 0 && out.agent.model_pointed() {
                crate::diag!(
                    "mcptape run: WARNING: {} sent no model request through mcptape, so the tape holds none and --playback has none to serve. It made none, or asked its model at an address mcptape does not point (its own setting, a managed policy's among them, or a sign-in that ignores the base URL: Claude Code on Bedrock or Foundry asks those)",
                    out.agent.name()
                );
            }
        }
        Mode::Replay => crate::diag!(
            "mcptape run: {} {}; {servers} served from {}, the model live",
            out.agent.name(),
            exited,
            cfg.tape.display()
        ),
        Mode::Playback => {
            let r = out.model.unwrap_or_default();
            // Misses were said as they happened; what --lenient served instead is said now.
            for l in &r.lenient {
                crate::diag!("{l}");
            }
            crate::diag!(
                "mcptape run: {} {}; offline from {}: {} served{}, {} missed, {}{servers} from the tape",
                out.agent.name(),
                exited,
                cfg.tape.display(),
                super::plural(r.served, "model call"),
                setup_beside(r.setup_served),
                r.misses.len(),
                r.ambiguity().map(|a| format!("{a}, ")).unwrap_or_default()
            );
            if code == 0 && (!r.misses.is_empty() || !r.lenient.is_empty()) {
                code = mcptape::exit::DRIFT;
            }
        }
    }
    Ok(code)
}

/// Code Assist's setup calls (Gemini CLI signed in with Google), said apart from the model
/// calls they are taped beside; nothing when there were none.
pub(crate) fn setup_beside(n: u64) -> String {
    match n {
        0 => String::new(),
        1 => " (1 Code Assist setup call beside them)".into(),
        n => format!(" ({n} Code Assist setup calls beside them)"),
    }
}
