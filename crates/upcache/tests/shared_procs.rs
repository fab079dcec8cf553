//! The shared cache across processes (issue 17): processes attached through the service see
//! each other's unsynced writes; processes killed with SIGKILL at random points never wedge
//! the others nor lose what they synced; another user cannot attach.

// Builds the shared cache, which `--cfg loom` leaves out.
#![cfg(not(loom))]

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use upcache::shared::serve::{self, ServeOptions};
use upcache::shared::{SharedCache, SharedConfig};

const FD_ENV: &str = "UPCACHE_TEST_SHARED_FD";
const ARGS_ENV: &str = "UPCACHE_TEST_ARGS";

fn config() -> SharedConfig {
    SharedConfig { memory: 1 << 20, files: 16, clients: 16, ..SharedConfig::default() }
}

/// This test binary running ignored test `entry` as a child, inheriting `cache`'s segment.
fn child(cache: &SharedCache, entry: &str, args: &str) -> (Command, OwnedFd) {
    let inherited = cache.segment_fd().try_clone_to_owned().unwrap();
    // SAFETY: fcntl on our own descriptor: clears close-on-exec so the child inherits it.
    assert_eq!(unsafe { libc::fcntl(inherited.as_raw_fd(), libc::F_SETFD, 0) }, 0);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", entry, "--ignored", "--nocapture", "--quiet"])
        .env(FD_ENV, inherited.as_raw_fd().to_string())
        .env(ARGS_ENV, args);
    (cmd, inherited)
}

