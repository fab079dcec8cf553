//! Loads that an asynchronous read queue starts and ends ([`crate::api::queue`]): the frame
//! is published `LOCKED` in the index as for a synchronous miss, but the device read is in
//! flight on the queue's ring between `claim_missing` and `CacheInner::end_run`. Nothing here waits for
//! another thread's load, so a queue never sleeps while it holds loads of its own.

use super::CacheInner;
use crate::file::FileInner;
use crate::frame::state::{LOCKED, VALID};
use crate::frame::FrameId;

/// How far a pinned frame's load has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    Valid,
    Loading,
    /// Its load failed or was undone: unpin it and look the page up again.
    Failed,
}

impl CacheInner {
    /// Pins `page`'s frame if it has one (valid, or being loaded by someone: see
    /// [`CacheInner::readiness`]); never waits for another thread's load.
    pub(crate) fn pin_resident(&self, file: &FileInner, page: u64) -> Option<FrameId> {
        let id = self.pin_entry(file, page)?;
        self.placement.on_hit(id);
        self.metrics.hits.add(1);
        Some(id)
    }

    /// The state of a frame the caller pinned through `pin_resident`.
    pub(crate) fn readiness(&self, id: FrameId) -> Readiness {
        let w = self.frames.state(id).load();
        if w & VALID != 0 {
            Readiness::Valid
        } else if w & LOCKED != 0 {
            Readiness::Loading
        } else {
            Readiness::Failed
        }
    }

    /// Drops a pin taken through `pin_resident` or kept by `end_run`.
    pub(crate) fn unpin(&self, id: FrameId) {
        self.frames.state(id).unpin();
    }
}
