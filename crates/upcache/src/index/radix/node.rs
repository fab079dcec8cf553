//! A ccXArray node: 64 child pointers or 128 entry words, and one state word that packs the
//! paper's `count`, `del` and the terminal `DEAD` mark into a single atomic, so "empty and not
//! in use" and "mark deleted" are one CAS instead of the paper's three fields and its `ldflag`
//! handshake.
//!
//! # The state word
//! - bits 0-31, `count`: occupied slots (a leaf) or live children (an inner node), plus one
//!   per thread that holds a *reservation* on the node (it is descending through it or about
//!   to fill one of its slots).
//! - `DEL` (bit 62): logically deleted. Only set by a CAS from exactly `0` (count 0, live),
//!   so a deleted node has no entries, no live children and no reservations.
//! - `DEAD` (bit 63): unlinked or about to be; set only by a CAS from exactly `DEL`, never
//!   cleared. The thread that then removes the node from its parent's slot retires it.

use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Page bits per inner level: 64-way nodes as in the kernel's XArray; 4-way under loom so that
/// models reach expansion and multi-level deletion with a handful of pages.
#[cfg(not(loom))]
pub(super) const BITS: u32 = 6;
#[cfg(loom)]
pub(super) const BITS: u32 = 2;
pub(super) const FANOUT: usize = 1 << BITS;
pub(super) const MASK: u64 = FANOUT as u64 - 1;

/// Page bits of a leaf. Its slots are 32-bit entry words, twice as many as an inner node's
/// pointers in the same bytes, so a leaf spans twice the pages: a lookup in a large file
/// misses the cache on its leaf's line, and denser leaves keep more of the index in the
/// cache (bench/RESULTS.md, issue 18). Under loom a leaf spans as many pages as an inner node,
/// the geometry the models were written for; the protocol does not depend on it.
#[cfg(not(loom))]
pub(super) const LEAF_BITS: u32 = BITS + 1;
#[cfg(loom)]
pub(super) const LEAF_BITS: u32 = BITS;
pub(super) const LEAF_FANOUT: usize = 1 << LEAF_BITS;
const LEAF_MASK: u64 = LEAF_FANOUT as u64 - 1;

/// Page bits spanned by a node of `shift`: the bits below its slots plus its slots' own. A
/// parent's shift is its child's span.
pub(super) const fn span(shift: u32) -> u32 {
    shift + if shift == 0 { LEAF_BITS } else { BITS }
}

/// The shift of the children of a node of `shift` (an inner node: `shift > 0`).
pub(super) const fn child_shift(shift: u32) -> u32 {
    if shift == LEAF_BITS {
        0
    } else {
        shift - BITS
    }
}

pub(super) const DEL: u64 = 1 << 62;
pub(super) const DEAD: u64 = 1 << 63;
const COUNT_MASK: u64 = u32::MAX as u64;

/// What trying to reserve a child found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reserve {
    /// It was live; the caller now holds a reservation on it.
    Live,
    /// It was logically deleted and the caller brought it back with a reservation; the
    /// caller must credit the parent with a live child again.
    Revived,
    /// It is being unlinked; the caller must read the parent's slot again.
    Dead,
}

/// One node: an inner node's slots are child pointers, a leaf's (`shift == 0`) entry words.
pub(super) struct Node {
    pub(super) state: AtomicU64,
    /// The parent, or null for the root. Set before the node is published, except for a root
    /// that an expansion pushes down: that one gets its parent right after the expansion's
    /// CAS, and until then is treated as a root (never deleted). The expander holds a
    /// reservation on it across that window, so it cannot empty while it has no parent and be
    /// left live and empty for good.
    pub(super) parent: AtomicPtr<Node>,
    /// Page bits below this node's slot index: 0 for a leaf. Fixed at creation, so it also
    /// says which of `slots`' two forms the node uses.
    pub(super) shift: u32,
    slots: Slots,
}

/// A node's slots, in one of two forms chosen by its shift at creation and never changed.
#[cfg(not(loom))]
#[repr(C)]
union Slots {
    children: ManuallyDrop<[AtomicPtr<Node>; FANOUT]>,
    entries: ManuallyDrop<[AtomicU32; LEAF_FANOUT]>,
}

#[cfg(not(loom))]
use std::mem::ManuallyDrop;

