//! Hit ratios without I/O: a key stream replayed through a policy, as the cache would drive
//! it (a hit pins and unpins the frame and reaches [`Policy::on_hit`]; a miss takes a free
//! frame or a victim and inserts the page through [`Policy::on_insert`]), on a frame table of
//! the given size whose frames are never read or written. And Belady's OPT (MIN) as the
//! ceiling: on a miss with the cache full, evict the page used furthest in the future.

use super::{DirtyRule, Policy, PolicyKind, Victim};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::state::VALID;
use crate::frame::{FrameId, FrameTable, PageKey};
use std::collections::{BTreeSet, HashMap};

/// One policy over a table of `frames` frames, fed keys one at a time. Repeatable: the same
/// keys give the same hits (the sampling policies' generator is reseeded at construction; feed
/// a simulator from the thread that built it).
pub struct Simulator {
    table: FrameTable,
    policy: Box<dyn Policy>,
    resident: HashMap<u64, FrameId>,
    free: Vec<FrameId>,
}

impl Simulator {
    /// `kind` (clean first, though nothing is ever dirty) over `frames` frames.
    pub fn new(kind: PolicyKind, frames: usize) -> Result<Self> {
        if frames == 0 {
            return Err(Error::new(ErrorKind::InvalidInput, "a simulated cache needs at least one frame"));
        }
        // The frames' memory (4 KiB each, the smallest page) is mapped but never touched: it
        // costs address space only.
        let table = FrameTable::new(frames, 4096)?;
        let policy = kind.build(frames, DirtyRule::default());
        // Sampling policies draw from a per-thread generator: the same start every time.
        super::sample::reseed(0x5eed);
        Ok(Simulator {
            table,
            policy,
            resident: HashMap::new(),
            free: (0..frames as FrameId).rev().collect(),
        })
    }

    /// Uses the page with key `key`; returns whether it was a hit.
    pub fn access(&mut self, key: u64) -> Result<bool> {
        if let Some(&id) = self.resident.get(&key) {
            let st = self.table.state(id);
            st.try_pin()
                .map_err(|e| Error::new(ErrorKind::Busy, format!("pin of a resident frame: {e:?}")))?;
            self.policy.on_hit(id);
            st.unpin();
            return Ok(true);
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => match self.policy.pick_victim(&self.table) {
                Victim::Claimed(id) => {
                    self.resident.remove(&self.table.key(id).page);
                    id
                }
                v => {
                    return Err(Error::new(
                        ErrorKind::CacheFull,
                        format!("{} found no victim among clean, unpinned pages: {v:?}", self.policy.name()),
                    ))
                }
            },
        };
        self.table.set_key(id, PageKey { file: 1, page: key });
        let st = self.table.state(id);
        st.assign_locked();
        self.policy.on_insert(&self.table, id);
        self.table.unlock(id, VALID, 0);
        st.unpin();
        self.resident.insert(key, id);
        Ok(false)
    }
}

/// Hits of `kind` with `frames` frames on `keys`.
pub fn hits(kind: PolicyKind, frames: usize, keys: &[u64]) -> Result<u64> {
    let mut sim = Simulator::new(kind, frames)?;
    let mut hits = 0;
    for &k in keys {
        hits += u64::from(sim.access(k)?);
    }
    Ok(hits)
}

/// Hits of Belady's OPT with `frames` frames on `keys`: every page is cached on its miss (as
/// in a page cache), and the resident page whose next use is furthest away is evicted.
pub fn opt_hits(frames: usize, keys: &[u64]) -> u64 {
    // next[i]: the position of the next use of keys[i], or past the end.
    let mut next = vec![usize::MAX; keys.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, &k) in keys.iter().enumerate().rev() {
        if let Some(j) = seen.insert(k, i) {
            next[i] = j;
        }
    }
    // Resident keys by next use; ties (never used again) broken by key.
    let mut by_next: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut resident: HashMap<u64, usize> = HashMap::new();
    let mut hits = 0;
    for (i, &k) in keys.iter().enumerate() {
        if let Some(n) = resident.get_mut(&k) {
            hits += 1;
            by_next.remove(&(*n, k));
            *n = next[i];
        } else {
            if resident.len() == frames {
                if let Some((_, victim)) = by_next.pop_last() {
                    resident.remove(&victim);
                }
            }
            resident.insert(k, next[i]);
        }
        by_next.insert((next[i], k));
    }
    hits
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn opt_on_a_known_sequence() {
        // The textbook reference string with 3 frames: OPT has 9 misses of 20.
        let keys = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1];
        assert_eq!(opt_hits(3, &keys), 20 - 9);
    }

    #[test]
    fn no_policy_beats_opt_and_all_hit_everything_that_fits() {
        let mut x = 1u64;
        let keys: Vec<u64> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Skewed: small keys far more often.
                (x % 1000) * (x % 1000) / 1000
            })
            .collect();
        let distinct = keys.iter().collect::<std::collections::HashSet<_>>().len() as u64;
        for frames in [10, 50, 200] {
            let opt = opt_hits(frames, &keys);
            for kind in PolicyKind::ALL {
                let h = hits(kind, frames, &keys).unwrap();
                assert!(h <= opt, "{kind:?} with {frames} frames: {h} > OPT {opt}");
                assert!(h > 0, "{kind:?}");
            }
        }
        // A cache as large as the footprint misses each page once, whatever the policy.
        for kind in PolicyKind::ALL {
            assert_eq!(hits(kind, distinct as usize, &keys).unwrap(), keys.len() as u64 - distinct);
        }
        assert_eq!(opt_hits(distinct as usize, &keys), keys.len() as u64 - distinct);
    }

    #[test]
    fn a_looping_scan_larger_than_the_cache_defeats_clock_but_not_opt() {
        let keys: Vec<u64> = (0..10).flat_map(|_| 0..100u64).collect();
        assert_eq!(hits(PolicyKind::Clock, 50, &keys).unwrap(), 0);
        // OPT keeps about half of each pass.
        assert!(opt_hits(50, &keys) >= 9 * 49);
    }
}
