//! Arrays on the shared engine: files striped over a device array (SAFS §3.3), cached in a
//! private cache's frames like any other file, in the arrays' on-disk format (`meta/`:
//! catalog, device markers, metadata log, `f<id>.data` backing files). `api::Cache` is one
//! of these on a private cache.
//!
//! Only a private cache takes arrays for now: a service writes back what a killed writer
//! left through the descriptor it lent, one per file, and an array file has one per device.
//!
//! Lock order: the array's namespace mutex, then the file table's lock (an open or a remove
//! holds the first while it takes the second); nothing takes the namespace's under the
//! table's (a writer's close syncs, which logs the length, before it takes the table's).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::backing::{ArrayFile, Backing};
use super::file::SharedFile;
#[cfg(test)]
use super::frame::PAGE;
use super::{files, Inner, SharedCache};
use crate::error::{Error, ErrorKind, Result};
use crate::file::validate_name;
use crate::io::device;
use crate::io::engine::{IoEngine, SubmitKind};
use crate::meta::array::{ArrayMeta, ArraySpec};

/// An array opened on a private [`SharedCache`]: its files are read and written through the
/// cache's frames. The array's lock is held while this or any of its open files lives.
///
/// ```
/// use upcache::shared::{ArraySpec, SharedArray, SharedCache, SharedConfig};
/// # let tmp = tempfile::tempdir()?;
/// let dirs = [tmp.path().join("ssd0"), tmp.path().join("ssd1")];
/// let cache = SharedCache::create_private(&SharedConfig { memory: 4 << 20, ..SharedConfig::default() })?;
/// let kind = upcache::LayoutKind::Stripe;
/// let io_threads = upcache::SubmitKind::Caller; // or PerDevice: a thread per device
/// let spec = ArraySpec {
///     dirs: &dirs,
///     meta_dir: None,
///     page_size: 4096,
///     stripe_unit: 128 << 10,
///     kind,
///     sims: &[],
///     allow_buffered: false,
///     io_threads,
///     engine: None,
/// };
/// let array = SharedArray::create(&cache, spec)?;
/// let f = array.create_file("log")?;
/// f.write_all_at(b"striped over two devices", 0)?;
/// f.sync_data()?; // the data on both devices, the length in the array's log
/// drop((f, array));
/// let array = SharedArray::open(&cache, spec)?; // or upcache::Cache::open, the same format
/// assert_eq!(array.open_file("log", false)?.len(), 24);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SharedArray {
    inner: Arc<Inner>,
    meta: Arc<ArrayMeta>,
    /// Its backing files may be buffered where `O_DIRECT` is refused (`ArraySpec`).
    allow_buffered: bool,
    /// The engine its files' I/O goes through, if not the descriptors: the caller's
    /// (`ArraySpec::engine`), or its per-device I/O threads (`ArraySpec::io_threads`).
    engine: Option<Arc<dyn IoEngine>>,
    /// Files opened since the array was: the first open of each cuts its backing files to its
    /// logged length, which a crash may have left pages past.
    recovered: Mutex<HashSet<u64>>,
}

impl SharedArray {
    /// Makes a new array in `spec`'s directories and opens it on `cache`. Fails with
    /// `AlreadyExists` if a directory already holds an array, `Unsupported` if the cache is
    /// attached to a service, and `InvalidConfig` for pages of another size than the cache's.
    pub fn create(cache: &SharedCache, spec: ArraySpec<'_>) -> Result<SharedArray> {
        check(cache, &spec)?;
        SharedArray::over(cache, ArrayMeta::create(spec)?, &spec)
    }

    /// Opens an existing array on `cache`, as [`Self::create`] says; `NotAnArray` or
    /// `LayoutMismatch` if its directories hold no such array.
    pub fn open(cache: &SharedCache, spec: ArraySpec<'_>) -> Result<SharedArray> {
        check(cache, &spec)?;
        SharedArray::over(cache, ArrayMeta::open(spec)?, &spec)
    }

    /// Opens the array in `spec`'s directories, or makes one if the first holds none.
    pub fn open_or_create(cache: &SharedCache, spec: ArraySpec<'_>) -> Result<SharedArray> {
        check(cache, &spec)?;
        SharedArray::over(cache, ArrayMeta::open_or_create(spec)?, &spec)
    }

