//! The io_uring engine (seed 002 §3.1's asynchronous I/O, seed 004 §5.4's batching).
//!
//! - A batch (several devices' runs of a multi-page read, or write-back) goes to the kernel
//!   in one `io_uring_enter`, and the caller sleeps in the kernel until all of it completes:
//!   no thread polls, so completions cost no core.
//! - The frame arena is registered as fixed buffers, so single-frame reads and writes skip
//!   the page pinning that each plain request pays. Each ring has a sparse table of the
//!   arena's chunks (2 MiB, or larger to stay within the kernel's 16384 buffers) and
//!   registers a chunk when it first does I/O into it: registration pins the memory for the
//!   ring's life, and pinning all of a large arena at start would fault in and zero all of
//!   it (seconds for a few GiB here). Where the kernel refuses (an old kernel,
//!   RLIMIT_MEMLOCK) the engine logs why and uses plain requests.
//! - Synchronous callers borrow a ring from a pool; an asynchronous [`UringQueue`] owns one.
//! - A transfer the kernel leaves short, or fails with EINTR/EAGAIN, is finished with
//!   preadv/pwritev, which also tells end of file from a short transfer. O_DIRECT reads of
//!   regular files are short only at end of file, so this path is rare.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, RawFd};

use crossbeam_queue::SegQueue;
use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::{read_as_batch, write_as_batch, EngineQueue, IoEngine, IoReq, QueueCompletion};
use crate::io::device::BackingFile;
use crate::io::sys::{preadv_all, preadv_on, pwritev_all};

/// Most fixed buffers one ring may register (the kernel's IORING_MAX_REG_BUFFERS).
const MAX_BUFFERS: usize = 1 << 14;
/// Smallest registered chunk of the arena: one huge page.
const MIN_CHUNK: usize = 2 << 20;
/// Largest buffer io_uring registers.
const MAX_CHUNK: usize = 1 << 30;
/// Submission queue entries of a pooled ring: batches larger than this are submitted in parts.
const POOL_RING_ENTRIES: u32 = 64;
/// Most completions a queue hands back per reap (beyond what was asked for): a caller that
/// resubmits after each reap then keeps the device busy while it works through a burst of
/// completions, instead of letting the device drain while it processes the whole burst.
const REAP_BATCH: usize = 4;
/// Most iovecs in one vectored request (Linux's UIO_MAXIOV).
const MAX_IOV: usize = 1024;

/// The frame arena as fixed buffers: `len` bytes from `base` in chunks of `chunk` bytes,
/// chunk `i` being buffer `i` of every ring's (sparse) table.
#[derive(Debug, Clone, Copy)]
struct Fixed {
    base: usize,
    len: usize,
    chunk: usize,
}

impl Fixed {
    /// The arena `base .. base + len` cut into at most [`MAX_BUFFERS`] chunks; None if it is
    /// too large to register.
    fn new(base: *mut u8, len: usize) -> Option<Fixed> {
        let chunk = len.div_ceil(MAX_BUFFERS).next_power_of_two().max(MIN_CHUNK);
        (chunk <= MAX_CHUNK).then_some(Fixed { base: base as usize, len, chunk })
    }

    fn chunks(&self) -> usize {
        self.len.div_ceil(self.chunk)
    }

    /// The chunk that holds all of `ptr .. ptr + len`, if one does.
    fn chunk_of(&self, ptr: *const u8, len: usize) -> Option<usize> {
        let off = (ptr as usize).checked_sub(self.base)?;
        if len == 0 || off + len > self.len || off / self.chunk != (off + len - 1) / self.chunk {
            return None;
        }
        Some(off / self.chunk)
    }
}

/// A ring, and the arena's chunks registered on it so far.
///
/// Chunks are registered on first use rather than all at start: registering pins (and so
/// faults in and zeroes) the memory, which for a large cache would take seconds at start and
/// make its whole budget resident at once.
struct Ring {
    uring: IoUring,
    fixed: Option<Fixed>,
    registered: Vec<bool>,
}

