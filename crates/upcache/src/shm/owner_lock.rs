//! A lock word for shared memory that names its holder, so that a lock held by a process that
//! was killed is taken over instead of blocking every other process for ever (the idea of
//! Linux's robust futexes and PostgreSQL's cleanup after a dead backend, with the holder's
//! liveness decided by the caller's table of attached processes).
//!
//! # The word
//! 0 is free; otherwise bits 0-30 hold the holder's id (1 to 2^31 - 1: a client's id from
//! [`super::Clients`], or a pid) and bit 31 says that someone may be sleeping on the word. An
//! id names a process, not a thread: a thread that finds its own id holding the lock waits, as
//! for any live holder, since another thread of its process holds it. A waiter sleeps on the
//! word's futex, shared between processes (not `FUTEX_PRIVATE`), for at most
//! [`LIVENESS_POLL`] at a time, and asks whether the holder is alive whenever it wakes (the
//! caller's `alive` keeps that cheap). Before its first sleep a waiter spins briefly
//! ([`spin_while_held`]): most holds are a page copy, shorter than a futex wait and wake.
//!
//! # Invariants
//! - Only a CAS from 0, or from a dead holder's word, makes a thread the holder, so two live
//!   holders never coexist.
//! - A sleeper sets the waiters bit before it sleeps and sleeps only while the word still
//!   has it; `unlock` clears the word with a swap and wakes one sleeper if the bit was set, so
//!   no sleeper misses an unlock. A thread that acquires after it slept sets the bit again, as
//!   other sleepers may remain.
//! - A take-over reports [`Acquired::OwnerDied`]: what the lock protects may be half-changed,
//!   and the new holder repairs it before it relies on it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::futex;

/// Bit 31: someone may be sleeping on the word.
const WAITERS: u32 = 1 << 31;
/// The largest holder id.
pub const MAX_HOLDER: u32 = WAITERS - 1;
/// How long a waiter sleeps before it checks again whether the holder is alive.
pub const LIVENESS_POLL: Duration = Duration::from_millis(10);

/// Spins before a waiter's first sleep: about a microsecond or two, a page copy's time.
const SPINS: u32 = 128;

/// Spins while `held()` says the lock is held, at most [`SPINS`] times; whether it still is.
pub(crate) fn spin_while_held(held: impl Fn() -> bool) -> bool {
    for _ in 0..SPINS {
        if !held() {
            return false;
        }
        std::hint::spin_loop();
    }
    held()
}

/// How a lock was acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// From a holder that released it (or nobody).
    Clean,
    /// Taken over from this holder, which had died holding it: repair what it protects.
    OwnerDied(u32),
}

/// The lock word. `#[repr(transparent)]`, so it can be placed in a segment's region; all
/// zeros is a free lock.
#[repr(transparent)]
#[derive(Debug, Default)]
pub struct OwnerLock {
    word: AtomicU32,
}

impl OwnerLock {
    /// A free lock.
    pub const fn new() -> Self {
        OwnerLock { word: AtomicU32::new(0) }
    }

