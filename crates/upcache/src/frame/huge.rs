//! A fixed-length array placed on transparent huge pages where the kernel allows.
//!
//! Frame metadata is touched at random on every hit; on 4 KiB pages a cache of a million frames
//! spreads it over thousands of pages and most lookups miss the TLB. The array is allocated
//! 2 MiB-aligned and untouched, advised `MADV_HUGEPAGE`, and only then initialized, so its
//! first-touch faults map huge pages.

use std::alloc::{self, Layout};
use std::ops::Deref;
use std::ptr::NonNull;

use crate::error::{Error, ErrorKind, Result};

/// Bytes per transparent huge page (x86-64, arm64 with 4 KiB base pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A boxed slice on huge pages.
pub struct HugeArray<T> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
}

// SAFETY: HugeArray owns its elements like a Box<[T]>.
unsafe impl<T: Send> Send for HugeArray<T> {}
// SAFETY: shared access hands out &[T] only, as Box<[T]> does.
unsafe impl<T: Sync> Sync for HugeArray<T> {}

impl<T> HugeArray<T> {
    /// `len` elements, element `i` being `init(i)`.
    pub fn new(len: usize, init: impl Fn(usize) -> T) -> Result<Self> {
        let size = std::mem::size_of::<T>().checked_mul(len).filter(|&s| s > 0);
        let layout = size
            .and_then(|s| Layout::from_size_align(s, HUGE_PAGE.max(std::mem::align_of::<T>())).ok())
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "bad frame table size"))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) } as *mut T;
        let ptr = NonNull::new(raw)
            .ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "cannot allocate the frame table"))?;
        // SAFETY: advice on memory we own, rounded down to whole huge pages inside it; a
        // refusal only loses the optimization.
        unsafe {
            libc::madvise(
                raw as *mut libc::c_void,
                layout.size() / HUGE_PAGE * HUGE_PAGE,
                libc::MADV_HUGEPAGE,
            )
        };
        for i in 0..len {
            // SAFETY: i < len, inside the allocation, and each slot is written once.
            unsafe { raw.add(i).write(init(i)) };
        }
        Ok(HugeArray { ptr, len, layout })
    }
}

impl<T> Deref for HugeArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr points to len initialized elements that live as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for HugeArray<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialized and dropped once; the memory was allocated with
        // exactly this layout.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len));
            alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout);
        }
    }
}
