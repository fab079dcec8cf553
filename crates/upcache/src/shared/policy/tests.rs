//! The shared cache's policies against the private engine's (`crate::policy`), page by page.

use std::sync::atomic::Ordering;

use super::super::tests::{small, stress_own_pages};
use super::super::{SharedCache, SharedConfig, SharedFile};
use crate::policy::simulate::Simulator;
use crate::policy::{CleanFirst, PolicyKind};

/// 16 frames, `policy`; no readahead and no streams, so that every read of a cached page is a
/// reference and nothing else is.
fn sixteen(policy: PolicyKind) -> SharedCache {
    let config = SharedConfig {
        memory: 16 * 4096,
        readahead: 0,
        streams: false,
        dirty_ratios: (0.99, 1.0),
        policy,
        clean_first: CleanFirst::Always,
        ..small()
    };
    SharedCache::create(&config).unwrap()
}

/// A file of `pages` pages, each filled with its number + `base`.
fn file_of(dir: &std::path::Path, name: &str, pages: u64, base: u8) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, (0..pages * 4096).map(|i| (i >> 12) as u8 + base).collect::<Vec<u8>>()).unwrap();
    p
}

/// Reads page `p` of `f` (bytes checked against `base`); whether it was a hit.
fn read(cache: &SharedCache, f: &SharedFile, p: u64, base: u8) -> bool {
    let misses = cache.status().stats.misses;
    let mut page = vec![0u8; 4096];
    f.read_at(&mut page, p * 4096).unwrap();
    assert_eq!(page, vec![p as u8 + base; 4096], "page {p}");
    cache.status().stats.misses == misses
}

/// Hits and misses of a skewed random stream of 3000 reads of 64 pages (most of them of 12).
fn stream() -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..3000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 10 < 7 {
                (x >> 8) % 12
            } else {
                (x >> 8) % 64
            }
        })
        .collect()
}

/// SIEVE and S3-FIFO in the segment hit and miss where the private engine's policies do, read
/// for read (the private ones driven by the policy simulator over 16 frames); CLOCK, on the
/// same reads, does not, so the policy given is the one that ran.
#[test]
fn sieve_and_s3fifo_evict_as_the_private_engines_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(dir.path(), "f", 64, 0);
    let keys = stream();
    let hits = |policy| -> Vec<bool> {
        let cache = sixteen(policy);
        let f = cache.open_path(&path, false).unwrap();
        let got = keys.iter().map(|&p| read(&cache, &f, p, 0)).collect();
        cache.check_index().unwrap();
        got
    };
    let clock = hits(PolicyKind::Clock);
    for kind in [PolicyKind::Sieve, PolicyKind::S3Fifo] {
        let mut sim = Simulator::new(kind, 16).unwrap();
        let want: Vec<bool> = keys.iter().map(|&p| sim.access(p).unwrap()).collect();
        let got = hits(kind);
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        assert_eq!(
            first,
            None,
            "{kind:?}: first differs at read {first:?} of page {:?}",
            first.map(|i| keys[i])
        );
        assert_ne!(got, clock, "{kind:?} hit where clock hits");
    }
}

/// Sampled LRU evicts the page unused longest, wherever its frame: pages that came into
/// emptied frames out of frame order (the free stack's last in first) go oldest first, where
/// CLOCK's hand takes the first unreferenced frame it meets.
#[test]
fn lru_evicts_the_page_unused_longest_where_clocks_hand_takes_the_first_unreferenced() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) =
        (file_of(dir.path(), "a", 16, 0), file_of(dir.path(), "b", 8, 100), file_of(dir.path(), "c", 1, 200));
    // (first of b's pages kept, last of b's pages kept) after the miss.
    let kept = |policy| {
        let cache = sixteen(policy);
        let (fa, fb, fc) = (
            cache.open_path(&a, false).unwrap(),
            cache.open_path(&b, false).unwrap(),
            cache.open_path(&c, false).unwrap(),
        );
        // a's 16 pages in frames 0..16; its last 8 dropped, their frames listed 8..16.
        (0..16).for_each(|p| assert!(!read(&cache, &fa, p, 0)));
        fa.evict(8 * 4096, 8 * 4096).unwrap();
        // b's pages 0..8 into frames 15 down to 8; then a's first 8 read again.
        (0..8).for_each(|p| assert!(!read(&cache, &fb, p, 100)));
        (0..8).for_each(|p| assert!(read(&cache, &fa, p, 0)));
        assert!(!read(&cache, &fc, 0, 200));
        (read(&cache, &fb, 0, 100), read(&cache, &fb, 7, 100))
    };
    assert_eq!(kept(PolicyKind::Lru), (false, true), "lru: b's first page, in frame 15, went");
    assert_eq!(kept(PolicyKind::Clock), (true, false), "clock: frame 8, b's last page, went");
}

