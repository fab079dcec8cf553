//! Cache configuration: where the devices are, how much memory, and the array's layout.

use std::path::PathBuf;
use std::sync::Arc;

use crate::alloc::AllocKind;
use crate::choice::choice;
use crate::error::{Error, ErrorKind, Result};
use crate::index::setassoc::{SetPolicy, DEFAULT_WAYS, MAX_WAYS};
use crate::index::IndexKind;
use crate::io::device::sim::SimDevice;
use crate::io::engine::{IoEngine, IoKind, SubmitKind};
use crate::io::layout::LayoutKind;
use crate::policy::{CleanFirst, PolicyKind};

/// Smallest and largest page sizes (powers of two).
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest supported page size.
pub const MAX_PAGE_SIZE: usize = 64 * 1024;
/// Most device directories in one array.
pub const MAX_DEVICES: usize = 64;
/// Default readahead: 1 MiB, a run of the engine (one request), the most it loads
/// synchronously; the loader threads read windows past it (`shared/ahead.rs`).
pub const DEFAULT_READAHEAD: u64 = 1 << 20;
/// Fewest frames a cache may have: enough for a handful of threads to each pin a page and
/// for write-back to make progress.
pub const MIN_FRAMES: usize = 16;
/// Default dirty ratios (background, foreground), as fractions of the frames. Half the cache
/// may be dirty before any write-back starts, so that a working set written in place that
/// fits in half the cache is written at memory speed, as the kernel gives one that fits in
/// its (much larger) dirty limit; the quarter above it is where writers are throttled in
/// proportion, which leaves the last quarter clean for reads (bench/RESULTS.md, issue 18).
pub const DEFAULT_DIRTY_RATIOS: (f64, f64) = (0.5, 0.75);
/// Default age after which dirty pages are written back (the kernel's 30 s).
pub const DEFAULT_DIRTY_EXPIRE: std::time::Duration = std::time::Duration::from_secs(30);

choice! {
    /// What a writer does when the dirty count is past the foreground threshold.
    pub enum FlushKind("flush kind") {
        /// dflush (seed 000 §3.3): the writer writes dirty pages back itself, in parallel with the
        /// flushers and other writers, and never sleeps.
        #[default]
        Direct = "dflush",
        /// The kernel's way: the writer sleeps until the flushers have brought the dirty count
        /// back under the threshold.
        Background = "background",
    }
}

/// How a [`crate::Cache`] is built. Start from [`Config::new`] and adjust with `with_*`.
#[derive(Clone)]
pub struct Config {
    pub(crate) device_dirs: Vec<PathBuf>,
    pub(crate) memory_budget: u64,
    pub(crate) page_size: usize,
    pub(crate) stripe_unit: u64,
    pub(crate) dirty_background_ratio: f64,
    pub(crate) dirty_foreground_ratio: f64,
    pub(crate) dirty_expire: std::time::Duration,
    pub(crate) flusher_threads: usize,
    pub(crate) flush: FlushKind,
    pub(crate) streams: bool,
    pub(crate) meta_dir: Option<PathBuf>,
    pub(crate) allow_buffered: bool,
    pub(crate) plain_direct: bool,
    pub(crate) index: IndexKind,
    pub(crate) alloc: AllocKind,
    pub(crate) policy: PolicyKind,
    pub(crate) clean_first: CleanFirst,
    pub(crate) layout: LayoutKind,
    pub(crate) set_ways: usize,
    pub(crate) set_policy: SetPolicy,
    pub(crate) io: IoKind,
    pub(crate) submit: SubmitKind,
    pub(crate) readahead: u64,
    pub(crate) prefault: bool,
    pub(crate) range_lock: bool,
    pub(crate) hot_index: bool,
    pub(crate) run_merging: bool,
    pub(crate) bundling: bool,
    pub(crate) engine: Option<Arc<dyn IoEngine>>,
    /// Simulated devices, by device index (`with_sim_device`).
    pub(crate) sim_devices: Vec<(usize, Arc<SimDevice>)>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("device_dirs", &self.device_dirs)
            .field("memory_budget", &self.memory_budget)
            .field("page_size", &self.page_size)
            .field("stripe_unit", &self.stripe_unit)
            .field("dirty_background_ratio", &self.dirty_background_ratio)
            .field("dirty_foreground_ratio", &self.dirty_foreground_ratio)
            .field("dirty_expire", &self.dirty_expire)
            .field("flusher_threads", &self.flusher_threads)
            .field("flush", &self.flush)
            .field("streams", &self.streams)
            .field("meta_dir", &self.meta_dir)
            .field("allow_buffered", &self.allow_buffered)
            .field("plain_direct", &self.plain_direct)
            .field("index", &self.index)
            .field("alloc", &self.alloc)
            .field("policy", &self.policy)
            .field("clean_first", &self.clean_first)
            .field("layout", &self.layout)
            .field("set_ways", &self.set_ways)
            .field("set_policy", &self.set_policy)
            .field("io", &self.io)
            .field("submit", &self.submit)
            .field("readahead", &self.readahead)
            .field("prefault", &self.prefault)
            .field("range_lock", &self.range_lock)
            .field("hot_index", &self.hot_index)
            .field("run_merging", &self.run_merging)
            .field("bundling", &self.bundling)
            .field("custom_engine", &self.engine.is_some())
            .finish()
    }
}