    fn over(cache: &SharedCache, meta: ArrayMeta, spec: &ArraySpec<'_>) -> Result<SharedArray> {
        let engine = spec.engine.cloned().or_else(|| {
            (spec.io_threads == SubmitKind::PerDevice)
                .then(|| cache.inner.io_kind().build(None, meta.dirs.len(), SubmitKind::PerDevice))
        });
        Ok(SharedArray {
            inner: cache.inner.clone(),
            meta: Arc::new(meta),
            allow_buffered: spec.allow_buffered,
            engine,
            recovered: Mutex::new(HashSet::new()),
        })
    }

    /// The engine its files' I/O goes through, as [`Cache::io_engine`](crate::Cache::io_engine)
    /// names it: "uring" (runs of several reads, and write-back's, through io_uring), "psync",
    /// with per-device I/O threads "uring+threads" or "psync+threads", or the caller's.
    pub fn io_engine(&self) -> &'static str {
        match &self.engine {
            Some(e) => e.name(),
            None => self.inner.io_kind().name(),
        }
    }

    /// Creates an empty file, open for writing. Fails with `AlreadyExists` if the name is
    /// taken.
    pub fn create_file(&self, name: &str) -> Result<SharedFile> {
        validate_name(name)?;
        let meta = &self.meta;
        let mut ns = crate::sync::lock(&meta.namespace);
        let (id, devices) = meta.create_file(&mut ns, name, |id| self.backing_files(id, true))?;
        self.lock_recovered().insert(id);
        // Under the namespace's lock, as `open_file`.
        let created = self.adopt(
            ArrayFile::new(meta.clone(), id, devices, 0, self.engine.clone(), self.bundled()),
            name,
            true,
        );
        drop(ns);
        created
    }

    /// Opens an existing file (for writing if `write`). Fails with `NotFound` if there is none
    /// by that name.
    pub fn open_file(&self, name: &str, write: bool) -> Result<SharedFile> {
        validate_name(name)?;
        // Held to the end: a remove meanwhile would delete the backing files being opened.
        let ns = crate::sync::lock(&self.meta.namespace);
        let opened = self.open_entry(ns.entry(name)?, name, write);
        drop(ns);
        opened
    }

    /// Opens file `e`, named `name`, with the namespace's lock held.
    fn open_entry(
        &self,
        e: crate::meta::namespace::NameEntry,
        name: &str,
        write: bool,
    ) -> Result<SharedFile> {
        let devices = self.backing_files(e.id, false)?;
        let file =
            ArrayFile::new(self.meta.clone(), e.id, devices, e.len, self.engine.clone(), self.bundled());
        if self.lock_recovered().insert(e.id) {
            if let Err(err) = file.recover(e.len) {
                self.lock_recovered().remove(&e.id);
                return Err(Error::io(format!("cut {name} to its logged length"), err));
            }
        }
        self.adopt(file, name, write)
    }

    /// Removes a file: logs its removal, drops its cached pages (dirty ones too) and deletes
    /// its backing files. Its open handles, here or in other threads, then fail with
    /// `NotFound` (close them); a handle's pins and reads under way end first.
    pub fn remove_file(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let meta = &self.meta;
        let mut ns = crate::sync::lock(&meta.namespace);
        let e = ns.entry(name)?;
        let first = device::backing_path(&meta.dirs[0], e.id);
        let os = std::fs::metadata(&first).ok().map(|md| files::OsFile::of(&md));
        // Open: an open of ours to drop its pages with, once the removal is logged.
        let open = match &os {
            Some(os) if self.inner.is_open(os) => Some(self.open_entry(e, name, false)?),
            Some(os) => {
                self.inner.forget_closed(os, name)?;
                None
            }
            None => None,
        };
        // The log first: if it cannot be written, the file stays whole and usable.
        meta.commit_remove(&mut ns, name, e)?;
        self.lock_recovered().remove(&e.id);
        // The name is gone: no open can reach the file from here on. The namespace's lock goes
        // before the waits for the file's writers and pins, whose holders may need it (a sync
        // or an open of another file of the array).
        drop(ns);
        if let Some(f) = open {
            f.remove_cached();
            f.close()?;
        }
        meta.delete_backing_files(e.id);
        Ok(())
    }

    /// The length of file `name`: its cached length if it is open, else its logged one.
    pub fn file_len(&self, name: &str) -> Result<u64> {
        validate_name(name)?;
        let ns = crate::sync::lock(&self.meta.namespace);
        let e = ns.entry(name)?;
        let first = device::backing_path(&self.meta.dirs[0], e.id);
        let open = std::fs::metadata(&first).ok().and_then(|md| self.inner.open_len(&files::OsFile::of(&md)));
        Ok(open.unwrap_or(e.len))
    }

    /// Whether a file of that name exists.
    pub fn exists(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        Ok(crate::sync::lock(&self.meta.namespace).names.contains_key(name))
    }

    /// Every file name, sorted.
    pub fn list(&self) -> Vec<String> {
        crate::sync::lock(&self.meta.namespace).names.keys().cloned().collect()
    }

    /// Whether each device, in device order, is taken to be collecting garbage now, as the
    /// latency of the write-backs that reached it says (GC-aware eviction, `gc.rs`; as
    /// `Cache::devices_collecting`).
    pub fn devices_collecting(&self) -> Vec<bool> {
        (0..self.meta.dirs.len())
            .map(|dev| self.inner.device_collecting(super::backing::device_number(&self.meta, dev)))
            .collect()
    }

    /// Checkpoints the metadata log (the catalog takes in every logged change, and the log
    /// starts empty), as closing the array does.
    pub fn checkpoint(&self) -> Result<()> {
        self.meta.checkpoint()
    }

    /// Whether its files' requests go over in batches (`SharedConfig::bundling`).
    fn bundled(&self) -> bool {
        self.inner.techniques & super::technique::BUNDLING != 0
    }

    fn lock_recovered(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.recovered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// File `id`'s backing file on every device, created if `create`: `O_DIRECT` (buffered
    /// where the file system refuses it, if allowed); a simulated device's, its medium
    /// (buffered).
    fn backing_files(&self, id: u64, create: bool) -> Result<Vec<device::BackingFile>> {
        let dirs = &self.meta.dirs;
        dirs.iter()
            .enumerate()
            .map(|(i, dir)| {
                device::open_backing(dir, i, id, create, self.allow_buffered, self.meta.sim(i).cloned())
            })
            .collect()
    }

    /// Caches array file `file`, named `name`.
    fn adopt(&self, file: ArrayFile, name: &str, write: bool) -> Result<SharedFile> {
        let md = file.first().metadata().map_err(|e| Error::io(format!("stat {name}'s backing file"), e))?;
        SharedFile::adopt(self.inner.clone(), Arc::new(Backing::Array(file)), &md, write, name.to_owned())
    }
}

