//! Copies the kernel makes between descriptors: `sendfile`, `copy_file_range` and `splice`.
//! Out of a cached file, the kernel reads the OS file, so the file is written back first.
//! Into a cached file, the kernel would write the OS file behind the cache (and a write-back
//! would then overwrite what it wrote): the shim serves the copy itself, reading the source
//! (through the cache, if it is cached too) and writing through the cache, with the kernel's
//! rules for offsets, flags and errors.

use crate::errno;
use crate::open::{cached, write_back};
use crate::real::{self, twins};
use libc::{c_int, c_uint, c_void, loff_t, off64_t, off_t, size_t, ssize_t};

/// Bytes moved per read and write of a served copy.
const CHUNK: usize = 128 << 10;

/// What a served copy needs to know of its destination: None if it is not cached.
struct Dest {
    append: bool,
    writable: bool,
}

fn dest(fd: c_int) -> Option<Dest> {
    let (_, d, _inside) = cached(fd)?;
    // Relaxed: the caller's own flag, ordered by the caller.
    Some(Dest { append: d.append.load(std::sync::atomic::Ordering::Relaxed), writable: d.writable })
}

/// Reads up to `buf.len()` bytes from `fd`, at `*off` (moved) or at its offset; through the
/// shim's own entry points, so a cached source is read through the cache.
///
/// # Safety
/// `off` is null or valid.
unsafe fn read_some(fd: c_int, buf: &mut [u8], off: *mut i64) -> ssize_t {
    let p = buf.as_mut_ptr().cast::<c_void>();
    if off.is_null() {
        // SAFETY: `buf` is writable for its length.
        return unsafe { crate::data::read(fd, p, buf.len()) };
    }
    // SAFETY: as above; `off` valid by the contract.
    let n = unsafe { crate::data::pread64(fd, p, buf.len(), *off) };
    if n > 0 {
        // SAFETY: as above.
        unsafe { *off += n as i64 };
    }
    n
}

/// Writes all of `buf` to `fd` at `*off` (moved) or at its offset, through the shim. Returns
/// the bytes written, or -1 (errno set) if none were.
///
/// # Safety
/// `off` is null or valid.
unsafe fn write_all(fd: c_int, buf: &[u8], off: *mut i64) -> ssize_t {
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &buf[done..];
        let p = rest.as_ptr().cast::<c_void>();
        let n = if off.is_null() {
            // SAFETY: `rest` is readable for its length.
            unsafe { crate::data::write(fd, p, rest.len()) }
        } else {
            // SAFETY: as above; `off` valid by the contract.
            let n = unsafe { crate::data::pwrite64(fd, p, rest.len(), *off) };
            if n > 0 {
                // SAFETY: as above.
                unsafe { *off += n as i64 };
            }
            n
        };
        if n <= 0 {
            return if done > 0 { done as ssize_t } else { n.min(-1) };
        }
        done += n as usize;
    }
    done as ssize_t
}

/// Copies up to `len` bytes from `in_fd` to the cached `out_fd`, chunk by chunk, until the
/// source ends or `len` is reached. An error after some bytes ends it with their count.
///
/// # Safety
/// `in_off` and `out_off` are null or valid.
unsafe fn serve(in_fd: c_int, in_off: *mut i64, out_fd: c_int, out_off: *mut i64, len: usize) -> ssize_t {
    let mut buf = vec![0u8; len.clamp(1, CHUNK)];
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(buf.len());
        // SAFETY: the caller's offsets.
        let got = unsafe { read_some(in_fd, &mut buf[..want], in_off) };
        if got <= 0 {
            return if done > 0 || got == 0 { done as ssize_t } else { got };
        }
        // SAFETY: as above.
        let put = unsafe { write_all(out_fd, &buf[..got as usize], out_off) };
        if put < 0 {
            return if done > 0 { done as ssize_t } else { put };
        }
        done += put as usize;
        if (put as usize) < got as usize {
            break;
        }
    }
    done as ssize_t
}

/// Whether `a` and `b` are descriptors of the same file.
fn same_file(a: c_int, b: c_int) -> bool {
    match (crate::os::fd_stat(a), crate::os::fd_stat(b)) {
        (Some(x), Some(y)) => (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino),
        _ => false,
    }
}

