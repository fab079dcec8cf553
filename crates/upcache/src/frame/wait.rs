//! Sleeping until a frame's state changes, without a lock or condvar per frame.
//!
//! Like the kernel's `page_wait_table`, a small table of (mutex, condvar) pairs is shared by
//! all frames, hashed by frame id. A waiter sets `WAITERS` in the frame's state word and
//! re-checks its condition under the bucket mutex before sleeping; the thread that releases
//! `LOCKED` (or `WRITING`, or the last reader) sees `WAITERS` in the word it replaced and
//! wakes the bucket. Because the waker
//! takes the bucket mutex before notifying, a waiter that saw the old state is already asleep
//! (or has not yet re-checked) and cannot miss the wake-up. There are 256 buckets. Every
//! waiter holds a pin on the frame it waits for, so the frame cannot be re-assigned to another
//! page while it sleeps.
//!
//! # Locking
//! A bucket mutex is a leaf: nothing else is taken while it is held.

use super::arena::FrameId;
use super::state::{FrameState, LOCKED, READER_MASK, WAITERS};
use crate::sync::{self, Condvar, Mutex};

const BUCKETS: usize = 256;

/// The wait table of a cache's frames.
pub struct WaitTable {
    buckets: Vec<(Mutex<()>, Condvar)>,
}

impl WaitTable {
    /// Bytes the table uses.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<(Mutex<()>, Condvar)>()
    }
}

impl Default for WaitTable {
    fn default() -> Self {
        WaitTable { buckets: (0..BUCKETS).map(|_| (Mutex::new(()), Condvar::new())).collect() }
    }
}

impl WaitTable {
    fn bucket(&self, id: FrameId) -> &(Mutex<()>, Condvar) {
        &self.buckets[(id as usize).wrapping_mul(0x9E37_79B9) % BUCKETS]
    }

    /// Sleeps until `done(word)` holds for the frame's state word, and returns that word.
    /// The caller must keep the frame from being re-assigned meanwhile (by holding a pin).
    pub fn wait_until(&self, id: FrameId, state: &FrameState, done: impl Fn(u64) -> bool) -> u64 {
        let w = state.load();
        if done(w) {
            return w;
        }
        let (m, cv) = self.bucket(id);
        let mut g = sync::lock(m);
        loop {
            // Set WAITERS, then re-check: an unlock after this point sees the bit and takes
            // the bucket mutex, which we hold until cv.wait releases it.
            let w = state.mark_waiter();
            if done(w) {
                return w;
            }
            g = sync::wait(cv, g);
        }
    }

    /// [`Self::wait_until`] for at most about `timeout` (one sleep, ended early by a wake-up
    /// of the frame); returns the word as it then is, whether or not `done` holds.
    pub fn wait_until_for(
        &self,
        id: FrameId,
        state: &FrameState,
        done: impl Fn(u64) -> bool,
        timeout: std::time::Duration,
    ) -> u64 {
        let w = state.load();
        if done(w) {
            return w;
        }
        let (m, cv) = self.bucket(id);
        let g = sync::lock(m);
        // As in `wait_until`: WAITERS set under the bucket mutex, which the waker takes.
        if !done(state.mark_waiter()) {
            let _g = sync::wait_timeout(cv, g, timeout);
        }
        state.load()
    }

    /// [`FrameState::try_lock_content`] until it succeeds, sleeping meanwhile until the
    /// readers are gone and `LOCKED` is free (see `FrameTable::lock_content`).
    pub fn lock_content(&self, id: FrameId, state: &FrameState) {
        while state.try_lock_content().is_err() {
            self.wait_until(id, state, |w| w & (LOCKED | READER_MASK) == 0);
        }
    }

    /// [`FrameState::unpin_reader`], waking whoever waits for the last reader to go.
    pub fn unpin_reader(&self, id: FrameId, state: &FrameState) {
        if let Some(old) = state.unpin_reader() {
            self.wake_if_waiters(id, old);
        }
    }

    /// Wakes the sleepers of frame `id` if `old_word` (the word an unlock replaced) had
    /// `WAITERS`.
    pub fn wake_if_waiters(&self, id: FrameId, old_word: u64) {
        if old_word & WAITERS != 0 {
            let (m, cv) = self.bucket(id);
            drop(sync::lock(m));
            cv.notify_all();
        }
    }
}
