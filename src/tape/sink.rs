//! The tape file as the writer appends to it: through a shared map of the file's end where that
//! is safe, else with `write(2)`.
//!
//! Each message is on the tape before it is forwarded, so the tape's write is on the path of
//! every call. A `write(2)` of a tape line costs 1.1–2 µs on this machine's ext4 (300 B to
//! 1.3 KB); copying the line into a shared map of the file costs a tenth to a quarter of that
//! (docs/performance.md, round eleven), and survives a crash of mcptape the same way: the bytes
//! are in the page cache once copied, as they are once `write(2)` returns.
//!
//! A copy into a map cannot report an error, so the space is made first: the file is padded
//! ahead of the last line with newlines, 64 KiB at a time, by `write(2)` (which allocates the
//! pages and reserves the disk space, so a full disk or a file-size limit is an error from that
//! write, never a SIGBUS), and lines are copied over the padding, front to back. Only file systems that never
//! need new space to write into a page already written are mapped: ext2/3/4, XFS and tmpfs.
//! A copy-on-write one (btrfs, bcachefs, ZFS) may, and anything else (overlayfs, NFS, FUSE) is
//! not vouched for: there every write is a `write(2)`, as it was. So it is with `MCPTAPE_NO_MAP`
//! set, for whoever follows a tape with `tail -f` while it records.
//!
//! What can still end a recorder with SIGBUS, where `write(2)` would have returned an error: the
//! storage failing under a live tape (a page that must be read back hits an I/O error, the file
//! system is made read-only) and another program cutting the tape or sharing its blocks
//! (`cp --reflink`) while it is written. mcptape itself does neither: a second recording of a
//! tape being recorded is refused (`place.rs`), an append waits for no writer (`append.rs`).
//!
//! The padding is cut off when the tape is closed or the writer dropped. A recorder killed
//! mid-session leaves up to 64 KiB of newlines after its last line: blank lines, which the tape
//! reader skips and JSON Lines tools read as whitespace. A line cut short by the kill is
//! followed by at least two of them (its own bytes not copied were padding); the reader takes
//! such a line for torn (`reader.rs`).

use std::fs::File;
use std::io::{self, Seek, Write};

/// Set (to anything but empty), every write is a `write(2)`: the file ends on its last line
/// while it records, as `tail -f` needs.
pub const NO_MAP: &str = "MCPTAPE_NO_MAP";

/// Padding is written this far ahead at a time.
const PAD: usize = 64 * 1024;

/// The mapped window of the file: remapped when a write does not fit in it.
const WINDOW: usize = 1024 * 1024;

/// A write larger than this (a big message's line) goes through `write(2)`, after the padding
/// is cut off: it would need a window of its own. A client's burst of calls, written in one
/// piece (64 pipelined 1 KiB calls are 77 KB), stays under it: cutting the padding for it and
/// writing it again after costs more than the `write(2)` saved.
const MAPPED_MAX: usize = WINDOW / 4;

/// The tape file, written at its end. Public for `benches/limits.rs` only (hidden from the
/// docs, not an API): the writer is the one user.
pub struct TapeFile {
    file: File,
    /// The file's size. What lies between the end of the data and here is padding.
    size: u64,
    /// The file's position, where `write(2)` writes (mapped writes leave it behind).
    pos: u64,
    /// The mapped part of the file, from `window.0`.
    window: Option<(u64, memmap2::MmapMut)>,
    /// Whether lines may be copied into a map (see the module's comment).
    mapped: bool,
    /// Whether the file is a regular file. Anything else (a FIFO, `/dev/null`) is only
    /// written: it cannot be cut back, and `fdatasync(2)` fails on it (`EINVAL`).
    regular: bool,
}

