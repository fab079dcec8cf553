//! Routes I/O of backing files on simulated devices (`io/device/sim.rs`) to their device and
//! everything else to the real engine beneath, so an array may mix simulated and file
//! devices. The cache wraps its engine in `SimRouted` when any device is simulated; a
//! simulated file's reads, writes and `sync_data` go to its device. A batch on simulated
//! devices books every request before waiting for the last, so its requests overlap across
//! devices and channels as a real batch would.
//!
//! Simulated requests run in the calling thread; the engine's own asynchronous queues (which
//! could not tell simulated files apart) are not offered, so queued reads run inline.

use super::{IoEngine, IoQueue, IoReq};
use crate::io::device::sim::SimDevice;
use crate::io::device::BackingFile;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::Arc;

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

    fn queue(&self, _depth: usize) -> Option<io::Result<Box<dyn IoQueue>>> {
        None
    }
}