fn inherited() -> SharedCache {
    let fd: i32 = std::env::var(FD_ENV).expect("run by the parent test").parse().unwrap();
    // SAFETY: the parent passed this descriptor for us to own.
    SharedCache::attach(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap()
}

fn args() -> Vec<String> {
    std::env::var(ARGS_ENV).unwrap().split(' ').map(String::from).collect()
}

const REC: usize = 600; // records straddle pages
const PER_REGION: u64 = 200;

fn record(r: u64, gen: u64) -> Vec<u8> {
    let mut v: Vec<u8> =
        (0..REC - 16).map(|i| (r.wrapping_mul(131) ^ gen.wrapping_mul(17) ^ i as u64) as u8).collect();
    let sum: u64 = v.iter().map(|&b| b as u64).sum::<u64>() ^ (r << 32);
    v.extend_from_slice(&gen.to_le_bytes());
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// The record's generation if it is whole, None if torn or never written.
fn whole(r: u64, v: &[u8]) -> Option<u64> {
    let sum: u64 = v[..REC - 16].iter().map(|&b| b as u64).sum::<u64>() ^ (r << 32);
    let gen = u64::from_le_bytes(v[REC - 16..REC - 8].try_into().unwrap());
    (u64::from_le_bytes(v[REC - 8..].try_into().unwrap()) == sum
        && v[..REC - 16] == record(r, gen)[..REC - 16])
        .then_some(gen)
}

/// A worker: `survivor <region> <stopfile>` overwrites the records of its region and checks
/// every survivor record it reads, until the stop file exists; `victim <region>` writes its
/// region's records once each, syncing every 5 and saying so, until it is killed. Both also
/// use a second file of 16 pages (`<pinned>`): each survivor write there too, and a victim
/// holds one of its pages pinned throughout, another after each write, so the survivors'
/// writes wait for its pins, and for its death. (Not a page of the records: a pin holder
/// must not write the file, as an extending write waits for every writer of it.)
#[test]
#[ignore = "a worker process of the kill test, run by it"]
fn worker_child_entry() {
    let a = args();
    let cache = inherited();
    let f = cache.open_path(Path::new(&a[3]), true).unwrap();
    let region: u64 = a[1].parse().unwrap();
    let base = region * PER_REGION;
    let mut x = std::process::id() as u64 | 1;
    let g = cache.open_path(Path::new(&a[4]), a[0] == "survivor").unwrap();
    let mut buf = vec![0; REC];
    let mut _pinned = None;
    for i in 0u64.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if a[0] == "survivor" {
            let r = base + x % PER_REGION;
            f.write_at(&record(r, i), r * REC as u64).unwrap();
            g.write_at(&[i as u8; 64], (x % 16) * 4096 + 64 * region).unwrap();
            // Read a record of either survivor (regions 0 and 1): whole, always; and one of the
            // victims' region, to meet the frames they died holding.
            let r = x % (2 * PER_REGION);
            let n = f.read_at(&mut buf, r * REC as u64).unwrap();
            buf[n..].fill(0); // past the end

            assert!(buf.iter().all(|&b| b == 0) || whole(r, &buf).is_some(), "survivor record {r} torn");
            let v = 2 * PER_REGION + x % (100 * PER_REGION);
            f.read_at(&mut buf, v * REC as u64).unwrap();
            if i % 50 == 0 && Path::new(&a[2]).exists() {
                f.sync_data().unwrap();
                return;
            }
        } else {
            if i == PER_REGION {
                // Written all; wait to be killed.
                let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
                return;
            }
            f.write_at(&record(base + i, region), (base + i) * REC as u64).unwrap();
            if i % 3 == 2 {
                // The record before again, the same bytes, in place (`pin_mut`): a kill may
                // land while this holds the page's frame and range slot.
                let (r, data) = (base + i - 1, record(base + i - 1, region));
                let mut done = 0;
                while done < data.len() {
                    let pos = r * REC as u64 + done as u64;
                    let mut page = f.pin_mut(pos).unwrap();
                    let at = (pos - page.offset()) as usize;
                    let take = (data.len() - done).min(page.len() - at);
                    page[at..at + take].copy_from_slice(&data[done..done + take]);
                    done += take;
                }
            }
            _pinned = None;
            _pinned = Some(g.pin((x % 16) * 4096).unwrap());
            if i % 5 == 4 {
                f.sync_data().unwrap();
                println!("synced {i}");
            }
        }
    }
}

/// Two survivors run while 100 victims, one after another, are killed with SIGKILL at a random
/// point after their first syncs (holding a page pinned that the survivors write; some while
/// they write a record again in place, `pin_mut`): the survivors finish, never read a torn record of each
/// other, every record a victim synced is on disk, and nothing stays locked or attached.
#[test]
fn killed_processes_never_wedge_the_others_nor_lose_what_they_synced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records");
    std::fs::write(&file, b"").unwrap();
    let pinned = dir.path().join("pinned");
    std::fs::write(&pinned, vec![0; 16 * 4096]).unwrap();
    let stop = dir.path().join("stop");
    let cache = SharedCache::create(&config()).unwrap();
    let fargs = |role: &str, region: u64| {
        format!("{role} {region} {} {} {}", stop.display(), file.display(), pinned.display())
    };
    let mut survivors: Vec<_> = (0..2)
        .map(|s| {
            let (mut cmd, fd) = child(&cache, "worker_child_entry", &fargs("survivor", s));
            let c = cmd.spawn().unwrap();
            drop(fd);
            c
        })
        .collect();
    let mut synced = Vec::new();
    let mut seed = 0x9e37_79b9_u64;
    for round in 0..100u64 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let after = 1 + (seed >> 33) % 8;
        let (mut cmd, fd) = child(&cache, "worker_child_entry", &fargs("victim", 2 + round));
        let mut v = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        drop(fd);
        let mut out = std::io::BufReader::new(v.stdout.take().unwrap());
        let mut last = None;
        let mut line = String::new();
        let mut seen = 0;
        while seen < after {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Some(n) = line.trim().strip_prefix("synced ") {
                last = Some(n.parse::<u64>().unwrap());
                seen += 1;
            }
        }
        v.kill().unwrap();
        // Lines it wrote before it died count as synced too.
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut rest);
        for l in rest.lines() {
            if let Some(n) = l.strip_prefix("synced ") {
                last = Some(n.parse().unwrap());
            }
        }
        v.wait().unwrap();
        synced.push(last);
    }
    std::fs::write(&stop, b"").unwrap();
    for mut s in survivors.drain(..) {
        assert!(s.wait().unwrap().success(), "a survivor failed");
    }
    cache.repair_dead();
    let st = cache.status();
    assert_eq!(st.clients, [std::process::id()], "every dead client reaped");
    assert_eq!(st.locked, 0, "no frame left locked");
    // The page index is whole after the kills: every tree sound, each entry a frame at home.
    cache.check_index().unwrap();
    // And it leaks no more than a node a kill: a tree of the one file (about 3,000 pages, 47
    // leaves of 64 under one root) and what 100 kills at any instruction may have left.
    assert!(st.index_nodes.0 <= 47 + 100 && st.index_nodes.1 <= 2 + 100, "index nodes {:?}", st.index_nodes);
    println!("frames repaired after kills: {}, index nodes {:?}", st.repairs, st.index_nodes);
    let f = cache.open_path(&file, true).unwrap();
    f.sync_data().unwrap();
    let disk = std::fs::read(&file).unwrap();
    let rec = |r: u64| disk.get(r as usize * REC..(r as usize + 1) * REC);
    for r in 0..2 * PER_REGION {
        if let Some(v) = rec(r) {
            assert!(v.iter().all(|&b| b == 0) || whole(r, v).is_some(), "survivor record {r} torn on disk");
        }
    }
    for (round, last) in synced.iter().enumerate() {
        let base = (2 + round as u64) * PER_REGION;
        for i in 0..=last.unwrap_or(0) {
            if last.is_none() {
                break;
            }
            let v =
                rec(base + i).unwrap_or_else(|| panic!("victim {round}'s synced record {i} is past the end"));
            assert_eq!(whole(base + i, v), Some(2 + round as u64), "victim {round}'s synced record {i} lost");
        }
    }
    assert!(synced.iter().all(|s| s.is_some()), "every victim synced before it was killed");
}

