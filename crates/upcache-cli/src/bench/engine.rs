//! The engines under test, behind one trait: upcache, upcache's shared cache (this process
//! attached to a service, as every process of a machine would be), the kernel page cache
//! (buffered pread/pwrite), O_DIRECT (no cache at all) and RWF_DONTCACHE (buffered, uncached
//! after).
//!
//! Each engine owns a directory of its own (`<dir>/<engine>`) and the files `f0..fN-1` in it,
//! so engines never share data or cache state. Teardown removes only what setup created.

use std::alloc::{self, Layout};
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use std::sync::Arc;
use upcache::{Cache, Config, ErrorKind, Stats};
use upcache::{SimConfig, SimDevice, SimStats};

/// Alignment of every I/O buffer: what O_DIRECT needs on 4 KiB-sector devices. The other
/// engines get the same alignment so that no engine's copies are penalised by it.
pub const ALIGN: usize = 4096;

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The upcache user-space page cache.
    Upcache,
    /// Buffered pread/pwrite through the kernel page cache.
    Kernel,
    /// O_DIRECT pread/pwrite: every op goes to the device.
    Direct,
    /// Buffered preadv2/pwritev2 with RWF_DONTCACHE (Linux 6.14+): through the page cache,
    /// which drops the pages once the I/O is done.
    Dontcache,
    /// upcache's shared cache, of `--cache` bytes: a service started for the run, which this
    /// process attaches to; the files are plain files (the shim's case). It takes none of the
    /// in-process engine's technique flags yet (--policy, --streams, ...), and refuses them.
    Shared,
    /// The limit: each file in one anonymous huge-page mapping, each op one copy (or one
    /// byte per page with `--api pin`); nothing is durable. No cache's hits can beat it.
    Memory,
    /// The limit of a cache's design: `Memory` with each page found through a flat index into
    /// a shuffled arena, and pinned per page with `--api pin` (`bench/memory.rs`).
    MemoryIndexed,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Upcache => "upcache",
            EngineKind::Kernel => "kernel",
            EngineKind::Direct => "direct",
            EngineKind::Dontcache => "dontcache",
            EngineKind::Shared => "shared",
            EngineKind::Memory => "memory",
            EngineKind::MemoryIndexed => "memory-indexed",
        }
    }
}

/// A zeroed heap buffer aligned to [`ALIGN`], allocated once per thread (never per op).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is uniquely owned heap memory, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), ALIGN).context("buffer size")?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p) else { alloc::handle_alloc_error(layout) };
        Ok(AlignedBuf { ptr, layout })
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised (zeroed) bytes that we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout, and freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// upcache's settings (ignored by the other engines).
#[derive(Debug, Clone)]
pub struct UpcacheOpts {
    /// Explicit device directories; else `<root>/dev0..dev{devices-1}`.
    pub device_dirs: Option<Vec<PathBuf>>,
    /// Simulated devices with these settings (`--devices sim:N`), seeded one after another.
    pub sim: Option<upcache::SimConfig>,
    /// Metadata log directory, if not the first device directory.
    pub meta_dir: Option<PathBuf>,
    pub devices: usize,
    pub cache: u64,
    pub page_size: usize,
    pub stripe_unit: u64,
    pub flushers: usize,
    /// What a writer does past the foreground ratio.
    pub flush: upcache::FlushKind,
    /// Stream tracking of dirty pages.
    pub streams: bool,
    /// The range lock, the per-thread hot index, run merging and bundled submissions (off
    /// switches).
    pub range_lock: bool,
    pub hot_index: bool,
    pub run_merging: bool,
    pub bundling: bool,
    /// Replacement policy.
    pub policy: upcache::PolicyKind,
    /// When the policy passes over dirty pages.
    pub clean_first: upcache::CleanFirst,
    /// Background and foreground dirty ratios.
    pub dirty_ratios: (f64, f64),
    pub allow_buffered: bool,
    /// Make the frame arena resident at creation.
    pub prefault: bool,
    pub index: upcache::IndexKind,
    /// How upcache reads: copy (`read_exact_at`), pin (zero-copy guards) or async (a queue).
    pub api: Api,
    /// Requests in flight per thread with `--api async`.
    pub iodepth: usize,
    /// Reads queued before a submission with `--api async`.
    pub iodepth_batch: usize,
    pub io: upcache::IoKind,
    /// Largest readahead window in bytes (0: off).
    pub readahead: u64,
    /// Who submits I/O.
    pub io_threads: upcache::SubmitKind,
    pub alloc: upcache::AllocKind,
    pub layout: upcache::LayoutKind,
    /// Ways per set and in-set policy for `--index setassoc`.
    pub sets: (usize, upcache::SetPolicy),
    /// The shared engine's settings (`--cache` and the technique flags it takes).
    pub shared: upcache::shared::SharedConfig,
}

