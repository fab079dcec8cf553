//! SAFS's set-associative cache (seed 002 §4): the frames are split into small page sets of
//! `ways` frames (12 by default); a hash of (file, page) picks the one set a page may live in,
//! and each set is managed alone under its own lock, with no lists: lookup, insertion and
//! eviction all happen inside the set. So there is no global index and no global replacement
//! state for threads to contend on, at the price of restricted associativity (a hot set evicts
//! while another set has cold pages).
//!
//! Frames are positional: way `w` of set `s` is frame `s * ways + w`. The set records which
//! (file, page) each way holds and one replacement counter per way. A miss claims a way
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
//! Not done yet: online resizing by linear hashing (§4.1); the set count is fixed at start.
//! There are no `READY` entries, so reads through this index take the pinned path.
//!
//! # Locking
//! A set's lock is a leaf: held for one lookup, claim or removal, never while waiting for a
//! frame (claims only try-claim frames).

use super::PageIndex;
use crate::error::{Error, ErrorKind};
use crate::frame::state::{ClaimResult, UNOWNED};
use crate::frame::{FrameId, FrameTable};
use crate::sync::{lock, Arc, Mutex};

/// Replacement inside a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetPolicy {
    /// Generalized CLOCK, counters up to 3.
    #[default]
    GClock,
    /// CLOCK: GClock with counters up to 1.
    Clock,
    /// Least recently used.
    Lru,
    /// Least frequently used.
    Lfu,
}

impl SetPolicy {
    /// Every policy.
    pub const ALL: [SetPolicy; 4] = [SetPolicy::GClock, SetPolicy::Clock, SetPolicy::Lru, SetPolicy::Lfu];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SetPolicy::GClock => "gclock",
            SetPolicy::Clock => "clock",
            SetPolicy::Lru => "lru",
            SetPolicy::Lfu => "lfu",
        }
    }

    fn max_count(self) -> u8 {
        match self {
            SetPolicy::Clock => 1,
            SetPolicy::GClock => 3,
            SetPolicy::Lru | SetPolicy::Lfu => u8::MAX,
        }
    }
}

impl std::str::FromStr for SetPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        SetPolicy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("unknown set policy {s:?}: expected gclock, clock, lru or lfu"),
            )
        })
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
    /// GClock/Clock/LFU counter per way.
    counts: Box<[u8]>,
    /// Last access tick per way (LRU, and LFU's tie-break).
    stamps: Box<[u32]>,
    tick: u32,
    hand: usize,
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
    /// Every frame of the set is pinned or under I/O.
    Full,
}

