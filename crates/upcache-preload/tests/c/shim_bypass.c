/* Every way bytes reach a file past the shim's read/write calls, with the kernel as the
 * oracle: tests/preload.rs runs this with and without the shim and compares the transcripts
 * (each call's result and errno, then every file's size and checksum as the OS holds it).
 * Usage: shim_bypass DIR. The io_uring case comes last: the shim stops caching after it. */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"

static const char *dir;
static char pathbuf[4096];

static const char *at(const char *name) {
    snprintf(pathbuf, sizeof pathbuf, "%s/%s", dir, name);
    return pathbuf;
}

/* A result and, if it failed, its errno. */
static void said(const char *what, long r) {
    if (r < 0)
        printf("%s = %ld errno %d\n", what, r, errno);
    else
        printf("%s = %ld\n", what, r);
    fflush(stdout);
}

static int open_new(const char *name) {
    int fd = open(at(name), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    return fd;
}

static void fill(char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (char)('a' + (seed * 7 + i * 13 + i / 97) % 26);
}

/* What the file reads through the descriptor now: its size by fstat and a checksum of its
 * bytes by pread (through the shim, when it serves the descriptor). */
static void show(const char *what, int fd) {
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    static char buf[1 << 20];
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    uint32_t h = 2166136261u;
    for (ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)buf[i]) * 16777619u;
    printf("%s: size %ld read %zd fnv %08x\n", what, (long)st.st_size, n, h);
    fflush(stdout);
}

static void kernel_copies(void) {
    char data[70000];
    fill(data, sizeof data, 1);
    int src = open_new("src");
    CHECK(write(src, data, sizeof data) == (ssize_t)sizeof data);

    int out = open_new("sendfile");
    CHECK(write(out, "head:", 5) == 5);
    off_t off = 100;
    said("sendfile with offset", sendfile(out, src, &off, 30000));
    said("  offset after", (long)off);
    said("  src offset unchanged", (long)lseek(src, 0, SEEK_CUR));
    CHECK(lseek(src, 60000, SEEK_SET) == 60000);
    said("sendfile at src offset, past its end", sendfile(out, src, NULL, 30000));
    said("  src offset after", (long)lseek(src, 0, SEEK_CUR));
    said("  out offset after", (long)lseek(out, 0, SEEK_CUR));
    int app = open(at("sendfile"), O_WRONLY | O_APPEND);
    said("sendfile to O_APPEND", sendfile(app, src, NULL, 10));
    close(app);
    show("sendfile", out);

    int cfr = open_new("cfr");
    loff_t in_off = 5, out_off = 1000;
    said("copy_file_range offsets", copy_file_range(src, &in_off, cfr, &out_off, 20000, 0));
    said("  offsets after", (long)(in_off * 100000 + out_off));
    CHECK(lseek(src, 0, SEEK_SET) == 0);
    said("copy_file_range fd offsets", copy_file_range(src, NULL, cfr, NULL, 5000, 0));
    said("  cfr offset", (long)lseek(cfr, 0, SEEK_CUR));
    said("copy_file_range flags", copy_file_range(src, NULL, cfr, NULL, 10, 1));
    loff_t a = 0, b = 100;
    said("copy_file_range overlap", copy_file_range(cfr, &a, cfr, &b, 1000, 0));
    show("cfr", cfr);

    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], data, 3000) == 3000);
    int spl = open_new("splice");
    said("splice pipe to file", splice(p[0], NULL, spl, NULL, 10000, 0));
    CHECK(write(p[1], data + 3000, 500) == 500);
    loff_t so = 10;
    said("splice pipe to file at offset", splice(p[0], NULL, spl, &so, 10000, 0));
    said("  offset after", (long)so);
    said("splice file to file", splice(src, NULL, spl, NULL, 10, 0));
    said("splice empty pipe, nonblocking", splice(p[0], NULL, spl, NULL, 10, SPLICE_F_NONBLOCK));
    /* Out of a cached file that holds unwritten data, into a pipe. */
    CHECK(pwrite(spl, "FRESH", 5, 0) == 5);
    loff_t from = 0;
    said("splice file to pipe", splice(spl, &from, p[1], NULL, 3500, 0));
    char back[3500];
    ssize_t got = read(p[0], back, sizeof back);
    printf("  pipe got %zd bytes, %.5s\n", got, back);
    show("splice", spl);
    close(p[0]);
    close(p[1]);
    close(src);
    close(out);
    close(cfr);
    close(spl);
}

