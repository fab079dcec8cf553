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
use crate::shm::Segment;

/// Bytes per transparent huge page (x86-64, arm64 with 4 KiB base pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A boxed slice on huge pages.
pub struct HugeArray<T> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
    /// The segment whose region holds the elements; None when we allocated them.
    shared: Option<std::sync::Arc<Segment>>,
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
        Ok(HugeArray { ptr, len, layout, shared: None })
    }

    /// `len` elements in region `kind` of `seg`: written as `init(i)` when `init` is given
    /// (the segment's creator), else taken as they are (a process attaching to it).
    ///
    /// # Safety
    /// Without `init`, the region must hold `len` valid `T`s, written by the creator; and
    /// every process must use the region only as this array. `T` must be valid to share
    /// between processes (atomics and plain data, no pointers).
    pub unsafe fn in_region(
        seg: std::sync::Arc<Segment>,
        kind: u32,
        len: usize,
        init: Option<&dyn Fn(usize) -> T>,
    ) -> Result<Self> {
        let (start, bytes) = seg
            .region(kind)
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the segment lacks a region"))?;
        let size = std::mem::size_of::<T>().checked_mul(len).filter(|&s| s > 0 && s <= bytes);
        let layout = size
            .and_then(|s| Layout::from_size_align(s, std::mem::align_of::<T>()).ok())
            .filter(|_| (start.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()))
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the array does not fit its region"))?;
        let raw = start.as_ptr().cast::<T>();
        // SAFETY: advice on part of the segment's mapping; a refusal only loses the optimization.
        unsafe { libc::madvise(raw.cast(), layout.size() / HUGE_PAGE * HUGE_PAGE, libc::MADV_HUGEPAGE) };
        if let Some(init) = init {
            for i in 0..len {
                // SAFETY: i < len, inside the region (checked above); each slot written once,
                // before any other process can see the segment (the caller creates it).
                unsafe { raw.add(i).write(init(i)) };
            }
        }
        let ptr = NonNull::new(raw).expect("a region is never at address 0");
        Ok(HugeArray { ptr, len, layout, shared: Some(seg) })
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
        if self.shared.is_some() {
            return; // other processes may still use the elements; the segment owns the memory
        }
        // SAFETY: the elements are initialized and dropped once; the memory was allocated with
        // exactly this layout.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len));
            alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout);
        }
    }
}
