//! Ways a program reaches a file's bytes through libc or the kernel where the shim cannot
//! serve the call: the file is demoted first (written back, then libc's for the process), or,
//! for an io_uring (whose requests name descriptors in memory the shim never sees), caching
//! stops for the whole process.
//!
//! - POSIX AIO (`aio_read`, `aio_write`, `aio_fsync`, `lio_listio`): glibc's helper threads call
//!   its internal pread/pwrite.
//! - Linux AIO (`io_submit`, through libaio or `syscall`): the kernel reads and writes the OS
//!   file.
//! - io_uring (`io_uring_setup` through `syscall`, or liburing's `io_uring_queue_init*` and
//!   `io_uring_setup`): a ring that liburing sets up with its own inline system calls is seen
//!   only through those entry points; a program issuing the raw system call itself is not seen
//!   at all (a write-back then still never cuts what the ring appended: `os_size`).
//! - `dprintf` and `vdprintf`: libc formats into an internal stream on the descriptor.
//! - `syscall(SYS_read, ...)` and the other raw forms of the calls the shim serves, on a cached
//!   file's descriptor: served as the libc call would be (`routed`).

use crate::open::{cached, demote_fd};
use crate::shim;
use crate::{errno, real};
use libc::{aiocb, c_char, c_int, c_long, c_uint, c_void, sigevent};

/// Demotes the file on `fd` if it is cached (the common case, a file never cached, costs a
/// lock-free table lookup).
fn demote_if_cached(fd: c_int) -> Result<(), i32> {
    // (Its guard is dropped here: `demote_fd` enters the shim itself.)
    let is_cached = cached(fd).is_some();
    if is_cached {
        demote_fd(fd)?;
    }
    Ok(())
}

/// An aiocb's descriptor, demoted if cached; -1 (errno set) if the demotion failed.
///
/// # Safety
/// `cb` is null or a valid aiocb.
unsafe fn demote_aiocb(cb: *const aiocb) -> c_int {
    // SAFETY: the caller's contract.
    let Some(cb) = (unsafe { cb.as_ref() }) else { return 0 };
    match demote_if_cached(cb.aio_fildes) {
        Ok(()) => 0,
        Err(code) => errno::fail(code),
    }
}

/// The part of the kernel's `struct iocb` before the descriptor (linux/aio_abi.h, 64-bit).
#[repr(C)]
struct IocbHead {
    data: u64,
    key: u32,
    rw_flags: u32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
}

/// Demotes the files of `nr` iocbs; -1 (errno set) if a demotion failed.
///
/// # Safety
/// `iocbs` points to `nr` valid iocb pointers, or is what the kernel would reject (checked
/// for null only).
unsafe fn demote_iocbs(nr: c_long, iocbs: *const *const IocbHead) -> c_int {
    if iocbs.is_null() || nr <= 0 {
        return 0;
    }
    for i in 0..nr as usize {
        // SAFETY: the caller's contract.
        let Some(cb) = (unsafe { (*iocbs.add(i)).as_ref() }) else { continue };
        if let Err(code) = demote_if_cached(cb.fildes as c_int) {
            return errno::fail(code);
        }
    }
    0
}

fn uring_seen() {
    if !by_the_cache() {
        shim::stop_caching("the program set up an io_uring, whose requests the shim cannot see");
    }
}

/// Whether this thread is the cache's own (its io_uring engine makes rings too): inside the
/// shim, or one of the threads the library starts (named `upcache-*`; never the main thread,
/// which a program called `upcache-*` would otherwise be).
fn by_the_cache() -> bool {
    let Some(_inside) = crate::guard::enter() else { return true };
    // SAFETY: no arguments.
    if unsafe { libc::gettid() == libc::getpid() } {
        return false;
    }
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    name.starts_with(b"upcache-")
}

// Every function below is called by C with what its prototype says.

/// aio_read, aio_write and their 64-bit twins (one function each in glibc's 64-bit ABI).
macro_rules! aio_submits {
    ($($name:ident)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut aiocb) -> c_int {
            // SAFETY: `cb` is the caller's aiocb, null or valid, read as the call reads it and
            // passed on unchanged.
            unsafe {
                match demote_aiocb(cb) {
                    0 => real::$name()(cb),
                    e => e,
                }
            }
        }
    )*};
}

