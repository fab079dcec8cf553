//! Chunks of the frames' bytes made ready ahead of the clock hand. A claim that reaches a
//! chunk whose memory is not allocated allocates it (`chunk.rs`: 2 MiB of the segment zeroed,
//! about 0.5 ms here), and a process's first touch of a chunk maps it (`mapped.rs`, as long
//! again), each in the path of the miss or write that claims there: fio's random reads into a
//! fresh cache waited a millisecond at their 99th percentile where the kernel's, which
//! allocates a page at a time, waited 0.2. As the hand passes a quarter of a chunk, it asks
//! this process's preparer thread (started then) to allocate and map the next chunk, so the
//! hand finds it ready. It holds the segment's mapping only while it prepares, never the
//! attachment (whose files hold locks a reopen takes at once), and ends with it; a chunk it
//! has not reached yet is prepared by its claim, as before.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use super::layout::View;
use super::Inner;

/// Where in a chunk of `chunk` frames the hand asks for the next: early enough that the
/// preparer is done before the hand gets there, late enough that a claim of the chunk's first
/// frames has allocated it.
pub(crate) const fn ask_at(chunk: usize) -> usize {
    chunk / 4
}

#[derive(Default)]
struct State {
    /// The chunk to prepare next (only the latest asked for matters: the hand has moved on).
    wanted: Option<usize>,
    running: bool,
    /// The thread is preparing a chunk.
    busy: bool,
    /// Set when the attachment goes: the thread ends, and none starts again.
    stopped: bool,
    /// The thread could not start: claims prepare their chunks themselves.
    failed: bool,
}

/// A process's preparer thread and its request.
#[derive(Default)]
pub(crate) struct Preparer {
    state: Mutex<State>,
    /// Wakes the thread (a chunk asked for, or stop) and waiters for its idleness.
    asked: Condvar,
}

impl Preparer {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing a panic interrupts leaves the state inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for chunk `c` of `view`'s frames (the view of the attachment whose preparer this
    /// is) to be allocated and mapped, starting the thread if need be.
    pub(crate) fn ask(self: &Arc<Self>, view: &Arc<View>, c: usize) {
        let mut s = self.state();
        if s.stopped || s.failed {
            return;
        }
        s.wanted = Some(c);
        if !s.running {
            let (me, view) = (self.clone(), Arc::downgrade(view));
            let spawned = super::quiet::with_signals_blocked(|| {
                std::thread::Builder::new().name("upcache-prepare".into()).spawn(move || {
                    super::quiet::library_thread();
                    run(&me, &view);
                })
            });
            match spawned {
                Ok(_) => s.running = true,
                Err(e) => {
                    log::warn!("upcache: cannot start the shared cache's preparer thread ({e})");
                    s.failed = true;
                    return;
                }
            }
        }
        drop(s);
        self.asked.notify_all();
    }

    /// Ends the thread (the attachment goes), once it is done with the chunk it prepares, so
    /// that the attachment's last handle unmaps the segment; none starts again.
    pub(crate) fn stop(&self) {
        let mut s = self.state();
        s.stopped = true;
        self.asked.notify_all();
        while s.running {
            s = self.asked.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The thread ends (it holds the view no more).
    fn end(&self) {
        let mut s = self.state();
        (s.stopped, s.running) = (true, false);
        self.asked.notify_all();
    }

    /// The next chunk asked for, after the last was prepared; None once stopped.
    fn next(&self) -> Option<usize> {
        let mut s = self.state();
        s.busy = false;
        self.asked.notify_all();
        loop {
            if s.stopped {
                return None;
            }
            if let Some(c) = s.wanted.take() {
                s.busy = true;
                return Some(c);
            }
            s = self.asked.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until no chunk is asked for or being prepared.
    #[cfg(test)]
    fn wait_idle(&self) {
        let mut s = self.state();
        while s.running && (s.busy || s.wanted.is_some()) {
            s = self.asked.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

fn run(preparer: &Preparer, weak: &Weak<View>) {
    /// Ends the thread however it ends: a panic must not leave a detach waiting for it.
    struct End<'a>(&'a Preparer);
    impl Drop for End<'_> {
        fn drop(&mut self) {
            self.0.end();
        }
    }
    let _end = End(preparer);
    while let Some(c) = preparer.next() {
        let Some(view) = weak.upgrade() else { break };
        let f = c * view.page_size.chunk_frames();
        if f < view.n_frames && view.reserve(f) {
            view.map_ahead(f);
        }
    }
}

impl Inner {
    /// As the hand passes frame `f`: at a chunk's first frame, records the chunk in use (for the
    /// huge-page passes: one prepared was mapped here with no touch of it); at [`ask_at`], asks
    /// the preparer for the next chunk if it is not yet allocated: a cache that grows. (A
    /// chunk allocated long ago that this process has not mapped yet it maps at its first
    /// touch, as before: a short-lived process would map chunks it never uses.)
    #[inline]
    pub(crate) fn passing(&self, f: usize) {
        let chunk = self.view.page_size.chunk_frames();
        if f.is_multiple_of(chunk) {
            self.view.entered(f / chunk);
        } else if f % chunk == ask_at(chunk) {
            let next = f / chunk + 1;
            // Not a chunk out of use (past a resize's size, or a node's share of it).
            if next * chunk < self.view.n_frames
                && self.in_use((next * chunk) as u32)
                && !self.view.chunk_allocated(next)
            {
                self.preparer.ask(&self.view, next);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::chunk::CHUNK_FRAMES;
    use super::super::tests::small;
    use super::super::{SharedCache, SharedConfig};
    use super::*;

    /// A fresh cache filled from its first frame: every chunk the hand reaches past the first
    /// was allocated and mapped by the preparer before the hand got there.
    #[test]
    fn the_hand_finds_its_next_chunks_ready() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let chunks = 4;
        std::fs::write(&p, vec![5u8; chunks * CHUNK_FRAMES * 4096]).unwrap();
        let config = SharedConfig { memory: (chunks * CHUNK_FRAMES * 4096) as u64, readahead: 0, ..small() };
        let cache = SharedCache::create(&config).unwrap();
        let inner = &cache.inner;
        let ready = |c: usize| inner.view.chunk_allocated(c) && inner.view.chunk_mapped(c * CHUNK_FRAMES);
        assert!(!ready(1), "a fresh cache's chunks wait for their first use");
        let f = cache.open_path(&p, false).unwrap();
        let (mut page, mut read) = (vec![0u8; 4096], 0);
        for c in 0..chunks - 1 {
            // A miss each (no readahead), so the hand claims one frame a page, in order.
            while read <= c * CHUNK_FRAMES + ask_at(CHUNK_FRAMES) {
                f.read_at(&mut page, (read * 4096) as u64).unwrap();
                read += 1;
            }
            // The reads go on only once the preparer has done: asked at `ASK_AT`, it leaves
            // the chunk ready, with no read of it.
            inner.preparer.wait_idle();
            assert!(ready(c + 1), "chunk {} allocated and mapped", c + 1);
        }
        assert_eq!(page, vec![5u8; 4096]);
    }
}
