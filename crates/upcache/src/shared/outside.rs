//! Changes made to a cached file without the cache: by a program without the shim, through
//! a hard link or a bind mount outside the prefix, by a raw system call. The kernel shows them
//! to every later read; the cache shows them once it has looked at the OS file and seen it
//! differ from what the entry recorded (size, modification, change and birth times):
//!
//! - at every open of the file, by any process;
//! - whenever the program takes a lock on it (`fcntl`, `lockf`, `flock`: where programs that
//!   share a file with another one synchronise), through [`SharedFile::look_outside`];
//! - before a read, a write or a length query, at most once per clock tick of the machine's
//!   coarse monotonic clock (1 to 4 ms) by any process: one `fstat` per file per tick, not
//!   one per call, which would cost a system call on the hit path.
//!
//! What the cache changes itself (write-backs, truncates, reservations) it records as it goes
//! ([`Inner::own_change`]); while such a change is in flight in any process a look cannot
//! tell the two apart and sees nothing, and the change's end records the file as it then is
//! (a change of another program made in that window passes for the cache's). One that a
//! killed process left counted is forgotten after `OWN_LEAK_MS` without a step.
//! A change seen is taken in under the file's lock ([`SharedFile::take_in_locked`]):
//! the cache's dirty pages are written back first (a page the cache and the other program
//! both changed keeps the cache's bytes, all of its page: the cache tracks dirt by page),
//! every cached page is dropped, and the length becomes the OS file's. Every process then
//! reads the OS file's bytes.
//!
//! Change times are fine-grained once read (Linux 6.13's multigrain timestamps on ext4, XFS,
//! Btrfs and tmpfs): on older kernels a change made within the same tick as the cache's last
//! look can go unseen until the next one.

use std::sync::atomic::Ordering;

use super::file::SharedFile;
use super::files::coarse_ms;
use super::files::{FileEntry, OsFile};
use super::frame::DIRTY;
#[cfg(test)]
use super::frame::PAGE;
use super::Inner;
use crate::error::{Error, ErrorKind, Result};

/// How long a change of the cache's own may go without a step before a look takes it for
/// one a killed process left counted: looks are blind to outside changes meanwhile.
const OWN_LEAK_MS: u64 = 10_000;

/// A change of the OS file that the cache makes itself, from its start to its end (drop):
/// looks see nothing meanwhile, and the end records the OS file as it then is.
pub(crate) struct OwnChange<'a> {
    e: &'a FileEntry,
    /// None for an array file, which has no outside changes to tell ours from.
    fd: Option<&'a std::fs::File>,
}

impl Inner {
    /// Starts an OS change of file `slot` through `fd` by the cache itself. The first of ours
    /// in flight first looks whether someone else changed the file since the last record:
    /// that change would otherwise pass for ours.
    pub(crate) fn own_change<'a>(&'a self, slot: u32, fd: Option<&'a std::fs::File>) -> OwnChange<'a> {
        let e = &self.view.files()[slot as usize];
        let Some(fd) = fd else { return OwnChange { e, fd: None } };
        // Before the count (AcqRel): a recorder that read the epoch before our change began
        // sees it moved, and records again.
        e.own_epoch.fetch_add(1, Ordering::AcqRel);
        // Relaxed: a time, a hint for looks (`OWN_LEAK_MS`).
        e.own_at.store(coarse_ms(), Ordering::Relaxed);
        // AcqRel: a look that reads 0 after our end sees the record we stored before it.
        if e.own.fetch_add(1, Ordering::AcqRel) == 0 {
            if let Ok(md) = fd.metadata() {
                if !OsFile::of(&md).recorded_in(e) {
                    // Release: a look that sees it takes the change in.
                    e.stale.store(1, Ordering::Release);
                }
            }
        }
        OwnChange { e, fd: Some(fd) }
    }
}

impl OwnChange<'_> {
    /// A step of a long change (a page of a run written back): it is alive.
    pub(crate) fn step(&self) {
        // Relaxed: see `own_change`.
        self.e.own_at.store(coarse_ms(), Ordering::Relaxed);
    }
}

