//! Multi-page loads (SAFS §4.2, ScalaCache §5.4): the missing pages of a range are claimed
//! together, grouped into runs that lie back to back in one backing file, and each run is
//! read with one vectored request into its (non-contiguous) frames; the runs of every device
//! go to the engine as one batch, which io_uring submits at once.

use std::io::IoSliceMut;
use std::ops::Range;

use super::page::{Fill, LockedPage};
use super::CacheInner;
use crate::error::{Error, Result};
use crate::file::FileInner;
use crate::frame::FrameId;
use crate::io::engine::IoReq;
use crate::io::layout::StripeLayout;

/// Most pages in one request: 4 MiB of 4 KiB pages (Linux caps a request at 1024 iovecs).
/// A cache uses fewer where its devices take fewer segments per request
/// ([`CacheInner::run_pages`]).
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

/// Groups `pages` (ascending) into runs adjacent in one backing file, each at most `cap`
/// (at most [`MAX_RUN_PAGES`]) long. A longer stretch is cut into nearly equal runs, not
/// into full ones and a short remainder: a device then gets requests of one size.
pub(crate) fn runs(layout: &StripeLayout, cap: usize, pages: impl IntoIterator<Item = u64>) -> Vec<Run> {
    let cap = cap.clamp(1, MAX_RUN_PAGES);
    let mut stretches: Vec<(u64, Range<usize>)> = Vec::new();
    let mut prev = None;
    for (i, page) in pages.into_iter().enumerate() {
        let extends = prev.is_some_and(|p| layout.next_on_device(p) == Some(page));
        match stretches.last_mut() {
            Some((_, r)) if extends => r.end = i + 1,
            _ => stretches.push((page, i..i + 1)),
        }
        prev = Some(page);
    }
    let ps = layout.page_size();
    let mut runs = Vec::with_capacity(stretches.len());
    for (first_page, r) in stretches {
        let (dev, offset) = layout.locate(first_page);
        let parts = r.len().div_ceil(cap);
        let (base, extra) = (r.len() / parts, r.len() % parts);
        let mut at = r.start;
        for k in 0..parts {
            let len = base + usize::from(k < extra);
            runs.push(Run { dev, offset: offset + (at - r.start) as u64 * ps, members: at..at + len });
            at += len;
        }
    }
    runs
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
        let frames = self.sets.as_ref().map_or(self.frames.len(), |s| s.frames_used());
        (frames / 4).clamp(1, self.run_pages) as u64
    }

    /// Claims each page of `pages` that has no frame (valid or loading) as a fresh `LOCKED`
    /// load, appended to `out` for the caller to read and end with [`Self::end_run`]. Stops
    /// at the first error and returns it; what was claimed before stays in `out`.
    pub(crate) fn claim_missing(
        &self,
        file: &FileInner,
        pages: Range<u64>,
        out: &mut Vec<(u64, FrameId)>,
    ) -> Result<()> {
        for page in pages {
            if file.index.peek(page).is_some() {
                continue;
            }
            if let Some(lp) = self.load_locked(file, page, Fill::Overwrite)? {
                out.push((page, lp.detach()));
            }
        }
        Ok(())
    }

    /// Ends the claimed loads `pages` of one run, read back to back by one request with
    /// result `read`. On success each page gets its share of the bytes read (the rest reads
    /// as zeros) and becomes `VALID` and ready; it stays pinned if `keep_pins` (an
    /// asynchronous read copies out of it next), else it is unpinned. On failure every load
    /// is undone (the frames leave the index, pins and all) and the error is returned.
    pub(crate) fn end_run(
        &self,
        file: &FileInner,
        pages: impl ExactSizeIterator<Item = (u64, FrameId)>,
        dev: usize,
        read: std::io::Result<usize>,
        keep_pins: bool,
    ) -> Result<()> {
        let ps = self.frames.page_size();
        match read {
            Ok(n) => {
                self.metrics.read_ios.add(1);
                self.metrics.read_bytes.add(n as u64);
                for (i, (page, id)) in pages.enumerate() {
                    let lp = LockedPage::attach(self, file, page, id);
                    self.zero_tail(&lp, page_share(n, i, ps));
                    if keep_pins {
                        lp.into_pinned().keep();
                    } else {
                        lp.commit(false);
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

    /// The frames `ids` (at most [`MAX_RUN_PAGES`]) as buffers for an engine queue's
    /// `push_read`, without allocating: the array and how much of it is used.
    pub(crate) fn frame_ptrs(&self, ids: impl Iterator<Item = FrameId>) -> ([*mut u8; MAX_RUN_PAGES], usize) {
        let mut bufs = [std::ptr::null_mut(); MAX_RUN_PAGES];
        let mut n = 0;
        for id in ids.take(MAX_RUN_PAGES) {
            bufs[n] = self.frames.ptr(id);
            n += 1;
        }
        (bufs, n)
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
        let runs = runs(&self.layout, self.run_pages, claimed.pages.iter().map(|&(p, _)| p));
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
        let results = self.engine.run_batch(&mut reqs);
        drop(reqs);
        drop(slices);
        let pages = std::mem::take(&mut claimed.pages);
        let mut first_err = None;
        for (run, result) in runs.iter().zip(results) {
            let members = pages[run.members.clone()].iter().copied();
            if let Err(e) = self.end_run(file, members, run.dev, result, false) {
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

    #[test]
    fn runs_break_at_devices_gaps_and_the_size_cap() {
        // 4 KiB pages, 2-page stripe units, 2 devices: pages 0,1 on device 0; 2,3 on 1; 4,5 on 0.
        let l = StripeLayout::new(4096, 8192, 2, LayoutKind::Stripe);
        let r = runs(&l, MAX_RUN_PAGES, [0, 1, 2, 3, 4, 5, 7]);
        let got: Vec<_> = r.iter().map(|r| (r.dev, r.offset, r.members.clone())).collect();
        assert_eq!(got, vec![(0, 0, 0..2), (1, 0, 2..4), (0, 8192, 4..6), (1, 12288, 6..7)]);
        // One device: consecutive pages form one stretch, cut evenly at MAX_RUN_PAGES; a gap
        // breaks it.
        let l = StripeLayout::new(4096, 8192, 1, LayoutKind::Stripe);
        let pages: Vec<u64> = (0..(MAX_RUN_PAGES as u64 + 3)).chain([1000]).collect();
        let r = runs(&l, MAX_RUN_PAGES, pages);
        let lens: Vec<usize> = r.iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![514, 513, 1]);
        assert_eq!(r[1].offset, 514 * 4096);
        // A stretch longer than the cap is cut evenly, not into a full run and a scrap.
        let lens: Vec<usize> = runs(&l, 254, 0..256).iter().map(|r| r.members.len()).collect();
        assert_eq!(lens, vec![128, 128]);
        let r = runs(&l, 254, 0..300);
        let got: Vec<_> = r.iter().map(|r| (r.offset, r.members.len())).collect();
        assert_eq!(got, vec![(0, 150), (150 * 4096, 150)]);
    }

    #[test]
    fn a_short_read_is_shared_out_page_by_page() {
        assert_eq!((0..3).map(|i| page_share(4096 + 100, i, 4096)).collect::<Vec<_>>(), vec![4096, 100, 0]);
    }
}
