//! SIGKILL at random points, as an attacker would (issue 34): four processes write records
//! through the shim (`tests/py/kill_writer.py`) while one after another is killed and started
//! anew, and every few kills the service is killed too; four processes commit SQLite rows
//! (`tests/py/sqlite_killed.py`) while one after another is killed mid-transaction. Every
//! write that returned must be in the file once the last process has gone, every committed
//! row in the database, which must pass `integrity_check`, and no process may stop making
//! progress. Each scenario runs without the shim (the kernel's answer) and with it. The
//! `long_` variants (`.ci/run`'s long step) kill writers at 100 points and the service at 20.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use common::side::{running_service, signal, wait_for_service_exit, Side};
use common::total;

/// Longest a crew may go without a line from any of its processes before the test calls it
/// a hang.
const PROGRESS: Duration = Duration::from_secs(60);

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(name)
}

/// A line of process `id`, or its end (None).
type Said = (usize, Option<String>);

/// Processes started one after another, each numbered, their stdout lines gathered in one
/// channel.
struct Crew {
    live: HashMap<usize, Child>,
    started: usize,
    lines: Receiver<Said>,
    send: Sender<Said>,
}

impl Crew {
    fn new() -> Crew {
        let (send, lines) = channel();
        Crew { live: HashMap::new(), started: 0, lines, send }
    }

    /// Starts `cmd` as the next process; its number.
    fn start(&mut self, mut cmd: Command) -> usize {
        let id = self.started;
        self.started += 1;
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let send = self.send.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if send.send((id, Some(line))).is_err() {
                    return;
                }
            }
            let _ = send.send((id, None));
        });
        self.live.insert(id, child);
        id
    }

    /// Hands every line to `seen` until it returns true; fails the test on a silence of
    /// [`PROGRESS`].
    fn until(&self, what: &str, mut seen: impl FnMut(usize, Option<&str>) -> bool) {
        loop {
            let (id, line) = self
                .lines
                .recv_timeout(PROGRESS)
                .unwrap_or_else(|_| panic!("{what}: no process said anything for {PROGRESS:?}"));
            if seen(id, line.as_deref()) {
                return;
            }
        }
    }

    /// Kills process `id` with SIGKILL, which must be what ends it, and hands its last lines
    /// (and everyone else's meanwhile) to `seen`.
    fn kill(&mut self, id: usize, what: &str, mut seen: impl FnMut(usize, Option<&str>)) {
        let mut child = self.live.remove(&id).unwrap();
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}: process {id} ended by itself: {status:?}");
        self.until(what, |i, line| {
            seen(i, line);
            i == id && line.is_none()
        });
    }

    /// A live process, picked by `x`.
    fn pick(&self, x: u64) -> usize {
        let mut ids: Vec<usize> = self.live.keys().copied().collect();
        ids.sort();
        ids[x as usize % ids.len()]
    }
}

/// A xorshift step: the test's kill points, the same in every run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Record `r` as `kill_writer.py` writes it.
fn record(r: u64) -> Vec<u8> {
    const REC: u64 = 1000;
    let mut v = format!("{r:010}|").into_bytes();
    v.extend((0..REC - v.len() as u64).map(|i| ((r + i) % 251) as u8));
    v
}

/// What the record writers have said.
#[derive(Default)]
struct Records {
    acked: BTreeSet<u64>,
    syncs: HashMap<usize, u64>,
    done: HashSet<usize>,
}

impl Records {
    fn said(&mut self, id: usize, line: Option<&str>, what: &str) {
        let Some(line) = line else { return };
        match line.split_once(' ') {
            Some(("w", r)) => drop(self.acked.insert(r.parse().unwrap())),
            Some(("bad", r)) => panic!("{what}: writer {id} read back its record {r} wrong"),
            _ if line == "s" => *self.syncs.entry(id).or_default() += 1,
            _ if line == "done" => drop(self.done.insert(id)),
            _ => panic!("{what}: writer {id} said {line:?}"),
        }
    }
}

