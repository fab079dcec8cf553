//! Result codes, the per-thread last error message, and the guard that keeps panics and
//! bad arguments from crossing the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use upcache::ErrorKind;

/// Success.
pub const UPCACHE_OK: i32 = 0;
/// A bad argument: a null handle or one of another kind, a null buffer, a name that is not
/// UTF-8, an offset or length out of range.
pub const UPCACHE_EINVAL: i32 = -1;
/// A configuration value is out of range or inconsistent.
pub const UPCACHE_ECONFIG: i32 = -2;
/// A file name is empty, too long, contains `/` or NUL, or is `.` or `..`.
pub const UPCACHE_ENAME: i32 = -3;
/// No such file.
pub const UPCACHE_ENOENT: i32 = -4;
/// The file, or an array in that directory, already exists.
pub const UPCACHE_EEXIST: i32 = -5;
/// The directory is not an upcache array, or its catalog is damaged.
pub const UPCACHE_ENOTARRAY: i32 = -6;
/// The array's stored layout differs from the configuration.
pub const UPCACHE_ELAYOUT: i32 = -7;
/// The file system refused something upcache needs (such as O_DIRECT).
pub const UPCACHE_EUNSUPPORTED: i32 = -8;
/// A device read, write or sync failed; written data stays cached, dirty.
pub const UPCACHE_EIO: i32 = -9;
/// A device is full; written data stays cached, dirty.
pub const UPCACHE_ENOSPC: i32 = -10;
/// Every frame is pinned or under I/O.
pub const UPCACHE_EFULL: i32 = -11;
/// The array is open elsewhere, or a cache still has open files.
pub const UPCACHE_EBUSY: i32 = -12;
/// An internal error: a panic, caught at the boundary, or a background thread's, reported by a sync.
pub const UPCACHE_EPANIC: i32 = -13;
/// Any other failure; see `upcache_last_error`.
pub const UPCACHE_EOTHER: i32 = -14;
/// A write or length at or past the largest file the file system allows (EFBIG).
pub const UPCACHE_EFBIG: i32 = -15;
/// Not permitted for the caller (another user's process, or a file it may not open).
pub const UPCACHE_EACCES: i32 = -16;

/// A failed call: its code and what to tell `upcache_last_error`.
pub(crate) struct Fail {
    pub code: i32,
    pub msg: String,
}

impl Fail {
    pub(crate) fn invalid(msg: impl Into<String>) -> Fail {
        Fail { code: UPCACHE_EINVAL, msg: msg.into() }
    }
}

impl From<upcache::Error> for Fail {
    fn from(e: upcache::Error) -> Fail {
        let code = match e.kind() {
            ErrorKind::InvalidConfig => UPCACHE_ECONFIG,
            ErrorKind::InvalidName => UPCACHE_ENAME,
            ErrorKind::InvalidInput => UPCACHE_EINVAL,
            ErrorKind::NotFound => UPCACHE_ENOENT,
            ErrorKind::AlreadyExists => UPCACHE_EEXIST,
            ErrorKind::NotAnArray => UPCACHE_ENOTARRAY,
            ErrorKind::LayoutMismatch => UPCACHE_ELAYOUT,
            ErrorKind::Unsupported => UPCACHE_EUNSUPPORTED,
            ErrorKind::Io => UPCACHE_EIO,
            ErrorKind::NoSpace => UPCACHE_ENOSPC,
            ErrorKind::CacheFull => UPCACHE_EFULL,
            ErrorKind::Busy => UPCACHE_EBUSY,
            ErrorKind::FileTooLarge => UPCACHE_EFBIG,
            ErrorKind::Internal => UPCACHE_EPANIC,
            ErrorKind::PermissionDenied => UPCACHE_EACCES,
            _ => UPCACHE_EOTHER,
        };
        Fail { code, msg: e.to_string() }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The tag of the handle at `p` (every handle kind is `repr(C)` with a `u64` tag first), or
/// None for NULL.
///
/// # Safety
/// `p` is null or points to a handle of one of the kinds.
pub(crate) unsafe fn tag_of(p: *const u64) -> Option<u64> {
    // SAFETY: the caller's contract; only the tag word is read.
    (!p.is_null()).then(|| unsafe { p.read() })
}

fn set_last_error(msg: &str) {
    // A message with a NUL inside is cut there rather than lost.
    let msg = msg.split('\0').next().unwrap_or_default();
    let c = CString::new(msg).unwrap_or_default();
    // During thread teardown (a C TLS destructor calling us) there is nowhere to keep it.
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning a failure or a panic into a code (and the last error message).
pub(crate) fn guard<T>(fail: impl Fn(i32) -> T, f: impl FnOnce() -> Result<T, Fail>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            fail(e.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last_error(&format!("internal error (panic): {what}"));
            fail(UPCACHE_EPANIC)
        }
    }
}

/// [`guard`] for calls that return a status code.
pub(crate) fn status(f: impl FnOnce() -> Result<(), Fail>) -> i32 {
    guard(|code| code, || f().map(|()| UPCACHE_OK))
}

/// The calling thread's last error message (empty if none yet). The string stays valid until
/// the thread's next failing upcache call.
#[no_mangle]
pub extern "C" fn upcache_last_error() -> *const c_char {
    LAST_ERROR.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// A fixed description of a result code.
#[no_mangle]
pub extern "C" fn upcache_strerror(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        UPCACHE_OK => b"success\0",
        UPCACHE_EINVAL => b"invalid argument\0",
        UPCACHE_ECONFIG => b"invalid configuration\0",
        UPCACHE_ENAME => b"invalid file name\0",
        UPCACHE_ENOENT => b"no such file\0",
        UPCACHE_EEXIST => b"already exists\0",
        UPCACHE_ENOTARRAY => b"not an upcache array\0",
        UPCACHE_ELAYOUT => b"array layout mismatch\0",
        UPCACHE_EUNSUPPORTED => b"unsupported by the file system\0",
        UPCACHE_EIO => b"I/O error\0",
        UPCACHE_ENOSPC => b"no space left on device\0",
        UPCACHE_EFULL => b"cache full: every frame pinned or under I/O\0",
        UPCACHE_EBUSY => b"busy\0",
        UPCACHE_EPANIC => b"internal error\0",
        UPCACHE_EFBIG => b"file too large for its file system\0",
        UPCACHE_EACCES => b"permission denied\0",
        _ => b"unknown error\0",
    };
    s.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: `upcache_last_error` returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(upcache_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_a_code_and_a_message_not_an_unwind() {
        let code = status(|| panic!("boom at the boundary"));
        assert_eq!(code, UPCACHE_EPANIC);
        assert!(last().contains("boom at the boundary"), "{}", last());
        let n: i64 = guard(i64::from, || -> Result<i64, Fail> { panic!("{}", String::from("owned")) });
        assert_eq!(n, i64::from(UPCACHE_EPANIC));
        assert!(last().contains("owned"));
    }

    #[test]
    fn every_error_kind_has_a_code_and_every_code_a_text() {
        let e = upcache::Error::new(ErrorKind::NoSpace, "device full");
        let f = Fail::from(e);
        assert_eq!(f.code, UPCACHE_ENOSPC);
        for code in [0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16, -99, 7] {
            // SAFETY: `upcache_strerror` returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(upcache_strerror(code)) };
            assert!(!s.to_bytes().is_empty());
        }
        // A message with a NUL inside is cut there, not dropped.
        set_last_error("before\0after");
        assert_eq!(last(), "before");
    }
}
