//! A fair byte-range reader-writer lock for one file (seed 001 §3.2).
//!
//! Writes take their byte range exclusive, reads take theirs shared, so overlapping writes
//! serialize and a reader sees all or none of an overlapping write, while writes to disjoint
//! ranges of one file run in parallel (the kernel's per-inode lock would serialize them).
//!
//! Requests are kept in arrival order. A request is granted when it conflicts with no request
//! ahead of it, granted or waiting. So a request waits only for conflicting requests that came
//! before it, which makes the lock FIFO-fair among conflicting requests: a stream of readers
//! cannot starve a writer and vice versa.
//!
//! # Fast paths
//! Most requests skip the queue: they publish their range and mode, packed in one word, in
//! one of a few slots (8 per file) with one CAS. A fast writer is known by its slot alone (the
//! word's exclusive bit); every queued request is counted in `queued`, and every queued
//! exclusive one also in `queued_writers`. A fast writer of an uncontended file thus touches
//! its slot, `queued` and the other slots' lines, which stay in its core's cache.
//! - A shared request whose range is whole granules (4 KiB, the smallest page: every pin and
//!   every page-aligned read) takes a slot if no writer is queued and no fast writer's slot
//!   overlaps it.
//! - An exclusive request (rounded out to granules) takes a slot if nothing is queued and no
//!   other slot overlaps it. So writers of disjoint pages of one file (seed 001's parallel
//!   writes) share no mutex: two threads writing one file scale as two files do.
//!
//! Each check is a Dekker handshake: one side stores (publishes its slot, or counts itself in
//! `queued` and `queued_writers`), issues a SeqCst fence, then loads what the other side
//! stores; the other side does the same in the other order. At least one sees the other
//! (fences rather than SeqCst accesses: loom models only the fences, and the fence rules are
//! the simpler ones). The pairs:
//! - fast reader (its slot, then `queued_writers` and the slots) against a queued writer
//!   (`queued_writers`, then the slots) or a fast writer (its slot, then the slots): the
//!   reader backs off to the queue, or the writer waits for (queued) or backs off from (fast)
//!   the reader's range (both may: then both queue);
//! - fast writer (its slot, then `queued` and the slots) against a queued request (`queued`,
//!   then the slots) or another fast writer: the fast writer backs off, or the queued request
//!   waits for its slot, or the other writer backs off (both may: then both queue).
//!
//! A fast request that backs off frees its slot and takes the queue. Slots hold exact ranges
//! (readers) or whole granules (writers), so a writer never waits for a disjoint reader (a
//! thread that holds a pin and writes another page must not wait for itself). A slot holder
//! that leaves while someone may wait for it (`queued_writers` for readers, `queued` for
//! writers) takes the mutex before it notifies, so a waiter between its check and its wait
//! cannot miss the wake-up. Fairness holds: once a writer is queued, new readers queue behind
//! it, and once anything is queued, new writers queue too.
//!
//! loom checks exclusion and the wake-ups (`loom_models` below, with 2 slots): a fast reader
//! against a writer, slot reuse, two writers and a fast reader, a writer waiting for queued
//! and fast readers, `try_read` and `try_write`, fast writers against each other, a fast
//! writer against a queued reader, a wide writer waiting for two fast ones, and a reader that
//! writes elsewhere not waiting for itself.
//!
//! # Locking
//! The internal mutex is held only to add, check and remove requests, never while the caller
//! does I/O. Range locks of one file are taken one at a time per thread; a thread never
//! holds a range lock of one file while waiting for one of another (see the global lock order
//! in the crate docs).

use crate::sync::{self, fence, AtomicU64, Condvar, Mutex, Ordering};

#[derive(Debug)]
struct Request {
    ticket: u64,
    start: u64,
    end: u64,
    exclusive: bool,
}

impl Request {
    fn conflicts(&self, other: &Request) -> bool {
        (self.exclusive || other.exclusive) && self.start < other.end && other.start < self.end
    }
}

