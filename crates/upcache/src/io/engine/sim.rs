//! Routes I/O of backing files on simulated devices (`io/device/sim.rs`) to their device and
//! everything else to the real engine beneath, so an array may mix simulated and file
//! devices. The cache wraps its engine in `SimRouted` when any device is simulated; a
//! simulated file's reads, writes and `sync_data` go to its device. A batch on simulated
//! devices books every request before waiting for the last, so its requests overlap across
//! devices and channels as a real batch would.
//!
//! Simulated requests run in the calling thread. Queued reads ([`SimQueue`]) are booked on
//! their device when pushed (the bytes copied at once) and complete at their device time, so a
//! queue keeps as many reads in flight across devices and channels as it has slots, as on
//! real files; reads of other files go to the engine's own queue.

use super::{EngineQueue, InlineQueue, IoEngine, IoReq, QueueCompletion};
use crate::io::device::sim::SimDevice;
use crate::io::device::BackingFile;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Instant;

/// The routing engine over `inner`.
pub struct SimRouted {
    inner: Arc<dyn IoEngine>,
}

impl SimRouted {
    /// Routes simulated backing files to their devices, others to `inner`.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        SimRouted { inner }
    }
}

impl IoEngine for SimRouted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        match file.sim() {
            Some(s) => s.read(file.file(), offset, bufs),
            None => self.inner.read_vectored(file, offset, bufs),
        }
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        match file.sim() {
            Some(s) => s.write(file.shared_file(), offset, bufs),
            None => self.inner.write_vectored(file, offset, bufs),
        }
    }

    fn sync_data(&self, file: &BackingFile) -> io::Result<()> {
        match file.sim() {
            // The backing file is only the device's medium: its flush is the device's.
            Some(s) => s.flush(),
            None => self.inner.sync_data(file),
        }
    }

    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        let on_sim = |r: &IoReq<'_, '_>| match r {
            IoReq::Read { file, .. } | IoReq::Write { file, .. } => file.sim().is_some(),
        };
        if !reqs.iter().any(on_sim) {
            return self.inner.run_batch(reqs);
        }
        let mut last = None;
        // Simulated writes, to be told if a power cut overtook them.
        let mut writes = Vec::new();
        let mut out: Vec<io::Result<usize>> = reqs
            .iter_mut()
            .enumerate()
            .map(|(i, r)| match r {
                IoReq::Read { file, offset, bufs } => match file.sim() {
                    Some(s) => s.submit_read(file.file(), *offset, bufs).map(|(n, done)| {
                        last = last.max(Some(done));
                        n
                    }),
                    None => self.inner.read_vectored(file, *offset, bufs),
                },
                IoReq::Write { file, offset, bufs } => {
                    let n = bufs.iter().map(|b| b.len()).sum();
                    match file.sim() {
                        Some(s) => s.submit_write(file.shared_file(), *offset, bufs).map(|w| {
                            last = last.max(Some(w.done));
                            writes.push((i, s, w));
                            n
                        }),
                        None => self.inner.write_vectored(file, *offset, bufs).map(|()| n),
                    }
                }
            })
            .collect();
        if let Some(done) = last {
            SimDevice::wait(done);
        }
        for (i, s, w) in writes {
            if let Err(e) = s.finish_write(w) {
                out[i] = Err(e);
            }
        }
        out
    }

    fn queue(&self, depth: usize) -> Option<io::Result<Box<dyn EngineQueue>>> {
        let inner = match self.inner.queue(depth) {
            Some(Ok(q)) => q,
            Some(Err(e)) => return Some(Err(e)),
            None => Box::new(InlineQueue::new(self.inner.clone())),
        };
        Some(Ok(Box::new(SimQueue { inner, booked: Vec::with_capacity(depth) })))
    }
}

/// A queue over a routed engine: reads of simulated files are booked on their device, the
/// rest go to `inner`.
pub struct SimQueue {
    inner: Box<dyn EngineQueue>,
    /// Simulated reads booked and not reaped: when each completes, its tag and outcome.
    booked: Vec<(Instant, u64, io::Result<usize>)>,
}

impl SimQueue {
    /// Moves the booked reads complete at `now` to `out`; returns how many.
    fn take_done(&mut self, now: Instant, out: &mut Vec<QueueCompletion>) -> usize {
        let before = out.len();
        let mut i = 0;
        while i < self.booked.len() {
            if self.booked[i].0 <= now {
                let (_, tag, r) = self.booked.swap_remove(i);
                out.push((tag, r));
            } else {
                i += 1;
            }
        }
        out.len() - before
    }

    /// Reaps at least `min` reads of other files, if any are outstanding; returns how many.
    fn reap_inner(&mut self, min: usize, out: &mut Vec<QueueCompletion>) -> usize {
        if self.inner.outstanding() == 0 {
            return 0;
        }
        let before = out.len();
        self.inner.reap(min, out);
        out.len() - before
    }
}

impl EngineQueue for SimQueue {
    unsafe fn push_read(&mut self, file: &BackingFile, offset: u64, bufs: &[*mut u8], len: usize, tag: u64) {
        let Some(sim) = file.sim() else {
            // SAFETY: the caller's contract, passed on unchanged.
            return unsafe { self.inner.push_read(file, offset, bufs, len, tag) };
        };
        let mut slices: Vec<IoSliceMut<'_>> = bufs
            .iter()
            // SAFETY: the caller gives us each buffer for writes of `len` bytes until we report
            // `tag`; the device copies into them now, before this call returns.
            .map(|&b| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(b, len) }))
            .collect();
        match sim.submit_read(file.file(), offset, &mut slices) {
            Ok((n, done)) => self.booked.push((done, tag, Ok(n))),
            Err(e) => self.booked.push((Instant::now(), tag, Err(e))),
        }
    }

    fn reap(&mut self, min: usize, out: &mut Vec<QueueCompletion>) {
        let min = min.min(self.outstanding());
        let mut got = self.take_done(Instant::now(), out) + self.reap_inner(0, out);
        while got < min {
            if self.booked.is_empty() {
                got += self.reap_inner(min - got, out);
                continue;
            }
            // Sleep until enough booked reads are done: the (min - got)-th earliest, or the
            // earliest when the other queue may supply some.
            self.booked.sort_unstable_by_key(|b| b.0);
            let k = if self.inner.outstanding() > 0 { 0 } else { (min - got - 1).min(self.booked.len() - 1) };
            let until = self.booked[k].0;
            SimDevice::wait(until);
            got += self.take_done(until.max(Instant::now()), out) + self.reap_inner(0, out);
        }
    }

    fn outstanding(&self) -> usize {
        self.booked.len() + self.inner.outstanding()
    }

    fn set_submit_batch(&mut self, n: usize) {
        self.inner.set_submit_batch(n);
    }
}
