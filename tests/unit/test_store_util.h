/* tests/unit/test_store_util.h — small helpers shared by the store tests. */
#ifndef SPMD_TEST_STORE_UTIL_H
#define SPMD_TEST_STORE_UTIL_H

#include <sched.h>
#include <time.h>
#include "common/common.h"
#include "harness.h"
#include "spmd/store.h"
#include "store/handshake.h"
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

/* A raw socket's side of the store handshake with this process's secret:
 * as a client (returns 1 when accepted) or as a scripted server. */
static inline int tsu_client_handshake(int fd) {
    spmd__auth a;
    char err[256];
    unsigned char ch[SPMD__STORE_CHELLO_LEN], sh[SPMD__STORE_SHELLO_LEN], proof[32], v[4];
    int64_t dl = spmd__deadline(60000); /* a hang guard: a busy server may answer late */
    return spmd__auth_get(&a, err, sizeof err) == SPMD_OK &&
           spmd__store_hs_client_hello(&a, ch) == SPMD_OK &&
           spmd__write_full(fd, ch, sizeof ch, dl, NULL, err, sizeof err) == SPMD_OK &&
           spmd__read_full(fd, sh, sizeof sh, dl, NULL, err, sizeof err) == SPMD_OK &&
           spmd__store_hs_client_check(&a, ch, sh, proof, err, sizeof err) == SPMD_OK &&
           spmd__write_full(fd, proof, sizeof proof, dl, NULL, err, sizeof err) == SPMD_OK &&
           spmd__read_full(fd, v, 4, dl, NULL, err, sizeof err) == SPMD_OK && spmd__get_u32(v) == 0;
}

static inline int tsu_server_handshake(int fd, int64_t dl) {
    spmd__auth a;
    spmd__store_hs hs;
    memset(&hs, 0, sizeof hs);
    char err[256];
    unsigned char in[SPMD__STORE_CHELLO_LEN], out[SPMD__STORE_SHELLO_LEN];
    size_t outlen = 0;
    int refuse = 0;
    if (spmd__auth_get(&a, err, sizeof err)) return 0;
    for (int stage = 0; stage < 2; stage++) {
        size_t want = spmd__store_hs_want(&hs);
        if (spmd__read_full(fd, in, want, dl, NULL, err, sizeof err)) return 0;
        if (spmd__store_hs_server(&hs, &a, 0, in, want, out, &outlen, &refuse, err, sizeof err) != want ||
            refuse || spmd__write_full(fd, out, outlen, dl, NULL, err, sizeof err))
            return 0;
    }
    return hs.stage == 2;
}

static inline double tsu_ms_since(uint64_t t0_ns) { return (double)(spmd__now_ns() - t0_ns) / 1e6; }

/* Fork a child that runs fn(to_parent, from_parent) (it must _exit); the
 * parent keeps *from_child and *to_child.  Returns the pid, or -1. */
#include <unistd.h>
static inline pid_t tsu_fork_process(void (*fn)(int, int), int *from_child, int *to_child) {
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        fn(up[1], down[0]);
        _exit(99);
    }
    close(up[1]);
    close(down[0]);
    *from_child = up[0];
    *to_child = down[1];
    return pid;
}

#endif
