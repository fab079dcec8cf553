//! Synthetic traces: zipf, uniform and scan reads, and YCSB-style key-value mixes, one page per
//! request over a footprint of pages, from a seed (the same seed gives the same trace).
//!
//! YCSB's core workloads over zipfian (0.99) keys: A is 50% reads and 50% updates, B 95/5,
//! C reads only, F read-modify-write (half the operations read a key and then write it).
//! Keys are scattered over the footprint by a fixed permutation, so the hot pages are not
//! neighbours.

use super::{Access, Trace};
use crate::bench::workload::Scramble;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// A generator's kind, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Synth {
    /// Reads with zipf exponent (theta).
    Zipf(f64),
    Uniform,
    /// Reads of every page in order, over and over.
    Scan,
    /// YCSB core workload A, B, C or F.
    Ycsb(char),
}

impl std::str::FromStr for Synth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "uniform" => Synth::Uniform,
            "scan" => Synth::Scan,
            "ycsb-a" => Synth::Ycsb('a'),
            "ycsb-b" => Synth::Ycsb('b'),
            "ycsb-c" => Synth::Ycsb('c'),
            "ycsb-f" => Synth::Ycsb('f'),
            _ => match s.strip_prefix("zipf:") {
                Some(t) => {
                    let theta: f64 = t.parse().map_err(|_| format!("bad zipf exponent {t:?}"))?;
                    if !(theta > 0.0 && theta.is_finite()) {
                        return Err(format!("zipf exponent must be positive, got {theta}"));
                    }
                    Synth::Zipf(theta)
                }
                None => {
                    return Err(format!(
                        "unknown generator {s:?}; expected zipf:THETA, uniform, scan, ycsb-a, ycsb-b, ycsb-c or ycsb-f"
                    ))
                }
            },
        })
    }
}

/// `ops` operations of `kind` over `pages` pages of `page_size` bytes.
pub fn generate(kind: Synth, ops: u64, pages: u64, page_size: u64, seed: u64) -> Result<Trace, String> {
    if pages == 0 {
        return Err("the footprint must hold at least one page".into());
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let scramble = Scramble::new(pages, seed);
    let theta = match kind {
        Synth::Zipf(t) => Some(t),
        Synth::Ycsb(_) => Some(0.99),
        Synth::Uniform | Synth::Scan => None,
    };
    let zipf = theta.map(|t| Zipf::new(pages, t).map_err(|e| format!("zipf {t}: {e}"))).transpose()?;
    let write_pct = match kind {
        Synth::Ycsb('a') => 50,
        Synth::Ycsb('b') => 5,
        _ => 0,
    };
    let mut accesses = Vec::with_capacity(ops as usize);
    let mut access = |i: u64, page: u64, write: bool| {
        accesses.push(Access { time_us: i, write, volume: 0, offset: page * page_size, len: page_size })
    };
    for i in 0..ops {
        let page = match (&zipf, kind) {
            (_, Synth::Scan) => i % pages,
            // Ranks 1..=pages; rank 1 is the hottest.
            (Some(z), _) => scramble.apply(z.sample(&mut rng) as u64 - 1),
            (None, _) => rng.gen_range(0..pages),
        };
        if kind == Synth::Ycsb('f') && rng.gen_bool(0.5) {
            access(i, page, false);
            access(i, page, true);
        } else {
            access(i, page, rng.gen_range(0..100) < write_pct);
        }
    }
    Ok(Trace { accesses, volumes: 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_have_their_write_shares_and_stay_in_the_footprint() {
        for (spec, lo, hi) in
            [("ycsb-a", 45, 55), ("ycsb-b", 3, 7), ("ycsb-c", 0, 0), ("ycsb-f", 28, 38), ("zipf:0.9", 0, 0)]
        {
            let t = generate(spec.parse().unwrap(), 10_000, 1000, 4096, 7).unwrap();
            let writes = t.accesses.iter().filter(|a| a.write).count() * 100 / t.accesses.len();
            assert!((lo..=hi).contains(&writes), "{spec}: {writes}% writes");
            assert!(t.accesses.iter().all(|a| a.offset < 1000 * 4096 && a.len == 4096));
        }
    }

    #[test]
    fn zipf_is_skewed_scan_is_in_order_and_seeds_repeat() {
        let t = generate(Synth::Zipf(0.99), 20_000, 10_000, 4096, 1).unwrap();
        let mut counts = std::collections::HashMap::new();
        for a in &t.accesses {
            *counts.entry(a.offset).or_insert(0) += 1;
        }
        let top = counts.values().max().unwrap();
        assert!(*top > 20_000 / 100, "the hottest page gets over 1% of accesses: {top}");
        let s = generate(Synth::Scan, 5, 3, 4096, 1).unwrap();
        let pages: Vec<_> = s.accesses.iter().map(|a| a.offset / 4096).collect();
        assert_eq!(pages, [0, 1, 2, 0, 1]);
        assert_eq!(generate(Synth::Uniform, 100, 50, 4096, 9).unwrap().accesses, {
            generate(Synth::Uniform, 100, 50, 4096, 9).unwrap().accesses
        });
        assert!("zipf:-1".parse::<Synth>().is_err() && "ycsb-e".parse::<Synth>().is_err());
    }
}