/// How the upcache engine reads (`--api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Api {
    /// `read_exact_at`: copy into the caller's buffer.
    #[default]
    Copy,
    /// `File::pin`: borrow each page in place and read one byte of it.
    Pin,
    /// `IoQueue`: each thread keeps `--iodepth` reads and writes in flight.
    Async,
}

impl Api {
    /// The name `--api` takes.
    pub fn name(self) -> &'static str {
        match self {
            Api::Copy => "copy",
            Api::Pin => "pin",
            Api::Async => "async",
        }
    }
}

/// A completed asynchronous op: its tag, its outcome and its buffer back.
pub type AsyncDone = (u64, Result<()>, Vec<u8>);

/// One thread's queue of asynchronous ops (`--api async`).
pub trait AsyncIo {
    /// Submits a read (or a write of `buf`) of `buf.len()` bytes of file `file` at `offset`.
    fn submit(&mut self, file: usize, offset: u64, buf: Vec<u8>, write: bool, tag: u64) -> Result<()>;
    /// Waits for at least `min` ops to complete; appends every completed one to `out`.
    fn wait(&mut self, min: usize, out: &mut Vec<AsyncDone>);
}

/// What an engine is set up with.
pub struct Setup<'a> {
    /// The engine's own directory, `<dir>/<engine>`.
    pub root: &'a Path,
    pub files: usize,
    /// Bytes in each file.
    pub size: u64,
    pub upcache: &'a UpcacheOpts,
}

/// An engine: files it can read and write at offsets from many threads at once.
pub trait Engine: Sync + Sized {
    /// Creates the engine's (empty) files.
    fn setup(s: &Setup) -> Result<Self>;
    /// Reads exactly `buf.len()` bytes of file `file` at `offset` the way the measured phase
    /// does (for `--api pin`, not every byte lands in `buf`).
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Reads every byte into `buf`, for the warm-up's data check.
    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read(file, buf, offset)
    }
    /// Writes all of `buf` to file `file` at `offset`.
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()>;
    /// After the prefill: make the data durable, so the measured phase does not also pay for
    /// writing back the prefill; then, unless `warm`, drop every cached page so it starts cold.
    fn settle(&mut self, warm: bool) -> Result<()>;
    /// After the measured phase (untimed): write back everything the phase dirtied.
    fn flush(&self) -> Result<()>;
    /// Makes file `file`'s written data durable, as fdatasync does (`--fsync`).
    fn sync_data(&self, file: usize) -> Result<()>;
    /// Cache counters, for engines that have them.
    fn stats(&self) -> Option<Stats> {
        None
    }
    /// Counters of the simulated devices, summed, for engines that have them.
    fn sim_stats(&self) -> Option<SimStats> {
        None
    }
    /// The I/O engine in use, for engines that choose one.
    fn io_name(&self) -> Option<&'static str> {
        None
    }
    /// A queue of asynchronous ops for one thread, if the engine runs `--api async`.
    fn queue(&self, depth: usize) -> Result<Option<Box<dyn AsyncIo + '_>>> {
        let _ = depth;
        Ok(None)
    }
    /// Removes the files and directories setup created (unless `keep`) and closes everything.
    fn teardown(self, keep: bool) -> Result<()>;
}

fn file_name(i: usize) -> String {
    format!("f{i}")
}

/// Creates `dir` (and parents); returns the directories that did not exist before, outermost
/// first, so teardown removes exactly those.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.as_os_str().is_empty() || p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    missing.reverse();
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(missing)
}

/// An array's device directories: `o`'s, else `<root>/dev0..`; made if missing. The
/// directories and those of them (and their parents) that did not exist before.
fn device_dirs(o: &UpcacheOpts, root: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let dirs: Vec<PathBuf> = match &o.device_dirs {
        Some(d) => d.clone(),
        None => (0..o.devices).map(|i| root.join(format!("dev{i}"))).collect(),
    };
    let mut created = Vec::new();
    for d in &dirs {
        created.extend(create_dirs(d)?);
    }
    Ok((dirs, created))
}

/// Where the device directories go: simulated devices keep their data in memory (tmpfs)
/// where the host has one.
fn device_root(o: &UpcacheOpts, root: &Path) -> PathBuf {
    match &o.sim {
        Some(_) if Path::new("/dev/shm").is_dir() => {
            PathBuf::from(format!("/dev/shm/upcache-sim-{}", std::process::id()))
        }
        _ => root.to_path_buf(),
    }
}

