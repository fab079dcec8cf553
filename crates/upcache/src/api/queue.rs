//! Asynchronous reads and writes from plain threads: submit many, reap completions, with a
//! queue depth (seed 002 §3.1's asynchronous interface; no async runtime needed).
//!
//! # A read
//! Submitting pins each page of the range that has a frame and starts a load of each that
//! has none: a fresh frame published `LOCKED` in the index, with its device read queued on
//! the queue's own ring (io_uring, or run at once by engines without queues). Reaping ends
//! those loads and then copies the range out of the pinned frames under the file's range
//! lock, which makes the read atomic against overlapping writes like `read_at`.
//!
//! # Why the queue never sleeps on others while it holds loads
//! Other threads that need a page this queue is loading sleep until the queue reaps that
//! load. So while it holds loads of its own, the queue must not sleep on anything another
//! thread holds (a range lock, someone else's load), or two queues, or a queue and a writer,
//! could each wait for the other. It only takes the range lock with `try_read` and only
//! checks other loads without waiting; a request that cannot finish yet stays pending. Once
//! the queue has no loads in flight it holds nothing others wait for, and then it may
//! finish a pending request the blocking way (`read_at`), after dropping its pins.
//!
//! # A write
//! Writes are buffered in the cache, so a write is done when submitted: the queue first
//! ends its own loads and drops its pins (a write may sleep on range locks and frames),
//! then writes, and the completion is ready at once.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use super::file::File;
use crate::cache::async_load::Readiness;
use crate::cache::batch::{AfterLoad, Run};
use crate::cache::CacheInner;
use crate::error::{Error, ErrorKind, Result};
use crate::file::FileInner;
use crate::frame::FrameId;
pub use crate::io::completion::{Completion, MAX_DEPTH};
use crate::io::engine::{EngineQueue, InlineQueue, QueueCompletion};
use crate::sync::{Arc, Ordering};

/// A page of a read and the frame pinned for it (`FrameId::MAX`: none).
#[derive(Clone, Copy)]
struct PagePin {
    page: u64,
    id: FrameId,
    /// This queue's load of the frame is in flight.
    loading: bool,
}

/// A load a request started: its pages (a range of [`Loads::members`]), read back to back
/// from one device, and when it was queued (for the device's latency histogram).
type LoadRun = (Range<usize>, usize, Option<Instant>);

/// The loads a request started, kept with their vectors for the next request when it ends
/// (so a request allocates nothing).
#[derive(Default)]
struct Loads {
    /// Indices into the request's `pins` of the pages it loads, run after run.
    members: Vec<usize>,
    /// Each run started; emptied when it completes.
    runs: Vec<LoadRun>,
    /// Runs still in flight.
    count: usize,
}

struct Request {
    tag: u64,
    /// The file alone, not a `File` handle: one reference count to take per request.
    file: Arc<FileInner>,
    offset: u64,
    buf: Vec<u8>,
    /// One per page of the range, in page order (filled by the first attempt), so a page's
    /// pin is found by index: a 1 MiB read has 256 of them.
    pins: Vec<PagePin>,
    loads: Loads,
    error: Option<Error>,
}

/// An asynchronous queue onto one cache; made by [`crate::Cache::queue`]. Owned by one
/// thread at a time (`Send`, not `Sync`).
///
/// Reads in flight hold their pages locked, so threads that need those pages wait for this
/// queue to reap them: reap promptly. The owning thread too: a blocking call on the cache
/// (a read, a write, another queue's) between a submission and its reap may wait for itself.
/// Dropping the queue ends its reads and drops what they hold; their completions are lost.
pub struct IoQueue {
    ring: Box<dyn EngineQueue>,
    cache: Arc<CacheInner>,
    depth: usize,
    requests: Vec<Option<Request>>,
    free: Vec<usize>,
    /// Requests with no loads in flight that could not finish yet.
    pending: Vec<usize>,
    done: VecDeque<Completion>,
    /// Device reads in flight on `ring`.
    loads: usize,
    /// Being dropped: reaped loads end, but nothing new starts.
    closing: bool,
    /// Vectors of finished requests, for new ones.
    spare: Vec<(Vec<PagePin>, Loads)>,
    reaped: Vec<QueueCompletion>,
    scratch: Scratch,
    /// An eventfd whose write ends a `wait` early (`set_doorbell`), and whether it rang.
    doorbell: Option<std::os::fd::RawFd>,
    rang: bool,
}

