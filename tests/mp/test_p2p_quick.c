/* The quick path of blocking small messages over shared memory
 * (transport/p2p_quick.c): what it takes must arrive exactly as the general
 * path would deliver it, and what it leaves must reach the general path.
 *
 *   pingpong   round trips of 0 B to the quick path's largest size and one
 *              past it, bit for bit; both ranks did most of them quickly
 *   order      a receive posted earlier (irecv) still gets its message
 *              first; a blocking receive whose message comes second gets it,
 *              and the first is kept for the receive that comes later
 *   mismatch   a size or type mismatch fails the receive naming both sides,
 *              and the pair goes on
 *   threads    two threads of one rank receive from the same peer with
 *              their own tags at once: each gets its own messages, in
 *              order (a frame one of them reads for the other is kept
 *              unexpected and must still reach it)
 *   killed     a rank SIGKILLed while its peer waits in a blocking receive:
 *              the receive fails naming it, with no hang
 *
 * Run at world 2 and 3 (the third rank talks to rank 0 meanwhile). */
#include <pthread.h>
#include <signal.h>
#include "coll_common.h" /* RREQUIRE, harness */
#include "group/group_internal.h"
#include "mp/mp_fork.h"

static void fill(unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 31 + (size_t)seed * 7 + 1);
}

static int pingpong(spmd_group *g, int rank) {
    static const size_t sizes[] = {0, 1, 4, 24, 63, 64, 65, 1000, 4096, SPMD__P2P_QUICK_MAX, SPMD__P2P_QUICK_MAX + 1};
    unsigned char *buf = malloc(SPMD__P2P_QUICK_MAX + 1), *want = malloc(SPMD__P2P_QUICK_MAX + 1);
    RREQUIRE(buf && want);
    unsigned long s0, r0, s1, r1;
    spmd__p2p_quick_stats(&g->t, &s0, &r0);
    const int peer = rank == 0 ? 1 : 0, rounds = 200;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int i = 0; i < rounds; i++) {
            const size_t n = sizes[k];
            const int seed = (int)k * 1000 + i;
            if (rank == 0) {
                fill(buf, n, seed);
                RREQUIRE(spmd_send(g, buf, n, SPMD_U8, peer, 3) == SPMD_OK);
                memset(buf, 0, n);
                int src = -1;
                RREQUIRE(spmd_recv(g, buf, n, SPMD_U8, peer, 4, &src) == SPMD_OK);
                fill(want, n, seed + 1);
                RREQUIRE(src == peer && memcmp(buf, want, n) == 0);
            } else {
                memset(buf, 0, n);
                RREQUIRE(spmd_recv(g, buf, n, SPMD_U8, peer, 3, NULL) == SPMD_OK);
                fill(want, n, seed);
                RREQUIRE(memcmp(buf, want, n) == 0);
                fill(buf, n, seed + 1);
                RREQUIRE(spmd_send(g, buf, n, SPMD_U8, peer, 4) == SPMD_OK);
            }
        }
    spmd__p2p_quick_stats(&g->t, &s1, &r1);
    /* every size but the last may go quickly.  A send always does here
     * (nothing is queued in a ping-pong) but a receive may not: a heartbeat
     * first in the ring, or its spin ran out on a busy machine */
    const unsigned long quick = (unsigned long)(sizeof sizes / sizeof *sizes - 1) * rounds;
    RREQUIRE(s1 - s0 >= quick / 2 && s1 - s0 <= quick);
    RREQUIRE(r1 - r0 >= 1 && r1 - r0 <= quick);
    free(buf);
    free(want);
    return 0;
}

static int order(spmd_group *g, int rank) {
    int32_t a = 0, b = 0;
    if (rank == 1) {
        spmd_work *w = NULL;
        RREQUIRE(spmd_irecv(g, &b, 1, SPMD_I32, 0, 11, &w) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &a, 1, SPMD_I32, 0, 10, NULL) == SPMD_OK); /* a receive is posted: not quick */
        RREQUIRE(spmd_work_wait(w, -1) == SPMD_OK);
        spmd_work_free(w);
        RREQUIRE(a == 100 && b == 111);
        /* two sent before either receive: the second's receive comes first */
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &b, 1, SPMD_I32, 0, 13, NULL) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &a, 1, SPMD_I32, 0, 12, NULL) == SPMD_OK);
        RREQUIRE(a == 120 && b == 130);
        /* same tag twice: arrival order */
        RREQUIRE(spmd_recv(g, &a, 1, SPMD_I32, 0, 14, NULL) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &b, 1, SPMD_I32, 0, 14, NULL) == SPMD_OK);
        RREQUIRE(a == 141 && b == 142);
    } else if (rank == 0) {
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        a = 100;
        b = 111;
        RREQUIRE(spmd_send(g, &a, 1, SPMD_I32, 1, 10) == SPMD_OK);
        RREQUIRE(spmd_send(g, &b, 1, SPMD_I32, 1, 11) == SPMD_OK);
        a = 120;
        b = 130;
        RREQUIRE(spmd_send(g, &a, 1, SPMD_I32, 1, 12) == SPMD_OK);
        RREQUIRE(spmd_send(g, &b, 1, SPMD_I32, 1, 13) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        a = 141;
        b = 142;
        RREQUIRE(spmd_send(g, &a, 1, SPMD_I32, 1, 14) == SPMD_OK);
        RREQUIRE(spmd_send(g, &b, 1, SPMD_I32, 1, 14) == SPMD_OK);
    } else {
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
    }
    return 0;
}