/// `connect` through a running service: the second process sees the first's unsynced writes.
#[test]
#[ignore = "the second process of the service test, run by it"]
fn service_child_entry() {
    let a = args();
    let cache = serve::connect(Path::new(&a[0])).unwrap();
    let f = cache.open_path(Path::new(&a[1]), true).unwrap();
    let mut buf = [0u8; 5];
    assert_eq!(f.read_at(&mut buf, 4090).unwrap(), 5);
    assert_eq!(&buf, b"hello", "the parent's unsynced write");
    f.write_at(b"world", 9000).unwrap();
}

fn serve_in_thread(dir: &Path) -> (PathBuf, std::thread::JoinHandle<bool>) {
    let socket = dir.join("run/cache.sock");
    let t = serve_at(&socket, config(), Duration::from_millis(200));
    (socket, t)
}

/// 1024 frames with dirty ratios `ratios`, whose service writes back only when asked: its own
/// pass and the dirty expiry an hour away.
fn asked_only(ratios: (f64, f64)) -> SharedConfig {
    let hour = Duration::from_secs(3600);
    SharedConfig {
        memory: 4 << 20,
        dirty_ratios: ratios,
        flush_interval: hour,
        dirty_expire: hour,
        ..config()
    }
}

/// A service on `socket` in a thread of ours, listening once this returns; it returns
/// whether it served, once idle for `idle`.
fn serve_at(socket: &Path, config: SharedConfig, idle: Duration) -> std::thread::JoinHandle<bool> {
    let opts = ServeOptions { socket: socket.to_path_buf(), config, idle };
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || serve::serve(&opts, |_| tx.send(()).unwrap()).unwrap());
    rx.recv().unwrap();
    t
}

#[test]
fn processes_attached_through_the_service_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, service) = serve_in_thread(dir.path());
    let mode = std::fs::metadata(&socket).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    let file = dir.path().join("data");
    std::fs::write(&file, vec![1u8; 100]).unwrap();
    let cache = serve::connect(&socket).unwrap();
    let f = cache.open_path(&file, true).unwrap();
    f.write_at(b"hello", 4090).unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "service_child_entry", "--ignored", "--nocapture", "--quiet"])
        .env(ARGS_ENV, format!("{} {}", socket.display(), file.display()))
        .status()
        .unwrap();
    assert!(status.success());
    let mut buf = [0u8; 5];
    f.read_at(&mut buf, 9000).unwrap();
    assert_eq!(&buf, b"world", "the child's write, before any sync");
    let status = serve::status(&socket).unwrap();
    assert!(status.contains("clients 2:"), "the service and us:\n{status}");
    drop(f);
    drop(cache);
    assert!(service.join().unwrap(), "the service exits once idle");
    assert!(!socket.exists());
    let disk = std::fs::read(&file).unwrap();
    assert_eq!(&disk[4090..4095], b"hello");
    assert_eq!(&disk[9000..9005], b"world", "the last close wrote back");
}

/// A writer past the background dirty ratio has the service write back at once, as
/// the kernel's writers wake its flusher: with the service's own pass an hour away and the
/// foreground ratio far off, nothing else writes the pages back while the writer keeps going.
#[test]
fn a_writer_past_the_background_ratio_has_the_service_write_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cache.sock");
    // 1024 frames: past 102 dirty the service is asked, past 921 the writer writes back. No
    // streams: past half the background ratio a sequential writer's runs are written behind
    // by its own loaders (`SharedFile::write_behind`), which is not the service's write-back
    // (and could come before the ratio, which made this test fail now and then).
    let config = SharedConfig { streams: false, ..asked_only((0.1, 0.9)) };
    let service = serve_at(&socket, config, Duration::from_millis(200));
    let file = dir.path().join("data");
    std::fs::write(&file, b"").unwrap();
    let cache = serve::connect(&socket).unwrap();
    let f = cache.open_path(&file, true).unwrap();
    let page = vec![7u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut written = 0;
    // Each write past the ratio kicks the service (once per 10 ms); it takes its time.
    while cache.written_back_bytes() == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing written back after 60 s");
        if written < 300 {
            f.write_at(&page, written * 4096).unwrap();
            written += 1;
        } else {
            std::thread::yield_now();
        }
    }
    assert!(written > 102, "written back after {written} pages, before the ratio");
    for at in written..300 {
        f.write_at(&page, at * 4096).unwrap();
    }
    drop(f);
    drop(cache);
    assert!(service.join().unwrap());
    assert_eq!(std::fs::read(&file).unwrap(), vec![7u8; 300 * 4096]);
}

