//! The shared engine's array files on simulated SSDs (`io::device::sim`), as `sim.rs` tests
//! the in-process engine's: data striped through a mixed array, power cuts that must keep
//! every synced byte, injected faults that give clean errors and keep written data, and
//! GC-aware eviction inferring collection from write-back latency.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use upcache::shared::{ArraySpec, SharedArray, SharedCache, SharedConfig};
use upcache::{CleanFirst, ErrorKind, Fault, FaultOp, LayoutKind, PolicyKind, SimConfig, SimDevice};

const PAGE: usize = 4096;

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

/// A fast device whose writes start an episode of garbage collection of 2 s once 16 KiB were
/// written since the last (writes wait for its end; reads do not).
fn collecting_device() -> Arc<SimDevice> {
    SimDevice::new(SimConfig {
        read_latency: Duration::ZERO,
        write_latency: Duration::ZERO,
        gc_every: 4 * PAGE as u64,
        gc_time: Duration::from_secs(2),
        jitter_pct: 0,
        ..SimConfig::default()
    })
    .unwrap()
}

/// A private shared cache of `frames` pages.
fn cache(frames: u64) -> SharedCache {
    SharedCache::create_private(&SharedConfig { memory: frames * PAGE as u64, ..SharedConfig::default() })
        .unwrap()
}

/// The array of `dirs` (stripe units of 2 pages), device `i` being `sims[i]` where given.
fn spec<'a>(dirs: &'a [PathBuf], sims: &'a [(usize, Arc<SimDevice>)]) -> ArraySpec<'a> {
    ArraySpec {
        dirs,
        meta_dir: None,
        page_size: PAGE,
        stripe_unit: 2 * PAGE as u64,
        kind: LayoutKind::Stripe,
        sims,
        allow_buffered: false,
        io_threads: upcache::SubmitKind::Caller,
        engine: None,
    }
}

/// `sims` as the devices `0..`.
fn first(sims: &[Arc<SimDevice>]) -> Vec<(usize, Arc<SimDevice>)> {
    sims.iter().cloned().enumerate().collect()
}

fn read_back(array: &SharedArray, name: &str, len: usize) -> Vec<u8> {
    let f = array.open_file(name, false).unwrap();
    let mut back = vec![0u8; len];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), len);
    back
}

/// Two of four devices simulated: the pages striped onto them are written, flushed and read
/// through them (their counters say so), and the array reopens over them with every byte.
#[test]
fn a_mixed_array_goes_through_its_simulated_devices_and_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = common::dirs(tmp.path(), 4);
    let sims = first(&[fast(0, 1), fast(0, 2)]);
    let data = common::pattern(3, 3 << 20);
    {
        let cache = cache(64);
        let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
        let f = array.create_file("a").unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_data().unwrap();
        assert!(read_back(&array, "a", data.len()) == data);
    }
    for (i, s) in &sims {
        let st = s.stats();
        // Each simulated device holds a quarter of the file's stripe units.
        assert!(st.write_bytes >= data.len() as u64 / 4, "device {i}: {st:?}");
        assert!(st.flushes > 0, "device {i}: the sync flushed it: {st:?}");
    }
    let reads = sims[0].1.stats().reads;
    let cache = cache(64);
    let array = SharedArray::open(&cache, spec(&dirs, &sims)).unwrap();
    assert!(read_back(&array, "a", data.len()) == data);
    assert!(sims[0].1.stats().reads > reads, "the reopened cache read device 0 through it");
}

/// A power cut undoes the writes a device had not flushed: a sync's are flushed, so every
/// synced byte survives, and pages written back since (by eviction) are undone to them.
#[test]
fn power_cuts_keep_every_synced_byte() {
    for round in 0..4u64 {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = common::dirs(tmp.path(), 4);
        // Every device simulated, with a volatile cache larger than what goes unsynced.
        let sims = first(&(0..4).map(|i| fast(64 << 20, round * 8 + i)).collect::<Vec<_>>());
        let synced = common::pattern(round, 1 << 20);
        let rewrite = common::pattern(round + 100, PAGE * (round as usize + 1));
        {
            let cache = cache(16);
            let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
            let f = array.create_file("f").unwrap();
            f.write_all_at(&synced, 0).unwrap();
            f.sync_data().unwrap();
            // Overwrite the first pages, then write 4 MiB past them through 16 frames: the
            // rewritten pages are evicted, so written back to the devices, never flushed.
            f.write_all_at(&rewrite, 0).unwrap();
            f.write_all_at(&common::pattern(round + 200, 4 << 20), 1 << 20).unwrap();
            let lost: usize = sims.iter().map(|(_, s)| s.power_cut().unwrap()).sum();
            assert!(lost > 0, "eviction wrote back unsynced pages, which the cut must undo");
            // The process "dies" with the power: the cache's own closing writes fail.
            drop(f);
        }
        for (_, s) in &sims {
            s.power_on();
        }
        let cache = cache(16);
        let array = SharedArray::open(&cache, spec(&dirs, &sims)).unwrap();
        // The rewrite reached the devices but was never flushed: the cut restored the synced
        // bytes under it (a sync that flushed no device fails this).
        let f = array.open_file("f", false).unwrap();
        assert_eq!(f.len(), 1 << 20, "round {round}: the unsynced length was not logged");
        let mut back = vec![0u8; synced.len()];
        f.read_at(&mut back, 0).unwrap();
        assert!(back == synced, "round {round}: synced data changed by a power cut");
    }
}

