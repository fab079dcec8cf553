//! The global placement: a per-file page index, the frame allocator and the replacement
//! policy, with background reclaim and the allocator's pressure levels (seed 003 §4.3).
//!
//! A miss takes a free frame from the allocator, else the policy's victim. A miss that leaves
//! the free frames under the low threshold asks the flusher threads to evict clean pages into
//! the pool ahead of demand, so that later misses take a free frame instead of sweeping the
//! CLOCK themselves. Under the urgent threshold every file's frame cache is halved back into
//! the pool first.
//!
//! The thresholds count the frames free in the pool against all frames: low below 1/32,
//! urgent below 1/128 (`alloc::LOW_DIVISOR`, `URGENT_DIVISOR`), and reclaim stops once 1/16
//! is free. It takes pages of written-back streams first, oldest stream first (seed 003
//! §4.2), then the policy's victims, writing back the dirty ones it is handed, and frees them
//! in batches, one pool lock per batch.

use super::{EvictionRetries, Placement};
use crate::alloc::{FrameAllocator, Pressure, LOW_DIVISOR};
use crate::cache::CacheInner;
use crate::config::Config;
use crate::error::Result;
use crate::file::FileInner;
use crate::frame::state::ClaimResult;
use crate::frame::{FrameId, PageKey};
use crate::index::{IndexKind, PageIndex};
use crate::policy::{DirtyRule, GcProbe, Policy, Victim};
use crate::sync::{self, AtomicBool, Ordering};

/// Frames a claim takes before it publishes them: a page is published at most 64
/// allocations after it is seen missing. Sorted, a chunk's frames lie side by side when the
/// pool had them so, and so do successive chunks.
const CLAIM_CHUNK: usize = 64;

/// Frames background reclaim hands to the pool at once.
const RECLAIM_BATCH: usize = 32;

/// Per-file indexes, the allocator and the policy.
pub(crate) struct GlobalPlacement {
    index: IndexKind,
    free: FrameAllocator,
    policy: Box<dyn Policy>,
    /// A miss asked the flushers for background reclaim and they have not started it yet.
    reclaim_requested: AtomicBool,
}

impl GlobalPlacement {
    pub(crate) fn new(config: &Config, index: IndexKind, frames: usize, gc: Option<GcProbe>) -> Self {
        GlobalPlacement {
            index,
            free: FrameAllocator::new(config.alloc, frames),
            policy: config.policy.build(frames, DirtyRule::new(config.clean_first, gc)),
            reclaim_requested: AtomicBool::new(false),
        }
    }

    /// A frame for a new page of `file`: from the allocator, else evicted by the policy. Low
    /// pressure asks the flushers to reclaim in the background (and, if urgent, to shrink
    /// the per-file frame caches), so later misses find free frames.
    fn alloc_frame(&self, cache: &CacheInner, file: &FileInner) -> Result<FrameId> {
        let mut retries = EvictionRetries::default();
        loop {
            if let Some(id) = self.free.alloc(&file.spare_frames) {
                self.check_pressure(cache);
                return Ok(id);
            }
            self.request_reclaim(cache);
            match self.policy.pick_victim(&cache.frames) {
                Victim::Claimed(id) => {
                    cache.detach_claimed(id);
                    cache.metrics.evictions.add(1);
                    return Ok(id);
                }
                Victim::Dirty(id) => retries.write_back(cache, id)?,
                Victim::None => retries.wait(),
            }
            retries
                .give_up_if_stuck(|| format!("all {} frames are pinned or under I/O", cache.frames.len()))?;
        }
    }

    /// Publishes frame `id`, just taken by `alloc_frame`, `LOCKED` in the index as `page` of
    /// `file`. False if another thread published the page first: the frame goes back to the
    /// pool and the caller uses theirs.
    fn publish_fresh(&self, cache: &CacheInner, file: &FileInner, page: u64, id: FrameId) -> bool {
        cache.frames.set_key(id, PageKey { file: file.id, page });
        cache.frames.state(id).assign_locked();
        if file.index.insert_if_absent(page, id).is_err() {
            cache.frames.unlock(id, 0, 0);
            cache.release_frame(file, id);
            return false;
        }
        self.policy.on_insert(&cache.frames, id);
        true
    }

