//! LFU with dynamic aging (LFU-DA), approximated by sampling: each frame keeps a priority, its
//! use count plus the cache's age at insertion; eviction takes the lowest-priority of a few
//! random frames (`policy/sample.rs`) and raises the age to the victim's priority. Plain LFU
//! keeps pages that were hot long ago forever; with the age, a new page starts level with the
//! pages that survived, and old counts stop protecting a page once the age passes them.
//!
//! Pinned hits add one through [`Policy::on_hit`]; a lock-free hit only marks the touched
//! bitmap and adds one when eviction samples the frame.

use super::sample::evict_sampled;
use super::{DirtyRule, Policy, Victim};
use crate::frame::{FrameId, FrameTable};
use std::sync::atomic::{AtomicU32, Ordering};

/// The sampled LFU-DA policy.
#[derive(Debug)]
pub struct LfuPolicy {
    /// The priority of the last victim: the age new pages start from.
    age: AtomicU32,
    priority: Box<[AtomicU32]>,
    dirty: DirtyRule,
}

impl LfuPolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        LfuPolicy {
            age: AtomicU32::new(0),
            priority: (0..frames).map(|_| AtomicU32::new(0)).collect(),
            dirty,
        }
    }

    fn count_use(&self, id: FrameId) {
        // Relaxed: a hint; load + store, as a lost use costs little and a hit is the hot path.
        let p = &self.priority[id as usize];
        p.store(p.load(Ordering::Relaxed).saturating_add(1), Ordering::Relaxed);
    }
}

impl Policy for LfuPolicy {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn on_insert(&self, _frames: &FrameTable, id: FrameId) {
        // Relaxed: see `count_use`.
        let start = self.age.load(Ordering::Relaxed).saturating_add(1);
        self.priority[id as usize].store(start, Ordering::Relaxed);
    }

    fn on_hit(&self, id: FrameId) {
        self.count_use(id);
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        let (victim, rank) = evict_sampled(frames, &self.dirty, |id| {
            if frames.take_touched(id) {
                self.count_use(id);
            }
            // Relaxed: see `count_use`.
            u64::from(self.priority[id as usize].load(Ordering::Relaxed))
        });
        if matches!(victim, Victim::Claimed(_)) {
            // Relaxed: see `count_use`. The age never goes back.
            self.age.fetch_max(rank as u32, Ordering::Relaxed);
        }
        victim
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::policy::tests::{evictions_until, resident_table_with};

    #[test]
    fn a_frequently_used_page_outlives_the_others() {
        let (t, p) = resident_table_with(32, |n| LfuPolicy::new(n, DirtyRule::default()));
        for _ in 0..50 {
            p.on_hit(3);
        }
        // The age rises by one per round of evictions (each round takes the pages inserted
        // at the last age): frame 3's 51 outlasts about 50 rounds, an unused page one.
        assert!(evictions_until(&t, &p, 3) > 30 * 32);
    }

    #[test]
    fn old_counts_age_out() {
        let (t, p) = resident_table_with(32, |n| LfuPolicy::new(n, DirtyRule::default()));
        for _ in 0..5 {
            p.on_hit(3);
        }
        // With aging, 5 old uses protect frame 3 for about 5 rounds, not forever (plain LFU
        // would keep it while fresh pages with one use come and go).
        assert!(evictions_until(&t, &p, 3) < 10 * 32);
    }
}
