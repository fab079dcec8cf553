/* The limit for a program whose reads go through pread(2): an LD_PRELOAD library that, for
 * each file opened read-only under MEMORY_PREFIX, reads the whole file into one anonymous
 * (huge-page advised) mapping at open, and serves every pread of that descriptor with one
 * memcpy from it. No lookup, no lock, no system call: what a page cache that costs nothing
 * but the copy would give. Other calls go to the kernel; with MEMORY_WRITES=1, files opened
 * for writing get an image too, and each pwrite within it is one memcpy into it (nothing
 * reaches the file: the ceiling of a write, not a cache). A benchmark tool only
 * (bench/db_bench_limit.py, bench/shim_fio.py): it assumes the files do not change while
 * open, and each process has an image of its own.
 * Build: cc -O2 -shared -fPIC -o memory_preload.so memory_preload.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FDS 65536

struct image {
    char *data;
    size_t len;
};

static _Atomic(struct image *) images[MAX_FDS];

static int under_prefix(const char *path) {
    const char *prefix = getenv("MEMORY_PREFIX");
    return prefix && *prefix && strncmp(path, prefix, strlen(prefix)) == 0;
}

/* Loads the file behind `fd` into memory; on any failure the descriptor simply stays with
 * the kernel. */
static void load(int fd) {
    struct stat st;
    if (fd < 0 || fd >= MAX_FDS || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return;
    size_t len = (size_t)st.st_size;
    char *data = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED)
        return;
    madvise(data, len, MADV_HUGEPAGE);
    ssize_t (*real_pread)(int, void *, size_t, off_t) = dlsym(RTLD_NEXT, "pread64");
    for (size_t at = 0; at < len;) {
        ssize_t n = real_pread(fd, data + at, len - at, (off_t)at);
        if (n <= 0) {
            munmap(data, len);
            return;
        }
        at += (size_t)n;
    }
    struct image *img = malloc(sizeof *img);
    if (!img) {
        munmap(data, len);
        return;
    }
    img->data = data;
    img->len = len;
    atomic_store(&images[fd], img);
}

static int writes_too(void) {
    const char *w = getenv("MEMORY_WRITES");
    return w && strcmp(w, "1") == 0;
}

static int opened(int fd, const char *path, int flags) {
    if (fd >= 0 && ((flags & O_ACCMODE) == O_RDONLY || writes_too()) && under_prefix(path))
        load(fd);
    return fd;
}

int open(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    if (!real)
        real = dlsym(RTLD_NEXT, "open");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return opened(real(path, flags, mode), path, flags);
}

int open64(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    if (!real)
        real = dlsym(RTLD_NEXT, "open64");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return opened(real(path, flags, mode), path, flags);
}

int openat(int dir, const char *path, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    if (!real)
        real = dlsym(RTLD_NEXT, "openat");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    /* Only absolute paths can be matched against the prefix. */
    return opened(real(dir, path, flags, mode), path, flags);
}

static ssize_t serve(int fd, void *buf, size_t count, off_t offset, ssize_t (*real)(int, void *, size_t, off_t)) {
    struct image *img = fd >= 0 && fd < MAX_FDS ? atomic_load(&images[fd]) : NULL;
    if (!img || offset < 0)
        return real(fd, buf, count, offset);
    if ((size_t)offset >= img->len)
        return 0;
    size_t n = img->len - (size_t)offset < count ? img->len - (size_t)offset : count;
    memcpy(buf, img->data + offset, n);
    return (ssize_t)n;
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "pread");
    return serve(fd, buf, count, offset, real);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "pread64");
    return serve(fd, buf, count, offset, real);
}

static ssize_t take(int fd, const void *buf, size_t count, off_t offset,
                    ssize_t (*real)(int, const void *, size_t, off_t)) {
    struct image *img = fd >= 0 && fd < MAX_FDS ? atomic_load(&images[fd]) : NULL;
    if (!img || offset < 0 || (size_t)offset + count > img->len)
        return real(fd, buf, count, offset);
    memcpy(img->data + offset, buf, count);
    return (ssize_t)count;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "pwrite");
    return take(fd, buf, count, offset, real);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "pwrite64");
    return take(fd, buf, count, offset, real);
}

int close(int fd) {
    static int (*real)(int);
    if (!real)
        real = dlsym(RTLD_NEXT, "close");
    if (fd >= 0 && fd < MAX_FDS) {
        struct image *img = atomic_exchange(&images[fd], NULL);
        if (img) {
            munmap(img->data, img->len);
            free(img);
        }
    }
    return real(fd);
}
