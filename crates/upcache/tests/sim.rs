//! Caches on simulated SSDs (`io::device::sim`): data through a mixed array of simulated and
//! file devices, power cuts that must keep every synced byte, injected faults that give clean
//! errors and keep written data, and the GC signal reaching the GC-aware rule.

mod common;

use std::sync::Arc;
use std::time::Duration;
use upcache::{Cache, CleanFirst, Config, ErrorKind, PolicyKind};
use upcache::{Fault, FaultOp, SimConfig, SimDevice};

/// Fast simulated devices (no waiting), with a volatile cache of `volatile` bytes.
fn fast(volatile: u64, seed: u64) -> Arc<SimDevice> {
    SimDevice::new(SimConfig {
        read_latency: Duration::ZERO,
        write_latency: Duration::ZERO,
        bandwidth: u64::MAX / 2,
        gc_every: 0,
        volatile_bytes: volatile,
        jitter_pct: 0,
        seed,
        ..SimConfig::default()
    })
    .unwrap()
}

/// A config of 4 devices, the first `sims.len()` simulated.
fn config(root: &std::path::Path, sims: &[Arc<SimDevice>], frames: usize) -> Config {
    let mut c = common::config(root, 4, 4096, frames).with_flusher_threads(1);
    for (i, s) in sims.iter().enumerate() {
        c = c.with_sim_device(i, s.clone());
    }
    c
}

#[test]
fn a_mixed_array_reads_back_what_was_written_and_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let sims = [fast(0, 1), fast(0, 2)];
    let data = common::pattern(3, 3 << 20);
    {
        let cache = Cache::create(config(tmp.path(), &sims, 64)).unwrap();
        let f = cache.create_file("a").unwrap();
        f.write_all_at(&data, 0).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
    }
    let cache = Cache::open(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.open_file("a").unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data);
    let st = sims[0].stats();
    assert!(st.writes > 0 && st.reads > 0 && st.flushes > 0, "{st:?}");
}

