//! The shared cache (issue 17): one cache for every attached process. Here within one process
//! (two attachments are two clients with their own ids and descriptors) against an in-memory
//! oracle and under threads; `shared_procs.rs` runs it across processes and kills them.

// Builds the shared cache, which `--cfg loom` leaves out.
#![cfg(not(loom))]

use std::os::unix::fs::FileExt;
use std::path::Path;

use proptest::prelude::*;
use upcache::shared::{SharedCache, SharedConfig};
use upcache::ErrorKind;

fn small() -> SharedConfig {
    SharedConfig { memory: 1 << 20, files: 8, clients: 8, ..SharedConfig::default() }
}

fn second(c: &SharedCache) -> SharedCache {
    SharedCache::attach(c.segment_fd().try_clone_to_owned().unwrap()).unwrap()
}

fn os_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn a_write_by_one_client_is_read_by_another_and_reaches_the_file_at_sync() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, b"old contents").unwrap();
    let a = SharedCache::create(&small()).unwrap();
    let b = second(&a);
    let fa = a.open_path(&p, true).unwrap();
    let fb = b.open_path(&p, false).unwrap();
    assert_eq!(fb.len(), 12);
    fa.write_at(b"NEW", 0).unwrap();
    fa.write_at(b"tail", 10_000).unwrap();
    let mut buf = vec![0; 10_004];
    assert_eq!(fb.read_at(&mut buf, 0).unwrap(), 10_004, "the length is shared");
    assert_eq!(&buf[..12], b"NEW contents");
    assert!(buf[12..10_000].iter().all(|&b| b == 0), "a hole reads as zeros");
    assert_eq!(&buf[10_000..], b"tail");
    assert_eq!(os_bytes(&p), b"old contents", "not written back yet");
    fa.sync_data().unwrap();
    assert_eq!(os_bytes(&p), buf, "sync wrote it");
    // A read-only open cannot write.
    assert_eq!(fb.write_at(b"x", 0).unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// A client that stops caching a file (its shim is about to let libc reach it) writes the
/// dirty pages of every client back, and from then on every open of the file, in any client
/// and new ones too, reads and writes the OS file: nothing stale is read, and nothing written
/// without the cache is overwritten later.
#[test]
fn a_bypass_by_one_client_sends_every_client_to_the_os_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let a = SharedCache::create(&small()).unwrap();
    let b = second(&a);
    let fa = a.open_path(&p, true).unwrap();
    let fb = b.open_path(&p, true).unwrap();
    fb.write_at(b"from b", 100).unwrap();
    let mut buf = vec![0; 8192];
    fa.read_at(&mut buf, 0).unwrap(); // every page cached
    assert!(!fa.bypassed() && !fb.bypassed());
    fa.bypass().unwrap();
    assert!(fa.bypassed() && fb.bypassed());
    assert_eq!(&os_bytes(&p)[100..106], b"from b", "b's dirty page was written back");
    // Another program writes the OS file inside the cached length, and appends.
    let os = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    os.write_at(b"OUTSIDE", 0).unwrap();
    os.write_at(b"end", 8192).unwrap();
    assert_eq!(fb.len(), 8195);
    let mut seen = [0u8; 7];
    assert_eq!(fb.read_at(&mut seen, 0).unwrap(), 7);
    assert_eq!(&seen, b"OUTSIDE", "no stale page");
    // Writes, truncates and appends reach the OS file at once.
    fb.write_at(b"B", 1).unwrap();
    assert_eq!(&os_bytes(&p)[..3], b"OBT");
    fb.set_len(4000).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 4000);
    assert_eq!(fa.append(b"tail").unwrap(), (4000, 4));
    fa.sync_data().unwrap();
    // A new open, by a new client, is bypassed too, and the last close writes nothing back.
    let c = second(&a);
    let fc = c.open_path(&p, false).unwrap();
    assert!(fc.bypassed());
    os.write_at(b"again", 0).unwrap();
    let mut seen = [0u8; 5];
    fc.read_at(&mut seen, 0).unwrap();
    assert_eq!(&seen, b"again");
    drop((fa, fb, fc));
    let bytes = os_bytes(&p);
    assert_eq!(bytes.len(), 4004);
    assert_eq!(&bytes[..5], b"again");
    assert_eq!(&bytes[4000..], b"tail");
}

