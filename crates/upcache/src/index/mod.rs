//! The page index: for one file, which frame holds page `p`.
//!
//! # Lookup protocol
//! The index maps page numbers to frame ids and nothing more; it is a hint that the frame's
//! own state word confirms. A reader does `get`, pins the frame, then re-reads the frame's key:
//! if the frame was evicted and re-assigned between the two steps, the key differs and the
//! reader unpins and looks up again. So an implementation may return a stale frame id, but
//! must never lose an entry it was asked to keep.
//!
//! An entry is added only by the thread that owns a freshly assigned frame
//! ([`PageIndex::insert_if_absent`]) and removed only by a thread that has claimed the frame
//! or holds it `LOCKED` ([`PageIndex::remove_if`]), so an entry never points at a frame that
//! another page has since been given *and published under the same page number*.
//!
//! For lock-free reads (`PageIndex::read_optimistic`) the index is the seqlock: an entry is
//! `READY` only while its frame is `VALID` for that page. Kinds without it (sharded, setassoc)
//! send every read down the pinned path.
//!
//! Implementations ([`IndexKind`]): [`radix::RadixIndex`] (ccXArray, seed 000 §3.2, the
//! default), [`locked::LockedIndex`] (the same tree, updates under a per-file lock: the
//! kernel's design), [`sharded::ShardedIndex`] (hash shards under reader-writer locks) and
//! [`setassoc::SetAssocIndex`] (SAFS's set-associative cache, seed 002 §4: a view of page
//! sets shared by every file, which also choose the frames and evict). The kind is chosen
//! per cache (`Config::with_index`, `upcache bench --index`). The per-file kinds are
//! property-tested against a `BTreeMap` through the trait (`index/tests.rs`).

pub(crate) mod hot;
pub mod locked;
pub mod radix;
pub mod setassoc;
pub mod sharded;

pub use locked::LockedIndex;
pub use radix::RadixIndex;
pub use sharded::ShardedIndex;

use crate::choice::choice;
use crate::frame::FrameId;

choice! {
    /// Which page index files use ([`crate::Config::with_index`]).
    pub enum IndexKind("index") {
        /// ccXArray: lock-free radix tree (seed 000 §3.2). The default.
        #[default]
        Radix = "radix",
        /// The same tree with updates under one lock per file (the kernel's XArray).
        Locked = "locked",
        /// Hash shards under reader-writer locks (the walking skeleton's index).
        Sharded = "sharded",
        /// SAFS's set-associative cache (seed 002 §4): one table of small page sets shared by
        /// all files, each set its own index and replacement policy.
        SetAssoc = "setassoc",
    }
}

impl IndexKind {
    /// The kinds that are a per-file map ([`IndexKind::build`] works for them).
    pub const PER_FILE: [IndexKind; 3] = [IndexKind::Radix, IndexKind::Locked, IndexKind::Sharded];

    /// A new, empty index of a per-file kind; None for [`IndexKind::SetAssoc`], whose files
    /// share one [`setassoc::SetTable`] (see [`setassoc::SetAssocIndex::new`]).
    pub fn build(self) -> Option<Box<dyn PageIndex>> {
        match self {
            IndexKind::Radix => Some(Box::<RadixIndex>::default()),
            IndexKind::Locked => Some(Box::<LockedIndex>::default()),
            IndexKind::Sharded => Some(Box::<ShardedIndex>::default()),
            IndexKind::SetAssoc => None,
        }
    }
}

/// A per-file map from page number to frame.
pub trait PageIndex: Send + Sync {
    /// The frame recorded for `page`, if any. A lookup for a hit: kinds with their own
    /// replacement state (the page sets) count it as a use.
    fn get(&self, page: u64) -> Option<FrameId>;

    /// Starts fetching the line that [`PageIndex::get`] will read last for `page` (a radix
    /// tree's leaf slot), so that its cache miss overlaps the caller's work in between. A
    /// hint only: no use of the page, and free to do nothing (the default).
    fn prefetch(&self, _page: u64) {}

    /// Like [`PageIndex::get`], but not a use of the page (write-back probing neighbours).
    fn peek(&self, page: u64) -> Option<FrameId> {
        self.get(page)
    }

    /// Records `frame` for `page` unless an entry exists; returns the existing frame then.
    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId>;

    /// The frame of `page`'s entry was filled and is `VALID`: lock-free readers may use it.
    /// Default: nothing (the kind has no [`PageIndex::read_optimistic`]).
    fn mark_ready(&self, _page: u64, _frame: FrameId) {}

    /// Removes the entry for `page` if it still names `frame`; returns whether it did.
    fn remove_if(&self, page: u64, frame: FrameId) -> bool;

    /// Every entry with `page >= from`, in no particular order.
    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)>;

    /// Number of entries.
    fn len(&self) -> usize;

    /// Heap and inline bytes the index uses now (for the memory-overhead report).
    fn memory_bytes(&self) -> usize;

    /// A seqlock read: if `page` has a ready entry, calls `read(frame)` and returns whether
    /// the entry was the same after the call, i.e. the frame kept this page's contents all
    /// through it (frames are reused only after their entry is removed). `read` may see a
    /// frame being reused and must not act on what it read unless this returns true.
    /// Default: false without calling `read` (the caller takes the pinned path).
    fn read_optimistic(&self, _page: u64, _read: &mut dyn FnMut(FrameId)) -> bool {
        false
    }

    /// Whether the index is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
