"""Writers and an mmap reader share one SQLite database (issue 33): WRITERS processes each
commit TXNS BEGIN IMMEDIATE transactions in journal MODE (wal or delete), while one more
process reads it with mmap_size set (SQLite maps the database, and in WAL mode every
connection maps the -shm index), until the writers are done. Exits 0 if no writer failed and
every acknowledged row is there with integrity_check ok.
Usage: sqlite_modes.py DB MODE WRITERS TXNS"""
import multiprocessing as mp
import os
import sqlite3
import sys
import time


def connect(db):
    return sqlite3.connect(db, timeout=60, isolation_level=None)


def writer(db, wid, n, acked):
    con = connect(db)
    for i in range(n):
        while True:
            try:
                con.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                time.sleep(0.001)
        con.execute("INSERT INTO t(w, i, pad) VALUES (?, ?, ?)", (wid, i, os.urandom(50 + i % 200)))
        con.execute("COMMIT")
        acked.value = i + 1
    con.close()


def reader(db, stop):
    con = connect(db)
    con.execute("PRAGMA mmap_size=268435456")
    while not stop.is_set():
        con.execute("SELECT count(*), sum(length(pad)) FROM t").fetchone()
    con.close()


if __name__ == "__main__":
    db, mode, procs, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for suffix in ("", "-journal", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    con = connect(db)
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("CREATE TABLE t(w, i, pad)")
    con.close()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    acked = [ctx.Value("i", 0) for _ in range(procs)]
    r = ctx.Process(target=reader, args=(db, stop))
    r.start()
    ws = [ctx.Process(target=writer, args=(db, w, n, acked[w])) for w in range(procs)]
    for p in ws:
        p.start()
    for p in ws:
        p.join()
    stop.set()
    r.join()
    failed = [p.exitcode for p in ws + [r] if p.exitcode != 0]
    con = connect(db)
    rows = {w: c for w, c in con.execute("SELECT w, count(*) FROM t GROUP BY w")}
    ok = con.execute("PRAGMA integrity_check").fetchone()[0]
    con.close()
    lost = {w: (a.value, rows.get(w, 0)) for w, a in enumerate(acked) if rows.get(w, 0) < a.value}
    print(f"mode {mode} writers {procs}: failed {failed} lost {lost} integrity {ok}")
    sys.exit(0 if not failed and not lost and ok == "ok" else 1)
