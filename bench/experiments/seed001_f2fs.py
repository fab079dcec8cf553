#!/usr/bin/env python3
"""Seed 001 (parallel writes on a log-structured FS, SYSTOR'19), run on upcache:

1. File range lock (§3.2): writers of disjoint parts of one file run in parallel. 2 writer
   threads against 1 on one file (the range lock's scaling), against the same with
   `--range-lock off` (one writer per file, as the kernel's inode lock), and against the
   kernel, capped to the same memory; on both engines, the in-process one and the shared
   cache (`--engine shared`, the cache the shim uses; bench/shim_fio.py --serve "--range-lock
   off" measures it through the shim). 4 KiB random writes within the cache; dirty ratios
   0.6/0.9 so write-back does not churn (see bench/RESULTS.md, issue 5).
2. Metadata log for fsync (§3.3-3.5): a sync logs the file's new length as one small record
   instead of a file-system metadata commit. The log is how upcache persists lengths (there
   is no off switch), so: 4 KiB appends each followed by sync_data, against the kernel's
   write + fdatasync; on the in-process engine's array, the shared engine's array (a private
   cache, `--device-dirs`), and the shared engine's plain files (through a service: the
   OS file's fdatasync, no log).

    bench/experiments/seed001_f2fs.py [--rounds 3] [--dir /tmp/upcache-experiments]
"""

import sys

import common


def main():
    a, d = common.start("seed001", __doc__)
    cache = "256m"
    cap = common.size_bytes(cache) + common.PROCESS_SLACK

    base = ["--rw", "randwrite", "--bs", "4k", "--size", "128m", "--shared-file", "--runtime", "4s",
            "--devices", "1", "--cache", cache, "--warm", "--dirty-ratios", "0.6,0.9", "--dir", d]
    off = ["--range-lock", "off"]
    common.compare(
        "range lock: one file, 4 KiB random writes in the cache",
        [("upcache-1t", ["--engine", "upcache", "--threads", "1"] + base, None),
         ("upcache-2t", ["--engine", "upcache", "--threads", "2"] + base, None),
         ("upcache-2t-off", ["--engine", "upcache", "--threads", "2"] + base + off, None),
         ("shared-2t", ["--engine", "shared", "--threads", "2"] + base, None),
         ("shared-2t-off", ["--engine", "shared", "--threads", "2"] + base + off, None),
         ("kernel-2t", ["--engine", "kernel", "--threads", "2"] + base, cap)],
        a.rounds, ["iops", "p99us", "cpu_us/op"],
        [("upcache-2t", "upcache-1t", "iops"), ("upcache-2t", "upcache-2t-off", "iops"),
         ("shared-2t", "shared-2t-off", "iops"), ("upcache-2t", "kernel-2t", "iops"),
         ("shared-2t", "kernel-2t", "iops")])

    base = ["--rw", "append", "--bs", "4k", "--threads", "1", "--runtime", "4s", "--fsync", "1",
            "--cache", cache, "--dir", d]
    one = ["--devices", "1"]
    common.compare(
        "metadata log: 4 KiB appends, each made durable (sync_data vs fdatasync), 1 thread",
        [("upcache", ["--engine", "upcache"] + one + base, None),
         ("shared-array", ["--engine", "shared", "--device-dirs", f"{d}/shared-array/dev0"] + base, None),
         ("shared-plain", ["--engine", "shared"] + one + base, None),
         ("kernel", ["--engine", "kernel"] + one + base, cap)],
        a.rounds, ["iops", "p50us", "p99us", "cpu_us/op"],
        [("upcache", "kernel", "iops"), ("shared-array", "kernel", "iops"), ("shared-array", "upcache", "iops"),
         ("shared-plain", "kernel", "iops")])
    common.not_switchable("metadata log off", "lengths are persisted only through the log")
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
