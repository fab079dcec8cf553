//! End-to-end basics: create, write, read, reopen.

mod common;

use upcache::{Cache, ErrorKind};

#[test]
fn write_read_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::pattern(1, 1_000_000);
    {
        let cache = Cache::create(common::config(tmp.path(), 3, 4096, 32)).unwrap();
        let f = cache.create_file("a").unwrap();
        f.write_all_at(&data, 12345).unwrap();
        assert_eq!(f.len(), 12345 + data.len() as u64);
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 12345).unwrap();
        assert!(back == data);
        let mut head = vec![1u8; 12345];
        f.read_exact_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|&b| b == 0));
        let s = cache.stats();
        assert!(s.evictions > 0, "32 frames cannot hold 1 MB: {s:?}");
    }
    let cache = Cache::open(common::config(tmp.path(), 3, 4096, 32)).unwrap();
    assert_eq!(cache.list(), vec!["a".to_string()]);
    let f = cache.open_file("a").unwrap();
    assert_eq!(f.len(), 12345 + data.len() as u64);
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 12345).unwrap();
    assert!(back == data);
    let mut past = [0u8; 10];
    assert_eq!(f.read_at(&mut past, f.len() - 3).unwrap(), 3);
    assert_eq!(f.read_at(&mut past, f.len()).unwrap(), 0);
    assert_eq!(f.read_at(&mut past, f.len() + 100).unwrap(), 0);
    assert_eq!(cache.open_file("nope").unwrap_err().kind(), ErrorKind::NotFound);
}

#[test]
fn shrink_then_extend_reads_zeros() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16)).unwrap();
    let f = cache.create_file("a").unwrap();
    f.write_all_at(&[7u8; 20000], 0).unwrap();
    f.set_len(5000).unwrap();
    f.set_len(20000).unwrap();
    let mut back = vec![1u8; 20000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..5000].iter().all(|&b| b == 7));
    assert!(back[5000..].iter().all(|&b| b == 0), "bytes past a shrink must read as zero");
    f.set_len(5000).unwrap();
    f.write_all_at(&[9u8; 10], 15000).unwrap();
    f.read_exact_at(&mut back[..15010], 0).unwrap();
    assert!(back[5000..15000].iter().all(|&b| b == 0));
}

fn quiet_config(root: &std::path::Path, devices: usize) -> upcache::Config {
    // Thresholds high enough that no background write-back interferes with the counts.
    common::config(root, devices, 4096, 64).with_dirty_background_ratio(0.9).with_dirty_foreground_ratio(1.0)
}

#[test]
fn whole_page_writes_never_read_and_partial_writes_do() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let cache = Cache::create(quiet_config(tmp.path(), 2)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&common::pattern(1, 10 * 4096), 0).unwrap();
        assert_eq!(cache.stats().read_ios, 0, "whole-page writes must not read");
    }
    let cache = Cache::open(quiet_config(tmp.path(), 2)).unwrap();
    let f = cache.open_file("f").unwrap();
    f.write_all_at(&[1, 2, 3], 4096 * 3 + 10).unwrap();
    assert_eq!(cache.stats().read_ios, 1, "a partial write of a cold page reads it once");
    f.write_all_at(&[4; 4096], 4096 * 5).unwrap();
    assert_eq!(cache.stats().read_ios, 1);
}

#[test]
fn concurrent_misses_on_one_page_load_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    drop({
        let cache = Cache::create(quiet_config(tmp.path(), 1)).unwrap();
        cache.create_file("f").unwrap().write_all_at(&common::pattern(2, 4096), 0).unwrap();
        cache
    });
    let cache = Cache::open(quiet_config(tmp.path(), 1)).unwrap();
    let f = cache.open_file("f").unwrap();
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                barrier.wait();
                let mut b = vec![0u8; 4096];
                f.read_exact_at(&mut b, 0).unwrap();
                assert!(b == common::pattern(2, 4096));
            });
        }
    });
    let st = cache.stats();
    assert_eq!(st.read_ios, 1, "8 threads missing on one page must load it once: {st:?}");
    assert_eq!(st.misses + st.hits, 8);
}

#[test]
fn contiguous_dirty_pages_on_a_device_go_out_in_one_write() {
    let tmp = tempfile::tempdir().unwrap();
    // Stripe unit 2 pages, 2 devices: pages 0,1,4,5 are adjacent on device 0 and 2,3,6,7 on
    // device 1, so 8 dirty pages need exactly 2 writes.
    let cache = Cache::create(quiet_config(tmp.path(), 2)).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(3, 8 * 4096), 0).unwrap();
    f.sync_data().unwrap();
    let st = cache.stats();
    assert_eq!(st.writeback_ios, 2, "{st:?}");
    assert_eq!(st.writeback_bytes, 8 * 4096);
}

