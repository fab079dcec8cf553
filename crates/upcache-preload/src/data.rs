//! Data calls on cached descriptors: reads, writes, seeks, syncs, truncation, allocation.
//! The file offset stays in the kernel: calls that use it read it, do their I/O through the
//! cache, and move it, under the description's offset lock.

use crate::backend::File;
use crate::errno;
use crate::limits::{past_size_limit, size_limit};
use crate::open::{cached, shielded};
use crate::real;
use crate::shim::{Description, Shim};
use libc::{c_char, c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};
use std::sync::atomic::Ordering;

/// Linux moves at most this many bytes per read or write call.
const MAX_IO: usize = 0x7fff_f000;

/// The most iovecs a call takes (IOV_MAX).
const IOV_MAX: c_int = 1024;

/// The kernel's offset of `fd`.
fn offset(fd: c_int) -> Result<u64, i32> {
    // SAFETY: lseek has no memory arguments.
    let at = unsafe { real::lseek64()(fd, 0, libc::SEEK_CUR) };
    if at < 0 {
        return Err(last_errno());
    }
    Ok(at as u64)
}

fn seek_to(fd: c_int, at: u64) -> Result<u64, i32> {
    let at = i64::try_from(at).map_err(|_| libc::EOVERFLOW)?;
    // SAFETY: lseek has no memory arguments.
    if unsafe { real::lseek64()(fd, at, libc::SEEK_SET) } < 0 {
        return Err(last_errno());
    }
    Ok(at as u64)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// A caller's buffer to read into, kept raw: C may list one buffer twice in an iovec array,
/// so a `&mut` slice is made for one buffer at a time, while it is filled.
#[derive(Clone, Copy)]
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

/// Reads at `at` into `bufs` in turn until one is short (end of file). An error after some
/// bytes is reported as the short count, as read(2) does.
fn read_bufs(file: &File, bufs: &[RawBuf], at: u64) -> Result<usize, i32> {
    let mut done = 0usize;
    for raw in bufs {
        let buf: &mut [u8] = match raw.len {
            0 => &mut [],
            // SAFETY: the caller's writable buffer (`buf_mut`), the only slice of it alive.
            len => unsafe { std::slice::from_raw_parts_mut(raw.ptr, len) },
        };
        let mut filled = 0;
        while filled < buf.len() {
            match file.read_at(&mut buf[filled..], at + (done + filled) as u64) {
                Ok(0) => return Ok(done + filled),
                Ok(n) => filled += n,
                Err(_) if done + filled > 0 => return Ok(done + filled),
                Err(e) => return Err(errno::of(&e)),
            }
        }
        done += filled;
    }
    Ok(done)
}

fn write_bufs(file: &File, bufs: &[&[u8]], at: u64) -> Result<usize, i32> {
    let mut done = 0usize;
    for buf in bufs {
        let mut put = 0;
        while put < buf.len() {
            match file.write_at(&buf[put..], at + (done + put) as u64) {
                Ok(0) => return Err(libc::EIO),
                Ok(n) => put += n,
                Err(_) if done + put > 0 => return Ok(done + put),
                Err(e) => return Err(errno::of(&e)),
            }
        }
        done += put;
    }
    Ok(done)
}

/// Where a read or write goes: an explicit offset, or the kernel's offset of the descriptor.
#[derive(Clone, Copy)]
enum At {
    Offset(u64),
    Current(c_int),
}

/// Before a read that reaches past the cached length: growth of the OS file by another
/// process is taken in (`File::refresh_len`), so that a reader following a log (`tail -f`)
/// sees what the kernel would show it. Its error is the read's to meet, if any.
fn see_growth(file: &File, off: u64, want: usize) {
    if off.saturating_add(want as u64) > file.len() {
        let _ = file.refresh_len();
    }
}

/// EINVAL if `off + want` does not fit a signed 64-bit offset, as the kernel checks every
/// read and write.
fn in_range(off: u64, want: usize) -> Result<(), i32> {
    match off.checked_add(want as u64) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

fn read_at(shim: &Shim, desc: &Description, bufs: &[RawBuf], at: At) -> Result<usize, i32> {
    if !desc.readable {
        return Err(libc::EBADF);
    }
    let file = desc.shared.file();
    let want = bufs.iter().map(|b| b.len).sum();
    if let At::Offset(off) = at {
        in_range(off, want)?;
    }
    let n = match at {
        At::Offset(off) => {
            see_growth(file, off, want);
            read_bufs(file, bufs, off)?
        }
        At::Current(fd) => {
            let _offset = desc.offset.lock().unwrap_or_else(|p| p.into_inner());
            let off = offset(fd)?;
            see_growth(file, off, want);
            let n = read_bufs(file, bufs, off)?;
            seek_to(fd, off + n as u64)?;
            n
        }
    };
    let c = &shim.counters; // Relaxed: statistics
    c.reads.fetch_add(1, Ordering::Relaxed);
    c.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
    Ok(n)
}

/// `bufs` cut to the first `max` bytes.
fn first_bytes<'a>(bufs: &[&'a [u8]], mut max: u64) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs {
        let n = (b.len() as u64).min(max) as usize;
        out.push(&b[..n]);
        max -= n as u64;
    }
    out
}

