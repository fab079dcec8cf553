//! A simulated SSD (issue 6): what a device does to the timing and the fate of I/O, on top of a
//! device directory whose backing files hold the data (put the directory on tmpfs, such as
//! `/dev/shm`, to keep the data in memory and the real disk out of the measurement).
//!
//! - **Timing.** `channels` independent units; a request takes the unit that frees up first
//!   and holds it for its latency plus its bytes at the unit's share of the bandwidth, so
//!   requests beyond `channels` queue. The caller sleeps until its request completes. Jitter
//!   is drawn from a generator seeded by `seed`.
//! - **Garbage collection.** Every `gc_every` bytes written start an episode of `gc_time`:
//!   writes wait for its end (queued, not holding a channel), reads take `gc_read_slowdown`
//!   times as long, and
//!   [`SimDevice::collecting`] reports it (the signal ScalaCache §5.4 reads from its drive).
//! - **Faults.** [`SimDevice::inject`]: EIO on reads, writes or flushes (all, in an offset
//!   range, or from the Nth operation on), ENOSPC on writes past a capacity.
//! - **Volatile write cache.** Up to `volatile_bytes` of written data is lost by
//!   [`SimDevice::power_cut`] unless a flush (a backing file's `sync_data`) came after it; older
//!   writes beyond that capacity count as written to flash. After a cut the device fails every
//!   request with EIO until [`SimDevice::power_on`], as a powered-off drive would.
//!
//! Deterministic from the seed and the sequence of requests, except for the host's own
//! scheduling of the sleeping threads.
//!
//! A cache uses one through `Config::with_sim_device(i, Arc<SimDevice>)` (`upcache bench
//! --devices sim:N --sim k=v,...`).
//!
//! Undo of the volatile cache: each write keeps the bytes it overwrote (zeros past the old
//! end) until a flush; a power cut restores them newest first. A write in flight across a cut
//! fails (EIO). A flush waits for every completion booked so far, GC-delayed writes included.
//! A truncate (`SimDevice::truncate`) is volatile too: until a flush, a cut restores the old
//! size and the bytes it cut. A space reservation (`SimDevice::reserve`) changes no bytes,
//! and fails as a write there would (ENOSPC past a `NoSpace` capacity). Outside the
//! simulation: the catalog and metadata log are real files. So after a cut, drop the caches
//! on the device and reopen the array, as a crashed process would, rather than keep using them.

use crate::sync::{lock, Mutex};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A simulated device's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Independent units serving requests in parallel.
    pub channels: usize,
    /// Fixed time of a read, before transfer time.
    pub read_latency: Duration,
    /// Fixed time of a write (into the drive's cache), before transfer time.
    pub write_latency: Duration,
    /// Bytes per second of the whole device (split evenly over the channels).
    pub bandwidth: u64,
    /// Bytes written between garbage-collection episodes (0: never).
    pub gc_every: u64,
    /// Length of an episode.
    pub gc_time: Duration,
    /// How many times longer reads take during an episode.
    pub gc_read_slowdown: u32,
    /// Bytes of written data a power cut can lose (0: writes are durable when they complete).
    pub volatile_bytes: u64,
    /// Random jitter of each request's service time, in percent (uniform in ±jitter).
    pub jitter_pct: u32,
    /// Seed of the jitter.
    pub seed: u64,
}

impl Default for SimConfig {
    /// A small NVMe SSD, slowed so that a 2-core host can keep 8 of them busy: 80 µs reads,
    /// 20 µs writes (into the drive's cache), 8 channels, 800 MB/s; GC of 10 ms every 64 MiB
    /// written, reads 4x slower during it; 8 MiB volatile cache; ±10% jitter.
    fn default() -> Self {
        SimConfig {
            channels: 8,
            read_latency: Duration::from_micros(80),
            write_latency: Duration::from_micros(20),
            bandwidth: 800_000_000,
            gc_every: 64 << 20,
            gc_time: Duration::from_millis(10),
            gc_read_slowdown: 4,
            volatile_bytes: 8 << 20,
            jitter_pct: 10,
            seed: 1,
        }
    }
}

