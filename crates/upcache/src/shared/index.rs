//! The shared page index: (file slot, page) → frame. [`Index`] is what the cache uses: the
//! ccXArray trees of `tree.rs` (`SharedConfig::index` radix, the default), the hash below, or
//! the sets of frames further below (set-assoc).
//!
//! # The hash index
//! As PostgreSQL's buffer mapping table.
//! A power-of-two array of bucket heads, each the first frame + 1 of a chain linked through
//! the frames' `next` words. Chains change only under their partition's lock (bucket modulo
//! [`PARTITIONS`], an [`OwnerLock`]), so lookups by the chain's writers are exact. Readers
//! follow a chain with no lock at all: an answer is only a hint, which the reader confirms by
//! the frame's key under the frame's word (`super::frame`); a chain that changed under it can
//! make it miss or wander (a frame moved to another chain), so a lock-free lookup gives up
//! after [`MAX_HOPS`] and a miss is re-checked under the partition lock before a load.
//!
//! # Invariants
//! - A frame is in the chain of `home`'s bucket iff its `home` is not 0; `home` changes only
//!   under that partition's lock and the frame's lock.
//! - At most one frame per key has it as `home`: an insert first looks under the lock.
//! - A partition whose lock holder died is rebuilt from the frames' `home`s before use: one
//!   load per frame, stable under the partition's lock.
//! - While a partition's holder is stopped, no chain of it changes: a lock-free lookup there
//!   is exact (`file.rs` reads a page it does not find from the OS file, uncached).
//!
//! # The sets
//! SAFS's set-associative cache (seed 002 §4): the frames are cut into sets of
//! `SharedConfig::set_ways` (the last set has the rest), a hash of the key picks the one set a
//! page may live in, and a miss takes its frame from that set (`Inner::claim`, a clock hand
//! per set in the bucket heads' region). The index is the frames' `home` words, with a tag per
//! frame packed a cache line per set: a lookup reads the set's tags and the `home` of a frame
//! whose tag matches, with no lock and nothing to follow.
//! - A frame's `home` is 0 or a key of its own set; while it is a key, its tag is that key's.
//! - At most one frame per key has it as `home`: `home` is set only under the set's partition
//!   lock (set modulo [`PARTITIONS`]), after a look at the set's others, and the frame's lock.
//!   It is cleared under the frame's lock alone (a placer that still sees it looks again).
//! - A dead holder of a set's partition lock left nothing to rebuild: a place is one store.

use std::sync::atomic::{AtomicU32, Ordering};

use super::files::FileEntry;
use super::frame::{key_gen, key_page, key_slot, FrameMeta};
use super::tree::{Forest, Insert};
use crate::shm::{Acquired, OwnerLock};

