"""A process of the SQLite kill test (tests/kills.rs). `sqlite_killed.py DB init` makes the
table; `sqlite_killed.py DB W` commits rows (W, 0), (W, 1), ... one BEGIN IMMEDIATE
transaction each, saying "c I" once row I's COMMIT returned, until killed;
`sqlite_killed.py DB check ROWS` exits 0 if integrity_check is ok and every row "W I" listed
in the file ROWS is present."""
import os
import sqlite3
import sys
import time


def connect(db):
    return sqlite3.connect(db, timeout=60, isolation_level=None)


def busy(con, sql):
    """Runs `sql` again every millisecond while another process holds a lock it needs."""
    while True:
        try:
            con.execute(sql)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
            time.sleep(0.001)


def commit_rows(db, w):
    # No busy handler: its sleeps grow, so one process that commits again at once would keep
    # the others out for good; they retry every millisecond instead, and each process pauses
    # a millisecond after its commit.
    con = sqlite3.connect(db, timeout=0, isolation_level=None)
    for i in range(1 << 30):
        busy(con, "BEGIN IMMEDIATE")
        con.execute("INSERT INTO t(w, i, pad) VALUES (?, ?, ?)", (w, i, os.urandom(200 + i % 700)))
        busy(con, "COMMIT")
        os.write(1, b"c %d\n" % i)  # one write(2): a kill leaves no half line
        time.sleep(0.001)


def check(db, rows):
    con = connect(db)
    ok = con.execute("PRAGMA integrity_check").fetchone()[0]
    have = set(con.execute("SELECT w, i FROM t"))
    want = [tuple(map(int, line.split())) for line in open(rows)]
    lost = [r for r in want if r not in have]
    print(f"integrity {ok}, {len(have)} rows, {len(lost)} of {len(want)} committed rows lost {lost[:5]}")
    return ok == "ok" and not lost


if __name__ == "__main__":
    db, what = sys.argv[1], sys.argv[2]
    if what == "init":
        connect(db).execute("CREATE TABLE t(w, i, pad)")
    elif what == "check":
        sys.exit(0 if check(db, sys.argv[3]) else 1)
    else:
        commit_rows(db, int(what))