/// The tag of the doorbell's read on the ring (loads are tagged slot << 32 | run).
const DOORBELL_TAG: u64 = u64::MAX;

/// Vectors an attempt fills and empties, kept between attempts so they allocate once.
#[derive(Default)]
struct Scratch {
    missing: Vec<u64>,
    claimed: Vec<(u64, FrameId)>,
    runs: Vec<Run>,
    ptrs: FramePtrs,
}

/// A run's frame addresses for `push_read`, kept between runs.
#[derive(Default)]
struct FramePtrs(Vec<*mut u8>);

// SAFETY: it holds addresses only while `start_loads` runs, on the queue's thread, and is
// empty otherwise: moving it moves no pointer to another thread.
unsafe impl Send for FramePtrs {}

impl IoQueue {
    pub(crate) fn new(cache: Arc<CacheInner>, depth: usize) -> Result<Self> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("queue depth must be 1 to {MAX_DEPTH}, got {depth}"),
            ));
        }
        let ring = match cache.engine.queue(depth) {
            Some(r) => r.map_err(|e| Error::io("make an I/O queue".to_string(), e))?,
            None => Box::new(InlineQueue::new(cache.engine.clone())),
        };
        Ok(IoQueue {
            ring,
            cache,
            depth,
            requests: Vec::new(),
            free: Vec::new(),
            pending: Vec::new(),
            done: VecDeque::new(),
            loads: 0,
            closing: false,
            spare: Vec::new(),
            reaped: Vec::new(),
            scratch: Scratch::default(),
            doorbell: None,
            rang: false,
        })
    }

    /// Lets a write to eventfd `fd` end a [`IoQueue::wait`] early, even before `min`
    /// completions, where the engine's queue can watch it (io_uring): the Future API's driver
    /// sleeps in `wait` and is woken so by new submissions. `fd` must stay open while this
    /// queue lives.
    pub(crate) fn set_doorbell(&mut self, fd: std::os::fd::RawFd) {
        self.doorbell = Some(fd);
    }

    /// Whether a doorbell set here can end a wait (else a wait ends only with completions).
    pub(crate) fn doorbell_works(&mut self) -> bool {
        match self.doorbell {
            Some(fd) => self.ring.arm_doorbell(fd, DOORBELL_TAG),
            None => false,
        }
    }

    /// The most requests submitted and not yet returned by [`IoQueue::wait`].
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Hands device reads to the kernel once `n` are queued (default 1: each at once), rather
    /// than only when waiting. 1 gives the lowest latency; larger batches save system calls
    /// (fio's `iodepth_batch_submit`).
    pub fn set_submit_batch(&mut self, n: usize) {
        self.ring.set_submit_batch(n);
    }

    /// Requests submitted and not yet returned by `wait`.
    pub fn in_flight(&self) -> usize {
        self.requests.len() - self.free.len() + self.done.len()
    }

    /// Submits a read of `buf.len()` bytes at `offset` of `file`, reported under `tag`.
    /// Fails with `Busy` when `depth` requests are in flight (wait for some first), and with
    /// `InvalidInput` for a file of another cache or a range past the maximum file size.
    pub fn read(&mut self, file: &File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
        self.admit(file, offset, buf.len())?;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.requests.push(None);
            self.requests.len() - 1
        });
        let (pins, loads) = self.spare.pop().unwrap_or_default();
        let file = file.inner().clone();
        self.requests[slot] = Some(Request { tag, file, offset, buf, pins, loads, error: None });
        self.try_finish(slot);
        Ok(())
    }

    /// Submits a write of `buf` at `offset` of `file`, reported under `tag`. Writes go to
    /// the cache, so it is done (and its completion ready) when this returns. Fails like
    /// [`IoQueue::read`].
    pub fn write(&mut self, file: &File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
        self.admit(file, offset, buf.len())?;
        self.quiesce();
        let result = file.write_at(&buf, offset);
        self.done.push_back(Completion { tag, result, buf });
        Ok(())
    }

    /// Waits until at least `min` requests (at most as many as are in flight) have
    /// completed, and appends every completed one to `out`. Returns how many it appended.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) -> usize {
        // A doorbell (crate-internal, `set_doorbell`) ends a wait early only if it rings
        // during this one.
        self.rang = false;
        let mut got = 0;
        loop {
            got += self.done.len();
            out.extend(self.done.drain(..));
            if got >= min || self.in_flight() == 0 || std::mem::take(&mut self.rang) {
                return got;
            }
            if self.loads > 0 {
                self.reap(1);
            } else if !self.retry_pending() {
                // Nothing of ours is in flight, so nobody waits for us: finish one pending
                // request the blocking way.
                let slot = self.pending.pop().expect("in flight without loads means pending");
                self.finish_blocking(slot);
            }
        }
    }

    fn admit(&self, file: &File, offset: u64, len: usize) -> Result<()> {
        if !Arc::ptr_eq(file.cache(), &self.cache) {
            return Err(Error::new(ErrorKind::InvalidInput, format!("{file:?} belongs to another cache")));
        }
        super::file::end_of(offset, len)?;
        if self.in_flight() >= self.depth {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("{} requests in flight: the queue is full; wait for some", self.depth),
            ));
        }
        Ok(())
    }

    /// Reaps at least `min` of this queue's device reads and ends their loads; requests
    /// whose loads are all done try to finish.
    fn reap(&mut self, min: usize) {
        let mut reaped = std::mem::take(&mut self.reaped);
        // Armed before sleeping, so a submitter can end the sleep.
        self.doorbell_works();
        self.ring.reap(min, &mut reaped);
        // The time these loads were seen done: read once for all of them.
        let mut now = None;
        // One epoch pin for ending them all (each marks its pages ready in the index).
        let _epoch = crate::index::hold_epoch();
        for (tag, read) in reaped.drain(..) {
            if tag == DOORBELL_TAG {
                self.rang = true;
                continue;
            }
            self.loads -= 1;
            let (slot, run) = ((tag >> 32) as usize, tag as u32 as usize);
            let req = self.requests[slot].as_mut().expect("a load belongs to a live request");
            req.loads.count -= 1;
            let (members, dev, started) = std::mem::take(&mut req.loads.runs[run]);
            if let Some(t) = started {
                let now = *now.get_or_insert_with(Instant::now);
                self.cache.metrics.latency.device_read[dev].record(now.saturating_duration_since(t));
            }
            let members = &req.loads.members[members];
            let pages = members.iter().map(|&k| (req.pins[k].page, req.pins[k].id));
            let ended = self.cache.end_run(&req.file, pages, dev, read, AfterLoad::KeepPin);
            for &k in members {
                req.pins[k].loading = false;
                if ended.is_err() {
                    req.pins[k].id = FrameId::MAX; // the failed load took the pin with it
                }
            }
            if let Err(e) = ended {
                req.error.get_or_insert(e);
            }
            if req.loads.count == 0 {
                self.pending.retain(|&s| s != slot);
                self.try_finish(slot);
            }
        }
        self.reaped = reaped;
        // Pending requests often wait on loads just ended (another request of this queue
        // loading the same page): retry them now rather than when the ring runs dry.
        if !self.pending.is_empty() {
            self.retry_pending();
        }
    }

    /// Tries every pending request once; true if any finished or started a load.
    fn retry_pending(&mut self) -> bool {
        let before = self.done.len();
        for slot in std::mem::take(&mut self.pending) {
            self.try_finish(slot);
        }
        self.done.len() > before || self.loads > 0
    }

    /// Finishes request `slot` if it can without waiting on anyone; otherwise starts what
    /// is missing and leaves it with loads in flight or pending.
    fn try_finish(&mut self, slot: usize) {
        if self.closing {
            return;
        }
        let cache = &*self.cache;
        // One epoch pin for the attempt's lookups (probe, claim, eviction's removal).
        let _epoch = crate::index::hold_epoch();
        let req = self.requests[slot].as_mut().expect("live request");
        let result = match &req.error {
            Some(_) => None,
            None => {
                let mut to = Loader { ring: self.ring.as_mut(), in_flight: &mut self.loads, slot };
                match attempt(cache, req, &mut to, &mut self.scratch) {
                    Attempt::Copied(n) => Some(n),
                    // Every frame is pinned, many perhaps by this queue: let go of this request's
                    // pages and retry once loads have been reaped (or the blocking way).
                    Attempt::Failed(e) if e.kind() == ErrorKind::CacheFull => {
                        self.not_yet(slot);
                        return;
                    }
                    Attempt::Failed(e) => {
                        req.error = Some(e);
                        None
                    }
                    Attempt::NotYet => {
                        self.not_yet(slot);
                        return;
                    }
                }
            }
        };
        if req.loads.count > 0 {
            return; // finishes with its error once its loads are reaped
        }
        let req = self.requests[slot].take().expect("live request");
        self.free.push(slot);
        release(cache, &req.pins);
        let result = match (result, req.error) {
            (Some(n), _) => Ok(n),
            (None, Some(e)) => Err(e),
            (None, None) => unreachable!("an unfinished request has an error"),
        };
        self.done.push_back(Completion { tag: req.tag, result, buf: req.buf });
        self.recycle(req.pins, req.loads);
    }

    /// Keeps a finished request's vectors for the next one (no allocation per request).
    fn recycle(&mut self, mut pins: Vec<PagePin>, mut loads: Loads) {
        if self.spare.len() < self.depth {
            debug_assert_eq!(loads.count, 0);
            pins.clear();
            loads.members.clear();
            loads.runs.clear();
            self.spare.push((pins, loads));
        }
    }

    fn not_yet(&mut self, slot: usize) {
        let req = self.requests[slot].as_ref().expect("live request");
        if req.loads.count == 0 {
            self.pending.push(slot);
        }
    }

    /// Finishes pending request `slot` with `read_at`, which may sleep. Only when this queue
    /// has no loads in flight; drops every pin first, so nobody waits for this queue.
    fn finish_blocking(&mut self, slot: usize) {
        self.quiesce();
        let mut req = self.requests[slot].take().expect("live request");
        self.free.push(slot);
        release(&self.cache, &req.pins);
        let result = File::new(req.file, self.cache.clone()).read_at(&mut req.buf, req.offset);
        self.done.push_back(Completion { tag: req.tag, result, buf: req.buf });
        self.recycle(req.pins, req.loads);
    }

    /// Ends every load of this queue and drops every pin of its pending requests, so that
    /// nobody waits for it and it may sleep on others.
    fn quiesce(&mut self) {
        while self.loads > 0 {
            self.reap(1);
        }
        for &slot in &self.pending {
            let req = self.requests[slot].as_mut().expect("pending request is live");
            release(&self.cache, &req.pins);
            req.pins.clear();
        }
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        // The kernel may still write into frames of reads in flight: end them all first,
        // starting nothing new, then drop every pin.
        self.closing = true;
        while self.loads > 0 {
            self.reap(1);
        }
        for req in self.requests.iter().flatten() {
            release(&self.cache, &req.pins);
        }
    }
}