/// The page index of one shared cache, as one process sees it.
pub(crate) enum Index<'a> {
    /// Per-file trees, and the frames whose `home`s they hold: lock-free (ccXArray), or, with
    /// locks (`SharedConfig::index` locked, the kernel's XArray), each file's inserts and
    /// removes under one lock (its slot's partition lock), lookups free as ever.
    Radix(Forest<'a, [FileEntry]>, &'a [FrameMeta], Option<&'a [OwnerLock]>),
    /// Hash chains under partition locks.
    Hash(PageMap<'a>),
    /// Sets of frames, each page in its key's set.
    Sets(SetMap<'a>),
}

/// What putting a frame in the index did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The frame is the page's.
    Yes,
    /// Another frame is the page's (or was as we looked).
    Taken,
    /// Not placed: a wait for a partition's holder was given up.
    No,
    /// Not placed: the tree's node pools are used up; freeing frames frees nodes.
    Full,
    /// Not placed: the file's tree is broken (`tree::Insert::Broken`).
    Broken,
}

impl Index<'_> {
    /// A frame that held `key` as we looked, with no lock: a hint to confirm by the frame's
    /// `home`.
    pub fn hint(&self, key: u64) -> Option<u32> {
        match self {
            Index::Radix(t, ..) => t.get(key_slot(key), key_gen(key), key_page(key)),
            Index::Hash(m) => m.find_hint(key),
            Index::Sets(m) => m.find(key),
        }
    }

    /// Starts fetching what a lookup of `key` reads last (the tree's leaf slot), for a caller
    /// that looks it up after some other work. A hint; the hash and the sets do nothing.
    pub fn prefetch(&self, key: u64) {
        if let Index::Radix(t, ..) = self {
            t.prefetch(key_slot(key), key_gen(key), key_page(key));
        }
    }

    /// The frame that holds `key`, exactly as of some moment of the call (the hash takes the
    /// partition's lock for it; a tree's lookup is exact as it is: nodes in use are not freed
    /// under a process that has the file open).
    pub fn find(&self, key: u64, me: u32, alive: &dyn Fn(u32) -> bool) -> Option<u32> {
        match self {
            Index::Radix(..) | Index::Sets(_) => self.hint(key),
            Index::Hash(m) => m.lock(key, me, alive).find(key),
        }
    }

    /// As [`Self::find`], but None once a wait for the hash's partition lock is over and
    /// `give_up` says so of its holder.
    pub fn find_unless(
        &self,
        key: u64,
        me: u32,
        alive: &dyn Fn(u32) -> bool,
        give_up: &dyn Fn(u32) -> bool,
    ) -> Option<Option<u32>> {
        match self {
            Index::Radix(..) | Index::Sets(_) => Some(self.hint(key)),
            Index::Hash(m) => m.lock_unless(key, me, alive, give_up).map(|g| g.find(key)),
        }
    }

    /// Puts frame `f`, which the caller holds locked and gave key `key`, in the index with
    /// `key` as its `home`, unless another frame has `key`.
    pub fn place(
        &self,
        key: u64,
        f: u32,
        me: u32,
        alive: &dyn Fn(u32) -> bool,
        give_up: &dyn Fn(u32) -> bool,
    ) -> Placed {
        match self {
            Index::Radix(t, frames, locks) => {
                let Some(_locked) = tree_lock(*locks, key, me, alive, give_up) else { return Placed::No };
                let m = &frames[f as usize];
                // Release: `home` goes before the slot, so a frame in the tree always has it
                // (a process killed between leaves a `home` the frame's repair clears).
                m.home.store(key, Ordering::Release);
                match t.insert(key_slot(key), key_gen(key), key_page(key), f) {
                    Insert::Placed => Placed::Yes,
                    other => {
                        // Release: as in `remove` below.
                        m.home.store(0, Ordering::Release);
                        match other {
                            Insert::Full => Placed::Full,
                            Insert::Broken => Placed::Broken,
                            _ => Placed::Taken,
                        }
                    }
                }
            }
            Index::Hash(m) => match m.lock_unless(key, me, alive, give_up) {
                Some(g) if g.insert(key, f).is_ok() => Placed::Yes,
                Some(_) => Placed::Taken,
                None => Placed::No,
            },
            Index::Sets(m) => m.place(key, f, me, alive, give_up),
        }
    }

    /// Takes frame `f`, which the caller holds locked, out of the index; false, left in, once
    /// a wait for its partition's holder is over and `give_up` says so of the holder.
    pub fn unplace(
        &self,
        f: u32,
        me: u32,
        alive: &dyn Fn(u32) -> bool,
        give_up: &dyn Fn(u32) -> bool,
    ) -> bool {
        match self {
            Index::Radix(t, frames, locks) => {
                let m = &frames[f as usize];
                let home = m.home();
                if home != 0 {
                    let Some(_locked) = tree_lock(*locks, home, me, alive, give_up) else { return false };
                    t.remove(key_slot(home), key_gen(home), key_page(home), f);
                    // Release: after the slot no longer leads to the frame.
                    m.home.store(0, Ordering::Release);
                }
                true
            }
            Index::Hash(map) => {
                let home = map.frames[f as usize].home();
                if home == 0 {
                    return true;
                }
                let Some(g) = map.lock_unless(home, me, alive, give_up) else { return false };
                g.remove(home, f);
                true
            }
            Index::Sets(m) => {
                m.remove(f);
                true
            }
        }
    }

    /// Takes frame `f`, which the caller holds locked, out of `key`'s place if the tree has it
    /// there although its `home` is not `key` (only a tree left broken could): else every
    /// lookup of `key` would find `f`, fail to confirm it, and look again.
    pub fn drop_stale(&self, key: u64, f: u32) {
        if let Index::Radix(t, frames, _) = self {
            if frames[f as usize].home() != key && t.remove(key_slot(key), key_gen(key), key_page(key), f) {
                log::warn!("shared cache: frame {f} was in the page tree under a page it is not; taken out");
            }
        }
    }

    /// Whether frame `f` is in the index under its `home` (for the repair of a frame whose
    /// holder died between storing `home` and placing it, or taking it out and clearing it).
    pub fn holds_home(&self, f: u32) -> bool {
        match self {
            Index::Radix(_, frames, _) => {
                let home = frames[f as usize].home();
                home != 0 && self.hint(home) == Some(f)
            }
            // The partitions are rebuilt from the `home`s: they agree; a set is its `home`s.
            Index::Hash(m) => m.frames[f as usize].home() != 0,
            Index::Sets(m) => m.frames[f as usize].home() != 0,
        }
    }

    /// The client holding `key`'s partition lock (the hash's, its set's, or its file's in a
    /// locked tree; a lock-free tree has none).
    pub fn holder(&self, key: u64) -> Option<u32> {
        match self {
            Index::Radix(_, _, None) => None,
            Index::Radix(_, _, Some(locks)) => locks[key_slot(key) as usize % PARTITIONS].holder(),
            Index::Hash(m) => m.holder(key),
            Index::Sets(m) => m.locks[m.set_of(key) % PARTITIONS].holder(),
        }
    }

    /// The sets, if the index is theirs.
    pub fn sets(&self) -> Option<&SetMap<'_>> {
        match self {
            Index::Sets(m) => Some(m),
            _ => None,
        }
    }

    /// The frames the tree has for pages `from..to` of generation `gen` of file `slot` that
    /// `keep` takes, with their keys; None for the hash and the sets, which cannot list a
    /// file's pages.
    pub fn pages(
        &self,
        slot: u32,
        gen: u32,
        (from, to): (u64, u64),
        keep: &dyn Fn(u32) -> bool,
    ) -> Option<Vec<(u32, u64)>> {
        match self {
            Index::Radix(t, ..) => Some(
                t.range_where(slot, gen, from, to, keep)
                    .into_iter()
                    .map(|(f, page)| (f, super::frame::key(slot, gen, page)))
                    .collect(),
            ),
            Index::Hash(_) | Index::Sets(_) => None,
        }
    }
}

