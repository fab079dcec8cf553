//! Failures of the cache's background threads (the flushers, the readahead loader). A panic in
//! one is caught where the thread runs its loop, recorded here, said in the log, and returned
//! as an error by the next sync (`File::sync_data`, `File::sync_all`, `Cache::sync`); the
//! thread then runs its loop again, so background write-back never stops silently.
//!
//! It also names what each kind of background thread works on ([`FlushWork`],
//! [`ReadaheadWork`]): the threads (`service/`) are started with an `Arc` of something that
//! does this work, the cache core, and see nothing else of it.

use super::readahead::{ClaimedRun, Inbox, Window};
use super::writeback::Writeback;
use super::CacheInner;
use crate::error::{Error, ErrorKind, Result};
use crate::io::engine::EngineQueue;
use crate::sync::{self, Mutex};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a flusher thread does: write back, checkpoint the metadata log, reclaim clean pages.
pub(crate) trait FlushWork: Send + Sync + 'static {
    /// Dirty accounting and the flushers' wake-up channel.
    fn writeback(&self) -> &Writeback;
    /// Where the thread records its panics.
    fn failures(&self) -> &BackgroundFailures;
    /// How many flusher threads to run.
    fn flusher_threads(&self) -> usize;
    /// Writes back dirty pages until the dirty count is at most `stop_at`, or this pass
    /// found nothing writable; returns the pages written.
    fn flush_dirty(&self, stop_at: usize) -> usize;
    /// Writes back the files dirty for longer than the expiry at `now_ms`.
    fn write_back_expired(&self, now_ms: u64);
    /// Checkpoints the metadata log if it has grown enough.
    fn checkpoint_if_wanted(&self);
    /// Evicts clean pages into the free pool if a miss asked for it.
    fn reclaim(&self);
}

/// What the readahead loader does: take windows, claim their missing pages, end their loads.
///
/// # Safety
/// The loader reads into the frames `claim_window` hands it: each pointer given to `read`
/// must be a whole frame of `page_size()` bytes, held pinned and `LOCKED` by its run, which no
/// one else touches until that run is passed to `end_readahead`, and stays mapped till then.
pub(crate) unsafe trait ReadaheadWork: Send + Sync + 'static {
    /// The windows reads posted.
    fn inbox(&self) -> &Inbox;
    /// Where the thread records its panics.
    fn failures(&self) -> &BackgroundFailures;
    /// Bytes in a page: the length of each buffer of a read.
    fn page_size(&self) -> usize;
    /// An I/O queue of `depth` for the loader's reads.
    fn queue(&self, depth: usize) -> Box<dyn EngineQueue>;
    /// See [`CacheInner::claim_window`].
    fn claim_window(&self, w: &Window, read: &mut dyn FnMut(ClaimedRun, &[*mut u8]));
    /// See [`CacheInner::end_readahead`].
    fn end_readahead(&self, run: ClaimedRun, read: std::io::Result<usize>);
}

impl FlushWork for CacheInner {
    fn writeback(&self) -> &Writeback {
        &self.writeback
    }
    fn failures(&self) -> &BackgroundFailures {
        &self.background
    }
    fn flusher_threads(&self) -> usize {
        self.config.flusher_threads
    }
    fn flush_dirty(&self, stop_at: usize) -> usize {
        CacheInner::flush_dirty(self, self.frames.len(), stop_at)
    }
    fn write_back_expired(&self, now_ms: u64) {
        CacheInner::write_back_expired(self, now_ms);
    }
    fn checkpoint_if_wanted(&self) {
        self.array.checkpoint_if_wanted()
    }
    fn reclaim(&self) {
        self.placement.reclaim(self)
    }
}

// SAFETY: `CacheInner::claim_window` hands out only frames it claimed as fresh loads (pinned,
// `LOCKED`, published so that others wait), which stay so until `end_readahead` ends them; the
// arena lives as long as the cache, which the loader's `Arc` keeps alive.
unsafe impl ReadaheadWork for CacheInner {
    fn inbox(&self) -> &Inbox {
        &self.readahead
    }
    fn failures(&self) -> &BackgroundFailures {
        &self.background
    }
    fn page_size(&self) -> usize {
        self.config.page_size
    }
    fn queue(&self, depth: usize) -> Box<dyn EngineQueue> {
        self.readahead_queue(depth)
    }
    fn claim_window(&self, w: &Window, read: &mut dyn FnMut(ClaimedRun, &[*mut u8])) {
        CacheInner::claim_window(self, w, read)
    }
    fn end_readahead(&self, run: ClaimedRun, read: std::io::Result<usize>) {
        CacheInner::end_readahead(self, run, read)
    }
}

/// The panics of background threads not yet reported to a sync.
#[derive(Default)]
pub(crate) struct BackgroundFailures {
    first: Mutex<Option<String>>,
}

impl BackgroundFailures {
    /// Runs `body` (a thread's loop, which returns when the cache stops) until it returns,
    /// recording each panic of it (`what` names the thread) and running it again.
    pub(crate) fn keep_running(&self, what: &str, mut body: impl FnMut()) {
        while let Err(panic) = catch_unwind(AssertUnwindSafe(&mut body)) {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            log::error!("the {what} thread panicked ({why}); it runs again");
            sync::lock(&self.first).get_or_insert_with(|| format!("the {what} thread panicked: {why}"));
        }
    }

    /// The first panic not yet reported, as an error; each is reported once.
    pub(crate) fn take(&self) -> Option<Error> {
        sync::lock(&self.first).take().map(|why| Error::new(ErrorKind::Internal, why))
    }

    /// `result`, or the first unreported panic if `result` is Ok.
    pub(crate) fn after(&self, result: Result<()>) -> Result<()> {
        result?;
        self.take().map_or(Ok(()), Err)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_recorded_once_and_the_loop_runs_again() {
        let failures = BackgroundFailures::default();
        let mut runs = 0;
        failures.keep_running("test", || {
            runs += 1;
            if runs < 3 {
                panic!("run {runs} failed");
            }
        });
        assert_eq!(runs, 3, "ran again after each panic, until it returned");
        let e = failures.after(Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
        assert!(e.to_string().contains("the test thread panicked: run 1 failed"), "{e}");
        assert!(failures.after(Ok(())).is_ok(), "reported once");
        let mut once = true;
        failures.keep_running("test", || {
            if std::mem::take(&mut once) {
                panic!("again")
            }
        });
        let e = failures.after(Err(Error::new(ErrorKind::Io, "the sync's own"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "the sync's own error first");
        assert!(failures.take().is_some(), "the panic is kept for the next one");
    }
}
