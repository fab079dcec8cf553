#!/usr/bin/env python3
"""Runs fio, sqlite3 and db_bench with and without the upcache LD_PRELOAD shim (see
ci/programs.sh). Every run must be correct (fio: no errors and verify on; sqlite: exact
counts and integrity_check ok, also read back without the shim; db_bench: the same found
count as without the shim), and the shim's counters must show that it served the files.
Each round also runs them on the one-memcpy ceiling (bench/memory_preload.c with
MEMORY_WRITES=1: each file an image in the program's memory, each pread/pwrite one memcpy,
nothing durable), the most a cache that serves these calls could give where the program
itself binds first; not for fio's randrw, whose reads the device serves on every side (fio
drops the files' cache first); db_bench fills its database on the kernel for it and has images of the
files it reads only (RocksDB appends with write(2) and reads its files back by path), so it
has readrandom only. Prints a table of throughput, medians over
the rounds."""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

FIO_JOBS = 4


def run(cmd, env, **kw):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def stats_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [dict(kv.split("=", 1) for kv in line.split()) for line in f if line.strip()]
    os.remove(path)
    return [{k: int(v) for k, v in l.items()} for l in lines]


def check_served(name, path, want_reads=True):
    """The shim's counters (UPCACHE_STATS) show it opened, wrote and read the files."""
    lines = stats_lines(path)
    opens = sum(l["opens"] for l in lines)
    wrote = sum(l["write_bytes"] for l in lines)
    read = sum(l["read_bytes"] for l in lines)
    if opens == 0 or wrote == 0 or (want_reads and read == 0):
        sys.exit(f"FAILED: {name}: the shim did not serve the files: {lines}")
    return opens, wrote, read