/// In a locked tree (`locks`), the lock of `key`'s file taken for `me`, let go when the guard
/// drops (Some(None) in a lock-free tree); None once a wait is over and `give_up` says so of
/// its holder. Nothing to repair after a dead holder: a tree change is whole or undone by
/// the tree's own protocol.
fn tree_lock<'l>(
    locks: Option<&'l [OwnerLock]>,
    key: u64,
    me: u32,
    alive: &dyn Fn(u32) -> bool,
    give_up: &dyn Fn(u32) -> bool,
) -> Option<Option<Unlock<'l>>> {
    let Some(locks) = locks else { return Some(None) };
    let lock = &locks[key_slot(key) as usize % PARTITIONS];
    lock.lock_unless(me, alive, give_up)?;
    Some(Some(Unlock(lock, me)))
}

/// Unlocks a lock of ours when dropped.
struct Unlock<'a>(&'a OwnerLock, u32);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.unlock(self.1);
    }
}

/// Partition locks: enough that two processes rarely meet on one.
pub(crate) const PARTITIONS: usize = 1024;
/// Frames a lock-free lookup follows before it gives up.
const MAX_HOPS: usize = 64;

/// A view of the index's regions in one process.
pub(crate) struct PageMap<'a> {
    pub heads: &'a [AtomicU32],
    pub locks: &'a [OwnerLock],
    pub frames: &'a [FrameMeta],
}

