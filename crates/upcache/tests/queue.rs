//! The asynchronous queue (`Cache::queue`): reads and writes against an in-memory oracle
//! over both engines, concurrent queues against writers of checksummed records, and its
//! error cases.

mod common;

use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use upcache::internals::io::device::BackingFile;
use upcache::internals::io::engine::{IoEngine, PsyncEngine};
use upcache::{Cache, Completion, ErrorKind, IoKind, SubmitKind};

#[derive(Debug, Clone)]
enum Op {
    /// Queue a read of `len` bytes at `off`.
    Read { off: u64, len: usize },
    /// Wait for at least `min` completions.
    Wait { min: usize },
    /// Wait for everything, then queue a write.
    Write { off: u64, len: usize, seed: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u64..80_000, 1usize..20_000).prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0usize..4).prop_map(|min| Op::Wait { min }),
        2 => (0u64..70_000, 1usize..12_000, any::<u64>()).prop_map(|(off, len, seed)| Op::Write { off, len, seed }),
    ]
}

/// What a read must return: the oracle's bytes at submission (writes wait for reads).
fn expected(oracle: &[u8], off: u64, len: usize) -> Vec<u8> {
    let start = (off as usize).min(oracle.len());
    let end = (off as usize + len).min(oracle.len());
    oracle[start..end].to_vec()
}

