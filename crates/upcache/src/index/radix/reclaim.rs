//! Memory reclamation for retired nodes: crossbeam-epoch normally; under loom (which cannot
//! model crossbeam's global collector) nodes are parked and freed when the tree is dropped.

use super::node::Node;

#[cfg(not(loom))]
pub(crate) use crossbeam_epoch::{pin, Guard};

/// Frees `node` once no thread pinned before this call can still hold a pointer to it.
///
/// # Safety
/// `node` came from `Box::into_raw`, is unreachable from the tree for any thread that pins
/// after this call, and is retired exactly once.
#[cfg(not(loom))]
pub(super) unsafe fn retire(guard: &Guard, node: *mut Node, _graveyard: &Graveyard) {
    // SAFETY: per this function's contract; the closure runs after every guard that could
    // have seen `node` is dropped, and only it owns the box from then on.
    unsafe { guard.defer_unchecked(move || spare::give(Box::from_raw(node))) }
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

/// Nothing to keep outside loom.
#[cfg(not(loom))]
#[derive(Default)]
pub(super) struct Graveyard {
    _nothing: (),
}

/// Stands in for an epoch guard under loom.
#[cfg(loom)]
pub struct Guard;

#[cfg(loom)]
pub(crate) fn pin() -> Guard {
    Guard
}

/// Retired nodes of a tree under loom, freed with the tree.
#[cfg(loom)]
#[derive(Default)]
pub(super) struct Graveyard(crate::sync::Mutex<Vec<usize>>);

#[cfg(loom)]
impl Drop for Graveyard {
    fn drop(&mut self) {
        for p in crate::sync::lock(&self.0).drain(..) {
            // SAFETY: each address was retired once (see `retire`) and the tree is gone.
            drop(unsafe { Box::from_raw(p as *mut Node) });
        }
    }
}

/// # Safety
/// As the non-loom `retire`.
#[cfg(loom)]
pub(super) unsafe fn retire(_guard: &Guard, node: *mut Node, graveyard: &Graveyard) {
    crate::sync::lock(&graveyard.0).push(node as usize);
}
