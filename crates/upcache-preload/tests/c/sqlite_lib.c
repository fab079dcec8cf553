/* SQLite on upcache's library API (the C ABI), beside processes that reach the same database
 * through the shim: a VFS whose database and journal files read, write, truncate, size and
 * sync through a shared cache this process attached to (upcache_attach), while locking and
 * everything else stays with SQLite's own unix VFS on a descriptor of the same file, as with
 * the shim (POSIX locks stay with the kernel).
 * Usage: sqlite_lib SOCKET DB init             creates the table
 *        sqlite_lib SOCKET DB work WORKER N    N short transactions, as tests/py/sqlite_multi.py
 *        sqlite_lib SOCKET DB check ROWS       every row present and integrity_check ok */
#define _GNU_SOURCE
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "upcache.h"

#define DIE(...)                                      \
    do {                                              \
        fprintf(stderr, "sqlite_lib: " __VA_ARGS__); \
        fputc('\n', stderr);                          \
        exit(1);                                      \
    } while (0)

static struct upcache_cache *cache;
static sqlite3_vfs *unix_vfs;

/* An open file: SQLite's unix file (locks, file controls) followed, for the database and its
 * journal, by the cached handle that carries the data. */
typedef struct {
    sqlite3_file base;
    struct upcache_file *cached;
    sqlite3_file *os; /* unix_vfs->szOsFile bytes, right after this struct */
} File;

static sqlite3_file *os_of(sqlite3_file *f) { return ((File *)f)->os; }
static struct upcache_file *cached_of(sqlite3_file *f) { return ((File *)f)->cached; }

static int x_close(sqlite3_file *f) {
    int rc = SQLITE_OK;
    if (cached_of(f) && upcache_file_close(cached_of(f)) != UPCACHE_OK)
        rc = SQLITE_IOERR_CLOSE;
    int os = os_of(f)->pMethods ? os_of(f)->pMethods->xClose(os_of(f)) : SQLITE_OK;
    return rc != SQLITE_OK ? rc : os;
}

static int x_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off) {
    if (!cached_of(f))
        return os_of(f)->pMethods->xRead(os_of(f), buf, amt, off);
    int64_t got = upcache_pread(cached_of(f), buf, (size_t)amt, (uint64_t)off);
    if (got < 0)
        return SQLITE_IOERR_READ;
    if (got < amt) {
        /* SQLite asks that the rest be zeroed and the short read said. */
        memset((char *)buf + got, 0, (size_t)(amt - got));
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

static int x_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off) {
    if (!cached_of(f))
        return os_of(f)->pMethods->xWrite(os_of(f), buf, amt, off);
    int64_t put = upcache_pwrite(cached_of(f), buf, (size_t)amt, (uint64_t)off);
    if (put == UPCACHE_ENOSPC)
        return SQLITE_FULL;
    return put == amt ? SQLITE_OK : SQLITE_IOERR_WRITE;
}

static int x_truncate(sqlite3_file *f, sqlite3_int64 size) {
    if (!cached_of(f))
        return os_of(f)->pMethods->xTruncate(os_of(f), size);
    return upcache_ftruncate(cached_of(f), (uint64_t)size) == UPCACHE_OK ? SQLITE_OK : SQLITE_IOERR_TRUNCATE;
}

static int x_sync(sqlite3_file *f, int flags) {
    if (!cached_of(f))
        return os_of(f)->pMethods->xSync(os_of(f), flags);
    int rc = (flags & SQLITE_SYNC_DATAONLY) ? upcache_fdatasync(cached_of(f)) : upcache_fsync(cached_of(f));
    return rc == UPCACHE_OK ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

static int x_file_size(sqlite3_file *f, sqlite3_int64 *size) {
    if (!cached_of(f))
        return os_of(f)->pMethods->xFileSize(os_of(f), size);
    uint64_t len;
    if (upcache_size(cached_of(f), &len) != UPCACHE_OK)
        return SQLITE_IOERR_FSTAT;
    *size = (sqlite3_int64)len;
    return SQLITE_OK;
}

static int x_lock(sqlite3_file *f, int level) { return os_of(f)->pMethods->xLock(os_of(f), level); }
static int x_unlock(sqlite3_file *f, int level) { return os_of(f)->pMethods->xUnlock(os_of(f), level); }
static int x_check_reserved(sqlite3_file *f, int *out) {
    return os_of(f)->pMethods->xCheckReservedLock(os_of(f), out);
}

static int x_file_control(sqlite3_file *f, int op, void *arg) {
    /* A size hint would grow the OS file behind the cache's back; the cache sizes the file. */
    if (cached_of(f) && (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE))
        return SQLITE_OK;
    return os_of(f)->pMethods->xFileControl(os_of(f), op, arg);
}

static int x_sector_size(sqlite3_file *f) { return os_of(f)->pMethods->xSectorSize(os_of(f)); }
static int x_device_characteristics(sqlite3_file *f) {
    return os_of(f)->pMethods->xDeviceCharacteristics(os_of(f));
}

/* Version 1: no shared-memory (WAL) or memory-mapped methods, so SQLite reads every page
 * through x_read. */
static const sqlite3_io_methods cached_methods = {
    .iVersion = 1,
    .xClose = x_close,
    .xRead = x_read,
    .xWrite = x_write,
    .xTruncate = x_truncate,
    .xSync = x_sync,
    .xFileSize = x_file_size,
    .xLock = x_lock,
    .xUnlock = x_unlock,
    .xCheckReservedLock = x_check_reserved,
    .xFileControl = x_file_control,
    .xSectorSize = x_sector_size,
    .xDeviceCharacteristics = x_device_characteristics,
};

static int x_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *out, int flags, int *out_flags) {
    (void)vfs;
    File *f = (File *)out;
    memset(f, 0, sizeof *f);
    f->os = (sqlite3_file *)(f + 1);
    int rc = unix_vfs->xOpen(unix_vfs, name, f->os, flags, out_flags);
    if (rc != SQLITE_OK)
        return rc;
    out->pMethods = &cached_methods;
    if (!name || !(flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL)))
        return SQLITE_OK; /* a temporary file: its data stays with the unix VFS too */
    if (upcache_file_open_path(cache, name, false, &f->cached) != UPCACHE_OK) {
        f->os->pMethods->xClose(f->os);
        out->pMethods = NULL;
        fprintf(stderr, "sqlite_lib: open %s: %s\n", name, upcache_last_error());
        return SQLITE_CANTOPEN;
    }
    return SQLITE_OK;
}

