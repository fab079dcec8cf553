//! Crash tests: a child process creates files, writes and syncs them, and is killed with
//! SIGKILL at a point chosen by progress (never by a timer); the parent then reopens the array
//! and checks that the catalog is intact and every byte synced before the kill is there.
//!
//! The child is this same test binary, re-run with `UPCACHE_CRASH_CHILD` set: it prints one
//! line per synced step on stdout, and the parent kills it right after reading the N-th line,
//! so the kill lands somewhere inside a later step (often mid catalog write or write-back).
//!
//! What this proves and what it does not: a killed process loses its user-space state (dirty
//! frames, half-done write-back runs, a catalog replace in flight) but not what it handed to
//! the kernel, so this catches data a sync claimed but left in the cache, and a catalog that a
//! kill can tear. It cannot catch a missing fdatasync or directory fsync; that needs a
//! simulated device that drops unsynced writes at a power cut (issue 7).

mod common;

use common::records;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use upcache::Cache;

/// A child process: this test binary running the ignored test `entry` with `env` set to
/// `value`. A thread reads its output and sends the last word of each line (libtest may print
/// "test <entry> ... " before the child's first line, on the same line), so that a stuck child
/// fails a `recv_timeout` instead of hanging the test.
struct Child {
    process: std::process::Child,
    words: mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Child {
    fn spawn(entry: &str, env: &str, value: impl AsRef<std::ffi::OsStr>) -> Child {
        // One spawn at a time in this process: a child between its fork and its exec holds a
        // copy of every descriptor, the array lock of another test's just-closed cache too,
        // and that test's own child would find its array busy. `spawn` returns after the
        // exec, when the copies are closed.
        static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([entry, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(env, value)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(process.stdout.take().unwrap());
        let (tx, words) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(w) = line.split_whitespace().last() {
                    let _ = tx.send(w.to_owned());
                }
            }
        });
        Child { process, words, reader: Some(reader) }
    }

    /// The next word, within two minutes.
    fn next(&self, what: &str) -> String {
        self.words
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no {what} from the child ({e:?}): it exited early or is stuck"))
    }

    /// The next number it printed (skipping other words).
    fn next_number(&self, what: &str) -> u64 {
        loop {
            if let Ok(n) = self.next(what).parse() {
                return n;
            }
        }
    }

    /// Kills it; returns the numbers it printed that were not read yet (they completed too).
    fn kill(mut self) -> Vec<u64> {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
        self.reader.take().unwrap().join().unwrap();
        self.words.try_iter().filter_map(|w| w.parse().ok()).collect()
    }
}

const CHILD_ENV: &str = "UPCACHE_CRASH_CHILD";
const STEP_BYTES: usize = 3 * 4096 + 100;

fn config(root: &Path) -> upcache::Config {
    common::config(root, 3, 4096, 32).with_flusher_threads(2)
}

fn step_data(i: u64) -> Vec<u8> {
    common::pattern(i + 7, STEP_BYTES)
}

/// The child: step i creates file "f{i}" (or reuses "log"), writes, syncs, reports.
fn child(root: &Path) {
    let cache = Cache::open(config(root)).unwrap();
    let log = if cache.exists("log").unwrap() {
        cache.open_file("log").unwrap()
    } else {
        cache.create_file("log").unwrap()
    };
    let start = log.len() / STEP_BYTES as u64;
    for i in start.. {
        let f = cache.create_file(&format!("f{i}")).unwrap();
        f.write_all_at(&step_data(i), 0).unwrap();
        f.sync_all().unwrap();
        log.write_all_at(&step_data(i), i * STEP_BYTES as u64).unwrap();
        log.sync_data().unwrap();
        println!("{i}");
    }
}

#[test]
#[ignore = "the body of the crash test's child process, run by that test"]
fn crash_child_entry() {
    let root = std::env::var(CHILD_ENV).expect("run by the crash test, with UPCACHE_CRASH_CHILD set");
    child(Path::new(&root));
}

