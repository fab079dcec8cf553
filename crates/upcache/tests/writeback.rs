//! Write-back under concurrency: a sync writes every page written before it, however the
//! flushers, dflush and eviction race with it, with streams on and off and either flush kind.
//!
//! The check reads the backing files themselves, where the stripe layout puts each page, right
//! after `sync_data` returns: a page the sync skipped (say, one that write-back wrongly cleaned
//! from the dirty streams while a writer re-dirtied it) still holds older bytes there.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;

use upcache::internals::io::layout::{LayoutKind, StripeLayout};
use upcache::{Cache, FlushKind};

const PS: usize = 4096;
const DEVICES: usize = 2;
const PAGES: u64 = 64;
const WRITERS: u64 = 2;
const ROUNDS: u64 = 1000;

/// Page `page`'s bytes for round `round` of writer `w`.
fn record(w: u64, round: u64, page: u64) -> Vec<u8> {
    common::pattern((w << 48) ^ (round << 16) ^ page, PS)
}

/// The one backing file in each device directory.
fn backing_files(root: &Path) -> Vec<std::fs::File> {
    common::dirs(root, DEVICES)
        .iter()
        .map(|dir| {
            let data: Vec<PathBuf> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "data"))
                .collect();
            assert_eq!(data.len(), 1, "one backing file in {}", dir.display());
            std::fs::File::open(&data[0]).unwrap()
        })
        .collect()
}

fn synced_pages_are_on_the_devices(streams: bool, flush: FlushKind) {
    let tmp = tempfile::tempdir().unwrap();
    // 32 frames for 64 pages: eviction writes back victims. Flushers start past 1 dirty page
    // and writers flush past 2, so write-back races the writers and their syncs all the time.
    let config = common::config(tmp.path(), DEVICES, PS, 32)
        .with_dirty_background_ratio(0.04)
        .with_dirty_foreground_ratio(0.07)
        .with_flusher_threads(2)
        .with_streams(streams)
        .with_flush(flush);
    let cache = Cache::create(config).unwrap();
    let f = cache.create_file("pages").unwrap();
    f.set_len(PAGES * PS as u64).unwrap();
    let layout = StripeLayout::new(PS, 2 * PS as u64, DEVICES, LayoutKind::default());
    let backing = backing_files(tmp.path());
    thread::scope(|s| {
        for w in 0..WRITERS {
            let (f, layout, backing) = (&f, &layout, &backing);
            s.spawn(move || {
                let mut x = w + 1;
                let mut on_device = vec![0u8; PS];
                for round in 0..ROUNDS {
                    // Writer w owns the pages congruent to w, so nothing else writes them.
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let page = (x >> 33) % (PAGES / WRITERS) * WRITERS + w;
                    // Twice: write-back of the first version may be in flight when the second
                    // comes (the page is re-dirtied while its write-back ends).
                    f.write_all_at(&record(w, round + ROUNDS, page), page * PS as u64).unwrap();
                    let bytes = record(w, round, page);
                    f.write_all_at(&bytes, page * PS as u64).unwrap();
                    if round % 3 == 0 {
                        // A neighbour too, so runs and streams span several pages.
                        let next = (page + WRITERS) % PAGES;
                        f.write_all_at(&record(w, round, next), next * PS as u64).unwrap();
                    }
                    f.sync_data().unwrap();
                    let (dev, offset) = layout.locate(page);
                    backing[dev].read_exact_at(&mut on_device, offset).unwrap();
                    assert!(
                        on_device == bytes,
                        "streams {streams}, {flush:?}: page {page} of writer {w}, round {round}: \
                         the device holds older bytes after sync_data"
                    );
                }
            });
        }
    });
    if flush == FlushKind::Direct {
        assert!(cache.stats().dflush_pages > 0, "writers never crossed the foreground threshold");
    }
}

#[test]
fn synced_pages_are_on_the_devices_with_streams() {
    synced_pages_are_on_the_devices(true, FlushKind::Direct);
}

