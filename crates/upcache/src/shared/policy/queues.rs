//! SIEVE's queue and S3-FIFO's small and main queues (the private engine's `policy/sieve.rs`
//! and `policy/s3fifo.rs`) as doubly linked lists over the frames, in the segment: a frame's
//! links and queue in its `PolicyFrame`, each queue's ends in `PolicyState`. Used under
//! `PolicyState::lock` (`Inner::lock_queues`), taken by misses only.
//!
//! A pick names a candidate and leaves it linked: the miss takes it after the lock is let go,
//! and the frame's new page is inserted again (`Queues::insert` unlinks it first), so a frame
//! is in one queue at most, once. A frame emptied outside the policy (a truncate, an eviction
//! asked for) is unlinked when a pick finds it empty, or when it is taken again.

use std::sync::atomic::{AtomicU32, Ordering};

use super::super::frame::{FrameMeta, DIRTY};
use super::ghost::Ghost;
use super::{set_uses, take_uses, uses_in, PolicyFrame, PolicyState, MAX_USES};

/// SIEVE's queue, and S3-FIFO's small one.
const FIRST: usize = 0;
/// S3-FIFO's main queue.
const MAIN: usize = 1;

/// The queues, locked for us.
pub(crate) struct Queues<'a> {
    pub state: &'a PolicyState,
    pub frames: &'a [PolicyFrame],
    pub ghost: Ghost<'a>,
    /// The frames in use (`View::active`): S3-FIFO's small queue holds a tenth of them.
    pub active: usize,
}

// Relaxed (every load and store below): under the policy's lock, whose release publishes them.
fn get(a: &AtomicU32) -> u32 {
    a.load(Ordering::Relaxed)
}

fn set(a: &AtomicU32, v: u32) {
    a.store(v, Ordering::Relaxed)
}

/// A frame no one holds, with no page and in no index chain: emptied outside the policy.
fn empty(m: &FrameMeta) -> bool {
    m.holder().is_none() && m.key() == 0 && m.home() == 0
}

