//! The file range lock under concurrency (seeds 001 §3.2, 003 §4.1): no two holders of
//! overlapping ranges where one is exclusive, ever; and progress under a writer-heavy or a
//! reader-heavy mix (a writer is not starved by a stream of readers on the fast path, nor a
//! reader by a stream of writers). The exact fairness rule (a counted writer sends later
//! readers behind it) is checked step by step in `file/range_lock.rs`'s unit tests and loom
//! models; here it runs under load.
//!
//! Holders mark the 512-byte units of their range in a shared table (readers count up, a writer
//! takes a unit outright) and fail the test on any conflict. Ranges are drawn in units, some on
//! 4 KiB granules (the reader fast path) and some not (the queue).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread;

use proptest::prelude::*;
use upcache::internals::file::range_lock::{Mode, RangeLock};

const UNIT: u64 = 512;
const UNITS: usize = 64;
/// A unit held by a writer.
const WRITER: i64 = -1;

/// Who holds each unit now.
struct Table([AtomicI64; UNITS]);

impl Table {
    fn new() -> Self {
        Table(std::array::from_fn(|_| AtomicI64::new(0)))
    }

    /// Marks `units` as held; panics on a conflict with a holder already there.
    fn enter(&self, units: std::ops::Range<usize>, exclusive: bool) {
        for u in units {
            // SeqCst (all of the table): it is the test's oracle, not code under test.
            let ok = if exclusive {
                self.0[u].compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            } else {
                self.0[u]
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v >= 0).then_some(v + 1))
                    .is_ok()
            };
            assert!(ok, "unit {u} held against an {} holder", if exclusive { "exclusive" } else { "shared" });
        }
    }

    fn leave(&self, units: std::ops::Range<usize>, exclusive: bool) {
        for u in units {
            if exclusive {
                self.0[u].store(0, Ordering::SeqCst);
            } else {
                self.0[u].fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// One lock request: units `start..start + len`, exclusive or shared, taken with `try_read`
/// (shared only) or waiting, held across `hold` yields.
#[derive(Debug, Clone)]
struct Op {
    start: usize,
    len: usize,
    exclusive: bool,
    try_only: bool,
    hold: u8,
}

fn op() -> impl Strategy<Value = Op> {
    // Half the ranges on whole 4 KiB granules (8 units), so both paths run.
    let range = prop_oneof![
        (0..UNITS / 8, 1..3usize).prop_map(|(g, n)| (g * 8, (n * 8).min(UNITS - g * 8))),
        (0..UNITS, 1..12usize).prop_map(|(s, n)| (s, n.min(UNITS - s))),
    ];
    (range, any::<bool>(), 0..4u8, 0..3u8).prop_map(|((start, len), exclusive, t, hold)| Op {
        start,
        len,
        exclusive,
        try_only: !exclusive && t == 0,
        hold,
    })
}

fn run(lock: &RangeLock, table: &Table, op: &Op) {
    let (s, e) = (op.start as u64 * UNIT, (op.start + op.len) as u64 * UNIT);
    let guard = if op.try_only {
        lock.try_read(s, e)
    } else {
        Some(lock.lock(s, e, if op.exclusive { Mode::Exclusive } else { Mode::Shared }))
    };
    let Some(guard) = guard else { return };
    table.enter(op.start..op.start + op.len, op.exclusive);
    for _ in 0..op.hold {
        thread::yield_now();
    }
    table.leave(op.start..op.start + op.len, op.exclusive);
    drop(guard);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any mix of shared and exclusive requests from three threads: overlapping holders are
    /// never both granted unless both are shared, and every thread finishes.
    #[test]
    fn overlapping_holders_are_never_granted_together(
        ops in proptest::collection::vec(proptest::collection::vec(op(), 1..60), 3),
    ) {
        let lock = RangeLock::default();
        let table = Table::new();
        thread::scope(|s| {
            for list in &ops {
                let (lock, table) = (&lock, &table);
                s.spawn(move || list.iter().for_each(|op| run(lock, table, op)));
            }
        });
        prop_assert!(table.0.iter().all(|u| u.load(Ordering::SeqCst) == 0));
    }
}

/// How long the waiter of `waiter_among` may take for its rounds (about a second normally).
const STARVED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `contenders` threads that take overlapping ranges (exclusive if `exclusive`) over and
/// over until this thread has taken its own overlapping request `rounds` times, every holder
/// checked against the table. If the lock let the contenders starve this thread, it would
/// wait for ever: past `STARVED_AFTER` a watchdog stops the contenders, the waiter then gets
/// its lock, and the test fails saying so.
fn waiter_among(contenders: usize, exclusive: bool, waiter_exclusive: bool, rounds: u64) {
    let lock = RangeLock::default();
    let table = Table::new();
    let stop = AtomicBool::new(false);
    let starved = AtomicBool::new(false);
    let taken = AtomicU64::new(0);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    thread::scope(|s| {
        let (watched_stop, starved) = (&stop, &starved);
        s.spawn(move || {
            if finished.recv_timeout(STARVED_AFTER).is_err() {
                starved.store(true, Ordering::SeqCst);
                watched_stop.store(true, Ordering::SeqCst);
            }
        });
        for i in 0..contenders {
            let (lock, table, stop, taken) = (&lock, &table, &stop, &taken);
            s.spawn(move || {
                // Two overlapping ranges, so shared contenders keep the range held between
                // them at all times.
                let op = Op { start: 8 * (i % 2), len: 16, exclusive, try_only: false, hold: 1 };
                while !stop.load(Ordering::Relaxed) {
                    run(lock, table, &op);
                    taken.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Start once every contender is in its loop (yielding, not sleeping).
        while taken.load(Ordering::Relaxed) < contenders as u64 {
            thread::yield_now();
        }
        let op = Op { start: 4, len: 16, exclusive: waiter_exclusive, try_only: false, hold: 0 };
        for _ in 0..rounds {
            if starved.load(Ordering::SeqCst) {
                break;
            }
            run(&lock, &table, &op);
        }
        let _ = done.send(());
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        !starved.load(Ordering::SeqCst),
        "the waiter (exclusive: {waiter_exclusive}) did not finish {rounds} rounds among {contenders} contenders \
         (exclusive: {exclusive}) within {STARVED_AFTER:?}: starved"
    );
}

#[test]
fn a_writer_is_not_starved_by_a_stream_of_readers() {
    // Readers on whole granules: the fast path, which must step aside for a counted writer.
    waiter_among(3, false, true, 2_000);
}

#[test]
fn a_reader_is_not_starved_by_a_stream_of_writers() {
    waiter_among(3, true, false, 2_000);
}

#[test]
fn a_writer_is_not_starved_by_a_stream_of_writers() {
    waiter_among(3, true, true, 2_000);
}