fn hash(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl PageMap<'_> {
    fn bucket(&self, key: u64) -> usize {
        // The product's top bits, which every bit of the key moves (Fibonacci hashing): its
        // low bits move only with the key's low bits, and would put page p of every file in
        // one chain. `heads.len()` is a power of two of at least `PARTITIONS`.
        (hash(key) >> (64 - self.heads.len().trailing_zeros())) as usize
    }

    fn partition(&self, key: u64) -> usize {
        self.bucket(key) % PARTITIONS
    }

    /// A frame that held `key` as the chain was followed, with no lock: a hint to confirm.
    pub fn find_hint(&self, key: u64) -> Option<u32> {
        // Acquire (heads and links): a frame published into a chain comes with its key.
        let mut at = self.heads[self.bucket(key)].load(Ordering::Acquire);
        for _ in 0..MAX_HOPS {
            let f = at.checked_sub(1)?;
            let m = self.frames.get(f as usize)?;
            if m.key() == key {
                return Some(f);
            }
            at = m.next.load(Ordering::Acquire);
        }
        None
    }

    /// Takes `key`'s partition lock for `me`, rebuilding the partition if its holder died.
    pub fn lock(&self, key: u64, me: u32, alive: &dyn Fn(u32) -> bool) -> PartitionGuard<'_, '_> {
        self.lock_unless(key, me, alive, &|_| false).expect("never given up")
    }

    /// As [`Self::lock`], but None once a wait is over and `give_up` says so of the holder (a
    /// stopped process: a reader reads around it, a claimer passes over its victim).
    pub fn lock_unless(
        &self,
        key: u64,
        me: u32,
        alive: &dyn Fn(u32) -> bool,
        give_up: &dyn Fn(u32) -> bool,
    ) -> Option<PartitionGuard<'_, '_>> {
        let p = self.partition(key);
        if let Acquired::OwnerDied(dead) = self.locks[p].lock_unless(me, alive, give_up)? {
            log::warn!("shared cache: client {dead} died changing index partition {p}; rebuilding it");
            self.rebuild(p);
        }
        Some(PartitionGuard { map: self, p, me })
    }

    /// The client holding `key`'s partition lock, if any.
    pub fn holder(&self, key: u64) -> Option<u32> {
        self.locks[self.partition(key)].holder()
    }

    /// Relinks partition `p`'s chains from the frames' `home`s (its lock held).
    pub fn rebuild(&self, p: usize) {
        for b in (p..self.heads.len()).step_by(PARTITIONS) {
            // Relaxed: readers of a chain being rebuilt may miss; misses are re-checked under
            // the lock we hold.
            self.heads[b].store(0, Ordering::Relaxed);
        }
        for (f, m) in self.frames.iter().enumerate() {
            let key = m.home();
            if key != 0 && self.partition(key) == p {
                let head = &self.heads[self.bucket(key)];
                // Relaxed/Release: as in `insert`.
                m.next.store(head.load(Ordering::Relaxed), Ordering::Relaxed);
                head.store(f as u32 + 1, Ordering::Release);
            }
        }
    }
}

/// A view of the sets of frames in one process.
pub(crate) struct SetMap<'a> {
    /// The partition locks (a set's is its number modulo [`PARTITIONS`]).
    pub locks: &'a [OwnerLock],
    pub frames: &'a [FrameMeta],
    /// Each set's clock hand: frames its claims passed.
    pub hands: &'a [AtomicU32],
    /// Each frame's tag ([`tag`] of its `home`, or 0), `stride` words per set, so that a
    /// lookup reads one cache line for the whole set and then the `home` of a frame whose tag
    /// matches, not every frame's metadata.
    pub tags: &'a [AtomicU32],
    /// Frames per set (the last may have fewer).
    pub ways: usize,
    /// `count(frames.len(), ways)`.
    pub sets: usize,
}

