//! The one wait loop of the locks that other processes share: a word whose low 32 bits name
//! the holder, so that the lock of a process killed while holding it is taken over instead of
//! blocking every other process for ever (the idea of Linux's robust futexes and PostgreSQL's
//! cleanup after a dead backend, with the holder's liveness decided by the caller's table of
//! attached processes). [`super::OwnerLock`] is a bare lock half; a shared frame's word
//! (`shared::frame::FrameMeta`) carries a version above it. Both implement [`LockWord`] and
//! lock with [`lock_unless`] and [`unlock`].
//!
//! # The lock half
//! 0 is free; otherwise bits 0-30 hold the holder's id (1 to [`MAX_HOLDER`]: a client's id
//! from [`super::Clients`], or a pid) and bit 31 says that someone may be sleeping on the word.
//! An id names a process, not a thread: a thread that finds its own id holding the lock waits,
//! as for any live holder, since another thread of its process holds it.
//!
//! # The loop
//! A waiter first spins briefly ([`spin_while_held`]): most holds are a page copy, shorter
//! than a futex wait and wake. Then it asks whether the holder is alive (the caller's `alive`
//! keeps that cheap) and takes a dead holder's lock over by CAS; otherwise it sets the waiters
//! bit and sleeps on the lock half's futex, shared between processes (not `FUTEX_PRIVATE`),
//! for at most [`LIVENESS_POLL`], and looks again. A caller may give up waiting for a holder
//! (`give_up`: it is stopped, say), but only once a sleep is over, so a holder that merely
//! copies a page is always waited for.
//!
//! # Invariants
//! - Only a CAS from a free lock half, or from a dead holder's word, makes a thread the
//!   holder, so two live holders never coexist; the CAS is from the whole word as loaded, so
//!   of two threads that both find the same holder dead, one takes over and the other fails.
//! - A sleeper sets the waiters bit before it sleeps and sleeps only while the lock half still
//!   has it; [`unlock`] clears the lock half by CAS and wakes if the bit was set, so no sleeper
//!   misses an unlock. A take-over keeps the bit; a thread that acquires after it slept sets
//!   it again, as other sleepers may remain.
//! - A take-over reports [`Acquired::OwnerDied`]: what the lock protects may be half-changed,
//!   and the new holder repairs it before it relies on it. The take-over's Acquire orders
//!   what holders released before the dead one took the lock; what the dead one wrote comes
//!   with the news of its death (the kernel's, which `alive` reads: a process the kernel
//!   reports dead has made all its stores), not through the word, which it never released.
//!
//! loom models: `owner_lock.rs` (exclusion, take-over, giving up) and `shared/frame.rs` (the
//! version as a seqlock), over the futex model in [`super::futex`].

use std::time::Duration;

use super::futex;
use crate::sync::Ordering;

/// Bit 31 of the lock half: someone may be sleeping on the word.
pub(crate) const WAITERS: u64 = 1 << 31;
/// The lock half of a word.
pub(crate) const LOCK_HALF: u64 = 0xffff_ffff;
/// The holder's id in a word.
pub(crate) const HOLDER: u64 = LOCK_HALF & !WAITERS;
/// The largest holder id.
pub const MAX_HOLDER: u32 = HOLDER as u32;
/// How long a waiter sleeps before it checks again whether the holder is alive.
pub const LIVENESS_POLL: Duration = Duration::from_millis(10);

/// Spins before a waiter's first sleep: about a microsecond or two, a page copy's time.
#[cfg(not(loom))]
const SPINS: u32 = 128;
/// One under loom: the path where the spin sees the unlock is explored, without a spin's
/// worth of interleavings.
#[cfg(loom)]
const SPINS: u32 = 1;

/// How a lock was acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// From a holder that released it (or nobody).
    Clean,
    /// Taken over from this holder, which had died holding it: repair what it protects.
    OwnerDied(u32),
}

/// A word whose low 32 bits are a lock half as above. Bits above it belong to the word's
/// type (a frame's version); the loop carries them through its CASes unchanged. Words are
/// passed widened to `u64`.
pub(crate) trait LockWord {
    /// The word. Relaxed: every use is a guess for a CAS, which orders.
    fn load(&self) -> u64;

