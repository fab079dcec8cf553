//! Replacement past the clock hand: sampled LRU and LFU-DA (`sampled.rs`), SIEVE and S3-FIFO
//! (`queues.rs`), the private engine's policies (`crate::policy`) with their state in the
//! segment, so every process evicts by one history.
//!
//! A hit changes nothing here: it sets the frame's `REFERENCED` bit (and counts `HITS` under
//! LFU and S3-FIFO, as under GClock) exactly as under CLOCK, so the hit path costs the same
//! whatever the policy. A miss reads the bits into the policy's history when it looks at a
//! frame: a last use for LRU, uses for LFU, a visit for SIEVE, uses for S3-FIFO.
//!
//! A miss takes, in order: an emptied frame (`free.rs`); a frame the hand has not passed yet
//! (a cache's first fill goes through its frames in order, as under CLOCK, so the lazily
//! allocated chunks fill one by one); the policy's victim; and if the policy finds none it can
//! take (every one it looked at locked, pinned, or dirty in a file this process cannot write),
//! the clock hand's, which reaches every frame. Each frame taken is then told to the policy
//! with its new page (`Inner::inserted`).
//!
//! # Invariants
//! - The history is a hint: a victim is taken only by the frame's lock, and only if it is
//!   still unreferenced, clean and unpinned (`Inner::take`). A wrong rank costs a miss, never
//!   a page.
//! - The queues change only under `PolicyState::lock`, a leaf lock: its holder reads frames'
//!   words and flags, clears reference bits, and waits for nothing. A holder killed mid-change
//!   leaves the lists half-linked; whoever takes the lock over from it relinks every frame
//!   that holds a page (`Queues::rebuild`). A stopped holder is not waited for: the miss takes
//!   the clock hand's frame, and a frame it could not list stays unlisted until it is taken
//!   again (the hand's fallback reaches it).

pub(crate) mod ghost;
mod queues;
mod sampled;

use std::sync::atomic::{AtomicU32, Ordering};

use super::frame::{HITS, REFERENCED};
use super::technique;
use super::Inner;
use crate::policy::{CleanFirst, PolicyKind};
use crate::shm::{Acquired, OwnerLock};

/// A frame's replacement history and queue links, in the segment (`View::policy_frames`).
#[repr(C)]
pub(crate) struct PolicyFrame {
    /// LRU: pages inserted when the frame was last used. LFU: its priority, the age when it
    /// was last used plus its uses.
    pub rank: AtomicU32,
    /// LFU: uses since the page came in.
    pub uses: AtomicU32,
    /// The next frame + 1 towards the newest and the oldest end of its queue (0: none).
    pub newer: AtomicU32,
    pub older: AtomicU32,
    /// Which queue holds the frame, + 1 (0: none).
    pub queue: AtomicU32,
}

/// A queue's ends (frame + 1, 0 for none) and length.
#[repr(C)]
pub(crate) struct QueueEnds {
    pub newest: AtomicU32,
    pub oldest: AtomicU32,
    pub len: AtomicU32,
}

/// The policy's state in the header.
#[repr(C)]
pub(crate) struct PolicyState {
    /// Held to change the queues (a leaf lock).
    pub lock: OwnerLock,
    /// LRU: pages inserted so far, wrapping. LFU: the age, the last victim's priority.
    pub clock: AtomicU32,
    /// SIEVE's one queue, or S3-FIFO's small (0) and main (1) queues.
    pub queues: [QueueEnds; 2],
    /// SIEVE's hand: the next frame + 1 to look at, 0 to start from the oldest.
    pub hand: AtomicU32,
    /// Ghost entries inserted so far, wrapping (`ghost.rs`).
    pub ghost_seq: AtomicU32,
}

/// How the policy orders frames, past the clock hand's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    Lru,
    Lfu,
    Sieve,
    S3Fifo,
}

impl Inner {
    /// The policy's order, None for the clock hand's (CLOCK, GClock).
    pub(crate) fn order(&self) -> Option<Order> {
        let t = self.techniques;
        [
            (technique::LRU, Order::Lru),
            (technique::LFU, Order::Lfu),
            (technique::SIEVE, Order::Sieve),
            (technique::S3FIFO, Order::S3Fifo),
        ]
        .into_iter()
        .find_map(|(bit, o)| (t & bit != 0).then_some(o))
    }

    /// `SharedConfig::policy`.
    pub(crate) fn policy_kind(&self) -> PolicyKind {
        match self.order() {
            Some(Order::Lru) => PolicyKind::Lru,
            Some(Order::Lfu) => PolicyKind::Lfu,
            Some(Order::Sieve) => PolicyKind::Sieve,
            Some(Order::S3Fifo) => PolicyKind::S3Fifo,
            None if self.gclock() => PolicyKind::GClock,
            None => PolicyKind::Clock,
        }
    }

    /// Whether a read counts hits (`HITS`) beside `REFERENCED`: under GClock, LFU and
    /// S3-FIFO, whose histories count uses.
    pub(crate) fn counts_hits(&self) -> bool {
        self.techniques & (technique::GCLOCK | technique::LFU | technique::S3FIFO) != 0
    }

    /// Frame `f`, just taken for page key `k` (locked by us), told to the policy; `evicted`
    /// is the key of the page it held, for S3-FIFO's ghost entries if the small queue gave it.
    pub(super) fn inserted(&self, f: u32, k: u64, evicted: Option<u64>) {
        match self.order() {
            None => {}
            Some(o @ (Order::Lru | Order::Lfu)) => sampled::inserted(self.sampled(), f, o),
            Some(o) => {
                let Some(q) = self.lock_queues() else { return };
                if let Some(old) = evicted {
                    q.ghost.insert(old);
                }
                q.insert(f, k, o == Order::S3Fifo);
                q.state.lock.unlock(self.me);
            }
        }
    }