/// Writes `bufs` at `at` within the process's file size limit, as the kernel checks it before
/// the file system's (which the library applies): past it, SIGXFSZ and EFBIG; across it, the
/// bytes up to it.
fn write_limited(file: &File, bufs: &[&[u8]], at: u64) -> Result<usize, i32> {
    let want: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    if want > 0 {
        if let Some(limit) = size_limit() {
            if at >= limit {
                return Err(past_size_limit());
            }
            if at + want > limit {
                return write_bufs(file, &first_bytes(bufs, limit - at), at);
            }
        }
    }
    write_bufs(file, bufs, at)
}

/// Writes `bufs` at the end of the file as one step against every other appender, in any
/// process (the end found and the bytes written under the file's lock,
/// `SharedFile::append_within`). Where it wrote, and how many bytes.
fn append_at_end(file: &File, bufs: &[&[u8]]) -> Result<(u64, usize), i32> {
    // One buffer, so that the whole of a writev lands in one step, as the kernel's does.
    let joined;
    let buf = match bufs {
        [] => &[][..],
        [one] => *one,
        many => {
            joined = many.concat();
            &joined[..]
        }
    };
    match file.append_within(buf, size_limit().unwrap_or(u64::MAX)) {
        Ok(Some(at)) => Ok(at),
        Ok(None) => Err(past_size_limit()),
        Err(e) => Err(errno::of(&e)),
    }
}

/// `append`: at the end of the file whatever `at` says (O_APPEND, RWF_APPEND), then moves the
/// kernel's offset past what it wrote.
fn write_at(shim: &Shim, desc: &Description, bufs: &[&[u8]], at: At, append: bool) -> Result<usize, i32> {
    if !desc.writable {
        return Err(libc::EBADF);
    }
    let file = desc.shared.file();
    if let At::Offset(off) = at {
        in_range(off, bufs.iter().map(|b| b.len()).sum())?;
    }
    // Relaxed: the flag is the caller's own setting, ordered by the caller.
    let append = append || desc.append.load(Ordering::Relaxed);
    let n = match (at, append) {
        (_, true) => {
            let _offset = desc.offset.lock().unwrap_or_else(|p| p.into_inner());
            let (end, n) = append_at_end(file, bufs)?;
            // As the kernel: an append that wrote nothing leaves the offset where it was.
            if let (At::Current(fd), true) = (at, n > 0) {
                seek_to(fd, end + n as u64)?;
            }
            n
        }
        (At::Offset(off), false) => write_limited(file, bufs, off)?,
        (At::Current(fd), false) => {
            let _offset = desc.offset.lock().unwrap_or_else(|p| p.into_inner());
            let off = offset(fd)?;
            let n = write_limited(file, bufs, off)?;
            seek_to(fd, off + n as u64)?;
            n
        }
    };
    let c = &shim.counters; // Relaxed: statistics
    c.writes.fetch_add(1, Ordering::Relaxed);
    c.write_bytes.fetch_add(n as u64, Ordering::Relaxed);
    Ok(n)
}

