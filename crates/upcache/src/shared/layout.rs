//! The shared cache's regions and one process's view of them.

use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::chunk::{chunks_of, Chunk, Lazy};
use super::files::FileEntry;
use super::frame::FrameMeta;
use super::index::{Index, PageMap, SetMap, PARTITIONS};
use super::mapped::Mapped;
use super::page_size::PageSize;
use super::pin_ledger::{Ledger, PIN_SLOTS};
use super::tree::{Forest, Inner, Leaf, NodeMeta, Pool};
use crate::alloc::AllocKind;
use crate::config::FlushKind;
use crate::error::{Error, ErrorKind, Result};
use crate::index::IndexKind;
use crate::io::engine::IoKind;
use crate::policy::{CleanFirst, PolicyKind};
use crate::shm::{Clients, OwnerLock, RegionSpec, Segment};

/// "UPCSHARE" with the format's number in the last byte.
const MAGIC: u64 = u64::from_le_bytes(*b"UPCSHR\x00\x21");

mod kind {
    pub const HEADER: u32 = 1;
    pub const CLIENTS: u32 = 2;
    pub const FILES: u32 = 3;
    pub const HOLDS: u32 = 4;
    pub const HEADS: u32 = 5;
    pub const PARTITIONS: u32 = 6;
    pub const FRAMES: u32 = 7;
    pub const PAGES: u32 = 8;
    pub const COUNTERS: u32 = 9;
    pub const PATHS: u32 = 10;
    pub const LEAVES: u32 = 11;
    pub const LEAF_META: u32 = 12;
    pub const INNERS: u32 = 13;
    pub const INNER_META: u32 = 14;
    pub const CHUNKS: u32 = 15;
    pub const PINS: u32 = 16;
    pub const SET_TAGS: u32 = 17;
    /// The frames emptied and not yet claimed again (`free.rs`).
    pub const FREE: u32 = 18;
    /// Each frame's replacement history and queue links (`policy/`).
    pub const POLICY: u32 = 19;
    /// S3-FIFO's ghost entries (`policy/ghost.rs`).
    pub const GHOSTS: u32 = 20;
    /// Every process's latency histograms (`latency.rs`).
    pub const LATENCIES: u32 = 21;
    /// The frames that hold dirty pages (`dirty_map.rs`).
    pub const DIRTY_MAP: u32 = 22;
}

/// Words of a file entry's path: a length, then up to `8 * (PATH_WORDS - 1)` bytes.
const PATH_WORDS: usize = 64;

/// Default dirty ratios of the shared cache (background, foreground), as fractions of its
/// frames: past a quarter dirty the service writes dirty files back (not only the expired
/// ones) until the cache is a sixteenth below it; past half, a writer first writes back its
/// own file.
pub const DEFAULT_SHARED_DIRTY_RATIOS: (f64, f64) = (0.25, 0.5);
/// Default time between two passes of the service's flusher.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Longest flush interval and dirty expiry a shared cache takes (an hour).
const MAX_WRITE_BACK_PERIOD: Duration = Duration::from_secs(3600);

