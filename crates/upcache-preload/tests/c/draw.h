/* What the random C tests share: a xorshift generator whose sequence a seed fixes (so the run
 * with the shim and the run without it make the same calls) and the FNV-1a hash of the bytes
 * they print instead of the bytes. */
#ifndef UPCACHE_DRAW_H
#define UPCACHE_DRAW_H

#include <stddef.h>
#include <stdint.h>

static uint64_t state;
static uint64_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}
static uint64_t below(uint64_t n) { return next() % n; }

static uint32_t fnv(const unsigned char *b, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

#endif
