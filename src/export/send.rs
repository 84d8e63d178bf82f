//! An export sent to an OTLP/HTTP endpoint: one POST to `…/v1/traces`, protobuf or JSON, with
//! the headers the user gave (`OTEL_EXPORTER_OTLP_HEADERS` style), and what the collector said.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::time::Duration;

/// The two OTLP encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// OTLP/JSON.
    Json,
    /// OTLP protobuf.
    Protobuf,
}

impl Encoding {
    /// The `Content-Type` of a body in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Protobuf => "application/x-protobuf",
        }
    }
}

/// Why the export could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The endpoint is not an http(s) URL.
    #[error("invalid OTLP endpoint {url:?}: {why}")]
    Url {
        /// What was given.
        url: String,
        /// Why not.
        why: String,
    },
    /// A header is not `NAME=VALUE`.
    #[error("invalid OTLP header {0:?}: expected NAME=VALUE")]
    Header(String),
    /// Nothing answered, or the connection broke.
    #[error("the OTLP endpoint {url} could not be reached: {why}")]
    Unreachable {
        /// The URL posted to.
        url: String,
        /// Why.
        why: String,
    },
    /// The collector refused the export.
    #[error("the OTLP endpoint {url} refused the export: HTTP {status}: {body}")]
    Refused {
        /// The URL posted to.
        url: String,
        /// Its status.
        status: u16,
        /// The start of its answer.
        body: String,
    },
    /// The TLS client could not be built.
    #[error(transparent)]
    Client(#[from] crate::transport::upstream::UpstreamError),
}

impl crate::exit::Coded for SendError {
    fn exit_code(&self) -> i32 {
        match self {
            SendError::Url { .. } | SendError::Header(_) => crate::exit::USAGE,
            SendError::Unreachable { .. } | SendError::Refused { .. } => crate::exit::UNAVAILABLE,
            SendError::Client(e) => crate::exit::Coded::exit_code(e),
        }
    }
}

/// Where the traces go: the endpoint as given when its path names a signal already
/// (`…/v1/traces`), else with `/v1/traces` added, as OTLP/HTTP exporters do with
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(endpoint: &str) -> Result<hyper::Uri, SendError> {
    let bad = |why: &str| SendError::Url {
        url: endpoint.into(),
        why: why.into(),
    };
    let uri: hyper::Uri = endpoint.parse().map_err(|_| bad("not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("only http:// and https:// endpoints are supported"));
    }
    crate::transport::check_port(&uri).map_err(|why| bad(&why))?;
    if uri.path().ends_with("/v1/traces") {
        return Ok(uri);
    }
    let joined = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    joined.parse().map_err(|_| bad("not a URL"))
}

/// Parses `NAME=VALUE` headers, one per item or comma-separated (`OTEL_EXPORTER_OTLP_HEADERS`).
pub fn parse_headers(items: &[String]) -> Result<Vec<(String, String)>, SendError> {
    let mut out = Vec::new();
    for item in items.iter().flat_map(|i| i.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| SendError::Header(item.into()))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(SendError::Header(item.into()));
        }
        let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy();
        out.push((k.to_string(), v.into_owned()));
    }
    Ok(out)
}

/// POSTs `body` to `url`; the collector's answer body (partial-success notes) when it took it.
pub async fn post(
    url: &hyper::Uri,
    encoding: Encoding,
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, SendError> {
    let client = crate::transport::upstream::client(None)?;
    let unreachable = |why: String| SendError::Unreachable {
        url: url.to_string(),
        why,
    };
    let mut req = hyper::Request::post(url.clone()).header("content-type", encoding.content_type());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| SendError::Header(e.to_string()))?;
    let resp = tokio::time::timeout(timeout, client.request(req))
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", timeout.as_secs())))?
        .map_err(|e| unreachable(crate::transport::upstream::error_chain(&e)))?;
    let status = resp.status();
    let answer = tokio::time::timeout(timeout, resp.into_body().collect())
        .await
        .map_err(|_| unreachable("the answer did not end".into()))?
        .map_err(|e| unreachable(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(SendError::Refused {
            url: url.to_string(),
            status: status.as_u16(),
            body: String::from_utf8_lossy(&answer[..answer.len().min(300)]).into_owned(),
        });
    }
    Ok(answer.to_vec())
}