/// Where a request's loads go: the queue's ring, the queue's count of reads in flight there,
/// and the request's slot (which tags them).
struct Loader<'a> {
    ring: &'a mut dyn EngineQueue,
    in_flight: &'a mut usize,
    slot: usize,
}

enum Attempt {
    Copied(usize),
    NotYet,
    Failed(Error),
}

/// One try at finishing `req`. Under its range lock (taken with `try_read`, so never
/// waiting): pins every page its range needs, claims loads of the missing ones (started on
/// `to` in runs), and if every page is then valid, copies them out.
///
/// Taking the range lock first keeps `set_len` and writers out while pages are looked up
/// and loads claimed, so a load never brings back bytes a shrink is about to cut off.
/// Whatever stops the request, it keeps only the pins of its own loads in flight: a pin on
/// another thread's load would stall that thread if the load failed (it waits for every pin
/// to go before it frees the frame), and other pins would stall `set_len` and removal.
fn attempt(cache: &CacheInner, req: &mut Request, to: &mut Loader<'_>, scratch: &mut Scratch) -> Attempt {
    let ps = cache.config.page_size as u64;
    let want_end = req.offset + req.buf.len() as u64;
    let file = &*req.file;
    let outcome = (|| {
        let Some(_range) = file.range.try_read(req.offset, want_end) else { return Attempt::NotYet };
        if let Err(e) = file.check_live() {
            return Attempt::Failed(e);
        }
        // Under the range lock the length and the pages' frames hold still.
        let end = want_end.min(file.len.load(Ordering::Acquire));
        if req.offset >= end {
            return Attempt::Copied(0);
        }
        let first = req.offset / ps;
        if req.pins.is_empty() {
            // Every page the buffer covers; the length may grow before a later attempt.
            let pages = first..=(want_end - 1) / ps;
            req.pins.extend(pages.map(|page| PagePin { page, id: FrameId::MAX, loading: false }));
        }
        scratch.missing.clear();
        let mut waiting = false;
        for page in first..=(end - 1) / ps {
            match ensure_pin(cache, file, &mut req.pins[(page - first) as usize]) {
                Pinned::Have => {}
                Pinned::Missing => scratch.missing.push(page),
                Pinned::Elsewhere => waiting = true,
            }
        }
        // Claimed together, so their frames come in order (`cache/batch.rs`).
        scratch.claimed.clear();
        let mut failed =
            cache.claim_missing(file, scratch.missing.iter().copied(), &mut scratch.claimed).err();
        if failed.as_ref().is_some_and(|e| e.kind() == ErrorKind::CacheFull) && !scratch.claimed.is_empty() {
            // The batch stopped rather than wait with frames in hand: load those, then come
            // back for the rest.
            failed = None;
        }
        for &(page, id) in &scratch.claimed {
            req.pins[(page - first) as usize] = PagePin { page, id, loading: true };
        }
        // A page another thread published meanwhile is its to load: come back for it.
        waiting |= scratch.claimed.len() < scratch.missing.len();
        // The loads claimed go out even if a later page failed.
        start_loads(cache, file, first, &mut req.loads, to, scratch);
        if let Some(e) = failed {
            return Attempt::Failed(e);
        }
        if waiting || req.loads.count > 0 {
            return Attempt::NotYet;
        }
        let mut pos = req.offset;
        while pos < end {
            let page = pos / ps;
            let n = (ps - pos % ps).min(end - pos) as usize;
            let pin = req.pins[(page - first) as usize];
            debug_assert!(pin.page == page && pin.id != FrameId::MAX, "pinned above");
            let at = (pos - req.offset) as usize;
            // SAFETY: our pin keeps the frame on this page, and `ensure_pin` saw it VALID and
            // the page's current frame under the range lock we hold, which keeps writers
            // and truncation of these bytes out. The source lies inside the frame, the
            // destination inside the buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    cache.frames.ptr(pin.id).add((pos % ps) as usize),
                    req.buf[at..at + n].as_mut_ptr(),
                    n,
                )
            };
            pos += n as u64;
        }
        Attempt::Copied((end - req.offset) as usize)
    })();
    if !matches!(outcome, Attempt::Copied(_)) {
        for p in req.pins.iter_mut().filter(|p| !p.loading && p.id != FrameId::MAX) {
            cache.unpin(p.id);
            p.id = FrameId::MAX;
        }
    }
    outcome
}

