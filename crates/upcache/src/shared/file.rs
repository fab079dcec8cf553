//! A file open in the shared cache: reads, writes, length changes and syncs, seen by every
//! attached process at once.
//!
//! A read copies each page optimistically (`frame.rs`) and keeps the result only if the file's
//! write sequence was even and unchanged across the whole copy and no range writer was at
//! work, so a read never mixes two writes; after a few tries it takes the file's lock and waits
//! for the range writers of its pages instead. A write within the length claims a range slot
//! for its pages under the file's lock and writes holding only the slot, so writers of
//! disjoint parts of a file, in any processes, run at once (F2FS's range lock); one that
//! extends the file holds the file's lock with every slot drained (as ext4's inode lock) and
//! makes the sequence odd. Per page a write locks the frame, marks it dirty, copies, and
//! publishes with a version bump; the length grows page by page as the bytes land.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use super::ahead;
use super::backing::Backing;
use super::bypass;
use super::files::{self, OsFile, Slot};
#[cfg(test)]
use super::frame::PAGE;
use super::frame::{DIRTY, VALID};
use super::held::HeldFd;
use super::layout::technique;
use super::page_size::PageSize;
use super::pages::Fill;
use super::streams::{Followed, Stream, Streams};
use super::{Inner, OpenFd};
use crate::error::{Error, ErrorKind, Result};
use crate::file::chunk::chunks;
use crate::io::reserve;
use crate::shm::Acquired;

/// Optimistic whole reads tried before a reader takes the file's lock.
const OPTIMISTIC_TRIES: usize = 4;

/// Windows of readahead (`Inner::ahead_window` pages each) a stream of sequential reads keeps
/// posted to its process's loaders past its read (`ahead.rs`): loads in flight while it copies.
const AHEAD_WINDOWS: u64 = 4;

/// Numbers this process's opens, so the loaders' windows name theirs.
static OPENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs of its file's pages a dflush lists at a time (`SharedFile::dflush`), and a
/// write-behind window holds at most (`SharedFile::write_behind`).
const WINDOW_RUNS: u64 = 4;
/// Windows a dflush looks at, at most.
const DFLUSH_WINDOWS: u64 = 4;

/// How a read's hit of a page counts for the clock hand (`FrameMeta::note_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Touch {
    /// A reference (a read at random, or with `SharedConfig::streams` off).
    Reference,
    /// A sequential stream's read: no reference the first time.
    Stream,
    /// A stream's read of the page its last read ended in: nothing new.
    Again,
}

/// A file open through a [`super::SharedCache`]. Closing it (drop, or [`Self::close`] to see
/// errors) writes its dirty pages back if it is the file's last open in any process.
pub struct SharedFile {
    pub(super) inner: Arc<Inner>,
    pub(super) slot: u32,
    pub(super) fd: Arc<Backing>,
    writable: bool,
    closed: bool,
    /// The path it was opened at, for messages.
    pub(super) name: String,
    /// Its file system's largest file (at most the 2^48 bytes a key can address).
    pub(super) max_len: u64,
    /// The write-back errors this open has reported (`FileEntry::unseen_error`).
    seen: std::sync::atomic::AtomicU64,
    /// This open's read streams: a read that continues one gets readahead (`read_pages`).
    streams: Streams,
    /// This open's write streams: a write that continues one hands the runs behind it to
    /// write-behind (`write_behind`).
    write_streams: Streams,
    /// This open's number in the process ([`OPENS`]).
    id: u64,
    /// The page where this open's last dflush stopped, where the next begins (the kernel's
    /// `writeback_index`).
    dflush_from: std::sync::atomic::AtomicU64,
    /// Whether the open found the file's entry kept after its last close ([`Self::kept`]).
    kept: bool,
}

fn open_error(path: &Path, e: std::io::Error) -> Error {
    let what = format!("open {}", path.display());
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Error::with_source(ErrorKind::PermissionDenied, what, e),
        Some(libc::ENOENT) => Error::with_source(ErrorKind::NotFound, what, e),
        _ => Error::io(what, e),
    }
}

impl SharedFile {
    /// The size of the cache's pages.
    #[inline]
    pub(crate) fn page_size(&self) -> PageSize {
        self.inner.view.page_size
    }

