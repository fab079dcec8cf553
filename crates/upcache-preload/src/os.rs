//! libc's own answers about a file, past the shim (its `fstat64` and `stat64` report cached
//! sizes): what the shim itself needs to know of the OS file.

use crate::real;
use libc::{c_char, c_int};

/// `fstat64` of `fd`, through libc.
pub(crate) fn fd_stat(fd: c_int) -> Option<libc::stat64> {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `st` is writable stat64 storage; libc fills it on success, and only then is it
    // read.
    (unsafe { real::fstat64()(fd, st.as_mut_ptr()) } == 0).then(|| unsafe { st.assume_init() })
}

/// `stat64` of `path`, through libc.
pub(crate) fn path_stat(path: *const c_char) -> Option<libc::stat64> {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `path` is the caller's C string; `st` is writable stat64 storage, read only once
    // libc filled it.
    (unsafe { real::stat64()(path, st.as_mut_ptr()) } == 0).then(|| unsafe { st.assume_init() })
}

/// `/proc/self/fd/N`: the file open on `fd`, to open again or to read the path of.
pub(crate) fn fd_path(fd: c_int) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{fd}"))
}
