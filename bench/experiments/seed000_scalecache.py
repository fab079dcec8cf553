#!/usr/bin/env python3
"""Seed 000 (ScaleCache, EuroSys'24), run on upcache with each technique on and off:

1. dflush (§3.3): writers past the foreground dirty ratio write back themselves, in parallel,
   against the kernel's way (writers sleep until one flusher has cleaned enough).
   `--flush dflush` vs `--flush background`; 1 MiB writes by 2 threads, data 8x the cache; on
   both engines (the shared cache's writers pause for its service's write-back).
2. ccXArray (§3.2): the lock-free page index against the same radix tree with updates under
   one lock per file (the kernel's XArray). `--index radix` vs `--index locked`; 4 KiB random
   reads missing 3 times in 4 (every miss inserts, every eviction deletes) by 4 threads, on
   simulated devices with no latency so the index, not a disk, is what is measured.

    bench/experiments/seed000_scalecache.py [--rounds 3] [--dir /tmp/upcache-experiments]
"""

import sys

import common


def main():
    a, d = common.start("seed000", __doc__)

    base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--files", "2",
            "--threads", "2", "--runtime", "6s", "--devices", "1", "--cache", "256m", "--dir", d]
    common.compare(
        "dflush vs sleeping writers: 1 MiB writes, 2 threads, 2 GiB through a 256 MiB cache",
        [("dflush", ["--engine", "upcache", "--flush", "dflush"] + base, None),
         ("background", ["--engine", "upcache", "--flush", "background"] + base, None),
         ("shared-dflush", ["--engine", "shared", "--flush", "dflush"] + base, None),
         ("shared-background", ["--engine", "shared", "--flush", "background"] + base, None)],
        a.rounds, ["MiB/s", "p99us", "cpu_us/op"],
        [("dflush", "background", "MiB/s"), ("dflush", "background", "p99us"),
         ("shared-dflush", "shared-background", "MiB/s"), ("shared-dflush", "shared-background", "p99us")])

    base = common.cpu_bound_reads(d)
    common.compare(
        "ccXArray vs a locked radix tree: 4 KiB random reads, 4 threads, 75% misses, no device time",
        [("radix", base + ["--index", "radix"], None), ("locked", base + ["--index", "locked"], None)],
        a.rounds, ["iops", "p99us", "cpu_us/op", "hit%"], [("radix", "locked", "iops")])
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
