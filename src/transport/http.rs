//! Pieces shared by the HTTP proxy (`record --url`) and the HTTP player (`play --listen`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The body type of every response the listeners give. Its error ends the response without
/// its terminating chunk: the client sees the stream cut, as the model proxy replays one that
/// was cut when recorded.
pub(crate) type RespBody = http_body_util::combinators::BoxBody<Bytes, BodyError>;

/// Why a response body stopped short.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// DNS-rebinding and cross-site protection for a listener on loopback: a request a browser
/// page could send from a foreign site gets 403. Returns why, when refused. Decided case by
/// case (docs/reliability.md, "HTTP listeners"):
/// - `Origin`: refused unless its host is loopback (`127.0.0.1`, `localhost`, `[::1]`, any
///   case); a loopback origin on another port (a local dev page, the MCP Inspector) is on this
///   machine and allowed; `Origin: null` (a sandboxed frame, a `file:` page) is refused.
/// - `Host`: refused unless it is a loopback host with this listener's port (or no port);
///   an empty `Host`, or two of them, is refused; no `Host` at all (HTTP/1.0) is allowed, since
///   a browser always sends one.
/// - An absolute-form request target (`POST http://host:port/mcp`) names the host the request
///   is for (RFC 9112 §3.2.2 says it wins over `Host`): it must pass the same test.
pub(crate) fn refuse_foreign<B>(req: &hyper::Request<B>, local_port: u16) -> Option<String> {
    let loopback = |h: &str| {
        let host = match h.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => host,
            _ => h,
        };
        ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .any(|l| host.eq_ignore_ascii_case(l))
    };
    // Checked on every request: no allocation (the port's digits are written on the stack).
    let mut digits = itoa::Buffer::new();
    let local_port = digits.format(local_port);
    let this_port = |h: &str| match h.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => port == local_port,
        _ => true,
    };
    let headers = req.headers();
    if let Some(origin) = headers.get(hyper::header::ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let host = origin.split_once("://").map_or("", |(_, h)| h);
        if !loopback(host) {
            return Some(format!("mcptape: Origin {origin} is not allowed"));
        }
    }
    let mut hosts = headers.get_all(hyper::header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("mcptape: a request with two Host headers is not allowed".into());
    }
    if let Some(host) = host {
        let host = String::from_utf8_lossy(host.as_bytes());
        if host.is_empty() {
            return Some("mcptape: an empty Host is not allowed".into());
        }
        if !loopback(&host) || !this_port(&host) {
            return Some(format!("mcptape: Host {host} is not allowed"));
        }
    }
    if let Some(authority) = req.uri().authority() {
        let a = authority.as_str();
        if !loopback(a) || !this_port(a) {
            return Some(format!(
                "mcptape: a request for {a} (its request line names the host) is not allowed"
            ));
        }
    }
    None
}

/// A body of these bytes, whole.
pub(crate) fn whole_body(body: impl Into<Bytes>) -> RespBody {
    Full::new(body.into())
        .map_err(|never| -> BodyError { match never {} })
        .boxed()
}

/// A response with this status, content type and whole body.
pub(crate) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<RespBody> {
    let mut r = Response::new(whole_body(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    r
}

/// A plain-text response.
pub(crate) fn plain(status: StatusCode, text: &str) -> Response<RespBody> {
    full(status, "text/plain; charset=utf-8", text.to_string())
}

/// Reads a whole body, refusing more than `max` bytes.
pub(crate) async fn collect<B>(mut body: B, max: usize) -> Result<Bytes, String>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut all = Gathered::default();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading a body: {e}"))?;
        if let Ok(d) = frame.into_data() {
            if all.len() + d.len() > max {
                return Err(format!("a body over --max-message ({max} bytes)"));
            }
            all.push(d);
        }
    }
    Ok(all.into_bytes())
}

/// A body gathered piece by piece. Most bodies arrive in one piece: that piece is kept as it
/// is (no copy); only a body in several pieces is copied into one buffer.
#[derive(Default)]
pub(crate) struct Gathered {
    first: Option<Bytes>,
    rest: bytes::BytesMut,
    len: usize,
}

