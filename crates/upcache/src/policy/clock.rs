//! CLOCK.
//!
//! One hand sweeps the frames. A referenced frame loses its bit and is passed over; the first
//! unreferenced, unpinned, clean frame is claimed. A frame counts as referenced if a pin set
//! its state word's bit or a lock-free hit marked it in the frame table's touched bitmap. Dirty frames are taken by the policy's
//! [`DirtyRule`]: by default passed over (writing them back costs a device write, evicting a
//! clean one costs nothing, as in SAFS §4.2), the first one seen being returned when a sweep
//! of the whole table found no clean frame.
//!
//! The hand is an atomic counter advanced with `fetch_add`, so concurrent evictors sweep
//! different frames without a lock.

use super::{sweep, DirtyRule, Policy, Victim};
use crate::frame::FrameTable;
use crate::sync::AtomicUsize;

/// The CLOCK policy.
#[derive(Debug, Default)]
pub struct ClockPolicy {
    hand: AtomicUsize,
    dirty: DirtyRule,
}

impl ClockPolicy {
    /// A CLOCK taking dirty frames by `dirty`.
    pub fn new(dirty: DirtyRule) -> Self {
        ClockPolicy { hand: AtomicUsize::new(0), dirty }
    }
}

impl Policy for ClockPolicy {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        // Two sweeps: the first clears reference bits, the second finds them cleared. A hit
        // without a pin since the hand last passed (a touched bit) is a second chance too.
        sweep(frames, &self.hand, 2 * frames.len(), &self.dirty, |id| frames.take_touched(id))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::frame::state::DIRTY;
    use crate::policy::tests::resident_table;

    #[test]
    fn prefers_clean_and_skips_pinned() {
        let t = resident_table(4);
        // Frame 0 dirty, frame 1 pinned, frames 2 and 3 clean.
        assert!(t.state(0).try_lock());
        t.unlock(0, DIRTY, 0);
        t.state(1).try_pin().unwrap();
        let p = ClockPolicy::default();
        let v = p.pick_victim(&t);
        assert!(matches!(v, Victim::Claimed(2) | Victim::Claimed(3)), "{v:?}");
    }

    #[test]
    fn reports_dirty_when_nothing_clean() {
        let t = resident_table(2);
        for i in 0..2 {
            assert!(t.state(i).try_lock());
            t.unlock(i, DIRTY, 0);
        }
        let p = ClockPolicy::default();
        assert!(matches!(p.pick_victim(&t), Victim::Dirty(_)));
        for i in 0..2 {
            t.state(i).try_pin().unwrap();
        }
        assert_eq!(p.pick_victim(&t), Victim::None);
    }
}
