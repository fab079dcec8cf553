//! Error paths: bad config, bad names, bad arrays, and device faults injected through a
//! wrapping I/O engine. A failed write-back must keep pages dirty, be reported by the next
//! sync (once), be retried, and lose nothing.

mod common;

use std::io::{self, IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use upcache::internals::io::device::BackingFile;
use upcache::internals::io::engine::{IoEngine, PsyncEngine};
use upcache::{Cache, Config, ErrorKind};

/// Fails reads, writes or syncs with a chosen errno while the matching switch is on.
#[derive(Default)]
struct FaultyEngine {
    inner: PsyncEngine,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    fail_syncs: AtomicBool,
    errno: AtomicI32,
}

impl FaultyEngine {
    fn err(&self) -> io::Error {
        io::Error::from_raw_os_error(match self.errno.load(Ordering::SeqCst) {
            0 => libc_eio(),
            e => e,
        })
    }
}

fn libc_eio() -> i32 {
    5
}
const ENOSPC: i32 = 28;

impl IoEngine for FaultyEngine {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn read_vectored(&self, f: &BackingFile, off: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(self.err());
        }
        self.inner.read_vectored(f, off, bufs)
    }
    fn write_vectored(&self, f: &BackingFile, off: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(self.err());
        }
        self.inner.write_vectored(f, off, bufs)
    }
    fn sync_data(&self, f: &BackingFile) -> io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(self.err());
        }
        self.inner.sync_data(f)
    }
}

fn faulty(root: &std::path::Path, frames: usize) -> (Arc<FaultyEngine>, Config) {
    let e = Arc::new(FaultyEngine::default());
    (e.clone(), common::config(root, 2, 4096, frames).with_io_engine(e))
}

#[test]
fn failed_sync_keeps_pages_dirty_and_a_retry_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 64);
    let data = common::pattern(3, 5 * 4096 + 100);
    {
        let cache = Cache::create(cfg.clone()).unwrap();
        let f = cache.create_file("f").unwrap();
        f.write_all_at(&data, 0).unwrap();
        e.fail_writes.store(true, Ordering::SeqCst);
        let err = f.sync_data().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io, "{err}");
        assert_eq!(err.raw_os_error(), Some(libc_eio()));
        assert!(cache.stats().dirty_pages >= 6, "pages must stay dirty: {:?}", cache.stats());
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data, "dirty data must still be readable");
        e.fail_writes.store(false, Ordering::SeqCst);
        f.sync_data().unwrap();
        assert_eq!(cache.stats().dirty_pages, 0);
    }
    let cache = Cache::open(cfg).unwrap();
    let f = cache.open_file("f").unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data);
}

#[test]
fn enospc_is_reported_as_no_space() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 64);
    let cache = Cache::create(cfg).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&[1u8; 8192], 0).unwrap();
    e.errno.store(ENOSPC, Ordering::SeqCst);
    e.fail_writes.store(true, Ordering::SeqCst);
    assert_eq!(f.sync_data().unwrap_err().kind(), ErrorKind::NoSpace);
    e.fail_writes.store(false, Ordering::SeqCst);
    f.sync_data().unwrap();
}