/// The `n` simulated devices `--devices sim:N` asks for (none without), seeded one after
/// another.
fn sim_devices(o: &UpcacheOpts, n: usize) -> Result<Vec<Arc<SimDevice>>> {
    let Some(sc) = &o.sim else { return Ok(Vec::new()) };
    (0..n)
        .map(|i| Ok(SimDevice::new(SimConfig { seed: sc.seed.wrapping_add(i as u64), ..sc.clone() })?))
        .collect()
}

/// The simulated devices' counters, summed; None if there are none.
fn summed_sim_stats(sims: &[Arc<SimDevice>]) -> Option<SimStats> {
    (!sims.is_empty()).then(|| {
        sims.iter().map(|d| d.stats()).fold(SimStats::default(), |a, b| SimStats {
            reads: a.reads + b.reads,
            writes: a.writes + b.writes,
            read_bytes: a.read_bytes + b.read_bytes,
            write_bytes: a.write_bytes + b.write_bytes,
            flushes: a.flushes + b.flushes,
            gc_episodes: a.gc_episodes + b.gc_episodes,
            gc_delayed: a.gc_delayed + b.gc_delayed,
            faults: a.faults + b.faults,
        })
    })
}

/// Removes an array's own files (catalog, markers, lock, metadata logs) from its device
/// directories, its files removed before.
fn remove_array_files(dirs: &[PathBuf]) {
    for d in dirs {
        for m in UPCACHE_META {
            let _ = fs::remove_file(d.join(m));
        }
        remove_metadata_logs(d);
    }
}

/// Removes directories we created, innermost first; one that is not empty is left alone.
fn remove_created_dirs(created: &[PathBuf]) {
    for d in created.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}

// ---------------------------------------------------------------------------------------------

/// The upcache engine.
pub struct UpcacheEngine {
    config: Config,
    dirs: Vec<PathBuf>,
    /// Our directory inside `--meta-dir`, if given.
    meta_dir: Option<PathBuf>,
    created: Vec<PathBuf>,
    cache: Option<Cache>,
    files: Vec<upcache::File>,
    /// Reads pin pages instead of copying (`--api pin`).
    pin: bool,
    /// Threads run queues (`--api async`) that submit in batches of this many reads.
    queued: Option<usize>,
    page_size: u64,
    /// The simulated devices (`--devices sim:N`).
    sims: Vec<Arc<SimDevice>>,
}

/// A queue over an engine's files (the two engines' queues have the same calls).
macro_rules! queue_io {
    ($(#[$doc:meta])* $name:ident, $queue:ty, $file:ty) => {
        $(#[$doc])*
        struct $name<'a> {
            queue: $queue,
            files: &'a [$file],
            done: Vec<upcache::Completion>,
        }

        impl AsyncIo for $name<'_> {
            fn submit(&mut self, file: usize, offset: u64, buf: Vec<u8>, write: bool, tag: u64) -> Result<()> {
                let f = &self.files[file];
                Ok(if write { self.queue.write(f, offset, buf, tag) } else { self.queue.read(f, offset, buf, tag) }?)
            }

            fn wait(&mut self, min: usize, out: &mut Vec<AsyncDone>) {
                self.queue.wait(min, &mut self.done);
                out.extend(self.done.drain(..).map(completed));
            }
        }
    };
}

queue_io!(
    /// An upcache `IoQueue` over the engine's files.
    UpcacheQueue,
    upcache::IoQueue,
    upcache::File
);

/// Files the library keeps in each device directory besides the backing files (which
/// `remove_file` deletes) and the metadata logs (`is_metadata_log`). The library has no
/// "destroy array" call, so teardown names them.
const UPCACHE_META: [&str; 4] = ["upcache.catalog", "upcache.catalog.tmp", "upcache.device", "upcache.lock"];

/// Removes the metadata logs (`upcache.<array>.metalog.<generation>`) in `dir`.
fn remove_metadata_logs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("upcache.") && name.contains(".metalog.") {
            let _ = fs::remove_file(e.path());
        }
    }
}

impl UpcacheEngine {
    fn cache(&self) -> &Cache {
        // `cache` is None only inside `settle` and `teardown`.
        self.cache.as_ref().expect("cache is open")
    }
}

