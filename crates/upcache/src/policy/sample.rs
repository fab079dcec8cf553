//! Eviction by sampling, for policies that rank frames by a score (LRU by last use, LFU by
//! use count): look at a few random frames and evict the lowest-ranked one that can be
//! claimed. With 16 samples the victim is, in expectation, in the bottom 6% of the ranking,
//! which is how Redis approximates LRU and LFU without a shared list to lock on every hit.
//!
//! The state word's `REFERENCED` bit does not save a sampled frame (the claim clears it and
//! tries again): the policy's own history, last use or use count, already holds every use.

use super::{claim_unreferenced, DirtyRule, Victim};
use crate::frame::state::{pins, ClaimResult, DIRTY, LOCKED, UNOWNED};
use crate::frame::{FrameId, FrameTable};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Frames looked at per attempt.
pub(crate) const SAMPLES: usize = 16;
/// Attempts before giving up (every sampled frame busy or lost to another evictor).
const ATTEMPTS: usize = 8;

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Seeds handed to threads: a fixed sequence, so that a single-threaded replay is repeatable.
static SEEDS: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

/// Restarts this thread's generator from `seed`, for repeatable simulations (`simulate.rs`).
pub(crate) fn reseed(seed: u64) {
    RNG.with(|r| r.set(seed | 1));
}

/// A random number from this thread's xorshift generator.
pub(crate) fn next_random() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            // Relaxed: only needs distinct values per thread.
            x = SEEDS.fetch_add(0x6a09_e667_f3bc_c909, Ordering::Relaxed) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    })
}

/// Evicts the frame with the lowest `rank` among a sample. `rank` may update the frame's
/// history (a lock-free hit seen now) and returns its key, lower evicted first. Clean frames
/// come first for a frame `dirty` defers; returns the claimed frame and its rank.
pub(crate) fn evict_sampled(
    frames: &FrameTable,
    dirty: &DirtyRule,
    mut rank: impl FnMut(FrameId) -> u64,
) -> (Victim, u64) {
    let n = frames.len() as u64;
    let mut deferred: Option<(FrameId, u64)> = None;
    for _ in 0..ATTEMPTS {
        let mut best: Option<(FrameId, u64, bool)> = None;
        for _ in 0..SAMPLES {
            let id = (next_random() % n) as FrameId;
            let w = frames.state(id).load();
            if w & UNOWNED != 0 || pins(w) != 0 || w & LOCKED != 0 {
                continue;
            }
            let r = rank(id);
            let is_dirty = w & DIRTY != 0;
            if is_dirty && dirty.defer(frames, id) {
                if deferred.is_none_or_worse(r) {
                    deferred = Some((id, r));
                }
                continue;
            }
            if best.is_none_or_worse(r) {
                best = Some((id, r, is_dirty));
            }
        }
        let Some((id, r, is_dirty)) = best else { continue };
        if is_dirty {
            return (Victim::Dirty(id), r);
        }
        match claim_unreferenced(frames, id) {
            ClaimResult::Claimed => return (Victim::Claimed(id), r),
            // Dirtied since we looked, and not to be deferred: write it back.
            ClaimResult::Dirty if !dirty.defer(frames, id) => return (Victim::Dirty(id), r),
            _ => {} // taken, pinned or used meanwhile: sample again
        }
    }
    match deferred {
        Some((id, r)) => (Victim::Dirty(id), r),
        None => (Victim::None, 0),
    }
}

/// `Option::is_none_or` on a (frame, rank, ..) candidate, kept to the crate's Rust version.
trait Candidate {
    fn is_none_or_worse(&self, rank: u64) -> bool;
}

impl Candidate for Option<(FrameId, u64)> {
    fn is_none_or_worse(&self, rank: u64) -> bool {
        !matches!(self, Some((_, r)) if *r <= rank)
    }
}

impl Candidate for Option<(FrameId, u64, bool)> {
    fn is_none_or_worse(&self, rank: u64) -> bool {
        !matches!(self, Some((_, r, _)) if *r <= rank)
    }
}
