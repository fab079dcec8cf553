//! SAFS's set-associative cache (seed 002 §4): the frames are split into small page sets of
//! `ways` frames (12 by default); a hash of (file, page) picks the one set a page may live in,
//! and each set is managed alone under its own lock, with no lists: lookup, insertion and
//! eviction all happen inside the set. So there is no global index and no global replacement
//! state for threads to contend on, at the price of restricted associativity (a hot set evicts
//! while another set has cold pages).
//!
//! Each way holds one frame (at start, way `w` of set `s` holds frame `s * ways + w`); the
//! set records which (file, page) each way's frame holds and one replacement counter per way.
//! Resizing moves a page *with its frame* between sets, so no byte is copied and pins stay
//! valid. A miss claims a way
//! ([`SetTable::claim`]): an empty way whose frame is free, else an in-set victim chosen by
//! the set's policy among frames that [`crate::frame::FrameState::try_claim`] accepts
//! (unpinned, unlocked, clean: clean pages are preferred, and a dirty candidate is reported
//! for write-back only when no clean one can be claimed). Writing the new key into the way
//! removes the old page's entry in the same step.
//!
//! Hits are counted where they happen: a lookup ([`PageIndex::get`]) holds the set lock and
//! updates the way's counter there, exactly as the policy defines it. Policies:
//! - `GClock` (default): a counter per way, +1 per hit (saturating at 3), and a hand that
//!   decrements counters as it passes and evicts at 0;
//! - `Clock`: the same with the counter capped at 1;
//! - `Lru`: the way with the oldest access stamp (a per-set tick);
//! - `Lfu`: the way with the fewest hits (ties: the oldest stamp).
//!
//! # Resizing (§4.1)
//! Linear hashing with an initial size of one set: `2^level + split` sets are active; a page
//! hashing to `h` lives in set `h mod 2^level`, or `h mod 2^(level+1)` if that is below
//! `split`. Growing splits set `split` into itself and set `split + 2^level` (its pages whose
//! finer hash says so move over, each with its frame, swapped for an empty way's frame of the
//! new set); shrinking merges the last set back into its buddy, first evicting clean pages if
//! the two hold more than one set's worth (pinned, in-flight and dirty pages make the merge
//! wait: the caller writes dirty ones back and retries). Both hold the two sets' locks while
//! they change the shape, and a thread that locked a set re-checks that the (new) shape still
//! routes its page there, so lookups, claims and removals run on while the cache resizes.
//! Frames of a deactivated set are all free; their memory is given back to the kernel.
//!
//! There are no `READY` entries, so reads through this index take the pinned path.
//!
//! # Locking
//! A set's lock is a leaf: held for one lookup, claim or removal, never while waiting for a
//! frame (claims only try-claim frames). A split or merge takes the resize mutex, then the two
//! sets' locks in index order; a scan of a file's pages takes the resize mutex, then each
//! set's lock in turn.

use super::PageIndex;
use crate::choice::choice;
use crate::frame::state::{ClaimResult, DIRTY, LOCKED, UNOWNED, VALID, WRITING};
use crate::frame::{FrameId, FrameTable};
use crate::sync::{lock, Arc, AtomicU64, Mutex, MutexGuard, Ordering};

choice! {
    /// Replacement inside a set.
    pub enum SetPolicy("set policy") {
        /// Generalized CLOCK, counters up to 3.
        #[default]
        GClock = "gclock",
        /// CLOCK: GClock with counters up to 1.
        Clock = "clock",
        /// Least recently used.
        Lru = "lru",
        /// Least frequently used.
        Lfu = "lfu",
    }
}

impl SetPolicy {
    fn max_count(self) -> u8 {
        match self {
            SetPolicy::Clock => 1,
            SetPolicy::GClock => 3,
            SetPolicy::Lru | SetPolicy::Lfu => u8::MAX,
        }
    }
}