    pub(crate) fn open(inner: Arc<Inner>, path: &Path, write: bool, name: String) -> Result<SharedFile> {
        let fd = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| open_error(path, e))?;
        let md = fd.metadata().map_err(|e| Error::io(format!("stat {name}"), e))?;
        let fd = HeldFd::new(fd, (md.dev(), md.ino()));
        // At a high number, out of the program's way; the low one closes as a held one does,
        // so not while the program may hold a lock on the file.
        let fd = match crate::shm::high_fd::copy_out_of_the_way(&*fd) {
            Some(high) => HeldFd::new(std::fs::File::from(high), fd.key()),
            None => fd,
        };
        SharedFile::adopt(inner, Arc::new(Backing::File(fd)), &md, write, name)
    }

    /// Caches the OS file open on `fd` (opened by this process, for writing if `write`), which
    /// `md` describes.
    pub(super) fn adopt(
        inner: Arc<Inner>,
        fd: Arc<Backing>,
        md: &std::fs::Metadata,
        write: bool,
        name: String,
    ) -> Result<SharedFile> {
        inner.check_service()?;
        if !md.is_file() {
            return Err(Error::new(ErrorKind::InvalidInput, "only regular files are cached"));
        }
        if md.size() > super::frame::MAX_PAGES * inner.view.page_size.bytes() as u64 {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                format!("{name}: past the 256 TiB a key can address"),
            ));
        }
        let mut os = OsFile::of(md);
        if let Some(a) = fd.array() {
            os.size = a.logged_len();
        }
        let view = &inner.view;
        let table = &view.header().files_lock;
        table.lock(inner.me, |h| inner.alive(h));
        let found = files::find_or_take(view.files(), &os);
        let unchanged = matches!(found, Some(Slot::Found(_)));
        let slot = match found {
            Some(Slot::Found(s)) => Some(s),
            Some(Slot::Stale(s)) | Some(Slot::Fresh { slot: s, evict_old: true }) => {
                inner.next_generation(s);
                files::fill(&view.files()[s as usize], &os);
                Some(s)
            }
            Some(Slot::Fresh { slot, evict_old: false }) => {
                // A new generation for a freed entry too: a page of its former file never
                // matches (there are none left of the current one, but no harm).
                inner.next_generation(slot);
                files::fill(&view.files()[slot as usize], &os);
                Some(slot)
            }
            None => None,
        };
        // Where the file is, for a service that must write back what its writers left after
        // it lost their descriptors (it died and another took over): kept up to date by each
        // writable open, as files move.
        if let (Some(s), Some(fd)) = (slot.filter(|_| write), fd.os()) {
            let at = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
            let at = at.as_os_str().as_encoded_bytes();
            if at.starts_with(b"/") && !at.ends_with(b" (deleted)") {
                view.set_path(s as usize, at);
            }
        }
        // Relaxed: under the table's lock.
        let kept =
            unchanged && slot.is_some_and(|s| view.files()[s as usize].opens.load(Ordering::Relaxed) == 0);
        let Some(slot) = slot else {
            table.unlock(inner.me);
            return Err(Error::new(
                ErrorKind::CacheFull,
                "the shared cache's file table is full of open or dirty files",
            ));
        };
        let fd = Self::count_open(&inner, slot, fd, write);
        table.unlock(inner.me);
        let largest = match fd.os() {
            Some(os) => crate::io::device::largest_file(
                os,
                crate::file::MAX_FILE_SIZE,
                inner.view.page_size.bytes() as u64,
                md.blksize(),
            ),
            None => crate::file::MAX_FILE_SIZE,
        };
        let max_len = largest.min(super::frame::MAX_PAGES * inner.view.page_size.bytes() as u64);
        let file = SharedFile::counted(inner, slot, fd, write, name, max_len, kept);
        // Open elsewhere or dirty, the entry was taken as it is: the OS file may have changed
        // without the cache meanwhile.
        file.look_at(md)?;
        Ok(file)
    }

    /// Counts an open of `slot`'s file (for writing if `write`) through `fd`, with the file
    /// table's lock held: the descriptor this process's opens of it share.
    fn count_open(inner: &Inner, slot: u32, fd: Arc<Backing>, write: bool) -> Arc<Backing> {
        let view = &inner.view;
        // Holds first: a kill between them leaves the totals short, and repair recounts them.
        // Relaxed (all): under the table's lock.
        view.holds(inner.me)[slot as usize].fetch_add(1 | (write as u32) << 16, Ordering::Relaxed);
        let e = &view.files()[slot as usize];
        e.opens.fetch_add(1, Ordering::Relaxed);
        e.writers.fetch_add(write as u32, Ordering::Relaxed);
        // Under the table's lock too, so a slot another thread of ours just closed and another
        // file took never finds the old file's descriptor here.
        let mut fds = inner.fds.lock().unwrap_or_else(|p| p.into_inner());
        let e = fds.entry(slot).or_insert_with(|| OpenFd { fd: fd.clone(), writable: write, opens: 0 });
        if write && !e.writable {
            // An array file's backing is open for writing already, and stays one for all of
            // this process's opens: its zero windows and logged length are theirs.
            if e.fd.array().is_none() {
                e.fd = fd;
            }
            e.writable = true;
        }
        e.opens += 1;
        e.fd.clone()
    }

    /// A new open description of the same file, for writing if this one is (as another
    /// `open(2)` of it, `File::reopen`): its own streams, and its own report of write-back
    /// errors, from now on (and one that no open has reported yet).
    pub fn reopen(&self) -> Result<SharedFile> {
        let inner = &self.inner;
        inner.check_service()?;
        let table = &inner.view.header().files_lock;
        table.lock(inner.me, |h| inner.alive(h));
        // This open keeps the slot the file's: no other file takes it meanwhile.
        let fd = Self::count_open(inner, self.slot, self.fd.clone(), self.writable);
        table.unlock(inner.me);
        Ok(SharedFile::counted(
            inner.clone(),
            self.slot,
            fd,
            self.writable,
            self.name.clone(),
            self.max_len,
            false,
        ))
    }

    /// The open of `slot`'s file just counted (`count_open`) through `fd`, for writing if
    /// `write` (its descriptor lent to the service then), reporting write-back errors from
    /// now on; `kept` as [`Self::kept`].
    fn counted(
        inner: Arc<Inner>,
        slot: u32,
        fd: Arc<Backing>,
        write: bool,
        name: String,
        max_len: u64,
        kept: bool,
    ) -> SharedFile {
        if let (true, Some(os)) = (write, fd.os()) {
            inner.lend_fd(slot, os);
        }
        let seen = std::sync::atomic::AtomicU64::new(inner.view.files()[slot as usize].errors_sample());
        SharedFile {
            inner,
            slot,
            fd,
            writable: write,
            closed: false,
            name,
            max_len,
            seen,
            streams: Streams::default(),
            write_streams: Streams::unstarted(),
            // Relaxed: a unique number, nothing ordered by it.
            id: OPENS.fetch_add(1, Ordering::Relaxed),
            dflush_from: std::sync::atomic::AtomicU64::new(0),
            kept,
        }
    }

    /// Whether this open found the file kept in the cache after its last close (open nowhere,
    /// its entry and pages still there, as the kernel keeps a closed file's pages): what it
    /// keeps is dropped if the OS file changed meanwhile (`outside.rs`).
    pub fn kept(&self) -> bool {
        self.kept
    }

    /// The file's entry in the file table.
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    /// The largest length its file system allows (at most what a key can address).
    pub(crate) fn max_len(&self) -> u64 {
        self.max_len
    }

    /// Runs `change` with the file's lock held, as a change (the write sequence odd), so
    /// readers in every process retry or wait; None, without running it, if the lock's holder
    /// is stopped.
    pub(crate) fn with_change_lock_unless_stopped<T>(&self, change: impl FnOnce() -> T) -> Option<T> {
        let _locked = FileLock::take_if(self, true, |h| self.stalled(h))?;
        Some(change())
    }

    /// Runs `f` with the file's lock held as a change (readers in every process retry or
    /// wait meanwhile), waiting for it.
    pub(super) fn with_change_lock<T>(&self, f: impl FnOnce() -> T) -> T {
        let _locked = FileLock::take(self, true);
        f()
    }

    /// Runs `f` with the file's lock held and no range writer at work, if both are free now
    /// (it never waits: a sync by a thread that holds a pin of the file must not); None if not.
    pub(super) fn with_lock_if_free<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let _locked = FileLock::take_if(self, false, |_| true)?;
        Some(f())
    }

    /// Runs `change`, an OS change of the file that the program makes through the cache's
    /// shim (a `fallocate`), so that it is not taken for another program's.
    pub fn changing_os<T>(&self, change: impl FnOnce() -> T) -> T {
        let _own = self.inner.own_change(self.slot, self.fd.os());
        change()
    }

    /// Notes bytes `from..to` of the file set aside on the file system by the program (a
    /// `fallocate` through the shim: `set_aside`), so that writes below `to` reserve nothing
    /// again (`reserve`: fio sets its files aside before writing them, and each reservation
    /// waits for the file's O_DIRECT write-backs in flight, idling the device), or freed (a
    /// hole punched), so that writes there reserve them again.
    pub fn note_space(&self, from: u64, to: u64, set_aside: bool) {
        let _locked = FileLock::take(self, false);
        let e = self.entry();
        // Relaxed: changed only under the file's lock, which we hold.
        let reserved = e.reserved.load(Ordering::Relaxed);
        let new = match set_aside {
            _ if reserved == reserve::UNSUPPORTED => reserved,
            true if from <= reserved => reserved.max(to),
            true => reserved,
            false => reserved.min(from),
        };
        e.reserved.store(new, Ordering::Relaxed);
    }

    /// Whether lock holder `h` is stopped, or may wait for one: a range writer of the file is
    /// stopped, and a holder of the file's lock may be waiting for it (a reader does not wait
    /// behind that).
    fn stalled(&self, h: u32) -> bool {
        let stopped = |c| self.other_stopped(c);
        stopped(h) || self.entry().ranges.iter().any(|r| r.lock.holder().is_some_and(stopped))
    }

    /// Whether lock holder `h` is another process, stopped (this one is not: it is running).
    fn other_stopped(&self, h: u32) -> bool {
        h != self.inner.me && self.inner.stopped(h)
    }

    pub(crate) fn entry(&self) -> &files::FileEntry {
        &self.inner.view.files()[self.slot as usize]
    }

    /// The file's length as every attached process sees it.
    pub fn len(&self) -> u64 {
        if self.bypassed() {
            // A failed fstat of an open descriptor: the length the cache last knew.
            return bypass::len(&self.fd, &self.name).unwrap_or_else(|_| self.cached_len());
        }
        self.cached_len()
    }

    pub(crate) fn cached_len(&self) -> u64 {
        // Acquire: pairs with the length's Release stores.
        self.entry().len.load(Ordering::Acquire)
    }

    /// Whether the file is read and written without the cache, by every process
    /// ([`Self::bypass`]).
    pub fn bypassed(&self) -> bool {
        // Acquire: pairs with the Release store in `bypass`, so the pages it wrote back are
        // in the OS file for our reads.
        self.entry().bypass.load(Ordering::Acquire) != 0
    }

    /// Stops caching the file for every attached process, because something is about to read
    /// or write it without the cache: writes its dirty pages back, then, from this call on,
    /// every open of it (in any process, until the entry serves another file) reads, writes,
    /// truncates and syncs the OS file directly. On a write-back error nothing changes.
    pub fn bypass(&self) -> Result<()> {
        self.inner.check_service()?;
        if self.fd.array().is_some() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("{}: an array file is only read through the cache", self.name),
            ));
        }
        let locked = FileLock::take(self, true);
        if self.bypassed() {
            return Ok(());
        }
        // A truncate the OS file has not taken yet: past it the OS file still holds what it
        // cut, which reads past the cache would show, and its later finish would cut what they
        // write. Finished now, or the bypass waits for it.
        self.finish_cut()?;
        let e = self.entry();
        // Acquire (the count): pairs with `mark_dirty`'s. Writers need our lock: none is added.
        if self.writable {
            self.write_back()?;
        } else if e.dirty.load(Ordering::Acquire) > 0 {
            let Some(fd) = self.writer() else {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "{}: dirty pages of another process, and no descriptor to write them back",
                        self.name
                    ),
                ));
            };
            self.inner.write_back_slot(self.slot, &fd)?;
        }
        // Release: see `bypassed`. Before the pages go, and before the sequence ends the
        // change, so a reader whose copy overlapped this retries and sees it.
        e.bypass.store(1, Ordering::Release);
        self.inner.drop_pages(self.slot, 0, e.page_end(self.page_size()));
        drop(locked);
        Ok(())
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let t = crate::metrics::latency::sample();
        let r = self.read_untimed(buf, offset, true);
        self.inner.view.latencies().read.since(t);
        r
    }

    /// `read_at` for a queue's request whose lookups were counted already (`queue.rs`).
    pub(crate) fn read_uncounted(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.read_untimed(buf, offset, false)
    }

    /// Counts each page's lookup (a hit or a miss) if `count`.
    fn read_untimed(&self, buf: &mut [u8], offset: u64, count: bool) -> Result<usize> {
        self.inner.check_service()?;
        self.look_outside_if_due();
        let e = self.entry();
        let end = offset.saturating_add(buf.len() as u64);
        let (first, last) = pages_of(offset, end, self.page_size());
        let stream = self.streams.follow(offset, end);
        // A read of one page compares the sequence's low half only (`files::RANGE_STEP`).
        let compared = if last - first <= 1 { files::RANGE_STEP - 1 } else { u64::MAX };
        // Each page's lookup counts once (a hit or a miss), in the first pass that reads it.
        let mut count = count;
        for _ in 0..OPTIMISTIC_TRIES {
            // Acquire: the writes before an even value are seen by our copy.
            let seq = e.seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            // Acquire (in `ranges_overlap`): a range writer that ended is seen in the sequence.
            if e.ranges_overlap(first, last) {
                std::thread::yield_now();
                continue;
            }
            // After the sequence: a bypass that ended the change it read is seen.
            if self.bypassed() {
                return bypass::read(&self.fd, buf, offset, &self.name);
            }
            let n = self.read_pages(buf, offset, stream, count)?;
            count = false;
            // Acquire fence: our copies are ordered before the sequence's re-read.
            fence(Ordering::Acquire);
            // Relaxed: ordered by the fence.
            if e.seq.load(Ordering::Relaxed) & compared == seq & compared {
                return Ok(n);
            }
            #[cfg(test)]
            tests::READ_AGAIN.with(|c| c.set(c.get() + 1));
        }
        let Some(_locked) = FileLock::take_to_read(self, first, last) else {
            // The writer holding the file is stopped mid-write: the pages as they are now,
            // each whole where no one holds it, as the kernel's reads do (which no stopped
            // process can hold up: it stops only between system calls).
            return self.read_pages_beside_stopped(buf, offset, count);
        };
        if self.bypassed() {
            return bypass::read(&self.fd, buf, offset, &self.name);
        }
        self.read_pages(buf, offset, stream, count)
    }

    /// `read_pages` while a stopped process holds the file's lock (or a range writer's, or may
    /// wait for one): the pages as they are now, each whole where no one holds it, as the
    /// kernel's reads do (which no stopped process can hold up: it stops only between system
    /// calls); a page a stopped process holds as it is (`read_page`).
    fn read_pages_beside_stopped(&self, buf: &mut [u8], offset: u64, count: bool) -> Result<usize> {
        if self.bypassed() {
            return bypass::read(&self.fd, buf, offset, &self.name);
        }
        self.read_pages(buf, offset, Followed::default(), count)
    }

    /// Copies bytes `in_page..` of page `page` into `dst` from the frame a stopped process
    /// holds, as the page is now; false, nothing copied for good, if no stopped process holds
    /// its frame (any more).
    fn read_page_beside_stopped(&self, page: u64, in_page: usize, dst: &mut [u8]) -> Result<bool> {
        let view = &self.inner.view;
        let k = self.inner.key(self.slot, page);
        let held = self.inner.index().hint(k).and_then(|f| {
            let m = &view.frames()[f as usize];
            let h = m.holder().filter(|&h| self.other_stopped(h))?;
            (m.home() == k).then_some((f, h))
        });
        let Some((f, h)) = held else { return self.read_missing_beside_stopped(k, page, in_page, dst) };
        let m = &view.frames()[f as usize];
        if m.flags() & VALID != 0 {
            // SAFETY: in bounds, as in `read_page`. The stopped holder may have copied part of
            // its write into the page: a torn page, as a read racing a write may see in the
            // kernel; the bytes are plain integers, land only in `dst`, and are kept only if
            // the frame was that page under that holder throughout.
            unsafe { std::ptr::copy_nonoverlapping(view.page(f).add(in_page), dst.as_mut_ptr(), dst.len()) };
        } else {
            // Claimed for a write not yet copied in, or being loaded: the page is what the OS
            // file holds.
            let at = self.page_size().start(page) + in_page as u64;
            let n = bypass::read(&self.fd, dst, at, &self.name)?;
            dst[n..].fill(0);
        }
        // Acquire fence: the copy's loads come before the re-checks.
        fence(Ordering::Acquire);
        // Held by the stopped process throughout: the page all along.
        Ok(m.holder() == Some(h) && m.home() == k)
    }

    /// As `read_page_beside_stopped`, for a page no frame holds whose hash index partition's
    /// lock a stopped process holds: no one can put the page in a frame meanwhile, and while
    /// the holder is stopped the partition's chains stand still (`index.rs`), so a miss there
    /// is exact; the page is what the OS file holds, read without caching it. (The tree index
    /// has no lock to be held.)
    fn read_missing_beside_stopped(&self, k: u64, page: u64, in_page: usize, dst: &mut [u8]) -> Result<bool> {
        let index = self.inner.index();
        let Some(h) = index.holder(k).filter(|&h| self.other_stopped(h)) else { return Ok(false) };
        if index.hint(k).is_some() {
            return Ok(false);
        }
        let n = bypass::read(&self.fd, dst, self.page_size().start(page) + in_page as u64, &self.name)?;
        dst[n..].fill(0);
        // Acquire fence: the read comes before the re-checks.
        fence(Ordering::Acquire);
        Ok(index.holder(k) == Some(h) && index.hint(k).is_none())
    }

    /// Copies the pages of `[offset, offset + buf.len())` within the length, each whole. A
    /// miss loads the read's missing pages from there on in one run (`load.rs`). A read that
    /// is `sequential` (it continues one of this open's streams) is read ahead as the
    /// kernel's: a miss loads up to `SharedConfig::readahead` from its first page (synchronous
    /// readahead), and, if `stream.streak` too, windows past that go to the process's loaders
    /// (`read_ahead`). Hits are counted if `count` (a read's first pass: one that is retried
    /// counts its pages once).
    fn read_pages(&self, buf: &mut [u8], offset: u64, stream: Followed, count: bool) -> Result<usize> {
        let Followed { sequential, streak: loaders, stream } = stream;
        let len = self.cached_len();
        let end = offset.saturating_add(buf.len() as u64).min(len);
        if offset >= end {
            return Ok(0);
        }
        let (own, pages) = (self.page_size().pages_in(end), self.page_size().pages_in(len));
        let ahead = self.inner.readahead_pages;
        let last = if sequential && ahead > 0 {
            let last = (self.page_size().page_of(offset) + ahead).min(pages).max(own);
            let window = self.inner.ahead_window();
            if window > 0 && loaders {
                self.read_ahead(self.streams.get(stream), last, window, pages);
            }
            last
        } else {
            own
        };
        let streamed = sequential && self.inner.streams();
        // Pages below it were counted by a miss that loaded them (`lock_page_loading`).
        let mut counted_to = 0;
        for c in chunks(offset, end, self.page_size().bytes() as u64) {
            let want = ((last - c.page) as usize, (own - c.page) as usize);
            // A stream's read that begins inside a page goes on reading the page its last
            // read ended in: read once still (the kernel's `pos_same_folio`).
            let touch = match streamed {
                true if c.in_page != 0 && c.page == self.page_size().page_of(offset) => Touch::Again,
                true => Touch::Stream,
                false => Touch::Reference,
            };
            let count = count && c.page >= counted_to;
            let loaded = self.read_page(c.page, c.in_page, &mut buf[c.at..][..c.len], want, touch, count)?;
            counted_to = counted_to.max(c.page + loaded as u64);
        }
        Ok((end - offset) as usize)
    }

    /// Keeps [`AHEAD_WINDOWS`] windows of `window` pages posted to the process's loaders
    /// past page `from` (of `pages`) for `stream`, posting whole windows only, but the file's
    /// last. If the loaders take none, a reader that reaches pages not loaded loads them itself.
    fn read_ahead(&self, stream: &Stream, from: u64, window: u64, pages: u64) {
        let target = from.saturating_add(AHEAD_WINDOWS * window).min(pages);
        // Relaxed (both): this open's own hint; the loaders look at the index, not at this.
        let mut at = stream.edge.load(Ordering::Relaxed).max(from);
        if at >= target || (target - at < window && target < pages) {
            return;
        }
        while at < target {
            let to = (at + window).min(pages);
            let w = ahead::Window {
                open: self.id,
                slot: self.slot,
                pages: at..to,
                write: false,
                fd: self.fd.clone(),
            };
            if !self.inner.ahead.post(&self.inner, w) {
                break;
            }
            // Relaxed: a statistic.
            self.inner.view.header().ahead_windows.fetch_add(1, Ordering::Relaxed);
            at = to;
        }
        stream.edge.store(at, Ordering::Relaxed);
    }

    /// Copies bytes of page `page` from `in_page` into `dst`; a miss loads the page and up to
    /// `want.0 - 1` missing pages after it, the first `want.1` of them counted as misses, and
    /// says how many it loaded; a hit is noted for the clock hand as `touch` says, and counted
    /// if `count`.
    fn read_page(
        &self,
        page: u64,
        in_page: usize,
        dst: &mut [u8],
        want: (usize, usize),
        touch: Touch,
        count: bool,
    ) -> Result<usize> {
        if self.copy_hit(page, in_page, dst, touch, count) {
            return Ok(0);
        }
        let view = &self.inner.view;
        // Missing, in flight or changing: take the frame's lock (loading the page if need be),
        // unless a stopped process holds it.
        let (f, loaded) = loop {
            match self.inner.lock_page_loading(
                self.slot,
                page,
                want,
                &self.fd,
                &|h| self.other_stopped(h),
                count,
            )? {
                Some(got) => break got,
                None if self.read_page_beside_stopped(page, in_page, dst)? => return Ok(0),
                None => {}
            }
        };
        // SAFETY: we hold the frame's lock; in bounds as above.
        unsafe { std::ptr::copy_nonoverlapping(view.page(f).add(in_page), dst.as_mut_ptr(), dst.len()) };
        view.frames()[f as usize].unlock(self.inner.me, false);
        Ok(loaded)
    }

    /// Copies bytes of page `page` from `in_page` into `dst` if its frame is valid and stays
    /// unchanged across the copy (lock-free); a hit is noted as `touch` says and counted if
    /// `count`. False, `dst` to be ignored, otherwise: missing, being loaded or changing.
    fn copy_hit(&self, page: u64, in_page: usize, dst: &mut [u8], touch: Touch, count: bool) -> bool {
        let view = &self.inner.view;
        let k = self.inner.key(self.slot, page);
        let Some(f) = self.inner.index().hint(k) else { return false };
        let m = &view.frames()[f as usize];
        // The bytes' first line is fetched while the frame's word is: a random hit's two
        // misses overlap instead of following each other.
        let src = view.page(f).wrapping_add(in_page);
        crate::frame::prefetch(src);
        // A page being written back is read too.
        let Some(w) = m.readable() else { return false };
        let flags = m.flags();
        if m.home() != k || flags & VALID == 0 {
            return false;
        }
        // SAFETY: in bounds (`in_page + dst.len() <= page size`). A seqlock read: a frame being
        // written or reused may change under the copy, a data race by the letter of the
        // memory model, as in every seqlock; the bytes are plain integers, land only in `dst`,
        // and are kept only if `unchanged` holds.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        if !m.unchanged(w) {
            return false;
        }
        match touch {
            Touch::Reference => m.note_read(flags, self.inner.counts_hits(), false),
            Touch::Stream => m.note_read(flags, self.inner.counts_hits(), true),
            Touch::Again => {}
        }
        if count {
            self.inner.count_hit();
            self.inner.count_lock_free_hit();
        }
        true
    }

    /// `read_at` if every page of the range is cached and no writer is at work on it: the
    /// bytes read, else None with nothing waited for (an I/O queue holding loads must not
    /// sleep on others, `queue.rs`). Hits are counted if `count`.
    pub(crate) fn read_cached(&self, buf: &mut [u8], offset: u64, count: bool) -> Result<Option<usize>> {
        self.inner.check_service()?;
        let e = self.entry();
        let end = offset.saturating_add(buf.len() as u64);
        let (first, last) = pages_of(offset, end, self.page_size());
        let compared = if last - first <= 1 { files::RANGE_STEP - 1 } else { u64::MAX };
        // Acquire: as in `read_untimed`.
        let seq = e.seq.load(Ordering::Acquire);
        if seq & 1 == 1 || e.ranges_overlap(first, last) {
            return Ok(None);
        }
        if self.bypassed() {
            return bypass::read(&self.fd, buf, offset, &self.name).map(Some);
        }
        let end = end.min(self.cached_len());
        if offset >= end {
            return Ok(Some(0));
        }
        for c in chunks(offset, end, self.page_size().bytes() as u64) {
            if !self.copy_hit(c.page, c.in_page, &mut buf[c.at..][..c.len], Touch::Reference, count) {
                return Ok(None);
            }
        }
        // Acquire fence, then Relaxed: as in `read_untimed`.
        fence(Ordering::Acquire);
        Ok((e.seq.load(Ordering::Relaxed) & compared == seq & compared).then_some((end - offset) as usize))
    }

    /// Writes `buf` at `offset`: all of it, or, if an error stops it after some pages, how
    /// many bytes were written.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.write_locked(buf, Some(offset), |_, _| Ok((offset, buf.len()))).map(|(n, _)| n)
    }

    /// Appends `buf` at the end of the file, atomically with respect to every other writer in
    /// any process; where it was written and how many bytes.
    pub fn append(&self, buf: &[u8]) -> Result<(u64, usize)> {
        self.append_within(buf, u64::MAX).map(|r| r.unwrap_or((0, 0)))
    }

    /// [`Self::append`] for a process whose files may not grow past `limit` (RLIMIT_FSIZE): the
    /// end is found, growth of the OS file made without the cache taken in, and the bytes
    /// written, all under the file's lock, so no other appender in any process starts or ends
    /// inside this one. Bytes past `limit` are cut; None if the end is at or past it (the
    /// caller's SIGXFSZ) and `buf` is not empty.
    pub fn append_within(&self, buf: &[u8], limit: u64) -> Result<Option<(u64, usize)>> {
        // Growth made without the cache is looked for before the lock (a system call there
        // would lengthen every appender's wait), and taken in under it only if there is some:
        // the end among the cache's appenders is the cached length, which only they move.
        let grew = !self.bypassed() && self.fd.array().is_none() && {
            let md = self.os_metadata()?;
            self.look_at(&md)?;
            md.len() > self.cached_len()
        };
        let mut past = false;
        let written = self.write_locked(buf, None, |file, locked| {
            let end = if grew || file.bypassed() { file.take_in_growth(locked)? } else { file.cached_len() };
            past = end >= limit && !buf.is_empty();
            Ok((end, (limit.saturating_sub(end)).min(buf.len() as u64) as usize))
        })?;
        Ok((!past).then_some((written.1, written.0)))
    }

    /// Writes at the offset `at` picks (with the lock held: the end, for appends), of at most
    /// the bytes it allows. A write within the length holds a range slot instead of the file's
    /// lock while it copies (`FileLock::claim_range`); one that extends the file holds the
    /// lock, all range writers done. A write at a given offset (`positional`) within the
    /// length takes its slot with no lock at all where it can (`FileLock::claim_alone`).
    fn write_locked(
        &self,
        buf: &[u8],
        positional: Option<u64>,
        at: impl FnMut(&Self, &FileLock<'_>) -> Result<(u64, usize)>,
    ) -> Result<(usize, u64)> {
        let t = crate::metrics::latency::sample();
        let r = self.write_untimed(buf, positional, at);
        self.inner.view.latencies().write.since(t);
        r
    }

    fn write_untimed(
        &self,
        buf: &[u8],
        positional: Option<u64>,
        mut at: impl FnMut(&Self, &FileLock<'_>) -> Result<(u64, usize)>,
    ) -> Result<(usize, u64)> {
        if !self.writable {
            return Err(Error::new(ErrorKind::InvalidInput, "the file is not open for writing"));
        }
        self.inner.check_service()?;
        self.look_outside_if_due();
        self.throttle(buf.len());
        if let Some(offset) = positional {
            if let Some(n) = self.write_alone(buf, offset)? {
                return Ok((n, offset));
            }
        }
        #[cfg(test)]
        tests::LOCKED_WRITES.with(|c| c.set(c.get() + 1));
        loop {
            let locked = FileLock::take_for_write(self);
            if let Some(done) = self.write_under(buf, locked, &mut at)? {
                return Ok(done);
            }
        }
    }

    /// [`Self::write_locked`] with the file's lock `locked`: None if a range writer of the
    /// same pages was at work, after waiting for it with the lock let go (so that writers of
    /// other pages are not held up behind the wait: one of them may hold a pin the range
    /// writer waits for); the caller takes the lock again and tries again.
    fn write_under(
        &self,
        buf: &[u8],
        locked: FileLock<'_>,
        at: &mut impl FnMut(&Self, &FileLock<'_>) -> Result<(u64, usize)>,
    ) -> Result<Option<(usize, u64)>> {
        let (offset, allowed) = at(self, &locked)?;
        let buf = &buf[..allowed.min(buf.len())];
        if buf.is_empty() {
            return Ok(Some((0, offset)));
        }
        if self.bypassed() {
            // Under the lock still: appends of processes using the cache stay atomic. (A
            // bypass waits for every range writer before it sets the flag.)
            return bypass::write(&self.fd, buf, offset, &self.name).map(|n| Some((n, offset)));
        }
        // Past what an off_t can say: a bad argument (the kernel's EINVAL), not a large file.
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("offset {offset} + length {} is past the largest file offset", buf.len()),
            ));
        }
        let max = self.max_len;
        if offset >= max && !buf.is_empty() {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                format!("write at {offset} of {}: its file system's largest file is {max} bytes", self.name),
            ));
        }
        // Up to the largest file, as the kernel writes.
        let buf = &buf[..buf.len().min((max - offset.min(max)) as usize)];
        self.settle_cut_before(offset + buf.len() as u64)?;
        let buf = &buf[..self.reserve(offset, buf.len())?];
        let len = self.cached_len();
        let end = offset + buf.len() as u64;
        // Within the length: the pages only, beside writers of other parts of the file; past it
        // the length moves, so the whole file.
        let (first, last) = pages_of(offset, end, self.page_size());
        let Some(_hold) = locked.hold(first, last, end <= len) else { return Ok(None) };
        if self.page_size().page_of(offset) > self.page_size().page_of(len) {
            self.settle_end_page(len);
        }
        let n = self.write_pages(buf, offset)?;
        // The file's lock (or the range slot) goes before the hand-over.
        drop(_hold);
        self.write_behind(offset, n);
        Ok(Some((n, offset)))
    }

    /// [`Self::write_locked`]'s write with a range slot taken alone: None (nothing written) if
    /// it is not within the length and reserved space, or the slot could not be had so.
    fn write_alone(&self, buf: &[u8], offset: u64) -> Result<Option<usize>> {
        if buf.is_empty() || self.inner.techniques & technique::RANGE_LOCK == 0 {
            return Ok(None);
        }
        let Some(end) = offset.checked_add(buf.len() as u64).filter(|&end| end <= self.max_len) else {
            return Ok(None);
        };
        let (first, last) = pages_of(offset, end, self.page_size());
        // A hit's two misses, the tree's leaf and then the frame's word, started before the
        // claim and after it, so that they overlap it instead of following it (as the
        // in-process engine's writer does).
        let (inner, k) = (&*self.inner, self.inner.key(self.slot, first));
        inner.index().prefetch(k);
        let Some(hold) = FileLock::claim_alone(self, first, last, end) else { return Ok(None) };
        if let Some(f) = inner.index().hint(k).filter(|&f| (f as usize) < inner.view.n_frames) {
            crate::frame::prefetch(&inner.view.frames()[f as usize] as *const _);
        }
        let n = self.write_pages(buf, offset)?;
        // The slot goes before the hand-over, as the locked way's.
        drop(hold);
        self.write_behind(offset, n);
        Ok(Some(n))
    }

    /// StreamCache's stream write-back (seed 003 §4.2), with `SharedConfig::streams`: a
    /// write that continues one of this open's sequential write streams (it starts where that
    /// stream's last write ended; a single write, however long, makes none; `Streams`, up to
    /// 4 at once, so writers taking turns on one descriptor each keep theirs) hands the stream's whole
    /// pages written since the last hand-over, once they make a run (`PageSize::run_pages`, or a
    /// sixteenth of a smaller cache), to the process's loader threads, which write them back
    /// (`Inner::write_behind`) while the writer goes on, if more of the cache than half its
    /// background dirty ratio is dirty. So a stream's pages are written back in order, in
    /// full runs, as they are done with, and, written once and never read, are clean and
    /// unreferenced for the clock hand: they go first, before anyone's pages read at random
    /// or still dirty. Random writes, and a cache with few dirty pages, keep the kernel's
    /// ways (expiry, the ratios, syncs).
    fn write_behind(&self, offset: u64, n: usize) {
        if n == 0 || !self.inner.streams() {
            return;
        }
        let end = offset + n as u64;
        // Relaxed (all): this open's hints; two threads writing through one open at once make
        // at worst a stream begin again.
        let followed = self.write_streams.follow(offset, end);
        let stream = self.write_streams.get(followed.stream);
        if !followed.sequential {
            // A stream begins here: nothing before it is its to write behind.
            stream.edge.store(self.page_size().page_of(offset), Ordering::Relaxed);
            return;
        }
        let (from, to) = (stream.edge.load(Ordering::Relaxed), self.page_size().page_of(end));
        // A run, or a sixteenth of a cache too small for runs to matter.
        let run_pages = self.page_size().run_pages() as u64;
        let run = run_pages.min((self.inner.view.n_frames as u64 / 16).max(1));
        if to < from.saturating_add(run) {
            return;
        }
        // At most a few runs a window: threads writing through one open at once may mix
        // their streams' ends, and the loaders may have refused windows; what is left before
        // goes the kernel's ways.
        let from = from.max(to.saturating_sub(WINDOW_RUNS * run_pages));
        // Relaxed: a threshold.
        if self.inner.view.header().dirty.load(Ordering::Relaxed) <= self.inner.dirty_limits().0 / 2 {
            // Left to the kernel's ways; the stream's next run begins here.
            stream.edge.store(to, Ordering::Relaxed);
            return;
        }
        let w = ahead::Window {
            open: self.id,
            slot: self.slot,
            pages: from..to,
            write: true,
            fd: self.fd.clone(),
        };
        // Not taken (the loaders are behind): the next hand-over covers these pages too.
        if self.inner.ahead.post(&self.inner, w) {
            stream.edge.store(to, Ordering::Relaxed);
        }
    }

    /// Takes the page holding byte `offset` for writing in place (see
    /// [`SharedPageMut`](super::SharedPageMut)): its bytes inside the file, loaded on a miss and
    /// marked dirty; readers and writers of the page, in every process, wait until the guard
    /// drops. Holds the page's range slot (F2FS's range lock; the file's lock with it off, or
    /// every slot taken) and the frame's lock throughout, as a write of the page does while it
    /// copies. `InvalidInput` at or past the end of file (extend it first) or on a file not
    /// open for writing; `Unsupported` on a file no longer cached (`bypass`).
    ///
    /// Keep the guard briefly, as a write keeps its page: a reader of the page that has tried
    /// in vain takes the file's lock and waits for the guard holding it, and so every writer,
    /// extension and truncation of the file, in every process, waits too (with the range lock
    /// off, or all four slots taken, the guard holds the file's lock itself). The holder must
    /// not read, write or truncate the file, nor take a second guard of it, while it holds one:
    /// it would wait for itself.
    pub fn pin_mut(&self, offset: u64) -> Result<super::SharedPageMut<'_>> {
        if !self.writable {
            return Err(Error::new(ErrorKind::InvalidInput, "the file is not open for writing"));
        }
        self.inner.check_service()?;
        self.inner.check_range_lock("pin_mut")?;
        self.look_outside_if_due();
        self.throttle(self.page_size().bytes());
        let (hold, start, bytes) = loop {
            let locked = FileLock::take_for_write(self);
            if self.bypassed() {
                self.check_live()?;
                return Err(Error::new(ErrorKind::Unsupported, format!("{} is no longer cached", self.name)));
            }
            let len = self.cached_len();
            if offset >= len {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("pin_mut at {offset} of {}: at or past its end ({len})", self.name),
                ));
            }
            let page = self.page_size().page_of(offset);
            let start = self.page_size().start(page);
            let bytes = (len - start).min(self.page_size().bytes() as u64) as usize;
            // Space for the page on the file system (a hole's write-back would find none).
            if self.reserve(start, bytes)? < bytes {
                return Err(Error::new(ErrorKind::NoSpace, format!("no space for a page of {}", self.name)));
            }
            // None: a writer of the page was waited for with the lock let go; again.
            if let Some(hold) = locked.hold(page, page + 1, true) {
                break (hold, start, bytes);
            }
        };
        let page = self.page_size().page_of(offset);
        let f = self.inner.lock_page(self.slot, page, &self.fd, Fill::Read)?;
        self.inner.wait_unpinned(f);
        self.inner.mark_dirty(f);
        Ok(super::SharedPageMut::new(self, f, bytes, start, hold))
    }

    /// Before the length moves past the page that holds the end without a write into that
    /// page (a write further on, an extension): the page is locked once, so that a writer
    /// killed while it copied into it is repaired first (its bytes past the end zeroed,
    /// `repair.rs`) instead of showing through. With the file's lock held (so `old`, the length,
    /// is stable), no frame's.
    fn settle_end_page(&self, old: u64) {
        if self.page_size().in_page(old) == 0 {
            return;
        }
        if let Some(f) = self.inner.lock_cached(self.slot, self.page_size().page_of(old)) {
            self.inner.view.frames()[f as usize].unlock(self.inner.me, false);
        }
    }

    /// Space on the file system for a write of `len` bytes at `offset` (`io/reserve.rs`), with
    /// the file's lock held: how many of them fit (all, or those below what was reserved
    /// before, as a short write), or `NoSpace` if none does.
    fn reserve(&self, offset: u64, len: usize) -> Result<usize> {
        let e = self.entry();
        // Relaxed: changed only under the file's lock, which we hold.
        let reserved = e.reserved.load(Ordering::Relaxed);
        let (fits, r) = reserve::for_write(
            reserved,
            offset,
            len,
            self.page_size().bytes() as u64,
            self.max_len,
            |from, to| {
                let _own = self.inner.own_change(self.slot, self.fd.os());
                match (&*self.fd, self.fd.os()) {
                    (_, Some(os)) => reserve::set_aside(os, from, to),
                    (Backing::Array(a), None) => a.set_aside(from, to),
                    (Backing::File(_), None) => Ok(()),
                }
            },
        )
        .map_err(|err| Error::io(format!("write {len} bytes at {offset} of {}", self.name), err))?;
        e.reserved.store(r, Ordering::Relaxed);
        Ok(fits)
    }

    fn write_pages(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let view = &self.inner.view;
        let e = self.entry();
        let mut done = 0;
        for c in chunks(offset, offset + buf.len() as u64, self.page_size().bytes() as u64) {
            let fill = if c.len == self.page_size().bytes() { Fill::Overwrite } else { Fill::Read };
            let f = match self.inner.lock_page(self.slot, c.page, &self.fd, fill) {
                Ok(f) => f,
                Err(err) if done == 0 => return Err(err),
                Err(_) => break,
            };
            self.inner.wait_unpinned(f);
            self.inner.mark_dirty(f);
            let src = &buf[c.at..][..c.len];
            let m = &view.frames()[f as usize];
            // SAFETY: we hold the frame's lock; `in_page + len <=` the page size.
            unsafe { m.copy_in(src, view.page(f).add(c.in_page)) };
            // Release: published with the bytes by the unlock.
            m.flags.fetch_or(VALID, Ordering::Release);
            done = c.at + c.len;
            // Before the unlock: a write-back that locks the frame next writes up to the new
            // length. Release: a reader that sees the length sees the bytes.
            e.raise_len(offset + done as u64);
            m.unlock(self.inner.me, true);
        }
        Ok(done)
    }

    /// Past the background dirty ratio (a quarter of the cache by default) a writer wakes the
    /// service's write-back at once, as the kernel's writers wake its flusher, so
    /// that the disk works while the writer copies; past the foreground ratio (half) it first
    /// writes back its own file's dirty pages (dflush), so clean frames remain for everyone's
    /// misses, or with `FlushKind::Background` pauses for the service's write-back.
    fn throttle(&self, bytes: usize) {
        // Relaxed: a threshold.
        let dirty = self.inner.view.header().dirty.load(Ordering::Relaxed);
        let (background, foreground) = self.inner.dirty_limits();
        if dirty > foreground {
            if self.inner.dflush() || !self.inner.pause_for_write_back() {
                // Relaxed: a statistic.
                self.inner.view.header().writer_write_backs.fetch_add(1, Ordering::Relaxed);
                self.dflush(dirty, self.page_size().pages_in(bytes as u64));
            }
        } else if dirty > background && self.writable {
            // At most one message per process per few milliseconds, so this is mostly a load.
            self.inner.kick_write_back();
        }
    }

    /// dflush in proportion (ScaleCache §3.3; the private engine's `balance_dirty`): writes
    /// back about twice the pages this write dirties, a run at least, of this file's dirty
    /// pages from where this open's last dflush stopped, and goes on. Writing the whole file
    /// back made the one write that did it wait for every dirty page of the file (the writers'
    /// p99 was 3x that of writers pausing for the service, bench/RESULTS.md). Errors stay on
    /// the file for its next sync.
    fn dflush(&self, dirty: u64, pages: u64) {
        let inner = &self.inner;
        let window = WINDOW_RUNS * self.page_size().run_pages() as u64;
        let target = dirty.saturating_sub((2 * pages).max(self.page_size().run_pages() as u64));
        let (gen, end) = inner.file_extent(self.slot);
        // Relaxed: this open's hint.
        let mut from = self.dflush_from.load(Ordering::Relaxed);
        let mut looked = 0;
        let e = self.entry();
        // At most `DFLUSH_WINDOWS` windows a call: a file whose dirty pages are few and far
        // between, or keep failing, costs each write a bounded look; the next goes on.
        // Acquire (the file's count): pairs with `mark_dirty`'s count.
        while looked < end.min(DFLUSH_WINDOWS * window) && e.dirty.load(Ordering::Acquire) > 0 {
            if from >= end {
                from = 0;
            }
            let to = end.min(from + window);
            let pages = inner.candidates_of(self.slot, gen, from, to);
            // Frames others hold locked are passed over, never waited for: their holder may
            // be a stopped process, and this writer's pages are elsewhere.
            let into = inner.target(&self.fd);
            let _ =
                super::writeback::as_writer(|| inner.write_back_listed(&pages, into, false, Some(target)));
            looked += to - from;
            // Relaxed: a threshold.
            if inner.view.header().dirty.load(Ordering::Relaxed) <= target {
                break; // the next dflush looks at this window again: it may have stopped in it
            }
            from = to;
        }
        self.dflush_from.store(from, Ordering::Relaxed);
    }

    /// Sets the length: a shrink drops the pages past it and zeros the rest of the last one;
    /// the OS file is truncated at once.
    pub fn set_len(&self, new: u64) -> Result<()> {
        if !self.writable {
            return Err(Error::new(ErrorKind::InvalidInput, "the file is not open for writing"));
        }
        self.inner.check_service()?;
        if new > i64::MAX as u64 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("length {new} is past the largest file offset"),
            ));
        }
        if new > self.max_len {
            return Err(Error::new(
                ErrorKind::FileTooLarge,
                format!(
                    "length {new} of {} is past its file system's largest file, {} bytes",
                    self.name, self.max_len
                ),
            ));
        }
        let _locked = FileLock::take(self, true);
        if self.bypassed() {
            self.check_live()?;
            return self.fd.set_len(new).map_err(|err| Error::io(format!("truncate {}", self.name), err));
        }
        self.set_len_locked(new)
    }

    fn set_len_locked(&self, new: u64) -> Result<()> {
        let e = self.entry();
        let old = self.cached_len();
        if new >= old {
            if new > old {
                self.settle_cut_before(new)?;
                self.settle_end_page(old);
            }
            let own = self.inner.own_change(self.slot, self.fd.os());
            self.fd.set_len(new).map_err(|err| Error::io("extend a shared file", err))?;
            drop(own);
            // Pages past the old end are left only by a truncate killed half-way: their
            // bytes would show through the extension.
            let past = self.page_size().pages_in(old);
            if e.page_end(self.page_size()) > past {
                self.inner.drop_pages(self.slot, past, e.page_end(self.page_size()));
            }
            e.raise_len(new);
            return Ok(());
        }
        // SeqCst: the intent is seen by whoever takes the lock if we die from here on, and by
        // a pin's guard (`SharedFile::guard`) that comes after our look at its frame.
        e.cut.store(new + 1, Ordering::SeqCst);
        self.cut_to(new)
    }

    /// Cuts the file to `new` (at most its length), with the lock held and the intent in
    /// `cut`: lowers the length, drops and zeros the pages past it, cuts the OS file, and then
    /// clears the intent. A failure leaves the intent, for the next taker of the lock.
    fn cut_to(&self, new: u64) -> Result<()> {
        let e = self.entry();
        // The pins of the pages the cut reaches go first, each waited for under its frame's
        // lock (the pins' handshake): a guard never reaches past the end. A pin taken after
        // sees the intent stored before (`SharedFile::guard`).
        let size = self.page_size();
        // SeqCst: the intent's store comes before the index's loads of the scan (as in
        // `drop_pages`): a page placed after the scan is pinned by one that sees the intent.
        fence(Ordering::SeqCst);
        for (f, k) in self.inner.candidates(self.slot, size.page_of(new), e.page_end(size)) {
            let m = &self.inner.view.frames()[f as usize];
            self.inner.lock_frame(f);
            if m.key() == k {
                self.inner.wait_unpinned(f);
            }
            // Changed: `wait_unpinned` may have cleared `PINNED`, which a version bump goes with.
            m.unlock(self.inner.me, true);
        }
        // SeqCst: see `Inner::fill`, which pairs with the fence in `drop_pages`.
        e.len.fetch_min(new, Ordering::SeqCst);
        // The cut frees what was reserved past it. Relaxed: under the file's lock.
        e.reserved.fetch_min(new, Ordering::Relaxed);
        // Pages go before the OS file is cut: a write-back in flight holds its frame's lock, so
        // once every frame past the end is dropped none can grow the file again.
        self.inner.drop_pages(self.slot, self.page_size().pages_in(new), e.page_end(self.page_size()));
        if self.page_size().in_page(new) != 0 {
            let view = &self.inner.view;
            let page = self.page_size().page_of(new);
            // An array file's device keeps the bytes past the cut in that page until the page
            // is written back whole: it is loaded if missing, and left dirty. (An OS file's
            // truncate zeros them itself.)
            let f = match self.fd.array() {
                Some(_) => Some(self.inner.lock_page(self.slot, page, &self.fd, Fill::Read)?),
                None => self.inner.lock_cached(self.slot, page),
            };
            if let Some(f) = f {
                let from = self.page_size().in_page(new);
                self.inner.wait_unpinned(f);
                // SAFETY: we hold the frame's lock; `from <` the page size.
                unsafe { std::ptr::write_bytes(view.page(f).add(from), 0, self.page_size().bytes() - from) };
                if self.fd.array().is_some() {
                    self.inner.mark_dirty(f);
                }
                view.frames()[f as usize].unlock(self.inner.me, true);
            }
        }
        if !self.writable {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a truncate to finish, and the file is open read-only",
            ));
        }
        // A failure leaves the cache at the new length with the OS file longer (loads zero
        // past the length) and the intent set, so no growth is taken in past it.
        let own = self.inner.own_change(self.slot, self.fd.os());
        self.fd.set_len(new).map_err(|err| Error::io("truncate a shared file", err))?;
        drop(own);
        // Release: after the cut.
        e.cut.store(0, Ordering::Release);
        Ok(())
    }

    /// Finishes a truncate that a dead holder of the lock (or a failed cut) left, if any.
    fn finish_cut(&self) -> Result<()> {
        // Acquire: pairs with the Release store of the intent.
        let cut = self.entry().cut.load(Ordering::Acquire);
        if cut != 0 {
            self.cut_to(cut - 1).inspect_err(|e| {
                log::warn!("shared cache: {}: finishing a truncate: {e}", self.name);
            })?;
        }
        Ok(())
    }

    /// For a holder of the file's lock about to write up to `end` (or make the file that
    /// long): a truncate the OS file has not taken yet, if `end` reaches it, must be finished
    /// first, else the error that keeps it from being (below it, within the length, nothing). Past its length the OS file still holds what the truncate cut,
    /// which pages loaded between that length and `end` would show, and finishing it later
    /// would cut the new bytes away.
    fn settle_cut_before(&self, end: u64) -> Result<()> {
        // Acquire: pairs with the Release store of the intent.
        let cut = self.entry().cut.load(Ordering::Acquire);
        if cut == 0 || end < cut {
            return Ok(());
        }
        self.finish_cut()
    }

    /// Writes every dirty page of the file back to it (no flush); the first error.
    pub fn write_back(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.inner.write_back_slot(self.slot, &self.fd)
    }

    /// Starts the write-back of the file's dirty pages without waiting for it, as the kernel's
    /// POSIX_FADV_DONTNEED does: the service writes them back at once through a descriptor a
    /// writer lent it (in the background, as the kernel's flusher); with no service to ask,
    /// this process writes them back itself (if it may write the file).
    pub fn start_write_back(&self) -> Result<()> {
        // Acquire: pairs with `mark_dirty`'s count.
        if self.entry().dirty.load(Ordering::Acquire) == 0 || self.inner.ask_write_back(self.slot) {
            return Ok(());
        }
        self.write_back_unwaiting()
    }

    /// As [`Self::write_back`], passing over pages another process holds locked (as a process
    /// dies of a signal: one of them may be stopped, and the cache keeps those pages anyway).
    pub fn write_back_unwaiting(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.inner.write_back_slot_as(self.slot, &self.fd, false)
    }

    /// Makes the file's data durable, whoever wrote it: writes back, then `fdatasync`.
    pub fn sync_data(&self) -> Result<()> {
        self.sync(false)
    }

    /// As [`Self::sync_data`], with the file's metadata (`fsync`).
    pub fn sync_all(&self) -> Result<()> {
        self.sync(true)
    }

    fn sync(&self, all: bool) -> Result<()> {
        self.sync_as(all, &self.seen)
    }

    /// Where an open description made now starts counting the file's write-back errors: past
    /// those some open has reported (the kernel's `errseq_sample`); for [`Self::sync_as`].
    pub fn errors_sample(&self) -> u64 {
        self.entry().errors_sample()
    }

    /// [`Self::sync_all`] (`all`) or [`Self::sync_data`], reporting a write-back error as to
    /// the open description whose count is `seen` (from [`Self::errors_sample`]): for several
    /// descriptions that share this open, as the shim's descriptors of one file do.
    pub fn sync_as(&self, all: bool, seen: &std::sync::atomic::AtomicU64) -> Result<()> {
        let _span = tracing::debug_span!("upcache.sync", file = %self.name, all).entered();
        let t = std::time::Instant::now();
        let r = self.sync_untimed(all, seen);
        self.inner.view.latencies().sync.record(t.elapsed());
        r
    }

    fn sync_untimed(&self, all: bool, seen: &std::sync::atomic::AtomicU64) -> Result<()> {
        self.inner.check_service()?;
        self.check_live()?;
        // Acquire (the count): pairs with `mark_dirty`'s.
        let wrote = if self.writable {
            self.write_back()
        } else if self.entry().dirty.load(Ordering::Acquire) == 0 {
            Ok(())
        } else if let Some(fd) = self.writer() {
            self.inner.write_back_slot(self.slot, &fd)
        } else {
            Err(Error::new(
                ErrorKind::Io,
                "dirty pages of this file (written by another process) cannot be written back through a read-only open",
            ))
        };
        let flushed = match self.fd.array() {
            // A length that the write-back did not make good is not logged.
            Some(_) if wrote.is_err() => Ok(()),
            Some(a) => {
                for dev in a.appending(self.cached_len()) {
                    self.with_lock_if_free(|| a.zero_ahead(dev, self.cached_len()));
                }
                a.sync(&|| self.cached_len(), all)
            }
            None => self.fd.sync(&|| self.cached_len(), all),
        };
        // The next sync lists only pages dirtied from now on, if the file is clean.
        self.with_lock_if_free(|| self.entry().empty_dirty_range_if_clean());
        // Even if our write-back failed: its error is this one, reported now, not again.
        let recorded = self.entry().unseen_error(seen);
        wrote?;
        flushed?;
        if let Some(errno) = recorded {
            return Err(Error::io(
                format!("an earlier write-back of {}", self.name),
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        Ok(())
    }

    /// Closes the file, writing its dirty pages back if no other open of it remains in any
    /// process; the write-back's error.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.closed, true) || self.inner.forked() {
            // A forked child's copy: the open is its parent's.
            return Ok(());
        }
        self.inner.ahead.cancel(self.id);
        let inner = &self.inner;
        let view = &inner.view;
        let e = self.entry();
        // The bulk of a last writer's write-back, before the table's lock, which every open and
        // close in every process needs; under it only what was written meanwhile is left.
        // Relaxed: a hint, checked again under the lock.
        if self.writable && e.writers.load(Ordering::Relaxed) == 1 {
            let _ = self.write_back(); // an error shows again below
        }
        // An array file's length lives in its array's log, which a reopen reads: a writer's
        // close makes what it wrote durable and logs the length (`backing.rs`). Each one's,
        // not the last's: two closing at once could each take the other for the last.
        let synced = match self.fd.array() {
            Some(_) if self.writable && !self.bypassed() => self.sync_data(),
            _ => Ok(()),
        };
        let table = &view.header().files_lock;
        table.lock(inner.me, |h| inner.alive(h));
        // Relaxed (all): under the table's lock.
        let last_writer = self.writable && e.writers.load(Ordering::Relaxed) == 1;
        let r = if last_writer { self.write_back() } else { Ok(()) };
        view.holds(inner.me)[self.slot as usize]
            .fetch_sub(1 | (self.writable as u32) << 16, Ordering::Relaxed);
        e.writers.fetch_sub(self.writable as u32, Ordering::Relaxed);
        let last = e.opens.fetch_sub(1, Ordering::Relaxed) == 1;
        if last {
            let os = match &*self.fd {
                Backing::File(h) => h.metadata().ok().map(|md| OsFile::of(&md)),
                // A removed one's entry names no file from now on: its inode may name another
                // file next (a record that no open matches, its pages of an old generation).
                Backing::Array(a) if self.bypassed() => {
                    inner.next_generation(self.slot);
                    // Relaxed: under the table's lock.
                    e.bypass.store(0, Ordering::Relaxed);
                    a.first().metadata().ok().map(|md| OsFile { size: u64::MAX, ..OsFile::of(&md) })
                }
                // Its device 0's file, at its logged length: as the next open will see it.
                Backing::Array(a) => {
                    a.first().metadata().ok().map(|md| OsFile { size: a.logged_len(), ..OsFile::of(&md) })
                }
            };
            if let Some(os) = os {
                os.record(e);
            }
        }
        {
            let mut fds = inner.fds.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = fds.get_mut(&self.slot) {
                entry.opens -= 1;
                if entry.opens == 0 {
                    fds.remove(&self.slot);
                }
            }
        }
        table.unlock(inner.me);
        if last {
            // Its own free frames back to the pool, for every file (the in-process engine's
            // `file_closed`): a file read once would keep them idle.
            inner.drain_spare(self.slot);
        }
        r.and(synced)
    }

    /// The name the file was opened by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `NotFound` for an array file removed while open ([`Self::remove_cached`]).
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.fd.array().is_some() && self.bypassed() {
            return Err(Error::new(ErrorKind::NotFound, format!("{} was removed", self.name)));
        }
        Ok(())
    }

    /// Makes this array file, open and being removed from its array, stop being cached:
    /// every page dropped, dirty ones too (their bytes go with the file), and from then on
    /// every open of it fails with `NotFound` (`Backing::os_file`, `check_live`). Its entry
    /// is forgotten at its last close.
    pub(crate) fn remove_cached(&self) {
        let _locked = FileLock::take(self, true);
        let e = self.entry();
        // Release: see `bypassed`; before the pages go, within the change, so a reader whose
        // copy overlapped it retries and sees it.
        e.bypass.store(1, Ordering::Release);
        self.inner.drop_pages(self.slot, 0, e.page_end(self.page_size()));
        e.empty_dirty_range_if_clean();
        // A truncate left unfinished has nothing left to cut: the file's bytes go with it.
        // Release: as its other stores, for the next taker of the lock.
        e.cut.store(0, Ordering::Release);
    }

    /// Whether it is a file of an array (else an OS file, `SharedCache::open_path`).
    pub fn is_array(&self) -> bool {
        self.fd.array().is_some()
    }

    /// Whether this open may write.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Reads exactly `buf.len()` bytes at `offset`; `UnexpectedEof` if the file ends first.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        crate::file::read_exact(buf, offset, &self.name, |b, at| self.read_at(b, at))
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let n = self.write_at(buf, offset)?;
        if n < buf.len() {
            return Err(Error::new(
                ErrorKind::WriteZero,
                format!("{}: wrote {n} of {} bytes", self.name, buf.len()),
            ));
        }
        Ok(())
    }

    /// The OS file's metadata.
    pub fn os_metadata(&self) -> Result<std::fs::Metadata> {
        self.fd.os_file("OS metadata")?.metadata().map_err(|e| Error::io(format!("stat {}", self.name), e))
    }

    /// Takes in growth of the OS file made without the cache (another program's appends):
    /// past the cached length, the OS file's bytes are what a read sees from now on. The new
    /// length.
    pub fn refresh_len(&self) -> Result<u64> {
        self.inner.check_service()?;
        // Growth past what a key can address is not taken in, nor past a truncate not yet
        // finished (the OS file still holds what it cut). Acquire: pairs with the intent.
        let cut = self.entry().cut.load(Ordering::Acquire);
        if self.bypassed() {
            return bypass::len(&self.fd, &self.name);
        }
        if self.fd.array().is_some() {
            return Ok(self.cached_len()); // the cache's own: nothing grows it outside
        }
        let md = self.os_metadata()?;
        self.look_at(&md)?;
        let os = md.len().min(self.max_len).min(cut.wrapping_sub(1));
        if os <= self.cached_len() {
            return Ok(self.cached_len());
        }
        let locked = FileLock::take(self, false);
        self.take_in_growth(&locked)
    }

    /// [`Self::refresh_len`] with the file's lock held: the length, the OS file's growth
    /// taken in.
    fn take_in_growth(&self, locked: &FileLock<'_>) -> Result<u64> {
        if self.bypassed() {
            return bypass::len(&self.fd, &self.name);
        }
        // Acquire: pairs with the intent's Release store.
        let cut = self.entry().cut.load(Ordering::Acquire);
        let os = self.os_metadata()?.len().min(self.max_len).min(cut.wrapping_sub(1));
        let old = self.cached_len();
        if os <= old {
            return Ok(old);
        }
        // Range writers are done first: the end page is written back and pages past the old
        // length dropped below (an append takes the lock undrained, `take_for_write`).
        locked.quiesce(0, u64::MAX, &|_| false);
        let _changing = locked.changing();
        let view = &self.inner.view;
        let tail = self.page_size().page_of(old);
        // The page the old end cuts: written back (up to the old end) before it is dropped,
        // or its zeros past the old end would later cover the new bytes.
        if self.page_size().in_page(old) != 0 {
            if let Some(f) = self.inner.lock_cached(self.slot, tail) {
                let m = &view.frames()[f as usize];
                let r = if m.flags() & DIRTY != 0 {
                    match self.writer() {
                        Some(fd) => {
                            let _own = self.inner.own_change(self.slot, fd.os());
                            self.inner.write_back_locked(f, &fd)
                        }
                        None => Err(Error::new(ErrorKind::Io, "no descriptor to write the end page back")),
                    }
                } else {
                    Ok(())
                };
                m.unlock(self.inner.me, false);
                if r.is_err() {
                    return Ok(old); // the growth waits for a later look
                }
            }
        }
        self.inner.drop_pages(self.slot, tail, self.page_size().pages_in(old));
        self.entry().raise_len(os);
        Ok(os)
    }

    /// Drops the clean cached pages wholly inside `[offset, offset + len)` (`len` 0: to the
    /// end), as POSIX_FADV_DONTNEED does.
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        let end = if len == 0 { u64::MAX } else { offset.saturating_add(len) };
        let last = (self.page_size().page_of(end)).min(self.page_size().pages_in(self.cached_len()));
        for (f, k) in self.inner.candidates(self.slot, self.page_size().pages_in(offset), last) {
            let m = &self.inner.view.frames()[f as usize];
            if m.flags() & DIRTY == 0 && m.try_lock(self.inner.me) {
                if m.home() == k && m.flags() & DIRTY == 0 {
                    self.inner.free_frame(f);
                } else {
                    m.unlock(self.inner.me, false);
                }
            }
        }
        Ok(())
    }

    /// A descriptor to write back other processes' dirty pages through, for an open that may
    /// only read (a sync, a bypass): this process's writable one if it has one, or one opened
    /// now from ours, if the file's permissions allow, and closed after (briefly: a writable
    /// descriptor kept open would make an exec of the file fail with ETXTBSY).
    pub(crate) fn writer(&self) -> Option<Arc<Backing>> {
        if let Some(fd) = self.inner.writable_fd(self.slot) {
            return Some(fd);
        }
        let held = match &*self.fd {
            Backing::File(held) => held,
            // Its backing files are the cache's, open for writing.
            Backing::Array(_) => return Some(self.fd.clone()),
        };
        let fd = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(format!("/proc/self/fd/{}", held.as_raw_fd()))
            .ok()?;
        Some(Arc::new(Backing::File(HeldFd::new(fd, held.key()))))
    }
}

