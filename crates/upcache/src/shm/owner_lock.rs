//! A lock word for shared memory that names its holder: the bare lock half of
//! [`super::lock_word`], which has the layout, the wait loop and its invariants.

use super::lock_word::{self, Acquired, LockWord, MAX_HOLDER};
use crate::sync::{AtomicU32, Ordering};

/// The lock word. `#[repr(transparent)]`, so it can be placed in a segment's region; all
/// zeros is a free lock.
#[repr(transparent)]
#[derive(Debug, Default)]
pub struct OwnerLock {
    word: AtomicU32,
}

impl OwnerLock {
    /// A free lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        OwnerLock { word: AtomicU32::new(0) }
    }

    /// A free lock (not `const` under loom, whose atomics are not).
    #[cfg(loom)]
    pub fn new() -> Self {
        OwnerLock { word: AtomicU32::new(0) }
    }

    /// Takes the lock for `me` if it is free.
    pub fn try_lock(&self, me: u32) -> bool {
        check_id(me);
        self.cas_lock(0, me as u64)
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
        lock_word::lock_unless(self, me, alive, give_up)
    }

    /// Releases the lock, which `me` holds. False, and the lock left as it is, if `me` does
    /// not hold it: it was taken over from `me`, judged dead, and belongs to its taker now.
    pub fn unlock(&self, me: u32) -> bool {
        // Wakes one sleeper: one that acquires sets the waiters bit again for the others.
        match lock_word::unlock(self, me, |_| 0, 1) {
            Ok(()) => true,
            Err(now) => {
                log::error!("OwnerLock: holder {me} unlocks a lock now held by {now}");
                false
            }
        }
    }

    /// Whether the lock is held. Acquire: a caller that finds it free sees what its last
    /// holder did.
    pub fn held(&self) -> bool {
        self.word.load(Ordering::Acquire) & MAX_HOLDER != 0
    }

    /// Whether someone may sleep on the lock (its waiter bit), for tests that wait until a
    /// thread has reached its wait.
    pub fn contended(&self) -> bool {
        // Relaxed: a report, as `holder`.
        self.word.load(Ordering::Relaxed) & !MAX_HOLDER != 0
    }

    /// The holder's id, if the lock is held.
    pub fn holder(&self) -> Option<u32> {
        // Relaxed: a report; it may be stale as soon as it is read.
        match self.word.load(Ordering::Relaxed) & MAX_HOLDER {
            0 => None,
            h => Some(h),
        }
    }
}

/// The whole word is the lock half: words passed to and from the loop fit in 32 bits.
impl LockWord for OwnerLock {
    fn load(&self) -> u64 {
        // Relaxed: a guess for a CAS, which orders.
        self.word.load(Ordering::Relaxed) as u64
    }

