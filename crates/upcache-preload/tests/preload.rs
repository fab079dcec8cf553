//! Runs `tests/c/shim_test.c`, a C program checking POSIX file semantics, with and without
//! the shim: the same checks must pass both ways, and with the shim its counters must show
//! that the opens under the prefix, and only those, were cached. Needs a C compiler (`cc`).

mod common;

use common::{beside_the_kernel, build_shim, compile, field};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shim and the C test.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    (build_shim(), compile(dir, "shim_test"))
}

struct Run {
    out: Output,
    text: String,
    stats: String,
}

/// Runs the C test in fresh directories, with `env` set (and LD_PRELOAD if `shim`).
fn run(tmp: &Path, bin: &Path, shim: Option<&Path>, env: &[(&str, &str)]) -> Run {
    let prefix = tmp.join("prefix");
    let outside = tmp.join("outside");
    for d in [&prefix, &outside] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let stats = tmp.join("stats");
    let _ = std::fs::remove_file(&stats);
    let mut cmd = Command::new(bin);
    cmd.arg(&prefix).arg(&outside).env("UPCACHE_STATS", &stats).env("TMPDIR", tmp);
    cmd.env("UPCACHE_PREFIX", &prefix).env("UPCACHE_MEMORY", "16M");
    common::own_service(&mut cmd);
    if let Some(shim) = shim {
        cmd.env("LD_PRELOAD", shim);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    // Written by an exit handler that ran after the shim's: it must be in the file.
    if out.status.success() {
        let late = std::fs::read(prefix.join("atexit")).unwrap();
        assert_eq!(late, b"written at exit", "shim {shim:?}");
    }
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let stats = std::fs::read_to_string(&stats).unwrap_or_default();
    Run { out, text, stats }
}

/// "opens under prefix: N" from the C test's output.
fn expected_opens(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("opens under prefix: "))
        .expect("the count")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn posix_semantics_hold_with_the_shim_and_it_caches_only_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let (shim, bin) = build(tmp.path());

    let plain = run(tmp.path(), &bin, None, &[]);
    assert!(plain.out.status.success() && plain.text.contains("all checks passed"), "{}", plain.text);
    assert_eq!(plain.stats, "", "no shim, no counters");

    // O_DIRECT backing files (the default), then buffered ones: the same checks.
    let buffered = run(tmp.path(), &bin, Some(&shim), &[("UPCACHE_DIRECT", "0")]);
    assert!(
        buffered.out.status.success() && buffered.text.contains("all checks passed"),
        "{}",
        buffered.text
    );
    // A private cache, then the shared one (the default): the same checks, and these counts.
    let private = run(tmp.path(), &bin, Some(&shim), &[("UPCACHE_SHARED", "0")]);
    assert!(private.out.status.success() && private.text.contains("all checks passed"), "{}", private.text);
    let main = private.stats.lines().max_by_key(|l| field(l, "opens")).expect("a stats line");
    assert!(field(main, "reopened") > 0, "pages kept after a close: {main}");
    let cached = run(tmp.path(), &bin, Some(&shim), &[]);
    assert!(cached.out.status.success() && cached.text.contains("all checks passed"), "{}", cached.text);
    // One line from the process, and one from each child that opened files under the prefix.
    let lines: Vec<&str> = cached.stats.lines().collect();
    let main = lines.iter().max_by_key(|l| field(l, "opens")).expect("a stats line");
    // Every open under the prefix is cached, but those of files handed to libc for good (a
    // stream or a mapping of them was made).
    let demoted = field(main, "demoted_opens");
    assert_eq!(field(main, "opens") + demoted, expected_opens(&cached.text), "{}", cached.stats);
    assert!(demoted > 0 && demoted < 20, "{main}");
    assert_eq!(field(main, "uncached"), 0, "{}", cached.stats);
    assert!(field(main, "write_bytes") > 1 << 20 && field(main, "read_bytes") > 0, "{main}");
    assert!(field(main, "syncs") >= 2, "{main}");
    // The children (forked ones, and `cat` under system(3)) open one file each (a forked
    // child leaves to libc the files its parent handed to libc at the fork).
    let one = |l: &&&str| field(l, "opens") + field(l, "demoted_opens") == 1;
    assert!(lines.len() <= 4 && lines.iter().filter(one).count() == lines.len() - 1, "{}", cached.stats);
    // No private state directories (the private cache of old made one each).
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("upcache-shim"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_shim_that_cannot_start_passes_everything_through() {
    let tmp = tempfile::tempdir().unwrap();
    let (shim, bin) = build(tmp.path());
    // (variable, value, what is said, on a private cache)
    for (key, value, says, private) in [
        ("UPCACHE_MEMORY", "lots", "UPCACHE_MEMORY=lots", false),
        ("UPCACHE_PREFIX", "/nonexistent/upcache", "UPCACHE_PREFIX=/nonexistent/upcache", false),
        // Too small for the cache: starting fails after the settings were read.
        ("UPCACHE_MEMORY", "4K", "cannot start", false),
        ("UPCACHE_MEMORY", "4K", "a cache of this process", true),
        ("UPCACHE_SHARED", "maybe", "UPCACHE_SHARED=maybe", false),
        ("UPCACHE_SOCKET", "/proc/upcache/cache.sock", "cannot start", false),
        ("UPCACHE_DIRECT", "maybe", "UPCACHE_DIRECT=maybe", false),
        ("UPCACHE_DIRTY_RATIOS", "half", "UPCACHE_DIRTY_RATIOS=half", false),
        ("UPCACHE_DIRTY_EXPIRE", "soon", "UPCACHE_DIRTY_EXPIRE=soon", false),
        // Read, then refused by the service the shim starts, or by the private cache.
        ("UPCACHE_DIRTY_RATIOS", "0.6,0.5", "cannot start", false),
        ("UPCACHE_DIRTY_RATIOS", "0.6,0.5", "cannot start", true),
        ("UPCACHE_FLUSH_INTERVAL", "0s", "cannot start", false),
    ] {
        let private = if private { &[("UPCACHE_SHARED", "0")][..] } else { &[] };
        let r = run(tmp.path(), &bin, Some(&shim), &[&[(key, value)][..], private].concat());
        assert!(r.out.status.success() && r.text.contains("all checks passed"), "{key}={value}: {}", r.text);
        assert!(
            r.text.contains("passing everything through") && r.text.contains(says),
            "{key}={value}: {}",
            r.text
        );
        assert_eq!(r.stats, "", "{key}={value}: nothing cached");
    }
    // No prefix: silent, and nothing cached.
    let r = run(tmp.path(), &bin, Some(&shim), &[("UPCACHE_PREFIX", "")]);
    assert!(r.out.status.success() && !r.text.contains("upcache-preload"), "{}", r.text);
    assert_eq!(r.stats, "");
}

/// UPCACHE_DIRTY_RATIOS, UPCACHE_DIRTY_EXPIRE, UPCACHE_FLUSH_INTERVAL and the technique
/// switches (UPCACHE_RANGE_LOCK, UPCACHE_BUNDLING, UPCACHE_READAHEAD) and UPCACHE_PAGE_SIZE
/// set the service the shim
/// starts, as `upcache serve`'s flags do (its status says so); a process attaching later with
/// other values follows the running service's, and is told so.
#[test]
fn write_back_settings_reach_the_service_the_shim_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let so = build_shim();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f"), b"x").unwrap();
    let socket =
        std::env::temp_dir().join(format!("upcache-test-{}-write-back/cache.sock", std::process::id()));
    let python = |ratios: &str, range_lock: &str| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", "import os, sys; os.pwrite(os.open(sys.argv[1], os.O_RDWR), b'y', 0); print('open', flush=True); sys.stdin.read()"])
            .arg(data.join("f"))
            .env("LD_PRELOAD", &so)
            .env("UPCACHE_PREFIX", &data)
            .env("UPCACHE_SOCKET", &socket)
            .env("UPCACHE_IDLE", "1")
            .env("UPCACHE_DIRTY_RATIOS", ratios)
            .env("UPCACHE_DIRTY_EXPIRE", "5s")
            .env("UPCACHE_FLUSH_INTERVAL", "250ms")
            .env("UPCACHE_RANGE_LOCK", range_lock)
            .env("UPCACHE_BUNDLING", "off")
            .env("UPCACHE_READAHEAD", "64k")
            .env("UPCACHE_PAGE_SIZE", "16k")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        assert_eq!(line.trim(), "open");
        child
    };
    let first = python("0.1,0.2", "off");
    let second = python("0.3,0.4", "on");
    let status = upcache::shared::serve::status_json(&socket).unwrap();
    for want in [
        "\"dirty_ratios\":[0.1,0.2]",
        "\"dirty_expire_ms\":5000",
        "\"flush_interval_ms\":250",
        "\"range_lock\":false",
        "\"run_merging\":true",
        "\"bundling\":false",
        "\"readahead\":65536",
        "\"page_size\":16384",
    ] {
        assert!(status.contains(want), "{want} in {status}");
    }
    let text = upcache::shared::serve::status(&socket).unwrap();
    assert!(text.contains("dirty_ratios 0.1,0.2\n"), "{text}");
    let mut said = Vec::new();
    for mut child in [first, second] {
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        said.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    assert_eq!(said[0], "", "the first started the service with its settings");
    assert!(
        said[1].contains("UPCACHE_DIRTY_RATIOS asks for 0.3,0.4")
            && said[1].contains("UPCACHE_RANGE_LOCK for on")
            && said[1].contains("runs with dirty ratios 0.1,0.2")
            && said[1].contains("range lock off"),
        "{}",
        said[1]
    );
    let _ = std::fs::remove_dir_all(socket.parent().unwrap());
}

/// The kernel as the oracle: random sequences of opens, closes, dups, reads and writes (plain,
/// positioned and vectored), seeks, truncations, fallocate, syncs, stats and DONTNEED advice
/// on 3 files through up to 8 descriptors (`tests/c/shim_diff.c`), with a cache of 64 pages
/// (far smaller than the files; of 4 KiB, and of 16 KiB every third seed), must print the same results, data checksums and final OS
/// files with the shim as without it. (It found that O_RDONLY | O_TRUNC truncates, and a
/// short O_DIRECT read racing a write-back past the end of the file.)
#[test]
fn random_operations_give_the_kernels_results() {
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let bin = compile(tmp.path(), "shim_diff");
    let seeds: u64 = std::env::var("UPCACHE_SHIM_DIFF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    for seed in 1..=seeds {
        let mut transcripts = Vec::new();
        for with_shim in [false, true] {
            let dir = tmp.path().join(if with_shim { "shim" } else { "kernel" });
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let mut cmd = Command::new(&bin);
            cmd.arg(&dir).arg(seed.to_string()).arg("2000").env("TMPDIR", tmp.path());
            let stats = tmp.path().join("diff.stats");
            let _ = std::fs::remove_file(&stats);
            if with_shim {
                common::shimmed(&mut cmd, &shim, &dir, "256K").env("UPCACHE_STATS", &stats);
                // Every other seed on a private cache; every third on 64 pages of 16 KiB.
                if seed % 2 == 0 {
                    cmd.env("UPCACHE_SHARED", "0");
                }
                if seed % 3 == 0 {
                    cmd.env("UPCACHE_PAGE_SIZE", "16K").env("UPCACHE_MEMORY", "1M");
                }
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "seed {seed}: {}", String::from_utf8_lossy(&out.stderr));
            transcripts.push(String::from_utf8(out.stdout).unwrap());
            if with_shim {
                // The cache served the run, not libc after a demotion.
                let line = std::fs::read_to_string(&stats).unwrap();
                let (opens, reads, writes) =
                    (field(&line, "opens"), field(&line, "reads"), field(&line, "writes"));
                assert!(opens >= 20 && reads >= 100 && writes >= 100, "seed {seed}: {line}");
            }
        }
        if transcripts[0] != transcripts[1] {
            let first = transcripts[0].lines().zip(transcripts[1].lines()).position(|(a, b)| a != b);
            let line = first.unwrap_or(transcripts[0].lines().count().min(transcripts[1].lines().count()));
            let around =
                |t: &str| t.lines().skip(line.saturating_sub(3)).take(6).collect::<Vec<_>>().join("\n");
            panic!(
                "seed {seed}: the shim differs from the kernel at line {}:\nkernel:\n{}\nshim:\n{}",
                line + 1,
                around(&transcripts[0]),
                around(&transcripts[1])
            );
        }
    }
}

/// A file one process demotes (it maps it) while another has it cached with a dirty page
/// (`tests/py/demote_two.py`): the demotion writes the other's page back and stops the
/// caching in both, so the other reads the mapped bytes and its later write and close keep
/// them. With a demotion of one process only, the other read its stale page.
#[test]
fn a_demotion_in_one_process_stops_the_caching_in_every_process() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/demote_two.py");
    let dir = tmp.path().join("prefix");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f");
    std::fs::write(&file, vec![1u8; 8192]).unwrap();
    let socket = std::env::temp_dir().join(format!("upcache-test-{}-demote/cache.sock", std::process::id()));
    let python = |role: &str| {
        let mut cmd = Command::new("python3");
        cmd.arg(&script).arg(&file).arg(role);
        common::shimmed(&mut cmd, &shim, &dir, "16M").env("UPCACHE_SOCKET", &socket);
        cmd
    };
    let mut holder = python("holder")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mapper = python("mapper").output().unwrap();
    assert!(mapper.status.success(), "mapper: {}", String::from_utf8_lossy(&mapper.stderr));
    holder.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = holder.wait_with_output().unwrap();
    line.clear();
    said.read_line(&mut line).unwrap();
    assert!(
        out.status.success() && line == "done\n",
        "holder: {line}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[..7], b"OHTSIDE");
    assert_eq!(&bytes[100..115], b"from the holder");
    assert_eq!(bytes.len(), 8192);
}

/// Every way bytes reach a file past the shim's read and write calls (`tests/c/shim_bypass.c`):
/// Two processes take turns (a token over pipes) on 3 shared files, each through its own
/// descriptors (`tests/c/shim_two.c`): every read, size and end of file they see, and the
/// files left, must be the kernel's, as with one page cache. With the shim each process
/// attaches to one shared cache of 64 pages (far smaller than the files).
#[test]
fn two_processes_see_each_others_writes_as_with_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let bin = compile(tmp.path(), "shim_two");
    for seed in 1..=8u64 {
        let mut runs = Vec::new();
        for with_shim in [false, true] {
            let (mut cmd, dir) = beside_the_kernel(tmp.path(), &bin, with_shim.then_some(shim.as_path()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let stats = tmp.path().join("two.stats");
            let _ = std::fs::remove_file(&stats);
            cmd.arg(seed.to_string()).arg("1500");
            if with_shim {
                cmd.env("UPCACHE_MEMORY", "256K").env("UPCACHE_STATS", &stats);
            }
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success() && stdout.ends_with("done\n"),
                "seed {seed}, shim {with_shim}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if with_shim {
                // Both processes served their files from the cache.
                let lines = std::fs::read_to_string(&stats).unwrap();
                assert_eq!(lines.lines().filter(|l| field(l, "opens") == 6).count(), 2, "{lines}");
            }
            runs.push((stdout, common::tree(&dir)));
        }
        let (kernel, shimmed) = (&runs[0], &runs[1]);
        if let Some((k, s)) = kernel.0.lines().zip(shimmed.0.lines()).find(|(k, s)| k != s) {
            panic!("seed {seed}: the shim differs from the kernel:\nkernel: {k}\nshim:   {s}");
        }
        assert_eq!(kernel.0.lines().count(), shimmed.0.lines().count(), "seed {seed}");
        for ((name, k), (_, s)) in kernel.1.iter().zip(&shimmed.1) {
            assert!(k == s, "seed {seed}: {name} differs");
        }
    }
}

/// sendfile, copy_file_range and splice into and out of cached files, POSIX and Linux AIO,
/// dprintf and vdprintf, a cached descriptor copied onto a stream's or opened onto stdout,
/// EFBIG and RLIMIT_FSIZE, and an io_uring. The transcript and the files left must be the
/// kernel's.
#[test]
fn ways_around_read_and_write_give_the_kernels_results() {
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let bin = compile(tmp.path(), "shim_bypass");
    let stats = tmp.path().join("bypass.stats");
    let mut runs = Vec::new();
    for with_shim in [false, true] {
        let (mut cmd, dir) = beside_the_kernel(tmp.path(), &bin, with_shim.then_some(shim.as_path()));
        if with_shim {
            cmd.env("UPCACHE_STATS", &stats);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success() && stdout.ends_with("done\n"), "shim {with_shim}:\n{stdout}{stderr}");
        runs.push((stdout, stderr, common::tree(&dir)));
    }
    let (kernel, shimmed) = (&runs[0], &runs[1]);
    for (k, s) in kernel.0.lines().zip(shimmed.0.lines()) {
        assert_eq!(k, s, "the shim differs from the kernel:\nkernel:\n{}\nshim:\n{}", kernel.0, shimmed.0);
    }
    assert_eq!(kernel.0.lines().count(), shimmed.0.lines().count());
    for ((name, k), (_, s)) in kernel.2.iter().zip(&shimmed.2) {
        assert!(k == s, "{name} differs");
    }
    // The io_uring made the shim stop caching, and it said so; nothing else was said.
    assert!(shimmed.1.contains("io_uring") && shimmed.1.lines().count() == 1, "{}", shimmed.1);
    let line = std::fs::read_to_string(&stats).unwrap();
    assert!(field(&line, "opens") >= 10 && field(&line, "writes") >= 10, "{line}");
}
