//! Opening, closing and duplicating descriptors, and the calls that reach a file without the
//! shim (FILE streams, mappings), which get the file demoted first.

use crate::errno;
use crate::guard::{self, Inside};
use crate::os::{fd_stat, path_stat};
use crate::real::{self, twins};
use crate::shim::{self, Description, Shim};
use libc::{c_char, c_int, c_uint, c_ulong, c_void, mode_t, off_t, size_t, FILE};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The cached file open on `fd`, with this thread inside the shim; None: pass through.
pub(crate) fn cached(fd: c_int) -> Option<(&'static Shim, Arc<Description>, Inside)> {
    let inside = guard::enter()?;
    let shim = shim::current().or_else(|| shim::start_for_inherited(fd))?;
    let desc = shim.table.get(fd)?;
    if desc.shared.file().bypassed() {
        // Another process stopped caching the file (a demotion of its own): so does this one,
        // before libc serves the call. A failure leaves the file cached, as any failed demotion.
        if shim.demote(&desc.shared).is_ok() {
            return None;
        }
    }
    Some((shim, desc, inside))
}

/// Runs `f`; a panic becomes -1 with EIO instead of unwinding into C.
pub(crate) fn shielded<T: From<i8>>(f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| errno::fail(libc::EIO))
}

/// Caches the file libc just opened on `fd` (with `flags`) if it is a regular file under the
/// prefix. Returns `fd`, or -1 if an O_TRUNC could not be applied to the cached file.
fn adopt(fd: c_int, flags: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    // The number is new: whatever the table says of it is from a descriptor closed in a way
    // the shim did not see (inside libc), and must not catch this one's I/O.
    forget(fd);
    if flags & libc::O_PATH != 0 {
        return fd;
    }
    let Some(_inside) = guard::enter() else { return fd };
    if !shim::enabled() {
        return fd;
    }
    shielded(|| adopt_inside(fd, flags))
}

fn adopt_inside(fd: c_int, flags: c_int) -> c_int {
    let Some(st) = fd_stat(fd) else { return fd };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return fd;
    }
    // Where the descriptor really is: relative paths, dirfds, `..` and symlinks resolved.
    let Ok(path) = std::fs::read_link(crate::os::fd_path(fd)) else { return fd };
    let Some(shim) = shim::for_path(&path, fd) else { return fd };
    let key = (st.st_dev, st.st_ino);
    if crate::stdio::wraps(fd) {
        // Opened onto stdin, stdout or stderr (after a close of it), or onto a number a stream
        // still wraps: libc's (`stdio.rs`), and so is the file, for the process. A copy cached
        // through another descriptor follows the truncation libc's open just made first, or
        // the demotion would write its stale pages back over it.
        if let Some(shared) = shim.lookup(key).filter(|_| flags & libc::O_TRUNC != 0) {
            if let Err(e) = shared.file().set_len(0) {
                shim::warn(&format!("{}: truncating the cached copy: {e}", path.display()));
            }
        }
        if let Err(code) = demote_key(key) {
            shim::warn(&format!("{}: {}; it stays cached", path.display(), errno::describe(code)));
        }
        shim.counters.demoted_opens.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
        return fd;
    }
    let access = flags & libc::O_ACCMODE;
    // (O_TRUNC truncates whatever the access mode, and the cached copy must follow.)
    let write = access != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    let shared = match shim.shared(key, fd, &path, write) {
        Ok(Some(s)) => s,
        Ok(None) => {
            // Demoted: libc's, as its other descriptors, streams or mappings may be about.
            shim.counters.demoted_opens.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
            return fd;
        }
        Err(e) => {
            // Not cached, so nothing cached can disagree with it: libc serves it. (For one,
            // a file this process may only read: the cache opens files read-write.)
            // Relaxed: statistics, and a once-only message.
            if shim.counters.uncached.fetch_add(1, Ordering::Relaxed) == 0 {
                shim::warn(&format!(
                    "{}: not cached: {e} (said once; counted in UPCACHE_STATS)",
                    path.display()
                ));
            }
            return fd;
        }
    };
    let writable = access != libc::O_RDONLY;
    // Linux truncates on O_TRUNC whatever the access mode (O_RDONLY | O_TRUNC included), so
    // libc's open just did: the cached copy must follow.
    if flags & libc::O_TRUNC != 0 {
        if let Err(e) = shared.file().set_len(0) {
            // SAFETY: our descriptor, not yet handed to the caller.
            unsafe { real::close()(fd) };
            return errno::fail_with(&e);
        }
    }
    let reported = std::sync::atomic::AtomicU64::new(shared.file().errors_sample());
    let desc = Arc::new(Description {
        reported,
        shared,
        readable: access != libc::O_WRONLY,
        writable,
        append: AtomicBool::new(flags & libc::O_APPEND != 0),
        offset: Mutex::new(()),
    });
    // A leftover: its descriptor was closed by a way the shim does not see.
    if let Some(stale) = shim.install(fd, Some(desc)) {
        let _ = shim::release(stale);
    }
    shim.counters.opens.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
    fd
}

