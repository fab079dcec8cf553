//! LRU, approximated by sampling: each frame keeps the time of its last use, and eviction
//! takes the least recently used of a few random frames (`policy/sample.rs`). An exact LRU
//! moves a page to the head of a shared list on every hit, the lock that limits the kernel's
//! page cache; here a hit is one relaxed store.
//!
//! Time is the number of pages inserted so far (misses), so uses between two misses tie.
//! Pinned hits stamp the frame through [`Policy::on_hit`]; a lock-free hit only marks the
//! touched bitmap, and counts as a use at the moment eviction samples the frame.

use super::sample::evict_sampled;
use super::{DirtyRule, Policy, Victim};
use crate::frame::{FrameId, FrameTable};
use std::sync::atomic::{AtomicU32, Ordering};

/// The sampled LRU policy.
#[derive(Debug)]
pub struct LruPolicy {
    /// Pages inserted so far, wrapping.
    now: AtomicU32,
    last_use: Box<[AtomicU32]>,
    dirty: DirtyRule,
}

impl LruPolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        LruPolicy {
            now: AtomicU32::new(0),
            last_use: (0..frames).map(|_| AtomicU32::new(0)).collect(),
            dirty,
        }
    }

    fn stamp(&self, id: FrameId) {
        // Relaxed (both): a hint; a stale time only misplaces the frame in the ranking.
        let now = self.now.load(Ordering::Relaxed);
        self.last_use[id as usize].store(now, Ordering::Relaxed);
    }
}

impl Policy for LruPolicy {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn on_insert(&self, _frames: &FrameTable, id: FrameId) {
        // Relaxed: a counter for ordering hints (see `stamp`).
        let now = self.now.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.last_use[id as usize].store(now, Ordering::Relaxed);
    }

    fn on_hit(&self, id: FrameId) {
        self.stamp(id);
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        let (victim, _) = evict_sampled(frames, &self.dirty, |id| {
            if frames.take_touched(id) {
                self.stamp(id);
            }
            // Relaxed: as in `stamp`. Oldest first: the largest age ranks lowest. The stamp is
            // read first, and one from the future (stamped after our read of `now`, which a
            // concurrent insert advanced) counts as age 0, not as wrapped to the oldest.
            let stamp = self.last_use[id as usize].load(Ordering::Relaxed);
            let age = self.now.load(Ordering::Relaxed).wrapping_sub(stamp);
            let age = if age > u32::MAX / 2 { 0 } else { age };
            u64::from(u32::MAX - age)
        });
        victim
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::policy::tests::{evictions_until, resident_table_with};

    #[test]
    fn the_least_recently_used_page_goes_first() {
        let (t, p) = resident_table_with(64, |n| LruPolicy::new(n, DirtyRule::default()));
        // Every page but 7 used after its insertion: 7 is the oldest by far.
        for id in 0..64 {
            if id != 7 {
                p.on_hit(id);
            }
        }
        // A sample of 16 out of 64 misses frame 7 sometimes; it goes within a few evictions
        // where a random choice would take 32 on average.
        assert!(evictions_until(&t, &p, 7) < 16);
    }
}
