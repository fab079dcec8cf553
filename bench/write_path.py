#!/usr/bin/env python3
"""Issue-5 (write path) figures: `upcache bench` runs side by side, interleaved round by round,
with the kernel's page cache capped to upcache's budget by a cgroup v1 memory limit where the
workload says so. Prints per-round figures, medians and the ratios the issue asks for.

    bench/write_path.py seqwrite  [--rounds 3]  # 1 MiB sequential writes, 4x the cache, write-back
                                                # running: streams on/off vs O_DIRECT vs capped kernel
    bench/write_path.py randwrite [--rounds 3]  # 4 KiB random writes within the cache, 2 threads
    bench/write_path.py shared    [--rounds 3]  # one file: 2 threads vs 1 thread vs the kernel
    bench/write_path.py sync      [--rounds 3]  # 4 KiB write + sync_data / fdatasync, 2 threads
    bench/write_path.py dflush    [--rounds 3]  # dirty pressure: dflush vs sleeping writers
    bench/write_path.py append    [--rounds 3]  # 4 KiB appends + sync_data / fdatasync, 1 and 2 threads

Needs root (for the cgroup) and target/release/upcache (cargo build --release).
"""

import argparse
import os
import statistics
import sys

from bench_run import upcache as run

# What the bench process needs besides the page cache, included in the kernel's cap.
PROCESS_SLACK = 16 << 20


