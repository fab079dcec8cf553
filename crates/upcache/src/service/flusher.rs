//! Background flusher threads.
//!
//! Each flusher sleeps until the dirty count passes the background threshold, then writes back
//! until the count falls a sixteenth under it; one of them also looks every expiry interval
//! for files dirty for longer than the expiry (`cache/writeback/expire.rs`). With streams,
//! flushers take files with dirty streams from the write-back list (`file/streams.rs`);
//! without, they scan disjoint chunks of the frame table. Either way they write in parallel. They also run metadata-log checkpoints.
//! Kicked by a miss that found free frames running low, they also reclaim clean pages into the
//! pool (`cache/placement/global.rs`). They work through [`FlushWork`].

use std::thread::JoinHandle;

use crate::cache::background::FlushWork;
use crate::cache::writeback::Wake;
use crate::error::{Error, Result};
use crate::sync::{Arc, Ordering};

/// The running flusher threads.
pub(crate) struct Flushers<W: FlushWork> {
    work: Arc<W>,
    threads: Vec<JoinHandle<()>>,
}

impl<W: FlushWork> Flushers<W> {
    pub(crate) fn start(work: &Arc<W>) -> Result<Flushers<W>> {
        let mut threads = Vec::new();
        for i in 0..work.flusher_threads() {
            let w = work.clone();
            let t = std::thread::Builder::new()
                .name(format!("upcache-flush-{i}"))
                .spawn(move || w.failures().keep_running("flusher", || run(&*w)))
                .map_err(|e| Error::io("spawn flusher thread", e))?;
            threads.push(t);
        }
        Ok(Flushers { work: work.clone(), threads })
    }

    /// Stops and joins every flusher.
    pub(crate) fn stop(&mut self) {
        let wb = self.work.writeback();
        // Release: pairs with the Acquire in the flusher loop and wait_for_kick.
        wb.shutdown.store(true, Ordering::Release);
        wb.kick_flushers();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("a flusher thread panicked");
            }
        }
    }
}

impl<W: FlushWork> Drop for Flushers<W> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(work: &dyn FlushWork) {
    let wb = work.writeback();
    while !wb.shutdown.load(Ordering::Acquire) {
        let wake = wb.wait_for_kick(wb.expiry_interval());
        if wb.shutdown.load(Ordering::Acquire) {
            break;
        }
        work.checkpoint_if_wanted();
        // Checked on every wake: under steady pressure the period never passes.
        let now = wb.now_ms();
        if wb.take_expiry_scan(now) {
            work.write_back_expired(now);
        }
        if wake == Wake::Spurious {
            continue;
        }
        // Woken by the period, write back only if a kick was missed.
        let stop_at = match wake {
            Wake::Period if wb.dirty() <= wb.background => usize::MAX,
            _ => wb.background_stop(),
        };
        while wb.dirty() > stop_at && !wb.shutdown.load(Ordering::Acquire) {
            if work.flush_dirty(stop_at) == 0 {
                break; // nothing writable now (all failing or locked); wait for the next kick
            }
        }
        work.reclaim();
    }
}