/// The size of a shared cache and its write-back settings. The process that creates the
/// cache (its service) sets them; every process attached to it follows them.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedConfig {
    /// Memory for pages, in bytes (a multiple of the page size, at least 16 pages).
    pub memory: u64,
    /// Files cached at once.
    pub files: u32,
    /// Processes attached at once.
    pub clients: u32,
    /// (background, foreground) dirty fractions of the frames, 0 < background <= foreground
    /// <= 1 and background < 1: past the first a writer wakes the service, which writes dirty
    /// files back until the cache is a sixteenth below it; past the second a writer writes
    /// back its own file before writing.
    pub dirty_ratios: (f64, f64),
    /// Age at which the service writes a file's dirty pages back (the kernel's 30 s); at most
    /// an hour.
    pub dirty_expire: Duration,
    /// Time between two passes of the service's flusher, more than 0 and at most an hour.
    pub flush_interval: Duration,
    /// F2FS's range lock: a write within the length holds only its pages, beside writers of
    /// other parts of the file. Off, every write holds the whole file.
    pub range_lock: bool,
    /// Merge the pages that lie back to back on a device into one request (SAFS §4.2's
    /// multi-page loads, merged write-back runs): a read's missing pages and its readahead
    /// load with one `preadv` per device run, adjacent dirty pages go back with one `pwritev`
    /// of up to a run (1 MiB). Off, every load and write-back request moves one page.
    pub run_merging: bool,
    /// Hand the kernel (or an array's I/O engine) the requests of a load or a write-back
    /// together, one submission for all (ScalaCache's bundled submissions, through io_uring).
    /// Off, one request at a time, each waited for before the next.
    pub bundling: bool,
    /// Bytes a read that continues a sequential stream loads ahead of its first page, whole
    /// pages, at most [`MAX_SHARED_READAHEAD`]; 0 turns readahead off.
    pub readahead: u64,
    /// The service's flushers, 1 to [`MAX_SHARED_FLUSHERS`]: the files due for write-back at
    /// a pass are written back by as many threads at once (ScaleCache's parallel write-back,
    /// seed 000 §3.3; the writers past the foreground ratio write back their own files too).
    pub flushers: u32,
    /// The service writes whole pages back through the file opened again with `O_DIRECT`
    /// (past the kernel's page cache: no second copy of each page, the private engine's
    /// plain files' way); the last page of a file, cut by its length, and file systems
    /// without `O_DIRECT` go through the descriptor a writer lent. Off, all of it does.
    pub direct_write_back: bool,
    /// Misses load pages through the file opened again with `O_DIRECT` (past the kernel's
    /// page cache, as the private engine's plain files are read): a page is read once, into
    /// its frame, not into the kernel's cache and then copied. The kernel writes back its own
    /// dirty pages of the range first, so the bytes are the same. Off, and where the file
    /// system refuses `O_DIRECT`, loads go through the open's descriptor.
    pub direct_loads: bool,
    /// How write-back reaches the file: [`IoKind::Uring`] (the default), up to 32 runs in the
    /// kernel's hands at once through io_uring where the kernel offers it (ScalaCache's
    /// batched I/O: a commit's scattered pages in one device round trip, as the kernel's
    /// `fdatasync` writes them, and the runs of a write-back under dirty pressure, a writer's
    /// dflush or the service's background pass, at the device's depth);
    /// [`IoKind::Psync`], one `pwritev` after another. Other write-backs (expiry, a
    /// `DONTNEED`'s, write-behind) go one run at a time either way (bench/RESULTS.md).
    pub io: IoKind,
    /// The page index: [`IndexKind::Radix`], ScaleCache's ccXArray, a lock-free tree per
    /// file (`tree.rs`; the default), [`IndexKind::Locked`], the same trees with each file's
    /// inserts and removes under one lock (the kernel's XArray, the ccXArray's baseline, seed
    /// 000 §2.2; lookups take none), [`IndexKind::Sharded`], hash chains under 1024
    /// partition locks (`index.rs`), or [`IndexKind::SetAssoc`], SAFS's set-associative cache
    /// (seed 002 §4): a page lives only in the set of `set_ways` frames its key hashes to, a
    /// lookup reads that set's frames, and a miss evicts from it with the set's own clock hand
    /// (`policy` and `clean_first` within the set). A set is small: if all its frames are
    /// pinned or held for writing, a miss of one of its pages fails with `CacheFull` after the
    /// claim's patience (10 s), however free the rest of the cache.
    pub index: IndexKind,
    /// Frames per set of the set-associative index, 1 to 64 (SAFS's 12 by default).
    pub set_ways: u32,
    /// The frames partitioned per NUMA node (`numa.rs`): a miss takes a frame of its CPU's
    /// node (others' only when its own are all taken), each node's frames are bound to its
    /// memory, and the service writes each node's dirty pages back from its CPUs. The
    /// machine's nodes by default (one partition where it has one node); the set-associative
    /// index places pages by their sets instead.
    pub numa: super::numa::SharedNuma,
    /// The replacement policy (`policy/`): [`PolicyKind::Clock`] (a page read since the hand
    /// last passed is passed over once; the default), [`PolicyKind::GClock`] (SAFS §4.2: each
    /// read adds to a count of up to 3, and the hand passes a page over once per hit, so a
    /// page read often outlives a scan), sampled [`PolicyKind::Lru`] and [`PolicyKind::Lfu`]
    /// (LFU-DA), whose history is in the segment beside the frames, or [`PolicyKind::Sieve`]
    /// and [`PolicyKind::S3Fifo`], whose queues are (not with the set-associative index or
    /// NUMA partitions: one order of the whole cache). A hit only sets the frame's bits, as
    /// under CLOCK, whatever the policy.
    pub policy: PolicyKind,
    /// Whether the hand passes dirty pages over for a lap in search of a clean one
    /// ([`CleanFirst::Always`], SAFS §4.2 and ScalaCache's clean-first eviction; the
    /// default), takes a dirty one where it finds it, writing it back first if this process
    /// has its file open for writing ([`CleanFirst::Never`], "plain"), or passes it over only
    /// while its file's device is taken to be collecting garbage, as inferred from the
    /// latency of the `O_DIRECT` write-backs that reach it ([`CleanFirst::WhileGc`],
    /// ScalaCache §5.4; `gc.rs`).
    pub clean_first: CleanFirst,
    /// Stream-aware eviction and write-back (StreamCache §4.2): a page that a read continuing
    /// a sequential stream (where the same open's last read ended) reads for the first time
    /// is no reference for the clock hand, so the pages a scan reads once go before the pages
    /// read at random or read again; and a sequential write stream's runs are written back
    /// behind it, once more than half the background ratio is dirty
    /// (`SharedFile::write_behind`), so its pages, never read, are clean when the hand comes.
    /// Off, every hit is a reference and write streams wait for the flushers.
    pub streams: bool,
    /// What a writer past the foreground ratio does: [`FlushKind::Direct`] (ScaleCache's
    /// dflush, seed 000 §3.3: it writes its file's dirty pages back itself and goes on; the
    /// default) or [`FlushKind::Background`] (the kernel's way: it asks the service for
    /// write-back and pauses until the cache is back under the ratio).
    pub flush: FlushKind,
    /// Whether the service puts the frames' bytes in use on 2 MiB pages while the cache is warm
    /// (`MADV_COLLAPSE`, `chunk.rs`), as the private engine's anonymous memory is: random hits
    /// then seldom miss the TLB (1.14x warm reads through the shim here, the first 2 s, while
    /// the service collapsed 512 MiB, at a third of the speed).
    pub huge_pages: bool,
    /// ScalaCache's per-thread hot index (§5.3): each thread remembers the frames of the pages
    /// it pinned last ([`SharedFile::pin`](super::SharedFile::pin)), so a repeat pin skips the
    /// page index. Off, every pin looks the page up.
    pub hot_index: bool,
    /// The size of a page and its frame: a power of two from 4 KiB (the default) to 64 KiB,
    /// as [`Config::with_page_size`](crate::Config::with_page_size). A load, a write-back and
    /// a pin are of whole pages.
    pub page_size: usize,
    /// Where a miss finds a frame with no page before the clock hand's: [`AllocKind::TwoLayer`]
    /// (StreamCache's two-layer memory management, seed 003 §4.3, `pool.rs`: a pool of free
    /// frames in per-CPU regions, a small list per file refilled from it in batches, and
    /// background reclaim by the flushers evicting clean pages into the pool while it is
    /// short) or [`AllocKind::Global`] (one stack of the frames emptied by truncates,
    /// removals and evictions asked for; misses run the hand themselves). Not with the
    /// set-associative index or NUMA partitions, whose misses take their set's or node's
    /// frames.
    pub alloc: AllocKind,
    /// Make every frame's bytes resident as the cache is made (as
    /// [`Config::with_prefault`](crate::Config::with_prefault)): allocated in the segment (in
    /// their NUMA nodes) and mapped by its maker, so that no miss pays the first touch of its
    /// frame. Off, a frame's chunk is allocated and mapped at its first use.
    pub prefault: bool,
}

/// The fewest frames a shared cache has (64 KiB of 4 KiB pages).
const MIN_SHARED_FRAMES: u64 = 16;

/// The most flushers a shared cache's service runs.
pub const MAX_SHARED_FLUSHERS: u32 = 8;

/// Runs of a sync's write-back, or of one under dirty pressure, in the kernel's hands at once
/// through io_uring (`SharedConfig::io`): a database's commit, or a random writer's dflush,
/// writes scattered pages, each O_DIRECT write a device round trip when they go one after
/// another.
pub(crate) const WRITE_BACK_DEPTH: usize = 32;

/// The largest readahead of the shared cache: one load run (1 MiB).
pub const MAX_SHARED_READAHEAD: u64 = super::page_size::RUN_BYTES as u64;

impl Default for SharedConfig {
    fn default() -> Self {
        SharedConfig {
            memory: 256 << 20,
            files: 4096,
            clients: 256,
            dirty_ratios: DEFAULT_SHARED_DIRTY_RATIOS,
            dirty_expire: crate::config::DEFAULT_DIRTY_EXPIRE,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            range_lock: true,
            run_merging: true,
            bundling: true,
            readahead: MAX_SHARED_READAHEAD,
            flushers: 2,
            direct_write_back: true,
            direct_loads: true,
            io: IoKind::Uring,
            index: IndexKind::Radix,
            set_ways: crate::index::setassoc::DEFAULT_WAYS as u32,
            numa: super::numa::SharedNuma::Machine,
            policy: PolicyKind::Clock,
            clean_first: CleanFirst::Always,
            flush: FlushKind::Direct,
            streams: true,
            huge_pages: true,
            hot_index: true,
            page_size: PageSize::DEFAULT.bytes(),
            alloc: AllocKind::Global,
            prefault: false,
        }
    }
}

