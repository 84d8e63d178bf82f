//! An rmcp server and an rmcp client in one process, taped and played with no process at all:
//! the client talks to the server over a `tokio::io::duplex`, its end wrapped in
//! [`mcptape::record::tap::Tap`], which writes the tape; then [`mcptape::play::Player`] serves
//! that tape to a fresh rmcp client (on a pipe pair of its own, no server), which must see the
//! same tools and the same call results.
//!
//! ```text
//! cargo run --example embed_rmcp_server -- TAPE
//! ```
//!
//! Prints one JSON document: what the client saw from the server and from the tape, and what
//! play reported. Exits 1 when the two differ.

use mcptape::play::Player;
use mcptape::record::{tap::Tap, Recorder};
use mcptape::tape::{ServerDecl, TapeWriter, WriteOptions, DEFAULT_SERVER};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::{schemars, tool, tool_router, ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{json, Value};
use std::path::PathBuf;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Client = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The left operand.
    a: i64,
    /// The right operand.
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ShoutArgs {
    /// What to shout.
    text: String,
}

/// The server under test: two tools, from rmcp's macros.
struct Calculator;

#[tool_router(server_handler)]
impl Calculator {
    #[tool(description = "The sum of two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "The text in capitals")]
    fn shout(&self, Parameters(ShoutArgs { text }): Parameters<ShoutArgs>) -> String {
        text.to_uppercase()
    }
}

/// The client's session: the tool list (names, descriptions, schemas) and two calls.
async fn session(client: &Client) -> Result<Value, Error> {
    let mut tools = client.list_all_tools().await?;
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let call = |name: &'static str, args: Value| async move {
        let Value::Object(args) = args else {
            unreachable!("arguments are an object")
        };
        let result = client
            .call_tool(CallToolRequestParams::new(name).with_arguments(args))
            .await?;
        Ok::<Value, Error>(serde_json::to_value(&result)?)
    };
    Ok(json!({
        "tools": serde_json::to_value(&tools)?,
        "add": call("add", json!({"a": 2, "b": 40})).await?,
        "shout": call("shout", json!({"text": "hello tape"})).await?,
    }))
}

async fn connect<T, E, A>(transport: T) -> Result<Client, Error>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    Ok(ClientConfig::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await?)
}

async fn run(tape: PathBuf) -> Result<Value, Error> {
    // Record: server and client on the two ends of an in-memory stream, the client's end taped.
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        Calculator.serve(server_end).await?.waiting().await?;
        Ok::<(), Error>(())
    });
    let rec = Recorder::new(
        TapeWriter::create(&tape, WriteOptions::redacted())?,
        DEFAULT_SERVER,
    );
    // In-process: no command started the server.
    let mut decl = ServerDecl::stdio(DEFAULT_SERVER, Vec::new());
    decl.command = None;
    rec.declare(decl);
    let client = connect(Tap::new(client_end, rec.clone())).await?;
    let live = session(&client).await?;
    // Closing the client closes the stream: the server's service ends.
    client.cancel().await?;
    server.await??;
    rec.close(None, "the in-process session ended".into())?;

    // Play: the tape as the server, to a fresh client.
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [tape] = args.as_slice() else {
        eprintln!("usage: embed_rmcp_server TAPE");
        return std::process::ExitCode::from(2);
    };
    match run(PathBuf::from(tape)).await {
        Ok(v) => {
            println!("{v}");
            if v["live"] == v["played"] {
                std::process::ExitCode::SUCCESS
            } else {
                eprintln!("embed_rmcp_server: the tape's answers differ from the server's");
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("embed_rmcp_server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
