//! Futures for reads, writes and syncs that any executor can poll ([`AsyncIo`]), on a
//! [`crate::Cache`] or a [`SharedCache`] ([`AsyncIo::on_shared`]): one driver, over either
//! engine's queue ([`IoQueue`], [`SharedQueue`]).
//!
//! # How a request completes
//! A future hands its request to the `AsyncIo`'s driver thread through an inbox and returns
//! `Pending`; the driver runs the requests on its own [`IoQueue`] (a device read in flight on
//! its io_uring, many at a time) and, when one completes, stores the result in the future's
//! slot and wakes its waker. So no executor thread ever blocks on I/O and there is no thread
//! per request: one driver for reads and writes and one syncer for syncs, per `AsyncIo`.
//!
//! # Why submissions do not wait for a completion
//! The driver sleeps in the queue's `wait` while reads are in flight. New requests ring an
//! eventfd whose read the queue keeps armed on its ring (`IoQueue::set_doorbell`), which ends
//! that wait, so a request is issued at once, not when an earlier one completes. Engines
//! without a ring run reads as they are pushed, so their waits never sleep on the device.
//!
//! # Why syncs have a thread of their own
//! A sync writes back and flushes (milliseconds); on the driver it would hold up every read
//! behind it. The syncer runs them one after another, as `fsync`s of one thread would.

use std::collections::VecDeque;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use super::file::File;
use super::queue::{Completion, IoQueue};
use crate::error::{Error, Result};
#[cfg(not(loom))]
use crate::shared::{SharedCache, SharedFile, SharedQueue};

/// Which engine an [`AsyncIo`] drives: [`InProcess`] (a [`crate::Cache`]'s [`File`]s) or
/// [`OnShared`] (a [`SharedCache`]'s `Arc<SharedFile>`s). Sealed: the two are all there is.
pub trait AioEngine: sealed::Engine {}

/// An [`AsyncIo`] of a [`crate::Cache`]: its futures take [`File`]s.
#[derive(Debug)]
pub struct InProcess;

/// An [`AsyncIo`] of a [`SharedCache`] ([`AsyncIo::on_shared`]): its futures take
/// `Arc<SharedFile>`s, and its reads load on a [`SharedQueue`].
#[derive(Debug)]
pub struct OnShared;

impl AioEngine for InProcess {}
// The shared cache is left out of loom builds.
#[cfg(not(loom))]
impl AioEngine for OnShared {}

mod sealed {
    use super::*;

