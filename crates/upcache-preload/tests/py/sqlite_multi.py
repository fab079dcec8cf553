"""Long-lived processes share one SQLite database through the shim, each doing short
BEGIN IMMEDIATE transactions (serialised by SQLite's own locks) that insert a row and check
that every row it inserted before is there. At the end every row must be present and
integrity_check ok. Usage: sqlite_multi.py DB PROCESSES TRANSACTIONS, or one worker beside
processes of another kind (tests/c/sqlite_lib.c): sqlite_multi.py DB worker WORKER N, and the
check at the end: sqlite_multi.py DB check ROWS"""
import multiprocessing as mp
import os
import sqlite3
import sys
import time


def worker(db, wid, n):
    con = sqlite3.connect(db, timeout=60, isolation_level=None)
    for i in range(n):
        while True:
            try:
                con.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError:
                time.sleep(0.001)  # busy: another process holds the write lock
        con.execute("INSERT INTO t(w, i, pad) VALUES (?, ?, ?)", (wid, i, os.urandom(100 + i % 300)))
        (c,) = con.execute("SELECT count(*) FROM t WHERE w = ?", (wid,)).fetchone()
        assert c == i + 1, (wid, i, c)
        con.execute("COMMIT")
    con.close()


def check(db, rows):
    """Exits 0 if the database holds `rows` rows and passes integrity_check."""
    con = sqlite3.connect(db)
    got = con.execute("SELECT count(*) FROM t").fetchone()[0]
    ok = con.execute("PRAGMA integrity_check").fetchone()[0]
    print(f"rows {got} of {rows} integrity {ok}")
    return got == rows and ok == "ok"


if __name__ == "__main__":
    if sys.argv[2] == "worker":
        worker(sys.argv[1], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    if sys.argv[2] == "check":
        sys.exit(0 if check(sys.argv[1], int(sys.argv[3])) else 1)
    db, procs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for suffix in ("", "-journal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t(w, i, pad)")
    con.commit()
    con.close()
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=worker, args=(db, w, n)) for w in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    failed = [p.exitcode for p in ps if p.exitcode != 0]
    print(f"failed workers {failed}")
    sys.exit(0 if check(db, procs * n) and not failed else 1)
