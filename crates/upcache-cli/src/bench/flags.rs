//! The flags of `upcache bench` and `upcache replay`, and their parsers: each flag as given,
//! unchecked against the others (plan.rs resolves and checks them together).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::engine::{self, EngineKind};
use super::workload::Rw;
use crate::output::OutputArgs;
use crate::size::{parse_duration, parse_size};

/// Flags of `upcache bench`. Flags left unset take the defaults shown, whatever else is
/// given: a flag changes only what it says (see the command's long help for the comparison
/// of hit paths that earlier versions ran with no flag).
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Engine to run [default: upcache]
    #[arg(long, value_enum, conflicts_with = "compare")]
    pub(super) engine: Option<EngineKind>,
    /// Engines to run in turn on the same data set, e.g. upcache,kernel,direct; the table
    /// gives iops ratios against the first
    #[arg(long, value_enum, value_delimiter = ',', value_name = "ENGINE,...")]
    pub(super) compare: Option<Vec<EngineKind>>,
    /// Access pattern [default: randread]
    #[arg(long, value_enum)]
    pub(super) rw: Option<Rw>,
    /// Percentage of reads for randrw [default: 50]
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub(super) rwmixread: Option<u32>,
    /// Block size of each op, e.g. 4k, 64KiB [default: 4k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) bs: Option<u64>,
    /// Size of each file [default: 256m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) size: Option<u64>,
    /// Number of files [default: 1]
    #[arg(long, visible_alias = "nrfiles", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(super) files: Option<u64>,
    /// All threads on one file (the same as `--files 1`, the default; said explicitly for
    /// comparisons where that matters, such as writers of one file)
    #[arg(long, conflicts_with = "files")]
    pub(super) shared_file: bool,
    /// Number of threads issuing ops [default: 1]
    #[arg(long, visible_alias = "numjobs", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(super) threads: Option<u64>,
    /// Length of the measured phase, e.g. 10s, 500ms, 1m [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "ops")]
    pub(super) runtime: Option<Duration>,
    /// Total ops of the measured phase, split between the threads (instead of --runtime)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) ops: Option<u64>,
    /// upcache memory budget [default: 512m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) cache: Option<u64>,
    /// Number of upcache device directories, <dir>/upcache/dev0.. [default: 1]; sim:N for N
    /// simulated SSDs (io::device::sim; their data in /dev/shm where it exists), set with --sim
    #[arg(long, value_name = "N|sim:N", value_parser = parse_devices, conflicts_with = "device_dirs")]
    pub(super) devices: Option<(u64, bool)>,
    /// Settings of simulated devices (with --devices sim:N), key=value,...: channels,
    /// read-latency, write-latency, bandwidth, gc-every, gc-time, gc-read-slowdown, volatile,
    /// jitter, seed [default: 8 channels, 80us reads, 20us writes, 800 MB/s, 10ms of GC every
    /// 64MiB written, reads 4x slower during GC, 8MiB volatile cache, 10% jitter]
    #[arg(long, value_name = "SETTINGS", value_parser = parse_sim)]
    pub(super) sim: Option<upcache::SimConfig>,
    /// upcache device directories (one per SSD), comma-separated
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub(super) device_dirs: Option<Vec<PathBuf>>,
    /// upcache metadata log directory (file creations, removals, lengths), e.g. on a faster
    /// device [default: the first device directory]
    #[arg(long, value_name = "PATH")]
    pub(super) meta_dir: Option<PathBuf>,
    /// Where the engines' data goes (in <dir>/<engine>) [default: a fresh temporary directory]
    #[arg(long, value_name = "PATH")]
    pub(super) dir: Option<PathBuf>,
    /// Read the whole data set once before measuring, so reads hit the cache (no effect on direct)
    #[arg(long)]
    pub(super) warm: bool,
    /// Zipf-distributed offsets with this exponent (e.g. 0.99, 1.2) instead of uniform
    #[arg(long, value_name = "THETA", allow_negative_numbers = true)]
    pub(super) zipf: Option<f64>,
    /// fio's name for the offset distribution: random (uniform, the default) or zipf:THETA
    #[arg(long = "random_distribution", value_name = "random|zipf:THETA", value_parser = parse_distribution, conflicts_with = "zipf")]
    pub(super) random_distribution: Option<Distribution>,
    /// Each thread works on a file of its own (thread i on file i mod --files), as fio's jobs
    /// do, instead of every op picking a file at random (random workloads)
    #[arg(long)]
    pub(super) file_per_thread: bool,
    #[command(flatten)]
    pub(super) out: OutputArgs,
    /// upcache page size [default: 4k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) page_size: Option<u64>,
    /// upcache stripe unit [default: 128k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) stripe_unit: Option<u64>,
    /// upcache flusher threads [default: 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(super) flushers: Option<u64>,
    /// upcache replacement policy: clock, gclock, lru, lfu, s3fifo or sieve, with an optional
    /// rule for dirty pages: +clean-first (the default), +gc-aware (clean first while the
    /// page's device collects garbage) or +plain. Not with --index setassoc, whose sets have
    /// their own (--set-policy) [default: clock+clean-first]
    #[arg(long, value_name = "KIND[+RULE]", value_parser = parse_policy)]
    pub(super) policy: Option<(upcache::PolicyKind, upcache::CleanFirst)>,
    /// What an upcache writer does past the foreground dirty ratio: dflush (writes back dirty
    /// pages itself) or background (sleeps until the flushers have) [default: dflush]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::FlushKind>)]
    pub(super) flush: Option<upcache::FlushKind>,
    /// upcache stream tracking: on (a sync writes only its file's dirty streams; flushers
    /// write whole streams in requests of the device's size) or off (a sync looks at every
    /// cached page of its file; flushers scan the frames, 64-page runs); the shared engine's
    /// stream-aware eviction: on (a page a sequential stream reads once is no reference) or
    /// off [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) streams: Option<bool>,
    /// The shared engine's huge pages: on (its service collapses the frames' bytes in use into
    /// 2 MiB pages once the cache is warm, MADV_COLLAPSE) or off (4 KiB pages) [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) huge_pages: Option<bool>,
    /// The shared engine's direct loads: on (misses are read with O_DIRECT, past the kernel's
    /// page cache) or off (through the kernel's cache, a second copy) [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) direct_loads: Option<bool>,
    /// upcache's range lock (F2FS): on (writers of disjoint ranges of a file run at once) or
    /// off (one writer per file, as the kernel's inode lock) [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) range_lock: Option<bool>,
    /// upcache's per-thread hot index of pinned pages (ScalaCache): on or off [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) hot_index: Option<bool>,
    /// The shared engine's frames per NUMA node: machine, off, or CPUs per node described
    /// (0-3;4-7), as `upcache serve --numa` [default: machine]
    #[arg(long, value_name = "machine|off|CPUS;CPUS..")]
    pub(super) numa: Option<upcache::shared::SharedNuma>,
    /// upcache merges pages back to back on a device into one load or write-back request
    /// (SAFS): on, or off (a page per request) [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) run_merging: Option<bool>,
    /// upcache hands the I/O engine a load's or a write-back's requests together (ScalaCache's
    /// bundled submissions): on, or off (one at a time) [default: on]
    #[arg(long, value_name = "on|off", value_parser = upcache::parse_on_off)]
    pub(super) bundling: Option<bool>,
    /// upcache dirty ratios BACKGROUND,FOREGROUND: fractions of its frames past which flushers
    /// start, and past which writers write back all they dirty twice over (in proportion from
    /// halfway between the two) [default: 0.5,0.75]
    #[arg(long, value_name = "BG,FG", value_parser = upcache::parse_ratios)]
    pub(super) dirty_ratios: Option<(f64, f64)>,
    /// upcache page index: radix (ccXArray), locked (the same tree, updates under one lock per
    /// file) or sharded (hash shards) [default: radix]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::IndexKind>)]
    pub(super) index: Option<upcache::IndexKind>,
    /// upcache free-frame allocator: twolayer (per-core regions + per-file caches) or global
    /// (one lock-free queue) [default: twolayer]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::AllocKind>)]
    pub(super) alloc: Option<upcache::AllocKind>,
    /// upcache device layout: stripe, rotate (rotated striping) or hash [default: stripe]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::LayoutKind>)]
    pub(super) layout: Option<upcache::LayoutKind>,
    /// How upcache reads: copy (read_exact_at into the buffer), pin (zero-copy: pin each page
    /// and read one byte in place; writes still copy) or async (a queue per thread keeps
    /// --iodepth requests in flight). Other engines always copy, one op at a time
    #[arg(long, value_enum, default_value_t = engine::Api::Copy)]
    pub(super) api: engine::Api,
    /// Requests each thread keeps in flight with --api async
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(super) iodepth: u64,
    /// With --api async, hand reads to the kernel once N are queued (fio's
    /// iodepth_batch_submit): 1 submits each at once; larger saves system calls
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(super) iodepth_batch: u64,
    /// Who submits upcache's I/O: none (the thread that needs it) or per-device (one I/O
    /// thread per device, batching what is queued for it) [default: none]
    #[arg(long, value_name = "MODEL", value_parser = parse_choice::<upcache::SubmitKind>)]
    pub(super) io_threads: Option<upcache::SubmitKind>,
    /// upcache's largest readahead window (0 turns readahead off) [default: 16MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) readahead: Option<u64>,
    /// Time only one op in N (for every engine alike): latency percentiles come from that
    /// sample, and the clock's cost (about that of a cached pin) leaves the other ops
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(super) lat_every: u64,
    /// Make each thread's writes durable every N writes: `sync_data` of the file last written
    /// for upcache, fdatasync for the kernel engines (0: never). The sync counts in the
    /// write's latency.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(super) fsync: u64,
    /// upcache's I/O engine: uring (io_uring; psync, with a logged reason, where the kernel
    /// refuses it) or psync (preadv/pwritev) [default: uring]
    #[arg(long, value_name = "KIND", value_parser = parse_choice::<upcache::IoKind>)]
    pub(super) io: Option<upcache::IoKind>,
    /// Frames per page set with --index setassoc [default: 12]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(super) set_ways: Option<u64>,
    /// Replacement inside a page set with --index setassoc: gclock, clock, lru, lfu [default: gclock]
    #[arg(long, value_name = "POLICY", value_parser = parse_choice::<upcache::SetPolicy>)]
    pub(super) set_policy: Option<upcache::SetPolicy>,
    /// Let upcache use buffered backing files where the file system refuses O_DIRECT
    #[arg(long)]
    pub(super) allow_buffered: bool,
    /// Make upcache's whole frame arena resident before the run (`Config::with_prefault`),
    /// so no miss pays the first touch of its frame's memory
    #[arg(long)]
    pub(super) prefault: bool,
    /// Run the whole comparison N times; the table shows each engine's medians
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(super) repeat: u64,
    /// Seed of the offsets and the data content
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(super) seed: u64,
    /// Keep the engines' data (of the last repetition) instead of removing it
    #[arg(long)]
    pub(super) keep: bool,
    /// Replay this block trace instead of a generated workload: its volumes become files,
    /// requests are aligned out to 4 KiB and its touched 1 MiB regions packed together; the
    /// threads take its requests in order. Runs the trace once (or its first --ops requests)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rw", "bs", "size", "files", "zipf", "runtime", "synth"])]
    pub(super) trace: Option<PathBuf>,
    /// Format of --trace: cloudphysics, msr or upcache
    #[arg(long, value_name = "FORMAT", default_value = "cloudphysics")]
    pub(super) trace_format: crate::trace::Format,
    /// Replay a generated trace instead: zipf:THETA, uniform, scan, ycsb-a, ycsb-b, ycsb-c,
    /// ycsb-f, of --ops requests (default 1,000,000) of 4 KiB over --footprint
    #[arg(long, value_name = "KIND", conflicts_with_all = ["rw", "bs", "size", "files", "zipf", "runtime"])]
    pub(super) synth: Option<crate::trace::synth::Synth>,
    /// Footprint of a generated trace (--synth) [default: 1g]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "synth")]
    pub(super) footprint: Option<u64>,
    /// Replay timing: fast (each thread issues the next request as soon as it is done) or
    /// trace (each request at its time in the trace, divided by --speed)
    #[arg(long, value_enum, default_value_t = Timing::Fast)]
    pub(super) timing: Timing,
    /// Replay speed with --timing trace: 2 replays twice as fast as recorded
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub(super) speed: f64,
    /// Record the measured phase of the first engine's first run as an upcache trace (replay
    /// it with --trace FILE --trace-format upcache)
    #[arg(long, value_name = "FILE")]
    pub(super) record_trace: Option<PathBuf>,
    /// Serve upcache's counters and latency histograms for Prometheus at http://ADDR/metrics
    /// while the bench runs (e.g. 127.0.0.1:9898; port 0 picks one, printed on stderr)
    #[arg(long, value_name = "ADDR")]
    pub(super) metrics: Option<String>,
    /// fio's name: every DURATION print the last interval's iops and MiB/s on stderr, on a
    /// terminal or not (progress bars appear only on one)
    #[arg(long = "status-interval", value_name = "DURATION", value_parser = parse_duration)]
    pub(super) status_interval: Option<Duration>,
    /// Print the whole resolved configuration (the JSON report's `config`: every setting,
    /// defaults included) and exit without running anything
    #[arg(long)]
    pub(super) dry_run: bool,
}