    /// What the driver needs of an engine: its file handle, its queue, and the checks the
    /// queue would make, made at submission so the buffer goes back with the error.
    pub trait Engine: Send + Sync + 'static {
        type File: Clone + Send + Sync + 'static;
        type Queue: Send + 'static;
        /// Whether `file` is open in the cache the driver was started on (`cache`, its
        /// address), and the range within the largest file.
        fn check(cache: usize, file: &Self::File, offset: u64, len: usize) -> Result<()>;
        fn read(q: &mut Self::Queue, file: &Self::File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()>;
        fn write(q: &mut Self::Queue, file: &Self::File, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()>;
        fn wait(q: &mut Self::Queue, min: usize, out: &mut Vec<Completion>) -> usize;
        fn in_flight(q: &Self::Queue) -> usize;
        fn depth(q: &Self::Queue) -> usize;
        fn set_doorbell(q: &mut Self::Queue, fd: std::os::fd::RawFd);
        fn doorbell_works(q: &mut Self::Queue) -> bool;
        fn sync(file: &Self::File, all: bool) -> Result<()>;
    }

    /// The calls both engines' queues and files have alike, passed on.
    macro_rules! forward_to_queue {
        ($queue:ty, $file:ty) => {
            fn read(q: &mut $queue, file: &$file, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
                q.read(file, offset, buf, tag)
            }
            fn write(q: &mut $queue, file: &$file, offset: u64, buf: Vec<u8>, tag: u64) -> Result<()> {
                q.write(file, offset, buf, tag)
            }
            fn wait(q: &mut $queue, min: usize, out: &mut Vec<Completion>) -> usize {
                q.wait(min, out)
            }
            fn in_flight(q: &$queue) -> usize {
                q.in_flight()
            }
            fn depth(q: &$queue) -> usize {
                q.depth()
            }
            fn set_doorbell(q: &mut $queue, fd: std::os::fd::RawFd) {
                q.set_doorbell(fd)
            }
            fn doorbell_works(q: &mut $queue) -> bool {
                q.doorbell_works()
            }
            fn sync(file: &$file, all: bool) -> Result<()> {
                if all {
                    file.sync_all()
                } else {
                    file.sync_data()
                }
            }
        };
    }

    impl Engine for InProcess {
        type File = File;
        type Queue = IoQueue;
        fn check(cache: usize, file: &File, offset: u64, len: usize) -> Result<()> {
            file.engine_file().check_queued(cache, offset, len)
        }
        forward_to_queue!(IoQueue, File);
    }

    #[cfg(not(loom))]
    impl Engine for OnShared {
        type File = Arc<SharedFile>;
        type Queue = SharedQueue;
        fn check(cache: usize, file: &Arc<SharedFile>, offset: u64, len: usize) -> Result<()> {
            file.check_queued(cache, offset, len)
        }
        forward_to_queue!(SharedQueue, Arc<SharedFile>);
    }
}

/// Asynchronous reads, writes and syncs as [`Future`]s, for tokio, async-std or any
/// executor: each is woken from the completion, and none blocks the thread that polls it.
/// Made by [`crate::Cache::async_io`]; cheap to clone (clones share the driver). Requests
/// beyond the depth wait in line. Dropping the last clone waits for the requests still
/// queued or running, then stops the driver.
///
/// The driver copies writes into the cache itself, so a write that must wait (for readers
/// of its pages, a range lock, or dirty throttling) holds up the requests behind it; as with
/// the blocking calls, a task must not write a page it holds a [`crate::PageRef`] of. Wakers
/// are called on the driver's thread and must not block. If a driver thread panics (a bug),
/// its futures fail with `ErrorKind::Internal` rather than wait forever.
///
/// ```
/// # let tmp = tempfile::tempdir()?;
/// # let cache = upcache::Cache::create(upcache::Config::new([tmp.path()], 16 << 20))?;
/// # // The simplest executor: poll, and park until woken.
/// # fn block_on<T>(fut: impl std::future::Future<Output = T>) -> T {
/// #     struct Unpark(std::thread::Thread);
/// #     impl std::task::Wake for Unpark {
/// #         fn wake(self: std::sync::Arc<Self>) { self.0.unpark() }
/// #     }
/// #     let waker = std::sync::Arc::new(Unpark(std::thread::current())).into();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut fut = std::pin::pin!(fut);
/// #     loop {
/// #         if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) { return v; }
/// #         std::thread::park();
/// #     }
/// # }
/// let f = cache.create_file("f")?;
/// let aio = cache.async_io(64)?;
/// let (written, _buf) = block_on(aio.write(&f, 0, b"hello".to_vec()));
/// assert_eq!(written?, 5);
/// block_on(aio.sync_data(&f))?;
/// let (read, buf) = block_on(aio.read(&f, 0, vec![0; 5]));
/// assert_eq!((read?, &buf[..]), (5, &b"hello"[..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AsyncIo<E: AioEngine = InProcess> {
    handle: Arc<Handle<E>>,
}

impl<E: AioEngine> Clone for AsyncIo<E> {
    fn clone(&self) -> Self {
        AsyncIo { handle: self.handle.clone() }
    }
}

impl<E: AioEngine> std::fmt::Debug for AsyncIo<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncIo").field("depth", &self.handle.depth).finish()
    }
}

/// What a request's future waits on: the result, once the driver stores it, and the waker
/// to call then.
struct Slot<T> {
    state: Mutex<(Option<T>, Option<Waker>)>,
}

impl<T> Slot<T> {
    fn new() -> Arc<Self> {
        Arc::new(Slot { state: Mutex::new((None, None)) })
    }