/// A service leaving takes its own socket file, never a newer service's at the same path:
/// a benchmark removes its directory between runs and starts the next run's service there
/// while the last one's is still waiting out its idle time. (Before, the old service removed
/// the path at exit, and the next process to connect found no socket.)
#[test]
fn a_service_leaving_leaves_a_newer_service_s_socket_at_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cache.sock");
    let old = serve_at(&socket, config(), Duration::from_secs(1));
    std::fs::remove_dir_all(socket.parent().unwrap()).unwrap();
    let new = serve_at(&socket, config(), Duration::from_millis(200));
    let cache = serve::connect(&socket).unwrap();
    assert!(old.join().unwrap(), "the old service exits once idle");
    assert!(socket.exists(), "the old service removed the new one's socket");
    let again = serve::connect(&socket).unwrap();
    assert_ne!(again.client_id(), cache.client_id());
    drop((again, cache));
    assert!(new.join().unwrap());
    assert!(!socket.exists(), "the new service's own socket goes with it");
}

/// Past the foreground ratio a dflush writer writes its own file back and never pauses; a
/// writer with `FlushKind::Background` pauses for the service's write-back instead and never
/// writes back itself (the kernel's way), with the service's pass an hour away. Either way
/// every byte reaches the file.
#[test]
fn past_the_foreground_ratio_dflush_writes_back_and_background_pauses_for_the_service() {
    for flush in [upcache::FlushKind::Direct, upcache::FlushKind::Background] {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/cache.sock");
        // 1024 frames: the service is asked past 102 dirty, the writer acts past 204.
        let config = SharedConfig { flush, ..asked_only((0.1, 0.2)) };
        let service = serve_at(&socket, config, Duration::from_millis(200));
        let file = dir.path().join("data");
        std::fs::write(&file, b"").unwrap();
        let cache = serve::connect(&socket).unwrap();
        let f = cache.open_path(&file, true).unwrap();
        for at in 0..800u64 {
            f.write_at(&[at as u8; 4096], at * 4096).unwrap();
        }
        let s = cache.status();
        match flush {
            upcache::FlushKind::Direct => {
                assert!(s.writer_write_backs > 0 && s.writer_pauses == 0, "dflush: {s:?}")
            }
            upcache::FlushKind::Background => {
                assert!(s.writer_pauses > 0 && s.writer_write_backs == 0, "background: {s:?}");
                assert_eq!(s.stats.dflush_pages, 0, "no writer wrote back: {s:?}")
            }
        }
        drop(f);
        drop(cache);
        assert!(service.join().unwrap());
        let disk = std::fs::read(&file).unwrap();
        assert_eq!(disk.len(), 800 * 4096);
        for (at, page) in disk.chunks(4096).enumerate() {
            assert_eq!(page, &[at as u8; 4096][..], "page {at} with {}", flush.name());
        }
    }
}

/// Takes two client slots (two attachments), writes a page through one without syncing, says
/// so, and waits to be killed.
#[test]
#[ignore = "a process of the full-client-table test, run by it"]
fn slot_filler_child_entry() {
    let a = args();
    let first = inherited();
    let second = SharedCache::attach(first.segment_fd().try_clone_to_owned().unwrap()).unwrap();
    let f = first.open_path(Path::new(&a[0]), true).unwrap();
    let g = second.open_path(Path::new(&a[0]), true).unwrap();
    f.write_at(&[b'x'; 4096], 0).unwrap();
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    drop((f, g, first, second));
}