impl std::fmt::Debug for SharedArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedArray").field("dirs", &self.meta.dirs).finish_non_exhaustive()
    }
}

impl Drop for SharedArray {
    fn drop(&mut self) {
        // Open files keep the metadata (and the lock) alive; the last one out does not
        // checkpoint, and the next open replays the log instead.
        if let Err(e) = self.meta.checkpoint() {
            log::warn!("checkpointing an array's metadata: {e}");
        }
        // The cache's flusher may be writing the array's files back, holding the metadata: the
        // lock goes with this handle only once it is done, so that a reopen right after the
        // last close finds the array free.
        if let Some(flusher) = self.inner.own_flusher.get() {
            flusher.wait_for_pass_under_way();
        }
    }
}

/// Whether `cache` can take the array `spec` asks for.
fn check(cache: &SharedCache, spec: &ArraySpec<'_>) -> Result<()> {
    if !cache.is_private() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "array files are cached only by a private shared cache: a service takes no array files yet",
        ));
    }
    let page = cache.page_size();
    if spec.page_size != page {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("the shared cache's pages are {page} bytes; the array asks for {}", spec.page_size),
        ));
    }
    if spec.dirs.is_empty() || spec.stripe_unit == 0 || !spec.stripe_unit.is_multiple_of(page as u64) {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            "an array needs at least one device directory and a stripe unit of whole pages",
        ));
    }
    Ok(())
}

