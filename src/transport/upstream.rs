//! What opens connections to an `http://` or `https://` upstream: the [`Connector`] of the HTTP
//! proxies' own client (`h1_client.rs`: `record --url` and the model proxy), and hyper-util's
//! pooled [`Upstream`] client for the live player and `export --send`. TLS is rustls with the
//! system's roots, or a private CA given in a PEM file (`--upstream-ca`), which then is the only
//! root trusted.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName};
use hyper::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use std::path::Path;

/// The client the live player and `export --send` forward with (`record --url` and the model
/// proxy use the leaner `h1_client`).
pub type Upstream = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What opens connections to an upstream: TCP, then TLS for `https://`.
pub type Connector = HttpsConnector<HttpConnector>;

/// Why the upstream client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// `--upstream-ca` could not be read or holds no certificate.
    #[error("could not use the CA file {}: {why}", path.display())]
    Ca {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// The system's root certificates could not be loaded.
    #[error("no root certificates: {0}")]
    Roots(String),
}

impl crate::exit::Coded for UpstreamError {
    fn exit_code(&self) -> i32 {
        match self {
            UpstreamError::Ca { .. } => crate::exit::NO_INPUT,
            UpstreamError::Roots(_) => crate::exit::UNAVAILABLE,
        }
    }
}

/// A client for `http://` and `https://` upstreams; `ca` replaces the system roots.
pub fn client(ca: Option<&Path>) -> Result<Upstream, UpstreamError> {
    Ok(Client::builder(TokioExecutor::new()).build(connector(ca)?))
}

/// The connector of [`client`]: it trusts the system roots (or `ca`).
pub fn connector(ca: Option<&Path>) -> Result<Connector, UpstreamError> {
    build(ca, Roots::System)
}

/// The connector of an `h1_client` pool to `upstream`: its connections all go there, so the system
/// roots are loaded only for an `https://` one. Loading them reads and decodes every file of
/// the system's certificate folder (measured: the largest part of `mcptape run`'s own start-up,
/// a few milliseconds of the agent's wall time), which a plain-`http://` upstream — a local
/// model server, a fake provider, a local MCP server — never uses. `ca` is read either way:
/// a CA file that cannot be used is an error before anything starts.
pub fn connector_to(upstream: &Uri, ca: Option<&Path>) -> Result<Connector, UpstreamError> {
    build(ca, roots_needed(upstream))
}

fn roots_needed(upstream: &Uri) -> Roots {
    if upstream.scheme() == Some(&hyper::http::uri::Scheme::HTTPS) {
        Roots::System
    } else {
        Roots::NoneNeeded
    }
}

/// Where a connector's trusted roots come from when no CA file is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Roots {
    System,
    /// The upstream is plain `http://`: TLS is never negotiated.
    NoneNeeded,
}

/// The roots a connector trusts: those of `ca`, else the system's (unless `NoneNeeded`).
fn roots(ca: Option<&Path>, system: Roots) -> Result<rustls::RootCertStore, UpstreamError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let ca_err = |why: String| UpstreamError::Ca {
                path: path.to_path_buf(),
                why,
            };
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| ca_err(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ca_err(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate in it".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| ca_err(e.to_string()))?;
            }
        }
        None if system == Roots::NoneNeeded => {}
        None => {
            let found = rustls_native_certs::load_native_certs();
            // Unreadable entries are skipped (a distribution's bundle may hold one); none at
            // all is an error only when an https upstream is used, so plain http still works.
            for cert in found.certs {
                let _ = roots.add(cert);
            }
        }
    }
    Ok(roots)
}

fn build(ca: Option<&Path>, system: Roots) -> Result<Connector, UpstreamError> {
    let roots = roots(ca, system)?;
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| UpstreamError::Roots(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// `scheme://authority/` of `uri`: where a connector opens connections for it.
pub(crate) fn origin_of(uri: &Uri) -> Uri {
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = uri.scheme().cloned();
    parts.authority = uri.authority().cloned();
    parts.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// Hop-by-hop headers: meaningful for one connection only, never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Takes the hop-by-hop headers out of `headers`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The few names present are found by one pass over the map and removed by name (no
    // parsing of the eleven hop-by-hop names on every request).
    let present: Vec<HeaderName> = headers
        .keys()
        .filter(|k| HOP_BY_HOP.contains(&k.as_str()))
        .cloned()
        .collect();
    for name in &present {
        headers.remove(name);
    }
}

/// Asks an upstream for its answers uncompressed (`Accept-Encoding: identity`, whatever the
/// client accepts): the proxies read, redact and tape them as they pass. With no
/// `Accept-Encoding` at all, any coding would be acceptable.
pub fn ask_uncompressed(headers: &mut HeaderMap) {
    headers.insert(
        hyper::header::ACCEPT_ENCODING,
        hyper::header::HeaderValue::from_static("identity"),
    );
}

/// An error and its causes on one line (`client error (Connect): tcp connect error: …`): what
/// went wrong with an upstream is in the causes hyper nests.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hop-by-hop header goes, every other one stays (values of repeated ones too).
    #[test]
    fn hop_by_hop_headers_are_taken_out_and_only_they() {
        let kept = [
            "mcp-session-id",
            "authorization",
            "accept",
            "content-type",
            "tee",
            "hosts",
        ];
        let mut h = HeaderMap::new();
        for name in HOP_BY_HOP.iter().chain(&kept) {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            h.append(name.clone(), "a".parse().unwrap());
            h.append(name, "b".parse().unwrap());
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        let mut want = kept.to_vec();
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(h.len(), 2 * kept.len());
    }

    #[test]
    fn only_an_https_upstream_needs_the_system_roots() {
        let https: Uri = "https://api.anthropic.com/v1".parse().unwrap();
        let http: Uri = "http://127.0.0.1:8080/mcp".parse().unwrap();
        let upper: Uri = "HTTPS://example.com/".parse().unwrap();
        assert_eq!(roots_needed(&https), Roots::System);
        assert_eq!(roots_needed(&upper), Roots::System);
        assert_eq!(roots_needed(&http), Roots::NoneNeeded);
        // Not needed: nothing is read.
        assert!(roots(None, Roots::NoneNeeded).unwrap().is_empty());
    }

    #[test]
    fn a_ca_file_is_read_and_checked_for_a_plain_http_upstream_too() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let http: Uri = "http://127.0.0.1:8080/mcp".parse().unwrap();
        let Err(UpstreamError::Ca { path, why }) = connector_to(&http, Some(&empty)) else {
            panic!("a CA file without a certificate was accepted");
        };
        assert_eq!(path, empty);
        assert!(why.contains("no PEM certificate"), "{why}");
        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            connector_to(&http, Some(&missing)),
            Err(UpstreamError::Ca { .. })
        ));
    }
}
