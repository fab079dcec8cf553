//! Write-back: dirty accounting, background flushers, and direct flush by writers.
//!
//! Two thresholds, as fractions of the frames (seed 000 §3.3):
//! - past the *background* threshold, flusher threads wake and write dirty pages back until
//!   the count is under half of it;
//! - past the *foreground* threshold, a writer does not sleep waiting for the flushers (the
//!   kernel's `balance_dirty_pages`): it writes dirty pages back itself before its write, in
//!   parallel with the flushers and with other writers (dflush).
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

pub(crate) mod flusher;
pub(crate) mod run;

use crate::config::Config;
use crate::sync::{self, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};

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

/// Dirty accounting and the flusher wake-up channel.
pub(crate) struct Writeback {
    /// Dirty pages in the cache.
    pub(crate) dirty: AtomicUsize,
    /// Flushers run when `dirty` passes this.
    pub(crate) background: usize,
    /// Writers flush themselves when `dirty` passes this.
    pub(crate) foreground: usize,
    /// Where the next write-back scan of the frame table starts; threads take chunks from it
    /// so they scan different frames.
    pub(crate) cursor: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    kick: Mutex<bool>,
    kicked: Condvar,
}

impl Writeback {
    pub(crate) fn new(config: &Config, frames: usize) -> Self {
        let at = |ratio: f64| ((frames as f64 * ratio) as usize).max(1);
        Writeback {
            dirty: AtomicUsize::new(0),
            background: at(config.dirty_background_ratio),
            foreground: at(config.dirty_foreground_ratio),
            cursor: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            kick: Mutex::new(false),
            kicked: Condvar::new(),
        }
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
        // Relaxed: as in page_dirtied.
        self.dirty.fetch_sub(n, Ordering::Relaxed);
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
