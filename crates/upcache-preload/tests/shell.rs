//! Shell scripts and coreutils under the shim, with the kernel as the oracle: each script runs
//! in a fresh directory under `bash`, once without the shim and once with it (the shell and
//! every program it starts load it, and the directory is the prefix); the files it leaves,
//! their bytes, its output and its exit status must be the same. Redirections of a shell's
//! builtins reach the file through stdio (libc's internal `write`, which the shim does not
//! see), so these are the cases that lost data: `echo hello > f` left `f` empty.

mod common;

use common::{build_shim, shimmed, total, tree};
use std::path::Path;
use std::process::Command;

/// (name, script). Each runs with its directory as the working directory, and may use the
/// files `seed` (the numbers 1 to 2000, a line each) and `words` (a few lines) there.
const SCRIPTS: &[(&str, &str)] = &[
    ("echo redirect then append", "echo hello > f; echo more >> f"),
    ("printf builtin, several appends", "printf 'a%s\\n' 1 2 3 > f; for i in $(seq 1 40); do echo line$i >> f; done"),
    ("here-document", "cat > f <<EOF\nfirst line\nsecond $((6*7))\nEOF\ncat f >> g; cat <<'EOF' >> g\nraw $HOME\nEOF"),
    ("here-string and read", "cat <<< 'one two' > f; read -r a b < f; echo \"$b $a\" >> f"),
    ("exec 3>>f", "echo start > f; exec 3>>f; echo a >&3; printf b >&3; exec 3>&-; echo end >> f; cat f"),
    ("exec 4>g, then read it back", "exec 4>g; printf x >&4; echo y >&4; exec 4>&-; exec 5<g; read -r l <&5; exec 5<&-; echo \"$l\" > h"),
    ("the shell's own stdout", "exec > out; echo to-out; seq 1 5; echo done"),
    ("stderr onto a file", "{ echo out; ls /nonexistent-upcache; echo again; } > both 2>&1; echo $? > status"),
    ("group and subshell", "{ echo 1; echo 2; } > grp; (echo sub; cat grp) >> grp2; wc -l < grp2 > count"),
    ("noclobber and >|", "set -o noclobber; echo a > f; (echo b > f) 2>/dev/null; echo c >| f; echo d >> f"),
    ("truncate by > of nothing", "seq 1 100 > f; : > f; echo after >> f; > g"),
    ("sort -o in place", "sort -n -r -o seed2 seed; sort -o words words; sort -u seed2 -o seed2"),
    ("tee and tee -a", "seq 1 300 | tee t1 t2 > /dev/null; tee -a t1 < words > /dev/null; tee t3 < seed | tail -n 3"),
    ("sed -i", "cp seed s; sed -i 's/1/one/g' s; sed -i '1d;$d' s; sed -n '5,8p' s > part"),
    ("cp, cat, dd", "cp seed c1; cat seed words > c2; dd if=seed of=c3 bs=7 count=100 2>/dev/null; dd if=words of=c3 conv=notrunc bs=3 seek=2 2>/dev/null"),
    ("truncate, head, tail", "cp seed f; truncate -s 100 f; truncate -s +50 f; head -c 120 f > h; tail -c 30 seed > t"),
    ("awk, cut, tr, uniq", "awk '{ print $1 * 2 }' seed > dbl; cut -c1-2 seed | sort | uniq -c > u; tr a-z A-Z < words > up"),
    ("mv and rm", "cp words w1; mv w1 w2; echo more >> w2; cp w2 w3; rm w2"),
    ("split and join back", "split -l 300 seed part.; cat part.* > joined; rm part.*"),
    ("md5sum of a generated file", "yes abc | head -c 100000 > y; md5sum y > m; cat m"),
];

/// Runs `script` with `bash -c` in `dir` (emptied, then given the seed files); returns its
/// output (stdout, stderr, exit status) and the files it left.
fn run(dir: &Path, script: &str, shim: Option<(&Path, &Path)>) -> (String, Vec<(String, Vec<u8>)>) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let seed: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    std::fs::write(dir.join("seed"), seed).unwrap();
    std::fs::write(dir.join("words"), "pear\napple\nfig\napple\n").unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(dir).env("LC_ALL", "C");
    if let Some((so, stats)) = shim {
        shimmed(&mut cmd, so, dir, "4M").env("UPCACHE_STATS", stats);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("upcache-preload"), "{script}: the shim complained: {stderr}");
    let said = format!("{}--\n{stderr}--\n{:?}", String::from_utf8_lossy(&out.stdout), out.status.code());
    (said, tree(dir))
}

