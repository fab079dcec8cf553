//! Multi-page loads (SAFS §4.2, ScalaCache §5.4): the missing pages of a range are claimed
//! together, grouped into runs that lie back to back in one backing file, and each run is
//! read with one vectored request into its frames; the runs of every device go to the engine
//! as one batch, which io_uring submits at once.
//!
//! Frames for a batch are taken first and handed to its pages in ascending order. The pool
//! hands frames out in the order reclaim freed them (`alloc/two_layer.rs`), so sorted they
//! are mostly side by side in the arena, whose huge pages make them physically contiguous:
//! the block layer then merges a run's pages into a few memory segments, and a run is cut by
//! the device's request size (`max_sectors_kb`) instead of by its segment count
//! (`max_segments`), as the kernel's large folios allow it to be.

use std::io::IoSliceMut;
use std::ops::Range;

use super::page::{Commit, LockedPage};
use super::CacheInner;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::FrameId;
use crate::io::device::RequestLimits;
use crate::io::engine::IoReq;
use crate::io::layout::StripeLayout;

/// Most pages in one request: 4 MiB of 4 KiB pages (Linux caps a request at 1024 iovecs).
/// A cache uses fewer where its devices take less ([`CacheInner::limits`]).
pub(crate) const MAX_RUN_PAGES: usize = 1024;

/// Pages `members` of a sorted list, stored back to back on device `dev` from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) dev: usize,
    pub(crate) offset: u64,
    pub(crate) members: Range<usize>,
}

/// Bytes of a run's read of `n` bytes that land in its `i`-th page.
pub(crate) fn page_share(n: usize, i: usize, ps: usize) -> usize {
    n.saturating_sub(i * ps).min(ps)
}

/// Groups `pages` (ascending, each with its frame) into runs adjacent in one backing file,
/// each within `limits`: at most `limits.pages` pages (and [`MAX_RUN_PAGES`]), and at most
/// `limits.segments` memory segments, where a page starts a new segment unless
/// `contiguous(previous frame, its frame)`. A stretch over the limits is cut into nearly equal
/// runs, not into full ones and a short remainder: a device then gets requests of one size.
/// Appends to `out` and allocates nothing else: an asynchronous read calls it per request.
pub(crate) fn runs(
    layout: &StripeLayout,
    limits: RequestLimits,
    pages: &[(u64, FrameId)],
    contiguous: impl Fn(FrameId, FrameId) -> bool,
    out: &mut Vec<Run>,
) {
    let max_pages = limits.pages.clamp(1, MAX_RUN_PAGES);
    let max_segments = limits.segments.max(1);
    let ps = layout.page_size();
    // Whether the `i`th page, not the first of its stretch, starts a memory segment.
    let new_segment = |i: usize| !contiguous(pages[i - 1].1, pages[i].1);
    let mut s = 0;
    while s < pages.len() {
        // The stretch `s..e`: pages back to back on one device.
        let mut e = s + 1;
        while e < pages.len() && layout.next_on_device(pages[e - 1].0) == Some(pages[e].0) {
            e += 1;
        }
        let (dev, offset) = layout.locate(pages[s].0);
        // Even shares of the pages and of the segments, each within its limit.
        let segments = 1 + (s + 1..e).filter(|&i| new_segment(i)).count();
        let even = |n: usize, max: usize| n.div_ceil(n.div_ceil(max).max(1)).max(1);
        let (page_share, segment_share) = (even(e - s, max_pages), even(segments, max_segments));
        let mut start = s;
        let mut segs = 0;
        for i in s..e {
            let seg = usize::from(i == start || new_segment(i));
            if i > start && (i - start == page_share || segs + seg > segment_share) {
                out.push(Run { dev, offset: offset + (start - s) as u64 * ps, members: start..i });
                (start, segs) = (i, 1);
            } else {
                segs += seg;
            }
        }
        out.push(Run { dev, offset: offset + (start - s) as u64 * ps, members: start..e });
        s = e;
    }
}

/// What becomes of a loaded page's pin when its load ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterLoad {
    /// Unpinned: the page is cached for whoever reads it next.
    Unpin,
    /// Kept for the caller, who copies out of the page next.
    KeepPin,
}

/// Fresh loads claimed by `load_missing` and not yet ended: undone if dropped.
struct Claimed<'a> {
    cache: &'a CacheInner,
    file: &'a FileInner,
    pages: Vec<(u64, FrameId)>,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        for &(page, id) in &self.pages {
            drop(LockedPage::attach(self.cache, self.file, page, id));
        }
    }
}

