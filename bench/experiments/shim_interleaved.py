#!/usr/bin/env python3
"""StreamCache's stream tracking (seed 003 §4.1) through the shim, for several streams on one
descriptor: a process reads a 1 GiB file (twice the shim's 512 MiB cache, the kernel's cache
dropped first) as STREAMS sequential streams in turns through one descriptor (each stream a
contiguous part of the file, 128 KiB a read, `os.pread`), as threads sharing a database's table
file do. MiB/s through the kernel, the shim, and each `--build NAME=DIR` (another build's shim
and `upcache serve`), each shim side on a fresh service, in interleaved rounds, medians.

    bench/experiments/shim_interleaved.py [--rounds 3] [--streams 4] [--dir DIR] [--build old=DIR]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import shim_fio  # noqa: E402

SIZE = 1 << 30
READ = 128 << 10

READER = r"""
import os, sys, time
path, streams, size, read = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fd = os.open(path, os.O_RDONLY)
part = size // streams
at = [i * part for i in range(streams)]
done = 0
start = time.perf_counter()
while done < size:
    for i in range(streams):
        if at[i] < (i + 1) * part:
            n = len(os.pread(fd, read, at[i]))
            if n == 0:
                sys.exit(f"short file at {at[i]}")
            at[i] += n
            done += n
took = time.perf_counter() - start
os.close(fd)
print(done / took / 1048576)
"""


def read_once(path, streams, env):
    out = subprocess.run([sys.executable, "-c", READER, path, str(streams), str(SIZE), str(READ)],
                         env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--dir", help="where the file goes (default: a temporary directory under /var/tmp)")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR",
                    help="a side of another build's shim and service (DIR holds libupcache_preload.so and upcache)")
    args = ap.parse_args()
    sides = [("kernel", None, None), ("shim", shim_fio.SHIM, shim_fio.UPCACHE)]
    for b in args.build:
        name, _, d = b.partition("=")
        sides.append((f"build-{name}", os.path.join(d, "libupcache_preload.so"), os.path.join(d, "upcache")))
    for _, so, binary in sides[1:]:
        if not os.path.exists(so) or not os.path.exists(binary):
            sys.exit(f"{so} or {binary} is missing: cargo build --release -p upcache-cli -p upcache-preload")
    root = args.dir or tempfile.mkdtemp(prefix="upcache-interleaved.", dir="/var/tmp")
    data = os.path.join(root, "data")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, "f.dat")
    shim_fio.lay_out(path, "1g")
    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    results = {}
    for rnd in range(args.rounds):
        turn = rnd % len(sides)
        for name, so, binary in sides[turn:] + sides[:turn]:
            shim_fio.drop_page_cache()
            if so is None:
                results.setdefault(name, []).append(read_once(path, args.streams, base))
                continue
            service = shim_fio.Service("512M", upcache=binary)
            try:
                env = shim_fio.shim_env(base, data, service, so)
                results.setdefault(name, []).append(read_once(path, args.streams, env))
            finally:
                service.stop()
        print(f"round {rnd + 1}: " + ", ".join(f"{n} {results[n][-1]:.0f}" for n, _, _ in sides), flush=True)
    k = statistics.median(results["kernel"])
    print(f"\n{args.streams} streams on one descriptor, 128 KiB reads of 1 GiB, cache 512 MiB; "
          f"medians of {args.rounds} round(s), MiB/s")
    for name, _, _ in sides:
        v = statistics.median(results[name])
        print(f"  {name:<16} {v:>8.0f}  {v / k:.2f}x kernel")
    if not args.dir:
        subprocess.run(["rm", "-rf", root])


if __name__ == "__main__":
    main()