fn check(c: &Completion, want: &HashMap<u64, Vec<u8>>) {
    let w = &want[&c.tag];
    let n = *c.result.as_ref().expect("read succeeds");
    assert_eq!(n, w.len(), "read {} returned {n} bytes", c.tag);
    assert!(c.buf[..n] == w[..], "read {} returned wrong bytes", c.tag);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn queued_reads_and_writes_match_the_oracle(
        devices in 1usize..4,
        frames in 16usize..40,
        depth in 1usize..12,
        io in proptest::sample::select(IoKind::ALL.to_vec()),
        submit in proptest::sample::select(SubmitKind::ALL.to_vec()),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let config = common::config(tmp.path(), devices, 4096, frames).with_io(io).with_io_threads(submit);
        let cache = Cache::create(config).unwrap();
        let f = cache.create_file("f").unwrap();
        let mut oracle = common::pattern(1, 30_000);
        f.write_all_at(&oracle, 0).unwrap();
        let mut q = cache.queue(depth).unwrap();
        let (mut want, mut out, mut tag) = (HashMap::new(), Vec::new(), 0u64);
        for op in ops {
            match op {
                Op::Read { off, len } => {
                    if q.in_flight() == depth {
                        q.wait(1, &mut out);
                    }
                    want.insert(tag, expected(&oracle, off, len));
                    q.read(&f, off, vec![0u8; len], tag).unwrap();
                    tag += 1;
                }
                Op::Wait { min } => {
                    q.wait(min, &mut out);
                }
                Op::Write { off, len, seed } => {
                    q.wait(usize::MAX, &mut out);
                    let data = common::pattern(seed, len);
                    let end = off as usize + len;
                    if oracle.len() < end {
                        oracle.resize(end, 0);
                    }
                    oracle[off as usize..end].copy_from_slice(&data);
                    q.write(&f, off, data, u64::MAX).unwrap();
                }
            }
            for c in out.drain(..) {
                if c.tag == u64::MAX {
                    assert_eq!(*c.result.as_ref().unwrap(), c.buf.len());
                } else {
                    check(&c, &want);
                }
            }
        }
        q.wait(usize::MAX, &mut out);
        for c in out.drain(..) {
            if c.tag != u64::MAX {
                check(&c, &want);
            }
        }
        prop_assert_eq!(q.in_flight(), 0);
        prop_assert_eq!(cache.pinned_frames(), 0);
        drop(q);
        let mut all = vec![0u8; oracle.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        prop_assert!(all == oracle);
    }
}

const RECORD: usize = 3 * 4096 + 512;
const RECORDS: u64 = 64;

/// A record: 8-byte sequence number, then bytes derived from it.
fn record(seq: u64) -> Vec<u8> {
    let mut r = common::pattern(seq, RECORD);
    r[..8].copy_from_slice(&seq.to_le_bytes());
    r
}

fn is_whole(r: &[u8]) -> bool {
    let seq = u64::from_le_bytes(r[..8].try_into().unwrap());
    r == record(seq)
}

/// Queues read records while other threads overwrite them, evicting all the time (the cache
/// holds a third of the file): every record read is whole, nothing deadlocks, and no pin is
/// leaked (the cache stays usable to the end).
#[test]
fn concurrent_queues_see_whole_records() {
    for (io, submit) in IoKind::ALL.into_iter().flat_map(|io| SubmitKind::ALL.map(|s| (io, s))) {
        let tmp = tempfile::tempdir().unwrap();
        let config = common::config(tmp.path(), 2, 4096, 64).with_io(io).with_io_threads(submit);
        let cache = Arc::new(Cache::create(config).unwrap());
        let f = cache.create_file("r").unwrap();
        for k in 0..RECORDS {
            f.write_all_at(&record(k), k * RECORD as u64).unwrap();
        }
        std::thread::scope(|s| {
            for w in 0..2u64 {
                let f = f.clone();
                s.spawn(move || {
                    for i in 0..400u64 {
                        let k = (i * 7 + w * 5) % RECORDS;
                        f.write_all_at(&record(1000 + i * 2 + w), k * RECORD as u64).unwrap();
                    }
                });
            }
            for r in 0..2u64 {
                let (cache, f) = (cache.clone(), f.clone());
                s.spawn(move || {
                    let mut q = cache.queue(6).unwrap();
                    let mut out = Vec::new();
                    for i in 0..600u64 {
                        if q.in_flight() == q.depth() {
                            q.wait(1, &mut out);
                        }
                        let k = (i * 11 + r * 3) % RECORDS;
                        q.read(&f, k * RECORD as u64, vec![0u8; RECORD], k).unwrap();
                        if i % 50 == 0 {
                            if q.in_flight() == q.depth() {
                                q.wait(1, &mut out);
                            }
                            // A queued write between reads: it must not deadlock with them.
                            q.write(&f, k * RECORD as u64, record(5000 + i), k).unwrap();
                        }
                        for c in out.drain(..) {
                            assert_eq!(c.result.unwrap(), RECORD);
                            assert!(is_whole(&c.buf), "record {} read torn", c.tag);
                        }
                    }
                    q.wait(usize::MAX, &mut out);
                    for c in out.drain(..) {
                        assert!(is_whole(&c.buf), "record {} read torn", c.tag);
                    }
                });
            }
        });
        assert_eq!(cache.pinned_frames(), 0, "a queue leaked pins");
        for k in 0..RECORDS {
            let mut r = vec![0u8; RECORD];
            f.read_exact_at(&mut r, k * RECORD as u64).unwrap();
            assert!(is_whole(&r), "record {k} torn at rest");
        }
    }
}

#[test]
fn dropping_a_queue_with_reads_in_flight_releases_their_pages() {
    for io in IoKind::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(common::config(tmp.path(), 1, 4096, 16).with_io(io)).unwrap();
        let f = cache.create_file("f").unwrap();
        let data = common::pattern(9, 64 * 4096);
        f.write_all_at(&data, 0).unwrap();
        cache.sync().unwrap();
        {
            let mut q = cache.queue(8).unwrap();
            for i in 0..8u64 {
                q.read(&f, i * 8 * 4096, vec![0u8; 4096], i).unwrap();
            }
        }
        assert_eq!(cache.pinned_frames(), 0, "the dropped queue leaked pins");
        // Every frame is usable again: a read of more pages than the cache holds succeeds.
        let mut all = vec![0u8; data.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        assert!(all == data);
    }
}

#[test]
fn bad_queue_requests_are_clean_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(&tmp.path().join("a"), 1, 4096, 16)).unwrap();
    for depth in [0, 4097] {
        assert_eq!(cache.queue(depth).err().unwrap().kind(), ErrorKind::InvalidInput);
    }
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&[7u8; 4096], 0).unwrap();
    let mut q = cache.queue(2).unwrap();
    q.read(&f, 0, vec![0; 10], 1).unwrap();
    q.read(&f, 4096, vec![0; 10], 2).unwrap();
    assert_eq!(q.read(&f, 0, vec![0; 10], 3).unwrap_err().kind(), ErrorKind::Busy);
    let mut out = Vec::new();
    q.wait(2, &mut out);
    assert_eq!(out.len(), 2);
    let past_end = out.iter().find(|c| c.tag == 2).unwrap();
    assert_eq!(*past_end.result.as_ref().unwrap(), 0, "a read at end of file returns 0 bytes");
    assert_eq!(q.read(&f, u64::MAX - 3, vec![0; 10], 4).unwrap_err().kind(), ErrorKind::InvalidInput);
    let other = Cache::create(common::config(&tmp.path().join("b"), 1, 4096, 16)).unwrap();
    let g = other.create_file("g").unwrap();
    assert_eq!(q.read(&g, 0, vec![0; 10], 5).unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// Fails reads while the switch is on; has no queue, so the cache runs queued reads inline.
#[derive(Default)]
struct FailingReads {
    inner: PsyncEngine,
    fail: AtomicBool,
}

impl IoEngine for FailingReads {
    fn name(&self) -> &'static str {
        "failing-reads"
    }
    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.read_vectored(f, off, bufs)
    }
    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_vectored(f, off, bufs)
    }
    fn sync_data(&self, f: &BackingFile) -> io::Result<()> {
        self.inner.sync_data(f)
    }
}

