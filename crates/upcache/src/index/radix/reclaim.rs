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
    unsafe { guard.defer_unchecked(move || super::node::spare::give(Box::from_raw(node))) }
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
