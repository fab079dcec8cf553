#!/usr/bin/env python3
"""Seed 003 (StreamCache, ATC'24), run on upcache with each technique on and off:

1. Stream tracking and stream-based write-back (§4.1-4.2): `--streams on` vs `off`; 1 MiB
   sequential writes of a file 4x the cache, write-back running (and against O_DIRECT).
2. Two-layer frame allocator (§4.3): per-core pools with per-file caches vs one global
   lock-free queue; 4 KiB random reads missing 3 times in 4 (a frame taken and one freed per
   miss) by 4 threads on simulated devices with no latency.

    bench/experiments/seed003_streamcache.py [--rounds 3] [--dir /tmp/upcache-experiments]
"""

import sys

import common


def main():
    a, d = common.start("seed003", __doc__)

    base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--threads", "1", "--runtime", "6s",
            "--devices", "1", "--cache", "256m", "--dir", d]
    common.compare(
        "streams: 1 MiB sequential writes, file 4x the cache",
        [("streams-on", ["--engine", "upcache", "--streams", "on"] + base, None),
         ("streams-off", ["--engine", "upcache", "--streams", "off"] + base, None),
         ("direct", ["--engine", "direct"] + base, None)],
        a.rounds, ["MiB/s", "p99us", "cpu_us/op"],
        [("streams-on", "streams-off", "MiB/s"), ("streams-on", "direct", "MiB/s")])

    base = common.cpu_bound_reads(d)
    common.compare(
        "two-layer allocator vs one global queue: 4 KiB random reads, 75% misses, 4 threads",
        [("twolayer", base + ["--alloc", "twolayer"], None), ("global", base + ["--alloc", "global"], None)],
        a.rounds, ["iops", "p99us", "cpu_us/op"], [("twolayer", "global", "iops")])
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
