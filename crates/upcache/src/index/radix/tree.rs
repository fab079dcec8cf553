//! The ccXArray tree: lock-free lookup, insert and delete by CAS on slots, node creation by
//! the winner strategy, concurrent root expansion, lazy logical deletion with reuse, and
//! physical removal through epoch-based reclamation.
//!
//! # Invariants (the paper's Properties 1-3, and what keeps them)
//! - **I1 (Property 1, unique nodes).** A slot goes from null to a node only by a CAS from
//!   null; the losers free their own node and descend into the winner's. Nodes never move:
//!   the only structural change besides that is a new root put above the old one (expansion)
//!   and a dead node taken out of its slot. So each page has exactly one leaf at a time.
//! - **I2 (counts).** A node's `count` is its occupied slots (leaf) or live children (inner),
//!   plus one per reservation. A thread writes an entry into a leaf only while it holds a
//!   reservation on it, and only creates or revives a child while holding one on the parent;
//!   it credits the parent *before* it gives up its reservation there. So a live non-root
//!   node is counted by its parent, and a node with `count > 0` is never deleted.
//! - **I3 (Property 2, deleted nodes are invisible).** `DEL` is set only by a CAS from `0`:
//!   a deleted node has no entries and no live children, so a lookup passing through it finds
//!   nothing without checking the flag, and no insert can land in it (reserving fails).
//!   Reuse is a CAS from `DEL` to a count of 1, done only through a reserved parent.
//! - **I4 (Property 3, physical removal at safe points).** A node is freed only after it is
//!   `DEAD` (a CAS from exactly `DEL`, so nobody revived it), taken out of its parent's slot
//!   by a CAS (whoever wins that CAS retires it, so exactly once), and then only when every
//!   thread that could have read the pointer has left its epoch. The paper's safe point is
//!   "no searches in flight"; the epoch is that point, found per node instead of per file.
//!   The root is never deleted; the tree is torn down whole on drop.
//!
//! # Reclamation: why epochs, not the paper's per-thread tracking
//! The paper counts references per node (`refcnt`, incremented by every search on every node
//! of its path). On a hit path that is two atomic read-modify-writes per level on lines that
//! every thread shares, the root's above all: it turns read-mostly lookups into cache-line
//! ping-pong. An epoch pin is one store to a thread-local line; lookups then write nothing
//! shared at all. Deferred frees are batched by crossbeam-epoch.
//!
//! Deleted nodes stay linked, for reuse by the next insert below them, until more than
//! `REUSE_POOL` (64) nodes and a quarter of all nodes are deleted; from then on each deletion
//! reaps its topmost deleted node. So a file whose pages come and go keeps its nodes instead
//! of freeing and allocating them, and a file that shrank for good gives them back.

use super::node::{child_shift, span, Node, Reserve, BITS, FANOUT};
use super::reclaim::{self, Graveyard, Guard};
use crate::frame::prefetch;
use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// Bytes of one node.
pub const NODE_BYTES: usize = std::mem::size_of::<Node>();

/// Logically deleted nodes kept for reuse before deletions start freeing them.
const REUSE_POOL: usize = 64;

/// The tree. Leaf slots hold nonzero `u32` entry words; zero is empty.
pub struct Tree {
    head: AtomicPtr<Node>,
    /// Nodes allocated and not yet retired.
    nodes: AtomicUsize,
    /// Of those, logically deleted ones still linked (the reuse pool).
    deleted: AtomicUsize,
    graveyard: Graveyard,
}

// SAFETY: all shared state is atomics; nodes are heap objects owned by the tree and freed
// only through the epoch protocol (I4) or by the tree's own drop.
unsafe impl Send for Tree {}
// SAFETY: as above.
unsafe impl Sync for Tree {}

/// A leaf slot found under a guard: the leaf it belongs to and the slot itself.
pub struct LeafSlot<'g> {
    leaf: &'g Node,
    slot: &'g AtomicU32,
}