#[test]
fn shrink_then_extend_reads_zeros_and_truncates_the_os_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![7u8; 20_000]).unwrap();
    let c = SharedCache::create(&small()).unwrap();
    let f = c.open_path(&p, true).unwrap();
    let mut buf = vec![0; 20_000];
    f.read_at(&mut buf, 0).unwrap();
    f.write_at(&[9; 100], 5000).unwrap();
    f.set_len(5050).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 5050);
    f.set_len(20_000).unwrap();
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 20_000);
    assert!(buf[..5000].iter().all(|&b| b == 7));
    assert!(buf[5000..5050].iter().all(|&b| b == 9));
    assert!(buf[5050..].iter().all(|&b| b == 0), "past the shrink reads zeros");
    f.sync_all().unwrap();
    assert_eq!(os_bytes(&p), buf);
}

#[test]
fn the_last_close_writes_back_and_a_later_open_finds_pages_warm_or_revalidates() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let c = SharedCache::create(&small()).unwrap();
    let f = c.open_path(&p, true).unwrap();
    f.write_at(&[2; 10], 0).unwrap();
    f.read_at(&mut [0; 8192], 0).unwrap();
    f.close().unwrap();
    assert_eq!(&os_bytes(&p)[..11], &[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]);
    let loads = c.status().stats.read_bytes / 4096;
    let f = c.open_path(&p, false).unwrap();
    let mut buf = vec![0; 8192];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(c.status().stats.read_bytes / 4096, loads, "both pages still cached: no load");
    drop(f);
    // Changed without the cache while nobody had it open: the next open drops the old pages.
    std::fs::File::options().write(true).open(&p).unwrap().write_all_at(&[5; 4], 100).unwrap();
    let f = c.open_path(&p, false).unwrap();
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[98..106], &[1, 1, 5, 5, 5, 5, 1, 1]);
}

/// With a table of 2 entries, 600 files in turn take the same two slots: each reads its own
/// bytes, never a former file's, through 256 and more generations of a slot.
#[test]
fn a_slot_reused_for_another_file_never_shows_the_former_files_pages() {
    let dir = tempfile::tempdir().unwrap();
    let c = SharedCache::create(&SharedConfig {
        memory: 1 << 20,
        files: 2,
        clients: 4,
        ..SharedConfig::default()
    })
    .unwrap();
    for i in 0..600u32 {
        let p = dir.path().join(format!("f{}", i % 3));
        let data: Vec<u8> = (0..9000u32).map(|b| (b.wrapping_mul(7) ^ i) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = c.open_path(&p, true).unwrap();
        let mut buf = vec![0; 9000];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 9000);
        assert!(buf == data, "file {i} read another file's bytes");
        if i % 2 == 0 {
            f.write_at(&[i as u8; 10], 4000).unwrap();
        }
        drop(f);
        std::fs::remove_file(&p).unwrap();
    }
}

/// A forked child may not act under its parent's client id: its copy of the attachment
/// refuses every call (it attaches itself), and dropping it leaves the parent's slot alone.
#[test]
fn a_forked_child_cannot_use_its_parents_attachment() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, b"parent's").unwrap();
    let c = SharedCache::create(&small()).unwrap();
    let f = c.open_path(&p, true).unwrap();
    // SAFETY: the child only calls into the cache, whose refusal touches atomics and allocates
    // an error (glibc's malloc is fork-safe), then leaves with _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let refused = f.read_at(&mut [0u8; 4], 0).is_err() && f.write_at(b"x", 0).is_err();
        std::mem::forget(f);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child used its parent's id");
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8, "the parent still works");
    assert_eq!(&buf, b"parent's");
}

