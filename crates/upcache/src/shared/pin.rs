//! Zero-copy access to the shared cache's pages (ScalaCache's pin/unpin, seed 004 §5.1), and
//! the per-thread hot index of pinned pages (§5.3), for every process.
//!
//! [`SharedPageRef`] holds a page's frame pinned through this process's ledger in the segment
//! (`pin_ledger.rs`): whatever would change its bytes, in any process (a write, a shrink's
//! zeroing, an eviction, a truncation, a bypass, an outside change), waits until it drops, or
//! passes the frame over (the clock hand); readers copy beside it as ever. A hit takes no
//! lock: the handshake of `pin_ledger.rs` against the frame's word, as an optimistic read
//! validates. A process killed while it holds pins holds nothing: its reaper clears its ledger.
//!
//! A process that holds a guard must not write the
//! page, nor truncate or extend the file: it would wait for itself, or for a writer of the
//! page (in any process) that waits for the guard while holding a part of the file an
//! extending write or a truncation waits for. Take the pins after such changes, or pin the
//! pages of another file.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;

#[cfg(test)]
use super::frame::PAGE;
use super::frame::{key_page, VALID};
use super::pin_ledger::{self, Ledger};
use super::{Inner, SharedFile};
use crate::error::{Error, ErrorKind, Result};
use crate::index::hot;
use crate::sync::AtomicU32;

/// A page of a shared file, pinned and readable in place. See the module's docs.
pub struct SharedPageRef<'a> {
    file: &'a SharedFile,
    frame: u32,
    slot: usize,
    len: usize,
    offset: u64,
}

impl std::fmt::Debug for SharedPageRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPageRef").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl SharedPageRef<'_> {
    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Deref for SharedPageRef<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the pin keeps the frame on this page with its bytes unchanged: every change
        // of them, in any process, waits for our ledger entry to go (`pin_ledger.rs`); `len`
        // is at most a page.
        unsafe { std::slice::from_raw_parts(self.file.inner.view.page(self.frame), self.len) }
    }
}

impl Drop for SharedPageRef<'_> {
    fn drop(&mut self) {
        // A forked child's copy of a guard is its parent's pin, not the child's to drop.
        if !self.file.inner.forked() {
            self.file.inner.own_ledger().free(self.slot);
        }
    }
}

/// A page of a shared file held for writing in place ([`SharedFile::pin_mut`]): its frame
/// locked and dirty, its range slot (or the file's lock) held; readers and writers of the page,
/// in every process, wait until it drops. A process killed while it holds one leaves the page
/// dirty with what it wrote, as a write killed half-way (`repair.rs`).
pub struct SharedPageMut<'a> {
    file: &'a SharedFile,
    frame: u32,
    len: usize,
    offset: u64,
    /// Let go after the frame (a forked child's copy: never).
    hold: ManuallyDrop<super::file::WriteHold<'a>>,
}

impl<'a> SharedPageMut<'a> {
    pub(super) fn new(
        file: &'a SharedFile,
        frame: u32,
        len: usize,
        offset: u64,
        hold: super::file::WriteHold<'a>,
    ) -> Self {
        SharedPageMut { file, frame, len, offset, hold: ManuallyDrop::new(hold) }
    }

    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl std::fmt::Debug for SharedPageMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPageMut").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl Deref for SharedPageMut<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame's lock: its bytes are this page's and nobody else's to
        // change; `len` is at most a page.
        unsafe { std::slice::from_raw_parts(self.file.inner.view.page(self.frame), self.len) }
    }
}

impl DerefMut for SharedPageMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only slice of them.
        unsafe { std::slice::from_raw_parts_mut(self.file.inner.view.page(self.frame), self.len) }
    }
}

impl Drop for SharedPageMut<'_> {
    fn drop(&mut self) {
        // A forked child's copy holds its parent's locks: not the child's to let go.
        if self.file.inner.forked() {
            return;
        }
        let inner = &self.file.inner;
        // Changed: the unlock bumps the version, so no optimistic read of before passes.
        inner.view.frames()[self.frame as usize].unlock(inner.me, true);
        // SAFETY: dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.hold) };
    }
}

