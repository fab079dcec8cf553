#!/usr/bin/env python3
"""Two builds of `upcache` side by side on the paths a refactoring may slow down: a change that
only moves and names code (issue 16) must leave every row within noise.

Each row runs with the old and the new binary in turn, interleaved round by round, so the
machine's drift hits both alike; the table gives the medians and new/old.

    cargo build --release -p upcache-cli                       # the new binary
    git worktree add /tmp/old <commit>
    (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p upcache-cli)
    bench/before_after.py --old /tmp/old-target/release/upcache --rounds 5

`--old-engine`/`--new-engine` pick each side's engine (`upcache`, the in-process one, by
default): `--old target/release/upcache --new-engine shared` sets the shared engine in a private
cache beside the in-process one, the gate for running the library on it. `--new-flags` adds
flags to the new side's runs, `{dir}` standing for the run's directory: `--new-flags
"--device-dirs {dir}/ssd0 --dirty-ratios 0.5,0.75"` puts the shared engine's files in an array
of a private cache, with the in-process engine's dirty ratios.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NEW = os.path.join(HERE, "..", "target", "release", "upcache")
FAST_SIM = "read-latency=0us,write-latency=0us,bandwidth=100g,gc-every=0,jitter=0"

# name, what it exercises, bench flags (each run gets --engine upcache --json --dir).
ROWS = [
    ("hit-copy", "read hits, copy API (lock-free path)",
     ["--rw", "randread", "--bs", "4k", "--size", "1g", "--cache", "2g", "--warm", "--runtime", "4s"]),
    ("hit-pin", "read hits, pin API (hot index, range lock)",
     ["--rw", "randread", "--bs", "4k", "--size", "1g", "--cache", "2g", "--warm", "--runtime", "4s",
      "--api", "pin"]),
    ("write-in-cache", "4 KiB random writes, 2 threads, one file, default dirty ratios (write-back, dflush)",
     ["--rw", "randwrite", "--bs", "4k", "--size", "512m", "--cache", "1g", "--threads", "2",
      "--runtime", "4s"]),
    ("write-two-files", "4 KiB random writes, 2 threads over 2 files of 256 MiB (the range lock of each file)",
     ["--rw", "randwrite", "--bs", "4k", "--size", "256m", "--files", "2", "--cache", "1g", "--threads", "2",
      "--runtime", "4s"]),
    ("write-file-per-thread", "4 KiB random writes, 2 threads, a file of 256 MiB each (issue 18's figure)",
     ["--rw", "randwrite", "--bs", "4k", "--size", "256m", "--files", "2", "--file-per-thread", "--cache", "1g",
      "--threads", "2", "--runtime", "4s"]),
    ("write-sync", "4 KiB random write + sync_data each, 2 threads, one file (issue 18's figure)",
     ["--rw", "randwrite", "--bs", "4k", "--size", "64m", "--files", "1", "--threads", "2", "--fsync", "1",
      "--cache", "256m", "--runtime", "4s"]),
    ("miss-global", "75% misses, no device time, 4 threads (global placement, reclaim)",
     ["--rw", "randread", "--bs", "4k", "--size", "256m", "--cache", "64m", "--threads", "4",
      "--runtime", "4s", "--devices", "sim:4", "--sim", FAST_SIM]),
    ("miss-setassoc", "the same over page sets (set placement)",
     ["--rw", "randread", "--bs", "4k", "--size", "256m", "--cache", "64m", "--threads", "4",
      "--runtime", "4s", "--devices", "sim:4", "--sim", FAST_SIM, "--index", "setassoc"]),
    ("seq-read", "1 MiB sequential reads of a file twice the cache (readahead loader, batches)",
     ["--rw", "read", "--bs", "1m", "--size", "1g", "--cache", "512m", "--runtime", "4s"]),
    ("append-sync", "4 KiB appends, sync_data after each (sync, metadata log)",
     ["--rw", "append", "--bs", "4k", "--size", "64m", "--runtime", "4s", "--fsync", "1"]),
]


def run(binary, engine, flags, workdir, extra=""):
    extra = extra.replace("{dir}", workdir).split()
    cmd = [binary, "bench", "--engine", engine, "--json", "--dir", workdir] + flags + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    reports = json.loads(out)
    return (reports if isinstance(reports, list) else [reports])[0]["iops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the old build's upcache binary")
    ap.add_argument("--new", default=NEW, help="the new build's upcache binary [target/release/upcache]")
    ap.add_argument("--old-engine", default="upcache", help="the old side's --engine [upcache]")
    ap.add_argument("--new-engine", default="upcache", help="the new side's --engine [upcache]")
    ap.add_argument("--new-flags", default="", help="more flags for the new side ({dir}: the run's directory)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default=",".join(r[0] for r in ROWS), help="comma-separated row names")
    ap.add_argument("--dir", default=None, help="where the data goes [a fresh temporary directory]")
    args = ap.parse_args()
    rows = [r for r in ROWS if r[0] in args.rows.split(",")]
    base = args.dir or tempfile.mkdtemp(prefix="upcache-before-after-")
    got = {(name, side): [] for name, _, _ in rows for side in ("old", "new")}
    for i in range(args.rounds):
        for name, _, flags in rows:
            # Alternate which build goes first, so neither always runs on a warmer machine.
            sides = [("old", args.old, args.old_engine, ""), ("new", args.new, args.new_engine, args.new_flags)]
            for side, binary, engine, extra in sides if i % 2 == 0 else reversed(sides):
                with tempfile.TemporaryDirectory(dir=base) as d:
                    got[(name, side)].append(run(binary, engine, flags, d, extra))
        print(f"round {i + 1}/{args.rounds} done", flush=True)
    print(f"\n| row | what it exercises | old iops | new iops | new/old | old range | new range |")
    print("|---|---|---:|---:|---:|---|---|")
    for name, what, _ in rows:
        old, new = got[(name, "old")], got[(name, "new")]
        mo, mn = statistics.median(old), statistics.median(new)
        print(f"| {name} | {what} | {mo:,.0f} | {mn:,.0f} | {mn / mo:.2f}x | "
              f"{min(old):,.0f}-{max(old):,.0f} | {min(new):,.0f}-{max(new):,.0f} |")


if __name__ == "__main__":
    main()
