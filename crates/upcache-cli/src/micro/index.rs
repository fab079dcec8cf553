//! `upcache index-bench`: page index operations per second for each index kind at several
//! thread counts (oversubscribed past the core count on purpose: lock holders get preempted).
//!
//! Every thread works on one shared index (one file's) over a key space prefilled half full.
//! An operation is a lookup, or with probability `--update` an update: remove the key if a
//! lookup finds it, insert it otherwise, so the index stays about half full and inserts and
//! deletes are equally frequent.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use upcache::internals::frame::state::VALID;
use upcache::internals::frame::{FrameTable, PageKey};
use upcache::internals::index::setassoc::{claim_frame, Claim, SetPolicy, SetTable, DEFAULT_WAYS};
use upcache::internals::index::PageIndex;
use upcache::IndexKind;

use super::{measure_points, parse_count, print_table, run_threads, RunArgs};

#[derive(Args, Debug)]
pub struct IndexBenchArgs {
    /// Index kinds to compare (radix, locked, sharded, setassoc), the first is the reference
    #[arg(long, default_value = "radix,locked,sharded,setassoc", value_delimiter = ',', value_parser = crate::bench::parse_choice::<IndexKind>)]
    index: Vec<IndexKind>,
    /// Thread counts
    #[arg(long, default_value = "1,2,8,32", value_delimiter = ',', value_parser = parse_count)]
    threads: Vec<usize>,
    /// Pages in the key space (a 4 GiB file of 4 KiB pages by default)
    #[arg(long, default_value_t = 1 << 20)]
    keys: u64,
    /// Percentage of operations that insert or delete (the rest look up)
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    update: u32,
    #[command(flatten)]
    run: RunArgs,
}

/// Operations of one index under test.
struct Ops<L, I, R> {
    lookup: L,
    insert: I,
    remove: R,
}

/// Prefills half the keys, then runs the mix on `threads` threads; operations per second.
fn run_mix<L, I, R>(threads: usize, a: &IndexBenchArgs, ops: Ops<L, I, R>) -> f64
where
    L: Fn(u64) -> Option<u32> + Sync,
    I: Fn(u64, u32) + Sync,
    R: Fn(u64, u32) + Sync,
{
    let mut rng = SmallRng::seed_from_u64(7);
    for k in 0..a.keys {
        if rng.gen_bool(0.5) {
            (ops.insert)(k, k as u32);
        }
    }
    let (keys, update) = (a.keys, a.update);
    run_threads(threads, Duration::from_secs_f64(a.run.seconds), |t, stop| {
        let mut rng = SmallRng::seed_from_u64(1000 + t as u64);
        let mut done = 0u64;
        // Check the stop flag every 64 operations: a load per operation would be noise.
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for _ in 0..64 {
                let k = rng.gen_range(0..keys);
                let found = (ops.lookup)(k);
                if rng.gen_range(0..100) < update {
                    match found {
                        Some(f) => (ops.remove)(k, f),
                        None => (ops.insert)(k, t as u32),
                    }
                }
                std::hint::black_box(found);
            }
            done += 64;
        }
        done
    })
}

fn measure(kind: IndexKind, threads: usize, a: &IndexBenchArgs) -> f64 {
    let Some(ix) = kind.build() else { return measure_sets(threads, a) };
    let ix: &dyn PageIndex = &*ix;
    let ops = Ops {
        lookup: |k| ix.get(k),
        insert: |k, v| {
            let _ = ix.insert_if_absent(k, v);
        },
        remove: |k, f| {
            ix.remove_if(k, f);
        },
    };
    run_mix(threads, a, ops)
}

/// The set-associative cache has no free-form insert: a page is *claimed* in its set (an
/// empty way, else an in-set eviction), which is what a miss does. Here an insert is a claim
/// plus publishing the frame as a clean valid page, a delete is a removal plus taking the
/// frame back, and a lookup is a lookup (which also counts a hit for the set's policy). The
/// sets hold as many frames as there are keys, so the index is half full as for the others.
fn measure_sets(threads: usize, a: &IndexBenchArgs) -> f64 {
    let frames = FrameTable::new(a.keys as usize, 4096).expect("frame table");
    let sets = SetTable::new(frames.len(), DEFAULT_WAYS, SetPolicy::default());
    let ops = Ops {
        lookup: |k| sets.lookup(1, k),
        insert: |k, _| {
            if let Claim::New { frame, .. } = sets.claim(1, k, &frames) {
                frames.set_key(frame, PageKey { file: 1, page: k });
                frames.state(frame).assign_locked();
                frames.unlock(frame, VALID, 0);
                frames.state(frame).unpin();
            }
        },
        remove: |k, f| {
            if sets.remove_if(1, k, f) {
                // What a drop does: take the frame back (it is clean and unpinned here).
                claim_frame(&frames, f);
            }
        },
    };
    run_mix(threads, a, ops)
}

pub fn run(a: IndexBenchArgs) -> Result<()> {
    anyhow::ensure!(a.keys > 0 && a.keys <= u32::MAX as u64 / 2, "--keys must be 1 to 2^31-1");
    anyhow::ensure!(a.run.repeat > 0 && a.run.seconds > 0.0, "--repeat and --seconds must be positive");
    let kinds = a.index.clone();
    a.run.out.start()?;
    let points = measure_points(&a.threads, &kinds, a.run.repeat, |k| k.name(), |k, t| measure(k, t, &a));
    let title = format!("Page index: {} keys, {}% insert/delete", a.keys, a.update);
    if super::emit(&a.run.out, &title, "ops/s", &points)? {
        return Ok(());
    }
    println!(
        "index operations: {} keys, {}% insert/delete, {}% lookup; {} s per run, medians of {}",
        a.keys,
        a.update,
        100 - a.update,
        a.run.seconds,
        a.run.repeat
    );
    let names: Vec<String> = kinds.iter().map(|k| k.name().to_string()).collect();
    print_table("ops/s", &points, &names, &a.threads);
    for v in &names {
        let at = |t: usize| points.iter().find(|p| &p.variant == v && p.threads == t).map(|p| p.median);
        if let (Some(two), Some(most)) = (at(2), a.threads.iter().max().and_then(|&m| at(m))) {
            if a.threads.iter().max() != Some(&2) {
                println!(
                    "{v}: {} threads keep {:.2}x of 2 threads",
                    a.threads.iter().max().unwrap(),
                    most / two
                );
            }
        }
    }
    Ok(())
}
