use anyhow::{Context, Result};
use mcptape::export::send::{self, Encoding};
use mcptape::export::{otlp, spans};
use std::path::PathBuf;

/// Export a tape as OpenTelemetry traces (OTLP): one span per exchange, with the recorded times.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_EXPORT)]
pub struct Args {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// As OpenTelemetry traces (OTLP): the format to export to.
    #[arg(long, required = true)]
    otlp: bool,
    /// Write to FILE (`-`: stdout, the default).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        conflicts_with = "endpoint"
    )]
    output: Option<PathBuf>,
    /// Send to an OTLP/HTTP collector (`http://127.0.0.1:4318`; `/v1/traces` is added).
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// json or protobuf (default: json to a file, protobuf to an endpoint).
    #[arg(long, value_name = "ENC", value_parser = ["json", "protobuf"])]
    encoding: Option<String>,
    /// A header for the endpoint, NAME=VALUE (repeatable; also read from OTEL_EXPORTER_OTLP_HEADERS).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// How long the endpoint may take to answer.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = super::parse_positive_secs)]
    timeout: std::time::Duration,
}

pub fn run(a: Args) -> Result<i32> {
    let _ = a.otlp;
    let path = super::remote::resolve(&a.tape)?;
    let resources = spans::of_tape(&path)?;
    let encoding = match a.encoding.as_deref() {
        Some("protobuf") => Encoding::Protobuf,
        Some(_) => Encoding::Json,
        None if a.endpoint.is_some() => Encoding::Protobuf,
        None => Encoding::Json,
    };
    let body = match encoding {
        Encoding::Json => {
            let mut b = serde_json::to_vec(&otlp::to_json(&resources))?;
            b.push(b'\n');
            b
        }
        Encoding::Protobuf => otlp::to_protobuf(&resources),
    };
    let n: usize = resources.iter().map(|r| r.spans.len()).sum();
    let traces: std::collections::BTreeSet<[u8; 16]> = resources
        .iter()
        .flat_map(|r| r.spans.iter().map(|s| s.trace_id))
        .collect();
    let what = format!(
        "{n} span{} in {} trace{} ({}, {} bytes)",
        if n == 1 { "" } else { "s" },
        traces.len(),
        if traces.len() == 1 { "" } else { "s" },
        match encoding {
            Encoding::Json => "OTLP/JSON",
            Encoding::Protobuf => "OTLP protobuf",
        },
        body.len()
    );
    if let Some(endpoint) = &a.endpoint {
        let url = send::traces_url(endpoint)?;
        let mut headers = a.headers.clone();
        if let Ok(env) = std::env::var("OTEL_EXPORTER_OTLP_HEADERS") {
            headers.insert(0, env);
        }
        let headers = send::parse_headers(&headers)?;
        let rt = super::runtime::single()?;
        let answer = rt.block_on(send::post(&url, encoding, &headers, body, a.timeout))?;
        crate::diag!("mcptape export: sent {what} to {url}");
        // A collector that took only part of it says so in its answer (partialSuccess).
        if encoding == Encoding::Json {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&answer) {
                if let Some(p) = v
                    .get("partialSuccess")
                    .filter(|p| !p.as_object().is_some_and(|o| o.is_empty()))
                {
                    crate::diag!("mcptape export: the collector took part of it: {p}");
                }
            }
        }
        return Ok(mcptape::exit::OK);
    }
    match a.output.as_deref() {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, &body).with_context(|| format!("writing {}", p.display()))?;
            crate::diag!("mcptape export: wrote {what} to {}", p.display());
        }
        _ => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            match out.write_all(&body).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.context("writing to stdout")?,
            }
        }
    }
    Ok(mcptape::exit::OK)
}
