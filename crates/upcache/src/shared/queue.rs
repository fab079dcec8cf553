//! Asynchronous reads and writes of shared files from plain threads: submit many, reap
//! completions, with a queue depth (seed 002 §3.1's asynchronous interface); `api/queue.rs`
//! is its facade.
//!
//! # A read
//! Submitting copies the range at once if every page of it is cached and no writer is at work
//! on it (`SharedFile::read_cached`). Otherwise the queue takes frames for the missing pages,
//! puts them in the index locked under its process's client id, as a reader's miss does
//! (`load.rs`), and queues one vectored read per run (per device run of an array file) on the
//! queue's own io_uring. Reaping ends those loads: the pages become valid and unlocked, cached
//! for every process; then the range is copied again.
//!
//! # Why the queue never sleeps on others while it holds loads
//! Readers in any process that need a page this queue is loading wait until the queue reaps
//! that load. So while it holds loads, the queue takes only frames free now
//! (`try_claim_holding`), waits for no lock and copies only without waiting; a request that
//! cannot finish yet stays pending. Once it has no load in flight it holds nothing others
//! wait for, and finishes a pending request the blocking way (`SharedFile::read_at`).
//!
//! # A kill
//! A process killed with loads in flight leaves their frames locked under its client id; the
//! repair of a dead client's frames frees them (`repair.rs`). The kernel may finish a dead
//! process's io_uring reads after it is gone (exit waits for only some of them), and a frame
//! repaired meanwhile may hold another page by then: so the ring reads into page-aligned
//! memory of the queue's own ([`Bounce`]), copied into the frames at the reap, and a late read
//! lands in the dead process's memory, never in the segment. (A blocking `preadv`, the
//! readers' own, ends before its thread dies.)
//!
//! # One thread, one queue
//! Loads in flight are locked in this process's name: this thread too must not make a
//! blocking call on the cache (a read, a write, another queue's) that may need one of those
//! pages before it reaps them, or it waits for itself.
//!
//! # A write
//! Writes go to the cache, so a write is done when submitted: the queue first reaps its loads
//! (a write may sleep on locks and frames), then writes, and the completion is ready at once.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::backing::Backing;
use super::bounce::Bounce;
#[cfg(test)]
use super::frame::PAGE;
use super::index::Placed;
use super::layout::technique;
use super::{Inner, SharedFile};
use crate::error::{Error, ErrorKind, Result};
use crate::io::completion::{Completion, MAX_DEPTH};
use crate::io::engine::uring::UringQueue;
use crate::io::engine::{EngineQueue, QueueCompletion};

/// A read request: its file (kept open until it completes), range, buffer and loads.
struct Request {
    tag: u64,
    file: Arc<SharedFile>,
    offset: u64,
    buf: Vec<u8>,
    /// Its load runs in flight.
    loads: usize,
    /// Its first copy was tried: its hits were counted, and its loads count as misses.
    counted: bool,
    /// It started loads: if its copy fails again (its pages evicted meanwhile, by a cache
    /// smaller than the requests in flight), it reads the blocking way instead of loading
    /// again, so two requests cannot evict each other's pages for ever.
    loaded: bool,
    /// Its failed tries while pending (`PENDING_TRIES`).
    tries: u32,
    error: Option<Error>,
}

/// A load in flight: frames locked by us, in the index, for pages `first..` of the request's
/// file, read back to back (from the OS file, or an array device's backing file) into
/// `bounce`, if the read went to the ring.
struct Load {
    request: usize,
    first: u64,
    frames: Vec<u32>,
    dev: usize,
    bounce: Option<Bounce>,
    /// The descriptor is the OS file's `O_DIRECT` one: a refusal (`EINVAL`) is retried the
    /// usual way.
    os_direct: bool,
    queued: Instant,
}

/// Bounces kept for reuse per size class (pages, a power of two), at most this many each.
const SPARE_BOUNCES: usize = 64;

/// Pending requests' failed retries before a wait ends every load and reads them the blocking
/// way: loads kept in flight by new submissions must not hold a pending request back for ever.
const PENDING_TRIES: u32 = 64;

/// Where the loads' reads go: the queue's own ring, or, without io_uring (or with
/// `SharedConfig::io` psync), a `preadv` at once, reported at the next reap.
enum Ring {
    Uring(Box<UringQueue>),
    Inline(Vec<QueueCompletion>),
}

