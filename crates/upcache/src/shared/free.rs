//! Frames emptied (a truncate's pages, a removed or forgotten file's, an eviction asked for:
//! `Inner::free_frame`) and not yet claimed again: a stack in the segment that a miss takes
//! from before the clock hand moves on, as the kernel's allocator hands out pages just freed
//! first (StreamCache's two-layer allocation, seed 003 §4.3: free frames, then reclaim by the
//! hand). Without it a frame emptied behind the hand stayed empty for a whole lap while the
//! hand evicted live pages ahead of it, and a cache touched all its memory before it reused
//! any.
//!
//! The stack is a slot per frame and a depth, under an `OwnerLock` held only to push or pop
//! one entry (a leaf: its holder waits for nothing else). A holder killed mid-push leaves a
//! slot written past the depth, mid-pop a frame out of the stack: either way the frame is only
//! no longer listed, and the hand finds it as it finds every frame. An entry is a hint: a
//! frame may be listed twice, or claimed by the hand while listed, so whoever pops one takes
//! it only by the frame's lock and only if it is still empty (`Inner::claim_free`).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::shm::OwnerLock;

/// The stack, as the segment holds it (`View::free_frames`).
pub(crate) struct FreeFrames<'a> {
    pub lock: &'a OwnerLock,
    pub count: &'a AtomicU32,
    /// One slot per frame: the stack's entries are `slots[..count]`.
    pub slots: &'a [AtomicU32],
}

impl FreeFrames<'_> {
    /// Whether the stack looked empty (a hint: no lock taken).
    pub fn is_empty(&self) -> bool {
        // Relaxed: a hint; a pop looks again under the lock.
        self.count.load(Ordering::Relaxed) == 0
    }

    /// Lists frame `f`, for client `me`; not if the lock's holder is one `give_up` says not
    /// to wait for (a stopped process), or the stack is full (of entries listed twice).
    pub fn push(&self, f: u32, me: u32, alive: impl Fn(u32) -> bool, give_up: impl Fn(u32) -> bool) {
        if self.lock.lock_unless(me, alive, give_up).is_none() {
            return;
        }
        // Relaxed (all): under the lock, whose release publishes them; a depth a peer
        // corrupted is taken as at most the slots.
        let n = (self.count.load(Ordering::Relaxed) as usize).min(self.slots.len());
        if n < self.slots.len() {
            self.slots[n].store(f, Ordering::Relaxed);
            self.count.store(n as u32 + 1, Ordering::Relaxed);
        }
        self.lock.unlock(me);
    }

    /// The frame listed last, taken off the stack; None if it is empty, or if its lock's holder
    /// is one `give_up` says not to wait for.
    pub fn pop(&self, me: u32, alive: impl Fn(u32) -> bool, give_up: impl Fn(u32) -> bool) -> Option<u32> {
        self.lock.lock_unless(me, alive, give_up)?;
        // Relaxed (all): as in `push`.
        let n = (self.count.load(Ordering::Relaxed) as usize).min(self.slots.len());
        let f = n.checked_sub(1).map(|top| {
            self.count.store(top as u32, Ordering::Relaxed);
            self.slots[top].load(Ordering::Relaxed)
        });
        self.lock.unlock(me);
        f
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn stack(n: usize) -> (OwnerLock, AtomicU32, Vec<AtomicU32>) {
        (OwnerLock::new(), AtomicU32::new(0), (0..n).map(|_| AtomicU32::new(0)).collect())
    }

    /// Last in, first out; a full stack lists no more; a depth past the slots (a peer's
    /// corruption) is taken as the slots.
    #[test]
    fn the_stack_pops_what_it_pushed_last_and_never_overflows() {
        let (lock, count, slots) = stack(3);
        let free = FreeFrames { lock: &lock, count: &count, slots: &slots };
        let (alive, never) = (|_| true, |_| false);
        assert!(free.is_empty());
        for f in [7, 8, 9, 10] {
            free.push(f, 1, alive, never);
        }
        assert_eq!(count.load(Ordering::SeqCst), 3, "the fourth is not listed");
        assert_eq!([free.pop(1, alive, never), free.pop(1, alive, never)], [Some(9), Some(8)]);
        free.push(11, 2, alive, never);
        assert_eq!(free.pop(2, alive, never), Some(11));
        assert_eq!(free.pop(2, alive, never), Some(7));
        assert_eq!(free.pop(2, alive, never), None);
        count.store(1000, Ordering::SeqCst);
        assert_eq!(free.pop(1, alive, never), Some(slots[2].load(Ordering::SeqCst)));
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(lock.holder(), None);
    }

    /// A lock held by a dead client is taken over; one held by a client `give_up` names is
    /// not waited for (nothing pushed or popped).
    #[test]
    fn a_dead_holder_is_taken_over_and_a_stopped_one_passed_by() {
        let (lock, count, slots) = stack(4);
        let free = FreeFrames { lock: &lock, count: &count, slots: &slots };
        assert!(lock.try_lock(5));
        free.push(3, 1, |h| h != 5, |_| false);
        assert_eq!(count.load(Ordering::SeqCst), 1, "pushed past a dead holder");
        assert!(lock.try_lock(6));
        assert_eq!(free.pop(1, |_| true, |h| h == 6), None, "a stopped holder is not waited for");
        free.push(4, 1, |_| true, |h| h == 6);
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert!(lock.unlock(6));
        assert_eq!(free.pop(1, |_| true, |_| false), Some(3));
    }
}
