//! Multi-threaded stress: overlapping and disjoint writes of checksummed records, with
//! concurrent readers checking that no read ever sees a torn write.
//!
//! Records are 6000 bytes (not page-aligned, so most span two pages) and every write covers
//! whole records: one record, or two neighbours in one call. A reader that sees half of one
//! write and half of another finds a record whose checksum fails. The cache has 48 frames for
//! a ~900 KB file, so pages are evicted and written back constantly while this runs.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use upcache::{Cache, CleanFirst, File, IndexKind, PolicyKind};

const RECORD: usize = 6000;
const SHARED_SLOTS: u64 = 64;
const WRITERS: u64 = 8;
const READERS: u64 = 4;
const PRIVATE_SLOTS: u64 = 10; // per writer
const OPS_PER_WRITER: u64 = 1500;

fn hash(bytes: &[u8]) -> u64 {
    // FNV-1a: independent of the crate's own checksum code.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn record(writer: u64, seq: u64, slot: u64) -> Vec<u8> {
    let mut r = common::pattern(writer << 40 | seq << 8 | slot, RECORD);
    r[..8].copy_from_slice(&writer.to_le_bytes());
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    r[16..24].copy_from_slice(&slot.to_le_bytes());
    let h = hash(&r[..RECORD - 8]);
    r[RECORD - 8..].copy_from_slice(&h.to_le_bytes());
    r
}

/// Checks a record read from `slot`; an all-zero record is a slot never written.
fn check(r: &[u8], slot: u64) -> Option<(u64, u64)> {
    if r.iter().all(|&b| b == 0) {
        return None;
    }
    let h = u64::from_le_bytes(r[RECORD - 8..].try_into().unwrap());
    assert_eq!(hash(&r[..RECORD - 8]), h, "torn or corrupt record in slot {slot}");
    let writer = u64::from_le_bytes(r[..8].try_into().unwrap());
    let seq = u64::from_le_bytes(r[8..16].try_into().unwrap());
    let at = u64::from_le_bytes(r[16..24].try_into().unwrap());
    assert_eq!(at, slot, "record for slot {at} found in slot {slot}");
    assert!(r == record(writer, seq, slot), "record content in slot {slot} does not match its header");
    Some((writer, seq))
}

fn private_slot(writer: u64, i: u64) -> u64 {
    SHARED_SLOTS + writer * PRIVATE_SLOTS + i
}

fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

fn writer(f: File, w: u64) -> Vec<u64> {
    let mut next = rng(w + 1);
    let mut last_private = vec![0u64; PRIVATE_SLOTS as usize];
    for seq in 1..=OPS_PER_WRITER {
        match next(4) {
            0 => {
                // Two neighbouring shared records in one write.
                let slot = next(SHARED_SLOTS - 1);
                let mut buf = record(w, seq, slot);
                buf.extend(record(w, seq, slot + 1));
                f.write_all_at(&buf, slot * RECORD as u64).unwrap();
            }
            1 => {
                let i = next(PRIVATE_SLOTS);
                let slot = private_slot(w, i);
                f.write_all_at(&record(w, seq, slot), slot * RECORD as u64).unwrap();
                last_private[i as usize] = seq;
            }
            _ => {
                let slot = next(SHARED_SLOTS);
                f.write_all_at(&record(w, seq, slot), slot * RECORD as u64).unwrap();
            }
        }
        if seq % 500 == 0 {
            f.sync_data().unwrap();
        }
    }
    last_private
}

