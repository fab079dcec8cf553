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
//! # Locking
//! The internal mutex is held only to add, check and remove requests, never while the caller
//! does I/O. Range locks of one file are taken one at a time per thread; a thread never
//! holds a range lock of one file while waiting for one of another (see the global lock order
//! in the crate docs).

use crate::sync::{self, Condvar, Mutex};

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

/// The per-file range lock.
#[derive(Debug, Default)]
pub struct RangeLock {
    queue: Mutex<Queue>,
    released: Condvar,
}

/// A held range; released on drop.
#[must_use = "the range is unlocked when the guard drops"]
#[derive(Debug)]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    ticket: u64,
}

impl RangeLock {
    /// Locks bytes `start..end` shared (`exclusive` false) or exclusive, waiting for
    /// conflicting requests that arrived earlier. An empty range is widened to one byte so
    /// that it still orders against writes at that offset.
    pub fn lock(&self, start: u64, end: u64, exclusive: bool) -> RangeGuard<'_> {
        let end = end.max(start.saturating_add(1));
        let mut q = sync::lock(&self.queue);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.requests.push(Request { ticket, start, end, exclusive });
        while !q.grantable(ticket) {
            q = sync::wait(&self.released, q);
        }
        RangeGuard { lock: self, ticket }
    }

    /// Shared lock of `start..end` if it is free now: no request, granted or waiting,
    /// conflicts with it. Never waits.
    pub fn try_read(&self, start: u64, end: u64) -> Option<RangeGuard<'_>> {
        let end = end.max(start.saturating_add(1));
        let mut q = sync::lock(&self.queue);
        let me = Request { ticket: q.next_ticket, start, end, exclusive: false };
        if q.requests.iter().any(|r| r.conflicts(&me)) {
            return None;
        }
        q.next_ticket += 1;
        let ticket = me.ticket;
        q.requests.push(me);
        Some(RangeGuard { lock: self, ticket })
    }

    /// Shared lock of `start..end`.
    pub fn read(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.lock(start, end, false)
    }

    /// Exclusive lock of `start..end`.
    pub fn write(&self, start: u64, end: u64) -> RangeGuard<'_> {
        self.lock(start, end, true)
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut q = sync::lock(&self.lock.queue);
        if let Some(pos) = q.requests.iter().position(|r| r.ticket == self.ticket) {
            q.requests.remove(pos);
        }
        let waiters = !q.requests.is_empty();
        drop(q);
        if waiters {
            self.lock.released.notify_all();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn shared_ranges_and_disjoint_exclusive_ranges_coexist() {
        let l = RangeLock::default();
        let _a = l.read(0, 100);
        let _b = l.read(50, 150);
        let _c = l.write(200, 300);
        let _d = l.write(300, 400);
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
        let l = RangeLock::default();
        let w = l.write(10, 20);
        assert!(l.try_read(15, 16).is_none());
        let r = l.try_read(20, 30).expect("disjoint from the writer");
        let r2 = l.try_read(25, 26).expect("readers share");
        drop(w);
        let r3 = l.try_read(0, 100).expect("only readers left");
        drop((r, r2, r3));
        assert!(l.try_read(0, 1).is_some());
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
}