#[test]
fn killed_at_any_point_the_array_reopens_with_every_synced_byte() {
    let tmp = tempfile::tempdir().unwrap();
    drop(Cache::create(config(tmp.path())).unwrap());
    let mut synced = 0u64; // steps known complete
    for (round, lines) in [1u64, 3, 2, 5, 1, 4, 2, 3, 1, 6].into_iter().enumerate() {
        let child = Child::spawn("crash_child_entry", CHILD_ENV, tmp.path());
        for _ in 0..lines {
            synced = synced.max(child.next_number(&format!("step (round {round})")) + 1);
        }
        // Steps the child finished between our last read and the kill count as synced too.
        synced = child.kill().into_iter().fold(synced, |s, i| s.max(i + 1));

        let cache = Cache::open(config(tmp.path())).unwrap();
        let log = cache.open_file("log").unwrap();
        assert!(log.len() >= synced * STEP_BYTES as u64, "round {round}: log lost synced steps");
        for i in 0..synced {
            let f = cache.open_file(&format!("f{i}")).unwrap_or_else(|e| panic!("round {round}: f{i}: {e}"));
            let mut buf = vec![0u8; STEP_BYTES];
            f.read_exact_at(&mut buf, 0).unwrap();
            assert!(buf == step_data(i), "round {round}: f{i} differs");
            log.read_exact_at(&mut buf, i * STEP_BYTES as u64).unwrap();
            assert!(buf == step_data(i), "round {round}: log step {i} differs");
        }
        // The step in flight at the kill may or may not have created its file, but nothing
        // else exists.
        for name in cache.list() {
            if let Some(n) = name.strip_prefix('f') {
                assert!(n.parse::<u64>().unwrap() <= synced, "round {round}: unexpected {name}");
            }
        }
        // Trim the log to whole synced steps so the next child starts after them, and drop
        // a half-created file of the step in flight.
        log.set_len(synced * STEP_BYTES as u64).unwrap();
        if cache.exists(&format!("f{synced}")).unwrap() {
            cache.remove_file(&format!("f{synced}")).unwrap();
        }
    }
    assert!(synced >= 28);
}

const META_CHILD_ENV: &str = "UPCACHE_META_CRASH_CHILD";

/// The metadata ops of the metadata crash test: op `i` logs exactly one record.
fn meta_op(cache: &Cache, i: u64) {
    match i % 4 {
        0 => drop(cache.create_file(&format!("f{i}")).unwrap()),
        1 | 2 => {
            let f = cache.open_file(&format!("f{}", i - i % 4)).unwrap();
            f.set_len(i * 1000 + 1).unwrap();
            f.sync_data().unwrap();
        }
        _ if i >= 7 => cache.remove_file(&format!("f{}", i - 7)).unwrap(),
        _ => drop(cache.create_file(&format!("g{i}")).unwrap()),
    }
}

/// The names and lengths after ops `0..n`.
fn meta_model(n: u64) -> Vec<(String, u64)> {
    let mut files = std::collections::BTreeMap::new();
    for i in 0..n {
        match i % 4 {
            0 => drop(files.insert(format!("f{i}"), 0)),
            1 | 2 => drop(files.insert(format!("f{}", i - i % 4), i * 1000 + 1)),
            _ if i >= 7 => drop(files.remove(&format!("f{}", i - 7))),
            _ => drop(files.insert(format!("g{i}"), 0)),
        }
    }
    files.into_iter().collect()
}

fn listing(cache: &Cache) -> Vec<(String, u64)> {
    // Lengths without opening: a cut that drops a committed remove brings back a name whose
    // backing files are gone, which a real crash cannot (the remove's record is durable
    // before they are deleted); the namespace must still be the prefix.
    cache.list().into_iter().map(|n| (n.clone(), cache.file_len(&n).unwrap())).collect()
}

