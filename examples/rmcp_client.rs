//! A small MCP client built on the official Rust SDK (`rmcp` 3.x), used to
//! exercise mcptape against a real, independent client implementation.
//!
//! Usage:
//!
//! ```text
//! rmcp_client [--mode legacy|discover|auto] [--protocol-version V] [--timeout SECS]
//!             [--call TOOL JSON_ARGS]... [--list-resources] -- <server command> [args...]
//! ```
//!
//! It spawns the server as a child over stdio, initializes, lists tools,
//! performs each `--call` in order, optionally lists resources, shuts down
//! cleanly and prints ONE JSON document on stdout:
//!
//! ```text
//! {"server_name": ..., "protocol_version": ..., "tools": [sorted names],
//!  "calls": [{"tool": ..., "result": <CallToolResult> | "error": "..."}],
//!  "resources": [...]}            // only with --list-resources
//! ```
//!
//! The output contains no timestamps, so it is deterministic for a given
//! server. Diagnostics go to stderr; failures exit non-zero (2 for usage
//! errors, 1 for runtime errors).
//!
//! `--mode`:
//! * `legacy` (default): the `initialize` / `notifications/initialized`
//!   handshake (`ClientLifecycleMode::Initialize`).
//! * `discover`: the 2026-07-28 era `server/discover` lifecycle, no fallback.
//! * `auto`: try `server/discover`, fall back to `initialize`.
//!
//! `--protocol-version` overrides the version rmcp advertises (by default
//! rmcp's own default, `ProtocolVersion::default()`, is used unchanged).

use std::process::ExitCode;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject, ProtocolVersion};
use rmcp::service::ServiceError;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{json, Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Legacy,
    Discover,
    Auto,
}

#[derive(Debug)]
struct Args {
    mode: Mode,
    protocol_version: Option<String>,
    timeout: Duration,
    calls: Vec<(String, JsonObject)>,
    list_resources: bool,
    command: Vec<String>,
}

const USAGE: &str = "usage: rmcp_client [--mode legacy|discover|auto] [--protocol-version V] \
[--timeout SECS] [--call TOOL JSON_ARGS]... [--list-resources] -- <server command> [args...]";

fn parse_args(argv: Vec<String>) -> Result<Args, String> {
    let mut args = Args {
        mode: Mode::Legacy,
        protocol_version: None,
        timeout: Duration::from_secs(60),
        calls: Vec::new(),
        list_resources: false,
        command: Vec::new(),
    };
    let mut it = argv.into_iter();
    let mut saw_separator = false;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--" => {
                saw_separator = true;
                break;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--list-resources" => args.list_resources = true,
            "--mode" => {
                let v = it.next().ok_or("--mode needs a value")?;
                args.mode = match v.as_str() {
                    "legacy" | "initialize" => Mode::Legacy,
                    "discover" => Mode::Discover,
                    "auto" => Mode::Auto,
                    other => {
                        return Err(format!("unknown --mode {other:?} (legacy|discover|auto)"))
                    }
                };
            }
            "--protocol-version" => {
                args.protocol_version = Some(it.next().ok_or("--protocol-version needs a value")?);
            }
            "--timeout" => {
                let v = it.next().ok_or("--timeout needs a value")?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("--timeout: invalid number of seconds {v:?}"))?;
                args.timeout = Duration::from_secs_f64(secs);
            }
            "--call" => {
                let tool = it.next().ok_or("--call needs TOOL and JSON_ARGS")?;
                let raw = it.next().ok_or("--call needs TOOL and JSON_ARGS")?;
                let value: Value = serde_json::from_str(&raw)
                    .map_err(|e| format!("--call {tool}: JSON_ARGS is not valid JSON: {e}"))?;
                let Value::Object(obj) = value else {
                    return Err(format!("--call {tool}: JSON_ARGS must be a JSON object"));
                };
                args.calls.push((tool, obj));
            }
            other => return Err(format!("unexpected argument {other:?}\n{USAGE}")),
        }
    }
    if !saw_separator {
        return Err(format!("missing `--` before the server command\n{USAGE}"));
    }
    args.command = it.collect();
    if args.command.is_empty() {
        return Err(format!("missing server command after `--`\n{USAGE}"));
    }
    Ok(args)
}

async fn with_timeout<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("{what}: timed out after {limit:?}"))
}

async fn run(args: Args) -> Result<Value, String> {
    // A single http:// URL instead of a command: Streamable HTTP.
    if args.command.len() == 1 && args.command[0].starts_with("http://") {
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(args.command[0].clone());
        return run_with(transport, &args).await;
    }
    let mut cmd = tokio::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    // Server stderr is inherited: it ends up with our diagnostics.
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| format!("failed to spawn server {:?}: {e}", args.command[0]))?;
    run_with(transport, &args).await
}

