//! A seqlock over a file's contents, for lock-free readers.
//!
//! Writers of disjoint ranges run at the same time, so one odd/even sequence cannot say
//! "nobody is writing"; two counters can: `begun` counts content changes started, `done`
//! those finished. A reader that loads `done` and then `begun` and finds them equal knows no
//! change was in flight at the second load; if `begun` is still the same after its copy
//! (behind an Acquire fence), no change started meanwhile either, so what it copied is the
//! file as it was at one instant, with every write wholly in or wholly out.

use crate::sync::{fence, AtomicU64, Ordering};

/// The two counters.
#[derive(Debug, Default)]
pub(crate) struct WriteSeq {
    begun: AtomicU64,
    done: AtomicU64,
}

/// A content change in progress; finishes on drop.
pub(crate) struct WriteTicket<'a>(&'a WriteSeq);

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        // Release: a reader that sees this count sees every byte the change wrote.
        self.0.done.fetch_add(1, Ordering::Release);
    }
}

impl WriteSeq {
    /// Announces a change of the file's contents (bytes, length, or pages dropped). Hold the
    /// ticket until the change is complete.
    pub(crate) fn begin(&self) -> WriteTicket<'_> {
        // Relaxed + the Release fence: the seqlock writer's half; the fence keeps every byte
        // written after it from being seen by a reader that then misses this increment.
        self.begun.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        WriteTicket(self)
    }

    /// The current sequence if no change is in flight.
    pub(crate) fn quiet(&self) -> Option<u64> {
        // Acquire on both: `done` is read before `begun`, and the reader's copy after both.
        let done = self.done.load(Ordering::Acquire);
        let begun = self.begun.load(Ordering::Acquire);
        (begun == done).then_some(begun)
    }

    /// Whether no change began since `quiet` returned `seq`. Call after the copy.
    pub(crate) fn unchanged_since(&self, seq: u64) -> bool {
        // The seqlock reader's fence: the copy happens before this load.
        fence(Ordering::Acquire);
        self.begun.load(Ordering::Relaxed) == seq
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn quiet_only_between_changes() {
        let s = WriteSeq::default();
        let q = s.quiet().unwrap();
        assert!(s.unchanged_since(q));
        let t = s.begin();
        assert_eq!(s.quiet(), None);
        assert!(!s.unchanged_since(q));
        let t2 = s.begin();
        drop(t);
        assert_eq!(s.quiet(), None, "one change still in flight");
        drop(t2);
        let q2 = s.quiet().unwrap();
        assert_ne!(q, q2);
        assert!(s.unchanged_since(q2));
    }
}