#[test]
fn background_write_back_failure_is_sticky_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 16);
    let cfg = cfg.with_dirty_background_ratio(0.1).with_dirty_foreground_ratio(0.2);
    let mut written = 0u64;
    {
        let cache = Cache::create(cfg.clone()).unwrap();
        let f = cache.create_file("f").unwrap();
        e.fail_writes.store(true, Ordering::SeqCst);
        // Dirty pages until the cache cannot take more: flushers, dflush and eviction all
        // fail, so a write must finally fail instead of dropping data.
        let err = loop {
            match f.write_all_at(&common::pattern(written, 4096), written * 4096) {
                Ok(()) => written += 1,
                Err(err) => break err,
            }
            assert!(written <= 16, "more pages dirty than frames");
        };
        assert_eq!(err.kind(), ErrorKind::Io, "{err}");
        assert!(written > 0);
        e.fail_writes.store(false, Ordering::SeqCst);
        // The earlier background failure is reported once, even though this sync's own
        // write-back succeeds...
        assert_eq!(f.sync_data().unwrap_err().kind(), ErrorKind::Io);
        // ...and then not again.
        f.sync_data().unwrap();
        // The cache works again.
        f.write_all_at(&common::pattern(written, 4096), written * 4096).unwrap();
        written += 1;
    }
    let cache = Cache::open(cfg).unwrap();
    let f = cache.open_file("f").unwrap();
    assert_eq!(f.len(), written * 4096);
    for p in 0..written {
        let mut back = vec![0u8; 4096];
        f.read_exact_at(&mut back, p * 4096).unwrap();
        assert!(back == common::pattern(p, 4096), "page {p} lost");
    }
}

#[test]
fn read_and_sync_failures_are_clean_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 16);
    let cache = Cache::create(cfg).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(9, 40 * 4096), 0).unwrap(); // more than the cache holds
    e.fail_reads.store(true, Ordering::SeqCst);
    let mut buf = vec![0u8; 40 * 4096];
    let err = f.read_exact_at(&mut buf, 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    e.fail_reads.store(false, Ordering::SeqCst);
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == common::pattern(9, 40 * 4096));
    e.fail_syncs.store(true, Ordering::SeqCst);
    assert_eq!(f.sync_data().unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(cache.sync().unwrap_err().kind(), ErrorKind::Io);
    e.fail_syncs.store(false, Ordering::SeqCst);
    cache.sync().unwrap();
}

#[test]
fn bad_configs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let ok = || Config::new(common::dirs(root, 2), 1 << 20);
    let cases: Vec<(&str, Config)> = vec![
        ("no devices", Config::new(Vec::<std::path::PathBuf>::new(), 1 << 20)),
        ("65 devices", Config::new(common::dirs(root, 65), 1 << 20)),
        ("duplicate dir", Config::new(vec![root.join("a"), root.join("a")], 1 << 20)),
        ("page 3000", ok().with_page_size(3000)),
        ("page 2048", ok().with_page_size(2048)),
        ("page 128k", ok().with_page_size(128 * 1024)),
        ("stripe not a multiple", ok().with_stripe_unit(6000)),
        ("stripe zero", ok().with_stripe_unit(0)),
        ("tiny budget", Config::new(common::dirs(root, 1), 4096 * 3)),
        ("bg above fg", ok().with_dirty_background_ratio(0.5).with_dirty_foreground_ratio(0.4)),
        ("ratio zero", ok().with_dirty_background_ratio(0.0)),
        ("ratio nan", ok().with_dirty_foreground_ratio(f64::NAN)),
        ("no flushers", ok().with_flusher_threads(0)),
    ];
    for (what, cfg) in cases {
        let err = Cache::create(cfg.clone()).err().unwrap_or_else(|| panic!("{what} accepted"));
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{what}: {err}");
        assert_eq!(Cache::open(cfg).err().unwrap().kind(), ErrorKind::InvalidConfig, "{what}");
    }
}

#[test]
fn bad_names_are_refused_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 1, 4096, 16)).unwrap();
    let long = "n".repeat(256);
    for name in ["", ".", "..", "a/b", "/abs", "nul\0byte", long.as_str()] {
        assert_eq!(cache.create_file(name).unwrap_err().kind(), ErrorKind::InvalidName, "{name:?}");
        assert_eq!(cache.open_file(name).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(cache.remove_file(name).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(cache.exists(name).unwrap_err().kind(), ErrorKind::InvalidName);
    }
    cache.create_file(&"n".repeat(255)).unwrap();
    assert!(cache.exists(&"n".repeat(255)).unwrap());
    assert!(tmp.path().read_dir().unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains('/')));
}