#[derive(Debug, Default)]
struct Queue {
    next_ticket: u64,
    requests: Vec<Request>,
}

impl Queue {
    fn grantable(&self, ticket: u64) -> bool {
        let pos = self.requests.iter().position(|r| r.ticket == ticket).expect("request queued");
        let me = &self.requests[pos];
        !self.requests[..pos].iter().any(|r| r.conflicts(me))
    }
}

/// Bytes per granule of a fast request's range.
const GRANULE: u64 = 4096;
const _: () = assert!(GRANULE.is_power_of_two());
/// Bits of a published range's length in granules (above them its start, below one bit
/// that marks an exclusive range).
const LEN_BITS: u32 = 24;
/// The published range is exclusive.
const EXCLUSIVE: u64 = 1;
/// Slots per file.
#[cfg(not(loom))]
const FAST_SLOTS: usize = 8;
/// Two under loom: enough for a reader that finds its slot taken, few enough to explore.
#[cfg(loom)]
const FAST_SLOTS: usize = 2;

/// One fast request's range, packed: `start granule << (LEN_BITS + 1) | length in granules
/// << 1 | EXCLUSIVE`, or 0 when free. One word, so others read a range whole. 128-byte
/// aligned so holders of different slots do not share a line (nor its prefetched neighbour).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// `start..end` packed for a slot, if it is whole granules and fits.
fn pack(start: u64, end: u64, exclusive: bool) -> Option<u64> {
    if (start | end) & (GRANULE - 1) != 0 || end <= start {
        return None;
    }
    let (first, len) = (start / GRANULE, (end - start) / GRANULE);
    (len < 1 << LEN_BITS && first < 1 << (63 - LEN_BITS))
        .then_some(first << (LEN_BITS + 1) | len << 1 | exclusive as u64)
}

/// The byte range of a packed slot word (not 0), and whether it is exclusive.
fn unpack(w: u64) -> (u64, u64, bool) {
    let (first, len) = (w >> (LEN_BITS + 1), (w >> 1) & ((1 << LEN_BITS) - 1));
    (first * GRANULE, (first + len) * GRANULE, w & EXCLUSIVE != 0)
}

/// The per-file range lock.
#[derive(Debug, Default)]
pub struct RangeLock {
    queue: Mutex<Queue>,
    released: Condvar,
    /// Exclusive requests in the queue (waiting or held). While it is not zero, readers take
    /// the queue.
    queued_writers: AtomicU64,
    /// Requests in the queue (waiting or held). While it is not zero, writers take the queue.
    queued: AtomicU64,
    fast: [Slot; FAST_SLOTS],
}

/// A held range; released on drop.
#[must_use = "the range is unlocked when the guard drops"]
#[derive(Debug)]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// A request in the queue, by ticket.
    Queued { ticket: u64, exclusive: bool },
    /// A slot, by index.
    Fast { slot: usize, exclusive: bool },
}

/// How a range is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// With other shared holders of overlapping ranges (readers).
    Shared,
    /// Alone over its range (writers).
    Exclusive,
}

impl RangeLock {
    /// Locks bytes `start..end` in `mode`, waiting for conflicting requests that arrived
    /// earlier. An empty range is widened to one byte so that it still orders against writes
    /// at that offset.
    pub fn lock(&self, start: u64, end: u64, mode: Mode) -> RangeGuard<'_> {
        let exclusive = mode == Mode::Exclusive;
        let end = end.max(start.saturating_add(1));
        let fast = if exclusive { self.fast_write(start, end) } else { self.fast_read(start, end) };
        if let Some(g) = fast {
            return g;
        }
        let mut q = sync::lock(&self.queue);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.requests.push(Request { ticket, start, end, exclusive });
        // Relaxed (both): the fence orders them before the slots are read (the queued
        // request's half of the handshakes, module docs).
        self.queued.fetch_add(1, Ordering::Relaxed);
        if exclusive {
            self.queued_writers.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        while !q.grantable(ticket) || self.fast_conflicts(None, start, end, exclusive) {
            q = sync::wait(&self.released, q);
        }
        RangeGuard { lock: self, held: Held::Queued { ticket, exclusive } }
    }

