//! The flusher of a cache this process made for itself ([`SharedCache::create_private`]): the
//! same engine on a segment nobody else maps, with no service, so a thread of this process
//! does the service's write-back. Every flush interval, and at once when a writer passes the
//! background dirty ratio (`Inner::kick_write_back`), it runs the service's pass
//! ([`SharedCache::write_back_due`]: files dirty past the expiry, others while the cache is
//! past the background ratio) and the sets' flusher over this process's writable files,
//! through descriptors of its own. It holds the cache only during a pass, so dropping the
//! cache ends it.

use std::sync::{Arc, Condvar, Mutex, Weak};

use super::writeback::{Lent, Target};
use super::{Inner, SharedCache};

/// A running flusher's handle, kept by the cache (`Inner::own_flusher`).
pub(crate) struct OwnFlusher {
    thread: std::thread::Thread,
    /// Passes begun and ended, and a signal at the end of each (for tests,
    /// `wait_for_own_flusher`).
    passes: Mutex<(u64, u64)>,
    /// Files whose write-back this process asked for (`ask`), for the next pass.
    asked: Mutex<Vec<u32>>,
    passed: Condvar,
}

impl OwnFlusher {
    /// Starts the flusher of `inner`'s cache.
    pub(crate) fn start(inner: &Arc<Inner>) -> std::io::Result<Arc<OwnFlusher>> {
        let weak = Arc::downgrade(inner);
        let (tx, rx) = std::sync::mpsc::channel::<Arc<OwnFlusher>>();
        let thread = super::quiet::with_signals_blocked(|| {
            std::thread::Builder::new().name("upcache-flusher".into()).spawn(move || {
                super::quiet::library_thread();
                if let Ok(me) = rx.recv() {
                    run(&weak, &me);
                }
            })
        })?;
        let me = Arc::new(OwnFlusher {
            thread: thread.thread().clone(),
            passes: Mutex::new((0, 0)),
            asked: Mutex::new(Vec::new()),
            passed: Condvar::new(),
        });
        // The thread waits for its handle: it ends at once if the send fails (it cannot).
        let _ = tx.send(me.clone());
        Ok(me)
    }

    /// Wakes the flusher for a pass now.
    pub(crate) fn kick(&self) {
        self.thread.unpark();
    }

    /// Has the next pass, woken now, write back file `slot` whatever its age (a
    /// `SharedFile::start_write_back`: a program's DONTNEED advice, say), as a service does
    /// when asked; the caller does not wait for it.
    pub(crate) fn ask(&self, slot: u32) {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if !asked.contains(&slot) {
            asked.push(slot);
        }
        drop(asked);
        self.kick();
    }

    /// Waits for the end of the next whole pass after the call, woken for it; false if none
    /// ended within `patience`.
    pub(crate) fn wait_for_pass(&self, patience: std::time::Duration) -> bool {
        // A pass under way may have begun before the call: the one after it.
        let target = self.passes.lock().unwrap_or_else(|p| p.into_inner()).0 + 1;
        self.kick();
        self.wait_for_passes(target, patience)
    }

    /// Waits for the end of a pass under way, if one is: it holds descriptors of the files it
    /// writes back, an array's lock with them (`SharedArray`'s drop).
    pub(crate) fn wait_for_pass_under_way(&self) {
        let begun = self.passes.lock().unwrap_or_else(|p| p.into_inner()).0;
        self.wait_for_passes(begun, std::time::Duration::from_secs(3600));
    }

    /// Passes ended.
    #[cfg(test)]
    pub(crate) fn passes(&self) -> u64 {
        self.passes.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// Waits until `target` passes ended; false if not within `patience`.
    pub(crate) fn wait_for_passes(&self, target: u64, patience: std::time::Duration) -> bool {
        let passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        let (passes, _) = self
            .passed
            .wait_timeout_while(passes, patience, |n| n.1 < target)
            .unwrap_or_else(|p| p.into_inner());
        passes.1 >= target
    }
}

/// The flusher's loop: a pass, then a park until the next interval or a kick; ends once the
/// cache is gone (or forked away from).
fn run(weak: &Weak<Inner>, me: &OwnFlusher) {
    let mut hands = Vec::new();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.forked() || inner.retired() {
            return;
        }
        let interval = inner.view.header().flush_interval();
        me.passes.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        let cache = SharedCache { inner };
        // The asks before the list of dirty files: a file dirtied and asked for in between is
        // in the list.
        let asked = std::mem::take(&mut *me.asked.lock().unwrap_or_else(|p| p.into_inner()));
        let lent = lent(&cache.inner);
        cache.write_back_due(&lent, &asked);
        cache.write_back_next_to_go(&lent, &mut hands);
        cache.inner.reclaim();
        drop((lent, cache));
        me.passes.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
        me.passed.notify_all();
        std::thread::park_timeout(interval);
    }
}

