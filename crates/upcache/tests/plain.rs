//! Plain-file mode (`Cache::open_path`): existing OS files cached by path. After a sync (or
//! `close_path`), the OS file, read directly, holds every byte written through the cache and
//! has exactly the file's length; the array's catalog never sees these files.

mod common;

use std::os::unix::fs::FileExt;
use upcache::{Cache, ErrorKind};

fn cache(root: &std::path::Path, frames: usize) -> Cache {
    Cache::create(common::config(root, 1, 4096, frames).with_allow_buffered(true)).unwrap()
}

#[test]
fn an_existing_file_reads_and_writes_through_the_cache_and_syncs_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("data.bin");
    let before = common::pattern(1, 10_000);
    std::fs::write(&path, &before).unwrap();

    let f = cache.open_path(&path, false).unwrap();
    assert_eq!(f.len(), 10_000);
    let mut back = vec![0u8; 10_000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == before);

    // Overwrite across pages, append past the end (not page aligned), sync.
    let patch = common::pattern(2, 5000);
    f.write_all_at(&patch, 3000).unwrap();
    let tail = common::pattern(3, 777);
    f.write_all_at(&tail, 20_000).unwrap();
    f.sync_data().unwrap();
    let mut want = before.clone();
    want[3000..8000].copy_from_slice(&patch);
    want.resize(20_000, 0);
    want.extend_from_slice(&tail);
    assert_eq!(std::fs::read(&path).unwrap(), want, "the OS file after sync_data");

    // Shrink and extend: the OS size follows exactly.
    f.set_len(4321).unwrap();
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), want[..4321]);
    f.set_len(9000).unwrap();
    f.sync_data().unwrap();
    let mut grown = want[..4321].to_vec();
    grown.resize(9000, 0);
    assert_eq!(std::fs::read(&path).unwrap(), grown);

    // Not in the array's namespace.
    assert!(cache.list().is_empty());
}

#[test]
fn opens_share_one_copy_and_close_path_writes_back_and_forgets() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("new.bin");
    assert_eq!(cache.open_path(&path, false).unwrap_err().kind(), ErrorKind::NotFound);
    let a = cache.open_path(&path, true).unwrap();
    a.write_all_at(b"hello", 4096 * 3 + 1).unwrap();
    // Another path to the same file (a hard link) shares the cached, unsynced bytes.
    let link = tmp.path().join("link.bin");
    std::fs::hard_link(&path, &link).unwrap();
    let b = cache.open_path(&link, false).unwrap();
    let mut buf = [0u8; 5];
    b.read_exact_at(&mut buf, 4096 * 3 + 1).unwrap();
    assert_eq!(&buf, b"hello");

    cache.close_path(&path).unwrap();
    let os = std::fs::File::open(&path).unwrap();
    assert_eq!(os.metadata().unwrap().len(), 4096 * 3 + 6);
    os.read_exact_at(&mut buf, 4096 * 3 + 1).unwrap();
    assert_eq!(&buf, b"hello");
    // Its pages were dropped: a handle's next read loads what the OS file holds.
    let misses = cache.stats().misses;
    a.read_exact_at(&mut buf, 4096 * 3 + 1).unwrap();
    assert_eq!(&buf, b"hello");
    assert!(cache.stats().misses > misses, "the page was still cached");
    drop((a, b));
    assert_eq!(cache.close_path(&path).unwrap_err().kind(), ErrorKind::NotFound, "no open of it left");
    // Opened again: the OS file as it now is.
    std::fs::write(&path, b"replaced").unwrap();
    let c = cache.open_path(&path, false).unwrap();
    let mut eight = [0u8; 8];
    c.read_exact_at(&mut eight, 0).unwrap();
    assert_eq!(&eight, b"replaced");
    assert_eq!(cache.open_path(tmp.path(), false).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn a_file_larger_than_the_cache_written_by_threads_reaches_the_os_file_intact() {
    let tmp = tempfile::tempdir().unwrap();
    // 16 frames for a 1 MiB file: eviction writes back all the time.
    let cache = cache(&tmp.path().join("array"), 16);
    let path = tmp.path().join("big.bin");
    let f = cache.open_path(&path, true).unwrap();
    let slice = 256 * 1024 + 123;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = f.clone();
            s.spawn(move || {
                let data = common::pattern(10 + t, slice);
                for chunk in 0..slice.div_ceil(5000) {
                    let at = chunk * 5000;
                    let end = (at + 5000).min(slice);
                    f.write_all_at(&data[at..end], t * slice as u64 + at as u64).unwrap();
                }
            });
        }
    });
    let mut back = vec![0u8; slice];
    for t in 0..4u64 {
        f.read_exact_at(&mut back, t * slice as u64).unwrap();
        assert!(back == common::pattern(10 + t, slice), "slice {t} through the cache");
    }
    drop(f);
    drop(cache); // closing the cache syncs plain files too
    let os = std::fs::read(&path).unwrap();
    assert_eq!(os.len(), 4 * slice);
    for t in 0..4 {
        assert!(
            os[t * slice..(t + 1) * slice] == common::pattern(10 + t as u64, slice)[..],
            "slice {t} in the OS file"
        );
    }
}

