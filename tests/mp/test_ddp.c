/* The DDP reducer on synthetic gradients, world sizes 1-4: averages exact,
 * buckets overlapped or not, rebuilt after the first step, parameters and
 * buffers broadcast, shape mismatch, unused parameters, no_sync accumulation,
 * fp16/bf16 compression, uneven inputs (join) — each with private gradients
 * (buckets by all_reduce) and with the reducer's shared gradients
 * (spmd_ddp_alloc_grads: buckets summed in shared memory where the host allows,
 * mixed with all_reduce for buckets that are not contiguous there).  Then
 * shared memory's failures: a dead peer and a peer that never arrives give
 * errors, not hangs; reducers on two disjoint subgroups share within each;
 * one rank with SPMD_SHM=0 turns sharing off for all (SPMD_CMA=0 does not). */
#include <math.h>
#include <unistd.h>
#include "harness.h"
#include "mpi_job.h"
#include "spmd/spmd.h"

#define RREQ(cond)                                                                          \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "rank %d: %s:%d: failed: %s [ddp: %s] [group: %s]\n", rank,     \
                    __FILE__, __LINE__, #cond, d ? spmd_ddp_errmsg(d) : "", spmd_group_errmsg(g)); \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

/* Five parameters: three back to back in one allocation (as the training
 * stack keeps them), two on their own. */
enum { NP = 5 };
static const size_t COUNTS[NP] = {300, 7, 1000, 1, 513};

typedef struct {
    float *block, *gblock, *gown[NP];
    float *param[NP], *grad[NP];
    float *bufv;
} model_t;

static int shared_mode;   /* the cases run with spmd_ddp_alloc_grads */
static int off_rank = -1;   /* this rank starts with off_var=0 */
static const char *off_var = "SPMD_SHM";

static void model_init(model_t *m, float fill) {
    m->block = calloc(COUNTS[0] + COUNTS[1] + COUNTS[2], sizeof(float));
    m->gblock = calloc(COUNTS[0] + COUNTS[1] + COUNTS[2], sizeof(float));
    size_t off = 0;
    for (int i = 0; i < 3; i++) { m->param[i] = m->block + off; m->grad[i] = m->gblock + off; off += COUNTS[i]; }
    for (int i = 3; i < NP; i++) { m->param[i] = calloc(COUNTS[i], sizeof(float)); m->grad[i] = m->gown[i] = calloc(COUNTS[i], sizeof(float)); }
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < COUNTS[i]; k++) m->param[i][k] = fill + (float)k;
    m->bufv = calloc(4, sizeof(float));
    for (int k = 0; k < 4; k++) m->bufv[k] = fill;
}

static void model_free(model_t *m) {
    free(m->block);
    free(m->gblock);
    for (int i = 3; i < NP; i++) { free(m->param[i]); free(m->gown[i]); }
    free(m->bufv);
}

/* Register the parameters; in shared mode their gradients move into the
 * reducer's memory first: p0 p1 p2 back to back as before, then p4 before
 * p3, so the buckets holding p3 or p4 are not contiguous there and take the
 * all_reduce path while the others are summed in shared memory. */
static spmd_status add_params(spmd_ddp *d, model_t *m) {
    spmd_status st;
    if (shared_mode) {
        size_t total = 0;
        for (int i = 0; i < NP; i++) total += COUNTS[i];
        float *mem = NULL;
        if ((st = spmd_ddp_alloc_grads(d, total, &mem))) return st;
        static const int place[NP] = {0, 1, 2, 4, 3};
        size_t off = 0;
        for (int k = 0; k < NP; k++) {
            int i = place[k];
            memcpy(mem + off, m->grad[i], COUNTS[i] * sizeof(float));
            m->grad[i] = mem + off;
            off += COUNTS[i];
        }
    }
    char name[16];
    for (int i = 0; i < NP; i++) {
        snprintf(name, sizeof name, "p%d", i);
        if ((st = spmd_ddp_add_param(d, name, m->param[i], m->grad[i], COUNTS[i]))) return st;
    }
    return SPMD_OK;
}

/* Shared gradients are in use exactly when asked for and possible. */
static int sharing_as_expected(spmd_ddp *d, int world) {
    /* SPMD_SHM=0 on any rank turns sharing off; SPMD_CMA=0 does not */
    int want = shared_mode && world > 1 && !(off_rank >= 0 && strcmp(off_var, "SPMD_SHM") == 0);
    if (spmd_ddp_grads_shared(d) == want) return 1;
    fprintf(stderr, "grads shared: %d, expected %d\n", spmd_ddp_grads_shared(d), want);
    return 0;
}

