//! S3-FIFO's ghost queue in the segment: the keys of pages recently evicted from the small
//! queue, so that a page read again soon after goes straight to the main queue.
//!
//! A FIFO of keys with a map beside it (the private engine's) needs memory that grows; here
//! the ghost is a table of `slots(frames)` words in buckets of 4, each word a key's 32-bit
//! fingerprint and the sequence number of its insertion. An entry counts while fewer than
//! `capacity` insertions came after it (0.9x the frames, the paper's ghost size), so entries
//! expire in insertion order as a FIFO's do. A full bucket drops its oldest entry: with 4
//! words per frame (32 bytes beside each 4 KiB page) that is seldom, and with 1 it was often
//! enough that a 16-frame cache missed where the private engine's exact queue hit
//! (`policy/tests.rs`). A fingerprint collision only admits a page to main. Used under
//! `PolicyState::lock`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Entries per bucket.
const WAYS: usize = 4;

/// The table's words for `frames` frames: 4 per frame, a power of two.
pub(crate) fn slots(frames: usize) -> usize {
    (4 * frames).next_power_of_two().max(WAYS)
}

/// The table, as the segment holds it.
pub(crate) struct Ghost<'a> {
    pub slots: &'a [AtomicU64],
    /// Insertions so far, wrapping.
    pub seq: &'a AtomicU32,
    /// Insertions after which an entry expires.
    pub capacity: usize,
}

/// `key`'s fingerprint (never 0, which is an empty word) and its bucket's first word.
fn place(key: u64, slots: usize) -> (u32, usize) {
    let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let fp = ((h >> 32) as u32) | 1;
    (fp, (h as usize & (slots - 1)) & !(WAYS - 1))
}

impl Ghost<'_> {
    /// How many insertions ago word `w` was inserted; None if empty or expired.
    fn age(&self, w: u64, now: u32) -> Option<u32> {
        let age = now.wrapping_sub(w as u32);
        (w != 0 && (age as usize) < self.capacity).then_some(age)
    }

    /// Remembers `key`, the newest entry.
    pub fn insert(&self, key: u64) {
        let (fp, at) = place(key, self.slots.len());
        // Relaxed (all): under the policy's lock, whose release publishes them.
        let now = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let bucket = &self.slots[at..at + WAYS];
        // The key's own entry, else an empty or expired one, else the oldest.
        let slot = bucket
            .iter()
            .find(|s| (s.load(Ordering::Relaxed) >> 32) as u32 == fp)
            .or_else(|| bucket.iter().find(|s| self.age(s.load(Ordering::Relaxed), now).is_none()))
            .unwrap_or_else(|| {
                bucket.iter().max_by_key(|s| self.age(s.load(Ordering::Relaxed), now)).expect("WAYS words")
            });
        slot.store(u64::from(fp) << 32 | u64::from(now), Ordering::Relaxed);
    }

    /// Whether `key` is remembered; found, it is forgotten (a page comes back once).
    pub fn take(&self, key: u64) -> bool {
        let (fp, at) = place(key, self.slots.len());
        // Relaxed (all): as in `insert`.
        let now = self.seq.load(Ordering::Relaxed);
        for s in &self.slots[at..at + WAYS] {
            let w = s.load(Ordering::Relaxed);
            if (w >> 32) as u32 == fp && self.age(w, now).is_some() {
                s.store(0, Ordering::Relaxed);
                return true;
            }
        }
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table(frames: usize) -> (Vec<AtomicU64>, AtomicU32) {
        ((0..slots(frames)).map(|_| AtomicU64::new(0)).collect(), AtomicU32::new(0))
    }

    /// A key is found once; an entry expires after `capacity` insertions; keys that share a
    /// bucket evict its oldest entry.
    #[test]
    fn entries_are_found_once_and_expire_in_insertion_order() {
        let (slots, seq) = table(64);
        let g = Ghost { slots: &slots, seq: &seq, capacity: 10 };
        g.insert(7);
        assert!(g.take(7));
        assert!(!g.take(7), "found once");
        g.insert(7);
        for k in 100..109 {
            g.insert(k);
        }
        assert!(g.take(7), "nine insertions after it: still there");
        g.insert(8);
        for k in 200..210 {
            g.insert(k);
        }
        assert!(!g.take(8), "ten insertions after it: expired");
        // Five keys of one bucket: the first is dropped, the others stay.
        let (slots, seq) = table(64);
        let g = Ghost { slots: &slots, seq: &seq, capacity: 1000 };
        let bucket = |k: u64| place(k, slots.len()).1;
        let same: Vec<u64> = (0..).filter(|&k| bucket(k) == bucket(0)).take(WAYS + 1).collect();
        same.iter().for_each(|&k| g.insert(k));
        assert!(!g.take(same[0]), "the oldest of a full bucket was dropped");
        assert!(same[1..].iter().all(|&k| g.take(k)));
        // Seq wrapping past u32::MAX keeps ages right.
        let (slots, seq) = table(64);
        seq.store(u32::MAX - 2, Ordering::SeqCst);
        let g = Ghost { slots: &slots, seq: &seq, capacity: 10 };
        g.insert(5);
        (0..5).for_each(|k| g.insert(1000 + k));
        assert!(g.take(5));
    }
}