/// A key's tag in its set: never 0, the hash's low half (its high half picks the set).
fn tag(key: u64) -> u32 {
    hash(key) as u32 | 1
}

impl SetMap<'_> {
    /// How many sets `frames` frames of `ways` make.
    pub fn count(frames: usize, ways: usize) -> usize {
        frames.div_ceil(ways.max(1)).max(1)
    }

    /// Tag words per set: the ways rounded up to a cache line's 16.
    pub fn stride(ways: usize) -> usize {
        ways.max(1).next_multiple_of(16)
    }

    /// The set page `key` lives in.
    pub fn set_of(&self, key: u64) -> usize {
        // The hash's top half scaled to the sets: every bit of the key moves it (as `bucket`).
        (((hash(key) >> 32) * self.sets as u64) >> 32) as usize
    }

    /// The frames of set `s`.
    pub fn frames_of(&self, s: usize) -> std::ops::Range<usize> {
        let first = (s * self.ways).min(self.frames.len());
        first..(first + self.ways).min(self.frames.len())
    }

    /// Frame `f`'s tag word.
    fn tag_of(&self, f: u32) -> &AtomicU32 {
        let f = f as usize;
        &self.tags[f / self.ways * Self::stride(self.ways) + f % self.ways]
    }

    /// The frame whose `home` is `key` as its tag and `home` were loaded (a place stores the
    /// tag before `home`, a removal clears `home` before the tag; a `home` is set only to a key
    /// no other frame of the set has). A miss is exact per way as of its tag's load: a page
    /// evicted and placed again in a way already passed during the scan is missed, as a hash
    /// chain's lock-free walk may (the callers that need an exact miss recheck, or lose
    /// nothing by it).
    pub fn find(&self, key: u64) -> Option<u32> {
        let s = self.set_of(key);
        let set = self.frames_of(s);
        let t = tag(key);
        let tags = &self.tags[s * Self::stride(self.ways)..][..set.len()];
        // Acquire: the frame's `home` loaded next is no older than the tag's place.
        let w = tags
            .iter()
            .enumerate()
            .position(|(w, g)| g.load(Ordering::Acquire) == t && self.frames[set.start + w].home() == key)?;
        Some((set.start + w) as u32)
    }

    /// Makes `key` frame `f`'s `home` unless another frame of the set has it; `No` once a
    /// wait for the set's partition lock is over and `give_up` says so of its holder.
    fn place(
        &self,
        key: u64,
        f: u32,
        me: u32,
        alive: &dyn Fn(u32) -> bool,
        give_up: &dyn Fn(u32) -> bool,
    ) -> Placed {
        let s = self.set_of(key);
        debug_assert!(self.frames_of(s).contains(&(f as usize)), "frame {f} is not of page {key:#x}'s set");
        let lock = &self.locks[s % PARTITIONS];
        match lock.lock_unless(me, alive, give_up) {
            None => return Placed::No,
            // A place is two stores: a dead holder left at most a tag without its `home`, which
            // no lookup takes.
            Some(Acquired::OwnerDied(dead)) => {
                log::warn!("shared cache: client {dead} died placing a page in set {s}")
            }
            Some(Acquired::Clean) => {}
        }
        let placed = if self.find(key).is_some() {
            Placed::Taken
        } else {
            // Release (both): a reader that sees the tag sees the key stored before; one that
            // sees `home` sees the tag.
            self.tag_of(f).store(tag(key), Ordering::Release);
            self.frames[f as usize].home.store(key, Ordering::Release);
            Placed::Yes
        };
        lock.unlock(me);
        placed
    }

    /// Takes frame `f`, which the caller holds locked, out of its set.
    fn remove(&self, f: u32) {
        // Release: after whatever the caller did to the frame as its page's.
        self.frames[f as usize].home.store(0, Ordering::Release);
        // Relaxed: a tag without its `home` is no answer.
        self.tag_of(f).store(0, Ordering::Relaxed);
    }
}

