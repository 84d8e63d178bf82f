//! Reading message bodies back from a tape. Play serves answers in about the order they were
//! recorded, and a tape holds them in that order, so the bodies it reads lie one after the
//! other: one `pread` of a chunk then serves a few hundred small answers from memory, where a
//! `pread` per answer was the largest cost of serving one (about 40 % of play's CPU time per
//! call on the bench's 1 KiB answers). Memory stays bounded: one chunk, whatever the tape's
//! size. A read far from the chunk (a client asking out of order) or of a big body goes to the
//! file directly and leaves the chunk as it is. No `mmap`: a tape truncated under a mapping
//! would end play with SIGBUS.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// How much one refill reads.
const CHUNK: usize = 256 * 1024;

/// The open tape and the chunk read last.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    file: File,
    chunk: Mutex<Chunk>,
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
}

impl ReadAhead {
    pub(crate) fn new(file: File) -> ReadAhead {
        ReadAhead {
            file,
            chunk: Mutex::new(Chunk::default()),
        }
    }

    /// Exactly `len` bytes at `offset` (an error if the file is shorter).
    pub(crate) fn read_at(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        if len as usize > CHUNK / 2 {
            // Not through `with_at`, which would copy the buffer it reads.
            return read_exact_new(&self.file, len as usize, offset);
        }
        self.with_at(offset, len, <[u8]>::to_vec)
    }

    /// `f` of exactly the `len` bytes at `offset` (an error if the file is shorter), lent from
    /// the chunk when they are in it: no copy of them is made. The chunk stays locked while `f`
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
        // Big bodies and reads far from the chunk go to the file (see the module comment).
        if len_u <= CHUNK / 2 {
            let mut c = self.chunk.lock().unwrap_or_else(|e| e.into_inner());
            if offset >= c.start && end <= c.end() {
                let at = (offset - c.start) as usize;
                return Ok(f(&c.bytes[at..at + len_u]));
            }
            // Next in line: at the chunk's end or within a chunk past it (the first read too).
            let next =
                c.bytes.is_empty() || (offset >= c.start && offset <= c.end() + CHUNK as u64);
            if next {
                c.start = offset;
                c.bytes.resize(CHUNK, 0);
                let n = fill(&self.file, &mut c.bytes, offset)?;
                c.bytes.truncate(n);
                if n >= len_u {
                    return Ok(f(&c.bytes[..len_u]));
                }
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(f(&read_exact_new(&self.file, len_u, offset)?))
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
}