impl Queues<'_> {
    /// Frame + 1 `link` as a frame, if it is one (a link a dead holder left half-written may
    /// not be).
    fn frame(&self, link: u32) -> Option<u32> {
        (link != 0 && (link as usize) <= self.frames.len()).then(|| link - 1)
    }

    fn len(&self, q: usize) -> usize {
        get(&self.state.queues[q].len) as usize
    }

    fn push_newest(&self, f: u32, q: usize) {
        let (p, ends) = (&self.frames[f as usize], &self.state.queues[q]);
        let newest = get(&ends.newest);
        set(&p.older, newest);
        set(&p.newer, 0);
        set(&p.queue, q as u32 + 1);
        match self.frame(newest) {
            Some(n) => set(&self.frames[n as usize].newer, f + 1),
            None => set(&ends.oldest, f + 1),
        }
        set(&ends.newest, f + 1);
        set(&ends.len, get(&ends.len) + 1);
    }

    /// Takes `f` out of its queue, if it is in one; a hand on it moves to the next newer frame.
    fn unlink(&self, f: u32) {
        let p = &self.frames[f as usize];
        let Some(q) = (get(&p.queue) as usize).checked_sub(1).filter(|&q| q <= MAIN) else { return };
        let ends = &self.state.queues[q];
        let (newer, older) = (get(&p.newer), get(&p.older));
        match self.frame(older) {
            Some(o) => set(&self.frames[o as usize].newer, newer),
            None => set(&ends.oldest, newer),
        }
        match self.frame(newer) {
            Some(n) => set(&self.frames[n as usize].older, older),
            None => set(&ends.newest, older),
        }
        if get(&self.state.hand) == f + 1 {
            set(&self.state.hand, newer);
        }
        set(&p.queue, 0);
        set(&p.newer, 0);
        set(&p.older, 0);
        set(&ends.len, get(&ends.len).saturating_sub(1));
    }

    /// Frame `f` took page key `k`: at the newest end of SIEVE's queue; under S3-FIFO
    /// (`s3fifo`), of main if the ghost remembers `k`, else of the small queue.
    pub fn insert(&self, f: u32, k: u64, s3fifo: bool) {
        self.unlink(f);
        let q = if s3fifo && self.ghost.take(k) { MAIN } else { FIRST };
        self.push_newest(f, q);
    }

    /// S3-FIFO's candidate `f` (still holding `k`) could not be taken: to the newest end of
    /// its queue, so that the next pick looks further.
    pub fn rotate(&self, f: u32, m: &FrameMeta, k: u64) {
        let q = get(&self.frames[f as usize].queue) as usize;
        if (1..=MAIN + 1).contains(&q) && m.key() == k {
            self.unlink(f);
            self.push_newest(f, q - 1);
        }
    }

    /// Links every frame that holds a page again, in frame order (in main under S3-FIFO:
    /// they were all there before the holder died), after a holder died mid-change.
    pub fn rebuild(&self, meta: &[FrameMeta], s3fifo: bool) {
        for p in self.frames {
            set(&p.queue, 0);
            set(&p.newer, 0);
            set(&p.older, 0);
        }
        for ends in &self.state.queues {
            set(&ends.newest, 0);
            set(&ends.oldest, 0);
            set(&ends.len, 0);
        }
        set(&self.state.hand, 0);
        for (f, m) in meta.iter().enumerate() {
            if m.key() != 0 {
                self.push_newest(f as u32, if s3fifo { MAIN } else { FIRST });
            }
        }
    }

    /// SIEVE's candidate and its page's key: from the hand (the oldest end at first) towards
    /// the newest, wrapping, the first frame not used since the hand last passed (one used
    /// loses its bits and stays where it is). Locked frames are passed; a dirty one `defer` passes over is
    /// noted in `deferred` (the first). The hand is left past the candidate.
    pub fn pick_sieve(
        &self,
        meta: &[FrameMeta],
        defer: &dyn Fn(u64) -> bool,
        deferred: &mut Option<(u32, u64)>,
    ) -> Option<(u32, u64, bool)> {
        // Two passes: the first may only clear bits.
        for _ in 0..2 * self.len(FIRST).min(self.frames.len()) + 1 {
            let at = match get(&self.state.hand) {
                0 => get(&self.state.queues[FIRST].oldest),
                h => h,
            };
            let f = self.frame(at)?;
            let m = &meta[f as usize];
            if empty(m) {
                self.unlink(f);
                continue;
            }
            set(&self.state.hand, get(&self.frames[f as usize].newer));
            let flags = m.flags();
            if uses_in(flags) > 0 {
                take_uses(m);
                continue;
            }
            if m.holder().is_some() {
                continue;
            }
            if flags & DIRTY != 0 && defer(m.key()) {
                deferred.get_or_insert((f, m.key()));
                continue;
            }
            return Some((f, m.key(), false));
        }
        None
    }

    /// S3-FIFO's candidate, its page's key and whether the small queue gave it: from the
    /// small queue's old end while it holds a tenth of the frames in use or more, else from
    /// main's. A small-queue page used
    /// since it came moves to main; a main page used goes round again with one use less (of
    /// `MAX_USES` at most, as the private engine's counts).
    /// Locked frames, and dirty ones `defer` passes over (the first noted in `deferred`), go
    /// round too; once a queue's every frame went round so, the other one is tried.
    pub fn pick_s3fifo(
        &self,
        meta: &[FrameMeta],
        defer: &dyn Fn(u64) -> bool,
        deferred: &mut Option<(u32, u64)>,
    ) -> Option<(u32, u64, bool)> {
        let small_target = (self.active / 10).max(1);
        let (mut stuck_small, mut stuck_main) = (0, 0);
        // A main frame may go round once per use (3 at most) and a small one moves once.
        let budget = 5 * (self.len(FIRST) + self.len(MAIN)).min(self.frames.len()) + 2;
        for _ in 0..budget {
            let small_stuck = stuck_small >= self.len(FIRST);
            let main_stuck = stuck_main >= self.len(MAIN);
            let q = match (small_stuck, main_stuck) {
                (true, true) => return None,
                (true, false) => MAIN,
                (false, true) => FIRST,
                (false, false) if self.len(FIRST) >= small_target => FIRST,
                _ => MAIN,
            };
            let Some(f) = self.frame(get(&self.state.queues[q].oldest)) else {
                // A length a dead holder left wrong.
                set(&self.state.queues[q].len, 0);
                continue;
            };
            let m = &meta[f as usize];
            if empty(m) {
                self.unlink(f);
                continue;
            }
            let flags = m.flags();
            if uses_in(flags) > 0 {
                if q == FIRST {
                    take_uses(m);
                } else {
                    set_uses(m, uses_in(flags).min(MAX_USES) - 1);
                }
                self.unlink(f);
                self.push_newest(f, MAIN);
                (stuck_small, stuck_main) = (0, 0);
                continue;
            }
            let dirty = flags & DIRTY != 0 && defer(m.key());
            if m.holder().is_some() || dirty {
                if dirty {
                    deferred.get_or_insert((f, m.key()));
                }
                self.unlink(f);
                self.push_newest(f, q);
                *(if q == FIRST { &mut stuck_small } else { &mut stuck_main }) += 1;
                continue;
            }
            return Some((f, m.key(), q == FIRST));
        }
        None
    }
}
