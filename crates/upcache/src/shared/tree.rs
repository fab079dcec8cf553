//! The shared page index as ScaleCache's ccXArray (seed 000 §3.2), in the segment: one radix
//! tree per file entry, rooted in the entry's `root` word, with nodes from two pools of the
//! segment (64-slot leaves of frame numbers, 64-slot inner nodes of child pointers), addressed
//! by index, so every process follows the same tree at its own mapping's address.
//!
//! - **Lookups** take no lock and write nothing: the root word, one load per level, the leaf's
//!   slot. The answer is a hint, confirmed by the frame's `home` under its lock or seqlock
//!   (`super::frame`), as the hash chains' was: a node reused under a lookup can only make it
//!   miss or name a frame whose `home` is not the page's.
//! - **Inserts and removes** are CASes on leaf slots: a slot goes from 0 to a frame only by a
//!   CAS from 0, so two processes placing one page get one frame (the loser is told which).
//! - **Concurrent expansion**: a page past the root's span puts a new root above it by a CAS
//!   of the root word; a missing inner node or leaf is made by the winner of a CAS from 0 on
//!   its parent's slot (the losers give theirs back).
//! - **Lazy deletion**: a node whose last entry or child goes is marked `DEAD` by the CAS that
//!   takes its count to 0, then unlinked from its parent and given back, by whoever took it
//!   to 0; an insert that meets a dead child replaces it.
//!
//! # Why counts and incarnations, not epochs
//! The private tree (`index/radix`) frees nodes after an epoch; a process here can be killed
//! or stopped in any epoch, and a stopped one would hold every free back. Instead a node is
//! only ever *reserved* (its count raised by a CAS that names its incarnation) before anyone
//! writes into it, and a child pointer carries the incarnation it was made in. A pointer read
//! from a node that was freed and reused names an old incarnation, so reserving through it
//! fails; a reservation that lands checks the node's `whose` (file, generation, level, pages)
//! before use. The root word carries its node's incarnation (16 bits) too, and whoever goes
//! down from the root reads the word again after learning the root's incarnation: a root is
//! given back only after the word moved on (a new root above it, or a clear). Lookups, which
//! write nothing, need no protection (see above).
//!
//! # Invariants
//! - A node's `count` is its entries (a leaf) or linked children (an inner node), plus one per
//!   reservation; a non-root node is marked `DEAD` only by the CAS that takes it to 0 (or, a
//!   root its releaser took to 0 as an expansion put a root above it, by a CAS from exactly
//!   that state: `release`), and a `DEAD` node is never reserved. So an entry or child is
//!   never put in a node about to go.
//! - A child pointer is stored once, when its node is made, and taken out once (to 0 by the
//!   node's deleter, or to a new node by an insert that met it dead): whoever takes it out
//!   gives the node back, and the deleter then releases the parent's count.
//! - A node is in its pool's free stack iff its `state` is not `LIVE` (but for a kill between
//!   the two): only the winner of the CAS that clears `LIVE` pushes it, so a node is never
//!   pushed twice; a node's slots are zeroed before it goes `LIVE`.
//! - A root is never deleted while it is the root; the whole tree is given back when its
//!   entry takes its next generation (`clear`), which happens only while nobody has the file
//!   open, so no insert runs in a tree being cleared. A tree of another generation than its
//!   open entry's (a process killed between the two stores of a new generation) is replaced
//!   by an empty one by the next insert, and its nodes go at the entry's next generation.
//! - A process killed inside an operation leaves at worst a count too high (the node then
//!   stays until its entry's next generation: `sweep_slot`, for the entries a dead process
//!   had open) or a node between its free stack and `LIVE` (lost for the segment's life);
//!   never an entry in a node that is free, nor a node in the stack twice.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Page bits per level: 64 slots a node; 4 under loom, so that a model reaches expansion and
/// multi-level deletion with a handful of pages (the protocol does not depend on it).
#[cfg(not(loom))]
const BITS: u32 = 6;
#[cfg(loom)]
const BITS: u32 = 2;
const FANOUT: usize = 1 << BITS;
const MASK: u64 = FANOUT as u64 - 1;
/// Levels enough for every page a key holds (`frame::MAX_PAGES`, 2^36); under loom, 2^12
/// pages, more than any model uses.
const MAX_HEIGHT: u32 = 6;
/// Restarts of one insert or remove before it gives up (each follows a change by another
/// process; so many means a tree left broken, which must not hang the caller).
const MAX_RESTARTS: u32 = 100_000;

/// Node state: incarnation (high 32 bits), `LIVE`, `DEAD`, count (low 30 bits).
const LIVE: u64 = 1 << 31;
const DEAD: u64 = 1 << 30;
const COUNT: u64 = DEAD - 1;

/// A leaf: frame + 1 per page, 0 for none.
#[repr(C, align(64))]
pub(crate) struct Leaf {
    slots: [AtomicU32; FANOUT],
}

/// An inner node: child pointers (`ptr`), 0 for none.
#[repr(C, align(64))]
pub(crate) struct Inner {
    slots: [AtomicU64; FANOUT],
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Leaf>() == 256 && std::mem::size_of::<Inner>() == 512);

/// Bytes of a leaf, an inner node and a node's state word, for the index's size in reports.
pub(crate) const LEAF_BYTES: u64 = std::mem::size_of::<Leaf>() as u64;
pub(crate) const INNER_BYTES: u64 = std::mem::size_of::<Inner>() as u64;
pub(crate) const NODE_META_BYTES: u64 = std::mem::size_of::<NodeMeta>() as u64;

