//! Loading missing pages in runs: a read that misses claims frames for its page and for the
//! pages after it that it (or its readahead) wants and that are missing too, puts them in the
//! index, and fills them all with one `preadv` per device run (SAFS's multi-page loads),
//! instead of a system call per page.
//!
//! With `SharedConfig::run_merging` off, a run is read with a `pread` per page; with
//! `bundling` off, an array's device runs are read one after another.
//!
//! Only the run's first frame may wait to be claimed (`claim`); the others are taken only if
//! one is free now (`try_claim_holding`: no repair of dead clients, which waits for locks), so
//! a loader never waits for a lock while it holds frames. A page found in the index, or put
//! there by someone else meanwhile, ends the run. An error reading the run is retried for the
//! first page alone: pages read ahead fail no read (the kernel's readahead errors do not).

use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};

use super::backing::Backing;
use super::frame::{key_page, VALID};
use super::held::HeldFd;
use super::index::Placed;
use super::layout::technique;
use super::pages::Fill;
use super::Inner;
use crate::error::{Error, Result};

impl Inner {
    /// The frame holding page `first` of file `slot`, locked for us: as
    /// `lock_page_unless(.., Fill::Read, give_up, count)`, but a miss loads up to `want - 1`
    /// missing pages after it in the same `preadv` (at most `PageSize::run_pages` in all), left cached
    /// and unlocked, and says how many it loaded. None if the page's frame is held by one
    /// `give_up` says not to wait for. Of the pages loaded, the first `own` are the caller's to
    /// look up, counted as misses (it counts no hit for them), the rest as read ahead, as the
    /// in-process engine counts a read's missing pages and its readahead.
    pub(crate) fn lock_page_loading(
        &self,
        slot: u32,
        first: u64,
        (want, own): (usize, usize),
        fd: &Backing,
        give_up: &dyn Fn(u32) -> bool,
        count: bool,
    ) -> Result<Option<(u32, usize)>> {
        let want = want.clamp(1, self.view.page_size.run_pages());
        let k = self.key(slot, first);
        let index = self.index();
        // The single page's path, which waits for a page being loaded; it loads no run.
        let one_page =
            || Ok(self.lock_page_unless(slot, first, fd, Fill::Read, give_up, count)?.map(|f| (f, 0)));
        if want == 1 || index.hint(k).is_some() {
            return one_page(); // cached, or being loaded by someone
        }
        let f = self.claim(k)?;
        match self.place_unless(f, k, give_up)? {
            Some(true) => {}
            Some(false) => {
                self.free_frame(f);
                return one_page();
            }
            None => {
                self.free_frame(f);
                return Ok(None);
            }
        }
        let run = self.gather_run(slot, first, f, want);
        match self.fill_published(&run, slot, first, fd, own.clamp(1, run.len())) {
            Ok(()) => {}
            Err(e) if run.len() == 1 => return Err(e),
            Err(_) => return one_page(),
        }
        for &f in &run[1..] {
            self.view.frames()[f as usize].unlock(self.me, true);
        }
        Ok(Some((run[0], run.len())))
    }

    /// Loads the missing pages of `pages` of file `slot` within its length (a window of
    /// readahead, `ahead.rs`) in runs, into frames free now: it never waits for a frame, nor
    /// for a lock while it holds one. It stops at the first page it cannot take a frame for,
    /// and at an error, which the reader meets again if it reads the page.
    pub(crate) fn load_window(&self, slot: u32, pages: std::ops::Range<u64>, fd: &Backing) {
        let index = self.index();
        // Relaxed: a bound; `fill_run` zeros what a truncate meanwhile cut.
        let len = self.view.files()[slot as usize].len.load(Ordering::Relaxed);
        let end = pages.end.min(self.view.page_size.pages_in(len));
        let mut page = pages.start;
        while page < end && !self.retired() {
            let k = self.key(slot, page);
            if index.hint(k).is_some() {
                page += 1;
                continue;
            }
            let Some(f) = self.try_claim_holding(k) else { return };
            match self.place_once(f, k, &|h| self.stopped(h)) {
                Placed::Yes => {}
                Placed::Taken => {
                    // Loaded by someone meanwhile.
                    self.free_frame(f);
                    page += 1;
                    continue;
                }
                Placed::No | Placed::Full | Placed::Broken => {
                    self.free_frame(f);
                    return;
                }
            }
            let run = self.gather_run(slot, page, f, (end - page) as usize);
            if self.fill_published(&run, slot, page, fd, 0).is_err() {
                return;
            }
            for &f in &run {
                self.view.frames()[f as usize].unlock(self.me, true);
            }
            page += run.len() as u64;
        }
    }

