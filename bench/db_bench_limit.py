#!/usr/bin/env python3
"""db_bench readrandom in a second process, side by side: the kernel's warm page cache, the
shim's warm shared cache, and the limit for any pread-based cache, plain memory
(bench/memory_preload.c: each SST file read into memory at open, each pread one memcpy).
Each side's database is filled by a first process (fillrandom, the same seed), then each
round runs readrandom once per side, rotating which goes first; prints medians and ratios.

Usage: bench/db_bench_limit.py [--rounds 5] [--reads 1000000] [--dir DIR]
(needs db_bench from rocksdb-tools, a C compiler and the release shim:
cargo build --release -p upcache-preload --lib)"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, "target/release/libupcache_preload.so")
KEYS = 200_000
COMMON = [f"--num={KEYS}", "--value_size=100", "--compression_type=none",
          "--write_buffer_size=4194304", "--target_file_size_base=4194304", "--cache_size=8388608"]


def db_bench(db, env, *args):
    out = subprocess.run(["db_bench", f"--db={db}", *COMMON, *args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
    m = re.search(r"^\w+\s*:.*?([\d.]+) ops/sec", out, re.M)
    if not m:
        sys.exit(f"FAILED: db_bench output:\n{out}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reads", type=int, default=1_000_000)
    ap.add_argument("--dir")
    args = ap.parse_args()
    if not os.path.exists(SHIM):
        sys.exit(f"{SHIM} missing: cargo build --release -p upcache-preload --lib")
    work = tempfile.mkdtemp(dir=args.dir)
    try:
        memory_so = os.path.join(work, "memory_preload.so")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", memory_so,
                        os.path.join(ROOT, "bench/memory_preload.c"), "-ldl"], check=True)
        dirs = {side: os.path.join(work, side) for side in ("kernel", "shim", "memory")}
        socket = os.path.join(work, "run", "cache.sock")
        envs = {
            "kernel": dict(os.environ),
            "shim": dict(os.environ, LD_PRELOAD=SHIM, UPCACHE_PREFIX=dirs["shim"], UPCACHE_MEMORY="1G",
                         UPCACHE_SOCKET=socket, UPCACHE_IDLE="2"),
            "memory": dict(os.environ, LD_PRELOAD=memory_so, MEMORY_PREFIX=dirs["memory"]),
        }
        for d in dirs.values():
            os.makedirs(d)
        # A shimmed process that stays attached keeps the shared cache (and its service)
        # between the shim's runs; the service leaves 2 s after it.
        holder = subprocess.Popen(
            ["python3", "-c", "import sys; open(sys.argv[1], 'wb').write(b'x'); print('ready', flush=True); sys.stdin.read()",
             os.path.join(dirs["shim"], "holder")],
            env=envs["shim"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "ready"
        fill = {}
        for side in dirs:
            fill[side] = db_bench(os.path.join(dirs[side], "db"), envs[side], "--benchmarks=fillrandom", "--seed=42")
        os.sync()
        sides = list(dirs)
        reads = {side: [] for side in sides}
        for r in range(args.rounds):
            order = sides[r % 3:] + sides[:r % 3]
            for side in order:
                reads[side].append(db_bench(os.path.join(dirs[side], "db"), envs[side], "--benchmarks=readrandom",
                                            "--use_existing_db=1", "--seed=43", f"--reads={args.reads}"))
            print(f"round {r + 1}: " + ", ".join(f"{s} {reads[s][-1]:,.0f}" for s in sides), flush=True)
        holder.stdin.close()
        holder.wait()
        med = {s: statistics.median(v) for s, v in reads.items()}
        print(f"fillrandom ops/s (first process): " + ", ".join(f"{s} {fill[s]:,.0f}" for s in sides))
        print(f"readrandom ops/s, second process, medians of {args.rounds}: "
              + ", ".join(f"{s} {med[s]:,.0f} ({min(reads[s]):,.0f}-{max(reads[s]):,.0f})" for s in sides))
        print(f"ratios of the medians: shim/kernel {med['shim'] / med['kernel']:.2f}x, "
              f"memory/kernel {med['memory'] / med['kernel']:.2f}x, shim/memory {med['shim'] / med['memory']:.2f}x")
        # The machine's noise moves whole rounds: the ratio within each round is steadier.
        for a, b in (("shim", "kernel"), ("memory", "kernel"), ("shim", "memory")):
            per = [x / y for x, y in zip(reads[a], reads[b])]
            print(f"{a}/{b} per round: " + " ".join(f"{r:.2f}" for r in per) + f", median {statistics.median(per):.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
