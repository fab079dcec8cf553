//! The program's POSIX record locks (`fcntl` F_SETLK/F_SETLKW, `lockf`), which closing *any*
//! descriptor of a file releases: the cache's own descriptors of a file the program has
//! locked are parked instead of closed until the program closes one of its own
//! (`upcache::shared::note_lock`), so that no demotion, reopen or close of the cache drops
//! them. Noted before the lock is taken; released by the program's close, before libc's.
//!
//! A lock taken is also where a program that shares a file with another one synchronises
//! with it: the cache looks at the OS file then for changes made without it
//! (`SharedFile::look_outside`), as NFS revalidates a file when a lock is taken.

use crate::os::fd_stat;
use crate::real;
use libc::{c_int, off64_t, off_t};

/// The inode (device, inode) of the file open on `fd`, the table's if it caches it.
fn key_of(fd: c_int) -> Option<(u64, u64)> {
    if let Some(desc) = crate::shim::current().and_then(|s| s.table.get(fd)) {
        return Some(desc.shared.key());
    }
    fd_stat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// Before an `fcntl(fd, cmd, arg)`: a record lock (not an unlock) about to be taken is noted.
/// Only once the shim runs: before that the cache holds no descriptor of the program's.
pub(crate) fn before_fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) {
    if !crate::shim::enabled_quick() || !matches!(cmd, libc::F_SETLK | libc::F_SETLKW) || arg == 0 {
        return;
    }
    // SAFETY: for these commands the argument is the caller's `struct flock` pointer, which the
    // kernel reads too (a bad one other than null faults here instead of EFAULT, as the
    // shim's documentation says of bad pointers).
    let kind = unsafe { (*(arg as *const libc::flock)).l_type };
    if c_int::from(kind) != libc::F_UNLCK {
        note(fd);
    }
}

/// After the program took a lock (any kind) on `fd`: a change another program made to the file
/// without the cache before it released its own lock is seen from now on.
pub(crate) fn after_lock(fd: c_int) {
    if !crate::shim::enabled_quick() {
        return;
    }
    let Some(_inside) = crate::guard::enter() else { return };
    if let Some(desc) = crate::shim::current().and_then(|s| s.table.get(fd)) {
        // An error here is the next call's to meet: the lock is the program's.
        let _ = desc.shared.file().look_outside();
    }
}

/// After `fcntl(fd, cmd, arg)` returned `result`: a record lock taken is `after_lock`'s.
pub(crate) fn after_fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong, result: c_int) {
    let locking = matches!(cmd, libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW);
    if result < 0 || !locking || arg == 0 || !crate::shim::enabled_quick() {
        return;
    }
    // SAFETY: as in `before_fcntl`; the kernel has just read it.
    let kind = unsafe { (*(arg as *const libc::flock)).l_type };
    if c_int::from(kind) != libc::F_UNLCK {
        after_lock(fd);
    }
}

fn note(fd: c_int) {
    let Some(_inside) = crate::guard::enter() else { return };
    if let Some((dev, ino)) = key_of(fd) {
        upcache::shared::note_lock(dev, ino);
    }
}

/// Before the program closes `fd`: if it locked its file, its locks go with this close, and
/// so do the cache's parked descriptors of it (first, so none outlives a lock taken later).
pub(crate) fn before_close(fd: c_int) {
    if !upcache::shared::locks_noted() {
        return;
    }
    let Some(_inside) = crate::guard::enter() else { return };
    if let Some((dev, ino)) = key_of(fd) {
        upcache::shared::program_closed(dev, ino);
    }
}

/// `before_close` for every descriptor open in `first..=last` (a close_range or closefrom).
pub(crate) fn before_close_range(first: libc::c_uint, last: libc::c_uint) {
    if !upcache::shared::locks_noted() {
        return;
    }
    let Ok(open) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<c_int> = open
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<c_int>().ok())
        .filter(|&fd| (first..=last).contains(&(fd as libc::c_uint)))
        .collect();
    for fd in fds {
        before_close(fd);
    }
}

/// lockf(3) locks with fcntl inside libc, which the shim does not see: noted here.
fn before_lockf(fd: c_int, cmd: c_int) {
    if crate::shim::enabled_quick() && matches!(cmd, libc::F_LOCK | libc::F_TLOCK) {
        note(fd);
    }
}

fn after_lockf(fd: c_int, cmd: c_int, result: c_int) -> c_int {
    if result == 0 && matches!(cmd, libc::F_LOCK | libc::F_TLOCK) {
        after_lock(fd);
    }
    result
}

#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    before_lockf(fd, cmd);
    // SAFETY: no memory arguments.
    after_lockf(fd, cmd, unsafe { real::lockf()(fd, cmd, len) })
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    before_lockf(fd, cmd);
    // SAFETY: no memory arguments.
    after_lockf(fd, cmd, unsafe { real::lockf64()(fd, cmd, len) })
}

/// flock(2) locks are the open description's, which the cache's descriptors never share, so
/// nothing of the cache can drop them; a lock taken is looked after as the others are.
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, operation: c_int) -> c_int {
    // SAFETY: no memory arguments.
    let result = unsafe { real::flock()(fd, operation) };
    if result == 0 && operation & (libc::LOCK_SH | libc::LOCK_EX) != 0 {
        after_lock(fd);
    }
    result
}
