//! The shared cache (issue 17): one page cache in a shared-memory segment that every process
//! attached to it uses at once, coherent as the kernel's page cache is. ARCHITECTURE.md, "The
//! shared cache", says why processes are peers; this module is that design for OS files
//! ([`SharedCache::open_path`], the shim's files).
//!
//! # The segment
//! Regions (`layout.rs`): a header (sizes, the clock hand, the dirty count, the file table's
//! lock), the client table ([`crate::shm::Clients`]), the file table (`files.rs`), each
//! client's open counts per file (for repair), the page index (the tree index's node pools,
//! `tree.rs`, or the hash index's bucket heads and partition locks, `index.rs`), the frames'
//! metadata (`frame.rs`) and their bytes. Everything is addressed by index, never by pointer.
//!
//! # A process's part
//! Each attached process joins the client table; its id is the holder id of every lock it
//! takes. It opens files itself, with its own credentials, and reads and writes them through
//! its own descriptors: a miss is loaded by the process that missed, a dirty page is written
//! back by a process that has its file open for writing (a sync, a last close, the clock hand
//! passing it when memory is short). Hits and writes into cached pages are loads, stores and
//! CASes on the segment only (`file.rs`).
//!
//! # Death
//! A process killed at any point leaves at most the locks it held, each naming it. Whoever
//! waits on one asks the client table whether the holder lives; a dead holder's lock is taken
//! over and what it guarded repaired (`repair.rs`): a frame in the middle of a load is freed,
//! one in the middle of a write keeps what was written (as a killed write(2) does), a partition
//! of the index is rebuilt, a file's write sequence is ended. [`SharedCache::repair_dead`] does
//! the same for every lock a dead client holds, and then frees its slot.

mod ahead;
mod array;
mod backing;
mod bounce;
mod bypass;
mod chunk;
mod dirty_map;
mod file;
mod files;
mod frame;
mod free;
mod gc;
mod held;
mod holder;
mod huge;
mod index;
mod latency;
mod layout;
mod link;
mod load;
mod mapped;
mod named;
mod numa;
mod outside;
mod own_flusher;
mod page_size;
mod pages;
mod pin;
mod pin_ledger;
mod policy;
mod pool;
mod prepare;
mod queue;
mod quiet;
mod ranges;
mod repair;
mod resize;
pub mod serve;
mod set_flush;
mod streams;
pub(crate) mod technique;
mod tree;
mod writeback;

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::shm::Segment;

pub use crate::meta::array::ArraySpec;
pub use crate::shm::futex::on_sleep as on_sleep_for_another_process;
pub use crate::shm::futex::waiting as waiting_for_another_process;
pub use array::SharedArray;
pub use file::SharedFile;
pub use held::{hold_for_fork, locks_noted, note_lock, program_closed, ForkHold};
pub use pin::{SharedPageMut, SharedPageRef};
pub use queue::SharedQueue;
pub use quiet::on_library_thread;

/// The shared cache's default page size (`SharedConfig::page_size`; a cache's own is
/// [`SharedCache::page_size`]).
pub const PAGE_SIZE: usize = page_size::PageSize::DEFAULT.bytes();
use layout::View;
pub use layout::{
    SharedConfig, DEFAULT_FLUSH_INTERVAL, DEFAULT_SHARED_DIRTY_RATIOS, MAX_SHARED_FLUSHERS,
    MAX_SHARED_READAHEAD,
};
pub use numa::{SharedNuma, MAX_CPUS, MAX_NODES};
pub(crate) use writeback::Lent;

/// A process's attachment to a shared cache. Cloning is cheap; the process leaves the client
/// table when the last clone and the last [`SharedFile`] are dropped.
#[derive(Clone)]
pub struct SharedCache {
    inner: Arc<Inner>,
}

/// How long a writer paused for the service's write-back (`FlushKind::Background`) waits
/// without the dirty count falling before it writes back itself: write-back that fails or a
/// service that is gone slows writers down but cannot hang them.
const THROTTLE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The least time between two kicks of the service's write-back by one process
/// (`Inner::kick_write_back`), in milliseconds.
const KICK_EVERY_MS: u64 = 10;

/// Where the service's background write-back stops: the background limit less a sixteenth,
/// so that a writer past it does not wake the service at every page it dirties.
fn background_low_water(background: u64) -> u64 {
    background - background / 16
}

/// The attachment: the mapping, views of its regions, and this process's descriptors.
pub(crate) struct Inner {
    /// Our client slot's (hits, misses) when we took it: the slot's counters run on.
    before: (u64, u64),
    /// Shared with this process's preparer thread (`prepare.rs`), which must not keep the
    /// attachment (its files, their locks) past its last handle.
    view: Arc<View>,
    /// This process's client id.
    me: u32,
    /// Descriptors of the files this process has open, by slot, with how many of its
    /// `SharedFile`s share each, so the clock hand can write back their dirty pages.
    fds: Mutex<HashMap<u32, OpenFd>>,
    /// Set when the service we attached through went away and the one that took its place
    /// serves another segment (`link.rs`): every call then fails with `Io`, since two caches
    /// of one file are not coherent. Our dirty pages were written back first.
    lost: AtomicBool,
    /// Set by [`SharedCache::retire`]: the mapping and the client slot are gone.
    retired: AtomicBool,
    /// Our link to the service, shut down when we detach so the watcher thread ends and the
    /// service sees us go.
    link: Arc<link::Link>,
    /// `FORKS` when we attached: a forked child has another count, and must not act under
    /// its parent's client id (it attaches itself).
    forks: u64,
    /// Per client slot: the id last found alive and when (`files::coarse_ms`, low 32 bits),
    /// so that a lock's waiters ask `/proc` about a holder at most once per
    /// [`pages::ALIVE_FOR_MS`] (`Inner::alive`).
    alive_seen: Box<[AtomicU64]>,
    /// The header's technique switches and readahead (fixed when the cache was made), copied
    /// here so that the read and write paths load no line of the header, which every
    /// process's claims and loads write.
    techniques: u64,
    readahead_pages: u64,
    /// When this process last kicked the service's background write-back
    /// (`Inner::kick_write_back`, `files::coarse_ms`).
    kicked: AtomicU64,
    /// The header's dirty ratios (fixed too), of the frames in use (`Inner::dirty_limits`).
    dirty_ratios: (f64, f64),
    /// Where the service's last background pass over each file stopped (slot: the entry's
    /// generation and the page), where its next begins: the kernel's `writeback_index`.
    resume: Mutex<HashMap<u32, (u32, u64)>>,
    /// Until when (`files::coarse_ms`) writers past the foreground ratio do not pause for the
    /// service, whose write-back left the last pause unanswered (`pause_for_write_back`).
    unanswered_until: AtomicU64,
    /// This process's readahead loader (`ahead.rs`).
    ahead: Arc<ahead::Ahead>,
    /// The rings this process's syncs write back through with `SharedConfig::io` uring, made
    /// at its first sync's write-back; None where the kernel refuses io_uring.
    uring: std::sync::OnceLock<Option<crate::io::engine::UringEngine>>,
    /// The flusher thread of a cache this process made for itself (`create_private`).
    own_flusher: std::sync::OnceLock<Arc<own_flusher::OwnFlusher>>,
    /// This process's preparer of chunks ahead of the clock hand (`prepare.rs`).
    preparer: Arc<prepare::Preparer>,
}

/// Forks of this process image so far, counted in the child (`pthread_atfork`).
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    // Relaxed: read by this (single-threaded, just forked) process's own threads later.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Registers the fork counter once per process image.
fn count_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only bumps an atomic, valid for the process's life.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(count_fork_in_child));
    });
}

/// This process's descriptor of a cached file, shared by its opens of it.
pub(crate) struct OpenFd {
    fd: Arc<backing::Backing>,
    writable: bool,
    /// This process's `SharedFile`s of the file.
    opens: usize,
}

impl SharedCache {
    /// Makes a new shared cache as `config` says and attaches this process to it.
    pub fn create(config: &SharedConfig) -> Result<SharedCache> {
        SharedCache::create_in(config, None)
    }

    /// A cache of this process alone: the same engine on a segment nobody else maps (unless
    /// this process hands it over, [`Self::segment_fd`]), with no service; a thread of this
    /// process does the service's write-back instead (`own_flusher.rs`): every flush interval
    /// the files dirty past the expiry, and whenever the cache is past the background dirty
    /// ratio, files until a sixteenth below it. (A writer past the foreground ratio writes
    /// back itself, `FlushKind::Background` too: only a service pauses writers.) Its frames
    /// are this process's anonymous memory, as the in-process engine's: with `huge_pages`, on
    /// transparent huge pages from their first touch (where the system gives them for memory
    /// so advised), never copied to be collapsed. So its segment is no other process's to
    /// attach ([`Self::attach`] refuses it). It holds only this process's data, so a
    /// credential change keeps it ([`Self::forget_every_segment`] passes it over).
    pub fn create_private(config: &SharedConfig) -> Result<SharedCache> {
        let view = View::create(config, None, true)?;
        let cache = SharedCache::join(view, link::Link::new(None, serve::DEFAULT_IDLE, None))?;
        cache.inner.view.seg.own_alone();
        let flusher = own_flusher::OwnFlusher::start(&cache.inner)
            .map_err(|e| crate::error::Error::io("start the cache's flusher thread", e))?;
        let _ = cache.inner.own_flusher.set(flusher);
        Ok(cache)
    }

    /// Writes back every file this process has open for writing, passing over pages that
    /// other threads or processes hold (as the process dies of a signal, the thread it
    /// interrupted may hold one); the first error. A dying process stops its loaders first
    /// ([`Self::stop_loaders`]), so that none of them holds a frame.
    pub fn write_back_open_unwaiting(&self) -> Result<()> {
        self.inner.write_back_all_open_unwaiting()
    }

    /// Stops this process's loader threads for good: the windows waiting are dropped, those
    /// under way finished (a write-behind under way holds its frames); none starts again.
    pub fn stop_loaders(&self) {
        self.inner.ahead.stop();
    }

    /// Whether [`Self::create_private`] made the cache: this process's alone, with no service.
    pub fn is_private(&self) -> bool {
        self.inner.own_flusher.get().is_some()
    }

    /// Waits for a whole pass of the flusher of a cache made by [`Self::create_private`],
    /// woken for it; false if there is none, or no pass ended within 10 s (for tests).
    #[doc(hidden)]
    pub fn wait_for_own_flusher(&self) -> bool {
        self.inner.own_flusher.get().is_some_and(|f| f.wait_for_pass(std::time::Duration::from_secs(10)))
    }

