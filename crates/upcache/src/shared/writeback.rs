//! Writing dirty frames back to their files, in runs: the dirty pages of a file that follow
//! each other are locked together and written with one `pwritev` of up to a run (1 MiB,
//! `PageSize::run_pages`; SAFS's merged write-back runs), instead of a system call per page,
//! the runs of a batch in one submission (ScalaCache's bundling).
//!
//! With `SharedConfig::run_merging` off, each page is a run of its own.
//!
//! Only a run's first frame is waited for: a frame locked by someone else ends the run, so a
//! writer-back never sleeps while it holds frames, and no lock order between frames is needed.

use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::backing::{ArrayFile, Backing};
use super::frame::{key_page, key_slot, DIRTY};
use super::layout::{technique, WRITE_BACK_DEPTH};
use super::Inner;
use crate::error::{Error, Result};
use crate::io::engine::UringEngine;

thread_local! {
    /// Whether this thread writes back for a writer past the foreground ratio (dflush), whose
    /// pages are counted apart ([`as_writer`]).
    static BY_WRITER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, a writer's own write-back past the foreground ratio (dflush): the pages it
/// writes back count as `dflush_pages`.
pub(crate) fn as_writer<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BY_WRITER.set(false);
        }
    }
    BY_WRITER.set(true);
    let _reset = Reset;
    f()
}

/// Runs of dirty pages in a write-back's list per part written at once
/// (`write_back_listed`), so that a small sync starts no thread.
const SPLIT_RUNS: usize = 4;

/// What the service writes a file back through: the descriptor a writer lent it, and with
/// `SharedConfig::direct_write_back` the file opened again with `O_DIRECT` (a description of
/// its own: the lent one's flags are its writer's), for runs of whole pages. None where the
/// file system has no `O_DIRECT` or the file can no longer be opened for writing; opened
/// without blocking, so a lease another program holds refuses it instead of stalling the
/// service's loop for the lease's break time.
pub(crate) struct Lent {
    pub fd: std::fs::File,
    pub direct: Option<std::fs::File>,
    /// An array file's backing, whose device 0's file `fd` is (it names the file in the file
    /// table): write-backs go to its backing files. Only a private cache's own flusher has
    /// these (a service takes no array files yet).
    pub array: Option<std::sync::Arc<Backing>>,
}

impl Lent {
    pub fn new(fd: std::fs::File, direct: bool) -> Lent {
        let direct = direct.then(|| super::held::reopen_direct(&fd)).flatten();
        Lent { fd, direct, array: None }
    }

    /// What a write-back through it writes to.
    pub fn target(&self) -> Target<'_> {
        match self.array.as_deref().and_then(Backing::array) {
            Some(a) => Target::Array(a),
            None => Target::Os { fd: &self.fd, direct: self.direct.as_ref() },
        }
    }
}

/// What a write-back writes a file's pages to.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// An OS file, through `fd`, its whole pages through `direct` (`O_DIRECT`) if given.
    Os { fd: &'a std::fs::File, direct: Option<&'a std::fs::File> },
    /// An array file's backing files, whole pages (`backing.rs`).
    Array(&'a ArrayFile),
}

impl<'a> Target<'a> {
    /// The OS file, for a change of the cache's own (`outside.rs`); None for an array file.
    pub(crate) fn os(self) -> Option<&'a std::fs::File> {
        match self {
            Target::Os { fd, .. } => Some(fd),
            Target::Array(_) => None,
        }
    }
}

/// A write of a write-back: pages of run `run` from byte `at` of descriptor `fd`. `direct`
/// if it goes past the kernel's page cache (its time is the device's, `gc.rs`); `fallback`,
/// where an `O_DIRECT` write that the file system refuses goes instead.
struct Piece<'a> {
    run: usize,
    /// The array's device it goes to (0 for an OS file).
    dev: usize,
    fd: std::os::fd::RawFd,
    direct: bool,
    fallback: Option<std::os::fd::RawFd>,
    at: u64,
    bufs: Vec<IoSlice<'a>>,
}

