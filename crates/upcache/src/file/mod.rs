//! Files: names, per-file state, the range lock and the public [`crate::File`] handle.
//!
//! A cache file is a name in the catalog, an id, a length, a page index, a range lock and one
//! backing file per device. Its bytes live in frames (while cached) and in the backing files.
//!
//! # The zero invariant
//! Every byte at or past a file's length reads as zero from wherever it is kept: a cached
//! frame or a backing file. Writes extend the length as they go, a shrink zeroes the tail of
//! the last page and drops or truncates everything after it, and opening a file after a crash
//! re-establishes it. This is what lets `set_len` extend a file without writing anything.
//! (It does not let a partial write of a page past the end skip reading it: see `Fill::Read`.)

pub(crate) mod chunk;

/// Reads exactly `buf.len()` bytes at `offset` with `read_at` (a file's, by either engine),
/// until a short read says the file (`name`) ends first: `UnexpectedEof`.
pub(crate) fn read_exact(
    mut buf: &mut [u8],
    mut offset: u64,
    name: &str,
    mut read_at: impl FnMut(&mut [u8], u64) -> Result<usize>,
) -> Result<()> {
    while !buf.is_empty() {
        match read_at(buf, offset)? {
            0 => {
                return Err(Error::new(ErrorKind::UnexpectedEof, format!("end of file {name:?} at {offset}")))
            }
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}
pub mod range_lock;
pub mod stream;
pub(crate) mod streams;
pub(crate) mod write_seq;

use crate::alloc::FileFrames;
use crate::error::{Error, ErrorKind, Result};
use crate::file::streams::FileStreams;
use crate::index::PageIndex;
use crate::io::device::BackingFile;
use crate::io::durable_len::DurableLen;
use crate::io::layout::StripeLayout;
use crate::readahead::FileReadahead;
use crate::sync::{self, AtomicBool, AtomicU64, Mutex, Ordering};
use range_lock::RangeLock;
use write_seq::WriteSeq;

/// Largest file size: keeps every byte and device offset representable as a signed 64-bit
/// `off_t` with room for page rounding.
pub const MAX_FILE_SIZE: u64 = 1 << 62;

/// Shared state of one open file.
pub(crate) struct FileInner {
    pub(crate) id: u64,
    pub(crate) name: String,
    /// Current length in bytes.
    pub(crate) len: AtomicU64,
    /// Its length as last logged durably in the array's metadata log (`io/durable_len.rs`);
    /// unused for a plain file.
    pub(crate) durable_len: DurableLen,
    /// Set when the file is removed; handles then fail with `NotFound`.
    pub(crate) removed: AtomicBool,
    /// Pages of this file that are dirty.
    pub(crate) dirty_pages: AtomicU64,
    /// When the file went from clean to dirty, in the write-back clock's ms; 0 once seen
    /// clean (`cache/writeback/expire.rs`).
    pub(crate) dirtied_at: AtomicU64,
    /// The dirty pages as streams, when the cache tracks them (`Config::with_streams`).
    pub(crate) streams: Option<FileStreams>,
    pub(crate) index: Box<dyn PageIndex>,
    pub(crate) range: RangeLock,
    /// With the range lock off (`Config::with_range_lock(false)`): held by each `write_at` and
    /// `set_len` of the file, one writer at a time, as a kernel's inode lock has them.
    writer: Mutex<()>,
    /// Content changes begun and finished, for lock-free readers.
    pub(crate) writes: WriteSeq,
    /// Free frames kept for this file's misses (two-layer allocator).
    pub(crate) spare_frames: FileFrames,
    /// One backing file per device, in device order.
    pub(crate) backing: Vec<BackingFile>,
    /// Where its pages are on the backing files: the array's striping, or, for a plain file,
    /// one device with page `p` at byte `p * page_size` (a 1-device stripe is the identity).
    pub(crate) layout: StripeLayout,
    /// An OS file cached by path (`Cache::open_path`): not in the catalog or the metadata log;
    /// its length is the OS file's, set at sync.
    pub(crate) plain: bool,
    /// For a plain file: a bound on the OS file's size as this cache's own writes and
    /// truncations can have left it (raised before each write-back is issued, to the end of
    /// its last page; lowered at truncation). An OS size above it was made by someone else:
    /// never cut by a write-back, and taken in as the file's length (`cache/plain.rs`).
    pub(crate) os_size: AtomicU64,
    /// For a plain file: the OS file's size as this cache last found or left it (at open, at
    /// a truncate, when it took in growth). A length above it is this cache's extension, for
    /// a sync to make the OS size; an OS size below it was a shrink by someone else, never
    /// undone. Written under the file's range from the end's page on.
    pub(crate) os_len_known: AtomicU64,
    /// Where the backing files' space is reserved up to, in bytes of the file
    /// (`io/reserve.rs`): raised under `reserving`, lowered by a shrink.
    pub(crate) reserved: AtomicU64,
    reserving: Mutex<()>,
    /// For a plain file: the unit its write-back writes the page holding the end in, from the
    /// page's start up to the length rounded up to it (1 for a buffered file: exactly to the
    /// length), so that bytes another process put past the end are not overwritten with zeros.
    /// Unused (u64::MAX) for a file of the array, whose pages are written whole.
    pub(crate) tail_unit: u64,
    /// The largest length the file may have: for a plain file, its file system's limit (the
    /// kernel's EFBIG); `MAX_FILE_SIZE` for a file of the array.
    pub(crate) max_len: u64,
    /// The file's read stream, for readahead.
    pub(crate) readahead: FileReadahead,
    /// Write-back errors, reported once to each open description (the kernel's errseq).
    errors: Mutex<WriteErrors>,
}

/// Where a file's pages live: its layout over the backing files, and whether it is a plain OS
/// file (`FileInner::plain`).
pub(crate) struct Placement {
    pub(crate) layout: StripeLayout,
    pub(crate) plain: bool,
}

impl FileInner {
    pub(crate) fn new(
        id: u64,
        name: String,
        len: u64,
        index: Box<dyn PageIndex>,
        backing: Vec<BackingFile>,
        place: Placement,
        streams: bool,
    ) -> Self {
        FileInner {
            id,
            name,
            len: AtomicU64::new(len),
            durable_len: DurableLen::new(len),
            removed: AtomicBool::new(false),
            dirty_pages: AtomicU64::new(0),
            dirtied_at: AtomicU64::new(0),
            streams: streams.then(FileStreams::default),
            index,
            range: RangeLock::default(),
            writer: Mutex::new(()),
            writes: WriteSeq::default(),
            spare_frames: FileFrames::default(),
            backing,
            layout: place.layout,
            plain: place.plain,
            os_size: AtomicU64::new(len),
            os_len_known: AtomicU64::new(len),
            reserved: AtomicU64::new(len),
            reserving: Mutex::new(()),
            max_len: MAX_FILE_SIZE,
            tail_unit: u64::MAX,
            readahead: FileReadahead::default(),
            errors: Mutex::new(WriteErrors::default()),
        }
    }

    /// Space on the backing files for a write of `len` bytes at `offset` (`io/reserve.rs`),
    /// so that a write that cannot be stored fails now, not at write-back: how many of the
    /// bytes fit (all, or, when the file system is full, those below what was reserved
    /// before: a short write), or `NoSpace` if none does. On a simulated device the device
    /// decides (`SimDevice::reserve`).
    pub(crate) fn reserve(&self, offset: u64, len: usize) -> Result<usize> {
        let end = offset + len as u64;
        // Acquire: pairs with the Release below, after the space was set aside.
        if end <= self.reserved.load(Ordering::Acquire) {
            return Ok(len);
        }
        let _one = sync::lock(&self.reserving);
        let reserved = self.reserved.load(Ordering::Acquire);
        let set_aside = |from: u64, to: u64| {
            self.backing.iter().try_for_each(|b| {
                let (dev_from, dev_to) = (self.device_end(b.device(), from), self.device_end(b.device(), to));
                match b.sim() {
                    Some(sim) => sim.reserve(dev_to),
                    None => crate::io::reserve::set_aside(b.file(), dev_from, dev_to),
                }
            })
        };
        let page = self.layout.page_size();
        let (fits, r) =
            crate::io::reserve::for_write(reserved, offset, len, page, self.max_len, set_aside)
                .map_err(|e| Error::io(format!("write {len} bytes at {offset} of {}", self.name), e))?;
        // Release: a writer that sees it sees the space set aside. A shrink lowers it under
        // `reserving` too (`lock_reservation`), so not meanwhile.
        self.reserved.store(r, Ordering::Release);
        Ok(fits)
    }

    /// The file's one writer, where the range lock is off (None where it is on: writers of
    /// disjoint ranges run at once).
    pub(crate) fn lone_writer(&self, range_lock: bool) -> Option<crate::sync::MutexGuard<'_, ()>> {
        (!range_lock).then(|| sync::lock(&self.writer))
    }

    /// Held by a shrink across its truncates and the lowering of `reserved`, so that no
    /// reservation made meanwhile is counted after the truncate freed it.
    pub(crate) fn lock_reservation(&self) -> crate::sync::MutexGuard<'_, ()> {
        sync::lock(&self.reserving)
    }

    /// Where the backing file on `dev` must end for a file of `len` bytes: whole stripe units
    /// of pages in an array, exactly `len` for a plain file (other programs read its size).
    pub(crate) fn device_end(&self, dev: usize, len: u64) -> u64 {
        if self.plain {
            len
        } else {
            self.layout.device_len(dev, len.div_ceil(self.layout.page_size()))
        }
    }

    /// Fails if the file was removed. Acquire pairs with the Release in `remove`.
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.removed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::NotFound, format!("file {:?} was removed", self.name)));
        }
        Ok(())
    }

    /// Remembers a write-back error for the syncs of every open description (the latest
    /// one is what they report).
    pub(crate) fn record_write_error(&self, e: &Error) {
        let mut g = sync::lock(&self.errors);
        g.count += 1;
        g.last = Some(e.duplicate());
        g.seen = false;
    }

    /// Where a description opened now starts: past every error already reported to someone,
    /// but before one nobody has seen, which it reports then (the kernel's `errseq_sample`).
    pub(crate) fn errors_sample(&self) -> u64 {
        let g = sync::lock(&self.errors);
        if g.seen {
            g.count
        } else {
            g.count.saturating_sub(1)
        }
    }

    /// The latest write-back error, if one was recorded since the description `seen` last
    /// looked: each error is reported once to each description (the kernel's
    /// `file_check_and_advance_wb_err`).
    pub(crate) fn unseen_error(&self, seen: &AtomicU64) -> Option<Error> {
        let mut g = sync::lock(&self.errors);
        // Relaxed: read and written under the errors' mutex.
        if g.count <= seen.load(Ordering::Relaxed) {
            return None;
        }
        seen.store(g.count, Ordering::Relaxed);
        g.seen = true;
        g.last.as_ref().map(Error::duplicate)
    }

    /// A flush of the file failed with `e`, which the kernel reported to this caller alone:
    /// recorded for the file's other open descriptions, and counted as reported to the one
    /// whose count is `seen` (it returns `e` now).
    pub(crate) fn failed_flush(&self, e: Error, seen: &AtomicU64) -> Error {
        self.record_write_error(&e);
        let _ = self.unseen_error(seen);
        e
    }
}

/// A file's write-back errors, numbered, with the latest kept for the syncs that have not
/// reported it yet.
#[derive(Debug, Default)]
struct WriteErrors {
    count: u64,
    last: Option<Error>,
    /// Whether some description has reported the latest.
    seen: bool,
}

/// Checks a file name: 1 to 255 bytes, no `/`, no NUL, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<()> {
    let bad =
        |why: &str| Err(Error::new(ErrorKind::InvalidName, format!("invalid file name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved");
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "file.dat", "..a", ".hidden", &"x".repeat(255), "ünï"] {
            assert!(validate_name(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", ".", "..", "a/b", "/", "a\0b", &"x".repeat(256)] {
            assert_eq!(validate_name(bad).unwrap_err().kind(), ErrorKind::InvalidName, "{bad:?}");
        }
    }
}
