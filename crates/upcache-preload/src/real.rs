//! libc's own functions, found past the shim with `dlsym(RTLD_NEXT)` on first use.

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t, FILE};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` (NUL-terminated) after this library, cached in `slot`.
/// Aborts if there is none: a program calling it was linked against a libc that has it.
fn resolve(name: &'static [u8], slot: &AtomicUsize) -> usize {
    match find(name, slot) {
        0 => {
            let msg = b"upcache-preload: a libc symbol is missing; aborting\n";
            // SAFETY: a valid buffer of that length.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            std::process::abort();
        }
        found => found,
    }
}

/// As `resolve`, 0 if there is none.
fn find(name: &'static [u8], slot: &AtomicUsize) -> usize {
    // Relaxed: the address is the same whichever thread resolves it.
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is NUL-terminated (the macro adds the NUL); dlsym has no other demands.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(found, Ordering::Relaxed); // Relaxed: as above
    found
}

macro_rules! real {
    ($($name:ident: $ty:ty;)*) => {
        $(
            #[allow(non_snake_case)]
            pub(crate) fn $name() -> $ty {
                let addr = resolve(concat!(stringify!($name), "\0").as_bytes(), &slots::$name);
                // SAFETY: `addr` is libc's definition of this name, whose C type is `$ty`.
                unsafe { std::mem::transmute::<usize, $ty>(addr) }
            }
        )*

        #[allow(non_upper_case_globals)]
        mod slots {
            use std::sync::atomic::AtomicUsize;
            $(pub(super) static $name: AtomicUsize = AtomicUsize::new(0);)*
        }

        /// Looks every symbol up now, at load: a libc call made later from inside dlsym (an
        /// allocator starting up, say) then finds them resolved.
        extern "C" fn resolve_all() {
            $(find(concat!(stringify!($name), "\0").as_bytes(), &slots::$name);)*
        }
    };
}

/// Defines two exported functions with one body, such as `fopen` and `fopen64`: each body
/// calls the libc function of its own name, bound to `$real`. The plain and the `64` forms take
/// the same types here: `off_t` is `off64_t` on the targets the shim builds for (`lib.rs`).
macro_rules! twins {
    ($(
        $(#[$doc:meta])*
        fn $a:ident, $b:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = |$real:ident| $body:block
    )*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $a($($arg: $ty),*) -> $ret {
            let $real = $crate::real::$a();
            $body
        }

        #[doc = concat!("As `", stringify!($a), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $b($($arg: $ty),*) -> $ret {
            let $real = $crate::real::$b();
            $body
        }
    )*};
}

pub(crate) use twins;

#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_all;

type Stat = *mut libc::stat64;

