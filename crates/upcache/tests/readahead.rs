//! Readahead: a sequential reader gets its pages loaded ahead, a random one never does, and
//! readahead racing writers and shrinks never shows stale bytes.

mod common;

use upcache::{Cache, IoKind};

const PS: usize = 4096;

fn cache(root: &std::path::Path, io: IoKind, frames: usize) -> Cache {
    Cache::create(common::config(root, 2, PS, frames).with_io(io)).unwrap()
}

/// Writes `pages` pages, syncs, and reopens the cache so that every page is cold.
fn cold_file(root: &std::path::Path, io: IoKind, frames: usize, pages: usize) -> (Cache, Vec<u8>) {
    let data = common::pattern(11, pages * PS);
    {
        let c = cache(root, io, frames);
        c.create_file("f").unwrap().write_all_at(&data, 0).unwrap();
    }
    (Cache::open(common::config(root, 2, PS, frames).with_io(io)).unwrap(), data)
}

#[test]
fn a_sequential_reader_is_read_ahead_of() {
    for io in IoKind::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (c, data) = cold_file(tmp.path(), io, 1024, 512);
        let f = c.open_file("f").unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        for (i, chunk) in data.chunks(buf.len()).enumerate() {
            let at = (i * buf.len()) as u64;
            f.read_exact_at(&mut buf, at).unwrap();
            assert!(buf[..] == chunk[..], "chunk {i}");
        }
        let s = c.stats();
        // Windows were asked for; how many pages the loader then loaded first depends on who
        // gets to a page first, the reader or the loader (on a loaded machine, the reader).
        assert!(s.readahead_windows > 0, "{io:?}: nothing read ahead: {s:?}");
        // Every page was loaded once, by the reader or ahead of it.
        assert!(s.misses <= 512 + 8, "{s:?}");
    }
}

#[test]
fn random_readers_are_never_read_ahead_of() {
    let tmp = tempfile::tempdir().unwrap();
    let (c, data) = cold_file(tmp.path(), IoKind::Uring, 1024, 512);
    let f = c.open_file("f").unwrap();
    let mut x = 12345u64;
    let mut buf = vec![0u8; 8192];
    for _ in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let off = (x >> 33) % (data.len() - buf.len()) as u64;
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf[..] == data[off as usize..off as usize + buf.len()]);
    }
    assert_eq!(c.stats().readahead_pages, 0);
}

/// Sequential readers stream a file while a writer truncates, regrows and rewrites it:
/// every 512-byte piece read is zeros or one the file held at that place at some point
/// (garbage, a frame read into the wrong page or a load that lost its data would fail
/// this). It does not pin down when: a piece brought back from an older version by a load
/// racing a shrink would pass, which is why the loader claims pages under the range lock.
#[test]
fn readahead_racing_writes_and_shrinks_shows_no_stale_bytes() {
    for io in IoKind::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let pages = 256;
        // Readahead of a sixteenth of the file: past it, the loaders read ahead in windows.
        let c =
            Cache::create(common::config(tmp.path(), 2, PS, 192).with_io(io).with_readahead(16 * PS as u64))
                .unwrap();
        let f = c.create_file("f").unwrap();
        let rounds = 12u64;
        let versions: Vec<Vec<u8>> = (0..rounds).map(|r| common::pattern(100 + r, pages * PS)).collect();
        let versions = &versions;
        f.write_all_at(&versions[0], 0).unwrap();
        c.sync().unwrap();
        std::thread::scope(|s| {
            let w = f.clone();
            s.spawn(move || {
                for version in &versions[1..] {
                    // Mid-page, but on a 512-byte boundary, so no checked piece straddles it.
                    w.set_len(((pages * PS / 3) & !511) as u64).unwrap();
                    w.set_len((pages * PS) as u64).unwrap();
                    w.write_all_at(version, 0).unwrap();
                }
            });
            for t in 0..2usize {
                let r = f.clone();
                s.spawn(move || {
                    let chunk = 4096 + 512 * t;
                    let mut buf = vec![0u8; chunk];
                    for _pass in 0..6 {
                        let mut off = 0usize;
                        while off + chunk <= pages * PS {
                            // Short while the file is shrunk.
                            let n = r.read_at(&mut buf, off as u64).unwrap();
                            // Each 512-byte piece is all zeros (cut by a shrink) or from one
                            // version: a piece from a version that never held these bytes
                            // there would be stale or garbage.
                            for (j, piece) in buf[..n].chunks(512).enumerate() {
                                let at = off + j * 512;
                                let ok = piece.iter().all(|&b| b == 0)
                                    || versions.iter().any(|v| &v[at..at + piece.len()] == piece);
                                assert!(ok, "{io:?}: bytes at {at} are from no version");
                            }
                            off += chunk;
                        }
                    }
                });
            }
        });
        // (No pinned_frames check: the loader may still hold loads in flight.)
        assert!(c.stats().readahead_windows > 0, "the readers were not read ahead of");
    }
}
