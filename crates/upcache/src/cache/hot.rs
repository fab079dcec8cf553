//! ScalaCache's per-thread private index (§5.3, the "Queue Index"): each thread remembers the
//! frames of the pages it pinned last, so a repeat pin skips the shared page index.
//!
//! An entry is only a hint and needs no invalidation: using one pins the frame and checks
//! that it is owned, still keyed to the page and `VALID`, which is exactly what makes an
//! index lookup's answer safe to use too (see `cache/page.rs`). An evicted frame fails the
//! pin (`UNOWNED`) or the key check; a frame can be keyed to a page and `VALID` only as the
//! page's one frame in the index, and pins hold the page's range shared, so a truncation or
//! removal cannot drop it meanwhile. A hint from another cache (a thread may use several) is
//! bounds-checked and fails the same checks.

use std::cell::Cell;

use crate::frame::FrameId;

/// Entries per thread, direct-mapped.
const SLOTS: usize = 64;

#[derive(Clone, Copy)]
struct Entry {
    cache: usize,
    file: u64,
    page: u64,
    frame: FrameId,
}

const EMPTY: Entry = Entry { cache: 0, file: u64::MAX, page: u64::MAX, frame: 0 };

thread_local! {
    static HOT: [Cell<Entry>; SLOTS] = const { [const { Cell::new(EMPTY) }; SLOTS] };
}

fn slot(file: u64, page: u64) -> usize {
    let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ page).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 58) as usize % SLOTS
}

/// The frame this thread last pinned for `page` of `file` in cache `cache`, if remembered.
pub(crate) fn get(cache: usize, file: u64, page: u64) -> Option<FrameId> {
    HOT.with(|h| {
        let e = h[slot(file, page)].get();
        (e.cache == cache && e.file == file && e.page == page).then_some(e.frame)
    })
}

/// Remembers that this thread pinned `frame` for `page` of `file` in cache `cache`.
pub(crate) fn put(cache: usize, file: u64, page: u64, frame: FrameId) {
    HOT.with(|h| h[slot(file, page)].set(Entry { cache, file, page, frame }));
}
