//! A shared cache's latency histograms, in its segment, so that every process's operations
//! land in one set (the private engine's `metrics/latency.rs`, read as the same
//! [`Latencies`]): reads and writes (one in `SAMPLE_EVERY` per thread), syncs, and per device
//! the loads and write-backs they waited for. An OS file's I/O is device 0's; an array's goes
//! to its devices.

use crate::config::MAX_DEVICES;
use crate::metrics::latency::{Histogram, Latencies};

/// The histograms, as the segment holds them (`View::latencies`). All zeros: none recorded.
#[repr(C)]
pub(crate) struct LatencyTable {
    pub read: Histogram,
    pub write: Histogram,
    pub sync: Histogram,
    /// Per device: a load's read of a run.
    pub device_read: [Histogram; MAX_DEVICES],
    /// Per device: a write-back's request of a run (a batch's, once per run).
    pub device_write: [Histogram; MAX_DEVICES],
}

impl LatencyTable {
    /// Device `dev`'s histograms (the last one's for a number past them).
    pub fn device(&self, dev: usize) -> (&Histogram, &Histogram) {
        let d = dev.min(MAX_DEVICES - 1);
        (&self.device_read[d], &self.device_write[d])
    }

    /// A snapshot, with the devices up to the last that recorded anything (one at least).
    pub fn snapshot(&self) -> Latencies {
        let mut l =
            Latencies::of([&self.read, &self.write, &self.sync], &self.device_read, &self.device_write);
        let used = (0..MAX_DEVICES)
            .rev()
            .find(|&d| l.device_read[d].count() + l.device_write[d].count() > 0)
            .map_or(1, |d| d + 1);
        l.device_read.truncate(used);
        l.device_write.truncate(used);
        l
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::{tests::small, SharedCache, SharedConfig};
    use crate::metrics::latency::SAMPLE_EVERY;

    /// Every sync is timed, one read and one write in `SAMPLE_EVERY` of a thread's, and each
    /// load and write-back request once, on device 0 for an OS file: as many as the counters
    /// say were sent.
    #[test]
    fn operations_and_their_requests_land_in_the_segments_histograms() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&SharedConfig { readahead: 0, ..small() }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let none = cache.latencies();
        assert_eq!((none.read.count(), none.write.count(), none.sync.count()), (0, 0, 0));
        assert_eq!((none.device_read.len(), none.device_write.len()), (1, 1));
        for i in 0..4 * SAMPLE_EVERY as u64 {
            f.write_at(&[i as u8; 4096], (i % 8) * 4096).unwrap();
        }
        for _ in 0..3 {
            f.write_at(&[1; 4096], 4096).unwrap();
            f.sync_data().unwrap();
        }
        f.evict(0, 0).unwrap();
        let mut page = vec![0u8; 4096];
        for i in 0..4 * SAMPLE_EVERY as u64 - 3 {
            f.read_at(&mut page, (i % 8) * 4096).unwrap();
        }
        let (l, stats) = (cache.latencies(), cache.status().stats);
        assert_eq!((l.read.count(), l.write.count(), l.sync.count()), (4, 4, 3));
        assert!(stats.read_ios > 0 && stats.writeback_ios > 0, "{stats:?}");
        assert_eq!(l.device_read[0].count(), stats.read_ios);
        assert_eq!(l.device_write[0].count(), stats.writeback_ios);
        assert_eq!(l.device_read.len(), 1, "one device: the OS file's");
        assert!(l.sync.sum_ns > 0 && l.device_write[0].sum_ns > 0);
    }
}
