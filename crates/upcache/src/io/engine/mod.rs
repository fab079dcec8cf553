//! How bytes move between frames and backing files.
//!
//! # Contract
//! - Buffers are whole frames (page-size aligned, page-size long), so every request is
//!   O_DIRECT-legal; offsets are multiples of the page size.
//! - `read_vectored` may return fewer bytes than asked only at the end of the backing file;
//!   the caller zero-fills the rest (a file's unwritten pages read as zeros).
//! - `write_vectored` writes everything or fails; a failure leaves the caller's pages dirty.
//! - Errors are returned, never panicked on, and an engine never retries by itself: retry
//!   policy belongs to write-back.
//!
//! Implementations: [`psync::PsyncEngine`] (preadv/pwritev from the calling thread). The
//! io_uring engine (batched submission, registered frame buffers) plugs in here; tests wrap
//! an engine to inject faults.

pub mod psync;

pub use psync::PsyncEngine;

use std::io::{self, IoSlice, IoSliceMut};

use super::device::BackingFile;

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

    /// Makes the file's written data durable (fdatasync).
    fn sync_data(&self, file: &BackingFile) -> io::Result<()>;
}