    /// Frame `f` (locked by us, page `first` of `slot` in the index) and frames for the
    /// missing pages after it, up to `want` pages in all (at most `PageSize::run_pages`), taken only
    /// if free now and put in the index, locked.
    fn gather_run(&self, slot: u32, first: u64, f: u32, want: usize) -> Vec<u32> {
        let want = want.clamp(1, self.view.page_size.run_pages());
        let index = self.index();
        let mut run = Vec::with_capacity(want);
        run.push(f);
        while run.len() < want {
            let k = self.key(slot, first + run.len() as u64);
            if key_page(k) == 0 || index.hint(k).is_some() {
                break;
            }
            let Some(f) = self.try_claim_holding(k) else { break };
            // Holding frames, never waiting for a stopped process (readers would wait for us),
            // nor freeing frames for index nodes.
            if self.place_once(f, k, &|h| self.stopped(h)) != Placed::Yes {
                self.free_frame(f);
                break;
            }
            run.push(f);
        }
        run
    }

    /// Fills the frames of `run` (pages `first..` of `slot`, locked by us, in the index) and
    /// marks them `VALID`, still locked; on an error frees them all. Its first `own` pages
    /// are a reader's lookups, counted as misses; the rest as read ahead (which no one looked
    /// up).
    fn fill_published(&self, run: &[u32], slot: u32, first: u64, fd: &Backing, own: usize) -> Result<()> {
        self.count_loading(own, run.len() - own);
        match self.fill_run(run, slot, first, fd) {
            Ok(direct) => {
                self.mark_loaded(run, direct);
                Ok(())
            }
            Err(e) => {
                for &f in run {
                    self.free_frame(f);
                }
                Err(e)
            }
        }
    }

    /// Counts `own` pages loaded for a reader's lookups as misses and `ahead` as read ahead.
    pub(crate) fn count_loading(&self, own: usize, ahead: usize) {
        // Relaxed: statistics.
        if own > 0 {
            self.count(|s| &s.misses, own as u64);
        }
        if ahead > 0 {
            self.view.header().ahead_pages.fetch_add(ahead as u64, Ordering::Relaxed);
        }
    }

    /// Marks the frames of `run`, filled (and locked by us), `VALID`; `direct` as `fill_run`
    /// says.
    pub(crate) fn mark_loaded(&self, run: &[u32], direct: bool) {
        let frames = self.view.frames();
        for &f in run {
            if !direct {
                frames[f as usize].loaded();
            }
            // Release: published with the bytes by the unlock.
            frames[f as usize].flags.fetch_or(VALID, Ordering::Release);
        }
        self.count(|s| &s.loads, run.len() as u64);
    }

    /// Gives frame `f` (claimed, locked by us) page key `k` and puts it in the index: false if
    /// the page was put in another frame meanwhile; None (not placed) once a wait for the
    /// index partition's lock is over and `give_up` says so of its holder. If the tree index
    /// has no node free, frames are taken from the clock hand and freed (which frees their
    /// nodes) until one is: an error only if no frame can be freed (`claim`).
    pub(crate) fn place_unless(&self, f: u32, k: u64, give_up: &dyn Fn(u32) -> bool) -> Result<Option<bool>> {
        // Every frame freed once and still no node: the pools are used up by what no frame
        // frees (a tree left broken, or nodes lost to kills), and the caller gets an error.
        for _ in 0..=self.view.n_frames {
            match self.place_once(f, k, give_up) {
                Placed::Yes => return Ok(Some(true)),
                Placed::Taken => return Ok(Some(false)),
                Placed::No => return Ok(None),
                Placed::Broken => {
                    self.free_frame(f);
                    return Err(Error::new(
                        crate::error::ErrorKind::Internal,
                        "the shared cache's page index of this file is broken (see the log)",
                    ));
                }
                Placed::Full => {
                    // Relaxed: a statistic.
                    self.view.header().index_full.fetch_add(1, Ordering::Relaxed);
                    match self.claim(k) {
                        Ok(victim) => self.free_frame(victim),
                        Err(e) => {
                            self.free_frame(f);
                            return Err(e);
                        }
                    }
                }
            }
        }
        self.free_frame(f);
        Err(Error::new(
            crate::error::ErrorKind::CacheFull,
            "the shared cache's page index has no node free, and freeing frames frees none",
        ))
    }

    /// Gives frame `f` (claimed, locked by us) page key `k` and tries once to put it in the
    /// index.
    pub(crate) fn place_once(&self, f: u32, k: u64, give_up: &dyn Fn(u32) -> bool) -> Placed {
        // Release: a lock-free lookup that reaches the frame sees its key.
        self.view.frames()[f as usize].key.store(k, Ordering::Release);
        self.tree_op(|| self.index().place(k, f, self.me, &|h| self.alive(h), give_up))
    }

