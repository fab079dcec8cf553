//! Plain-file mode: an existing OS file cached by path (issue 7), for programs that keep
//! their own directories (the LD_PRELOAD shim). One device, the OS file itself, with page
//! `p` at byte `p * page_size`; no catalog entry and no metadata-log record: the OS file's
//! size is the file's length, made exact at each sync (write-back writes whole pages, so
//! between syncs the OS file may end up to a page past the length, in zeros).
//!
//! One cached copy per OS file: opens by any path of the same (device, inode) share it. The
//! cache assumes no other process writes the file meanwhile (as any user-space cache must).

use super::{Cache, CacheInner};
use crate::error::{Error, ErrorKind, Result};
use crate::file::{File, FileInner, Placement};
use crate::io::device;
use crate::io::layout::{LayoutKind, StripeLayout};
use crate::sync::{self, Arc, Ordering};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Plain files' ids start here, past any id the catalog hands out.
pub(crate) const PLAIN_ID: u64 = 1 << 63;

impl Cache {
    /// Caches the OS file at `path` (created, empty, with mode 0666 less the umask, if
    /// `create` and it does not exist). The returned handle reads, writes, syncs and resizes
    /// the OS file through the cache; other handles of the same file share its pages.
    /// O_DIRECT is used where the file system allows it, else the buffered fallback if the
    /// config allows buffered backing files.
    pub fn open_path(&self, path: impl AsRef<Path>, create: bool) -> Result<File> {
        let path = path.as_ref();
        let inner = &self.inner;
        let id = inner.next_plain_id.fetch_add(1, Ordering::Relaxed); // Relaxed: a unique id
        let backing = device::open_plain(path, id, create, inner.config.allow_buffered)?;
        let meta = backing.file().metadata().map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        if !meta.is_file() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        let key = (meta.dev(), meta.ino());
        let mut plain = sync::lock(&inner.plain_files);
        if let Some(f) = plain.get(&key) {
            return Ok(File::new(f.clone(), inner.clone())); // the new descriptor closes here
        }
        let ps = inner.config.page_size;
        let layout = StripeLayout::new(ps, ps as u64, 1, LayoutKind::Stripe);
        let file = Arc::new(FileInner::new(
            id,
            path.display().to_string(),
            meta.len(),
            inner.new_index(id),
            vec![backing],
            Placement { layout, plain: true },
            inner.config.streams,
        ));
        // Registered before its first page is cached, so that eviction can find it.
        sync::write(&inner.files).insert(id, file.clone());
        plain.insert(key, file.clone());
        Ok(File::new(file, inner.clone()))
    }

    /// Stops caching the OS file at `path`: writes its dirty pages back, makes the OS file's
    /// size its length, drops its pages and closes it (no fsync: as close(2)). Its handles then
    /// fail with `NotFound`. On a write-back error nothing is dropped and the error returned.
    pub fn close_path(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let inner = &self.inner;
        let mut plain = sync::lock(&inner.plain_files);
        let key = (meta.dev(), meta.ino());
        let Some(file) = plain.get(&key).cloned() else {
            return Err(Error::new(ErrorKind::NotFound, format!("{} is not cached", path.display())));
        };
        let _all = file.range.write(0, u64::MAX);
        inner.flush_file(&file)?;
        if let Some(e) = file.take_write_error() {
            return Err(e);
        }
        inner.fit_plain_len(&file, true)?;
        // Release: handles that see it fail with NotFound (`check_live`).
        file.removed.store(true, Ordering::Release);
        inner.forget_file(&file);
        plain.remove(&key);
        Ok(())
    }
}

impl CacheInner {
    /// `sync_data` (`all`: `sync_all`) of a plain file: dirty pages written back, the OS
    /// file's size made the length, then fdatasync (fsync).
    pub(crate) fn sync_plain(&self, file: &FileInner, all: bool) -> Result<()> {
        self.flush_file(file)?;
        if let Some(e) = file.take_write_error() {
            return Err(e);
        }
        {
            // From the page holding the end on, exclusive: no writer extends the file while
            // its OS size is cut back to the length. Only tried: this thread may hold a pin of
            // that page; then the size is only extended, never cut (a page of zeros may stay
            // past the end until a later sync).
            let ps = self.config.page_size as u64;
            let tail = file.range.try_write(file.len.load(Ordering::Acquire) / ps * ps, u64::MAX);
            self.fit_plain_len(file, tail.is_some())?;
        }
        let b = &file.backing[0];
        let synced = if all { b.file().sync_all() } else { self.engine.sync_data(b) };
        synced.map_err(|e| Error::io(format!("sync {}", file.name), e))
    }

    /// Makes the OS file at least as long as the file (fallocate, which never shrinks, so a
    /// write-back racing it keeps its bytes); with `exact`, also cuts it back to the length.
    /// `exact` needs the file's range from the page holding the end on held exclusive: the
    /// length is then stable and nothing past it is written back.
    pub(crate) fn fit_plain_len(&self, file: &FileInner, exact: bool) -> Result<()> {
        use std::os::fd::AsRawFd;
        // Acquire: see the extension of every write that ended before.
        let len = file.len.load(Ordering::Acquire);
        let b = &file.backing[0];
        let have = b.file().metadata().map_err(|e| Error::io(format!("stat {}", file.name), e))?.len();
        if have < len {
            // SAFETY: fallocate on our open descriptor; mode 0 allocates and extends only.
            let r = unsafe {
                libc::fallocate(b.as_raw_fd(), 0, have as libc::off_t, (len - have) as libc::off_t)
            };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(Error::io(format!("extend {}", file.name), e));
                }
                // No fallocate here: extend by truncation (only past what is there now).
                device::truncate(b, len)?;
            }
        } else if exact && have > len {
            device::truncate(b, len)?;
        }
        Ok(())
    }
}
