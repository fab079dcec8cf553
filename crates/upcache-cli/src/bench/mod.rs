//! `upcache bench`: flags, and running each engine in turn on the same data set.
//!
//! Per engine and repetition: set up its files, prefill them with deterministic content,
//! settle (write back; drop caches unless --warm), warm (read everything once, checking the
//! content), measure, flush (untimed), tear down. Only the measured phase is timed.

mod config;
mod engine;
mod memory;
mod progress;
pub(crate) mod report;
pub(crate) mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
// Timing by the CPU's time-stamp counter, as fio does: a reading costs a third of a
// clock_gettime, which took about 8% of a cached 4 KiB write when every op was timed.
use quanta::Instant;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use self::engine::{
    AlignedBuf, AsyncIo, DirectEngine, DontcacheEngine, Engine, EngineKind, KernelEngine, Setup,
    SharedEngine, UpcacheEngine, UpcacheOpts, ALIGN,
};
use self::progress::Progress;
use self::report::{Latency, Report};
use self::workload::{fill_content, OpGen, Rw, Shape, TraceSource};
use crate::output::OutputArgs;
use crate::size::{fmt_size, parse_duration, parse_size};
use crate::trace::replay::{self, ReplayOps};
use crate::trace::Access;
use std::sync::Arc;

/// Flags of `upcache bench`. Flags left unset take the defaults shown, whatever else is
/// given: a flag changes only what it says (see the command's long help for the comparison
/// of hit paths that earlier versions ran with no flag).
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Engine to run [default: upcache]
    #[arg(long, value_enum, conflicts_with = "compare")]
    engine: Option<EngineKind>,
    /// Engines to run in turn on the same data set, e.g. upcache,kernel,direct; the table
    /// gives iops ratios against the first
    #[arg(long, value_enum, value_delimiter = ',', value_name = "ENGINE,...")]
    compare: Option<Vec<EngineKind>>,
    /// Access pattern [default: randread]
    #[arg(long, value_enum)]
    rw: Option<Rw>,
    /// Percentage of reads for randrw [default: 50]
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(0..=100))]
    rwmixread: Option<u32>,
    /// Block size of each op, e.g. 4k, 64KiB [default: 4k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    bs: Option<u64>,
    /// Size of each file [default: 256m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: Option<u64>,
    /// Number of files [default: 1]
    #[arg(long, visible_alias = "nrfiles", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    files: Option<u64>,
    /// All threads on one file (the same as `--files 1`, the default; said explicitly for
    /// comparisons where that matters, such as writers of one file)
    #[arg(long, conflicts_with = "files")]
    shared_file: bool,
    /// Number of threads issuing ops [default: 1]
    #[arg(long, visible_alias = "numjobs", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: Option<u64>,
    /// Length of the measured phase, e.g. 10s, 500ms, 1m [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "ops")]
    runtime: Option<Duration>,
    /// Total ops of the measured phase, split between the threads (instead of --runtime)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    ops: Option<u64>,
    /// upcache memory budget [default: 512m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache: Option<u64>,
    /// Number of upcache device directories, <dir>/upcache/dev0.. [default: 1]; sim:N for N
    /// simulated SSDs (io::device::sim; their data in /dev/shm where it exists), set with --sim
    #[arg(long, value_name = "N|sim:N", value_parser = parse_devices, conflicts_with = "device_dirs")]
    devices: Option<(u64, bool)>,
    /// Settings of simulated devices (with --devices sim:N), key=value,...: channels,
    /// read-latency, write-latency, bandwidth, gc-every, gc-time, gc-read-slowdown, volatile,
    /// jitter, seed [default: 8 channels, 80us reads, 20us writes, 800 MB/s, 10ms of GC every
    /// 64MiB written, reads 4x slower during GC, 8MiB volatile cache, 10% jitter]
    #[arg(long, value_name = "SETTINGS", value_parser = parse_sim)]
    sim: Option<upcache::SimConfig>,
    /// upcache device directories (one per SSD), comma-separated
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    device_dirs: Option<Vec<PathBuf>>,
    /// upcache metadata log directory (file creations, removals, lengths), e.g. on a faster
    /// device [default: the first device directory]
    #[arg(long, value_name = "PATH")]
    meta_dir: Option<PathBuf>,
    /// Where the engines' data goes (in <dir>/<engine>) [default: a fresh temporary directory]
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// Read the whole data set once before measuring, so reads hit the cache (no effect on direct)
    #[arg(long)]
    warm: bool,
    /// Zipf-distributed offsets with this exponent (e.g. 0.99, 1.2) instead of uniform
    #[arg(long, value_name = "THETA", allow_negative_numbers = true)]
    zipf: Option<f64>,
    /// fio's name for the offset distribution: random (uniform, the default) or zipf:THETA
    #[arg(long = "random_distribution", value_name = "random|zipf:THETA", value_parser = parse_distribution, conflicts_with = "zipf")]
    random_distribution: Option<Distribution>,
    /// Each thread works on a file of its own (thread i on file i mod --files), as fio's jobs
    /// do, instead of every op picking a file at random (random workloads)
    #[arg(long)]
    file_per_thread: bool,
    #[command(flatten)]
    out: OutputArgs,
    /// upcache page size [default: 4k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    page_size: Option<u64>,
    /// upcache stripe unit [default: 128k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    stripe_unit: Option<u64>,
    /// upcache flusher threads [default: 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    flushers: Option<u64>,
    /// upcache replacement policy: clock, gclock, lru, lfu, s3fifo or sieve, with an optional
    /// rule for dirty pages: +clean-first (the default), +gc-aware (clean first while the
    /// page's device collects garbage) or +plain. Not with --index setassoc, whose sets have
    /// their own (--set-policy) [default: clock+clean-first]
    #[arg(long, value_name = "KIND[+RULE]", value_parser = parse_policy)]
    policy: Option<(upcache::PolicyKind, upcache::CleanFirst)>,
    /// What an upcache writer does past the foreground dirty ratio: dflush (writes back dirty
    /// pages itself) or background (sleeps until the flushers have) [default: dflush]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::FlushKind>)]
    flush: Option<upcache::FlushKind>,
    /// upcache stream tracking: on (a sync writes only its file's dirty streams; flushers
    /// write whole streams in requests of the device's size) or off (a sync looks at every
    /// cached page of its file; flushers scan the frames, 64-page runs) [default: on]
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    streams: Option<bool>,
    /// upcache dirty ratios BACKGROUND,FOREGROUND: fractions of its frames past which flushers
    /// start, and past which writers write back all they dirty twice over (in proportion from
    /// halfway between the two) [default: 0.5,0.75]
    #[arg(long, value_name = "BG,FG", value_parser = parse_ratios)]
    dirty_ratios: Option<(f64, f64)>,
    /// upcache page index: radix (ccXArray), locked (the same tree, updates under one lock per
    /// file) or sharded (hash shards) [default: radix]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::IndexKind>)]
    index: Option<upcache::IndexKind>,
    /// upcache free-frame allocator: twolayer (per-core regions + per-file caches) or global
    /// (one lock-free queue) [default: twolayer]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::AllocKind>)]
    alloc: Option<upcache::AllocKind>,
    /// upcache device layout: stripe, rotate (rotated striping) or hash [default: stripe]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::LayoutKind>)]
    layout: Option<upcache::LayoutKind>,
    /// How upcache reads: copy (read_exact_at into the buffer), pin (zero-copy: pin each page
    /// and read one byte in place; writes still copy) or async (a queue per thread keeps
    /// --iodepth requests in flight). Other engines always copy, one op at a time
    #[arg(long, value_enum, default_value_t = engine::Api::Copy)]
    api: engine::Api,
    /// Requests each thread keeps in flight with --api async
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    iodepth: u64,
    /// With --api async, hand reads to the kernel once N are queued (fio's
    /// iodepth_batch_submit): 1 submits each at once; larger saves system calls
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    iodepth_batch: u64,
    /// Who submits upcache's I/O: none (the thread that needs it) or per-device (one I/O
    /// thread per device, batching what is queued for it) [default: none]
    #[arg(long, value_name = "MODEL", value_parser = parse_choice::<upcache::SubmitKind>)]
    io_threads: Option<upcache::SubmitKind>,
    /// upcache's largest readahead window (0 turns readahead off) [default: 16MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    readahead: Option<u64>,
    /// Time only one op in N (for every engine alike): latency percentiles come from that
    /// sample, and the clock's cost (about that of a cached pin) leaves the other ops
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    lat_every: u64,
    /// Make each thread's writes durable every N writes: `sync_data` of the file last written
    /// for upcache, fdatasync for the kernel engines (0: never). The sync counts in the
    /// write's latency.
    #[arg(long, value_name = "N", default_value_t = 0)]
    fsync: u64,
    /// upcache's I/O engine: uring (io_uring; psync, with a logged reason, where the kernel
    /// refuses it) or psync (preadv/pwritev) [default: uring]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::IoKind>)]
    io: Option<upcache::IoKind>,
    /// Frames per page set with --index setassoc [default: 12]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    set_ways: Option<u64>,
    /// Replacement inside a page set with --index setassoc: gclock, clock, lru, lfu [default: gclock]
    #[arg(long, value_name = "POLICY", value_parser = parse_choice::<upcache::SetPolicy>)]
    set_policy: Option<upcache::SetPolicy>,
    /// Let upcache use buffered backing files where the file system refuses O_DIRECT
    #[arg(long)]
    allow_buffered: bool,
    /// Make upcache's whole frame arena resident before the run (`Config::with_prefault`),
    /// so no miss pays the first touch of its frame's memory
    #[arg(long)]
    prefault: bool,
    /// Run the whole comparison N times; the table shows each engine's medians
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    /// Seed of the offsets and the data content
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Keep the engines' data (of the last repetition) instead of removing it
    #[arg(long)]
    keep: bool,
    /// Replay this block trace instead of a generated workload: its volumes become files,
    /// requests are aligned out to 4 KiB and its touched 1 MiB regions packed together; the
    /// threads take its requests in order. Runs the trace once (or its first --ops requests)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rw", "bs", "size", "files", "zipf", "runtime", "synth"])]
    trace: Option<PathBuf>,
    /// Format of --trace: cloudphysics, msr or upcache
    #[arg(long, value_name = "FORMAT", default_value = "cloudphysics")]
    trace_format: crate::trace::Format,
    /// Replay a generated trace instead: zipf:THETA, uniform, scan, ycsb-a, ycsb-b, ycsb-c,
    /// ycsb-f, of --ops requests (default 1,000,000) of 4 KiB over --footprint
    #[arg(long, value_name = "KIND", conflicts_with_all = ["rw", "bs", "size", "files", "zipf", "runtime"])]
    synth: Option<crate::trace::synth::Synth>,
    /// Footprint of a generated trace (--synth) [default: 1g]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "synth")]
    footprint: Option<u64>,
    /// Replay timing: fast (each thread issues the next request as soon as it is done) or
    /// trace (each request at its time in the trace, divided by --speed)
    #[arg(long, value_enum, default_value_t = Timing::Fast)]
    timing: Timing,
    /// Replay speed with --timing trace: 2 replays twice as fast as recorded
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    speed: f64,
    /// Record the measured phase of the first engine's first run as an upcache trace (replay
    /// it with --trace FILE --trace-format upcache)
    #[arg(long, value_name = "FILE")]
    record_trace: Option<PathBuf>,
    /// Serve upcache's counters and latency histograms for Prometheus at http://ADDR/metrics
    /// while the bench runs (e.g. 127.0.0.1:9898; port 0 picks one, printed on stderr)
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// fio's name: every DURATION print the last interval's iops and MiB/s on stderr, on a
    /// terminal or not (progress bars appear only on one)
    #[arg(long = "status-interval", value_name = "DURATION", value_parser = parse_duration)]
    status_interval: Option<Duration>,
    /// Print the whole resolved configuration (the JSON report's `config`: every setting,
    /// defaults included) and exit without running anything
    #[arg(long)]
    dry_run: bool,
}

