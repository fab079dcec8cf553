//! `upcache_queue`: asynchronous reads and writes, up to a depth in flight, for C
//! (`Cache::queue`'s `IoQueue` on an array, `SharedCache::queue`'s `SharedQueue` on a shared
//! cache). A queue is used by one thread at a time.

use crate::cache::{cache_ref, upcache_cache};
use crate::error::{guard, status, Fail};
use crate::file::{file_ref, upcache_file};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use upcache::Completion;

/// An opaque queue.
pub struct upcache_queue {
    _opaque: [u8; 0],
}

/// A finished request: its tag, and the bytes it moved or a negative `UPCACHE_E*` code.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct upcache_completion {
    pub tag: u64,
    pub result: i64,
}

/// What an `upcache_queue` points to.
#[repr(C)]
struct QueueHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    queue: upcache::IoQueue,
    depth: usize,
    /// Every request in flight by its tag (unique among them), with a read's buffer of the
    /// caller's: the queue reads into a buffer of its own, copied there at the completion.
    tags: HashMap<u64, Option<(*mut u8, usize)>>,
    /// Completions the caller's array had no room for, given first by the next wait.
    ready: VecDeque<upcache_completion>,
    /// The cache handle's count of open handles: the cache does not close under the queue.
    open_files: Arc<AtomicUsize>,
}

const QUEUE_TAG: u64 = 0x7563_7175_6575_6521; // "ucqueue!"
const DEAD: u64 = 0;

/// # Safety
/// `p` is null or from `upcache_queue_new`.
unsafe fn queue_mut<'a>(p: *mut upcache_queue) -> Result<&'a mut QueueHandle, Fail> {
    // SAFETY: the caller's contract: null or a handle, every kind `repr(C)` with the tag first.
    if unsafe { crate::error::tag_of(p.cast_const().cast()) } != Some(QUEUE_TAG) {
        return Err(Fail::invalid(if p.is_null() { "queue is null" } else { "not a live upcache_queue" }));
    }
    // SAFETY: the tag says it is a live queue, used by one thread at a time (the contract).
    Ok(unsafe { &mut *p.cast::<QueueHandle>() })
}

/// Makes a queue of `cache` that keeps up to `depth` (1 to 4096) requests in flight, into
/// `*out`. The cache does not close while it is open (`UPCACHE_EBUSY`, as with files).
///
/// # Safety
/// `cache` is a live cache handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_new(
    cache: *mut upcache_cache,
    depth: u32,
    out: *mut *mut upcache_queue,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        let queue = c.cache.queue(depth as usize)?;
        // SeqCst: see `upcache_close`.
        c.open_files.fetch_add(1, Ordering::SeqCst);
        let handle = Box::new(QueueHandle {
            tag: QUEUE_TAG,
            queue,
            depth: depth as usize,
            tags: HashMap::new(),
            ready: VecDeque::new(),
            open_files: c.open_files.clone(),
        });
        // SAFETY: `out` is non-null and writable (checked, and the contract).
        unsafe { *out = Box::into_raw(handle).cast::<upcache_queue>() };
        Ok(())
    })
}

/// Submits a request of `file` to the queue, of the same kind of cache: a read into `to`
/// (the caller's buffer, `len` bytes), or a write of `bytes`.
fn submit(
    q: &mut QueueHandle,
    file: &upcache::File,
    offset: u64,
    request: Request<'_>,
    tag: u64,
) -> Result<(), Fail> {
    if q.tags.contains_key(&tag) {
        return Err(Fail::invalid(format!("a request tagged {tag} is in flight")));
    }
    // Completions kept for the next wait count: the depth is of what the caller has not had back.
    if q.tags.len() + q.ready.len() >= q.depth {
        return Err(Fail {
            code: crate::error::UPCACHE_EBUSY,
            msg: format!("{} requests in flight (the depth)", q.depth),
        });
    }
    let (buf, write, read_into) = match request {
        Request::Read { to, len } => {
            let mut buf = Vec::new();
            // A length no allocation can hold is an error, not an abort.
            buf.try_reserve_exact(len)
                .map_err(|_| Fail::invalid(format!("no memory for a read of {len} bytes")))?;
            buf.resize(len, 0);
            (buf, false, Some((to, len)))
        }
        Request::Write(bytes) => (bytes.to_vec(), true, None),
    };
    let r = if write { q.queue.write(file, offset, buf, tag) } else { q.queue.read(file, offset, buf, tag) };
    r?;
    q.tags.insert(tag, read_into);
    Ok(())
}

/// What a submission asks for.
enum Request<'a> {
    Read { to: *mut u8, len: usize },
    Write(&'a [u8]),
}

