//! SQLite shared by long-lived processes through the shim (issue 17): 2 and 4 Python
//! processes each run 500 short transactions on one database, rounds in a row, every row
//! present and `integrity_check` ok each time (`tests/py/sqlite_multi.py`). With a private
//! cache per process the same run reports "database disk image is malformed". And one
//! process on the library API (SQLite over the C ABI, `tests/c/sqlite_lib.c`) beside one
//! through the shim, rounds of 500 transactions each. Each runs 2 rounds in the test command
//! and 10 in its `long_` variant (ignored; `.ci/run`'s long step).

mod common;

use std::path::Path;
use std::process::Command;

use common::{build_shim, field, shimmed};

fn python_has_sqlite() -> bool {
    Command::new("python3").args(["-c", "import sqlite3"]).status().is_ok_and(|s| s.success())
}

#[test]
fn processes_sharing_a_sqlite_database_through_the_shim_keep_it_whole() {
    python_processes_share_a_database(2);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_processes_sharing_a_sqlite_database_through_the_shim_keep_it_whole() {
    python_processes_share_a_database(10);
}

fn python_processes_share_a_database(rounds: usize) {
    // CI installs python3 (.ci/run); a missing one fails here, not silently.
    assert!(python_has_sqlite(), "python3 with its sqlite3 module is needed");
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sqlite_multi.py");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let stats = tmp.path().join("stats");
    for procs in [2, 4] {
        for round in 0..rounds {
            let _ = std::fs::remove_file(&stats);
            let mut cmd = Command::new("python3");
            cmd.arg(&script).arg(data.join("t.db")).arg(procs.to_string()).arg("500");
            shimmed(&mut cmd, &shim, &data, "64M").env("UPCACHE_STATS", &stats);
            let out = cmd.output().unwrap();
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{procs} processes, round {round}: {text}");
            // Every worker served its database from the cache.
            let lines = std::fs::read_to_string(&stats).unwrap();
            let served = lines.lines().filter(|l| field(l, "writes") >= 500).count();
            assert!(served >= procs, "{procs} processes, round {round}: {lines}");
        }
    }
}

/// `tests/c/sqlite_lib.c` (SQLite on the C ABI through a VFS), compiled against the C ABI's
/// static library and the system's SQLite into `dir`.
fn build_sqlite_lib(dir: &Path) -> std::path::PathBuf {
    let built =
        Command::new(env!("CARGO")).args(["build", "-q", "-p", "upcache-capi", "--lib"]).status().unwrap();
    assert!(built.success(), "cargo build -p upcache-capi failed");
    let capi = Path::new(env!("CARGO_MANIFEST_DIR")).join("../upcache-capi");
    let bin = dir.join("sqlite_lib");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(capi.join("include"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/sqlite_lib.c"))
        .arg(common::target_dir().join("libupcache_capi.a"))
        .args(["-lsqlite3", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e} (a C compiler is needed)"));
    // CI installs libsqlite3-dev (.ci/run).
    assert!(status.success(), "compiling sqlite_lib.c failed (are sqlite3.h and libsqlite3 installed?)");
    bin
}

/// Exits with its output if `cmd` fails.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what}: {text}");
    text
}

/// One process on the library API (SQLite through a VFS over the C ABI) and one through the
/// shim (Python's sqlite3) each run 500 transactions on one database at the same time, round
/// after round: every row present and `integrity_check` ok, seen by either, and in the OS
/// file once the cache has let go.
#[test]
fn a_library_process_and_a_shim_process_share_a_sqlite_database() {
    library_and_shim_share_a_database(2);
}

#[test]
#[ignore = "long variant: .ci/run's long step runs it"]
fn long_a_library_process_and_a_shim_process_share_a_sqlite_database() {
    library_and_shim_share_a_database(10);
}

fn library_and_shim_share_a_database(rounds: usize) {
    assert!(python_has_sqlite(), "python3 with its sqlite3 module is needed");
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let lib = build_sqlite_lib(tmp.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sqlite_multi.py");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("t.db");
    // Both kinds of process attach to one service, on a socket outside the prefix.
    let socket = std::env::temp_dir()
        .join(format!("upcache-test-{}-sqlite-lib-{rounds}/cache.sock", std::process::id()));
    let python = |args: &[&str]| {
        let mut cmd = Command::new("python3");
        cmd.arg(&script).arg(&db).args(args);
        shimmed(&mut cmd, &shim, &data, "64M").env("UPCACHE_SOCKET", &socket);
        cmd
    };
    let library = |args: &[&str]| {
        let mut cmd = Command::new(&lib);
        cmd.arg(&socket).arg(&db).args(args);
        cmd
    };
    // A shimmed process that stays attached for the whole test starts the service, which
    // then leaves a second after the test (the library would start one that stays a minute).
    let mut holder = Command::new("python3");
    holder.args(["-c", "import sys; f = open(sys.argv[1], 'wb'); f.write(b'x'); f.flush(); print('ready', flush=True); sys.stdin.read()"]);
    holder.arg(data.join("holder"));
    shimmed(&mut holder, &shim, &data, "64M").env("UPCACHE_SOCKET", &socket);
    let mut holder =
        holder.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    for round in 0..rounds {
        for suffix in ["", "-journal"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        run_ok(&mut library(&["init"]), "init");
        let lib_worker = library(&["work", "0", "500"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let shim_worker =
            run_ok(&mut python(&["worker", "1", "500"]), &format!("round {round}, the shim's worker"));
        let out = lib_worker.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}, the library's worker: {}{shim_worker}",
            String::from_utf8_lossy(&out.stderr)
        );
        run_ok(&mut library(&["check", "1000"]), &format!("round {round}, checked by the library"));
        run_ok(&mut python(&["check", "1000"]), &format!("round {round}, checked through the shim"));
    }
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    // Every process has let go: the OS file alone holds every row.
    let mut kernel = Command::new("python3");
    kernel.arg(&script).arg(&db).args(["check", "1000"]);
    run_ok(&mut kernel, "checked without the cache");
}
