//! ENOSPC at write time, as the kernel gives it (issue 20): a program copies 16 MiB in 64 KiB
//! `write(2)`s onto an 8 MiB tmpfs (mounted in a mount namespace of its own, `unshare -m`),
//! without the shim, then with it on the shared cache and on a private one. With the shim the
//! same write must fail, with ENOSPC, the writes before it must all have been cached (counted
//! by UPCACHE_STATS), close must succeed, and every byte acknowledged must be in the file.
//! Before the cache reserved space, every write succeeded and the error came at close.
//! `dd` too, the same write and message (it writes its output through stdout, which the shim
//! leaves to libc).

mod common;

use std::process::Command;

use common::{build_shim, field};

const WRITER: &str = r#"
import os, sys
src, dst = open(sys.argv[1], "rb").read(), sys.argv[2]
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n = 0
try:
    while n * 65536 < len(src):
        if os.write(fd, src[n * 65536:(n + 1) * 65536]) != 65536:
            print(f"short write {n}")
            break
        n += 1
    print(f"wrote {n} none")
except OSError as e:
    print(f"wrote {n} errno {e.errno}")
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print(f"close errno {e.errno}")
"#;

#[test]
fn writes_onto_a_full_file_system_fail_at_the_same_write_as_with_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let shim = build_shim();
    let src = tmp.path().join("src");
    let pattern: Vec<u8> = (0..16u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&src, &pattern).unwrap();
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let out = tmp.path().join("out");
    let socket = std::env::temp_dir().join(format!("upcache-test-{}-space/cache.sock", std::process::id()));
    // One shell in its own mount namespace: the tmpfs goes with it.
    let script = r#"
        mount -t tmpfs -o size=8m tmpfs "$SMALL" || exit 90
        run() {
            name=$1; shift
            "$@" python3 -c "$WRITER" "$SRC" "$SMALL/$name"
            cp "$SMALL/$name" "$OUT.$name"; rm -f "$SMALL/$name"
            echo "--"
        }
        run kernel env
        run shared env LD_PRELOAD="$SHIM" UPCACHE_PREFIX="$SMALL" UPCACHE_STATS="$OUT.shared.stats"
        run private env LD_PRELOAD="$SHIM" UPCACHE_PREFIX="$SMALL" UPCACHE_SHARED=0 UPCACHE_STATS="$OUT.private.stats"
        dd_run() {
            name=$1; shift
            "$@" dd if="$SRC" of="$SMALL/$name" bs=64k 2>&1 | grep -E "records out|^dd:" | sed "s|$SMALL/$name|FILE|"
            rm -f "$SMALL/$name"; echo "=="
        }
        dd_run dd-kernel env
        dd_run dd-shim env LD_PRELOAD="$SHIM" UPCACHE_PREFIX="$SMALL"
    "#;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let run = Command::new("unshare")
        .args(if root { &["-m"][..] } else { &["-rm"][..] })
        .args(["sh", "-c", script])
        .env("SMALL", &small)
        .env("SRC", &src)
        .env("SHIM", &shim)
        .env("OUT", &out)
        .env("WRITER", WRITER)
        .env("UPCACHE_SOCKET", &socket)
        .env("UPCACHE_IDLE", "1")
        .env("UPCACHE_MEMORY", "64M")
        .output()
        .expect("unshare (util-linux) is needed");
    let text = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{text}");
    let runs: Vec<&str> = text.split("--\n").collect();
    assert_eq!(runs.len(), 4, "{text}");
    // dd, the issue's own example, writes through its stdout, which the shim leaves to libc:
    // the same write fails, with the same message naming the file.
    let dd: Vec<&str> = runs[3].split("==\n").collect();
    assert!(dd[0].contains("FILE': No space left on device"), "{text}");
    assert_eq!(dd[1], dd[0], "dd through the shim:\n{text}");
    let kernel = runs[0];
    assert!(kernel.contains(&format!(" errno {}", libc::ENOSPC)), "the kernel's writes must fail: {text}");
    for (i, name) in [(1, "shared"), (2, "private")] {
        assert_eq!(runs[i], kernel, "{name}: not as the kernel:\n{text}");
        let wrote: usize = kernel.split_whitespace().nth(1).unwrap().parse().unwrap();
        let stats = std::fs::read_to_string(format!("{}.{name}.stats", out.display())).unwrap();
        assert!(stats.lines().any(|l| field(l, "writes") >= wrote as u64), "{name}: not cached: {stats}");
        // Every byte acknowledged is in the file.
        let kept = std::fs::read(format!("{}.{name}", out.display())).unwrap();
        let acked = wrote * 65536;
        assert!(
            kept.len() >= acked && kept[..acked] == pattern[..acked],
            "{name}: the bytes written:\n{text}"
        );
    }
}
