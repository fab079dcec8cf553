//! Sequential stream detection for one file (StreamCache §4.1's stream pointer, with the
//! kernel's window ramp): where the last read ended, how far ahead pages have been asked
//! for, and how big the next window is.

use std::ops::Range;

/// A file's read stream: pure bookkeeping, no I/O.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stream {
    /// The page after the last read's last page.
    next: u64,
    /// Reads in a row that continued the stream.
    run: u32,
    /// Pages asked for so far end here (exclusive); 0 when no readahead is running.
    ahead_to: u64,
    /// Pages the next window asks for.
    window: u64,
    /// The middle of the last window asked for: a reader reaching it should ask for more.
    marker: u64,
}

impl Stream {
    /// A read of pages `first..=last`: returns the pages to read ahead, if any. A read that
    /// continues the previous one (starts on its last page or the page after, and goes past
    /// it) extends the stream; so does one that lands inside what the stream has asked for,
    /// since reads served lock-free report only when they reach the marker. From the second
    /// such read on, the stream keeps a window ahead of the reader, starting at twice the
    /// read size (at least `min`) and doubling up to `max`. Any other read ends the stream,
    /// so random reads never read ahead.
    pub(crate) fn on_read(&mut self, first: u64, last: u64, min: u64, max: u64) -> Option<Range<u64>> {
        let follows = (first == self.next || first + 1 == self.next) && last >= self.next;
        let inside = self.ahead_to > 0 && first >= self.next && first < self.ahead_to;
        let continues = self.next > 0 && (follows || inside);
        self.next = last + 1;
        if !continues {
            *self = Stream { next: last + 1, ..Stream::default() };
            return None;
        }
        self.run += 1;
        if max == 0 {
            return None;
        }
        if self.window == 0 {
            self.window = (2 * (last + 1 - first)).clamp(min.min(max), max);
        }
        // Keep at least half a window ahead of the reader.
        if self.ahead_to > last + 1 + self.window / 2 {
            return None;
        }
        let start = self.ahead_to.max(last + 1);
        let window = start..start + self.window;
        self.ahead_to = window.end;
        self.marker = start + self.window / 2;
        self.window = (self.window * 2).min(max);
        Some(window)
    }

    /// The page whose read should ask for the next window (the middle of the last one), if
    /// a stream is reading ahead: reads that skip the stream bookkeeping (lock-free hits)
    /// check for it.
    pub(crate) fn marker(&self) -> Option<u64> {
        (self.ahead_to > 0).then_some(self.marker)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn random_reads_never_read_ahead() {
        let mut s = Stream::default();
        for (i, p) in [5u64, 900, 17, 18_000, 3, 40, 41_000, 7].into_iter().enumerate() {
            assert_eq!(s.on_read(p, p, 8, 64), None, "read {i}");
        }
    }

    #[test]
    fn a_sequential_stream_ramps_its_window_and_stays_ahead() {
        let mut s = Stream::default();
        assert_eq!(s.on_read(0, 0, 8, 64), None, "one read is not a stream");
        assert_eq!(s.on_read(1, 1, 8, 64), Some(2..10), "the second read starts a window");
        let mut ahead = 10;
        for p in 2..200u64 {
            if let Some(w) = s.on_read(p, p, 8, 64) {
                assert_eq!(w.start, ahead, "windows follow each other");
                assert!(w.end - w.start <= 64);
                ahead = w.end;
            }
            assert!(ahead > p + 1, "the window stays ahead of the reader at page {p}");
            let m = s.marker().unwrap();
            assert!(m > p && m < ahead, "the marker lies ahead of the reader, in the last window");
        }
        // An unaligned stream (reads sharing a page) still counts as sequential.
        let mut s = Stream::default();
        s.on_read(0, 2, 8, 64);
        assert!(s.on_read(2, 4, 8, 64).is_some());
    }

    #[test]
    fn reads_served_lock_free_report_only_at_the_marker_and_the_stream_goes_on() {
        let mut s = Stream::default();
        s.on_read(0, 0, 8, 64);
        let mut ahead = s.on_read(1, 1, 8, 64).unwrap().end;
        // The reader's next reads hit without telling the stream; it reports the marker.
        for _ in 0..20 {
            let m = s.marker().unwrap();
            let w = s.on_read(m, m, 8, 64).expect("the marker asks for the next window");
            assert_eq!(w.start, ahead, "no gap and no restart");
            ahead = w.end;
        }
        assert!(ahead - s.marker().unwrap() >= 32, "the window grew: {ahead}");
    }

    #[test]
    fn rereading_a_page_is_not_a_stream() {
        let mut s = Stream::default();
        for _ in 0..10 {
            assert_eq!(s.on_read(7, 7, 8, 64), None);
        }
    }

    #[test]
    fn a_jump_ends_the_stream_and_zero_max_disables() {
        let mut s = Stream::default();
        s.on_read(0, 0, 8, 64);
        assert!(s.on_read(1, 1, 8, 64).is_some());
        assert_eq!(s.on_read(500, 500, 8, 64), None);
        assert_eq!(s.marker(), None);
        let mut s = Stream::default();
        s.on_read(0, 0, 8, 0);
        assert_eq!(s.on_read(1, 1, 8, 0), None);
    }
}