#[test]
fn orphaned_backing_files_are_removed_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = || common::config(tmp.path(), 2, 4096, 16);
    {
        let cache = Cache::create(cfg()).unwrap();
        cache.create_file("keep").unwrap().write_all_at(b"data", 0).unwrap();
    }
    // What a crash between a remove's catalog write and its deletes leaves behind.
    let orphan = tmp.path().join("dev1").join(format!("f{:016x}.data", 999));
    std::fs::write(&orphan, b"stale").unwrap();
    let cache = Cache::open(cfg()).unwrap();
    assert!(!orphan.exists());
    let mut b = [0u8; 4];
    cache.open_file("keep").unwrap().read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"data");
}

/// Reads what the devices hold for `pages` pages of file id 1, by the layout formula of the
/// issue: page p lives on device (p * ps / su) % n, stripe units back to back per device.
fn device_image(root: &std::path::Path, devices: u64, stripe_pages: u64, pages: u64) -> Vec<u8> {
    let mut out = vec![0u8; (pages * 4096) as usize];
    for p in 0..pages {
        let stripe = p / stripe_pages;
        let dev = stripe % devices;
        let off = ((stripe / devices) * stripe_pages + p % stripe_pages) * 4096;
        let path = root.join(format!("dev{dev}")).join(format!("f{:016x}.data", 1));
        let bytes = std::fs::read(&path).unwrap();
        let end = (off as usize + 4096).min(bytes.len());
        if (off as usize) < end {
            out[(p * 4096) as usize..][..end - off as usize].copy_from_slice(&bytes[off as usize..end]);
        }
    }
    out
}

#[test]
fn sync_data_puts_every_written_byte_on_its_device() {
    let tmp = tempfile::tempdir().unwrap();
    // 3 devices, stripe unit 2 pages, room for every page and thresholds no write reaches:
    // nothing but the sync writes back, so the device image shows exactly what it wrote.
    let cache = Cache::create(quiet_config(tmp.path(), 3)).unwrap();
    let f = cache.create_file("f").unwrap();
    let pages = 50u64;
    let mut oracle = vec![0u8; (pages * 4096) as usize];
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = f.clone();
            s.spawn(move || {
                // Each thread owns every 4th 1000-byte slot, so the final image is known.
                for slot in (t..(pages * 4)).step_by(4) {
                    f.write_all_at(&common::pattern(slot + 100, 1000), slot * 1024).unwrap();
                }
            });
        }
    });
    for slot in 0..pages * 4 {
        oracle[(slot * 1024) as usize..][..1000].copy_from_slice(&common::pattern(slot + 100, 1000));
    }
    assert_eq!(cache.stats().writeback_ios, 0);
    f.sync_data().unwrap();
    let image = device_image(tmp.path(), 3, 2, pages);
    let len = f.len() as usize;
    assert!(image[..len] == oracle[..len], "device contents differ from what was written");
}

#[test]
fn resize_shrinks_and_grows_a_set_associative_cache_and_keeps_data() {
    let tmp = tempfile::tempdir().unwrap();
    let config = common::config(tmp.path(), 2, 4096, 96).with_index(upcache::IndexKind::SetAssoc);
    let cache = Cache::create(config).unwrap();
    let full = 8 * 12 * 4096;
    let f = cache.create_file("f").unwrap();
    for p in 0..80u64 {
        f.write_all_at(&common::pattern(p, 4096), p * 4096).unwrap();
    }
    // Down to the least the cache runs on, 16 frames: two ways of each of the 8 sets (the
    // dirty pages of the ways given up are written back, clean ones evicted)...
    assert_eq!(cache.resize(1).unwrap(), 16 * 4096);
    assert!(cache.stats().writeback_bytes > 0);
    // ...and up to the budget again, or past it (clamped).
    assert_eq!(cache.resize(u64::MAX).unwrap(), full);
    let mut buf = vec![0u8; 4096];
    for p in 0..80u64 {
        f.read_exact_at(&mut buf, p * 4096).unwrap();
        assert!(buf == common::pattern(p, 4096), "page {p} changed across resizes");
    }
}

/// Every placement resizes online (SAFS's was the set-associative cache's only): down to
/// what is asked (16 frames at least) and back up to the budget, keeping every byte written.
#[test]
fn resize_shrinks_and_grows_every_placement_and_keeps_data() {
    for index in [upcache::IndexKind::Radix, upcache::IndexKind::Locked, upcache::IndexKind::Sharded] {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(common::config(tmp.path(), 1, 4096, 64).with_index(index)).unwrap();
        let f = cache.create_file("f").unwrap();
        for p in 0..48u64 {
            f.write_all_at(&common::pattern(p, 4096), p * 4096).unwrap();
        }
        assert_eq!(cache.resize(20 * 4096).unwrap(), 20 * 4096, "{index:?}");
        assert_eq!(cache.resize(1).unwrap(), 16 * 4096, "{index:?}: the least");
        assert_eq!(cache.resize(u64::MAX).unwrap(), 64 * 4096, "{index:?}: the budget");
        let mut buf = vec![0u8; 4096];
        for p in 0..48u64 {
            f.read_exact_at(&mut buf, p * 4096).unwrap();
            assert!(buf == common::pattern(p, 4096), "{index:?}: page {p} changed across resizes");
        }
    }
}

