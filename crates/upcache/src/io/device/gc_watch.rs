//! Garbage collection inferred from each device's own write latency (ScalaCache §5.4's
//! GC-aware eviction, for devices that do not say when they collect: real SSDs). A device is
//! taken to be collecting while a write-back to it has been in flight for much longer than
//! its pages take at the device's baseline, and for a while after a write-back that took that
//! long. The baseline is a moving average of the time per page of the device's write-backs
//! that ran alone on it (a batch over several devices waits for the slowest, so its time
//! says nothing of each), slow ones left out so that an episode does not raise it.
//!
//! Every value is a hint for the replacement policy: Relaxed atomics throughout, and a wrong
//! answer costs one eviction choice (a dirty page written back during a collection, or a clean
//! one taken where a dirty one would have done).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Write-backs in flight tracked per device; more run untracked.
const SLOTS: usize = 8;
/// A write-back in flight this long at least before it counts as stalled, whatever the
/// baseline (a device's ordinary jitter stays under it).
const FLOOR: Duration = Duration::from_micros(500);
/// In flight past this many times its pages' time at the baseline: stalled.
const STALLED: u64 = 8;
/// A tracked write-back still in flight this long past its deadline is taken for one whose
/// process died (a shared cache's device, `shared/gc.rs`): it no longer says the device
/// collects, and its slot is taken back. No collection stalls one write for a minute.
const ABANDONED: Duration = Duration::from_secs(60);

/// One device's GC state: plain atomics (`repr(C)`), so that it may live in a shared
/// segment, where every process's write-backs feed it; times are nanoseconds on one clock
/// (a cache's own epoch, or `CLOCK_MONOTONIC`, the same in every process).
#[repr(C)]
#[derive(Default)]
pub(crate) struct GcDevice {
    /// When each tracked write-back in flight counts as stalled (0: free).
    deadlines: [AtomicU64; SLOTS],
    /// Ns per page of ordinary write-backs (0: none seen yet).
    per_page_ns: AtomicU64,
    /// Until when the device is taken to be collecting after a slow write-back ended.
    until_ns: AtomicU64,
}

/// A tracked write-back's slot and the deadline it stored there, which only it clears (a slot
/// taken back as abandoned has another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GcSlot(usize, u64);

