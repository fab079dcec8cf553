//! A file's length as the array's metadata log has it (`meta/`), kept beside each open file
//! of either engine, and read by a sync to choose what it must make durable for its current
//! length (`ArrayMeta::len_to_sync`).
//!
//! Comparing the current length with the last one known durable is not enough: a record of
//! another length appended since (a truncate's, or an extension's, still pending) would be
//! replayed after the durable one, so a sync that found the two equal and logged nothing
//! would leave the file at the pending length after a crash. A sync compares with the length
//! of the file's *latest* record, and commits that record if it carries the length and may
//! not be durable yet.

use crate::sync::{AtomicU64, Ordering};

/// One file's length records.
#[derive(Debug)]
pub(crate) struct LenRecords {
    /// The length the file's latest record (or the catalog, or the replayed log) carries, and
    /// that record's sequence number, or the log's last one when the file was opened: both
    /// written only under the namespace's lock.
    logged: AtomicU64,
    record: AtomicU64,
    /// The length of the latest record known durable.
    durable: AtomicU64,
}

impl LenRecords {
    /// Records of a file opened at length `len` (as logged), with `seq` the log's last
    /// record then: whatever of the file it holds is durable once that one is.
    pub(crate) fn new(len: u64, seq: u64) -> LenRecords {
        LenRecords { logged: AtomicU64::new(len), record: AtomicU64::new(seq), durable: AtomicU64::new(len) }
    }

    /// The length of the latest record known durable.
    pub(crate) fn durable(&self) -> u64 {
        // Acquire: pairs with `set_durable`'s Release.
        self.durable.load(Ordering::Acquire)
    }

    /// Whether a sync at length `len` may have a record to append or commit: a hint, read
    /// with no lock (a sync decides under the namespace's lock).
    pub(crate) fn may_log(&self, len: u64) -> bool {
        // Relaxed: a hint; the decision reads both under the namespace's lock.
        self.durable() != len || self.logged.load(Ordering::Relaxed) != len
    }

    /// The latest record's length and sequence number. Under the namespace's lock.
    pub(crate) fn latest(&self) -> (u64, u64) {
        // Relaxed: written and read only under the namespace's lock.
        (self.logged.load(Ordering::Relaxed), self.record.load(Ordering::Relaxed))
    }

    /// Record `seq` of length `len` was appended. Under the namespace's lock.
    pub(crate) fn appended(&self, len: u64, seq: u64) {
        // Relaxed: as in `latest`.
        self.logged.store(len, Ordering::Relaxed);
        self.record.store(seq, Ordering::Relaxed);
    }

    /// Record `seq` of length `len` is durable: the durable length, unless a later record of
    /// the file was appended meanwhile (a sync storing its length late could make a newer,
    /// unlogged length look durable). Under the namespace's lock.
    pub(crate) fn set_durable(&self, seq: u64, len: u64) {
        // Relaxed: as in `latest`.
        if self.record.load(Ordering::Relaxed) == seq {
            // Release: a sync that reads the length sees it durable.
            self.durable.store(len, Ordering::Release);
        }
    }
}