fn reader(f: File, r: u64, stop: &AtomicBool) -> u64 {
    let mut next = rng(1000 + r);
    let mut buf = vec![0u8; 2 * RECORD];
    let mut checked = 0;
    while !stop.load(Ordering::Relaxed) {
        let slot = next(SHARED_SLOTS - 1);
        let n = match f.read_at(&mut buf, slot * RECORD as u64) {
            Ok(n) => n,
            // A cache shrunk to two sets of 12 frames, with 12 threads pinning pages in them,
            // may find a page's set all pinned for a while: the miss gives up (`CacheFull`), and
            // a read, having changed nothing, can simply be tried again. (Writers are not
            // retried: a write that failed part-way would be a finding, not noise.)
            Err(e) if e.kind() == upcache::ErrorKind::CacheFull => continue,
            Err(e) => panic!("read of slot {slot}: {e}"),
        };
        for (i, chunk) in buf[..n].chunks_exact(RECORD).enumerate() {
            check(chunk, slot + i as u64);
            checked += 1;
        }
    }
    checked
}

#[test]
fn concurrent_writers_and_readers_never_tear_and_nothing_is_lost() {
    records_under_contention(IndexKind::Radix, false, PolicyKind::Clock, CleanFirst::Always);
}

/// The same under every other replacement policy, each with one of the clean-first rules.
#[test]
fn every_policy_never_tears_and_loses_nothing() {
    for (i, policy) in PolicyKind::ALL.into_iter().enumerate().skip(1) {
        records_under_contention(IndexKind::Radix, false, policy, CleanFirst::ALL[i % CleanFirst::ALL.len()]);
    }
}

/// The same with the set-associative cache: eviction inside 4 sets of 12 frames.
#[test]
fn set_associative_cache_never_tears_and_loses_nothing() {
    records_under_contention(IndexKind::SetAssoc, false, PolicyKind::Clock, CleanFirst::Always);
}

/// The same while two other threads shrink the set-associative cache (to two and three sets)
/// and grow it back over and over (merges evict and write back; splits move pages with their
/// frames; concurrent resizes interleave).
#[test]
fn set_associative_cache_resizes_under_load() {
    records_under_contention(IndexKind::SetAssoc, true, PolicyKind::Clock, CleanFirst::Always);
}