impl TapeFile {
    /// The file, `len` bytes long and positioned at its end. It is locked (`flock`, advisory)
    /// while the writer lasts: `play --on-miss live` does not append to a tape being recorded
    /// (`append.rs`), as cutting it under the map would kill the recorder with SIGBUS. A file
    /// someone else holds locked is not mapped.
    pub fn new(file: File, len: u64) -> TapeFile {
        // The file's own size, not the caller's word for it: a map is only ever touched below it.
        let (size, regular) = file
            .metadata()
            .map_or((len, true), |m| (m.len(), m.is_file()));
        let mapped = size == len
            && lock(&file).is_ok()
            && std::env::var_os(NO_MAP).is_none_or(|v| v.is_empty())
            && mappable(&file);
        TapeFile {
            file,
            size,
            pos: len,
            window: None,
            mapped,
            regular,
        }
    }

    /// Every write a `write(2)` from now on (a tape being appended to is cut back after every
    /// write, which would cost a new padding each time).
    pub(crate) fn unmapped(&mut self) {
        self.mapped = false;
        self.window = None;
    }

    /// Writes `parts` at `at`, the end of the data (the padding after it is overwritten). On
    /// failure, how many bytes did reach the file, with the error.
    pub fn write_at_end(
        &mut self,
        at: u64,
        parts: &mut [io::IoSlice<'_>],
    ) -> Result<(), (usize, io::Error)> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.mapped && len <= MAPPED_MAX {
            let end = at + len as u64;
            if end > self.size {
                // A padding cut short (disk full) leaves the line to `write(2)`, which fails as
                // it always did, after the whole lines that fit.
                let _ = self.pad(end);
            }
            if end <= self.size {
                if let Some(to) = self.window_for(at, len) {
                    let mut i = 0;
                    for p in parts.iter() {
                        copy_forward(&mut to[i..i + p.len()], p);
                        i += p.len();
                    }
                    return Ok(());
                }
            }
        }
        // `write(2)` at the end of the file, as the tape was always written: the padding goes
        // first, so that a write cut short ends the file on the bytes that reached it.
        if self.size > at {
            self.cut(at).map_err(|e| (0, e))?;
        }
        if self.pos != at {
            self.file
                .seek(io::SeekFrom::Start(at))
                .map_err(|e| (0, e))?;
            self.pos = at;
        }
        let result = write_all_vectored(&mut self.file, parts);
        self.pos = at + result.as_ref().map_or_else(|(n, _)| *n, |()| len) as u64;
        self.size = self.size.max(self.pos);
        result
    }