impl GcDevice {
    /// A write-back of `pages` pages (at least 1) begins at `now`: its slot, if one was free.
    pub(crate) fn begin_at(&self, pages: u64, now: u64) -> Option<GcSlot> {
        // Relaxed (throughout): hints, see the module's doc.
        let expect = self.per_page_ns.load(Ordering::Relaxed).saturating_mul(pages.max(1));
        let deadline = now + expect.saturating_mul(STALLED).max(FLOOR.as_nanos() as u64);
        let abandoned = now.saturating_sub(ABANDONED.as_nanos() as u64);
        let slot = self.deadlines.iter().position(|s| {
            let old = s.load(Ordering::Relaxed);
            (old == 0 || old < abandoned)
                && s.compare_exchange(old, deadline, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        });
        slot.map(|i| GcSlot(i, deadline))
    }

    /// The write-back begun in `slot` of `pages` pages ended at `now` after `took`; `alone`:
    /// it was the only device of its batch.
    pub(crate) fn end_at(&self, slot: Option<GcSlot>, pages: u64, took: u64, alone: bool, now: u64) {
        if let Some(GcSlot(i, deadline)) = slot {
            // A CAS: a write-back that outlived `ABANDONED` lost its slot to another.
            let _ = self.deadlines[i].compare_exchange(deadline, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        if !alone {
            return;
        }
        let per_page = took / pages.max(1);
        let base = self.per_page_ns.load(Ordering::Relaxed);
        if base != 0 && took > FLOOR.as_nanos() as u64 && per_page > base.saturating_mul(STALLED) {
            // A collection: taken to go on for half as long again, and kept out of the baseline.
            self.until_ns.store(now + took / 2, Ordering::Relaxed);
            return;
        }
        // An average over about the last 8 write-backs.
        let next = if base == 0 { per_page } else { base - base / 8 + per_page / 8 };
        self.per_page_ns.store(next.max(1), Ordering::Relaxed);
    }

    /// Whether the device is taken to be collecting at `now`.
    pub(crate) fn collecting_at(&self, now: u64) -> bool {
        let abandoned = now.saturating_sub(ABANDONED.as_nanos() as u64);
        now < self.until_ns.load(Ordering::Relaxed)
            || self.deadlines.iter().any(|s| {
                let deadline = s.load(Ordering::Relaxed);
                deadline != 0 && now > deadline && deadline >= abandoned
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1000;
    const MS: u64 = 1_000_000;

    /// Ordinary write-backs of 100 us a page make the baseline; one in flight past 8 times its
    /// pages' time (and the floor) is a collection, until it ends and for half its time after;
    /// a slow one left no mark on the baseline; batches over several devices teach nothing.
    #[test]
    fn a_write_back_far_slower_than_the_baseline_is_a_collection() {
        let w = [GcDevice::default(), GcDevice::default()];
        let mut now = MS;
        for _ in 0..20 {
            let t = w[0].begin_at(4, now);
            now += 400 * US;
            w[0].end_at(t, 4, 400 * US, true, now);
        }
        assert!(!w[0].collecting_at(now));
        let base = w[0].per_page_ns.load(Ordering::Relaxed);
        assert!((90 * US..=110 * US).contains(&base), "{base}");
        // 4 pages expected to take 400 us: not stalled at 3 ms, stalled past 3.2 ms.
        let t = w[0].begin_at(4, now);
        assert!(!w[0].collecting_at(now + 3 * MS));
        assert!(w[0].collecting_at(now + 4 * MS));
        assert!(!w[1].collecting_at(now + 4 * MS), "another device");
        now += 100 * MS;
        w[0].end_at(t, 4, 100 * MS, true, now);
        assert!(w[0].collecting_at(now + 49 * MS), "for half its time after");
        assert!(!w[0].collecting_at(now + 51 * MS));
        assert_eq!(w[0].per_page_ns.load(Ordering::Relaxed), base, "kept out of the baseline");
        // A batch over both devices: its time is the slowest's.
        let t = w[1].begin_at(1, now);
        w[1].end_at(t, 1, 100 * MS, false, now + 100 * MS);
        assert_eq!(w[1].per_page_ns.load(Ordering::Relaxed), 0);
        assert!(!w[1].collecting_at(now + 101 * MS));
    }

    /// Before any baseline, a write-back in flight past the floor is a collection; more
    /// write-backs in flight than slots are not tracked, and cost nothing.
    #[test]
    fn without_a_baseline_the_floor_decides() {
        let w = GcDevice::default();
        let t = w.begin_at(1, 0);
        assert!(!w.collecting_at(FLOOR.as_nanos() as u64));
        assert!(w.collecting_at(FLOOR.as_nanos() as u64 + 1));
        w.end_at(t, 1, 10 * MS, true, 10 * MS);
        assert!(!w.collecting_at(10 * MS), "the first sample is the baseline, not a collection");
        let all: Vec<_> = (0..SLOTS + 2).map(|_| w.begin_at(1, 20 * MS)).collect();
        assert_eq!(all.iter().filter(|t| t.is_none()).count(), 2);
        for t in all {
            w.end_at(t, 1, 10 * MS, true, 30 * MS);
        }
        assert!(!w.collecting_at(30 * MS));
    }

    /// A write-back never ended (its process died, in a shared cache) says the device
    /// collects only until it has been stalled for `ABANDONED`; then its slot is taken back.
    #[test]
    fn an_abandoned_write_back_stops_counting_and_frees_its_slot() {
        let d = GcDevice::default();
        let lost: Vec<_> = (0..SLOTS).map(|_| d.begin_at(1, MS)).collect();
        assert!(lost.iter().all(Option::is_some));
        let stalled = MS + FLOOR.as_nanos() as u64 + 1;
        assert!(d.collecting_at(stalled));
        assert_eq!(d.begin_at(1, stalled), None, "every slot taken");
        let later = stalled + ABANDONED.as_nanos() as u64;
        assert!(!d.collecting_at(later), "abandoned");
        let t = d.begin_at(1, later);
        assert!(t.is_some(), "a slot taken back");
        d.end_at(t, 1, 10 * US, true, later + 10 * US);
        assert!(!d.collecting_at(later + 10 * US));
    }
}
