//! upcache: a user-space page cache for arrays of fast SSDs.
//!
//! Files live striped over several device directories (one per SSD); their pages are cached
//! in one pre-allocated frame arena. Hits take no global lock and never enter the kernel,
//! misses load each page once, and dirty pages are written back in device-sized runs by
//! flusher threads and, past a threshold, by the writers themselves. For storage engines,
//! databases, graph and ML systems that read and write large files on NVMe arrays.
//!
//! # Quick start
//!
//! ```
//! use upcache::{Cache, Config};
//! # let tmp = tempfile::tempdir()?;
//! # let (ssd0, ssd1) = (tmp.path().join("nvme0"), tmp.path().join("nvme1"));
//! // Two SSDs (one directory on each), 64 MiB of page frames.
//! let cache = Cache::open_or_create(Config::new([&ssd0, &ssd1], 64 << 20))?;
//! let file = cache.create_file("table.dat")?;
//! file.write_all_at(b"hello", 40_963)?; // any offset, any length
//! let mut buf = [0u8; 5];
//! file.read_exact_at(&mut buf, 40_963)?; // served from the cache
//! assert_eq!(&buf, b"hello");
//! file.sync_data()?; // durable on the devices
//! drop(file);
//! cache.close()?; // writes everything back; reports what a drop could only log
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Which API for what
//!
//! | you want | use |
//! |---|---|
//! | pread/pwrite at offsets, from any thread | [`File::read_at`], [`File::write_at`] and the `_exact`/`_all` forms |
//! | an upcache file where code takes `std::fs::File`-like types | [`std::os::unix::fs::FileExt`] on [`File`]; `Read`/`Write`/`Seek` on [`File::cursor`] |
//! | to read or change a page where it lies, without a copy | [`File::pin`] ([`PageRef`]), [`File::pin_mut`] ([`PageMut`]) |
//! | many reads and writes in flight from one thread | [`Cache::queue`] ([`IoQueue`]) |
//! | the same as `Future`s for tokio or any executor | [`Cache::async_io`] ([`AsyncIo`]) |
//! | an existing OS file through the cache | [`Cache::open_path`] |
//! | one cache shared by every process of the machine | [`shared`] (what the LD_PRELOAD shim uses) |
//! | durability | [`File::sync_data`], [`File::sync_all`], [`Cache::sync`]; errors reach each open once, as the kernel's |
//! | counters | [`Cache::stats`] ([`Stats`]: `Display`, and serde with the default `serde` feature) |
//! | tuning and the papers' techniques switched on and off | [`Config`]'s `with_*` methods |
//!
//! C programs use `crates/upcache-capi` (`upcache.h`); unmodified programs, the LD_PRELOAD shim
//! in `crates/upcache-preload`. Errors are [`Error`]s with an [`ErrorKind`]; a failed
//! write-back keeps its pages dirty and is reported by the next sync.
//!
//! # Versions
//!
//! The crate follows Cargo's semver: before 1.0 a minor release (0.x) may change the API,
//! a patch release (0.x.y) never does. The C ABI moves with it: its soname carries the part of
//! the version that may break it (`libupcache_capi.so.0.x`), and `upcache.h` has
//! `UPCACHE_VERSION_*` macros beside `upcache_version()` for the library that runs.
//! Changes are listed in CHANGELOG.md.
//!
//! # Inside
//!
//! The modules, lowest layer first: `error`, `sync`, `units`; `choice`, `metrics`, `shm`;
//! `frame`; `io`, `alloc`, `index`, `policy`, `readahead`; `config`; `file`, `meta`; `cache`
//! (the core); `service` (the threads); `api` (the types above). ARCHITECTURE.md at the
//! repository root is the map: the data flow of a read, a write and a sync, the one lock
//! order, the invariants, and where each paper's technique lives. The inner layers that
//! upcache's own benchmarks and tests reach into are under [`internals`]: not part of the
//! API, they may change in any release.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
// Under loom most of `shared` is left out (below), and what only it uses goes unused.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

// The facade over the engine, left out of loom builds with the engine's most.
#[cfg(not(loom))]
mod api;
mod choice;
mod config;
mod error;
mod metrics;
#[cfg(not(loom))]
pub mod shared;
/// Under loom, of the shared cache only the frame word, the pin ledgers, the range slots, the
/// page tree and the dirty map, which have models: the rest maps memory and runs processes, and asserts the
/// sizes of records that hold lock words, which loom's atomics do not have.
#[cfg(loom)]
pub mod shared {
    pub(crate) mod dirty_map;
    pub(crate) mod frame;
    pub(crate) mod pin_ledger;
    pub(crate) mod ranges;
    pub(crate) mod tree;
}
mod sync;
mod units;

pub mod internals;
// The inner layers keep their crate paths (`crate::frame::...`).
use internals::{alloc, file, frame, index, io, meta, policy, shm};

pub use alloc::AllocKind;
#[cfg(not(loom))]
pub use api::{
    AioEngine, AsyncIo, Cache, Completion, File, FileCursor, InProcess, IoFuture, IoQueue, OnShared, PageMut,
    PageRef, Positioned, StatsReader, SyncFuture,
};
pub use config::{
    Config, FlushKind, DEFAULT_DIRTY_EXPIRE, DEFAULT_DIRTY_RATIOS, DEFAULT_READAHEAD, MAX_DEVICES,
    MAX_PAGE_SIZE, MIN_FRAMES, MIN_PAGE_SIZE,
};
pub use error::{Error, ErrorKind, Result};
pub use index::setassoc::SetPolicy;
pub use index::IndexKind;
pub use io::device::sim::{Fault, FaultOp, SimConfig, SimDevice, SimStats};
pub use io::engine::{IoKind, SubmitKind};
pub use io::layout::LayoutKind;
pub use metrics::latency::{
    Latencies, LatencyHistogram, BUCKETS as LATENCY_BUCKETS, SAMPLE_EVERY as LATENCY_SAMPLE_EVERY,
};
pub use metrics::Stats;
pub use policy::{CleanFirst, PolicyKind};
pub use units::{on_off, parse_duration, parse_on_off, parse_ratios, parse_size};

/// The README's Rust examples, compiled (not run: they name real device paths) with the
/// doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
