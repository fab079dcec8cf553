//! The copy API: records written and read at offsets, as with pread/pwrite, then made
//! durable and read again after the array is reopened.
//!
//!     cargo run --example copy_api [DIR]     (default: a temporary directory)

use upcache::{Cache, Config};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let root = std::env::args().nth(1).map_or_else(|| tmp.path().to_path_buf(), Into::into);
    // Two "SSDs": a directory on each. 32 MiB of page frames.
    let config = Config::new([root.join("ssd0"), root.join("ssd1")], 32 << 20);

    let cache = Cache::open_or_create(config.clone())?;
    let file = match cache.open_file("records") {
        Ok(f) => f,
        Err(_) => cache.create_file("records")?,
    };
    // 10,000 records of 100 bytes, each holding its own number.
    for i in 0..10_000u64 {
        let mut rec = [b' '; 100];
        let text = format!("record {i}");
        rec[..text.len()].copy_from_slice(text.as_bytes());
        file.write_all_at(&rec, i * 100)?;
    }
    file.sync_data()?;
    println!("{}", cache.stats());
    drop(file);
    cache.close()?;

    // Reopened: the records came back from the devices.
    let cache = Cache::open(config)?;
    let file = cache.open_file("records")?;
    let mut rec = [0u8; 100];
    file.read_exact_at(&mut rec, 4_321 * 100)?;
    let text = String::from_utf8_lossy(&rec);
    assert!(text.starts_with("record 4321 "), "{text}");
    println!("read back {:?} of {} bytes", text.trim_end(), file.len());
    Ok(())
}
