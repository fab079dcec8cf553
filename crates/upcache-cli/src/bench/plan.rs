//! The plan of a run: the flags resolved to every setting, defaults included, and checked
//! together, so that a bad combination fails before any engine runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use upcache::shared::SharedConfig;

use super::engine::{self, EngineKind, UpcacheOpts, ALIGN};
use super::flags::{BenchArgs, Distribution, Timing};
use super::trace::{load_trace, trace_flags};
use super::workload::{OpGen, Rw, Shape, TraceSource};
use crate::size::fmt_size;
use crate::trace::replay::ReplayOps;

#[derive(Debug, Clone, Copy)]
pub(super) enum Stop {
    Runtime(Duration),
    Ops(u64),
}

/// The resolved, validated plan.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) engines: Vec<EngineKind>,
    pub(super) rw: Rw,
    pub(super) read_pct: u32,
    pub(super) bs: u64,
    pub(super) size: u64,
    pub(super) shape: Shape,
    pub(super) threads: usize,
    pub(super) stop: Stop,
    pub(super) warm: bool,
    pub(super) zipf: Option<f64>,
    /// Thread i picks blocks of file i mod files only (`--file-per-thread`).
    pub(super) file_per_thread: bool,
    pub(super) seed: u64,
    pub(super) repeat: usize,
    pub(super) keep: bool,
    pub(super) json: bool,
    /// Time one op in this many (`--lat-every`).
    pub(super) lat_every: u64,
    /// Sync every this many writes per thread (`--fsync`; 0 never).
    pub(super) fsync: u64,
    /// The trace replayed instead of `rw` (`--trace`, `--synth`) and its speed (None: fast).
    pub(super) trace: Option<Arc<ReplayOps>>,
    pub(super) speed: Option<f64>,
    /// Where to record the first measured phase (`--record-trace`).
    pub(super) record: Option<PathBuf>,
    /// The flags that chose the trace, for the report's config (`trace::trace_flags`).
    pub(super) trace_flags: serde_json::Map<String, serde_json::Value>,
    /// Print interval figures this often (`--status-interval`).
    pub(super) status_interval: Option<Duration>,
    pub(super) upcache: UpcacheOpts,
}

/// The flags given other than their defaults that set how an array's backing files are
/// reached: the shared engine's files are an array only with `--devices` more than 1,
/// `--device-dirs`, `--sim` or `--meta-dir` (`SharedEngine::setup`); its plain OS files
/// would run without them, so such a run fails instead (its OS files fall back to their
/// descriptors where `O_DIRECT` is refused, and their I/O is the caller's).
fn array_only_flags(a: &BenchArgs) -> Vec<&'static str> {
    [
        ("--io-threads", a.io_threads.is_some_and(|t| t != Default::default())),
        ("--allow-buffered", a.allow_buffered),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// The shared cache's policy that replaces pages inside a set as `p` does in the in-process
/// engine's sets (the shared cache's sets take `SharedConfig::policy`).
fn set_policy_kind(p: upcache::SetPolicy) -> upcache::PolicyKind {
    use upcache::{PolicyKind, SetPolicy};
    match p {
        SetPolicy::GClock => PolicyKind::GClock,
        SetPolicy::Clock => PolicyKind::Clock,
        SetPolicy::Lru => PolicyKind::Lru,
        SetPolicy::Lfu => PolicyKind::Lfu,
    }
}

/// The shared engine's settings from the flags it takes; the shared cache's own defaults for
/// those not given (its readahead is at most 1 MiB, a run; its dirty ratios 0.25,0.5).
fn shared_config(a: &BenchArgs) -> SharedConfig {
    let d = SharedConfig::default();
    SharedConfig {
        range_lock: a.range_lock.unwrap_or(d.range_lock),
        run_merging: a.run_merging.unwrap_or(d.run_merging),
        bundling: a.bundling.unwrap_or(d.bundling),
        readahead: a.readahead.unwrap_or(d.readahead),
        dirty_ratios: a.dirty_ratios.unwrap_or(d.dirty_ratios),
        index: a.index.unwrap_or(d.index),
        set_ways: a.set_ways.map_or(d.set_ways, |w| w.min(u32::MAX as u64) as u32),
        numa: a.numa.clone().unwrap_or(d.numa),
        flushers: a.flushers.map_or(d.flushers, |f| f.min(u32::MAX as u64) as u32),
        // In the sets of its set-associative index, `--set-policy` (given) replaces pages, as
        // in the in-process engine's.
        policy: match a.set_policy.filter(|p| *p != Default::default()) {
            Some(p) if a.index == Some(upcache::IndexKind::SetAssoc) => set_policy_kind(p),
            _ => a.policy.map_or(d.policy, |p| p.0),
        },
        clean_first: a.policy.map_or(d.clean_first, |p| p.1),
        flush: a.flush.unwrap_or(d.flush),
        streams: a.streams.unwrap_or(d.streams),
        huge_pages: a.huge_pages.unwrap_or(d.huge_pages),
        direct_loads: a.direct_loads.unwrap_or(d.direct_loads),
        hot_index: a.hot_index.unwrap_or(d.hot_index),
        io: a.io.unwrap_or(d.io),
        page_size: a.page_size.map_or(d.page_size, |p| p.min(usize::MAX as u64) as usize),
        alloc: a.alloc.unwrap_or(d.alloc),
        prefault: a.prefault,
        ..d
    }
}

pub(super) fn resolve(mut a: BenchArgs) -> Result<Plan> {
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
    ensure!(
        a.set_policy.is_none_or(|p| p == Default::default()) || a.index == Some(upcache::IndexKind::SetAssoc),
        "--set-policy is the replacement inside the page sets of --index setassoc"
    );
    let shared_array =
        a.devices.is_some_and(|(n, sim)| n > 1 || sim) || a.device_dirs.is_some() || a.meta_dir.is_some();
    let array_only = array_only_flags(&a);
    ensure!(
        !engines.contains(&EngineKind::Shared) || shared_array || array_only.is_empty(),
        "{} set how an array's backing files are reached: the shared engine's files are an array \
         with --devices N (more than 1, or sim:N), --device-dirs or --meta-dir, plain OS files \
         otherwise",
        array_only.join(", ")
    );
    ensure!(
        a.direct_loads != Some(false) || engines.contains(&EngineKind::Shared),
        "--direct-loads off sets the shared engine only (--engine shared): the in-process engine's \
         plain files are read with O_DIRECT, and its device files are its own"
    );
    ensure!(
        a.huge_pages != Some(false) || engines.contains(&EngineKind::Shared),
        "--huge-pages off sets the shared engine only (--engine shared): the in-process engine's \
         frames are anonymous memory, on huge pages wherever transparent huge pages are on"
    );
    ensure!(
        a.numa.as_ref().is_none_or(|n| *n == Default::default()) || engines.contains(&EngineKind::Shared),
        "--numa sets the shared engine only (--engine shared): the in-process engine has no NUMA \
         partitions"
    );
    let shared = shared_config(&a);
    if engines.contains(&EngineKind::Shared) {
        shared.check().context("the shared engine's settings")?;
    }
    let shared_only = engines == [EngineKind::Shared];
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
        trace_flags: trace_flags(&a),
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
            range_lock: a.range_lock.unwrap_or(true),
            hot_index: a.hot_index.unwrap_or(true),
            run_merging: a.run_merging.unwrap_or(true),
            bundling: a.bundling.unwrap_or(true),
            // A run of the shared engine alone reports its settings, so that it runs again.
            dirty_ratios: if shared_only {
                shared.dirty_ratios
            } else {
                a.dirty_ratios.unwrap_or(upcache::DEFAULT_DIRTY_RATIOS)
            },
            allow_buffered: a.allow_buffered,
            prefault: a.prefault,
            index: a.index.unwrap_or_default(),
            alloc: if shared_only { shared.alloc } else { a.alloc.unwrap_or_default() },
            layout: a.layout.unwrap_or_default(),
            api: a.api,
            iodepth: a.iodepth as usize,
            iodepth_batch: a.iodepth_batch as usize,
            io: a.io.unwrap_or_default(),
            readahead: if shared_only {
                shared.readahead
            } else {
                a.readahead.unwrap_or(upcache::DEFAULT_READAHEAD)
            },
            io_threads: a.io_threads.unwrap_or_default(),
            sets: (
                a.set_ways.map_or(upcache::internals::index::setassoc::DEFAULT_WAYS, |w| w as usize),
                a.set_policy.unwrap_or_default(),
            ),
            shared: SharedConfig { memory: cache, ..shared },
        },
    };
    if a.range_lock == Some(false) && a.api != engine::Api::Copy {
        bail!("--range-lock off refuses the pin and queue APIs (a pin held while its thread writes could wait for ever): use --api copy");
    }
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