impl Drop for OwnChange<'_> {
    fn drop(&mut self) {
        let Some(fd) = self.fd else { return };
        let (own, epoch) = (&self.e.own, &self.e.own_epoch);
        loop {
            // Acquire: pairs with the AcqRel of the others' counts.
            let n = own.load(Ordering::Acquire);
            if n <= 1 {
                // The last of ours in flight records the file as our changes left it, while
                // still counted, so no look in between takes our change for another's; a
                // change of ours that began meanwhile (the epoch moved) may not be in the
                // record, so it is read again.
                let before = epoch.load(Ordering::Acquire);
                let Ok(md) = fd.metadata() else { break };
                if epoch.load(Ordering::Acquire) != before {
                    continue;
                }
                OsFile::of(&md).record(self.e);
                // AcqRel: the record before the count. Another change that started meanwhile
                // records at its own end.
                if n == 0 || own.compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return;
                }
            } else if own.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
        }
        // No metadata to record: the count goes all the same (a look may then take our change
        // for another's, which costs pages, not bytes).
        let _ = own.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(1)));
    }
}

/// Whether `e` has a change of the cache's own in flight, by a live process: one that made
/// no step for `OWN_LEAK_MS` was left by a killed process and is forgotten.
fn own_in_flight(e: &FileEntry) -> bool {
    // Acquire: pairs with `own_change`'s count.
    let n = e.own.load(Ordering::Acquire);
    if n == 0 {
        return false;
    }
    // Relaxed: a time.
    if coarse_ms().saturating_sub(e.own_at.load(Ordering::Relaxed)) < OWN_LEAK_MS {
        return true;
    }
    // AcqRel: once. A live change that was only slow is then taken for another's at most once.
    let _ = e.own.compare_exchange(n, 0, Ordering::AcqRel, Ordering::Acquire);
    false
}

impl SharedFile {
    /// Looks at the OS file for a change made without the cache if no process has this clock
    /// tick, and takes one in. Errors are the next look's: a read or write goes on.
    pub(crate) fn look_outside_if_due(&self) {
        let e = self.entry();
        let now = coarse_ms();
        // Relaxed: a time; the look itself reads the OS file.
        let last = e.looked.load(Ordering::Relaxed);
        if now == last || e.looked.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        // An array file (the cache's own) has no OS metadata: nothing to look at.
        if let Ok(md) = self.os_metadata() {
            let _ = self.look_at(&md);
        }
    }

    /// Looks at the OS file now for a change made without the cache, and takes one in: for a
    /// program that just took a lock on the file (another program may have changed it before
    /// releasing its own), and before the length is needed exact.
    pub fn look_outside(&self) -> Result<()> {
        if self.fd.array().is_some() {
            return Ok(());
        }
        let md = self.os_metadata()?;
        self.look_at(&md)
    }

    /// As [`Self::look_outside`], with the OS file's metadata just read.
    pub(crate) fn look_at(&self, md: &std::fs::Metadata) -> Result<()> {
        let e = self.entry();
        if self.bypassed() || self.fd.array().is_some() {
            return Ok(());
        }
        // Acquire (all): pairs with `own_change`'s stores.
        if e.stale.load(Ordering::Acquire) == 0 {
            if own_in_flight(e) || OsFile::of(md).recorded_in(e) {
                return Ok(());
            }
            // Ours after all, if one of our changes began since the metadata was read.
            if own_in_flight(e) {
                return Ok(());
            }
            e.stale.store(1, Ordering::Release);
        }
        // Under the file's lock as a change of the cache's own, so readers in every process
        // retry or wait; not behind a stopped holder (a later look takes it in).
        self.with_change_lock_unless_stopped(|| self.take_in_locked()).unwrap_or(Ok(()))
    }