def size_bytes(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def workloads(w, d):
    """(row name, bench args, cgroup limit or None) per row, and the ratios to print."""
    if w == "seqwrite":
        cache = "256m"
        base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--threads", "1", "--runtime", "8s",
                "--devices", "1", "--cache", cache, "--dir", d]
        cap = size_bytes(cache) + PROCESS_SLACK
        rows = [
            ("upcache-streams", ["--engine", "upcache", "--streams", "on"] + base, None),
            ("upcache-nostreams", ["--engine", "upcache", "--streams", "off"] + base, None),
            ("direct", ["--engine", "direct"] + base, None),
            ("kernel-capped", ["--engine", "kernel"] + base, cap),
        ]
        ratios = [("upcache-streams", "direct"), ("upcache-streams", "kernel-capped"),
                  ("upcache-nostreams", "direct"), ("upcache-nostreams", "kernel-capped"),
                  ("upcache-streams", "upcache-nostreams")]
    elif w == "randwrite":
        cache = "256m"
        base = ["--rw", "randwrite", "--bs", "4k", "--size", "64m", "--files", "2", "--threads", "2",
                "--runtime", "4s", "--devices", "1", "--cache", cache, "--warm", "--dir", d]
        cap = size_bytes(cache) + PROCESS_SLACK
        # The kernel's dirty limits come from the machine's RAM (a cgroup v1 cap does not lower
        # them), so its 128 MiB of dirty data is never written back during the run; upcache's
        # default limits (10% / 20% of its 256 MiB) keep its flushers rewriting the same pages.
        # "dirty60" gives upcache limits that hold the working set, as the kernel's do.
        rows = [
            ("upcache", ["--engine", "upcache"] + base, None),
            ("upcache-nostreams", ["--engine", "upcache", "--streams", "off"] + base, None),
            ("upcache-dirty60", ["--engine", "upcache", "--dirty-ratios", "0.6,0.9"] + base, None),
            ("kernel-capped", ["--engine", "kernel"] + base, cap),
            ("kernel", ["--engine", "kernel"] + base, None),
        ]
        ratios = [("upcache", "kernel-capped"), ("upcache", "kernel"), ("upcache-nostreams", "kernel-capped"),
                  ("upcache-dirty60", "kernel-capped"), ("upcache-dirty60", "kernel")]
    elif w == "shared":
        base = ["--rw", "randwrite", "--bs", "4k", "--size", "64m", "--files", "1", "--runtime", "4s",
                "--devices", "1", "--cache", "256m", "--warm", "--dir", d]
        dirty60 = ["--dirty-ratios", "0.6,0.9"]
        rows = [
            ("upcache-2t", ["--engine", "upcache", "--threads", "2"] + base, None),
            ("upcache-1t", ["--engine", "upcache", "--threads", "1"] + base, None),
            ("upcache-2t-dirty60", ["--engine", "upcache", "--threads", "2"] + dirty60 + base, None),
            ("upcache-1t-dirty60", ["--engine", "upcache", "--threads", "1"] + dirty60 + base, None),
            ("kernel-2t", ["--engine", "kernel", "--threads", "2"] + base, None),
        ]
        ratios = [("upcache-2t", "upcache-1t"), ("upcache-2t", "kernel-2t"),
                  ("upcache-2t-dirty60", "upcache-1t-dirty60"), ("upcache-2t-dirty60", "kernel-2t")]
    elif w == "sync":
        base = ["--rw", "randwrite", "--bs", "4k", "--size", "64m", "--threads", "2", "--runtime", "4s",
                "--devices", "1", "--cache", "256m", "--fsync", "1", "--dir", d]
        two = ["--files", "2"]
        rows = [
            ("upcache", ["--engine", "upcache"] + base, None),
            ("upcache-nostreams", ["--engine", "upcache", "--streams", "off"] + base, None),
            ("kernel", ["--engine", "kernel"] + base, None),
            ("upcache-2files", ["--engine", "upcache"] + two + base, None),
            ("kernel-2files", ["--engine", "kernel"] + two + base, None),
        ]
        ratios = [("upcache", "kernel"), ("upcache-nostreams", "kernel"), ("upcache-2files", "kernel-2files")]
    elif w == "append":
        base = ["--rw", "append", "--bs", "4k", "--runtime", "4s", "--devices", "1", "--cache", "256m",
                "--fsync", "1", "--dir", d]
        rows = [
            ("upcache-1t", ["--engine", "upcache", "--threads", "1"] + base, None),
            ("kernel-1t", ["--engine", "kernel", "--threads", "1"] + base, None),
            ("upcache-2t", ["--engine", "upcache", "--threads", "2"] + base, None),
            ("kernel-2t", ["--engine", "kernel", "--threads", "2"] + base, None),
        ]
        ratios = [("upcache-1t", "kernel-1t"), ("upcache-2t", "kernel-2t")]
    else:  # dflush
        base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--threads", "2", "--files", "2",
                "--runtime", "8s", "--devices", "1", "--cache", "256m", "--dir", d]
        rows = [
            ("dflush", ["--engine", "upcache", "--flush", "dflush"] + base, None),
            ("background", ["--engine", "upcache", "--flush", "background"] + base, None),
        ]
        ratios = [("dflush", "background")]
    return rows, ratios


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["seqwrite", "randwrite", "shared", "sync", "dflush", "append"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/work/cmp")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows, ratios = workloads(a.workload, os.path.join(a.dir, "wp"))
    got = {name: [] for name, _, _ in rows}
    for r in range(a.rounds):
        for name, args, cap in rows:
            got[name].append(run(args, cap)[0])
        line = "  ".join(f"{k} {v[-1]['mib_s']:.0f} MiB/s {v[-1]['iops']:.0f} iops p99 {v[-1]['lat_us']['p99']:.0f}us"
                         for k, v in got.items())
        print(f"round {r + 1}: {line}", flush=True)
    med = {k: statistics.median(x["iops"] for x in v) for k, v in got.items()}
    print(f"\nmedians of {a.rounds} rounds ({a.workload}):")
    for k, v in got.items():
        cpu = statistics.median(x["cpu_us_per_op"] for x in v)
        mib = statistics.median(x["mib_s"] for x in v)
        p99 = statistics.median(x["lat_us"]["p99"] for x in v)
        print(f"  {k:18} {med[k]:10.0f} iops {mib:8.1f} MiB/s  p99 {p99:8.0f} us  {cpu:7.2f} cpu-us/op")
    for x, y in ratios:
        print(f"  {x} / {y}: {med[x] / med[y]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