impl SimConfig {
    /// Applies `key=value` settings separated by commas: channels, read-latency,
    /// write-latency, bandwidth (bytes/s), gc-every (bytes), gc-time, gc-read-slowdown,
    /// volatile (bytes), jitter (percent), seed. Durations take ns/us/ms/s suffixes, sizes
    /// k/m/g (binary).
    pub fn parse_settings(mut self, s: &str) -> crate::error::Result<Self> {
        let bad = |what: String| crate::error::Error::new(crate::error::ErrorKind::InvalidInput, what);
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) =
                item.split_once('=').ok_or_else(|| bad(format!("sim setting {item:?} is not key=value")))?;
            let num = |v: &str| -> crate::error::Result<u64> {
                let (n, mult) = match v.to_ascii_lowercase() {
                    x if x.ends_with('k') => (x[..x.len() - 1].to_string(), 1 << 10),
                    x if x.ends_with('m') => (x[..x.len() - 1].to_string(), 1 << 20),
                    x if x.ends_with('g') => (x[..x.len() - 1].to_string(), 1 << 30),
                    x => (x, 1),
                };
                n.parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(mult))
                    .ok_or_else(|| bad(format!("{k}={v}: not a count")))
            };
            let dur = |v: &str| -> crate::error::Result<Duration> {
                let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
                let n: u64 = n.parse().map_err(|_| bad(format!("{k}={v}: not a duration")))?;
                Ok(match unit {
                    "ns" => Duration::from_nanos(n),
                    "us" | "" => Duration::from_micros(n),
                    "ms" => Duration::from_millis(n),
                    "s" => Duration::from_secs(n),
                    _ => return Err(bad(format!("{k}={v}: unknown unit {unit:?}"))),
                })
            };
            match k {
                "channels" => self.channels = usize::try_from(num(v)?).unwrap_or(usize::MAX),
                "read-latency" => self.read_latency = dur(v)?,
                "write-latency" => self.write_latency = dur(v)?,
                "bandwidth" => self.bandwidth = num(v)?,
                "gc-every" => self.gc_every = num(v)?,
                "gc-time" => self.gc_time = dur(v)?,
                "gc-read-slowdown" => self.gc_read_slowdown = u32::try_from(num(v)?).unwrap_or(u32::MAX),
                "volatile" => self.volatile_bytes = num(v)?,
                "jitter" => self.jitter_pct = u32::try_from(num(v)?).unwrap_or(u32::MAX),
                "seed" => self.seed = num(v)?,
                _ => return Err(bad(format!("unknown sim setting {k:?}"))),
            }
        }
        self.check()?;
        Ok(self)
    }

    /// Whether the settings are in range: 1 to 1024 channels, a positive bandwidth, a GC read
    /// slowdown of 1 to 1000, jitter under 100%, and latencies and GC time of at most an hour.
    pub fn check(&self) -> crate::error::Result<()> {
        let hour = Duration::from_secs(3600);
        let ok = (1..=1024).contains(&self.channels)
            && self.bandwidth > 0
            && (1..=1000).contains(&self.gc_read_slowdown)
            && self.jitter_pct < 100
            && self.read_latency <= hour
            && self.write_latency <= hour
            && self.gc_time <= hour;
        if ok {
            return Ok(());
        }
        Err(crate::error::Error::new(
            crate::error::ErrorKind::InvalidInput,
            format!(
                "simulated device settings out of range (1-1024 channels, bandwidth > 0, gc-read-slowdown \
                 1-1000, jitter < 100, latencies and gc-time at most 1 hour): {self:?}"
            ),
        ))
    }
}

/// Which requests a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Flushes (a backing file's `sync_data`).
    Flush,
    /// All of them.
    Any,
}

/// An injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// EIO for requests of `op` that overlap `[start, end)` of any backing file.
    EioAt {
        /// Requests hit.
        op: FaultOp,
        /// First byte.
        start: u64,
        /// End of the range (exclusive).
        end: u64,
    },
    /// EIO for every request of `op` from the `n`th (counting from 1, from injection) on.
    EioAfter {
        /// Requests hit.
        op: FaultOp,
        /// The first request that fails.
        n: u64,
    },
    /// ENOSPC for writes that reach past byte `capacity` of a backing file.
    NoSpace {
        /// Bytes a backing file may hold.
        capacity: u64,
    },
}

/// Counters of a simulated device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Read requests served.
    pub reads: u64,
    /// Write requests served.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Flushes served.
    pub flushes: u64,
    /// Garbage-collection episodes started.
    pub gc_episodes: u64,
    /// Requests that waited for or were slowed by garbage collection.
    pub gc_delayed: u64,
    /// Requests failed by an injected fault.
    pub faults: u64,
}