aio_submits! { aio_read aio_read64 aio_write aio_write64 }

/// aio_fsync and its 64-bit twin.
macro_rules! aio_fsyncs {
    ($($name:ident)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(op: c_int, cb: *mut aiocb) -> c_int {
            // SAFETY: as in `aio_read`.
            unsafe {
                match demote_aiocb(cb) {
                    0 => real::$name()(op, cb),
                    e => e,
                }
            }
        }
    )*};
}

aio_fsyncs! { aio_fsync aio_fsync64 }

/// # Safety
/// `list` is null or points to `n` aiocb pointers (each null or valid).
unsafe fn demote_list(list: *const *mut aiocb, n: c_int) -> c_int {
    if list.is_null() {
        return 0;
    }
    for i in 0..n.max(0) as usize {
        // SAFETY: the caller's contract.
        let e = unsafe { demote_aiocb(*list.add(i)) };
        if e != 0 {
            return e;
        }
    }
    0
}

/// lio_listio and its 64-bit twin.
macro_rules! lio_listios {
    ($($name:ident)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(mode: c_int, list: *const *mut aiocb, n: c_int, sev: *mut sigevent) -> c_int {
            // SAFETY: the caller's list of `n` aiocb pointers (each null or valid) and sigevent,
            // read as the call reads them and passed on unchanged.
            unsafe {
                match demote_list(list, n) {
                    0 => real::$name()(mode, list, n, sev),
                    e => e,
                }
            }
        }
    )*};
}

lio_listios! { lio_listio lio_listio64 }

/// libaio's io_submit (found only if the program loaded libaio, which it then calls).
#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: libc::c_ulong, nr: c_long, iocbs: *mut *mut c_void) -> c_int {
    // SAFETY: the caller's `nr` iocb pointers, read as the kernel reads them and passed on.
    unsafe {
        match demote_iocbs(nr, iocbs.cast()) {
            0 => real::io_submit()(ctx, nr, iocbs),
            e => e,
        }
    }
}

/// Whether `fd` is a cached file's descriptor (false inside the shim: its own calls pass).
fn is_cached(fd: c_long) -> bool {
    c_int::try_from(fd).is_ok_and(|fd| cached(fd).is_some())
}

/// A raw system call on a cached file's descriptor, served by the shim's own entry point for
/// it, as the libc call would be; None for any other call or descriptor.
///
/// # Safety
/// The arguments are what the system call `n` takes.
unsafe fn routed(n: c_long, [a, b, c, d, e, f]: [c_long; 6]) -> Option<c_long> {
    use crate::{copy, data, meta, open};
    let fd = a as c_int;
    let p = |x: c_long| x as *mut c_void;
    // SAFETY: the caller's arguments, as system call `n` takes them, given to the shim's entry
    // point for the same call, whose C prototype takes the same (pointers as the kernel's).
    let r = unsafe {
        match n {
            libc::SYS_dup2 | libc::SYS_dup3 if !is_cached(a) && !is_cached(b) => return None,
            libc::SYS_dup2 => open::dup2(fd, b as c_int) as c_long,
            libc::SYS_dup3 => open::dup3(fd, b as c_int, c as c_int) as c_long,
            libc::SYS_sendfile if !is_cached(a) && !is_cached(b) => return None,
            libc::SYS_copy_file_range | libc::SYS_splice if !is_cached(a) && !is_cached(c) => return None,
            libc::SYS_sendfile => copy::sendfile64(fd, b as c_int, p(c).cast(), d as usize) as c_long,
            libc::SYS_copy_file_range => {
                copy::copy_file_range(fd, p(b).cast(), c as c_int, p(d).cast(), e as usize, f as u32)
                    as c_long
            }
            libc::SYS_splice => {
                copy::splice(fd, p(b).cast(), c as c_int, p(d).cast(), e as usize, f as u32) as c_long
            }
            libc::SYS_mmap if !is_cached(e) => return None,
            libc::SYS_mmap => open::mmap64(p(a), b as usize, c as c_int, d as c_int, e as c_int, f) as c_long,
            _ if !is_cached(a) => return None,
            libc::SYS_read => data::read(fd, p(b), c as usize) as c_long,
            libc::SYS_write => data::write(fd, p(b), c as usize) as c_long,
            libc::SYS_pread64 => data::pread64(fd, p(b), c as usize, d) as c_long,
            libc::SYS_pwrite64 => data::pwrite64(fd, p(b), c as usize, d) as c_long,
            libc::SYS_readv => data::readv(fd, p(b).cast(), c as c_int) as c_long,
            libc::SYS_writev => data::writev(fd, p(b).cast(), c as c_int) as c_long,
            libc::SYS_preadv => data::preadv64(fd, p(b).cast(), c as c_int, d) as c_long,
            libc::SYS_pwritev => data::pwritev64(fd, p(b).cast(), c as c_int, d) as c_long,
            libc::SYS_preadv2 => data::preadv64v2(fd, p(b).cast(), c as c_int, d, f as c_int) as c_long,
            libc::SYS_pwritev2 => data::pwritev64v2(fd, p(b).cast(), c as c_int, d, f as c_int) as c_long,
            libc::SYS_lseek => data::lseek64(fd, b, c as c_int) as c_long,
            libc::SYS_fsync => data::fsync(fd) as c_long,
            libc::SYS_fdatasync => data::fdatasync(fd) as c_long,
            libc::SYS_ftruncate => data::ftruncate64(fd, b) as c_long,
            libc::SYS_fallocate => data::fallocate64(fd, b as c_int, c, d) as c_long,
            libc::SYS_fstat => meta::fstat64(fd, p(b).cast()) as c_long,
            libc::SYS_fadvise64 => match data::posix_fadvise64(fd, b, c, d as c_int) {
                0 => 0,
                code => crate::errno::fail::<c_long>(code),
            },
            libc::SYS_close => open::close(fd) as c_long,
            libc::SYS_dup => open::dup(fd) as c_long,
            libc::SYS_fcntl => open::fcntl(fd, b as c_int, c as libc::c_ulong) as c_long,
            _ => return None,
        }
    };
    Some(r)
}

