/* Collective errors.
 *
 * 1. Bad arguments (unknown dtype or op, a bitwise op on a float type, NULL
 *    buffers with count > 0, root out of range, sizes that overflow, NULL
 *    count arrays, unknown algorithm names by option or environment, an
 *    algorithm of another collective, a NULL work handle pointer) return
 *    SPMD_ERR_INVALID on every rank with the same message, before anything
 *    is sent: the group stays usable and the next collective succeeds.
 * 2. Ranks that disagree (count, dtype, op, root, or the collective itself)
 *    end the call with SPMD_ERR_MISMATCH on every rank, quickly — never a
 *    hang (SPMD_TIMEOUT=40 bounds a bug) and never a write past a buffer
 *    (ASan would see it).  Roots are settled by the agreement step before
 *    anything moves: the group stays usable; any other disagreement fails
 *    the group.  (test_coll_agree covers algorithms and settings.)
 *
 * Usage: test_coll_errors [world ...]  (default 2 3 5). */
#include <stdint.h>
#include "coll_common.h"
#include "common/common.h"

/* Same message on every rank: compare a hash through min/max all_reduce. */
static int same_everywhere(spmd_group *g, const char *msg) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int64_t v = (int64_t)(h >> 1), lo = 0, hi = 0;
    /* an explicit algorithm: the environment may hold a bad override right now */
    spmd_coll_opts o = {"rd"};
    spmd_work *a = NULL, *b = NULL;
    if (spmd_all_reduce_async(g, &v, &lo, 1, SPMD_I64, SPMD_MIN, &o, &a)) return 0;
    if (spmd_all_reduce_async(g, &v, &hi, 1, SPMD_I64, SPMD_MAX, &o, &b)) return 0;
    spmd_status sa = spmd_work_wait(a, -1), sb = spmd_work_wait(b, -1);
    spmd_work_free(a);
    spmd_work_free(b);
    return sa == SPMD_OK && sb == SPMD_OK && lo == hi;
}