/// The page sets of a cache.
pub struct SetTable {
    sets: Box<[Mutex<Set>]>,
    ways: usize,
    policy: SetPolicy,
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
            .map(|_| {
                Mutex::new(Set {
                    keys: vec![EMPTY; ways].into(),
                    counts: vec![0; ways].into(),
                    stamps: vec![0; ways].into(),
                    tick: 0,
                    hand: 0,
                })
            })
            .collect();
        SetTable { sets, ways, policy }
    }

    /// Number of sets.
    pub fn set_count(&self) -> usize {
        self.sets.len()
    }

    /// Frames the sets use (the rest of the arena, fewer than `ways`, is idle).
    pub fn frames_used(&self) -> usize {
        self.sets.len() * self.ways
    }

    fn set_of(&self, file: u64, page: u64) -> usize {
        (hash(file, page) % self.sets.len() as u64) as usize
    }

    fn frame(&self, set: usize, way: usize) -> FrameId {
        (set * self.ways + way) as FrameId
    }

    fn touch(&self, s: &mut Set, way: usize) {
        s.tick = s.tick.wrapping_add(1);
        s.stamps[way] = s.tick;
        s.counts[way] = s.counts[way].saturating_add(1).min(self.policy.max_count());
    }

    /// The frame holding (file, page), counting a hit for the policy.
    pub fn lookup(&self, file: u64, page: u64) -> Option<FrameId> {
        let si = self.set_of(file, page);
        let mut s = lock(&self.sets[si]);
        let way = s.keys.iter().position(|&k| k == (file, page))?;
        self.touch(&mut s, way);
        Some(self.frame(si, way))
    }

    /// Finds (file, page) in its set or gives it a frame there: an empty way whose frame is
    /// free, else a victim by the set's policy. A `New` frame is `UNOWNED`; the caller owns
    /// it and must publish it (or remove the entry and release it).
    pub fn claim(&self, file: u64, page: u64, frames: &FrameTable) -> Claim {
        let si = self.set_of(file, page);
        let mut s = lock(&self.sets[si]);
        if let Some(way) = s.keys.iter().position(|&k| k == (file, page)) {
            return Claim::Existing(self.frame(si, way));
        }
        // An empty way whose frame has been released (a removal empties the way first and
        // releases the frame just after).
        let free =
            (0..self.ways).find(|&w| s.keys[w] == EMPTY && frames.state(self.frame(si, w)).load() == UNOWNED);
        if let Some(way) = free {
            return self.take(&mut s, si, way, file, page, false);
        }
        match self.pick_victim(&mut s, si, frames) {
            Ok(way) => self.take(&mut s, si, way, file, page, true),
            Err(dirty) => dirty.map_or(Claim::Full, |w| Claim::Dirty(self.frame(si, w))),
        }
    }

    fn take(&self, s: &mut Set, si: usize, way: usize, file: u64, page: u64, evicted: bool) -> Claim {
        s.keys[way] = (file, page);
        s.counts[way] = 0;
        self.touch(s, way);
        Claim::New { frame: self.frame(si, way), evicted }
    }

    /// Claims a victim way (its frame becomes `UNOWNED`); or the first dirty candidate.
    fn pick_victim(&self, s: &mut Set, si: usize, frames: &FrameTable) -> Result<usize, Option<usize>> {
        let mut dirty = None;
        // Hits are already counted by `lookup`, so the state word's reference bit (set by
        // every pin, and by the load itself) is not a second vote: clear it and claim.
        let try_way = |w: usize, dirty: &mut Option<usize>| -> bool {
            let st = frames.state(self.frame(si, w));
            let mut r = st.try_claim();
            if r == ClaimResult::Referenced {
                r = st.try_claim();
            }
            if r == ClaimResult::Dirty {
                dirty.get_or_insert(w);
            }
            r == ClaimResult::Claimed
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
                    if try_way(w, &mut dirty) {
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
                    if let Some(w) = order.into_iter().find(|&w| try_way(w, &mut dirty)) {
                        return Ok(w);
                    }
                }
            }
        }
        Err(dirty)
    }

    /// Removes (file, page) if it is recorded in `frame`'s way.
    pub fn remove_if(&self, file: u64, page: u64, frame: FrameId) -> bool {
        let si = self.set_of(file, page);
        let (set, way) = (frame as usize / self.ways, frame as usize % self.ways);
        if set != si {
            return false;
        }
        let mut s = lock(&self.sets[si]);
        if s.keys[way] != (file, page) {
            return false;
        }
        s.keys[way] = EMPTY;
        true
    }

    /// Every page of `file` at or past `from`, with its frame (a scan of all sets).
    pub fn entries_of(&self, file: u64, from: u64) -> Vec<(u64, FrameId)> {
        let mut out = Vec::new();
        for (si, set) in self.sets.iter().enumerate() {
            let s = lock(set);
            for (w, &(f, p)) in s.keys.iter().enumerate() {
                if f == file && p >= from && (f, p) != EMPTY {
                    out.push((p, self.frame(si, w)));
                }
            }
        }
        out
    }

    /// Bytes the sets use.
    pub fn memory_bytes(&self) -> usize {
        self.sets.len() * (std::mem::size_of::<Mutex<Set>>() + self.ways * (16 + 1 + 4))
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

    /// Entries are made by [`SetTable::claim`]; this only confirms one: `Ok` if `frame`'s
    /// way holds the page, else `Err` with the frame that does (or `frame` itself if the page
    /// is absent and its way belongs to another set or page).
    fn insert_if_absent(&self, page: u64, frame: FrameId) -> Result<(), FrameId> {
        match self.table.lookup(self.file, page) {
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
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..200, any::<bool>()).prop_map(|(p, d)| Op::Access(p, d)),
            1 => (0u64..200).prop_map(Op::Remove),
            1 => (0u64..200).prop_map(Op::Pin),
            1 => Just(Op::UnpinAll),
        ]
    }

    proptest! {
        /// Against a map of resident pages: a page is found iff the model has it, in a frame
        /// of its own set that holds it; no two pages share a frame; pinned and dirty pages
        /// are never evicted (dirty ones are reported for write-back instead).
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
                        Claim::Full => {}
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
                }
                let mut seen = std::collections::BTreeSet::new();
                for (&p, &f) in &model {
                    prop_assert_eq!(t.lookup(7, p), Some(f));
                    prop_assert_eq!(f as usize / ways, t.set_of(7, p));
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
