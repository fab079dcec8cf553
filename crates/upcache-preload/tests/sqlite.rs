//! SQLite shared by long-lived processes through the shim (issue 17): 2 and 4 Python
//! processes each run 500 short transactions on one database, 10 rounds in a row, every row
//! present and `integrity_check` ok each time (`tests/py/sqlite_multi.py`). With a private
//! cache per process the same run reports "database disk image is malformed".

mod common;

use std::path::Path;
use std::process::Command;

use common::{build_shim, field, shimmed};

fn python_has_sqlite() -> bool {
    Command::new("python3").args(["-c", "import sqlite3"]).status().is_ok_and(|s| s.success())
}

#[test]
fn processes_sharing_a_sqlite_database_through_the_shim_keep_it_whole() {
    // CI installs python3 (.ci/run); a missing one fails here, not silently.
    assert!(python_has_sqlite(), "python3 with its sqlite3 module is needed");
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sqlite_multi.py");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let stats = tmp.path().join("stats");
    for procs in [2, 4] {
        for round in 0..10 {
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
