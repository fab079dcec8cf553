//! Micro-benchmarks of single components, side by side: `upcache index-bench` (page index
//! kinds) and `upcache alloc-bench` (free-frame allocators).

pub mod alloc;
pub mod index;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::output::OutputArgs;

/// How long and how often each point is measured, and how results are printed.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Seconds per measurement
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Measurements per point; the table shows medians
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One measured point: a variant at a thread count.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub variant: String,
    pub threads: usize,
    /// One value per run, operations per second.
    pub ops_per_sec: Vec<f64>,
    pub median: f64,
}

/// Runs `work(thread, stop)` on `threads` threads for `runtime` after a common start;
/// each returns its operation count. Returns operations per second.
pub fn run_threads<F>(threads: usize, runtime: Duration, work: F) -> f64
where
    F: Fn(usize, &AtomicBool) -> u64 + Sync,
{
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let (ops, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, stop, start) = (&work, &stop, &start);
                s.spawn(move || {
                    start.wait();
                    work(t, stop)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(runtime);
        // Relaxed: only tells workers to finish; join orders everything after.
        stop.store(true, Ordering::Relaxed);
        let ops: u64 = handles.into_iter().map(|h| h.join().expect("worker panicked")).sum();
        (ops, t0.elapsed().as_secs_f64())
    });
    ops as f64 / secs
}

/// Measures every (thread count, variant) point `repeat` times. Each repetition runs every
/// point once, in turn, so drift on a shared machine hits all points alike and the medians
/// compare like with like.
pub fn measure_points<K: Copy>(
    threads: &[usize],
    variants: &[K],
    repeat: usize,
    name: impl Fn(K) -> &'static str,
    measure: impl Fn(K, usize) -> f64,
) -> Vec<Point> {
    let mut runs = vec![vec![Vec::new(); variants.len()]; threads.len()];
    for _ in 0..repeat {
        for (ti, &t) in threads.iter().enumerate() {
            for (vi, &v) in variants.iter().enumerate() {
                runs[ti][vi].push(measure(v, t));
            }
        }
    }
    let mut points = Vec::new();
    for (ti, &t) in threads.iter().enumerate() {
        for (vi, &v) in variants.iter().enumerate() {
            let ops_per_sec: Vec<f64> = runs[ti][vi].clone();
            let median = crate::bench::report::median(&mut runs[ti][vi]);
            points.push(Point { variant: name(v).into(), threads: t, ops_per_sec, median });
        }
    }
    points
}

/// Prints the points as JSON if asked (true then) and draws them if asked: `unit` per second
/// against threads, a line per variant.
pub fn emit(out: &OutputArgs, title: &str, unit: &str, points: &[Point]) -> anyhow::Result<bool> {
    if out.json() {
        println!("{}", serde_json::to_string_pretty(points)?);
    }
    if let Some(path) = &out.plot {
        let mut series: Vec<crate::plot::Series> = Vec::new();
        for p in points {
            let at = (p.threads as f64, p.median);
            match series.iter_mut().find(|s| s.name == p.variant) {
                Some(s) => s.points.push(at),
                None => series.push(crate::plot::Series { name: p.variant.clone(), points: vec![at] }),
            }
        }
        let chart = crate::plot::Chart {
            title: title.into(),
            x_label: "threads".into(),
            y_label: format!("{unit} (median of runs)"),
            x_log: false,
            y_tail: false,
            series,
        };
        crate::plot::draw(&chart, path)?;
        eprintln!("plot: {}", path.display());
    }
    Ok(out.json())
}

/// Parses a positive count.
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// Prints a table of points: one row per variant, one column per thread count, and the
/// ratio of each variant against the first at each thread count.
pub fn print_table(unit: &str, points: &[Point], variants: &[String], threads: &[usize]) {
    let cell = |v: &str, t: usize| points.iter().find(|p| p.variant == v && p.threads == t).map(|p| p.median);
    let mut head = format!("{:<10}", unit);
    for t in threads {
        head += &format!(" {:>12}", format!("{t} thr"));
    }
    println!("{head}");
    for v in variants {
        let mut row = format!("{v:<10}");
        for &t in threads {
            row += &format!(" {:>12.0}", cell(v, t).unwrap_or(f64::NAN));
        }
        println!("{row}");
    }
    if variants.len() > 1 {
        for v in &variants[1..] {
            let mut row = format!("{:<10}", format!("{}/{}", variants[0], v));
            for &t in threads {
                let r = cell(&variants[0], t).unwrap_or(f64::NAN) / cell(v, t).unwrap_or(f64::NAN);
                row += &format!(" {:>11.2}x", r);
            }
            println!("{row}");
        }
    }
}
