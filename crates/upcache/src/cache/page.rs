//! Page access: find a page's frame or load it, and make room by eviction.
//!
//! # A read hit
//! `index.get(page)` gives a frame id; `try_pin` pins it unless it is unowned; the key is
//! re-read to check the frame still holds this page (it may have been evicted and given to
//! another page between the lookup and the pin: "has the page moved?"); if `VALID` is not
//! yet set, the thread sleeps until the loader unlocks. No lock is taken beyond the index
//! shard's read side.
//!
//! # A miss
//! The thread takes a free frame (or evicts one), writes the key, publishes the frame as
//! pinned + `LOCKED` + not `VALID`, and inserts it into the index. If another thread inserted
//! the page first, the frame goes back and the thread takes the hit path, so a page is
//! loaded once however many threads miss on it at the same time: the others find the locked
//! frame and sleep until the loader unlocks it. A load that fails removes the frame from the
//! index and unlocks it without `VALID`; sleepers wake, see that, and retry.

use std::io::IoSliceMut;

use super::CacheInner;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::state::{self, PinError, DIRTY, LOCKED, REFERENCED, VALID, WRITING};
use crate::frame::{FrameId, PageKey};
use crate::sync::Ordering;

/// Where a page access looks first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The file's page index.
    Index,
    /// The thread's hot-page index, then the file's (the pin API, whose callers come back
    /// to the same pages).
    HotFirst,
}

/// What a writer's commit makes of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Its bytes changed: dirty.
    Dirty,
    /// Dirty or clean as it was (a load, or bytes put back as they were).
    AsBefore,
}

/// How a missing page's frame is filled before a writer gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Read it from the device (a partial write: read, modify, write). Past the end of the
    /// backing file the read is short and the rest zero-filled, so a page past end of file
    /// costs one syscall, not a device read.
    ///
    /// There is deliberately no "zero it because it is past end of file" fill: the length a
    /// writer sees before its miss can be stale by the time its frame is published (another
    /// writer of other bytes of the page may have written it, had it written back and evicted
    /// meanwhile), and zeroing would then erase that writer's bytes.
    Read,
    /// Leave it: the caller overwrites the whole page.
    Overwrite,
}

/// A pinned, valid page; unpinned on drop.
pub(crate) struct PinnedPage<'a> {
    cache: &'a CacheInner,
    id: FrameId,
}

impl<'a> PinnedPage<'a> {
    /// Keeps the pin past the guard; the caller unpins the frame itself later.
    pub(crate) fn keep(self) -> FrameId {
        let id = self.id;
        std::mem::forget(self);
        id
    }

    /// Start of the frame's bytes: readable while the pin is held.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.cache.frames.ptr(self.id)
    }

    /// Turns the pin into a reader of the bytes in place (`PageRef`), once no thread changes
    /// them (`WRITING`, which the caller's range lock makes short: only a thread that holds
    /// an overlapping range sets it). None if the page was dropped from the frame meanwhile.
    pub(crate) fn into_reader(self) -> Option<ReaderPage<'a>> {
        let (cache, id) = (self.cache, self.id);
        let st = cache.frames.state(id);
        loop {
            match st.try_add_reader() {
                Ok(_) => {
                    std::mem::forget(self); // the pin is the reader's now
                    return Some(ReaderPage { cache, id });
                }
                Err(w) if w & VALID == 0 => return None, // unpinned by the drop of `self`
                Err(_) => {
                    cache.frames.waits.wait_until(id, st, |w| w & WRITING == 0 || w & VALID == 0);
                }
            }
        }
    }
}

impl Drop for PinnedPage<'_> {
    fn drop(&mut self) {
        self.cache.frames.state(self.id).unpin();
    }
}

/// A valid page borrowed for reading in place: pinned and counted among the frame's readers,
/// so nothing changes its bytes or drops it until the guard drops (`frame/state.rs`).
pub(crate) struct ReaderPage<'a> {
    cache: &'a CacheInner,
    id: FrameId,
}

