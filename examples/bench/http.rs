//! The Streamable HTTP side of the benchmark's own processes:
//!
//! - `bench --serve-http ADDR`: the bench server over Streamable HTTP. `POST /mcp` with one
//!   JSON-RPC message is answered `application/json` with the same bytes `--serve` writes (less
//!   the newline); a notification gets 202; `initialize` hands out an `Mcp-Session-Id` (the
//!   server is stateless and accepts any). It never streams (GET gets 405).
//! - `bench --relay-http UPSTREAM_URL`: a bare TCP byte relay in front of it, the floor for any
//!   HTTP proxy: one upstream connection per client connection, bytes copied both ways.
//! - `bench --hyper-proxy UPSTREAM_URL`: the floor for an HTTP proxy built as mcptape's are, on
//!   hyper: each request parsed by a hyper server, sent upstream on a hyper client connection
//!   (one per client connection, kept alive), its answer streamed back frame by frame. No tape,
//!   no redaction, no headers changed: what hyper on both sides costs before anything is taped.
//!
//! Both listen on loopback only, print their `http://…/mcp` URL as the first stdout line, run on
//! one thread (the bench pins them to one CPU) and exit when their stdin closes.

use crate::serve;
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;

/// The session id `initialize` hands out.
pub const SESSION: &str = "bench-session-1";

pub fn serve(addr: &str) -> Result<i32> {
    let addr = loopback(addr)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        ready(listener.local_addr()?)?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(stream),
                        hyper::service::service_fn(handle),
                    )
                    .await;
            });
        }
    })
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() != "/mcp" {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    if req.method() != Method::POST {
        let mut r = status(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut().insert(
            hyper::header::ALLOW,
            "POST".parse().expect("a header value"),
        );
        return Ok(r);
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let mut out = Vec::with_capacity(body.len() + 64);
    let initialize = serve::answer(serve::trim(&body), &mut out);
    if out.is_empty() {
        return Ok(status(StatusCode::ACCEPTED));
    }
    out.pop(); // the newline: one message per body
    let mut r = Response::new(Full::new(Bytes::from(out)));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().expect("a header value"),
    );
    if initialize {
        h.insert("mcp-session-id", SESSION.parse().expect("a header value"));
    }
    Ok(r)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = code;
    r
}

pub fn relay(upstream: &str) -> Result<i32> {
    let up = authority(upstream)?;
    let up: SocketAddr = loopback(&up)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        ready(listener.local_addr()?)?;
        loop {
            let (mut client, _) = listener.accept().await?;
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(up).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    })
}

pub fn hyper_proxy(upstream: &str) -> Result<i32> {
    let up = authority(upstream)?;
    let up: SocketAddr = loopback(&up)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        ready(listener.local_addr()?)?;
        loop {
            let (client, _) = listener.accept().await?;
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(up).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let Ok((sender, conn)) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(server))
                        .await
                else {
                    return;
                };
                tokio::spawn(conn);
                // One request at a time on a client connection (HTTP/1.1), so one at a time
                // upstream: the lock is never contended.
                let sender = std::sync::Arc::new(tokio::sync::Mutex::new(sender));
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let sender = sender.clone();
                    async move { sender.lock().await.send_request(req).await }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(client), service)
                    .await;
            });
        }
    })
}

/// `host:port` of an `http://host:port/…` URL.
pub fn authority(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?} is not an http:// URL"))?;
    Ok(rest.split('/').next().unwrap_or(rest).to_string())
}

/// Parses `addr`, refusing anything but a loopback address: the benchmark's traffic stays on
/// this machine.
pub fn loopback(addr: &str) -> Result<SocketAddr> {
    let a: SocketAddr = addr
        .parse()
        .with_context(|| format!("{addr:?} is not an IP:PORT address"))?;
    if !a.ip().is_loopback() {
        bail!("{a} is not a loopback address; the benchmark listens and connects on loopback only");
    }
    Ok(a)
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    // Closing stdin stops the process: the bench holds it, and a bench that dies takes its
    // servers with it.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The URL on stdout means "listening".
fn ready(local: SocketAddr) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{local}/mcp")?;
    out.flush()?;
    Ok(())
}