    /// Cuts the file to `len` bytes (its padding, a torn line, a closing line to be replaced)
    /// and positions it there.
    pub fn cut(&mut self, len: u64) -> io::Result<()> {
        if !self.regular {
            if len >= self.pos {
                return Ok(()); // nothing to take back
            }
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the tape is not a regular file (a pipe or a device): a line written part way cannot be taken back",
            ));
        }
        // Unmapped first: no page past the new end stays mapped.
        self.window = None;
        self.file.set_len(len)?;
        self.size = len;
        self.file.seek(io::SeekFrom::Start(len))?;
        self.pos = len;
        Ok(())
    }

    /// Whether the file holds padding after `len` bytes of data.
    pub(crate) fn padded_after(&self, len: u64) -> bool {
        self.size > len
    }

    /// `fdatasync(2)`. Pages written through the map are in the page cache like any other. A
    /// pipe or a device has nothing to sync (the call fails on them): what was written is gone.
    pub(crate) fn sync_data(&self) -> io::Result<()> {
        if !self.regular {
            return Ok(());
        }
        self.file.sync_data()
    }

    /// Newlines from the file's end to past `end`, a multiple of `PAD` bytes.
    #[cfg(unix)]
    fn pad(&mut self, end: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        static NEWLINES: [u8; PAD] = [b'\n'; PAD];
        let target = end.next_multiple_of(PAD as u64);
        while self.size < target {
            let n = (target - self.size).min(PAD as u64) as usize;
            match self.file.write_at(&NEWLINES[..n], self.size) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => self.size += k as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn pad(&mut self, _end: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The `len` bytes of the file from `at`, mapped; `None` (and no more mapping) when the file
    /// cannot be mapped.
    fn window_for(&mut self, at: u64, len: usize) -> Option<&mut [u8]> {
        let fits = |(from, map): &(u64, memmap2::MmapMut)| {
            at >= *from && at + len as u64 <= from + map.len() as u64
        };
        if !self.window.as_ref().is_some_and(fits) {
            self.window = None;
            // SAFETY: the map is of this writer's own tape file, which nothing else is meant to
            // cut. Only bytes below `size` are ever touched, and those are in the file: its end
            // moves back only in `cut`, which drops the map first.
            match unsafe {
                memmap2::MmapOptions::new()
                    .offset(at)
                    .len(WINDOW)
                    .map_mut(&self.file)
            } {
                Ok(map) => self.window = Some((at, map)),
                Err(_) => {
                    self.mapped = false;
                    return None;
                }
            }
        }
        let (from, map) = self.window.as_mut()?;
        let i = (at - *from) as usize;
        Some(&mut map[i..i + len])
    }
}

/// Copies `from` into `to` front to back, 16 bytes (one vector store) at a time: a recorder
/// killed mid-copy leaves a prefix of the lines and then padding, which reads as whole lines
/// and a torn last one. `memcpy` promises no order (glibc's stores a long copy's tail first),
/// and a copy's tail landing before its middle would leave newlines inside a line followed by
/// more of it: a malformed line, not a torn one.
fn copy_forward(to: &mut [u8], from: &[u8]) {
    assert_eq!(to.len(), from.len());
    let mut dst = to.chunks_exact_mut(16);
    let mut src = from.chunks_exact(16);
    for (d, s) in (&mut dst).zip(&mut src) {
        d.copy_from_slice(s);
        // Keeps the compiler from merging the chunks back into one `memcpy`.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
    for (d, s) in dst.into_remainder().iter_mut().zip(src.remainder()) {
        *d = *s;
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Takes the writer's lock on `file` (exclusive, without waiting): an error when another open
/// of the file holds it.
pub(crate) fn lock(file: &File) -> io::Result<()> {
    flock_now(file, true)
}

/// Takes a reader's share of the writer's lock on `file` (without waiting): while it is held no
/// writer takes the lock, and other readers still share it. An error when a writer holds it.
pub(crate) fn lock_shared(file: &File) -> io::Result<()> {
    flock_now(file, false)
}

/// `flock` without waiting, exclusive or shared.
#[cfg(unix)]
fn flock_now(file: &File, exclusive: bool) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let how = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: a valid descriptor; `flock` touches nothing else.
    match unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(not(unix))]
fn flock_now(_file: &File, _exclusive: bool) -> io::Result<()> {
    Ok(())
}

/// Whether `file` is a regular file on a file system where a write into a page that was
/// written before cannot fail for want of space (see the module's comment).
#[cfg(target_os = "linux")]
// `f_type` and the magic numbers differ in integer type between architectures.
#[allow(clippy::unnecessary_cast)]
fn mappable(file: &File) -> bool {
    use std::os::unix::io::AsRawFd;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    // SAFETY: `statfs` is plain data, filled in by the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a `statfs` that outlives the call.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
        return false;
    }
    let kind = fs.f_type as i64;
    [
        libc::EXT4_SUPER_MAGIC as i64,
        libc::XFS_SUPER_MAGIC as i64,
        libc::TMPFS_MAGIC as i64,
    ]
    .contains(&kind)
}

#[cfg(not(target_os = "linux"))]
fn mappable(_file: &File) -> bool {
    false
}

/// `write_all` over several buffers (std's `write_all_vectored` is not stable yet). On failure,
/// how many bytes did reach the file, with the error.
fn write_all_vectored(
    file: &mut File,
    mut parts: &mut [io::IoSlice<'_>],
) -> Result<(), (usize, io::Error)> {
    let mut written = 0;
    io::IoSlice::advance_slices(&mut parts, 0); // drop leading empty slices
    while !parts.is_empty() {
        match file.write_vectored(parts) {
            Ok(0) => return Err((written, io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                written += n;
                io::IoSlice::advance_slices(&mut parts, n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((written, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the writer asks of its file: a write of a line in up to three parts, or a cut back
    /// to an earlier end (a torn write undone, an appended tape's closing line replaced).
    #[derive(Debug, Clone)]
    enum Op {
        Write(Vec<usize>),
        CutBack(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let part = prop_oneof![8 => 0usize..2_000, 1 => 60_000usize..140_000];
        prop_oneof![
            12 => proptest::collection::vec(part, 1..=3).prop_map(Op::Write),
            1 => (0usize..100).prop_map(Op::CutBack),
        ]
    }

    fn open(dir: &std::path::Path) -> (std::path::PathBuf, File) {
        let path = dir.join("t.jsonl");
        let file = super::super::writer::open_private(&path).unwrap();
        (path, file)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Mapped or not, the file holds the data written and then only newlines; cut at the
        /// data's end, exactly the data. Mapped, small writes leave padding behind them.
        #[test]
        fn the_file_holds_the_writes_then_newlines(
            ops in proptest::collection::vec(op(), 1..40),
            mapped in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (path, file) = open(dir.path());
            let mut f = TapeFile::new(file, 0);
            if !mapped {
                f.unmapped();
            }
            let mut data: Vec<u8> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Write(sizes) => {
                        let bufs: Vec<Vec<u8>> = sizes
                            .iter()
                            .enumerate()
                            .map(|(j, &n)| vec![b'a' + ((i + j) % 26) as u8; n])
                            .collect();
                        let mut parts: Vec<io::IoSlice<'_>> =
                            bufs.iter().map(|b| io::IoSlice::new(b)).collect();
                        f.write_at_end(data.len() as u64, &mut parts).unwrap();
                        for b in &bufs {
                            data.extend_from_slice(b);
                        }
                        // An empty write (never the writer's: a line has bytes) copies
                        // nothing and pads nothing.
                        let len = bufs.iter().map(Vec::len).sum::<usize>();
                        let small = len > 0 && len <= MAPPED_MAX;
                        if f.mapped && small && data.len() % PAD != 0 {
                            prop_assert!(f.padded_after(data.len() as u64));
                        }
                    }
                    Op::CutBack(pct) => {
                        let to = data.len() * pct / 100;
                        f.cut(to as u64).unwrap();
                        data.truncate(to);
                    }
                }
            }
            let on_disk = std::fs::read(&path).unwrap();
            prop_assert!(on_disk.len() >= data.len());
            prop_assert!(on_disk[..data.len()] == data[..], "the data as written");
            prop_assert!(on_disk[data.len()..].iter().all(|&b| b == b'\n'), "then padding");
            f.cut(data.len() as u64).unwrap();
            prop_assert!(std::fs::read(&path).unwrap() == data);
        }
    }

    /// On a file system vouched for (ext4 or tmpfs for the temporary directory here), a small
    /// write goes through the map and leaves padding; elsewhere it is a `write(2)` and the file
    /// ends on it. A pipe is never mapped.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_vouched_for_file_system_is_mapped_and_others_written() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = open(dir.path());
        let vouched = mappable(&file);
        let mut f = TapeFile::new(file, 0);
        f.write_at_end(0, &mut [io::IoSlice::new(b"{}\n")]).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        if vouched {
            assert!(f.mapped && f.window.is_some());
            assert_eq!(len, PAD as u64, "padded to 64 KiB");
        } else {
            assert!(f.window.is_none());
            assert_eq!(len, 3);
        }
        let (read, _write) = std::io::pipe().unwrap();
        assert!(!mappable(&File::from(std::os::fd::OwnedFd::from(read))));
    }
}
