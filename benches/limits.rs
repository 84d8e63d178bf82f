//! What a recording proxy cannot avoid, step by step, on this machine: the cost per byte of each
//! step `record` takes for every byte (a pipe copy, a `write(2)` into the page cache, the chain
//! hash, JSON validation, the redaction scan) and per message (a system call, a thread woken on
//! the same CPU). docs/performance.md derives the best ratio a taping proxy can reach from these.
//!
//! Run: `cargo bench --bench limits` (add `-- --pin 1` to run on one CPU, as the bench does).
//! Each figure is the least CPU time of several rounds: the floor, not the average.

use mcptape::tape::sink::TapeFile;
use std::fs::File;
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::time::Duration;

const ROUNDS: usize = 7;

/// CPU time of this process (all its threads, user and system): on a machine other work
/// shares, time on the CPU is what a step costs; wall time would count the others' turns.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The least CPU time of `ROUNDS` runs of `f`, each doing `iters` operations: seconds per
/// operation.
fn best(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..ROUNDS {
        let t = cpu_time();
        f(iters);
        best = best.min(cpu_time() - t);
    }
    best.as_secs_f64() / iters as f64
}

/// A 1 KiB `tools/call` result line and an 8 MiB one, as the bench server answers.
fn body(size: usize) -> Vec<u8> {
    let text = "the quick brown fox jumps over the lazy dog; ".repeat(size / 45 + 1);
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{}"}}],"isError":false}}}}"#,
        &text[..size]
    )
    .into_bytes()
}

/// A model request shaped as an agent's (≈ 64 KB): a system prompt of prose lines and an
/// `<example>` element, forty tools
/// with descriptions and JSON schemas, a conversation. Prose names tokens, keys and passwords
/// without holding any, as agents' prompts do, so the redactor walks every string of it (the
/// byte rules cannot rule it out) and finds nothing.
fn agent_request() -> Vec<u8> {
    let line = "When the user asks for a change, read the file first, keep the token budget in \
                mind, and never print a password or an API key you find in the environment. ";
    let prose = |lines: usize| -> String {
        (0..lines)
            .map(|i| format!("{i}. {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let tools: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            serde_json::json!({
                "name": format!("tool_{i}"),
                "description": prose(6),
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "The file to act on."},
                        "limit": {"type": "integer", "description": "At most this many lines."},
                        "dry_run": {"type": "boolean"},
                    },
                    "required": ["path"],
                    "additionalProperties": false,
                },
            })
        })
        .collect();
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": true,
        "system": [{
            "type": "text",
            "text": format!("{}\n<example>user: run the tests\nassistant: I run them.</example>", prose(80)),
            "cache_control": {"type": "ephemeral"},
        }],
        "tools": tools,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
            {"role": "assistant", "content": [{"type": "text", "text": prose(3)}]},
        ],
    })
    .to_string()
    .into_bytes()
}

fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is two ints; pipe2 fills them or fails.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are fresh and owned by nobody else.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity take valid ones.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// µs per call of `f`, by [`best`].
fn per_call(iters: usize, mut f: impl FnMut()) -> f64 {
    best(iters, |k| {
        for _ in 0..k {
            f();
        }
    }) * 1e6
}