    /// As [`Self::create`], with `named` the segment a new file at that path on a tmpfs, which
    /// outlives every process (`Segment::create_in_tmpfs`): the service's.
    pub(crate) fn create_in(config: &SharedConfig, named: Option<&Path>) -> Result<SharedCache> {
        SharedCache::join(
            View::create(config, named, false)?,
            link::Link::new(None, serve::DEFAULT_IDLE, None),
        )
    }

    /// Attaches to the shared cache behind `fd` (a segment descriptor that its creator passed,
    /// by [`crate::shm::handoff`] or by inheritance), after checking the segment.
    pub fn attach(fd: OwnedFd) -> Result<SharedCache> {
        SharedCache::adopt(Segment::attach(fd)?)
    }

    /// Attaches to `seg`, mapped and checked (`Segment::attach`; a service taking over a dead
    /// one's cache holds its keeper lock first).
    pub(crate) fn adopt(seg: Segment) -> Result<SharedCache> {
        SharedCache::join(View::attach(seg)?, link::Link::new(None, serve::DEFAULT_IDLE, None))
    }

    fn join(view: View, link: link::Link) -> Result<SharedCache> {
        count_forks();
        // Every slot taken: one whose process died is ours, its leftovers repaired below (a
        // cache whose processes all died without a service to reap them stays usable).
        let (me, inherited) = match view.clients().join() {
            Ok(me) => (me, None),
            Err(e) if e.kind() == crate::error::ErrorKind::Busy => match view.clients().take_dead() {
                Some((me, dead)) => (me, Some(dead)),
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let view_clients = view.clients().capacity();
        let c = view.counters_of(me);
        // Relaxed: statistics; the slot's counts of the clients that held it before.
        let before = (c.sum(|s| &s.hits), c.sum(|s| &s.misses));
        let (techniques, readahead_pages) = (view.header().techniques(), view.header().readahead_pages());
        let dirty_ratios = view.header().dirty_ratios();
        let inner = Arc::new(Inner {
            preparer: Arc::default(),
            before,
            view: Arc::new(view),
            me,
            fds: Mutex::new(HashMap::new()),
            lost: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            link: Arc::new(link),
            // Relaxed: see `count_fork_in_child`.
            forks: FORKS.load(Ordering::Relaxed),
            alive_seen: (0..view_clients).map(|_| AtomicU64::new(0)).collect(),
            techniques,
            readahead_pages,
            dirty_ratios,
            kicked: AtomicU64::new(0),
            // Relaxed: a unique number.
            resume: Mutex::new(HashMap::new()),
            unanswered_until: AtomicU64::new(0),
            ahead: Arc::default(),
            own_flusher: std::sync::OnceLock::new(),
            uring: std::sync::OnceLock::new(),
        });
        if let Some(dead) = inherited {
            inner.repair_inherited(dead);
        }
        // A newcomer clears up after anyone who died before it came.
        inner.repair_dead();
        Ok(SharedCache { inner })
    }

    /// Attaches to `seg`, received from the service at `socket` over `service`, which stays
    /// open: its hang-up tells the service we are gone, and the service's tells us (a watcher
    /// thread, which puts a service back: `link.rs`). With no `service` (it is stopped), the
    /// watcher links to it once it answers. `idle`: that of a service we start in its place.
    pub(crate) fn join_with(
        seg: Segment,
        service: Option<UnixStream>,
        socket: &Path,
        idle: std::time::Duration,
    ) -> Result<SharedCache> {
        let service = service.map(|s| UnixStream::from(crate::shm::high_fd::out_of_the_way(s.into())));
        let link = link::Link::new(Some(socket.to_path_buf()), idle, service);
        let cache = SharedCache::join(View::attach(seg)?, link)?;
        link::watch(&cache.inner)?;
        Ok(cache)
    }

    /// The segment's descriptor, to pass to another process.
    pub fn segment_fd(&self) -> BorrowedFd<'_> {
        self.inner.view.seg.as_fd()
    }

    /// The segment, to hand it over a socket ([`crate::shm::handoff::offer`]).
    pub fn segment(&self) -> &Segment {
        &self.inner.view.seg
    }

    /// Opens the OS file at `path` through the cache, with this process's own permissions
    /// (read-only unless `write`).
    pub fn open_path(&self, path: &Path, write: bool) -> Result<SharedFile> {
        SharedFile::open(self.inner.clone(), path, write, path.display().to_string())
    }

    /// As [`Self::open_path`], naming the file `name` in messages (the shim opens
    /// `/proc/self/fd/N` for the file a program opened by its path).
    pub fn open_path_as(&self, path: &Path, write: bool, name: &str) -> Result<SharedFile> {
        SharedFile::open(self.inner.clone(), path, write, name.to_string())
    }

    /// Bytes written back since the cache was made, by every process.
    pub fn written_back_bytes(&self) -> u64 {
        // Relaxed: a count.
        self.inner.view.header().written_back.load(Ordering::Relaxed) * self.page_size() as u64
    }

    /// The size of the cache's pages (`SharedConfig::page_size`): its frames', its counts'.
    pub fn page_size(&self) -> usize {
        self.inner.view.page_size.bytes()
    }

    /// The service's side of a lent descriptor: true if `fd` is file `slot`'s, open for
    /// writing.
    pub(crate) fn accept_lent_fd(&self, slot: u32, fd: &OwnedFd) -> bool {
        use std::os::fd::AsRawFd;
        let Some(e) = self.inner.view.files().get(slot as usize) else { return false };
        // SAFETY: F_GETFL on a descriptor we own; no memory involved.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        // An O_APPEND descriptor would put every page written back at the end of the file.
        if flags < 0 || flags & libc::O_ACCMODE == libc::O_RDONLY || flags & libc::O_APPEND != 0 {
            return false;
        }
        let Ok(md) = fd.try_clone().map(std::fs::File::from).and_then(|f| f.metadata()) else { return false };
        same_file(e, &md)
    }

    /// The service's write-back of dirty pages whose every writer is gone, through the
    /// descriptors lent to it (or, lent to a service that died, the file opened again where
    /// its last writer had it); the number of dirty pages it could not write. A descriptor is
    /// kept while its file has writers or dirty pages (longer would keep an unlinked file's
    /// blocks); an unlinked file that nobody has open any more is forgotten, pages and entry,
    /// so its inode number can serve another file. The table's lock is taken only when there
    /// is something to do, and no write waits under it: a service stopped (SIGSTOP) while
    /// holding it would stall every open in every process.
    pub(crate) fn write_back_orphans(&self, lent: &mut HashMap<u32, Arc<Lent>>) -> u64 {
        self.inner.write_back_orphans(lent)
    }

    /// The service's background write-back, as the kernel's flusher threads: through the
    /// descriptors writers lent it, the dirty pages of every file dirty for the cache's dirty
    /// expiry or longer, of the others, the longest dirty first, while more of the cache than
    /// its background dirty ratio is dirty (until a sixteenth below it), and of the files in
    /// `asked` (a process asked for them: its `SharedFile::start_write_back`). Errors stay on the files for their next sync. A file's generation is read under the table's lock,
    /// with its entry checked to still name the descriptor's file, its pages listed after it,
    /// and each written only if its frame still holds that page (of that generation), so
    /// nothing waits under the lock (a partition lock a stopped process holds, an I/O) and no
    /// page goes to another file. The pages written.
    pub(crate) fn write_back_due(&self, lent: &[(u32, Arc<Lent>)], asked: &[u32]) -> u64 {
        let inner = &self.inner;
        let (files, header) = (inner.view.files(), inner.view.header());
        let expire = header.dirty_expire();
        // Relaxed: thresholds.
        let crowded = header.dirty.load(Ordering::Relaxed) > inner.dirty_limits().0;
        let now = files::now_secs();
        let before = header.written_back.load(Ordering::Relaxed);
        // Relaxed (age): a hint.
        let expired =
            |e: &files::FileEntry| now.saturating_sub(e.dirtied.load(Ordering::Relaxed)) >= expire.as_secs();
        let mut due: Vec<(u32, &Arc<Lent>, Option<u64>)> = lent
            .iter()
            .filter_map(|(slot, fd)| {
                let e = files.get(*slot as usize)?;
                // Acquire: pairs with `mark_dirty`'s count.
                if e.dirty.load(Ordering::Acquire) == 0 {
                    return None;
                }
                // Asked for (DONTNEED) or dirty for long: all of it; due for the crowd only:
                // until the cache is below the background ratio by a margin.
                if asked.contains(slot) || expired(e) {
                    Some((*slot, fd, None))
                } else {
                    crowded.then_some((*slot, fd, Some(background_low_water(inner.dirty_limits().0))))
                }
            })
            .collect();
        // The files dirty the longest first, as the kernel's flusher takes its inodes.
        // Relaxed: a hint.
        due.sort_by_key(|(slot, _, _)| files[*slot as usize].dirtied.load(Ordering::Relaxed));
        // Several flushers (ScaleCache's parallel write-back, `SharedConfig::flushers`): file
        // i of the pass goes to flusher i modulo their number, each on a thread of its own.
        // With NUMA nodes (`numa.rs`), each node has as many flushers of its own, bound to its
        // CPUs, that write only the node's frames (of every file due).
        let nodes = if inner.index().sets().is_some() { 1 } else { header.numa.count() };
        let flushers = (header.flushers() as usize / nodes).max(1).clamp(1, due.len().max(1));
        let flush = |which: usize| {
            let node = which / flushers;
            let part = (nodes > 1).then(|| numa::frames_of(node, nodes, inner.view.n_frames));
            if nodes > 1 && !numa::run_on(&header.numa, node) {
                log::debug!("shared cache: no CPU of NUMA node {node} takes its flusher");
            }
            for &(slot, fd, stop_at) in due.iter().skip(which % flushers).step_by(flushers) {
                self.write_back_file(slot, fd, now, stop_at, part.clone());
                // Relaxed: a statistic.
                header.flusher_files[which % header.flushers() as usize].fetch_add(1, Ordering::Relaxed);
            }
        };
        std::thread::scope(|s| {
            // With nodes, every flusher on a thread of its own: this one keeps its CPUs.
            quiet::with_signals_blocked(|| {
                for which in (nodes == 1) as usize..flushers * nodes {
                    s.spawn(move || {
                        quiet::library_thread();
                        flush(which)
                    });
                }
            });
            if nodes == 1 {
                flush(0);
            }
        });
        if nodes > 1 {
            // The nodes' flushers each wrote a part: each file written back whole is aged here.
            for &(slot, _, stop_at) in &due {
                if stop_at.is_none() {
                    age_again_if_dirty(&files[slot as usize], now);
                }
            }
        }
        for e in asked.iter().filter_map(|&slot| files.get(slot as usize)) {
            // Relaxed: a hint (`Inner::ask_write_back`). Only now may the file be asked for
            // again: a program that advises in a loop would send a message each time if a
            // request were done once received.
            e.asked.store(0, Ordering::Relaxed);
        }
        header.written_back.load(Ordering::Relaxed) - before
    }

    /// The service's write-back of file `slot` through `fd`, lent by a writer: all of its
    /// dirty pages, or with `stop_at` until the cache has no more dirty pages than that; with
    /// `part`, only those in these frames (a NUMA node's): the caller ages the file once every
    /// part is written, and a crowded pass over parts begins at the file's first page.
    fn write_back_file(
        &self,
        slot: u32,
        fd: &Lent,
        now: u64,
        stop_at: Option<u64>,
        part: Option<std::ops::Range<usize>>,
    ) {
        let inner = &self.inner;
        let (e, header) = (&inner.view.files()[slot as usize], inner.view.header());
        let Some((gen, end)) = self.lent_extent(slot, fd) else { return };
        if let Some(part) = part {
            let mut pages = inner.candidates_of(slot, gen, 0, end);
            pages.retain(|&(f, _)| part.contains(&(f as usize)));
            // Errors stay on the file, for its next sync.
            let _ = inner.write_back_listed(&pages, fd.target(), false, stop_at);
            return;
        }
        // A background pass (`stop_at`) begins where the last one over the file stopped and
        // wraps around, so that a file written back in part is written back all round, not
        // its first pages each time (the kernel's `writeback_index`).
        let mut resume = inner.resume.lock().unwrap_or_else(|p| p.into_inner());
        let from = match (stop_at, resume.get(&slot)) {
            (Some(_), Some(&(g, page))) if g == gen && page < end => page,
            _ => 0,
        };
        drop(resume);
        for (a, b) in [(from, end), (0, from)] {
            let pages = inner.candidates_of(slot, gen, a, b);
            // Errors stay on the file, for its next sync.
            let _ = inner.write_back_listed(&pages, fd.target(), false, stop_at);
            // Relaxed: a threshold.
            if stop_at.is_some_and(|at| header.dirty.load(Ordering::Relaxed) <= at) {
                // Stopped: the next pass begins at the first page still dirty.
                let frames = inner.view.frames();
                let still = pages.iter().filter(|&&(f, k)| {
                    let m = &frames[f as usize];
                    m.home() == k && m.flags() & frame::DIRTY != 0
                });
                let page = still.map(|&(_, k)| frame::key_page(k)).min().unwrap_or(b);
                resume = inner.resume.lock().unwrap_or_else(|p| p.into_inner());
                resume.insert(slot, (gen, page));
                return;
            }
        }
        inner.resume.lock().unwrap_or_else(|p| p.into_inner()).remove(&slot);
        // Written in part (`stop_at`), it keeps its age, so its older pages are written once
        // they expire.
        if stop_at.is_none() {
            age_again_if_dirty(e, now);
        }
    }

    /// File `slot`'s generation and the end of its pages below its length (`file_extent`),
    /// read under the table's lock while its entry still names `fd`'s file; None otherwise
    /// (pages of an older generation, or of another file since, are not written through it).
    pub(crate) fn lent_extent(&self, slot: u32, fd: &Lent) -> Option<(u32, u64)> {
        let inner = &self.inner;
        let e = &inner.view.files()[slot as usize];
        let md = fd.fd.metadata().ok()?;
        let table = &inner.view.header().files_lock;
        table.lock(inner.me, |h| inner.alive(h));
        let extent = same_file(e, &md).then(|| inner.file_extent(slot));
        table.unlock(inner.me);
        extent
    }

    /// Checks the page index against the frames while nobody changes the cache (for tests):
    /// every file's tree is sound and each of its entries is a frame whose `home` is that
    /// page, and every frame with a `home` of its entry's generation is found under it.
    #[doc(hidden)]
    pub fn check_index(&self) -> std::result::Result<(), String> {
        let (inner, frames) = (&self.inner, self.inner.view.frames());
        let index = inner.index();
        // Relaxed (all): nobody changes the cache (the caller's word).
        let mut gens: Vec<u32> =
            inner.view.files().iter().map(|e| e.gen.load(Ordering::Relaxed) & 0xff).collect();
        if let index::Index::Radix(forest, ..) = &index {
            for slot in 0..inner.view.n_files as u32 {
                let (gen, entries) = forest.check(slot, false)?;
                if gen != gens[slot as usize] {
                    // A tree left a generation off by a kill: the next insert replaces it.
                    gens[slot as usize] = u32::MAX;
                }
                for (page, f) in entries {
                    let home =
                        frames.get(f as usize).ok_or(format!("file {slot}'s tree names frame {f}"))?.home();
                    if home != frame::key(slot, gen, page) {
                        return Err(format!(
                            "frame {f} is in file {slot}'s tree at page {page}; its home is {home:#x}"
                        ));
                    }
                }
            }
        }
        for (f, m) in frames.iter().enumerate() {
            let home = m.home();
            if home == 0 || gens.get(frame::key_slot(home) as usize) != Some(&frame::key_gen(home)) {
                continue; // a frame of a generation gone by is the clock's to reclaim
            }
            if index.find(home, inner.me, &|h| inner.alive(h)) != Some(f as u32) {
                return Err(format!("frame {f}'s home {home:#x} does not find it"));
            }
        }
        Ok(())
    }

    /// Writes back and flushes (fsync) every file this process has open for writing; the
    /// first error.
    pub fn sync_open_files(&self) -> Result<()> {
        self.inner.check_service()?;
        let mut first = Ok(());
        for (slot, fd) in self.inner.writable_fds() {
            // Acquire: pairs with the length's Release stores.
            let len = || self.inner.view.files()[slot as usize].len.load(Ordering::Acquire);
            let r = self.inner.write_back_slot(slot, &fd).and_then(|()| fd.sync(&len, true));
            first = first.and(r);
        }
        first
    }

    /// Leaves the cache for good while this process lives on: for a process about to drop the
    /// privileges the cache was shared under (setuid and kin), which must then reach no cached
    /// file it could not open, nor any other process's unwritten bytes. The caller has written
    /// back and stopped using its files first (the shim demotes every one). Every later call
    /// fails with `Io`; locks a thread of ours still held are taken over by the others, as a
    /// dead process's; the mapping is replaced by private zeros and the segment's descriptor
    /// closed (`Segment::forget`).
    pub fn retire(&self) {
        let inner = &self.inner;
        if inner.forked() || inner.retired.swap(true, Ordering::AcqRel) {
            return; // AcqRel: once
        }
        // Relaxed: a flag each call checks.
        inner.lost.store(true, Ordering::Relaxed);
        inner.ahead.stop();
        inner.preparer.stop();
        inner.link.shut();
        inner.view.clients().leave(inner.me);
        if !inner.view.seg.forget() {
            log::error!("upcache: giving up the shared cache's mapping failed");
        }
    }

    /// Gives up every shared segment this process maps ([`Self::retire`]'s last step for all
    /// of them, those a forked child inherited from its parent included: such a child never
    /// joined its parent's client slot), but a private cache this process made
    /// ([`Self::create_private`]), which holds its own data alone. False if one could not be
    /// given up.
    pub fn forget_every_segment() -> bool {
        crate::shm::forget_all()
    }

    /// Before this process exits without detaching (a process's exit handler): if the
    /// service died and pages are dirty, puts a service back first, which takes the cache
    /// over, so that what dead writers left is not lost with the last mapping of it.
    pub fn before_exit(&self) {
        link::before_leaving(&self.inner);
    }

    /// Releases whatever processes that died still held, and frees their client slots; the
    /// number of clients reaped.
    pub fn repair_dead(&self) -> usize {
        self.inner.repair_dead()
    }

    /// How many processes are attached (the service included), without the frame scans of a
    /// status report.
    pub(crate) fn client_count(&self) -> usize {
        self.inner.view.clients().pids().len()
    }

    /// This process's client id.
    pub fn client_id(&self) -> u32 {
        self.inner.me
    }

    /// Waits until this process's readahead is done: the windows its sequential readers
    /// posted are loaded (or given up). For a measurement or a test that wants the cache
    /// settled; reads never need it.
    pub fn wait_for_readahead(&self) {
        if self.inner.forked() {
            return; // the parent's loaders are not this process's
        }
        self.inner.ahead.wait_idle();
    }

    /// An asynchronous queue of reads and writes onto this cache, `depth` requests deep
    /// (1 to [`crate::io::completion::MAX_DEPTH`]); its loads go through an io_uring of its own
    /// (`SharedConfig::io`), each read copies when its pages are in (`queue.rs`).
    pub fn queue(&self, depth: usize) -> Result<SharedQueue> {
        SharedQueue::new(self.inner.clone(), depth)
    }

    /// This attachment's address, which its files' queues check them against
    /// (`SharedFile::check_queued`).
    pub(crate) fn address(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Every attached process's latency histograms since the cache was made, as
    /// [`crate::Cache::latencies`] reports a private cache's: reads and writes (one in
    /// [`crate::LATENCY_SAMPLE_EVERY`] per thread), syncs, and per device the loads and
    /// write-back requests the cache waited for (an OS file's are device 0's; an array's go
    /// to its devices; the devices up to the last that saw any).
    pub fn latencies(&self) -> crate::metrics::latency::Latencies {
        self.inner.view.latencies().snapshot()
    }

    /// The engine write-back goes through, as [`crate::Cache::io_engine`] names it.
    pub fn io_engine(&self) -> &'static str {
        self.inner.io_kind().name()
    }

    /// A handle that reads the cache's counters and histograms from any thread.
    pub fn stats_handle(&self) -> SharedStats {
        SharedStats { inner: self.inner.clone() }
    }

    /// Frames pinned right now by a live process. Scans every frame: for tests and
    /// diagnostics.
    pub fn pinned_frames(&self) -> usize {
        (0..self.inner.view.n_frames as u32).filter(|&f| self.inner.pinned(f)).count()
    }

    /// Stops caching the OS file at `path` for every open of it: its dirty pages written back
    /// and every page dropped (`SharedFile::forget`). `NotFound` if no process has it open.
    pub fn close_path(&self, path: &Path) -> Result<()> {
        let md = std::fs::metadata(path)
            .map_err(|e| crate::error::Error::io(format!("stat {}", path.display()), e))?;
        if !self.inner.is_open(&files::OsFile::of(&md)) {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::NotFound,
                format!("{} is not cached", path.display()),
            ));
        }
        let f = self.open_path(path, true)?;
        f.forget(true)?;
        f.close()
    }

    /// Counts for a status report.
    pub fn status(&self) -> SharedStatus {
        self.inner.status()
    }

    /// This process's own page lookups since it attached: (hits, misses).
    pub fn own_counts(&self) -> (u64, u64) {
        let c = self.inner.view.counters_of(self.inner.me);
        let (hits, misses) = self.inner.before;
        // Relaxed: statistics.
        (c.sum(|s| &s.hits).saturating_sub(hits), c.sum(|s| &s.misses).saturating_sub(misses))
    }

    /// The bytes of page frames the cache uses (its size, whatever this process asked for;
    /// after a [`Self::resize`], the size it left, at most `config().memory`).
    pub fn memory(&self) -> u64 {
        self.inner.view.active() as u64 * self.page_size() as u64
    }

    /// The cache's size and write-back settings, as its creator (its service) set them.
    pub fn config(&self) -> SharedConfig {
        self.inner.config()
    }

    /// A record of the frames' chunks made huge, for [`Self::make_huge_pages`].
    pub(crate) fn huge_pages_record(&self) -> huge::Collapser {
        let view = &self.inner.view;
        huge::Collapser::new(view.n_frames / view.page_size.chunk_frames())
    }

    /// The service's pass putting up to `budget` chunks of the frames' bytes on huge pages,
    /// those in use and not known to be (`huge.rs`, `chunk.rs`), while the clock hand stands
    /// still; each it collapses is marked huge.
    pub(crate) fn make_huge_pages(&self, record: &mut huge::Collapser, budget: usize) -> huge::Pass {
        let (view, hand) = (&self.inner.view, self.hand());
        // A pass of up to 64 collapses of 5 ms each here ends as soon as the hand moves.
        let pass =
            record.pass(view.pages.as_ptr(), budget, |c| view.chunk(c).unfinished(), || self.hand() == hand);
        for &c in &pass.collapsed {
            view.chunk(c).collapsed();
        }
        pass
    }

    /// Bytes of the segment this process maps with huge pages; None if it cannot tell.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn huge_page_bytes(&self) -> Option<u64> {
        crate::shm::huge::mapped_huge(self.inner.view.pages.as_ptr())
    }

    /// The clock hand's position (`View::hand`).
    pub(crate) fn hand(&self) -> u64 {
        self.inner.view.hand()
    }

    /// The frames' whole 2 MiB chunks: how many are huge, how many are in use on small pages,
    /// and how many there are (`chunk.rs`).
    pub fn chunks(&self) -> (u64, u64, u64) {
        let view = &self.inner.view;
        let n = view.n_frames / view.page_size.chunk_frames();
        let (mut huge, mut small) = (0, 0);
        for c in 0..n {
            huge += u64::from(view.chunk(c).huge());
            small += u64::from(view.chunk(c).unfinished());
        }
        (huge, small, n as u64)
    }
}

