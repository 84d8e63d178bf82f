//! The HTTP proxies' HTTP/1.1 client (the model proxy's and `record --url`'s): one request at a
//! time on a pooled keep-alive connection, its answer's body read on the task that asks for it,
//! one piece per HTTP chunk, straight out of what the socket has delivered.
//!
//! Why not hyper's client, which the live player and `export --send` use: it hands a body over
//! one chunk at a time, through a one-slot channel, from the connection's own task. A provider
//! sends every stream event as a chunk of its own, so each event cost a turn of that task and of
//! the proxy's, a channel hand-over and a waker (measured: with eight events a chunk in place of
//! one, the proxy's CPU for a 300,000-event stream fell from ≈ 519 to ≈ 402 ms); `record --url`
//! paid the connection task's turn on every call (≈ 2 µs of its extra latency). Here a read
//! of the socket is decoded in place: what one read brought is taped in one write and
//! forwarded in one piece, with no other task in between. The head is parsed by `httparse`,
//! hyper's own parser; the framing follows RFC 9112 §6 (chunked, a length, or to the close).

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use std::sync::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a request or its answer failed: connecting, TLS, the socket, or what the upstream sent.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A response head larger than this is refused (hyper's default limit is about the same).
const MAX_HEAD: usize = 64 * 1024;
/// Headers in a response head, at most.
const MAX_HEADERS: usize = 128;
/// A chunk-size line (with extensions) or a trailer line longer than this is refused.
const MAX_LINE: usize = 4 * 1024;
/// Each socket read asks for at least this much room.
const READ_ROOM: usize = 16 * 1024;

/// What a connection carries: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One connection to the upstream and the bytes read from it not yet consumed.
pub struct Conn {
    io: Box<dyn Io>,
    buf: BytesMut,
}

impl Conn {
    pub fn new(io: Box<dyn Io>) -> Conn {
        Conn {
            io,
            buf: BytesMut::new(),
        }
    }

    /// Reads more of the socket into `buf`; `false` at its end. Cancel-safe: what a read
    /// brings is in `buf`, or nothing was read.
    async fn fill(&mut self) -> std::io::Result<bool> {
        if self.buf.capacity() - self.buf.len() < READ_ROOM {
            self.buf.reserve(4 * READ_ROOM);
        }
        Ok(self.io.read_buf(&mut self.buf).await? > 0)
    }

    /// Whether an idle connection is still usable: nothing to read (a close, or bytes no
    /// request asked for, rule it out), checked without waiting.
    fn idle_and_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut probe = [0u8; 1];
        let mut rb = tokio::io::ReadBuf::new(&mut probe);
        matches!(
            std::pin::Pin::new(&mut self.io).poll_read(&mut cx, &mut rb),
            std::task::Poll::Pending
        )
    }

    /// Writes the request: its line, `headers` as given (the caller has set `host`), the
    /// body's length, then the body.
    async fn send(
        &mut self,
        method: &Method,
        target: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(256 + body.len());
        out.extend_from_slice(method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        // As hyper does: a length for every body, and for an empty one unless the method
        // never has one.
        if !body.is_empty() || !matches!(*method, Method::GET | Method::HEAD) {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        self.io.write_all(&out).await?;
        self.io.flush().await
    }

    /// Reads a response head (1xx heads skipped); `Ok(None)`: the connection ended before
    /// any byte of it.
    async fn head(&mut self) -> Result<Option<(StatusCode, u8, HeaderMap)>, Error> {
        let mut started = false;
        loop {
            if !self.buf.is_empty() {
                started = true;
                let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut slots);
                match resp.parse(&self.buf)? {
                    httparse::Status::Complete(n) => {
                        let status = StatusCode::from_u16(resp.code.unwrap_or(0))?;
                        let version = resp.version.unwrap_or(1);
                        let mut headers = HeaderMap::with_capacity(resp.headers.len());
                        for h in resp.headers.iter() {
                            headers.append(
                                HeaderName::from_bytes(h.name.as_bytes())?,
                                HeaderValue::from_bytes(h.value)?,
                            );
                        }
                        self.buf.advance(n);
                        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
                            continue;
                        }
                        return Ok(Some((status, version, headers)));
                    }
                    httparse::Status::Partial if self.buf.len() > MAX_HEAD => {
                        return Err(format!("the response head is over {MAX_HEAD} bytes").into());
                    }
                    httparse::Status::Partial => {}
                }
            }
            if !self.fill().await? {
                if started {
                    return Err("the upstream closed the connection inside a response head".into());
                }
                return Ok(None);
            }
        }
    }
}