    /// Writers holding or waiting for a range: queued ones and fast ones' slots (for tests).
    #[cfg(test)]
    fn writer_count(&self) -> u64 {
        let fast = self.fast.iter().filter(|s| s.0.load(Ordering::SeqCst) & EXCLUSIVE != 0).count();
        self.queued_writers.load(Ordering::SeqCst) + fast as u64
    }

    /// Publishes `word` in a free slot (the caller's half of a handshake still to come);
    /// the guard frees it. The guard and the slot's index; None if every slot is taken.
    #[inline]
    fn take_slot(&self, word: u64, exclusive: bool) -> Option<(RangeGuard<'_>, usize)> {
        let first = crate::metrics::thread_slot();
        for i in 0..FAST_SLOTS {
            let slot = (first + i) % FAST_SLOTS;
            let s = &self.fast[slot].0;
            // Relaxed (both): the SeqCst fence the caller issues next orders the publication
            // before its loads (its half of the handshake), and it is also the acquire for
            // the free slot we read: a previous holder's accesses and release come before
            // ours, so whoever reads our later release sees theirs too. Without the fence
            // the CAS would need Acquire.
            if s.load(Ordering::Relaxed) == 0
                && s.compare_exchange(0, word, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                return Some((RangeGuard { lock: self, held: Held::Fast { slot, exclusive } }, slot));
            }
        }
        None
    }

    /// A slot for the exclusive range `start..end` (rounded out to granules), if it packs,
    /// nothing is queued and no other slot overlaps it once ours is published.
    fn fast_write(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        let (s, e) = (start & !(GRANULE - 1), end.checked_add(GRANULE - 1)? & !(GRANULE - 1));
        let word = pack(s, e, true)?;
        // Relaxed: a hint that skips the CAS while the queue is in use; checked again below.
        if self.queued.load(Ordering::Relaxed) != 0 {
            return None;
        }
        // Our exclusive word in the slot is what fast readers look for: no count to keep.
        let (guard, slot) = self.take_slot(word, true)?;
        fence(Ordering::SeqCst);
        // Acquire: reading the last queued writer's release (its count going down) makes
        // its bytes visible to us.
        if self.queued.load(Ordering::Acquire) != 0 || self.fast_conflicts(Some(slot), s, e, true) {
            // Queue instead (dropping the guard frees the slot and wakes whoever waits).
            drop(guard);
            return None;
        }
        Some(guard)
    }

    /// A slot for the shared range `start..end`, if the range packs, a slot is free and,
    /// once ours is published, no writer is queued and no fast writer's slot overlaps it.
    #[inline]
    fn fast_read(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        let word = pack(start, end, false)?;
        // Relaxed: a hint that skips the CAS while a writer is queued; checked again below.
        if self.queued_writers.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let (guard, slot) = self.take_slot(word, false)?;
        fence(Ordering::SeqCst);
        // Acquire (here and in `fast_conflicts`): reading the last writer's release (its
        // count going down, or its slot freed) makes its bytes visible to us.
        if self.queued_writers.load(Ordering::Acquire) != 0
            || self.fast_conflicts(Some(slot), start, end, false)
        {
            // A writer came: queue behind it instead (dropping the guard wakes it).
            drop(guard);
            return None;
        }
        Some(guard)
    }

    /// Whether a published range other than slot `skip` conflicts with `start..end` (taken
    /// exclusive if `exclusive`): it overlaps, and one of the two is exclusive.
    fn fast_conflicts(&self, skip: Option<usize>, start: u64, end: u64, exclusive: bool) -> bool {
        self.fast.iter().enumerate().any(|(i, s)| {
            // Acquire: a freed slot's holder is done with the bytes before we touch them.
            let w = s.0.load(Ordering::Acquire);
            w != 0 && Some(i) != skip && {
                let (s, e, x) = unpack(w);
                (exclusive || x) && s < end && start < e
            }
        })
    }

