//! SIEVE (Zhang et al., NSDI'24): one FIFO of pages in insertion order and a hand that walks
//! it from the oldest end towards the newest, wrapping around. A page used since the hand
//! last passed (reference bit or touched bitmap) loses the mark and stays where it is; the
//! first unmarked one is evicted. Unlike CLOCK, a new page joins at the newest end, not at
//! the hand, so pages that prove useful stay behind the hand while new ones are sifted out.
//!
//! The list is a doubly linked list over frame ids under one mutex, taken on inserts and
//! evictions; hits only set a bit. Frames that lose their page outside the policy
//! (truncation, stream eviction) are unlinked when the hand finds them unowned, or when they
//! are inserted again.

use super::{DirtyRule, Policy, Victim};
use crate::frame::state::{ClaimResult, UNOWNED};
use crate::frame::{FrameId, FrameTable};
use crate::sync::{lock, Mutex};

const NIL: FrameId = FrameId::MAX;

/// The SIEVE policy.
#[derive(Debug)]
pub struct SievePolicy {
    list: Mutex<List>,
    dirty: DirtyRule,
}

#[derive(Debug)]
struct List {
    /// Towards the newest end.
    newer: Vec<FrameId>,
    /// Towards the oldest end.
    older: Vec<FrameId>,
    linked: Vec<bool>,
    newest: FrameId,
    oldest: FrameId,
    /// The next frame to look at; NIL starts from the oldest.
    hand: FrameId,
    len: usize,
}

impl List {
    fn new(frames: usize) -> Self {
        List {
            newer: vec![NIL; frames],
            older: vec![NIL; frames],
            linked: vec![false; frames],
            newest: NIL,
            oldest: NIL,
            hand: NIL,
            len: 0,
        }
    }

    fn push_newest(&mut self, id: FrameId) {
        let i = id as usize;
        self.older[i] = self.newest;
        self.newer[i] = NIL;
        match self.newest {
            NIL => self.oldest = id,
            n => self.newer[n as usize] = id,
        }
        self.newest = id;
        self.linked[i] = true;
        self.len += 1;
    }

    /// Unlinks `id`; a hand on it moves to the next newer frame.
    fn unlink(&mut self, id: FrameId) {
        let i = id as usize;
        let (newer, older) = (self.newer[i], self.older[i]);
        match older {
            NIL => self.oldest = newer,
            o => self.newer[o as usize] = newer,
        }
        match newer {
            NIL => self.newest = older,
            n => self.older[n as usize] = older,
        }
        if self.hand == id {
            self.hand = newer;
        }
        self.linked[i] = false;
        self.len -= 1;
    }
}

impl SievePolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        SievePolicy { list: Mutex::new(List::new(frames)), dirty }
    }
}

impl Policy for SievePolicy {
    fn name(&self) -> &'static str {
        "sieve"
    }

    fn on_insert(&self, frames: &FrameTable, id: FrameId) {
        // Being loaded is not a use: the page must be hit to be kept.
        frames.state(id).clear_referenced();
        frames.take_touched(id);
        let mut l = lock(&self.list);
        if l.linked[id as usize] {
            l.unlink(id);
        }
        l.push_newest(id);
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        let mut l = lock(&self.list);
        let mut deferred = None;
        // Two passes: the first may only clear marks.
        for _ in 0..2 * l.len + 1 {
            let id = match l.hand {
                NIL => l.oldest,
                h => h,
            };
            if id == NIL {
                break; // empty
            }
            l.hand = l.newer[id as usize];
            if frames.state(id).load() & UNOWNED != 0 {
                l.unlink(id); // freed outside the policy
                continue;
            }
            if frames.take_touched(id) {
                // Visited: keep it, every mark cleared (a pin's bit too) in this one pass.
                frames.state(id).clear_referenced();
                continue;
            }
            match frames.state(id).try_claim() {
                ClaimResult::Claimed => {
                    l.unlink(id);
                    return Victim::Claimed(id);
                }
                ClaimResult::Dirty if !self.dirty.defer(frames, id) => {
                    // The hand stays on it: once written back, the next pick takes it.
                    l.hand = id;
                    return Victim::Dirty(id);
                }
                ClaimResult::Dirty => {
                    deferred.get_or_insert(id);
                }
                ClaimResult::Referenced | ClaimResult::Busy => {}
            }
        }
        deferred.map_or(Victim::None, Victim::Dirty)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::policy::tests::{insert, resident_table_with};

    #[test]
    fn evicts_in_insertion_order_sparing_visited_pages() {
        let (t, p) = resident_table_with(8, |n| SievePolicy::new(n, DirtyRule::default()));
        t.touch(0);
        // Frame 0 is the oldest but visited: frame 1 goes first, then 2.
        assert_eq!(p.pick_victim(&t), Victim::Claimed(1));
        insert(&t, &p, 1, 100);
        assert_eq!(p.pick_victim(&t), Victim::Claimed(2));
        insert(&t, &p, 2, 101);
        // Frame 0 now sits behind the hand: a stream of pages used once passes it by.
        let mut page = 200;
        for _ in 0..100 {
            match p.pick_victim(&t) {
                Victim::Claimed(id) => {
                    assert_ne!(id, 0);
                    insert(&t, &p, id, page);
                    page += 1;
                }
                v => panic!("{v:?}"),
            }
        }
        // Once every newer page is visited, the hand passes them, wraps, and takes frame 0,
        // whose mark it cleared on the first pass.
        for id in 1..8 {
            t.touch(id);
        }
        assert_eq!(p.pick_victim(&t), Victim::Claimed(0));
    }

    #[test]
    fn frames_freed_elsewhere_are_dropped_and_reinserted_at_the_new_end() {
        let (t, p) = resident_table_with(4, |n| SievePolicy::new(n, DirtyRule::default()));
        // Frame 0 freed without the policy (a truncation), then reused.
        assert_eq!(t.state(0).try_claim(), ClaimResult::Claimed);
        assert_eq!(p.pick_victim(&t), Victim::Claimed(1));
        insert(&t, &p, 0, 50);
        assert_eq!(p.pick_victim(&t), Victim::Claimed(2));
        assert_eq!(p.pick_victim(&t), Victim::Claimed(3));
        assert_eq!(p.pick_victim(&t), Victim::Claimed(0));
        assert_eq!(p.pick_victim(&t), Victim::None);
    }
}
