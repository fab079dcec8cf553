#!/usr/bin/env python3
"""Replacement policies (issue 6):

1. Hit ratio of every policy and of Belady's OPT on the CloudPhysics trace
   (../shared/traces/cloudphysics-io.csv, or --trace), 4 KiB pages, caches of 1-50% of its
   footprint; no I/O (`upcache hit-ratio`), so one run is exact. Writes a plot beside it.
2. Zipf 0.99 4 KiB reads of real files, cache at 10% of the data, 4 threads: upcache with
   CLOCK, S3-FIFO and SIEVE against the kernel's page cache capped by a cgroup to the same
   memory.

    bench/experiments/policies.py [--rounds 3] [--dir /tmp/upcache-experiments] [--trace FILE]
"""

import os
import subprocess
import sys

import common


def main():
    trace = os.path.join(common.ROOT, "..", "shared", "traces", "cloudphysics-io.csv")
    a, d = common.start("policies", __doc__, lambda ap: ap.add_argument("--trace", default=trace))

    print("\n== hit ratio on the CloudPhysics trace, every policy and OPT ==", flush=True)
    if os.path.exists(a.trace):
        subprocess.run([common.UPCACHE, "hit-ratio", "--trace", a.trace, "--plot",
                        os.path.join(d, "hitratio-cloudphysics.png"), "--json",
                        os.path.join(d, "hitratio-cloudphysics.json")], check=True)
    else:
        print(f"no trace at {a.trace}: skipped")

    cache = "102m"
    cap = common.size_bytes(cache) + common.PROCESS_SLACK
    base = ["--rw", "randread", "--bs", "4k", "--size", "1g", "--zipf", "0.99", "--threads", "4",
            "--runtime", "5s", "--devices", "1", "--cache", cache, "--dir", d]
    common.compare(
        "zipf 0.99 reads, cache 10% of the data, 4 threads, real files: upcache vs capped kernel",
        [("upcache-clock", ["--engine", "upcache", "--policy", "clock"] + base, None),
         ("upcache-s3fifo", ["--engine", "upcache", "--policy", "s3fifo"] + base, None),
         ("upcache-sieve", ["--engine", "upcache", "--policy", "sieve"] + base, None),
         ("kernel", ["--engine", "kernel"] + base, cap)],
        a.rounds, ["iops", "p99us", "cpu_us/op", "hit%"],
        [("upcache-clock", "kernel", "iops"), ("upcache-s3fifo", "kernel", "iops"),
         ("upcache-sieve", "kernel", "iops")])
    return common.finish()


if __name__ == "__main__":
    sys.exit(main())
