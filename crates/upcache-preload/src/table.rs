//! The descriptor table: which of the process's file descriptors are cached files.
//!
//! Every libc call on a descriptor looks here, so a lookup takes no lock: two levels of
//! fixed arrays (chunks of 1024 slots made on first use, never freed while the table lives)
//! of `ArcSwapOption`, whose loads are lock-free and keep the description alive while used
//! even if another thread closes the descriptor meanwhile.

use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;

/// Descriptors from this one on are never cached (the table's size).
pub(crate) const MAX_FD: usize = CHUNK * CHUNKS;

struct Chunk<T> {
    slots: Box<[ArcSwapOption<T>]>,
}

/// A map from descriptor number to `T` (the shim's `Description`s).
pub(crate) struct FdTable<T> {
    chunks: Box<[AtomicPtr<Chunk<T>>]>,
}

impl<T> FdTable<T> {
    pub fn new() -> Self {
        FdTable { chunks: (0..CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() }
    }

    fn slot(&self, fd: i32, make: bool) -> Option<&ArcSwapOption<T>> {
        let fd = usize::try_from(fd).ok().filter(|&fd| fd < MAX_FD)?;
        let cell = &self.chunks[fd / CHUNK];
        // Acquire: pairs with the Release that published the chunk, so its slots are made.
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            if !make {
                return None;
            }
            let fresh = Box::into_raw(Box::new(Chunk {
                slots: (0..CHUNK).map(|_| ArcSwapOption::empty()).collect(),
            }));
            // Release: publishes the slots; Acquire on failure: see the winner's.
            chunk =
                match cell.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => fresh,
                    Err(winner) => {
                        // SAFETY: `fresh` came from Box::into_raw above and was never shared.
                        drop(unsafe { Box::from_raw(fresh) });
                        winner
                    }
                };
        }
        // SAFETY: chunks are freed only when the table drops, and `&self` outlives the borrow.
        Some(&unsafe { &*chunk }.slots[fd % CHUNK])
    }

    /// The cached file open on `fd`, if any.
    pub fn get(&self, fd: i32) -> Option<Arc<T>> {
        self.slot(fd, false)?.load_full()
    }

    /// Makes `fd` a descriptor of `desc` (or of nothing); returns what it was.
    pub fn set(&self, fd: i32, desc: Option<Arc<T>>) -> Option<Arc<T>> {
        match (self.slot(fd, desc.is_some()), desc) {
            (Some(slot), desc) => slot.swap(desc),
            (None, _) => None,
        }
    }

    /// Empties `fd`'s slot if it still holds `desc` (compare and swap: a close and an open
    /// that reused the number meanwhile keep theirs).
    pub fn remove_if(&self, fd: i32, desc: &Arc<T>) {
        if let Some(slot) = self.slot(fd, false) {
            slot.compare_and_swap(desc, None);
        }
    }

    /// Every cached descriptor.
    pub fn all(&self) -> Vec<(i32, Arc<T>)> {
        let mut out = Vec::new();
        for (c, cell) in self.chunks.iter().enumerate() {
            // Acquire: as in `slot`.
            let chunk = cell.load(Ordering::Acquire);
            if chunk.is_null() {
                continue;
            }
            // SAFETY: as in `slot`.
            for (i, slot) in unsafe { &*chunk }.slots.iter().enumerate() {
                if let Some(d) = slot.load_full() {
                    out.push(((c * CHUNK + i) as i32, d));
                }
            }
        }
        out
    }
}

impl<T> Drop for FdTable<T> {
    fn drop(&mut self) {
        for cell in self.chunks.iter() {
            let chunk = cell.swap(std::ptr::null_mut(), Ordering::Relaxed); // Relaxed: &mut self
            if !chunk.is_null() {
                // SAFETY: made by Box::into_raw in `slot`; no borrow outlives `&mut self`.
                drop(unsafe { Box::from_raw(chunk) });
            }
        }
    }
}
