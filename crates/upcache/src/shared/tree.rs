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
//! before use. Lookups, which write nothing, need no protection (see above).
//!
//! # Invariants
//! - A node's `count` is its entries (a leaf) or linked children (an inner node), plus one per
//!   reservation; a non-root node is marked `DEAD` only by the CAS that takes it to 0, and a
//!   `DEAD` node is never reserved. So an entry or child is never put in a node about to go.
//! - A child pointer is stored once, when its node is made, and taken out once (to 0 by the
//!   node's deleter, or to a new node by an insert that met it dead): whoever takes it out
//!   gives the node back, and the deleter then releases the parent's count.
//! - A node is in its pool's free stack iff its `state` is not `LIVE`: only the winner of the
//!   CAS that clears `LIVE` pushes it, so a node is never pushed twice.
//! - A root is never deleted while it is the root; the whole tree is given back when its
//!   entry takes its next generation (`clear`), which happens only while nobody has the file
//!   open, so no insert runs in a tree being cleared.
//! - A process killed inside an operation leaves at worst a count too high (the node then
//!   stays until its entry's next generation) or a node popped and not yet live (lost until
//!   `sweep`); never an entry in a node that is free, nor a node in the stack twice.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::files::FileEntry;

/// Page bits per level: 64 slots a node.
const BITS: u32 = 6;
const FANOUT: usize = 1 << BITS;
const MASK: u64 = FANOUT as u64 - 1;
/// Levels enough for every page a key holds (`frame::MAX_PAGES`, 2^36).
const MAX_HEIGHT: u32 = 6;

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

const _: () = assert!(std::mem::size_of::<Leaf>() == 256 && std::mem::size_of::<Inner>() == 512);

/// A node's bookkeeping, beside the pool's nodes.
#[repr(C)]
pub(crate) struct NodeMeta {
    /// `LIVE`, `DEAD`, the count and the incarnation (bumped at each allocation).
    state: AtomicU64,
    /// Whose node it is while live (`whose`): set before it goes live, fixed until it is free.
    whose: AtomicU64,
    /// The next free node + 1 in the pool's stack.
    next: AtomicU32,
    _pad: u32,
}

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

/// The root word: generation (bits 56..64), height (48..56), root node + 1 (low 32); 0 nodes
/// is an empty tree.
fn root_word(gen: u32, height: u32, idx: Option<u32>) -> u64 {
    ((gen & 0xff) as u64) << 56 | (height as u64) << 48 | idx.map_or(0, |i| i as u64 + 1)
}

fn root_parts(r: u64) -> (u32, u32, Option<u32>) {
    ((r >> 56) as u32, (r >> 48) as u32 & 0xff, (r as u32).checked_sub(1))
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
}

/// One pool of nodes and its free stack.
pub(crate) struct Pool<'a, N> {
    pub nodes: &'a [N],
    pub meta: &'a [NodeMeta],
    pub free: &'a StackHead,
}

