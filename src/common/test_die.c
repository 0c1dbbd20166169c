/* test_die.c — SPMD_TEST_DIE_AT (test_die.h). */
#include "test_die.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spmd__test_die_at(const char *point, int rank, int epoch) {
    const char *s = getenv("SPMD_TEST_DIE_AT");
    size_t plen = strlen(point);
    while (s && *s) {
        const char *colon = strchr(s, ':');
        if (!colon) return;
        char *end = NULL;
        long r = strtol(colon + 1, &end, 10), ep = epoch;
        int ok = end != colon + 1;
        if (ok && *end == '@') {
            const char *at = end + 1;
            ep = strtol(at, &end, 10);
            ok = end != at;
        }
        if (ok && (size_t)(colon - s) == plen && !strncmp(s, point, plen) && r == rank && ep == epoch) {
            char msg[160];
            int n = snprintf(msg, sizeof msg, "spmd: rank %d of epoch %d SIGKILLs itself at %s (SPMD_TEST_DIE_AT)\n",
                             rank, epoch, point);
            if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
            raise(SIGKILL);
        }
        s = end && *end == ',' ? end + 1 : NULL;
    }
}
