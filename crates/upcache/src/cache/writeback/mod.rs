//! Write-back: dirty accounting, background flushers, and direct flush by writers.
//!
//! Two thresholds, as fractions of the frames (seed 000 §3.3), and an age:
//! - past the *background* threshold, flusher threads wake and write dirty pages back until
//!   the count is a sixteenth under it;
//! - past *freerun*, halfway to the *foreground* threshold, a writer does not sleep waiting
//!   for the flushers (the kernel's `balance_dirty_pages`): it writes dirty pages back itself
//!   (dflush), in parallel with the flushers and with other writers, in proportion to how far
//!   past freerun the count is, twice what it dirties at the foreground threshold and beyond.
//!   [`FlushKind::Background`] makes it sleep past the foreground threshold instead;
//! - a file dirty for longer than the expiry is written back by the flushers, whatever the
//!   count ([`expire`]; the kernel's `dirty_expire_centisecs`).
//!
//! So a working set written in place that fits under the background threshold is never
//! rewritten while it is hot, and a stream larger than the cache slows its writers gradually
//! (bench/RESULTS.md, issue 18).
//!
//! With streams on (`Config::with_streams`, seed 003 §4.2) each file keeps its dirty pages as
//! streams ([`streams`]), files with dirty streams wait in one list, and flushers and dflush
//! take files from it and write their dirty ranges in requests of the device's largest size;
//! a sync writes only its file's dirty ranges. With streams off they scan the frame table.
//!
//! Every write-back goes through [`run`]: it starts from one dirty frame held `LOCKED`,
//! grows a run of dirty pages that are contiguous in the same backing file (across stripe
//! units when they follow each other there), and writes the run in one vectored request.
//! Pages stay `DIRTY` until their write succeeds; a failure unlocks them still dirty, and the
//! error sticks to the file until its next sync reports it.
//!
//! # Locking
//! Write-back takes frames only with `try_lock_dirty` and never takes a range lock, so it can
//! run from any thread, whatever that thread holds.

pub(crate) mod expire;
pub(crate) mod run;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::file::streams::DirtyFiles;
use crate::sync::{self, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

/// Written-back streams remembered for reclaim at most.
const MAX_CLEANED_STREAMS: usize = 4096;

/// A throttled writer (`FlushKind::Background`) gives up waiting after this long without the
/// dirty count falling, so that failing write-back slows writers down but cannot hang them.
const THROTTLE_PATIENCE: Duration = Duration::from_secs(1);

/// Why a flusher woke up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The dirty count passed the background threshold (or shutdown).
    Kicked,
    /// The period passed: write back everything.
    Period,
    /// A spurious condvar wake-up: nothing to do.
    Spurious,
}

/// Where write-back looks for dirty pages (seed 003 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FindDirty {
    /// Files' dirty streams, from the list of files that have any (`file/streams.rs`).
    Streams,
    /// The frame table, scanned from a shared cursor.
    Scan,
}

/// Dirty accounting and the flusher wake-up channel.
pub(crate) struct Writeback {
    /// Dirty pages in the cache.
    pub(crate) dirty: AtomicUsize,
    /// Flushers run when `dirty` passes this.
    pub(crate) background: usize,
    /// Writers flush themselves in full when `dirty` passes this.
    pub(crate) foreground: usize,
    /// Writers start paying back in proportion past this: halfway from background to
    /// foreground.
    pub(crate) freerun: usize,
    /// What writers past freerun owe in write-back and have not paid yet, in thousandths of a
    /// page (`balance_dirty`): the one that brings it to a run's worth pays it.
    pub(crate) debt: AtomicUsize,
    /// A file dirty for this long is written back (`expire`).
    pub(crate) expire: Duration,
    /// When a flusher next looks for expired files, in ms since `epoch`.
    next_expiry_scan: AtomicU64,
    epoch: Instant,
    /// Where the next write-back scan of the frame table starts; threads take chunks from it
    /// so they scan different frames.
    pub(crate) cursor: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    /// How write-back finds dirty pages: the one place `Config::with_streams` is decided.
    pub(crate) find: FindDirty,
    /// Longest write-back request in pages: the devices' request size with streams on, 64
    /// pages (the old fixed run) with them off.
    pub(crate) run_pages: usize,
    /// Files with dirty streams, oldest first.
    pub(crate) dirty_files: DirtyFiles,
    /// Written-back streams, oldest first: (file id, pages), for reclaim to evict in order.
    cleaned_streams: Mutex<VecDeque<(u64, std::ops::Range<u64>)>>,
    kick: Mutex<bool>,
    kicked: Condvar,
    /// Writers sleeping in `throttle`, and where they sleep.
    throttled: AtomicUsize,
    cleaned: Mutex<()>,
    cleaned_cv: Condvar,
}

