//! The Future API under tokio: one task keeps 64 reads and writes in flight over 10,000
//! random 4 KiB blocks, then syncs; reads check they see the block's last write.
//!
//!     cargo run --release --example tokio_async

use std::collections::HashSet;

use futures::stream::{FuturesUnordered, StreamExt};
use upcache::{AsyncIo, Cache, Config, File};

const BLOCKS: u64 = 8192; // a 32 MiB file in an 8 MiB cache: most reads go to the device

/// Writes version `v` to block `b`, or reads it and checks it holds `expect`.
async fn op(aio: &AsyncIo, f: &File, b: u64, write: Option<u8>, expect: u8) -> Result<u64, String> {
    let (r, buf) = match write {
        Some(v) => aio.write(f, b * 4096, vec![v; 4096]).await,
        None => aio.read(f, b * 4096, vec![0; 4096]).await,
    };
    match r {
        Ok(4096) if write.is_some() || buf.iter().all(|&x| x == expect) => Ok(b),
        Ok(4096) => Err(format!("block {b}: read {} for version {expect}", buf[0])),
        Ok(n) => Err(format!("block {b}: {n} bytes")),
        Err(e) => Err(format!("block {b}: {e}")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let cache = Cache::create(Config::new([tmp.path()], 8 << 20))?;
    let file = cache.create_file("blocks")?;
    file.set_len(BLOCKS * 4096)?;
    let aio = cache.async_io(64)?;

    let started = std::time::Instant::now();
    let mut version = vec![0u8; BLOCKS as usize];
    let mut in_flight = FuturesUnordered::new();
    let mut busy = HashSet::new(); // one request per block at a time
    let (mut issued, mut x) = (0u32, 0x9E37_79B9_7F4A_7C15u64);
    while issued < 10_000 || !in_flight.is_empty() {
        while issued < 10_000 && in_flight.len() < 64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x % BLOCKS;
            if !busy.insert(b) {
                continue;
            }
            let write = (x & 1 == 0).then(|| (issued % 250 + 1) as u8);
            if let Some(v) = write {
                version[b as usize] = v;
            }
            in_flight.push(op(&aio, &file, b, write, version[b as usize]));
            issued += 1;
        }
        let b = in_flight.next().await.expect("requests in flight")?;
        busy.remove(&b);
    }
    aio.sync_data(&file).await?;
    println!("10000 random reads and writes, 64 in flight, in {:?}: {}", started.elapsed(), cache.stats());
    Ok(())
}