impl Inner {
    /// Writes frame `f` (locked by us, `DIRTY`) back to its file through `fd` (our own
    /// descriptor), up to the file's length, and clears `DIRTY`; on failure keeps it and
    /// records the error on the file.
    pub(crate) fn write_back_locked(&self, f: u32, fd: &Backing) -> Result<()> {
        self.write_back_runs(&[[f]], self.target(fd))
    }

    /// What a writer writes back to through `fd`: for an OS file, whole pages through it
    /// opened again with `O_DIRECT`, with `SharedConfig::direct_write_back`, as the service
    /// does.
    pub(crate) fn target<'a>(&self, fd: &'a Backing) -> Target<'a> {
        match fd {
            Backing::File(h) => {
                Target::Os { fd: h, direct: if self.direct_write_back() { h.direct() } else { None } }
            }
            Backing::Array(a) => Target::Array(a),
        }
    }

    /// Writes each run of frames of `runs` (locked by us, `DIRTY`, holding pages that follow
    /// each other in one file, the first page first; every run of the same file) back to
    /// `to`, up to the file's length, all runs at once through io_uring where
    /// `SharedConfig::io` says, and clears their `DIRTY`; a run that fails stays dirty, and its
    /// error is recorded on the file (the first one returned). An OS file's whole pages go
    /// through its `O_DIRECT` descriptor if it has one (those it refuses, the buffered way);
    /// an array file's runs are cut where they cross from one device to the next.
    fn write_back_runs<R: AsRef<[u32]>>(&self, runs: &[R], to: Target<'_>) -> Result<()> {
        let frames = self.view.frames();
        let slot = key_slot(frames[runs[0].as_ref()[0] as usize].key());
        let e = &self.view.files()[slot as usize];
        // Acquire: pairs with the length's Release stores.
        let len = e.len.load(Ordering::Acquire);
        let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(runs.len());
        let size = self.view.page_size;
        let page = size.bytes();
        for (r, run) in runs.iter().enumerate() {
            let run = run.as_ref();
            let at = size.start(key_page(frames[run[0] as usize].key()));
            let mut bufs: Vec<IoSlice<'_>> = Vec::with_capacity(run.len());
            for (i, &f) in run.iter().enumerate() {
                let n = len.saturating_sub(at + (i * page) as u64).min(page as u64) as usize;
                if n == 0 {
                    break; // past the length (cut meanwhile): nothing of it to write
                }
                // An array file's pages go whole, the last one's bytes past the length zeros
                // (`backing.rs`).
                let n = if matches!(to, Target::Array(_)) { page } else { n };
                // SAFETY: we hold the frame's lock, so no one writes its bytes; `n <= page`.
                bufs.push(IoSlice::new(unsafe { std::slice::from_raw_parts(self.view.page(f), n) }));
            }
            if bufs.is_empty() {
                continue;
            }
            let first = size.page_of(at);
            // Relaxed (both): a counter of the requests made, an OS file's one per run, an
            // array's one per device the run reaches.
            let requests = &self.view.header().write_back_requests;
            match to {
                Target::Os { fd, direct } => {
                    requests.fetch_add(1, Ordering::Relaxed);
                    // The whole pages through `direct`: frames are page-aligned in memory and
                    // runs start at a page of the file, aligned as O_DIRECT wants on block
                    // sizes up to a page. The last page, cut by the length, the buffered way.
                    let whole = match direct {
                        Some(_) => bufs.iter().take_while(|b| b.len() == page).count(),
                        None => 0,
                    };
                    let tail = bufs.split_off(whole);
                    let (fd, plain) = (fd.as_raw_fd(), Some(fd.as_raw_fd()));
                    if let (true, Some(d)) = (whole > 0, direct) {
                        pieces.push(Piece {
                            run: r,
                            dev: 0,
                            fd: d.as_raw_fd(),
                            direct: true,
                            fallback: plain,
                            at,
                            bufs,
                        });
                    }
                    if !tail.is_empty() {
                        let at = at + (whole * page) as u64;
                        pieces.push(Piece {
                            run: r,
                            dev: 0,
                            fd,
                            direct: false,
                            fallback: None,
                            at,
                            bufs: tail,
                        });
                    }
                }
                Target::Array(a) => {
                    for (dev, at, bufs) in a.writes(first, &bufs) {
                        requests.fetch_add(1, Ordering::Relaxed);
                        let (fd, direct) = (a.fd(dev), a.reaches_device(dev));
                        pieces.push(Piece { run: r, dev, fd, direct, fallback: None, at, bufs });
                    }
                }
            }
        }
        // Timed for GC-aware eviction (`gc.rs`): the O_DIRECT writes reach the device, and a
        // batch's time per page is the device's at that depth. A failed one says nothing of its
        // speed: its slot is freed, no sample taken.
        // An array's pieces are timed by the device each goes to.
        let mut timed: Vec<(usize, u64)> = Vec::new();
        for p in pieces.iter().filter(|p| p.direct) {
            match timed.iter_mut().find(|(dev, _)| *dev == p.dev) {
                Some((_, pages)) => *pages += p.bufs.len() as u64,
                None => timed.push((p.dev, p.bufs.len() as u64)),
            }
        }
        let gc: Vec<_> = timed
            .into_iter()
            .filter_map(|(dev, pages)| {
                let g = match to {
                    Target::Os { .. } => self.gc_device(slot),
                    Target::Array(a) => self.view.gc().device(super::backing::device_number(&a.array, dev)),
                };
                g.map(|g| (g, dev, pages))
            })
            .collect();
        // Readers copy the pages meanwhile: nothing of them changes until the writes end.
        for &f in runs.iter().flat_map(|r| r.as_ref()) {
            frames[f as usize].begin_write_back();
        }
        let t0 = super::gc::now_ns();
        let gc_slots: Vec<_> = gc.iter().map(|(g, _, pages)| g.begin_at(*pages, t0)).collect();
        let span =
            tracing::debug_span!("upcache.write_back", runs = runs.len(), requests = pieces.len()).entered();
        let mut results = self.write_pieces(&pieces, runs.len() > 1, to);
        drop(span);
        for &f in runs.iter().flat_map(|r| r.as_ref()) {
            frames[f as usize].end_write_back();
        }
        let took = std::time::Duration::from_nanos(super::gc::now_ns().saturating_sub(t0));
        for p in &pieces {
            self.view.latencies().device(p.dev).1.record(took);
        }
        if !gc.is_empty() {
            let now = super::gc::now_ns();
            for ((g, dev, pages), gc_slot) in gc.into_iter().zip(gc_slots) {
                let ok = pieces.iter().zip(&results).all(|(p, r)| !p.direct || p.dev != dev || r.is_ok());
                g.end_at(gc_slot, pages, now - t0, ok, now);
            }
        }
        if let Target::Array(a) = to {
            for p in &pieces {
                a.written(p.dev, p.at, p.at + (p.bufs.len() * page) as u64);
            }
        }
        let mut failed: Vec<Option<std::io::Error>> = runs.iter().map(|_| None).collect();
        for (p, r) in pieces.iter().zip(results.iter_mut()) {
            if let (Some(plain), true) =
                (p.fallback, matches!(r, Err(e) if e.raw_os_error() == Some(libc::EINVAL)))
            {
                // O_DIRECT refused after all (an alignment the file system wants larger).
                *r = crate::io::sys::pwritev_all(plain, p.at, &mut p.bufs.clone());
            }
            if let Err(err) = std::mem::replace(r, Ok(())) {
                failed[p.run].get_or_insert(err);
            }
        }
        let mut first = Ok(());
        for (run, failed) in runs.iter().zip(failed) {
            let run = run.as_ref();
            if let Some(err) = failed {
                e.record_error(err.raw_os_error().unwrap_or(libc::EIO) as u32);
                // Relaxed: a counter.
                self.view.header().write_back_errors.fetch_add(1, Ordering::Relaxed);
                first = first.and(Err(Error::io("write back pages of a shared file", err)));
                continue;
            }
            let map = self.view.dirty_map();
            for &f in run {
                // Release: the clean flag goes after the write; counts after the flag (never
                // below).
                frames[f as usize].flags.fetch_and(!DIRTY, Ordering::Release);
                map.clear(f);
            }
            let n = run.len() as u64;
            e.dirty.fetch_sub(n, Ordering::Release);
            // Relaxed: counters.
            self.view.header().dirty.fetch_sub(n, Ordering::Relaxed);
            self.view.header().written_back.fetch_add(n, Ordering::Relaxed);
            if BY_WRITER.get() {
                self.view.header().dflush_pages.fetch_add(n, Ordering::Relaxed);
            }
        }
        first
    }

    /// Writes every piece through its descriptor: at once through io_uring if
    /// they are of several runs and `SharedConfig::io` and `bundling` say so, else one
    /// `pwritev` after another; an array's routed through an engine of its own (per-device I/O threads,
    /// simulated devices), through it, at once.
    fn write_pieces(&self, pieces: &[Piece<'_>], runs: bool, to: Target<'_>) -> Vec<std::io::Result<()>> {
        // Without bundling, each write is waited for before the next is handed over.
        let bundled = self.techniques & technique::BUNDLING != 0;
        if let Target::Array(a) = to {
            if a.routed() {
                let writes: Vec<_> = pieces.iter().map(|p| (p.dev, p.at, &p.bufs[..])).collect();
                return a.write_devices(&writes);
            }
        }
        if runs && bundled && pieces.len() > 1 {
            if let Some(ring) = self.ring() {
                // Relaxed: a counter.
                self.view.header().write_back_batches.fetch_add(1, Ordering::Relaxed);
                return Self::write_bounced(ring, pieces, self.view.page_size);
            }
        }
        pieces.iter().map(|p| crate::io::sys::pwritev_all(p.fd, p.at, &mut p.bufs.clone())).collect()
    }

    /// Writes `pieces` at once through `ring` from a copy in a bounce (`bounce.rs`): at exit the
    /// kernel waits for only some of a process's io_uring requests, so a write of a process
    /// killed in `io_uring_enter` may read its buffers after it is gone. Taken from the frames,
    /// it could write another page's bytes at this one's offset once a repairer has written the
    /// page back and given its frame away; taken from the bounce, it writes the bytes it had.
    fn write_bounced(
        ring: &UringEngine,
        pieces: &[Piece<'_>],
        size: super::page_size::PageSize,
    ) -> Vec<std::io::Result<()>> {
        let pages = pieces.iter().map(|p| p.bufs.len()).sum();
        let mut bounce = super::bounce::Bounce::new(pages, size);
        let mut copies = bounce.pages_mut().into_iter();
        let copied: Vec<Vec<IoSlice<'_>>> = pieces
            .iter()
            .map(|p| {
                p.bufs
                    .iter()
                    .zip(copies.by_ref())
                    .map(|(from, to)| {
                        let to = &mut to[..from.len()];
                        to.copy_from_slice(from);
                        IoSlice::new(to)
                    })
                    .collect()
            })
            .collect();
        let writes: Vec<_> = pieces.iter().zip(&copied).map(|(p, bufs)| (p.fd, p.at, &bufs[..])).collect();
        ring.write_batch(&writes)
    }

    /// The rings write-back goes through (`SharedConfig::io` uring), made at first use; None
    /// with psync, or where the kernel refuses io_uring (said once).
    pub(crate) fn ring(&self) -> Option<&UringEngine> {
        if self.techniques & technique::URING == 0 {
            return None;
        }
        self.uring
            .get_or_init(|| match UringEngine::new(None) {
                Ok(ring) => Some(ring),
                Err(e) => {
                    log::warn!(
                        "upcache: io_uring is unavailable ({e}); shared write-back runs one at a time"
                    );
                    None
                }
            })
            .as_ref()
    }

    /// A loader thread's write-behind of a write stream's pages `pages` of file `slot` through
    /// `fd`, the stream's open's (`SharedFile::write_behind`): those still dirty, in runs,
    /// passing over frames others hold (their holder may be stopped; a sync or the flushers
    /// get them later). Errors stay on the file for its next sync.
    pub(crate) fn write_behind(&self, slot: u32, pages: std::ops::Range<u64>, fd: &Backing) {
        let (gen, _) = self.file_extent(slot);
        let listed = self.candidates_of(slot, gen, pages.start, pages.end);
        let frames = self.view.frames();
        let dirty = listed.iter().filter(|&&(f, _)| frames[f as usize].flags() & DIRTY != 0).count();
        // Relaxed: a statistic.
        self.view.header().behind_pages.fetch_add(dirty as u64, Ordering::Relaxed);
        let _ = self.write_back_listed(&listed, self.target(fd), false, None);
        for &(f, k) in &listed {
            let m = &frames[f as usize];
            if m.key() == k {
                m.note_streamed();
            }
        }
    }

    /// Writes back every dirty page of file `slot` through `fd` (open for writing); the first
    /// error.
    pub(crate) fn write_back_slot(&self, slot: u32, fd: &Backing) -> Result<()> {
        self.write_back_slot_as(slot, fd, true)
    }

    /// [`Self::write_back_slot`], passing over frames others hold unless `wait`.
    pub(crate) fn write_back_slot_as(&self, slot: u32, fd: &Backing, wait: bool) -> Result<()> {
        // Acquire: pairs with `mark_dirty`'s count.
        if self.view.files()[slot as usize].dirty.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        self.write_back_listed(&self.dirty_candidates(slot), self.target(fd), wait, None)
    }

    /// Writes back, through `fd` (whole pages through `direct` if given), each listed frame (of
    /// one file) that still holds its page (`home` the key) and is dirty, in runs; the first
    /// error. Without `wait`, a frame locked
    /// by someone else is skipped (the service's flusher: a stopped process holding one must
    /// not stall it). With `stop_at`, it stops before a run once the cache has no more dirty
    /// pages than that (background write-back, as the kernel's stops below its threshold).
    /// Past [`SPLIT_RUNS`] runs of dirty pages, a sync's list (`wait`) or one written under dirty
    /// pressure (`stop_at`: writers outrun the device) is cut into `SharedConfig::flushers`
    /// parts written at once, one on this thread and each other on a thread of its own
    /// (ScaleCache's parallel write-back within a file: a device takes more of its speed at a
    /// depth of 2). Other write-backs (a file's expiry, a DONTNEED's) run beside writers that
    /// the threads would take processors from: random writes through the shim lost a tenth.
    pub(crate) fn write_back_listed(
        &self,
        pages: &[(u32, u64)],
        to: Target<'_>,
        wait: bool,
        stop_at: Option<u64>,
    ) -> Result<()> {
        let frames = self.view.frames();
        let mut pages: Vec<(u32, u64)> =
            pages.iter().copied().filter(|&(f, _)| frames[f as usize].flags() & DIRTY != 0).collect();
        pages.sort_unstable_by_key(|&(_, k)| k);
        let parts = match wait || stop_at.is_some() {
            true => (self.view.header().flushers() as usize)
                .min(pages.len().div_ceil(SPLIT_RUNS * self.view.page_size.run_pages()))
                .max(1),
            false => 1,
        };
        if parts == 1 {
            return self.write_back_sorted(&pages, to, wait, stop_at);
        }
        let part = pages.len().div_ceil(parts);
        let by_writer = BY_WRITER.get();
        std::thread::scope(|s| {
            let others: Vec<_> = super::quiet::with_signals_blocked(|| {
                pages[part..]
                    .chunks(part)
                    .map(|p| {
                        let spawned = std::thread::Builder::new()
                            .name("upcache-write-back".into())
                            .spawn_scoped(s, move || {
                                super::quiet::library_thread();
                                BY_WRITER.set(by_writer);
                                self.write_back_sorted(p, to, wait, stop_at)
                            });
                        // No thread to be had: this one writes the part too.
                        spawned.map_err(|_| p)
                    })
                    .collect()
            });
            let mut first = self.write_back_sorted(&pages[..part], to, wait, stop_at);
            for other in others {
                let r = match other {
                    Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(p) => self.write_back_sorted(p, to, wait, stop_at),
                };
                first = first.and(r);
            }
            first
        })
    }

    /// `write_back_listed` of `pages` (dirty as listed, in key order) on this thread. A sync's
    /// (`wait`) runs and those of a write-back under dirty pressure (`stop_at`: a writer's
    /// dflush, the service's background pass) go up to `WRITE_BACK_DEPTH` at a time through
    /// io_uring (`SharedConfig::io`), other write-backs' one at a time: a random writer past
    /// the foreground ratio waited for one O_DIRECT write after another, a device round trip
    /// each, at 0.26x the private engine (bench/RESULTS.md). Under pressure a batch holds at
    /// most a run's worth of pages (`PageSize::run_pages`), so that batching helps short runs without
    /// holding long ones locked together. While it holds runs not yet
    /// written it waits for no frame. A sync leaves the frames others hold (another sync's
    /// write-back under way, a writer) to the end, after its own runs are written, and then
    /// waits only for those still dirty, as the in-process engine's sync does: two threads
    /// syncing one file each waited for the other's write-back of every page it held, one
    /// after another (`perf`: nearly every futex call of a write + sync workload).
    fn write_back_sorted(
        &self,
        pages: &[(u32, u64)],
        to: Target<'_>,
        wait: bool,
        stop_at: Option<u64>,
    ) -> Result<()> {
        self.write_back_sorted_as(pages, to, wait, stop_at, wait)
    }

    /// [`Self::write_back_sorted`], leaving the frames others hold to a last pass if `defer`.
    fn write_back_sorted_as(
        &self,
        pages: &[(u32, u64)],
        to: Target<'_>,
        wait: bool,
        stop_at: Option<u64>,
        defer: bool,
    ) -> Result<()> {
        let frames = self.view.frames();
        let mut held = Vec::new();
        let mut first = Ok(());
        let mut own = None;
        let most =
            if self.techniques & technique::RUN_MERGING != 0 { self.view.page_size.run_pages() } else { 1 };
        let depth = if (wait || stop_at.is_some()) && self.ring().is_some() { WRITE_BACK_DEPTH } else { 1 };
        let mut batch: Vec<Vec<u32>> = Vec::with_capacity(depth);
        let mut batched = 0;
        let mut i = 0;
        let header = self.view.header();
        while i < pages.len() {
            // Relaxed: a threshold. The batch's pages are as good as written.
            let over = stop_at.map(|at| {
                header.dirty.load(Ordering::Relaxed).saturating_sub(at).saturating_sub(batched) as usize
            });
            if over == Some(0) {
                break;
            }
            let most = over.map_or(most, |over| over.min(most));
            let (f, k) = pages[i];
            i += 1;
            if !self.lock_dirty(f, k, wait && batch.is_empty() && !defer) {
                if !wait || frames[f as usize].flags() & DIRTY == 0 {
                    continue;
                }
                if defer {
                    held.push((f, k));
                    continue;
                }
                if batch.is_empty() {
                    continue;
                }
                first = first.and(self.write_back_batch(&mut batch, to));
                batched = 0;
                if !self.lock_dirty(f, k, true) {
                    continue;
                }
            }
            let mut run = Vec::with_capacity(most);
            run.push(f);
            // The pages right after it that no one else holds.
            while run.len() < most
                && i < pages.len()
                && pages[i].1 == k + run.len() as u64
                && key_page(pages[i].1) != 0
                && self.lock_dirty(pages[i].0, pages[i].1, false)
            {
                run.push(pages[i].0);
                i += 1;
            }
            // One change of the cache's own for the whole pass (`outside.rs`).
            own.get_or_insert_with(|| self.own_change(key_slot(k), to.os())).step();
            batched += run.len() as u64;
            batch.push(run);
            // Under dirty pressure a batch is also cut at a run's worth of pages: long runs went
            // 32 MiB at a time, locked until all were written, and the writers' p99 tripled.
            if batch.len() == depth
                || (stop_at.is_some() && batched >= self.view.page_size.run_pages() as u64)
            {
                first = first.and(self.write_back_batch(&mut batch, to));
                batched = 0;
            }
        }
        if !batch.is_empty() {
            first = first.and(self.write_back_batch(&mut batch, to));
        }
        if !held.is_empty() {
            first = first.and(self.write_back_sorted_as(&held, to, wait, stop_at, false));
        }
        first
    }

    /// Writes the runs of `batch` back (`write_back_runs`), unlocks their frames and empties it.
    fn write_back_batch(&self, batch: &mut Vec<Vec<u32>>, to: Target<'_>) -> Result<()> {
        let written = self.write_back_runs(batch, to);
        let frames = self.view.frames();
        for f in batch.drain(..).flatten() {
            frames[f as usize].unlock(self.me, false);
        }
        written
    }

    /// Locks frame `f` (waiting if `wait`, else only if no one holds it) if it is dirty, and
    /// keeps it locked if it still holds page `k` and is dirty; whether it does.
    fn lock_dirty(&self, f: u32, k: u64, wait: bool) -> bool {
        let m = &self.view.frames()[f as usize];
        if m.flags() & DIRTY == 0 {
            return false;
        }
        if wait {
            self.lock_frame(f);
        } else if !m.try_lock(self.me) {
            return false;
        }
        if m.home() == k && m.flags() & DIRTY != 0 {
            return true;
        }
        m.unlock(self.me, false);
        false
    }

    /// Writes back the dirty pages of every file this process has open for writing, passing
    /// over frames others hold; the first error.
    pub(crate) fn write_back_all_open_unwaiting(&self) -> Result<()> {
        let mut first = Ok(());
        for (slot, fd) in self.writable_fds() {
            let r = self.write_back_slot_as(slot, &fd, false);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Writes back the dirty pages of every file this process has open for writing.
    pub(crate) fn write_back_all_open(&self) {
        for (slot, fd) in self.writable_fds() {
            if let Err(e) = self.write_back_slot(slot, &fd) {
                log::error!("upcache: writing back a shared file: {e}");
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::small;
    use super::super::{SharedCache, SharedConfig};
    use super::Target;
    use std::sync::atomic::Ordering;

    /// A sync leaves a dirty frame another holds to the end: with page 0's frame held by
    /// another thread (as its sync's write-back would), the sync writes page 5 back first,
    /// then waits for page 0 and writes it too, still dirty. (Waiting at page 0 first, page 5
    /// would stay dirty until page 0 was let go, and the wait below would fail.)
    #[test]
    fn a_sync_writes_its_other_pages_before_it_waits_for_one_held() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 8 * 4096]).unwrap();
        let cache = SharedCache::create(&SharedConfig { readahead: 0, ..small() }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        f.write_at(&[1u8; 4096], 0).unwrap();
        f.write_at(&[5u8; 4096], 5 * 4096).unwrap();
        let inner = &cache.inner;
        let frame = |page| inner.index().hint(inner.key(f.slot(), page)).expect("cached");
        let (f0, f5) = (frame(0), frame(5));
        let dirty = |fr: u32| inner.view.frames()[fr as usize].flags() & super::DIRTY != 0;
        inner.lock_frame(f0);
        std::thread::scope(|s| {
            let sync = s.spawn(|| f.sync_data());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while dirty(f5) && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            let first = !dirty(f5);
            assert!(dirty(f0) && !sync.is_finished(), "the sync waits for the held page");
            inner.view.frames()[f0 as usize].unlock(inner.me, false);
            sync.join().unwrap().unwrap();
            assert!(first, "page 5 waited for the held page 0");
        });
        assert!(!dirty(f0) && !dirty(f5));
        let disk = std::fs::read(&p).unwrap();
        assert!(disk[..4096].iter().all(|&b| b == 1) && disk[5 * 4096..6 * 4096].iter().all(|&b| b == 5));
    }

    /// A sync of more dirty pages than a part's goes in parts at once (`SPLIT_PAGES`, two
    /// flushers), each part's runs at once through io_uring: every page reaches the file. Through a descriptor that cannot write, every run fails, every page stays dirty,
    /// and the next sync reports the error once, then writes them all.
    #[test]
    fn a_long_write_back_goes_in_parts_and_keeps_its_pages_dirty_on_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let config = SharedConfig { memory: 16 << 20, flushers: 2, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let pages = 2 * super::SPLIT_RUNS * super::super::frame::RUN_PAGES + 3;
        let data: Vec<u8> = (0..pages * 4096).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        let (inner, entry) = (&cache.inner, f.entry());
        assert_eq!(entry.dirty.load(Ordering::Relaxed), pages as u64);
        let read_only = std::fs::File::open(&p).unwrap();
        let before = cache.status().stats.writeback_ios;
        let listed = inner.dirty_candidates(f.slot());
        let to = Target::Os { fd: &read_only, direct: None };
        assert!(inner.write_back_listed(&listed, to, true, None).is_err());
        assert_eq!(entry.dirty.load(Ordering::Relaxed), pages as u64, "every page still dirty");
        // Every run of each part tried: parts of 1026 and 1025 pages, in runs of 256 pages, a
        // part's five at once through io_uring.
        let status = cache.status();
        assert_eq!(status.stats.writeback_ios - before, 5 + 5);
        assert_eq!(status.write_back_batches, 2);
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::EBADF));
        f.sync_data().unwrap();
        assert_eq!((entry.dirty.load(Ordering::Relaxed), cache.status().stats.dirty_pages), (0, 0));
        assert!(std::fs::read(&p).unwrap() == data, "every page written back");
    }

    /// A sync lists only the pages in the file's dirty range: after a sync of a file with
    /// many cached pages, one page written is the one listed. And a sync writes back every
    /// page written before it while other threads write the file and sync it at once (a
    /// sync that empties the range never drops a page another thread just dirtied).
    #[test]
    fn a_sync_lists_the_dirty_range_and_writes_back_every_page_written_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let cache = SharedCache::create(&SharedConfig { memory: 16 << 20, ..small() }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        f.write_all_at(&vec![1u8; 1000 * 4096], 0).unwrap();
        f.sync_data().unwrap();
        assert!(cache.inner.dirty_candidates(f.slot()).is_empty(), "clean: nothing listed");
        f.write_all_at(&[2u8; 10], 500 * 4096 + 7).unwrap();
        assert_eq!(cache.inner.dirty_candidates(f.slot()).len(), 1);
        f.sync_data().unwrap();
        // Two pages far apart: a range of 1000 pages, two dirty frames in the cache, so the
        // dirty map lists them (`dirty_map.rs`), and the sync writes both back.
        f.write_all_at(&[4u8; 10], 7).unwrap();
        f.write_all_at(&[5u8; 10], 999 * 4096 + 7).unwrap();
        let listed: Vec<u64> = cache
            .inner
            .dirty_candidates(f.slot())
            .iter()
            .map(|&(_, k)| super::super::frame::key_page(k))
            .collect();
        assert_eq!(listed, [0, 999]);
        f.sync_data().unwrap();
        assert!(cache.inner.dirty_candidates(f.slot()).is_empty(), "clean again");
        let mut got = [0u8; 10];
        std::os::unix::fs::FileExt::read_exact_at(
            &std::fs::File::open(&p).unwrap(),
            &mut got,
            999 * 4096 + 7,
        )
        .unwrap();
        assert_eq!(got, [5u8; 10]);
        let os = std::fs::File::open(&p).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (f, os, stop) = (&f, &os, &stop);
                s.spawn(move || {
                    for i in 0..300u64 {
                        let page = (i * 7 + t * 3) % 1000;
                        let byte = [(i % 250) as u8 + 3 + t as u8];
                        f.write_all_at(&byte, page * 4096 + t).unwrap();
                        f.sync_data().unwrap();
                        let mut got = [0u8];
                        std::os::unix::fs::FileExt::read_exact_at(os, &mut got, page * 4096 + t).unwrap();
                        assert_eq!(got, byte, "thread {t}, write {i}: not written back by its sync");
                    }
                    stop.store(true, Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    f.sync_data().unwrap();
                }
            });
        });
    }
}
