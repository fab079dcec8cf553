//! Space set aside on the file system for bytes the cache holds and has not written back, so
//! that a write which cannot be stored fails at `write`, with ENOSPC, as the kernel's does:
//! a file system with delayed allocation reserves blocks when `write(2)` copies into its page
//! cache, and a cache in user space that only writes back later must reserve them itself, or
//! the error surfaces at write-back, sync or close, where most programs do not look.
//!
//! A write that extends the reserved part of a file reserves past its end (`fallocate` with
//! `FALLOC_FL_KEEP_SIZE`: blocks set aside, size unchanged), as far again as the file is long
//! up to `AHEAD`, or a sixteenth of its length up to `MOST_AHEAD` if that is more, so that
//! appends make one call per MiB (per 64 MiB past a GiB) while a small file holds at most its
//! own size again and a large one a sixteenth more (each call waits for the file's O_DIRECT
//! writes in flight: a call per MiB left a sequential writer's device idle a third of the
//! time); if that does not fit (or passes the largest file), just up to its end, so
//! it fails only when its own bytes do not fit, at the same write as with the kernel. What is
//! reserved past the end stays allocated until a shrink frees it: freeing it at close would
//! need a truncate, which could cut bytes another process appended meanwhile. A file system
//! without `fallocate` reserves nothing, and writes behave as before (errors at write-back).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// How far past a write's end a file's space is reserved at a time, at least (if the file is
/// that long).
pub const AHEAD: u64 = 1 << 20;
/// How far at most, for a file of 1 GiB and more.
pub const MOST_AHEAD: u64 = 64 << 20;

/// A reserved end meaning "the file system cannot reserve": never tried again (until a
/// shrink lowers it).
pub const UNSUPPORTED: u64 = u64::MAX;

/// Reserves a file's bytes up to at least `end` (at most `max`, its largest file), given that
/// everything below `reserved` already has its space: `set_aside(to)` reserves
/// `reserved..to` (of the file's length, on each of its backing files), tried past `end`, then,
/// if that does not fit, up to `end` alone. The new reserved end; `UNSUPPORTED` if the file
/// system cannot reserve; ENOSPC or EDQUOT if the bytes up to `end` do not fit.
pub fn reserve(
    reserved: u64,
    end: u64,
    max: u64,
    mut set_aside: impl FnMut(u64) -> io::Result<()>,
) -> io::Result<u64> {
    if end <= reserved {
        return Ok(reserved);
    }
    let past = end.min(AHEAD).max((end / 16).min(MOST_AHEAD));
    let ahead = end.saturating_add(past).next_multiple_of(4096).min(max).max(end);
    let unsupported = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS));
    match set_aside(ahead) {
        Ok(()) => Ok(ahead),
        Err(e) if ahead > end && (is_no_space(&e) || e.raw_os_error() == Some(libc::EFBIG)) => {
            set_aside(end).map(|()| end)
        }
        Err(e) if unsupported(&e) => Ok(UNSUPPORTED),
        Err(e) => Err(e),
    }
}

/// Space for a write of `len` bytes at `offset` of a file of `page`-byte pages whose space is
/// reserved below `reserved` (`reserve`, up to `max`): `set_aside(from, to)` reserves bytes
/// `from..to` of the file. How many of the bytes fit (all, or, when the file system is full,
/// those below `reserved`: a short write) and the new reserved end; ENOSPC or EDQUOT if none
/// fits.
pub fn for_write(
    reserved: u64,
    offset: u64,
    len: usize,
    page: u64,
    max: u64,
    mut set_aside: impl FnMut(u64, u64) -> io::Result<()>,
) -> io::Result<(usize, u64)> {
    let from = (offset / page * page).max(reserved);
    match reserve(reserved, offset + len as u64, max, |to| set_aside(from, to)) {
        Ok(r) => Ok((len, r)),
        Err(e) if is_no_space(&e) && offset < reserved => Ok(((reserved - offset) as usize, reserved)),
        Err(e) => Err(e),
    }
}

/// Whether `e` says the file system is out of space (or of the user's quota).
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Sets blocks aside for bytes `from..to` of `file` without changing its size (fallocate with
/// `FALLOC_FL_KEEP_SIZE`).
pub fn set_aside(file: &File, from: u64, to: u64) -> io::Result<()> {
    if to <= from {
        return Ok(());
    }
    let (Ok(at), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    loop {
        // SAFETY: fallocate on a descriptor the caller holds open; it touches no memory.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, at, len) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_reservation_sets_blocks_aside_without_growing_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        let end = reserve(0, 5000, u64::MAX, |to| set_aside(&f, 0, to)).unwrap();
        if end == UNSUPPORTED {
            return; // a file system without fallocate: nothing to see
        }
        assert_eq!(end, 12288, "as far again as the file, in pages");
        assert_eq!(f.metadata().unwrap().len(), 0, "the size is unchanged");
        assert!(f.metadata().unwrap().blocks() * 512 >= end);
        assert_eq!(reserve(end, 6000, u64::MAX, |_| unreachable!()).unwrap(), end, "already reserved");
        assert_eq!(
            reserve(end, 8 << 20, u64::MAX, |to| set_aside(&f, end, to)).unwrap(),
            9 << 20,
            "AHEAD at most"
        );
        assert_eq!(
            reserve(9 << 20, 32 << 20, u64::MAX, |to| set_aside(&f, 9 << 20, to)).unwrap(),
            34 << 20,
            "a sixteenth of a longer file"
        );
        assert_eq!(
            reserve(34 << 20, 2 << 30, u64::MAX, |_| Ok(())).unwrap(),
            (2 << 30) + (64 << 20),
            "64 MiB at most"
        );
        assert_eq!(
            reserve(9 << 20, 10 << 20, 10 << 20, |to| set_aside(&f, 9 << 20, to)).unwrap(),
            10 << 20,
            "never past the largest file"
        );
        f.set_len(0).unwrap();
        assert_eq!(f.metadata().unwrap().blocks(), 0, "a shrink frees it");
    }
}