/// A truncate the devices refuse leaves the file at its new length in the cache, the cut
/// pending. A write past it then fails with the devices' error: landing there, it would
/// make the pages between show what the devices still hold past the cut, and finishing the
/// cut later would cut the write away. Once the devices take the cut, the write goes in and
/// the pages between read as zeros, in the cache and from the devices.
#[test]
fn a_write_past_a_truncate_the_devices_refused_waits_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = common::dirs(tmp.path(), 4);
    let sims = first(&[fast(0, 11), fast(0, 12), fast(0, 13), fast(0, 14)]);
    let cache = cache(128);
    let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
    let f = array.create_file("f").unwrap();
    f.write_all_at(&common::pattern(9, 16 * PAGE), 0).unwrap();
    f.sync_data().unwrap();
    for (_, s) in &sims {
        s.inject(Fault::EioAfter { op: FaultOp::Write, n: 1 });
    }
    assert_eq!(f.set_len(PAGE as u64).unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(f.len(), PAGE as u64, "the cache is at the new length");
    let page = [7u8; PAGE];
    let err = f.write_all_at(&page, 12 * PAGE as u64).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert_eq!(f.len(), PAGE as u64, "the refused write did not extend the file");
    f.write_all_at(&page[..100], 0).unwrap(); // within the length: goes in
    for (_, s) in &sims {
        s.clear_faults();
    }
    f.write_all_at(&page, 12 * PAGE as u64).unwrap();
    let mut want = common::pattern(9, PAGE);
    want[..100].fill(7);
    want.resize(12 * PAGE, 0);
    want.extend_from_slice(&page);
    let mut back = vec![1u8; want.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), want.len());
    assert!(back == want, "zeros between the cut and the write");
    f.sync_data().unwrap();
    drop(f);
    drop(array);
    let cache = self::cache(128);
    let array = SharedArray::open(&cache, spec(&dirs, &sims)).unwrap();
    assert!(read_back(&array, "f", want.len()) == want, "and from the devices");
}

/// Write errors, a full device and a failing flush fail syncs cleanly and keep the pages
/// dirty: once the faults clear, a sync writes them and a new cache reads them back. A read
/// fault fails the read of a page not cached, and the page reads once it clears.
#[test]
fn injected_faults_are_clean_errors_and_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = common::dirs(tmp.path(), 4);
    let sims = first(&[fast(0, 7), fast(0, 8), fast(0, 9), fast(0, 10)]);
    let data = common::pattern(5, 256 << 10);
    {
        let cache = cache(128);
        let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
        let f = array.create_file("f").unwrap();
        f.write_all_at(&data, 0).unwrap();
        for (_, s) in &sims {
            s.inject(Fault::EioAfter { op: FaultOp::Write, n: 1 });
        }
        assert_eq!(cache.status().stats.writeback_errors, 0);
        let e = f.sync_data().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(cache.status().stats.dirty_pages > 0, "the failed pages stay dirty");
        assert!(cache.status().stats.writeback_errors > 0, "the failed requests counted");
        let mut back = vec![0u8; data.len()];
        f.read_at(&mut back, 0).unwrap();
        assert!(back == data, "cached data survives the failed write-back");
        for (_, s) in &sims {
            s.clear_faults();
            s.inject(Fault::NoSpace { capacity: PAGE as u64 });
        }
        assert!(f.sync_data().is_err(), "a full device");
        for (_, s) in &sims {
            s.clear_faults();
            s.inject(Fault::EioAfter { op: FaultOp::Flush, n: 1 });
        }
        assert!(f.sync_data().is_err(), "a failing flush");
        for (_, s) in &sims {
            s.clear_faults();
        }
        f.sync_data().unwrap();
        assert_eq!(cache.status().stats.dirty_pages, 0);
    }
    let cache = cache(128);
    let array = SharedArray::open(&cache, spec(&dirs, &sims)).unwrap();
    sims[0].1.inject(Fault::EioAt { op: FaultOp::Read, start: 0, end: 1 << 30 });
    let f = array.open_file("f", false).unwrap();
    let mut page = vec![0u8; PAGE];
    assert_eq!(f.read_at(&mut page, 0).unwrap_err().kind(), ErrorKind::Io, "page 0 is on device 0");
    sims[0].1.clear_faults();
    f.read_at(&mut page, 0).unwrap();
    assert!(page[..] == data[..PAGE]);
    assert!(read_back(&array, "f", data.len()) == data);
}

