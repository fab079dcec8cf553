//! The segment: a sealed memfd (or a private tmpfs file, to outlive its processes), mapped
//! shared, with a header that lists its regions.
//!
//! # Layout
//! Offset 0 holds the [`Header`]: a magic number, the format version, the segment's length, and
//! up to [`MAX_REGIONS`] regions as (kind, offset, length), each region aligned to 2 MiB so a
//! frame arena in one can sit on huge pages. The creator writes the header and only then sets
//! `ready` (Release); an attacher checks `ready` (Acquire) before it trusts anything else, and
//! checks every region against the sealed length, so a damaged or foreign header is refused
//! with an error, never followed out of bounds.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// Regions a segment holds at most.
pub const MAX_REGIONS: usize = 24;
/// "UPCSHM" and the format's major number.
const MAGIC: u64 = u64::from_le_bytes(*b"UPCSHM\x00\x01");
const VERSION: u32 = 2;
/// Every region starts at a multiple of this: a huge page.
const REGION_ALIGN: u64 = 2 << 20;
/// The seals an attacher requires: the size can change no more, nor the seals.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Region {
    kind: u32,
    _pad: u32,
    offset: u64,
    len: u64,
}

#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    regions: u32,
    len: u64,
    region: [Region; MAX_REGIONS],
    /// 1 once the creator has written everything above.
    ready: AtomicU32,
}

/// A region to make: a kind (the caller's number for what it holds, unique in a segment) and
/// a length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSpec {
    /// What the region holds, as the segment's user numbers it.
    pub kind: u32,
    /// Its length in bytes.
    pub len: usize,
}

/// One mapping of a shared segment. Dropping it unmaps it; the memory lives as long as any
/// process maps it or holds its descriptor.
pub struct Segment {
    fd: OwnedFd,
    /// The keeper's lock, if this process keeps the segment ([`take_keeper`]).
    keeper: std::sync::Mutex<Option<OwnedFd>>,
    base: NonNull<u8>,
    len: usize,
    /// The regions as checked when this mapping was made: the header in shared memory is
    /// never read again, so no peer that rewrites it can send us out of bounds.
    table: Vec<Region>,
    /// The bytes (offset, length) that are this process's memory, not the segment's
    /// ([`Self::make_private`]).
    private: std::sync::OnceLock<(usize, usize)>,
}

// SAFETY: the segment is plain shared memory; who may touch which bytes is the business of the
// structures placed in its regions, which synchronize with atomics, as across processes.
unsafe impl Send for Segment {}
// SAFETY: as above; the segment hands out raw pointers only, never references.
unsafe impl Sync for Segment {}

fn os_error(kind: ErrorKind, what: &str) -> Error {
    Error::with_source(kind, what.to_string(), std::io::Error::last_os_error())
}

fn invalid(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, what)
}

/// The regions' table and the segment's length: the header's huge page, then each region
/// at the next multiple of [`REGION_ALIGN`].
fn lay_out(regions: &[RegionSpec]) -> Result<([Region; MAX_REGIONS], u64)> {
    if regions.is_empty() || regions.len() > MAX_REGIONS {
        return Err(invalid(format!("a segment holds 1 to {MAX_REGIONS} regions, not {}", regions.len())));
    }
    let mut table = [Region::default(); MAX_REGIONS];
    let mut end = REGION_ALIGN; // the header's huge page
    for (i, r) in regions.iter().enumerate() {
        if r.len == 0 || regions[..i].iter().any(|o| o.kind == r.kind) {
            return Err(invalid(format!("region {i} (kind {}) is empty or a second of its kind", r.kind)));
        }
        let len = r.len as u64;
        table[i] = Region { kind: r.kind, _pad: 0, offset: end, len };
        end = len
            .checked_next_multiple_of(REGION_ALIGN)
            .and_then(|l| end.checked_add(l))
            .filter(|&e| e <= isize::MAX as u64)
            .ok_or_else(|| invalid("segment too large"))?;
    }
    Ok((table, end))
}

