//! ccXArray (ScaleCache, seed 000 §3.2): a per-file 64-way radix tree (128-way leaves) whose
//! lookups are lock-free and write nothing shared, and whose inserts and deletes are CAS on
//! slots.
//!
//! See [`tree`] for the invariants (the paper's Properties 1-3) and how each operation keeps
//! them. This module maps page-cache entries onto the tree's leaf words.
//!
//! # Leaf entry word (32 bits, so a leaf line holds 16 pages' entries)
//! - bits 0-30: the frame id plus one, so that no entry is the empty word 0. Frame ids are
//!   below `2^31 - 1`: a cache has at most `u32::MAX / 2` frames (`Config::validate`).
//! - `READY` (bit 31): the frame is `VALID` and has been since the entry was made ready, so
//!   a lock-free reader may copy from it ([`PageIndex::read_optimistic`]). Set once by the
//!   loader after the fill, with Release; the entry is removed before the frame is reused.

pub(crate) mod node;
pub(crate) mod reclaim;
pub mod tree;

use super::PageIndex;
use crate::frame::FrameId;
use crate::sync::{fence, Ordering};
use tree::Tree;

const READY: u32 = 1 << 31;

fn encode(frame: FrameId) -> u32 {
    debug_assert!(frame < READY - 1, "frame {frame} does not fit an entry word");
    frame + 1
}

fn frame_of(entry: u32) -> FrameId {
    (entry & !READY) - 1
}

/// The lock-free ccXArray page index.
#[derive(Default)]
pub struct RadixIndex {
    tree: Tree,
}

impl RadixIndex {
    /// The tree itself (for benchmarks and statistics).
    pub fn tree(&self) -> &Tree {
        &self.tree
    }
}

impl PageIndex for RadixIndex {
    fn get(&self, page: u64) -> Option<FrameId> {
        match self.tree.get(page) {
            0 => None,
            e => Some(frame_of(e)),
        }
    }

    fn prefetch(&self, page: u64) {
        self.tree.prefetch_slot(page)
    }

    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        self.tree.insert_if_absent(page, encode(frame)).map_err(frame_of)
    }

    fn mark_ready(&self, page: u64, frame: FrameId) {
        // Fails only if the entry is gone (a racing truncation), which is fine: not ready.
        self.tree.replace(page, encode(frame), encode(frame) | READY);
    }

    fn remove_if(&self, page: u64, frame: FrameId) -> bool {
        let removed = self.tree.remove_if(page, |e| frame_of(e) == frame);
        if removed {
            // The seqlock writer's fence: the frame's next contents are written after this,
            // and a lock-free reader that read any of them re-reads the slot after an Acquire
            // fence, so it sees the removal and discards its copy.
            fence(Ordering::Release);
        }
        removed
    }

    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)> {
        let mut out = Vec::new();
        self.tree.for_each_from(from, |page, e| out.push((page, frame_of(e))));
        out
    }

    fn len(&self) -> usize {
        self.tree.len()
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.tree.node_counts().0 * tree::NODE_BYTES
    }

    fn read_optimistic(&self, page: u64, read: &mut dyn FnMut(FrameId)) -> bool {
        let g = self.tree.pin();
        let Some(slot) = self.tree.find(page, &g) else { return false };
        let e = slot.load();
        if e & READY == 0 {
            return false;
        }
        read(frame_of(e));
        // The seqlock reader's fence: the copy above happens before this re-check.
        fence(Ordering::Acquire);
        slot.load() == e
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