impl Inner {
    /// This process's pin ledger.
    pub(crate) fn own_ledger(&self) -> Ledger<'_> {
        self.view.ledger(self.view.clients().index(self.me).unwrap_or(0))
    }

    /// Waits until no live process pins frame `f`, which we hold locked and will change,
    /// bumping its version at the unlock (`pin_ledger.rs`).
    pub(crate) fn wait_unpinned(&self, f: u32) {
        let m = &self.view.frames()[f as usize];
        // A frame not `VALID` has no pin: a pin needs it, and it goes only with `empty_frame`,
        // which waits here. (Under our lock: no fence needed for that.)
        if m.flags() & VALID == 0 || !pin_ledger::may_be_pinned(m) {
            return;
        }
        self.find_pin(f, |s, owner| {
            pin_ledger::wait_for(s, f, || self.alive(owner));
            false
        });
        pin_ledger::clear_pinned(m);
    }

    /// Whether a live process pins frame `f`, which we hold locked: the clock hand passes it
    /// over (and an entry of a dead process it meets is cleared).
    pub(crate) fn pinned(&self, f: u32) -> bool {
        let m = &self.view.frames()[f as usize];
        pin_ledger::may_be_pinned(m)
            && self.find_pin(f, |s, owner| {
                if self.alive(owner) {
                    return true;
                }
                pin_ledger::wait_for(s, f, || false); // clears it
                false
            })
    }

    /// Calls `found` with each ledger slot that names frame `f` and its owner's client id,
    /// until it says true (then true).
    fn find_pin(&self, f: u32, mut found: impl FnMut(&AtomicU32, u32) -> bool) -> bool {
        let clients = self.view.clients();
        (0..self.view.n_clients()).any(|c| {
            let ledger = self.view.ledger(c);
            ledger.in_use() && ledger.naming(f).any(|s| found(s, clients.id_at(c)))
        })
    }
}