/// Takes the keeper lock of the segment file behind `fd`: an exclusive `flock` on a
/// description of the file of its own, which dies with this process (the segment's
/// descriptor, passed to every attacher, outlives it). A service holds it on its segment for
/// its life ([`Segment::keep_with`]), so that one started later tells a live service's file
/// from a dead one's. None if another process holds it.
pub fn take_keeper(fd: &impl AsRawFd) -> Result<Option<OwnedFd>> {
    let own = std::fs::OpenOptions::new()
        .read(true)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| Error::io("open a shared segment's file again", e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(own.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ => Err(Error::io("lock a shared segment's file", err)),
        };
    }
    Ok(Some(OwnedFd::from(own)))
}

/// Whether `fd` is on a tmpfs (or is a memfd).
fn on_tmpfs(fd: &OwnedFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes one statfs into `st`, read only on success.
    unsafe {
        libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) == 0 && st.assume_init().f_type == libc::TMPFS_MAGIC
    }
}

/// Whether `fd` is a regular tmpfs file that only this user may open (`create_in_tmpfs`'s): one
/// that others could shrink under our mapping would not be.
fn private_tmpfs_file(fd: &OwnedFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one stat into `st`, read only on success; geteuid cannot fail.
    let private = unsafe {
        libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) == 0 && {
            let st = st.assume_init();
            st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_mode & 0o077 == 0
                && st.st_uid == libc::geteuid()
        }
    };
    private && on_tmpfs(fd)
}

