//! Results in the C convention: -1 and `errno`.

use upcache::{Error, ErrorKind};

/// This thread's `errno`.
pub(crate) fn get() -> i32 {
    // SAFETY: as in `set`.
    unsafe { *libc::__errno_location() }
}

pub(crate) fn set(code: i32) {
    // SAFETY: glibc's per-thread errno, always valid on the calling thread.
    unsafe { *libc::__errno_location() = code };
}

/// The errno for a library error: the OS's own code if it came from a system call.
pub(crate) fn of(e: &Error) -> i32 {
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    match e.kind() {
        ErrorKind::InvalidInput | ErrorKind::InvalidConfig | ErrorKind::InvalidName => libc::EINVAL,
        // The file was closed under the call (its last descriptor closed by another thread).
        ErrorKind::NotFound => libc::EBADF,
        ErrorKind::AlreadyExists => libc::EEXIST,
        ErrorKind::NoSpace => libc::ENOSPC,
        ErrorKind::CacheFull => libc::ENOMEM,
        ErrorKind::Unsupported => libc::EOPNOTSUPP,
        ErrorKind::Busy => libc::EBUSY,
        ErrorKind::FileTooLarge => libc::EFBIG,
        ErrorKind::Internal => libc::EIO,
        ErrorKind::PermissionDenied => libc::EACCES,
        _ => libc::EIO,
    }
}

/// -1 with `errno` set to `code`, for any of the C integer result types.
pub(crate) fn fail<T: From<i8>>(code: i32) -> T {
    set(code);
    T::from(-1)
}

/// -1 with `errno` set for `e`.
pub(crate) fn fail_with<T: From<i8>>(e: &Error) -> T {
    fail(of(e))
}

/// The C library's text for `code` ("No space left on device").
pub(crate) fn describe(code: i32) -> String {
    std::io::Error::from_raw_os_error(code).to_string()
}