#[test]
fn shell_scripts_leave_the_same_files_with_the_shim_as_without() {
    let tmp = tempfile::tempdir().unwrap();
    let so = build_shim();
    let stats = tmp.path().join("stats");
    let mut failures = Vec::new();
    for (name, script) in SCRIPTS {
        let kernel = run(&tmp.path().join("kernel"), script, None);
        let shim = run(&tmp.path().join("shim"), script, Some((&so, &stats)));
        if kernel.0 != shim.0 {
            failures
                .push(format!("{name}: output differs\n{script}\nkernel: {}\nshim:   {}", kernel.0, shim.0));
        }
        let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        if names(&kernel.1) != names(&shim.1) {
            failures.push(format!(
                "{name}: files differ\n{script}\n{:?}\n{:?}",
                names(&kernel.1),
                names(&shim.1)
            ));
            continue;
        }
        for ((file, want), (_, got)) in kernel.1.iter().zip(&shim.1) {
            if want != got {
                let show = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
                failures.push(format!(
                    "{name}: {file} differs\n{script}\nkernel ({} bytes): {:?}\nshim ({} bytes):   {:?}",
                    want.len(),
                    show(want),
                    got.len(),
                    show(got)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} differences:\n\n{}", failures.len(), failures.join("\n\n"));
    // The shim served these runs: it cached opens and wrote and read through the cache.
    let stats = std::fs::read_to_string(&stats).unwrap();
    let (opens, writes, reads) = (total(&stats, "opens"), total(&stats, "writes"), total(&stats, "reads"));
    assert!(opens >= 40 && writes >= 8 && reads >= 15, "{stats}");
}

/// The issue's own example, with its expected bytes spelled out.
#[test]
fn a_redirected_echo_then_an_append_keep_both_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let so = build_shim();
    let stats = tmp.path().join("stats");
    let (_, files) = run(&tmp.path().join("d"), "echo hello > f; echo more >> f", Some((&so, &stats)));
    let f = files.iter().find(|(n, _)| n == "f").expect("f");
    assert_eq!(String::from_utf8_lossy(&f.1), "hello\nmore\n");
}

/// A shimmed `tail -f` prints the lines that a process without the shim appends (with
/// inotify, and polling). A watchdog ends `tail` after a minute, so that a tail that never
/// sees a line fails the test instead of hanging it.
#[test]
fn a_shimmed_tail_f_follows_an_unshimmed_writer() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().unwrap();
    let so = build_shim();
    for polling in [false, true] {
        let log = tmp.path().join(format!("log-{polling}"));
        std::fs::write(&log, "first\n").unwrap();
        let mut cmd = Command::new("tail");
        cmd.arg("-f").arg("-n").arg("+1");
        if polling {
            cmd.args(["---disable-inotify", "-s", "0.05"]);
        }
        cmd.arg(&log).stdout(std::process::Stdio::piped());
        shimmed(&mut cmd, &so, tmp.path(), "4M");
        let mut tail = cmd.spawn().unwrap();
        let pid = tail.id() as i32;
        let (done, stop) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if stop.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
                // SAFETY: no memory arguments; the child is ours and not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let mut out = BufReader::new(tail.stdout.take().unwrap());
        let mut next = || {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line
        };
        assert_eq!(next(), "first\n", "polling {polling}");
        for i in 0..5 {
            // Appended as another program would: open, write, fsync, close.
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            writeln!(f, "appended {i}").unwrap();
            f.sync_all().unwrap();
            drop(f);
            assert_eq!(next(), format!("appended {i}\n"), "polling {polling}: tail missed a line");
        }
        drop(done);
        watchdog.join().unwrap();
        tail.kill().unwrap();
        tail.wait().unwrap();
    }
}
