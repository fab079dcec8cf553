//! Latency histograms: per operation (reads, writes, syncs) and per device (reads and
//! writes the cache sends it), cheap enough to stay on.
//!
//! Buckets are powers of two of nanoseconds, one relaxed atomic add per record. Device I/O
//! and syncs are timed every time (their cost dwarfs two clock reads); reads and writes,
//! which a hit serves in well under a microsecond, are timed one in [`SAMPLE_EVERY`] per
//! thread, so their histograms count that share of the operations, spread evenly.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Buckets: bucket `i` counts latencies below `2^(i+1)` ns and at least `2^i` (bucket 0 from
/// 0); the last also everything longer, from about 69 s.
pub const BUCKETS: usize = 37;

/// One in this many reads and writes of each thread is timed.
pub const SAMPLE_EVERY: u32 = 64;

/// A histogram being recorded. `repr(C)`, all zeros empty: the shared cache keeps its
/// histograms in its segment (`shared/latency.rs`).
#[repr(C)]
pub(crate) struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }
}

impl Histogram {
    pub(crate) fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = (63 - ns.max(1).leading_zeros() as usize).min(BUCKETS - 1);
        // Relaxed: statistics, read only for reports.
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records the time since `start`, if there is one (see [`sample`]).
    pub(crate) fn since(&self, start: Option<Instant>) {
        if let Some(t) = start {
            self.record(t.elapsed());
        }
    }

    pub(crate) fn snapshot(&self) -> LatencyHistogram {
        // Relaxed: a report; a record in flight may be half in (bucket without sum).
        let buckets = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        LatencyHistogram { buckets, sum_ns: self.sum_ns.load(Ordering::Relaxed) }
    }
}

thread_local! {
    static TICK: Cell<u32> = const { Cell::new(0) };
}

/// The start of a sampled operation: `Some(now)` for one call in [`SAMPLE_EVERY`] on this
/// thread, else None (no clock read).
pub(crate) fn sample() -> Option<Instant> {
    TICK.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        (n % SAMPLE_EVERY == 0).then(Instant::now)
    })
}

/// A histogram of latencies ([`crate::Cache::latencies`]): counts per power-of-two bucket of
/// nanoseconds, and their sum.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LatencyHistogram {
    /// [`BUCKETS`] counts: `buckets[i]` has latencies in `[2^i, 2^(i+1))` ns (`i = 0` from 0;
    /// the last bucket has no upper bound).
    pub buckets: Vec<u64>,
    /// Sum of the recorded latencies, in nanoseconds.
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound of bucket `i` (exclusive), None for the last, which has none.
    pub fn bucket_bound(i: usize) -> Option<Duration> {
        (i + 1 < BUCKETS).then(|| Duration::from_nanos(1 << (i + 1)))
    }

    /// An upper bound of the `q` quantile (0 to 1): the bound of the bucket it falls in (the
    /// last bucket's lower bound), or None if nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::bucket_bound(i).unwrap_or(Duration::from_nanos(1 << i)));
            }
        }
        None
    }

    /// The mean, or None if nothing was recorded.
    pub fn mean(&self) -> Option<Duration> {
        self.sum_ns.checked_div(self.count()).map(Duration::from_nanos)
    }
}

/// A snapshot of a cache's latency histograms ([`crate::Cache::latencies`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Latencies {
    /// `read_at` and the calls built on it, sampled one in [`SAMPLE_EVERY`] per thread.
    pub read: LatencyHistogram,
    /// `write_at` and the calls built on it, sampled as reads.
    pub write: LatencyHistogram,
    /// `sync_data` and `sync_all`, every one.
    pub sync: LatencyHistogram,
    /// Per device: reads the cache waited for (a miss's load, a batch of runs; a batch
    /// counts once per run). Not the `IoQueue`'s reads, which complete on their ring.
    pub device_read: Vec<LatencyHistogram>,
    /// Per device: write-back batches, once per run, as reads.
    pub device_write: Vec<LatencyHistogram>,
}

impl Latencies {
    /// A snapshot of the (read, write, sync) histograms and the devices'.
    pub(crate) fn of(ops: [&Histogram; 3], device_read: &[Histogram], device_write: &[Histogram]) -> Self {
        Latencies {
            read: ops[0].snapshot(),
            write: ops[1].snapshot(),
            sync: ops[2].snapshot(),
            device_read: device_read.iter().map(Histogram::snapshot).collect(),
            device_write: device_write.iter().map(Histogram::snapshot).collect(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_power_of_two_buckets() {
        let h = Histogram::default();
        for ns in [0, 1, 3, 1000, 1023, 1024, 5_000_000] {
            h.record(Duration::from_nanos(ns));
        }
        h.record(Duration::from_secs(1000)); // past the last bound
        let s = h.snapshot();
        assert_eq!(s.count(), 8);
        assert_eq!((s.buckets[0], s.buckets[1], s.buckets[9], s.buckets[10], s.buckets[22]), (2, 1, 2, 1, 1));
        assert_eq!(s.buckets[BUCKETS - 1], 1);
        assert_eq!(s.sum_ns, 1 + 3 + 1000 + 1023 + 1024 + 5_000_000 + 1_000_000_000_000);
        assert_eq!(s.quantile(0.5), Some(Duration::from_nanos(1024)), "the 4th of 8 is 1000 ns");
        assert_eq!(s.quantile(0.0), Some(Duration::from_nanos(2)));
        assert_eq!(LatencyHistogram::bucket_bound(BUCKETS - 1), None);
        assert_eq!(Histogram::default().snapshot().quantile(0.99), None);
    }

    #[test]
    fn one_in_sample_every_calls_is_timed() {
        let timed = (0..SAMPLE_EVERY * 10).filter(|_| sample().is_some()).count();
        assert_eq!(timed, 10);
    }
}
