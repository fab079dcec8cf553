//! The kernel's promises to every process (issue 33), each as a scenario run twice: once
//! without the shim, where the kernel's page cache gives the outcome the test requires, and
//! once with every process of the scenario loading the shim on one shared cache of its own.
//! A scenario returns what it saw; the test requires the kernel's outcome of both runs.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::side::{
    finished, line_of, running_service, service_pid, signal, wait_for_service_exit, Side, Talker, Watchdog,
};

/// Appends COUNT lines of 9 bytes ("T 000123\n", T the tag) to FILE, one write(2) each, on
/// a descriptor opened with O_APPEND.
const APPENDER: &str = r#"
import os, sys
path, tag, count = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(count):
    assert os.write(fd, b"%s %06d\n" % (tag, i)) == 9
os.close(fd)
"#;

/// What is wrong with a log that `appenders` processes wrote `count` lines each to: every
/// line whole, once, and each appender's in its order. Empty if nothing.
fn appended_log_faults(log: &[u8], appenders: &[&str], count: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(log);
    let mut faults = Vec::new();
    let mut next = vec![0usize; appenders.len()];
    for (n, line) in text.split_terminator('\n').enumerate() {
        let parsed = line.split_once(' ').and_then(|(tag, i)| {
            let who = appenders.iter().position(|t| *t == tag)?;
            (i.len() == 6).then_some(())?;
            Some((who, i.parse::<usize>().ok()?))
        });
        match parsed {
            Some((who, i)) if i == next[who] => next[who] += 1,
            _ => faults.push(format!("line {n}: {line:?}")),
        }
        if faults.len() > 5 {
            break;
        }
    }
    if !log.ends_with(b"\n") && !log.is_empty() {
        faults.push("the log ends inside a line".into());
    }
    for (who, tag) in appenders.iter().enumerate() {
        if next[who] != count {
            faults.push(format!("{} of {count} lines of {tag} in order", next[who]));
        }
    }
    faults
}

/// Cause 2: two processes appending 5000 lines each to one file through O_APPEND keep all
/// 10,000, none torn, in 20 of 20 rounds (the kernel: always). The shim picked the end
/// before it took the file's cross-process lock, and published the length page by page.
#[test]
fn appends_of_two_processes_are_atomic() {
    let tmp = tempfile::tempdir().unwrap();
    let tags = ["A", "B"];
    for side in Side::both(tmp.path(), "append") {
        let rounds = if side.shim.is_some() { 20 } else { 2 };
        for round in 0..rounds {
            let log = side.dir.join("log");
            let _ = std::fs::remove_file(&log);
            let children: Vec<Child> = tags
                .iter()
                .map(|tag| {
                    side.python(APPENDER, &[log.to_str().unwrap(), tag, "5000"])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            for child in children {
                finished(child, "an appender");
            }
            let faults = appended_log_faults(&std::fs::read(&log).unwrap(), &tags, 5000);
            assert!(faults.is_empty(), "{}, round {round}: {}", side.label(), faults.join("; "));
        }
    }
}

/// Holds an exclusive `lockf` lock on FILE (opened read-write, written first so the cache
/// holds its page), says "locked", and after each line on stdin reads the file (one pread,
/// which the shim serves or, once the file is demoted, hands to libc) and says "read".
const LOCK_HOLDER: &str = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"holder", 0)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
for line in sys.stdin:
    os.pread(fd, 6, 0)
    print("read", flush=True)
"#;

/// Tries FILE's exclusive `lockf` lock without waiting: prints "granted" or "denied".
const LOCK_TRIER: &str = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("granted")
except OSError:
    print("denied")
"#;

/// Maps FILE and writes through the mapping, which the shim hands to libc after demoting the
/// file (for every process on the shared cache).
const MAPPER: &str = r#"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
with mmap.mmap(fd, 4096) as m:
    m[10:16] = b"mapped"
    m.flush()
os.close(fd)
"#;

/// Cause 1: a process's `lockf` lock survives another process mapping the file (which demoted
/// it everywhere, and the shim then closed its own descriptor of it, releasing every lock the
/// holder had): a third process is denied the lock, as the kernel denies it.
#[test]
fn a_lock_survives_another_process_demoting_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), "lock") {
        let file = side.dir.join("locked");
        std::fs::write(&file, vec![b'.'; 4096]).unwrap();
        let path = file.to_str().unwrap();
        let mut holder = Talker::start(side.python(LOCK_HOLDER, &[path]), "locked");
        let trier = |when: &str| {
            let out = side.python(LOCK_TRIER, &[path]).output().unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "denied",
                "{}: a third process got the lock {when}",
                side.label()
            );
        };
        trier("while the holder has it");
        let mapped = side.python(MAPPER, &[path]).output().unwrap();
        assert!(mapped.status.success(), "{}", String::from_utf8_lossy(&mapped.stderr));
        holder.tell();
        assert_eq!(holder.next(), "read", "{}", side.label());
        trier("after another process mapped the file and the holder read it");
        holder.end("the holder");
        assert_eq!(&std::fs::read(&file).unwrap()[..16], b"holder....mapped", "{}", side.label());
    }
}

/// Locks FILE and says "locked"; at a line on stdin reads it (another process has mapped it
/// meanwhile: the cache demotes it, and keeps its own descriptor of it parked, so as not to
/// drop the lock), replaces its descriptor with another by `dup2`, `dup3` or `close_range`
/// (argv[2]), which drops the lock, and prints how many of its descriptors still name FILE.
const LOCK_THEN_CLOSE_OTHERWISE: &str = r#"
import fcntl, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, b"x" * 4096, 0)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
os.pread(fd, 6, 0)
null = os.open("/dev/null", os.O_RDONLY)
if how == "dup2":
    os.dup2(null, fd)
