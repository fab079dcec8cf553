#!/usr/bin/env python3
"""Side-by-side runs of `upcache bench` against fio and against the kernel page cache capped
by a cgroup v1 memory limit, interleaved round by round, reporting per-round figures and
medians. Used for the issue-4 figures in bench/RESULTS.md.

    bench/compare_fio.py randread [--rounds 3] [--dir DIR] [--size S]   # 4 KiB random, no hits, depth 32
    bench/compare_fio.py seqread  [--rounds 3] [--dir DIR]   # 1 MiB sequential, 2x the cache
                                                           # (and fio from huge-page buffers, --iomem=shmhuge)

Needs fio, root (for the cgroup and huge pages) and target/release/upcache (cargo build --release).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys

from bench_run import upcache


def machine_busy_seconds():
    """Busy CPU time of the whole machine (user, nice, system, irq, softirq), as the bench's
    machine_cpu_seconds: a process's own CPU time misses the completion interrupts that land
    while it sleeps, so fio, which sleeps more, would be charged less for the same work."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return (t[0] + t[1] + t[2] + t[5] + t[6]) / os.sysconf("SC_CLK_TCK")


def fio(path, size, rw, bs, depth, runtime, huge=False):
    cmd = [
        "fio", "--name=cmp", f"--filename={path}", f"--size={size}", "--ioengine=io_uring",
        "--direct=1", f"--iodepth={depth}", f"--rw={rw}", f"--bs={bs}", f"--runtime={runtime}",
        "--time_based", "--output-format=json",
    ] + (["--iomem=shmhuge"] if huge else [])
    busy0 = machine_busy_seconds()
    job = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"][0]
    busy = machine_busy_seconds() - busy0
    read = job["read"]
    secs = job["job_runtime"] / 1000.0
    ios = read["total_ios"]
    cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * secs
    return {"iops": read["iops"], "mib_s": read["bw"] / 1024.0, "cpu_us_per_op": cpu_s * 1e6 / max(ios, 1),
            "machine_cpu_us_per_op": busy * 1e6 / max(ios, 1)}


