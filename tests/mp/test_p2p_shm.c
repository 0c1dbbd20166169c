/* Point-to-point over shared memory (transport/p2p_engine.c, shm_link.c):
 * what its waking rules and its single-copy sends must still guarantee.
 *
 *   flood      thousands of small messages nobody receives yet, while the
 *              receiver sits in a collective: its rings fill past half and
 *              the writer wakes the receiver's progress thread, which keeps
 *              them (no deadlock); they then arrive in order
 *   progress   a large receive posted and not waited on is still served
 *              (the sender finishes and reaches the barrier) while the
 *              receiver waits in a collective
 *   withdrawn  a large send read by cross-memory attach that its caller
 *              gave up on: the receiver's later read is refused (the seal
 *              changed), and says so, rather than taking the bytes
 *   sizes      messages around the single-copy threshold and past the
 *              size a receiver reads with two threads (odd lengths, so a
 *              chunk ends short), both orders of posting, bit for bit; with
 *              SPMD_P2P_PARALLEL_MIN_BYTES=0 none was shared
 *   stream     blocking round trips of messages larger than a ring; run
 *              again with SPMD_SPIN_US=0 SPMD_CMA=0 (tests/transport.cmake),
 *              where every wait sleeps at once and the bytes go through the
 *              rings: a receive whose payload is half in must still wake its
 *              progress thread (it had waited for the engine's 1 s timeout)
 *
 * Run at world 2 and 3 (any-source over several rings). */
#include "coll_common.h" /* RREQUIRE, harness */
#include "group/group_internal.h"

#define FLOOD 6000

static int flood(spmd_group *g, int rank, int world) {
    /* every other rank floods rank 0 with 64-byte messages (6000 x 88 bytes
     * of frames is four times a ring), then joins the barrier */
    unsigned char msg[64];
    if (rank != 0) {
        for (int i = 0; i < FLOOD; i++) {
            memset(msg, 0, sizeof msg);
            memcpy(msg, &i, sizeof i);
            msg[63] = (unsigned char)rank;
            RREQUIRE(spmd_send(g, msg, sizeof msg, SPMD_U8, 0, 20) == SPMD_OK);
        }
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        return 0;
    }
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    for (int src = 1; src < world; src++)
        for (int i = 0; i < FLOOD; i++) {
            int got = -1;
            RREQUIRE(spmd_recv(g, msg, sizeof msg, SPMD_U8, src, 20, NULL) == SPMD_OK);
            memcpy(&got, msg, sizeof got);
            RREQUIRE(got == i && msg[63] == src);
        }
    return 0;
}

static int progress(spmd_group *g, int rank, int world) {
    const size_t n = 4u << 20;
    unsigned char *buf = malloc(n);
    RREQUIRE(buf != NULL);
    if (rank == 1) {
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 13 + 1);
        RREQUIRE(spmd_send(g, buf, n, SPMD_U8, 0, 21) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
    } else if (rank == 0) {
        spmd_work *w = NULL;
        memset(buf, 0, n);
        RREQUIRE(spmd_irecv(g, buf, n, SPMD_U8, 1, 21, &w) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK); /* rank 1 gets here only once its send is done */
        RREQUIRE(spmd_work_wait(w, -1) == SPMD_OK);
        spmd_work_free(w);
        for (size_t i = 0; i < n; i++) RREQUIRE(buf[i] == (unsigned char)(i * 13 + 1));
    } else {
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
    }
    (void)world;
    free(buf);
    return 0;
}

static int withdrawn(spmd_group *g, int rank, int world) {
    (void)world;
    if (rank > 1) return 0;
    if (!g->t.cma || !g->t.cma[1 - rank].ok) return 0; /* this kernel forbids cross-memory attach */
    const size_t n = 1u << 20;
    unsigned char *buf = malloc(n);
    RREQUIRE(buf != NULL);
    int32_t go = 1;
    if (rank == 1) {
        memset(buf, 0x5a, n);
        spmd_work *w = NULL;
        RREQUIRE(spmd_isend(g, buf, n, SPMD_U8, 0, 22, &w) == SPMD_OK);
        RREQUIRE(spmd_work_wait(w, 50) == SPMD_ERR_TIMEOUT); /* nobody receives yet */
        spmd_work_free(w);                                  /* withdrawn: the buffer is ours again */
        memset(buf, 0xee, n);
        RREQUIRE(spmd_send(g, &go, 1, SPMD_I32, 0, 23) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &go, 1, SPMD_I32, 0, 24, NULL) == SPMD_OK);
    } else {
        RREQUIRE(spmd_recv(g, &go, 1, SPMD_I32, 1, 23, NULL) == SPMD_OK);
        spmd_status st = spmd_recv(g, buf, n, SPMD_U8, 1, 22, NULL);
        RREQUIRE(st == SPMD_ERR_REMOTE);
        RREQUIRE(strstr(spmd_group_errmsg(g), "rank 1") != NULL);
        RREQUIRE(strstr(spmd_group_errmsg(g), "took its buffer back") != NULL);
        RREQUIRE(spmd_send(g, &go, 1, SPMD_I32, 1, 24) == SPMD_OK); /* the pair still works */
    }
    free(buf);
    return 0;
}