/// A process attaching to a cache whose every client slot is taken, all but its own by a
/// process killed without detaching (no service to reap them), takes a dead one's slot
/// instead of failing: the dead client's opens are uncounted, its unsynced page is still
/// there, and the index is sound. (Before, it failed with Busy, and a service adopting such a
/// cache refused to start.)
#[test]
fn a_process_takes_a_dead_client_s_slot_when_every_slot_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, b"").unwrap();
    let cache = SharedCache::create(&SharedConfig { clients: 3, ..config() }).unwrap();
    let (mut cmd, _inherited) = child(&cache, "slot_filler_child_entry", &file.display().to_string());
    let mut filler = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    // The test harness's own lines first.
    let said =
        BufReader::new(filler.stdout.take().unwrap()).lines().map_while(Result::ok).any(|l| l == "ready");
    assert!(said, "the filler did not get ready");
    filler.kill().unwrap();
    filler.wait().unwrap();
    let again = SharedCache::attach(cache.segment_fd().try_clone_to_owned().unwrap())
        .expect("a dead client's slot taken");
    let f = again.open_path(&file, true).unwrap();
    let mut page = vec![0u8; 4096];
    assert_eq!(f.read_at(&mut page, 0).unwrap(), 4096);
    assert_eq!(page, vec![b'x'; 4096], "the dead writer's unsynced page");
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), vec![b'x'; 4096]);
    drop(f);
    assert_eq!(again.status().clients.len(), 2, "the other dead client reaped: {:?}", again.status());
    cache.check_index().unwrap();
}

/// Fills the first MiB of the file with 0xAB, then truncates it to a page and a bit, over and
/// over, saying each round, until it is killed.
#[test]
#[ignore = "the truncating process of the killed-truncate test, run by it"]
fn truncator_entry() {
    let a = args();
    let cache = inherited();
    let f = cache.open_path(Path::new(&a[0]), true).unwrap();
    let fill = vec![0xABu8; 1 << 20];
    for round in 0u64.. {
        f.write_at(&fill, 0).unwrap();
        f.set_len(4096 + 100 + round % 4000).unwrap();
        println!("round {round}");
    }
}

/// A process killed at 30 random points while it truncates: whoever takes the file's lock next
/// finishes the cut, so an extension afterwards reads zeros past the length it found, through
/// the cache and on disk.
#[test]
fn a_truncate_killed_half_way_is_finished_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut");
    std::fs::write(&file, b"").unwrap();
    let cache = SharedCache::create(&SharedConfig {
        memory: 8 << 20,
        files: 4,
        clients: 8,
        ..SharedConfig::default()
    })
    .unwrap();
    for round in 0..30u64 {
        let (mut cmd, fd) = child(&cache, "truncator_entry", &file.display().to_string());
        let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
        drop(fd);
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        for _ in 0..(1 + round % 5) {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the truncator ended");
        }
        // A random point in its next round (a spin, to place the kill, not to wait for anything).
        let until = std::time::Instant::now() + Duration::from_micros((round * 7919) % 3000);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        c.kill().unwrap();
        c.wait().unwrap();
        cache.repair_dead();
        let f = cache.open_path(&file, true).unwrap();
        f.write_at(b"w", 0).unwrap(); // takes the file's lock: finishes a cut left half-way
        let len = f.len();
        f.set_len(1 << 20).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 1 << 20);
        let past = buf[len as usize..].iter().position(|&b| b != 0);
        assert_eq!(past, None, "round {round}: old bytes past the length {len} through the cache");
        f.sync_data().unwrap();
        let disk = std::fs::read(&file).unwrap();
        assert!(disk[len as usize..].iter().all(|&b| b == 0), "round {round}: old bytes past {len} on disk");
        f.set_len(0).unwrap();
    }
}

/// Writes records `region * PER_REGION + i`, syncing every 5 and saying so, then says
/// "done" and detaches; says "error" and ends at the first call that fails.
#[test]
#[ignore = "a writer of the service-kill test, run by it"]
fn steady_writer_entry() {
    let a = args();
    let cache = serve::connect_or_start(Path::new(&a[0]), &config(), Duration::from_millis(200)).unwrap();
    let f = cache.open_path(Path::new(&a[1]), true).unwrap();
    println!("attached");
    let base: u64 = a[2].parse::<u64>().unwrap() * PER_REGION;
    for i in 0..PER_REGION {
        let r = base + i;
        let done = f.write_at(&record(r, 7), r * REC as u64).and_then(|_| {
            if i % 5 == 4 {
                f.sync_data()
            } else {
                Ok(())
            }
        });
        match done {
            Ok(()) if i % 5 == 4 => println!("synced {i}"),
            Ok(()) => {}
            Err(e) => {
                println!("error: {e}");
                return;
            }
        }
    }
    match f.close() {
        Ok(()) => println!("done"),
        Err(e) => println!("error: {e}"),
    }
}

/// Attaches and stays attached until its stdin closes.
#[test]
#[ignore = "the process that stays attached in the service-kill test, run by it"]
fn attached_entry() {
    let a = args();
    let _cache = serve::connect_or_start(Path::new(&a[0]), &config(), Duration::from_millis(200)).unwrap();
    println!("attached");
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
}