    /// Takes frames for `pages` (ascending, seen missing), sorts them and publishes them in
    /// page order. Pages past the frames it could take go without: the error says why.
    fn claim_chunk(
        &self,
        cache: &CacheInner,
        file: &FileInner,
        pages: &[u64],
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()> {
        let mut ids = [0 as FrameId; CLAIM_CHUNK];
        let mut taken = Ok(());
        let mut n = 0;
        for _ in pages {
            match self.alloc_frame(cache, file) {
                Ok(id) => {
                    ids[n] = id;
                    n += 1;
                }
                Err(e) => {
                    taken = Err(e);
                    break;
                }
            }
        }
        ids[..n].sort_unstable();
        for (&page, &id) in pages.iter().zip(&ids[..n]) {
            if self.publish_fresh(cache, file, page, id) {
                out.push((page, id));
            }
        }
        taken
    }

    /// Asks for background reclaim if free frames run low.
    fn check_pressure(&self, cache: &CacheInner) {
        if self.free.pressure(cache.frames.len()) != Pressure::None {
            self.request_reclaim(cache);
        }
    }

    /// Wakes the flushers to reclaim, once until they have done it.
    fn request_reclaim(&self, cache: &CacheInner) {
        // Relaxed: a hint; the flusher's kick mutex orders the wake-up itself.
        if !self.reclaim_requested.load(Ordering::Relaxed)
            && !self.reclaim_requested.swap(true, Ordering::Relaxed)
        {
            cache.writeback.kick_flushers();
        }
    }

    /// Halves every open file's frame cache back into the pool.
    fn shrink_file_caches(&self, cache: &CacheInner) {
        // Collect first: the files map is a leaf lock, not held while taking a file's cache.
        let files: Vec<_> = sync::read(&cache.files).values().cloned().collect();
        for f in files {
            self.free.shrink(&f.spare_frames);
        }
    }

    /// Evicts pages of written-back streams, oldest stream first, while the pool (with
    /// `batch`) is under `target`: each page whose frame is unpinned, clean, and not used
    /// since its write-back (the write-back cleared its reference bit). Seed 003 §4.2's
    /// eviction by stream, for the streams write-back saw; other pages are left to CLOCK.
    fn evict_cleaned_streams(&self, cache: &CacheInner, target: usize, batch: &mut Vec<FrameId>) {
        while self.free.pooled().saturating_add(batch.len()) < target {
            let Some((file_id, pages)) = cache.writeback.oldest_cleaned_stream() else { return };
            let Some(file) = cache.file_by_id(file_id) else { continue };
            for page in pages.clone() {
                if self.free.pooled().saturating_add(batch.len()) >= target {
                    cache.writeback.return_cleaned_stream(file_id, page..pages.end);
                    return;
                }
                let Some(id) = file.index.peek(page) else { continue };
                if cache.frames.take_touched(id) {
                    continue; // read since (a lock-free hit): keep it
                }
                // A frame that moved to another page since the peek is as good a victim: it
                // is clean, unpinned and unreferenced too.
                if cache.frames.state(id).try_claim() == ClaimResult::Claimed {
                    cache.detach_claimed(id);
                    cache.metrics.evictions.add(1);
                    cache.metrics.reclaimed.add(1);
                    cache.metrics.stream_evictions.add(1);
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

impl Placement for GlobalPlacement {
    fn new_index(&self, _file: u64) -> Box<dyn PageIndex> {
        // `build` makes this placement for the per-file kinds only, which all build an index.
        self.index.build().unwrap_or_else(|| Box::<crate::index::RadixIndex>::default())
    }

    fn claim(&self, cache: &CacheInner, file: &FileInner, page: u64) -> Result<Option<FrameId>> {
        let id = self.alloc_frame(cache, file)?;
        Ok(self.publish_fresh(cache, file, page, id).then_some(id))
    }

    fn claim_missing(
        &self,
        cache: &CacheInner,
        file: &FileInner,
        pages: &mut dyn Iterator<Item = u64>,
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()> {
        // In chunks, so a page is published soon after it is seen missing (another reader
        // that finds it missing meanwhile loads it too, and one of the two loses its frame).
        let mut chunk = [0u64; CLAIM_CHUNK];
        let mut n = 0;
        for page in pages {
            if file.index.peek(page).is_some() {
                continue;
            }
            chunk[n] = page;
            n += 1;
            if n == CLAIM_CHUNK {
                self.claim_chunk(cache, file, &chunk, out)?;
                n = 0;
            }
        }
        self.claim_chunk(cache, file, &chunk[..n], out)
    }

    fn release(&self, file: &FileInner, id: FrameId) {
        self.free.free(&file.spare_frames, id);
    }

    fn on_hit(&self, id: FrameId) {
        self.policy.on_hit(id);
    }

    fn file_closed(&self, file: &FileInner) {
        self.free.drain(&file.spare_frames);
    }

    fn frames_in_use(&self, total: usize) -> usize {
        total
    }

    /// Evicts clean pages (writing back dirty victims) until twice the low threshold is free,
    /// or nothing more can be evicted now.
    fn reclaim(&self, cache: &CacheInner) {
        // Relaxed: see `request_reclaim`; clearing first means a request made while we work
        // kicks again rather than being lost.
        if !self.reclaim_requested.swap(false, Ordering::Relaxed) {
            return;
        }
        let frames = cache.frames.len();
        if self.free.pressure(frames) == Pressure::Urgent {
            self.shrink_file_caches(cache);
        }
        let target = 2 * frames / LOW_DIVISOR;
        let mut misses = 0;
        // Freed in batches, one pool lock per batch.
        let mut batch = Vec::with_capacity(RECLAIM_BATCH);
        self.evict_cleaned_streams(cache, target, &mut batch);
        while self.free.pooled().saturating_add(batch.len()) < target && misses < 4 {
            match self.policy.pick_victim(&cache.frames) {
                Victim::Claimed(id) => {
                    cache.detach_claimed(id);
                    cache.metrics.evictions.add(1);
                    cache.metrics.reclaimed.add(1);
                    batch.push(id);
                    if batch.len() == RECLAIM_BATCH {
                        self.free.free_many(&batch);
                        batch.clear();
                    }
                }
                Victim::Dirty(id) => {
                    if !matches!(cache.write_back_victim(id), Ok(true)) {
                        misses += 1;
                    }
                }
                Victim::None => misses += 1,
            }
        }
        self.free.free_many(&batch);
    }

    fn resizable(&self) -> bool {
        false
    }

    fn resize(&self, _cache: &CacheInner, _bytes: u64) -> Result<u64> {
        Err(crate::error::Error::new(
            crate::error::ErrorKind::Unsupported,
            "online resizing needs the set-associative index (IndexKind::SetAssoc)",
        ))
    }

    fn memory_bytes(&self) -> usize {
        0
    }
}