static unsigned char pattern(int src, size_t i) { return (unsigned char)(src * 29 + i * 11 + (i >> 9)); }

static int sizes(spmd_group *g, int rank, int world) {
    /* around the single-copy threshold of a 128 KiB ring and past the size
     * read with two threads */
    static const size_t sz[] = {16383,  16384,  32767,    32768,          32769,         65536,
                                65537, 131071, 131072, 1u << 20, (1u << 20) + 3, (3u << 20) + 5};
    for (size_t k = 0; k < sizeof sz / sizeof *sz; k++) {
        const size_t n = sz[k];
        unsigned char *out = malloc(n), *in = malloc(n);
        RREQUIRE(out && in);
        for (size_t i = 0; i < n; i++) out[i] = pattern(rank, i);
        int right = (rank + 1) % world, left = (rank - 1 + world) % world;
        spmd_work *ws = NULL, *wr = NULL;
        /* even k: the receive is posted first; odd k: the message waits unexpected */
        if (k % 2 == 0) RREQUIRE(spmd_irecv(g, in, n, SPMD_U8, SPMD_ANY_SOURCE, 30 + (int)k, &wr) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        RREQUIRE(spmd_isend(g, out, n, SPMD_U8, right, 30 + (int)k, &ws) == SPMD_OK);
        if (k % 2 == 1) {
            RREQUIRE(spmd_barrier(g) == SPMD_OK);
            RREQUIRE(spmd_irecv(g, in, n, SPMD_U8, left, 30 + (int)k, &wr) == SPMD_OK);
        }
        RREQUIRE(spmd_work_wait(wr, -1) == SPMD_OK && spmd_work_source(wr) == left);
        RREQUIRE(spmd_work_wait(ws, -1) == SPMD_OK);
        spmd_work_free(ws);
        spmd_work_free(wr);
        for (size_t i = 0; i < n; i++) RREQUIRE(in[i] == pattern(left, i));
        free(out);
        free(in);
    }
    unsigned long reads = 0, helped = 0;
    spmd__p2p_parallel_stats(&g->t, &reads, &helped);
    /* with it on, whether a read is shared depends on the host's load at
     * that moment (tests/unit/test_cma_parallel.c tests the sharing) */
    const char *par = getenv("SPMD_P2P_PARALLEL_MIN_BYTES");
    if (par && !strcmp(par, "0")) RREQUIRE(reads == 0 && helped == 0);
    return 0;
}

static int stream(spmd_group *g, int rank, int world) {
    if (rank > 1) return 0;
    (void)world;
    const size_t n = 512u << 10;
    unsigned char *buf = malloc(n);
    RREQUIRE(buf != NULL);
    for (int i = 0; i < 40; i++) {
        if (rank == i % 2) {
            memset(buf, i, n);
            RREQUIRE(spmd_send(g, buf, n, SPMD_U8, 1 - rank, 40) == SPMD_OK);
        } else {
            RREQUIRE(spmd_recv(g, buf, n, SPMD_U8, 1 - rank, 40, NULL) == SPMD_OK);
            RREQUIRE(buf[0] == (unsigned char)i && buf[n - 1] == (unsigned char)i);
        }
    }
    free(buf);
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    RREQUIRE(!strcmp(spmd_group_backend(g), "shm"));
    int rc = flood(g, rank, world);
    if (!rc) rc = progress(g, rank, world);
    if (!rc) rc = withdrawn(g, rank, world);
    if (!rc) rc = sizes(g, rank, world);
    if (!rc) rc = stream(g, rank, world);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    /* shared memory is the subject; a deadlock must end in an error, not a hang */
    setenv("SPMD_TRANSPORT", "shm", 1);
    setenv("SPMD_TIMEOUT", "30", 1);
    for (int world = 2; world <= 3; world++) {
        char report[512];
        spmd_status st = spmd_spawn_timeout(world, body, NULL, 90000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", world, report);
    }
    TEST_MAIN_END();
}