def lay_out(path, size):
    """Writes `path` afresh (direct 1 MiB writes) outside any measured run."""
    if os.path.exists(path):
        os.remove(path)
    subprocess.run(["fio", "--name=layout", f"--filename={path}", f"--size={size}", "--ioengine=psync",
                    "--direct=1", "--rw=write", "--bs=1m"], check=True, capture_output=True)


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["randread", "seqread"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/work/cmp")
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--size", help="file size for each of upcache and fio (default: 4g for randread, 1g for "
                    "seqread); smaller for a RAM-backed device such as zram")
    a = ap.parse_args()
    if a.workload == "seqread":
        # fio's --iomem=shmhuge needs reserved huge pages: 16 x 1 MiB buffers.
        with open("/proc/sys/vm/nr_hugepages", "r+") as f:
            if int(f.read()) < 16:
                f.seek(0)
                f.write("16")
    os.makedirs(a.dir, exist_ok=True)
    fio_file = os.path.join(a.dir, "fio.dat")
    rt = f"{a.runtime}s"
    up_dir = os.path.join(a.dir, "up")
    if a.workload == "randread":
        size, cache = a.size or "4g", "32m"
        up_args = ["--engine", "upcache", "--rw", "randread", "--bs", "4k", "--size", size, "--cache", cache,
                   "--devices", "1", "--threads", "1", "--runtime", rt, "--api", "async", "--iodepth", "32",
                   "--dir", up_dir]
        fio_args = (fio_file, size, "randread", "4k", 32, a.runtime)
    else:
        size, cache = a.size or "1g", "512m"
        up_args = ["--rw", "read", "--bs", "1m", "--size", size, "--cache", cache, "--devices", "1",
                   "--threads", "1", "--runtime", rt, "--dir", up_dir]
        fio_args = (fio_file, size, "read", "1m", 16, a.runtime)
    rows = {"upcache": [], "fio": [], "fio-same-file": [], "kernel-capped": [], "upcache-copy": [], "fio-huge": []}
    for r in range(a.rounds):
        if a.workload == "randread":
            # Kept, so that fio then reads upcache's own backing file: the same extents and
            # the same state of the virtual disk's host cache (which sways a device-bound
            # figure more than either reader does).
            rows["upcache"].append(upcache(up_args + ["--keep"])[0])
            data = max(glob.glob(os.path.join(up_dir, "upcache", "dev0", "*.data")), key=os.path.getsize)
            rows["fio-same-file"].append(fio(data, size, "randread", "4k", 32, a.runtime))
            shutil.rmtree(up_dir)
        else:
            rows["upcache"].append(upcache(["--engine", "upcache", "--api", "async", "--iodepth", "16"] + up_args)[0])
            rows["upcache-copy"].append(upcache(["--engine", "upcache"] + up_args)[0])
            # The kernel's page cache capped to upcache's budget; the process itself needs
            # a few MiB more, which the cap includes.
            limit = 512 * 2**20 + 16 * 2**20
            rows["kernel-capped"].append(upcache(["--engine", "kernel"] + up_args, cgroup_limit=limit)[0])
        if a.workload == "randread":
            # A fresh file each round, as upcache's bench writes its own: the virtual disk's
            # host caches what was written recently, so a file written hours earlier reads
            # at a quarter of the speed (13k against 56k IOPS, bench/RESULTS.md, issue 18).
            lay_out(fio_file, size)
        rows["fio"].append(fio(*fio_args))
        if a.workload == "seqread":
            # The device's ceiling for reference: the same fio job from huge-page buffers, so
            # each request is a few memory segments (the default malloc'd buffers need one
            # per 4 KiB, and this virtio disk runs far slower on many-segment requests).
            rows["fio-huge"].append(fio(*fio_args, huge=True))
        line = "  ".join(f"{k} {v[-1]['iops']:.0f} iops {v[-1]['cpu_us_per_op']:.2f} cpu-us/op "
                         f"({v[-1]['machine_cpu_us_per_op']:.2f} machine)"
                         for k, v in rows.items() if v)
        print(f"round {r + 1}: {line}", flush=True)
    base = median(rows["fio"], "iops")
    base_cpu = median(rows["fio"], "cpu_us_per_op")
    base_machine = median(rows["fio"], "machine_cpu_us_per_op")
    print(f"\nmedians of {a.rounds} rounds ({a.workload}):")
    for k, v in rows.items():
        if not v:
            continue
        iops, mib, cpu = median(v, "iops"), median(v, "mib_s"), median(v, "cpu_us_per_op")
        machine = median(v, "machine_cpu_us_per_op")
        print(f"  {k:14} {iops:10.0f} iops {mib:8.1f} MiB/s {cpu:7.2f} cpu-us/op {machine:7.2f} machine-us/op   "
              f"vs fio: {iops / base:.2f}x iops, {cpu / base_cpu:.2f}x cpu/op, "
              f"{machine / base_machine:.2f}x machine cpu/op")
    if rows["fio-same-file"]:
        # Per round, against fio on the same file minutes apart at most: medians of the ratios.
        pairs = list(zip(rows["upcache"], rows["fio-same-file"]))
        ratio = lambda key: statistics.median(u[key] / f[key] for u, f in pairs)
        print(f"  upcache vs fio-same-file, median of per-round ratios: {ratio('iops'):.2f}x iops, "
              f"{ratio('cpu_us_per_op'):.2f}x cpu/op, {ratio('machine_cpu_us_per_op'):.2f}x machine cpu/op")
    if rows["kernel-capped"]:
        for k in ("upcache", "upcache-copy"):
            print(f"  {k} vs kernel-capped: {median(rows[k], 'mib_s') / median(rows['kernel-capped'], 'mib_s'):.2f}x")
        ceiling = median(rows["fio-huge"], "mib_s")
        for k in ("upcache", "upcache-copy", "kernel-capped"):
            print(f"  {k} vs fio from huge-page buffers: {median(rows[k], 'mib_s') / ceiling:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
