/* A random sequence of file operations on 3 files through up to 8 descriptors, printing
 * every result (return values, errno, data checksums, sizes) and at the end each OS file's
 * size and checksum read with raw system calls. tests/preload.rs runs it with and without
 * the shim, for several seeds: the kernel is the oracle, and the two transcripts must be
 * identical. Usage: shim_diff DIR SEED OPS */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "draw.h"

#define FILES 3
#define SLOTS 8
#define SPAN (1 << 20) /* offsets up to 1 MiB: past a small cache */
#define MAXLEN 20000


static int fds[SLOTS], file_of[SLOTS];
static char names[FILES][4096];
static unsigned char buf[MAXLEN], buf2[MAXLEN];

static void result(const char *op, long r) {
    if (r < 0)
        printf("%s -1 errno %d\n", op, errno);
    else
        printf("%s %ld\n", op, r);
}

static int pick_open(void) {
    int open_slots[SLOTS], n = 0;
    for (int i = 0; i < SLOTS; i++)
        if (fds[i] >= 0) open_slots[n++] = i;
    return n ? open_slots[below(n)] : -1;
}

/* The last free slot, or -1 (after printing "full"). */
static int free_slot(void) {
    int slot = -1;
    for (int i = 0; i < SLOTS; i++)
        if (fds[i] < 0) slot = i;
    if (slot < 0) printf("full\n");
    return slot;
}