struct Row {
    what: &'static str,
    per_op_us: f64,
    bytes: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--pin") {
        let cpu = args.get(i + 1).and_then(|c| c.parse().ok()).unwrap_or(0);
        pin(cpu);
        println!("pinned to CPU {cpu}");
    }
    let dir = std::env::temp_dir().join(format!("mcptape-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let redactor =
        mcptape::redact::Redactor::new(&mcptape::redact::RedactConfig::defaults()).expect("rules");
    let mut rows = Vec::new();
    for (size, iters) in [(1024usize, 20_000usize), (8 << 20, 8)] {
        let b = body(size);
        let n = b.len();

        // A pipe copy: the bytes written into a pipe and read out again (two copies, the
        // kernel's), in 64 KiB pieces as the relay moves them.
        let (mut r, mut w) = pipe();
        let mut sink = vec![0u8; 64 * 1024];
        rows.push(Row {
            what: "pipe: write + read",
            per_op_us: best(iters, |k| {
                for _ in 0..k {
                    for piece in b.chunks(64 * 1024) {
                        w.write_all(piece).unwrap();
                        let mut got = 0;
                        while got < piece.len() {
                            got += r.read(&mut sink).unwrap();
                        }
                    }
                }
            }) * 1e6,
            bytes: n,
        });

        // write(2) of the line into the page cache (the tape), the file cut back now and then.
        let path = dir.join("tape");
        let mut f = File::create(&path).unwrap();
        let mut written = 0usize;
        rows.push(Row {
            what: "write(2) to a file",
            per_op_us: best(iters, |k| {
                for _ in 0..k {
                    f.write_all(&b).unwrap();
                    written += n;
                    if written > 256 << 20 {
                        f.set_len(0).unwrap();
                        use std::io::Seek;
                        f.seek(std::io::SeekFrom::Start(0)).unwrap();
                        written = 0;
                    }
                }
            }) * 1e6,
            bytes: n,
        });

        // The tape's own writes (tape/sink.rs): on this file system a copy into a shared map of
        // the file's end, kept padded ahead with newlines by a write(2) per 64 KiB; a write over
        // 256 KiB is a write(2) after the padding is cut.
        let mut tape = TapeFile::new(tape_file(&dir.join("sink")), 0);
        let mut at = 0u64;
        rows.push(Row {
            what: "the tape's write (tape/sink.rs)",
            per_op_us: best(iters, |k| {
                for _ in 0..k {
                    tape.write_at_end(at, &mut [std::io::IoSlice::new(&b)])
                        .unwrap();
                    at += n as u64;
                }
                if at > 256 << 20 {
                    tape.cut(0).unwrap();
                    at = 0;
                }
            }) * 1e6,
            bytes: n,
        });
        drop(tape);

        // The same line copied into a shared mapping of the file instead: the bytes are in the
        // page cache as soon as they are copied (what a tape written this way would guarantee),
        // without a system call. The file grows a window at a time, each window faulted in
        // writable at once, unmapped when full; its cost per byte is counted here.
        let mut mapped = MappedTape::create(&dir.join("mapped"));
        rows.push(Row {
            what: "copy into a mapped file (1 MiB windows)",
            per_op_us: best(iters, |k| {
                for _ in 0..k {
                    mapped.append(&b);
                }
                mapped.restart_if_over(256 << 20);
            }) * 1e6,
            bytes: n,
        });
        drop(mapped);

        rows.push(Row {
            what: "SHA-256 (sha2)",
            per_op_us: per_call(iters, || {
                use sha2::Digest;
                black_box(sha2::Sha256::digest(black_box(&b)));
            }),
            bytes: n,
        });
        rows.push(Row {
            what: "BLAKE3 (blake3, one thread)",
            per_op_us: per_call(iters, || {
                black_box(blake3::hash(black_box(&b)));
            }),
            bytes: n,
        });
        rows.push(Row {
            what: "JSON validation (serde_json)",
            per_op_us: per_call(iters, || {
                let v: serde::de::IgnoredAny = serde_json::from_slice(black_box(&b)).unwrap();
                black_box(v);
            }),
            bytes: n,
        });
        rows.push(Row {
            what: "classify (top level, validates)",
            per_op_us: per_call(iters, || {
                black_box(mcptape::wire::classify(black_box(&b)));
            }),
            bytes: n,
        });
        rows.push(Row {
            what: "redaction scan (no secret)",
            per_op_us: per_call(iters, || {
                assert!(redactor.redact_json(black_box(&b)).is_none());
            }),
            bytes: n,
        });
        // The same message with one non-ASCII letter (read through its ASCII shadow since
        // session 37; the whole regex set before).
        let accented = {
            let text = std::str::from_utf8(&b).expect("UTF-8");
            let at = text.rfind(' ').expect("a space in the prose");
            format!("{}\u{e9}{}", &text[..at], &text[at + 1..]).into_bytes()
        };
        rows.push(Row {
            what: "redaction scan, one non-ASCII letter",
            per_op_us: per_call(iters, || {
                assert!(redactor.redact_json(black_box(&accented)).is_none());
            }),
            bytes: accented.len(),
        });
        rows.push(Row {
            what: "memcpy",
            per_op_us: best(iters, |k| {
                let mut dst = vec![0u8; n];
                for _ in 0..k {
                    dst.copy_from_slice(black_box(&b));
                    black_box(&dst);
                }
            }) * 1e6,
            bytes: n,
        });
        rows.push(Row {
            what: "fresh buffer: allocate, fault in, free",
            per_op_us: per_call(iters, || {
                let mut v = Vec::<u8>::with_capacity(n);
                v.extend_from_slice(black_box(&b));
                black_box(&v);
            }),
            bytes: n,
        });
    }
    println!("\nPer byte (least CPU time of {ROUNDS} rounds)");
    println!(
        "  {:<40} {:>10} {:>12} {:>10}",
        "step", "message", "µs/message", "GB/s"
    );
    for r in &rows {
        println!(
            "  {:<40} {:>10} {:>12.2} {:>10.2}",
            r.what,
            size_name(r.bytes),
            r.per_op_us,
            r.bytes as f64 / (r.per_op_us * 1e3)
        );
    }

    // The model proxy's unit: one SSE event of the bench's long stream (a 16-byte text delta),
    // its data as the tape keeps it and the whole tape line the chain hashes.
    let data = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the quick brown "}}"#;
    let line = format!(
        r#"{{"type":"model","seq":12345,"t_us":523452,"server":"model","dir":"s2c","call":7,"part":"event","event":"content_block_delta","msg":{},"h":"c0498e853b23ff62839eda475d042ebe5a22d6283d8ce68895b02aea6569d275"}}"#,
        std::str::from_utf8(data).unwrap()
    )
    .into_bytes();
    let iters = 200_000;
    let event_rows = [
        (
            "SHA-256 of the tape line",
            line.len(),
            per_call(iters, || {
                use sha2::Digest;
                black_box(sha2::Sha256::digest(black_box(&line)));
            }),
        ),
        (
            "JSON validation of the data",
            data.len(),
            per_call(iters, || {
                let v: serde::de::IgnoredAny = serde_json::from_slice(black_box(data)).unwrap();
                black_box(v);
            }),
        ),
        (
            "redaction scan of the data (no secret)",
            data.len(),
            per_call(iters, || {
                assert!(redactor.redact_json(black_box(data)).is_none());
            }),
        ),
        (
            "SSE parse of the event (src/transport/sse.rs)",
            data.len() + 36,
            {
                let ev = format!(
                    "event: content_block_delta\ndata: {}\n\n",
                    std::str::from_utf8(data).unwrap()
                );
                let chunk = bytes::Bytes::from(ev.into_bytes());
                let mut parser = mcptape::fuzz_api::SseParser::new(1 << 20);
                per_call(iters, || {
                    black_box(parser.push_bytes(black_box(chunk.clone())));
                })
            },
        ),
    ];
    let request = agent_request();
    let fresh = || {
        mcptape::redact::Redactor::new(&mcptape::redact::RedactConfig::defaults()).expect("rules")
    };
    // A tool's HTML answer with a secret in a form: the text rules, the XML one among them,
    // compiled for it (26 ms for the XML rule alone until session 38).
    let form = serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{
        "type": "text",
        "text": "<form><label>Password</label><input name=\"csrf_token\" value=\"a8f3k2m9x7q1w5e4\"></form>",
    }]}})
    .to_string()
    .into_bytes();
    println!(
        "\nPer model request: an agent's, prose and schemas (least CPU time of {ROUNDS} rounds)"
    );
    let request_rows = [
        (
            "redaction walk (no secret)",
            request.len(),
            per_call(200, || {
                assert!(redactor.redact_json(black_box(&request)).is_none());
            }),
        ),
        (
            "the same by a new redactor (its rules compiled)",
            request.len(),
            per_call(3, || {
                assert!(fresh().redact_json(black_box(&request)).is_none());
            }),
        ),
        (
            "an HTML answer with a secret, a new redactor",
            form.len(),
            per_call(3, || {
                assert!(fresh().redact_json(black_box(&form)).is_some());
            }),
        ),
    ];
    for (what, bytes, us) in request_rows {
        println!("  {what:<46} {bytes:>5} B {us:>8.1} µs");
    }

    println!("\nPer model event: a 16-byte text delta (least CPU time of {ROUNDS} rounds)");
    for (what, bytes, us) in event_rows {
        println!("  {what:<46} {bytes:>5} B {us:>8.3} µs");
    }
    let mut tape = File::create(dir.join("events")).unwrap();
    let batch: Vec<u8> = line
        .iter()
        .copied()
        .chain([b'\n'])
        .cycle()
        .take((line.len() + 1) * 64)
        .collect();
    println!(
        "  {:<46} {:>5} B {:>8.3} µs",
        "write(2) of 64 lines at once, per line",
        line.len() + 1,
        best(20_000, |k| {
            for _ in 0..k {
                tape.write_all(&batch).unwrap();
            }
            tape.set_len(0).unwrap();
            use std::io::Seek;
            tape.seek(std::io::SeekFrom::Start(0)).unwrap();
        }) * 1e6
            / 64.0
    );

    println!("\nPer message (least CPU time of {ROUNDS} rounds)");
    let iters = 200_000;
    let null = File::options().write(true).open("/dev/null").unwrap();
    let per = |what: &str, s: f64| println!("  {what:<52} {:>8.2} µs", s * 1e6);
    per(
        "a system call (write of 1 byte to /dev/null)",
        best(iters, |k| {
            let mut n = &null;
            for _ in 0..k {
                n.write_all(b"x").unwrap();
            }
        }),
    );
    let mut tape = File::create(dir.join("small")).unwrap();
    per(
        "write(2) of 64 bytes to a file",
        best(iters, |k| {
            for _ in 0..k {
                tape.write_all(&[b'x'; 64]).unwrap();
            }
            tape.set_len(0).unwrap();
        }),
    );
    let mut small = TapeFile::new(tape_file(&dir.join("small-sink")), 0);
    let mut at = 0u64;
    per(
        "the tape's write of 64 bytes (tape/sink.rs)",
        best(iters, |k| {
            for _ in 0..k {
                small
                    .write_at_end(at, &mut [std::io::IoSlice::new(&[b'x'; 64])])
                    .unwrap();
                at += 64;
            }
            small.cut(0).unwrap();
            at = 0;
        }),
    );
    drop(small);
    let mut mapped = MappedTape::create(&dir.join("small-mapped"));
    per(
        "copy of 64 bytes into a mapped file (1 MiB windows)",
        best(iters, |k| {
            for _ in 0..k {
                mapped.append(&[b'x'; 64]);
            }
            mapped.restart_if_over(64 << 20);
        }),
    );
    drop(mapped);
    let m = std::sync::Mutex::new(0u64);
    per(
        "an uncontended mutex lock and unlock",
        best(iters * 10, |k| {
            for _ in 0..k {
                *m.lock().unwrap() += 1;
            }
        }),
    );
    // A message handed to a thread blocked in read(2) and its answer read back: two wake-ups
    // and two context switches on the same CPU when pinned — what every proxy hop costs.
    let (mut a_r, mut a_w) = pipe();
    let (mut b_r, mut b_w) = pipe();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 1];
        while a_r.read(&mut buf).unwrap_or(0) == 1 {
            if buf[0] == b'q' {
                break;
            }
            b_w.write_all(&buf).unwrap();
        }
    });
    let ping_iters = 20_000;
    let rtt = best(ping_iters, |k| {
        let mut buf = [0u8; 1];
        for _ in 0..k {
            a_w.write_all(b"p").unwrap();
            b_r.read_exact(&mut buf).unwrap();
        }
    });
    a_w.write_all(b"q").unwrap();
    echo.join().unwrap();
    per("a round trip to another thread over two pipes", rtt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file opened as the tape writer opens one (read and write: the sink maps it).
fn tape_file(path: &std::path::Path) -> File {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

/// A file written through a shared mapping, a window at a time: [`MappedTape::append`] is a
/// `memcpy`; each new window costs an `ftruncate`, an `mmap` and an `madvise(POPULATE_WRITE)`
/// (the pages and their blocks are taken then, so that a full disk would be an error there,
/// not a SIGBUS later), and the full window's `munmap`. Measured as the alternative to
/// `write(2)` that docs/performance.md weighed in session 30 (faulting each window in costs more than
/// the system calls it saves); the tape's own map is padded by `write(2)` instead (tape/sink.rs).
struct MappedTape {
    file: File,
    /// The window mapped now, and where in the file it starts.
    map: *mut u8,
    map_at: usize,
    /// Bytes written so far.
    len: usize,
}

const WINDOW: usize = 1 << 20;

impl MappedTape {
    fn create(path: &std::path::Path) -> MappedTape {
        let file = tape_file(path);
        let mut t = MappedTape {
            file,
            map: std::ptr::null_mut(),
            map_at: 0,
            len: 0,
        };
        t.map_window(0);
        t
    }

    fn map_window(&mut self, at: usize) {
        use std::os::fd::AsRawFd;
        self.unmap();
        self.file.set_len((at + WINDOW) as u64).unwrap();
        // SAFETY: a fresh shared mapping of WINDOW bytes of our own file, which is that long.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WINDOW,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                at as libc::off_t,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        // SAFETY: the range is the mapping just made. 23 is MADV_POPULATE_WRITE (Linux 5.14);
        // an older kernel refuses it, and the copies then fault the pages in one by one.
        unsafe { libc::madvise(p, WINDOW, 23) };
        self.map = p.cast();
        self.map_at = at;
    }

    fn unmap(&mut self) {
        if !self.map.is_null() {
            // SAFETY: `map` is a live mapping of WINDOW bytes made by `map_window`.
            unsafe { libc::munmap(self.map.cast(), WINDOW) };
            self.map = std::ptr::null_mut();
        }
    }

    fn append(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = self.map_at + WINDOW - self.len;
            if room == 0 {
                self.map_window(self.len);
                continue;
            }
            let n = room.min(bytes.len());
            // SAFETY: `len - map_at + n` ≤ WINDOW: the copy stays inside the mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.map.add(self.len - self.map_at),
                    n,
                )
            };
            self.len += n;
            bytes = &bytes[n..];
        }
    }

    fn restart_if_over(&mut self, max: usize) {
        if self.len > max {
            self.unmap();
            self.file.set_len(0).unwrap();
            self.len = 0;
            self.map_window(0);
        }
    }
}

impl Drop for MappedTape {
    fn drop(&mut self) {
        self.unmap();
        let _ = self.file.set_len(self.len as u64);
    }
}

fn size_name(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} B", n)
    }
}