impl CacheInner {
    /// The largest readahead window in pages: the configured bytes, at most an eighth of
    /// the frames.
    pub(crate) fn readahead_pages(&self) -> u64 {
        (self.config.readahead / self.frames.page_size() as u64).min(self.frames.len() as u64 / 8)
    }

    /// Pages a multi-page read loads in one batch: one run's worth, and never more than a
    /// quarter of the frames in use (a set-associative cache may have been shrunk), so that
    /// concurrent batches leave room to evict.
    pub(crate) fn batch_window(&self) -> u64 {
        let frames = self.placement.frames_in_use(self.frames.len());
        (frames / 4).clamp(1, self.limits.pages) as u64
    }

    /// [`runs`] with this cache's layout and request limits: frames side by side in the arena
    /// and in one aligned `segment_block` are taken as one memory segment.
    pub(crate) fn runs_of(&self, file: &FileInner, pages: &[(u64, FrameId)], out: &mut Vec<Run>) {
        let block = self.segment_block;
        runs(
            &file.layout,
            self.limits,
            pages,
            |a, b| b == a + 1 && self.frames.ptr(b) as usize & (block - 1) != 0,
            out,
        )
    }

    /// Claims each page of `pages` (ascending) that has no frame (valid or loading) as a
    /// fresh `LOCKED` load, appended to `out` for the caller to read and end with
    /// [`Self::end_run`]. Stops at the first error and returns it; what was claimed before
    /// stays in `out`.
    pub(crate) fn claim_missing(
        &self,
        file: &FileInner,
        pages: impl IntoIterator<Item = u64>,
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()> {
        let before = out.len();
        let claimed = self.placement.claim_missing(self, file, &mut pages.into_iter(), out);
        for &(page, id) in &out[before..] {
            self.fresh_load(file, page, id).detach();
        }
        claimed
    }

    /// Ends the claimed loads `pages` of one run, read back to back by one request with
    /// result `read`. On success each page gets its share of the bytes read (the rest reads
    /// as zeros) and becomes `VALID` and ready; it stays pinned with
    /// `AfterLoad::KeepPin` (an asynchronous read copies out of it next), else it is unpinned. On failure every load
    /// is undone (the frames leave the index, pins and all) and the error is returned.
    pub(crate) fn end_run(
        &self,
        file: &FileInner,
        pages: impl ExactSizeIterator<Item = (u64, FrameId)>,
        dev: usize,
        read: std::io::Result<usize>,
        after: AfterLoad,
    ) -> Result<()> {
        let ps = self.frames.page_size();
        match read {
            Ok(n) => {
                self.metrics.read_ios.add(1);
                self.metrics.read_bytes.add(n as u64);
                for (i, (page, id)) in pages.enumerate() {
                    let lp = LockedPage::attach(self, file, page, id);
                    self.zero_tail(&lp, page_share(n, i, ps));
                    if after == AfterLoad::KeepPin {
                        lp.into_pinned().keep();
                    } else {
                        lp.commit(Commit::AsBefore);
                    }
                }
                Ok(())
            }
            Err(e) => {
                let (mut first, mut last) = (u64::MAX, 0);
                for (page, id) in pages {
                    (first, last) = (first.min(page), last.max(page));
                    drop(LockedPage::attach(self, file, page, id)); // undoes the load
                }
                Err(Error::io(format!("read pages {first}..={last} of {:?} from device {dev}", file.name), e))
            }
        }
    }

    /// The frames `ids` (at most [`MAX_RUN_PAGES`]: more is a bug, and panics) as buffers
    /// for an engine queue's `push_read`, in `out` (cleared first; the caller reuses it, so
    /// a run costs no allocation and no 8 KiB array on the stack).
    pub(crate) fn frame_ptrs(&self, ids: impl Iterator<Item = FrameId>, out: &mut Vec<*mut u8>) {
        out.clear();
        for id in ids {
            // A longer run would end pages it never read (`runs` caps them).
            assert!(out.len() < MAX_RUN_PAGES, "a run of more than {MAX_RUN_PAGES} pages");
            out.push(self.frames.ptr(id));
        }
    }

    /// Loads every page of `pages` that has no frame, with one request per run and one
    /// batch for all; pages that have one (valid or loading) are left alone. On a device
    /// error the pages of the failed runs stay out of the cache and the first error is
    /// returned; the other runs' pages are loaded.
    pub(crate) fn load_missing(&self, file: &FileInner, pages: Range<u64>) -> Result<()> {
        let mut claimed = Claimed { cache: self, file, pages: Vec::new() };
        match self.claim_missing(file, pages, &mut claimed.pages) {
            Ok(()) => {}
            // Frames ran short, perhaps because of this batch's own claims (in a page set):
            // load what is claimed; the reader loads the rest one at a time.
            Err(e) if e.kind() == crate::error::ErrorKind::CacheFull && !claimed.pages.is_empty() => {}
            Err(e) => return Err(e), // `claimed` undoes the claims
        }
        if claimed.pages.is_empty() {
            return Ok(());
        }
        let ps = self.frames.page_size();
        let mut runs = Vec::new();
        self.runs_of(file, &claimed.pages, &mut runs);
        let mut slices: Vec<Vec<IoSliceMut<'_>>> = runs
            .iter()
            .map(|r| {
                claimed.pages[r.members.clone()]
                    .iter()
                    .map(|&(_, id)| {
                        // SAFETY: each frame is fresh and LOCKED by us, so nobody else reads
                        // or writes it until we end its load; each slice is exactly one
                        // frame, and the slices live only until the batch below returns.
                        let frame = unsafe { std::slice::from_raw_parts_mut(self.frames.ptr(id), ps) };
                        IoSliceMut::new(frame)
                    })
                    .collect()
            })
            .collect();
        let mut reqs: Vec<IoReq<'_, '_>> = runs
            .iter()
            .zip(slices.iter_mut())
            .map(|(r, bufs)| IoReq::Read { file: &file.backing[r.dev], offset: r.offset, bufs })
            .collect();
        let span = tracing::debug_span!("upcache.load", file = %file.name, runs = runs.len()).entered();
        let start = std::time::Instant::now();
        let results = self.engine.run_batch(&mut reqs);
        let took = start.elapsed();
        drop(span);
        drop(reqs);
        drop(slices);
        let pages = std::mem::take(&mut claimed.pages);
        let mut first_err = None;
        for (run, result) in runs.iter().zip(results) {
            self.metrics.latency.device_read[run.dev].record(took);
            let members = pages[run.members.clone()].iter().copied();
            if let Err(e) = self.end_run(file, members, run.dev, result, AfterLoad::Unpin) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::io::layout::LayoutKind;

    fn limits(pages: usize, segments: usize) -> RequestLimits {
        RequestLimits { pages, segments, segment_bytes: usize::MAX }
    }

    /// `runs` of `pages`, each in frame `frame(page)`, joined where `joined` says.
    fn runs_of(
        l: &StripeLayout,
        lim: RequestLimits,
        pages: impl IntoIterator<Item = (u64, FrameId)>,
        joined: impl Fn(FrameId, FrameId) -> bool,
    ) -> Vec<Run> {
        let (pages, mut out): (Vec<_>, _) = (pages.into_iter().collect(), Vec::new());
        runs(l, lim, &pages, joined, &mut out);
        out
    }

    /// `runs` over `pages` in frames that never join (a segment each).
    fn scattered(l: &StripeLayout, lim: RequestLimits, pages: impl IntoIterator<Item = u64>) -> Vec<Run> {
        runs_of(l, lim, pages.into_iter().map(|p| (p, 0)), |_, _| false)
    }

    #[test]
    fn runs_break_at_devices_gaps_and_the_size_cap() {
        // 4 KiB pages, 2-page stripe units, 2 devices: pages 0,1 on device 0; 2,3 on 1; 4,5 on 0.
        let l = StripeLayout::new(4096, 8192, 2, LayoutKind::Stripe);
        let r = scattered(&l, limits(MAX_RUN_PAGES, MAX_RUN_PAGES), [0, 1, 2, 3, 4, 5, 7]);
        let got: Vec<_> = r.iter().map(|r| (r.dev, r.offset, r.members.clone())).collect();
        assert_eq!(got, vec![(0, 0, 0..2), (1, 0, 2..4), (0, 8192, 4..6), (1, 12288, 6..7)]);
        // One device: consecutive pages form one stretch, cut evenly at MAX_RUN_PAGES; a gap
        // breaks it.
        let l = StripeLayout::new(4096, 8192, 1, LayoutKind::Stripe);
        let pages: Vec<u64> = (0..(MAX_RUN_PAGES as u64 + 3)).chain([1000]).collect();
        let r = scattered(&l, limits(usize::MAX, usize::MAX), pages);
        let lens: Vec<usize> = r.iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![514, 513, 1]);
        assert_eq!(r[1].offset, 514 * 4096);
        // A stretch over the segment limit is cut evenly, not into a full run and a scrap.
        let lens: Vec<usize> =
            scattered(&l, limits(MAX_RUN_PAGES, 254), 0..256).iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![128, 128]);
        let r = scattered(&l, limits(MAX_RUN_PAGES, 254), 0..300);
        let got: Vec<_> = r.iter().map(|r| (r.offset, r.members.len())).collect();
        assert_eq!(got, vec![(0, 150), (150 * 4096, 150)]);
        // The page limit cuts too.
        let lens: Vec<usize> =
            scattered(&l, limits(100, 254), 0..300).iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![100, 100, 100]);
    }