impl ReaderPage<'_> {
    /// Start of the frame's bytes: readable while the guard lives.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.cache.frames.ptr(self.id)
    }
}

impl Drop for ReaderPage<'_> {
    fn drop(&mut self) {
        self.cache.frames.unpin_reader(self.id);
    }
}

/// A pinned page held `LOCKED` for writing. [`LockedPage::commit`] publishes it; dropping it
/// uncommitted undoes a fresh load (the frame leaves the index and waiters retry).
#[must_use = "a locked page must be committed, or its load is undone"]
pub(crate) struct LockedPage<'a> {
    cache: &'a CacheInner,
    file: &'a FileInner,
    page: u64,
    id: FrameId,
    /// The frame was loaded for this call and is not `VALID` yet.
    fresh: bool,
    committed: bool,
}

impl<'a> LockedPage<'a> {
    /// Start of the frame's bytes: writable while `LOCKED` is held.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.cache.frames.ptr(self.id)
    }

    /// Copies `src` into the frame at byte `at` (`FrameTable::copy_in`).
    pub(crate) fn copy_in(&self, at: usize, src: &[u8]) {
        assert!(at + src.len() <= self.cache.frames.page_size(), "a copy past the frame");
        // SAFETY: we hold the frame `LOCKED`; the range is inside it (checked).
        unsafe { self.cache.frames.copy_in(self.id, at, src) };
    }

    /// Hands a fresh load to an asynchronous read, which ends it with [`Self::attach`]: the
    /// frame stays pinned, `LOCKED` and in the index meanwhile.
    pub(crate) fn detach(self) -> FrameId {
        debug_assert!(self.fresh);
        let id = self.id;
        std::mem::forget(self);
        id
    }

    /// Takes back a fresh load that [`Self::detach`] handed out.
    pub(crate) fn attach(cache: &'a CacheInner, file: &'a FileInner, page: u64, id: FrameId) -> Self {
        LockedPage { cache, file, page, id, fresh: true, committed: false }
    }

    /// Unlocks the page as valid and clean, keeping the pin for reading.
    pub(crate) fn into_pinned(mut self) -> PinnedPage<'a> {
        self.committed = true;
        self.cache.frames.unlock_content(self.id, VALID, 0);
        if self.fresh {
            self.file.index.mark_ready(self.page, self.id);
        }
        PinnedPage { cache: self.cache, id: self.id }
    }

    /// Unlocks the page as valid, dirty per `how`, and unpins it.
    pub(crate) fn commit(mut self, how: Commit) {
        let dirty = how == Commit::Dirty;
        self.committed = true;
        let st = self.cache.frames.state(self.id);
        // Count before publishing: DIRTY cannot change while we hold LOCKED, and a cleaner can
        // only subtract after it takes LOCKED from us, so the counters never run below the
        // number of dirty pages (sync's fast path relies on this).
        if dirty && st.load() & DIRTY == 0 {
            self.cache.account_dirtied(self.file, self.page);
        }
        let set = if dirty { VALID | DIRTY } else { VALID };
        if !self.fresh {
            self.cache.frames.unlock_content_unpin(self.id, set, 0);
            return;
        }
        self.cache.frames.unlock_content(self.id, set, 0);
        // Still pinned, so the frame cannot have left the page: lock-free readers may now
        // copy from it.
        self.file.index.mark_ready(self.page, self.id);
        st.unpin();
    }
}

impl Drop for LockedPage<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if self.fresh {
            self.cache.abort_load(self.file, self.page, self.id);
        } else {
            self.cache.frames.unlock_content(self.id, 0, 0);
            self.cache.frames.state(self.id).unpin();
        }
    }
}

impl CacheInner {
    /// See [`crate::Cache::resize`].
    pub(crate) fn resize(&self, bytes: u64) -> Result<u64> {
        self.placement.resize(self, bytes)
    }

