//! The measured phase: the benchmark threads, each issuing and timing its ops, and the main
//! thread watching them (progress, stalls) and merging what they measured.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
// Timing by the CPU's time-stamp counter, as fio does: a reading costs a third of a
// clock_gettime, which took about 8% of a cached 4 KiB write when every op was timed.
use quanta::Instant;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::engine::{AlignedBuf, AsyncIo, Engine, EngineKind};
use super::plan::{op_gens, Plan, Stop};
use super::progress::Progress;
use super::report;
use super::workload::{fill_content, OpGen};
use crate::trace::Access;

/// The measured phase's result, all threads merged.
pub(super) struct Measured {
    pub(super) seconds: f64,
    pub(super) ops: u64,
    pub(super) reads: u64,
    pub(super) bytes: u64,
    pub(super) hist: Histogram<u64>,
    /// Latencies of reads and of writes.
    pub(super) by_kind: [Histogram<u64>; 2],
    /// Every thread's requests, by issue time (`--record-trace`).
    pub(super) recorded: Vec<Access>,
}

struct ThreadResult {
    start: Instant,
    end: Instant,
    ops: u64,
    reads: u64,
    bytes: u64,
    hist: Histogram<u64>,
    /// Latencies of reads and of writes.
    by_kind: [Histogram<u64>; 2],
    /// The thread's requests with their issue times (`--record-trace`).
    recorded: Vec<Access>,
}

/// A per-thread op counter on its own cache line, so publishing progress costs a plain store;
/// and a heartbeat, bumped while a timed replay waits for its next request on purpose.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64, AtomicU64);

/// If no op completes for this long, the engine is taken to be stuck and the process exits.
const STALL_LIMIT: Duration = Duration::from_secs(120);

