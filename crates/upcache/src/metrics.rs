//! Counters, and nothing else: no logic reads them to make decisions.
//!
//! Counters are striped over cache-line-padded slots picked per thread, so that threads
//! counting hits on different cores do not fight over one cache line.

// Counters are statistics outside the concurrency model, so they use std atomics even under
// loom (whose atomics cannot live in statics).
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 16;

#[repr(align(64))]
#[derive(Default)]
struct Slot(AtomicU64);

/// A striped event counter.
pub struct Counter {
    slots: [Slot; SLOTS],
}

impl Default for Counter {
    fn default() -> Self {
        Counter { slots: std::array::from_fn(|_| Slot::default()) }
    }
}

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Relaxed: only spreads threads over slots.
    static MY_SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

/// This thread's stripe number, for any structure striped per thread like the counters.
pub(crate) fn thread_slot() -> usize {
    MY_SLOT.with(|s| *s)
}

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        let i = MY_SLOT.with(|s| *s);
        // Relaxed: a statistic; readers tolerate a slightly stale sum.
        self.slots[i].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current total.
    pub fn get(&self) -> u64 {
        // Relaxed: a statistic (see `add`).
        self.slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

/// Cache-wide counters.
#[derive(Default)]
pub struct Metrics {
    pub(crate) hits: Counter,
    pub(crate) lock_free_hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) evictions: Counter,
    pub(crate) reclaimed: Counter,
    pub(crate) stream_evictions: Counter,
    pub(crate) readahead_pages: Counter,
    pub(crate) readahead_windows: Counter,
    pub(crate) hot_hits: Counter,
    pub(crate) read_ios: Counter,
    pub(crate) read_bytes: Counter,
    pub(crate) writeback_ios: Counter,
    pub(crate) writeback_bytes: Counter,
    pub(crate) writeback_errors: Counter,
    pub(crate) dflush_pages: Counter,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Page lookups that found the page resident.
    pub hits: u64,
    /// Of those, pages copied by a lock-free read (no lock, no pin).
    pub lock_free_hits: u64,
    /// Page lookups that had to load or create the page.
    pub misses: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
    /// Of those, pages evicted ahead of demand by background reclaim.
    pub reclaimed: u64,
    /// Of those, pages of written-back streams evicted in stream order (seed 003 §4.2).
    pub stream_evictions: u64,
    /// Pages loaded ahead of sequential readers (readahead).
    pub readahead_pages: u64,
    /// Readahead windows handed to the loader (whether it or the reader then loads the pages
    /// first depends on scheduling; that it was asked does not).
    pub readahead_windows: u64,
    /// Pins served by the pinning thread's hot index, without a shared index lookup.
    pub hot_hits: u64,
    /// Device read requests.
    pub read_ios: u64,
    /// Bytes read from devices.
    pub read_bytes: u64,
    /// Device write requests made by write-back.
    pub writeback_ios: u64,
    /// Bytes written back.
    pub writeback_bytes: u64,
    /// Write-back requests that failed (their pages stayed dirty).
    pub writeback_errors: u64,
    /// Pages written back by writers themselves past the foreground threshold (dflush).
    pub dflush_pages: u64,
    /// Pages dirty right now.
    pub dirty_pages: u64,
    /// Frames in the cache.
    pub frames: u64,
    /// Bytes of per-frame metadata (descriptors, bitmaps, wait table), fixed at start.
    pub metadata_bytes: u64,
    /// Bytes of the page indexes of the open files, now.
    pub index_bytes: u64,
}

impl Metrics {
    /// Snapshot, with the gauges filled in by the caller (`frames`, `metadata_bytes`,
    /// `index_bytes`).
    pub fn snapshot(&self, dirty_pages: u64, gauges: [u64; 3]) -> Stats {
        let [frames, metadata_bytes, index_bytes] = gauges;
        Stats {
            hits: self.hits.get() + self.lock_free_hits.get(),
            lock_free_hits: self.lock_free_hits.get(),
            misses: self.misses.get(),
            evictions: self.evictions.get(),
            reclaimed: self.reclaimed.get(),
            stream_evictions: self.stream_evictions.get(),
            readahead_pages: self.readahead_pages.get(),
            readahead_windows: self.readahead_windows.get(),
            hot_hits: self.hot_hits.get(),
            read_ios: self.read_ios.get(),
            read_bytes: self.read_bytes.get(),
            writeback_ios: self.writeback_ios.get(),
            writeback_bytes: self.writeback_bytes.get(),
            writeback_errors: self.writeback_errors.get(),
            dflush_pages: self.dflush_pages.get(),
            dirty_pages,
            frames,
            metadata_bytes,
            index_bytes,
        }
    }
}
