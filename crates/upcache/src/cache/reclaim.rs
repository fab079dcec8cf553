//! Background reclaim and the allocator's pressure levels (seed 003 §4.3).
//!
//! A miss that leaves the free frames under the low threshold asks the flusher threads to
//! evict clean pages into the pool ahead of demand, so that later misses take a free frame
//! instead of sweeping the CLOCK themselves. Under the urgent threshold every file's frame
//! cache is halved back into the pool first.

use super::CacheInner;
use crate::alloc::{Pressure, LOW_DIVISOR};
use crate::frame::state::ClaimResult;
use crate::frame::FrameId;
use crate::policy::Victim;
use crate::sync::{self, Ordering};

/// Frames background reclaim hands to the pool at once.
const RECLAIM_BATCH: usize = 32;

impl CacheInner {
    /// Asks for background reclaim if free frames run low.
    pub(crate) fn check_pressure(&self) {
        if self.free.pressure(self.frames.len()) != Pressure::None {
            self.request_reclaim();
        }
    }

    /// Wakes the flushers to reclaim, once until they have done it.
    pub(crate) fn request_reclaim(&self) {
        // Relaxed: a hint; the flusher's kick mutex orders the wake-up itself.
        if !self.reclaim_requested.load(Ordering::Relaxed)
            && !self.reclaim_requested.swap(true, Ordering::Relaxed)
        {
            self.writeback.kick_flushers();
        }
    }

    /// Halves every open file's frame cache back into the pool.
    pub(crate) fn shrink_file_caches(&self) {
        // Collect first: the files map is a leaf lock, not held while taking a file's cache.
        let files: Vec<_> = sync::read(&self.files).values().cloned().collect();
        for f in files {
            self.free.shrink(&f.spare_frames);
        }
    }

    /// Flusher side: evicts clean pages (writing back dirty victims) until twice the low
    /// threshold is free, or nothing more can be evicted now.
    pub(crate) fn reclaim(&self) {
        // Relaxed: see `request_reclaim`; clearing first means a request made while we work
        // kicks again rather than being lost.
        if !self.reclaim_requested.swap(false, Ordering::Relaxed) {
            return;
        }
        let frames = self.frames.len();
        if self.free.pressure(frames) == Pressure::Urgent {
            self.shrink_file_caches();
        }
        let target = 2 * frames / LOW_DIVISOR;
        let mut misses = 0;
        // Freed in batches, one pool lock per batch.
        let mut batch = Vec::with_capacity(RECLAIM_BATCH);
        self.evict_cleaned_streams(target, &mut batch);
        while self.free.pooled().saturating_add(batch.len()) < target && misses < 4 {
            match self.policy.pick_victim(&self.frames) {
                Victim::Claimed(id) => {
                    self.detach_claimed(id);
                    self.metrics.evictions.add(1);
                    self.metrics.reclaimed.add(1);
                    batch.push(id);
                    if batch.len() == RECLAIM_BATCH {
                        self.free.free_many(&batch);
                        batch.clear();
                    }
                }
                Victim::Dirty(id) => {
                    if !matches!(self.write_back_victim(id), Ok(true)) {
                        misses += 1;
                    }
                }
                Victim::None => misses += 1,
            }
        }
        self.free.free_many(&batch);
    }

    /// Evicts pages of written-back streams, oldest stream first, while the pool (with
    /// `batch`) is under `target`: each page whose frame is unpinned, clean, and not used
    /// since its write-back (the write-back cleared its reference bit). Seed 003 §4.2's
    /// eviction by stream, for the streams write-back saw; other pages are left to CLOCK.
    fn evict_cleaned_streams(&self, target: usize, batch: &mut Vec<FrameId>) {
        while self.free.pooled().saturating_add(batch.len()) < target {
            let Some((file_id, pages)) = self.writeback.oldest_cleaned_stream() else { return };
            let Some(file) = self.file_by_id(file_id) else { continue };
            for page in pages.clone() {
                if self.free.pooled().saturating_add(batch.len()) >= target {
                    self.writeback.return_cleaned_stream(file_id, page..pages.end);
                    return;
                }
                let Some(id) = file.index.peek(page) else { continue };
                if self.frames.take_touched(id) {
                    continue; // read since (a lock-free hit): keep it
                }
                // A frame that moved to another page since the peek is as good a victim: it
                // is clean, unpinned and unreferenced too.
                if self.frames.state(id).try_claim() == ClaimResult::Claimed {
                    self.detach_claimed(id);
                    self.metrics.evictions.add(1);
                    self.metrics.reclaimed.add(1);
                    self.metrics.stream_evictions.add(1);
                    batch.push(id);
                    if batch.len() == RECLAIM_BATCH {
                        self.free.free_many(batch);
                        batch.clear();
                    }
                }
            }
        }
    }
}