#[cfg(not(loom))]
const _: () = assert!(
    std::mem::size_of::<[AtomicPtr<Node>; FANOUT]>() == std::mem::size_of::<[AtomicU32; LEAF_FANOUT]>(),
    "a leaf's entry words fill exactly the bytes of an inner node's pointers"
);

#[cfg(not(loom))]
impl Slots {
    fn new(leaf: bool) -> Slots {
        if leaf {
            Slots { entries: ManuallyDrop::new(std::array::from_fn(|_| AtomicU32::new(0))) }
        } else {
            Slots {
                children: ManuallyDrop::new(std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut()))),
            }
        }
    }

    /// # Safety
    /// The slots were made as children (`Slots::new(false)`).
    unsafe fn children(&self) -> &[AtomicPtr<Node>; FANOUT] {
        // SAFETY: per the contract, the field read is the one that was initialized.
        unsafe { &self.children }
    }

    /// # Safety
    /// The slots were made as entries (`Slots::new(true)`).
    unsafe fn entries(&self) -> &[AtomicU32; LEAF_FANOUT] {
        // SAFETY: per the contract, the field read is the one that was initialized.
        unsafe { &self.entries }
    }
}

/// Loom's atomics are model objects, not plain memory, so under loom both forms are kept.
#[cfg(loom)]
struct Slots {
    children: [AtomicPtr<Node>; FANOUT],
    entries: [AtomicU32; LEAF_FANOUT],
}