async fn run_with<T, E, A>(transport: T, args: &Args) -> Result<Value, String>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut config = ClientConfig::default();
    if let Some(v) = &args.protocol_version {
        config.protocol_version = serde_json::from_value::<ProtocolVersion>(json!(v))
            .map_err(|e| format!("invalid --protocol-version {v:?}: {e}"))?;
    }
    let preferred = vec![config.protocol_version.clone()];
    let lifecycle = match args.mode {
        Mode::Legacy => ClientLifecycleMode::Initialize,
        Mode::Discover => ClientLifecycleMode::Discover {
            preferred_versions: preferred,
        },
        Mode::Auto => ClientLifecycleMode::Auto {
            preferred_versions: preferred,
            legacy_version: None,
        },
    };
    eprintln!(
        "rmcp_client: starting {:?} (mode {:?}, advertised protocol {})",
        args.command, args.mode, config.protocol_version
    );

    let client = with_timeout(
        "initialize",
        args.timeout,
        config.serve_with_lifecycle(transport, lifecycle),
    )
    .await?
    .map_err(|e| format!("initialize failed: {e}"))?;

    let result = session(&client, args).await;

    // Clean shutdown: cancels the service loop, which closes the transport
    // (closes the child's stdin, waits for it to exit, then SIGTERM/kill).
    match with_timeout("shutdown", args.timeout, client.cancel()).await {
        Ok(Ok(reason)) => eprintln!("rmcp_client: shut down ({reason:?})"),
        Ok(Err(e)) => eprintln!("rmcp_client: warning: shutdown task failed: {e}"),
        Err(e) => eprintln!("rmcp_client: warning: {e}"),
    }
    result
}

async fn session<S>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, S>,
    args: &Args,
) -> Result<Value, String>
where
    S: rmcp::Service<rmcp::RoleClient>,
{
    let info = client
        .peer_info()
        .ok_or("no server info after initialization")?;
    let server_name = info
        .server_info
        .as_ref()
        .map(|i| Value::String(i.name.clone()))
        .unwrap_or(Value::Null);
    eprintln!(
        "rmcp_client: connected to {server_name} (protocol {})",
        info.protocol_version
    );

    let tools = with_timeout("tools/list", args.timeout, client.list_all_tools())
        .await?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let mut tool_names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    tool_names.sort();
    eprintln!("rmcp_client: {} tools", tool_names.len());

    let mut calls = Vec::new();
    for (tool, arguments) in &args.calls {
        let params = CallToolRequestParams::new(tool.clone()).with_arguments(arguments.clone());
        let what = format!("tools/call {tool}");
        let mut entry = Map::new();
        entry.insert("tool".into(), Value::String(tool.clone()));
        match with_timeout(&what, args.timeout, client.call_tool(params)).await? {
            Ok(result) => {
                let v = serde_json::to_value(&result)
                    .map_err(|e| format!("{what}: cannot serialize result: {e}"))?;
                entry.insert("result".into(), v);
            }
            Err(ServiceError::TransportClosed) => {
                return Err(format!("{what}: connection to server closed"));
            }
            Err(e) => {
                eprintln!("rmcp_client: {what} failed: {e}");
                entry.insert("error".into(), Value::String(e.to_string()));
            }
        }
        calls.push(Value::Object(entry));
    }

    let mut out = Map::new();
    out.insert("server_name".into(), server_name);
    out.insert(
        "protocol_version".into(),
        Value::String(info.protocol_version.to_string()),
    );
    out.insert("tools".into(), json!(tool_names));
    out.insert("calls".into(), Value::Array(calls));

    if args.list_resources {
        let resources = with_timeout("resources/list", args.timeout, client.list_all_resources())
            .await?
            .map_err(|e| format!("resources/list failed: {e}"))?;
        eprintln!("rmcp_client: {} resources", resources.len());
        let v = serde_json::to_value(&resources)
            .map_err(|e| format!("cannot serialize resources: {e}"))?;
        out.insert("resources".into(), v);
    }
    Ok(Value::Object(out))
}

fn main() -> ExitCode {
    // rmcp's HTTP client is reqwest, which this package builds with TLS but no crypto
    // provider of its own (mcptape's is ring): the process default is set before any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("rmcp_client: {msg}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rmcp_client: cannot start tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(run(args));
    // Give the child-process cleanup tasks a moment, then drop the runtime.
    rt.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(doc) => match serde_json::to_string_pretty(&doc) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rmcp_client: cannot serialize output: {e}");
                ExitCode::FAILURE
            }
        },
        Err(msg) => {
            eprintln!("rmcp_client: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