static spmd_status make(spmd_group *g, model_t *m, const spmd_ddp_opts *o, spmd_ddp **out) {
    spmd_status st = spmd_ddp_create(g, o, out);
    if (st) return st;
    if ((st = add_params(*out, m))) return st;
    if ((st = spmd_ddp_add_buffer(*out, "bn.running_mean", m->bufv, 4))) return st;
    if ((st = spmd_ddp_finalize(*out))) return st;
    return sharing_as_expected(*out, spmd_group_size(g)) ? SPMD_OK : SPMD_ERR_MISMATCH;
}

/* Gradient value of rank r, step s, parameter i, element k: small integers,
 * so sums are exact and the mean is exact after the division by world. */
static int salt; /* differs between groups that must not mix */
static float gval(int r, int s, int i, size_t k) { return (float)((r + 1) * (s + 2) + i + (int)(k % 5) + salt); }

static float mean_of(int world, int s, int i, size_t k) {
    float sum = 0;
    for (int r = 0; r < world; r++) sum += gval(r, s, i, k);
    return sum / (float)world;
}

static int one_step(spmd_ddp *d, spmd_group *g, model_t *m, int rank, int s, int reverse_order) {
    RREQ(spmd_ddp_prepare(d) == SPMD_OK);
    for (int q = 0; q < NP; q++) {
        /* Most ranks produce gradients in backward order; odd ranks in a
         * different order, which must not matter. */
        int i = reverse_order ? NP - 1 - q : (q * 3) % NP;
        for (size_t k = 0; k < COUNTS[i]; k++) m->grad[i][k] = gval(rank, s, i, k);
        RREQ(spmd_ddp_grad_ready(d, i) == SPMD_OK);
    }
    RREQ(spmd_ddp_finish(d) == SPMD_OK);
    return 0;
}

static int check_mean(spmd_group *g, model_t *m, int rank, int world, int s, float tol) {
    spmd_ddp *d = NULL;
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < COUNTS[i]; k++) {
            float want = mean_of(world, s, i, k), got = m->grad[i][k];
            if (tol == 0) RREQ(got == want);
            else RREQ(fabsf(got - want) <= tol * fabsf(want) + 1e-6f);
        }
    return 0;
}

static int basic(spmd_group *g, int rank, int world, int overlap) {
    model_t m;
    model_init(&m, 10.0f * (float)rank);
    spmd_ddp *d = NULL;
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.first_bucket_bytes = 64;    /* several buckets even for this tiny model: */
    o.bucket_cap_bytes = 4096;    /* [p4] [p3 p2] [p1 p0]; shared, the middle one is not
                                     contiguous and goes by all_reduce */
    o.overlap = overlap;
    RREQ(make(g, &m, &o, &d) == SPMD_OK);
    RREQ(spmd_ddp_num_buckets(d) >= 3);
    /* finalize broadcast rank 0's parameters and buffers */
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < COUNTS[i]; k++) RREQ(m.param[i][k] == (float)k);
    RREQ(m.bufv[0] == 0.0f);
    for (int s = 0; s < 4; s++) {
        if (rank == 0) m.bufv[1] = (float)(100 + s); /* buffers follow rank 0 every step */
        if (one_step(d, g, &m, rank, s, rank % 2 == 0)) return 1;
        RREQ(m.bufv[1] == (float)(100 + s) || world == 1);
        if (check_mean(g, &m, rank, world, s, 0)) return 1;
    }
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

static int no_sync(spmd_group *g, int rank, int world) {
    model_t m;
    model_init(&m, 0);
    spmd_ddp *d = NULL;
    RREQ(make(g, &m, NULL, &d) == SPMD_OK);
    /* Two local steps accumulate (no communication), the third reduces the sum. */
    for (int i = 0; i < NP; i++) memset(m.grad[i], 0, COUNTS[i] * sizeof(float));
    for (int s = 0; s < 3; s++) {
        spmd_ddp_set_no_sync(d, s < 2);
        RREQ(spmd_ddp_prepare(d) == SPMD_OK);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < COUNTS[i]; k++) m.grad[i][k] += gval(rank, s, i, k);
            RREQ(spmd_ddp_grad_ready(d, i) == SPMD_OK);
        }
        RREQ(spmd_ddp_finish(d) == SPMD_OK);
        if (s < 2) RREQ(m.grad[0][0] == gval(rank, 0, 0, 0) + (s == 1 ? gval(rank, 1, 0, 0) : 0));
    }
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < COUNTS[i]; k++)
            RREQ(m.grad[i][k] == mean_of(world, 0, i, k) + mean_of(world, 1, i, k) + mean_of(world, 2, i, k));
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

