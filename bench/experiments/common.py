"""Shared by the experiment scripts (one per seed paper's claims): build the release binary
if needed, run `upcache bench --json` rows side by side, interleaved round by round (so that
the machine's drift hits every row alike), and print each row's medians and the ratios that
the claim is about.

A row is (name, bench args, cgroup memory limit or None); the limit caps the kernel's page
cache to upcache's budget for fair comparisons (needs root and cgroup v1).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_run import CGROUP, UPCACHE, upcache  # noqa: E402

# What the bench process needs besides the page cache, included in the kernel's cap.
PROCESS_SLACK = 16 << 20
START = time.time()


def build():
    """Builds target/release/upcache (a no-op when it is up to date)."""
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "upcache-cli"], cwd=ROOT, check=True)


def size_bytes(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def hit_ratio(r):
    h, m = r.get("hits"), r.get("misses")
    return 100.0 * h / (h + m) if h is not None and m and h + m else float("nan")


# Columns: name, how to read it from a report, format.
METRICS = {
    "iops": (lambda r: r["iops"], "{:10.0f}"),
    "MiB/s": (lambda r: r["mib_s"], "{:8.1f}"),
    "p50us": (lambda r: r["lat_us"]["p50"], "{:8.0f}"),
    "p99us": (lambda r: r["lat_us"]["p99"], "{:8.0f}"),
    "read_p99us": (lambda r: (r.get("read_lat_us") or {}).get("p99", float("nan")), "{:10.0f}"),
    "read_p999us": (lambda r: (r.get("read_lat_us") or {}).get("p999", float("nan")), "{:11.0f}"),
    "write_p999us": (lambda r: (r.get("write_lat_us") or {}).get("p999", float("nan")), "{:12.0f}"),
    "cpu_us/op": (lambda r: r["cpu_us_per_op"], "{:9.2f}"),
    "cpu_cores": (lambda r: r["cpu_seconds"] / r["seconds"], "{:9.2f}"),
    "hit%": (hit_ratio, "{:6.1f}"),
}


def cpu_bound_reads(d):
    """Bench flags for 4 KiB random reads, 4 threads, of 256 MiB through a 64 MiB cache (75%
    misses) on 4 simulated devices with no device time: what is left is the cache's own CPU."""
    fast = "read-latency=0us,write-latency=0us,bandwidth=100g,gc-every=0,jitter=0"
    return ["--engine", "upcache", "--rw", "randread", "--bs", "4k", "--size", "256m", "--cache", "64m",
            "--threads", "4", "--runtime", "4s", "--devices", "sim:4", "--sim", fast, "--dir", d]


def compare(title, rows, rounds, columns, ratios):
    """Runs `rows` for `rounds` interleaved rounds; prints medians of `columns` and, for each
    (a, b, metric) in `ratios`, median(a)/median(b). Returns {row: {metric: median}}."""
    print(f"\n== {title} ({rounds} rounds, interleaved) ==", flush=True)
    got = {name: [] for name, _, _ in rows}
    for i in range(rounds):
        for name, args, cap in rows:
            got[name].append(upcache(args, cap)[0])
        line = "  ".join(f"{k} {METRICS['iops'][0](v[-1]):.0f}" for k, v in got.items())
        print(f"round {i + 1} (iops): {line}", flush=True)
    med = {k: {c: statistics.median(METRICS[c][0](r) for r in v) for c in columns} for k, v in got.items()}
    width = max(len(k) for k in got)
    print(f"medians of {rounds}:")
    print("  " + " " * width + "".join(f" {c:>11}" for c in columns))
    for k in got:
        print("  " + k.ljust(width) + "".join(" " + METRICS[c][1].format(med[k][c]).rjust(11) for c in columns))
    for a, b, c in ratios:
        print(f"  {a} / {b} ({c}): {med[a][c] / med[b][c]:.2f}x")
    return med


def elapsed():
    return f"{time.time() - START:.0f} s"


def not_switchable(what, why):
    """Says that a technique has no off switch to compare against, instead of faking it."""
    print(f"\n== {what} ==\nnot measured on/off: {why}", flush=True)


def cleanup_cgroup():
    try:
        os.rmdir(CGROUP)
    except OSError:
        pass


def check_binary():
    if not os.path.exists(UPCACHE):
        sys.exit(f"{UPCACHE} is missing: build() failed?")


def start(name, doc, extra_args=None):
    """Parses --rounds and --dir (and `extra_args(parser)`), builds the binary, and makes the
    experiment's data directory. Returns (args, directory)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians of these)")
    ap.add_argument("--dir", default="/tmp/upcache-experiments", help="where the data goes")
    if extra_args:
        extra_args(ap)
    a = ap.parse_args()
    build()
    check_binary()
    d = os.path.join(a.dir, name)
    os.makedirs(d, exist_ok=True)
    return a, d


def finish():
    """Prints the wall time and removes the cgroup; the script's exit code."""
    print(f"\ntotal {elapsed()}")
    cleanup_cgroup()
    return 0