    /// Takes in a change made without the cache (see the module's documentation), with the
    /// file's lock held.
    fn take_in_locked(&self) -> Result<()> {
        let e = self.entry();
        // AcqRel: pairs with the Release stores of the flag. Cleared first, so a change seen
        // while we take this one in (by an `own_change` in another process) stays flagged.
        if e.stale.swap(0, Ordering::AcqRel) == 0 || self.bypassed() {
            return Ok(()); // another process took it in meanwhile
        }
        let failed = |err: Error| {
            // Release: the next look tries again.
            e.stale.store(1, Ordering::Release);
            err
        };
        // The cache's unwritten bytes first: they were written to the cache, and must not be
        // lost with the pages dropped below. Without a descriptor to write through (a
        // read-only open of a file whose writer is gone, no write permission), they stay.
        // Acquire: pairs with `mark_dirty`'s count.
        if e.dirty.load(Ordering::Acquire) > 0 {
            let written = match self.writer() {
                Some(fd) => self.inner.write_back_slot(self.slot(), &fd),
                None => Err(Error::new(ErrorKind::Io, "no descriptor to write them through")),
            };
            if let Err(err) = written {
                // The clean pages go, the dirty ones and the length stay (a dirty last page
                // holds zeros past the length, which a longer length would show and write
                // back over the other program's bytes), and the change stays to take in: by a
                // process that can write the pages back, or once this one can.
                let size = self.inner.view.page_size;
                let end = e.page_end(size).max(size.pages_in(self.cached_len()));
                self.inner.drop_clean_pages(self.slot(), 0, end);
                log::warn!(
                    "shared cache: {}: changed without the cache; dirty pages wait to be written back ({err})",
                    self.name()
                );
                failed(err);
                return Ok(()); // a write-back error is on the file for its next sync
            }
        }
        let md = self.os_metadata().map_err(failed)?;
        let old = self.cached_len();
        let size = self.inner.view.page_size;
        self.inner.drop_clean_pages(self.slot(), 0, e.page_end(size).max(size.pages_in(old)));
        // Acquire: pairs with the intent's Release store: the OS file may still hold what a
        // truncate not finished cuts.
        let cut = e.cut.load(Ordering::Acquire);
        let os = md.len().min(self.max_len()).min(cut.wrapping_sub(1));
        // Written back and dropped, nothing of the file is cached: the OS file's length is its.
        // SeqCst: see `Inner::fill`, which pairs with the fence in `drop_clean_pages`.
        e.len.store(os, Ordering::SeqCst);
        e.high.fetch_max(os, Ordering::Release);
        // Relaxed: changed only under the file's lock, which we hold. Space is reserved (for
        // write-backs that must not fail for room) from the OS file's size on, as at a first
        // open.
        e.reserved.store(os, Ordering::Relaxed);
        OsFile::of(&md).record(e);
        Ok(())
    }
}

impl SharedFile {
    /// Drops every cached page of the file, for every open of it in every process: after
    /// writing the dirty ones back if `write_back` (the first error, nothing dropped), else
    /// dirty ones too, the length then the OS file's (a copy the caller knows is stale). The
    /// next reads load what the OS file holds.
    pub fn forget(&self, write_back: bool) -> Result<()> {
        if write_back {
            self.write_back()?;
        }
        self.with_change_lock(|| {
            let e = self.entry();
            let size = self.inner.view.page_size;
            let end = e.page_end(size).max(size.pages_in(self.cached_len()));
            if write_back {
                self.inner.drop_clean_pages(self.slot(), 0, end);
                return Ok(());
            }
            self.inner.drop_pages(self.slot(), 0, end);
            e.empty_dirty_range_if_clean();
            let md = self.os_metadata()?;
            // Acquire: pairs with the intent's Release store: as in `take_in_locked`, the OS
            // file may still hold what a truncate not finished cuts.
            let cut = e.cut.load(Ordering::Acquire);
            let os = md.len().min(self.max_len()).min(cut.wrapping_sub(1));
            // SeqCst: as in `take_in_locked`.
            e.len.store(os, Ordering::SeqCst);
            e.high.store(os, Ordering::Release);
            // Relaxed: under the file's lock.
            e.reserved.store(os, Ordering::Relaxed);
            OsFile::of(&md).record(e);
            Ok(())
        })
    }
}

