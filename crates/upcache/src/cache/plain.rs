//! Plain-file mode: an existing OS file cached by path (issue 7), for programs that keep
//! their own directories (the LD_PRELOAD shim). One device, the OS file itself, with page
//! `p` at byte `p * page_size`; no catalog entry and no metadata-log record: the OS file's
//! size is the file's length, made exact at each sync (write-back of the page holding the
//! end stops at the length, rounded up to the direct I/O unit for O_DIRECT: between syncs the
//! OS file may end that far past the length, in zeros).
//!
//! One cached copy per OS file: opens by any path of the same (device, inode) share it.
//! Another process's writes inside the cached length are not seen (as in any user-space
//! cache); its growth is, and is never cut (`os_size`, `take_in_growth_locked`), nor a shrink
//! of its undone (`os_len_known`); but a shrink is not taken in either.
//!
//! A plain file gets an id from `PLAIN_ID` up and sits in `files`, so eviction and write-back
//! find it as any other, and in `plain_files` by (device, inode); `len_to_sync` skips it. Its
//! `FileInner` carries its own layout, a 1-device stripe (the identity), which loads, runs and
//! write-back use instead of the array's. Its length is bounded by its file system's largest
//! file (`device::largest_file`, the file's `max_len`).
//!
//! Closing (`close_plain`, `close_path`; `discard_plain` without the write-back) marks the file
//! closing under its whole range: new operations fail `NotFound` and opens of it wait. Then it
//! writes back, fits the OS size to the length, drops the pages and forgets the file; a
//! write-back error undoes the mark and keeps everything. No map lock is held across that
//! I/O, and an open reads the OS size under the map lock, so it sees what a close left.

use super::{CacheInner, SyncKind};
use crate::error::{Error, ErrorKind, Result};
use crate::file::{FileInner, Placement};
use crate::frame::state::VALID;
use crate::frame::{FrameId, PageKey};
use crate::io::device;
use crate::io::layout::{LayoutKind, StripeLayout};
use crate::sync::{self, Arc, AtomicU64, Ordering};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a length check does to the OS file's size when it is not the file's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OsSize {
    /// Makes it the length (a close or a sync).
    Fit,
    /// Leaves it (a reader taking in growth).
    Leave,
}

/// Plain files' ids start here, past any id the catalog hands out.
pub(crate) const PLAIN_ID: u64 = 1 << 63;

impl CacheInner {
    /// See [`crate::Cache::open_path_as`].
    pub(crate) fn open_plain(&self, path: &Path, create: bool, name: &str) -> Result<Arc<FileInner>> {
        let inner = self;
        let id = inner.next_plain_id.fetch_add(1, Ordering::Relaxed); // Relaxed: a unique id
        let c = &inner.config;
        let backing = device::open_plain(path, id, create, c.plain_direct, c.allow_buffered)?;
        let meta = backing.file().metadata().map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        if !meta.is_file() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        let key = (meta.dev(), meta.ino());
        let mut plain = loop {
            let plain = sync::lock(&inner.plain_files);
            match plain.get(&key) {
                // Being closed: wait until its pages are written back and it is gone, so this
                // open reads the OS file as the close leaves it.
                // Acquire: pairs with the Release that marks it closing.
                Some(f) if f.removed.load(Ordering::Acquire) => {
                    drop(plain);
                    crate::sync::yield_now();
                }
                Some(f) => return Ok(f.clone()), // our descriptor closes
                None => break plain,
            }
        };
        // The size now, under the lock: a close that just finished may have changed it.
        let meta = backing.file().metadata().map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let ps = inner.config.page_size;
        let layout = StripeLayout::new(ps, ps as u64, 1, LayoutKind::Stripe);
        let max_len =
            device::largest_file(backing.file(), crate::file::MAX_FILE_SIZE, ps as u64, meta.blksize());
        let mut file = FileInner::new(
            id,
            name.to_string(),
            meta.len(),
            inner.new_index(id),
            vec![backing],
            Placement { layout, plain: true },
            inner.writeback.tracks_streams(),
        );
        file.max_len = max_len;
        file.tail_unit = device::write_unit(&file.backing[0], ps as u64);
        let file = Arc::new(file);
        // Registered before its first page is cached, so that eviction can find it.
        sync::write(&inner.files).insert(id, file.clone());
        plain.insert(key, file.clone());
        Ok(file)
    }

    /// See [`crate::Cache::close_path`].
    pub(crate) fn close_path(&self, path: &Path) -> Result<()> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let file = sync::lock(&self.plain_files).get(&(meta.dev(), meta.ino())).cloned();
        match file {
            Some(f) => self.close_plain(&f, true, &AtomicU64::new(f.errors_sample())),
            None => Err(Error::new(ErrorKind::NotFound, format!("{} is not cached", path.display()))),
        }
    }
}