fn ssize(r: Result<usize, i32>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(code) => errno::fail(code),
    }
}

fn explicit(off: i64) -> Result<At, i32> {
    u64::try_from(off).map(At::Offset).map_err(|_| libc::EINVAL)
}

/// The caller's buffer to read into (at most MAX_IO bytes, as Linux moves per call). Its
/// bytes must be writable, or `len` 0: a bad pointer other than null faults, where the
/// kernel would return EFAULT.
fn buf_mut(buf: *mut c_void, len: size_t) -> Result<RawBuf, i32> {
    match (buf.is_null(), len) {
        (_, 0) => Ok(RawBuf { ptr: std::ptr::null_mut(), len: 0 }),
        (true, _) => Err(libc::EFAULT),
        _ => Ok(RawBuf { ptr: buf.cast(), len: len.min(MAX_IO) }),
    }
}

/// # Safety
/// `buf` points to `len` readable bytes, or `len` is 0.
unsafe fn buf_ref<'a>(buf: *const c_void, len: size_t) -> Result<&'a [u8], i32> {
    match (buf.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: as the function's contract says.
        _ => Ok(unsafe { std::slice::from_raw_parts(buf.cast(), len.min(MAX_IO)) }),
    }
}

/// The caller's iovec array.
///
/// # Safety
/// `iov` points to `count` iovecs, or `count` is 0.
unsafe fn iovec_array<'a>(iov: *const iovec, count: c_int) -> Result<&'a [iovec], i32> {
    if !(0..=IOV_MAX).contains(&count) {
        return Err(libc::EINVAL);
    }
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: as the function's contract says.
    Ok(unsafe { std::slice::from_raw_parts(iov, count as usize) })
}

/// # Safety
/// As `iovec_array`; each buffer as for `buf_mut`.
unsafe fn iovecs_mut(iov: *const iovec, count: c_int) -> Result<Vec<RawBuf>, i32> {
    // SAFETY: as the function's contract says.
    unsafe { iovec_array(iov, count) }?.iter().map(|v| buf_mut(v.iov_base, v.iov_len)).collect()
}

/// # Safety
/// As `iovec_array`; each buffer readable as for `buf_ref`.
unsafe fn iovecs<'a>(iov: *const iovec, count: c_int) -> Result<Vec<&'a [u8]>, i32> {
    // SAFETY: as the function's contract says.
    let array = unsafe { iovec_array(iov, count) }?;
    array
        .iter()
        .map(|v| {
            // SAFETY: each buffer readable, as the function's contract says.
            unsafe { buf_ref(v.iov_base, v.iov_len) }
        })
        .collect()
}

/// pread of a cached file; None if `fd` is not one.
///
/// # Safety
/// `buf` is writable for `len` bytes, or `len` is 0.
unsafe fn pread_any(fd: c_int, buf: *mut c_void, len: size_t, off: i64) -> Option<ssize_t> {
    let (shim, d, _inside) = cached(fd)?;
    Some(shielded(|| ssize(explicit(off).and_then(|at| read_at(shim, &d, &[buf_mut(buf, len)?], at)))))
}

/// pwrite of a cached file; None if `fd` is not one.
///
/// # Safety
/// `buf` is readable for `len` bytes, or `len` is 0.
unsafe fn pwrite_any(fd: c_int, buf: *const c_void, len: size_t, off: i64) -> Option<ssize_t> {
    let (shim, d, _inside) = cached(fd)?;
    Some(shielded(|| {
        // SAFETY: as the function's contract says.
        let buf = unsafe { buf_ref(buf, len) };
        ssize(explicit(off).and_then(|at| write_at(shim, &d, &[buf?], at, false)))
    }))
}

