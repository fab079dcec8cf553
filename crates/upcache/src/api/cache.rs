//! [`Cache`]: the user's handle on an array. It is the one engine (`shared/`) on a segment no
//! other process maps: a private [`SharedCache`] and the [`SharedArray`] opened on it
//! (catalog, markers, metadata-log replay), with the config's techniques.

use std::path::Path;

use super::aio::AsyncIo;
use super::file::File;
use super::queue::IoQueue;
use crate::alloc::AllocKind;
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::index::setassoc::SetPolicy;
use crate::index::IndexKind;
use crate::meta::array::ArraySpec;
use crate::metrics::latency::Latencies;
use crate::metrics::Stats;
use crate::policy::PolicyKind;
use crate::shared::{
    SharedArray, SharedCache, SharedConfig, SharedStats, MAX_SHARED_FLUSHERS, MAX_SHARED_READAHEAD,
};

/// A user-space page cache over an array of device directories.
///
/// Dropping it writes every dirty page back and stops its threads; [`Cache::close`] does the
/// same and returns the error if the write-back fails, which a drop can only log.
pub struct Cache {
    // Dropped in this order: the array (its checkpoint) before the engine it caches through.
    /// None for a cache of OS files only ([`Cache::over`]).
    array: Option<SharedArray>,
    engine: SharedCache,
    /// Shut down by `close` already: the drop has nothing left to do.
    closed: bool,
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

/// The policy that replaces pages inside a set as `p` says (the engine's sets take
/// `SharedConfig::policy`).
fn set_policy_kind(p: SetPolicy) -> PolicyKind {
    match p {
        SetPolicy::GClock => PolicyKind::GClock,
        SetPolicy::Clock => PolicyKind::Clock,
        SetPolicy::Lru => PolicyKind::Lru,
        SetPolicy::Lfu => PolicyKind::Lfu,
    }
}

/// The engine's settings for `config`. Two of its ranges are narrower than the config's:
/// readahead (at most a run, [`MAX_SHARED_READAHEAD`], a read past it goes to the loaders in
/// windows) and flushers (at most [`MAX_SHARED_FLUSHERS`]); the two-layer allocator pools the
/// whole cache's frames, so with page sets a miss takes its set's (`AllocKind::Global`).
pub(crate) fn engine_config(config: &Config) -> SharedConfig {
    let sets = config.index == IndexKind::SetAssoc;
    SharedConfig {
        memory: config.frame_count() as u64 * config.page_size as u64,
        page_size: config.page_size,
        dirty_ratios: (config.dirty_background_ratio, config.dirty_foreground_ratio),
        dirty_expire: config.dirty_expire,
        flushers: config.flusher_threads.min(MAX_SHARED_FLUSHERS as usize) as u32,
        flush: config.flush,
        streams: config.streams,
        direct_loads: config.plain_direct,
        direct_write_back: config.plain_direct,
        index: config.index,
        set_ways: config.set_ways as u32,
        policy: if sets { set_policy_kind(config.set_policy) } else { config.policy },
        clean_first: config.clean_first,
        alloc: if sets { AllocKind::Global } else { config.alloc },
        io: config.io,
        readahead: config.readahead.min(MAX_SHARED_READAHEAD),
        prefault: config.prefault,
        range_lock: config.range_lock,
        hot_index: config.hot_index,
        run_merging: config.run_merging,
        bundling: config.bundling,
        // One process: a handful of client slots (its own, and none else attach).
        clients: 4,
        ..SharedConfig::default()
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
        Cache::start(&config, SharedArray::create)
    }

    /// Opens the array in the config's device directories, or makes a new one there if the
    /// first directory holds none (missing or without an array's catalog): what a program
    /// that keeps its data in one array calls at every start. Errors as `open` and `create`.
    pub fn open_or_create(config: Config) -> Result<Cache> {
        Cache::start(&config, SharedArray::open_or_create)
    }

    /// Opens an existing array. Fails with `NotAnArray` if a directory is not part of an
    /// array (or is in the wrong position) and `LayoutMismatch` if the stored layout differs
    /// from the config.
    pub fn open(config: Config) -> Result<Cache> {
        Cache::start(&config, SharedArray::open)
    }

    /// Makes the engine for `config` and opens the array on it with `open`.
    fn start(config: &Config, open: fn(&SharedCache, ArraySpec<'_>) -> Result<SharedArray>) -> Result<Cache> {
        config.validate()?;
        let engine = SharedCache::create_private(&engine_config(config))?;
        let array = open(&engine, spec_of(config))?;
        Ok(Cache { array: Some(array), engine, closed: false })
    }

    /// A cache of OS files only ([`Cache::open_path`]) on `engine`: an attachment to the
    /// machine's shared cache (`upcache::shared::serve::connect_or_start`), or a private one
    /// (`SharedCache::create_private`). The array's calls (`create_file`, `open_file`, ...)
    /// fail with `InvalidInput`.
    pub fn over(engine: SharedCache) -> Cache {
        Cache { array: None, engine, closed: false }
    }

    /// The array, or `InvalidInput` for a cache of OS files only.
    fn array(&self) -> Result<&SharedArray> {
        self.array.as_ref().ok_or_else(|| {
            Error::new(ErrorKind::InvalidInput, "this cache holds OS files only (open them with open_path)")
        })
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
        Ok(File::new(self.array()?.create_file(name)?))
    }

    /// Opens an existing file. Fails with `NotFound` if there is none by that name.
    pub fn open_file(&self, name: &str) -> Result<File> {
        Ok(File::new(self.array()?.open_file(name, true)?))
    }

    /// Removes a file: logs its removal and deletes its backing files. Fails with `Busy`
    /// while it is open, or has pages that could not be written back.
    pub fn remove_file(&self, name: &str) -> Result<()> {
        self.array()?.remove_file(name)
    }

    /// Whether a file of that name exists.
    pub fn exists(&self, name: &str) -> Result<bool> {
        self.array()?.exists(name)
    }

    /// The length of file `name` (as `File::len` gives it if the file is open). Fails with
    /// `NotFound` if there is no such file.
    pub fn file_len(&self, name: &str) -> Result<u64> {
        self.array()?.file_len(name)
    }

    /// Every file name of the array, sorted (none for a cache of OS files only).
    pub fn list(&self) -> Vec<String> {
        self.array.as_ref().map_or_else(Vec::new, |a| a.list())
    }

    /// Writes back every dirty page of every file this process has open, syncs the backing
    /// files and logs every changed length.
    pub fn sync(&self) -> Result<()> {
        self.engine.sync_open_files()
    }

    /// Which devices, in device order, the cache takes to be collecting garbage now, as the
    /// GC-aware eviction rule ([`crate::CleanFirst::WhileGc`]) sees them: inferred from each
    /// device's write-back latency against its own baseline, since real devices do not say.
    pub fn devices_collecting(&self) -> Vec<bool> {
        self.array.as_ref().map_or_else(Vec::new, |a| a.devices_collecting())
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
        self.engine.status().stats
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
        self.engine.latencies()
    }

    /// A handle that reads this cache's counters and histograms from any thread, for a
    /// metrics exporter. It keeps the cache's memory until dropped.
    pub fn stats_reader(&self) -> StatsReader {
        StatsReader { stats: self.engine.stats_handle() }
    }

    /// Bytes written back so far (`Stats::writeback_bytes`), alone: a few atomic loads, no
    /// lock and no allocation, so a signal handler may watch write-back progress with it.
    pub fn written_back_bytes(&self) -> u64 {
        self.engine.written_back_bytes()
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
        Ok(IoQueue::new(self.engine.queue(depth)?))
    }

    /// Reads, writes and syncs as `Future`s any executor can poll, with up to `depth` reads
    /// and writes in flight (1 to 4096): see [`AsyncIo`]. One driver thread per `AsyncIo`
    /// (and one for its syncs), shared by its clones; make one and clone it.
    pub fn async_io(&self, depth: usize) -> Result<AsyncIo> {
        AsyncIo::on(&self.engine, depth)
    }

    /// Frames pinned right now, by any thread, queue or readahead in flight. Scans every
    /// frame: for tests and diagnostics (with no I/O running, it must be 0, or a pin leaked).
    pub fn pinned_frames(&self) -> usize {
        self.engine.pinned_frames()
    }

    /// The name of the I/O engine in use ("uring", "psync", with per-device threads
    /// "uring+threads" or "psync+threads", or a custom engine's).
    pub fn io_engine(&self) -> &'static str {
        match &self.array {
            Some(a) => a.io_engine(),
            None => self.engine.io_engine(),
        }
    }

    /// Changes how much of the memory budget the cache uses, while I/O runs: `bytes` rounded
    /// down to whole pages (with page sets, whole sets) and kept between the least the cache
    /// runs on and the configured budget. Shrinking writes dirty pages of the frames it gives
    /// up back, evicts them and gives their memory back to the kernel; it fails with `Busy`
    /// if pinned pages keep it from completing. Returns the bytes of frames now in use.
    pub fn resize(&self, bytes: u64) -> Result<u64> {
        self.engine.resize(bytes)
    }

    /// Page size of the array.
    pub fn page_size(&self) -> usize {
        self.engine.page_size()
    }

    /// Number of page frames.
    pub fn frame_count(&self) -> usize {
        (self.engine.config().memory / self.engine.page_size() as u64) as usize
    }

    /// Whether it caches an array (else OS files only, [`Cache::over`]).
    pub fn has_array(&self) -> bool {
        self.array.is_some()
    }

    /// The engine, for the crate's own layers (the C ABI's attach, the shim's).
    pub fn engine(&self) -> &SharedCache {
        &self.engine
    }
}

impl Cache {
    /// Writes every dirty page back and syncs it, and checkpoints the metadata log (so the
    /// next open replays nothing), as a drop does, but reports the first failure. Open
    /// [`File`]s keep the array's lock until they are dropped; drop them first.
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        let synced = self.engine.sync_open_files();
        // Even after a failed write-back: the namespace (names, lengths) is still worth
        // checkpointing.
        let checkpointed = self.array.as_ref().map_or(Ok(()), |a| a.checkpoint());
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
        let path = path.as_ref();
        if path.is_dir() {
            return Err(Error::new(ErrorKind::InvalidInput, format!("{name} is a directory")));
        }
        if create {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| Error::io(format!("create {name}"), e))?;
        }
        // A file this user may only read is cached for reading (its writes fail).
        let file = match self.engine.open_path_as(path, true, name) {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => self.engine.open_path_as(path, false, name),
            r => r,
        }?;
        Ok(File::new(file))
    }

    /// Stops caching the OS file at `path` (see [`Cache::close_plain`]). `NotFound` if it is
    /// not cached (or was renamed or unlinked since: close it by its handle then).
    pub fn close_path(&self, path: impl AsRef<Path>) -> Result<()> {
        self.engine.close_path(path.as_ref())
    }

    /// Stops caching the plain file `file` was opened on: writes its dirty pages back, makes
    /// the OS file's size its length and drops its pages (no fsync: as close(2)). On a
    /// write-back error nothing is dropped and the error is returned. `InvalidInput` for a
    /// file of the array.
    pub fn close_plain(&self, file: &File) -> Result<()> {
        plain(file)?.forget(true)
    }

    /// Stops caching the plain file `file` was opened on without any I/O: its pages, dirty
    /// ones too, are dropped, and the OS file is left as it is. For a copy known to be stale
    /// (the OS file changed behind the cache) or already written back. `InvalidInput` for a
    /// file of the array.
    pub fn discard_plain(&self, file: &File) -> Result<()> {
        plain(file)?.forget(false)
    }
}

/// The engine's file behind `file` if it is a plain one; `InvalidInput` for a file of the
/// array.
fn plain(file: &File) -> Result<&crate::shared::SharedFile> {
    match file.engine_file() {
        f if !f.is_array() => Ok(f),
        _ => Err(Error::new(ErrorKind::InvalidInput, format!("{:?} is not a plain file", file.name()))),
    }
}

/// Reads a cache's [`Stats`] and [`Latencies`] from anywhere ([`Cache::stats_reader`]).
#[derive(Clone)]
pub struct StatsReader {
    stats: SharedStats,
}

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsReader").finish_non_exhaustive()
    }
}

impl StatsReader {
    /// As [`Cache::stats`].
    pub fn stats(&self) -> Stats {
        self.stats.stats()
    }

    /// As [`Cache::latencies`].
    pub fn latencies(&self) -> Latencies {
        self.stats.latencies()
    }
}