real! {
    open: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
    open64: unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
    openat: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
    openat64: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
    __open_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int;
    __open64_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int;
    __openat_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
    __openat64_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
    creat: unsafe extern "C" fn(*const c_char, mode_t) -> c_int;
    creat64: unsafe extern "C" fn(*const c_char, mode_t) -> c_int;
    close: unsafe extern "C" fn(c_int) -> c_int;
    close_range: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
    dup: unsafe extern "C" fn(c_int) -> c_int;
    dup2: unsafe extern "C" fn(c_int, c_int) -> c_int;
    dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    fcntl64: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    lockf: unsafe extern "C" fn(c_int, c_int, off_t) -> c_int;
    flock: unsafe extern "C" fn(c_int, c_int) -> c_int;
    setuid: unsafe extern "C" fn(libc::uid_t) -> c_int;
    setgid: unsafe extern "C" fn(libc::gid_t) -> c_int;
    seteuid: unsafe extern "C" fn(libc::uid_t) -> c_int;
    setegid: unsafe extern "C" fn(libc::gid_t) -> c_int;
    setreuid: unsafe extern "C" fn(libc::uid_t, libc::uid_t) -> c_int;
    setregid: unsafe extern "C" fn(libc::gid_t, libc::gid_t) -> c_int;
    setresuid: unsafe extern "C" fn(libc::uid_t, libc::uid_t, libc::uid_t) -> c_int;
    setresgid: unsafe extern "C" fn(libc::gid_t, libc::gid_t, libc::gid_t) -> c_int;
    setgroups: unsafe extern "C" fn(size_t, *const libc::gid_t) -> c_int;
    lockf64: unsafe extern "C" fn(c_int, c_int, off64_t) -> c_int;
    read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
    pread: unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    pread64: unsafe extern "C" fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
    pwrite: unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    pwrite64: unsafe extern "C" fn(c_int, *const c_void, size_t, off64_t) -> ssize_t;
    readv: unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    writev: unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    preadv: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    preadv64: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t;
    pwritev: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    pwritev64: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t;
    preadv2: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    preadv64v2: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t;
    pwritev2: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev64v2: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t;
    lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t;
    lseek64: unsafe extern "C" fn(c_int, off64_t, c_int) -> off64_t;
    fsync: unsafe extern "C" fn(c_int) -> c_int;
    fdatasync: unsafe extern "C" fn(c_int) -> c_int;
    ftruncate: unsafe extern "C" fn(c_int, off_t) -> c_int;
    ftruncate64: unsafe extern "C" fn(c_int, off64_t) -> c_int;
    truncate: unsafe extern "C" fn(*const c_char, off_t) -> c_int;
    truncate64: unsafe extern "C" fn(*const c_char, off64_t) -> c_int;
    fallocate: unsafe extern "C" fn(c_int, c_int, off_t, off_t) -> c_int;
    fallocate64: unsafe extern "C" fn(c_int, c_int, off64_t, off64_t) -> c_int;
    posix_fallocate: unsafe extern "C" fn(c_int, off_t, off_t) -> c_int;
    posix_fallocate64: unsafe extern "C" fn(c_int, off64_t, off64_t) -> c_int;
    posix_fadvise: unsafe extern "C" fn(c_int, off_t, off_t, c_int) -> c_int;
    posix_fadvise64: unsafe extern "C" fn(c_int, off64_t, off64_t, c_int) -> c_int;
    mkstemp: unsafe extern "C" fn(*mut c_char) -> c_int;
    mkstemp64: unsafe extern "C" fn(*mut c_char) -> c_int;
    mkostemp: unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
    mkostemp64: unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
    mkstemps: unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
    mkstemps64: unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
    mkostemps: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    mkostemps64: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    sync: unsafe extern "C" fn();
    syncfs: unsafe extern "C" fn(c_int) -> c_int;
    fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
    fstat64: unsafe extern "C" fn(c_int, Stat) -> c_int;
    stat: unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
    stat64: unsafe extern "C" fn(*const c_char, Stat) -> c_int;
    lstat: unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
    lstat64: unsafe extern "C" fn(*const c_char, Stat) -> c_int;
    fstatat: unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    fstatat64: unsafe extern "C" fn(c_int, *const c_char, Stat, c_int) -> c_int;
    statx: unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    mmap: unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
    mmap64: unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void;
    fdopen: unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE;
    fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;
    fopen64: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;
    freopen: unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    freopen64: unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    closefrom: unsafe extern "C" fn(c_int);
    fclose: unsafe extern "C" fn(*mut FILE) -> c_int;
    sendfile: unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    sendfile64: unsafe extern "C" fn(c_int, c_int, *mut off64_t, size_t) -> ssize_t;
    execl: unsafe extern "C" fn(*const c_char, *const c_char, ...) -> c_int;
    execlp: unsafe extern "C" fn(*const c_char, *const c_char, ...) -> c_int;
    execle: unsafe extern "C" fn(*const c_char, *const c_char, ...) -> c_int;
    execve: unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execv: unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    execvp: unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    execvpe: unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    posix_spawn: unsafe extern "C" fn(
        *mut libc::pid_t,
        *const c_char,
        *const libc::posix_spawn_file_actions_t,
        *const libc::posix_spawnattr_t,
        *const *mut c_char,
        *const *mut c_char,
    ) -> c_int;
    posix_spawnp: unsafe extern "C" fn(
        *mut libc::pid_t,
        *const c_char,
        *const libc::posix_spawn_file_actions_t,
        *const libc::posix_spawnattr_t,
        *const *mut c_char,
        *const *mut c_char,
    ) -> c_int;
    system: unsafe extern "C" fn(*const c_char) -> c_int;
    popen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;
    sigaction: unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    bsd_signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sysv_signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sigset: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    setrlimit: unsafe extern "C" fn(libc::__rlimit_resource_t, *const libc::rlimit) -> c_int;
    setrlimit64: unsafe extern "C" fn(libc::__rlimit_resource_t, *const libc::rlimit64) -> c_int;
    prlimit: unsafe extern "C" fn(libc::pid_t, libc::__rlimit_resource_t, *const libc::rlimit, *mut libc::rlimit) -> c_int;
    prlimit64: unsafe extern "C" fn(libc::pid_t, libc::__rlimit_resource_t, *const libc::rlimit64, *mut libc::rlimit64) -> c_int;
    aio_read: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_read64: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_write: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_write64: unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    aio_fsync: unsafe extern "C" fn(c_int, *mut libc::aiocb) -> c_int;
    aio_fsync64: unsafe extern "C" fn(c_int, *mut libc::aiocb) -> c_int;
    lio_listio: unsafe extern "C" fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int;
    lio_listio64: unsafe extern "C" fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int;
    io_submit: unsafe extern "C" fn(libc::c_ulong, libc::c_long, *mut *mut c_void) -> c_int;
    syscall: unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;
    io_uring_queue_init: unsafe extern "C" fn(c_uint, *mut c_void, c_uint) -> c_int;
    io_uring_queue_init_params: unsafe extern "C" fn(c_uint, *mut c_void, *mut c_void) -> c_int;
    io_uring_setup: unsafe extern "C" fn(c_uint, *mut c_void) -> c_int;
    vdprintf: unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;
    dprintf: unsafe extern "C" fn(c_int, *const c_char, ...) -> c_int;
    _exit: unsafe extern "C" fn(c_int) -> !;
    _Exit: unsafe extern "C" fn(c_int) -> !;
    copy_file_range: unsafe extern "C" fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
    splice: unsafe extern "C" fn(c_int, *mut libc::loff_t, c_int, *mut libc::loff_t, size_t, c_uint) -> ssize_t;
}