/// The long help's note on defaults and the comparison of hit paths.
pub const DEFAULT_HELP: &str = "\
Every flag has one default, shown in brackets above, whatever other flags are given: adding a
flag changes only what it says. With none, upcache alone reads 4 KiB blocks of a 256 MiB file
at random, cold, for 10 s, on 1 device directory. The comparison of hit paths (what each cache
costs per read when the data is in memory), which earlier versions ran with no flag:
  upcache bench --compare upcache,kernel --warm --devices 4 --runtime 5s";

#[derive(Debug, Clone, Copy)]
enum Stop {
    Runtime(Duration),
    Ops(u64),
}

/// The resolved, validated plan.
#[derive(Debug)]
struct Plan {
    engines: Vec<EngineKind>,
    rw: Rw,
    read_pct: u32,
    bs: u64,
    size: u64,
    shape: Shape,
    threads: usize,
    stop: Stop,
    warm: bool,
    zipf: Option<f64>,
    /// Thread i picks blocks of file i mod files only (`--file-per-thread`).
    file_per_thread: bool,
    seed: u64,
    repeat: usize,
    keep: bool,
    json: bool,
    /// Time one op in this many (`--lat-every`).
    lat_every: u64,
    /// Sync every this many writes per thread (`--fsync`; 0 never).
    fsync: u64,
    /// The trace replayed instead of `rw` (`--trace`, `--synth`) and its speed (None: fast).
    trace: Option<Arc<ReplayOps>>,
    speed: Option<f64>,
    /// Where to record the first measured phase (`--record-trace`).
    record: Option<PathBuf>,
    /// The flags that chose the trace, for the report's config (`config::trace_flags`).
    trace_flags: serde_json::Map<String, serde_json::Value>,
    /// Print interval figures this often (`--status-interval`).
    status_interval: Option<Duration>,
    upcache: UpcacheOpts,
}

