//! What an asynchronous I/O queue hands back: both engines' queues (`api/queue.rs`,
//! `shared/queue.rs`) report requests so.

use crate::error::Result;

/// Deepest queue: more requests in flight than this gain nothing on any device.
pub const MAX_DEPTH: usize = 4096;

/// A finished request: its tag, the bytes read or written (a read is short at end of file)
/// or its error, and its buffer back.
#[derive(Debug)]
pub struct Completion {
    /// The tag given at submission.
    pub tag: u64,
    /// Bytes moved, or the error.
    pub result: Result<usize>,
    /// The buffer given at submission; for a read, holding the bytes read.
    pub buf: Vec<u8>,
}
