//! A hash index split into shards, each an open-addressing table under its own
//! reader-writer lock.
//!
//! Pages are spread over shards by the top bits of a hash of the page number, so threads
//! working on different pages of one file rarely touch the same lock, and a hit takes only a
//! shared lock on one shard. Inside a shard, entries (page, frame) sit inline in one array
//! probed linearly, so a lookup of a large index usually costs one cache miss (std's
//! `HashMap` keeps control bytes and entries apart: two). Deletion shifts later entries of
//! the probe chain back instead of leaving tombstones, so lookups never slow down with churn.
//! This is the skeleton's index; ccXArray replaces the locks with CAS on tree slots.
//!
//! # Locking
//! A shard lock is a leaf: it is held only for the table operation itself.

use super::PageIndex;
use crate::frame::FrameId;
use crate::sync::{read, write, RwLock};

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
const EMPTY: FrameId = FrameId::MAX;
const MIN_CAPACITY: usize = 8;

/// murmur3's 64-bit finalizer: page numbers are not attacker-controlled, and it spreads
/// neighbouring pages over shards and slots.
fn hash(page: u64) -> u64 {
    let mut x = page;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[derive(Clone, Copy)]
struct Slot {
    page: u64,
    frame: FrameId,
}

const VACANT: Slot = Slot { page: 0, frame: EMPTY };

/// One shard: a linear-probing table kept at most half full.
struct Table {
    slots: Vec<Slot>,
    len: usize,
}

impl Table {
    fn new() -> Self {
        Table { slots: vec![VACANT; MIN_CAPACITY], len: 0 }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Home slot of `page`: low bits of the hash (the shard used the top bits).
    fn home(&self, page: u64) -> usize {
        hash(page) as usize & self.mask()
    }

    /// Slot holding `page`, or the vacant slot where it would go.
    fn find(&self, page: u64) -> (usize, bool) {
        let mut i = self.home(page);
        loop {
            let s = self.slots[i];
            if s.frame == EMPTY {
                return (i, false);
            }
            if s.page == page {
                return (i, true);
            }
            i = (i + 1) & self.mask();
        }
    }

    fn get(&self, page: u64) -> Option<FrameId> {
        match self.find(page) {
            (i, true) => Some(self.slots[i].frame),
            _ => None,
        }
    }

    fn insert_if_absent(&mut self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        debug_assert!(frame != EMPTY);
        let (i, found) = self.find(page);
        if found {
            return Err(self.slots[i].frame);
        }
        self.slots[i] = Slot { page, frame };
        self.len += 1;
        if self.len * 2 > self.slots.len() {
            self.resize(self.slots.len() * 2);
        }
        Ok(())
    }

    fn remove_if(&mut self, page: u64, frame: FrameId) -> bool {
        let (mut i, found) = self.find(page);
        if !found || self.slots[i].frame != frame {
            return false;
        }
        // Backward-shift deletion: pull later members of the probe chain into the hole when
        // their home slot is not after the hole (cyclically), so no lookup stops early.
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.frame == EMPTY {
                break;
            }
            let k = self.home(s.page);
            let k_in_hole_to_j = if i <= j { i < k && k <= j } else { i < k || k <= j };
            if !k_in_hole_to_j {
                self.slots[i] = s;
                i = j;
            }
        }
        self.slots[i] = VACANT;
        self.len -= 1;
        if self.slots.len() > MIN_CAPACITY && self.len * 8 < self.slots.len() {
            self.resize(self.slots.len() / 2);
        }
        true
    }

    fn resize(&mut self, capacity: usize) {
        let old = std::mem::replace(&mut self.slots, vec![VACANT; capacity]);
        for s in old.into_iter().filter(|s| s.frame != EMPTY) {
            let (i, _) = self.find(s.page);
            self.slots[i] = s;
        }
    }
}

/// A sharded hash map from page to frame.
pub struct ShardedIndex {
    shards: Box<[RwLock<Table>]>,
}

impl Default for ShardedIndex {
    fn default() -> Self {
        ShardedIndex { shards: (0..SHARDS).map(|_| RwLock::new(Table::new())).collect() }
    }
}

impl ShardedIndex {
    fn shard(&self, page: u64) -> &RwLock<Table> {
        &self.shards[(hash(page) >> (64 - SHARD_BITS)) as usize]
    }
}

impl PageIndex for ShardedIndex {
    fn get(&self, page: u64) -> Option<FrameId> {
        read(self.shard(page)).get(page)
    }

    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        write(self.shard(page)).insert_if_absent(page, frame)
    }

    fn remove_if(&self, page: u64, frame: FrameId) -> bool {
        write(self.shard(page)).remove_if(page, frame)
    }

    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let t = read(s);
            out.extend(
                t.slots.iter().filter(|s| s.frame != EMPTY && s.page >= from).map(|s| (s.page, s.frame)),
            );
        }
        out
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).len).sum()
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .shards
                .iter()
                .map(|s| read(s).slots.capacity() * std::mem::size_of::<Slot>())
                .sum::<usize>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn insert_get_remove() {
        let ix = ShardedIndex::default();
        assert_eq!(ix.get(7), None);
        assert_eq!(ix.insert_if_absent(7, 3), Ok(()));
        assert_eq!(ix.insert_if_absent(7, 4), Err(3));
        assert_eq!(ix.get(7), Some(3));
        assert!(!ix.remove_if(7, 4), "wrong frame must not remove");
        assert!(ix.remove_if(7, 3));
        assert_eq!(ix.get(7), None);
        assert!(ix.is_empty());
    }

    #[test]
    fn entries_from_filters() {
        let ix = ShardedIndex::default();
        for p in 0..100 {
            ix.insert_if_absent(p, p as u32).unwrap();
        }
        let mut e = ix.entries_from(90);
        e.sort();
        assert_eq!(e, (90..100).map(|p| (p, p as u32)).collect::<Vec<_>>());
        assert_eq!(ix.len(), 100);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, FrameId),
        Remove(u64, FrameId),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct pages and frames so that collisions, removes of present entries and
        // wrong-frame removes all happen often; one table sees long probe chains.
        let page = prop_oneof![0u64..64, any::<u64>()];
        prop_oneof![
            (page.clone(), 0u32..8).prop_map(|(p, f)| Op::Insert(p, f)),
            (page.clone(), 0u32..8).prop_map(|(p, f)| Op::Remove(p, f)),
            page.prop_map(Op::Get),
        ]
    }

    proptest! {
        #[test]
        fn table_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = Table::new();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(p, f) => {
                        let want = match model.get(&p) { Some(&e) => Err(e), None => { model.insert(p, f); Ok(()) } };
                        prop_assert_eq!(t.insert_if_absent(p, f), want);
                    }
                    Op::Remove(p, f) => {
                        let want = model.get(&p) == Some(&f);
                        if want { model.remove(&p); }
                        prop_assert_eq!(t.remove_if(p, f), want);
                    }
                    Op::Get(p) => prop_assert_eq!(t.get(p), model.get(&p).copied()),
                }
                prop_assert_eq!(t.len, model.len());
            }
            for (&p, &f) in &model {
                prop_assert_eq!(t.get(p), Some(f));
            }
        }
    }
}
