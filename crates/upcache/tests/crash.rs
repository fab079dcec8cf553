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

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use upcache::Cache;

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
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["crash_child_entry", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // A thread reads the child's steps, so a stuck child fails the test instead of
        // hanging it. libtest may print "test crash_child_entry ... " before the first step on
        // the same line, so a step is the last word of a line.
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(i) = line.split_whitespace().last().and_then(|w| w.parse::<u64>().ok()) {
                    let _ = tx.send(i);
                }
            }
        });
        for _ in 0..lines {
            let i = rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|e| {
                panic!("round {round}: no progress from the child ({e:?}): exited early or stuck")
            });
            synced = synced.max(i + 1);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Steps the child finished between our last read and the kill count as synced too.
        reader.join().unwrap();
        synced = rx.try_iter().fold(synced, |s, i| s.max(i + 1));

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
