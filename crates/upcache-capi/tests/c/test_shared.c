/* The shared cache through the C ABI: a process attaches (starting a service on a socket in
 * DIR, with write-back settings and technique switches of its own, which every attached process then reads back;
 * settings out of range refused), writes an OS file without syncing; a second process (forked, then attaching by itself)
 * reads those bytes and writes its own, which the first reads back; array calls on a shared
 * handle are refused; the shared cache's counters come through upcache_get_stats. Then a cache
 * of this process alone (upcache_create_private) with its own settings, a NUMA topology
 * described among them, writes a file back at its close; and one of one partition resized
 * while a file is open.
 * Usage: test_shared DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "upcache.h"

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #c, upcache_last_error()); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

#include "queue_check.h"

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char sock[4096], path[4096];
    snprintf(sock, sizeof sock, "%s/run/cache.sock", argv[1]);
    snprintf(path, sizeof path, "%s/data", argv[1]);
    int to_child[2], to_parent[2];
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);

    struct upcache_cache *cache;
    struct upcache_shared_settings set = upcache_shared_settings_default();
    CHECK(set.memory == 256 << 20 && set.dirty_background == 0.25 && set.flush_interval_ms == 1000);
    CHECK(set.range_lock && set.run_merging && set.bundling && set.readahead == 1 << 20);
    CHECK(strcmp(set.policy, "clock") == 0 && set.clean_first && !set.gc_aware && set.dflush && set.streams &&
          set.huge_pages && set.direct_loads && set.uring_write_back && set.hot_index &&
          set.lock_free_index && set.set_ways == 0 && strcmp(set.numa, "machine") == 0 && set.page_size == 4096 &&
          !set.two_layer_alloc);
    set.memory = 4 << 20;
    set.dirty_background = 0.6;
    set.dirty_foreground = 0.5;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    set.dirty_background = 0.1;
    set.dirty_foreground = 0.2;
    set.dirty_expire_ms = 5000;
    set.flush_interval_ms = 250;
    set.readahead = 2 << 20;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    set.readahead = 64 << 10;
    strcpy(set.numa, "0-3;x");
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    strcpy(set.numa, "off");
    set.set_ways = 65;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    set.set_ways = 8;
    strcpy(set.policy, "nope");
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    /* S3-FIFO's queues order the whole cache: not with sets. */
    strcpy(set.policy, "s3fifo");
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    strcpy(set.policy, "lfu");
    set.page_size = 3000;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    set.page_size = 8192;
    /* The two-layer allocator pools the whole cache's frames: not with sets. */
    set.two_layer_alloc = true;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_ECONFIG);
    set.two_layer_alloc = false;
    set.range_lock = false;
    set.bundling = false;
    set.gc_aware = true;
    set.dflush = false;
    set.streams = false;
    set.huge_pages = false;
    set.direct_loads = false;
    set.uring_write_back = false;
    set.hot_index = false;
    CHECK(upcache_attach_with(sock, &set, &cache) == UPCACHE_OK);
    struct upcache_shared_settings got;
    CHECK(upcache_shared_settings_of(cache, &got) == UPCACHE_OK);
    CHECK(got.memory == 4 << 20 && got.dirty_background == 0.1 && got.dirty_foreground == 0.2 &&
          got.dirty_expire_ms == 5000 && got.flush_interval_ms == 250 && !got.range_lock &&
          got.run_merging && !got.bundling && got.readahead == 64 << 10 && strcmp(got.policy, "lfu") == 0 && got.clean_first &&
          got.gc_aware && !got.dflush && !got.streams && !got.huge_pages && !got.direct_loads &&
          !got.uring_write_back && !got.hot_index && !got.lock_free_index && got.set_ways == 8 &&
          strcmp(got.numa, "off") == 0 && got.page_size == 8192);
    struct upcache_file *f;
    CHECK(upcache_file_open_path(cache, path, true, &f) == UPCACHE_OK);
    CHECK(upcache_pwrite(f, "from the parent", 15, 5000) == 15);
    struct upcache_file *g;
    CHECK(upcache_file_create(cache, "array-file", &g) == UPCACHE_EINVAL);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* A process of its own in the cache: it attaches itself, never uses the parent's. */
        struct upcache_cache *mine;
        CHECK(upcache_attach(sock, 0, &mine) == UPCACHE_OK);
        /* The running service's settings, not the defaults this attach would have started with. */
        struct upcache_shared_settings its;
        CHECK(upcache_shared_settings_of(mine, &its) == UPCACHE_OK);
        CHECK(its.dirty_background == 0.1 && its.flush_interval_ms == 250 && its.memory == 4 << 20 &&
              !its.range_lock && !its.bundling && its.readahead == 64 << 10 && strcmp(its.policy, "lfu") == 0 && !its.dflush);
        struct upcache_file *h;
        CHECK(upcache_file_open_path(mine, path, false, &h) == UPCACHE_OK);
        char buf[16] = {0};
        uint64_t size = 0;
        CHECK(upcache_size(h, &size) == UPCACHE_OK && size == 5015);
        CHECK(upcache_pread(h, buf, 15, 5000) == 15 && memcmp(buf, "from the parent", 15) == 0);
        CHECK(upcache_pwrite(h, "from the child", 14, 100) == 14);
        CHECK(upcache_file_close(h) == UPCACHE_OK && upcache_close(mine) == UPCACHE_OK);
        CHECK(write(to_parent[1], "d", 1) == 1);
        _exit(0);
    }
    char t;
    CHECK(read(to_parent[0], &t, 1) == 1);
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char buf[16] = {0};
    CHECK(upcache_pread(f, buf, 14, 100) == 14 && memcmp(buf, "from the child", 14) == 0);
    /* The shared cache's counters, of every process: its 512 frames of 8 KiB, the page both
     * wrote (a miss), dirty, and 32 more hits of ours, optimistic copies (a thread adds
     * its hits 32 at a time); the bytes of its metadata. */
    for (int i = 0; i < 32; i++)
        CHECK(upcache_pread(f, buf, 15, 5000) == 15);
    /* No pins without the range lock (off in this service): a pin held while its thread
     * writes the file could wait for ever for a writer that holds the whole file. */
    const void *pdata = NULL;
    size_t plen = 0;
    uint64_t pstart = 0;
    struct upcache_page *pg = NULL;
    CHECK(upcache_pin(f, 5000, &pdata, &plen, &pstart, &pg) == UPCACHE_EUNSUPPORTED && pg == NULL);
    struct upcache_stats st;
    CHECK(upcache_get_stats(cache, &st) == UPCACHE_OK);
    CHECK(st.frames == 512 && st.misses >= 1 && st.hits >= 32 && st.dirty_pages >= 1);
    CHECK(st.lock_free_hits >= 32 && st.lock_free_hits <= st.hits && st.metadata_bytes > 0);
    /* The queue on the shared cache: its reads load on the queue's own ring. */
    queue_round_trip(cache, f, 1 << 20);
    CHECK(upcache_fdatasync(f) == UPCACHE_OK);
    CHECK(upcache_file_close(f) == UPCACHE_OK);
    CHECK(upcache_sync(cache) == UPCACHE_OK);
    CHECK(upcache_close(cache) == UPCACHE_OK);
    /* Durable in the OS file. */
    FILE *os = fopen(path, "rb");
    CHECK(os && fseek(os, 100, SEEK_SET) == 0 && fread(buf, 1, 14, os) == 14 && memcmp(buf, "from the child", 14) == 0);
    fclose(os);

    /* A private cache: its own settings (no service to keep them), two described NUMA nodes. */
    struct upcache_shared_settings own = upcache_shared_settings_default();
    own.memory = 2 << 20;
    own.dirty_background = 1.5;
    struct upcache_cache *priv;
    CHECK(upcache_create_private(&own, &priv) == UPCACHE_ECONFIG);
    own.dirty_background = 0.2;
    strcpy(own.numa, "0;1");
    CHECK(upcache_create_private(&own, &priv) == UPCACHE_OK);
    struct upcache_shared_settings has;
    CHECK(upcache_shared_settings_of(priv, &has) == UPCACHE_OK);
    CHECK(has.memory == 2 << 20 && has.dirty_background == 0.2 && strcmp(has.numa, "0;1") == 0);
    char own_path[4096];
    snprintf(own_path, sizeof own_path, "%s/own", argv[1]);
    FILE *create = fopen(own_path, "wb");
    CHECK(create && fclose(create) == 0);
    struct upcache_file *o;
    CHECK(upcache_file_open_path(priv, own_path, true, &o) == UPCACHE_OK);
    CHECK(upcache_pwrite(o, "of this process", 15, 9000) == 15);
    CHECK(upcache_file_create(priv, "array-file", &g) == UPCACHE_EINVAL);
    /* Frames placed per NUMA node: each node keeps its share, its dirty page written back. */
    uint64_t numa_in_use = 0;
    CHECK(upcache_resize(priv, 64 << 10, &numa_in_use) == UPCACHE_OK && numa_in_use == 64 << 10);
    CHECK(upcache_file_close(o) == UPCACHE_OK && upcache_close(priv) == UPCACHE_OK);
    os = fopen(own_path, "rb");
    CHECK(os && fseek(os, 9000, SEEK_SET) == 0 && fread(buf, 1, 15, os) == 15 && memcmp(buf, "of this process", 15) == 0);
    fclose(os);

    /* One partition: resized while a file is open, down to 64 KiB (its dirty page written
     * back) and up to the memory it was made with again, the bytes kept. */
    strcpy(own.numa, "off");
    CHECK(upcache_create_private(&own, &priv) == UPCACHE_OK);
    CHECK(upcache_file_open_path(priv, own_path, true, &o) == UPCACHE_OK);
    CHECK(upcache_pwrite(o, "resized", 7, 20000) == 7);
    uint64_t in_use = 0;
    CHECK(upcache_resize(priv, 1000, &in_use) == UPCACHE_OK && in_use == 64 << 10);
    CHECK(upcache_get_stats(priv, &st) == UPCACHE_OK && st.frames == 16);
    CHECK(upcache_resize(priv, 1ull << 40, &in_use) == UPCACHE_OK && in_use == 2 << 20);
    CHECK(upcache_pread(o, buf, 7, 20000) == 7 && memcmp(buf, "resized", 7) == 0);
    CHECK(upcache_file_close(o) == UPCACHE_OK && upcache_close(priv) == UPCACHE_OK);
    printf("shared cache ok\n");
    return 0;
}
