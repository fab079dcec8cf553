//! StreamCache's two-layer memory management (seed 003 §4.3) in the segment, for
//! `SharedConfig::alloc` two-layer: a pool of free frames in regions, one per CPU (up to
//! [`MAX_REGIONS`]), each a list under its own lock; and per file a small list of its own
//! (`FileEntry::spare`), up to the high mark. A miss takes a frame from its file's list; an
//! empty one is refilled with the low mark's frames at once (the marks are the in-process
//! engine's, `alloc::two_layer::Marks::for_frames`) from the region of the CPU the miss runs
//! on, then from the others (`Inner::claim_spare`). Background reclaim (`Inner::reclaim`, the flushers) keeps the
//! pool above a low threshold by evicting clean pages into it, and under an urgent one halves
//! every file's list back into the pool, so misses seldom run the clock hand themselves.
//!
//! A list is intrusive: frame `f`'s link word (the segment's `FREE` region, a word per
//! frame) holds `LISTED | (next + 1)` while `f` is listed (`next + 1` = 0 ends the list), and
//! 0 while it is not, so a frame is on one list at most: a push claims its word by CAS from 0.
//! A list's head is `first + 1` (all zeros: empty). Entries are hints: a frame the hand took
//! while listed, or listed and then given a page, is skipped by whoever pops it (taken only
//! by its lock, and only if still empty). Every step of a push or a pop leaves a whole list,
//! so a list whose lock is taken from a dead holder is walked and counted again; the frame the
//! dead was moving keeps a `LISTED` word on no list, found by the hand and never listed again
//! (a frame's pooling lost per death, not the frame).

use crate::shm::{Acquired, OwnerLock};
use crate::sync::{AtomicU32, Ordering};

/// The most regions: CPUs past it share them.
pub(crate) const MAX_REGIONS: usize = 64;
/// Frames background reclaim lists at once (a region's lock per batch).
pub(crate) const RECLAIM_BATCH: usize = 32;
/// A listed frame's link word has it.
const LISTED: u32 = 1 << 31;

/// A list of free frames, under its lock (a leaf: its holder waits for nothing else).
#[repr(C)]
#[derive(Default)]
pub(crate) struct FreeList {
    lock: OwnerLock,
    /// The first frame + 1; 0: empty.
    head: AtomicU32,
    /// Frames on it (never below the truth while its lock is free).
    count: AtomicU32,
}

/// A region of the pool, on a cache line of its own.
#[repr(C, align(64))]
#[derive(Default)]
pub(crate) struct Region {
    pub list: FreeList,
}

/// Who takes a list's lock: a client, and what it knows of lock holders.
pub(crate) struct Taker<'a> {
    pub me: u32,
    pub alive: &'a dyn Fn(u32) -> bool,
    /// A holder not to wait for (stopped): the list is passed by.
    pub give_up: &'a dyn Fn(u32) -> bool,
}

impl FreeList {
    /// Frames on it, a hint (no lock).
    pub fn len(&self) -> usize {
        // Relaxed: a hint.
        self.count.load(Ordering::Relaxed) as usize
    }

    /// Takes the lock; false if its holder is one not to wait for. Taken from a dead holder,
    /// the list is walked and counted again: each step of `give` and `take` leaves a whole
    /// list (the head moved after a frame's word is set, before it is cleared), so a death
    /// loses at most the frame it was moving, marked and on no list.
    fn enter(&self, links: &[AtomicU32], who: &Taker<'_>) -> bool {
        match self.lock.lock_unless(who.me, who.alive, who.give_up) {
            None => false,
            Some(Acquired::Clean) => true,
            Some(Acquired::OwnerDied(_)) => {
                self.recount(links);
                true
            }
        }
    }

    /// Counts the list from its head, cut at a word that is not a listed frame's (none
    /// should be) and after as many steps as there are frames (a loop, as above).
    fn recount(&self, links: &[AtomicU32]) {
        // Relaxed (all): under the lock.
        let (mut n, mut at, mut last) = (0u32, self.head.load(Ordering::Relaxed), None::<&AtomicU32>);
        while at != 0 {
            let word = links.get(at as usize - 1).filter(|w| w.load(Ordering::Relaxed) & LISTED != 0);
            match word {
                Some(w) if (n as usize) < links.len() => {
                    n += 1;
                    at = w.load(Ordering::Relaxed) & !LISTED;
                    last = Some(w);
                }
                _ => {
                    match last {
                        Some(w) => w.store(LISTED, Ordering::Relaxed),
                        None => self.head.store(0, Ordering::Relaxed),
                    }
                    break;
                }
            }
        }
        self.count.store(n, Ordering::Relaxed);
    }

    fn leave(&self, who: &Taker<'_>) {
        self.lock.unlock(who.me);
    }

