//! Free frames: where a miss gets a frame that holds no page.
//!
//! All frames start free; a miss takes one, and frames come back when a file is removed, a
//! racing load lost, or background reclaim evicts clean pages ahead of demand. Frames evicted
//! by a miss go straight from the evictor to its own load without passing through here.
//!
//! Two allocators, chosen by [`AllocKind`] (`Config::with_alloc`, `upcache bench --alloc`):
//! - [`global::GlobalFree`]: one bounded lock-free queue of every free frame.
//! - [`two_layer::TwoLayer`], StreamCache's two-layer memory management (seed 003 §4.3):
//!   per-core regions hold the pool; each file keeps a small cache of free frames that it
//!   refills from the region of the core it runs on in batches (stealing from other regions
//!   when that one runs dry), so most misses take a frame from a list that only that file's
//!   threads touch. Pressure levels start background reclaim and shrink the per-file caches.
//!
//! # Locking
//! A file's frame cache, then a region: both leaves, never held while waiting for anything
//! else, and a region is never held while taking a file's cache.

pub mod global;
pub mod two_layer;

use crate::choice::choice;
use crate::frame::FrameId;
pub use two_layer::FileFrames;

choice! {
    /// Which free-frame allocator a cache uses ([`crate::Config::with_alloc`]).
    pub enum AllocKind("allocator") {
        /// One global lock-free queue.
        Global = "global",
        /// Per-core regions + per-file caches (StreamCache). The default.
        #[default]
        TwoLayer = "twolayer",
    }
}

/// How short of free frames the cache is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pressure {
    /// Enough free frames.
    None,
    /// Under the low threshold: background reclaim should evict clean pages into the pool.
    Low,
    /// Under the urgent threshold: per-file caches give half their frames back as well.
    Urgent,
}

impl Pressure {
    /// The level with `free` frames free of `frames`: low under 1/32 ([`LOW_DIVISOR`]),
    /// urgent under 1/128 ([`URGENT_DIVISOR`]). Both engines' allocators (the shared one's
    /// pool too) measure it so.
    pub fn of(free: usize, frames: usize) -> Pressure {
        if free < frames / URGENT_DIVISOR {
            Pressure::Urgent
        } else if free < frames / LOW_DIVISOR {
            Pressure::Low
        } else {
            Pressure::None
        }
    }
}

/// The allocator of a cache.
pub enum FrameAllocator {
    /// See [`global::GlobalFree`].
    Global(Box<global::GlobalFree>),
    /// See [`two_layer::TwoLayer`].
    TwoLayer(two_layer::TwoLayer),
}

impl FrameAllocator {
    /// An allocator of `kind` holding frames `0..count`, all free.
    pub fn new(kind: AllocKind, count: usize) -> Self {
        match kind {
            AllocKind::Global => FrameAllocator::Global(Box::new(global::GlobalFree::full(count))),
            AllocKind::TwoLayer => FrameAllocator::TwoLayer(two_layer::TwoLayer::full(
                count,
                two_layer::Marks::for_frames(count),
            )),
        }
    }

    /// Takes a free frame for a page of the file whose frame cache is `fc`.
    pub fn alloc(&self, fc: &FileFrames) -> Option<FrameId> {
        match self {
            FrameAllocator::Global(g) => g.pop(),
            FrameAllocator::TwoLayer(t) => t.alloc(fc),
        }
    }

    /// Returns an unowned frame freed by a page of the file whose frame cache is `fc`.
    pub fn free(&self, fc: &FileFrames, id: FrameId) {
        match self {
            FrameAllocator::Global(g) => g.push(id),
            FrameAllocator::TwoLayer(t) => t.free(fc, id),
        }
    }

    /// Returns frames that belong to no file (background reclaim), in one batch.
    pub fn free_many(&self, ids: &[FrameId]) {
        match self {
            FrameAllocator::Global(g) => ids.iter().for_each(|&id| g.push(id)),
            FrameAllocator::TwoLayer(t) => t.free_many(ids),
        }
    }

    /// Gives every frame in `fc` back to the pool (its file is going away).
    pub fn drain(&self, fc: &FileFrames) {
        if let FrameAllocator::TwoLayer(t) = self {
            t.drain(fc);
        }
    }

    /// Halves one file's cache back into the pool (urgent pressure).
    pub fn shrink(&self, fc: &FileFrames) {
        if let FrameAllocator::TwoLayer(t) = self {
            t.shrink(fc);
        }
    }

    /// Free frames in the pool (not counting per-file caches).
    pub fn pooled(&self) -> usize {
        match self {
            FrameAllocator::Global(g) => g.len(),
            FrameAllocator::TwoLayer(t) => t.pooled(),
        }
    }

    /// The current pressure level, from the pooled count against thresholds of `frames`
    /// (per-file caches, at most `high` frames each, are not counted).
    pub fn pressure(&self, frames: usize) -> Pressure {
        Pressure::of(self.pooled(), frames)
    }
}

/// Low pressure below 1/32 of the frames free (3%), urgent below 1/128 (under 1%).
pub const LOW_DIVISOR: usize = 32;
/// See [`LOW_DIVISOR`].
pub const URGENT_DIVISOR: usize = 128;
