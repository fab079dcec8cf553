/* POSIX file semantics, checked the same with and without the shim (tests/preload.rs runs
 * it both ways). Usage: shim_test PREFIX_DIR OUTSIDE_DIR. Prints "opens under prefix: N"
 * (the opens the shim must have cached) and "all checks passed". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define PAGE 4096
static int prefix_opens;
static char pbuf[4096], obuf[4096];

static const char *in_prefix(const char *dir, const char *name) {
    snprintf(pbuf, sizeof pbuf, "%s/%s", dir, name);
    return pbuf;
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((seed * 131 + i * 7 + (i >> 9)) & 0xff);
}

/* The OS file's bytes, read with raw system calls (never the shim). */
static ssize_t os_read(const char *path, unsigned char *buf, size_t n, off_t *size) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    CHECK(fd >= 0);
    *size = (off_t)syscall(SYS_lseek, fd, 0, SEEK_END);
    ssize_t got = (ssize_t)syscall(SYS_pread64, fd, buf, n, 0);
    syscall(SYS_close, fd);
    return got;
}

static int open_p(const char *path, int flags, mode_t mode) {
    int fd = open(path, flags, mode);
    CHECK(fd >= 0);
    prefix_opens++;
    return fd;
}

static void basics(const char *dir) {
    static unsigned char data[8 * PAGE], back[8 * PAGE], oracle[16 * PAGE];
    const char *path = in_prefix(dir, "basics");
    int fd = open_p(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    memset(oracle, 0, sizeof oracle);
    fill(data, 3 * PAGE, 1);
    CHECK(pwrite(fd, data, 3 * PAGE, 1000) == 3 * PAGE);
    memcpy(oracle + 1000, data, 3 * PAGE);
    off_t size = 1000 + 3 * PAGE;
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == size);
    CHECK(stat(path, &st) == 0 && st.st_size == size);
    CHECK(lseek(fd, 0, SEEK_END) == size);
    CHECK(pread(fd, back, sizeof back, 0) == size && memcmp(back, oracle, size) == 0);
    CHECK(pread(fd, back, 10, size) == 0);
    CHECK(pread(fd, back, 100, size - 10) == 10);

    /* read/write move the offset */
    CHECK(lseek(fd, 500, SEEK_SET) == 500);
    CHECK(read(fd, back, 1000) == 1000 && memcmp(back, oracle + 500, 1000) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 1500);
    fill(data, 2000, 2);
    CHECK(write(fd, data, 2000) == 2000);
    memcpy(oracle + 1500, data, 2000);
    CHECK(lseek(fd, 0, SEEK_CUR) == 3500);

    /* vectors, with and without offsets */
    unsigned char a[700], b[3000];
    fill(a, sizeof a, 3);
    fill(b, sizeof b, 4);
    struct iovec w[2] = {{a, sizeof a}, {b, sizeof b}};
    CHECK(pwritev(fd, w, 2, 9000) == 3700);
    memcpy(oracle + 9000, a, 700);
    memcpy(oracle + 9700, b, 3000);
    CHECK(writev(fd, w, 1) == 700); /* at 3500 */
    memcpy(oracle + 3500, a, 700);
    CHECK(pwritev2(fd, w + 1, 1, -1, 0) == 3000); /* at 4200, the offset */
    memcpy(oracle + 4200, b, 3000);
    CHECK(lseek(fd, 0, SEEK_CUR) == 7200);
    unsigned char ra[100], rb[5000];
    struct iovec r[2] = {{ra, sizeof ra}, {rb, sizeof rb}};
    CHECK(preadv(fd, r, 2, 8000) == 5100); /* the file ends at 13288, past 12700 */
    CHECK(memcmp(ra, oracle + 8000, 100) == 0 && memcmp(rb, oracle + 8100, 5000) == 0);
    CHECK(preadv(fd, r, 2, size - 1000) == 1000 && memcmp(rb, oracle + size - 900, 900) == 0);
    CHECK(lseek(fd, 100, SEEK_SET) == 100);
    CHECK(readv(fd, r, 2) == 5100 && memcmp(rb, oracle + 200, 5000) == 0);
    CHECK(preadv2(fd, r, 1, -1, 0) == 100 && memcmp(ra, oracle + 5200, 100) == 0);
    CHECK(preadv2(fd, r, 1, 0, RWF_HIPRI) == 100 && memcmp(ra, oracle, 100) == 0);

    /* seeks */
    CHECK(lseek(fd, -100, SEEK_END) == size - 100);
    CHECK(lseek(fd, -size - 1, SEEK_END) == -1 && errno == EINVAL);
    CHECK(lseek(fd, 10, SEEK_DATA) == 10);
    CHECK(lseek(fd, size, SEEK_DATA) == -1 && errno == ENXIO);

    /* dup shares the offset; F_DUPFD and dup2 too */
    int d1 = dup(fd), d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100), d3 = dup2(fd, 90);
    CHECK(d1 >= 0 && d2 >= 100 && d3 == 90);
    CHECK(lseek(d1, 4000, SEEK_SET) == 4000);
    CHECK(read(d2, back, 10) == 10 && memcmp(back, oracle + 4000, 10) == 0);
    CHECK(lseek(d3, 0, SEEK_CUR) == 4010 && lseek(fd, 0, SEEK_CUR) == 4010);
    CHECK(close(d1) == 0 && close(d2) == 0 && close(d3) == 0);
    CHECK(close(d3) == -1 && errno == EBADF);

    /* O_APPEND through a second descriptor, seen by the first */
    int ap = open_p(path, O_WRONLY | O_APPEND, 0);
    fill(data, 1234, 5);
    CHECK(write(ap, data, 1234) == 1234);
    memcpy(oracle + size, data, 1234);
    size += 1234;
    CHECK(lseek(ap, 0, SEEK_CUR) == size);
    CHECK(fstat(fd, &st) == 0 && st.st_size == size);
    CHECK(read(ap, back, 1) == -1 && errno == EBADF);
    CHECK(ftruncate(ap, size) == 0); /* allowed on a write-only descriptor */
    CHECK(close(ap) == 0);

    /* truncation: shrink, extend reads zeros, by path too */
    CHECK(ftruncate(fd, 6000) == 0);
    memset(oracle + 6000, 0, sizeof oracle - 6000);
    CHECK(ftruncate(fd, 7000) == 0);
    CHECK(pread(fd, back, 2000, 5500) == 1500 && memcmp(back, oracle + 5500, 1500) == 0);
    CHECK(truncate(path, 6500) == 0);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 6500);
    size = 6500;
    CHECK(ftruncate(fd, -1) == -1 && errno == EINVAL);
    CHECK(pread(fd, back, 10, -1) == -1 && errno == EINVAL);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    /* dropping cached pages keeps every byte, written back or not */
    CHECK(pwrite(fd, "unsynced", 8, 100) == 8);
    memcpy(oracle + 100, "unsynced", 8);
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    CHECK(pread(fd, back, size, 0) == size && memcmp(back, oracle, size) == 0);

    /* a mapping and a stream see what was written, without a close */
    char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED && memcmp(map, oracle, size) == 0);
    munmap(map, size);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL && fread(back, 1, size, f) == (size_t)size && memcmp(back, oracle, size) == 0);
    fclose(f);
    CHECK(close(fd) == 0);

    /* after the last close, the OS file holds it all */
    off_t os_size;
    CHECK(os_read(path, back, sizeof back, &os_size) == size && os_size == size);
    CHECK(memcmp(back, oracle, size) == 0);

    /* O_RDONLY refuses writes; O_TRUNC empties */
    fd = open_p(path, O_RDONLY, 0);
    CHECK(write(fd, data, 1) == -1 && errno == EBADF);
    CHECK(ftruncate(fd, 0) == -1 && errno == EINVAL);
    int tr = open_p(path, O_RDWR | O_TRUNC, 0);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 0 && read(fd, back, 10) == 0);
    CHECK(close(tr) == 0 && close(fd) == 0);
    CHECK(creat(in_prefix(dir, "made"), 0600) >= 0);
    prefix_opens++;
}