static void fill(unsigned char *b, size_t n) {
    uint64_t x = next();
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(x >> ((i % 8) * 8)) ^ (unsigned char)i;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR SEED OPS\n", argv[0]);
        return 2;
    }
    state = strtoull(argv[2], NULL, 10) * 2654435761u + 1;
    long ops = strtol(argv[3], NULL, 10);
    for (int f = 0; f < FILES; f++) snprintf(names[f], sizeof names[f], "%s/f%d", argv[1], f);
    for (int i = 0; i < SLOTS; i++) fds[i] = -1;
    static const int access[3] = {O_RDONLY, O_WRONLY, O_RDWR};
    for (long op = 0; op < ops; op++) {
        int s = pick_open(), fd = s >= 0 ? fds[s] : -1;
        printf("%ld f%d: ", op, s >= 0 ? file_of[s] : -1);
        switch (below(s < 0 ? 1 : 21)) {
        case 0: { /* open into a free slot */
            int slot = free_slot();
            if (slot < 0) break;
            int flags = access[below(3)] | (below(2) ? O_CREAT : 0) | (below(6) ? 0 : O_APPEND) |
                        (below(20) ? 0 : O_TRUNC);
            int file = (int)below(FILES);
            int r = open(names[file], flags, 0644);
            if (r >= 0) fds[slot] = r, file_of[slot] = file;
            printf("f%d flags %o ", file, flags);
            result("open", r < 0 ? r : slot);
            break;
        }
        case 1:
            result("close", close(fd));
            fds[s] = -1;
            break;
        case 2: {
            int slot = free_slot();
            if (slot < 0) break;
            int r = dup(fd);
            if (r >= 0) fds[slot] = r, file_of[slot] = file_of[s];
            result("dup", r < 0 ? r : slot);
            break;
        }
        case 3:
        case 4: {
            size_t n = below(MAXLEN);
            fill(buf, n);
            result("pwrite", pwrite(fd, buf, n, (off_t)below(SPAN)));
            break;
        }
        case 5:
        case 6: {
            size_t n = below(MAXLEN);
            ssize_t r = pread(fd, buf, n, (off_t)below(SPAN + MAXLEN));
            result("pread", r);
            if (r > 0) printf("  crc %08x\n", fnv(buf, (size_t)r));
            break;
        }
        case 7: {
            size_t n = below(MAXLEN);
            fill(buf, n);
            result("write", write(fd, buf, n));
            break;
        }
        case 8: {
            ssize_t r = read(fd, buf, below(MAXLEN));
            result("read", r);
            if (r > 0) printf("  crc %08x\n", fnv(buf, (size_t)r));
            break;
        }
        case 9: {
            static const int whence[3] = {SEEK_SET, SEEK_CUR, SEEK_END};
            int w = whence[below(3)];
            off_t at = w == SEEK_SET ? (off_t)below(SPAN) : (off_t)below(2 * MAXLEN) - MAXLEN;
            result("lseek", lseek(fd, at, w));
            break;
        }
        case 10:
            result("ftruncate", ftruncate(fd, (off_t)below(SPAN)));
            break;
        case 11: {
            struct stat st;
            int r = below(2) ? fstat(fd, &st) : stat(names[below(FILES)], &st);
            result("stat", r < 0 ? r : (long)st.st_size);
            break;
        }
        case 12:
            result("sync", below(2) ? fsync(fd) : fdatasync(fd));
            break;
        case 13: {
            size_t a = below(MAXLEN / 2), b = below(MAXLEN / 2);
            fill(buf, a);
            fill(buf2, b);
            struct iovec v[2] = {{buf, a}, {buf2, b}};
            long at = below(3) ? (long)below(SPAN) : -1;
            result(at < 0 ? "pwritev2 cur" : "pwritev", at < 0 ? pwritev2(fd, v, 2, -1, 0) : pwritev(fd, v, 2, at));
            break;
        }
        case 14: {
            size_t a = below(MAXLEN / 2), b = below(MAXLEN / 2);
            struct iovec v[2] = {{buf, a}, {buf2, b}};
            long at = below(3) ? (long)below(SPAN) : -1;
            ssize_t r = at < 0 ? readv(fd, v, 2) : preadv(fd, v, 2, at);
            result(at < 0 ? "readv" : "preadv", r);
            if (r > 0) {
                size_t first = (size_t)r < a ? (size_t)r : a;
                printf("  crc %08x %08x\n", fnv(buf, first), fnv(buf2, (size_t)r - first));
            }
            break;
        }
        case 15:
            result("posix_fadvise", posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
            break;
        case 16: {
            static const int modes[4] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                         FALLOC_FL_ZERO_RANGE};
            int mode = modes[below(4)];
            printf("mode %d ", mode);
            result("fallocate", fallocate(fd, mode, (off_t)below(SPAN), (off_t)below(MAXLEN) + 1));
            break;
        }
        case 18: { /* a mapping of what is there (which hands the file to libc for good: so
                    * only in the last twentieth of the run) */
            if (op < ops - ops / 20) {
                printf("no mapping yet\n");
                break;
            }
            struct stat st;
            if (fstat(fd, &st) != 0 || st.st_size == 0) {
                printf("nothing to map\n");
                break;
            }
            size_t len = (size_t)st.st_size;
            void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                result("mmap", -1);
                break;
            }
            printf("mmap %zu crc %08x\n", len, fnv(m, len));
            munmap(m, len);
            break;
        }
        case 19: { /* O_APPEND on or off */
            int fl = fcntl(fd, F_GETFL);
            result("setfl", fl < 0 ? fl : fcntl(fd, F_SETFL, fl ^ O_APPEND));
            break;
        }
        case 20: { /* dup2 onto another open slot */
            int t = pick_open();
            if (t == s) {
                printf("same\n");
                break;
            }
            int r = dup2(fd, fds[t]);
            if (r >= 0) file_of[t] = file_of[s];
            result("dup2", r < 0 ? r : t);
            break;
        }
        case 17: {
            int file = (int)below(FILES);
            off_t len = (off_t)below(SPAN);
            printf("f%d to %ld ", file, (long)len);
            result("truncate", truncate(names[file], len));
            break;
        }
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (fds[i] >= 0) close(fds[i]);
    /* the OS files, read without libc */
    for (int f = 0; f < FILES; f++) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, names[f], O_RDONLY);
        if (fd < 0) {
            printf("f%d absent\n", f);
            continue;
        }
        long size = (long)syscall(SYS_lseek, fd, 0, SEEK_END);
        uint32_t h = 2166136261u;
        for (long at = 0; at < size; at += MAXLEN) {
            long got = (long)syscall(SYS_pread64, fd, buf, MAXLEN, at);
            if (got <= 0) break;
            for (long i = 0; i < got; i++) h = (h ^ buf[i]) * 16777619u;
        }
        syscall(SYS_close, fd);
        printf("f%d size %ld crc %08x\n", f, size, h);
    }
    return 0;
}