#[test]
fn bad_offsets_and_lengths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 1, 4096, 16)).unwrap();
    let f = cache.create_file("f").unwrap();
    assert_eq!(f.write_at(&[1], u64::MAX).unwrap_err().kind(), ErrorKind::InvalidInput);
    // At the largest file (MAX_FILE_SIZE for a file of the array): too large, as EFBIG.
    assert_eq!(f.write_at(&[1], 1 << 62).unwrap_err().kind(), ErrorKind::FileTooLarge);
    assert_eq!(f.set_len((1 << 62) + 1).unwrap_err().kind(), ErrorKind::FileTooLarge);
    assert_eq!(f.set_len(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidInput);
    let mut b = [0u8; 4];
    assert_eq!(f.read_at(&mut b, u64::MAX).unwrap(), 0);
    assert_eq!(f.read_exact_at(&mut b, 0).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(f.len(), 0);
}

#[test]
fn arrays_are_checked_on_open_and_create() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let cfg = common::config(root, 3, 4096, 16);
    // Not an array: missing or empty directory.
    assert_eq!(Cache::open(cfg.clone()).err().unwrap().kind(), ErrorKind::NotAnArray);
    std::fs::create_dir_all(root.join("dev0")).unwrap();
    assert_eq!(Cache::open(cfg.clone()).err().unwrap().kind(), ErrorKind::NotAnArray);
    drop(Cache::create(cfg.clone()).unwrap());
    // Already an array.
    assert_eq!(Cache::create(cfg.clone()).err().unwrap().kind(), ErrorKind::AlreadyExists);
    // Open twice at once.
    let c = Cache::open(cfg.clone()).unwrap();
    assert_eq!(Cache::open(cfg.clone()).err().unwrap().kind(), ErrorKind::Busy);
    drop(c);
    // Layout differs from the config.
    for bad in [
        Config::new(common::dirs(root, 3), 1 << 20).with_page_size(8192).with_stripe_unit(16384),
        cfg.clone().with_stripe_unit(4096),
        Config::new(common::dirs(root, 2), 1 << 20).with_stripe_unit(8192),
        cfg.clone().with_layout(upcache::LayoutKind::Hash),
    ] {
        assert_eq!(Cache::open(bad).err().unwrap().kind(), ErrorKind::LayoutMismatch);
    }
    // Devices listed in the wrong order.
    let mut swapped = common::dirs(root, 3);
    swapped.swap(1, 2);
    let swapped_cfg = Config::new(swapped, 16 * 4096).with_stripe_unit(8192);
    assert_eq!(Cache::open(swapped_cfg).err().unwrap().kind(), ErrorKind::LayoutMismatch);
    // A device of another array.
    let other = tempfile::tempdir().unwrap();
    drop(Cache::create(common::config(other.path(), 3, 4096, 16)).unwrap());
    let mut mixed = common::dirs(root, 3);
    mixed[2] = other.path().join("dev2");
    let mixed_cfg = Config::new(mixed, 16 * 4096).with_stripe_unit(8192);
    assert_eq!(Cache::open(mixed_cfg).err().unwrap().kind(), ErrorKind::NotAnArray);
    // A damaged catalog.
    let cat = root.join("dev0").join("upcache.catalog");
    let mut bytes = std::fs::read(&cat).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&cat, &bytes).unwrap();
    let err = Cache::open(cfg).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::NotAnArray);
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn o_direct_refusal_is_an_error_unless_buffered_is_allowed() {
    // tmpfs refuses O_DIRECT on older kernels; on newer ones there is nothing to test here.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    let cfg = common::config(shm.path(), 1, 4096, 16);
    let cache = Cache::create(cfg.clone()).unwrap();
    match cache.create_file("f") {
        Ok(_) => eprintln!("skipped: this kernel's tmpfs accepts O_DIRECT"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert!(e.to_string().contains("O_DIRECT"), "{e}");
            drop(cache);
            let cache = Cache::open(cfg.with_allow_buffered(true)).unwrap();
            let f = cache.create_file("f").unwrap();
            f.write_all_at(b"hello", 0).unwrap();
            f.sync_all().unwrap();
        }
    }
}