impl Writeback {
    /// Accounting for `frames` frames on devices that take requests of up to `request_pages`.
    pub(crate) fn new(config: &Config, frames: usize, request_pages: usize) -> Self {
        let at = |ratio: f64| ((frames as f64 * ratio) as usize).max(1);
        let (background, foreground) = (at(config.dirty_background_ratio), at(config.dirty_foreground_ratio));
        let (find, run_pages) = match config.streams {
            true => (FindDirty::Streams, request_pages),
            false => (FindDirty::Scan, run::MAX_RUN),
        };
        let run_pages = if config.run_merging { run_pages } else { 1 };
        Writeback {
            find,
            dirty: AtomicUsize::new(0),
            background,
            foreground,
            freerun: background + (foreground - background) / 2,
            debt: AtomicUsize::new(0),
            expire: config.dirty_expire,
            next_expiry_scan: AtomicU64::new(0),
            epoch: Instant::now(),
            cursor: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            run_pages,
            dirty_files: DirtyFiles::default(),
            cleaned_streams: Mutex::new(VecDeque::new()),
            kick: Mutex::new(false),
            kicked: Condvar::new(),
            throttled: AtomicUsize::new(0),
            cleaned: Mutex::new(()),
            cleaned_cv: Condvar::new(),
        }
    }

    /// Whether files keep their dirty pages as streams (`FileInner::streams`).
    pub(crate) fn tracks_streams(&self) -> bool {
        self.find == FindDirty::Streams
    }

    /// Where flushers woken by the background threshold stop: a sixteenth under it, so that
    /// a count hovering at the threshold does not wake them for every page.
    pub(crate) fn background_stop(&self) -> usize {
        self.background - self.background / 16
    }

    /// Milliseconds since the cache started, never 0 (a file's `dirtied_at` uses 0 for clean).
    pub(crate) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// How long a flusher sleeps when not kicked: a sixth of the expiry (the kernel's 5 s
    /// for its 30 s), between 10 ms and 5 s.
    pub(crate) fn expiry_interval(&self) -> Duration {
        (self.expire / 6).clamp(Duration::from_millis(10), Duration::from_secs(5))
    }

