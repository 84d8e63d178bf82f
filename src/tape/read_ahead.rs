//! Reading message bodies back from a tape. Play serves answers in about the order they were
//! recorded, and a tape holds them in that order, so the bodies it reads lie one after the
//! other: one `pread` of a chunk then serves a few hundred small answers from memory, where a
//! `pread` per answer was the largest cost of serving one (about 40 % of play's CPU time per
//! call on the bench's 1 KiB answers). Memory stays bounded: two chunks, whatever the tape's
//! size. A read far from the chunks (a client asking out of order) or of a big body goes to the
//! file directly and leaves the chunks as they are. A second run of reads in order elsewhere in the
//! file (a miss explanation reading every recorded request from the start, while serving goes
//! on near the end) gets the second chunk once its second read follows its first: before it,
//! each miss after the first on a tape of 100,000 calls made a `pread` for each request it read
//! again. No `mmap`: a tape truncated under a mapping would end play with SIGBUS.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// How much one refill reads.
const CHUNK: usize = 256 * 1024;

/// The open tape and the chunks read last.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    file: File,
    chunks: Mutex<Chunks>,
    /// Tests: `pread`s made.
    #[cfg(test)]
    preads: std::sync::atomic::AtomicUsize,
}

/// The chunk serving reads in order, and a second one for another run of reads in order.
#[derive(Debug, Default)]
struct Chunks {
    main: Chunk,
    second: Chunk,
    /// Where the last read that went to the file ended: a read that starts just after it is
    /// the second of a run, and refills `second`.
    far_end: Option<u64>,
}

#[derive(Debug, Default)]
struct Chunk {
    /// File offset of `bytes[0]`.
    start: u64,
    bytes: Vec<u8>,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// The `len` bytes at `offset`, if the chunk holds them.
    fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let at = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        self.bytes.get(at..at.checked_add(len)?)
    }

    /// Whether a read at `offset` is next in line: at the chunk's end or within a chunk past it.
    fn next(&self, offset: u64) -> bool {
        !self.bytes.is_empty()
            && offset >= self.start
            && offset <= self.end().saturating_add(CHUNK as u64)
    }
}

impl ReadAhead {
    pub(crate) fn new(file: File) -> ReadAhead {
        ReadAhead {
            file,
            chunks: Mutex::new(Chunks::default()),
            #[cfg(test)]
            preads: Default::default(),
        }
    }

    /// Exactly `len` bytes at `offset` (an error if the file is shorter).
    pub(crate) fn read_at(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        if len as usize > CHUNK / 2 {
            // Not through `with_at`, which would copy the buffer it reads.
            #[cfg(test)]
            self.preads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return read_exact_new(&self.file, len as usize, offset);
        }
        self.with_at(offset, len, <[u8]>::to_vec)
    }

    /// `f` of exactly the `len` bytes at `offset` (an error if the file is shorter), lent from
    /// a chunk when they are in it: no copy of them is made. The chunks stay locked while `f`
    /// runs.
    pub(crate) fn with_at<T>(
        &self,
        offset: u64,
        len: u32,
        f: impl FnOnce(&[u8]) -> T,
    ) -> io::Result<T> {
        let len_u = len as usize;
        let end = offset
            .checked_add(u64::from(len))
            .ok_or_else(|| io::Error::other("offset out of range"))?;
        // Big bodies and reads far from the chunks go to the file (see the module comment).
        if len_u <= CHUNK / 2 {
            let mut guard = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
            let cs = &mut *guard;
            for c in [&cs.main, &cs.second] {
                if let Some(bytes) = c.get(offset, len_u) {
                    return Ok(f(bytes));
                }
            }
            let second_run = cs
                .far_end
                .is_some_and(|e| offset >= e && offset <= e.saturating_add(CHUNK as u64));
            let refill = if cs.main.bytes.is_empty() || cs.main.next(offset) {
                Some(&mut cs.main)
            } else if cs.second.next(offset) || second_run {
                Some(&mut cs.second)
            } else {
                None
            };
            if let Some(c) = refill {
                c.start = offset;
                c.bytes.resize(CHUNK, 0);
                let n = match self.fill(&mut c.bytes, offset) {
                    Ok(n) => n,
                    Err(e) => {
                        // The chunk holds nothing it could lend now.
                        c.bytes.clear();
                        return Err(e);
                    }
                };
                c.bytes.truncate(n);
                if n >= len_u {
                    return Ok(f(&c.bytes[..len_u]));
                }
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            cs.far_end = Some(end);
        }
        #[cfg(test)]
        self.preads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(f(&read_exact_new(&self.file, len_u, offset)?))
    }

    /// [`fill`], counted in tests.
    fn fill(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        #[cfg(test)]
        self.preads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fill(&self.file, buf, offset)
    }
}

/// Exactly `len` bytes at `offset`, read into a new buffer without zeroing it first: for an
/// 8 MiB answer, filling the buffer with zeros cost play as much as validating its UTF-8.
fn read_exact_new(file: &File, len: usize, offset: u64) -> io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut buf = Vec::<u8>::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        let at = libc::off_t::try_from(at).map_err(|_| io::Error::other("offset out of range"))?;
        let want = len - buf.len();
        let spare = &mut buf.spare_capacity_mut()[..want];
        // SAFETY: `pread` writes at most `spare.len()` bytes into `spare`, memory the vector
        // owns; `set_len` below counts only the bytes it says it wrote.
        let n =
            unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match n {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            // SAFETY: the first `n` bytes of the spare capacity were written by `pread`.
            n => unsafe { buf.set_len(buf.len() + n as usize) },
        }
    }
    Ok(buf)
}

