//! What each thread does: which block of which file next, read or write, and the data set's
//! deterministic content.

use clap::ValueEnum;
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// The access pattern, as in fio's `--rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Random reads and writes, mixed by --rwmixread.
    Randrw,
    /// Writes that extend the file: each thread appends to a file of its own, which starts
    /// empty (no prefill), so every write changes the file's length.
    Append,
}

impl Rw {
    /// The fio spelling.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
            Rw::Randrw => "randrw",
            Rw::Append => "append",
        }
    }

    /// Whether offsets are random (else each thread walks its region sequentially).
    pub fn is_random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }
}

/// The data set: `files` files of `blocks_per_file` blocks of `bs` bytes (a tail shorter
/// than a block, if `--size` is not a multiple of `--bs`, is never accessed).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub files: usize,
    pub blocks_per_file: u64,
    pub bs: u64,
}

impl Shape {
    pub fn total_blocks(&self) -> u64 {
        self.files as u64 * self.blocks_per_file
    }
}

/// One operation: read or write `len` bytes at `offset` of file `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub read: bool,
    pub file: usize,
    pub offset: u64,
    pub len: usize,
    /// When to issue it, in µs after the start of the measured phase (a replay at the trace's
    /// own timing); None: at once.
    pub at_us: Option<u64>,
}

/// A prepared trace shared by the threads that replay it: each takes the next request.
pub struct TraceSource {
    pub ops: std::sync::Arc<crate::trace::replay::ReplayOps>,
    /// The next request to issue, shared by all threads of one measured phase.
    pub cursor: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Replay speed against the trace's own timing (2.0: twice as fast); None: as fast as
    /// possible.
    pub speed: Option<f64>,
    /// Requests replayed: the first `end` (`--ops`).
    pub end: usize,
}

enum Pick {
    /// This thread's slice of the global block space, `[first, first + count)`, walked in
    /// order from `next` and wrapping around.
    Seq { first: u64, count: u64, next: u64 },
    /// A uniformly random file, then a uniformly random block in it.
    Uniform,
    /// A uniformly random block of file `file` only (a file per thread).
    UniformIn { file: usize },
    /// Zipf rank over all blocks of all files, mapped to a block by a fixed scramble so the
    /// hot blocks are spread over files and devices rather than adjacent.
    Zipf { dist: Zipf<f64>, scramble: Scramble },
    /// Block `next` of file `file`, then the one after, without end.
    Append { file: usize, next: u64 },
    /// The requests of a trace, in order, shared with the other threads.
    Trace(TraceSource),
}

/// Generates a thread's operations. Owned by one thread; no allocation per op.
pub struct OpGen {
    shape: Shape,
    rw: Rw,
    /// Percentage of reads for `randrw`.
    read_pct: u32,
    pick: Pick,
}

impl OpGen {
    /// The generator of thread `thread` of `threads`. `zipf` is the Zipf exponent (theta) for
    /// random workloads; `seed` fixes the zipf scramble, which must be the same for every
    /// thread (and engine) so they agree on which blocks are hot.
    pub fn new(
        shape: Shape,
        rw: Rw,
        read_pct: u32,
        zipf: Option<f64>,
        thread: usize,
        threads: usize,
        seed: u64,
    ) -> Result<OpGen, String> {
        let total = shape.total_blocks();
        if total == 0 {
            return Err("the data set has no whole block".into());
        }
        let pick = if rw == Rw::Append {
            if shape.files != threads {
                return Err(format!(
                    "append needs a file per thread ({threads} threads, {} files)",
                    shape.files
                ));
            }
            Pick::Append { file: thread, next: 0 }
        } else if !rw.is_random() {
            // Split the blocks as evenly as possible; thread i gets [i*total/n, (i+1)*total/n).
            let n = threads as u128;
            let first = (thread as u128 * total as u128 / n) as u64;
            let end = ((thread as u128 + 1) * total as u128 / n) as u64;
            if end == first {
                return Err(format!(
                    "{threads} threads need at least {threads} blocks for a sequential workload"
                ));
            }
            Pick::Seq { first, count: end - first, next: 0 }
        } else if let Some(theta) = zipf {
            let dist = Zipf::new(total, theta).map_err(|e| format!("zipf {theta}: {e}"))?;
            Pick::Zipf { dist, scramble: Scramble::new(total, seed) }
        } else {
            Pick::Uniform
        };
        Ok(OpGen { shape, rw, read_pct: read_pct.min(100), pick })
    }

    /// This generator, with random blocks drawn from file `file` only (a file per thread,
    /// as fio's jobs have). Other workloads keep their own file choice.
    pub fn in_file(mut self, file: usize) -> OpGen {
        if matches!(self.pick, Pick::Uniform) && file < self.shape.files {
            self.pick = Pick::UniformIn { file };
        }
        self
    }