/// RWF_* flags of preadv2/pwritev2 this shim knows (HIPRI and NOWAIT are hints it ignores).
const RWF_KNOWN: c_int =
    libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_NOWAIT | libc::RWF_APPEND;

/// preadv, preadv2 and readv: `off` -1 (or `None`) is the kernel's offset.
///
/// # Safety
/// `iov` points to `count` iovecs whose buffers are writable, or `count` is 0.
unsafe fn preadv_any(
    fd: c_int,
    iov: *const iovec,
    count: c_int,
    off: Option<i64>,
    flags: c_int,
) -> Option<ssize_t> {
    let (shim, d, _inside) = cached(fd)?;
    Some(shielded(|| {
        ssize((|| {
            if flags & !RWF_KNOWN != 0 || flags & libc::RWF_APPEND != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            let at = match off {
                None | Some(-1) => At::Current(fd),
                Some(o) => explicit(o)?,
            };
            // SAFETY: as the function's contract says.
            read_at(shim, &d, &unsafe { iovecs_mut(iov, count) }?, at)
        })())
    }))
}

/// pwritev, pwritev2 and writev, as `preadv_any`.
///
/// # Safety
/// `iov` points to `count` iovecs whose buffers are readable, or `count` is 0.
unsafe fn pwritev_any(
    fd: c_int,
    iov: *const iovec,
    count: c_int,
    off: Option<i64>,
    flags: c_int,
) -> Option<ssize_t> {
    let (shim, d, _inside) = cached(fd)?;
    Some(shielded(|| {
        ssize((|| {
            if flags & !RWF_KNOWN != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            let at = match off {
                None | Some(-1) => At::Current(fd),
                Some(o) => explicit(o)?,
            };
            // SAFETY: as the function's contract says.
            let bufs = unsafe { iovecs(iov, count) }?;
            let n = write_at(shim, &d, &bufs, at, flags & libc::RWF_APPEND != 0)?;
            let file = d.shared.file();
            let synced = if flags & (libc::RWF_SYNC | libc::RWF_DSYNC) != 0 {
                file.sync_as(flags & libc::RWF_SYNC != 0, &d.reported)
            } else {
                Ok(())
            };
            synced.map(|()| n).map_err(|e| errno::of(&e))
        })())
    }))
}

/// SEEK_END, SEEK_DATA and SEEK_HOLE need the cached length (the whole file is data); SEEK_SET
/// and SEEK_CUR go to the kernel as they are.
fn lseek_cached(fd: c_int, desc: &Description, off: i64, whence: c_int) -> Result<u64, i32> {
    let _offset = desc.offset.lock().unwrap_or_else(|p| p.into_inner());
    let file = desc.shared.file();
    let len = match whence {
        // Where the end is now, another process's appends included.
        libc::SEEK_END | libc::SEEK_DATA | libc::SEEK_HOLE => {
            file.refresh_len().map_err(|e| errno::of(&e))?
        }
        _ => file.len(),
    };
    let at = match whence {
        libc::SEEK_END => len.checked_add_signed(off).ok_or(libc::EINVAL)?,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let off = u64::try_from(off).map_err(|_| libc::EINVAL)?;
            if off >= len {
                return Err(libc::ENXIO);
            }
            if whence == libc::SEEK_DATA {
                off
            } else {
                len
            }
        }
        _ => {
            // SAFETY: lseek has no memory arguments.
            let at = unsafe { real::lseek64()(fd, off, whence) };
            return if at < 0 { Err(last_errno()) } else { Ok(at as u64) };
        }
    };
    seek_to(fd, at)
}

fn status(r: upcache::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => errno::fail_with(&e),
    }
}

