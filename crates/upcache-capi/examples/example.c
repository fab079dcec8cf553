/* upcache from C: create an array over two device directories, write, sync, read back.
 *
 *   cargo build --release -p upcache-capi
 *   cc -I crates/upcache-capi/include crates/upcache-capi/examples/example.c \
 *      target/release/libupcache_capi.a -lpthread -ldl -lm -o example
 *   ./example /tmp/uc-example     (an empty or missing directory)
 */
#include "upcache.h"

#include <stdio.h>
#include <string.h>

static int fail(const char *what, int64_t code) {
    fprintf(stderr, "%s: %s (%s)\n", what, upcache_strerror((int32_t)code), upcache_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "/tmp/uc-example";
    char d0[4096], d1[4096];
    snprintf(d0, sizeof d0, "%s/ssd0", root);
    snprintf(d1, sizeof d1, "%s/ssd1", root);
    const char *dirs[] = {d0, d1};

    upcache_config *config = upcache_config_new(dirs, 2, 64u << 20); /* 64 MiB of frames */
    if (!config) return fail("config", UPCACHE_EINVAL);
    upcache_config_set_allow_buffered(config, true); /* e.g. on tmpfs */
    upcache_cache *cache;
    int32_t rc = upcache_create(config, &cache);
    if (rc == UPCACHE_EEXIST) rc = upcache_open(config, &cache);
    if (rc) return fail("open the array", rc);

    upcache_file *file;
    rc = upcache_file_open(cache, "hello.txt", &file);
    if (rc == UPCACHE_ENOENT) rc = upcache_file_create(cache, "hello.txt", &file);
    if (rc) return fail("open hello.txt", rc);

    const char msg[] = "hello from C";
    int64_t n = upcache_pwrite(file, msg, sizeof msg, 4096 * 3 + 7);
    if (n < 0) return fail("write", n);
    if ((rc = upcache_fdatasync(file))) return fail("sync", rc);

    char back[sizeof msg];
    n = upcache_pread(file, back, sizeof back, 4096 * 3 + 7);
    if (n < 0) return fail("read", n);
    uint64_t size;
    upcache_size(file, &size);
    printf("read back \"%s\"; file size %llu\n", back, (unsigned long long)size);

    upcache_file_close(file);
    if ((rc = upcache_close(cache))) return fail("close", rc);
    upcache_config_free(config);
    return strcmp(back, msg) != 0;
}
