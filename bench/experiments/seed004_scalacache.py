#!/usr/bin/env python3
"""Seed 004 (ScalaCache, ATC'24), run on upcache with each technique on and off:

1. GC-aware replacement (§5.4): while a device collects garbage, evict clean pages first;
   against plain CLOCK, which writes back whatever victim comes next, in the miss path. Four
   simulated SSDs with GC (20 ms every 8 MiB written; writes wait for the end, reads are 4x
   slower meanwhile), 70% reads / 30% writes, 16 threads. With dirty ratios 0.6/0.9 pages stay
   dirty until evicted, as in ScalaCache; with the defaults (0.1/0.2) background write-back
   cleans most victims first, which is also shown. On both engines (the shared engine's
   array on the same simulated devices).
2. Pin/unpin zero-copy access with the per-thread hot index (§5.1, §5.3): `--api pin` vs
   `--api copy` on 4 KiB random reads that all hit, 1 thread, on both engines; and the hot
   index on and off under pins of a 1 MiB data set (which it covers) and a 64 MiB one.
3. Bundled I/O (§5.4): the misses of one read (and its readahead) go out as one
   submission (`--bundling on`) or one at a time (`off`): 1 MiB sequential reads of a cold
   1 GiB file, on both engines (the shared cache's bundling is one `preadv` per run against a
   `pread` per page).

    bench/experiments/seed004_scalacache.py [--rounds 3] [--dir /tmp/upcache-experiments]
        [--only gc,pin,bundling]
"""

import sys

import common


def main():
    a, d = common.start(
        "seed004", __doc__, lambda ap: ap.add_argument("--only", default="gc,pin,bundling", help="parts to run"))
    only = a.only.split(",")
    if "gc" in only:
        gc_aware(a, d)
    if "pin" in only:
        pins(a, d)
    if "bundling" in only:
        bundling(a, d)
    return common.finish()


def gc_aware(a, d):

    gc = "channels=4,read-latency=100us,write-latency=30us,bandwidth=400000000,gc-every=8m,gc-time=20ms"
    base = ["--rw", "randrw", "--rwmixread", "70", "--bs", "4k", "--size", "512m",
            "--cache", "64m", "--threads", "16", "--runtime", "5s", "--devices", "sim:4", "--sim", gc,
            "--dir", d]
    for ratios in ["0.6,0.9", "0.1,0.2"]:
        up = ["--engine", "upcache"] + base + ["--dirty-ratios", ratios]
        sh = ["--engine", "shared"] + base + ["--dirty-ratios", ratios]
        med = common.compare(
            f"GC-aware vs plain CLOCK: simulated array with GC, dirty ratios {ratios}, both engines",
            [("gc-aware", up + ["--policy", "clock+gc-aware"], None),
             ("plain", up + ["--policy", "clock+plain"], None),
             ("shared-gc-aware", sh + ["--policy", "clock+gc-aware"], None),
             ("shared-plain", sh + ["--policy", "clock+plain"], None)],
            a.rounds, ["iops", "read_p99us", "read_p999us", "write_p999us", "cpu_us/op"],
            [("gc-aware", "plain", "iops"), ("shared-gc-aware", "shared-plain", "iops")])
        for p in ["", "shared-"]:
            cut = 1 - med[p + "gc-aware"]["read_p999us"] / med[p + "plain"]["read_p999us"]
            print(f"  read p99.9 of {p}gc-aware is {cut * 100:.1f}% lower than {p}plain's")



def pins(a, d):
    base = ["--rw", "randread", "--bs", "4k", "--size", "256m", "--cache", "512m", "--warm", "--threads", "1",
            "--runtime", "4s", "--lat-every", "64", "--dir", d]
    common.compare(
        "pin (zero-copy, hot index) vs copy: 4 KiB random reads that all hit, 1 thread, both engines",
        [("pin", ["--engine", "upcache", "--api", "pin"] + base, None),
         ("copy", ["--engine", "upcache", "--api", "copy"] + base, None),
         ("shared-pin", ["--engine", "shared", "--api", "pin"] + base, None),
         ("shared-copy", ["--engine", "shared", "--api", "copy"] + base, None)],
        a.rounds, ["iops", "p99us", "cpu_us/op"], [("pin", "copy", "iops"), ("shared-pin", "shared-copy", "iops")])
    for size in ["1m", "64m"]:
        b = ["--api", "pin", "--rw", "randread", "--bs", "4k", "--size", size, "--cache", "256m", "--warm",
             "--threads", "1", "--runtime", "3s", "--lat-every", "64", "--dir", d]
        common.compare(
            f"hot index on vs off: pins of 4 KiB at random in {size}, 1 thread, both engines",
            [("hot", ["--engine", "upcache"] + b, None),
             ("cold", ["--engine", "upcache", "--hot-index", "off"] + b, None),
             ("shared-hot", ["--engine", "shared"] + b, None),
             ("shared-cold", ["--engine", "shared", "--hot-index", "off"] + b, None)],
            a.rounds, ["iops", "p99us", "cpu_us/op"], [("hot", "cold", "iops"), ("shared-hot", "shared-cold", "iops")])


def bundling(a, d):
    base = ["--rw", "read", "--bs", "1m", "--size", "1g", "--cache", "256m", "--threads", "1",
            "--runtime", "4s", "--devices", "1", "--dir", d]
    common.compare(
        "bundled I/O on vs off: 1 MiB sequential reads of a cold 1 GiB file, 1 thread",
        [("upcache-on", ["--engine", "upcache"] + base, None),
         ("upcache-off", ["--engine", "upcache", "--bundling", "off"] + base, None),
         ("shared-on", ["--engine", "shared"] + base, None),
         ("shared-off", ["--engine", "shared", "--bundling", "off"] + base, None)],
        a.rounds, ["MiB/s", "p99us", "cpu_us/op"],
        [("upcache-on", "upcache-off", "MiB/s"), ("shared-on", "shared-off", "MiB/s")])


if __name__ == "__main__":
    sys.exit(main())
