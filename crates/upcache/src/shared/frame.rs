//! A frame of the shared cache: one page of bytes and its [`FrameMeta`], in shared memory.
//!
//! # The word
//! `word` holds a version in its high 32 bits and a lock in its low 32 bits, as an
//! [`OwnerLock`](crate::shm::OwnerLock): 0 is free, otherwise the holder's client id with bit 31
//! set while someone may sleep on it (on the low half's futex, shared between processes),
//! taken and released by the same loop (`shm/lock_word.rs`), with the version carried along.
//! The version grows at every unlock that changed the frame's bytes or its page, so a reader
//! copies without a lock or a pin (vmcache's optimistic read): load the word (unlocked), check
//! the key and `VALID`, copy, Acquire fence, load the word again; the copy stands if the word
//! is unchanged. A frame has no pin count: the copy API needs none, and a count cannot say
//! which process holds it when one is killed, while a lock word names its holder; pins are
//! in each process's ledger (`pin_ledger.rs`), and `PINNED` says a ledger may name the frame.
//!
//! # Invariants
//! - The key, the bytes and `VALID` change only under the lock, and every such change is
//!   followed by an unlock that bumps the version; `DIRTY` changes only under the lock.
//! - A lock whose holder died is taken over by CAS from the dead holder's word, and the
//!   taker repairs the frame (`super::repair`) before anything else trusts it.
//! - `home` is the key under which the frame is in a hash chain (`super::index`), 0 if in
//!   none; it changes only under the chain's partition lock and the frame's lock, so it is
//!   the one word that says where the frame is linked. A frame found by a lookup counts only
//!   if its `home` is the key looked for: a frame that left the index (a claim killed half-way
//!   leaves one with its old key and bytes) is never used.

use crate::frame::copy;
use crate::shm::clients::MAX_CLIENT_ID;
use crate::shm::lock_word::{self, LockWord, HOLDER, LOCK_HALF};
use crate::shm::Acquired;
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(target_endian = "little"))]
compile_error!("the shared frame word's futex is its low half, first in memory on little-endian targets");

/// The default page size, in tests of caches made with it (`page_size.rs`).
#[cfg(test)]
pub(crate) const PAGE: usize = 4096;
/// Pages in a run of 4 KiB pages at most (`PageSize::run_pages` of the default), in tests.
#[cfg(all(test, not(loom)))]
pub(crate) const RUN_PAGES: usize = super::page_size::RUN_BYTES / 4096;

/// The bytes hold the page's contents as cached (or being written).
pub(crate) const VALID: u32 = 1;
/// The bytes differ from the file's.
pub(crate) const DIRTY: u32 = 2;
/// Read since the clock hand last passed.
pub(crate) const REFERENCED: u32 = 4;
/// One more read than `REFERENCED` says, under GClock (`SharedConfig::policy`): the hand
/// passes the frame over once per hit counted in `HITS`.
pub(crate) const HIT: u32 = 8;
/// The hit count's bits (0 to 3 of `HIT`).
pub(crate) const HITS: u32 = 3 * HIT;
/// Read once by a sequential stream (`SharedConfig::streams`): not a reference for the clock
/// hand; a second read of the page is.
pub(crate) const STREAMED: u32 = 32;
/// Some process's pin ledger may name the frame (`pin_ledger.rs`): a change of the frame
/// looks at the ledgers first.
pub(crate) const PINNED: u32 = 64;
/// The flags' bits; those above hold when the bytes were last written, in units of
/// 2^`STAMP_TICKS` time-stamp counter ticks (`copy::now`), wrapping.
const FLAG_BITS: u32 = VALID | DIRTY | REFERENCED | HITS | STREAMED | PINNED;
/// Where the stamp starts in the flags.
const STAMP_SHIFT: u32 = FLAG_BITS.count_ones();
const STAMP_TICKS: u32 = 20;
/// `copy::COLD_AFTER` in stamp units.
const COLD_STAMPS: u32 = (copy::COLD_AFTER >> STAMP_TICKS) as u32;

