//! LFU with dynamic aging (LFU-DA, Arlitt et al.), approximated by sampling: each frame keeps
//! its use count and a priority, the cache's age at its last use plus the count; eviction
//! takes the lowest-priority of a few random frames (`policy/sample.rs`) and raises the age to
//! the victim's priority. Plain LFU keeps pages that were hot long ago forever; with the age,
//! a page's priority is refreshed only when it is used, so old counts stop protecting a page
//! once the age has passed them.
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
    uses: Box<[AtomicU32]>,
    priority: Box<[AtomicU32]>,
    dirty: DirtyRule,
}

impl LfuPolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        let zeros = || (0..frames).map(|_| AtomicU32::new(0)).collect();
        LfuPolicy { age: AtomicU32::new(0), uses: zeros(), priority: zeros(), dirty }
    }

    fn count_use(&self, id: FrameId) {
        // Relaxed: hints; load + store, as a lost use costs little and a hit is the hot path.
        let u = &self.uses[id as usize];
        let n = u.load(Ordering::Relaxed).saturating_add(1);
        u.store(n, Ordering::Relaxed);
        let age = self.age.load(Ordering::Relaxed);
        self.priority[id as usize].store(age.saturating_add(n), Ordering::Relaxed);
    }
}

impl Policy for LfuPolicy {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn on_insert(&self, _frames: &FrameTable, id: FrameId) {
        // Relaxed: see `count_use`.
        self.uses[id as usize].store(0, Ordering::Relaxed);
        self.count_use(id);
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

    #[test]
    fn a_use_refreshes_the_priority_to_the_current_age() {
        use crate::policy::tests::insert;
        let (t, p) = resident_table_with(32, |n| LfuPolicy::new(n, DirtyRule::default()));
        // Age the cache by a few rounds of evictions, then use frame 3 once: its priority is
        // the age now plus its uses, above every page inserted before (at most age + 1).
        let mut page = 1000;
        for _ in 0..5 * 32 {
            match p.pick_victim(&t) {
                Victim::Claimed(id) => {
                    insert(&t, &p, id, page);
                    page += 1;
                }
                v => panic!("{v:?}"),
            }
        }
        p.on_hit(3);
        let age = p.age.load(Ordering::Relaxed);
        assert!(age >= 3, "the age rose: {age}");
        assert!(p.priority[3].load(Ordering::Relaxed) >= age + 2);
    }
}
