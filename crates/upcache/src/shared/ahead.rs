//! Asynchronous readahead: a stream of sequential reads posts the windows after its read to
//! its process's loader threads, which load their missing pages in runs (`load.rs`,
//! `Inner::load_window`) while the reader copies, so the device reads ahead as the kernel's
//! async readahead has it do, instead of each read waiting for its own load. A stream of
//! sequential writes posts the runs it has written to the same threads, which write them back
//! (write-behind, `Inner::write_behind`) while the writer goes on.
//!
//! Four loader threads per attached process, started at the first window. Their frames are
//! locked under the process's client id, as the reader's own loads, so a kill leaves them to
//! the same repair and a reader in another process waits for them as for any load. A window
//! belongs to one open (`SharedFile`): its close takes back the windows not begun and waits
//! for the one being loaded, so no window outlives its open (whose key generation it uses).
//! Readahead fails no read: a window the loader cannot take frames for, or whose read fails,
//! is dropped, and the reader loads what it needs itself.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;

use super::backing::Backing;
use super::Inner;

/// Pages of one open's file for the loader to load.
pub(crate) struct Window {
    /// The open that posted it (`SharedFile::id`).
    pub open: u64,
    /// The file's slot.
    pub slot: u32,
    /// Pages to load where missing, or to write back where dirty (`write`).
    pub pages: Range<u64>,
    /// A write stream's pages to write back, not pages to load.
    pub write: bool,
    /// The open's descriptor.
    pub fd: Arc<Backing>,
}

#[derive(Default)]
struct State {
    windows: VecDeque<Window>,
    /// The opens whose windows are being loaded, one per busy loader.
    busy: Vec<u64>,
    /// The loader threads running.
    loaders: Vec<ThreadId>,
    /// Set when the attachment goes: the loaders end, no thread starts again.
    stopped: bool,
    /// A loader thread could not start: no more are tried (readers read ahead themselves
    /// where none runs).
    spawn_failed: bool,
}

/// A process's loader threads and their inbox.
#[derive(Default)]
pub(crate) struct Ahead {
    state: Mutex<State>,
    /// Wakes the loaders (a window posted, or stop) and closers waiting for a window to end.
    changed: Condvar,
}

/// Windows waiting at most; a reader that outruns the loaders posts no more.
const MAX_WAITING: usize = 64;

/// Loader threads: four loads (or write-behinds) in flight, so the threads' claims and index
/// work overlap the others' I/O and the device has a queue: sequential reads through the shim
/// ran 1.12x faster here with four than with two (every round of three, bench/RESULTS.md,
/// thirteenth session).
const LOADERS: usize = 4;

impl Ahead {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in the loader poisons nothing it leaves inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Posts `w` for the loaders of `inner` (whose `ahead` this is), starting them if need be;
    /// false if none can take it (stopped, too much waiting, or no thread could start): the
    /// caller's reads load what they need themselves.
    pub(crate) fn post(self: &Arc<Self>, inner: &Arc<Inner>, w: Window) -> bool {
        let mut s = self.state();
        // Write-behind takes at most half the queue: readers' windows keep room.
        let room = if w.write { MAX_WAITING / 2 } else { MAX_WAITING };
        if s.stopped || s.windows.len() >= room {
            return false;
        }
        while s.loaders.len() < LOADERS && !s.spawn_failed {
            let (ahead, weak) = (self.clone(), Arc::downgrade(inner));
            let spawned = super::quiet::with_signals_blocked(|| {
                std::thread::Builder::new().name("upcache-ahead".into()).spawn(move || {
                    super::quiet::library_thread();
                    run(&ahead, weak)
                })
            });
            match spawned {
                Ok(t) => s.loaders.push(t.thread().id()),
                Err(e) => {
                    log::warn!("upcache: cannot start a readahead thread of the shared cache ({e})");
                    s.spawn_failed = true;
                }
            }
        }
        if s.loaders.is_empty() {
            return false;
        }
        s.windows.push_back(w);
        drop(s);
        self.changed.notify_all();
        true
    }

    /// Takes back the windows of open `open` not begun, and waits for the one being loaded.
    pub(crate) fn cancel(&self, open: u64) {
        let mine: VecDeque<Window> = {
            let mut s = self.state();
            let (mine, others) = std::mem::take(&mut s.windows).into_iter().partition(|w| w.open == open);
            s.windows = others;
            mine
        };
        // Dropped without the lock: a descriptor's drop may take the registry's.
        drop(mine);
        self.wait_while(|s| s.busy.contains(&open));
    }

