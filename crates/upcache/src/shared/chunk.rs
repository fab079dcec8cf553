//! Which 2 MiB chunks of the frames' bytes are huge pages, in a cache on huge pages
//! (`SharedConfig::huge_pages`): a hint per chunk in the segment, never a lock.
//!
//! Processes touch chunks on small pages; the service collapses the chunks in use into huge
//! pages while the clock hand is still, when the cache is warm (`huge.rs`, the service's
//! `make_huge`), as khugepaged does. Making them at their first touch cost a fresh cache's
//! first fill dearly here: a huge page's first touch costs 3 to 5 times the faults of 512
//! small ones (the host backing the memory), and a sequential read into a fresh cache ran at
//! 0.32x with chunks made in its path, 0.58x with the service making them ahead of the hand
//! (bench/RESULTS.md, issue 34, eighth session). A collapse keeps every byte whoever writes
//! meanwhile (the kernel locks, unmaps and copies each small page; a page pinned for I/O makes
//! it give up), so no state here guards a byte.
//!
//! Every chunk, the last and short one too, also says whether its memory is allocated: a
//! claim allocates a frame's chunk before the frame is first used (`View::reserve`), and a
//! pop of an index node its node's chunk (`tree::Pool::pop`), so that a full tmpfs fails the
//! claim or the insert instead of raising SIGBUS in whoever first touches the memory, and a
//! new cache's service does not allocate all of its frames and index nodes (a leaf per frame
//! at worst) before the first program may use it ([`Lazy`]).

use crate::shm::huge::HUGE_PAGE;
use crate::shm::Segment;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Frames of 4 KiB in a chunk: one huge page.
#[cfg(test)]
pub(crate) const CHUNK_FRAMES: usize = HUGE_PAGE / super::frame::PAGE;

const UNTOUCHED: u32 = 0;
const HUGE: u32 = 2;
/// In use on small pages.
const SMALL: u32 = 3;

/// A chunk's state in the segment: all zeros is untouched, its memory not allocated.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Chunk {
    state: AtomicU32,
    /// Non-zero once its memory is allocated (`View::reserve`): set after the allocation, so
    /// whoever sees it (Acquire) may touch the chunk's bytes.
    allocated: AtomicU32,
}

impl Chunk {
    /// Whether its memory is allocated.
    #[inline]
    pub fn allocated(&self) -> bool {
        // Acquire: pairs with `set_allocated`'s Release, so the allocation is seen with the
        // mark (a process that misses the mark allocates again, which does nothing).
        self.allocated.load(Ordering::Acquire) != 0
    }

    /// Records its memory allocated, after the allocation.
    pub fn set_allocated(&self) {
        // Release: as in `allocated`.
        self.allocated.store(1, Ordering::Release);
    }

    /// Records its memory given back (`Segment::discard`): untouched and not allocated, as
    /// at the start.
    pub fn released(&self) {
        // Release (both): whoever sees the chunk unallocated allocates it again before a touch.
        self.state.store(UNTOUCHED, Ordering::Release);
        self.allocated.store(0, Ordering::Release);
    }

    /// Records that a process touches the chunk, on small pages, if nothing was recorded.
    pub fn touched(&self) {
        // Relaxed (all): a hint; the bytes are the kernel's to keep whole.
        let _ = self.state.compare_exchange(UNTOUCHED, SMALL, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Records that a pass collapsed the chunk.
    pub fn collapsed(&self) {
        self.state.store(HUGE, Ordering::Relaxed);
    }

    /// Whether it is a huge page (as far as we know: the kernel may split one it swaps out).
    pub fn huge(&self) -> bool {
        self.state.load(Ordering::Relaxed) == HUGE
    }

    /// Whether it is in use on small pages.
    pub fn unfinished(&self) -> bool {
        self.state.load(Ordering::Relaxed) == SMALL
    }
}

/// A region of the segment whose memory is allocated a chunk at a time before its first
/// use, with a mark per chunk in the segment.
#[derive(Clone, Copy)]
pub(crate) struct Lazy<'a> {
    pub seg: &'a Segment,
    /// The region's first byte's address (an address, not a pointer: the memory is only
    /// allocated through it, never touched) and length.
    pub base: usize,
    pub len: usize,
    /// A mark per chunk of the region (`Chunk::allocated`).
    pub marks: &'a [Chunk],
    /// Until when (`gc::now_ns`) this process allocates no more: the kernel refused.
    pub refused_until: &'a AtomicU64,
}

impl Lazy<'_> {
    /// Whether the chunk holding byte `at` of the region is allocated, or is now. False if the
    /// kernel refused (a full tmpfs), said once; the process then tries again no sooner than
    /// a second later.
    #[inline]
    pub fn ensure(&self, at: usize) -> bool {
        self.marks[at / HUGE_PAGE].allocated() || self.ensure_cold(at / HUGE_PAGE)
    }

    #[cold]
    fn ensure_cold(&self, c: usize) -> bool {
        // Relaxed: this process's hint.
        let until = self.refused_until.load(Ordering::Relaxed);
        let now = super::gc::now_ns();
        if until != 0 && now < until {
            return false;
        }
        let first = c * HUGE_PAGE;
        let len = (self.len - first).min(HUGE_PAGE);
        // A file system that allocates nothing ahead (none here: tmpfs and memfds do): the
        // memory is allocated as it is first touched, as before allocation was asked.
        let allocated =
            self.seg.allocate((self.base + first) as *const u8, len).or_else(|e| match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Ok(()),
                _ => Err(e),
            });
        match allocated {
            Ok(()) => {
                self.marks[c].set_allocated();
                true
            }
            Err(e) => {
                // Relaxed: as above.
                if self.refused_until.swap(now + 1_000_000_000, Ordering::Relaxed) == 0 {
                    log::warn!(
                        "upcache: the shared cache's memory could not be allocated ({e}: a full \
                         tmpfs, or its memory cgroup's limit): it goes on with what it has"
                    );
                }
                false
            }
        }
    }
}

/// Chunks of `bytes` bytes of a region.
pub(crate) fn chunks_of(bytes: usize) -> usize {
    bytes.div_ceil(HUGE_PAGE)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_touch_records_small_pages_until_a_collapse() {
        let c = Chunk::default();
        assert!(!c.unfinished() && !c.huge());
        c.touched();
        assert!(c.unfinished());
        c.collapsed();
        c.touched();
        assert!(c.huge() && !c.unfinished(), "a later touch does not undo a collapse");
    }
}