    /// Whether it is time to look for expired files; true for one caller per interval.
    pub(crate) fn take_expiry_scan(&self, now_ms: u64) -> bool {
        // Relaxed: the time is the only thing shared; the CAS picks one flusher.
        let due = self.next_expiry_scan.load(Ordering::Relaxed);
        let next = now_ms + self.expiry_interval().as_millis() as u64;
        now_ms >= due
            && self.next_expiry_scan.compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// What a writer about to dirty `pages` at a dirty count of `dirty` (past freerun) writes
    /// back first, if anything: its share is twice what it dirties at the foreground threshold,
    /// scaled down linearly to nothing at freerun. Shares are added to a debt that the writer
    /// bringing it to a run's worth pays in one go, so that write-back stays in runs rather
    /// than a page per write; past the foreground threshold a writer pays at once, at least a
    /// run (and not a whole request, which made each 4 KiB random write there write 1024
    /// scattered pages first).
    pub(crate) fn owed(&self, pages: usize, dirty: usize) -> Option<usize> {
        const MILLI: usize = 1000;
        // Relaxed: the debt is a tally; who pays it is decided by the swap alone.
        if dirty > self.foreground {
            let debt = self.debt.swap(0, Ordering::Relaxed) / MILLI;
            return Some((2 * pages).max(run::MAX_RUN) + debt);
        }
        let span = (self.foreground - self.freerun).max(1);
        let share = (2 * pages * MILLI).saturating_mul(dirty.saturating_sub(self.freerun).min(span)) / span;
        let owed = self.debt.fetch_add(share, Ordering::Relaxed) + share;
        if owed < run::MAX_RUN * MILLI {
            return None;
        }
        let debt = self.debt.swap(0, Ordering::Relaxed) / MILLI;
        (debt > 0).then_some(debt)
    }

    /// Current dirty page count.
    pub(crate) fn dirty(&self) -> usize {
        // Relaxed: a threshold check; a stale value only shifts when flushing starts.
        self.dirty.load(Ordering::Relaxed)
    }

    pub(crate) fn page_dirtied(&self) {
        // Relaxed: a counter; nothing is published through it.
        let now = self.dirty.fetch_add(1, Ordering::Relaxed) + 1;
        if now == self.background + 1 {
            self.kick_flushers();
        }
    }

    pub(crate) fn pages_cleaned(&self, n: usize) {
        // SeqCst, with the SeqCst accesses in `throttle`: either this thread sees a throttled
        // writer's count, or that writer sees this subtraction before it sleeps.
        let now = self.dirty.fetch_sub(n, Ordering::SeqCst) - n;
        if now <= self.foreground && self.throttled.load(Ordering::SeqCst) != 0 {
            drop(sync::lock(&self.cleaned));
            self.cleaned_cv.notify_all();
        }
    }

    /// `FlushKind::Background`: sleeps until the dirty count is at most the foreground
    /// threshold, kicking the flushers, or until it has not fallen for `THROTTLE_PATIENCE`.
    pub(crate) fn throttle(&self) {
        let mut g = sync::lock(&self.cleaned);
        // SeqCst: see pages_cleaned.
        self.throttled.fetch_add(1, Ordering::SeqCst);
        let mut best = usize::MAX;
        let mut since = std::time::Instant::now();
        loop {
            let dirty = self.dirty.load(Ordering::SeqCst);
            if dirty <= self.foreground || self.shutdown.load(Ordering::Acquire) {
                break;
            }
            if dirty < best {
                (best, since) = (dirty, std::time::Instant::now());
            } else if since.elapsed() >= THROTTLE_PATIENCE {
                break; // write-back is failing or stuck: let the writer go on
            }
            self.kick_flushers();
            // Timed: if write-back fails, nothing cleans and nothing wakes us.
            g = match self.cleaned_cv.wait_timeout(g, Duration::from_millis(10)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        self.throttled.fetch_sub(1, Ordering::SeqCst);
    }

    /// Pages `ranges` of file `file` were written back as a stream (seed 003 §4.2: eviction
    /// by stream). Joined to the newest entry when they continue it; the oldest entries are
    /// forgotten past `MAX_CLEANED_STREAMS` (CLOCK still finds those pages).
    pub(crate) fn stream_cleaned(&self, file: u64, ranges: &[std::ops::Range<u64>]) {
        let mut q = sync::lock(&self.cleaned_streams);
        for r in ranges {
            match q.back_mut() {
                Some((f, last)) if *f == file && last.end == r.start => last.end = r.end,
                _ => q.push_back((file, r.clone())),
            }
        }
        while q.len() > MAX_CLEANED_STREAMS {
            q.pop_front();
        }
    }

    /// The oldest written-back stream, for reclaim.
    pub(crate) fn oldest_cleaned_stream(&self) -> Option<(u64, std::ops::Range<u64>)> {
        sync::lock(&self.cleaned_streams).pop_front()
    }

    /// Gives back the rest of a stream reclaim did not finish, as the oldest again.
    pub(crate) fn return_cleaned_stream(&self, file: u64, pages: std::ops::Range<u64>) {
        sync::lock(&self.cleaned_streams).push_front((file, pages));
    }

    /// Wakes the flusher threads.
    pub(crate) fn kick_flushers(&self) {
        *sync::lock(&self.kick) = true;
        self.kicked.notify_all();
    }

    /// Sleeps until kicked, shut down, or `timeout` passes.
    pub(crate) fn wait_for_kick(&self, timeout: std::time::Duration) -> Wake {
        let mut g = sync::lock(&self.kick);
        let mut timed_out = false;
        if !*g && !self.shutdown.load(Ordering::Acquire) {
            (g, timed_out) = match self.kicked.wait_timeout(g, timeout) {
                Ok((g, t)) => (g, t.timed_out()),
                Err(p) => {
                    let (g, t) = p.into_inner();
                    (g, t.timed_out())
                }
            };
        }
        if std::mem::replace(&mut *g, false) {
            Wake::Kicked
        } else if timed_out {
            Wake::Period
        } else {
            Wake::Spurious
        }
    }
}
