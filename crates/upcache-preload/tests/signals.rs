//! A writer killed by a fatal signal keeps what `write` accepted (`tests/c/shim_signals.c`):
//! sent by another process, raised, a real fault, `abort`, a broken pipe, a program's handler
//! that chains to the default, another thread writing meanwhile; and a signal the program
//! handles itself stays the program's. Run without the shim (the kernel's answer) and with it,
//! where every child's lines must still have been in the cache, not the OS file, when it died.

mod common;

use common::{beside_the_kernel, build_shim, compile};

#[test]
fn writers_killed_by_signals_keep_every_line() {
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let bin = compile(tmp.path(), "shim_signals");
    // Without the shim, with it on the shared cache, and on a private one (which the process
    // takes with it: the shim must write back before it dies).
    for (with_shim, private) in [(false, false), (true, false), (true, true)] {
        let mut cmd = beside_the_kernel(tmp.path(), &bin, with_shim.then_some(shim.as_path())).0;
        if private {
            cmd.env("UPCACHE_SHARED", "0");
        }
        let out = cmd.output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && text.contains("all checks passed"),
            "shim {with_shim}, private {private}:\n{text}"
        );
        let cases: Vec<&str> = text.lines().filter(|l| l.contains(" held=")).collect();
        assert_eq!(cases.len(), 16, "{text}");
        // With the shim the lines were in the cache only (the test would pass vacuously if the
        // shim had left the file to the kernel); without it, in the OS file.
        let held = if with_shim { "held=y" } else { "held=n" };
        assert!(cases.iter().all(|l| l.contains(held)), "shim {with_shim}, private {private}:\n{text}");
        assert!(!text.contains("upcache-preload"), "the shim complained:\n{text}");
    }
}