    /// Ends the loaders (the attachment goes) once their windows are loaded; none starts again.
    pub(crate) fn stop(&self) {
        let waiting = {
            let mut s = self.state();
            s.stopped = true;
            std::mem::take(&mut s.windows)
        };
        // Dropped without the lock, as in `cancel`.
        drop(waiting);
        self.changed.notify_all();
        self.wait_while(|s| !s.loaders.is_empty());
    }

    /// Waits while `busy` holds of the state, unless this is a loader thread.
    fn wait_while(&self, busy: impl Fn(&State) -> bool) {
        let me = std::thread::current().id();
        let mut s = self.state();
        while busy(&s) && !s.loaders.contains(&me) {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The next window, marked busy, after the one of open `done` (if any) was loaded; None
    /// once stopped.
    fn next(&self, done: Option<u64>) -> Option<Window> {
        let mut s = self.state();
        if let Some(open) = done {
            s.unmark(open);
            self.changed.notify_all();
        }
        loop {
            if s.stopped {
                return None;
            }
            if let Some(w) = s.windows.pop_front() {
                s.busy.push(w.open);
                return Some(w);
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until no window waits and none is being loaded.
    pub(crate) fn wait_idle(&self) {
        self.wait_while(|s| !s.windows.is_empty() || !s.busy.is_empty());
    }

    /// The loader threads running.
    #[cfg(test)]
    fn loaders(&self) -> usize {
        self.state().loaders.len()
    }

    /// This loader has ended, after the window of open `done` (if any).
    fn exit(&self, done: Option<u64>) {
        let mut s = self.state();
        if let Some(open) = done {
            s.unmark(open);
        }
        let me = std::thread::current().id();
        s.loaders.retain(|&t| t != me);
        self.changed.notify_all();
    }
}

impl State {
    /// One loader is done with a window of open `open`.
    fn unmark(&mut self, open: u64) {
        if let Some(i) = self.busy.iter().position(|&o| o == open) {
            self.busy.swap_remove(i);
        }
    }
}

/// The loader thread: loads windows until the attachment goes. It holds the attachment only
/// while it loads (the windows' opens hold it too), so the last handle's drop may run here,
/// and `stop` does not wait for its own thread.
fn run(ahead: &Ahead, weak: Weak<Inner>) {
    /// Unmarks the window being loaded and ends the loader however the thread ends: a panic
    /// must not leave a close or a detach waiting for it.
    struct Exit<'a> {
        ahead: &'a Ahead,
        done: Option<u64>,
    }
    impl Drop for Exit<'_> {
        fn drop(&mut self) {
            self.ahead.exit(self.done);
        }
    }
    // Declared first, dropped last: after the window's descriptor and the attachment, so its
    // open's close finds neither still held here.
    let mut exit = Exit { ahead, done: None };
    while let Some(w) = ahead.next(exit.done.take()) {
        exit.done = Some(w.open);
        let Some(inner) = weak.upgrade() else { break };
        if w.write {
            inner.write_behind(w.slot, w.pages.clone(), &w.fd);
        } else {
            inner.load_window(w.slot, w.pages.clone(), &w.fd);
        }
        drop(w);
        drop(inner);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::tests::small;
    use super::super::{SharedCache, SharedConfig};
    use std::path::Path;

    /// A file of `len` bytes, each a function of its offset and `seed`.
    fn pattern(path: &Path, len: usize, seed: u8) -> Vec<u8> {
        let data: Vec<u8> =
            (0..len).map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[3] ^ seed).collect();
        std::fs::write(path, &data).unwrap();
        data
    }

    /// Which of pages `pages` of `f` the index holds.
    fn cached(cache: &SharedCache, f: &super::super::SharedFile, pages: std::ops::Range<u64>) -> Vec<bool> {
        pages.map(|p| cache.inner.index().hint(cache.inner.key(f.slot(), p)).is_some()).collect()
    }

    /// A sequential reader's first read loads its readahead (1 MiB) and posts four windows
    /// (a 32nd of the cache each) past it, which the loaders load into the cache while the
    /// reader has not reached them; the file's end bounds them, and readahead off posts none.
    #[test]
    fn a_sequential_reader_s_windows_are_loaded_ahead_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data = pattern(&p, 3 << 20, 1);
        let config = SharedConfig { memory: 8 << 20, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
        assert_eq!(buf, data[..buf.len()]);
        cache.wait_for_readahead();
        // 2048 frames: the read's 256 pages, then windows of 64.
        let ahead = cached(&cache, &f, 0..768);
        assert!(
            ahead[..256 + 4 * 64].iter().all(|&c| c),
            "the read's readahead and the four windows after it"
        );
        assert!(ahead[256 + 4 * 64..].iter().all(|&c| !c), "nothing further");
        assert_eq!(cache.status().stats.read_ios, 5, "a request per window (the read's, at once)");
        // Read on to the end: each read keeps the windows ahead, up to the end and no further.
        for at in (buf.len()..data.len()).step_by(buf.len()) {
            assert_eq!(f.read_at(&mut buf, at as u64).unwrap(), buf.len());
            assert_eq!(buf, data[at..at + buf.len()], "at {at}");
        }
        cache.wait_for_readahead();
        assert_eq!(cache.status().stats.read_bytes / 4096, 768, "every page once, none past the end");

        let off = SharedCache::create(&SharedConfig { readahead: 0, ..config }).unwrap();
        let f = off.open_path(&p, false).unwrap();
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(off.inner.ahead.loaders(), 0, "readahead off starts no loader");
        assert_eq!(cached(&off, &f, 0..64), [vec![true; 16], vec![false; 48]].concat());
    }

    /// A read that begins where its open's last one ended, after one that did not (a random
    /// reader's, now and then), starts no loader; the next such read in a row does.
    #[test]
    fn a_stream_is_two_sequential_reads_in_a_row() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data = pattern(&p, 4 << 20, 2);
        let config = SharedConfig { memory: 8 << 20, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let mut buf = vec![0u8; 4096];
        for (i, at) in [40u64, 41, 42].into_iter().enumerate() {
            f.read_at(&mut buf, at * 4096).unwrap();
            assert_eq!(buf, data[at as usize * 4096..][..4096]);
            cache.wait_for_readahead();
            assert_eq!(cache.inner.ahead.loaders(), if i < 2 { 0 } else { super::LOADERS }, "read {i}");
        }
    }

    /// Two sequential streams read in turns through one open are each read ahead: the second
    /// stream's third read posts windows past its synchronous readahead, although every read
    /// of it follows one of the other stream (`Streams`).
    #[test]
    fn interleaved_streams_of_one_open_are_each_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data = pattern(&p, 8 << 20, 3);
        // 2048 frames: readahead of 256 pages, windows of 64.
        let config = SharedConfig { memory: 8 << 20, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, false).unwrap();
        let mut buf = vec![0u8; 16 << 10];
        for step in 0..3u64 {
            for start in [0u64, 4 << 20] {
                let at = start + step * buf.len() as u64;
                assert_eq!(f.read_at(&mut buf, at).unwrap(), buf.len());
                assert_eq!(buf, data[at as usize..][..buf.len()], "at {at}");
            }
        }
        cache.wait_for_readahead();
        // The second stream's third read, at page 1032: its readahead to page 1288, windows on.
        let ahead = cached(&cache, &f, 1288..1288 + 4 * 64);
        assert!(
            ahead.iter().all(|&c| c),
            "the second stream's windows: {:?}",
            ahead.iter().filter(|&&c| c).count()
        );
        let ahead = cached(&cache, &f, 256..256 + 4 * 64);
        assert!(ahead.iter().all(|&c| c), "the first stream's windows");
        // Read through the windows: what the loaders put there is the file's.
        for at in (1288 * 4096..(1288 + 256) * 4096).step_by(buf.len()) {
            assert_eq!(f.read_at(&mut buf, at as u64).unwrap(), buf.len());
            assert_eq!(buf, data[at..at + buf.len()], "at {at}");
        }
    }

    /// Opens of files that take one another's file table entries (new key generations), read
    /// sequentially and closed at once by several threads: every byte read is its own file's,
    /// whatever windows were waiting or loading at each close.
    #[test]
    fn windows_never_outlive_their_open() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<_> = (0..6u8)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                let data = pattern(&p, 1 << 20, i);
                (p, data)
            })
            .collect();
        // Two entries for six files: each open of a closed file takes a stale entry over.
        let config = SharedConfig { memory: 4 << 20, files: 2, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        std::thread::scope(|s| {
            for t in 0..2usize {
                let (cache, files) = (&cache, &files);
                s.spawn(move || {
                    let mut buf = vec![0u8; 16 << 10];
                    for round in 0..40usize {
                        let (p, data) = &files[(round * 5 + t * 3) % files.len()];
                        let f = loop {
                            match cache.open_path(p, false) {
                                Ok(f) => break f,
                                // The other thread holds the other entry; ours is taken back
                                // at its close.
                                Err(e) if e.kind() == crate::error::ErrorKind::CacheFull => {
                                    std::thread::yield_now()
                                }
                                Err(e) => panic!("{e}"),
                            }
                        };
                        let reads = 1 + (round * 7 + t) % 16;
                        for r in 0..reads {
                            let at = r * buf.len();
                            assert_eq!(f.read_at(&mut buf, at as u64).unwrap(), buf.len());
                            assert!(
                                buf == data[at..at + buf.len()],
                                "{}: round {round}, read {r}",
                                p.display()
                            );
                        }
                        f.close().unwrap();
                    }
                });
            }
        });
        cache.check_index().unwrap();
    }

