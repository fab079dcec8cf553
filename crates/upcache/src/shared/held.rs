//! The cache's own descriptors of a program's files, closed only where closing them cannot
//! drop the program's POSIX record locks.
//!
//! Closing *any* descriptor of an inode releases every `fcntl`/`lockf` record lock the process
//! holds on it (POSIX; `flock` and OFD locks are unaffected). The cache opens descriptors of
//! its own (`SharedFile::open`), in the program's process, and closes them when the file is
//! closed, demoted or reopened for writing: if the program holds a record lock on the file at
//! that moment, another process could then take it (SQLite's locks, issue 33). So the shim
//! notes every inode the program locks ([`note_lock`], before the lock is taken), and a
//! descriptor of a noted inode is *parked* instead of closed, until the program itself closes
//! a descriptor of that inode ([`program_closed`]), which releases its locks anyway. SQLite's
//! unix VFS defers its closes the same way. A process that never locks closes at once.
//!
//! The registry's mutex is held across a drop's check and close, and across a note, so a close
//! either happens before the note (and so before the lock is taken) or sees it.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Inodes (device, inode) the program has taken record locks on since it last closed one of
/// their descriptors, with the cache's descriptors of each parked meanwhile.
type Parked = Option<HashMap<(u64, u64), Vec<OwnedFd>>>;

static LOCKED: Mutex<Parked> = Mutex::new(None);
/// Whether `LOCKED` may be non-empty: the shim's close path skips its fstat while not.
static ANY: AtomicBool = AtomicBool::new(false);

fn registry() -> std::sync::MutexGuard<'static, Parked> {
    LOCKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The program is about to take a POSIX record lock on the inode (device, inode): from now on
/// the cache parks its descriptors of it instead of closing them.
pub fn note_lock(dev: u64, ino: u64) {
    let mut locked = registry();
    locked.get_or_insert_with(HashMap::new).entry((dev, ino)).or_default();
    // Relaxed: a hint for `locks_noted`; the registry itself is read under its mutex.
    ANY.store(true, Ordering::Relaxed);
}

/// The program is closing one of its descriptors of the inode, which releases its record
/// locks on it: the cache's parked descriptors of it are closed (before the program's close,
/// so that no lock taken after it is dropped by ours), and it is no longer noted.
pub fn program_closed(dev: u64, ino: u64) {
    let mut locked = registry();
    if let Some(map) = locked.as_mut() {
        for fd in map.remove(&(dev, ino)).unwrap_or_default() {
            close(fd);
        }
        if map.is_empty() {
            ANY.store(false, Ordering::Relaxed); // Relaxed: as in `note_lock`
        }
    }
}

/// Closes `fd` with the system call itself: libc's `close` is the shim's in a shimmed process,
/// whose record-lock bookkeeping would take the registry's mutex, which we hold.
fn close(fd: OwnedFd) {
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is ours (taken out of its `OwnedFd`), closed once.
    unsafe { libc::syscall(libc::SYS_close, raw) };
}

/// The registry's mutex and the mapped segments' list, held by a thread that forks until the
/// fork is over, so that no child starts with either held by a thread it does not have.
pub struct ForkHold {
    _held: std::sync::MutexGuard<'static, Parked>,
    _mapped: std::sync::MutexGuard<'static, Vec<crate::shm::Mapped>>,
}

/// Takes the registry's mutex for a fork ([`ForkHold`]), and the list of mapped segments'
/// (`shm::hold_mapped_for_fork`), in that order.
pub fn hold_for_fork() -> ForkHold {
    let held = registry();
    ForkHold { _held: held, _mapped: crate::shm::hold_mapped_for_fork() }
}

/// Whether any inode is noted: a close of a descriptor the shim does not track needs an fstat
/// to find its inode only then.
pub fn locks_noted() -> bool {
    // Relaxed: a hint; a lock noted meanwhile is the program's own race with its close.
    ANY.load(Ordering::Relaxed)
}

/// Closes `fd`, a descriptor of the inode `key` the cache opened, or parks it while the
/// program may hold record locks on the inode.
pub(crate) fn release(key: (u64, u64), fd: OwnedFd) {
    let mut locked = registry();
    match locked.as_mut().and_then(|m| m.get_mut(&key)) {
        Some(parked) => parked.push(fd),
        None => close(fd), // under the mutex: before any note that follows
    }
}

/// `fd`'s file opened again for writing with `O_DIRECT` and without blocking (a description
/// of its own), through `/proc/self/fd`; None if refused (no `O_DIRECT` on its file system, a
/// lease, no `/proc`, or the permission is gone). The system call itself, not libc's `open`:
/// in a process the shim serves, a thread outside the shim's own calls (the service
/// watcher's write-back) would have the descriptor taken for one the program opened.
pub(crate) fn reopen_direct(fd: &std::fs::File) -> Option<std::fs::File> {
    reopen(fd, libc::O_WRONLY | libc::O_DIRECT | libc::O_NONBLOCK)
}

