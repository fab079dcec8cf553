//! The frames that hold dirty pages: a bit per frame, and a count of set bits per group of
//! 4096 frames, in the segment, so that a sync finds its file's dirty pages among the cache's
//! dirty frames without walking every cached page of its dirty range (two threads writing at
//! random and syncing keep that range as wide as the file: bench/RESULTS.md, issue 34).
//!
//! # Invariants
//! - A frame's bit is set and cleared under the frame's lock, right after its `DIRTY` flag is
//!   set and cleared: a frame with `DIRTY` has its bit, but for a holder killed between the
//!   two, whose frame stays locked until it is repaired (`repair.rs` sets the bit of a dirty
//!   frame it repairs). A bit of a clean frame (a holder killed after clearing the flag) costs
//!   a scan a look, nothing more.
//! - A group's count is never below its set bits: raised before a bit is set, lowered after
//!   one is cleared (a kill in between leaves it high, which costs a scan a look). So a scan
//!   that finds a group's count 0 (in `SeqCst` order after the setter's raise) can pass its
//!   bits over.
//!
//! Nothing but the frames' holders writes a bit: scans only read, so no scan can hide a bit
//! from another for a moment.

use crate::sync::{AtomicU64, Ordering};

/// Frames a count covers (64 words of bits).
const GROUP: usize = 64 * 64;

/// The dirty map of a segment's frames.
pub(crate) struct DirtyMap<'a> {
    /// A bit per frame.
    bits: &'a [AtomicU64],
    /// Set bits per group of `GROUP` frames.
    counts: &'a [AtomicU64],
}

/// Words of the map of `frames` frames: the frames' bits, then the groups' counts.
pub(crate) fn words(frames: usize) -> usize {
    frames.div_ceil(64) + frames.div_ceil(GROUP)
}

impl<'a> DirtyMap<'a> {
    /// The map of `frames` frames in `region` (at least [`words`]`(frames)` words).
    pub(crate) fn new(region: &'a [AtomicU64], frames: usize) -> Self {
        let (bits, counts) = region.split_at(frames.div_ceil(64));
        DirtyMap { bits, counts: &counts[..frames.div_ceil(GROUP)] }
    }

    /// Frame `f` (locked by us) was just marked dirty; a repair may mark one twice.
    pub(crate) fn set(&self, f: u32) {
        let (w, bit) = (f as usize / 64, 1u64 << (f % 64));
        // SeqCst (all of the map's): one order with the scans' loads (module docs).
        if self.bits[w].load(Ordering::SeqCst) & bit != 0 {
            return;
        }
        self.counts[f as usize / GROUP].fetch_add(1, Ordering::SeqCst);
        self.bits[w].fetch_or(bit, Ordering::SeqCst);
    }

    /// Frame `f` (locked by us) was just written back or emptied: no longer dirty.
    pub(crate) fn clear(&self, f: u32) {
        let (w, bit) = (f as usize / 64, 1u64 << (f % 64));
        if self.bits[w].fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
            self.counts[f as usize / GROUP].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Every frame whose bit is set, in frame order: each dirty then or since, to be checked
    /// under its lock; none dirtied before the call and still dirty is left out.
    pub(crate) fn scan(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (g, count) in self.counts.iter().enumerate() {
            if count.load(Ordering::SeqCst) == 0 {
                continue;
            }
            let words = g * 64..((g + 1) * 64).min(self.bits.len());
            for (word, w) in self.bits[words.clone()].iter().zip(words) {
                let mut bits = word.load(Ordering::SeqCst);
                while bits != 0 {
                    out.push((w * 64) as u32 + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
        }
        out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Bits set, cleared and set again read back exactly, across groups, and the counts
    /// follow them.
    #[test]
    fn a_scan_lists_the_frames_set_and_not_those_cleared() {
        let frames = GROUP * 2 + 100;
        let region: Vec<AtomicU64> = (0..words(frames)).map(|_| AtomicU64::new(0)).collect();
        let map = DirtyMap::new(&region, frames);
        assert!(map.scan().is_empty());
        let marked = [0u32, 63, 64, 4095, 4096, (GROUP * 2 + 99) as u32];
        for f in marked {
            map.set(f);
        }
        map.set(63); // twice: counted once
        assert_eq!(map.scan(), marked);
        let counts: Vec<u64> = map.counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(counts, [4, 1, 1]);
        for f in [0, 4096, 4096] {
            map.clear(f);
        }
        assert_eq!(map.scan(), [63, 64, 4095, (GROUP * 2 + 99) as u32]);
        let counts: Vec<u64> = map.counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(counts, [3, 0, 1], "a clear of a clear frame counts nothing");
        map.set(4096);
        assert_eq!(map.scan(), [63, 64, 4095, 4096, (GROUP * 2 + 99) as u32]);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::Arc;
    use loom::thread;

    /// Two holders set and clear bits of one word while a third scans: a frame set before a
    /// scan begins (joined) and not cleared is always listed; the counts end at the bits.
    #[test]
    fn a_bit_set_before_a_scan_is_always_listed() {
        loom::model(|| {
            let region: Arc<Vec<AtomicU64>> = Arc::new((0..words(2)).map(|_| AtomicU64::new(0)).collect());
            DirtyMap::new(&region, 2).set(0);
            let r = region.clone();
            let other = thread::spawn(move || {
                let map = DirtyMap::new(&r, 2);
                map.set(1);
                map.clear(1);
            });
            assert!(DirtyMap::new(&region, 2).scan().contains(&0), "frame 0, set before");
            other.join().unwrap();
            let map = DirtyMap::new(&region, 2);
            assert_eq!(map.scan(), [0]);
            assert_eq!(map.counts[0].load(Ordering::SeqCst), 1);
        });
    }
}
