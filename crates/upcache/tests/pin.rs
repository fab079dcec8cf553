//! The zero-copy API: pinned pages read and written in place.

mod common;

use upcache::{Cache, ErrorKind};

#[test]
fn pinned_pages_read_and_write_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let config = || common::config(tmp.path(), 2, 4096, 32);
    let data = common::pattern(1, 3 * 4096 + 100);
    {
        let cache = Cache::create(config()).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&data, 0).unwrap();
        {
            let p = f.pin(4096 + 17).unwrap();
            assert_eq!(p.offset(), 4096);
            assert!(p[..] == data[4096..8192]);
        }
        // The last page is partial: only the bytes inside the file.
        assert_eq!(f.pin(3 * 4096).unwrap().len(), 100);
        {
            let mut m = f.pin_mut(2 * 4096 + 5).unwrap();
            assert_eq!(m.len(), 4096);
            m[..4].copy_from_slice(b"upca");
        }
        let mut buf = [0u8; 4];
        f.read_exact_at(&mut buf, 2 * 4096).unwrap();
        assert_eq!(&buf, b"upca");
        // A temporary guard, as in the README: written and committed in one statement.
        f.pin_mut(3 * 4096).unwrap()[0] = b'!';
        f.read_exact_at(&mut buf[..1], 3 * 4096).unwrap();
        assert_eq!(buf[0], b'!');
        f.pin_mut(3 * 4096).unwrap()[0] = data[3 * 4096];
        assert!(cache.stats().dirty_pages > 0);
        f.sync_all().unwrap();
    }
    let cache = Cache::open(config()).unwrap();
    let f = cache.open_file("f").unwrap();
    let p = f.pin(2 * 4096).unwrap();
    assert_eq!(&p[..4], b"upca");
    assert!(p[4..] == data[2 * 4096 + 4..3 * 4096]);
}

#[test]
fn pinning_at_or_past_the_end_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 1, 4096, 16)).unwrap();
    let f = cache.create_file("f").unwrap();
    assert_eq!(f.pin(0).unwrap_err().kind(), ErrorKind::InvalidInput);
    f.write_all_at(b"x", 0).unwrap();
    assert_eq!(f.pin_mut(1).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(f.pin(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(&f.pin(0).unwrap()[..], b"x");
}

/// A pinned page stays put while other threads stream through a cache far smaller than their
/// data: its frame is never evicted or reused, so its bytes never change under the guard.
#[test]
fn eviction_never_takes_a_pinned_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16)).unwrap();
    let f = cache.create_file("f").unwrap();
    for p in 0..200u64 {
        f.write_all_at(&common::pattern(p, 4096), p * 4096).unwrap();
    }
    let held = [f.pin(0).unwrap(), f.pin(100 * 4096).unwrap()];
    let before = cache.stats().evictions;
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let f = &f;
            s.spawn(move || {
                let mut buf = vec![0u8; 4096];
                for i in 0..600u64 {
                    let p = 1 + (i * 7 + t * 13) % 199;
                    if p == 100 {
                        continue;
                    }
                    f.read_exact_at(&mut buf, p * 4096).unwrap();
                    assert!(buf == common::pattern(p, 4096), "page {p}");
                }
            });
        }
    });
    assert!(cache.stats().evictions > before + 100, "the other pages did not cycle through the cache");
    assert!(held[0][..] == common::pattern(0, 4096)[..]);
    assert!(held[1][..] == common::pattern(100, 4096)[..]);
}

/// Repeat pins are served by the pinning thread's hot index, and a hint never yields a
/// frame that no longer holds the page: one thread pins a few pages over and over and checks
/// that each holds its own page number and a version that never goes back, while a writer
/// bumps the versions and a third thread streams other pages through the small cache,
/// evicting the pinned pages between pins so that their frames are reused for other pages.
#[test]
fn the_hot_index_serves_repeat_pins_and_never_a_stale_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16).with_readahead(0)).unwrap();
    let f = cache.create_file("f").unwrap();
    const HOT: u64 = 8;
    const PAGES: u64 = 64;
    // Page `p` at version `v`: its number in the first 8 bytes, then `v` everywhere.
    let page_at = |p: u64, v: u8| {
        let mut b = vec![v; 4096];
        b[..8].copy_from_slice(&p.to_le_bytes());
        b
    };
    for p in 0..PAGES {
        f.write_all_at(&page_at(p, 0), p * 4096).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = f.clone();
        s.spawn(move || {
            for v in 1..=255u8 {
                for p in 0..HOT {
                    w.write_all_at(&page_at(p, v), p * 4096).unwrap();
                }
            }
        });
        let e = f.clone();
        let stop = &stop;
        s.spawn(move || {
            let mut buf = vec![0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for p in HOT..PAGES {
                    e.read_exact_at(&mut buf, p * 4096).unwrap();
                }
            }
        });
        // Stops the streaming thread however the pins below end (a failed assert too).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let _stop = Stop(stop);
        let mut seen = [0u8; HOT as usize];
        for _ in 0..3000 {
            for p in 0..HOT {
                let page = f.pin(p * 4096).unwrap();
                assert_eq!(
                    u64::from_le_bytes(page[..8].try_into().unwrap()),
                    p,
                    "pinned another page's frame"
                );
                let v = page[8];
                assert!(page[8..].iter().all(|&b| b == v), "page {p} torn");
                assert!(v >= seen[p as usize], "page {p} went back from version {} to {v}", seen[p as usize]);
                seen[p as usize] = v;
            }
        }
    });
    let s = cache.stats();
    assert!(s.hot_hits > 0 && s.evictions > 0, "{s:?}");
    assert_eq!(cache.pinned_frames(), 0);
}

