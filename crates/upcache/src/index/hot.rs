//! ScalaCache's per-thread private index (§5.3, the "Queue Index"): each thread remembers the
//! frames of the pages it pinned last, so a repeat pin skips the shared page index. Both
//! engines use it (`cache/page.rs`, `shared/pin.rs`), each entry tagged with the cache it
//! belongs to.
//!
//! An entry is only a hint and needs no invalidation: using one pins the frame and checks
//! that it is owned, still keyed to the page and `VALID`, which is exactly what makes an
//! index lookup's answer safe to use too (see `cache/page.rs`). An evicted frame fails the
//! pin (`UNOWNED`) or the key check; a frame can be keyed to a page and `VALID` only as the
//! page's one frame in the index, and pins hold the page's range shared, so a truncation or
//! removal cannot drop it meanwhile. (The shared cache's pin checks its frame's `home` and
//! `VALID` and validates against the frame's version, `shared/pin_ledger.rs`.) A hint from
//! another cache (a thread may use several) is bounds-checked and fails the same checks.

use std::cell::Cell;

use crate::frame::FrameId;

/// Entries per thread, direct-mapped: 8 KiB of thread-local memory, a fraction of L1, that
/// remembers 1 MiB of 4 KiB pages. (With 64, random pins over 1 MiB found a hint a quarter of
/// the time and ran at 13.1-13.9M/s; with 256, 88% and 15.2-15.7M/s. Over 64 MiB both miss
/// and run alike.)
const SLOTS: usize = 256;
const _: () = assert!(SLOTS.is_power_of_two());

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
    (h >> (64 - SLOTS.trailing_zeros())) as usize
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pages_spread_over_every_slot() {
        let used: std::collections::HashSet<usize> = (0..64 * SLOTS as u64).map(|p| slot(7, p)).collect();
        assert_eq!(used.len(), SLOTS, "the hash reaches only some slots");
        assert!(used.iter().all(|&s| s < SLOTS));
    }
}
