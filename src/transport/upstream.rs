//! The client side of the HTTP proxies (`record --url`, the model proxy): pooled keep-alive
//! connections to an `http://` or `https://` upstream. TLS is rustls with the system's roots,
//! or a private CA given in a PEM file (`--upstream-ca`), which then is the only root trusted.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use std::path::Path;

/// The client every proxy forwards with.
pub type Upstream = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

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
        None => {
            let found = rustls_native_certs::load_native_certs();
            // Unreadable entries are skipped (a distribution's bundle may hold one); none at
            // all is an error only when an https upstream is used, so plain http still works.
            for cert in found.certs {
                let _ = roots.add(cert);
            }
        }
    }
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
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
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