/// The service is killed with SIGKILL at 20 points while two processes write and sync through
/// it: neither sees an error (an attached process starts a service in its place, which takes
/// over the same cache), and every record either wrote, synced or not, is on disk once they
/// are done.
#[test]
fn a_killed_service_is_replaced_without_errors_or_loss() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cache.sock");
    let file = dir.path().join("records");
    std::fs::write(&file, b"").unwrap();
    let spawn = |entry: &str, args: String| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", entry, "--ignored", "--nocapture", "--quiet"])
            .env(ARGS_ENV, args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let lines_of = |c: &mut std::process::Child| std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    // Attached all along: the cache outlives every round's service.
    let mut stays = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "attached_entry", "--ignored", "--nocapture", "--quiet"])
        .env(ARGS_ENV, socket.display().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stays_out = lines_of(&mut stays);
    while line.trim() != "attached" {
        line.clear();
        assert!(stays_out.read_line(&mut line).unwrap() > 0, "the attached process ended");
    }
    let mut kills = 0;
    for round in 0..20u64 {
        let mut writers: Vec<_> = (0..2)
            .map(|w| {
                let mut c = spawn(
                    "steady_writer_entry",
                    format!("{} {} {}", socket.display(), file.display(), round * 2 + w),
                );
                let out = lines_of(&mut c);
                (c, out)
            })
            .collect();
        for (_, out) in writers.iter_mut() {
            line.clear();
            while line.trim() != "attached" {
                line.clear();
                assert!(out.read_line(&mut line).unwrap() > 0, "a writer ended before it attached");
            }
        }
        // Kill after the first writer's k-th sync, k from 1 to 6.
        let k = 1 + (round * 7 + 3) % 6;
        let mut seen = 0;
        while seen < k {
            line.clear();
            assert!(writers[0].1.read_line(&mut line).unwrap() > 0, "round {round}: the writer ended");
            assert!(!line.starts_with("error"), "round {round}: {line}");
            seen += line.starts_with("synced ") as u64;
        }
        let mut lock = socket.as_os_str().to_owned();
        lock.push(".lock");
        let record = std::fs::read_to_string(&lock).unwrap();
        let pid: i32 = record.split_whitespace().next().unwrap().parse().unwrap();
        // SAFETY: kill has no memory arguments; the pid is the service's, recorded by it.
        if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            kills += 1;
        }
        for (w, (mut c, mut out)) in writers.drain(..).enumerate() {
            let mut rest = String::new();
            // Ends when the writer does: a hang here is a failure the test looks for.
            std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
            assert!(c.wait().unwrap().success(), "round {round}: writer {w} failed");
            assert!(!rest.contains("error"), "round {round}: writer {w}: {rest}");
            assert!(rest.lines().any(|l| l == "done"), "round {round}: writer {w}: {rest}");
        }
        let disk = std::fs::read(&file).unwrap();
        for region in [round * 2, round * 2 + 1] {
            for i in 0..PER_REGION {
                let r = region * PER_REGION + i;
                let v = disk.get(r as usize * REC..(r as usize + 1) * REC).expect("a record past the end");
                assert_eq!(whole(r, v), Some(7), "round {round}: record {i} of region {region} lost");
            }
        }
    }
    assert_eq!(kills, 20, "the service was killed in {kills} of 20 rounds");
    drop(stays.stdin.take());
    std::io::Read::read_to_string(&mut stays_out, &mut String::new()).unwrap();
    assert!(stays.wait().unwrap().success());
    let mut log = socket.as_os_str().to_owned();
    log.push(".log");
    let log = std::fs::read_to_string(log).unwrap();
    let took_over = log.matches("took over the cache of a service that died").count();
    assert!(took_over >= 10, "services that took the same cache over: {took_over} of 20\n{log}");
}

/// Attaches to the socket's service, starting one if none answers.
#[test]
#[ignore = "a process of the simultaneous-start test, run by it"]
fn starter_entry() {
    let a = args();
    let cache = serve::connect_or_start(Path::new(&a[0]), &config(), Duration::from_secs(1)).unwrap();
    assert!(cache.status().clients.len() >= 2, "the service and us");
}

/// Six processes find no service at once: each starts one, one wins, and all attach to it.
#[test]
fn processes_starting_at_once_share_one_service() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cache.sock");
    let children: Vec<_> = (0..6)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "starter_entry", "--ignored", "--quiet"])
                .env(ARGS_ENV, socket.display().to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a process could not attach");
    }
}

/// Writes through the service's cache and ends without closing or syncing (`_exit`).
#[test]
#[ignore = "the writer that dies in the orphan test, run by it"]
fn orphan_child_entry() {
    let a = args();
    let cache = serve::connect(Path::new(&a[0])).unwrap();
    let f = cache.open_path(Path::new(&a[1]), true).unwrap();
    f.write_at(b"written by a process that died", 100).unwrap();
    // SAFETY: ends the process at once: no destructor, no close, no write-back.
    unsafe { libc::_exit(0) };
}