    /// A victim evicted into the free pool rather than to a claim (`Inner::reclaim`): S3-FIFO
    /// remembers its key `evicted` in the ghost, as `inserted` does for a claim's.
    pub(crate) fn forget_evicted(&self, evicted: Option<u64>) {
        let Some(old) = evicted else { return };
        if let Some(q) = self.lock_queues() {
            q.ghost.insert(old);
            q.state.lock.unlock(self.me);
        }
    }

    /// The policy's victim among `n` frames from `first` (a set's, or the cache's), emptied and
    /// locked for us, with the key to remember for it (S3-FIFO's small queue); None if it
    /// found none it could take.
    pub(super) fn claim_in_order(
        &self,
        first: usize,
        n: usize,
        rule: CleanFirst,
    ) -> Option<(u32, Option<u64>)> {
        let order = self.order()?;
        let defer = |k: u64| self.defers(rule, k);
        match order {
            Order::Lru | Order::Lfu => sampled::claim(self, first, n, order, &defer).map(|f| (f, None)),
            Order::Sieve | Order::S3Fifo => self.claim_queued(order, &defer),
        }
    }

    /// SIEVE's or S3-FIFO's victim: the queues name a candidate under their lock, and it is
    /// taken after, without it (a frame's lock is not taken under the queues' lock).
    fn claim_queued(&self, order: Order, defer: &dyn Fn(u64) -> bool) -> Option<(u32, Option<u64>)> {
        let frames = self.view.frames();
        let mut deferred = None;
        for _ in 0..8 {
            let q = self.lock_queues()?;
            let picked = match order {
                Order::Sieve => q.pick_sieve(frames, defer, &mut deferred),
                _ => q.pick_s3fifo(frames, defer, &mut deferred),
            };
            q.state.lock.unlock(self.me);
            let Some((f, k, small)) = picked else { break };
            // Only the page picked: another miss may have taken the frame and put a new page
            // in it since the queues' lock was let go.
            if let Some(old) = self.take_written(f, Some(k)) {
                return Some((f, (small && old != 0).then_some(old)));
            }
            // Taken meanwhile, pinned or used again: under S3-FIFO, rotated to the newest end
            // so that the next pick looks further (SIEVE's hand is past it already).
            if order == Order::S3Fifo {
                if let Some(q) = self.lock_queues() {
                    q.rotate(f, &frames[f as usize], k);
                    q.state.lock.unlock(self.me);
                }
            }
        }
        let (f, k) = deferred?;
        self.take_written(f, Some(k)).map(|_| (f, None))
    }

    /// The queues, locked for us: rebuilt if we took the lock over from a dead holder; None if
    /// the holder is stopped.
    fn lock_queues(&self) -> Option<queues::Queues<'_>> {
        let state = &self.view.header().policy;
        let active = self.view.active();
        let q =
            queues::Queues { state, frames: self.view.policy_frames(), ghost: self.ghost(active), active };
        match state.lock.lock_unless(self.me, |h| self.alive(h), |h| self.stopped(h))? {
            Acquired::Clean => {}
            Acquired::OwnerDied(_) => {
                // Relaxed: statistics.
                self.view.header().repairs.fetch_add(1, Ordering::Relaxed);
                q.rebuild(self.view.frames(), self.order() == Some(Order::S3Fifo));
            }
        }
        Some(q)
    }

    /// The ghost, remembering 0.9x the `active` frames in use.
    fn ghost(&self, active: usize) -> ghost::Ghost<'_> {
        let seq = &self.view.header().policy.ghost_seq;
        ghost::Ghost { slots: self.view.ghosts(), seq, capacity: active * 9 / 10 }
    }

    fn sampled(&self) -> sampled::Sampled<'_> {
        sampled::Sampled { clock: &self.view.header().policy.clock, frames: self.view.policy_frames() }
    }
}

/// Uses the reference bits in `flags` say: `REFERENCED` one, each counted hit one more.
pub(super) fn uses_in(flags: u32) -> u32 {
    u32::from(flags & REFERENCED != 0) + (flags & HITS) / super::frame::HIT
}

/// Clears frame `m`'s reference bits: its uses are in the policy's history now.
pub(super) fn take_uses(m: &super::frame::FrameMeta) {
    // Relaxed: a hint for the policy, as `FrameMeta::age`.
    m.flags.fetch_and(!(REFERENCED | HITS), Ordering::Relaxed);
}

/// Uses a frame's bits hold at most for S3-FIFO (its 2-bit counts).
pub(super) const MAX_USES: u32 = 3;

/// Leaves `n` uses (at most `MAX_USES`) in frame `m`'s bits: `REFERENCED` for the first, a
/// counted hit for each more.
pub(super) fn set_uses(m: &super::frame::FrameMeta, n: u32) {
    let bits = match n.min(MAX_USES) {
        0 => 0,
        n => REFERENCED | ((n - 1) * super::frame::HIT),
    };
    // Relaxed: a hint, as in `take_uses`; a CAS loop, as readers set bits beside it.
    let _ =
        m.flags.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f & !(REFERENCED | HITS) | bits));
}

/// A random number from this thread's generator (`crate::policy::sample`).
pub(super) fn random() -> u64 {
    crate::policy::next_random()
}

#[cfg(all(test, not(loom)))]
mod tests;