impl Inner {
    /// Whether a process has the file `os` names open.
    pub(crate) fn is_open(&self, os: &files::OsFile) -> bool {
        self.open_len(os).is_some()
    }

    /// The cached length of the file `os` names, if a process has it open.
    pub(crate) fn open_len(&self, os: &files::OsFile) -> Option<u64> {
        let table = &self.view.header().files_lock;
        table.lock(self.me, |h| self.alive(h));
        // Relaxed (opens): under the table's lock. Acquire (len): as `SharedFile::len`.
        let len = self
            .view
            .files()
            .iter()
            .find(|e| e.names(os.dev, os.ino) && e.opens.load(Ordering::Relaxed) > 0)
            .map(|e| e.len.load(Ordering::Acquire));
        table.unlock(self.me);
        len
    }

    /// Forgets the file `os` names, if the table has it (closed, its pages kept): its pages
    /// match no lookup from now on, and its entry no open (its inode may name another file
    /// once the file is deleted). `Busy` if it is open, or dirty (pages that could not be
    /// written back).
    fn forget_closed(&self, os: &files::OsFile, name: &str) -> Result<()> {
        let table = &self.view.header().files_lock;
        table.lock(self.me, |h| self.alive(h));
        let found = self.view.files().iter().enumerate().find(|(_, e)| e.names(os.dev, os.ino));
        let r = match found {
            // Relaxed (opens): under the table's lock. Acquire (dirty): pairs with `mark_dirty`.
            Some((_, e)) if e.opens.load(Ordering::Relaxed) > 0 || e.dirty.load(Ordering::Acquire) > 0 => {
                Err(Error::new(ErrorKind::Busy, format!("{name} is open, or has pages not written back")))
            }
            Some((slot, e)) => {
                self.next_generation(slot as u32);
                // A record that no open matches: the next open of the inode starts afresh.
                files::OsFile { size: u64::MAX, ..*os }.record(e);
                Ok(())
            }
            None => Ok(()),
        };
        table.unlock(self.me);
        r
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::small;
    use super::super::{SharedCache, SharedConfig};
    use super::*;
    use crate::io::engine::IoKind;
    use crate::io::layout::LayoutKind;
    use std::path::PathBuf;

    const STRIPE: u64 = 4 * PAGE as u64;

    fn dirs(root: &std::path::Path, n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| root.join(format!("ssd{i}"))).collect()
    }