/// `fd`'s file opened again through `/proc/self/fd` with `flags` (and `O_CLOEXEC`), as
/// [`reopen_direct`] says.
fn reopen(fd: &std::fs::File, flags: i32) -> Option<std::fs::File> {
    use std::os::fd::FromRawFd;
    let path = format!("/proc/self/fd/{}\0", std::os::fd::AsRawFd::as_raw_fd(fd));
    // SAFETY: `path` is NUL-terminated and lives across the call.
    let raw =
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags | libc::O_CLOEXEC) }
            as i32;
    // SAFETY: a fresh descriptor, ours alone.
    (raw >= 0).then(|| std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// A descriptor the cache opened of a program's file (see the module's documentation), and
/// the file opened again with `O_DIRECT` for writing whole pages back and for loading pages,
/// each if asked for once.
pub(crate) struct HeldFd {
    file: ManuallyDrop<std::fs::File>,
    key: (u64, u64),
    direct: std::sync::OnceLock<Option<std::fs::File>>,
    direct_read: std::sync::OnceLock<Option<std::fs::File>>,
    /// Set when a read through `direct_read` was refused (EINVAL: an alignment its file
    /// system wants and a page does not give): loads go the usual way from then on.
    direct_read_refused: std::sync::atomic::AtomicBool,
}

/// `low` at a number out of the program's way if one is free (`low` then closes as a held
/// descriptor does), else `low`.
fn out_of_the_way(low: std::fs::File, key: (u64, u64)) -> std::fs::File {
    match crate::shm::high_fd::copy_out_of_the_way(&low) {
        Some(high) => {
            release(key, OwnedFd::from(low));
            std::fs::File::from(high)
        }
        None => low,
    }
}

impl HeldFd {
    pub(crate) fn new(file: std::fs::File, key: (u64, u64)) -> HeldFd {
        HeldFd {
            file: ManuallyDrop::new(file),
            key,
            direct: std::sync::OnceLock::new(),
            direct_read: std::sync::OnceLock::new(),
            direct_read_refused: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The file opened again for reading with `O_DIRECT`, as [`Self::direct`] is for writing:
    /// misses load pages through it past the kernel's page cache
    /// (`SharedConfig::direct_loads`), so a page is neither read into the kernel's cache nor
    /// copied a second time. None if refused.
    pub(crate) fn direct_read(&self) -> Option<&std::fs::File> {
        // Relaxed: a hint; a load that misses it is refused once more and goes the usual way.
        if self.direct_read_refused.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.direct_read
            .get_or_init(|| {
                let low = reopen(&self.file, libc::O_RDONLY | libc::O_DIRECT | libc::O_NONBLOCK)?;
                Some(out_of_the_way(low, self.key))
            })
            .as_ref()
    }

    /// The file opened again for writing with `O_DIRECT` (a description of its own), at a
    /// number out of the program's way, opened at the first call: a writer writes whole pages
    /// back through it past the kernel's page cache, as the service does (`Lent`), so that
    /// its write-back neither copies each page a second time nor is throttled as the kernel's
    /// dirty pages are. None if the file system refuses (or the descriptor is not writable).
    /// Closed as the descriptor is, so never while the program may hold a record lock.
    pub(crate) fn direct(&self) -> Option<&std::fs::File> {
        self.direct.get_or_init(|| Some(out_of_the_way(reopen_direct(&self.file)?, self.key))).as_ref()
    }

    /// Loads go the usual way from now on ([`Self::direct_read`] None).
    pub(crate) fn refuse_direct_read(&self) {
        // Relaxed: see `direct_read`.
        self.direct_read_refused.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The inode (device, inode) it is a descriptor of.
    pub(crate) fn key(&self) -> (u64, u64) {
        self.key
    }
}

impl std::ops::Deref for HeldFd {
    type Target = std::fs::File;
    fn deref(&self) -> &std::fs::File {
        &self.file
    }
}

impl Drop for HeldFd {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used after.
        let file = unsafe { ManuallyDrop::take(&mut self.file) };
        release(self.key, OwnedFd::from(file));
        for direct in [self.direct.take(), self.direct_read.take()].into_iter().flatten().flatten() {
            release(self.key, OwnedFd::from(direct));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    /// Whether `fd` is (still) a descriptor of `path`: by its target, not its number, which
    /// another test's thread may take as soon as it is closed.
    fn is_open(fd: i32, path: &std::path::Path) -> bool {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|t| t == path)
    }

    /// A descriptor of an inode nobody noted closes at once; one of a noted inode stays open
    /// until the program closes a descriptor of it.
    #[test]
    fn a_descriptor_of_a_locked_inode_waits_for_the_programs_close() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("p"), dir.path().join("q"));
        std::fs::write(&p, b"p").unwrap();
        std::fs::write(&q, b"q").unwrap();
        let key = |path: &std::path::Path| {
            let md = std::fs::metadata(path).unwrap();
            (md.dev(), md.ino())
        };
        let open = |path: &std::path::Path| {
            let f = std::fs::File::open(path).unwrap();
            let raw = f.as_raw_fd();
            (HeldFd::new(f, key(path)), raw)
        };
        let (free, free_fd) = open(&q);
        drop(free);
        assert!(!is_open(free_fd, &q), "an inode without locks: closed at once");
        note_lock(key(&p).0, key(&p).1);
        assert!(locks_noted());
        let (held, held_fd) = open(&p);
        drop(held);
        assert!(is_open(held_fd, &p), "parked while the program may hold a lock");
        program_closed(key(&p).0, key(&p).1);
        assert!(!is_open(held_fd, &p), "closed with the program's own close");
    }
}