impl Gathered {
    /// Bytes gathered so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn push(&mut self, d: Bytes) {
        if d.is_empty() {
            return;
        }
        self.len += d.len();
        match self.first.take() {
            None if self.rest.is_empty() => self.first = Some(d),
            None => self.rest.extend_from_slice(&d),
            Some(f) => {
                self.rest.reserve(f.len() + d.len());
                self.rest.extend_from_slice(&f);
                self.rest.extend_from_slice(&d);
            }
        }
    }

    pub fn into_bytes(self) -> Bytes {
        self.first.unwrap_or_else(|| self.rest.freeze())
    }
}

/// A response body fed by a channel: each chunk goes out as soon as it is sent.
pub(crate) struct ChannelBody {
    pub rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    /// As a response body.
    pub fn boxed(self) -> RespBody {
        BodyExt::boxed(self)
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// A response body fed by a channel that may end in an error: the stream is then cut (no
/// terminating chunk), as a recorded stream was.
pub(crate) struct CuttableBody {
    pub rx: mpsc::Receiver<Result<Bytes, String>>,
}

/// Cuts a [`CuttableBody`] once what was sent before has gone out. hyper drops what it holds
/// unwritten when a body fails, so the cut waits for the body to have taken every chunk and
/// for one turn in which hyper flushes them (found replaying a recorded cut: with every event
/// already queued the client got nothing, not even the head).
pub(crate) async fn cut_after_flush(tx: &mpsc::Sender<Result<Bytes, String>>, why: String) {
    while tx.capacity() < tx.max_capacity() && !tx.is_closed() {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let _ = tx.send(Err(why)).await;
}

impl Body for CuttableBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.rx
            .poll_recv(cx)
            .map(|b| b.map(|b| b.map(Frame::data).map_err(BodyError::from)))
    }
}

/// The signals that stop an HTTP listener, created before its URL is given out: a signal that
/// arrives after that is never lost, and never takes its default action (death, tape unclosed).
pub struct StopSignals {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the SIGINT and SIGTERM handlers (from now on neither kills the process).
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

/// Connections served at once, unless told otherwise (`--max-connections`). Each costs a file
/// descriptor and a task (some 10 KiB); past the cap a new connection gets `503` at once and is
/// closed, so a flood of connections (a client opening sockets in a loop, a scanner) cannot take
/// the process's descriptors or its memory. A real client holds a handful (a POST in flight, a
/// GET stream); the load tests hold a thousand sessions open at once, a quarter of this.
pub const MAX_CONNECTIONS: usize = 4096;

/// How long a connection may take to send a request's headers, unless told otherwise
/// (`--header-timeout`): a connection that sends none (or a byte a minute: slowloris), or an
/// idle keep-alive connection that sends no next request, is closed instead of holding a
/// connection slot. A real client sends its headers in one write.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a listener allows its connections (each a flag of the commands that listen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once ([`MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// How long a request's headers may take ([`HEADER_TIMEOUT`]).
    pub header_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
        }
    }
}

/// What answers the requests of a listener: the player, the proxy, the bridge.
pub(crate) trait Handler: Send + Sync + 'static {
    /// The response to one request.
    fn handle(
        &self,
        req: hyper::Request<Incoming>,
    ) -> impl std::future::Future<Output = Response<RespBody>> + Send;
}

