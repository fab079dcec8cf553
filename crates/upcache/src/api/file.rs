//! The public file handle, modelled on `std::os::unix::fs::FileExt`.
//!
//! # Locking
//! `write_at` takes its byte range exclusive and `read_at` shared, so a read sees all or none
//! of an overlapping write and disjoint writes run in parallel. `set_len` takes everything
//! from the smaller of the old and new lengths to the end exclusive. dflush runs before the
//! range lock is taken; a miss may still write back a dirty eviction victim while holding
//! one, which the lock order allows because write-back only try-locks frames. `pin` takes
//! no range lock on a hit: its guard is a reader in the frame's state word, which writers and
//! shrinks wait for after taking their range (`FrameTable::lock_content`).

use std::fmt;

use super::pin::{PageMut, PageRef};
use crate::cache::page::{Commit, Fill, Lookup};
use crate::cache::{CacheInner, SyncKind};
use crate::error::{Error, ErrorKind, Result};
use crate::file::chunk::chunks;
use crate::file::{FileInner, MAX_FILE_SIZE};
use crate::io::device;
use crate::metrics::latency;
use crate::sync::{Arc, AtomicU64, Ordering};

/// An open file of a [`crate::Cache`]. Cheap to clone; `Send + Sync`.
///
/// Each open (`create_file`, `open_file`, `open_path`, [`File::reopen`]) is one open
/// description, as the kernel's `open(2)`: a write-back error is reported once to each
/// description whose sync (or write-back) comes after it; clones share their description.
#[derive(Clone)]
pub struct File {
    file: Arc<FileInner>,
    cache: Arc<CacheInner>,
    /// The write-back errors this description has reported (`FileInner::unseen_error`).
    seen: Arc<AtomicU64>,
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File").field("name", &self.file.name).field("id", &self.file.id).finish()
    }
}

pub(crate) fn end_of(offset: u64, len: usize) -> Result<u64> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(end),
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("offset {offset} + length {len} is past the maximum file size {MAX_FILE_SIZE}"),
        )),
    }
}

impl File {
    pub(crate) fn new(file: Arc<FileInner>, cache: Arc<CacheInner>) -> Self {
        let seen = Arc::new(AtomicU64::new(file.errors_sample()));
        File { file, cache, seen }
    }

    /// A new open description of the same file (as another `open(2)` of it): it reports
    /// write-back errors on its own, from now on (and one that no description has reported
    /// yet).
    pub fn reopen(&self) -> File {
        File::new(self.file.clone(), self.cache.clone())
    }

    pub(crate) fn seen(&self) -> &AtomicU64 {
        &self.seen
    }

    pub(crate) fn inner(&self) -> &Arc<FileInner> {
        &self.file
    }

    pub(crate) fn cache(&self) -> &Arc<CacheInner> {
        &self.cache
    }

    /// The file's name.
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// Current length in bytes.
    pub fn len(&self) -> u64 {
        // Acquire: pairs with the Release that extended it, so a reader that sees the new
        // length also finds the pages written up to it.
        self.file.len.load(Ordering::Acquire)
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads up to `buf.len()` bytes at `offset`; like pread, returns fewer at end of file and
    /// 0 at or past it.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(b"0123456789", 0)?;
    /// let mut buf = [0; 8];
    /// assert_eq!(f.read_at(&mut buf, 4)?, 6); // short at the end of the file
    /// assert_eq!(&buf[..6], b"456789");
    /// assert_eq!(f.read_at(&mut buf, 100)?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let start = latency::sample();
        let r = self.read_at_untimed(buf, offset);
        self.cache.metrics.latency.read.since(start);
        r
    }