static void async_io(void) {
    int fd = open_new("aio");
    CHECK(write(fd, "cached before aio\n", 18) == 18);
    static char buf[8192];
    fill(buf, sizeof buf, 2);
    struct aiocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fd;
    cb.aio_buf = buf;
    cb.aio_nbytes = sizeof buf;
    cb.aio_offset = 100;
    said("aio_write", aio_write(&cb));
    const struct aiocb *list[1] = {&cb};
    CHECK(aio_suspend(list, 1, NULL) == 0);
    said("  aio_return", (long)aio_return(&cb));
    CHECK(write(fd, "after\n", 6) == 6);
    show("aio", fd);
    close(fd);

    /* Linux AIO through the raw system calls. */
    fd = open_new("kaio");
    CHECK(write(fd, "cached before io_submit\n", 24) == 24);
    aio_context_t ctx = 0;
    CHECK(syscall(SYS_io_setup, 4, &ctx) == 0);
    struct iocb kcb;
    memset(&kcb, 0, sizeof kcb);
    kcb.aio_fildes = (uint32_t)fd;
    kcb.aio_lio_opcode = IOCB_CMD_PWRITE;
    kcb.aio_buf = (uint64_t)(uintptr_t)buf;
    kcb.aio_nbytes = 5000;
    kcb.aio_offset = 10;
    struct iocb *cbs[1] = {&kcb};
    said("io_submit", syscall(SYS_io_submit, ctx, 1, cbs));
    struct io_event ev;
    CHECK(syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) == 1);
    said("  event res", (long)ev.res);
    syscall(SYS_io_destroy, ctx);
    show("kaio", fd);
    close(fd);
}

static int vd(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vdprintf(fd, fmt, ap);
    va_end(ap);
    return n;
}

static void stdio_paths(void) {
    /* dprintf and vdprintf on a cached descriptor (doubles check the trampoline's xmm). */
    int fd = open_new("dprintf");
    CHECK(write(fd, "first\n", 6) == 6);
    said("dprintf", dprintf(fd, "%d %s %.3f %.2f\n", 42, "words", 3.14159, 2.5));
    said("vdprintf", vd(fd, "%s-%d\n", "vd", 7));
    CHECK(write(fd, "last\n", 5) == 5);
    show("dprintf", fd);
    close(fd);

    /* A cached descriptor copied onto one that a stream wraps. */
    int p[2];
    CHECK(pipe(p) == 0);
    FILE *s = fdopen(p[1], "w");
    CHECK(s != NULL);
    fd = open_new("stream");
    CHECK(write(fd, "before\n", 7) == 7);
    said("dup2 onto a stream's descriptor", dup2(fd, p[1]) >= 0 ? 0 : -1);
    fprintf(s, "through the stream %d\n", 1);
    fflush(s);
    CHECK(write(fd, "after\n", 6) == 6);
    show("stream", fd);
    fclose(s);
    close(fd);
    close(p[0]);

    /* An open that lands on 1 (after stdout was closed), and F_DUPFD onto 2. */
    fflush(stdout);
    int saved_out = dup(1), saved_err = dup(2);
    close(1);
    fd = open(at("onto1"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    int landed = fd;
    printf("printed to stdout, now a file\n");
    fflush(stdout);
    CHECK(write(fd, "written\n", 8) == 8);
    close(2);
    int e = fcntl(fd, F_DUPFD, 2);
    fprintf(stderr, "to stderr, the same file\n");
    CHECK(write(fd, "end\n", 4) == 4);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_err);
    said("open landed on", landed);
    said("F_DUPFD landed on", e);
    /* An O_TRUNC open onto stdout of a file cached, with unwritten data, through another
     * descriptor: the truncation holds. */
    int other = open_new("trunc-onto1");
    static char eight[8192];
    fill(eight, sizeof eight, 6);
    CHECK(write(other, eight, sizeof eight) == (ssize_t)sizeof eight);
    fflush(stdout);
    close(1);
    int t1 = open(at("trunc-onto1"), O_WRONLY | O_TRUNC);
    printf("after the truncation\n");
    fflush(stdout);
    dup2(saved_out, 1);
    close(saved_out);
    said("O_TRUNC open landed on", t1);
    show("trunc-onto1", other);
    close(other);
    /* (1 and 2 are the saved ones again: nothing of the file is left open.) */
    int r = open(at("onto1"), O_RDONLY);
    show("onto1", r);
    close(r);
}

static void limits(void) {
    int fd = open_new("limits");
    CHECK(write(fd, "13 bytes here", 13) == 13);
    said("pwrite at 16 TiB", pwrite(fd, "x", 1, (off_t)1 << 44));
    said("pwrite at 2^62", pwrite(fd, "x", 1, (off_t)1 << 62));
    said("pwrite at 2^63-1", pwrite(fd, "x", 1, INT64_MAX));
    said("pwrite at -1", pwrite(fd, "x", 1, -1));
    said("ftruncate to 2^62", ftruncate(fd, (off_t)1 << 62));
    show("limits", fd);

    /* RLIMIT_FSIZE: SIGXFSZ ignored, so the write fails with EFBIG (or is cut short). */
    int large = open_new("fsize-large");
    static char bytes[30000];
    fill(bytes, sizeof bytes, 5);
    CHECK(write(large, bytes, sizeof bytes) == (ssize_t)sizeof bytes);
    /* Written back before the limit drops: the shim's own write-backs are held to the limit
     * too (it is the process's), where the kernel's are not. */
    CHECK(fsync(large) == 0);
    struct rlimit old, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN);
    small = old;
    small.rlim_cur = 10000;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    static char buf[20000];
    fill(buf, sizeof buf, 3);
    int big = open_new("fsize");
    said("write across RLIMIT_FSIZE", write(big, buf, sizeof buf));
    said("write at RLIMIT_FSIZE", write(big, buf, 10));
    said("pwrite inside RLIMIT_FSIZE", pwrite(big, buf, 10, 0));
    said("ftruncate past RLIMIT_FSIZE", ftruncate(big, 20000));
    said("pwrite inside a larger file, past RLIMIT_FSIZE", pwrite(large, "x", 1, 20000));
    said("ftruncate shrinking past RLIMIT_FSIZE", ftruncate(large, 12288));
    said("ftruncate growing past RLIMIT_FSIZE", ftruncate(large, 16000));
    show("fsize-large", large);
    close(large);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_DFL);
    show("fsize", big);
    close(big);
    close(fd);
}