#[test]
#[ignore = "the body of the metadata crash test's child process, run by that test"]
fn meta_crash_child_entry() {
    let root = std::env::var(META_CHILD_ENV).expect("run by the metadata crash test");
    let cache = Cache::open(config(Path::new(&root))).unwrap();
    for i in 0.. {
        meta_op(&cache, i);
        println!("{i}");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A child makes namespace changes (creates, length changes with sync_data, removes), each one
/// metadata-log record, and is killed after some; then the log is cut at every record
/// boundary and inside every record (the rest zeroed, as a power cut leaves a zero-filled
/// log, or filled with garbage, as a torn write may), and each cut array must reopen to
/// exactly the namespace after the records wholly before the cut: a prefix, never a mix.
#[test]
fn metadata_records_cut_anywhere_recover_to_a_prefix() {
    use upcache::internals::meta::metalog::{parse, HEADER_LEN};
    let tmp = tempfile::tempdir().unwrap();
    let array = tmp.path().join("array");
    drop(Cache::create(config(&array)).unwrap());
    let child = Child::spawn("meta_crash_child_entry", META_CHILD_ENV, &array);
    let mut done = 0;
    while done < 40 {
        done = child.next_number("op") + 1;
    }
    // Ops the child reported before it died but this thread had not read yet completed too.
    let done = child.kill().into_iter().map(|i| i + 1).fold(done, u64::max);
    // Kept as killed: every open checkpoints, which empties the log.
    let killed = tmp.path().join("killed");
    copy_dir(&array, &killed);

    // The one log of the child's run: its records, one per op.
    let log_of = |root: &Path| -> PathBuf {
        let dev0 = common::dirs(root, 3).remove(0);
        let logs: Vec<PathBuf> = std::fs::read_dir(&dev0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().contains(".metalog."))
            .collect();
        assert_eq!(logs.len(), 1, "one log after a clean open: {logs:?}");
        logs[0].clone()
    };
    let log = log_of(&killed);
    let name = log.file_name().unwrap().to_str().unwrap().to_owned();
    let fields: Vec<&str> = name.split('.').collect();
    let array_id = u64::from_str_radix(fields[1], 16).unwrap();
    let generation = u64::from_str_radix(fields[3], 16).unwrap();
    let bytes = std::fs::read(&log).unwrap();
    let parsed = parse(&bytes, array_id, generation).unwrap();
    assert!(parsed.dropped.is_none(), "a kill leaves no torn record: {:?}", parsed.dropped);
    let n = parsed.records.len();
    assert!(n as u64 >= done && n as u64 <= done + 1, "{n} records for {done} ops reported");
    let mut ends = vec![HEADER_LEN as usize];
    for r in &parsed.records {
        let mut b = Vec::new();
        r.encode_into(&mut b);
        ends.push(ends.last().unwrap() + b.len());
    }
    assert_eq!(listing(&Cache::open(config(&array)).unwrap()), meta_model(n as u64));

    // (cut, garbage instead of zeros, records expected)
    let mut cuts: Vec<(usize, bool, usize)> = vec![(ends[n], false, n)];
    for k in 0..n {
        // Zeros after the cut: a record whose cut-off bytes were zeros anyway stays whole.
        let whole = |cut: usize| if bytes[cut..ends[k + 1]].iter().all(|&b| b == 0) { k + 1 } else { k };
        for cut in [ends[k], ends[k] + 3, (ends[k] + ends[k + 1]) / 2, ends[k + 1] - 1] {
            cuts.push((cut, false, whole(cut)));
        }
        cuts.push(((ends[k] + ends[k + 1]) / 2, true, k));
    }
    for (i, &(cut, garbage, want)) in cuts.iter().enumerate() {
        let copy = tmp.path().join(format!("cut{i}"));
        copy_dir(&killed, &copy);
        let mut b = bytes.clone();
        for (j, x) in b[cut..].iter_mut().enumerate() {
            *x = if garbage && j < 16 { 0xA5 } else { 0 };
        }
        std::fs::write(log_of(&copy), &b).unwrap();
        let cache = Cache::open(config(&copy)).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(listing(&cache), meta_model(want as u64), "cut at byte {cut} (garbage {garbage})");
        drop(cache);
        std::fs::remove_dir_all(&copy).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Random writes and syncs, killed at random points.

const RANDOM_CHILD_ENV: &str = "UPCACHE_RANDOM_CRASH_CHILD";
/// Kill points of `random_writes_killed_anywhere_keep_every_synced_record`:
/// `UPCACHE_CRASH_KILLS`, else 120 (`ci/crash.sh` runs 1000).
const KILLS_ENV: &str = "UPCACHE_CRASH_KILLS";
fn random_config(root: &Path) -> upcache::Config {
    // 24 frames for 3 x 48 x 1500 bytes: eviction writes back unsynced records all the time.
    common::config(root, 2, 4096, 24).with_flusher_threads(1).with_dirty_background_ratio(0.2)
}

#[test]
#[ignore = "the body of the random crash test's child process, run by that test"]
fn random_crash_child_entry() {
    let spec = std::env::var(RANDOM_CHILD_ENV).expect("run by the random crash test");
    let (seed, root) = spec.split_once(':').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let cache = Cache::create(random_config(Path::new(root))).unwrap();
    let files = records::create_files(&cache);
    println!("ready");
    for n in 0.. {
        records::run_op(&files, records::op(seed, n)).unwrap();
        println!("{n}");
    }
}

/// A child writes random records to 3 files and syncs them at random, and is killed after a
/// random number of completed ops; the parent reopens and checks, for every slot of every
/// file: if the slot was not written after the file's last completed sync, it holds exactly
/// the record the sync covered (or zeros if none was written); otherwise it may hold anything
/// a later write could leave. Each kill point is a fresh array.
#[test]
fn random_writes_killed_anywhere_keep_every_synced_record() {
    let kills: u64 = std::env::var(KILLS_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(120);
    let mut checked_slots = 0u64;
    for round in 0..kills {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("array");
        let seed = 0x5eed + round;
        let child =
            Child::spawn("random_crash_child_entry", RANDOM_CHILD_ENV, format!("{seed}:{}", root.display()));
        while child.next(&format!("ready (round {round})")) != "ready" {}
        // Kill after a pseudo-random number of completed ops: 1 to 120.
        let wait_for = 1 + (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) % 120;
        let mut done = 0;
        for _ in 0..wait_for {
            done = child.next_number(&format!("op (round {round})"));
        }
        // Ops reported after our last read completed too.
        let done = child.kill().into_iter().fold(done, u64::max);

        let cache =
            Cache::open(random_config(&root)).unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
        // Ops reported after our last read may have started (and written) before the kill.
        let oracle = records::Oracle::after(seed, done, 3);
        checked_slots +=
            oracle.check(&cache, &format!("round {round} (seed {seed}, killed after op {done})"));
    }
    assert!(checked_slots > 0);
}

// The shared engine's (which `--cfg loom` leaves out).
#[cfg(not(loom))]
const SHARED_CHILD_ENV: &str = "UPCACHE_SHARED_CRASH_CHILD";

/// The array of `config(root)` on the shared engine: a private cache of 64 frames.
#[cfg(not(loom))]
fn shared_array(root: &Path) -> upcache::shared::SharedArray {
    use upcache::shared::{ArraySpec, SharedArray, SharedCache, SharedConfig};
    let cache =
        SharedCache::create_private(&SharedConfig { memory: 256 << 10, ..SharedConfig::default() }).unwrap();
    let dirs = common::dirs(root, 3);
    let spec = ArraySpec {
        dirs: &dirs,
        meta_dir: None,
        page_size: 4096,
        stripe_unit: 2 * 4096,
        kind: upcache::LayoutKind::Stripe,
        sims: &[],
        allow_buffered: false,
        io_threads: upcache::SubmitKind::Caller,
        engine: None,
    };
    SharedArray::open(&cache, spec).unwrap()
}

/// The shared engine's child: the steps of `child`, through a private shared cache.
#[cfg(not(loom))]
fn shared_child(root: &Path) {
    let array = shared_array(root);
    let log = if array.exists("log").unwrap() {
        array.open_file("log", true).unwrap()
    } else {
        array.create_file("log").unwrap()
    };
    let start = log.len() / STEP_BYTES as u64;
    for i in start.. {
        let f = array.create_file(&format!("f{i}")).unwrap();
        f.write_all_at(&step_data(i), 0).unwrap();
        f.sync_all().unwrap();
        f.close().unwrap();
        log.write_all_at(&step_data(i), i * STEP_BYTES as u64).unwrap();
        log.sync_data().unwrap();
        println!("{i}");
    }
}

#[test]
#[cfg(not(loom))]
#[ignore = "the body of the shared engine's crash test's child process, run by that test"]
fn shared_crash_child_entry() {
    let root =
        std::env::var(SHARED_CHILD_ENV).expect("run by the crash test, with UPCACHE_SHARED_CRASH_CHILD set");
    shared_child(Path::new(&root));
}

/// As `killed_at_any_point_the_array_reopens_with_every_synced_byte`, with the child writing
/// through the shared engine (`SharedArray` on a private cache); the parent checks through the
/// in-process engine and the shared one in turns: the same format, either engine's recovery.
#[test]
#[cfg(not(loom))]
fn the_shared_engine_killed_at_any_point_leaves_every_synced_byte_of_its_array() {
    let tmp = tempfile::tempdir().unwrap();
    drop(Cache::create(config(tmp.path())).unwrap());
    let mut synced = 0u64;
    for (round, lines) in [1u64, 3, 2, 5, 1, 4, 2, 3, 1, 6].into_iter().enumerate() {
        let child = Child::spawn("shared_crash_child_entry", SHARED_CHILD_ENV, tmp.path());
        for _ in 0..lines {
            synced = synced.max(child.next_number(&format!("step (round {round})")) + 1);
        }
        synced = child.kill().into_iter().fold(synced, |s, i| s.max(i + 1));
        let check = |read: &dyn Fn(&str, &mut [u8], u64), len: &dyn Fn(&str) -> u64, names: Vec<String>| {
            assert!(len("log") >= synced * STEP_BYTES as u64, "round {round}: log lost synced steps");
            let mut buf = vec![0u8; STEP_BYTES];
            for i in 0..synced {
                read(&format!("f{i}"), &mut buf, 0);
                assert!(buf == step_data(i), "round {round}: f{i} differs");
                read("log", &mut buf, i * STEP_BYTES as u64);
                assert!(buf == step_data(i), "round {round}: log step {i} differs");
            }
            for name in names {
                if let Some(n) = name.strip_prefix('f') {
                    assert!(n.parse::<u64>().unwrap() <= synced, "round {round}: unexpected {name}");
                }
            }
        };
        if round % 2 == 0 {
            let cache = Cache::open(config(tmp.path())).unwrap();
            let read = |name: &str, buf: &mut [u8], at: u64| {
                cache
                    .open_file(name)
                    .unwrap_or_else(|e| panic!("round {round}: {name}: {e}"))
                    .read_exact_at(buf, at)
                    .unwrap()
            };
            check(&read, &|name| cache.file_len(name).unwrap(), cache.list());
            cache.open_file("log").unwrap().set_len(synced * STEP_BYTES as u64).unwrap();
            if cache.exists(&format!("f{synced}")).unwrap() {
                cache.remove_file(&format!("f{synced}")).unwrap();
            }
        } else {
            let array = shared_array(tmp.path());
            let read = |name: &str, buf: &mut [u8], at: u64| {
                let f = array.open_file(name, false).unwrap_or_else(|e| panic!("round {round}: {name}: {e}"));
                assert_eq!(f.read_at(buf, at).unwrap(), buf.len(), "round {round}: {name} short");
            };
            let len = |name: &str| array.open_file(name, false).unwrap().len();
            check(&read, &len, array.list());
            let log = array.open_file("log", true).unwrap();
            log.set_len(synced * STEP_BYTES as u64).unwrap();
            log.close().unwrap();
            if array.exists(&format!("f{synced}")).unwrap() {
                array.remove_file(&format!("f{synced}")).unwrap();
            }
        }
    }
    assert!(synced >= 28);
}