/// What `ensure_pin` found for a page.
enum Pinned {
    /// The request holds a valid, current frame or its own load of it.
    Have,
    /// The page has no frame: the request is to load it.
    Missing,
    /// Another thread (or another request of this queue) is loading it: try again later.
    Elsewhere,
}

/// Makes sure a request holds a usable pin `p` on its page of `file` if the page has a
/// frame: keeps its own load or a valid current frame, drops anything else, and pins the
/// page's frame. Called with the range lock held.
fn ensure_pin(cache: &CacheInner, file: &FileInner, p: &mut PagePin) -> Pinned {
    let page = p.page;
    // A pinned frame the copy may use: valid, and still the page's frame in the index.
    let current = |id| cache.readiness(id) == Readiness::Valid && file.index.peek(page) == Some(id);
    if p.id != FrameId::MAX {
        if p.loading || current(p.id) {
            return Pinned::Have;
        }
        cache.unpin(p.id);
        p.id = FrameId::MAX;
    }
    let Some(id) = cache.pin_resident(file, page) else { return Pinned::Missing };
    if !current(id) {
        cache.unpin(id);
        return Pinned::Elsewhere;
    }
    *p = PagePin { page, id, loading: false };
    Pinned::Have
}

/// Queues the loads in `scratch.claimed` (pages from `first` on, ascending, with their
/// frames) on `to`, one vectored read per run of pages back to back in a backing file.
fn start_loads(
    cache: &CacheInner,
    file: &FileInner,
    first: u64,
    req: &mut Loads,
    to: &mut Loader<'_>,
    scratch: &mut Scratch,
) {
    let Scratch { claimed, runs, ptrs, .. } = scratch;
    if claimed.is_empty() {
        return;
    }
    runs.clear();
    cache.runs_of(file, claimed, runs);
    let queued = Some(Instant::now());
    for run in runs.drain(..) {
        let members = &claimed[run.members];
        let at = req.members.len();
        req.members.extend(members.iter().map(|&(page, _)| (page - first) as usize));
        cache.frame_ptrs(members.iter().map(|&(_, id)| id), &mut ptrs.0);
        let tag = (to.slot as u64) << 32 | req.runs.len() as u64;
        req.runs.push((at..req.members.len(), run.dev, queued));
        req.count += 1;
        *to.in_flight += 1;
        // SAFETY: every frame is pinned, LOCKED and fresh: nobody else touches its bytes
        // until we end the load, which is after the ring reports this read (the queue drains
        // its ring before it drops).
        unsafe {
            to.ring.push_read(&file.backing[run.dev], run.offset, &ptrs.0, cache.config.page_size, tag)
        };
    }
    ptrs.0.clear();
}

