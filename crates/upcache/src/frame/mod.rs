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

/// Per-frame metadata kept beside the arena. Aligned to 32 bytes so that no descriptor
/// straddles two cache lines: a hit reads the state word and the key together, and a 24-byte
/// stride would put a quarter of them across a line boundary (two misses instead of one).
#[derive(Debug)]
#[repr(align(32))]
pub struct FrameMeta {
    /// The packed state word.
    pub state: FrameState,
    file: AtomicU64,
    page: AtomicU64,
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

    /// Releases `LOCKED` on `id` (setting and clearing bits as in [`FrameState::unlock`]) and
    /// wakes anyone waiting on it.
    pub fn unlock(&self, id: FrameId, set: u64, clear: u64) {
        let old = self.state(id).unlock(set, clear);
        self.waits.wake_if_waiters(id, old);
    }

    /// Takes `LOCKED` on a frame the caller has pinned, sleeping while another thread holds
    /// it. The pin keeps the frame owned, so `try_lock` can only fail on `LOCKED`.
    pub fn lock_pinned(&self, id: FrameId) {
        loop {
            if self.state(id).try_lock() {
                return;
            }
            self.waits.wait_until(id, self.state(id), |w| w & state::LOCKED == 0);
        }
    }
}