    /// A sequential write stream, once more than half the background ratio is dirty, hands
    /// each run it has written to the loaders, which write it back while it goes on
    /// (`SharedFile::write_behind`): most of its pages are clean at its end, with no sync and
    /// no flusher, and the OS file holds them. Streams off, or writes out of order, leave
    /// every page dirty.
    #[test]
    fn a_write_stream_is_written_back_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        let config = SharedConfig {
            memory: 16 << 20,
            dirty_ratios: (0.1, 0.9),
            dirty_expire: std::time::Duration::from_secs(3600),
            ..small()
        };
        let chunk = 64 << 10;
        let pages = (data.len() / 4096) as u64;
        for (streams, in_order) in [(true, true), (false, true), (true, false)] {
            std::fs::write(&p, b"").unwrap();
            let cache = SharedCache::create(&SharedConfig { streams, ..config.clone() }).unwrap();
            let f = cache.open_path(&p, true).unwrap();
            let mut at: Vec<usize> = (0..data.len()).step_by(chunk).collect();
            if !in_order {
                at.reverse();
            }
            for a in at {
                f.write_all_at(&data[a..a + chunk], a as u64).unwrap();
            }
            cache.wait_for_readahead();
            // Relaxed: nobody writes now.
            let dirty = cache.inner.view.header().dirty.load(std::sync::atomic::Ordering::Relaxed);
            let behind = cache.status().behind_pages;
            if streams && in_order {
                assert!(behind >= pages / 2 && dirty < pages / 2, "{behind} handed over, {dirty} dirty");
                // The middle of the file, written behind, is in the OS file already.
                let os = std::fs::read(&p).unwrap();
                assert!(os.len() >= 5 << 20 && os[4 << 20..5 << 20] == data[4 << 20..5 << 20]);
            } else {
                assert_eq!((behind, dirty), (0, pages), "streams {streams}, in order {in_order}");
            }
            f.sync_data().unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), data);
        }
    }

    /// Two write streams taking turns on one open (two halves of a file written at once) are
    /// each written behind: with one stream per open, each write would end the other's stream
    /// and none would be.
    #[test]
    fn interleaved_write_streams_of_one_open_are_each_written_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let config = SharedConfig {
            memory: 16 << 20,
            dirty_ratios: (0.1, 0.9),
            dirty_expire: std::time::Duration::from_secs(3600),
            ..small()
        };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let (chunk, half) = (64 << 10, 4 << 20);
        for a in (0..half).step_by(chunk) {
            for start in [0, half] {
                let at = start + a;
                f.write_all_at(&data[at..at + chunk], at as u64).unwrap();
            }
        }
        cache.wait_for_readahead();
        let pages = (data.len() / 4096) as u64;
        let behind = cache.status().behind_pages;
        assert!(behind >= pages / 2, "{behind} of {pages} pages handed over");
        // The middle of each half, written behind, is in the OS file already.
        let os = std::fs::read(&p).unwrap();
        for mid in [2 << 20, 6 << 20] {
            assert_eq!(os[mid..mid + (512 << 10)], data[mid..mid + (512 << 10)], "at {mid}");
        }
        f.sync_data().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), data);
    }

    /// The last handle of an attachment may go while windows wait: the loaders end, no hang,
    /// whichever of the file and the cache goes first.
    #[test]
    fn an_attachment_goes_with_windows_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        pattern(&p, 2 << 20, 3);
        let config = SharedConfig { memory: 8 << 20, ..small() };
        for file_first in [true, false, true, false] {
            let cache = SharedCache::create(&config).unwrap();
            let f = cache.open_path(&p, false).unwrap();
            f.read_at(&mut [0u8; 4096], 0).unwrap();
            if file_first {
                drop(f);
                drop(cache);
            } else {
                drop(cache);
                drop(f);
            }
        }
    }
}