/// The stamp of now, in the flags' upper bits.
fn stamp() -> u32 {
    ((copy::now() >> STAMP_TICKS) as u32) << STAMP_SHIFT
}

/// Bits of a key that number the page.
const PAGE_BITS: u32 = 36;
/// Bits of a key that hold the file entry's generation.
const GEN_BITS: u32 = 8;
/// The largest page number a key holds (2^48 bytes of file).
pub(crate) const MAX_PAGES: u64 = 1 << PAGE_BITS;

/// A page's key: file slot + 1 in the high 20 bits, the entry's generation (`gen`, its low 8
/// bits) in the next 8, the page number in the low 36; 0 is none. A file entry filled for
/// another file takes the next generation, so its old pages stop matching any lookup at once
/// and the clock hand reclaims them.
pub(crate) fn key(slot: u32, gen: u32, page: u64) -> u64 {
    debug_assert!(page < MAX_PAGES && slot < (1 << 20) - 1);
    (slot as u64 + 1) << (PAGE_BITS + GEN_BITS) | ((gen as u64) & 0xff) << PAGE_BITS | page
}

/// The file slot of a key that is not 0.
pub(crate) fn key_slot(key: u64) -> u32 {
    ((key >> (PAGE_BITS + GEN_BITS)) - 1) as u32
}

/// The entry generation of a key that is not 0.
pub(crate) fn key_gen(key: u64) -> u32 {
    (key >> PAGE_BITS) as u32 & 0xff
}

/// The page number of a key.
pub(crate) fn key_page(key: u64) -> u64 {
    key & (MAX_PAGES - 1)
}

/// Bit 30 of the lock half, beside the holder's id (client ids stay below it,
/// `shm/clients.rs`): the holder is writing the frame back (`FrameMeta::begin_write_back`).
const WRITING_BACK: u64 = 1 << 30;
const _: () = assert!(WRITING_BACK & HOLDER != 0 && WRITING_BACK > MAX_CLIENT_ID as u64);

/// The holder's id in a lock half (or in a word), without `WRITING_BACK`.
fn holder_id(half: u64) -> u32 {
    (half & HOLDER & !WRITING_BACK) as u32
}

/// A frame's metadata, 32 bytes, all zeros for a free frame.
#[repr(C)]
pub(crate) struct FrameMeta {
    /// Version (high half) and lock (low half).
    pub word: AtomicU64,
    /// The page this frame holds ([`key`]), or 0.
    pub key: AtomicU64,
    /// `VALID`, `DIRTY`, `REFERENCED`, and above them when the bytes were last written (a
    /// hint, set under the lock: whether a write may find the frame's lines in the CPU's
    /// caches; every reader of a flag masks it).
    pub flags: AtomicU32,
    /// The next frame + 1 in its hash chain, 0 at the end.
    pub next: AtomicU32,
    /// The key the frame is linked under in the index, 0 if none.
    pub home: AtomicU64,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<FrameMeta>() == 32);

impl FrameMeta {
    /// The word, if the frame is unlocked: the version to validate an optimistic read with.
    pub fn stable(&self) -> Option<u64> {
        // Acquire: what the last holder wrote before its unlock is seen by our copy.
        let w = self.word.load(Ordering::Acquire);
        (w & LOCK_HALF == 0).then_some(w)
    }

    /// The word, if the frame is unlocked or its holder is writing it back
    /// ([`Self::begin_write_back`]): the version to validate an optimistic copy of its bytes
    /// with. Pins and changers want [`Self::stable`].
    pub fn readable(&self) -> Option<u64> {
        // Acquire: what the last holder wrote before its unlock (or its write-back began) is
        // seen by our copy.
        let w = self.word.load(Ordering::Acquire);
        (w & LOCK_HALF == 0 || w & WRITING_BACK != 0).then_some(w)
    }