pub(super) fn measure<E: Engine>(eng: &E, kind: EngineKind, p: &Plan, record: bool) -> Result<Measured> {
    let gens = op_gens(p).map_err(anyhow::Error::msg)?;
    // Each thread gets its buffer here (the thread first touches it); no allocation per op.
    let bufs = (0..p.threads).map(|_| AlignedBuf::new(p.bs as usize)).collect::<Result<Vec<_>>>()?;
    let barrier = Barrier::new(p.threads + 1);
    let abort = AtomicBool::new(false);
    let counters: Vec<Counter> = (0..p.threads).map(|_| Counter::default()).collect();
    let quota = |t: usize| match p.stop {
        // A trace's threads share its requests and stop at its end (cut to --ops).
        Stop::Ops(_) if p.trace.is_some() => u64::MAX,
        Stop::Ops(n) => n / p.threads as u64 + u64::from((t as u64) < n % p.threads as u64),
        Stop::Runtime(_) => u64::MAX,
    };
    let results: Vec<Result<ThreadResult>> = thread::scope(|s| {
        let handles: Vec<_> = gens
            .into_iter()
            .zip(bufs)
            .enumerate()
            .map(|(t, (gen, buf))| {
                let w = Worker {
                    eng,
                    gen,
                    buf,
                    seed: p.seed,
                    thread: t,
                    quota: quota(t),
                    runtime: match p.stop {
                        Stop::Runtime(d) => Some(d),
                        Stop::Ops(_) => None,
                    },
                    barrier: &barrier,
                    abort: &abort,
                    done: &counters[t].0,
                    heartbeat: &counters[t].1,
                    depth: p.upcache.iodepth,
                    lat_every: p.lat_every,
                    fsync: p.fsync,
                    record,
                };
                s.spawn(move || w.run())
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let (len, long) = match p.stop {
            Stop::Runtime(d) => (d.as_millis() as u64, d > Duration::from_secs(2)),
            Stop::Ops(n) => (n, false),
        };
        let mut bar = Progress::new(&format!("{} {}", kind.name(), p.rw.name()), len, long);
        let (mut last_done, mut last_change) = (0, Instant::now());
        let mut status = p.status_interval.map(|every| Status::new(kind, p.bs, every, start));
        while !handles.iter().all(|h| h.is_finished()) {
            thread::sleep(Duration::from_millis(50));
            let done: u64 = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
            if let Some(st) = &mut status {
                st.tick(done, &bar);
            }
            // Relaxed: stall detection only. Waiting for a trace's next request is progress.
            let alive = done + counters.iter().map(|c| c.1.load(Ordering::Relaxed)).sum::<u64>();
            let secs = start.elapsed().as_secs_f64();
            match p.stop {
                Stop::Runtime(_) => bar.set(start.elapsed().as_millis() as u64),
                Stop::Ops(_) => bar.set(done),
            }
            bar.set_message(format!("{:.0} iops", done as f64 / secs.max(1e-9)));
            if alive != last_done {
                (last_done, last_change) = (alive, Instant::now());
            } else if last_change.elapsed() > STALL_LIMIT {
                // The threads cannot be cancelled; report and leave rather than hang.
                eprintln!(
                    "error: the {} engine completed no op for {} s: it looks stuck (deadlock?)",
                    kind.name(),
                    STALL_LIMIT.as_secs()
                );
                std::process::exit(3);
            }
        }
        bar.finish();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a benchmark thread panicked"))))
            .collect()
    });
    let results = results.into_iter().collect::<Result<Vec<_>>>()?;
    let start = results.iter().map(|r| r.start).min().context("no threads")?;
    let end = results.iter().map(|r| r.end).max().context("no threads")?;
    let ops = results.iter().map(|r| r.ops).sum();
    let reads = results.iter().map(|r| r.reads).sum();
    let bytes = results.iter().map(|r| r.bytes).sum();
    let mut recorded = Vec::new();
    let mut hists = Vec::with_capacity(results.len());
    let (mut reads_h, mut writes_h) = (Vec::new(), Vec::new());
    for r in results {
        // Times relative to the earliest thread's start.
        let shift = r.start.duration_since(start).as_micros() as u64;
        recorded.extend(r.recorded.into_iter().map(|a| Access { time_us: a.time_us + shift, ..a }));
        hists.push(r.hist);
        let [rh, wh] = r.by_kind;
        reads_h.push(rh);
        writes_h.push(wh);
    }
    recorded.sort_by_key(|a| a.time_us);
    Ok(Measured {
        seconds: (end - start).as_secs_f64().max(1e-9),
        ops,
        reads,
        bytes,
        hist: report::merge(&hists),
        by_kind: [report::merge(&reads_h), report::merge(&writes_h)],
        recorded,
    })
}

/// `--status-interval`: the figures of each interval, printed as it ends.
struct Status {
    name: &'static str,
    bs: u64,
    every: Duration,
    start: Instant,
    /// The last interval's end and the ops done by then.
    last: (Instant, u64),
}

impl Status {
    fn new(kind: EngineKind, bs: u64, every: Duration, start: Instant) -> Status {
        Status { name: kind.name(), bs, every, start, last: (start, 0) }
    }

    /// Prints the interval that ended, if one did, given the ops done so far.
    fn tick(&mut self, done: u64, bar: &Progress) {
        let now = Instant::now();
        let secs = now.duration_since(self.last.0).as_secs_f64();
        if secs < self.every.as_secs_f64() {
            return;
        }
        let ops = done.saturating_sub(self.last.1);
        let iops = ops as f64 / secs;
        bar.println(format!(
            "status {} at {:.1} s: {:.0} iops, {:.1} MiB/s over the last {:.2} s ({done} ops in all)",
            self.name,
            now.duration_since(self.start).as_secs_f64(),
            iops,
            iops * self.bs as f64 / (1 << 20) as f64,
            secs
        ));
        self.last = (now, done);
    }
}

/// A benchmark thread's arrival at the common start. One that fails or panics before it
/// still arrives, and sets `abort`, so the other threads and the main thread never wait for
/// it forever (they did: a thread's panic in its setup hung the bench).
struct StartLine<'a> {
    barrier: &'a Barrier,
    abort: &'a AtomicBool,
    crossed: bool,
}

impl StartLine<'_> {
    fn cross(&mut self) {
        self.crossed = true;
        self.barrier.wait();
    }
}

impl Drop for StartLine<'_> {
    fn drop(&mut self) {
        if !self.crossed {
            // Relaxed: the barrier orders it before the others' next look.
            self.abort.store(true, Ordering::Relaxed);
            self.barrier.wait();
        }
    }
}