fn records_under_contention(index: IndexKind, resize: bool, policy: PolicyKind, clean_first: CleanFirst) {
    let tmp = tempfile::tempdir().unwrap();
    let config = || {
        common::config(tmp.path(), 4, 4096, 48)
            .with_flusher_threads(2)
            .with_dirty_background_ratio(0.2)
            .with_index(index)
            .with_policy(policy)
            .with_clean_first(clean_first)
    };
    let cache = Cache::create(config()).unwrap();
    let f = cache.create_file("records").unwrap();
    let total_slots = SHARED_SLOTS + WRITERS * PRIVATE_SLOTS;
    f.set_len(total_slots * RECORD as u64).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new((WRITERS + READERS) as usize));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (f, stop, start) = (f.clone(), stop.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                reader(f, r, &stop)
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (f, start) = (f.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                writer(f, w)
            })
        })
        .collect();
    let resizes = thread::scope(|s| {
        // Two resizers with different targets, so splits and merges interleave.
        let resizers: Vec<_> = (1..=2u64)
            .filter(|_| resize)
            .map(|r| {
                let (cache, stop) = (&cache, &stop);
                s.spawn(move || {
                    let full = 48 * 4096;
                    let mut done = 0u64;
                    // At least one round, however early the writers finish.
                    while done == 0 || !stop.load(Ordering::Relaxed) {
                        // Busy (pinned pages keep a merge from finishing) is a valid answer.
                        // Never under two sets: a single set of 12 frames can be all locked by a
                        // write-back run, and the writers would then rightly fail `CacheFull`.
                        for bytes in [full * (r + 1) / 4, full] {
                            match cache.resize(bytes) {
                                Ok(now) => assert!(now <= full),
                                Err(e) => assert_eq!(e.kind(), upcache::ErrorKind::Busy, "{e}"),
                            }
                        }
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let last: Vec<Vec<u64>> = writers.into_iter().map(|t| t.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let rounds: Vec<u64> = resizers.into_iter().map(|r| r.join().unwrap()).collect();
        (last, rounds)
    });
    let (last, rounds) = resizes;
    assert!(rounds.iter().all(|&n| n > 0));
    let checked: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(checked > 0);

    let verify = |f: &File| {
        let mut buf = vec![0u8; RECORD];
        for slot in 0..SHARED_SLOTS {
            f.read_exact_at(&mut buf, slot * RECORD as u64).unwrap();
            check(&buf, slot).expect("every shared slot was written at least once");
        }
        for w in 0..WRITERS {
            for i in 0..PRIVATE_SLOTS {
                let slot = private_slot(w, i);
                f.read_exact_at(&mut buf, slot * RECORD as u64).unwrap();
                let want = last[w as usize][i as usize];
                match check(&buf, slot) {
                    None => assert_eq!(want, 0, "private slot {slot} lost its write"),
                    Some((ww, seq)) => assert_eq!((ww, seq), (w, want), "private slot {slot}"),
                }
            }
        }
    };
    verify(&f);
    let stats = cache.stats();
    assert!(stats.evictions > 0 && stats.writeback_bytes > 0, "{stats:?}");
    drop(f);
    drop(cache);
    let cache = Cache::open(config()).unwrap();
    let f = cache.open_file("records").unwrap();
    verify(&f);
}

/// Threads extend one file together, each writing its own 512-byte slots, so every page is
/// written by several threads at once past the current end of file while a tiny cache evicts
/// and writes pages back. No slot may be lost or zeroed.
#[test]
fn concurrent_extending_writes_to_shared_pages_are_not_lost() {
    const THREADS: u64 = 8;
    const SLOTS: u64 = 400;
    let tmp = tempfile::tempdir().unwrap();
    let cache =
        Cache::create(common::config(tmp.path(), 2, 4096, 16).with_dirty_background_ratio(0.1)).unwrap();
    let f = cache.create_file("append").unwrap();
    let start = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, start) = (f.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                for i in 0..SLOTS {
                    let slot = i * THREADS + t;
                    f.write_all_at(&common::pattern(slot + 1, 500), slot * 512).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0u8; 512];
    for slot in 0..SLOTS * THREADS {
        f.read_exact_at(&mut buf[..500], slot * 512).unwrap();
        assert!(buf[..500] == common::pattern(slot + 1, 500)[..], "slot {slot} lost");
    }
}

/// One thread shrinks and re-extends the tail of a file (at an unaligned length) while others
/// write below it through a tiny cache, so the tail's pages are evicted, written back and
/// dropped concurrently. After every shrink-and-extend the tail must read as zeros, and the
/// writers' bytes below must all survive.
#[test]
fn shrink_and_extend_race_with_writers_and_write_back() {
    const LOW: u64 = 10 * 4096 + 1234; // writers stay below, the tail thread above
    const HIGH: u64 = 30 * 4096 + 77;
    let tmp = tempfile::tempdir().unwrap();
    let cache =
        Cache::create(common::config(tmp.path(), 3, 4096, 16).with_dirty_background_ratio(0.1)).unwrap();
    let f = cache.create_file("tail").unwrap();
    f.set_len(HIGH).unwrap();
    let start = Arc::new(Barrier::new(4));
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (f, start) = (f.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                for round in 0..200u64 {
                    // Slots of 300 bytes, thread t owns slots t, t+3, ...; all below LOW.
                    let slot = (round * 3 + t) % (LOW / 300);
                    f.write_all_at(&common::pattern(slot, 300), slot * 300).unwrap();
                }
            })
        })
        .collect();
    let tail = {
        let (f, start) = (f.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            let mut buf = vec![0u8; (HIGH - LOW) as usize];
            for round in 0..100u64 {
                // Dirty the tail, then cut it off and bring it back: it must come back zero.
                f.write_all_at(&common::pattern(round + 1000, (HIGH - LOW) as usize), LOW).unwrap();
                f.set_len(LOW).unwrap();
                f.set_len(HIGH).unwrap();
                f.read_exact_at(&mut buf, LOW).unwrap();
                assert!(buf.iter().all(|&b| b == 0), "round {round}: bytes past a shrink came back");
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    tail.join().unwrap();
    let mut buf = vec![0u8; 300];
    for slot in 0..LOW / 300 {
        f.read_exact_at(&mut buf, slot * 300).unwrap();
        assert!(buf == common::pattern(slot, 300), "slot {slot} lost");
    }
}

/// Lock-free reads against multi-page writes: the whole record stays resident, so readers
/// take the lock-free path whenever no write is in flight as they start, and writers keep
/// rewriting the record across four pages. A reader whose copy overlapped a write must
/// notice (the file's write sequence moved) and retry; one that did not would mix two
/// versions and fail the checksum.
#[test]
fn lock_free_reads_never_see_part_of_a_multi_page_write() {
    const LEN: usize = 3 * 4096 + 1000; // at offset 1000: pages 0 to 3
    const WRITES: u64 = 20_000;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 64)).unwrap();
    let f = cache.create_file("hot").unwrap();
    let version = |w: u64, seq: u64| {
        let mut r = common::pattern(w << 32 | seq, LEN);
        let h = hash(&r[..LEN - 8]);
        r[LEN - 8..].copy_from_slice(&h.to_le_bytes());
        r
    };
    f.write_all_at(&version(9, 0), 1000).unwrap();
    let stop = AtomicBool::new(false);
    let lock_free_before = cache.stats().lock_free_hits;
    thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut buf = vec![0u8; LEN];
                    let mut reads = 0u64;
                    // Keep reading after the writers stop, so the lock-free path surely runs.
                    let mut after = 0;
                    while after < 1000 {
                        if stop.load(Ordering::Relaxed) {
                            after += 1;
                        }
                        f.read_exact_at(&mut buf, 1000).unwrap();
                        let h = u64::from_le_bytes(buf[LEN - 8..].try_into().unwrap());
                        assert_eq!(hash(&buf[..LEN - 8]), h, "torn read after {reads} reads");
                        reads += 1;
                    }
                })
            })
            .collect();
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (f, version) = (&f, &version);
                s.spawn(move || {
                    for seq in 0..WRITES / 2 {
                        f.write_all_at(&version(w, seq), 1000).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    });
    assert!(cache.stats().lock_free_hits > lock_free_before, "the lock-free path never ran");
}

