/* The limit for a program whose reads go through pread(2): an LD_PRELOAD library that, for
 * each file opened read-only under MEMORY_PREFIX, reads the whole file into one anonymous
 * (huge-page advised) mapping at open, and serves every pread of that descriptor with one
 * memcpy from it. No lookup, no lock, no system call: what a page cache that costs nothing
 * but the copy would give. Other calls go to the kernel; with MEMORY_WRITES=1, files opened
 * for writing get an image too (an empty one too), each pwrite is one memcpy into it, growing
 * it past its end, fstat reports its length, ftruncate sets it, and fsync and fdatasync do
 * nothing (nothing reaches the file: the ceiling of a write, not a cache). preadv, pwritev and
 * their "2" forms are served the same way, a memcpy per buffer. A written file's image is
 * the file for the rest of the process: later opens of it get the same image (O_TRUNC
 * empties it), until an unlink of its path. A benchmark tool only (bench/db_bench_limit.py,
 * bench/shim_fio.py, ci/programs.py): it assumes no other process changes the files while
 * this one has them, and each process has images of its own.
 * Build: cc -O2 -shared -fPIC -o memory_preload.so memory_preload.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536
/* Address space set aside for a written file's image to grow into (never touched unless
 * written): writes past it go to the kernel. */
#define GROW_ROOM ((size_t)1 << 32)

struct image {
    char *data;
    _Atomic size_t len;
    size_t cap;
    /* A written file's: kept (in `written`) after its descriptors close. */
    int kept;
    dev_t dev;
    ino_t ino;
    struct image *next;
};

static _Atomic(struct image *) images[MAX_FDS];
/* The written files' images, by inode; never freed (a descriptor may still use one that an
 * unlink took out of the list). */
static struct image *written;
static pthread_mutex_t written_lock = PTHREAD_MUTEX_INITIALIZER;

static struct image *written_image(dev_t dev, ino_t ino) {
    for (struct image *i = written; i; i = i->next)
        if (i->dev == dev && i->ino == ino)
            return i;
    return NULL;
}

static int under_prefix(const char *path) {
    const char *prefix = getenv("MEMORY_PREFIX");
    return prefix && *prefix && strncmp(path, prefix, strlen(prefix)) == 0;
}

static int real_fstat(int fd, struct stat *st) {
    static int (*real)(int, struct stat *);
    if (!real)
        real = dlsym(RTLD_NEXT, "fstat64");
    return real(fd, st);
}

static void load_new(int fd, int grows, struct stat *st);

/* Gives `fd` its file's image: the written file's if it has one (emptied if `truncated`),
 * else the file loaded into memory, with room to grow if `grows`; on any failure the
 * descriptor simply stays with the kernel. */
static void load(int fd, int grows, int truncated) {
    struct stat st;
    if (fd < 0 || fd >= MAX_FDS || real_fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    pthread_mutex_lock(&written_lock);
    struct image *img = written_image(st.st_dev, st.st_ino);
    if (img) {
        if (truncated)
            atomic_store(&img->len, 0); /* the bytes past it are zeroed as it grows again */
        atomic_store(&images[fd], img);
    } else if (st.st_size > 0 || grows) {
        load_new(fd, grows, &st);
    }
    pthread_mutex_unlock(&written_lock);
}

static void load_new(int fd, int grows, struct stat *st) {
    size_t len = (size_t)st->st_size;
    size_t cap = grows ? len + GROW_ROOM : len;
    char *data = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED)
        return;
    madvise(data, cap, MADV_HUGEPAGE);
    ssize_t (*real_pread)(int, void *, size_t, off_t) = dlsym(RTLD_NEXT, "pread64");
    for (size_t at = 0; at < len;) {
        ssize_t n = real_pread(fd, data + at, len - at, (off_t)at);
        if (n <= 0) {
            munmap(data, cap);
            return;
        }
        at += (size_t)n;
    }
    struct image *img = malloc(sizeof *img);
    if (!img) {
        munmap(data, cap);
        return;
    }
    img->data = data;
    img->len = len;
    img->cap = cap;
    img->kept = grows;
    img->dev = st->st_dev;
    img->ino = st->st_ino;
    img->next = NULL;
    if (grows) {
        img->next = written;
        written = img;
    }
    atomic_store(&images[fd], img);
}

static int writes_too(void) {
    const char *w = getenv("MEMORY_WRITES");
    return w && strcmp(w, "1") == 0;
}

static int opened(int fd, const char *path, int flags) {
    int reads_only = (flags & O_ACCMODE) == O_RDONLY;
    if (fd >= 0 && (reads_only || writes_too()) && under_prefix(path))
        load(fd, !reads_only, (flags & O_TRUNC) != 0);
    return fd;
}