#[cfg(loom)]
impl Slots {
    fn new(_leaf: bool) -> Slots {
        Slots {
            children: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            entries: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// # Safety
    /// None needed under loom; unsafe to match the union's signature.
    unsafe fn children(&self) -> &[AtomicPtr<Node>; FANOUT] {
        &self.children
    }

    /// # Safety
    /// As `children`.
    unsafe fn entries(&self) -> &[AtomicU32; LEAF_FANOUT] {
        &self.entries
    }
}

impl Node {
    /// A new unpublished node, made in a retired one if one is kept (`spare`).
    pub(super) fn new(shift: u32, parent: *mut Node, count: u64) -> Box<Node> {
        let fresh = || Node {
            state: AtomicU64::new(count),
            parent: AtomicPtr::new(parent),
            shift,
            slots: Slots::new(shift == 0),
        };
        match spare::take() {
            Some(mut n) => {
                *n = fresh();
                n
            }
            None => Box::new(fresh()),
        }
    }

    pub(super) fn is_leaf(&self) -> bool {
        self.shift == 0
    }

    /// An inner node's child pointers.
    pub(super) fn children(&self) -> &[AtomicPtr<Node>; FANOUT] {
        assert!(!self.is_leaf(), "a leaf has no children");
        // SAFETY: an inner node (`shift > 0`, fixed at creation) made its slots as children.
        unsafe { self.slots.children() }
    }

    /// A leaf's entry words.
    pub(super) fn entries(&self) -> &[AtomicU32; LEAF_FANOUT] {
        assert!(self.is_leaf(), "an inner node has no entries");
        // SAFETY: a leaf (`shift == 0`, fixed at creation) made its slots as entries.
        unsafe { self.slots.entries() }
    }

    /// The child slot `page` goes through in this inner node.
    pub(super) fn slot(&self, page: u64) -> &AtomicPtr<Node> {
        assert!(!self.is_leaf(), "a leaf has no children");
        // SAFETY: the node's own shift, not 0 (asserted).
        unsafe { self.slot_at(page, self.shift) }
    }

    /// As `slot`, with the node's shift given by the caller (who knows it from the parent's):
    /// the lookup's hot path, which reads no line of the node but the slot's.
    ///
    /// # Safety
    /// `shift` is this node's shift, and is not 0.
    pub(super) unsafe fn slot_at(&self, page: u64, shift: u32) -> &AtomicPtr<Node> {
        debug_assert!(shift == self.shift && shift > 0);
        // SAFETY: by the contract the node is inner, so its slots were made as children.
        let children = unsafe { self.slots.children() };
        &children[((page >> shift) & MASK) as usize]
    }

    /// This leaf's entry word for `page`.
    pub(super) fn entry(&self, page: u64) -> &AtomicU32 {
        assert!(self.is_leaf(), "an inner node has no entries");
        // SAFETY: a leaf (asserted).
        unsafe { self.entry_known_leaf(page) }
    }

    /// As `entry`, for a caller that knows from the walk that this node is a leaf.
    ///
    /// # Safety
    /// The node is a leaf.
    pub(super) unsafe fn entry_known_leaf(&self, page: u64) -> &AtomicU32 {
        debug_assert!(self.is_leaf());
        // SAFETY: by the contract the node is a leaf, so its slots were made as entries.
        let entries = unsafe { self.slots.entries() };
        &entries[(page & LEAF_MASK) as usize]
    }

    /// Whether this node's subtree spans `page` (as a root: its range starts at page 0).
    pub(super) fn covers(&self, page: u64) -> bool {
        let span = span(self.shift);
        span >= 64 || page >> span == 0
    }

    /// Reserves a node that is live; fails on a deleted or dead one. A live node is counted
    /// by its parent, so its ancestors are live too and a reservation on it alone keeps the
    /// path to it from being deleted.
    pub(super) fn try_reserve_live(&self) -> bool {
        let mut cur = self.state.load(Ordering::SeqCst);
        loop {
            if cur & (DEL | DEAD) != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Reserves a child through a parent the caller holds a reservation on, reviving it if it
    /// was logically deleted (the paper's reuse).
    pub(super) fn reserve_child(&self) -> Reserve {
        let mut cur = self.state.load(Ordering::SeqCst);
        loop {
            let (new, outcome) = if cur & DEAD != 0 {
                return Reserve::Dead;
            } else if cur & DEL != 0 {
                (1, Reserve::Revived)
            } else {
                (cur + 1, Reserve::Live)
            };
            match self.state.compare_exchange_weak(cur, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return outcome,
                Err(now) => cur = now,
            }
        }
    }

    /// Adds one to `count` on a node the caller holds a reservation on (so it is live).
    pub(super) fn credit(&self) {
        let old = self.state.fetch_add(1, Ordering::SeqCst);
        debug_assert!(old & (DEL | DEAD) == 0 && old & COUNT_MASK > 0);
    }

    /// Takes one from `count`; returns the new count. Zero means the caller should try to
    /// delete the node logically.
    pub(super) fn debit(&self) -> u64 {
        let old = self.state.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(old & (DEL | DEAD) == 0 && old & COUNT_MASK > 0, "debit of {old:#x}");
        (old & COUNT_MASK) - 1
    }

    /// Marks an empty, unreserved node deleted; fails if anything got in first.
    pub(super) fn try_mark_deleted(&self) -> bool {
        self.state.compare_exchange(0, DEL, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Marks a deleted node dead so that nobody can revive it; fails if it was revived.
    pub(super) fn try_mark_dead(&self) -> bool {
        self.state.compare_exchange(DEL, DEAD, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    pub(super) fn is_deleted(&self) -> bool {
        self.state.load(Ordering::SeqCst) & (DEL | DEAD) != 0
    }
}

/// Retired nodes kept for the next node any tree makes, as the kernel's slab keeps radix
/// nodes: a file whose pages come and go over a range wider than its reuse pool
/// (`tree.rs`) frees a leaf at nearly every eviction and makes one at nearly every miss, and
/// malloc's free and allocation of 520-byte blocks were 4% of the CPU of async random reads
/// (bench/RESULTS.md, issue 18). Bounded, so a tree torn down gives its memory back.
#[cfg(not(loom))]
pub(super) mod spare {
    use super::Node;
    use crossbeam_queue::ArrayQueue;
    use std::sync::OnceLock;

    /// At most this many nodes (about 2 MiB) wait for reuse.
    const KEEP: usize = 4096;

    fn pool() -> &'static ArrayQueue<Box<Node>> {
        static POOL: OnceLock<ArrayQueue<Box<Node>>> = OnceLock::new();
        POOL.get_or_init(|| ArrayQueue::new(KEEP))
    }

    /// Keeps a node no thread can reach any more (retired, its grace period over), or frees
    /// it if enough are kept.
    pub(in super::super) fn give(node: Box<Node>) {
        drop(pool().push(node));
    }

    /// A kept node, to be initialized by the caller.
    pub(in super::super) fn take() -> Option<Box<Node>> {
        pool().pop()
    }
}

/// No reuse under loom: nodes are parked in the graveyard instead.
#[cfg(loom)]
pub(super) mod spare {
    use super::Node;

    pub(in super::super) fn take() -> Option<Box<Node>> {
        None
    }
}
