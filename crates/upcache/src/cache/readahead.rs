//! The core's side of readahead: the inbox of windows that reads post (`api/file.rs`) and the
//! loader thread takes (`service/loader.rs`), and the claiming and ending of a window's loads.

use std::collections::VecDeque;
use std::ops::Range;

use super::CacheInner;
use crate::file::FileInner;
use crate::frame::FrameId;
use crate::io::engine::{EngineQueue, InlineQueue};
use crate::sync::{self, Arc, AtomicBool, Condvar, Mutex, Ordering};

/// Windows waiting for the loader at most; more are dropped (readahead is a hint).
const MAX_WAITING: usize = 64;

/// Pages of a file to load ahead.
pub(crate) struct Window {
    pub(crate) file: Arc<FileInner>,
    pub(crate) pages: Range<u64>,
}

/// The loader's inbox.
#[derive(Default)]
pub(crate) struct Inbox {
    windows: Mutex<VecDeque<Window>>,
    posted: Condvar,
    shutdown: AtomicBool,
}

impl Inbox {
    /// Asks for `pages` of `file` to be loaded; dropped if the loader is far behind.
    pub(crate) fn post(&self, file: &Arc<FileInner>, pages: Range<u64>) {
        let mut w = sync::lock(&self.windows);
        if w.len() < MAX_WAITING {
            w.push_back(Window { file: file.clone(), pages });
            drop(w);
            self.posted.notify_one();
        }
    }

    /// The next window for a loader with `in_flight` of `max_in_flight` reads outstanding:
    /// waits for one while nothing is in flight; None once stopped, or at once when reads
    /// are in flight and no window is waiting or the queue is full.
    pub(crate) fn take(&self, in_flight: usize, max_in_flight: usize) -> Option<Window> {
        let mut w = sync::lock(&self.windows);
        loop {
            if self.stopped() {
                return None;
            }
            if in_flight > 0 {
                // Reads in flight: take another window only while the queue has room, so the
                // loader never holds more frames than a queue's worth of runs.
                return if in_flight < max_in_flight { w.pop_front() } else { None };
            }
            match w.pop_front() {
                Some(x) => return Some(x),
                None => w = sync::wait(&self.posted, w),
            }
        }
    }

    /// Whether `stop` was called.
    pub(crate) fn stopped(&self) -> bool {
        // Acquire: pairs with the Release in `stop`.
        self.shutdown.load(Ordering::Acquire)
    }

    /// Tells the loader to stop once its reads in flight complete.
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire in `stopped`.
        self.shutdown.store(true, Ordering::Release);
        drop(sync::lock(&self.windows)); // `take` checks the flag under this lock
        self.posted.notify_all();
    }
}

/// A run of a window's pages, claimed (pinned, `LOCKED`, fresh) for one read.
pub(crate) struct ClaimedRun {
    pub(crate) file: Arc<FileInner>,
    pub(crate) pages: Vec<(u64, FrameId)>,
    pub(crate) dev: usize,
    pub(crate) offset: u64,
}

impl CacheInner {
    /// An I/O queue of `depth` for the loader; synchronous reads if the engine has none.
    pub(crate) fn readahead_queue(&self, depth: usize) -> Box<dyn EngineQueue> {
        match self.engine.queue(depth) {
            Some(Ok(q)) => q,
            Some(Err(e)) => {
                log::warn!("readahead uses synchronous reads: no I/O queue ({e})");
                Box::new(InlineQueue::new(self.engine.clone()))
            }
            None => Box::new(InlineQueue::new(self.engine.clone())),
        }
    }

    /// Claims the missing pages of window `w` (under the file's range lock, taken without
    /// waiting, so that no load races a shrink) and hands each run to `read` as soon as it is
    /// claimed, so the devices start on a large window before all of it is claimed. `read`
    /// must end every run it is given with [`Self::end_readahead`].
    pub(crate) fn claim_window(&self, w: &Window, read: &mut dyn FnMut(ClaimedRun, &[*mut u8])) {
        let file = &w.file;
        let ps = self.config.page_size as u64;
        let range = w.pages.start.saturating_mul(ps)..w.pages.end.saturating_mul(ps);
        let Some(_lock) = file.range.try_read(range.start, range.end) else { return };
        if file.check_live().is_err() {
            return;
        }
        let len = file.len.load(Ordering::Acquire);
        let end = w.pages.end.min(len.div_ceil(ps));
        let mut start = w.pages.start;
        while start < end {
            let chunk_end = (start + self.limits.pages as u64).min(end);
            let mut claimed = Vec::new();
            // An error means no frame to spare: read ahead less.
            let full = self.claim_missing(file, start..chunk_end, &mut claimed).is_err();
            self.metrics.readahead_pages.add(claimed.len() as u64);
            let (mut ptrs, mut runs) = (Vec::new(), Vec::new());
            self.runs_of(file, &claimed, &mut runs);
            for run in runs {
                let pages = claimed[run.members].to_vec();
                self.frame_ptrs(pages.iter().map(|&(_, id)| id), &mut ptrs);
                read(ClaimedRun { file: file.clone(), pages, dev: run.dev, offset: run.offset }, &ptrs);
            }
            if full {
                return;
            }
            start = chunk_end;
        }
    }

    /// Ends the loads of a run whose read completed with `read`.
    pub(crate) fn end_readahead(&self, run: ClaimedRun, read: std::io::Result<usize>) {
        if let Err(e) =
            self.end_run(&run.file, run.pages.iter().copied(), run.dev, read, super::batch::AfterLoad::Unpin)
        {
            // Readers that need these pages load them themselves and see the error then.
            log::debug!("readahead failed: {e}");
        }
    }
}
