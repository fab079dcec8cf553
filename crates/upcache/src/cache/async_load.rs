//! Loads that an asynchronous read queue starts and ends ([`crate::file::queue`]): the frame
//! is published `LOCKED` in the index as for a synchronous miss, but the device read is in
//! flight on the queue's ring between `prefetch` and `end_load`. Nothing here waits for
//! another thread's load, so a queue never sleeps while it holds loads of its own.

use super::page::{Fill, LockedPage};
use super::CacheInner;
use crate::error::Result;
use crate::file::FileInner;
use crate::frame::state::{LOCKED, VALID};
use crate::frame::FrameId;

/// What `prefetch` found for a page; either way the caller holds a pin on the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prefetch {
    /// The page has a frame: valid, or being loaded by someone (see [`CacheInner::readiness`]).
    Resident(FrameId),
    /// A fresh frame, `LOCKED` and in the index, for the caller to fill and end with
    /// [`CacheInner::end_load`].
    Load(FrameId),
}

/// How far a pinned frame's load has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    Valid,
    Loading,
    /// Its load failed or was undone: unpin it and look the page up again.
    Failed,
}

impl CacheInner {
    /// Pins `page`'s frame if it has one, else starts a load of it; never waits for another
    /// thread's load.
    pub(crate) fn prefetch(&self, file: &FileInner, page: u64) -> Result<Prefetch> {
        loop {
            if let Some(id) = self.pin_entry(file, page) {
                self.policy.on_hit(id);
                self.metrics.hits.add(1);
                return Ok(Prefetch::Resident(id));
            }
            if let Some(lp) = self.load_locked(file, page, Fill::Overwrite)? {
                return Ok(Prefetch::Load(lp.detach()));
            }
        }
    }

    /// Ends a load that `prefetch` started: `Some(n)` if the device read gave its first `n`
    /// bytes (the rest reads as zeros), None if it failed. On success the frame is `VALID`,
    /// unlocked and still pinned; on failure the load is undone (the frame leaves the index
    /// and the pin is gone).
    pub(crate) fn end_load(&self, file: &FileInner, page: u64, id: FrameId, filled: Option<usize>) {
        let lp = LockedPage::attach(self, file, page, id);
        if let Some(n) = filled {
            self.zero_tail(&lp, n);
            lp.into_pinned().keep();
        }
        // Otherwise `lp` drops uncommitted, which undoes the load.
    }

    /// The state of a frame the caller pinned through `prefetch`.
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

    /// Drops a pin taken through `prefetch` or kept by `end_load`.
    pub(crate) fn unpin(&self, id: FrameId) {
        self.frames.state(id).unpin();
    }
}
