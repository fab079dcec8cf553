//! Re-entrancy guard: while a thread runs the shim's own code, every libc call it makes (the
//! library's opens, reads and stats included, which reach the shim's exported symbols too)
//! goes straight to libc.
//!
//! It also marks where a fatal signal must wait (`signals.rs`): a thread inside the shim may
//! hold the locks that the signal's write-back needs, so an asynchronous signal that arrives
//! then is raised again when the thread leaves the shim.

use std::cell::Cell;

thread_local! {
    // `const` and without a destructor: usable at any point of a thread's life, and from a
    // signal handler (a plain thread-local load, no lazy initialization).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// A fatal signal that arrived while the thread was inside, to raise again on leaving.
    static DEFERRED: Cell<i32> = const { Cell::new(0) };
}

/// Proof that this thread is inside the shim; leaving drops it.
pub(crate) struct Inside(());

/// Enters the shim, or None if this thread is in it already (a nested call: pass through).
pub(crate) fn enter() -> Option<Inside> {
    INSIDE.try_with(|inside| if inside.replace(true) { None } else { Some(Inside(())) }).ok().flatten()
}

/// Marks this thread, one the library started (`upcache::shared::on_library_thread`), as
/// inside the shim for good: the library's libc calls there pass through. Such threads block
/// every signal, so none is ever deferred in one.
pub(crate) fn stay_inside() {
    let _ = INSIDE.try_with(|inside| inside.set(true));
}

/// From a signal handler: if this thread is inside the shim, remembers `sig` to raise again as
/// it leaves, and returns true.
pub(crate) fn defer_if_inside(sig: i32) -> bool {
    let inside = INSIDE.try_with(Cell::get).unwrap_or(false);
    inside && DEFERRED.try_with(|d| d.set(sig)).is_ok()
}

/// Raises now the signal deferred while this thread was inside, if any: as the thread leaves
/// the shim, and as it begins to sleep for another process's lock
/// (`upcache::shared::on_sleep_for_another_process`), where it holds none of the cache's locks
/// and might sleep for as long as that process is stopped (the handler, seeing the thread
/// asleep, lets the signal take its course).
pub(crate) fn raise_deferred_now() {
    let deferred = DEFERRED.try_with(|d| d.replace(0)).unwrap_or(0);
    if deferred != 0 {
        let errno = crate::errno::get();
        // SAFETY: no memory arguments.
        unsafe { libc::raise(deferred) };
        crate::errno::set(errno);
    }
}

/// Raises `sig` as this thread leaves the shim (now, if it is not inside): for a signal the
/// shim itself sends (SIGXFSZ), whose handler must not run with the shim's locks held.
pub(crate) fn raise_on_leaving(sig: i32) {
    if !defer_if_inside(sig) {
        // SAFETY: no memory arguments.
        unsafe { libc::raise(sig) };
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
        // A handler running between the two must see the flag cleared or leave its signal
        // where the load below finds it: the compiler may not swap them.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        // The handler runs now, outside the shim.
        raise_deferred_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static GOT: AtomicI32 = AtomicI32::new(0);

    extern "C" fn record(sig: libc::c_int) {
        GOT.store(sig, Ordering::SeqCst);
    }

    #[test]
    fn a_deferred_signal_is_raised_as_its_thread_begins_to_sleep_and_only_then() {
        // SAFETY: sigaction is plain data; a handler that only stores to an atomic.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            crate::real::sigaction()(libc::SIGUSR2, &act, std::ptr::null_mut());
        }
        let inside = enter().expect("not inside yet");
        assert!(defer_if_inside(libc::SIGUSR2));
        assert_eq!(GOT.load(Ordering::SeqCst), 0, "deferred, not raised");
        raise_deferred_now();
        assert_eq!(GOT.load(Ordering::SeqCst), libc::SIGUSR2);
        GOT.store(0, Ordering::SeqCst);
        drop(inside);
        assert_eq!(GOT.load(Ordering::SeqCst), 0, "raised once, not again on leaving");
    }
}
