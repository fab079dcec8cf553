//! [`Cache`]: the user's handle on an array. It creates or opens the array (catalog, markers,
//! metadata-log replay), builds the cache core and starts its threads, and names files.

use std::path::Path;

use super::aio::AsyncIo;
use super::file::File;
use super::queue::IoQueue;
use crate::cache::CacheInner;
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::file::{validate_name, FileInner, Placement};
use crate::frame::FrameId;
use crate::meta::array::{ArrayMeta, ArraySpec};
use crate::metrics::latency::Latencies;
use crate::metrics::Stats;
use crate::service::flusher::Flushers;
use crate::service::loader::Loader;
use crate::sync::{self, Arc, Ordering};

/// A user-space page cache over an array of device directories.
///
/// Dropping it stops the flusher threads and writes every dirty page back; [`Cache::close`]
/// does the same and returns the error if the write-back fails, which a drop can only log.
pub struct Cache {
    inner: Arc<CacheInner>,
    flushers: Flushers<CacheInner>,
    loader: Loader<CacheInner>,
    /// Shut down by `close` already: the drop has nothing left to do.
    closed: bool,
}

impl Cache {
    /// The cache core, for the crate's own tests.
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &Arc<CacheInner> {
        &self.inner
    }
}

/// The array `config` asks for.
fn spec_of(config: &Config) -> ArraySpec<'_> {
    ArraySpec {
        dirs: &config.device_dirs,
        meta_dir: config.meta_dir.as_deref(),
        page_size: config.page_size,
        stripe_unit: config.stripe_unit,
        kind: config.layout,
        sims: &config.sim_devices,
        allow_buffered: config.allow_buffered,
        io_threads: config.submit,
        engine: config.engine.as_ref(),
    }
}