/// Calls that open a file inside libc: the descriptor libc returns is adopted (`adopt`) with
/// the open flags that `$flags` (an expression of the arguments) gives.
macro_rules! adopted {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) with $flags:expr;)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the caller's arguments, as this function's C prototype has them (a C
            // string path or a writable template), passed on unchanged.
            adopt(unsafe { real::$name()($($arg),*) }, $flags)
        }
    )*};
}

/// creat's flags.
const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

adopted! {
    /// open(2). `mode` is variadic in C: on x86-64 and aarch64 Linux a named argument is passed
    /// where the first variadic one is, and, as in libc, it is read only with O_CREAT/O_TMPFILE.
    open(path: *const c_char, flags: c_int, mode: mode_t) with flags;
    open64(path: *const c_char, flags: c_int, mode: mode_t) with flags;
    openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) with flags;
    openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) with flags;
    /// The _FORTIFY_SOURCE forms of open (no mode).
    __open_2(path: *const c_char, flags: c_int) with flags;
    __open64_2(path: *const c_char, flags: c_int) with flags;
    __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) with flags;
    __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) with flags;
    /// mkstemp and its kin open inside libc: the descriptor they return is adopted like an
    /// open's (O_RDWR, and the flags mkostemp takes), so that a later open of the same file by
    /// name cannot cache a copy that this descriptor writes around.
    mkstemp(template: *mut c_char) with libc::O_RDWR;
    mkstemp64(template: *mut c_char) with libc::O_RDWR;
    mkostemp(template: *mut c_char, flags: c_int) with libc::O_RDWR | flags;
    mkostemp64(template: *mut c_char, flags: c_int) with libc::O_RDWR | flags;
    mkstemps(template: *mut c_char, suffix: c_int) with libc::O_RDWR;
    mkstemps64(template: *mut c_char, suffix: c_int) with libc::O_RDWR;
    mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) with libc::O_RDWR | flags;
    mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) with libc::O_RDWR | flags;
    creat(path: *const c_char, mode: mode_t) with CREAT;
    creat64(path: *const c_char, mode: mode_t) with CREAT;
}

// The functions below are called by C with what their prototypes say (valid paths, buffers
// and descriptors or not, as libc itself accepts them); the shim passes the same arguments to
// libc and reads them only where libc would.

/// Forgets `fd` before libc closes it (so that a descriptor reusing the number meanwhile is
/// not forgotten instead); the last close of a file reports its write-back error.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    crate::locks::before_close(fd);
    let taken = guard::enter().and_then(|inside| Some((shim::current()?.table.set(fd, None)?, inside)));
    // SAFETY: no memory arguments.
    let closed = unsafe { real::close()(fd) };
    match taken {
        Some((desc, _inside)) => shielded(|| match shim::release(desc) {
            Err(code) if closed == 0 => errno::fail(code),
            _ => closed,
        }),
        None => closed,
    }
}

/// Drops the table's entry for `fd`, if any (its write-back error is dropped too).
fn forget(fd: c_int) {
    if let Some(shim) = shim::current() {
        if let Some(stale) = shim.table.set(fd, None) {
            let _inside = guard::enter();
            let _ = shielded(|| shim::release(stale).map_or(-1, |()| 0));
        }
    }
}