    /// Reads pages `first..` of `slot`'s file into frames `run` (locked, in the index) with
    /// one `preadv` (through `O_DIRECT` where `SharedConfig::direct_loads` says and the file
    /// system lets it); zeros past the end of the OS file and past the cached length. Whether
    /// it read through `O_DIRECT` (the device wrote the frames: their lines are in no CPU's
    /// cache, so a write into them streams, `FrameMeta::loaded`).
    pub(crate) fn fill_run(&self, run: &[u32], slot: u32, first: u64, fd: &Backing) -> Result<bool> {
        let (size, page) = (self.view.page_size, self.view.page_size.bytes());
        // SAFETY: we hold each frame's lock, so its page's bytes are ours to write; the frames
        // are distinct, so the slices do not overlap.
        let frame = |f: u32| unsafe { std::slice::from_raw_parts_mut(self.view.page(f), page) };
        // A miss's one page without an allocation.
        let (mut one, mut many);
        let pages: &mut [&mut [u8]] = if let [f] = run {
            one = [frame(*f)];
            &mut one
        } else {
            many = run.iter().map(|&f| frame(f)).collect::<Vec<_>>();
            &mut many
        };
        let at = size.start(first);
        // A run past the end (a new file's first pages, partly written) reads as zeros without
        // a read. Acquire: pairs with the length's Release stores (read again after the fence
        // below, as for a run read).
        let past_end = at >= self.view.files()[slot as usize].len.load(Ordering::Acquire);
        // A page's own load (a miss), or a run's (a miss and the pages after it, readahead).
        let _span = match run.len() {
            1 => tracing::debug_span!("upcache.miss", slot, page = first),
            n => tracing::debug_span!("upcache.load", slot, first, pages = n),
        }
        .entered();
        let t = std::time::Instant::now();
        let (got, was_direct) = match fd {
            Backing::File(_) if past_end => (0, true),
            Backing::File(h) => self.read_os_run(pages, at, h)?,
            Backing::Array(a) => {
                if !past_end {
                    let merged = self.techniques & technique::RUN_MERGING != 0;
                    let bundled = self.techniques & technique::BUNDLING != 0;
                    let requests = a
                        .load(first, pages, self.ring(), (merged, bundled))
                        .map_err(|e| Error::io("read pages of an array file", e))?;
                    self.count(|s| &s.load_requests, requests as u64);
                }
                let direct = (0..run.len() as u64).all(|i| a.is_direct(a.array.layout.locate(first + i).0));
                (if past_end { 0 } else { run.len() * page }, direct)
            }
        };
        if !past_end {
            let dev = fd.array().map_or(0, |a| a.array.layout.locate(first).0);
            self.view.latencies().device(dev).0.record(t.elapsed());
        }
        self.zero_past(pages, slot, at, got);
        Ok(was_direct)
    }

    /// Zeros the bytes of `pages` (frames locked by us, in the index, read from byte `at` of
    /// `slot`'s file) past the `got` bytes read and past the cached length.
    pub(crate) fn zero_past(&self, pages: &mut [&mut [u8]], slot: u32, at: u64, got: usize) {
        // SeqCst: the frames are in the index (their keys stored before); a truncate stores the
        // length and then looks for frames past it (`drop_pages`), so either it finds ours or
        // we see its length here and zero past it.
        fence(Ordering::SeqCst);
        let len = self.view.files()[slot as usize].len.load(Ordering::SeqCst);
        let valid = (got as u64).min(len.saturating_sub(at));
        let page = self.view.page_size.bytes() as u64;
        for (i, p) in pages.iter_mut().enumerate() {
            let from = valid.saturating_sub(i as u64 * page).min(page) as usize;
            p[from..].fill(0);
        }
    }

