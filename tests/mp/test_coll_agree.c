/* Ranks that disagree on what a collective runs (issue 13, point 7).
 *
 * For every collective and every ordered pair of its algorithms (A, B), the
 * last rank chooses B through SPMD_ALGO_<COLLECTIVE> while the others choose
 * A; every rank must end the call with SPMD_ERR_MISMATCH and a message
 * naming both (or, when one of them cannot run on this mesh, naming the one
 * that can and saying the other rank could not choose) — never a wrong
 * result, a one-sided success or a hang.  When neither can run here, every
 * rank gets SPMD_ERR_INVALID.  The same for a per-call option
 * (spmd_coll_opts.algo), for SPMD_SEGMENT_BYTES, and for roots (the last
 * rank, or the upper half of the ranks, passes another root).
 *
 * After the call: a disagreement the agreement step found (rooted
 * collectives, an algorithm that could not be chosen everywhere) leaves the
 * group usable, checked with a barrier and an exact all_reduce; any other
 * fails the group on every rank.  Each case runs on a fresh subgroup.
 *
 * Settings that need no agreement (cross-memory attach on or off, its
 * threshold, the spin budget) differ across ranks and the results stay
 * exact.
 *
 * Usage: test_coll_agree [world ...] (default 2 4), under SPMD_TRANSPORT if
 * set, else under tcp and then the default (shared memory on one host). */
#include <stdint.h>
#include "coll/algos.h"
#include "coll_common.h"
#include "common/common.h"

/* A disagreement must be found by the agreement step or the transfer
 * headers, not by the deadline: a call that hung would take SPMD_TIMEOUT
 * (run_world's 120 s), while one found at once takes a fraction of a second
 * on a quiet machine and stays far below this on a loaded one. */
#define CALL_BUDGET_MS 60000

static const spmd__coll_kind KINDS[] = {SPMD__C_BARRIER,     SPMD__C_BROADCAST,      SPMD__C_REDUCE,
                                        SPMD__C_ALL_REDUCE,  SPMD__C_GATHER,         SPMD__C_ALL_GATHER,
                                        SPMD__C_SCATTER,     SPMD__C_REDUCE_SCATTER, SPMD__C_ALL_TO_ALL};
#define NKINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

static int rooted(spmd__coll_kind k) {
    return k == SPMD__C_BROADCAST || k == SPMD__C_REDUCE || k == SPMD__C_GATHER || k == SPMD__C_SCATTER;
}

/* The environment variable choosing k's algorithm. */
static void algo_var(spmd__coll_kind k, char *out, size_t len) {
    const char *n = spmd__coll_kind_name(k);
    size_t i = (size_t)snprintf(out, len, "SPMD_ALGO_");
    for (; *n && i + 1 < len; n++) out[i++] = (char)(*n >= 'a' && *n <= 'z' ? *n - 32 : *n);
    out[i] = 0;
}

/* Can algorithm `name` of k run on g's mesh?  (The shared-slot ones need
 * every pair on shared memory; hier needs several hosts.) */
static int runs_here(spmd_group *g, const char *name) {
    if (!strcmp(name, "hier")) return 0;
    return algo_usable(g, name);
}

/* Buffers big enough for every call below at world <= 4. */
#define COUNT 3000 /* floats: several 256-byte segments and 4 KiB slot chunks */
typedef struct {
    float in[COUNT * 4], out[COUNT * 4];
} bufs;

/* One call of collective k with the given root; opts (may be NULL) through
 * the async form; its message in msg. */
