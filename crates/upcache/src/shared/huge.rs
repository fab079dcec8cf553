//! The passes that put the frames' bytes on huge pages (`crate::shm::huge`): what the kernel's
//! khugepaged does for memory it may put on huge pages, done for the segment by its service.
//! (A private cache's frames are its process's memory, on huge pages from their first touch:
//! `Segment::make_private`.)
//!
//! Processes touch chunks on small pages (`chunk.rs`); while the cache is warm a pass
//! collapses those in use, a bounded number of chunks a pass, copying their pages. A collapse
//! that meets a page in use (an `O_DIRECT` write-back's) gives up, and the next pass tries
//! again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::SharedCache;
use crate::shm::huge::{self, HUGE_PAGE};

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
    /// For the frames' `chunks` whole chunks; a last chunk short of 2 MiB is never collapsed
    /// (the region after it is not the frames').
    pub fn new(chunks: usize) -> Self {
        Collapser { chunks, next: 0, refusals: 0 }
    }

    /// Whether the kernel is taken never to collapse ([`REFUSALS`]); no pass tries again.
    pub fn refused(&self) -> bool {
        self.refusals >= REFUSALS
    }

    /// Collapses up to `budget` chunks of `pages` (the frames' bytes, 2 MiB aligned in the
    /// mapping and the file) that `wanted` says want it and whose pages are all present, from
    /// where the last pass stopped, while `still` holds (looked at before each collapse).
    pub fn pass(
        &mut self,
        pages: *mut u8,
        budget: usize,
        wanted: impl Fn(usize) -> bool,
        still: impl Fn() -> bool,
    ) -> Pass {
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
            // SAFETY: chunk `c` lies inside the frames' bytes (`c < chunks`, whole ones).
            let chunk = unsafe { pages.add(c * HUGE_PAGE) };
            if stop || tried == budget || !huge::all_present(chunk, HUGE_PAGE, &mut resident) {
                pass.left += 1;
                continue;
            }
            if !still() {
                // A process claims frames again: it would wait for the chunk it touches.
                (stop, self.next) = (true, c);
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

/// Chunks of the frames' bytes a pass collapses at most (128 MiB, about half a second of the
/// kernel's copying here) before it looks at the hand again.
const HUGE_CHUNKS_A_PASS: usize = 64;
/// How often a maker looks whether the clock hand is still.
const HAND_POLL: Duration = Duration::from_millis(100);
/// Flush intervals at most between passes that collapsed nothing (each such pass doubles the
/// wait): a collapse without a free huge page compacts memory, and reclaims the service's
/// cgroup when that is full.
const IDLE_PASSES: u32 = 64;

/// The maker of a cache's huge pages (`chunk.rs`, `SharedConfig::huge_pages`): while the clock
/// hand is still (no process claimed a frame since the last look: the cache is warm), it
/// collapses the chunks in use on small pages, as khugepaged does; till every chunk is huge or
/// the kernel refuses (chunks never used keep it looking, 10 times a second, a pass over the
/// chunk states every flush interval). A moving hand means a cache filling, whose processes a
/// collapse would hold up (each waits for the chunk it touches), on memory slow to first touch
/// here.
pub(crate) struct Maker {
    record: Collapser,
    interval: Duration,
    next_pass: Instant,
    idle_passes: u32,
    hand: u64,
    /// The segment is a named file (a service's), for what to tell an administrator.
    in_file: bool,
}

impl Maker {
    /// The maker of `cache`'s huge pages; None if it has them off.
    pub fn new(cache: &SharedCache, in_file: bool) -> Option<Maker> {
        cache.config().huge_pages.then(|| Maker {
            record: cache.huge_pages_record(),
            interval: cache.inner.view.header().flush_interval(),
            next_pass: Instant::now(),
            idle_passes: 1,
            hand: cache.hand(),
            in_file,
        })
    }

    /// A look at the hand, every [`HAND_POLL`]: a pass if the hand stood still since the last
    /// look and one is due. False once no pass is wanted any more.
    pub fn look(&mut self, cache: &SharedCache) -> bool {
        let (was, now) = (self.hand, cache.hand());
        self.hand = now;
        if was != now || Instant::now() < self.next_pass {
            return true;
        }
        let pass = cache.make_huge_pages(&mut self.record, HUGE_CHUNKS_A_PASS);
        if self.record.refused() {
            no_huge_pages(self.in_file);
            return false;
        }
        let (huge, _, n) = cache.chunks();
        if huge == n {
            log::info!("upcache: every frame of the shared cache on huge pages");
            return false;
        }
        self.idle_passes = match (pass.collapsed.len(), pass.left) {
            (HUGE_CHUNKS_A_PASS, _) => 0, // more to do: at the next still look
            (0, left) if left > 0 => (self.idle_passes * 2).clamp(1, IDLE_PASSES),
            _ => 1,
        };
        self.next_pass = Instant::now() + self.interval * self.idle_passes;
        true
    }
}

/// The service's maker of huge pages, till `stop`.
pub(crate) fn make_huge(cache: &SharedCache, in_file: bool, stop: &AtomicBool) {
    let Some(mut maker) = Maker::new(cache, in_file) else { return };
    // Relaxed: set before the unpark that ends a park.
    while !stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(HAND_POLL);
        if !maker.look(cache) {
            return;
        }
    }
}

/// Says how an administrator can give the cache huge pages, as the kernel would not collapse
/// its chunks (before Linux 6.1, where these settings give huge pages at faults instead; or
/// shared memory's huge pages denied).
fn no_huge_pages(in_file: bool) {
    let how = if in_file {
        "`mount -o remount,huge=within_size /dev/shm` (before Linux 6.1)"
    } else {
        "`echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled`"
    };
    log::info!(
        "upcache: the kernel puts no shared memory on huge pages on request (MADV_COLLAPSE), so \
         random hits pay for 4 KiB page translations (a seventh of warm reads here); {how} as \
         root lets the cache have them"
    );
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::chunk::CHUNK_FRAMES;
    use super::super::frame::PAGE;
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
        let mut c = Collapser::new(len / HUGE);
        let pass = c.pass(p, 8, |_| true, || true);
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
        assert_eq!(c.pass(p, 8, |c| c == 1, || true), Pass { collapsed: vec![1], left: 0 });
    }

    #[test]
    fn a_pass_collapses_no_more_than_its_budget_and_the_next_goes_on() {
        let len = 4 * HUGE + 3 * PAGE;
        let (_seg, p) = region(len);
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_bytes(p, 7, len) };
        let mut c = Collapser::new(len / HUGE);
        if !crate::shm::huge::kernel_collapses() {
            return;
        }
        assert_eq!(
            c.pass(p, 3, |_| true, || true),
            Pass { collapsed: vec![0, 1, 2], left: 1 },
            "the short last chunk is no chunk"
        );
        assert_eq!(c.pass(p, 3, |c| c == 3, || true), Pass { collapsed: vec![3], left: 0 });
    }

    #[test]
    fn a_chunk_not_wanted_is_left_for_a_later_pass() {
        let (_seg, p) = region(2 * HUGE);
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_bytes(p, 1, 2 * HUGE) };
        let mut c = Collapser::new(2);
        if !crate::shm::huge::kernel_collapses() {
            return;
        }
        assert_eq!(c.pass(p, 8, |c| c == 1, || true), Pass { collapsed: vec![1], left: 0 });
        assert_eq!(c.pass(p, 8, |c| c == 0, || true), Pass { collapsed: vec![0], left: 0 });
    }

    /// A pass collapses only while `still` holds: the moment a process claims frames again it
    /// stops, and the next pass begins at the chunk it did not take.
    #[test]
    fn a_pass_stops_when_the_hand_moves() {
        let (_seg, p) = region(3 * HUGE);
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_bytes(p, 3, 3 * HUGE) };
        let mut c = Collapser::new(3);
        if !crate::shm::huge::kernel_collapses() {
            return;
        }
        let looks = std::cell::Cell::new(0);
        let still = || {
            looks.set(looks.get() + 1);
            looks.get() == 1
        };
        assert_eq!(c.pass(p, 8, |_| true, still), Pass { collapsed: vec![0], left: 2 });
        // From chunk 1 on (chunk 0, huge already, collapses again at once).
        assert_eq!(c.pass(p, 8, |_| true, || true), Pass { collapsed: vec![1, 2, 0], left: 0 });
    }
}
