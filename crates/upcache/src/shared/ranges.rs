//! A file's range slots: F2FS's range lock (seed 001 §3.2) across processes. A writer of
//! pages within the file's length holds one slot naming its pages, so writers of disjoint
//! parts of one file, in any processes, write at once.
//!
//! A slot is claimed in one of two ways:
//! - **alone** ([`claim_alone`]), the common case, with no lock in common: CAS a free slot's
//!   lock, store its pages, SeqCst fence, then load the file's lock and the other slots. It
//!   keeps the slot only if the file's lock is free and no other held slot meets its pages.
//! - **under the file's lock** ([`claim_locked`]): the lock's holder, after the fence that
//!   follows its lock ([`after_locking`]), waits for the slots that meet its pages and claims
//!   a free one (its CAS first, then its pages, as above, so that a claimer alone that held
//!   the slot just before cannot leave its pages in it).
//!
//! Each pair is a Dekker handshake: one side stores (a slot's lock and pages, or the file's
//! lock), fences, then loads what the other stores. Of two claimers alone, or of a claimer
//! alone and a taker of the file's lock, at least one sees the other: the claimer backs off
//! (frees its slot before writing a byte; both may), or the taker waits for its slot. So two
//! held slots whose holders write never meet, and no holder of the file's lock changes pages
//! a slot that writes covers. A side that reads a slot mid-claim (held, its pages not yet
//! stored) is the one the handshake does not rely on.
//!
//! loom checks the exclusion (`loom_models` below): two claimers alone of one page, and a
//! claimer alone against a taker of the file's lock.

use crate::shm::OwnerLock;
use crate::sync::{fence, AtomicU64, Ordering};

/// Range slots per file: writers of disjoint parts of a file at once, in any processes.
pub(crate) const RANGES: usize = 4;

/// A writer's claim on pages `first..end` of a file, held through the write. Its holder is
/// named in `lock`, so a dead writer's slot is taken over.
#[repr(C)]
pub(crate) struct RangeSlot {
    pub lock: OwnerLock,
    pub _pad: u32,
    pub first: AtomicU64,
    pub end: AtomicU64,
}

impl RangeSlot {
    /// Whether the slot's pages, as last claimed, meet `first..end` (whether it is held is the
    /// caller's to ask, and how the pages are ordered: see the callers).
    pub fn covers(&self, first: u64, end: u64) -> bool {
        // Relaxed: see the callers.
        self.first.load(Ordering::Relaxed) < end && self.end.load(Ordering::Relaxed) > first
    }

    /// Takes the slot if it is free, and names pages `first..end` in it.
    fn take(&self, me: u32, first: u64, end: u64) -> bool {
        if self.lock.holder().is_some() || !self.lock.try_lock(me) {
            return false;
        }
        // Relaxed: after the CAS (Acquire), so after any earlier holder's pages; seen by
        // claimers and lock takers through the fences, by readers through the sequence's
        // Release (`FileEntry::begin_range_change`).
        self.first.store(first, Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
        true
    }
}

/// Claims a slot for pages `first..end` with no lock (module docs): the slot, if the file's
/// lock was free and no other held slot meets the pages. What its last holder did is seen
/// (the lock's Acquire load). None, nothing held, otherwise.
pub(crate) fn claim_alone<'a>(
    slots: &'a [RangeSlot],
    file_lock: &OwnerLock,
    me: u32,
    first: u64,
    end: u64,
) -> Option<&'a RangeSlot> {
    let slot = slots.iter().find(|s| s.take(me, first, end))?;
    // SeqCst: the handshake (module docs).
    fence(Ordering::SeqCst);
    // Acquire (`held`, both): a lock or slot found free, its last holder's work is seen.
    let alone = !file_lock.held()
        && !slots.iter().any(|s| !std::ptr::eq(s, slot) && s.lock.held() && s.covers(first, end));
    if alone {
        return Some(slot);
    }
    slot.lock.unlock(me);
    None
}

/// For the file lock's taker, right after it took the lock and before it looks at a slot:
/// claimers alone from now on see the lock held, or are seen in their slots.
pub(crate) fn after_locking() {
    // SeqCst: the handshake (module docs).
    fence(Ordering::SeqCst);
}