/// The long help's note on defaults and the comparison of hit paths.
pub const DEFAULT_HELP: &str = "\
Every flag has one default, shown in brackets above, whatever other flags are given: adding a
flag changes only what it says. With none, upcache alone reads 4 KiB blocks of a 256 MiB file
at random, cold, for 10 s, on 1 device directory. The comparison of hit paths (what each cache
costs per read when the data is in memory), which earlier versions ran with no flag:
  upcache bench --compare upcache,kernel --warm --devices 4 --runtime 5s";

/// When a replay issues each request (`--timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Timing {
    /// As soon as a thread is free.
    Fast,
    /// At its time in the trace, divided by --speed.
    Trace,
}

/// `--random_distribution`: uniform (`random`) or zipf with this exponent.
#[derive(Debug, Clone, Copy)]
pub(super) struct Distribution(pub(super) Option<f64>);

fn parse_distribution(s: &str) -> Result<Distribution, String> {
    match s.split_once(':') {
        None if s == "random" => Ok(Distribution(None)),
        Some(("zipf", t)) => {
            t.parse().map(|z| Distribution(Some(z))).map_err(|_| format!("zipf:{t}: not a number"))
        }
        _ => Err(format!("{s:?}: give random or zipf:THETA (fio's other distributions are not offered)")),
    }
}

/// Parses any of the library's named choices (index kind, allocator, layout, set policy).
pub(crate) fn parse_choice<T: std::str::FromStr<Err = upcache::Error>>(s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|e: upcache::Error| e.to_string())
}

/// Parses a replacement policy with an optional clean-first rule: `KIND[+RULE]`.
fn parse_policy(s: &str) -> Result<(upcache::PolicyKind, upcache::CleanFirst), String> {
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
