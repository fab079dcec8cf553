//! The pin API: pages read and changed where they lie in the cache, without a copy.
//!
//!     cargo run --example pin_api

use upcache::{Cache, Config};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let cache = Cache::create(Config::new([tmp.path()], 16 << 20))?;
    let file = cache.create_file("counters")?;
    let page_size = cache.page_size() as u64;
    file.set_len(16 * page_size)?;

    // Each page holds u32 counters; bump the first counter of every page in place.
    for round in 1..=3u32 {
        for p in 0..16 {
            let mut page = file.pin_mut(p * page_size)?; // the page, locked for this thread
            let n = u32::from_le_bytes(page[..4].try_into()?) + 1;
            page[..4].copy_from_slice(&n.to_le_bytes());
            assert_eq!(n, round);
        } // each guard marks its page dirty when it drops
    }

    // Readers borrow the bytes; many may hold the same page at once.
    let mut total = 0;
    for p in 0..16 {
        let page = file.pin(p * page_size)?;
        total += u32::from_le_bytes(page[..4].try_into()?);
    }
    assert_eq!(total, 16 * 3);
    println!("16 pages bumped 3 times in place: total {total}; {}", cache.stats());
    Ok(())
}
