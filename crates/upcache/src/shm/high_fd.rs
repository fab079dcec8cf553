//! Descriptors the cache keeps for a long time, moved to high numbers: a program that the shim
//! serves picks small numbers itself (`exec 5<file` in a shell is `dup2(fd, 5)`), and would
//! otherwise replace the cache's segment, socket or file descriptor under it without a word.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The lowest number used: half the soft descriptor limit, at least 64 and at most 4096.
fn floor() -> i32 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass; nothing else.
    let soft =
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
    (soft / 2).clamp(64, 4096) as i32
}

/// `fd` moved to a number at or above `floor()` (close-on-exec); `fd` itself if no such number
/// is free.
pub fn out_of_the_way(fd: OwnedFd) -> OwnedFd {
    copy_out_of_the_way(&fd).unwrap_or(fd) // `fd` is closed by its drop if copied
}

/// A copy of `fd` at a number at or above `floor()` (close-on-exec), leaving `fd` open for the
/// caller to close when it may; None if `fd` is high already or no such number is free. The
/// system call itself, not libc's `fcntl`: in a process the shim serves, a thread outside the
/// shim's own calls (the service watcher's) would have the copy taken for the program's.
pub fn copy_out_of_the_way(fd: &impl AsRawFd) -> Option<OwnedFd> {
    if fd.as_raw_fd() >= floor() {
        return None;
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own makes a new one that we then own.
    let high =
        unsafe { libc::syscall(libc::SYS_fcntl, fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor()) } as i32;
    // SAFETY: `high`, if made, is a fresh descriptor, ours alone.
    (high >= 0).then(|| unsafe { OwnedFd::from_raw_fd(high) })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_low_descriptor_moves_up_and_stays_usable() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let moved = out_of_the_way(OwnedFd::from(f));
        assert!(moved.as_raw_fd() >= floor());
        let mut f = std::fs::File::from(moved);
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
        assert!(!s.is_empty());
    }
}
