//! The tree's pools and file entries on the heap, as a segment lays them out, for the unit
//! tests and the loom models, with their structural checks.

use super::*;
use crate::sync::Arc;

/// A file entry as the tree sees it (`FileEntry`'s root, generation and leaky mark).
pub struct Entry {
    pub root: AtomicU64,
    pub gen: AtomicU32,
    pub leaky: AtomicU32,
}

impl Entries for [Entry] {
    fn root(&self, slot: u32) -> Option<&AtomicU64> {
        self.get(slot as usize).map(|e| &e.root)
    }

    fn gen(&self, slot: u32) -> &AtomicU32 {
        &self[slot as usize].gen
    }

    fn leaky(&self, slot: u32) -> &AtomicU32 {
        &self[slot as usize].leaky
    }
}

/// Pools and file entries on the heap, as a segment lays them out .
pub struct Arena {
    pub leaves: Vec<Leaf>,
    pub leaf_meta: Vec<NodeMeta>,
    pub inners: Vec<Inner>,
    pub inner_meta: Vec<NodeMeta>,
    pub heads: [StackHead; 2],
    pub files: Vec<Entry>,
    /// Written first by every thread of a model (`begin`).
    #[cfg(loom)]
    start: AtomicU32,
}

fn meta() -> NodeMeta {
    NodeMeta { state: AtomicU64::new(0), whose: AtomicU64::new(0), next: AtomicU32::new(0), _pad: 0 }
}

impl Arena {
    pub fn new(leaves: usize, inners: usize, files: usize) -> Arc<Arena> {
        let a = Arena {
            leaves: (0..leaves).map(|_| Leaf { slots: std::array::from_fn(|_| AtomicU32::new(0)) }).collect(),
            leaf_meta: (0..leaves).map(|_| meta()).collect(),
            inners: (0..inners)
                .map(|_| Inner { slots: std::array::from_fn(|_| AtomicU64::new(0)) })
                .collect(),
            inner_meta: (0..inners).map(|_| meta()).collect(),
            heads: [AtomicU64::new(0), AtomicU64::new(0)],
            files: (0..files)
                .map(|_| Entry { root: AtomicU64::new(0), gen: AtomicU32::new(0), leaky: AtomicU32::new(0) })
                .collect(),
            #[cfg(loom)]
            start: AtomicU32::new(0),
        };
        let f = a.forest();
        f.leaves.init();
        f.inners.init();
        Arc::new(a)
    }

    pub fn forest(&self) -> Forest<'_, [Entry]> {
        Forest {
            leaves: Pool {
                nodes: &self.leaves,
                meta: &self.leaf_meta,
                free: &self.heads[0],
                #[cfg(not(loom))]
                lazy: None,
            },
            inners: Pool {
                nodes: &self.inners,
                meta: &self.inner_meta,
                free: &self.heads[1],
                #[cfg(not(loom))]
                lazy: None,
            },
            files: &self.files,
        }
    }

    /// Every thread of a model does this first: a write that they all share, so that loom
    /// explores which of them goes first (loom 0.7 never runs a thread whose first access is
    /// a load ahead of the others: tokio-rs/loom#392). Relaxed: it orders nothing.
    #[cfg(loom)]
    pub fn begin(&self) {
        self.start.fetch_add(1, Ordering::Relaxed);
    }

    /// Live leaves and inner nodes.
    pub fn live(&self) -> (usize, usize) {
        let f = self.forest();
        (f.leaves.live(), f.inners.live())
    }

    /// Nodes in each free stack, following it: none live, and no cycle (so none twice).
    pub fn stacked(&self) -> (usize, usize) {
        let count = |metas: &[NodeMeta], head: &StackHead| {
            let mut n = 0;
            // Relaxed (here and below): the models check quiet pools, after every join.
            let mut at = head.load(Ordering::Relaxed) as u32;
            while let Some(i) = at.checked_sub(1) {
                assert_eq!(
                    metas[i as usize].state.load(Ordering::Relaxed) & LIVE,
                    0,
                    "live node {i} in the stack"
                );
                n += 1;
                assert!(n <= metas.len(), "the free stack has a cycle");
                at = super::next_in_stack(metas.len(), i, metas[i as usize].next.load(Ordering::Relaxed));
            }
            n
        };
        (count(&self.leaf_meta, &self.heads[0]), count(&self.inner_meta, &self.heads[1]))
    }

    /// Every node is live or in its free stack, exactly once.
    pub fn check_pools(&self) {
        let (l, i) = self.live();
        let (sl, si) = self.stacked();
        assert_eq!(
            (l + sl, i + si),
            (self.leaves.len(), self.inners.len()),
            "live {:?} stacked {:?}",
            (l, i),
            (sl, si)
        );
    }

    /// File `slot`'s tree, quiet: every node reached is live, not dead, the tree's at its
    /// place, and counts exactly its entries or children; only the root may be empty
    /// (`Forest::check`, strict). The entries, in page order.
    pub fn check_tree(&self, slot: usize) -> Vec<(u64, u32)> {
        self.forest().check(slot as u32, true).unwrap_or_else(|e| panic!("{e}")).1
    }
}