static spmd_status call(spmd_group *g, spmd__coll_kind k, int root, const spmd_coll_opts *o, bufs *b, char *msg,
                        size_t msglen) {
    const size_t n = COUNT;
    spmd_work *w = NULL;
    spmd_status st;
    switch (k) {
    case SPMD__C_BARRIER: st = spmd_barrier_async(g, o, &w); break;
    case SPMD__C_BROADCAST: st = spmd_broadcast_async(g, b->out, n, SPMD_F32, root, o, &w); break;
    case SPMD__C_REDUCE: st = spmd_reduce_async(g, b->in, b->out, n, SPMD_F32, SPMD_SUM, root, o, &w); break;
    case SPMD__C_ALL_REDUCE: st = spmd_all_reduce_async(g, b->in, b->out, n, SPMD_F32, SPMD_SUM, o, &w); break;
    case SPMD__C_GATHER: st = spmd_gather_async(g, b->in, b->out, n / 4, SPMD_F32, root, o, &w); break;
    case SPMD__C_ALL_GATHER: st = spmd_all_gather_async(g, b->in, b->out, n / 4, SPMD_F32, o, &w); break;
    case SPMD__C_SCATTER: st = spmd_scatter_async(g, b->in, b->out, n / 4, SPMD_F32, root, o, &w); break;
    case SPMD__C_REDUCE_SCATTER:
        st = spmd_reduce_scatter_async(g, b->in, b->out, n / 4, SPMD_F32, SPMD_SUM, o, &w);
        break;
    case SPMD__C_ALL_TO_ALL: st = spmd_all_to_all_async(g, b->in, b->out, n / 4, SPMD_F32, o, &w); break;
    default: return SPMD_ERR_INVALID;
    }
    if (st) {
        snprintf(msg, msglen, "%s", spmd_group_errmsg(g));
        return st;
    }
    st = spmd_work_wait(w, -1);
    snprintf(msg, msglen, "%s", spmd_work_errmsg(w));
    spmd_work_free(w);
    return st;
}

#define CASE_FAIL(...)                                                                      \
    do {                                                                                    \
        fprintf(stderr, "rank %d (%s, world %d): ", rank, spmd_group_backend(sub), w);      \
        fprintf(stderr, __VA_ARGS__);                                                       \
        fputc('\n', stderr);                                                                \
        spmd_group_destroy(sub);                                                            \
        return 1;                                                                           \
    } while (0)

/* The group still works: a barrier and an exact all_reduce. */
static int usable(spmd_group *g) {
    if (spmd_barrier(g)) return 0;
    float v[5], want = 0;
    for (int r = 0; r < spmd_group_size(g); r++) want += (float)(r + 1);
    for (int i = 0; i < 5; i++) v[i] = (float)(spmd_group_rank(g) + 1);
    if (spmd_all_reduce(g, v, v, 5, SPMD_F32, SPMD_SUM)) return 0;
    for (int i = 0; i < 5; i++)
        if (v[i] != want) return 0;
    return 1;
}

typedef struct {
    const char *want_a, *want_b; /* both must appear in the message (NULL: skip) */
    int invalid_everywhere;      /* expect SPMD_ERR_INVALID on every rank */
    int keeps_group;             /* 1: the group must stay usable; 0: it must be broken; 2: the
                                    setting still differs: the same call fails alike again */
} expect;

/* Run one disagreeing call on a fresh subgroup and check the outcome.
 * setup: segment size for this rank's subgroup (0: keep). */
