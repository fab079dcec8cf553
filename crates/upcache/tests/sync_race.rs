//! The set_len race (issue 20): a sync that defers a backing file's `fdatasync` to the
//! metadata log's flush (its writes landed in zeros written ahead, `io/zero_window.rs`) must
//! not then log a length that covers a truncate of that file made after the deferral: the
//! truncate is metadata, which only the file's own `fdatasync` makes durable. Here a shrink
//! and re-extension run inside the sync, between its deferral and its length record (from
//! the I/O engine's flush of the array's other device), and the sync must flush the
//! truncated backing file before the record commits.

mod common;

use std::io::{self, IoSlice, IoSliceMut};
use std::sync::{Arc, Mutex, OnceLock};

use upcache::internals::io::device::BackingFile;
use upcache::internals::io::engine::{IoEngine, PsyncEngine};
use upcache::{Cache, Config, File};

/// Records which device each flush is for, and once runs a hook inside a flush of device 1.
#[derive(Default)]
struct Watching {
    inner: PsyncEngine,
    flushes: Mutex<Vec<usize>>,
    hook: OnceLock<Box<dyn Fn() + Send + Sync>>,
    fired: std::sync::atomic::AtomicBool,
}

impl IoEngine for Watching {
    fn name(&self) -> &'static str {
        "watching"
    }
    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.inner.read_vectored(f, off, bufs)
    }
    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_vectored(f, off, bufs)
    }
    fn sync_data(&self, f: &BackingFile) -> io::Result<()> {
        self.flushes.lock().unwrap().push(f.device());
        if f.device() == 1 {
            if let Some(hook) = self.hook.get() {
                if !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    hook();
                }
            }
        }
        self.inner.sync_data(f)
    }
}

#[test]
fn a_truncate_after_a_syncs_deferral_is_flushed_before_its_length_record() {
    // Device 0 on the temporary directory's file system (ext4 here: O_DIRECT, and the log's
    // flush stands in for its fdatasync), device 1 on tmpfs (buffered: always flushed).
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let dirs = [tmp.path().join("dev0"), shm.path().join("dev1")];
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    if !upcache::internals::io::device::fdatasync_flushes_device(&dirs[0]) {
        eprintln!("skipped: {} is not on ext4 or XFS, so no flush is ever deferred", dirs[0].display());
        return;
    }
    let engine = Arc::new(Watching::default());
    let config = Config::new(dirs.to_vec(), 4096 * 4096)
        .with_page_size(4096)
        .with_stripe_unit(4096)
        .with_allow_buffered(true)
        .with_io_engine(engine.clone());
    let cache = Cache::create(config).unwrap();
    let f: File = cache.create_file("f").unwrap();
    // Appends and syncs: device 0 gets its zeros written ahead, and the last append lands in
    // them, so that its fdatasync can be deferred.
    let mut len = 0u64;
    for round in 0..4u64 {
        let data = common::pattern(round, 64 << 10);
        f.write_all_at(&data, len).unwrap();
        len += data.len() as u64;
        f.sync_data().unwrap();
    }
    f.write_all_at(&common::pattern(9, 16 << 10), len).unwrap();
    len += 16 << 10;
    let shrink_to = 4096 * 3 + 100;
    {
        let f = f.clone();
        assert!(engine
            .hook
            .set(Box::new(move || {
                f.set_len(shrink_to).unwrap();
                f.set_len(len).unwrap();
            }))
            .is_ok());
    }
    engine.flushes.lock().unwrap().clear();
    f.sync_data().unwrap();
    assert!(engine.fired.load(std::sync::atomic::Ordering::SeqCst), "the hook ran");
    let flushes = engine.flushes.lock().unwrap().clone();
    assert_eq!(
        flushes,
        [1, 0],
        "device 0's flush deferred, then, once the truncate was seen, done before the length record"
    );
    // And the bytes: zeros where the shrink cut, after the extension.
    let mut back = vec![1u8; (len - shrink_to) as usize];
    f.read_exact_at(&mut back, shrink_to).unwrap();
    assert!(back.iter().all(|&b| b == 0));
}