/// Pins against writers of the same pages (the range lock's reader fast path and its queue):
/// a guard's bytes are one whole write and never change while it is held, and a thread that
/// holds a pin and writes another page does not wait for itself. (That page is its own: a
/// two-page write over both, or another thread pinning it and writing ours, would be the
/// hazards `api/pin.rs` describes.)
#[test]
fn a_pinned_page_never_changes_under_its_guard() {
    const PAGES: u64 = 4;
    const ROUNDS: u64 = 2000;
    let fnv = |b: &[u8]| {
        b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
    };
    // A page's worth of bytes that carries its own checksum.
    let version = |v: u64| {
        let mut p = common::pattern(v, 4096);
        let h = fnv(&p[..4088]);
        p[4088..].copy_from_slice(&h.to_le_bytes());
        p
    };
    let whole = |p: &[u8]| fnv(&p[..4088]) == u64::from_le_bytes(p[4088..].try_into().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 1, 4096, 64)).unwrap();
    let f = cache.create_file("f").unwrap();
    // Pages 0..PAGES are shared; PAGES + t is reader t's own.
    for p in 0..PAGES + 2 {
        f.write_all_at(&version(p), p * 4096).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (f, version) = (&f, &version);
            // Writers: one page, or two neighbours in one call (a range over two pages).
            s.spawn(move || {
                for i in 0..ROUNDS {
                    let p = (i * 7 + t) % PAGES;
                    if i % 3 == 0 && p + 1 < PAGES {
                        let mut two = version(t << 32 | i);
                        two.extend(version(t << 32 | i | 1 << 31));
                        f.write_all_at(&two, p * 4096).unwrap();
                    } else {
                        f.write_all_at(&version(t << 32 | i), p * 4096).unwrap();
                    }
                }
            });
            // Readers: hold a pin, check it, write another page meanwhile now and then, and
            // check again that nothing moved.
            s.spawn(move || {
                for i in 0..ROUNDS {
                    let p = (i * 5 + t) % PAGES;
                    let g = f.pin(p * 4096).unwrap();
                    let before = g.to_vec();
                    assert!(whole(&before), "a pinned page holds part of a write");
                    if i % 4 == 0 {
                        f.write_all_at(&version(1 << 40 | t << 32 | i), (PAGES + t) * 4096).unwrap();
                    }
                    assert!(g[..] == before[..], "a pinned page changed under its guard");
                }
            });
        }
    });
    assert_eq!(cache.pinned_frames(), 0);
}

/// Pins (a hit takes no range lock: a reader count in the frame, validated against the file's
/// write sequence) against a thread that shrinks the file to a random length and writes it
/// whole again: while a guard lives its page never changes and the file never ends inside
/// it, so a guard never shows bytes past the end; what it shows is one write's bytes, cut by
/// at most one shrink (a run of one value, then zeros).
#[test]
fn a_pinned_page_holds_off_shrinks_and_shows_nothing_past_the_end() {
    const PAGES: u64 = 4;
    const ROUNDS: u64 = 3000;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 1, 4096, 64)).unwrap();
    let f = cache.create_file("f").unwrap();
    let size = PAGES * 4096;
    f.write_all_at(&vec![1u8; size as usize], 0).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (f, done) = (&f, &done);
        s.spawn(move || {
            for i in 0..ROUNDS {
                let cut = common::pattern(i, 8).iter().fold(0u64, |a, &b| a << 8 | b as u64) % size;
                f.set_len(cut).unwrap();
                f.write_all_at(&vec![(i % 250 + 2) as u8; size as usize], 0).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        s.spawn(move || {
            let (mut pinned, mut i) = (0u64, 0u64);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                i += 1;
                let at = (i * 4099) % size;
                let g = match f.pin(at) {
                    Ok(g) => g,
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
                        continue;
                    }
                };
                pinned += 1;
                let before = g.to_vec();
                let v = before[0];
                let run = before.iter().position(|&b| b != v).unwrap_or(before.len());
                assert!(
                    v != 0 && before[run..].iter().all(|&b| b == 0),
                    "not one write cut once: {before:?}"
                );
                for _ in 0..3 {
                    let end = g.offset() + g.len() as u64;
                    assert!(f.len() >= end, "the file ends at {} inside a guard up to {end}", f.len());
                    std::thread::yield_now();
                }
                assert!(g[..] == before[..], "a pinned page changed under its guard");
            }
            assert!(pinned > 0);
        });
    });
    assert_eq!(cache.pinned_frames(), 0);
}

/// Pins racing `remove_file`: each pin either borrows the page whole and steady, or fails with
/// NotFound; once one has failed so, no later pin succeeds; no frame stays pinned.
#[test]
fn pins_racing_a_removal_end_in_not_found_and_leave_no_pins() {
    for round in 0..20u64 {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(common::config(tmp.path(), 1, 4096, 64)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&vec![7u8; 8 * 4096], 0).unwrap();
        std::thread::scope(|s| {
            let f = &f;
            s.spawn(move || {
                let mut gone = false;
                for i in 0..2000u64 {
                    match f.pin(((i + round) % 8) * 4096) {
                        Ok(g) => {
                            assert!(!gone, "a pin succeeded after one found the file removed");
                            assert!(g.iter().all(|&b| b == 7));
                            std::thread::yield_now();
                            assert!(g.iter().all(|&b| b == 7), "a pinned page changed");
                        }
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
                            gone = true;
                        }
                    }
                }
            });
            cache.remove_file("f").unwrap();
        });
        assert_eq!(f.pin(0).unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(cache.pinned_frames(), 0);
    }
}