fn set_len(desc: &Description, len: i64) -> c_int {
    match u64::try_from(len) {
        Err(_) => errno::fail(libc::EINVAL),
        // ftruncate(2): EINVAL for a descriptor not open for writing.
        Ok(_) if !desc.writable => errno::fail(libc::EINVAL),
        // The limit stops growth only, as the kernel's `inode_newsize_ok`.
        Ok(len) if len > desc.shared.file().len() && size_limit().is_some_and(|limit| len > limit) => {
            errno::fail(past_size_limit())
        }
        Ok(len) => status(desc.shared.file().set_len(len)),
    }
}

/// truncate(2) of a cached file: libc truncates the OS file (checking permissions), then the
/// cache drops or adds what the new length says.
fn truncate_cached(path: *const c_char, len: i64, truncated: c_int) -> c_int {
    if truncated != 0 {
        return truncated;
    }
    let Some(_inside) = crate::guard::enter() else { return 0 };
    let Some(shim) = crate::shim::current() else { return 0 };
    shielded(|| {
        let Some(st) = crate::os::path_stat(path) else { return 0 };
        match shim.lookup((st.st_dev, st.st_ino)) {
            // Cached for reading only, it is written now: libc could truncate it by its path.
            Some(shared) => {
                use std::os::unix::ffi::OsStrExt;
                // SAFETY: the caller's C string, which libc's truncate just took.
                let path = std::ffi::OsStr::from_bytes(unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes());
                match shared.make_writable_at(std::path::Path::new(path)) {
                    Ok(()) => status(shared.file().set_len(len as u64)),
                    // Not cached for writing: libc's, as the truncate it just made.
                    Err(_) => status(shim.demote(&shared).map_err(|code| {
                        upcache::Error::io("demote a truncated file", std::io::Error::from_raw_os_error(code))
                    })),
                }
            }
            None => 0,
        }
    })
}

/// Zeros `[from, to)` of the cached file, within its length.
fn zero(file: &File, from: u64, to: u64) -> upcache::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    let to = to.min(file.len());
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// fallocate(2) of a cached file: the OS file's own, then for punching holes and zeroing
/// ranges zeros written through the cache, and an extension of the cached length without
/// KEEP_SIZE; modes that move data (collapse, insert) are not supported.
fn fallocate_cached(fd: c_int, desc: &Description, mode: c_int, off: i64, len: i64) -> c_int {
    let (Ok(from), Ok(n)) = (u64::try_from(off), u64::try_from(len)) else {
        return errno::fail(libc::EINVAL);
    };
    if n == 0 {
        return errno::fail(libc::EINVAL);
    }
    if !desc.writable {
        return errno::fail(libc::EBADF);
    }
    let Some(to) = from.checked_add(n) else { return errno::fail(libc::EFBIG) };
    let file = desc.shared.file();
    let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let zeroes = match mode & !libc::FALLOC_FL_KEEP_SIZE {
        0 => false,
        libc::FALLOC_FL_PUNCH_HOLE if keep => true,
        libc::FALLOC_FL_ZERO_RANGE => true,
        _ => return errno::fail(libc::EOPNOTSUPP),
    };
    // The OS file first: whether the file system supports the mode is its to say, and a
    // refusal changes nothing. (A write-back of an older dirty page racing it is undone by
    // the zeros written through the cache next, which reach the OS file in turn.)
    // The cache's own change of the OS file, not another program's (`SharedFile::changing_os`).
    // SAFETY: no memory arguments.
    if file.changing_os(|| unsafe { real::fallocate64()(fd, mode, off, len) }) != 0 {
        return -1;
    }
    // Set aside (a plain or zeroing fallocate) or freed (a hole punched).
    file.note_space(from, to, mode & libc::FALLOC_FL_PUNCH_HOLE == 0);
    if zeroes {
        if let Err(e) = zero(file, from, to) {
            return errno::fail_with(&e);
        }
    }
    if !keep && to > file.len() {
        return status(file.set_len(to));
    }
    0
}