impl SharedConfig {
    /// An `InvalidConfig` error if a setting is out of its range.
    pub fn check(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::new(ErrorKind::InvalidConfig, m));
        let Some(page) = PageSize::new(self.page_size) else {
            return invalid(format!(
                "shared cache page size must be a power of two from 4 KiB to 64 KiB, got {}",
                self.page_size
            ));
        };
        if self.memory / (page.bytes() as u64) < MIN_SHARED_FRAMES
            || !self.memory.is_multiple_of(page.bytes() as u64)
        {
            return invalid(format!(
                "shared cache memory must be a multiple of the page size ({}) and at least {MIN_SHARED_FRAMES} pages",
                page.bytes()
            ));
        }
        if self.memory / page.bytes() as u64 > u32::MAX as u64 / 2 {
            return invalid("shared cache memory too large".into());
        }
        if self.files == 0 || self.files >= 1 << 20 || self.clients == 0 || self.clients > 1 << 16 {
            return invalid("shared cache files 1 to 2^20 - 1, clients 1 to 2^16".into());
        }
        let (bg, fg) = self.dirty_ratios;
        // (Written so that NaN fails too.) A background ratio of 1 would never be passed, and a
        // cache full of dirty pages would leave processes that cannot write them to wait for
        // the expiry.
        if !(bg > 0.0 && bg < 1.0 && bg <= fg && fg <= 1.0) {
            return invalid(format!(
                "dirty ratios must satisfy 0 < background ({bg}) <= foreground ({fg}) <= 1, background < 1"
            ));
        }
        if self.dirty_expire > MAX_WRITE_BACK_PERIOD {
            return invalid(format!("dirty expiry {:?} is more than an hour", self.dirty_expire));
        }
        if self.flush_interval.is_zero() || self.flush_interval > MAX_WRITE_BACK_PERIOD {
            return invalid(format!(
                "flush interval {:?} must be more than 0 and at most an hour",
                self.flush_interval
            ));
        }
        if !(1..=MAX_SHARED_FLUSHERS).contains(&self.flushers) {
            return invalid(format!(
                "shared cache flushers {} must be 1 to {MAX_SHARED_FLUSHERS}",
                self.flushers
            ));
        }

        if !(1..=crate::index::setassoc::MAX_WAYS as u32).contains(&self.set_ways) {
            return invalid(format!(
                "shared cache set ways {} must be 1 to {}",
                self.set_ways,
                crate::index::setassoc::MAX_WAYS
            ));
        }
        if self.alloc == AllocKind::TwoLayer
            && (self.index == IndexKind::SetAssoc || self.numa.nodes().len() > 1)
        {
            return invalid(
                "the two-layer allocator pools frames for the whole cache: with the set-associative index or NUMA partitions the allocator is global (a miss takes its set's or node's frames)".into(),
            );
        }
        let queues = matches!(self.policy, PolicyKind::Sieve | PolicyKind::S3Fifo);
        if queues && (self.index == IndexKind::SetAssoc || self.numa.nodes().len() > 1) {
            return invalid(format!(
                "{} keeps one order of the whole cache's pages: with the set-associative index or NUMA partitions the policy is clock, gclock, lru or lfu",
                self.policy.name()
            ));
        }
        self.numa.check()?;
        if self.readahead > MAX_SHARED_READAHEAD {
            return invalid(format!(
                "shared cache readahead {} bytes is more than {MAX_SHARED_READAHEAD}",
                self.readahead
            ));
        }
        Ok(())
    }
}

/// The header region.
#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    pub frames: AtomicU32,
    pub files: AtomicU32,
    pub clients: AtomicU32,
    pub buckets: AtomicU32,
    /// The clock hand: frames passed since the cache was made.
    pub clock: AtomicU64,
    /// Dirty frames (never below the truth).
    pub dirty: AtomicU64,
    pub written_back: AtomicU64,
    /// Locks taken over from dead holders, and what they guarded repaired.
    pub repairs: AtomicU64,
    /// Of the evictions, frames holding a page a sequential stream read once (`STREAMED`).
    pub stream_evictions: AtomicU64,
    /// Taken to find, take or free a file-table entry, and to change `opens` and `holds`.
    pub files_lock: OwnerLock,
    /// `SharedConfig::dirty_ratios`, as f64 bits (set before the magic number, then fixed).
    pub dirty_ratios: [AtomicU64; 2],
    /// `SharedConfig::dirty_expire` and `flush_interval`, in milliseconds (as above).
    pub dirty_expire_ms: AtomicU64,
    pub flush_interval_ms: AtomicU64,
    /// `SharedConfig`'s technique switches ([`technique`] bits; as above).
    techniques: AtomicU64,
    /// `SharedConfig::readahead`, in pages (as above).
    readahead_pages: AtomicU64,
    /// `pwritev`s and `pwrite`s that wrote pages back (one per run, or per page unmerged).
    pub write_back_requests: AtomicU64,
    /// Write-backs that had several writes in the kernel's hands at once (io_uring).
    pub write_back_batches: AtomicU64,
    /// Nodes in the tree index's pools (leaves, inner nodes), and their free stacks' heads.
    pub leaves: AtomicU32,
    pub inners: AtomicU32,
    pub leaf_free: AtomicU64,
    pub inner_free: AtomicU64,
    /// Places the tree index refused for want of a free node (each then freed a frame).
    pub index_full: AtomicU64,
    /// `SharedConfig::flushers` (set before the magic number, then fixed).
    flushers: AtomicU32,
    /// Files each of the service's flushers wrote back.
    pub flusher_files: [AtomicU64; MAX_SHARED_FLUSHERS as usize],
    /// Times a writer past the foreground ratio wrote its own file back (dflush).
    pub writer_write_backs: AtomicU64,
    /// Times a writer past the foreground ratio paused for the service (`FlushKind::Background`).
    pub writer_pauses: AtomicU64,
    /// The devices' GC states, for `CleanFirst::WhileGc` (`gc.rs`).
    pub gc: super::gc::GcTable,
    /// `SharedConfig::set_ways` (set before the magic number, then fixed).
    set_ways: AtomicU32,
    /// `SharedConfig::page_size`'s power of two (as above).
    page_shift: AtomicU32,
    /// Pages the service wrote back as a set's hand was about to reach them (`set_flush.rs`).
    pub next_to_go_written: AtomicU64,
    /// Dirty pages of sequential write streams handed to write-behind
    /// (`SharedFile::write_behind`).
    pub behind_pages: AtomicU64,
    /// Pages the loaders read ahead of sequential readers (`load_window`): not misses; a
    /// reader that finds one counts a hit.
    pub ahead_pages: AtomicU64,
    /// Readahead windows posted to the loaders (`SharedFile::read_ahead`).
    pub ahead_windows: AtomicU64,
    /// Pages writers wrote back themselves past the foreground ratio (dflush).
    pub dflush_pages: AtomicU64,
    /// Write-back requests that failed (their pages stayed dirty).
    pub write_back_errors: AtomicU64,
    /// `SharedConfig::numa`: the nodes' CPUs, and their hands (`numa.rs`).
    pub numa: super::numa::NodeTable,
    /// `SharedConfig::numa` was the machine's (0), off (1) or described (2) (set before the
    /// magic number).
    pub numa_mode: AtomicU32,
    /// The free frames' stack (`free.rs`): its lock and its depth.
    pub free_lock: OwnerLock,
    pub free_count: AtomicU32,
    /// The replacement policy's shared state, past CLOCK and GClock (`policy/`).
    pub policy: super::policy::PolicyState,
    /// The two-layer allocator's pool (`pool.rs`): its regions in use (set before the magic
    /// number), and the regions.
    n_regions: AtomicU32,
    pub regions: [super::pool::Region; super::pool::MAX_REGIONS],
    /// Pages background reclaim evicted into the pool.
    pub reclaimed: AtomicU64,
    /// Frames in use (`SharedCache::resize`), on a line of its own: read at every write's
    /// dirty check and every claim, written only by a resize.
    pub active: Active,
    /// Held by a resize.
    pub resize_lock: OwnerLock,
}

/// The frames in use: the first `frames` of the segment's; with page sets, the first `ways`
/// of each set (0: all), `frames` in all.
#[repr(C, align(64))]
pub(crate) struct Active {
    pub frames: AtomicU32,
    pub ways: AtomicU32,
}

pub(crate) use super::technique;