impl Segment {
    /// Makes a segment holding `regions` (zero-filled), named `name` in `/proc/<pid>/fd` for
    /// whoever looks. The descriptor is close-on-exec: pass it on deliberately.
    pub fn create(name: &str, regions: &[RegionSpec]) -> Result<Segment> {
        let (table, end) = lay_out(regions)?;
        let cname = std::ffi::CString::new(name).map_err(|_| invalid("a segment name has no NUL"))?;
        // SAFETY: a C string we own; memfd_create reads it and returns a new descriptor.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(os_error(ErrorKind::Unsupported, "memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate and fcntl on our own descriptor; no memory is involved.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), end as libc::off_t) } != 0 {
            return Err(os_error(ErrorKind::NoSpace, "size a shared segment"));
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SIZE_SEALS) } != 0 {
            return Err(os_error(ErrorKind::Unsupported, "seal a shared segment"));
        }
        Segment::publish(fd, &table[..regions.len()], end)
    }

    /// Makes a segment holding `regions` as a file of this user only (0600) on the tmpfs
    /// `dir` (`/dev/shm`), with no name until [`Self::link`] gives it one: unlike a memfd, a
    /// named one outlives every process that maps it, so what is in it (a cache's dirty
    /// pages) survives the death of all of them until it is adopted or removed. Its memory is
    /// allocated now, since a full tmpfs would turn a later first touch into a SIGBUS; but for
    /// the regions of the kinds `later`, which their users allocate ([`Self::allocate`]) before
    /// they first touch a part (a cache's frames: allocating 1 GiB of them took 0.27 s, which
    /// the first program through the shim waited for).
    pub fn create_in_tmpfs(dir: &std::path::Path, regions: &[RegionSpec], later: &[u32]) -> Result<Segment> {
        use std::os::unix::fs::OpenOptionsExt;
        let (table, end) = lay_out(regions)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| Error::io(format!("make a file in {}", dir.display()), e))?;
        let fd = OwnedFd::from(file);
        if !on_tmpfs(&fd) {
            return Err(invalid(format!("{} is not a tmpfs", dir.display())));
        }
        // SAFETY: ftruncate and fallocate on our own descriptor; no memory is involved.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), end as libc::off_t) } != 0 {
            return Err(os_error(ErrorKind::NoSpace, "size a shared segment"));
        }
        // Room for `later` too, now: a tmpfs too small for the whole is refused at the start,
        // as when all of it was allocated then. (An unlimited tmpfs says it has no blocks.)
        let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs writes one statvfs into `vfs`, read only on success.
        if unsafe { libc::fstatvfs(fd.as_raw_fd(), vfs.as_mut_ptr()) } == 0 {
            // SAFETY: fstatvfs succeeded.
            let vfs = unsafe { vfs.assume_init() };
            let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
            if vfs.f_blocks != 0 && free < end {
                let what = format!("{end} bytes for a shared segment in {}: {free} are free", dir.display());
                return Err(Error::new(ErrorKind::NoSpace, what));
            }
        }
        // The header's and the regions' memory (whole pages: the kernel rounds), each region's
        // bytes only: the 2 MiB alignment between them is never touched (allocating it too made
        // a 1 GiB cache's start twice as long), and `later`'s regions are their users' to
        // allocate.
        let header = (0, std::mem::size_of::<Header>() as u64);
        let eager =
            table[..regions.len()].iter().filter(|r| !later.contains(&r.kind)).map(|r| (r.offset, r.len));
        for (at, len) in std::iter::once(header).chain(eager) {
            // SAFETY: as above.
            if unsafe { libc::fallocate(fd.as_raw_fd(), 0, at as libc::off_t, len as libc::off_t) } != 0 {
                let what = format!("allocate {len} bytes in {}", dir.display());
                return Err(os_error(ErrorKind::NoSpace, &what));
            }
        }
        let keeper = take_keeper(&fd)?.ok_or_else(|| invalid("a new file kept by another process"))?;
        let seg = Segment::publish(fd, &table[..regions.len()], end)?;
        seg.keep_with(keeper);
        Ok(seg)
    }

    /// Holds `keeper` ([`take_keeper`]'s) for as long as this mapping lives, or until
    /// [`Self::release_keeper`].
    pub fn keep_with(&self, keeper: OwnedFd) {
        *self.keeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(keeper);
    }

    /// Lets the keeper lock go (a service about to let its socket go, so that the service
    /// after it finds the segment kept by none: other references to the cache may outlive it).
    pub fn release_keeper(&self) {
        drop(self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Names a segment of [`Self::create_in_tmpfs`] `path` (in its directory), once whoever
    /// opens it there may use it: a segment never named dies with its maker.
    pub fn link(&self, path: &std::path::Path) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let from = std::ffi::CString::new(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).expect("no NUL");
        let to =
            std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| invalid("a path has no NUL"))?;
        // SAFETY: two C strings we own; linkat reads them.
        let rc = unsafe {
            libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW)
        };
        if rc != 0 {
            return Err(os_error(ErrorKind::Io, &format!("name a shared segment {}", path.display())));
        }
        Ok(())
    }

    /// Maps `fd`, sized `end`, and writes the header of `table` into it.
    fn publish(fd: OwnedFd, table: &[Region], end: u64) -> Result<Segment> {
        let mut seg = Segment::map(fd, end as usize)?;
        seg.table = table.to_vec();
        let mut region = [Region::default(); MAX_REGIONS];
        region[..table.len()].copy_from_slice(table);
        let header = seg.header_ptr();
        // SAFETY: the header lies in the first huge page of our fresh, zeroed mapping, which no
        // other process has yet (only we hold the descriptor: a file is named only once
        // whole), so plain writes race with nothing.
        unsafe {
            (*header).magic = MAGIC;
            (*header).version = VERSION;
            (*header).regions = table.len() as u32;
            (*header).len = end;
            (*header).region = region;
            // Release: an attacher that sees `ready` sees every field above.
            (*header).ready.store(1, Ordering::Release);
        }
        Ok(seg)
    }

    /// Maps the segment behind `fd` (received from its creator) after checking that its size
    /// is sealed (or that it is a tmpfs file only this user may open, `create_in_tmpfs`'s) and
    /// its header is whole and in bounds.
    pub fn attach(fd: OwnedFd) -> Result<Segment> {
        // SAFETY: fcntl on a descriptor we own; it reads no memory of ours.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if (seals < 0 || seals & SIZE_SEALS != SIZE_SEALS) && !private_tmpfs_file(&fd) {
            return Err(invalid(
                "not a shared segment: its size is not sealed, nor is it a tmpfs file of this user only",
            ));
        }
        let len = std::fs::File::from(fd.try_clone().map_err(|e| Error::io("dup a segment descriptor", e))?)
            .metadata()
            .map_err(|e| Error::io("stat a shared segment", e))?
            .len();
        if len < REGION_ALIGN || len > isize::MAX as u64 {
            return Err(invalid(format!("not a shared segment: {len} bytes")));
        }
        let mut seg = Segment::map(fd, len as usize)?;
        let h = seg.header_ptr();
        // SAFETY: the header lies inside the mapping (len >= one huge page). Another process
        // wrote it; `ready` is an atomic, and after its Acquire load an honest creator writes
        // nothing more. Volatile copies, never references, so a peer that writes anyway can
        // only make us refuse the segment or keep values we then check.
        let (ready, magic, version, regions, hlen, table) = unsafe {
            use std::ptr::{addr_of, read_volatile};
            let ready = (*h).ready.load(Ordering::Acquire);
            (
                ready,
                read_volatile(addr_of!((*h).magic)),
                read_volatile(addr_of!((*h).version)),
                read_volatile(addr_of!((*h).regions)),
                read_volatile(addr_of!((*h).len)),
                read_volatile(addr_of!((*h).region)),
            )
        };
        if ready != 1 || magic != MAGIC {
            return Err(invalid("not a shared segment: bad magic or not ready"));
        }
        if version != VERSION {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("shared segment format {version}; this build reads {VERSION}"),
            ));
        }
        if hlen != len || regions == 0 || regions as usize > MAX_REGIONS {
            return Err(invalid(format!(
                "shared segment header says {hlen} bytes, {regions} regions; it has {len}"
            )));
        }
        let table = &table[..regions as usize];
        for (i, r) in table.iter().enumerate() {
            let end = r.offset.checked_add(r.len);
            if r.offset < REGION_ALIGN || r.offset % REGION_ALIGN != 0 || end.is_none_or(|e| e > len) {
                return Err(invalid(format!("shared segment region {r:?} is out of bounds")));
            }
            let overlaps = |o: &Region| r.offset < o.offset + o.len && o.offset < r.offset + r.len;
            if table[..i].iter().any(|o| o.kind == r.kind || overlaps(o)) {
                return Err(invalid(format!(
                    "shared segment region {r:?} repeats a kind or overlaps another"
                )));
            }
        }
        seg.table = table.to_vec();
        Ok(seg)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Segment> {
        let fd = super::high_fd::out_of_the_way(fd);
        // A huge page's alignment in every process, as in the file, so the kernel can map
        // 2 MiB pages of the segment (shmem THP, when the system allows it for memory advised
        // `MADV_HUGEPAGE`): reserve room for an aligned start, then map the segment there.
        let room = len.checked_add(REGION_ALIGN as usize).ok_or_else(|| invalid("segment too large"))?;
        // SAFETY: a new private reservation of `room` bytes, inaccessible, at an address of the
        // kernel's choosing; no existing memory is affected.
        let reserved = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                room,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if reserved == libc::MAP_FAILED {
            return Err(os_error(ErrorKind::InvalidConfig, "reserve room for a shared segment"));
        }
        let align = REGION_ALIGN as usize;
        let start = (reserved as usize).next_multiple_of(align);
        // SAFETY: `[start, start + len)` lies inside our reservation (`room` is `len` plus one
        // alignment), which MAP_FIXED replaces with a shared mapping of our descriptor. The
        // size is sealed, or the file is this user's alone, whose processes we trust not to
        // truncate it (one that did would turn our next access past its end into a SIGBUS). The slack on both sides,
        // ours too, is unmapped.
        let raw = unsafe {
            let raw = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            );
            let head = start - reserved as usize;
            if head > 0 {
                libc::munmap(reserved, head);
            }
            let tail = room - head - len;
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            raw
        };
        if raw == libc::MAP_FAILED {
            let err = os_error(ErrorKind::InvalidConfig, "map a shared segment");
            // SAFETY: what is left of our own reservation, if anything.
            unsafe { libc::munmap(start as *mut libc::c_void, len) };
            return Err(err);
        }
        // SAFETY: advice on our own mapping; refused where THP is not built in, which is fine.
        unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };
        let base = NonNull::new(raw.cast::<u8>()).expect("mmap returned null without MAP_FIXED");
        mapped().push(Mapped { base: base.as_ptr() as usize, len, fd: fd.as_raw_fd(), own_of: 0 });
        Ok(Segment {
            fd,
            keeper: std::sync::Mutex::new(None),
            base,
            len,
            table: Vec::new(),
            private: std::sync::OnceLock::new(),
        })
    }

    fn header_ptr(&self) -> *mut Header {
        self.base.as_ptr().cast::<Header>()
    }

    /// The region of `kind`: its start in this process's mapping and its length.
    pub fn region(&self, kind: u32) -> Option<(NonNull<u8>, usize)> {
        let r = self.table.iter().find(|r| r.kind == kind)?;
        // SAFETY: the region lies inside the mapping (checked at attach, made so at create, and
        // kept in `table`, which no other process can change).
        let start = unsafe { self.base.as_ptr().add(r.offset as usize) };
        Some((NonNull::new(start)?, r.len as usize))
    }

    /// Allocates the memory of the `len` bytes at `at` (inside the mapping) if it was not yet,
    /// so that touching them cannot fail (a full tmpfs raises SIGBUS at a first touch; this
    /// fails with ENOSPC instead). Idempotent: allocated memory keeps its bytes. Interrupted
    /// by a signal (kernels before 6.10 stop at any), it goes on.
    pub fn allocate(&self, at: *const u8, len: usize) -> std::io::Result<()> {
        let offset = (at as usize).wrapping_sub(self.base.as_ptr() as usize);
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        }
        // Anonymous memory has nothing to allocate ahead: it is the process's, as its heap's.
        if self.private.get().is_some_and(|&(p, plen)| offset >= p && offset + len <= p + plen) {
            return Ok(());
        }
        loop {
            // SAFETY: fallocate on our own descriptor, inside its size; no memory is involved.
            if unsafe { libc::fallocate(self.fd.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) }
                == 0
            {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Gives the memory of the `len` bytes at `at` (inside the mapping, page-aligned) back to
    /// the system: they read as zeros after, and are allocated again by `allocate` or a touch.
    /// For frames a smaller cache no longer uses (`SharedCache::resize`).
    pub fn discard(&self, at: *const u8, len: usize) -> std::io::Result<()> {
        let offset = (at as usize).wrapping_sub(self.base.as_ptr() as usize);
        if offset.checked_add(len).is_none_or(|end| end > self.len) || !offset.is_multiple_of(4096) {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        }
        if self.private.get().is_some_and(|&(p, plen)| offset >= p && offset + len <= p + plen) {
            // SAFETY: advice on our own private range, inside the mapping; the caller uses
            // none of its bytes.
            if unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(());
        }
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on our own descriptor, inside its size; the caller uses none of
        // those bytes, and every mapping of them reads zeros after.
        if unsafe { libc::fallocate(self.fd.as_raw_fd(), mode, offset as libc::off_t, len as libc::off_t) }
            != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Replaces the `len` bytes at `at` (a region of a segment made by this process, never
    /// touched, page-aligned) by memory of this process alone, on transparent huge pages at
    /// its first touch if `huge` (and the system gives them for memory so advised): for a
    /// cache no other process maps, whose frames then fault in as the in-process engine's do,
    /// with no copy to collapse them later. Those bytes are no longer in the segment's file:
    /// a process that attached it would not see them, so its maker must not hand it out.
    /// At most one range per segment.
    pub fn make_private(&self, at: *const u8, len: usize, huge: bool) -> Result<()> {
        let offset = (at as usize).wrapping_sub(self.base.as_ptr() as usize);
        let page = 4096;
        if !offset.is_multiple_of(page)
            || !len.is_multiple_of(page)
            || offset.checked_add(len).is_none_or(|end| end > self.len)
        {
            return Err(invalid("a private range outside the segment, or not page-aligned"));
        }
        if self.private.set((offset, len)).is_err() {
            return Err(invalid("a segment already has its private range"));
        }
        // SAFETY: MAP_FIXED over `len` bytes inside our own mapping (checked above), which the
        // caller has not touched and no other process maps yet: nothing there is lost, and
        // pointers into it stay valid (to zeroed private memory).
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_error(ErrorKind::NoSpace, "map a private cache's frames"));
        }
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: advice on the range just mapped; it changes no byte. Refused (a kernel
        // without THP), the pages are small.
        if unsafe { libc::madvise(p, len, advice) } != 0 {
            log::debug!("upcache: huge page advice refused: {}", std::io::Error::last_os_error());
        }
        // A forked child gets zeros here, not a copy-on-write share: the child never uses its
        // parent's private cache (it forgets it), and every write of the parent's while a
        // child lived would otherwise copy the page (2 MiB, a huge one) first.
        // SAFETY: advice on the range just mapped; it changes no byte of ours.
        if unsafe { libc::madvise(p, len, libc::MADV_WIPEONFORK) } != 0 {
            log::debug!("upcache: MADV_WIPEONFORK refused: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The segment's length in bytes, header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a segment holds at least its header. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl AsFd for Segment {
    /// The descriptor to pass to a process that is to attach.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A segment this process image maps: a forked child inherits the mappings and descriptors
/// with the list of them, so it can give them up too.
pub struct Mapped {
    base: usize,
    len: usize,
    fd: i32,
    /// The process that holds only its own data in it ([`Segment::own_alone`]), 0 if any
    /// process may.
    own_of: u32,
}

fn mapped() -> std::sync::MutexGuard<'static, Vec<Mapped>> {
    static MAPPED: std::sync::Mutex<Vec<Mapped>> = std::sync::Mutex::new(Vec::new());
    MAPPED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The list of mapped segments, held by a thread that forks so that the child never inherits
/// it locked by a thread it does not have (its `forget_all` would wait for ever).
pub fn hold_mapped_for_fork() -> std::sync::MutexGuard<'static, Vec<Mapped>> {
    mapped()
}

/// Gives up every segment this process image maps (`Segment::forget` each, those a forked
/// child inherited from its parent included), but those this process made for its own data
/// alone ([`Segment::own_alone`]: no other process's bytes to keep out of its reach); false
/// if one could not be.
pub fn forget_all() -> bool {
    let me = std::process::id();
    // Every one, not up to the first failure.
    let mut ok = true;
    for m in mapped().iter().filter(|m| m.own_of != me) {
        ok &= forget_mapping(m.base, m.len, m.fd);
    }
    ok
}

/// Replaces the mapping at `base` of `len` bytes by private zeros and descriptor `fd` by one of
/// /dev/null (of stderr where /dev/null cannot be opened); false if either failed (then the
/// mapping is at least gone).
fn forget_mapping(base: usize, len: usize, fd: i32) -> bool {
    // SAFETY: MAP_FIXED over exactly a mapping of ours of `len` bytes, replacing it with fresh
    // anonymous memory at the same addresses, so pointers into it stay valid (to memory no
    // longer shared); where that fails, the mapping is removed (a late access then faults,
    // which is the lesser harm).
    let replaced = unsafe {
        let p = libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
        p != libc::MAP_FAILED || libc::munmap(base as *mut libc::c_void, len) == 0
    };
    // SAFETY: opens /dev/null and puts it in the descriptor's number (dup3 closes the memfd
    // there atomically, and its owner keeps a valid number to close); the temporary is closed.
    let closed = unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        let source = if null >= 0 { null } else { 2 };
        let done = libc::dup3(source, fd, libc::O_CLOEXEC) == fd;
        if null >= 0 {
            libc::close(null);
        }
        done
    };
    replaced && closed
}

impl Segment {
    /// Gives up this process's access to the segment for good, while code of other threads
    /// may still touch the mapping: the mapping is replaced, in place, by private zeros (a
    /// late access reads zeros or writes into nothing, and faults nowhere), and the
    /// descriptor by one of /dev/null (no new mapping can be made from it). For a process
    /// that drops the privileges the segment's data was shared under. False if either could
    /// not be done.
    pub fn forget(&self) -> bool {
        forget_mapping(self.base.as_ptr() as usize, self.len, self.fd.as_raw_fd())
    }

    /// Marks the segment as this process's own, holding its data alone (a process-private
    /// cache): [`forget_all`] leaves it, as a credential change leaves a process its own heap.
    /// A forked child's inherited mapping of it is not the child's own, and goes.
    pub fn own_alone(&self) {
        let base = self.base.as_ptr() as usize;
        let me = std::process::id();
        mapped().iter_mut().filter(|m| m.base == base).for_each(|m| m.own_of = me);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let base = self.base.as_ptr() as usize;
        mapped().retain(|m| m.base != base);
        // SAFETY: our own mapping of `len` bytes; no reference into it outlives the segment
        // (regions are handed out as raw pointers whose users hold the segment).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn two_regions() -> Segment {
        Segment::create(
            "upcache-test",
            &[RegionSpec { kind: 7, len: 4096 }, RegionSpec { kind: 9, len: 3 << 20 }],
        )
        .unwrap()
    }

    fn word(seg: &Segment, kind: u32) -> &AtomicU64 {
        let (p, len) = seg.region(kind).unwrap();
        assert!(len >= 8);
        // SAFETY: the region is 2 MiB-aligned, at least 8 bytes, and lives as long as `seg`.
        unsafe { &*p.as_ptr().cast::<AtomicU64>() }
    }

    #[test]
    fn two_mappings_of_one_segment_share_every_region() {
        let a = two_regions();
        let b = Segment::attach(a.as_fd().try_clone_to_owned().unwrap()).unwrap();
        // The header's huge page, then 4 KiB and 3 MiB each rounded up to whole huge pages.
        assert_eq!((a.len(), b.len()), (4 * REGION_ALIGN as usize, a.len()));
        assert_ne!(a.region(7).unwrap().0, b.region(7).unwrap().0, "two mappings, two addresses");
        assert_eq!(b.region(9).unwrap().1, 3 << 20);
        assert!(a.region(8).is_none());
        word(&a, 7).store(42, Ordering::Relaxed);
        word(&b, 9).store(43, Ordering::Relaxed);
        assert_eq!(word(&b, 7).load(Ordering::Relaxed), 42);
        assert_eq!(word(&a, 9).load(Ordering::Relaxed), 43);
        // Regions do not overlap: the last byte of kind 9 is not kind 7's first.
        let (p9, l9) = a.region(9).unwrap();
        // SAFETY: inside region 9 of our mapping.
        unsafe { p9.as_ptr().add(l9 - 1).write(5) };
        assert_eq!(word(&a, 7).load(Ordering::Relaxed), 42);
    }

    /// Bytes of memory the file behind `fd` holds.
    fn allocated(fd: &impl AsFd) -> u64 {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes one stat into `st`, read only on success.
        assert_eq!(unsafe { libc::fstat(fd.as_fd().as_raw_fd(), st.as_mut_ptr()) }, 0);
        // SAFETY: fstat succeeded.
        unsafe { st.assume_init() }.st_blocks as u64 * 512
    }

    /// A tmpfs segment's memory is allocated at creation but for the region left to its
    /// users, which `allocate` allocates a part at a time, idempotently, and only inside the
    /// segment.
    #[test]
    fn a_tmpfs_segment_leaves_one_region_to_allocate_in_parts() {
        let shm = std::path::Path::new("/dev/shm");
        if !shm.is_dir() {
            return; // no tmpfs to make one in (the memfd path is tested above)
        }
        let regions = [RegionSpec { kind: 7, len: 4096 }, RegionSpec { kind: 9, len: 6 << 20 }];
        let seg = Segment::create_in_tmpfs(shm, &regions, &[9]).unwrap();
        // The header's bytes and kind 7's, not the alignment after them; none of kind 9's 6 MiB.
        let eager = (std::mem::size_of::<Header>() as u64).next_multiple_of(4096) + 4096;
        assert_eq!(allocated(&seg), eager);
        let (p, len) = seg.region(9).unwrap();
        seg.allocate(p.as_ptr().wrapping_add(2 << 20), 2 << 20).unwrap();
        assert_eq!(allocated(&seg), eager + (2 << 20));
        word(&seg, 9).store(1, Ordering::Relaxed);
        seg.allocate(p.as_ptr(), 4 << 20).unwrap();
        assert_eq!(allocated(&seg), eager + (4 << 20), "what was allocated is not again");
        assert_eq!(word(&seg, 9).load(Ordering::Relaxed), 1, "and keeps its bytes");
        let past = seg.allocate(p.as_ptr().wrapping_add(len), 4096).unwrap_err();
        assert_eq!(past.kind(), std::io::ErrorKind::InvalidInput);
        let before = seg.allocate(seg.base.as_ptr().wrapping_sub(4096), 4096).unwrap_err();
        assert_eq!(before.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(Segment::create("x", &[]).is_err());
        assert!(Segment::create("x", &[RegionSpec { kind: 1, len: 0 }]).is_err());
        let twice = [RegionSpec { kind: 1, len: 1 }, RegionSpec { kind: 1, len: 1 }];
        assert_eq!(Segment::create("x", &twice).err().unwrap().kind(), ErrorKind::InvalidInput);
        let huge = [RegionSpec { kind: 1, len: usize::MAX }];
        assert_eq!(Segment::create("x", &huge).err().unwrap().kind(), ErrorKind::InvalidInput);
    }

    /// A memfd of the right size whose first bytes are `header`, sealed or not.
    fn forged(header: &[u8], len: u64, seal: bool) -> OwnedFd {
        // SAFETY: a literal C string; a new descriptor we take ownership of below.
        let raw = unsafe { libc::memfd_create(c"forged".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(raw >= 0);
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let f = std::fs::File::from(fd.try_clone().unwrap());
        f.set_len(len).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, header, 0).unwrap();
        if seal {
            // SAFETY: fcntl on our descriptor.
            assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SIZE_SEALS) }, 0);
        }
        fd
    }

    #[test]
    fn foreign_unsealed_or_damaged_segments_are_refused() {
        let good = two_regions();
        let len = good.len() as u64;
        // SAFETY: the whole header, inside our mapping; read as bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts(good.base.as_ptr(), std::mem::size_of::<Header>()) }.to_vec();
        assert!(Segment::attach(forged(&bytes, len, true)).is_ok(), "a byte-for-byte copy attaches");
        let err = |fd| Segment::attach(fd).err().expect("refused").to_string();
        assert!(err(forged(&bytes, len, false)).contains("not sealed"));
        assert!(err(forged(b"not a segment", len, true)).contains("magic"));
        assert!(err(forged(&bytes, len - REGION_ALIGN, true)).contains("header says"));
        let mut out_of_bounds = bytes.clone();
        // The header's fixed fields take 24 bytes and each region 24 (kind, pad, offset, len):
        // region 1's length is at 64.
        out_of_bounds[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(forged(&out_of_bounds, len, true)).contains("out of bounds"));
        let mut twice = bytes.clone();
        twice[48..52].copy_from_slice(&7u32.to_le_bytes()); // region 1 claims region 0's kind
        assert!(err(forged(&twice, len, true)).contains("repeats a kind"));
        let mut overlapping = bytes.clone();
        overlapping[56..64].copy_from_slice(&REGION_ALIGN.to_le_bytes()); // region 1 at region 0
        assert!(err(forged(&overlapping, len, true)).contains("overlaps"));
        let mut newer = bytes;
        newer[8] = VERSION as u8 + 1;
        assert_eq!(Segment::attach(forged(&newer, len, true)).err().unwrap().kind(), ErrorKind::Unsupported);
    }
}
