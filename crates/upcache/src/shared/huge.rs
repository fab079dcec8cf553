//! The service's passes that put the frames' bytes on huge pages (`crate::shm::huge`): what
//! the kernel's khugepaged does for memory it may put on huge pages, done for the segment.
//!
//! Processes touch chunks on small pages (`chunk.rs`); while the cache is warm a pass
//! collapses those in use, a bounded number of chunks a pass, copying their pages. A collapse
//! that meets a page in use (an `O_DIRECT` write-back's) gives up, and the next pass tries
//! again.

use super::frame::PAGE;
use crate::shm::huge::{self, HUGE_PAGE};

use super::chunk::CHUNK_FRAMES;

/// Collapses refused with EINVAL in a row, after which the kernel is taken never to collapse:
/// EINVAL also stands for passing failures (`huge::collapse`).
const REFUSALS: u32 = 8;

/// Where the service's next pass starts, and the kernel's refusals in a row.
pub(crate) struct Collapser {
    chunks: usize,
    next: usize,
    refusals: u32,
}

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Chunks made huge (or found so: a collapse of a huge chunk succeeds at once).
    pub collapsed: Vec<usize>,
    /// Chunks wanted and not made huge: not every page present, the kernel busy, no huge page
    /// free (which ends the pass), or past the budget.
    pub left: usize,
}

impl Collapser {
    /// For `n_frames` frames; a last chunk short of 2 MiB is never collapsed (the region after
    /// it is not the frames').
    pub fn new(n_frames: usize) -> Self {
        Collapser { chunks: n_frames / CHUNK_FRAMES, next: 0, refusals: 0 }
    }

    /// Whether the kernel is taken never to collapse ([`REFUSALS`]); no pass tries again.
    pub fn refused(&self) -> bool {
        self.refusals >= REFUSALS
    }

    /// Collapses up to `budget` chunks of `pages` (the frames' bytes, 2 MiB aligned in the
    /// mapping and the file) that `wanted` says want it and whose pages are all present, from
    /// where the last pass stopped.
    pub fn pass(&mut self, pages: *mut u8, budget: usize, wanted: impl Fn(usize) -> bool) -> Pass {
        let mut pass = Pass::default();
        let n = self.chunks;
        let (mut tried, mut stop) = (0, self.refused());
        let mut resident = Vec::new();
        let start = self.next;
        for i in 0..n {
            let c = (start + i) % n;
            if !wanted(c) {
                continue;
            }
            // SAFETY: chunk `c` lies inside the frames' bytes (`c < n_frames / CHUNK_FRAMES`).
            let chunk = unsafe { pages.add(c * CHUNK_FRAMES * PAGE) };
            if stop || tried == budget || !huge::all_present(chunk, HUGE_PAGE, &mut resident) {
                pass.left += 1;
                continue;
            }
            tried += 1;
            match huge::collapse(chunk) {
                Ok(()) => {
                    self.refusals = 0;
                    pass.collapsed.push(c);
                }
                Err(e) => {
                    pass.left += 1;
                    let einval = e.raw_os_error() == Some(libc::EINVAL);
                    self.refusals = if einval { self.refusals + 1 } else { 0 };
                    // No huge page free, or the cgroup full: the next pass, not the next chunk.
                    stop = self.refused() || matches!(e.raw_os_error(), Some(libc::ENOMEM | libc::EBUSY));
                }
            }
            if tried == budget || stop {
                self.next = (c + 1) % n;
            }
        }
        pass
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::{RegionSpec, Segment};
    use std::os::fd::AsFd;

    const HUGE: usize = HUGE_PAGE;

    /// A segment (a memfd) with one region of `len` bytes, 2 MiB aligned, and its start.
    fn region(len: usize) -> (Segment, *mut u8) {
        let seg = Segment::create("huge-test", &[RegionSpec { kind: 1, len }]).unwrap();
        let p = seg.region(1).unwrap().0.as_ptr();
        (seg, p)
    }

    #[test]
    fn present_chunks_become_huge_and_keep_their_bytes() {
        let len = 3 * HUGE;
        let (seg, p) = region(len);
        // Chunks 0 and 2 present through a second mapping, as another process's; chunk 1 has
        // one page missing.
        let second = Segment::attach(seg.as_fd().try_clone_to_owned().unwrap()).unwrap();
        let other = second.region(1).unwrap().0.as_ptr();
        for i in (0..len / PAGE).filter(|&i| i != CHUNK_FRAMES + 7) {
            // SAFETY: inside the second mapping.
            unsafe { other.add(i * PAGE + 5).write(i as u8 ^ 0x5a) };
        }
        let mut c = Collapser::new(len / PAGE);
        let pass = c.pass(p, 8, |_| true);
        if !crate::shm::huge::kernel_collapses() {
            assert!(pass.collapsed.is_empty());
            return;
        }
        assert_eq!(pass, Pass { collapsed: vec![0, 2], left: 1 }, "the chunk with a hole stays");
        assert!(!c.refused());
        assert!(huge::mapped_huge(p).unwrap_or(0) >= 2 * HUGE as u64, "this mapping maps them huge");
        for i in (0..len / PAGE).filter(|&i| i != CHUNK_FRAMES + 7) {
            // SAFETY: inside our mapping.
            assert_eq!(unsafe { p.add(i * PAGE + 5).read() }, i as u8 ^ 0x5a, "page {i}");
        }
        // The hole filled: the next pass takes the chunk.
        // SAFETY: inside the second mapping.
        unsafe { other.add((CHUNK_FRAMES + 7) * PAGE).write(1) };
        assert_eq!(c.pass(p, 8, |c| c == 1), Pass { collapsed: vec![1], left: 0 });
    }

    #[test]
    fn a_pass_collapses_no_more_than_its_budget_and_the_next_goes_on() {
        let len = 4 * HUGE + 3 * PAGE;
        let (_seg, p) = region(len);
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_bytes(p, 7, len) };
        let mut c = Collapser::new(len / PAGE);
        if !crate::shm::huge::kernel_collapses() {
            return;
        }
        assert_eq!(
            c.pass(p, 3, |_| true),
            Pass { collapsed: vec![0, 1, 2], left: 1 },
            "the short last chunk is no chunk"
        );
        assert_eq!(c.pass(p, 3, |c| c == 3), Pass { collapsed: vec![3], left: 0 });
    }

    #[test]
    fn a_chunk_not_wanted_is_left_for_a_later_pass() {
        let (_seg, p) = region(2 * HUGE);
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_bytes(p, 1, 2 * HUGE) };
        let mut c = Collapser::new(2 * HUGE / PAGE);
        if !crate::shm::huge::kernel_collapses() {
            return;
        }
        assert_eq!(c.pass(p, 8, |c| c == 1), Pass { collapsed: vec![1], left: 0 });
        assert_eq!(c.pass(p, 8, |c| c == 0), Pass { collapsed: vec![0], left: 0 });
    }
}
