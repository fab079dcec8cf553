//! Free frames.
//!
//! All frames start here; a miss takes one, and frames come back when a file is removed or a
//! racing load lost. Evicted frames go straight from the evictor to its miss without passing
//! through the list. The list is a bounded lock-free queue sized for every frame at start,
//! so taking or returning a frame never allocates.
//!
//! StreamCache's two-layer allocator (seed 003 §4.3: per-core regions, per-file caches with
//! low/high marks) replaces this single queue.

use crossbeam_queue::ArrayQueue;

use crate::frame::FrameId;

/// The global free-frame list.
pub struct FreeFrames {
    queue: ArrayQueue<FrameId>,
}

impl FreeFrames {
    /// A list holding frames `0..count`.
    pub fn full(count: usize) -> Self {
        let queue = ArrayQueue::new(count);
        for id in 0..count as FrameId {
            // Cannot fail: capacity is count.
            let _ = queue.push(id);
        }
        FreeFrames { queue }
    }

    /// Takes a free frame, if any.
    pub fn pop(&self) -> Option<FrameId> {
        self.queue.pop()
    }

    /// Returns an unowned frame.
    pub fn push(&self, id: FrameId) {
        // Every frame is in at most one place (the list or an owner), so the list never
        // overflows its capacity of all frames.
        let pushed = self.queue.push(id);
        debug_assert!(pushed.is_ok(), "free list overflow: frame {id} freed twice");
    }
}
