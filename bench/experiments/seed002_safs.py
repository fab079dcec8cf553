#!/usr/bin/env python3
"""Seed 002 (SAFS), run on upcache with each technique on and off:

1. Striping over an array (§3.3): the same device-bound 4 KiB random reads (64 threads, 1 GiB,
   a 16 MiB cache) over 1 and over 8 simulated SSDs, each of 2 channels at 300 us a read (about
   6,500 reads/s), slow enough that 2 cores can drive 8 of them, on both engines. Scaling
   efficiency = (8-device iops / 1-device iops) / 8; CPU cores used are reported beside it.
2. Set-associative cache (§4): page sets with GClock inside each set against the global index
   with CLOCK; zipf 0.99 reads, cache at 10% of the data, 2 threads, fast simulated devices;
   and on the shared cache over plain files, its page sets (`--index setassoc`, GClock in
   each) against its tree index with GClock and with CLOCK.
3. Merged I/O requests (§3.3): pages back to back go to the device as one request
   (`--run-merging on`) or one each (`off`): 1 MiB sequential writes of 1 GiB through a
   256 MiB cache, so write-back runs through the measured phase; on both engines (the shared
   cache writes back runs with one `pwritev` against a `pwrite` per page).
4. Clean-first eviction (§4.2): CLOCK passing over dirty pages against CLOCK taking them in
   order (writing them back in the miss path); 70% reads / 30% writes on simulated devices
   without GC, dirty ratios 0.6/0.9 so that many victims are dirty, on both engines; and on
   the shared cache over plain files.

    bench/experiments/seed002_safs.py [--rounds 3] [--dir /tmp/upcache-experiments]
"""

import sys

import common


def main():
    a, d = common.start("seed002", __doc__)

    slow = "channels=2,read-latency=300us,gc-every=0"
    base = ["--rw", "randread", "--bs", "4k", "--size", "1g", "--cache", "16m",
            "--threads", "64", "--runtime", "5s", "--sim", slow, "--dir", d]
    up, sh = ["--engine", "upcache"] + base, ["--engine", "shared"] + base
    med = common.compare(
        "striping: device-bound 4 KiB random reads over 1 vs 8 simulated SSDs, both engines",
        [("sim1", up + ["--devices", "sim:1"], None), ("sim8", up + ["--devices", "sim:8"], None),
         ("shared-sim1", sh + ["--devices", "sim:1"], None), ("shared-sim8", sh + ["--devices", "sim:8"], None)],
        a.rounds, ["iops", "p99us", "cpu_cores", "cpu_us/op", "hit%"],
        [("sim8", "sim1", "iops"), ("shared-sim8", "shared-sim1", "iops")])
    for p in ["", "shared-"]:
        eff = med[p + "sim8"]["iops"] / med[p + "sim1"]["iops"] / 8 * 100
        print(f"  scaling efficiency{' (shared)' if p else ''}: {eff:.1f}%")

    fast = "gc-every=0"
    base = ["--engine", "upcache", "--rw", "randread", "--bs", "4k", "--size", "640m", "--cache", "64m",
            "--zipf", "0.99", "--threads", "2", "--runtime", "4s", "--devices", "sim:4", "--sim", fast,
            "--dir", d]
    common.compare(
        "set-associative cache vs global index + CLOCK: zipf 0.99, cache 10% of the data",
        [("setassoc", base + ["--index", "setassoc"], None), ("global-clock", base, None)],
        a.rounds, ["iops", "p99us", "cpu_us/op", "hit%"], [("setassoc", "global-clock", "iops")])

    # The shared cache: its page sets (GClock in each, the in-process engine's default) against
    # its tree index with the cache-wide hand, GClock and CLOCK: the same reads of plain files
    # (which the kernel holds in its own cache).
    base = ["--engine", "shared", "--rw", "randread", "--bs", "4k", "--size", "640m", "--cache", "64m",
            "--zipf", "0.99", "--threads", "2", "--runtime", "4s", "--dir", d]
    common.compare(
        "shared cache, page sets (GClock) vs GClock vs CLOCK: zipf 0.99, cache 10% of the data",
        [("shared-setassoc", base + ["--index", "setassoc", "--policy", "gclock"], None),
         ("shared-gclock", base + ["--policy", "gclock"], None), ("shared-clock", base, None)],
        a.rounds, ["iops", "p99us", "cpu_us/op", "hit%"],
        [("shared-setassoc", "shared-clock", "iops"), ("shared-gclock", "shared-clock", "iops")])

    base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--cache", "256m", "--threads", "1",
            "--runtime", "4s", "--devices", "1", "--dir", d]
    common.compare(
        "merged requests on vs off: 1 MiB sequential writes, 1 GiB through a 256 MiB cache",
        [("upcache-on", ["--engine", "upcache"] + base, None),
         ("upcache-off", ["--engine", "upcache", "--run-merging", "off"] + base, None),
         ("shared-on", ["--engine", "shared"] + base, None),
         ("shared-off", ["--engine", "shared", "--run-merging", "off"] + base, None)],
        a.rounds, ["MiB/s", "p99us", "cpu_us/op"],
        [("upcache-on", "upcache-off", "MiB/s"), ("shared-on", "shared-off", "MiB/s")])

    base = ["--rw", "randrw", "--rwmixread", "70", "--bs", "4k", "--size", "512m",
            "--cache", "64m", "--threads", "16", "--runtime", "5s", "--devices", "sim:4", "--sim",
            "channels=4,read-latency=100us,write-latency=30us,bandwidth=400000000,gc-every=0",
            "--dirty-ratios", "0.6,0.9", "--dir", d]
    up, sh = ["--engine", "upcache"] + base, ["--engine", "shared"] + base
    common.compare(
        "clean-first vs plain CLOCK: 70/30 random reads/writes, many dirty pages, both engines",
        [("clean-first", up + ["--policy", "clock+clean-first"], None),
         ("plain", up + ["--policy", "clock+plain"], None),
         ("shared-clean-first", sh + ["--policy", "clock+clean-first"], None),
         ("shared-plain", sh + ["--policy", "clock+plain"], None)],
        a.rounds, ["iops", "read_p99us", "read_p999us", "cpu_us/op"],
        [("clean-first", "plain", "iops"), ("shared-clean-first", "shared-plain", "iops")])

    base = ["--engine", "shared", "--rw", "randrw", "--rwmixread", "70", "--bs", "4k", "--size", "512m",
            "--cache", "64m", "--threads", "16", "--runtime", "5s", "--dirty-ratios", "0.6,0.9", "--dir", d]
    common.compare(
        "shared cache, clean-first vs plain vs gc-aware CLOCK: 70/30 random reads/writes of plain files",
        [("shared-clean-first", base + ["--policy", "clock+clean-first"], None),
         ("shared-plain", base + ["--policy", "clock+plain"], None),
         ("shared-gc-aware", base + ["--policy", "clock+gc-aware"], None)],
        a.rounds, ["iops", "read_p99us", "read_p999us", "cpu_us/op", "hit%"],
        [("shared-clean-first", "shared-plain", "iops"), ("shared-gc-aware", "shared-plain", "iops")])
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