    /// Shared lock of `start..end` if it is free now: no request, granted or waiting,
    /// conflicts with it. Never waits.
    pub fn try_read(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        self.try_lock(start, end, false)
    }

    /// Exclusive lock of `start..end` if it is free now: no request, granted or waiting, and
    /// no published range overlaps it. Never waits, so it may be taken while holding other
    /// ranges (of this file too) without deadlocking.
    pub fn try_write(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        self.try_lock(start, end, true)
    }

    fn try_lock(&self, start: u64, end: u64, exclusive: bool) -> Option<RangeGuard<'_>> {
        let end = end.max(start.saturating_add(1));
        let fast = if exclusive { self.fast_write(start, end) } else { self.fast_read(start, end) };
        if fast.is_some() {
            return fast;
        }
        let mut q = sync::lock(&self.queue);
        let me = Request { ticket: q.next_ticket, start, end, exclusive };
        if q.requests.iter().any(|r| r.conflicts(&me)) {
            return None;
        }
        // Counted, then the slots checked (the queued request's half of the handshakes).
        // Relaxed: the fence orders them.
        self.queued.fetch_add(1, Ordering::Relaxed);
        if exclusive {
            self.queued_writers.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        if self.fast_conflicts(None, start, end, exclusive) {
            // Release: as when a queued request leaves. No one waits for the counts to fall:
            // requests that saw them queued themselves and wait on the queue.
            if exclusive {
                self.queued_writers.fetch_sub(1, Ordering::Release);
            }
            self.queued.fetch_sub(1, Ordering::Release);
            return None;
        }
        q.next_ticket += 1;
        let ticket = me.ticket;
        q.requests.push(me);
        Some(RangeGuard { lock: self, held: Held::Queued { ticket, exclusive } })
    }

    /// Shared lock of `start..end`.
    pub fn read(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.lock(start, end, Mode::Shared)
    }