/// How the answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    /// `transfer-encoding: chunked`: in a chunk with this many bytes left, or at a size line.
    Chunked(Chunk),
    /// `content-length`: this many bytes left.
    Length(u64),
    /// Neither: to the end of the connection, which then cannot be used again.
    Close,
    /// Read to its end.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunk {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// After a chunk's data, at its line end.
    DataEnd,
    /// After the last chunk, in the trailer section.
    Trailers,
}

/// An answer's body, read from its connection; the connection goes back to the pool once the
/// body has been read to its end ([`Body::finish`]).
pub struct Body {
    /// `None` once given back to the pool.
    conn: Option<Conn>,
    framing: Framing,
    /// The connection may carry another request once this body has ended.
    keep_alive: bool,
}

/// What a body holds without reading the socket.
pub enum Buffered {
    Data(Bytes),
    /// Nothing complete buffered: a read of the socket is next.
    Nothing,
    End,
    Broke(Error),
}

impl Body {
    /// The next piece of the body from what is already read, without waiting.
    pub fn buffered(&mut self) -> Buffered {
        match self.decode() {
            Ok(Some(d)) => Buffered::Data(d),
            Ok(None) if self.framing == Framing::Done => Buffered::End,
            Ok(None) => Buffered::Nothing,
            Err(e) => Buffered::Broke(self.broke(e)),
        }
    }

    /// Ends a body that broke: nothing more is read of it, and its connection is not reused.
    fn broke(&mut self, e: Error) -> Error {
        self.framing = Framing::Done;
        self.keep_alive = false;
        e
    }

    /// The next piece of the body; `None` at its end. Cancel-safe: its only wait is a read of
    /// the socket, whose bytes are kept whether or not the read completes.
    pub async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        loop {
            match self.buffered() {
                Buffered::Data(d) => return Some(Ok(d)),
                Buffered::End => return None,
                Buffered::Broke(e) => return Some(Err(e)),
                Buffered::Nothing => {}
            }
            match self.conn.as_mut()?.fill().await {
                Ok(true) => {}
                Ok(false) if self.framing == Framing::Close => {
                    self.framing = Framing::Done;
                    return None;
                }
                Ok(false) => {
                    let e = "the upstream closed the connection inside the body".into();
                    return Some(Err(self.broke(e)));
                }
                Err(e) => return Some(Err(self.broke(e.into()))),
            }
        }
    }

    /// The whole body, refused past `max` bytes.
    pub async fn collect(&mut self, max: usize) -> Result<Bytes, String> {
        let mut all = super::http::Gathered::default();
        while let Some(piece) = self.next().await {
            let piece = piece.map_err(|e| format!("reading the upstream's answer: {e}"))?;
            if all.len() + piece.len() > max {
                return Err(format!("the upstream's answer is over {max} bytes"));
            }
            all.push(piece);
        }
        Ok(all.into_bytes())
    }

    /// Gives the connection back to `pool` if the body was read to its end and the connection
    /// can carry another request.
    pub fn finish(&mut self, pool: &Pool) {
        if let Some(conn) = self.conn.take() {
            if self.framing == Framing::Done && self.keep_alive {
                pool.put(conn);
            }
        }
    }

    /// Decodes the next piece of data from `buf`; `Ok(None)`: more must be read first (or
    /// the body has ended: `framing` is then `Done`).
    fn decode(&mut self) -> Result<Option<Bytes>, Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let buf = &mut conn.buf;
        loop {
            match self.framing {
                Framing::Done => return Ok(None),
                Framing::Close => {
                    return Ok((!buf.is_empty()).then(|| buf.split().freeze()));
                }
                Framing::Length(0) => self.framing = Framing::Done,
                Framing::Length(left) => {
                    let Some(piece) = take_up_to(buf, left) else {
                        return Ok(None);
                    };
                    self.framing = Framing::Length(left - piece.len() as u64);
                    return Ok(Some(piece));
                }
                Framing::Chunked(Chunk::Size) => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(None);
                    };
                    let size = chunk_size(&line)?;
                    self.framing = Framing::Chunked(if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    });
                }
                Framing::Chunked(Chunk::Data(left)) => {
                    let Some(piece) = take_up_to(buf, left) else {
                        return Ok(None);
                    };
                    self.framing = Framing::Chunked(match left - piece.len() as u64 {
                        0 => Chunk::DataEnd,
                        rest => Chunk::Data(rest),
                    });
                    return Ok(Some(piece));
                }
                Framing::Chunked(Chunk::DataEnd) => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(None);
                    };
                    if !line.is_empty() {
                        return Err("a chunk's data is longer than its size".into());
                    }
                    self.framing = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailers) => {
                    // Trailer fields are not forwarded (nor are they by the hyper client).
                    let Some(line) = take_line(buf)? else {
                        return Ok(None);
                    };
                    if line.is_empty() {
                        self.framing = Framing::Done;
                    }
                }
            }
        }
    }
}

