//! The shared file table: one entry per cached OS file, found by (device, inode), holding
//! what every process must agree on: the length, the write sequence, the writers' lock, the
//! number of opens and the dirty-page count.
//!
//! Entries are taken, found and freed under the table's lock (`Header::files_lock`), which is
//! only taken at open and close. A slot is reused only when no process has it open and none of
//! its pages is dirty; its cached pages are dropped first, so a key never names a former file.
//!
//! # Invariants
//! - `seq` is odd exactly while a holder of `lock` changes the file's bytes or length; a
//!   writer holding a range slot moves it by 2 as it starts (before its first byte) and as it
//!   ends (before it frees the slot). A reader that saw the same even value before and after
//!   its copy, and no slot held in between, saw no change.
//! - A range slot's pages change only under `lock` while the slot is free; two held slots
//!   never overlap, and no holder of `lock` changes pages a held slot covers (it waits for the
//!   slot first, `SharedFile`'s `FileLock::quiesce`).
//! - `dirty` is never below the number of the file's `DIRTY` frames: it grows before a flag is
//!   set and shrinks after one is cleared, so a sync that finds 0 may skip its scan.
//! - `opens` and `writers` are the sums over clients of their `holds` for the slot (a kill
//!   between the two stores of an open or a close is put right by a recount at repair).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::shm::OwnerLock;

/// Entry is free.
pub(crate) const FREE: u32 = 0;
/// Entry names a file.
pub(crate) const LIVE: u32 = 1;

pub(crate) use super::ranges::{RangeSlot, RANGES};

/// One file's shared state: 320 bytes, five cache lines, all zeros when free. The first line
/// holds what every write changes, a write within the length too (the sequence, the dirty
/// count); the second what every call reads and few change (the lock, the length, the cut,
/// the tree's root), so that two processes writing within the file do not take it from each
/// other at every write (it shared the sequence's line: 4 KiB writes of 2 threads into one
/// file ran at 0.85x the in-process engine's); the third what the looks at the OS file use;
/// the range slots follow.
#[repr(C, align(64))]
pub(crate) struct FileEntry {
    /// The write sequence: its low half odd while a change of the file's length or of pages
    /// under its lock is in flight; its high half moved by range writers (`RANGE_STEP`).
    pub seq: AtomicU64,
    /// Dirty pages (never below the truth).
    pub dirty: AtomicU64,
    /// Pages `lo..hi` that every page dirtied since it was last emptied lies in, so that a
    /// sync lists those, not every cached page (the kernel's dirty tag): see `widen_dirty`.
    /// `!lo` in the low half (all zeros: empty), `hi` in the high half; page numbers past
    /// 32 bits count as the end of the file.
    pub dirty_range: AtomicU64,
    /// When the file last went from clean to dirty (`now_secs`), for the service's
    /// write-back of files dirty for long (as the kernel's `dirtied_when`).
    pub dirtied: AtomicU64,
    /// Write-back errors, as the kernel's errseq: the count (bits 33..), whether an open
    /// has reported the latest (bit 32), and its errno (bits 0..32); see `record_error`.
    pub errors: AtomicU64,
    /// When a change of the cache's own last began or made a step (`coarse_ms`): one
    /// silent for long was left counted by a killed process.
    pub own_at: AtomicU64,
    /// Changes of the OS file the cache itself has in flight (write-backs, truncates,
    /// reservations), during which a look at the OS file cannot tell another program's change
    /// from ours (`outside.rs`).
    pub own: AtomicU32,
    /// Bumped as each change of the cache's own begins, so that the one recording the OS
    /// file at the end knows whether another began while it read it.
    pub own_epoch: AtomicU32,
    /// When (`coarse_ms`, low bits; 0: none) a process asked the service to write
    /// the file back (`Inner::ask_write_back`); cleared by the service's pass that took it.
    pub asked: AtomicU32,
    /// 1 while a change made without the cache has been seen and not yet taken in.
    pub stale: AtomicU32,
    pub state: AtomicU32,
    /// Opens of the file, by every process.
    pub opens: AtomicU32,
    /// Held by a writer, a truncate, or a reader that gave up on optimism.
    pub lock: OwnerLock,
    /// Opens for writing, by every process: the last of them writes the dirty pages back.
    pub writers: AtomicU32,
    /// The file's length as the cache sees it.
    pub len: AtomicU64,
    /// The bytes whose pages the file may have cached: at least its largest length since the
    /// entry was filled, raised before the length, never lowered, so the pages a truncate
    /// killed half-way left past the length are still below it.
    pub high: AtomicU64,
    /// Where the OS file's space is reserved up to (`io/reserve.rs`), changed under `lock`.
    pub reserved: AtomicU64,
    /// A truncate not finished: the length it cuts to, plus one; 0 when none. Set before the
    /// length is lowered and cleared once the OS file is cut, so whoever takes the lock from
    /// a truncate that died (or failed to cut) finishes it, and growth is never taken in past
    /// it.
    pub cut: AtomicU64,
    /// The entry's generation, in every key of its pages: bumped when it is filled for
    /// another file (`frame::key`).
    pub gen: AtomicU32,
    /// 1 once a process stopped caching the file for everyone (`SharedFile::bypass`): every
    /// open of it reads and writes the OS file directly while the entry names it.
    pub bypass: AtomicU32,
    /// The root of the file's page tree (`tree.rs`): its generation, height and node.
    pub root: AtomicU64,
    pub dev: AtomicU64,
    pub ino: AtomicU64,
    /// The OS file's size and modification time (ns) as the cache last left or saw it (at its
    /// first open, after each change of its own, at its last close), to tell whether
    /// someone changed it without the cache (`outside.rs`).
    pub os_size: AtomicU64,
    pub os_mtime: AtomicU64,
    /// The OS file's change time (ns) and birth time (ns, 0 where the file system keeps
    /// none) then: a change with its modification time put back (`cp -p`, `tar x`,
    /// `rsync -t`) still moves the change time, and a new file that reuses the inode number
    /// has another birth time.
    pub os_ctime: AtomicU64,
    pub os_btime: AtomicU64,
    /// When a process last looked at the OS file for changes made without the cache
    /// (`coarse_ms`): at most one look per clock tick, by any process.
    pub looked: AtomicU64,
    /// 1 when the file's tree may have nodes no walk reaches (a process that had it open
    /// died, or a tree was replaced): its next generation sweeps them (`tree.rs`).
    pub leaky: AtomicU32,
    /// Padding, named: the layout is every process's.
    pub _pad: u32,
    /// Writers of parts of the file within its length (`RangeSlot`).
    pub ranges: [RangeSlot; RANGES],
    /// The file's own list of free frames, the two-layer allocator's second layer (`pool.rs`).
    pub spare: super::pool::FreeList,
}

