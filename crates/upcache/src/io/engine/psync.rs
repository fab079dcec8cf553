//! The synchronous engine: `preadv` / `pwritev` / `fdatasync` from the calling thread. Its
//! loops also finish what io_uring left short.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, RawFd};

use super::IoEngine;
use crate::io::device::BackingFile;

/// Positional vectored syscalls, issued by whichever thread needs the I/O.
#[derive(Debug, Default)]
pub struct PsyncEngine;

/// Most iovecs passed to one syscall (Linux's UIO_MAXIOV).
const MAX_IOV: usize = 1024;

/// Runs a positional system call until it is not interrupted; its byte count or error.
fn retrying(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads into `bufs` from `offset` of `fd` until they are full or the file ends; returns the
/// bytes read.
pub(crate) fn preadv_all(fd: RawFd, offset: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
    preadv_on(fd, offset, bufs, 0)
}

/// Finishes a read of `offset` that has moved `done` bytes already (`bufs` are the rest):
/// returns the bytes read in all.
pub(crate) fn preadv_on(
    fd: RawFd,
    offset: u64,
    mut bufs: &mut [IoSliceMut<'_>],
    mut done: usize,
) -> io::Result<usize> {
    let want: usize = done + bufs.iter().map(|b| b.len()).sum::<usize>();
    while done < want && !bufs.is_empty() {
        let cnt = bufs.len().min(MAX_IOV) as libc::c_int;
        let at = (offset + done as u64) as libc::off_t;
        // SAFETY: IoSliceMut is ABI-compatible with iovec; the slices are valid for writes of
        // their lengths for the duration of the call, and the fd is open.
        let n = match retrying(|| unsafe { libc::preadv(fd, bufs.as_ptr() as *const libc::iovec, cnt, at) }) {
            Ok(0) => break, // end of file
            Ok(n) => n,
            // A short read ended at the end of the file, which then grew before this read (a
            // write-back past it): with O_DIRECT, reading on from that unaligned end is
            // EINVAL. The bytes past the end as it was read as zeros, which they were.
            Err(e) if done > 0 && e.raw_os_error() == Some(libc::EINVAL) => break,
            Err(e) => return Err(e),
        };
        done += n;
        IoSliceMut::advance_slices(&mut bufs, n);
    }
    Ok(done)
}

/// Writes all of `bufs` at `offset` of `fd`.
pub(crate) fn pwritev_all(fd: RawFd, offset: u64, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut done = 0u64;
    while !bufs.is_empty() {
        let cnt = bufs.len().min(MAX_IOV) as libc::c_int;
        let at = (offset + done) as libc::off_t;
        // SAFETY: IoSlice is ABI-compatible with iovec; the slices are valid for reads of
        // their lengths for the duration of the call, and the fd is open.
        let n = retrying(|| unsafe { libc::pwritev(fd, bufs.as_ptr() as *const libc::iovec, cnt, at) })?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        done += n as u64;
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

impl IoEngine for PsyncEngine {
    fn name(&self) -> &'static str {
        "psync"
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        preadv_all(file.as_raw_fd(), offset, bufs)
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        pwritev_all(file.as_raw_fd(), offset, &mut bufs.to_vec())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    /// A page-aligned page, as O_DIRECT wants.
    struct Page(*mut u8);

    impl Page {
        const LAYOUT: Layout = match Layout::from_size_align(4096, 4096) {
            Ok(l) => l,
            Err(_) => panic!("a valid layout"),
        };

        fn new() -> Page {
            // SAFETY: a non-zero size.
            Page(unsafe { alloc_zeroed(Self::LAYOUT) })
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: 4096 bytes allocated by `new`, borrowed through `&mut self`.
            unsafe { std::slice::from_raw_parts_mut(self.0, 4096) }
        }
    }

    impl Drop for Page {
        fn drop(&mut self) {
            // SAFETY: allocated by `new` with this layout.
            unsafe { dealloc(self.0, Self::LAYOUT) }
        }
    }

    /// A read that came back short at an unaligned end of file, which has grown since: with
    /// O_DIRECT the rest cannot be read from that offset (EINVAL), and the read ends there.
    #[test]
    fn a_short_direct_read_ends_where_it_stopped_if_the_file_grew() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("grown");
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let direct = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path);
        let Ok(file) = direct else {
            eprintln!("no O_DIRECT in {}: nothing to check", tmp.path().display());
            return;
        };
        let mut page = Page::new();
        let (_, rest) = page.bytes().split_at_mut(904);
        assert_eq!(preadv_on(file.as_raw_fd(), 4096, &mut [IoSliceMut::new(rest)], 904).unwrap(), 904);
        // From an aligned offset the same call reads on.
        let mut page = Page::new();
        assert_eq!(preadv_on(file.as_raw_fd(), 4096, &mut [IoSliceMut::new(page.bytes())], 0).unwrap(), 4096);
        assert!(page.bytes().iter().all(|&b| b == 7));
    }
}