impl<N> Pool<'_, N> {
    /// Links every node into the free stack: at creation, before any process attaches.
    pub fn init(&self) {
        for (i, m) in self.meta.iter().enumerate() {
            // Relaxed: published with the segment's magic number.
            m.next.store(if i + 1 < self.meta.len() { i as u32 + 2 } else { 0 }, Ordering::Relaxed);
        }
        self.free.store(if self.meta.is_empty() { 0 } else { 1 }, Ordering::Relaxed);
    }

    /// A free node, live for `whose` with a count of 1 (the caller's reservation) and a new
    /// incarnation, its slots still to be zeroed by the caller; None if the pool is empty.
    fn pop(&self, whose: u64) -> Option<(u32, u32)> {
        // Acquire: the pusher's `next` store comes with the head.
        let mut head = self.free.load(Ordering::Acquire);
        let idx = loop {
            let idx = (head as u32).checked_sub(1)?;
            let m = self.meta.get(idx as usize)?;
            // Relaxed: if the node was popped meanwhile, the head moved and the CAS fails.
            let next = m.next.load(Ordering::Relaxed);
            let new = ((head >> 32) + 1) << 32 | next as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => break idx,
                Err(h) => head = h,
            }
        };
        let m = &self.meta[idx as usize];
        // Relaxed: only we touch a popped node until it goes live (Release below).
        let inc = ((m.state.load(Ordering::Relaxed) >> 32) as u32).wrapping_add(1);
        m.whose.store(whose, Ordering::Relaxed);
        // Release: whoever reserves it through its new pointer sees `whose`.
        m.state.store((inc as u64) << 32 | LIVE | 1, Ordering::Release);
        Some((idx, inc))
    }

    /// Gives node `idx` of incarnation `inc` back, unless it is free or another incarnation
    /// already (a clear or a sweep gave it back first).
    fn free_node(&self, idx: u32, inc: u32) {
        let m = &self.meta[idx as usize];
        let mut s = m.state.load(Ordering::Acquire);
        loop {
            if s & LIVE == 0 || (s >> 32) as u32 != inc {
                return;
            }
            // AcqRel: the winner alone pushes; what was written into the node comes before.
            match m.state.compare_exchange_weak(s, (inc as u64) << 32, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            // Relaxed: published by the head's Release CAS.
            m.next.store(head as u32, Ordering::Relaxed);
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
                return Reserved::Dead;
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

/// The trees of every file entry.
pub(crate) struct Forest<'a> {
    pub leaves: Pool<'a, Leaf>,
    pub inners: Pool<'a, Inner>,
    pub files: &'a [FileEntry],
}

impl Forest<'_> {
    fn root(&self, slot: u32) -> &AtomicU64 {
        &self.files[slot as usize].root
    }

    fn meta(&self, level: u32, idx: u32) -> &NodeMeta {
        if level == 0 {
            &self.leaves.meta[idx as usize]
        } else {
            &self.inners.meta[idx as usize]
        }
    }

    fn pop(&self, level: u32, whose: u64) -> Option<(u32, u32)> {
        let got = if level == 0 { self.leaves.pop(whose) } else { self.inners.pop(whose) };
        if let Some((idx, _)) = got {
            // Relaxed (all): the node is not yet reachable; its pointer's Release CAS (or the
            // root word's) publishes the zeros.
            if level == 0 {
                self.leaves.nodes[idx as usize].slots.iter().for_each(|s| s.store(0, Ordering::Relaxed));
            } else {
                self.inners.nodes[idx as usize].slots.iter().for_each(|s| s.store(0, Ordering::Relaxed));
            }
        }
        got
    }

    fn free_node(&self, level: u32, idx: u32, inc: u32) {
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

    /// The frame file `slot`'s tree of generation `gen` has for `page`, with no lock: a hint.
    pub fn get(&self, slot: u32, gen: u32, page: u64) -> Option<u32> {
        // Acquire (root and slots): a node reached comes with what its maker stored.
        let (g, height, root) = root_parts(self.root(slot).load(Ordering::Acquire));
        let mut idx = root?;
        if g != gen & 0xff || page >> span(height - 1) != 0 {
            return None;
        }
        for level in (1..height).rev() {
            let c = self.inners.nodes.get(idx as usize)?.slots[slot_of(level, page)].load(Ordering::Acquire);
            idx = (c as u32).checked_sub(1)?;
        }
        let f = self.leaves.nodes.get(idx as usize)?.slots[slot_of(0, page)].load(Ordering::Acquire);
        f.checked_sub(1)
    }

    /// Makes frame `f` page `page`'s in file `slot`'s tree of generation `gen` (the file is
    /// open, so that is its current one), unless another frame is.
    pub fn insert(&self, slot: u32, gen: u32, page: u64, f: u32) -> Insert {
        let root = self.root(slot);
        'restart: loop {
            let r = root.load(Ordering::Acquire);
            let (g, height, top) = root_parts(r);
            if g != gen & 0xff {
                debug_assert!(false, "insert into generation {gen} of a tree of {g}");
                return Insert::Full;
            }
            let Some(top) = top else {
                // The first page: a root leaf, counted by nobody.
                let Some((idx, inc)) = self.pop(0, whose(slot, gen, 0, 0)) else { return Insert::Full };
                self.leaves.meta[idx as usize].state.store((inc as u64) << 32 | LIVE, Ordering::Release);
                // Release: the zeroed leaf comes with the root word.
                if root
                    .compare_exchange(r, root_word(gen, 1, Some(idx)), Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    self.leaves.free_node(idx, inc);
                }
                continue;
            };
            if height < MAX_HEIGHT && page >> span(height - 1) != 0 {
                // Expansion: a root above the old one, whose count is its one child.
                let Some(inc) = self.live_inc(height - 1, top) else { continue };
                let Some((idx, new_inc)) = self.pop(height, whose(slot, gen, height, 0)) else {
                    return Insert::Full;
                };
                // Relaxed: published by the root word's Release CAS.
                self.inners.nodes[idx as usize].slots[0].store(ptr(top, inc), Ordering::Relaxed);
                let up = root_word(gen, height + 1, Some(idx));
                if root.compare_exchange(r, up, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    self.inners.free_node(idx, new_inc);
                }
                continue;
            }
            // Descend, holding a reservation on the node we are in.
            let mut level = height - 1;
            let mut idx = top;
            let Some(mut inc) = self.live_inc(level, top) else { continue };
            match self.reserve(level, idx, inc, whose(slot, gen, level, page)) {
                Reserved::Held => {}
                Reserved::Stranger => {
                    self.release(level, idx, inc);
                    continue;
                }
                Reserved::Dead | Reserved::Gone => continue,
            }
            while level > 0 {
                let s = &self.inners.nodes[idx as usize].slots[slot_of(level, page)];
                let child_whose = whose(slot, gen, level - 1, page);
                // Acquire: a child reached comes with its maker's stores.
                let c = s.load(Ordering::Acquire);
                if c == 0 {
                    let Some((cidx, cinc)) = self.pop(level - 1, child_whose) else {
                        self.release(level, idx, inc);
                        return Insert::Full;
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
                        // A pointer of a node reused by now; the slot has moved on.
                        self.release(level - 1, cidx, cinc);
                    }
                    Reserved::Dead => {
                        // Its deleter may have died before unlinking it: replace it.
                        let Some((nidx, ninc)) = self.pop(level - 1, child_whose) else {
                            self.release(level, idx, inc);
                            return Insert::Full;
                        };
                        if s.compare_exchange(c, ptr(nidx, ninc), Ordering::AcqRel, Ordering::Acquire).is_ok()
                        {
                            // The parent counts the new child instead of the dead one.
                            self.free_node(level - 1, cidx, cinc);
                            self.release(level, idx, inc);
                            (idx, inc, level) = (nidx, ninc, level - 1);
                        } else {
                            self.free_node(level - 1, nidx, ninc);
                        }
                    }
                    Reserved::Gone => {
                        // Freed since we read the slot, so the slot changed: read it again.
                        if s.load(Ordering::Acquire) == c {
                            // Only if its unlinker died between the two: drop our node and
                            // start again rather than spin.
                            self.release(level, idx, inc);
                            continue 'restart;
                        }
                    }
                }
            }
            let s = &self.leaves.nodes[idx as usize].slots[slot_of(0, page)];
            // AcqRel: the frame's key and `home` (stored before) go with the entry; a loser
            // sees the winner's.
            return match s.compare_exchange(0, f + 1, Ordering::AcqRel, Ordering::Acquire) {
                // Our reservation on the leaf is now its count of the entry.
                Ok(_) => Insert::Placed,
                Err(g) => {
                    self.release(0, idx, inc);
                    Insert::Taken(g - 1)
                }
            };
        }
    }

    fn live_inc(&self, level: u32, idx: u32) -> Option<u32> {
        if level == 0 {
            self.leaves.live_inc(idx)
        } else {
            self.inners.live_inc(idx)
        }
    }

    /// Takes frame `f` out of page `page`'s slot in file `slot`'s tree, if it is there and the
    /// tree is of generation `gen`. The caller holds `f`'s lock, so `f` is in no other slot.
    pub fn remove(&self, slot: u32, gen: u32, page: u64, f: u32) -> bool {
        let (g, height, top) = root_parts(self.root(slot).load(Ordering::Acquire));
        let Some(mut idx) = top else { return false };
        if g != gen & 0xff || page >> span(height - 1) != 0 {
            return false;
        }
        let Some(mut inc) = self.live_inc(height - 1, idx) else { return false };
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
        // AcqRel: whoever next places the page sees our frame gone. Only our frame's number
        // can be there: a node reused since we read its pointer holds f only if we put it.
        if leaf.slots[slot_of(0, page)]
            .compare_exchange(f + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.release(0, idx, inc);
        true
    }

    /// Lowers node `idx`'s count (incarnation `inc`, at `level`); the node whose count goes to
    /// 0 and is not a root is marked dead, unlinked and given back, and its parent released.
    fn release(&self, level: u32, idx: u32, inc: u32) {
        let m = self.meta(level, idx);
        let mut s = m.state.load(Ordering::Acquire);
        loop {
            if s & LIVE == 0 || (s >> 32) as u32 != inc || s & COUNT == 0 {
                // Given back by a clear or a sweep meanwhile.
                return;
            }
            let n = s - 1;
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
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    fn is_root(&self, level: u32, idx: u32, m: &NodeMeta) -> bool {
        // Relaxed: fixed while the node is live.
        let w = m.whose.load(Ordering::Relaxed);
        let slot = ((w >> 44) as u32).wrapping_sub(1);
        let Some(e) = self.files.get(slot as usize) else { return true };
        let (_, height, top) = root_parts(e.root.load(Ordering::Acquire));
        // A root that gets a new root above it after this answer stays, empty, until its
        // pages are used again or its entry's next generation.
        top == Some(idx) && height == level + 1
    }

    /// Takes dead node `idx` out of its parent and gives both back as their counts say.
    fn unlink(&self, level: u32, idx: u32, inc: u32, m: &NodeMeta) {
        // Relaxed: fixed while the node is live (and it is ours to free).
        let w = m.whose.load(Ordering::Relaxed);
        let (slot, gen) = (((w >> 44) as u32).wrapping_sub(1), (w >> 36) as u32 & 0xff);
        let page = (w & u32::MAX as u64) << span(level);
        let Some(e) = self.files.get(slot as usize) else { return };
        let (g, height, top) = root_parts(e.root.load(Ordering::Acquire));
        let Some(mut p) = top else { return };
        if g != gen || level + 1 >= height {
            return; // the tree was cleared: the clear gives the nodes back
        }
        let Some(mut pinc) = self.inners.live_inc(p) else { return };
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
        // AcqRel: a reader that sees the slot empty sees no entry below it; only the node's
        // one pointer has this value, so winning it makes the node ours to give back.
        if s.compare_exchange(ptr(idx, inc), 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            self.free_node(level, idx, inc);
            self.release(level + 1, p, pinc);
        }
    }

    /// The frames file `slot`'s tree of generation `gen` has for pages `from..to`, with their
    /// pages: hints, each to be checked under the frame's lock.
    pub fn range(&self, slot: u32, gen: u32, from: u64, to: u64) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let (g, height, top) = root_parts(self.root(slot).load(Ordering::Acquire));
        if let Some(top) = top.filter(|_| g == gen & 0xff && from < to) {
            self.walk(height - 1, top, 0, from, to, &mut out);
        }
        out
    }

    fn walk(&self, level: u32, idx: u32, base: u64, from: u64, to: u64, out: &mut Vec<(u32, u64)>) {
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
                    out.push((f, first));
                }
            } else {
                let Some(node) = self.inners.nodes.get(idx as usize) else { return };
                let c = node.slots[i as usize].load(Ordering::Acquire);
                if c != 0 {
                    self.walk(level - 1, unptr(c).0, first, from, to, out);
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
        if let Some(top) = top {
            if let Some(inc) = self.live_inc(height - 1, top) {
                self.clear_node(slot, old, height - 1, top, inc);
            }
        }
    }

    fn clear_node(&self, slot: u32, gen: u32, level: u32, idx: u32, inc: u32) {
        let m = self.meta(level, idx);
        // Relaxed: `whose` is fixed while the node is live, which `live_inc` (Acquire) saw.
        let w = m.whose.load(Ordering::Relaxed);
        if self.live_inc(level, idx) != Some(inc) || w >> 36 != (slot as u64 + 1) << 8 | gen as u64 {
            return;
        }
        if level > 0 {
            for s in &self.inners.nodes[idx as usize].slots {
                // Acquire: as in `get`.
                let c = s.load(Ordering::Acquire);
                if c != 0 {
                    let (cidx, cinc) = unptr(c);
                    if (cidx as usize)
                        < if level == 1 { self.leaves.meta.len() } else { self.inners.meta.len() }
                    {
                        self.clear_node(slot, gen, level - 1, cidx, cinc);
                    }
                }
            }
        }
        self.free_node(level, idx, inc);
    }

    /// Gives back the live nodes of no tree: those of a generation their entry has left (the
    /// nodes a killed process had popped and not linked go back at the entry's next
    /// generation). Under the table's lock, which every generation change takes.
    pub fn sweep(&self) -> usize {
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
                let slot = ((w >> 44) as u32).wrapping_sub(1);
                let Some(e) = self.files.get(slot as usize) else { continue };
                let (g, _, _) = root_parts(e.root.load(Ordering::Acquire));
                if g != (w >> 36) as u32 & 0xff {
                    self.free_node(level, i as u32, (s >> 32) as u32);
                    freed += 1;
                }
            }
        }
        freed
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
