#!/usr/bin/env python3
"""fio through the shim against the kernel, side by side, interleaved round by round: the
workloads of issue 34's table and its done-when. Each shim run gets a fresh service (started
here with `upcache serve`, stopped and waited for after the run, so its write-back at exit is
timed in no other run). Each round runs every side of a workload in turn, rotating which goes
first; prints per-round figures, medians and ratios.

    bench/shim_fio.py [--rounds 3] [--only randwrite-one,randwrite-own,...] [--dir DIR]
                      [--shim SO --upcache BIN]   # another build's shim and service
                      [--serve "--range-lock off"]   # a technique of the service switched off
                      [--off "--index sharded"]      # and a fourth side: the shim with it off
                      [--private new=SO --private old=SO2]  # sides on private caches
                      [--build old=DIR]              # a side of another build's shim and service

With `--off FLAGS`, each round also runs the shim on a service started with FLAGS added (a
technique switched off), in turn with the others; the table adds that side and on/off.
With `--private NAME=SO` (repeatable), each round also runs shim SO with a cache of each
process's own (UPCACHE_SHARED=0, UPCACHE_MEMORY the service's size), as side private-NAME.
With `--build NAME=DIR` (repeatable), each round also runs DIR's shim on a fresh service of
DIR's `upcache`, as side build-NAME: two builds A/B in one run.

Workloads (fio psync unless said; a side is kernel buffered, the shim's shared cache, and a
limit measured in the same round):
- randwrite-one: random 4 KiB writes by 2 processes into one 256 MiB file, 10 s; limit: the
  one-memcpy ceiling (bench/memory_preload.c with MEMORY_WRITES=1).
- randwrite-own: the same into a 128 MiB file per process.
- warm-randread: a first process reads a 512 MiB file, then 2 processes read it at random
  (4 KiB); limit: the one-memcpy ceiling.
- seqread: 1 MiB sequential reads of a file twice the shim's cache (1 GiB, cache 512 MiB),
  kernel cache dropped first; limit: fio O_DIRECT io_uring at depth 16.
- seqwrite: 1 MiB sequential writes of 4x the shim's cache (2 GiB) with a final fsync;
  limit: fio O_DIRECT psync (the same calls, no cache).
- syncwrite: 4 KiB appends to a 256 MiB file, each followed by fdatasync (a database's log);
  limit: the same with O_DIRECT.

Needs fio, root (drop_caches), a C compiler and the release builds
(cargo build --release -p upcache-cli -p upcache-preload).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, "target/release/libupcache_preload.so")
UPCACHE = os.path.join(ROOT, "target/release/upcache")


def drop_page_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fio(args, env, cwd):
    out = subprocess.run(["fio", *args, "--output-format=json"], env=env, cwd=cwd, check=True,
                         capture_output=True, text=True).stdout
    # fio may print notes before its JSON.
    job = json.loads(out[out.index("{"):])["jobs"][0]
    if job["error"] != 0:
        sys.exit(f"FAILED: fio {args}: error {job['error']}")
    return job


class Service:
    """A fresh `upcache serve` for one run, stopped (and waited for) after it."""

    def __init__(self, memory, extra=(), upcache=None):
        self.dir = tempfile.mkdtemp(prefix="upcache-shimfio-service.")
        self.socket = os.path.join(self.dir, "cache.sock")
        self.proc = subprocess.Popen([upcache or UPCACHE, "serve", "--socket", self.socket, "--memory", memory,
                                      "--idle", "3600", *SERVE_FLAGS, *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(1000):
            if os.path.exists(self.socket):
                return
            if self.proc.poll() is not None:
                sys.exit(f"FAILED: upcache serve: {self.proc.stderr.read().decode()}")
            time.sleep(0.01)
        sys.exit("FAILED: upcache serve did not listen within 10 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=600)
        shutil.rmtree(self.dir, ignore_errors=True)


def shim_env(base, prefix, service, so=None):
    return dict(base, LD_PRELOAD=so or SHIM, UPCACHE_PREFIX=prefix, UPCACHE_SOCKET=service.socket)


def private_env(base, prefix, so, memory):
    return dict(base, LD_PRELOAD=so, UPCACHE_PREFIX=prefix, UPCACHE_SHARED="0", UPCACHE_MEMORY=memory)


def ceiling_env(base, prefix, so, writes):
    env = dict(base, LD_PRELOAD=so, MEMORY_PREFIX=prefix)
    if writes:
        env["MEMORY_WRITES"] = "1"
    return env


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.sync()


def lay_out(path, size):
    subprocess.run(["fio", "--name=layout", f"--filename={path}", f"--size={size}", "--ioengine=psync",
                    "--direct=1", "--rw=write", "--bs=1m"], check=True, capture_output=True)


RUNTIME = "10"
# `--serve`: flags for every run's service; `--off`: those of the "shim-off" side's.
SERVE_FLAGS = []
OFF_FLAGS = []


def randwrite(data, sides, one_file):
    """IOPS of 2 processes writing 4 KiB at random, one 256 MiB file or a 128 MiB one each."""
    names = ["one.dat"] if one_file else ["w.0.0", "w.1.0"]
    size = "256m" if one_file else "128m"
    out = {}
    for side, env in sides:
        fresh(data)
        for n in names:
            lay_out(os.path.join(data, n), size)
        drop_page_cache()
        where = [f"--filename={os.path.join(data, 'one.dat')}"] if one_file else [f"--directory={data}"]
        job = fio(["--name=w", *where, f"--size={size}", "--rw=randwrite", "--bs=4k", "--ioengine=psync",
                   "--numjobs=2", "--time_based", f"--runtime={RUNTIME}", "--group_reporting"], env(), data)
        out[side] = job["write"]["iops"]
    return out


def warm_randread(data, sides):
    out = {}
    for side, env in sides:
        fresh(data)
        path = os.path.join(data, "warm.dat")
        lay_out(path, "512m")
        drop_page_cache()
        e = env()
        common = ["--name=warm", f"--filename={path}", "--size=512m", "--ioengine=psync", "--invalidate=0"]
        fio([*common, "--rw=read", "--bs=1m"], e, data)
        job = fio([*common, "--rw=randread", "--bs=4k", "--numjobs=2", "--time_based", f"--runtime={RUNTIME}",
                   "--group_reporting"], e, data)
        out[side] = job["read"]["iops"]
    return out


def zipf_randread(data, sides):
    """IOPS of 2 processes reading 4 KiB at Zipf 0.99 offsets of a 1 GiB file, 4x the shim's
    cache, from cold: the replacement policy's workload (`--off "--policy s3fifo"` sets S3-FIFO
    against the service's default, CLOCK; `--serve` and `--off` flags both reach the off side's
    service, so one flag may not be in both). The kernel side caches the whole file (this
    machine's memory is not capped), so only the shim sides compare."""
    out = {}
    path = os.path.join(data, "zipf.dat")
    fresh(data)
    lay_out(path, "1g")
    for side, env in sides:
        drop_page_cache()
        job = fio(["--name=z", f"--filename={path}", "--size=1g", "--rw=randread", "--bs=4k", "--ioengine=psync",
                   "--random_distribution=zipf:0.99", "--numjobs=2", "--time_based", f"--runtime={RUNTIME}",
                   "--group_reporting", "--invalidate=0"], env(), data)
        out[side] = job["read"]["iops"]
    return out


def seqread(data, sides):
    """MiB/s of 1 MiB sequential reads of a 1 GiB file (twice the shim's cache)."""
    out = {}
    path = os.path.join(data, "seq.dat")
    fresh(data)
    lay_out(path, "1g")
    for side, env in sides:
        drop_page_cache()
        if side == "limit":
            job = fio(["--name=r", f"--filename={path}", "--size=1g", "--rw=read", "--bs=1m", "--direct=1",
                       "--ioengine=io_uring", "--iodepth=16"], dict(os.environ), data)
        else:
            job = fio(["--name=r", f"--filename={path}", "--size=1g", "--rw=read", "--bs=1m",
                       "--ioengine=psync"], env(), data)
        out[side] = job["read"]["bw"] / 1024.0
    return out


def seqwrite(data, sides):
    """MiB/s of 1 MiB sequential writes of 2 GiB (4x the shim's cache), fsync at the end."""
    out = {}
    for side, env in sides:
        fresh(data)
        path = os.path.join(data, "seqw.dat")
        drop_page_cache()
        direct = ["--direct=1"] if side == "limit" else []
        job = fio(["--name=sw", f"--filename={path}", "--size=2g", "--rw=write", "--bs=1m", "--ioengine=psync",
                   "--end_fsync=1", *direct], env() if side != "limit" else dict(os.environ), data)
        # fio's bandwidth leaves out the final fsync: bytes over the job's whole time instead.
        out[side] = job["write"]["io_bytes"] / 1048576.0 / (job["job_runtime"] / 1000.0)
    return out


def syncwrite(data, sides):
    """IOPS of 4 KiB appends to a 256 MiB file (wrapping round), each followed by fdatasync:
    a database's log. The limit writes with O_DIRECT, each write then synced."""
    out = {}
    for side, env in sides:
        fresh(data)
        path = os.path.join(data, "log.dat")
        drop_page_cache()
        direct = ["--direct=1"] if side == "limit" else []
        job = fio(["--name=sy", f"--filename={path}", "--size=256m", "--rw=write", "--bs=4k", "--ioengine=psync",
                   "--fdatasync=1", "--time_based", f"--runtime={RUNTIME}", *direct],
                  env() if side != "limit" else dict(os.environ), data)
        out[side] = job["write"]["iops"]
    return out


WORKLOADS = {
    "randwrite-one": ("random 4 KiB writes, 2 processes, one 256 MiB file", "IOPS", "one-memcpy ceiling", "1G"),
    "randwrite-own": ("random 4 KiB writes, a 128 MiB file per process", "IOPS", "one-memcpy ceiling", "1G"),
    "warm-randread": ("warm 2nd process, random 4 KiB reads of 512 MiB", "IOPS", "one-memcpy ceiling", "1G"),
    "zipf-randread": ("Zipf 0.99 4 KiB reads, 2 processes, file 4x the cache", "IOPS", "one-memcpy ceiling", "256M"),
    "seqread": ("sequential 1 MiB reads, file 2x the cache", "MiB/s", "O_DIRECT depth 16", "512M"),
    "seqwrite": ("sequential 1 MiB writes, 4x the cache, fsync", "MiB/s", "O_DIRECT psync", "512M"),
    "syncwrite": ("4 KiB appends, fdatasync each, 256 MiB", "IOPS", "O_DIRECT + fdatasync", "512M"),
}


def main():
    global SHIM, UPCACHE
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--dir", help="where the files go (default: a temporary directory under /var/tmp)")
    ap.add_argument("--shim", default=SHIM, help="the shim to measure (default: the release build's)")
    ap.add_argument("--upcache", default=UPCACHE,
                    help="the `upcache` binary whose `serve` the shim attaches to (of the shim's build)")
    ap.add_argument("--serve", default="",
                    help="more flags for each run's `upcache serve`, e.g. \"--range-lock off\" (a "
                         "technique switched off)")
    ap.add_argument("--off", default="",
                    help="flags of a fourth side's service, e.g. \"--index sharded\": the shim with a "
                         "technique off, measured in the same rounds")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR",
                    help="a side of another build's shim and service (DIR holds its libupcache_preload.so "
                         "and upcache), named build-NAME, on a fresh service each run as the shim's")
    ap.add_argument("--private", action="append", default=[], metavar="NAME=SO",
                    help="a side of shim SO on private caches (UPCACHE_SHARED=0), named private-NAME")
    args = ap.parse_args()
    privates = []
    for p in args.private:
        name, _, so = p.partition("=")
        if not so or not os.path.exists(so):
            sys.exit(f"--private {p}: NAME=SO, with SO a shim that exists")
        privates.append((f"private-{name}", os.path.abspath(so)))
    builds = []
    for b in args.build:
        name, _, d = b.partition("=")
        so, bin_ = os.path.join(d, "libupcache_preload.so"), os.path.join(d, "upcache")
        if not d or not os.path.exists(so) or not os.path.exists(bin_):
            sys.exit(f"--build {b}: NAME=DIR, with DIR holding libupcache_preload.so and upcache")
        builds.append((f"build-{name}", os.path.abspath(so), os.path.abspath(bin_)))
    SERVE_FLAGS.extend(args.serve.split())
    OFF_FLAGS.extend(args.off.split())
    SHIM = os.path.abspath(args.shim)
    UPCACHE = os.path.abspath(args.upcache)
    only = args.only.split(",")
    for w in only:
        if w not in WORKLOADS:
            sys.exit(f"unknown workload {w}; known: {', '.join(WORKLOADS)}")
    for f in (SHIM, UPCACHE):
        if not os.path.exists(f):
            sys.exit(f"{f} is missing: cargo build --release -p upcache-cli -p upcache-preload")
    root = args.dir or tempfile.mkdtemp(prefix="upcache-shimfio.", dir="/var/tmp")
    data = os.path.join(root, "data")
    ceiling_so = os.path.join(root, "memory_preload.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", ceiling_so,
                    os.path.join(ROOT, "bench/memory_preload.c"), "-ldl"], check=True)
    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    results = {}  # (workload, side) -> [values]
    for rnd in range(args.rounds):
        for w in only:
            title, unit, limit, memory = WORKLOADS[w]
            services = {}

            def shim_with(side, extra, so=None, upcache=None):
                def start():
                    services[side] = Service(memory, extra, upcache or UPCACHE)
                    return shim_env(base, root, services[side], so or SHIM)
                return start

            sides = [("kernel", lambda: base), ("shim", shim_with("shim", ())),
                     ("limit", lambda: ceiling_env(base, root, ceiling_so, w.startswith("randwrite")))]
            if OFF_FLAGS:
                sides.append(("shim-off", shim_with("shim-off", OFF_FLAGS)))
            for name, so in privates:
                sides.append((name, lambda so=so, memory=memory: private_env(base, root, so, memory)))
            for name, so, bin_ in builds:
                sides.append((name, shim_with(name, (), so, bin_)))
            # Rotate which side goes first.
            turn = rnd % len(sides)
            sides = sides[turn:] + sides[:turn]

            def run_with(fn):
                def stop_after(sides):
                    out = {}
                    for side, env in sides:
                        try:
                            out.update(fn(data, [(side, env)]))
                        finally:
                            if side in services:
                                services.pop(side).stop()
                    return out
                return stop_after

            if w == "randwrite-one":
                got = run_with(lambda d, s: randwrite(d, s, True))(sides)
            elif w == "randwrite-own":
                got = run_with(lambda d, s: randwrite(d, s, False))(sides)
            elif w == "warm-randread":
                got = run_with(warm_randread)(sides)
            elif w == "zipf-randread":
                got = run_with(zipf_randread)(sides)
            elif w == "seqread":
                got = run_with(seqread)(sides)
            elif w == "syncwrite":
                got = run_with(syncwrite)(sides)
            else:
                got = run_with(seqwrite)(sides)
            for side, v in got.items():
                results.setdefault((w, side), []).append(v)
            shown = ("kernel", "shim", "limit", "shim-off") if OFF_FLAGS else ("kernel", "shim", "limit")
            shown += tuple(name for name, _ in privates) + tuple(name for name, _, _ in builds)
            print(f"round {rnd + 1} {w}: " + ", ".join(f"{s} {got[s]:.0f}" for s in shown), flush=True)
    print(f"\nmedians of {args.rounds} round(s), files in {root}"
          + (f"; shim-off: the service with {' '.join(OFF_FLAGS)}" if OFF_FLAGS else ""))
    off_head = f" {'shim-off':>9} {'on/off':>7}" if OFF_FLAGS else ""
    print(f"{'workload':<50} {'unit':<6} {'kernel':>9} {'shim':>9} {'limit':>9} {'shim/kernel':>11} "
          f"{'shim/limit':>10}{off_head}  limit")
    for w in only:
        title, unit, limit, _ = WORKLOADS[w]
        k, s, m = (statistics.median(results[(w, side)]) for side in ("kernel", "shim", "limit"))
        off = ""
        if OFF_FLAGS:
            o = statistics.median(results[(w, "shim-off")])
            off = f" {o:>9.0f} {s / o:>6.2f}x"
        print(f"{title:<50} {unit:<6} {k:>9.0f} {s:>9.0f} {m:>9.0f} {s / k:>10.2f}x {s / m:>9.2f}x{off}  {limit}")
        for name in [n for n, _ in privates] + [n for n, _, _ in builds]:
            v = statistics.median(results[(w, name)])
            print(f"  {name:<48} {unit:<6} {v:>9.0f}: {v / k:.2f}x kernel, {v / m:.2f}x limit, {v / s:.2f}x shared")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
