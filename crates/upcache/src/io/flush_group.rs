//! Syncs of one backing file, and the errors of their flushes.
//!
//! The kernel reports a write-back error once per open file: of two threads that `fdatasync`
//! one backing file while its device loses a write, one gets the error and the other success,
//! for data that may be the one that was lost. So each flush is numbered, a failure is
//! remembered with its number, and a sync reports the failure of any flush that started after
//! it arrived (such a flush was covering its writes), not only its own. Since such a flush
//! may end after the sync's own, the sync waits for every flush that started between its
//! arrival and the end of its own flush, so none can take its error after it returned.
//!
//! That wait is only for buffered files ([`FlushGroup::new`]). With O_DIRECT, nothing our
//! data needs is left in the kernel's page cache: a failed write is reported to its writer
//! (and kept dirty by the cache), and an `fdatasync` returns its own device flush's and
//! journal commit's errors to its own caller, recording none in the file's errseq for another
//! caller to take. Our own flush started after our writes completed, so its result is the
//! whole answer for our data, as the kernel gives each open file. A failure that another
//! covering flush reports before ours ends is still passed on (stricter than the kernel, and
//! free); only the wait for those still running is skipped, which kept two threads'
//! `write` + `sync_data` in step at the slower of their flushes.
//!
//! Why the syncs do not share flushes: a flush serves a sync only if it started after the
//! sync's writes completed, so one that is running when a sync arrives cannot serve it, and
//! waiting for the next one (group commit) would serialize flushes that now run side by side;
//! the kernel's block layer already merges flushes that wait for one in flight.

use std::io;

use crate::sync::{self, Condvar, Mutex};

/// The flushes of one backing file.
#[derive(Debug)]
pub struct FlushGroup {
    state: Mutex<State>,
    /// A flush ended: syncs waiting for it look again.
    ended: Condvar,
    /// The kernel may report our data's write-back error to another caller's flush (a
    /// buffered file's errseq), so a sync waits for the covering flushes still running.
    errors_shared: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Flushes started so far; each is numbered by the count after its start.
    started: u64,
    /// The numbers of the flushes running.
    running: Vec<u64>,
    /// The highest-numbered flush that failed, and how.
    failed: Option<(u64, io::ErrorKind, Option<i32>, String)>,
    /// Syncs waiting for flushes of others: an ending flush wakes them if there are any
    /// (counted under the mutex, so none is missed).
    waiting: usize,
}

impl FlushGroup {
    /// The flushes of a backing file opened buffered (`buffered`: its write-back errors are
    /// in the kernel's errseq, which one caller's flush may take for all) or with O_DIRECT.
    pub fn new(buffered: bool) -> Self {
        FlushGroup { state: Mutex::new(State::default()), ended: Condvar::new(), errors_shared: buffered }
    }

    /// Makes everything written before the call durable with `flush`; fails if it fails, or
    /// if another flush that started after this call began has failed (on a buffered file,
    /// waiting for those that started before this one ended: they may hold this sync's error).
    pub fn sync(&self, flush: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let (after, me) = {
            let mut s = sync::lock(&self.state);
            s.started += 1;
            let me = s.started;
            s.running.push(me);
            (me - 1, me)
        };
        // A flush that panics still ends, as a failure, so no sync waits for it forever.
        let ended = EndOnUnwind { group: self, me };
        let r = flush();
        std::mem::forget(ended);
        let mut s = sync::lock(&self.state);
        s.running.retain(|&n| n != me);
        if let Err(e) = &r {
            if !matches!(&s.failed, Some(f) if f.0 > me) {
                s.failed = Some((me, e.kind(), e.raw_os_error(), e.to_string()));
            }
        }
        // Only if someone waits: a notify is a syscall even with no waiter, once per sync.
        if s.waiting > 0 {
            self.ended.notify_all();
        }
        // Flushes that started after we arrived and before ours ended: the kernel may have
        // reported our data's error to any of them.
        let end = s.started;
        while self.errors_shared && s.running.iter().any(|&n| n > after && n <= end) {
            s.waiting += 1;
            s = sync::wait(&self.ended, s);
            s.waiting -= 1;
        }
        match (&s.failed, r) {
            (Some((n, kind, raw, msg)), Ok(())) if *n > after => Err(match raw {
                Some(code) => io::Error::from_raw_os_error(*code),
                None => io::Error::new(*kind, msg.clone()),
            }),
            (_, r) => r,
        }
    }
}