impl LeafSlot<'_> {
    /// The entry word (0 when empty). Acquire: pairs with the Release CAS that stored it, so
    /// whatever the storer did before (filling a frame) is visible.
    pub fn load(&self) -> u32 {
        self.slot.load(Ordering::Acquire)
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree {
            head: AtomicPtr::new(std::ptr::null_mut()),
            nodes: AtomicUsize::new(0),
            deleted: AtomicUsize::new(0),
            graveyard: Graveyard::default(),
        }
    }
}

impl Tree {
    /// Pins the current thread's epoch; pointers read from the tree stay valid while the
    /// guard lives.
    pub fn pin(&self) -> Guard {
        reclaim::pin()
    }

    fn node<'g>(&self, p: *mut Node, _guard: &'g Guard) -> &'g Node {
        debug_assert!(!p.is_null());
        // SAFETY: `p` was read from the tree while `_guard` pinned the epoch, and nodes are
        // freed only through `reclaim::retire`, which waits for every such guard (I4).
        unsafe { &*p }
    }

    /// The leaf slot of `page`, if the leaf exists. Lock-free and writes nothing shared.
    pub fn find<'g>(&self, page: u64, guard: &'g Guard) -> Option<LeafSlot<'g>> {
        self.find_leaf(page, false, guard)
    }

    /// `find` for a caller that will also change the leaf's count (a removal or a
    /// reservation): the leaf's state line is fetched together with its slot's, so that two
    /// cache misses on a cold leaf overlap instead of coming one after the other (a removal
    /// on eviction finds its leaf cold; bench/RESULTS.md, issue 18).
    fn find_to_count<'g>(&self, page: u64, guard: &'g Guard) -> Option<LeafSlot<'g>> {
        self.find_leaf(page, true, guard)
    }

    fn find_leaf<'g>(&self, page: u64, header: bool, guard: &'g Guard) -> Option<LeafSlot<'g>> {
        // Acquire (here and below): pairs with the Release CAS that published the node, so
        // its fields are initialized.
        let h = self.head.load(Ordering::Acquire);
        if h.is_null() {
            return None;
        }
        let mut n = self.node(h, guard);
        if !n.covers(page) {
            return None;
        }
        // A child's shift follows from its parent's (`child_shift`, fixed at creation), so
        // below the root the walk knows each node's shift without reading it: a lookup touches
        // one line of each node, its slot's, instead of also the header's (half the cache
        // misses of a lookup in a large file, bench/RESULTS.md, issue 18).
        let mut shift = n.shift;
        loop {
            if shift == 0 {
                // SAFETY: `shift` is `n`'s (its own, or its parent's child shift), so a leaf.
                let slot = unsafe { n.entry_known_leaf(page) };
                return Some(LeafSlot { leaf: n, slot });
            }
            // SAFETY: `shift` is `n`'s, as above, and not 0.
            let c = unsafe { n.slot_at(page, shift) }.load(Ordering::Acquire);
            if c.is_null() {
                return None;
            }
            n = self.node(c, guard);
            shift = child_shift(shift);
            debug_assert_eq!(n.shift, shift, "a child's shift is its parent's child shift");
            if header && shift == 0 {
                prefetch(&n.state as *const _);
            }
        }
    }

    /// Starts fetching the line of `page`'s leaf slot (the nodes above it are read now; in a
    /// tree in use they are few and stay in the CPU's caches).
    pub fn prefetch_slot(&self, page: u64) {
        let g = self.pin();
        if let Some(s) = self.find(page, &g) {
            prefetch(s.slot as *const AtomicU32);
        }
    }

    /// The entry of `page`, or 0.
    pub fn get(&self, page: u64) -> u32 {
        let g = self.pin();
        self.find(page, &g).map_or(0, |s| s.load())
    }

    /// Stores `entry` (nonzero) for `page` unless an entry exists; returns that one then.
    pub fn insert_if_absent(&self, page: u64, entry: u32) -> Result<(), u32> {
        debug_assert!(entry != 0);
        let g = self.pin();
        let leaf = self.reserve_leaf(page, &g);
        match leaf.entry(page).compare_exchange(0, entry, Ordering::SeqCst, Ordering::SeqCst) {
            // The reservation becomes the slot's count.
            Ok(_) => Ok(()),
            Err(cur) => {
                self.debit(leaf, &g);
                Err(cur)
            }
        }
    }

    /// Replaces `page`'s entry `old` (nonzero) by `new` (nonzero); false if it was not `old`.
    pub fn replace(&self, page: u64, old: u32, new: u32) -> bool {
        debug_assert!(old != 0 && new != 0);
        let g = self.pin();
        let Some(s) = self.find(page, &g) else { return false };
        s.slot.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Removes `page`'s entry if `pred` accepts it; returns whether it did.
    pub fn remove_if(&self, page: u64, mut pred: impl FnMut(u32) -> bool) -> bool {
        let g = self.pin();
        let Some(s) = self.find_to_count(page, &g) else { return false };
        let mut cur = s.slot.load(Ordering::SeqCst);
        loop {
            if cur == 0 || !pred(cur) {
                return false;
            }
            match s.slot.compare_exchange(cur, 0, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // The slot's count goes with it.
        self.debit(s.leaf, &g);
        true
    }

    /// Calls `f(page, entry)` for every entry with `page >= from`, in page order. Entries
    /// added or removed meanwhile may or may not be seen.
    pub fn for_each_from(&self, from: u64, mut f: impl FnMut(u64, u32)) {
        let g = self.pin();
        let h = self.head.load(Ordering::Acquire);
        if !h.is_null() {
            self.walk(self.node(h, &g), 0, from, &mut f, &g);
        }
    }

    fn walk(&self, n: &Node, base: u64, from: u64, f: &mut impl FnMut(u64, u32), g: &Guard) {
        if n.is_leaf() {
            for (i, slot) in n.entries().iter().enumerate() {
                let page = base + i as u64;
                let e = slot.load(Ordering::Acquire);
                if page >= from && e != 0 {
                    f(page, e);
                }
            }
            return;
        }
        for (i, slot) in n.children().iter().enumerate() {
            let start = base as u128 + ((i as u128) << n.shift);
            let end = start + (1u128 << n.shift);
            if end <= from as u128 || start > u64::MAX as u128 {
                continue;
            }
            let p = slot.load(Ordering::Acquire);
            if !p.is_null() {
                self.walk(self.node(p, g), start as u64, from, f, g);
            }
        }
    }

    /// Nodes allocated and not retired, and how many of them are logically deleted.
    pub fn node_counts(&self) -> (usize, usize) {
        (self.nodes.load(Ordering::Relaxed), self.deleted.load(Ordering::Relaxed))
    }

    /// The root, expanded until it spans `page`.
    fn root_covering<'g>(&self, page: u64, g: &'g Guard) -> &'g Node {
        loop {
            let h = self.head.load(Ordering::SeqCst);
            if h.is_null() {
                let mut shift = 0;
                while span(shift) < 64 && page >> span(shift) != 0 {
                    shift = span(shift);
                }
                let new = Box::into_raw(Node::new(shift, std::ptr::null_mut(), 0));
                match self.head.compare_exchange(
                    std::ptr::null_mut(),
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => {
                        self.nodes.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
                        return self.node(new, g);
                    }
                    // SAFETY: never published; we still own it.
                    Err(_) => drop(unsafe { Box::from_raw(new) }),
                }
                continue;
            }
            let root = self.node(h, g);
            if root.covers(page) {
                return root;
            }
            // Held until the old root has its parent, so it cannot empty while it has none.
            if !root.try_reserve_live() {
                continue; // pushed down and deleted meanwhile
            }
            // Expansion: a new root whose slot 0 is the old root, counted as its live child.
            let new = Node::new(span(root.shift), std::ptr::null_mut(), 1);
            new.children()[0].store(h, Ordering::Relaxed); // Relaxed: published by the CAS below
            let new = Box::into_raw(new);
            match self.head.compare_exchange(h, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.nodes.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
                    root.parent.store(new, Ordering::SeqCst);
                }
                // SAFETY: never published; we still own it.
                Err(_) => drop(unsafe { Box::from_raw(new) }),
            }
            self.debit(root, g);
        }
    }

    /// The leaf of `page`, created if needed, with a reservation held by the caller.
    fn reserve_leaf<'g>(&self, page: u64, g: &'g Guard) -> &'g Node {
        // Fast path: a live leaf. By I2 its ancestors are live and stay so while we hold it.
        if let Some(s) = self.find_to_count(page, g) {
            if s.leaf.try_reserve_live() {
                return s.leaf;
            }
        }
        'restart: loop {
            let root = self.root_covering(page, g);
            if !root.try_reserve_live() {
                // A newer root went above it and it was deleted meanwhile: start again.
                continue 'restart;
            }
            let mut node = root;
            while !node.is_leaf() {
                let child = self.reserve_child(node, page, g);
                // Cannot reach zero: `child` is live and counted by `node` (I2).
                let left = node.debit();
                debug_assert!(left > 0);
                node = child;
            }
            return node;
        }
    }

    /// Reserves (creating or reviving) the child of reserved `node` toward `page`.
    fn reserve_child<'g>(&self, node: &'g Node, page: u64, g: &'g Guard) -> &'g Node {
        let slot = node.slot(page);
        loop {
            let cur = slot.load(Ordering::SeqCst);
            if cur.is_null() {
                // Winner strategy: credit the parent for the child first (we hold it, so it is
                // live), then race to install; a loser takes the credit back and frees its node.
                let new =
                    Box::into_raw(Node::new(child_shift(node.shift), node as *const Node as *mut Node, 1));
                node.credit();
                match slot.compare_exchange(std::ptr::null_mut(), new, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        self.nodes.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
                        return self.node(new, g);
                    }
                    Err(_) => {
                        // Cannot reach zero: we still hold our reservation on `node`.
                        node.debit();
                        // SAFETY: never published; we still own it.
                        drop(unsafe { Box::from_raw(new) });
                        continue;
                    }
                }
            }
            let child = self.node(cur, g);
            match child.reserve_child() {
                Reserve::Live => return child,
                Reserve::Revived => {
                    self.deleted.fetch_sub(1, Ordering::Relaxed); // Relaxed: a statistic
                    node.credit();
                    return child;
                }
                Reserve::Dead => self.unlink(node, slot, cur, g),
            }
        }
    }

    /// Gives back one unit of `n`'s count; an emptied node is deleted logically, and the
    /// deletion climbs while parents empty too (the paper's Algorithm 4, leaf to root).
    fn debit(&self, n: &Node, g: &Guard) {
        if n.debit() != 0 {
            return;
        }
        let mut n = n;
        let mut top = None;
        loop {
            let parent = n.parent.load(Ordering::SeqCst);
            if parent.is_null() {
                break; // the root
            }
            // Counted before the mark, so a reviver's decrement never comes first.
            self.deleted.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
            if !n.try_mark_deleted() {
                self.deleted.fetch_sub(1, Ordering::Relaxed); // Relaxed: a statistic
                break; // reused before we could delete it
            }
            let p = self.node(parent, g);
            top = Some((n, p));
            // The parent's credit for its now-deleted child.
            if p.debit() != 0 {
                break;
            }
            n = p;
        }
        if let Some((n, parent)) = top {
            let (nodes, deleted) = self.node_counts();
            if deleted > REUSE_POOL && deleted * 4 > nodes {
                self.reap(n, parent, g);
            }
        }
    }

    /// Frees a logically deleted node and its (deleted) subtree, unless it was reused.
    fn reap(&self, n: &Node, parent: &Node, g: &Guard) {
        if !n.try_mark_dead() {
            return;
        }
        let slot = parent.children().iter().find(|s| std::ptr::eq(s.load(Ordering::SeqCst), n));
        if let Some(slot) = slot {
            self.unlink(parent, slot, n as *const Node as *mut Node, g);
        }
    }

    /// Takes dead `dead` out of `slot` of `parent`; whoever wins retires it with its subtree.
    fn unlink(&self, _parent: &Node, slot: &AtomicPtr<Node>, dead: *mut Node, g: &Guard) {
        if slot.compare_exchange(dead, std::ptr::null_mut(), Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return;
        }
        let mut freed = 0;
        let mut deleted = 0;
        self.retire_subtree(dead, &mut freed, &mut deleted, g);
        // Relaxed: statistics.
        self.nodes.fetch_sub(freed, Ordering::Relaxed);
        self.deleted.fetch_sub(deleted, Ordering::Relaxed);
    }

    /// Retires an unlinked node and every child it still links. Its subtree is frozen: every
    /// node in it is deleted (I2, I3) and cannot be revived through a dead parent.
    fn retire_subtree(&self, p: *mut Node, freed: &mut usize, deleted: &mut usize, g: &Guard) {
        let n = self.node(p, g);
        if !n.is_leaf() {
            for slot in n.children() {
                let c = slot.load(Ordering::SeqCst);
                // Take each child out by CAS, so a thread unlinking it concurrently (it saw it
                // dead) and we never both retire it.
                if !c.is_null()
                    && slot
                        .compare_exchange(c, std::ptr::null_mut(), Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    self.retire_subtree(c, freed, deleted, g);
                }
            }
        }
        debug_assert!(n.is_deleted());
        *freed += 1;
        *deleted += 1;
        // SAFETY: `p` is out of the tree (unlinked by the CAS our caller won), so only threads
        // pinned now can reach it, and it is retired once: by the winner of that CAS.
        unsafe { reclaim::retire(g, p, &self.graveyard) };
    }

    /// Number of entries (a full walk).
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.for_each_from(0, |_, _| n += 1);
        n
    }

    /// Whether the tree holds no entries (a full walk).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(all(test, not(loom)))]
    pub(super) fn check_counts(&self) {
        let g = self.pin();
        let h = self.head.load(Ordering::SeqCst);
        if !h.is_null() {
            check_node(self.node(h, &g), &g, self);
        }
    }
}

