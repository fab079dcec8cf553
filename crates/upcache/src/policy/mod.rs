//! Replacement policy: which resident page gives up its frame when a miss needs one.
//!
//! # Contract
//! - The caller MUST call [`Policy::pick_victim`] only when the free list is empty, and MUST
//!   detach a [`Victim::Claimed`] frame from its old file's index before reusing it.
//! - An implementation MUST claim frames only through [`crate::frame::FrameState::try_claim`],
//!   which refuses pinned, locked (in-flight) and dirty frames, so a policy cannot evict a page
//!   that is in use or lose written data. It SHOULD prefer clean pages and report a dirty
//!   candidate only when no clean one was found, for the caller to write back.
//! - Reference information comes from the state word's `REFERENCED` bit, which every pin sets,
//!   and from [`crate::frame::FrameTable::take_touched`], which lock-free hits (no pin) set;
//!   policies that need more per-frame history keep it themselves and are told of hits via
//!   [`Policy::on_hit`].
//!
//! Implementations, chosen with [`PolicyKind`] (`Config::with_policy`):
//! - [`clock::ClockPolicy`] (the default) and [`gclock::GClockPolicy`]: a hand over the frame
//!   table, lock-free;
//! - [`lru::LruPolicy`] and [`lfu::LfuPolicy`]: sampled approximations (the best of a few
//!   random frames by last use or by use count), lock-free;
//! - [`sieve::SievePolicy`] and [`s3fifo::S3FifoPolicy`]: queues in insertion order under a
//!   mutex taken on misses only; hits stay lock-free.
//!
//! So no policy takes a lock on a hit. A claimed victim is `UNOWNED` and the caller's. New
//! pages reach the policy through `Policy::on_insert`, called by the placement when it
//! publishes a fresh frame (still `LOCKED`). On the command line a policy and its rule are
//! `--policy KIND[+RULE]`.
//!
//! Each one takes dirty frames by a [`CleanFirst`] rule, the modifier: clean pages first
//! always (SAFS §4.2, the default), only while the page's device collects garbage
//! (ScalaCache §5.4), or never (plain: the policy's order alone decides, and a dirty choice is
//! written back in the miss path). The GC-aware rule asks a `GcProbe`, which the cache
//! builds on each device's collection as its write-back latency shows it
//! (`io/device/gc_watch.rs`: real devices do not say), mapping a page to its device through
//! the layout (`cache/mod.rs::gc_probe`). The set-associative cache has its own in-set policies
//! (`index/setassoc.rs`).

pub mod clock;
pub mod gclock;
pub mod lfu;
pub mod lru;
pub mod s3fifo;
mod sample;
pub mod sieve;
pub mod simulate;

pub use clock::ClockPolicy;
pub use gclock::GClockPolicy;
pub use lfu::LfuPolicy;
pub use lru::LruPolicy;
pub use s3fifo::S3FifoPolicy;
// The shared cache's sampled policies use it; loom builds leave that cache out.
#[cfg(not(loom))]
pub(crate) use sample::next_random;
pub use sieve::SievePolicy;

use crate::choice::choice;
use crate::frame::state::ClaimResult;
use crate::frame::{FrameId, FrameTable, PageKey};

choice! {
    /// Which replacement policy a cache (not set-associative) uses.
    pub enum PolicyKind("replacement policy") {
        /// CLOCK. The default.
        #[default]
        Clock = "clock",
        /// GClock: per-frame hit counts.
        GClock = "gclock",
        /// Sampled LRU: of a few random frames, the least recently used.
        Lru = "lru",
        /// Sampled LFU with dynamic aging (LFU-DA).
        Lfu = "lfu",
        /// S3-FIFO: a small probation FIFO, a main FIFO and a ghost FIFO of recent evictions.
        S3Fifo = "s3fifo",
        /// SIEVE: one FIFO and a hand that keeps visited pages in place.
        Sieve = "sieve",
    }
}

impl PolicyKind {
    /// The policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn build(self, frames: usize, dirty: DirtyRule) -> Box<dyn Policy> {
        match self {
            PolicyKind::Clock => Box::new(ClockPolicy::new(dirty)),
            PolicyKind::GClock => Box::new(GClockPolicy::new(frames, dirty)),
            PolicyKind::Lru => Box::new(LruPolicy::new(frames, dirty)),
            PolicyKind::Lfu => Box::new(LfuPolicy::new(frames, dirty)),
            PolicyKind::S3Fifo => Box::new(S3FifoPolicy::new(frames, dirty)),
            PolicyKind::Sieve => Box::new(SievePolicy::new(frames, dirty)),
        }
    }
}