/// The pages (of `size`) bytes `offset..end` lie in: `first..last`, `last` excluded.
fn pages_of(offset: u64, end: u64, size: PageSize) -> (u64, u64) {
    (size.page_of(offset), size.pages_in(end))
}

/// A file's lock, held; released (and a change ended) on drop, a panic's unwinding included,
/// since a live holder's lock is never taken over.
struct FileLock<'a> {
    inner: &'a Inner,
    e: &'a files::FileEntry,
    changing: std::cell::Cell<bool>,
}

impl<'a> FileLock<'a> {
    /// `file`'s lock, with every range writer done; taken from a dead holder, its change is
    /// ended and a truncate it left half-done is finished.
    fn take(file: &'a SharedFile, changing: bool) -> Self {
        Self::take_if(file, changing, |_| false).expect("never given up")
    }

    /// A reader's `take`, for pages `first..end`: with every range writer of them done; None
    /// if the holder, or such a writer, is stopped (it would hold the reader up until it
    /// resumes).
    fn take_to_read(file: &'a SharedFile, first: u64, end: u64) -> Option<Self> {
        let give_up = |h| file.stalled(h);
        let l = Self::take_some(file, &give_up)?;
        l.quiesce(first, end, &give_up).then_some(l)
    }

    fn take_if(file: &'a SharedFile, changing: bool, give_up: impl Fn(u32) -> bool) -> Option<Self> {
        let l = Self::take_some(file, &give_up)?;
        if !l.quiesce(0, u64::MAX, &give_up) {
            return None;
        }
        if changing {
            l.changing();
        }
        Some(l)
    }

