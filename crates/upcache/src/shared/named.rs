//! The service's segment as a file: `/dev/shm/upcache-<uid>-<hash of the socket's path>`
//! (`Segment::create_in_tmpfs`, named once whole). A memfd dies with the last process that
//! maps it, dirty pages and all; this file outlives the death of every process (as the
//! kernel's page cache does), and the next service started on the socket adopts it. The
//! service keeps it (`shm::take_keeper`, a lock that dies with it), so a service started while
//! another lives (whose socket was removed and made again) takes the name for a new file
//! instead of sharing the live one's. The file goes when its service exits with nothing
//! dirty and no process attached; one whose service was killed with nothing in it stays
//! until a service of that socket starts again.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::holder::identity;

/// Where the tmpfs whose files outlive every process is mounted.
const SHM_DIR: &str = "/dev/shm";

/// The file of the segment of the service at `socket`, the same for every service started
/// there; None if `/dev/shm` is not a tmpfs. A stable hash (FNV-1a), as builds must agree.
pub fn segment_file(socket: &Path) -> Option<PathBuf> {
    if !std::fs::metadata(SHM_DIR).is_ok_and(|md| md.is_dir()) || !on_tmpfs(Path::new(SHM_DIR)) {
        return None;
    }
    let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let full = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()).join(socket.file_name()?);
    // The directory's identity too: one path in two mount namespaces that share /dev/shm
    // (a unit's private /tmp, a container) is two sockets.
    let id = std::fs::metadata(dir).map_or((0, 0), |m| (m.dev(), m.ino()));
    let bytes = full.as_os_str().as_encoded_bytes().iter().copied();
    let hash = bytes
        .chain(id.0.to_le_bytes())
        .chain(id.1.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    // SAFETY: geteuid has no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    Some(Path::new(SHM_DIR).join(format!("upcache-{uid}-{hash:016x}")))
}

/// Whether `path` is on a tmpfs.
pub(crate) fn on_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a C string we own; statfs writes one statfs into `st`, read only on success.
    unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) == 0 && st.assume_init().f_type == libc::TMPFS_MAGIC }
}

/// The segment file at `path`, opened (not through a symbolic link), if there is one.
pub(crate) fn open_named(path: &Path) -> Option<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()
        .map(OwnedFd::from)
}

/// Whether `fd` is a file of this user's that no one else may open (a cache file of ours,
/// not one another user put at our name).
pub(crate) fn private_to_me(fd: &OwnedFd) -> bool {
    let Ok(md) = fd.try_clone().map(std::fs::File::from).and_then(|f| f.metadata()) else { return false };
    // SAFETY: geteuid has no arguments and cannot fail.
    md.is_file() && md.uid() == unsafe { libc::geteuid() } && md.mode() & 0o077 == 0
}

/// Whether the segment file at `path` is `seg`.
pub(crate) fn is_named(path: &Path, seg: &impl AsRawFd) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|md| identity(seg) == Some((md.dev(), md.ino())))
}

/// Removes the segment file at `path` if it is `seg` (and not one made since); whether it did.
pub(crate) fn remove_named(path: &Path, seg: &impl AsRawFd) -> bool {
    is_named(path, seg) && std::fs::remove_file(path).is_ok()
}