/// Makes `new` (just made by libc as a copy of `old`) a descriptor of what `old` is.
fn copied(old: c_int, new: c_int) -> c_int {
    if new < 0 || old == new {
        return new;
    }
    let Some(_inside) = guard::enter() else { return new };
    let Some(shim) = shim::current().or_else(|| shim::start_for_inherited(old)) else { return new };
    // Relaxed: as in `Shim::demote`.
    let mut copy = shim.table.get(old).filter(|d| !d.shared.demoted.load(Ordering::Relaxed));
    if let Some(desc) = copy.as_ref().filter(|_| crate::stdio::wraps(new)) {
        // Onto stdin, stdout or stderr (a shell's redirection), or a stream's descriptor: the
        // stream writes it unseen, so the file is libc's from now on (`stdio.rs`).
        match shim.demote(&desc.shared) {
            Ok(()) => copy = None,
            Err(code) => shim::warn(&format!(
                "{}: {}; it stays cached, and what a stream writes to descriptor {new} may be overwritten",
                desc.shared.file().name(),
                errno::describe(code)
            )),
        }
    }
    if let Some(replaced) = shim.install(new, copy) {
        // dup2/dup3 closed it, silently: so is its write-back error.
        let _ = shielded(|| shim::release(replaced).map_or(-1, |()| 0));
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: no memory arguments.
    copied(fd, unsafe { real::dup()(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        crate::locks::before_close(new); // closed by the dup, if open
    }
    // SAFETY: no memory arguments.
    copied(old, unsafe { real::dup2()(old, new) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        crate::locks::before_close(new);
    }
    // SAFETY: no memory arguments.
    copied(old, unsafe { real::dup3()(old, new, flags) })
}

fn after_fcntl(fd: c_int, cmd: c_int, arg: c_ulong, result: c_int) -> c_int {
    if result < 0 {
        return result;
    }
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => copied(fd, result),
        libc::F_SETFL => {
            if let Some((_, desc, _inside)) = cached(fd) {
                // Relaxed: read by writes of this description, ordered by the caller.
                desc.append.store(arg as c_int & libc::O_APPEND != 0, Ordering::Relaxed);
            }
            result
        }
        _ => result,
    }
}

twins! {
    /// fcntl(2). The third argument is variadic in C (an int or a pointer); it is taken as a
    /// word, where both ABIs put either, and passed on as one.
    fn fcntl, fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int = |real| {
        crate::locks::before_fcntl(fd, cmd, arg);
        // SAFETY: the caller's argument, an int or a pointer that `cmd` says is valid, passed
        // on.
        let result = after_fcntl(fd, cmd, arg, unsafe { real(fd, cmd, arg) });
        crate::locks::after_fcntl(fd, cmd, arg, result);
        result
    }
}

/// Takes the entries of descriptors `first..=last` out of the table (before libc closes them,
/// as `close` does).
fn take_range(first: c_uint, last: c_uint) -> Vec<Arc<Description>> {
    let Some(shim) = shim::current() else { return Vec::new() };
    let in_range = shim.table.all().into_iter().filter(|&(fd, _)| (first..=last).contains(&(fd as c_uint)));
    in_range.filter_map(|(fd, _)| shim.table.set(fd, None)).collect()
}

/// Releases descriptions whose descriptors were closed (write-back errors are dropped, as
/// close_range drops close errors).
fn release_all(taken: Vec<Arc<Description>>) {
    if taken.is_empty() {
        return;
    }
    let _inside = guard::enter();
    for desc in taken {
        let _ = shielded(|| shim::release(desc).map_or(-1, |()| 0));
    }
}

/// close_range(2). With CLOSE_RANGE_CLOEXEC nothing closes now (exec writes back first).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags as c_uint & libc::CLOSE_RANGE_CLOEXEC != 0 {
        // SAFETY: no memory arguments.
        return unsafe { real::close_range()(first, last, flags) };
    }
    crate::locks::before_close_range(first, last);
    let taken = take_range(first, last);
    // SAFETY: no memory arguments.
    let closed = unsafe { real::close_range()(first, last, flags) };
    release_all(taken);
    closed
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    crate::locks::before_close_range(first.max(0) as c_uint, c_uint::MAX);
    let taken = take_range(first.max(0) as c_uint, c_uint::MAX);
    // SAFETY: no memory arguments.
    unsafe { real::closefrom()(first) };
    release_all(taken);
}

/// A FILE stream closes its descriptor inside libc: forget it first.
#[no_mangle]
pub unsafe extern "C" fn fclose(stream: *mut FILE) -> c_int {
    // SAFETY: the caller's stream, live until the fclose below.
    let fd = if stream.is_null() { -1 } else { unsafe { libc::fileno(stream) } };
    crate::locks::before_close(fd);
    let taken = guard::enter().and_then(|inside| Some((shim::current()?.table.set(fd, None)?, inside)));
    // SAFETY: the caller's stream, passed on.
    let closed = unsafe { real::fclose()(stream) };
    if let Some((desc, _inside)) = taken {
        let _ = shielded(|| shim::release(desc).map_or(-1, |()| 0));
    }
    closed
}

/// Writes back the cached file open on `fd`, if any, for a reader that bypasses the shim.
pub(crate) fn write_back(fd: c_int) -> Result<(), i32> {
    match cached(fd) {
        Some((_, desc, _inside)) => desc.shared.file().write_back().map_err(|e| errno::of(&e)),
        None => Ok(()),
    }
}

/// Demotes the file open on `fd` (`Shim::demote`): libc is about to reach it unseen. A file
/// that is not cached (yet) is recorded as demoted all the same, so that no later open caches
/// it while the stream or mapping lives.
pub(crate) fn demote_fd(fd: c_int) -> Result<(), i32> {
    if let Some((shim, desc, _inside)) = cached(fd) {
        return shim.demote(&desc.shared);
    }
    let Some(_inside) = guard::enter() else { return Ok(()) };
    if shim::enabled() {
        if let Some(st) = fd_stat(fd).filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG) {
            demote_key((st.st_dev, st.st_ino))?;
        }
    }
    Ok(())
}