pub(super) fn op_gens(p: &Plan) -> Result<Vec<OpGen>, String> {
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

/// Fails if an engine's directory already holds data (say from a run with --keep), before
/// any engine runs rather than halfway through a comparison.
pub(super) fn check_no_leftovers(p: &Plan, base: &Path) -> Result<()> {
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

pub(super) fn header(p: &Plan, base: &Path) -> String {
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
            upcache::on_off(u.streams),
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
        for (off, what) in [
            (!u.range_lock, "range lock"),
            (!u.hot_index, "hot index"),
            (!u.run_merging, "run merging"),
            (!u.bundling, "bundling"),
        ] {
            if off {
                h += &format!(" {what} off");
            }
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn plan(flags: &[&str]) -> Result<Plan> {
        resolve(Bench::try_parse_from([&["bench"], flags].concat())?.args)
    }

    /// Each of the in-process engine's flags reaches the shared cache too (issue 34): a set
    /// policy replaces pages in its sets, the locked index and prefault its config; those of an array's I/O are
    /// refused for plain OS files, which would run without them.
    #[test]
    fn the_shared_engine_takes_every_technique_flag() {
        let p = plan(&["--engine", "shared", "--index", "setassoc", "--set-policy", "lru"]).unwrap();
        assert_eq!(p.upcache.shared.policy, upcache::PolicyKind::Lru);
        let p = plan(&["--engine", "shared", "--index", "setassoc"]).unwrap();
        assert_eq!(p.upcache.shared.policy, SharedConfig::default().policy);
        let err = plan(&["--engine", "shared", "--set-policy", "lfu"]).unwrap_err().to_string();
        assert!(err.contains("--set-policy"), "{err}");
        let p = plan(&["--engine", "shared", "--index", "locked"]).unwrap();
        assert_eq!(p.upcache.shared.index, upcache::IndexKind::Locked);
        assert!(plan(&["--engine", "shared", "--prefault"]).unwrap().upcache.shared.prefault);
        assert!(!plan(&["--engine", "shared"]).unwrap().upcache.shared.prefault);
        for flags in [&["--io-threads", "per-device"][..], &["--allow-buffered"]] {
            let err = plan(&[&["--engine", "shared"], flags].concat()).unwrap_err().to_string();
            assert!(err.contains(flags[0]), "{err}");
            for array in [&["--devices", "2"][..], &["--devices", "sim:1"], &["--device-dirs", "/a"]] {
                plan(&[&["--engine", "shared"], flags, array].concat()).unwrap();
            }
            plan(&[&["--engine", "upcache"], flags].concat()).unwrap();
        }
    }
}