    /// Replaces the word `from` by `to` (whose lock half names us): the CAS that makes us the
    /// holder. Acquire on success, so what the last holder did before its unlock is seen by
    /// us; a type adds what its lock-free readers need (a frame: a Release fence).
    fn cas_lock(&self, from: u64, to: u64) -> bool;

    /// Replaces the word `from` by `to` with `success` ordering (Relaxed on failure); the
    /// word as it is on failure.
    fn cas(&self, from: u64, to: u64, success: Ordering) -> Result<(), u64>;

    /// The lock half's address, for the futex (the low half is first in memory on
    /// little-endian targets).
    #[cfg(not(loom))]
    fn futex(&self) -> *const u32;
}

/// Spins while `held()` says the lock is held, at most [`SPINS`] times; whether it still is.
fn spin_while_held(held: impl Fn() -> bool) -> bool {
    for _ in 0..SPINS {
        if !held() {
            return false;
        }
        crate::sync::spin_loop();
    }
    held()
}

/// Takes the lock for `me`, waiting while a holder that `alive` says is alive has it (for
/// holders other than `me`: `me` is another thread of ours) and taking it over from one that
/// is not. Gives up (None) once a sleep is over and `give_up` says so of the holder.
pub(crate) fn lock_unless<W: LockWord + ?Sized>(
    word: &W,
    me: u32,
    alive: impl Fn(u32) -> bool,
    give_up: impl Fn(u32) -> bool,
) -> Option<Acquired> {
    // After a sleep, acquire with the waiters bit: others may still sleep.
    let mut mark = 0;
    let mut spun = false;
    loop {
        let w = word.load();
        let holder = (w & HOLDER) as u32;
        if holder == 0 {
            if word.cas_lock(w, w | me as u64 | mark) {
                return Some(Acquired::Clean);
            }
            continue;
        }
        if !spun {
            spun = true;
            if !spin_while_held(|| word.load() & HOLDER != 0) {
                continue;
            }
        }
        if holder != me && !alive(holder) {
            // From the whole word as loaded: of two takers of one dead holder's lock, one
            // fails. The waiters bit stays, for whoever sleeps on the dead holder's word.
            if word.cas_lock(w, (w & !HOLDER) | me as u64) {
                return Some(Acquired::OwnerDied(holder));
            }
            continue;
        }
        if mark != 0 && holder != me && give_up(holder) {
            return None;
        }
        // Relaxed: the bit carries no data; the futex re-checks the word atomically.
        if w & WAITERS == 0 && word.cas(w, w | WAITERS, Ordering::Relaxed).is_err() {
            continue;
        }
        sleep(word, (w | WAITERS) as u32);
        mark = WAITERS;
    }
}

/// Releases the lock `me` holds: the word becomes `next(word)`, whose lock half is 0, and
/// `wake` sleepers are woken if any may sleep. `Err(holder)`, and nothing done, if `me` does
/// not hold it: it was taken over from `me`, judged dead, and belongs to `holder` now.
pub(crate) fn unlock<W: LockWord + ?Sized>(
    word: &W,
    me: u32,
    next: impl Fn(u64) -> u64,
    wake: i32,
) -> Result<(), u32> {
    let mut w = word.load();
    loop {
        if (w & HOLDER) as u32 != me {
            return Err((w & HOLDER) as u32);
        }
        // Release: what we did under the lock is seen by the next holder.
        match word.cas(w, next(w), Ordering::Release) {
            Ok(()) => break,
            Err(now) => w = now,
        }
    }
    if w & WAITERS != 0 {
        #[cfg(not(loom))]
        futex::wake(word.futex(), wake);
        #[cfg(loom)]
        futex::model::wake(wake);
    }
    Ok(())
}

/// Sleeps while the lock half is `expected`, at most [`LIVENESS_POLL`]; may return early.
fn sleep<W: LockWord + ?Sized>(word: &W, expected: u32) {
    #[cfg(not(loom))]
    futex::wait(word.futex(), expected, LIVENESS_POLL);
    #[cfg(loom)]
    futex::model::wait(|| word.load() as u32 == expected);
}
