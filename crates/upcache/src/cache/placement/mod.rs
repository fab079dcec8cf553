//! Placement: which frame a missing page goes to, and where frames come back to. Two
//! strategies implement [`Placement`], and [`build`] is the one place that chooses:
//! - [`global::GlobalPlacement`]: a per-file page index of the configured kind, the frame
//!   allocator (`alloc/`), the replacement policy (`policy/`) and background reclaim;
//! - [`sets::SetPlacement`]: SAFS's set-associative cache (`index/setassoc.rs`): one table of
//!   small page sets shared by all files, where a page's set gives its frame, picks the victim
//!   and records the entry in one step; it can be resized while I/O runs.
//!
//! The core (`cache/page.rs`, `cache/batch.rs`) calls the strategy and never asks which it is.

pub(crate) mod global;
pub(crate) mod sets;

use super::CacheInner;
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::file::FileInner;
use crate::frame::state::LOCKED;
use crate::frame::FrameId;
use crate::index::{IndexKind, PageIndex};
use crate::policy::GcProbe;

/// Consecutive idle eviction sweeps (every frame pinned or under I/O) before a miss gives up
/// with `CacheFull`.
const IDLE_SWEEPS_BEFORE_FULL: u32 = 10_000;
/// Longest sleep of a miss on one frame under I/O in a full set (`EvictionRetries::wait_for`):
/// with `IDLE_SWEEPS_BEFORE_FULL`, about 10 s of a set that stays locked before `CacheFull`.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
/// Least time a miss keeps sweeping frames that are all pinned or under I/O before it gives
/// up with `CacheFull`, however many sweeps that is: pins held for a moment (a load or a
/// write-back whose thread the scheduler set aside) must not fail a read. Without a frame
/// to sleep on, 10,000 yielding sweeps can pass in a few milliseconds (the model test's soak
/// failed so once, a 39-frame page-set cache beside a readahead in flight).
const STUCK_FOR_BEFORE_FULL: std::time::Duration = std::time::Duration::from_secs(1);
/// Failed write-backs of dirty victims before a miss gives up with the device's error.
const FAILED_WRITEBACKS_BEFORE_ERROR: u32 = 8;

/// How a cache places pages in frames.
pub(crate) trait Placement: Send + Sync {
    /// The page index for a new file `file` (its id).
    fn new_index(&self, file: u64) -> Box<dyn PageIndex>;

    /// Takes a frame for `page` of `file` and publishes it pinned and `LOCKED`, its key set,
    /// in the file's index; None if another thread published the page first. Evicts (writing
    /// back dirty victims) when no frame is free.
    fn claim(&self, cache: &CacheInner, file: &FileInner, page: u64) -> Result<Option<FrameId>>;

    /// [`Self::claim`] for each of `pages` (ascending) that has no entry in the file's index,
    /// appending what this thread published to `out`; stops at the first error, what was
    /// claimed before stays. Once it holds frames it may stop with `CacheFull` rather than
    /// wait for busy ones (two batches must not wait on each other's frames).
    fn claim_missing(
        &self,
        cache: &CacheInner,
        file: &FileInner,
        pages: &mut dyn Iterator<Item = u64>,
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()>;

    /// Frame `id`, out of every index, unpinned and not `VALID`, given back for new pages.
    fn release(&self, file: &FileInner, id: FrameId);

    /// A pinned hit on frame `id`.
    fn on_hit(&self, id: FrameId);

    /// `file` leaves the cache: frames it kept aside go back to everyone.
    fn file_closed(&self, file: &FileInner);

    /// Frames in use now (of `total`): fewer after a resize shrank the cache.
    fn frames_in_use(&self, total: usize) -> usize;

    /// Background reclaim, run by a flusher: evicts clean pages ahead of demand if a miss
    /// asked for it.
    fn reclaim(&self, cache: &CacheInner);

    /// Whether [`Self::resize`] can give frame memory back to the kernel.
    fn resizable(&self) -> bool;

    /// See [`crate::Cache::resize`].
    fn resize(&self, cache: &CacheInner, bytes: u64) -> Result<u64>;

    /// Bytes of placement state outside the files' indexes.
    fn memory_bytes(&self) -> usize;
}

/// The placement `config` asks for over `frames` frames; `gc` tells a GC-aware policy which
/// devices are collecting garbage.
pub(crate) fn build(config: &Config, frames: usize, gc: Option<GcProbe>) -> Box<dyn Placement> {
    match config.index {
        IndexKind::SetAssoc => Box::new(sets::SetPlacement::new(frames, config.set_ways, config.set_policy)),
        kind => Box::new(global::GlobalPlacement::new(config, kind, frames, gc)),
    }
}

/// A miss that has to evict: it writes back dirty victims and retries, and gives up with the
/// device's error after repeated failed write-backs, or with `CacheFull` after many sweeps
/// that found every frame pinned or under I/O.
#[derive(Default)]
pub(crate) struct EvictionRetries {
    idle: u32,
    failed: u32,
    /// When a miss first had swept `IDLE_SWEEPS_BEFORE_FULL` times in vain.
    stuck_since: Option<std::time::Instant>,
}

impl EvictionRetries {
    /// Writes back a dirty victim (and its neighbours) so a later sweep can claim it.
    pub(crate) fn write_back(&mut self, cache: &CacheInner, victim: FrameId) -> Result<()> {
        match cache.write_back_victim(victim) {
            Ok(true) => (self.idle, self.stuck_since) = (0, None),
            // Someone else is writing it back; let them finish, then sweep again.
            Ok(false) => self.wait(),
            Err(e) => {
                self.failed += 1;
                if self.failed >= FAILED_WRITEBACKS_BEFORE_ERROR {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A sweep found nothing to take: let other threads run.
    pub(crate) fn wait(&mut self) {
        self.idle += 1;
        crate::sync::yield_now();
    }

    /// A sweep found every candidate pinned or under I/O: sleeps until the write-back of
    /// `busy` ends, or for `BUSY_WAIT` at most, so a miss waits out a write-back run over its
    /// whole set instead of spinning; without one, as [`Self::wait`]. Either way one idle
    /// sweep, so a set held by pins that never go still fails in bounded time.
    pub(crate) fn wait_for(&mut self, cache: &CacheInner, busy: Option<FrameId>) {
        let Some(id) = busy else { return self.wait() };
        self.idle += 1;
        let st = cache.frames.state(id);
        // The pin keeps the frame from moving while we sleep on it (the wait table's rule).
        if st.try_pin().is_ok() {
            cache.frames.waits.wait_until_for(id, st, |w| w & LOCKED == 0, BUSY_WAIT);
            st.unpin();
        }
    }

    /// A miss's `CacheFull`, after `IDLE_SWEEPS_BEFORE_FULL` idle sweeps and at least
    /// `STUCK_FOR_BEFORE_FULL` since; between the two, each sweep sleeps a little instead of
    /// yielding.
    pub(crate) fn give_up_if_stuck(&mut self, what: impl FnOnce() -> String) -> Result<()> {
        if self.idle < IDLE_SWEEPS_BEFORE_FULL {
            return Ok(());
        }
        let since = *self.stuck_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() < STUCK_FOR_BEFORE_FULL {
            std::thread::sleep(std::time::Duration::from_micros(100));
            return Ok(());
        }
        self.give_up_with(ErrorKind::CacheFull, what)
    }

    pub(crate) fn give_up_with(&self, kind: ErrorKind, what: impl FnOnce() -> String) -> Result<()> {
        if self.idle >= IDLE_SWEEPS_BEFORE_FULL {
            return Err(Error::new(kind, what()));
        }
        Ok(())
    }
}
