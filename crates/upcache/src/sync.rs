//! The one place atomics, locks and threads are imported, so that `--cfg loom` swaps every
//! one of them for loom's model-checked versions.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

/// Locks a mutex, ignoring poisoning: every structure behind our mutexes is left consistent
/// at each unlock point, so a panic in another holder does not make the data unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Read-locks a reader-writer lock, ignoring poisoning (see [`lock`]).
pub(crate) fn read<T>(l: &RwLock<T>) -> impl std::ops::Deref<Target = T> + '_ {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Write-locks a reader-writer lock, ignoring poisoning (see [`lock`]).
pub(crate) fn write<T>(l: &RwLock<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// Waits on a condition variable, ignoring poisoning (see [`lock`]).
pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    match cv.wait(g) {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `cv.wait_timeout` (under loom, which has no clock, a plain wait: every model wakes it).
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> MutexGuard<'a, T> {
    #[cfg(loom)]
    {
        let _ = timeout;
        wait(cv, g)
    }
    #[cfg(not(loom))]
    match cv.wait_timeout(g, timeout) {
        Ok((g, _)) => g,
        Err(poisoned) => poisoned.into_inner().0,
    }
}

/// Says that we spin on a word another thread will change (under loom, a yield: a spinning
/// thread lets the others run, and the model stays finite).
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::hint::spin_loop();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
