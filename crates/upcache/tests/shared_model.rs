//! The shared cache against an oracle, from several processes at once (issue 34). Each of
//! `PROCS` processes, attached to one segment far smaller than the data, runs a random
//! sequence of operations on a file of its own (writes, reads, reads in place through pins,
//! truncations and extensions, syncs, evictions, closes and reopens) and on its blocks of one file that all of them write
//! (blocks of 5,000 bytes, so neighbours of different processes share pages), checking every
//! read against its own oracle. The parent replays each sequence into an oracle of its own and
//! checks every file at the end, through the cache and on disk. The seed is printed, and
//! `UPCACHE_SHARED_MODEL_SEED` repeats it; the soak (ignored, run by `.ci/run` in release)
//! runs at least 1,000,000 operations in all.

// Builds the shared cache, which `--cfg loom` leaves out.
#![cfg(not(loom))]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use upcache::shared::{SharedCache, SharedConfig, SharedFile};
use upcache::IndexKind;

const PROCS: usize = 3;
/// A block of the file every process writes; block b is process b % PROCS's.
const BLOCK: u64 = 5000;
const BLOCKS: u64 = 60;
/// The largest length a process's own file reaches.
const MAX_OWN: u64 = 200_000;

const FD_ENV: &str = "UPCACHE_TEST_SHARED_FD";
const ARGS_ENV: &str = "UPCACHE_TEST_ARGS";

/// 128 frames for about 900 KB of data: eviction, write-back of dirty victims and reloads
/// all the time.
fn config(index: IndexKind) -> SharedConfig {
    SharedConfig { memory: 512 << 10, files: 16, clients: 16, index, ..SharedConfig::default() }
}

/// The other side of the eviction and throttling switches: GClock, dirty victims taken
/// where the hand finds them unless their device collects (gc-aware), writers that would
/// pause for a service (none here: they write back themselves); and the frames partitioned
/// between two NUMA nodes of a CPU each (a described topology).
fn switched() -> SharedConfig {
    SharedConfig {
        numa: "0;1".parse().unwrap(),
        policy: upcache::PolicyKind::GClock,
        clean_first: upcache::CleanFirst::WhileGc,
        flush: upcache::FlushKind::Background,
        ..config(IndexKind::Radix)
    }
}

/// The set-associative index with sets of 4 frames: a miss has little choice of victim.
fn set_associative() -> SharedConfig {
    SharedConfig { set_ways: 4, ..config(IndexKind::SetAssoc) }
}

/// S3-FIFO's queues in the segment, dirty victims taken where the queues give them (plain),
/// and SIEVE's likewise: the queues' lock taken by every process's misses; frames from the
/// two-layer allocator's lists, which every process's misses and freed frames share (with no
/// service here, no background reclaim: `shared/pool.rs`'s tests have it).
fn queued(policy: upcache::PolicyKind) -> SharedConfig {
    SharedConfig {
        policy,
        clean_first: upcache::CleanFirst::Never,
        alloc: upcache::AllocKind::TwoLayer,
        ..config(IndexKind::Radix)
    }
}

/// Sampled LRU within sets of 4 frames (every frame of the set looked at).
fn ranked_sets() -> SharedConfig {
    SharedConfig { policy: upcache::PolicyKind::Lru, ..set_associative() }
}

/// SplitMix64: the sequences must be the same in the child that runs them and the parent that
/// replays them.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Own,
    Shared,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write {
        to: Target,
        offset: u64,
        len: u64,
        fill: u64,
        /// Page by page through `SharedFile::pin_mut` (within the length only).
        in_place: bool,
    },
    Read {
        from: Target,
        offset: u64,
        len: u64,
    },
    /// A read through pins, page by page (`SharedFile::pin`).
    Pin {
        from: Target,
        offset: u64,
        len: u64,
    },
    SetLen(u64),
    Sync(Target),
    Evict {
        of: Target,
        offset: u64,
        len: u64,
    },
    Reopen,
}