impl Engine for UpcacheEngine {
    fn setup(s: &Setup) -> Result<Self> {
        let o = s.upcache;
        let (dirs, mut created) = device_dirs(o, &device_root(o, s.root))?;
        // A directory of its own inside --meta-dir, so that teardown removes only our logs.
        let meta_dir = o.meta_dir.as_ref().map(|m| m.join(format!("upcache-bench-{}", std::process::id())));
        if let Some(m) = &meta_dir {
            created.extend(create_dirs(m)?);
        }
        let mut config = Config::new(dirs.clone(), o.cache)
            .with_page_size(o.page_size)
            .with_stripe_unit(o.stripe_unit)
            .with_flusher_threads(o.flushers)
            .with_flush(o.flush)
            .with_streams(o.streams)
            .with_range_lock(o.range_lock)
            .with_hot_index(o.hot_index)
            .with_run_merging(o.run_merging)
            .with_bundling(o.bundling)
            .with_policy(o.policy)
            .with_clean_first(o.clean_first)
            .with_dirty_background_ratio(o.dirty_ratios.0)
            .with_dirty_foreground_ratio(o.dirty_ratios.1)
            .with_allow_buffered(o.allow_buffered)
            .with_prefault(o.prefault)
            .with_index(o.index)
            .with_alloc(o.alloc)
            .with_layout(o.layout)
            .with_io(o.io)
            .with_readahead(o.readahead)
            .with_io_threads(o.io_threads)
            .with_sets(o.sets.0, o.sets.1);
        if let Some(m) = &meta_dir {
            config = config.with_meta_dir(m);
        }
        let sims = sim_devices(o, dirs.len())?;
        for (i, dev) in sims.iter().enumerate() {
            config = config.with_sim_device(i, dev.clone());
        }
        let cache = match Cache::create(config.clone()) {
            Ok(c) => c,
            Err(e) => {
                remove_created_dirs(&created);
                let hint = match e.kind() {
                    ErrorKind::AlreadyExists => " (left by --keep? remove it or use another --dir)",
                    ErrorKind::Unsupported => " (the file system refuses O_DIRECT; try --allow-buffered)",
                    _ => "",
                };
                bail!("creating the upcache array in {}: {e}{hint}", dirs[0].display());
            }
        };
        let mut files = Vec::with_capacity(s.files);
        for i in 0..s.files {
            files
                .push(cache.create_file(&file_name(i)).with_context(|| format!("create upcache file f{i}"))?);
        }
        let (pin, page_size) = (o.api == Api::Pin, o.page_size as u64);
        let queued = (o.api == Api::Async).then_some(o.iodepth_batch);
        crate::metrics::publish(Some(cache.stats_reader()));
        Ok(UpcacheEngine {
            config,
            dirs,
            meta_dir,
            created,
            cache: Some(cache),
            files,
            pin,
            queued,
            page_size,
            sims,
        })
    }

    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        Ok(self.files[file].read_exact_at(buf, offset)?)
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        if !self.pin {
            return Ok(self.files[file].read_exact_at(buf, offset)?);
        }
        // Zero-copy: pin each page of the block and read one byte of it in place (what an
        // application that works on the page where it lies would start with).
        let end = offset + buf.len() as u64;
        let mut pos = offset;
        let mut i = 0;
        while pos < end {
            let page = self.files[file].pin(pos)?;
            buf[i] = page[(pos - page.offset()) as usize];
            let next = page.offset() + self.page_size;
            i += (next.min(end) - pos) as usize;
            pos = next;
        }
        Ok(())
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        Ok(self.files[file].write_all_at(buf, offset)?)
    }

    fn sync_data(&self, file: usize) -> Result<()> {
        Ok(self.files[file].sync_data()?)
    }

    fn settle(&mut self, warm: bool) -> Result<()> {
        self.cache().sync().context("upcache sync after prefill")?;
        if !warm {
            // Close and reopen: the only way to empty the cache, and what a cold start is.
            let n = self.files.len();
            self.files.clear();
            // The published reader holds the array open too.
            crate::metrics::publish(None);
            drop(self.cache.take());
            let cache = Cache::open(self.config.clone()).context("reopen the upcache array")?;
            for i in 0..n {
                self.files.push(cache.open_file(&file_name(i)).with_context(|| format!("reopen f{i}"))?);
            }
            crate::metrics::publish(Some(cache.stats_reader()));
            self.cache = Some(cache);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(self.cache().sync()?)
    }

    fn stats(&self) -> Option<Stats> {
        Some(self.cache().stats())
    }

    fn io_name(&self) -> Option<&'static str> {
        Some(self.cache().io_engine())
    }

    fn sim_stats(&self) -> Option<SimStats> {
        summed_sim_stats(&self.sims)
    }

    fn queue(&self, depth: usize) -> Result<Option<Box<dyn AsyncIo + '_>>> {
        let Some(batch) = self.queued else { return Ok(None) };
        let mut queue = self.cache().queue(depth).context("make an upcache queue")?;
        queue.set_submit_batch(batch);
        Ok(Some(Box::new(UpcacheQueue { queue, files: &self.files, done: Vec::new() })))
    }

    fn teardown(mut self, keep: bool) -> Result<()> {
        crate::metrics::publish(None);
        let files = std::mem::take(&mut self.files);
        let cache = self.cache.take().expect("cache is open");
        if keep {
            drop(files);
            drop(cache); // writes back anything still dirty
            return Ok(());
        }
        for f in files {
            let name = f.name().to_owned();
            drop(f);
            cache.remove_file(&name).with_context(|| format!("remove upcache file {name}"))?;
        }
        drop(cache);
        remove_array_files(&self.dirs);
        if let Some(m) = &self.meta_dir {
            remove_metadata_logs(m);
        }
        remove_created_dirs(&self.created);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

/// Plain files in `root`, shared by the kernel and direct engines.
struct PlainFiles {
    paths: Vec<PathBuf>,
    files: Vec<fs::File>,
    created: Vec<PathBuf>,
}

impl PlainFiles {
    fn create(s: &Setup, direct: bool) -> Result<PlainFiles> {
        let created = create_dirs(s.root)?;
        let mut out = PlainFiles { paths: Vec::new(), files: Vec::new(), created };
        for i in 0..s.files {
            let path = s.root.join(file_name(i));
            let mut oo = OpenOptions::new();
            oo.read(true).write(true).create(true).truncate(true);
            if direct {
                oo.custom_flags(libc::O_DIRECT);
            }
            let f = match oo.open(&path) {
                Ok(f) => f,
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    let _ = out.remove();
                    bail!("the file system of {} does not support O_DIRECT", s.root.display())
                }
                Err(e) => {
                    let _ = out.remove();
                    return Err(e).with_context(|| format!("create {}", path.display()));
                }
            };
            out.paths.push(path);
            out.files.push(f);
        }
        Ok(out)
    }

    fn sync(&self) -> Result<()> {
        for (f, p) in self.files.iter().zip(&self.paths) {
            f.sync_data().with_context(|| format!("fsync {}", p.display()))?;
        }
        Ok(())
    }

    /// Removes the files unless `keep`.
    fn teardown(mut self, keep: bool) -> Result<()> {
        if keep {
            return Ok(());
        }
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        self.files.clear();
        for p in &self.paths {
            fs::remove_file(p).with_context(|| format!("remove {}", p.display()))?;
        }
        remove_created_dirs(&self.created);
        Ok(())
    }
}