impl CacheInner {
    /// See [`crate::Cache::close_plain`] (`write_back`) and [`crate::Cache::discard_plain`]. No lock but the
    /// file's range lock is held across the I/O.
    pub(crate) fn close_plain(
        &self,
        file: &Arc<FileInner>,
        write_back: bool,
        seen: &AtomicU64,
    ) -> Result<()> {
        let all = file.range.write(0, u64::MAX);
        // Acquire: see the Release below of a close that ran first.
        if file.removed.swap(true, Ordering::AcqRel) {
            return Err(Error::new(ErrorKind::NotFound, format!("{} was closed", file.name)));
        }
        // Marked closing (above): new operations fail, opens wait. Undone on failure.
        let flushed = match write_back {
            true => self.flush_file_as(file, seen).and_then(|()| self.fit_plain_len(file)),
            false => Ok(()),
        };
        if let Err(e) = flushed {
            // Release: the file is live again.
            file.removed.store(false, Ordering::Release);
            return Err(e);
        }
        self.forget_file(file);
        drop(all);
        let mut plain = sync::lock(&self.plain_files);
        plain.retain(|_, f| !Arc::ptr_eq(f, file));
        Ok(())
    }

    /// `sync_data` (`SyncKind::All`: `sync_all`) of a plain file: dirty pages written back,
    /// the OS file's size made the length, then fdatasync (fsync).
    pub(crate) fn sync_plain(&self, file: &FileInner, kind: SyncKind, seen: &AtomicU64) -> Result<()> {
        self.write_back_plain(file, seen)?;
        let b = &file.backing[0];
        // Through the file's flush group (`io/flush_group.rs`), and recorded for its other
        // open descriptions, as for an array's backing files.
        let synced = b.flushes().sync(|| {
            if kind == SyncKind::All {
                b.file().sync_all()
            } else {
                self.engine.sync_data(b)
            }
        });
        synced.map_err(|e| file.failed_flush(Error::io(format!("sync {}", file.name), e), seen))
    }

    /// Dirty pages written back and the OS file's size made the length, without a sync: what
    /// another reader of the OS file needs to see the file as the cache does.
    pub(crate) fn write_back_plain(&self, file: &FileInner, seen: &AtomicU64) -> Result<()> {
        self.flush_file_as(file, seen)?;
        {
            // From the page holding the end on, exclusive: no writer extends or shrinks the
            // file while its OS size is set. Only tried: this thread may hold a pin of that
            // page, or a writer may be appending; then the size is left for a later sync (the
            // written pages are on the OS file already; only an extension by `set_len`, which
            // reads as zeros, or a page of zeros past the end, can be off until then).
            let ps = self.config.page_size as u64;
            let start = file.len.load(Ordering::Acquire) / ps * ps;
            if let Some(_tail) = file.range.try_write(start, u64::MAX) {
                // A shrink between the read and the lock leaves pages below `start` unlocked.
                if file.len.load(Ordering::Acquire) >= start {
                    self.fit_plain_len(file)?;
                }
            }
        }
        Ok(())
    }

    /// Sets the OS file's size to the file's length (ftruncate: an extension stays sparse),
    /// unless someone else grew the OS file: then its length becomes the OS file's size
    /// (`take_in_growth_locked`). The caller holds the file's range from the page holding the
    /// end on exclusive: the length is then stable, and write-back past it can only add zeros,
    /// which this cuts.
    pub(crate) fn fit_plain_len(&self, file: &FileInner) -> Result<()> {
        self.take_in_growth_locked(file, OsSize::Fit).map(|_| ())
    }

    /// For a plain file whose OS file is larger than this cache made it (another process
    /// appended): the file's length becomes the OS file's size, and the bytes past the old
    /// length are read from it. See [`crate::File::refresh_len`]. Returns the length.
    pub(crate) fn take_in_plain_growth(&self, file: &FileInner) -> Result<u64> {
        let ps = self.config.page_size as u64;
        // Without a lock first: no growth but ours (a write-back's last page, say).
        let have = os_len(file)?;
        // SeqCst: as in `fit_or_grow`.
        if have <= file.os_size.load(Ordering::SeqCst) || have <= file.len.load(Ordering::Acquire) {
            return Ok(file.len.load(Ordering::Acquire));
        }
        loop {
            let start = file.len.load(Ordering::Acquire) / ps * ps;
            let _tail = file.range.write(start, u64::MAX);
            file.check_live()?;
            // A shrink between the read and the lock leaves pages below `start` unlocked.
            if file.len.load(Ordering::Acquire) >= start {
                return self.take_in_growth_locked(file, OsSize::Leave);
            }
        }
    }