/// One benchmark thread's state, all allocated before the clock starts.
struct Worker<'a, E> {
    eng: &'a E,
    gen: OpGen,
    buf: AlignedBuf,
    seed: u64,
    thread: usize,
    quota: u64,
    runtime: Option<Duration>,
    barrier: &'a Barrier,
    abort: &'a AtomicBool,
    done: &'a AtomicU64,
    /// Bumped while waiting for a timed replay's next request.
    heartbeat: &'a AtomicU64,
    /// Ops in flight with `--api async`.
    depth: usize,
    /// Time one op in this many.
    lat_every: u64,
    /// Sync every this many writes (0 never).
    fsync: u64,
    /// Keep every request and its issue time (`--record-trace`).
    record: bool,
}

impl<E: Engine> Worker<'_, E> {
    fn run(mut self) -> Result<ThreadResult> {
        let mut start_line = StartLine { barrier: self.barrier, abort: self.abort, crossed: false };
        let queue = self.eng.queue(self.depth)?;
        if let Some(q) = queue {
            return self.run_queued(q, start_line);
        }
        let mut rng = SmallRng::seed_from_u64(self.seed.wrapping_add(self.thread as u64));
        let mut hist = report::new_histogram();
        // Reads' and writes' latencies apart as well.
        let mut by_kind = [report::new_histogram(), report::new_histogram()];
        // The write pattern: non-zero pseudo-random bytes, filled once.
        fill_content(&mut self.buf, !self.seed, usize::MAX - self.thread, 0);
        let stamp = self.buf.len().min(8);
        start_line.cross();
        let start = Instant::now();
        let deadline = self.runtime.map(|d| start + d);
        let (mut n, mut reads, mut bytes, mut end) = (0u64, 0u64, 0u64, start);
        let mut recorded = self.record.then(Vec::new);
        // Writes since the last sync (`--fsync`; never equal to a zero `fsync`, as it counts
        // from 1).
        let mut unsynced = 0u64;
        // Only every `lat_every`-th op is timed (and checks the deadline): reading the clock
        // twice costs about as much as a pin, so timing every op would measure the clock.
        let every = self.lat_every.max(1);
        // Ops until the next timed one (a countdown: a division per op costs a pin's worth).
        let mut untimed = 0u64;
        while n < self.quota {
            let Some(op) = self.gen.next(&mut rng) else { break };
            if let Some(at) = op.at_us {
                // A replay at the trace's timing: wait for the request's time (late: go now).
                // Sleeps of at most a second, each a heartbeat for the stall detector (a trace
                // may be idle for hours).
                let due = start + Duration::from_micros(at);
                loop {
                    let now = Instant::now();
                    if due <= now || self.abort.load(Ordering::Relaxed) {
                        break;
                    }
                    thread::sleep((due - now).min(Duration::from_secs(1)));
                    // Relaxed: stall detection only.
                    self.heartbeat.fetch_add(1, Ordering::Relaxed);
                }
            }
            let timed = untimed == 0;
            untimed = if timed { every - 1 } else { untimed - 1 };
            let t0 = if timed { Some(Instant::now()) } else { None };
            if let Some(r) = &mut recorded {
                let at = t0.unwrap_or_else(Instant::now).duration_since(start).as_micros() as u64;
                r.push(Access {
                    time_us: at,
                    write: !op.read,
                    volume: op.file as u32,
                    offset: op.offset,
                    len: op.len as u64,
                });
            }
            let r = if op.read {
                self.eng.read(op.file, &mut self.buf[..op.len], op.offset)
            } else {
                // Stamp the op number so successive writes differ (cheap: 8 bytes).
                self.buf[..stamp].copy_from_slice(&n.to_le_bytes()[..stamp]);
                unsynced += 1;
                self.eng.write(op.file, &self.buf[..op.len], op.offset).and_then(|()| {
                    if unsynced == self.fsync {
                        unsynced = 0;
                        self.eng.sync_data(op.file)
                    } else {
                        Ok(())
                    }
                })
            };
            if let Err(e) = r {
                self.abort.store(true, Ordering::Relaxed);
                let what = if op.read { "read" } else { "write" };
                return Err(e.context(format!("{what} of f{} at offset {}", op.file, op.offset)));
            }
            n += 1;
            reads += u64::from(op.read);
            bytes += op.len as u64;
            if let Some(t0) = t0 {
                let t1 = Instant::now();
                let ns = (t1 - t0).as_nanos() as u64;
                hist.saturating_record(ns);
                by_kind[usize::from(!op.read)].saturating_record(ns);
                end = t1;
                // Relaxed: progress display and stall detection only.
                self.done.store(n, Ordering::Relaxed);
                if deadline.is_some_and(|d| t1 >= d) || self.abort.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
        if n % every != 0 || every > 1 {
            end = Instant::now();
            self.done.store(n, Ordering::Relaxed); // Relaxed: as above.
        }
        Ok(ThreadResult {
            start,
            end,
            ops: n,
            reads,
            bytes,
            hist,
            by_kind,
            recorded: recorded.unwrap_or_default(),
        })
    }

    /// `--api async`: keeps `depth` ops in flight on the thread's queue; an op's latency runs
    /// from its submission to the reap that returns it.
    fn run_queued(
        mut self,
        mut q: Box<dyn AsyncIo + '_>,
        mut start_line: StartLine<'_>,
    ) -> Result<ThreadResult> {
        let mut rng = SmallRng::seed_from_u64(self.seed.wrapping_add(self.thread as u64));
        let mut hist = report::new_histogram();
        // Reads' and writes' latencies apart as well.
        let mut by_kind = [report::new_histogram(), report::new_histogram()];
        let bs = self.buf.len();
        let mut bufs: Vec<Vec<u8>> = (0..self.depth)
            .map(|i| {
                let mut b = vec![0u8; bs];
                // Each slot's own pattern, at an offset of its own (a multiple of 8).
                fill_content(&mut b, !self.seed, usize::MAX - self.thread, (i * bs) as u64);
                b
            })
            .collect();
        // Per slot: submission time and whether it is a read.
        let mut slots: Vec<(Instant, bool)> = vec![(Instant::now(), true); self.depth];
        let mut free: Vec<u64> = (0..self.depth as u64).collect();
        let mut done = Vec::with_capacity(self.depth);
        start_line.cross();
        let start = Instant::now();
        let deadline = self.runtime.map(|d| start + d);
        let (mut n, mut submitted, mut reads, mut end) = (0u64, 0u64, 0u64, start);
        let mut stop = false;
        loop {
            while !stop && submitted < self.quota {
                let Some(tag) = free.pop() else { break };
                // Generated workloads never end (traces are refused with the async API).
                let Some(op) = self.gen.next(&mut rng) else { break };
                let buf = bufs.pop().expect("a buffer per free slot");
                slots[tag as usize] = (Instant::now(), op.read);
                if let Err(e) = q.submit(op.file, op.offset, buf, !op.read, tag) {
                    self.abort.store(true, Ordering::Relaxed);
                    let what = if op.read { "read" } else { "write" };
                    return Err(e.context(format!("queue a {what} of f{} at offset {}", op.file, op.offset)));
                }
                submitted += 1;
            }
            if submitted == n {
                break;
            }
            q.wait(1, &mut done);
            let t1 = Instant::now();
            for (tag, r, buf) in done.drain(..) {
                let (t0, read) = slots[tag as usize];
                r.with_context(|| format!("queued {}", if read { "read" } else { "write" }))?;
                let ns = (t1 - t0).as_nanos() as u64;
                hist.saturating_record(ns);
                by_kind[usize::from(!read)].saturating_record(ns);
                n += 1;
                reads += u64::from(read);
                bufs.push(buf);
                free.push(tag);
            }
            end = t1;
            // Relaxed: progress display and stall detection only.
            self.done.store(n, Ordering::Relaxed);
            stop |= deadline.is_some_and(|d| t1 >= d) || self.abort.load(Ordering::Relaxed);
        }
        Ok(ThreadResult {
            start,
            end,
            ops: n,
            reads,
            bytes: n * bs as u64,
            hist,
            by_kind,
            recorded: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_fails_or_panics_before_the_start_still_arrives() {
        let barrier = Barrier::new(3);
        let abort = AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        thread::scope(|s| {
            let line = || StartLine { barrier: &barrier, abort: &abort, crossed: false };
            s.spawn(move || drop(line())); // an early `return Err(..)`
            let panicked = s.spawn(move || {
                let _line = line();
                panic!("a setup that panics (this message is expected)");
            });
            s.spawn(|| {
                barrier.wait();
                tx.send(()).unwrap();
            });
            // A watchdog, so that a regression fails instead of hanging the suite.
            let arrived = rx.recv_timeout(Duration::from_secs(60));
            assert!(arrived.is_ok(), "the main thread waits forever at the start");
            assert!(panicked.join().is_err());
        });
        assert!(abort.load(Ordering::Relaxed), "the others are told to stop");
    }
}
