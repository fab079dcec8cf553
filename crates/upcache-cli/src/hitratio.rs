//! `upcache hit-ratio`: a trace (a file, or generated) replayed through each replacement policy
//! at several cache sizes without any I/O, with Belady's OPT as the ceiling. The policies are
//! the library's own (`upcache::internals::policy::simulate`), driven as the cache drives them; each
//! page a request touches is one access, reads and writes alike.

use crate::output::OutputArgs;
use crate::size::parse_size;
use crate::trace::synth::{self, Synth};
use crate::trace::{formats, Format, Trace};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use upcache::internals::policy::simulate;
use upcache::PolicyKind;

#[derive(Args, Debug)]
pub struct HitRatioArgs {
    /// Trace file to replay
    #[arg(long, value_name = "FILE", required_unless_present = "synth", conflicts_with = "synth")]
    trace: Option<PathBuf>,
    /// Format of --trace: cloudphysics, msr or upcache (`bench --trace-format`; `--format`
    /// is the old name)
    #[arg(long, default_value = "cloudphysics", alias = "format")]
    trace_format: Format,
    /// Generate the trace instead: zipf:THETA, uniform, scan, ycsb-a, ycsb-b, ycsb-c, ycsb-f
    #[arg(long, value_name = "KIND")]
    synth: Option<Synth>,
    /// Operations of a generated trace
    #[arg(long, default_value_t = 1_000_000, conflicts_with = "trace")]
    ops: u64,
    /// Footprint of a generated trace
    #[arg(long, default_value = "1g", value_parser = parse_size, conflicts_with = "trace")]
    footprint: u64,
    /// Seed of a generated trace
    #[arg(long, default_value_t = 1, conflicts_with = "trace")]
    seed: u64,
    /// Cache page size
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    page_size: u64,
    /// Cache sizes: shares of the trace's footprint (10%) or sizes (64m)
    #[arg(long, default_value = "1%,2%,5%,10%,20%,50%", value_delimiter = ',', value_parser = parse_cache_size)]
    sizes: Vec<CacheSize>,
    /// Policies, in table order (OPT is always added)
    #[arg(long, default_value = "clock,gclock,lru,lfu,s3fifo,sieve", value_delimiter = ',', value_parser = crate::bench::parse_choice::<PolicyKind>)]
    policies: Vec<PolicyKind>,
    #[command(flatten)]
    out: OutputArgs,
}

/// A cache size as given: a share of the footprint or bytes.
#[derive(Debug, Clone, Copy)]
pub enum CacheSize {
    Percent(f64),
    Bytes(u64),
}

fn parse_cache_size(s: &str) -> Result<CacheSize, String> {
    match s.trim().strip_suffix('%') {
        Some(p) => match p.parse::<f64>() {
            Ok(v) if v > 0.0 && v <= 100.0 => Ok(CacheSize::Percent(v)),
            _ => Err(format!("{s:?}: a share must be over 0% and at most 100%")),
        },
        None => parse_size(s).map(CacheSize::Bytes),
    }
}

/// The hit ratio of one policy at one size.
#[derive(Debug, serde::Serialize)]
struct Cell {
    policy: String,
    frames: usize,
    hits: u64,
    ratio: f64,
}

/// Every page access of `trace` as a key: volume in the top 16 bits, page below.
fn page_keys(trace: &Trace, page_size: u64) -> Result<Vec<u64>> {
    let mut keys = Vec::new();
    for a in &trace.accesses {
        for p in a.pages(page_size) {
            if p >> 48 != 0 || a.volume >> 16 != 0 {
                bail!("page {p} of volume {} is past what the simulator can key", a.volume);
            }
            keys.push(u64::from(a.volume) << 48 | p);
        }
    }
    Ok(keys)
}