#[test]
fn a_failed_queued_read_is_reported_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Arc::new(FailingReads::default());
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16).with_io_engine(e.clone())).unwrap();
    let f = cache.create_file("f").unwrap();
    let data = common::pattern(4, 40 * 4096);
    f.write_all_at(&data, 0).unwrap();
    cache.sync().unwrap();
    // Evict the start of the file by reading the rest.
    let mut rest = vec![0u8; 30 * 4096];
    f.read_exact_at(&mut rest, 10 * 4096).unwrap();
    e.fail.store(true, Ordering::SeqCst);
    let mut q = cache.queue(4).unwrap();
    q.read(&f, 100, vec![0; 3 * 4096], 1).unwrap();
    let mut out = Vec::new();
    q.wait(1, &mut out);
    let err = out[0].result.as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    e.fail.store(false, Ordering::SeqCst);
    out.clear();
    q.read(&f, 100, vec![0; 3 * 4096], 2).unwrap();
    q.wait(1, &mut out);
    assert_eq!(*out[0].result.as_ref().unwrap(), 3 * 4096);
    assert!(out[0].buf[..] == data[100..100 + 3 * 4096]);
}

/// Two queued reads of one uncached page whose device read fails: the failed load must not
/// wait for the second request's pin (which only this thread could drop). Found in review.
#[test]
fn a_failed_load_that_another_request_waits_on_does_not_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Arc::new(FailingReads::default());
    let cache =
        Arc::new(Cache::create(common::config(tmp.path(), 1, 4096, 16).with_io_engine(e.clone())).unwrap());
    let f = cache.create_file("f").unwrap();
    let data = common::pattern(4, 40 * 4096);
    f.write_all_at(&data, 0).unwrap();
    cache.sync().unwrap();
    let mut rest = vec![0u8; 30 * 4096];
    f.read_exact_at(&mut rest, 10 * 4096).unwrap(); // evicts page 0
    e.fail.store(true, Ordering::SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, f2) = (cache.clone(), f.clone());
    std::thread::spawn(move || {
        let mut q = c.queue(4).unwrap();
        q.read(&f2, 0, vec![0; 100], 1).unwrap(); // starts the load of page 0
        q.read(&f2, 200, vec![0; 100], 2).unwrap(); // finds it loading
        let mut out = Vec::new();
        q.wait(2, &mut out);
        tx.send(out.into_iter().map(|c| c.result.map_err(|e| e.kind())).collect::<Vec<_>>()).unwrap();
    });
    // A hang guard, not a wait for an event: the queue answers at once or never.
    let results = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the queue hung");
    assert!(results.iter().any(|r| r == &Err(ErrorKind::Io)), "{results:?}");
    e.fail.store(false, Ordering::SeqCst);
    let mut back = vec![0u8; 300];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..] == data[..300]);
    assert_eq!(cache.pinned_frames(), 0);
}