/// At most `left` bytes from the start of `buf`, taken out of it (no copy); `None` when `buf`
/// is empty.
fn take_up_to(buf: &mut BytesMut, left: u64) -> Option<Bytes> {
    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
    (n > 0).then(|| buf.split_to(n).freeze())
}

/// The line at the start of `buf` without its end (`\r\n`, or a bare `\n` as hyper takes it),
/// taken out of `buf`; `None` until it is whole.
fn take_line(buf: &mut BytesMut) -> Result<Option<BytesMut>, Error> {
    match memchr::memchr(b'\n', buf) {
        Some(i) => {
            let mut line = buf.split_to(i + 1);
            line.truncate(i);
            if line.last() == Some(&b'\r') {
                line.truncate(i - 1);
            }
            Ok(Some(line))
        }
        None if buf.len() > MAX_LINE => {
            Err(format!("a chunk line is over {MAX_LINE} bytes").into())
        }
        None => Ok(None),
    }
}

/// A chunk-size line's size: hex digits, then optional blanks and `;` extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let rest_ok = rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .is_none_or(|i| rest[i] == b';');
    if digits == 0 || digits > 16 || !rest_ok {
        return Err(format!(
            "a bad chunk-size line: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(64)])
        )
        .into());
    }
    let hex = std::str::from_utf8(&line[..digits]).expect("hex digits are ASCII");
    Ok(u64::from_str_radix(hex, 16)?)
}

/// Idle connections kept for reuse; more are closed when given back.
const MAX_IDLE: usize = 256;

/// Keep-alive connections to one upstream.
pub struct Pool {
    connector: super::upstream::Connector,
    /// `scheme://authority/` of the upstream: where connections go.
    origin: hyper::Uri,
    idle: Mutex<Vec<Conn>>,
}