    /// Exclusive lock of `start..end`.
    pub fn write(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.lock(start, end, Mode::Exclusive)
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let lock = self.lock;
        match self.held {
            Held::Fast { slot, exclusive } => {
                // Release: our accesses to the bytes happen before anyone that sees the free
                // slot. The fence: a queued request that read the slot before this store is
                // counted by the load below, and gets the wake-up.
                lock.fast[slot].0.store(0, Ordering::Release);
                fence(Ordering::SeqCst);
                // Relaxed (both): only decide whether to wake; the wake goes through the
                // mutex. Queued writers wait for readers' slots; any queued request may wait
                // for a writer's.
                let waiting = match exclusive {
                    true => lock.queued.load(Ordering::Relaxed) != 0,
                    false => lock.queued_writers.load(Ordering::Relaxed) != 0,
                };
                if waiting {
                    // Through the mutex: a waiter between its check and its wait holds it.
                    drop(sync::lock(&lock.queue));
                    lock.released.notify_all();
                }
            }
            Held::Queued { ticket, exclusive } => {
                let mut q = sync::lock(&lock.queue);
                if let Some(pos) = q.requests.iter().position(|r| r.ticket == ticket) {
                    q.requests.remove(pos);
                }
                // Release: a fast writer that reads the lower count sees our accesses.
                lock.queued.fetch_sub(1, Ordering::Release);
                if exclusive {
                    // Release: a fast reader that reads the lower count sees our bytes.
                    lock.queued_writers.fetch_sub(1, Ordering::Release);
                }
                let waiters = !q.requests.is_empty();
                drop(q);
                if waiters {
                    lock.released.notify_all();
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;

    /// Runs `body`, which takes locks that must not wait, in a thread, and fails the test with
    /// a message if it has not finished within `DEADLINE` (a lock blocked): a regression then
    /// names the test instead of stalling the run. The blocked thread is left behind.
    fn without_waiting(what: &str, body: impl FnOnce() + Send + 'static) {
        const DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
        let (done, finished) = mpsc::channel();
        thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        if finished.recv_timeout(DEADLINE).is_err() {
            panic!("{what}: not done within {DEADLINE:?}; a lock that should not wait blocked");
        }
    }

    #[test]
    fn shared_ranges_and_disjoint_exclusive_ranges_coexist() {
        without_waiting("shared and disjoint exclusive ranges", || {
            let l = RangeLock::default();
            let _a = l.read(0, 100);
            let _b = l.read(50, 150);
            let _c = l.write(200, 300);
            let _d = l.write(300, 400);
        });
    }

    #[test]
    fn overlapping_writer_waits_for_reader() {
        let l = Arc::new(RangeLock::default());
        let r = l.read(0, 10);
        let (tx, rx) = mpsc::channel();
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let _w = l2.write(5, 6);
            tx.send(()).unwrap();
        });
        // The writer is queued behind the reader: it cannot have finished. Wait until it is
        // queued, without sleeping, by polling the queue length under the lock.
        while sync::lock(&l.queue).requests.len() < 2 {
            thread::yield_now();
        }
        assert!(rx.try_recv().is_err(), "writer got in while an overlapping reader held the range");
        drop(r);
        rx.recv().unwrap();
        t.join().unwrap();
    }

    #[test]
    fn try_read_fails_only_on_a_conflict() {
        for fast in [true, false] {
            let l = RangeLock::default();
            // A queued reader elsewhere sends the writer to the queue, with its exact bytes.
            let queued = (!fast).then(|| l.try_read(9 * G + 1, 9 * G + 2).unwrap());
            let w = l.write(10, 20);
            assert_eq!(matches!(w.held, Held::Fast { .. }), fast);
            assert!(l.try_read(15, 16).is_none());
            // A fast writer holds whole granules; a queued one its bytes.
            assert_eq!(l.try_read(20, 30).is_some(), !fast, "fast {fast}");
            let r = l.try_read(G + 20, G + 30).expect("disjoint from the writer");
            let r2 = l.try_read(G + 25, G + 26).expect("readers share");
            drop(w);
            let r3 = l.try_read(0, 100).expect("only readers left");
            drop((r, r2, r3, queued));
            assert!(l.try_read(0, 1).is_some());
        }
    }

    #[test]
    fn try_write_fails_on_any_overlap_and_never_waits() {
        let l = RangeLock::default();
        let pin = l.read(G, 2 * G);
        assert!(l.try_write(G + 5, G + 6).is_none(), "own pin: must not wait for itself");
        assert!(l.try_write(100, u64::MAX).is_none(), "a queued range over the pin");
        let w = l.try_write(2 * G, 3 * G).expect("disjoint");
        assert!(l.try_write(2 * G, 2 * G + 1).is_none());
        let tail = l.try_write(5 * G + 3, u64::MAX).expect("the tail, queued");
        assert!(matches!(tail.held, Held::Queued { .. }));
        assert!(l.try_write(6 * G, 7 * G).is_none(), "inside the tail");
        drop((pin, w, tail));
        assert_eq!((l.writer_count(), l.queued.load(Ordering::SeqCst)), (0, 0));
        drop(l.write(0, u64::MAX));
    }

    #[test]
    fn disjoint_writers_take_slots_and_overlapping_ones_queue() {
        let l = Arc::new(RangeLock::default());
        let a = l.write(0, G);
        let b = l.write(G, 2 * G + 1);
        assert!(matches!(a.held, Held::Fast { .. }) && matches!(b.held, Held::Fast { .. }));
        let (tx, rx) = mpsc::channel();
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let c = l2.write(2 * G + 100, 2 * G + 200); // the same granule as b's last byte
            tx.send(matches!(c.held, Held::Queued { .. })).unwrap();
        });
        while l.queued.load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
        assert!(rx.try_recv().is_err(), "a writer got in while an overlapping fast writer held");
        // Something is queued: new writers queue too, even disjoint ones, and get in.
        let d = l.write(10 * G, 11 * G);
        assert!(matches!(d.held, Held::Queued { .. }));
        drop((a, d));
        drop(b);
        assert!(rx.recv().unwrap(), "the overlapping writer went through the queue");
        t.join().unwrap();
        assert_eq!((l.writer_count(), l.queued.load(Ordering::SeqCst)), (0, 0));
        assert!(l.fast.iter().all(|s| s.0.load(Ordering::SeqCst) == 0));
    }

