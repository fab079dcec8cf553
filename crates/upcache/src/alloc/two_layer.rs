//! StreamCache's two-layer memory management (seed 003 §4.3).
//!
//! Layer one, the pool: one region per core, each a free list under its own lock. Layer two:
//! a small free list per file. A miss takes a frame from its file's list; when that is empty
//! it moves `low` frames (50 by default) in one batch from the region of the core it runs on,
//! stealing from the next regions if that one has too few. A frame freed by a file goes back
//! to that file's list unless it already holds `high` (100), else to the current core's
//! region. So a file's misses usually touch only a list that its own threads share, and the
//! pool's locks are taken once per batch instead of once per frame.
//!
//! Frames parked in one file's list are invisible to other files: under urgent pressure
//! ([`super::Pressure::Urgent`]) background reclaim halves every list back into the pool
//! ([`TwoLayer::shrink`]); a removed file's list goes back whole ([`TwoLayer::drain`]). The
//! hot path touches no shared counter: `pooled` changes once per batch.
//!
//! Regions are first in, first out, and a batch goes into a file's list so that the list
//! hands it out in the order it was freed: background reclaim frees frames in its CLOCK
//! hand's order, so a file's misses get frames side by side in the arena, and a multi-page
//! read lands in few memory segments (`cache/batch.rs`).

use std::collections::VecDeque;

use crate::frame::FrameId;
use crate::sync::{lock, AtomicUsize, Mutex, Ordering};

/// Batch sizes of the per-file caches.
#[derive(Debug, Clone, Copy)]
pub struct Marks {
    /// Frames moved from the pool into an empty file cache at once.
    pub low: usize,
    /// Most frames a file cache keeps; more go back to the pool.
    pub high: usize,
}

impl Default for Marks {
    /// The paper's defaults: 50 and 100.
    fn default() -> Self {
        Marks { low: 50, high: 100 }
    }
}

impl Marks {
    /// The paper's marks, scaled down for a cache of `frames` frames so that one file's
    /// list holds at most 1/32 of them: frames parked in a list are invisible to other files
    /// and to eviction, and a small cache whose frames sat in an idle file's list would
    /// leave a multi-page load nothing to evict.
    pub fn for_frames(frames: usize) -> Self {
        let low = (frames / 64).clamp(1, Marks::default().low);
        Marks { low, high: 2 * low }
    }
}

/// One core's region; 128-byte aligned so neighbouring regions' locks do not share a line
/// (or an adjacent-line prefetch pair).
#[repr(align(128))]
struct Region {
    list: Mutex<VecDeque<FrameId>>,
}

/// A file's cache of free frames.
#[derive(Default)]
pub struct FileFrames {
    list: Mutex<Vec<FrameId>>,
}

/// The pool and the bookkeeping of the per-file caches.
pub struct TwoLayer {
    regions: Box<[Region]>,
    marks: Marks,
    /// Frames in the regions (changed once per batch, not per frame).
    pooled: AtomicUsize,
}

/// The region of the core this thread runs on now (a hint: the thread may move).
fn current_core() -> usize {
    // SAFETY: sched_getcpu has no preconditions; it reads the CPU number (vDSO/rseq).
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as usize
}

impl TwoLayer {
    /// A pool holding frames `0..count`, split into one contiguous block per core.
    pub fn full(count: usize, marks: Marks) -> Self {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_regions(count, marks, n)
    }

    /// [`TwoLayer::full`] with `n` regions.
    fn with_regions(count: usize, marks: Marks, n: usize) -> Self {
        let n = n.max(1);
        let per = count.div_ceil(n);
        let regions = (0..n)
            .map(|r| {
                let lo = (r * per).min(count);
                let hi = ((r + 1) * per).min(count);
                Region { list: Mutex::new((lo as FrameId..hi as FrameId).collect()) }
            })
            .collect();
        TwoLayer { regions, marks, pooled: AtomicUsize::new(count) }
    }

    fn home(&self) -> usize {
        current_core() % self.regions.len()
    }

    /// Takes a frame for a miss of the file whose cache is `fc`.
    pub fn alloc(&self, fc: &FileFrames) -> Option<FrameId> {
        let mut list = lock(&fc.list);
        if let Some(id) = list.pop() {
            return Some(id);
        }
        self.take_from_pool(&mut list, self.marks.low);
        list.pop()
    }

    /// Moves up to `want` frames from the regions into `into`, the home region first, then
    /// stealing from the others in turn.
    fn take_from_pool(&self, into: &mut Vec<FrameId>, want: usize) {
        let n = self.regions.len();
        let home = self.home();
        let mut got = 0;
        let start = into.len();
        for i in 0..n {
            let mut r = lock(&self.regions[(home + i) % n].list);
            let take = (want - got).min(r.len());
            into.extend(r.drain(..take));
            got += take;
            if got == want {
                break;
            }
        }
        // The oldest frames, reversed onto the file's stack (whatever regions they came
        // from) so that it pops them in the order they were freed.
        into[start..].reverse();
        // Relaxed (all `pooled` updates): it only steers pressure decisions, which tolerate
        // a stale value.
        self.pooled.fetch_sub(got, Ordering::Relaxed);
    }

