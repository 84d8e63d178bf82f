//! The client side of the HTTP proxies: pooled keep-alive connections to an `http://` or
//! `https://` upstream (`record --url`'s [`Pool`]; the model proxy's own client, in
//! `h1_client.rs`, opens its connections with the same [`Connector`]). TLS is rustls with the system's roots,
//! or a private CA given in a PEM file (`--upstream-ca`), which then is the only root trusted.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::header::{HeaderMap, HeaderName};
use hyper::{Request, Response, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use std::path::Path;
use std::sync::Mutex;

/// The client the live player and `export --send` forward with (`record --url` uses the
/// leaner [`Pool`], the model proxy `h1_client`).
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

/// The connector of a [`Pool`] to `upstream`: its connections all go there, so the system
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

/// One HTTP/1.1 connection to the upstream, given back to its [`Pool`] once its answer's body
/// has been read.
pub type Conn = http1::SendRequest<Full<Bytes>>;

/// Why a request could not be sent upstream: connecting, TLS, or the connection itself.
pub type SendError = Box<dyn std::error::Error + Send + Sync>;

/// Idle connections kept for reuse; more are closed when given back (a burst of concurrent
/// requests does not leave that many sockets open for ever).
const MAX_IDLE: usize = 256;

/// Keep-alive connections to one upstream, for a proxy that forwards each request and reads
/// its whole answer (or hands the connection back when a stream ends). Leaner than
/// hyper-util's pooled client on the hot path: no pool key per request, no URI rewriting, no
/// task spawned per request to wait for the connection to become idle again.
pub struct Pool {
    connector: Connector,
    /// `scheme://authority` of the upstream: where connections go.
    origin: Uri,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    /// A pool of connections to `origin`'s scheme and authority.
    pub fn new(connector: Connector, origin: &Uri) -> Pool {
        Pool {
            connector,
            origin: origin_of(origin),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends `req` (its URI in origin form: path and query) on an idle connection, or a new
    /// one. The connection comes back with the answer: give it to [`Pool::put`] once the body
    /// has been read to its end. A request the upstream had closed an idle connection under
    /// (nothing of it sent) is sent again on another, as hyper-util's client does.
    pub async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Conn), SendError> {
        loop {
            let (mut conn, reused) = match self.take().await {
                Some(c) => (c, true),
                None => (self.connect().await?, false),
            };
            match conn.try_send_request(req).await {
                Ok(resp) => return Ok((resp, conn)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// Gives a connection back (its last answer read to the end), unless it is closed or
    /// enough are idle.
    pub fn put(&self, conn: Conn) {
        if conn.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// The most recently used idle connection that is still open, once ready for a request.
    async fn take(&self) -> Option<Conn> {
        loop {
            let mut conn = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
            // Ready at once unless its connection task has not yet seen the last body end;
            // an error means the upstream closed it while idle.
            if conn.ready().await.is_ok() {
                return Some(conn);
            }
        }
    }

    async fn connect(&self) -> Result<Conn, SendError> {
        use tower_service::Service as _;
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
        let io = connector.call(self.origin.clone()).await?;
        let (send, conn) = http1::handshake(io).await?;
        // The connection's own task reads and writes it; it ends when the socket closes or
        // the last handle on it is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }
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
    use super::super::test_upstream::run;
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A loopback HTTP/1.1 server answering `ok` to each request; with `close_after_one`, it
    /// closes every connection after its first answer (without saying so in the answer, as a
    /// server whose keep-alive timeout just ran out). Counts the connections it accepted.
    async fn server(close_after_one: bool) -> (Uri, Arc<AtomicUsize>) {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let per_conn = if close_after_one { 1 } else { usize::MAX };
        let (url, accepted, _) =
            super::super::test_upstream::server(vec![ok], per_conn, false).await;
        (url, accepted)
    }

    async fn get(pool: &Pool, host: &Uri) -> String {
        let req = Request::builder()
            .uri("/mcp")
            .header("host", host.authority().unwrap().as_str())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (resp, conn) = pool.send(req).await.expect("an answer");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        pool.put(conn);
        String::from_utf8_lossy(&body).into_owned()
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

    #[test]
    fn a_plain_http_upstream_is_reached_without_the_system_roots() {
        run(async {
            let (url, _) = server(false).await;
            let pool = Pool::new(connector_to(&url, None).unwrap(), &url);
            assert_eq!(get(&pool, &url).await, "ok");
        });
    }

    #[test]
    fn sequential_requests_share_one_connection() {
        run(async {
            let (url, accepted) = server(false).await;
            let pool = Pool::new(connector(None).unwrap(), &url);
            for _ in 0..5 {
                assert_eq!(get(&pool, &url).await, "ok");
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 1);
        });
    }

    #[test]
    fn a_connection_the_upstream_closed_while_idle_is_replaced() {
        run(async {
            let (url, accepted) = server(true).await;
            let pool = Pool::new(connector(None).unwrap(), &url);
            for _ in 0..3 {
                assert_eq!(get(&pool, &url).await, "ok");
                // The upstream's close reaches the idle connection (or not yet: then the
                // request is sent again on a new one); either way the next request is answered.
                tokio::task::yield_now().await;
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
        });
    }

    #[test]
    fn an_upstream_that_refuses_is_an_error() {
        run(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url: Uri = format!("http://{}/mcp", listener.local_addr().unwrap())
                .parse()
                .unwrap();
            drop(listener);
            let pool = Pool::new(connector(None).unwrap(), &url);
            let req = Request::builder()
                .uri("/mcp")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let Err(err) = pool.send(req).await else {
                panic!("an answer from a port nothing listens on");
            };
            assert!(!error_chain(&*err).is_empty());
        });
    }
}