/// A process writes and dies without closing: the service, to which it lent its descriptor,
/// writes the dirty pages back before it exits.
#[test]
fn the_service_writes_back_what_a_dead_writer_left() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, service) = serve_in_thread(dir.path());
    let file = dir.path().join("orphan");
    std::fs::write(&file, b"").unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "orphan_child_entry", "--ignored", "--nocapture", "--quiet"])
        .env(ARGS_ENV, format!("{} {}", socket.display(), file.display()))
        .status()
        .unwrap();
    assert!(status.success());
    // A watchdog, not a wait: a service that could not write the pages back would stay.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(service.join().unwrap()));
    let exited = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the service stayed: the pages were not written back");
    assert!(exited, "the service exits once idle and clean");
    let disk = std::fs::read(&file).unwrap();
    assert_eq!(&disk[100..], b"written by a process that died");
}

/// As `nobody`: attaching to root's service is refused; with its own service, a file it may
/// not read cannot be opened through the cache.
#[test]
#[ignore = "the other user's process of the permission test, run by it"]
fn other_user_child_entry() {
    let a = args();
    // SAFETY: setgid/setuid change only this process's credentials.
    assert_eq!(unsafe { libc::setgid(65534) + libc::setuid(65534) }, 0, "cannot become nobody");
    let err = serve::connect(Path::new(&a[0])).expect_err("another user's service");
    assert_eq!(err.kind(), upcache::ErrorKind::PermissionDenied, "{err}");
    let own = tempfile::tempdir().unwrap();
    let (socket, service) = serve_in_thread(own.path());
    let cache = serve::connect(&socket).unwrap();
    let err = cache.open_path(Path::new(&a[1]), false).expect_err("root's private file");
    assert_eq!(err.kind(), upcache::ErrorKind::PermissionDenied, "{err}");
    // Its end, which takes its cache's file in /dev/shm with it.
    drop(cache);
    assert!(service.join().unwrap());
}

#[test]
fn another_user_cannot_attach_nor_open_files_it_may_not() {
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: becoming another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (socket, service) = serve_in_thread(dir.path());
    let private = dir.path().join("private");
    std::fs::write(&private, b"secret").unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "other_user_child_entry", "--ignored", "--nocapture", "--quiet"])
        .env(ARGS_ENV, format!("{} {}", socket.display(), private.display()))
        .env("TMPDIR", "/tmp")
        .status()
        .unwrap();
    assert!(status.success());
    assert!(service.join().unwrap());
    let file = serve::segment_file(&socket);
    assert!(file.as_ref().is_none_or(|f| !f.exists()), "{file:?} left behind");
}

/// The socket's directory must be a private directory of the user itself: one others may
/// write, or a symbolic link (which another user could have planted), is refused before any
/// socket is made.
#[test]
fn a_socket_directory_that_is_shared_or_a_link_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    for d in [&open, &link] {
        let opts =
            ServeOptions { socket: d.join("cache.sock"), config: config(), idle: Duration::from_millis(10) };
        let err = serve::serve(&opts, |_| {}).expect_err("refused");
        assert_eq!(err.kind(), upcache::ErrorKind::PermissionDenied, "{}: {err}", d.display());
        assert!(!d.join("cache.sock").exists());
    }
}

/// A service that accepts but never answers (stopped, or wedged): an attach gets an `Io`
/// error once its time is up, never hangs.
#[test]
fn an_attach_to_a_service_that_never_answers_fails_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cache.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mute = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut byte = [0u8; 1];
        // Holds the connection open until the client gives up and closes it.
        let _ = std::io::Read::read(&mut &conn, &mut byte);
        let _ = std::io::Read::read(&mut &conn, &mut byte);
    });
    let Err(err) = serve::connect_within(&socket, Duration::from_millis(300)) else { panic!("attached") };
    assert_eq!(err.kind(), upcache::ErrorKind::Io);
    assert!(err.to_string().contains("did not answer"), "{err}");
    mute.join().unwrap();
}

