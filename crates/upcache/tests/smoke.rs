//! End-to-end basics: create, write, read, reopen.

mod common;

use upcache::{Cache, ErrorKind};

#[test]
fn write_read_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::pattern(1, 1_000_000);
    {
        let cache = Cache::create(common::config(tmp.path(), 3, 4096, 32)).unwrap();
        let f = cache.create_file("a").unwrap();
        f.write_all_at(&data, 12345).unwrap();
        assert_eq!(f.len(), 12345 + data.len() as u64);
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 12345).unwrap();
        assert!(back == data);
        let mut head = vec![1u8; 12345];
        f.read_exact_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|&b| b == 0));
        let s = cache.stats();
        assert!(s.evictions > 0, "32 frames cannot hold 1 MB: {s:?}");
    }
    let cache = Cache::open(common::config(tmp.path(), 3, 4096, 32)).unwrap();
    assert_eq!(cache.list(), vec!["a".to_string()]);
    let f = cache.open_file("a").unwrap();
    assert_eq!(f.len(), 12345 + data.len() as u64);
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 12345).unwrap();
    assert!(back == data);
    let mut past = [0u8; 10];
    assert_eq!(f.read_at(&mut past, f.len() - 3).unwrap(), 3);
    assert_eq!(f.read_at(&mut past, f.len()).unwrap(), 0);
    assert_eq!(f.read_at(&mut past, f.len() + 100).unwrap(), 0);
    assert_eq!(cache.open_file("nope").unwrap_err().kind(), ErrorKind::NotFound);
}

#[test]
fn shrink_then_extend_reads_zeros() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::create(common::config(tmp.path(), 2, 4096, 16)).unwrap();
    let f = cache.create_file("a").unwrap();
    f.write_all_at(&[7u8; 20000], 0).unwrap();
    f.set_len(5000).unwrap();
    f.set_len(20000).unwrap();
    let mut back = vec![1u8; 20000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..5000].iter().all(|&b| b == 7));
    assert!(back[5000..].iter().all(|&b| b == 0), "bytes past a shrink must read as zero");
    f.set_len(5000).unwrap();
    f.write_all_at(&[9u8; 10], 15000).unwrap();
    f.read_exact_at(&mut back[..15010], 0).unwrap();
    assert!(back[5000..15000].iter().all(|&b| b == 0));
}