const _: () = assert!(std::mem::size_of::<FileEntry>() == 320);
// The lines as the struct's docs say.
const _: () = assert!(std::mem::offset_of!(FileEntry, state) == 64);
const _: () = assert!(std::mem::offset_of!(FileEntry, dev) == 128);
const _: () = assert!(std::mem::offset_of!(FileEntry, ranges) == 192);

const ERROR_SEEN: u64 = 1 << 32;

/// `dirty_range`'s pages `lo..hi` as stored.
fn encode_range(lo: u64, hi: u64) -> u64 {
    let lo = lo.min(u32::MAX as u64 - 1);
    let hi = hi.min(u32::MAX as u64);
    (hi << 32) | (!lo & 0xffff_ffff)
}

/// `dirty_range`'s stored word as pages `lo..hi` (empty: `lo >= hi`).
fn decode_range(v: u64) -> (u64, u64) {
    let (lo, hi) = (!v & 0xffff_ffff, v >> 32);
    (lo, if hi == u32::MAX as u64 { u64::MAX } else { hi })
}

/// The union of two stored ranges.
fn join_ranges(a: u64, b: u64) -> u64 {
    match (decode_range(a), decode_range(b)) {
        ((lo, hi), _) if lo >= hi => b,
        (_, (lo, hi)) if lo >= hi => a,
        ((l1, h1), (l2, h2)) => encode_range(l1.min(l2), h1.max(h2)),
    }
}