/// Default ways per set (SAFS's choice: more adds little hit rate, §5).
pub const DEFAULT_WAYS: usize = 12;
/// Most ways per set.
pub const MAX_WAYS: usize = 64;

const EMPTY: (u64, u64) = (u64::MAX, u64::MAX);

/// One set's state.
struct Set {
    keys: Box<[(u64, u64)]>,
    /// The frame each way holds.
    frames: Box<[FrameId]>,
    /// GClock/Clock/LFU counter per way.
    counts: Box<[u8]>,
    /// Last access tick per way (LRU, and LFU's tie-break).
    stamps: Box<[u32]>,
    tick: u32,
    hand: usize,
}

/// Claims frame `id` for eviction from its set. Hits are already counted by
/// [`SetTable::lookup`], so the state word's reference bit (set by every pin, and by the load
/// itself) is not a second vote: it is cleared and the claim tried again.
pub fn claim_frame(frames: &FrameTable, id: FrameId) -> ClaimResult {
    let st = frames.state(id);
    match st.try_claim() {
        ClaimResult::Referenced => st.try_claim(),
        r => r,
    }
}

/// Whether a frame's state word says it is being written back: `LOCKED` on a valid dirty
/// page by no writer (a writer's lock has `WRITING`, a load has no `VALID`).
fn under_write_back(w: u64) -> bool {
    w & (LOCKED | VALID | DIRTY | WRITING | UNOWNED) == LOCKED | VALID | DIRTY
}

/// What a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The page is already in the set, in this frame.
    Existing(FrameId),
    /// This frame is now the page's, `UNOWNED` and recorded in the set; `evicted` if another
    /// page was evicted from it.
    New {
        /// The claimed frame.
        frame: FrameId,
        /// Whether a resident page was evicted for it.
        evicted: bool,
    },
    /// No clean frame could be claimed; this dirty one could be, after write-back.
    Dirty(FrameId),
    /// Every frame of the set is pinned or under I/O; one under write-back, if any, to wait
    /// for (a write-back ends without anything from anyone, unlike a load, whose thread may
    /// be the caller, or a writer's lock).
    Full(Option<FrameId>),
}

/// The page sets of a cache.
pub struct SetTable {
    /// Every set the arena can hold; the first `active(shape)` are in use.
    sets: Box<[Mutex<Set>]>,
    ways: usize,
    policy: SetPolicy,
    /// Linear hashing state: `level` in the high 32 bits, `split` in the low 32.
    shape: AtomicU64,
    /// One split or merge at a time.
    resizing: Mutex<()>,
}

fn shape(level: u32, split: u64) -> u64 {
    (level as u64) << 32 | split
}

fn level_split(shape: u64) -> (u32, u64) {
    ((shape >> 32) as u32, shape & u32::MAX as u64)
}

/// Active sets of a shape.
fn active(shape: u64) -> usize {
    let (level, split) = level_split(shape);
    ((1u64 << level) + split) as usize
}

/// The set a hash lives in under a shape.
fn route(shape: u64, h: u64) -> usize {
    let (level, split) = level_split(shape);
    let lo = h & ((1u64 << level) - 1);
    (if lo < split { h & ((1u64 << (level + 1)) - 1) } else { lo }) as usize
}

/// The shape with `n >= 1` active sets.
fn shape_of(n: usize) -> u64 {
    let level = usize::BITS - 1 - n.leading_zeros();
    shape(level, (n - (1 << level)) as u64)
}

/// What one merge step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// One set fewer; these frames are free, out of use, and their memory was given back.
    Done(Vec<FrameId>),
    /// The two sets hold too many pages and this dirty one must be written back first.
    Dirty(FrameId),
    /// The two sets hold too many pages and the extra ones are pinned or under I/O.
    Busy,
    /// Already one set.
    Smallest,
}