impl Ring {
    /// Queues a read of `bufs` (whole pages of `page` bytes of a bounce) at `at` of `fd`,
    /// reported under `tag`.
    ///
    /// # Safety
    /// The pages must be ours alone and `fd` open until the completion is reaped.
    unsafe fn push(&mut self, fd: RawFd, at: u64, bufs: &[*mut u8], page: usize, tag: u64) {
        match self {
            // SAFETY: our caller's promise, passed on.
            Ring::Uring(q) => unsafe { q.push_read_fd(fd, at, bufs, page, tag) },
            Ring::Inline(ready) => {
                let mut slices: Vec<std::io::IoSliceMut<'_>> = bufs
                    .iter()
                    // SAFETY: the caller's pages, ours alone until the reap.
                    .map(|&b| std::io::IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(b, page) }))
                    .collect();
                ready.push((tag, crate::io::sys::preadv_all(fd, at, &mut slices)));
            }
        }
    }

    /// Waits for at least `min` completions (of those outstanding) and appends them to `out`.
    fn reap(&mut self, min: usize, out: &mut Vec<QueueCompletion>) {
        match self {
            Ring::Uring(q) => q.reap(min, out),
            Ring::Inline(ready) => out.append(ready),
        }
    }
}

/// An asynchronous queue onto a shared cache; made by [`super::SharedCache::queue`]. Owned by
/// one thread at a time (`Send`, not `Sync`).
///
/// Reads in flight hold their pages locked, so readers of those pages, in any process, wait
/// for this queue to reap them: reap promptly. Dropping the queue ends its loads; the
/// completions not yet returned are lost.
pub struct SharedQueue {
    inner: Arc<Inner>,
    ring: Ring,
    depth: usize,
    requests: Vec<Option<Request>>,
    free: Vec<usize>,
    /// Requests with no loads in flight that could not finish yet.
    pending: Vec<usize>,
    done: VecDeque<Completion>,
    /// Loads by their ring tag; `None`: a free tag.
    loads: Vec<Option<Load>>,
    free_loads: Vec<usize>,
    /// Loads in flight.
    in_kernel: usize,
    /// Loads filled at once (past the end, simulated devices), ended at the next reap.
    filled: Vec<(usize, Result<bool>)>,
    reaped: Vec<QueueCompletion>,
    /// Bounces of finished loads, by size class (`log2` of the pages).
    spare: Vec<Vec<Bounce>>,
    /// Files whose look for outside changes was put off while loads were in flight
    /// (`SharedFile::look_outside_if_due`), looked at when none are.
    owed: Vec<Arc<SharedFile>>,
    /// Files of requests finished while loads were in flight, let go when none are: the last
    /// handle of a file closes it, which may write back and take the file table's lock, and a
    /// queue holding loads waits for no one.
    retired: Vec<Arc<SharedFile>>,
    /// An eventfd whose write ends a `wait` early (`set_doorbell`), and whether it rang.
    doorbell: Option<RawFd>,
    rang: bool,
    /// Being dropped: reaped loads end, but no request is tried again.
    closing: bool,
}

/// The ring tag of the doorbell's read (loads are tagged by their index in `loads`).
const DOORBELL_TAG: u64 = u64::MAX;