/// What a pool's nodes are: slots to zero before a node goes live.
///
/// Under loom each slot is zeroed by a swap, not a store: loom 0.7 lets a plain store fall
/// between the read and the write of another thread's RMW that does not happen before it
/// (tokio-rs/loom#254, fixed by loom#391, unmerged), and a stale remove's CAS on a slot of a
/// leaf given back is such an RMW, so a model would see the new incarnation's entry undone,
/// which no real execution can do.
pub(crate) trait Slots {
    fn zero(&self);
}

/// `Slots` for a node type with a `slots` array of atomics: leaves and inner nodes alike.
macro_rules! zeroed_slots {
    ($node:ty) => {
        impl Slots for $node {
            fn zero(&self) {
                // Relaxed: published by the Release store that makes the node live.
                #[cfg(not(loom))]
                self.slots.iter().for_each(|s| s.store(0, Ordering::Relaxed));
                // Relaxed: as above.
                #[cfg(loom)]
                self.slots.iter().for_each(|s| {
                    s.swap(0, Ordering::Relaxed);
                });
            }
        }
    };
}

zeroed_slots!(Leaf);
zeroed_slots!(Inner);

/// A node's bookkeeping, beside the pool's nodes.
#[repr(C)]
pub(crate) struct NodeMeta {
    /// `LIVE`, `DEAD`, the count and the incarnation (bumped at each allocation).
    state: AtomicU64,
    /// Whose node it is while live (`whose`): set before it goes live, fixed until it is free.
    whose: AtomicU64,
    /// The next free node + 1 in the pool's stack; `END` for none, 0 for the node after this
    /// one (never stored: `Pool::init`).
    next: AtomicU32,
    _pad: u32,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<NodeMeta>() == 24);

/// A pool's free stack head: a tag (high 32 bits, bumped at every change, against ABA) and
/// the top node + 1.
pub(crate) type StackHead = AtomicU64;

/// A node's identity: entry slot + 1 (20 bits), generation (8), level (4), and the pages it
/// spans (`page >> span`, 32).
fn whose(slot: u32, gen: u32, level: u32, page: u64) -> u64 {
    (slot as u64 + 1) << 44 | ((gen & 0xff) as u64) << 36 | (level as u64) << 32 | page >> span(level)
}

/// Page bits a node of `level` spans (a leaf is level 0).
fn span(level: u32) -> u32 {
    BITS * (level + 1)
}

/// The height of the smallest tree that holds `page`.
fn height_for(page: u64) -> u32 {
    (1..MAX_HEIGHT).find(|&h| page >> span(h - 1) == 0).unwrap_or(MAX_HEIGHT)
}

fn slot_of(level: u32, page: u64) -> usize {
    ((page >> (BITS * level)) & MASK) as usize
}

/// A child pointer: incarnation (high 32 bits) and node + 1.
fn ptr(idx: u32, inc: u32) -> u64 {
    (inc as u64) << 32 | (idx as u64 + 1)
}

fn unptr(p: u64) -> (u32, u32) {
    ((p as u32).wrapping_sub(1), (p >> 32) as u32)
}

/// The root word: generation (bits 56..64), height (48..56), the root's incarnation's low 16
/// bits (32..48), root node + 1 (low 32); no node is an empty tree.
fn root_word(gen: u32, height: u32, top: Option<(u32, u32)>) -> u64 {
    ((gen & 0xff) as u64) << 56
        | (height as u64) << 48
        | top.map_or(0, |(idx, inc)| ((inc & 0xffff) as u64) << 32 | (idx as u64 + 1))
}

/// A root word's generation, height and (root node, incarnation's low 16 bits).
fn root_parts(r: u64) -> (u32, u32, Option<(u32, u32)>) {
    let top = (r as u32).checked_sub(1).map(|idx| (idx, (r >> 32) as u32 & 0xffff));
    ((r >> 56) as u32, (r >> 48) as u32 & 0xff, top)
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// The frame is the page's.
    Placed,
    /// Another frame is the page's.
    Taken(u32),
    /// No node was free to hold the page (the caller frees frames, which frees nodes).
    Full,
    /// The tree kept changing under the insert past all reason, or is of a generation the
    /// file cannot be in: only a tree left broken does that, and freeing frames will not help.
    Broken,
}

/// A node's `next` at the end of its free stack (0 is "the node after it", `Pool::init`).
const END: u32 = u32::MAX;

/// The free stack's entry after node `idx` of a pool of `len` (a node + 1, 0 for the end),
/// from the node's `next`.
pub(super) fn next_in_stack(len: usize, idx: u32, next: u32) -> u32 {
    match next {
        0 if (idx as usize + 1) < len => idx + 2,
        0 | END => 0,
        n => n,
    }
}

/// One pool of nodes and its free stack.
pub(crate) struct Pool<'a, N> {
    pub nodes: &'a [N],
    pub meta: &'a [NodeMeta],
    pub free: &'a StackHead,
    /// The nodes' memory, allocated as they are first popped (`chunk.rs`); None where it is
    /// all allocated (the tests' arenas).
    #[cfg(not(loom))]
    pub lazy: Option<super::chunk::Lazy<'a>>,
}