#[test]
fn backing_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16)).unwrap();
    cache.create_file("f").unwrap().write_all_at(&[1; 100], 0).unwrap();
    cache.sync().unwrap();
    for dev in common::dirs(tmp.path(), 2) {
        for e in std::fs::read_dir(dev).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().ends_with(".data") {
                assert_eq!(e.metadata().unwrap().permissions().mode() & 0o777, 0o600);
            }
        }
    }
}

/// An open that fails while recovering the file's tail (a device read error) gives every
/// frame it took back: with 16 frames, losing one batch of the two-layer allocator would leave
/// the cache with nothing to allocate or evict.
#[test]
fn failed_opens_give_their_frames_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (engine, config) = faulty(tmp.path(), 16);
    {
        let cache = Cache::create(config.clone()).unwrap();
        let f = cache.create_file("tail").unwrap();
        f.write_all_at(&[7u8; 100], 4096 * 3).unwrap(); // unaligned length: the tail is checked
        f.sync_all().unwrap();
    }
    let cache = Cache::open(config).unwrap();
    engine.fail_reads.store(true, Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(cache.open_file("tail").unwrap_err().kind(), ErrorKind::Io);
    }
    engine.fail_reads.store(false, Ordering::SeqCst);
    let f = cache.open_file("tail").unwrap();
    let g = cache.create_file("more").unwrap();
    for p in 0..64u64 {
        g.write_all_at(&[p as u8; 4096], p * 4096).unwrap();
    }
    let mut buf = [0u8; 100];
    f.read_exact_at(&mut buf, 4096 * 3).unwrap();
    assert_eq!(buf, [7u8; 100]);
}

/// Write-back errors reach every open description once, as the kernel's errseq: each of two
/// opens of a file reports a failed write-back at its next sync, then never again; a clone
/// shares its description; an open made after an error nobody has reported reports it, one
/// made after it was reported does not; an error found by a background write-back (not by
/// any sync) reaches every open too.
#[test]
fn a_write_back_error_reaches_each_open_description_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 64);
    let cache = Cache::create(cfg).unwrap();
    let a = cache.create_file("f").unwrap();
    let b = a.reopen().unwrap();
    let a2 = a.clone();
    a.write_all_at(&[1u8; 8192], 0).unwrap();
    e.fail_writes.store(true, Ordering::SeqCst);
    assert!(a.sync_data().is_err(), "the sync that met the failure");
    e.fail_writes.store(false, Ordering::SeqCst);
    assert_eq!(b.sync_data().unwrap_err().raw_os_error(), Some(libc_eio()), "another open");
    a.sync_data().unwrap();
    a2.sync_data().unwrap(); // a clone: the same description, which has reported it
    b.sync_data().unwrap();
    let late = a.reopen().unwrap();
    late.sync_data().unwrap(); // opened after the error was reported

    // An error nobody has reported: found by a write-back that no sync asked for.
    a.write_all_at(&[2u8; 4096], 0).unwrap();
    e.fail_writes.store(true, Ordering::SeqCst);
    assert!(a.write_back().is_err());
    e.fail_writes.store(false, Ordering::SeqCst);
    let c = cache.open_file("f").unwrap();
    b.write_all_at(&[3u8; 4096], 4096).unwrap();
    e.fail_writes.store(true, Ordering::SeqCst);
    cache.sync().unwrap_err(); // the cache-wide sync: a description of its own
    e.fail_writes.store(false, Ordering::SeqCst);
    for (name, f) in [("b", &b), ("c, opened before anyone reported it", &c), ("late", &late)] {
        assert!(f.sync_data().is_err(), "{name}: the error once");
        f.sync_data().unwrap_or_else(|e| panic!("{name}: reported twice: {e}"));
    }
    a.sync_data().unwrap_err(); // the second error, which a's write-back did not report
    a.sync_data().unwrap();
}

