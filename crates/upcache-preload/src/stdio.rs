//! Which descriptors libc's stdio streams wrap. A stream writes and reads with libc's internal
//! calls, which the shim does not see: a cached file must not be reached through one, or a
//! write-back would overwrite what the stream wrote (`echo hello > f` in a shell is
//! `open`, `dup2` onto 1, then stdout's writes). Descriptors 0, 1 and 2 count as wrapped
//! whether or not their stream was used yet: stdin, stdout and stderr always exist, and other
//! parts of libc (perror, assert, the dynamic loader) write to them directly.

use libc::{c_int, c_void, FILE};

// glibc's iteration over its list of open streams (exported since 2.2.5, for libstdc++).
extern "C" {
    fn _IO_list_lock();
    fn _IO_list_unlock();
    fn _IO_iter_begin() -> *mut c_void;
    fn _IO_iter_end() -> *mut c_void;
    fn _IO_iter_next(iter: *mut c_void) -> *mut c_void;
    fn _IO_iter_file(iter: *mut c_void) -> *mut FILE;
}

/// Whether a stdio stream reads or writes `fd` (or it is 0, 1 or 2).
pub(crate) fn wraps(fd: c_int) -> bool {
    if (0..=2).contains(&fd) {
        return true;
    }
    let mut found = false;
    // SAFETY: the list lock is recursive and held across the walk, so no stream is freed
    // under it; each `_IO_iter_file` is a live FILE, whose descriptor `fileno` reads.
    unsafe {
        _IO_list_lock();
        let (mut it, end) = (_IO_iter_begin(), _IO_iter_end());
        while it != end && !found {
            found = libc::fileno(_IO_iter_file(it)) == fd;
            it = _IO_iter_next(it);
        }
        _IO_list_unlock();
    }
    found
}
