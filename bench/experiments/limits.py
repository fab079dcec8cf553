#!/usr/bin/env python3
"""Issue 18's figures, each beside its physical limit, rows interleaved round by round:

1. 4 KiB random writes, 512 MiB of data in a 1 GiB cache, 2 threads, default settings: a file
   per thread (2 x 256 MiB) and one shared file (512 MiB); upcache vs the kernel's buffered
   pwrite vs `--engine memory` (the same copies into one anonymous mapping: the ceiling) and
   `--engine memory-indexed` (each page found through an index into a shuffled arena).
2. 1 MiB sequential writes of 4x the cache (1 GiB, cache 256 MiB, default settings): upcache
   vs O_DIRECT and the kernel, with write p99.
3. 4 KiB random hits of a warm 1 GiB file, 1 thread: the copy API and the pin API against
   `--engine memory` with the same API, and against `--engine memory-indexed` (memory plus the
   least a cache's design adds: a lookup in the densest index, and a pin per page), and the
   kernel's pread for the copy.
4. The async API at depth 64, 2 threads, over 8 simulated SSDs vs 1 (device-bound: 2 channels
   of 300 us per device): scaling efficiency = (8-device iops / 1-device iops) / 8.
5. 4 KiB write + sync_data each, 2 threads, one file: upcache vs the kernel's write + fdatasync,
   and both against `--engine direct` (O_DIRECT write + fdatasync, no cache: the device's limit
   for the pattern). `--dir` on a RAM-backed file system (zram) takes the disk's noise out.

Sections 1 and 5 also run upcache with `--prefault` (not the default): the frame arena made
resident before the run, so the share of the first touch of the arena's memory is in the table
(the kernel's page cache recycles pages that are resident already).

(Async random reads against fio are `bench/compare_fio.py randread`.)

    bench/experiments/limits.py [--rounds 3] [--dir /work/cmp/limits] [--only N,...]
"""

import sys

import common


def main():
    a, d = common.start(
        "limits", __doc__, lambda ap: ap.add_argument("--only", default="1,2,3,4,5", help="sections to run"))
    only = {int(x) for x in a.only.split(",")}
    cols = ["iops", "p50us", "p99us", "cpu_us/op"]

    if 1 in only:
        for shape, label in ((["--files", "2", "--size", "256m", "--file-per-thread"], "a file per thread"),
                             (["--files", "1", "--size", "512m"], "one shared file")):
            base = ["--rw", "randwrite", "--bs", "4k", "--cache", "1g", "--threads", "2", "--runtime", "5s",
                    "--dir", d] + shape
            common.compare(
                f"4 KiB random writes, 512 MiB in a 1 GiB cache, 2 threads, {label}, default settings",
                [("upcache", ["--engine", "upcache"] + base, None), ("kernel", ["--engine", "kernel"] + base, None),
                 ("memory", ["--engine", "memory"] + base, None),
                 ("indexed", ["--engine", "memory-indexed"] + base, None),
                 ("prefaulted", ["--engine", "upcache", "--prefault"] + base, None)],
                a.rounds, cols, [("upcache", "kernel", "iops"), ("upcache", "memory", "iops"),
                                 ("upcache", "indexed", "iops"), ("memory", "kernel", "iops"),
                                 ("indexed", "kernel", "iops"), ("prefaulted", "kernel", "iops")])

    if 2 in only:
        base = ["--rw", "write", "--bs", "1m", "--size", "1g", "--cache", "256m", "--threads", "1",
                "--runtime", "8s", "--dir", d]
        common.compare(
            "1 MiB sequential writes of 4x the cache, default settings",
            [("upcache", ["--engine", "upcache"] + base, None), ("direct", ["--engine", "direct"] + base, None),
             ("kernel", ["--engine", "kernel"] + base, None)],
            a.rounds, ["MiB/s", "p50us", "p99us", "cpu_us/op"],
            [("upcache", "direct", "MiB/s"), ("upcache", "kernel", "MiB/s")])

    if 3 in only:
        base = ["--rw", "randread", "--bs", "4k", "--size", "1g", "--cache", "2g", "--warm", "--threads", "1",
                "--runtime", "5s", "--dir", d]
        common.compare(
            "4 KiB random hits, warm 1 GiB, 1 thread, copy API",
            [("upcache", ["--engine", "upcache"] + base, None), ("memory", ["--engine", "memory"] + base, None),
             ("indexed", ["--engine", "memory-indexed"] + base, None), ("kernel", ["--engine", "kernel"] + base, None)],
            a.rounds, cols, [("upcache", "memory", "iops"), ("upcache", "indexed", "iops"),
                             ("indexed", "memory", "iops"), ("upcache", "kernel", "iops")])
        pin = base + ["--api", "pin"]
        common.compare(
            "4 KiB random hits, warm 1 GiB, 1 thread, pin API (one byte read per page)",
            [("upcache-pin", ["--engine", "upcache"] + pin, None), ("memory-pin", ["--engine", "memory"] + pin, None),
             ("indexed-pin", ["--engine", "memory-indexed"] + pin, None)],
            a.rounds, cols, [("upcache-pin", "memory-pin", "iops"), ("upcache-pin", "indexed-pin", "iops"),
                             ("indexed-pin", "memory-pin", "iops")])

    if 4 in only:
        slow = "channels=2,read-latency=300us,gc-every=0"
        base = ["--engine", "upcache", "--rw", "randread", "--bs", "4k", "--size", "1g", "--cache", "16m",
                "--threads", "2", "--api", "async", "--iodepth", "64", "--runtime", "5s", "--sim", slow,
                "--dir", d]
        med = common.compare(
            "async API, depth 64, 2 threads: 8 simulated SSDs vs 1, device-bound",
            [("sim1", base + ["--devices", "sim:1"], None), ("sim8", base + ["--devices", "sim:8"], None)],
            a.rounds, ["iops", "p99us", "cpu_cores", "cpu_us/op", "hit%"], [("sim8", "sim1", "iops")])
        print(f"  scaling efficiency: {med['sim8']['iops'] / med['sim1']['iops'] / 8 * 100:.1f}%")

    if 5 in only:
        base = ["--rw", "randwrite", "--bs", "4k", "--size", "64m", "--files", "1", "--threads", "2",
                "--fsync", "1", "--runtime", "5s", "--cache", "256m", "--dir", d]
        common.compare(
            "4 KiB random write + sync_data each, 2 threads, one file",
            [("upcache", ["--engine", "upcache"] + base, None), ("kernel", ["--engine", "kernel"] + base, None),
             ("prefaulted", ["--engine", "upcache", "--prefault"] + base, None),
             ("direct", ["--engine", "direct"] + base, None)],
            a.rounds, cols,
            [("upcache", "kernel", "iops"), ("prefaulted", "kernel", "iops"), ("upcache", "direct", "iops"),
             ("kernel", "direct", "iops")])
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