static int mismatch(spmd_group *g, int rank) {
    if (rank == 0) {
        float f[2] = {1.5f, 2.5f};
        int32_t ok = 7;
        RREQUIRE(spmd_send(g, f, 2, SPMD_F32, 1, 20) == SPMD_OK);
        RREQUIRE(spmd_send(g, f, 2, SPMD_F32, 1, 21) == SPMD_OK);
        RREQUIRE(spmd_send(g, &ok, 1, SPMD_I32, 1, 22) == SPMD_OK);
    } else if (rank == 1) {
        float big[4];
        int32_t i2[2], ok = 0;
        RREQUIRE(spmd_recv(g, big, 4, SPMD_F32, 0, 20, NULL) == SPMD_ERR_MISMATCH);
        RREQUIRE(strstr(spmd_group_errmsg(g), "size mismatch: rank 0 sent 2 x float32") != NULL);
        RREQUIRE(strstr(spmd_group_errmsg(g), "rank 1's receive expects 4 x float32") != NULL);
        RREQUIRE(spmd_recv(g, i2, 2, SPMD_I32, 0, 21, NULL) == SPMD_ERR_MISMATCH);
        RREQUIRE(strstr(spmd_group_errmsg(g), "type mismatch") != NULL);
        RREQUIRE(spmd_recv(g, &ok, 1, SPMD_I32, 0, 22, NULL) == SPMD_OK);
        RREQUIRE(ok == 7);
    }
    return spmd_barrier(g) == SPMD_OK ? 0 : 1;
}

#define THREAD_MSGS 2000

typedef struct {
    spmd_group *g;
    int tag, bad;
} taker;

static void *take_tag(void *arg) {
    taker *t = arg;
    for (int32_t i = 0; i < THREAD_MSGS && !t->bad; i++) {
        int32_t v = -1;
        if (spmd_recv(t->g, &v, 1, SPMD_I32, 0, t->tag, NULL) != SPMD_OK || v != i) t->bad = 1 + (int)i;
    }
    return NULL;
}

static int threads(spmd_group *g, int rank) {
    if (rank == 0) {
        for (int32_t i = 0; i < THREAD_MSGS; i++) {
            RREQUIRE(spmd_send(g, &i, 1, SPMD_I32, 1, 40) == SPMD_OK);
            RREQUIRE(spmd_send(g, &i, 1, SPMD_I32, 1, 41) == SPMD_OK);
        }
    } else if (rank == 1) {
        taker a = {g, 40, 0}, b = {g, 41, 0};
        pthread_t ta, tb;
        RREQUIRE(pthread_create(&ta, NULL, take_tag, &a) == 0);
        RREQUIRE(pthread_create(&tb, NULL, take_tag, &b) == 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        RREQUIRE(a.bad == 0 && b.bad == 0);
    }
    return spmd_barrier(g) == SPMD_OK ? 0 : 1;
}

/* rank 2 of world 3 keeps rank 0 busy meanwhile */
static int third(spmd_group *g, int rank, int world) {
    if (world < 3 || (rank != 0 && rank != 2)) return 0;
    int32_t v = 0;
    for (int i = 0; i < 100; i++) {
        if (rank == 2) {
            v = i;
            RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, 0, 30) == SPMD_OK);
        } else {
            RREQUIRE(spmd_recv(g, &v, 1, SPMD_I32, 2, 30, NULL) == SPMD_OK);
            RREQUIRE(v == i);
        }
    }
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    RREQUIRE(!strcmp(spmd_group_backend(g), "shm"));
    int rc = rank < 2 ? pingpong(g, rank) : 0;
    if (!rc) rc = third(g, rank, world);
    if (!rc) rc = order(g, rank);
    if (!rc) rc = mismatch(g, rank);
    if (!rc) rc = threads(g, rank);
    spmd_group_destroy(g);
    return rc;
}

/* Rank 1 waits for a message rank 0 never sends: rank 0 dies first. */
static int killed(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512];
    CREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    CREQ(!strcmp(spmd_group_backend(g), "shm"), "backend %s", spmd_group_backend(g));
    int32_t v = 0;
    for (int i = 0; i < 50; i++) { /* the pair is warm: the receive below goes quickly */
        if (idx == 0) CREQ(spmd_send(g, &i, 1, SPMD_I32, 1, 1) == SPMD_OK, "%s", spmd_group_errmsg(g));
        else CREQ(spmd_recv(g, &v, 1, SPMD_I32, 0, 1, NULL) == SPMD_OK && v == i, "%s", spmd_group_errmsg(g));
    }
    CREQ(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    if (idx == 0) raise(SIGKILL);
    spmd_status st = spmd_recv(g, &v, 1, SPMD_I32, 0, 2, NULL);
    CREQ(st != SPMD_OK && st != SPMD_ERR_TIMEOUT, "recv: %s", spmd_status_str(st));
    CREQ(strstr(spmd_group_errmsg(g), "rank 0") != NULL, "error does not name rank 0: %s", spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    setenv("SPMD_TRANSPORT", "shm", 1);
    setenv("SPMD_TIMEOUT", "60", 1);
    for (int world = 2; world <= 3; world++) {
        char report[512];
        spmd_status st = spmd_spawn_timeout(world, body, NULL, 120000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", world, report);
    }
    int status[2];
    CHECK(mp_fork_run(2, NULL, 2, NULL, killed, NULL, 90, status) == 0);
    CHECK(WIFSIGNALED(status[0]) && WTERMSIG(status[0]) == SIGKILL);
    CHECK_MSG(mp_exited_ok(status[1]), "the survivor failed (status 0x%x)", status[1]);
    TEST_MAIN_END();
}
