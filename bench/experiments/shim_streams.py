#!/usr/bin/env python3
"""Seed 003's eviction by stream on the shared cache, through the shim: one fio process reads
a 128 MiB file at random (4 KiB), cached first, while another reads a 2 GiB file sequentially
(1 MiB, over and over), both through one 256 MiB shared cache; the random reader's IOPS and
the cache's hit ratio with stream-aware eviction on and off (`upcache serve --streams`), each
on a fresh service, in interleaved rounds, medians. (No kernel side: with this machine's
memory the kernel caches both files whole.)

    bench/experiments/shim_streams.py [--rounds 3] [--dir DIR] [--shim SO --upcache BIN]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import shim_fio  # noqa: E402


def run(data, streams):
    service = shim_fio.Service("256M", ["--streams", streams])
    try:
        env = shim_fio.shim_env(os.environ, data, service)
        # The random reader's file cached first (read once, in order, then at random as the
        # measured reader does, so its pages are referenced): the question is whether the scan
        # pushes it out. Missed with the loads' O_DIRECT reads, it never warms up beside the scan.
        subprocess.run(["fio", "--ioengine=psync", "--invalidate=0", "--name=warm",
                        f"--filename={os.path.join(data, 'hot.dat')}", "--size=128m", "--rw=read", "--bs=1m"],
                       env=env, cwd=data, check=True, capture_output=True)
        out = subprocess.run(
            ["fio", "--output-format=json", "--ioengine=psync", "--runtime=10", "--time_based",
             "--invalidate=0",
             "--name=hot", f"--filename={os.path.join(data, 'hot.dat')}", "--size=128m",
             "--rw=randread", "--bs=4k",
             "--name=scan", f"--filename={os.path.join(data, 'scan.dat')}", "--size=2g",
             "--rw=read", "--bs=1m"],
            env=env, cwd=data, check=True, capture_output=True, text=True).stdout
        jobs = json.loads(out[out.index("{"):])["jobs"]
        status = json.loads(subprocess.run([shim_fio.UPCACHE, "serve", "--status", "--json", "--socket",
                                            service.socket], check=True, capture_output=True,
                                           text=True).stdout)
    finally:
        service.stop()
    hits, misses = status["hits"], status["misses"]
    return {"hot_iops": jobs[0]["read"]["iops"], "scan_mib_s": jobs[1]["read"]["bw"] / 1024,
            "hit%": 100.0 * hits / max(1, hits + misses)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--shim", default=shim_fio.SHIM, help="the shim to measure (default: the release build's)")
    ap.add_argument("--upcache", default=shim_fio.UPCACHE, help="the `upcache` binary of the shim's build")
    a = ap.parse_args()
    shim_fio.SHIM, shim_fio.UPCACHE = os.path.abspath(a.shim), os.path.abspath(a.upcache)
    data = tempfile.mkdtemp(prefix="upcache-streams.", dir=a.dir or "/var/tmp")
    shim_fio.lay_out(os.path.join(data, "hot.dat"), "128m")
    shim_fio.lay_out(os.path.join(data, "scan.dat"), "2g")
    got = {"on": [], "off": []}
    for r in range(a.rounds):
        for side in (["on", "off"] if r % 2 == 0 else ["off", "on"]):
            got[side].append(run(data, side))
            print(f"round {r + 1} streams {side}: {got[side][-1]}", flush=True)
    med = {s: {k: statistics.median(x[k] for x in v) for k in v[0]} for s, v in got.items()}
    print(f"medians of {a.rounds}:")
    for s in ("on", "off"):
        print(f"  streams {s:3}: hot {med[s]['hot_iops']:9.0f} IOPS, scan {med[s]['scan_mib_s']:7.0f} MiB/s, "
              f"hits {med[s]['hit%']:5.1f}%")
    print(f"  on / off (hot IOPS): {med['on']['hot_iops'] / med['off']['hot_iops']:.2f}x")
    subprocess.run(["rm", "-rf", data], check=False)


if __name__ == "__main__":
    sys.exit(main())