    fn spec(dirs: &[PathBuf], kind: LayoutKind) -> ArraySpec<'_> {
        ArraySpec {
            dirs,
            meta_dir: None,
            page_size: PAGE,
            stripe_unit: STRIPE,
            kind,
            sims: &[],
            allow_buffered: false,
            io_threads: SubmitKind::Caller,
            engine: None,
        }
    }

    /// A private cache of 64 KiB (16 frames): an array file of a few hundred KiB goes through
    /// evictions all the time.
    fn tiny() -> SharedCache {
        SharedCache::create_private(&SharedConfig { memory: 64 << 10, ..small() }).unwrap()
    }

    /// xorshift64*: the tests' operations, repeatable by seed.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    fn read_all(f: &SharedFile) -> Vec<u8> {
        let mut buf = vec![0u8; f.len() as usize];
        let n = f.read_at(&mut buf, 0).unwrap();
        assert_eq!(n, buf.len());
        buf
    }

    /// Each device's backing file holds nothing but zeros past its stripe units' pages below
    /// the length (zeros written ahead of appends, `io/zero_window.rs`, or nothing).
    fn assert_zeros_past(dirs: &[PathBuf], kind: LayoutKind, id: u64, len: u64) {
        let layout = crate::io::layout::StripeLayout::new(PAGE, STRIPE, dirs.len(), kind);
        for (dev, dir) in dirs.iter().enumerate() {
            let bytes = std::fs::read(device::backing_path(dir, id)).unwrap();
            let mine = layout.device_len(dev, len.div_ceil(PAGE as u64)) as usize;
            assert!(bytes.iter().skip(mine).all(|&b| b == 0), "device {dev}: bytes past the length");
        }
    }

    /// Random writes, reads, cuts and growths of an array file through a cache far smaller
    /// than it, against a plain vector; synced, and read back whole by a new cache over the
    /// reopened array: every layout, one to three devices.
    #[test]
    fn array_files_match_an_oracle_through_evictions_and_a_reopen() {
        for kind in LayoutKind::ALL {
            for n in 1..=3 {
                let root = tempfile::tempdir().unwrap();
                let dirs = dirs(root.path(), n);
                let mut oracle: Vec<u8> = Vec::new();
                let mut rng = Rng(0x9e37_79b9 ^ (n as u64) << 8 ^ kind.code() as u64);
                {
                    let cache = tiny();
                    let array = SharedArray::create(&cache, spec(&dirs, kind)).unwrap();
                    let f = array.create_file("data").unwrap();
                    for op in 0..300 {
                        match rng.below(10) {
                            0..=5 => {
                                let at = rng.below(300_000);
                                let len = 1 + rng.below(40_000) as usize;
                                let byte = (op % 251) as u8 + 1;
                                let buf: Vec<u8> = (0..len).map(|i| byte ^ (i as u8)).collect();
                                f.write_all_at(&buf, at).unwrap();
                                let end = at as usize + len;
                                if oracle.len() < end {
                                    oracle.resize(end, 0);
                                }
                                oracle[at as usize..end].copy_from_slice(&buf);
                            }
                            6 | 7 => {
                                let at = rng.below(oracle.len() as u64 + 1);
                                let mut buf = vec![0u8; 1 + rng.below(50_000) as usize];
                                let got = f.read_at(&mut buf, at).unwrap();
                                let want = &oracle[at as usize..(at as usize + buf.len()).min(oracle.len())];
                                assert_eq!(&buf[..got], want, "{kind:?} n {n} op {op}: read at {at}");
                            }
                            8 => {
                                let len = rng.below(320_000);
                                f.set_len(len).unwrap();
                                oracle.resize(len as usize, 0);
                            }
                            _ => f.sync_data().unwrap(),
                        }
                    }
                    assert_eq!(read_all(&f), oracle, "{kind:?} n {n}: before the reopen");
                    f.close().unwrap();
                    assert_zeros_past(&dirs, kind, 1, oracle.len() as u64);
                }
                let cache = tiny();
                let array = SharedArray::open(&cache, spec(&dirs, kind)).unwrap();
                let f = array.open_file("data", false).unwrap();
                assert_eq!(f.len(), oracle.len() as u64);
                assert_eq!(read_all(&f), oracle, "{kind:?} n {n}: after the reopen");
            }
        }
    }

    /// Voluntary context switches of this process's threads named `name` (each wait of an
    /// I/O thread for its next request is one).
    fn waits_of_threads_named(name: &str) -> u64 {
        let mut waits = 0;
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:"));
            waits += line.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).unwrap_or(0);
        }
        waits
    }

    /// Per-device I/O threads (SAFS §3.1, `ArraySpec::io_threads`) take an array's I/O, under
    /// either engine: the array names them as the in-process engine does, each device's
    /// thread serves the loads and write-backs of its device, and what went through them
    /// reads back after a reopen on an empty cache (a tiny one: evictions all along).
    #[test]
    fn per_device_io_threads_take_an_arrays_io() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for io in IoKind::ALL {
            for submit in SubmitKind::ALL {
                let root = tempfile::tempdir().unwrap();
                let dirs = dirs(root.path(), 2);
                let spec = ArraySpec { io_threads: submit, ..spec(&dirs, LayoutKind::Stripe) };
                let config = SharedConfig { memory: 64 << 10, io, ..small() };
                let want = match (io, submit) {
                    (IoKind::Uring, SubmitKind::Caller) => "uring",
                    (IoKind::Psync, SubmitKind::Caller) => "psync",
                    (IoKind::Uring, SubmitKind::PerDevice) => "uring+threads",
                    (IoKind::Psync, SubmitKind::PerDevice) => "psync+threads",
                };
                {
                    let cache = SharedCache::create_private(&config).unwrap();
                    let array = SharedArray::create(&cache, spec).unwrap();
                    assert_eq!(array.io_engine(), want);
                    let f = array.create_file("f").unwrap();
                    f.write_all_at(&data, 0).unwrap();
                    f.sync_data().unwrap();
                    f.close().unwrap();
                }
                let cache = SharedCache::create_private(&config).unwrap();
                let array = SharedArray::open(&cache, spec).unwrap();
                let before = [0, 1].map(|d| waits_of_threads_named(&format!("upcache-io-{d}")));
                let f = array.open_file("f", false).unwrap();
                assert_eq!(read_all(&f), data, "{want}");
                if submit == SubmitKind::PerDevice {
                    for (d, before) in before.into_iter().enumerate() {
                        let waits = waits_of_threads_named(&format!("upcache-io-{d}")) - before;
                        // 73 pages, 36 or 37 of them on each device, loaded a run at a time.
                        assert!(waits >= 4, "{want}: device {d}'s thread waited {waits} times");
                    }
                }
            }
        }
    }

    /// The in-process engine's arrays and the shared engine's are one format: each reads
    /// what the other wrote, names and lengths with it.
    #[test]
    fn the_in_process_engine_and_the_shared_one_read_each_others_arrays() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        let config =
            crate::Config::new(dirs.clone(), 4 << 20).with_stripe_unit(STRIPE).with_allow_buffered(true);
        let first: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        {
            let cache = crate::Cache::create(config.clone()).unwrap();
            let f = cache.create_file("a").unwrap();
            f.write_all_at(&first, 0).unwrap();
            cache.close().unwrap();
        }
        let second: Vec<u8> = (0..70_000u32).map(|i| (i % 241) as u8 ^ 0x55).collect();
        {
            let cache = tiny();
            let array = SharedArray::open(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
            let a = array.open_file("a", true).unwrap();
            assert_eq!(read_all(&a), first);
            a.write_all_at(&second, 90_000).unwrap();
            a.close().unwrap();
            array.create_file("b").unwrap().write_all_at(b"from the shared engine", 5).unwrap();
        }
        let cache = crate::Cache::open(config).unwrap();
        let mut want = first.clone();
        want.resize(160_000, 0);
        want[90_000..].copy_from_slice(&second);
        let a = cache.open_file("a").unwrap();
        let mut got = vec![0u8; a.len() as usize];
        a.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got, want);
        let b = cache.open_file("b").unwrap();
        let mut got = vec![0u8; b.len() as usize];
        b.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(&got[5..], b"from the shared engine");
        assert_eq!(got[..5], [0; 5]);
    }

    /// What a crash leaves past a file's logged length (pages written back but never logged,
    /// bytes past the length in its last page) is cut at the next open: grown again, the file
    /// reads zeros there, as a file the kernel cut does.
    #[test]
    fn bytes_past_the_logged_length_are_cut_at_open() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        {
            let cache = tiny();
            let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Rotate)).unwrap();
            let f = array.create_file("f").unwrap();
            f.write_all_at(&vec![7u8; 10_000], 0).unwrap();
            f.close().unwrap();
        }
        // As a crash after write-backs that no sync logged would leave them.
        let layout = crate::io::layout::StripeLayout::new(PAGE, STRIPE, 2, LayoutKind::Rotate);
        for page in 2..40u64 {
            let (dev, at) = layout.locate(page);
            let file =
                std::fs::OpenOptions::new().write(true).open(device::backing_path(&dirs[dev], 1)).unwrap();
            // Page 2 holds the length: its bytes past it only.
            let (junk, at) =
                if page == 2 { (vec![9u8; PAGE - 1808], at + 1808) } else { (vec![0xeeu8; PAGE], at) };
            std::os::unix::fs::FileExt::write_all_at(&file, &junk, at).unwrap();
        }
        let cache = tiny();
        let array = SharedArray::open(&cache, spec(&dirs, LayoutKind::Rotate)).unwrap();
        let f = array.open_file("f", true).unwrap();
        assert_eq!(f.len(), 10_000);
        assert_zeros_past(&dirs, LayoutKind::Rotate, 1, 10_000);
        f.set_len(200_000).unwrap();
        let all = read_all(&f);
        assert!(all[..10_000].iter().all(|&b| b == 7));
        assert!(all[10_000..].iter().all(|&b| b == 0), "zeros past the old length");
    }

    /// A cut to the middle of a page that is not cached zeros the rest of it on its device.
    #[test]
    fn a_cut_zeros_the_rest_of_its_page_on_the_device() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 3);
        let cache = tiny();
        let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Hash)).unwrap();
        let f = array.create_file("f").unwrap();
        f.write_all_at(&vec![0xabu8; 200_000], 0).unwrap();
        f.sync_data().unwrap();
        // Evict page 12 (and all): read far away, through more pages than the cache holds.
        f.write_all_at(&vec![1u8; 128 << 10], 300_000).unwrap();
        f.set_len(12 * PAGE as u64 + 100).unwrap();
        f.set_len(100_000).unwrap();
        let all = read_all(&f);
        assert!(all[..12 * PAGE + 100].iter().all(|&b| b == 0xab));
        assert!(all[12 * PAGE + 100..].iter().all(|&b| b == 0));
    }

    /// Names: a file made is listed and found, a second of the same name refused; an open file
    /// removed fails from then on, its cached pages dropped; a removed one's name is free
    /// again, its bytes gone with it.
    #[test]
    fn files_are_made_listed_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        let cache = tiny();
        let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
        let f = array.create_file("x").unwrap();
        f.write_all_at(b"bytes", 0).unwrap();
        assert_eq!(array.create_file("x").err().map(|e| e.kind()), Some(ErrorKind::AlreadyExists));
        assert_eq!(array.list(), ["x"]);
        assert_eq!(array.open_file("y", false).err().map(|e| e.kind()), Some(ErrorKind::NotFound));
        array.remove_file("x").unwrap();
        let mut buf = [1u8; 5];
        assert_eq!(f.read_at(&mut buf, 0).err().map(|e| e.kind()), Some(ErrorKind::NotFound));
        assert_eq!(f.write_at(b"x", 0).err().map(|e| e.kind()), Some(ErrorKind::NotFound));
        assert_eq!(f.sync_data().err().map(|e| e.kind()), Some(ErrorKind::NotFound));
        assert_eq!(cache.status().cached, 0, "its pages dropped");
        f.close().unwrap();
        assert!(!array.exists("x").unwrap());
        assert!(!device::backing_path(&dirs[0], 1).exists());
        let again = array.create_file("x").unwrap();
        assert_eq!(again.len(), 0);
        assert_eq!(again.read_at(&mut buf, 0).unwrap(), 0);
    }

    /// A removal of an open file waits for its pins with the namespace's lock let go: the pin's
    /// holder may sync (or open) another file of the array meanwhile, which needs that lock
    /// (found in review: the removal held it, and the two waited for each other for ever).
    #[test]
    fn a_removal_waiting_for_a_pin_lets_the_pins_holder_sync_another_file() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        let cache = tiny();
        let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
        let a = array.create_file("a").unwrap();
        let b = array.create_file("b").unwrap();
        a.write_all_at(&[3u8; PAGE], 0).unwrap();
        b.write_all_at(&[4u8; PAGE], 0).unwrap();
        let pin = a.pin(0).unwrap();
        std::thread::scope(|s| {
            let remover = s.spawn(|| array.remove_file("a"));
            // The name goes first; then the removal waits for our pin.
            while array.exists("a").unwrap() {
                std::thread::yield_now();
            }
            b.sync_data().unwrap();
            assert!(pin.iter().all(|&x| x == 3), "a pinned page changed under its guard");
            drop(pin);
            remover.join().unwrap().unwrap();
        });
        assert_eq!(a.read_at(&mut [0u8; 8], 0).err().map(|e| e.kind()), Some(ErrorKind::NotFound));
    }

    /// A cache attached to others refuses arrays; pages of another size are refused too.
    #[test]
    fn only_a_private_cache_of_its_page_size_takes_an_array() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 1);
        let shared = SharedCache::create(&small()).unwrap();
        let e = SharedArray::create(&shared, spec(&dirs, LayoutKind::Stripe)).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let private = tiny();
        let odd = ArraySpec { page_size: 8192, ..spec(&dirs, LayoutKind::Stripe) };
        assert_eq!(
            SharedArray::create(&private, odd).err().map(|e| e.kind()),
            Some(ErrorKind::InvalidConfig)
        );
        assert!(!dirs[0].exists(), "nothing made for a refused array");
    }

    /// Four threads write checksummed blocks into their own parts of one array file through
    /// a cache far smaller than it (range lock: disjoint writers at once) and sync; a new
    /// cache over the reopened array finds every block whole.
    #[test]
    fn threads_writing_one_array_file_leave_every_block_whole() {
        const BLOCK: usize = 6000; // not a page: blocks straddle pages and stripe units
        const PER_THREAD: u64 = 60;
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 3);
        let block = |t: u64, i: u64, round: u64| -> Vec<u8> {
            let mut b: Vec<u8> =
                (0..BLOCK - 8).map(|j| (t * 31 + i * 7 + round * 13 + j as u64) as u8).collect();
            let sum = b.iter().fold(0u64, |a, &x| a.wrapping_mul(31).wrapping_add(x as u64));
            b.extend_from_slice(&sum.to_le_bytes());
            b
        };
        {
            let cache = tiny();
            let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Rotate)).unwrap();
            let f = array.create_file("shared").unwrap();
            f.set_len(4 * PER_THREAD * BLOCK as u64).unwrap();
            std::thread::scope(|s| {
                for t in 0..4u64 {
                    let f = &f;
                    s.spawn(move || {
                        for round in 0..3 {
                            for i in 0..PER_THREAD {
                                let at = (t * PER_THREAD + i) * BLOCK as u64;
                                f.write_all_at(&block(t, i, round), at).unwrap();
                            }
                            f.sync_data().unwrap();
                        }
                    });
                }
            });
            f.close().unwrap();
        }
        let cache = tiny();
        let array = SharedArray::open(&cache, spec(&dirs, LayoutKind::Rotate)).unwrap();
        let f = array.open_file("shared", false).unwrap();
        for t in 0..4u64 {
            for i in 0..PER_THREAD {
                let mut got = vec![0u8; BLOCK];
                f.read_at(&mut got, (t * PER_THREAD + i) * BLOCK as u64).unwrap();
                assert_eq!(got, block(t, i, 2), "thread {t} block {i}");
            }
        }
    }

    /// An array file's `O_DIRECT` write-backs are timed on its pages' devices (GC-aware
    /// eviction, `gc.rs`): after a sync they set the device's baseline, so one write-back far
    /// slower than it makes the device collecting for the array's dirty pages.
    #[test]
    fn an_array_files_write_backs_are_timed_on_its_devices() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        let cache = tiny();
        let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
        let f = array.create_file("f").unwrap();
        let a = f.fd.array().unwrap();
        if !a.is_direct(0) {
            eprintln!("skipped: {} refuses O_DIRECT", root.path().display());
            return;
        }
        f.write_all_at(&vec![5u8; 8 * PAGE], 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(&[6u8; 10], 0).unwrap();
        let inner = &cache.inner;
        let k = inner.key(f.slot(), 0);
        assert!(!inner.collecting_key(k));
        let device = inner.view.gc().device(a.device_number_of(0)).unwrap();
        let now = super::super::gc::now_ns();
        device.end_at(None, 1, 1_000_000_000, true, now); // 1 s a page: far past the baseline
        assert!(inner.collecting_key(k), "the sync's write-backs set a baseline");
    }

    /// Appends go to an array file's end (no OS file to ask for its length), and two writers
    /// closing at once both leave their bytes and the length logged.
    #[test]
    fn appends_and_writers_closing_at_once_keep_the_length() {
        let root = tempfile::tempdir().unwrap();
        let dirs = dirs(root.path(), 2);
        {
            let cache = tiny();
            let array = SharedArray::create(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
            let (a, b) = (array.create_file("f").unwrap(), array.open_file("f", true).unwrap());
            assert_eq!(a.append(&[1u8; 5000]).unwrap(), (0, 5000));
            assert_eq!(b.append(&[2u8; 3000]).unwrap(), (5000, 3000));
            std::thread::scope(|s| {
                s.spawn(|| a.close().unwrap());
                s.spawn(|| b.close().unwrap());
            });
        }
        let cache = tiny();
        let array = SharedArray::open(&cache, spec(&dirs, LayoutKind::Stripe)).unwrap();
        let all = read_all(&array.open_file("f", false).unwrap());
        assert_eq!(all.len(), 8000);
        assert!(all[..5000].iter().all(|&x| x == 1) && all[5000..].iter().all(|&x| x == 2));
    }
}