impl FileEntry {
    /// Page `page` is about to be marked dirty (its count taken first, its flag after), by a
    /// writer holding the file's lock or a range of it: the dirty range takes it in.
    pub fn widen_dirty(&self, page: u64) {
        let page = encode_range(page, page.saturating_add(1));
        // SeqCst (all of the range's): one order with the dirty count's loads in
        // `empty_dirty_range_if_clean`.
        let _ =
            self.dirty_range.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(join_ranges(v, page)));
    }

    /// Every page may be dirty (a writer died between its count and the range).
    pub fn widen_dirty_all(&self) {
        self.dirty_range.store(encode_range(0, u64::MAX), Ordering::SeqCst);
    }

    /// The pages the file's dirty pages lie in.
    pub fn dirty_pages(&self) -> std::ops::Range<u64> {
        let (lo, hi) = decode_range(self.dirty_range.load(Ordering::SeqCst));
        lo..hi.max(lo)
    }

    /// Empties the dirty range if the file has no dirty page. The caller holds the file's
    /// lock with no range writer at work, so no writer is between its count and its widening
    /// (`widen_dirty`); only writers, which hold one or the other, mark pages dirty.
    pub fn empty_dirty_range_if_clean(&self) {
        if self.dirty.load(Ordering::SeqCst) == 0 {
            self.dirty_range.store(0, Ordering::SeqCst);
        }
    }

    /// Whether it is in use, for the OS file (device, inode) `(dev, ino)` (under the table's
    /// lock).
    pub fn names(&self, dev: u64, ino: u64) -> bool {
        // Relaxed (all): under the table's lock.
        self.state.load(Ordering::Relaxed) != FREE
            && self.dev.load(Ordering::Relaxed) == dev
            && self.ino.load(Ordering::Relaxed) == ino
    }

    /// Records a write-back error for the next sync of every open of the file, in any process.
    pub fn record_error(&self, errno: u32) {
        // SeqCst: one order of errors and reports across processes (rare: errors only).
        let _ = self.errors.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            Some((((v >> 33) + 1) << 33) | errno as u64)
        });
    }

    /// Where an open made now starts counting errors: past those some open has reported,
    /// before the latest if none has (the kernel's `errseq_sample`).
    pub fn errors_sample(&self) -> u64 {
        // SeqCst: see `record_error`.
        let v = self.errors.load(Ordering::SeqCst);
        let count = v >> 33;
        if v & ERROR_SEEN != 0 || count == 0 {
            count
        } else {
            count - 1
        }
    }

    /// The errno of the latest write-back error, if one was recorded since the open whose
    /// count is `seen` last looked; each error reaches each open once.
    pub fn unseen_error(&self, seen: &AtomicU64) -> Option<i32> {
        // SeqCst: see `record_error`. Relaxed (`seen`): the open's own count.
        let v = self.errors.load(Ordering::SeqCst);
        let count = v >> 33;
        // Once per open even from two threads: only the one that moves `seen` reports it.
        if seen.fetch_max(count, Ordering::Relaxed) >= count {
            return None;
        }
        // Marked reported only if no newer error came meanwhile (that one nobody has seen).
        let _ = self.errors.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
            (c >> 33 == count).then_some(c | ERROR_SEEN)
        });
        Some((v & 0xffff_ffff) as i32)
    }

    /// Marks the start of a change (the caller holds `lock`).
    pub fn begin_change(&self) {
        // Relaxed + Release fence: a reader that sees any byte of the change sees the odd value.
        self.seq.fetch_add(1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
    }

    /// Marks the start of a range writer's change (the caller holds `lock` and a range slot):
    /// the sequence's high half moves on (its low half, and its parity, stay).
    pub fn begin_range_change(&self) {
        // Release: a reader that reads the new value sees the slot held. Release fence: a
        // reader that sees any byte of the change sees the new value.
        self.seq.fetch_add(RANGE_STEP, Ordering::Release);
        std::sync::atomic::fence(Ordering::Release);
    }

    /// Marks a range writer's end, before it frees its slot.
    pub fn end_range_change(&self) {
        // Release: the change is seen by whoever sees the value (or the slot freed after it).
        self.seq.fetch_add(RANGE_STEP, Ordering::Release);
    }

    /// Whether a writer holds a range slot covering a page of `first..end`, for a reader that
    /// read `seq` before: a slot claimed after that moved `seq` before its writer's first byte,
    /// and one claimed before it shows its pages here (they were stored before the sequence
    /// moved), so a writer passed over here changes none of the reader's pages unseen.
    pub fn ranges_overlap(&self, first: u64, end: u64) -> bool {
        // Pages read Relaxed: see above; `held` is Acquire.
        self.ranges.iter().any(|r| r.lock.held() && r.covers(first, end))
    }

    /// Marks its end.
    pub fn end_change(&self) {
        // Release: the change is seen by whoever sees the even value.
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// Raises the length to at least `len` (`high` first).
    pub fn raise_len(&self, len: u64) {
        // Relaxed: only a test; a write within the length (most writes) then changes no line
        // that every writer of the file shares.
        if self.len.load(Ordering::Relaxed) >= len {
            return;
        }
        // Release (both): a reader that sees the length sees the bytes written before.
        self.high.fetch_max(len, Ordering::Release);
        self.len.fetch_max(len, Ordering::Release);
    }

    /// The end of the pages (of `size`) the file may have cached.
    pub fn page_end(&self, size: super::page_size::PageSize) -> u64 {
        // Acquire: pairs with `raise_len`.
        size.pages_in(self.high.load(Ordering::Acquire))
    }

    /// Repairs the entry after taking its lock from a dead writer: its change, cut short,
    /// ends now (what it wrote stays, as after a killed write(2)).
    pub fn repair_lock(&self) {
        // Relaxed: we hold the lock; `end_change` orders.
        if self.seq.load(Ordering::Relaxed) & 1 == 1 {
            self.end_change();
        }
    }
}

/// A range writer's step of a file's write sequence (`FileEntry::seq`): its high half, so
/// that a read of one page, whose copy its frame's version validates against any writer of
/// the page, is not retried for a range writer of other pages (it compares the low half
/// only, which a change of the length moves). The low half's carry at 2^32 changes it too.
pub(crate) const RANGE_STEP: u64 = 1 << 32;

/// The file table holds the roots of the page trees (`tree.rs`), one per entry.
impl super::tree::Entries for [FileEntry] {
    fn root(&self, slot: u32) -> Option<&AtomicU64> {
        self.get(slot as usize).map(|e| &e.root)
    }

    fn gen(&self, slot: u32) -> &AtomicU32 {
        &self[slot as usize].gen
    }

    fn leaky(&self, slot: u32) -> &AtomicU32 {
        &self[slot as usize].leaky
    }
}

/// The identity and state of an OS file at open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OsFile {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub btime: u64,
}