/// posix_fallocate returns the error instead of setting errno. libc's own fallback for file
/// systems without fallocate writes to the OS file behind the cache, so it is not used: there
/// the range is only added to the length (it reads as zeros; its space is not reserved).
fn posix_fallocate_cached(fd: c_int, desc: &Description, off: i64, len: i64) -> c_int {
    if off < 0 || len <= 0 {
        return libc::EINVAL;
    }
    if fallocate_cached(fd, desc, 0, off, len) == 0 {
        return 0;
    }
    match last_errno() {
        libc::EOPNOTSUPP => {
            let file = desc.shared.file();
            let to = (off as u64).saturating_add(len as u64);
            if to > file.len() {
                if let Err(e) = file.set_len(to) {
                    return errno::of(&e);
                }
            }
            0
        }
        code => code,
    }
}

/// POSIX_FADV_DONTNEED starts the write-back of the file's dirty pages without waiting for it
/// and drops the range's clean pages, as the kernel does to its page cache: programs that empty
/// caches before measuring (fio) get the same from the shim, and dirty pages stay cached until
/// written back. Other advice is only advice (libc's, on the real descriptor).
fn fadvise_cached(fd: c_int, desc: &Description, off: i64, len: i64, advice: c_int) -> c_int {
    // (A negative range is the kernel's to judge.)
    if advice == libc::POSIX_FADV_DONTNEED && off >= 0 && len >= 0 {
        let file = desc.shared.file();
        if let Err(e) = file.start_write_back().and_then(|()| file.evict(off as u64, len as u64)) {
            return errno::of(&e);
        }
    }
    // SAFETY: no memory arguments.
    unsafe { real::posix_fadvise64()(fd, off, len, advice) }
}

/// sync(2) and syncfs(2): the kernel's files, and every cached file made durable too.
fn sync_everything() {
    let Some(_inside) = crate::guard::enter() else { return };
    if let Some(shim) = crate::shim::current() {
        shim.sync_all_files();
    }
}

/// Calls on a descriptor: served by the shim when `$served` (an `Option`) says so, the
/// descriptor being a cached file's, and by libc's function of the same name otherwise.
macro_rules! served {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $served:expr;)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's arguments, as this function's C prototype has them: the
            // shim reads and writes the caller's buffers only within the lengths given, as
            // libc would, or passes the arguments on unchanged.
            unsafe { $served.unwrap_or_else(|| real::$name()($($arg),*)) }
        }
    )*};
}

/// The kernel's offset, as `read`/`write` use it; one for preadv2/pwritev2's -1.
fn current_or(off: i64) -> Option<i64> {
    (off != -1).then_some(off)
}