#[test]
fn power_cuts_keep_every_synced_byte() {
    for round in 0..5u64 {
        let tmp = tempfile::tempdir().unwrap();
        // Every device simulated, with a volatile cache larger than what goes unsynced.
        let sims: Vec<_> = (0..4).map(|i| fast(64 << 20, round * 8 + i)).collect();
        let synced = common::pattern(round, 1 << 20);
        let rewrite = common::pattern(round + 100, 4096 * (round as usize + 1));
        {
            let cache = Cache::create(config(tmp.path(), &sims, 16)).unwrap();
            let f = cache.create_file("f").unwrap();
            f.write_all_at(&synced, 0).unwrap();
            f.sync_data().unwrap();
            // Overwrite the first pages, then stream 4 MiB past them through 16 frames: the
            // rewritten pages are evicted, so written back to the devices, never flushed.
            f.write_all_at(&rewrite, 0).unwrap();
            f.write_all_at(&common::pattern(round + 200, 4 << 20), 1 << 20).unwrap();
            let lost: usize = sims.iter().map(|s| s.power_cut().unwrap()).sum();
            assert!(lost > 0, "eviction wrote back unsynced pages, which the cut must undo");
            // The process "dies" with the power: the cache's own shutdown writes fail.
        }
        for s in &sims {
            s.power_on();
        }
        let cache = Cache::open(config(tmp.path(), &sims, 16)).unwrap();
        let f = cache.open_file("f").unwrap();
        let mut back = vec![0u8; synced.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        // The rewrite reached the devices but was never flushed: the cut restored the synced
        // bytes under it (a cut that kept unflushed writes, or a sync that flushed nothing,
        // fails this).
        assert!(back == synced, "round {round}: synced data changed by a power cut");
        assert_eq!(cache.file_len("f").unwrap(), 1 << 20, "the unsynced length was not logged");
    }
}

#[test]
fn injected_faults_are_clean_errors_and_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let sims = [fast(0, 7), fast(0, 8), fast(0, 9), fast(0, 10)];
    let cache = Cache::create(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.create_file("f").unwrap();
    let data = common::pattern(5, 256 << 10);
    f.write_all_at(&data, 0).unwrap();
    // Write-back fails on every device: sync reports it, and the pages stay dirty.
    for s in &sims {
        s.inject(Fault::EioAfter { op: FaultOp::Write, n: 1 });
    }
    let e = f.sync_data().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "cached data survives the failed write-back");
    // Out of space, then a failing flush: clean errors too.
    for s in &sims {
        s.clear_faults();
        s.inject(Fault::NoSpace { capacity: 4096 });
    }
    assert!(f.sync_data().is_err());
    for s in &sims {
        s.clear_faults();
        s.inject(Fault::EioAfter { op: FaultOp::Flush, n: 1 });
    }
    assert!(f.sync_data().is_err());
    // Faults gone: the same pages go out, and a reopened cache reads them from the devices.
    for s in &sims {
        s.clear_faults();
    }
    f.sync_data().unwrap();
    drop(f);
    drop(cache);
    let cache = Cache::open(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.open_file("f").unwrap();
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data);
    // A read fault on a page not cached is a clean error; the rest of the file still reads.
    sims[0].inject(Fault::EioAt { op: FaultOp::Read, start: 0, end: 1 << 30 });
    let fresh = Cache::open(config(tmp.path(), &sims, 64));
    assert!(fresh.is_err(), "one cache per array at a time");
    drop(f);
    drop(cache);
    let cache = Cache::open(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.open_file("f").unwrap();
    let mut page = vec![0u8; 4096];
    assert_eq!(f.read_exact_at(&mut page, 0).unwrap_err().kind(), ErrorKind::Io);
    sims[0].clear_faults();
    f.read_exact_at(&mut page, 0).unwrap();
    assert!(page[..] == data[..4096]);
}

/// GC-aware eviction with the device's GC flag hidden from the policy (it infers collection
/// from write-back latency, `io/device/gc_watch.rs`; the flag is only this test's oracle). A
/// sync's write-back meets an episode of 2 s (the write before started it) and stays in
/// flight: the cache takes the device to be collecting, and reads that miss meanwhile take
/// clean victims, never writing back one of the other dirty pages, which would stall behind
/// the episode too. With the plain rule they do (checked, so that the first half proves
/// something).
#[test]
fn gc_aware_eviction_spares_dirty_pages_of_a_collecting_device() {
    for rule in [CleanFirst::WhileGc, CleanFirst::Never] {
        let tmp = tempfile::tempdir().unwrap();
        // One device whose writes start an episode of 2 s once 16 KiB were written since the
        // last (writes wait for its end; reads do not).
        let gc = SimDevice::new(SimConfig {
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            gc_every: 4 * 4096,
            gc_time: Duration::from_secs(2),
            jitter_pct: 0,
            ..SimConfig::default()
        })
        .unwrap();
        let c = Config::new(common::dirs(tmp.path(), 1), 16 * 4096)
            .with_policy(PolicyKind::Clock)
            .with_clean_first(rule)
            .with_flusher_threads(1)
            .with_readahead(0)
            .with_dirty_background_ratio(0.9)
            .with_dirty_foreground_ratio(0.95)
            .with_sim_device(0, gc.clone());
        let cache = Cache::create(c).unwrap();
        let f = cache.create_file("f").unwrap();
        f.set_len(64 * 4096).unwrap();
        // Four ordinary write-backs, the device's baseline; the fourth starts an episode.
        for p in 0..4u64 {
            f.write_all_at(&[p as u8; 4096], p * 4096).unwrap();
            f.sync_data().unwrap();
        }
        assert!(gc.collecting());
        // Pages 4..7 dirty; the sync's write-back of them waits for the episode's end.
        for p in 4..7u64 {
            f.write_all_at(&[p as u8; 4096], p * 4096).unwrap();
        }
        std::thread::scope(|s| {
            let sync = s.spawn(|| f.sync_data());
            // The cache's view: wait (bounded) until it sees the write-back stalled.
            while rule == CleanFirst::WhileGc && !cache.devices_collecting()[0] {
                assert!(gc.collecting(), "the episode ended before the cache took it for one");
                std::thread::yield_now();
            }
            // Other pages dirtied meanwhile, then misses on every other page, four times.
            for p in 7..10u64 {
                f.write_all_at(&[p as u8; 4096], p * 4096).unwrap();
            }
            let writes = gc.stats().writes;
            let mut buf = vec![0u8; 4096];
            let mut spared = true;
            'reads: for _ in 0..4 {
                for p in 10..64u64 {
                    f.read_exact_at(&mut buf, p * 4096).unwrap();
                    if gc.stats().writes != writes {
                        spared = false;
                        break 'reads;
                    }
                }
            }
            if rule == CleanFirst::WhileGc {
                assert!(
                    gc.collecting(),
                    "the reads outlasted the episode: the check below would prove nothing"
                );
                assert!(spared, "a dirty page was written back while the device collected");
            } else {
                assert!(!spared, "the plain rule never met a dirty victim: the test proves nothing");
            }
            sync.join().unwrap().unwrap();
        });
        for p in 0..10u64 {
            let mut buf = vec![0u8; 4096];
            f.read_exact_at(&mut buf, p * 4096).unwrap();
            assert_eq!(buf, vec![p as u8; 4096]);
        }
    }
}