impl Inner {
    /// [`SharedCache::write_back_orphans`]: also what a process about to leave does, as it may
    /// hold the last mapping of the cache (`link::before_leaving`), with nothing lent.
    pub(crate) fn write_back_orphans(&self, lent: &mut HashMap<u32, Arc<Lent>>) -> u64 {
        let files = self.view.files();
        // Relaxed (all counts and states): hints here, checked again under the table's lock.
        let idle = |e: &files::FileEntry| e.writers.load(Ordering::Relaxed) == 0;
        let spare = |e: &files::FileEntry, fd: &Lent| match fd.fd.metadata() {
            Err(_) => true,
            Ok(md) => {
                !same_file(e, &md)
                    || (std::os::unix::fs::MetadataExt::nlink(&md) == 0
                        && e.opens.load(Ordering::Relaxed) == 0)
                    || (idle(e) && e.dirty.load(Ordering::Acquire) == 0)
            }
        };
        let orphaned = |e: &files::FileEntry| {
            e.state.load(Ordering::Relaxed) == files::LIVE && idle(e) && e.dirty.load(Ordering::Acquire) > 0
        };
        let stale: Vec<u32> =
            lent.iter().filter(|(s, fd)| spare(&files[**s as usize], fd)).map(|(s, _)| *s).collect();
        let orphans: Vec<u32> = (0..files.len() as u32).filter(|&s| orphaned(&files[s as usize])).collect();
        if stale.is_empty() && orphans.is_empty() {
            return 0;
        }
        let table = &self.view.header().files_lock;
        table.lock(self.me, |h| self.alive(h));
        for slot in stale {
            let (e, fd) = (&files[slot as usize], &lent[&slot]);
            let Ok(md) = fd.fd.metadata() else {
                lent.remove(&slot);
                continue;
            };
            if !same_file(e, &md) {
                lent.remove(&slot);
            } else if std::os::unix::fs::MetadataExt::nlink(&md) == 0 && e.opens.load(Ordering::Relaxed) == 0
            {
                self.drop_pages(slot, 0, e.page_end(self.view.page_size));
                e.state.store(files::FREE, Ordering::Release);
                lent.remove(&slot);
            } else if idle(e) && e.dirty.load(Ordering::Acquire) == 0 {
                lent.remove(&slot);
            }
        }
        let mut stranded = 0;
        let mut work = Vec::new();
        for slot in orphans {
            let e = &files[slot as usize];
            if !orphaned(e) {
                continue;
            }
            // No descriptor lent (the service that had one died, and this one took over): the
            // file opened again where its last writer had it, if it is still there.
            if let std::collections::hash_map::Entry::Vacant(v) = lent.entry(slot) {
                let direct = self.direct_write_back();
                if let Some(fd) =
                    self.view.path(slot as usize).and_then(|p| reopen_for_write_back(e, &p, direct))
                {
                    v.insert(fd);
                }
            }
            match lent.get(&slot) {
                // The generation taken under the lock, the pages listed after it and each
                // written only while its frame still holds that page of that generation: no
                // page goes to another file.
                Some(fd) => work.push((slot, fd.clone(), self.file_extent(slot))),
                None => stranded += e.dirty.load(Ordering::Acquire),
            }
        }
        table.unlock(self.me);
        let mut recount = Vec::new();
        for (slot, fd, (gen, end)) in work {
            let pages = self.candidates_of(slot, gen, 0, end);
            match self.write_back_listed(&pages, fd.target(), false, None) {
                Err(err) => log::error!("upcache serve: writing back a file whose writers died: {err}"),
                // Acquire: as above. Still dirty: a frame locked by someone else, a page
                // written meanwhile by a new writer, or a count a killed writer left high.
                Ok(()) if files[slot as usize].dirty.load(Ordering::Acquire) > 0 => recount.push(slot),
                Ok(()) => {}
            }
        }
        if !recount.is_empty() {
            table.lock(self.me, |h| self.alive(h));
            for &slot in &recount {
                let e = &files[slot as usize];
                // Relaxed: under the table's lock. Nobody has it open: nothing but us changes
                // its pages.
                if e.state.load(Ordering::Relaxed) == files::LIVE && e.opens.load(Ordering::Relaxed) == 0 {
                    self.recount_dirty(slot);
                }
            }
            table.unlock(self.me);
        }
        // Acquire: as above.
        let left = lent.keys().map(|&s| &files[s as usize]).filter(|e| orphaned(e));
        stranded + left.map(|e| e.dirty.load(Ordering::Acquire)).sum::<u64>()
    }
}

