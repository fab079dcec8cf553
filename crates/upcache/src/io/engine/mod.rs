//! How bytes move between frames and backing files.
//!
//! # Contract
//! - Buffers are whole frames (page-size aligned, page-size long), so every request is
//!   O_DIRECT-legal; offsets are multiples of the page size.
//! - A read may return fewer bytes than asked only at the end of the backing file; the caller
//!   zero-fills the rest (a file's unwritten pages read as zeros).
//! - A write writes everything or fails; a failure leaves the caller's pages dirty.
//! - Errors are returned, never panicked on, and an engine never retries by itself: retry
//!   policy belongs to write-back.
//!
//! Implementations: [`psync::PsyncEngine`] (preadv/pwritev from the calling thread) and
//! [`uring::UringEngine`] (io_uring: batches in one submission, registered frame buffers,
//! queues for asynchronous reads). Tests wrap an engine to inject faults; a wrapper need only
//! implement the three single-request methods, since batches and queues fall back to them.

pub mod psync;
pub mod sim;
pub mod threads;
pub mod unbundled;
pub mod uring;

pub use psync::PsyncEngine;
pub use threads::{DeviceThreads, SubmitKind};
pub use uring::UringEngine;

use crate::choice::choice;
use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;
use std::sync::Arc;

use super::device::BackingFile;

choice! {
    /// Which engine a cache moves its bytes with.
    pub enum IoKind("I/O engine") {
        /// io_uring; if the kernel refuses it (too old, disabled by sysctl or seccomp) the cache
        /// logs why and uses psync.
        #[default]
        Uring = "uring",
        /// preadv/pwritev from the calling thread.
        Psync = "psync",
    }
}

impl IoKind {
    /// Builds the engine for `devices` devices and submission model `submit`; `frames` is
    /// the frame arena, registered with io_uring as fixed buffers if given and the kernel
    /// allows.
    pub(crate) fn build(
        self,
        frames: Option<(*mut u8, usize)>,
        devices: usize,
        submit: SubmitKind,
    ) -> Arc<dyn IoEngine> {
        if submit == SubmitKind::PerDevice {
            match DeviceThreads::start(devices, || self.build(frames, devices, SubmitKind::Caller)) {
                Ok(t) => return Arc::new(t),
                Err(e) => log::warn!("cannot start per-device I/O threads ({e}); callers submit"),
            }
        }
        match self {
            IoKind::Psync => Arc::new(PsyncEngine),
            IoKind::Uring => match UringEngine::new(frames) {
                Ok(e) => Arc::new(e),
                Err(e) => {
                    log::warn!("io_uring is unavailable ({e}); using the psync engine");
                    Arc::new(PsyncEngine)
                }
            },
        }
    }
}

/// One request of a batch.
pub enum IoReq<'r, 'b> {
    /// Read into `bufs` from `offset` of `file`.
    Read {
        /// The backing file.
        file: &'r BackingFile,
        /// Byte offset in it.
        offset: u64,
        /// Destination frames.
        bufs: &'r mut [IoSliceMut<'b>],
    },
    /// Write `bufs` at `offset` of `file`.
    Write {
        /// The backing file.
        file: &'r BackingFile,
        /// Byte offset in it.
        offset: u64,
        /// Source frames.
        bufs: &'r [IoSlice<'b>],
    },
}

/// Moves bytes between frames and backing files.
pub trait IoEngine: Send + Sync {
    /// Short name for reports.
    fn name(&self) -> &'static str;

    /// Reads into `bufs` from `offset` of `file`; returns bytes read (short only at EOF).
    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize>;

    /// Writes all of `bufs` at `offset` of `file`.
    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()>;

    /// Makes the file's written data durable (fdatasync from the calling thread).
    fn sync_data(&self, file: &BackingFile) -> io::Result<()> {
        file.file().sync_data()
    }

    /// Runs every request of `reqs`, at the same time where the engine can, and returns each
    /// one's bytes moved (for a write, all of its bytes) or error, in order. The default runs
    /// them one after another.
    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        reqs.iter_mut()
            .map(|r| match r {
                IoReq::Read { file, offset, bufs } => self.read_vectored(file, *offset, bufs),
                IoReq::Write { file, offset, bufs } => {
                    self.write_vectored(file, *offset, bufs).map(|()| bufs.iter().map(|b| b.len()).sum())
                }
            })
            .collect()
    }

    /// A queue of asynchronous reads of about `depth` requests, or None if the engine has none
    /// of its own (then [`InlineQueue`] runs each read when it is pushed).
    fn queue(&self, depth: usize) -> Option<io::Result<Box<dyn EngineQueue>>> {
        let _ = depth;
        None
    }
}

