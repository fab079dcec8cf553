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
