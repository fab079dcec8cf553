//! Stream-based write-back (seed 003 §4.2): each file's dirty pages as streams, and the list
//! of files that have any.
//!
//! # The invariant
//! For every page of a file whose frame is not `LOCKED`: the frame is `DIRTY` if and only if
//! the page is in one of the file's dirty ranges. It holds because both sides change only
//! under `LOCKED`: a writer tracks a page when it turns it dirty, before it unlocks with
//! `DIRTY`; write-back cleans a run's pages from the tree after their write succeeded and
//! before it unlocks them without `DIRTY`. (Tracking after the unlock would let a second
//! writer find the page dirty, skip tracking, return, and have its caller's sync miss it;
//! cleaning after the unlock could erase a re-dirtying that came in between.) Dropped pages
//! (truncation, removal) leave the tree after their frames, under the exclusive range lock
//! that keeps writers out. So a sync that snapshots the dirty ranges sees every page dirtied
//! before it started, and nothing else: it costs what is dirty, not what is cached.
//!
//! The tree keeps only dirty streams: written-back pages are forgotten at once. Tracking clean
//! cached pages too (to evict by stream) would put the stream mutex on every miss and every
//! eviction, and nothing uses it yet.
//!
//! # Locking
//! The stream mutex is a leaf taken under a frame's `LOCKED` bit; inside it only the
//! write-back list's mutex is taken.

use std::ops::Range;

use std::collections::VecDeque;

use super::stream::StreamTree;
use crate::sync::{self, Mutex};

/// The write-back list: ids of files with dirty streams, oldest first. A file's `queued` flag
/// (under its stream mutex) is set while its id is here, and until the flusher that popped it
/// takes its ranges; an id may be here twice if its file was opened again after a failed open.
#[derive(Default)]
pub(crate) struct DirtyFiles {
    ids: Mutex<VecDeque<u64>>,
}

impl DirtyFiles {
    /// Queues a file that now has dirty streams; its caller holds the file's stream mutex
    /// and has just set its `queued` flag.
    fn queue(&self, id: u64) {
        sync::lock(&self.ids).push_back(id);
    }

    /// The oldest file with dirty streams, taken off the list (its taker clears `queued`).
    pub(crate) fn next(&self) -> Option<u64> {
        sync::lock(&self.ids).pop_front()
    }
}

/// A file's dirty streams.
#[derive(Default)]
pub(crate) struct FileStreams {
    inner: Mutex<Dirty>,
}

#[derive(Default)]
struct Dirty {
    tree: StreamTree,
    /// Whether the file's id is in the write-back list.
    queued: bool,
    /// Where the next write-back takes dirty ranges from (the kernel's `writeback_index`), so
    /// that flushers taking turns on one file write different parts of it.
    cursor: u64,
}

impl FileStreams {
    /// `page` turns dirty; its frame is `LOCKED` by the caller and not yet `DIRTY`.
    pub(crate) fn dirtied(&self, list: &DirtyFiles, file: u64, page: u64) {
        let mut d = sync::lock(&self.inner);
        d.tree.track(page..page + 1, true);
        if !d.queued {
            d.queued = true;
            list.queue(file);
        }
    }

    /// `pages` were written back; their frames are `LOCKED` by the caller and still `DIRTY`.
    pub(crate) fn cleaned(&self, pages: impl IntoIterator<Item = Range<u64>>) {
        let mut d = sync::lock(&self.inner);
        for r in pages {
            d.tree.clean_and_forget(r);
        }
    }

    /// Every page from `first` on was dropped; the caller holds that range exclusive.
    pub(crate) fn dropped_from(&self, first: u64) {
        self.cleaned(std::iter::once(first..u64::MAX));
    }

    /// Every dirty range, ascending.
    pub(crate) fn all(&self) -> Vec<Range<u64>> {
        sync::lock(&self.inner).tree.dirty_ranges().collect()
    }

    /// Up to `max` (at least 1) dirty pages for a write-back that took file `file` off the
    /// list: ranges from the cursor on (from the first, when nothing is dirty past it), and
    /// the cursor moves past them. If dirty pages are left outside them, the file goes back
    /// on the list at once, so that another flusher can write them meanwhile; the caller
    /// calls [`Self::requeue_if_dirty`] when done.
    pub(crate) fn take(&self, list: &DirtyFiles, file: u64, max: u64) -> Vec<Range<u64>> {
        debug_assert!(max > 0);
        let mut d = sync::lock(&self.inner);
        let mut from = d.cursor;
        if d.tree.dirty_from(from).next().is_none() {
            from = 0;
        }
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut n = 0;
        let mut more = from > 0 && d.tree.dirty_from(0).next().is_some_and(|r| r.start < from);
        for r in d.tree.dirty_from(from) {
            if n == max {
                more = true;
                break;
            }
            let end = r.end.min(r.start + (max - n));
            n += end - r.start;
            more |= end < r.end;
            out.push(r.start..end);
        }
        d.cursor = out.last().map_or(0, |r| r.end);
        d.queued = more;
        if more {
            list.queue(file);
        }
        out
    }

    /// Puts the file back on the write-back list if it still has dirty pages and is not on it.
    pub(crate) fn requeue_if_dirty(&self, list: &DirtyFiles, file: u64) {
        let mut d = sync::lock(&self.inner);
        if !d.queued && d.tree.dirty_from(0).next().is_some() {
            d.queued = true;
            list.queue(file);
        }
    }
}