impl Header {
    /// `SharedConfig::dirty_ratios`.
    pub fn dirty_ratios(&self) -> (f64, f64) {
        // Relaxed: fixed before the magic number was published.
        let ratio = |i: usize| f64::from_bits(self.dirty_ratios[i].load(Ordering::Relaxed));
        (ratio(0), ratio(1))
    }

    pub fn dirty_expire(&self) -> Duration {
        // Relaxed: as above.
        Duration::from_millis(self.dirty_expire_ms.load(Ordering::Relaxed))
    }

    pub fn flush_interval(&self) -> Duration {
        // Relaxed: as above.
        Duration::from_millis(self.flush_interval_ms.load(Ordering::Relaxed))
    }

    /// `SharedConfig`'s technique switches, [`technique`] bits.
    pub fn techniques(&self) -> u64 {
        // Relaxed: as above.
        self.techniques.load(Ordering::Relaxed)
    }

    /// Whether technique `bit` ([`technique`]) is on.
    pub fn has(&self, bit: u64) -> bool {
        self.techniques() & bit != 0
    }

    /// `SharedConfig::flushers`.
    pub fn flushers(&self) -> u32 {
        // Relaxed: fixed before the magic number was published.
        self.flushers.load(Ordering::Relaxed).clamp(1, MAX_SHARED_FLUSHERS)
    }

    /// `SharedConfig::readahead`, in pages.
    pub fn readahead_pages(&self) -> u64 {
        // Relaxed: as above.
        self.readahead_pages.load(Ordering::Relaxed)
    }

    /// `SharedConfig::set_ways`.
    pub fn set_ways(&self) -> u32 {
        // Relaxed: fixed before the magic number was published.
        self.set_ways.load(Ordering::Relaxed).clamp(1, crate::index::setassoc::MAX_WAYS as u32)
    }
}

/// A client slot's counters, on cache lines of their own: each process adds only to its
/// slot's, and each of its threads to its own stripe (`pages::STRIPE`), so counts of
/// different threads never contend (a miss's four counts in the header, one line that
/// every thread and the config's readers shared, were a sixth of a miss's time); a report
/// sums every slot (kept across tenures, so the sum never falls when a process leaves).
#[repr(C, align(64))]
pub(crate) struct ClientCounters {
    /// The process's page-tree operations under way (`Inner::tree_op`): a process that died
    /// with none left no node taken and not linked, so its reaping sweeps no tree.
    pub tree_ops: AtomicU64,
    /// The counts, per stripe of the process's threads.
    pub stripes: [CountStripe; COUNT_STRIPES],
}

/// Stripes of a client's counts: a thread adds to one (`pages::STRIPE`).
pub(crate) const COUNT_STRIPES: usize = 8;

/// One stripe of a client's counts, on a cache line of its own.
#[repr(C, align(64))]
pub(crate) struct CountStripe {
    /// Page lookups that found the page cached.
    pub hits: AtomicU64,
    /// Pins the thread's hot index served (`pin.rs`).
    pub hot_hits: AtomicU64,
    /// Of `hits`, pages copied by an optimistic read: no lock, no pin.
    pub lock_free_hits: AtomicU64,
    /// Page lookups that found no frame and claimed one (loads and whole-page writes).
    pub misses: AtomicU64,
    /// Pages loaded (a miss's, and those read ahead with it).
    pub loads: AtomicU64,
    /// `preadv`s and `pread`s that loaded pages (one per load run and device, or per page
    /// unbundled).
    pub load_requests: AtomicU64,
    /// Frames that held a page when a clock hand claimed them.
    pub evictions: AtomicU64,
}

impl ClientCounters {
    /// The sum of one count (`count`) over the stripes.
    pub fn sum(&self, count: fn(&CountStripe) -> &AtomicU64) -> u64 {
        // Relaxed: statistics.
        self.stripes.iter().map(|s| count(s).load(Ordering::Relaxed)).sum()
    }
}

/// One process's mapping of a shared cache and typed views of its regions.
pub(crate) struct View {
    pub seg: Segment,
    header: NonNull<Header>,
    clients: (NonNull<u8>, usize),
    files: NonNull<FileEntry>,
    holds: NonNull<AtomicU32>,
    heads: NonNull<AtomicU32>,
    partitions: NonNull<OwnerLock>,
    frames: NonNull<FrameMeta>,
    counters: NonNull<ClientCounters>,
    paths: NonNull<AtomicU64>,
    leaves: NonNull<Leaf>,
    leaf_meta: NonNull<NodeMeta>,
    inners: NonNull<Inner>,
    inner_meta: NonNull<NodeMeta>,
    pub pages: NonNull<u8>,
    /// A state per 2 MiB chunk of `pages`, the last and short one too (`chunk.rs`).
    chunks: NonNull<Chunk>,
    /// The clients' pin ledgers' `used` words (`used_words`, packed for a changer's pass over
    /// them), then their slots, `PIN_SLOTS` words each (`pin_ledger.rs`).
    pins: NonNull<AtomicU32>,
    pub n_frames: usize,
    /// `SharedConfig::page_size`.
    pub page_size: PageSize,
    pub n_files: usize,
    n_clients: usize,
    n_buckets: usize,
    n_leaves: usize,
    n_inners: usize,
    /// The chunks of `pages` this process has mapped.
    mapped: Mapped,
    /// Marks per part of the chunks region (`chunk_parts`).
    chunk_parts: [usize; 3],
    /// Until when (`gc::now_ns`) this process allocates no more chunks: the kernel refused.
    refused_until: AtomicU64,
    /// `SharedConfig::huge_pages`: chunks in use are recorded (`chunk.rs`).
    huge: bool,
    /// The frames' tags in their sets (`index.rs`).
    set_tags: NonNull<AtomicU32>,
    /// The free frames' stack's slots, one per frame (`free.rs`).
    free: NonNull<AtomicU32>,
    /// Each frame's replacement history and links (`policy/`), and the ghost entries.
    policy: NonNull<super::policy::PolicyFrame>,
    ghosts: NonNull<AtomicU64>,
    latencies: NonNull<super::latency::LatencyTable>,
    dirty_map: NonNull<AtomicU64>,
    /// `SharedConfig::set_ways`, and the sets they make of the frames.
    set_ways: usize,
    n_sets: usize,
}

// SAFETY: the view holds pointers into the segment, which is shared memory used only through
// atomics (and page bytes under the frame protocol); it may move to and be used from any thread.
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

fn bad(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("not a shared cache segment: {}", what.into()))
}

impl View {
    /// The tree index's pools for `frames` frames and `files` entries (leaves, inner nodes):
    /// a leaf per frame, as if no two cached pages of a file were within 64 of each other, and
    /// an inner node per two; each entry's root, its expansion and slack on top. Their memory
    /// is touched only as nodes are used (the free stacks hand out the lowest-used first).
    fn pools(frames: usize, files: usize) -> (usize, usize) {
        (frames + 2 * files + 64, frames / 2 + 2 * files + 64)
    }

    /// Marks in the chunks region (`chunk.rs`): of the frames' bytes' chunks, then of the
    /// leaves', then of the inner nodes'.
    fn chunk_parts(frames: usize, page: PageSize, leaves: usize, inners: usize) -> [usize; 3] {
        use std::mem::size_of;
        [
            chunks_of(frames * page.bytes()),
            chunks_of(leaves * size_of::<Leaf>()),
            chunks_of(inners * size_of::<Inner>()),
        ]
    }