    /// Stores the result and wakes the future (outside the lock). A waker that panics is
    /// the executor's bug; it must not stop the driver, whose other futures would hang.
    fn complete(&self, value: T) {
        let waker = {
            let mut s = lock(&self.state);
            s.0 = Some(value);
            s.1.take()
        };
        if let Some(w) = waker {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake())).is_err() {
                log::error!("a waker panicked in upcache's async I/O driver");
            }
        }
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = lock(&self.state);
        match s.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                match &mut s.1 {
                    Some(w) => w.clone_from(cx.waker()),
                    None => s.1 = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// A read's or write's result: bytes moved or the error, and the buffer back.
type IoResult = (Result<usize>, Vec<u8>);

/// What a future gets if its request is dropped unfinished (its thread died).
trait Stopped {
    fn stopped() -> Self;
}

fn stopped_error() -> Error {
    Error::new(crate::error::ErrorKind::Internal, "upcache's async I/O thread stopped (see the log)")
}

impl Stopped for IoResult {
    fn stopped() -> Self {
        (Err(stopped_error()), Vec::new())
    }
}

impl Stopped for Result<()> {
    fn stopped() -> Self {
        Err(stopped_error())
    }
}

/// The side of a slot that completes it, exactly once: dropped unfinished (a panic in the
/// driver, a request refused because it is gone), it completes the future with an error, so
/// no future waits forever.
struct Completer<T: Stopped>(Option<Arc<Slot<T>>>);

impl<T: Stopped> Completer<T> {
    fn complete(mut self, value: T) {
        if let Some(slot) = self.0.take() {
            slot.complete(value);
        }
    }
}

impl<T: Stopped> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.complete(T::stopped());
        }
    }
}

/// A request for the driver.
struct Op<F> {
    write: bool,
    file: F,
    offset: u64,
    buf: Vec<u8>,
    done: Completer<IoResult>,
}

/// The driver's inbox.
struct Inbox<F> {
    ops: VecDeque<Op<F>>,
    /// The last `AsyncIo` is gone: finish what is queued and running, then stop.
    closing: bool,
    /// The driver sleeps in its queue's wait (ring the doorbell to wake it), not on `ready`.
    in_ring: bool,
    /// The driver is gone (it panicked): requests fail at once.
    dead: bool,
}

/// A sync for the syncer: the file, whether metadata too (`sync_all`), and its completer.
type SyncOp<F> = (F, bool, Completer<Result<()>>);

/// The syncer's inbox.
struct SyncInbox<F> {
    files: VecDeque<SyncOp<F>>,
    closing: bool,
    /// The syncer is gone (it panicked): syncs fail at once.
    dead: bool,
}

// Not derived: a derive would ask `F: Default`.
impl<F> Default for Inbox<F> {
    fn default() -> Self {
        Inbox { ops: VecDeque::new(), closing: false, in_ring: false, dead: false }
    }
}

impl<F> Default for SyncInbox<F> {
    fn default() -> Self {
        SyncInbox { files: VecDeque::new(), closing: false, dead: false }
    }
}

struct Shared<F> {
    inbox: Mutex<Inbox<F>>,
    ready: Condvar,
    syncs: Mutex<SyncInbox<F>>,
    sync_ready: Condvar,
    /// The eventfd that ends the driver's wait in its ring.
    doorbell: OwnedFd,
}

