//! Pieces shared by the HTTP proxy (`record --url`) and the HTTP player (`play --listen`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

pub type RespBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// DNS-rebinding and cross-site protection for a listener on loopback: a foreign `Origin`, or a
/// `Host` that is not this loopback address and port, gets 403. Returns why, when refused.
pub fn refuse_foreign(headers: &HeaderMap, local_port: u16) -> Option<String> {
    let local_host = |h: &str| {
        let host = h.rsplit_once(':').map(|(h, _)| h).unwrap_or(h);
        matches!(host, "127.0.0.1" | "localhost" | "[::1]")
    };
    if let Some(origin) = headers
        .get(hyper::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    {
        let host = origin.split_once("://").map(|(_, h)| h).unwrap_or(origin);
        if !local_host(host) {
            return Some(format!("mcptape: Origin {origin} is not allowed"));
        }
    }
    if let Some(host) = headers
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
    {
        let port_ok = host
            .rsplit_once(':')
            .is_none_or(|(_, p)| p == local_port.to_string());
        if !local_host(host) || !port_ok {
            return Some(format!("mcptape: Host {host} is not allowed"));
        }
    }
    None
}

pub fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<RespBody> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    r
}

pub fn plain(status: StatusCode, text: &str) -> Response<RespBody> {
    full(status, "text/plain; charset=utf-8", text.to_string())
}

/// Reads a whole body, refusing more than `max` bytes.
pub async fn collect<B>(mut body: B, max: usize) -> Result<Bytes, String>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    // Most bodies arrive as one frame: that frame is kept as it is (no copy); only a body in
    // several frames is gathered into one buffer.
    let mut first: Option<Bytes> = None;
    let mut buf = bytes::BytesMut::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading a body: {e}"))?;
        if let Ok(d) = frame.into_data() {
            if len + d.len() > max {
                return Err(format!("a body over --max-message ({max} bytes)"));
            }
            len += d.len();
            if d.is_empty() {
                continue;
            }
            match first.take() {
                None if buf.is_empty() => first = Some(d),
                None => buf.extend_from_slice(&d),
                Some(f) => {
                    buf.reserve(f.len() + d.len());
                    buf.extend_from_slice(&f);
                    buf.extend_from_slice(&d);
                }
            }
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// A response body fed by a channel: each chunk goes out as soon as it is sent.
pub struct ChannelBody {
    pub rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The signals that stop an HTTP listener, created before its URL is given out: a signal that
/// arrives after that is never lost, and never takes its default action (death, tape unclosed).
pub struct StopSignals {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            sigint: signal(SignalKind::interrupt())?,
            sigterm: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for SIGINT or SIGTERM and names it. Cancel-safe: the streams keep pending signals.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.sigint.recv() => "SIGINT",
            _ = self.sigterm.recv() => "SIGTERM",
        }
    }
}

/// Serves HTTP/1 connections with `handle` until `stop` completes, then returns its output with
/// the connections still open (the caller decides how long they get).
pub async fn accept_until<H, Fut, S>(
    listener: &tokio::net::TcpListener,
    handle: H,
    stop: S,
) -> (S::Output, tokio::task::JoinSet<()>)
where
    H: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<RespBody>> + Send + 'static,
    S: std::future::Future,
{
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    let out = loop {
        tokio::select! {
            // Cancel-safe: accept() loses no connection when `stop` wins, and `stop` is pinned
            // outside the loop so its progress is kept between turns.
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // Each answer goes out in one write: Nagle would only hold it back.
                let _ = stream.set_nodelay(true);
                let handle = handle.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let fut = handle(req);
                        async move { Ok::<_, Infallible>(fut.await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
            out = &mut stop => break out,
        }
    };
    (out, connections)
}

/// A fresh random session id: 32 hex digits from the OS.
pub fn session_id() -> String {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A body that yields the given chunks, one frame each.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn collect_chunks(chunks: &[&'static [u8]], max: usize) -> Result<Bytes, String> {
        let body = Chunks(chunks.iter().map(|c| Bytes::from_static(c)).collect());
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(collect(body, max))
    }

    #[test]
    fn a_body_in_one_frame_is_that_frame() {
        let got = collect_chunks(&[b"{\"id\":1}"], 100).expect("collected");
        assert_eq!(&got[..], b"{\"id\":1}");
        assert_eq!(&collect_chunks(&[], 100).expect("empty")[..], b"");
    }

    #[test]
    fn a_body_in_several_frames_is_gathered_in_order() {
        let got = collect_chunks(&[b"{\"id\"", b"", b":1", b"}"], 100).expect("collected");
        assert_eq!(&got[..], b"{\"id\":1}");
    }

    #[test]
    fn a_body_over_the_limit_is_refused_whether_in_one_frame_or_several() {
        assert!(collect_chunks(&[b"0123456789"], 9).is_err());
        assert!(collect_chunks(&[b"01234", b"56789"], 9).is_err());
        assert!(collect_chunks(&[b"01234", b"5678"], 9).is_ok());
    }
}