choice! {
    /// When a policy passes over dirty frames in the hope of a clean one (the modifier).
    pub enum CleanFirst("clean-first rule") {
        /// Always: a clean page costs nothing to evict, a dirty one a device write (SAFS §4.2).
        #[default]
        Always = "clean-first",
        /// Only while the dirty page's device collects garbage, which would stall its write-back
        /// (ScalaCache §5.4, "GC-aware"), as inferred from the device's write-back latency.
        WhileGc = "gc-aware",
        /// Never: the policy's own order decides ("plain").
        Never = "plain",
    }
}

/// Whether the device holding a page is collecting garbage now.
pub type GcProbe = std::sync::Arc<dyn Fn(PageKey) -> bool + Send + Sync>;

/// A [`CleanFirst`] rule with what it needs to apply: the GC state of devices.
#[derive(Clone, Default)]
pub struct DirtyRule {
    mode: CleanFirst,
    collecting: Option<GcProbe>,
}

impl std::fmt::Debug for DirtyRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtyRule").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl DirtyRule {
    /// `mode`, asking `collecting` about garbage collection (no probe: no device collects).
    pub fn new(mode: CleanFirst, collecting: Option<GcProbe>) -> Self {
        DirtyRule { mode, collecting }
    }

    /// Whether to pass over dirty frame `id` and look on for a clean one.
    pub(crate) fn defer(&self, frames: &FrameTable, id: FrameId) -> bool {
        match self.mode {
            CleanFirst::Always => true,
            CleanFirst::Never => false,
            CleanFirst::WhileGc => self.collecting.as_ref().is_some_and(|gc| gc(frames.key(id))),
        }
    }
}

/// What [`Policy::pick_victim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    /// This frame is now unowned and belongs to the caller.
    Claimed(FrameId),
    /// No clean frame could be claimed; this dirty, unpinned frame could be written back and
    /// then claimed.
    Dirty(FrameId),
    /// Every frame is pinned or under I/O.
    None,
}

/// The sweep CLOCK-like policies share: up to `steps` frames from `hand` on (advanced with
/// `fetch_add`, so concurrent evictors sweep different frames), passing over the frames
/// `pass_over` keeps, claiming the first clean, unpinned, unreferenced one (a referenced one
/// loses its bit). A dirty one is reported at once unless `dirty` defers it; then the first
/// deferred one is reported if no clean one was claimed.
pub(crate) fn sweep(
    frames: &FrameTable,
    hand: &crate::sync::AtomicUsize,
    steps: usize,
    dirty: &DirtyRule,
    mut pass_over: impl FnMut(FrameId) -> bool,
) -> Victim {
    let n = frames.len();
    let mut deferred = None;
    for _ in 0..steps {
        // Relaxed: the hand only spreads evictors over the table; the claim CAS orders
        // everything that matters.
        let id = (hand.fetch_add(1, crate::sync::Ordering::Relaxed) % n) as FrameId;
        if pass_over(id) {
            continue;
        }
        match frames.state(id).try_claim() {
            ClaimResult::Claimed => return Victim::Claimed(id),
            ClaimResult::Dirty if !dirty.defer(frames, id) => return Victim::Dirty(id),
            ClaimResult::Dirty => {
                deferred.get_or_insert(id);
            }
            ClaimResult::Busy | ClaimResult::Referenced => {}
        }
    }
    deferred.map_or(Victim::None, Victim::Dirty)
}

/// [`crate::frame::FrameState::try_claim`] for policies that keep their own history of use: the reference
/// bit (set by every pin, which also reaches [`Policy::on_hit`]) does not save the frame.
pub(crate) fn claim_unreferenced(frames: &FrameTable, id: FrameId) -> ClaimResult {
    match frames.state(id).try_claim() {
        // The first try cleared the bit.
        ClaimResult::Referenced => frames.state(id).try_claim(),
        r => r,
    }
}

/// A page replacement policy.
pub trait Policy: Send + Sync {
    /// Short name for reports.
    fn name(&self) -> &'static str;

    /// Frame `id` was just given a new page (it is `LOCKED` by the loader). Frames also leave
    /// pages without the policy choosing them (truncation, stream eviction, failed loads):
    /// policies that keep lists find such frames unowned, or inserted again, and drop them.
    fn on_insert(&self, _frames: &FrameTable, _id: FrameId) {}

    /// A frame was pinned on a hit. Default: nothing beyond the `REFERENCED` bit.
    fn on_hit(&self, _frame: FrameId) {}

    /// Finds a frame to evict, clean pages first.
    fn pick_victim(&self, frames: &FrameTable) -> Victim;
}

