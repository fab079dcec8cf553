/* The C ABI from C: round trips, reopen, errors, and threads sharing a file handle.
 * Built and run by tests/c_abi.rs: test_capi DIR (an empty directory). Exit status 0 = pass. */
#include "upcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, upcache_last_error());                          \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#include "queue_check.h"

static unsigned char pattern(uint64_t i, unsigned seed) { return (unsigned char)((i * 131u + seed * 7u) >> 3); }

enum { THREADS = 4, SLICE = 256 * 1024 };

struct worker {
    upcache_file *file;
    unsigned id;
    int ok;
};

static void *work(void *arg) {
    struct worker *w = arg;
    unsigned char *buf = malloc(SLICE), *back = malloc(SLICE);
    uint64_t base = (uint64_t)w->id * SLICE + 1000; /* not page aligned */
    for (uint64_t i = 0; i < SLICE; i++) buf[i] = pattern(base + i, w->id);
    w->ok = upcache_pwrite(w->file, buf, SLICE, base) == SLICE &&
            upcache_pread(w->file, back, SLICE, base) == SLICE && memcmp(buf, back, SLICE) == 0;
    free(buf);
    free(back);
    return NULL;
}

static upcache_config *config(const char *root, char dirs[2][4096]) {
    const char *ptrs[2];
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], 4096, "%s/dev%d", root, i);
        ptrs[i] = dirs[i];
    }
    upcache_config *c = upcache_config_new(ptrs, 2, 16u << 20);
    CHECK(c != NULL);
    CHECK(upcache_config_set_stripe_unit(c, 8192) == UPCACHE_OK);
    CHECK(upcache_config_set_policy(c, "sieve") == UPCACHE_OK);
    CHECK(upcache_config_set_policy(c, "nonsense") == UPCACHE_ECONFIG); /* c is unchanged: */
    CHECK(upcache_config_set_allow_buffered(c, true) == UPCACHE_OK);
    CHECK(upcache_config_set_prefault(c, true) == UPCACHE_OK); /* 16 MiB resident at create */
    /* The checks below pass with a page per request and one writer per file too. */
    CHECK(upcache_config_set_switch(c, "run-merging", false) == UPCACHE_OK);
    CHECK(upcache_config_set_switch(c, "range-lock", false) == UPCACHE_OK);
    CHECK(upcache_config_set_switch(c, "bundling", true) == UPCACHE_OK);
    CHECK(upcache_config_set_switch(c, "warp-drive", true) == UPCACHE_EINVAL);
    return c;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    /* The library this program runs with is the one its header describes. */
    CHECK(upcache_version_number() ==
          UPCACHE_VERSION_MAJOR * 10000 + UPCACHE_VERSION_MINOR * 100 + UPCACHE_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%u.%u.%u", UPCACHE_VERSION_MAJOR, UPCACHE_VERSION_MINOR, UPCACHE_VERSION_PATCH);
    CHECK(strcmp(upcache_version(), want) == 0);

    char dirs[2][4096];
    upcache_config *cfg = config(argv[1], dirs);
    upcache_cache *cache = NULL;
    CHECK(upcache_create(cfg, &cache) == UPCACHE_OK);
    upcache_cache *again = NULL;
    CHECK(upcache_create(cfg, &again) == UPCACHE_EEXIST && again == NULL);
    /* Every placement resizes online: down to 1 MiB of frames, and back. */
    uint64_t in_use = 0;
    CHECK(upcache_resize(cache, 1 << 20, &in_use) == UPCACHE_OK && in_use == 1 << 20);
    CHECK(upcache_resize(cache, UINT64_MAX, &in_use) == UPCACHE_OK && in_use > 1 << 20);

    upcache_file *f = NULL;
    CHECK(upcache_file_create(cache, "data", &f) == UPCACHE_OK);
    CHECK(upcache_file_create(cache, "data", &f) == UPCACHE_EEXIST);

    /* Threads writing and reading disjoint slices through one handle. */
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){f, i, 0};
        pthread_create(&threads[i], NULL, work, &workers[i]);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(workers[i].ok);
    }
    uint64_t size = 0;
    CHECK(upcache_size(f, &size) == UPCACHE_OK);
    CHECK(size == (uint64_t)THREADS * SLICE + 1000);
    CHECK(upcache_fdatasync(f) == UPCACHE_OK);

    /* Reads past the end are short, then empty; truncation drops the tail. */
    unsigned char buf[8192];
    CHECK(upcache_pread(f, buf, sizeof buf, size - 100) == 100);
    CHECK(upcache_pread(f, buf, sizeof buf, size + 5) == 0);
    CHECK(upcache_ftruncate(f, size - 4096) == UPCACHE_OK);
    CHECK(upcache_size(f, &size) == UPCACHE_OK && size == (uint64_t)THREADS * SLICE + 1000 - 4096);
    CHECK(upcache_fsync(f) == UPCACHE_OK);

    /* Pins need the range lock, off here (a pin held while its thread writes could wait for
     * ever); below, with it on. */
    const void *pdata = NULL;
    size_t plen = 0;
    uint64_t pstart = 0;
    upcache_page *pg = NULL;
    CHECK(upcache_pin(f, 5000, &pdata, &plen, &pstart, &pg) == UPCACHE_EUNSUPPORTED);
    CHECK(upcache_pin(f, 0, NULL, &plen, NULL, &pg) == UPCACHE_EINVAL);
    CHECK(upcache_unpin(NULL) == UPCACHE_EINVAL);

    /* Errors: bad arguments and names are codes, never crashes. */
    CHECK(upcache_pread(NULL, buf, 1, 0) == UPCACHE_EINVAL);
    CHECK(upcache_pread(f, NULL, 10, 0) == UPCACHE_EINVAL);
    CHECK(upcache_pread(f, NULL, 0, 0) == 0);
    CHECK(upcache_pwrite(f, buf, (size_t)-1, 0) == UPCACHE_EINVAL);
    CHECK(upcache_size(f, NULL) == UPCACHE_EINVAL);
    upcache_file *g = NULL;
    CHECK(upcache_file_open(cache, "missing", &g) == UPCACHE_ENOENT);
    CHECK(upcache_file_create(cache, "a/b", &g) == UPCACHE_ENAME);
    CHECK(upcache_file_create(cache, "..", &g) == UPCACHE_ENAME);
    CHECK(upcache_file_create(cache, NULL, &g) == UPCACHE_EINVAL);
    CHECK(upcache_file_create(cache, "x", NULL) == UPCACHE_EINVAL);
    CHECK(strlen(upcache_last_error()) > 0);
    CHECK(strcmp(upcache_strerror(UPCACHE_ENOENT), "no such file") == 0);
    /* Counters: the threads' writes and reads went through the cache's frames. */
    upcache_stats st;
    CHECK(upcache_get_stats(cache, &st) == UPCACHE_OK);
    CHECK(st.frames > 0 && st.hits + st.misses > 0);
    CHECK(upcache_get_stats(cache, NULL) == UPCACHE_EINVAL);
    CHECK(upcache_get_stats(NULL, &st) == UPCACHE_EINVAL);
    CHECK(upcache_close(cache) == UPCACHE_EBUSY); /* a file is still open */
    CHECK(upcache_file_close(NULL) == UPCACHE_EINVAL);

    CHECK(upcache_file_close(f) == UPCACHE_OK);
    CHECK(upcache_close(cache) == UPCACHE_OK);
    CHECK(upcache_close(NULL) == UPCACHE_EINVAL);

    /* Reopen (with the range lock): every byte written is there. */
    CHECK(upcache_config_set_switch(cfg, "range-lock", true) == UPCACHE_OK);
    CHECK(upcache_open(cfg, &cache) == UPCACHE_OK);
    CHECK(upcache_file_open(cache, "data", &f) == UPCACHE_OK);
    unsigned char *back = malloc(SLICE);
    for (unsigned i = 0; i < THREADS; i++) {
        uint64_t base = (uint64_t)i * SLICE + 1000;
        int64_t want = i + 1 < THREADS ? SLICE : SLICE - 4096;
        CHECK(upcache_pread(f, back, SLICE, base) == want);
        for (int64_t j = 0; j < want; j++) {
            if (back[j] != pattern(base + (uint64_t)j, i)) {
                fprintf(stderr, "slice %u byte %lld differs after reopen\n", i, (long long)j);
                failures++;
                break;
            }
        }
    }
    free(back);
    /* Pins: a page's bytes in place, as pread reads them; the file does not close while one
     * is out. */
    CHECK(upcache_pin(f, 5000, &pdata, &plen, &pstart, &pg) == UPCACHE_OK);
    CHECK(pstart <= 5000 && 5000 < pstart + plen && plen <= sizeof buf);
    CHECK(upcache_pread(f, buf, plen, pstart) == (int64_t)plen && memcmp(buf, pdata, plen) == 0);
    CHECK(upcache_file_close(f) == UPCACHE_EBUSY);
    CHECK(upcache_unpin(pg) == UPCACHE_OK);
    CHECK(upcache_size(f, &size) == UPCACHE_OK);
    CHECK(upcache_pin(f, size, &pdata, &plen, NULL, &pg) == UPCACHE_EINVAL);
    /* The queue: writes and reads in flight at once, past the threads' slices. */
    queue_round_trip(cache, f, size + 5000);
    CHECK(upcache_file_close(f) == UPCACHE_OK);

    /* Plain-file mode: an OS file outside the array, through the cache. */
    char plain[4200];
    snprintf(plain, sizeof plain, "%s/plain.txt", argv[1]);
    upcache_file *p = NULL;
    CHECK(upcache_file_open_path(cache, plain, false, &p) == UPCACHE_ENOENT);
    CHECK(upcache_file_open_path(cache, plain, true, &p) == UPCACHE_OK);
    const char line[] = "written through upcache\n";
    CHECK(upcache_pwrite(p, line, sizeof line - 1, 5000) == (int64_t)(sizeof line - 1));
    CHECK(upcache_fdatasync(p) == UPCACHE_OK);
    FILE *os = fopen(plain, "rb");
    CHECK(os != NULL);
    if (os) {
        char got[sizeof line] = {0};
        CHECK(fseek(os, 0, SEEK_END) == 0 && ftell(os) == 5000 + (long)(sizeof line - 1));
        CHECK(fseek(os, 5000, SEEK_SET) == 0 && fread(got, 1, sizeof line - 1, os) == sizeof line - 1);
        CHECK(strcmp(got, line) == 0);
        fclose(os);
    }
    /* Written back and dropped: the handle reads the OS file afresh; once no handle has it
     * open, it is not cached. */
    CHECK(upcache_close_path(cache, plain) == UPCACHE_OK);
    CHECK(upcache_pread(p, buf, 10, 0) == 10);
    CHECK(upcache_file_close(p) == UPCACHE_OK);
    CHECK(upcache_close_path(cache, plain) == UPCACHE_ENOENT);

    CHECK(upcache_remove(cache, "data") == UPCACHE_OK);
    CHECK(upcache_file_open(cache, "data", &f) == UPCACHE_ENOENT);
    CHECK(upcache_close(cache) == UPCACHE_OK);
    CHECK(upcache_config_free(cfg) == UPCACHE_OK);
    CHECK(upcache_config_free(NULL) == UPCACHE_OK);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("c abi: all checks passed\n");
    return 0;
}
