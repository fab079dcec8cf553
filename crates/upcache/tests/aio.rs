//! The Future API (`AsyncIo`): futures complete from the driver's completions without
//! blocking the thread that polls them, under tokio and under a hand-made executor, with
//! data checked against what was written.

#![cfg(not(loom))]

mod common;

use std::future::Future;
use std::io::{self, IoSlice, IoSliceMut};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake};

use futures::stream::{FuturesUnordered, StreamExt};
use upcache::internals::io::device::BackingFile;
use upcache::internals::io::engine::{IoEngine, PsyncEngine};
use upcache::{Cache, Config};

/// Reads wait at a gate the test opens (or fail after a minute, so a bug fails the test
/// instead of hanging it).
#[derive(Default)]
struct GatedEngine {
    closed: AtomicBool,
    gate: Mutex<Option<mpsc::Receiver<()>>>,
}

impl IoEngine for GatedEngine {
    fn name(&self) -> &'static str {
        "gated"
    }

    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if self.closed.load(Ordering::SeqCst) {
            let rx = self.gate.lock().unwrap().take().expect("one gated read");
            if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
                return Err(io::Error::other("the gate was never opened"));
            }
            self.closed.store(false, Ordering::SeqCst);
        }
        PsyncEngine.read_vectored(f, off, bufs)
    }

    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        PsyncEngine.write_vectored(f, off, bufs)
    }

    fn sync_data(&self, f: &BackingFile) -> io::Result<()> {
        PsyncEngine.sync_data(f)
    }
}

/// Wakes by counting and unparking the test thread.
struct Counting {
    woken: std::sync::atomic::AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A read held at the device: the first poll returns Pending at once (the polling thread is
/// not blocked on the I/O), and the driver's completion wakes the future, whose next poll
/// has the bytes.
#[test]
fn a_future_completes_from_its_wake_without_blocking_the_polling_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Arc::new(GatedEngine::default());
    let cfg = common::config(tmp.path(), 1, 4096, 64).with_io_engine(engine.clone());
    let cache = Cache::create(cfg).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(1, 8192), 0).unwrap();
    f.sync_data().unwrap();
    f.evict(0, 0).unwrap(); // so the read goes to the (gated) device
    let (open, gate) = mpsc::channel();
    *engine.gate.lock().unwrap() = Some(gate);
    engine.closed.store(true, Ordering::SeqCst);

    let aio = cache.async_io(8).unwrap();
    let waker = Arc::new(Counting { woken: 0.into(), thread: std::thread::current() });
    let w = waker.clone().into();
    let mut cx = Context::from_waker(&w);
    let mut read = pin!(aio.read(&f, 4096, vec![0; 4096]));
    assert!(read.as_mut().poll(&mut cx).is_pending(), "the read cannot be done: its device read is held");
    open.send(()).unwrap();
    let (n, buf) = loop {
        if let Poll::Ready(r) = read.as_mut().poll(&mut cx) {
            break r;
        }
        std::thread::park(); // until the driver's wake (or a spurious unpark: poll again)
    };
    assert_eq!(n.unwrap(), 4096);
    assert_eq!(buf, common::pattern(1, 8192)[4096..]);
    assert!(waker.woken.load(Ordering::SeqCst) >= 1, "completed through its waker");
}

/// Under tokio, one task keeps 64 reads and writes in flight over 10,000 random blocks; every
/// read sees the last write of its block, and a sync after them makes them durable.
#[test]
fn one_tokio_task_keeps_64_in_flight_and_reads_what_it_wrote() {
    const BLOCKS: u64 = 2048;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = Config::new([tmp.path().join("ssd")], 2 << 20); // 512 frames: most reads miss
    let cache = Cache::create(cfg.clone()).unwrap();
    let f = cache.create_file("blocks").unwrap();
    f.set_len(BLOCKS * 4096).unwrap();
    let aio = cache.async_io(64).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let version = rt.block_on(random_blocks(&aio, &f, BLOCKS));
    drop(aio);
    drop(f);
    cache.close().unwrap();
    let cache = Cache::open(cfg).unwrap();
    let f = cache.open_file("blocks").unwrap();
    let mut buf = vec![0u8; 4096];
    for (b, &v) in version.iter().enumerate() {
        f.read_exact_at(&mut buf, b as u64 * 4096).unwrap();
        assert!(buf.iter().all(|&x| x == v), "block {b} after reopen");
    }
}

/// One task keeps 64 reads and writes of `aio` in flight over 10,000 random blocks of 4 KiB
/// among the `blocks` of `f`, checking every read against the last write of its block, then
/// syncs; the version each block was last written with (0: never).
async fn random_blocks<E: upcache::AioEngine>(
    aio: &upcache::AsyncIo<E>,
    f: &E::File,
    blocks: u64,
) -> Vec<u8> {
    // Block b holds the byte v of its last write v (0: never written).
    let mut version = vec![0u8; blocks as usize];
    let mut in_flight = FuturesUnordered::new();
    // Blocks with a request in flight: a read and a write of one block are never in
    // flight together, so every read has one right answer.
    let mut busy = std::collections::HashSet::new();
    let (mut issued, mut x) = (0u32, 0x2545_F491_4F6C_DD1Du64);
    while issued < 10_000 || !in_flight.is_empty() {
        while issued < 10_000 && in_flight.len() < 64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x % blocks;
            if !busy.insert(b) {
                continue;
            }
            let v = (x & 1 == 0).then(|| (issued % 250 + 1) as u8);
            if let Some(v) = v {
                version[b as usize] = v;
            }
            in_flight.push(op(aio, f, b, v, version[b as usize]));
            issued += 1;
        }
        let (b, r) = in_flight.next().await.expect("requests in flight");
        r.unwrap_or_else(|e| panic!("block {b}: {e}"));
        busy.remove(&b);
    }
    aio.sync_data(f).await.unwrap();
    version
}