/// Ends flush `me` as failed if its `flush` unwinds (forgotten when it returns).
struct EndOnUnwind<'a> {
    group: &'a FlushGroup,
    me: u64,
}

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        let mut s = sync::lock(&self.group.state);
        s.running.retain(|&n| n != self.me);
        if !matches!(&s.failed, Some(f) if f.0 > self.me) {
            s.failed = Some((self.me, io::ErrorKind::Other, Some(libc::EIO), "a flush panicked".into()));
        }
        if s.waiting > 0 {
            self.group.ended.notify_all();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    /// Two syncs side by side: the one whose own flush succeeds still fails if the other's,
    /// which started after it arrived, failed; a later sync is not blamed.
    #[test]
    fn a_concurrent_flush_failure_reaches_every_sync_it_covered() {
        let g = Arc::new(FlushGroup::new(true));
        let (started_tx, started_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let first = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.sync(|| {
                    started_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    Ok(()) // the kernel reported the error to the other caller only
                })
            })
        };
        started_rx.recv().unwrap();
        let e = g.sync(|| Err(io::Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        go_tx.send(()).unwrap();
        let e = first.join().unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "the failure of a flush that covered it");
        g.sync(|| Ok(())).unwrap();
    }

    /// A flush that panics ends as a failure: nothing waits for it, and a sync that arrived
    /// before it reports it.
    #[test]
    fn a_panicking_flush_ends_as_a_failure() {
        let g = FlushGroup::new(true);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.sync(|| panic!("engine bug"))));
        assert!(sync::lock(&g.state).running.is_empty());
        assert_eq!(sync::lock(&g.state).failed.as_ref().map(|f| f.0), Some(1));
        g.sync(|| Ok(())).unwrap();
    }

    /// Two syncs of `g`: the first one's flush runs until the other's has started; the
    /// other's flush fails with EIO once `fail` is sent. The first sync's result comes on
    /// `done`.
    struct CoveringRace {
        done: mpsc::Receiver<io::Result<()>>,
        fail: mpsc::Sender<()>,
        first: std::thread::JoinHandle<()>,
        other: std::thread::JoinHandle<io::Result<()>>,
    }

    fn covering_race(g: &Arc<FlushGroup>) -> CoveringRace {
        let (in_flush_tx, in_flush_rx) = mpsc::channel();
        let (other_started_tx, other_started_rx) = mpsc::channel();
        let (fail_tx, fail_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let first = {
            let g = g.clone();
            std::thread::spawn(move || {
                let r = g.sync(|| {
                    in_flush_tx.send(()).unwrap();
                    other_started_rx.recv().unwrap();
                    Ok(())
                });
                done_tx.send(r).unwrap();
            })
        };
        let other = {
            let g = g.clone();
            std::thread::spawn(move || {
                in_flush_rx.recv().unwrap();
                g.sync(|| {
                    other_started_tx.send(()).unwrap();
                    fail_rx.recv().unwrap();
                    Err(io::Error::from_raw_os_error(libc::EIO))
                })
            })
        };
        CoveringRace { done: done_rx, fail: fail_tx, first, other }
    }

    /// A flush that started while a sync's own flush ran, and fails only after that flush
    /// succeeded: the sync waits for it and reports its failure (the kernel may have given it
    /// the error of the sync's data).
    #[test]
    fn a_sync_waits_for_a_covering_flush_that_fails_after_its_own() {
        let g = Arc::new(FlushGroup::new(true));
        let CoveringRace { done: done_rx, fail: fail_tx, first, other } = covering_race(&g);
        // The other flush fails once the first sync has either returned or is waiting for it.
        let early = loop {
            if let Ok(r) = done_rx.try_recv() {
                break Some(r);
            }
            if sync::lock(&g.state).waiting > 0 {
                break None;
            }
            std::thread::yield_now();
        };
        fail_tx.send(()).unwrap();
        assert!(other.join().unwrap().is_err());
        let r = early.unwrap_or_else(|| done_rx.recv().unwrap());
        first.join().unwrap();
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO), "the later failure of a covering flush");
    }

    /// On an O_DIRECT file a sync does not wait for a covering flush still running (the
    /// kernel cannot hand it our data's error), but still reports one that failed first.
    #[test]
    fn a_direct_file_sync_does_not_wait_for_a_later_ending_flush() {
        let g = Arc::new(FlushGroup::new(false));
        let CoveringRace { done: done_rx, fail: fail_tx, first, other } = covering_race(&g);
        // The first sync returns while the other flush is still running (it runs until told);
        // a sync that waited for it would never return, so the watchdog fails the test.
        let r = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        fail_tx.send(()).unwrap();
        assert!(other.join().unwrap().is_err());
        first.join().unwrap();
        let r = r.expect("the sync waited for a flush it did not need");
        assert!(r.is_ok(), "its own flush covered its data: {r:?}");

        // A covering flush that failed before ours ended is reported all the same.
        let (in_flush_tx, in_flush_rx) = mpsc::channel();
        let (other_done_tx, other_done_rx) = mpsc::channel();
        let first = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.sync(|| {
                    in_flush_tx.send(()).unwrap();
                    other_done_rx.recv().unwrap();
                    Ok(())
                })
            })
        };
        in_flush_rx.recv().unwrap();
        assert!(g.sync(|| Err(io::Error::from_raw_os_error(libc::EIO))).is_err());
        other_done_tx.send(()).unwrap();
        let e = first.join().unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "the failure of a flush that covered it");
    }
}