    /// Reads pages from byte `at` of OS file `fd` into `pages` (one `preadv`, or one `pread`
    /// per page without `SharedConfig::run_merging`), through `O_DIRECT` where
    /// `SharedConfig::direct_loads` says and the file system lets it; the bytes read (up to the
    /// end of the OS file), and whether they all came through `O_DIRECT`.
    fn read_os_run(&self, pages: &mut [&mut [u8]], at: u64, fd: &HeldFd) -> Result<(usize, bool)> {
        let was_direct = std::cell::Cell::new(true);
        let read = |at: u64, bufs: &mut [IoSliceMut<'_>]| {
            self.count(|s| &s.load_requests, 1);
            // Asked for each read: a refusal (below) holds for the run's next pages too.
            let direct = if self.direct_loads() { fd.direct_read() } else { None };
            was_direct.set(was_direct.get() && direct.is_some());
            let r = match direct {
                // Frames are page-aligned, and so are `at` and every length but the file's
                // end; a file system that still refuses the alignment is read the usual way,
                // from then on.
                Some(d) => match crate::io::sys::preadv_all(d.as_raw_fd(), at, bufs) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        fd.refuse_direct_read();
                        was_direct.set(false);
                        None
                    }
                    r => Some(r),
                },
                None => None,
            };
            r.unwrap_or_else(|| crate::io::sys::preadv_all(fd.as_raw_fd(), at, bufs))
                .map_err(|e| Error::io("read pages of a shared file", e))
        };
        let got = if self.techniques & technique::RUN_MERGING != 0 {
            let mut bufs: Vec<IoSliceMut<'_>> = pages.iter_mut().map(|p| IoSliceMut::new(p)).collect();
            read(at, &mut bufs)?
        } else {
            // A read per page, up to the end of the OS file.
            let mut got = 0;
            for p in pages.iter_mut() {
                let n = read(at + got as u64, &mut [IoSliceMut::new(p)])?;
                got += n;
                if n < p.len() {
                    break;
                }
            }
            got
        };
        Ok((got, was_direct.get()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::{resident, small};
    use super::super::{named, SharedCache, SharedConfig};
    use std::os::fd::AsRawFd;

    /// Partial writes of pages past a file's end (a new journal's header, its records) read
    /// nothing from the file: those pages are zeros; one within the length is loaded.
    #[test]
    fn pages_past_the_end_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 100]).unwrap();
        let cache = SharedCache::create(&small()).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let before = cache.status().stats.read_ios;
        f.write_at(&[1u8; 28], 3 * 4096 + 512).unwrap();
        f.write_at(&[2u8; 100], 5 * 4096 + 4000).unwrap();
        assert_eq!(cache.status().stats.read_ios, before, "pages 3, 5 and 6 lie past the end");
        f.write_at(&[3u8; 10], 10).unwrap();
        assert_eq!(cache.status().stats.read_ios, before + 1, "page 0 holds the file's bytes");
        let mut want = vec![0u8; 6 * 4096 + 4000 + 100 - 4096];
        want[..100].fill(7);
        want[10..20].fill(3);
        want[3 * 4096 + 512..][..28].fill(1);
        want[5 * 4096 + 4000..][..100].fill(2);
        let mut got = vec![0u8; want.len()];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), want.len());
        assert!(got == want);
        f.sync_data().unwrap();
        assert!(std::fs::read(&p).unwrap() == want);
    }

    /// Direct loads (`SharedConfig::direct_loads`): a miss reads past the kernel's page cache,
    /// which is left without the file's pages, and still sees bytes the kernel holds dirty
    /// (written without the cache); off, the kernel's cache holds what was read.
    #[test]
    fn direct_loads_read_past_the_kernel_s_cache_and_see_its_dirty_pages() {
        let dir = tempfile::tempdir().unwrap();
        // tmpfs takes O_DIRECT since Linux 6.6, but keeps its pages, being the page cache.
        if named::on_tmpfs(dir.path()) {
            eprintln!("skipped: {} has no O_DIRECT past a page cache", dir.path().display());
            return;
        }
        for direct_loads in [true, false] {
            let p = dir.path().join(format!("f-{direct_loads}"));
            let old: Vec<u8> = (0..8 * 4096 + 10).map(|i| (i % 253) as u8).collect();
            std::fs::write(&p, &old).unwrap();
            let file = std::fs::File::open(&p).unwrap();
            file.sync_all().unwrap();
            // SAFETY: an advice on our own descriptor.
            assert_eq!(unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
            assert!(resident(&p).iter().all(|&r| !r), "dropped from the kernel's cache");
            // No readahead: the pages written below are loaded by the read after the write.
            let cache = SharedCache::create(&SharedConfig { direct_loads, readahead: 0, ..small() }).unwrap();
            let f = cache.open_path(&p, false).unwrap();
            let mut buf = vec![0u8; 4 * 4096];
            f.read_at(&mut buf, 0).unwrap();
            assert_eq!(buf, old[..4 * 4096]);
            if f.fd.held().unwrap().direct_read().is_none() {
                eprintln!("skipped: {} refuses O_DIRECT", dir.path().display());
                return;
            }
            assert_eq!(resident(&p)[..4], [!direct_loads; 4], "direct loads {direct_loads}");
            // Written without the cache, dirty in the kernel's: a load flushes it first.
            let mut new = old.clone();
            new[5 * 4096..6 * 4096 + 7].fill(0xAB);
            std::os::unix::fs::FileExt::write_all_at(
                &std::fs::OpenOptions::new().write(true).open(&p).unwrap(),
                &new[5 * 4096..6 * 4096 + 7],
                5 * 4096,
            )
            .unwrap();
            f.read_at(&mut buf, 4 * 4096).unwrap();
            assert_eq!(buf, new[4 * 4096..8 * 4096], "direct loads {direct_loads}");
        }
    }
}