    /// Pins the frame the index gives for `page` of `file`, if any, after checking that it
    /// still holds the page. It may be loading still (not `VALID`).
    pub(crate) fn pin_entry(&self, file: &FileInner, page: u64) -> Option<FrameId> {
        let key = PageKey { file: file.id, page };
        loop {
            let id = file.index.get(page)?;
            self.frames.prefetch(id);
            let st = self.frames.state(id);
            match st.try_pin() {
                Ok(_) => {}
                // Being evicted: the evictor removes the index entry next. Look again.
                Err(PinError::Unowned) | Err(PinError::Overflow) => {
                    crate::sync::yield_now();
                    continue;
                }
            }
            // Has the page moved? The frame may have been re-assigned after our lookup.
            if self.frames.key(id) != key {
                // While we pin it under another key the frame cannot come back to this page,
                // so an entry page → id still here is stale; drop it rather than spin on it.
                file.index.remove_if(page, id);
                st.unpin();
                continue;
            }
            return Some(id);
        }
    }

    /// Starts fetching the descriptor of the frame the index names for `page` of `file`, for
    /// a writer that locks it a few steps later: the miss overlaps those steps instead of
    /// coming after them. A hint only; the lock checks the frame as ever.
    pub(crate) fn prefetch_frame(&self, file: &FileInner, page: u64) {
        if let Some(id) = file.index.peek(page) {
            self.frames.prefetch_meta(id);
        }
    }

    /// A writer's hit in one step on the frame's state word (pin, `LOCKED` and `WRITING` in
    /// one CAS) when the page is resident, valid and free: one atomic operation fewer than a
    /// pin and then a lock. None otherwise; the caller takes the general path.
    fn lock_entry(&self, file: &FileInner, page: u64, fill: Fill) -> Option<FrameId> {
        let id = file.index.get(page)?;
        // A whole page overwritten is streamed past the CPU's caches when cold
        // (`frame/copy.rs`): fetching its first line would only read what is overwritten.
        if fill != Fill::Overwrite {
            self.frames.prefetch(id);
        }
        if !self.frames.state(id).try_pin_lock_content() {
            return None;
        }
        // Has the page moved? Then we locked another page's frame for a moment: give it back.
        if self.frames.key(id) != (PageKey { file: file.id, page }) {
            self.frames.unlock_content(id, 0, 0);
            self.frames.state(id).unpin();
            return None;
        }
        self.placement.on_hit(id);
        Some(id)
    }

    /// Pins the frame that holds `page` of `file`, if one does and is (or becomes) valid.
    fn lookup_pinned(&self, file: &FileInner, page: u64) -> Option<FrameId> {
        loop {
            let id = self.pin_entry(file, page)?;
            let st = self.frames.state(id);
            let w = self.frames.waits.wait_until(id, st, |w| w & VALID != 0 || w & LOCKED == 0);
            if w & VALID == 0 {
                // Its load failed (or it was dropped): the entry is gone or going. Retry.
                st.unpin();
                crate::sync::yield_now();
                continue;
            }
            self.placement.on_hit(id);
            return Some(id);
        }
    }

    /// `lookup_pinned`, trying first the frame this thread last pinned for the page (the
    /// per-thread hot index, `index/hot.rs`) and remembering the frame it finds.
    fn lookup_pinned_hot(&self, file: &FileInner, page: u64) -> Option<FrameId> {
        if !self.config.hot_index {
            return self.lookup_pinned(file, page);
        }
        let me = self as *const CacheInner as usize;
        if let Some(id) = crate::index::hot::get(me, file.id, page) {
            if (id as usize) < self.frames.len()
                && self.frames.pin_if_holds(id, PageKey { file: file.id, page })
            {
                let st = self.frames.state(id);
                let w = self.frames.waits.wait_until(id, st, |w| w & VALID != 0 || w & LOCKED == 0);
                if w & VALID != 0 {
                    self.placement.on_hit(id);
                    self.metrics.hot_hits.add_unlocked(1);
                    return Some(id);
                }
                st.unpin();
            }
        }
        let id = self.lookup_pinned(file, page)?;
        crate::index::hot::put(me, file.id, page, id);
        Some(id)
    }

