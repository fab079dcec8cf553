//! Loads that an asynchronous read queue starts and ends ([`crate::file::queue`]): the frame
//! is published `LOCKED` in the index as for a synchronous miss, but the device read is in
//! flight on the queue's ring between `prefetch` and `CacheInner::end_run`. Nothing here waits for
//! another thread's load, so a queue never sleeps while it holds loads of its own.

use super::page::Fill;
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
    /// [`CacheInner::end_run`].
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

    /// Drops a pin taken through `prefetch` or kept by `end_run`.
    pub(crate) fn unpin(&self, id: FrameId) {
        self.frames.state(id).unpin();
    }
}