fn hash(file: u64, page: u64) -> u64 {
    // murmur3's finalizer over both halves: neighbouring pages land in different sets.
    let mut x = page ^ file.rotate_left(32).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl SetTable {
    /// Sets of `ways` frames over `frames` frames (a remainder of fewer than `ways` frames
    /// is left unused).
    pub fn new(frames: usize, ways: usize, policy: SetPolicy) -> Self {
        let n = (frames / ways).max(1);
        let sets = (0..n)
            .map(|s| {
                Mutex::new(Set {
                    keys: vec![EMPTY; ways].into(),
                    frames: (0..ways).map(|w| (s * ways + w) as FrameId).collect(),
                    counts: vec![0; ways].into(),
                    stamps: vec![0; ways].into(),
                    tick: 0,
                    hand: 0,
                })
            })
            .collect();
        SetTable { sets, ways, policy, shape: AtomicU64::new(shape_of(n)), resizing: Mutex::new(()) }
    }

    /// Sets in use now.
    pub fn set_count(&self) -> usize {
        active(self.shape.load(Ordering::Acquire)) // Acquire: see `lock_home`
    }

    /// Most sets the arena can hold.
    pub fn max_sets(&self) -> usize {
        self.sets.len()
    }

    /// Frames per set.
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Frames in use now (the rest of the arena is idle).
    pub fn frames_used(&self) -> usize {
        self.set_count() * self.ways
    }

    /// Locks the set (file, page) lives in, as the shape is once the lock is held.
    fn lock_home(&self, file: u64, page: u64) -> (usize, MutexGuard<'_, Set>) {
        let h = hash(file, page);
        loop {
            // Acquire (both): the shape is changed under the locks of the sets it moves pages
            // between, so once we hold a set's lock its latest shape is visible here.
            let si = route(self.shape.load(Ordering::Acquire), h);
            let g = lock(&self.sets[si]);
            if route(self.shape.load(Ordering::Acquire), h) == si {
                return (si, g);
            }
        }
    }

    #[cfg(all(test, not(loom)))]
    fn set_of(&self, file: u64, page: u64) -> usize {
        self.lock_home(file, page).0
    }

    fn touch(&self, s: &mut Set, way: usize) {
        s.tick = s.tick.wrapping_add(1);
        s.stamps[way] = s.tick;
        s.counts[way] = s.counts[way].saturating_add(1).min(self.policy.max_count());
    }

    /// The frame holding (file, page), counting a hit for the policy.
    pub fn lookup(&self, file: u64, page: u64) -> Option<FrameId> {
        let (_, mut s) = self.lock_home(file, page);
        let way = s.keys.iter().position(|&k| k == (file, page))?;
        self.touch(&mut s, way);
        Some(s.frames[way])
    }

    /// The frame holding (file, page), without counting a hit.
    pub fn peek(&self, file: u64, page: u64) -> Option<FrameId> {
        let (_, s) = self.lock_home(file, page);
        s.keys.iter().position(|&k| k == (file, page)).map(|w| s.frames[w])
    }

    /// Finds (file, page) in its set or gives it a frame there: an empty way whose frame is
    /// free, else a victim by the set's policy. A `New` frame is `UNOWNED`; the caller owns
    /// it and must publish it (or remove the entry and release it).
    pub fn claim(&self, file: u64, page: u64, frames: &FrameTable) -> Claim {
        let (_, mut s) = self.lock_home(file, page);
        if let Some(way) = s.keys.iter().position(|&k| k == (file, page)) {
            return Claim::Existing(s.frames[way]);
        }
        // An empty way whose frame has been released (a removal empties the way first and
        // releases the frame just after).
        let free =
            (0..self.ways).find(|&w| s.keys[w] == EMPTY && frames.state(s.frames[w]).load() == UNOWNED);
        if let Some(way) = free {
            return self.take(&mut s, way, file, page, false);
        }
        match self.pick_victim(&mut s, frames) {
            Ok(way) => self.take(&mut s, way, file, page, true),
            Err(Some(w)) => Claim::Dirty(s.frames[w]),
            Err(None) => {
                Claim::Full(s.frames.iter().copied().find(|&id| under_write_back(frames.state(id).load())))
            }
        }
    }

    fn take(&self, s: &mut Set, way: usize, file: u64, page: u64, evicted: bool) -> Claim {
        s.keys[way] = (file, page);
        s.counts[way] = 0;
        self.touch(s, way);
        Claim::New { frame: s.frames[way], evicted }
    }

    /// Claims a victim way (its frame becomes `UNOWNED`); or the first dirty candidate.
    fn pick_victim(&self, s: &mut Set, frames: &FrameTable) -> Result<usize, Option<usize>> {
        let mut dirty = None;
        let try_way = |s: &Set, w: usize, dirty: &mut Option<usize>| -> bool {
            match claim_frame(frames, s.frames[w]) {
                ClaimResult::Claimed => true,
                ClaimResult::Dirty => {
                    dirty.get_or_insert(w);
                    false
                }
                ClaimResult::Referenced | ClaimResult::Busy => false,
            }
        };
        match self.policy {
            SetPolicy::GClock | SetPolicy::Clock => {
                // Each pass lowers every counter by one, so max_count + 2 passes reach zero.
                for _ in 0..self.ways * (self.policy.max_count() as usize + 2) {
                    let w = s.hand;
                    s.hand = (s.hand + 1) % self.ways;
                    if s.keys[w] == EMPTY {
                        continue;
                    }
                    if s.counts[w] > 0 {
                        s.counts[w] -= 1;
                        continue;
                    }
                    if try_way(s, w, &mut dirty) {
                        return Ok(w);
                    }
                }
            }
            SetPolicy::Lru | SetPolicy::Lfu => {
                for _ in 0..2 {
                    let mut order: Vec<usize> = (0..self.ways).filter(|&w| s.keys[w] != EMPTY).collect();
                    // Oldest first (ticks wrap: compare by age from the current tick).
                    let age = |s: &Set, w: usize| s.tick.wrapping_sub(s.stamps[w]);
                    match self.policy {
                        SetPolicy::Lru => order.sort_by_key(|&w| std::cmp::Reverse(age(s, w))),
                        _ => order.sort_by_key(|&w| (s.counts[w], std::cmp::Reverse(age(s, w)))),
                    }
                    if let Some(w) = order.into_iter().find(|&w| try_way(s, w, &mut dirty)) {
                        return Ok(w);
                    }
                }
            }
        }
        Err(dirty)
    }

    /// Removes (file, page) if it is recorded in `frame`'s way.
    pub fn remove_if(&self, file: u64, page: u64, frame: FrameId) -> bool {
        let (_, mut s) = self.lock_home(file, page);
        match (0..self.ways).find(|&w| s.keys[w] == (file, page) && s.frames[w] == frame) {
            Some(w) => {
                s.keys[w] = EMPTY;
                true
            }
            None => false,
        }
    }

    /// Grows by one set (a split). False if every set is already in use.
    pub fn split_one(&self) -> bool {
        let _one = lock(&self.resizing);
        // Acquire: see `lock_home`; we are the only writer (the resize mutex).
        let old = self.shape.load(Ordering::Acquire);
        let n = active(old);
        if n >= self.sets.len() {
            return false;
        }
        let new = shape_of(n + 1);
        let (level, split) = level_split(old);
        let (i, j) = (split as usize, split as usize + (1usize << level));
        debug_assert_eq!(j, n);
        let mut a = lock(&self.sets[i]);
        let mut b = lock(&self.sets[j]);
        for w in 0..self.ways {
            let k = a.keys[w];
            if k == EMPTY || route(new, hash(k.0, k.1)) != j {
                continue;
            }
            // A deactivated set has only empty ways, so there is room for every page.
            let Some(v) = (0..self.ways).find(|&v| b.keys[v] == EMPTY) else { break };
            Self::swap_ways(&mut a, w, &mut b, v);
        }
        // Release: with the set locks, publishes the moves to whoever routes by the new shape.
        self.shape.store(new, Ordering::Release);
        true
    }

    /// Moves way `w` of `a` (a page and its frame) into way `v` of `b` (empty), and `b`'s
    /// frame into `a`.
    fn swap_ways(a: &mut Set, w: usize, b: &mut Set, v: usize) {
        std::mem::swap(&mut a.keys[w], &mut b.keys[v]);
        std::mem::swap(&mut a.frames[w], &mut b.frames[v]);
        std::mem::swap(&mut a.counts[w], &mut b.counts[v]);
        b.stamps[v] = b.tick;
    }

    /// Shrinks by one set (a merge of the last set into its buddy), evicting clean pages if
    /// the two hold more than one set's worth.
    pub fn merge_one(&self, frames: &FrameTable) -> Merge {
        let _one = lock(&self.resizing);
        let old = self.shape.load(Ordering::Acquire); // Acquire: see `split_one`
        let n = active(old);
        if n <= 1 {
            return Merge::Smallest;
        }
        let new = shape_of(n - 1);
        let (_, split) = level_split(new);
        let (i, j) = (split as usize, n - 1);
        let mut a = lock(&self.sets[i]);
        let mut b = lock(&self.sets[j]);
        let used = |s: &Set| s.keys.iter().filter(|&&k| k != EMPTY).count();
        // Make room: evict clean, unpinned pages of either set until one set's worth is left.
        while used(&a) + used(&b) > self.ways {
            let mut dirty = None;
            let evicted = [&mut *b, &mut *a].into_iter().any(|s| {
                let victim = (0..self.ways).find(|&w| {
                    if s.keys[w] == EMPTY {
                        return false;
                    }
                    match claim_frame(frames, s.frames[w]) {
                        ClaimResult::Claimed => true,
                        ClaimResult::Dirty => {
                            dirty.get_or_insert(s.frames[w]);
                            false
                        }
                        ClaimResult::Referenced | ClaimResult::Busy => false,
                    }
                });
                victim.map(|w| s.keys[w] = EMPTY).is_some()
            });
            if !evicted {
                return dirty.map_or(Merge::Busy, Merge::Dirty);
            }
        }
        for w in 0..self.ways {
            if b.keys[w] == EMPTY {
                continue;
            }
            // Room was made above, so `a` has an empty way for each page left in `b`.
            let Some(v) = (0..self.ways).find(|&v| a.keys[v] == EMPTY) else { break };
            Self::swap_ways(&mut b, w, &mut a, v);
        }
        // Release: see `split_one`.
        self.shape.store(new, Ordering::Release);
        // The deactivated set's free frames give their memory back. Still under the resize
        // mutex: no split can reactivate the set and hand a frame out before its discard.
        // (An emptied way's frame may still be on its way to `UNOWNED`; its memory is kept.)
        let freed: Vec<FrameId> =
            b.frames.iter().copied().filter(|&f| frames.state(f).load() == UNOWNED).collect();
        drop((a, b));
        for &f in &freed {
            frames.discard(f);
        }
        Merge::Done(freed)
    }

    /// Every page of `file` at or past `from`, with its frame (a scan of all sets).
    pub fn entries_of(&self, file: u64, from: u64) -> Vec<(u64, FrameId)> {
        // No split or merge during the scan: one could move a page from a set not yet scanned
        // into one already scanned, and sync or truncation would miss it.
        let _no_resize = lock(&self.resizing);
        let mut out = Vec::new();
        for set in self.sets.iter() {
            let s = lock(set);
            for (w, &(f, p)) in s.keys.iter().enumerate() {
                if f == file && p >= from && (f, p) != EMPTY {
                    out.push((p, s.frames[w]));
                }
            }
        }
        out
    }

    /// Bytes the sets use.
    pub fn memory_bytes(&self) -> usize {
        self.sets.len() * (std::mem::size_of::<Mutex<Set>>() + self.ways * (16 + 4 + 1 + 4))
    }
}

/// One file's view of the cache's sets.
pub struct SetAssocIndex {
    table: Arc<SetTable>,
    file: u64,
}

impl SetAssocIndex {
    /// The view of `file` in `table`.
    pub fn new(table: Arc<SetTable>, file: u64) -> Self {
        SetAssocIndex { table, file }
    }

    /// The sets.
    pub fn table(&self) -> &Arc<SetTable> {
        &self.table
    }
}

impl PageIndex for SetAssocIndex {
    fn get(&self, page: u64) -> Option<FrameId> {
        self.table.lookup(self.file, page)
    }

    fn peek(&self, page: u64) -> Option<FrameId> {
        self.table.peek(self.file, page)
    }

    /// Entries are made by [`SetTable::claim`]; this only confirms one: `Ok` if `frame`'s
    /// way holds the page, else `Err` with the frame that does (or `frame` itself if the page
    /// is absent and its way belongs to another set or page).
    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        match self.table.peek(self.file, page) {
            Some(f) if f == frame => Ok(()),
            Some(f) => Err(f),
            None => Err(frame),
        }
    }

    fn remove_if(&self, page: u64, frame: FrameId) -> bool {
        self.table.remove_if(self.file, page, frame)
    }

    fn entries_from(&self, from: u64) -> Vec<(u64, FrameId)> {
        self.table.entries_of(self.file, from)
    }

    fn len(&self) -> usize {
        self.table.entries_of(self.file, 0).len()
    }

    /// Only the handle: the sets are shared by every file and reported once by the cache.
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::frame::state::{DIRTY, VALID};
    use crate::frame::PageKey;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Publishes a claimed frame as a clean, valid, unpinned page (what a load does).
    fn publish(t: &FrameTable, id: FrameId, key: PageKey, dirty: bool) {
        t.set_key(id, key);
        t.state(id).assign_locked();
        t.unlock(id, if dirty { VALID | DIRTY } else { VALID }, 0);
        t.state(id).unpin();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Access(u64, bool),
        Remove(u64),
        Pin(u64),
        UnpinAll,
        Grow,
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..200, any::<bool>()).prop_map(|(p, d)| Op::Access(p, d)),
            1 => (0u64..200).prop_map(Op::Remove),
            1 => (0u64..200).prop_map(Op::Pin),
            1 => Just(Op::UnpinAll),
            1 => Just(Op::Grow),
            1 => Just(Op::Shrink),
        ]
    }

    proptest! {
        /// Against a map of resident pages, while the table grows and shrinks: a page is found
        /// iff the model has it, in the frame it was given (resizing moves pages with their
        /// frames); no two pages share a frame; pinned and dirty pages are never evicted
        /// (dirty ones are reported for write-back instead), not even by a merge.
        #[test]
        fn sets_match_a_model(ops in proptest::collection::vec(op(), 1..300),
                              policy in proptest::sample::select(SetPolicy::ALL.to_vec()),
                              ways in 1usize..6) {
            let frames = FrameTable::new(4 * ways + 1, 4096).unwrap();
            let t = SetTable::new(frames.len(), ways, policy);
            let mut model: BTreeMap<u64, FrameId> = BTreeMap::new();
            let mut pinned: Vec<FrameId> = Vec::new();
            for op in ops {
                match op {
                    Op::Access(p, dirty) => match t.claim(7, p, &frames) {
                        Claim::Existing(f) => prop_assert_eq!(model.get(&p), Some(&f)),
                        Claim::New { frame, evicted } => {
                            prop_assert!(!model.contains_key(&p));
                            let victim = model.iter().find(|(_, &f)| f == frame).map(|(&q, _)| q);
                            prop_assert_eq!(victim.is_some(), evicted);
                            if let Some(q) = victim {
                                prop_assert!(frames.state(frame).load() & DIRTY == 0, "evicted a dirty page");
                                prop_assert!(!pinned.contains(&frame), "evicted a pinned page");
                                model.remove(&q);
                            }
                            publish(&frames, frame, PageKey { file: 7, page: p }, dirty);
                            model.insert(p, frame);
                        }
                        Claim::Dirty(f) => {
                            // Write it back: clean and retry later.
                            prop_assert!(model.values().any(|&m| m == f));
                            let st = frames.state(f);
                            prop_assert!(st.try_lock_dirty());
                            frames.unlock(f, 0, DIRTY);
                        }
                        Claim::Full(_) => {}
                    },
                    Op::Remove(p) => {
                        let want = model.get(&p).copied();
                        let f = want.unwrap_or(0);
                        prop_assert_eq!(t.remove_if(7, p, f), want.is_some());
                        if let Some(f) = want {
                            model.remove(&p);
                            if !pinned.contains(&f) {
                                // What release_frame does once the entry is gone.
                                let st = frames.state(f);
                                st.try_pin().unwrap();
                                assert!(st.try_lock());
                                frames.unlock(f, 0, VALID | DIRTY);
                                assert!(st.try_release(st.load()));
                            }
                        }
                    }
                    Op::Pin(p) => {
                        if let Some(&f) = model.get(&p) {
                            if frames.state(f).try_pin().is_ok() {
                                pinned.push(f);
                            }
                        }
                    }
                    Op::UnpinAll => {
                        for f in pinned.drain(..) {
                            frames.state(f).unpin();
                        }
                    }
                    Op::Grow => {
                        let n = t.set_count();
                        prop_assert_eq!(t.split_one(), n < t.max_sets());
                    }
                    Op::Shrink => {
                        let r = t.merge_one(&frames);
                        // Pages of the two sets beyond one set's worth may have been evicted
                        // (also by a merge that then stopped at a dirty or pinned page).
                        let gone: Vec<u64> = model.keys().copied().filter(|&p| t.lookup(7, p).is_none()).collect();
                        for p in gone {
                            let f = model.remove(&p).unwrap();
                            prop_assert!(!pinned.contains(&f), "a merge evicted a pinned page");
                            prop_assert_eq!(frames.state(f).load(), UNOWNED, "a merge evicted a dirty page");
                        }
                        match r {
                            Merge::Done(freed) => {
                                for f in freed {
                                    prop_assert!(model.values().all(|&m| m != f), "a freed frame holds a page");
                                }
                            }
                            Merge::Dirty(f) => {
                                prop_assert!(model.values().any(|&m| m == f));
                                prop_assert!(frames.state(f).try_lock_dirty());
                                frames.unlock(f, 0, DIRTY);
                            }
                            Merge::Busy | Merge::Smallest => {}
                        }
                    }
                }
                prop_assert!(t.set_count() * ways <= frames.len());
                let mut seen = std::collections::BTreeSet::new();
                for (&p, &f) in &model {
                    prop_assert_eq!(t.lookup(7, p), Some(f));
                    prop_assert!(t.set_of(7, p) < t.set_count());
                    prop_assert!(seen.insert(f), "two pages in one frame");
                }
                let mut all = t.entries_of(7, 0);
                all.sort();
                prop_assert_eq!(all, model.iter().map(|(&p, &f)| (p, f)).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn gclock_keeps_the_hot_page() {
        let frames = FrameTable::new(4, 4096).unwrap();
        let t = SetTable::new(4, 4, SetPolicy::GClock);
        let fill = |p| match t.claim(1, p, &frames) {
            Claim::New { frame, .. } => publish(&frames, frame, PageKey { file: 1, page: p }, false),
            c => panic!("{c:?}"),
        };
        for p in 0..4 {
            fill(p);
        }
        for _ in 0..3 {
            t.lookup(1, 2); // page 2 is hot
        }
        // Four cold pages replace the other three and one of themselves; the hot page's count
        // (3) outlasts the hand's passes.
        for p in 10..14 {
            fill(p);
        }
        assert!(t.lookup(1, 2).is_some(), "the hot page was evicted");
        assert_eq!((10..14).filter(|&p| t.lookup(1, p).is_some()).count(), 3);
    }
}