    /// A reader of `page` of `file` if it is resident and valid and no thread is changing it,
    /// in one step on the frame's state word: the pin API's hit, which takes no range lock.
    /// Tries the thread's hot index first, as `lookup_pinned_hot`. None otherwise, including
    /// when the index entry is stale; the caller takes the locked path, which sorts it out.
    /// Also says whether the hot index served it; the caller counts the hit once it keeps it
    /// (`count_reader_hit`).
    pub(crate) fn pin_reader<'a>(&'a self, file: &FileInner, page: u64) -> Option<(ReaderPage<'a>, bool)> {
        let key = PageKey { file: file.id, page };
        let me = self as *const CacheInner as usize;
        let hot = self.config.hot_index;
        let from_hot = hot
            .then(|| crate::index::hot::get(me, file.id, page))
            .flatten()
            .filter(|&id| (id as usize) < self.frames.len());
        let id = match from_hot {
            Some(id) => id,
            None => {
                let id = file.index.get(page)?;
                self.frames.prefetch(id);
                id
            }
        };
        self.frames.state(id).try_pin_reader().ok()?;
        // From here the guard drops the reader on every way out.
        let reader = ReaderPage { cache: self, id };
        // Has the page moved? The frame may have been re-assigned after the lookup.
        if self.frames.key(id) != key {
            return None;
        }
        if hot && from_hot.is_none() {
            crate::index::hot::put(me, file.id, page, id);
        }
        Some((reader, from_hot.is_some()))
    }

    /// Counts a hit of `pin_reader` that the caller kept (`hot`: served by the hot index).
    pub(crate) fn count_reader_hit(&self, reader: &ReaderPage<'_>, hot: bool) {
        self.placement.on_hit(reader.id);
        self.metrics.hits.add(1);
        if hot {
            self.metrics.hot_hits.add_unlocked(1);
        }
    }

    /// The page pinned, if resident, looked up per `lookup`.
    fn lookup_per(&self, lookup: Lookup, file: &FileInner, page: u64) -> Option<FrameId> {
        match lookup {
            Lookup::Index => self.lookup_pinned(file, page),
            Lookup::HotFirst => self.lookup_pinned_hot(file, page),
        }
    }

    /// A pinned, valid page of `file`, loaded from the device on a miss, looked up per `lookup`.
    pub(crate) fn page_for_read<'a>(
        &'a self,
        file: &'a FileInner,
        page: u64,
        lookup: Lookup,
    ) -> Result<PinnedPage<'a>> {
        loop {
            let found = self.lookup_per(lookup, file, page);
            if let Some(id) = found {
                self.metrics.hits.add(1);
                return Ok(PinnedPage { cache: self, id });
            }
            if let Some(lp) = self.load_locked(file, page, Fill::Read)? {
                return Ok(lp.into_pinned());
            }
        }
    }

    /// A pinned, `LOCKED` page of `file` ready to be written; a miss fills it per `fill`.
    pub(crate) fn page_for_write<'a>(
        &'a self,
        file: &'a FileInner,
        page: u64,
        fill: Fill,
        lookup: Lookup,
    ) -> Result<LockedPage<'a>> {
        if lookup == Lookup::Index {
            if let Some(id) = self.lock_entry(file, page, fill) {
                self.metrics.hits.add(1);
                return Ok(LockedPage { cache: self, file, page, id, fresh: false, committed: false });
            }
        }
        loop {
            let found = self.lookup_per(lookup, file, page);
            if let Some(id) = found {
                self.frames.lock_content(id);
                self.metrics.hits.add(1);
                return Ok(LockedPage { cache: self, file, page, id, fresh: false, committed: false });
            }
            if let Some(lp) = self.load_locked(file, page, fill)? {
                return Ok(lp);
            }
        }
    }

    /// Takes a frame for `page`, publishes it locked in the index and fills it. Returns None
    /// if another thread published the page first.
    pub(crate) fn load_locked<'a>(
        &'a self,
        file: &'a FileInner,
        page: u64,
        fill: Fill,
    ) -> Result<Option<LockedPage<'a>>> {
        let Some(id) = self.placement.claim(self, file, page)? else { return Ok(None) };
        self.fill_locked(file, page, id, fill).map(Some)
    }

    /// The guard of a load just published by the placement's claim, counted as a miss.
    pub(crate) fn fresh_load<'a>(&'a self, file: &'a FileInner, page: u64, id: FrameId) -> LockedPage<'a> {
        self.metrics.misses.add(1);
        LockedPage { cache: self, file, page, id, fresh: true, committed: false }
    }

    /// Fills a frame just published `LOCKED` for `page` per `fill`; on error the guard undoes
    /// the load.
    fn fill_locked<'a>(
        &'a self,
        file: &'a FileInner,
        page: u64,
        id: FrameId,
        fill: Fill,
    ) -> Result<LockedPage<'a>> {
        let lp = self.fresh_load(file, page, id);
        let ps = self.frames.page_size();
        match fill {
            Fill::Overwrite => {}
            Fill::Read => {
                let (dev, off) = file.layout.locate(page);
                // SAFETY: as above; the slice covers exactly this frame and lives only for the
                // read call.
                let buf = unsafe { std::slice::from_raw_parts_mut(lp.ptr(), ps) };
                let _span =
                    tracing::debug_span!("upcache.miss", file = %file.name, page, device = dev).entered();
                let start = std::time::Instant::now();
                let read = self.engine.read_vectored(&file.backing[dev], off, &mut [IoSliceMut::new(buf)]);
                self.metrics.latency.device_read[dev].record(start.elapsed());
                let n = read.map_err(|e| {
                    Error::io(format!("read page {page} of {:?} from device {dev}", file.name), e)
                })?;
                self.read_done(&lp, n);
            }
        }
        Ok(lp)
    }

    /// Accounts a device read of `n` bytes into `lp`'s frame and zero-fills the rest.
    pub(crate) fn read_done(&self, lp: &LockedPage<'_>, n: usize) {
        self.metrics.read_ios.add(1);
        self.metrics.read_bytes.add(n as u64);
        self.zero_tail(lp, n);
    }

    /// Zero-fills `lp`'s frame after its first `n` bytes: past the end of the backing file,
    /// unwritten pages read as zeros.
    pub(crate) fn zero_tail(&self, lp: &LockedPage<'_>, n: usize) {
        let ps = self.frames.page_size();
        if n < ps {
            // SAFETY: LOCKED gives us the frame's bytes; the range lies inside the frame.
            unsafe { std::ptr::write_bytes(lp.ptr().add(n), 0, ps - n) };
        }
    }

    /// Undoes a fresh load: out of the index, unlocked without `VALID` (sleepers retry), and
    /// back to the free list.
    fn abort_load(&self, file: &FileInner, page: u64, id: FrameId) {
        file.index.remove_if(page, id);
        self.frames.unlock(id, 0, VALID | DIRTY);
        self.release_frame(file, id);
    }

    /// Returns to the free list a frame that is in no index, not `VALID`, unlocked, and
    /// pinned once by the caller, after any transient pins are dropped: a stale lookup that
    /// pinned it sees a foreign key, or no `VALID` and no `LOCKED`, and unpins at once.
    pub(crate) fn release_frame(&self, file: &FileInner, id: FrameId) {
        let st = self.frames.state(id);
        loop {
            let w = st.load();
            debug_assert!(w & VALID == 0);
            if state::pins(w) == 1 && w & LOCKED == 0 && st.try_release(w) {
                break;
            }
            crate::sync::yield_now();
        }
        self.placement.release(file, id);
    }

    /// Removes a just-claimed frame from its old file's index.
    pub(crate) fn detach_claimed(&self, id: FrameId) {
        let key = self.frames.key(id);
        if let Some(f) = self.file_by_id(key.file) {
            f.index.remove_if(key.page, id);
        }
    }

    /// Writes back a dirty victim (and its neighbours) so a later sweep can claim it.
    /// Returns whether it wrote anything.
    pub(crate) fn write_back_victim(&self, id: FrameId) -> Result<bool> {
        if !self.frames.state(id).try_lock_dirty() {
            return Ok(false); // someone else is on it
        }
        let key = self.frames.key(id);
        let Some(file) = self.file_by_id(key.file) else {
            self.frames.unlock(id, 0, 0);
            return Ok(false);
        };
        self.write_run(&file, key.page, id).map(|_| true).inspect_err(|e| {
            log::warn!("write-back of an eviction victim failed, page stays dirty: {e}");
            file.record_write_error(e);
        })
    }

    /// Drops the clean resident pages `first..end` of `file` (dirty ones stay), after their
    /// borrowed readers (`PageRef`) are done. The caller holds that range of the file
    /// exclusive, so no copying reader or writer is pinning them.
    pub(crate) fn drop_clean_pages(&self, file: &FileInner, first: u64, end: u64) {
        let key = |page| PageKey { file: file.id, page };
        for (page, id) in file.index.entries_from(first) {
            if page >= end {
                continue; // (entries come in no particular order)
            }
            if !self.frames.pin_if_holds(id, key(page)) {
                continue; // evicted meanwhile, or re-assigned
            }
            let st = self.frames.state(id);
            self.frames.lock_content(id); // waits out a write-back in flight, and readers
            if st.load() & DIRTY != 0 || !file.index.remove_if(page, id) {
                self.frames.unlock_content(id, 0, 0);
                st.unpin();
                continue;
            }
            self.frames.unlock_content(id, 0, VALID | REFERENCED);
            self.release_frame(file, id);
        }
    }

    /// Drops every cached page of `file` from `first_page` on, discarding dirty data, after
    /// their borrowed readers are done. The caller holds the file's range lock over those
    /// pages exclusively.
    pub(crate) fn drop_pages_from(&self, file: &FileInner, first_page: u64) {
        let key = |page| PageKey { file: file.id, page };
        for (page, id) in file.index.entries_from(first_page) {
            if !self.frames.pin_if_holds(id, key(page)) {
                continue; // evicted (clean, its entry going away) or re-assigned
            }
            let st = self.frames.state(id);
            self.frames.lock_content(id); // waits out a write-back in flight, and readers
            if !file.index.remove_if(page, id) {
                // Someone else took it out of the index (a failed load undoing itself).
                self.frames.unlock_content(id, 0, 0);
                st.unpin();
                continue;
            }
            let old = self.frames.unlock_content(id, 0, VALID | DIRTY | REFERENCED);
            if old & DIRTY != 0 {
                self.account_cleaned(file, 1);
            }
            self.release_frame(file, id);
        }
        if let Some(s) = &file.streams {
            s.dropped_from(first_page);
        }
    }

    /// `page` of `file` goes from clean to dirty: its frame is `LOCKED` by the caller, who
    /// sets `DIRTY` next (the order `file/streams.rs` relies on).
    pub(crate) fn account_dirtied(&self, file: &FileInner, page: u64) {
        if let Some(s) = &file.streams {
            s.dirtied(&self.writeback.dirty_files, file.id, page);
        }
        // Relaxed: a counter; sync re-checks each page's DIRTY bit for correctness.
        if file.dirty_pages.fetch_add(1, Ordering::Relaxed) == 0 {
            // Relaxed: an age for write-back to go by, not a guard of any data.
            file.dirtied_at.store(self.writeback.now_ms(), Ordering::Relaxed);
        }
        self.writeback.page_dirtied();
    }

    /// `n` pages of `file` went from dirty to clean (written back or dropped).
    pub(crate) fn account_cleaned(&self, file: &FileInner, n: u64) {
        // Release: a sync that reads the lower count (Acquire, `flush_file`'s fast path) and
        // skips the file also sees what the write-back did before, such as counting a
        // possible metadata change (`io/zero_window.rs`).
        file.dirty_pages.fetch_sub(n, Ordering::Release);
        self.writeback.pages_cleaned(n as usize);
    }
}