    /// The holder (us) writes the frame back and changes nothing of it (bytes, key, flags
    /// but `DIRTY`'s clearing) until [`Self::end_write_back`]: optimistic readers may copy it
    /// meanwhile, as the kernel's readers do a page under `PG_writeback`. A waiter's take-over
    /// of a dead holder's word drops the bit with the holder (both in `HOLDER`).
    pub fn begin_write_back(&self) {
        // Release: what we (or the holders before us) wrote is seen by a reader that loads the
        // word with the bit.
        self.word.fetch_or(WRITING_BACK, Ordering::Release);
    }

    /// Ends [`Self::begin_write_back`]: the holder may change the frame again.
    pub fn end_write_back(&self) {
        // Relaxed + Release fence: the seqlock writer's side, as the lock's CAS (`cas_lock`):
        // a reader whose copy sees a byte we write next sees the word changed in `unchanged`.
        self.word.fetch_and(!WRITING_BACK, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Whether nothing locked the frame since [`Self::stable`] returned `w`: an optimistic
    /// read between the two saw one consistent state.
    pub fn unchanged(&self, w: u64) -> bool {
        // Acquire fence: the copy's loads are ordered before the word's re-read, so a lock
        // taken before any of them is seen here (the seqlock reader's side).
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        self.word.load(Ordering::Relaxed) == w
    }

    /// Takes the lock for client `me` if it is free.
    #[inline]
    pub fn try_lock(&self, me: u32) -> bool {
        let w = LockWord::load(self);
        w & LOCK_HALF == 0 && self.cas_lock(w, w | me as u64)
    }

    /// Takes the lock for client `me`, sleeping while a live holder has it and taking it over
    /// from a dead one (`alive` answers for holders other than `me`: another thread of ours).
    #[cfg(test)]
    pub fn lock(&self, me: u32, alive: impl Fn(u32) -> bool) -> Acquired {
        self.lock_unless(me, alive, |_| false).expect("never given up")
    }

    /// As `lock`, but gives up (None) once a wait is over and `give_up` says so of the holder
    /// (it is stopped: a reader need not wait for it).
    pub fn lock_unless(
        &self,
        me: u32,
        alive: impl Fn(u32) -> bool,
        give_up: impl Fn(u32) -> bool,
    ) -> Option<Acquired> {
        // A holder writing back is named with `WRITING_BACK` beside its id.
        let id = |h: u32| holder_id(h.into());
        match lock_word::lock_unless(self, me, |h| alive(id(h)), |h| give_up(id(h)))? {
            Acquired::OwnerDied(h) => Some(Acquired::OwnerDied(id(h))),
            clean => Some(clean),
        }
    }

    /// Releases the lock `me` holds; `changed` bumps the version (the bytes, the key or `VALID`
    /// changed). False, and nothing done, if `me` no longer holds it (taken over: judged dead).
    pub fn unlock(&self, me: u32, changed: bool) -> bool {
        // The lock half clears; the Release CAS publishes what we did to the next holder and
        // to readers of the new version. Wakes every sleeper (readers that may give up too).
        let next = |w: u64| ((w >> 32).wrapping_add(changed as u64)) << 32;
        match lock_word::unlock(self, me, next, i32::MAX) {
            Ok(()) => true,
            Err(now) => {
                log::error!("shared frame: client {me} unlocks a frame held by {now}");
                false
            }
        }
    }

    /// The lock's holder, if any.
    pub fn holder(&self) -> Option<u32> {
        // Relaxed: a report, stale as soon as read.
        match holder_id(self.word.load(Ordering::Relaxed)) {
            0 => None,
            h => Some(h),
        }
    }

    /// The flags.
    pub fn flags(&self) -> u32 {
        // Acquire: flags set under the lock come with the state they describe.
        self.flags.load(Ordering::Acquire)
    }

    /// Notes the page as a sequential write stream's, written back behind it
    /// (`Inner::write_behind`): unless read since, `STREAMED`, so it goes before pages read
    /// at random, as a scan's pages read once do (StreamCache's stream eviction).
    pub fn note_streamed(&self) {
        if self.flags() & (STREAMED | REFERENCED) == 0 {
            // Relaxed: a hint for the clock hand.
            self.flags.fetch_or(STREAMED, Ordering::Relaxed);
        }
    }

    /// Notes a read of the page, whose `flags` were read before it: `REFERENCED` for CLOCK;
    /// where the policy counts hits (`count`: GClock, LFU, S3-FIFO), a hit counted too if it
    /// was set already, up to 3. A read that
    /// continues a sequential stream (`streamed`) marks a page read for the first time only
    /// `STREAMED`, which the hand does not count: a page a scan reads once goes first (the
    /// kernel keeps such pages on its inactive list), one read again stays as any other.
    /// Stores only while something changes, so a hot page's line is not written at every read.
    pub fn note_read(&self, flags: u32, count: bool, streamed: bool) {
        if streamed && flags & (STREAMED | REFERENCED) == 0 {
            // Relaxed: a hint for the clock hand.
            self.flags.fetch_or(STREAMED, Ordering::Relaxed);
        } else if flags & REFERENCED == 0 {
            // Relaxed: a hint for the clock hand.
            self.flags.fetch_or(REFERENCED, Ordering::Relaxed);
        } else if count && flags & HITS != HITS {
            // Relaxed: as above. A CAS, not an add: two readers adding at once would carry
            // into the stamp.
            let _ = self.flags.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                (f & HITS != HITS).then_some(f + HIT)
            });
        }
    }

