//! The counters' snapshot ([`Stats`]) and latency histograms (`latency.rs`), and nothing
//! else: no logic reads them to make decisions. The counters themselves live in the
//! engine's segment (`shared/layout.rs`).

pub(crate) mod latency;

/// A snapshot of the counters ([`crate::Cache::stats`]). `Display` prints a short summary
/// (hit ratio, I/O, dirty memory); with the `serde` feature (on by default) it serializes
/// with its field names, for metrics pipelines and JSON reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    /// Pins served by the pinning thread's hot index, without a shared index lookup (counted
    /// without a locked instruction: may fall short with more than 16 threads).
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

impl Stats {
    /// Every counter with its field's name, in declaration order: what the shim's
    /// `UPCACHE_STATS` line and `upcache serve --status` print, so that each reads the same
    /// names as the JSON, the C ABI and Prometheus.
    pub fn fields(&self) -> [(&'static str, u64); 19] {
        [
            ("hits", self.hits),
            ("lock_free_hits", self.lock_free_hits),
            ("misses", self.misses),
            ("evictions", self.evictions),
            ("reclaimed", self.reclaimed),
            ("stream_evictions", self.stream_evictions),
            ("readahead_pages", self.readahead_pages),
            ("readahead_windows", self.readahead_windows),
            ("hot_hits", self.hot_hits),
            ("read_ios", self.read_ios),
            ("read_bytes", self.read_bytes),
            ("writeback_ios", self.writeback_ios),
            ("writeback_bytes", self.writeback_bytes),
            ("writeback_errors", self.writeback_errors),
            ("dflush_pages", self.dflush_pages),
            ("dirty_pages", self.dirty_pages),
            ("frames", self.frames),
            ("metadata_bytes", self.metadata_bytes),
            ("index_bytes", self.index_bytes),
        ]
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lookups = self.hits + self.misses;
        let pct = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 * 100.0 / of as f64 };
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "hits {} ({:.1}% of {lookups} lookups; lock-free {}, hot index {}), misses {}, \
             evictions {} (background {}, by stream {}); readahead {} pages in {} windows; \
             read {:.1} MiB in {} I/Os; written back {:.1} MiB in {} I/Os ({} failed, {} pages by \
             writers); dirty {} of {} frames ({:.1}%); metadata {:.1} MiB, indexes {:.1} MiB",
            self.hits,
            pct(self.hits, lookups),
            self.lock_free_hits,
            self.hot_hits,
            self.misses,
            self.evictions,
            self.reclaimed,
            self.stream_evictions,
            self.readahead_pages,
            self.readahead_windows,
            mib(self.read_bytes),
            self.read_ios,
            mib(self.writeback_bytes),
            self.writeback_ios,
            self.writeback_errors,
            self.dflush_pages,
            self.dirty_pages,
            self.frames,
            pct(self.dirty_pages, self.frames),
            mib(self.metadata_bytes),
            mib(self.index_bytes),
        )
    }
}

#[cfg(all(test, not(loom)))]
mod stats_tests {
    use super::Stats;

    #[test]
    fn stats_print_a_summary() {
        let s = Stats {
            hits: 3,
            misses: 1,
            dirty_pages: 5,
            frames: 20,
            writeback_bytes: 3 << 20,
            ..Stats::default()
        };
        let text = s.to_string();
        for want in
            ["hits 3 (75.0% of 4 lookups", "misses 1", "written back 3.0 MiB", "dirty 5 of 20 frames (25.0%)"]
        {
            assert!(text.contains(want), "{want:?} missing from {text:?}");
        }
        assert!(Stats::default().to_string().contains("(0.0% of 0 lookups"), "no division by zero");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn stats_serialize_with_their_field_names() {
        let s = Stats { hits: 7, evictions: 2, index_bytes: 4096, ..Stats::default() };
        let json = serde_json::to_value(s).unwrap();
        assert_eq!((json["hits"].as_u64(), json["evictions"].as_u64()), (Some(7), Some(2)));
        assert_eq!(serde_json::from_value::<Stats>(json).unwrap(), s);
    }

    /// `fields` names every field, as serde does, each with its own value: a field added to
    /// `Stats` and not to `fields` fails here.
    #[cfg(feature = "serde")]
    #[test]
    fn fields_name_every_field_with_its_value() {
        let mut s = Stats::default();
        let names: Vec<&str> = s.fields().iter().map(|(n, _)| *n).collect();
        let mut json = serde_json::to_value(s).unwrap();
        for (i, name) in names.iter().enumerate() {
            json[*name] = serde_json::json!(i as u64 + 1);
        }
        s = serde_json::from_value(json.clone()).unwrap();
        let fields: Vec<(&str, u64)> = s.fields().to_vec();
        let want: Vec<(&str, u64)> = names.iter().enumerate().map(|(i, n)| (*n, i as u64 + 1)).collect();
        assert_eq!(fields, want);
        assert_eq!(json.as_object().unwrap().len(), names.len(), "a field fields() does not name: {json}");
    }
}