    fn cas_lock(&self, from: u64, to: u64) -> bool {
        // Acquire: what the last holder did before unlocking is seen by us.
        self.word.compare_exchange(from as u32, to as u32, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn cas(&self, from: u64, to: u64, success: Ordering) -> Result<(), u64> {
        // Relaxed on failure: the caller only retries from the value returned.
        match self.word.compare_exchange(from as u32, to as u32, success, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(now) => Err(now as u64),
        }
    }

    #[cfg(not(loom))]
    fn futex(&self) -> *const u32 {
        self.word.as_ptr()
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

/// loom models of the wait loop through [`OwnerLock`] (`ci/loom.sh`). A sleep lasts until a
/// wake (`futex::model`), so a lost wake-up deadlocks a model; the model with a stopped holder
/// has sleeps time out at once instead.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::shm::futex::model as futex;
    use crate::sync::{Arc, AtomicBool, AtomicU32};
    use loom::cell::UnsafeCell;
    use loom::thread;

    struct Guarded {
        lock: OwnerLock,
        data: UnsafeCell<u32>,
        start: AtomicU32,
    }
    // SAFETY: `data` is only touched under `lock` (loom checks that it is, by causality).
    unsafe impl Sync for Guarded {}

    fn guarded() -> Arc<Guarded> {
        Arc::new(Guarded { lock: OwnerLock::new(), data: UnsafeCell::new(0), start: AtomicU32::new(0) })
    }

    impl Guarded {
        /// Every thread of a model does this first: a write that they all share, so that loom
        /// explores which of them goes first. (loom 0.7 never runs a thread whose first access
        /// is a load ahead of the others: tokio-rs/loom#392.) Relaxed: it orders nothing.
        fn begin(&self) {
            self.start.fetch_add(1, Ordering::Relaxed);
        }

        /// One locked increment by `me`; how it was acquired.
        fn increment(&self, me: u32, alive: impl Fn(u32) -> bool) -> Acquired {
            let a = self.lock.lock(me, alive);
            // SAFETY: we hold the lock; loom reports an access that the unlock before our lock
            // does not order.
            self.data.with_mut(|d| unsafe { *d += 1 });
            assert!(self.lock.unlock(me));
            a
        }
    }

    /// Threads 1 and 2, each making one locked increment (`Guarded::increment`) with `alive`.
    fn incrementers(g: &Arc<Guarded>, alive: fn(u32) -> bool) -> Vec<thread::JoinHandle<Acquired>> {
        (1..=2)
            .map(|me| {
                let g = g.clone();
                thread::spawn(move || {
                    g.begin();
                    g.increment(me, alive)
                })
            })
            .collect()
    }

    /// Three holders: each increment is seen by the next holder (Acquire lock, Release
    /// unlock) and none is lost; a sleeper missing its wake-up would deadlock the model (two
    /// may sleep at once, and an unlock wakes one).
    #[test]
    fn holders_exclude_each_other_and_no_sleeper_misses_an_unlock() {
        loom::model(|| {
            futex::start(false);
            let g = guarded();
            let others = incrementers(&g, |_| true);
            g.begin();
            let mut acquired = vec![g.increment(3, |_| true)];
            acquired.extend(others.into_iter().map(|t| t.join().unwrap()));
            assert!(acquired.iter().all(|&a| a == Acquired::Clean));
            // SAFETY: every thread has finished.
            assert_eq!(g.data.with(|d| unsafe { *d }), 3);
            assert_eq!(g.lock.holder(), None);
        });
    }

    const DEAD: u32 = 9;

    /// A holder dies holding the lock while two live threads want it. Exactly one takes it
    /// over (and repairs), the other then acquires it clean and sees the repair; one that
    /// slept on the holder's word before the death is woken by the taker's unlock (the
    /// take-over keeps the waiters bit), since no unlock of the dead holder will come.
    #[test]
    fn one_of_two_takes_over_a_dead_holders_lock() {
        loom::model(|| {
            futex::start(false);
            let g = guarded();
            let died = Arc::new(AtomicBool::new(false));
            assert!(g.lock.try_lock(DEAD));
            let take = |g: &Guarded, died: &AtomicBool, me: u32| {
                // Acquire: the news of a death comes with what the dead holder did.
                let a = g.lock.lock(me, |h| h != DEAD || !died.load(Ordering::Acquire));
                g.data.with_mut(|d| {
                    // SAFETY: we hold the lock; loom reports an access it does not order.
                    let d = unsafe { &mut *d };
                    match a {
                        Acquired::OwnerDied(DEAD) => *d = 1,
                        Acquired::Clean => assert_eq!(*d, 1, "the repair is not seen"),
                        Acquired::OwnerDied(h) => panic!("taken over from {h}"),
                    }
                });
                assert!(g.lock.unlock(me));
                a
            };
            let other = {
                let (g, died) = (g.clone(), died.clone());
                thread::spawn(move || {
                    g.begin();
                    take(&g, &died, 2)
                })
            };
            g.begin();
            // Release: see `take`.
            died.store(true, Ordering::Release);
            let mut got = [take(&g, &died, 1), other.join().unwrap()];
            got.sort_by_key(|a| *a != Acquired::Clean);
            assert_eq!(got, [Acquired::Clean, Acquired::OwnerDied(DEAD)]);
        });
    }

    /// What the take-over's Acquire orders: the writes of holders that unlocked before the
    /// dead one took the lock. (The dead one never releases: its own writes come with the
    /// news of its death. Here it is dead from the moment it holds the lock, the earliest a
    /// death can be seen, and the news is a constant that orders nothing, so that only the
    /// word does.)
    #[test]
    fn a_take_over_sees_what_was_released_before_the_dead_holder_took_the_lock() {
        loom::model(|| {
            futex::start(false);
            let g = guarded();
            let others = incrementers(&g, |h| h != DEAD);
            g.begin();
            // The dead holder: takes the lock and dies with it. Whoever still sleeps, which no
            // unlock will wake now, looks again at its poll.
            g.lock.lock(DEAD, |_| true);
            futex::time_out();
            let got: Vec<_> = others.into_iter().map(|t| t.join().unwrap()).collect();
            let taken = got.iter().filter(|&&a| a == Acquired::OwnerDied(DEAD)).count();
            assert!(taken <= 1, "{got:?}");
            let held = g.lock.holder();
            assert_eq!(held == Some(DEAD), taken == 0, "the lock is the dead holder's until taken over");
        });
    }

    const STOPPED: u32 = 5;

    /// A stopped holder, which may resume and unlock: a waiter that gives up on it does so
    /// only after a sleep, and is only asked about a holder it found. Sleeps time out at once
    /// (the holder may never unlock).
    #[test]
    fn a_stopped_holder_is_given_up_on_only_after_a_sleep() {
        loom::model(|| {
            futex::start(true);
            let g = guarded();
            assert!(g.lock.try_lock(STOPPED));
            let resumed = {
                let g = g.clone();
                thread::spawn(move || {
                    g.begin();
                    assert!(g.lock.unlock(STOPPED));
                })
            };
            g.begin();
            let give_up = |h| {
                assert_eq!(h, STOPPED, "asked about a holder that is not there");
                true
            };
            match g.lock.lock_unless(1, |_| true, give_up) {
                None => assert!(futex::waits() >= 1, "gave up before a sleep"),
                Some(a) => {
                    assert_eq!(a, Acquired::Clean);
                    assert!(g.lock.unlock(1));
                }
            }
            resumed.join().unwrap();
            // A free lock is taken, whatever `give_up` says.
            assert_eq!(g.lock.lock_unless(2, |_| true, |_| true), Some(Acquired::Clean));
        });
    }
}
