//! The off switches of techniques that had none (issue 34), so that each paper's effect can be
//! measured: each one turned off changes what it should, and the cache still reads back what
//! was written.

mod common;

use std::io::{self, IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use upcache::internals::io::device::BackingFile;
use upcache::internals::io::engine::{IoEngine, IoReq, PsyncEngine};
use upcache::{Cache, Config};

const PAGES: u64 = 64;

/// `PAGES` pages written back to back, synced; then the cache reopened and all of them read
/// with one call: (write-back requests, device read requests).
fn requests(config: Config) -> (u64, u64) {
    let data = common::pattern(7, (PAGES * 4096) as usize);
    {
        let cache = Cache::create(config.clone()).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_data().unwrap();
        let written = cache.stats().writeback_ios;
        drop(f);
        cache.close().unwrap();
        let cache = Cache::open(config).unwrap();
        let f = cache.open_file("f").unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
        (written, cache.stats().read_ios)
    }
}

/// Run merging off: every write-back and load request moves one page; on, the 64 pages go in
/// a few (one device, readahead off so that only the read's own load reads).
#[test]
fn run_merging_off_moves_one_page_per_request() {
    let tmp = tempfile::tempdir().unwrap();
    let config = |dir: &str, on: bool| {
        common::config(&tmp.path().join(dir), 1, 4096, 256).with_readahead(0).with_run_merging(on)
    };
    let (written, read) = requests(config("on", true));
    assert!(written <= 4 && read <= 4, "merged: {written} writes, {read} reads for {PAGES} pages");
    let (written, read) = requests(config("off", false));
    assert_eq!((written, read), (PAGES, PAGES), "one page per request");
}

/// Counts the requests of the largest batch the cache hands the engine.
#[derive(Default)]
struct BatchSizes {
    inner: PsyncEngine,
    largest: AtomicUsize,
}

impl IoEngine for BatchSizes {
    fn name(&self) -> &'static str {
        "batch-sizes"
    }
    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.inner.read_vectored(f, off, bufs)
    }
    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_vectored(f, off, bufs)
    }
    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        self.largest.fetch_max(reqs.len(), Ordering::SeqCst);
        self.inner.run_batch(reqs)
    }
}

/// Bundling off: the engine gets one request at a time; on, a write-back over 4 devices hands
/// it the runs of all of them at once. (Streams off: the runs of a sync go in batches.)
#[test]
fn bundling_off_hands_the_engine_one_request_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let largest = |dir: &str, on: bool| {
        let engine = Arc::new(BatchSizes::default());
        let config = common::config(&tmp.path().join(dir), 4, 4096, 256)
            .with_streams(false)
            .with_bundling(on)
            .with_io_engine(engine.clone());
        requests(config);
        engine.largest.load(Ordering::SeqCst)
    };
    assert!(largest("on", true) > 1, "the runs of 4 devices in one batch");
    assert_eq!(largest("off", false), 1);
}

/// Hot index off: repeat pins of a page are never served by the thread's hot index; on, they
/// are.
#[test]
fn hot_index_off_serves_no_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let hot_hits = |dir: &str, on: bool| {
        let cache =
            Cache::create(common::config(&tmp.path().join(dir), 1, 4096, 64).with_hot_index(on)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&[5u8; 4096], 0).unwrap();
        for _ in 0..10 {
            assert_eq!(f.pin(0).unwrap()[0], 5);
        }
        cache.stats().hot_hits
    };
    assert!(hot_hits("on", true) >= 9);
    assert_eq!(hot_hits("off", false), 0);
}
