//! The set-associative placement (SAFS §4): a page's set in the shared [`SetTable`] gives its
//! frame, chooses the in-set victim and records the entry in one step, so the allocator, the
//! global policy and background reclaim have no part. The table can be resized while I/O
//! runs (§4.1, linear hashing). A shrink writes back the dirty pages that keep a merge from
//! finishing and retries; pinned pages make it wait, then fail with `Busy`. `Cache::resize`
//! works only with this placement.

use super::{EvictionRetries, Placement};
use crate::cache::CacheInner;
use crate::error::{Error, ErrorKind, Result};
use crate::file::FileInner;
use crate::frame::{FrameId, PageKey};
use crate::index::setassoc::{Claim, Merge, SetAssocIndex, SetPolicy, SetTable};
use crate::index::PageIndex;
use crate::sync::Arc;

/// The page sets.
pub(crate) struct SetPlacement {
    sets: Arc<SetTable>,
}

impl SetPlacement {
    pub(crate) fn new(frames: usize, ways: usize, policy: SetPolicy) -> Self {
        SetPlacement { sets: Arc::new(SetTable::new(frames, ways, policy)) }
    }

    /// A frame for `page` in its set. A claimer `holding` frames it has not loaded yet fails
    /// with `CacheFull` at once on a set whose every frame is busy: the busy frames may be
    /// another batch's, itself waiting on one of ours.
    fn claim_in_set(
        &self,
        cache: &CacheInner,
        file: &FileInner,
        page: u64,
        holding: bool,
    ) -> Result<Option<FrameId>> {
        let mut retries = EvictionRetries::default();
        let id = loop {
            match self.sets.claim(file.id, page, &cache.frames) {
                // Published by another thread meanwhile: take the hit path.
                Claim::Existing(_) => return Ok(None),
                Claim::New { frame, evicted } => {
                    if evicted {
                        cache.metrics.evictions.add(1);
                    }
                    break frame;
                }
                Claim::Dirty(victim) => retries.write_back(cache, victim)?,
                Claim::Full(_) if holding => {
                    return Err(Error::new(
                        ErrorKind::CacheFull,
                        format!("page {page}'s set is busy while this batch holds frames"),
                    ))
                }
                Claim::Full(busy) => retries.wait_for(cache, busy),
            }
            retries
                .give_up_if_stuck(|| format!("every frame of page {page}'s set is pinned or under I/O"))?;
        };
        cache.frames.set_key(id, PageKey { file: file.id, page });
        cache.frames.state(id).assign_locked();
        Ok(Some(id))
    }
}

impl Placement for SetPlacement {
    fn new_index(&self, file: u64) -> Box<dyn PageIndex> {
        Box::new(SetAssocIndex::new(self.sets.clone(), file))
    }

    fn claim(&self, cache: &CacheInner, file: &FileInner, page: u64) -> Result<Option<FrameId>> {
        self.claim_in_set(cache, file, page, false)
    }

    fn claim_missing(
        &self,
        cache: &CacheInner,
        file: &FileInner,
        pages: &mut dyn Iterator<Item = u64>,
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()> {
        // A page's set chooses its frame: nothing to sort. Each page is looked at just before
        // its claim, since a claim before it may have evicted it from their shared set.
        let before = out.len();
        for page in pages {
            if file.index.peek(page).is_some() {
                continue;
            }
            if let Some(id) = self.claim_in_set(cache, file, page, out.len() > before)? {
                out.push((page, id));
            }
        }
        Ok(())
    }

    fn release(&self, _file: &FileInner, _id: FrameId) {
        // The frame stays in its way's slot, found free by the next claim.
    }

    fn on_hit(&self, _id: FrameId) {
        // The set counted the use at the index lookup (`SetAssocIndex::get`).
    }

    fn file_closed(&self, _file: &FileInner) {}

    fn frames_in_use(&self, _total: usize) -> usize {
        self.sets.frames_used()
    }

    fn reclaim(&self, _cache: &CacheInner) {
        // A miss evicts within its set; there is no pool to fill ahead.
    }

    fn resizable(&self) -> bool {
        true
    }

    fn resize(&self, cache: &CacheInner, bytes: u64) -> Result<u64> {
        let sets = &self.sets;
        let per_set = (sets.ways() * cache.frames.page_size()) as u64;
        let target = ((bytes / per_set) as usize).clamp(1, sets.max_sets());
        while sets.set_count() < target && sets.split_one() {}
        let mut retries = EvictionRetries::default();
        while sets.set_count() > target {
            match sets.merge_one(&cache.frames) {
                Merge::Done(_) => retries = EvictionRetries::default(),
                Merge::Dirty(victim) => retries.write_back(cache, victim)?,
                Merge::Busy => retries.wait(),
                Merge::Smallest => break,
            }
            retries.give_up_with(ErrorKind::Busy, || {
                format!("pinned pages keep page sets from merging; {} sets in use", sets.set_count())
            })?;
        }
        Ok(sets.frames_used() as u64 * cache.frames.page_size() as u64)
    }

    fn memory_bytes(&self) -> usize {
        self.sets.memory_bytes()
    }
}
