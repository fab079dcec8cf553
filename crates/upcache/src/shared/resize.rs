//! Online resizing of a shared cache (SAFS §4.1): the frames in use are the segment's first
//! `active` (`View::active`); with page sets, the first ways of each set (`Active::ways`:
//! a page keeps its set, whose associativity shrinks, where SAFS splits and merges sets); with
//! NUMA partitions, the first of each node's frames, its share of `active`
//! (`numa::active_of`). Claims take frames in use only (`Inner::in_use`, looked at again under the frame's lock). A
//! smaller size is stored first, then every frame out of use is emptied, its dirty page
//! written back first, and, in a private cache without sets, the whole 2 MiB chunks past the
//! size given back to the system (`Segment::discard`); a larger one (up to the memory the
//! cache was made with) is stored and the frames it adds listed free (`free.rs`; a set's hand
//! finds its own), so the next misses take them first.
//!
//! # Invariants
//! - A claim that locked a frame out of use lets it go: a shrink stores the size (SeqCst)
//!   before it locks the frames out of use, so a claim that locks one after the shrink did
//!   sees the new size, and one that locked it before is waited out and its page emptied.
//! - Only a resize changes the size, under `Header::resize_lock`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::frame::{key_slot, DIRTY};
use super::technique;
use super::{Inner, SharedCache};
use crate::error::{Error, ErrorKind, Result};

/// The fewest frames a resize leaves: 64 KiB of 4 KiB pages, the smallest cache (with page
/// sets, one way of each set at least).
const MIN_FRAMES: usize = 16;
/// How long a shrink waits for pinned pages, for dirty ones this process cannot write to be
/// written back by their writers or the service, and for frames or index partitions stopped
/// processes hold, before it gives up.
const SHRINK_PATIENCE: Duration = Duration::from_secs(2);

impl SharedCache {
    /// Changes how much of its memory the cache uses, while every process's I/O runs:
    /// `bytes` rounded down to whole pages, between 16 frames and the memory it was made with.
    /// Shrinking empties the frames past the new size (writing dirty pages back first) and,
    /// in a private cache ([`SharedCache::create_private`]), gives their memory back (a
    /// segment's file keeps it: its frames may still be read by optimistic readers). It
    /// fails with `Busy`, the size unchanged, if pinned pages, dirty pages of files this
    /// process cannot write that no writer or the service wrote back, or frames stopped
    /// processes hold, stay there for 2 s. With page sets the size is in whole ways of every
    /// set (a page stays in its set; the sets' associativity is what changes): as many as
    /// fit, 16 frames at least. With NUMA partitions each node keeps its share of the size,
    /// its first frames (a private cache's memory out of use is kept). Returns the bytes of
    /// frames now in use.
    pub fn resize(&self, bytes: u64) -> Result<u64> {
        let inner = &self.inner;
        inner.check_service()?;
        let view = &inner.view;
        let want = ((bytes / view.page_size.bytes() as u64) as usize)
            .clamp(MIN_FRAMES.min(view.n_frames), view.n_frames);
        let lock = &view.header().resize_lock;
        // A resizer that died left the size it stored and some frames past it emptied: the
        // next resize goes on from there.
        lock.lock(inner.me, |h| inner.alive(h));
        let old = view.active();
        let done = match inner.set_ways() {
            Some(ways) => inner.set_set_ways(ways, want),
            // Growing, frames past the new size may still hold pages a resizer that died left.
            None => inner.set_size(old, want),
        };
        if done.is_ok() && want > old && inner.pools_free_frames() {
            // Listed free, so the next misses take them first (whatever the policy's order,
            // which has never seen them).
            for f in old as u32..want as u32 {
                let m = &view.frames()[f as usize];
                if m.key() == 0 && m.home() == 0 {
                    inner.list_free(f);
                }
            }
        }
        lock.unlock(inner.me);
        done.map(|()| (view.active() * view.page_size.bytes()) as u64)
    }
}

