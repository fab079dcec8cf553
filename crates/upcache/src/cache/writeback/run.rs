//! Writing runs of dirty pages, and flushing a file or a share of the cache.

use std::io::IoSlice;
use std::ops::Range;

use crate::io::engine::IoReq;

use super::FindDirty;
use crate::cache::CacheInner;
use crate::config::FlushKind;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::state::{DIRTY, LOCKED, REFERENCED};
use crate::frame::{FrameId, PageKey};
use crate::sync::{Arc, Ordering};

/// Longest run written in one request with streams off, in pages (with streams on: the
/// devices' request size, `Writeback::run_pages`).
pub(crate) const MAX_RUN: usize = 64;
/// A written-back run this long (with streams) is a stream that reclaim evicts in order.
const STREAM_RUN: usize = 16;
/// A run of dirty pages held `LOCKED` for writing: (page, frame), adjacent on one device.
type Run = Vec<(u64, FrameId)>;

/// Runs written in one engine batch at most.
const MAX_BATCH_RUNS: usize = 16;
/// Stream write-back puts at most this many of the devices' largest requests in one batch per
/// device. The batch waits for all its writes, and so does anything queued behind them on the
/// device: a cap in bytes keeps a writer's own dflush from waiting behind tens of MiB of
/// flusher writes; 2 halved the p99 of sequential writes at the same throughput
/// (bench/RESULTS.md).
const BATCH_REQUESTS_PER_DEVICE: usize = 2;
/// Frames a write-back scan takes from the shared cursor at a time.
const SCAN_CHUNK: usize = 256;

