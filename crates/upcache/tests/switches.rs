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

/// Holds every device read while closed: a writer whose partial page must be loaded first
/// stays inside its `write_at` until the gate opens.
#[derive(Default)]
struct Gate {
    inner: PsyncEngine,
    closed: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
    held: AtomicUsize,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.changed.notify_all();
    }

    /// Waits until a read is held at the gate.
    fn until_held(&self) {
        let mut closed = self.closed.lock().unwrap();
        while self.held.load(Ordering::SeqCst) == 0 {
            closed = self.changed.wait(closed).unwrap();
        }
    }
}

impl IoEngine for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }
    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let mut closed = self.closed.lock().unwrap();
        if *closed {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.changed.notify_all();
            while *closed {
                closed = self.changed.wait(closed).unwrap();
            }
        }
        drop(closed);
        self.inner.read_vectored(f, off, bufs)
    }
    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_vectored(f, off, bufs)
    }
}

/// Range lock on: while one writer of a file waits inside its `write_at` (its partial page
/// being loaded), another writes a disjoint page of the file and returns. Off: the second
/// waits for the first, as writers of one inode do in the kernel. (The negative check gives
/// the second writer many chances to finish; it can only pass wrongly, never fail wrongly.)
#[test]
fn range_lock_off_lets_one_writer_in_a_file_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    for on in [true, false] {
        let gate = Arc::new(Gate::default());
        let config = common::config(&tmp.path().join(format!("{on}")), 1, 4096, 64)
            .with_readahead(0)
            .with_range_lock(on)
            .with_io_engine(gate.clone());
        {
            let cache = Cache::create(config.clone()).unwrap();
            let f = cache.create_file("f").unwrap();
            f.write_all_at(&[7u8; 2 * 4096], 0).unwrap();
            drop(f);
            cache.close().unwrap();
        }
        let cache = Cache::open(config).unwrap();
        let f = cache.open_file("f").unwrap();
        gate.set(true);
        std::thread::scope(|s| {
            let first = s.spawn(|| f.write_at(b"a", 10).unwrap());
            gate.until_held();
            let second = s.spawn(|| f.write_at(&[1u8; 4096], 5 * 4096).unwrap());
            if on {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while !second.is_finished() {
                    assert!(std::time::Instant::now() < deadline, "a disjoint writer waited for another");
                    std::thread::yield_now();
                }
            } else {
                for _ in 0..100_000 {
                    assert!(!second.is_finished(), "two writers in one file at once with the range lock off");
                    std::thread::yield_now();
                }
            }
            gate.set(false);
            assert_eq!(first.join().unwrap(), 1);
            assert_eq!(second.join().unwrap(), 4096);
        });
        let mut page = vec![0u8; 4096];
        f.read_exact_at(&mut page, 0).unwrap();
        assert_eq!(&page[9..12], &[7, b'a', 7]);
        // A pin held while its thread writes the file could wait for ever for the one writer,
        // which waits for the pin: with the lock off, pins are refused. (Queues take no range
        // lock, and never sleep while they hold loads: they work either way.)
        let refused = |r: upcache::Result<()>| r.is_err_and(|e| e.kind() == upcache::ErrorKind::Unsupported);
        assert_eq!(refused(f.pin(0).map(drop)), !on);
        assert_eq!(refused(f.pin_mut(0).map(drop)), !on);
        assert!(!refused(cache.queue(4).map(drop)));
        assert!(!refused(cache.async_io(4).map(drop)));
    }
}