/// Process `proc`'s `n` operations from `seed`.
fn ops(seed: u64, proc: usize, n: usize) -> Vec<Op> {
    let mut rng = Rng(seed ^ (proc as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut own_len = 0u64;
    // Where this process's last write to its own file ended: half its own writes go on from
    // there, a sequential stream (write-behind, `SharedFile::write_behind`).
    let mut own_end = 0u64;
    (0..n)
        .map(|_| {
            let shared = rng.below(2) == 0;
            // A range in one of this process's blocks, or in (and a little past) its own file.
            let range = |rng: &mut Rng, most: u64| {
                if shared {
                    let block = proc as u64 + PROCS as u64 * rng.below(BLOCKS / PROCS as u64);
                    let at = rng.below(BLOCK);
                    (block * BLOCK + at, 1 + rng.below((BLOCK - at).min(most)))
                } else {
                    let at = rng.below((own_len + 10_000).min(MAX_OWN));
                    (at, 1 + rng.below((MAX_OWN - at).min(most)))
                }
            };
            let to = if shared { Target::Shared } else { Target::Own };
            let op = match rng.below(100) {
                0..=39 => {
                    let (mut offset, mut len) = range(&mut rng, 20_000);
                    if !shared && rng.below(2) == 0 && own_end < MAX_OWN {
                        (offset, len) = (own_end, len.min(MAX_OWN - own_end));
                    }
                    let fill = rng.next();
                    let in_place = rng.below(4) == 0 && (shared || offset + len <= own_len);
                    Op::Write { to, offset, len, fill, in_place }
                }
                40..=69 => {
                    let (offset, len) = range(&mut rng, 20_000);
                    Op::Read { from: to, offset, len }
                }
                70..=79 => {
                    let (offset, len) = range(&mut rng, 20_000);
                    Op::Pin { from: to, offset, len }
                }
                80..=85 => Op::SetLen(rng.below(MAX_OWN)),
                86..=90 => Op::Sync(to),
                91..=96 => {
                    let (offset, len) = range(&mut rng, 60_000);
                    Op::Evict { of: to, offset, len }
                }
                _ => Op::Reopen,
            };
            match op {
                Op::Write { to: Target::Own, offset, len, .. } => {
                    own_len = own_len.max(offset + len);
                    own_end = offset + len;
                }
                Op::SetLen(len) => own_len = len,
                _ => {}
            }
            op
        })
        .collect()
}

/// The bytes a write puts down.
fn bytes(fill: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| (fill >> ((i % 8) * 8)) as u8 ^ (i / 8) as u8).collect()
}

/// One process's view of what the files hold: all of its own file, and its blocks of the
/// shared one (the rest is other processes').
struct Oracle {
    own: Vec<u8>,
    shared: Vec<u8>,
}

impl Oracle {
    fn new() -> Oracle {
        Oracle { own: Vec::new(), shared: vec![0; (BLOCKS * BLOCK) as usize] }
    }

    fn file(&mut self, t: Target) -> &mut Vec<u8> {
        match t {
            Target::Own => &mut self.own,
            Target::Shared => &mut self.shared,
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write { to, offset, len, fill, .. } => {
                let f = self.file(to);
                let end = (offset + len) as usize;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[offset as usize..end].copy_from_slice(&bytes(fill, len));
            }
            Op::SetLen(len) => self.own.resize(len as usize, 0),
            _ => {}
        }
    }

    /// What a read of `len` bytes at `offset` returns.
    fn read(&mut self, t: Target, offset: u64, len: u64) -> Vec<u8> {
        let f = self.file(t);
        let start = (offset as usize).min(f.len());
        f[start..((offset + len) as usize).min(f.len())].to_vec()
    }
}

/// As `read_all`, through pins: each page held while its bytes are copied out.
fn read_pinned(f: &SharedFile, offset: u64, len: u64) -> Vec<u8> {
    let (mut got, mut pos, end) = (Vec::new(), offset, offset + len);
    while pos < end {
        let page = match f.pin(pos) {
            Ok(page) => page,
            Err(e) if e.kind() == upcache::ErrorKind::InvalidInput => break, // the end of file
            Err(e) => panic!("pin at {pos}: {e}"),
        };
        let at = (pos - page.offset()) as usize;
        let take = ((end - pos) as usize).min(page.len() - at);
        got.extend_from_slice(&page[at..at + take]);
        pos += take as u64;
    }
    got
}

/// Writes `data` at `offset` (within the length) page by page in place, each page held for
/// writing (`SharedFile::pin_mut`) while its part is copied in.
fn write_in_place(f: &SharedFile, offset: u64, data: &[u8]) -> upcache::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let pos = offset + done as u64;
        let mut page = f.pin_mut(pos)?;
        let at = (pos - page.offset()) as usize;
        let take = (data.len() - done).min(page.len() - at);
        page[at..at + take].copy_from_slice(&data[done..done + take]);
        done += take;
    }
    Ok(())
}