/// Descriptors of this process's writable files that have dirty pages, as the service's
/// lent ones (a copy of each, and of its `O_DIRECT` one where write-back goes through it).
fn lent(inner: &Inner) -> Vec<(u32, Arc<Lent>)> {
    let files = inner.view.files();
    inner
        .writable_fds()
        .into_iter()
        // Acquire: pairs with `mark_dirty`'s count; a file clean now is for the next pass.
        .filter(|(slot, _)| files[*slot as usize].dirty.load(std::sync::atomic::Ordering::Acquire) > 0)
        .filter_map(|(slot, backing)| {
            let lent = match inner.target(&backing) {
                Target::Os { fd, direct } => {
                    let direct = direct.and_then(|d| d.try_clone().ok());
                    Lent { fd: fd.try_clone().ok()?, direct, array: None }
                }
                Target::Array(a) => {
                    Lent { fd: a.first().try_clone().ok()?, direct: None, array: Some(backing.clone()) }
                }
            };
            Some((slot, Arc::new(lent)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::super::frame::DIRTY;
    use super::super::tests::small;
    use super::super::{SharedCache, SharedConfig};

    fn dirty(cache: &SharedCache) -> usize {
        cache.inner.view.frames().iter().filter(|m| m.flags() & DIRTY != 0).count()
    }

    /// A cache of the process's own writes back a file dirty past the expiry without a sync;
    /// one made by `create` has no flusher.
    #[test]
    fn its_flusher_writes_back_an_expired_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let config = SharedConfig {
            dirty_expire: Duration::ZERO,
            flush_interval: Duration::from_secs(3600),
            ..small()
        };
        assert!(
            !SharedCache::create(&config).unwrap().wait_for_own_flusher(),
            "no flusher without create_private"
        );
        let cache = SharedCache::create_private(&config).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let data: Vec<u8> = (0..10 * 4096u32).map(|i| (i % 241) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        assert_eq!(dirty(&cache), 10);
        assert!(cache.wait_for_own_flusher());
        assert_eq!(dirty(&cache), 0, "written back by the flusher");
        assert_eq!(std::fs::read(&p).unwrap(), data);
    }

    /// An empty file, and a cache of the process's own with background ratio `background`
    /// whose flusher sleeps an hour between passes and has ended its first.
    fn idle_private(
        background: f64,
    ) -> (tempfile::TempDir, std::path::PathBuf, SharedCache, std::sync::Arc<super::OwnFlusher>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let config = SharedConfig {
            dirty_ratios: (background, 0.9),
            dirty_expire: Duration::from_secs(3600),
            flush_interval: Duration::from_secs(3600),
            ..small()
        };
        let cache = SharedCache::create_private(&config).unwrap();
        let flusher = cache.inner.own_flusher.get().unwrap().clone();
        assert!(flusher.wait_for_pass(Duration::from_secs(10)));
        (dir, p, cache, flusher)
    }

    /// A write-back asked for (`start_write_back`, a program's DONTNEED advice) is the
    /// flusher's, as a service's would be: its next pass, woken for it, writes the file back
    /// though it is neither expired nor the cache past its background ratio.
    #[test]
    fn an_asked_write_back_is_its_next_pass() {
        let (_dir, p, cache, flusher) = idle_private(0.5);
        let f = cache.open_path(&p, true).unwrap();
        let data: Vec<u8> = (0..10 * 4096u32).map(|i| (i % 239) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        let before = flusher.passes();
        f.start_write_back().unwrap();
        assert!(flusher.wait_for_passes(before + 1, Duration::from_secs(10)), "the ask woke no pass");
        // A whole pass after the ask (one under way may have begun before it).
        assert!(flusher.wait_for_pass(Duration::from_secs(10)));
        assert_eq!(dirty(&cache), 0, "written back by the flusher's pass");
        assert_eq!(std::fs::read(&p).unwrap(), data);
    }

    /// A writer past the background ratio wakes the flusher (its interval an hour), which
    /// writes back until the cache is a sixteenth below the ratio.
    #[test]
    fn a_writer_past_the_background_ratio_wakes_it() {
        let (_dir, p, cache, flusher) = idle_private(0.1);
        let f = cache.open_path(&p, true).unwrap();
        let frames = cache.inner.view.n_frames;
        let data = vec![7u8; frames * 4096 * 3 / 10];
        let before = flusher.passes();
        // Page by page: a write checks the ratio as it begins.
        for (i, page) in data.chunks(4096).enumerate() {
            f.write_all_at(page, i as u64 * 4096).unwrap();
        }
        assert!(
            flusher.wait_for_passes(before + 1, Duration::from_secs(10)),
            "the writers' kicks woke no pass"
        );
        // A pass after the writes leaves the cache at most at its background ratio: it writes
        // back past it, down to a sixteenth below, and a pass that ended while the writer went
        // on may leave it anywhere up to the ratio (where a pass does nothing).
        assert!(flusher.wait_for_pass(Duration::from_secs(10)));
        let background = cache.inner.dirty_limits().0;
        // Relaxed: a count, nobody writes now.
        let now = cache.inner.view.header().dirty.load(Ordering::Relaxed);
        assert!(now <= background, "{now} dirty of {frames}, background {background}");
        f.sync_data().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), data);
    }
}
