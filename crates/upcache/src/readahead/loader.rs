//! The loader thread: takes windows of pages to read ahead, loads their missing pages in
//! runs on its own I/O queue, and ends the loads as the reads complete.

use std::collections::VecDeque;
use std::ops::Range;
use std::thread::JoinHandle;

use crate::cache::CacheInner;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::FrameId;
use crate::io::engine::{InlineQueue, IoQueue, QueueCompletion};
use crate::sync::{self, Arc, AtomicBool, Condvar, Mutex, Ordering};

/// Reads the loader keeps in flight at most; more windows wait in its queue.
const QUEUE_DEPTH: usize = 64;
/// Windows waiting for the loader at most; more are dropped (readahead is a hint).
const MAX_WAITING: usize = 64;

struct Window {
    file: Arc<FileInner>,
    pages: Range<u64>,
}

/// The loader's inbox, shared with the cache.
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
}

/// The running loader thread.
pub(crate) struct Loader {
    cache: Arc<CacheInner>,
    thread: Option<JoinHandle<()>>,
}

impl Loader {
    pub(crate) fn start(cache: &Arc<CacheInner>) -> Result<Loader> {
        let c = cache.clone();
        let thread = std::thread::Builder::new()
            .name("upcache-readahead".into())
            .spawn(move || c.background.keep_running("readahead", || run(&c)))
            .map_err(|e| Error::io("spawn readahead thread", e))?;
        Ok(Loader { cache: cache.clone(), thread: Some(thread) })
    }

    /// Stops the thread once its reads in flight have completed.
    pub(crate) fn stop(&mut self) {
        let inbox = &self.cache.readahead;
        // Release: pairs with the Acquire in the loop.
        inbox.shutdown.store(true, Ordering::Release);
        drop(sync::lock(&inbox.windows)); // the loop checks the flag under this lock
        inbox.posted.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the readahead thread panicked");
            }
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A run of loads in flight: the file and its pages with their frames.
struct InFlight {
    file: Arc<FileInner>,
    pages: Vec<(u64, FrameId)>,
    dev: usize,
}

fn run(cache: &CacheInner) {
    let inbox = &cache.readahead;
    let mut queue: Box<dyn IoQueue> = match cache.engine.queue(QUEUE_DEPTH) {
        Some(Ok(q)) => q,
        Some(Err(e)) => {
            log::warn!("readahead uses synchronous reads: no I/O queue ({e})");
            Box::new(InlineQueue::new(cache.engine.clone()))
        }
        None => Box::new(InlineQueue::new(cache.engine.clone())),
    };
    let mut slots: Vec<Option<InFlight>> = Vec::new();
    let mut done: Vec<QueueCompletion> = Vec::new();
    loop {
        let window = {
            let mut w = sync::lock(&inbox.windows);
            loop {
                // Acquire: pairs with the Release in `stop`.
                if inbox.shutdown.load(Ordering::Acquire) {
                    break None;
                }
                if queue.outstanding() > 0 {
                    // Reads in flight: take another window only while the queue has room,
                    // so the loader never holds more frames than a queue's worth of runs.
                    break if queue.outstanding() < QUEUE_DEPTH { w.pop_front() } else { None };
                }
                match w.pop_front() {
                    Some(x) => break Some(x),
                    None => w = sync::wait(&inbox.posted, w),
                }
            }
        };
        let stopping = inbox.shutdown.load(Ordering::Acquire);
        if let Some(w) = window.filter(|_| !stopping) {
            start_window(cache, &w, queue.as_mut(), &mut slots);
        }
        if queue.outstanding() > 0 {
            queue.reap(1, &mut done);
            for (tag, read) in done.drain(..) {
                let f = slots[tag as usize].take().expect("a completion has its run");
                end_run(cache, f, read);
            }
        } else if stopping {
            return;
        }
    }
}

/// Claims the missing pages of window `w` (under the file's range lock, taken without
/// waiting, so that no load races a shrink) and queues a read per run.
fn start_window(cache: &CacheInner, w: &Window, queue: &mut dyn IoQueue, slots: &mut Vec<Option<InFlight>>) {
    let file = &w.file;
    let ps = cache.config.page_size as u64;
    let range = w.pages.start.saturating_mul(ps)..w.pages.end.saturating_mul(ps);
    let Some(_lock) = file.range.try_read(range.start, range.end) else { return };
    if file.check_live().is_err() {
        return;
    }
    let len = file.len.load(Ordering::Acquire);
    let end = w.pages.end.min(len.div_ceil(ps));
    // A run's worth of pages at a time, each sent as soon as it is claimed, so the devices
    // start on a large window before all of it is claimed.
    let mut start = w.pages.start;
    while start < end {
        let chunk_end = (start + cache.limits.pages as u64).min(end);
        let mut claimed = Vec::new();
        // An error means no frame to spare: read ahead less.
        let full = cache.claim_missing(file, start..chunk_end, &mut claimed).is_err();
        cache.metrics.readahead_pages.add(claimed.len() as u64);
        for run in cache.runs_of(file, claimed.iter().copied()) {
            let pages = claimed[run.members].to_vec();
            let ptrs = cache.frame_ptrs(pages.iter().map(|&(_, id)| id));
            let slot = match slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    slots.push(None);
                    slots.len() - 1
                }
            };
            slots[slot] = Some(InFlight { file: file.clone(), pages, dev: run.dev });
            // SAFETY: every frame is pinned, LOCKED and fresh: nobody else touches its bytes
            // until we end the load, which is after the queue reports this read (the loader
            // drains its queue before it exits).
            unsafe {
                queue.push_read(&file.backing[run.dev], run.offset, ptrs.as_slice(), ps as usize, slot as u64)
            };
        }
        if full {
            return;
        }
        start = chunk_end;
    }
}

/// Ends the loads of a completed run.
fn end_run(cache: &CacheInner, f: InFlight, read: std::io::Result<usize>) {
    if let Err(e) = cache.end_run(&f.file, f.pages.iter().copied(), f.dev, read, false) {
        // Readers that need these pages load them themselves and see the error then.
        log::debug!("readahead failed: {e}");
    }
}
