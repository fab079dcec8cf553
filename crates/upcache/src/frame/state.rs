//! The per-frame atomic state word.
//!
//! Every frame has one `AtomicU64` that says who may touch it and how. All transitions are
//! single CAS or fetch-and-op steps on this word, so a hit never takes a lock.
//!
//! # Bit layout
//!
//! ```text
//!  63   56 55          32 31   30    29      28      27   26    25    24   23            0
//! +-------+--------------+--+-------+-------+-------+----+-----+-----+----+--------------+
//! |  (0)  | reader count |0 |WRITING|WAITERS|UNOWNED| REF|DIRTY|VALID|LOCK|  pin count   |
//! +-------+--------------+--+-------+-------+-------+----+-----+-----+----+--------------+
//! ```
//!
//! - `pin count` (24 bits): threads currently using the frame's page. A pinned frame is never
//!   evicted or re-assigned.
//! - `LOCKED`: one thread has exclusive access to the frame's bytes for a load, a copy-in by a
//!   writer, or a write-back. Copying readers do not take it: they only need `VALID`, and the
//!   file's range lock keeps them apart from overlapping writers.
//! - `reader count` (24 bits): borrowed pages (`PageRef`) reading the bytes in place, each
//!   also counted as a pin. They hold no range lock, so whoever changes a valid frame's bytes
//!   waits for this count to reach 0 first ([`FrameState::try_lock_content`]).
//! - `WRITING`: a thread changing the bytes holds, or is waiting for, `LOCKED` and no readers;
//!   new readers wait until it is cleared. It stops a stream of readers from starving the
//!   writer. Write-back, which only reads the bytes, neither takes it nor waits for readers.
//! - `VALID`: the frame holds the page's data. A loader clears it until the load completes.
//! - `DIRTY`: the frame differs from the device. Set by writers under `LOCKED`, cleared by a
//!   successful write-back under `LOCKED`.
//! - `REFERENCED`: set on every pin; CLOCK clears it as its hand passes.
//! - `UNOWNED`: the frame belongs to no page (free, or being evicted). Pins fail on it, and the
//!   thread that set it owns the frame outright until it publishes a new state.
//! - `WAITERS`: some thread sleeps in the [`super::wait::WaitTable`] for this frame; whoever
//!   clears `LOCKED` or `WRITING`, or drops the last reader, must wake it.
//!
//! # Invariants
//! - A frame with `UNOWNED` has pin count 0, and only its owner writes its key and bytes.
//! - Readers never exceed pins, and a frame gains a reader only while `VALID`, not `UNOWNED`
//!   and not `WRITING`; its bytes change only under `LOCKED` and `WRITING` with no reader
//!   (or past the end of file, outside every reader's view: `try_lock`).
//! - `WRITING` is set and cleared only by the thread changing the bytes, which holds a pin;
//!   other unlocks (write-back) leave it.
//! - Eviction is a CAS from "pin 0, not LOCKED, not DIRTY, not REFERENCED" to `UNOWNED`, so it
//!   can never take a pinned, in-flight or dirty frame.
//! - The key (file, page) of an owned frame changes only while it is `UNOWNED`; a thread that
//!   pins a frame found in an index re-reads the key after the pin to catch a frame that was
//!   re-assigned in between ("has the page moved?").
//! - A frame goes back to `UNOWNED` only by a CAS from "pin 1 (the caller's), not `LOCKED`"
//!   (`FrameState::try_release`), never by a plain store, so a transient pin taken by a stale
//!   lookup is never lost: that lookup sees a foreign key, or "not `VALID`, not `LOCKED`", and
//!   unpins at once.
//!
//! The word's size and the bits' disjointness are asserted at compile time, the transitions
//! are unit-tested, and loom models (`tests/loom.rs`, `ci/loom.sh`) check pin against
//! eviction, unlock against a waiter, release against a stale pin, write-back against
//! copy-in, and borrowed readers against content writers (with a write-back in between).

use crate::sync::{AtomicU64, Ordering};

/// Mask of the pin count.
pub const PIN_MASK: u64 = (1 << 24) - 1;
/// Exclusive access to the frame's bytes (load, copy-in, write-back).
pub const LOCKED: u64 = 1 << 24;
/// The frame holds its page's data.
pub const VALID: u64 = 1 << 25;
/// The frame differs from the device.
pub const DIRTY: u64 = 1 << 26;
/// Recently used (CLOCK's reference bit).
pub const REFERENCED: u64 = 1 << 27;
/// Bound to no page; pins fail.
pub const UNOWNED: u64 = 1 << 28;
/// A thread waits on this frame in the wait table.
pub const WAITERS: u64 = 1 << 29;
/// A thread changes, or waits to change, the bytes: no new readers.
pub const WRITING: u64 = 1 << 30;
/// One reader (`PageRef`), in the reader count.
pub const READER: u64 = 1 << 32;
/// Mask of the reader count.
pub const READER_MASK: u64 = PIN_MASK << 32;