impl Config {
    /// A config over `device_dirs` (one per SSD mount point, 1 to 64) with a memory budget
    /// of `memory_budget` bytes for page frames.
    pub fn new<P: Into<PathBuf>>(device_dirs: impl IntoIterator<Item = P>, memory_budget: u64) -> Self {
        Config {
            device_dirs: device_dirs.into_iter().map(Into::into).collect(),
            memory_budget,
            page_size: 4096,
            stripe_unit: 128 * 1024,
            dirty_background_ratio: DEFAULT_DIRTY_RATIOS.0,
            dirty_foreground_ratio: DEFAULT_DIRTY_RATIOS.1,
            dirty_expire: DEFAULT_DIRTY_EXPIRE,
            flusher_threads: 2,
            flush: FlushKind::default(),
            streams: true,
            meta_dir: None,
            allow_buffered: false,
            plain_direct: true,
            index: IndexKind::default(),
            alloc: AllocKind::default(),
            policy: PolicyKind::default(),
            clean_first: CleanFirst::default(),
            layout: LayoutKind::default(),
            set_ways: DEFAULT_WAYS,
            set_policy: SetPolicy::default(),
            io: IoKind::default(),
            submit: SubmitKind::default(),
            readahead: DEFAULT_READAHEAD,
            prefault: false,
            range_lock: true,
            hot_index: true,
            run_merging: true,
            bundling: true,
            engine: None,
            sim_devices: Vec::new(),
        }
    }

    /// The page index files use. Default [`IndexKind::Radix`].
    pub fn with_index(mut self, index: IndexKind) -> Self {
        self.index = index;
        self
    }

    /// The free-frame allocator. Default [`AllocKind::TwoLayer`].
    pub fn with_alloc(mut self, alloc: AllocKind) -> Self {
        self.alloc = alloc;
        self
    }

    /// How stripe units are placed on the devices (SAFS §3.3): striping (the default),
    /// rotated striping or hash mapping. Fixed when the array is created and recorded in its
    /// catalog; `open` refuses a config that asks for another.
    pub fn with_layout(mut self, layout: LayoutKind) -> Self {
        self.layout = layout;
        self
    }

    /// Frames per page set and the replacement policy inside a set, for
    /// [`IndexKind::SetAssoc`]. Defaults: 12 ways, GClock.
    pub fn with_sets(mut self, ways: usize, policy: SetPolicy) -> Self {
        self.set_ways = ways;
        self.set_policy = policy;
        self
    }