/// `read_vectored` as a batch of one, for engines whose batch is their primitive.
pub(crate) fn read_as_batch<E: IoEngine + ?Sized>(
    engine: &E,
    file: &BackingFile,
    offset: u64,
    bufs: &mut [IoSliceMut<'_>],
) -> io::Result<usize> {
    engine.run_batch(&mut [IoReq::Read { file, offset, bufs }]).pop().expect("one result per request")
}

/// `write_vectored` as a batch of one.
pub(crate) fn write_as_batch<E: IoEngine + ?Sized>(
    engine: &E,
    file: &BackingFile,
    offset: u64,
    bufs: &[IoSlice<'_>],
) -> io::Result<()> {
    engine
        .run_batch(&mut [IoReq::Write { file, offset, bufs }])
        .pop()
        .expect("one result per request")
        .map(|_| ())
}

/// A completed queued read: its tag and bytes read (short only at end of file) or error.
pub type QueueCompletion = (u64, io::Result<usize>);

/// Asynchronous reads into frames, owned by one thread at a time.
pub trait EngineQueue: Send {
    /// Queues a read at `offset` of `file` into the buffers `bufs`, `len` bytes each, in
    /// order (one vectored request), reported by a later [`EngineQueue::reap`] under `tag` with
    /// the total bytes read. A read that cannot even be queued is reported the same way,
    /// with its error.
    ///
    /// # Safety
    /// Each buffer must be valid for writes of `len` bytes, and nothing else may read or
    /// write them, until `reap` has returned the completion for `tag`.
    unsafe fn push_read(&mut self, file: &BackingFile, offset: u64, bufs: &[*mut u8], len: usize, tag: u64);

    /// Submits what was pushed and waits until at least `min` reads (at most as many as are
    /// outstanding) have completed; appends every completion available to `out`.
    fn reap(&mut self, min: usize, out: &mut Vec<QueueCompletion>);

    /// Reads pushed and not yet reaped.
    fn outstanding(&self) -> usize;

    /// Submit to the kernel as soon as `n` reads are queued (default 1: each at once, as
    /// fio's default `iodepth_batch_submit=1`), not only when reaping. Larger batches take
    /// fewer system calls; smaller ones keep the device busier while completions are
    /// processed. A queue that runs reads at once ignores it.
    fn set_submit_batch(&mut self, n: usize) {
        let _ = n;
    }

    /// Arms a read of the eventfd `fd` on this queue, reported by a reap as `(tag, Ok(8))`
    /// once something writes to `fd`, so that a thread blocked in `reap` can be woken by
    /// another that has new work for it (the Future API's driver, `api/aio.rs`). Stays armed
    /// until reported (and counted in `outstanding` until then); arming again meanwhile does
    /// nothing. False if this queue cannot: its reaps then end only with its own reads. A
    /// queue that wraps another must not pass this on if it sleeps while `outstanding > 0`.
    fn arm_doorbell(&mut self, fd: RawFd, tag: u64) -> bool {
        let _ = (fd, tag);
        false
    }
}

/// The queue of an engine without one: each read runs when it is pushed.
pub struct InlineQueue {
    engine: Arc<dyn IoEngine>,
    done: VecDeque<QueueCompletion>,
}

impl InlineQueue {
    /// A queue that runs reads on `engine` as they are pushed.
    pub fn new(engine: Arc<dyn IoEngine>) -> Self {
        InlineQueue { engine, done: VecDeque::new() }
    }
}

impl EngineQueue for InlineQueue {
    unsafe fn push_read(&mut self, file: &BackingFile, offset: u64, bufs: &[*mut u8], len: usize, tag: u64) {
        let mut slices: Vec<IoSliceMut<'_>> = bufs
            .iter()
            // SAFETY: the caller gives us each buffer for writes of `len` bytes until we
            // report `tag`, which is after this call.
            .map(|&b| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(b, len) }))
            .collect();
        let r = self.engine.read_vectored(file, offset, &mut slices);
        self.done.push_back((tag, r));
    }

    fn reap(&mut self, _min: usize, out: &mut Vec<QueueCompletion>) {
        out.extend(self.done.drain(..));
    }

    fn outstanding(&self) -> usize {
        self.done.len()
    }
}
