//! A loopback HTTP/1.1 upstream for the clients' unit tests: canned answers, connections it
//! closes when told to, and the requests it got.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback server giving `answers` in turn, one a request (a head, then as many body
/// bytes as its `content-length`), and closing each connection after `per_conn` answers
/// (without saying so, as a server whose keep-alive timeout ran out): right after the last
/// answer, or, `unanswered`, once the next request has come. Counts the connections it
/// accepted and keeps the requests' bytes.
pub(crate) async fn server(
    answers: Vec<&'static [u8]>,
    per_conn: usize,
    unanswered: bool,
) -> (hyper::Uri, Arc<AtomicUsize>, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: hyper::Uri = format!("http://{}/v1", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (accepted.clone(), seen.clone());
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (answers, log, next) = (answers.clone(), log.clone(), next.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut served = 0;
                loop {
                    let mut chunk = [0u8; 1024];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if buf.len() < end + 4 + len {
                            break;
                        }
                        log.lock().unwrap().extend(buf.drain(..end + 4 + len));
                        if unanswered && served == per_conn {
                            return;
                        }
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if s.write_all(answers[i % answers.len()]).await.is_err() {
                            return;
                        }
                        served += 1;
                        if !unanswered && served == per_conn {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, accepted, seen)
}

/// Runs `f` on a current-thread runtime with its I/O and timers.
pub(crate) fn run(f: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f);
}