    fn sizes(
        frames: usize,
        page: PageSize,
        files: usize,
        clients: usize,
        buckets: usize,
        ways: usize,
    ) -> [RegionSpec; 22] {
        use std::mem::size_of;
        let (leaves, inners) = Self::pools(frames, files);
        [
            RegionSpec { kind: kind::HEADER, len: size_of::<Header>() },
            RegionSpec { kind: kind::CLIENTS, len: clients * 16 },
            RegionSpec { kind: kind::FILES, len: files * size_of::<FileEntry>() },
            RegionSpec { kind: kind::HOLDS, len: clients * files * 4 },
            RegionSpec { kind: kind::HEADS, len: buckets * 4 },
            RegionSpec { kind: kind::PARTITIONS, len: PARTITIONS * 4 },
            RegionSpec { kind: kind::FRAMES, len: frames * size_of::<FrameMeta>() },
            RegionSpec { kind: kind::PAGES, len: frames * page.bytes() },
            RegionSpec { kind: kind::COUNTERS, len: clients * size_of::<ClientCounters>() },
            RegionSpec { kind: kind::PATHS, len: files * PATH_WORDS * 8 },
            RegionSpec { kind: kind::LEAVES, len: leaves * size_of::<Leaf>() },
            RegionSpec { kind: kind::LEAF_META, len: leaves * size_of::<NodeMeta>() },
            RegionSpec { kind: kind::INNERS, len: inners * size_of::<Inner>() },
            RegionSpec { kind: kind::INNER_META, len: inners * size_of::<NodeMeta>() },
            RegionSpec {
                kind: kind::CHUNKS,
                len: Self::chunk_parts(frames, page, leaves, inners).iter().sum::<usize>()
                    * size_of::<Chunk>(),
            },
            RegionSpec { kind: kind::PINS, len: (Self::used_words(clients) + clients * PIN_SLOTS) * 4 },
            RegionSpec { kind: kind::SET_TAGS, len: SetMap::count(frames, ways) * SetMap::stride(ways) * 4 },
            RegionSpec { kind: kind::FREE, len: frames * 4 },
            RegionSpec { kind: kind::POLICY, len: frames * size_of::<super::policy::PolicyFrame>() },
            RegionSpec { kind: kind::GHOSTS, len: super::policy::ghost::slots(frames) * 8 },
            RegionSpec { kind: kind::LATENCIES, len: size_of::<super::latency::LatencyTable>() },
            RegionSpec { kind: kind::DIRTY_MAP, len: super::dirty_map::words(frames) * 8 },
        ]
    }

    /// A new segment as `config` says: a memfd, or a tmpfs file named `named` once it is
    /// whole (`Segment::create_in_tmpfs`). With `private`, the frames' bytes are this
    /// process's anonymous memory (`Segment::make_private`), for a cache no other process
    /// maps: on transparent huge pages at their first touch, as the in-process engine's.
    pub fn create(config: &SharedConfig, named: Option<&Path>, private: bool) -> Result<View> {
        config.check()?;
        let page = PageSize::new(config.page_size).expect("checked");
        let frames = (config.memory / page.bytes() as u64) as usize;
        // As many as frames: twice as many shortened the chains of random writes, but the
        // larger array cost warm random reads 4% (bench/RESULTS.md, issue 34).
        let buckets = frames.next_power_of_two().max(PARTITIONS);
        let sizes = Self::sizes(
            frames,
            page,
            config.files as usize,
            config.clients as usize,
            buckets,
            config.set_ways as usize,
        );
        // A set-associative cache's frames are allocated whole at once: a page's set is fixed,
        // so a set whose memory could not be allocated later would fail every miss on it.
        let sets = config.index == IndexKind::SetAssoc;
        let later: &[u32] =
            if sets { &[kind::LEAVES, kind::INNERS] } else { &[kind::PAGES, kind::LEAVES, kind::INNERS] };
        let seg = match named {
            Some(path) => Segment::create_in_tmpfs(path.parent().unwrap_or(Path::new("/")), &sizes, later)?,
            None => Segment::create("upcache-shared", &sizes)?,
        };
        if private {
            let (pages, len) = seg.region(kind::PAGES).expect("made above");
            seg.make_private(pages.as_ptr(), len, config.huge_pages)?;
        }
        let (h, _) = seg.region(kind::HEADER).expect("made above");
        // SAFETY: the header region is ours alone (no other process has the descriptor), zeroed,
        // aligned and large enough; its fields are atomics.
        let header = unsafe { &*h.as_ptr().cast::<Header>() };
        // Relaxed: published by the Release store of the magic number.
        header.frames.store(frames as u32, Ordering::Relaxed);
        header.active.frames.store(frames as u32, Ordering::Relaxed);
        header.files.store(config.files, Ordering::Relaxed);
        header.clients.store(config.clients, Ordering::Relaxed);
        header.buckets.store(buckets as u32, Ordering::Relaxed);
        header.dirty_ratios[0].store(config.dirty_ratios.0.to_bits(), Ordering::Relaxed);
        header.dirty_ratios[1].store(config.dirty_ratios.1.to_bits(), Ordering::Relaxed);
        header.dirty_expire_ms.store(config.dirty_expire.as_millis() as u64, Ordering::Relaxed);
        header.flush_interval_ms.store(config.flush_interval.as_millis().max(1) as u64, Ordering::Relaxed);
        let techniques = [
            (config.range_lock, technique::RANGE_LOCK),
            (config.run_merging, technique::RUN_MERGING),
            (config.bundling, technique::BUNDLING),
            (matches!(config.index, IndexKind::Radix | IndexKind::Locked), technique::RADIX_INDEX),
            (config.index == IndexKind::Locked, technique::LOCKED_INDEX),
            (config.direct_write_back, technique::DIRECT_WRITE_BACK),
            (config.policy == PolicyKind::GClock, technique::GCLOCK),
            (config.clean_first == CleanFirst::Always, technique::CLEAN_FIRST),
            (config.clean_first == CleanFirst::WhileGc, technique::GC_AWARE),
            (config.flush == FlushKind::Direct, technique::DFLUSH),
            (config.streams, technique::STREAMS),
            (config.huge_pages, technique::HUGE_PAGES),
            (config.direct_loads, technique::DIRECT_LOADS),
            (config.io == IoKind::Uring, technique::URING),
            (config.hot_index, technique::HOT_INDEX),
            (config.index == IndexKind::SetAssoc, technique::SET_ASSOC),
            (private, technique::PRIVATE_FRAMES),
            (config.policy == PolicyKind::Lru, technique::LRU),
            (config.policy == PolicyKind::Lfu, technique::LFU),
            (config.policy == PolicyKind::Sieve, technique::SIEVE),
            (config.policy == PolicyKind::S3Fifo, technique::S3FIFO),
            (config.alloc == AllocKind::TwoLayer, technique::TWO_LAYER),
            (config.prefault, technique::PREFAULT),
        ];
        let bits = techniques.iter().filter(|(on, _)| *on).fold(0, |b, (_, bit)| b | bit);
        header.techniques.store(bits, Ordering::Relaxed);
        header.readahead_pages.store(config.readahead / page.bytes() as u64, Ordering::Relaxed);
        header.page_shift.store(page.shift(), Ordering::Relaxed);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        header.n_regions.store(cpus.clamp(1, super::pool::MAX_REGIONS) as u32, Ordering::Relaxed);
        header.flushers.store(config.flushers, Ordering::Relaxed);
        header.set_ways.store(config.set_ways, Ordering::Relaxed);
        header.numa.set(&config.numa.nodes());
        header.numa_mode.store(config.numa.mode(), Ordering::Relaxed);
        let (leaves, inners) = Self::pools(frames, config.files as usize);
        header.leaves.store(leaves as u32, Ordering::Relaxed);
        header.inners.store(inners as u32, Ordering::Relaxed);
        // The free stacks are linked before the magic number publishes the segment: through a
        // view of a segment no other process has yet.
        let view = View::attach_unchecked(seg)?;
        // Before any frame is touched: a page's node is fixed at its first fault.
        if !sets {
            super::numa::bind_frames(&view.header().numa, view.pages.as_ptr(), frames, page);
        } else {
            // Allocated whole (above, for a tmpfs file; now, for a memfd).
            if named.is_none() {
                let bytes = frames * page.bytes();
                view.seg.allocate(view.pages.as_ptr(), bytes).map_err(|e| {
                    Error::io(format!("allocate {bytes} bytes for a set-associative cache"), e)
                })?;
            }
            (0..view.chunk_parts[0]).for_each(|c| view.chunk(c).set_allocated());
        }
        if config.prefault {
            view.prefault()?;
        }
        let forest = view.forest();
        forest.leaves.init();
        forest.inners.init();
        view.header().magic.store(MAGIC, Ordering::Release);
        if let Some(path) = named {
            view.seg.link(path)?;
        }
        Ok(view)
    }