/// `Cache::close` returns the write-back failure that a drop could only log.
#[test]
fn close_reports_a_failed_write_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, cfg) = faulty(tmp.path(), 64);
    let cache = Cache::create(cfg.clone()).unwrap();
    let f = cache.create_file("f").unwrap();
    f.write_all_at(&common::pattern(5, 3 * 4096), 0).unwrap();
    e.fail_writes.store(true, Ordering::SeqCst);
    let err = cache.close().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eio()), "{err}");
    e.fail_writes.store(false, Ordering::SeqCst);
    // Open handles keep the array (and its lock) until they are dropped, as after a drop.
    drop(f);
    // A clean close succeeds, and the array opens again.
    let cache = Cache::open(cfg.clone()).unwrap();
    let f = cache.open_file("f").unwrap();
    f.write_all_at(b"durable", 0).unwrap();
    drop(f);
    cache.close().unwrap();
    let cache = Cache::open(cfg).unwrap();
    let mut back = [0u8; 7];
    cache.open_file("f").unwrap().read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back, b"durable");
}

/// `open_or_create` makes an array where there is none and opens it after, but never makes
/// one over a damaged array or an interrupted create.
#[test]
fn open_or_create_opens_what_exists_and_creates_only_where_nothing_is() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let cfg = common::config(root, 2, 4096, 16);
    let c = Cache::open_or_create(cfg.clone()).unwrap();
    c.create_file("kept").unwrap().write_all_at(b"x", 0).unwrap();
    c.close().unwrap();
    let c = Cache::open_or_create(cfg.clone()).unwrap();
    assert_eq!(c.list(), vec!["kept".to_string()]);
    assert_eq!(Cache::open_or_create(cfg.clone()).err().unwrap().kind(), ErrorKind::Busy);
    drop(c);
    let cat = root.join("dev0").join("upcache.catalog");
    let mut bytes = std::fs::read(&cat).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&cat, &bytes).unwrap();
    assert_eq!(Cache::open_or_create(cfg.clone()).err().unwrap().kind(), ErrorKind::NotAnArray);
    std::fs::remove_file(&cat).unwrap();
    // Markers left without a catalog: an interrupted create, not a place to make a new one.
    assert_eq!(Cache::open_or_create(cfg).err().unwrap().kind(), ErrorKind::AlreadyExists);
}

/// The same engine through `SharedArray`, whose backing files' I/O goes through the faulty
/// engine (`ArraySpec::engine`): that the engine given is the one used, and the open
/// descriptions of `SharedFile::reopen`. (`Cache` above runs on this engine too, so the other
/// faults are not tested twice.)
mod shared_engine {
    use super::*;
    use upcache::shared::{ArraySpec, SharedArray, SharedCache, SharedConfig};

    /// A private cache of `frames` 4 KiB frames, with dirty ratios `ratios`.
    fn cache(frames: u64, ratios: (f64, f64)) -> SharedCache {
        let config = SharedConfig { memory: frames * 4096, dirty_ratios: ratios, ..SharedConfig::default() };
        SharedCache::create_private(&config).unwrap()
    }

    /// The array of two devices under `root` on `cache`, made if `create`, its I/O through `e`.
    fn array(
        root: &std::path::Path,
        cache: &SharedCache,
        e: &Arc<FaultyEngine>,
        create: bool,
    ) -> SharedArray {
        let dirs = [root.join("d0"), root.join("d1")];
        let engine: Arc<dyn IoEngine> = e.clone();
        let spec = ArraySpec {
            dirs: &dirs,
            meta_dir: None,
            page_size: 4096,
            stripe_unit: 4 * 4096,
            kind: upcache::LayoutKind::Stripe,
            sims: &[],
            allow_buffered: false,
            io_threads: upcache::SubmitKind::Caller,
            engine: Some(&engine),
        };
        if create {
            SharedArray::create(cache, spec).unwrap()
        } else {
            SharedArray::open(cache, spec).unwrap()
        }
    }

