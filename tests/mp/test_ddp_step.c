/* test_ddp_step.c — the reducer's sharded optimizer step (spmd_ddp_alloc_step)
 * gives the bits of the plain step, at worlds 2-4, for SGD with momentum,
 * SGD without state and Adam.
 *
 * Every rank runs two reducers over the same synthetic gradients: one with
 * the sharded step, one that averages and leaves the step to the caller
 * (spmd_optim_step).  After every step the parameters must be equal bit for
 * bit, and after spmd_ddp_gather_state the optimizer state too; parameters
 * are also compared across ranks.  The schedules cover what moves a state
 * slice to another rank or hands the step back to the caller:
 *   rebuild    the first step's ready order differs from backward order, so
 *              the rebuilt buckets cut other slices (the state must be
 *              gathered before the new owners step it)
 *   scramble   the rebuilt buckets are not contiguous, so steps after the
 *              first are not sharded: the caller steps a whole state
 *   hook       a comm hook after two sharded steps: the same, mid-run
 *   no_sync    two accumulating steps between sharded ones, the second
 *              with a local step of the caller's (on the whole state)
 * At world 1, and with SPMD_SHM=0, nothing is shared and stepped() stays 0. */
#include <math.h>
#include "harness.h"
#include "mpi_job.h"
#include "spmd/nn.h"
#include "spmd/spmd.h"

#define RREQ(cond)                                                                          \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "rank %d: %s:%d: failed: %s [ddp: %s]\n", rank, __FILE__, __LINE__, \
                    #cond, spmd_ddp_errmsg(sh->d));                                         \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

enum { NP = 6 };
static const size_t COUNTS[NP] = {300, 7, 1000, 1, 513, 4096};
static size_t total(void) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += COUNTS[i];
    return n;
}

enum { SCHED_REBUILD, SCHED_SCRAMBLE, SCHED_HOOK, SCHED_NO_SYNC };
static const char *const SCHED_NAMES[] = {"rebuild", "scramble", "hook", "no_sync"};

typedef struct {
    spmd_ddp *d;
    spmd_optim *o;
    float *params, *grads;
    size_t off[NP];
} replica;

static void step_fn(void *ctx, size_t offset, size_t count, const float *avg) {
    replica *r = ctx;
    spmd_optim_update(r->o, r->params, avg, offset, count);
}

static spmd_optim_opts optim_opts(int kind) {
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    if (kind == 1) oo.momentum = 0.9f, oo.weight_decay = 1e-3f, oo.lr = 0.05f;
    if (kind == 2) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    return oo;
}

/* kind 0: SGD without momentum (no state), 1: SGD momentum + weight decay, 2: Adam. */
static spmd_status replica_make(spmd_group *g, replica *r, int kind, int sharded) {
    memset(r, 0, sizeof *r);
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.first_bucket_bytes = 64;   /* many buckets, several slices each */
    o.bucket_cap_bytes = 4096;
    spmd_optim_opts oo = optim_opts(kind);
    size_t n = total();
    spmd_status st = spmd_ddp_create(g, &o, &r->d);
    if (!st) st = spmd_optim_create(&oo, n, &r->o);
    if (!st) st = spmd_ddp_alloc_grads(r->d, n, &r->grads);
    float *state = NULL;
    if (!st && sharded)
        st = spmd_ddp_alloc_step(r->d, (size_t)spmd_optim_state_arrays(r->o), step_fn, r, &r->params, &state);
    if (st) return st;
    if (!sharded && !(r->params = malloc(sizeof(float) * n))) return SPMD_ERR_NOMEM;
    if (state) spmd_optim_use_state_memory(r->o, state);
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        r->off[i] = off;
        for (size_t k = 0; k < COUNTS[i]; k++) r->params[off + k] = sinf((float)(off + k)) * 0.5f;
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        if ((st = spmd_ddp_add_param(r->d, name, r->params + off, r->grads + off, COUNTS[i]))) return st;
        off += COUNTS[i];
    }
    return spmd_ddp_finalize(r->d);
}

static void replica_free(replica *r, int sharded) {
    if (!sharded) free(r->params);
    spmd_ddp_free(r->d);
    spmd_optim_free(r->o);
}

static float gval(int rank, int s, size_t k) { return cosf((float)k * 0.37f + (float)s * 1.3f + (float)rank * 0.71f) * 0.1f; }

static spmd_status hook_all_reduce(void *state, spmd_group *g, float *grads, size_t count, spmd_work **w) {
    (void)state;
    return spmd_all_reduce_async(g, grads, grads, count, SPMD_F32, SPMD_SUM, NULL, w);
}

/* One step of replica r: gradients in the given ready order, then the step
 * (the reducer's or the caller's).  *stepped: what spmd_ddp_stepped said. */
static int replica_step(replica *r, int rank, int s, const int *order, int accumulate, int *stepped) {
    replica *sh = r; /* for RREQ */
    RREQ(spmd_ddp_prepare(r->d) == SPMD_OK);
    for (int q = 0; q < NP; q++) {
        int i = order[q];
        float *gr = r->grads + r->off[i];
        for (size_t k = 0; k < COUNTS[i]; k++) gr[k] = (accumulate ? gr[k] : 0.0f) + gval(rank, s, r->off[i] + k);
        RREQ(spmd_ddp_grad_ready(r->d, i) == SPMD_OK);
    }
    RREQ(spmd_ddp_finish(r->d) == SPMD_OK);
    *stepped = spmd_ddp_stepped(r->d);
    return 0;
}