elif how == "dup3":
    os.dup2(null, fd, inheritable=False)
else:
    os.closerange(fd, fd + 1)
left = [n for n in os.listdir("/proc/self/fd") if os.path.realpath("/proc/self/fd/" + n) == os.path.realpath(path)]
print(len(left), flush=True)
"#;

/// Cause 1's parked descriptors go when the program's lock does, whichever call closes its
/// descriptor (`dup2` and `dup3` onto it, `close_range`): none is left behind.
#[test]
fn parked_descriptors_go_with_the_programs_lock() {
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), "parked") {
        for how in ["dup2", "dup3", "close_range"] {
            let file = side.dir.join(format!("locked-{how}"));
            std::fs::write(&file, b"").unwrap();
            let path = file.to_str().unwrap();
            let mut holder = Talker::start(side.python(LOCK_THEN_CLOSE_OTHERWISE, &[path, how]), "locked");
            let mapped = side.python(MAPPER, &[path]).output().unwrap();
            assert!(mapped.status.success(), "{}", String::from_utf8_lossy(&mapped.stderr));
            holder.tell();
            assert_eq!(holder.next(), "0", "{} {how}: descriptors of the file left", side.label());
            holder.end(how);
        }
    }
}

/// Opens FILE read-only, reads it, says "open", and holds it until stdin closes.
const READER_HOLDING: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
assert len(os.read(fd, 4096)) > 0
print("open", flush=True)
sys.stdin.read()
os.close(fd)
"#;

/// Cause 10: a program runs while another process only reads its file (the kernel refuses an
/// exec only while a descriptor is open for writing; the shim opened every cached file
/// read-write for itself: "Text file busy").
#[test]
fn a_binary_that_a_process_only_reads_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), "exec") {
        let program = side.dir.join("prog");
        std::fs::copy("/bin/true", &program).unwrap();
        let reader = Talker::start(side.python(READER_HOLDING, &[program.to_str().unwrap()]), "open");
        let ran = Command::new(&program).output();
        let shimmed_ran = side.command(program.to_str().unwrap()).output();
        reader.end("the reader");
        for (who, ran) in [("a program", ran), ("a shimmed program", shimmed_ran)] {
            let ran = ran.unwrap_or_else(|e| panic!("{}: {who} could not run the file: {e}", side.label()));
            assert!(ran.status.success(), "{}: {who}: {:?}", side.label(), ran.status);
        }
    }
}

/// A parent writes FILE, forks, and its child (no exec) writes through the inherited
/// descriptor (close-on-exec, Python's default, or inheritable with "inheritable") and its own
/// open; then the parent, and a new process, read what the child wrote, and the parent writes
/// the same pages again. Prints what each read.
const FORKER: &str = r#"
import os, subprocess, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
if sys.argv[2] == "inheritable":
    os.set_inheritable(fd, True)
os.pwrite(fd, b"P" * 8192, 0)
pid = os.fork()
if pid == 0:
    assert os.pread(fd, 4, 0) == b"PPPP", "the child sees the parent's write"
    os.pwrite(fd, b"inherited", 100)
    own = os.open(path, os.O_RDWR)
    os.pwrite(own, b"own-open", 5000)
    os.close(own)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
print("parent reads", os.pread(fd, 9, 100), os.pread(fd, 8, 5000))
reader = "import sys; f = open(sys.argv[1], 'rb'); f.seek(100); a = f.read(9); f.seek(5000); print('a new process reads', a, f.read(8))"
print(subprocess.run([sys.executable, "-c", reader, path], capture_output=True, text=True, check=True).stdout.strip())
os.pwrite(fd, b"again", 110)
os.pwrite(fd, b"again", 5010)
os.close(fd)
"#;

/// Cause 3: a forked child's writes, through an inherited descriptor or its own open, are seen
/// by its parent and by new processes, and are not undone by the parent's later write-back.
#[test]
fn a_forked_childs_writes_are_seen_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let mut outcomes = Vec::new();
    for side in Side::both(tmp.path(), "fork") {
        let mut seen = Vec::new();
        for how in ["close-on-exec", "inheritable"] {
            let file = side.dir.join(format!("f-{how}"));
            std::fs::write(&file, vec![b'.'; 8192]).unwrap();
            let child = side
                .python(FORKER, &[file.to_str().unwrap(), how])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let out = finished(child, &format!("{}, {how}", side.label()));
            seen.push((
                how,
                String::from_utf8_lossy(&out.stdout).into_owned(),
                std::fs::read(&file).unwrap(),
            ));
        }
        outcomes.push(seen);
    }
    let (kernel, shim) = (&outcomes[0], &outcomes[1]);
    assert!(kernel[0].1.contains("b'inherited' b'own-open'"), "the kernel's own outcome: {}", kernel[0].1);
    for (k, s) in kernel.iter().zip(shim) {
        assert_eq!(k.1, s.1, "{}: what the processes read", k.0);
        assert!(k.2 == s.2, "{}: the file differs from the kernel's", k.0);
    }
}

