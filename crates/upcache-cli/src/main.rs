//! The `upcache` command: benchmarks of the upcache page cache against the kernel's.
//!
//! - `bench` (`bench/`) runs engines in turn (upcache, kernel buffered, O_DIRECT,
//!   RWF_DONTCACHE: `bench/engine.rs`) on copies of one data set; its ops come from a
//!   generator (`bench/workload.rs`) or a trace. `replay` is `bench` with a trace.
//! - Traces (`trace/`): `formats.rs` parses them into requests, `synth.rs` generates them
//!   from a seed, `replay.rs` packs their footprint into small files. Threads take requests
//!   from one shared cursor; with `--timing trace` each waits for its request's time.
//! - `hit-ratio` (`hitratio.rs`) runs every policy and OPT over a trace at each cache size
//!   with no I/O, one task per (policy, size), on all cores.
//! - `plot` (`plotcmd.rs`, drawn by `plot.rs`): throughput against threads or devices and
//!   latency CDFs from `bench --json` files (each report carries its CDF, `lat_cdf`);
//!   `bench --plot-cdf FILE` draws a run's CDFs directly.
//! - `serve` (`serve.rs`): the shared cache's service, or its status.
//! - `index-bench` and `alloc-bench` (`micro/`): the page index kinds and the free-frame
//!   allocators alone, per thread count.
//!
//! The scripts in `bench/experiments/` (one per seed paper, in the repository) drive it:
//! `common.py` builds the binary, runs rows interleaved round by round (optionally under a
//! cgroup v1 memory cap for the kernel), and prints medians and the ratios of each claim. A
//! technique without an off switch is said to be so, not compared against something else.
//! Figures go to `bench/RESULTS.md`, never into code comments.

#![deny(clippy::undocumented_unsafe_blocks)]

mod bench;
mod hitratio;
mod metrics;
mod micro;
mod output;
mod plot;
mod plotcmd;
mod serve;
mod size;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "upcache", version, about = "The upcache user-space page cache: benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure iops and latency of upcache, the kernel page cache and O_DIRECT (fio-like)
    #[command(after_long_help = bench::DEFAULT_HELP)]
    Bench(Box<bench::BenchArgs>),
    /// Page index operations per second, per index kind and thread count
    IndexBench(micro::index::IndexBenchArgs),
    /// Free-frame allocation cost, per allocator and thread count
    AllocBench(micro::alloc::AllocBenchArgs),
    /// Replay a block trace (CloudPhysics, MSR, upcache's own, or generated): `bench` with
    /// --trace FILE or --synth KIND, on upcache alone unless --compare names more engines
    Replay(Box<bench::BenchArgs>),
    /// Hit ratio of each replacement policy and of OPT on a trace, at several cache sizes
    HitRatio(hitratio::HitRatioArgs),
    /// Charts from `bench --json` output: throughput against threads or devices, latency CDFs
    Plot(plotcmd::PlotArgs),
    /// Run the shared cache's service, which processes attach to (or show its status)
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    // The library logs through `log`; show its warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    if !matches!(&cli.command, Command::Serve(a) if a.runs_service()) {
        // A report piped into `head` ends this process quietly, as it ends `yes` or `grep`,
        // instead of a panic in `println!` (Rust ignores SIGPIPE for every program). Not in
        // the service: a client that hangs up must not end the cache that others share.
        // SAFETY: sets a signal's disposition to its default; no handler runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Replay(args) => bench::run_replay(*args),
        Command::IndexBench(args) => micro::index::run(args),
        Command::AllocBench(args) => micro::alloc::run(args),
        Command::HitRatio(args) => hitratio::run(args),
        Command::Plot(args) => plotcmd::run(args),
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