    /// `file`'s lock, range writers maybe still at work (a write that may become one: it
    /// waits for those it overlaps, `claim_range`, or for all, `quiesce`).
    fn take_for_write(file: &'a SharedFile) -> Self {
        Self::take_some(file, &|_| false).expect("never given up")
    }

    fn take_some(file: &'a SharedFile, give_up: &impl Fn(u32) -> bool) -> Option<Self> {
        let (inner, e) = (&*file.inner, file.entry());
        let died =
            matches!(e.lock.lock_unless(inner.me, |h| inner.alive(h), give_up)?, Acquired::OwnerDied(_));
        super::ranges::after_locking();
        if died {
            e.repair_lock();
        }
        let l = FileLock { inner, e, changing: std::cell::Cell::new(false) };
        // Acquire: pairs with the intent's Release store. A writer finishes a failed cut too,
        // before its bytes could land past it; no range writer is at work past the length.
        if died || (file.writable && e.cut.load(Ordering::Acquire) != 0) {
            if !l.quiesce(0, u64::MAX, give_up) {
                return None; // the cut, if any, is finished by the next taker
            }
            l.changing();
            // Failed: left for the next taker; writes past it refuse (`settle_cut_before`).
            let _ = file.finish_cut();
        }
        Some(l)
    }

    /// Waits until no range writer covers a page of `first..end` (taking over a dead one's
    /// slot); false, the lock let go, if `give_up` says so of one (it is stopped).
    fn quiesce(&self, first: u64, end: u64, give_up: &impl Fn(u32) -> bool) -> bool {
        let inner = self.inner;
        for r in &self.e.ranges {
            // After `after_locking`'s fence, every slot whose writer goes on is seen here with
            // its pages (one claimed alone that we miss sees our lock and backs off); the wait
            // below orders what its writer did before us. Acquire (`held`): a slot found free,
            // its last writer's work is seen.
            if !r.lock.held() || !r.covers(first, end) {
                continue;
            }
            if r.lock.lock_unless(inner.me, |h| inner.alive(h), give_up).is_none() {
                return false; // `self` dropped: the lock let go
            }
            r.lock.unlock(inner.me);
        }
        true
    }

