//! Page frames: the arena of bytes, each frame's state word and key, and the wait table.
//!
//! A frame is bound to one (file, page) key at a time. The key is written only while the
//! frame is `UNOWNED` (so by one thread) and published by the Release store that hands the
//! frame to its page; see [`state`] for the protocol.
//!
//! # Memory
//! The arena holds `budget / page_size` frames (`arena.rs`). Nothing else grows with the
//! budget but the per-frame metadata below (a 32-byte `FrameMeta` and one touched bit a
//! frame, both on huge pages: `huge.rs`) and the page index of each cached file (radix: a
//! 64-slot node per 64 pages of a file with any of them cached, plus inner nodes, about 8.5
//! bytes a page when a file is densely cached; sharded: at most 16 bytes a page, at half
//! load). The hit path and the write path of a cached page allocate nothing; a miss allocates
//! only when it needs a new radix node or an index shard grows, and write-back builds one small
//! iovec list per run.

pub mod arena;
pub mod copy;
pub mod huge;
pub mod state;
pub mod wait;

pub use arena::{Arena, FrameId};
pub use state::FrameState;

use crate::error::Result;
use crate::sync::{AtomicU64, Ordering};
use wait::WaitTable;

/// Which page a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// File id from the catalog.
    pub file: u64,
    /// Page number within the file.
    pub page: u64,
}

/// Asks the CPU to start loading the cache line at `at`, to overlap a miss with another one.
/// A hint only: it never faults, whatever the address.
#[inline]
pub fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing into the program.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Per-frame metadata kept beside the arena. Aligned to 32 bytes so that no descriptor
/// straddles two cache lines: a hit reads the state word and the key together, and a 24-byte
/// stride would put a quarter of them across a line boundary (two misses instead of one).
#[derive(Debug)]
#[repr(C, align(32))]
pub struct FrameMeta {
    /// The packed state word.
    pub state: FrameState,
    file: AtomicU64,
    page: AtomicU64,
    /// When its bytes were last written by `copy_in` (`copy::now`): how a write tells
    /// whether the frame's lines may still be in the CPU's caches.
    written: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<FrameMeta>() == 32);

/// All frames of a cache.
pub struct FrameTable {
    arena: Arena,
    metas: huge::HugeArray<FrameMeta>,
    /// One bit per frame, set by lock-free hits (which touch neither pin nor state word):
    /// the reference bit of a hit that did not pin. Dense, so it stays in cache.
    touched: huge::HugeArray<AtomicU64>,
    /// Sleepers waiting for a frame to be unlocked.
    pub waits: WaitTable,
}

