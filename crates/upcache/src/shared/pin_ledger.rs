//! Which frames each process holds pinned (ScalaCache's pin/unpin, seed 004 §5.1, for the
//! shared cache), and the handshake between a pin and whatever changes a frame.
//!
//! A frame has no pin count (`frame.rs`): after a kill, a count cannot say whose pins it
//! holds. So each client slot has a *ledger* in the segment: [`PIN_SLOTS`] words, each 0
//! (free) or the pinned frame + 1, with [`WAITER`] set while a changer sleeps for its
//! release; and a word set once its tenant has pinned. The ledgers are the truth about pins; a frame's
//! `PINNED` flag only says that some ledger may name it, so a change of a frame nobody pinned
//! costs one flag load. A dead process's ledger is cleared by its reaper
//! (`repair.rs`), and a changer clears a dead owner's entry it meets.
//!
//! # The handshake (store buffering, SeqCst on each side)
//! - A pin, with the frame's word `w` read unlocked (`FrameMeta::stable`) and the frame keyed
//!   to the page and `VALID`: its ledger slot names the frame, the frame is flagged `PINNED`,
//!   and the word is still `w` ([`confirm`]). If not, the slot is freed and the pin tries
//!   again. (A pin that holds the frame's lock needs no check: its unlock
//!   publishes the slot to the next holder.)
//! - A change of the bytes, the key or `VALID`, by the holder of the frame's lock: the flag
//!   after the lock ([`may_be_pinned`]), then, if `PINNED`, every ledger that was `used` is
//!   looked at, and the changer waits ([`wait_for`]) for each entry naming the frame (or,
//!   evicting, passes the frame over).
//!
//! Every access of the handshake is SeqCst, the lock's CAS too (`FrameMeta::cas_lock`), so
//! they fall in one total order: either the pin's re-read of the word comes after the lock
//! (and backs off), or the changer's loads come after the pin's stores and see them. On x86
//! that costs nothing over Acquire and Relaxed (a locked instruction, plain loads), where a
//! SeqCst fence is an `mfence` in every write of a cached page and every eviction. loom
//! models SeqCst accesses as AcqRel only (loom#180), so under loom a SeqCst fence on each
//! side stands in for them: the models check the fences' version of the handshake. A pin that loses to an unlock
//! that bumped the version backs off too, and one that raced a lock and unlock that changed
//! nothing stands, rightly: nothing changed.
//!
//! # Invariants
//! - `PINNED` is cleared only by a lock holder that found no entry naming the frame and will
//!   bump the version at its unlock: a pin that began before the clear fails its re-read.
//! - An entry is cleared with Release and waited out with Acquire, so the pinner's reads of
//!   the page happen before the changer's writes.
//! - A ledger's `used` is set before any of its slots names a frame.

use std::time::Duration;

use super::frame::{FrameMeta, PINNED};
use crate::shm::futex;
#[cfg(loom)]
use crate::sync::fence;
use crate::sync::{AtomicU32, Ordering};

/// Pages one process may hold pinned at once.
pub(crate) const PIN_SLOTS: usize = 64;
/// Bit 31 of a ledger slot: a changer may sleep on it.
pub(crate) const WAITER: u32 = 1 << 31;
/// How long a changer sleeps before it asks again whether the pinner is alive.
const LIVENESS_POLL: Duration = crate::shm::lock_word::LIVENESS_POLL;

/// One client's ledger.
#[derive(Clone, Copy)]
pub(crate) struct Ledger<'a> {
    /// Set at the tenant's first pin, cleared with its slots by its reaper: a changer looks at
    /// the ledgers of processes that ever pinned only (a count kept per pin cost two more
    /// locked instructions on every pin and unpin).
    pub used: &'a AtomicU32,
    pub slots: &'a [AtomicU32],
}