/// Submits a read of up to `len` bytes at `offset` of `file` into `buf`, reported under `tag`
/// by `upcache_queue_wait`, which fills `buf` (as pread(2): fewer bytes at the end of the
/// file). `buf` must stay valid and untouched until then; `tag` must differ from every
/// request in flight on the queue (`UPCACHE_EINVAL`). `UPCACHE_EBUSY` while `depth` requests
/// are in flight or completed and not yet returned by a wait: wait for some first.
///
/// # Safety
/// `queue` and `file` are live; `buf` is writable for `len` bytes until the read's completion
/// is returned.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_read(
    queue: *mut upcache_queue,
    file: *mut upcache_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
    tag: u64,
) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let q = unsafe { queue_mut(queue) }?;
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        crate::file::buffer_ok(buf, len)?;
        submit(q, &f.file, offset, Request::Read { to: buf.cast::<u8>(), len }, tag)
    })
}

/// Submits a write of `len` bytes of `buf` at `offset` of `file`, reported under `tag`. The
/// bytes are taken at once (`buf` is free when this returns); the write goes to the cache, so
/// its completion is ready for the next wait. Fails as `upcache_queue_read`.
///
/// # Safety
/// `queue` and `file` are live; `buf` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_write(
    queue: *mut upcache_queue,
    file: *mut upcache_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
    tag: u64,
) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let q = unsafe { queue_mut(queue) }?;
        // SAFETY: the function's contract.
        let f = unsafe { file_ref(file) }?;
        crate::file::buffer_ok(buf, len)?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null and readable for `len` bytes (checked, and the contract).
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
        };
        submit(q, &f.file, offset, Request::Write(bytes), tag)
    })
}

/// Requests submitted whose completions `upcache_queue_wait` has not returned yet.
///
/// # Safety
/// `queue` is live.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_in_flight(queue: *mut upcache_queue) -> i64 {
    guard(i64::from, || {
        // SAFETY: the function's contract.
        let q = unsafe { queue_mut(queue) }?;
        Ok((q.queue.in_flight() + q.ready.len()) as i64)
    })
}

/// Waits until at least `min` requests (at most as many as are in flight) have completed,
/// and stores up to `max` completions in `out` (a read's bytes are in its buffer by then);
/// the count stored, or a negative code. Completions past `max` are kept for the next wait.
///
/// # Safety
/// `queue` is live; `out` is writable for `max` completions.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_wait(
    queue: *mut upcache_queue,
    min: usize,
    out: *mut upcache_completion,
    max: usize,
) -> i64 {
    guard(i64::from, || {
        // SAFETY: the function's contract.
        let q = unsafe { queue_mut(queue) }?;
        if out.is_null() && max > 0 {
            return Err(Fail::invalid("out is null"));
        }
        let want = min.saturating_sub(q.ready.len());
        if want > 0 || q.ready.is_empty() {
            let mut done: Vec<Completion> = Vec::new();
            q.queue.wait(want, &mut done);
            for c in done {
                let finished = finish(&mut q.tags, c);
                q.ready.push_back(finished);
            }
        }
        let n = q.ready.len().min(max);
        for (i, c) in q.ready.drain(..n).enumerate() {
            // SAFETY: `out` is writable for `max` > `i` completions (the contract).
            unsafe { out.add(i).write(c) };
        }
        Ok(n as i64)
    })
}

/// The completion of `c`, a read's bytes copied into the caller's buffer.
fn finish(tags: &mut HashMap<u64, Option<(*mut u8, usize)>>, c: Completion) -> upcache_completion {
    let read_into = tags.remove(&c.tag).flatten();
    let result = match c.result {
        Ok(n) => {
            if let Some((to, len)) = read_into {
                let n = n.min(len).min(c.buf.len());
                if n > 0 {
                    // SAFETY: the caller's buffer of this read, writable for `len` >= `n`
                    // bytes until its completion is returned (`upcache_queue_read`'s
                    // contract); the queue's own buffer is another allocation.
                    unsafe { std::ptr::copy_nonoverlapping(c.buf.as_ptr(), to, n) };
                }
            }
            n as i64
        }
        Err(e) => i64::from(Fail::from(e).code),
    };
    upcache_completion { tag: c.tag, result }
}

/// Waits for every request in flight (their buffers filled, their completions dropped) and
/// frees the queue.
///
/// # Safety
/// `queue` is from `upcache_queue_new`, not freed before, and no other thread uses it during
/// or after the call.
#[no_mangle]
pub unsafe extern "C" fn upcache_queue_free(queue: *mut upcache_queue) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let q = unsafe { queue_mut(queue) }?;
        let mut done = Vec::new();
        // A wait for more than are in flight returns once none is.
        while q.queue.in_flight() > 0 {
            q.queue.wait(usize::MAX, &mut done);
            for c in done.drain(..) {
                finish(&mut q.tags, c);
            }
        }
        // SAFETY: allocated by `Box::into_raw` in `upcache_queue_new`, freed only here.
        let mut handle = unsafe { Box::from_raw(queue.cast::<QueueHandle>()) };
        handle.tag = DEAD;
        // SeqCst: see `upcache_close`.
        handle.open_files.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    })
}