    /// Waits until a range slot is free (taking a dead holder's over and freeing it). Its
    /// holders sleep on no shared word, so this polls: spins, then yields, then sleeps 50 us
    /// between looks (a write's copy takes microseconds; one that waits for a device, far
    /// longer).
    fn wait_for_a_slot(&self) {
        let inner = self.inner;
        for round in 0u32.. {
            for r in &self.e.ranges {
                match r.lock.holder() {
                    None => return,
                    Some(h) if h != inner.me && !inner.alive(h) => {
                        if r.lock.lock_unless(inner.me, |h| inner.alive(h), |_| false).is_some() {
                            r.lock.unlock(inner.me);
                        }
                        return;
                    }
                    Some(_) => {}
                }
            }
            match round {
                0..64 => std::hint::spin_loop(),
                64..128 => std::thread::yield_now(),
                _ => std::thread::sleep(std::time::Duration::from_micros(50)),
            }
        }
    }

    /// A range slot for pages `first..end`, held by us, once no range writer overlaps them;
    /// None if every slot is taken (`hold` then waits for one).
    fn claim_range(&self, first: u64, end: u64) -> Option<RangeHeld<'a>> {
        self.quiesce(first, end, &|_| false);
        let slot = super::ranges::claim_locked(&self.e.ranges, self.inner.me, first, end)?;
        self.e.begin_range_change();
        Some(RangeHeld { inner: self.inner, e: self.e, slot })
    }

    /// A range slot for pages `first..end` (bytes up to `end_byte`) taken with no lock
    /// (`ranges::claim_alone`), for a write within the file's length and its reserved space
    /// with nothing else under way: no truncate to finish, no bypass. None, nothing held,
    /// otherwise: the caller takes the file's lock.
    fn claim_alone(file: &'a SharedFile, first: u64, end: u64, end_byte: u64) -> Option<RangeHeld<'a>> {
        let (inner, e) = (&*file.inner, file.entry());
        let slot = super::ranges::claim_alone(&e.ranges, &e.lock, inner.me, first, end)?;
        // Relaxed (all): changed only under the file's lock, which was free after our claim
        // (its Acquire load saw its last holder's changes), and whose next holder waits for us.
        let within = e.cut.load(Ordering::Relaxed) == 0
            && !file.bypassed()
            && end_byte <= e.len.load(Ordering::Relaxed)
            && end_byte <= e.reserved.load(Ordering::Relaxed);
        if !within {
            slot.lock.unlock(inner.me);
            return None;
        }
        e.begin_range_change();
        Some(RangeHeld { inner, e, slot })
    }

    /// What a write of pages `first..end` holds while it copies: if `within` the length and
    /// the range lock is on, a range slot for them, the file's lock let go (with every slot
    /// taken, the first to be freed); else the file's lock and the change begun, every range
    /// writer done (with the range lock, those of the pages from the one holding the end on,
    /// which a write past the length changes: writers of other pages go on beside an
    /// extension, as with F2FS's range lock).
    fn hold(self, first: u64, end: u64, within: bool) -> Option<WriteHold<'a>> {
        let ranges = self.inner.techniques & technique::RANGE_LOCK != 0;
        if within && ranges {
            loop {
                // A writer of the same pages at work: waited for with our lock let go, so
                // that writers of other pages go on meanwhile (one of them may hold a pin the
                // writer waits for); None, for the caller to start again.
                if let Some(r) = self.e.ranges.iter().find(|r| r.lock.held() && r.covers(first, end)) {
                    let inner = self.inner;
                    drop(self);
                    if r.lock.lock_unless(inner.me, |h| inner.alive(h), |_| false).is_some() {
                        r.lock.unlock(inner.me);
                    }
                    return None;
                }
                if let Some(range) = self.claim_range(first, end) {
                    return Some(WriteHold(Held::Range(range)));
                }
                // Not every range writer: one stalled on its device (a page's write-back in a
                // garbage collection) would hold up every writer queued on the file's lock.
                self.wait_for_a_slot();
            }
        }
        // Relaxed: changed only under the file's lock, which we hold.
        let len = self.e.len.load(Ordering::Relaxed);
        let from = if ranges && !within { first.min(self.inner.view.page_size.page_of(len)) } else { 0 };
        self.quiesce(from, u64::MAX, &|_| false);
        self.changing();
        Some(WriteHold(Held::File(self)))
    }

    /// Begins a change (the write sequence odd) that ends when the lock is released.
    fn changing(&self) -> &Self {
        if !self.changing.replace(true) {
            self.e.begin_change();
        }
        self
    }
}

