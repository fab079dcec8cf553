//! Credential changes (setuid, setgid, their e/re/res kin, setgroups): the shared cache is one
//! user's, shared under the privileges the process had when it attached. Before a call that
//! changes them the process leaves it: every cached file is demoted (written back with the
//! privileges it still has, its descriptors handed to libc, which keeps them usable as the
//! kernel does) and the cache retired (`SharedCache::retire`: the mapping replaced by private
//! zeros, the segment's descriptor closed), so that no cached page of a file it could no
//! longer open, nor another process's unwritten bytes, stay within its reach. A call that
//! changes nothing (the ids it already has) leaves everything as it is; so does a private
//! cache, which holds only this process's own files.

use crate::real;
use libc::{c_int, gid_t, size_t, uid_t};

/// -1 as an id: "unchanged" in setreuid and kin.
const KEEP: u32 = u32::MAX;

fn current_uids() -> [u32; 3] {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable uid_t.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    [r, e, s]
}

fn current_gids() -> [u32; 3] {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable gid_t.
    unsafe { libc::getresgid(&mut r, &mut e, &mut s) };
    [r, e, s]
}

/// Whether asking for `want` (KEEP where unchanged) of `have` changes anything.
fn changes(want: &[u32], have: [u32; 3]) -> bool {
    want.iter().zip(have).any(|(&w, h)| w != KEEP && w != h)
}

/// Leaves the shared cache if `changing`, before the call that changes the credentials: this
/// process's attachment retired, and every segment it maps given up (a forked child's,
/// inherited from its parent before its own shim started, too). Err(EAGAIN) if a segment
/// could not be given up: the call then fails, changing nothing, rather than leave it in reach.
fn before(changing: bool) -> Result<(), c_int> {
    if !changing {
        return Ok(());
    }
    if crate::shim::enabled_quick() {
        crate::shim::leave_shared_cache("the process changes its user or groups");
    }
    if upcache::shared::SharedCache::forget_every_segment() {
        Ok(())
    } else {
        Err(libc::EAGAIN)
    }
}

/// `call()` after `before(changing)`, or -1 with its errno.
fn changed(changing: bool, call: impl FnOnce() -> c_int) -> c_int {
    match before(changing) {
        Ok(()) => call(),
        Err(code) => crate::errno::fail(code),
    }
}

#[no_mangle]
pub unsafe extern "C" fn setuid(uid: uid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[uid; 3], current_uids()), || unsafe { real::setuid()(uid) })
}

#[no_mangle]
pub unsafe extern "C" fn setgid(gid: gid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[gid; 3], current_gids()), || unsafe { real::setgid()(gid) })
}

#[no_mangle]
pub unsafe extern "C" fn seteuid(uid: uid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[KEEP, uid, KEEP], current_uids()), || unsafe { real::seteuid()(uid) })
}

#[no_mangle]
pub unsafe extern "C" fn setegid(gid: gid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[KEEP, gid, KEEP], current_gids()), || unsafe { real::setegid()(gid) })
}

#[no_mangle]
pub unsafe extern "C" fn setreuid(r: uid_t, e: uid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[r, e, KEEP], current_uids()), || unsafe { real::setreuid()(r, e) })
}

#[no_mangle]
pub unsafe extern "C" fn setregid(r: gid_t, e: gid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[r, e, KEEP], current_gids()), || unsafe { real::setregid()(r, e) })
}

#[no_mangle]
pub unsafe extern "C" fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[r, e, s], current_uids()), || unsafe { real::setresuid()(r, e, s) })
}

#[no_mangle]
pub unsafe extern "C" fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int {
    // SAFETY: no memory arguments.
    changed(changes(&[r, e, s], current_gids()), || unsafe { real::setresgid()(r, e, s) })
}

#[no_mangle]
pub unsafe extern "C" fn setgroups(n: size_t, list: *const gid_t) -> c_int {
    let want: &[gid_t] = match (n, list.is_null()) {
        (0, _) | (_, true) => &[],
        // SAFETY: the caller's array of `n` groups, as setgroups(2) reads it.
        _ => unsafe { std::slice::from_raw_parts(list, n) },
    };
    // SAFETY: a query (size 0, no buffer) then a buffer of the size it gave.
    let have = unsafe {
        let count = libc::getgroups(0, std::ptr::null_mut()).max(0) as usize;
        let mut have = vec![0 as gid_t; count];
        let got = libc::getgroups(count as c_int, have.as_mut_ptr());
        have.truncate(got.max(0) as usize);
        have
    };
    let (mut a, mut b) = (want.to_vec(), have);
    a.sort_unstable();
    b.sort_unstable();
    // SAFETY: the caller's arguments, passed on.
    changed(a != b, || unsafe { real::setgroups()(n, list) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_change_of_some_id_counts() {
        assert!(!changes(&[5; 3], [5, 5, 5]));
        assert!(changes(&[5; 3], [0, 0, 0]));
        assert!(!changes(&[KEEP, 5, KEEP], [0, 5, 0]));
        assert!(changes(&[KEEP, 6, KEEP], [0, 5, 0]));
        assert!(!changes(&[KEEP, KEEP, KEEP], [1, 2, 3]));
    }
}
