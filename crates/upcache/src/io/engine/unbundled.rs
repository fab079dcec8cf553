//! The off switch of bundled submissions (`Config::with_bundling(false)`): an engine that
//! hands the engine beneath the requests of a batch one at a time, each waited for before the
//! next, and has no queue of its own (queued reads run as they are pushed), so that bundling's
//! effect can be measured against the same engine without it.

use super::{EngineQueue, IoEngine, IoReq};
use crate::io::device::BackingFile;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::Arc;

/// `inner`, one request per submission.
pub struct Unbundled {
    inner: Arc<dyn IoEngine>,
}

impl Unbundled {
    /// Submits `inner`'s requests one at a time.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        Unbundled { inner }
    }
}

impl IoEngine for Unbundled {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        self.inner.read_vectored(file, offset, bufs)
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_vectored(file, offset, bufs)
    }

    fn sync_data(&self, file: &BackingFile) -> io::Result<()> {
        self.inner.sync_data(file)
    }

    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        reqs.chunks_mut(1).flat_map(|one| self.inner.run_batch(one)).collect()
    }

    fn queue(&self, _depth: usize) -> Option<io::Result<Box<dyn EngineQueue>>> {
        None
    }
}