/// Reads a cache's counters and histograms from any thread ([`SharedCache::stats_handle`]).
#[derive(Clone)]
pub struct SharedStats {
    inner: Arc<Inner>,
}

impl SharedStats {
    /// The counters, as [`SharedCache::status`] has them.
    pub fn stats(&self) -> crate::metrics::Stats {
        self.inner.status().stats
    }

    /// As [`SharedCache::latencies`].
    pub fn latencies(&self) -> crate::metrics::latency::Latencies {
        self.inner.view.latencies().snapshot()
    }
}

/// What a shared cache holds now: its counts as every cache reports them ([`crate::Stats`], the
/// one counter type that `upcache bench`, the C ABI's `upcache_get_stats`, Prometheus, the
/// shim's `UPCACHE_STATS` and `upcache serve --status` read), and what only a shared cache has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedStatus {
    /// The counts of every process since the cache was made. Among `misses` are a read's pages that
    /// a miss of it loaded and whole-page writes; pages loaded past a read (by its miss's run
    /// or the loaders) are `readahead_pages`. `read_ios` are the reads of the OS files that
    /// loaded pages (one per run, or per page with `SharedConfig::bundling` off),
    /// `writeback_ios` the writes (one per run, or per page with `run_merging` off).
    /// `stream_evictions` are the evicted pages a sequential stream read once
    /// (`SharedConfig::streams`); `reclaimed` the pages background reclaim evicted into the
    /// two-layer allocator's pool (0 with the global one, whose misses run the clock hand). `dirty_pages` counts the frames flagged dirty, and
    /// `metadata_bytes` the segment's fixed regions (frame words, file table, client table,
    /// ledgers, the hash's bucket heads or the sets' tags); the tree's nodes in use are
    /// `index_bytes`.
    pub stats: crate::metrics::Stats,
    /// Frames holding a page.
    pub cached: u64,
    /// Frames locked now (by a load, a write or a write-back in flight).
    pub locked: u64,
    /// Files in the file table.
    pub files: u64,
    /// Pids of the attached processes.
    pub clients: Vec<u32>,
    /// Frames taken over from processes that died holding them, and repaired.
    pub repairs: u64,
    /// Write-backs that put several writes in the kernel's hands at once, through io_uring
    /// (`SharedConfig::io`; 0 with psync).
    pub write_back_batches: u64,
    /// The tree index's nodes in use: leaves, inner nodes (0 with the hash index).
    pub index_nodes: (u64, u64),
    /// Pages the tree index had no node for at first: each freed a frame (and its nodes).
    pub index_full: u64,
    /// Files the service's flushers wrote back in its passes, by flusher.
    pub flusher_files: Vec<u64>,
    /// Times a writer past the foreground dirty ratio wrote its own file back (dflush).
    pub writer_write_backs: u64,
    /// Times a writer past the foreground dirty ratio paused for the service's write-back
    /// (`FlushKind::Background`).
    pub writer_pauses: u64,
    /// Pages the service wrote back as their set's hand was about to reach them (the
    /// set-associative index's flusher).
    pub next_to_go_written: u64,
    /// Dirty pages of sequential write streams handed to write-behind (`SharedConfig::streams`).
    pub behind_pages: u64,
    /// Frames emptied and listed for the next misses (`free.rs`; a hint: some may have been
    /// taken by the hand since).
    pub free_frames: u64,
}

/// `path` (an entry's recorded path) opened for writing back, if it is still the entry's file.
fn reopen_for_write_back(e: &files::FileEntry, path: &[u8], direct: bool) -> Option<Arc<Lent>> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    // Not blocking, whatever is at the path now (a FIFO would hold the open, and with it the
    // file table's lock).
    let fd = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(std::ffi::OsStr::from_bytes(path))
        .ok()?;
    let md = fd.metadata().ok()?;
    (md.is_file() && same_file(e, &md)).then(|| Arc::new(Lent::new(fd, direct)))
}