    /// The clock hand's pass over the frame, whose `flags` were read before it: takes one
    /// counted hit off, else `REFERENCED`; true if either was there (the page stays a lap).
    pub fn age(&self, flags: u32) -> bool {
        if flags & HITS != 0 {
            // Relaxed: a hint, as in `note_read`; a CAS so as not to borrow from the flags.
            let _ = self
                .flags
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| (f & HITS != 0).then_some(f - HIT));
            return true;
        }
        if flags & REFERENCED != 0 {
            // Relaxed: a hint for the hand; a reader sets it again.
            self.flags.fetch_and(!REFERENCED, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// The key the frame is linked under, 0 if none.
    pub fn home(&self) -> u64 {
        // Acquire: pairs with the Release stores of the index's writers.
        self.home.load(Ordering::Acquire)
    }

    /// Bumps the version while we hold the lock: the frame changed in a way its unlock may
    /// not say (a claim, a repair), so no optimistic read that began before passes.
    pub fn bump(&self) {
        // Relaxed: only the holder changes the version; the unlock's Release publishes it.
        self.word.fetch_add(1 << 32, Ordering::Relaxed);
    }

    /// Copies `src` into the frame's bytes at `dst` (which the caller has locked), streaming
    /// past the CPU's caches if the frame was last written long ago (`copy::into_frame`).
    ///
    /// # Safety
    /// `dst` is this frame's bytes at some offset, valid for `src.len()` bytes, and the
    /// caller holds the lock.
    pub unsafe fn copy_in(&self, src: &[u8], dst: *mut u8) {
        let now = stamp();
        let cold = self.cold_at(now);
        self.set_written(now);
        // SAFETY: as the caller promises; nobody else touches the bytes while we hold the lock.
        unsafe { copy::into_frame(src, dst, cold) };
    }

    /// Marks the bytes as just written by a load (through the CPU's caches).
    pub fn loaded(&self) {
        self.set_written(stamp());
    }

    /// Whether the bytes were last written long before `now` (a [`stamp`]).
    fn cold_at(&self, now: u32) -> bool {
        // Relaxed: a hint, changed only under the lock, which we hold.
        let then = self.flags.load(Ordering::Relaxed) & !FLAG_BITS;
        now.wrapping_sub(then) >> STAMP_SHIFT > COLD_STAMPS
    }

    fn set_written(&self, stamp: u32) {
        // Relaxed: a hint; the flags' bits stay as they are (a reader may set `REFERENCED`
        // meanwhile: a CAS loop, not a store), and a read-modify-write continues the release
        // sequence of the store that set them.
        let _ =
            self.flags.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f & FLAG_BITS | stamp));
    }

