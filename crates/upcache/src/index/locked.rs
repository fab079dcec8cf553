//! The baseline: the same radix tree with every update under one lock per file, as the
//! kernel's XArray does (`xa_lock` for stores, RCU for lookups). Lookups stay lock-free, as
//! they are in the kernel, so a comparison with [`super::RadixIndex`] measures exactly what
//! ccXArray changes: concurrent inserts and deletes.
//!
//! # Locking
//! The update lock is a leaf: held only for one tree operation.

use super::{PageIndex, RadixIndex};
use crate::frame::FrameId;
use crate::sync::{lock, Mutex};

/// The radix tree with serialized updates.
#[derive(Default)]
pub struct LockedIndex {
    tree: RadixIndex,
    update: Mutex<()>,
}

impl PageIndex for LockedIndex {
    fn get(&self, page: u64) -> Option<FrameId> {
        self.tree.get(page)
    }

    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        let _g = lock(&self.update);
        self.tree.insert_if_absent(page, frame)
    }

    fn mark_ready(&self, page: u64, frame: FrameId) {
        let _g = lock(&self.update);
        self.tree.mark_ready(page, frame)
    }

    fn remove_if(&self, page: u64, frame: FrameId) -> bool {
        let _g = lock(&self.update);
        self.tree.remove_if(page, frame)
    }

    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)> {
        self.tree.entries_from(from)
    }

    fn len(&self) -> usize {
        self.tree.len()
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Mutex<()>>() + self.tree.memory_bytes()
    }

    fn read_optimistic(&self, page: u64, read: &mut dyn FnMut(FrameId)) -> bool {
        self.tree.read_optimistic(page, read)
    }
}
