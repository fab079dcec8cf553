//! upcache: a user-space page cache for arrays of fast SSDs.
//!
//! A [`Cache`] stripes files over device directories (one per SSD) and caches their pages in
//! one pre-allocated frame arena; [`File`] reads and writes them at offsets, pins pages for
//! zero-copy access, and [`IoQueue`] runs reads and writes asynchronously. [`Cache::open_path`]
//! caches an ordinary OS file the same way.
//!
//! The modules, lowest layer first: `error`, `sync`; `choice`, `metrics`, [`shm`]; [`frame`]; [`io`],
//! [`alloc`], [`index`], [`policy`], `readahead`; `config`; [`file`], [`meta`]; `cache` (the
//! core); `service` (the threads); `api` (the types above). ARCHITECTURE.md at the repository
//! root is the map: the data flow of a read, a write and a sync, the one lock order, the
//! invariants, and where each paper's technique lives.

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
pub mod shared;
pub mod shm;
mod sync;
mod units;

pub use alloc::AllocKind;
pub use api::{Cache, Completion, File, FileCursor, IoQueue, PageMut, PageRef};
pub use config::{
    Config, FlushKind, DEFAULT_DIRTY_EXPIRE, DEFAULT_DIRTY_RATIOS, DEFAULT_READAHEAD, MAX_DEVICES,
    MAX_PAGE_SIZE, MIN_FRAMES, MIN_PAGE_SIZE,
};
pub use error::{Error, ErrorKind, Result};
pub use index::IndexKind;
pub use io::engine::{IoKind, SubmitKind};
pub use io::layout::LayoutKind;
pub use metrics::Stats;
pub use policy::{CleanFirst, PolicyKind};
pub use units::{parse_duration, parse_size};
