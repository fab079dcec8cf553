//! Positional vectored system calls carried to completion: retried when interrupted, resumed
//! after a short count. A leaf of `io/`: the engines, the zero window and the device code
//! use it, and it uses nothing of theirs.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;

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