static int one_case(spmd_group *g, int rank, int w, spmd__coll_kind k, int root, const spmd_coll_opts *o,
                    const char *var, const char *val, size_t seg, const expect *e, const char *what) {
    char saved[32] = "";
    const char *cur = getenv("SPMD_SEGMENT_BYTES");
    if (cur) snprintf(saved, sizeof saved, "%s", cur);
    if (seg) {
        char v[32];
        snprintf(v, sizeof v, "%zu", seg);
        setenv("SPMD_SEGMENT_BYTES", v, 1);
    }
    int all[64];
    for (int i = 0; i < w; i++) all[i] = i;
    spmd_group *sub = NULL;
    spmd_status st = spmd_group_new_subgroup(g, all, w, &sub);
    if (seg) setenv("SPMD_SEGMENT_BYTES", saved, 1);
    if (st || !sub) {
        fprintf(stderr, "rank %d: subgroup for %s: %s\n", rank, what, spmd_group_errmsg(g));
        return 1;
    }
    bufs *b = calloc(1, sizeof *b);
    if (!b) CASE_FAIL("out of memory");
    for (size_t i = 0; i < COUNT * 4; i++) b->in[i] = (float)(rank + 1);
    const int64_t t0 = spmd__now_ms();
    char msg[SPMD__ERRLEN] = "";
    if (var) setenv(var, val, 1);
    st = call(sub, k, root, o, b, msg, sizeof msg);
    const int64_t took = spmd__now_ms() - t0;
    free(b);
    if (took > CALL_BUDGET_MS) CASE_FAIL("%s: took %lld ms (%s)", what, (long long)took, msg);
    if (e->invalid_everywhere) {
        if (st != SPMD_ERR_INVALID) CASE_FAIL("%s: %s, wanted SPMD_ERR_INVALID (%s)", what, spmd_status_name(st), msg);
    } else if (st != SPMD_ERR_MISMATCH) {
        CASE_FAIL("%s: %s, wanted SPMD_ERR_MISMATCH (%s)", what, spmd_status_name(st), msg);
    }
    if ((e->want_a && !strstr(msg, e->want_a)) || (e->want_b && !strstr(msg, e->want_b)))
        CASE_FAIL("%s: the message does not name %s and %s: %s", what, e->want_a, e->want_b ? e->want_b : "-", msg);
    if (e->keeps_group == 2) {
        b = calloc(1, sizeof *b);
        if (!b) CASE_FAIL("out of memory");
        st = call(sub, k, root, o, b, msg, sizeof msg);
        free(b);
        if (var) unsetenv(var);
        if (st != SPMD_ERR_MISMATCH) CASE_FAIL("%s, again: %s (%s)", what, spmd_status_name(st), msg);
    } else {
        if (var) unsetenv(var);
        int ok = usable(sub);
        if (e->keeps_group && !ok) CASE_FAIL("%s: the group is no longer usable: %s", what, spmd_group_errmsg(sub));
        if (!e->keeps_group && ok) CASE_FAIL("%s: the group still works after a mismatch that moved data", what);
    }
    spmd_group_destroy(sub);
    return 0;
}

/* Every ordered pair of k's algorithms: the last rank runs B. */
static int algorithm_pairs(spmd_group *g, int rank, int w, spmd__coll_kind k) {
    char names[256], var[48];
    spmd__coll_algo_names(k, names, sizeof names);
    algo_var(k, var, sizeof var);
    char *list[16];
    int n = 0;
    for (char *t = strtok(names, ", "); t && n < 16; t = strtok(NULL, ", ")) list[n++] = t;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            const char *a = list[i], *bn = list[j], *mine = rank == w - 1 ? bn : a;
            const int ra = runs_here(g, a), rb = runs_here(g, bn);
            char qa[40], qb[40], what[160];
            snprintf(qa, sizeof qa, "'%s'", a);
            snprintf(qb, sizeof qb, "'%s'", bn);
            snprintf(what, sizeof what, "%s: %s everywhere but %s on rank %d", var, a, bn, w - 1);
            expect e = {ra ? qa : rb ? qb : "needs", rb && ra ? qb : NULL, !ra && !rb, 0};
            /* found by the agreement step, the group stays: rooted
             * collectives, and every rank failing alike */
            e.keeps_group = e.invalid_everywhere || rooted(k);
            if (one_case(g, rank, w, k, 0, NULL, var, mine, 0, &e, what)) return 1;
        }
    return 0;
}