impl Cache {
    /// Makes a new array in the config's device directories (created if missing) and opens
    /// it. Fails with `AlreadyExists` if any directory already holds an array.
    ///
    /// ```
    /// use upcache::{Cache, Config, ErrorKind};
    /// # let tmp = tempfile::tempdir()?;
    /// let config = Config::new([tmp.path().join("ssd0"), tmp.path().join("ssd1")], 16 << 20);
    /// let cache = Cache::create(config.clone())?;
    /// drop(cache);
    /// assert_eq!(Cache::create(config.clone()).err().map(|e| e.kind()), Some(ErrorKind::AlreadyExists));
    /// let cache = Cache::open(config)?; // the same array, its files with it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create(config: Config) -> Result<Cache> {
        config.validate()?;
        let array = ArrayMeta::create(spec_of(&config))?;
        Cache::start(config, array)
    }

    /// Opens the array in the config's device directories, or makes a new one there if the
    /// first directory holds none (missing or without an array's catalog): what a program
    /// that keeps its data in one array calls at every start. Errors as `open` and `create`.
    pub fn open_or_create(config: Config) -> Result<Cache> {
        config.validate()?;
        let array = ArrayMeta::open_or_create(spec_of(&config))?;
        Cache::start(config, array)
    }

    /// Opens an existing array. Fails with `NotAnArray` if a directory is not part of an
    /// array (or is in the wrong position) and `LayoutMismatch` if the stored layout differs
    /// from the config.
    pub fn open(config: Config) -> Result<Cache> {
        config.validate()?;
        let array = ArrayMeta::open(spec_of(&config))?;
        Cache::start(config, array)
    }

    /// Starts a cache over the array `array` (just opened and checkpointed).
    fn start(config: Config, array: ArrayMeta) -> Result<Cache> {
        let inner = Arc::new(CacheInner::new(config, array)?);
        let flushers = Flushers::start(&inner)?;
        let loader = Loader::start(&inner)?;
        Ok(Cache { inner, flushers, loader, closed: false })
    }

    /// Creates an empty file. Fails with `AlreadyExists` if the name is taken.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// let f = cache.create_file("log")?;
    /// assert!(f.is_empty());
    /// assert!(cache.create_file("log").is_err());
    /// assert_eq!(cache.open_file("log")?.name(), "log");
    /// assert_eq!(cache.list(), ["log"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_file(&self, name: &str) -> Result<File> {
        validate_name(name)?;
        let inner = &self.inner;
        let mut ns = sync::lock(&inner.array.namespace);
        let (id, backing) = inner.array.create_file(&mut ns, name, |id| inner.open_backing(id, true))?;
        let file = Arc::new(FileInner::new(
            id,
            name.to_owned(),
            0,
            inner.new_index(id),
            backing,
            Placement { layout: inner.layout, plain: false },
            inner.writeback.tracks_streams(),
        ));
        sync::write(&inner.files).insert(id, file.clone());
        Ok(File::new(file, inner.clone()))
    }

    /// Opens an existing file. Fails with `NotFound` if there is none by that name.
    pub fn open_file(&self, name: &str) -> Result<File> {
        validate_name(name)?;
        let inner = &self.inner;
        let ns = sync::lock(&inner.array.namespace);
        let e = ns.entry(name)?;
        if let Some(f) = sync::read(&inner.files).get(&e.id) {
            return Ok(File::new(f.clone(), inner.clone()));
        }
        let backing = inner.open_backing(e.id, false)?;
        let file = Arc::new(FileInner::new(
            e.id,
            name.to_owned(),
            e.len,
            inner.new_index(e.id),
            backing,
            Placement { layout: inner.layout, plain: false },
            inner.writeback.tracks_streams(),
        ));
        // Registered before its first page is cached, so that eviction can always find the
        // file to detach that page from its index.
        sync::write(&inner.files).insert(e.id, file.clone());
        if let Err(err) = inner.recover_tail(&file) {
            let _all = file.range.write(0, u64::MAX);
            inner.forget_file(&file);
            return Err(err);
        }
        Ok(File::new(file, inner.clone()))
    }

    /// Removes a file: waits for operations in flight on it, drops its cached pages (dirty ones
    /// included), logs its removal and deletes its backing files. Open handles then
    /// fail with `NotFound`.
    pub fn remove_file(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let inner = &self.inner;
        let mut ns = sync::lock(&inner.array.namespace);
        let e = ns.entry(name)?;
        let open = sync::read(&inner.files).get(&e.id).cloned();
        let all = open.as_ref().map(|f| f.range.write(0, u64::MAX));
        // Lock-free reads and pins (which take no range) fail their validation from here on and
        // wait on the range, then find the file removed; they do not start on a dying file.
        let _change = open.as_ref().map(|f| f.writes.begin());
        // The log first: if it cannot be written, the file stays whole and usable.
        inner.array.commit_remove(&mut ns, name, e)?;
        if let Some(f) = &open {
            // Release: handles that see `removed` also see everything before it.
            f.removed.store(true, Ordering::Release);
            inner.forget_file(f);
        }
        drop(all);
        inner.array.delete_backing_files(e.id);
        Ok(())
    }

    /// Whether a file of that name exists.
    pub fn exists(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        Ok(sync::lock(&self.inner.array.namespace).names.contains_key(name))
    }

    /// The length of file `name` (as `File::len` gives it if the file is open), without
    /// opening it. Fails with `NotFound` if there is no such file.
    pub fn file_len(&self, name: &str) -> Result<u64> {
        validate_name(name)?;
        let ns = sync::lock(&self.inner.array.namespace);
        let e = ns.entry(name)?;
        Ok(match sync::read(&self.inner.files).get(&e.id) {
            // Acquire: as File::len.
            Some(f) => f.len.load(Ordering::Acquire),
            None => e.len,
        })
    }

    /// Every file name, sorted.
    pub fn list(&self) -> Vec<String> {
        sync::lock(&self.inner.array.namespace).names.keys().cloned().collect()
    }

    /// Writes back every dirty page of every file, syncs the backing files and logs every
    /// changed length. Reports, once, any panic of a background thread (`ErrorKind::Internal`).
    pub fn sync(&self) -> Result<()> {
        self.inner.background.after(self.inner.sync_everything())
    }

    /// Which devices, in device order, the cache takes to be collecting garbage now, as the
    /// GC-aware eviction rule ([`crate::CleanFirst::WhileGc`]) sees them: inferred from each
    /// device's write-back latency against its own baseline (a write-back in flight far past
    /// its pages' usual time, or just ended so), since real devices do not say.
    pub fn devices_collecting(&self) -> Vec<bool> {
        (0..self.inner.config.device_dirs.len()).map(|d| self.inner.gc.collecting(d)).collect()
    }

    /// Counters and gauges.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// let f = cache.create_file("f")?;
    /// f.write_all_at(&[1; 8192], 0)?;
    /// f.read_exact_at(&mut [0; 4096], 0)?;
    /// let s = cache.stats();
    /// assert!(s.hits >= 1 && s.dirty_pages == 2);
    /// println!("{s}"); // hits 1 (33.3% of 3 lookups; ...), misses 2, ...
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Latency histograms: per operation (reads and writes sampled one in
    /// [`crate::LATENCY_SAMPLE_EVERY`] per thread, every sync) and per device (the reads and
    /// write-backs the cache waits for).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// let f = cache.create_file("f")?;
    /// f.write_all_at(b"x", 0)?;
    /// f.sync_data()?;
    /// let l = cache.latencies();
    /// assert_eq!(l.sync.count(), 1);
    /// println!("sync p99 under {:?}", l.sync.quantile(0.99).unwrap());
    /// assert!(l.device_write[0].count() >= 1); // the sync's write-back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn latencies(&self) -> Latencies {
        self.inner.latencies()
    }

    /// A handle that reads this cache's counters and histograms from any thread, for a
    /// metrics exporter. It keeps the cache's memory and the array's lock (not its threads)
    /// until dropped, as an open [`File`] does: drop it before opening the array again.
    pub fn stats_reader(&self) -> StatsReader {
        StatsReader { inner: self.inner.clone() }
    }

    /// Bytes written back so far (`Stats::writeback_bytes`), alone: a few atomic loads, no
    /// lock and no allocation, so a signal handler may watch write-back progress with it.
    pub fn written_back_bytes(&self) -> u64 {
        self.inner.metrics.writeback_bytes.get()
    }

    /// A queue for asynchronous reads and writes with up to `depth` requests in flight (1 to
    /// 4096); see [`IoQueue`]. Each queue has its own io_uring, so make one per thread.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// let f = cache.create_file("f")?;
    /// f.write_all_at(&vec![7; 64 * 4096], 0)?;
    /// let mut q = cache.queue(16)?;
    /// for i in 0..16u64 {
    ///     q.read(&f, i * 4096, vec![0; 4096], i)?; // tag i
    /// }
    /// let mut done = Vec::new();
    /// while q.in_flight() > 0 {
    ///     q.wait(1, &mut done); // at least one more completion
    /// }
    /// assert_eq!(done.len(), 16);
    /// assert!(done.iter().all(|c| c.result.as_ref().ok() == Some(&4096) && c.buf == [7; 4096]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queue(&self, depth: usize) -> Result<IoQueue> {
        self.inner.check_range_lock("queue")?;
        IoQueue::new(self.inner.clone(), depth)
    }

    /// Reads, writes and syncs as `Future`s any executor can poll, with up to `depth` reads
    /// and writes in flight (1 to 4096): see [`AsyncIo`]. One driver thread per `AsyncIo`
    /// (and one for its syncs), shared by its clones; make one and clone it.
    pub fn async_io(&self, depth: usize) -> Result<AsyncIo> {
        self.inner.check_range_lock("async_io")?;
        AsyncIo::start(
            crate::sync::Arc::as_ptr(&self.inner) as usize,
            IoQueue::new(self.inner.clone(), depth)?,
        )
    }

    /// Frames pinned right now, by any thread, queue or readahead in flight. Scans every
    /// frame: for tests and diagnostics (with no I/O running, readahead included, it must be
    /// 0, or a pin leaked).
    pub fn pinned_frames(&self) -> usize {
        let f = &self.inner.frames;
        (0..f.len()).filter(|&i| crate::frame::state::pins(f.state(i as FrameId).load()) > 0).count()
    }

    /// The name of the I/O engine in use ("uring", "psync", or a custom engine's): io_uring
    /// falls back to psync where the kernel refuses it.
    pub fn io_engine(&self) -> &'static str {
        self.inner.engine.name()
    }

    /// Changes how much of the memory budget the cache uses, while I/O runs (SAFS §4.1,
    /// linear hashing). `bytes` is rounded down to whole page sets and kept between one set
    /// and the configured budget. Only the set-associative cache ([`crate::IndexKind::SetAssoc`])
    /// resizes; other kinds fail with `Unsupported`. Shrinking evicts clean pages (writing
    /// dirty ones back first) from the sets it merges and gives the freed frames' memory back
    /// to the kernel; it fails with `Busy` if pinned pages keep a merge from completing.
    /// Returns the bytes of frames now in use.
    pub fn resize(&self, bytes: u64) -> Result<u64> {
        self.inner.resize(bytes)
    }

    /// Page size of the array.
    pub fn page_size(&self) -> usize {
        self.inner.config.page_size
    }

    /// Number of page frames.
    pub fn frame_count(&self) -> usize {
        self.inner.frames.len()
    }
}