    /// The OS file's size against the file's length, with the range from the page holding the
    /// end on held exclusive by the caller (no writer changes the length) and that page's
    /// frame, if cached, locked here (no write-back of it is in flight, so the OS size is not
    /// about to grow by our own zeros). Larger than `os_size`: grown by someone else, taken in.
    /// Otherwise, with `OsSize::Fit`, the OS size is made the length. Returns the length.
    fn take_in_growth_locked(&self, file: &FileInner, os: OsSize) -> Result<u64> {
        let ps = self.config.page_size as u64;
        // Acquire: see the extension of every write that ended before.
        let len = file.len.load(Ordering::Acquire);
        let (tail, in_tail) = (len / ps, (len % ps) as usize);
        // Lock-free readers retry across a change of the length and of the pages past it.
        let _change = file.writes.begin();
        let key = PageKey { file: file.id, page: tail };
        let frame = file.index.peek(tail).filter(|&id| self.frames.pin_if_holds(id, key)).filter(|&id| {
            // Waits out a write-back in flight. A load that failed meanwhile leaves the frame
            // not VALID: not the page.
            self.frames.lock_pinned(id);
            let valid = self.frames.state(id).load() & VALID != 0;
            if !valid {
                self.frames.unlock(id, 0, 0);
                self.frames.state(id).unpin();
            }
            valid
        });
        let fitted = self.fit_or_grow(file, len, frame.map(|id| (id, in_tail)), os);
        if let Some(id) = frame {
            self.frames.unlock(id, 0, 0);
            self.frames.state(id).unpin();
        }
        if fitted.as_ref().is_ok_and(|&now| now > len) {
            // No page past the one that held the end is dirty; clean ones would read as
            // zeros. Dropped holding no frame (this waits on theirs), and before readers of
            // them, which wait for the caller's range, can copy from them.
            self.drop_clean_pages(file, tail + 1, u64::MAX);
        }
        fitted
    }

    fn fit_or_grow(
        &self,
        file: &FileInner,
        len: u64,
        tail: Option<(FrameId, usize)>,
        os: OsSize,
    ) -> Result<u64> {
        let b = &file.backing[0];
        let have = os_len(file)?;
        // SeqCst: write-backs raise it before they write (cache/writeback/run.rs).
        let ours = file.os_size.load(Ordering::SeqCst);
        if have > ours && have > len {
            let ps = self.config.page_size as u64;
            if let Some((id, in_tail)) = tail.filter(|&(_, at)| at > 0) {
                // The page holding the old end, cached (clean or dirty): its bytes past that
                // end are zeros of ours; the OS file's are the ones to read there.
                let mut raw = vec![0u8; 2 * ps as usize];
                let at = raw.as_ptr().align_offset(ps as usize);
                let page = &mut raw[at..at + ps as usize]; // aligned, for O_DIRECT
                let start = len / ps * ps;
                // One read of the whole page (O_DIRECT needs it aligned); short at the end of
                // the file, and never past the size taken in.
                let n = read_page(b.file(), page, start)
                    .map_err(|e| Error::io(format!("read the end of {}", file.name), e))?
                    .min((have - start) as usize);
                if n > in_tail {
                    // SAFETY: the frame is LOCKED by us (no other writer, no write-back), and
                    // lock-free readers retry on the caller's change; in bounds of a page.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            page[in_tail..n].as_ptr(),
                            self.frames.ptr(id).add(in_tail),
                            n - in_tail,
                        )
                    };
                }
            }
            file.os_size.fetch_max(have, Ordering::SeqCst);
            // Relaxed: under the range lock.
            file.os_len_known.store(have, Ordering::Relaxed);
            // Release: as every length change (readers of the range wait for the caller's lock).
            file.len.store(have, Ordering::Release);
            return Ok(have);
        }
        // Past the length and ours: zeros of a write-back's last page, to cut. Short of it:
        // this cache's extension to make, unless someone else shrank the OS file, which is
        // theirs to have done (a `copytruncate` of a log this process only reads).
        let known = file.os_len_known.load(Ordering::Relaxed); // Relaxed: under the range lock
        if os == OsSize::Fit && (have > len || (have < len && len > known)) {
            device::truncate(b, len)?;
            // SeqCst: as above; no write-back of the tail page is in flight.
            file.os_size.store(len, Ordering::SeqCst);
            file.os_len_known.store(len, Ordering::Relaxed);
        }
        Ok(len)
    }
}

/// The OS file's size.
fn os_len(file: &FileInner) -> Result<u64> {
    let meta = file.backing[0].file().metadata();
    Ok(meta.map_err(|e| Error::io(format!("stat {}", file.name), e))?.len())
}

/// One read of `buf` at `at`, retried if interrupted; the bytes read (fewer at the end).
fn read_page(f: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match f.read_at(buf, at) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}