static struct image *image_of(int fd) {
    return fd >= 0 && fd < MAX_FDS ? atomic_load(&images[fd]) : NULL;
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

/* Copies what `img` holds at `offset` (up to `count` bytes) into `buf`. */
static size_t copy_out(struct image *img, void *buf, size_t count, off_t offset) {
    size_t len = atomic_load(&img->len);
    if ((size_t)offset >= len)
        return 0;
    size_t n = len - (size_t)offset < count ? len - (size_t)offset : count;
    memcpy(buf, img->data + offset, n);
    return n;
}

/* Copies `count` bytes of `buf` into `img` at `offset` (within its room), growing it. */
static void copy_in(struct image *img, const void *buf, size_t count, off_t offset) {
    memcpy(img->data + offset, buf, count);
    size_t end = (size_t)offset + count, len = atomic_load(&img->len);
    while (end > len && !atomic_compare_exchange_weak(&img->len, &len, end))
        ;
}

static ssize_t serve(int fd, void *buf, size_t count, off_t offset, ssize_t (*real)(int, void *, size_t, off_t)) {
    struct image *img = image_of(fd);
    if (!img || offset < 0)
        return real(fd, buf, count, offset);
    return (ssize_t)copy_out(img, buf, count, offset);
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
    struct image *img = image_of(fd);
    if (!img || offset < 0 || (size_t)offset + count > img->cap)
        return real(fd, buf, count, offset);
    copy_in(img, buf, count, offset);
    return (ssize_t)count;
}

static size_t total(const struct iovec *iov, int n) {
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* preadv and pwritev of an imaged descriptor, a memcpy per buffer; -1 if `fd` has no image
 * (or the call is not one for it): the caller then goes to the kernel. */
static ssize_t serve_v(int fd, const struct iovec *iov, int n, off_t offset, int write) {
    struct image *img = image_of(fd);
    if (!img || offset < 0 || n < 0 || (write && (size_t)offset + total(iov, n) > img->cap))
        return -1;
    size_t done = 0;
    for (int i = 0; i < n; i++) {
        if (write) {
            copy_in(img, iov[i].iov_base, iov[i].iov_len, offset + (off_t)done);
            done += iov[i].iov_len;
        } else {
            size_t got = copy_out(img, iov[i].iov_base, iov[i].iov_len, offset + (off_t)done);
            done += got;
            if (got < iov[i].iov_len)
                break;
        }
    }
    return (ssize_t)done;
}

#define VECTORED(name, iov_type, extra_params, extra_args, write)                                   \
    ssize_t name(int fd, iov_type *iov, int n, off_t offset extra_params) {                         \
        static ssize_t (*real)(int, iov_type *, int, off_t extra_params);                            \
        if (!real)                                                                                   \
            real = dlsym(RTLD_NEXT, #name);                                                          \
        ssize_t r = serve_v(fd, iov, n, offset, write);                                              \
        return r >= 0 ? r : real(fd, iov, n, offset extra_args);                                     \
    }

#define COMMA ,
VECTORED(preadv, const struct iovec, , , 0)
VECTORED(preadv64, const struct iovec, , , 0)
VECTORED(pwritev, const struct iovec, , , 1)
VECTORED(pwritev64, const struct iovec, , , 1)
VECTORED(preadv2, const struct iovec, COMMA int flags, COMMA flags, 0)
VECTORED(preadv64v2, const struct iovec, COMMA int flags, COMMA flags, 0)
VECTORED(pwritev2, const struct iovec, COMMA int flags, COMMA flags, 1)
VECTORED(pwritev64v2, const struct iovec, COMMA int flags, COMMA flags, 1)

/* An imaged file's length is its image's. */
static int stat_of(int fd, struct stat *st, int r) {
    struct image *img = image_of(fd);
    if (r == 0 && img)
        st->st_size = (off_t)atomic_load(&img->len);
    return r;
}

int fstat(int fd, struct stat *st) {
    return stat_of(fd, st, real_fstat(fd, st));
}

int fstat64(int fd, struct stat64 *st) {
    return stat_of(fd, (struct stat *)st, real_fstat(fd, (struct stat *)st));
}

static int cut(int fd, off_t len, int (*real)(int, off_t)) {
    struct image *img = image_of(fd);
    if (!img || len < 0 || (size_t)len > img->cap)
        return real(fd, len);
    /* What lies past the length reads as zeros when it grows again. */
    size_t old = atomic_load(&img->len);
    atomic_store(&img->len, (size_t)len);
    if ((size_t)len < old)
        memset(img->data + len, 0, old - (size_t)len);
    return 0;
}

int ftruncate(int fd, off_t len) {
    static int (*real)(int, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "ftruncate");
    return cut(fd, len, real);
}

int ftruncate64(int fd, off_t len) {
    static int (*real)(int, off_t);
    if (!real)
        real = dlsym(RTLD_NEXT, "ftruncate64");
    return cut(fd, len, real);
}

/* Nothing of an imaged file is to reach its device. */
int fsync(int fd) {
    static int (*real)(int);
    if (!real)
        real = dlsym(RTLD_NEXT, "fsync");
    return image_of(fd) ? 0 : real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = dlsym(RTLD_NEXT, "fdatasync");
    return image_of(fd) ? 0 : real(fd);
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
        if (img && !img->kept) {
            munmap(img->data, img->cap);
            free(img);
        }
    }
    return real(fd);
}

/* An unlinked file's image goes with its name (a new file may get its inode). */
static void forget(int dir, const char *path) {
    struct stat st;
    if (!under_prefix(path) || fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    pthread_mutex_lock(&written_lock);
    for (struct image **i = &written; *i; i = &(*i)->next) {
        if ((*i)->dev == st.st_dev && (*i)->ino == st.st_ino) {
            *i = (*i)->next;
            break;
        }
    }
    pthread_mutex_unlock(&written_lock);
}

int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real)
        real = dlsym(RTLD_NEXT, "unlink");
    forget(AT_FDCWD, path);
    return real(path);
}

int unlinkat(int dir, const char *path, int flags) {
    static int (*real)(int, const char *, int);
    if (!real)
        real = dlsym(RTLD_NEXT, "unlinkat");
    if (!(flags & AT_REMOVEDIR))
        forget(dir, path);
    return real(dir, path, flags);
}
