//! The stat family: the OS's answer, with the size of a cached file made its cached length
//! (the OS file's size lags until write-back).

use crate::guard;
use crate::open::cached;
use crate::real;
use crate::shim;
use libc::{c_char, c_int, c_uint};

/// The size to report for a cached file whose OS file is `os_size` bytes: its cached length,
/// after taking in growth by another process (`File::refresh_len`), which a larger OS size
/// may be (or only the zeros of a write-back's last page). A smaller one is most often the
/// cache's pages not yet written back; another program's truncate is seen by the looks
/// (`SharedFile::look_outside`).
fn size_of(file: &crate::backend::File, os_size: i64) -> u64 {
    let len = file.len();
    if os_size as u64 > len {
        return file.refresh_len().unwrap_or(len);
    }
    len
}

/// The size to report for the file (device, inode), if a descriptor of it is open.
fn cached_len(dev: u64, ino: u64, os_size: i64) -> Option<u64> {
    let _inside = guard::enter()?;
    Some(size_of(shim::current()?.lookup((dev, ino))?.file(), os_size))
}

/// Both `stat` and `stat64` have these fields (one layout on 64-bit Linux).
trait Sized_ {
    fn key(&self) -> (u64, u64);
    fn size(&self) -> i64;
    fn set_size(&mut self, len: u64);
}

impl Sized_ for libc::stat {
    fn key(&self) -> (u64, u64) {
        (self.st_dev, self.st_ino)
    }
    fn size(&self) -> i64 {
        self.st_size
    }
    fn set_size(&mut self, len: u64) {
        self.st_size = len as i64;
    }
}

impl Sized_ for libc::stat64 {
    fn key(&self) -> (u64, u64) {
        (self.st_dev, self.st_ino)
    }
    fn size(&self) -> i64 {
        self.st_size
    }
    fn set_size(&mut self, len: u64) {
        self.st_size = len as i64;
    }
}

/// After a successful stat into `st`: the cached length, if the file is cached.
fn fix<S: Sized_>(result: c_int, st: *mut S) -> c_int {
    if result != 0 || st.is_null() || !shim::enabled_quick() {
        return result;
    }
    // SAFETY: libc just filled `*st` (result 0), the caller's writable stat buffer.
    let st = unsafe { &mut *st };
    let (dev, ino) = st.key();
    if let Some(len) = cached_len(dev, ino, st.size()) {
        st.set_size(len);
    }
    result
}

/// After a successful fstat into `st`: the cached size, if `fd` is a cached file's.
fn fix_fd<S: Sized_>(result: c_int, fd: c_int, st: *mut S) -> c_int {
    if result != 0 || st.is_null() {
        return result;
    }
    if let Some((_, d, _inside)) = cached(fd) {
        // SAFETY: libc just filled `*st` (result 0), the caller's writable stat buffer.
        let st = unsafe { &mut *st };
        st.set_size(size_of(d.shared.file(), st.size()));
    }
    result
}

/// The stat family: libc's answer, with the size fixed (`fix`, `fix_fd`).
macro_rules! stats {
    ($($name:ident($($arg:ident: $ty:ty),*) fixed by $fix:ident($($with:ident),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the caller's arguments, as this function's C prototype has them (a C
            // string path, a writable stat buffer), passed on unchanged.
            let r = unsafe { real::$name()($($arg),*) };
            $fix(r, $($with),*)
        }
    )*};
}

stats! {
    fstat(fd: c_int, st: *mut libc::stat) fixed by fix_fd(fd, st);
    fstat64(fd: c_int, st: *mut libc::stat64) fixed by fix_fd(fd, st);
    stat(path: *const c_char, st: *mut libc::stat) fixed by fix(st);
    stat64(path: *const c_char, st: *mut libc::stat64) fixed by fix(st);
    lstat(path: *const c_char, st: *mut libc::stat) fixed by fix(st);
    lstat64(path: *const c_char, st: *mut libc::stat64) fixed by fix(st);
    fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) fixed by fix(st);
    fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) fixed by fix(st);
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    // SAFETY: the caller's arguments, as statx(2) takes them, passed on unchanged.
    let r = unsafe { real::statx()(dirfd, path, flags, mask, stx) };
    if r == 0 && !stx.is_null() && shim::enabled_quick() {
        // SAFETY: libc just filled `*stx` (r 0), the caller's writable statx buffer.
        let s = unsafe { &mut *stx };
        if s.stx_mask & libc::STATX_SIZE != 0 {
            let dev = libc::makedev(s.stx_dev_major, s.stx_dev_minor);
            if let Some(len) = cached_len(dev, s.stx_ino, s.stx_size as i64) {
                s.stx_size = len;
            }
        }
    }
    r
}