impl Inner {
    /// Whether frame `f` is in use: below the size; with page sets, among the ways in use of
    /// its set (`Active::ways`); with NUMA partitions, among the first of its node's frames,
    /// as many as its share of the size (`numa::active_of`).
    pub(crate) fn in_use(&self, f: u32) -> bool {
        let (f, view) = (f as usize, &self.view);
        match (self.set_ways(), view.header().numa.count()) {
            (Some(ways), _) => (f % ways) < self.active_ways(),
            (None, 1) => f < view.active(),
            (None, nodes) => {
                let node = super::numa::node_of_frame(f, nodes, view.n_frames);
                super::numa::active_of(node, nodes, view.n_frames, view.active()).contains(&f)
            }
        }
    }

    /// The ways of each set in use (all of them without a resize; `usize::MAX` without sets).
    pub(crate) fn active_ways(&self) -> usize {
        // Acquire: pairs with a resize's stores.
        match self.view.header().active.ways.load(Ordering::Acquire) {
            0 => usize::MAX,
            w => w as usize,
        }
    }

    /// With page sets, the ways of a set (a whole one's); None without.
    fn set_ways(&self) -> Option<usize> {
        (self.techniques & technique::SET_ASSOC != 0).then(|| self.view.header().set_ways() as usize)
    }

    /// With page sets of `ways` ways: makes the first ways of each set the frames in use, as
    /// many as fit in `want` frames (16 at least), and empties every other frame (those a
    /// resizer that died left too).
    fn set_set_ways(&self, ways: usize, want: usize) -> Result<()> {
        let view = &self.view;
        let n = view.n_frames;
        // Frames in use with `k` ways kept: `k` of each whole set, and of the last (which may
        // be smaller).
        let (full, rest) = (n / ways, n % ways);
        let frames_with = |k: usize| full * k + k.min(rest);
        // The most ways whose frames fit in `want` (all of them for the whole size), but no
        // fewer than make the smallest cache.
        let least = (1..=ways).find(|&k| frames_with(k) >= MIN_FRAMES.min(n)).unwrap_or(ways);
        let keep = (1..=ways).rev().find(|&k| frames_with(k) <= want).unwrap_or(1).max(least);
        let (old_ways, old_frames) = (view.header().active.ways.load(Ordering::Acquire), view.active());
        let frames = frames_with(keep);
        debug_assert_eq!(frames, (0..n).filter(|f| f % ways < keep).count());
        // SeqCst: before our locks of the frames out of use (the module's invariant).
        view.header().active.ways.store(keep as u32, Ordering::SeqCst);
        view.header().active.frames.store(frames as u32, Ordering::SeqCst);
        let left: Vec<u32> = (0..n as u32).filter(|&f| f as usize % ways >= keep).collect();
        self.vacate_all(left).inspect_err(|_| {
            view.header().active.ways.store(old_ways, Ordering::SeqCst);
            view.header().active.frames.store(old_frames as u32, Ordering::SeqCst);
        })
    }

    /// Makes `new` the frames in use (`old` before) and empties every frame past it (past the
    /// old size too: a resizer that died may have left pages there).
    fn set_size(&self, old: usize, new: usize) -> Result<()> {
        let view = &self.view;
        // SeqCst: before our locks of the frames past it (the module's invariant).
        view.header().active.frames.store(new as u32, Ordering::SeqCst);
        // Past it; with NUMA partitions, past each node's share of it.
        let left = (0..view.n_frames as u32).filter(|&f| !self.in_use(f)).collect();
        if let Err(e) = self.vacate_all(left) {
            view.header().active.frames.store(old as u32, Ordering::SeqCst);
            return Err(e);
        }
        // Only a private cache's memory is given back: an optimistic reader that found a frame
        // before it was emptied may still copy from it (and fail its version check after),
        // and a read of a hole punched in a segment's file would allocate a page there again,
        // or raise SIGBUS on a full tmpfs; anonymous memory given back reads as zeros. (With
        // NUMA partitions the frames out of use are each node's last: kept.)
        if !view.header().has(technique::PRIVATE_FRAMES) || view.header().numa.count() > 1 {
            return Ok(());
        }
        let per = view.page_size.chunk_frames();
        let chunks = view.n_frames.div_ceil(per);
        for c in new.div_ceil(per)..chunks {
            let chunk = view.chunk(c);
            if !chunk.allocated() {
                continue;
            }
            let frames = (view.n_frames - c * per).min(per);
            // The memory is given back where the system lets us; a refusal only keeps it.
            if view.seg.discard(view.page((c * per) as u32), frames * view.page_size.bytes()).is_ok() {
                chunk.released();
            }
        }
        Ok(())
    }

