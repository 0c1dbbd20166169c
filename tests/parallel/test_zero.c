/* test_zero.c — ZeRO-1 (spmd_zero) gives the plain optimizer's parameters
 * bit for bit, at worlds 1-4 (4 with n not a multiple of the world, so the
 * last shards are short or empty), for SGD with momentum, Adam and AdamW:
 *   plain   gradients averaged by the ZeRO step itself (no DDP)
 *   ddp     gradients averaged by spmd_ddp, the step told not to
 * Also: the state per rank is 1/world of the plain one (+ at most one shard
 * of padding), consolidate_state_dict on rank 1 equals the plain optimizer's
 * state, and a ZeRO optimizer loaded from it continues bit-identically. */
#include <math.h>
#include "harness.h"
#include "spmd/ddp.h"
#include "spmd/parallel.h"

#define RREQ(cond)                                                                           \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d: %s:%d: failed: %s [zero: %s]\n", rank, __FILE__, __LINE__, \
                    #cond, z ? spmd_zero_errmsg(z) : "");                                    \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

static const size_t N = 1001;

static float gval(int rank, int step, size_t i) {
    return (float)(((i * 7 + (size_t)step * 13 + (size_t)rank * 5) % 23)) / 23.0f - 0.4f;
}

static spmd_optim_opts opts_of(int kind) {
    spmd_optim_opts o = SPMD_OPTIM_OPTS_SGD;
    if (kind == 0) o.momentum = 0.9f, o.weight_decay = 1e-3f, o.lr = 0.05f;
    if (kind == 1) o = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    if (kind == 2) o = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAMW;
    return o;
}

static int run(spmd_group *g, int rank, int world, int kind, int use_ddp) {
    spmd_optim_opts oo = opts_of(kind);
    spmd_zero *z = NULL;
    char err[200];
    RREQ(spmd_zero_create(g, &oo, N, !use_ddp, &z, err, sizeof err) == SPMD_OK);
    spmd_optim *plain = NULL;
    RREQ(spmd_optim_create(&oo, N, &plain) == SPMD_OK);
    float *p = malloc(sizeof(float) * N), *q = malloc(sizeof(float) * N);
    float *gz = malloc(sizeof(float) * N), *gp = malloc(sizeof(float) * N);
    RREQ(p && q && gz && gp);
    for (size_t i = 0; i < N; i++) p[i] = q[i] = (float)i / (float)N - 0.5f;
    spmd_ddp *d = NULL;
    if (use_ddp) {
        spmd_ddp_opts dopt = SPMD_DDP_OPTS_DEFAULT;
        RREQ(spmd_ddp_create(g, &dopt, &d) == SPMD_OK);
        RREQ(spmd_ddp_add_param(d, "w", p, gz, N) == SPMD_OK);
        RREQ(spmd_ddp_finalize(d) == SPMD_OK);
    }
    for (int s = 0; s < 4; s++) {
        for (size_t i = 0; i < N; i++) gz[i] = gp[i] = gval(rank, s, i);
        if (use_ddp) {
            RREQ(spmd_ddp_prepare(d) == SPMD_OK);
            RREQ(spmd_ddp_grad_ready(d, 0) == SPMD_OK);
            RREQ(spmd_ddp_finish(d) == SPMD_OK);
            memcpy(gp, gz, sizeof(float) * N);   /* the plain step gets DDP's average */
        } else if (world > 1) {
            RREQ(spmd_all_reduce(g, gp, gp, N, SPMD_F32, SPMD_SUM) == SPMD_OK);
            for (size_t i = 0; i < N; i++) gp[i] *= 1.0f / (float)world;
        }
        RREQ(spmd_zero_step(z, p, gz) == SPMD_OK);
        spmd_optim_step(plain, q, gp);
        RREQ(memcmp(p, q, sizeof(float) * N) == 0);
    }
    /* memory: about 1/world of the plain state */
    size_t local = spmd_zero_local_state_floats(z), full = spmd_zero_full_state_floats(z);
    size_t arrays = (size_t)spmd_optim_state_arrays(plain), shard = (N + world - 1) / world;
    RREQ(full == arrays * N && local <= arrays * shard);
    size_t plain_count;
    float *ps = spmd_optim_state(plain, &plain_count);
    RREQ(plain_count == full);
    /* consolidate on the last rank, then every rank resumes from it */
    int to = world - 1;
    float *st = calloc(full, sizeof(float));
    int64_t steps = -1;
    RREQ(st && spmd_zero_consolidate_state_dict(z, to, rank == to ? st : NULL, &steps) == SPMD_OK);
    RREQ(steps == 4);
    if (rank == to) RREQ(memcmp(st, ps, sizeof(float) * full) == 0);
    if (world > 1) RREQ(spmd_broadcast(g, st, full, SPMD_F32, to) == SPMD_OK);
    spmd_zero *z2 = NULL;
    RREQ(spmd_zero_create(g, &oo, N, 1, &z2, err, sizeof err) == SPMD_OK);
    RREQ(spmd_zero_load_state_dict(z2, st, steps) == SPMD_OK);
    for (size_t i = 0; i < N; i++) gz[i] = gp[i] = gval(rank, 9, i);
    if (world > 1) {   /* z2 averages them itself */
        RREQ(spmd_all_reduce(g, gp, gp, N, SPMD_F32, SPMD_SUM) == SPMD_OK);
        for (size_t i = 0; i < N; i++) gp[i] *= 1.0f / (float)world;
    }
    RREQ(spmd_zero_step(z2, p, gz) == SPMD_OK);
    spmd_optim_step(plain, q, gp);
    RREQ(memcmp(p, q, sizeof(float) * N) == 0);
    /* bad input: consolidating to a rank outside the group */
    RREQ(spmd_zero_consolidate_state_dict(z2, world, st, NULL) == SPMD_ERR_INVALID);
    RREQ(strstr(spmd_zero_errmsg(z2), "rank"));
    if (rank == 0 && kind == 1 && !use_ddp)
        printf("world %d adam: state %zu floats per rank, %zu plain (%.3f)\n", world, local, full,
               (double)local / (double)full);
    spmd_zero_free(z2);
    spmd_ddp_free(d);
    spmd_zero_free(z);
    spmd_optim_free(plain);
    free(st); free(p); free(q); free(gz); free(gp);
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
    for (int kind = 0; kind < 3 && !rc; kind++)
        for (int ddp = 0; ddp < 2 && !rc; ddp++) rc |= run(g, rank, world, kind, ddp);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60", 1);
    char report[512];
    for (int w = 1; w <= 4; w++) {
        spmd_status st = spmd_spawn_timeout(w, body, NULL, 120000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", w, report);
    }
    /* bad input: no parameters, invalid options */
    spmd_zero *z = NULL;
    char err[200] = "";
    spmd_optim_opts o = SPMD_OPTIM_OPTS_SGD;
    CHECK(spmd_zero_create(NULL, &o, 0, 0, &z, err, sizeof err) == SPMD_ERR_INVALID && !z);
    CHECK(strstr(err, "n = 0"));
    o.lr = -1.0f;
    CHECK(spmd_zero_create(NULL, &o, 10, 0, &z, err, sizeof err) == SPMD_ERR_INVALID && !z);
    CHECK(strstr(err, "lr -1"));
    TEST_MAIN_END();
}