impl<N: Slots> Pool<'_, N> {
    /// Puts every node in the free stack: at creation, before any process attaches. A node
    /// whose `next` was never stored (0, as the segment is made) is followed by the node after
    /// it, so nothing is written but the head: linking a 1 GiB cache's 400,000 nodes one by one
    /// touched 10 MiB, a sixth of its service's start.
    pub fn init(&self) {
        self.free.store(if self.meta.is_empty() { 0 } else { 1 }, Ordering::Relaxed);
    }

    /// A free node, zeroed and live for `whose` with a count of 1 (the caller's reservation)
    /// and a new incarnation; None if the pool is empty, or its memory could not be
    /// allocated (the node goes back).
    fn pop(&self, whose: u64) -> Option<(u32, u32)> {
        // Acquire: the pusher's `next` store comes with the head.
        let mut head = self.free.load(Ordering::Acquire);
        let idx = loop {
            let idx = (head as u32).checked_sub(1)?;
            let m = self.meta.get(idx as usize)?;
            // Relaxed: if the node was popped meanwhile, the head moved and the CAS fails.
            let next = next_in_stack(self.meta.len(), idx, m.next.load(Ordering::Relaxed));
            let new = ((head >> 32) + 1) << 32 | next as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => break idx,
                Err(h) => head = h,
            }
        };
        // Its memory first: a node never popped may lie in a chunk not yet allocated. Refused
        // (a full tmpfs), it goes back, not live, and the pool is as good as empty.
        #[cfg(not(loom))]
        if let Some(lazy) = &self.lazy {
            if !lazy.ensure(idx as usize * std::mem::size_of::<N>()) {
                self.push(idx);
                return None;
            }
        }
        let m = &self.meta[idx as usize];
        // Only we touch a popped node until it goes live. Its old slots are zeroed first: a
        // process still holding an old incarnation of it may CAS an old value out of them,
        // never into a live node of ours.
        self.nodes[idx as usize].zero();
        // Relaxed: published by the Release store below.
        let inc = ((m.state.load(Ordering::Relaxed) >> 32) as u32).wrapping_add(1);
        m.whose.store(whose, Ordering::Relaxed);
        // Release: whoever reserves it through its new pointer sees `whose` and the zeros.
        m.state.store((inc as u64) << 32 | LIVE | 1, Ordering::Release);
        Some((idx, inc))
    }

    /// Gives node `idx` of incarnation `inc` back, unless it is free or another incarnation
    /// already (a clear or a sweep gave it back first); whether we did.
    fn free_node(&self, idx: u32, inc: u32) -> bool {
        let m = &self.meta[idx as usize];
        let mut s = m.state.load(Ordering::Acquire);
        loop {
            if s & LIVE == 0 || (s >> 32) as u32 != inc {
                return false;
            }
            // AcqRel: the winner alone pushes; what was written into the node comes before.
            match m.state.compare_exchange_weak(s, (inc as u64) << 32, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        self.push(idx);
        true
    }

    /// Pushes node `idx` (not live, ours alone) on the free stack.
    fn push(&self, idx: u32) {
        let m = &self.meta[idx as usize];
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            // Relaxed: published by the head's Release CAS.
            m.next.store(if head as u32 == 0 { END } else { head as u32 }, Ordering::Relaxed);
            let new = ((head >> 32) + 1) << 32 | (idx as u64 + 1);
            match self.free.compare_exchange_weak(head, new, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Raises node `idx`'s count if it is live, of incarnation `inc`, not dead, and `whose`'s.
    fn reserve(&self, idx: u32, inc: u32, whose: u64) -> Reserved {
        let Some(m) = self.meta.get(idx as usize) else { return Reserved::Gone };
        let mut s = m.state.load(Ordering::Acquire);
        loop {
            if s & LIVE == 0 || (s >> 32) as u32 != inc {
                return Reserved::Gone;
            }
            if s & DEAD != 0 {
                // Relaxed: fixed while live, which our Acquire load saw. A dead node of
                // another tree is not ours to replace.
                return if m.whose.load(Ordering::Relaxed) == whose {
                    Reserved::Dead
                } else {
                    Reserved::Gone
                };
            }
            // Acquire: the node's slots as its maker and past holders left them.
            match m.state.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        // Relaxed: set before the node went live (Release), which our Acquire CAS saw.
        if m.whose.load(Ordering::Relaxed) != whose {
            return Reserved::Stranger;
        }
        Reserved::Held
    }

    /// The node's incarnation if it is live.
    fn live_inc(&self, idx: u32) -> Option<u32> {
        let s = self.meta.get(idx as usize)?.state.load(Ordering::Acquire);
        (s & LIVE != 0).then_some((s >> 32) as u32)
    }

    /// Live nodes (a scan, for reports).
    pub fn live(&self) -> usize {
        // Relaxed: a count for reports.
        self.meta.iter().filter(|m| m.state.load(Ordering::Relaxed) & LIVE != 0).count()
    }
}

enum Reserved {
    Held,
    /// Reserved, but another file's or place's node: to release.
    Stranger,
    Dead,
    Gone,
}

/// The file entries whose trees a forest holds, by slot: the segment's file table
/// (`[FileEntry]`, `files.rs`), or a stand-in in the loom models.
pub(crate) trait Entries {
    /// Entry `slot`'s root word (`FileEntry::root`), None past the last entry.
    fn root(&self, slot: u32) -> Option<&AtomicU64>;
    /// Entry `slot`'s generation (`FileEntry::gen`).
    fn gen(&self, slot: u32) -> &AtomicU32;
    /// Entry `slot`'s mark for its next generation's sweep (`FileEntry::leaky`).
    fn leaky(&self, slot: u32) -> &AtomicU32;
}

/// The trees of every file entry.
pub(crate) struct Forest<'a, E: ?Sized> {
    pub leaves: Pool<'a, Leaf>,
    pub inners: Pool<'a, Inner>,
    pub files: &'a E,
}

impl<E: Entries + ?Sized> Forest<'_, E> {
    fn root(&self, slot: u32) -> &AtomicU64 {
        self.files.root(slot).expect("a file entry's slot")
    }

    fn meta(&self, level: u32, idx: u32) -> &NodeMeta {
        if level == 0 {
            &self.leaves.meta[idx as usize]
        } else {
            &self.inners.meta[idx as usize]
        }
    }

    fn pop(&self, level: u32, whose: u64) -> Option<(u32, u32)> {
        if level == 0 {
            self.leaves.pop(whose)
        } else {
            self.inners.pop(whose)
        }
    }

    fn free_node(&self, level: u32, idx: u32, inc: u32) -> bool {
        if level == 0 {
            self.leaves.free_node(idx, inc)
        } else {
            self.inners.free_node(idx, inc)
        }
    }

    fn reserve(&self, level: u32, idx: u32, inc: u32, whose: u64) -> Reserved {
        if level == 0 {
            self.leaves.reserve(idx, inc, whose)
        } else {
            self.inners.reserve(idx, inc, whose)
        }
    }

    fn live_inc(&self, level: u32, idx: u32) -> Option<u32> {
        if level == 0 {
            self.leaves.live_inc(idx)
        } else {
            self.inners.live_inc(idx)
        }
    }

    /// The root node of root word `r` (read from `root`) and its whole incarnation, if it was
    /// the root as we learned it: its incarnation agrees with the word's, and the word had not
    /// moved on (a root is given back only after its word moves on).
    fn root_of(&self, root: &AtomicU64, r: u64) -> Option<(u32, u32)> {
        let (_, height, top) = root_parts(r);
        let (idx, inc16) = top?;
        let inc = self.live_inc(height.checked_sub(1)?, idx).filter(|i| i & 0xffff == inc16)?;
        // Acquire: pairs with the Release CAS or swap that moved the word on before a free.
        (root.load(Ordering::Acquire) == r).then_some((idx, inc))
    }

    /// The frame file `slot`'s tree of generation `gen` has for `page`, with no lock: a hint.
    pub fn get(&self, slot: u32, gen: u32, page: u64) -> Option<u32> {
        // Acquire: a node reached comes with what its maker stored.
        self.leaf_slot(slot, gen, page)?.load(Ordering::Acquire).checked_sub(1)
    }

    /// Starts fetching the leaf slot of `page` in file `slot`'s tree of generation `gen`, for
    /// a caller that looks it up after some other work (a writer, after its range slot), so
    /// that the miss overlaps that work. A hint only: the inner nodes are read, nothing is
    /// waited for at the leaf.
    pub fn prefetch(&self, slot: u32, gen: u32, page: u64) {
        if let Some(s) = self.leaf_slot(slot, gen, page) {
            crate::frame::prefetch(s as *const _);
        }
    }

    /// The leaf slot that holds `page`'s frame in file `slot`'s tree of generation `gen`, if
    /// the walk reaches one (for `get` and `prefetch`: the slot is not read).
    fn leaf_slot(&self, slot: u32, gen: u32, page: u64) -> Option<&AtomicU32> {
        // Acquire (root and inner slots): a node reached comes with what its maker stored.
        let (g, height, top) = root_parts(self.root(slot).load(Ordering::Acquire));
        let (mut idx, _) = top?;
        if g != gen & 0xff || page >> span(height.checked_sub(1)?) != 0 {
            return None;
        }
        for level in (1..height).rev() {
            let c = self.inners.nodes.get(idx as usize)?.slots[slot_of(level, page)].load(Ordering::Acquire);
            idx = (c as u32).checked_sub(1)?;
        }
        Some(&self.leaves.nodes.get(idx as usize)?.slots[slot_of(0, page)])
    }

    /// Makes frame `f` page `page`'s in file `slot`'s tree of generation `gen` (the file is
    /// open, so that is its current one), unless another frame is.
    pub fn insert(&self, slot: u32, gen: u32, page: u64, f: u32) -> Insert {
        if let Some(done) = self.insert_in_leaf(slot, gen, page, f) {
            return done;
        }
        let root = self.root(slot);
        for _ in 0..MAX_RESTARTS {
            let r = root.load(Ordering::Acquire);
            let (g, height, top) = root_parts(r);
            if g != gen & 0xff {
                // A tree of another generation than the open entry's: left by a process
                // killed between the two stores of a new generation (`pages.rs`,
                // `next_generation`). The entry's is the file's; its old nodes go at the
                // entry's next generation (`sweep_slot`).
                // Relaxed: the generation of an open file is fixed.
                if self.files.gen(slot).load(Ordering::Relaxed) & 0xff != gen & 0xff {
                    debug_assert!(false, "insert of generation {gen} into entry {slot} of another");
                    return Insert::Broken;
                }
                // Relaxed: a hint for the next generation's sweep.
                self.files.leaky(slot).store(1, Ordering::Relaxed);
                let _ =
                    root.compare_exchange(r, root_word(gen, 0, None), Ordering::AcqRel, Ordering::Acquire);
                continue;
            }
            let Some((top, _)) = top else {
                // The first page: a root of the height it needs, counted by nobody.
                let h = height_for(page);
                let Some((idx, inc)) = self.pop(h - 1, whose(slot, gen, h - 1, 0)) else {
                    return Insert::Full;
                };
                let m = self.meta(h - 1, idx);
                let (one, zero) = ((inc as u64) << 32 | LIVE | 1, (inc as u64) << 32 | LIVE);
                // Relaxed: nobody else can reach the node yet; the root CAS publishes it.
                let _ = m.state.compare_exchange(one, zero, Ordering::Relaxed, Ordering::Relaxed);
                // Release: the zeroed node comes with the root word.
                let new = root_word(gen, h, Some((idx, inc)));
                if root.compare_exchange(r, new, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    self.free_node(h - 1, idx, inc);
                }
                continue;
            };
            let Some((_, inc)) = self.root_of(root, r) else { continue };
            if height < MAX_HEIGHT && page >> span(height - 1) != 0 {
                if !self.expand(root, r, slot, gen, top, inc) {
                    return Insert::Full;
                }
                continue;
            }
            let level = height - 1;
            match self.reserve(level, top, inc, whose(slot, gen, level, 0)) {
                Reserved::Held => {}
                Reserved::Stranger => {
                    self.release(level, top, inc);
                    continue;
                }
                Reserved::Dead | Reserved::Gone => continue,
            }
            if let Some(done) = self.insert_below(slot, gen, page, f, level, top, inc) {
                return done;
            }
        }
        log::error!("shared cache: the page tree of file entry {slot} kept changing; page {page} not placed");
        Insert::Broken
    }

    /// An insert into a leaf that is there already, the common case: the walk down as `get`'s
    /// (no reservation on the way: two contended CASes a level cost a miss 5% of its time),
    /// then the leaf reserved through the pointer read from its parent. The parent is checked
    /// around that read: live, of the incarnation its own pointer named, not dead, and ours
    /// (`whose` names the file, generation, level and pages), so the pointer is one its slot
    /// held while linked, not a word of a node given back and reused at another level (whose
    /// pointers are inner nodes') that happens to name a leaf of ours popped and not linked.
    /// The leaf's reservation then lands only on that incarnation, live and not dead: such a
    /// leaf is linked (a node is unlinked only after it is marked dead) and so are its
    /// ancestors (each counts its linked child), so it is the page's leaf of the tree as
    /// `insert` would find it. None if a node is missing, dead or moved on: the full insert
    /// makes or replaces it.
    fn insert_in_leaf(&self, slot: u32, gen: u32, page: u64, f: u32) -> Option<Insert> {
        let root = self.root(slot);
        // Acquire (root and inner slots): a node reached comes with what its maker stored.
        let r = root.load(Ordering::Acquire);
        let (g, height, top) = root_parts(r);
        let (mut idx, _) = top?;
        if g != gen & 0xff || page >> span(height.checked_sub(1)?) != 0 {
            return None;
        }
        // The root's whole incarnation, if the leaf or the leaf's parent is the root.
        let mut inc = if height <= 2 { self.root_of(root, r)?.1 } else { 0 };
        for level in (2..height).rev() {
            let c = self.inners.nodes.get(idx as usize)?.slots[slot_of(level, page)].load(Ordering::Acquire);
            if c == 0 {
                return None;
            }
            (idx, inc) = unptr(c);
        }
        if height >= 2 {
            // The leaf's parent, checked before and after the read of its slot.
            let (node, m) = (self.inners.nodes.get(idx as usize)?, self.inners.meta.get(idx as usize)?);
            let ours = || {
                // Acquire: the node's slots as its maker and linkers left them.
                let s = m.state.load(Ordering::Acquire);
                s & (LIVE | DEAD) == LIVE && (s >> 32) as u32 == inc
            };
            // Relaxed (`whose`): set before the node went live, which `ours` saw.
            if !ours() || m.whose.load(Ordering::Relaxed) != whose(slot, gen, 1, page) {
                return None;
            }
            let c = node.slots[slot_of(1, page)].load(Ordering::Acquire);
            // Still that incarnation after the read (the slot's Acquire load orders this one
            // after it): the word was its slot's.
            if c == 0 || !ours() {
                return None;
            }
            (idx, inc) = unptr(c);
        }
        match self.reserve(0, idx, inc, whose(slot, gen, 0, page)) {
            Reserved::Held => {}
            Reserved::Stranger => {
                self.release(0, idx, inc);
                return None;
            }
            Reserved::Dead | Reserved::Gone => return None,
        }
        Some(self.insert_into_leaf(page, f, idx, inc))
    }

    /// Puts frame `f` in page `page`'s slot of leaf `idx` (incarnation `inc`), which we hold
    /// reserved, unless another frame is there (our reservation then given back).
    fn insert_into_leaf(&self, page: u64, f: u32, idx: u32, inc: u32) -> Insert {
        let s = &self.leaves.nodes[idx as usize].slots[slot_of(0, page)];
        // AcqRel: the frame's key and `home` (stored before) go with the entry; a loser sees
        // the winner's.
        match s.compare_exchange(0, f + 1, Ordering::AcqRel, Ordering::Acquire) {
            // Our reservation on the leaf is now its count of the entry.
            Ok(_) => Insert::Placed,
            Err(g) => {
                self.release(0, idx, inc);
                Insert::Taken(g - 1)
            }
        }
    }

    /// Puts a new root above root `top` (incarnation `inc`) of root word `r`.
    /// False if no node was free for it.
    fn expand(&self, root: &AtomicU64, r: u64, slot: u32, gen: u32, top: u32, inc: u32) -> bool {
        let (_, height, _) = root_parts(r);
        // Its count is its one child.
        let Some((idx, new_inc)) = self.pop(height, whose(slot, gen, height, 0)) else { return false };
        // Relaxed: published by the root word's Release CAS.
        self.inners.nodes[idx as usize].slots[0].store(ptr(top, inc), Ordering::Relaxed);
        let up = root_word(gen, height + 1, Some((idx, new_inc)));
        if root.compare_exchange(r, up, Ordering::AcqRel, Ordering::Acquire).is_err() {
            self.free_node(height, idx, new_inc);
            return true;
        }
        // The old root, no longer one, dies now if it is empty.
        if let Reserved::Held | Reserved::Stranger =
            self.reserve(height - 1, top, inc, whose(slot, gen, height - 1, 0))
        {
            self.release(height - 1, top, inc);
        }
        true
    }

    /// The rest of an insert from node `idx` (incarnation `inc`) at `level`, which we hold
    /// reserved; None to start again from the root (our reservation given back).
    #[allow(clippy::too_many_arguments)]
    fn insert_below(
        &self,
        slot: u32,
        gen: u32,
        page: u64,
        f: u32,
        mut level: u32,
        mut idx: u32,
        mut inc: u32,
    ) -> Option<Insert> {
        while level > 0 {
            let s = &self.inners.nodes[idx as usize].slots[slot_of(level, page)];
            let child_whose = whose(slot, gen, level - 1, page);
            // Acquire: a child reached comes with its maker's stores.
            let c = s.load(Ordering::Acquire);
            if c == 0 {
                let Some((cidx, cinc)) = self.pop(level - 1, child_whose) else {
                    self.release(level, idx, inc);
                    return Some(Insert::Full);
                };
                // Release: the child's zeros and `whose` come with its pointer.
                if s.compare_exchange(0, ptr(cidx, cinc), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // Our reservation on the parent is now its count of the child.
                    (idx, inc, level) = (cidx, cinc, level - 1);
                } else {
                    self.free_node(level - 1, cidx, cinc);
                }
                continue;
            }
            let (cidx, cinc) = unptr(c);
            match self.reserve(level - 1, cidx, cinc, child_whose) {
                Reserved::Held => {
                    self.release(level, idx, inc);
                    (idx, inc, level) = (cidx, cinc, level - 1);
                }
                Reserved::Stranger => {
                    // Reused since we read its pointer, so the slot has moved on: again.
                    self.release(level - 1, cidx, cinc);
                    self.release(level, idx, inc);
                    return None;
                }
                Reserved::Gone => {
                    // Given back, so taken out of the slot first (an unlinker frees only
                    // what it took out): again.
                    self.release(level, idx, inc);
                    return None;
                }
                Reserved::Dead => {
                    // Its deleter may have died before unlinking it: replace it.
                    let Some((nidx, ninc)) = self.pop(level - 1, child_whose) else {
                        self.release(level, idx, inc);
                        return Some(Insert::Full);
                    };
                    if s.compare_exchange(c, ptr(nidx, ninc), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        // The parent counts the new child instead of the dead one.
                        self.free_node(level - 1, cidx, cinc);
                        self.release(level, idx, inc);
                        (idx, inc, level) = (nidx, ninc, level - 1);
                    } else {
                        self.free_node(level - 1, nidx, ninc);
                    }
                }
            }
        }
        Some(self.insert_into_leaf(page, f, idx, inc))
    }
    /// Takes frame `f` out of page `page`'s slot in file `slot`'s tree, if it is there and the
    /// tree is of generation `gen`. The caller holds `f`'s lock, so `f` is in no other slot.
    pub fn remove(&self, slot: u32, gen: u32, page: u64, f: u32) -> bool {
        let root = self.root(slot);
        for _ in 0..MAX_RESTARTS {
            let r = root.load(Ordering::Acquire);
            let (g, height, top) = root_parts(r);
            if top.is_none() || g != gen & 0xff || page >> span(height - 1) != 0 {
                return false;
            }
            // The root's incarnation as of a word that had not moved on (else again).
            let Some((mut idx, mut inc)) = self.root_of(root, r) else { continue };
            for level in (1..height).rev() {
                let Some(node) = self.inners.nodes.get(idx as usize) else { return false };
                // Acquire: as in `get`.
                let c = node.slots[slot_of(level, page)].load(Ordering::Acquire);
                if c == 0 {
                    return false;
                }
                (idx, inc) = unptr(c);
            }
            let Some(leaf) = self.leaves.nodes.get(idx as usize) else { return false };
            // AcqRel: whoever next places the page sees our frame gone. A node given back and
            // reused since we read its pointer was zeroed before it went live, and only we can
            // put `f` anywhere; one given back and not yet reused may still hold `f` from
            // before, and then the release below does nothing (its incarnation is not `inc`).
            let taken =
                leaf.slots[slot_of(0, page)].compare_exchange(f + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
            if taken.is_ok() {
                self.release(0, idx, inc);
            }
            return taken.is_ok();
        }
        log::error!("shared cache: the page tree of file entry {slot} kept changing; frame {f} left in it");
        false
    }

    /// Lowers node `idx`'s count (incarnation `inc`, at `level`); the node whose count goes to
    /// 0 and is not a root is marked dead, unlinked and given back, and its parent released.
    fn release(&self, level: u32, idx: u32, inc: u32) {
        let m = self.meta(level, idx);
        let mut s = m.state.load(Ordering::Acquire);
        let mut n;
        loop {
            if s & LIVE == 0 || (s >> 32) as u32 != inc {
                // Given back by a clear or a sweep meanwhile.
                return;
            }
            if s & COUNT == 0 {
                debug_assert!(false, "release of node {idx} at level {level} with a count of 0");
                return;
            }
            n = s - 1;
            let dies = n & COUNT == 0 && !self.is_root(level, idx, m);
            // AcqRel: our writes into the node come before its deletion; its last entry's
            // removal comes before ours.
            match m.state.compare_exchange_weak(
                s,
                if dies { n | DEAD } else { n },
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) if dies => return self.unlink(level, idx, inc, m),
                Ok(_) if n & COUNT == 0 => break,
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        // We took it to 0 and left it live: a root, as we read the word. If it is no longer
        // one, an expansion's reserve and release of it fell between our load and our CAS
        // (leaving the same state, so the CAS held) and saw it counted, so it dies now, by a
        // CAS from exactly this state (a reserve or another death since makes it fail). Our
        // CAS read that release (AcqRel) or a later RMW, so the word we read now is the
        // expansion's or later; an expansion after our CAS sees it empty and kills it itself.
        if !self.is_root(level, idx, m)
            // AcqRel: as above.
            && m.state.compare_exchange(n, n | DEAD, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            self.unlink(level, idx, inc, m);
        }
    }

    fn is_root(&self, level: u32, idx: u32, m: &NodeMeta) -> bool {
        // Relaxed: fixed while the node is live.
        let w = m.whose.load(Ordering::Relaxed);
        let slot = ((w >> 44) as u32).wrapping_sub(1);
        let Some(root) = self.files.root(slot) else { return true };
        let (_, height, top) = root_parts(root.load(Ordering::Acquire));
        // A root that gets a new root above it after this answer is released again by the
        // expansion (`expand`), which lets it die then if it is empty, or, if the expansion's
        // reserve and release both fell before our CAS, looked at again by us (`release`).
        top.is_some_and(|(t, _)| t == idx) && height == level + 1
    }

    /// Takes dead node `idx` out of its parent and gives both back as their counts say.
    fn unlink(&self, level: u32, idx: u32, inc: u32, m: &NodeMeta) {
        // Relaxed: fixed while the node is live (and it is ours to free).
        let w = m.whose.load(Ordering::Relaxed);
        let (slot, gen) = (((w >> 44) as u32).wrapping_sub(1), (w >> 36) as u32 & 0xff);
        let page = (w & u32::MAX as u64) << span(level);
        let Some(root) = self.files.root(slot) else { return };
        for _ in 0..MAX_RESTARTS {
            let r = root.load(Ordering::Acquire);
            let (g, height, top) = root_parts(r);
            if top.is_none() || g != gen || level + 1 >= height {
                return; // the tree was cleared: the clear gives the nodes back
            }
            let Some((mut p, mut pinc)) = self.root_of(root, r) else { continue };
            for l in (level + 2..height).rev() {
                let Some(node) = self.inners.nodes.get(p as usize) else { return };
                // Acquire: as in `get`.
                let c = node.slots[slot_of(l, page)].load(Ordering::Acquire);
                if c == 0 {
                    return;
                }
                (p, pinc) = unptr(c);
            }
            let Some(parent) = self.inners.nodes.get(p as usize) else { return };
            let s = &parent.slots[slot_of(level + 1, page)];
            // AcqRel: a reader that sees the slot empty sees no entry below it; only the
            // node's one pointer has this value, so winning it makes the node ours to give
            // back (an insert that replaced the dead node won it instead).
            if s.compare_exchange(ptr(idx, inc), 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.free_node(level, idx, inc);
                self.release(level + 1, p, pinc);
            }
            return;
        }
    }

    /// Every frame [`Self::range_where`] would list.
    #[cfg(test)]
    pub fn range(&self, slot: u32, gen: u32, from: u64, to: u64) -> Vec<(u32, u64)> {
        self.range_where(slot, gen, from, to, &|_| true)
    }

    /// The frames file `slot`'s tree of generation `gen` has for pages `from..to` that `keep`
    /// takes (a sync's: the dirty ones, so a large file's pages are never all listed to find
    /// a few), with their pages: hints, each to be checked under the frame's lock.
    pub fn range_where(
        &self,
        slot: u32,
        gen: u32,
        from: u64,
        to: u64,
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let (g, height, top) = root_parts(self.root(slot).load(Ordering::Acquire));
        if let Some((top, _)) = top.filter(|_| g == gen & 0xff && from < to) {
            self.walk(height - 1, top, 0, (from, to), keep, &mut out);
        }
        out
    }

    fn walk(
        &self,
        level: u32,
        idx: u32,
        base: u64,
        (from, to): (u64, u64),
        keep: &dyn Fn(u32) -> bool,
        out: &mut Vec<(u32, u64)>,
    ) {
        let step = 1u64 << (BITS * level);
        for i in 0..FANOUT as u64 {
            let first = base + i * step;
            if first >= to || first + step <= from {
                continue;
            }
            if level == 0 {
                let Some(leaf) = self.leaves.nodes.get(idx as usize) else { return };
                // Acquire: as in `get`.
                if let Some(f) = leaf.slots[i as usize].load(Ordering::Acquire).checked_sub(1) {
                    if keep(f) {
                        out.push((f, first));
                    }
                }
            } else {
                let Some(node) = self.inners.nodes.get(idx as usize) else { return };
                let c = node.slots[i as usize].load(Ordering::Acquire);
                if c != 0 {
                    self.walk(level - 1, unptr(c).0, first, (from, to), keep, out);
                }
            }
        }
    }

    /// Gives back every node of file `slot`'s tree and leaves it empty in generation `gen`:
    /// under the table's lock, while nobody has the file open. A process evicting a frame of
    /// the old tree may still unlink and give back its nodes meanwhile, and they may be reused
    /// by another file's tree before we read them, so each node is given back, and followed,
    /// only while it is live and still this tree's (`whose`).
    pub fn clear(&self, slot: u32, gen: u32) {
        let root = self.root(slot);
        // Acquire: the nodes' stores come with the root word.
        let (old, height, top) = root_parts(root.swap(root_word(gen, 0, None), Ordering::AcqRel));
        if let Some((top, _)) = top {
            if let Some(inc) = self.live_inc(height - 1, top) {
                self.clear_node(slot, old, height - 1, top, inc);
            }
        }
    }

    fn clear_node(&self, slot: u32, gen: u32, level: u32, idx: u32, inc: u32) {
        // The incarnation first (Acquire), then `whose`, fixed while it lasts.
        if self.live_inc(level, idx) != Some(inc) {
            return;
        }
        // Relaxed: see above.
        let w = self.meta(level, idx).whose.load(Ordering::Relaxed);
        if w >> 36 != (slot as u64 + 1) << 8 | gen as u64 {
            return;
        }
        if level > 0 {
            let below = if level == 1 { self.leaves.meta.len() } else { self.inners.meta.len() };
            for s in &self.inners.nodes[idx as usize].slots {
                // Acquire: as in `get`.
                let c = s.load(Ordering::Acquire);
                if c != 0 {
                    let (cidx, cinc) = unptr(c);
                    if (cidx as usize) < below {
                        self.clear_node(slot, gen, level - 1, cidx, cinc);
                    }
                }
            }
        }
        self.free_node(level, idx, inc);
    }

    /// File `slot`'s tree checked while nobody changes it: every node reached is live, not
    /// dead, of the pointer's incarnation, the tree's at its place, and counts at least its
    /// entries or children (a process killed holding a reservation leaves one more); if
    /// `strict` (no process was killed, none holds a reservation), exactly them, and only
    /// the root is empty. Its generation and entries (page, frame), in page order, or what
    /// is wrong.
    pub fn check(&self, slot: u32, strict: bool) -> Result<(u32, Vec<(u64, u32)>), String> {
        let (gen, height, top) = root_parts(self.root(slot).load(Ordering::Acquire));
        let mut entries = Vec::new();
        if let Some((top, inc16)) = top {
            let level = height.checked_sub(1).ok_or("a root of height 0")?;
            let inc = self.live_inc(level, top).ok_or(format!("root {top} is not live"))?;
            if inc & 0xffff != inc16 {
                return Err(format!("root {top} is incarnation {inc}, its word says {inc16}"));
            }
            self.check_node(slot, gen, level, top, inc, 0, strict.then_some(true), &mut entries)?;
        }
        Ok((gen, entries))
    }

    #[allow(clippy::too_many_arguments)]
    fn check_node(
        &self,
        slot: u32,
        gen: u32,
        level: u32,
        idx: u32,
        inc: u32,
        base: u64,
        strict_root: Option<bool>,
        out: &mut Vec<(u64, u32)>,
    ) -> Result<(), String> {
        let at = format!("node {idx} at level {level} of file entry {slot}");
        let len = if level == 0 { self.leaves.meta.len() } else { self.inners.meta.len() };
        if idx as usize >= len {
            return Err(format!("{at}: past its pool"));
        }
        let m = self.meta(level, idx);
        let s = m.state.load(Ordering::Acquire);
        if s & LIVE == 0 || s & DEAD != 0 || (s >> 32) as u32 != inc {
            return Err(format!("{at}: state {s:#x}, incarnation {inc} expected live"));
        }
        // Relaxed: fixed while live, which the Acquire load above saw.
        if m.whose.load(Ordering::Relaxed) != whose(slot, gen, level, base) {
            return Err(format!("{at}: another's node"));
        }
        let mut n = 0;
        for i in 0..FANOUT as u64 {
            let page = base + (i << (BITS * level));
            if level == 0 {
                // Acquire: as in `get`.
                if let Some(f) =
                    self.leaves.nodes[idx as usize].slots[i as usize].load(Ordering::Acquire).checked_sub(1)
                {
                    out.push((page, f));
                    n += 1;
                }
            } else {
                let c = self.inners.nodes[idx as usize].slots[i as usize].load(Ordering::Acquire);
                if c != 0 {
                    let (cidx, cinc) = unptr(c);
                    self.check_node(slot, gen, level - 1, cidx, cinc, page, strict_root.map(|_| false), out)?;
                    n += 1;
                }
            }
        }
        if s & COUNT < n || (strict_root.is_some() && s & COUNT != n) {
            return Err(format!("{at}: counts {} of its {n} entries or children", s & COUNT));
        }
        if strict_root == Some(false) && n == 0 {
            return Err(format!("{at}: empty below the root"));
        }
        Ok(())
    }

    /// Marks every entry that has a tree for a sweep at its next generation (`sweep_slot`):
    /// after a process died, which may have left nodes of any tree (an evicting process
    /// removes from trees of files it does not have open). Under the table's lock.
    pub fn mark_trees_leaky(&self) {
        let mut slot = 0;
        while let Some(root) = self.files.root(slot) {
            // Relaxed (both): under the table's lock, which `next_generation` holds too.
            if root_parts(root.load(Ordering::Relaxed)).2.is_some() {
                self.files.leaky(slot).store(1, Ordering::Relaxed);
            }
            slot += 1;
        }
    }

    /// Gives back the live nodes of file `slot` of other generations than its tree's: those
    /// a dead process had taken and not linked, or counted too high, and those of a tree an
    /// insert replaced (see the invariants). After `clear`, under the table's lock; a pass
    /// over every node, so only for entries marked `leaky`.
    pub fn sweep_slot(&self, slot: u32) -> usize {
        let (gen, _, _) = root_parts(self.root(slot).load(Ordering::Acquire));
        let mut freed = 0;
        for level in [0, 1] {
            let metas = if level == 0 { self.leaves.meta } else { self.inners.meta };
            for (i, m) in metas.iter().enumerate() {
                let s = m.state.load(Ordering::Acquire);
                if s & LIVE == 0 {
                    continue;
                }
                // Relaxed: fixed while live; a node going live sets it first (Release above).
                let w = m.whose.load(Ordering::Relaxed);
                if w >> 44 == slot as u64 + 1 && (w >> 36) as u32 & 0xff != gen {
                    freed += self.free_node(level, i as u32, (s >> 32) as u32) as usize;
                }
            }
        }
        freed
    }
}

#[cfg(test)]
mod arena;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
