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