static int sched_kind;

static int run(spmd_group *g, int rank, int world, int kind, int sched) {
    replica a, b, *sh = &a;
    RREQ(replica_make(g, &a, kind, 1) == SPMD_OK);
    RREQ(replica_make(g, &b, kind, 0) == SPMD_OK);
    const int shared = world > 1 && !getenv("SPMD_SHM");
    RREQ(spmd_ddp_step_shared(a.d) == shared && !spmd_ddp_step_shared(b.d));
    static const int backward[NP] = {5, 4, 3, 2, 1, 0}, forward[NP] = {0, 1, 2, 3, 4, 5},
                     scrambled[NP] = {3, 0, 5, 1, 4, 2};
    const int *first = sched == SCHED_SCRAMBLE ? scrambled : sched == SCHED_REBUILD ? forward : backward;
    const size_t n = total();
    int sharded_steps = 0;
    for (int s = 0; s < 6; s++) {
        const int *order = s == 0 ? first : backward;
        int no_sync = sched == SCHED_NO_SYNC && (s == 2 || s == 3);
        int accumulate = sched == SCHED_NO_SYNC && (s == 3 || s == 4);   /* after a no_sync step */
        if (sched == SCHED_HOOK && s == 2) {
            RREQ(spmd_ddp_set_comm_hook(a.d, hook_all_reduce, NULL) == SPMD_OK);
            RREQ(spmd_ddp_set_comm_hook(b.d, hook_all_reduce, NULL) == SPMD_OK);
        }
        spmd_ddp_set_no_sync(a.d, no_sync);
        spmd_ddp_set_no_sync(b.d, no_sync);
        int sa = 0, sb = 0;
        /* no_sync steps: the same gradients on every rank, so that a local
         * step keeps the replicas equal */
        int grank = no_sync ? 0 : rank;
        if (replica_step(&a, grank, s, order, accumulate, &sa) || replica_step(&b, grank, s, order, accumulate, &sb))
            return 1;
        RREQ(!sb);
        if (no_sync) {
            RREQ(!sa);
            /* a local step in the middle of accumulation (no communication):
             * the caller's, on a whole state */
            if (s == 3) {
                spmd_optim_step(a.o, a.params, a.grads);
                spmd_optim_step(b.o, b.params, b.grads);
                RREQ(memcmp(a.params, b.params, sizeof(float) * n) == 0);
            }
            continue;
        }
        if (sa) {
            spmd_optim_step_done(a.o);
            sharded_steps++;
        } else {
            spmd_optim_step(a.o, a.params, a.grads);
        }
        if (sched == SCHED_HOOK && s >= 2) RREQ(!sa);
        if (sched == SCHED_SCRAMBLE && s >= 1) RREQ(!sa);
        spmd_optim_step(b.o, b.params, b.grads);
        RREQ(memcmp(a.params, b.params, sizeof(float) * n) == 0);
    }
    RREQ(sharded_steps == (shared ? (sched == SCHED_REBUILD ? 6 : sched == SCHED_NO_SYNC ? 4 : sched == SCHED_HOOK ? 2 : 1) : 0));
    /* the state, made whole, is the plain step's */
    RREQ(spmd_ddp_gather_state(a.d) == SPMD_OK);
    size_t na, nb;
    float *st_a = spmd_optim_state(a.o, &na), *st_b = spmd_optim_state(b.o, &nb);
    RREQ(na == nb && (na == 0 || memcmp(st_a, st_b, sizeof(float) * na) == 0));
    RREQ(spmd_optim_steps(a.o) == spmd_optim_steps(b.o));
    /* and every rank holds the same parameters */
    float *mx = malloc(sizeof(float) * n), *mn = malloc(sizeof(float) * n);
    RREQ(mx && mn);
    RREQ(spmd_all_reduce(g, a.params, mx, n, SPMD_F32, SPMD_MAX) == SPMD_OK);
    RREQ(spmd_all_reduce(g, a.params, mn, n, SPMD_F32, SPMD_MIN) == SPMD_OK);
    RREQ(memcmp(mx, mn, sizeof(float) * n) == 0);
    free(mx);
    free(mn);
    replica_free(&a, 1);
    replica_free(&b, 0);
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "rank %d: init: %s\n", rank, err);
        return 1;
    }
    int rc = 0;
    for (int kind = 0; kind < 3 && !rc; kind++) rc |= run(g, rank, world, kind, sched_kind);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    unsetenv("SPMD_TRANSPORT"); /* this test chooses the paths it checks itself */
    setenv("SPMD_TIMEOUT", "30", 1);
    char report[512];
    for (int w = 1; w <= 4; w++)
        for (sched_kind = 0; sched_kind < 4; sched_kind++) {
            if (w == 1 && sched_kind > 0) continue;
            spmd_status st = test_spawn(w, body, NULL, 120000, report, sizeof report);
            CHECK_MSG(st == SPMD_OK, "world %d, %s: %s", w, SCHED_NAMES[sched_kind], report);
            printf("world %d, %-8s: sgd, sgd+momentum, adam %s\n", w, SCHED_NAMES[sched_kind],
                   st == SPMD_OK ? "equal" : "FAILED");
        }
    /* sharing refused: the caller steps every time, same results */
    setenv("SPMD_SHM", "0", 1);
    sched_kind = SCHED_REBUILD;
    spmd_status st = test_spawn(2, body, NULL, 120000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "SPMD_SHM=0: %s", report);
    TEST_MAIN_END();
}
