//! GClock (generalized CLOCK): each frame has a small hit count;
//! the hand takes one off a frame that has any and passes it over, and claims the first
//! frame with none that is unpinned and clean. So a page hit k times survives k more sweeps,
//! where CLOCK keeps any page hit once for one sweep: frequently used pages outlive a scan.
//!
//! Hits add to the count: pinned hits through [`Policy::on_hit`], lock-free hits (no pin)
//! through the frame table's touched bitmap, read when the hand passes. The state word's
//! `REFERENCED` bit (set by every pin, so also by the load that brought the page in) is the
//! second chance it is in CLOCK. Counts saturate at [`MAX_COUNT`]. Dirty frames are taken by the
//! policy's [`DirtyRule`], as in CLOCK.
//!
//! Counts are one relaxed byte per frame: a lost increment only shortens a page's stay by a
//! sweep. The hand is an atomic counter, so concurrent evictors sweep different frames.

use super::{sweep, DirtyRule, Policy, Victim};
use crate::frame::{FrameId, FrameTable};
use crate::sync::{AtomicUsize, Ordering};
use std::sync::atomic::AtomicU8;

/// Hits a frame's count holds at most.
pub const MAX_COUNT: u8 = 3;

/// The GClock policy over a table of `counts.len()` frames.
#[derive(Debug)]
pub struct GClockPolicy {
    hand: AtomicUsize,
    counts: Box<[AtomicU8]>,
    dirty: DirtyRule,
}

impl GClockPolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        GClockPolicy {
            hand: AtomicUsize::new(0),
            counts: (0..frames).map(|_| AtomicU8::new(0)).collect(),
            dirty,
        }
    }

    fn count(&self, id: FrameId) -> &AtomicU8 {
        &self.counts[id as usize]
    }

    fn bump(&self, id: FrameId) {
        // Relaxed: a hint (module docs); load + store, not an atomic add, since a lost hit
        // costs little and a hit is the hot path.
        let c = self.count(id).load(Ordering::Relaxed);
        if c < MAX_COUNT {
            self.count(id).store(c + 1, Ordering::Relaxed);
        }
    }
}

impl Policy for GClockPolicy {
    fn name(&self) -> &'static str {
        "gclock"
    }

    fn on_hit(&self, frame: FrameId) {
        self.bump(frame);
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        // Every count may have to run down, and each frame gets one more pass for its
        // reference bit.
        sweep(frames, &self.hand, (MAX_COUNT as usize + 2) * frames.len(), &self.dirty, |id| {
            if frames.take_touched(id) {
                self.bump(id);
            }
            // Relaxed: as in bump.
            let c = self.count(id).load(Ordering::Relaxed);
            if c > 0 {
                self.count(id).store(c - 1, Ordering::Relaxed);
            }
            c > 0
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::frame::state::{DIRTY, VALID};
    use crate::policy::tests::resident_table;

    /// Evicts until frame `keep` goes: how many evictions it survived.
    fn survives(t: &FrameTable, p: &GClockPolicy, keep: FrameId) -> usize {
        for evicted in 0.. {
            match p.pick_victim(t) {
                Victim::Claimed(id) if id == keep => return evicted,
                Victim::Claimed(id) => {
                    // Back in use, unreferenced: as a fresh page loaded and left alone.
                    t.state(id).assign_locked();
                    t.unlock(id, VALID, crate::frame::state::REFERENCED);
                    t.state(id).unpin();
                }
                v => panic!("{v:?}"),
            }
        }
        unreachable!()
    }

    #[test]
    fn a_frequently_hit_page_outlives_pages_hit_once() {
        let t = resident_table(8);
        let p = GClockPolicy::new(8, DirtyRule::default());
        for _ in 0..3 {
            p.on_hit(5);
        }
        // Frame 5 survives every other frame's eviction at least twice over.
        assert!(survives(&t, &p, 5) >= 14);
        // With no hits a page goes within a sweep or two.
        let (t, p) = (resident_table(8), GClockPolicy::new(8, DirtyRule::default()));
        assert!(survives(&t, &p, 5) < 16);
    }

    #[test]
    fn prefers_clean_and_reports_dirty_and_pinned() {
        let t = resident_table(3);
        let p = GClockPolicy::new(3, DirtyRule::default());
        for i in 0..2 {
            assert!(t.state(i).try_lock());
            t.unlock(i, DIRTY, 0);
        }
        assert_eq!(p.pick_victim(&t), Victim::Claimed(2));
        t.state(2).assign_locked();
        t.unlock(2, VALID | DIRTY, 0);
        assert!(matches!(p.pick_victim(&t), Victim::Dirty(_)));
        for i in 0..3 {
            t.state(i).try_pin().unwrap();
        }
        assert_eq!(p.pick_victim(&t), Victim::None);
    }

    #[test]
    fn lock_free_hits_count_too() {
        let t = resident_table(4);
        let p = GClockPolicy::new(4, DirtyRule::default());
        t.touch(1);
        // The first sweep turns the touch into a count, so frame 1 outlives a plain page.
        let first = p.pick_victim(&t);
        assert_ne!(first, Victim::Claimed(1));
    }
}