    /// Takes the lock for `me` if it is free.
    pub fn try_lock(&self, me: u32) -> bool {
        check_id(me);
        // Acquire: what the last holder did before unlocking is seen by us.
        self.word.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Takes the lock for `me`, waiting while a holder that `alive` says is alive has it, and
    /// taking it over from one that is not.
    pub fn lock(&self, me: u32, alive: impl Fn(u32) -> bool) -> Acquired {
        self.lock_unless(me, alive, |_| false).expect("never given up")
    }

    /// As [`Self::lock`], but gives up (None) once a wait is over and `give_up` says so of the
    /// holder (it is stopped, say: a reader need not wait for it).
    pub fn lock_unless(
        &self,
        me: u32,
        alive: impl Fn(u32) -> bool,
        give_up: impl Fn(u32) -> bool,
    ) -> Option<Acquired> {
        check_id(me);
        // After a sleep, acquire with the waiters bit: others may still sleep.
        let mut mark = 0;
        let mut spun = false;
        loop {
            // Relaxed: only a hint for the CAS below, which orders.
            let w = self.word.load(Ordering::Relaxed);
            if w == 0 {
                // Acquire: as in `try_lock`.
                match self.word.compare_exchange(0, me | mark, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return Some(Acquired::Clean),
                    Err(_) => continue,
                }
            }
            let holder = w & !WAITERS;
            if !spun {
                spun = true;
                // Relaxed: a hint; the CAS above orders.
                if !spin_while_held(|| self.word.load(Ordering::Relaxed) & !WAITERS != 0) {
                    continue;
                }
            }
            if holder != me && !alive(holder) {
                // Acquire: whatever the dead holder wrote before it died is seen by us.
                match self.word.compare_exchange(w, me | (w & WAITERS), Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => return Some(Acquired::OwnerDied(holder)),
                    Err(_) => continue,
                }
            }
            if mark != 0 && holder != me && give_up(holder) {
                return None;
            }
            // Relaxed: the bit carries no data; the futex re-checks the word atomically.
            if w & WAITERS == 0
                && self.word.compare_exchange(w, w | WAITERS, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            futex::wait(self.word.as_ptr(), w | WAITERS, LIVENESS_POLL);
            mark = WAITERS;
        }
    }

    /// Releases the lock, which `me` holds. False, and the lock left as it is, if `me` does
    /// not hold it: it was taken over from `me`, judged dead, and belongs to its taker now.
    pub fn unlock(&self, me: u32) -> bool {
        // Relaxed: a first guess for the CAS, which orders.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if w & !WAITERS != me {
                log::error!("OwnerLock: holder {me} unlocks a lock now held by {}", w & !WAITERS);
                return false;
            }
            // Release: what we did under the lock is seen by the next holder.
            match self.word.compare_exchange(w, 0, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        if w & WAITERS != 0 {
            futex::wake(self.word.as_ptr(), 1);
        }
        true
    }

    /// Whether the lock is held. Acquire: a caller that finds it free sees what its last
    /// holder did.
    pub fn held(&self) -> bool {
        self.word.load(Ordering::Acquire) & !WAITERS != 0
    }

    /// The holder's id, if the lock is held.
    pub fn holder(&self) -> Option<u32> {
        // Relaxed: a report; it may be stale as soon as it is read.
        match self.word.load(Ordering::Relaxed) & !WAITERS {
            0 => None,
            h => Some(h),
        }
    }
}

fn check_id(me: u32) {
    assert!((1..=MAX_HOLDER).contains(&me), "OwnerLock holder ids are 1 to {MAX_HOLDER}, not {me}");
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Guarded {
        lock: OwnerLock,
        count: UnsafeCell<u64>,
    }
    // SAFETY: `count` is only touched under `lock`.
    unsafe impl Sync for Guarded {}

    #[test]
    fn holders_exclude_each_other_and_unlock_wakes_sleepers() {
        let g = Arc::new(Guarded { lock: OwnerLock::new(), count: UnsafeCell::new(0) });
        let threads: Vec<_> = (1..=4u32)
            .map(|me| {
                let g = g.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        assert_eq!(g.lock.lock(me, |_| true), Acquired::Clean);
                        // SAFETY: we hold the lock.
                        unsafe { *g.count.get() += 1 };
                        assert!(g.lock.unlock(me));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: every thread has finished.
        assert_eq!(unsafe { *g.count.get() }, 80_000);
        assert_eq!(g.lock.holder(), None);
    }

    #[test]
    fn a_dead_holders_lock_is_taken_over_and_said_so() {
        let lock = OwnerLock::new();
        assert!(lock.try_lock(7));
        assert!(!lock.try_lock(8));
        assert_eq!(lock.holder(), Some(7));
        let dead = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| lock.lock(8, |h| h != 7 || !dead.load(Ordering::SeqCst)));
            // The waiter may be asleep or about to be; it finds the holder dead on its next look.
            dead.store(true, Ordering::SeqCst);
            assert_eq!(waiter.join().unwrap(), Acquired::OwnerDied(7));
        });
        assert_eq!(lock.holder(), Some(8));
        assert!(!lock.unlock(7), "the dead holder no longer holds it");
        assert!(lock.unlock(8));
        assert_eq!(lock.lock(9, |_| false), Acquired::Clean, "a free lock needs no take-over");
    }

    #[test]
    #[should_panic(expected = "holder ids are 1 to")]
    fn id_zero_is_refused() {
        OwnerLock::new().try_lock(0);
    }
}
