//! Device directories and the backing files inside them.
//!
//! Each cache file has one backing file per device, `f<id>.data` in that device's
//! directory, holding the file's stripe units for that device back to back (see
//! [`super::layout`]). Backing files are opened with O_DIRECT so that data is cached once,
//! by us; a file system that refuses O_DIRECT is an error unless the config allows buffered
//! backing files. Backing files are created with mode 0600.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::layout::DeviceId;
use crate::error::{Error, ErrorKind, Result};

pub(crate) mod gc_watch;
pub mod sim;

/// One open backing file: a cache file's share of one device.
#[derive(Debug)]
pub struct BackingFile {
    /// Shared with a simulated device's unflushed writes (`sim.rs`), which must restore
    /// bytes through it after the handle is gone.
    file: std::sync::Arc<File>,
    device: DeviceId,
    file_id: u64,
    /// Syncs of this file share flushes.
    flushes: super::flush_group::FlushGroup,
    /// Zeros written ahead of appends, and writes that may have changed metadata.
    zeros: super::zero_window::ZeroWindow,
    /// Opened with O_DIRECT (not the buffered fallback): a completed write is on the device.
    direct: bool,
    /// The simulated device the file is on, if it is one; the file holds its data.
    sim: Option<std::sync::Arc<sim::SimDevice>>,
}

impl BackingFile {
    /// The device this file is on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The cache file this backs.
    pub fn file_id(&self) -> u64 {
        self.file_id
    }

    /// The open OS file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file's shared flushes (see [`super::flush_group`]).
    pub fn flushes(&self) -> &super::flush_group::FlushGroup {
        &self.flushes
    }

    /// Whether writes bypass the page cache (O_DIRECT), so that a completed write needs only
    /// a device flush to be durable.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The open OS file, shared.
    pub(crate) fn shared_file(&self) -> &std::sync::Arc<File> {
        &self.file
    }

    /// The simulated device the file is on, if any (its I/O goes through it).
    pub fn sim(&self) -> Option<&sim::SimDevice> {
        self.sim.as_deref()
    }

    /// The file's window of zeros written ahead (see [`super::zero_window`]).
    pub fn zeros(&self) -> &super::zero_window::ZeroWindow {
        &self.zeros
    }

    /// Runs `flush`, an `fdatasync` of the file, shared with the syncs of it at once
    /// ([`Self::flushes`]), and records which of its possible metadata changes it covered
    /// ([`Self::zeros`]).
    pub fn sync_covering(&self, flush: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        // Read before the flush starts: it covers every write that ended before.
        let pending = self.zeros.pending();
        self.flushes.sync(flush)?;
        if let Some(c) = pending {
            self.zeros.covered(c);
        }
        Ok(())
    }
}

impl AsRawFd for BackingFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Whether `dir` is on ext4 or XFS, whose `fdatasync` of a file with data to write flushes the
/// device's cache after that data (unless mounted without barriers, when nothing does), and
/// where an O_DIRECT overwrite of written blocks inside the file's size changes no metadata an
/// `fdatasync` must commit. Copy-on-write (btrfs), network and FUSE file systems promise
/// neither. False if it cannot tell.
pub fn fdatasync_flushes_device(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const EXT4_SUPER_MAGIC: i64 = 0xEF53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: statfs is plain old data; all-zero is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid statfs to write.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC)
}

/// Path of file `id`'s backing file in `dir`.
pub fn backing_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("f{id:016x}.data"))
}

/// The file id a backing file name encodes, if `name` is one.
pub fn backing_id(name: &str) -> Option<u64> {
    let hex = name.strip_prefix('f')?.strip_suffix(".data")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Deletes backing files in `dir` that belong to no file in `known`: left by a crash between
/// a remove's catalog write and its deletes, or a create's backing files and its catalog write.
pub fn remove_orphans(dir: &Path, known: &std::collections::HashSet<u64>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(backing_id) else { continue };
        if !known.contains(&id) {
            log::info!("removing orphaned backing file {}", entry.path().display());
            std::fs::remove_file(entry.path())
                .map_err(|e| Error::io(format!("remove {}", entry.path().display()), e))?;
        }
    }
    Ok(())
}