/// Claims a free slot for pages `first..end` under the file's lock (after [`after_locking`],
/// and having waited for the held slots that meet them); None if every slot is held.
pub(crate) fn claim_locked(slots: &[RangeSlot], me: u32, first: u64, end: u64) -> Option<&RangeSlot> {
    slots.iter().find(|s| s.take(me, first, end))
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::shm::futex::model as futex;
    use crate::sync::{Arc, AtomicU32};
    use loom::cell::UnsafeCell;
    use loom::thread;

    /// A file's lock, two slots and one page whose bytes only a holder of a slot that covers it,
    /// or of the lock, may touch (loom reports an access no claim orders).
    struct File {
        lock: OwnerLock,
        slots: [RangeSlot; 2],
        page: UnsafeCell<u32>,
        start: AtomicU32,
    }
    // SAFETY: `page` is touched only as the module's protocol allows (what loom checks).
    unsafe impl Sync for File {}

    fn file() -> Arc<File> {
        let slot = || RangeSlot {
            lock: OwnerLock::new(),
            _pad: 0,
            first: AtomicU64::new(0),
            end: AtomicU64::new(0),
        };
        Arc::new(File {
            lock: OwnerLock::new(),
            slots: [slot(), slot()],
            page: UnsafeCell::new(0),
            start: AtomicU32::new(0),
        })
    }

    impl File {
        /// A shared first write, so loom explores which thread goes first (tokio-rs/loom#392).
        /// Relaxed: it orders nothing.
        fn begin(&self) {
            self.start.fetch_add(1, Ordering::Relaxed);
        }

        /// A write of page 0 by `me` alone; whether it had a slot.
        fn write_alone(&self, me: u32) -> bool {
            let Some(slot) = claim_alone(&self.slots, &self.lock, me, 0, 1) else { return false };
            // SAFETY: our slot covers the page and no other writer's does.
            self.page.with_mut(|p| unsafe { *p += 1 });
            assert!(slot.lock.unlock(me));
            true
        }

        /// A write of page 0 under the file's lock by `me`: every slot that covers it waited
        /// for (as `FileLock::quiesce`).
        fn write_locked(&self, me: u32) {
            self.lock.lock(me, |_| true);
            after_locking();
            for s in &self.slots {
                if s.lock.held() && s.covers(0, 1) {
                    s.lock.lock(me, |_| true);
                    s.lock.unlock(me);
                }
            }
            // SAFETY: we hold the lock and no slot's writer covers the page.
            self.page.with_mut(|p| unsafe { *p += 1 });
            assert!(self.lock.unlock(me));
        }
    }

    /// Two writers alone of one page: never both in it at once (one may back off, or both).
    #[test]
    fn two_claimers_alone_of_one_page_never_write_it_at_once() {
        loom::model(|| {
            futex::start(false);
            let f = file();
            let other = {
                let f = f.clone();
                thread::spawn(move || {
                    f.begin();
                    f.write_alone(2)
                })
            };
            f.begin();
            let mine = f.write_alone(1);
            let theirs = other.join().unwrap();
            // SAFETY: both threads are done.
            assert_eq!(f.page.with(|p| unsafe { *p }), u32::from(mine) + u32::from(theirs));
            assert!(f.slots.iter().all(|s| s.lock.holder().is_none()));
        });
    }

    /// A writer alone against a writer under the file's lock: the second waits for the first's
    /// slot, or the first backs off.
    #[test]
    fn a_claimer_alone_and_the_file_locks_taker_never_write_at_once() {
        loom::model(|| {
            futex::start(false);
            let f = file();
            let alone = {
                let f = f.clone();
                thread::spawn(move || {
                    f.begin();
                    f.write_alone(1)
                })
            };
            f.begin();
            f.write_locked(2);
            let wrote = alone.join().unwrap();
            // SAFETY: both threads are done.
            assert_eq!(f.page.with(|p| unsafe { *p }), 1 + u32::from(wrote));
        });
    }
}