/// `--random_distribution`: uniform (`random`) or zipf with this exponent.
#[derive(Debug, Clone, Copy)]
struct Distribution(Option<f64>);

fn parse_distribution(s: &str) -> Result<Distribution, String> {
    match s.split_once(':') {
        None if s == "random" => Ok(Distribution(None)),
        Some(("zipf", t)) => {
            t.parse().map(|z| Distribution(Some(z))).map_err(|_| format!("zipf:{t}: not a number"))
        }
        _ => Err(format!("{s:?}: give random or zipf:THETA (fio's other distributions are not offered)")),
    }
}

fn resolve(mut a: BenchArgs) -> Result<Plan> {
    if let Some(Distribution(z)) = a.random_distribution {
        a.zipf = z;
    }
    let engines = match (&a.compare, a.engine) {
        (Some(c), _) => c.clone(),
        (None, Some(e)) => vec![e],
        (None, None) => vec![EngineKind::Upcache],
    };
    ensure!(!engines.is_empty(), "--compare needs at least one engine");
    for (i, e) in engines.iter().enumerate() {
        ensure!(!engines[..i].contains(e), "--compare lists {} twice", e.name());
    }
    let trace = load_trace(&a)?;
    let rw = a.rw.unwrap_or(Rw::Randread);
    let bs = trace.as_ref().map_or(a.bs.unwrap_or(4096), |t| t.max_len);
    let size = trace.as_ref().map_or(a.size.unwrap_or(256 << 20), |t| t.file_size.max(t.max_len));
    let threads = a.threads.unwrap_or(1) as usize;
    let files = if let Some(t) = &trace {
        t.files
    } else if a.shared_file {
        1
    } else if rw == Rw::Append {
        // A file per thread, each appended to by its thread alone.
        ensure!(
            a.files.is_none_or(|f| f as usize == threads),
            "--rw append gives each thread a file of its own: leave out --files"
        );
        threads
    } else {
        a.files.unwrap_or(1) as usize
    };
    ensure!(
        trace.is_some() || (a.timing == Timing::Fast && a.speed == 1.0),
        "--timing and --speed apply to replays: give --trace or --synth"
    );
    let stop = match (a.runtime, a.ops) {
        // With --synth, --ops made the trace (YCSB-F makes 1.5 requests per op): run all of it.
        (_, Some(_)) if a.synth.is_some() => Stop::Ops(trace.as_ref().map_or(0, |t| t.ops.len() as u64)),
        (_, Some(n)) if trace.is_some() => Stop::Ops(n.min(trace.as_ref().map_or(0, |t| t.ops.len() as u64))),
        (_, None) if trace.is_some() => Stop::Ops(trace.as_ref().map_or(0, |t| t.ops.len() as u64)),
        (_, Some(n)) => Stop::Ops(n),
        (Some(d), None) => Stop::Runtime(d),
        (None, None) => Stop::Runtime(Duration::from_secs(10)),
    };
    if let Stop::Runtime(d) = stop {
        ensure!(!d.is_zero(), "--runtime must be more than 0");
    }
    ensure!(bs > 0, "--bs must be more than 0");
    ensure!(bs <= 256 << 20, "--bs {} is too large (at most 256MiB)", fmt_size(bs));
    ensure!(size >= bs, "--size {} is smaller than one block (--bs {})", fmt_size(size), fmt_size(bs));
    ensure!(size.checked_mul(files as u64).is_some_and(|t| t <= 1 << 50), "--files x --size is too large");
    if engines.contains(&EngineKind::Direct) {
        ensure!(
            bs.is_multiple_of(ALIGN as u64),
            "the direct engine needs --bs to be a multiple of 4096 (O_DIRECT), got {bs}"
        );
        ensure!(
            size.is_multiple_of(ALIGN as u64),
            "the direct engine needs --size to be a multiple of 4096 (O_DIRECT), got {size}"
        );
    }
    if a.file_per_thread {
        ensure!(
            rw.is_random() && a.zipf.is_none() && a.trace.is_none() && a.synth.is_none(),
            "--file-per-thread applies to uniform random workloads (randread, randwrite, randrw without --zipf)"
        );
    }
    if let Some(z) = a.zipf {
        ensure!(z.is_finite() && z >= 0.0, "--zipf must be a number >= 0, got {z}");
        ensure!(rw.is_random(), "--zipf applies only to random workloads (randread, randwrite, randrw)");
    }
    if a.rwmixread.is_some() && rw != Rw::Randrw {
        eprintln!("note: --rwmixread applies only to --rw randrw; ignored");
    }
    let warm = a.warm;
    ensure!(!(warm && rw == Rw::Append), "--warm reads the prefilled data, which --rw append does not write");
    if warm && engines.contains(&EngineKind::Direct) {
        eprintln!("note: --warm has no effect on the direct engine (it has no cache)");
    }

    // upcache's settings, checked now so that a bad one fails before any engine runs.
    let page_size = a.page_size.unwrap_or(4096);
    let stripe_unit = a.stripe_unit.unwrap_or(128 << 10);
    let cache = a.cache.unwrap_or(512 << 20);
    ensure!(
        page_size.is_power_of_two()
            && (upcache::MIN_PAGE_SIZE as u64..=upcache::MAX_PAGE_SIZE as u64).contains(&page_size),
        "--page-size must be a power of two from 4KiB to 64KiB, got {}",
        fmt_size(page_size)
    );
    ensure!(
        stripe_unit > 0 && stripe_unit.is_multiple_of(page_size),
        "--stripe-unit {} must be a multiple of the page size {}",
        fmt_size(stripe_unit),
        fmt_size(page_size)
    );
    ensure!(
        cache / page_size >= upcache::MIN_FRAMES as u64,
        "--cache {} is too small: upcache needs at least {} pages of {}",
        fmt_size(cache),
        upcache::MIN_FRAMES,
        fmt_size(page_size)
    );
    if a.sim.is_some() && !matches!(a.devices, Some((_, true))) {
        bail!("--sim sets simulated devices: give --devices sim:N too");
    }
    let devices = match (&a.device_dirs, a.devices) {
        (Some(d), _) => {
            ensure!(
                (1..=upcache::MAX_DEVICES).contains(&d.len()),
                "--device-dirs needs 1 to {} directories",
                upcache::MAX_DEVICES
            );
            d.len()
        }
        (None, Some((n, _))) => n as usize,
        (None, None) => 1,
    };
    let data = size * files as u64;
    if warm && data > cache && engines.contains(&EngineKind::Upcache) {
        eprintln!(
            "note: the data set ({}) is larger than --cache ({}): --warm leaves only part of it in upcache",
            fmt_size(data),
            fmt_size(cache)
        );
    }
    if data > cache && engines.contains(&EngineKind::Kernel) && engines.contains(&EngineKind::Upcache) {
        eprintln!("note: --cache bounds upcache only; the kernel page cache may use all free RAM");
    }
    let shape = Shape { files, blocks_per_file: size / bs, bs };
    let plan = Plan {
        engines,
        rw,
        read_pct: a.rwmixread.unwrap_or(50),
        bs,
        size,
        shape,
        threads,
        stop,
        warm,
        zipf: a.zipf,
        file_per_thread: a.file_per_thread,
        seed: a.seed,
        repeat: a.repeat as usize,
        keep: a.keep,
        lat_every: a.lat_every,
        fsync: a.fsync,
        trace,
        speed: (a.timing == Timing::Trace).then_some(a.speed),
        record: a.record_trace.clone(),
        status_interval: a.status_interval,
        trace_flags: config::trace_flags(&a),
        json: a.out.json(),
        upcache: UpcacheOpts {
            sim: match a.devices {
                Some((_, true)) => Some(a.sim.clone().unwrap_or_default()),
                _ => None,
            },
            device_dirs: a.device_dirs,
            meta_dir: a.meta_dir,
            devices,
            cache,
            page_size: page_size as usize,
            stripe_unit,
            flushers: a.flushers.unwrap_or(2) as usize,
            flush: a.flush.unwrap_or_default(),
            policy: a.policy.unwrap_or_default().0,
            clean_first: a.policy.unwrap_or_default().1,
            streams: a.streams.unwrap_or(true),
            dirty_ratios: a.dirty_ratios.unwrap_or(upcache::DEFAULT_DIRTY_RATIOS),
            allow_buffered: a.allow_buffered,
            prefault: a.prefault,
            index: a.index.unwrap_or_default(),
            alloc: a.alloc.unwrap_or_default(),
            layout: a.layout.unwrap_or_default(),
            api: a.api,
            iodepth: a.iodepth as usize,
            iodepth_batch: a.iodepth_batch as usize,
            io: a.io.unwrap_or_default(),
            readahead: a.readahead.unwrap_or(upcache::DEFAULT_READAHEAD),
            io_threads: a.io_threads.unwrap_or_default(),
            sets: (
                a.set_ways.map_or(upcache::internals::index::setassoc::DEFAULT_WAYS, |w| w as usize),
                a.set_policy.unwrap_or_default(),
            ),
        },
    };
    if a.iodepth > 1 && a.api != engine::Api::Async {
        bail!("--iodepth needs --api async");
    }
    if a.fsync > 0 && a.api == engine::Api::Async {
        bail!("--fsync runs with the synchronous APIs (copy, pin), not --api async");
    }
    if (plan.trace.is_some() || plan.record.is_some()) && a.api == engine::Api::Async {
        bail!(
            "--trace, --synth and --record-trace run with the synchronous APIs (copy, pin), not --api async"
        );
    }
    // Builds every thread's generator once, to report a bad combination (e.g. more threads
    // than blocks for a sequential workload) before any work.
    op_gens(&plan).map_err(anyhow::Error::msg)?;
    Ok(plan)
}