static int compression(spmd_group *g, int rank, int world, spmd_ddp_compression c) {
    model_t m;
    model_init(&m, 0);
    spmd_ddp *d = NULL;
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.compression = c;
    RREQ(make(g, &m, &o, &d) == SPMD_OK);
    if (one_step(d, g, &m, rank, 1, 1)) return 1;
    /* fp16 keeps 11 bits, bf16 8 bits of mantissa */
    if (check_mean(g, &m, rank, world, 1, c == SPMD_DDP_COMPRESS_FP16 ? 2e-3f : 1e-2f)) return 1;
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

static int unused(spmd_group *g, int rank, int world) {
    model_t m;
    model_init(&m, 0);
    spmd_ddp *d = NULL;
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.find_unused_parameters = 1;
    RREQ(make(g, &m, &o, &d) == SPMD_OK);
    /* Parameter 3 gets no gradient on rank 0: reduced as zero there. */
    RREQ(spmd_ddp_prepare(d) == SPMD_OK);
    for (int i = NP - 1; i >= 0; i--) {
        for (size_t k = 0; k < COUNTS[i]; k++) m.grad[i][k] = gval(rank, 0, i, k);
        if (i == 3 && rank == 0) continue;
        RREQ(spmd_ddp_grad_ready(d, i) == SPMD_OK);
    }
    RREQ(spmd_ddp_finish(d) == SPMD_OK);
    float want = 0;
    for (int r = 1; r < world; r++) want += gval(r, 0, 3, 0);
    RREQ(m.grad[3][0] == want / (float)world);
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

/* Without find_unused_parameters, a missing gradient is an error naming the
 * parameter on the rank that missed it and an abort elsewhere — no hang. */
static int unused_error(spmd_group *g, int rank, int world) {
    (void)world;
    model_t m;
    model_init(&m, 0);
    spmd_ddp *d = NULL;
    RREQ(make(g, &m, NULL, &d) == SPMD_OK);
    spmd_status st = spmd_ddp_prepare(d);
    if (st != SPMD_OK) { /* rank 1 may abort before a slow rank's prepare is through */
        RREQ(rank != 1 && strstr(spmd_group_errmsg(g), "p0"));
        spmd_ddp_free(d);
        model_free(&m);
        return 0;
    }
    for (int i = NP - 1; i >= 0; i--) {
        if (i == 0 && rank == 1) continue;
        if (spmd_ddp_grad_ready(d, i) != SPMD_OK) break; /* (the abort may come first) */
    }
    st = spmd_ddp_finish(d);
    RREQ(st != SPMD_OK);
    if (rank == 1) RREQ(strstr(spmd_ddp_errmsg(d), "'p0'") && strstr(spmd_ddp_errmsg(d), "find_unused"));
    else RREQ(strstr(spmd_ddp_errmsg(d), "p0") || strstr(spmd_group_errmsg(g), "p0"));
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

static int mismatch(spmd_group *g, int rank, int world) {
    (void)world;
    spmd_ddp *d = NULL;
    float a[10] = {0}, ga[10], b[12] = {0}, gb[12];
    RREQ(spmd_ddp_create(g, NULL, &d) == SPMD_OK);
    RREQ(spmd_ddp_add_param(d, "fc.weight", a, ga, 10) == SPMD_OK);
    RREQ(spmd_ddp_add_param(d, "fc.bias", b, gb, rank == 1 ? 12 : 11) == SPMD_OK);
    spmd_status st = spmd_ddp_finalize(d);
    RREQ(st == SPMD_ERR_MISMATCH);
    RREQ(strstr(spmd_ddp_errmsg(d), "rank 1") && strstr(spmd_ddp_errmsg(d), "fc.bias"));
    spmd_ddp_free(d);
    return 0;
}

/* Uneven inputs: rank r runs 3 + r steps; the early finishers join. */
static int join(spmd_group *g, int rank, int world) {
    model_t m;
    model_init(&m, 0);
    spmd_ddp *d = NULL;
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.first_bucket_bytes = 64;
    o.bucket_cap_bytes = 2048;
    RREQ(spmd_ddp_create(g, &o, &d) == SPMD_OK);
    spmd_ddp_set_join_enabled(d, 1);
    RREQ(add_params(d, &m) == SPMD_OK);
    RREQ(spmd_ddp_add_buffer(d, "bn.running_mean", m.bufv, 4) == SPMD_OK);
    RREQ(spmd_ddp_finalize(d) == SPMD_OK);
    RREQ(sharing_as_expected(d, world));
    int steps = 3 + rank;
    for (int s = 0; s < steps; s++) {
        if (one_step(d, g, &m, rank, s, 1)) return 1;
        /* ranks that already joined contribute zeros */
        float want = 0;
        for (int r = 0; r < world; r++)
            if (s < 3 + r) want += gval(r, s, 2, 0);
        if (m.grad[2][0] != want / (float)world)
            fprintf(stderr, "rank %d step %d: got %g want %g\n", rank, s, m.grad[2][0], want / (float)world);
        RREQ(m.grad[2][0] == want / (float)world);
        /* an SGD step, and buffers (BatchNorm statistics) of this rank's own */
        for (int i = 0; i < NP; i++)
            for (size_t k = 0; k < COUNTS[i]; k++) m.param[i][k] -= 0.5f * m.grad[i][k];
        for (int k = 0; k < 4; k++) m.bufv[k] = (float)(100 * rank + s);
    }
    RREQ(spmd_ddp_join(d) == SPMD_OK);
    /* torch's _sync_final_model: every replica now holds the model of the
     * rank that joined last (world - 1, which trained every step) */
    for (int i = 0; i < NP; i++) {
        float *all = malloc(sizeof(float) * COUNTS[i] * (size_t)world);
        RREQ(all && spmd_all_gather(g, m.param[i], all, COUNTS[i], SPMD_F32) == SPMD_OK);
        for (int r = 0; r < world; r++)
            if (memcmp(all + (size_t)r * COUNTS[i], all + (size_t)(world - 1) * COUNTS[i],
                       COUNTS[i] * sizeof(float)) != 0) {
                fprintf(stderr, "rank %d: after join rank %d's parameter %d differs from the last joiner's\n",
                        rank, r, i);
                free(all);
                return 1;
            }
        free(all);
    }
    for (int k = 0; k < 4; k++) RREQ(m.bufv[k] == (float)(100 * (world - 1) + 3 + world - 2));
    /* The group is still in step: a plain collective works afterwards. */
    int32_t one = 1, sum = 0;
    RREQ(spmd_all_reduce(g, &one, &sum, 1, SPMD_I32, SPMD_SUM) == SPMD_OK && sum == world);
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

/* The failure cases' reducer: buckets [p4] [p3] [p2] [p1 p0], all shared,
 * and no buffer broadcast, so prepare() is not a collective. */
static spmd_status make_all_shared(spmd_group *g, model_t *m, spmd_ddp **d) {
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.broadcast_buffers = 0;
    o.first_bucket_bytes = 64;
    o.bucket_cap_bytes = 2048;
    model_init(m, 0);
    return make(g, m, &o, d);
}

/* A rank that dies while the others wait on its shared gradients: an error
 * naming it, no hang.  (Without sharing, the all_reduce fails the same way.) */
static int dead_peer(spmd_group *g, int rank, int world) {
    (void)world;
    model_t m;
    spmd_ddp *d = NULL;
    RREQ(make_all_shared(g, &m, &d) == SPMD_OK);
    if (rank == 1) _exit(0); /* gone without a goodbye, before its first step */
    RREQ(spmd_ddp_prepare(d) == SPMD_OK);
    for (int i = NP - 1; i >= 0; i--) RREQ(spmd_ddp_grad_ready(d, i) == SPMD_OK);
    spmd_status st = spmd_ddp_finish(d);
    RREQ(st != SPMD_OK);
    RREQ(strstr(spmd_ddp_errmsg(d), "rank 1"));
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

/* A rank that never reaches the step: the group's timeout fails the wait
 * (and the group, so the late rank hears of it). */
static int absent_peer(spmd_group *g, int rank, int world) {
    (void)world;
    model_t m;
    spmd_ddp *d = NULL;
    RREQ(make_all_shared(g, &m, &d) == SPMD_OK);
    spmd_group_set_timeout(g, 1500);
    if (rank == 1) {
        RREQ(spmd_barrier(g) != SPMD_OK); /* rank 0 never comes */
    } else {
        RREQ(spmd_ddp_prepare(d) == SPMD_OK);
        for (int i = NP - 1; i >= 0; i--) RREQ(spmd_ddp_grad_ready(d, i) == SPMD_OK);
        spmd_status st = spmd_ddp_finish(d);
        RREQ(st == SPMD_ERR_TIMEOUT);
        RREQ(strstr(spmd_ddp_errmsg(d), "timed out") && strstr(spmd_ddp_errmsg(d), "rank 1"));
    }
    spmd_ddp_free(d);
    model_free(&m);
    return 0;
}

/* Two reducers at once on disjoint subgroups (even and odd ranks): shared
 * memory works in subgroup ranks and the pairs do not see each other. */
static int subgroups(spmd_group *g, int rank, int world) {
    spmd_ddp *d = NULL;
    int even[2] = {0, 2}, odd[2] = {1, 3};
    spmd_group *se = NULL, *so = NULL;
    RREQ(world == 4);
    RREQ(spmd_group_new_subgroup(g, even, 2, &se) == SPMD_OK);
    RREQ(spmd_group_new_subgroup(g, odd, 2, &so) == SPMD_OK);
    spmd_group *sub = rank % 2 ? so : se;
    salt = 1000 * (rank % 2);
    RREQ(sub && !(rank % 2 ? se : so));
    int rc = basic(sub, spmd_group_rank(sub), 2, 1);
    spmd_group_destroy(sub);
    return rc;
}

typedef int (*case_fn)(spmd_group *, int, int);
static int which_case = 0;

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512];
    if (rank == off_rank) setenv(off_var, "0", 1);
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    int rc = 0;
    switch (which_case) {
    case 0:
        rc |= basic(g, rank, world, 1);
        rc |= basic(g, rank, world, 0);
        rc |= no_sync(g, rank, world);
        rc |= compression(g, rank, world, SPMD_DDP_COMPRESS_FP16);
        rc |= compression(g, rank, world, SPMD_DDP_COMPRESS_BF16);
        if (world > 1) rc |= unused(g, rank, world);
        if (world > 1) rc |= mismatch(g, rank, world);
        if (world > 1) rc |= join(g, rank, world);
        break;
    case 1:
        rc |= unused_error(g, rank, world);
        break;
    case 2:
        rc |= dead_peer(g, rank, world);
        break;
    case 3:
        rc |= absent_peer(g, rank, world);
        break;
    case 4:
        rc |= subgroups(g, rank, world);
        break;
    }
    spmd_group_destroy(g);
    if (rank == off_rank) unsetenv(off_var); /* under mpirun the process runs the next case too */
    return rc;
}

int main(int argc, char **argv) {
    unsetenv("SPMD_TRANSPORT"); /* this test chooses the paths it checks itself */
    setenv("SPMD_TIMEOUT", "30", 1);
    char report[512];
    spmd_status st;
    if (argc > 1 && !strcmp(argv[1], "dead_peer")) { /* alone: under mpirun --enable-recovery */
        shared_mode = 1;
        which_case = 2;
        st = test_spawn(2, body, NULL, 60000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "dead peer: %s", report);
        TEST_MAIN_END();
    }
    for (shared_mode = 0; shared_mode <= 1; shared_mode++) {
        for (int w = 1; w <= 4; w++) {
            which_case = 0;
            st = test_spawn(w, body, NULL, 120000, report, sizeof report);
            CHECK_MSG(st == SPMD_OK, "world %d%s: %s", w, shared_mode ? ", shared" : "", report);
        }
        which_case = 1;
        st = test_spawn(3, body, NULL, 60000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "unused-parameter error%s: %s", shared_mode ? ", shared" : "", report);
    }
    shared_mode = 1;
    for (which_case = 2; which_case <= 3; which_case++) {
        /* a rank that exits under mpirun ends the job (tests/mpi.cmake runs
         * this case alone, under mpirun --enable-recovery) */
        if (which_case == 2 && mpi_job_size()) continue;
        st = test_spawn(2, body, NULL, 60000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "%s: %s", which_case == 2 ? "dead peer" : "absent peer", report);
    }
    which_case = 4;
    st = test_spawn(4, body, NULL, 60000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "subgroups: %s", report);
    /* one rank refuses to share (SPMD_SHM=0): nobody shares, results
     * unchanged; SPMD_CMA=0 concerns collectives only, sharing stays */
    off_rank = 1;
    which_case = 0;
    static const char *vars[] = {"SPMD_SHM", "SPMD_CMA"};
    for (int v = 0; v < 2; v++) {
        off_var = vars[v];
        st = test_spawn(3, body, NULL, 120000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "%s=0 on rank 1: %s", off_var, report);
    }
    TEST_MAIN_END();
}