/// Opens `path` read-write (created with `mode`, less the umask, if `create`), with O_DIRECT
/// if `direct`; where the file system refuses O_DIRECT (EINVAL), buffered instead if
/// `allow_buffered`. Returns the file and whether it is O_DIRECT; a refusal without
/// `allow_buffered` is the EINVAL, for the caller to explain.
fn open_rw(
    path: &Path,
    create: bool,
    mode: u32,
    direct: bool,
    allow_buffered: bool,
) -> io::Result<(File, bool)> {
    let open = |direct: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(create).mode(mode);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    match open(direct) {
        Err(e) if direct && allow_buffered && e.raw_os_error() == Some(libc::EINVAL) => {
            Ok((open(false)?, false))
        }
        r => r.map(|f| (f, direct)),
    }
}

/// The error of an O_DIRECT refusal that buffered files were not allowed to work around.
fn refused(e: &io::Error, direct: bool) -> bool {
    direct && e.raw_os_error() == Some(libc::EINVAL)
}

impl BackingFile {
    fn new(
        file: File,
        device: DeviceId,
        file_id: u64,
        direct: bool,
        sim: Option<std::sync::Arc<sim::SimDevice>>,
    ) -> Self {
        BackingFile {
            file: std::sync::Arc::new(file),
            device,
            file_id,
            flushes: super::flush_group::FlushGroup::new(!direct),
            zeros: Default::default(),
            direct,
            sim,
        }
    }
}

/// Opens the OS file at `path` as the only backing file (device 0) of plain file `file_id`
/// (`Cache::open_path`), creating it (mode 0666 less the umask) if `create`: O_DIRECT if
/// `direct` (buffered where refused and `allow_buffered`), else buffered.
pub fn open_plain(
    path: &Path,
    file_id: u64,
    create: bool,
    direct: bool,
    allow_buffered: bool,
) -> Result<BackingFile> {
    let (file, direct) = open_rw(path, create, 0o666, direct, allow_buffered).map_err(|e| {
        if refused(&e, direct) {
            let msg = format!(
                "the file system of {} refuses O_DIRECT (allow buffered backing files)",
                path.display()
            );
            Error::with_source(ErrorKind::Unsupported, msg, e)
        } else if e.kind() == io::ErrorKind::NotFound {
            Error::with_source(ErrorKind::NotFound, format!("no file {}", path.display()), e)
        } else if e.raw_os_error() == Some(libc::EISDIR) {
            Error::with_source(ErrorKind::InvalidInput, format!("{} is a directory", path.display()), e)
        } else {
            Error::io(format!("open {}", path.display()), e)
        }
    })?;
    Ok(BackingFile::new(file, 0, file_id, direct, None))
}

/// Opens (creating if asked) the backing file of `file_id` on `device` in `dir`. A file on a
/// simulated device `sim` is opened buffered: it is the device's medium, not the device.
pub fn open_backing(
    dir: &Path,
    device: DeviceId,
    file_id: u64,
    create: bool,
    allow_buffered: bool,
    sim: Option<std::sync::Arc<sim::SimDevice>>,
) -> Result<BackingFile> {
    let path = backing_path(dir, file_id);
    let want_direct = sim.is_none();
    let (file, direct) = open_rw(&path, create, 0o600, want_direct, allow_buffered).map_err(|e| {
        if refused(&e, want_direct) {
            let msg = format!(
                "the file system of {} refuses O_DIRECT; use a file system that supports it or allow \
                 buffered backing files (Config::with_allow_buffered)",
                dir.display()
            );
            Error::with_source(ErrorKind::Unsupported, msg, e)
        } else if e.kind() == io::ErrorKind::NotFound {
            Error::with_source(
                ErrorKind::NotAnArray,
                format!("backing file {} is missing", path.display()),
                e,
            )
        } else {
            Error::io(format!("open {}", path.display()), e)
        }
    })?;
    if want_direct && !direct {
        log::warn!("{}: O_DIRECT refused, using buffered backing files", dir.display());
    }
    Ok(BackingFile::new(file, device, file_id, direct, sim))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn backing_names_round_trip() {
        for id in [0u64, 1, 0xdead_beef, u64::MAX] {
            let p = backing_path(Path::new("/x"), id);
            assert_eq!(backing_id(p.file_name().unwrap().to_str().unwrap()), Some(id));
        }
        for bad in
            ["f.data", "f123.data", "g0000000000000001.data", "f000000000000000z.data", "upcache.catalog"]
        {
            assert_eq!(backing_id(bad), None, "{bad}");
        }
    }
}