/// GC-aware eviction with the device's GC flag hidden from the cache (it infers collection
/// from its write-backs' latency, `shared/gc.rs`; the flag is only this test's oracle). A
/// sync's write-back meets an episode of 2 s and stays in flight: the cache takes the device
/// to be collecting, and misses meanwhile take clean victims, never writing back one of the
/// other dirty pages, which would stall behind the episode too. With the plain rule they do
/// (checked, so that the first half proves something).
#[test]
fn gc_aware_eviction_spares_dirty_pages_of_a_collecting_device() {
    for rule in [CleanFirst::WhileGc, CleanFirst::Never] {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = common::dirs(tmp.path(), 1);
        let gc = collecting_device();
        let config = SharedConfig {
            memory: 16 * PAGE as u64,
            policy: PolicyKind::Clock,
            clean_first: rule,
            readahead: 0,
            dirty_ratios: (0.9, 0.95),
            ..SharedConfig::default()
        };
        let cache = SharedCache::create_private(&config).unwrap();
        let sims = [(0, gc.clone())];
        let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
        let f = array.create_file("f").unwrap();
        f.set_len(64 * PAGE as u64).unwrap();
        // Four ordinary write-backs, the device's baseline; the fourth starts an episode.
        for p in 0..4u64 {
            f.write_all_at(&[p as u8; PAGE], p * PAGE as u64).unwrap();
            f.sync_data().unwrap();
        }
        assert!(gc.collecting());
        // Pages 4..7 dirty; the sync's write-back of them waits for the episode's end.
        for p in 4..7u64 {
            f.write_all_at(&[p as u8; PAGE], p * PAGE as u64).unwrap();
        }
        std::thread::scope(|s| {
            let sync = s.spawn(|| f.sync_data());
            // The cache's view: wait (bounded by the episode) until it sees the write-back
            // stalled.
            while rule == CleanFirst::WhileGc && !array.devices_collecting()[0] {
                assert!(gc.collecting(), "the episode ended before the cache took it for one");
                std::thread::yield_now();
            }
            // Other pages dirtied meanwhile, then misses on every other page, four times.
            for p in 7..10u64 {
                f.write_all_at(&[p as u8; PAGE], p * PAGE as u64).unwrap();
            }
            let writes = gc.stats().writes;
            let mut buf = vec![0u8; PAGE];
            let mut spared = true;
            'reads: for _ in 0..4 {
                for p in 10..64u64 {
                    f.read_at(&mut buf, p * PAGE as u64).unwrap();
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
            let mut buf = vec![0u8; PAGE];
            f.read_at(&mut buf, p * PAGE as u64).unwrap();
            assert_eq!(buf, vec![p as u8; PAGE]);
        }
    }
}

/// A page being written back reads without waiting for the write (the kernel's readers of a
/// page under `PG_writeback` do not wait either): a sync's write-back stalls behind an
/// episode of 2 s, and a read of the page it writes returns its bytes while the episode
/// lasts (waiting for the write would outlast it).
#[test]
fn a_page_being_written_back_reads_without_waiting_for_the_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = common::dirs(tmp.path(), 1);
    let gc = collecting_device();
    let cache = cache(64);
    let sims = [(0, gc.clone())];
    let array = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap();
    let f = array.create_file("f").unwrap();
    // Four write-backs, the device's baseline; the fourth starts an episode.
    for p in 0..4u64 {
        f.write_all_at(&[p as u8; PAGE], p * PAGE as u64).unwrap();
        f.sync_data().unwrap();
    }
    assert!(gc.collecting());
    f.write_all_at(&[4; PAGE], 4 * PAGE as u64).unwrap();
    std::thread::scope(|s| {
        let sync = s.spawn(|| f.sync_data());
        // The write-back is in flight once the cache takes the device to be collecting.
        while !array.devices_collecting()[0] {
            assert!(gc.collecting(), "the episode ended before the write-back was seen in flight");
            std::thread::yield_now();
        }
        let mut buf = vec![0u8; PAGE];
        f.read_at(&mut buf, 4 * PAGE as u64).unwrap();
        assert!(gc.collecting(), "the read waited for the write-back");
        assert_eq!(buf, vec![4u8; PAGE]);
        sync.join().unwrap().unwrap();
    });
}

/// A simulated device given twice, or past the array's devices, is refused.
#[test]
fn simulated_devices_outside_the_array_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = common::dirs(tmp.path(), 2);
    let cache = cache(16);
    let s = fast(0, 1);
    for sims in [vec![(2, s.clone())], vec![(1, s.clone()), (1, s.clone())]] {
        let e = SharedArray::create(&cache, spec(&dirs, &sims)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    }
    assert!(!Path::new(&dirs[0]).join("upcache.catalog").exists(), "nothing was made");
}
