//! mcptape embedded in a Rust test of an rmcp client: the session is recorded in-process (the
//! client's transport wrapped in [`mcptape::record::tap::Tap`]; the server is a child process
//! here, any byte stream works), then played in-process ([`mcptape::play::Player`]: no server
//! process at all), and the client gets the same answers both times.
//!
//! ```text
//! cargo run --example embed -- TAPE <server command…>
//! ```
//!
//! Prints one JSON document: the tools and the `echo` answer live, and again from the tape,
//! and what the play reported.

use mcptape::play::Player;
use mcptape::record::{tap::Tap, Recorder};
use mcptape::tape::{ServerDecl, TapeWriter, WriteOptions, DEFAULT_SERVER};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;

type Client = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// The client's session: the tools' names and one `echo` call.
async fn session(client: &Client) -> Result<Value, Box<dyn std::error::Error>> {
    let mut tools: Vec<String> = client
        .list_all_tools()
        .await?
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    tools.sort();
    let mut args = serde_json::Map::new();
    args.insert("message".into(), json!("hello from rmcp"));
    let echo = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
        .await?;
    Ok(json!({"tools": tools, "echo": serde_json::to_value(&echo)?}))
}

async fn connect<T, E, A>(transport: T) -> Result<Client, Box<dyn std::error::Error>>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    Ok(ClientConfig::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await?)
}

async fn run(tape: PathBuf, server: Vec<String>) -> Result<Value, Box<dyn std::error::Error>> {
    // Record: the server as a child, the client's end of its stdio taped in-process.
    let mut child = tokio::process::Command::new(&server[0])
        .args(&server[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdio = tokio::io::join(
        child.stdout.take().expect("piped"),
        child.stdin.take().expect("piped"),
    );
    let rec = Recorder::new(
        TapeWriter::create(&tape, WriteOptions::redacted())?,
        DEFAULT_SERVER,
    );
    rec.declare(ServerDecl::stdio(DEFAULT_SERVER, server.clone()));
    let client = connect(Tap::new(stdio, rec.clone())).await?;
    let live = session(&client).await?;
    client.cancel().await?;
    let _ = child.kill().await;
    rec.close(None, "the embedded recording ended".into())?;

    // Play: the tape as the server, in-process.
    let playing = Player::open(&tape)?.start()?;
    let client = connect((playing.from_server, playing.to_server)).await?;
    let played = session(&client).await?;
    client.cancel().await?;
    let report = playing.done.await?;
    Ok(json!({
        "live": live,
        "played": played,
        "served": report.served,
        "missed": report.missed,
    }))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(tape), server) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: embed TAPE <server command…>");
        return std::process::ExitCode::from(2);
    };
    if server.is_empty() {
        eprintln!("usage: embed TAPE <server command…>");
        return std::process::ExitCode::from(2);
    }
    match run(PathBuf::from(tape), server).await {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("embed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