    /// Page size in bytes: a power of two from 4 KiB to 64 KiB. Default 4 KiB.
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size;
        self
    }

    /// Stripe unit in bytes: a multiple of the page size. Default 128 KiB.
    pub fn with_stripe_unit(mut self, stripe_unit: u64) -> Self {
        self.stripe_unit = stripe_unit;
        self
    }

    /// Fraction of frames that may be dirty before flusher threads start writing back.
    /// Default 0.5 ([`DEFAULT_DIRTY_RATIOS`]).
    pub fn with_dirty_background_ratio(mut self, ratio: f64) -> Self {
        self.dirty_background_ratio = ratio;
        self
    }

    /// Fraction of frames that may be dirty before writers are held back: from halfway
    /// between the background ratio and this one, a writer writes back dirty pages itself
    /// (dflush) in proportion to how far past that point the count is, twice what it dirties
    /// at this ratio; with [`FlushKind::Background`] it sleeps past this ratio instead.
    /// Default 0.75 ([`DEFAULT_DIRTY_RATIOS`]).
    pub fn with_dirty_foreground_ratio(mut self, ratio: f64) -> Self {
        self.dirty_foreground_ratio = ratio;
        self
    }

    /// How long a file's pages may stay dirty before the flushers write them back, whatever
    /// the dirty ratios (the kernel's `dirty_expire_centisecs`). Default 30 s
    /// ([`DEFAULT_DIRTY_EXPIRE`]).
    pub fn with_dirty_expire(mut self, expire: std::time::Duration) -> Self {
        self.dirty_expire = expire;
        self
    }

    /// Makes the whole frame arena resident when the cache is created (off by default), so
    /// that no miss pays the first touch of its frame's memory: the kernel zeroing a page
    /// (2 MiB at a time with transparent huge pages) and, in a virtual machine, the host
    /// backing it. Creation then takes that time, and the cache's memory is resident from the
    /// start (PostgreSQL's shared buffers with huge pages are too); the kernel's page cache
    /// recycles pages that are resident already. A cache shared through `upcache serve` keeps
    /// its segment's memory as the service maps it.
    pub fn with_prefault(mut self, on: bool) -> Self {
        self.prefault = on;
        self
    }

    /// Number of background flusher threads (1 to 64; more than 8 run as 8). Default 2 (seed
    /// 003's K reclaim threads).
    pub fn with_flusher_threads(mut self, n: usize) -> Self {
        self.flusher_threads = n;
        self
    }

    /// What a writer does past the foreground dirty ratio: write back dirty pages itself
    /// ([`FlushKind::Direct`], dflush, the default) or sleep until the flushers have brought
    /// the dirty count back under it ([`FlushKind::Background`], the kernel's way).
    pub fn with_flush(mut self, flush: FlushKind) -> Self {
        self.flush = flush;
        self
    }

    /// The replacement policy (CLOCK by default; see [`PolicyKind`]). The set-associative
    /// index ([`IndexKind::SetAssoc`]) picks victims in each set with its own policy instead
    /// ([`Config::with_sets`]).
    pub fn with_policy(mut self, policy: PolicyKind) -> Self {
        self.policy = policy;
        self
    }

    /// Makes device `index` (of the device directories) a simulated SSD: its backing files,
    /// in its directory, hold the data, and `sim` decides the timing, garbage collection,
    /// faults and what a power cut loses (`io::device::sim`). The same device may serve
    /// several caches in turn (a power-cut test reopens with it).
    pub fn with_sim_device(mut self, index: usize, sim: Arc<SimDevice>) -> Self {
        self.sim_devices.retain(|(d, _)| *d != index);
        self.sim_devices.push((index, sim));
        self
    }

    /// When the policy passes over dirty pages for clean ones: always (the default), only
    /// while the page's device reports garbage collection, or never.
    pub fn with_clean_first(mut self, rule: CleanFirst) -> Self {
        self.clean_first = rule;
        self
    }

    /// Keep the metadata log (file creations, removals and lengths; seed 001 §3.3) in `dir`,
    /// for instance on a faster device than the data, instead of the first device directory.
    /// Set at create and recorded in the catalog; at open it may be left out, and if given
    /// must name the same directory.
    pub fn with_meta_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.meta_dir = Some(dir.into());
        self
    }

    /// Writers of one file lock only the byte ranges they write (F2FS's range locks, the
    /// default), so writers of disjoint ranges run at once. Off: `write_at` and `set_len` of a
    /// file also take a lock of the whole file, one writer at a time, as the kernel's inode
    /// lock has them (readers are not held up by it). The pin and queue APIs are then refused
    /// (`Unsupported`): a pin held while its thread writes elsewhere in the file would wait
    /// for ever for a writer that waits for the pin.
    pub fn with_range_lock(mut self, on: bool) -> Self {
        self.range_lock = on;
        self
    }

    /// Remember in each thread the frames of the pages it pinned last (ScalaCache §5.3's
    /// per-thread hot index, the default), so that a repeat pin skips the shared page index.
    /// Off: every pin looks the page up in the index.
    pub fn with_hot_index(mut self, on: bool) -> Self {
        self.hot_index = on;
        self
    }

    /// Merge the pages that lie back to back on a device into one request (SAFS §4.2's
    /// multi-page loads, merged write-back runs; the default), up to the device's request
    /// size. Off: every load and write-back request moves one page.
    pub fn with_run_merging(mut self, on: bool) -> Self {
        self.run_merging = on;
        self
    }

    /// Hand the I/O engine the requests of a load, a readahead or a write-back together, one
    /// submission for all (ScalaCache's bundled submissions; io_uring submits them with one
    /// system call; the default). Off: the engine gets one request at a time, each waited for
    /// before the next.
    pub fn with_bundling(mut self, on: bool) -> Self {
        self.bundling = on;
        self
    }

    /// Track each file's dirty pages as streams (seed 003 §4.1, the default): a sync writes
    /// only its file's dirty ranges, and flushers write whole dirty streams in requests of
    /// the device's largest size. Off: a sync looks at every cached page of its file and
    /// flushers scan the frame table, writing runs of at most 64 pages.
    pub fn with_streams(mut self, on: bool) -> Self {
        self.streams = on;
        self
    }

    /// Allow buffered backing files when the file system refuses O_DIRECT. Default false:
    /// refusing O_DIRECT is an [`ErrorKind::Unsupported`] error, because the kernel page
    /// cache under ours would double-cache every page.
    pub fn with_allow_buffered(mut self, allow: bool) -> Self {
        self.allow_buffered = allow;
        self
    }

    /// Whether plain files ([`crate::Cache::open_path`]) are opened O_DIRECT (the default) or
    /// buffered. Buffered, the kernel's page cache sits under this one for them: misses are
    /// served from it when it holds the page (a file other processes have been using), and
    /// written-back pages are seen by other processes at once, at the price of caching pages
    /// twice. For programs that share files with others (the LD_PRELOAD shim).
    pub fn with_plain_direct(mut self, direct: bool) -> Self {
        self.plain_direct = direct;
        self
    }

    /// The I/O engine: io_uring (the default; psync, with a logged reason, where the kernel
    /// refuses it) or preadv/pwritev.
    pub fn with_io(mut self, io: IoKind) -> Self {
        self.io = io;
        self
    }

    /// Who submits I/O: the thread that needs it (the default), or one I/O thread per
    /// device that batches everything queued for its device (SAFS §3.1).
    pub fn with_io_threads(mut self, submit: SubmitKind) -> Self {
        self.submit = submit;
        self
    }

    /// Readahead in bytes (0 turns it off): a miss of a read that continues a sequential
    /// stream loads up to this much from its page on in one run (at most 1 MiB: more is taken
    /// as 1 MiB), and the process's loader threads read windows of up to a 32nd of the cache
    /// past it. Default [`DEFAULT_READAHEAD`].
    pub fn with_readahead(mut self, bytes: u64) -> Self {
        self.readahead = bytes;
        self
    }

    /// Replace the I/O engine with one of the caller's (overrides [`Config::with_io`]). Used
    /// to inject faults in tests and to try other engines. The trait is an internal
    /// ([`crate::internals::io::engine::IoEngine`]) that may change in any release.
    pub fn with_io_engine(mut self, engine: Arc<dyn IoEngine>) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Number of page frames this config gives: the budget divided by the page size.
    pub fn frame_count(&self) -> usize {
        (self.memory_budget / self.page_size as u64) as usize
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::new(ErrorKind::InvalidConfig, msg));
        let n = self.device_dirs.len();
        if n == 0 || n > MAX_DEVICES {
            return bad(format!("need 1 to {MAX_DEVICES} device directories, got {n}"));
        }
        for (i, (dev, _)) in self.sim_devices.iter().enumerate() {
            if *dev >= n {
                return bad(format!("simulated device {dev} is past the {n} device directories"));
            }
            if self.sim_devices[..i].iter().any(|(d, _)| d == dev) {
                return bad(format!("device {dev} is simulated twice"));
            }
        }
        for (i, a) in self.device_dirs.iter().enumerate() {
            if self.device_dirs[..i].contains(a) {
                return bad(format!("device directory {} is listed twice", a.display()));
            }
        }
        let ps = self.page_size;
        if !ps.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&ps) {
            return bad(format!("page size must be a power of two from 4 KiB to 64 KiB, got {ps}"));
        }
        let su = self.stripe_unit;
        if su == 0 || !su.is_multiple_of(ps as u64) {
            return bad(format!("stripe unit {su} must be a non-zero multiple of the page size {ps}"));
        }
        if su > (1 << 40) {
            return bad(format!("stripe unit {su} is too large"));
        }
        let frames = self.frame_count();
        if frames < MIN_FRAMES {
            return bad(format!(
                "memory budget {} gives {frames} frames of {ps} bytes; need at least {MIN_FRAMES}",
                self.memory_budget
            ));
        }
        if self.set_ways == 0 || self.set_ways > MAX_WAYS || self.set_ways > frames {
            return bad(format!(
                "page sets need 1 to {MAX_WAYS} ways and no more than the {frames} frames, got {}",
                self.set_ways
            ));
        }
        if frames > u32::MAX as usize / 2 {
            return bad(format!("memory budget {} is too large", self.memory_budget));
        }
        let (bg, fg) = (self.dirty_background_ratio, self.dirty_foreground_ratio);
        if !(0.0 < bg && bg <= fg && fg <= 1.0) {
            return bad(format!("dirty ratios must satisfy 0 < background ({bg}) <= foreground ({fg}) <= 1"));
        }
        if self.dirty_expire.is_zero() {
            return bad("the dirty expiry must be longer than zero".to_string());
        }
        if self.flusher_threads == 0 || self.flusher_threads > 64 {
            return bad(format!("flusher threads must be 1 to 64, got {}", self.flusher_threads));
        }
        Ok(())
    }
}
