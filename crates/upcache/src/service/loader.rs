//! The loader thread: takes windows of pages to read ahead, loads their missing pages in
//! runs on its own I/O queue, and ends the loads as the reads complete. It works through
//! [`ReadaheadWork`] (the cache core's side is `cache/readahead.rs`).

use std::thread::JoinHandle;

use crate::cache::background::ReadaheadWork;
use crate::cache::readahead::ClaimedRun;
use crate::error::{Error, Result};
use crate::io::engine::QueueCompletion;
use crate::sync::Arc;

/// Reads the loader keeps in flight at most; more windows wait in its inbox.
const QUEUE_DEPTH: usize = 64;

/// The running loader thread.
pub(crate) struct Loader<W: ReadaheadWork> {
    work: Arc<W>,
    thread: Option<JoinHandle<()>>,
}

impl<W: ReadaheadWork> Loader<W> {
    pub(crate) fn start(work: &Arc<W>) -> Result<Loader<W>> {
        let w = work.clone();
        let thread = std::thread::Builder::new()
            .name("upcache-readahead".into())
            .spawn(move || w.failures().keep_running("readahead", || run(&*w)))
            .map_err(|e| Error::io("spawn readahead thread", e))?;
        Ok(Loader { work: work.clone(), thread: Some(thread) })
    }

    /// Stops the thread once its reads in flight have completed.
    pub(crate) fn stop(&mut self) {
        self.work.inbox().stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the readahead thread panicked");
            }
        }
    }
}

impl<W: ReadaheadWork> Drop for Loader<W> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(work: &dyn ReadaheadWork) {
    let inbox = work.inbox();
    let mut queue = work.queue(QUEUE_DEPTH);
    let page_size = work.page_size();
    let mut slots: Vec<Option<ClaimedRun>> = Vec::new();
    let mut done: Vec<QueueCompletion> = Vec::new();
    loop {
        let window = inbox.take(queue.outstanding(), QUEUE_DEPTH);
        let stopping = inbox.stopped();
        if let Some(w) = window.filter(|_| !stopping) {
            work.claim_window(&w, &mut |run, ptrs| {
                let slot = match slots.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        slots.push(None);
                        slots.len() - 1
                    }
                };
                let (file, dev, offset) = (run.file.clone(), run.dev, run.offset);
                slots[slot] = Some(run);
                // SAFETY: by `ReadaheadWork`'s contract every frame is a whole page, pinned,
                // LOCKED and fresh: nobody else touches its bytes until we end the run, which is
                // after the queue reports this read (the loader drains its queue before it
                // exits).
                unsafe { queue.push_read(&file.backing[dev], offset, ptrs, page_size, slot as u64) };
            });
        }
        if queue.outstanding() > 0 {
            queue.reap(1, &mut done);
            for (tag, read) in done.drain(..) {
                let run = slots[tag as usize].take().expect("a completion has its run");
                work.end_readahead(run, read);
            }
        } else if stopping {
            return;
        }
    }
}