    /// A thread's generator replaying `source` (with the other threads of the phase).
    pub fn trace(shape: Shape, source: TraceSource) -> OpGen {
        OpGen { shape, rw: Rw::Randrw, read_pct: 0, pick: Pick::Trace(source) }
    }

    /// The next operation; None once a replayed trace is over.
    #[inline]
    pub fn next(&mut self, rng: &mut SmallRng) -> Option<Op> {
        if let Pick::Trace(t) = &self.pick {
            // Relaxed: only hands out distinct indexes.
            let i = t.cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let op = t.ops.ops[..t.end.min(t.ops.ops.len())].get(i)?;
            return Some(Op {
                read: !op.write,
                file: op.file as usize,
                offset: op.offset,
                len: op.len as usize,
                at_us: t.speed.map(|s| (op.time_us as f64 / s) as u64),
            });
        }
        let read = match self.rw {
            Rw::Read | Rw::Randread => true,
            Rw::Write | Rw::Randwrite | Rw::Append => false,
            Rw::Randrw => rng.gen_range(0..100) < self.read_pct,
        };
        let s = self.shape;
        let (file, block) = match &mut self.pick {
            Pick::Seq { first, count, next } => {
                let g = *first + *next;
                *next = if *next + 1 == *count { 0 } else { *next + 1 };
                ((g / s.blocks_per_file) as usize, g % s.blocks_per_file)
            }
            // One draw when there is one file (the common case; the generator's cost counts
            // against the fastest engines most).
            Pick::Uniform if s.files == 1 => (0, rng.gen_range(0..s.blocks_per_file)),
            Pick::Uniform => (rng.gen_range(0..s.files), rng.gen_range(0..s.blocks_per_file)),
            Pick::UniformIn { file } => (*file, rng.gen_range(0..s.blocks_per_file)),
            Pick::Zipf { dist, scramble } => {
                // Zipf samples ranks 1..=n as floats; rank 1 is the hottest.
                let rank = (dist.sample(rng) as u64).clamp(1, scramble.n) - 1;
                let g = scramble.apply(rank);
                ((g / s.blocks_per_file) as usize, g % s.blocks_per_file)
            }
            Pick::Append { file, next } => {
                *next += 1;
                (*file, *next - 1)
            }
            Pick::Trace(_) => unreachable!("handled above"),
        };
        Some(Op { read, file, offset: block * s.bs, len: s.bs as usize, at_us: None })
    }
}

/// A fixed pseudo-random permutation of `0..n`: a 4-round Feistel network on the smallest
/// even number of bits covering `n`, with cycle walking to stay below `n` (the domain is at
/// most 4n, so under 4 rounds of walking on average).
pub struct Scramble {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Scramble {
    pub fn new(n: u64, seed: u64) -> Scramble {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let bits = bits + bits % 2;
        let mut k = seed ^ 0x5ca3_b1e5_0000_0000;
        let keys = std::array::from_fn(|_| {
            k = splitmix64(k);
            k
        });
        Scramble { n, half_bits: bits / 2, keys }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let t = l ^ (splitmix64(r ^ k) & mask);
            l = r;
            r = t;
        }
        (l << self.half_bits) | r
    }

    /// The image of `x` (`x < n`).
    pub fn apply(&self, x: u64) -> u64 {
        let mut y = self.round(x);
        while y >= self.n {
            y = self.round(y);
        }
        y
    }
}