/// What one request may carry on every device of an array: the smallest of each limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Pages per request (the block layer's `max_sectors_kb`).
    pub pages: usize,
    /// Memory segments per request (`max_segments`): a segment is a physically contiguous
    /// piece of the buffers of at most `segment_bytes`, so a request into scattered frames
    /// carries one page per segment, and one into frames side by side on a huge page needs
    /// one per `segment_bytes` of them.
    pub segments: usize,
    /// Bytes per segment (`max_segment_size`).
    pub segment_bytes: usize,
}

/// The request limits of the devices holding `dirs` for pages of `page_size` bytes, each at
/// most `cap`; `cap` where sysfs does not say (tmpfs, containers).
pub fn request_limits(dirs: &[PathBuf], page_size: usize, cap: usize) -> RequestLimits {
    let queue_value = |dir: &PathBuf, name: &str| -> Option<usize> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        // A partition has no queue of its own; its disk's is one level up.
        let read = |p: PathBuf| std::fs::read_to_string(p).ok()?.trim().parse::<usize>().ok();
        read(base.join("queue").join(name)).or_else(|| read(base.join("../queue").join(name)))
    };
    let smallest = |name: &str, scale: &dyn Fn(usize) -> usize| {
        dirs.iter().filter_map(|d| queue_value(d, name)).map(scale).min().unwrap_or(cap).clamp(1, cap)
    };
    RequestLimits {
        pages: smallest("max_sectors_kb", &|kb| kb.saturating_mul(1024) / page_size.max(1)),
        segments: smallest("max_segments", &|n| n),
        segment_bytes: dirs
            .iter()
            .filter_map(|d| queue_value(d, "max_segment_size"))
            .min()
            .unwrap_or(usize::MAX),
    }
}

/// Sets a backing file's length.
pub fn truncate(file: &BackingFile, len: u64) -> Result<()> {
    let r = match &file.sim {
        Some(sim) => sim.truncate(&file.file, len),
        None => file.file.set_len(len),
    };
    file.zeros.forget();
    r.map_err(|e| Error::io(format!("truncate backing file of file {}", file.file_id), e))
}

/// The largest size the file system lets `file` reach (the kernel's `s_maxbytes`, past which
/// writes fail with EFBIG), at most `cap`, rounded down to `page_size` (write-back writes
/// whole pages). Found by where `lseek(SEEK_SET)` stops accepting offsets, which the kernel
/// checks against the same limit; the file's own offset is not used by the cache. Most file
/// systems take `cap` (one call); ext4's limit, 2^32 - 1 blocks of `block` bytes, is tried
/// next (two calls) and taken only if the kernel confirms it is the edge; any other is
/// searched for (about 62 calls).
pub fn largest_file(file: &File, cap: u64, page_size: u64, block: u64) -> u64 {
    let accepts = |at: u64| {
        // SAFETY: lseek takes no memory; the descriptor is the cache's own.
        i64::try_from(at).is_ok_and(|at| unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_SET) } == at)
    };
    if accepts(cap) {
        return cap / page_size * page_size;
    }
    let blocks = ((1u64 << 32) - 1).saturating_mul(block);
    if blocks < cap && accepts(blocks) && !accepts(blocks + 1) {
        return blocks / page_size * page_size;
    }
    let (mut ok, mut bad) = (0u64, cap);
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        if accepts(mid) {
            ok = mid;
        } else {
            bad = mid;
        }
    }
    ok / page_size * page_size
}

/// The smallest unit `file` can be written in at an aligned offset: 1 for a buffered file;
/// for an O_DIRECT one, the file system's direct I/O offset alignment (`statx` DIOALIGN,
/// Linux 6.1), or `page_size` where the kernel does not say.
pub fn write_unit(file: &BackingFile, page_size: u64) -> u64 {
    if !file.is_direct() {
        return 1;
    }
    // SAFETY: statx is plain data; all zeros is a valid value for the kernel to fill.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor itself; `stx` is writable.
    let ok = unsafe {
        libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx)
    } == 0;
    let align = u64::from(stx.stx_dio_offset_align);
    if ok && stx.stx_mask & libc::STATX_DIOALIGN != 0 && align.is_power_of_two() && align <= page_size {
        align
    } else {
        page_size
    }
}