#[test]
fn a_file_another_user_cannot_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("missing");
    let c = SharedCache::create(&small()).unwrap();
    assert_eq!(c.open_path(&p, false).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(c.open_path(dir.path(), false).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn appends_from_two_clients_never_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log");
    std::fs::write(&p, b"").unwrap();
    let a = SharedCache::create(&small()).unwrap();
    let b = second(&a);
    std::thread::scope(|s| {
        for (c, tag) in [(&a, b'a'), (&b, b'b')] {
            let f = c.open_path(&p, true).unwrap();
            s.spawn(move || {
                for i in 0..500u32 {
                    let mut rec = vec![tag, b'0' + (i % 10) as u8];
                    rec.resize(2 + i as usize % 5, b'.');
                    rec.push(b'\n');
                    f.append(&rec).unwrap();
                }
            });
        }
    });
    let f = a.open_path(&p, false).unwrap();
    let mut all = vec![0; f.len() as usize];
    f.read_at(&mut all, 0).unwrap();
    let recs: Vec<&[u8]> = all.split(|&b| b == b'\n').filter(|r| !r.is_empty()).collect();
    assert_eq!(recs.len(), 1000);
    for tag in [b'a', b'b'] {
        let mine: Vec<_> = recs.iter().filter(|r| r[0] == tag).collect();
        assert_eq!(mine.len(), 500, "each append whole, none lost");
        for (i, r) in mine.iter().enumerate() {
            assert_eq!(r[1], b'0' + (i % 10) as u8, "in order");
            assert_eq!(r.len(), 2 + i % 5);
        }
    }
}

/// Records of 1000 bytes whose last 8 bytes are a checksum of the rest: threads of two clients
/// overwrite them at random in a cache of 256 frames (so pages are evicted and written back
/// all the time), others read them; no read ever sees a torn record.
#[test]
fn threads_of_two_clients_never_see_a_torn_record_under_eviction() {
    const REC: usize = 1000;
    const RECS: u64 = 4000; // ~4 MiB: four times the cache
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("recs");
    let a = SharedCache::create(&small()).unwrap();
    let b = second(&a);
    let init = a.open_path(&p.clone(), true);
    assert!(init.is_err(), "no such file yet");
    std::fs::write(&p, b"").unwrap();
    let f0 = a.open_path(&p, true).unwrap();
    for r in 0..RECS {
        f0.write_at(&record(r, 0), r * REC as u64).unwrap();
    }
    fn record(r: u64, gen: u64) -> Vec<u8> {
        let mut v: Vec<u8> = (0..REC - 8).map(|i| (r * 31 + gen * 7 + i as u64) as u8).collect();
        let sum: u64 = v.iter().map(|&b| b as u64).sum::<u64>() ^ (r << 32);
        v.extend_from_slice(&sum.to_le_bytes());
        v
    }
    fn check(r: u64, v: &[u8]) {
        let sum: u64 = v[..REC - 8].iter().map(|&b| b as u64).sum::<u64>() ^ (r << 32);
        assert_eq!(u64::from_le_bytes(v[REC - 8..].try_into().unwrap()), sum, "record {r} torn");
    }
    std::thread::scope(|s| {
        for (t, c) in [&a, &b, &a, &b].into_iter().enumerate() {
            let f = c.open_path(&p, true).unwrap();
            s.spawn(move || {
                let mut x = t as u64 * 7919 + 1;
                let mut buf = vec![0; REC];
                for i in 0..3000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = x % RECS;
                    if t % 2 == 0 && i % 3 == 0 {
                        f.write_at(&record(r, i), r * REC as u64).unwrap();
                    } else {
                        assert_eq!(f.read_at(&mut buf, r * REC as u64).unwrap(), REC);
                        check(r, &buf);
                    }
                }
            });
        }
    });
    f0.sync_data().unwrap();
    let disk = os_bytes(&p);
    for r in 0..RECS {
        check(r, &disk[(r as usize) * REC..][..REC]);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write { client: bool, at: u64, len: usize, byte: u8 },
    Read { client: bool, at: u64, len: usize },
    SetLen { client: bool, len: u64 },
    Sync { client: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..400_000u64, 1..20_000usize, any::<u8>())
            .prop_map(|(client, at, len, byte)| Op::Write { client, at, len, byte }),
        4 => (any::<bool>(), 0..420_000u64, 1..30_000usize).prop_map(|(client, at, len)| Op::Read { client, at, len }),
        1 => (any::<bool>(), 0..420_000u64).prop_map(|(client, len)| Op::SetLen { client, len }),
        1 => any::<bool>().prop_map(|client| Op::Sync { client }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Two clients on one file in a cache of 256 frames (less than the file) agree with a
    /// byte vector, and the OS file equals it after a sync.
    #[test]
    fn two_clients_agree_with_an_oracle(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let a = SharedCache::create(&small()).unwrap();
        let b = second(&a);
        let fa = a.open_path(&p, true).unwrap();
        let fb = b.open_path(&p, true).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            let f = |c: bool| if c { &fb } else { &fa };
            match op {
                Op::Write { client, at, len, byte } => {
                    let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                    prop_assert_eq!(f(client).write_at(&data, at).unwrap(), len);
                    let end = at as usize + len;
                    if model.len() < end { model.resize(end, 0); }
                    model[at as usize..end].copy_from_slice(&data);
                }
                Op::Read { client, at, len } => {
                    let mut buf = vec![0xEE; len];
                    let n = f(client).read_at(&mut buf, at).unwrap();
                    let want = model.get(at as usize..).map_or(&[][..], |m| &m[..m.len().min(len)]);
                    prop_assert_eq!(&buf[..n], want);
                }
                Op::SetLen { client, len } => {
                    f(client).set_len(len).unwrap();
                    model.resize(len as usize, 0);
                }
                Op::Sync { client } => {
                    f(client).sync_data().unwrap();
                    prop_assert_eq!(os_bytes(&p), model.clone());
                }
            }
            prop_assert_eq!(fa.len(), model.len() as u64);
            prop_assert_eq!(fb.len(), model.len() as u64);
        }
        fa.sync_data().unwrap();
        prop_assert_eq!(os_bytes(&p), model);
    }
}

/// A miss loads the read's missing pages in one run, within the length and never over a page
/// already cached; a read that continues where its open's last one ended has pages after it
/// read ahead (by the process's loaders: `shared/ahead.rs` tests how far), each page once.
/// Counted as the in-process engine counts them: a cold read's own pages are misses, the
/// pages loaded past it (its miss's run, the loaders' windows) are read ahead, no miss, and
/// every page looked up counts once: those read ahead count hits when they are read.
#[test]
fn a_read_counts_its_own_pages_as_misses_and_its_readahead_apart() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let data: Vec<u8> = (0..512u32 << 12).map(|i| (i % 253) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let cache =
        SharedCache::create(&SharedConfig { memory: 4 << 20, readahead: 16 << 12, ..small() }).unwrap();
    let f = cache.open_path(&p, false).unwrap();
    let (before, own) = (cache.status(), cache.own_counts());
    // A new open's first read, from 0, is sequential: its miss loads the readahead too.
    let mut buf = vec![0u8; 2 << 12];
    f.read_at(&mut buf, 0).unwrap();
    cache.wait_for_readahead();
    let (s, counts) = (cache.status(), cache.own_counts());
    assert_eq!((counts.0 - own.0, counts.1 - own.1), (0, 2), "two misses, no hit: {s:?}");
    assert_eq!(s.stats.misses - before.stats.misses, 2);
    let ahead = s.stats.readahead_pages - before.stats.readahead_pages;
    assert!(
        ahead >= 14 && ahead == s.stats.read_bytes / 4096 - before.stats.read_bytes / 4096 - 2,
        "{ahead} read ahead: {s:?}"
    );
    // The frames' words (32 bytes each) and the rest of the fixed metadata; not the frames.
    assert!(s.stats.metadata_bytes >= 1024 * 32 && s.stats.metadata_bytes < 4 << 20, "{s:?}");
    // Read now: 14 hits, no miss.
    let mut rest = vec![0u8; 14 << 12];
    f.read_at(&mut rest, 2 << 12).unwrap();
    assert!(rest == data[2 << 12..16 << 12]);
    let later = cache.own_counts();
    assert_eq!((later.0 - counts.0, later.1 - counts.1), (14, 0));
    // A read not where its open's last one ended (far past the windows read ahead) reads no
    // more than its own pages, all misses.
    let g = cache.open_path(&p, false).unwrap();
    let mut own_only = vec![0u8; 8 << 12];
    g.read_at(&mut own_only, 400 << 12).unwrap();
    assert!(own_only == data[400 << 12..408 << 12]);
    let (end, last) = (cache.status(), cache.own_counts());
    assert_eq!((last.0 - later.0, last.1 - later.1), (0, 8));
    assert_eq!(end.stats.readahead_pages, s.stats.readahead_pages, "nothing read ahead");
}

#[test]
fn misses_load_runs_and_sequential_reads_load_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let data: Vec<u8> = (0..(600 << 12) + 100).map(|i| (i % 251) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let cache = SharedCache::create(&SharedConfig { memory: 4 << 20, ..small() }).unwrap();
    let f = cache.open_path(&p, false).unwrap();
    let loads = || cache.status().stats.read_bytes / 4096;
    let mut buf = vec![0u8; 64 << 10];
    // Not where the last read ended (0, for a new open): only the read's own 16 pages.
    f.read_at(&mut buf, 40 << 12).unwrap();
    assert_eq!(&buf[..], &data[40 << 12..][..64 << 10]);
    assert_eq!(loads(), 16);
    // Page 41 cached: the run of a read from 38 stops before it.
    f.read_at(&mut buf[..3 << 12], 38 << 12).unwrap();
    assert_eq!(&buf[..3 << 12], &data[38 << 12..][..3 << 12]);
    assert_eq!(loads(), 16 + 2);
    // From 100, 1000 bytes at a time: the first begins no stream (one page); the reads after
    // it continue it, and pages past them are loaded ahead.
    let mut small_buf = [0u8; 1000];
    for i in 0..400u64 {
        let at = (100 << 12) + i * 1000;
        f.read_at(&mut small_buf, at).unwrap();
        assert_eq!(&small_buf[..], &data[at as usize..][..1000]);
        if i == 0 {
            assert_eq!(loads(), 18 + 1);
        }
    }
    // Closed, its windows are loaded or taken back: the counts stand still.
    f.close().unwrap();
    let ahead = loads() - (18 + 98);
    assert!(ahead > 0 && ahead <= 600 - 198, "{ahead} pages read ahead: {:?}", cache.status());
    let f = cache.open_path(&p, false).unwrap();
    // The end: a run stops at the length.
    let mut tail = vec![0xEEu8; 8192];
    let before = loads();
    let n = f.read_at(&mut tail, 599 << 12).unwrap();
    assert_eq!(&tail[..n], &data[599 << 12..]);
    assert_eq!((n, loads()), (4096 + 100, before + 2));
    let n = f.read_at(&mut tail, (599 << 12) + 4196).unwrap();
    assert_eq!((n, loads()), (0, before + 2), "at the end: nothing read or loaded");
}

#[test]
fn the_status_counts_hits_of_every_client_misses_and_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    // 2 MiB of file through a 1 MiB cache (256 frames).
    std::fs::write(&p, vec![7u8; 2 << 20]).unwrap();
    let a = SharedCache::create(&small()).unwrap();
    let b = second(&a);
    let fa = a.open_path(&p, false).unwrap();
    let fb = b.open_path(&p, false).unwrap();
    let mut page = [0u8; 4096];
    // No read continues where the last one of its open ended, so none reads ahead.
    fa.read_at(&mut page, 4096).unwrap();
    let first = a.status();
    assert_eq!((first.stats.misses, first.stats.read_bytes / 4096, first.stats.hits), (1, 1, 0), "{first:?}");
    // 64 hits from each client, each on its own lines.
    for f in [&fa, &fb] {
        for _ in 0..64 {
            f.read_at(&mut page, 4096).unwrap();
        }
    }
    let hot = b.status();
    assert_eq!(
        (hot.stats.hits, hot.stats.misses),
        (128, 1),
        "both clients' hits, in either's status: {hot:?}"
    );
    // Every page once, 5 pages apart: the cache fills, then each miss evicts one.
    for i in 0..512u64 {
        fa.read_at(&mut page, (1 + i * 5) % 512 * 4096).unwrap();
        assert_eq!(page[4095], 7);
    }
    let s = a.status();
    assert_eq!(s.stats.misses, 1 + 511, "page 1 was cached: {s:?}");
    assert!(
        s.stats.evictions >= 511 - 256,
        "{} evictions for 511 new pages in 256 frames",
        s.stats.evictions
    );
    assert!(s.stats.evictions <= s.stats.misses, "{s:?}");
}

