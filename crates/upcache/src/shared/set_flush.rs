//! SAFS's flusher for the set-associative index (seed 002 §4.2): the service writes back the
//! dirty pages a set's clock hand will reach next, so that a miss in that set finds a clean
//! victim instead of passing dirty ones over (clean-first) or writing one back itself. Only
//! sets whose hand moved since the last pass are looked at: a hand moves only at misses, so a
//! set nobody misses in keeps its dirty pages for the expiry, as the kernel would.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::frame::{key_gen, key_slot, DIRTY, HITS, PINNED, REFERENCED};
use super::writeback::Lent;
use super::SharedCache;

impl SharedCache {
    /// Writes back, through the descriptors writers lent (`lent`), the dirty, unreferenced
    /// pages among the next half-lap of frames of every set whose hand moved since `seen`
    /// (each set's hand at the last pass, updated here); how many of them are clean after it.
    /// Nothing without the set-associative index.
    pub(crate) fn write_back_next_to_go(&self, lent: &[(u32, Arc<Lent>)], seen: &mut Vec<u32>) -> u64 {
        let inner = &self.inner;
        let index = inner.index();
        let Some(sets) = index.sets() else { return 0 };
        seen.resize(sets.sets, 0);
        let frames = inner.view.frames();
        let mut due: Vec<(u32, u64)> = Vec::new();
        for (s, last) in seen.iter_mut().enumerate() {
            // Relaxed: a hint of where the set's claims are.
            let hand = sets.hands[s].load(Ordering::Relaxed);
            if hand == std::mem::replace(last, hand) {
                continue;
            }
            let set = sets.frames_of(s);
            // Its ways in use only, as its claims (`resize.rs`).
            let n = set.len().min(inner.active_ways()) as u32;
            for i in 0..(n / 2).max(1) {
                let f = set.start as u32 + hand.wrapping_add(i) % n;
                let m = &frames[f as usize];
                let (flags, k) = (m.flags(), m.key());
                if flags & DIRTY != 0 && flags & (REFERENCED | HITS | PINNED) == 0 && k != 0 {
                    due.push((f, k));
                }
            }
        }
        let header = inner.view.header();
        let mut written = 0;
        for (slot, fd) in lent {
            let Some((gen, _)) = self.lent_extent(*slot, fd) else { continue };
            let pages: Vec<(u32, u64)> =
                due.iter().copied().filter(|&(_, k)| key_slot(k) == *slot && key_gen(k) == gen).collect();
            if pages.is_empty() {
                continue;
            }
            // Errors stay on the file, for its next sync.
            let _ = inner.write_back_listed(&pages, fd.target(), false, None);
            // Written: still the page, clean (by us, or by a writer's write-back meanwhile).
            written += pages
                .iter()
                .filter(|&&(f, k)| frames[f as usize].key() == k && frames[f as usize].flags() & DIRTY == 0)
                .count() as u64;
        }
        header.next_to_go_written.fetch_add(written, Ordering::Relaxed); // Relaxed: a statistic
        written
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::frame::{DIRTY, REFERENCED};
    use super::super::tests::small;
    use super::super::writeback::Lent;
    use super::super::{SharedCache, SharedConfig};
    use crate::index::IndexKind;

    /// With the sets, a pass writes back the dirty, unreferenced pages of the next half-lap
    /// of each set whose hand moved, and nothing else; a second pass with no miss between
    /// writes nothing; the file reads back whole. Without the sets, a pass writes nothing.
    #[test]
    fn a_pass_writes_back_the_dirty_pages_each_moved_hand_reaches_next() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let data: Vec<u8> = (0..200 * 4096u32).map(|i| (i.wrapping_mul(13) >> 3) as u8).collect();
        for index in [IndexKind::SetAssoc, IndexKind::Radix] {
            // Streams off: the writes below are a sequential stream, which write-behind would
            // write back meanwhile (its own test: `ahead.rs`).
            let config = SharedConfig {
                memory: 64 * 4096,
                set_ways: 8,
                dirty_ratios: (0.99, 1.0),
                index,
                streams: false,
                ..small()
            };
            let cache = SharedCache::create(&config).unwrap();
            let f = cache.open_path(&p, true).unwrap();
            let lent = [(
                f.slot(),
                Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true)),
            )];
            // Page by page: 200 misses in 64 frames, every set's hand round more than once.
            for page in 0..200 {
                f.write_at(&data[page * 4096..][..4096], page as u64 * 4096).unwrap();
            }
            let inner = &cache.inner;
            let frames = inner.view.frames();
            let dirty = || frames.iter().filter(|m| m.flags() & DIRTY != 0).count();
            let before = dirty();
            let mut seen = Vec::new();
            let written = cache.write_back_next_to_go(&lent, &mut seen) as usize;
            assert_eq!(dirty(), before - written, "{}: only what the pass wrote is clean", index.name());
            if index == IndexKind::Radix {
                assert_eq!(written, 0, "no sets, no pass");
                continue;
            }
            assert!(written > 0, "dirty pages next to the hands");
            let sets = inner.view.sets();
            for s in 0..sets.sets {
                let set = sets.frames_of(s);
                let hand = sets.hands[s].load(std::sync::atomic::Ordering::Relaxed);
                for i in 0..set.len() as u32 / 2 {
                    let m = &frames[set.start + ((hand + i) % set.len() as u32) as usize];
                    assert!(m.flags() & (DIRTY | REFERENCED) != DIRTY, "set {s}: a dirty page next to go");
                }
            }
            assert_eq!(cache.write_back_next_to_go(&lent, &mut seen), 0, "no hand moved");
            f.sync_data().unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), data);
        }
    }
}