    /// Empties the frames of `left`, out of use, within `SHRINK_PATIENCE`; `Busy` if some
    /// stay held (the caller restores the size).
    fn vacate_all(&self, mut left: Vec<u32>) -> Result<()> {
        let deadline = Instant::now() + SHRINK_PATIENCE;
        loop {
            left.retain(|&f| !self.vacate(f));
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!(
                        "{} frames out of use at the new size hold pinned pages, or dirty ones this process cannot write",
                        left.len()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Empties frame `f`, out of the frames in use: true once it holds no page. A dirty page is
    /// written back first (by us if we can write its file, else asked of the service), a
    /// pinned one waited for (false until then).
    fn vacate(&self, f: u32) -> bool {
        let m = &self.view.frames()[f as usize];
        let k = m.key();
        if m.flags() & DIRTY != 0 && k != 0 {
            if self.writable_fd(key_slot(k)).is_none() {
                self.ask_write_back(key_slot(k));
                return false;
            }
            self.write_back_victim(f);
        }
        // Locked even if it looks empty: a claim that locked it before our store of the size
        // may be filling it (the module's invariant). A stopped holder is not waited for.
        if !self.lock_frame_unless(f, &|h| self.stopped(h)) {
            return false;
        }
        if m.key() == 0 && m.home() == 0 {
            m.unlock(self.me, false);
            return true;
        }
        if m.flags() & DIRTY != 0 || self.pinned(f) || !self.unindex_unless(f, &|h| self.stopped(h)) {
            m.unlock(self.me, false);
            return false;
        }
        if m.key() != 0 {
            self.count(|s| &s.evictions, 1);
        }
        self.empty_frame(f);
        m.unlock(self.me, true);
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::{small, stress_own_pages};
    use super::super::{SharedCache, SharedConfig};
    use crate::error::ErrorKind;
    use crate::policy::PolicyKind;
    use std::sync::atomic::Ordering;

    /// 64 frames; no readahead; no write-back before the cache is full of dirty pages.
    fn sixty_four(policy: PolicyKind) -> SharedConfig {
        SharedConfig { memory: 64 * 4096, readahead: 0, dirty_ratios: (0.99, 1.0), policy, ..small() }
    }

    /// With `set_ways` ways per set: 8 sets of 8 in `sixty_four`'s frames.
    fn in_sets(config: SharedConfig) -> SharedConfig {
        SharedConfig { index: crate::index::IndexKind::SetAssoc, set_ways: 8, ..config }
    }

    /// A shrink empties every frame past the new size (with page sets, every way of a set past
    /// the ways kept), writing its dirty pages back first, and misses then take frames in use
    /// only; growing back, they take the others again. Every byte written is read back, and on
    /// disk after a sync. Through a cache whose frames are in its segment and a private one,
    /// with the clock hand, S3-FIFO's queues, and sets under CLOCK and LRU.
    #[test]
    fn a_smaller_cache_keeps_no_page_past_its_frames_and_loses_no_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, (0..96 * 4096u32).map(|i| (i >> 12) as u8).collect::<Vec<u8>>()).unwrap();
        let data: Vec<u8> = (0..48 * 4096u32).map(|i| (i.wrapping_mul(31) >> 7) as u8).collect();
        // Sets: 8 of 8; NUMA: two nodes of 32 frames each.
        let (plain, sets, numa) = (0, 1, 2);
        for (policy, private, kind) in [
            (PolicyKind::Clock, false, plain),
            (PolicyKind::S3Fifo, false, plain),
            (PolicyKind::Clock, true, plain),
            (PolicyKind::Clock, false, sets),
            (PolicyKind::Lru, true, sets),
            (PolicyKind::GClock, false, numa),
            (PolicyKind::Lfu, true, numa),
        ] {
            let what = format!("{policy:?}, private {private}, kind {kind}");
            let config = match kind {
                1 => in_sets(sixty_four(policy)),
                2 => SharedConfig { numa: "0;1".parse().unwrap(), ..sixty_four(policy) },
                _ => sixty_four(policy),
            };
            let cache =
                if private { SharedCache::create_private(&config) } else { SharedCache::create(&config) }
                    .unwrap();
            let (fa, fb) = (cache.open_path(&a, true).unwrap(), cache.open_path(&b, false).unwrap());
            fa.write_all_at(&data, 0).unwrap();
            let mut page = vec![0u8; 4096];
            for p in 0..16 {
                fb.read_at(&mut page, p * 4096).unwrap();
            }
            assert_eq!(cache.resize(24 * 4096 + 100).unwrap(), 24 * 4096, "{what}");
            assert_eq!((cache.memory(), cache.status().stats.frames), (24 * 4096, 24), "{what}");
            assert_eq!(cache.config().memory, 64 * 4096, "{what}: made with");
            let frames = cache.inner.view.frames();
            // Out of use at 24 frames: past the 24th; in 8 sets of 8, past each set's 3rd; in
            // two nodes of 32, past each node's 12th.
            let out = |f: usize| match kind {
                1 => f % 8 >= 3,
                2 => f % 32 >= 12,
                _ => f >= 24,
            };
            let past = |_: usize| {
                frames.iter().enumerate().filter(|(f, m)| out(*f) && (m.key() != 0 || m.home() != 0)).count()
            };
            assert_eq!(past(24), 0, "{what}: pages past the new size");
            for p in 0..96 {
                fb.read_at(&mut page, p * 4096).unwrap();
                assert_eq!(page, vec![p as u8; 4096], "{what}: b's page {p}");
                assert_eq!(past(24), 0, "{what}: a miss took a frame past the new size");
            }
            let mut back = vec![0u8; data.len()];
            fa.read_at(&mut back, 0).unwrap();
            assert!(back == data, "{what}: a's bytes after the shrink");
            assert_eq!(
                cache.resize(1 << 30).unwrap(),
                64 * 4096,
                "{what}: at most the memory it was made with"
            );
            for p in 0..96 {
                fb.read_at(&mut page, p * 4096).unwrap();
            }
            assert!(past(24) > 0, "{what}: grown, the misses took the frames past 24 again");
            fa.sync_data().unwrap();
            assert!(std::fs::read(&a).unwrap() == data, "{what}: a on disk");
            cache.check_index().unwrap();
            assert_eq!(cache.resize(0).unwrap(), 16 * 4096, "{what}: 64 KiB at least");
        }
    }

    /// Pages of 16 KiB: a resize counts their frames (a private cache of 64, to 24, to all,
    /// to the 16 frames at least), and every byte written stays through it.
    #[test]
    fn a_cache_of_larger_pages_resizes_in_its_frames() {
        const PAGE: u64 = 16 << 10;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let config =
            SharedConfig { page_size: PAGE as usize, memory: 64 * PAGE, ..sixty_four(PolicyKind::Clock) };
        let cache = SharedCache::create_private(&config).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let data: Vec<u8> = (0..100 * PAGE as u32).map(|i| (i.wrapping_mul(29) >> 9) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        assert_eq!(cache.resize(24 * PAGE + 100).unwrap(), 24 * PAGE);
        assert_eq!(cache.status().stats.frames, 24);
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
        assert!(back == data, "the bytes after the shrink");
        assert_eq!(cache.resize(1 << 30).unwrap(), 64 * PAGE);
        assert_eq!(cache.resize(0).unwrap(), 16 * PAGE, "16 frames at least");
        f.sync_data().unwrap();
        assert!(std::fs::read(&p).unwrap() == data, "on disk");
        cache.check_index().unwrap();
    }

    /// Frames that are no multiple of the ways (64 in sets of 12: 5 whole and one of 4): a
    /// resize keeps the most ways that fit, and the whole size is every way of every set,
    /// so a cache grows back to all its frames.
    #[test]
    fn page_sets_of_any_size_resize_to_whole_ways_and_back_to_all_frames() {
        let config = SharedConfig { set_ways: 12, ..in_sets(sixty_four(PolicyKind::Clock)) };
        let cache = SharedCache::create(&config).unwrap();
        assert_eq!(cache.resize(64 * 4096).unwrap(), 64 * 4096, "the whole size: every way");
        // 7 ways: 5 * 7 + 4 (the last set has 4) = 39 frames; 8 ways would be 44.
        assert_eq!(cache.resize(40 * 4096).unwrap(), 39 * 4096);
        assert_eq!(cache.inner.active_ways(), 7);
        // 64 KiB at least: 3 ways, 5 * 3 + 3 = 18 frames (2 ways would be 12).
        assert_eq!(cache.resize(0).unwrap(), 18 * 4096);
        assert_eq!(cache.resize(1 << 30).unwrap(), 64 * 4096, "grown back to every frame");
        assert!((0..64).all(|f| cache.inner.in_use(f)));
    }

    /// A pinned page past the new size keeps a shrink from finishing: `Busy`, the size as it
    /// was, the page still there; unpinned, the shrink goes through.
    #[test]
    fn a_pinned_page_past_the_new_size_fails_a_shrink_that_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, (0..64 * 4096u32).map(|i| (i >> 12) as u8).collect::<Vec<u8>>()).unwrap();
        let cache = SharedCache::create(&sixty_four(PolicyKind::Clock)).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let mut page = vec![0u8; 4096];
        for i in 0..64 {
            f.read_at(&mut page, i * 4096).unwrap();
        }
        let pinned = f.pin(63 * 4096).unwrap();
        let e = cache.resize(16 * 4096).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
        assert_eq!(cache.inner.view.active(), 64);
        assert_eq!(pinned[..], vec![63u8; 4096][..]);
        drop(pinned);
        assert_eq!(cache.resize(16 * 4096).unwrap(), 16 * 4096);
    }

    /// Resizes back and forth while three threads read and write a file twice the cache, with
    /// sampled LRU, with S3-FIFO's queues, and with LRU in sets: no
    /// read sees a page torn, every page ends as its last write left it, and after
    /// the last shrink no frame past the size holds a page.
    #[test]
    fn resizes_under_readers_and_writers_lose_and_tear_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for (policy, sets) in [(PolicyKind::Lru, false), (PolicyKind::S3Fifo, false), (PolicyKind::Lru, true)]
        {
            let config = SharedConfig { dirty_ratios: (0.5, 0.75), ..sixty_four(policy) };
            let config = if sets { in_sets(config) } else { config };
            let cache = SharedCache::create(&config).unwrap();
            stress_own_pages(&cache, &p, 128, 3, None, |ops| {
                for i in 0..60u64 {
                    // Each resize after the threads did 300 more operations.
                    let until = ops.load(Ordering::Relaxed) + 300;
                    while ops.load(Ordering::Relaxed) < until {
                        std::thread::yield_now();
                    }
                    // In sets, whole ways of the 8 sets: 16 to 64 frames.
                    let bytes =
                        if i % 2 == 0 { (16 + (i % 7) * if sets { 8 } else { 1 }) * 4096 } else { 64 * 4096 };
                    match cache.resize(bytes) {
                        Ok(n) => assert_eq!(n, bytes),
                        Err(e) => assert_eq!(e.kind(), ErrorKind::Busy, "{e}"),
                    }
                }
                assert_eq!(cache.resize(24 * 4096).unwrap(), 24 * 4096);
            });
            let frames = cache.inner.view.frames();
            let out = |f: usize| if sets { f % 8 >= 3 } else { f >= 24 };
            let left = frames.iter().enumerate().filter(|(f, m)| out(*f) && (m.key() != 0 || m.home() != 0));
            assert_eq!(left.count(), 0, "a page past the size");
            cache.check_index().unwrap();
        }
    }
}
