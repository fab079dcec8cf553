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

/// A page replacement policy.
pub trait Policy: Send + Sync {
    /// Short name for reports.
    fn name(&self) -> &'static str;

    /// A frame was pinned on a hit. Default: nothing beyond the `REFERENCED` bit.
    fn on_hit(&self, _frame: FrameId) {}

    /// Finds a frame to evict, clean pages first.
    fn pick_victim(&self, frames: &FrameTable) -> Victim;
}