/* The raw forms of the calls the shim serves, on a cached descriptor. */
static void raw_syscalls(void) {
    int fd = open_new("raw");
    CHECK(write(fd, "cached first\n", 13) == 13);
    said("SYS_write", syscall(SYS_write, fd, "raw write\n", 10));
    said("SYS_pwrite64", syscall(SYS_pwrite64, fd, "RAW", 3, 0));
    char buf[64];
    said("SYS_pread64", syscall(SYS_pread64, fd, buf, sizeof buf, 0));
    said("SYS_lseek end", syscall(SYS_lseek, fd, 0, SEEK_END));
    struct stat st;
    said("SYS_fstat", syscall(SYS_fstat, fd, &st));
    said("  size", (long)st.st_size);
    said("SYS_ftruncate", syscall(SYS_ftruncate, fd, 30));
    int d = (int)syscall(SYS_dup, fd);
    said("SYS_dup then write", write(d, "via dup\n", 8));
    said("SYS_close", syscall(SYS_close, d));
    show("raw", fd);
    close(fd);
}

static void vectored_flags(void) {
    int fd = open_new("pwritev2");
    struct iovec v[2] = {{"abc", 3}, {"defgh", 5}};
    said("pwritev2 at 100", pwritev2(fd, v, 2, 100, 0));
    said("pwritev2 at the offset", pwritev2(fd, v, 1, -1, 0));
    said("  offset after", (long)lseek(fd, 0, SEEK_CUR));
    said("pwritev2 RWF_APPEND", pwritev2(fd, v, 2, 5, RWF_APPEND));
    said("pwritev2 RWF_DSYNC", pwritev2(fd, v + 1, 1, 50, RWF_DSYNC));
    said("pwritev2 RWF_SYNC", pwritev2(fd, v, 1, 60, RWF_SYNC));
    said("pwritev2 unknown flag", pwritev2(fd, v, 1, 0, 0x40000000));
    show("pwritev2", fd);
    close(fd);
}

/* One IORING_OP_WRITE through a ring set up with the raw system calls. */
static int uring_write(int fd, const void *buf, unsigned len, uint64_t off) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = (int)syscall(SYS_io_uring_setup, 4, &p);
    if (ring < 0) return -errno;
    size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) sq_sz = cq_sz = sq_sz > cq_sz ? sq_sz : cq_sz;
    char *sq = mmap(NULL, sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
    CHECK(sq != MAP_FAILED);
    char *cq = sq;
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
        cq = mmap(NULL, cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
        CHECK(cq != MAP_FAILED);
    }
    struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
    CHECK(sqes != MAP_FAILED);
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail), mask = *(unsigned *)(sq + p.sq_off.ring_mask);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    unsigned t = *tail, idx = t & mask;
    memset(&sqes[idx], 0, sizeof sqes[idx]);
    sqes[idx].opcode = IORING_OP_WRITE;
    sqes[idx].fd = fd;
    sqes[idx].addr = (uint64_t)(uintptr_t)buf;
    sqes[idx].len = len;
    sqes[idx].off = off;
    array[idx] = idx;
    __atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);
    CHECK(syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) >= 0);
    unsigned *head = (unsigned *)(cq + p.cq_off.head), cmask = *(unsigned *)(cq + p.cq_off.ring_mask);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    int res = cqes[*head & cmask].res;
    __atomic_store_n(head, *head + 1, __ATOMIC_RELEASE);
    close(ring);
    return res;
}

static void io_uring(void) {
    int fd = open_new("uring");
    char data[6000];
    fill(data, sizeof data, 4);
    CHECK(write(fd, data, 5000) == 5000); /* in the cache, not yet in the OS file */
    said("io_uring write", uring_write(fd, "RING", 4, 4998));
    CHECK(write(fd, "tail", 4) == 4);
    show("uring", fd);
    int again = open(at("uring"), O_RDWR);
    CHECK(pwrite(again, "X", 1, 0) == 1);
    show("uring reopened", again);
    close(again);
    close(fd);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    kernel_copies();
    async_io();
    stdio_paths();
    limits();
    vectored_flags();
    raw_syscalls();
    io_uring();
    printf("done\n");
    return 0;
}