#[test]
fn synced_pages_are_on_the_devices_without_streams() {
    synced_pages_are_on_the_devices(false, FlushKind::Direct);
}

#[test]
fn synced_pages_are_on_the_devices_with_background_flush() {
    synced_pages_are_on_the_devices(true, FlushKind::Background);
}

/// Counts the fdatasyncs of backing files; otherwise the plain psync engine.
#[derive(Debug, Default)]
struct CountingSyncs {
    syncs: std::sync::atomic::AtomicUsize,
}

impl upcache::internals::io::engine::IoEngine for CountingSyncs {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn read_vectored(
        &self,
        file: &upcache::internals::io::device::BackingFile,
        offset: u64,
        bufs: &mut [std::io::IoSliceMut<'_>],
    ) -> std::io::Result<usize> {
        upcache::internals::io::engine::PsyncEngine.read_vectored(file, offset, bufs)
    }
    fn write_vectored(
        &self,
        file: &upcache::internals::io::device::BackingFile,
        offset: u64,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::io::Result<()> {
        upcache::internals::io::engine::PsyncEngine.write_vectored(file, offset, bufs)
    }
    fn sync_data(&self, file: &upcache::internals::io::device::BackingFile) -> std::io::Result<()> {
        self.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        file.file().sync_data()
    }
}

/// Appends synced one by one need a backing-file fdatasync only when zeros are written
/// ahead (once per window); overwrites below the window need one each; and every synced byte
/// and length is there after reopening.
#[test]
fn appends_inside_the_zero_window_sync_through_the_log() {
    use std::sync::atomic::Ordering::SeqCst;
    let tmp = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(CountingSyncs::default());
    let config = || common::config(tmp.path(), 1, PS, 64).with_flusher_threads(1);
    let cache = Cache::create(config().with_io_engine(engine.clone())).unwrap();
    let f = cache.create_file("log").unwrap();
    let appends = 200u64;
    for i in 0..appends {
        f.write_all_at(&record(0, i, i), i * PS as u64).unwrap();
        f.sync_data().unwrap();
    }
    let appending = engine.syncs.load(SeqCst);
    assert!(appending <= 3, "{appending} backing fdatasyncs for {appends} appends");
    // Overwrites (no length change, nothing to log): each needs its own fdatasync.
    for i in 0..10u64 {
        f.write_all_at(&record(1, i, i), i * PS as u64).unwrap();
        f.sync_data().unwrap();
    }
    assert!(engine.syncs.load(SeqCst) >= appending + 10);
    drop(f);
    drop(cache);
    let cache = Cache::open(config()).unwrap();
    let f = cache.open_file("log").unwrap();
    assert_eq!(f.len(), appends * PS as u64);
    let mut buf = vec![0u8; PS];
    for i in 0..appends {
        f.read_exact_at(&mut buf, i * PS as u64).unwrap();
        let want = if i < 10 { record(1, i, i) } else { record(0, i, i) };
        assert!(buf == want, "page {i}");
    }
}

/// A file written sequentially through a small cache: reclaim evicts the written-back
/// streams in order (not only CLOCK), and every byte reads back.
#[test]
fn written_back_streams_are_evicted_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, PS, 256)).unwrap();
    let f = cache.create_file("scan").unwrap();
    let chunk = 64 * PS;
    let chunks = 16u64; // 4x the cache
    for i in 0..chunks {
        f.write_all_at(&common::pattern(i, chunk), i * chunk as u64).unwrap();
    }
    f.sync_data().unwrap();
    assert!(cache.stats().stream_evictions > 0, "{:?}", cache.stats());
    let mut buf = vec![0u8; chunk];
    for i in 0..chunks {
        f.read_exact_at(&mut buf, i * chunk as u64).unwrap();
        assert!(buf == common::pattern(i, chunk), "chunk {i}");
    }
}
