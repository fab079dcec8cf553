//! The `upcache` command: benchmarks of the upcache page cache against the kernel's.

#![deny(clippy::undocumented_unsafe_blocks)]

mod bench;
mod hitratio;
mod micro;
mod plot;
mod plotcmd;
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
    /// Replay a block trace (CloudPhysics, MSR, upcache's own, or generated) against upcache
    /// and the kernel: `bench` with --trace FILE or --synth KIND
    Replay(Box<bench::BenchArgs>),
    /// Hit ratio of each replacement policy and of OPT on a trace, at several cache sizes
    HitRatio(hitratio::HitRatioArgs),
    /// Charts from `bench --json` output: throughput against threads or devices, latency CDFs
    Plot(plotcmd::PlotArgs),
}

fn main() -> ExitCode {
    // The library logs through `log`; show its warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Replay(args) => bench::run_replay(*args),
        Command::IndexBench(args) => micro::index::run(args),
        Command::AllocBench(args) => micro::alloc::run(args),
        Command::HitRatio(args) => hitratio::run(args),
        Command::Plot(args) => plotcmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