/// Four record writers, `kills` of them killed one after another (after 1 to 6 syncs each)
/// and replaced; with the shim, the service killed too at every 5th kill, `kills / 5` times.
fn writers_killed(name: &str, kills: usize) {
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), name) {
        let what = side.label();
        let file = side.dir.join("records");
        let stats = side.dir.join("stats");
        let writer = |spawn: usize| {
            let mut cmd = side.command("python3");
            cmd.arg(script("kill_writer.py")).arg(&file).arg(spawn.to_string()).env("UPCACHE_STATS", &stats);
            cmd
        };
        let mut crew = Crew::new();
        let mut said = Records::default();
        for _ in 0..4 {
            let w = writer(crew.started);
            crew.start(w);
        }
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut service_kills = 0;
        // Set at every 5th kill, cleared once a service was running to be killed (the one
        // killed last may not have been replaced yet).
        let mut service_due = false;
        for k in 0..kills {
            let victim = crew.pick(next(&mut x));
            let after = 1 + next(&mut x) % 6;
            crew.until(what, |id, line| {
                said.said(id, line, what);
                said.syncs.get(&victim).copied().unwrap_or(0) >= after || said.done.contains(&victim)
            });
            if let Some((_, socket)) = &side.shim {
                service_due |= k % 5 == 4;
                if let Some(pid) = running_service(socket).filter(|_| service_due) {
                    signal(pid, libc::SIGKILL);
                    service_kills += 1;
                    service_due = false;
                }
            }
            crew.kill(victim, what, |id, line| said.said(id, line, what));
            let w = writer(crew.started);
            crew.start(w);
        }
        // The last four write all their records and end.
        crew.until(what, |id, line| {
            said.said(id, line, what);
            crew.live.keys().all(|id| said.done.contains(id))
        });
        for (id, mut child) in crew.live.drain() {
            drop(child.stdin.take());
            let status = child.wait().unwrap();
            assert!(status.success(), "{what}: writer {id}: {status:?}");
        }
        let fired = side.shim.as_ref().and_then(|(_, socket)| wait_for_service_exit(socket));
        assert_ne!(fired, Some(true), "{what}: the service did not exit once everything was written back");
        let disk = std::fs::read(&file).unwrap();
        let lost: Vec<u64> = said
            .acked
            .iter()
            .copied()
            .filter(|&r| disk.get(r as usize * 1000..).and_then(|d| d.get(..1000)) != Some(&record(r)[..]))
            .collect();
        assert!(
            lost.is_empty(),
            "{what}: {} of {} written records lost, the first {:?}",
            lost.len(),
            said.acked.len(),
            &lost[..lost.len().min(5)]
        );
        if side.shim.is_some() {
            assert!(service_kills >= kills / 5, "{what}: the service was killed {service_kills} times");
            // The last four, which ended by themselves, wrote through the cache (the test would
            // pass vacuously if the shim had left the file to the kernel).
            let lines = std::fs::read_to_string(&stats).unwrap();
            assert!(total(&lines, "writes") >= 4 * 200, "{what}: {lines}");
        }
    }
}

#[test]
fn four_writers_and_the_service_killed_keep_every_written_record() {
    writers_killed("writers", 20);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_four_writers_and_the_service_killed_keep_every_written_record() {
    writers_killed("writers-long", 100);
}

/// What the SQLite processes have said: the rows they committed.
#[derive(Default)]
struct Rows {
    committed: Vec<(usize, u64)>,
    commits: HashMap<usize, u64>,
}

impl Rows {
    fn said(&mut self, id: usize, line: Option<&str>, what: &str) {
        let Some(line) = line else { return };
        let i = line.strip_prefix("c ").unwrap_or_else(|| panic!("{what}: process {id} said {line:?}"));
        self.committed.push((id, i.parse().unwrap()));
        *self.commits.entry(id).or_default() += 1;
    }
}

/// `kills` SQLite processes, four at a time, each killed after 1 to 5 commits of its own and
/// replaced until all have run.
fn sqlite_killed(name: &str, kills: usize) {
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), name) {
        let what = side.label();
        let db = side.dir.join("t.db");
        let sql = |args: &[&str]| {
            let mut cmd = side.command("python3");
            cmd.arg(script("sqlite_killed.py")).arg(&db).args(args);
            cmd
        };
        let out = sql(&["init"]).output().unwrap();
        assert!(out.status.success(), "{what}: init: {}", String::from_utf8_lossy(&out.stderr));
        let mut crew = Crew::new();
        let mut said = Rows::default();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        loop {
            while crew.started < kills && crew.live.len() < 4 {
                let w = sql(&[&crew.started.to_string()]);
                crew.start(w);
            }
            if crew.live.is_empty() {
                break;
            }
            let victim = crew.pick(next(&mut x));
            let after = said.commits.get(&victim).copied().unwrap_or(0) + 1 + next(&mut x) % 5;
            crew.until(what, |id, line| {
                said.said(id, line, what);
                said.commits.get(&victim).copied().unwrap_or(0) >= after
            });
            crew.kill(victim, what, |id, line| said.said(id, line, what));
        }
        let rows = side.dir.join("committed");
        let list: String = said.committed.iter().map(|(w, i)| format!("{w} {i}\n")).collect();
        std::fs::write(&rows, list).unwrap();
        let check = |mut cmd: Command, how: &str| {
            let out = cmd.arg(script("sqlite_killed.py")).arg(&db).arg("check").arg(&rows).output().unwrap();
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{what}, checked {how}: {text}");
        };
        // A process on the same side finds the hot journal of the last transaction killed and
        // rolls it back; then, once every process has gone, the OS files hold the same.
        let stats = side.dir.join("stats");
        let mut same_side = side.command("python3");
        same_side.env("UPCACHE_STATS", &stats);
        check(same_side, "on the same side");
        if side.shim.is_some() {
            // It read the database through the cache.
            let lines = std::fs::read_to_string(&stats).unwrap();
            assert!(total(&lines, "reads") > 0, "{what}: {lines}");
        }
        let fired = side.shim.as_ref().and_then(|(_, socket)| wait_for_service_exit(socket));
        assert_ne!(fired, Some(true), "{what}: the service did not exit once everything was written back");
        check(Command::new("python3"), "without the shim afterwards");
        assert!(said.committed.len() >= kills, "{what}: {} rows committed", said.committed.len());
    }
}

#[test]
fn four_sqlite_processes_killed_keep_the_database_whole() {
    sqlite_killed("sqlite", 12);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_four_sqlite_processes_killed_keep_the_database_whole() {
    sqlite_killed("sqlite-long", 40);
}
