/* Two processes take turns on 3 shared files: random reads, writes, appends, truncates,
 * size checks and syncs, each process through descriptors it opened itself, passing a token
 * over pipes so the interleaving is fixed by the seed. Each prints every result; the
 * transcript and the OS files at the end must be the kernel's (tests/preload.rs), so every
 * read sees the other process's latest write, length and truncate, as with one page cache.
 * Usage: shim_two DIR SEED OPS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "draw.h"

#include "check.h"

#define FILES 3
#define SPAN (512 << 10)
#define MAXLEN 12000


static unsigned char buf[MAXLEN];

static void said(int who, long i, const char *op, long r, uint32_t sum) {
    if (r < 0)
        printf("%ld p%d %s = -1 errno %d\n", i, who, op, errno);
    else
        printf("%ld p%d %s = %ld fnv %08x\n", i, who, op, r, sum);
    fflush(stdout);
}

/* Op `i` (drawn from the shared seed, so both processes agree on every op) by `who`. */
static void op(int who, long i, int *fd, int *app) {
    int f = (int)below(FILES);
    off_t at = (off_t)below(SPAN);
    size_t len = 1 + below(MAXLEN);
    unsigned char fill = (unsigned char)next();
    switch (below(10)) {
    case 0: case 1: case 2: case 3: {
        memset(buf, 0xEE, len);
        ssize_t r = pread(fd[f], buf, len, at);
        said(who, i, "pread", r, r > 0 ? fnv(buf, (size_t)r) : 0);
        break;
    }
    case 4: case 5: case 6:
        for (size_t k = 0; k < len; k++) buf[k] = (unsigned char)(fill + k * 7);
        said(who, i, "pwrite", pwrite(fd[f], buf, len, at), fnv(buf, len));
        break;
    case 7:
        for (size_t k = 0; k < len; k++) buf[k] = (unsigned char)(fill ^ k);
        said(who, i, "append", write(app[f], buf, len / 4 + 1), 0);
        break;
    case 8:
        if (below(3) == 0)
            said(who, i, "ftruncate", ftruncate(fd[f], at / 2), 0);
        else
            said(who, i, below(2) ? "fsync" : "fdatasync", below(2) ? fsync(fd[f]) : fdatasync(fd[f]), 0);
        break;
    default: {
        struct stat st;
        int r = fstat(fd[f], &st);
        said(who, i, "fstat size", r < 0 ? -1 : (long)st.st_size, 0);
        off_t end = lseek(fd[f], 0, SEEK_END);
        said(who, i, "seek end", (long)end, 0);
    }
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 4);
    const char *dir = argv[1];
    uint64_t seed = strtoull(argv[2], NULL, 10);
    long ops = strtol(argv[3], NULL, 10);
    int to_child[2], to_parent[2];
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    int who = child == 0;
    /* Only our ends stay open, so the parent sees end of file once the child is gone. */
    CHECK(close(who ? to_child[1] : to_parent[1]) == 0 && close(who ? to_parent[0] : to_child[0]) == 0);
    /* Each opens the files itself, after the fork: a process of its own in the cache. */
    int fd[FILES], app[FILES];
    char path[4096];
    for (int f = 0; f < FILES; f++) {
        snprintf(path, sizeof path, "%s/f%d", dir, f);
        CHECK((fd[f] = open(path, O_RDWR | O_CREAT, 0644)) >= 0);
        CHECK((app[f] = open(path, O_WRONLY | O_APPEND)) >= 0);
    }
    int in = who ? to_child[0] : to_parent[0];
    int out = who ? to_parent[1] : to_child[1];
    /* The parent holds the token first; the child waits for it. */
    int have = !who;
    state = seed * 2654435761u + 1;
    for (long i = 0; i < ops; i++) {
        int turn = (int)(next() % 2);
        uint64_t saved = state;
        if (turn != who) {
            if (have) { /* hand over, then wait for it back */
                CHECK(write(out, "t", 1) == 1);
                have = 0;
            }
        } else {
            if (!have) {
                char t;
                CHECK(read(in, &t, 1) == 1);
                have = 1;
            }
            op(who, i, fd, app);
        }
        /* Both advance the generator alike, whoever ran the op. */
        state = saved;
        for (int k = 0; k < 8; k++) next();
    }
    /* The child gives the token back to the waiting parent; the parent never writes to a
     * child that may have finished. */
    if (have && who) CHECK(write(out, "t", 1) == 1);
    for (int f = 0; f < FILES; f++) {
        CHECK(close(fd[f]) == 0 && close(app[f]) == 0);
    }
    if (who) return 0;
    char t;
    while (read(in, &t, 1) == 1) {
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("done\n");
    return 0;
}