/// Cause 1 with SQLite: 2 to 4 writers and an `mmap_size` reader on one database, in WAL and
/// in rollback-journal mode, rounds of each (3 with the shim, 10 in the `long_` variant): no
/// writer fails and every acknowledged row is there (the mapping demoted the database, and in
/// WAL mode the -shm index, and the shim then closed its descriptors under SQLite's locks:
/// "locking protocol", SIGBUS, lost commits).
#[test]
fn sqlite_writers_beside_an_mmap_reader_keep_every_row() {
    sqlite_writers_beside_an_mmap_reader(3);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_sqlite_writers_beside_an_mmap_reader_keep_every_row() {
    sqlite_writers_beside_an_mmap_reader(10);
}

fn sqlite_writers_beside_an_mmap_reader(shim_rounds: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sqlite_modes.py");
    for side in Side::both(tmp.path(), &format!("sqlite-{shim_rounds}")) {
        let db = side.dir.join("t.db");
        let rounds = if side.shim.is_some() { shim_rounds } else { 1 };
        for mode in ["wal", "delete"] {
            for round in 0..rounds {
                let writers = (2 + round % 3).to_string();
                let run = side
                    .command("python3")
                    .arg(&script)
                    .args([db.to_str().unwrap(), mode, &writers, "150"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                finished(run, &format!("{}, {mode} mode, round {round}", side.label()));
            }
        }
    }
}

/// Reads FILE twice and prints its length: the second read hits the cache.
const TWICE: &str = r#"
import sys
for _ in range(2):
    with open(sys.argv[1], "rb") as f:
        data = f.read()
print(len(data))
"#;

/// Cause 11: a process asking for another size than the running shared cache's is told so;
/// the service shows in `ps` as itself, not as the program that started it; a process's
/// UPCACHE_STATS line counts its hits, and the cache's counts follow; the service's log has
/// dates; its status (text and JSON) gives its size and pid; the shim's default idle time is
/// the service's.
#[test]
fn the_shared_cache_says_what_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let [kernel, shim] = Side::both(tmp.path(), "operability");
    let socket = shim.shim.as_ref().unwrap().1.clone();
    let mut outputs = Vec::new();
    for side in [&kernel, &shim] {
        let file = side.dir.join("data");
        std::fs::write(&file, vec![7u8; 100_000]).unwrap();
        // The first process starts the service with 16 MiB and stays attached.
        let mut holding = side.python(READER_HOLDING, &[file.to_str().unwrap()]);
        holding.env("UPCACHE_MEMORY", "16M");
        let holder = Talker::start(holding, "open");
        let stats = side.dir.join("stats");
        let out = side
            .python(TWICE, &[file.to_str().unwrap()])
            .env("UPCACHE_MEMORY", "64M")
            .env("UPCACHE_STATS", &stats)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
        let stderr = String::from_utf8_lossy(&out.stderr);
        if side.shim.is_none() {
            assert_eq!(stderr, "");
        } else {
            assert!(
                stderr.contains("asks for 64 MiB") && stderr.contains("has 16 MiB"),
                "a size other than asked, said plainly: {stderr}"
            );
            let line = std::fs::read_to_string(&stats).unwrap();
            assert!(common::field(&line, "hits") >= 1, "the second read hit the shared cache: {line}");
            // Then the cache's counts, every process's, by the names of `upcache::Stats`.
            let cached = |name: &str| common::field(&line, &format!("cache.{name}"));
            assert!(cached("hits") >= common::field(&line, "hits") && cached("misses") >= 1, "{line}");
            assert_eq!(cached("frames"), 16 << 8, "the cache's 16 MiB: {line}");
            let names = upcache::Stats::default().fields().map(|(name, _)| format!(" cache.{name}="));
            assert!(names.iter().all(|n| line.contains(n.as_str())), "every count: {line}");
            let json = upcache::shared::serve::status_json(&socket).unwrap();
            assert!(json.contains("\"memory_bytes\":16777216"), "{json}");
            let pid: u32 =
                json.split("\"service_pid\":").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
            let text = upcache::shared::serve::status(&socket).unwrap();
            assert!(text.contains("memory_bytes 16777216 (16 MiB)"), "{text}");
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
            assert!(
                cmdline.starts_with(b"upcache serve --socket "),
                "ps shows the service as {:?}",
                String::from_utf8_lossy(&cmdline)
            );
            let mut log = socket.as_os_str().to_owned();
            log.push(".log");
            let log = std::fs::read_to_string(log).unwrap();
            let first = log.lines().next().unwrap_or_default();
            let date = first.split(' ').next().unwrap_or_default();
            assert!(
                date.len() == 24
                    && date.starts_with("20")
                    && date.ends_with('Z')
                    && date.as_bytes()[10] == b'T',
                "the log's lines start with a UTC date: {first}"
            );
        }
        holder.end("the holder");
    }
    assert_eq!(outputs[0], outputs[1]);
}

/// Writes "before" into FILE and says "ready"; after a line on stdin writes "after" a page
/// further and says "written"; after another reads both back, syncs, and says what it read.
const KEEPS_WRITING: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"before", 0)
print("ready", flush=True)
sys.stdin.readline()
os.pwrite(fd, b"after", 4096)
print("written", flush=True)
sys.stdin.readline()
got = (os.pread(fd, 6, 0), os.pread(fd, 5, 4096))
os.fsync(fd)
os.close(fd)
print(got, flush=True)
"#;

/// Prints the bytes of FILE at an offset: `python3 -c READ_AT FILE OFFSET LEN`.
const READ_AT: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print(os.pread(fd, int(sys.argv[3]), int(sys.argv[2])))
"#;

/// Cause 8: the service is killed while a process has a file open: that process goes on
/// reading, writing and syncing without an error, and a new process reads what it wrote (the
/// previous shim failed every call with EIO for good).
#[test]
fn a_killed_service_is_replaced_without_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in Side::both(tmp.path(), "service-kill") {
        let file = side.dir.join("f");
        std::fs::write(&file, vec![b'.'; 8192]).unwrap();
        let path = file.to_str().unwrap();
        let mut holder = Talker::start(side.python(KEEPS_WRITING, &[path]), "ready");
        if let Some((_, socket)) = &side.shim {
            signal(service_pid(socket), libc::SIGKILL);
        }
        holder.tell();
        assert_eq!(holder.next(), "written", "{}", side.label());
        let read = side.python(READ_AT, &[path, "4096", "5"]).output().unwrap();
        seen.push(String::from_utf8_lossy(&read.stdout).into_owned());
        holder.tell();
        seen.push(holder.next());
        holder.end(side.label());
        seen.push(String::from_utf8_lossy(&std::fs::read(&file).unwrap()[..4101]).into_owned());
    }
    let (kernel, shim) = seen.split_at(3);
    assert_eq!(kernel, shim);
}

