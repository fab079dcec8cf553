//! A file's length as last made durable in the array's metadata log (`meta/`), kept beside
//! each open of it in either engine: what the file reports as logged, and a sync's hint of
//! whether it may log a length (and so leave backing files' flushes to the log's commit).
//!
//! A sync decides by the file's *latest* record instead (`ArrayMeta::len_to_sync`), which the
//! namespace keeps under its lock, one per file whatever opens of it come and go: comparing
//! with the last durable length is not enough, since a record of another length appended
//! since (a truncate's, or an extension's, still pending) would be replayed after the durable
//! one, and a sync that found the two equal and logged nothing would leave the file at the
//! pending length after a crash.

use crate::sync::{AtomicU64, Ordering};

/// One open file's durable length.
#[derive(Debug)]
pub(crate) struct DurableLen(AtomicU64);

impl DurableLen {
    /// A file opened at length `len`, as the namespace has it.
    pub(crate) fn new(len: u64) -> DurableLen {
        DurableLen(AtomicU64::new(len))
    }

    /// The length of the latest record known durable.
    pub(crate) fn get(&self) -> u64 {
        // Acquire: pairs with `set`'s Release.
        self.0.load(Ordering::Acquire)
    }

    /// Whether a sync at length `len` may have a record to append: a hint (a sync decides
    /// under the namespace's lock).
    pub(crate) fn may_log(&self, len: u64) -> bool {
        self.get() != len
    }

    /// The file's latest record, of length `len`, is durable (`ArrayMeta::len_durable`, under
    /// the namespace's lock).
    pub(crate) fn set(&self, len: u64) {
        // Release: a sync that reads the length sees it durable.
        self.0.store(len, Ordering::Release);
    }
}
