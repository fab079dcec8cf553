/* What the shim's C tests share: CHECK, which ends the program with the failed condition,
 * its line and errno. */
#ifndef UPCACHE_CHECK_H
#define UPCACHE_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__, __LINE__, \
                    #cond, errno, strerror(errno));                                        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#endif
