//! The per-device submission model (SAFS §3.1): one I/O thread per device owns that device's
//! requests and its own engine (its own rings, for io_uring). Callers hand requests over a
//! channel and sleep until their replies come back; a device thread drains everything queued
//! for it into one batch. The other model, the default, lets every calling thread submit on
//! its own (ScalaCache's trimmed path): no hand-off, but no per-device batching either.

use crate::choice::choice;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::{read_as_batch, write_as_batch, EngineQueue, IoEngine, IoReq, QueueCompletion};
use crate::io::device::BackingFile;

/// Requests a device thread gathers into one batch at most.
const MAX_BATCH: usize = 64;

choice! {
    /// Who submits I/O: the calling thread, or one thread per device.
    pub enum SubmitKind("submission model") {
        /// The thread that needs the I/O submits it (default).
        #[default]
        Caller = "none",
        /// One I/O thread per device submits everything for that device.
        PerDevice = "per-device",
    }
}

/// A request handed to a device thread. Its pointers stay valid until the reply: the sender
/// either waits for it (`run_batch`) or holds the buffers and the file until it reaps it (a
/// queue's caller, per `EngineQueue::push_read`'s contract).
struct Job {
    file: *const BackingFile,
    offset: u64,
    iov: Vec<libc::iovec>,
    write: bool,
    reply: Reply,
}

// SAFETY: see `Job`: what the pointers name outlives the job, and only the device thread
// touches it until the reply is sent.
unsafe impl Send for Job {}

enum Reply {
    /// Slot `usize` of a waiting batch.
    Batch(Arc<Batch>, usize),
    /// A queue's completion under this tag.
    Queue(Sender<QueueCompletion>, u64),
}

/// A batch whose caller sleeps until every result is in.
struct Batch {
    results: Mutex<(Vec<Option<io::Result<usize>>>, usize)>,
    done: Condvar,
}

/// One thread per device, each with its own engine.
pub struct DeviceThreads {
    shared: Arc<Shared>,
    name: &'static str,
}

struct Shared {
    devices: Vec<Mutex<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channels ends the threads once they have answered everything.
        self.devices.clear();
        for t in self.threads.get_mut().map(std::mem::take).unwrap_or_default() {
            if t.join().is_err() {
                log::error!("an I/O thread panicked");
            }
        }
    }
}

impl DeviceThreads {
    /// Starts one thread per device, each with the engine `make` builds for it.
    pub fn start(devices: usize, mut make: impl FnMut() -> Arc<dyn IoEngine>) -> io::Result<Self> {
        let mut senders = Vec::with_capacity(devices);
        let mut threads = Vec::with_capacity(devices);
        let mut name = "psync";
        for d in 0..devices {
            let (tx, rx) = mpsc::channel::<Job>();
            let engine = make();
            name = engine.name();
            let t = std::thread::Builder::new()
                .name(format!("upcache-io-{d}"))
                .spawn(move || serve(&*engine, &rx))?;
            senders.push(Mutex::new(tx));
            threads.push(t);
        }
        let shared = Arc::new(Shared { devices: senders, threads: Mutex::new(threads) });
        Ok(DeviceThreads { shared, name: if name == "uring" { "uring+threads" } else { "psync+threads" } })
    }
}

impl Shared {
    fn send(&self, device: usize, job: Job) {
        let tx = self.devices[device % self.devices.len()].lock().unwrap_or_else(|e| e.into_inner());
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            // The thread is gone (only while shutting down): answer here.
            answer(job.reply, Err(io::Error::other("the device's I/O thread has stopped")));
        }
    }
}

fn answer(reply: Reply, result: io::Result<usize>) {
    match reply {
        Reply::Batch(b, i) => {
            let mut g = b.results.lock().unwrap_or_else(|e| e.into_inner());
            g.0[i] = Some(result);
            g.1 -= 1;
            if g.1 == 0 {
                b.done.notify_one();
            }
        }
        Reply::Queue(tx, tag) => {
            let _ = tx.send((tag, result)); // a dropped queue has stopped listening
        }
    }
}

