//! The sequential streams one open follows at once, of its reads and, apart, of its writes
//! (StreamCache §4.1's stream tracking, per open): where each stream's last read (or write)
//! ended, whether that one continued it, and how far the loaders' windows reach (readahead
//! ahead of a read stream, write-behind behind a write stream).
//!
//! One descriptor often carries several streams at once: threads of one process scanning
//! different parts of a file through a descriptor they share (a database's table file, read
//! by a scan and a compaction), or one thread that alternates between two runs. With one
//! stream per open, each read of one stream would end the other's, and neither would be read
//! ahead. A read that continues no stream takes the place of one whose last read did not
//! continue it either (a random reader's, or a stream's first), the longest unread of those,
//! else of the longest unread: random reads through the same descriptor leave the streams
//! that go on alone, as long as fewer than `STREAMS - 1` of them fall between a new stream's
//! first two reads.
//!
//! Every field is a hint of this open's own, read and written Relaxed: two threads reading
//! through the descriptor at once may blur them, which costs readahead, never a byte.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Streams an open follows at once.
pub(crate) const STREAMS: usize = 4;

/// One stream of an open's reads (or, in its own table, of its writes).
#[derive(Debug)]
pub(crate) struct Stream {
    /// Where its last read (or write) ended (`u64::MAX`: none yet).
    end: AtomicU64,
    /// Whether its last read (or write) continued it.
    continued: AtomicBool,
    /// The page up to which its windows were posted to the loaders: readahead's end for a
    /// read stream (0 when none), or where the next write-behind begins for a write stream.
    pub edge: AtomicU64,
    /// When it was last read (or written), in the open's reads (`Streams::reads`).
    used: AtomicU64,
}

impl Stream {
    fn new(end: u64) -> Self {
        Stream {
            end: AtomicU64::new(end),
            continued: AtomicBool::new(false),
            edge: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }
}

/// Where a read stands in its open's streams (`SharedFile::read_at`); the default, a read
/// that continues nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Followed {
    /// The stream it belongs to now.
    pub stream: usize,
    /// It begins where that stream's last read ended.
    pub sequential: bool,
    /// That stream's last read was sequential too, or this one begins at the file's start:
    /// the loaders read ahead of it (a random reader whose read happens to begin where its
    /// last one ended does not make a stream).
    pub streak: bool,
}

/// An open's read streams.
#[derive(Debug)]
pub(crate) struct Streams {
    streams: [Stream; STREAMS],
    /// Reads so far, a clock for `Stream::used`.
    reads: AtomicU64,
}

impl Default for Streams {
    /// No read yet: a first read at the file's start continues the first stream, as a file
    /// read from its start is read on.
    fn default() -> Self {
        Streams {
            streams: std::array::from_fn(|i| Stream::new(if i == 0 { 0 } else { u64::MAX })),
            reads: AtomicU64::new(0),
        }
    }
}

impl Streams {
    /// No stream yet, none at the file's start either: for writes, of which two in a row make
    /// a stream (a single write, however long, makes none).
    pub fn unstarted() -> Self {
        Streams { streams: std::array::from_fn(|_| Stream::new(u64::MAX)), reads: AtomicU64::new(0) }
    }

    /// Stream `i`.
    pub fn get(&self, i: usize) -> &Stream {
        &self.streams[i % STREAMS]
    }

