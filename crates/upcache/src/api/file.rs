//! The public file handle, modelled on `std::os::unix::fs::FileExt`: an open of the engine's
//! ([`SharedFile`]), shared by its clones.
//!
//! # Locking
//! A write takes its pages (the range lock, F2FS's) and a read copies them lock-free,
//! validated against the file's write sequence, so a read sees all or none of an overlapping
//! write and disjoint writes run in parallel; `set_len` holds the whole file. `pin` takes no
//! lock on a hit: its guard is an entry in the process's pin ledger, which writers, shrinks
//! and evictions wait for (`shared/pin.rs`).

use std::fmt;

use super::pin::{PageMut, PageRef};
use crate::error::Result;
use crate::shared::SharedFile;
use crate::sync::Arc;

/// An open file of a [`crate::Cache`]. Cheap to clone; `Send + Sync`.
///
/// Each open (`create_file`, `open_file`, `open_path`, [`File::reopen`]) is one open
/// description, as the kernel's `open(2)`: a write-back error is reported once to each
/// description whose sync (or write-back) comes after it; clones share their description.
#[derive(Clone)]
pub struct File {
    file: Arc<SharedFile>,
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File").field("name", &self.file.name()).finish()
    }
}

impl File {
    pub(crate) fn new(file: SharedFile) -> Self {
        File { file: Arc::new(file) }
    }

    /// The engine's open behind this handle.
    pub fn engine_file(&self) -> &Arc<SharedFile> {
        &self.file
    }

    /// A new open description of the same file (as another `open(2)` of it): it reports
    /// write-back errors on its own, from now on (and one that no description has reported
    /// yet).
    pub fn reopen(&self) -> Result<File> {
        Ok(File::new(self.file.reopen()?))
    }

    /// The file's name.
    pub fn name(&self) -> &str {
        self.file.name()
    }

    /// Current length in bytes.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads up to `buf.len()` bytes at `offset`; like pread, returns fewer at end of file and
    /// 0 at or past it.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(b"0123456789", 0)?;
    /// let mut buf = [0; 8];
    /// assert_eq!(f.read_at(&mut buf, 4)?, 6); // short at the end of the file
    /// assert_eq!(&buf[..6], b"456789");
    /// assert_eq!(f.read_at(&mut buf, 100)?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.file.read_at(buf, offset)
    }

    /// Pins the page holding byte `offset` and borrows its bytes in place (zero-copy; see
    /// [`PageRef`]): from the page's first byte to its last byte inside the file. Loads the
    /// page on a miss. Fails with `InvalidInput` at or past the end of file.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(b"hello", 4096 + 10)?;
    /// let page = f.pin(4096 + 12)?; // the page holding byte 4108, in place
    /// assert_eq!(page.offset(), 4096);
    /// assert_eq!(&page[10..15], b"hello");
    /// drop(page); // before this thread writes the range: a writer waits for its readers
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin(&self, offset: u64) -> Result<PageRef<'_>> {
        self.file.pin(offset)
    }

    /// Takes the page holding byte `offset` for writing in place (see [`PageMut`]): its bytes
    /// inside the file, marked dirty when the guard drops. Loads the page on a miss. Fails
    /// with `InvalidInput` at or past the end of file (extend it with `set_len` first).
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.set_len(8192)?;
    /// f.pin_mut(4096)?[0..3].copy_from_slice(b"abc"); // dirty when the guard drops
    /// let mut buf = [0; 3];
    /// f.read_exact_at(&mut buf, 4096)?;
    /// assert_eq!(&buf, b"abc");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin_mut(&self, offset: u64) -> Result<PageMut<'_>> {
        self.file.pin_mut(offset)
    }

    /// Writes `buf` at `offset`, extending the file if needed. Returns `buf.len()`, or fewer
    /// bytes if an error stopped it after some pages were written (like pwrite), or if the
    /// file would pass the largest file its file system allows: up to that size, as the
    /// kernel does; `FileTooLarge` for a write that starts there or past it.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.file.write_at(buf, offset)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file.write_all_at(buf, offset)
    }

    /// Shrinks or extends the file. Bytes past the old end read as zeros after an extension;
    /// a shrink drops cached pages past the new end, dirty or not.
    ///
    /// ```
    /// # let tmp = tempfile::tempdir()?;
    /// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
    /// # let f = cache.create_file("f")?;
    /// f.write_all_at(&[9; 100], 0)?;
    /// f.set_len(10)?;
    /// f.set_len(20)?; // the bytes past 10 read as zeros now
    /// let mut buf = [1; 20];
    /// f.read_exact_at(&mut buf, 0)?;
    /// assert_eq!((buf[9], buf[10]), (9, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_len(&self, size: u64) -> Result<()> {
        self.file.set_len(size)
    }

    /// Writes back the file's dirty pages and makes them durable: an fdatasync of each backing
    /// file, or, for an array file, the metadata log's commit of its length. Returns once
    /// every page dirtied before the call is on its device; reports, once, any earlier
    /// write-back error.
    pub fn sync_data(&self) -> Result<()> {
        self.file.sync_data()
    }

    /// Drops the clean cached pages wholly inside `[offset, offset + len)` (`len` 0: to the
    /// end of the file); dirty pages stay. The next reads of them load them from the devices:
    /// what POSIX_FADV_DONTNEED does to the kernel's page cache.
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        self.file.evict(offset, len)
    }

    /// The OS file's metadata, for a plain file ([`crate::Cache::open_path`]): its size is
    /// the length only after a write-back or sync; for a file of the array, its first
    /// device's backing file's.
    pub fn os_metadata(&self) -> Result<std::fs::Metadata> {
        self.file.os_metadata()
    }

    /// For a plain file ([`crate::Cache::open_path`]) that another process may be appending
    /// to: if the OS file is now larger than anything this cache wrote or truncated it to,
    /// the file's length becomes the OS file's size, and the bytes past the old length read
    /// what the OS file holds there (as `tail -f` expects of the kernel's cache). Returns the
    /// length. A file of the array has no other writer: its length as it is.
    pub fn refresh_len(&self) -> Result<u64> {
        self.file.refresh_len()
    }

    /// Writes back the file's dirty pages without making them durable (no device sync), and
    /// reports, once, any earlier write-back error. For a plain file, the OS file's size is
    /// made the length too: other readers of the OS file then see what the cache holds, as
    /// they would after close(2).
    pub fn write_back(&self) -> Result<()> {
        // What another program did to a plain file (an append) is taken in first, so the
        // length afterwards is the OS file's, as fstat would say.
        self.file.look_outside()?;
        self.file.write_back()
    }

    /// Like `sync_data`, and also makes every namespace change logged so far durable (a
    /// create or remove of another file included), even if this file's length is unchanged.
    pub fn sync_all(&self) -> Result<()> {
        self.file.sync_all()
    }
}
