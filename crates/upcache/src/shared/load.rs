//! Loading missing pages in runs: a read that misses claims frames for its page and for the
//! pages after it that it (or its readahead) wants and that are missing too, puts them in the
//! index, and fills them all with one `preadv` (ScalaCache's batched I/O, as the private
//! engine's `cache/batch.rs`), instead of a system call per page.
//!
//! With `SharedConfig::bundling` off, a run is read with a `pread` per page.
//!
//! Only the run's first frame may wait to be claimed (`claim`); the others are taken only if
//! one is free now (`try_claim_holding`: no repair of dead clients, which waits for locks), so
//! a loader never waits for a lock while it holds frames. A page found in the index, or put
//! there by someone else meanwhile, ends the run. An error reading the run is retried for the
//! first page alone: pages read ahead fail no read (the kernel's readahead errors do not).

use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};

use super::frame::{key_page, PAGE, RUN_PAGES, VALID};
use super::index::Placed;
use super::layout::technique;
use super::pages::Fill;
use super::Inner;
use crate::error::{Error, Result};

impl Inner {
    /// The frame holding page `first` of file `slot`, locked for us: as
    /// `lock_page_unless(.., Fill::Read, give_up)`, but a miss loads up to `want - 1` missing
    /// pages after it in the same `preadv` (at most [`RUN_PAGES`] in all), left cached and
    /// unlocked. None if the page's frame is held by one `give_up` says not to wait for.
    pub(crate) fn lock_page_loading(
        &self,
        slot: u32,
        first: u64,
        want: usize,
        fd: &File,
        give_up: &dyn Fn(u32) -> bool,
    ) -> Result<Option<u32>> {
        let want = want.clamp(1, RUN_PAGES);
        let k = self.key(slot, first);
        let index = self.index();
        if want == 1 || index.hint(k).is_some() {
            // Cached, or being loaded by someone: the single page's path, which waits for it.
            return self.lock_page_unless(slot, first, fd, Fill::Read, give_up);
        }
        let f = self.claim()?;
        match self.place_unless(f, k, give_up)? {
            Some(true) => {}
            Some(false) => {
                self.free_frame(f);
                return self.lock_page_unless(slot, first, fd, Fill::Read, give_up);
            }
            None => {
                self.free_frame(f);
                return Ok(None);
            }
        }
        let mut run = Vec::with_capacity(want);
        run.push(f);
        while run.len() < want {
            let k = self.key(slot, first + run.len() as u64);
            if key_page(k) == 0 || index.hint(k).is_some() {
                break;
            }
            let Some(f) = self.try_claim_holding() else { break };
            // Holding frames, never waiting for a stopped process (readers would wait for us),
            // nor freeing frames for index nodes.
            if self.place_once(f, k, &|h| self.stopped(h)) != Placed::Yes {
                self.free_frame(f);
                break;
            }
            run.push(f);
        }
        let n = run.len() as u64;
        // Relaxed: statistics.
        self.view.header().misses.fetch_add(n, Ordering::Relaxed);
        self.view.counters_of(self.me).misses.fetch_add(n, Ordering::Relaxed);
        if let Err(e) = self.fill_run(&run, slot, first, fd) {
            for &f in &run {
                self.free_frame(f);
            }
            if run.len() == 1 {
                return Err(e);
            }
            return self.lock_page_unless(slot, first, fd, Fill::Read, give_up);
        }
        let frames = self.view.frames();
        for &f in &run {
            // Release: published with the bytes by the unlock.
            frames[f as usize].flags.fetch_or(VALID, Ordering::Release);
        }
        self.view.header().loads.fetch_add(n, Ordering::Relaxed);
        for &f in &run[1..] {
            frames[f as usize].unlock(self.me, true);
        }
        Ok(Some(run[0]))
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
                    match self.claim() {
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
    fn place_once(&self, f: u32, k: u64, give_up: &dyn Fn(u32) -> bool) -> Placed {
        // Release: a lock-free lookup that reaches the frame sees its key.
        self.view.frames()[f as usize].key.store(k, Ordering::Release);
        self.index().place(k, f, self.me, &|h| self.alive(h), give_up)
    }

    /// Reads pages `first..` of `slot`'s file into frames `run` (locked, in the index) with
    /// one `preadv`; zeros past the end of the OS file and past the cached length.
    pub(crate) fn fill_run(&self, run: &[u32], slot: u32, first: u64, fd: &File) -> Result<()> {
        // SAFETY: we hold each frame's lock, so its PAGE bytes are ours to write; the frames
        // are distinct, so the slices do not overlap.
        let mut pages: Vec<&mut [u8]> =
            run.iter().map(|&f| unsafe { std::slice::from_raw_parts_mut(self.view.page(f), PAGE) }).collect();
        let at = first * PAGE as u64;
        let header = self.view.header();
        let read = |at: u64, bufs: &mut [IoSliceMut<'_>]| {
            // Relaxed: a counter.
            header.load_requests.fetch_add(1, Ordering::Relaxed);
            crate::io::sys::preadv_all(fd.as_raw_fd(), at, bufs)
                .map_err(|e| Error::io("read pages of a shared file", e))
        };
        let got = if self.techniques & technique::BUNDLING != 0 {
            let mut bufs: Vec<IoSliceMut<'_>> = pages.iter_mut().map(|p| IoSliceMut::new(p)).collect();
            read(at, &mut bufs)?
        } else {
            // A read per page, up to the end of the OS file.
            let mut got = 0;
            for p in pages.iter_mut() {
                let n = read(at + got as u64, &mut [IoSliceMut::new(p)])?;
                got += n;
                if n < PAGE {
                    break;
                }
            }
            got
        };
        // SeqCst: the frames are in the index (their keys stored before); a truncate stores the
        // length and then looks for frames past it (`drop_pages`), so either it finds ours or
        // we see its length here and zero past it.
        fence(Ordering::SeqCst);
        let len = self.view.files()[slot as usize].len.load(Ordering::SeqCst);
        let valid = (got as u64).min(len.saturating_sub(at));
        for (i, p) in pages.iter_mut().enumerate() {
            let from = valid.saturating_sub((i * PAGE) as u64).min(PAGE as u64) as usize;
            p[from..].fill(0);
        }
        Ok(())
    }
}
