//! Syncs of one backing file, and the errors of their flushes.
//!
//! The kernel reports a write-back error once per open file: of two threads that `fdatasync`
//! one backing file while its device loses a write, one gets the error and the other success,
//! for data that may be the one that was lost. So each flush is numbered, a failure is
//! remembered with its number, and a sync reports the failure of any flush that started after
//! it arrived (such a flush was covering its writes), not only its own.
//!
//! Why the syncs do not share flushes: a flush serves a sync only if it started after the
//! sync's writes completed, so one that is running when a sync arrives cannot serve it, and
//! waiting for the next one (group commit) would serialize flushes that now run side by side;
//! the kernel's block layer already merges flushes that wait for one in flight.

use std::io;

use crate::sync::{self, Mutex};

/// The flushes of one backing file.
#[derive(Debug, Default)]
pub struct FlushGroup {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Flushes started so far; each is numbered by the count at its start.
    started: u64,
    /// The highest-numbered flush that failed, and how.
    failed: Option<(u64, io::ErrorKind, Option<i32>, String)>,
}

impl FlushGroup {
    /// Makes everything written before the call durable with `flush`; fails if it fails, or
    /// if another flush that started after this call began has failed by the time it ends.
    /// (One that fails later, after this sync returned, is missed: the kernel may have told
    /// only that one of an error in this sync's data. Closing that gap would mean waiting
    /// for every overlapping flush.)
    pub fn sync(&self, flush: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let after = {
            let mut s = sync::lock(&self.state);
            s.started += 1;
            s.started - 1
        };
        let r = flush();
        let mut s = sync::lock(&self.state);
        if let Err(e) = &r {
            // This flush's number is above `after`; keep the highest failure.
            if !matches!(&s.failed, Some(f) if f.0 > after + 1) {
                s.failed = Some((after + 1, e.kind(), e.raw_os_error(), e.to_string()));
            }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    /// Two syncs side by side: the one whose own flush succeeds still fails if the other's,
    /// which started after it arrived, failed; a later sync is not blamed.
    #[test]
    fn a_concurrent_flush_failure_reaches_every_sync_it_covered() {
        let g = Arc::new(FlushGroup::default());
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
}