/// Binds a listener on `addr`: it and the address it got (the port, when asked for port 0).
pub(crate) async fn bind(
    addr: std::net::SocketAddr,
) -> std::io::Result<(tokio::net::TcpListener, std::net::SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// The whole answer a connection over the cap gets.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: text/plain\r\ncontent-length: 48\r\nconnection: close\r\n\r\nmcptape: too many connections open, retry later\n";

/// Serves HTTP/1 connections with `handle` until `stop` completes, then returns its output with
/// the connections still open (the caller decides how long they get). At most
/// `limits.max_connections` are served at once. Every request is checked first for a foreign
/// `Host` or `Origin` ([`refuse_foreign`]): 403 before any handler sees it.
pub(crate) async fn accept_until<H, S>(
    listener: &tokio::net::TcpListener,
    limits: Limits,
    handler: std::sync::Arc<H>,
    stop: S,
) -> (S::Output, tokio::task::JoinSet<()>)
where
    H: Handler,
    S: std::future::Future,
{
    let mut connections = tokio::task::JoinSet::new();
    let port = listener.local_addr().map_or(0, |a| a.port());
    // A timer that is always due no later than any connection's header deadline. Without it
    // the runtime's timer wheel is empty while a request waits for its answer, and arming the
    // next request's header timeout must then wake the runtime's driver (a write to its
    // eventfd and one more epoll_wait per request). With it, arming one is a wheel insert.
    let tick = limits
        .header_timeout
        .max(std::time::Duration::from_millis(1));
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(tick);
        loop {
            every.tick().await;
        }
    });
    tokio::pin!(stop);
    let out = loop {
        tokio::select! {
            // Cancel-safe: accept() loses no connection when `stop` wins, and `stop` is pinned
            // outside the loop so its progress is kept between turns.
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                while connections.try_join_next().is_some() {}
                if connections.len() >= limits.max_connections {
                    // A fresh socket's send buffer is empty: the answer goes out in one
                    // non-blocking write, and the socket closes when dropped.
                    let _ = stream.try_write(BUSY);
                    continue;
                }
                // Each answer goes out in one write: Nagle would only hold it back.
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let handler = handler.clone();
                        async move {
                            if let Some(why) = refuse_foreign(&req, port) {
                                return Ok::<_, Infallible>(plain(StatusCode::FORBIDDEN, &why));
                            }
                            Ok::<_, Infallible>(handler.handle(req).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(limits.header_timeout)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            out = &mut stop => break out,
        }
    };
    ticker.abort();
    (out, connections)
}

/// Messages for a stream no client has open yet (a session's GET stream), oldest first, at most
/// `cap` of them: past that the oldest is dropped and counted. The tape keeps every one; this
/// only bounds what a session nobody listens to can hold in memory.
#[derive(Debug)]
pub(crate) struct Backlog<T> {
    items: std::collections::VecDeque<T>,
    cap: usize,
    /// Messages dropped so far.
    pub dropped: u64,
}

/// Messages a session's GET stream holds for a client that has not opened it.
pub const GET_BACKLOG: usize = 1024;

impl<T> Default for Backlog<T> {
    fn default() -> Self {
        Backlog::new(GET_BACKLOG)
    }
}

impl<T> Backlog<T> {
    /// An empty backlog of at most `cap` messages.
    pub fn new(cap: usize) -> Backlog<T> {
        Backlog {
            items: std::collections::VecDeque::new(),
            cap,
            dropped: 0,
        }
    }

    /// Keeps `item`, dropping the oldest when full.
    pub fn push(&mut self, item: T) {
        if self.items.len() >= self.cap {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }

    /// Everything kept, oldest first.
    pub fn take(&mut self) -> Vec<T> {
        self.items.drain(..).collect()
    }

    /// How many are kept.
    #[allow(dead_code)] // only the tests use it
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none are kept.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A fresh random session id: 32 hex digits from the OS.
pub(crate) fn session_id() -> String {
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
    fn a_backlog_keeps_the_newest_and_counts_the_rest() {
        let mut b = Backlog::new(3);
        for i in 0..10 {
            b.push(i);
        }
        assert_eq!(b.len(), 3);
        assert_eq!(b.dropped, 7);
        assert_eq!(b.take(), vec![7, 8, 9]);
        assert!(b.is_empty());
        b.push(10);
        assert_eq!(b.take(), vec![10]);
    }

    #[test]
    fn the_busy_answer_is_one_whole_response() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        assert!(head.starts_with("HTTP/1.1 503 "));
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