/// Lock-free reads against eviction: no writes at all, but a cache of 24 frames under a
/// 256-page file, so frames are taken from pages while readers copy from them. Every page
/// carries its own number; a reader that kept a copy from a frame that moved to another page
/// would see the wrong number or a broken checksum.
#[test]
fn lock_free_reads_never_return_a_frame_that_moved() {
    const PAGES: u64 = 256;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 24)).unwrap();
    let f = cache.create_file("pages").unwrap();
    let page = |p: u64| {
        let mut r = common::pattern(p, 4096);
        r[..8].copy_from_slice(&p.to_le_bytes());
        let h = hash(&r[..4088]);
        r[4088..].copy_from_slice(&h.to_le_bytes());
        r
    };
    for p in 0..PAGES {
        f.write_all_at(&page(p), p * 4096).unwrap();
    }
    f.sync_data().unwrap();
    let before = cache.stats().lock_free_hits;
    thread::scope(|s| {
        for r in 0..4 {
            let f = &f;
            s.spawn(move || {
                let mut next = rng(77 + r);
                let mut buf = vec![0u8; 4096];
                for _ in 0..20_000 {
                    // Mostly a small hot set (so lock-free hits happen), sometimes a cold page
                    // (so frames keep moving).
                    let p = if next(4) == 0 { next(PAGES) } else { next(16) };
                    f.read_exact_at(&mut buf, p * 4096).unwrap();
                    assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), p, "wrong page");
                    assert_eq!(hash(&buf[..4088]), u64::from_le_bytes(buf[4088..].try_into().unwrap()));
                }
            });
        }
    });
    assert!(cache.stats().lock_free_hits > before, "the lock-free path never ran");
}
