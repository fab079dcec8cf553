/* A writer killed by a signal keeps what write(2) accepted, as with the kernel's page cache.
 * Usage: shim_signals DIR. For each case a child writes 1000 lines with write(2) to a file in
 * DIR, says whether the OS file already held them (with the shim it must not: they are in the
 * cache), then dies of a signal (sent by the parent, raised, a fault, abort) or handles it;
 * the parent checks the wait status and that the file has all 1000 lines. Prints one line per
 * case ("CASE held=H lines=N") and "all checks passed". tests/signals.rs runs it with and
 * without the shim. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define LINES 1000

enum how { SENT, RAISED, FAULT, ABORTED, BROKEN_PIPE, CHAINED, HANDLED, THREADED, BAD_BUFFER };

struct scase {
    const char *name;
    int sig;
    enum how how;
};

static const struct scase CASES[] = {
    {"TERM sent", SIGTERM, SENT},     {"INT sent", SIGINT, SENT},
    {"HUP sent", SIGHUP, SENT},       {"QUIT sent", SIGQUIT, SENT},
    {"USR1 sent", SIGUSR1, SENT},     {"ALRM sent", SIGALRM, SENT},
    {"SEGV sent", SIGSEGV, SENT},     {"BUS sent", SIGBUS, SENT},
    {"TERM raised", SIGTERM, RAISED}, {"SEGV fault", SIGSEGV, FAULT},
    {"ABRT abort", SIGABRT, ABORTED}, {"PIPE broken", SIGPIPE, BROKEN_PIPE},
    {"TERM chained", SIGTERM, CHAINED}, {"USR2 handled", SIGUSR2, HANDLED},
    {"TERM threads", SIGTERM, THREADED}, {"SEGV bad buffer", SIGSEGV, BAD_BUFFER},
};

static char path[4096];
static volatile sig_atomic_t handled;
static volatile pid_t current_child;

static void on_watchdog(int sig) {
    (void)sig;
    static const char msg[] = "a child hung: killed\n";
    (void)!write(2, msg, sizeof msg - 1);
    if (current_child > 0) kill(current_child, SIGKILL);
    _exit(2);
}

/* The OS file's size, through a descriptor the shim never saw (raw system calls on a cached
 * descriptor are the shim's to serve). */
static long os_size(void) {
    struct stat st;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    CHECK(fd >= 0 && syscall(SYS_fstat, fd, &st) == 0);
    syscall(SYS_close, fd);
    return (long)st.st_size;
}

static long write_lines(int fd, int from, int to) {
    long written = 0;
    char line[64];
    for (int i = from; i < to; i++) {
        int n = snprintf(line, sizeof line, "line %d of the writer\n", i);
        CHECK(write(fd, line, (size_t)n) == n);
        written += n;
    }
    return written;
}

/* Chains to the default action as programs do: put it back, raise again. */
static void chain(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_usr2(int sig) {
    (void)sig;
    handled = 1;
}

static void *spin_writer(void *arg) {
    int fd = *(int *)arg;
    for (;;) write_lines(fd, 0, 10);
    return NULL;
}

static void child(const struct scase *c, int ready) {
    signal(SIGALRM, SIG_DFL); /* the parent's watchdog is not the child's */
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none); /* no core files in the test directory */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    long written = write_lines(fd, 0, LINES);
    char held = os_size() < written ? 'y' : 'n';
    if (c->how == CHAINED) {
        struct sigaction act;
        memset(&act, 0, sizeof act);
        act.sa_handler = chain;
        CHECK(sigaction(c->sig, &act, NULL) == 0);
    }
    if (c->how == HANDLED) {
        struct sigaction old;
        CHECK(sigaction(c->sig, NULL, &old) == 0 && old.sa_handler == SIG_DFL); /* as seen */
        CHECK(signal(c->sig, on_usr2) == SIG_DFL);
    }
    if (c->how == THREADED) {
        /* Another thread keeps writing to a second cached file while the signal arrives. */
        static int other;
        char p2[4200];
        snprintf(p2, sizeof p2, "%s.other", path);
        other = open(p2, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(other >= 0);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, spin_writer, &other) == 0);
    }
    CHECK(write(ready, &held, 1) == 1);
    switch (c->how) {
    case RAISED:
        raise(c->sig);
        break;
    case FAULT:
        *(volatile int *)(long)(c->sig - SIGSEGV) = 1; /* a null pointer the compiler keeps */
        break;
    case ABORTED:
        abort();
    case BROKEN_PIPE: {
        int p[2];
        CHECK(pipe(p) == 0);
        close(p[0]);
        (void)!write(p[1], "x", 1);
        break;
    }
    case BAD_BUFFER: {
        /* read(2) into a read-only page: the kernel says EFAULT; the shim's copy faults (a
         * fault inside the shim must end the process, not loop). Either way the child then
         * dies of SIGSEGV. */
        char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(ro != MAP_FAILED);
        int rd = open(path, O_RDONLY);
        CHECK(rd >= 0);
        (void)!read(rd, ro, 100);
        raise(SIGSEGV);
        break;
    }
    case HANDLED:
        while (!handled) pause();
        write_lines(fd, LINES, 2 * LINES);
        exit(0);
    default:
        for (;;) pause();
    }
    exit(3); /* not reached: the signal ended the process */
}

static int count_lines(void) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    CHECK(fd >= 0);
    char buf[65536];
    int lines = 0;
    long n;
    while ((n = syscall(SYS_read, fd, buf, sizeof buf)) > 0)
        for (long i = 0; i < n; i++) lines += buf[i] == '\n';
    syscall(SYS_close, fd);
    return lines;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    /* Every case expects its signal's default action: a shell without job control starts
     * background commands with SIGINT and SIGQUIT ignored, which the children would inherit. */
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) signal(CASES[i].sig, SIG_DFL);
    /* A child that hangs (a fault looping in a handler) fails the run instead of hanging it. */
    signal(SIGALRM, on_watchdog);
    alarm(120);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const struct scase *c = &CASES[i];
        snprintf(path, sizeof path, "%s/case%zu", argv[1], i);
        int ready[2];
        CHECK(pipe(ready) == 0);
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            child(c, ready[1]);
        }
        current_child = pid;
        close(ready[1]);
        char held = '?';
        CHECK(read(ready[0], &held, 1) == 1);
        close(ready[0]);
        if (c->how == SENT || c->how == CHAINED || c->how == HANDLED || c->how == THREADED)
            CHECK(kill(pid, c->sig) == 0);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        int lines = count_lines();
        printf("%s held=%c lines=%d\n", c->name, held, lines);
        if (c->how == HANDLED) {
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            CHECK(lines == 2 * LINES);
        } else {
            if (!(WIFSIGNALED(status) && WTERMSIG(status) == c->sig))
                fprintf(stderr, "%s: status %#x\n", c->name, status);
            CHECK(WIFSIGNALED(status) && WTERMSIG(status) == c->sig);
            CHECK(lines == LINES);
        }
    }
    printf("all checks passed\n");
    return 0;
}