/// A multi-page read in a set-associative cache shrunk to one set: the batch must not claim
/// more frames than the set has and then wait on its own claims (found in review: it failed
/// with `CacheFull` on an idle cache).
#[test]
fn a_multi_page_read_after_shrinking_to_one_set() {
    let tmp = tempfile::tempdir().unwrap();
    let config =
        common::config(tmp.path(), 2, 4096, 1024).with_index(upcache::IndexKind::SetAssoc).with_readahead(0);
    let c = Cache::create(config).unwrap();
    let f = c.create_file("f").unwrap();
    let data = common::pattern(5, 64 * 4096);
    f.write_all_at(&data, 0).unwrap();
    c.sync().unwrap();
    c.resize(1).unwrap();
    let mut buf = vec![0u8; 32 * 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf[..] == data[..buf.len()]);
}

/// The metadata log can live in its own directory: a length synced there survives an unclean
/// stop (no checkpoint on close), the array reopens without naming the directory again, and
/// naming another one is refused rather than silently missing the log.
#[test]
fn the_metadata_log_lives_in_its_meta_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let meta = tmp.path().join("fast");
    let config = || common::config(tmp.path(), 2, 4096, 32);
    let cache = Cache::create(config().with_meta_dir(&meta)).unwrap();
    let f = cache.create_file("grows").unwrap();
    f.write_all_at(b"tail", 100_000).unwrap();
    f.sync_data().unwrap();
    let logs = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().contains(".metalog."))
            .count()
    };
    assert_eq!(logs(&meta), 1);
    assert_eq!(logs(&tmp.path().join("dev0")), 0);
    // An unclean stop: the catalog still says "grows" is empty; only the log has its length.
    std::mem::forget(f);
    std::mem::forget(cache);
    // (The leaked cache holds the array's lock; a second process would be needed to reopen
    // while it lives, so check the log's effect through a copy of the directories.)
    let copy = tmp.path().join("copy");
    for d in ["dev0", "dev1", "fast"] {
        std::fs::create_dir_all(copy.join(d)).unwrap();
        for e in std::fs::read_dir(tmp.path().join(d)).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "upcache.lock" {
                std::fs::copy(e.path(), copy.join(d).join(e.file_name())).unwrap();
            }
        }
    }
    // The catalog records the meta dir by its absolute path, which is the original one:
    // naming the copy's is refused as a mismatch.
    let refused = Cache::open(common::config(&copy, 2, 4096, 32).with_meta_dir(copy.join("fast")));
    assert_eq!(refused.err().map(|e| e.kind()), Some(upcache::ErrorKind::LayoutMismatch));
    // Left out, the recorded directory (the original, with the log) is used.
    let cache = Cache::open(common::config(&copy, 2, 4096, 32)).unwrap();
    assert_eq!(cache.file_len("grows").unwrap(), 100_004);
    let mut buf = [0u8; 4];
    cache.open_file("grows").unwrap().read_exact_at(&mut buf, 100_000).unwrap();
    assert_eq!(&buf, b"tail");
}

/// `Cache::sync` logs every changed length (with one commit) and makes the data durable:
/// after an unclean stop right after it, a copy of the directories reopens with all of it.
#[test]
fn cache_sync_persists_every_files_length() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 32)).unwrap();
    let files: Vec<_> = (0..5).map(|i| cache.create_file(&format!("f{i}")).unwrap()).collect();
    for (i, f) in files.iter().enumerate() {
        f.write_all_at(&common::pattern(i as u64, 1000 * (i + 1)), 7 * i as u64).unwrap();
    }
    cache.sync().unwrap();
    std::mem::forget(files);
    std::mem::forget(cache); // no close: no write-back, no checkpoint
    let copy = tmp.path().join("copy");
    for d in ["dev0", "dev1"] {
        std::fs::create_dir_all(copy.join(d)).unwrap();
        for e in std::fs::read_dir(tmp.path().join(d)).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "upcache.lock" {
                std::fs::copy(e.path(), copy.join(d).join(e.file_name())).unwrap();
            }
        }
    }
    let cache = Cache::open(common::config(&copy, 2, 4096, 32)).unwrap();
    for i in 0..5usize {
        let f = cache.open_file(&format!("f{i}")).unwrap();
        let want = common::pattern(i as u64, 1000 * (i + 1));
        assert_eq!(f.len(), (7 * i + want.len()) as u64, "f{i}");
        let mut buf = vec![0u8; want.len()];
        f.read_exact_at(&mut buf, 7 * i as u64).unwrap();
        assert!(buf == want, "f{i} data");
    }
}
