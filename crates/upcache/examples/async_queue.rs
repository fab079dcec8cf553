//! The asynchronous API: 10,000 random 4 KiB reads with 64 in flight from one thread, each
//! completion checked against what was written.
//!
//!     cargo run --release --example async_queue

use upcache::{Cache, Config};

const BLOCK: u64 = 4096;
const BLOCKS: u64 = 4096; // a 16 MiB file

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    // A cache smaller than the file, so reads miss and go to the device.
    let cache = Cache::create(Config::new([tmp.path()], 4 << 20))?;
    let file = cache.create_file("blocks")?;
    for b in 0..BLOCKS {
        file.write_all_at(&vec![(b % 251) as u8; BLOCK as usize], b * BLOCK)?;
    }
    file.sync_data()?;

    let mut queue = cache.queue(64)?;
    let mut done = Vec::new();
    let (mut sent, mut checked) = (0u64, 0u64);
    let mut x = 0x9E37_79B9_7F4A_7C15u64; // xorshift: random blocks without a dependency
    while checked < 10_000 {
        while sent < 10_000 && queue.in_flight() < queue.depth() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x % BLOCKS;
            queue.read(&file, b * BLOCK, vec![0; BLOCK as usize], b)?; // the tag is the block
            sent += 1;
        }
        done.clear();
        queue.wait(1, &mut done);
        for c in &done {
            assert_eq!(c.result.as_ref().ok(), Some(&(BLOCK as usize)));
            assert!(c.buf.iter().all(|&v| v == (c.tag % 251) as u8), "block {} read wrong", c.tag);
            checked += 1;
        }
    }
    println!("10000 random reads, 64 in flight: {}", cache.stats());
    Ok(())
}
