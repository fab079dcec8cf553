//! One global free list: a bounded lock-free queue sized for every frame at start, so taking
//! or returning a frame never allocates. Every thread of every file pops from the same queue
//! (the baseline for the two-layer allocator).

use crossbeam_queue::ArrayQueue;

use crate::frame::FrameId;

/// The global free-frame list.
pub struct GlobalFree {
    queue: ArrayQueue<FrameId>,
}

impl GlobalFree {
    /// A list holding frames `0..count`.
    pub fn full(count: usize) -> Self {
        let queue = ArrayQueue::new(count);
        for id in 0..count as FrameId {
            // Cannot fail: capacity is count.
            let _ = queue.push(id);
        }
        GlobalFree { queue }
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

    /// Frames in the list.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