impl SharedFile {
    /// Pins the page holding byte `offset` and borrows its bytes in place (zero-copy; see
    /// [`SharedPageRef`]): from the page's first byte to its last byte inside the file. Loads
    /// the page on a miss. Fails with `InvalidInput` at or past the end of file, `Busy` if
    /// this process holds 64 pages pinned already, and `Unsupported` for a file that no
    /// process caches any more ([`Self::bypass`]).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let path = tmp.path().join("f");
    /// # let config = upcache::shared::SharedConfig { memory: 1 << 20, ..Default::default() };
    /// # let cache = upcache::shared::SharedCache::create(&config)?;
    /// let f = cache.open_path(&path_with(&path, b"hello")?, true)?;
    /// let page = f.pin(2)?; // the page holding byte 2, in place
    /// assert_eq!((page.offset(), &page[..]), (0, &b"hello"[..]));
    /// drop(page); // before this thread writes the page: a writer waits for its pins
    /// # fn path_with(p: &std::path::Path, b: &[u8]) -> std::io::Result<std::path::PathBuf> {
    /// #     std::fs::write(p, b).map(|()| p.to_path_buf())
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin(&self, offset: u64) -> Result<SharedPageRef<'_>> {
        let inner = &*self.inner;
        inner.check_service()?;
        inner.check_range_lock("pin")?;
        self.look_outside_if_due();
        if self.bypassed() {
            self.check_live()?;
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("pin {}: the file is read and written without the cache now", self.name),
            ));
        }
        let (view, ledger) = (&inner.view, inner.own_ledger());
        // Before the key: an offset past any file has no page key.
        if offset >= self.cached_len() {
            return Err(self.past_end(offset));
        }
        let page = view.page_size.page_of(offset);
        let k = inner.key(self.slot, page);
        // The hot index's tags: this attachment's pages, and the key without its page.
        let (cache, file) = (view.pages.as_ptr() as usize, k - key_page(k));
        let use_hot = inner.hot_index();
        loop {
            if offset >= self.cached_len() {
                return Err(self.past_end(offset));
            }
            let hinted = use_hot.then(|| hot::get(cache, file, page)).flatten();
            let (found, from_hot) = (hinted.or_else(|| inner.index().hint(k)), hinted.is_some());
            if let Some(f) = found.filter(|&f| (f as usize) < view.n_frames) {
                // The caller's line of the page on its way while the frame's word is (two
                // misses overlapped).
                crate::frame::prefetch(view.page(f).wrapping_add(view.page_size.in_page(offset)));
                let m = &view.frames()[f as usize];
                if let Some(w) = m.stable() {
                    let flags = m.flags();
                    if m.home() == k && flags & VALID != 0 {
                        let slot = ledger.take(f).ok_or_else(|| self.busy())?;
                        if pin_ledger::confirm(m, w) {
                            m.note_read(flags, inner.counts_hits(), false);
                            inner.count_hit();
                            if from_hot {
                                inner.count_hot_hit();
                            } else if use_hot {
                                hot::put(cache, file, page, f);
                            }
                            return self.guard(slot, f, offset);
                        }
                        ledger.free(slot);
                    }
                }
            }
            // Missing, in flight or changing: the page's frame locked (loaded if need be),
            // waiting for whoever holds it, a stopped process too (its write may be half
            // copied). A pin under the lock stands: the next holder's loads follow our unlock.
            let Some((f, _)) =
                inner.lock_page_loading(self.slot, page, (1, 1), &self.fd, &|_| false, true)?
            else {
                continue;
            };
            let m = &view.frames()[f as usize];
            let Some(slot) = ledger.take(f) else {
                m.unlock(inner.me, false);
                return Err(self.busy());
            };
            // Relaxed: published by the unlock's Release.
            m.flags.fetch_or(super::frame::PINNED, Ordering::Relaxed);
            m.unlock(inner.me, false);
            if use_hot {
                hot::put(cache, file, page, f);
            }
            return self.guard(slot, f, offset);
        }
    }

    /// The guard of the pin of frame `f` in ledger slot `slot`, if `offset` is still inside
    /// the file, up to its end: the length and a shrink's intent are read after the pin
    /// stands. A shrink states its intent, then waits for the pins of the pages it cuts, and
    /// only then lowers the length (`SharedFile::cut_to`): so a guard never reaches past the
    /// end while it lives, whichever of the two the other saw.
    fn guard(&self, slot: usize, frame: u32, offset: u64) -> Result<SharedPageRef<'_>> {
        // Acquire: a shrink that stored its intent before it looked at our frame (under its
        // lock, which our pin's stores precede or wait for) is seen.
        let cut = self.entry().cut.load(Ordering::Acquire);
        // Removed meanwhile (an array file): its pages are no longer the file's.
        if let Err(e) = self.check_live() {
            self.inner.own_ledger().free(slot);
            return Err(e);
        }
        let len = self.cached_len().min(cut.wrapping_sub(1));
        if offset >= len {
            self.inner.own_ledger().free(slot);
            return Err(self.past_end(offset));
        }
        let size = self.inner.view.page_size;
        let start = size.start(size.page_of(offset));
        let len = (len - start).min(size.bytes() as u64) as usize;
        Ok(SharedPageRef { file: self, frame, slot, len, offset: start })
    }

    fn past_end(&self, offset: u64) -> Error {
        Error::new(
            ErrorKind::InvalidInput,
            format!("pin {} at {offset}: at or past its end, {}", self.name, self.cached_len()),
        )
    }

    fn busy(&self) -> Error {
        Error::new(
            ErrorKind::Busy,
            format!(
                "pin {}: this process holds {} pages of the shared cache pinned, the most it may",
                self.name,
                pin_ledger::PIN_SLOTS
            ),
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shared::file::tests::{forked_client_done, two_clients_of};
    use crate::shared::pin_ledger::WAITER;
    use crate::shared::{SharedCache, SharedConfig};

    /// A file of `pages` pages at `dir/f`, page `p` all `p as u8`.
    fn file_of(dir: &std::path::Path, pages: usize) -> std::path::PathBuf {
        let p = dir.join("f");
        let bytes: Vec<u8> = (0..pages).flat_map(|i| vec![i as u8; PAGE]).collect();
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn waiting_for(cache: &SharedCache) -> bool {
        cache.inner.own_ledger().slots.iter().any(|s| s.load(Ordering::Relaxed) & WAITER != 0)
    }

    /// `pin_mut` writes in place: a reader in another process waits for the guard (the
    /// frame's waiter bit, no timing) and reads what it left; a sync writes the page back.
    #[test]
    fn a_page_held_for_writing_in_place_changes_for_every_process_when_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 4);
        let (a, b) = two_clients_of(SharedConfig::default());
        let (fa, fb) = (a.open_path(&p, true).unwrap(), b.open_path(&p, false).unwrap());
        let mut page = fa.pin_mut(4096 + 10).unwrap();
        assert_eq!((page.offset(), page.len()), (4096, PAGE));
        assert!(page.iter().all(|&x| x == 1));
        let word = &a.inner.view.frames()[page.frame as usize].word;
        let e = fa.entry();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut buf = [0u8; 8];
                fb.read_at(&mut buf, 4096).unwrap();
                buf
            });
            // The reader sleeps on the page's range slot or frame (a waiter bit), then reads
            // after us.
            while word.load(Ordering::Relaxed) & (1 << 31) == 0
                && !e.ranges.iter().any(|r| r.lock.contended())
            {
                std::thread::yield_now();
            }
            page[..8].copy_from_slice(b"in place");
            drop(page);
            assert_eq!(&reader.join().unwrap(), b"in place");
        });
        fa.sync_data().unwrap();
        let disk = std::fs::read(&p).unwrap();
        assert_eq!(&disk[4096..4104], b"in place");
        assert!(disk[4104..8192].iter().all(|&x| x == 1) && disk[..4096].iter().all(|&x| x == 0));
        // The last page ends at the end of the file; past it, and read-only, no guard.
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(3 * 4096 + 100).unwrap();
        let g = a.open_path(&p, true).unwrap();
        g.refresh_len().unwrap();
        assert_eq!(g.pin_mut(3 * 4096).unwrap().len(), 100);
        let kind = |r: Result<SharedPageMut<'_>>| r.err().map(|e| e.kind());
        assert_eq!(kind(g.pin_mut(3 * 4096 + 100)), Some(ErrorKind::InvalidInput));
        assert_eq!(kind(fb.pin_mut(0)), Some(ErrorKind::InvalidInput), "not open for writing");
    }

    /// A forked child's copy of a guard lets go of nothing: the frame and the range slot stay
    /// the parent's until its guard drops.
    #[test]
    fn a_forked_childs_copy_of_a_write_guard_lets_nothing_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 2);
        let cache = SharedCache::create(&crate::shared::tests::small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let page = f.pin_mut(0).unwrap();
        let m = &cache.inner.view.frames()[page.frame as usize];
        let held = |f: &SharedFile| f.entry().ranges.iter().filter(|r| r.lock.holder().is_some()).count();
        assert_eq!((m.holder(), held(&f)), (Some(cache.inner.me), 1));
        // SAFETY: the child only drops its copy of the guard and leaves with _exit.
        match unsafe { libc::fork() } {
            0 => {
                drop(page);
                // SAFETY: ends the child at once, running no handler of the parent's.
                unsafe { libc::_exit(0) }
            }
            child => {
                let mut status = 0;
                // SAFETY: waits for our own child; `status` is writable.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            }
        }
        assert_eq!((m.holder(), held(&f)), (Some(cache.inner.me), 1), "still ours after the child");
        drop(page);
        assert_eq!((m.holder(), held(&f)), (None, 0));
    }

    #[test]
    fn a_pin_borrows_the_page_in_place_up_to_the_end_of_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, (0..5000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let cache = SharedCache::create(&SharedConfig { memory: 1 << 20, ..Default::default() }).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let tail = f.pin(4100).unwrap();
        assert_eq!((tail.offset(), tail.len()), (4096, 904));
        assert!(tail.iter().enumerate().all(|(i, &b)| b == (4096 + i as u32) as u8));
        let head = f.pin(0).unwrap();
        assert_eq!((head.offset(), head.len(), head[255]), (0, PAGE, 255));
        let err = f.pin(5000).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        drop((tail, head));
        assert!(cache.inner.own_ledger().slots.iter().all(|s| s.load(Ordering::Relaxed) == 0));
    }

    /// Another process's write of the page, and its shrink of the file into it, wait until
    /// the pin drops; the pinned bytes stay as they were meanwhile.
    #[test]
    fn a_write_and_a_shrink_in_another_process_wait_for_a_pin() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 4);
        let (a, b) = two_clients_of(SharedConfig::default());
        let fa = a.open_path(&p, true).unwrap();
        let fb = b.open_path(&p, true).unwrap();
        for change in ["write", "shrink"] {
            let pinned = fb.pin(PAGE as u64 + 7).unwrap();
            let before = pinned.to_vec();
            std::thread::scope(|s| {
                let changer = s.spawn(|| match change {
                    "write" => fa.write_all_at(&[9; 100], PAGE as u64 + 50).unwrap(),
                    _ => fa.set_len(PAGE as u64 + 10).unwrap(),
                });
                // The changer announces that it sleeps for our pin: no timing involved.
                while !waiting_for(&b) {
                    assert!(!changer.is_finished(), "{change}: went past the pin");
                    std::thread::yield_now();
                }
                assert!(pinned[..] == before[..], "{change}: the pinned page changed");
                drop(pinned);
                changer.join().unwrap();
            });
        }
        let mut buf = vec![0; 20];
        let n = fb.read_at(&mut buf, PAGE as u64).unwrap();
        assert_eq!(&buf[..n], &[1; 10]);
        assert_eq!(fb.len(), PAGE as u64 + 10);
    }

    /// The clock hand passes a pinned frame over, however many misses go round it.
    #[test]
    fn the_clock_hand_passes_pinned_frames_over() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 64);
        let cache = SharedCache::create(&SharedConfig { memory: 64 << 10, ..Default::default() }).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let pinned = f.pin(3 * PAGE as u64).unwrap();
        let mut buf = vec![0; PAGE];
        for round in 0..4 {
            for page in (0..64).filter(|&p| p != 3) {
                f.read_at(&mut buf, page * PAGE as u64).unwrap();
                assert!(buf.iter().all(|&x| x == page as u8), "round {round}, page {page}");
            }
        }
        assert!(cache.status().stats.evictions > 4 * 40, "the cache churned");
        let m = &cache.inner.view.frames()[pinned.frame as usize];
        assert_eq!(m.home(), cache.inner.key(f.slot, 3), "the pinned frame still holds its page");
        assert!(pinned.iter().all(|&x| x == 3));
    }

    #[test]
    fn a_process_holds_at_most_its_ledger_of_pins() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), pin_ledger::PIN_SLOTS + 1);
        let cache = SharedCache::create(&SharedConfig { memory: 1 << 20, ..Default::default() }).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let mut pins: Vec<_> =
            (0..pin_ledger::PIN_SLOTS).map(|i| f.pin((i * PAGE) as u64).unwrap()).collect();
        let last = (pin_ledger::PIN_SLOTS * PAGE) as u64;
        let err = f.pin(last).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
        pins.pop();
        assert_eq!(f.pin(last).unwrap()[0], pin_ledger::PIN_SLOTS as u8);
    }

    /// A process killed while it holds a pin holds nothing: a writer of the page clears the
    /// dead's entry and goes on, and the reaper clears its whole ledger.
    #[test]
    fn a_dead_processs_pins_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 4);
        let cache = SharedCache::create(&SharedConfig { memory: 1 << 20, ..Default::default() }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let frame_of = |page: u64| f.pin(page * PAGE as u64).unwrap().frame;
        let (f0, f1) = (frame_of(0), frame_of(1));
        // The child pins both frames as a pin under their lock would, and dies.
        forked_client_done(&cache, |view, id| {
            let ledger = view.ledger(view.clients().index(id).unwrap());
            for frame in [f0, f1] {
                ledger.take(frame).unwrap();
                view.frames()[frame as usize].flags.fetch_or(super::super::frame::PINNED, Ordering::Relaxed);
            }
        });
        let dead = cache.inner.view.clients().dead();
        assert_eq!(dead.len(), 1);
        let ledger = cache.inner.view.ledger(cache.inner.view.clients().index(dead[0]).unwrap());
        assert_eq!(ledger.used.load(Ordering::Relaxed), 1);
        f.write_all_at(&[7; 10], 0).unwrap();
        assert_eq!(ledger.naming(f0).count(), 0, "the writer cleared the dead's entry");
        assert_eq!(ledger.naming(f1).count(), 1, "and only that");
        assert_eq!(cache.repair_dead(), 1);
        assert_eq!(ledger.used.load(Ordering::Relaxed), 0);
        assert_eq!(ledger.naming(f1).count(), 0, "the reaper cleared the rest");
        f.set_len(PAGE as u64).unwrap();
        assert_eq!(f.pin(0).unwrap()[..3], [7, 7, 7]);
    }

    /// A truncation killed while it waited for a pin (the frame it held locked, the length
    /// already below the page, the cut's intent left) is repaired in the pin holder's own
    /// thread without waiting for the pin; the next writer finishes the cut once it drops.
    #[test]
    fn a_truncation_killed_waiting_for_a_pin_is_repaired_beside_the_pin() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 2);
        let cache = SharedCache::create(&SharedConfig { memory: 1 << 20, ..Default::default() }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let pinned = f.pin(PAGE as u64 + 5).unwrap();
        let frame = pinned.frame;
        // The truncator: intent and length as `set_len_locked` and `cut_to` leave them, the
        // page's frame locked, and dead.
        let e = f.entry();
        e.cut.store(PAGE as u64 + 1, Ordering::Release);
        e.len.store(PAGE as u64, Ordering::Release);
        forked_client_done(&cache, |view, id| {
            assert!(view.frames()[frame as usize].try_lock(id));
        });
        assert_eq!(cache.repair_dead(), 1, "reaped in the pin holder's thread, not waiting for it");
        assert!(pinned.iter().all(|&x| x == 1), "the pinned page as it was");
        drop(pinned);
        f.write_all_at(&[5], 0).unwrap(); // the next writer finishes the cut
        assert_eq!(e.cut.load(Ordering::Acquire), 0);
        f.set_len(2 * PAGE as u64).unwrap();
        let mut buf = vec![9; PAGE];
        assert_eq!(f.read_at(&mut buf, PAGE as u64).unwrap(), PAGE);
        assert!(buf.iter().all(|&x| x == 0), "past the cut, zeros");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 2 * PAGE as u64);
    }

    /// With the hot index a thread's repeat pin skips the page index; without it, none does.
    #[test]
    fn the_hot_index_serves_a_threads_repeat_pins_and_is_a_switch() {
        let dir = tempfile::tempdir().unwrap();
        let p = file_of(dir.path(), 8);
        for hot_index in [true, false] {
            let config = SharedConfig { memory: 1 << 20, hot_index, ..Default::default() };
            let cache = SharedCache::create(&config).unwrap();
            let f = cache.open_path(&p, false).unwrap();
            for round in 0..3 {
                for page in 0..8 {
                    assert_eq!(f.pin(page * PAGE as u64).unwrap()[9], page as u8, "round {round}");
                }
            }
            cache.own_counts(); // this thread's pending counts in
            let hot = cache.status().stats.hot_hits;
            assert_eq!(hot, if hot_index { 16 } else { 0 }, "hot index {hot_index}");
            assert_eq!(cache.config().hot_index, hot_index);
        }
    }

    /// Pinners in one process and writers in another, on a cache smaller than the file: every
    /// pinned page is one writer's whole page (a value and its checksum), and stays so while
    /// it is held.
    #[test]
    fn pinned_pages_are_whole_and_still_beside_writers_and_eviction() {
        const PAGES: u64 = 24;
        let page_of = |v: u64| -> Vec<u8> {
            let mut b = vec![v as u8; PAGE];
            b[..8].copy_from_slice(&v.to_le_bytes());
            let sum = b[..PAGE - 8].iter().fold(0u64, |s, &x| s.wrapping_mul(31).wrapping_add(x as u64));
            b[PAGE - 8..].copy_from_slice(&sum.to_le_bytes());
            b
        };
        let whole = |b: &[u8]| {
            let sum = b[..PAGE - 8].iter().fold(0u64, |s, &x| s.wrapping_mul(31).wrapping_add(x as u64));
            sum.to_le_bytes() == b[PAGE - 8..]
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, (0..PAGES).flat_map(page_of).collect::<Vec<_>>()).unwrap();
        let a = SharedCache::create(&SharedConfig { memory: 64 << 10, ..Default::default() }).unwrap();
        let b = SharedCache::attach(a.segment_fd().try_clone_to_owned().unwrap()).unwrap();
        let fa = a.open_path(&p, true).unwrap();
        let fb = b.open_path(&p, false).unwrap();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let fa = &fa;
                s.spawn(move || {
                    for i in 0..1500u64 {
                        let page = (i * 7 + t * 3) % PAGES;
                        fa.write_all_at(&page_of(i * 2 + t), page * PAGE as u64).unwrap();
                    }
                });
            }
            for t in 0..2u64 {
                let fb = &fb;
                s.spawn(move || {
                    for i in 0..3000u64 {
                        let page = (i * 5 + t) % PAGES;
                        let pinned = fb.pin(page * PAGE as u64).unwrap();
                        let first = pinned.to_vec();
                        assert!(whole(&first), "a torn page under a pin, page {page}");
                        std::thread::yield_now();
                        assert!(pinned[..] == first[..], "a pinned page changed, page {page}");
                    }
                });
            }
        });
        assert!(a.status().stats.evictions > 0, "{:?}", a.status());
    }
}
