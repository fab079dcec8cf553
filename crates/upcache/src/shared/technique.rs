//! Bits of the shared cache header's `techniques`: `SharedConfig`'s switches, fixed when the
//! cache is made (`layout.rs`), copied into each process's `Inner`.

pub const RANGE_LOCK: u64 = 1;
pub const RUN_MERGING: u64 = 2;
pub const BUNDLING: u64 = 4;
/// The ccXArray index (`SharedConfig::index` radix); off, the hash chains.
pub const RADIX_INDEX: u64 = 8;
pub const DIRECT_WRITE_BACK: u64 = 16;
/// `SharedConfig::policy` GClock; off, CLOCK.
pub const GCLOCK: u64 = 32;
/// `SharedConfig::clean_first` Always; with `GC_AWARE`, WhileGc; neither, plain.
pub const CLEAN_FIRST: u64 = 64;
pub const GC_AWARE: u64 = 256;
/// `SharedConfig::streams`.
pub const STREAMS: u64 = 512;
/// `SharedConfig::huge_pages`.
pub const HUGE_PAGES: u64 = 1024;
/// `SharedConfig::direct_loads`.
pub const DIRECT_LOADS: u64 = 2048;
/// `SharedConfig::io` uring.
pub const URING: u64 = 4096;
/// `SharedConfig::hot_index`.
pub const HOT_INDEX: u64 = 8192;
/// The set-associative index (`SharedConfig::index` set-assoc).
pub const SET_ASSOC: u64 = 16384;
/// `SharedConfig::flush` Direct (dflush); off, writers pause for the service.
pub const DFLUSH: u64 = 128;
/// The frames' bytes are their maker's private memory (`SharedCache::create_private`),
/// not in the segment's file: no other process may attach it.
pub const PRIVATE_FRAMES: u64 = 32768;
/// `SharedConfig::policy` sampled LRU, sampled LFU-DA, SIEVE or S3-FIFO (`policy/`);
/// none of them, the clock hand's (CLOCK or GClock).
pub const LRU: u64 = 1 << 16;
pub const LFU: u64 = 1 << 17;
pub const SIEVE: u64 = 1 << 18;
pub const S3FIFO: u64 = 1 << 19;
/// `SharedConfig::alloc` two-layer (`pool.rs`); off, one stack of emptied frames (`free.rs`).
pub const TWO_LAYER: u64 = 1 << 20;
/// `SharedConfig::prefault`: every frame was made resident as the cache was made.
pub const PREFAULT: u64 = 1 << 21;
/// With `RADIX_INDEX`, the trees' inserts and removes under a lock per file
/// (`SharedConfig::index` locked).
pub const LOCKED_INDEX: u64 = 1 << 22;
