//! upcache: a user-space page cache for arrays of fast SSDs.
//!
//! # A tour of the layers
//! ```text
//!  Cache / File / IoQueue             FileExt-like API, async queue; range lock per file
//!     │
//!  lock-free hit (file/handle.rs)     seqlock copy validated by index entry + write sequence
//!  page access (cache/page.rs)        index lookup → pin → "has the page moved?" → copy
//!     │            │                  miss: free list or Policy::pick_victim, load once
//!  PageIndex   FrameTable             index/: per-file page → frame; frame/: arena + state
//!     │            │                  words + wait table
//!  writeback/                          dirty accounting, flushers, dflush, runs of pages
//!     │
//!  readahead/                         stream detection → loader thread (own I/O queue)
//!     │
//!  io/: StripeLayout → BackingFile → IoEngine (uring | psync)   one backing file per device
//! ```
//!
//! # Global lock order
//! Take locks only in this order; a thread holding a later one never waits for an earlier.
//! 1. the namespace mutex (`Cache` create/open/remove, appending metadata-log records)
//! 2. a file's range lock (one file, one range at a time per thread; more only with
//!    `try_read`/`try_write`, which never wait)
//! 3. a frame's `LOCKED` bit, waited for on at most one frame at a time; further frames only
//!    with `try_lock*` (write-back runs), which never wait
//! 4. leaves, held only for a moment and never while waiting: the open-files map, a page
//!    index shard or the locked index's update mutex, the page sets' resize mutex then a page
//!    set (two, in index order, for a split or merge), a file's free-frame cache
//!    then an allocator region, a wait-table bucket, the range lock's internal mutex, the flusher kick,
//!    a file's stream mutex then the write-back list, the metadata log's state mutex
//!
//! Write-back (flushers, dflush, eviction of dirty pages) takes only level 3 with `try_lock`
//! and level 4, so any thread may run it whatever it holds; dflush runs before a writer takes
//! its range lock.
//!
//! # Where each paper's technique lives
//! | technique | seed | where |
//! |---|---|---|
//! | lock-free hit path (pin by CAS on a state word) | 000, 004 | `frame/state.rs`, `cache/page.rs` |
//! | ccXArray lock-free page index; the locked baseline | 000 §3.2 | `index/radix/`, `index/locked.rs` |
//! | lock-free read hits (seqlock copy, no pin) | 000, 004 §5.1 | `file/handle.rs`, `file/write_seq.rs` |
//! | set-associative cache, in-set GClock/Clock/LRU/LFU | 002 §4 | `index/setassoc.rs` |
//! | two-layer free frames (per-core regions, per-file caches) | 003 §4.3 | `alloc/`, `cache/reclaim.rs` |
//! | dflush: writers flush in parallel past the foreground ratio | 000 §3.3 | `writeback/run.rs` |
//! | stream tracking tree; stream-based write-back, sync by dirty ranges | 003 §4.1-4.2 | `file/stream.rs`, `writeback/streams.rs` |
//! | metadata log: per-file records, group commit, checkpoints | 001 §3.3-3.5 | `file/metalog.rs` |
//! | file range lock | 001 §3.2 | `file/range_lock.rs` |
//! | striping over a device array, one backing file per device | 002 §3.3 | `io/layout.rs`, `io/device.rs` |
//! | clean-first eviction | 002 §4.2 | `policy/clock.rs` |
//! | merging adjacent dirty pages into one write | 002 §4.2 | `writeback/run.rs` |
//! | io_uring engine: batches, fixed buffers, async queues | 002 §3.1 | `io/engine/uring.rs` |
//! | asynchronous reads and writes with a queue depth | 002 §3.1 | `file/queue.rs` |
//! | multi-page reads: runs into frames claimed in order, one batch | 002 §4.2, 004 §5.4 | `cache/batch.rs` |
//! | readahead: stream pointer, adaptive window | 003 §4.1 | `readahead/` |
//!
//! See ARCHITECTURE.md for the full map and what is still to come.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod alloc;
mod api;
mod cache;
mod choice;
mod config;
mod error;
pub mod file;
pub mod frame;
pub mod index;
pub mod io;
pub mod meta;
mod metrics;
pub mod policy;
mod readahead;
mod service;
mod sync;

pub use alloc::AllocKind;
pub use api::{Cache, Completion, File, IoQueue, PageMut, PageRef};
pub use config::{
    Config, FlushKind, DEFAULT_READAHEAD, MAX_DEVICES, MAX_PAGE_SIZE, MIN_FRAMES, MIN_PAGE_SIZE,
};
pub use error::{Error, ErrorKind, Result};
pub use index::IndexKind;
pub use io::engine::{IoKind, SubmitKind};
pub use io::layout::LayoutKind;
pub use metrics::Stats;
pub use policy::{CleanFirst, PolicyKind};