impl SharedQueue {
    pub(crate) fn new(inner: Arc<Inner>, depth: usize) -> Result<Self> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("queue depth must be 1 to {MAX_DEPTH}, got {depth}"),
            ));
        }
        let ring = match inner.techniques & technique::URING {
            0 => Ring::Inline(Vec::new()),
            _ => match UringQueue::plain(depth) {
                Ok(q) => Ring::Uring(Box::new(q)),
                Err(e) => {
                    log::warn!("upcache: io_uring is unavailable ({e}); the shared queue reads at once");
                    Ring::Inline(Vec::new())
                }
            },
        };
        Ok(SharedQueue {
            inner,
            ring,
            depth,
            requests: Vec::new(),
            free: Vec::new(),
            pending: Vec::new(),
            done: VecDeque::new(),
            loads: Vec::new(),
            free_loads: Vec::new(),
            in_kernel: 0,
            filled: Vec::new(),
            reaped: Vec::new(),
            spare: Vec::new(),
            owed: Vec::new(),
            retired: Vec::new(),
            doorbell: None,
            rang: false,
            closing: false,
        })
    }

    /// The most requests submitted and not yet returned by [`Self::wait`].
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Hands loads to the kernel once `n` are queued (default 1: each at once), rather than
    /// only when waiting, as `IoQueue::set_submit_batch`.
    pub fn set_submit_batch(&mut self, n: usize) {
        if let Ring::Uring(q) = &mut self.ring {
            q.set_submit_batch(n);
        }
    }

    /// Lets a write to eventfd `fd` end a [`Self::wait`] early, even before `min`
    /// completions, where the ring can watch it (io_uring): the Future API's driver sleeps in
    /// `wait` and is woken so by new submissions. `fd` must stay open while this queue lives.
    pub(crate) fn set_doorbell(&mut self, fd: RawFd) {
        self.doorbell = Some(fd);
    }

    /// Whether a doorbell set here can end a wait (else a wait ends only with completions).
    pub(crate) fn doorbell_works(&mut self) -> bool {
        match (self.doorbell, &mut self.ring) {
            (Some(fd), Ring::Uring(q)) => q.arm_doorbell(fd, DOORBELL_TAG),
            _ => false,
        }
    }

    /// Requests submitted and not yet returned by `wait`.
    pub fn in_flight(&self) -> usize {
        self.requests.len() - self.free.len() + self.done.len()
    }

    /// Submits a read of `buf.len()` bytes at `offset` of `file`, reported under `tag`.
    /// Fails with `Busy` when `depth` requests are in flight (wait for some first), and with
    /// `InvalidInput` for a file of another cache or a range past the largest file.
    pub fn read(&mut self, file: &Arc<SharedFile>, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
        self.admit(file, offset, buf.len())?;
        if self.in_kernel == 0 {
            // It may take the file's lock: only while we hold no loads.
            file.look_outside_if_due();
        } else if !self.owed.iter().any(|f| Arc::ptr_eq(f, file)) {
            self.owed.push(file.clone());
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.requests.push(None);
            self.requests.len() - 1
        });
        let file = file.clone();
        let req = Request {
            tag,
            file,
            offset,
            buf,
            loads: 0,
            counted: false,
            loaded: false,
            tries: 0,
            error: None,
        };
        self.requests[slot] = Some(req);
        self.try_finish(slot);
        // Loads filled at once end now: readers elsewhere need not wait for our next reap.
        self.end_filled_loads();
        Ok(())
    }

    /// Submits a write of `buf` at `offset` of `file`, reported under `tag`. Writes go to the
    /// cache, so it is done (and its completion ready) when this returns. Fails like
    /// [`Self::read`].
    pub fn write(&mut self, file: &SharedFile, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
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
            // Every live request is loading, pending or done.
            debug_assert!(self.in_kernel > 0 || !self.pending.is_empty(), "a request lost");
            if self.in_kernel > 0 {
                // Pending requests are tried again after each reap: they often wait on a
                // load just ended (another request of ours loading the same page).
                self.reap(1);
                if !self.stalled() {
                    continue;
                }
                // Some pending request keeps failing while new loads keep ours in flight:
                // end every load (a wait for the devices only), so that we hold nothing
                // anyone waits for, and read it the blocking way below.
                self.quiesce();
            }
            self.look_owed();
            if !self.retry_pending() {
                // Nothing of ours is in flight, so nobody waits for us.
                for slot in std::mem::take(&mut self.pending) {
                    self.finish_blocking(slot);
                }
            }
        }
    }

    /// Whether a pending request failed `PENDING_TRIES` tries.
    fn stalled(&self) -> bool {
        self.pending.iter().any(|&s| self.requests[s].as_ref().is_some_and(|r| r.tries >= PENDING_TRIES))
    }

    /// Tries every pending request once; true if any finished or started loads.
    fn retry_pending(&mut self) -> bool {
        let (done, loads) = (self.done.len(), self.in_kernel);
        for slot in std::mem::take(&mut self.pending) {
            if let Some(r) = self.requests[slot].as_mut() {
                r.tries += 1;
            }
            self.try_finish(slot);
        }
        self.end_filled_loads();
        self.done.len() > done || self.in_kernel > loads
    }

    /// The looks for outside changes put off while loads were in flight; only with none.
    fn look_owed(&mut self) {
        debug_assert_eq!(self.in_kernel, 0);
        for f in std::mem::take(&mut self.owed) {
            f.look_outside_if_due();
        }
        self.retired.clear();
    }

    fn admit(&self, file: &SharedFile, offset: u64, len: usize) -> Result<()> {
        file.check_queued(Arc::as_ptr(&self.inner) as usize, offset, len)?;
        if self.in_flight() >= self.depth {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("{} requests in flight (the depth)", self.depth),
            ));
        }
        Ok(())
    }

    /// Copies request `slot`'s range if it can without waiting, else loads what is missing,
    /// or leaves it pending.
    fn try_finish(&mut self, slot: usize) {
        let req = self.requests[slot].as_mut().expect("a live request");
        if req.loads > 0 || self.closing {
            return;
        }
        let copied = match req.error.take() {
            Some(e) => Err(e),
            None => {
                req.file.read_cached(&mut req.buf, req.offset, !std::mem::replace(&mut req.counted, true))
            }
        };
        match copied {
            Ok(Some(n)) => self.complete(slot, Ok(n)),
            Err(e) => self.complete(slot, Err(e)),
            Ok(None) if req.loaded => self.pending.push(slot),
            Ok(None) => match self.start_loads(slot) {
                Ok(0) => self.pending.push(slot),
                Ok(_) => self.requests[slot].as_mut().expect("a live request").loaded = true,
                Err(e) => {
                    // Only a claim with nothing of ours in flight fails so: nothing started.
                    debug_assert_eq!(self.requests[slot].as_ref().map(|r| r.loads), Some(0));
                    self.complete(slot, Err(e))
                }
            },
        }
    }

    /// Request `slot`'s range the blocking way; only with no load in flight.
    fn finish_blocking(&mut self, slot: usize) {
        debug_assert_eq!(self.in_kernel, 0, "a queue holding loads waits for no one");
        let req = self.requests[slot].as_mut().expect("a live request");
        // Its lookups were counted by its first try and its loads.
        let r = req.file.read_uncounted(&mut req.buf, req.offset);
        self.complete(slot, r);
    }

    fn complete(&mut self, slot: usize, result: Result<usize>) {
        let req = self.requests[slot].take().expect("a live request");
        self.free.push(slot);
        self.done.push_back(Completion { tag: req.tag, result, buf: req.buf });
        // Only the last handle closes (another thread's drop of its own closes in its own).
        if self.in_kernel > 0 && Arc::strong_count(&req.file) == 1 {
            self.retired.push(req.file);
        }
    }

    /// Claims frames for the missing pages of request `slot`'s range and queues their reads,
    /// a run at a time; the runs started. Waits for a frame only while the queue holds no
    /// loads; stops at the first page it cannot take a frame for now.
    fn start_loads(&mut self, slot: usize) -> Result<usize> {
        let req = self.requests[slot].as_ref().expect("a live request");
        let (file, offset) = (req.file.clone(), req.offset);
        let end = (offset + req.buf.len() as u64).min(file.cached_len());
        if offset >= end {
            return Ok(0);
        }
        let inner = self.inner.clone();
        let inner = &*inner;
        let index = inner.index();
        let merged = inner.techniques & technique::RUN_MERGING != 0;
        let size = inner.view.page_size;
        let (first, last) = (size.page_of(offset), size.pages_in(end));
        let mut started = 0;
        let mut run: Vec<u32> = Vec::new();
        let mut run_first = first;
        for page in first..last {
            let k = inner.key(file.slot, page);
            // A run is pages in a row, read back to back: a page skipped ends it.
            let joins = page == run_first + run.len() as u64
                && merged
                && run.len() < size.run_pages()
                && continues(&file.fd, run_first, page);
            if !joins && !run.is_empty() {
                self.push_run(slot, &file, run_first, std::mem::take(&mut run));
                started += 1;
            }
            if index.hint(k).is_some() {
                continue; // cached, or someone's load: the next attempt copies or waits
            }
            let holding = self.in_kernel > 0 || !run.is_empty();
            let placed = if holding {
                let Some(f) = inner.try_claim_holding(k) else { break };
                match inner.place_once(f, k, &|h| inner.stopped(h)) {
                    Placed::Yes => Some(f),
                    Placed::Taken => {
                        inner.free_frame(f);
                        continue;
                    }
                    Placed::No | Placed::Full | Placed::Broken => {
                        inner.free_frame(f);
                        break;
                    }
                }
            } else {
                let f = inner.claim(k)?;
                match inner.place_unless(f, k, &|h| inner.stopped(h))? {
                    Some(true) => Some(f),
                    Some(false) => {
                        inner.free_frame(f);
                        continue;
                    }
                    None => {
                        inner.free_frame(f);
                        break;
                    }
                }
            };
            if let Some(f) = placed {
                if run.is_empty() {
                    run_first = page;
                }
                run.push(f);
            }
        }
        if !run.is_empty() {
            self.push_run(slot, &file, run_first, run);
            started += 1;
        }
        Ok(started)
    }

    /// Queues the read of `frames` (locked by us, in the index) for pages `first..` of
    /// `file`, for request `slot`.
    fn push_run(&mut self, slot: usize, file: &Arc<SharedFile>, first: u64, frames: Vec<u32>) {
        let inner = self.inner.clone();
        let inner = &*inner;
        inner.count_loading(frames.len(), 0);
        let at = inner.view.page_size.start(first);
        // Acquire: pairs with the length's Release stores (`fill_run`).
        let past_end = at >= inner.view.files()[file.slot as usize].len.load(Ordering::Acquire);
        let target = match &*file.fd {
            Backing::File(_) if past_end => None,
            Backing::File(h) => {
                let direct = if inner.direct_loads() { h.direct_read() } else { None };
                Some((direct.map_or(h.as_raw_fd(), |d| d.as_raw_fd()), at, 0, direct.is_some()))
            }
            // Per-device I/O threads take their device's reads, simulated devices book their
            // time in the request: not on a ring.
            Backing::Array(a) if past_end || a.routed() => None,
            Backing::Array(a) => {
                let (dev, dev_at) = a.array.layout.locate(first);
                Some((a.fd(dev), dev_at, dev, false))
            }
        };
        let tag = self.free_loads.pop().unwrap_or_else(|| {
            self.loads.push(None);
            self.loads.len() - 1
        });
        self.requests[slot].as_mut().expect("a live request").loads += 1;
        self.in_kernel += 1;
        let queued = Instant::now();
        let Some((fd, dev_at, dev, os_direct)) = target else {
            // Past the end (zeros, no read) or a routed array: filled here (a blocking
            // read, into the frames), ended once this attempt is over (`end_filled_loads`).
            let r = inner.fill_run(&frames, file.slot, first, &file.fd);
            let load = Load { request: slot, first, frames, dev: 0, bounce: None, os_direct: false, queued };
            self.loads[tag] = Some(load);
            self.filled.push((tag, r));
            return;
        };
        inner.count(|s| &s.load_requests, 1);
        let bounce = self.bounce(frames.len());
        let ptrs: Vec<*mut u8> = (0..frames.len()).map(|i| bounce.page(i)).collect();
        self.loads[tag] =
            Some(Load { request: slot, first, frames, dev, bounce: Some(bounce), os_direct, queued });
        // SAFETY: the bounce is the load's own until the reap (`end_load`) and the file's
        // descriptors live in the request's `file` until then (a drop reaps first).
        unsafe { self.ring.push(fd, dev_at, &ptrs, self.inner.view.page_size.bytes(), tag as u64) };
    }

    /// A bounce of at least `pages` pages: a spare one of its size class, or a new one.
    fn bounce(&mut self, pages: usize) -> Bounce {
        let class = pages.next_power_of_two();
        let i = class.trailing_zeros() as usize;
        let size = self.inner.view.page_size;
        self.spare.get_mut(i).and_then(Vec::pop).unwrap_or_else(|| Bounce::new(class, size))
    }

    /// Keeps `bounce` for a later load, up to `SPARE_BOUNCES` of its class.
    fn keep_bounce(&mut self, bounce: Bounce) {
        let i = bounce.pages.trailing_zeros() as usize;
        if self.spare.len() <= i {
            self.spare.resize_with(i + 1, Vec::new);
        }
        if self.spare[i].len() < SPARE_BOUNCES {
            self.spare[i].push(bounce);
        }
    }

    /// Reaps at least `min` loads and ends them, then tries pending requests again.
    fn reap(&mut self, min: usize) {
        self.end_filled_loads();
        if self.in_kernel == 0 {
            return; // only filled loads were left: no sleep on the ring (or its doorbell)
        }
        let mut reaped = std::mem::take(&mut self.reaped);
        // Armed before sleeping, so a submitter can end the sleep.
        self.doorbell_works();
        self.ring.reap(min, &mut reaped);
        for (tag, r) in reaped.drain(..) {
            if tag == DOORBELL_TAG {
                self.rang = true;
                continue;
            }
            self.in_kernel -= 1;
            self.end_load(tag as usize, r);
        }
        self.reaped = reaped;
        self.end_filled_loads();
        if !self.pending.is_empty() && !self.closing {
            self.retry_pending();
        }
    }

    /// Ends the loads filled at once (`push_run`), and those their requests' tries fill.
    fn end_filled_loads(&mut self) {
        while !self.filled.is_empty() {
            for (tag, r) in std::mem::take(&mut self.filled) {
                self.in_kernel -= 1;
                self.end_filled(tag, r);
            }
        }
    }

    /// Ends load `tag`, whose read into its bounce returned `read` (bytes read, short at a
    /// file's end): the bytes copied into its frames, the rest zeroed.
    fn end_load(&mut self, tag: usize, read: std::io::Result<usize>) {
        let load = self.loads[tag].as_mut().expect("a load in flight");
        let bounce = load.bounce.take().expect("a ring's load has a bounce");
        let (inner, file) =
            (&*self.inner, &self.requests[load.request].as_ref().expect("a live request").file);
        let filled = match read {
            Ok(got) => {
                inner.view.latencies().device(load.dev).0.record(load.queued.elapsed());
                let size = inner.view.page_size;
                let mut pages: Vec<&mut [u8]> = load
                    .frames
                    .iter()
                    // SAFETY: we hold each frame's lock, so its page's bytes are ours to write;
                    // the frames are distinct, so the slices do not overlap.
                    .map(|&f| unsafe { std::slice::from_raw_parts_mut(inner.view.page(f), size.bytes()) })
                    .collect();
                // The read is over (reaped): the bounce's pages are ours to read.
                for (i, p) in pages.iter_mut().enumerate().take(got.div_ceil(size.bytes())) {
                    p.copy_from_slice(bounce.page_bytes(i));
                }
                inner.zero_past(&mut pages, file.slot, size.start(load.first), got);
                // Copied by the CPU: the frames' lines are in its cache.
                Ok(false)
            }
            // A file system that refuses the alignment is read the usual way, from then on.
            Err(e) if load.os_direct && e.raw_os_error() == Some(libc::EINVAL) => {
                if let Backing::File(h) = &*file.fd {
                    h.refuse_direct_read();
                }
                inner.fill_run(&load.frames, file.slot, load.first, &file.fd)
            }
            Err(e) => Err(Error::io(format!("read pages of {}", file.name), e)),
        };
        self.keep_bounce(bounce);
        self.end_filled(tag, filled);
    }

    /// Ends load `tag` whose frames are filled (`Ok(direct)`: as `fill_run` says) or not (the
    /// error): valid and unlocked, or freed; then tries its request again once its loads are
    /// all in.
    fn end_filled(&mut self, tag: usize, filled: Result<bool>) {
        let load = self.loads[tag].take().expect("a load");
        self.free_loads.push(tag);
        let inner = &*self.inner;
        match filled {
            Ok(direct) => {
                inner.mark_loaded(&load.frames, direct);
                for &f in &load.frames {
                    inner.view.frames()[f as usize].unlock(inner.me, true);
                }
            }
            Err(e) => {
                for &f in &load.frames {
                    inner.free_frame(f);
                }
                let req = self.requests[load.request].as_mut().expect("a live request");
                req.error.get_or_insert(e);
            }
        }
        let req = self.requests[load.request].as_mut().expect("a live request");
        req.loads -= 1;
        if req.loads == 0 {
            self.try_finish(load.request);
        }
    }

    /// Reaps every load in flight: the queue then holds nothing others wait for.
    fn quiesce(&mut self) {
        while self.in_kernel > 0 {
            self.reap(1);
        }
    }
}