impl OsFile {
    /// What `md` says of the file.
    pub fn of(md: &std::fs::Metadata) -> OsFile {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| (s as u64).wrapping_mul(1_000_000_000).wrapping_add(n as u64);
        let btime = md
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        OsFile {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: ns(md.mtime(), md.mtime_nsec()),
            ctime: ns(md.ctime(), md.ctime_nsec()),
            btime,
        }
    }

    /// Records it in `e` as the OS file's state as the cache last left or saw it.
    pub fn record(&self, e: &FileEntry) {
        // Relaxed (all): fields read together only by a look, which a torn record (two
        // recorders at once) only makes take in a change that was none: pages, not bytes.
        e.os_size.store(self.size, Ordering::Relaxed);
        e.os_mtime.store(self.mtime, Ordering::Relaxed);
        e.os_ctime.store(self.ctime, Ordering::Relaxed);
        e.os_btime.store(self.btime, Ordering::Relaxed);
    }

    /// Whether `e` recorded the OS file as it is now.
    pub fn recorded_in(&self, e: &FileEntry) -> bool {
        // Relaxed (all): see `record`.
        e.os_size.load(Ordering::Relaxed) == self.size
            && e.os_mtime.load(Ordering::Relaxed) == self.mtime
            && e.os_ctime.load(Ordering::Relaxed) == self.ctime
            && e.os_btime.load(Ordering::Relaxed) == self.btime
    }
}

/// What `find_or_take` decided.
pub(crate) enum Slot {
    /// The file's entry, already open elsewhere or cached and unchanged.
    Found(u32),
    /// The file's entry, whose cached pages are stale: drop them, then use it.
    Stale(u32),
    /// A fresh entry (a free one, or one whose cached pages must be dropped first).
    Fresh { slot: u32, evict_old: bool },
}