/// Each technique switch of `SharedConfig` changes what it should, and nothing a program
/// sees: the same bytes are read and written with it on and off.
#[test]
fn the_technique_switches_change_the_cache_s_requests_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..256 << 12).map(|i| (i % 253) as u8).collect();
    let run = |config: SharedConfig| {
        let p = dir.path().join("f");
        std::fs::write(&p, &data).unwrap();
        let cache = SharedCache::create(&SharedConfig { memory: 4 << 20, ..config }).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let mut buf = vec![0u8; 64 << 12];
        // At 0, where a new open's stream starts: one page and its window (16 pages) in one
        // run, and four windows after it by the loaders.
        f.read_at(&mut buf[..4096], 0).unwrap();
        assert_eq!(&buf[..4096], &data[..4096]);
        cache.wait_for_readahead();
        let ahead = cache.status();
        // Not where the last read ended: no readahead, the 64 pages loaded as one run.
        f.read_at(&mut buf, 100 << 12).unwrap();
        assert_eq!(&buf[..], &data[100 << 12..][..64 << 12]);
        let missed = cache.status();
        // Two runs of 32 adjacent dirty pages written back, at once through io_uring.
        f.write_at(&vec![9u8; 32 << 12], 180 << 12).unwrap();
        f.write_at(&vec![9u8; 32 << 12], 220 << 12).unwrap();
        f.sync_data().unwrap();
        let mut want = data.clone();
        want[180 << 12..212 << 12].fill(9);
        want[220 << 12..252 << 12].fill(9);
        assert_eq!(os_bytes(&p), want);
        let end = cache.status();
        let requests = missed.stats.read_ios - ahead.stats.read_ios;
        // The tree index holds the file's 144 cached pages in leaves of 64 and a root above.
        let tree = end.index_nodes.0 >= 3 && end.index_nodes.1 >= 1;
        assert!(tree || end.index_nodes == (0, 0), "{:?}", end.index_nodes);
        // The counters as every report reads them: a leaf of 256 bytes, an inner node of 512,
        // each with a state word of 24.
        let (leaves, inners) = end.index_nodes;
        assert_eq!(end.stats.index_bytes, leaves * (256 + 24) + inners * (512 + 24));
        (
            requests,
            ahead.stats.read_bytes / 4096,
            (end.stats.writeback_ios, end.write_back_batches),
            end.stats.writeback_bytes / 4096,
            tree,
        )
    };
    let on = SharedConfig { readahead: 16 << 12, ..small() };
    // The sync's two runs at once through io_uring.
    assert_eq!(run(on.clone()), (1, 80, (2, 1), 64, true), "all on");
    // Bundling off: the same requests, one at a time (no batch through io_uring).
    assert_eq!(
        run(SharedConfig { bundling: false, ..on.clone() }),
        (1, 80, (2, 0), 64, true),
        "bundling off"
    );
    assert_eq!(run(SharedConfig { readahead: 0, ..on.clone() }), (1, 1, (2, 1), 64, true), "readahead off");
    // A request per page: 64 loads, and 64 runs of a page written back, 32 at a time.
    assert_eq!(
        run(SharedConfig { run_merging: false, ..on.clone() }),
        (64, 80, (64, 2), 64, true),
        "run merging off"
    );
    let hash = SharedConfig { index: upcache::IndexKind::Sharded, ..on.clone() };
    assert_eq!(run(hash), (1, 80, (2, 1), 64, false), "the hash index");
    // Loads past the kernel's cache change nothing a program sees.
    assert_eq!(
        run(SharedConfig { direct_loads: false, ..on.clone() }),
        (1, 80, (2, 1), 64, true),
        "direct loads off"
    );
    // One pwritev after another.
    let psync = SharedConfig { io: upcache::IoKind::Psync, ..on.clone() };
    assert_eq!(run(psync), (1, 80, (2, 0), 64, true), "psync write-back");
    // SAFS's sets: no tree, the same requests (the placement itself: `shared/pages.rs`).
    let sets = SharedConfig { index: upcache::IndexKind::SetAssoc, ..on.clone() };
    assert_eq!(run(sets), (1, 80, (2, 1), 64, false), "the set-associative index");
    // The kernel's XArray: the same trees, changed under a lock per file.
    let locked = SharedConfig { index: upcache::IndexKind::Locked, ..on.clone() };
    assert_eq!(run(locked), (1, 80, (2, 1), 64, true), "the locked tree");
    for set_ways in [0, 65] {
        let sets = SharedConfig { index: upcache::IndexKind::SetAssoc, set_ways, ..small() };
        assert_eq!(SharedCache::create(&sets).err().map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
    }
    let too_far = SharedConfig { readahead: upcache::shared::MAX_SHARED_READAHEAD + 4096, ..small() };
    assert_eq!(SharedCache::create(&too_far).err().map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
}

/// A writer past the foreground ratio writes back scattered pages (no two adjacent, so no
/// runs to merge) in batches through io_uring, a device round trip for many, not one after
/// another; with `IoKind::Psync` one `pwritev` each. Either way every byte reaches the file.
#[test]
fn a_writer_s_dflush_of_scattered_pages_goes_in_batches_through_io_uring() {
    for io in [upcache::IoKind::Uring, upcache::IoKind::Psync] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        // 1024 frames: the writer writes back its own past 204 dirty.
        let config = SharedConfig {
            memory: 4 << 20,
            dirty_ratios: (0.1, 0.2),
            flush: upcache::FlushKind::Direct,
            io,
            ..small()
        };
        let cache = SharedCache::create(&config).unwrap();
        let f = cache.open_path(&p, true).unwrap();
        let pages = 700u64;
        for i in 0..pages {
            // Every other page, in an order that jumps about.
            let at = (i * 263 % pages) * 2;
            f.write_at(&[(at % 251) as u8 + 1; 4096], at * 4096).unwrap();
        }
        let s = cache.status();
        assert!(s.writer_write_backs > 0, "{io:?}: {s:?}");
        assert!(
            s.stats.dflush_pages > 0 && s.stats.dflush_pages <= s.stats.writeback_bytes / 4096,
            "the writers' pages: {s:?}"
        );
        match io {
            upcache::IoKind::Uring => assert!(s.write_back_batches > 0, "no batch: {s:?}"),
            upcache::IoKind::Psync => assert_eq!(s.write_back_batches, 0, "{s:?}"),
        }
        f.sync_all().unwrap();
        drop(f);
        let disk = os_bytes(&p);
        assert_eq!(disk.len() as u64, (2 * pages - 1) * 4096);
        for (at, page) in disk.chunks(4096).enumerate() {
            let want = if at % 2 == 0 { (at % 251) as u8 + 1 } else { 0 };
            assert!(page.iter().all(|&b| b == want), "page {at} with {io:?}");
        }
    }
}