    #[test]
    fn faults_of_the_array_s_own_engine_keep_pages_dirty_until_a_retry() {
        let tmp = tempfile::tempdir().unwrap();
        let e = Arc::new(FaultyEngine::default());
        let data = common::pattern(3, 5 * 4096 + 100);
        {
            let c = cache(64, (0.5, 0.75));
            let a = array(tmp.path(), &c, &e, true);
            assert_eq!(a.io_engine(), "faulty");
            let f = a.create_file("f").unwrap();
            f.write_all_at(&data, 0).unwrap();
            e.fail_writes.store(true, Ordering::SeqCst);
            let err = f.sync_data().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Io, "{err}");
            assert_eq!(err.raw_os_error(), Some(libc_eio()));
            let dirty = c.status().stats.dirty_pages;
            assert!(dirty >= 6, "pages must stay dirty: {dirty}");
            let mut back = vec![0u8; data.len()];
            f.read_exact_at(&mut back, 0).unwrap();
            assert!(back == data, "dirty data must still be readable");
            e.fail_writes.store(false, Ordering::SeqCst);
            f.sync_data().unwrap();
            assert_eq!(c.status().stats.dirty_pages, 0);
            f.close().unwrap();
        }
        let c = cache(64, (0.5, 0.75));
        let a = array(tmp.path(), &c, &e, false);
        let f = a.open_file("f", false).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
    }

    /// A write-back error reaches each open description once (`SharedFile::reopen` makes
    /// one, as `File::reopen`), those opened after it was reported never.
    #[test]
    fn a_write_back_error_reaches_each_open_description_once() {
        let tmp = tempfile::tempdir().unwrap();
        let e = Arc::new(FaultyEngine::default());
        let c = cache(64, (0.5, 0.75));
        let arr = array(tmp.path(), &c, &e, true);
        let a = arr.create_file("f").unwrap();
        let b = a.reopen().unwrap();
        a.write_all_at(&[1u8; 8192], 0).unwrap();
        e.fail_writes.store(true, Ordering::SeqCst);
        assert!(a.sync_data().is_err(), "the sync that met the failure");
        e.fail_writes.store(false, Ordering::SeqCst);
        assert_eq!(b.sync_data().unwrap_err().raw_os_error(), Some(libc_eio()), "another open");
        a.sync_data().unwrap();
        b.sync_data().unwrap();
        let late = a.reopen().unwrap();
        late.sync_data().unwrap(); // opened after the error was reported

        // An error nobody has reported: found by a write-back that no sync asked for.
        a.write_all_at(&[2u8; 4096], 0).unwrap();
        e.fail_writes.store(true, Ordering::SeqCst);
        assert!(a.write_back().is_err());
        e.fail_writes.store(false, Ordering::SeqCst);
        let c2 = arr.open_file("f", true).unwrap();
        for (name, f) in [("b", &b), ("c2, opened before anyone reported it", &c2), ("late", &late)] {
            assert!(f.sync_data().is_err(), "{name}: the error once");
            f.sync_data().unwrap_or_else(|e| panic!("{name}: reported twice: {e}"));
        }
        // Its reopens write as it does, and close as opens do.
        b.write_all_at(b"through a reopen", 100).unwrap();
        for f in [b, late, c2] {
            f.close().unwrap();
        }
        let mut back = [0u8; 16];
        a.read_exact_at(&mut back, 100).unwrap();
        assert_eq!(&back, b"through a reopen");
        a.sync_data().unwrap_err(); // the second error, which a's write-back did not report
        a.sync_data().unwrap();
        a.close().unwrap();
        assert!(arr.remove_file("f").is_ok(), "every open closed: the file is no one's");
    }
}