/// A queued read racing a shrink never brings bytes past the new end back into the cache
/// (they would reappear when the file grows again). Found in review.
#[test]
fn a_queued_read_racing_a_shrink_does_not_resurrect_bytes() {
    for round in 0..20 {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::create(common::config(tmp.path(), 1, 4096, 64).with_io(IoKind::Psync)).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&[0xABu8; 3 * 4096], 0).unwrap();
        cache.sync().unwrap();
        let mut q = cache.queue(4).unwrap();
        let g = f.pin_mut(4096).unwrap();
        q.read(&f, 4096, vec![0u8; 2 * 4096], 1).unwrap(); // the range is busy: pending
        drop(g);
        let f2 = f.clone();
        let t = std::thread::spawn(move || f2.set_len(4096).unwrap());
        let mut out = Vec::new();
        q.wait(1, &mut out);
        t.join().unwrap();
        drop(q);
        f.set_len(3 * 4096).unwrap();
        let mut b = vec![0u8; 2 * 4096];
        f.read_exact_at(&mut b, 4096).unwrap();
        assert!(b.iter().all(|&x| x == 0), "round {round}: bytes past a shrink came back");
    }
}

#[test]
fn every_engine_and_submission_model_is_the_one_asked_for() {
    for io in IoKind::ALL {
        for submit in SubmitKind::ALL {
            let tmp = tempfile::tempdir().unwrap();
            let c =
                Cache::create(common::config(tmp.path(), 3, 4096, 32).with_io(io).with_io_threads(submit))
                    .unwrap();
            let want = match (io, submit) {
                (IoKind::Uring, SubmitKind::Caller) => "uring",
                (IoKind::Psync, SubmitKind::Caller) => "psync",
                (IoKind::Uring, SubmitKind::PerDevice) => "uring+threads",
                (IoKind::Psync, SubmitKind::PerDevice) => "psync+threads",
            };
            assert_eq!(c.io_engine(), want, "{io:?} {submit:?}");
        }
    }
}

#[test]
fn a_queued_miss_is_timed_in_its_devices_read_histogram() {
    let tmp = tempfile::tempdir().unwrap();
    let config = || upcache::Config::new([tmp.path().join("dev0"), tmp.path().join("dev1")], 16 << 20);
    let cache = Cache::create(config()).unwrap();
    cache.create_file("f").unwrap().write_all_at(&[9u8; 1 << 20], 0).unwrap();
    cache.close().unwrap();
    // Reopened: nothing cached, so the queued read loads its page through the queue's ring.
    let cache = Cache::open(config()).unwrap();
    let f = cache.open_file("f").unwrap();
    let reads = |c: &Cache| c.latencies().device_read.iter().map(|h| h.count()).sum::<u64>();
    let before = reads(&cache);
    let mut q = cache.queue(4).unwrap();
    q.read(&f, 0, vec![0u8; 4096], 7).unwrap();
    let mut done = Vec::new();
    q.wait(1, &mut done);
    assert_eq!(done[0].result.as_ref().map(|_| done[0].buf[0]).unwrap(), 9);
    assert_eq!(reads(&cache), before + 1, "the ring's read went unrecorded");
}