    /// Lists `frames` (empty, not listed elsewhere: a frame already listed stays where it
    /// is); how many it listed.
    pub fn give(&self, links: &[AtomicU32], frames: &[u32], who: &Taker<'_>) -> usize {
        if frames.is_empty() || !self.enter(links, who) {
            return 0;
        }
        let mut n = 0;
        for &f in frames {
            let Some(link) = links.get(f as usize) else { continue };
            // Relaxed (all): under the lock, whose release publishes them. The link's CAS only
            // claims the word against another list's push.
            let head = self.head.load(Ordering::Relaxed);
            if link.compare_exchange(0, LISTED | head, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                self.head.store(f + 1, Ordering::Relaxed);
                self.count.store(self.count.load(Ordering::Relaxed).saturating_add(1), Ordering::Relaxed);
                n += 1;
            }
        }
        self.leave(who);
        n
    }

    /// Takes up to `most` frames off the list, the last listed first.
    pub fn take(&self, links: &[AtomicU32], most: usize, who: &Taker<'_>) -> Vec<u32> {
        let mut got = Vec::new();
        if most == 0 || self.len() == 0 || !self.enter(links, who) {
            return got;
        }
        // Relaxed (all): under the lock, as in `give`.
        while got.len() < most {
            let head = self.head.load(Ordering::Relaxed);
            if head == 0 {
                break;
            }
            let f = head - 1;
            let word = links.get(f as usize).map_or(0, |w| w.load(Ordering::Relaxed));
            if word & LISTED == 0 {
                // A word no list should have: the rest is not trusted.
                self.head.store(0, Ordering::Relaxed);
                self.count.store(0, Ordering::Relaxed);
                break;
            }
            self.head.store(word & !LISTED, Ordering::Relaxed);
            self.count.store(self.count.load(Ordering::Relaxed).saturating_sub(1), Ordering::Relaxed);
            links[f as usize].store(0, Ordering::Relaxed);
            got.push(f);
        }
        self.leave(who);
        got
    }
}

/// The pool's regions and the frames' link words.
pub(crate) struct Pool<'a> {
    pub regions: &'a [Region],
    pub links: &'a [AtomicU32],
}

