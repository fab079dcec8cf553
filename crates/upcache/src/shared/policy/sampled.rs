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
        p.rank.store(s.clock.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// Where LFU priority `p` stands against the age `now`, as a rank (lower evicted first).
/// Priorities and the age wrap (the age rises by about one a lap of evictions, so a cache
/// running for days passes 2^32), so a priority counts by its distance from the age: up to
/// 2^31 below it (long unused) to 2^31 above (used often).
fn lfu_rank(p: u32, now: u32) -> u32 {
    (p.wrapping_sub(now) as i32 as i64 - i32::MIN as i64) as u32
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
            // At most 2^30 uses: a priority stays within reach of the age's distance.
            let n = p.uses.load(Ordering::Relaxed).saturating_add(uses).min(1 << 30);
            p.uses.store(n, Ordering::Relaxed);
            p.rank.store(now.wrapping_add(n), Ordering::Relaxed);
        }
        lfu_rank(p.rank.load(Ordering::Relaxed), now)
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
            // Past a resize's new size (the area was measured before it): not allocated again.
            if m.holder().is_some()
                || failed.contains(&f)
                || !inner.in_use(f)
                || !inner.view.reserve(f as usize)
            {
                continue;
            }
            // An emptied frame (a way a resize gave back) keeps the rank of its last page:
            // it goes first, whatever that was.
            let r = if m.key() == 0 && m.home() == 0 { 0 } else { rank(&s, m, f, order) };
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
        let Some((f, _)) = best else { continue };
        if taken(inner, &s, f, order) {
            return Some(f);
        }
        failed[attempt] = f;
    }
    let (f, _) = deferred?;
    taken(inner, &s, f, order).then_some(f)
}

/// Takes frame `f`, written back first if dirty; LFU's age rises to its priority.
fn taken(inner: &Inner, s: &Sampled<'_>, f: u32, order: Order) -> bool {
    if inner.take_written(f, None).is_none() {
        return false;
    }
    if order == Order::Lfu {
        // The age rises to the victim's priority, if that is ahead of it (wrapping, as
        // `lfu_rank`). Relaxed: a hint, as in `inserted`.
        let priority = s.frames[f as usize].rank.load(Ordering::Relaxed);
        let _ = s.clock.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |age| {
            ((priority.wrapping_sub(age) as i32) > 0).then_some(priority)
        });
    }
    true
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::lfu_rank;

    /// An LFU priority ranks by its distance from the age, across the age's wrap: below it
    /// first, then at it, then above it, wherever the age is.
    #[test]
    fn lfu_ranks_hold_their_order_across_the_ages_wrap() {
        for now in [0u32, 1000, u32::MAX - 2, u32::MAX, 1 << 31] {
            let ranks: Vec<u32> = [-1000i64, -1, 0, 1, 5, 1 << 20]
                .iter()
                .map(|d| lfu_rank((now as i64 + d) as u32, now))
                .collect();
            assert!(ranks.windows(2).all(|w| w[0] < w[1]), "age {now}: {ranks:?}");
        }
    }
}