impl Cache {
    /// Stops the cache's threads, writes every dirty page back and syncs it, and checkpoints
    /// the metadata log (so the next open replays nothing), as a drop does, but reports the
    /// first failure. After an error, pages that could not be written back are lost with the
    /// cache, as after a failed `close(2)` of a file whose write-back failed; to keep them,
    /// call [`Cache::sync`] first, which leaves them dirty on failure, and retry or save them.
    /// Open [`File`]s keep the cache's memory and the array's lock until they are dropped;
    /// drop them first.
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        self.loader.stop();
        self.flushers.stop();
        let synced = self.inner.sync_everything();
        // Even after a failed write-back: the namespace (names, lengths) is still worth
        // checkpointing.
        let checkpointed = self.inner.array.checkpoint();
        synced?;
        checkpointed
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if let Err(e) = self.shut_down() {
            log::error!("closing the cache failed (Cache::close reports it): {e}");
        }
    }
}

impl Cache {
    /// Caches the OS file at `path` (created, empty, with mode 0666 less the umask, if
    /// `create` and it does not exist). The returned handle reads, writes, syncs and resizes
    /// the OS file through the cache; other handles of the same file share its pages.
    /// O_DIRECT is used where the file system allows it, else the buffered fallback if the
    /// config allows buffered backing files; buffered always with `Config::with_plain_direct(false)`.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// let path = tmp.path().join("plain.txt");
    /// let f = cache.open_path(&path, true)?; // created if missing
    /// f.write_all_at(b"through the cache", 0)?;
    /// f.sync_data()?; // the OS file now holds it, with the cache's length
    /// assert_eq!(std::fs::read(&path)?, b"through the cache");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_path(&self, path: impl AsRef<Path>, create: bool) -> Result<File> {
        let path = path.as_ref();
        self.open_path_as(path, create, &path.display().to_string())
    }

    /// [`Cache::open_path`], with `name` as the file's name in errors and messages (for a
    /// path that says little, such as `/proc/self/fd/3`).
    pub fn open_path_as(&self, path: impl AsRef<Path>, create: bool, name: &str) -> Result<File> {
        let file = self.inner.open_plain(path.as_ref(), create, name)?;
        Ok(File::new(file, self.inner.clone()))
    }

    /// Stops caching the OS file at `path` (see [`Cache::close_plain`]). `NotFound` if it is
    /// not cached (or was renamed or unlinked since: close it by its handle then).
    pub fn close_path(&self, path: impl AsRef<Path>) -> Result<()> {
        self.inner.close_path(path.as_ref())
    }
    /// Stops caching the plain file `file` was opened on: writes its dirty pages back, makes
    /// the OS file's size its length, drops its pages and closes it (no fsync: as close(2)).
    /// Its handles then fail with `NotFound`; an open of it meanwhile waits for the close. On
    /// a write-back error nothing is dropped and the error is returned. `InvalidInput` for a
    /// file of the array.
    pub fn close_plain(&self, file: &File) -> Result<()> {
        self.inner.close_plain(plain_inner(file)?, true, file.seen())
    }

    /// Stops caching the plain file `file` was opened on without any I/O: its pages, dirty
    /// ones too, are dropped, and the OS file is left as it is. For a copy known to be stale
    /// (the OS file changed behind the cache) or already written back. `InvalidInput` for a
    /// file of the array; `NotFound` if it was closed.
    pub fn discard_plain(&self, file: &File) -> Result<()> {
        self.inner.close_plain(plain_inner(file)?, false, file.seen())
    }
}

/// The file behind `file` if it is a plain one; `InvalidInput` for a file of the array.
fn plain_inner(file: &File) -> Result<&Arc<FileInner>> {
    match file.inner() {
        f if f.plain => Ok(f),
        _ => Err(Error::new(ErrorKind::InvalidInput, format!("{:?} is not a plain file", file.name()))),
    }
}

/// Reads a cache's [`Stats`] and [`Latencies`] from anywhere ([`Cache::stats_reader`]).
#[derive(Clone)]
pub struct StatsReader {
    inner: Arc<CacheInner>,
}

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsReader").finish_non_exhaustive()
    }
}

impl StatsReader {
    /// As [`Cache::stats`].
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// As [`Cache::latencies`].
    pub fn latencies(&self) -> Latencies {
        self.inner.latencies()
    }
}
