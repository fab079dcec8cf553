//! Readahead (StreamCache §4.1's stream pointer; the kernel's asynchronous readahead): a
//! file's sequential reads are detected ([`detect::Stream`]) and the pages ahead of the
//! reader are loaded by a loader thread ([`loader`]) before they are asked for.
//!
//! # Flow
//! `read_at` tells the file's [`FileReadahead`] which pages it read; once two reads in a row
//! continue each other it hands a window of pages ahead to the loader and remembers a marker
//! page in that window. Lock-free hits skip the bookkeeping but check the marker (one
//! relaxed load, no write), so a stream served from the cache still asks for its next
//! window in time. The loader claims the missing pages of a window as fresh `LOCKED` frames
//! (readers that need one wait for it as for any load), reads them in runs on its own I/O
//! queue and ends the loads as they complete. It never waits on a range lock or a frame, so
//! the pages it holds never wait on anything but the devices.

pub(crate) mod detect;

use std::ops::Range;

use self::detect::Stream;
use crate::sync::{AtomicU64, Mutex, Ordering};

/// Smallest readahead window, in bytes.
pub const MIN_WINDOW: u64 = 128 * 1024;

/// A file's readahead state.
#[derive(Debug)]
pub(crate) struct FileReadahead {
    stream: Mutex<Stream>,
    /// The stream's marker page, `u64::MAX` when none.
    marker: AtomicU64,
}

impl Default for FileReadahead {
    fn default() -> Self {
        FileReadahead { stream: Mutex::new(Stream::default()), marker: AtomicU64::new(u64::MAX) }
    }
}

impl FileReadahead {
    /// A read of pages `first..=last`; returns the window to load ahead, if any. `min` and
    /// `max` bound the window in pages.
    pub(crate) fn on_read(&self, first: u64, last: u64, min: u64, max: u64) -> Option<Range<u64>> {
        // Another thread is updating the stream: this read is not part of one sequential
        // stream anyway, so skip it rather than wait.
        let mut s = self.stream.try_lock().ok()?;
        let window = s.on_read(first, last, min, max);
        // Relaxed: a hint for lock-free readers; a stale value costs at most one window's
        // head start.
        self.marker.store(s.marker().unwrap_or(u64::MAX), Ordering::Relaxed);
        drop(s);
        window
    }

    /// Whether a read of pages `first..=last` that skipped `on_read` should call it.
    pub(crate) fn at_marker(&self, first: u64, last: u64) -> bool {
        // Relaxed: see `on_read`.
        let m = self.marker.load(Ordering::Relaxed);
        (first..=last).contains(&m)
    }
}