/// Plain files read and written with pread/pwrite: through the kernel page cache
/// ([`KernelEngine`]) or with O_DIRECT, every op reaching the device ([`DirectEngine`]; buffers,
/// offsets and lengths must be multiples of [`ALIGN`], which the caller checks).
pub struct PlainEngine<const DIRECT: bool>(PlainFiles);

/// Buffered I/O through the kernel page cache.
pub type KernelEngine = PlainEngine<false>;
/// O_DIRECT I/O: no cache.
pub type DirectEngine = PlainEngine<true>;

impl<const DIRECT: bool> Engine for PlainEngine<DIRECT> {
    fn setup(s: &Setup) -> Result<Self> {
        PlainFiles::create(s, DIRECT).map(PlainEngine)
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        Ok(self.0.files[file].read_exact_at(buf, offset)?)
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        Ok(self.0.files[file].write_all_at(buf, offset)?)
    }

    fn sync_data(&self, file: usize) -> Result<()> {
        Ok(self.0.files[file].sync_data()?)
    }

    fn settle(&mut self, warm: bool) -> Result<()> {
        // With O_DIRECT the data is on the device already; this persists the file sizes.
        self.0.sync()?;
        if !DIRECT && !warm {
            use std::os::fd::AsRawFd;
            for (f, p) in self.0.files.iter().zip(&self.0.paths) {
                // DONTNEED drops only clean pages, hence the fsync above.
                // SAFETY: an advisory call on an fd we own; no memory is involved.
                let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                if r != 0 {
                    let e = std::io::Error::from_raw_os_error(r);
                    return Err(e).with_context(|| format!("posix_fadvise DONTNEED {}", p.display()));
                }
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.0.sync()
    }

    fn teardown(self, keep: bool) -> Result<()> {
        self.0.teardown(keep)
    }
}

/// Plain files in upcache's shared cache, through a service started for the run (its socket
/// in the engine's directory; it exits a second after we detach); with `--devices N` (N > 1)
/// or `--device-dirs`, files of an array striped over them, as the in-process engine's, on a
/// private shared cache (a service takes no array files yet).
pub struct SharedEngine {
    kind: SharedFiles,
    /// Shared with the threads' queues' requests (`--api async`).
    files: Vec<Arc<upcache::shared::SharedFile>>,
    cache: Option<upcache::shared::SharedCache>,
    /// Reads pin pages instead of copying (`--api pin`).
    pin: bool,
    /// Threads run queues (`--api async`) that submit in batches of this many reads.
    queued: Option<usize>,
    /// The cache's page size (`--page-size`).
    page_size: u64,
}

queue_io!(
    /// A shared cache's queue over the engine's files.
    SharedQueueIo,
    upcache::shared::SharedQueue,
    Arc<upcache::shared::SharedFile>
);

/// A queue's completion as the workers count it: a short transfer is an error.
fn completed(c: upcache::Completion) -> AsyncDone {
    let len = c.buf.len();
    let r = match c.result {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(anyhow::anyhow!("short transfer: {n} of {len} bytes")),
        Err(e) => Err(e.into()),
    };
    (c.tag, r, c.buf)
}

/// How the shared engine's array is laid out and reached: page size, stripe unit, layout,
/// buffered backing files allowed, who submits its I/O.
#[derive(Clone, Copy)]
struct ArrayShape {
    page_size: usize,
    stripe_unit: u64,
    kind: upcache::LayoutKind,
    allow_buffered: bool,
    io_threads: upcache::SubmitKind,
}

/// Where the shared engine's files are.
enum SharedFiles {
    Plain(PlainFiles),
    Array {
        array: Option<upcache::shared::SharedArray>,
        dirs: Vec<PathBuf>,
        created: Vec<PathBuf>,
        /// The simulated devices (`--devices sim:N`).
        sims: Vec<Arc<SimDevice>>,
        /// What a cold start makes the cache and opens the array with again.
        config: Box<upcache::shared::SharedConfig>,
        layout: ArrayShape,
        /// The metadata log's directory (`--meta-dir`), one of our own inside it.
        meta: Option<PathBuf>,
    },
}

impl SharedEngine {
    /// The files of an array in `o`'s device directories, on a private cache.
    fn array(s: &Setup) -> Result<Self> {
        use upcache::shared::SharedCache;
        let o = s.upcache;
        let (dirs, mut created) = device_dirs(o, &device_root(o, s.root))?;
        // As the in-process engine's: a directory of its own inside --meta-dir.
        let meta = o.meta_dir.as_ref().map(|m| m.join(format!("upcache-bench-{}", std::process::id())));
        if let Some(m) = &meta {
            created.extend(create_dirs(m)?);
        }
        let cache = SharedCache::create_private(&o.shared).context("make a private shared cache")?;
        let sims = sim_devices(o, dirs.len())?;
        let layout = ArrayShape {
            page_size: o.page_size,
            stripe_unit: o.stripe_unit,
            kind: o.layout,
            allow_buffered: o.allow_buffered,
            io_threads: o.io_threads,
        };
        let array = match SharedEngine::open_array(&cache, &dirs, layout, meta.as_deref(), &sims, true) {
            Ok(a) => a,
            Err(e) => {
                remove_created_dirs(&created);
                bail!("creating the array in {}: {e}", dirs[0].display());
            }
        };
        let files = (0..s.files)
            .map(|i| array.create_file(&file_name(i)).map(Arc::new))
            .collect::<upcache::Result<Vec<_>>>()
            .context("create the array's files")?;
        let config = Box::new(o.shared.clone());
        let kind = SharedFiles::Array { array: Some(array), dirs, created, sims, config, layout, meta };
        let (pin, queued) = (o.api == Api::Pin, (o.api == Api::Async).then_some(o.iodepth_batch));
        let page_size = cache.page_size() as u64;
        Ok(SharedEngine { kind, files, cache: Some(cache), pin, queued, page_size })
    }

    fn open_array(
        cache: &upcache::shared::SharedCache,
        dirs: &[PathBuf],
        shape: ArrayShape,
        meta_dir: Option<&Path>,
        sims: &[Arc<SimDevice>],
        create: bool,
    ) -> upcache::Result<upcache::shared::SharedArray> {
        use upcache::shared::{ArraySpec, SharedArray};
        let by_device: Vec<_> = sims.iter().cloned().enumerate().collect();
        let spec = ArraySpec {
            dirs,
            meta_dir,
            page_size: shape.page_size,
            stripe_unit: shape.stripe_unit,
            kind: shape.kind,
            sims: &by_device,
            allow_buffered: shape.allow_buffered,
            io_threads: shape.io_threads,
            engine: None,
        };
        if create {
            SharedArray::create(cache, spec)
        } else {
            SharedArray::open(cache, spec)
        }
    }

    /// A cold start of an array's private cache: everything closed, a new cache made, the
    /// array and its files opened again (as the in-process engine's `settle`), so that the
    /// measured phase starts from an empty cache whose memory is untouched, as that engine's.
    fn restart_array(&mut self) -> Result<()> {
        let SharedFiles::Array { array, dirs, sims, config, layout, meta, .. } = &mut self.kind else {
            return Ok(());
        };
        let n = self.files.len();
        self.files.clear();
        drop(array.take());
        drop(self.cache.take());
        let cache =
            upcache::shared::SharedCache::create_private(config).context("make a private shared cache")?;
        let reopened = SharedEngine::open_array(&cache, dirs, *layout, meta.as_deref(), sims, false)
            .context("reopen the array")?;
        for i in 0..n {
            let f = reopened.open_file(&file_name(i), true).with_context(|| format!("reopen f{i}"))?;
            self.files.push(Arc::new(f));
        }
        *array = Some(reopened);
        self.cache = Some(cache);
        Ok(())
    }
}

impl Engine for SharedEngine {
    fn setup(s: &Setup) -> Result<Self> {
        use upcache::shared::serve;
        let o = s.upcache;
        if o.devices > 1 || o.device_dirs.is_some() || o.sim.is_some() || o.meta_dir.is_some() {
            return SharedEngine::array(s);
        }
        let plain = PlainFiles::create(s, false)?;
        let socket = s.root.join("service/cache.sock");
        let cache = serve::connect_or_start(&socket, &s.upcache.shared, std::time::Duration::from_secs(1))
            .context("attach to a shared cache")?;
        let files = plain
            .paths
            .iter()
            .map(|p| cache.open_path(p, true).map(Arc::new))
            .collect::<upcache::Result<Vec<_>>>()
            .context("open through the shared cache")?;
        let o = s.upcache;
        let (pin, queued) = (o.api == Api::Pin, (o.api == Api::Async).then_some(o.iodepth_batch));
        let page_size = cache.page_size() as u64;
        Ok(SharedEngine {
            kind: SharedFiles::Plain(plain),
            files,
            cache: Some(cache),
            pin,
            queued,
            page_size,
        })
    }

    fn read_all(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        let n = self.files[file].read_at(buf, offset)?;
        if n < buf.len() {
            bail!("short read: {n} of {} bytes", buf.len());
        }
        Ok(())
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.pin {
            // As the in-process engine's `--api pin`: one byte of each page, in place.
            let page = self.page_size;
            let (end, mut pos, mut i) = (offset + buf.len() as u64, offset, 0);
            while pos < end {
                let pinned = self.files[file].pin(pos)?;
                buf[i] = pinned[(pos - pinned.offset()) as usize];
                let next = pinned.offset() + page;
                i += (next.min(end) - pos) as usize;
                pos = next;
            }
            return Ok(());
        }
        let n = self.files[file].read_at(buf, offset)?;
        if n < buf.len() {
            bail!("short read: {n} of {} bytes", buf.len());
        }
        Ok(())
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        Ok(self.files[file].write_all_at(buf, offset)?)
    }

    fn sync_data(&self, file: usize) -> Result<()> {
        Ok(self.files[file].sync_data()?)
    }

    fn settle(&mut self, warm: bool) -> Result<()> {
        for f in &self.files {
            f.sync_data()?;
            if !warm && matches!(self.kind, SharedFiles::Plain(_)) {
                f.evict(0, 0)?;
            }
        }
        if !warm {
            self.restart_array()?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        for f in &self.files {
            f.sync_data()?;
        }
        Ok(())
    }

    fn sim_stats(&self) -> Option<SimStats> {
        match &self.kind {
            SharedFiles::Array { sims, .. } => summed_sim_stats(sims),
            SharedFiles::Plain(_) => None,
        }
    }

    /// An array's engine (its per-device threads too); plain files' write-back engine.
    fn io_name(&self) -> Option<&'static str> {
        match &self.kind {
            SharedFiles::Array { array, .. } => array.as_ref().map(|a| a.io_engine()),
            SharedFiles::Plain(_) => Some(self.cache.as_ref()?.config().io.name()),
        }
    }

    /// The shared cache's counters, as the in-process engine's (every process's, since the
    /// cache was made: the run's own, as its service starts with it).
    fn stats(&self) -> Option<Stats> {
        Some(self.cache.as_ref()?.status().stats)
    }

    fn queue(&self, depth: usize) -> Result<Option<Box<dyn AsyncIo + '_>>> {
        let Some(batch) = self.queued else { return Ok(None) };
        let cache = self.cache.as_ref().expect("the cache is open");
        let mut queue = cache.queue(depth).context("make a shared queue")?;
        queue.set_submit_batch(batch);
        Ok(Some(Box::new(SharedQueueIo { queue, files: &self.files, done: Vec::new() })))
    }

    fn teardown(mut self, keep: bool) -> Result<()> {
        for f in self.files.drain(..) {
            // The threads' queues, and their requests' handles, ended with the run.
            let f = Arc::try_unwrap(f).map_err(|_| anyhow::anyhow!("a shared file still in a queue"))?;
            f.close()?;
        }
        match &mut self.kind {
            SharedFiles::Plain(plain) => {
                drop(self.cache.take());
                let _ = fs::remove_dir_all(plain.paths[0].parent().unwrap_or(Path::new(".")).join("service"));
                if !keep {
                    plain.remove()?;
                }
            }
            SharedFiles::Array { array, dirs, created, meta, .. } => {
                let array = array.take().expect("the array is open");
                if !keep {
                    for name in array.list() {
                        array.remove_file(&name).with_context(|| format!("remove array file {name}"))?;
                    }
                }
                drop(array);
                drop(self.cache.take());
                if !keep {
                    remove_array_files(dirs);
                    if let Some(m) = meta {
                        remove_metadata_logs(m);
                    }
                    remove_created_dirs(created);
                }
            }
        }
        Ok(())
    }
}

/// RWF_DONTCACHE from the kernel's uapi `linux/fs.h` (not in the `libc` crate yet).
const RWF_DONTCACHE: libc::c_int = 0x80;

/// Buffered I/O with RWF_DONTCACHE on every call: uses the page cache for the I/O itself and
/// drops the pages right after (Linux 6.14+, on file systems that support it).
pub struct DontcacheEngine(PlainFiles);

impl DontcacheEngine {
    fn io(&self, file: usize, buf: *mut u8, len: usize, mut offset: u64, write: bool) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.0.files[file].as_raw_fd();
        let mut done = 0;
        while done < len {
            let iov =
                libc::iovec { iov_base: buf.wrapping_add(done) as *mut libc::c_void, iov_len: len - done };
            // SAFETY: `buf[done..len]` is valid for the call (a `&[u8]` for writes, which the
            // kernel only reads, or a `&mut [u8]` for reads); one iovec; `fd` is a file we own.
            let n = unsafe {
                if write {
                    libc::pwritev2(fd, &iov, 1, offset as libc::off_t, RWF_DONTCACHE)
                } else {
                    libc::preadv2(fd, &iov, 1, offset as libc::off_t, RWF_DONTCACHE)
                }
            };
            match n {
                n if n < 0 => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => {
                    done += n as usize;
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

impl Engine for DontcacheEngine {
    fn setup(s: &Setup) -> Result<Self> {
        let eng = DontcacheEngine(PlainFiles::create(s, false)?);
        // Probe: one byte at offset 0 (the prefill overwrites it).
        let mut probe = [0u8; 1];
        if let Err(e) = eng.io(0, probe.as_mut_ptr(), 1, 0, true) {
            let mut eng = eng;
            let _ = eng.0.remove();
            if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) {
                bail!("RWF_DONTCACHE is not supported here (needs Linux 6.14+ and file system support): {e}");
            }
            return Err(e).context("probe RWF_DONTCACHE");
        }
        Ok(eng)
    }

    #[inline]
    fn read(&self, file: usize, buf: &mut [u8], offset: u64) -> Result<()> {
        Ok(self.io(file, buf.as_mut_ptr(), buf.len(), offset, false)?)
    }

    #[inline]
    fn write(&self, file: usize, buf: &[u8], offset: u64) -> Result<()> {
        Ok(self.io(file, buf.as_ptr() as *mut u8, buf.len(), offset, true)?)
    }

    fn sync_data(&self, file: usize) -> Result<()> {
        Ok(self.0.files[file].sync_data()?)
    }

    fn settle(&mut self, _warm: bool) -> Result<()> {
        // Nothing stays cached to warm or to drop; this persists the data and sizes.
        self.0.sync()
    }

    fn flush(&self) -> Result<()> {
        self.0.sync()
    }

    fn teardown(self, keep: bool) -> Result<()> {
        self.0.teardown(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf() {
        for len in [1, 4096, 5000, 1 << 20] {
            let mut b = AlignedBuf::new(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b[len - 1] = 7;
        }
    }

    #[test]
    fn create_dirs_reports_only_new_ones() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b/c");
        let created = create_dirs(&d).unwrap();
        assert_eq!(created, vec![t.path().join("a"), t.path().join("a/b"), d.clone()]);
        assert!(create_dirs(&d).unwrap().is_empty());
        remove_created_dirs(&created);
        assert!(!t.path().join("a").exists());
    }
}