/// Tables and drivers shared by the policies' tests.
#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use crate::frame::state::VALID;

    /// A table of `n` frames holding valid, clean, unpinned pages 0.. of file 1.
    pub(crate) fn resident_table(n: usize) -> FrameTable {
        let t = FrameTable::new(n, 4096).unwrap();
        for i in 0..n as FrameId {
            t.set_key(i, PageKey { file: 1, page: i as u64 });
            t.state(i).assign_locked();
            t.unlock(i, VALID, 0);
            t.state(i).unpin();
        }
        t
    }

    /// A resident table of `n` frames and a policy for it that saw every frame inserted.
    pub(crate) fn resident_table_with<P: Policy>(
        n: usize,
        build: impl FnOnce(usize) -> P,
    ) -> (FrameTable, P) {
        let t = FrameTable::new(n, 4096).unwrap();
        let p = build(n);
        for i in 0..n as FrameId {
            insert(&t, &p, i, i as u64);
        }
        (t, p)
    }

    /// Gives frame `id` page `page` of file 1 as a miss does: assigned, loaded, unpinned.
    pub(crate) fn insert(t: &FrameTable, p: &dyn Policy, id: FrameId, page: u64) {
        t.set_key(id, PageKey { file: 1, page });
        t.state(id).assign_locked();
        p.on_insert(t, id);
        t.unlock(id, VALID, 0);
        t.state(id).unpin();
    }

    /// Evicts (each victim taking a fresh page, unused after) until frame `keep` goes: how
    /// many evictions it survived. Panics if a pick finds nothing clean.
    pub(crate) fn evictions_until(t: &FrameTable, p: &dyn Policy, keep: FrameId) -> usize {
        let mut next_page = t.len() as u64;
        for evicted in 0..100_000 {
            match p.pick_victim(t) {
                Victim::Claimed(id) if id == keep => return evicted,
                Victim::Claimed(id) => {
                    insert(t, p, id, next_page);
                    next_page += 1;
                }
                v => panic!("{v:?}"),
            }
        }
        panic!("frame {keep} was never evicted");
    }

    /// A table of 8 frames, all dirty but frame 5, which is the most used.
    fn dirty_but_hot_five(kind: PolicyKind, rule: DirtyRule) -> (FrameTable, Box<dyn Policy>) {
        let t = FrameTable::new(8, 4096).unwrap();
        let p = kind.build(8, rule);
        for i in 0..8 {
            insert(&t, p.as_ref(), i, u64::from(i));
            if i != 5 {
                assert!(t.state(i).try_lock());
                t.unlock(i, crate::frame::state::DIRTY, 0);
            }
        }
        for _ in 0..3 {
            t.state(5).try_pin().unwrap();
            p.on_hit(5);
            t.state(5).unpin();
        }
        (t, p)
    }

    #[test]
    fn clean_first_rules_decide_between_a_dirty_victim_and_a_hot_clean_page() {
        let gc: GcProbe = std::sync::Arc::new(|key: PageKey| key.page != 2);
        for kind in PolicyKind::ALL {
            // Clean first: the hot clean page goes rather than a dirty one.
            let (t, p) = dirty_but_hot_five(kind, DirtyRule::new(CleanFirst::Always, None));
            assert_eq!(p.pick_victim(&t), Victim::Claimed(5), "{kind:?}");
            // Plain: the policy's order picks a cold page, dirty or not.
            let (t, p) = dirty_but_hot_five(kind, DirtyRule::new(CleanFirst::Never, None));
            assert!(matches!(p.pick_victim(&t), Victim::Dirty(id) if id != 5), "{kind:?}");
            // GC-aware: a dirty page is taken only if its device is not collecting. Every
            // device collects but page 2's: frame 2 goes (dirty) before the hot clean page,
            // the way plain would have taken it, and no other dirty page is offered.
            let (t, p) = dirty_but_hot_five(kind, DirtyRule::new(CleanFirst::WhileGc, Some(gc.clone())));
            assert_eq!(p.pick_victim(&t), Victim::Dirty(2), "{kind:?}");
            // Page 2's device collecting too: clean first.
            let all: GcProbe = std::sync::Arc::new(|_| true);
            let (t, p) = dirty_but_hot_five(kind, DirtyRule::new(CleanFirst::WhileGc, Some(all)));
            assert_eq!(p.pick_victim(&t), Victim::Claimed(5), "{kind:?}");
            // No device collecting: plain.
            let (t, p) = dirty_but_hot_five(kind, DirtyRule::new(CleanFirst::WhileGc, None));
            assert!(matches!(p.pick_victim(&t), Victim::Dirty(id) if id != 5), "{kind:?}");
        }
    }
}
