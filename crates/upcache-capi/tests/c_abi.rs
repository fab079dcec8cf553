//! Builds the C tests (`tests/c/test_capi.c`, `tests/c/test_shared.c`) and the C example
//! against the static library and runs them: the C ABI as a C program sees it. Needs a C
//! compiler (`cc`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/debug`, where `cargo build` puts `libupcache_capi.a` (tests run from its `deps/`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).expect("tests run from target/<profile>/deps").to_path_buf()
}

fn build_and_run(source: &str, out: &Path, arg: &Path) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `cargo test` builds the crate as an rlib only: build the static library it left stale
    // (cargo has released its lock by the time tests run).
    let built =
        Command::new(env!("CARGO")).args(["build", "-q", "-p", "upcache-capi", "--lib"]).status().unwrap();
    assert!(built.success(), "cargo build -p upcache-capi failed");
    let lib = target_dir().join("libupcache_capi.a");
    assert!(lib.exists(), "{} missing: cargo builds it with the test", lib.display());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-pthread"])
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join(source))
        .arg(&lib)
        .args(["-ldl", "-lm", "-o"])
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e} (a C compiler is needed)"));
    assert!(status.success(), "compiling {source} failed");
    let run = Command::new(out).arg(arg).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{source} failed:\n{text}");
    text
}

#[test]
fn two_c_processes_share_the_cache_they_attach_to() {
    let tmp = tempfile::tempdir().unwrap();
    let out = build_and_run("tests/c/test_shared.c", &tmp.path().join("test_shared"), tmp.path());
    assert!(out.contains("shared cache ok"), "{out}");
}

#[test]
fn the_c_test_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = build_and_run("tests/c/test_capi.c", &tmp.path().join("test_capi"), &tmp.path().join("array"));
    assert!(out.contains("all checks passed"), "{out}");
}

#[test]
fn the_c_example_runs_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("example");
    let root = tmp.path().join("array");
    let first = build_and_run("examples/example.c", &bin, &root);
    assert!(first.contains("read back \"hello from C\""), "{first}");
    // The second run opens the array and the file the first one created.
    let run = Command::new(&bin).arg(&root).output().unwrap();
    assert!(run.status.success() && String::from_utf8_lossy(&run.stdout).contains("hello from C"));
}

/// The shared library names the ABI it offers (its soname), so a program linked against one
/// never loads an incompatible one.
#[test]
fn the_shared_library_has_a_versioned_soname() {
    let built =
        Command::new(env!("CARGO")).args(["build", "-q", "-p", "upcache-capi", "--lib"]).status().unwrap();
    assert!(built.success(), "cargo build -p upcache-capi failed");
    let so = target_dir().join("libupcache_capi.so");
    let out = Command::new("readelf").arg("-d").arg(&so).output().expect("readelf (binutils) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let abi = if major == "0" { format!("0.{}", env!("CARGO_PKG_VERSION_MINOR")) } else { major.to_string() };
    assert!(text.contains(&format!("Library soname: [libupcache_capi.so.{abi}]")), "{text}");
}

/// The documented install (`install.sh`) into a fresh prefix, then the C example built with
/// nothing but `pkg-config --cflags --libs upcache`, run against the installed shared library.
#[test]
fn the_example_builds_with_pkg_config_after_the_install() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built =
        Command::new(env!("CARGO")).args(["build", "-q", "-p", "upcache-capi", "--lib"]).status().unwrap();
    assert!(built.success(), "cargo build -p upcache-capi failed");
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    let install = Command::new(dir.join("install.sh")).arg(&prefix).arg(target_dir()).output().unwrap();
    assert!(install.status.success(), "install.sh failed: {}", String::from_utf8_lossy(&install.stderr));
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "upcache"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("pkg-config runs");
    assert!(pc.status.success(), "pkg-config: {}", String::from_utf8_lossy(&pc.stderr));
    let flags = String::from_utf8(pc.stdout).unwrap();
    assert!(flags.contains("-lupcache_capi"), "{flags}");
    let bin = tmp.path().join("example");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg(dir.join("examples/example.c"))
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cc {} with pkg-config's flags failed",
        dir.join("examples/example.c").display()
    );
    let run = Command::new(&bin)
        .arg(tmp.path().join("array"))
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .unwrap();
    assert!(
        run.status.success() && String::from_utf8_lossy(&run.stdout).contains("hello from C"),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}
