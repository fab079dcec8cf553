//! The first touch of a 2 MiB chunk of the frames' bytes, in a cache on huge pages
//! (`SharedConfig::huge_pages`).
//!
//! A chunk is made one huge page (`crate::shm::huge::make_huge`) when it is first touched, by
//! the first process to claim it here, or ahead of the clock hand by the service
//! (`View::make_chunks_ahead`): once a chunk is in use, a collapse must copy it. The state is
//! a hint, never a lock: a collapse keeps every byte whoever writes meanwhile (the kernel
//! locks and copies each small page), so a process that finds a chunk claimed by another goes
//! on at once, and a maker killed or stopped mid-way holds no one up. A chunk it left claimed
//! is collapsed by the service's passes (`huge.rs`), as is one made on small pages because no
//! huge page was free.

use super::frame::PAGE;
use crate::shm::huge::HUGE_PAGE;
use std::sync::atomic::{AtomicU32, Ordering};

/// Frames in a chunk: one huge page.
pub(crate) const CHUNK_FRAMES: usize = HUGE_PAGE / PAGE;

const UNTOUCHED: u32 = 0;
const CLAIMED: u32 = 1;
const HUGE: u32 = 2;
const SMALL: u32 = 3;

/// A chunk's state in the segment: all zeros is untouched.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Chunk {
    state: AtomicU32,
}

impl Chunk {
    /// Whether no process has claimed the chunk yet.
    pub fn untouched(&self) -> bool {
        // Relaxed (all): a hint; the bytes are the kernel's to keep whole.
        self.state.load(Ordering::Relaxed) == UNTOUCHED
    }

    /// Claims the chunk for making, if no process has; whether we did.
    pub fn claim(&self) -> bool {
        self.untouched()
            && self.state.compare_exchange(UNTOUCHED, CLAIMED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Records what the claim made: a huge page, or small pages.
    pub fn made(&self, huge: bool) {
        self.state.store(if huge { HUGE } else { SMALL }, Ordering::Relaxed);
    }

    /// Whether it was made a huge page (or collapsed since).
    pub fn huge(&self) -> bool {
        self.state.load(Ordering::Relaxed) == HUGE
    }

    /// Whether it is in use and not known to be huge: made on small pages, or claimed by a
    /// maker that has not said (busy, stopped or killed).
    pub fn unfinished(&self) -> bool {
        matches!(self.state.load(Ordering::Relaxed), CLAIMED | SMALL)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_claim_wins_and_says_what_it_made() {
        let c = Chunk::default();
        assert!(c.untouched() && !c.unfinished());
        assert!(c.claim());
        assert!(!c.claim(), "claimed once");
        assert!(c.unfinished() && !c.huge());
        c.made(false);
        assert!(c.unfinished(), "small pages: for the service's passes");
        c.made(true);
        assert!(c.huge() && !c.unfinished());
    }
}