/// A copy the kernel makes, into a file that is not cached: from the source as the cache
/// holds it (written back first).
fn by_the_kernel(in_fd: c_int, copy: impl FnOnce() -> ssize_t) -> ssize_t {
    match write_back(in_fd) {
        Ok(()) => copy(),
        Err(code) => errno::fail(code),
    }
}

/// sendfile(2) into a cached file: EINVAL for an O_APPEND destination, as the kernel says.
unsafe fn sendfile_any(out_fd: c_int, in_fd: c_int, off: *mut i64, count: size_t) -> Option<ssize_t> {
    let Some(d) = dest(out_fd) else {
        return write_back(in_fd).err().map(errno::fail);
    };
    if d.append {
        return Some(errno::fail(libc::EINVAL));
    }
    if !d.writable {
        return Some(errno::fail(libc::EBADF));
    }
    // SAFETY: the caller's offset pointer.
    Some(unsafe { serve(in_fd, off, out_fd, std::ptr::null_mut(), count) })
}

// Every function below is called by C with what its prototype says; offsets are read and
// written only where the kernel would.

twins! {
    /// sendfile(2), served from the cache when the input is a cached file.
    fn sendfile, sendfile64(out_fd: c_int, in_fd: c_int, off: *mut off_t, count: size_t) -> ssize_t = |real| {
        // SAFETY: `off` is the caller's, null or valid, as sendfile(2) takes it.
        unsafe { sendfile_any(out_fd, in_fd, off, count).unwrap_or_else(|| real(out_fd, in_fd, off, count)) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    in_fd: c_int,
    in_off: *mut off64_t,
    out_fd: c_int,
    out_off: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let Some(d) = dest(out_fd) else {
        // SAFETY: the caller's arguments, offsets null or valid, as copy_file_range(2) takes them.
        return by_the_kernel(in_fd, || unsafe {
            real::copy_file_range()(in_fd, in_off, out_fd, out_off, len, flags)
        });
    };
    if flags != 0 {
        return errno::fail(libc::EINVAL);
    }
    if d.append || !d.writable {
        return errno::fail(libc::EBADF);
    }
    if same_file(in_fd, out_fd) {
        // Overlapping ranges of one file are EINVAL; the kernel's own check needs the offsets
        // each call would use, so only disjoint explicit ranges are served.
        // SAFETY: the caller's offsets, each null or valid.
        let (Some(a), Some(b)) = (unsafe { in_off.as_ref() }, unsafe { out_off.as_ref() }) else {
            return errno::fail(libc::EINVAL);
        };
        if a.saturating_add(len as i64) > *b && b.saturating_add(len as i64) > *a {
            return errno::fail(libc::EINVAL);
        }
    }
    // SAFETY: as above.
    unsafe { serve(in_fd, in_off, out_fd, out_off, len) }
}

/// splice(2). Into a cached file from a pipe: served (one read of what the pipe holds, as the
/// kernel moves what is there, then written through the cache); out of one: written back first.
#[no_mangle]
pub unsafe extern "C" fn splice(
    in_fd: c_int,
    in_off: *mut loff_t,
    out_fd: c_int,
    out_off: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let Some(d) = dest(out_fd) else {
        // SAFETY: the caller's arguments, offsets null or valid, as splice(2) takes them.
        return by_the_kernel(in_fd, || unsafe {
            real::splice()(in_fd, in_off, out_fd, out_off, len, flags)
        });
    };
    let is_pipe = crate::os::fd_stat(in_fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO);
    if !is_pipe {
        return errno::fail(libc::EINVAL); // one end must be a pipe
    }
    if !in_off.is_null() {
        return errno::fail(libc::ESPIPE);
    }
    if d.append {
        return errno::fail(libc::EINVAL);
    }
    if !d.writable {
        return errno::fail(libc::EBADF);
    }
    if flags & libc::SPLICE_F_NONBLOCK != 0 {
        let mut p = libc::pollfd { fd: in_fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 0) } == 0 {
            return errno::fail(libc::EAGAIN);
        }
    }
    let mut buf = vec![0u8; len.clamp(1, CHUNK)];
    // SAFETY: `buf` is writable for the length given.
    let got = unsafe { real::read()(in_fd, buf.as_mut_ptr().cast(), buf.len().min(len)) };
    if got <= 0 {
        return got;
    }
    // SAFETY: `out_off` is the caller's, null or valid.
    unsafe { write_all(out_fd, &buf[..got as usize], out_off) }
}