/// After a write-back of all of file `e`: if it is dirty still (written meanwhile), its age
/// starts again at `now`, as the kernel's does.
fn age_again_if_dirty(e: &files::FileEntry, now: u64) {
    // Acquire: pairs with `mark_dirty`'s count.
    if e.dirty.load(Ordering::Acquire) > 0 {
        e.dirtied.store(now, Ordering::Relaxed); // Relaxed: a hint
    }
}

/// Whether entry `e` names the file `md` describes.
fn same_file(e: &files::FileEntry, md: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // Relaxed (all): a check against the table, which changes only under its lock.
    e.state.load(Ordering::Relaxed) == files::LIVE
        && e.dev.load(Ordering::Relaxed) == md.dev()
        && e.ino.load(Ordering::Relaxed) == md.ino()
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache").field("client", &self.inner.me).finish()
    }
}

impl Inner {
    /// Asks the service to write file `slot`'s dirty pages back now, through the descriptor
    /// lent to it (on a private cache, our own flusher); false if there is no service to ask. One request in flight per file: the
    /// file's `asked` (when one was sent, cleared by the service's pass that took it) keeps a
    /// program that advises in a loop from filling the socket and crowding out lends; a
    /// request older than a second (a service that died with it) is made again.
    pub(crate) fn ask_write_back(&self, slot: u32) -> bool {
        if let Some(flusher) = self.own_flusher.get() {
            flusher.ask(slot); // a cache of our own: our flusher, no service
            return true;
        }
        let e = &self.view.files()[slot as usize];
        let now = (files::coarse_ms() as u32).max(1);
        // Relaxed (both): a hint; a request lost to a race is made by the next advice.
        let sent_at = e.asked.load(Ordering::Relaxed);
        if sent_at != 0 && now.wrapping_sub(sent_at) < 1000 && self.link.linked() {
            return true;
        }
        e.asked.store(now, Ordering::Relaxed);
        let mut msg = [b'W', 0, 0, 0, 0];
        msg[1..].copy_from_slice(&slot.to_le_bytes());
        let sent = self.link.tell(&msg);
        if !sent {
            e.asked.store(0, Ordering::Relaxed); // Relaxed: as above; nothing in flight
        }
        sent
    }

    /// Wakes the service's background write-back, for a writer past the background ratio (the
    /// kernel's writers wake its flusher so), and its reclaim, for a miss that found the
    /// two-layer allocator's pool short (`Inner::reclaim`): it writes back files until the cache is below
    /// the ratio by a margin ([`background_low_water`]). At most one message per process per
    /// [`KICK_EVERY_MS`]: a writer past the ratio kicks at every write.
    pub(crate) fn kick_write_back(&self) {
        if let Some(flusher) = self.own_flusher.get() {
            return flusher.kick(); // a cache of our own: our flusher, no service
        }
        let now = files::coarse_ms();
        // Relaxed: a hint; two threads may both send, which is harmless.
        if now.wrapping_sub(self.kicked.load(Ordering::Relaxed)) < KICK_EVERY_MS {
            return;
        }
        self.kicked.store(now, Ordering::Relaxed);
        self.link.tell(&[b'B', 0, 0, 0, 0]);
    }

    /// `FlushKind::Background`: asks the service for write-back and pauses, as the kernel's
    /// `balance_dirty_pages` does, until the cache is at most the foreground ratio dirty;
    /// false at once without a service (a cache made in process), and if it has not fallen
    /// for [`THROTTLE_PATIENCE`] (the service is gone, stopped or failing), so that the
    /// writer writes back itself rather than hang.
    pub(crate) fn pause_for_write_back(&self) -> bool {
        if !self.link.linked() {
            return false;
        }
        // A pause that just went unanswered: the next writers go on at once for as long
        // again, rather than each pay for the patience.
        // Relaxed: a hint.
        if files::coarse_ms() < self.unanswered_until.load(Ordering::Relaxed) {
            return false;
        }
        let foreground = self.dirty_limits().1;
        // Relaxed: a statistic.
        self.view.header().writer_pauses.fetch_add(1, Ordering::Relaxed);
        let (mut best, mut since) = (u64::MAX, std::time::Instant::now());
        loop {
            // Relaxed: a threshold, read again after each pause.
            let dirty = self.view.header().dirty.load(Ordering::Relaxed);
            if dirty <= foreground {
                return true;
            }
            if dirty < best {
                (best, since) = (dirty, std::time::Instant::now());
            } else if since.elapsed() >= THROTTLE_PATIENCE {
                let until = files::coarse_ms() + THROTTLE_PATIENCE.as_millis() as u64;
                self.unanswered_until.store(until, Ordering::Relaxed); // Relaxed: a hint
                return false;
            }
            self.kick_write_back();
            // Pauses, not a wake-up: write-back lowers the count in every process.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Lends the service a descriptor of file `slot`, open for writing, unless it has one:
    /// it writes back the file's dirty pages if every writer dies first.
    pub(crate) fn lend_fd(&self, slot: u32, fd: &std::fs::File) {
        // On every writable open: the service may be about to close the one it has.
        let mut msg = [b'F', 0, 0, 0, 0];
        msg[1..].copy_from_slice(&slot.to_le_bytes());
        let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
        if let Err(e) = self.link.send(&msg, Some(raw)) {
            log::warn!("upcache: lending a descriptor to the service: {e}");
        }
    }

    /// The cache's size, as a service started in place of its dead one is told (it adopts
    /// the segment itself, so this matters only if no process maps it any more).
    pub(crate) fn config(&self) -> SharedConfig {
        let v = &self.view;
        let h = v.header();
        SharedConfig {
            memory: (v.n_frames * v.page_size.bytes()) as u64,
            files: v.n_files as u32,
            clients: v.n_clients() as u32,
            dirty_ratios: h.dirty_ratios(),
            dirty_expire: h.dirty_expire(),
            flush_interval: h.flush_interval(),
            range_lock: h.has(layout::technique::RANGE_LOCK),
            run_merging: h.has(layout::technique::RUN_MERGING),
            bundling: h.has(layout::technique::BUNDLING),
            readahead: h.readahead_pages() * v.page_size.bytes() as u64,
            flushers: h.flushers(),
            direct_write_back: self.direct_write_back(),
            direct_loads: self.direct_loads(),
            io: self.io_kind(),
            index: if h.has(layout::technique::LOCKED_INDEX) {
                crate::index::IndexKind::Locked
            } else if h.has(layout::technique::RADIX_INDEX) {
                crate::index::IndexKind::Radix
            } else if h.has(layout::technique::SET_ASSOC) {
                crate::index::IndexKind::SetAssoc
            } else {
                crate::index::IndexKind::Sharded
            },
            set_ways: h.set_ways(),
            // Relaxed: fixed before the magic number was published.
            numa: numa::SharedNuma::of(h.numa_mode.load(Ordering::Relaxed), &h.numa),
            policy: self.policy_kind(),
            clean_first: self.dirty_rule(),
            streams: self.streams(),
            huge_pages: self.techniques & layout::technique::HUGE_PAGES != 0,
            hot_index: self.hot_index(),
            page_size: v.page_size.bytes(),
            alloc: if self.two_layer() {
                crate::alloc::AllocKind::TwoLayer
            } else {
                crate::alloc::AllocKind::Global
            },
            prefault: self.techniques & layout::technique::PREFAULT != 0,
            flush: if self.dflush() {
                crate::config::FlushKind::Direct
            } else {
                crate::config::FlushKind::Background
            },
        }
    }

    /// The dirty frames past which a writer wakes the service's write-back (which writes files
    /// back until a sixteenth below), and past which a writer writes its own back first: the
    /// ratios of the frames in use, which a resize changes.
    pub(crate) fn dirty_limits(&self) -> (u64, u64) {
        let frames = self.view.active() as f64;
        ((self.dirty_ratios.0 * frames) as u64, (self.dirty_ratios.1 * frames) as u64)
    }

    /// Whether the service writes whole pages back with O_DIRECT (`Lent`).
    pub(crate) fn direct_write_back(&self) -> bool {
        self.techniques & layout::technique::DIRECT_WRITE_BACK != 0
    }

    /// Pages of a window a sequential reader's loaders load (`SharedFile::read_ahead`):
    /// `SharedConfig::readahead`, at most a 32nd of the cache, so that the four windows ahead
    /// of a reader take at most an eighth of it; 0 for none.
    pub(crate) fn ahead_window(&self) -> u64 {
        self.readahead_pages.min(self.view.n_frames as u64 / 32)
    }

    /// `Unsupported` for `what` (a pin) without the range lock: with every write holding the
    /// whole file, a pin held while its thread writes the file could wait for ever for a
    /// writer that waits for it. (A queue takes no range lock, and never sleeps while it holds
    /// loads: it works either way.)
    pub(crate) fn check_range_lock(&self, what: &str) -> crate::error::Result<()> {
        if self.techniques & layout::technique::RANGE_LOCK == 0 {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Unsupported,
                format!("{what} needs the range lock (SharedConfig::range_lock)"),
            ));
        }
        Ok(())
    }

    /// Whether misses load through `O_DIRECT` (`SharedConfig::direct_loads`).
    pub(crate) fn direct_loads(&self) -> bool {
        self.techniques & layout::technique::DIRECT_LOADS != 0
    }

    /// Whether the clock hand is GClock's (`SharedConfig::policy`).
    pub(crate) fn gclock(&self) -> bool {
        self.techniques & layout::technique::GCLOCK != 0
    }

    /// When the clock hand passes dirty frames over for a lap (`SharedConfig::clean_first`).
    pub(crate) fn dirty_rule(&self) -> crate::policy::CleanFirst {
        if self.techniques & layout::technique::CLEAN_FIRST != 0 {
            crate::policy::CleanFirst::Always
        } else if self.techniques & layout::technique::GC_AWARE != 0 {
            crate::policy::CleanFirst::WhileGc
        } else {
            crate::policy::CleanFirst::Never
        }
    }

    /// Whether pages a sequential stream reads once are no reference (`SharedConfig::streams`).
    pub(crate) fn streams(&self) -> bool {
        self.techniques & layout::technique::STREAMS != 0
    }

    /// How write-back and batched loads reach the kernel (`SharedConfig::io`).
    pub(crate) fn io_kind(&self) -> crate::io::engine::IoKind {
        if self.techniques & layout::technique::URING != 0 {
            crate::io::engine::IoKind::Uring
        } else {
            crate::io::engine::IoKind::Psync
        }
    }