/// A response's status and headers, and its body.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Answer {
    /// Its `Content-Type` as sent ("" when absent or not text).
    pub fn content_type(&self) -> &str {
        self.headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Pool {
    /// A pool of connections to `origin`'s scheme and authority, opened by `connector`.
    pub fn new(connector: super::upstream::Connector, origin: &hyper::Uri) -> Pool {
        Pool {
            connector,
            origin: super::upstream::origin_of(origin),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends a request (`target`: its path and query) on an idle connection or a new one, and
    /// reads its answer's head. A request the upstream had closed an idle connection under
    /// (nothing of its answer came) is sent again on a new one, as hyper-util's client does.
    pub async fn send(
        &self,
        method: &Method,
        target: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Answer, Error> {
        loop {
            let (mut conn, reused) = match self.take() {
                Some(c) => (c, true),
                None => (self.connect().await?, false),
            };
            // Sent again only when the upstream cannot have read it: the write failed, or the
            // connection ended with no byte of an answer (an idle connection closed as the
            // request went out), on a connection used before.
            match conn.send(method, target, headers, body).await {
                Ok(()) => {}
                Err(_) if reused => continue,
                Err(e) => return Err(e.into()),
            }
            let (status, version, headers) = match conn.head().await? {
                Some(h) => h,
                None if reused => continue,
                None => return Err("the upstream closed the connection before answering".into()),
            };
            let framing = framing(method, status, &headers)?;
            let keep_alive = version == 1
                && framing != Framing::Close
                && !headers
                    .get_all(hyper::header::CONNECTION)
                    .iter()
                    .any(|v| has_token(v.as_bytes(), b"close"));
            return Ok(Answer {
                status,
                headers,
                body: Body {
                    conn: Some(conn),
                    framing,
                    keep_alive,
                },
            });
        }
    }

    /// Gives a connection back, unless enough are idle.
    fn put(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// The most recently used idle connection that is still open.
    fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut conn) = idle.pop() {
            if conn.idle_and_open() {
                return Some(conn);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Conn, Error> {
        use tower_service::Service as _;
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
        let io = connector.call(self.origin.clone()).await?;
        Ok(Conn::new(Box::new(hyper_util::rt::TokioIo::new(io))))
    }
}

/// How the body of an answer with this status and these headers is delimited, for a request
/// of `method` (RFC 9112 §6.3).
fn framing(method: &Method, status: StatusCode, headers: &HeaderMap) -> Result<Framing, Error> {
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Done);
    }
    let codings = headers.get_all(hyper::header::TRANSFER_ENCODING);
    if let Some(last) = codings.iter().next_back() {
        let chunked = last
            .as_bytes()
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        return Ok(if chunked {
            Framing::Chunked(Chunk::Size)
        } else {
            Framing::Close
        });
    }
    let mut lengths = headers.get_all(hyper::header::CONTENT_LENGTH).iter();
    match lengths.next() {
        None => Ok(Framing::Close),
        Some(v) => {
            let n: u64 = std::str::from_utf8(v.as_bytes())
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or("a bad content-length")?;
            if lengths.any(|other| other != v) {
                return Err("two different content-lengths".into());
            }
            Ok(Framing::Length(n))
        }
    }
}

/// Whether a comma-separated header value holds `token` (any case).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::super::test_upstream::{run, server};
    use super::*;
    use std::sync::atomic::Ordering;

    /// A POST of `body` through `pool`; the answer's status and body.
    async fn post(pool: &Pool, url: &hyper::Uri, body: &[u8]) -> (u16, String) {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::HOST,
            HeaderValue::from_str(url.authority().unwrap().as_str()).unwrap(),
        );
        let mut answer = pool
            .send(&Method::POST, "/v1/messages", &headers, body)
            .await
            .expect("an answer");
        let got = answer.body.collect(1 << 20).await.unwrap();
        answer.body.finish(pool);
        (
            answer.status.as_u16(),
            String::from_utf8_lossy(&got).into_owned(),
        )
    }

    fn pool_for(url: &hyper::Uri) -> Pool {
        Pool::new(
            super::super::upstream::connector_to(url, None).unwrap(),
            url,
        )
    }

    #[test]
    fn the_request_goes_out_whole_with_its_length() {
        run(async {
            let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let (url, _, seen) = server(vec![ok], usize::MAX, false).await;
            let pool = pool_for(&url);
            assert_eq!(post(&pool, &url, b"hello").await, (200, "ok".into()));
            let host = url.authority().unwrap().as_str().to_string();
            assert_eq!(
                String::from_utf8_lossy(&seen.lock().unwrap()),
                format!(
                    "POST /v1/messages HTTP/1.1\r\nhost: {host}\r\ncontent-length: 5\r\n\r\nhello"
                )
            );
        });
    }

    #[test]
    fn sequential_requests_share_one_connection_whatever_the_framing() {
        run(async {
            let answers: Vec<&[u8]> = vec![
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 3\r\n\r\nnew",
                b"HTTP/1.1 204 No Content\r\n\r\n",
                // Three chunks: collected into one body.
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n1\r\n,\r\n3\r\nyes\r\n0\r\n\r\n",
            ];
            let (url, accepted, _) = server(answers, usize::MAX, false).await;
            let pool = pool_for(&url);
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (201, "new".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (204, "".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok,yes".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            assert_eq!(accepted.load(Ordering::SeqCst), 1);
        });
    }

    #[test]
    fn a_body_over_the_limit_is_refused_in_one_piece_or_several() {
        run(async {
            let answers: Vec<&[u8]> = vec![
                b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsix!!!",
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfive!",
            ];
            let (url, _, _) = server(answers, usize::MAX, false).await;
            let pool = pool_for(&url);
            for expect in [Err(()), Err(()), Ok("five!")] {
                let mut answer = pool
                    .send(&Method::GET, "/", &HeaderMap::new(), b"")
                    .await
                    .expect("an answer");
                let got = answer.body.collect(5).await;
                match expect {
                    Ok(body) => assert_eq!(got.unwrap(), body.as_bytes()),
                    Err(()) => {
                        let e = got.unwrap_err();
                        assert!(e.contains("over 5 bytes"), "{e}");
                    }
                }
            }
        });
    }

    #[test]
    fn a_connection_that_cannot_be_reused_is_not() {
        run(async {
            let answers: Vec<&[u8]> = vec![
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
                b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
                // Delimited by the close: read to the end of the connection.
                b"HTTP/1.1 200 OK\r\n\r\nto the end",
            ];
            let (url, accepted, _) = server(answers, 1, false).await;
            let pool = pool_for(&url);
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            assert_eq!(post(&pool, &url, b"{}").await, (200, "to the end".into()));
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
            assert!(pool.idle.lock().unwrap().is_empty());
        });
    }

    #[test]
    fn a_connection_the_upstream_closed_while_idle_is_replaced() {
        run(async {
            let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let (url, accepted, _) = server(vec![ok], 1, false).await;
            let pool = pool_for(&url);
            for _ in 0..3 {
                assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
                // The close reaches the idle connection: it is not used again.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
        });
    }

    #[test]
    fn a_request_an_idle_connection_closed_under_is_sent_again() {
        run(async {
            let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            // Each connection answers once, then takes the next request and closes unanswered
            // (the upstream's keep-alive timeout ran out as the request went out).
            let (url, accepted, seen) = server(vec![ok], 1, true).await;
            let pool = pool_for(&url);
            for _ in 0..3 {
                assert_eq!(post(&pool, &url, b"{}").await, (200, "ok".into()));
            }
            // The 2nd and 3rd requests each went out twice: on the idle connection, then on a
            // new one.
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
            let requests = String::from_utf8_lossy(&seen.lock().unwrap())
                .matches("POST /v1/messages")
                .count();
            assert_eq!(requests, 5);
        });
    }

    #[test]
    fn an_upstream_that_refuses_is_an_error() {
        run(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url: hyper::Uri = format!("http://{}/v1", listener.local_addr().unwrap())
                .parse()
                .unwrap();
            drop(listener);
            let pool = pool_for(&url);
            let Err(err) = pool
                .send(&Method::POST, "/v1/messages", &HeaderMap::new(), b"{}")
                .await
            else {
                panic!("an answer from a port nothing listens on");
            };
            assert!(!super::super::upstream::error_chain(&*err).is_empty());
        });
    }

    /// A body over `wire`, framed as `framing`, read through an in-memory connection that
    /// hands over `step` bytes a read.
    fn read_all(wire: &[u8], framing: Framing, step: usize) -> Result<Vec<u8>, String> {
        let (client, mut server) = tokio::io::duplex(64);
        let wire = wire.to_vec();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let writer = tokio::spawn(async move {
                for part in wire.chunks(step.max(1)) {
                    if server.write_all(part).await.is_err() {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            });
            let mut body = Body {
                conn: Some(Conn::new(Box::new(client))),
                framing,
                keep_alive: true,
            };
            let mut out = Vec::new();
            let result = loop {
                match body.next().await {
                    Some(Ok(d)) => out.extend_from_slice(&d),
                    Some(Err(e)) => break Err(e.to_string()),
                    None => break Ok(out),
                }
            };
            writer.abort();
            result
        })
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let wire = b"5\r\nhello\r\n1;ext=1\r\n \r\n0B\r\n world, and\r\n0\r\ntrailer: x\r\n\r\n";
        for step in [1, 2, 3, 7, 64] {
            assert_eq!(
                read_all(wire, Framing::Chunked(Chunk::Size), step).unwrap(),
                b"hello  world, and",
                "step {step}"
            );
        }
        // A bare `\n` as a line end, as hyper takes it.
        assert_eq!(
            read_all(b"3\nabc\n0\n\n", Framing::Chunked(Chunk::Size), 4).unwrap(),
            b"abc"
        );
    }

    proptest::proptest! {
        /// Any chunked encoding of any data (sizes in either case, extensions or not, a
        /// trailer or not) decodes to the data, however the reads split it.
        #[test]
        fn every_chunked_encoding_decodes_to_its_data(
            chunks in proptest::collection::vec(
                (proptest::collection::vec(proptest::num::u8::ANY, 1..300), proptest::bool::ANY),
                0..8,
            ),
            upper in proptest::bool::ANY,
            trailer in proptest::bool::ANY,
            step in 1usize..80,
        ) {
            let mut wire = Vec::new();
            let mut data = Vec::new();
            for (chunk, ext) in &chunks {
                let size = if upper { format!("{:X}", chunk.len()) } else { format!("{:x}", chunk.len()) };
                wire.extend_from_slice(size.as_bytes());
                if *ext {
                    wire.extend_from_slice(b" ;a=b;c");
                }
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(chunk);
                wire.extend_from_slice(b"\r\n");
                data.extend_from_slice(chunk);
            }
            wire.extend_from_slice(b"0\r\n");
            if trailer {
                wire.extend_from_slice(b"x-sum: 1\r\n");
            }
            wire.extend_from_slice(b"\r\n");
            proptest::prop_assert_eq!(read_all(&wire, Framing::Chunked(Chunk::Size), step), Ok(data));
        }

        /// What an upstream sends cannot make the decoder panic: any bytes end in data (never
        /// more than was sent; for a length, exactly its first bytes), or an error.
        #[test]
        fn any_bytes_read_as_a_body_end_without_a_panic(
            wire in proptest::collection::vec(
                proptest::sample::select(vec![b'0', b'1', b'a', b'F', b'z', b';', b' ', b'\r', b'\n', b'x']),
                0..200,
            ),
            step in 1usize..40,
            length in 0u64..300,
        ) {
            // What it gives as data is never more than it was sent.
            if let Ok(data) = read_all(&wire, Framing::Chunked(Chunk::Size), step) {
                proptest::prop_assert!(data.len() < wire.len());
            }
            match read_all(&wire, Framing::Length(length), step) {
                Ok(data) => proptest::prop_assert_eq!(&data[..], &wire[..length as usize]),
                Err(_) => proptest::prop_assert!(wire.len() < length as usize),
            }
        }
    }

    #[test]
    fn broken_chunked_bodies_are_errors() {
        for (wire, why) in [
            (&b"zz\r\nhello\r\n"[..], "bad chunk-size"),
            (b"3\r\nabcdef\r\n0\r\n\r\n", "longer than its size"),
            (b"5\r\nhel", "inside the body"),
            (b"11111111111111111\r\n", "bad chunk-size"),
        ] {
            let e = read_all(wire, Framing::Chunked(Chunk::Size), 3).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn length_and_close_delimited_bodies() {
        assert_eq!(
            read_all(b"0123456789", Framing::Length(10), 3).unwrap(),
            b"0123456789"
        );
        let e = read_all(b"01234", Framing::Length(10), 3).unwrap_err();
        assert!(e.contains("inside the body"), "{e}");
        assert_eq!(
            read_all(b"to the end", Framing::Close, 4).unwrap(),
            b"to the end"
        );
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let post = Method::POST;
        let ok = StatusCode::OK;
        let f = |m: &Method, s, hs: &[(&str, &str)]| framing(m, s, &h(hs));
        assert_eq!(
            f(&Method::HEAD, ok, &[("content-length", "5")]).unwrap(),
            Framing::Done
        );
        assert_eq!(
            f(&post, StatusCode::NO_CONTENT, &[]).unwrap(),
            Framing::Done
        );
        assert_eq!(
            f(
                &post,
                ok,
                &[
                    ("transfer-encoding", "gzip, Chunked"),
                    ("content-length", "3")
                ]
            )
            .unwrap(),
            Framing::Chunked(Chunk::Size)
        );
        assert_eq!(
            f(&post, ok, &[("transfer-encoding", "gzip")]).unwrap(),
            Framing::Close
        );
        assert_eq!(
            f(&post, ok, &[("content-length", "7")]).unwrap(),
            Framing::Length(7)
        );
        assert_eq!(
            f(
                &post,
                ok,
                &[("content-length", "7"), ("content-length", "7")]
            )
            .unwrap(),
            Framing::Length(7)
        );
        assert!(f(
            &post,
            ok,
            &[("content-length", "7"), ("content-length", "8")]
        )
        .is_err());
        assert!(f(&post, ok, &[("content-length", "-1")]).is_err());
        assert_eq!(f(&post, ok, &[]).unwrap(), Framing::Close);
    }
}