impl<F> Shared<F> {
    fn ring(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our own open eventfd.
        unsafe { libc::write(self.doorbell.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// Owned by every `AsyncIo` clone; the last one's drop stops the threads.
struct Handle<E: AioEngine> {
    shared: Arc<Shared<E::File>>,
    /// The cache's address, which files must match (`Engine::check`).
    cache: usize,
    depth: usize,
    threads: Vec<JoinHandle<()>>,
}

impl<E: AioEngine> Drop for Handle<E> {
    fn drop(&mut self) {
        lock(&self.shared.inbox).closing = true;
        self.shared.ready.notify_one();
        self.shared.ring();
        lock(&self.shared.syncs).closing = true;
        self.shared.sync_ready.notify_one();
        for t in self.threads.drain(..) {
            // The last clone can be dropped on one of our own threads (a waker that drops the
            // task owning it): that thread ends by itself once its inbox is empty.
            if t.thread().id() == std::thread::current().id() {
                continue;
            }
            if t.join().is_err() {
                log::error!("an upcache async I/O thread panicked");
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere poisoned it: the data is still consistent (every update is one step).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(not(loom))]
impl AsyncIo<OnShared> {
    /// [`crate::Cache::async_io`] for a shared cache: reads, writes and syncs of its files
    /// as `Future`s, up to `depth` reads and writes in flight (1 to 4096) on a
    /// [`SharedQueue`] (`SharedCache::queue`) of the driver thread's.
    pub fn on_shared(cache: &SharedCache, depth: usize) -> Result<Self> {
        AsyncIo::start(cache.address(), cache.queue(depth)?)
    }
}

impl AsyncIo<InProcess> {
    /// [`crate::Cache::async_io`]: the Future API over a queue of `engine`'s.
    pub(crate) fn on(engine: &SharedCache, depth: usize) -> Result<Self> {
        AsyncIo::start(engine.address(), IoQueue::new(engine.queue(depth)?))
    }
}

impl<E: AioEngine> AsyncIo<E> {
    /// Starts the driver (with `queue`, `depth` requests in flight) and the syncer, for files
    /// of the cache at address `cache`.
    pub(crate) fn start(cache: usize, mut queue: E::Queue) -> Result<Self> {
        // SAFETY: eventfd takes no pointers; the result is checked before use.
        // Blocking: kernels before 5.8 completed a ring's read of a non-blocking eventfd with
        // EAGAIN instead of waiting for a write.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("make the async driver's eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let doorbell = unsafe { OwnedFd::from_raw_fd(fd) };
        E::set_doorbell(&mut queue, doorbell.as_raw_fd());
        let depth = E::depth(&queue);
        let shared = Arc::new(Shared {
            inbox: Mutex::default(),
            ready: Condvar::new(),
            syncs: Mutex::default(),
            sync_ready: Condvar::new(),
            doorbell,
        });
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| Error::io(format!("start the {name} thread"), e))
        };
        let driver = {
            let shared = shared.clone();
            spawn("upcache-aio", Box::new(move || drive::<E>(&shared, queue)))?
        };
        let syncer = {
            let shared = shared.clone();
            spawn("upcache-aio-sync", Box::new(move || sync_loop::<E>(&shared)))
        };
        let mut handle = Handle { shared, cache, depth, threads: vec![driver] };
        handle.threads.push(syncer?); // on failure, the handle's drop stops the driver
        Ok(AsyncIo { handle: Arc::new(handle) })
    }

    /// The most reads and writes in flight at once; more wait in line.
    pub fn depth(&self) -> usize {
        self.handle.depth
    }

    /// Reads up to `buf.len()` bytes at `offset` of `file` (short at end of file, as
    /// [`File::read_at`]); resolves to the count or the error, and the buffer.
    pub fn read(&self, file: &E::File, offset: u64, buf: Vec<u8>) -> IoFuture {
        self.submit(false, file, offset, buf)
    }

    /// Writes all of `buf` at `offset` of `file` into the cache (as [`File::write_at`]);
    /// resolves to the count or the error, and the buffer.
    pub fn write(&self, file: &E::File, offset: u64, buf: Vec<u8>) -> IoFuture {
        self.submit(true, file, offset, buf)
    }

    /// Makes `file`'s written data durable, as [`File::sync_data`], reporting write-back
    /// errors to `file`'s open description.
    pub fn sync_data(&self, file: &E::File) -> SyncFuture {
        self.sync(file, false)
    }

    /// As [`AsyncIo::sync_data`], with metadata too ([`File::sync_all`]).
    pub fn sync_all(&self, file: &E::File) -> SyncFuture {
        self.sync(file, true)
    }

    fn submit(&self, write: bool, file: &E::File, offset: u64, buf: Vec<u8>) -> IoFuture {
        let slot = Slot::new();
        let done = Completer(Some(slot.clone()));
        // What the queue would refuse, refused here with the buffer given back.
        if let Err(e) = E::check(self.handle.cache, file, offset, buf.len()) {
            done.complete((Err(e), buf));
            return IoFuture { slot };
        }
        let shared = &self.handle.shared;
        let in_ring = {
            let mut inbox = lock(&shared.inbox);
            if inbox.dead {
                return IoFuture { slot }; // `done` drops: the future fails at once
            }
            inbox.ops.push_back(Op { write, file: file.clone(), offset, buf, done });
            inbox.in_ring
        };
        if in_ring {
            shared.ring();
        } else {
            shared.ready.notify_one();
        }
        IoFuture { slot }
    }

    fn sync(&self, file: &E::File, all: bool) -> SyncFuture {
        let slot = Slot::new();
        let done = Completer(Some(slot.clone()));
        let shared = &self.handle.shared;
        {
            let mut syncs = lock(&shared.syncs);
            if syncs.dead {
                return SyncFuture { slot }; // `done` drops: the future fails at once
            }
            syncs.files.push_back((file.clone(), all, done));
        }
        shared.sync_ready.notify_one();
        SyncFuture { slot }
    }
}

/// A read or write of [`AsyncIo`]: resolves to the bytes moved or the error, and the
/// buffer. Dropping it does not cancel the request; its result is then dropped.
#[must_use = "a future does nothing unless polled; the request runs anyway"]
pub struct IoFuture {
    slot: Arc<Slot<IoResult>>,
}

impl Future for IoFuture {
    type Output = (Result<usize>, Vec<u8>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.slot.poll(cx)
    }
}

/// A sync of [`AsyncIo`].
#[must_use = "a future does nothing unless polled; the sync runs anyway"]
pub struct SyncFuture {
    slot: Arc<Slot<Result<()>>>,
}

impl Future for SyncFuture {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.slot.poll(cx)
    }
}

/// The driver: moves requests from the inbox onto the queue while it has room, sleeps in
/// the queue's wait (woken by completions or the doorbell) while requests are in flight,
/// and on the inbox's condvar while none are.
fn drive<E: AioEngine>(shared: &Shared<E::File>, mut queue: E::Queue) {
    // On any way out, a panic included: later requests fail at once, queued ones fail now
    // (their completers drop), and so do those in flight (`slots` drops as we unwind).
    let _dead = MarkDead(|| {
        let queued = {
            let mut inbox = lock(&shared.inbox);
            inbox.dead = true;
            std::mem::take(&mut inbox.ops)
        };
        drop(queued);
    });
    let depth = E::depth(&queue);
    let mut slots: Vec<Option<Completer<IoResult>>> = (0..depth).map(|_| None).collect();
    let mut free: Vec<u64> = (0..depth as u64).rev().collect();
    let mut done: Vec<Completion> = Vec::with_capacity(depth);
    let mut batch = Vec::with_capacity(depth);
    loop {
        // Armed now, or not possible (checked each time: a doorbell that failed is not
        // armed again, and submitters must then wake the condvar).
        let ring_works = E::doorbell_works(&mut queue);
        {
            let mut inbox = lock(&shared.inbox);
            inbox.in_ring = false;
            loop {
                let room = free.len().min(inbox.ops.len());
                batch.extend(inbox.ops.drain(..room));
                if !batch.is_empty() || E::in_flight(&queue) > 0 {
                    break;
                }
                if inbox.closing {
                    return;
                }
                inbox = shared.ready.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            // Sleeping in the ring next, with room for more: submitters ring the doorbell
            // rather than the condvar. Set under the lock with the inbox's check above, so a
            // request pushed after it rings. With no room left, a completion wakes us anyway.
            inbox.in_ring = ring_works && free.len() > batch.len();
        }
        for op in batch.drain(..) {
            let tag = free.pop().expect("no more requests taken than free tags");
            let Op { write, file, offset, buf, done: completer } = op;
            let submitted = if write {
                E::write(&mut queue, &file, offset, buf, tag)
            } else {
                E::read(&mut queue, &file, offset, buf, tag)
            };
            match submitted {
                Ok(()) => slots[tag as usize] = Some(completer),
                Err(e) => {
                    // Checked in `submit`, so not expected; the buffer went with the request.
                    free.push(tag);
                    completer.complete((Err(e), Vec::new()));
                }
            }
        }
        E::wait(&mut queue, 1, &mut done);
        for c in done.drain(..) {
            let completer = slots[c.tag as usize].take().expect("a completion of a request in flight");
            free.push(c.tag);
            completer.complete((c.result, c.buf));
        }
    }
}

/// Runs its closure when dropped, unwinding included.
struct MarkDead<F: FnMut()>(F);

impl<F: FnMut()> Drop for MarkDead<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// The syncer: runs syncs in arrival order.
fn sync_loop<E: AioEngine>(shared: &Shared<E::File>) {
    let _dead = MarkDead(|| {
        let queued = {
            let mut syncs = lock(&shared.syncs);
            syncs.dead = true;
            std::mem::take(&mut syncs.files)
        };
        drop(queued);
    });
    loop {
        let (file, all, completer) = {
            let mut inbox = lock(&shared.syncs);
            loop {
                if let Some(s) = inbox.files.pop_front() {
                    break s;
                }
                if inbox.closing {
                    return;
                }
                inbox = shared.sync_ready.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
        };
        completer.complete(E::sync(&file, all));
    }
}