/// An appender completes the page holding the end with each write (4096 bytes from the middle
/// of a page: the rest of that page, then the first half of the next) while another thread
/// writes the file back in a loop. A write-back of the page holding the end writes only up to
/// the length, so a writer that unlocked the page before raising the length let it be cleaned
/// without its last 2048 bytes (failed 50 runs in 50 without the fix).
#[test]
fn a_write_back_racing_an_append_never_cleans_bytes_past_a_stale_length() {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Stops the writing-back thread however the scope ends (a failed assertion included).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed); // Relaxed: a flag, nothing published with it
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 64);
    let path = tmp.path().join("appended.bin");
    let f = cache.open_path(&path, true).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // (Relaxed: only the flag is read; the main thread checks the OS file itself.)
                f.write_back().unwrap();
            }
        });
        let _stop = Stop(&stop);
        for round in 0..150u64 {
            let data = common::pattern(round, 32 * 4096);
            f.write_all_at(&data[..2048], 0).unwrap();
            for at in (2048..data.len()).step_by(4096) {
                let end = (at + 4096).min(data.len());
                f.write_all_at(&data[at..end], at as u64).unwrap();
            }
            f.write_back().unwrap();
            let os = std::fs::read(&path).unwrap();
            let lost = os.iter().zip(&data).position(|(a, b)| a != b);
            assert!(
                os.len() == data.len() && lost.is_none(),
                "round {round}: the OS file differs at {lost:?}"
            );
            f.set_len(0).unwrap();
        }
    });
}

/// Writers keep writing records (reopening when a close took their handle away) while
/// another thread closes and reopens the file over and over, and a third syncs: at the end,
/// every slot of the OS file holds the last record written to it, and the file its length.
#[test]
fn closes_and_syncs_racing_writers_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 16);
    let path = tmp.path().join("raced.bin");
    drop(cache.open_path(&path, true).unwrap());
    const SLOT: usize = 3000;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let last: Vec<Vec<u64>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (cache, path) = (&cache, &path);
                s.spawn(move || {
                    let mut last = vec![0u64; 16];
                    let mut f = cache.open_path(path, false).unwrap();
                    for seq in 1..=300u64 {
                        let slot = (seq * 7 + w) % 16;
                        let data = common::pattern(seq * 100 + w, SLOT);
                        // The slots of writer w are w, w+2, ...: disjoint between writers.
                        let at = (slot / 2 * 2 + w) * SLOT as u64;
                        loop {
                            match f.write_all_at(&data, at) {
                                Ok(()) => break,
                                Err(e) if e.kind() == ErrorKind::NotFound => {
                                    f = cache.open_path(path, false).unwrap()
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                        last[(slot / 2 * 2 + w) as usize] = seq * 100 + w;
                    }
                    last
                })
            })
            .collect();
        let closer = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match cache.close_path(&path) {
                    Ok(()) | Err(_) => {}
                }
                let f = cache.open_path(&path, false).unwrap();
                let _ = f.sync_data();
            }
        });
        let last: Vec<Vec<u64>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        closer.join().unwrap();
        last
    });
    let _ = cache.close_path(&path);
    drop(cache);
    let os = std::fs::read(&path).unwrap();
    let written: Vec<u64> = (0..16).map(|i| last[0][i].max(last[1][i])).collect();
    let end = written.iter().rposition(|&s| s != 0).map_or(0, |i| (i + 1) * SLOT);
    assert_eq!(os.len(), end, "the OS file's size");
    for (i, &seed) in written.iter().enumerate() {
        if seed != 0 {
            assert!(os[i * SLOT..(i + 1) * SLOT] == common::pattern(seed, SLOT)[..], "slot {i}");
        }
    }
}