static int roots(spmd_group *g, int rank, int w, spmd__coll_kind k) {
    char names[256], var[48];
    spmd__coll_algo_names(k, names, sizeof names);
    algo_var(k, var, sizeof var);
    for (char *t = strtok(names, ", "); t; t = strtok(NULL, ", ")) {
        if (!runs_here(g, t)) continue;
        for (int split = 0; split < (w > 2 ? 2 : 1); split++) {
            /* the last rank alone, or the upper half, passes another root */
            int other = split ? rank >= w / 2 : rank == w - 1;
            int root = other ? (split ? w / 2 : 1) : 0;
            char what[160];
            snprintf(what, sizeof what, "%s %s: root %d, and %d on %s", spmd__coll_kind_name(k), t, 0,
                     split ? w / 2 : 1, split ? "the upper half" : "the last rank");
            expect e = {"root", NULL, 0, 1};
            if (one_case(g, rank, w, k, root, NULL, var, t, 0, &e, what)) return 1;
        }
    }
    return 0;
}

static int disagree(int rank, int w, void *arg) {
    (void)arg;
    use_test_slots();
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    for (int i = 0; i < NKINDS; i++) {
        if (algorithm_pairs(g, rank, w, KINDS[i])) return 1;
        if (rooted(KINDS[i]) && roots(g, rank, w, KINDS[i])) return 1;
        /* the segment size: the last rank's subgroup pipelines in 512 bytes */
        expect e = {"SPMD_SEGMENT_BYTES", NULL, 0, rooted(KINDS[i]) ? 2 : 0};
        char what[96];
        snprintf(what, sizeof what, "%s: SPMD_SEGMENT_BYTES 256, 512 on rank %d", spmd__coll_kind_name(KINDS[i]), w - 1);
        if (one_case(g, rank, w, KINDS[i], 0, NULL, NULL, NULL, rank == w - 1 ? 512 : 0, &e, what)) return 1;
    }
    /* a per-call option rather than the environment */
    spmd_coll_opts o = {rank == w - 1 ? "rd" : "ring"};
    expect e = {"'rd'", "'ring'", 0, 0};
    if (one_case(g, rank, w, SPMD__C_ALL_REDUCE, 0, &o, NULL, NULL, 0, &e, "spmd_coll_opts.algo ring, rd on the last rank"))
        return 1;
    spmd_group_destroy(g);
    return 0;
}

/* Settings each pair settles by itself: results stay exact. */
static int harmless(int rank, int w, void *arg) {
    (void)arg;
    if (rank == w - 1) {
        setenv("SPMD_CMA", "0", 1);
        setenv("SPMD_SPIN_US", "0", 1);
    } else {
        setenv("SPMD_CMA_MIN_BYTES", "1", 1);
    }
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    enum { N = 1 << 16 };
    float *v = malloc(N * sizeof *v);
    RREQUIRE(v != NULL);
    const char *algos[] = {"ring", "rd", "rhd", "naive", "butterfly"};
    for (int a = 0; a < 5; a++) {
        spmd_coll_opts o = {algos[a]};
        spmd_work *wk = NULL;
        for (int i = 0; i < N; i++) v[i] = (float)(rank + i % 7);
        RREQUIRE(spmd_all_reduce_async(g, v, v, N, SPMD_F32, SPMD_SUM, &o, &wk) == SPMD_OK);
        spmd_status st = spmd_work_wait(wk, -1);
        if (st != SPMD_OK) {
            fprintf(stderr, "rank %d: all_reduce %s: %s: %s\n", rank, algos[a], spmd_status_name(st),
                    spmd_work_errmsg(wk));
            return 1;
        }
        spmd_work_free(wk);
        for (int i = 0; i < N; i++) RREQUIRE(v[i] == (float)(w * (w - 1) / 2 + w * (i % 7)));
    }
    free(v);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    const int defaults[] = {2, 4};
    run_worlds_transports(argc, argv, defaults, 2, "disagreements", disagree, NULL, 120);
    run_worlds_transports(argc, argv, defaults, 2, "per-pair settings", harmless, NULL, 240);
    TEST_MAIN_END();
}