    #[test]
    fn frames_side_by_side_make_long_runs() {
        let l = StripeLayout::new(4096, 1 << 20, 1, LayoutKind::Stripe);
        // 512 frames a huge page.
        let joined = |a: FrameId, b: FrameId| b == a + 1 && b & 511 != 0;
        // 1024 pages in frames 100..1124: three segments (breaks at 512 and 1024), one run.
        let r = runs_of(&l, limits(1024, 254), (0..1024).map(|p| (p, 100 + p as FrameId)), joined);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].members, 0..1024);
        // Two segments a run: cut where the third starts (1024 - 100).
        let r = runs_of(&l, limits(1024, 2), (0..1024).map(|p| (p, 100 + p as FrameId)), joined);
        let got: Vec<_> = r.iter().map(|r| r.members.clone()).collect();
        assert_eq!(got, vec![0..924, 924..1024]);
        // One segment a run: cut at each break (412 = 512 - 100).
        let r = runs_of(&l, limits(1024, 1), (0..1024).map(|p| (p, 100 + p as FrameId)), joined);
        let got: Vec<_> = r.iter().map(|r| r.members.clone()).collect();
        assert_eq!(got, vec![0..412, 412..924, 924..1024]);
        // Scattered frames: 254 segments a run at most, cut evenly.
        let r = runs_of(&l, limits(1024, 254), (0..1024).map(|p| (p, 3 * p as FrameId)), joined);
        let lens: Vec<usize> = r.iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![205, 205, 205, 205, 204]);
        // Pages that are not back to back on the device break a run even in joined frames.
        let r = runs_of(&l, limits(1024, 254), [(0, 1), (1, 2), (5, 3)], joined);
        assert_eq!(r.len(), 2);
    }

    proptest::proptest! {
        /// Any pages in any frames: runs cover the pages in order, each back to back on one
        /// device and within both limits.
        #[test]
        fn runs_respect_the_limits(
            steps in proptest::collection::vec((1u64..3, 0u32..3), 1..400),
            max_pages in 1usize..300,
            max_segments in 1usize..40,
        ) {
            let l = StripeLayout::new(4096, 64 << 10, 2, LayoutKind::Stripe);
            let (mut page, mut frame) = (0u64, 0 as FrameId);
            let items: Vec<(u64, FrameId)> = steps
                .iter()
                .map(|&(dp, df)| {
                    (page, frame) = (page + dp, frame + df as FrameId);
                    (page, frame)
                })
                .collect();
            let joined = |a: FrameId, b: FrameId| b == a + 1;
            let r = runs_of(&l, limits(max_pages, max_segments), items.iter().copied(), joined);
            let mut next = 0;
            for run in &r {
                proptest::prop_assert_eq!(run.members.start, next);
                next = run.members.end;
                let m = &items[run.members.clone()];
                proptest::prop_assert!(!m.is_empty() && m.len() <= max_pages);
                proptest::prop_assert_eq!(l.locate(m[0].0), (run.dev, run.offset));
                let mut segs = 1;
                for w in m.windows(2) {
                    proptest::prop_assert_eq!(l.next_on_device(w[0].0), Some(w[1].0));
                    segs += usize::from(!joined(w[0].1, w[1].1));
                }
                proptest::prop_assert!(segs <= max_segments);
            }
            proptest::prop_assert_eq!(next, items.len());
        }
    }

    #[test]
    fn a_short_read_is_shared_out_page_by_page() {
        assert_eq!((0..3).map(|i| page_share(4096 + 100, i, 4096)).collect::<Vec<_>>(), vec![4096, 100, 0]);
    }
}