#[test]
fn write_back_leaves_the_file_cached_and_discard_drops_it_without_io() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("kept.bin");
    std::fs::write(&path, b"").unwrap();
    let f = cache.open_path(&path, false).unwrap();
    let first = common::pattern(4, 6000);
    f.write_all_at(&first, 0).unwrap();
    f.write_back().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), first, "written back with the exact size");
    assert_eq!(f.os_metadata().unwrap().len(), 6000);
    // Still cached: a read is a hit.
    let mut back = vec![0u8; 6000];
    let hits = cache.stats().hits;
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == first);
    assert!(cache.stats().hits > hits);
    // A copy discarded: with no I/O (a dirty page is dropped, the OS file keeps what it
    // holds), and the next reads load the OS file.
    f.write_all_at(b"dropped", 0).unwrap();
    cache.discard_plain(&f).unwrap();
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == first, "the dropped write was written back");
    // Changes behind the cache are seen, as the kernel shows them (at the next look: an
    // open, a lock, or a clock tick later), and a discard takes them in at once.
    let other = common::pattern(5, 9000);
    std::fs::write(&path, &other).unwrap();
    cache.discard_plain(&f).unwrap();
    assert_eq!(f.len(), 9000);
    assert_eq!(std::fs::read(&path).unwrap(), other);
    let g = cache.open_path(&path, false).unwrap();
    assert_eq!(g.len(), 9000);
    let mut back = vec![0u8; 9000];
    g.read_exact_at(&mut back, 0).unwrap();
    assert!(back == other);
    assert_eq!(cache.pinned_frames(), 0);
}

#[test]
fn evict_drops_clean_pages_of_a_range_and_keeps_dirty_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("evicted.bin");
    let data = common::pattern(6, 16 * 4096);
    std::fs::write(&path, &data).unwrap();
    let f = cache.open_path(&path, false).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    // Page 3 dirty; pages 1..=6 wholly in the range, 0 and 7 only partly (kept).
    f.write_all_at(b"dirty", 3 * 4096).unwrap();
    let misses = cache.stats().misses;
    f.evict(4096 - 1, 6 * 4096 + 2).unwrap();
    let mut want = data.clone();
    want[3 * 4096..3 * 4096 + 5].copy_from_slice(b"dirty");
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == want, "the dirty page kept its bytes");
    // Pages 1, 2, 4, 5 and 6 were loaded again.
    assert_eq!(cache.stats().misses - misses, 5);
    let misses = cache.stats().misses;
    f.evict(0, 0).unwrap();
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == want);
    assert_eq!(cache.stats().misses - misses, 15, "every clean page, to the end");
    assert_eq!(cache.pinned_frames(), 0);
}

#[test]
fn buffered_plain_files_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let config = common::config(&tmp.path().join("array"), 1, 4096, 32).with_plain_direct(false);
    let cache = Cache::create(config).unwrap();
    let path = tmp.path().join("buffered.bin");
    let before = common::pattern(8, 9000);
    std::fs::write(&path, &before).unwrap();
    let f = cache.open_path(&path, false).unwrap();
    let mut back = vec![0u8; 9000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == before);
    let patch = common::pattern(9, 5000);
    f.write_all_at(&patch, 7000).unwrap();
    f.write_back().unwrap();
    let mut want = before;
    want.truncate(7000);
    want.extend_from_slice(&patch);
    assert_eq!(std::fs::read(&path).unwrap(), want);
    cache.close_plain(&f).unwrap();
}

/// Appends `bytes` to the OS file as another process would (not through the cache).
fn append_outside(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

#[test]
fn a_write_back_never_cuts_what_another_writer_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("log");
    std::fs::write(&path, b"old contents, to be truncated").unwrap();
    let f = cache.open_path(&path, false).unwrap();
    // The cache truncates (as an open with O_TRUNC does), then someone else writes the file.
    f.set_len(0).unwrap();
    append_outside(&path, b"hello\n");
    f.write_back().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"hello\n", "a write-back cut the other writer's bytes");
    assert_eq!(f.len(), 6, "the growth is the file's");
    append_outside(&path, b"more\n");
    cache.close_plain(&f).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"hello\nmore\n", "the last close cut them");
}