    /// The key.
    pub fn key(&self) -> u64 {
        // Acquire: pairs with the Release store of whoever claimed the frame.
        self.key.load(Ordering::Acquire)
    }
}

/// The low half is the lock; the version above it rides along.
impl LockWord for FrameMeta {
    #[inline]
    fn load(&self) -> u64 {
        // Relaxed: a guess for a CAS, which orders.
        self.word.load(Ordering::Relaxed)
    }

    #[inline]
    fn cas_lock(&self, from: u64, to: u64) -> bool {
        // Acquire: what the last holder did is seen by us. SeqCst: the pin handshake's
        // changer side (`pin_ledger::may_be_pinned`); the same instruction on x86.
        let ok = self.word.compare_exchange(from, to, Ordering::SeqCst, Ordering::Relaxed).is_ok();
        if ok {
            // Release fence: an optimistic reader whose copy sees any byte we write next also
            // sees the lock in its re-read of the word (the seqlock writer's side; pairs with
            // the Acquire fence in `unchanged`).
            fence(Ordering::Release);
        }
        ok
    }

    fn cas(&self, from: u64, to: u64, success: Ordering) -> Result<(), u64> {
        // Relaxed on failure: the caller only retries from the value returned.
        self.word.compare_exchange(from, to, success, Ordering::Relaxed).map(drop)
    }

    #[cfg(not(loom))]
    fn futex(&self) -> *const u32 {
        self.word.as_ptr().cast::<u32>()
    }
}

#[cfg(test)]
impl FrameMeta {
    /// A free frame's metadata (in a segment, zeroed memory), for the tests and loom models.
    pub(crate) fn free() -> Self {
        FrameMeta {
            word: AtomicU64::new(0),
            key: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            next: AtomicU32::new(0),
            home: AtomicU64::new(0),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn meta() -> FrameMeta {
        FrameMeta::free()
    }

    /// The write-back bit is told apart from every client id, the largest included: a frame
    /// such a client holds is not readable unless it writes back, its holder is named without
    /// the bit, and it unlocks once the write-back ends. (The bit was once inside the ids'
    /// tenure bits, which made a writer's frame look written back to readers.)
    #[test]
    fn the_write_back_bit_is_told_from_every_client_id() {
        for id in [1, MAX_CLIENT_ID] {
            let m = meta();
            assert_eq!(m.lock(id, |_| true), Acquired::Clean);
            assert_eq!(m.readable(), None, "held to change, by {id:#x}");
            m.begin_write_back();
            assert_eq!(m.holder(), Some(id));
            assert!(m.readable().is_some(), "written back");
            m.end_write_back();
            assert_eq!(m.readable(), None);
            assert!(m.unlock(id, false), "unlocked by {id:#x}");
            assert!(m.readable().is_some());
        }
    }

    #[test]
    fn a_frame_is_cold_until_written_and_its_stamp_leaves_the_flags_alone() {
        let m = meta();
        m.flags.store(VALID | DIRTY, Ordering::Relaxed);
        let now = stamp();
        assert!(m.cold_at(now), "never written");
        m.set_written(now);
        assert_eq!(m.flags() & FLAG_BITS, VALID | DIRTY);
        assert!(!m.cold_at(now));
        let later = now.wrapping_add((COLD_STAMPS + 1) << STAMP_SHIFT);
        assert!(m.cold_at(later), "long after");
        assert!(!m.cold_at(now.wrapping_add(COLD_STAMPS << STAMP_SHIFT)));
    }

    #[test]
    fn keys_round_trip() {
        let k = key(5, 300, MAX_PAGES - 1);
        assert_eq!((key_slot(k), key_page(k)), (5, MAX_PAGES - 1));
        assert_ne!(key(0, 0, 0), 0, "slot 0 page 0 is not 'none'");
        assert_ne!(key(5, 1, 7), key(5, 2, 7), "generations differ");
        assert_eq!(key(5, 1, 7), key(5, 257, 7), "only the low 8 bits count");
    }

    #[test]
    fn a_change_under_the_lock_fails_an_optimistic_read_and_a_bare_lock_does_not_bump() {
        let m = meta();
        let w = m.stable().unwrap();
        assert!(m.try_lock(3));
        assert!(m.stable().is_none(), "locked");
        assert!(!m.unchanged(w));
        assert!(m.unlock(3, false));
        assert!(m.unchanged(w), "no change, same version");
        assert!(m.try_lock(3));
        assert!(m.unlock(3, true));
        assert!(!m.unchanged(w), "changed: new version");
        assert!(!m.unlock(3, true), "not held");
    }

    #[test]
    fn a_dead_holders_frame_is_taken_over_and_threads_of_one_client_wait_for_each_other() {
        let m = meta();
        assert!(m.try_lock(7));
        assert_eq!(m.lock(8, |h| h != 7), Acquired::OwnerDied(7));
        assert_eq!(m.holder(), Some(8));
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let t = m.lock(8, |_| true);
                assert!(m.unlock(8, true));
                t
            });
            // Our other thread waits for us (same client) until we unlock.
            assert!(m.unlock(8, false));
            assert_eq!(other.join().unwrap(), Acquired::Clean);
        });
        assert_eq!(m.holder(), None);
    }
}

