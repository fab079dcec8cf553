//! One aligned mapping holding every page frame, made once when the cache starts.
//!
//! The arena is an anonymous private mapping: page-aligned (4 KiB, which satisfies O_DIRECT's
//! buffer alignment on Linux file systems, and every frame starts at a multiple of the page
//! size from it), zero-filled lazily by the kernel so resident memory grows only as frames are
//! used, and advised for transparent huge pages so that random hits over a large cache do
//! not miss the TLB on every access (the kernel's own page cache is read through its
//! huge-page direct map). It is never resized, so a frame's address is stable for the life
//! of the cache and can later be registered with io_uring.

use std::ptr::NonNull;

use crate::error::{Error, ErrorKind, Result};

/// Index of a frame in the arena.
pub type FrameId = u32;

/// The frame arena: `count` frames of `page_size` bytes.
pub struct Arena {
    base: NonNull<u8>,
    size: usize,
    page_size: usize,
    count: usize,
}

// SAFETY: the arena is plain memory; who may read or write which frame is governed by the
// frame state words (see `state.rs`), not by the arena itself.
unsafe impl Send for Arena {}
// SAFETY: as above; the arena hands out raw pointers only, never references.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps `count` zeroed frames of `page_size` bytes.
    pub fn new(count: usize, page_size: usize) -> Result<Self> {
        let size = count
            .checked_mul(page_size)
            .filter(|&s| s > 0)
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "bad frame arena size"))?;
        // SAFETY: an anonymous private mapping of `size` bytes at an address of the kernel's
        // choosing; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::with_source(
                ErrorKind::InvalidConfig,
                format!("cannot map a {size}-byte frame arena"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: advice on the mapping we just made; failure only loses the optimization.
        if unsafe { libc::madvise(ptr, size, libc::MADV_HUGEPAGE) } != 0 {
            log::debug!("MADV_HUGEPAGE refused: {}", std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr as *mut u8).expect("mmap returned null without MAP_FIXED");
        Ok(Arena { base, size, page_size, count })
    }

    /// Bytes per frame.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Start and length of the mapping.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.base.as_ptr(), self.size)
    }

    /// Gives frame `id`'s memory back to the kernel; it reads as zeros when next touched. The
    /// caller must own the frame (`UNOWNED` and taken out of use), so nobody touches its bytes
    /// meanwhile.
    pub fn discard(&self, id: FrameId) {
        let p = self.frame_ptr(id);
        // SAFETY: the range is exactly one frame inside our mapping; MADV_DONTNEED on private
        // anonymous memory only drops its contents, which the caller says nobody uses.
        let rc = unsafe { libc::madvise(p as *mut libc::c_void, self.page_size, libc::MADV_DONTNEED) };
        if rc != 0 {
            log::debug!("MADV_DONTNEED refused: {}", std::io::Error::last_os_error());
        }
    }

    /// Start of frame `id`. The caller must hold the right to the bytes it touches (a pin
    /// with `VALID` to read, `LOCKED` to write).
    pub fn frame_ptr(&self, id: FrameId) -> *mut u8 {
        assert!((id as usize) < self.count, "frame {id} out of range");
        // SAFETY: id < count, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(id as usize * self.page_size) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base and size describe exactly the mapping made in `new`, unmapped once; no
        // frame pointer outlives the arena (the frame table owns it and every user borrows
        // the table).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.size) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_aligned_disjoint_and_zeroed() {
        let a = Arena::new(8, 8192).unwrap();
        for i in 0..8 {
            let p = a.frame_ptr(i);
            assert_eq!(p as usize % 4096, 0);
            assert_eq!(p as usize - a.frame_ptr(0) as usize, i as usize * 8192);
            // SAFETY: the frame is inside the mapping and nobody else uses this arena.
            assert!(unsafe { std::slice::from_raw_parts(p, 8192) }.iter().all(|&b| b == 0));
        }
    }

    #[test]
    #[should_panic]
    fn out_of_range_frame_panics() {
        let a = Arena::new(2, 4096).unwrap();
        a.frame_ptr(2);
    }
}
