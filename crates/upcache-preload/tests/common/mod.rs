//! What the shim's integration tests share: building the shim as the cdylib that programs
//! load, compiling the C test programs, and reading the shim's counters.

#![allow(dead_code)] // each test binary uses its own part

pub mod side;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where `cargo build` puts the shim (tests run from its `deps/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).expect("tests run from target/<profile>/deps").to_path_buf()
}

/// The shim, built as the cdylib (`cargo test` builds the rlib only); or the one
/// `UPCACHE_TEST_SHIM` names, to run the tests against another build (an older commit's, to
/// see a test fail where it should).
pub fn build_shim() -> PathBuf {
    if let Some(other) = std::env::var_os("UPCACHE_TEST_SHIM") {
        return PathBuf::from(other);
    }
    // Built with the tests' own profile (`target/<profile>`, `debug` being `dev`'s), which is
    // where it is looked for: another profile's build would leave a stale shim there.
    let dir = target_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let built = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "upcache-preload", "--lib", "--profile", profile])
        .status()
        .unwrap();
    assert!(built.success(), "cargo build -p upcache-preload --profile {profile} failed");
    let shim = dir.join("libupcache_preload.so");
    assert!(shim.exists(), "{} missing", shim.display());
    shim
}

/// `tests/c/<name>.c`, compiled into `dir`.
pub fn compile(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e} (a C compiler is needed)"));
    assert!(status.success(), "compiling {name}.c failed");
    bin
}

/// Makes `cmd` load the shim `so` and cache what is under `prefix` in `memory` (a size), in a
/// shared cache of its own ([`own_service`]).
pub fn shimmed<'a>(cmd: &'a mut Command, so: &Path, prefix: &Path, memory: &str) -> &'a mut Command {
    own_service(cmd.env("LD_PRELOAD", so).env("UPCACHE_PREFIX", prefix).env("UPCACHE_MEMORY", memory))
}

/// Makes the shim in `cmd` (and its children) attach to a shared cache of their own, not the
/// machine's: a socket in a fresh directory outside any prefix, whose service the first
/// of them starts and which exits a second after the last detaches.
pub fn own_service(cmd: &mut Command) -> &mut Command {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed); // Relaxed: a unique number
    let socket = std::env::temp_dir().join(format!("upcache-test-{}-{n}/cache.sock", std::process::id()));
    cmd.env("UPCACHE_SOCKET", socket).env("UPCACHE_IDLE", "1")
}

/// `bin DIR`, with DIR a fresh directory under `tmp` (`shim` or `kernel`), run with the shim
/// `so` caching DIR in 16 MiB if it is given: one side of a test against the kernel. Returns
/// the command and DIR.
pub fn beside_the_kernel(tmp: &Path, bin: &Path, so: Option<&Path>) -> (Command, PathBuf) {
    let dir = tmp.join(if so.is_some() { "shim" } else { "kernel" });
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg(&dir);
    if let Some(so) = so {
        shimmed(&mut cmd, so, &dir, "16M");
    }
    (cmd, dir)
}

/// The value of `key=` in a stats line.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .parse()
        .unwrap()
}

/// The sum of `key=` over every stats line (one per process that cached files).
pub fn total(stats: &str, key: &str) -> u64 {
    stats.lines().map(|l| field(l, key)).sum()
}

/// Every regular file under `dir` (recursively), by path relative to it, with its bytes.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                todo.push(e.path());
            } else if ty.is_file() {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}