/// What a write holds of its file while it copies (`FileLock::hold`), or a write in place
/// (`pin_mut`) until its guard drops.
pub(super) struct WriteHold<'a>(#[allow(dead_code)] Held<'a>);

/// A page's range slot, or the file's lock.
enum Held<'a> {
    Range(#[allow(dead_code)] RangeHeld<'a>),
    File(#[allow(dead_code)] FileLock<'a>),
}

/// A range slot held through a write; freed (and the change ended) on drop.
struct RangeHeld<'a> {
    inner: &'a Inner,
    e: &'a files::FileEntry,
    slot: &'a files::RangeSlot,
}

impl Drop for RangeHeld<'_> {
    fn drop(&mut self) {
        self.e.end_range_change();
        self.slot.lock.unlock(self.inner.me);
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        if self.changing.get() {
            self.e.end_change();
        }
        self.e.lock.unlock(self.inner.me);
    }
}

impl std::fmt::Debug for SharedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFile").field("slot", &self.slot).field("writable", &self.writable).finish()
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        if let Err(e) = self.close_inner() {
            log::error!("shared cache: closing a file: {e}");
        }
    }
}

#[cfg(all(test, not(loom)))]
pub(super) mod tests {
    use super::*;
    use crate::shared::{SharedCache, SharedConfig};

