//! One aligned allocation holding every page frame, made once when the cache starts.
//!
//! Frames are aligned to the page size (at least 4 KiB), which satisfies O_DIRECT's buffer
//! alignment on every Linux file system. The arena is never resized, so a frame's address is
//! stable for the life of the cache and can later be registered with io_uring.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::error::{Error, ErrorKind, Result};

/// Index of a frame in the arena.
pub type FrameId = u32;

/// The frame arena: `count` frames of `page_size` bytes.
pub struct Arena {
    base: NonNull<u8>,
    layout: Layout,
    page_size: usize,
    count: usize,
}

// SAFETY: the arena is plain memory; who may read or write which frame is governed by the
// frame state words (see `state.rs`), not by the arena itself.
unsafe impl Send for Arena {}
// SAFETY: as above; the arena hands out raw pointers only, never references.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocates `count` zeroed frames of `page_size` bytes, aligned to `page_size`.
    pub fn new(count: usize, page_size: usize) -> Result<Self> {
        let size = count
            .checked_mul(page_size)
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "frame arena size overflows"))?;
        let layout = Layout::from_size_align(size, page_size)
            .map_err(|_| Error::new(ErrorKind::InvalidConfig, "bad frame arena layout"))?;
        if size == 0 {
            return Err(Error::new(ErrorKind::InvalidConfig, "frame arena is empty"));
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(ptr).ok_or_else(|| {
            Error::new(ErrorKind::InvalidConfig, format!("cannot allocate a {size}-byte frame arena"))
        })?;
        Ok(Arena { base, layout, page_size, count })
    }

    /// Bytes per frame.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Start of frame `id`. The caller must hold the right to the bytes it touches (a pin
    /// with `VALID` to read, `LOCKED` to write).
    pub fn frame_ptr(&self, id: FrameId) -> *mut u8 {
        assert!((id as usize) < self.count, "frame {id} out of range");
        // SAFETY: id < count, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add(id as usize * self.page_size) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base was returned by alloc_zeroed with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_page_aligned_and_disjoint() {
        let a = Arena::new(8, 8192).unwrap();
        for i in 0..8 {
            let p = a.frame_ptr(i) as usize;
            assert_eq!(p % 8192, 0);
            assert_eq!(p - a.frame_ptr(0) as usize, i as usize * 8192);
        }
    }

    #[test]
    #[should_panic]
    fn out_of_range_frame_panics() {
        let a = Arena::new(2, 4096).unwrap();
        a.frame_ptr(2);
    }
}
