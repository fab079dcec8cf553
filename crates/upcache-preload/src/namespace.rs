//! Unlinks and renames: a file kept after its last close (`retain.rs`) that loses its name
//! is dropped, so that the cache's descriptor does not keep its space allocated.

use crate::guard;
use crate::real;
use crate::shim;
use libc::{c_char, c_int, c_uint};

/// (device, inode) of what `path` (relative to `dirfd`) names, not following a last symlink.
fn named(dirfd: c_int, path: *const c_char) -> Option<(u64, u64)> {
    shim::current()?;
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: the caller's path; `st` is writable stat64 storage.
    let found = unsafe { real::fstatat64()(dirfd, path, st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) } == 0;
    // SAFETY: filled on success.
    found.then(|| unsafe { st.assume_init() }).map(|st| (st.st_dev, st.st_ino))
}

/// After `result` (0: the name is gone), drops the kept copy of `key`.
fn dropped(key: Option<(u64, u64)>, result: c_int) -> c_int {
    if let (0, Some(key), Some(shim)) = (result, key, shim::current()) {
        let _inside = guard::enter();
        shim.forget_kept(key);
    }
    result
}

// Every function below is called by C with what its prototype says: its unsafe blocks only
// pass the arguments on.

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    let key = named(libc::AT_FDCWD, path);
    // SAFETY: `path` is the caller's C string, passed as unlink(2) takes it.
    dropped(key, unsafe { real::unlink()(path) })
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let key = named(dirfd, path);
    // SAFETY: the caller's directory descriptor, C string and flags, passed on as given.
    dropped(key, unsafe { real::unlinkat()(dirfd, path, flags) })
}

/// stdio's remove (unlink or rmdir inside libc).
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    let key = named(libc::AT_FDCWD, path);
    // SAFETY: `path` is the caller's C string, passed as remove(3) takes it.
    dropped(key, unsafe { real::remove()(path) })
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    let key = named(libc::AT_FDCWD, new);
    // SAFETY: the caller's two C strings, passed as rename(2) takes them.
    dropped(key, unsafe { real::rename()(old, new) })
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> c_int {
    let key = named(newdir, new);
    // SAFETY: the caller's descriptors and C strings, passed as renameat(2) takes them.
    dropped(key, unsafe { real::renameat()(olddir, old, newdir, new) })
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    // RENAME_EXCHANGE keeps both files.
    let key = if flags & libc::RENAME_EXCHANGE != 0 { None } else { named(newdir, new) };
    // SAFETY: the caller's descriptors, C strings and flags, passed as renameat2(2) takes them.
    dropped(key, unsafe { real::renameat2()(olddir, old, newdir, new, flags) })
}
