/* tests/unit/test_store_util.h — small helpers shared by the store tests. */
#ifndef SPMD_TEST_STORE_UTIL_H
#define SPMD_TEST_STORE_UTIL_H

#include <sched.h>
#include <time.h>
#include "common/common.h"
#include "harness.h"
#include "spmd/store.h"
#include "store/store_internal.h"

/* REQUIRE for void functions. */
#define REQUIRE_VOID(cond)                                                              \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);  \
            test_failures++;                                                            \
            return;                                                                     \
        }                                                                               \
    } while (0)

/* A server on loopback, port picked by the kernel. */
static inline spmd_store_server *tsu_server(void) {
    char err[256];
    spmd_store_server *s = NULL;
    if (spmd_store_server_start("127.0.0.1", 0, &s, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "server start: %s\n", err);
        return NULL;
    }
    return s;
}

static inline spmd_store *tsu_connect(int port, int timeout_ms) {
    char err[256];
    spmd_store *c = NULL;
    if (spmd_store_connect("127.0.0.1", port, timeout_ms, &c, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "connect: %s\n", err);
        return NULL;
    }
    return c;
}

/* Wait (bounded) until the server reports at least `parked` parked requests:
 * observing the server's state, not guessing with a sleep. */
static inline int tsu_wait_parked(const spmd_store_server *s, int parked, int timeout_ms) {
    int64_t deadline = spmd__deadline(timeout_ms);
    for (;;) {
        int p = 0;
        spmd__store_server_stats(s, NULL, &p);
        if (p >= parked) return 1;
        if (spmd__remaining_ms(deadline) == 0) return 0;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* Same for the number of live connections (exact). */
static inline int tsu_wait_conns(const spmd_store_server *s, int conns, int timeout_ms) {
    int64_t deadline = spmd__deadline(timeout_ms);
    for (;;) {
        int c = 0;
        spmd__store_server_stats(s, &c, NULL);
        if (c == conns) return 1;
        if (spmd__remaining_ms(deadline) == 0) return 0;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static inline double tsu_ms_since(uint64_t t0_ns) { return (double)(spmd__now_ns() - t0_ns) / 1e6; }

#endif