/// Reads from `offset` until `buf` is full or the file ends; how many bytes were read.
fn fill(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Every read, in order, out of order, across the chunk's end, big, and past the file's
    /// end, gives exactly the file's bytes (or an error past the end).
    #[test]
    fn reads_in_any_order_give_the_files_bytes() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..(3 * CHUNK + 777))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        f.write_all(&data).unwrap();
        let r = ReadAhead::new(f);
        let expect = |off: usize, len: usize| data[off..off + len].to_vec();
        let mut reads: Vec<(usize, usize)> = (0..1300).map(|i| (i * 600, 500)).collect();
        reads.extend([
            (10, 5),
            (CHUNK - 3, 10),
            (2 * CHUNK + 100, CHUNK),
            (5, 1),
            (3 * CHUNK, 777),
            (0, 3 * CHUNK + 777),
        ]);
        for (off, len) in reads {
            assert_eq!(
                r.read_at(off as u64, len as u32).unwrap(),
                expect(off, len),
                "at {off}+{len}"
            );
            // Lent, not copied: the same bytes.
            assert!(r
                .with_at(off as u64, len as u32, |b| b == &expect(off, len)[..])
                .unwrap());
        }
        assert!(r.read_at(3 * CHUNK as u64 + 700, 100).is_err());
        assert!(r.read_at(u64::MAX - 1, 10).is_err());
    }

    /// Serving reads in order near the end while another run of reads in order goes through
    /// the file from its start (a miss explanation reading every request): each run reads a
    /// chunk at a time, where the second run used to make a `pread` a read.
    #[test]
    fn a_second_run_of_reads_in_order_gets_a_chunk_of_its_own() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..(8 * CHUNK)).map(|i| (i * 13 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let r = ReadAhead::new(f);
        let serving = 6 * CHUNK;
        let mut scanned = 0;
        let mut served = serving;
        // The scan: 1000-byte requests 2000 bytes apart, over 4 chunks; serving goes on.
        while scanned + 1000 < 4 * CHUNK {
            for (off, len) in [(served, 900), (scanned, 1000)] {
                assert!(r
                    .with_at(off as u64, len as u32, |b| b == &data[off..off + len])
                    .unwrap());
            }
            served += 1000;
            scanned += 2000;
        }
        let reads = r.preads.load(std::sync::atomic::Ordering::Relaxed);
        // Serving spans about 2 chunks, the scan 4: a handful of reads, not one per read
        // (about 520 of each kind were made).
        assert!(reads <= 10, "{reads} preads");
        // A read out of order elsewhere still goes to the file alone, and both runs go on.
        let before = r.preads.load(std::sync::atomic::Ordering::Relaxed);
        // (Before both chunks: the scan's first read went to the file and left nothing.)
        assert_eq!(r.read_at(500, 10).unwrap(), &data[500..][..10]);
        let (last_served, last_scanned) = (served - 1000, scanned - 2000);
        assert_eq!(
            r.read_at(last_served as u64, 10).unwrap(),
            &data[last_served..][..10]
        );
        assert_eq!(
            r.read_at(last_scanned as u64, 10).unwrap(),
            &data[last_scanned..][..10]
        );
        assert_eq!(
            r.preads.load(std::sync::atomic::Ordering::Relaxed) - before,
            1
        );
    }
}