impl FrameTable {
    /// `count` unowned frames of `page_size` bytes.
    pub fn new(count: usize, page_size: usize) -> Result<Self> {
        let arena = Arena::new(count, page_size)?;
        let metas = huge::HugeArray::new(count, |_| FrameMeta {
            state: FrameState::new_unowned(),
            file: AtomicU64::new(u64::MAX),
            page: AtomicU64::new(u64::MAX),
            written: AtomicU64::new(0),
        })?;
        let touched = huge::HugeArray::new(count.div_ceil(64), |_| AtomicU64::new(0))?;
        Ok(FrameTable { arena, metas, touched, waits: WaitTable::default() })
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// Whether the table has no frames (never true for a running cache).
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// Bytes per frame.
    pub fn page_size(&self) -> usize {
        self.arena.page_size()
    }

    /// See [`Arena::contiguous_bytes`].
    pub fn contiguous_bytes(&self) -> usize {
        self.arena.contiguous_bytes()
    }

    /// Start and length of the arena, for registering it with io_uring.
    pub fn region(&self) -> (*mut u8, usize) {
        self.arena.region()
    }

    /// Makes every frame's memory resident (`Arena::prefault`).
    pub fn prefault(&self) -> std::io::Result<()> {
        self.arena.prefault()
    }

    /// The state word of frame `id`.
    pub fn state(&self, id: FrameId) -> &FrameState {
        &self.metas[id as usize].state
    }

    /// The key of frame `id`. Meaningful only while the caller keeps the frame owned (a pin
    /// or `LOCKED`) and read after acquiring that right.
    pub fn key(&self, id: FrameId) -> PageKey {
        let m = &self.metas[id as usize];
        // Relaxed: ordered by the Acquire of the pin/lock that follows the Release store in
        // `assign_locked`, which happens after these fields were written.
        PageKey { file: m.file.load(Ordering::Relaxed), page: m.page.load(Ordering::Relaxed) }
    }

    /// Sets the key of an unowned frame the caller owns.
    pub fn set_key(&self, id: FrameId, key: PageKey) {
        let m = &self.metas[id as usize];
        debug_assert!(m.state.load() & state::UNOWNED != 0);
        // Relaxed: published by the Release store in `assign_locked`.
        m.file.store(key.file, Ordering::Relaxed);
        m.page.store(key.page, Ordering::Relaxed);
    }

    /// Pins frame `id` if it still holds `key`; false if it was evicted or re-assigned since
    /// the caller found it in an index (the pin is then not held).
    pub fn pin_if_holds(&self, id: FrameId, key: PageKey) -> bool {
        let st = self.state(id);
        if st.try_pin().is_err() {
            return false;
        }
        if self.key(id) != key {
            st.unpin();
            return false;
        }
        true
    }

    /// Bytes of per-frame metadata: descriptors, the touched bitmap and the wait table.
    pub fn metadata_bytes(&self) -> usize {
        self.metas.len() * std::mem::size_of::<FrameMeta>()
            + self.touched.len() * std::mem::size_of::<AtomicU64>()
            + self.waits.memory_bytes()
    }

    /// Records a hit on `id` that did not pin it.
    pub fn touch(&self, id: FrameId) {
        let (word, bit) = (&self.touched[id as usize / 64], 1u64 << (id % 64));
        // Relaxed: a replacement hint. Test first so a hot frame's word stays shared in every
        // core's cache instead of bouncing on each hit.
        if word.load(Ordering::Relaxed) & bit == 0 {
            word.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Whether `id` was touched since the last call, clearing the mark.
    pub fn take_touched(&self, id: FrameId) -> bool {
        let (word, bit) = (&self.touched[id as usize / 64], 1u64 << (id % 64));
        // Relaxed: a hint, as in `touch`.
        word.load(Ordering::Relaxed) & bit != 0 && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// Gives an unused frame's memory back to the kernel (see [`Arena::discard`]).
    pub fn discard(&self, id: FrameId) {
        debug_assert_eq!(self.state(id).load(), state::UNOWNED);
        self.arena.discard(id);
    }

    /// Raw start of frame `id`'s bytes; see [`Arena::frame_ptr`] for the rules.
    pub fn ptr(&self, id: FrameId) -> *mut u8 {
        self.arena.frame_ptr(id)
    }

    /// Copies `src` into frame `id` at byte `at`, streaming past the CPU's caches when the
    /// frame was last written long ago (`copy::into_frame`): a frame written again soon is
    /// likely still cached, and a streaming store would evict it.
    ///
    /// # Safety
    /// The caller holds the frame `LOCKED` (no other thread touches its bytes) and
    /// `at + src.len()` is at most the page size.
    pub unsafe fn copy_in(&self, id: FrameId, at: usize, src: &[u8]) {
        let stamp = &self.metas[id as usize].written;
        let now = copy::now();
        // Relaxed: a hint, read and written under the frame's lock.
        let cold = now.wrapping_sub(stamp.load(Ordering::Relaxed)) > copy::COLD_AFTER;
        stamp.store(now, Ordering::Relaxed);
        // SAFETY: as the caller promises; the range is inside frame `id`.
        unsafe { copy::into_frame(src, self.ptr(id).add(at), cold) };
    }

    /// Starts fetching the first line of frame `id`'s bytes into the cache, for a caller about
    /// to pin it and hand it out: the fetch overlaps the pin's atomic update of the frame's
    /// state word (a locked instruction, after which no load may start early), so a hit on a
    /// page out of the CPU's caches waits for two memory accesses after the index instead of
    /// three (bench/RESULTS.md, issue 18). A hint only: wrong or useless costs nothing.
    #[inline]
    pub fn prefetch(&self, id: FrameId) {
        prefetch(self.ptr(id).cast_const());
    }

    /// Starts fetching frame `id`'s descriptor (state word and key), for a caller that will
    /// lock it after some other work: that work then overlaps the miss. A hint only.
    #[inline]
    pub fn prefetch_meta(&self, id: FrameId) {
        if let Some(m) = self.metas.get(id as usize) {
            prefetch(m as *const FrameMeta);
        }
    }

    /// Releases `LOCKED` on `id` (setting and clearing bits as in [`FrameState::unlock`]) and
    /// wakes anyone waiting on it.
    pub fn unlock(&self, id: FrameId, set: u64, clear: u64) {
        let old = self.state(id).unlock(set, clear);
        self.waits.wake_if_waiters(id, old);
    }

    /// Takes `LOCKED` and `WRITING` on a frame the caller has pinned, to change its bytes or
    /// drop its page: sleeps while another thread holds `LOCKED` or readers borrow the bytes
    /// (no new reader comes meanwhile). Release it with [`Self::unlock_content`].
    ///
    /// A thread that holds a reader of the frame must not call this: it would wait for itself.
    pub fn lock_content(&self, id: FrameId) {
        self.waits.lock_content(id, self.state(id));
    }

    /// Releases what [`Self::lock_content`] took, as [`Self::unlock`] does, waking readers
    /// that wait for `WRITING` to clear. Returns the word it replaced.
    pub fn unlock_content(&self, id: FrameId, set: u64, clear: u64) -> u64 {
        let old = self.state(id).unlock(set, clear | state::WRITING);
        self.waits.wake_if_waiters(id, old);
        old
    }

    /// [`Self::unlock_content`] and the caller's pin in one step (`FrameState::unlock_unpin`).
    pub fn unlock_content_unpin(&self, id: FrameId, set: u64, clear: u64) {
        let old = self.state(id).unlock_unpin(set, clear | state::WRITING);
        self.waits.wake_if_waiters(id, old);
    }

    /// Drops a reader taken by [`FrameState::try_pin_reader`] or `try_add_reader`, with its
    /// pin, waking a writer that waits for the last one.
    pub fn unpin_reader(&self, id: FrameId) {
        self.waits.unpin_reader(id, self.state(id));
    }

    /// Takes `LOCKED` on a frame the caller has pinned, sleeping while another thread holds
    /// it, whatever the readers: only to change bytes past the end of file, which no reader
    /// sees (a plain file's tail growing). The pin keeps the frame owned, so `try_lock` can
    /// only fail on `LOCKED`.
    pub fn lock_pinned(&self, id: FrameId) {
        loop {
            if self.state(id).try_lock() {
                return;
            }
            self.waits.wait_until(id, self.state(id), |w| w & state::LOCKED == 0);
        }
    }
}