/// How much of `page` a write-back writes: the whole page, but for the page holding a plain
/// file's end, which is written up to the end rounded up to the file's `tail_unit` (another
/// process's bytes past the end are not overwritten). The caller holds the frame LOCKED: no
/// writer can extend the file inside this page meanwhile (writers raise the length before
/// they unlock the page, `File::write_at`), and one that extends it past the page leaves the
/// rest of it zeros in the cache and a hole or what was there on the OS file. So only the
/// last page of a run can be short: a dirty page after it would lie past the length.
fn written_of_page(file: &FileInner, page: u64, ps: usize) -> usize {
    if !file.plain {
        return ps;
    }
    let start = page * ps as u64;
    // Acquire: pairs with the Release of the writes that extended the file.
    let len = file.len.load(Ordering::Acquire);
    if len <= start || len >= start + ps as u64 {
        return ps;
    }
    (len - start).next_multiple_of(file.tail_unit).min(ps as u64) as usize
}

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
    /// Used by misses that need a frame (eviction of a dirty victim): the run is at most
    /// [`MAX_RUN`] pages, since the miss waits for it; flushers and syncs write longer ones.
    pub(crate) fn write_run(&self, file: &FileInner, page: u64, id: FrameId) -> Result<usize> {
        let run = self.lock_run(file, page, id, MAX_RUN.min(self.writeback.run_pages));
        self.write_runs(&[(file, run)]).pop().expect("one result per run")
    }

    /// Grows the run of dirty pages around `page` (frame `id`, held `LOCKED` and `DIRTY` by
    /// the caller) backwards, then forwards, over pages adjacent in this backing file, each
    /// taken with `try_lock_dirty` (never waiting), up to `max` pages.
    fn lock_run(&self, file: &FileInner, page: u64, id: FrameId, max: usize) -> Run {
        let mut run = std::collections::VecDeque::with_capacity(8);
        run.push_back((page, id));
        while run.len() < max {
            let Some(prev) = file.layout.prev_on_device(run[0].0) else { break };
            let Some(pid) = self.try_lock_dirty_page(file, prev) else { break };
            run.push_front((prev, pid));
        }
        while run.len() < max {
            let Some(next) = file.layout.next_on_device(run[run.len() - 1].0) else { break };
            let Some(nid) = self.try_lock_dirty_page(file, next) else { break };
            run.push_back((next, nid));
        }
        run.into()
    }

    /// Writes locked runs (from `lock_run`) as one engine batch, so runs on different
    /// devices go out together, and unlocks each: clean if its write succeeded, still dirty
    /// if not. Returns each run's pages written or error.
    fn write_runs(&self, runs: &[(&FileInner, Run)]) -> Vec<Result<usize>> {
        let ps = self.frames.page_size();
        let slices: Vec<Vec<IoSlice<'_>>> = runs
            .iter()
            .map(|(file, run)| {
                run.iter()
                    .enumerate()
                    .map(|(i, &(page, f))| {
                        let n = written_of_page(file, page, ps);
                        // A short page inside a run would shift every page after it.
                        debug_assert!(n == ps || i + 1 == run.len(), "short page inside a run");
                        // SAFETY: we hold the frame LOCKED, so no writer changes its bytes
                        // while the slice lives; readers only read. The slice lies inside
                        // the frame.
                        IoSlice::new(unsafe { std::slice::from_raw_parts(self.frames.ptr(f), n) })
                    })
                    .collect()
            })
            .collect();
        // Pages per device of the array (plain files are on none), for the GC watch.
        let mut devices: Vec<(usize, usize)> = Vec::new();
        let mut reqs: Vec<IoReq<'_, '_>> = runs
            .iter()
            .zip(&slices)
            .map(|((file, run), bufs)| {
                let (dev, offset) = file.layout.locate(run[0].0);
                if file.plain {
                    // Before the write can grow the OS file: a size up to here is ours.
                    let end = offset + bufs.iter().map(|b| b.len() as u64).sum::<u64>();
                    file.os_size.fetch_max(end, Ordering::SeqCst);
                } else {
                    match devices.iter_mut().find(|(d, _)| *d == dev) {
                        Some((_, pages)) => *pages += run.len(),
                        None => devices.push((dev, run.len())),
                    }
                }
                IoReq::Write { file: &file.backing[dev], offset, bufs }
            })
            .collect();
        let tracked: Vec<_> = devices.into_iter().map(|(dev, pages)| self.gc.begin(dev, pages)).collect();
        let span = tracing::debug_span!("upcache.write_back", runs = runs.len()).entered();
        let start = std::time::Instant::now();
        let results = self.engine.run_batch(&mut reqs);
        let took = start.elapsed();
        let alone = tracked.len() == 1;
        for t in tracked {
            self.gc.end(t, took, alone);
        }
        drop(span);
        drop(reqs);
        drop(slices);
        // Ended (written or not): outside a backing file's zero window it may have allocated
        // blocks or grown the file, which its next sync must fdatasync (io/zero_window.rs).
        for (file, run) in runs {
            let (dev, offset) = file.layout.locate(run[0].0);
            file.backing[dev].zeros().after_write(offset, offset + (run.len() * ps) as u64);
            self.metrics.latency.device_write[dev].record(took);
        }
        runs.iter()
            .zip(results)
            .map(|((file, run), result)| match result {
                Ok(_) => {
                    // Out of the dirty streams before DIRTY clears (file/streams.rs).
                    let mut clear = DIRTY;
                    if let Some(s) = &file.streams {
                        let ranges = page_ranges(run);
                        if run.len() >= STREAM_RUN {
                            // A written-back stream: its pages go first when frames are
                            // reclaimed, unless they are used again (which marks them).
                            clear |= REFERENCED;
                            self.writeback.stream_cleaned(file.id, &ranges);
                        }
                        s.cleaned(ranges);
                    }
                    for &(_, f) in run {
                        self.frames.unlock(f, 0, clear);
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
                    let (dev, _) = file.layout.locate(run[0].0);
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
            })
            .collect()
    }

    /// Writes back every page of `file` that is dirty when the call starts (and any dirtied
    /// meanwhile that it meets), waiting for write-backs already in flight. Returns the first
    /// error; failed pages stay dirty.
    pub(crate) fn flush_file(&self, file: &FileInner) -> Result<()> {
        // A page dirtied before this call incremented the count before its writer returned,
        // which happens before our caller called us. Acquire: pairs with the Release in
        // `account_cleaned`, so the write-backs that cleaned the file are visible too.
        if file.dirty_pages.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        // With streams, only the dirty ranges (exact: file/streams.rs); else every
        // cached page, ascending.
        let entries: Box<dyn Iterator<Item = (u64, FrameId)>> = match &file.streams {
            Some(s) => Box::new(
                s.all().into_iter().flatten().filter_map(|page| Some((page, file.index.peek(page)?))),
            ),
            None => {
                let mut entries = file.index.entries_from(0);
                entries.sort_unstable();
                Box::new(entries.into_iter())
            }
        };
        let mut first_err = None;
        // Runs locked and not yet written; written as one batch when full, and before this
        // thread waits on a frame (it may wait on one frame only while holding none).
        let mut batch: Vec<(&FileInner, Run)> = Vec::new();
        let mut pinned: Vec<FrameId> = Vec::new();
        let mut flush = |batch: &mut Vec<_>, pinned: &mut Vec<FrameId>| {
            let results = self.write_runs(batch);
            for ((f, _), r) in batch.iter().zip(results) {
                if let Err(e) = r {
                    // For every open description's next sync, this caller's included (which
                    // reports it as its own and not again: `FileInner::unseen_error`).
                    f.record_write_error(&e);
                    first_err.get_or_insert(e);
                }
            }
            batch.clear();
            for id in pinned.drain(..) {
                self.frames.state(id).unpin();
            }
        };
        // Puts the run of `page` (frame `id`, pinned by us) in the batch if the page is dirty
        // and free: Some(true). Some(false) if it is clean and free (our pin dropped); None if
        // another thread holds it.
        let take = |page: u64, id: FrameId, batch: &mut Vec<_>, pinned: &mut Vec<FrameId>| {
            let st = self.frames.state(id);
            if st.try_lock_dirty() {
                batch.push((file, self.lock_run(file, page, id, self.writeback.run_pages)));
                pinned.push(id);
                return Some(true);
            }
            if st.load() & (DIRTY | LOCKED) == 0 {
                st.unpin();
                return Some(false);
            }
            None
        };
        // Pages held by another thread (a write-back in flight, or a writer copying in) are
        // taken after every other page is on its way, so that our writes and theirs overlap
        // instead of ours waiting for theirs to end (the kernel's fdatasync, too, writes first
        // and waits for the pages under write-back after). Each keeps our pin.
        let mut busy: Vec<(u64, FrameId)> = Vec::new();
        for (page, id) in entries {
            if self.frames.state(id).load() & DIRTY == 0 {
                continue;
            }
            if !self.frames.pin_if_holds(id, PageKey { file: file.id, page }) {
                continue; // evicted (hence clean) or re-assigned
            }
            match take(page, id, &mut batch, &mut pinned) {
                Some(true) if batch.len() == MAX_BATCH_RUNS => flush(&mut batch, &mut pinned),
                Some(_) => {}
                None => busy.push((page, id)),
            }
        }
        for (page, id) in busy {
            loop {
                match take(page, id, &mut batch, &mut pinned) {
                    Some(true) if batch.len() == MAX_BATCH_RUNS => flush(&mut batch, &mut pinned),
                    Some(_) => {}
                    // Still held: write ours, then wait for it (holding no frame locked).
                    None if !batch.is_empty() => {
                        flush(&mut batch, &mut pinned);
                        continue;
                    }
                    None => {
                        let st = self.frames.state(id);
                        self.frames.waits.wait_until(id, st, |w| w & LOCKED == 0);
                        continue;
                    }
                }
                break;
            }
        }
        flush(&mut batch, &mut pinned);
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
            // This chunk's runs, written as one batch (only try-locks here: nothing waits).
            let mut locked: Vec<(Arc<FileInner>, Run)> = Vec::new();
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
                let run = self.lock_run(&file, key.page, id, self.writeback.run_pages);
                locked.push((file, run));
                if locked.len() == MAX_BATCH_RUNS {
                    written += self.write_locked(&mut locked);
                }
            }
            written += self.write_locked(&mut locked);
            scanned += SCAN_CHUNK;
        }
        written
    }

    /// Stream write-back (flushers and dflush with streams on): takes files off the dirty
    /// list, oldest first, and writes their dirty ranges, until `max_pages` are written or the
    /// dirty count is at most `stop_at`. Never waits on a frame. Stops early when several
    /// files in a row gave nothing to write (their pages failing or busy). Returns the pages
    /// written.
    pub(crate) fn flush_streams(&self, max_pages: usize, stop_at: usize) -> usize {
        const FRUITLESS_FILES: usize = 4;
        let wb = &self.writeback;
        let mut written = 0;
        let mut fruitless = 0;
        while written < max_pages && wb.dirty() > stop_at && fruitless < FRUITLESS_FILES {
            let Some(id) = wb.dirty_files.next() else { break };
            let Some(file) = self.file_by_id(id) else { continue }; // removed, pages dropped
            let Some(s) = &file.streams else { continue };
            let ranges = s.take(&wb.dirty_files, id, (max_pages - written) as u64);
            let n = self.write_ranges(&file, &ranges);
            s.requeue_if_dirty(&wb.dirty_files, id);
            written += n;
            fruitless = if n == 0 { fruitless + 1 } else { 0 };
        }
        written
    }

    /// Writes back the dirty pages of `ranges` of `file` that no one holds, in runs, in
    /// batches. Failures stick to the file. Returns the pages written.
    fn write_ranges(&self, file: &Arc<FileInner>, ranges: &[Range<u64>]) -> usize {
        let mut locked: Vec<(Arc<FileInner>, Run)> = Vec::new();
        let mut written = 0;
        // Runs grow past the ranges (to neighbours on the device): cap them so that all of
        // them together stay near the quota the ranges were taken for (a writer's dflush
        // wrote up to a request per device more than its quota).
        let mut budget: usize = ranges.iter().map(|r| (r.end - r.start) as usize).sum();
        let mut batch_pages = 0;
        let max_batch_pages = BATCH_REQUESTS_PER_DEVICE * self.writeback.run_pages * file.layout.devices();
        for page in ranges.iter().flat_map(|r| r.clone()) {
            if budget == 0 {
                break;
            }
            // Pages already in one of our runs are LOCKED: this fails at once for them.
            let Some(id) = self.try_lock_dirty_page(file, page) else { continue };
            let run = self.lock_run(file, page, id, self.writeback.run_pages.min(budget));
            budget = budget.saturating_sub(run.len());
            batch_pages += run.len();
            locked.push((file.clone(), run));
            if locked.len() == MAX_BATCH_RUNS || batch_pages >= max_batch_pages {
                written += self.write_locked(&mut locked);
                batch_pages = 0;
            }
        }
        written + self.write_locked(&mut locked)
    }

    /// Writes `locked` runs as one batch and empties it; failures stick to their files.
    /// Returns the pages written.
    fn write_locked(&self, locked: &mut Vec<(Arc<FileInner>, Run)>) -> usize {
        let runs: Vec<(&FileInner, Run)> =
            locked.iter_mut().map(|(f, run)| (&**f, std::mem::take(run))).collect();
        let mut written = 0;
        for ((file, _), r) in runs.iter().zip(self.write_runs(&runs)) {
            match r {
                Ok(k) => written += k,
                Err(e) => {
                    log::warn!("write-back failed, pages stay dirty: {e}");
                    file.record_write_error(&e);
                }
            }
        }
        drop(runs);
        locked.clear();
        written
    }

    /// Writes back some dirty pages for a flusher or dflush: by streams or by scanning the frame
    /// table. Returns the pages written.
    pub(crate) fn flush_dirty(&self, max_pages: usize, stop_at: usize) -> usize {
        match self.writeback.find {
            FindDirty::Streams => self.flush_streams(max_pages, stop_at),
            FindDirty::Scan => self.flush_some(max_pages, stop_at),
        }
    }

    /// Called by a writer before it writes, with no locks held. Past freerun the writer
    /// writes back pages itself instead of waiting (dflush), in proportion (`Writeback::owed`),
    /// or, with `FlushKind::Background`, sleeps past the foreground threshold until the
    /// flushers have brought the count under it.
    pub(crate) fn balance_dirty(&self, pages_to_dirty: usize) {
        let wb = &self.writeback;
        let dirty = wb.dirty();
        if dirty > wb.background {
            wb.kick_flushers();
        }
        if dirty <= wb.freerun {
            return;
        }
        match self.config.flush {
            FlushKind::Background if dirty > wb.foreground => wb.throttle(),
            FlushKind::Background => {}
            FlushKind::Direct => {
                if let Some(quota) = wb.owed(pages_to_dirty, dirty) {
                    let n = self.flush_dirty(quota, wb.freerun);
                    self.metrics.dflush_pages.add(n as u64);
                }
            }
        }
    }
}

/// A run's pages as ranges of consecutive pages (a run may jump from one stripe unit of its
/// device to the next).
fn page_ranges(run: &Run) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &(page, _) in run {
        match out.last_mut() {
            Some(r) if r.end == page => r.end += 1,
            _ => out.push(page..page + 1),
        }
    }
    out
}