/// The same on a shared cache (`AsyncIo::on_shared`), its reads loaded by the driver's
/// `SharedQueue`: every read sees the last write of its block; the file on disk holds them.
#[test]
fn futures_on_a_shared_cache_keep_64_in_flight_and_read_what_they_wrote() {
    const BLOCKS: u64 = 2048;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("blocks");
    std::fs::write(&path, vec![0u8; (BLOCKS * 4096) as usize]).unwrap();
    let config = upcache::shared::SharedConfig { memory: 2 << 20, ..Default::default() };
    let cache = upcache::shared::SharedCache::create_private(&config).unwrap();
    let f = Arc::new(cache.open_path(&path, true).unwrap());
    let aio = upcache::AsyncIo::on_shared(&cache, 64).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let version = rt.block_on(random_blocks(&aio, &f, BLOCKS));
    let other = upcache::shared::SharedCache::create_private(&config).unwrap();
    let mine = Arc::new(other.open_path(&path, false).unwrap());
    let refused = rt.block_on(aio.read(&mine, 0, vec![7; 10]));
    assert_eq!((refused.0.unwrap_err().kind(), refused.1), (upcache::ErrorKind::InvalidInput, vec![7; 10]));
    drop(aio);
    let disk = std::fs::read(&path).unwrap();
    for (b, &v) in version.iter().enumerate() {
        assert!(disk[b * 4096..][..4096].iter().all(|&x| x == v), "block {b} on disk");
    }
}

/// Writes `write` (a version) to block `b`, or reads it and checks it holds `expect`.
async fn op<E: upcache::AioEngine>(
    aio: &upcache::AsyncIo<E>,
    f: &E::File,
    b: u64,
    write: Option<u8>,
    expect: u8,
) -> (u64, Result<(), String>) {
    let (r, buf) = match write {
        Some(v) => aio.write(f, b * 4096, vec![v; 4096]).await,
        None => aio.read(f, b * 4096, vec![0xEE; 4096]).await,
    };
    let r = match r {
        Ok(4096) if write.is_some() || buf.iter().all(|&x| x == expect) => Ok(()),
        Ok(4096) => Err(format!("read {} for version {expect}", buf[0])),
        Ok(n) => Err(format!("moved {n} bytes")),
        Err(e) => Err(e.to_string()),
    };
    (b, r)
}

/// Requests the queue would refuse fail in their future with the buffer given back.
#[test]
fn bad_requests_fail_in_their_future_and_give_the_buffer_back() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(Config::new([tmp.path().join("a")], 1 << 20)).unwrap();
    let other = Cache::create(Config::new([tmp.path().join("b")], 1 << 20)).unwrap();
    let f = other.create_file("f").unwrap();
    let aio = cache.async_io(4).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let (r, buf) = aio.read(&f, 0, vec![7; 100]).await;
        assert_eq!(r.unwrap_err().kind(), upcache::ErrorKind::InvalidInput);
        assert_eq!(buf, vec![7; 100]);
        let mine = cache.create_file("g").unwrap();
        let (r, buf) = aio.write(&mine, u64::MAX - 10, vec![1; 100]).await;
        assert_eq!(r.unwrap_err().kind(), upcache::ErrorKind::InvalidInput);
        assert_eq!(buf.len(), 100);
    });
    assert!(cache.async_io(0).is_err(), "depth 0 is refused");
}

/// A waker that panics (an executor's bug) does not stop the driver: its own future still
/// gets its result, and later requests complete.
#[test]
fn a_panicking_waker_does_not_stop_the_driver() {
    struct Panics;
    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("a broken executor");
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let engine = Arc::new(GatedEngine::default());
    let cfg = common::config(tmp.path(), 1, 4096, 64).with_io_engine(engine.clone());
    let cache = Cache::create(cfg).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(2, 4096), 0).unwrap();
    f.sync_data().unwrap();
    f.evict(0, 0).unwrap();
    let (open, gate) = mpsc::channel();
    *engine.gate.lock().unwrap() = Some(gate);
    engine.closed.store(true, Ordering::SeqCst);
    let aio = cache.async_io(4).unwrap();
    let bad = Arc::new(Panics).into();
    let mut first = pin!(aio.read(&f, 0, vec![0; 4096]));
    assert!(first.as_mut().poll(&mut Context::from_waker(&bad)).is_pending());
    open.send(()).unwrap(); // the read completes and the driver calls the panicking waker
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let (n, _) = aio.write(&f, 4096, vec![5; 10]).await;
        assert_eq!(n.unwrap(), 10, "the driver still runs");
        let (n, buf) = first.as_mut().await;
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(buf, common::pattern(2, 4096));
    });
}