/// Demotes the file at `path`, as `demote_fd`.
fn demote_path(path: *const c_char) -> Result<(), i32> {
    let Some(_inside) = guard::enter() else { return Ok(()) };
    if !shim::enabled() {
        return Ok(());
    }
    match path_stat(path) {
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => demote_key((st.st_dev, st.st_ino)),
        _ => Ok(()),
    }
}

/// Demotes the file (device, inode), cached or not. The caller is inside the shim.
fn demote_key(key: (u64, u64)) -> Result<(), i32> {
    if let Some(shim) = shim::current() {
        if let Some(shared) = shim.lookup(key) {
            return shim.demote(&shared);
        }
    }
    shim::mark_demoted(key);
    Ok(())
}

/// A FILE stream reads and writes with libc's internal calls, which the shim does not see:
/// the file is demoted (written back, then libc's for every descriptor) first.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if let Err(code) = demote_fd(fd) {
        errno::set(code);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's mode string, passed on.
    unsafe { real::fdopen()(fd, mode) }
}

twins! {
    /// fopen(3) opens inside libc: a cached file of that path is demoted first.
    fn fopen, fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE = |real| {
        if let Err(code) = demote_path(path) {
            errno::set(code);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's path and mode strings, passed on.
        unsafe { real(path, mode) }
    }
}

/// freopen closes the stream's descriptor and opens a file inside libc: the old entry is
/// taken out first, and the file opened is demoted (with no path, the stream's own file).
///
/// # Safety
/// `stream` is null or a live stream; `path` null or a C string.
unsafe fn reopen(path: *const c_char, stream: *mut FILE, open: impl FnOnce() -> *mut FILE) -> *mut FILE {
    // SAFETY: as the function's contract says.
    let fd = if stream.is_null() { -1 } else { unsafe { libc::fileno(stream) } };
    let demoted = if path.is_null() { demote_fd(fd) } else { demote_path(path) };
    if let Err(code) = demoted {
        errno::set(code);
        return std::ptr::null_mut();
    }
    let taken = guard::enter().and_then(|inside| Some((shim::current()?.table.set(fd, None)?, inside)));
    let reopened = open();
    if let Some((desc, _inside)) = taken {
        let _ = shielded(|| shim::release(desc).map_or(-1, |()| 0));
    }
    reopened
}

twins! {
    /// freopen(3): see `reopen`.
    fn freopen, freopen64(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE = |real| {
        // SAFETY: the caller's path, mode and stream, passed on.
        unsafe { reopen(path, stream, || real(path, mode, stream)) }
    }
}

twins! {
    /// A mapping reads and writes the OS file: the file is demoted first (its descriptors go
    /// to libc, so the mapping and read/write agree, as they do in the kernel).
    fn mmap, mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t)
        -> *mut c_void = |real| {
        if flags & libc::MAP_ANONYMOUS == 0 {
            if let Err(code) = demote_fd(fd) {
                errno::set(code);
                return libc::MAP_FAILED;
            }
        }
        // SAFETY: the caller's mapping request, passed on; the shim reads none of it.
        unsafe { real(addr, len, prot, flags, fd, off) }
    }
}