/// Cause 9: the service is stopped (SIGSTOP) while a process holds unsynced writes: a new
/// process starts at once and reads them through the same cache (the previous shim waited
/// 61 s, then read the stale OS file). A watchdog ends the reader after 8 s, so that a
/// stall fails the test instead of hanging it (the reader took 10 s while its exit waited
/// for the stopped service, 5 s twice, before `link::before_leaving` stopped waiting).
#[test]
fn a_stopped_service_stalls_no_new_process() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in Side::both(tmp.path(), "service-stop") {
        let file = side.dir.join("f");
        std::fs::write(&file, vec![b'.'; 8192]).unwrap();
        let path = file.to_str().unwrap();
        let mut holder = Talker::start(side.python(KEEPS_WRITING, &[path]), "ready");
        let stopped = side.shim.as_ref().map(|(_, socket)| service_pid(socket));
        if let Some(pid) = stopped {
            signal(pid, libc::SIGSTOP);
        }
        let mut reader = side.python(READ_AT, &[path, "0", "6"]).stdout(Stdio::piped()).spawn().unwrap();
        let watchdog = Watchdog::arm(reader.id() as i32, std::time::Duration::from_secs(8));
        let mut out = String::new();
        std::io::Read::read_to_string(reader.stdout.as_mut().unwrap(), &mut out).unwrap();
        let status = reader.wait().unwrap();
        watchdog.disarm();
        if let Some(pid) = stopped {
            signal(pid, libc::SIGCONT);
        }
        assert!(status.success(), "{}: the reader did not finish: {status:?}", side.label());
        seen.push(out);
        holder.tell();
        assert_eq!(holder.next(), "written");
        holder.tell();
        seen.push(holder.next());
        holder.end("the holder");
    }
    let (kernel, shim) = seen.split_at(2);
    assert_eq!(kernel, shim);
}

/// Writes 4 KiB records 0..COUNT to FILE (record i at i * 4096, its number in its first
/// bytes), saying each number once its pwrite returned.
const RECORDS: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
for i in range(int(sys.argv[2])):
    os.pwrite(fd, (b"%08d" % i).ljust(4096, b"r"), i * 4096)
    print(i, flush=True)
"#;

/// Which records of `count` are missing from `data` among the first `acked`.
fn missing_records(data: &[u8], acked: usize) -> Vec<usize> {
    (0..acked)
        .filter(|&i| {
            data.get(i * 4096..(i + 1) * 4096).is_none_or(|r| r[..8] != *format!("{i:08}").as_bytes())
        })
        .collect()
}

