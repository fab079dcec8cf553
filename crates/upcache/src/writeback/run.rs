//! Writing runs of dirty pages, and flushing a file or a share of the cache.

use std::io::IoSlice;

use crate::cache::CacheInner;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::state::{DIRTY, LOCKED};
use crate::frame::{FrameId, PageKey};
use crate::sync::Ordering;

/// Longest run written in one request, in pages.
const MAX_RUN: usize = 64;
/// Frames a write-back scan takes from the shared cursor at a time.
const SCAN_CHUNK: usize = 256;

impl CacheInner {
    /// Takes `LOCKED` on the dirty frame holding `page` of `file`, if there is one.
    fn try_lock_dirty_page(&self, file: &FileInner, page: u64) -> Option<FrameId> {
        let id = file.index.peek(page)?;
        if !self.frames.state(id).try_lock_dirty() {
            return None;
        }
        // Has the page moved? LOCKED keeps the frame from being re-assigned from here on.
        if self.frames.key(id) != (PageKey { file: file.id, page }) {
            self.frames.unlock(id, 0, 0);
            return None;
        }
        Some(id)
    }

    /// Writes back the run of dirty pages around `page`, whose frame `id` the caller holds
    /// `LOCKED` and `DIRTY`. Returns the number of pages written. On failure every page of
    /// the run stays dirty and the error is returned (the caller decides whom to tell).
    pub(crate) fn write_run(&self, file: &FileInner, page: u64, id: FrameId) -> Result<usize> {
        let mut run = [(0u64, 0 as FrameId); MAX_RUN];
        let mut start = MAX_RUN / 2;
        let mut end = start + 1;
        run[start] = (page, id);
        // Grow backwards, then forwards, over pages adjacent in this backing file.
        while start > 0 && end - start < MAX_RUN {
            let Some(prev) = self.layout.prev_on_device(run[start].0) else { break };
            let Some(pid) = self.try_lock_dirty_page(file, prev) else { break };
            start -= 1;
            run[start] = (prev, pid);
        }
        while end < MAX_RUN {
            let Some(next) = self.layout.next_on_device(run[end - 1].0) else { break };
            let Some(nid) = self.try_lock_dirty_page(file, next) else { break };
            run[end] = (next, nid);
            end += 1;
        }
        let run = &run[start..end];
        let ps = self.frames.page_size();
        let slices: Vec<IoSlice<'_>> = run
            .iter()
            .map(|&(_, f)| {
                // SAFETY: we hold the frame LOCKED, so no writer changes its bytes while the
                // slice lives; readers only read. The slice covers exactly the frame.
                IoSlice::new(unsafe { std::slice::from_raw_parts(self.frames.ptr(f), ps) })
            })
            .collect();
        let (dev, offset) = self.layout.locate(run[0].0);
        let result = self.engine.write_vectored(&file.backing[dev], offset, &slices);
        drop(slices);
        match result {
            Ok(()) => {
                for &(_, f) in run {
                    self.frames.unlock(f, 0, DIRTY);
                }
                self.account_cleaned(file, run.len() as u64);
                self.metrics.writeback_ios.add(1);
                self.metrics.writeback_bytes.add((run.len() * ps) as u64);
                Ok(run.len())
            }
            Err(e) => {
                for &(_, f) in run {
                    self.frames.unlock(f, 0, 0);
                }
                self.metrics.writeback_errors.add(1);
                Err(Error::io(
                    format!(
                        "write back pages {}..={} of {:?} to device {dev}",
                        run[0].0,
                        run[run.len() - 1].0,
                        file.name
                    ),
                    e,
                ))
            }
        }
    }

    /// Writes back every page of `file` that is dirty when the call starts (and any dirtied
    /// meanwhile that it meets), waiting for write-backs already in flight. Returns the first
    /// error; failed pages stay dirty.
    pub(crate) fn flush_file(&self, file: &FileInner) -> Result<()> {
        // Relaxed: a fast path only. A page dirtied before this call incremented the count
        // before its writer returned, which happens before our caller called us.
        if file.dirty_pages.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let mut entries = file.index.entries_from(0);
        entries.sort_unstable();
        let mut first_err = None;
        for (page, id) in entries {
            let st = self.frames.state(id);
            if st.load() & DIRTY == 0 {
                continue;
            }
            if !self.frames.pin_if_holds(id, PageKey { file: file.id, page }) {
                continue; // evicted (hence clean) or re-assigned
            }
            loop {
                if st.try_lock_dirty() {
                    if let Err(e) = self.write_run(file, page, id) {
                        first_err.get_or_insert(e);
                    }
                    break;
                }
                let w = st.load();
                if w & DIRTY == 0 && w & LOCKED == 0 {
                    break;
                }
                // Locked by a writer copying in, or by a write-back in flight: wait for it.
                self.frames.waits.wait_until(id, st, |w| w & LOCKED == 0);
            }
            st.unpin();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes back dirty pages found by scanning the frame table from the shared cursor, until
    /// `max_pages` are written, the dirty count is at most `stop_at`, or a full sweep is done.
    /// Errors stick to their files. Returns the pages written.
    pub(crate) fn flush_some(&self, max_pages: usize, stop_at: usize) -> usize {
        let n = self.frames.len();
        let mut scanned = 0;
        let mut written = 0;
        while scanned < n && written < max_pages && self.writeback.dirty() > stop_at {
            // Relaxed: the cursor only spreads scanners; frame state is checked by CAS.
            let start = self.writeback.cursor.fetch_add(SCAN_CHUNK, Ordering::Relaxed) % n;
            for i in start..(start + SCAN_CHUNK).min(n) {
                let id = i as FrameId;
                if !self.frames.state(id).try_lock_dirty() {
                    continue;
                }
                let key = self.frames.key(id);
                let Some(file) = self.file_by_id(key.file) else {
                    self.frames.unlock(id, 0, 0);
                    continue;
                };
                match self.write_run(&file, key.page, id) {
                    Ok(k) => written += k,
                    Err(e) => {
                        log::warn!("write-back failed, pages stay dirty: {e}");
                        file.record_write_error(&e);
                    }
                }
            }
            scanned += SCAN_CHUNK;
        }
        written
    }

    /// dflush: called by a writer before it writes, with no locks held. Past the foreground
    /// threshold the writer writes back pages itself instead of waiting.
    pub(crate) fn balance_dirty(&self, pages_to_dirty: usize) {
        let wb = &self.writeback;
        let dirty = wb.dirty();
        if dirty > wb.background {
            wb.kick_flushers();
        }
        if dirty > wb.foreground {
            let quota = (2 * pages_to_dirty).max(MAX_RUN);
            let n = self.flush_some(quota, wb.foreground);
            self.metrics.dflush_pages.add(n as u64);
        }
    }
}