static sqlite3_vfs cached_vfs;

static void register_vfs(void) {
    unix_vfs = sqlite3_vfs_find("unix");
    if (!unix_vfs)
        DIE("no unix VFS");
    cached_vfs = *unix_vfs;
    cached_vfs.iVersion = 1;
    cached_vfs.szOsFile = (int)sizeof(File) + unix_vfs->szOsFile;
    cached_vfs.zName = "upcache";
    cached_vfs.xOpen = x_open;
    if (sqlite3_vfs_register(&cached_vfs, 1) != SQLITE_OK)
        DIE("cannot register the VFS");
}

static void exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        DIE("%s: %s", sql, err);
}

static sqlite3_int64 one_int(sqlite3 *db, const char *sql, sqlite3_int64 bind) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        DIE("%s: %s", sql, sqlite3_errmsg(db));
    if (bind >= 0)
        sqlite3_bind_int64(st, 1, bind);
    if (sqlite3_step(st) != SQLITE_ROW)
        DIE("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_int64 v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* As the Python worker: BEGIN IMMEDIATE (retried while another process holds the write
 * lock), insert a row, check that every row this worker inserted is there, commit. */
static void work(sqlite3 *db, int worker, int n) {
    sqlite3_busy_timeout(db, 60000);
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(db, "INSERT INTO t(w, i, pad) VALUES (?, ?, ?)", -1, &ins, NULL) != SQLITE_OK)
        DIE("prepare: %s", sqlite3_errmsg(db));
    unsigned char pad[400];
    srand((unsigned)worker * 7919u);
    for (int i = 0; i < n; i++) {
        while (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL); /* busy: SQLite's lock, held by another process */
        }
        size_t len = 100 + (size_t)(i % 300);
        for (size_t k = 0; k < len; k++)
            pad[k] = (unsigned char)rand();
        sqlite3_bind_int(ins, 1, worker);
        sqlite3_bind_int(ins, 2, i);
        sqlite3_bind_blob(ins, 3, pad, (int)len, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE)
            DIE("insert %d: %s", i, sqlite3_errmsg(db));
        sqlite3_reset(ins);
        sqlite3_int64 mine = one_int(db, "SELECT count(*) FROM t WHERE w = ?", worker);
        if (mine != i + 1)
            DIE("worker %d after insert %d sees %lld of its rows", worker, i, (long long)mine);
        exec(db, "COMMIT");
    }
    sqlite3_finalize(ins);
}

int main(int argc, char **argv) {
    if (argc < 4)
        DIE("usage: sqlite_lib SOCKET DB init|work WORKER N|check ROWS");
    if (upcache_attach(argv[1], 64 << 20, &cache) != UPCACHE_OK)
        DIE("attach %s: %s", argv[1], upcache_last_error());
    register_vfs();
    sqlite3 *db;
    if (sqlite3_open(argv[2], &db) != SQLITE_OK)
        DIE("open %s: %s", argv[2], sqlite3_errmsg(db));
    if (!strcmp(argv[3], "init")) {
        exec(db, "CREATE TABLE t(w, i, pad)");
    } else if (!strcmp(argv[3], "work") && argc == 6) {
        work(db, atoi(argv[4]), atoi(argv[5]));
    } else if (!strcmp(argv[3], "check") && argc == 5) {
        sqlite3_int64 rows = one_int(db, "SELECT count(*) FROM t", -1);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL);
        const char *check = sqlite3_step(st) == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : "?";
        printf("rows %lld of %s integrity %s\n", (long long)rows, argv[4], check);
        if (rows != atoll(argv[4]) || strcmp(check, "ok"))
            exit(1);
        sqlite3_finalize(st);
    } else {
        DIE("bad arguments");
    }
    if (sqlite3_close(db) != SQLITE_OK)
        DIE("close: %s", sqlite3_errmsg(db));
    if (upcache_close(cache) != UPCACHE_OK)
        DIE("detach: %s", upcache_last_error());
    return 0;
}