    /// Returns a frame to the freeing file's cache, which past its high mark gives frames
    /// back down to the low mark in one batch (so a file that frees many frames takes a pool
    /// lock once per `high - low` frames, not once per frame).
    pub fn free(&self, fc: &FileFrames, id: FrameId) {
        let mut list = lock(&fc.list);
        list.push(id);
        if list.len() > self.marks.high {
            let low = self.marks.low;
            self.give_back(list.drain(low..));
        }
    }

    /// Returns frames that belong to no file (background reclaim) in one batch.
    pub fn free_many(&self, ids: &[FrameId]) {
        self.give_back(ids.iter().copied());
    }

    fn give_back(&self, ids: impl ExactSizeIterator<Item = FrameId>) {
        let n = ids.len();
        let mut region = lock(&self.regions[self.home()].list);
        // Counted before the frames can be taken (under the region lock), so a taker's
        // subtraction never comes first and `pooled` never dips below zero.
        self.pooled.fetch_add(n, Ordering::Relaxed);
        region.extend(ids);
    }

    /// Gives half of a file's cache back to the pool.
    pub fn shrink(&self, fc: &FileFrames) {
        let mut list = lock(&fc.list);
        let keep = list.len() / 2;
        self.give_back(list.drain(keep..));
    }

    /// Gives all of a file's cache back to the pool.
    pub fn drain(&self, fc: &FileFrames) {
        self.give_back(lock(&fc.list).drain(..));
    }

    /// Frames in the regions.
    pub fn pooled(&self) -> usize {
        self.pooled.load(Ordering::Relaxed) // Relaxed: see `alloc`
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn batches_marks_and_conservation() {
        let t = TwoLayer::full(1000, Marks { low: 50, high: 100 });
        let (a, b) = (FileFrames::default(), FileFrames::default());
        let first = t.alloc(&a).unwrap();
        // One batch moved: 49 left in a's cache.
        assert_eq!(lock(&a.list).len(), 49);
        assert_eq!(t.pooled(), 950);
        let mut held: Vec<_> = (0..199).map(|_| t.alloc(&a).unwrap()).collect();
        held.push(first);
        assert_eq!(t.pooled() + lock(&a.list).len() + held.len(), 1000);
        // Freeing fills a's cache; past the high mark it drops back to the low mark at once.
        for (i, id) in held.drain(..).enumerate() {
            t.free(&a, id);
            assert!(lock(&a.list).len() <= 100, "after {i} frees");
        }
        let kept = lock(&a.list).len();
        assert!((50..=100).contains(&kept));
        t.shrink(&a);
        assert_eq!(lock(&a.list).len(), kept - kept.div_ceil(2));
        t.drain(&a);
        assert!(lock(&a.list).is_empty());
        // Everything can be taken exactly once, by any file, by stealing across regions.
        let mut all = BTreeSet::new();
        while let Some(id) = t.alloc(&b) {
            assert!(all.insert(id), "frame {id} handed out twice");
        }
        assert_eq!(all.len(), 1000);
        assert_eq!(t.pooled(), 0);
    }

    #[test]
    fn frames_come_out_in_the_order_they_were_freed() {
        // One region, so the order does not depend on the core we run on.
        let t = TwoLayer::with_regions(256, Marks { low: 8, high: 16 }, 1);
        let fc = FileFrames::default();
        // From a fresh pool: ascending.
        let got: Vec<FrameId> = (0..40).map(|_| t.alloc(&fc).unwrap()).collect();
        assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
        // A refill that takes from two regions keeps the order too (the home one first).
        let t = TwoLayer::with_regions(12, Marks { low: 8, high: 16 }, 2);
        let fc = FileFrames::default();
        let got: Vec<FrameId> = (0..12).map(|_| t.alloc(&fc).unwrap()).collect();
        for w in got.windows(2).filter(|w| w[1] != w[0] + 1) {
            // The only jumps: from one region's block to the other's.
            assert!(w[0] == 5 || w[0] == 11, "out of order: {got:?}");
        }
        // Background reclaim frees in CLOCK order: handed out again in that order, over two
        // refills of the file's list (one call, so one region whatever core we run on).
        t.drain(&fc);
        while t.alloc(&fc).is_some() {}
        t.free_many(&(100..112).collect::<Vec<_>>());
        let got: Vec<FrameId> = (0..12).map(|_| t.alloc(&fc).unwrap()).collect();
        assert_eq!(got, (100..112).collect::<Vec<_>>());
    }

    #[test]
    fn threads_never_get_the_same_frame() {
        let t = TwoLayer::full(4096, Marks::default());
        let got: Vec<Vec<FrameId>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let fc = FileFrames::default();
                        let mut mine = Vec::new();
                        for round in 0..200 {
                            while let Some(id) = t.alloc(&fc) {
                                mine.push(id);
                                if mine.len() % 97 == 0 {
                                    break;
                                }
                            }
                            if round % 3 == 0 {
                                for id in mine.drain(..mine.len() / 2) {
                                    t.free(&fc, id);
                                }
                            }
                        }
                        t.drain(&fc);
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = BTreeSet::new();
        for id in got.into_iter().flatten() {
            assert!(seen.insert(id), "frame {id} held by two threads");
        }
        assert_eq!(seen.len() + t.pooled(), 4096);
    }
}