/// loom model of the version as a seqlock (`ci/loom.sh`); the lock itself is modelled in
/// `shm/owner_lock.rs`, through the same loop.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::shm::futex::model as futex;
    use crate::sync::Arc;

    fn meta() -> FrameMeta {
        FrameMeta::free()
    }

    /// A writer changes a two-word page under the lock, after writing it back first if
    /// `write_back`; an optimistic reader (`readable` then, else `stable`) copies it, and a
    /// copy `unchanged` accepts is one version's page: both words old, or both new. The reader
    /// is the spawned thread: loom (0.7) explores a spawned thread that begins with a load
    /// running ahead of the model's own thread only if that load is the first access the two
    /// share.
    fn a_validated_copy_is_one_versions_page_when(write_back: bool) {
        loom::model(move || {
            futex::start(false);
            let m = Arc::new(meta());
            let page = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let reader = {
                let (m, page) = (m.clone(), page.clone());
                loom::thread::spawn(move || {
                    let w = if write_back { m.readable() } else { m.stable() }?;
                    // Relaxed: validated by `unchanged`.
                    let copy = [page[0].load(Ordering::Relaxed), page[1].load(Ordering::Relaxed)];
                    m.unchanged(w).then_some((w >> 32, copy))
                })
            };
            assert_eq!(m.lock(1, |_| true), Acquired::Clean);
            if write_back {
                m.begin_write_back();
                assert_eq!(m.holder(), Some(1), "the holder is named without the bit");
                m.end_write_back();
            }
            // Relaxed: the lock's fence (or the bit's) and the unlock order these (what the
            // model checks).
            page[0].store(1, Ordering::Relaxed);
            page[1].store(1, Ordering::Relaxed);
            assert!(m.unlock(1, true));
            if let Some((version, copy)) = reader.join().unwrap() {
                assert_eq!(copy, [version, version], "a validated copy is not its version's page");
            }
            assert_eq!(m.stable(), Some(1 << 32), "unlocked at version 1");
        });
    }

    /// Needs the Release fence after the lock's CAS and the Acquire fence in `unchanged`
    /// (without either, a copy that saw one new word can pass the re-read), and the Release
    /// unlock with the Acquire in `stable` (without either, an old copy passes as the new
    /// version).
    #[test]
    fn a_validated_copy_is_one_versions_page() {
        a_validated_copy_is_one_versions_page_when(false);
    }

    /// A reader may copy the page while the write-back bit is up (`readable`). Needs the
    /// Release fence after the bit goes down (without it, a copy that saw a new word can pass
    /// the re-read) and the Release with which it goes up (without it, a copy of the
    /// write-back's version may miss bytes).
    #[test]
    fn a_copy_during_a_write_back_is_one_versions_page() {
        a_validated_copy_is_one_versions_page_when(true);
    }
}