def fresh(d):
    """An empty directory, and nothing dirty left by the previous program: its data reaching
    the device (ext4 commits other files' data with a sync) would be timed in this one."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.sync()


def fio(engine, data, env, shim):
    """IOPS (read + write) of a 4-job random read/write run that verifies every block."""
    fresh(data)
    cmd = ["fio", "--name=randrw", f"--directory={data}", f"--ioengine={engine}", "--rw=randrw",
           "--bs=4k", "--size=64m", f"--numjobs={FIO_JOBS}", "--verify=crc32c", "--do_verify=1",
           "--verify_fatal=1", "--group_reporting", "--output-format=json"]
    # Threads, so that one process's counters cover every job (pvsync2 runs as processes
    # instead: each forked job makes its own cache).
    if engine == "psync":
        cmd.append("--thread")
    # In the data directory: fio leaves its verify state files in the working directory.
    out = json.loads(run(cmd, env, cwd=data).stdout)
    job = out["jobs"][0]
    if job["error"] != 0:
        sys.exit(f"FAILED: fio {engine}: error {job['error']}")
    if job["read"]["io_bytes"] == 0 or job["write"]["io_bytes"] == 0:
        sys.exit(f"FAILED: fio {engine}: no I/O")
    return job["read"]["iops"] + job["write"]["iops"]


WARM_SIZE = "512m"


def fio_warm(data, env, shim):
    """IOPS of 2 fio job processes reading at random (4 KiB, psync) a 512 MiB file that an
    earlier fio process wrote and read once: warm across processes (the kernel's page cache,
    or the shared cache the shim attaches every process to)."""
    fresh(data)
    common = ["--name=warm", f"--directory={data}", "--filename=warm.dat", f"--size={WARM_SIZE}",
              "--ioengine=psync", "--bs=4k", "--invalidate=0", "--output-format=json"]
    run(["fio", *common, "--rw=read", "--bs=1m"], env, cwd=data)
    out = json.loads(run(["fio", *common, "--rw=randread", "--numjobs=2", "--time_based",
                          "--runtime=5", "--group_reporting"], env, cwd=data).stdout)
    job = out["jobs"][0]
    if job["error"] != 0 or job["read"]["io_bytes"] == 0:
        sys.exit(f"FAILED: fio warm randread: {job['error']}")
    return job["read"]["iops"]


SQL_ROWS = 10_000


def sqlite(data, env, shim, durable=True):
    """Inserts per second: a table, 10,000 inserts in 10 transactions, queries, integrity;
    read back without the shim if `durable` (not the ceiling, which writes nothing)."""
    fresh(data)
    db = os.path.join(data, "t.sqlite")
    lines = ["create table t(id integer primary key, k integer, v text);",
             "create index t_k on t(k);"]
    for b in range(10):
        lines.append("begin;")
        for i in range(SQL_ROWS // 10):
            n = b * (SQL_ROWS // 10) + i
            lines.append(f"insert into t(k, v) values({(n * 7919) % SQL_ROWS}, 'row {n} ' || hex(randomblob(32)));")
        lines.append("commit;")
    lines += ["select count(*), count(distinct k), sum(k) from t;",
              "select count(*) from t where k < 100;",
              "pragma integrity_check;"]
    start = time.perf_counter()
    out = run(["sqlite3", db], env, input="\n".join(lines) + "\n").stdout.split()
    took = time.perf_counter() - start
    want = [f"{SQL_ROWS}|{SQL_ROWS}|{SQL_ROWS * (SQL_ROWS - 1) // 2}", "100", "ok"]
    if out != want:
        sys.exit(f"FAILED: sqlite3: {out} != {want}")
    if not durable:
        return SQL_ROWS / took
    # The OS file, read without the shim, holds the same database.
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    again = run(["sqlite3", db, "select count(*) from t; pragma integrity_check;"], plain).stdout.split()
    if again != [str(SQL_ROWS), "ok"]:
        sys.exit(f"FAILED: sqlite3 reopened without the shim: {again}")
    return SQL_ROWS / took


DB_KEYS = 200_000


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache():
    """Empties the kernel's page cache (root only): False if it cannot."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def db_bench(data, env, shim, fill_env=None):
    """fillrandom ops/s (through `fill_env` if given), then readrandom ops/s and keys found by a
    second process (warm: the kernel's page cache, or the shared cache, as the fill left it),
    and again after emptying the kernel's page cache (cold; None without root; the shared
    cache stays warm)."""
    fresh(data)
    db = os.path.join(data, "rocksdb")
    common = [f"--db={db}", f"--num={DB_KEYS}", "--value_size=100", "--compression_type=none",
              "--write_buffer_size=4194304", "--target_file_size_base=4194304", "--cache_size=8388608"]
    fill = run(["db_bench", "--benchmarks=fillrandom", "--seed=42", *common], fill_env or env).stdout
    f = re.search(r"^fillrandom\s*:.*?([\d.]+) ops/sec", fill, re.M)
    if not f:
        sys.exit(f"FAILED: db_bench output:\n{fill}")
    reads, found = [], set()
    for cold in (False, True):
        if cold and not drop_page_cache():
            reads.append(None)
            continue
        read = run(["db_bench", "--benchmarks=readrandom", "--use_existing_db=1", "--seed=43",
                    f"--reads={DB_KEYS}", *common], env).stdout
        r = re.search(r"^readrandom\s*:.*?([\d.]+) ops/sec.*\((\d+) of (\d+) found\)", read, re.M)
        if not r or int(r.group(3)) != DB_KEYS:
            sys.exit(f"FAILED: db_bench output:\n{read}")
        reads.append(float(r.group(1)))
        found.add(int(r.group(2)))
    if len(found) != 1:
        sys.exit(f"FAILED: db_bench readrandom found {found} keys in two runs")
    return float(f.group(1)), reads[0], reads[1], found.pop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", help="where the programs' files go (default: a temporary directory)")
    args = ap.parse_args()
    shim = os.path.abspath(args.shim)
    root = args.dir or tempfile.mkdtemp(prefix="upcache-programs.")
    data = os.path.join(root, "data")
    stats = os.path.join(root, "shim.stats")
    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    # Every shimmed process attaches to one shared cache (the default) of its own for this
    # run: a service started by the first, exiting a second after the last.
    service = tempfile.mkdtemp(prefix="upcache-programs-service.")
    cached = dict(base, LD_PRELOAD=shim, UPCACHE_PREFIX=root, UPCACHE_MEMORY="1G", UPCACHE_STATS=stats,
                  UPCACHE_SOCKET=os.path.join(service, "cache.sock"), UPCACHE_IDLE="1")
    os.makedirs(data, exist_ok=True)
    ceiling_so = os.path.join(service, "memory_preload.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", ceiling_so,
                    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "bench/memory_preload.c"), "-ldl"], check=True)
    ceiling = dict(base, LD_PRELOAD=ceiling_so, MEMORY_PREFIX=root, MEMORY_WRITES="1")

    results = {}  # (program, metric, mode) -> [values]
    found = {}

    def record(program, metric, mode, value):
        results.setdefault((program, metric, mode), []).append(value)

    for rnd in range(args.rounds):
        for mode, env in (("kernel", base), ("shim", cached), ("ceiling", ceiling)):
            # fio's randrw empties the files' cache first (invalidate), so its reads go to the
            # device on the kernel and through the shim, which no memory image models: no
            # ceiling for it (the device binds there).
            for engine in ("psync", "pvsync2") if mode != "ceiling" else ():
                record(f"fio {engine} randrw 4k, {FIO_JOBS} jobs, verify", "IOPS", mode, fio(engine, data, env, shim))
                if mode == "shim":
                    check_served(f"fio {engine}", stats)
            record("fio psync randread 4k, 2 jobs, warm 512m", "IOPS", mode, fio_warm(data, env, shim))
            if mode == "shim":
                check_served("fio warm", stats, want_reads=True)
            record("sqlite3 10k inserts", "inserts/s", mode, sqlite(data, env, shim, mode != "ceiling"))
            if mode == "shim":
                check_served("sqlite3", stats)
            # On the ceiling, RocksDB's reopen writes (a manifest, a flush) go to the kernel: its
            # files are written by append and read back by path.
            reads_env = {k: v for k, v in env.items() if k != "MEMORY_WRITES"}
            fill, warm, cold, hit = db_bench(data, reads_env, shim, base if mode == "ceiling" else None)
            if mode != "ceiling":
                record("db_bench fillrandom", "ops/s", mode, fill)
            record("db_bench readrandom, kernel cache warm", "ops/s", mode, warm)
            if cold is not None:
                record("db_bench readrandom, kernel cache cold", "ops/s", mode, cold)
            found.setdefault(mode, set()).add(hit)
            if mode == "shim":
                check_served("db_bench", stats)
        print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    if not found["kernel"] == found["shim"] == found["ceiling"] or len(found["kernel"]) != 1:
        sys.exit(f"FAILED: db_bench readrandom found {found['shim']} keys with the shim, {found['ceiling']} on "
                 f"the ceiling, {found['kernel']} on the kernel")

    print(f"\nmedians of {args.rounds} round(s), data in {root} ({fs_of(root)})")
    print(f"{'program':<42} {'metric':<10} {'kernel':>10} {'shim':>10} {'ceiling':>10} {'shim/kernel':>12} "
          f"{'shim/ceiling':>13}")
    programs = []
    for (program, metric, _mode) in results:
        if (program, metric) not in programs:
            programs.append((program, metric))
    for program, metric in programs:
        k = statistics.median(results[(program, metric, "kernel")])
        s = statistics.median(results[(program, metric, "shim")])
        c = results.get((program, metric, "ceiling"))
        c = statistics.median(c) if c else None
        ceil, of_ceil = (f"{c:>10.0f}", f"{s / c:>12.2f}x") if c else (f"{'-':>10}", f"{'-':>13}")
        print(f"{program:<42} {metric:<10} {k:>10.0f} {s:>10.0f} {ceil} {s / k:>11.2f}x {of_ceil}")
    print(f"db_bench readrandom found {found['kernel'].pop()} of {DB_KEYS} keys, with and without the shim")
    print("all programs passed")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(service, ignore_errors=True)


def fs_of(path):
    p = subprocess.run(["df", "--output=fstype", path], capture_output=True, text=True)
    return p.stdout.split()[-1] if p.returncode == 0 else "?"


if __name__ == "__main__":
    main()
