//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use upcache::Config;

/// `n` device directories under `root`.
pub fn dirs(root: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| root.join(format!("dev{i}"))).collect()
}

/// A config of `n` devices under `root` with `frames` frames of `page_size`.
pub fn config(root: &Path, n: usize, page_size: usize, frames: usize) -> Config {
    Config::new(dirs(root, n), (frames * page_size) as u64)
        .with_page_size(page_size)
        .with_stripe_unit(2 * page_size as u64)
}

/// Deterministic bytes for a test pattern.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Checksummed records in fixed slots of a few files, a deterministic random workload of
/// record writes and syncs over them, and the oracle of what must survive a crash or power
/// cut after a given op: every slot not written since its file's last completed sync holds
/// exactly the record that sync covered.
pub mod records {
    use upcache::{Cache, File};

    pub const FILES: u64 = 3;
    pub const SLOTS: u64 = 48;
    /// Not a divisor of the page size, so records straddle pages and write-back can tear them.
    pub const SLOT: usize = 1500;

    /// Record `seq` of (file, slot), filling one slot.
    pub fn record(file: u64, slot: u64, seq: u64) -> Vec<u8> {
        let mut r = super::pattern(seq * 1_000_003 + file * SLOTS + slot, SLOT);
        r[..8].copy_from_slice(&seq.to_le_bytes());
        r[8..16].copy_from_slice(&(file * SLOTS + slot).to_le_bytes());
        r
    }

    /// One op: write a record to a slot, sync a file, or cut a file to its first `slots`.
    #[derive(Debug, Clone, Copy)]
    pub enum Op {
        Write { file: u64, slot: u64, seq: u64 },
        Sync { file: u64 },
        Truncate { file: u64, slots: u64 },
    }

    /// The `n`-th op of the workload seeded by `seed` (pure, for the oracle).
    pub fn op(seed: u64, n: u64) -> Op {
        let mut x = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n.wrapping_mul(0xbf58_476d_1ce4_e5b9)) | 1;
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        let file = x % FILES;
        if (x >> 8).is_multiple_of(6) {
            Op::Sync { file }
        } else if (x >> 8) % 25 == 1 {
            Op::Truncate { file, slots: (x >> 16) % SLOTS }
        } else {
            Op::Write { file, slot: (x >> 16) % SLOTS, seq: n + 1 }
        }
    }

    /// Creates the files and makes their creation durable.
    pub fn create_files(cache: &Cache) -> Vec<File> {
        let files = (0..FILES).map(|f| cache.create_file(&format!("r{f}")).unwrap()).collect();
        cache.sync().unwrap();
        files
    }

    pub fn run_op(files: &[File], op: Op) -> upcache::Result<()> {
        match op {
            Op::Write { file, slot, seq } => {
                files[file as usize].write_all_at(&record(file, slot, seq), slot * SLOT as u64)
            }
            Op::Sync { file } => files[file as usize].sync_data(),
            Op::Truncate { file, slots } => files[file as usize].set_len(slots * SLOT as u64),
        }
    }

    /// What must hold after ops `0..=done` completed.
    pub struct Oracle {
        /// Each slot's record at its file's last completed sync (0: none).
        at_sync: Vec<Vec<u64>>,
        /// Slots written after that sync, whose content is free.
        free: Vec<Vec<bool>>,
    }

    impl Oracle {
        /// After ops `0..=done` completed and up to `in_flight` later ops may have started.
        pub fn after(seed: u64, done: u64, in_flight: u64) -> Oracle {
            let mut current = vec![vec![0u64; SLOTS as usize]; FILES as usize];
            let mut at_sync = current.clone();
            let mut free = vec![vec![false; SLOTS as usize]; FILES as usize];
            for n in 0..=done {
                match op(seed, n) {
                    Op::Write { file, slot, seq } => {
                        current[file as usize][slot as usize] = seq;
                        free[file as usize][slot as usize] = true;
                    }
                    Op::Sync { file } => {
                        at_sync[file as usize] = current[file as usize].clone();
                        free[file as usize].iter_mut().for_each(|w| *w = false);
                    }
                    Op::Truncate { file, slots } => {
                        for s in slots as usize..SLOTS as usize {
                            current[file as usize][s] = 0;
                            free[file as usize][s] = true;
                        }
                    }
                }
            }
            for n in done + 1..=done + in_flight {
                match op(seed, n) {
                    Op::Write { file, slot, .. } => free[file as usize][slot as usize] = true,
                    Op::Truncate { file, slots } => {
                        free[file as usize][slots as usize..].iter_mut().for_each(|w| *w = true)
                    }
                    Op::Sync { .. } => {}
                }
            }
            Oracle { at_sync, free }
        }

        /// Checks every constrained slot of the reopened `cache`; returns how many. Panics
        /// with `what` on a mismatch.
        pub fn check(&self, cache: &Cache, what: &str) -> u64 {
            let mut checked = 0;
            for file in 0..FILES {
                let f =
                    cache.open_file(&format!("r{file}")).unwrap_or_else(|e| panic!("{what}: r{file}: {e}"));
                for slot in 0..SLOTS {
                    if self.free[file as usize][slot as usize] {
                        continue;
                    }
                    let want = self.at_sync[file as usize][slot as usize];
                    let off = slot * SLOT as u64;
                    let mut got = vec![0u8; SLOT];
                    if off < f.len() {
                        let n = f.read_at(&mut got, off).unwrap();
                        assert!(n == SLOT || off + n as u64 == f.len(), "{what}: short read");
                    }
                    let expect = if want == 0 { vec![0u8; SLOT] } else { record(file, slot, want) };
                    assert!(
                        got == expect,
                        "{what}: file r{file} slot {slot} should hold record {want} from its last sync"
                    );
                    checked += 1;
                }
            }
            checked
        }
    }
}