/// The crash test's random workload (records written and synced at random) on simulated
/// devices whose volatile caches a power cut empties, at a random op each round; after power
/// comes back the array reopens, and every slot not written since its file's last completed
/// sync holds exactly the record that sync covered. Unflushed writes that reached the
/// devices are undone by the cut, so a sync that skipped a device flush fails this.
#[test]
fn random_power_cuts_keep_every_synced_record() {
    use common::records;
    let rounds: u64 = std::env::var("UPCACHE_POWER_CUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let mut lost = 0;
    for round in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();
        let sims: Vec<_> = (0..2).map(|i| fast(1 << 20, round * 2 + i)).collect();
        let mut c = common::config(tmp.path(), 2, 4096, 24).with_flusher_threads(1);
        for (i, s) in sims.iter().enumerate() {
            c = c.with_sim_device(i, s.clone());
        }
        let seed = 0xc0de + round;
        let cut_after = 1 + (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) % 150;
        {
            let cache = Cache::create(c.clone()).unwrap();
            let files = records::create_files(&cache);
            for n in 0..=cut_after {
                records::run_op(&files, records::op(seed, n)).unwrap();
            }
            lost += sims.iter().map(|s| s.power_cut().unwrap()).sum::<usize>();
        } // the cache's shutdown writes fail: the devices are off
        for s in &sims {
            s.power_on();
        }
        let cache = Cache::open(c).unwrap();
        records::Oracle::after(seed, cut_after, 0)
            .check(&cache, &format!("round {round} (cut after op {cut_after})"));
    }
    assert!(lost > 0, "some rounds must have lost unflushed writes");
}

/// Devices that hold 64 KiB each: a write past what the array holds fails at `write` with
/// `NoSpace` (the cache reserves space on the devices as writes extend a file), and every
/// byte acknowledged before it syncs and reads back.
#[test]
fn a_write_past_the_devices_capacity_fails_at_write_time() {
    let tmp = tempfile::tempdir().unwrap();
    let sims: Vec<_> = (0..4).map(|i| fast(0, 40 + i)).collect();
    for s in &sims {
        s.inject(Fault::NoSpace { capacity: 64 << 10 });
    }
    let cache = Cache::create(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.create_file("f").unwrap();
    let data = common::pattern(11, 1 << 20);
    let mut at = 0;
    let err = loop {
        match f.write_at(&data[at..at + 8192], at as u64) {
            Ok(n) => at += n,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), ErrorKind::NoSpace, "{err}");
    assert!(at > 0 && at <= 4 * (64 << 10), "{at} bytes acknowledged on 4 devices of 64 KiB");
    f.sync_data().unwrap();
    let mut back = vec![0u8; at];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data[..at]);
}

