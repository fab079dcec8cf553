//! Zero-copy page access (ScalaCache's pin/unpin, seed 004 §5.1): borrow a cached page's
//! bytes in place instead of copying them.
//!
//! [`PageRef`] holds the page's frame pinned (never evicted while held) and counted among its
//! readers in the frame's state word, so whatever changes those bytes (a write, `pin_mut`, a
//! shrink's zeroing) or drops the page (a shrink, `remove_file`, `evict`) waits until it drops,
//! as it waits for an overlapping `read_at`. A hit takes no range lock: one CAS on the state
//! word, validated against the file's write sequence like a lock-free read. [`PageMut`] holds
//! the frame `LOCKED` (with no readers) and the range exclusive, and a write-sequence ticket
//! (lock-free readers of the file retry meanwhile); it marks the page dirty when it drops. Both
//! give only the bytes of the page that are inside the file, so nothing past the end of file
//! can be changed (the zero invariant).
//!
//! A guard must not be held by a thread that then reads or writes an overlapping range of the
//! same file, or shrinks, evicts or removes what it covers: it would wait for itself, as with
//! any lock (a writer of the page holds the range while it waits for the guard, so even a
//! read of it waits then). Nor should a thread that holds a guard wait for another range of
//! the same file while a writer may want both: the writer may hold that range and wait for
//! the guard, or queue ahead of the request (the range lock is fair) while it waits for the
//! guard (the classic hazard of taking two locks; take the pages you need first).

use std::ops::{Deref, DerefMut};

use crate::cache::page::{Commit, LockedPage, ReaderPage};
use crate::file::range_lock::RangeGuard;
use crate::file::write_seq::WriteTicket;

/// A pinned page, readable in place. See the module docs.
pub struct PageRef<'a> {
    pub(crate) page: ReaderPage<'a>,
    pub(crate) len: usize,
    pub(crate) offset: u64,
}

impl std::fmt::Debug for PageRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl std::fmt::Debug for PageMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageMut").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl PageRef<'_> {
    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Deref for PageRef<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the reader (a pin) keeps the frame on this page and VALID, and everything
        // that changes its bytes waits for the readers to go (`FrameTable::lock_content`);
        // `len` is at most the frame's size.
        unsafe { std::slice::from_raw_parts(self.page.ptr(), self.len) }
    }
}

/// A page held for writing in place; dirty when dropped. See the module docs.
pub struct PageMut<'a> {
    // Committed in `drop`, before the ticket and the range are released (field order).
    pub(crate) page: Option<LockedPage<'a>>,
    pub(crate) _ticket: WriteTicket<'a>,
    pub(crate) _range: RangeGuard<'a>,
    pub(crate) len: usize,
    pub(crate) offset: u64,
}

impl PageMut<'_> {
    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn ptr(&self) -> *mut u8 {
        self.page.as_ref().map_or(std::ptr::null_mut(), |p| p.ptr())
    }
}

impl Deref for PageMut<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame LOCKED with no reader (`lock_content`: no other writer,
        // no write-back, no PageRef) and the range exclusive (no copying reader); `len` is at
        // most the frame's size. `page` is only taken in drop.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }
}

impl DerefMut for PageMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }
}

impl Drop for PageMut<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.page.take() {
            p.commit(Commit::Dirty);
        }
    }
}