    /// Takes in a read of `offset..end`: the stream whose last read ended at `offset` goes on
    /// to `end`; if none did, the read starts a stream in the place of one not streaming, or
    /// else of the one longest unread.
    pub fn follow(&self, offset: u64, end: u64) -> Followed {
        // Relaxed (all): this open's own hints (see the module's documentation); loads and
        // stores, not read-modify-writes, which cost every random read a locked instruction.
        let now = self.reads.load(Ordering::Relaxed) + 1;
        self.reads.store(now, Ordering::Relaxed);
        let found = self.streams.iter().position(|s| s.end.load(Ordering::Relaxed) == offset);
        let (i, sequential) = match found {
            Some(i) => (i, true),
            None => {
                // Not continued first, then the longest unread: one key, a plain loop (a
                // `min_by_key` over pairs cost random reads 3% of their cycles in stack
                // traffic, perf).
                let idle = |s: &Stream| {
                    (s.continued.load(Ordering::Relaxed) as u64) << 63
                        | (s.used.load(Ordering::Relaxed) & (u64::MAX >> 1))
                };
                let (mut i, mut least) = (0, u64::MAX);
                for (j, s) in self.streams.iter().enumerate() {
                    let key = idle(s);
                    if key < least {
                        (i, least) = (j, key);
                    }
                }
                self.streams[i].edge.store(0, Ordering::Relaxed);
                (i, false)
            }
        };
        let s = &self.streams[i];
        s.end.store(end, Ordering::Relaxed);
        s.used.store(now, Ordering::Relaxed);
        // A place taken over: its last read was another stream's.
        let before = sequential && s.continued.load(Ordering::Relaxed);
        if s.continued.load(Ordering::Relaxed) != sequential {
            s.continued.store(sequential, Ordering::Relaxed);
        }
        let streak = before || offset == 0;
        Followed { stream: i, sequential, streak }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A 4 KiB read at `at`.
    fn read(s: &Streams, at: u64) -> Followed {
        s.follow(at, at + 4096)
    }

    #[test]
    fn one_stream_is_followed_as_before() {
        let s = Streams::default();
        assert_eq!(read(&s, 0), Followed { stream: 0, sequential: true, streak: true }, "from the start");
        assert_eq!(read(&s, 4096), Followed { stream: 0, sequential: true, streak: true });
        let r = read(&s, 1 << 20);
        assert!(!r.sequential && !r.streak, "a jump starts a stream: {r:?}");
        let r = read(&s, (1 << 20) + 4096);
        assert!(r.sequential && !r.streak, "one sequential read after a jump is no streak yet: {r:?}");
        assert!(read(&s, (1 << 20) + 8192).streak, "two are");
    }

    #[test]
    fn interleaved_streams_are_each_followed() {
        let s = Streams::default();
        let starts = [0u64, 10 << 20, 20 << 20];
        let mut seen = Vec::new();
        for step in 0..6u64 {
            for (k, &start) in starts.iter().enumerate() {
                let r = read(&s, start + step * 4096);
                if step == 0 {
                    seen.push(r.stream);
                } else {
                    assert_eq!(r.stream, seen[k], "stream {k} keeps its place");
                    assert!(r.sequential, "stream {k}, read {step}");
                    assert_eq!(r.streak, step >= 2 || k == 0, "stream {k}, read {step}");
                }
            }
        }
        assert_eq!(seen.len(), 3);
        assert!(seen[0] != seen[1] && seen[1] != seen[2] && seen[0] != seen[2]);
    }

    #[test]
    fn random_reads_leave_the_streams_alone() {
        let s = Streams::default();
        let starts = [0u64, 10 << 20, 20 << 20];
        let mut random = 7u64;
        for step in 0..40u64 {
            for (k, &start) in starts.iter().enumerate() {
                let r = read(&s, start + step * 4096);
                assert_eq!(r.streak, step >= 2 || k == 0, "stream {k}, read {step}");
            }
            // A random read between each round of the three streams.
            random = random.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = read(&s, (random >> 20) % (1 << 40) * 4096 + (30 << 20));
            assert!(!r.sequential);
        }
    }

    #[test]
    fn a_new_stream_takes_the_longest_unread_place_when_all_stream() {
        let s = Streams::default();
        for start in 0..STREAMS as u64 {
            for step in 0..3 {
                read(&s, (start << 30) + step * 4096);
            }
        }
        // Stream 0 is the longest unread: a fifth stream takes its place.
        let r = read(&s, 99 << 30);
        assert_eq!(r.stream, 0);
        assert!(!r.sequential && !r.streak);
        assert_eq!(s.get(0).edge.load(Ordering::Relaxed), 0);
    }
}
