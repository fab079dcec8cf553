//! Asynchronous reads and writes from plain threads: submit many, reap completions, with a
//! queue depth (seed 002 §3.1's asynchronous interface; no async runtime needed). The queue
//! is the engine's (`shared/queue.rs`): a read whose pages are all cached is copied at once;
//! otherwise its missing pages are loaded through the queue's own io_uring, and the range is
//! copied when they are reaped. A write goes to the cache, so it is done when submitted.

use super::file::File;
use crate::error::Result;
pub use crate::io::completion::Completion;
use crate::shared::SharedQueue;

/// An asynchronous queue onto one cache; made by [`crate::Cache::queue`]. Owned by one
/// thread at a time (`Send`, not `Sync`).
///
/// Reads in flight hold their pages locked, so threads that need those pages wait for this
/// queue to reap them: reap promptly. The owning thread too: a blocking call on the cache
/// (a read, a write, another queue's) between a submission and its reap may wait for itself.
/// Dropping the queue ends its reads and drops what they hold; their completions are lost.
pub struct IoQueue {
    queue: SharedQueue,
}

impl std::fmt::Debug for IoQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoQueue").field("depth", &self.depth()).field("in_flight", &self.in_flight()).finish()
    }
}

impl IoQueue {
    pub(crate) fn new(queue: SharedQueue) -> Self {
        IoQueue { queue }
    }

    /// Lets a write to eventfd `fd` end a [`IoQueue::wait`] early (the Future API's driver).
    pub(crate) fn set_doorbell(&mut self, fd: std::os::fd::RawFd) {
        self.queue.set_doorbell(fd);
    }

    /// Whether a doorbell set here can end a wait.
    pub(crate) fn doorbell_works(&mut self) -> bool {
        self.queue.doorbell_works()
    }

    /// The most requests submitted and not yet returned by [`IoQueue::wait`].
    pub fn depth(&self) -> usize {
        self.queue.depth()
    }

    /// Hands device reads to the kernel once `n` are queued (default 1: each at once), rather
    /// than only when waiting. 1 gives the lowest latency; larger batches save system calls
    /// (fio's `iodepth_batch_submit`).
    pub fn set_submit_batch(&mut self, n: usize) {
        self.queue.set_submit_batch(n);
    }

    /// Requests submitted and not yet returned by `wait`.
    pub fn in_flight(&self) -> usize {
        self.queue.in_flight()
    }

    /// Submits a read of `buf.len()` bytes at `offset` of `file`, reported under `tag`.
    /// Fails with `Busy` when `depth` requests are in flight (wait for some first), and with
    /// `InvalidInput` for a file of another cache or a range past the maximum file size.
    pub fn read(&mut self, file: &File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
        self.queue.read(file.engine_file(), offset, buf, tag)
    }

    /// Submits a write of `buf` at `offset` of `file`, reported under `tag`. Writes are
    /// buffered in the cache, so it is done (and its completion ready) when this returns.
    /// Fails like [`IoQueue::read`].
    pub fn write(&mut self, file: &File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
        self.queue.write(file.engine_file(), offset, buf, tag)
    }

    /// Waits until at least `min` requests (at most as many as are in flight) have
    /// completed, and appends every completed one to `out`. Returns how many it appended.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) -> usize {
        self.queue.wait(min, out)
    }
}