    /// `read_at` without its timing.
    fn read_at_untimed(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if let Some(n) = self.read_lock_free(buf, offset) {
            return Ok(n);
        }
        let end = offset.saturating_add(buf.len() as u64);
        let _range = self.file.range.read(offset, end);
        self.file.check_live()?;
        let len = self.len();
        if buf.is_empty() || offset >= len {
            return Ok(0);
        }
        let end = end.min(len);
        let ps = self.cache.config.page_size as u64;
        let last = (end - 1) / ps;
        self.read_ahead(offset / ps, last);
        let window = self.cache.batch_window();
        let mut loaded_to = offset / ps;
        for c in chunks(offset, end, ps) {
            if last > offset / ps && c.page >= loaded_to {
                // A multi-page read: load the next window's missing pages in one batch.
                loaded_to = (c.page + window).min(last + 1);
                self.cache.load_missing(&self.file, c.page..loaded_to)?;
            }
            let pinned = self.cache.page_for_read(&self.file, c.page, Lookup::Index)?;
            // SAFETY: the pin keeps the frame on this page and VALID; the range lock keeps
            // writers of these bytes out; the source range lies inside the frame and the
            // destination inside `buf`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    pinned.ptr().add(c.in_page),
                    buf[c.at..c.at + c.len].as_mut_ptr(),
                    c.len,
                )
            };
        }
        Ok((end - offset) as usize)
    }

    /// The hit path: copies from resident frames without a lock, a pin or a write to shared
    /// memory, validating afterwards that no write to the file began or was in flight
    /// ([`super::write_seq`]) and that no frame left its page ([`PageIndex::read_optimistic`]).
    /// None if anything was missing, in flight or changed: the caller takes the locked path.
    /// Reads within a few pages only, so a retry never throws much work away.
    ///
    /// [`PageIndex::read_optimistic`]: crate::index::PageIndex::read_optimistic
    fn read_lock_free(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        const MAX_PAGES: u64 = 4;
        let file = &*self.file;
        let seq = file.writes.quiet()?;
        // Acquire (both): pair with the Release stores of `remove` and of a length change.
        if file.removed.load(Ordering::Acquire) {
            return None;
        }
        let len = file.len.load(Ordering::Acquire);
        let ps = self.cache.config.page_size as u64;
        let end = offset.checked_add(buf.len() as u64)?.min(len);
        if offset >= end || (end - 1) / ps - offset / ps >= MAX_PAGES {
            return None;
        }
        let frames = &self.cache.frames;
        for c in chunks(offset, end, ps) {
            let (dst, in_page, n) = (buf[c.at..c.at + c.len].as_mut_ptr(), c.in_page, c.len);
            let ok = file.index.read_optimistic(c.page, &mut |id| {
                // First, so its bitmap miss overlaps the copy's.
                frames.touch(id);
                // SAFETY: source and destination are in bounds (a frame is `ps` bytes, `dst`
                // has `n`). This is a seqlock read: a frame being reused or written may change
                // under the copy. That is a data race by the letter of the Rust memory model,
                // as in every seqlock (crossbeam's AtomicCell, the kernel's seqcount); the
                // bytes are plain integers with no validity invariant, land only in the
                // caller's buffer, and are kept only if validation below passes.
                unsafe { std::ptr::copy_nonoverlapping(frames.ptr(id).add(in_page), dst, n) };
            });
            if !ok {
                return None;
            }
        }
        if !file.writes.unchanged_since(seq) {
            return None;
        }
        let (first, last) = (offset / ps, (end - 1) / ps);
        if file.readahead.at_marker(first, last) {
            self.read_ahead(first, last);
        }
        // Counted once: `Stats::hits` adds these to the pinned hits.
        self.cache.metrics.lock_free_hits.add(end.div_ceil(ps) - offset / ps);
        Some((end - offset) as usize)
    }

    /// Tells the file's stream that pages `first..=last` were read, and hands the loader a
    /// window to read ahead if the stream asks for one.
    fn read_ahead(&self, first: u64, last: u64) {
        let max = self.cache.readahead_pages();
        if max == 0 {
            return;
        }
        let min = (crate::readahead::MIN_WINDOW / self.cache.config.page_size as u64).max(1);
        if let Some(w) = self.file.readahead.on_read(first, last, min, max) {
            self.cache.metrics.readahead_windows.add(1);
            self.cache.readahead.post(&self.file, w);
        }
    }

    /// Pins the page holding byte `offset` and borrows its bytes in place (zero-copy; see
    /// [`PageRef`]): from the page's first byte to its last byte inside the file. Loads the
    /// page on a miss. Fails with `InvalidInput` at or past the end of file.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(b"hello", 4096 + 10)?;
    /// let page = f.pin(4096 + 12)?; // the page holding byte 4108, in place
    /// assert_eq!(page.offset(), 4096);
    /// assert_eq!(&page[10..15], b"hello");
    /// drop(page); // before this thread writes the range: a writer waits for its readers
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin(&self, offset: u64) -> Result<PageRef<'_>> {
        self.cache.check_range_lock("pin")?;
        let ps = self.cache.config.page_size as u64;
        let start = offset - offset % ps;
        if let Some(hit) = self.pin_lock_free(offset, start, ps) {
            return Ok(hit);
        }
        loop {
            // The locked path: under the page's range shared, the length holds still and a
            // miss loads in order with shrinks and removal (as `read_at` does).
            let _range = self.file.range.read(start, start.saturating_add(ps));
            self.file.check_live()?;
            let len = self.in_file(offset, start, ps)?;
            let page = self.cache.page_for_read(&self.file, offset / ps, Lookup::HotFirst)?;
            if let Some(page) = page.into_reader() {
                return Ok(PageRef { page, len, offset: start });
            }
        }
    }

    /// The pin API's hit: a reader of a resident page taken in one step on its frame, with no
    /// range lock, validated like a lock-free read ([`super::write_seq`]): no change of the
    /// file began or was in flight from before the lookup to after the length was read, so
    /// the page, the length and `removed` were all as read at one instant. From then on the
    /// reader count keeps writers, shrinks and removal away from the page. None if anything
    /// was missing, in flight or changed: the caller takes the locked path.
    fn pin_lock_free(&self, offset: u64, start: u64, ps: u64) -> Option<PageRef<'_>> {
        let file = &*self.file;
        let seq = file.writes.quiet()?;
        // Acquire: pairs with `remove`'s Release store.
        if file.removed.load(Ordering::Acquire) {
            return None;
        }
        let (page, hot) = self.cache.pin_reader(file, offset / ps)?;
        // Acquire: pairs with the Release store of a length change.
        let len = file.len.load(Ordering::Acquire);
        if offset >= len || !file.writes.unchanged_since(seq) {
            return None;
        }
        self.cache.count_reader_hit(&page, hot);
        Some(PageRef { page, len: (len - start).min(ps) as usize, offset: start })
    }

    /// Takes the page holding byte `offset` for writing in place (see [`PageMut`]): its bytes
    /// inside the file, marked dirty when the guard drops. Loads the page on a miss. Fails
    /// with `InvalidInput` at or past the end of file (extend it with `set_len` first).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.set_len(8192)?;
    /// f.pin_mut(4096)?[0..3].copy_from_slice(b"abc"); // dirty when the guard drops
    /// let mut buf = [0; 3];
    /// f.read_exact_at(&mut buf, 4096)?;
    /// assert_eq!(&buf, b"abc");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin_mut(&self, offset: u64) -> Result<PageMut<'_>> {
        self.cache.check_range_lock("pin_mut")?;
        let ps = self.cache.config.page_size as u64;
        let start = offset - offset % ps;
        self.cache.balance_dirty(1);
        let range = self.file.range.write(start, start.saturating_add(ps));
        self.file.check_live()?;
        let len = self.in_file(offset, start, ps)?;
        let ticket = self.file.writes.begin();
        let page = self.cache.page_for_write(&self.file, offset / ps, Fill::Read, Lookup::HotFirst)?;
        Ok(PageMut { page: Some(page), _ticket: ticket, _range: range, len, offset: start })
    }

    /// Bytes of the page at `start` that are inside the file; an error if `offset` is not.
    fn in_file(&self, offset: u64, start: u64, ps: u64) -> Result<usize> {
        let len = self.len();
        if offset >= len {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("cannot pin offset {offset} of {:?}: the file is {len} bytes", self.file.name),
            ));
        }
        Ok((len - start).min(ps) as usize)
    }

    /// Writes `buf` at `offset`, extending the file if needed. Returns `buf.len()`, or fewer
    /// bytes if an error stopped it after some pages were written (like pwrite), or if the
    /// file would pass the largest file its file system allows: up to that size, as the
    /// kernel does; `FileTooLarge` for a write that starts there or past it.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let start = latency::sample();
        let r = self.write_at_untimed(buf, offset);
        self.cache.metrics.latency.write.since(start);
        r
    }

    /// `write_at` without its timing.
    fn write_at_untimed(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let max = self.file.max_len;
        // Past what an off_t can say: a bad argument (the kernel's EINVAL), not a large file.
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("offset {offset} + length {} is past the largest file offset", buf.len()),
            ));
        }
        if offset >= max && !buf.is_empty() {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                format!(
                    "write at {offset} of {}: its file system's largest file is {max} bytes",
                    self.file.name
                ),
            ));
        }
        let buf = &buf[..buf.len().min((max - offset.min(max)) as usize)];
        let end = end_of(offset, buf.len())?;
        if buf.is_empty() {
            self.file.check_live()?;
            return Ok(0);
        }
        let ps = self.cache.config.page_size as u64;
        let first = offset / ps;
        let pages = (end.div_ceil(ps) - first) as usize;
        self.cache.balance_dirty(pages);
        // One epoch pin for the write's three lookups.
        let _epoch = crate::index::hold_epoch();
        // A hit's two cache misses, the index's leaf and then the frame's descriptor, are
        // started here and after the range lock, so that they overlap the lock and the
        // reservation instead of following them (bench/RESULTS.md, issue 18).
        self.file.index.prefetch(first);
        let _writer = self.file.lone_writer(self.cache.config.range_lock);
        let _range = self.file.range.write(offset, end);
        self.file.check_live()?;
        self.cache.prefetch_frame(&self.file, first);
        // Space for the bytes first: a write the file system cannot hold fails here, with
        // NoSpace, or writes short, as the kernel's does.
        let end = offset + self.file.reserve(offset, buf.len())? as u64;
        let _change = self.file.writes.begin();
        for c in chunks(offset, end, ps) {
            let fill = if c.len as u64 == ps { Fill::Overwrite } else { Fill::Read };
            let locked = match self.cache.page_for_write(&self.file, c.page, fill, Lookup::Index) {
                Ok(l) => l,
                Err(e) if c.at > 0 => {
                    log::debug!("short write of {:?} at {}: {e}", self.file.name, offset + c.at as u64);
                    return Ok(c.at);
                }
                Err(e) => return Err(e),
            };
            // The frame is LOCKED by us with no reader (`lock_content`), so no other thread
            // writes it, writes it back or borrows it; the range lock keeps copying readers of
            // these bytes out.
            locked.copy_in(c.in_page, &buf[c.at..c.at + c.len]);
            let pos = offset + (c.at + c.len) as u64;
            // Extended before the page is unlocked: a write-back of a plain file's page
            // holding the end writes only up to the length it reads under `LOCKED`
            // (`written_of_page`), so a write-back between an unlock and a later extension
            // would clean the page without the bytes past the old end, and an eviction then
            // lose them.
            // Release: readers that see the new length see these bytes (they also go through
            // the frame's state word, but this keeps `len` alone meaningful). The Relaxed
            // check first spares parallel writers inside the file a shared read-modify-write.
            if pos > self.file.len.load(Ordering::Relaxed) {
                self.file.len.fetch_max(pos, Ordering::Release);
            }
            locked.commit(Commit::Dirty);
        }
        Ok((end - offset) as usize)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        crate::file::read_exact(buf, offset, &self.file.name, |b, at| self.read_at(b, at))
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset)? {
                0 => {
                    return Err(Error::new(
                        ErrorKind::WriteZero,
                        format!("wrote nothing to {:?} at {offset}", self.file.name),
                    ))
                }
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Shrinks or extends the file. Bytes past the old end read as zeros after an extension;
    /// a shrink drops cached pages past the new end, dirty or not.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(&[9; 100], 0)?;
    /// f.set_len(10)?;
    /// f.set_len(20)?; // the bytes past 10 read as zeros now
    /// let mut buf = [1; 20];
    /// f.read_exact_at(&mut buf, 0)?;
    /// assert_eq!((buf[9], buf[10]), (9, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_len(&self, size: u64) -> Result<()> {
        if size > i64::MAX as u64 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("length {size} is past the largest file offset"),
            ));
        }
        if size > self.file.max_len {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                format!(
                    "length {size} of {} is past its file system's largest file, {} bytes",
                    self.file.name, self.file.max_len
                ),
            ));
        }
        if self.file.plain && size > self.len() {
            // An extension starts from the end as the OS file has it now: another process's
            // growth first, so that this length wins over it, as a later ftruncate would.
            self.cache.take_in_plain_growth(&self.file)?;
        }
        self.cache.balance_dirty(1);
        // `from <= size` covers every byte a shrink drops, and any write that could extend the
        // file past `from` while we wait conflicts with this range.
        let from = size.min(self.len());
        let _writer = self.file.lone_writer(self.cache.config.range_lock);
        let _range = self.file.range.write(from, u64::MAX);
        self.file.check_live()?;
        let _change = self.file.writes.begin();
        let old = self.len();
        if size >= old {
            // Zero invariant: everything past `old` already reads as zero.
            self.file.len.store(size, Ordering::Release);
            return Ok(());
        }
        let ps = self.cache.config.page_size as u64;
        if !size.is_multiple_of(ps) {
            let tail = (size % ps) as usize;
            let locked = self.cache.page_for_write(&self.file, size / ps, Fill::Read, Lookup::Index)?;
            // SAFETY: LOCKED by us and inside our exclusive range; in bounds of the frame.
            unsafe { std::ptr::write_bytes(locked.ptr().add(tail), 0, ps as usize - tail) };
            locked.commit(Commit::Dirty);
        }
        let pages = size.div_ceil(ps);
        self.cache.drop_pages_from(&self.file, pages);
        // Truncate before publishing the length: if it fails, the length stays the old one,
        // so no byte that the device still holds past `size` is ever past the reported end.
        // (Bytes between `size` and the old end are then unspecified, as after a failed write.)
        let reservation = self.file.lock_reservation();
        for b in &self.file.backing {
            device::truncate(b, self.file.device_end(b.device(), size))?;
        }
        // The truncates freed what was reserved past the new end. Release: as in `reserve`.
        self.file.reserved.fetch_min(size, Ordering::Release);
        drop(reservation);
        // The last page may be written back (to its end) from here on, while it is dirty.
        self.file.os_size.store(size.next_multiple_of(ps), Ordering::SeqCst);
        self.file.os_len_known.store(size, Ordering::Relaxed); // Relaxed: under the range lock
        self.file.len.store(size, Ordering::Release);
        Ok(())
    }

    /// Writes back the file's dirty pages and makes them durable: an fdatasync of each backing
    /// file, or, for appends on ext4/XFS, the device flush of the metadata log's commit
    /// (`io/zero_window.rs`). Returns
    /// once every page dirtied before the call is on its device; reports, once, any earlier
    /// write-back error, and any panic of a background thread (`ErrorKind::Internal`).
    /// Persists the length too if it changed.
    pub fn sync_data(&self) -> Result<()> {
        self.sync(SyncKind::Data)
    }

    /// Drops the clean cached pages wholly inside `[offset, offset + len)` (`len` 0: to the
    /// end of the file); dirty pages stay. The next reads of them load them from the devices:
    /// what POSIX_FADV_DONTNEED does to the kernel's page cache. Waits for readers and
    /// writers of the range.
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        let end = if len == 0 { u64::MAX } else { offset.saturating_add(len) };
        let _range = self.file.range.write(offset, end);
        self.file.check_live()?;
        let ps = self.cache.config.page_size as u64;
        self.cache.drop_clean_pages(&self.file, offset.div_ceil(ps), end / ps);
        Ok(())
    }

    /// The OS file's metadata, for a plain file ([`crate::Cache::open_path`]): its size is
    /// the length only after a write-back or sync. `InvalidInput` for a file of the array.
    pub fn os_metadata(&self) -> Result<std::fs::Metadata> {
        if !self.file.plain {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{:?} is not a plain file", self.file.name),
            ));
        }
        self.file.backing[0].file().metadata().map_err(|e| Error::io(format!("stat {}", self.file.name), e))
    }

    /// For a plain file ([`crate::Cache::open_path`]) that another process may be appending
    /// to: if the OS file is now larger than anything this cache wrote or truncated it to,
    /// the file's length becomes the OS file's size, and the bytes past the old length read
    /// what the OS file holds there (as `tail -f` expects of the kernel's cache). Returns the
    /// length. A file of the array has no other writer: its length as it is.
    pub fn refresh_len(&self) -> Result<u64> {
        self.file.check_live()?;
        if !self.file.plain {
            return Ok(self.len());
        }
        self.cache.take_in_plain_growth(&self.file)
    }

    /// Writes back the file's dirty pages without making them durable (no device sync), and
    /// reports, once, any earlier write-back error. For a plain file, the OS file's size is
    /// made the length too (unless a pin or an appender holds the tail): other readers of the
    /// OS file then see what the cache holds, as they would after close(2).
    pub fn write_back(&self) -> Result<()> {
        self.file.check_live()?;
        if self.file.plain {
            return self.cache.write_back_plain(&self.file, &self.seen);
        }
        self.cache.flush_file_as(&self.file, &self.seen)
    }

    /// Like `sync_data`, and also makes every namespace change logged so far durable (a
    /// create or remove of another file included), even if this file's length is unchanged.
    pub fn sync_all(&self) -> Result<()> {
        self.sync(SyncKind::All)
    }

    /// `sync_data` or `sync_all`, timed and in a tracing span.
    fn sync(&self, kind: SyncKind) -> Result<()> {
        self.file.check_live()?;
        let _span = tracing::debug_span!("upcache.sync", file = %self.file.name, ?kind).entered();
        let start = std::time::Instant::now();
        let r = self.cache.sync_file(&self.file, kind, &self.seen);
        self.cache.metrics.latency.sync.record(start.elapsed());
        self.cache.background.after(r)
    }
}
