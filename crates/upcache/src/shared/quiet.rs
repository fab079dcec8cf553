//! Threads the shared cache starts from a program's thread (readahead loaders, write-back
//! parts) start with every signal blocked, as the shim's own threads do: a signal sent to the
//! process goes to the program's threads, where its handlers expect to run, and the shim's
//! fatal-signal handler never runs on a thread that holds frames half loaded.

use std::sync::atomic::{AtomicPtr, Ordering};

/// The hook every thread the library starts runs first (`on_library_thread`).
static ON_LIBRARY_THREAD: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Sets what runs first in every thread the shared cache starts (loaders, flushers, a
/// write-back's parts, the service watcher): the shim marks such a thread as inside it, so
/// that the libc calls the library makes there (a `fstat` of its own descriptor, say) pass
/// its interposers by, as they do in a program's thread busy in the shim. Without it, a
/// loader's stat went through the shim's, which could hold the last reference to a file the
/// program had just closed and close it there, waiting for the frames the loader held.
pub fn on_library_thread(hook: fn()) {
    // Release: the hook's code and data are complete before a thread calls it.
    ON_LIBRARY_THREAD.store(hook as *mut (), Ordering::Release);
}

/// Runs the hook of [`on_library_thread`], if one is set: first thing in each thread the
/// library starts.
pub(crate) fn library_thread() {
    // Acquire: pairs with the Release in `on_library_thread`.
    let hook = ON_LIBRARY_THREAD.load(Ordering::Acquire);
    if !hook.is_null() {
        // SAFETY: only `on_library_thread` stores here, always a `fn()`.
        let hook: fn() = unsafe { std::mem::transmute::<*mut (), fn()>(hook) };
        hook();
    }
}

/// Runs `f` (which starts threads: they inherit the mask) with every signal blocked in this
/// thread, then puts this thread's mask back, a panic in `f` included.
pub(crate) fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: `self.0` is the mask `pthread_sigmask` returned below.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: plain sigset_t values on our stack, filled by the calls that take them.
    let restore = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        Restore(old)
    };
    let r = f();
    drop(restore);
    r
}

#[cfg(all(test, not(loom)))]
mod tests {
    /// Whether this thread blocks `sig`.
    fn blocked(sig: i32) -> bool {
        // SAFETY: a query of this thread's mask into a local set.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        }
    }

    /// A thread started inside blocks every signal; the caller's mask is as it was after.
    #[test]
    fn threads_started_inside_block_every_signal() {
        assert!(!blocked(libc::SIGUSR1));
        let inner = super::with_signals_blocked(|| {
            std::thread::spawn(|| blocked(libc::SIGUSR1) && blocked(libc::SIGINT))
        });
        assert!(inner.join().unwrap(), "the new thread blocks them");
        assert!(!blocked(libc::SIGUSR1), "the caller's mask is back");
    }
}