impl Ledger<'_> {
    /// Takes a free slot naming frame `f`; None if all [`PIN_SLOTS`] are taken.
    pub fn take(&self, f: u32) -> Option<usize> {
        debug_assert!(f + 1 < WAITER);
        // Relaxed: our own store, if any, is before.
        if self.used.load(Ordering::Relaxed) == 0 {
            // SeqCst: the handshake (before any slot names a frame).
            self.used.store(1, Ordering::SeqCst);
        }
        for (i, s) in self.slots.iter().enumerate() {
            // Relaxed (the load): a guess for the CAS. SeqCst (the CAS): the handshake.
            if s.load(Ordering::Relaxed) == 0
                && s.compare_exchange(0, f + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
            {
                return Some(i);
            }
        }
        None
    }

    /// Frees slot `i`: the pin's reads of its page are over; a changer sleeping on it wakes.
    pub fn free(&self, i: usize) {
        // Release: the pinner's reads of the page come before a changer's writes, which
        // follow its Acquire load of this slot.
        if self.slots[i].swap(0, Ordering::Release) & WAITER != 0 {
            wake(&self.slots[i]);
        }
    }

    /// Frees every slot: the ledger of a process that is dead (or of its slot's new tenant).
    pub fn clear(&self) {
        for i in 0..self.slots.len() {
            self.free(i);
        }
        // Release: after the slots.
        self.used.store(0, Ordering::Release);
    }

    /// Whether the ledger may name any frame.
    pub fn in_use(&self) -> bool {
        // SeqCst: the handshake's changer side.
        self.used.load(Ordering::SeqCst) != 0
    }

    /// The slots naming frame `f`.
    pub fn naming(&self, f: u32) -> impl Iterator<Item = &AtomicU32> + '_ {
        // SeqCst: the handshake's changer side; `wait_for` re-reads with Acquire.
        self.slots.iter().filter(move |s| s.load(Ordering::SeqCst) & !WAITER == f + 1)
    }
}

/// The pin's side of the handshake, once its slot names the frame whose word was `w`
/// (unlocked): true if the pin stands. The flag is set only if not seen set: only a changer
/// that will bump the version clears it, which fails the re-read.
pub(crate) fn confirm(m: &FrameMeta, w: u64) -> bool {
    // SeqCst (all): the handshake.
    if m.flags.load(Ordering::SeqCst) & PINNED == 0 {
        m.flags.fetch_or(PINNED, Ordering::SeqCst);
    }
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    m.word.load(Ordering::SeqCst) == w
}

/// The changer's side, with the frame's lock held (taken by a SeqCst CAS): whether any
/// ledger may name the frame.
pub(crate) fn may_be_pinned(m: &FrameMeta) -> bool {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    // SeqCst: the handshake.
    m.flags.load(Ordering::SeqCst) & PINNED != 0
}

/// Clears `PINNED`, which only a lock holder that found no entry naming the frame and will
/// bump its version may do.
pub(crate) fn clear_pinned(m: &FrameMeta) {
    // Relaxed: a pin racing this fails its re-read (the version changes at our unlock).
    m.flags.fetch_and(!PINNED, Ordering::Relaxed);
}

/// Waits until slot `s` no longer names frame `f`; an entry whose owner `alive` says is dead
/// is cleared. Returns at once if it does not name `f`.
pub(crate) fn wait_for(s: &AtomicU32, f: u32, alive: impl Fn() -> bool) {
    loop {
        // Acquire: pairs with the pinner's Release when it frees the slot.
        let v = s.load(Ordering::Acquire);
        if v & !WAITER != f + 1 {
            return;
        }
        if !alive() {
            // Relaxed: the dead make no more reads.
            let _ = s.compare_exchange(v, 0, Ordering::Relaxed, Ordering::Relaxed);
            continue;
        }
        // Relaxed: the bit carries no data; the futex re-checks the word.
        if v & WAITER == 0 && s.compare_exchange(v, v | WAITER, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            continue;
        }
        sleep(s, v | WAITER);
    }
}