/// A fast 64-bit mixer (splitmix64's finaliser on `x + golden`).
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the data set's content for `file` at byte `offset` (a multiple of 8):
/// pseudo-random words, a function of (seed, file, position), so every engine writes the same
/// bytes and a read can be checked. Never zero, so no layer can treat it as a hole.
pub fn fill_content(buf: &mut [u8], seed: u64, file: usize, offset: u64) {
    debug_assert_eq!(offset % 8, 0);
    let key = splitmix64(seed ^ ((file as u64) << 48));
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let v = splitmix64(key ^ (offset / 8 + i as u64)) | 1;
        w.copy_from_slice(&v.to_le_bytes()[..w.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_file_per_thread_keeps_each_thread_in_its_file() {
        let s = shape(3, 50, 4096);
        let mut rng = SmallRng::seed_from_u64(3);
        for t in 0..3 {
            let mut g = OpGen::new(s, Rw::Randwrite, 0, None, t, 3, 1).unwrap().in_file(t);
            let files: std::collections::BTreeSet<usize> =
                (0..200).map(|_| g.next(&mut rng).unwrap().file).collect();
            assert_eq!(files.into_iter().collect::<Vec<_>>(), [t]);
        }
        let mut g = OpGen::new(s, Rw::Randwrite, 0, None, 0, 3, 1).unwrap();
        let files: std::collections::BTreeSet<usize> =
            (0..200).map(|_| g.next(&mut rng).unwrap().file).collect();
        assert_eq!(files.len(), 3, "without it, any file");
    }

    fn shape(files: usize, blocks: u64, bs: u64) -> Shape {
        Shape { files, blocks_per_file: blocks, bs }
    }

    fn check_in_range(g: &mut OpGen, s: Shape, rng: &mut SmallRng) {
        for _ in 0..20_000 {
            let op = g.next(rng).unwrap();
            assert!(op.file < s.files, "{op:?}");
            assert_eq!(op.offset % s.bs, 0, "{op:?}");
            assert!(op.offset + s.bs <= s.blocks_per_file * s.bs, "{op:?}");
        }
    }

    #[test]
    fn offsets_in_range_and_aligned() {
        let mut rng = SmallRng::seed_from_u64(7);
        for s in [shape(1, 1, 4096), shape(3, 1000, 4096), shape(2, 77, 12288), shape(5, 3, 512)] {
            for rw in [Rw::Read, Rw::Write, Rw::Randread, Rw::Randwrite, Rw::Randrw] {
                for zipf in [None, Some(0.0), Some(0.99), Some(1.0), Some(1.2)] {
                    let threads = (s.total_blocks() as usize).min(3);
                    for t in 0..threads {
                        let mut g = OpGen::new(s, rw, 30, zipf, t, threads, 1).unwrap();
                        check_in_range(&mut g, s, &mut rng);
                    }
                }
            }
        }
    }

    #[test]
    fn sequential_threads_partition_and_wrap() {
        let s = shape(2, 5, 4096);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut seen = Vec::new();
        // 10 blocks over 3 threads: slices of 3, 3 and 4 blocks, each walked in order.
        for (t, len) in [3, 3, 4].into_iter().enumerate() {
            let mut g = OpGen::new(s, Rw::Read, 50, None, t, 3, 1).unwrap();
            let ops: Vec<Op> = (0..2 * len).map(|_| g.next(&mut rng).unwrap()).collect();
            assert_eq!(ops[..len], ops[len..], "thread {t} wraps to its own start");
            assert!(ops
                .windows(2)
                .take(len - 1)
                .all(|w| (w[0].file, w[0].offset) < (w[1].file, w[1].offset)));
            seen.extend(ops[..len].iter().map(|o| (o.file, o.offset)));
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 10, "every block covered exactly once");
        assert!(OpGen::new(s, Rw::Read, 50, None, 0, 11, 1).is_err());
    }

    #[test]
    fn randrw_mix() {
        let s = shape(1, 100, 4096);
        let mut rng = SmallRng::seed_from_u64(3);
        for pct in [0, 25, 100] {
            let mut g = OpGen::new(s, Rw::Randrw, pct, None, 0, 1, 1).unwrap();
            let reads = (0..10_000).filter(|_| g.next(&mut rng).unwrap().read).count();
            let want = 100 * pct as usize;
            assert!(reads.abs_diff(want) < 300, "pct {pct}: {reads} reads");
        }
    }

    #[test]
    fn scramble_is_a_permutation() {
        for n in (1..300).chain([1000, 4097]) {
            let s = Scramble::new(n, 42);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = s.apply(x);
                assert!(y < n && !seen[y as usize], "n {n} x {x} y {y}");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn zipf_is_skewed_and_scrambled() {
        let s = shape(1, 10_000, 4096);
        let mut rng = SmallRng::seed_from_u64(5);
        let mut g = OpGen::new(s, Rw::Randread, 50, Some(1.2), 0, 1, 9).unwrap();
        let mut counts = vec![0u32; 10_000];
        for _ in 0..100_000 {
            counts[(g.next(&mut rng).unwrap().offset / 4096) as usize] += 1;
        }
        let hottest = counts.iter().enumerate().max_by_key(|c| c.1).unwrap();
        assert!(*hottest.1 > 10_000, "rank 1 should take a large share");
        assert_eq!(hottest.0 as u64, Scramble::new(10_000, 9).apply(0));
    }

    #[test]
    fn content_is_deterministic_and_nonzero() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill_content(&mut a, 1, 0, 8192);
        fill_content(&mut b[..2048], 1, 0, 8192);
        fill_content(&mut b[2048..], 1, 0, 8192 + 2048);
        assert_eq!(a, b);
        assert!(a.chunks(8).all(|w| w != [0; 8]));
        fill_content(&mut b, 1, 1, 8192);
        assert_ne!(a, b);
    }
}