/// Under the table's lock: the entry for `os`, or one to take for it; None if every entry is
/// open or dirty.
pub(crate) fn find_or_take(files: &[FileEntry], os: &OsFile) -> Option<Slot> {
    let mut free = None;
    let mut idle = None;
    for (i, e) in files.iter().enumerate() {
        // Relaxed (all): entries change only under the table's lock, which we hold, except
        // `dirty`, `opens` is ours too, and `len`, which we do not read here.
        match e.state.load(Ordering::Relaxed) {
            FREE => free = free.or(Some(i as u32)),
            _ if e.dev.load(Ordering::Relaxed) == os.dev && e.ino.load(Ordering::Relaxed) == os.ino => {
                let unchanged = e.bypass.load(Ordering::Relaxed) != 0
                    || e.opens.load(Ordering::Relaxed) > 0
                    || e.dirty.load(Ordering::Acquire) > 0
                    || os.recorded_in(e);
                return Some(if unchanged { Slot::Found(i as u32) } else { Slot::Stale(i as u32) });
            }
            _ if e.opens.load(Ordering::Relaxed) == 0 && e.dirty.load(Ordering::Acquire) == 0 => {
                idle = idle.or(Some(i as u32))
            }
            _ => {}
        }
    }
    match (free, idle) {
        (Some(slot), _) => Some(Slot::Fresh { slot, evict_old: false }),
        (None, Some(slot)) => Some(Slot::Fresh { slot, evict_old: true }),
        (None, None) => None,
    }
}

/// Makes entry `e` name `os` (under the table's lock; its old pages no longer match, being of
/// an older generation, or gone).
pub(crate) fn fill(e: &FileEntry, os: &OsFile) {
    // Relaxed (fields): published by the Release store of `state`, and read by others only
    // after they found the entry under the table's lock or through an open of it.
    e.dev.store(os.dev, Ordering::Relaxed);
    e.ino.store(os.ino, Ordering::Relaxed);
    os.record(e);
    e.errors.store(0, Ordering::Relaxed);
    e.dirty.store(0, Ordering::Relaxed);
    e.reserved.store(os.size, Ordering::Relaxed);
    e.dirtied.store(0, Ordering::Relaxed);
    e.bypass.store(0, Ordering::Relaxed);
    e.dirty_range.store(0, Ordering::Relaxed);
    e.own.store(0, Ordering::Relaxed);
    e.stale.store(0, Ordering::Relaxed);
    e.own_at.store(0, Ordering::Relaxed);
    e.cut.store(0, Ordering::Relaxed);
    e.asked.store(0, Ordering::Relaxed);
    e.high.store(os.size, Ordering::Relaxed);
    // Release: the length is read lock-free by readers of the file.
    e.len.store(os.size, Ordering::Release);
    e.state.store(LIVE, Ordering::Release);
}

/// The machine's coarse monotonic clock in milliseconds: the same in every process, read
/// without a system call (the vDSO), and moving once per kernel tick.
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Seconds of the machine's monotonic clock, the same in every process.
pub(crate) fn now_secs() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn entry() -> Box<FileEntry> {
        // SAFETY: every field is an atomic or plain integer, for which zeros are valid (a free
        // entry is all zeros).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    /// The dirty range holds every page widened into it; pages past 32 bits reach the end.
    #[test]
    fn the_dirty_range_takes_in_each_page_dirtied() {
        let e = entry();
        assert!(e.dirty_pages().is_empty(), "a fresh entry's range is empty");
        e.widen_dirty(7);
        assert_eq!(e.dirty_pages(), 7..8);
        e.widen_dirty(3);
        e.widen_dirty(5);
        assert_eq!(e.dirty_pages(), 3..8);
        e.widen_dirty(1 << 40);
        assert_eq!(e.dirty_pages(), 3..u64::MAX);
        e.widen_dirty_all();
        assert_eq!(e.dirty_pages(), 0..u64::MAX);
    }

    /// A clean file's range is emptied; one with a page counted dirty keeps it.
    #[test]
    fn only_a_clean_files_dirty_range_is_emptied() {
        let e = entry();
        e.widen_dirty(9);
        e.dirty.store(1, Ordering::SeqCst);
        e.empty_dirty_range_if_clean();
        assert_eq!(e.dirty_pages(), 9..10, "a dirty page is counted");
        e.dirty.store(0, Ordering::SeqCst);
        e.empty_dirty_range_if_clean();
        assert!(e.dirty_pages().is_empty());
    }
}