impl Pool<'_> {
    /// The region of the CPU this thread runs on.
    pub fn here(&self) -> usize {
        // SAFETY: sched_getcpu has no preconditions; it reads the CPU number (vDSO/rseq).
        let cpu = unsafe { libc::sched_getcpu() };
        cpu.max(0) as usize % self.regions.len()
    }

    /// Free frames in every region (hints).
    pub fn pooled(&self) -> usize {
        self.regions.iter().map(|r| r.list.len()).sum()
    }

    /// Lists `frames` in this CPU's region.
    pub fn give(&self, frames: &[u32], who: &Taker<'_>) -> usize {
        self.regions[self.here()].list.give(self.links, frames, who)
    }

    /// Up to `want` frames: this CPU's region's first, then the next regions' (stolen).
    pub fn take(&self, want: usize, who: &Taker<'_>) -> Vec<u32> {
        let here = self.here();
        let n = self.regions.len();
        let mut got = Vec::new();
        for r in (0..n).map(|i| &self.regions[(here + i) % n]) {
            if got.len() >= want {
                break;
            }
            got.extend(r.list.take(self.links, want - got.len(), who));
        }
        got
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn who(me: u32) -> Taker<'static> {
        Taker { me, alive: &|_| true, give_up: &|_| false }
    }

    /// A list gives back what it was given, the last first; a frame listed already is not
    /// listed again (on this list or another); a take ends where it was asked to.
    #[test]
    fn a_list_takes_what_it_was_given_and_lists_a_frame_once() {
        let links: Vec<AtomicU32> = (0..16).map(|_| AtomicU32::new(0)).collect();
        let (a, b) = (FreeList::default(), FreeList::default());
        assert_eq!(a.give(&links, &[3, 5, 7], &who(1)), 3);
        assert_eq!(b.give(&links, &[5, 9], &who(1)), 1, "5 is on a already");
        assert_eq!((a.len(), b.len()), (3, 1));
        assert_eq!(a.take(&links, 2, &who(2)), vec![7, 5]);
        assert_eq!(b.give(&links, &[5], &who(1)), 1, "off a, 5 may be listed again");
        assert_eq!(a.take(&links, 10, &who(2)), vec![3]);
        assert_eq!(a.take(&links, 10, &who(2)), Vec::<u32>::new());
        assert_eq!(b.take(&links, 10, &who(2)), vec![5, 9]);
        assert!(links.iter().all(|l| l.load(Ordering::SeqCst) == 0), "nothing listed");
        assert_eq!(a.give(&links, &[99], &who(1)), 0, "a frame past the links");
    }

    /// A list whose lock a dead client held is counted again by its taker and kept whole,
    /// whichever step the death cut: mid-push, the frame being listed is on no list and
    /// stays marked; mid-pop, the frame being taken likewise. A word in the chain that no
    /// list should have ends a take, and a recount cuts the list there.
    #[test]
    fn a_dead_holder_s_list_is_counted_again_and_a_bad_link_ends_a_take() {
        let links: Vec<AtomicU32> = (0..16).map(|_| AtomicU32::new(0)).collect();
        let list = FreeList::default();
        let dead = |me: u32| Taker { me, alive: &|h| h != 5, give_up: &|_| false };
        list.give(&links, &[1, 2, 3], &who(1));
        // A push of 4 cut after its word was set, before the head moved; the count a peer's
        // half-made change left.
        links[4].store(LISTED | 4, Ordering::SeqCst);
        list.count.store(9, Ordering::SeqCst);
        assert!(list.lock.try_lock(5));
        assert_eq!(list.take(&links, 1, &dead(1)), vec![3], "recounted, then taken");
        assert_eq!(list.len(), 2);
        assert_eq!(list.give(&links, &[4], &who(1)), 0, "4 stays marked, on no list");
        // A pop of 2 cut after the head moved past it, before its word was cleared.
        list.head.store(1 + 1, Ordering::SeqCst);
        assert!(list.lock.try_lock(5));
        assert_eq!(list.take(&links, 10, &dead(1)), vec![1]);
        assert_eq!(list.give(&links, &[2], &who(1)), 0, "2 stays marked");
        // A bad word in the chain: a take ends there, and so does a recount.
        assert_eq!(list.give(&links, &[6, 7, 8], &who(1)), 3);
        links[7].store(0, Ordering::SeqCst);
        assert_eq!(list.take(&links, 10, &who(1)), vec![8], "the rest dropped");
        assert_eq!(list.len(), 0);
        assert_eq!(list.give(&links, &[9, 10, 11], &who(1)), 3);
        links[10].store(0, Ordering::SeqCst);
        assert!(list.lock.try_lock(5));
        assert_eq!(list.take(&links, 10, &dead(1)), vec![11], "cut after 11 by the recount");
        let stopped = Taker { me: 1, alive: &|_| true, give_up: &|h| h == 6 };
        list.give(&links, &[12], &who(1));
        assert!(list.lock.try_lock(6));
        assert_eq!(list.take(&links, 1, &stopped), Vec::<u32>::new(), "a stopped holder is passed by");
    }

    /// The pool takes from this CPU's region first, then steals from the others.
    #[test]
    fn the_pool_steals_from_other_regions() {
        let links: Vec<AtomicU32> = (0..64).map(|_| AtomicU32::new(0)).collect();
        let regions: Vec<Region> = (0..4).map(|_| Region::default()).collect();
        let pool = Pool { regions: &regions, links: &links };
        for (r, frames) in regions.iter().zip([[0, 1], [2, 3], [4, 5], [6, 7]]) {
            r.list.give(&links, &frames, &who(1));
        }
        assert_eq!(pool.pooled(), 8);
        let here = pool.here();
        let got = pool.take(3, &who(1));
        assert_eq!(got.len(), 3);
        assert!(got[..2].iter().all(|&f| f as usize / 2 == here), "{got:?}: region {here}'s first");
        assert_eq!(pool.pooled(), 5);
        assert_eq!(pool.take(10, &who(1)).len(), 5);
        use crate::alloc::two_layer::Marks;
        let marks = |frames| (Marks::for_frames(frames).low, Marks::for_frames(frames).high);
        assert_eq!((marks(100), marks(1 << 20)), ((1, 2), (50, 100)));
        use crate::alloc::Pressure;
        assert_eq!(
            [Pressure::of(0, 1280), Pressure::of(20, 1280), Pressure::of(40, 1280)],
            [Pressure::Urgent, Pressure::Low, Pressure::None]
        );
    }
}

#[cfg(all(test, not(loom)))]
mod in_a_cache {
    use super::super::{tests::small, SharedCache, SharedConfig};
    use crate::alloc::AllocKind;

    fn two_layer(frames: u64) -> SharedConfig {
        SharedConfig { memory: frames * 4096, alloc: AllocKind::TwoLayer, readahead: 0, ..small() }
    }