    #[test]
    fn a_waiting_writer_blocks_later_readers() {
        // Fairness: reader R1 holds; writer W queues; reader R2 arrives after W and must wait.
        let l = RangeLock::default();
        let _r1 = l.read(0, 10);
        let mut q = sync::lock(&l.queue);
        q.requests.push(Request { ticket: 1000, start: 0, end: 10, exclusive: true });
        q.requests.push(Request { ticket: 1001, start: 0, end: 10, exclusive: false });
        assert!(!q.grantable(1000));
        assert!(!q.grantable(1001), "a later reader overtook a waiting writer");
        q.requests.push(Request { ticket: 1002, start: 20, end: 30, exclusive: true });
        assert!(q.grantable(1002), "a disjoint request must not wait");
    }

    const G: u64 = GRANULE;

    #[test]
    fn packing_is_exact_or_refused() {
        assert_eq!(pack(0, G, false).map(unpack), Some((0, G, false)));
        assert_eq!(pack(5 * G, 9 * G, true).map(unpack), Some((5 * G, 9 * G, true)));
        let far = (1u64 << (63 - LEN_BITS)) - 1;
        assert_eq!(pack(far * G, (far + 3) * G, true).map(unpack), Some((far * G, (far + 3) * G, true)));
        assert_eq!(pack(0, 10, false), None, "not whole granules");
        assert_eq!(pack(G, G, false), None, "empty");
        assert_eq!(pack(0, u64::MAX - u64::MAX % G, false), None, "too long");
        assert_eq!(pack((far + 1) * G, (far + 2) * G, false), None, "start too far");
    }

    /// Polls (never sleeping) until `n` writers wait in the queue. (Not the count alone: a
    /// writer's failed fast attempt counts itself for a moment before it queues.)
    fn until_writers(l: &RangeLock, n: u64) {
        loop {
            let queued = sync::lock(&l.queue).requests.iter().filter(|r| r.exclusive).count() as u64;
            if queued == n && l.writer_count() == n {
                return;
            }
            thread::yield_now();
        }
    }

    #[test]
    fn a_fast_reader_holds_off_an_overlapping_writer() {
        let l = Arc::new(RangeLock::default());
        let r = l.read(G, 2 * G);
        assert!(matches!(r.held, Held::Fast { .. }), "an aligned read with no writer takes a slot");
        let (tx, rx) = mpsc::channel();
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let _w = l2.write(G + 100, G + 101);
            tx.send(()).unwrap();
        });
        until_writers(&l, 1);
        assert!(rx.try_recv().is_err(), "writer got in while an overlapping fast reader held the range");
        // Counted, the writer sends later readers to the queue, behind it.
        assert!(l.try_read(G, 2 * G).is_none(), "a later reader overtook a waiting writer");
        let other = l.try_read(4 * G, 5 * G).expect("a disjoint reader still gets in");
        drop(r);
        rx.recv().unwrap();
        t.join().unwrap();
        drop(other);
        assert_eq!(l.writer_count(), 0);
        assert!(matches!(l.read(G, 2 * G).held, Held::Fast { .. }), "fast again once the writer left");
    }

    #[test]
    fn a_writer_never_waits_for_a_disjoint_fast_reader() {
        // One thread pins a page and writes the next one: it must not wait for itself.
        without_waiting("a writer beside its own thread's fast reader", || {
            let l = RangeLock::default();
            let _r = l.read(0, G);
            let _w = l.write(G, 2 * G);
            let _w2 = l.write(2 * G, u64::MAX);
        });
    }

    #[test]
    fn a_fast_reader_and_a_disjoint_fast_writer_share_the_slots() {
        let l = RangeLock::default();
        let w = l.write(0, G);
        let r = l.read(G, 2 * G);
        assert!(matches!(w.held, Held::Fast { .. }) && matches!(r.held, Held::Fast { .. }));
        assert!(l.try_read(100, 200).is_none(), "inside the writer's granule");
        assert_eq!(l.writer_count(), 1);
        drop((w, r));
        assert_eq!(l.writer_count(), 0);
    }

    #[test]
    fn readers_past_the_slots_take_the_queue() {
        let l = RangeLock::default();
        let guards: Vec<_> = (0..FAST_SLOTS as u64 + 3).map(|i| l.read(i * G, (i + 1) * G)).collect();
        let fast = guards.iter().filter(|g| matches!(g.held, Held::Fast { .. })).count();
        assert_eq!(fast, FAST_SLOTS);
        assert!(l.try_read(0, 1).is_some(), "unaligned: queued, shares with the readers");
        drop(guards);
        assert!(l.fast.iter().all(|s| s.0.load(Ordering::SeqCst) == 0));
        assert!(sync::lock(&l.queue).requests.is_empty());
        let _w = l.write(0, u64::MAX);
    }
}

