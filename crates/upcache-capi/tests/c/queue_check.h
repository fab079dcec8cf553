/* The queue's round trip, shared by test_capi.c (an array) and test_shared.c (a shared
 * cache): writes through the queue, then reads at depth 8 waited for in two parts, the bytes
 * as written; a read past the end; a duplicate tag, a full queue and a cache that will not
 * close under its queue. Needs CHECK from the including file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { QUEUE_DEPTH = 8, QUEUE_CHUNK = 10000 };

static unsigned char queue_byte(uint64_t at) { return (unsigned char)(at * 7u + (at >> 9)); }

static void queue_round_trip(upcache_cache *cache, upcache_file *f, uint64_t base) {
    upcache_queue *q = NULL;
    CHECK(upcache_queue_new(cache, 0, &q) == UPCACHE_EINVAL);
    CHECK(upcache_queue_new(cache, QUEUE_DEPTH, &q) == UPCACHE_OK);
    unsigned char *chunk = malloc(QUEUE_CHUNK);
    upcache_completion done[2 * QUEUE_DEPTH];
    for (int i = 0; i < QUEUE_DEPTH; i++) {
        uint64_t at = base + (uint64_t)i * QUEUE_CHUNK;
        for (int j = 0; j < QUEUE_CHUNK; j++)
            chunk[j] = queue_byte(at + (uint64_t)j);
        CHECK(upcache_queue_write(q, f, chunk, QUEUE_CHUNK, at, 100 + (uint64_t)i) == UPCACHE_OK);
    }
    /* A tag in flight, a write's too, is refused for a read. */
    CHECK(upcache_queue_read(q, f, chunk, 16, base, 100) == UPCACHE_EINVAL);
    free(chunk);
    CHECK(upcache_queue_wait(q, QUEUE_DEPTH, done, QUEUE_DEPTH) == QUEUE_DEPTH);
    for (int i = 0; i < QUEUE_DEPTH; i++)
        CHECK(done[i].tag >= 100 && done[i].tag < 100 + QUEUE_DEPTH && done[i].result == QUEUE_CHUNK);
    unsigned char *bufs[QUEUE_DEPTH];
    for (int i = 0; i < QUEUE_DEPTH; i++) {
        bufs[i] = calloc(1, QUEUE_CHUNK);
        CHECK(upcache_queue_read(q, f, bufs[i], QUEUE_CHUNK, base + (uint64_t)i * QUEUE_CHUNK, (uint64_t)i) == UPCACHE_OK);
        if (i == 0) /* a tag in flight */
            CHECK(upcache_queue_read(q, f, bufs[0], QUEUE_CHUNK, base, 0) == UPCACHE_EINVAL);
    }
    unsigned char extra[16];
    CHECK(upcache_queue_read(q, f, extra, sizeof extra, base, 99) == UPCACHE_EBUSY);
    CHECK(upcache_queue_in_flight(q) == QUEUE_DEPTH);
    CHECK(upcache_close(cache) == UPCACHE_EBUSY); /* its queue is open */
    /* All of them, given in two parts: those past the first 3 kept for the next wait, and
     * counted against the depth until then. */
    int64_t first = upcache_queue_wait(q, QUEUE_DEPTH, done, 3);
    CHECK(first == 3);
    CHECK(upcache_queue_in_flight(q) == QUEUE_DEPTH - 3);
    for (uint64_t t = 20; t < 23; t++)
        CHECK(upcache_queue_read(q, f, extra, sizeof extra, base, t) == UPCACHE_OK);
    CHECK(upcache_queue_read(q, f, extra, sizeof extra, base, 23) == UPCACHE_EBUSY);
    int64_t rest = upcache_queue_wait(q, QUEUE_DEPTH, done + 3, QUEUE_DEPTH);
    CHECK(rest == QUEUE_DEPTH);
    unsigned seen = 0;
    for (int i = 0; i < QUEUE_DEPTH + 3; i++) {
        if (done[i].tag >= 20) { /* the 3 small reads */
            CHECK(done[i].tag < 23 && done[i].result == (int64_t)sizeof extra);
            continue;
        }
        CHECK(done[i].tag < QUEUE_DEPTH && done[i].result == QUEUE_CHUNK);
        seen |= 1u << (done[i].tag % QUEUE_DEPTH);
    }
    CHECK(seen == (1u << QUEUE_DEPTH) - 1);
    for (int i = 0; i < QUEUE_DEPTH; i++) {
        uint64_t at = base + (uint64_t)i * QUEUE_CHUNK;
        for (int j = 0; j < QUEUE_CHUNK; j++) {
            if (bufs[i][j] != queue_byte(at + (uint64_t)j)) {
                CHECK(bufs[i][j] == queue_byte(at + (uint64_t)j)); /* the first byte that differs */
                break;
            }
        }
        free(bufs[i]);
    }
    CHECK(upcache_queue_in_flight(q) == 0);
    /* Past the end: nothing read. */
    uint64_t size = 0;
    CHECK(upcache_size(f, &size) == UPCACHE_OK);
    CHECK(upcache_queue_read(q, f, extra, sizeof extra, size + 100, 7) == UPCACHE_OK);
    CHECK(upcache_queue_wait(q, 1, done, 1) == 1 && done[0].tag == 7 && done[0].result == 0);
    CHECK(upcache_queue_free(q) == UPCACHE_OK);
}