struct job {
    int fd, id;
};

#define BLOCKS 64
#define BLOCK 8192
static void *writer(void *arg) {
    struct job *j = arg;
    unsigned char buf[BLOCK];
    for (int round = 0; round < 4; round++)
        for (int blk = j->id; blk < BLOCKS; blk += 4) {
            fill(buf, BLOCK, (unsigned)(blk * 10 + round));
            CHECK(pwrite(j->fd, buf, BLOCK, (off_t)blk * BLOCK) == BLOCK);
        }
    return NULL;
}

static void threads(const char *dir) {
    int fd = open_p(in_prefix(dir, "threads"), O_CREAT | O_RDWR, 0644);
    pthread_t t[4];
    struct job j[4];
    for (int i = 0; i < 4; i++) {
        j[i] = (struct job){fd, i};
        CHECK(pthread_create(&t[i], NULL, writer, &j[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    unsigned char want[BLOCK], got[BLOCK];
    for (int blk = 0; blk < BLOCKS; blk++) {
        fill(want, BLOCK, (unsigned)(blk * 10 + 3));
        CHECK(pread(fd, got, BLOCK, (off_t)blk * BLOCK) == BLOCK && memcmp(got, want, BLOCK) == 0);
    }
    CHECK(close(fd) == 0);
}

static void forked(const char *dir) {
    const char *path = in_prefix(dir, "forked");
    int fd = open_p(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    unsigned char data[3 * PAGE], back[3 * PAGE];
    fill(data, sizeof data, 9);
    CHECK(write(fd, data, PAGE) == PAGE);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* the inherited descriptor: the parent's data, and its offset */
        CHECK(lseek(fd, 0, SEEK_CUR) == PAGE);
        CHECK(pread(fd, back, PAGE, 0) == PAGE && memcmp(back, data, PAGE) == 0);
        CHECK(write(fd, data + PAGE, PAGE) == PAGE);
        /* a new open in the child */
        int again = open(path, O_RDONLY);
        CHECK(again >= 0 && pread(again, back, 2 * PAGE, 0) == 2 * PAGE && memcmp(back, data, 2 * PAGE) == 0);
        close(again);
        close(fd);
        exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the shared offset moved in the child */
    CHECK(lseek(fd, 0, SEEK_CUR) == 2 * PAGE);
    CHECK(close(fd) == 0);
}

static void outside_and_links(const char *dir, const char *out) {
    /* outside the prefix: libc's */
    snprintf(obuf, sizeof obuf, "%s/plain", out);
    int fd = open(obuf, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "outside", 7) == 7 && close(fd) == 0);
    /* a link outside to a file inside is inside; a link inside to a file outside is not */
    int in = open_p(in_prefix(dir, "target"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(in, "inside", 6) == 6 && close(in) == 0);
    char link[4096];
    snprintf(link, sizeof link, "%s/to-inside", out);
    CHECK(symlink(pbuf, link) == 0);
    fd = open(link, O_RDONLY);
    prefix_opens++;
    char got[16] = {0};
    CHECK(fd >= 0 && read(fd, got, sizeof got) == 6 && memcmp(got, "inside", 6) == 0 && close(fd) == 0);
    CHECK(symlink(obuf, in_prefix(dir, "to-outside")) == 0);
    fd = open(pbuf, O_RDONLY);
    CHECK(fd >= 0 && read(fd, got, sizeof got) == 7 && close(fd) == 0);
    /* directories are libc's */
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0 && fsync(fd) == 0 && close(fd) == 0);
    /* relative to a directory descriptor, and renamed while open */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    fd = openat(dfd, "rel", O_CREAT | O_RDWR, 0644);
    prefix_opens++;
    CHECK(fd >= 0 && write(fd, "relative", 8) == 8);
    CHECK(renameat(dfd, "rel", dfd, "renamed") == 0 && unlinkat(dfd, "renamed", 0) == 0);
    CHECK(pread(fd, got, 8, 0) == 8 && memcmp(got, "relative", 8) == 0);
    CHECK(close(fd) == 0 && close(dfd) == 0);
}

static void expect_file(const char *path, const char *want) {
    unsigned char back[256];
    off_t size;
    ssize_t got = os_read(path, back, sizeof back, &size);
    if (got != (ssize_t)strlen(want) || size != got || memcmp(back, want, got) != 0) {
        fprintf(stderr, "%s holds %zd bytes \"%.*s\", want \"%s\"\n", path, got, (int)(got > 0 ? got : 0), back, want);
        exit(1);
    }
}

static void *open_close_loop(void *arg) {
    const char *path = arg;
    char buf[8];
    for (int i = 0; i < 300; i++) {
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0 && pwrite(fd, "racer", 5, 0) == 5 && pread(fd, buf, 5, 0) == 5);
        CHECK(close(fd) == 0);
    }
    return NULL;
}

/* Another process, a stream, a mapping or a second open sharing a cached file. */
static void sharing(const char *dir, const char *out) {
    /* a child writing through an inherited descriptor, as a shell's redirection does */
    const char *path = in_prefix(dir, "inherited");
    int fd = open_p(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(write(fd, "a", 1) == 1);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) _exit(write(fd, "b", 1) == 1 ? 0 : 1);
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(write(fd, "c", 1) == 1 && close(fd) == 0);
    expect_file(path, "abc");
    fd = open_p(path, O_WRONLY | O_APPEND, 0);
    CHECK(write(fd, "1111", 4) == 4);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) _exit(write(fd, "22", 2) == 2 ? 0 : 1);
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(write(fd, "333", 3) == 3 && close(fd) == 0);
    expect_file(path, "abc111122333");

    /* a vfork child closing every descriptor before exec (as CPython's subprocess does) */
    fd = open_p(path, O_WRONLY | O_APPEND, 0);
    CHECK(write(fd, "x", 1) == 1);
    child = vfork();
    CHECK(child >= 0);
    if (child == 0) {
        close_range(3, ~0U, 0);
        _exit(0);
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(write(fd, "y", 1) == 1 && close(fd) == 0);
    expect_file(path, "abc111122333xy");

    /* exec with a close-on-exec descriptor still holding written data */
    const char *execd = in_prefix(dir, "execd");
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        int cfd = open(execd, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
        if (cfd < 0 || write(cfd, "survives the exec", 17) != 17) _exit(1);
        execl("/bin/true", "true", (char *)NULL);
        _exit(2);
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_file(in_prefix(dir, "execd"), "survives the exec");

    /* a stream over a cached descriptor, and fopen "w" of a cached file */
    path = in_prefix(dir, "streamed");
    fd = open_p(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(fd, "head ", 5) == 5);
    FILE *f = fdopen(fd, "w");
    CHECK(f != NULL && fprintf(f, "stream") == 6 && fclose(f) == 0);
    expect_file(path, "head stream");
    fd = open_p(path, O_RDWR, 0);
    CHECK(pwrite(fd, "twelve bytes", 12, 0) == 12);
    f = fopen(path, "w");
    CHECK(f != NULL && fclose(f) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 0 && close(fd) == 0);
    expect_file(path, "");

    /* freopen of a stream over a cached descriptor, to a file outside: the number is reused */
    fd = open_p(path, O_RDWR, 0);
    f = fdopen(fd, "r+");
    CHECK(f != NULL);
    snprintf(obuf, sizeof obuf, "%s/reopened", out);
    f = freopen(obuf, "w", f);
    CHECK(f != NULL && write(fileno(f), "outside", 7) == 7 && fclose(f) == 0);
    expect_file(obuf, "outside");
    expect_file(in_prefix(dir, "streamed"), "");

    /* pages kept after a close serve a reopen, unless the file changed behind the cache */
    path = in_prefix(dir, "kept");
    fd = open_p(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(fd, "first version", 13) == 13 && close(fd) == 0);
    char got[32] = {0};
    fd = open_p(path, O_RDONLY, 0);
    CHECK(read(fd, got, sizeof got) == 13 && memcmp(got, "first version", 13) == 0 && close(fd) == 0);
    int raw = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY);
    CHECK(raw >= 0 && syscall(SYS_pwrite64, raw, "second version!", 15, 0) == 15);
    syscall(SYS_close, raw);
    fd = open_p(path, O_RDONLY, 0);
    CHECK(read(fd, got, sizeof got) == 15 && memcmp(got, "second version!", 15) == 0 && close(fd) == 0);
    CHECK(unlink(path) == 0);

    /* rewrites of the same size through a stream, within one tick of the clock: a stream
     * over a cached descriptor, and fopen of a file kept after its close */
    path = in_prefix(dir, "same-size");
    fd = open_p(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(fd, "AAAA", 4) == 4 && lseek(fd, 0, SEEK_SET) == 0);
    f = fdopen(fd, "r+");
    CHECK(f != NULL && fputs("BBBB", f) >= 0 && fclose(f) == 0);
    fd = open_p(path, O_RDONLY, 0);
    CHECK(read(fd, got, sizeof got) == 4 && memcmp(got, "BBBB", 4) == 0 && close(fd) == 0);
    f = fopen(path, "r+");
    CHECK(f != NULL && fputs("CCCC", f) >= 0 && fclose(f) == 0);
    fd = open_p(path, O_RDONLY, 0);
    CHECK(read(fd, got, sizeof got) == 4 && memcmp(got, "CCCC", 4) == 0 && close(fd) == 0);

    /* mkstemp's descriptor is cached like an open's: an open by name shares its copy; and
     * sync(2) makes what it wrote reach the OS file while it is still open */
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", dir);
    fd = mkstemp(tmpl);
    prefix_opens++;
    CHECK(fd >= 0 && write(fd, "from mkstemp", 12) == 12);
    int byname = open_p(tmpl, O_RDONLY, 0);
    CHECK(pread(byname, got, sizeof got, 0) == 12 && memcmp(got, "from mkstemp", 12) == 0);
    CHECK(pwrite(fd, "FROM", 4, 0) == 4 && pread(byname, got, 4, 0) == 4 && memcmp(got, "FROM", 4) == 0);
    sync();
    expect_file(tmpl, "FROM mkstemp");
    CHECK(close(byname) == 0 && close(fd) == 0 && unlink(tmpl) == 0);

    /* opens and closes of one file racing in two threads */
    path = in_prefix(dir, "raced");
    fd = open_p(path, O_CREAT | O_RDWR, 0644);
    CHECK(close(fd) == 0);
    static char raced[4096];
    snprintf(raced, sizeof raced, "%s", path);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, open_close_loop, raced) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    prefix_opens += 600;
    expect_file(raced, "racer");
}

/* Data written without a close must reach the file when the process ends: by _exit in a
 * child, and by an exit handler that runs after the shim's own (registered first). */
static int late_fd = -1;
static void late_write(void) {
    if (late_fd >= 0) CHECK(pwrite(late_fd, "written at exit", 15, 0) == 15);
}

static void endings(const char *dir, const char *out) {
    const char *path = in_prefix(dir, "exited");
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0 && write(fd, "written before _exit", 20) == 20);
        _exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unsigned char back[64];
    off_t size;
    CHECK(os_read(path, back, sizeof back, &size) == 20 && size == 20 && memcmp(back, "written before _exit", 20) == 0);
    /* another program, started while the data is written but not closed, reads it */
    int fd = open_p(in_prefix(dir, "shown"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(fd, "shown to a child", 16) == 16);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cat '%s' > '%s/copied'", pbuf, out);
    CHECK(system(cmd) == 0);
    snprintf(obuf, sizeof obuf, "%s/copied", out);
    CHECK(os_read(obuf, back, sizeof back, &size) == 16 && memcmp(back, "shown to a child", 16) == 0);
    CHECK(close(fd) == 0);
    late_fd = open_p(in_prefix(dir, "atexit"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
}

int main(int argc, char **argv) {
    atexit(late_write);
    if (argc != 3) {
        fprintf(stderr, "usage: %s PREFIX_DIR OUTSIDE_DIR\n", argv[0]);
        return 2;
    }
    basics(argv[1]);
    threads(argv[1]);
    forked(argv[1]);
    outside_and_links(argv[1], argv[2]);
    endings(argv[1], argv[2]);
    sharing(argv[1], argv[2]);
    printf("opens under prefix: %d\nall checks passed\n", prefix_opens);
    return 0;
}