    pub fn attach(seg: Segment) -> Result<View> {
        let (h, hlen) = seg.region(kind::HEADER).ok_or_else(|| bad("no header"))?;
        if hlen < std::mem::size_of::<Header>() {
            return Err(bad("header too small"));
        }
        // SAFETY: the region is in bounds, 2 MiB-aligned and large enough; its fields are atomics.
        let header = unsafe { &*h.as_ptr().cast::<Header>() };
        // Acquire: pairs with the creator's Release store.
        if header.magic.load(Ordering::Acquire) != MAGIC {
            return Err(bad("wrong magic number or format"));
        }
        if header.has(technique::PRIVATE_FRAMES) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a private cache's segment (its frames are its maker's memory): no other process attaches it",
            ));
        }
        View::attach_unchecked(seg)
    }

    /// `attach` past the magic number: the sizes in the header, and the regions they need.
    fn attach_unchecked(seg: Segment) -> Result<View> {
        let (h, _) = seg.region(kind::HEADER).ok_or_else(|| bad("no header"))?;
        // SAFETY: as in `attach` (the creator's region is large enough by construction).
        let header = unsafe { &*h.as_ptr().cast::<Header>() };
        // Relaxed: written before the magic number.
        let n = |a: &AtomicU32| a.load(Ordering::Relaxed) as usize;
        let (frames, files, clients, buckets) =
            (n(&header.frames), n(&header.files), n(&header.clients), n(&header.buckets));
        if frames == 0 || !buckets.is_power_of_two() || buckets < PARTITIONS || files == 0 || clients == 0 {
            return Err(bad("bad sizes in the header"));
        }
        let ways = header.set_ways() as usize;
        let page = PageSize::from_shift(header.page_shift.load(Ordering::Relaxed))
            .ok_or_else(|| bad("bad page size in the header"))?;
        let specs = Self::sizes(frames, page, files, clients, buckets, ways);
        if (n(&header.leaves), n(&header.inners)) != Self::pools(frames, files) {
            return Err(bad("bad index pool sizes in the header"));
        }
        let (n_leaves, n_inners) = Self::pools(frames, files);
        let mut regions = [(NonNull::dangling(), 0usize); 22];
        for (i, s) in specs.iter().enumerate() {
            let (p, len) = seg.region(s.kind).ok_or_else(|| bad(format!("no region {}", s.kind)))?;
            if len < s.len {
                return Err(bad(format!("region {} holds {len} bytes, needs {}", s.kind, s.len)));
            }
            regions[i] = (p, len);
        }
        Ok(View {
            header: h.cast(),
            clients: (regions[1].0, specs[1].len),
            files: regions[2].0.cast(),
            holds: regions[3].0.cast(),
            heads: regions[4].0.cast(),
            partitions: regions[5].0.cast(),
            frames: regions[6].0.cast(),
            pages: regions[7].0,
            counters: regions[8].0.cast(),
            paths: regions[9].0.cast(),
            leaves: regions[10].0.cast(),
            leaf_meta: regions[11].0.cast(),
            inners: regions[12].0.cast(),
            inner_meta: regions[13].0.cast(),
            chunks: regions[14].0.cast(),
            pins: regions[15].0.cast(),
            set_tags: regions[16].0.cast(),
            free: regions[17].0.cast(),
            policy: regions[18].0.cast(),
            ghosts: regions[19].0.cast(),
            latencies: regions[20].0.cast(),
            dirty_map: regions[21].0.cast(),
            n_leaves,
            n_inners,
            n_frames: frames,
            page_size: page,
            n_files: files,
            n_clients: clients,
            n_buckets: buckets,
            mapped: Mapped::new(frames, page),
            chunk_parts: Self::chunk_parts(frames, page, n_leaves, n_inners),
            refused_until: AtomicU64::new(0),
            // A private cache's frames are on huge pages from their first touch: no chunk
            // needs recording for a collapse.
            huge: header.has(technique::HUGE_PAGES) && !header.has(technique::PRIVATE_FRAMES),
            set_ways: ways,
            n_sets: SetMap::count(frames, ways),
            seg,
        })
    }

    /// Frames in use (`SharedCache::resize`): claims take frames below it only.
    #[inline]
    pub fn active(&self) -> usize {
        // Acquire: pairs with a resize's stores.
        (self.header().active.frames.load(Ordering::Acquire) as usize).clamp(1, self.n_frames)
    }

    pub fn header(&self) -> &Header {
        // SAFETY: checked at attach; lives as long as the segment, which `self` owns.
        unsafe { self.header.as_ref() }
    }

    /// The devices' GC states.
    pub fn gc(&self) -> &super::gc::GcTable {
        &self.header().gc
    }

    pub fn clients(&self) -> Clients<'_> {
        // SAFETY: the client region, used only as the client table, lives as long as `self`.
        unsafe { Clients::from_region(self.clients.0, self.clients.1) }
    }

    pub fn files(&self) -> &[FileEntry] {
        // SAFETY: the region holds `n_files` entries (checked at attach), atomics only.
        unsafe { std::slice::from_raw_parts(self.files.as_ptr(), self.n_files) }
    }

    /// Client `id`'s open counts, one per file slot: opens in the low 16 bits, opens for
    /// writing in the high 16.
    pub fn holds(&self, id: u32) -> &[AtomicU32] {
        self.holds_of_slot(((id & ((1 << 20) - 1)) as usize).saturating_sub(1))
    }

    /// The open counts of client table slot `c` (0-based).
    pub fn holds_of_slot(&self, c: usize) -> &[AtomicU32] {
        let c = c.min(self.n_clients - 1);
        // SAFETY: `n_clients * n_files` counters (checked at attach); `c` is in range.
        unsafe { std::slice::from_raw_parts(self.holds.as_ptr().add(c * self.n_files), self.n_files) }
    }

    pub fn n_clients(&self) -> usize {
        self.n_clients
    }

    fn path_words(&self, slot: usize) -> &[AtomicU64] {
        assert!(slot < self.n_files);
        // SAFETY: `n_files * PATH_WORDS` words (checked at attach); `slot` is in range.
        unsafe { std::slice::from_raw_parts(self.paths.as_ptr().add(slot * PATH_WORDS), PATH_WORDS) }
    }

    /// Records where entry `slot`'s file was opened (an absolute path), so that a service with
    /// no descriptor of it can open it to write back what a dead writer left; a path too long
    /// for the room is not kept. Under the table's lock.
    pub fn set_path(&self, slot: usize, path: &[u8]) {
        let words = self.path_words(slot);
        let fits = path.len() <= 8 * (PATH_WORDS - 1);
        for (w, chunk) in words[1..].iter().zip(path.chunks(8)).take_while(|_| fits) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed); // Relaxed: under the table's lock
        }
        words[0].store(if fits { path.len() as u64 } else { 0 }, Ordering::Relaxed);
        // as above
    }

    /// Entry `slot`'s path, if one was recorded. Under the table's lock.
    pub fn path(&self, slot: usize) -> Option<Vec<u8>> {
        let words = self.path_words(slot);
        // Relaxed (all): under the table's lock.
        let len = words[0].load(Ordering::Relaxed) as usize;
        if len == 0 || len > 8 * (PATH_WORDS - 1) {
            return None;
        }
        let mut path: Vec<u8> =
            words[1..].iter().flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes()).collect();
        path.truncate(len);
        Some(path)
    }

    pub fn frames(&self) -> &[FrameMeta] {
        // SAFETY: `n_frames` metas (checked at attach), atomics only.
        unsafe { std::slice::from_raw_parts(self.frames.as_ptr(), self.n_frames) }
    }

    /// The free frames' stack (`free.rs`).
    /// Each frame's replacement history and queue links (`policy/`).
    pub fn policy_frames(&self) -> &[super::policy::PolicyFrame] {
        // SAFETY: `n_frames` entries (checked at attach), atomics only.
        unsafe { std::slice::from_raw_parts(self.policy.as_ptr(), self.n_frames) }
    }

    /// Every process's latency histograms (`latency.rs`).
    pub fn latencies(&self) -> &super::latency::LatencyTable {
        // SAFETY: the region is large enough (checked at attach), aligned (regions start on
        // 2 MiB) and holds atomics only, all zeros valid.
        unsafe { self.latencies.as_ref() }
    }

    /// The frames that hold dirty pages (`dirty_map.rs`).
    pub fn dirty_map(&self) -> super::dirty_map::DirtyMap<'_> {
        let words = super::dirty_map::words(self.n_frames);
        // SAFETY: `dirty_map::words(n_frames)` words (checked at attach), atomics only.
        let region = unsafe { std::slice::from_raw_parts(self.dirty_map.as_ptr(), words) };
        super::dirty_map::DirtyMap::new(region, self.n_frames)
    }

    /// S3-FIFO's ghost entries (`policy/ghost.rs`).
    pub fn ghosts(&self) -> &[AtomicU64] {
        // SAFETY: `ghost::slots(n_frames)` words (checked at attach), atomics only.
        unsafe {
            std::slice::from_raw_parts(self.ghosts.as_ptr(), super::policy::ghost::slots(self.n_frames))
        }
    }

    /// The two-layer allocator's pool (`pool.rs`): its regions, and the frames' link words
    /// (the `FREE` region, which the stack of `free_frames` uses without it).
    pub fn pool(&self) -> super::pool::Pool<'_> {
        let h = self.header();
        // Relaxed: fixed before the magic number was published.
        let n = (h.n_regions.load(Ordering::Relaxed) as usize).clamp(1, super::pool::MAX_REGIONS);
        // SAFETY: `n_frames` words (checked at attach), atomics only.
        let links = unsafe { std::slice::from_raw_parts(self.free.as_ptr(), self.n_frames) };
        super::pool::Pool { regions: &h.regions[..n], links }
    }

    pub fn free_frames(&self) -> super::free::FreeFrames<'_> {
        let h = self.header();
        // SAFETY: `n_frames` slots (checked at attach), atomics only.
        let slots = unsafe { std::slice::from_raw_parts(self.free.as_ptr(), self.n_frames) };
        super::free::FreeFrames { lock: &h.free_lock, count: &h.free_count, slots }
    }

    /// Every client slot's counters.
    pub fn counters(&self) -> &[ClientCounters] {
        // SAFETY: `n_clients` of them (checked at attach), atomics only; regions are 2 MiB-aligned.
        unsafe { std::slice::from_raw_parts(self.counters.as_ptr(), self.n_clients) }
    }

    /// Words before the ledgers' slots: a `used` word per client, in whole cache lines.
    fn used_words(clients: usize) -> usize {
        clients.next_multiple_of(16)
    }

    /// Client table slot `c`'s (0-based) pin ledger.
    pub fn ledger(&self, c: usize) -> Ledger<'_> {
        let c = c.min(self.n_clients - 1);
        let used = Self::used_words(self.n_clients);
        // SAFETY: `used_words + n_clients * PIN_SLOTS` words (checked at attach), atomics only;
        // `c` is in range.
        unsafe {
            Ledger {
                used: &*self.pins.as_ptr().add(c),
                slots: std::slice::from_raw_parts(self.pins.as_ptr().add(used + c * PIN_SLOTS), PIN_SLOTS),
            }
        }
    }

    /// Client `id`'s counters.
    pub fn counters_of(&self, id: u32) -> &ClientCounters {
        let c = ((id & ((1 << 20) - 1)) as usize).saturating_sub(1).min(self.n_clients - 1);
        &self.counters()[c]
    }

    pub fn map(&self) -> PageMap<'_> {
        PageMap {
            // SAFETY: `n_buckets` heads and `PARTITIONS` locks (checked at attach), atomics only.
            heads: unsafe { std::slice::from_raw_parts(self.heads.as_ptr(), self.n_buckets) },
            // SAFETY: as above.
            locks: unsafe { std::slice::from_raw_parts(self.partitions.as_ptr(), PARTITIONS) },
            frames: self.frames(),
        }
    }

    /// The tree index's pools and roots.
    pub fn forest(&self) -> Forest<'_, [FileEntry]> {
        let header = self.header();
        Forest {
            leaves: Pool {
                // SAFETY: `n_leaves` nodes and metas (checked at attach), atomics only.
                nodes: unsafe { std::slice::from_raw_parts(self.leaves.as_ptr(), self.n_leaves) },
                // SAFETY: as above.
                meta: unsafe { std::slice::from_raw_parts(self.leaf_meta.as_ptr(), self.n_leaves) },
                free: &header.leaf_free,
                lazy: Some(self.lazy(self.leaves.as_ptr().cast(), self.n_leaves * size_of::<Leaf>(), 1)),
            },
            inners: Pool {
                // SAFETY: `n_inners` nodes and metas (checked at attach), atomics only.
                nodes: unsafe { std::slice::from_raw_parts(self.inners.as_ptr(), self.n_inners) },
                // SAFETY: as above.
                meta: unsafe { std::slice::from_raw_parts(self.inner_meta.as_ptr(), self.n_inners) },
                free: &header.inner_free,
                lazy: Some(self.lazy(self.inners.as_ptr().cast(), self.n_inners * size_of::<Inner>(), 2)),
            },
            files: self.files(),
        }
    }

    /// The sets of frames; their hands are the bucket heads' words, which only the hash uses
    /// (there are as many as frames, so at least one per set).
    pub fn sets(&self) -> SetMap<'_> {
        let map = self.map();
        SetMap {
            locks: map.locks,
            frames: map.frames,
            hands: &map.heads[..self.n_sets],
            // SAFETY: `n_sets * stride` words (checked at attach), atomics only.
            tags: unsafe {
                std::slice::from_raw_parts(
                    self.set_tags.as_ptr(),
                    self.n_sets * SetMap::stride(self.set_ways),
                )
            },
            ways: self.set_ways,
            sets: self.n_sets,
        }
    }

    /// The page index the header's `techniques` name (`technique::RADIX_INDEX`, `SET_ASSOC`,
    /// else the hash).
    pub fn index(&self, techniques: u64) -> Index<'_> {
        if techniques & technique::RADIX_INDEX != 0 {
            let locks = (techniques & technique::LOCKED_INDEX != 0).then(|| self.map().locks);
            Index::Radix(self.forest(), self.frames(), locks)
        } else if techniques & technique::SET_ASSOC != 0 {
            Index::Sets(self.sets())
        } else {
            Index::Hash(self.map())
        }
    }

    /// The state of chunk `c` of the frames' bytes (`c < n_frames.div_ceil(page_size.chunk_frames())`;
    /// the huge-page states of whole chunks only).
    pub fn chunk(&self, c: usize) -> &Chunk {
        assert!(c < self.chunk_parts[0]);
        // SAFETY: in bounds of the chunks region (checked at attach); atomics only.
        unsafe { &*self.chunks.as_ptr().add(c) }
    }

    /// Whether frame `f`'s chunk's memory is allocated (`chunk.rs`), or is now: a claim's,
    /// before the frame is used. False if the kernel refused (a full tmpfs), said once; the
    /// process then tries again no sooner than a second later, passing over the frames of
    /// chunks not yet allocated meanwhile.
    #[inline]
    pub fn reserve(&self, f: usize) -> bool {
        let page = self.page_size.bytes();
        self.lazy(self.pages.as_ptr(), self.n_frames * page, 0).ensure(f * page)
    }

    /// Whether chunk `c` of the frames' bytes is allocated (`prepare.rs`).
    pub fn chunk_allocated(&self, c: usize) -> bool {
        self.chunk(c).allocated()
    }

    /// Whether this process has mapped frame `f`'s chunk.
    #[cfg(test)]
    pub fn chunk_mapped(&self, f: usize) -> bool {
        self.mapped.has(f)
    }

    /// Bytes of the regions that are neither page frames nor the tree's nodes (counted in use
    /// as the index's): frame words, file table, client table, ledgers, bucket heads or set
    /// tags, fixed when the segment was made.
    pub fn metadata_bytes(&self) -> u64 {
        let index = [kind::PAGES, kind::LEAVES, kind::LEAF_META, kind::INNERS, kind::INNER_META];
        (kind::HEADER..=kind::FREE)
            .filter(|k| !index.contains(k))
            .filter_map(|k| self.seg.region(k))
            .map(|(_, len)| len as u64)
            .sum()
    }

    /// Region `base` of `len` bytes, allocated a chunk at a time, with the marks of part
    /// `part` of the chunks region (0: the frames', 1: the leaves', 2: the inner nodes').
    #[inline]
    fn lazy(&self, base: *const u8, len: usize, part: usize) -> Lazy<'_> {
        let first: usize = self.chunk_parts[..part].iter().sum();
        // SAFETY: the chunks region holds every part's marks (`chunk_parts`, checked at
        // attach); atomics only.
        let marks =
            unsafe { std::slice::from_raw_parts(self.chunks.as_ptr().add(first), self.chunk_parts[part]) };
        Lazy { seg: &self.seg, base: base as usize, len, marks, refused_until: &self.refused_until }
    }

    /// Records frame `f`'s chunk touched (`chunk.rs`), then maps it.
    #[cold]
    fn map_chunk_of(&self, f: usize) {
        self.entered(f / self.page_size.chunk_frames());
        // A failure leaves the pages to fault in one by one.
        let _ = self.mapped.map(self.pages.as_ptr(), self.n_frames, f);
    }

    /// Records chunk `c` in use (`chunk.rs`): a process touches it, or the hand has reached it.
    pub fn entered(&self, c: usize) {
        if self.huge && c < self.n_frames / self.page_size.chunk_frames() {
            self.chunk(c).touched();
        }
    }

    /// Maps frame `f`'s chunk in this process before any use of it (`prepare.rs`), recording
    /// nothing: the hand records it in use as it reaches it.
    pub fn map_ahead(&self, f: usize) {
        // A failure leaves the pages to fault in one by one.
        let _ = self.mapped.map(self.pages.as_ptr(), self.n_frames, f);
    }

    /// Makes every frame's bytes resident (`SharedConfig::prefault`), after their NUMA
    /// binding: each chunk allocated, mapped in this process and populated, recording none in
    /// use (the hand does as it reaches them).
    fn prefault(&self) -> Result<()> {
        let (page, chunk) = (self.page_size.bytes(), self.page_size.chunk_frames());
        for f in (0..self.n_frames).step_by(chunk) {
            if !self.reserve(f) {
                return Err(Error::new(
                    ErrorKind::NoSpace,
                    format!("cannot allocate the cache's frames to prefault them (frame {f})"),
                ));
            }
            let mapped = match self.mapped.map(self.pages.as_ptr(), self.n_frames, f) {
                // A kernel before MADV_POPULATE_WRITE (Linux 5.14): a write to each page.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let len = chunk.min(self.n_frames - f) * page;
                    // SAFETY: the chunk lies inside the frames' bytes, mapped for the view's
                    // life; no frame is handed out before the segment is published.
                    unsafe { crate::frame::arena::populate(self.pages.as_ptr().add(f * page), len) }
                }
                other => other,
            };
            mapped.map_err(|e| Error::io("make the cache's frames resident (prefault)", e))?;
        }
        Ok(())
    }

    /// Maps frame `f`'s chunk as one huge page if the service made it one (`chunk.rs`) since
    /// this process mapped it on small pages: the kernel leaves other processes' small
    /// mappings of a chunk it collapses where shared memory may not have huge pages at faults
    /// (most systems), so each process asks for its own, which costs no copy.
    #[cold]
    fn map_huge_of(&self, f: usize) {
        let chunk = self.page_size.chunk_frames();
        let c = f / chunk;
        if c >= self.n_frames / chunk {
            self.mapped.mark_huge(c); // a short last chunk never is one: not asked again
            return;
        }
        if self.chunk(c).huge() && self.mapped.mark_huge(c) {
            // SAFETY: chunk `c` lies inside the frames' bytes, 2 MiB aligned in the mapping.
            let at = unsafe { self.pages.as_ptr().add(c * crate::shm::huge::HUGE_PAGE) };
            // A failure leaves this process's small mappings, as before.
            let _ = crate::shm::huge::collapse(at);
        }
    }

    /// The clock hand's position, in frames claimed since the cache was made.
    pub fn hand(&self) -> u64 {
        // Relaxed: a hint of how busy the cache is.
        self.header().clock.load(Ordering::Relaxed)
    }

    /// The bytes of frame `f`.
    pub fn page(&self, f: u32) -> *mut u8 {
        assert!((f as usize) < self.n_frames);
        if !self.mapped.has(f as usize) {
            self.map_chunk_of(f as usize);
        }
        if self.huge && !self.mapped.has_huge(f as usize) {
            self.map_huge_of(f as usize);
        }
        // SAFETY: in bounds of the pages region (`n_frames` pages, checked at attach).
        unsafe { self.pages.as_ptr().add((f as usize) << self.page_size.shift()) }
    }
}
