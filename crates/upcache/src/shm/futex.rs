//! The two futex calls shared memory needs, on words that other processes may map: never
//! `FUTEX_PRIVATE_FLAG`, so a waker in one process reaches a sleeper in another.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

thread_local! {
    /// Set while this thread sleeps on a word of shared memory. `const` and without a
    /// destructor, so a signal handler may read it.
    static WAITING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is asleep on a futex in shared memory, for another process's
/// lock (read from a signal handler that interrupted it: it holds nothing of the cache's in
/// that sleep, so a fatal signal need not wait for it to finish, which it may never do while
/// the holder is stopped).
pub fn waiting() -> bool {
    WAITING.try_with(Cell::get).unwrap_or(false)
}

/// Called as a thread begins to sleep for another process's lock (null: none).
static ON_SLEEP: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Sets what runs each time a thread begins to sleep for another process's lock, [`waiting`]
/// already true: the shim raises there a fatal signal it deferred while the thread was busy
/// in the cache. Deferred until the thread leaves the cache, such a signal would wait for as
/// long as the lock's holder is stopped.
pub fn on_sleep(hook: fn()) {
    // Release: the hook's code and data are complete before a sleeper calls it.
    ON_SLEEP.store(hook as *mut (), Ordering::Release);
}

/// Sleeps while the u32 at `word` holds `expected`, at most `timeout`. Returns at once if it
/// does not; may return early for no reason: callers loop and re-check.
pub(crate) fn wait(word: *const u32, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    let _ = WAITING.try_with(|w| w.set(true));
    // Acquire: pairs with the Release in `on_sleep`.
    let hook = ON_SLEEP.load(Ordering::Acquire);
    if !hook.is_null() {
        // SAFETY: only `on_sleep` stores here, always a `fn()`.
        let hook: fn() = unsafe { std::mem::transmute::<*mut (), fn()>(hook) };
        hook();
    }
    // SAFETY: FUTEX_WAIT reads the aligned u32 at `word`, which the caller keeps mapped for the
    // call, and the timespec on our stack; it writes no memory of ours.
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAIT, expected, &ts as *const libc::timespec) };
    let _ = WAITING.try_with(|w| w.set(false));
}

/// Wakes up to `n` sleepers on `word`.
pub(crate) fn wake(word: *const u32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it touches no memory.
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, n) };
}

/// The two calls as loom models them (`--cfg loom`: no futex, no clock). One queue stands for
/// every word, so a model sleeps on one word only. A sleep lasts until a wake, stricter than
/// a futex, whose sleeps end at the poll: a lost wake-up leaves the model deadlocked, which
/// loom reports. A model whose holder dies while others sleep ends their sleeps with
/// [`model::time_out`]; one whose holder is stopped asks that every sleep time out at once
/// (not with two such sleepers, which loom may alternate for ever).
#[cfg(loom)]
pub(crate) mod model {
    use std::cell::Cell;
    // std, not loom: the model's own switch, not part of what loom explores.
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::sync::{self, Condvar, Mutex};

    struct Queue {
        /// Stands for the kernel's hash-bucket lock, taken by both calls.
        lock: Mutex<()>,
        sleepers: Condvar,
        time_out: AtomicBool,
    }

    loom::lazy_static! {
        static ref QUEUE: Queue =
            Queue { lock: Mutex::new(()), sleepers: Condvar::new(), time_out: AtomicBool::new(false) };
    }

    loom::thread_local! {
        static WAITS: Cell<u32> = Cell::new(0);
    }

    /// Starts one execution of a model; call it first, on the model's own thread. (Touched
    /// first by a spawned thread, loom's lazy static would order that thread's earlier writes
    /// before every later touch, and hide a race.) `time_out`: every sleep returns at once.
    pub(crate) fn start(time_out: bool) {
        // Relaxed: read by the same execution's threads, which start after this.
        QUEUE.time_out.store(time_out, Ordering::Relaxed);
    }

    /// The calling thread's waits so far (those that returned at once included, as a futex
    /// wait may).
    pub(crate) fn waits() -> u32 {
        WAITS.with(Cell::get)
    }

    /// Sleeps while `still()` (the word is as expected), checked under the queue's lock.
    pub(crate) fn wait(still: impl Fn() -> bool) {
        WAITS.with(|w| w.set(w.get() + 1));
        // Relaxed: see `start`.
        if QUEUE.time_out.load(Ordering::Relaxed) {
            loom::thread::yield_now();
            return;
        }
        let g = sync::lock(&QUEUE.lock);
        if still() {
            drop(sync::wait(&QUEUE.sleepers, g));
        }
    }

    /// Ends every sleep, as each sleeper's poll would: for a holder that dies while others
    /// sleep, whom no unlock will wake.
    pub(crate) fn time_out() {
        wake(i32::MAX);
    }

    /// Wakes one sleeper, or all if `n` is not 1. Taking the lock first: a sleeper that
    /// found the word unchanged before our caller changed it is asleep by now.
    pub(crate) fn wake(n: i32) {
        drop(sync::lock(&QUEUE.lock));
        if n == 1 {
            QUEUE.sleepers.notify_one();
        } else {
            QUEUE.sleepers.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SEEN_WAITING: Cell<Option<bool>> = const { Cell::new(None) };
    }

    fn note() {
        SEEN_WAITING.with(|s| s.set(Some(waiting())));
    }

    #[test]
    fn a_sleeper_calls_the_hook_as_one_asleep_for_another_process() {
        // (Other tests' sleepers call `note` too: it records only in their own threads.)
        on_sleep(note);
        let word = 1u32;
        // The word is not the expected value: the futex returns at once, after the hook.
        wait(&word, 0, Duration::from_millis(1));
        assert_eq!(SEEN_WAITING.with(Cell::get), Some(true));
        assert!(!waiting());
    }
}
