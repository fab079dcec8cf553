//! The process's file size limit (RLIMIT_FSIZE), which the kernel applies to every write and
//! to every truncate that grows a file: past it, SIGXFSZ and EFBIG; across it, a short write.
//! The shim must apply it at the call, since the cache writes the OS file later. It is read
//! once and again after each change the process makes itself (`setrlimit`, `prlimit`, both
//! interposed); a change made from another process (`prlimit -p`) is not seen.

use crate::real;
use libc::{c_int, pid_t, rlimit, rlimit64};
use std::sync::atomic::{AtomicU64, Ordering};

/// `LIMIT` before it is read.
const UNREAD: u64 = u64::MAX - 1;
/// The soft limit in bytes; u64::MAX for none.
static LIMIT: AtomicU64 = AtomicU64::new(UNREAD);

/// The limit, if there is one.
pub(crate) fn size_limit() -> Option<u64> {
    // Relaxed: a value of its own; a change races the program's own writes either way.
    let mut limit = LIMIT.load(Ordering::Relaxed);
    if limit == UNREAD {
        let mut lim = rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `lim` is writable rlimit storage.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } == 0;
        limit =
            if got && lim.rlim_cur != libc::RLIM_INFINITY { lim.rlim_cur.min(UNREAD - 1) } else { u64::MAX };
        LIMIT.store(limit, Ordering::Relaxed); // Relaxed: as above
    }
    (limit != u64::MAX).then_some(limit)
}

/// SIGXFSZ (raised as the thread leaves the shim, so that a handler of the program's never
/// runs with the shim's locks held) and the errno to fail with, EFBIG.
pub(crate) fn past_size_limit() -> i32 {
    crate::guard::raise_on_leaving(libc::SIGXFSZ);
    libc::EFBIG
}

fn changed(resource: u32, result: c_int) -> c_int {
    if result == 0 && resource == libc::RLIMIT_FSIZE {
        LIMIT.store(UNREAD, Ordering::Relaxed); // Relaxed: as in `size_limit`
    }
    result
}

fn is_self(pid: pid_t) -> bool {
    // SAFETY: no arguments.
    pid == 0 || pid == unsafe { libc::getpid() }
}

// Every function below is called by C with what its prototype says: its unsafe blocks only
// pass the arguments on.

#[no_mangle]
pub unsafe extern "C" fn setrlimit(resource: libc::__rlimit_resource_t, lim: *const rlimit) -> c_int {
    // SAFETY: `lim` is the caller's rlimit, passed as setrlimit(2) takes it.
    changed(resource, unsafe { real::setrlimit()(resource, lim) })
}

#[no_mangle]
pub unsafe extern "C" fn setrlimit64(resource: libc::__rlimit_resource_t, lim: *const rlimit64) -> c_int {
    // SAFETY: as in `setrlimit`.
    changed(resource, unsafe { real::setrlimit64()(resource, lim) })
}

/// prlimit and its 64-bit twin: a change of this process's own limit counts.
macro_rules! prlimits {
    ($($name:ident($lim:ty);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: pid_t,
            resource: libc::__rlimit_resource_t,
            new: *const $lim,
            old: *mut $lim,
        ) -> c_int {
            // SAFETY: the caller's rlimit pointers (each null or valid), passed as prlimit(2)
            // takes them.
            let r = unsafe { real::$name()(pid, resource, new, old) };
            if new.is_null() || !is_self(pid) {
                return r;
            }
            changed(resource, r)
        }
    )*};
}

prlimits! {
    prlimit(rlimit);
    prlimit64(rlimit64);
}