    thread_local! {
        /// This thread's reads whose pages were read again after a write moved the sequence.
        pub(super) static READ_AGAIN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        /// This thread's writes that took the file's lock.
        pub(super) static LOCKED_WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Raises its flag when dropped: a writer looping until a reader is done stops when the
    /// reader ends, a failed assertion included.
    struct Done<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    fn two_clients() -> (SharedCache, SharedCache) {
        two_clients_of(SharedConfig::default())
    }

    /// A forked child that joins `cache`'s clients as a process of its own, runs `act` with
    /// its id and exits (0, or 1 if it could not join) without running our destructors; its
    /// pid. `act` may only touch atomics in the segment: it must allocate nothing and take no
    /// lock of this process, whose other threads the fork left behind.
    fn forked_client(
        cache: &SharedCache,
        act: impl FnOnce(&crate::shared::layout::View, u32),
    ) -> libc::pid_t {
        // SAFETY: the child only joins the client table (atomics in the shared segment, which
        // it maps as we do), runs `act` under the same rule, and exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let view = &cache.inner.view;
            let code = match view.clients().join() {
                Ok(id) => {
                    act(view, id);
                    0
                }
                Err(_) => 1,
            };
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        child
    }

    /// `forked_client`, waited for: it must have joined and acted, and exited with 0.
    pub(in crate::shared) fn forked_client_done(
        cache: &SharedCache,
        act: impl FnOnce(&crate::shared::layout::View, u32),
    ) {
        let child = forked_client(cache, act);
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is writable.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{status:#x}");
    }

    pub(in crate::shared) fn two_clients_of(config: SharedConfig) -> (SharedCache, SharedCache) {
        let config = SharedConfig { memory: 1 << 20, files: 8, clients: 8, ..config };
        let a = SharedCache::create(&config).unwrap();
        let b = SharedCache::attach(a.segment_fd().try_clone_to_owned().unwrap()).unwrap();
        (a, b)
    }

    /// A write within the length holds a range slot, not the file's lock: while one client
    /// holds pages 0..4 mid-write, another writes and reads other pages of the file; a write of
    /// one of those pages, and one that extends the file, wait for it, then land.
    #[test]
    fn a_range_writer_holds_only_its_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 16 * PAGE]).unwrap();
        let (a, b) = two_clients();
        let fa = a.open_path(&p, true).unwrap();
        let fb = b.open_path(&p, true).unwrap();
        let held = {
            let locked = FileLock::take_for_write(&fa);
            locked.claim_range(0, 4).expect("a free slot")
        };
        fb.write_at(&[1u8; PAGE], 8 * PAGE as u64).unwrap();
        let mut page = vec![0u8; PAGE];
        assert_eq!(fb.read_at(&mut page, 8 * PAGE as u64).unwrap(), PAGE);
        assert_eq!(page, vec![1u8; PAGE], "another part of the file, read beside the range writer");
        std::thread::scope(|s| {
            let over = s.spawn(|| fb.write_at(&[2u8; 100], 3 * PAGE as u64 + 10).unwrap());
            let past = s.spawn(|| fb.write_at(&[3u8; PAGE], 16 * PAGE as u64).unwrap());
            // (Whether they have reached their waits yet or not, they must wait for this.)
            drop(held);
            assert_eq!(over.join().unwrap(), 100);
            assert_eq!(past.join().unwrap(), PAGE);
        });
        let mut want = vec![0u8; 17 * PAGE];
        want[8 * PAGE..9 * PAGE].fill(1);
        want[3 * PAGE + 10..3 * PAGE + 110].fill(2);
        want[16 * PAGE..].fill(3);
        let mut all = vec![0u8; 17 * PAGE];
        assert_eq!(fa.read_at(&mut all, 0).unwrap(), 17 * PAGE);
        assert_eq!(all, want);
        fa.sync_data().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    /// Space the program set aside (`note_space`) is not reserved again by the writes below its
    /// end; a hole punched is, from its start; writes past both reserve as before.
    #[test]
    fn space_set_aside_by_the_program_is_not_reserved_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let (a, _b) = two_clients();
        let f = a.open_path(&p, true).unwrap();
        let reserved = || f.entry().reserved.load(Ordering::Relaxed);
        f.write_at(&[1u8; PAGE], 0).unwrap();
        let first = reserved();
        if first == reserve::UNSUPPORTED {
            return; // a file system without fallocate: nothing reserved either way
        }
        assert_eq!(first, 2 * PAGE as u64, "as far again as the file");
        f.note_space(0, 64 * PAGE as u64, true);
        assert_eq!(reserved(), 64 * PAGE as u64);
        f.write_at(&[2u8; 8 * PAGE], PAGE as u64).unwrap();
        assert_eq!(reserved(), 64 * PAGE as u64, "within what the program set aside");
        f.note_space(100 * PAGE as u64, 200 * PAGE as u64, true);
        assert_eq!(reserved(), 64 * PAGE as u64, "not next to what is reserved: not counted");
        f.note_space(16 * PAGE as u64, 20 * PAGE as u64, false);
        assert_eq!(reserved(), 16 * PAGE as u64, "a hole punched");
        f.write_at(&[3u8; PAGE], 16 * PAGE as u64).unwrap();
        assert_eq!(reserved(), 34 * PAGE as u64, "reserved again, as far again");
    }

    /// A process reaped after it died between page-tree operations leaves no tree to sweep;
    /// one that died in one (its count of them above 0) has every tree marked for a sweep at
    /// its next generation (a pass over every index node each).
    #[test]
    fn only_a_death_in_a_tree_operation_marks_the_trees_for_a_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        for in_op in [false, true] {
            let (a, _b) = two_clients();
            let f = a.open_path(&p, true).unwrap();
            f.write_at(&[1u8; 3 * PAGE], 0).unwrap();
            let leaky = || f.entry().leaky.load(Ordering::Relaxed) != 0;
            assert!(!leaky());
            forked_client_done(&a, |view, id| {
                if in_op {
                    view.counters_of(id).tree_ops.fetch_add(1, Ordering::SeqCst);
                }
            });
            assert_eq!(a.repair_dead(), 1, "the child reaped");
            assert_eq!(leaky(), in_op, "died in a tree operation: {in_op}");
        }
    }

    /// A write within the length and the reserved space takes its range slot alone, with no
    /// lock; one that extends the file, one that meets a slot held by another client, and one
    /// while another client holds the file's lock take the file's lock (the last waits for it),
    /// and every byte lands.
    #[test]
    fn a_write_within_the_length_takes_its_slot_without_the_files_lock() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let (a, b) = two_clients();
        let fa = a.open_path(&p, true).unwrap();
        let fb = b.open_path(&p, true).unwrap();
        let locked = |w: &dyn Fn()| {
            let before = LOCKED_WRITES.with(|c| c.get());
            w();
            LOCKED_WRITES.with(|c| c.get()) - before
        };
        assert_eq!(locked(&|| assert_eq!(fa.write_at(&[1u8; 8 * PAGE], 0).unwrap(), 8 * PAGE)), 1, "extends");
        assert_eq!(
            locked(&|| assert_eq!(fa.write_at(&[2u8; PAGE], 2 * PAGE as u64).unwrap(), PAGE)),
            0,
            "within"
        );
        let held = {
            let l = FileLock::take_for_write(&fb);
            l.claim_range(4, 6).expect("a free slot")
        };
        assert_eq!(
            locked(&|| assert_eq!(fa.write_at(&[3u8; 10], 7 * PAGE as u64).unwrap(), 10)),
            0,
            "beside"
        );
        std::thread::scope(|s| {
            let meets =
                s.spawn(|| locked(&|| assert_eq!(fa.write_at(&[4u8; 10], 5 * PAGE as u64).unwrap(), 10)));
            // It backs off to the file's lock, then sleeps on the slot.
            while !fa.entry().ranges.iter().any(|r| r.lock.contended()) && !meets.is_finished() {
                std::thread::yield_now();
            }
            assert!(!meets.is_finished(), "a write went on over a held slot");
            drop(held);
            assert_eq!(meets.join().unwrap(), 1, "meets a held slot");
        });
        std::thread::scope(|s| {
            let l = FileLock::take_for_write(&fb);
            let waits = s.spawn(|| locked(&|| assert_eq!(fa.write_at(&[5u8; 10], 0).unwrap(), 10)));
            while !fa.entry().lock.contended() && !waits.is_finished() {
                std::thread::yield_now();
            }
            assert!(!waits.is_finished(), "a write went on beside the file lock's holder");
            drop(l);
            assert_eq!(waits.join().unwrap(), 1, "the file's lock held");
        });
        let mut want = vec![1u8; 8 * PAGE];
        want[2 * PAGE..3 * PAGE].fill(2);
        want[7 * PAGE..7 * PAGE + 10].fill(3);
        want[5 * PAGE..5 * PAGE + 10].fill(4);
        want[..10].fill(5);
        let mut all = vec![0u8; 8 * PAGE];
        assert_eq!(fb.read_at(&mut all, 0).unwrap(), 8 * PAGE);
        assert!(all == want, "every byte as written");
        fa.sync_data().unwrap();
        assert!(std::fs::read(&p).unwrap() == want);
    }

    /// A range slot's holder that dies is taken over: its pages are written again by others,
    /// and the slot is free for the next writer.
    #[test]
    fn a_dead_range_writers_slot_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 4 * PAGE]).unwrap();
        let (a, b) = two_clients();
        let fb = b.open_path(&p, true).unwrap();
        // A slot named for a client that does not exist (as one that died holding it).
        let e = fb.entry();
        let dead = a.inner.me + 5;
        e.ranges[0].first.store(0, Ordering::Relaxed);
        e.ranges[0].end.store(4, Ordering::Relaxed);
        assert!(e.ranges[0].lock.try_lock(dead));
        fb.write_at(&[9u8; PAGE], 0).unwrap();
        assert!(!e.ranges_overlap(0, u64::MAX), "taken over, then freed");
        let mut page = vec![0u8; PAGE];
        fb.read_at(&mut page, 0).unwrap();
        assert_eq!(page, vec![9u8; PAGE]);
    }

    /// With every range slot taken, a write within the length takes the first slot freed; it
    /// does not wait for every range writer (one stalled on its device would hold up every
    /// writer queued on the file's lock): another client holds the four slots for pages 8 to
    /// 11, frees one, and the write of page 0 lands while it holds the other three. (Waiting
    /// for all of them, the write would wait for ever: the holder frees the rest only after
    /// it; the loop's deadline turns that into a failure.)
    #[test]
    fn a_write_with_every_range_slot_taken_takes_the_first_slot_freed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 16 * PAGE]).unwrap();
        let (a, b) = two_clients();
        let fa = a.open_path(&p, true).unwrap();
        let e = fa.entry();
        let holder = b.inner.me;
        for (i, r) in e.ranges.iter().enumerate() {
            r.first.store(8 + i as u64, Ordering::Relaxed);
            r.end.store(9 + i as u64, Ordering::Relaxed);
            assert!(r.lock.try_lock(holder));
        }
        std::thread::scope(|s| {
            let writer = s.spawn(|| fa.write_at(&[3u8; PAGE], 0));
            // Once it holds the file's lock, it finds every slot taken and waits.
            while e.lock.holder() != Some(a.inner.me) {
                std::thread::yield_now();
            }
            e.ranges[2].lock.unlock(holder);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            let landed = writer.is_finished();
            for i in [0, 1, 3] {
                e.ranges[i].lock.unlock(holder);
            }
            assert_eq!(writer.join().unwrap().unwrap(), PAGE);
            assert!(landed, "the write waited for every range writer");
        });
        let mut page = vec![0u8; PAGE];
        fa.read_at(&mut page, 0).unwrap();
        assert_eq!(page, vec![3u8; PAGE]);
    }

    /// Calls `read` with client `b`'s open of a file of `pages` pages of 7s (after `first`
    /// with it) at least `times` times and until client `a`, writing the file's first `len`
    /// bytes, a new value each time, all the while, has written 10,000 times (so that they
    /// overlap however the threads are scheduled); the lookups `b` counted meanwhile (hits,
    /// misses).
    fn beside_a_writer(
        pages: usize,
        len: usize,
        times: u64,
        first: impl FnOnce(&SharedFile),
        mut read: impl FnMut(&SharedFile),
    ) -> (u64, u64) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; pages * PAGE]).unwrap();
        let (a, b) = two_clients_of(SharedConfig::default());
        let (w, r) = (a.open_path(&p, true).unwrap(), b.open_path(&p, false).unwrap());
        first(&r);
        let before = b.own_counts();
        let (done, writes) =
            (std::sync::atomic::AtomicBool::new(false), std::sync::atomic::AtomicU64::new(0));
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                let mut i = 0u8;
                while !done.load(Ordering::Relaxed) {
                    i = i.wrapping_add(1);
                    w.write_at(&vec![i; len], 0).unwrap();
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            });
            start.wait();
            let _done = Done(&done);
            let mut n = 0;
            while n < times || writes.load(Ordering::Relaxed) < 10_000 {
                read(&r);
                n += 1;
            }
        });
        let after = b.own_counts();
        (after.0 - before.0, after.1 - before.1)
    }

    /// A read of one page is not read again for a range writer of another page of the file
    /// (its frame's version covers it against the writers of its own page), so each read is
    /// one lookup, one hit: another client writes page 0 all the while, and the reader's hits
    /// are its reads of page 5, exactly. (Before, a read that met a write anywhere in the file
    /// read its page again and counted a second hit.)
    #[test]
    fn a_one_page_read_is_not_read_again_for_a_writer_of_another_page() {
        const READS: u64 = 20_000;
        let mut page = vec![0u8; PAGE];
        let read = |r: &SharedFile, page: &mut [u8]| {
            r.read_at(page, 5 * PAGE as u64).unwrap();
            assert!(page.iter().all(|&x| x == 7));
        };
        let mut other = vec![0u8; PAGE];
        let mut reads = 0;
        let counts = beside_a_writer(
            8,
            PAGE,
            READS,
            |r| read(r, &mut other), // cached before the writer starts
            |r| {
                read(r, &mut page);
                reads += 1;
            },
        );
        assert_eq!(READ_AGAIN.with(|c| c.get()), 0, "reads read again");
        assert_eq!(counts, (reads, 0), "(hits, misses) of the reader");
    }

    /// A read of several pages is still read again for a range writer meanwhile: another
    /// client writes pages 0 and 1 whole, one value each time, all the while, and no read of
    /// both sees two values (comparing only the sequence's low half for it fails this); each
    /// page read counts as one lookup.
    #[test]
    fn a_read_across_pages_never_sees_half_of_a_write_across_them() {
        let mut both = vec![0u8; 2 * PAGE];
        let mut reads = 0;
        let counts = beside_a_writer(
            4,
            2 * PAGE,
            50_000,
            |r| {
                let mut cold = vec![0u8; 2 * PAGE];
                r.read_at(&mut cold, 0).unwrap(); // cached before the writer starts
            },
            |r| {
                r.read_at(&mut both, 0).unwrap();
                assert!(both.iter().all(|&x| x == both[0]), "half of a write");
                reads += 1;
            },
        );
        assert!(READ_AGAIN.with(|c| c.get()) > 0, "reads read again: the count below proves something");
        // Each page's lookup counted once however often its read was read again.
        assert_eq!(counts, (2 * reads, 0), "(hits, misses) of the reader");
    }

    /// With `SharedConfig::range_lock` off a write within the length holds the file's lock,
    /// as an extending write does (the sequence moves by 2: one change), and with it on a
    /// range slot (its high half by 2: the slot's start and end), leaving the file's lock free
    /// meanwhile.
    #[test]
    fn the_range_lock_switch_decides_what_a_write_within_the_length_holds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 4 * PAGE]).unwrap();
        for (range_lock, moved) in [(true, 2 * files::RANGE_STEP), (false, 2)] {
            let (a, _b) = two_clients_of(SharedConfig { range_lock, ..SharedConfig::default() });
            let f = a.open_path(&p, true).unwrap();
            let seq = || f.entry().seq.load(Ordering::SeqCst);
            let before = seq();
            f.write_at(&[5u8; 100], PAGE as u64).unwrap();
            assert_eq!(seq() - before, moved, "range lock {range_lock}");
        }
    }

    /// A process stopped (SIGSTOP) while it holds the index partition's lock of a page no frame
    /// holds stalls no reader of that page: the reader gives up on the lock after one poll and
    /// reads the page from the OS file, uncached. (Before, every miss in that partition waited
    /// until the process resumed.) The holder is a forked child that joins the cache as a
    /// client, takes the lock and stops itself.
    #[test]
    fn a_reader_reads_around_a_stopped_holder_of_its_pages_index_partition() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..8 * PAGE).map(|i| (i % 241) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        // The hash index's partition locks (the tree index has none to hold).
        let (a, _b) = two_clients_of(SharedConfig {
            index: crate::index::IndexKind::Sharded,
            ..SharedConfig::default()
        });
        let f = a.open_path(&p, false).unwrap();
        let k = a.inner.key(f.slot, 5);
        let child = forked_client(&a, |view, id| {
            std::mem::forget(view.map().lock(k, id, &|_| true));
            // SAFETY: raise has no memory arguments.
            unsafe { libc::raise(libc::SIGSTOP) };
        });
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is writable.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, libc::WUNTRACED) }, child);
        assert!(libc::WIFSTOPPED(status), "the child stopped holding the lock: {status:#x}");
        assert!(a.inner.view.map().holder(k).is_some());
        let (done, got) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut page = vec![0u8; PAGE];
                let n = f.read_at(&mut page, 5 * PAGE as u64).unwrap();
                done.send((n, page)).unwrap();
            });
            let read = got.recv_timeout(std::time::Duration::from_secs(20));
            // SAFETY: kill and waitpid on our own child.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &mut status, 0);
            }
            let (n, page) = read.expect("the reader waited for the stopped holder");
            assert_eq!((n, &page[..]), (PAGE, &data[5 * PAGE..6 * PAGE]));
        });
    }
}