pub fn run(a: HitRatioArgs) -> Result<()> {
    if !a.page_size.is_power_of_two() || a.page_size < 512 {
        bail!("--page-size must be a power of two of at least 512 bytes");
    }
    a.out.start()?;
    let (trace, what) = match (&a.trace, a.synth) {
        (Some(path), _) => {
            (formats::load(path, a.trace_format)?, format!("{} ({})", path.display(), a.trace_format.name()))
        }
        (None, Some(kind)) => {
            let pages = (a.footprint / a.page_size).max(1);
            let t = synth::generate(kind, a.ops, pages, a.page_size, a.seed).map_err(anyhow::Error::msg)?;
            (t, format!("{kind:?} over {pages} pages, seed {}", a.seed))
        }
        (None, None) => bail!("give --trace or --synth"),
    };
    let keys = page_keys(&trace, a.page_size)?;
    let footprint = keys.iter().collect::<std::collections::HashSet<_>>().len();
    if footprint == 0 {
        bail!("the trace has no requests");
    }
    let json = a.out.json();
    let summary = format!(
        "trace: {what}: {} requests, {} volume(s); {} page accesses of {} B, footprint {footprint} pages",
        trace.accesses.len(),
        trace.volumes,
        keys.len(),
        a.page_size
    );
    let sizes: Vec<usize> = a
        .sizes
        .iter()
        .map(|s| match *s {
            CacheSize::Percent(p) => ((footprint as f64 * p / 100.0).round() as usize).max(1),
            CacheSize::Bytes(b) => ((b / a.page_size) as usize).max(1),
        })
        .collect();

    // Every (policy, size) pair is independent: run them on all cores.
    let mut rows: Vec<Option<PolicyKind>> = vec![None]; // None: OPT
    rows.extend(a.policies.iter().copied().map(Some));
    let tasks: Vec<(usize, usize)> =
        (0..rows.len()).flat_map(|r| (0..sizes.len()).map(move |s| (r, s))).collect();
    let results = Mutex::new(vec![vec![0u64; sizes.len()]; rows.len()]);
    let next = AtomicUsize::new(0);
    let failure = Mutex::new(None);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(tasks.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                // Relaxed: a work counter; the results mutex orders the writes.
                let Some(&(r, si)) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) else { return };
                let hits = match rows[r] {
                    None => Ok(simulate::opt_hits(sizes[si], &keys)),
                    Some(kind) => simulate::hits(kind, sizes[si], &keys),
                };
                match hits {
                    Ok(h) => results.lock().unwrap()[r][si] = h,
                    Err(e) => *failure.lock().unwrap() = Some(e),
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e).context("simulation failed");
    }
    let results = results.into_inner().unwrap();
    let name = |r: Option<PolicyKind>| r.map_or("opt", PolicyKind::name);
    let ratio = |h: u64| 100.0 * h as f64 / keys.len() as f64;

    let labels: Vec<String> = a
        .sizes
        .iter()
        .zip(&sizes)
        .map(|(s, n)| match s {
            CacheSize::Percent(p) => format!("{p}% ({n})"),
            CacheSize::Bytes(_) => format!("{n} pages"),
        })
        .collect();
    if !json {
        println!("{summary}");
        let width = labels.iter().map(|l| l.len()).max().unwrap_or(0).max(7);
        print!("{:<8}", "hit %");
        for l in &labels {
            print!(" {l:>width$}");
        }
        println!();
        for (r, row) in rows.iter().zip(&results) {
            print!("{:<8}", name(*r));
            for &h in row {
                print!(" {:>width$.2}", ratio(h));
            }
            println!();
        }
    }

    let cells: Vec<Cell> = rows
        .iter()
        .zip(&results)
        .flat_map(|(r, row)| {
            sizes.iter().zip(row).map(move |(&frames, &hits)| Cell {
                policy: name(*r).to_string(),
                frames,
                hits,
                ratio: ratio(hits) / 100.0,
            })
        })
        .collect();
    if json {
        let doc = serde_json::json!({
            "tool_version": env!("CARGO_PKG_VERSION"),
            "argv": std::env::args().collect::<Vec<_>>(),
            "trace": what, "accesses": keys.len(), "footprint_pages": footprint,
            "page_size": a.page_size, "cells": cells,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    if let Some(path) = &a.out.plot {
        let series = rows
            .iter()
            .zip(&results)
            .map(|(r, row)| crate::plot::Series {
                name: name(*r).to_string(),
                // x in % of the footprint, as the table's columns are given.
                points: sizes
                    .iter()
                    .zip(row)
                    .map(|(&n, &h)| (100.0 * n as f64 / footprint as f64, ratio(h)))
                    .collect(),
            })
            .collect();
        let chart = crate::plot::Chart {
            // The trace by its file's name, not its path (a title names the workload).
            title: match &a.trace {
                Some(path) => format!(
                    "Hit ratio: {} ({}), {} accesses",
                    path.file_name().unwrap_or(path.as_os_str()).to_string_lossy(),
                    a.trace_format.name(),
                    keys.len()
                ),
                None => format!("Hit ratio: {what}"),
            },
            x_label: format!("cache size (% of the footprint of {footprint} pages of {} B)", a.page_size),
            y_label: "hit ratio (%)".into(),
            x_log: true,
            y_tail: false,
            series,
        };
        crate::plot::draw(&chart, path)?;
        eprintln!("plot: {}", path.display());
    }
    Ok(())
}