/// Test helper: every quiescent node's count equals its occupied slots or live children.
#[cfg(all(test, not(loom)))]
fn check_node(n: &Node, g: &Guard, t: &Tree) -> bool {
    use super::node::{DEAD, DEL};
    let st = n.state.load(Ordering::SeqCst);
    let mut live = 0;
    if n.is_leaf() {
        live = n.entries().iter().filter(|e| e.load(Ordering::SeqCst) != 0).count() as u64;
    } else {
        for s in n.children() {
            let p = s.load(Ordering::SeqCst);
            if !p.is_null() && check_node(t.node(p, g), g, t) {
                live += 1;
            }
        }
    }
    if st & (DEL | DEAD) != 0 {
        assert_eq!(live, 0, "a deleted node has live content");
        false
    } else {
        assert_eq!(st, live, "count differs from live content");
        true
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        fn free(p: *mut Node) {
            // SAFETY: `&mut self`: no other thread can reach the tree; each node is linked
            // from exactly one slot (I1), so it is freed once.
            let n = unsafe { Box::from_raw(p) };
            if !n.is_leaf() {
                for s in n.children() {
                    let c = s.load(Ordering::Relaxed); // Relaxed: exclusive access
                    if !c.is_null() {
                        free(c);
                    }
                }
            }
        }
        let h = self.head.load(Ordering::Relaxed); // Relaxed: exclusive access
        if !h.is_null() {
            free(h);
        }
    }
}

const _: () = assert!(FANOUT == 1 << BITS);