/// Cause 6: a writer killed by SIGKILL, then the service killed 0 to 2 s later (round r: the
/// writer killed after 300 + 200 r acknowledged records, the service 100 r ms after it; 4
/// rounds spread over the range, all 20 in the `long_` variant), while another process stays
/// attached: every write that returned is in the file once the last process has detached
/// (the previous shim lost all of them when the service died within about half a second,
/// although the other process still mapped the cache).
#[test]
fn writes_survive_a_killed_writer_and_a_killed_service() {
    killed_writer_and_service(&[0, 6, 13, 19]);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_writes_survive_a_killed_writer_and_a_killed_service() {
    killed_writer_and_service(&(0..20).collect::<Vec<_>>());
}

fn killed_writer_and_service(shim_rounds: &[usize]) {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    for side in Side::both(tmp.path(), &format!("double-kill-{}", shim_rounds.len())) {
        let rounds = if side.shim.is_some() { shim_rounds } else { &[0][..] };
        // Attached all along, with a file of its own open.
        std::fs::write(side.dir.join("held"), b"held").unwrap();
        let holder =
            Talker::start(side.python(READER_HOLDING, &[side.dir.join("held").to_str().unwrap()]), "open");
        let mut files = Vec::new();
        for &round in rounds {
            let file = side.dir.join(format!("records-{round}"));
            let mut writer = side
                .python(RECORDS, &[file.to_str().unwrap(), "5000"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = std::io::BufReader::new(writer.stdout.take().unwrap());
            let kill_at = 300 + round * 200;
            let mut line = String::new();
            let mut acked = 0;
            while acked < kill_at && out.read_line(&mut line).unwrap() > 0 {
                acked = line.trim().parse::<usize>().unwrap() + 1;
                line.clear();
            }
            writer.kill().unwrap();
            writer.wait().unwrap();
            // What the writer said before it died.
            while out.read_line(&mut line).unwrap() > 0 {
                if let Ok(i) = line.trim().parse::<usize>() {
                    acked = i + 1;
                }
                line.clear();
            }
            if let Some((_, socket)) = &side.shim {
                std::thread::sleep(std::time::Duration::from_millis(100 * round as u64));
                // (The previous shim left no service after the first kill: none to kill.)
                if let Some(pid) = running_service(socket) {
                    signal(pid, libc::SIGKILL);
                }
            }
            files.push((file, acked));
        }
        holder.end("the process that stayed attached");
        // A service that stays has pages it believes dirty and cannot write.
        let fired = side.shim.as_ref().and_then(|(_, socket)| wait_for_service_exit(socket));
        for (file, acked) in files {
            let data = std::fs::read(&file).unwrap();
            let missing = missing_records(&data, acked);
            assert!(
                missing.is_empty(),
                "{}: {} of {acked} acknowledged records missing from {} ({} bytes), the first {:?}",
                side.label(),
                missing.len(),
                file.display(),
                data.len(),
                &missing[..missing.len().min(5)]
            );
        }
        assert_ne!(fired, Some(true), "the service did not exit once everything was written back");
    }
}

/// Writes 4 KiB records 0..COUNT to FILE as `RECORDS` does, says "written", and waits.
const RECORDS_THEN_WAIT: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
for i in range(int(sys.argv[2])):
    os.pwrite(fd, (b"%08d" % i).ljust(4096, b"r"), i * 4096)
print("written", flush=True)
sys.stdin.read()
"#;

/// Says how many of the first COUNT records of FILE are missing, as read through its reads.
const RECORDS_MISSING: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
n = int(sys.argv[2])
print(sum(os.pread(fd, 8, i * 4096) != b"%08d" % i for i in range(n)), flush=True)
"#;

/// "N missing as read": how many of the first `count` records of the file at `path` a new
/// process on `side` reads wrong (`RECORDS_MISSING`).
fn missing_as_read(side: &Side, path: &str, count: usize) -> String {
    let read = side.python(RECORDS_MISSING, &[path, &count.to_string()]).output().unwrap();
    assert!(read.status.success(), "{}: {}", side.label(), String::from_utf8_lossy(&read.stderr));
    format!("{} missing as read", String::from_utf8_lossy(&read.stdout).trim())
}

/// Cause 11: a writer and the service killed by SIGKILL, no other process attached, so that
/// no process maps the cache any more (the writer stopped first, so it cannot start a
/// service in place of the one killed): every write that returned is read by the next
/// process and is in the file once that has gone, as with the kernel's page cache. (The
/// previous shim's cache was a memfd, which died with the last process that mapped it, dirty
/// pages and all: the kill test lost 2 or 3 records about one run in ten.) Twice, so the
/// second service, which adopted the first's cache, is killed too.
#[test]
fn writes_survive_the_death_of_every_process_of_the_cache() {
    const COUNT: usize = 300;
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in Side::both(tmp.path(), "all-killed") {
        for round in 0..2 {
            let file = side.dir.join(format!("records-{round}"));
            let path = file.to_str().unwrap();
            let mut writer = side
                .python(RECORDS_THEN_WAIT, &[path, &COUNT.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            assert_eq!(line_of(&mut std::io::BufReader::new(writer.stdout.take().unwrap())), "written");
            signal(writer.id() as i32, libc::SIGSTOP);
            if let Some((_, socket)) = &side.shim {
                signal(running_service(socket).expect("a service"), libc::SIGKILL);
            }
            writer.kill().unwrap();
            writer.wait().unwrap();
            seen.push(missing_as_read(&side, path, COUNT));
        }
        let fired = side.shim.as_ref().and_then(|(_, socket)| wait_for_service_exit(socket));
        assert_ne!(
            fired,
            Some(true),
            "{}: the service did not exit once everything was written back",
            side.label()
        );
        for round in 0..2 {
            let data = std::fs::read(side.dir.join(format!("records-{round}"))).unwrap();
            seen.push(format!("{} missing in the file", missing_records(&data, COUNT).len()));
        }
    }
    let (kernel, shim) = seen.split_at(4);
    assert_eq!(
        kernel,
        ["0 missing as read", "0 missing as read", "0 missing in the file", "0 missing in the file"]
    );
    assert_eq!(shim, kernel);
}

/// Writes 4 KiB records 0..COUNT of FILE, says "written", and at a line on stdin the next
/// COUNT, says "written", and waits for the end of stdin.
const RECORDS_TWICE: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
n = int(sys.argv[2])
for batch in range(2):
    for i in range(batch * n, (batch + 1) * n):
        os.pwrite(fd, (b"%08d" % i).ljust(4096, b"r"), i * 4096)
    print("written", flush=True)
    sys.stdin.readline()
sys.stdin.read()
"#;

/// Cause 12: the cache's file in /dev/shm removed (as a cleaner, or systemd-logind's
/// `RemoveIPC` at logout, may) and then the service killed while a writer is attached: the
/// service put back finds the cache through the writer's descriptor and takes it over, so
/// the writer goes on without an error and the next process reads all it wrote, before and
/// after (the first file-backed cache looked for memfds only: the writer's writes failed).
#[test]
fn a_cache_whose_file_was_removed_is_taken_over_from_its_processes() {
    const COUNT: usize = 200;
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in Side::both(tmp.path(), "file-removed") {
        let file = side.dir.join("records");
        let path = file.to_str().unwrap();
        let mut writer = Talker::start(side.python(RECORDS_TWICE, &[path, &COUNT.to_string()]), "written");
        if let Some((_, socket)) = &side.shim {
            let named = upcache::shared::serve::segment_file(socket).expect("/dev/shm is a tmpfs here");
            std::fs::remove_file(&named).unwrap();
            signal(running_service(socket).expect("a service"), libc::SIGKILL);
        }
        // A new process first (on the service put back), then the writer again.
        seen.push(missing_as_read(&side, path, COUNT));
        writer.tell();
        assert_eq!(writer.next(), "written", "{}: the writer's second batch", side.label());
        seen.push(missing_as_read(&side, path, 2 * COUNT));
        writer.end("the writer");
        if let Some((_, socket)) = &side.shim {
            assert_ne!(wait_for_service_exit(socket), Some(true), "the service did not exit");
        }
        seen.push(format!(
            "{} missing in the file",
            missing_records(&std::fs::read(&file).unwrap(), 2 * COUNT).len()
        ));
    }
    assert_eq!(seen[..3], ["0 missing as read", "0 missing as read", "0 missing in the file"]);
    assert_eq!(seen[3..], seen[..3]);
}

/// Writes 16 MiB at offset 0 of FILE, over and over, saying "writing" once it has begun.
const BIG_WRITER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
buf = b"w" * (16 << 20)
os.pwrite(fd, buf, 0)
print("writing", flush=True)
while True:
    os.pwrite(fd, buf, 0)
"#;

/// Runs `cmd` to its end, or kills it after `limit`: its exit status, or None if killed.
fn within(mut cmd: Command, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let watchdog = Watchdog::arm(child.id() as i32, limit);
    let status = child.wait().unwrap();
    (!watchdog.disarm()).then_some(status)
}

/// Cause 7: a writer stopped (SIGSTOP) in the middle of a write, 3 times (10 in the `long_`
/// variant): each time a reader of the file finishes at once, and a second writer either
/// finishes or ends when `timeout` sends it SIGTERM (the previous shim: the reader waited
/// until the writer resumed, and the second writer ignored SIGTERM). Watchdogs of 20 s turn a
/// stall into a failure.
#[test]
fn a_stopped_writer_stalls_no_reader_and_every_waiter_stays_killable() {
    stopped_writer(3);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_a_stopped_writer_stalls_no_reader_and_every_waiter_stays_killable() {
    stopped_writer(10);
}

fn stopped_writer(rounds: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let limit = std::time::Duration::from_secs(20);
    for side in Side::both(tmp.path(), &format!("stopped-writer-{rounds}")) {
        let file = side.dir.join("f");
        std::fs::write(&file, vec![b'.'; 16 << 20]).unwrap();
        let path = file.to_str().unwrap();
        let mut writer = side.python(BIG_WRITER, &[path]).stdout(Stdio::piped()).spawn().unwrap();
        let mut said = std::io::BufReader::new(writer.stdout.take().unwrap());
        assert_eq!(line_of(&mut said), "writing");
        let pid = writer.id() as i32;
        for round in 0..rounds {
            signal(pid, libc::SIGSTOP);
            let reader = within(side.python(READ_AT, &[path, "8388608", "4096"]), limit);
            assert!(
                reader.is_some_and(|s| s.success()),
                "{}, round {round}: a reader of a file whose writer is stopped: {reader:?}",
                side.label()
            );
            let mut second = side.command("timeout");
            second.args([
                "1",
                "python3",
                "-c",
                "import os, sys; os.pwrite(os.open(sys.argv[1], os.O_RDWR), b'x', 0)",
                path,
            ]);
            let second = within(second, limit);
            // timeout(1) says 124 when its SIGTERM ended the command.
            assert!(
                second.is_some_and(|s| s.success() || s.code() == Some(124)),
                "{}, round {round}: a second writer beside a stopped one, told to end: {second:?}",
                side.label()
            );
            signal(pid, libc::SIGCONT);
        }
        writer.kill().unwrap();
        writer.wait().unwrap();
    }
}

/// Writes the first 8 MiB of its file and syncs, again and again: its write-back holds up to
/// 256 frames at a time (one run). It says so after its first pass.
const SYNCING_WRITER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
buf = b"s" * (8 << 20)
os.pwrite(fd, buf, 0)
os.fsync(fd)
print("writing", flush=True)
while True:
    os.pwrite(fd, buf, 0)
    os.fsync(fd)
"#;

/// Reads its file once, from start to end, in 1 MiB reads.
const SEQUENTIAL_READER_ONCE: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
at = 0
while os.pread(fd, 1 << 20, at):
    at += 1 << 20
"#;

/// A writer stopped while it writes pages back (holding up to 256 of the file's frames) or
/// while it writes: a reader of the whole file finishes at once, 5 times, as with the kernel
/// (whose processes stop only between system calls). Watchdogs of 20 s turn a stall into a
/// failure. (Not yet a reader stopped while it loads pages: one stopped holding an index
/// partition's lock stalls every lookup of that partition until it resumes.)
#[test]
fn a_writer_stopped_in_a_run_of_pages_stalls_no_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let limit = std::time::Duration::from_secs(20);
    for side in Side::both(tmp.path(), "stopped-runs") {
        let file = side.dir.join("f");
        // Within the cache (64 MiB): every page stays cached, so neither the writer nor the
        // reader takes an index partition's lock (see above).
        std::fs::write(&file, vec![b'.'; 32 << 20]).unwrap();
        let path = file.to_str().unwrap();
        let start = |code: &str, says: &str| {
            let mut child = side.python(code, &[path]).stdout(Stdio::piped()).spawn().unwrap();
            let mut said = std::io::BufReader::new(child.stdout.take().unwrap());
            assert_eq!(line_of(&mut said), says);
            child
        };
        let mut writer = start(SYNCING_WRITER, "writing");
        for round in 0..5 {
            signal(writer.id() as i32, libc::SIGSTOP);
            // The whole file: whatever run each was stopped in.
            let read = within(side.python(SEQUENTIAL_READER_ONCE, &[path]), limit);
            assert!(
                read.is_some_and(|s| s.success()),
                "{}, round {round}: a read of the file beside a stopped writer: {read:?}",
                side.label()
            );
            signal(writer.id() as i32, libc::SIGCONT);
        }
        writer.kill().unwrap();
        writer.wait().unwrap();
    }
}

/// As root: writes a 0600 file and a 0644 one (unsynced), then drops to nobody and says what
/// it can still reach: the 0600 file by a new open (no), the 0644 one through the descriptor
/// it kept (yes), and whether a shared segment is still in its memory or descriptors.
const DROPS_PRIVILEGES: &str = r#"
import os, sys
secret, public = sys.argv[1], sys.argv[2]
s = os.open(secret, os.O_RDWR | os.O_CREAT, 0o600)
os.pwrite(s, b"root-only", 0)
p = os.open(public, os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(p, b"public", 0)
if sys.argv[3] == "child" and os.fork() != 0:
    _, status = os.wait()
    sys.exit(status >> 8)
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
try:
    os.open(secret, os.O_RDONLY)
    print("secret: opened")
except PermissionError:
    print("secret: refused")
print("public:", os.pread(p, 6, 0))
os.pwrite(p, b"PUBLIC", 0)
maps = open("/proc/self/maps").read()
fds = [os.readlink("/proc/self/fd/" + f) for f in os.listdir("/proc/self/fd") if os.path.exists("/proc/self/fd/" + f)]
print("segment mapped:", "upcache-shared" in maps, "segment open:", any("upcache-shared" in f for f in fds))
"#;

/// Cause 5: a root process that drops to nobody keeps what the kernel keeps (its open
/// descriptors) and nothing more: no mapping or descriptor of the shared cache, whose pages
/// hold files it could no longer open (the previous shim kept both, and with them every
/// cached file of the user's). Needs root, as becoming another user does.
#[test]
fn a_process_that_drops_privileges_leaves_the_shared_cache() {
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: dropping privileges needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The process itself, then a forked child of it (which never used the cache itself).
    for who in ["process", "child"] {
        let mut outputs = Vec::new();
        for side in Side::both(tmp.path(), &format!("privileges-{who}")) {
            let (secret, public) = (side.dir.join("secret"), side.dir.join("public"));
            let out = side
                .python(DROPS_PRIVILEGES, &[secret.to_str().unwrap(), public.to_str().unwrap(), who])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}, {who}: {}",
                side.label(),
                String::from_utf8_lossy(&out.stderr)
            );
            outputs.push((
                String::from_utf8_lossy(&out.stdout).into_owned(),
                std::fs::read(&secret).unwrap(),
                std::fs::read(&public).unwrap(),
            ));
        }
        assert!(outputs[0].0.contains("segment mapped: False segment open: False"), "{}", outputs[0].0);
        assert_eq!(outputs[0], outputs[1], "{who}");
    }
}

/// The same on a private cache (`UPCACHE_SHARED=0`): it holds only the process's own files,
/// so the process keeps it (its writes after the drop stay cached and reach the file at
/// exit), while a forked child gives up its parent's inherited mapping of it, as it would a
/// shared one. Both leave the files as the kernel does.
#[test]
fn a_process_that_drops_privileges_keeps_its_private_cache() {
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: dropping privileges needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (who, mapped) in [("process", "True"), ("child", "False")] {
        let mut outputs = Vec::new();
        for side in Side::both(tmp.path(), &format!("private-privileges-{who}")) {
            let (secret, public) = (side.dir.join("secret"), side.dir.join("public"));
            // Where the process, nobody by then, can write its statistics line at exit.
            let open_dir = std::env::temp_dir().join(format!("upcache-private-{}-{who}", std::process::id()));
            std::fs::create_dir_all(&open_dir).unwrap();
            std::fs::set_permissions(&open_dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
            let stats = open_dir.join("stats");
            let out = side
                .python(DROPS_PRIVILEGES, &[secret.to_str().unwrap(), public.to_str().unwrap(), who])
                .env("UPCACHE_SHARED", "0")
                .env("UPCACHE_STATS", &stats)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{}, {who}: {}",
                side.label(),
                String::from_utf8_lossy(&out.stderr)
            );
            if side.shim.is_some() {
                assert!(text.contains(&format!("segment mapped: {mapped}")), "{who}: {text}");
                // The writes went through the cache (nothing was demoted).
                let line = std::fs::read_to_string(&stats).unwrap_or_default();
                assert!(line.contains("writes=") && !line.contains(" writes=0 "), "{who}: {line}");
            }
            let _ = std::fs::remove_dir_all(&open_dir);
            let text =
                text.lines().filter(|l| !l.starts_with("segment mapped")).collect::<Vec<_>>().join("\n");
            outputs.push((text, std::fs::read(&secret).unwrap(), std::fs::read(&public).unwrap()));
        }
        assert_eq!(outputs[0], outputs[1], "{who}");
    }
}

/// Writes FILE through the cache and closes it (its pages stay cached).
const WRITE_AND_CLOSE: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, sys.argv[2].encode(), 0)
os.close(fd)
"#;

/// Changes FILE's bytes without the cache (same length) and puts its modification time back,
/// as `rsync -t`, `tar x` and `cp -p` of an older copy do.
const CHANGE_KEEPING_MTIME: &str = r#"
import os, sys
st = os.stat(sys.argv[1])
with open(sys.argv[1], "r+b") as f:
    f.write(sys.argv[2].encode())
os.utime(sys.argv[1], ns=(st.st_atime_ns, st.st_mtime_ns))
"#;

/// Cause 4, in part: a file changed without the cache while no process has it open, its
/// modification time put back: the next process reads the new bytes (the previous shim
/// recognised a file by device, inode, size and modification time only, and served the
/// cached ones). A process that keeps the file open meanwhile: the next test.
#[test]
fn a_change_made_without_the_cache_is_seen_by_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in Side::both(tmp.path(), "outside") {
        let file = side.dir.join("f");
        std::fs::write(&file, b"0000000000").unwrap();
        std::fs::write(side.dir.join("held"), b"held").unwrap();
        // Keeps the cache (and its pages of `f`) alive across the steps.
        let holder =
            Talker::start(side.python(READER_HOLDING, &[side.dir.join("held").to_str().unwrap()]), "open");
        let path = file.to_str().unwrap();
        assert!(side.python(WRITE_AND_CLOSE, &[path, "cached...."]).status().unwrap().success());
        let mut outside = Command::new("python3");
        outside.args(["-c", CHANGE_KEEPING_MTIME, path, "OUTSIDE..."]);
        assert!(outside.status().unwrap().success());
        let read = side.python(READ_AT, &[path, "0", "10"]).output().unwrap();
        seen.push(String::from_utf8_lossy(&read.stdout).into_owned());
        holder.end("the holder");
        seen.push(String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned());
    }
    assert_eq!(seen[0], "b'OUTSIDE...'\n");
    assert_eq!(seen[..2], seen[2..]);
}

/// Keeps FILE open for reading and writing: reads its three pages, writes "HOLDER" into the
/// third and says "ready"; at each line on stdin takes a shared `lockf` lock (where a program
/// synchronises with another), says what it reads at the start of each page and the size
/// `fstat` gives, and unlocks; at the end of stdin writes "LAST" at 0 and closes.
const HOLDS_AND_LOOKS: &str = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
assert len(os.pread(fd, 3 * 4096, 0)) == 3 * 4096
os.pwrite(fd, b"HOLDER", 2 * 4096)
print("ready", flush=True)
for _ in sys.stdin:
    fcntl.lockf(fd, fcntl.LOCK_SH)
    pages = [os.pread(fd, 7, p * 4096) for p in range(3)]
    print(pages, os.fstat(fd).st_size, flush=True)
    fcntl.lockf(fd, fcntl.LOCK_UN)
os.pwrite(fd, b"LAST", 0)
os.close(fd)
"#;

/// Cause 4, while a process has the file open: programs without the shim write into it in
/// place, truncate it, replace its bytes with `echo >` and `cp`; the process holding it open
/// sees each change once it takes a lock, a new process sees it at its open, the holder's own
/// unwritten bytes (written before the changes) are not lost, and its later write reverts
/// nothing (the previous shim served the cached bytes and length to both, and its
/// write-back left a file neither writer wrote).
#[test]
fn a_change_made_without_the_cache_is_seen_by_a_process_holding_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen: [Vec<String>; 2] = Default::default();
    for (i, side) in Side::both(tmp.path(), "outside-held").into_iter().enumerate() {
        let file = side.dir.join("f");
        std::fs::write(&file, vec![b'.'; 3 * 4096]).unwrap();
        std::fs::write(side.dir.join("src"), b"copied by cp\n").unwrap();
        let path = file.to_str().unwrap();
        let mut holder = Talker::start(side.python(HOLDS_AND_LOOKS, &[path]), "ready");
        let in_place =
            format!("import os; fd = os.open('{path}', os.O_WRONLY); os.pwrite(fd, b'OUTSIDE', 4096)");
        let steps: [&[&str]; 4] = [
            &["python3", "-c", &in_place],
            &["truncate", "-s", "0", "f"],
            &["sh", "-c", "echo new > f"],
            &["cp", "src", "f"],
        ];
        for (n, step) in steps.iter().enumerate() {
            let status = Command::new(step[0]).args(&step[1..]).current_dir(&side.dir).status().unwrap();
            assert!(status.success(), "{step:?}");
            holder.tell();
            seen[i].push(format!("step {n}: holder {}", holder.next()));
            let read = side.python(READ_AT, &[path, "4096", "16"]).output().unwrap();
            seen[i].push(format!("step {n}: new process {}", String::from_utf8_lossy(&read.stdout)));
        }
        holder.end(side.label());
        let data = std::fs::read(&file).unwrap();
        let sum = data.iter().fold(0u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        seen[i].push(format!(
            "the file: {} bytes, {:?}, hash {sum:x}",
            data.len(),
            &data[..data.len().min(16)]
        ));
    }
    assert!(seen[0][0].contains("OUTSIDE") && seen[0][0].contains("HOLDER"), "{:?}", seen[0]);
    assert_eq!(seen[0], seen[1]);
}

/// Cause 6, the service's part made certain: the service is stopped before a writer is
/// killed, so it cannot write the writer's pages back, and then killed; the service that takes
/// its place must write them back through the file's recorded path (a service forked from a
/// shimmed process ran the shim too, and its open of that path waited for itself).
#[test]
fn a_service_that_takes_over_writes_back_what_a_dead_writer_left() {
    let tmp = tempfile::tempdir().unwrap();
    let [_, side] = Side::both(tmp.path(), "takeover");
    let socket = side.shim.as_ref().unwrap().1.clone();
    std::fs::write(side.dir.join("held"), b"held").unwrap();
    let holder =
        Talker::start(side.python(READER_HOLDING, &[side.dir.join("held").to_str().unwrap()]), "open");
    let file = side.dir.join("records");
    let mut writer = Talker::start(side.python(RECORDS, &[file.to_str().unwrap(), "2000"]), "0");
    let mut acked = 1;
    while acked < 1000 {
        acked = writer.next().parse::<usize>().unwrap() + 1;
    }
    let service = service_pid(&socket);
    signal(service, libc::SIGSTOP);
    writer.child.kill().unwrap();
    writer.child.wait().unwrap();
    while let Ok(i) = writer.next().parse::<usize>() {
        acked = i + 1;
    }
    signal(service, libc::SIGKILL);
    holder.end("the process that stayed attached");
    let fired = wait_for_service_exit(&socket);
    let data = std::fs::read(&file).unwrap();
    let missing = missing_records(&data, acked);
    assert!(
        missing.is_empty() && fired != Some(true),
        "{} of {acked} acknowledged records missing ({} bytes), watchdog fired: {fired:?}",
        missing.len(),
        data.len()
    );
}