impl Drop for SharedQueue {
    fn drop(&mut self) {
        // The kernel may still write into our bounces: let every read end (and its frames
        // be unlocked) first.
        self.closing = true;
        self.quiesce();
        self.retired.clear();
    }
}

/// Whether page `page` is read in the same request as the run from page `first` to it: any
/// page of an OS file; an array file's on the same device, next on it.
fn continues(fd: &Backing, first: u64, page: u64) -> bool {
    match fd {
        Backing::File(_) => true,
        Backing::Array(a) => {
            let layout = &a.array.layout;
            let ((d0, at0), (d, at)) = (layout.locate(first), layout.locate(page));
            d == d0 && at == at0 + (page - first) * layout.page_size()
        }
    }
}

impl SharedFile {
    /// Whether a queue of the cache at `cache` (its `Inner`'s address) may take a request for
    /// `len` bytes at `offset` of this file: open in that cache, within its largest file.
    pub(crate) fn check_queued(&self, cache: usize, offset: u64, len: usize) -> Result<()> {
        if Arc::as_ptr(&self.inner) as usize != cache {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the file is open in another cache than the queue's",
            ));
        }
        if offset.checked_add(len as u64).is_none_or(|end| end > self.max_len) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{len} bytes at {offset} of {} pass its file system's largest file", self.name),
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::small;
    use super::super::{SharedArray, SharedCache, SharedConfig};
    use super::*;
    use crate::io::engine::IoKind;
    use crate::io::layout::LayoutKind;
    use crate::meta::array::ArraySpec;

    /// xorshift64: the same operations every run.
    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i / 7) as u8 ^ seed ^ (i >> 12) as u8).collect()
    }

    fn reap_all(q: &mut SharedQueue) -> Vec<Completion> {
        let mut out = Vec::new();
        let n = q.in_flight();
        assert_eq!(q.wait(n, &mut out), n);
        assert_eq!(q.in_flight(), 0);
        out
    }

    /// Rounds of up to `depth` reads in flight at once (at random offsets and lengths, across
    /// pages and past the end), then a few writes through the queue and beside it: every read
    /// returns what a plain file would, on a cache far smaller than the file (reads wait for
    /// frames, and loads of one round evict another's pages), with io_uring and without, with
    /// `O_DIRECT` loads and without, on 16 frames of 16 KiB; the file holds the last bytes
    /// written.
    #[test]
    fn queued_reads_and_writes_match_an_oracle() {
        for (io, memory, direct_loads, page_size) in [
            (IoKind::Uring, 1 << 20, true, PAGE),
            (IoKind::Psync, 64 << 10, false, PAGE),
            (IoKind::Uring, 64 << 10, false, PAGE),
            (IoKind::Uring, 256 << 10, true, 16 << 10),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("f");
            let mut oracle = pattern(600 << 10, 3);
            std::fs::write(&p, &oracle).unwrap();
            let cache =
                SharedCache::create_private(&SharedConfig { memory, io, direct_loads, page_size, ..small() })
                    .unwrap();
            let f = Arc::new(cache.open_path(&p, true).unwrap());
            let mut q = cache.queue(16).unwrap();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ memory;
            for round in 0..60u64 {
                let mut asked = std::collections::HashMap::new();
                for tag in 0..1 + next(&mut seed) % 16 {
                    let off = next(&mut seed) % (oracle.len() as u64 + 8192);
                    let len = 1 + next(&mut seed) as usize % 40_000;
                    q.read(&f, off, vec![0xee; len], tag).unwrap();
                    asked.insert(tag, (off, len));
                }
                for c in reap_all(&mut q) {
                    let (off, len) = asked.remove(&c.tag).unwrap();
                    let from = (off as usize).min(oracle.len());
                    let want = &oracle[from..(from + len).min(oracle.len())];
                    assert_eq!(c.result.unwrap(), want.len(), "round {round}, read of {len} at {off}");
                    let bad = c.buf[..want.len()].iter().zip(want).position(|(a, b)| a != b);
                    assert!(bad.is_none(), "{io:?} {memory}, round {round}: the bytes of {len} at {off}, first wrong at +{bad:?}: {:?} for {:?}", &c.buf[bad.unwrap_or(0)..][..8], &want[bad.unwrap_or(0)..][..8]);
                }
                assert!(asked.is_empty());
                for tag in 0..next(&mut seed) % 3 {
                    let off = next(&mut seed) % (oracle.len() as u64 + 4096);
                    let data = pattern(1 + next(&mut seed) as usize % 9000, round as u8);
                    let end = off as usize + data.len();
                    if end > oracle.len() {
                        oracle.resize(end, 0);
                    }
                    oracle[off as usize..end].copy_from_slice(&data);
                    if tag == 0 {
                        q.write(&f, off, data.clone(), 100).unwrap();
                        let c = reap_all(&mut q).pop().unwrap();
                        assert_eq!((c.tag, c.result.unwrap(), c.buf), (100, data.len(), data));
                    } else {
                        f.write_all_at(&data, off).unwrap();
                    }
                }
            }
            drop(q);
            f.sync_all().unwrap();
            assert!(std::fs::read(&p).unwrap() == oracle, "{io:?}, {memory} bytes: the file");
        }
    }

    /// Pages the queue loads are the cache's, for every process: another attachment's reads
    /// of them are hits.
    #[test]
    fn pages_a_queue_loaded_are_hits_for_another_attachment() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let bytes = pattern(256 << 10, 5);
        std::fs::write(&p, &bytes).unwrap();
        let a = SharedCache::create(&small()).unwrap();
        let b = SharedCache::attach(a.segment_fd().try_clone_to_owned().unwrap()).unwrap();
        let f = Arc::new(a.open_path(&p, false).unwrap());
        let mut q = a.queue(8).unwrap();
        for i in 0..8u64 {
            q.read(&f, i * (32 << 10), vec![0; 32 << 10], i).unwrap();
        }
        // All eight in flight at once: the queue waited for none of them.
        assert_eq!((q.in_kernel, q.in_flight()), (8, 8));
        for c in reap_all(&mut q) {
            let at = c.tag as usize * (32 << 10);
            assert!(c.buf == bytes[at..at + (32 << 10)], "read {}", c.tag);
        }
        let before = b.status().stats;
        let g = b.open_path(&p, false).unwrap();
        let mut got = vec![0; bytes.len()];
        assert_eq!(g.read_at(&mut got, 0).unwrap(), bytes.len());
        assert!(got == bytes);
        let after = b.status().stats;
        assert_eq!(after.misses, before.misses, "the other attachment loaded nothing");
        assert_eq!(after.hits - before.hits, 64, "each of its 64 pages a hit");
    }

    /// An array file's pages come from each device's backing file, a read per device run,
    /// through a cache of a few frames (of 4 KiB, and of 16 KiB).
    #[test]
    fn an_array_file_is_read_from_its_devices() {
        an_array_file_is_read_from_its_devices_in_pages_of(PAGE);
        an_array_file_is_read_from_its_devices_in_pages_of(16 << 10);
    }

    fn an_array_file_is_read_from_its_devices_in_pages_of(page: usize) {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<std::path::PathBuf> = (0..3).map(|i| root.path().join(format!("ssd{i}"))).collect();
        let spec = ArraySpec {
            dirs: &dirs,
            meta_dir: None,
            page_size: page,
            stripe_unit: 4 * page as u64,
            kind: LayoutKind::Stripe,
            sims: &[],
            allow_buffered: false,
            io_threads: crate::io::engine::SubmitKind::Caller,
            engine: None,
        };
        let config = SharedConfig { memory: 16 * page as u64, page_size: page, ..small() };
        let cache = SharedCache::create_private(&config).unwrap();
        let array = SharedArray::create(&cache, spec).unwrap();
        let f = Arc::new(array.create_file("a").unwrap());
        let bytes = pattern(300 << 10, 9);
        f.write_all_at(&bytes, 0).unwrap();
        f.sync_data().unwrap();
        f.evict(0, 0).unwrap();
        let mut q = cache.queue(4).unwrap();
        for i in 0..4u64 {
            q.read(&f, i * 75_000, vec![0; 75_000], i).unwrap();
        }
        for c in reap_all(&mut q) {
            let at = c.tag as usize * 75_000;
            assert_eq!(c.result.unwrap(), 75_000);
            assert!(c.buf == bytes[at..at + 75_000], "read {}", c.tag);
        }
    }

    /// A ring's read lands in the queue's own memory (its bounce), and only the reap copies
    /// it into the frames: a read the kernel finishes after the process died never touches
    /// the segment. (Reads through `psync` happen at the push, which shows it before a reap.)
    #[test]
    fn device_reads_land_in_the_queue_s_memory_and_reach_frames_at_the_reap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let bytes = pattern(64 << 10, 7);
        std::fs::write(&p, &bytes).unwrap();
        let config = SharedConfig { io: IoKind::Psync, direct_loads: false, ..small() };
        let cache = SharedCache::create_private(&config).unwrap();
        let f = Arc::new(cache.open_path(&p, false).unwrap());
        let mut q = cache.queue(4).unwrap();
        q.read(&f, 0, vec![0; 4 * PAGE], 1).unwrap();
        let load = q.loads.iter().flatten().next().expect("a load in flight");
        assert_eq!(load.frames.len(), 4);
        let bounce = load.bounce.as_ref().expect("read into a bounce");
        for (i, &fr) in load.frames.iter().enumerate() {
            // SAFETY: a read of a frame the test's queue holds locked; nothing writes it.
            let frame = unsafe { std::slice::from_raw_parts(cache.inner.view.page(fr), PAGE) };
            // The psync read is over (done at the push).
            let read = bounce.page_bytes(i);
            assert!(read == &bytes[i * PAGE..][..PAGE], "page {i} read into the bounce");
            assert!(frame.iter().all(|&b| b == 0), "frame of page {i} written before the reap");
        }
        let c = reap_all(&mut q).pop().unwrap();
        assert_eq!(c.result.unwrap(), 4 * PAGE);
        assert!(c.buf == bytes[..4 * PAGE]);
    }

    #[test]
    fn bad_requests_get_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, pattern(64 << 10, 1)).unwrap();
        let cache = SharedCache::create_private(&small()).unwrap();
        for depth in [0, MAX_DEPTH + 1] {
            assert_eq!(cache.queue(depth).err().map(|e| e.kind()), Some(ErrorKind::InvalidInput));
        }
        let other = SharedCache::create_private(&small()).unwrap();
        let foreign = Arc::new(other.open_path(&p, false).unwrap());
        let f = Arc::new(cache.open_path(&p, false).unwrap());
        let mut q = cache.queue(2).unwrap();
        let kind = |r: Result<()>| r.err().map(|e| e.kind());
        assert_eq!(kind(q.read(&foreign, 0, vec![0; 10], 0)), Some(ErrorKind::InvalidInput));
        assert_eq!(kind(q.read(&f, u64::MAX - 4, vec![0; 10], 0)), Some(ErrorKind::InvalidInput));
        q.read(&f, 0, vec![0; 10], 1).unwrap();
        q.read(&f, 4096, vec![0; 10], 2).unwrap();
        assert_eq!(kind(q.read(&f, 0, vec![0; 10], 3)), Some(ErrorKind::Busy));
        assert_eq!(reap_all(&mut q).len(), 2);
        // Written through a read-only open: the completion carries the error.
        q.write(&f, 0, vec![1; 10], 4).unwrap();
        let c = reap_all(&mut q).pop().unwrap();
        assert!(c.result.is_err(), "a write through a read-only open");
        assert!(std::fs::read(&p).unwrap() == pattern(64 << 10, 1), "the file unchanged");
    }
}