/// A new service allocates its frames' memory chunk by chunk as claims first use them, not
/// all at its start (which made the first program through the shim wait 0.27 s for a 1 GiB
/// cache): of a 64 MiB cache's segment, the frames' 64 MiB and the index nodes' 8 MiB (a
/// leaf per frame, at worst, and an inner node per two) are not allocated until 4 MiB are
/// written, and then about that much is.
#[test]
fn a_new_service_allocates_its_frames_as_they_are_first_used() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cache.sock");
    let service =
        serve_at(&socket, SharedConfig { memory: 64 << 20, ..config() }, Duration::from_millis(200));
    let cache = serve::connect(&socket).unwrap();
    let stat = || {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes one stat into `st`, read only on success.
        assert_eq!(unsafe { libc::fstat(cache.segment_fd().as_raw_fd(), st.as_mut_ptr()) }, 0);
        // SAFETY: fstat succeeded.
        unsafe { st.assume_init() }
    };
    let allocated = || stat().st_blocks as u64 * 512;
    let fresh = allocated();
    let size = stat().st_size as u64;
    assert!(size - fresh >= 72 << 20, "{fresh} of {size} bytes allocated at the start");
    let file = dir.path().join("data");
    std::fs::write(&file, b"").unwrap();
    let f = cache.open_path(&file, true).unwrap();
    for at in 0..1024u64 {
        f.write_at(&[at as u8; 4096], at * 4096).unwrap();
    }
    let used = allocated() - fresh;
    assert!((4 << 20..16 << 20).contains(&used), "{used} bytes allocated for 4 MiB of pages");
    f.sync_all().unwrap();
    drop(f);
    drop(cache);
    assert!(service.join().unwrap());
    let disk = std::fs::read(&file).unwrap();
    assert!(disk.chunks(4096).enumerate().all(|(i, p)| p.iter().all(|&b| b == i as u8)));
}

/// A set-associative cache's frames are allocated whole when a service makes it (a tmpfs
/// file): a page's set is fixed, so a set whose memory could not be allocated later would fail
/// every miss on it. A private cache's frames are its own memory instead.
#[test]
fn a_set_associative_cache_allocates_its_frames_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let sets = SharedConfig { memory: 64 << 20, index: upcache::IndexKind::SetAssoc, ..config() };
    let allocated = |c: &SharedCache| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes one stat into `st`, read only on success.
        assert_eq!(unsafe { libc::fstat(c.segment_fd().as_raw_fd(), st.as_mut_ptr()) }, 0);
        // SAFETY: fstat succeeded.
        unsafe { st.assume_init() }.st_blocks as u64 * 512
    };
    let socket = dir.path().join("run/cache.sock");
    let service = serve_at(&socket, sets.clone(), Duration::from_millis(200));
    let attached = serve::connect(&socket).unwrap();
    assert!(allocated(&attached) >= 64 << 20, "{} bytes allocated", allocated(&attached));
    // A private cache's frames are its process's memory, not the segment's: none to allocate
    // there, and none whose first touch a full tmpfs could fail.
    let private = SharedCache::create_private(&sets).unwrap();
    assert!(allocated(&private) < 64 << 20, "{} bytes allocated", allocated(&private));
    drop((attached, private));
    assert!(service.join().unwrap());
}

/// Submits 32 reads of 64 KiB each of the file in its argument on a queue, then kills itself
/// with the loads in flight, their frames locked under its client id.
#[test]
#[ignore = "the queue of the killed-queue test, run by it"]
fn queue_loader_entry() {
    let a = args();
    let cache = inherited();
    let f = std::sync::Arc::new(cache.open_path(Path::new(&a[0]), false).unwrap());
    let mut q = cache.queue(32).unwrap();
    for i in 0..32u64 {
        q.read(&f, i * (64 << 10), vec![0; 64 << 10], i).unwrap();
    }
    println!("submitted {}", q.in_flight());
    // SAFETY: raise on our own process: it ends here, its loads unreaped.
    unsafe { libc::raise(libc::SIGKILL) };
}

/// A process killed with its queue's loads in flight (10 times): another process reads every
/// byte of the file through the cache, the dead one's locked frames repaired on the way.
#[test]
fn a_process_killed_with_queued_loads_leaves_no_page_locked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q");
    let bytes: Vec<u8> = (0..2u32 << 20).map(|i| (i / 4099) as u8 ^ i as u8).collect();
    std::fs::write(&file, &bytes).unwrap();
    let cache = SharedCache::create(&SharedConfig { memory: 4 << 20, ..config() }).unwrap();
    let f = cache.open_path(&file, false).unwrap();
    for round in 0..10 {
        f.evict(0, 0).unwrap();
        let (mut cmd, fd) = child(&cache, "queue_loader_entry", &file.display().to_string());
        let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
        drop(fd);
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("submitted") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "round {round}: the child ended first");
        }
        assert_eq!(line.trim(), "submitted 32", "round {round}");
        let status = c.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        // Its loads' frames are still locked under its id.
        assert!(cache.status().locked > 0, "round {round}: nothing left locked by the dead queue");
        let mut got = vec![0u8; bytes.len()];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), bytes.len());
        assert!(got == bytes, "round {round}: the bytes read after the kill");
    }
}