/// Drops the pins in `pins` that are still held.
fn release(cache: &CacheInner, pins: &[PagePin]) {
    for p in pins {
        if p.id != FrameId::MAX {
            debug_assert!(!p.loading);
            cache.unpin(p.id);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{Cache, Config, ErrorKind};

    /// A queued read through the handle of a removed file fails and takes no frames with it.
    /// Found in review: it used to refill the dead file's frame cache, which nothing drains
    /// (the cache went back to the pool when the file was removed). Checked on the cache
    /// itself: counting evictions afterwards raced background reclaim.
    #[test]
    fn a_queued_read_of_a_removed_file_takes_no_frames() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(Config::new([tmp.path().join("dev0")], 6400 * 4096)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&[1u8; 4 * 4096], 0).unwrap();
        assert!(f.inner().spare_frames.len() > 0, "the writes took a batch into f's cache");
        cache.sync().unwrap();
        cache.remove_file("f").unwrap();
        assert_eq!(f.inner().spare_frames.len(), 0, "removal gave f's cache back");
        let mut q = cache.queue(4).unwrap();
        q.read(&f, 0, vec![0u8; 4096], 1).unwrap();
        let mut out = Vec::new();
        q.wait(1, &mut out);
        assert_eq!(out[0].result.as_ref().unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(f.inner().spare_frames.len(), 0, "frames parked in the removed file's cache");
    }
}