/// A write or truncate a power cut may still undo: the bytes it overwrote or cut, and for a
/// truncate the size before it.
struct Volatile {
    file: Arc<File>,
    offset: u64,
    before: Vec<u8>,
    size_before: Option<u64>,
}

struct State {
    /// When each channel is next free.
    free_at: Vec<Instant>,
    written_since_gc: u64,
    gc_until: Option<Instant>,
    rng: u64,
    faults: Vec<(Fault, u64)>,
    /// The latest completion booked (a flush waits for it).
    last_done: Instant,
    volatile: VecDeque<Volatile>,
    volatile_len: u64,
    stats: SimStats,
}

/// A simulated SSD; see the module docs. Shared by the caches that use it (and the test or
/// benchmark that drives its faults and power).
pub struct SimDevice {
    config: SimConfig,
    state: Mutex<State>,
    /// Nanoseconds after `epoch` until which garbage collection runs (0: none yet), for the
    /// lock-free [`SimDevice::collecting`].
    gc_until_ns: AtomicU64,
    epoch: Instant,
    powered: AtomicBool,
    /// Power cuts so far: a write in flight across one is lost, and fails.
    cuts: AtomicU64,
    /// This process's number for it (`SimDevice::id`).
    id: u64,
}

/// A simulated write on its way: when it completes, and the power-cut count it started in.
pub(crate) struct PendingWrite {
    pub(crate) done: Instant,
    cuts: u64,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The next device's `id`.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// What a powered-off device answers.
fn powered_off() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl SimDevice {
    /// A powered-on device; an error if `config` is out of range (see [`SimConfig::check`]).
    pub fn new(config: SimConfig) -> crate::error::Result<Arc<SimDevice>> {
        config.check()?;
        let now = Instant::now();
        Ok(Arc::new(SimDevice {
            state: Mutex::new(State {
                free_at: vec![now; config.channels.max(1)],
                written_since_gc: 0,
                gc_until: None,
                rng: config.seed | 1,
                faults: Vec::new(),
                last_done: now,
                volatile: VecDeque::new(),
                volatile_len: 0,
                stats: SimStats::default(),
            }),
            config,
            gc_until_ns: AtomicU64::new(0),
            epoch: now,
            powered: AtomicBool::new(true),
            cuts: AtomicU64::new(0),
            // Relaxed: only unique, ordering nothing.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }))
    }

    /// A number no other device of this process has had, to tell devices apart where they
    /// share a file system (the shared engine's GC table, `shared/gc.rs`).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Its parameters.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Whether a garbage-collection episode is running now.
    pub fn collecting(&self) -> bool {
        // Relaxed: a hint for the replacement policy; a stale answer costs one choice.
        let until = self.gc_until_ns.load(Ordering::Relaxed);
        until != 0 && (self.epoch.elapsed().as_nanos() as u64) < until
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        lock(&self.state).faults.push((fault, 0));
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.state).faults.clear();
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        lock(&self.state).stats
    }

    /// Cuts the power: every write not yet flushed (within the volatile capacity) is undone,
    /// newest first, and the device fails every request until [`SimDevice::power_on`].
    /// Returns the number of writes lost.
    pub fn power_cut(&self) -> io::Result<usize> {
        let mut st = lock(&self.state);
        // SeqCst: requests that see the device powered must have finished touching the
        // volatile list before we undo it; both happen under the state lock as well.
        self.powered.store(false, Ordering::SeqCst);
        // SeqCst: a write that finishes after this sees the count changed.
        self.cuts.fetch_add(1, Ordering::SeqCst);
        let lost = st.volatile.len();
        while let Some(v) = st.volatile.pop_back() {
            if let Some(size) = v.size_before {
                v.file.set_len(size)?;
            }
            v.file.write_all_at(&v.before, v.offset)?;
        }
        st.volatile_len = 0;
        Ok(lost)
    }

    /// Restores power after [`SimDevice::power_cut`].
    pub fn power_on(&self) {
        // SeqCst: see `power_cut`.
        self.powered.store(true, Ordering::SeqCst);
    }

    /// Checks power and faults for a request of `op` over `[offset, offset + len)`.
    fn check(&self, st: &mut State, op: FaultOp, offset: u64, len: u64) -> io::Result<()> {
        // SeqCst: see `power_cut`.
        if !self.powered.load(Ordering::SeqCst) {
            return Err(powered_off());
        }
        let matches = |f: FaultOp| f == FaultOp::Any || f == op;
        let mut fail = None;
        for (fault, seen) in &mut st.faults {
            match *fault {
                // A flush has no range: a flush fault hits every flush.
                Fault::EioAt { op: f, start, end }
                    if matches(f)
                        && (op == FaultOp::Flush || (offset < end && start < offset + len.max(1))) =>
                {
                    fail = Some(libc::EIO);
                }
                Fault::EioAfter { op: f, n } if matches(f) => {
                    *seen += 1;
                    if *seen >= n {
                        fail = Some(libc::EIO);
                    }
                }
                Fault::NoSpace { capacity } if op == FaultOp::Write && offset + len > capacity => {
                    fail = fail.or(Some(libc::ENOSPC));
                }
                _ => {}
            }
        }
        match fail {
            Some(errno) => {
                st.stats.faults += 1;
                Err(io::Error::from_raw_os_error(errno))
            }
            None => Ok(()),
        }
    }

    /// Books a request of `bytes` on the channel free first; returns when it completes.
    fn schedule(&self, st: &mut State, write: bool, bytes: u64) -> Instant {
        let now = Instant::now();
        let c = (0..st.free_at.len()).min_by_key(|&i| st.free_at[i]).unwrap_or(0);
        let start = st.free_at[c].max(now);
        let per_channel = (self.config.bandwidth / st.free_at.len() as u64).max(1);
        let base = if write { self.config.write_latency } else { self.config.read_latency };
        let mut service = base + Duration::from_nanos(bytes.saturating_mul(1_000_000_000) / per_channel);
        if self.config.jitter_pct > 0 {
            st.rng ^= st.rng << 13;
            st.rng ^= st.rng >> 7;
            st.rng ^= st.rng << 17;
            let span = 2 * u64::from(self.config.jitter_pct) + 1;
            let pct = 100 + (st.rng % span) as i64 - i64::from(self.config.jitter_pct);
            service = service * pct as u32 / 100;
        }
        // While the drive collects, a write waits in its queue for the episode's end without
        // holding a channel (reads keep being served, slower); the channel's time is its own.
        let mut done = start + service;
        st.free_at[c] = done;
        if let Some(until) = st.gc_until.filter(|&u| u > start) {
            st.stats.gc_delayed += 1;
            if write {
                done = done.max(until + service);
            } else {
                done = start + service * self.config.gc_read_slowdown;
                st.free_at[c] = done;
            }
        }
        st.last_done = st.last_done.max(done);
        if write && self.config.gc_every > 0 {
            st.written_since_gc += bytes;
            if st.written_since_gc >= self.config.gc_every {
                st.written_since_gc = 0;
                let until = done + self.config.gc_time;
                st.gc_until = Some(until);
                st.stats.gc_episodes += 1;
                // Relaxed: see `collecting`.
                self.gc_until_ns.store(until.duration_since(self.epoch).as_nanos() as u64, Ordering::Relaxed);
            }
        }
        done
    }

    /// Sleeps until `done`.
    pub(crate) fn wait(done: Instant) {
        set_timer_slack();
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }

    /// Reads into `bufs` from `file` at `offset`; returns the bytes read (short at its end).
    pub(crate) fn read(&self, file: &File, offset: u64, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let (n, done) = self.submit_read(file, offset, bufs)?;
        Self::wait(done);
        Ok(n)
    }

    /// Writes `bufs` to `file` at `offset`.
    pub(crate) fn write(&self, file: &Arc<File>, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let w = self.submit_write(file, offset, bufs)?;
        Self::wait(w.done);
        self.finish_write(w)
    }

    /// After a submitted write's completion time: EIO if a power cut came while it was in
    /// flight (the cut undid it, so it must not count as written).
    pub(crate) fn finish_write(&self, w: PendingWrite) -> io::Result<()> {
        // SeqCst: see `power_cut`.
        if self.cuts.load(Ordering::SeqCst) != w.cuts {
            return Err(powered_off());
        }
        Ok(())
    }

    /// `read` without the wait: the data is in `bufs` at once, and the request completes at
    /// the returned time (for a batch over several devices to wait for its last request).
    pub(crate) fn submit_read(
        &self,
        file: &File,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> io::Result<(usize, Instant)> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let done = {
            let mut st = lock(&self.state);
            self.check(&mut st, FaultOp::Read, offset, len)?;
            st.stats.reads += 1;
            st.stats.read_bytes += len;
            self.schedule(&mut st, false, len)
        };
        let mut n = 0;
        for b in bufs.iter_mut() {
            let got = read_full_at(file, b, offset + n as u64)?;
            n += got;
            if got < b.len() {
                break;
            }
        }
        Ok((n, done))
    }

    /// `write` without the wait (see `submit_read`).
    pub(crate) fn submit_write(
        &self,
        file: &Arc<File>,
        offset: u64,
        bufs: &[IoSlice<'_>],
    ) -> io::Result<PendingWrite> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let done = {
            let mut st = lock(&self.state);
            self.check(&mut st, FaultOp::Write, offset, len)?;
            st.stats.writes += 1;
            st.stats.write_bytes += len;
            if self.config.volatile_bytes > 0 {
                // Keep what this write overwrites, for a power cut to restore; bytes past the
                // end of the file were never written and read back as zeros.
                let mut before = vec![0u8; len as usize];
                read_full_at(file, &mut before, offset)?;
                st.volatile_len += len;
                st.volatile.push_back(Volatile { file: file.clone(), offset, before, size_before: None });
                // Past the cache's capacity the oldest writes have reached flash.
                while st.volatile_len > self.config.volatile_bytes {
                    let Some(v) = st.volatile.pop_front() else { break };
                    st.volatile_len -= v.before.len() as u64;
                }
            }
            let mut off = offset;
            for b in bufs {
                file.write_all_at(b, off)?;
                off += b.len() as u64;
            }
            let done = self.schedule(&mut st, true, len);
            // SeqCst: see `power_cut` (read under the lock that cuts take too).
            PendingWrite { done, cuts: self.cuts.load(Ordering::SeqCst) }
        };
        Ok(done)
    }

    /// Sets a backing file's size, as a volatile change (see the module docs); fails as a
    /// write would on a powered-off or faulty device.
    pub(crate) fn truncate(&self, file: &Arc<File>, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        self.check(&mut st, FaultOp::Write, len, 0)?;
        let size = file.metadata()?.len();
        if size.saturating_sub(len) > self.config.volatile_bytes {
            // More than the volatile cache holds: everything before it has reached flash.
            st.volatile.clear();
            st.volatile_len = 0;
        } else if self.config.volatile_bytes > 0 && len != size {
            let mut before = vec![0u8; size.saturating_sub(len) as usize];
            read_full_at(file, &mut before, len)?;
            st.volatile_len += before.len() as u64;
            st.volatile.push_back(Volatile {
                file: file.clone(),
                offset: len,
                before,
                size_before: Some(size),
            });
            while st.volatile_len > self.config.volatile_bytes {
                let Some(v) = st.volatile.pop_front() else { break };
                st.volatile_len -= v.before.len() as u64;
            }
        }
        file.set_len(len)
    }

    /// Sets space aside for a backing file's bytes up to `to`: no byte changes, so nothing for
    /// a cut to undo; fails with ENOSPC past a `NoSpace` capacity, as a write there would.
    pub(crate) fn reserve(&self, to: u64) -> io::Result<()> {
        let st = lock(&self.state);
        // SeqCst: see `power_cut`.
        if !self.powered.load(Ordering::SeqCst) {
            return Err(powered_off());
        }
        // Only the capacity: I/O faults are for requests, which a reservation is not.
        let full = st.faults.iter().any(|(f, _)| matches!(*f, Fault::NoSpace { capacity } if to > capacity));
        if full {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    /// Makes every completed write durable (a FLUSH command).
    pub(crate) fn flush(&self) -> io::Result<()> {
        let done = {
            let mut st = lock(&self.state);
            self.check(&mut st, FaultOp::Flush, 0, 0)?;
            st.stats.flushes += 1;
            st.volatile.clear();
            st.volatile_len = 0;
            // A flush waits for the writes before it, those waiting for GC included.
            st.last_done
        };
        Self::wait(done);
        Ok(())
    }
}

/// Reads as much of `buf` as `file` has at `offset`.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Lowers this thread's timer slack to 1 µs, once, so that simulated latencies of tens of
/// microseconds are not rounded up by the default 50 µs.
fn set_timer_slack() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    DONE.with(|d| {
        if !d.get() {
            // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this thread's slack.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
            d.set(true);
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn quiet(c: SimConfig) -> SimConfig {
        SimConfig { jitter_pct: 0, ..c }
    }

    fn file() -> (tempfile::TempDir, Arc<File>) {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(d.path().join("f"))
            .unwrap();
        (d, Arc::new(f))
    }

    #[test]
    fn requests_queue_behind_busy_channels() {
        let c = quiet(SimConfig { channels: 2, gc_every: 0, ..SimConfig::default() });
        let service = c.read_latency + Duration::from_nanos(4096 * 1_000_000_000 / (c.bandwidth / 2));
        let d = SimDevice::new(c).unwrap();
        let mut st = lock(&d.state);
        let t0 = Instant::now();
        let a = d.schedule(&mut st, false, 4096);
        let b = d.schedule(&mut st, false, 4096);
        let third = d.schedule(&mut st, false, 4096);
        // Two channels serve the first two side by side; the third waits for one of them.
        assert!(a - t0 <= service + Duration::from_millis(5) && b - t0 <= service + Duration::from_millis(5));
        assert!(third >= a.min(b) + service);
    }

    #[test]
    fn written_volume_starts_garbage_collection_that_stalls_writes_and_slows_reads() {
        let c =
            quiet(SimConfig { gc_every: 1 << 20, gc_time: Duration::from_secs(60), ..SimConfig::default() });
        let d = SimDevice::new(c.clone()).unwrap();
        let mut st = lock(&d.state);
        assert!(!d.collecting());
        let mut last = Instant::now();
        for _ in 0..256 {
            last = d.schedule(&mut st, true, 4096);
        }
        assert_eq!(st.stats.gc_episodes, 1);
        assert!(d.collecting());
        let w = d.schedule(&mut st, true, 4096);
        assert!(w >= last + c.gc_time, "a write waits for the episode to end");
        let before = Instant::now();
        let r = d.schedule(&mut st, false, 4096);
        assert!(r < last + c.gc_time, "a read does not wait for it");
        assert!(r - before >= c.read_latency * c.gc_read_slowdown, "but takes longer");
        assert_eq!(st.stats.gc_delayed, 2);
    }

    #[test]
    fn faults_fail_the_requests_they_name_and_clear() {
        let (_d, f) = file();
        let dev = SimDevice::new(quiet(SimConfig {
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            ..SimConfig::default()
        }))
        .unwrap();
        let page = [7u8; 4096];
        dev.write(&f, 0, &[IoSlice::new(&page)]).unwrap();
        dev.inject(Fault::EioAt { op: FaultOp::Read, start: 8192, end: 12288 });
        let mut buf = [0u8; 4096];
        assert_eq!(dev.read(&f, 0, &mut [IoSliceMut::new(&mut buf)]).unwrap(), 4096);
        assert_eq!(buf, page);
        let e = dev.read(&f, 8192, &mut [IoSliceMut::new(&mut buf)]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        dev.inject(Fault::EioAfter { op: FaultOp::Flush, n: 2 });
        dev.flush().unwrap();
        assert_eq!(dev.flush().unwrap_err().raw_os_error(), Some(libc::EIO));
        dev.inject(Fault::NoSpace { capacity: 1 << 20 });
        let e = dev.write(&f, (1 << 20) - 4096 + 1, &[IoSlice::new(&page)]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(dev.stats().faults, 3);
        dev.clear_faults();
        dev.flush().unwrap();
        assert_eq!(dev.read(&f, 8192, &mut [IoSliceMut::new(&mut buf)]).unwrap(), 0, "past the end");
    }

    /// A truncate is volatile until a flush: a cut gives back the size and bytes it cut, and
    /// undoes it after the writes before it, newest first; a flushed one stays; a reservation
    /// past a `NoSpace` capacity fails as a write there.
    #[test]
    fn a_power_cut_undoes_an_unflushed_truncate_and_reservations_meet_capacity() {
        let (_d, f) = file();
        let c = SimConfig {
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            volatile_bytes: 1 << 20,
            ..SimConfig::default()
        };
        let dev = SimDevice::new(quiet(c)).unwrap();
        dev.write(&f, 0, &[IoSlice::new(&[5u8; 8192])]).unwrap();
        dev.flush().unwrap();
        dev.write(&f, 8192, &[IoSlice::new(&[6u8; 4096])]).unwrap(); // lost
        dev.truncate(&f, 1000).unwrap(); // lost
        assert_eq!(f.metadata().unwrap().len(), 1000);
        dev.power_cut().unwrap();
        dev.power_on();
        let mut back = vec![0u8; 12288];
        assert_eq!(read_full_at(&f, &mut back, 0).unwrap(), 12288, "the size came back");
        assert!(back[..8192].iter().all(|&b| b == 5), "the flushed bytes came back");
        assert!(back[8192..].iter().all(|&b| b == 0), "the unflushed write is undone too");
        dev.truncate(&f, 4096).unwrap();
        dev.flush().unwrap();
        dev.power_cut().unwrap();
        dev.power_on();
        assert_eq!(f.metadata().unwrap().len(), 4096, "a flushed truncate stays");
        dev.inject(Fault::NoSpace { capacity: 1 << 20 });
        dev.inject(Fault::EioAfter { op: FaultOp::Any, n: 1 });
        dev.reserve(1 << 20).unwrap(); // I/O faults are for requests
        assert_eq!(dev.reserve((1 << 20) + 1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn a_power_cut_loses_exactly_the_unflushed_writes() {
        let (_d, f) = file();
        let c = SimConfig {
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            volatile_bytes: 8192,
            ..SimConfig::default()
        };
        let dev = SimDevice::new(quiet(c)).unwrap();
        let (a, b, c) = ([1u8; 4096], [2u8; 4096], [3u8; 4096]);
        dev.write(&f, 0, &[IoSlice::new(&a)]).unwrap();
        dev.flush().unwrap();
        dev.write(&f, 0, &[IoSlice::new(&b)]).unwrap(); // lost: overwrites a, not flushed
        dev.write(&f, 4096, &[IoSlice::new(&c)]).unwrap(); // lost: the file grew
        assert_eq!(dev.power_cut().unwrap(), 2);
        let mut buf = [0u8; 4096];
        assert_eq!(
            dev.read(&f, 0, &mut [IoSliceMut::new(&mut buf)]).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        dev.power_on();
        dev.read(&f, 0, &mut [IoSliceMut::new(&mut buf)]).unwrap();
        assert_eq!(buf, a);
        // The page past the old end reads back as never written.
        dev.read(&f, 4096, &mut [IoSliceMut::new(&mut buf)]).unwrap();
        assert_eq!(buf, [0; 4096]);
        // Past the volatile capacity, the oldest writes have reached flash.
        for i in 0..4u8 {
            dev.write(&f, u64::from(i) * 4096, &[IoSlice::new(&[10 + i; 4096])]).unwrap();
        }
        assert_eq!(dev.power_cut().unwrap(), 2);
        dev.power_on();
        for (i, want) in [(0u64, 10u8), (1, 11)] {
            dev.read(&f, i * 4096, &mut [IoSliceMut::new(&mut buf)]).unwrap();
            assert_eq!(buf, [want; 4096]);
        }
    }

    #[test]
    fn settings_parse_and_bad_ones_are_refused() {
        let c = SimConfig::default()
            .parse_settings("channels=4, read-latency=100us,gc-every=32m,gc-time=5ms,volatile=0")
            .unwrap();
        assert_eq!(
            (c.channels, c.read_latency, c.gc_every, c.gc_time, c.volatile_bytes),
            (4, Duration::from_micros(100), 32 << 20, Duration::from_millis(5), 0)
        );
        for bad in ["channels=0", "speed=3", "read-latency=5h", "gc-every", "jitter=100"] {
            assert!(SimConfig::default().parse_settings(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_write_in_flight_across_a_power_cut_fails_and_flushes_wait_for_gc_delayed_writes() {
        let (_d, f) = file();
        let c = SimConfig { gc_every: 4096, gc_time: Duration::from_secs(30), ..SimConfig::default() };
        let dev = SimDevice::new(quiet(c)).unwrap();
        let page = [9u8; 4096];
        // This write starts an episode; the next one waits for its end.
        dev.write(&f, 0, &[IoSlice::new(&page)]).unwrap();
        let w = dev.submit_write(&f, 4096, &[IoSlice::new(&page)]).unwrap();
        {
            let st = lock(&dev.state);
            assert!(st.last_done >= w.done, "a flush waits for the delayed write");
            assert!(w.done >= Instant::now() + Duration::from_secs(20));
        }
        dev.power_cut().unwrap();
        assert_eq!(dev.finish_write(w).unwrap_err().raw_os_error(), Some(libc::EIO));
        dev.power_on();
        let w = dev.submit_write(&f, 8192, &[IoSlice::new(&page)]).unwrap();
        dev.finish_write(w).unwrap();
    }
}
