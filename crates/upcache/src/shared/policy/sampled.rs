//! Sampled LRU and LFU-DA (the private engine's `policy/lru.rs` and `policy/lfu.rs`) over the
//! segment: each frame's last use or priority is in its `PolicyFrame`, and a miss takes the
//! lowest-ranked of 16 random frames of its area (every frame of a set of 16 or fewer: an
//! exact LRU or LFU within the set). A frame's reference bits are read into its history when
//! a miss looks at it, so a hit writes nothing more than under CLOCK.

use std::sync::atomic::{AtomicU32, Ordering};

use super::super::frame::{FrameMeta, DIRTY};
use super::super::Inner;
use super::{random, take_uses, uses_in, Order, PolicyFrame};

/// Frames looked at per attempt (as `crate::policy::sample`).
const SAMPLES: usize = 16;
/// Attempts before the miss gives the choice to the clock hand.
const ATTEMPTS: usize = 8;

/// The history, as the segment holds it.
pub(super) struct Sampled<'a> {
    /// LRU: pages inserted so far. LFU: the age.
    pub clock: &'a AtomicU32,
    pub frames: &'a [PolicyFrame],
}

/// Frame `f` took a new page: its use now (LRU), or one use from the age (LFU).
pub(super) fn inserted(s: Sampled<'_>, f: u32, order: Order) {
    let p = &s.frames[f as usize];
    // Relaxed (all): hints; a stale rank only misplaces the frame in a ranking.
    if order == Order::Lru {
        let now = s.clock.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        p.rank.store(now, Ordering::Relaxed);
    } else {
        p.uses.store(1, Ordering::Relaxed);
        p.rank.store(s.clock.load(Ordering::Relaxed).saturating_add(1), Ordering::Relaxed);
    }
}

/// Frame `f`'s rank, lower evicted first, once the uses its bits show are in its history.
fn rank(s: &Sampled<'_>, m: &FrameMeta, f: u32, order: Order) -> u32 {
    let p = &s.frames[f as usize];
    let uses = uses_in(m.flags());
    if uses > 0 {
        take_uses(m);
    }
    // Relaxed (all): as in `inserted`.
    let now = s.clock.load(Ordering::Relaxed);
    if order == Order::Lru {
        if uses > 0 {
            p.rank.store(now, Ordering::Relaxed);
        }
        // Oldest first. A use stamped after our read of the clock counts as age 0, not as
        // wrapped to the oldest.
        let age = now.wrapping_sub(p.rank.load(Ordering::Relaxed));
        u32::MAX - if age > u32::MAX / 2 { 0 } else { age }
    } else {
        if uses > 0 {
            let n = p.uses.load(Ordering::Relaxed).saturating_add(uses);
            p.uses.store(n, Ordering::Relaxed);
            p.rank.store(now.saturating_add(n), Ordering::Relaxed);
        }
        p.rank.load(Ordering::Relaxed)
    }
}

/// The lowest-ranked frame of a sample of the `n` frames from `first` that can be taken,
/// emptied and locked for us (a dirty one written back first unless `defer` says to pass it
/// over; if every one was, the lowest-ranked of those). None after `ATTEMPTS` samples.
pub(super) fn claim(
    inner: &Inner,
    first: usize,
    n: usize,
    order: Order,
    defer: &dyn Fn(u64) -> bool,
) -> Option<u32> {
    let s = inner.sampled();
    let frames = inner.view.frames();
    let mut deferred: Option<(u32, u32)> = None;
    // Frames this miss failed to take: a small area's sample is all of it, every time.
    let mut failed = [u32::MAX; ATTEMPTS];
    for attempt in 0..ATTEMPTS {
        let mut best: Option<(u32, u32)> = None;
        for i in 0..SAMPLES.min(n) {
            let at = if n <= SAMPLES { i } else { (random() % n as u64) as usize };
            let f = (first + at) as u32;
            let m = &frames[f as usize];
            if m.holder().is_some() || failed.contains(&f) || !inner.view.reserve(f as usize) {
                continue;
            }
            let r = rank(&s, m, f, order);
            if m.flags() & DIRTY != 0 && defer(m.key()) {
                if deferred.is_none_or(|(_, d)| r < d) {
                    deferred = Some((f, r));
                }
                continue;
            }
            if best.is_none_or(|(_, b)| r < b) {
                best = Some((f, r));
            }
        }
        let Some((f, r)) = best else { continue };
        if taken(inner, &s, f, r, order) {
            return Some(f);
        }
        failed[attempt] = f;
    }
    let (f, r) = deferred?;
    taken(inner, &s, f, r, order).then_some(f)
}

/// Takes frame `f` of rank `r`, written back first if dirty; LFU's age rises to its rank.
fn taken(inner: &Inner, s: &Sampled<'_>, f: u32, r: u32, order: Order) -> bool {
    if inner.view.frames()[f as usize].flags() & DIRTY != 0 {
        inner.write_back_victim(f);
    }
    if inner.take(f).is_none() {
        return false;
    }
    if order == Order::Lfu {
        // Relaxed: a hint, as in `inserted`.
        s.clock.fetch_max(r, Ordering::Relaxed);
    }
    true
}