#[test]
fn queued_reads_on_a_mixed_array_return_the_data_and_each_fault_under_its_tag() {
    use upcache::internals::io::layout::{LayoutKind, StripeLayout};
    let tmp = tempfile::tempdir().unwrap();
    // Two simulated devices with real latency and a few channels, two file devices: queued
    // reads are booked on the simulated ones and go to the engine's queue on the others.
    let slow = |seed| {
        SimDevice::new(SimConfig {
            channels: 2,
            read_latency: Duration::from_micros(200),
            gc_every: 0,
            seed,
            ..SimConfig::default()
        })
        .unwrap()
    };
    let sims = [slow(11), slow(12)];
    const PAGES: u64 = 256;
    let data = common::pattern(13, PAGES as usize * 4096);
    {
        let cache = Cache::create(config(tmp.path(), &sims, 64)).unwrap();
        cache.create_file("f").unwrap().write_all_at(&data, 0).unwrap();
    }
    // 64 frames for 256 pages: most queued reads miss and reach the devices.
    let cache = Cache::open(config(tmp.path(), &sims, 64)).unwrap();
    let f = cache.open_file("f").unwrap();
    let layout = StripeLayout::new(4096, 2 * 4096, 4, LayoutKind::default());
    let run = |fail_device_0: bool| {
        let mut q = cache.queue(32).unwrap();
        let mut out = Vec::new();
        let mut x = 17u64;
        for i in 0..PAGES {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let page = (i * 97 + (x >> 60)) % PAGES;
            while q.in_flight() >= 32 {
                q.wait(1, &mut out);
            }
            q.read(&f, page * 4096, vec![0u8; 4096], page).unwrap();
        }
        q.wait(usize::MAX, &mut out);
        assert_eq!(out.len(), PAGES as usize);
        let failed = out.iter().filter(|c| c.result.is_err()).count();
        // Pages of device 0 not cached must have gone to it, and failed there.
        assert_eq!(failed > 0, fail_device_0, "{failed} reads failed");
        for c in out {
            let at = c.tag as usize * 4096;
            match c.result {
                Ok(n) => {
                    assert_eq!(n, 4096);
                    assert!(c.buf[..] == data[at..at + 4096], "page {} has its own bytes", c.tag);
                }
                Err(e) => {
                    assert!(fail_device_0, "page {}: {e}", c.tag);
                    assert_eq!(layout.locate(c.tag).0, 0, "only pages of the failing device fail");
                    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
                }
            }
        }
    };
    run(false);
    sims[0].inject(Fault::EioAt { op: FaultOp::Read, start: 0, end: 1 << 30 });
    run(true);
    sims[0].clear_faults();
    run(false);
}

/// A sync writes every dirty page it can lock before it waits for one that another thread
/// holds (a write-back in flight, or here a pinned writer), as the kernel's fdatasync waits
/// for pages under write-back only after it has written its own: two threads' syncs of one
/// file then overlap instead of queueing behind each other.
#[test]
fn a_sync_writes_what_it_can_before_it_waits_for_a_held_page() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = fast(0, 7);
    let cache = Cache::create(config(tmp.path(), std::slice::from_ref(&sim), 64)).unwrap();
    let f = cache.create_file("a").unwrap();
    f.write_all_at(&[1u8; 8192], 0).unwrap(); // pages 0 and 1, dirty
    let before = sim.stats().writes;
    let mut held = f.pin_mut(0).unwrap(); // page 0 stays locked by this thread
    held[0] = 2;
    std::thread::scope(|s| {
        let sync = s.spawn(|| f.sync_data());
        // A watchdog, not a measure: a sync that waits for page 0 first never writes page 1
        // while it is held.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while sim.stats().writes == before && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let written = sim.stats().writes > before;
        assert!(!sync.is_finished(), "the sync returned while page 0 was held dirty");
        drop(held);
        sync.join().unwrap().unwrap();
        assert!(written, "page 1 was not written while page 0 was held");
    });
    let mut back = [0u8; 2];
    f.read_exact_at(&mut back[..1], 0).unwrap();
    f.read_exact_at(&mut back[1..], 4096).unwrap();
    assert_eq!(back, [2, 1]);
    assert!(sim.stats().writes >= before + 2, "the sync wrote both pages: {:?}", sim.stats());
}