#[test]
fn refresh_len_takes_in_an_outside_append_clean_or_dirty_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("tail");
    std::fs::write(&path, b"line 1\n").unwrap();
    let f = cache.open_path(&path, false).unwrap();
    let mut buf = vec![0u8; 64];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 7); // the page holding the end is cached, clean
    assert_eq!(f.refresh_len().unwrap(), 7, "nothing appended yet");

    append_outside(&path, b"line 2\n");
    assert_eq!(f.refresh_len().unwrap(), 14);
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 14);
    assert_eq!(&buf[..14], b"line 1\nline 2\n");

    // Our own write-back's page of zeros past the end is not growth.
    f.write_all_at(b"ours\n", 14).unwrap();
    f.write_back().unwrap();
    assert_eq!(f.refresh_len().unwrap(), 19);
    assert_eq!(std::fs::read(&path).unwrap(), b"line 1\nline 2\nours\n");

    // A dirty page holding the end keeps our bytes and gains the other writer's after them.
    f.write_all_at(b"more\n", 19).unwrap();
    let ours = std::fs::metadata(&path).unwrap().len();
    assert_eq!(ours, 19, "not written back yet");
    // The other writer appends at the OS file's end, which is where our pending bytes go.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all_at(b"their\n", 24).unwrap();
    assert_eq!(f.refresh_len().unwrap(), 30);
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 30);
    assert_eq!(&buf[..30], b"line 1\nline 2\nours\nmore\ntheir\n");
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"line 1\nline 2\nours\nmore\ntheir\n");

    // Across a page boundary: the new pages load from the OS file.
    let big = common::pattern(7, 10_000);
    append_outside(&path, &big);
    assert_eq!(f.refresh_len().unwrap(), 30 + 10_000);
    let mut back = vec![0u8; 10_000];
    f.read_exact_at(&mut back, 30).unwrap();
    assert!(back == big);
}

#[test]
fn writes_stop_at_the_file_systems_largest_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("big");
    std::fs::write(&path, b"x").unwrap();
    let f = cache.open_path(&path, false).unwrap();
    // The kernel's own answer, from the OS file: the first offset a write fails at.
    let os = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let limit = (0..63).map(|b| 1u64 << b).find(|&at| os.write_at(b"x", at - 1).is_err());
    os.set_len(1).unwrap();
    let Some(limit) = limit else {
        eprintln!("the file system takes writes at 2^62: nothing to check");
        return;
    };
    let err = f.write_at(b"y", limit).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FileTooLarge, "{err}");
    assert_eq!(std::io::Error::from(err).kind(), std::io::ErrorKind::FileTooLarge);
    assert_eq!(f.set_len(limit + 1).unwrap_err().kind(), ErrorKind::FileTooLarge);
    assert_eq!(f.len(), 1, "nothing of the failed writes");
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"x");
}

#[test]
fn writing_back_the_page_holding_the_end_keeps_another_writers_append() {
    let tmp = tempfile::tempdir().unwrap();
    // Buffered: the page holding the end is written back exactly up to the length.
    let config = common::config(&tmp.path().join("array"), 1, 4096, 32).with_allow_buffered(true);
    let cache = Cache::create(config.with_plain_direct(false)).unwrap();
    let path = tmp.path().join("shared.log");
    let before = common::pattern(8, 5000);
    std::fs::write(&path, &before).unwrap();
    let f = cache.open_path(&path, false).unwrap();
    f.write_all_at(b"OURS", 4500).unwrap(); // the page holding the end, dirty
    append_outside(&path, b"their line\n");
    f.write_back().unwrap();
    let mut want = before.clone();
    want[4500..4504].copy_from_slice(b"OURS");
    want.extend_from_slice(b"their line\n");
    assert_eq!(std::fs::read(&path).unwrap(), want, "the write-back overwrote or cut the append");
    assert_eq!(f.len(), 5011);
    cache.close_plain(&f).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), want);
}

#[test]
fn a_shrink_by_another_process_is_not_undone_and_set_len_starts_from_the_os_size() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = cache(&tmp.path().join("array"), 32);
    let path = tmp.path().join("rotated.log");
    std::fs::write(&path, common::pattern(9, 5000)).unwrap();
    let reader = cache.open_path(&path, false).unwrap();
    let mut buf = vec![0u8; 100];
    reader.read_exact_at(&mut buf, 0).unwrap();
    // Rotated by copytruncate: a reader's write-back and close must leave it empty.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    reader.write_back().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "a write-back undid the truncation");
    cache.close_plain(&reader).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the close undid the truncation");

    // Grown by another process to 10,000, then set to 8,000 here: 8,000, as ftruncate gives.
    std::fs::write(&path, b"short").unwrap();
    let f = cache.open_path(&path, false).unwrap();
    append_outside(&path, &common::pattern(10, 9995));
    f.set_len(8000).unwrap();
    f.sync_data().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8000);
}