    /// Whether misses take frames from the two-layer allocator's lists (`pool.rs`).
    pub(crate) fn two_layer(&self) -> bool {
        self.techniques & layout::technique::TWO_LAYER != 0
    }

    /// Whether pins look at the thread's hot index first (`SharedConfig::hot_index`).
    pub(crate) fn hot_index(&self) -> bool {
        self.techniques & layout::technique::HOT_INDEX != 0
    }

    /// Whether a writer past the foreground ratio writes back itself (`SharedConfig::flush`).
    pub(crate) fn dflush(&self) -> bool {
        self.techniques & layout::technique::DFLUSH != 0
    }

    /// Whether the attachment was given up for good ([`SharedCache::retire`]).
    pub(crate) fn retired(&self) -> bool {
        // Acquire: pairs with `retire`'s swap.
        self.retired.load(Ordering::Acquire)
    }

    /// Whether this is a forked child of the process that attached.
    pub(crate) fn forked(&self) -> bool {
        // Relaxed: see `count_fork_in_child`.
        FORKS.load(Ordering::Relaxed) != self.forks
    }

    /// Fails once the service is gone, and in a forked child of the process that attached.
    pub(crate) fn check_service(&self) -> Result<()> {
        if self.forked() {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::InvalidInput,
                "a shared cache attached before fork: the child process attaches itself",
            ));
        }
        // Relaxed: see `lost`.
        if self.lost.load(Ordering::Relaxed) {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Io,
                "the shared cache's service is gone (its dirty pages of files open here were written back)",
            ));
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A forked child's copy leaves nothing: the slot is its parent's; a retired one left.
        if self.forked() || self.retired() {
            return;
        }
        self.ahead.stop();
        self.preparer.stop();
        if let Some(flusher) = self.own_flusher.get() {
            flusher.kick(); // it finds the cache gone, and ends
        }
        link::before_leaving(self);
        self.link.shut();
        self.view.clients().leave(self.me);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 256 frames, 4 files, 4 clients (the other modules' tests use it too).
    pub(super) fn small() -> SharedConfig {
        SharedConfig { memory: 1 << 20, files: 4, clients: 4, ..SharedConfig::default() }
    }

    /// A stress of the other modules' tests: `workers` threads over the `pages` pages of
    /// `path` (each one byte throughout, page p's p at first), each reading any page, which
    /// must never be torn, and writing its own (p % workers its number), `own_ops` times each
    /// or, with None, until `during` (run meanwhile, given the count of every thread's
    /// operations) returns; then each syncs, and every page on disk is as its last write left
    /// it.
    pub(super) fn stress_own_pages(
        cache: &SharedCache,
        path: &std::path::Path,
        pages: u64,
        workers: u64,
        own_ops: Option<u64>,
        during: impl FnOnce(&AtomicU64),
    ) {
        std::fs::write(path, (0..pages * 4096).map(|i| (i >> 12) as u8).collect::<Vec<u8>>()).unwrap();
        let (stop, ops) = (AtomicBool::new(false), AtomicU64::new(0));
        let last: Vec<Vec<(u64, u8)>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..workers)
                .map(|t| {
                    let (stop, ops) = (&stop, &ops);
                    s.spawn(move || {
                        let f = cache.open_path(path, true).unwrap();
                        let (mut x, mut written, mut page) =
                            (0x9e37_79b9_7f4a_7c15u64 ^ (t + 1), Vec::new(), [0u8; 4096]);
                        for i in 0.. {
                            if own_ops.map_or(stop.load(Ordering::Relaxed), |n| i >= n) {
                                break;
                            }
                            ops.fetch_add(1, Ordering::Relaxed);
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let p = (x >> 8) % pages;
                            if x.is_multiple_of(4) && p % workers == t {
                                let v = (x >> 40) as u8;
                                f.write_at(&[v; 4096], p * 4096).unwrap();
                                written.push((p, v));
                            } else {
                                f.read_at(&mut page, p * 4096).unwrap();
                                assert!(page.iter().all(|&b| b == page[0]), "page {p} torn");
                            }
                        }
                        f.sync_data().unwrap();
                        written
                    })
                })
                .collect();
            during(&ops);
            stop.store(true, Ordering::Relaxed);
            threads.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut want: Vec<u8> = (0..pages).map(|p| p as u8).collect();
        for (p, v) in last.into_iter().flatten() {
            want[p as usize] = v;
        }
        let bytes = std::fs::read(path).unwrap();
        for (p, &v) in want.iter().enumerate() {
            assert!(bytes[p * 4096..(p + 1) * 4096].iter().all(|&b| b == v), "page {p} on disk");
        }
    }

    /// Huge pages (`chunk.rs`): chunks written are in use on small pages until the service's
    /// pass collapses them; then they are huge, every byte as written. Off, no chunk is
    /// recorded (on a memfd, where nothing else gives huge pages).
    #[test]
    fn chunks_in_use_are_collapsed_into_huge_pages_with_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(7) ^ (i >> 12)) as u8).collect();
        for huge_pages in [true, false] {
            let cache =
                SharedCache::create(&SharedConfig { memory: 8 << 20, huge_pages, ..small() }).unwrap();
            let f = cache.open_path(&p, true).unwrap();
            f.write_all_at(&data, 0).unwrap();
            let view = &cache.inner.view;
            assert_eq!(cache.chunks(), (0, if huge_pages { 2 } else { 0 }, 4), "the 2 chunks written");
            let pass = cache.make_huge_pages(&mut cache.huge_pages_record(), 8);
            if !huge_pages {
                assert!(pass.collapsed.is_empty());
                assert_eq!(cache.huge_page_bytes().unwrap(), 0);
            } else if crate::shm::huge::kernel_collapses() {
                assert_eq!(pass.collapsed, vec![0, 1]);
                assert!(view.chunk(0).huge() && view.chunk(1).huge());
                let mapped = cache.huge_page_bytes().unwrap();
                assert!(mapped >= 4 << 20, "the written chunks on huge pages: {mapped}");
            }
            let mut back = vec![0u8; data.len()];
            assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
            assert!(back == data, "the bytes as written");
            f.close().unwrap();
        }
    }

    /// A cache of the process's own has its frames in its own memory, as the in-process
    /// engine: on huge pages from their first touch where the system gives them to memory so
    /// advised, with no chunk left for a collapse; none with huge pages off. No other process
    /// can attach it, and a forked child has none of them: its frames are not in the segment.
    #[test]
    fn a_private_cache_has_its_frames_on_huge_pages_from_their_first_touch() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(13) ^ (i >> 12)) as u8).collect();
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| !s.contains("[never]"));
        for huge_pages in [false, true] {
            let cache = SharedCache::create_private(&SharedConfig { memory: 8 << 20, huge_pages, ..small() })
                .unwrap();
            let f = cache.open_path(&p, true).unwrap();
            f.write_all_at(&data, 0).unwrap();
            assert_eq!(cache.chunks(), (0, 0, 4), "no chunk waits for a collapse");
            let mapped = cache.huge_page_bytes().unwrap();
            if !huge_pages {
                assert_eq!(mapped, 0, "huge pages off");
            } else if thp {
                assert!(mapped >= 4 << 20, "the written chunks on huge pages: {mapped}");
            }
            let mut back = vec![0u8; data.len()];
            assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
            assert!(back == data, "the bytes as written");
            // A forked child finds zeros where the frames are: no copy of them is shared.
            let pages = cache.inner.view.pages.as_ptr() as usize;
            // SAFETY: the child reads its own mapping and leaves with _exit, touching nothing
            // else (no allocation, no lock) in a copy of this multi-threaded process.
            let child = unsafe { libc::fork() };
            if child == 0 {
                // SAFETY: the frames' first 4 KiB, mapped in the child (zeros, or a copy).
                let zeros =
                    unsafe { std::slice::from_raw_parts(pages as *const u8, 4096) }.iter().all(|&b| b == 0);
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(if zeros { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is writable.
            assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
            assert_eq!(status, 0, "the child saw its parent's frames");
            let fd = cache.segment_fd().try_clone_to_owned().unwrap();
            let Err(err) = SharedCache::attach(fd) else { panic!("a private cache's segment attached") };
            assert_eq!(err.kind(), crate::error::ErrorKind::InvalidInput, "{err}");
            f.close().unwrap();
        }
    }

    /// The service keeps a lent descriptor only if it can write the file's pages back where
    /// they belong: open for writing, not O_APPEND, and of the entry's file.
    #[test]
    fn only_a_positional_writable_descriptor_of_the_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("f"), dir.path().join("g"));
        std::fs::write(&p, b"x").unwrap();
        std::fs::write(&q, b"y").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let slot = f.slot();
        let open = |path: &Path, append: bool, write: bool| -> OwnedFd {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write && !append)
                .append(append)
                .open(path)
                .unwrap()
                .into()
        };
        assert!(cache.accept_lent_fd(slot, &open(&p, false, true)));
        assert!(!cache.accept_lent_fd(slot, &open(&p, true, true)), "O_APPEND");
        assert!(!cache.accept_lent_fd(slot, &open(&p, false, false)), "read-only");
        assert!(!cache.accept_lent_fd(slot, &open(&q, false, true)), "another file");
    }

    /// A write-back error reaches each open of the file, in any process, once (the kernel's
    /// errseq): two opens each report it at their next sync; an open made after it was
    /// reported does not, one made before anyone reported the next one does.
    #[test]
    fn a_write_back_error_reaches_each_open_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let other = SharedCache::attach(cache.segment_fd().try_clone_to_owned().unwrap()).unwrap();
        let a = cache.open_path(&p, true).unwrap();
        let b = other.open_path(&p, true).unwrap();
        let e = &cache.inner.view.files()[a.slot() as usize];
        e.record_error(libc::EIO as u32);
        for f in [&a, &b] {
            assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::EIO));
            f.sync_data().unwrap();
        }
        // Two descriptions sharing one open (the shim's descriptors of one file): each once.
        let (d1, d2) = (
            std::sync::atomic::AtomicU64::new(a.errors_sample()),
            std::sync::atomic::AtomicU64::new(a.errors_sample()),
        );
        e.record_error(libc::EIO as u32);
        for d in [&d1, &d2] {
            assert!(a.sync_as(true, d).is_err());
            a.sync_as(true, d).unwrap();
        }
        a.sync_data().unwrap_err(); // the open itself is a third description
        b.sync_data().unwrap_err();
        let late = cache.open_path(&p, false).unwrap();
        late.sync_data().unwrap();
        e.record_error(libc::ENOSPC as u32);
        let later = other.open_path(&p, false).unwrap(); // before anyone reported it
        for f in [&later, &late, &a, &b] {
            assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::ENOSPC));
            f.sync_data().unwrap();
        }
    }

    /// Write-back goes in runs of adjacent dirty pages, the page that holds the end cut at the
    /// length: the file reads back whole, and its size is the length, not a page further.
    #[test]
    fn write_back_runs_stop_at_clean_pages_and_the_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let fd = Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true));
        let data: Vec<u8> = (0..5 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
        f.write_at(&data, 0).unwrap();
        f.write_at(&[1u8; 10], 4096).unwrap();
        assert_eq!(cache.write_back_due(&[(f.slot(), fd.clone())], &[f.slot()]), 6);
        let mut want = data.clone();
        want[4096..4106].fill(1);
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // Pages 1 and 3 only: two runs of one page.
        f.write_at(&[2u8; 4096], 4096).unwrap();
        f.write_at(&[3u8; 4096], 3 * 4096).unwrap();
        assert_eq!(cache.write_back_due(&[(f.slot(), fd.clone())], &[f.slot()]), 2);
        want[4096..2 * 4096].fill(2);
        want[3 * 4096..4 * 4096].fill(3);
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    /// Direct write-back (`SharedConfig::direct_write_back`): runs of whole pages go through
    /// the file opened with O_DIRECT, the last page (cut by the length) the buffered way, and
    /// a reader through the kernel's page cache that had read the file before sees the new
    /// bytes (the kernel drops its copy of what an O_DIRECT write covers).
    #[test]
    fn direct_write_back_writes_whole_pages_past_the_kernel_s_cache_coherently() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'.'; 3 * 4096 + 10]).unwrap();
        let lent = Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true));
        // tmpfs takes O_DIRECT since Linux 6.6, but keeps its pages, being the page cache.
        if lent.direct.is_none() || named::on_tmpfs(dir.path()) {
            eprintln!("skipped: {} has no O_DIRECT past a page cache", dir.path().display());
            return;
        }
        assert!(Lent::new(std::fs::File::open(&p).unwrap(), false).direct.is_none(), "off");
        // The kernel's page cache holds the old bytes.
        assert_eq!(std::fs::read(&p).unwrap(), vec![b'.'; 3 * 4096 + 10]);
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let data: Vec<u8> = (0..3 * 4096 + 10).map(|i| (i * 13 % 251) as u8).collect();
        f.write_at(&data, 0).unwrap();
        assert_eq!(cache.write_back_due(&[(f.slot(), lent.clone())], &[f.slot()]), 4);
        // The kernel's cache: the O_DIRECT write dropped its copy of the whole pages, the
        // buffered one of the last page put that in.
        assert_eq!(resident(&p), [false, false, false, true]);
        assert_eq!(std::fs::read(&p).unwrap(), data, "read through the kernel's cache");
    }

    /// Which pages of the file at `p` the kernel's page cache holds (mincore of a mapping).
    pub(super) fn resident(p: &Path) -> Vec<bool> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(p).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: a fresh read-only shared mapping of our file, never touched, unmapped below;
        // mincore writes one byte per page into `vec`, which has that many.
        unsafe {
            let at =
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
            assert_ne!(at, libc::MAP_FAILED);
            assert_eq!(libc::mincore(at, len, vec.as_mut_ptr()), 0);
            libc::munmap(at, len);
        }
        vec.iter().map(|b| b & 1 == 1).collect()
    }

    /// The locked tree (`SharedConfig::index` locked, the kernel's XArray) changes a file's
    /// tree only under the file's lock: a placement by another client waits for its holder
    /// (here it gives up at once), where the lock-free tree's never waits; lookups take no
    /// lock in either.
    #[test]
    fn the_locked_tree_changes_a_file_only_under_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![5u8; 2 * 4096]).unwrap();
        for (index, locked) in
            [(crate::index::IndexKind::Radix, false), (crate::index::IndexKind::Locked, true)]
        {
            let cache = SharedCache::create(&SharedConfig { index, ..small() }).unwrap();
            assert_eq!(cache.config().index, index);
            let f = cache.open_path(&p, true).unwrap();
            f.read_at(&mut [0u8; 4096], 0).unwrap();
            let inner = &cache.inner;
            let (cached, k) = (inner.key(f.slot(), 0), inner.key(f.slot(), 100));
            let lock = &inner.view.map().locks[f.slot() as usize % index::PARTITIONS];
            lock.lock(inner.me, |_| true);
            assert_eq!(inner.index().holder(k), locked.then_some(inner.me), "{}", index.name());
            assert!(inner.index().hint(cached).is_some(), "{}: a lookup under the lock", index.name());
            let spare = (inner.view.n_frames - 1) as u32;
            let other = inner.me + 1;
            let placed = inner.index().place(k, spare, other, &|_| true, &|_| true);
            if locked {
                assert_eq!(placed, index::Placed::No, "the locked tree waits for the file's lock");
            } else {
                assert_eq!(placed, index::Placed::Yes);
                assert!(inner.index().unplace(spare, other, &|_| true, &|_| true));
            }
            lock.unlock(inner.me);
            if locked {
                assert_eq!(inner.index().place(k, spare, other, &|_| true, &|_| true), index::Placed::Yes);
                assert!(inner.index().unplace(spare, other, &|_| true, &|_| true));
            }
            let mut got = vec![0u8; 2 * 4096];
            f.read_exact_at(&mut got, 0).unwrap();
            assert!(got.iter().all(|&b| b == 5), "{}", index.name());
        }
    }

    /// `check_index` finds a tree entry whose frame is not at home there, and a frame at home
    /// that its index does not find, with each index (a set's frame away from its set).
    #[test]
    fn the_index_check_finds_an_index_and_frames_that_disagree() {
        let dir = tempfile::tempdir().unwrap();
        for index in [
            crate::index::IndexKind::Radix,
            crate::index::IndexKind::Locked,
            crate::index::IndexKind::Sharded,
            crate::index::IndexKind::SetAssoc,
        ] {
            let p = dir.path().join(format!("f-{}", index.name()));
            std::fs::write(&p, vec![5u8; 3 * 4096]).unwrap();
            let cache = SharedCache::create(&SharedConfig { index, ..small() }).unwrap();
            let f = cache.open_path(&p, true).unwrap();
            f.read_at(&mut [0u8; 3 * 4096], 0).unwrap();
            cache.check_index().unwrap();
            let k = cache.inner.key(f.slot(), 1);
            let frame = cache.inner.index().hint(k).unwrap() as usize;
            let m = &cache.inner.view.frames()[frame];
            m.home.store(cache.inner.key(f.slot(), 7), Ordering::Relaxed);
            assert!(cache.check_index().is_err(), "{}: a frame away from its place", index.name());
            m.home.store(k, Ordering::Relaxed);
            cache.check_index().unwrap();
            if index == crate::index::IndexKind::SetAssoc {
                continue; // the sets are the frames' `home`s: a frame at home is in them
            }
            cache.inner.index().unplace(frame as u32, cache.inner.me, &|_| true, &|_| false);
            m.home.store(k, Ordering::Relaxed);
            assert!(cache.check_index().is_err(), "{}: a frame at home out of its index", index.name());
        }
    }

    /// With several flushers a pass's files are written back by as many threads, file i by
    /// flusher i modulo their number; with one, all by it. Each file reads back whole.
    #[test]
    fn a_pass_s_files_are_split_among_the_configured_flushers() {
        let dir = tempfile::tempdir().unwrap();
        for flushers in [1, 2, 3] {
            let cache = SharedCache::create(&SharedConfig { flushers, ..small() }).unwrap();
            let mut lent = Vec::new();
            let mut open = Vec::new();
            for i in 0..4u8 {
                let p = dir.path().join(format!("f{flushers}-{i}"));
                std::fs::write(&p, b"").unwrap();
                let f = cache.open_path(&p, true).unwrap();
                f.write_at(&[i; 3 * 4096], 0).unwrap();
                lent.push((
                    f.slot(),
                    Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true)),
                ));
                open.push((p, f));
            }
            let asked: Vec<u32> = lent.iter().map(|(s, _)| *s).collect();
            assert_eq!(cache.write_back_due(&lent, &asked), 12, "{flushers} flushers");
            let want: Vec<u64> = match flushers {
                1 => vec![4],
                2 => vec![2, 2],
                _ => vec![2, 1, 1],
            };
            assert_eq!(cache.status().flusher_files, want, "{flushers} flushers");
            for (i, (p, _)) in open.iter().enumerate() {
                assert_eq!(std::fs::read(p).unwrap(), vec![i as u8; 3 * 4096]);
            }
        }
        let none = SharedConfig { flushers: 0, ..small() };
        assert_eq!(
            SharedCache::create(&none).err().map(|e| e.kind()),
            Some(crate::error::ErrorKind::InvalidConfig)
        );
    }

    /// The service's flusher writes a file back once it has been dirty for the cache's dirty
    /// expiry, and dirty files while more of the cache than its background ratio is dirty,
    /// until it is below by a sixteenth of it (the rest stays dirty, keeping its age), and a
    /// file a process asked for at once; through a descriptor lent for another file, nothing.
    #[test]
    fn the_flusher_writes_back_files_dirty_for_long_or_a_crowded_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("f"), dir.path().join("g"));
        std::fs::write(&p, b"").unwrap();
        std::fs::write(&q, b"y").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let frames = cache.inner.view.n_frames;
        let f = cache.open_path(&p, true).unwrap();
        let lent = |path: &Path| {
            vec![(
                f.slot(),
                Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(path).unwrap(), true)),
            )]
        };
        // (A test may change the expiry, fixed otherwise: it is read at each pass.)
        let expire =
            |secs: u64| cache.inner.view.header().dirty_expire_ms.store(secs * 1000, Ordering::Relaxed);
        expire(3600);
        f.write_at(&[7u8; 4096], 0).unwrap();
        assert_eq!(cache.write_back_due(&lent(&p), &[]), 0, "one page, not dirty for long");
        assert_eq!(cache.write_back_due(&lent(&p), &[f.slot() + 1]), 0, "another file asked for");
        assert_eq!(cache.write_back_due(&lent(&p), &[f.slot()]), 1, "asked for");
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096]);
        f.write_at(&[7u8; 4096], 0).unwrap();
        expire(0);
        assert_eq!(cache.write_back_due(&lent(&p), &[]), 1, "dirty for long enough");
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096]);
        let crowd = frames * 3 / 10;
        f.write_at(&vec![9u8; crowd * 4096], 0).unwrap();
        assert_eq!(cache.write_back_due(&lent(&q), &[]), 0, "another file's descriptor");
        expire(3600);
        let low_water = background_low_water(cache.inner.dirty_limits().0);
        assert_eq!(cache.write_back_due(&lent(&p), &[]), crowd as u64 - low_water, "a crowded cache");
        // Relaxed: this thread's own writes.
        assert_eq!(cache.inner.view.header().dirty.load(Ordering::Relaxed), low_water);
        assert_eq!(cache.write_back_due(&lent(&p), &[]), 0, "below the ratio");
        assert_eq!(std::fs::read(&p).unwrap()[..4096], [9u8; 4096], "the first pages");
        expire(0);
        assert_eq!(cache.write_back_due(&lent(&p), &[]), low_water, "the rest, once old");
        assert_eq!(std::fs::read(&p).unwrap(), vec![9u8; crowd * 4096]);
    }

    /// A background pass that stopped below the ratio part-way through a file begins the next
    /// one where it stopped: with the file's first pages dirtied again, the second pass writes
    /// the pages after those the first one wrote, not the first ones again (whose new bytes
    /// stay in the cache).
    #[test]
    fn a_background_pass_resumes_where_the_last_one_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let frames = cache.inner.view.n_frames;
        let f = cache.open_path(&p, true).unwrap();
        let lent = vec![(
            f.slot(),
            Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true)),
        )];
        cache.inner.view.header().dirty_expire_ms.store(3600 * 1000, Ordering::Relaxed);
        let crowd = frames * 3 / 10;
        f.write_at(&vec![9u8; crowd * 4096], 0).unwrap();
        let first = cache.write_back_due(&lent, &[]) as usize;
        assert!(first > 0 && first < crowd, "{first} of {crowd}");
        // The first pages dirty again: crowded again.
        f.write_at(&vec![8u8; first * 4096], 0).unwrap();
        assert_eq!(cache.write_back_due(&lent, &[]) as usize, first, "as many as the first pass");
        let disk = std::fs::read(&p).unwrap();
        assert_eq!(disk, vec![9u8; 2 * first * 4096], "the next pages, not the first ones again");
    }

    /// The dirty ratios come from the config: the same 30% of the cache dirty is crowded at
    /// the default background ratio (25%: written back to just below it) and not at 50%; a writer past the foreground ratio
    /// writes its file back before writing, so the dirty count stays near that ratio (10%),
    /// and at the default (50%) it does not.
    #[test]
    fn the_dirty_ratios_are_the_configs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let outcome = |ratios: (f64, f64)| {
            std::fs::write(&p, b"").unwrap();
            // Streams off: the writes below are a sequential stream, which write-behind would
            // write back as it goes (its own test: `ahead.rs`).
            let config = SharedConfig { dirty_ratios: ratios, streams: false, ..small() };
            let cache = SharedCache::create(&config).unwrap();
            let frames = cache.inner.view.n_frames;
            let f = cache.open_path(&p, true).unwrap();
            let lent = vec![(
                f.slot(),
                Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true)),
            )];
            let crowd = frames * 3 / 10;
            for i in 0..crowd {
                f.write_at(&[1u8; 4096], (i * 4096) as u64).unwrap();
            }
            // Relaxed: this thread's own writes.
            let dirty = cache.inner.view.header().dirty.load(Ordering::Relaxed) as usize;
            let written = cache.write_back_due(&lent, &[]) as usize;
            let low_water = background_low_water(cache.inner.dirty_limits().0) as usize;
            (frames, crowd, dirty, written, low_water)
        };
        let (frames, crowd, dirty, written, low_water) = outcome(DEFAULT_SHARED_DIRTY_RATIOS);
        assert_eq!(low_water, frames / 4 - frames / 64, "of {frames} frames");
        assert_eq!((dirty, written), (crowd, crowd - low_water), "at the defaults, of {frames} frames");
        let (_, crowd, dirty, written, _) = outcome((0.5, 0.5));
        assert_eq!((dirty, written), (crowd, 0), "crowded only past half");
        let (frames, _, dirty, _, _) = outcome((0.05, 0.1));
        assert!(dirty <= frames / 10 + 1, "{dirty} dirty of {frames} frames past a 10% foreground ratio");
    }

    #[test]
    fn bad_write_back_settings_are_refused() {
        let ok = small();
        for bad in [
            SharedConfig { dirty_ratios: (0.0, 0.5), ..ok.clone() },
            SharedConfig { dirty_ratios: (0.6, 0.5), ..ok.clone() },
            SharedConfig { dirty_ratios: (0.5, 1.5), ..ok.clone() },
            SharedConfig { dirty_ratios: (1.0, 1.0), ..ok.clone() },
            SharedConfig { dirty_ratios: (f64::NAN, 0.5), ..ok.clone() },
            SharedConfig { flush_interval: std::time::Duration::ZERO, ..ok.clone() },
            SharedConfig { flush_interval: std::time::Duration::from_secs(7200), ..ok.clone() },
            SharedConfig { dirty_expire: std::time::Duration::from_secs(7200), ..ok.clone() },
            SharedConfig {
                policy: crate::policy::PolicyKind::S3Fifo,
                index: crate::index::IndexKind::SetAssoc,
                ..ok.clone()
            },
            SharedConfig {
                policy: crate::policy::PolicyKind::Sieve,
                numa: numa::SharedNuma::Described(vec![vec![0], vec![1]]),
                ..ok.clone()
            },
        ] {
            let e = SharedCache::create(&bad).err().unwrap_or_else(|| panic!("{bad:?} was taken"));
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidConfig, "{bad:?}: {e}");
        }
        // What the creator set, every process attached follows.
        let set = SharedConfig {
            dirty_ratios: (0.1, 0.3),
            dirty_expire: std::time::Duration::from_secs(5),
            flush_interval: std::time::Duration::from_millis(250),
            policy: crate::policy::PolicyKind::GClock,
            clean_first: crate::policy::CleanFirst::Never,
            flush: crate::config::FlushKind::Background,
            ..ok
        };
        assert_eq!(SharedCache::create(&set).unwrap().inner.config(), set);
        for policy in crate::policy::PolicyKind::ALL {
            let set = SharedConfig { policy, ..set.clone() };
            assert_eq!(SharedCache::create(&set).unwrap().inner.config(), set, "{policy:?}");
        }
    }

    /// A file of 4199 bytes of 7, and its page 1 (which holds the end) locked by us and
    /// filled with `fill` whole, as a writer that died copying into it leaves it (its write
    /// had not raised the length).
    fn end_page_of_a_dead_writer(cache: &SharedCache, f: &SharedFile, fill: u8) -> u32 {
        f.set_len(0).unwrap();
        f.write_at(&[7u8; 4199], 0).unwrap();
        let inner = &cache.inner;
        let frame = inner.lock_cached(f.slot(), 1).unwrap();
        // SAFETY: we hold the frame's lock.
        unsafe { std::ptr::write_bytes(inner.view.page(frame), fill, frame::PAGE) };
        frame
    }

    /// A writer killed while it copied into the page that holds the file's end (its write
    /// had not raised the length yet) leaves bytes past the length in the frame: the repair
    /// keeps what lies below the length and zeros the rest, so an extension reads zeros there
    /// (it read the dead writer's bytes, 1 run in 10 of `a_truncate_killed_half_way_...`).
    #[test]
    fn a_dead_writers_bytes_past_the_length_are_zeroed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let inner = &cache.inner;
        let frame = end_page_of_a_dead_writer(&cache, &f, 0xAB);
        inner.repair_frame(frame, 99);
        inner.view.frames()[frame as usize].unlock(inner.me, true);
        f.set_len(3 * 4096).unwrap();
        let mut buf = vec![1u8; 3 * 4096];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 3 * 4096);
        assert!(buf[..4096].iter().all(|&b| b == 7));
        assert!(buf[4096..4199].iter().all(|&b| b == 0xAB), "below the length: what the writer copied");
        assert_eq!(buf[4199..].iter().position(|&b| b != 0), None, "past the length: zeros");
    }

    /// The same dead writer's frame, still locked by the dead when another process moves the
    /// length past its page without touching it (an extension, a write further on): that
    /// process repairs the page first, as the service's reaper would, and reads zeros past
    /// the old end.
    #[test]
    fn a_dead_writers_page_is_repaired_before_the_length_moves_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let inner = &cache.inner;
        for extend in [true, false] {
            let frame = end_page_of_a_dead_writer(&cache, &f, 0xCD);
            // Left locked by a client that died (a slot no process uses).
            let m = &inner.view.frames()[frame as usize];
            m.unlock(inner.me, true);
            assert!(matches!(m.lock(3, |_| true), crate::shm::Acquired::Clean));
            if extend {
                f.set_len(3 * 4096).unwrap();
            } else {
                f.write_at(b"z", 2 * 4096 + 10).unwrap();
            }
            let mut buf = vec![1u8; 2 * 4096];
            assert_eq!(f.read_at(&mut buf, 0).unwrap(), 2 * 4096);
            assert!(buf[4096..4199].iter().all(|&b| b == 0xCD), "extend {extend}: below the old end");
            assert_eq!(buf[4199..].iter().position(|&b| b != 0), None, "extend {extend}: past it");
        }
    }

    /// A dirty count a writer killed between counting a page and flagging it left one too
    /// high is put right by the service once nobody has the file open: its orphans' pass
    /// writes back what is flagged, finds the count still above the flags, recounts, and has
    /// nothing stranded (the service would otherwise never exit). A flagged page is never
    /// uncounted.
    #[test]
    fn a_dirty_count_left_too_high_is_recounted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        f.write_at(&[5u8; 3 * 4096], 0).unwrap();
        let e = &cache.inner.view.files()[f.slot() as usize];
        // As a killed writer leaves it: counted, never flagged (Relaxed: this thread's view).
        e.dirty.fetch_add(1, Ordering::Relaxed);
        let mut lent = HashMap::new();
        let fd = Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true));
        lent.insert(f.slot(), fd.clone());
        assert_eq!(cache.write_back_orphans(&mut lent), 0, "an open writer: not an orphan");
        assert_eq!(e.dirty.load(Ordering::Relaxed), 4);
        // The writer goes without writing back (as killed: its open uncounted by repair).
        let slot = f.slot();
        std::mem::forget(f);
        let table = &cache.inner.view.header().files_lock;
        table.lock(cache.inner.me, |_| true);
        cache.inner.view.holds(cache.inner.me)[slot as usize].store(0, Ordering::Relaxed);
        cache.inner.recount_opens(slot as usize);
        table.unlock(cache.inner.me);
        let mut lent = HashMap::from([(slot, fd)]);
        assert_eq!(cache.write_back_orphans(&mut lent), 0, "nothing stranded");
        assert_eq!(e.dirty.load(Ordering::Relaxed), 0);
        assert_eq!(std::fs::read(&p).unwrap(), vec![5u8; 3 * 4096]);
    }
}