    /// Reclaim fills the pool of a full cache to twice the low threshold with clean pages; a
    /// miss then takes the low mark's frames from it into its file's list, and the next
    /// misses take theirs from that list. Every byte reads back. With the global allocator
    /// nothing is reclaimed.
    #[test]
    fn reclaim_fills_the_pool_and_misses_take_from_their_files_lists() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let bytes: Vec<u8> = (0..2048 * 4096u32).map(|i| (i >> 12) as u8 ^ i as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let cache = SharedCache::create_private(&two_layer(1024)).unwrap();
        let (inner, f) = (&cache.inner, cache.open_path(&p, false).unwrap());
        let mut page = vec![0u8; 4096];
        for i in 0..1024u64 {
            f.read_at(&mut page, i * 4096).unwrap();
        }
        // Its own flusher may have reclaimed meanwhile (the misses asked): the pool and the
        // file's list emptied by hand (their frames, free, found by the hand later).
        let (pool, spare) = (inner.view.pool(), &inner.view.files()[f.slot() as usize].spare);
        inner.as_taker(|who| {
            pool.take(usize::MAX, who);
            spare.take(pool.links, usize::MAX, who);
        });
        let before = cache.status().stats.reclaimed;
        let evicted = inner.reclaim() as usize;
        let target = 2 * 1024 / crate::alloc::LOW_DIVISOR;
        assert!(pool.pooled() >= target && evicted >= target, "pooled {} of {target}", pool.pooled());
        assert_eq!(cache.status().stats.reclaimed - before, evicted as u64);
        assert_eq!(inner.reclaim(), 0, "nothing more while the pool is full enough");
        let low = crate::alloc::two_layer::Marks::for_frames(1024).low;
        let pooled = pool.pooled();
        f.read_at(&mut page, 1500 * 4096).unwrap();
        assert_eq!(page[..], bytes[1500 * 4096..1501 * 4096]);
        assert_eq!((pool.pooled(), spare.len()), (pooled - low, low - 1), "a batch into the file's list");
        let listed = spare.len();
        f.read_at(&mut page, 1501 * 4096).unwrap();
        assert_eq!(spare.len(), listed - 1, "the next miss, from the file's list");
        let mut all = vec![0u8; bytes.len()];
        assert_eq!(f.read_at(&mut all, 0).unwrap(), bytes.len());
        assert!(all == bytes);
        cache.check_index().unwrap();
        let global =
            SharedCache::create_private(&SharedConfig { alloc: AllocKind::Global, ..two_layer(1024) })
                .unwrap();
        let g = global.open_path(&p, false).unwrap();
        assert_eq!(g.read_at(&mut all, 0).unwrap(), bytes.len());
        assert_eq!((global.inner.reclaim(), global.status().stats.reclaimed), (0, 0));
    }

    /// A file's last close gives its own list back to the pool: a file read once keeps no
    /// free frames idle.
    #[test]
    fn a_files_last_close_gives_its_list_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![3u8; 4096]).unwrap();
        let cache = SharedCache::create_private(&two_layer(1024)).unwrap();
        let inner = &cache.inner;
        let pool = inner.view.pool();
        let f = cache.open_path(&p, false).unwrap();
        let spare = &inner.view.files()[f.slot() as usize].spare;
        let g = cache.open_path(&p, false).unwrap();
        // Frames for the pool, and one miss that takes a batch of them into the file's list.
        let frames: Vec<u32> = (100..200).collect();
        inner.as_taker(|who| pool.give(&frames, who));
        let mut page = vec![0u8; 4096];
        f.read_at(&mut page, 0).unwrap();
        let listed = spare.len();
        assert!(listed > 0);
        let pooled = pool.pooled();
        f.close().unwrap();
        assert_eq!(spare.len(), listed, "another open is left");
        g.close().unwrap();
        assert_eq!((spare.len(), pool.pooled()), (0, pooled + listed));
    }

    /// Under the urgent threshold reclaim first halves every file's list into the pool.
    #[test]
    fn urgent_reclaim_halves_the_files_lists() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 600 * 4096]).unwrap();
        let cache = SharedCache::create_private(&two_layer(512)).unwrap();
        let (inner, f) = (&cache.inner, cache.open_path(&p, false).unwrap());
        let mut all = vec![0u8; 600 * 4096];
        f.read_at(&mut all, 0).unwrap();
        // Every frame taken; the pool emptied into the file's list by hand.
        let pool = inner.view.pool();
        let spare = &inner.view.files()[f.slot() as usize].spare;
        inner.as_taker(|who| {
            let all = pool.take(usize::MAX, who);
            spare.give(pool.links, &all, who);
        });
        let listed = spare.len();
        assert_eq!(pool.pooled(), 0);
        inner.reclaim();
        assert_eq!(spare.len(), listed - listed / 2, "halved");
        assert!(pool.pooled() >= 2 * 512 / crate::alloc::LOW_DIVISOR);
    }

    /// The two-layer allocator is refused where misses take their set's or node's frames.
    #[test]
    fn it_is_refused_with_sets_or_numa_partitions() {
        let sets = SharedConfig { index: crate::index::IndexKind::SetAssoc, ..two_layer(256) };
        let numa = SharedConfig { numa: "0;1".parse().unwrap(), ..two_layer(256) };
        for config in [sets, numa] {
            let e = SharedCache::create_private(&config).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidConfig, "{e}");
        }
    }
}
