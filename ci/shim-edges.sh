#!/usr/bin/env bash
# Issue 21's figures by hand, with the kernel side by side (bench/RESULTS.md): a writer killed
# 2 s after 1000 write(2)s, per fatal signal; a shimmed `tail -f` following an unshimmed
# writer (latency per line); pwrite past the file system's largest file. Usage:
# ci/shim-edges.sh [DIR]   (default a temporary directory; DIR's file system decides the limit)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p upcache-preload --lib
so="$PWD/target/release/libupcache_preload.so"
root="${1:-$(mktemp -d)}"
mkdir -p "$root/kernel" "$root/shim"

echo "== a writer killed 2 s after 1000 write(2)s"
for mode in kernel shim; do
    d="$root/$mode"
    for sig in TERM INT HUP QUIT ABRT SEGV BUS PIPE USR1 ALRM; do
        rm -f "$d/out"
        env_args=()
        [ "$mode" = shim ] && env_args=(LD_PRELOAD="$so" UPCACHE_PREFIX="$d")
        # A background job inherits SIGINT and SIGQUIT ignored: back to the default first.
        env "${env_args[@]}" python3 -c "
import os, signal, time
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE):
    signal.signal(s, signal.SIG_DFL)
fd = os.open('$d/out', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for i in range(1000):
    os.write(fd, b'line %d\n' % i)
time.sleep(60)
" &
        pid=$!
        sleep 2
        kill -"$sig" "$pid"
        status=0
        wait "$pid" 2>/dev/null || status=$?
        printf '%-6s SIG%-5s exit status %3d, lines %4d\n' "$mode" "$sig" "$status" "$(wc -l <"$d/out")"
    done
done

echo "== a shimmed tail -f following an unshimmed writer"
python3 - "$so" "$root/shim" <<'PY'
import os, subprocess, sys, time
so, d = sys.argv[1], sys.argv[2]
for mode, extra in (("inotify", []), ("polling every 1 s", ["---disable-inotify"])):
    log = f"{d}/log"
    open(log, "w").write("first\n")
    env = dict(os.environ, LD_PRELOAD=so, UPCACHE_PREFIX=d)
    p = subprocess.Popen(["tail", "-f", "-n", "+1", *extra, log], stdout=subprocess.PIPE, env=env)
    assert p.stdout.readline() == b"first\n"
    lat = []
    for i in range(10):
        time.sleep(0.3)
        t = time.monotonic()
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"line %d\n" % i)
        os.fsync(fd)
        os.close(fd)
        assert p.stdout.readline() == b"line %d\n" % i
        lat.append(time.monotonic() - t)
    p.kill()
    p.wait()
    lat.sort()
    print(f"{mode}: median {lat[5] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms over 10 lines")
PY

echo "== pwrite past the largest file"
for mode in kernel shim; do
    d="$root/$mode"
    env_args=()
    [ "$mode" = shim ] && env_args=(LD_PRELOAD="$so" UPCACHE_PREFIX="$d")
    env "${env_args[@]}" python3 -c "
import os
p = '$d/big'
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
os.write(fd, b'13 bytes here')
out = []
for off in (1 << 44, (1 << 44) - 4096, 1 << 62, (1 << 63) - 1):
    try:
        out.append(f'{off}: wrote {os.pwrite(fd, b\"x\", off)}')
    except OSError as e:
        out.append(f'{off}: {e.strerror}')
os.close(fd)
print('$mode', '; '.join(out), '; size', os.stat(p).st_size)
"
done