/// A held partition lock; what a chain's writers do goes through it.
pub(crate) struct PartitionGuard<'m, 'a> {
    map: &'m PageMap<'a>,
    p: usize,
    me: u32,
}

impl PartitionGuard<'_, '_> {
    /// The frame in `key`'s chain, exactly (we hold its partition).
    pub fn find(&self, key: u64) -> Option<u32> {
        let map = self.map;
        // Relaxed: the chain changes only under our lock.
        let mut at = map.heads[map.bucket(key)].load(Ordering::Relaxed);
        while let Some(f) = at.checked_sub(1) {
            let m = &map.frames[f as usize];
            if m.key() == key {
                return Some(f);
            }
            at = m.next.load(Ordering::Relaxed);
        }
        None
    }

    /// Puts frame `f`, which holds `key` and which the caller has locked, in the chain, unless
    /// another frame has `key` there: then that frame.
    pub fn insert(&self, key: u64, f: u32) -> Result<(), u32> {
        debug_assert_eq!(self.map.partition(key), self.p);
        if let Some(other) = self.find(key) {
            return Err(other);
        }
        let map = self.map;
        let m = &map.frames[f as usize];
        // Release: a reader that sees `home` sees the key stored before.
        m.home.store(key, Ordering::Release);
        let head = &map.heads[map.bucket(key)];
        // Relaxed: the head changes only under our lock.
        m.next.store(head.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release: a reader that reaches `f` through the head sees its key and link.
        head.store(f + 1, Ordering::Release);
        Ok(())
    }

    /// Takes frame `f`, which holds `key` and which the caller has locked, out of the chain.
    pub fn remove(&self, key: u64, f: u32) {
        let map = self.map;
        let m = &map.frames[f as usize];
        if m.home() != key {
            return;
        }
        let mut link = &map.heads[map.bucket(key)];
        loop {
            // Relaxed: links change only under our lock.
            let at = link.load(Ordering::Relaxed);
            let Some(g) = at.checked_sub(1) else {
                debug_assert!(false, "frame {f} has a home but is not in its chain");
                break;
            };
            if g == f {
                // Release: a reader arriving by `link` sees a whole frame.
                link.store(m.next.load(Ordering::Relaxed), Ordering::Release);
                break;
            }
            link = &map.frames[g as usize].next;
        }
        // Release: `home` goes after the chain no longer leads to the frame.
        m.home.store(0, Ordering::Release);
    }
}

impl Drop for PartitionGuard<'_, '_> {
    fn drop(&mut self) {
        self.map.locks[self.p].unlock(self.me);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shared::frame::key;

    #[test]
    fn every_bit_of_a_key_moves_its_bucket() {
        let heads: Vec<AtomicU32> = (0..1 << 16).map(|_| AtomicU32::new(0)).collect();
        let map = PageMap { heads: &heads, locks: &[], frames: &[] };
        // Page p of two files, or of two generations of one entry, shares a chain rarely.
        let pages = 4096;
        let same = |a: (u32, u32), b: (u32, u32)| {
            (0..pages).filter(|&p| map.bucket(key(a.0, a.1, p)) == map.bucket(key(b.0, b.1, p))).count()
        };
        assert!(same((0, 0), (1, 0)) < 16, "files 0 and 1: {}", same((0, 0), (1, 0)));
        assert!(same((5, 1), (5, 2)) < 16, "generations 1 and 2: {}", same((5, 1), (5, 2)));
        // A file's consecutive pages spread over the buckets.
        let used: std::collections::HashSet<usize> = (0..pages).map(|p| map.bucket(key(3, 0, p))).collect();
        assert!(used.len() > pages as usize * 9 / 10, "{} buckets for {pages} pages", used.len());
    }
}