served! {
    read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t = cached(fd).map(|(shim, d, _inside)| {
        shielded(|| ssize(buf_mut(buf, len).and_then(|b| read_at(shim, &d, &[b], At::Current(fd)))))
    });
    write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t = cached(fd).map(|(shim, d, _inside)| {
        shielded(|| ssize(buf_ref(buf, len).and_then(|b| write_at(shim, &d, &[b], At::Current(fd), false))))
    });
    pread(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t = pread_any(fd, buf, len, off);
    pread64(fd: c_int, buf: *mut c_void, len: size_t, off: off64_t) -> ssize_t = pread_any(fd, buf, len, off);
    pwrite(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t = pwrite_any(fd, buf, len, off);
    pwrite64(fd: c_int, buf: *const c_void, len: size_t, off: off64_t) -> ssize_t = pwrite_any(fd, buf, len, off);
    readv(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t = preadv_any(fd, iov, count, None, 0);
    writev(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t = pwritev_any(fd, iov, count, None, 0);
    /// (An explicit offset is required: -1 is libc's to refuse.)
    preadv(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t =
        current_or(off).and_then(|o| preadv_any(fd, iov, count, Some(o), 0));
    preadv64(fd: c_int, iov: *const iovec, count: c_int, off: off64_t) -> ssize_t =
        current_or(off).and_then(|o| preadv_any(fd, iov, count, Some(o), 0));
    pwritev(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t =
        current_or(off).and_then(|o| pwritev_any(fd, iov, count, Some(o), 0));
    pwritev64(fd: c_int, iov: *const iovec, count: c_int, off: off64_t) -> ssize_t =
        current_or(off).and_then(|o| pwritev_any(fd, iov, count, Some(o), 0));
    preadv2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t =
        preadv_any(fd, iov, count, Some(off), flags);
    preadv64v2(fd: c_int, iov: *const iovec, count: c_int, off: off64_t, flags: c_int) -> ssize_t =
        preadv_any(fd, iov, count, Some(off), flags);
    pwritev2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t =
        pwritev_any(fd, iov, count, Some(off), flags);
    pwritev64v2(fd: c_int, iov: *const iovec, count: c_int, off: off64_t, flags: c_int) -> ssize_t =
        pwritev_any(fd, iov, count, Some(off), flags);
    lseek(fd: c_int, off: off_t, whence: c_int) -> off_t = lseek_any(fd, off, whence);
    lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t = lseek_any(fd, off, whence);
    fsync(fd: c_int) -> c_int = sync_any(fd, true);
    fdatasync(fd: c_int) -> c_int = sync_any(fd, false);
    ftruncate(fd: c_int, len: off_t) -> c_int = cached(fd).map(|(_, d, _inside)| shielded(|| set_len(&d, len)));
    ftruncate64(fd: c_int, len: off64_t) -> c_int = cached(fd).map(|(_, d, _inside)| shielded(|| set_len(&d, len)));
    fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| fallocate_cached(fd, &d, mode, off, len)));
    fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| fallocate_cached(fd, &d, mode, off, len)));
    posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| posix_fallocate_cached(fd, &d, off, len)));
    posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| posix_fallocate_cached(fd, &d, off, len)));
    posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| fadvise_cached(fd, &d, off, len, advice)));
    posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int =
        cached(fd).map(|(_, d, _inside)| shielded(|| fadvise_cached(fd, &d, off, len, advice)));
}

/// lseek of a cached file (`lseek_cached`), in the C convention.
fn lseek_any(fd: c_int, off: i64, whence: c_int) -> Option<i64> {
    let (_, d, _inside) = cached(fd)?;
    Some(shielded(|| match lseek_cached(fd, &d, off, whence) {
        Ok(at) => at as i64,
        Err(code) => errno::fail(code),
    }))
}

/// fsync (`all`) or fdatasync of a cached file.
fn sync_any(fd: c_int, all: bool) -> Option<c_int> {
    let (shim, d, _inside) = cached(fd)?;
    Some(shielded(|| {
        shim.counters.syncs.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
        status(d.shared.file().sync_as(all, &d.reported))
    }))
}

// The _FORTIFY_SOURCE forms, and the calls on a path or on no descriptor: called by C with
// what their prototypes say.

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, len: size_t, _buflen: size_t) -> ssize_t {
    // SAFETY: the caller's read(2) arguments (the object size is libc's check to make).
    unsafe { read(fd, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    off: off_t,
    _buflen: size_t,
) -> ssize_t {
    // SAFETY: as in `__read_chk`, for pread(2).
    unsafe { pread(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    off: off64_t,
    _buflen: size_t,
) -> ssize_t {
    // SAFETY: as in `__read_chk`, for pread64.
    unsafe { pread64(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: `path` is the caller's C string, as truncate(2) takes it.
    truncate_cached(path, len, unsafe { real::truncate()(path, len) })
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    // SAFETY: as in `truncate`.
    truncate_cached(path, len, unsafe { real::truncate64()(path, len) })
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    sync_everything();
    // SAFETY: no arguments.
    unsafe { real::sync()() }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    sync_everything();
    // SAFETY: no memory arguments.
    unsafe { real::syncfs()(fd) }
}