/// syscall(2): io_uring_setup stops caching; io_submit demotes its files; calls on a cached
/// file's descriptor go where their libc function would; the rest passes.
/// Variadic in C: on x86-64 and aarch64 Linux the named arguments are where the variadic ones
/// would be, and unused ones are harmless junk (as libc's own syscall reads all six).
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    // SAFETY: the caller's arguments, as system call `n` takes them: read where the kernel
    // would (io_submit's iocbs), handed to the entry point for the call, or passed on.
    unsafe {
        match n {
            libc::SYS_io_uring_setup => uring_seen(),
            libc::SYS_io_submit if demote_iocbs(b, c as *const *const IocbHead) != 0 => return -1,
            _ => {
                if let Some(r) = routed(n, [a, b, c, d, e, f]) {
                    return r;
                }
            }
        }
        real::syscall()(n, a, b, c, d, e, f)
    }
}

/// liburing's entry points that set up a ring (it makes the system calls itself).
#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init(entries: c_uint, ring: *mut c_void, flags: c_uint) -> c_int {
    uring_seen();
    // SAFETY: the caller's ring storage, passed on unchanged.
    unsafe { real::io_uring_queue_init()(entries, ring, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_params(
    entries: c_uint,
    ring: *mut c_void,
    p: *mut c_void,
) -> c_int {
    uring_seen();
    // SAFETY: the caller's ring and parameter storage, passed on unchanged.
    unsafe { real::io_uring_queue_init_params()(entries, ring, p) }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_setup(entries: c_uint, p: *mut c_void) -> c_int {
    uring_seen();
    // SAFETY: the caller's parameter storage, passed on unchanged.
    unsafe { real::io_uring_setup()(entries, p) }
}

/// vdprintf writes through an internal stream; `dprintf` (variadic) is an assembly trampoline
/// in `process.rs` that demotes its descriptor the same way.
#[no_mangle]
pub unsafe extern "C" fn vdprintf(fd: c_int, format: *const c_char, args: *mut c_void) -> c_int {
    if let Err(code) = demote_if_cached(fd) {
        return errno::fail(code);
    }
    // SAFETY: the caller's format and va_list, passed on unchanged.
    unsafe { real::vdprintf()(fd, format, args) }
}

/// Called by the `dprintf` trampoline with its descriptor: must not unwind into assembly.
pub(crate) extern "C" fn before_dprintf(fd: c_int) {
    let _ = std::panic::catch_unwind(|| demote_if_cached(fd));
}