impl Inner {
    /// Drops the clean cached pages of file `slot` in `from..to`, waiting for locked ones;
    /// dirty ones stay.
    pub(crate) fn drop_clean_pages(&self, slot: u32, from: u64, to: u64) {
        // SeqCst: see `fill`.
        std::sync::atomic::fence(Ordering::SeqCst);
        for (f, k) in self.candidates(slot, from, to) {
            let m = &self.view.frames()[f as usize];
            self.lock_frame(f);
            if m.key() != k || m.flags() & DIRTY != 0 {
                m.unlock(self.me, false);
                continue;
            }
            self.free_frame(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::super::SharedCache;
    use super::*;

    fn cache() -> SharedCache {
        SharedCache::create(&super::super::tests::small()).unwrap()
    }

    fn read(f: &SharedFile, at: u64, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        let got = f.read_at(&mut buf, at).unwrap();
        buf.truncate(got);
        buf
    }

    /// A truncate the OS file did not take (its intent left, as after a failed `ftruncate`),
    /// seen by a reader, which cannot finish it: `forget` takes the OS file's length in only
    /// up to the intent, so the bytes the truncate cut stay cut, and a bypass is refused
    /// until the truncate is finished (its reads would show them); a writer's is not.
    #[test]
    fn a_truncate_not_finished_stays_cut_through_forget_and_bypass() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'.'; 3 * PAGE]).unwrap();
        let c = cache();
        let r = c.open_path(&p, false).unwrap();
        let e = r.entry();
        // The cache's side of a truncate to one page, the OS file's refused.
        e.cut.store(PAGE as u64 + 1, Ordering::SeqCst);
        e.len.store(PAGE as u64, Ordering::SeqCst);
        r.forget(false).unwrap();
        assert_eq!(r.len(), PAGE as u64, "the cut bytes stay cut");
        assert_eq!(read(&r, 0, 3 * PAGE).len(), PAGE);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 3 * PAGE as u64, "a reader cannot finish it");
        assert!(r.bypass().is_err(), "a bypass would show the cut bytes");
        assert!(!r.bypassed());
        let w = c.open_path(&p, true).unwrap();
        w.bypass().unwrap();
        assert_eq!(e.cut.load(Ordering::Acquire), 0, "finished");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), PAGE as u64);
    }

    /// A program without the cache writes in place, truncates and appends while the file is
    /// open in two processes: a look (a lock taken) shows each change, and so does the open
    /// of a third; the file's other pages stay cached.
    #[test]
    fn a_change_made_without_the_cache_is_seen_at_a_look_and_an_open() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'.'; 3 * PAGE]).unwrap();
        let a = cache();
        let other = SharedCache::attach(a.segment_fd().try_clone_to_owned().unwrap()).unwrap();
        let f = a.open_path(&p, true).unwrap();
        let g = other.open_path(&p, false).unwrap();
        assert_eq!(read(&g, PAGE as u64, 3), b"...");
        let outside = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        outside.write_all_at(b"OUT", PAGE as u64).unwrap();
        // Within the tick, nothing has looked yet: the cached page (this is the window the
        // README names). A look shows the change to every process.
        f.look_outside().unwrap();
        assert_eq!(read(&g, PAGE as u64, 3), b"OUT");
        assert_eq!(read(&f, PAGE as u64, 3), b"OUT");
        outside.set_len(5).unwrap();
        let h = other.open_path(&p, false).unwrap();
        assert_eq!((h.len(), f.len(), read(&g, 0, 10)), (5, 5, b".....".to_vec()));
        outside.write_all_at(b"more", 5).unwrap();
        g.look_outside().unwrap();
        assert_eq!(read(&f, 0, 20), b".....more");
    }

    /// A file holding "before", cached through a read-only open (its pages read), and a
    /// function that writes "AFTER!" over it without the cache.
    fn read_before() -> (tempfile::TempDir, SharedCache, SharedFile, impl Fn()) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"before").unwrap();
        let c = cache();
        let f = c.open_path(&p, false).unwrap();
        assert_eq!(read(&f, 0, 6), b"before");
        let outside = move || {
            std::fs::OpenOptions::new().write(true).open(&p).unwrap().write_all_at(b"AFTER!", 0).unwrap()
        };
        (dir, c, f, outside)
    }

    /// Without being asked, a read looks once a clock tick has passed since anyone looked.
    #[test]
    fn a_read_looks_once_per_clock_tick() {
        let (_dir, _c, f, outside) = read_before();
        outside();
        // As if the last look were a tick ago (Relaxed: a time).
        f.entry().looked.store(0, Ordering::Relaxed);
        assert_eq!(read(&f, 0, 6), b"AFTER!");
    }

    /// The cache's own write-backs and truncates are not taken for another program's changes:
    /// the file's pages stay cached across them.
    #[test]
    fn the_caches_own_changes_keep_its_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 4 * PAGE]).unwrap();
        let c = cache();
        let f = c.open_path(&p, true).unwrap();
        assert_eq!(read(&f, 0, 4 * PAGE), vec![1u8; 4 * PAGE]);
        let loads = c.status().stats.read_bytes / 4096;
        f.write_at(&[2u8; 10], 0).unwrap();
        f.sync_data().unwrap();
        f.set_len(3 * PAGE as u64 + 1).unwrap();
        f.write_at(&[3u8; PAGE], 5 * PAGE as u64).unwrap();
        f.sync_data().unwrap();
        f.look_outside().unwrap();
        read(&f, 0, 3 * PAGE);
        assert_eq!(c.status().stats.read_bytes / 4096, loads, "a page was loaded again");
        assert_eq!(f.entry().stale.load(Ordering::Relaxed), 0);
    }

    /// A page the cache has dirty when another program changes the file is written back
    /// before the cache takes the change in: the other program's bytes in other pages stay,
    /// and the cache's bytes are not lost.
    #[test]
    fn dirty_pages_are_written_back_before_an_outside_change_is_taken_in() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'.'; 2 * PAGE]).unwrap();
        let c = cache();
        let f = c.open_path(&p, true).unwrap();
        f.write_at(b"CACHE", 0).unwrap();
        assert_eq!(read(&f, PAGE as u64, 7), b".......");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(b"OUTSIDE", PAGE as u64)
            .unwrap();
        f.look_outside().unwrap();
        assert_eq!(read(&f, 0, 5), b"CACHE");
        assert_eq!(read(&f, PAGE as u64, 7), b"OUTSIDE");
        drop(f);
        let on_disk = std::fs::read(&p).unwrap();
        assert_eq!((&on_disk[..5], &on_disk[PAGE..PAGE + 7]), (&b"CACHE"[..], &b"OUTSIDE"[..]));
    }

    /// A change of the cache's own that a killed process left counted blinds the looks only
    /// for a while: one silent for `OWN_LEAK_MS` is forgotten.
    #[test]
    fn a_change_of_its_own_left_by_a_killed_process_is_forgotten() {
        let (_dir, _c, f, outside) = read_before();
        let e = f.entry();
        // Relaxed (all): this thread's own view.
        e.own.store(1, Ordering::Relaxed);
        e.own_at.store(coarse_ms(), Ordering::Relaxed);
        outside();
        f.look_outside().unwrap();
        assert_eq!(read(&f, 0, 6), b"before", "a change of our own in flight: nothing to tell");
        e.own_at.store(coarse_ms().saturating_sub(OWN_LEAK_MS), Ordering::Relaxed);
        f.look_outside().unwrap();
        assert_eq!(read(&f, 0, 6), b"AFTER!");
        assert_eq!(e.own.load(Ordering::Relaxed), 0);
    }
}