fn op_gens(p: &Plan) -> Result<Vec<OpGen>, String> {
    if let Some(ops) = &p.trace {
        // A fresh cursor for each measured phase, shared by its threads.
        let cursor = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        return Ok((0..p.threads)
            .map(|_| {
                let end = match p.stop {
                    Stop::Ops(n) => n as usize,
                    Stop::Runtime(_) => ops.ops.len(),
                };
                let source = TraceSource { ops: ops.clone(), cursor: cursor.clone(), speed: p.speed, end };
                OpGen::trace(p.shape, source)
            })
            .collect());
    }
    (0..p.threads)
        .map(|t| {
            let g = OpGen::new(p.shape, p.rw, p.read_pct, p.zipf, t, p.threads, p.seed)?;
            Ok(if p.file_per_thread { g.in_file(t % p.shape.files) } else { g })
        })
        .collect()
}

/// Writes a recorded measured phase as an upcache trace.
fn write_recorded(path: &Path, accesses: &[Access]) -> Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(f);
    writeln!(out, "{}", crate::trace::formats::UPCACHE_HEADER)?;
    for a in accesses {
        crate::trace::formats::write_upcache(&mut out, a)?;
    }
    out.flush().with_context(|| format!("write {}", path.display()))
}

/// When a replay issues each request (`--timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Timing {
    /// As soon as a thread is free.
    Fast,
    /// At its time in the trace, divided by --speed.
    Trace,
}

