//! Syncs without file-system metadata (seed 001 §3.4, in user space): a backing file that is
//! being appended to (its data grew at each of its last two syncs) is extended ahead with
//! written zeros, so that later write-back lands in blocks that are already allocated,
//! written and inside the file's size. Its `fdatasync`
//! then has no metadata to commit: all a sync needs is a device cache flush, which the
//! metadata log's own commit gives when the log is on the same device. An appending
//! write + `sync_data` becomes one data write, one log record write and one flush, where the
//! kernel's `fdatasync` commits a journal transaction (the new size and block allocation).
//!
//! Each backing file counts the writes that may have changed its metadata (`changes`: any
//! write-back outside the window of zeros) and the count a completed `fdatasync` covered
//! (`covered`). A sync may skip `fdatasync` for a backing file only when the two agree (and
//! the log's flush follows its writes on the same device; `cache/mod.rs::sync_file`).
//!
//! The zeros are written past the file's length, under the file's range lock from its length
//! on (taken with `try_write`: a sync never waits for it, so a thread holding a pin of the
//! last page can sync), so no write-back can be writing there (pages past the length are never
//! dirty) and the zero invariant holds (bytes past the length read as zero). A shrink forgets
//! the window. The window is published when the zeros are written, before the `fdatasync`
//! that makes the new size durable: the extension is itself counted as a change, so a sync
//! skips `fdatasync` only once one has covered it.
//!
//! Only O_DIRECT backing files on the log's ext4 or XFS file system may skip their
//! `fdatasync` (`device::fdatasync_flushes_device`), so only they are zero-filled ahead; the
//! change counts are kept for all.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;

use crate::sync::{self, AtomicU64, Mutex, Ordering};

/// How far ahead a backing file is zero-filled at a time.
pub const EXTEND: u64 = 8 << 20;

/// A page of zeros, aligned for O_DIRECT.
#[repr(C, align(4096))]
struct ZeroPage([u8; 4096]);
static ZEROS: ZeroPage = ZeroPage([0; 4096]);

/// One backing file's window of written zeros and its metadata-change counts.
#[derive(Debug, Default)]
pub struct ZeroWindow {
    window: Mutex<Window>,
    changes: AtomicU64,
    covered: AtomicU64,
}

#[derive(Debug, Default)]
struct Window {
    /// `from..to`: written zeros (or data written over them), inside the file's size. Empty
    /// when `from == to`.
    from: u64,
    to: u64,
    /// Where the data ended at the last sync, and whether it had grown at the one before.
    last_end: u64,
    grew_before: bool,
}

impl ZeroWindow {
    /// Write-back wrote (or failed to write) bytes `start..end` of the backing file: counts a
    /// possible metadata change unless they lie inside the window. Called once the write has
    /// ended, so a count read by a sync covers only writes that ended before it.
    pub fn after_write(&self, start: u64, end: u64) {
        let inside = {
            let w = sync::lock(&self.window);
            w.from <= start && end <= w.to
        };
        if !inside {
            // SeqCst: a sync that reads the count after this write completed sees it.
            self.changes.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The count of possible metadata changes, if an `fdatasync` has not covered it yet.
    pub fn pending(&self) -> Option<u64> {
        // SeqCst: see after_write.
        let c = self.changes.load(Ordering::SeqCst);
        (c > self.covered.load(Ordering::SeqCst)).then_some(c)
    }

    /// An `fdatasync` that started after `changes` was read as `count` completed.
    pub fn covered(&self, count: u64) {
        self.covered.fetch_max(count, Ordering::SeqCst);
    }

    /// The backing file was truncated or its size set: the window is gone.
    pub fn forget(&self) {
        let mut w = sync::lock(&self.window);
        (w.from, w.to) = (0, 0);
        drop(w);
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// A sync found the file's data on this device ending at `data_end` (bytes). Whether to
    /// extend the window: the data grew at this sync and the one before (the file is being
    /// appended to, not written once), and it ends within half an extension of the window's
    /// end or past it.
    pub fn note_sync(&self, data_end: u64) -> bool {
        let mut w = sync::lock(&self.window);
        let grew = data_end > w.last_end;
        let want = grew && w.grew_before && data_end + EXTEND / 2 > w.to;
        (w.last_end, w.grew_before) = (data_end, grew);
        want
    }

    /// Whether data ending at `data_end` is within half an extension of the window's end.
    pub fn near_end(&self, data_end: u64) -> bool {
        data_end + EXTEND / 2 > sync::lock(&self.window).to
    }

    /// Writes zeros from `max(data_end, the file's size)` to `EXTEND` past it, and makes
    /// that the window (joined to the old one if they touch). The caller holds the file's
    /// range lock from its length on, so nothing else writes there or extends at the same
    /// time, and syncs the file after (this counts as a metadata change).
    pub fn extend(&self, file: &File, data_end: u64) -> io::Result<()> {
        let size = file.metadata()?.len();
        let start = data_end.max(size).next_multiple_of(ZEROS.0.len() as u64);
        let end = start + EXTEND;
        let pages = (EXTEND / ZEROS.0.len() as u64) as usize;
        let mut bufs: Vec<IoSlice<'_>> = vec![IoSlice::new(&ZEROS.0); pages];
        // Without the window's mutex: write-back counts its writes meanwhile.
        super::sys::pwritev_all(file.as_raw_fd(), start, &mut bufs)?;
        let mut w = sync::lock(&self.window);
        if !(w.to == start && w.from < w.to) {
            w.from = start;
        }
        w.to = end;
        drop(w);
        self.changes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn writes_inside_the_window_change_nothing_and_others_count() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("b"))
            .unwrap();
        file.set_len(8192).unwrap();
        let w = ZeroWindow::default();
        assert_eq!(w.pending(), None);
        w.after_write(0, 4096);
        let c = w.pending().expect("no window yet: counted");
        w.covered(c);
        assert!(!w.note_sync(4096), "written once: not an append");
        assert!(w.note_sync(8192), "grew at two syncs in a row");
        w.extend(&file, 8192).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 8192 + EXTEND);
        let c = w.pending().expect("the extension itself changed the size");
        w.covered(c);
        w.after_write(8192, 8192 + 4096);
        w.after_write(8192 + EXTEND - 4096, 8192 + EXTEND);
        assert_eq!(w.pending(), None, "appends inside the zeros need no fdatasync");
        w.after_write(4096, 8192);
        assert!(w.pending().is_some(), "below the window: may fill a hole");
        w.covered(w.pending().unwrap());
        assert!(!w.note_sync(8192 + 4096), "far from the window's end");
        assert!(w.note_sync(8192 + EXTEND - 4096));
        assert!(!w.note_sync(8192 + EXTEND - 4096), "did not grow");
        w.extend(&file, 8192 + EXTEND - 4096).unwrap();
        w.covered(w.pending().unwrap());
        w.after_write(8192, 8192 + 2 * EXTEND);
        assert_eq!(w.pending(), None, "touching windows join");
        w.forget();
        w.after_write(8192, 12288);
        assert!(w.pending().is_some());
        let mut b = vec![1u8; 100];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut b, 8192 + EXTEND).unwrap();
        assert!(b.iter().all(|&x| x == 0));
    }
}