/// LFU-DA keeps a page read often through a scan of two and a half times the cache, where
/// LRU lets it go; GClock's counts keep it too, CLOCK's bit does not.
#[test]
fn lfu_keeps_a_page_read_often_through_a_scan_that_lru_evicts() {
    let dir = tempfile::tempdir().unwrap();
    let (hot, scan) = (file_of(dir.path(), "hot", 1, 1), file_of(dir.path(), "scan", 40, 2));
    let kept = |policy| {
        let cache = sixteen(policy);
        let (h, s) = (cache.open_path(&hot, false).unwrap(), cache.open_path(&scan, false).unwrap());
        (0..5).for_each(|_| {
            read(&cache, &h, 0, 1);
        });
        (0..40).for_each(|p| assert!(!read(&cache, &s, p, 2)));
        read(&cache, &h, 0, 1)
    };
    assert!(kept(PolicyKind::Lfu), "lfu evicted the page read five times");
    assert!(!kept(PolicyKind::Lru), "lru kept the page read five times through the scan");
}

/// A process killed holding the queues' lock leaves them half-changed: the next miss takes the
/// lock over and links every cached page again, once, and the cache goes on as before.
#[test]
fn a_dead_holder_of_the_queues_leaves_every_cached_page_listed_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(dir.path(), "f", 64, 0);
    for kind in [PolicyKind::Sieve, PolicyKind::S3Fifo] {
        let cache = sixteen(kind);
        let f = cache.open_path(&path, false).unwrap();
        (0..20).for_each(|p| {
            read(&cache, &f, p, 0);
        });
        let inner = &cache.inner;
        let state = &inner.view.header().policy;
        // A client that never joined (so not alive) holds the lock, having cut a link and
        // left a length wrong.
        let dead = inner.me + 7;
        assert!(state.lock.try_lock(dead));
        let oldest = state.queues[0].oldest.load(Ordering::SeqCst);
        inner.view.policy_frames()[oldest as usize - 1].newer.store(0, Ordering::SeqCst);
        state.queues[0].len.store(1000, Ordering::SeqCst);
        let repairs = cache.status().repairs;
        (20..40).for_each(|p| assert!(!read(&cache, &f, p, 0)));
        assert_eq!(cache.status().repairs, repairs + 1, "{kind:?}");
        assert_eq!(state.lock.holder(), None);
        // Each cached frame once in one queue; the queues' links agree both ways.
        let frames = inner.view.policy_frames();
        let mut seen = vec![0; frames.len()];
        for (q, ends) in state.queues.iter().enumerate() {
            let (mut at, mut prev, mut n) = (ends.oldest.load(Ordering::SeqCst), 0, 0);
            while at != 0 {
                let p = &frames[at as usize - 1];
                assert_eq!(p.older.load(Ordering::SeqCst), prev, "{kind:?}");
                assert_eq!(p.queue.load(Ordering::SeqCst), q as u32 + 1, "{kind:?}");
                seen[at as usize - 1] += 1;
                (prev, at, n) = (at, p.newer.load(Ordering::SeqCst), n + 1);
            }
            assert_eq!(ends.newest.load(Ordering::SeqCst), prev, "{kind:?}");
            assert_eq!(ends.len.load(Ordering::SeqCst), n, "{kind:?}");
        }
        for (i, m) in inner.view.frames().iter().enumerate() {
            assert_eq!(seen[i], u32::from(m.key() != 0), "{kind:?}: frame {i}");
        }
        (0..64).for_each(|p| {
            read(&cache, &f, p, 0);
        });
        cache.check_index().unwrap();
    }
}

/// Four threads read and write a file four times the cache under each policy: every read
/// sees a page whole (each written with one byte throughout), every page ends as its last
/// write left it, and the queues' lock is free at the end.
#[test]
fn threads_reading_and_writing_through_each_policy_lose_and_tear_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    for kind in [PolicyKind::Lru, PolicyKind::Lfu, PolicyKind::Sieve, PolicyKind::S3Fifo] {
        let cache = sixteen(kind);
        stress_own_pages(&cache, &path, 64, 4, Some(1500), |_| {});
        assert_eq!(cache.inner.view.header().policy.lock.holder(), None, "{kind:?}");
        cache.check_index().unwrap();
    }
}