impl Ring {
    /// A ring of `entries` submission entries, with a table for the arena's chunks if
    /// `fixed` is given and the kernel takes it.
    fn new(entries: u32, fixed: Option<Fixed>) -> io::Result<Ring> {
        // Completions are run when we enter the kernel to wait for them anyway; coop taskrun
        // spares an interrupt per completion. Kernels before 5.19 refuse the flag.
        let uring = match IoUring::builder().setup_coop_taskrun().setup_cqsize(entries * 2).build(entries) {
            Ok(r) => r,
            Err(_) => IoUring::builder().setup_cqsize(entries * 2).build(entries)?,
        };
        let fixed = fixed.filter(|f| match uring.submitter().register_buffers_sparse(f.chunks() as u32) {
            Ok(()) => true,
            Err(e) => {
                log::info!("io_uring refused a fixed-buffer table ({e}); using plain requests");
                false
            }
        });
        let registered = vec![false; fixed.map_or(0, |f| f.chunks())];
        Ok(Ring { uring, fixed, registered })
    }

    /// The fixed buffer that holds all of `ptr .. ptr + len`, registering its chunk on this
    /// ring first if need be; None if it is not in the arena or the kernel refuses.
    fn fixed_index(&mut self, ptr: *const u8, len: usize) -> Option<u16> {
        let f = self.fixed?;
        let c = f.chunk_of(ptr, len)?;
        if !self.registered[c] {
            let iov = libc::iovec {
                iov_base: (f.base + c * f.chunk) as *mut libc::c_void,
                iov_len: f.chunk.min(f.len - c * f.chunk),
            };
            // SAFETY: the iovec lies inside the frame arena, which is mapped for the life of
            // the cache and so outlives every ring of its engine (the cache drops the engine
            // before the arena). The kernel pins those pages; the arena gives no memory back
            // while its engine registers buffers (see `UringEngine::new`).
            match unsafe { self.uring.submitter().register_buffers_update(c as u32, &[iov], None) } {
                Ok(_) => self.registered[c] = true,
                Err(e) => {
                    log::info!("io_uring refused to register frame memory ({e}); using plain requests");
                    self.fixed = None;
                    return None;
                }
            }
        }
        u16::try_from(c).ok()
    }

    /// The entry that reads (or writes) `iov` at `offset` of `fd`: fixed if a single buffer
    /// in the arena.
    fn entry(&mut self, fd: RawFd, offset: u64, iov: &[libc::iovec], write: bool, tag: u64) -> squeue::Entry {
        let fd = types::Fd(fd);
        let single = match iov {
            [one] => self.fixed_index(one.iov_base as *const u8, one.iov_len).map(|i| (one, i)),
            _ => None,
        };
        let e = match (single, write) {
            (Some((b, i)), false) => {
                opcode::ReadFixed::new(fd, b.iov_base as *mut u8, b.iov_len as u32, i).offset(offset).build()
            }
            (Some((b, i)), true) => opcode::WriteFixed::new(fd, b.iov_base as *const u8, b.iov_len as u32, i)
                .offset(offset)
                .build(),
            (None, false) => opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32).offset(offset).build(),
            (None, true) => opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(offset).build(),
        };
        e.user_data(tag)
    }

    /// Pushes `e`, submitting what is queued first if the submission queue is full.
    ///
    /// # Safety
    /// The buffers `e` names must stay valid until its completion is reaped.
    unsafe fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: passed on to our caller.
            if unsafe { self.uring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            self.enter(0)?;
        }
    }

    /// Submits what is queued and waits for `want` completions, retrying interrupted waits.
    fn enter(&self, want: usize) -> io::Result<()> {
        loop {
            match self.uring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if is_transient(&e) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Completions the completion queue holds.
    fn cq_capacity(&self) -> usize {
        self.uring.params().cq_entries() as usize
    }

    /// Submits what is queued, waits for at least `want` completions and hands each
    /// available one, up to `max`, to `f` (tag, result); returns how many. Skips the system
    /// call when nothing is left to submit and enough completions are already there.
    fn collect(&mut self, want: usize, max: usize, mut f: impl FnMut(u64, i32)) -> usize {
        if !self.uring.submission().is_empty() || self.uring.completion().len() < want {
            self.wait_in_flight(want);
        }
        let mut n = 0;
        for c in self.uring.completion().take(max) {
            f(c.user_data(), c.result());
            n += 1;
        }
        n
    }

    /// Waits for `want` completions of requests the kernel already holds. Their buffers are
    /// borrowed by callers who cannot be told to keep them longer, so if the kernel cannot
    /// be waited on the process stops rather than return while it may still write to them.
    fn wait_in_flight(&self, want: usize) {
        if let Err(e) = self.enter(want) {
            log::error!("io_uring_enter failed with requests in flight: {e}");
            eprintln!("upcache: io_uring_enter failed with requests in flight: {e}; aborting");
            std::process::abort();
        }
    }
}

/// Interrupted or out of resources for a moment: try again.
fn is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY))
}

