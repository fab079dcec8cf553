//! A hash index split into shards, each under its own reader-writer lock.
//!
//! Pages are spread over shards by a multiplicative hash of the page number, so threads
//! working on different pages of one file rarely touch the same lock, and a hit takes only a
//! shared lock on one shard. This is the skeleton's index; ccXArray replaces the locks with
//! CAS on tree slots.
//!
//! # Locking
//! A shard lock is a leaf: it is held only for the map operation itself.

use std::collections::HashMap;

use super::PageIndex;
use crate::frame::FrameId;
use crate::sync::RwLock;

const SHARDS: usize = 64;

/// A sharded hash map from page to frame.
pub struct ShardedIndex {
    shards: Box<[RwLock<HashMap<u64, FrameId>>]>,
}

impl Default for ShardedIndex {
    fn default() -> Self {
        ShardedIndex { shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect() }
    }
}

impl ShardedIndex {
    fn shard(&self, page: u64) -> &RwLock<HashMap<u64, FrameId>> {
        // Neighbouring pages go to different shards so a sequential scan spreads its lookups.
        let h = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }
}

fn read<T>(l: &RwLock<T>) -> impl std::ops::Deref<Target = T> + '_ {
    // A panic while holding a shard lock cannot leave the map half-updated (HashMap
    // operations are not interrupted midway by our code), so poisoning is ignored.
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl PageIndex for ShardedIndex {
    fn get(&self, page: u64) -> Option<FrameId> {
        read(self.shard(page)).get(&page).copied()
    }

    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        let mut s = write(self.shard(page));
        match s.get(&page) {
            Some(&existing) => Err(existing),
            None => {
                s.insert(page, frame);
                Ok(())
            }
        }
    }

    fn remove_if(&self, page: u64, frame: FrameId) -> bool {
        let mut s = write(self.shard(page));
        if s.get(&page) == Some(&frame) {
            s.remove(&page);
            true
        } else {
            false
        }
    }

    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            out.extend(read(s).iter().filter(|(&p, _)| p >= from).map(|(&p, &f)| (p, f)));
        }
        out
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).len()).sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
}