/// The trace to replay (`--trace`, `--synth`), prepared, if any.
fn load_trace(a: &BenchArgs) -> Result<Option<Arc<ReplayOps>>> {
    let trace = match (&a.trace, a.synth) {
        (Some(path), _) => crate::trace::formats::load(path, a.trace_format)?,
        (None, Some(kind)) => {
            let pages = a.footprint.unwrap_or(1 << 30) / replay::ALIGN;
            let ops = a.ops.unwrap_or(1_000_000);
            crate::trace::synth::generate(kind, ops, pages, replay::ALIGN, a.seed)
                .map_err(anyhow::Error::msg)?
        }
        (None, None) => return Ok(None),
    };
    ensure!(a.speed.is_finite() && a.speed > 0.0, "--speed must be a positive number, got {}", a.speed);
    let prepared = replay::prepare(&trace, MAX_TRACE_REQUEST).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(prepared)))
}

/// The longest request a replay accepts.
const MAX_TRACE_REQUEST: u64 = 64 << 20;

/// Runs `upcache replay`: `bench` that must be given a trace.
pub fn run_replay(args: BenchArgs) -> Result<()> {
    ensure!(args.trace.is_some() || args.synth.is_some(), "replay needs --trace FILE or --synth KIND");
    run(args)
}

/// Runs `upcache bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    // The clock calibrates itself on first use (up to 200 ms): here, not in a timed run.
    Instant::now();
    if let Some(addr) = &args.metrics {
        let bound = crate::metrics::serve(addr)?;
        eprintln!("metrics: http://{bound}/metrics");
    }
    let dir = args.dir.clone();
    args.out.start()?;
    let plot_cdf = args.out.plot.clone();
    let dry_run = args.dry_run;
    let plan = resolve(args)?;
    if dry_run {
        println!("{}", serde_json::to_string_pretty(&config::resolved(&plan))?);
        return Ok(());
    }
    let (tmp, base) = match dir {
        Some(d) => (None, d),
        None => {
            let t =
                tempfile::Builder::new().prefix("upcache-bench-").tempdir().context("create a temp dir")?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    check_no_leftovers(&plan, &base)?;
    if !plan.json {
        print!("{}", report::wrap(&header(&plan, &base), report::WIDTH));
    }
    let mut reports = Vec::new();
    for run in 1..=plan.repeat {
        for &kind in &plan.engines {
            let r = match kind {
                EngineKind::Upcache => run_engine::<UpcacheEngine>(kind, &plan, &base, run),
                EngineKind::Kernel => run_engine::<KernelEngine>(kind, &plan, &base, run),
                EngineKind::Direct => run_engine::<DirectEngine>(kind, &plan, &base, run),
                EngineKind::Dontcache => run_engine::<DontcacheEngine>(kind, &plan, &base, run),
                EngineKind::Shared => run_engine::<SharedEngine>(kind, &plan, &base, run),
                EngineKind::Memory => run_engine::<memory::MemoryEngine>(kind, &plan, &base, run),
                EngineKind::MemoryIndexed => {
                    run_engine::<memory::IndexedMemoryEngine>(kind, &plan, &base, run)
                }
            }
            .with_context(|| format!("{} engine (run {run})", kind.name()))?;
            reports.push(r);
        }
    }
    if plan.json {
        let out = if plan.engines.len() > 1 || plan.repeat > 1 {
            serde_json::to_string_pretty(&reports)?
        } else {
            serde_json::to_string_pretty(&reports[0])?
        };
        println!("{out}");
    } else {
        let names: Vec<&str> = plan.engines.iter().map(|e| e.name()).collect();
        print!("{}", report::table(&names, &reports, plan.repeat));
    }
    // After the results are out: a chart that cannot be drawn costs only itself.
    if let Some(path) = &plot_cdf {
        let curves: Vec<(String, Vec<(f64, f64)>)> =
            reports.iter().filter(|r| r.run == 1).map(|r| (r.engine.clone(), r.lat_cdf.clone())).collect();
        let title = format!(
            "Latency CDF: {} {}, {}, {} thread(s)",
            reports[0].rw,
            fmt_size(plan.bs),
            fmt_size(plan.size),
            plan.threads
        );
        match crate::plotcmd::draw_cdf(&curves, &title, path) {
            Ok(()) => eprintln!("plot: {}", path.display()),
            Err(e) => eprintln!("warning: no latency plot: {e:#}"),
        }
    }
    if let Some(t) = tmp {
        if plan.keep {
            eprintln!("kept the data in {}", t.keep().display());
        } else {
            t.close().context("remove the temp dir")?;
        }
    }
    Ok(())
}

/// Fails if an engine's directory already holds data (say from a run with --keep), before
/// any engine runs rather than halfway through a comparison.
fn check_no_leftovers(p: &Plan, base: &Path) -> Result<()> {
    let mut dirs: Vec<PathBuf> = p.engines.iter().map(|e| base.join(e.name())).collect();
    if p.engines.contains(&EngineKind::Upcache) {
        dirs.extend(p.upcache.device_dirs.iter().flatten().cloned());
    }
    for d in dirs {
        let busy = match std::fs::read_dir(&d) {
            Ok(mut entries) => entries.next().is_some(),
            Err(_) => false,
        };
        let is_device_dir = p.upcache.device_dirs.as_ref().is_some_and(|v| v.contains(&d));
        // A given device directory may hold other things; only an array in it is in the way.
        if (is_device_dir && d.join("upcache.catalog").exists()) || (!is_device_dir && busy) {
            bail!("{} already holds data (left by --keep?); remove it or use another --dir", d.display());
        }
    }
    Ok(())
}

fn header(p: &Plan, base: &Path) -> String {
    let stop = match p.stop {
        Stop::Runtime(d) => format!("runtime {:?}", d),
        Stop::Ops(n) => format!("ops {n}"),
    };
    let mix = if p.rw == Rw::Randrw && p.trace.is_none() {
        format!(" rwmixread {}%", p.read_pct)
    } else {
        String::new()
    };
    let zipf = p.zipf.map(|z| format!(" zipf {z}")).unwrap_or_default();
    let zipf = if p.file_per_thread { format!("{zipf} file per thread") } else { zipf };
    let zipf = if p.fsync > 0 { format!("{zipf} fsync every {}", p.fsync) } else { zipf };
    let u = &p.upcache;
    let devs = match &u.device_dirs {
        Some(d) => d.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(","),
        None if u.sim.is_some() => format!("sim:{}", u.devices),
        None => u.devices.to_string(),
    };
    let workload = match (&p.trace, p.speed) {
        (None, _) => p.rw.name().to_string(),
        (Some(t), None) => format!("trace of {} requests, as fast as possible, largest", t.ops.len()),
        (Some(t), Some(x)) => format!("trace of {} requests at {x}x its timing, largest", t.ops.len()),
    };
    let mut h = format!(
        "{workload}{mix}{zipf} bs {} threads {} files {} x {} {}{stop} seed {}; dir {}",
        fmt_size(p.bs),
        p.threads,
        p.shape.files,
        fmt_size(p.size),
        if p.warm { "warm " } else { "cold " },
        p.seed,
        base.display(),
    );
    if p.engines.contains(&EngineKind::Upcache) {
        let threads = if u.io_threads == upcache::SubmitKind::PerDevice { " per-device threads" } else { "" };
        let io = format!("{}{threads}", u.io.name());
        h += &format!(
            "\nupcache: cache {} devices {devs} page {} stripe {} flushers {} flush {} streams {} policy {}+{} dirty ratios {},{} layout {} index {} alloc {} io {} readahead {} api {}{}",
            fmt_size(u.cache),
            fmt_size(u.page_size as u64),
            fmt_size(u.stripe_unit),
            u.flushers,
            u.flush.name(),
            if u.streams { "on" } else { "off" },
            u.policy.name(),
            u.clean_first.name(),
            u.dirty_ratios.0,
            u.dirty_ratios.1,
            u.layout.name(),
            u.index.name(),
            u.alloc.name(),
            io,
            fmt_size(u.readahead),
            match u.api {
                engine::Api::Async => format!("async iodepth {} batch {}", u.iodepth, u.iodepth_batch),
                api => api.name().to_string(),
            },
            if u.index == upcache::IndexKind::SetAssoc {
                format!(" sets {} ways {}", u.sets.0, u.sets.1.name())
            } else {
                String::new()
            },
        );
        if u.prefault {
            h += " prefault";
        }
    }
    h
}

/// Prefill and warm move data in chunks of this size.
const CHUNK: u64 = 1 << 20;

/// One engine, one repetition: setup, prefill, settle, warm, measure, flush, teardown.
fn run_engine<E: Engine>(kind: EngineKind, p: &Plan, base: &Path, run: usize) -> Result<Report> {
    let root = base.join(kind.name());
    let peak_reset = reset_peak_rss();
    let mut eng = E::setup(&Setup { root: &root, files: p.shape.files, size: p.size, upcache: &p.upcache })?;
    let warm = p.warm && kind != EngineKind::Direct;
    let result = (|| -> Result<Report> {
        // Appends start from empty files.
        if p.rw != Rw::Append {
            prefill(&eng, kind, p)?;
        }
        eng.settle(warm)?;
        if warm {
            warm_and_check(&eng, kind, p)?;
        }
        let before = eng.stats();
        let sim_before = eng.sim_stats();
        let cpu0 = cpu_seconds();
        let machine0 = machine_busy_seconds();
        let record = p.record.is_some() && run == 1 && kind == p.engines[0];
        let m = measure(&eng, kind, p, record)?;
        if let (true, Some(path)) = (record, &p.record) {
            write_recorded(path, &m.recorded)?;
        }
        let cpu = cpu_seconds() - cpu0;
        let machine_cpu = machine0.zip(machine_busy_seconds()).map(|(a, b)| b - a);
        let after = eng.stats();
        let sim = sim_before.zip(eng.sim_stats());
        let rss = mem_mib("VmRSS:");
        let t = Instant::now();
        eng.flush().context("flush after the measured phase")?;
        let flush_seconds = t.elapsed().as_secs_f64();
        let rss_peak = mem_mib("VmHWM:");
        let d = |f: fn(&upcache::Stats) -> u64| before.zip(after).map(|(b, a)| f(&a).wrapping_sub(f(&b)));
        if kind == EngineKind::Upcache {
            let limit = (p.upcache.cache >> 20) as f64 + 64.0;
            if peak_reset && rss_peak > limit {
                eprintln!(
                    "warning: upcache peak RSS {rss_peak:.0} MiB is over the cache budget + 64 MiB ({limit:.0} MiB)"
                );
            }
        }
        let bytes = m.bytes;
        Ok(Report {
            tool_version: env!("CARGO_PKG_VERSION"),
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            argv: std::env::args().collect(),
            config: config::resolved(p),
            engine: kind.name().into(),
            run,
            rw: match (&p.trace, p.speed) {
                (None, _) => p.rw.name().into(),
                (Some(_), None) => "trace".into(),
                (Some(_), Some(_)) => "trace-timed".into(),
            },
            bs: p.bs,
            threads: p.threads,
            devices: if kind == EngineKind::Upcache { p.upcache.devices } else { 1 },
            files: p.shape.files,
            size: p.size,
            warm,
            zipf: p.zipf,
            file_per_thread: p.file_per_thread,
            seconds: m.seconds,
            ops: m.ops,
            read_ops: m.reads,
            write_ops: m.ops - m.reads,
            bytes,
            iops: m.ops as f64 / m.seconds,
            mib_s: bytes as f64 / m.seconds / (1 << 20) as f64,
            lat_us: Latency::from_histogram(&m.hist),
            lat_cdf: report::cdf_points(&m.hist),
            read_lat_us: (!m.by_kind[0].is_empty()).then(|| Latency::from_histogram(&m.by_kind[0])),
            write_lat_us: (!m.by_kind[1].is_empty()).then(|| Latency::from_histogram(&m.by_kind[1])),
            cpu_seconds: cpu,
            cpu_us_per_op: cpu * 1e6 / m.ops.max(1) as f64,
            machine_cpu_seconds: machine_cpu,
            machine_cpu_us_per_op: machine_cpu.map(|c| c * 1e6 / m.ops.max(1) as f64),
            io: eng.io_name().map(str::to_owned),
            hits: d(|s| s.hits),
            misses: d(|s| s.misses),
            evictions: d(|s| s.evictions),
            writeback_bytes: d(|s| s.writeback_bytes),
            read_bytes: d(|s| s.read_bytes),
            dflush_pages: d(|s| s.dflush_pages),
            writeback_errors: d(|s| s.writeback_errors),
            lock_free_hits: d(|s| s.lock_free_hits),
            reclaimed: d(|s| s.reclaimed),
            readahead_pages: d(|s| s.readahead_pages),
            hot_hits: d(|s| s.hot_hits),
            sim_gc_episodes: sim.map(|(b, a)| a.gc_episodes - b.gc_episodes),
            sim_gc_delayed: sim.map(|(b, a)| a.gc_delayed - b.gc_delayed),
            // Gauges at the end of the measured phase, not deltas.
            metadata_bytes: after.map(|s| s.metadata_bytes),
            index_bytes: after.map(|s| s.index_bytes),
            flush_seconds,
            rss_peak_mib: rss_peak,
            rss_mib: rss,
        })
    })();
    // Tear down even after a failure, so a failed run leaves no data behind.
    let keep = p.keep && run == p.repeat;
    let torn = eng.teardown(keep).context("teardown");
    let report = result?;
    torn?;
    Ok(report)
}

/// Writes every file fully, sequentially, in 1 MiB writes of the data set's content.
fn prefill<E: Engine>(eng: &E, kind: EngineKind, p: &Plan) -> Result<()> {
    let mut buf = AlignedBuf::new(CHUNK as usize)?;
    let total = p.size * p.shape.files as u64;
    let mut bar = Progress::new(&format!("{} prefill", kind.name()), total, false);
    for f in 0..p.shape.files {
        let mut off = 0;
        while off < p.size {
            let n = CHUNK.min(p.size - off) as usize;
            fill_content(&mut buf[..n], p.seed, f, off);
            eng.write(f, &buf[..n], off).with_context(|| format!("prefill f{f} at {off}"))?;
            off += n as u64;
            bar.set(f as u64 * p.size + off);
        }
    }
    bar.finish();
    Ok(())
}

/// Reads the whole data set once so that it is cached, checking every byte against the
/// content the prefill wrote (a free correctness check of the engine).
fn warm_and_check<E: Engine>(eng: &E, kind: EngineKind, p: &Plan) -> Result<()> {
    let mut buf = AlignedBuf::new(CHUNK as usize)?;
    let mut want = vec![0u8; CHUNK as usize];
    let total = p.size * p.shape.files as u64;
    let mut bar = Progress::new(&format!("{} warm", kind.name()), total, false);
    for f in 0..p.shape.files {
        let mut off = 0;
        while off < p.size {
            let n = CHUNK.min(p.size - off) as usize;
            eng.read_all(f, &mut buf[..n], off).with_context(|| format!("warm read f{f} at {off}"))?;
            fill_content(&mut want[..n], p.seed, f, off);
            if buf[..n] != want[..n] {
                let i = buf[..n].iter().zip(&want[..n]).position(|(a, b)| a != b).unwrap_or(0);
                bail!(
                    "data check failed: f{f} byte {} read back differs from what the prefill wrote",
                    off + i as u64
                );
            }
            off += n as u64;
            bar.set(f as u64 * p.size + off);
        }
    }
    bar.finish();
    Ok(())
}

/// The measured phase's result, all threads merged.
struct Measured {
    seconds: f64,
    ops: u64,
    reads: u64,
    bytes: u64,
    hist: Histogram<u64>,
    /// Latencies of reads and of writes.
    by_kind: [Histogram<u64>; 2],
    /// Every thread's requests, by issue time (`--record-trace`).
    recorded: Vec<Access>,
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

fn measure<E: Engine>(eng: &E, kind: EngineKind, p: &Plan, record: bool) -> Result<Measured> {
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

/// User plus system CPU time of the whole process so far (every thread, flushers included).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage struct, which we own, and reads nothing.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Busy CPU time of the whole machine so far, from `/proc/stat` (user, nice, system, irq and
/// softirq of every CPU). A process's own CPU time holds the interrupt work that lands while
/// it runs and misses what lands while it sleeps, so two programs that sleep differently are
/// compared fairly only by this (bench/RESULTS.md, issue 18). None if unreadable.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).map_while(|t| t.parse().ok()).collect();
    // user nice system idle iowait irq softirq (steal, guest: guest is inside user already,
    // steal is time the host took away).
    let busy = [0, 1, 2, 5, 6].iter().map(|&i| ticks.get(i).copied()).sum::<Option<u64>>()?;
    // SAFETY: sysconf reads a constant and has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| busy as f64 / hz as f64)
}

/// Resets the process's peak RSS (VmHWM) to the current RSS, so each engine's peak is its own.
/// Returns false if the kernel refused (then VmHWM is the process-wide peak so far).
fn reset_peak_rss() -> bool {
    // "5" resets the peak resident set size (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A `kB` field of /proc/self/status (VmRSS, VmHWM), in MiB; 0 if unavailable.
fn mem_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Parses `BG,FG` dirty ratios; the library checks their range when the cache is created.
fn parse_ratios(s: &str) -> Result<(f64, f64), String> {
    let (bg, fg) = s.split_once(',').ok_or_else(|| format!("expected BG,FG, e.g. 0.5,0.75; got {s:?}"))?;
    let num = |v: &str| v.trim().parse::<f64>().map_err(|e| format!("bad ratio {v:?}: {e}"));
    Ok((num(bg)?, num(fg)?))
}

/// Parses any of the library's named choices (index kind, allocator, layout, set policy).
pub(crate) fn parse_choice<T: std::str::FromStr<Err = upcache::Error>>(s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|e: upcache::Error| e.to_string())
}

/// Parses a replacement policy with an optional clean-first rule: `KIND[+RULE]`.
pub(crate) fn parse_policy(s: &str) -> Result<(upcache::PolicyKind, upcache::CleanFirst), String> {
    let (kind, rule) = s.split_once('+').unwrap_or((s, "clean-first"));
    Ok((parse_choice(kind)?, parse_choice(rule)?))
}

/// Parses `--devices`: `N` or `sim:N`; (N, simulated).
fn parse_devices(s: &str) -> Result<(u64, bool), String> {
    let (n, sim) = match s.trim().strip_prefix("sim:") {
        Some(n) => (n, true),
        None => (s.trim(), false),
    };
    match n.parse::<u64>() {
        Ok(n) if (1..=upcache::MAX_DEVICES as u64).contains(&n) => Ok((n, sim)),
        _ => Err(format!("expected N or sim:N with N from 1 to {}, got {s:?}", upcache::MAX_DEVICES)),
    }
}

/// Parses `--sim` settings over the defaults.
fn parse_sim(s: &str) -> Result<upcache::SimConfig, String> {
    upcache::SimConfig::default().parse_settings(s).map_err(|e| e.to_string())
}

/// Parses `on` or `off`.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, got {other:?}")),
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