/// A device thread: takes what is queued (at least one job), runs it as one batch, answers.
fn serve(engine: &dyn IoEngine, rx: &Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut reads: Vec<Vec<IoSliceMut<'_>>> = Vec::with_capacity(jobs.len());
        let mut writes: Vec<Vec<IoSlice<'_>>> = Vec::with_capacity(jobs.len());
        for j in &jobs {
            // SAFETY: per `Job`, each iovec names a buffer valid (and ours to write, for a
            // read) until we answer, which is after the batch below.
            let (r, w) = unsafe {
                if j.write {
                    (
                        Vec::new(),
                        j.iov
                            .iter()
                            .map(|v| {
                                IoSlice::new(std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len))
                            })
                            .collect(),
                    )
                } else {
                    (
                        j.iov
                            .iter()
                            .map(|v| {
                                IoSliceMut::new(std::slice::from_raw_parts_mut(
                                    v.iov_base as *mut u8,
                                    v.iov_len,
                                ))
                            })
                            .collect(),
                        Vec::new(),
                    )
                }
            };
            reads.push(r);
            writes.push(w);
        }
        let mut reqs: Vec<IoReq<'_, '_>> = jobs
            .iter()
            .zip(reads.iter_mut().zip(writes.iter()))
            .map(|(j, (r, w))| {
                // SAFETY: per `Job`, the backing file outlives the job.
                let file = unsafe { &*j.file };
                if j.write {
                    IoReq::Write { file, offset: j.offset, bufs: w }
                } else {
                    IoReq::Read { file, offset: j.offset, bufs: r }
                }
            })
            .collect();
        // A panicking engine must not leave callers asleep forever: they would hold range
        // locks and frames. (A panic with io_uring requests in flight cannot happen: the
        // engine aborts the process rather than unwind past them.)
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run_batch(&mut reqs)));
        drop(reqs);
        let mut results = match results {
            Ok(r) => r.into_iter(),
            Err(_) => {
                log::error!("an I/O engine panicked; its requests fail");
                Vec::new().into_iter()
            }
        };
        for j in jobs {
            let r = results.next().unwrap_or_else(|| Err(io::Error::other("the I/O engine gave no result")));
            answer(j.reply, r);
        }
    }
}

fn job(file: &BackingFile, offset: u64, iov: Vec<libc::iovec>, write: bool, reply: Reply) -> Job {
    Job { file, offset, iov, write, reply }
}

impl IoEngine for DeviceThreads {
    fn name(&self) -> &'static str {
        self.name
    }

    fn read_vectored(
        &self,
        file: &BackingFile,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<usize> {
        read_as_batch(self, file, offset, bufs)
    }

    fn write_vectored(&self, file: &BackingFile, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        write_as_batch(self, file, offset, bufs)
    }

    fn run_batch(&self, reqs: &mut [IoReq<'_, '_>]) -> Vec<io::Result<usize>> {
        let batch = Arc::new(Batch {
            results: Mutex::new((reqs.iter().map(|_| None).collect(), reqs.len())),
            done: Condvar::new(),
        });
        for (i, r) in reqs.iter_mut().enumerate() {
            let (file, offset, iov, write) = match r {
                IoReq::Read { file, offset, bufs } => (
                    *file,
                    *offset,
                    bufs.iter_mut()
                        .map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() })
                        .collect(),
                    false,
                ),
                IoReq::Write { file, offset, bufs } => (
                    *file,
                    *offset,
                    bufs.iter()
                        .map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() })
                        .collect(),
                    true,
                ),
            };
            self.shared.send(file.device(), job(file, offset, iov, write, Reply::Batch(batch.clone(), i)));
        }
        // Every buffer stays borrowed until each device thread has answered.
        let mut g = batch.results.lock().unwrap_or_else(|e| e.into_inner());
        while g.1 > 0 {
            g = batch.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.0.iter_mut().map(|r| r.take().expect("every request answered")).collect()
    }

    fn queue(&self, _depth: usize) -> Option<io::Result<Box<dyn EngineQueue>>> {
        let (tx, rx) = mpsc::channel();
        Some(Ok(Box::new(ThreadQueue { shared: self.shared.clone(), tx, rx, outstanding: 0 })))
    }
}

/// A queue whose reads go to the device threads and come back on a channel.
struct ThreadQueue {
    shared: Arc<Shared>,
    tx: Sender<QueueCompletion>,
    rx: Receiver<QueueCompletion>,
    outstanding: usize,
}

impl EngineQueue for ThreadQueue {
    unsafe fn push_read(&mut self, file: &BackingFile, offset: u64, bufs: &[*mut u8], len: usize, tag: u64) {
        let iov = bufs.iter().map(|&b| libc::iovec { iov_base: b.cast(), iov_len: len }).collect();
        self.outstanding += 1;
        self.shared.send(file.device(), job(file, offset, iov, false, Reply::Queue(self.tx.clone(), tag)));
    }

    fn reap(&mut self, min: usize, out: &mut Vec<QueueCompletion>) {
        let want = min.min(self.outstanding);
        let mut got = 0;
        while got < want {
            match self.rx.recv() {
                Ok(c) => {
                    out.push(c);
                    got += 1;
                    self.outstanding -= 1;
                }
                Err(_) => unreachable!("the queue holds a sender of its own channel"),
            }
        }
        while let Ok(c) = self.rx.try_recv() {
            out.push(c);
            self.outstanding -= 1;
        }
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}

impl Drop for ThreadQueue {
    fn drop(&mut self) {
        // The device threads may still write into buffers of reads in flight.
        let mut sink = Vec::new();
        while self.outstanding > 0 {
            self.reap(self.outstanding, &mut sink);
            sink.clear();
        }
    }
}