fn sleep(s: &AtomicU32, expected: u32) {
    #[cfg(not(loom))]
    futex::wait(s.as_ptr(), expected, LIVENESS_POLL);
    #[cfg(loom)]
    {
        let _ = LIVENESS_POLL;
        futex::model::wait(|| s.load(Ordering::Relaxed) == expected);
    }
}

fn wake(s: &AtomicU32) {
    #[cfg(not(loom))]
    futex::wake(s.as_ptr(), i32::MAX);
    #[cfg(loom)]
    {
        let _ = s;
        futex::model::wake(i32::MAX);
    }
}

/// loom models of the handshake (`ci/loom.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::shm::futex::model as futex;
    use crate::sync::{Arc, AtomicU64};

    struct World {
        m: FrameMeta,
        page: [AtomicU64; 2],
        used: AtomicU32,
        slots: [AtomicU32; 1],
    }

    impl World {
        fn new() -> Arc<World> {
            Arc::new(World {
                m: FrameMeta::free(),
                page: [AtomicU64::new(0), AtomicU64::new(0)],
                used: AtomicU32::new(0),
                slots: [AtomicU32::new(0)],
            })
        }

        /// A writer of the page, as client 1: waits out its pins, then writes version 1.
        fn change(&self) {
            self.m.lock(1, |_| true);
            if may_be_pinned(&self.m) {
                for s in self.ledger().naming(0) {
                    wait_for(s, 0, || true);
                }
                clear_pinned(&self.m);
            }
            // Relaxed: under the lock, published by the unlock.
            self.page[0].store(1, Ordering::Relaxed);
            self.page[1].store(1, Ordering::Relaxed);
            assert!(self.m.unlock(1, true));
        }

        /// The page's two words. Relaxed: ordered by the pin (what the models check).
        fn read(&self) -> [u64; 2] {
            [self.page[0].load(Ordering::Relaxed), self.page[1].load(Ordering::Relaxed)]
        }

        fn ledger(&self) -> Ledger<'_> {
            Ledger { used: &self.used, slots: &self.slots }
        }
    }

    /// A pin that stands reads its version's page, both words, twice apart, while a writer
    /// changes the page under the frame's lock once it has waited out every pin (frame 0).
    /// Without either fence (loom's stand-ins for the SeqCst accesses), the pinned reader's
    /// second read can see the writer's words.
    #[test]
    fn a_standing_pin_keeps_its_page_from_a_writer() {
        loom::model(|| {
            futex::start(false);
            let w = World::new();
            let pinner = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    let l = w.ledger();
                    let v = w.m.stable()?;
                    let i = l.take(0).unwrap();
                    if !confirm(&w.m, v) {
                        l.free(i);
                        return None;
                    }
                    let first = w.read();
                    loom::thread::yield_now();
                    let second = w.read();
                    l.free(i);
                    Some((v >> 32, first, second))
                })
            };
            w.change();
            if let Some((version, first, second)) = pinner.join().unwrap() {
                assert_eq!(first, [version, version], "a pin's page is not its version's");
                assert_eq!(second, first, "a pinned page changed under its pin");
            }
        });
    }

    /// A pin taken under the frame's lock is waited for by the next holder.
    #[test]
    fn a_changer_waits_for_a_pin_taken_under_the_lock_and_its_release() {
        loom::model(|| {
            futex::start(false);
            let w = World::new();
            // The pinner takes the frame's lock, pins, unlocks, reads, and unpins.
            let pinner = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    let l = w.ledger();
                    w.m.lock(2, |_| true);
                    let i = l.take(0).unwrap();
                    // Relaxed: a hint, published by the unlock.
                    w.m.flags.fetch_or(PINNED, Ordering::Relaxed);
                    let v = w.m.word.load(Ordering::Relaxed) >> 32;
                    assert!(w.m.unlock(2, false));
                    let read = w.read();
                    l.free(i);
                    (v, read)
                })
            };
            w.change();
            let (version, read) = pinner.join().unwrap();
            assert_eq!(read, [version, version], "a pin taken under the lock saw a later change");
        });
    }
}
