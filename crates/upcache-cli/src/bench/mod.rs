//! `upcache bench` and `upcache replay`: running each engine in turn on the same data set.
//!
//! Per engine and repetition: set up its files, prefill them with deterministic content,
//! settle (write back; drop caches unless --warm), warm (read everything once, checking the
//! content), measure, flush (untimed), tear down. Only the measured phase is timed.

mod config;
mod engine;
mod flags;
mod memory;
mod plan;
mod progress;
pub(crate) mod report;
mod sampling;
mod trace;
mod worker;
pub(crate) mod workload;

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
// The clock the workers time ops with (worker.rs says why).
use quanta::Instant;

use self::engine::{
    AlignedBuf, DirectEngine, DontcacheEngine, Engine, EngineKind, KernelEngine, Setup, SharedEngine,
    UpcacheEngine,
};
pub(crate) use self::flags::parse_choice;
pub use self::flags::{BenchArgs, DEFAULT_HELP};
use self::plan::{check_no_leftovers, header, resolve, Plan};
use self::progress::Progress;
use self::report::{Latency, Report};
use self::sampling::{cpu_seconds, machine_busy_seconds, mem_mib, reset_peak_rss};
use self::trace::write_recorded;
use self::worker::measure;
use self::workload::{fill_content, Rw};
use crate::size::fmt_size;

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
            devices: if matches!(kind, EngineKind::Upcache | EngineKind::Shared) {
                p.upcache.devices
            } else {
                1
            },
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
            read_ios: d(|s| s.read_ios),
            writeback_ios: d(|s| s.writeback_ios),
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