/// The fast paths against each other and the queue: overlapping holders never overlap in time
/// (loom's cell reports any unsynchronized access), no wake-up is lost (loom reports a
/// deadlock), and a writer does not wait for a disjoint reader held by a thread that then
/// writes.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::Arc;
    use loom::cell::UnsafeCell;

    const G: u64 = GRANULE;

    type Cell = Arc<UnsafeCell<u64>>;

    fn new_lock_and_cell() -> (Arc<RangeLock>, Cell) {
        (Arc::new(RangeLock::default()), Arc::new(UnsafeCell::new(0)))
    }

    /// Takes `start..end` exclusive and, if `touch`, writes the cell under it.
    fn spawn_writer(
        l: &Arc<RangeLock>,
        cell: &Cell,
        start: u64,
        end: u64,
        touch: bool,
    ) -> loom::thread::JoinHandle<()> {
        let (l, cell) = (l.clone(), cell.clone());
        loom::thread::spawn(move || {
            let _w = l.write(start, end);
            if touch {
                // SAFETY: the exclusive range is the cell's only access (what loom checks).
                cell.with_mut(|p| unsafe { *p += 1 });
            }
        })
    }

    /// Reads the cell; the caller holds a shared range over the writers' (what loom checks).
    fn read_cell(cell: &Cell) {
        // SAFETY: the shared range keeps the writers out (what loom checks).
        cell.with(|p| unsafe { assert!(*p <= 2) });
    }

    #[test]
    fn a_fast_reader_and_an_overlapping_writer_exclude_each_other() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let writer = spawn_writer(&l, &cell, 0, G, true);
            {
                let _r = l.read(0, 2 * G);
                read_cell(&cell);
            }
            writer.join().unwrap();
            assert_eq!(l.writer_count(), 0);
        });
    }

    /// A reads and frees a slot that B (a disjoint reader) takes next; the writer that sees
    /// B's release must still be ordered after A's read.
    #[test]
    fn a_reused_slot_still_orders_its_first_reader() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let b = {
                let l = l.clone();
                loom::thread::spawn(move || drop(l.read(5 * G, 6 * G)))
            };
            let w = spawn_writer(&l, &cell, 0, G, true);
            {
                let _r = l.read(0, G);
                read_cell(&cell);
            }
            b.join().unwrap();
            w.join().unwrap();
        });
    }

    /// Two writers (the count goes 2 → 1 → 0) and a fast reader of the first one's range.
    #[test]
    fn two_writers_and_a_fast_reader() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let w1 = spawn_writer(&l, &cell, 0, G, true);
            let w2 = spawn_writer(&l, &cell, G, 2 * G, false);
            {
                let _r = l.read(0, G);
                read_cell(&cell);
            }
            w1.join().unwrap();
            w2.join().unwrap();
            assert_eq!(l.writer_count(), 0);
        });
    }

    /// A writer that must wait for a queued (unaligned) reader and a fast reader at once.
    #[test]
    fn a_writer_waits_for_queued_and_fast_readers() {
        loom::model(|| {
            let l = Arc::new(RangeLock::default());
            let queued = {
                let l = l.clone();
                loom::thread::spawn(move || drop(l.read(1, G)))
            };
            let fast = {
                let l = l.clone();
                loom::thread::spawn(move || drop(l.read(G, 2 * G)))
            };
            drop(l.write(0, 2 * G));
            queued.join().unwrap();
            fast.join().unwrap();
            assert!(sync::lock(&l.queue).requests.is_empty());
        });
    }

    /// `try_read` never waits and, when it succeeds, keeps the writer out like `read`.
    #[test]
    fn try_read_excludes_a_writer_or_fails() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let w = spawn_writer(&l, &cell, 0, G, true);
            if let Some(_r) = l.try_read(0, G) {
                read_cell(&cell);
            }
            w.join().unwrap();
        });
    }

    /// Two writers of one page, both trying the fast path: they never hold it together
    /// (both may back off to the queue; the queue then orders them).
    #[test]
    fn fast_writers_exclude_each_other() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let other = spawn_writer(&l, &cell, 0, G, true);
            {
                let _w = l.write(100, 200);
                // SAFETY: the exclusive range is the cell's only access (what loom checks).
                cell.with_mut(|p| unsafe { *p += 1 });
            }
            other.join().unwrap();
            assert_eq!(l.writer_count(), 0);
            assert_eq!(l.queued.load(Ordering::SeqCst), 0);
        });
    }

    /// A fast writer against a queued (unaligned) reader of its page: the reader waits for
    /// the writer's slot, or the writer backs off behind the reader.
    #[test]
    fn a_fast_writer_and_a_queued_reader_exclude_each_other() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let w = spawn_writer(&l, &cell, 0, G, true);
            {
                let _r = l.read(1, 10);
                read_cell(&cell);
            }
            w.join().unwrap();
            assert_eq!(l.queued.load(Ordering::SeqCst), 0);
        });
    }

    /// Disjoint fast writers both get in, and a writer of both pages waits for the two.
    #[test]
    fn a_wide_writer_waits_for_two_fast_writers() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let a = spawn_writer(&l, &cell, 0, G, true);
            let b = {
                let l = l.clone();
                loom::thread::spawn(move || drop(l.write(G, 2 * G)))
            };
            {
                let _w = l.write(0, 2 * G);
                // SAFETY: the exclusive range is the cell's only access (what loom checks).
                cell.with_mut(|p| unsafe { *p += 1 });
            }
            a.join().unwrap();
            b.join().unwrap();
        });
    }

    /// `try_write` (queued, for a range to the end) never waits and, when it succeeds, keeps a
    /// fast reader of a page inside it out.
    #[test]
    fn try_write_excludes_a_fast_reader_or_fails() {
        loom::model(|| {
            let (l, cell) = new_lock_and_cell();
            let reader = {
                let (l, cell) = (l.clone(), cell.clone());
                loom::thread::spawn(move || {
                    let _r = l.read(G, 2 * G);
                    read_cell(&cell);
                })
            };
            if let Some(_w) = l.try_write(1, u64::MAX) {
                // SAFETY: the exclusive range is the cell's only access (what loom checks).
                cell.with_mut(|p| unsafe { *p += 1 });
            }
            reader.join().unwrap();
            assert_eq!(l.queued.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn a_reader_that_writes_elsewhere_does_not_wait_for_itself() {
        loom::model(|| {
            let l = Arc::new(RangeLock::default());
            let other = spawn_writer(&l, &Arc::new(UnsafeCell::new(0)), 0, G, false);
            let r = l.read(0, G);
            drop(l.write(G, 2 * G));
            drop(r);
            other.join().unwrap();
        });
    }
}