/// Reads up to `len` bytes at `offset`, to the end of the file.
fn read_all(f: &SharedFile, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0; len as usize];
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64).unwrap() {
            0 => break,
            n => done += n,
        }
    }
    buf.truncate(done);
    buf
}

fn own_path(dir: &Path, proc: usize) -> PathBuf {
    dir.join(format!("own-{proc}"))
}

/// One process's run: `proc seed n dir`.
#[test]
#[ignore = "a process of the shared model test, run by it"]
fn model_child_entry() {
    let a: Vec<String> = std::env::var(ARGS_ENV).unwrap().split(' ').map(String::from).collect();
    let (proc, seed, n, dir): (usize, u64, usize, PathBuf) =
        (a[0].parse().unwrap(), a[1].parse().unwrap(), a[2].parse().unwrap(), PathBuf::from(&a[3]));
    let fd: i32 = std::env::var(FD_ENV).unwrap().parse().unwrap();
    // SAFETY: the parent passed this descriptor for us to own.
    let cache = SharedCache::attach(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap();
    let own = own_path(&dir, proc);
    let mut own_file = cache.open_path(&own, true).unwrap();
    let shared = cache.open_path(&dir.join("shared"), true).unwrap();
    let mut oracle = Oracle::new();
    for (i, op) in ops(seed, proc, n).iter().enumerate() {
        let say = |what: &str| format!("process {proc}, seed {seed}, operation {i}: {op:?}: {what}");
        let file = |t: Target| if t == Target::Own { &own_file } else { &shared };
        match *op {
            Op::Write { to, offset, len, fill, in_place: false } => file(to)
                .write_all_at(&bytes(fill, len), offset)
                .unwrap_or_else(|e| panic!("{}", say(&e.to_string()))),
            Op::Write { to, offset, len, fill, in_place: true } => {
                write_in_place(file(to), offset, &bytes(fill, len))
                    .unwrap_or_else(|e| panic!("{}", say(&e.to_string())))
            }
            Op::Read { from, offset, len } | Op::Pin { from, offset, len } => {
                let got = match op {
                    Op::Pin { .. } => read_pinned(file(from), offset, len),
                    _ => read_all(file(from), offset, len),
                };
                let want = oracle.read(from, offset, len);
                if got != want {
                    let first = got.iter().zip(&want).position(|(a, b)| a != b);
                    panic!(
                        "{}",
                        say(&format!(
                            "read {} bytes, want {}, first difference at {first:?}",
                            got.len(),
                            want.len()
                        ))
                    );
                }
            }
            Op::SetLen(len) => own_file.set_len(len).unwrap_or_else(|e| panic!("{}", say(&e.to_string()))),
            Op::Sync(t) => file(t).sync_data().unwrap_or_else(|e| panic!("{}", say(&e.to_string()))),
            Op::Evict { of, offset, len } => {
                file(of).evict(offset, len).unwrap_or_else(|e| panic!("{}", say(&e.to_string())))
            }
            Op::Reopen => {
                own_file.close().unwrap_or_else(|e| panic!("{}", say(&e.to_string())));
                own_file = cache.open_path(&own, true).unwrap();
            }
        }
        oracle.apply(op);
        assert_eq!(own_file.len(), oracle.own.len() as u64, "{}", say("own file's length"));
    }
    own_file.sync_data().unwrap();
    shared.sync_data().unwrap();
    own_file.close().unwrap();
    shared.close().unwrap();
    println!("done");
}

/// `PROCS` processes of `n` operations each from `seed` on a cache made with `config`, then
/// every file checked.
fn run(seed: u64, n: usize, config: SharedConfig) {
    println!(
        "shared model: seed {seed}, {PROCS} processes of {n} operations, index {}, policy {}+{}, \
         flush {} (UPCACHE_SHARED_MODEL_SEED={seed} repeats them)",
        config.index.name(),
        config.policy.name(),
        config.clean_first.name(),
        config.flush.name(),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shared"), vec![0u8; (BLOCKS * BLOCK) as usize]).unwrap();
    for proc in 0..PROCS {
        std::fs::write(own_path(dir.path(), proc), b"").unwrap();
    }
    let cache = SharedCache::create(&config).unwrap();
    let children: Vec<_> = (0..PROCS)
        .map(|proc| {
            let inherited = cache.segment_fd().try_clone_to_owned().unwrap();
            // SAFETY: fcntl on our own descriptor: clears close-on-exec so the child inherits it.
            assert_eq!(unsafe { libc::fcntl(inherited.as_raw_fd(), libc::F_SETFD, 0) }, 0);
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "model_child_entry", "--ignored", "--nocapture", "--quiet"])
                .env(FD_ENV, inherited.as_raw_fd().to_string())
                .env(ARGS_ENV, format!("{proc} {seed} {n} {}", dir.path().display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            drop(inherited);
            child
        })
        .collect();
    for (proc, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();

        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && text.contains("done"),
            "process {proc} (UPCACHE_SHARED_MODEL_SEED={seed} repeats it): {}\n{text}",
            out.status
        );
    }
    // Every process is gone: the page index is sound and agrees with the frames.
    cache.check_index().unwrap_or_else(|e| panic!("the page index after the run (seed {seed}): {e}"));
    // The processes' own files' streams were written behind (the oracle checks their bytes).
    assert!(config.streams && cache.status().behind_pages > 0, "no write-behind ran (seed {seed})");
    // What every process wrote: its own file, and its blocks of the shared one.
    let oracles: Vec<Oracle> = (0..PROCS)
        .map(|proc| {
            let mut o = Oracle::new();
            for op in ops(seed, proc, n) {
                o.apply(&op);
            }
            o
        })
        .collect();
    let mut shared = vec![0u8; (BLOCKS * BLOCK) as usize];
    for b in 0..BLOCKS as usize {
        let range = b * BLOCK as usize..(b + 1) * BLOCK as usize;
        shared[range.clone()].copy_from_slice(&oracles[b % PROCS].shared[range]);
    }
    let mut want: Vec<(PathBuf, &[u8])> = vec![(dir.path().join("shared"), &shared)];
    for (proc, o) in oracles.iter().enumerate() {
        want.push((own_path(dir.path(), proc), &o.own));
    }
    for (path, bytes) in want {
        let through = cache.open_path(&path, false).unwrap();
        assert!(
            read_all(&through, 0, MAX_OWN.max(BLOCKS * BLOCK) + 1) == bytes,
            "{} through the cache (seed {seed})",
            path.display()
        );
        through.close().unwrap();
        assert!(std::fs::read(&path).unwrap() == bytes, "{} on disk (seed {seed})", path.display());
    }
}

fn seed() -> u64 {
    std::env::var("UPCACHE_SHARED_MODEL_SEED").map_or_else(
        |_| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
        |v| v.parse().expect("UPCACHE_SHARED_MODEL_SEED"),
    )
}

#[test]
fn processes_sharing_the_cache_match_the_oracle() {
    run(seed(), 3000, config(IndexKind::Radix));
}

/// The same with the hash index, the tree's off switch.
#[test]
fn processes_sharing_a_cache_with_the_hash_index_match_the_oracle() {
    run(seed(), 3000, config(IndexKind::Sharded));
}

/// The same with the locked tree (each file's tree changed under its lock, the kernel's
/// XArray) on a cache whose frames were made resident at its making.
#[test]
fn processes_sharing_a_cache_with_the_locked_tree_match_the_oracle() {
    run(seed(), 3000, SharedConfig { prefault: true, ..config(IndexKind::Locked) });
}

/// The same with the set-associative index, small sets.
#[test]
fn processes_sharing_a_set_associative_cache_match_the_oracle() {
    run(seed(), 3000, set_associative());
}

/// The same with GClock, gc-aware eviction, pausing writers and two NUMA nodes.
#[test]
fn processes_sharing_a_cache_with_its_other_eviction_and_throttling_match_the_oracle() {
    run(seed(), 3000, switched());
}

/// The same with S3-FIFO's and SIEVE's queues, dirty victims written back where found.
#[test]
fn processes_sharing_a_cache_with_queued_policies_match_the_oracle() {
    run(seed(), 1500, queued(upcache::PolicyKind::S3Fifo));
    run(seed() ^ 3, 1500, queued(upcache::PolicyKind::Sieve));
}

/// The same with sampled LFU cache-wide, and sampled LRU within small sets.
#[test]
fn processes_sharing_a_cache_with_ranked_policies_match_the_oracle() {
    run(seed(), 1500, SharedConfig { policy: upcache::PolicyKind::Lfu, ..config(IndexKind::Radix) });
    run(seed() ^ 4, 1500, ranked_sets());
}

/// The same on pages of 16 KiB (the tree index, 32 frames: the default's bytes) and of 64 KiB
/// (sets of 4 frames, 16 frames): reads, writes, pins and cuts within and across larger pages.
#[test]
fn processes_sharing_a_cache_of_larger_pages_match_the_oracle() {
    let larger = |page_size: usize, frames: u64, base: SharedConfig| SharedConfig {
        page_size,
        memory: frames * page_size as u64,
        ..base
    };
    let two_layer = SharedConfig { alloc: upcache::AllocKind::TwoLayer, ..config(IndexKind::Radix) };
    run(seed(), 1500, larger(16 << 10, 32, two_layer));
    run(seed() ^ 5, 1500, larger(64 << 10, 16, set_associative()));
}

/// At least `UPCACHE_SOAK_OPS` (default 1,000,000) operations in all: a third on the
/// defaults, a sixth each with the other eviction and throttling, small sets, S3-FIFO's
/// queues and LRU within sets.
#[test]
#[ignore = "the long soak: .ci/run runs it once, in release"]
fn soak_processes_sharing_the_cache_match_the_oracle() {
    let total: usize =
        std::env::var("UPCACHE_SOAK_OPS").map_or(1_000_000, |v| v.parse().expect("UPCACHE_SOAK_OPS"));
    let seed = seed();
    let sixth = total / 6;
    run(seed, (total - 4 * sixth).div_ceil(PROCS), config(IndexKind::Radix));
    run(seed ^ 1, sixth.div_ceil(PROCS), switched());
    run(seed ^ 2, sixth.div_ceil(PROCS), set_associative());
    run(seed ^ 3, sixth.div_ceil(PROCS), queued(upcache::PolicyKind::S3Fifo));
    run(seed ^ 4, sixth.div_ceil(PROCS), ranked_sets());
}