const _: () = assert!(std::mem::size_of::<FrameState>() == 8);
// Every flag is in the low half, the futex word of shared waits (`wait.rs`).
const _: () = assert!(WRITING < (1 << 32));
const _: () = assert!(PIN_MASK & (LOCKED | VALID | DIRTY | REFERENCED | UNOWNED | WAITERS | WRITING) == 0);

/// Why a pin failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinError {
    /// The frame is free or being evicted: look the page up again.
    Unowned,
    /// 2^24 - 1 pins are already held.
    Overflow,
}

/// The packed state word of one frame.
#[derive(Debug)]
#[repr(transparent)]
pub struct FrameState(AtomicU64);

impl FrameState {
    /// A free frame.
    pub fn new_unowned() -> Self {
        FrameState(AtomicU64::new(UNOWNED))
    }

    /// The current word. Acquire: a caller that sees `VALID` must also see the bytes the
    /// loader wrote before its Release store.
    pub fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Pins the frame and sets its reference bit, unless it is unowned.
    ///
    /// Acquire on success pairs with the Release that published the frame's key and bytes.
    pub fn try_pin(&self) -> Result<u64, PinError> {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if cur & UNOWNED != 0 {
                return Err(PinError::Unowned);
            }
            if cur & PIN_MASK == PIN_MASK {
                return Err(PinError::Overflow);
            }
            let new = (cur + 1) | REFERENCED;
            match self.0.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(new),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Drops one pin. Release: our reads of the bytes happen before an evictor's claim.
    pub fn unpin(&self) {
        let old = self.0.fetch_sub(1, Ordering::Release);
        debug_assert!(old & PIN_MASK != 0, "unpin of an unpinned frame");
    }

    /// Pins the frame as a reader of its bytes in place, in one step, if it is valid, owned
    /// and nobody changes or waits to change its bytes (`WRITING`). Returns the word before
    /// the failed attempt otherwise (the caller waits or looks again).
    ///
    /// Acquire on success: we see the bytes of the last writer, whose unlock was a Release.
    pub fn try_pin_reader(&self) -> Result<u64, u64> {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if !takes_reader(cur) || cur & PIN_MASK == PIN_MASK {
                return Err(cur);
            }
            let new = (cur + 1 + READER) | REFERENCED;
            match self.0.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(new),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Turns one pin the caller holds into a reader, once the frame is valid and not
    /// `WRITING`; Err(word) otherwise. Acquire as in [`Self::try_pin_reader`].
    pub fn try_add_reader(&self) -> Result<u64, u64> {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            debug_assert!(cur & PIN_MASK > (cur & READER_MASK) >> 32, "a reader needs its own pin");
            if !takes_reader(cur) {
                return Err(cur);
            }
            match self.0.compare_exchange_weak(cur, cur + READER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(cur + READER),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Drops a reader and its pin. Returns the previous word if the caller must wake the
    /// frame's waiters: it was the last reader and someone waits (a writer, for the count to
    /// reach 0). `WAITERS` is cleared first, so a sleeper on the low half's futex sees the
    /// word change and cannot miss the wake-up; other waiters wake too, re-check and set it
    /// again.
    ///
    /// Release: our reads of the bytes happen before the writer that sees the count fall.
    pub fn unpin_reader(&self) -> Option<u64> {
        let old = self.0.fetch_sub(1 + READER, Ordering::Release);
        debug_assert!(old & READER_MASK != 0 && old & PIN_MASK != 0, "unpin of a frame with no reader");
        if old & READER_MASK == READER && old & WAITERS != 0 {
            // Relaxed: the wake-up that follows goes through the wait table's own ordering
            // (bucket mutex or futex), and the waiter re-reads the word after setting WAITERS.
            Some(self.0.fetch_and(!WAITERS, Ordering::Relaxed))
        } else {
            None
        }
    }

    /// One step towards changing the frame's bytes, for a thread that holds a pin (and the
    /// page's range exclusive, so no other thread wants to change them): takes `LOCKED` and
    /// `WRITING` together if there is no reader and no holder of `LOCKED`; else sets `WRITING`
    /// so no new reader comes, and returns the word for the caller to wait on (for the
    /// readers to go and `LOCKED` to be released, then it calls again). `WRITING` already set
    /// by the caller is kept.
    ///
    /// Acquire pairs with the Release of the last unlock and of each reader's unpin, so the
    /// bytes they wrote or read come before ours.
    pub fn try_lock_content(&self) -> Result<(), u64> {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            debug_assert!(cur & UNOWNED == 0 && cur & PIN_MASK != 0, "content lock of an unpinned frame");
            let free = cur & (LOCKED | READER_MASK) == 0;
            let new = if free { cur | LOCKED | WRITING } else { cur | WRITING };
            if new == cur {
                return Err(cur);
            }
            match self.0.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) if free => return Ok(()),
                Ok(_) => return Err(new),
                Err(actual) => cur = actual,
            }
        }
    }

    /// A writer's hit in one step: pins the frame and takes `LOCKED` and `WRITING`, if it is
    /// owned, valid, unlocked and has no reader or waiting writer. False otherwise, with
    /// nothing changed (the caller pins and locks in turn, waiting as needed). Acquire as in
    /// [`Self::try_lock_content`].
    pub fn try_pin_lock_content(&self) -> bool {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if cur & (UNOWNED | LOCKED | WRITING | READER_MASK) != 0
                || cur & VALID == 0
                || cur & PIN_MASK == PIN_MASK
            {
                return false;
            }
            let new = (cur + 1) | REFERENCED | LOCKED | WRITING;
            match self.0.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes `LOCKED` if it is free and the frame is owned, whatever the readers: for a load
    /// (no readers: not `VALID`) or a change of bytes past the end of file, which no reader
    /// sees. Acquire pairs with the Release of the previous unlock, so we see the bytes its
    /// holder wrote.
    pub fn try_lock(&self) -> bool {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if cur & (LOCKED | UNOWNED) != 0 {
                return false;
            }
            match self.0.compare_exchange_weak(cur, cur | LOCKED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes `LOCKED` only if the frame is dirty, owned and unlocked (write-back's probe).
    pub fn try_lock_dirty(&self) -> bool {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if cur & (LOCKED | UNOWNED) != 0 || cur & DIRTY == 0 {
                return false;
            }
            match self.0.compare_exchange_weak(cur, cur | LOCKED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Releases `LOCKED`, setting `set` and clearing `clear` in the same step (`WRITING`
    /// only if `clear` has it: a write-back's unlock leaves a waiting writer's). Returns the
    /// previous word; the caller must wake waiters if it had `WAITERS`.
    /// Release: the bytes we wrote are visible to whoever next sees the word.
    pub fn unlock(&self, set: u64, clear: u64) -> u64 {
        self.unlock_dropping(set, clear, 0)
    }

    /// [`Self::unlock`] and [`Self::unpin`] in one step: a writer's hit ends with one atomic
    /// operation instead of two. Returns the previous word, as `unlock` does.
    /// Release, as both are.
    pub fn unlock_unpin(&self, set: u64, clear: u64) -> u64 {
        self.unlock_dropping(set, clear, 1)
    }

    /// [`Self::unlock`], dropping `pins` of the caller's pins (0 or 1) in the same CAS.
    #[inline]
    fn unlock_dropping(&self, set: u64, clear: u64, pins: u64) -> u64 {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            debug_assert!(cur & LOCKED != 0, "unlock of an unlocked frame");
            debug_assert!(cur & PIN_MASK >= pins, "unlock drops a pin the frame does not have");
            let new = ((cur | set) & !(clear | LOCKED | WAITERS)) - pins;
            match self.0.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return cur,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Claims an unpinned, unlocked frame for eviction by setting `UNOWNED`.
    /// With `allow_dirty` false a dirty frame is refused. A referenced frame is refused and
    /// its reference bit cleared (CLOCK's second chance). Acquire: we see every byte written
    /// by the last holder before its unpin/unlock.
    pub fn try_claim(&self) -> ClaimResult {
        let mut cur = self.0.load(Ordering::Relaxed); // Relaxed: only a guess for the CAS.
        loop {
            if cur & UNOWNED != 0 {
                return ClaimResult::Busy;
            }
            if cur & (PIN_MASK | LOCKED) != 0 {
                return ClaimResult::Busy;
            }
            if cur & REFERENCED != 0 {
                // Relaxed: the reference bit is a hint; losing a race with a pin that sets it
                // again only gives the page one more round.
                self.0.fetch_and(!REFERENCED, Ordering::Relaxed);
                return ClaimResult::Referenced;
            }
            if cur & DIRTY != 0 {
                return ClaimResult::Dirty;
            }
            match self.0.compare_exchange_weak(cur, UNOWNED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return ClaimResult::Claimed,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Hands an unowned frame to a page: pinned once by the caller, `LOCKED`, not yet valid.
    /// Release publishes the key the owner wrote while the frame was unowned.
    pub fn assign_locked(&self) {
        debug_assert!(self.0.load(Ordering::Relaxed) & UNOWNED != 0);
        self.0.store(1 | LOCKED | REFERENCED, Ordering::Release);
    }

    /// Gives back a frame whose only pin is the caller's and that nobody holds `LOCKED`:
    /// CAS from `expected` (such a word) to `UNOWNED`. Fails if the word changed, for example
    /// because a stale lookup pinned it for a moment.
    pub fn try_release(&self, expected: u64) -> bool {
        debug_assert!(pins(expected) == 1 && expected & (LOCKED | UNOWNED) == 0);
        // AcqRel: Acquire sees the bytes last written under the word; Release orders our own
        // use of the frame before whoever owns it next.
        self.0.compare_exchange(expected, UNOWNED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Clears the reference bit so CLOCK takes a detached frame on its next pass.
    pub fn clear_referenced(&self) {
        // Relaxed: a hint for the policy; no data is published through it.
        self.0.fetch_and(!REFERENCED, Ordering::Relaxed);
    }

    /// Sets `WAITERS` before a thread sleeps; returns the word after the change.
    pub fn mark_waiter(&self) -> u64 {
        // AcqRel: ordered against the unlocker's Release CAS on the same word, so either the
        // unlocker sees WAITERS or we see its unlock.
        self.0.fetch_or(WAITERS, Ordering::AcqRel) | WAITERS
    }
}

/// Outcome of [`FrameState::try_claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimResult {
    /// The frame is now unowned and belongs to the caller.
    Claimed,
    /// Pinned, locked or already unowned.
    Busy,
    /// Had its reference bit, which is now cleared.
    Referenced,
    /// Otherwise claimable, but dirty: it must be written back first.
    Dirty,
}

/// Whether a frame in state `word` may gain a reader: owned, valid, nobody changing its bytes
/// (`WRITING`), and the reader count not full.
fn takes_reader(word: u64) -> bool {
    word & (UNOWNED | WRITING) == 0 && word & VALID != 0 && word & READER_MASK != READER_MASK
}

/// Pin count of a state word.
pub fn pins(word: u64) -> u64 {
    word & PIN_MASK
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_do_not_overlap_and_fit_in_u32() {
        let flags = [LOCKED, VALID, DIRTY, REFERENCED, UNOWNED, WAITERS];
        for (i, a) in flags.iter().enumerate() {
            assert_eq!(a.count_ones(), 1);
            assert_eq!(a & PIN_MASK, 0);
            for b in &flags[i + 1..] {
                assert_eq!(a & b, 0);
            }
        }
    }

    #[test]
    fn pin_fails_on_unowned_and_sets_referenced() {
        let s = FrameState::new_unowned();
        assert_eq!(s.try_pin(), Err(PinError::Unowned));
        s.assign_locked();
        let w = s.try_pin().unwrap();
        assert_eq!(pins(w), 2);
        assert!(w & REFERENCED != 0);
    }

    #[test]
    fn pinned_locked_dirty_or_referenced_frames_are_not_claimed() {
        let s = FrameState::new_unowned();
        s.assign_locked();
        assert_eq!(s.try_claim(), ClaimResult::Busy, "locked and pinned");
        s.unlock(VALID, 0);
        assert_eq!(s.try_claim(), ClaimResult::Busy, "pinned");
        s.unpin();
        assert_eq!(s.try_claim(), ClaimResult::Referenced);
        assert!(s.try_lock());
        s.unlock(DIRTY, 0);
        assert_eq!(s.try_claim(), ClaimResult::Dirty);
        assert!(s.try_lock_dirty());
        s.unlock(0, DIRTY);
        assert_eq!(s.try_claim(), ClaimResult::Claimed);
        assert_eq!(s.load(), UNOWNED);
        assert!(!s.try_lock());
    }

    #[test]
    fn unlock_clears_waiters_and_reports_them() {
        let s = FrameState::new_unowned();
        s.assign_locked();
        s.mark_waiter();
        let old = s.unlock(VALID, 0);
        assert!(old & WAITERS != 0);
        let now = s.load();
        assert_eq!(now & (WAITERS | LOCKED), 0);
        assert!(now & VALID != 0);
    }

    fn valid_unpinned() -> FrameState {
        let s = FrameState::new_unowned();
        s.assign_locked();
        s.unlock(VALID, 0);
        s.unpin();
        s
    }

    #[test]
    fn a_reader_needs_a_valid_frame_and_no_writing_and_counts_as_a_pin() {
        let s = FrameState::new_unowned();
        assert!(s.try_pin_reader().is_err(), "unowned");
        s.assign_locked();
        assert!(s.try_pin_reader().is_err(), "loading: not VALID");
        assert!(s.try_add_reader().is_err(), "loading: not VALID");
        s.unlock(VALID, 0);
        let w = s.try_pin_reader().unwrap();
        assert_eq!((pins(w), (w & READER_MASK) >> 32), (2, 1));
        assert_eq!(s.try_add_reader().map(|w| (w & READER_MASK) >> 32), Ok(2), "the loader's pin");
        assert_eq!(s.try_claim(), ClaimResult::Busy, "a reader is a pin");
        assert_eq!(s.unpin_reader(), None, "no waiters");
        assert_eq!(s.unpin_reader(), None);
        assert_eq!(s.load() & (READER_MASK | PIN_MASK), 0);
    }

    #[test]
    fn a_content_lock_waits_for_readers_and_keeps_new_ones_out() {
        let s = valid_unpinned();
        s.try_pin_reader().unwrap();
        s.try_pin().unwrap(); // the writer's pin
        let w = s.try_lock_content().unwrap_err();
        assert_eq!(w & (WRITING | LOCKED), WRITING, "WRITING set, LOCKED not taken");
        assert!(s.try_pin_reader().is_err(), "no new reader while a writer waits");
        assert!(!s.try_pin_lock_content(), "nor a second writer's one-step lock");
        // A write-back may still lock and unlock meanwhile, and leaves WRITING alone.
        assert!(s.try_lock());
        s.unlock(0, DIRTY);
        assert!(s.load() & WRITING != 0);
        assert!(s.try_lock_content().is_err(), "the reader is still there");
        s.mark_waiter();
        let old = s.unpin_reader().expect("the last reader wakes the waiting writer");
        assert!(old & WAITERS != 0);
        assert_eq!(s.load() & WAITERS, 0, "cleared, so a futex sleeper sees the word change");
        s.try_lock_content().unwrap();
        assert_eq!(s.load() & (WRITING | LOCKED), WRITING | LOCKED);
        assert!(!s.try_lock(), "exclusive");
        s.unlock(DIRTY, WRITING);
        assert_eq!(s.load() & (WRITING | LOCKED), 0);
        s.unpin();
        assert!(s.try_pin_lock_content(), "owned, valid, unlocked, no reader");
        assert_eq!((pins(s.load()), s.load() & (WRITING | LOCKED)), (1, WRITING | LOCKED));
        s.unlock(0, WRITING);
        s.try_pin_reader().unwrap();
        assert!(!s.try_pin_lock_content(), "a reader");
    }

    #[test]
    fn unlock_unpin_is_an_unlock_and_an_unpin_in_one_step() {
        let s = valid_unpinned();
        s.try_pin().unwrap(); // another thread's pin, kept throughout
        assert!(s.try_pin_lock_content());
        s.mark_waiter();
        let old = s.unlock_unpin(DIRTY, 0);
        assert_eq!(old & (WAITERS | LOCKED | WRITING), WAITERS | LOCKED | WRITING, "reports the waiters");
        let now = s.load();
        assert_eq!(now & (WAITERS | LOCKED), 0);
        assert_eq!(now & WRITING, WRITING, "cleared only when asked, as unlock does");
        assert_eq!(now & (VALID | DIRTY), VALID | DIRTY);
        assert_eq!(pins(now), 1, "only the writer's own pin is gone");
        s.unpin();
        assert_eq!(s.try_claim(), ClaimResult::Referenced, "unpinned and unlocked: claimable");
    }

    #[test]
    fn try_lock_dirty_needs_dirty() {
        let s = FrameState::new_unowned();
        s.assign_locked();
        s.unlock(VALID, 0);
        assert!(!s.try_lock_dirty());
        assert!(s.try_lock());
        assert!(!s.try_lock(), "second lock must fail");
        s.unlock(DIRTY, 0);
        assert!(s.try_lock_dirty());
    }
}
