//! Page-aligned memory of a process's own that an io_uring read lands in before its pages are
//! copied into frames, and that write-back's io_uring writes take their pages from. At exit
//! the kernel waits for only some of a process's io_uring requests (those on io_uring files),
//! so an `O_DIRECT` request of a process killed while it waited may complete after it is
//! gone; by then a repairer may have given its frames to other pages. Through a bounce, such
//! a late read lands in the dead process's memory, and a late write writes the bytes it was
//! given, never what the segment holds then. (A blocking `preadv`/`pwritev` ends before its
//! thread dies.)

use super::page_size::PageSize;

/// Page-aligned memory of this process's own for a ring's read or write of `pages` pages
/// (aligned for `O_DIRECT`).
pub(crate) struct Bounce {
    at: std::ptr::NonNull<u8>,
    pub(crate) pages: usize,
    page: usize,
}

// SAFETY: the memory is owned by the value alone (allocated in `new`, freed in `drop`); the
// kernel writes into it only while its load is in flight, and the load's owner never reads it
// until the reap: nothing ties it to a thread.
unsafe impl Send for Bounce {}

impl Bounce {
    fn layout(pages: usize, page: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(pages * page, page).expect("a run's size fits")
    }

    /// Room for `pages` pages of `size`.
    pub(crate) fn new(pages: usize, size: PageSize) -> Bounce {
        assert!(pages > 0, "a bounce of no page");
        let page = size.bytes();
        let layout = Self::layout(pages, page);
        // SAFETY: the layout's size is at least one page, not zero.
        let at = unsafe { std::alloc::alloc(layout) };
        let at = std::ptr::NonNull::new(at).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Bounce { at, pages, page }
    }

    /// Its pages, for a read into them (no read may be in flight into it meanwhile).
    pub(crate) fn pages_mut(&mut self) -> Vec<&mut [u8]> {
        // SAFETY: the whole allocation, which `&mut self` makes ours alone; no read is in
        // flight into it (the caller's promise).
        let all = unsafe { std::slice::from_raw_parts_mut(self.at.as_ptr(), self.pages * self.page) };
        all.chunks_mut(self.page).collect()
    }

    /// The size of its pages.
    pub(crate) fn page_len(&self) -> usize {
        self.page
    }

    /// Page `i`'s bytes, once no read is in flight into it.
    pub(crate) fn page_bytes(&self, i: usize) -> &[u8] {
        assert!(i < self.pages, "page {i} of a bounce of {}", self.pages);
        // SAFETY: within the allocation; no read is in flight into it (the caller's promise),
        // so nothing writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.page(i), self.page) }
    }

    /// Page `i`'s address.
    pub(crate) fn page(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.pages);
        // SAFETY: within the allocation (`i < pages`).
        unsafe { self.at.as_ptr().add(i * self.page) }
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; no request is in flight on it (its owner
        // drops it only once the request is reaped: a queue's load, `Backing::load`'s batch,
        // write-back's batch).
        unsafe { std::alloc::dealloc(self.at.as_ptr(), Self::layout(self.pages, self.page)) }
    }
}
