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
//! Implementations: [`clock::ClockPolicy`] (the default), [`gclock::GClockPolicy`]; chosen
//! with [`PolicyKind`] (`Config::with_policy`). LRU, LFU, S3-FIFO, SIEVE and the GC-aware
//! modifier (seeds 002 §4, 004 §5.4) plug in here. The set-associative cache has its own
//! in-set policies (`index/setassoc.rs`).

pub mod clock;
pub mod gclock;

pub use clock::ClockPolicy;
pub use gclock::GClockPolicy;

/// Which replacement policy a cache (not set-associative) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// CLOCK with clean-first preference. The default.
    #[default]
    Clock,
    /// GClock: per-frame hit counts, clean-first.
    GClock,
}

impl PolicyKind {
    /// Every kind, for benchmarks and tests.
    pub const ALL: [PolicyKind; 2] = [PolicyKind::Clock, PolicyKind::GClock];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Clock => "clock",
            PolicyKind::GClock => "gclock",
        }
    }

    /// The policy for a table of `frames` frames.
    pub(crate) fn build(self, frames: usize) -> Box<dyn Policy> {
        match self {
            PolicyKind::Clock => Box::new(ClockPolicy::default()),
            PolicyKind::GClock => Box::new(GClockPolicy::new(frames)),
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        crate::config::parse_choice(s, "replacement policy", &PolicyKind::ALL, PolicyKind::name)
    }
}

use crate::frame::{FrameId, FrameTable};

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
/// loses its bit), and reporting the first dirty one seen if no clean one was claimed.
pub(crate) fn sweep(
    frames: &FrameTable,
    hand: &crate::sync::AtomicUsize,
    steps: usize,
    mut pass_over: impl FnMut(FrameId) -> bool,
) -> Victim {
    use crate::frame::state::ClaimResult;
    let n = frames.len();
    let mut dirty = None;
    for _ in 0..steps {
        // Relaxed: the hand only spreads evictors over the table; the claim CAS orders
        // everything that matters.
        let id = (hand.fetch_add(1, crate::sync::Ordering::Relaxed) % n) as FrameId;
        if pass_over(id) {
            continue;
        }
        match frames.state(id).try_claim() {
            ClaimResult::Claimed => return Victim::Claimed(id),
            ClaimResult::Dirty => {
                dirty.get_or_insert(id);
            }
            ClaimResult::Busy | ClaimResult::Referenced => {}
        }
    }
    match dirty {
        Some(id) => Victim::Dirty(id),
        None => Victim::None,
    }
}

/// A table of `n` frames holding valid, clean, unpinned pages 0.. of file 1, for policy tests.
#[cfg(all(test, not(loom)))]
pub(crate) fn resident_table(n: usize) -> FrameTable {
    let t = FrameTable::new(n, 4096).unwrap();
    for i in 0..n as FrameId {
        t.set_key(i, crate::frame::PageKey { file: 1, page: i as u64 });
        t.state(i).assign_locked();
        t.unlock(i, crate::frame::state::VALID, 0);
        t.state(i).unpin();
    }
    t
}

/// A page replacement policy.
pub trait Policy: Send + Sync {
    /// Short name for reports.
    fn name(&self) -> &'static str;

    /// A frame was pinned on a hit. Default: nothing beyond the `REFERENCED` bit.
    fn on_hit(&self, _frame: FrameId) {}

    /// Finds a frame to evict, clean pages first.
    fn pick_victim(&self, frames: &FrameTable) -> Victim;
}
