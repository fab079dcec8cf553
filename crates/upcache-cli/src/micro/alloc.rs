//! `upcache alloc-bench`: the cost of taking and returning free frames, one global queue
//! against the two-layer allocator, at several thread counts.
//!
//! Each thread plays one file's misses: it takes `--batch` frames one at a time, then gives
//! them back one at a time, as a file does when its pages are dropped, and repeats. The pool
//! holds `--frames` frames, far more than the threads hold at once, so nobody runs dry and
//! the figure is the allocator's own cost per frame (one take plus one return).

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use upcache::internals::alloc::{AllocKind, FileFrames, FrameAllocator};

use super::{measure_points, parse_count, print_table, run_threads, RunArgs};

#[derive(Args, Debug)]
pub struct AllocBenchArgs {
    /// Allocators to compare, the first is the reference
    #[arg(long, default_value = "twolayer,global", value_delimiter = ',', value_parser = crate::bench::parse_choice::<AllocKind>)]
    alloc: Vec<AllocKind>,
    /// Thread counts
    #[arg(long, default_value = "1,2,8", value_delimiter = ',', value_parser = parse_count)]
    threads: Vec<usize>,
    /// Frames in the pool
    #[arg(long, default_value_t = 1 << 18)]
    frames: usize,
    /// Frames a thread takes before giving them back
    #[arg(long, default_value_t = 256)]
    batch: usize,
    #[command(flatten)]
    run: RunArgs,
}

fn measure(kind: AllocKind, threads: usize, a: &AllocBenchArgs) -> f64 {
    let pool = FrameAllocator::new(kind, a.frames);
    let batch = a.batch;
    run_threads(threads, Duration::from_secs_f64(a.run.seconds), |_, stop| {
        let file = FileFrames::default();
        let mut held = Vec::with_capacity(batch);
        let mut frames = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for _ in 0..batch {
                match pool.alloc(&file) {
                    Some(id) => held.push(id),
                    None => break,
                }
            }
            frames += held.len() as u64;
            for id in held.drain(..) {
                pool.free(&file, id);
            }
        }
        pool.drain(&file);
        frames
    })
}

pub fn run(a: AllocBenchArgs) -> Result<()> {
    anyhow::ensure!(a.run.repeat > 0 && a.run.seconds > 0.0, "--repeat and --seconds must be positive");
    let max_threads = a.threads.iter().copied().max().unwrap_or(1);
    anyhow::ensure!(
        a.batch > 0 && a.frames >= a.batch * max_threads * 2,
        "--frames must be at least twice --batch times the most threads"
    );
    a.run.out.start()?;
    let points = measure_points(&a.threads, &a.alloc, a.run.repeat, |k| k.name(), |k, t| measure(k, t, &a));
    let title = format!("Frame allocation: {} frames a round from {}", a.batch, a.frames);
    if super::emit(&a.run.out, &title, "frames/s", &points)? {
        return Ok(());
    }
    println!(
        "frame allocation: take and return {} frames per round from a pool of {}; {} s per run, medians of {}",
        a.batch, a.frames, a.run.seconds, a.run.repeat
    );
    let names: Vec<String> = a.alloc.iter().map(|k| k.name().to_string()).collect();
    print_table("frames/s", &points, &names, &a.threads);
    for p in points.iter().filter(|p| p.threads == 2) {
        println!("{}: {:.1} ns per frame (take + return) with 2 threads", p.variant, 2.0 * 1e9 / p.median);
    }
    Ok(())
}