#define EXPECT_INVALID(call, needle)                                                              \
    do {                                                                                          \
        spmd_status st_ = (call);                                                                 \
        if (st_ != SPMD_ERR_INVALID || !strstr(spmd_group_errmsg(g), needle)) {                   \
            fprintf(stderr, "rank %d: %s:%d: %s returned %s, message '%s' (wanted '%s')\n", rank,  \
                    __FILE__, __LINE__, #call, spmd_status_name(st_), spmd_group_errmsg(g), needle); \
            return 1;                                                                             \
        }                                                                                         \
        char msg_[SPMD__ERRLEN];                                                                  \
        snprintf(msg_, sizeof msg_, "%s", spmd_group_errmsg(g));                                  \
        RREQUIRE(same_everywhere(g, msg_)); /* also proves the group still works */              \
    } while (0)

static int bad_args(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    float f[8] = {0}, out[8 * 64];
    int32_t iv[8] = {0};
    spmd_work *wk = NULL;
    EXPECT_INVALID(spmd_all_reduce(g, f, f, 8, (spmd_dtype)42, SPMD_SUM), "unknown dtype 42");
    EXPECT_INVALID(spmd_all_reduce(g, f, f, 8, SPMD_F32, (spmd_op)17), "unknown op 17");
    EXPECT_INVALID(spmd_all_reduce(g, f, f, 8, SPMD_F32, SPMD_BXOR), "op 'bxor' is not defined for dtype float32");
    EXPECT_INVALID(spmd_reduce_scatter(g, f, f, 1, SPMD_BF16, SPMD_BAND), "not defined for dtype bfloat16");
    EXPECT_INVALID(spmd_all_reduce(g, NULL, f, 8, SPMD_F32, SPMD_SUM), "sendbuf is NULL");
    EXPECT_INVALID(spmd_all_reduce(g, f, NULL, 8, SPMD_F32, SPMD_SUM), "recvbuf is NULL");
    EXPECT_INVALID(spmd_broadcast(g, NULL, 3, SPMD_I32, 0), "buf is NULL");
    EXPECT_INVALID(spmd_broadcast(g, iv, 3, SPMD_I32, w), "root");
    EXPECT_INVALID(spmd_reduce(g, f, f, 8, SPMD_F32, SPMD_SUM, -1), "root -1 is out of range");
    EXPECT_INVALID(spmd_gather(g, f, out, 1, SPMD_F32, w + 3), "out of range");
    EXPECT_INVALID(spmd_scatter(g, f, out, 1, SPMD_F32, -2), "out of range");
    EXPECT_INVALID(spmd_all_reduce(g, f, f, SIZE_MAX / 2, SPMD_F64, SPMD_SUM), "overflows");
    EXPECT_INVALID(spmd_all_gather(g, f, out, SIZE_MAX / 3, SPMD_F32), "overflows");
    EXPECT_INVALID(spmd_all_to_all(g, f, out, (size_t)PTRDIFF_MAX / 2, SPMD_I32), "overflows");
    if (w > 1) /* fits one block, not w of them */
        EXPECT_INVALID(spmd_reduce_scatter(g, f, out, (size_t)PTRDIFF_MAX / 2 + 1, SPMD_I8, SPMD_SUM), "overflows");
    EXPECT_INVALID(spmd_all_gather_list(g, f, NULL, 1, SPMD_F32), "recvbufs");
    EXPECT_INVALID(spmd_all_to_all_v(g, f, NULL, NULL, out, NULL, NULL, SPMD_F32), "sendcounts is NULL");
    EXPECT_INVALID(spmd_all_reduce_async(g, f, f, 8, SPMD_F32, SPMD_SUM, NULL, NULL), "work handle");
    spmd_coll_opts bogus = {"quantum"}, other = {"bruck"}, longname = {"an_algorithm_name_longer_than_32_chars"};
    EXPECT_INVALID(spmd_all_reduce_async(g, f, f, 8, SPMD_F32, SPMD_SUM, &bogus, &wk),
                   "unknown algorithm 'quantum'; valid choices: oneshot, cma, shm, hier, rd, rhd, ring, naive, butterfly");
    EXPECT_INVALID(spmd_all_reduce_async(g, f, f, 8, SPMD_F32, SPMD_SUM, &other, &wk), "another collective");
    EXPECT_INVALID(spmd_broadcast_async(g, f, 8, SPMD_F32, 0, &longname, &wk), "too long");
    /* environment override, checked when the collective runs (same on every rank) */
    setenv("SPMD_ALGO_ALL_REDUCE", "warp", 1);
    EXPECT_INVALID(spmd_all_reduce(g, f, f, 8, SPMD_F32, SPMD_SUM), "SPMD_ALGO_ALL_REDUCE");
    setenv("SPMD_ALGO_ALL_REDUCE", "tree", 1);
    EXPECT_INVALID(spmd_all_reduce(g, f, f, 8, SPMD_F32, SPMD_SUM), "valid choices");
    unsetenv("SPMD_ALGO_ALL_REDUCE");
    setenv("SPMD_ALGO_BROADCAST", "ring", 1);
    {
        spmd_status st = spmd_broadcast_async(g, iv, 8, SPMD_I32, 0, NULL, &wk);
        RREQUIRE(st == SPMD_OK);
        RREQUIRE(spmd_work_wait(wk, -1) == SPMD_ERR_INVALID);
        RREQUIRE(strstr(spmd_work_errmsg(wk), "broadcast: unknown algorithm 'ring'") != NULL);
        spmd_work_free(wk);
    }
    unsetenv("SPMD_ALGO_BROADCAST");
    /* count 0 with NULL buffers is fine */
    RREQUIRE(spmd_all_reduce(g, NULL, NULL, 0, SPMD_F32, SPMD_SUM) == SPMD_OK);
    RREQUIRE(spmd_all_gather(g, NULL, NULL, 0, SPMD_F32) == SPMD_OK);
    /* still fully usable */
    for (int i = 0; i < 8; i++) f[i] = (float)(rank + i);
    RREQUIRE(spmd_all_reduce(g, f, f, 8, SPMD_F32, SPMD_SUM) == SPMD_OK);
    for (int i = 0; i < 8; i++) RREQUIRE(f[i] == (float)(w * (w - 1) / 2 + w * i));
    spmd_group_destroy(g);
    return 0;
}

typedef enum { MM_COUNT, MM_DTYPE, MM_OP, MM_ROOT, MM_KIND, MM_COUNT_ZERO, MM_GATHER_COUNT, MM_A2AV } mm_kind;
static const char *MM_NAMES[] = {"count", "dtype", "op", "root", "kind", "count zero", "gather count", "all_to_all_v"};

static int mismatch(int rank, int w, void *arg) {
    const mm_kind kind = *(const mm_kind *)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    const int odd = rank == w - 1; /* the rank that disagrees */
    double buf[4096] = {0}, out[4096 * 8];
    spmd_status st = SPMD_OK;
    const int64_t t0 = spmd__now_ms();
    switch (kind) {
    case MM_COUNT: st = spmd_all_reduce(g, buf, buf, odd ? 1500 : 1400, SPMD_F64, SPMD_SUM); break;
    case MM_COUNT_ZERO: st = spmd_all_reduce(g, buf, buf, odd ? 0 : 100, SPMD_F64, SPMD_SUM); break;
    case MM_DTYPE: st = spmd_all_reduce(g, buf, buf, 64, odd ? SPMD_F32 : SPMD_F64, SPMD_SUM); break;
    case MM_OP: st = spmd_all_reduce(g, buf, buf, 64, SPMD_F64, odd ? SPMD_MAX : SPMD_SUM); break;
    case MM_ROOT: st = spmd_broadcast(g, buf, 64, SPMD_F64, odd ? 1 : 0); break;
    case MM_KIND:
        st = odd ? spmd_broadcast(g, buf, 64, SPMD_F64, 0) : spmd_all_reduce(g, buf, buf, 64, SPMD_F64, SPMD_SUM);
        break;
    case MM_GATHER_COUNT: st = spmd_all_gather(g, buf, out, odd ? 9 : 8, SPMD_F64); break;
    case MM_A2AV: {
        size_t sc[8], sd[8], rc[8], rd[8];
        for (int i = 0; i < w; i++) {
            sc[i] = rc[i] = 3;
            sd[i] = rd[i] = (size_t)i * 4;
        }
        if (odd) sc[0] = 4; /* rank 0 expects 3 from us */
        st = spmd_all_to_all_v(g, buf, sc, sd, out, rc, rd, SPMD_F64);
        break;
    }
    }
    /* Uneven all_to_all: only a receiver can tell its sender sent the wrong
     * count, and the sender may be done by then: it learns it at its next
     * collective.  Every other disagreement fails the call itself. */
    if (kind == MM_A2AV && st == SPMD_OK) st = spmd_barrier(g);
    const int64_t took = spmd__now_ms() - t0;
    if (st == SPMD_OK) {
        fprintf(stderr, "rank %d: mismatch '%s' went unnoticed\n", rank, MM_NAMES[kind]);
        spmd_group_destroy(g);
        return 1;
    }
    if (took > 30000) fprintf(stderr, "rank %d: mismatch '%s' took %lld ms to notice\n", rank, MM_NAMES[kind], (long long)took);
    RREQUIRE(took < 30000); /* found by the transfer headers, not by the 40 s deadline */
    RREQUIRE(st == SPMD_ERR_MISMATCH);
    if (kind == MM_ROOT) {
        RREQUIRE(strstr(spmd_group_errmsg(g), "root") != NULL);
        RREQUIRE(spmd_barrier(g) == SPMD_OK); /* found before anything moved: still usable */
    } else {
        RREQUIRE(spmd_barrier(g) != SPMD_OK); /* the group is broken from now on */
    }
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int worlds[16], nw = 0;
    for (int i = 1; i < argc && nw < 16; i++) worlds[nw++] = atoi(argv[i]);
    /* a deadline far above what a loaded machine can delay the headers by, so
     * "found by the headers" and "found by the deadline" stay apart */
    setenv("SPMD_TIMEOUT", "40", 0);
    if (nw == 0) {
        static const int dflt[] = {2, 3, 5};
        for (int i = 0; i < 3; i++) worlds[nw++] = dflt[i];
    }
    for (int i = 0; i < nw; i++) {
        CHECK_MSG(run_world(worlds[i], bad_args, NULL, 60) == 0, "bad args, world %d", worlds[i]);
        for (int k = 0; k <= MM_A2AV; k++) {
            mm_kind kind = (mm_kind)k;
            CHECK_MSG(run_world(worlds[i], mismatch, &kind, 120) == 0, "mismatch %s, world %d", MM_NAMES[k], worlds[i]);
        }
    }
    /* world 1: argument checks still apply */
    CHECK_MSG(run_world(1, bad_args, NULL, 60) == 0, "bad args, world 1");
    TEST_MAIN_END();
}