/// The result of a completion with `res` for a request of `want` bytes, finishing a short or
/// transiently failed transfer with `finish(done)`, which moves the bytes from `done` on.
fn settle(res: i32, want: usize, finish: impl FnOnce(usize) -> io::Result<usize>) -> io::Result<usize> {
    if res < 0 {
        let e = io::Error::from_raw_os_error(-res);
        return if is_transient(&e) { finish(0) } else { Err(e) };
    }
    let done = res as usize;
    if done < want {
        return finish(done);
    }
    Ok(done)
}

/// io_uring: batched submission, fixed buffers, asynchronous queues.
pub struct UringEngine {
    pool: SegQueue<Ring>,
    fixed: Option<Fixed>,
}

impl std::fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringEngine").field("fixed", &self.fixed).finish()
    }
}

impl UringEngine {
    /// Probes the kernel: makes a ring and checks it supports every operation used. `frames`
    /// (start and length of the frame arena) is registered on each ring if given; pass None
    /// if the arena may give memory back to the kernel (`MADV_DONTNEED` would detach the
    /// registered pages from the mapping).
    pub fn new(frames: Option<(*mut u8, usize)>) -> io::Result<Self> {
        let fixed = frames.and_then(|(base, len)| Fixed::new(base, len));
        let ring = Ring::new(POOL_RING_ENTRIES, fixed)?;
        let mut probe = Probe::new();
        ring.uring.submitter().register_probe(&mut probe)?;
        let needed = [
            ("readv", opcode::Readv::CODE),
            ("writev", opcode::Writev::CODE),
            ("read_fixed", opcode::ReadFixed::CODE),
            ("write_fixed", opcode::WriteFixed::CODE),
        ];
        for (name, code) in needed {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("the kernel's io_uring lacks {name}"),
                ));
            }
        }
        // If the probe ring could not make a buffer table, later rings will not either.
        let fixed = ring.fixed;
        let engine = UringEngine { pool: SegQueue::new(), fixed };
        engine.pool.push(ring);
        Ok(engine)
    }

    /// Whether the frame arena is registered as fixed buffers.
    pub fn has_fixed_buffers(&self) -> bool {
        self.fixed.is_some()
    }

    fn take_ring(&self) -> io::Result<Ring> {
        match self.pool.pop() {
            Some(r) => Ok(r),
            None => Ring::new(POOL_RING_ENTRIES, self.fixed),
        }
    }

    /// Writes each of `writes` (a descriptor, an offset in it, the bytes) in full, all of them
    /// in the kernel's hands at once (the shared cache's write-back runs, `shared/writeback.rs`);
    /// each one's outcome, in order. One write is a plain `pwritev`, as in `run_batch`.
    pub(crate) fn write_batch(&self, writes: &[(RawFd, u64, &[IoSlice<'_>])]) -> Vec<io::Result<()>> {
        if let [(fd, offset, bufs)] = writes {
            return vec![pwritev_all(*fd, *offset, &mut bufs.to_vec())];
        }
        let views: Vec<(RawFd, u64, &[libc::iovec], bool)> =
            writes.iter().map(|&(fd, offset, bufs)| (fd, offset, as_iovecs(bufs), true)).collect();
        // SAFETY: the buffers are borrowed from `writes` until we return.
        let raw = match unsafe { self.run_all(&views) } {
            Ok(raw) => raw,
            Err(e) => return writes.iter().map(|_| Err(io::Error::new(e.kind(), e.to_string()))).collect(),
        };
        raw.into_iter()
            .zip(writes)
            .map(|(r, &(fd, offset, bufs))| match r {
                Some(Ok(res)) => finish_write(fd, offset, bufs, res).map(|_| ()),
                Some(Err(e)) => Err(e),
                None => finish_write(fd, offset, bufs, 0).map(|_| ()),
            })
            .collect()
    }

    /// Reads each of `reads` (a descriptor, an offset in it, the buffers) up to the end of its
    /// file, all of them in the kernel's hands at once (an array file's run of pages on several
    /// devices, `shared/backing.rs`); the bytes each read, in order. One read is a plain
    /// `preadv`.
    pub(crate) fn read_batch(
        &self,
        reads: &mut [(RawFd, u64, &mut [IoSliceMut<'_>])],
    ) -> Vec<io::Result<usize>> {
        if let [(fd, offset, bufs)] = reads {
            return vec![preadv_all(*fd, *offset, bufs)];
        }
        let views: Vec<(RawFd, u64, &[libc::iovec], bool)> =
            reads.iter().map(|(fd, offset, bufs)| (*fd, *offset, as_iovecs_mut(bufs), false)).collect();
        // SAFETY: the buffers are borrowed from `reads` until we return, and nothing reads or
        // writes them meanwhile (`views` only names them).
        let raw = match unsafe { self.run_all(&views) } {
            Ok(raw) => raw,
            Err(e) => return reads.iter().map(|_| Err(io::Error::new(e.kind(), e.to_string()))).collect(),
        };
        raw.into_iter()
            .zip(reads.iter_mut())
            .map(|(r, (fd, offset, bufs))| {
                let want = bufs.iter().map(|b| b.len()).sum();
                let mut rest = |done: usize| {
                    let mut rest: &mut [IoSliceMut<'_>] = bufs;
                    IoSliceMut::advance_slices(&mut rest, done);
                    preadv_on(*fd, *offset, rest, done)
                };
                match r {
                    Some(Ok(res)) => settle(res, want, rest),
                    Some(Err(e)) => Err(e),
                    None => rest(0),
                }
            })
            .collect()
    }

    /// Puts every request of `views` (descriptor, offset, buffers, whether a write) in the
    /// kernel's hands on one ring and waits for them all: each one's raw result, None for one
    /// never pushed (too many buffers, or refused by the ring: its caller runs it with
    /// preadv/pwritev). An error if no ring can be had.
    ///
    /// # Safety
    /// The buffers the iovecs name must stay valid (for writing, for reads) until we return.
    unsafe fn run_all(
        &self,
        views: &[(RawFd, u64, &[libc::iovec], bool)],
    ) -> io::Result<Vec<Option<io::Result<i32>>>> {
        let mut ring = self.take_ring()?;
        // Raw results by request; requests never pushed (too many iovecs, or refused by the
        // ring) keep None and are run by our caller with preadv/pwritev.
        let mut raw: Vec<Option<io::Result<i32>>> = views.iter().map(|_| None).collect();
        let cap = ring.cq_capacity();
        let mut in_flight = 0;
        // Merged copies of the iovec arrays that have buffers side by side; they live until
        // every request has completed.
        let merged: Vec<Option<Vec<libc::iovec>>> = views
            .iter()
            .map(|&(_, _, iov, _)| {
                mergeable(iov).then(|| {
                    let mut m = Vec::with_capacity(iov.len());
                    push_merged(&mut m, iov.iter().copied());
                    m
                })
            })
            .collect();
        for i in 0..views.len() {
            let (fd, offset, iov, write) = views[i];
            let iov = merged[i].as_deref().unwrap_or(iov);
            if iov.len() > MAX_IOV {
                continue;
            }
            // Never more in flight than the completion queue holds, so it cannot overflow.
            while in_flight == cap {
                in_flight -= ring.collect(1, usize::MAX, |tag, res| raw[tag as usize] = Some(Ok(res)));
            }
            let e = ring.entry(fd, offset, iov, write, i as u64);
            // SAFETY: our caller keeps the buffers valid until we return, and we return only
            // after every pushed request has completed.
            match unsafe { ring.push(&e) } {
                Ok(()) => in_flight += 1,
                Err(e) => raw[i] = Some(Err(e)),
            }
        }
        while in_flight > 0 {
            in_flight -= ring.collect(1, usize::MAX, |tag, res| raw[tag as usize] = Some(Ok(res)));
        }
        self.pool.push(ring);
        Ok(raw)
    }
}

impl IoEngine for UringEngine {
    fn name(&self) -> &'static str {
        "uring"
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        read_as_batch(self, file, offset, bufs)
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        write_as_batch(self, file, offset, bufs)
    }

    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        // One request and a caller that waits for it: a blocking system call is faster than
        // a ring round trip (bench/RESULTS.md: cold random reads, writes + fdatasync). Rings
        // pay off with several in flight.
        if let [only] = reqs {
            return vec![match only {
                IoReq::Read { file, offset, bufs } => preadv_all(file.as_raw_fd(), *offset, bufs),
                IoReq::Write { file, offset, bufs } => {
                    let n = bufs.iter().map(|b| b.len()).sum();
                    pwritev_all(file.as_raw_fd(), *offset, &mut bufs.to_vec()).map(|()| n)
                }
            }];
        }
        let views: Vec<(RawFd, u64, &[libc::iovec], bool)> = reqs
            .iter()
            .map(|r| match r {
                IoReq::Read { file, offset, bufs } => (file.as_raw_fd(), *offset, as_iovecs_mut(bufs), false),
                IoReq::Write { file, offset, bufs } => (file.as_raw_fd(), *offset, as_iovecs(bufs), true),
            })
            .collect();
        // SAFETY: the buffers are borrowed from `reqs` until we return.
        let raw = match unsafe { self.run_all(&views) } {
            Ok(raw) => raw,
            Err(e) => return reqs.iter().map(|_| Err(io::Error::new(e.kind(), e.to_string()))).collect(),
        };
        raw.into_iter()
            .zip(reqs.iter_mut())
            .map(|(r, req)| match r {
                Some(Ok(res)) => finish(req, res),
                Some(Err(e)) => Err(e),
                None => finish(req, 0),
            })
            .collect()
    }

    fn queue(&self, depth: usize) -> Option<io::Result<Box<dyn EngineQueue>>> {
        Some(UringQueue::open(depth, self.fixed).map(|q| Box::new(q) as Box<dyn EngineQueue>))
    }
}

/// The outcome of `req` given its completion's `res`, finishing it synchronously if short.
fn finish(req: &mut IoReq<'_, '_>, res: i32) -> io::Result<usize> {
    match req {
        IoReq::Read { file, offset, bufs } => {
            let want = bufs.iter().map(|b| b.len()).sum();
            settle(res, want, |done| {
                let mut rest: &mut [IoSliceMut<'_>] = bufs;
                IoSliceMut::advance_slices(&mut rest, done);
                preadv_on(file.as_raw_fd(), *offset, rest, done)
            })
        }
        IoReq::Write { file, offset, bufs } => finish_write(file.as_raw_fd(), *offset, bufs, res),
    }
}

/// The outcome of a write of `bufs` at `offset` of `fd` whose completion gave `res`, the rest
/// written with pwritev if it was short.
fn finish_write(fd: RawFd, offset: u64, bufs: &[IoSlice<'_>], res: i32) -> io::Result<usize> {
    let want = bufs.iter().map(|b| b.len()).sum();
    settle(res, want, |done| {
        let mut rest = bufs.to_vec();
        let mut rest = &mut rest[..];
        IoSlice::advance_slices(&mut rest, done);
        pwritev_all(fd, offset + done as u64, rest)?;
        Ok(want)
    })
}

/// Appends `iov` to `out`, merging each buffer that starts where the previous one ends:
/// frames claimed side by side (`cache/batch.rs`) then go to the kernel as one buffer, which it
/// pins in one step (and, whole inside a registered chunk, as a fixed buffer it need not pin).
fn push_merged(out: &mut Vec<libc::iovec>, iov: impl IntoIterator<Item = libc::iovec>) {
    for v in iov {
        match out.last_mut() {
            Some(last) if (last.iov_base as usize).wrapping_add(last.iov_len) == v.iov_base as usize => {
                last.iov_len += v.iov_len;
            }
            _ => out.push(v),
        }
    }
}

/// Whether some buffer of `iov` starts where the previous one ends.
fn mergeable(iov: &[libc::iovec]) -> bool {
    iov.windows(2).any(|w| (w[0].iov_base as usize).wrapping_add(w[0].iov_len) == w[1].iov_base as usize)
}

fn as_iovecs_mut<'a>(bufs: &'a [IoSliceMut<'_>]) -> &'a [libc::iovec] {
    // SAFETY: IoSliceMut is guaranteed ABI-compatible with iovec on Unix; the view borrows
    // the same memory for the same lifetime.
    unsafe { std::slice::from_raw_parts(bufs.as_ptr() as *const libc::iovec, bufs.len()) }
}

fn as_iovecs<'a>(bufs: &'a [IoSlice<'_>]) -> &'a [libc::iovec] {
    // SAFETY: as above, for IoSlice.
    unsafe { std::slice::from_raw_parts(bufs.as_ptr() as *const libc::iovec, bufs.len()) }
}

/// A read in flight on a queue: enough to finish it synchronously if it comes back short.
struct Slot {
    tag: u64,
    fd: RawFd,
    offset: u64,
    /// The destination buffers. A vectored read's entry points at this heap array, which
    /// stays put when `slots` reallocates.
    iov: Vec<libc::iovec>,
}

impl Slot {
    fn len(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }
}

/// An asynchronous read queue on its own ring.
pub struct UringQueue {
    ring: Ring,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Reads in the kernel's hands.
    in_kernel: usize,
    /// Completions not yet reported: reaped early (to keep the completion queue from
    /// overflowing) or failed before reaching the kernel.
    ready: Vec<QueueCompletion>,
    /// Queued reads that make the queue submit without waiting for a reap.
    submit_batch: usize,
    /// Completions being collected (kept to reuse its memory).
    cqes: Vec<(u64, i32)>,
    /// The armed doorbell read (`EngineQueue::arm_doorbell`): its eventfd, tag and the
    /// 8 bytes the kernel reads into, boxed so they stay put until the completion.
    doorbell: Option<(RawFd, u64, Box<u64>)>,
    /// A doorbell read failed: this ring cannot be rung (not armed again, or a waiter would
    /// spin on the error).
    doorbell_failed: bool,
}

/// The ring's user data of the doorbell read (slots are numbered from 0).
const DOORBELL: u64 = u64::MAX;

// SAFETY: the raw pointers in `slots` name buffers that the queue's owner reserved for these
// reads; nothing in the queue is tied to the thread that made it (the ring is not set up
// single-issuer), so the queue may move between threads.
unsafe impl Send for UringQueue {}

impl UringQueue {
    /// A queue on a ring of its own for `depth` reads in flight (frames registered as
    /// `fixed` says, the engine's).
    fn open(depth: usize, fixed: Option<Fixed>) -> io::Result<Self> {
        let entries = depth.clamp(8, 4096).next_power_of_two() as u32;
        Ring::new(entries, fixed).map(UringQueue::new)
    }

    fn new(ring: Ring) -> Self {
        UringQueue {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            in_kernel: 0,
            ready: Vec::new(),
            submit_batch: 1,
            cqes: Vec::new(),
            doorbell: None,
            doorbell_failed: false,
        }
    }

    /// A queue on a ring of its own for `depth` reads in flight into any memory (no fixed
    /// buffers): the shared cache's I/O queue.
    pub(crate) fn plain(depth: usize) -> io::Result<Self> {
        Self::open(depth, None)
    }

    /// [`EngineQueue::push_read`] on descriptor `fd` (the shared cache's files have no
    /// `BackingFile`).
    ///
    /// # Safety
    /// As `push_read`'s, and `fd` must stay open until the completion is reaped.
    pub(crate) unsafe fn push_read_fd(
        &mut self,
        fd: RawFd,
        offset: u64,
        bufs: &[*mut u8],
        len: usize,
        tag: u64,
    ) {
        if bufs.len() > MAX_IOV {
            // Too many buffers for one request: run it here, reported at the next reap.
            let mut slices: Vec<IoSliceMut<'_>> = bufs
                .iter()
                // SAFETY: the caller gave us the buffers until we report `tag`.
                .map(|&b| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(b, len) }))
                .collect();
            let r = preadv_all(fd, offset, &mut slices);
            self.ready.push((tag, r));
            return;
        }
        // Never more in the kernel than the completion queue holds, so it cannot overflow.
        while self.in_kernel >= self.ring.cq_capacity() {
            self.collect(1);
        }
        let i = self.slot(tag, fd, offset, bufs, len);
        // The iovecs' heap array stays put (and in `slots`) until the completion.
        let e = self.ring.entry(fd, offset, &self.slots[i].iov, false, i as u64);
        // SAFETY: push_read's caller keeps the buffers valid until we report the completion,
        // and the entry's iovec array (for a vectored read) lives in the slot until then.
        match unsafe { self.ring.push(&e) } {
            Ok(()) => {
                self.in_kernel += 1;
                if self.ring.uring.submission().len() >= self.submit_batch {
                    if let Err(err) = self.ring.enter(0) {
                        // The entries stay queued; the next reap submits them.
                        log::debug!("io_uring submit failed, retried at the next reap: {err}");
                    }
                }
            }
            Err(err) => {
                self.ready.push((tag, Err(err)));
                self.free.push(i);
            }
        }
    }

    /// Waits for at least `want` of the reads in the kernel and moves every available
    /// completion to `ready`.
    fn collect(&mut self, want: usize) {
        let mut cqes = std::mem::take(&mut self.cqes);
        self.in_kernel -= self.ring.collect(want, want.max(REAP_BATCH), |tag, res| cqes.push((tag, res)));
        for (i, res) in cqes.drain(..) {
            if i == DOORBELL {
                let (_, tag, _) = self.doorbell.take().expect("an armed doorbell");
                if res < 0 {
                    log::warn!(
                        "the I/O queue's doorbell failed ({}); wakes come with completions only",
                        io::Error::from_raw_os_error(-res)
                    );
                    self.doorbell_failed = true;
                }
                self.ready.push((tag, Ok(8)));
                continue;
            }
            let s = &self.slots[i as usize];
            let r = settle(res, s.len(), |done| {
                let mut bufs: Vec<IoSliceMut<'_>> = s
                    .iov
                    .iter()
                    .map(|v| {
                        // SAFETY: the caller of push_read gave us the buffers until this
                        // completion; each iovec names one of them.
                        let buf = unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast(), v.iov_len) };
                        IoSliceMut::new(buf)
                    })
                    .collect();
                let mut rest = &mut bufs[..];
                IoSliceMut::advance_slices(&mut rest, done);
                preadv_on(s.fd, s.offset, rest, done)
            });
            self.ready.push((s.tag, r));
            self.free.push(i as usize);
        }
        self.cqes = cqes;
    }

    /// A free slot for a read of `bufs` at `offset` of `fd`, reusing a finished slot's
    /// iovec array where there is one.
    fn slot(&mut self, tag: u64, fd: RawFd, offset: u64, bufs: &[*mut u8], len: usize) -> usize {
        let iovecs = bufs.iter().map(|&b| libc::iovec { iov_base: b.cast(), iov_len: len });
        match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i];
                (s.tag, s.fd, s.offset) = (tag, fd, offset);
                s.iov.clear();
                push_merged(&mut s.iov, iovecs);
                i
            }
            None => {
                let mut iov = Vec::with_capacity(bufs.len());
                push_merged(&mut iov, iovecs);
                self.slots.push(Slot { tag, fd, offset, iov });
                self.slots.len() - 1
            }
        }
    }
}

impl EngineQueue for UringQueue {
    unsafe fn push_read(&mut self, file: &BackingFile, offset: u64, bufs: &[*mut u8], len: usize, tag: u64) {
        // SAFETY: our caller's promise, passed on.
        unsafe { self.push_read_fd(file.as_raw_fd(), offset, bufs, len, tag) }
    }

    fn reap(&mut self, min: usize, out: &mut Vec<QueueCompletion>) {
        let want = min.saturating_sub(self.ready.len()).min(self.in_kernel);
        // Submit what was pushed even if nothing needs waiting for.
        self.collect(want);
        out.append(&mut self.ready);
    }

    fn outstanding(&self) -> usize {
        self.in_kernel + self.ready.len()
    }

    fn set_submit_batch(&mut self, n: usize) {
        self.submit_batch = n.max(1);
    }

    fn arm_doorbell(&mut self, fd: RawFd, tag: u64) -> bool {
        if self.doorbell.is_some() {
            return true;
        }
        if self.doorbell_failed {
            return false;
        }
        while self.in_kernel >= self.ring.cq_capacity() {
            self.collect(1);
        }
        let mut buf = Box::new(0u64);
        let e =
            opcode::Read::new(types::Fd(fd), (&mut *buf as *mut u64).cast(), 8).build().user_data(DOORBELL);
        // SAFETY: the 8 bytes are boxed in `doorbell` until the completion is collected (and
        // the drop waits for it), so the kernel writes only into them.
        match unsafe { self.ring.push(&e) } {
            Ok(()) => {
                self.in_kernel += 1;
                self.doorbell = Some((fd, tag, buf));
                // Handed to the kernel now: the doorbell must ring while we sleep in a reap.
                if let Err(err) = self.ring.enter(0) {
                    log::debug!("io_uring submit failed, retried at the next reap: {err}");
                }
                true
            }
            Err(err) => {
                log::debug!("no doorbell on this ring: {err}");
                false
            }
        }
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The kernel may still read into the doorbell's box: ring it and wait for that.
        if let Some((fd, _, _)) = &self.doorbell {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to the eventfd, which its owner keeps
            // open while this queue lives.
            let wrote = unsafe { libc::write(*fd, (&one as *const u64).cast(), 8) };
            if wrote != 8 {
                // Cannot end the read: leave its 8 bytes to the kernel rather than free them.
                log::error!("ringing the queue's doorbell failed: {}", io::Error::last_os_error());
                if let Some((_, _, buf)) = self.doorbell.take() {
                    Box::leak(buf);
                }
                return;
            }
            while self.doorbell.is_some() {
                self.collect(1);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn iov(base: usize, len: usize) -> libc::iovec {
        libc::iovec { iov_base: base as *mut libc::c_void, iov_len: len }
    }

    fn pairs(v: &[libc::iovec]) -> Vec<(usize, usize)> {
        v.iter().map(|v| (v.iov_base as usize, v.iov_len)).collect()
    }

    #[test]
    fn buffers_side_by_side_merge_and_others_do_not() {
        let input = [iov(4096, 4096), iov(8192, 4096), iov(12288, 4096), iov(40960, 4096), iov(4096, 4096)];
        assert!(mergeable(&input));
        let mut out = Vec::new();
        push_merged(&mut out, input);
        assert_eq!(pairs(&out), vec![(4096, 12288), (40960, 4096), (4096, 4096)]);
        // Out of order (descending) frames do not merge.
        let desc = [iov(8192, 4096), iov(4096, 4096)];
        assert!(!mergeable(&desc));
        let mut out = Vec::new();
        push_merged(&mut out, desc);
        assert_eq!(pairs(&out), vec![(8192, 4096), (4096, 4096)]);
    }

    /// A reap asleep on the ring ends when another thread writes the armed doorbell, with
    /// the doorbell's completion; a queue dropped with it armed waits for its read.
    #[test]
    fn a_doorbell_wakes_a_reap_and_a_drop_waits_for_it() {
        let Ok(ring) = Ring::new(8, None) else { return }; // no io_uring here: nothing to test
        let mut q = UringQueue::new(ring);
        // SAFETY: eventfd takes no pointers; checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        assert!(q.arm_doorbell(fd, 77));
        assert!(q.arm_doorbell(fd, 77), "arming again is a no-op");
        let ringer = std::thread::spawn(move || {
            let one = 1u64;
            // SAFETY: 8 bytes from a live u64 to an open eventfd.
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
        });
        let mut out = Vec::new();
        q.reap(1, &mut out); // sleeps until the write
        ringer.join().unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].0, out[0].1.as_ref().ok().copied()), (77, Some(8)));
        assert!(q.arm_doorbell(fd, 78));
        drop(q); // rings it itself and waits for the read before the box goes
                 // SAFETY: closing our own descriptor once.
        unsafe { libc::close(fd) };
    }
}
